"""The contract between ``instance.py`` and the server process it starts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"  # the only address the portal ever binds
# Exit codes of the server process that the parent turns into a PortalStartError reason.
EXIT_CONTENT = 3
EXIT_BIND = 4
EXIT_SETUP = 5


@dataclass(frozen=True)
class ServerLimits:
    """waitress's limits, sized for one run's worker rather than waitress's public-site defaults.

    One worker opens a handful of connections at a time (a browser six), so
    ``connection_limit`` leaves room for a script that forgets to close
    hundreds; an idle connection costs a file descriptor, not a thread, and is
    closed after ``channel_timeout_s`` (checked every ``cleanup_interval_s``),
    so even a flood over the limit clears within seconds instead of waitress's
    two minutes. A body is refused (413) from its declared length, before it
    is read, above ``max_body_bytes``; ``threads`` serve requests, never wait
    on a slow client (waitress buffers both ways).
    """

    connection_limit: int = 256
    channel_timeout_s: int = 10
    cleanup_interval_s: int = 2
    max_body_bytes: int = 64 * 1024
    max_header_bytes: int = 16 * 1024
    threads: int = 4


def check_port(port: int) -> int:
    """``port`` if it is 0 (any free port) or a TCP port number; ValueError otherwise."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port {port!r}: must be a whole number from 1 to 65535 (or 0 for any free port)")
    return port


def port_argument(text: str) -> int:
    """argparse ``type=`` for a port option: refuses ``99999`` and ``-1`` at the command line."""
    try:
        return check_port(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
