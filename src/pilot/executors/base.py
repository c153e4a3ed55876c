"""What the scheduler hands an executor, and what comes back.

A run function performs one attempt of one cell on a node and returns an
:class:`AttemptOutcome`; it is named by a dotted reference
(``"package.module:function"``) so that it can be imported inside a worker
process or on another machine. :func:`execute_attempt` is the function the
executors actually ship: it resets the attempt's workspace, calls the run
function, turns an escaping exception into an infrastructure error (or,
after inference began, into the run's own outcome), and leaves the outcome
on disk so that an attempt which finished just before a crash of the
scheduler is charged what it really cost.
"""

from __future__ import annotations

import importlib
import inspect
import json
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pilot.attempt import OUTCOME_FILE, AttemptOutcome, CellSpec, harness_fault_outcome, inference_began, launch_mark
from pilot.executors.proctree import launch_mark_text

PIPELINE_RUN_FUNCTION = "pilot.pipeline:run_cell"
#: Run functions of stored studies whose module has moved since: old module -> where it lives now.
MOVED_RUN_MODULES = {"pilot.executors.fake_runs": "pilot.simulated.fake_runs"}


RunFunction = Callable[[CellSpec, Path, str, str, int], AttemptOutcome]


class ScheduleError(RuntimeError):
    """The study cannot be scheduled as asked (raised by the scheduler, and by an executor that lost its cluster)."""


class Executor(Protocol):
    """Runs attempts on nodes. ``submit`` must not block; ``wait`` returns finished ones."""

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None: ...

    def wait(self, timeout: float) -> list[tuple[int, AttemptOutcome]]: ...

    def close(self) -> None: ...


def resolve_run_function(ref: str | None) -> RunFunction:
    """Import a run function from ``"module:function"`` (``None``: :data:`PIPELINE_RUN_FUNCTION`, runner, judges and
    outcomes).

    A study stores its run function as this reference; one whose module has
    moved since (:data:`MOVED_RUN_MODULES`) is found where it lives now.
    """
    ref = PIPELINE_RUN_FUNCTION if ref is None else ref
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"run function {ref!r}: expected 'package.module:function'")
    module_name = MOVED_RUN_MODULES.get(module_name, module_name)
    module = importlib.import_module(module_name)
    try:
        fn = getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"run function {ref!r}: module {module_name} has no {attr!r}") from exc
    if not callable(fn):
        raise ValueError(f"run function {ref!r} is not callable")
    return fn


def check_run_function(ref: str | None) -> RunFunction:
    """Import a run function and check it takes (cell, attempt_dir, node, backend, seed); ValueError saying why not."""
    try:
        fn = resolve_run_function(ref)
    except ImportError as exc:
        raise ValueError(f"run function {ref!r}: cannot import its module ({exc})") from exc
    try:
        inspect.signature(fn).bind(None, None, None, None, None)
    except TypeError as exc:
        raise ValueError(f"run function {ref!r} must take (cell, attempt_dir, node, backend, seed): {exc}") from exc
    except ValueError:
        pass  # no signature to inspect (a builtin): trusted as given
    return fn


def reset_workspace(attempt_dir: Path) -> None:
    """A fresh, empty folder for the attempt (whatever an earlier try left is removed, its launch mark included)."""
    if attempt_dir.exists():
        shutil.rmtree(attempt_dir)
    launch_mark(attempt_dir).unlink(missing_ok=True)
    attempt_dir.mkdir(parents=True)


def execute_attempt(
    run_function: str | None, cell: CellSpec, attempt_dir: str, node: str, backend: str
) -> AttemptOutcome:
    """Reset the workspace, run one attempt, and keep its outcome on disk.

    An exception escaping the run function before inference began (the
    runner's phase mark, :func:`pilot.attempt.inference_began`: no model
    request yet) is an infrastructure error of the attempt (with its
    traceback), so the scheduler reruns it up to its limit instead of losing
    the run. After inference began it is the run's own outcome
    (:func:`pilot.attempt.harness_fault_outcome`): a rerun would give the run
    a fresh draw, which nothing the worker made may decide. A failure before
    the run function is called (the workspace cannot be reset, the function
    cannot be imported) spent nothing: the attempt is marked as never
    launched.
    """
    folder = Path(attempt_dir)
    launched = False
    try:
        reset_workspace(folder)
        fn = resolve_run_function(run_function)
        launch_mark(folder).write_text(launch_mark_text(), encoding="utf-8")
        launched = True
        outcome = fn(cell, folder, node, backend, cell.seed)
        if not isinstance(outcome, AttemptOutcome):
            raise TypeError(f"run function returned {type(outcome).__name__}, not AttemptOutcome")
    except Exception as exc:  # noqa: BLE001 - any failure of the harness: an infra error, or after inference the run's
        tb = traceback.format_exc(limit=8)
        if launched and inference_began(folder):
            outcome = harness_fault_outcome(folder, f"{type(exc).__name__}: {exc}")
            outcome.record.setdefault("notes", []).append(f"traceback of the harness fault:\n{tb}")
        elif launched:
            # The failure may have come after inference began: its spend is unknown, charged at the reservation.
            outcome = AttemptOutcome(infra_error=f"{type(exc).__name__}: {exc}\n{tb}", cost_usd=None)
        else:
            outcome = AttemptOutcome(
                infra_error=f"never launched: {type(exc).__name__}: {exc}\n{tb}", cost_usd=0.0, launched=False
            )
    try:
        (folder / OUTCOME_FILE).write_text(json.dumps(outcome.to_dict(), default=str), encoding="utf-8")
    except OSError:
        pass  # the outcome still travels back; only the crash-time charge falls back to the reservation
    return outcome
