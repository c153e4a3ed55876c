"""Executors: where attempts run. ``local`` (a process pool with virtual nodes) and ``dask`` (one worker per node)."""

from pilot.attempt import AttemptOutcome, CellSpec
from pilot.executors.base import Executor, RunFunction, execute_attempt, resolve_run_function

__all__ = ["AttemptOutcome", "CellSpec", "Executor", "RunFunction", "execute_attempt", "resolve_run_function"]
