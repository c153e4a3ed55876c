"""Judge finished runs again under the other workbook rendering, and what it does to Q and S (``pilot study rejudge``).

Amendment A-027 changed what the judges read of a workbook: before it, the
values stored in the file and a bare formula where the file stored none
(``stored``); after it, the values a spreadsheet program computes, from the
oracle's recalculated copy (``recalculated``; :mod:`pilot.judges.render`).
A study judged under one rendering is measured against the other here:

- **Selection.** The finished, judged runs of the primary waves (pilot,
  repeat3) of the study's worker model whose evaluation stands, all of them or
  ``per_stratum`` per scenario and arm, drawn without replacement with a
  seeded generator. Each keeps the rendering it was judged under (its
  record's ``judge_rendering``; a record without one was judged before
  A-027, ``stored``) and is judged again under the other.
- **Judging.** The study's own panel and judge backend, the run's own seed
  (the simulated judges then draw the same noise, so a difference is the
  rendering's alone), the same withheld identifiers as the pipeline, and for
  ``recalculated`` the run's kept copies (made now, in one LibreOffice pass,
  for a run judged before they were kept). The study's lock is held
  throughout.
- **Store.** One row per run and rendering in ``rejudgements``, beside the
  run's record, never in it: the primary analysis reads the record's judges
  alone. A run already rejudged under that rendering is not judged again (a
  kill loses at most the run in hand). The judges' cost is recorded with
  each row and summed in the result.
- **Report.** :func:`rendering_sensitivity` puts Q (the mean of the available
  judges) and S (``1{D=1, E=0, Q >= q}``) of the same runs under both
  renderings side by side, per arm, with scenario-equal weights as the
  primary estimator has them, and the change in each arm's Q and S and in
  the design's contrasts. Every number of a dry run is SIMULATED.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pilot import backends, protocol
from pilot.store import Store, now

RENDERINGS = ("recalculated", "stored")
#: The rendering a record names nowhere: everything judged before A-027.
BEFORE = "stored"
PRIMARY_WAVES = ("pilot", "repeat3")
SCHEMA = """
CREATE TABLE IF NOT EXISTS rejudgements (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    rendering TEXT NOT NULL,
    judged_at TEXT NOT NULL,
    judge_backend TEXT NOT NULL,
    judges_json TEXT NOT NULL,
    q REAL,
    n_judges INTEGER NOT NULL,
    accept_votes INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    PRIMARY KEY (run_id, rendering)
);
"""


class RejudgeError(RuntimeError):
    """The rejudging cannot run; the message says why and what to do."""


@dataclass
class Rejudged:
    """What one call did: runs judged again, runs already done, and the judges' cost."""

    study: str
    backend: str
    judge_backend: str
    label: str
    judged: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    cost_usd: float = 0.0


def judged_rendering(record: dict[str, Any]) -> str:
    """The rendering a run's judges read (``stored`` for a record from before A-027)."""
    value = record.get("judge_rendering")
    return str(value) if value in RENDERINGS else BEFORE


def other(rendering: str) -> str:
    return RENDERINGS[1] if rendering == RENDERINGS[0] else RENDERINGS[0]


def judged_q(judges: Iterable[dict[str, Any]]) -> tuple[float | None, int, int]:
    """(Q, judges available, accept votes) from a run's judge results, as the run table computes Q."""
    scores = [float(j["score_0_100"]) for j in judges if j.get("score_0_100") is not None and not j.get("error")]
    votes = sum(1 for j in judges if j.get("accept") is True and not j.get("error"))
    return (float(np.mean(scores)) if scores else None), len(scores), votes


def _ensure_schema(store: Store) -> None:
    store.conn.executescript(SCHEMA)


def eligible(store: Store) -> list[dict[str, Any]]:
    """Finished runs of the primary waves of the worker model, judged by at least one judge, verdict standing."""
    from pilot.run_record import evaluation_error

    model = store.study().worker_model
    out = []
    for r in store.finished_rows():
        if r["wave"] not in PRIMARY_WAVES or r["model"] != model or r["status"] != "done" or not r.get("record_json"):
            continue
        rec = json.loads(r["record_json"])
        if rec.get("status") == "infra_error" or evaluation_error(rec) is not None:
            continue
        if judged_q(rec.get("judges") or [])[0] is None:
            continue
        out.append({**r, "record": rec})
    return out


