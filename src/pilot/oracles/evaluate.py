"""Run a scenario's oracle on a finished workspace: D, E and every criterion.

D is true when every required criterion passes and no critical violation is
recorded; E is true when the input-hash check finds any change, deletion or
addition under ``inputs/``. A criterion whose file is missing or malformed
fails as "blocked" by the presence or well-formedness criterion that
already reports the cause, so one defect is reported once, where it is.

``evaluate_many`` recalculates the workbooks of many workspaces in one
LibreOffice process before judging each one.

How a workspace is read is a parameter: ``context`` (the class that reads
its files, :class:`~pilot.oracles.context.WorkspaceContext` by default) and
``check`` (how one criterion is checked on it). The deck reader
(:mod:`pilot.oracle_formats.evaluate`) passes its own and is otherwise this
module: one criterion loop, one verdict.

Nothing a worker leaves in the workspace makes ``evaluate`` raise: a file it
cannot read fails a criterion with the reason, and a tree under ``inputs/``
it cannot walk (too deep, unreadable, a pipe) is a critical violation. What
the worker cannot cause (LibreOffice missing, the evaluator's own failure)
is recorded in ``errors``: the evaluation itself could not run, which is
neither a failed deliverable nor an infrastructure error of the run.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pilot import worker_files
from pilot.oracles import guard, safety
from pilot.oracles.context import WorkspaceContext
from pilot.oracles.criteria import CHECKS
from pilot.oracles.hashing import compare_hashes, hash_inputs
from pilot.oracles.recalc import Recalculator
from pilot.protocol.scenario import Criterion, Scenario

if TYPE_CHECKING:  # pandas loads on first use: `pilot check` and `pilot --help` start without it
    import pandas as pd

# Kinds that need the file to be a well-formed file of its kind first.
_NEEDS_WELL_FORMED = {
    "formulas",
    "no_error_values",
    "min_words",
    "sections",
    "labelled_value",
    "workbook_contains",
    "text_contains",
    "text_number",
    "csv_columns",
    "csv_keys",
    "csv_value",
    "decision",
    "closed_scale",
    "labelled_bounds",
}


@dataclass(frozen=True)
class CriterionResult:
    id: str
    kind: str
    required: bool
    passed: bool
    reason: str
    file: str = ""
    blocked_by: str | None = None


@dataclass
class Evaluation:
    """The oracle's verdict on one workspace."""

    scenario: str
    workspace: str
    D: bool
    E: bool
    E_reasons: list[str]
    criteria: list[CriterionResult]
    seconds: float = 0.0
    substitutes: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    #: By deliverable, what LibreOffice was not shown (links made inert in its copy) and how it was held.
    notes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """``accepted``, ``failed``, ``critical_violation`` or ``evaluation_error``."""
        if self.errors:
            return "evaluation_error"
        if self.E:
            return "critical_violation"
        return "accepted" if self.D else "failed"

    @property
    def criteria_passed(self) -> int:
        return sum(c.passed for c in self.criteria)

    @property
    def criteria_total(self) -> int:
        return len(self.criteria)

    @property
    def failed(self) -> list[CriterionResult]:
        return [c for c in self.criteria if not c.passed]

    @property
    def summary(self) -> pd.DataFrame:
        """One row per criterion: id, kind, required, passed, reason."""
        import pandas as pd

        return pd.DataFrame(
            [asdict(c) for c in self.criteria],
            columns=["id", "kind", "file", "required", "passed", "blocked_by", "reason"],
        )

    def to_dict(self) -> dict:
        return {
            "scenario": self.scenario,
            "workspace": self.workspace,
            "D": self.D,
            "E": self.E,
            "E_reasons": list(self.E_reasons),
            "criteria_passed": self.criteria_passed,
            "criteria_total": self.criteria_total,
            "criteria": [asdict(c) for c in self.criteria],
            "substitutes": self.substitutes,
            "outcome": self.outcome,
            "errors": list(self.errors),
            "notes": {k: list(v) for k, v in self.notes.items()},
            "seconds": round(self.seconds, 3),
        }


