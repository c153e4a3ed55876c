"""This run in numbers: how its cells went from planned to analysed, and what it spent against the envelope.

Everything is read from the study's store (cells, attempts, ledger) and from
its exported run table, never typed in, so the manuscript's "this run"
section describes the study it was built from. ``collect`` gathers the
numbers into a :class:`RunReport`; ``write`` turns it into a CSV and LaTeX
table each for the flow and the ledger, the run-flow figure and
``run_macros.tex`` (one macro per number the text cites).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pilot import paths, protocol
from pilot.ledger import Balance
from pilot.backends import label_of
from pilot.latex import SIMULATED_TAG, format_number, macro_name, write_macros, write_table

# The steps of the run flow, in order, with what each counts.
FLOW_STEPS: tuple[tuple[str, str], ...] = (
    ("planned", "cells (scenario, arm, repeat) assigned in the store"),
    ("dispatched", "cells with at least one attempt"),
    ("attempts", "attempts made, reruns included"),
    ("infrastructure reruns", "attempts that failed for infrastructure or were interrupted, and were rerun under the same run id"),
    ("failed", "runs that ran out of infrastructure attempts"),
    ("finished", "runs with an outcome recorded"),
    ("censored", "finished runs that reached a cap"),
    ("judged", "exported runs with at least one judge score"),
    ("analysed", "runs of the worker model with an acceptance value, the rows the primary analysis uses"),
)
_FAILED_ATTEMPTS = ("infra_error", "interrupted")


@dataclass(frozen=True)
class RunReport:
    """The run flow per wave and the ledger per arm and wave of one study."""

    study: str
    backend: str
    simulated: bool
    flow: pd.DataFrame  # step, one column per wave, total
    ledger: pd.DataFrame  # arm, one spent column per wave, total
    balance: Balance  # the envelope, spent, reserved and remaining, as the ledger states them
    #: SIMULATED, REHEARSAL or "" (a finding), from the backends (pilot.backends.label_of)
    label: str = ""

    @property
    def summary(self) -> pd.DataFrame:
        return self.flow

    def count(self, step: str, wave: str = "total") -> int:
        return int(self.flow.set_index("step").loc[step, wave])


def collect(store: object, runs: pd.DataFrame | None, study: protocol.Study | None = None) -> RunReport:
    """The run flow and ledger of the study in ``store``; ``runs`` is its exported run table (or None)."""
    study = study or protocol.study()
    cells = pd.DataFrame(store.cell_rows())  # type: ignore[attr-defined]
    attempts = pd.DataFrame(store.attempts())  # type: ignore[attr-defined]
    backends = sorted(set(attempts["backend"])) if not attempts.empty else []
    waves = [w for w in ("pilot", "repeat3", "sensitivity") if not cells.empty and (cells["wave"] == w).any()]
    wave_of = dict(zip(cells["run_id"], cells["wave"])) if not cells.empty else {}
    if not attempts.empty:
        attempts = attempts.assign(wave=attempts["run_id"].map(wave_of))
    exported = runs if runs is not None else pd.DataFrame(columns=["run_id", "wave", "censored", "n_judges", "S", "model"])

    def per_wave(wave: str) -> dict[str, int]:
        c = cells[cells["wave"] == wave]
        a = attempts[attempts["wave"] == wave] if not attempts.empty else attempts
        r = exported[exported["wave"] == wave]
        censored = r["censored"].fillna(False).astype(bool) if len(r) else pd.Series(dtype=bool)
        judged = pd.to_numeric(r["n_judges"], errors="coerce").fillna(0) > 0 if len(r) else pd.Series(dtype=bool)
        analysed = (r["model"] == study["worker"]["model"]) & r["S"].notna() if len(r) else pd.Series(dtype=bool)
        return {
            "planned": len(c),
            "dispatched": int(a["run_id"].nunique()) if len(a) else 0,
            "attempts": len(a),
            "infrastructure reruns": int(a["outcome"].isin(_FAILED_ATTEMPTS).sum()) if len(a) else 0,
            "failed": int((c["status"] == "failed").sum()),
            "finished": int((c["status"] == "done").sum()),
            "censored": int(censored.sum()),
            "judged": int(judged.sum()),
            "analysed": int(analysed.sum()),
        }

    counts = {w: per_wave(w) for w in waves}
    flow = pd.DataFrame({"step": [s for s, _ in FLOW_STEPS]})
    for w in waves:
        flow[w] = [counts[w][s] for s, _ in FLOW_STEPS]
    flow["total"] = flow[waves].sum(axis=1) if waves else 0

    status = pd.DataFrame(store.status_by_arm())  # type: ignore[attr-defined]
    if status.empty:
        ledger = pd.DataFrame(columns=["arm", "total"])
    else:
        ledger = status.pivot_table(index="arm", columns="wave", values="spent_usd", aggfunc="sum", fill_value=0.0)
        ledger = ledger[[w for w in waves if w in ledger.columns]]
        ledger["total"] = ledger.sum(axis=1)
        ledger = ledger.reset_index()
        ledger.columns.name = None
        total = ledger.drop(columns="arm").sum().to_frame().T.assign(arm="all")
        ledger = pd.concat([ledger, total[ledger.columns]], ignore_index=True)
    return RunReport(
        study=store.study().name,  # type: ignore[attr-defined]
        backend=", ".join(backends) or "none",
        simulated=bool(label_of(backends)) or not backends,
        label=label_of(backends) if backends else SIMULATED_TAG,
        flow=flow,
        ledger=ledger,
        balance=store.balance(),  # type: ignore[attr-defined]
    )


def flow_figure(report: RunReport, path: Path) -> Path:
    """Horizontal bars, one per step of the run flow, with the count written beside each."""
    import matplotlib.pyplot as plt

    from pilot.stats.figures import save_figure  # PDF for the manuscript, PNG twin for the notebook

    steps = list(report.flow["step"])[::-1]
    values = list(report.flow["total"])[::-1]
    fig, ax = plt.subplots(figsize=(6.0, 0.32 * len(steps) + 1.0))
    ax.barh(steps, values, color="0.55", height=0.6)
    top = max(values) if values and max(values) > 0 else 1
    for y, v in enumerate(values):
        ax.text(v + top * 0.01, y, f"{v:,}", va="center", fontsize=8)
    ax.set_xlim(0, top * 1.12)
    ax.set_xlabel("count (all waves)")
    ax.tick_params(labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    title = f"run flow of study {report.study}"
    ax.set_title(f"{report.label}: {title}" if report.label else title, fontsize=9)
    return save_figure(fig, path)


def write(report: RunReport, tables_dir: Path | str, figures_dir: Path | str, generated_dir: Path | str) -> dict[str, Path]:
    """CSV and LaTeX tables of the flow and the ledger, the run-flow figure and its environment, and ``run_macros.tex``."""
    from pilot.report.stage_outputs import figure_env

    tables, figs, gen = (paths.from_root(d) for d in (tables_dir, figures_dir, generated_dir))
    for d in (tables, figs, gen):
        d.mkdir(parents=True, exist_ok=True)
    sim = report.label
    out: dict[str, Path] = {}
    out["run_flow.csv"] = tables / f"run_flow_{report.study}.csv"
    report.flow.assign(study=report.study).to_csv(out["run_flow.csv"], index=False)
    out["run_ledger.csv"] = tables / f"run_ledger_{report.study}.csv"
    report.ledger.assign(study=report.study).to_csv(out["run_ledger.csv"], index=False)

    meaning = dict(FLOW_STEPS)
    flow = report.flow.copy()
    flow.insert(1, "counts", [meaning[s] for s in flow["step"]])
    flow["step"] = flow["step"].str.capitalize()
    out["run_flow_table.tex"] = write_table(
        flow.rename(columns={"step": "Step", "counts": "What is counted", "repeat3": "Third repeat"}),
        gen / "run_flow_table.tex",
        caption=f"Run flow of study \\texttt{{{report.study}}} per wave, from the store and the exported run table.",
        label="tab:run-flow", simulated=sim, column_format="lp{0.34\\linewidth}" + "r" * (len(flow.columns) - 2),
    )
    ledger = report.ledger.rename(columns={"pilot": "pilot_usd", "repeat3": "third_repeat_usd", "sensitivity": "sensitivity_usd", "total": "total_usd"})
    out["run_ledger_table.tex"] = write_table(
        ledger, gen / "run_ledger_table.tex",
        caption=(f"Dollars charged by the ledger (agents and judges, every attempt) per arm and wave, against the envelope of "
                 f"\\${format_number(report.balance.envelope_usd, 2)}; \\${format_number(report.balance.reserved_usd, 2)} still reserved."),
        label="tab:run-ledger", simulated=sim,
    )
    pdf = flow_figure(report, figs / "run_flow.pdf")
    out["run_flow.pdf"] = pdf
    out["run_flow_figure.tex"] = figure_env(
        pdf, gen / "run_flow_figure.tex",
        caption="Run flow over all waves: cells planned and dispatched, attempts and infrastructure reruns, runs failed, finished, censored at a cap, judged and analysed.",
        label="fig:run-flow", simulated=sim, width="0.75\\linewidth",
    )
    m: dict[str, object] = {
        "RunStudy": report.study,
        "RunBackend": report.backend,
        "RunDataLabel": report.label or "real",
        "RunEnvelopeUsd": report.balance.envelope_usd,
        "RunSpentUsd": report.balance.spent_usd,
        "RunReservedUsd": report.balance.reserved_usd,
        "RunRemainingUsd": report.balance.remaining_usd,
        "RunSpentPct": f"{100 * report.balance.spent_usd / report.balance.envelope_usd:.0f}" if report.balance.envelope_usd else "---",
        "RunWaves": len([c for c in report.flow.columns if c not in ("step", "total")]),
    }
    for step, _ in FLOW_STEPS:
        m[macro_name("Run", step)] = report.count(step)
    for _, r in report.ledger.iterrows():
        m[macro_name("RunSpent", "all" if r["arm"] == "all" else r["arm"])] = float(r["total"])
    out["run_macros.tex"] = write_macros(m, gen / "run_macros.tex", digits=2, comment=f"run report of study {report.study}")
    return out
