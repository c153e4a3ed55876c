"""One attempt as data: the cell it runs, the outcome it reports, and the files it leaves beside its folder.

The scheduler hands an executor a :class:`CellSpec` and gets an
:class:`AttemptOutcome` back; the outcome is also left in the attempt's
folder (:data:`OUTCOME_FILE`), and the launch mark (``attempt-N.launched``)
says the run function was called, from when money may have been spent. The
store, the executors and the scheduler all read these; none of them owns them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

# Agent statuses a run record may carry (pilot.runner); infra_error is the one
# the scheduler reruns.
OUTCOME_STATUSES = ("completed", "capped", "agent_error", "infra_error")

OUTCOME_FILE = "attempt_outcome.json"
# Written beside the attempt's folder (which the runner wants empty) just before the run
# function is called: from then on money may have been spent.
LAUNCH_SUFFIX = ".launched"


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
    #: set when the node refused the run (its protocol differs from the study's): why, naming the first differing
    #: file; the wave dispatches nothing more to that node
    refused_by_node: str | None = None

    def __post_init__(self) -> None:
        if self.infra_error is not None:
            self.status = "infra_error"
        elif self.status not in OUTCOME_STATUSES or self.status == "infra_error":
            raise ValueError(
                f"AttemptOutcome.status: {self.status!r} is not one of completed, capped, agent_error (or "
                "set infra_error)"
            )
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
                raise ValueError(
                    f"AttemptOutcome.metered_cost_usd: must be a non-negative decimal, got {self.metered_cost_usd!r}"
                )
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
        """What the envelope is charged, exactly: the metered agent cost (else the reported one) plus the judges; None
        if unknown."""
        judges = Decimal(str(float(self.judge_cost_usd)))
        if self.metered_cost_usd is not None:
            return Decimal(self.metered_cost_usd) + judges
        if self.cost_usd is None:
            return None
        return Decimal(str(float(self.cost_usd))) + judges

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptOutcome:
        return cls(
            **{
                k: data[k]
                for k in (
                    "infra_error",
                    "record",
                    "cost_usd",
                    "judge_cost_usd",
                    "status",
                    "launched",
                    "metered_cost_usd",
                )
                if k in data
            }
        )


def launch_mark(attempt_dir: Path) -> Path:
    """The attempt's launch mark: ``attempt-N.launched`` beside ``attempt-N/``, holding the worker's pid and start
    time."""
    attempt_dir = Path(attempt_dir)
    return attempt_dir.with_name(attempt_dir.name + LAUNCH_SUFFIX)


def was_launched(attempt_dir: Path) -> bool:
    """Whether the attempt got as far as calling its run function."""
    return launch_mark(attempt_dir).exists()


def read_outcome_file(attempt_dir: Path) -> AttemptOutcome | None:
    """The outcome an attempt left on disk, if it finished."""
    path = attempt_dir / OUTCOME_FILE
    if not path.is_file():
        return None
    try:
        return AttemptOutcome.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, json.JSONDecodeError):
        return None
