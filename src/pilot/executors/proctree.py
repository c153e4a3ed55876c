"""Process trees and launch marks: what an attempt left running, found through Linux ``/proc``.

Every process of an attempt's tree carries ``PILOT_ATTEMPT=<attempt folder>``
in its environment (:data:`TAG_ENV`), and the worker's pid and start time
are written to the attempt's launch mark (``attempt-N.launched`` beside its
folder) just before its run function is called, from when money may have
been spent. A resume uses both to :func:`sweep` what outlived a supervisor
killed with SIGKILL, and the store reads the mark to tell an attempt that
never launched (released at no charge) from one that did.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

TAG_ENV = "PILOT_ATTEMPT"


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``, parents before their children."""
    seen: list[int] = []
    stack = children(pid)
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.append(p)
        stack.extend(children(p))
    return seen


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot),
    which tells a process from a later one with its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2 :][:1] not in ("Z", "X")


def kill_pids(pids: Iterable[int]) -> list[int]:
    """SIGKILL each pid (stopping each first so that none forks while the others die); returns those signalled."""
    pids = [p for p in pids if p != os.getpid()]
    for p in pids:
        try:
            os.kill(p, signal.SIGSTOP)
        except OSError:
            pass
    hit = []
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
            hit.append(p)
        except OSError:
            pass
    return hit


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants(pid: int, *, timeout: float = 5.0) -> int:
    """Kill every descendant of ``pid`` until none is left (reaping them if ``pid`` is this process);
    returns how many."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in descendants(pid) if _alive(p)]
        if pid == os.getpid():
            _reap()
        if not alive or time.monotonic() > deadline:
            break
        killed |= set(kill_pids(alive))
        time.sleep(0.01)
    if pid == os.getpid():
        _reap()
    return len(killed)


def tagged(prefix: str) -> list[int]:
    """Processes whose environment carries ``PILOT_ATTEMPT`` starting with ``prefix``."""
    needle = f"{TAG_ENV}={prefix}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(needle) for item in env.split(b"\0")):
            out.append(int(entry))
    return out


def sweep(prefix: str, launch_marks: Iterable[Path] = ()) -> list[int]:
    """End every process left by attempts under ``prefix``, and their descendants.

    Found three ways: the ``PILOT_ATTEMPT`` tag in their environment; the
    worker named in each launch mark; the processes each supervisor last
    listed beside its attempt (``attempt-N.procs``: this finds a process
    that cleared its environment). A pid counts only with the start time
    recorded for it, never a later process that reused the number. Call
    only when no live scheduler owns those attempts (under the study's
    lock): it ends them whatever they are doing.
    """
    if not os.path.isdir("/proc"):
        return []
    roots = set(tagged(prefix))
    for mark in launch_marks:
        pid, started = read_launch_mark(mark)
        if pid is not None and started is not None and start_time(pid) == started:
            roots.add(pid)
        listed = Path(str(mark)[: -len(".launched")] + ".procs") if str(mark).endswith(".launched") else None
        for p, started in read_procs(listed) if listed else []:
            if start_time(p) == started:
                roots.add(p)
    victims: list[int] = []
    for r in roots:
        victims += [r, *descendants(r)]
    victims = [p for p in dict.fromkeys(victims) if _alive(p) and p != os.getpid()]
    kill_pids(victims)
    return victims


def procs_file(attempt_dir: str | Path) -> Path:
    """Beside ``attempt-N/``: the processes the attempt's supervisor last saw under it (pid and start time per line)."""
    attempt_dir = Path(attempt_dir)
    return attempt_dir.with_name(attempt_dir.name + ".procs")


def record_procs(path: Path, pids: list[int], last: set[int]) -> set[int]:
    """Keep the list of the attempt's processes up to date, so that a sweep finds them even without their tag."""
    now = set(pids)
    if now == last or not path.parent.is_dir():
        return last
    lines = "".join(f"{p} {start_time(p) or 0}\n" for p in sorted(now))
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(lines, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return last
    return now


def read_procs(path: Path) -> list[tuple[int, int]]:
    try:
        return [
            (int(a), int(b))
            for a, b in (ln.split() for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip())
        ]
    except (OSError, ValueError):
        return []


def launch_mark_text() -> str:
    """What the launch mark holds: the worker's pid and start time."""
    pid = os.getpid()
    return f"{pid} {start_time(pid) or 0}\n"


def read_launch_mark(path: Path) -> tuple[int | None, int | None]:
    try:
        parts = Path(path).read_text(encoding="utf-8").split()
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else None
    except (OSError, ValueError, IndexError):
        return None, None
