"""The default executor: a local process pool whose slots stand for virtual nodes.

The scheduler still chooses a node for each run from the nodes file; here a
node is a label passed to the run function and stored on the attempt, while
the work runs in one of ``workers`` processes of this machine. Worker
processes are tied to the scheduler's life (Linux ``PR_SET_PDEATHSIG``): a
scheduler killed with SIGKILL takes its in-flight attempts with it instead
of leaving them running and spending unseen. ``processes=False`` runs each
attempt inline in the scheduler's process (benchmarks of the scheduler's own
overhead, debugging).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from pilot.executors.base import AttemptOutcome, CellSpec, execute_attempt

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Pool initializer: ask the kernel to SIGKILL this worker when the scheduler dies."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except OSError:
            pass


class LocalExecutor:
    """Run attempts in a local process pool (or inline)."""

    def __init__(self, run_function: str | None, workers: int, *, processes: bool = True) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.run_function = run_function
        self.workers = workers
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[Future, tuple[int, ProcessPoolExecutor]] = {}
        self._done_inline: list[tuple[int, AttemptOutcome]] = []

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_die_with_parent)
        return self._pool

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None:
        if not self.processes:
            self._done_inline.append((token, execute_attempt(self.run_function, cell, str(attempt_dir), node, backend)))
            return
        try:
            pool = self._get_pool()
            fut = pool.submit(execute_attempt, self.run_function, cell, str(attempt_dir), node, backend)
        except BrokenProcessPool:
            # A worker died since the last wait: the pool is unusable; a fresh one takes this attempt
            # (the old pool's futures fail on their own and are reported by wait).
            self._pool = None
            pool = self._get_pool()
            fut = pool.submit(execute_attempt, self.run_function, cell, str(attempt_dir), node, backend)
        self._futures[fut] = (token, pool)

    def wait(self, timeout: float) -> list[tuple[int, AttemptOutcome]]:
        if self._done_inline:
            done, self._done_inline = self._done_inline, []
            return done
        if not self._futures:
            return []
        finished, _ = wait(list(self._futures), timeout=timeout, return_when=FIRST_COMPLETED)
        out: list[tuple[int, AttemptOutcome]] = []
        broken: set[ProcessPoolExecutor] = set()
        for fut in finished:
            token, pool = self._futures.pop(fut)
            try:
                out.append((token, fut.result()))
            except BrokenProcessPool as exc:
                broken.add(pool)
                out.append((token, AttemptOutcome(infra_error=f"local worker process died: {exc}", cost_usd=None)))
            except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
                out.append((token, AttemptOutcome(infra_error=f"{type(exc).__name__}: {exc}", cost_usd=None)))
        for pool in broken:
            # Every other attempt of a broken pool fails too; a fresh pool serves the reruns.
            for fut, (token, owner) in list(self._futures.items()):
                if owner is pool:
                    del self._futures[fut]
                    out.append((token, AttemptOutcome(infra_error="local worker process pool broke while the attempt ran", cost_usd=None)))
            pool.shutdown(wait=False, cancel_futures=True)
            if self._pool is pool:
                self._pool = None
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
