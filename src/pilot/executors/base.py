"""What the scheduler hands an executor, and what comes back.

A run function performs one attempt of one cell on a node and returns an
:class:`AttemptOutcome`; it is named by a dotted reference
(``"package.module:function"``) so that it can be imported inside a worker
process or on another machine. :func:`execute_attempt` is the function the
executors actually ship: it resets the attempt's workspace, calls the run
function, turns an escaping exception into an infrastructure error, and
leaves the outcome on disk so that an attempt which finished just before a
crash of the scheduler is charged what it really cost.
"""

from __future__ import annotations

import importlib
import inspect
import json
import shutil
import traceback
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable, Protocol

from pilot.executors.proctree import launch_mark, launch_mark_text

# Agent statuses a run record may carry (pilot.runner); infra_error is the one
# the scheduler reruns.
OUTCOME_STATUSES = ("completed", "capped", "agent_error", "infra_error")

PIPELINE_RUN_FUNCTION = "pilot.pipeline:run_cell"
#: Run functions of stored studies whose module has moved since: old module -> where it lives now.
MOVED_RUN_MODULES = {"pilot.executors.fake_runs": "pilot.simulated.fake_runs"}
OUTCOME_FILE = "attempt_outcome.json"


@dataclass(frozen=True)
class CellSpec:
    """One assigned run: a cell of the design and its place in the seeded order."""

    run_id: str
    study: str
    wave: str
    scenario: str
    arm: str
    repeat: int
    model: str
    order_index: int
    seed: int
    cap_usd: float
    wall_s: float
    reserve_usd: float


@dataclass
class AttemptOutcome:
    """The result of one attempt, as the run function reports it.

    ``infra_error`` set means no inference was performed and the run is to
    be rerun; otherwise ``record`` is the run record (the runner's
    ``RunRecord.to_dict()`` plus judge results) and ``status`` its status.
    ``cost_usd`` is the agent's reported cost (recovery included), None
    when it is unknown (a session killed at the wall limit reports none, a
    worker lost mid-attempt reports nothing): the ledger then charges the
    attempt's whole reservation. ``judge_cost_usd`` is the judges' cost.
    ``launched`` false means the run function was never called (the
    harness failed first, the node was gone): nothing was spent and the
    reservation is released. ``metered_cost_usd`` is the model proxy's
    metered agent cost as an exact decimal string (real backends), None
    where no proxy metered the attempt (the simulated backend): the ledger
    charges the metered cost when there is one, the reported one otherwise.
    """

    infra_error: str | None = None
    record: dict[str, Any] = field(default_factory=dict)
    cost_usd: float | None = 0.0
    judge_cost_usd: float = 0.0
    status: str = "completed"
    launched: bool = True
    metered_cost_usd: str | None = None

    def __post_init__(self) -> None:
        if self.infra_error is not None:
            self.status = "infra_error"
        elif self.status not in OUTCOME_STATUSES or self.status == "infra_error":
            raise ValueError(f"AttemptOutcome.status: {self.status!r} is not one of completed, capped, agent_error (or set infra_error)")
        for name in ("cost_usd", "judge_cost_usd"):
            value = getattr(self, name)
            if value is None and name == "cost_usd":
                continue  # unknown, not zero
            if value is None or float(value) < 0:
                raise ValueError(f"AttemptOutcome.{name}: must be a non-negative number, got {value!r}")
        if self.metered_cost_usd is not None:
            try:
                metered = Decimal(str(self.metered_cost_usd))
            except InvalidOperation:
                metered = Decimal("NaN")
            if not metered.is_finite() or metered < 0:
                raise ValueError(f"AttemptOutcome.metered_cost_usd: must be a non-negative decimal, got {self.metered_cost_usd!r}")
            self.metered_cost_usd = str(metered)

    @property
    def cost_known(self) -> bool:
        return self.cost_usd is not None

    @property
    def total_cost_usd(self) -> float | None:
        """Agent plus judges; None when the agent's cost is unknown."""
        if self.cost_usd is None:
            return None
        return float(self.cost_usd) + float(self.judge_cost_usd)

    @property
    def metered(self) -> bool:
        return self.metered_cost_usd is not None

    @property
    def charge_usd(self) -> Decimal | None:
        """What the envelope is charged, exactly: the metered agent cost (else the reported one) plus the judges; None if unknown."""
        judges = Decimal(str(float(self.judge_cost_usd)))
        if self.metered_cost_usd is not None:
            return Decimal(self.metered_cost_usd) + judges
        if self.cost_usd is None:
            return None
        return Decimal(str(float(self.cost_usd))) + judges

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AttemptOutcome":
        return cls(**{k: data[k] for k in ("infra_error", "record", "cost_usd", "judge_cost_usd", "status", "launched", "metered_cost_usd") if k in data})


RunFunction = Callable[[CellSpec, Path, str, str, int], AttemptOutcome]


class Executor(Protocol):
    """Runs attempts on nodes. ``submit`` must not block; ``wait`` returns finished ones."""

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None: ...

    def wait(self, timeout: float) -> list[tuple[int, AttemptOutcome]]: ...

    def close(self) -> None: ...


def resolve_run_function(ref: str | None) -> RunFunction:
    """Import a run function from ``"module:function"`` (``None``: :data:`PIPELINE_RUN_FUNCTION`, runner, judges and outcomes).

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


def execute_attempt(run_function: str | None, cell: CellSpec, attempt_dir: str, node: str, backend: str) -> AttemptOutcome:
    """Reset the workspace, run one attempt, and keep its outcome on disk.

    An exception escaping the run function is an infrastructure error of the
    attempt (with its traceback), so the scheduler reruns it up to its limit
    instead of losing the run. A failure before the run function is called
    (the workspace cannot be reset, the function cannot be imported) spent
    nothing: the attempt is marked as never launched.
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
    except Exception as exc:  # noqa: BLE001 - any failure of the harness is an infra error of this attempt
        tb = traceback.format_exc(limit=8)
        if launched:
            # The failure may have come after inference began: its spend is unknown, charged at the reservation.
            outcome = AttemptOutcome(infra_error=f"{type(exc).__name__}: {exc}\n{tb}", cost_usd=None)
        else:
            outcome = AttemptOutcome(infra_error=f"never launched: {type(exc).__name__}: {exc}\n{tb}", cost_usd=0.0, launched=False)
    try:
        (folder / OUTCOME_FILE).write_text(json.dumps(outcome.to_dict(), default=str), encoding="utf-8")
    except OSError:
        pass  # the outcome still travels back; only the crash-time charge falls back to the reservation
    return outcome


def read_outcome_file(attempt_dir: Path) -> AttemptOutcome | None:
    """The outcome an attempt left on disk, if it finished."""
    path = attempt_dir / OUTCOME_FILE
    if not path.is_file():
        return None
    try:
        return AttemptOutcome.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, json.JSONDecodeError):
        return None
