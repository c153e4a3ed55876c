"""The "why" page's numbers: what fails, per arm, across the whole study.

From the index rows (run-table rows with the facts :func:`pilot.view.study.add_facts`
adds): failed criteria, deviation families, critical violations and caps hit,
each counted per arm over the runs that could show it, the worker model's
arms apart from the model-sensitivity runs; acceptance per arm with its
interval, computed by the preregistered estimator and scenario-cluster
bootstrap of :mod:`pilot.stats` (not a second implementation); the points of
a cost-against-Q scatter; token counts per arm from the model proxy's
records. Every count keeps its denominator, and every group lists the runs
it leaves out and why.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pilot import protocol
from pilot.view import oracle_text, sessions
from pilot.view.usage import Tokens


@dataclass(frozen=True)
class Column:
    """One column of the tables: an arm under one worker model."""

    arm: str
    model: str
    sensitivity: bool
    shade: str = ""  # the colour class of a model-sensitivity column (sens-0, sens-1, ...)

    @property
    def key(self) -> str:
        return f"{self.arm}\0{self.model}"

    @property
    def label(self) -> str:
        return self.arm if not self.sensitivity else f"{self.arm} · {self.model}"


def columns_of(rows: list[dict[str, Any]], worker: str) -> list[Column]:
    """The worker model's arms in order, then each other model's arms (the sensitivity runs) apart."""
    seen = sorted({(str(r["arm"]), str(r.get("model") or "")) for r in rows})
    mine = [Column(a, m, False) for a, m in seen if m == worker]
    others = [(a, m) for a, m in sorted(seen, key=lambda am: (am[1], am[0])) if m != worker]
    return mine + [Column(a, m, True, f"sens-{i}") for i, (a, m) in enumerate(others)]


def _col(row: dict[str, Any], worker: str) -> Column:
    """The row's column (its key is what the tables index by; the colour class is the table's own)."""
    model = str(row.get("model") or "")
    return Column(str(row["arm"]), model, model != worker)


def evaluated(row: dict[str, Any]) -> bool:
    """Whether the run has an oracle verdict (a failed run, or one whose evaluation could not run, has none)."""
    return row.get("D") is not None and not row.get("eval_error")


@dataclass
class Cell:
    """Runs of one group that show a thing, out of the runs that could."""

    hits: int = 0
    of: int = 0

    @property
    def share(self) -> float | None:
        return self.hits / self.of if self.of else None


@dataclass
class CountTable:
    """A thing (a criterion, a family) per column: hits out of the runs that could show it."""

    key: str
    label: str
    detail: str = ""
    scenario: str = ""
    required: bool = True
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(c.hits for c in self.cells.values())


def _criterion_specs(scenarios: Iterable[str]) -> dict[str, dict[str, Any]]:
    from pilot.scenarios import load_scenario

    out: dict[str, dict[str, Any]] = {}
    for sid in scenarios:
        try:
            out[sid] = {c.id: c for c in load_scenario(sid).oracle.criteria}
        except Exception:  # noqa: BLE001 - a scenario that no longer loads is listed by its criterion ids alone
            out[sid] = {}
    return out


def failed_criteria(rows: list[dict[str, Any]], cols: list[Column], worker: str) -> list[CountTable]:
    """Each criterion that failed at least once: runs failing it per column, out of that scenario's evaluated runs."""
    done = [r for r in rows if evaluated(r)]
    specs = _criterion_specs(sorted({str(r["scenario"]) for r in done}))
    base: dict[tuple[str, str], int] = {}
    for r in done:
        key = (str(r["scenario"]), _col(r, worker).key)
        base[key] = base.get(key, 0) + 1
    tables: dict[tuple[str, str], CountTable] = {}
    for r in done:
        sid, col = str(r["scenario"]), _col(r, worker)
        for cid in r.get("failed_ids") or []:
            spec = specs.get(sid, {}).get(cid)
            t = tables.get((sid, cid))
            if t is None:
                t = tables[(sid, cid)] = CountTable(
                    cid,
                    cid,
                    oracle_text.criterion_intent(spec) if spec is not None else "",
                    sid,
                    bool(getattr(spec, "required", True)),
                )
            t.cells.setdefault(col.key, Cell()).hits += 1
    for (sid, _), t in tables.items():
        for c in cols:
            t.cells.setdefault(c.key, Cell()).of = base.get((sid, c.key), 0)
    return sorted(tables.values(), key=lambda t: (t.scenario, -t.total, t.key))