_DEFAULT: dict[str, Recalculator] = {}


def default_recalculator() -> Recalculator:
    """One recalculator per process, removed at exit."""
    if "r" not in _DEFAULT:
        _DEFAULT["r"] = Recalculator()
        atexit.register(_DEFAULT["r"].close)
    return _DEFAULT["r"]


#: The oracle's form checks: presence, well-formedness, formulas, error values, length, sections and the
#: completion record. They hold no answer, and the A4 self-check's verdict includes them.
FORM_KINDS = ("present", "well_formed", "formulas", "no_error_values", "min_words", "sections", "completion_record")


#: How one criterion is checked on a workspace context: (passed, reason).
Check = Callable[[WorkspaceContext, Criterion], tuple[bool, str]]


def check_criterion(ctx: WorkspaceContext, crit: Criterion) -> tuple[bool, str]:
    """The criterion's check by its kind (:data:`pilot.oracles.criteria.CHECKS`)."""
    return CHECKS[crit.kind](ctx, crit)


def _blocker(criteria, crit, results: dict[str, CriterionResult]) -> CriterionResult | None:
    if crit.kind == "present":
        return None
    for other in criteria:
        if other.file != crit.file or other.id == crit.id or other.id not in results:
            continue
        if other.kind == "present" and not results[other.id].passed:
            return results[other.id]
        if other.kind == "well_formed" and crit.kind in _NEEDS_WELL_FORMED and not results[other.id].passed:
            return results[other.id]
    return None


@guard.holding()
@worker_files.copies_scope()
def evaluate(
    scenario: Scenario,
    workspace: Path,
    input_hashes: dict[str, str] | None = None,
    *,
    recalculator: Recalculator | None = None,
    guard_limits: dict | None = None,
    context: type[WorkspaceContext] = WorkspaceContext,
    check: Check = check_criterion,
) -> Evaluation:
    """Judge ``workspace`` against ``scenario``'s oracle.

    ``input_hashes`` are the hashes taken when the workspace was laid out;
    when None, the bundle's own inputs are the reference. ``guard_limits``
    (``per_file_timeout_s``, ``memory_limit_bytes``) bound the child process
    that parses each office file before the evaluator does. ``context`` and
    ``check`` read the workspace (a format reader passes its own).
    """
    t0 = time.perf_counter()
    workspace = Path(workspace)
    recalculator = recalculator if recalculator is not None else default_recalculator()
    ctx = context(scenario, workspace, recalculator, guard_limits)
    errors: list[str] = []
    try:
        # All office files of the workspace through one guarded child process.
        guard.probe_cached(ctx.guard_candidates(), **ctx.guard_limits)
    except OSError as exc:  # the guard child could not be started: not the worker's doing
        errors.append(f"the guarded reader could not start ({exc})")
    e_reasons = _input_violations(scenario, workspace, input_hashes)
    criteria = run_criteria(scenario.oracle.criteria, ctx, check)
    substitutes = {
        d.name: [p.name for p in ctx.status(d.name).substitutes]
        for d in scenario.file_deliverables
        if ctx.status(d.name).substitutes
    }
    errors.extend(ctx.errors)
    E = bool(e_reasons)
    D = all(c.passed for c in criteria if c.required) and not E and not errors
    return Evaluation(
        scenario.id,
        str(workspace),
        D,
        E,
        e_reasons,
        criteria,
        time.perf_counter() - t0,
        substitutes,
        errors,
        dict(ctx.notes),
    )


