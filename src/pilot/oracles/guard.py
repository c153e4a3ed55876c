"""Parse hostile files in a child process first, under a time limit and a memory limit.

openpyxl, python-docx and pypdf cannot be interrupted from inside the
process. Before the evaluator parses a deliverable, a child process
(``parse_probe.py``) parses it under ``RLIMIT_AS`` and a per-file time
limit; only a file the child read successfully is parsed in the evaluator.
One child serves a whole process, file by file, so its start-up and imports
are paid once; a hang or a crash is charged to the file the child was
reading, and a fresh child takes the files after it.

The time limit is charged on the child's CPU time, so a busy machine does
not turn a slow-but-sound file into a refused one; a wall-clock limit
(:data:`WALL_FACTOR` times longer) still stops a child that waits instead of
computing. A verdict is remembered only when it is a property of the bytes
(read, cannot be read, out of memory under the given limit): a timeout or a
crash may come from the machine's load, so it is never remembered.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import json
import os
import resource
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

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
    """A pre-exec hook limiting a child's address space."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    return apply


def _child_setup(mem: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        # The child dies with the process that started it, whatever ends that process.
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL

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
#: A child serves at most this many files before a fresh one takes over (its heap does not grow for ever).
FILES_PER_CHILD = 200


class _Child:
    """One parse child under a memory limit, serving files one by one over its stdin until it is stopped."""

    def __init__(self, memory_limit_bytes: int, *, preload: bool = False) -> None:
        self.memory_limit_bytes = memory_limit_bytes
        self.probe = PROBE
        self.owner = os.getpid()
        self.served = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(self.probe), "--serve", *(["--preload"] if preload else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=_child_setup(memory_limit_bytes),
            start_new_session=True,
        )
        self.buf = b""

    def usable(self, memory_limit_bytes: int) -> bool:
        return (
            self.owner == os.getpid()
            and self.proc.poll() is None
            and self.memory_limit_bytes == memory_limit_bytes
            and self.probe == PROBE
            and self.served < FILES_PER_CHILD
        )

    def ask(self, path: Path, per_file_timeout_s: float) -> tuple[str | None, bool]:
        """(verdict, child still usable) for one file, charged on the child's CPU time since the question."""
        wall_limit = per_file_timeout_s * WALL_FACTOR
        self.served += 1
        try:
            self.proc.stdin.write(json.dumps({"path": str(path)}).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return "crashed the reader or exhausted its memory limit", False
        started = time.monotonic()
        cpu_start = _cpu_seconds(self.proc.pid) or 0.0
        while True:
            if b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if msg.get("ok"):
                    return None, True
                # After a memory failure the child's heap is suspect: it is not asked again.
                return f"cannot be read ({msg.get('error', 'unknown error')})", not msg.get("memory")
            waited = time.monotonic() - started
            cpu = _cpu_seconds(self.proc.pid)
            # Without /proc (not Linux) the CPU time is unknown and the wall clock is the limit itself.
            over = cpu - cpu_start > per_file_timeout_s if cpu is not None else waited > per_file_timeout_s
            if over or waited > wall_limit:
                return f"could not be read within {per_file_timeout_s:g} s (stopped)", False
            ready, _, _ = select.select([self.proc.stdout], [], [], min(_POLL_S, max(wall_limit - waited, 0.0)))
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return "crashed the reader or exhausted its memory limit", False
            self.buf += chunk

    def stop(self) -> None:
        if self.owner != os.getpid():
            return  # a forked copy: the child belongs to the parent process
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
        self.proc.wait()
        with contextlib.suppress(OSError):
            self.proc.stdout.close()


_CHILD: _Child | None = None
_CHILD_LOCK = threading.Lock()


def _stop_child() -> None:
    global _CHILD
    if _CHILD is not None:
        _CHILD.stop()
        _CHILD = None


atexit.register(_stop_child)


def prestart(memory_limit_bytes: int = MEMORY_LIMIT_BYTES) -> None:
    """Start the process's parse child now, importing every office library at once, so that its start-up
    overlaps the caller's own imports (``pilot judge``, ``pilot check``)."""
    global _CHILD
    with _CHILD_LOCK:
        if _CHILD is None or not _CHILD.usable(memory_limit_bytes):
            _stop_child()
            _CHILD = _Child(memory_limit_bytes, preload=True)


def probe_files(
    paths: Iterable[Path],
    *,
    per_file_timeout_s: float = PER_FILE_TIMEOUT_S,
    memory_limit_bytes: int = MEMORY_LIMIT_BYTES,
) -> dict[Path, str | None]:
    """For each path, None when it parses in bounded time and memory, else the reason.

    One child per process serves every file, so the interpreter's start and the
    office libraries' imports are paid once per process, not once per run. A
    child that timed out, crashed or ran out of memory is stopped, and the next
    file gets a fresh one; a memory verdict reached in a child that had served
    other files is checked again in a fresh child, so it belongs to the file.
    """
    global _CHILD
    results: dict[Path, str | None] = {}
    with _CHILD_LOCK:
        for path in (Path(p) for p in paths):
            for attempt in range(2):
                if _CHILD is None or not _CHILD.usable(memory_limit_bytes):
                    _stop_child()
                    _CHILD = _Child(memory_limit_bytes)
                fresh = _CHILD.served == 0
                reason, keep = _CHILD.ask(path, per_file_timeout_s)
                if not keep:
                    _stop_child()
                if reason and "memory" in reason and not fresh and attempt == 0:
                    continue
                break
            results[path] = reason
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

    limits = (
        float(kwargs.get("per_file_timeout_s", PER_FILE_TIMEOUT_S)),
        int(kwargs.get("memory_limit_bytes", MEMORY_LIMIT_BYTES)),
    )
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
