"""This run in numbers: how its cells went from planned to analysed, and what it spent against the envelope.

Everything is read from the study's store (cells, attempts, ledger) and from
its exported run table, never typed in, so the manuscript's "this run"
section describes the study it was built from. ``collect`` gathers the
numbers into a :class:`RunReport`; ``write`` turns it into a CSV and LaTeX
table each for the flow and the ledger, the run-flow figure and
``run_macros.tex`` (one macro per number the text cites).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from pilot import paths, protocol
from pilot.backends import PARTICIPANT_BACKENDS, label_of
from pilot.latex import SIMULATED_TAG, LatexText, format_number, macro_name, write_macros, write_table
from pilot.ledger import Balance
from pilot.report import run_fidelity, stand_ins, worked_scenario
from pilot.store import HUMAN_WAVE

# The steps of the run flow, in order, with what each counts.
FLOW_STEPS: tuple[tuple[str, str], ...] = (
    ("planned", "cells (scenario, arm, repeat) assigned in the store"),
    ("dispatched", "cells with at least one attempt"),
    ("attempts", "attempts made, reruns included"),
    (
        "infrastructure reruns",
        "attempts that failed for infrastructure or were interrupted, and were rerun under the same run id",
    ),
    ("failed", "runs that ran out of infrastructure attempts"),
    ("finished", "runs with an outcome recorded"),
    ("censored", "finished runs that reached a cap"),
    ("judged", "exported runs with at least one judge score"),
    ("analysed", "runs of the worker model with an acceptance value, the rows the primary analysis uses"),
)
_FAILED_ATTEMPTS = ("infra_error", "interrupted")
# The run-table columns the report reads; a table without one reads as all missing.
_EXPORT_COLUMNS = (
    "run_id",
    "wave",
    "arm",
    "model",
    "status",
    "censored",
    "censor_reason",
    "n_judges",
    "S",
    "D",
    "E",
    "eval_error",
    "harness_fault",
    "deviations",
    "node",
)


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
    #: Each arm's path from assigned to analysed (:data:`pilot.report.run_fidelity.FLOW_BY_ARM`)
    flow_by_arm: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Protocol fidelity per arm (:func:`pilot.report.run_fidelity.fidelity`)
    fidelity: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The one recovery resume of the self-repairing arm: granted, withheld or not needed, with reasons
    resumes: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The arm whose resumes ``resumes`` counts
    resume_arm: str = ""
    #: What failed, per arm of the worker model (:func:`pilot.report.run_fidelity.failure_taxonomy`)
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The worked-scenario appendix (:func:`pilot.report.worked_scenario.worked_scenario`), "" without a scored run
    worked: str = ""

    @property
    def summary(self) -> pd.DataFrame:
        return self.flow

    def count(self, step: str, wave: str = "total") -> int:
        return int(self.flow.set_index("step").loc[step, wave])


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class StoreReader(Protocol):
    """What the run report reads from a study's store (a :class:`pilot.store.Store`)."""

    def cell_rows(self, wave: str | None = None) -> list[dict[str, Any]]: ...
    def attempts(self, run_id: str | None = None) -> list[dict[str, Any]]: ...
    def runs(self) -> list[dict[str, Any]]: ...
    def status_by_arm(self) -> list[dict[str, Any]]: ...
    def study(self) -> _Named: ...
    def balance(self) -> Balance: ...


