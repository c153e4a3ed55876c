"""Signals for the commands that serve until stopped (``pilot view``, ``pilot grading serve``)."""

from __future__ import annotations


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM stop a server whatever its parent left it: a shell's background job starts
    with SIGINT ignored, and a blocked signal mask is inherited across exec."""
    import signal

    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _stop)
