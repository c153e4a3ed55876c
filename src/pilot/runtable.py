"""The run table: its schema, in one place, and the validation every table passes on load.

One row per assigned run (scenario, arm, repeat, model). The harness exports
it from the study store (``pilot study export``); the synthetic generator
(:mod:`pilot.simulated.synthetic`) draws SIMULATED tables with the same schema.
Every analysis reads a table through :func:`read_runtable` or
:func:`validate_runtable`, which refuse a malformed table with a
:class:`RunTableError` naming the source, the row and the column.

Columns are listed in :data:`COLUMNS`, plus one ``Q_<judge>`` column per judge
of ``protocol/study.yml`` (:func:`columns`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pilot import backends, paths, protocol

# Backends whose tables are findings; any other backend's are labelled (pilot.backends.label).
REAL_BACKENDS = backends.REAL_BACKENDS
SIMULATED_TAG = backends.SIMULATED_LABEL

WAVES = ("pilot", "repeat3", "sensitivity")
STATUSES = ("completed", "capped", "agent_error", "infra_error")
# Runs whose every attempt failed on infrastructure: exported with empty outcomes, dropped (and counted) on validation.
FAILED_STATUS = "infra_error"
FAILED_DROPPED_ATTR = "failed_runs_dropped"
#: How many runs whose evaluation could not run (``eval_error``) validation left out (protocol/interpretations.md).
EVAL_ERROR_DROPPED_ATTR = "evaluation_errors_dropped"
#: The design's caps, then the sandbox's resource bounds (``pilot.agents.bounds.BOUND_REASONS``; spelled here so the
#: run table's schema imports nothing of the harness).
CENSOR_REASONS = ("cost", "wall", "turns", "memory", "processes", "disk", "tmp", "stream")
COMPLETION_STATUSES = ("completed", "partial", "abandoned", "missing")
#: How a real run's access was enforced (``unisolated``: the development opt-in, refused by the analysis).
UNISOLATED = "unisolated"
ENFORCEMENTS = ("bubblewrap", "sandbox-exec", UNISOLATED, "simulated")
# How a CSV may spell a missing value (pandas writes an empty cell).
MISSING_SPELLINGS = ("", "NA", "NaN", "nan", "null", "None")
# Floating-point slack for the consistency checks (Q as a mean of judges, H in minutes).
_TOL = 1e-6


@dataclass(frozen=True)
class ColumnSpec:
    """One run-table column: its kind, whether it may be missing, and its allowed values."""

    name: str
    kind: str  # "str" | "int" | "float" | "bool"
    nullable: bool = False
    allowed: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    doc: str = ""


COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec("run_id", "str", doc="unique identifier of the assigned run"),
    ColumnSpec("study", "str", doc="study name; SIMULATED tables carry the tag here"),
    ColumnSpec(
        "backend",
        "str",
        doc="agent backend (claude-code is real; rehearsal is a REHEARSAL, anything else a SIMULATED dry run)",
    ),
    ColumnSpec("scenario", "str", doc="scenario id, e.g. ACC-01"),
    ColumnSpec("occupation", "str", doc="the scenario's occupation"),
    ColumnSpec("arm", "str", doc="arm id from protocol/study.yml"),
    ColumnSpec("repeat", "int", minimum=1, doc="repeat number within (scenario, arm, model)"),
    ColumnSpec("model", "str", doc="worker model"),
    ColumnSpec("wave", "str", allowed=WAVES, doc="pilot, repeat3 or sensitivity"),
    ColumnSpec("seed", "int", minimum=0, doc="seed of the run"),
    ColumnSpec("order_index", "int", minimum=0, doc="position in the seeded assignment order"),
    ColumnSpec("node", "str", doc="node the run was dispatched to"),
    ColumnSpec("attempts", "int", minimum=1, doc="infrastructure attempts (reruns after infra errors)"),
    ColumnSpec("D", "bool", doc="deterministic completion"),
    ColumnSpec("E", "bool", doc="critical violation recorded"),
    ColumnSpec("E_reasons", "str", nullable=True, doc="the violations, '; '-separated"),
    ColumnSpec("criteria_passed", "int", minimum=0, doc="oracle criteria passed"),
    ColumnSpec("criteria_total", "int", minimum=1, doc="oracle criteria evaluated"),
    ColumnSpec(
        "Q", "float", nullable=True, minimum=0, maximum=100, doc="mean judge score over available judges (0-100)"
    ),
    ColumnSpec("n_judges", "int", minimum=0, doc="judges with a valid output"),
    ColumnSpec("judge_accept_votes", "int", minimum=0, doc="judges saying a demanding manager would accept"),
    ColumnSpec("S", "bool", nullable=True, doc="acceptance 1{D, not E, Q >= q}; missing when Q is"),
    # Missing, never zero, when the client reported no cost (a session killed at the wall limit prints no result).
    ColumnSpec(
        "cost_usd", "float", nullable=True, minimum=0, doc="agent cost, recovery included; missing when not reported"
    ),
    ColumnSpec("judge_cost_usd", "float", minimum=0, doc="cost of the judges"),
    ColumnSpec("wall_s", "float", minimum=0, doc="wall time, recovery included"),
    ColumnSpec("turns", "int", minimum=0, doc="agent turns"),
    ColumnSpec("tool_calls", "int", minimum=0, doc="tool calls"),
    ColumnSpec("questions", "int", minimum=0, doc="unanswered questions in the completion record"),
    ColumnSpec("H_minutes", "float", minimum=0, doc="human minutes: interventions plus minutes per question"),
    ColumnSpec("censored", "bool", doc="the run reached a cap"),
    ColumnSpec("censor_reason", "str", nullable=True, allowed=CENSOR_REASONS, doc="which cap"),
    ColumnSpec("status", "str", allowed=STATUSES, doc="how the run ended"),
    ColumnSpec(
        "completion_status",
        "str",
        allowed=COMPLETION_STATUSES,
        doc="status in the completion record (missing: no valid record)",
    ),
    ColumnSpec("selfcheck_first", "bool", nullable=True, doc="A4: first session passed the self-check"),
    ColumnSpec("recovery_used", "bool", doc="A4: the one recovery resume was used"),
    ColumnSpec("selfcheck_final", "bool", nullable=True, doc="A4: self-check after the run (after recovery if any)"),
    ColumnSpec("designed_depth", "int", minimum=1, doc="the scenario's designed depth (ordinal)"),
    ColumnSpec("professional_minutes", "float", minimum=0, doc="the scenario's professional minutes (weights)"),
    ColumnSpec(
        "enforcement",
        "str",
        nullable=True,
        allowed=ENFORCEMENTS,
        doc=(
            "how the agent's access was enforced (bubblewrap, sandbox-exec; unisolated: development only; "
            "simulated: a dry run)"
        ),
    ),
)

# Process columns a table may carry beyond the schema: checked by kind when present, never required.
OPTIONAL_COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec(
        "metered_cost_usd",
        "float",
        nullable=True,
        minimum=0,
        doc="the model proxy's metered agent cost, recovery included, which the ledger charged; C stays cost_usd; "
        "missing where nothing metered the run",
    ),
    ColumnSpec(
        "portal_requests",
        "int",
        nullable=True,
        minimum=0,
        doc="requests to the run's portal (health checks excluded); missing without a portal",
    ),
    ColumnSpec(
        "portal_fault",
        "bool",
        nullable=True,
        doc="the run's portal was not answering at the end of the run; missing without a portal",
    ),
    # The evaluator could not run in full (LibreOffice unavailable ...): D and E are then no verdict on the work.
    ColumnSpec(
        "eval_error", "str", nullable=True, doc="why the evaluation itself could not run in full; missing when it ran"
    ),
    # The verdict comes from `pilot study reevaluate` (the first evaluation could not run); the earlier record is kept
    # in the store.
    ColumnSpec(
        "reevaluated_at",
        "str",
        nullable=True,
        doc=(
            "when the run's current verdict was given by a re-evaluation (UTC, ISO 8601); missing when it is "
            "the run's first"
        ),
    ),
    # The harness failed after inference began: the run is its own outcome, evaluated as delivered, never rerun.
    ColumnSpec(
        "harness_fault",
        "str",
        nullable=True,
        doc="the harness's failure after inference began (phase and error); missing when there was none",
    ),
)


def refuse_unisolated(df: pd.DataFrame, source: str | Path = "<run table>") -> None:
    """Refuse a table holding real runs whose agent ran without isolation (the arms' access then did not hold)."""
    bad = (df["enforcement"] == UNISOLATED).to_numpy(dtype=bool) & df["backend"].isin(backends.CLI_BACKENDS).to_numpy(
        dtype=bool
    )
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RunTableError(
            str(source),
            "enforcement",
            (
                f"{int(bad.sum())} real run(s) ran unisolated (development opt-in), so their arm's access was "
                "not enforced; rerun them isolated, or pass allow_unisolated to analyse them anyway"
            ),
            row=i + 1,
            run_id=str(df["run_id"].iloc[i]),
        )


class RunTableError(ValueError):
    """A run table is malformed; the message names the source, row and column."""

    def __init__(
        self, source: str, column: str | None, reason: str, row: int | None = None, run_id: str | None = None
    ) -> None:
        self.source = source
        self.column = column
        self.row = row
        self.run_id = run_id
        self.reason = reason
        where = []
        if row is not None:
            # Row numbers count data rows from 1; in a CSV the line is row + 1 (header on line 1).
            where.append(f"row {row}" + (f" (run_id {run_id})" if run_id else ""))
        if column is not None:
            where.append(f"column '{column}'")
        super().__init__(f"{source}: {', '.join(where) + ': ' if where else ''}{reason}")


def judge_ids(study: protocol.Study | None = None) -> list[str]:
    study = study or protocol.study()
    return [j["id"] for j in study.judge_panel]


def judge_column(judge_id: str) -> str:
    return f"Q_{judge_id}"


def columns(study: protocol.Study | None = None) -> list[ColumnSpec]:
    """Every column of the run table, the judges' score columns after ``Q``."""
    out: list[ColumnSpec] = []
    for spec in COLUMNS:
        out.append(spec)
        if spec.name == "Q":
            for jid in judge_ids(study):
                out.append(
                    ColumnSpec(
                        judge_column(jid),
                        "float",
                        nullable=True,
                        minimum=0,
                        maximum=100,
                        doc=f"judge {jid}'s rubric-weighted score (0-100)",
                    )
                )
    return out


def known_scenarios() -> list[str]:
    """Scenario ids of the protocol's bundles (folders holding a scenario.yml); empty before they exist."""
    if not paths.SCENARIOS_DIR.is_dir():
        return []
    return sorted(p.name for p in paths.SCENARIOS_DIR.iterdir() if (p / "scenario.yml").is_file())


def is_simulated(df: pd.DataFrame) -> bool:
    """True when the table is no finding: any row from a non-real backend (a dry run, a rehearsal) or a study tagged
    SIMULATED."""
    return bool(data_label(df))


def data_label(df: pd.DataFrame) -> str:
    """The label every output of this table carries: SIMULATED, REHEARSAL (:func:`pilot.backends.label_of`), or ``""``
    for a finding."""
    if df["study"].astype(str).str.contains(SIMULATED_TAG).any():
        return SIMULATED_TAG
    return backends.label_of(df["backend"].astype(str).unique())


# Q is compared with a threshold in whole micro-points (pilot.outcomes stores Q truncated to six
# decimals), so float noise in a table (89.99999999999999 for 90) cannot flip S.
Q_UNITS = 10**6


def meets_threshold(Q: Any, q: float) -> np.ndarray:
    """Q >= q compared in whole micro-points (False where Q is missing)."""
    scores = np.asarray(Q, dtype=float)
    with np.errstate(invalid="ignore"):
        met: np.ndarray = np.round(scores * Q_UNITS) >= round(float(q) * Q_UNITS)
    return met


def acceptance(D: Any, E: Any, Q: Any, q: float) -> np.ndarray:
    """S = 1{D=1, E=0, Q>=q} as floats (Q compared in micro-points); NaN where Q is missing (never zero)."""
    d, e, scores = (np.asarray(v, dtype=float) for v in (D, E, Q))
    s: np.ndarray = ((d == 1) & (e == 0) & meets_threshold(scores, q)).astype(float)
    s[np.isnan(scores) | np.isnan(d) | np.isnan(e)] = np.nan
    return s


# --------------------------------------------------------------------------
# Coercion of one column (CSV text or Python values) to its kind
# --------------------------------------------------------------------------

_TRUE = {"true", "1", "1.0", "yes"}
_FALSE = {"false", "0", "0.0", "no"}


def _is_missing(v: Any) -> bool:
    if v is None or v is pd.NA:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return isinstance(v, str) and v.strip() == ""


def _coerce_value(v: Any, kind: str) -> Any:
    """One value to its kind; raises ValueError with a reason."""
    if kind == "str":
        return str(v)
    if kind == "bool":
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer, float, np.floating)) and float(v) in (0.0, 1.0):
            return bool(float(v))
        s = str(v).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise ValueError(f"{v!r} is not a boolean (true/false/1/0)")
    if kind == "int":
        if isinstance(v, (bool, np.bool_)):
            raise ValueError(f"{v!r} is not an integer")
        f = float(v)
        if not math.isfinite(f) or f != int(f):
            raise ValueError(f"{v!r} is not an integer")
        return int(f)
    if kind == "float":
        if isinstance(v, (bool, np.bool_)):
            raise ValueError(f"{v!r} is not a number")
        f = float(v)
        if not math.isfinite(f):
            raise ValueError(f"{v!r} is not a finite number")
        return f
    raise AssertionError(kind)