def finished(row: dict[str, Any]) -> bool:
    """Whether the run has a record (it ran to an end; a run failed on infrastructure has none)."""
    return row.get("sessions") is not None


def _by_value(
    rows: list[dict[str, Any]],
    cols: list[Column],
    worker: str,
    values_of: str,
    label_of: Any = None,
    eligible: Any = finished,
) -> list[CountTable]:
    """Runs per column showing each value of a list-valued fact, out of the column's eligible runs."""
    done = [r for r in rows if eligible(r)]
    base: dict[str, int] = {}
    for r in done:
        base[_col(r, worker).key] = base.get(_col(r, worker).key, 0) + 1
    tables: dict[str, CountTable] = {}
    for r in done:
        col = _col(r, worker)
        for v in r.get(values_of) or []:
            t = tables.setdefault(v, CountTable(v, label_of(v) if label_of else v))
            t.cells.setdefault(col.key, Cell()).hits += 1
    for t in tables.values():
        for c in cols:
            t.cells.setdefault(c.key, Cell()).of = base.get(c.key, 0)
    return sorted(tables.values(), key=lambda t: (-t.total, t.key))


#: A criterion kind in words (what fails when a criterion of the kind fails).
KIND_WORDS = {
    "present": "a deliverable is missing",
    "well_formed": "a deliverable is not a valid file of its type",
    "formulas": "a workbook has too few formulas",
    "no_error_values": "a workbook shows error values",
    "min_words": "a document is too short",
    "sections": "a document lacks a required section",
    "completion_record": "the completion record is invalid",
    "labelled_value": "a stated figure is wrong or absent",
    "labelled_bounds": "a figure is outside its bounds",
    "workbook_contains": "a workbook does not mention what it must",
    "text_contains": "a document does not mention what it must",
    "text_number": "a document does not state a figure",
    "csv_columns": "a table lacks columns",
    "csv_keys": "a table lists the wrong rows",
    "csv_value": "a table's figure is wrong",
    "decision": "a decision is wrong or not stated",
    "closed_scale": "a column leaves its scale",
}


def failed_kinds(rows: list[dict[str, Any]], cols: list[Column], worker: str) -> list[CountTable]:
    """Runs per column failing at least one criterion of each kind, out of the column's evaluated runs."""
    return _by_value(rows, cols, worker, "failed_kinds", lambda k: KIND_WORDS.get(k, k.replace("_", " ")), evaluated)


def deviation_families(rows: list[dict[str, Any]], cols: list[Column], worker: str) -> list[CountTable]:
    return _by_value(rows, cols, worker, "dev_families")


def violations(rows: list[dict[str, Any]], cols: list[Column], worker: str) -> list[CountTable]:
    return _by_value(rows, cols, worker, "violation_kinds")


def caps_hit(rows: list[dict[str, Any]], cols: list[Column], worker: str) -> list[CountTable]:
    """Runs per column in which any session reached each cap (a resumed first session counts)."""
    return _by_value(rows, cols, worker, "cap_kinds", lambda c: sessions.CAP_WORDS.get(c, c))


@dataclass(frozen=True)
class Acceptance:
    """One arm's scenario-weighted acceptance and percentile interval (``pilot.stats.primary.acceptance_table``)."""

    column: Column
    p_hat: float | None
    low: float | None
    high: float | None
    runs: int
    scored: int
    accepted: int
    scenarios: int
    note: str