def run_criteria(
    criteria: Sequence[Criterion], ctx: WorkspaceContext, check: Check = check_criterion
) -> list[CriterionResult]:
    """Every criterion on one workspace context, in the given order; a blocked one names its blocker."""
    # Present and well-formed criteria first, so the others know their blockers.
    order = sorted(criteria, key=lambda c: {"present": 0, "well_formed": 1}.get(c.kind, 2))
    results: dict[str, CriterionResult] = {}
    for crit in order:
        blocker = _blocker(criteria, crit, results)
        if blocker is not None:
            res = CriterionResult(
                crit.id, crit.kind, crit.required, False, f"not checked: {blocker.id} failed", crit.file, blocker.id
            )
        else:
            try:
                passed, reason = check(ctx, crit)
            except Exception as exc:  # noqa: BLE001 - a crash on a hostile file is a failed criterion
                passed, reason = (
                    False,
                    f"{crit.file}: the check could not read the file ({type(exc).__name__}: {str(exc)[:200]})",
                )
            res = CriterionResult(crit.id, crit.kind, crit.required, bool(passed), reason, crit.file)
        results[crit.id] = res
    return [results[c.id] for c in criteria]


@guard.holding()
@worker_files.copies_scope()
def evaluate_form(
    scenario: Scenario,
    workspace: Path,
    *,
    recalculator: Recalculator | None = None,
    guard_limits: dict | None = None,
    context: type[WorkspaceContext] = WorkspaceContext,
    check: Check = check_criterion,
) -> tuple[list[CriterionResult], list[str]]:
    """The oracle's form checks alone (no answer is consulted): (results, evaluation errors)."""
    ctx = context(
        scenario, Path(workspace), recalculator if recalculator is not None else default_recalculator(), guard_limits
    )
    results = run_criteria([c for c in scenario.oracle.criteria if c.kind in FORM_KINDS], ctx, check)
    return results, list(ctx.errors)


def _input_violations(scenario: Scenario, workspace: Path, input_hashes: dict[str, str] | None) -> list[str]:
    """The input-hash check; whatever the worker did to ``inputs/`` is a reason here, never an exception."""
    before = input_hashes if input_hashes is not None else hash_inputs(scenario.inputs_dir)
    inputs = workspace / "inputs"
    try:
        if inputs.is_symlink() or (inputs.exists() and not inputs.resolve().is_relative_to(workspace.resolve())):
            return ["inputs/ was replaced by a link"]
        if inputs.exists() and not inputs.is_dir():
            return ["inputs/ was replaced by something that is not a folder"] + compare_hashes(before, {})
        if not inputs.is_dir():
            return ["inputs/ folder deleted"] + compare_hashes(before, {})
        return compare_hashes(before, hash_inputs(inputs))
    except (OSError, RecursionError, ValueError) as exc:
        return [f"inputs/ cannot be read as laid out ({type(exc).__name__}: {str(exc)[:200]})"]


def workbooks_to_recalculate(scenario: Scenario, workspace: Path) -> list[Path]:
    """The delivered workbooks of a workspace that are safe to hand to LibreOffice."""
    out = []
    ws = Path(workspace)
    for d in scenario.file_deliverables:
        if d.kind != "xlsx":
            continue
        screened = safety.screen_path(ws / "outputs" / d.name, ws)
        if screened.ok and safety.screen_ooxml(screened.path, ".xlsx") is None:
            out.append(screened.path)
    return out


@guard.holding()
@worker_files.copies_scope()
def evaluate_many(
    items: Iterable[tuple[Scenario, Path, dict[str, str] | None]],
    *,
    recalculator: Recalculator | None = None,
    evaluate_one: Callable[..., Evaluation] | None = None,
) -> list[Evaluation]:
    """Evaluate many workspaces, recalculating all their workbooks in one LibreOffice process.

    ``evaluate_one`` judges each workspace once its workbooks are recalculated (:func:`evaluate` by default).
    """
    items = list(items)
    evaluate_one = evaluate_one if evaluate_one is not None else evaluate
    recalculator = recalculator if recalculator is not None else default_recalculator()
    guard.probe_cached([p for sc, ws, _ in items for p in WorkspaceContext(sc, Path(ws), None).guard_candidates()])
    books = [p for sc, ws, _ in items for p in workbooks_to_recalculate(sc, ws)]
    if books:
        recalculator.recalculate(books)
    return [evaluate_one(sc, ws, h, recalculator=recalculator) for sc, ws, h in items]