def draw(rows: Sequence[dict[str, Any]], per_stratum: int | None, seed: int) -> list[dict[str, Any]]:
    """All rows, or ``per_stratum`` per scenario and arm drawn without replacement (seeded), in run-id order."""
    if per_stratum is None:
        return sorted(rows, key=lambda r: r["run_id"])
    rng = np.random.default_rng(seed)
    chosen: list[dict[str, Any]] = []
    strata: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["run_id"]):
        strata.setdefault((r["scenario"], r["arm"]), []).append(r)
    for key in sorted(strata):
        group = strata[key]
        take = min(per_stratum, len(group))
        chosen.extend(group[i] for i in sorted(rng.choice(len(group), size=take, replace=False)))
    return sorted(chosen, key=lambda r: r["run_id"])


def _attempt_dir(store: Store, run_id: str) -> Path:
    row = store.conn.execute(
        "SELECT a.workspace FROM runs x JOIN attempts a ON a.attempt_id = x.attempt_id WHERE x.run_id = ?", (run_id,)
    ).fetchone()
    return Path(row[0])


def rejudge_study(
    folder: Path,
    *,
    per_stratum: int | None = None,
    seed: int | None = None,
    rendering: str | None = None,
    dry_run: bool = False,
) -> Rejudged:
    """Judge the selected runs again under the other rendering (or ``rendering`` for all); see the module."""
    from pilot.judges.panel import judge_run
    from pilot.judges.prompt import requested_names
    from pilot.judges.render import ensure_recalculated
    from pilot.pipeline import judge_backend_for
    from pilot.reevaluate import study_backend
    from pilot.scenarios import load_scenario
    from pilot.schedule import ScheduleError, study_lock

    if rendering is not None and rendering not in RENDERINGS:
        raise RejudgeError(f"unknown rendering {rendering!r}; choose one of {', '.join(RENDERINGS)}")
    store = Store.open(Path(folder))
    try:
        try:
            with study_lock(store.folder):
                _ensure_schema(store)
                info = store.study()
                backend = study_backend(store)
                if "," in backend:
                    raise RejudgeError(
                        f"study {info.name} was run on several backends ({backend}); rejudge one at a time"
                    )
                jb = judge_backend_for(backend)
                done = Rejudged(info.name, backend, jb, backends.label(backend))
                rows = draw(eligible(store), per_stratum, info.seed if seed is None else seed)
                for r in rows:
                    target = rendering or other(judged_rendering(r["record"]))
                    if target == judged_rendering(r["record"]):
                        done.skipped[r["run_id"]] = f"its judges already read the {target} rendering"
                        continue
                    have = store.conn.execute(
                        "SELECT 1 FROM rejudgements WHERE run_id = ? AND rendering = ?", (r["run_id"], target)
                    ).fetchone()
                    if have:
                        done.already.append(r["run_id"])
                        continue
                    if dry_run:
                        done.judged.append(r["run_id"])
                        continue
                    attempt_dir = _attempt_dir(store, r["run_id"])
                    rec = r["record"]
                    workspace = Path(rec.get("workspace") or attempt_dir / "workspace")
                    scenario = load_scenario(r["scenario"])
                    kept = None
                    if target == "recalculated":
                        kept = ensure_recalculated(attempt_dir, workspace / "outputs", requested_names(scenario))
                    attempt = store.conn.execute(
                        "SELECT a.node FROM runs x JOIN attempts a ON a.attempt_id = x.attempt_id WHERE x.run_id = ?",
                        (r["run_id"],),
                    ).fetchone()
                    withheld = [r["run_id"], attempt[0] or "", info.name, str(attempt_dir), str(workspace)]
                    results = [
                        j.to_dict()
                        for j in judge_run(
                            scenario,
                            workspace / "outputs",
                            backend=jb,
                            seed=int(r["seed"]),
                            withheld=[w for w in withheld if w],
                            recalculated=kept,
                            rendering=target,
                        )
                    ]
                    q, n, votes = judged_q(results)
                    cost = float(sum(float(j.get("cost_usd") or 0.0) for j in results))
                    store.conn.execute(
                        "INSERT INTO rejudgements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (r["run_id"], target, now(), jb, json.dumps(results), q, n, votes, cost),
                    )
                    done.judged.append(r["run_id"])
                    done.cost_usd += cost
                return done
        except ScheduleError as exc:
            raise RejudgeError(f"{exc}; rejudge once it has stopped") from exc
    finally:
        store.close()


# --------------------------------------------------------------------------
# Q and S under both renderings
# --------------------------------------------------------------------------


