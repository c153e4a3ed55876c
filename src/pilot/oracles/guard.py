"""Parse hostile files in a child process first, under a timeout and a memory limit.

openpyxl, python-docx and pypdf cannot be interrupted from inside the
process. Before the evaluator parses a deliverable, a child process
(``parse_probe.py``) parses it under ``RLIMIT_AS`` and a per-file timeout;
only a file the child read successfully is parsed in the evaluator. Many
files share one child; a hang or a crash is charged to the file the child
was reading, and the child is restarted for the files after it.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

PROBE = Path(__file__).with_name("parse_probe.py")
PER_FILE_TIMEOUT_S = 30.0
MEMORY_LIMIT_BYTES = 2 * 1024**3


def _limit(mem: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    return apply


def probe_files(
    paths: Iterable[Path],
    *,
    per_file_timeout_s: float = PER_FILE_TIMEOUT_S,
    memory_limit_bytes: int = MEMORY_LIMIT_BYTES,
) -> dict[Path, str | None]:
    """For each path, None when it parses in bounded time and memory, else the reason."""
    pending = [Path(p) for p in paths]
    results: dict[Path, str | None] = {}
    while pending:
        proc = subprocess.Popen(
            [sys.executable, "-I", str(PROBE), *map(str, pending)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=_limit(memory_limit_bytes), start_new_session=True,
        )
        done = 0
        buf = b""
        deadline = time.monotonic() + per_file_timeout_s
        failure = None
        while done < len(pending):
            left = deadline - time.monotonic()
            if left <= 0:
                failure = f"could not be read within {per_file_timeout_s:g} s (stopped)"
                break
            ready, _, _ = select.select([proc.stdout], [], [], left)
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
                deadline = time.monotonic() + per_file_timeout_s
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


_CACHE: dict[str, str | None] = {}


def probe_cached(paths: Iterable[Path], **kwargs) -> dict[Path, str | None]:
    """:func:`probe_files` with results remembered by content hash (one child for all misses)."""
    from pilot.oracles.hashing import file_digest

    paths = [Path(p) for p in paths]
    digests = {p: file_digest(p) for p in paths}
    missing = [p for p in paths if digests[p] not in _CACHE]
    # One file per digest goes to the child.
    first: dict[str, Path] = {}
    for p in missing:
        first.setdefault(digests[p], p)
    if first:
        for p, reason in probe_files(list(first.values()), **kwargs).items():
            _CACHE[digests[p]] = reason
    return {p: _CACHE[digests[p]] for p in paths}


def clear_cache() -> None:
    """Forget earlier verdicts (benchmarks measure the parse afresh)."""
    _CACHE.clear()
