"""One attempt as data: the cell it runs, the outcome it reports, and the files it leaves beside its folder.

The scheduler hands an executor a :class:`CellSpec` and gets an
:class:`AttemptOutcome` back; the outcome is also left in the attempt's
folder (:data:`OUTCOME_FILE`), and the launch mark (``attempt-N.launched``)
says the run function was called, from when money may have been spent. The
runner keeps the attempt's phase in its folder (:data:`PHASE_FILE`): from the
first model request on, the attempt is the run's own, and a failure of the
harness after that point is the run's outcome (:func:`harness_fault_outcome`),
never an infrastructure error that would give the run a fresh draw. The
store, the executors and the scheduler all read these; none of them owns them.
"""

from __future__ import annotations

import json
import os
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
#: The attempt's phase, in its folder: written by the runner as the attempt goes on (:func:`mark_phase`).
PHASE_FILE = "attempt_phase.json"
#: The phases of an attempt, in order; inference begins in ``agent`` (at the first model request).
PHASES = ("setup", "agent", "selfcheck", "recovery", "collect", "evaluation", "judges")


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


# --------------------------------------------------------------------------------------------- the attempt's phase


def mark_phase(
    attempt_dir: Path, phase: str, *, requests_record: Path | None = None, inference: bool | None = None
) -> None:
    """Record that the attempt in ``attempt_dir`` entered ``phase`` (:data:`PHASES`).

    ``requests_record`` (with ``agent``) is the model proxy's usage record of the run: inference has begun once it
    holds a request's row (the first model request reached the proxy); without one (a stand-in agent that is its
    own model) inference begins with the phase. ``inference`` states it outright once the session has ended.
    """
    if phase not in PHASES:
        raise ValueError(f"phase {phase!r}: expected one of {', '.join(PHASES)}")
    path = Path(attempt_dir) / PHASE_FILE
    old = read_phase(attempt_dir) or {}
    mark = {"phase": phase, "requests_record": old.get("requests_record"), "inference": old.get("inference")}
    if requests_record is not None:
        mark["requests_record"] = str(requests_record)
    if inference is not None:
        mark["inference"] = bool(inference)
    elif phase == "agent" and requests_record is None and old.get("requests_record") is None:
        mark["inference"] = True  # a stand-in agent is its own model: its session is inference
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(mark) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_phase(attempt_dir: Path) -> dict[str, Any] | None:
    """The attempt's phase mark (``phase``, ``requests_record``, ``inference``), or None before the runner wrote one."""
    try:
        data = json.loads((Path(attempt_dir) / PHASE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("phase") in PHASES else None


def inference_began(attempt_dir: Path) -> bool:
    """Whether the attempt in ``attempt_dir`` got as far as a model request: from then on a failure is the run's own.

    Decided from the runner's phase mark and the model proxy's usage record, both files of the harness that the
    worker cannot write: before the first model request no tool of the worker has run, so nothing it made exists.
    Inference begins with the first model request the proxy forwarded (a row of :data:`INFERENCE_ROWS`); its rows
    for the run's own life (opened, closed) and for requests it refused unforwarded mark none.
    """
    mark = read_phase(attempt_dir)
    if mark is None or mark["phase"] == "setup":
        return False
    if mark.get("inference") is not None:
        return bool(mark["inference"])
    record = mark.get("requests_record")
    return isinstance(record, str) and bool(record) and _holds_a_request(Path(record))


#: Rows the model proxy writes for a Messages request it forwarded upstream (answered then, or after the run closed).
#: An allow-list: a row of any other kind (the run opened or closed, a request refused unforwarded, a token count)
#: marks no inference.
INFERENCE_ROWS = frozenset({"messages", "late_answer"})


def _holds_a_request(record: Path) -> bool:
    """Whether the proxy's usage record holds a row of a forwarded Messages request (:data:`INFERENCE_ROWS`)."""
    try:
        with record.open("rb") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                except ValueError:
                    return True  # a torn row is the proxy's, written while a request was answered
                if isinstance(row, dict) and row.get("kind") in INFERENCE_ROWS:
                    return True
    except OSError:
        return False
    return False


#: How a harness fault after inference is named on the run record and in the run table (``harness_fault``).
HARNESS_FAULT_PREFIX = "harness fault after inference"


def harness_fault_outcome(attempt_dir: Path, why: str) -> AttemptOutcome:
    """The run's own outcome when the harness failed after inference began: never an infrastructure error.

    The record is the runner's own (``run_record.json``) when it wrote one, else a record of the cell with no
    verdict (``eval_error`` says why; ``pilot study reevaluate`` gives it one when the workspace's digest was kept).
    Either way ``harness_fault`` names the phase and the failure, and the status is ``agent_error`` unless the
    runner had already recorded how the agent's sessions ended. Its cost is the record's, or unknown (the ledger
    then charges the reservation).
    """
    mark = read_phase(attempt_dir) or {}
    fault = f"{HARNESS_FAULT_PREFIX} (phase {mark.get('phase', 'unknown')}): {why}".strip()
    try:
        record = json.loads((Path(attempt_dir) / "run_record.json").read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            record = {}
    except (OSError, ValueError):
        record = {}
    if record.get("status") in (None, "infra_error"):
        record.update(
            status="agent_error",
            agent_error=fault,
            infra_error=None,
            D=False if record.get("D") is None else record["D"],
            E=False if record.get("E") is None else record["E"],
            eval_error=record.get("eval_error")
            or "the harness failed before the evaluation ran; the run has no verdict (see harness_fault)",
        )
    record["harness_fault"] = fault
    record.setdefault("notes", []).append(fault)
    cost = record.get("cost_usd") if record.get("cost_complete") else None
    return AttemptOutcome(
        record=record,
        cost_usd=None if cost is None else float(cost),
        judge_cost_usd=float(record.get("judge_cost_usd") or 0.0),
        status=record["status"],
        metered_cost_usd=record.get("metered_cost_usd"),
    )


def with_harness_fault(outcome: AttemptOutcome, phase: str, why: str) -> AttemptOutcome:
    """A finished attempt's outcome kept as it is, with a harness fault after inference named on its record.

    For a failure after the run's own outcome was reached (its files did not travel back from a node): the outcome
    stands (it was evaluated and judged where the attempt ran), ``harness_fault`` says what went wrong.
    """
    fault = f"{HARNESS_FAULT_PREFIX} (phase {phase}): {why}"
    rec = dict(outcome.record)
    rec["harness_fault"] = "; ".join(x for x in (rec.get("harness_fault"), fault) if x)
    rec["notes"] = [*(rec.get("notes") or []), fault]
    return AttemptOutcome(
        record=rec,
        cost_usd=outcome.cost_usd,
        judge_cost_usd=outcome.judge_cost_usd,
        status=outcome.status,
        launched=outcome.launched,
        metered_cost_usd=outcome.metered_cost_usd,
    )
