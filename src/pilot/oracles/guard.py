"""Parse hostile files in a child process first, under a time limit and a memory limit.

openpyxl, python-docx and pypdf cannot be interrupted from inside the
process. Before the evaluator parses a deliverable, a child process
(``parse_probe.py``) parses it under ``RLIMIT_AS`` and a per-file time
limit; only a file the child read successfully is parsed in the evaluator.
Many files share one child; a hang or a crash is charged to the file the
child was reading, and the child is restarted for the files after it.

The time limit is charged on the child's CPU time, so a busy machine does
not turn a slow-but-sound file into a refused one; a wall-clock limit
(:data:`WALL_FACTOR` times longer) still stops a child that waits instead of
computing. A verdict is remembered only when it is a property of the bytes
(read, cannot be read, out of memory under the given limit): a timeout or a
crash may come from the machine's load, so it is never remembered.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import resource
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator

PROBE = Path(__file__).with_name("parse_probe.py")
#: Per-file limit on the child's CPU time (its start-up is charged to the first file).
PER_FILE_TIMEOUT_S = 30.0
#: The wall-clock limit per file is this many times the CPU limit: it stops a child that waits, not a slow machine.
WALL_FACTOR = 10.0
MEMORY_LIMIT_BYTES = 2 * 1024**3
#: How often the parent looks at the child's CPU time while it waits for a verdict.
_POLL_S = 0.25
_TICKS = os.sysconf("SC_CLK_TCK")


def _limit(mem: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    return apply


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a running process (Linux /proc), None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


#: Reasons that come from the machine rather than the file (never remembered).
_TRANSIENT_PREFIXES = ("could not be read within", "crashed the reader")


def probe_files(
    paths: Iterable[Path],
    *,
    per_file_timeout_s: float = PER_FILE_TIMEOUT_S,
    memory_limit_bytes: int = MEMORY_LIMIT_BYTES,
) -> dict[Path, str | None]:
    """For each path, None when it parses in bounded time and memory, else the reason."""
    pending = [Path(p) for p in paths]
    results: dict[Path, str | None] = {}
    wall_limit = per_file_timeout_s * WALL_FACTOR
    while pending:
        proc = subprocess.Popen(
            [sys.executable, "-I", str(PROBE), *map(str, pending)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=_limit(memory_limit_bytes), start_new_session=True,
        )
        done = 0
        buf = b""
        started = time.monotonic()
        cpu_start = 0.0
        failure = None
        while done < len(pending):
            waited = time.monotonic() - started
            cpu = _cpu_seconds(proc.pid)
            # Without /proc (not Linux) the CPU time is unknown and the wall clock is the limit itself.
            over = cpu - cpu_start > per_file_timeout_s if cpu is not None else waited > per_file_timeout_s
            if over or waited > wall_limit:
                failure = f"could not be read within {per_file_timeout_s:g} s (stopped)"
                break
            ready, _, _ = select.select([proc.stdout], [], [], min(_POLL_S, max(wall_limit - waited, 0.0)))
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                failure = "crashed the reader or exhausted its memory limit"
                break
            buf += chunk
            while b"\n" in buf and done < len(pending):
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue
                results[pending[done]] = None if msg.get("ok") else f"cannot be read ({msg.get('error', 'unknown error')})"
                done += 1
                started = time.monotonic()
                cpu_start = _cpu_seconds(proc.pid) or cpu_start
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if failure is not None and done < len(pending):
            results[pending[done]] = failure
            done += 1
        pending = pending[done:]
    return results


def is_transient(reason: str | None) -> bool:
    """Whether a verdict may come from the machine's load rather than the file's bytes."""
    return reason is not None and reason.startswith(_TRANSIENT_PREFIXES)


#: Verdicts by (content digest, time limit, memory limit): a verdict holds for the limits it was reached under.
_CACHE: dict[tuple[str, float, int], str | None] = {}
#: Transient verdicts (timeouts, crashes) of the evaluation or package in progress, see :func:`holding`.
_HELD: contextvars.ContextVar[dict | None] = contextvars.ContextVar("guard_held", default=None)


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """Within this block, a timeout or a crash is remembered too, so one evaluation (or one judged
    package) asks the child once per file and every check in it sees the same verdict; the memory
    ends with the outermost block."""
    if _HELD.get() is not None:
        yield
        return
    token = _HELD.set({})
    try:
        yield
    finally:
        _HELD.reset(token)


def probe_cached(paths: Iterable[Path], **kwargs) -> dict[Path, str | None]:
    """:func:`probe_files` with the verdicts that are properties of the bytes remembered (one child for all misses)."""
    from pilot.oracles.hashing import file_digest

    limits = (float(kwargs.get("per_file_timeout_s", PER_FILE_TIMEOUT_S)), int(kwargs.get("memory_limit_bytes", MEMORY_LIMIT_BYTES)))
    held = _HELD.get()
    known = {**(held or {}), **_CACHE}
    paths = [Path(p) for p in paths]
    keys = {p: (file_digest(p), *limits) for p in paths}
    # One file per digest goes to the child.
    first: dict[tuple[str, float, int], Path] = {}
    for p in paths:
        if keys[p] not in known:
            first.setdefault(keys[p], p)
    if first:
        for p, reason in probe_files(list(first.values()), **kwargs).items():
            known[keys[p]] = reason
            if not is_transient(reason):
                _CACHE[keys[p]] = reason
            elif held is not None:
                held[keys[p]] = reason
    return {p: known[keys[p]] for p in paths}


def clear_cache() -> None:
    """Forget earlier verdicts (benchmarks measure the parse afresh)."""
    _CACHE.clear()