def _coerce_column(series: pd.Series, spec: ColumnSpec, source: str, run_ids: Sequence[str]) -> pd.Series:
    values = series.tolist()
    out: list[Any] = []

    def fail(i: int, reason: str) -> RunTableError:
        return RunTableError(source, spec.name, reason, row=i + 1, run_id=run_ids[i] if i < len(run_ids) else None)

    for i, v in enumerate(values):
        if _is_missing(v):
            if not spec.nullable:
                raise fail(i, "missing value (this column may not be empty)")
            out.append(None)
            continue
        try:
            c = _coerce_value(v, spec.kind)
        except (TypeError, ValueError) as exc:
            raise fail(i, f"wrong type: expected {spec.kind}; {exc}") from None
        if spec.allowed is not None and c not in spec.allowed:
            raise fail(i, f"{c!r} is not one of {list(spec.allowed)}")
        if spec.minimum is not None and c < spec.minimum:
            raise fail(i, f"{c!r} is below the minimum {spec.minimum}")
        if spec.maximum is not None and c > spec.maximum:
            raise fail(i, f"{c!r} is above the maximum {spec.maximum}")
        out.append(c)
    if spec.kind == "str":
        return pd.Series(out, index=series.index, dtype=object)
    if spec.kind == "bool":
        return pd.Series(out, index=series.index, dtype="boolean")
    if spec.kind == "int":
        return pd.Series(out, index=series.index, dtype="Int64" if spec.nullable else "int64")
    return pd.Series([np.nan if x is None else x for x in out], index=series.index, dtype="float64")


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


