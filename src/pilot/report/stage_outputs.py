"""What the primary and sensitivity stages read and write.

``stage_runs`` gives a stage its run table: the file named by the ``runs``
parameter, validated, the configured study's export when ``runs`` is empty,
or, asked for explicitly with ``runs = "synthetic"``, a SIMULATED synthetic
table drawn with the stage's seed; ``open_stage`` wraps it with the stages' common
opening (display settings and a line naming the table). The ``write_*``
functions turn result objects into the CSV tables, LaTeX tables, figure
environments and macro files the manuscript inputs; everything derived from a table that is no finding carries
its label (SIMULATED, REHEARSAL: ``StageData.label``, from the backend) in its caption, its macros and its figure title.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from pilot import backends, paths, protocol, runtable
from pilot.latex import (
    SIMULATED_TAG,
    LatexText,
    contrast_minus,
    data_label,
    escape_text_cells,
    format_number,
    latex_escape,
    macro_name,
    write_macros,
    write_table,
)
from pilot.report.sentences import COST_INTERVAL_NOTE
from pilot.stats import estimability, figures
from pilot.stats.hypotheses import HypothesisResult, overview
from pilot.stats.primary import PrimaryResult
from pilot.stats.sensitivity import TableResult


@dataclass(frozen=True)
class StageData:
    """The run table a stage analyses, and how to describe it."""

    runs: pd.DataFrame
    source: str
    simulated: bool
    synthetic: bool
    study_name: str
    #: SIMULATED, REHEARSAL or "" (a finding): :func:`pilot.runtable.data_label`; None reads ``simulated``
    label: str | None = None

    def __post_init__(self) -> None:
        if self.label is None:
            object.__setattr__(self, "label", SIMULATED_TAG if self.simulated else "")

    @property
    def tag(self) -> str:
        """The label every output carries: SIMULATED, REHEARSAL or "" (a finding)."""
        return self.label or ""

    @property
    def note(self) -> str:
        """One sentence for the manuscript on where the numbers come from."""
        if self.synthetic:
            return (
                f"{SIMULATED_TAG}: every number in this section comes from a synthetic run table drawn "
                "from the generative model in \\texttt{analysis/config/synthetic\\_runtable.yml} "
                f"({latex_escape(self.study_name)}); no agent was run."
            )
        if self.label == backends.REHEARSAL_LABEL:
            return (
                f"{backends.REHEARSAL_LABEL}: every number in this section comes from a rehearsal of the "
                f"harness against the scripted model (study {latex_escape(self.study_name)}); it checks "
                "the harness, and none is a finding."
            )
        if self.simulated:
            return (
                f"{SIMULATED_TAG}: every number in this section comes from a dry run of the harness on its "
                f"simulated backends (study {latex_escape(self.study_name)}); none is a finding."
            )
        return f"Every number in this section comes from the run table of study {latex_escape(self.study_name)}."


# The value of a stage's ``runs`` parameter that asks for a synthetic table.
SYNTHETIC_RUNS = "synthetic"


class RunTableMissing(FileNotFoundError):
    """The run table a stage was pointed at does not exist."""


#: What every scenario-cluster interval is, wherever it is printed: its nominal level and the coverage the calibration
#: appendix measured at this number of scenarios (``\IntervalNote``: analysis/calibration.py; main.tex says when the
#: calibration was not run).
INTERVAL_NOTE = "\\IntervalNote{}"
INTERVAL_LABEL_INLINE = f"({INTERVAL_NOTE})"
#: What H6's cost intervals are, wherever they are printed: the calibration measured the contrasts only.
COST_INTERVAL_LABEL_INLINE = f"({latex_escape(COST_INTERVAL_NOTE)})"

#: Tables whose cells may each read "not estimable": 9 pt with narrower gaps keeps them within the text width
#: without shrinking them below 8 pt (tools/check_latex_log.py holds the width).
COMPACT_FONT = "\\footnotesize\\setlength{\\tabcolsep}{4pt}"


def stage_runs(
    runs: str, seed: int, tables_dir: Path | str | None = None, *, study: str = "", allow_unisolated: bool = False
) -> StageData:
    """The run table of a stage.

    ``runs`` is a CSV path (relative paths read from the repository root), or
    ``"synthetic"`` for a SIMULATED synthetic table drawn with ``seed`` (saved
    to ``tables_dir``); empty means the exported table of study ``study``.
    A table holding real runs made without isolation is refused unless ``allow_unisolated``.
    """
    if runs == SYNTHETIC_RUNS:
        df = runtable.validate_runtable(
            backends.role(backends.SYNTHETIC, "runtable")(seed), source=f"synthetic run table (seed {seed})"
        )
        source = f"SIMULATED synthetic run table (seed {seed})"
        if tables_dir is not None:
            runtable.write_runtable(df, paths.from_root(tables_dir) / "runtable_SIMULATED_synthetic.csv")
    else:
        if not runs and not study:
            raise ValueError(
                "give the stage a run table (runs), a study whose table to read (study), or runs = 'synthetic'"
            )
        path = paths.from_root(runs) if runs else paths.study_runs_file(study)
        if not path.is_file():
            raise RunTableMissing(
                f"run table {path} not found: run the study first (`make stages`, or `pilot study export "
                f"{study or '<name>'}`), or set runs = {SYNTHETIC_RUNS!r} to analyse a SIMULATED synthetic "
                "table"
            )
        df = runtable.read_runtable(path, allow_unisolated=allow_unisolated)
        source = str(path.relative_to(paths.ROOT)) if path.is_relative_to(paths.ROOT) else str(path)
    is_syn = bool((df["backend"] == backends.SYNTHETIC).all())
    return StageData(df, source, runtable.is_simulated(df), is_syn, str(df["study"].iloc[0]), runtable.data_label(df))


def open_stage(
    runs: str, seed: int, tables_dir: Path | str | None = None, *, study: str = "", allow_unisolated: bool = False
) -> StageData:
    """The opening of the primary and sensitivity stages: pandas display settings, the run table
    (:func:`stage_runs`) and one printed line saying where it comes from."""
    pd.set_option("display.width", 160)
    pd.set_option("display.max_columns", 20)
    data = stage_runs(runs, seed, tables_dir, study=study, allow_unisolated=allow_unisolated)
    kind = (
        "SIMULATED synthetic table"
        if data.synthetic
        else f"{data.label} ({backends.qualifier(data.label)})"
        if data.label
        else "real"
    )
    print(data.source, "| study:", data.study_name, "|", kind)
    failed = int(data.runs.attrs.get(runtable.FAILED_DROPPED_ATTR, 0))
    if failed:
        print(f"{failed} failed run(s) (every attempt failed on infrastructure, no outcome) left out of the analysis")
    unevaluated = int(data.runs.attrs.get(runtable.EVAL_ERROR_DROPPED_ATTR, 0))
    if unevaluated:
        print(
            f"{unevaluated} run(s) whose evaluation could not run (eval_error; D is no verdict) left out "
            "of the analysis"
        )
    return data


def _tag(df: pd.DataFrame, data: StageData) -> pd.DataFrame:
    """The study column of a CSV table: the study's name, led by the data's label when the name does not carry it."""
    name = data.study_name
    return df.assign(study=name if not data.label or data.label in name else f"{data.label} {name}")


def figure_env(
    pdf: Path, path: Path, *, caption: str, label: str, simulated: bool | str, width: str = "0.8\\linewidth"
) -> Path:
    """A figure environment that includes ``pdf`` (path relative to the manuscript folder); ``simulated``: the data's
    label."""
    rel = os.path.relpath(Path(pdf).resolve(), paths.MANUSCRIPT_DIR.resolve())
    tag = data_label(simulated)
    cap = (f"\\textbf{{{tag}.}} " if tag else "") + caption
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "% Generated file: do not edit.\n\\begin{figure}[htbp]\n\\centering\n"
        f"\\includegraphics[width={width}]{{{rel}}}\n\\caption{{{cap}}}\n\\label{{{label}}}\n\\end{{figure}}\n",
        encoding="utf-8",
    )
    return path


def _dirs(*dirs: Path | str) -> list[Path]:
    out = [paths.from_root(d) for d in dirs]
    for d in out:
        d.mkdir(parents=True, exist_ok=True)
    return out


def _fmt_p(p: object) -> object:
    """A p-value for a table: 0.039, <0.001, or the reason it is not estimable."""
    if isinstance(p, str):
        return p
    if p is None or np.isnan(_float(p)):
        return "not estimable"
    return f"{_float(p):.3f}" if _float(p) >= 0.001 else "<0.001"


def _float(v: object) -> float:
    """A table cell that holds a number, as a float (a cell of another type is a programming error)."""
    if isinstance(v, (int, float, np.number)):
        return float(v)
    raise TypeError(f"not a number: {v!r}")


_R = TypeVar("_R")


def _result(results: Mapping[str, object], key: str, kind: type[_R]) -> _R:
    """One of the sensitivity stage's results, checked to be the kind the outputs read."""
    value = results[key]
    if not isinstance(value, kind):
        raise TypeError(f"sensitivity result {key!r} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def _value(v: object) -> object:
    """A reported value for a macro: the number, the infinity symbol, or the not-estimable text."""
    if isinstance(v, str):
        return "\\ensuremath{\\infty}" if v == estimability.INFINITY else v
    return (
        _num(_float(v))
        if v is not None and np.isfinite(_float(v))
        else ("\\ensuremath{\\infty}" if v is not None and np.isinf(_float(v)) else estimability.not_estimable(""))
    )


def _p_macro(p: float) -> str:
    """A p-value with its relation, for the text: ``$p\\Macro$`` reads p = 0.039 or p < 0.001."""
    if p is None or np.isnan(p):
        return "\\ensuremath{\\text{ not estimable}}"
    return f"\\ensuremath{{={p:.3f}}}" if p >= 0.001 else "\\ensuremath{<0.001}"


def _num(v: float) -> object:
    """A number for a macro: integral values as integers, infinity as the symbol."""
    v = float(v)
    if np.isinf(v):
        return "\\ensuremath{\\infty}"
    return int(v) if v.is_integer() and abs(v) < 1e12 else v


def _infinity_symbols(path: Path) -> Path:
    """Show infinite ratios in a generated table as the symbol."""
    text = path.read_text(encoding="utf-8").replace(estimability.INFINITY, "$\\infty$")
    path.write_text(re.sub(r"(?<![A-Za-z\\])inf(?![A-Za-z])", lambda _: "$\\infty$", text), encoding="utf-8")
    return path


def common_macros(data: StageData, study: protocol.Study | None = None) -> dict[str, object]:
    study = study or protocol.study()
    rows = runtable.primary_rows(data.runs, study)
    return {
        "ResultsDataLabel": data.label,
        "ResultsDataNote": "\\relax " + data.note,
        "ResultsStudyName": data.study_name,
        "ResultsNRuns": int(len(rows)),
        "ResultsNScenarios": int(rows["scenario"].nunique()),
        "ResultsNRepeats": int(rows["repeat"].max()),
        "ResultsNArms": int(rows["arm"].nunique()),
        "ResultsFailedRunsDropped": int(data.runs.attrs.get(runtable.FAILED_DROPPED_ATTR, 0)),
        "ResultsEvaluationErrorsDropped": int(data.runs.attrs.get(runtable.EVAL_ERROR_DROPPED_ATTR, 0)),
    }


# --------------------------------------------------------------------------
# Primary stage
# --------------------------------------------------------------------------


def write_primary(
    result: PrimaryResult,
    hyps: Iterable[HypothesisResult],
    data: StageData,
    tables_dir: Path | str,
    figures_dir: Path | str,
    generated_dir: Path | str,
) -> dict[str, Path]:
    """CSV tables, LaTeX tables, the forest plot and the macros of the primary stage."""
    tables, figs, gen = _dirs(tables_dir, figures_dir, generated_dir)
    sim = data.tag
    hyps = list(hyps)
    st = result.settings
    out: dict[str, Path] = {}
    acc = result.acceptance_summary
    acc_csv = _tag(acc[["arm", "p_hat", "ci_low", "ci_high", "n_runs", "n_scored", "note"]], data)
    out["primary_acceptance.csv"] = tables / "primary_acceptance.csv"
    acc_csv.to_csv(out["primary_acceptance.csv"], index=False)
    con = result.summary
    out["primary_contrasts.csv"] = tables / "primary_contrasts.csv"
    _tag(
        con[["contrast", "estimate", "ci_low", "ci_high", "p_value", "p_holm", "n_scenarios", "role", "exact", "note"]],
        data,
    ).to_csv(out["primary_contrasts.csv"], index=False)
    from pilot.report.scenario_arm import scenario_arm_counts, scenario_arm_frame

    study = protocol.study()
    counts = scenario_arm_counts(data.runs, study)
    out["primary_scenario_arm.csv"] = tables / "primary_scenario_arm.csv"
    _tag(counts, data).to_csv(out["primary_scenario_arm.csv"], index=False)
    arms = list(study.arms)
    out["primary_scenario_arm_table.tex"] = write_table(
        scenario_arm_frame(counts, arms),
        gen / "primary_scenario_arm_table.tex",
        caption=(
            "Accepted runs of the worker model out of its scored runs, per scenario and arm (S = 1 at "
            f"$q={study.q:g}$). The scenario-weighted acceptance of an arm "
            "(Table~\\ref{tab:primary-acceptance}) is the mean over scenarios of these proportions; runs "
            "without S (no judge's score) are counted in the last column and in no proportion."
        ),
        label="tab:scenario-arm",
        simulated=sim,
        font=COMPACT_FONT,
        column_format="l>{\\raggedright\\arraybackslash}p{2.6cm}"
        + "c" * len(arms)
        + ">{\\raggedright\\arraybackslash}p{2.2cm}",
    )
    ov = overview(hyps)
    out["primary_hypotheses.csv"] = tables / "primary_hypotheses.csv"
    _tag(ov, data).to_csv(out["primary_hypotheses.csv"], index=False)

    interval = f"scenario-cluster percentile bootstrap intervals ($B={st.B:,}$; {INTERVAL_NOTE})".replace(",", "{,}", 1)
    out["primary_acceptance_table.tex"] = write_table(
        escape_text_cells(acc[["arm", "p_hat", "ci_low", "ci_high", "n_runs", "n_scored", "note"]]).rename(
            columns={
                "arm": "Arm",
                "p_hat": "$\\hat p_a$",
                "ci_low": "2.5\\%",
                "ci_high": "97.5\\%",
                "n_runs": "Runs",
                "n_scored": "Scored",
                "note": "Note",
            }
        ),
        gen / "primary_acceptance_table.tex",
        caption=(
            f"Scenario-weighted acceptance $\\hat p_a$ per arm at $q={result.q:g}$ (equal scenario weights) "
            f"with {interval}. Scored: runs with at least one judge (a run without a judge has no $S$ and "
            "drops out of its scenario's repeat mean)."
        ),
        label="tab:primary-acceptance",
        simulated=sim,
        escape=False,
    )
    show = con.assign(
        p_value=con["p_value"].map(_fmt_p),
        p_holm=[_fmt_p(p) if r == "secondary" else "" for p, r in zip(con["p_holm"], con["role"], strict=True)],
    )
    exact = (
        "exact enumeration of all $2^J$ sign vectors"
        if bool(result.contrasts["exact"].all())
        else f"{st.n_permutations:,} random sign vectors".replace(",", "{,}")
    )
    # A note column with nothing in it says nothing: it is printed only when some contrast has a note.
    has_note = bool(show["note"].fillna("").astype(str).str.strip().ne("").any())
    con_cols = ["contrast", "role", "estimate", "ci_low", "ci_high", "p_value", "p_holm", "n_scenarios"] + (
        ["note"] if has_note else []
    )
    out["primary_contrasts_table.tex"] = write_table(
        escape_text_cells(show[con_cols]).rename(
            columns={
                "contrast": "Contrast",
                "role": "Role",
                "estimate": "Estimate",
                "ci_low": "2.5\\%",
                "ci_high": "97.5\\%",
                "p_value": "$p$",
                "p_holm": "$p_{\\mathrm{Holm}}$",
                "n_scenarios": "$J$",
                "note": "Note",
            }
        ),
        gen / "primary_contrasts_table.tex",
        caption=(
            f"Preregistered contrasts of acceptance: estimate, {interval}, two-sided paired sign-flip "
            f"permutation $p$ ({exact}) and, for the three secondary contrasts, Holm-adjusted $p$ over all "
            "three (a contrast that cannot be estimated enters the adjustment as $p=1$; the primary contrast "
            "is not adjusted)."
        )
        + (
            " Note: why a value is not estimable, and intervals of zero width, resting on one scenario or "
            "ending on a value a resample reaches with probability above 2.5\\%."
            if has_note
            else ""
        ),
        label="tab:primary-contrasts",
        simulated=sim,
        escape=False,
        font=COMPACT_FONT,
        # the note wraps beside five "not estimable" cells
        column_format="llrrrllr" + (">{\\raggedright\\arraybackslash}p{3.2cm}" if has_note else ""),
    )
    out["primary_hypotheses_table.tex"] = write_table(
        ov[["hypothesis", "statement", "criterion", "verdict"]].rename(columns=str.capitalize),
        gen / "primary_hypotheses_table.tex",
        caption="Preregistered expectations judged in the primary stage, with the criterion applied to this run table.",
        label="tab:primary-hypotheses",
        simulated=sim,
        column_format="lp{0.24\\linewidth}p{0.30\\linewidth}>{\\raggedright\\arraybackslash}p{0.20\\linewidth}",
    )
    for h in hyps:
        out[f"primary_{h.id.lower()}_table.tex"] = write_table(
            h.summary,
            gen / f"primary_{h.id.lower()}_table.tex",
            caption=(
                f"{h.id}: {latex_escape(h.statement)}. Criterion: {latex_escape(h.criterion)}. Verdict: "
                f"{latex_escape(h.verdict)}. Intervals: "
                + (
                    f"joint scenario-cluster percentile bootstrap of each arm's ratio {COST_INTERVAL_LABEL_INLINE}."
                    if h.id == "H6"
                    else f"scenario-cluster percentile bootstrap {INTERVAL_LABEL_INLINE}."
                )
            ),
            label=f"tab:{h.id.lower()}",
            simulated=sim,
            font=COMPACT_FONT,
        )
        _infinity_symbols(out[f"primary_{h.id.lower()}_table.tex"])
    pdf = figures.forest_plot(result.contrasts, figs / "primary_forest.pdf", simulated=sim)
    out["primary_forest.pdf"] = pdf
    out["primary_forest_figure.tex"] = figure_env(
        pdf,
        gen / "primary_forest_figure.tex",
        caption=(
            f"Contrasts of acceptance with {interval}; the primary contrast (square) and the three "
            "Holm-adjusted secondary contrasts."
        ),
        label="fig:primary-forest",
        simulated=sim,
    )

    m = common_macros(data)
    m.update(
        {
            "ResultsQ": _num(result.q),
            "ResultsBootstrapB": int(st.B),
            "ResultsPermutations": int(st.n_permutations),
            "ResultsSignVectors": int(2 ** int(result.contrasts["n_scenarios"].max()))
            if bool(result.contrasts["exact"].all())
            else int(st.n_permutations),
        }
    )
    # How the sign-flip p-values were computed, in words: exact only when every contrast enumerated all 2^J sign
    # vectors.
    if bool(result.contrasts["exact"].all()):
        m["ResultsSignTest"] = LatexText(
            f"exact, over all {format_number(int(2 ** int(result.contrasts['n_scenarios'].max())))} sign vectors"
        )
    else:
        m["ResultsSignTest"] = LatexText(
            f"randomised, over {format_number(int(st.n_permutations))} random sign vectors (a Monte Carlo "
            "estimate of the exact p-value)"
        )
    for _, r in acc.iterrows():
        m[macro_name("Acc", r.arm)] = _value(r.p_hat)
        m[macro_name("Acc", r.arm, "Low")] = _value(r.ci_low)
        m[macro_name("Acc", r.arm, "High")] = _value(r.ci_high)
    for _, r in result.contrasts.iterrows():
        base = ("Contrast", r.contrast.replace("-", "Minus"))
        shown = con.set_index("contrast").loc[r.contrast]
        m[macro_name(*base, "Est")] = _value(shown.estimate)
        m[macro_name(*base, "Low")] = _value(shown.ci_low)
        m[macro_name(*base, "High")] = _value(shown.ci_high)
        m[macro_name(*base, "Width")] = _value(
            float(r.ci_high) - float(r.ci_low)
        )  # NaN (not estimable) when either end is
        m[macro_name(*base, "P")] = _p_macro(float(r.p_value))
        if r.role != "primary":  # the primary contrast has no adjusted p
            m[macro_name(*base, "PHolm")] = _p_macro(float(r.p_holm))
        m[macro_name(*base, "Note")] = latex_escape(str(r.note)) if r.note else "\\relax"
    for h in hyps:
        m[macro_name("Verdict", h.id)] = h.verdict
        m[macro_name("VerdictClass", h.id)] = h.verdict_class
    out["primary_macros.tex"] = write_macros(
        m, gen / "primary_macros.tex", comment=f"primary stage; data: {data.source}"
    )
    return out


# --------------------------------------------------------------------------
# Sensitivity stage
# --------------------------------------------------------------------------


def h4_long(summary: pd.DataFrame) -> pd.DataFrame:
    """H4's fits one row per model and term (slope, interval, p), so the table reads down instead of running off the
    page."""

    def cell(v: object, note: str) -> object:
        # The model's note, printed once on its first row, already gives the reason a cell is not estimable.
        if (
            isinstance(v, str)
            and estimability.is_not_estimable(v)
            and note
            and v[len(estimability.NOT_ESTIMABLE) + 2 : -1] in note
        ):
            return estimability.NOT_ESTIMABLE
        return v

    rows = []
    for _, r in summary.iterrows():
        note = str(r["note"] or "")
        for k, (t, label) in enumerate((("depth", "designed depth"), ("tool_calls", "log(1 + tool calls)"))):
            rows.append(
                {
                    "model": r["model"] if k == 0 else "",
                    "term": label,
                    "slope": cell(r[f"{t}_slope"], note),
                    "ci_low": cell(r[f"{t}_ci_low"], note),
                    "ci_high": cell(r[f"{t}_ci_high"], note),
                    "p_value": cell(r[f"{t}_p"], note),
                    "p_t": cell(r[f"{t}_p_t"], note) if f"{t}_p_t" in r else estimability.NOT_ESTIMABLE,
                    "n_runs": r["n_runs"] if k == 0 else "",
                    "note": note if k == 0 else "",
                }
            )
    return pd.DataFrame(rows)


def h7_display(summary: pd.DataFrame) -> pd.DataFrame:
    """H7's table with its pooled row named in words (its tests go to the caption)."""
    out = summary.copy()
    out.loc[out["scenario"] == "pooled", "occupation"] = "all occupations"
    return out


def h4_fit_notes(table: pd.DataFrame) -> str:
    """The H4 fits' notes as one phrase, so the text states the reasons the fits actually give."""
    notes = [f"{r.model}: {r.note}" for r in table.itertuples() if isinstance(r.note, str) and r.note]
    return "; ".join(notes) if notes else "every fit was estimable and none was left out"


def hypotheses_summary(rows: Iterable[Mapping[str, object]]) -> pd.DataFrame:
    """All seven hypotheses in order, one row each (:meth:`HypothesisResult.row` or the rows a stage wrote from it)."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return df
    df = df.drop_duplicates("hypothesis", keep="last")
    return df.sort_values("hypothesis", key=lambda c: c.str.slice(1).astype(int)).reset_index(drop=True)


def _interval_notes(text: str) -> str:
    """A paragraph's "nominal 95% interval" with what it is: its nominal level and its measured coverage."""
    for kind in ("percentile interval", "interval"):
        text = text.replace(f"nominal 95\\% {kind}", f"{kind} ({INTERVAL_NOTE})")
    return text.replace("interval (nominal 95\\%)", f"interval ({INTERVAL_NOTE})")


def write_hypotheses_summary(
    summary: pd.DataFrame, data: StageData, tables_dir: Path | str, generated_dir: Path | str
) -> dict[str, Path]:
    """The summary table of every hypothesis and the discussion's paragraph on each, from their result rows."""
    from pilot.report.sentences import hypothesis_paragraph

    tables, gen = _dirs(tables_dir, generated_dir)
    out: dict[str, Path] = {"hypotheses_summary.csv": tables / "hypotheses_summary.csv"}
    _tag(summary, data).to_csv(out["hypotheses_summary.csv"], index=False)
    missing = [f"H{i}" for i in range(1, 8) if f"H{i}" not in set(summary.get("hypothesis", []))]

    def verdict_cell(r: pd.Series) -> str:
        failing = str(r.get("failing") or "").strip() if isinstance(r.get("failing"), str) else ""
        return f"{r['verdict']}: {failing}" if r["verdict"] == "not consistent" and failing else str(r["verdict"])

    show = pd.DataFrame(
        {
            "H": summary["hypothesis"],
            "Expectation and criterion": [
                f"{s_}. Criterion: {c}" for s_, c in zip(summary["statement"], summary["criterion"], strict=True)
            ],
            "Estimate": summary["estimate"],
            "Nominal 95\\% interval": summary["interval"],
            "Test": summary["test"],
            "Verdict (the part that fails)": [verdict_cell(r) for _, r in summary.iterrows()],
        }
    )
    show = escape_text_cells(show)
    caption = (
        "Every preregistered expectation with its headline estimate, interval, test, criterion and "
        "verdict; where the verdict is \\emph{not consistent}, the part of the criterion that fails, with "
        "its number. Several numbers in one cell are separated by semicolons in the order the expectation "
        "names them; n/a marks a quantity no test applies to; intervals are scenario-cluster percentile "
        f"bootstraps {INTERVAL_LABEL_INLINE}, Wald intervals for H4, and for H6 joint bootstraps of the cost "
        f"ratio {COST_INTERVAL_LABEL_INLINE}. Tables~\\ref{{tab:h4}}, "
        "\\ref{tab:h5}, \\ref{tab:h6} and~\\ref{tab:h7} and, in the supplement, Tables~\\ref{tab:h1}, "
        "\\ref{tab:h2} and~\\ref{tab:h3} give every number behind each row."
    )
    if missing:
        caption += f" Not in this table, because their stage wrote no result: {', '.join(missing)}."
    out["hypotheses_summary_table.tex"] = write_table(
        show,
        gen / "hypotheses_summary_table.tex",
        caption=caption,
        label="tab:hypotheses-summary",
        simulated=data.tag,
        escape=False,
        font=COMPACT_FONT,
        column_format=(
            "l>{\\raggedright\\arraybackslash}p{0.27\\linewidth}>{\\raggedright\\arraybackslash}p{0.12\\linewidth}"
            ">{\\raggedright\\arraybackslash}p{0.13\\linewidth}>{\\raggedright\\arraybackslash}p{0.15\\linewidth}"
            ">{\\raggedright\\arraybackslash}p{0.16\\linewidth}"
        ),
    )
    paragraphs = [
        f"\\paragraph{{{r['hypothesis']}.}} {_interval_notes(contrast_minus(latex_escape(hypothesis_paragraph(r))))}"
        for _, r in summary.iterrows()
    ]
    out["discussion_hypotheses.tex"] = gen / "discussion_hypotheses.tex"
    out["discussion_hypotheses.tex"].write_text(
        "% Generated file: do not edit. One paragraph per hypothesis, written from its result "
        "(pilot.report.sentences.hypothesis_paragraph).\n" + "\n\n".join(paragraphs) + "\n",
        encoding="utf-8",
    )
    return out


def write_sensitivity(
    results: dict[str, object],
    hyps: Iterable[HypothesisResult],
    data: StageData,
    tables_dir: Path | str,
    figures_dir: Path | str,
    generated_dir: Path | str,
    *,
    study: protocol.Study | None = None,
    primary_hypotheses: pd.DataFrame | None = None,
) -> dict[str, Path]:
    """Every sensitivity and secondary table, figure and macro; with the primary stage's hypothesis rows, the summary of
    all seven."""
    study = study or protocol.study()
    tables, figs, gen = _dirs(tables_dir, figures_dir, generated_dir)
    sim = data.tag
    hyps = list(hyps)
    out: dict[str, Path] = {}

    def csv(name: str, df: pd.DataFrame) -> None:
        out[name] = tables / name
        _tag(df, data).to_csv(out[name], index=False)

    def tex(name: str, df: pd.DataFrame, caption: str, label: str, **kw: Any) -> None:
        if kw.get("escape") is False:  # captions with math: the column names and text cells still need escaping
            df = escape_text_cells(df).rename(columns=lambda c: latex_escape(str(c)))
        # Never shrunk to fit: a table wider than the text is an overfull box that tools/check_latex_log.py names.
        kw.setdefault("font", COMPACT_FONT)
        out[name] = _infinity_symbols(write_table(df, gen / name, caption=caption, label=label, simulated=sim, **kw))

    primary_name = "-".join(study.primary_contrast.arms)
    qg = _result(results, "q_grid", TableResult)
    csv("sensitivity_q_grid.csv", qg.summary)
    csv("sensitivity_q_grid_acceptance.csv", qg.details["acceptance"])
    wide = qg.summary.pivot(index="q", columns="contrast", values="estimate")[
        ["-".join(c) for c in study.contrasts]
    ].reset_index()
    wide["q"] = wide["q"].map(lambda v: f"{v:g}")  # thresholds are whole points on the 0-100 scale
    tex(
        "sensitivity_q_grid_table.tex",
        wide,
        (
            "Each contrast's estimate as the quality threshold $q$ varies over the preregistered grid "
            "(intervals in the CSV table and the figure)."
        ),
        "tab:sens-qgrid",
        float_format="%.3f",
        escape=False,
    )

    mw = _result(results, "minutes_weighted", PrimaryResult)
    csv("sensitivity_minutes_weighted_contrasts.csv", mw.summary)
    csv("sensitivity_minutes_weighted_acceptance.csv", mw.acceptance_summary)
    tex(
        "sensitivity_minutes_table.tex",
        mw.summary[["contrast", "estimate", "ci_low", "ci_high", "p_value", "p_holm", "note"]],
        (
            "Contrasts with scenarios weighted by professional minutes (sensitivity to the equal weights of "
            "the primary analysis), with scenario-cluster percentile bootstrap intervals (nominal 95\\%; the "
            "calibration measured the equal-weight intervals only) and sign-flip $p$."
        ),
        "tab:sens-minutes",
    )

    ss = _result(results, "small_sample", TableResult)
    csv("sensitivity_small_sample.csv", ss.summary)
    tex(
        "sensitivity_small_sample_table.tex",
        ss.summary,
        "Small-sample sensitivities of the contrasts, beside the preregistered reading (every verdict rests on "
        f"the latter): the percentile interval (Pct.; {INTERVAL_NOTE}) and sign-flip $p$; the studentised "
        "interval with a $t(J-1)$ reference ($t$); and the wild cluster bootstrap-$t$ over scenarios "
        f"({latex_escape(str(ss.details.get('wild_weights') or 'not estimable'))} weights; interval with the "
        "estimate unrestricted, $p$ with the null imposed; with every sign vector enumerated its $p$ equals the "
        "sign-flip $p$, since the studentised mean orders the sign vectors as the mean does).",
        "tab:sens-small-sample",
        notes_below=True,  # twelve columns: a lattice point's note would push the table past the text width
    )

    rl = _result(results, "reliability", TableResult)
    csv("sensitivity_reliability.csv", rl.summary)
    R = int(rl.details.get("R", 0))
    tex(
        "sensitivity_reliability_table.tex",
        rl.summary,
        "Reliability across repeats per arm: pass$^k$ as $\\tau$-bench defines it, the mean over scenarios of "
        "$\\binom{c}{k}/\\binom{n}{k}$ ($c$ accepted of $n$ scored repeats), for $k=1$ to "
        f"$R={R}$ (pass$^1$ is $\\hat p_a$), and the share of scenarios whose every one of $R$ scored repeats "
        "was accepted. Descriptive: no interval, no test.",
        "tab:sens-reliability",
    )

    lg = _result(results, "logistic", TableResult)
    csv("sensitivity_logistic.csv", lg.summary)
    tex(
        "sensitivity_logistic_table.tex",
        # "SE" alone: the caption says the errors are clustered, and the eleven columns need the room.
        lg.summary.rename(columns={"se_cluster": "SE"}),
        (
            "Logistic regression of $S$ on arm, standard errors (SE) clustered by scenario "
            f"({lg.details['n_clusters']} clusters, {lg.details['n_runs']} scored runs): Wald intervals "
            "(nominal 95\\%) and $p$ against the normal, as preregistered; beside them, as a small-sample "
            f"sensitivity, the same statistics against $t({max(int(lg.details['n_clusters']) - 1, 1)})$ "
            "(p t, OR CI t)."
        )
        + " A term is not estimable when its arm's scored runs are all accepted or all not accepted "
        "(separation: no finite maximum-likelihood estimate), or when the fit shows separation, does not "
        "converge or has exploding coefficients."
        + (f" Note: {latex_escape(lg.details['note'])}." if lg.details.get("note") else ""),
        "tab:sens-logistic",
        notes_below=True,  # eleven columns: a term's reason would push the table past the text width
    )
    firth = lg.details.get("firth")
    if firth is not None:
        csv("sensitivity_logistic_firth_exploratory.csv", estimability.honest_frame(firth))
        tex(
            "sensitivity_logistic_firth_table.tex",
            estimability.honest_frame(firth),
            (
                "EXPLORATORY: Firth's penalised logistic regression of $S$ on arm (log-odds against the same "
                "reference; Wald intervals, not clustered). It stays finite under separation and is shown "
                "beside the preregistered fit only to describe it; no verdict rests on it."
            ),
            "tab:sens-logistic-firth",
            escape=False,
        )

    km = _result(results, "kaplan_meier", TableResult)
    csv("sensitivity_km.csv", km.summary)
    csv("sensitivity_logrank.csv", km.details["tests_summary"])
    # "running_at_10min" and its kin head their columns as "At 10 min"; the caption says what they hold.
    km_shown = km.summary.rename(columns=lambda c: re.sub(r"^running_at_(\d+)min$", r"At \1 min", str(c)))
    tex(
        "sensitivity_km_table.tex",
        km_shown,
        (
            "Time to completion per arm (Kaplan-Meier; runs that reached a cap, ended in an error or failed "
            "infrastructure are censored at their wall time): median minutes, and the share of runs still "
            "running at 10, 20 and 30 minutes (At 10 min, ...)."
        ),
        "tab:sens-km",
    )
    pdf = figures.km_plot(km.details["fitters"], figs / "sensitivity_km.pdf", simulated=sim)
    out["sensitivity_km_figure.tex"] = figure_env(
        pdf,
        gen / "sensitivity_km_figure.tex",
        caption="Kaplan-Meier curves of time to completion per arm; ticks mark censored runs.",
        label="fig:sens-km",
        simulated=sim,
    )

    cp = _result(results, "cost_per_accepted", TableResult)
    csv("sensitivity_cost_per_accepted.csv", cp.summary)
    n_charged = int(cp.table["n_charged"].sum())
    # Columns that are the same in every row are said once in the caption instead of printed five times.
    share_res = float(cp.table["share_resamples"].iloc[0]) if len(cp.table) else float("nan")
    shown_cost = cp.summary.drop(
        columns=["share_resamples"] + (["n_no_cost"] if int(cp.table["n_no_cost"].sum()) == 0 else [])
    )
    tex(
        "sensitivity_cost_table.tex",
        shown_cost,
        (
            "Cost per accepted deliverable (dollars): scenario-weighted mean agent cost per run divided by "
            f"acceptance, with joint scenario-cluster bootstrap intervals {COST_INTERVAL_LABEL_INLINE}; share of "
            "resamples in which the arm is cheapest "
        )
        + (
            "(every resample has an arm with a finite ratio). "
            if share_res == 1.0
            else f"(over the {100 * share_res:.1f}\\% of resamples in which some arm has a finite ratio). "
        )
        + "An arm without accepted runs has an infinite ratio. "
        f"Every finished run counts: {n_charged} run{'' if n_charged == 1 else 's'} without a reported cost "
        "(a session killed at its wall limit) at the agent part of the ledger's charge (the metered cost where "
        "the proxy metered it, the reservation otherwise; N charged); "
        "\\texttt{sensitivity\\_cost\\_per\\_accepted\\_reported.csv} gives the reading that leaves them out.",
        "tab:sens-cost",
        escape=False,
    )
    _infinity_symbols(out["sensitivity_cost_table.tex"])
    csv(
        "sensitivity_cost_per_accepted_reported.csv",
        _result(results, "cost_per_accepted_reported", TableResult).summary,
    )

    for kind, col, label in (
        ("budget", "budget_usd", "budget (dollars)"),
        ("human", "human_minutes", "human-time allowance (minutes)"),
    ):
        fr = _result(results, f"frontier_{kind}", TableResult)
        csv(f"sensitivity_frontier_{kind}.csv", fr.summary)
        if kind == "budget" and "frontier_budget_reported" in results:
            # The literal reading of an unreported cost (within no budget), the sensitivity of the one cost rule.
            reported = _result(results, "frontier_budget_reported", TableResult)
            csv("sensitivity_frontier_budget_reported.csv", reported.summary)
        # Each arm's scenario-weighted acceptance (the secondary endpoints' S): what the frontier reaches with no limit
        # on the allowance.
        sec_table = _result(results, "secondary", TableResult).table
        p_hat = dict(zip(sec_table["arm"], sec_table["S"], strict=True)) if "S" in sec_table else None
        pdf = figures.frontier_plot(
            fr.table, col, label, figs / f"sensitivity_frontier_{kind}.pdf", simulated=sim, p_hat=p_hat
        )
        d = fr.details
        n_beyond, n_acc = sum(d["beyond_right_end"].values()), sum(d["accepted"].values())
        right = f"\\${d['right_end']:.2f}" if kind == "budget" else f"{d['right_end']:g} minutes"
        per_arm = ", ".join(f"{a}: {k}" for a, k in d["beyond_right_end"].items() if k)
        out[f"sensitivity_frontier_{kind}_figure.tex"] = figure_env(
            pdf,
            gen / f"sensitivity_frontier_{kind}_figure.tex",
            caption=(
                f"Acceptance within a {label.split(' (')[0]} over the preregistered range: a run counts "
                f"only if accepted and within the allowance; cluster-bootstrap bands {INTERVAL_LABEL_INLINE}"
                + ("; the dashed line is the arm's acceptance $\\hat p_a$ at any allowance" if p_hat else "")
                + ". "
                + (
                    f"{n_beyond} of the {n_acc} accepted runs needed more than the range's right end of "
                    f"{right} ({per_arm}), so the frontier ends below $\\hat p_a$ by their share"
                    if n_beyond
                    else f"Every one of the {n_acc} accepted runs fits within the right end of {right}"
                )
                + (
                    " (a run without a reported cost counts at the agent part of its ledger charge, the one cost rule; "
                    "\\texttt{sensitivity\\_frontier\\_budget\\_reported.csv} counts it within no budget)."
                    if kind == "budget"
                    else "."
                )
            ),
            label=f"fig:sens-frontier-{kind}",
            simulated=sim,
            width="\\linewidth",
        )
    pdf = figures.q_grid_plot(qg.table, figs / "sensitivity_q_grid.pdf", simulated=sim)
    out["sensitivity_q_grid_figure.tex"] = figure_env(
        pdf,
        gen / "sensitivity_q_grid_figure.tex",
        caption=f"Contrasts and cluster-bootstrap intervals {INTERVAL_LABEL_INLINE} across the quality threshold $q$.",
        label="fig:sens-qgrid",
        simulated=sim,
    )

    se = _result(results, "secondary", TableResult)
    csv("sensitivity_secondary_endpoints.csv", se.summary)
    n_se = sum(se.details.get("n_charged", {}).values())
    tex(
        "sensitivity_secondary_table.tex",
        se.summary,
        (
            "Secondary endpoints per arm (scenario-weighted means): deterministic completion, critical "
            "violation, quality, acceptance, cost, wall minutes, turns, tool calls, questions, abstention and "
            f"the share of runs capped. Cost is the agent cost as charged: {n_se} "
            f"{'run' if n_se == 1 else 'runs'} without a reported cost count at the agent part of the ledger's "
            "charge."
        ),
        "tab:sens-secondary",
        float_format="%.2f",
        font="\\footnotesize\\setlength{\\tabcolsep}{3pt}",
    )  # thirteen columns: gaps of 3 pt keep 9-pt type within the text width

    ari = _result(results, "recovery_index", TableResult)
    csv("sensitivity_recovery_index.csv", ari.summary)
    tex(
        "sensitivity_ari_table.tex",
        ari.summary,
        (
            "Autonomous Recovery Index of the self-repairing arm: share of eligible runs (first session "
            "failed the self-check, or ended by a cap or an error) that passed the self-check after the one "
            "recovery, and the share also accepted; joint cluster-bootstrap intervals "
        )
        + INTERVAL_LABEL_INLINE
        + ".",
        "tab:sens-ari",
    )

    ag = _result(results, "agreement", TableResult)
    csv("sensitivity_judge_agreement.csv", ag.summary)
    tex(
        "sensitivity_agreement_table.tex",
        ag.summary,
        (
            "Agreement of the three judges' scores: Krippendorff's alpha (ordinal, whole points; interval for "
            "comparison) and pairwise correlations; agreement needs two judges scoring the same run."
        ),
        "tab:sens-agreement",
    )

    ms = _result(results, "models", TableResult)
    csv("sensitivity_models.csv", ms.summary)
    if not ms.summary.empty:
        tex(
            "sensitivity_models_table.tex",
            ms.summary,
            "Acceptance of the model-sensitivity arm under each model.",
            "tab:sens-models",
        )

    ov = overview(hyps)
    csv("sensitivity_hypotheses.csv", ov)
    prior: list[dict[str, Any]] = []
    if primary_hypotheses is not None and len(primary_hypotheses):
        # Only the primary stage's rows for this same study and label join the summary; rows of another table would mix
        # two studies.
        same = (
            "study" in primary_hypotheses
            and (primary_hypotheses["study"].astype(str) == _tag(ov.head(1), data)["study"].iloc[0]).all()
        )
        if same:
            prior = primary_hypotheses[[c for c in ov.columns if c in primary_hypotheses.columns]].to_dict("records")
    out.update(
        write_hypotheses_summary(hypotheses_summary([*prior, *ov.to_dict("records")]), data, tables_dir, generated_dir)
    )
    for h in hyps:
        csv(f"sensitivity_{h.id.lower()}.csv", h.summary)
        shown, extra = h.summary, ""
        kw_table: dict[str, Any] = {}
        if h.id == "H4":
            # The fits' notes are long sentences: they are listed under the table, each named by its model.
            shown = h4_long(h.summary)
            notes = [f"{m}: {n}" for m, n in zip(shown["model"], shown["note"], strict=True) if n]
            shown = shown.drop(columns="note")
            if notes:
                kw_table["note"] = "Notes. " + latex_escape("; ".join(notes)) + "."
        elif h.id == "H7":
            shown, extra = h7_display(h.summary), f" Tests: {latex_escape(h.test)}."
        tex(
            f"sensitivity_{h.id.lower()}_table.tex",
            shown,
            (
                f"{h.id}: {latex_escape(h.statement)}. Criterion: {latex_escape(h.criterion)}. Verdict: "
                f"{latex_escape(h.verdict)}.{extra}"
            ),
            f"tab:{h.id.lower()}",
            **kw_table,
        )

    m = common_macros(data, study)
    m = {k.replace("Results", "Sens", 1): v for k, v in m.items() if k in ("ResultsDataLabel",)}
    pq = qg.table[qg.table["contrast"] == primary_name]
    est = pq["estimate"].dropna()
    m["SensPrimaryQMin"] = _value(est.min() if len(est) else np.nan)
    m["SensPrimaryQMax"] = _value(est.max() if len(est) else np.nan)
    m["SensQGridLow"] = _num(pq["q"].min())
    m["SensQGridHigh"] = _num(pq["q"].max())
    r = mw.summary.set_index("contrast").loc[primary_name]
    m["SensWeightedPrimaryEst"], m["SensWeightedPrimaryLow"], m["SensWeightedPrimaryHigh"] = (
        _value(r.estimate),
        _value(r.ci_low),
        _value(r.ci_high),
    )
    m["SensWeightedPrimaryP"] = _p_macro(float(mw.contrasts.set_index("contrast").loc[primary_name, "p_value"]))
    term = f"{study.primary_contrast.treated} vs {study.primary_contrast.control}"
    t = lg.summary.set_index("term").loc[term]
    m["SensLogitPrimaryOR"], m["SensLogitPrimaryORLow"], m["SensLogitPrimaryORHigh"] = (
        _value(t.odds_ratio),
        _value(t.or_ci_low),
        _value(t.or_ci_high),
    )
    m["SensLogitPrimaryP"] = _p_macro(float(lg.table.set_index("term").loc[term, "p_value"]))
    m["SensLogitPrimaryPt"] = _p_macro(float(lg.table.set_index("term").loc[term, "p_t"]))
    first_arm_term = f"{study.arms[0]} vs {study.contrasts[0][1]}"
    lt = lg.table.set_index("term")
    m["SensLogitAZeroP"] = (
        _p_macro(float(lt.loc[first_arm_term, "p_value"])) if first_arm_term in lt.index else _p_macro(np.nan)
    )
    m["SensLogitAZeroPt"] = (
        _p_macro(float(lt.loc[first_arm_term, "p_t"])) if first_arm_term in lt.index else _p_macro(np.nan)
    )
    small = ss.table.set_index("contrast").loc[primary_name]
    m["SensSmallPrimaryTLow"], m["SensSmallPrimaryTHigh"] = _value(small.t_low), _value(small.t_high)
    m["SensSmallPrimaryWildLow"], m["SensSmallPrimaryWildHigh"] = _value(small.wild_low), _value(small.wild_high)
    m["SensSmallPrimaryWildP"] = _p_macro(float(small.p_wild))
    tests = km.details["tests"]
    m["SensLogrankAllP"] = _p_macro(float(tests["p_value"].iloc[0]))
    m["SensLogrankPrimaryP"] = _p_macro(float(tests["p_value"].iloc[1]))
    for _, row in km.summary.iterrows():
        m[macro_name("SensKMMedian", row.arm)] = _value(row.median_min)
    for _, row in cp.summary.iterrows():
        m[macro_name("SensCPA", row.arm)] = _value(row.cost_per_accepted)
    a = ari.summary.set_index("index")
    m["SensARI"], m["SensARILow"], m["SensARIHigh"] = (
        _value(a.loc["ARI", "estimate"]),
        _value(a.loc["ARI", "ci_low"]),
        _value(a.loc["ARI", "ci_high"]),
    )
    m["SensARIEligible"], m["SensARIRecovered"] = int(a.loc["ARI", "eligible"]), int(a.loc["ARI", "recovered"])
    g = ag.summary.set_index("measure")
    m["SensAlphaOrdinal"] = _value(g.loc["Krippendorff alpha (ordinal)", "value"])
    m["SensAlphaInterval"] = _value(g.loc["Krippendorff alpha (interval)", "value"])
    corr = ag.table[ag.table["measure"] == "Pearson r"]["value"].dropna()
    m["SensPearsonMin"], m["SensPearsonMax"] = (
        _value(corr.min() if len(corr) else np.nan),
        _value(corr.max() if len(corr) else np.nan),
    )
    for h in hyps:
        m[macro_name("Verdict", h.id)] = h.verdict
        m[macro_name("VerdictClass", h.id)] = h.verdict_class
        if h.id == "H4":
            m["SensHFourFitNotes"] = h4_fit_notes(h.table)
    out["sensitivity_macros.tex"] = write_macros(
        m, gen / "sensitivity_macros.tex", comment=f"sensitivity stage; data: {data.source}"
    )
    return out
