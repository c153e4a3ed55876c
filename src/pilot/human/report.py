"""Stage 07's outputs: CSV tables, LaTeX tables, a figure, one macro per number and the section's sentences.

Every caption, macro file and sentence carries the data's label; a wave of
SIMULATED participants is tagged "SIMULATED (no person took part)" in each.
Without a wave the macros say the wave was not run (``\\humanWaveRun`` is 0)
and the section's one sentence says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from pilot import latex
from pilot.human.analysis import HumanComparison

MACRO_FILE = "human_macros.tex"
TEXT_FILE = "human_text.tex"
FIGURE_FILE = "human_acceptance.pdf"
TABLES = ("human_acceptance.csv", "human_contrasts.csv", "human_time.csv", "human_assistant.csv")


def _fmt(value: Any, digits: int = 3) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "not estimable" if v != v else f"{v:.{digits}f}"


def _tagged(frame: pd.DataFrame, result: HumanComparison) -> pd.DataFrame:
    return frame.assign(label=result.tag or "real")


def write_outputs(result: HumanComparison, tables_dir: Path, figures_dir: Path, generated_dir: Path) -> dict[str, Path]:
    """Every file the stage writes; returns them by name."""
    tables, figures, gen = Path(tables_dir), Path(figures_dir), Path(generated_dir)
    for d in (tables, figures, gen):
        d.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    frames = {
        "human_acceptance.csv": result.acceptance_summary,
        "human_contrasts.csv": result.summary,
        "human_time.csv": result.time,
        "human_assistant.csv": result.assistant,
    }
    for name, frame in frames.items():
        out[name] = tables / name
        _tagged(frame, result).to_csv(out[name], index=False)
    B = f"{result.settings.B:,}".replace(",", "{,}")
    scen = ", ".join(result.scenarios)
    acc = latex.escape_text_cells(
        result.acceptance_summary[["group", "kind", "p_hat", "ci_low", "ci_high", "n_runs", "n_scored", "note"]]
    )
    out["human_acceptance_table.tex"] = latex.write_table(
        acc.rename(
            columns={
                "group": "Group",
                "kind": "Worker",
                "p_hat": "$\\hat p$",
                "ci_low": "2.5\\%",
                "ci_high": "97.5\\%",
                "n_runs": "Runs",
                "n_scored": "Scored",
                "note": "Note",
            }
        ),
        gen / "human_acceptance_table.tex",
        caption=f"Acceptance of the human conditions beside the agent arms over the scenarios the human wave covers "
        f"({latex.latex_escape(scen)}): scenario-weighted, with nominal 95\\% scenario-cluster percentile bootstrap "
        f"intervals (not calibrated for this wave; $B={B}$). H0: people without AI; H1: people with the metered "
        "assistant.",
        label="tab:human-acceptance",
        simulated=result.tag,
        escape=False,
    )
    con = latex.escape_text_cells(
        result.summary[["contrast", "estimate", "ci_low", "ci_high", "p_value", "p_holm", "n_scenarios", "note"]]
    )
    out["human_contrasts_table.tex"] = latex.write_table(
        con.rename(
            columns={
                "contrast": "Contrast",
                "estimate": "Estimate",
                "ci_low": "2.5\\%",
                "ci_high": "97.5\\%",
                "p_value": "$p$",
                "p_holm": "$p_{\\mathrm{Holm}}$",
                "n_scenarios": "Scenarios",
                "note": "Note",
            }
        ),
        gen / "human_contrasts_table.tex",
        caption="Paired within-scenario differences in acceptance (descriptive: no contrast of the human wave is "
        "confirmatory), with bootstrap intervals, sign-flip $p$ and Holm's adjustment over the whole family.",
        label="tab:human-contrasts",
        simulated=result.tag,
        escape=False,
    )
    time = latex.escape_text_cells(result.time[["group", "measure", "minutes", "ci_low", "ci_high", "n_runs", "note"]])
    out["human_time_table.tex"] = latex.write_table(
        time.rename(
            columns={
                "group": "Group",
                "measure": "Measure",
                "minutes": "Minutes",
                "ci_low": "2.5\\%",
                "ci_high": "97.5\\%",
                "n_runs": "Runs",
                "note": "Note",
            }
        ),
        gen / "human_time_table.tex",
        caption="Time on task of the participants (start to completion record) and wall time of the agent runs, "
        "scenario-weighted means in minutes with bootstrap intervals.",
        label="tab:human-time",
        simulated=result.tag,
        float_format="%.1f",
        escape=False,
    )
    out.update(_figure(result, figures, gen))
    out[MACRO_FILE] = latex.write_macros(macros(result), gen / MACRO_FILE, comment=f"stage 07 ({result.tag or 'real'})")
    out[TEXT_FILE] = write_text(result, gen)
    return out


def macros(result: HumanComparison) -> dict[str, Any]:
    acc = result.acceptance.set_index("group")
    m: dict[str, Any] = {
        "humanWaveRun": 1,
        "humanLabel": latex.LatexText(latex.latex_escape(result.tag)) if result.tag else latex.LatexText("\\relax"),
        # The bare label the manuscript's banner reads (SIMULATED, REHEARSAL, or empty for people's wave).
        "humanDataLabel": latex.LatexText(result.label or ("SIMULATED" if not result.people else "\\relax")),
        "humanScenarios": len(result.scenarios),
        "humanBootstrapB": result.settings.B,
    }
    for group in acc.index:
        m[latex.macro_name("human", "accept", group)] = float(acc.loc[group, "p_hat"])
        m[latex.macro_name("human", "runs", group)] = int(acc.loc[group, "n_runs"])
    time = result.time.set_index("group")
    for group in time.index:
        m[latex.macro_name("human", "minutes", group)] = float(time.loc[group, "minutes"])
    a = result.assistant.iloc[0]
    m["humanAssistantSessions"] = int(a["sessions"])
    m["humanAssistantRequests"] = int(a["requests"])
    m["humanAssistantCostUsd"] = float(a["cost_usd_total"])
    m["humanAssistantCostPerSessionUsd"] = float(a["cost_usd_per_session"])
    return m


def sentences(result: HumanComparison) -> list[str]:
    """The section's sentences, each from its numbers and each led by the data's label."""
    lead = f"{result.tag}: " if result.tag else ""
    acc = result.acceptance.set_index("group")
    people = [g for g in acc.index if acc.loc[g, "kind"] == "person"]
    parts = []
    for g in people:
        r = acc.loc[g]
        parts.append(
            f"{g} accepted {_fmt(r['p_hat'], 2)} (nominal 95\\% interval {_fmt(r['ci_low'], 2)} to "
            f"{_fmt(r['ci_high'], 2)}; "
            f"{int(r['n_scored'])} scored of {int(r['n_runs'])} sessions)"
        )
    out = [
        lead
        + f"Over the {latex.number_word(len(result.scenarios))} scenario(s) the human wave covers, "
        + "; ".join(parts)
        + "."
    ]
    first = result.contrasts.iloc[0]
    out.append(
        lead + f"The difference H1 $-$ H0 is {_fmt(first['estimate'], 2)} (nominal 95\\% interval "
        f"{_fmt(first['ci_low'], 2)} to {_fmt(first['ci_high'], 2)}, over {int(first['n_scenarios'])} scenario(s)); "
        "like every contrast of this "
        "section it is descriptive, not a test of a preregistered hypothesis."
    )
    time = result.time.set_index("group")
    out.append(
        lead
        + "The scenario-weighted mean time on task was "
        + ", ".join(f"{g} {_fmt(time.loc[g, 'minutes'], 1)} minutes" for g in people)
        + "."
    )
    a = result.assistant.iloc[0]
    out.append(
        lead
        + f"In H1 the assistant answered {int(a['requests'])} request(s) over {int(a['sessions'])} session(s), metered "
        f"at {_fmt(a['cost_usd_total'], 4)} dollars in all ({_fmt(a['cost_usd_per_session'], 4)} dollars per session, "
        "scenario-weighted)."
    )
    return out


def write_text(result: HumanComparison, generated_dir: Path) -> Path:
    path = Path(generated_dir) / TEXT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "\n\n".join(sentences(result))
    path.write_text("% Generated by stage 07 (notebooks/07_human.py); do not edit.\n" + body + "\n", encoding="utf-8")
    return path


def write_not_run(generated_dir: Path, reason: str) -> dict[str, Path]:
    """The macros and the one sentence of a study whose human wave was not run."""
    gen = Path(generated_dir)
    gen.mkdir(parents=True, exist_ok=True)
    macros_path = latex.write_macros(
        {"humanWaveRun": 0, "humanLabel": latex.LatexText("\\relax"), "humanDataLabel": latex.LatexText("\\relax")},
        gen / MACRO_FILE,
        comment=f"human wave not run: {reason}",
    )
    text = gen / TEXT_FILE
    text.write_text(
        "% Generated by stage 07 (notebooks/07_human.py); do not edit.\n"
        f"The human wave (H0, H1) was not run for this study: {latex.latex_escape(reason)}. No person took part, and "
        "no human-performance figure appears in this paper.\n",
        encoding="utf-8",
    )
    for stale in (
        "human_acceptance_table.tex",
        "human_contrasts_table.tex",
        "human_time_table.tex",
        "human_figure.tex",
    ):
        (gen / stale).unlink(missing_ok=True)
    return {MACRO_FILE: macros_path, TEXT_FILE: text}


def _figure(result: HumanComparison, figures: Path, gen: Path) -> dict[str, Path]:
    import matplotlib.pyplot as plt

    from pilot.report.stage_outputs import figure_env
    from pilot.stats.figures import save_figure

    acc = result.acceptance
    fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(acc) + 1.2))
    y = list(range(len(acc)))[::-1]
    for yi, (_, r) in zip(y, acc.iterrows(), strict=True):
        colour = "#28463a" if r["kind"] == "person" else "#1f3a5f"
        if r["p_hat"] == r["p_hat"]:
            ax.errorbar(
                r["p_hat"],
                yi,
                xerr=[[r["p_hat"] - r["ci_low"]], [r["ci_high"] - r["p_hat"]]],
                fmt="o",
                color=colour,
                capsize=3,
            )
        else:
            ax.text(0.02, yi, "not estimable", va="center", fontsize=8, color="#555")
    ax.set_yticks(
        y, [f"{g} ({'people' if k == 'person' else 'agent'})" for g, k in zip(acc["group"], acc["kind"], strict=True)]
    )
    ax.set_xlim(0, 1)
    ax.set_xlabel("acceptance (scenario-weighted), nominal 95% scenario-cluster bootstrap interval")
    if result.tag:
        ax.set_title(result.tag, fontsize=9, color="#b00020")
    pdf = figures / FIGURE_FILE
    save_figure(fig, pdf)
    plt.close(fig)
    env = figure_env(
        pdf,
        gen / "human_figure.tex",
        caption="Acceptance of H0 and H1 beside the agent arms over the human wave's scenarios.",
        label="fig:human-acceptance",
        simulated=result.tag,
    )
    return {FIGURE_FILE: pdf, "human_figure.tex": env}