def _finite(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def acceptance(rows: list[dict[str, Any]], cols: list[Column], worker: str, seed: int) -> list[Acceptance]:
    """p_a = J^-1 sum_j R_j^-1 sum_r S per column, with the 95 % scenario-cluster bootstrap interval of the stages."""
    import pandas as pd

    from pilot.stats import estimators, resampling
    from pilot.stats.primary import InferenceSettings, acceptance_table

    settings = InferenceSettings.from_study(seed)
    out = []
    finished = [r for r in rows if r.get("sessions") is not None or r.get("D") is not None]
    for model in dict.fromkeys(c.model for c in cols):
        mine = [c for c in cols if c.model == model]
        group = [r for r in finished if str(r.get("model") or "") == model and r.get("scenario")]
        if not group:
            continue
        df = pd.DataFrame(
            {
                "scenario": [r["scenario"] for r in group],
                "arm": [r["arm"] for r in group],
                "occupation": [r.get("occupation") or "" for r in group],
                "professional_minutes": [_finite(r.get("professional_minutes")) or 0.0 for r in group],
                "designed_depth": [_finite(r.get("designed_depth")) or 0.0 for r in group],
            }
        )
        S = np.array([np.nan if r.get("S") is None else float(bool(r["S"])) for r in group])
        layout = estimators.Layout.of(df, [c.arm for c in mine])
        means = layout.means(S)
        counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 2]), layout.J, settings.B)
        _, scored = layout.sums(S)
        table, _ = acceptance_table(
            means,
            layout,
            layout.weights("equal"),
            settings,
            counts,
            layout.runs_per_arm(),
            scored.sum(axis=0).astype(int),
        )
        for c, (_, t) in zip(mine, table.iterrows(), strict=True):
            acc = sum(1 for r in group if r["arm"] == c.arm and r.get("S") is True)
            out.append(
                Acceptance(
                    c,
                    _finite(t["p_hat"]),
                    _finite(t["ci_low"]),
                    _finite(t["ci_high"]),
                    int(t["n_runs"]),
                    int(t["n_scored"]),
                    acc,
                    int(t["n_scenarios"]),
                    str(t["note"] or ""),
                )
            )
    return out


@dataclass(frozen=True)
class Point:
    """One run in the cost-against-Q scatter."""

    run_id: str
    column: Column
    cost: float
    q: float
    accepted: bool | None


def scatter(rows: list[dict[str, Any]], worker: str, cols: list[Column]) -> tuple[list[Point], int]:
    """(runs with both an agent cost C and a Q, how many runs lack one or the other)."""
    by_key = {c.key: c for c in cols}
    points, left = [], 0
    for r in rows:
        cost, q = _finite(r.get("cost_usd")), _finite(r.get("Q"))
        if r.get("sessions") is None and r.get("D") is None:
            continue  # not run yet
        if cost is None or q is None:
            left += 1
            continue
        col = _col(r, worker)
        points.append(Point(str(r["run_id"]), by_key.get(col.key, col), cost, q, r.get("S")))
    return points, left


@dataclass
class TokenRow:
    """Token counts of one column: sums over the runs with a proxy record, and the median per run."""

    column: Column
    runs: int = 0
    recorded: int = 0
    total: Tokens = field(default_factory=Tokens)
    per_run: list[int] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.per_run) if self.per_run else None


def tokens(rows: list[dict[str, Any]], cols: list[Column], worker: str) -> list[TokenRow]:
    by = {c.key: TokenRow(c) for c in cols}
    for r in rows:
        if r.get("sessions") is None:
            continue
        t = by.get(_col(r, worker).key)
        if t is None:
            continue
        t.runs += 1
        detail = r.get("tokens_detail")
        if detail is not None:
            t.recorded += 1
            t.total.merge(detail)
            t.per_run.append(detail.total)
    return [by[c.key] for c in cols]


@dataclass
class Aggregates:
    """Everything the "why" page shows."""

    columns: list[Column]
    worker: str
    runs: int
    evaluated: int
    criteria: list[CountTable]
    kinds: list[CountTable]
    deviations: list[CountTable]
    violations: list[CountTable]
    caps: list[CountTable]
    acceptance: list[Acceptance]
    points: list[Point]
    points_left_out: int
    tokens: list[TokenRow]
    q: float
    B: int
    seed: int


def aggregates(rows: list[dict[str, Any]], worker: str, seed: int) -> Aggregates:
    from pilot.stats.primary import InferenceSettings

    cols = columns_of(rows, worker)
    points, left = scatter(rows, worker, cols)
    settings = InferenceSettings.from_study(seed)
    return Aggregates(
        columns=cols,
        worker=worker,
        runs=len(rows),
        evaluated=sum(1 for r in rows if evaluated(r)),
        criteria=failed_criteria(rows, cols, worker),
        kinds=failed_kinds(rows, cols, worker),
        deviations=deviation_families(rows, cols, worker),
        violations=violations(rows, cols, worker),
        caps=caps_hit(rows, cols, worker),
        acceptance=acceptance(rows, cols, worker, seed),
        points=points,
        points_left_out=left,
        tokens=tokens(rows, cols, worker),
        q=float(protocol.study().q),
        B=settings.B,
        seed=settings.seed,
    )