def paired_runs(folder: Path, q: float | None = None) -> Any:
    """One row per rejudged run: its arm, scenario, D, E and Q and S under each rendering (``Q_stored`` ...)."""
    import pandas as pd

    from pilot.runtable import meets_threshold

    threshold = float(protocol.study().q if q is None else q)
    store = Store.open(Path(folder))
    try:
        have = store.conn.execute("SELECT name FROM sqlite_master WHERE name = 'rejudgements'").fetchone()
        rows = []
        if have:
            records = {r["run_id"]: r for r in store.finished_rows()}
            for j in store.conn.execute("SELECT run_id, rendering, q FROM rejudgements ORDER BY run_id"):
                base = records.get(j["run_id"])
                if base is None or not base.get("record_json"):
                    continue
                rec = json.loads(base["record_json"])
                first = judged_rendering(rec)
                q_first = judged_q(rec.get("judges") or [])[0]
                by = {first: q_first, j["rendering"]: j["q"]}
                row: dict[str, Any] = {
                    "run_id": j["run_id"],
                    "scenario": base["scenario"],
                    "arm": base["arm"],
                    "D": bool(rec.get("D")),
                    "E": bool(rec.get("E")),
                    "judged_first": first,
                }
                for name in RENDERINGS:
                    value = by.get(name)
                    row[f"Q_{name}"] = value
                    row[f"S_{name}"] = (
                        None
                        if value is None
                        else bool(row["D"] and not row["E"] and bool(meets_threshold(np.array([value]), threshold)[0]))
                    )
                rows.append(row)
    finally:
        store.close()
    cols = ["run_id", "scenario", "arm", "D", "E", "judged_first"] + [
        f"{m}_{n}" for n in RENDERINGS for m in ("Q", "S")
    ]
    return pd.DataFrame(rows, columns=cols)


def _scenario_weighted(frame: Any, column: str) -> float:
    """J^-1 sum_j (mean over the scenario's runs): the primary estimator's weights; NaN when nothing is there."""
    values = frame.dropna(subset=[column])
    if values.empty:
        return math.nan
    return float(values.groupby("scenario")[column].apply(lambda s: s.astype(float).mean()).mean())


@dataclass
class RenderingSensitivity:
    """Q and S per arm of the same runs under both renderings (scenario-equal weights), and the contrasts."""

    summary: Any  # pandas DataFrame: arm, n, Q and S under each rendering, and the change
    contrasts: Any  # pandas DataFrame: contrast, S difference under each rendering, and the change
    label: str
    q: float

    def to_latex(self) -> str:
        from pilot.latex import latex_escape

        def num(x: Any, digits: int) -> str:
            return (
                "not estimable (no run)" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"
            )

        lines = [
            "\\begin{tabular}{lrrrrrrr}",
            "\\toprule",
            "Arm & $n$ & $Q$ stored & $Q$ recalculated & $\\Delta Q$ "
            "& $S$ stored & $S$ recalculated & $\\Delta S$ \\\\",
            "\\midrule",
        ]
        for r in self.summary.to_dict("records"):
            cells = [latex_escape(str(r["arm"])), str(int(r["n"]))]
            cells += [num(r[k], 1) for k in ("Q_stored", "Q_recalculated", "delta_Q")]
            cells += [num(r[k], 2) for k in ("S_stored", "S_recalculated", "delta_S")]
            lines.append(" & ".join(cells) + " \\\\")
        lines += ["\\bottomrule", "\\end{tabular}"]
        return "\n".join(lines) + "\n"


def rendering_sensitivity(
    paired: Any, *, label: str, q: float, contrasts: Sequence[Sequence[str]] = ()
) -> RenderingSensitivity:
    """Per arm: runs, scenario-weighted Q and S under each rendering and their change; per contrast, the S change."""
    import pandas as pd

    rows = []
    for arm, group in paired.groupby("arm", sort=True):
        row: dict[str, Any] = {"arm": arm, "n": len(group)}
        for name in RENDERINGS:
            row[f"Q_{name}"] = _scenario_weighted(group, f"Q_{name}")
            row[f"S_{name}"] = _scenario_weighted(group, f"S_{name}")
        row["delta_Q"] = row["Q_recalculated"] - row["Q_stored"]
        row["delta_S"] = row["S_recalculated"] - row["S_stored"]
        rows.append(row)
    summary = pd.DataFrame(
        rows,
        columns=["arm", "n", "Q_stored", "Q_recalculated", "delta_Q", "S_stored", "S_recalculated", "delta_S"],
    )
    by_arm = summary.set_index("arm")
    out = []
    for a, b in contrasts:
        if a in by_arm.index and b in by_arm.index:
            s_old = by_arm.loc[a, "S_stored"] - by_arm.loc[b, "S_stored"]
            s_new = by_arm.loc[a, "S_recalculated"] - by_arm.loc[b, "S_recalculated"]
            q_old = by_arm.loc[a, "Q_stored"] - by_arm.loc[b, "Q_stored"]
            q_new = by_arm.loc[a, "Q_recalculated"] - by_arm.loc[b, "Q_recalculated"]
            out.append(
                {
                    "contrast": f"{a}-{b}",
                    "S_stored": s_old,
                    "S_recalculated": s_new,
                    "delta_S": s_new - s_old,
                    "Q_stored": q_old,
                    "Q_recalculated": q_new,
                    "delta_Q": q_new - q_old,
                }
            )
    table = pd.DataFrame(
        out, columns=["contrast", "S_stored", "S_recalculated", "delta_S", "Q_stored", "Q_recalculated", "delta_Q"]
    )
    return RenderingSensitivity(summary, table, label, q)