def collect(store: StoreReader, runs: pd.DataFrame | None, study: protocol.Study | None = None) -> RunReport:
    """The run flow and ledger of the study in ``store``; ``runs`` is its exported run table (or None)."""
    study = study or protocol.study()
    cells = pd.DataFrame(store.cell_rows())
    attempts = pd.DataFrame(store.attempts())
    # The human wave's sessions (pilot.human) have a report of their own (stage 07): this one is the agent runs'.
    if not cells.empty:
        cells = cells[cells["wave"] != HUMAN_WAVE].reset_index(drop=True)
    if not attempts.empty:
        attempts = attempts[~attempts["backend"].isin(PARTICIPANT_BACKENDS)].reset_index(drop=True)
    backends = sorted(set(attempts["backend"])) if not attempts.empty else []
    waves = [w for w in ("pilot", "repeat3", "sensitivity") if not cells.empty and (cells["wave"] == w).any()]
    wave_of = dict(zip(cells["run_id"], cells["wave"], strict=True)) if not cells.empty else {}
    if not attempts.empty:
        attempts = attempts.assign(wave=attempts["run_id"].map(wave_of))
    exported = runs if runs is not None else pd.DataFrame(columns=list(_EXPORT_COLUMNS))
    exported = exported.reindex(columns=list(dict.fromkeys([*exported.columns, *_EXPORT_COLUMNS])))

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

    status = pd.DataFrame(store.status_by_arm())
    if not status.empty:
        status = status[status["wave"] != HUMAN_WAVE]
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
    arms = list(study.arms)
    if "arm" not in cells.columns:
        cells = cells.assign(
            arm=pd.Series(dtype=object), run_id=pd.Series(dtype=object), status=pd.Series(dtype=object)
        )
    records = run_fidelity.records_of(store.runs())
    resume_arm = next((a.id for a in protocol.arms().values() if a.recovery_resumes > 0 and a.id in arms), "")
    name = store.study().name
    try:
        from pilot.view.study import StudyReader, ViewError

        index = StudyReader.named(name).index_rows()
    except (ViewError, OSError):  # a store that is not a study folder's (a test's): no per-run facts to count
        index = []
    return RunReport(
        flow_by_arm=run_fidelity.flow_by_arm(cells, attempts, exported, arms, study["worker"]["model"]),
        fidelity=run_fidelity.fidelity(exported, records, arms, study["worker"]["model"]),
        resumes=run_fidelity.resume_decisions(records, exported, resume_arm) if resume_arm else pd.DataFrame(),
        resume_arm=resume_arm,
        failures=run_fidelity.failure_taxonomy(index, study["worker"]["model"], arms),
        worked=worked_scenario.worked_scenario(
            records,
            exported,
            study["worker"]["model"],
            label_of(backends) if backends else SIMULATED_TAG,
        ),
        study=name,
        backend=", ".join(backends) or "none",
        simulated=bool(label_of(backends)) or not backends,
        label=label_of(backends) if backends else SIMULATED_TAG,
        flow=flow,
        ledger=ledger,
        balance=store.balance(),
    )


def _nodes_sentence(report: RunReport, fid: pd.Series) -> str:
    """Where the runs ran, and what that means for the arms' enforcement (a dry run's nodes are labels on one host)."""
    n = len([i for i in fid.index if i.startswith("runs on node ")])
    unsandboxed = int(fid.get("runs without the arm's sandbox (simulated agent)", 0))
    off = int(fid.get("runs of a macOS arm on a host that is not macOS", 0))
    if unsandboxed:
        return (
            f"The runs were dispatched to {n} nodes of the nodes file, but in this dry run they are virtual nodes: "
            "labels that the local executor shares out on one host. A node offering macOS is then only a label, so "
            "the macOS arm's programs and sandbox were not exercised, and no run had its arm's sandbox at all: "
            f"{unsandboxed} runs were made by the simulated agent, which writes its files directly. The table's last "
            "rows give each node's share of each arm."
        )
    text = f"The runs ran on {n} nodes, whose share of each arm the table's last rows give."
    if off:
        text += (
            f" {off} runs of the macOS arm ran on a host that is not macOS, so its macOS enforcement was not "
            "exercised in them."
        )
    return text


