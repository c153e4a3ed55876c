"""The default executor: local processes whose slots stand for virtual nodes.

The scheduler still chooses a node for each run from the nodes file; here a
node is a label passed to the run function and stored on the attempt, while
the work runs on this machine. Each attempt runs under its own supervisor
process (:mod:`pilot.executors.isolation`): a crashing attempt harms no other,
every process an attempt starts ends with it, and a scheduler that dies
(even by SIGKILL) takes its attempts' trees with it. ``processes=False``
runs each attempt inline in the scheduler's process (benchmarks of the
scheduler's own overhead, debugging).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from pathlib import Path

from pilot.attempt import AttemptOutcome, CellSpec
from pilot.executors import isolation
from pilot.executors.base import execute_attempt


class LocalExecutor:
    """Run attempts in isolated local processes (or inline)."""

    def __init__(self, run_function: str | None, workers: int, *, processes: bool = True) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.run_function = run_function
        self.workers = workers
        self.processes = processes
        self._running: dict[
            int, tuple[subprocess.Popen, str, list[bytes]]
        ] = {}  # token -> (supervisor, attempt dir, output)
        self._queued: list[tuple[int, CellSpec, str, str, str]] = []
        self._done_inline: list[tuple[int, AttemptOutcome]] = []
        self._sel = selectors.DefaultSelector()

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None:
        if not self.processes:
            self._done_inline.append((token, execute_attempt(self.run_function, cell, str(attempt_dir), node, backend)))
            return
        self._queued.append((token, cell, str(attempt_dir), node, backend))
        self._start_queued()

    def _start_queued(self) -> None:
        # At most ``workers`` attempts at once; the scheduler's slots normally keep within that already.
        while self._queued and len(self._running) < self.workers:
            token, cell, attempt_dir, node, backend = self._queued.pop(0)
            proc = isolation.start(self.run_function, cell, attempt_dir, node, backend)
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            self._running[token] = (proc, attempt_dir, [])
            self._sel.register(proc.stdout, selectors.EVENT_READ, token)

    def wait(self, timeout: float) -> list[tuple[int, AttemptOutcome]]:
        if self._done_inline:
            done, self._done_inline = self._done_inline, []
            return done
        if not self._running:
            return []
        out: list[tuple[int, AttemptOutcome]] = []
        deadline = time.monotonic() + timeout
        while not out:
            left = deadline - time.monotonic()
            for key, _ in self._sel.select(max(0.0, left)):
                token = key.data
                proc, attempt_dir, chunks = self._running[token]
                try:
                    data = os.read(key.fileobj.fileno(), 1 << 16)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                if data:
                    chunks.append(data)
                    continue
                # End of output: the supervisor has finished (its tree is gone).
                self._sel.unregister(key.fileobj)
                proc.stdout.close()  # type: ignore[union-attr]
                proc.wait()
                del self._running[token]
                out.append((token, isolation.outcome_from(b"".join(chunks), proc.returncode, attempt_dir)))
            if left <= 0:
                break
        self._start_queued()
        return out

    def close(self) -> None:
        """Stop every attempt still running (each supervisor ends its tree) and forget the queued ones."""
        self._queued.clear()
        procs = [p for p, _, _ in self._running.values()]
        for p in procs:
            try:
                p.send_signal(15)
            except OSError:
                pass
        for p in procs:
            isolation.stop(p)
            if p.stdout is not None:
                try:
                    self._sel.unregister(p.stdout)
                except (KeyError, ValueError):
                    pass
                p.stdout.close()
        self._running.clear()
        self._sel.close()
        self._sel = selectors.DefaultSelector()