TABLE_CSV = "rendering_sensitivity.csv"
CONTRASTS_CSV = "rendering_sensitivity_contrasts.csv"
TABLE_TEX = "rendering_sensitivity_table.tex"
MACROS_TEX = "rendering_sensitivity_macros.tex"


def write_outputs(folder: Path, tables_dir: Path | None, generated_dir: Path | None) -> list[Path]:
    """The sensitivity's CSV tables and the manuscript's table and macros; none (and earlier ones removed) when no run
    was rejudged, so that the manuscript says the sensitivity was not run."""
    from pilot.latex import latex_escape
    from pilot.reevaluate import study_backend
    from pilot.store import atomic_write_text

    study = protocol.study()
    store = Store.open(Path(folder))
    try:
        label = backends.label_of(study_backend(store).split(","))
        name = store.study().name
    finally:
        store.close()
    paired = paired_runs(folder, study.q)
    targets = [
        *((Path(tables_dir) / f) for f in (TABLE_CSV, CONTRASTS_CSV) if tables_dir is not None),
        *((Path(generated_dir) / f) for f in (TABLE_TEX, MACROS_TEX) if generated_dir is not None),
    ]
    if paired.empty:
        for t in targets:
            t.unlink(missing_ok=True)
        return []
    result = rendering_sensitivity(paired, label=label, q=float(study.q), contrasts=study.contrasts)
    written: list[Path] = []
    tag = {"SIMULATED": "SIMULATED", "REHEARSAL": "REHEARSAL"}.get(label, "")
    if tables_dir is not None:
        Path(tables_dir).mkdir(parents=True, exist_ok=True)
        written.append(
            atomic_write_text(
                Path(tables_dir) / TABLE_CSV, result.summary.assign(study=name, label=tag).to_csv(index=False)
            )
        )
        written.append(
            atomic_write_text(
                Path(tables_dir) / CONTRASTS_CSV, result.contrasts.assign(study=name, label=tag).to_csv(index=False)
            )
        )
    if generated_dir is not None:
        Path(generated_dir).mkdir(parents=True, exist_ok=True)
        head = f"{tag}: " if tag else ""
        caption = (
            f"{head}Q and S per arm of the same {len(paired)} runs under the workbook rendering before A-027 "
            f"(stored values, bare formulas) and after it (values computed on opening), scenario-equal weights, "
            f"$q={study.q:g}$."
        )
        table = (
            "\\begin{table}[htbp]\n\\centering\n\\small\n"
            f"\\caption{{{caption}}}\\label{{tab:rendering-sensitivity}}\n" + result.to_latex() + "\\end{table}\n"
        )
        written.append(atomic_write_text(Path(generated_dir) / TABLE_TEX, table))
        primary = result.contrasts.iloc[0] if not result.contrasts.empty else None

        def fmt(x: Any, digits: int) -> str:
            return "not estimable" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"

        macros = {
            "RenderingRuns": str(len(paired)),
            "RenderingLabel": latex_escape(tag or "real"),
            "RenderingPrimaryContrast": latex_escape(str(primary["contrast"])) if primary is not None else "none",
            "RenderingPrimaryStored": fmt(primary["S_stored"], 3) if primary is not None else "not estimable",
            "RenderingPrimaryRecalculated": fmt(primary["S_recalculated"], 3)
            if primary is not None
            else "not estimable",
            "RenderingPrimaryChange": fmt(primary["delta_S"], 3) if primary is not None else "not estimable",
        }
        body = "".join(f"\\newcommand{{\\{k}}}{{{v}}}\n" for k, v in macros.items())
        written.append(atomic_write_text(Path(generated_dir) / MACROS_TEX, body))
    return written