def flow_figure(report: RunReport, path: Path) -> Path:
    """A CONSORT-style diagram: one column per arm, its runs from assigned to analysed, with what left the path at each
    step.

    Drawn at the page's text width (6.5 in) so that its smallest text prints at 7 pt.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    from pilot.stats.figures import save_figure  # PDF for the manuscript, PNG twin for the notebook

    t = report.flow_by_arm.set_index("step")
    arms = [c for c in t.columns if c != "total"]
    fig, ax = plt.subplots(figsize=(6.5, 4.9))
    ax.set_xlim(0, len(arms))
    ax.set_ylim(0.2, 6.6)
    ax.axis("off")
    boxes = [  # (y, heading, extra line)
        (5.9, "assigned", None),
        (4.9, "dispatched", None),
        (
            3.35,
            "finished",
            lambda a: (
                f"{t.loc['completed', a]} completed\n{t.loc['capped', a]} capped\n{t.loc['agent error', a]} agent error"
            ),
        ),
        (2.3, "evaluated", None),
        (1.3, "judged", None),
        (0.3, "analysed", None),
    ]
    heights = {"finished": 0.95}

    def left(a: str, step_from: str, step_to: str) -> str:
        return str(max(0, int(t.loc[step_from, a]) - int(t.loc[step_to, a])))

    side = {  # text beside the arrow into each box
        "dispatched": lambda a: f"{left(a, 'assigned', 'dispatched')} not dispatched",
        "finished": lambda a: f"{t.loc['infrastructure reruns', a]} reruns\n{t.loc['failed', a]} failed",
        "evaluated": lambda a: f"{left(a, 'finished', 'evaluated')} eval. error",
        "judged": lambda a: f"{left(a, 'evaluated', 'judged')} not judged",
        "analysed": lambda a: (
            f"{t.loc['other model', a]} other "
            f"model\n{max(0, int(t.loc['judged', a]) - int(t.loc['other model', a]) - int(t.loc['analysed', a]))} "
            "no acceptance"
        ),
    }
    for i, a in enumerate(arms):
        x = i + 0.5
        ax.text(x, 6.55, a, ha="center", va="center", fontsize=9, fontweight="bold")
        prev_bottom = None
        for y, step, extra in boxes:
            h = heights.get(step, 0.5)
            label = f"{step} {t.loc[step, a]}" + (f"\n{extra(a)}" if extra else "")
            ax.add_patch(
                FancyBboxPatch((x - 0.42, y), 0.84, h, boxstyle="round,pad=0.02", fc="0.93", ec="0.35", lw=0.7)
            )
            ax.text(x, y + h / 2, label, ha="center", va="center", fontsize=7.5, linespacing=1.15)
            if prev_bottom is not None:
                ax.annotate(
                    "",
                    xy=(x - 0.3, y + h + 0.02),
                    xytext=(x - 0.3, prev_bottom - 0.02),
                    arrowprops={"arrowstyle": "-|>", "lw": 0.7, "color": "0.3", "mutation_scale": 7},
                )
                ax.text(
                    x - 0.25,
                    (y + h + prev_bottom) / 2,
                    side[step](a),
                    ha="left",
                    va="center",
                    fontsize=7,
                    color="0.25",
                    linespacing=1.1,
                )
            prev_bottom = y
    title = f"run flow by arm, study {report.study}, all waves"
    fig.suptitle(f"{report.label}: {title}" if report.label else title, fontsize=8)
    return save_figure(fig, path)


def write(
    report: RunReport, tables_dir: Path | str, figures_dir: Path | str, generated_dir: Path | str
) -> dict[str, Path]:
    """CSV and LaTeX tables of the flow and the ledger, the run-flow figure and its environment, and
    ``run_macros.tex``."""
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
        label="tab:run-flow",
        simulated=sim,
        column_format="lp{0.34\\linewidth}" + "r" * (len(flow.columns) - 2),
    )
    ledger = report.ledger.rename(
        columns={
            "pilot": "pilot_usd",
            "repeat3": "third_repeat_usd",
            "sensitivity": "sensitivity_usd",
            "total": "total_usd",
        }
    )
    out["run_ledger_table.tex"] = write_table(
        ledger,
        gen / "run_ledger_table.tex",
        caption=(
            "Dollars charged by the ledger (agents and judges, every attempt) per arm and wave, against "
            f"the envelope of \\${format_number(report.balance.envelope_usd, 2)}; "
            f"\\${format_number(report.balance.reserved_usd, 2)} still reserved."
        ),
        label="tab:run-ledger",
        simulated=sim,
    )
    out["run_flow_by_arm.csv"] = tables / f"run_flow_by_arm_{report.study}.csv"
    report.flow_by_arm.assign(study=report.study).to_csv(out["run_flow_by_arm.csv"], index=False)
    out["run_fidelity.csv"] = tables / f"run_fidelity_{report.study}.csv"
    report.fidelity.assign(study=report.study).to_csv(out["run_fidelity.csv"], index=False)
    fid = report.fidelity.copy()
    fid["measure"] = fid["measure"].str.slice(0, 1).str.upper() + fid["measure"].str.slice(1)
    out["run_fidelity_table.tex"] = write_table(
        fid.rename(columns={"measure": "Measure", "all": "All arms"}),
        gen / "run_fidelity_table.tex",
        caption=(
            "Protocol fidelity per arm, over every finished run of every wave (the model-sensitivity runs in a "
            "column of their own, never in their arm). A deviation is an attempt at something the arm does not "
            "allow, recorded on the run and counted by what stopped it; a critical violation (E) fails the run "
            "whatever its quality; capped runs are censored at the cap they reached; the last rows give the node "
            "each run ran on."
        ),
        label="tab:run-fidelity",
        simulated=sim,
        column_format="l" + "r" * (len(fid.columns) - 1),
    )
    if len(report.resumes):
        out["run_resumes.csv"] = tables / f"run_resumes_{report.study}.csv"
        report.resumes.assign(study=report.study).to_csv(out["run_resumes.csv"], index=False)
        granted = int(report.resumes.loc[report.resumes["decision"] == "resume granted", "runs"].sum())
        out["run_resumes_table.tex"] = write_table(
            report.resumes.assign(
                decision=report.resumes["decision"].str.slice(0, 1).str.upper()
                + report.resumes["decision"].str.slice(1)
            ).rename(columns={"decision": "Decision", "reason": "Why", "runs": "Runs"}),
            gen / "run_resumes_table.tex",
            caption=(
                f"The one recovery resume of {report.resume_arm}, run by run: the controller grants it when the first "
                "session fails the self-check or ends at a cap or in an error, and withholds it when no budget, wall "
                f"time or session is left to resume; {granted} of {int(report.resumes['runs'].sum())} finished runs "
                f"of {report.resume_arm} were resumed. Every finished run of the arm is counted once."
            ),
            label="tab:run-resumes",
            simulated=sim,
            column_format="l>{\\raggedright\\arraybackslash}p{0.62\\linewidth}r",
        )
    if len(report.failures):
        out["run_failures.csv"] = tables / f"run_failures_{report.study}.csv"
        report.failures.assign(study=report.study).to_csv(out["run_failures.csv"], index=False)
        arms = [c for c in report.failures.columns if c not in ("group", "what") and not c.endswith("_of")]
        shown = pd.DataFrame(
            {
                "Group": report.failures["group"].where(
                    report.failures["group"] != report.failures["group"].shift(), ""
                ),
                "What": report.failures["what"],
                **{
                    a: [f"{h}/{n}" for h, n in zip(report.failures[a], report.failures[f"{a}_of"], strict=True)]
                    for a in arms
                },
            }
        )
        out["run_failures_table.tex"] = write_table(
            shown,
            gen / "run_failures_table.tex",
            caption=(
                "What failed, per arm of the worker model, read from every run's record: runs failing at least one "
                "oracle criterion of each kind out of the runs the oracle evaluated; runs with a deviation of each "
                "family, a critical violation of each kind, and a cap of each kind reached in any session, out of the "
                "finished runs. A run can count in several rows."
            ),
            label="tab:run-failures",
            simulated=sim,
            font="\\footnotesize\\setlength{\\tabcolsep}{4pt}",
            column_format="l>{\\raggedright\\arraybackslash}p{0.36\\linewidth}" + "r" * len(arms),
        )
    worked = gen / "worked_scenario.tex"
    if report.worked:
        worked.write_text(report.worked, encoding="utf-8")
        out["worked_scenario.tex"] = worked
    elif worked.is_file():
        worked.unlink()  # an earlier study's appendix never describes this one
    pdf = flow_figure(report, figs / "run_flow.pdf")
    out["run_flow.pdf"] = pdf
    out["run_flow_figure.tex"] = figure_env(
        pdf,
        gen / "run_flow_figure.tex",
        caption=(
            "Run flow by arm over all waves. Each column follows one arm's cells of the worker model from "
            "assignment to the primary analysis (the model-sensitivity runs in a column of their own, never "
            "pooled into their arm); beside each arrow, what left the path at that step: infrastructure attempts "
            "that were rerun under the same run id (every attempt is kept) and cells that ran out of attempts; "
            "runs whose evaluation failed; runs no judge scored; runs of a model-sensitivity wave, which enter no "
            "contrast; and judged runs of the worker model without an acceptance value."
        ),
        label="fig:run-flow",
        simulated=sim,
        width="\\linewidth",
    )
    m: dict[str, object] = {
        "RunStudy": report.study,
        "RunBackend": report.backend,
        "RunDataLabel": report.label or "real",
        "RunEnvelopeUsd": report.balance.envelope_usd,
        "RunSpentUsd": report.balance.spent_usd,
        "RunReservedUsd": report.balance.reserved_usd,
        "RunRemainingUsd": report.balance.remaining_usd,
        "RunSpentPct": f"{100 * report.balance.spent_usd / report.balance.envelope_usd:.0f}"
        if report.balance.envelope_usd
        else "---",
        "RunWaves": len([c for c in report.flow.columns if c not in ("step", "total")]),
        # What made the runs, from the backends' registry of stand-ins.
        "StandInStudySentence": LatexText(
            stand_ins.study_sentence(b for b in report.backend.split(", ") if b != "none")
        ),
    }
    for step, _ in FLOW_STEPS:
        m[macro_name("Run", step)] = report.count(step)
    fid = report.fidelity.set_index("measure")["all"] if len(report.fidelity) else pd.Series(dtype=int)
    m["RunDeviationRuns"] = int(fid.get("runs with a deviation", 0))
    m["RunDeviations"] = int(fid[[i for i in fid.index if i.startswith("deviations ")]].sum()) if len(fid) else 0
    m["RunViolationRuns"] = int(fid.get("runs with a critical violation (E)", 0))
    m["RunAgentErrors"] = int(fid.get("agent errors", 0))
    m["RunEvalErrors"] = int(fid.get("evaluation errors", 0))
    m["RunHarnessFaults"] = int(fid.get("harness faults after inference", 0))
    m["RunNodes"] = len([i for i in fid.index if i.startswith("runs on node ")])
    m["RunNodesSentence"] = LatexText(_nodes_sentence(report, fid))
    res = report.resumes
    m["RunResumeArm"] = report.resume_arm or "none"
    m["RunResumesGranted"] = int(res.loc[res["decision"] == "resume granted", "runs"].sum()) if len(res) else 0
    m["RunResumesWithheld"] = int(res.loc[res["decision"] == "resume withheld", "runs"].sum()) if len(res) else 0
    m["RunResumesCalledFor"] = (
        int(res.loc[res["decision"].isin(["resume granted", "resume withheld", "resume not granted"]), "runs"].sum())
        if len(res)
        else 0
    )
    flow = report.flow_by_arm.set_index("step")["total"] if len(report.flow_by_arm) else pd.Series(dtype=int)
    for step in ("completed", "capped", "other model"):
        m[macro_name("Run", step)] = int(flow.get(step, 0))
    for _, r in report.ledger.iterrows():
        m[macro_name("RunSpent", "all" if r["arm"] == "all" else r["arm"])] = float(r["total"])
    out["run_macros.tex"] = write_macros(
        m, gen / "run_macros.tex", digits=2, comment=f"run report of study {report.study}"
    )
    return out
