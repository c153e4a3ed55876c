"""One attempt in its own process tree, which ends with the attempt and with the scheduler.

``python -m pilot.executors.isolation`` supervises one attempt. It reads the
attempt (pickled) on stdin, becomes a child subreaper, so that every process
the attempt starts stays its descendant even when it daemonises or opens its
own session, and forks the worker that calls
:func:`~pilot.executors.base.execute_attempt`. When the worker ends, however
it ends, the supervisor kills every descendant still alive (LibreOffice's
``oosplash`` and ``soffice.bin``, a self-check tool, a shell left behind),
then writes the outcome as JSON on its stdout. Told to stop (SIGTERM), or
orphaned because the process that started it died (``PR_SET_PDEATHSIG``),
it kills the tree and exits.

A crash of one attempt (its worker killed, ``os._exit`` in a run function)
touches no other attempt: each has its own supervisor. A worker that dies
without being asked to stop after inference began (the runner's phase mark)
leaves the run's own outcome (:func:`pilot.attempt.harness_fault_outcome`),
not an infrastructure error: its run is not drawn again. Every process of the
tree carries ``PILOT_ATTEMPT=<attempt folder>`` in its environment, and the
worker's pid and start time are in the attempt's launch mark, so that a
resume can :func:`sweep` whatever outlived a supervisor that was itself
killed with SIGKILL.
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from pilot.executors.proctree import (
    TAG_ENV,
    descendants,
    kill_descendants,
    kill_pids,
    procs_file,
    record_procs,
)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0)
        except OSError:
            pass


# --------------------------------------------------------------------------
# The scheduler's side
# --------------------------------------------------------------------------


def start(run_function: str | None, cell: Any, attempt_dir: str, node: str, backend: str) -> subprocess.Popen:
    """Start the supervisor of one attempt; its stdout will carry the outcome as JSON."""
    env = dict(os.environ)
    env[TAG_ENV] = str(attempt_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pilot.executors.isolation", str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,  # a terminal's Ctrl-C reaches the scheduler, which stops its attempts itself
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(pickle.dumps((run_function, cell, str(attempt_dir), node, backend)))
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the supervisor died at once; its exit status tells
    return proc


def died_outcome(why: str, attempt_dir: str) -> Any:
    """An infrastructure error for an attempt whose process died: unknown cost if it had launched, nothing if not."""
    from pilot.attempt import AttemptOutcome, was_launched

    launched = was_launched(Path(attempt_dir))
    return AttemptOutcome(infra_error=why, cost_usd=None if launched else 0.0, launched=launched)


def outcome_from(stdout: bytes, returncode: int | None, attempt_dir: str) -> Any:
    """The attempt's outcome from what its supervisor printed (or an infrastructure error saying how it died)."""
    from pilot.attempt import AttemptOutcome

    text = stdout.decode("utf-8", "replace").strip()
    if text:
        try:
            return AttemptOutcome.from_dict(json.loads(text.splitlines()[-1]))
        except (ValueError, TypeError):
            pass
    how = f"signal {-returncode}" if returncode is not None and returncode < 0 else f"exit status {returncode}"
    return died_outcome(f"the attempt's supervisor process ended without an outcome ({how})", attempt_dir)


def stop(proc: subprocess.Popen, *, grace_s: float = 5.0) -> None:
    """Ask a supervisor to end its attempt's tree (SIGTERM), then kill it if it does not."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        kill_pids([proc.pid, *descendants(proc.pid)])
        proc.wait()
    except OSError:
        pass


def run_isolated(
    run_function: str | None,
    cell: Any,
    attempt_dir: str,
    node: str,
    backend: str,
    *,
    should_stop: Any = None,
    poll_s: float = 0.5,
) -> Any:
    """Run one attempt under its own supervisor and wait for it (the dask task body).

    ``should_stop`` (no arguments) is asked every ``poll_s`` seconds; when it
    says yes (the task was cancelled, its scheduler is gone) the attempt's
    tree is ended and an infrastructure error returned.
    """
    proc = start(run_function, cell, attempt_dir, node, backend)
    assert proc.stdout is not None
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], poll_s)
            if ready:
                data = os.read(proc.stdout.fileno(), 1 << 16)
                if not data:
                    break
                chunks.append(data)
            elif should_stop is not None and should_stop():
                stop(proc)
                from pilot.attempt import AttemptOutcome

                return AttemptOutcome(
                    infra_error="the attempt was stopped: its scheduler cancelled it or went away", cost_usd=None
                )
        proc.wait()
    finally:
        if proc.poll() is None:
            stop(proc)
        proc.stdout.close()
    return outcome_from(b"".join(chunks), proc.returncode, attempt_dir)


# --------------------------------------------------------------------------
# The supervisor
# --------------------------------------------------------------------------


def _worker(write_fd: int, payload: tuple) -> None:
    """The forked worker: run the attempt, send its outcome to the supervisor, exit."""
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    os.dup2(2, 1)  # whatever the run function prints must not mix with the outcome on stdout
    code = 0
    try:
        from pilot.executors.base import execute_attempt

        run_function, cell, attempt_dir, node, backend = payload
        outcome = execute_attempt(run_function, cell, attempt_dir, node, backend)
        data = json.dumps(outcome.to_dict(), default=str).encode()
        view = memoryview(data)
        while view:
            n = os.write(write_fd, view)
            view = view[n:]
    except BaseException:  # noqa: BLE001 - the supervisor reports a worker without outcome
        code = 70
    os._exit(code)


def supervise(payload: tuple, parent_pid: int) -> int:
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent_pid:
        return 75  # the scheduler died before we could tie ourselves to it
    stopping = {"yes": False}
    worker_pid = {"pid": 0}

    def on_term(signum: int, frame: Any) -> None:
        stopping["yes"] = True
        if worker_pid["pid"]:
            kill_pids([worker_pid["pid"], *descendants(worker_pid["pid"])])

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _worker(w, payload)
    worker_pid["pid"] = pid
    os.close(w)
    chunks: list[bytes] = []
    status = None
    listing, seen = procs_file(payload[2]), set()
    while status is None:
        seen = record_procs(listing, descendants(os.getpid()), seen)
        try:
            ready, _, _ = select.select([r], [], [], 0.2)
        except InterruptedError:
            ready = []
        if ready:
            data = os.read(r, 1 << 16)
            if data:
                chunks.append(data)
                continue
        try:
            done, st = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, st = pid, 0
        if done == pid:
            status = st
    # Drain what the worker wrote before it ended (a descendant may still hold the pipe open).
    os.set_blocking(r, False)
    while True:
        try:
            data = os.read(r, 1 << 16)
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(r)
    kill_descendants(os.getpid())
    if stopping["yes"]:
        return 143
    text = b"".join(chunks)
    if not text:
        # The worker died without an outcome (killed, crashed, os._exit in the run function): say how. Nobody asked
        # it to stop, so after inference began its death is the run's own outcome, not a fresh draw.
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
        why = f"the attempt's worker process died ({how})"
        from pilot.attempt import harness_fault_outcome, inference_began

        outcome = harness_fault_outcome(Path(payload[2]), why) if inference_began(Path(payload[2])) else None
        text = json.dumps((outcome or died_outcome(why, payload[2])).to_dict(), default=str).encode()
    sys.stdout.buffer.write(text + b"\n")
    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parent_pid = int(argv[0]) if argv else os.getppid()
    payload = pickle.loads(sys.stdin.buffer.read())
    return supervise(payload, parent_pid)


if __name__ == "__main__":
    sys.exit(main())