def drop_failed(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The table without its failed runs (status ``infra_error``, which have no outcome), and how many there were."""
    if "status" not in df.columns:
        return df, 0
    failed = df["status"].astype(str).str.strip() == FAILED_STATUS
    return df[~failed.to_numpy()].reset_index(drop=True), int(failed.sum())


def drop_evaluation_errors(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The table without the runs whose evaluation could not run (a non-empty ``eval_error``), and how many there were.

    Their D and E are no verdict on the work, so they are neither failures
    nor successes: left out of every estimate and counted, as failed runs
    are, until they are evaluated again from their kept workspace.
    """
    if "eval_error" not in df.columns:
        return df, 0
    text = df["eval_error"].astype("string").str.strip()
    bad = (text.notna() & ~text.isin(MISSING_SPELLINGS)).to_numpy(dtype=bool)
    return df[~bad].reset_index(drop=True), int(bad.sum())


def validate_runtable(
    df: pd.DataFrame,
    source: str | Path = "<run table>",
    *,
    study: protocol.Study | None = None,
    scenarios: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Check ``df`` against the schema and the outcome definitions; return a typed copy.

    ``scenarios`` lists the allowed scenario ids; by default the protocol's
    bundles (no check beyond the id's form while none exist). Refuses with a
    :class:`RunTableError` naming the row and column. Failed runs (status
    ``infra_error``, no outcomes) are dropped first; how many is kept in
    ``attrs["failed_runs_dropped"]`` of the result. So are runs whose
    evaluation could not run (``eval_error``), counted in
    ``attrs["evaluation_errors_dropped"]``. Row numbers in errors
    count the rows that remain.
    """
    study = study or protocol.study()
    source = str(source)
    specs = columns(study)
    missing = [s.name for s in specs if s.name not in df.columns]
    if missing:
        raise RunTableError(source, missing[0], f"missing column(s): {', '.join(missing)}")
    df, n_failed = drop_failed(df)
    df, n_eval_errors = drop_evaluation_errors(df)
    if len(df) == 0:
        besides = [f"{n_failed} failed run(s)"] * bool(n_failed) + [
            f"{n_eval_errors} run(s) whose evaluation could not run"
        ] * bool(n_eval_errors)
        raise RunTableError(
            source, None, "the table has no rows" + (f" besides {' and '.join(besides)}" if besides else "")
        )
    df = df.reset_index(drop=True)
    run_ids = [str(v) for v in df["run_id"].tolist()]
    out = pd.DataFrame(index=df.index)
    for spec in specs:
        out[spec.name] = _coerce_column(df[spec.name], spec, source, run_ids)
    for spec in OPTIONAL_COLUMNS:
        if spec.name in df.columns:
            out[spec.name] = _coerce_column(df[spec.name], spec, source, run_ids)
    extra = [c for c in df.columns if c not in out.columns]
    for c in extra:  # carried along untouched
        out[c] = df[c]

    def fail(i: int, column: str, reason: str) -> RunTableError:
        return RunTableError(source, column, reason, row=int(i) + 1, run_id=run_ids[int(i)])

    def first(mask: Any) -> int | None:
        idx = np.flatnonzero(np.asarray(mask, dtype=bool))
        return int(idx[0]) if idx.size else None

    # Identity: unique run ids and cells, known arms and scenarios.
    dup = out["run_id"].duplicated()
    if (i := first(dup)) is not None:
        raise fail(i, "run_id", f"duplicated run id {run_ids[i]!r}")
    cell = out.duplicated(["scenario", "arm", "repeat", "model"])
    if (i := first(cell)) is not None:
        raise fail(i, "repeat", "duplicated cell (scenario, arm, repeat, model)")
    arms = set(study.arms)
    if (i := first(~out["arm"].isin(arms))) is not None:
        raise fail(i, "arm", f"unknown arm {out['arm'][i]!r}; the protocol's arms are {sorted(arms)}")
    pattern = out["scenario"].str.fullmatch(protocol.SCENARIO_ID[1:-1])
    if (i := first(~pattern)) is not None:
        raise fail(i, "scenario", f"{out['scenario'][i]!r} is not a scenario id (e.g. ACC-01)")
    allowed = list(scenarios) if scenarios is not None else known_scenarios()
    table_backends = set(out["backend"])
    if (
        allowed
        and scenarios is None
        and len(table_backends) == 1
        and backends.has_role(next(iter(table_backends)), "scenarios")
    ):
        # A synthetic table may also name the generator's stand-ins for bundles not written yet.
        allowed += backends.role(next(iter(table_backends)), "scenarios")(out["scenario"].unique())
    if allowed:
        if (i := first(~out["scenario"].isin(allowed))) is not None:
            raise fail(i, "scenario", f"unknown scenario {out['scenario'][i]!r}; known: {', '.join(sorted(allowed))}")
    for col in ("occupation", "designed_depth", "professional_minutes"):
        n = out.groupby("scenario")[col].transform("nunique")
        if (i := first(n > 1)) is not None:
            raise fail(
                i, col, f"differs between runs of scenario {out['scenario'][i]}; it is a property of the scenario"
            )

    # Oracle counts and judge columns.
    if (i := first(out["criteria_passed"] > out["criteria_total"])) is not None:
        raise fail(i, "criteria_passed", "exceeds criteria_total")
    jcols = [judge_column(j) for j in judge_ids(study)]
    scores = out[jcols].to_numpy(dtype=float)
    available = (~np.isnan(scores)).sum(axis=1)
    if (i := first(out["n_judges"].to_numpy() != available)) is not None:
        raise fail(i, "n_judges", f"is {out['n_judges'][i]} but {available[i]} judge score column(s) are filled")
    if (i := first(out["judge_accept_votes"] > out["n_judges"])) is not None:
        raise fail(i, "judge_accept_votes", "exceeds n_judges")
    with np.errstate(invalid="ignore"):
        mean = np.where(available > 0, np.nansum(scores, axis=1) / np.maximum(available, 1), np.nan)
    Q = out["Q"].to_numpy(dtype=float)
    if (i := first(np.isnan(Q) != np.isnan(mean))) is not None:
        raise fail(i, "Q", "must be missing exactly when no judge score is available")
    if (i := first(np.abs(np.nan_to_num(Q) - np.nan_to_num(mean)) > 1e-3)) is not None:
        raise fail(i, "Q", f"{Q[i]!r} is not the mean of the available judge scores ({mean[i]:.4f})")

    # Outcome definitions: D excludes a violation, S follows D, E and Q at the protocol's q.
    D = out["D"].to_numpy(dtype=float)
    E = out["E"].to_numpy(dtype=float)
    if (i := first((D == 1) & (E == 1))) is not None:
        raise fail(i, "D", "D is true although a critical violation (E) is recorded")
    if (i := first((E == 1) & out["E_reasons"].isna())) is not None:
        raise fail(i, "E_reasons", "a critical violation needs its reason")
    S = out["S"].to_numpy(dtype=float, na_value=np.nan)
    expected = acceptance(D, E, Q, study.q)
    if (i := first(np.isnan(S) != np.isnan(expected))) is not None:
        why = (
            "S is missing although Q is present"
            if np.isnan(S[i])
            else "S must be missing when Q is missing (never zero)"
        )
        raise fail(i, "S", why)
    if (i := first(~np.isnan(S) & (S != expected))) is not None:
        raise fail(i, "S", f"S={int(S[i])} contradicts D={bool(D[i])}, E={bool(E[i])}, Q={Q[i]:.2f} at q={study.q:g}")

    # Caps, status and human time.
    cens = out["censored"].to_numpy(dtype=bool)
    has_reason = out["censor_reason"].notna().to_numpy()
    if (i := first(cens != has_reason)) is not None:
        raise fail(i, "censor_reason", "must be given exactly when the run is censored")
    if (i := first(cens != (out["status"] == "capped").to_numpy())) is not None:
        raise fail(i, "status", "a censored run has status 'capped', and only a censored run does")
    o = study["outcomes"]
    h = o["intervention_minutes"] + o["human_minutes_per_question"] * out["questions"].to_numpy(dtype=float)
    if (i := first(np.abs(out["H_minutes"].to_numpy(dtype=float) - h) > _TOL)) is not None:
        raise fail(
            i,
            "H_minutes",
            f"must be {o['intervention_minutes']} + {o['human_minutes_per_question']} x questions = {h[i]:g}",
        )

    # Self-repair fields only where the arm grants a recovery.
    recovering = {a.id for a in protocol.arms().values() if a.recovery_resumes > 0}
    can = out["arm"].isin(recovering).to_numpy()
    if (i := first(~can & out["recovery_used"].to_numpy(dtype=bool))) is not None:
        raise fail(i, "recovery_used", f"arm {out['arm'][i]} has no recovery resume")
    if (i := first(~can & out["selfcheck_first"].notna().to_numpy())) is not None:
        raise fail(i, "selfcheck_first", f"arm {out['arm'][i]} has no self-check; leave it empty")
    # A harness fault after inference may end a run before its self-check: the run table names the fault instead.
    faulted = (
        out["harness_fault"].notna().to_numpy() if "harness_fault" in out.columns else np.zeros(len(out), dtype=bool)
    )
    if (
        i := first(
            can & out["selfcheck_first"].isna().to_numpy() & (out["status"] != "infra_error").to_numpy() & ~faulted
        )
    ) is not None:
        raise fail(i, "selfcheck_first", "a self-repairing run records its first self-check")
    out.attrs[FAILED_DROPPED_ATTR] = n_failed
    out.attrs[EVAL_ERROR_DROPPED_ATTR] = n_eval_errors
    return out


def read_runtable(
    path: str | Path,
    *,
    study: protocol.Study | None = None,
    scenarios: Iterable[str] | None = None,
    allow_unisolated: bool = False,
) -> pd.DataFrame:
    """Read and validate a run table (CSV); refuses a malformed file, or unisolated real runs, with a RunTableError."""
    path = Path(path)
    if not path.is_file():
        raise RunTableError(str(path), None, "file not found")
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=list(MISSING_SPELLINGS))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise RunTableError(str(path), None, f"not a readable CSV ({exc})") from exc
    df = validate_runtable(raw, source=path, study=study, scenarios=scenarios)
    if not allow_unisolated:
        refuse_unisolated(df, path)
    return df


def write_runtable(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a run table as CSV in the schema's column order (booleans as true/false, missing as empty)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [s.name for s in columns()]
    extra = [c for c in df.columns if c not in names]
    df[names + extra].to_csv(path, index=False)
    return path


def primary_rows(df: pd.DataFrame, study: protocol.Study | None = None) -> pd.DataFrame:
    """The runs of the preregistered worker model (the model-sensitivity wave set aside)."""
    study = study or protocol.study()
    return df[df["model"] == study["worker"]["model"]].reset_index(drop=True)


def schema_frame(study: protocol.Study | None = None) -> pd.DataFrame:
    """The schema as a table (name, kind, nullable, allowed, range, meaning) for documentation."""
    rows = []
    for s in columns(study):
        rng = ""
        if s.minimum is not None or s.maximum is not None:
            rng = f"[{'' if s.minimum is None else s.minimum}, {'' if s.maximum is None else s.maximum}]"
        rows.append(
            {
                "column": s.name,
                "type": s.kind,
                "nullable": s.nullable,
                "allowed": ", ".join(map(str, s.allowed)) if s.allowed else "",
                "range": rng,
                "meaning": s.doc,
            }
        )
    return pd.DataFrame(rows)
