"""The grading wave's report: agreement, the panel's bias and H1 on expert grades, as tables, LaTeX and macros.

:func:`grading_report` computes everything from the two frames of
:mod:`pilot.grading.store` (how missing grades, ties and K > 2 graders per
package are handled is stated in :mod:`pilot.grading.agreement`).
:meth:`GradingReport.from_store` reads both frames from a study's store;
:meth:`GradingReport.from_export` reads the grades from the coordinator's
export (``pilot grading export``, the columns of
:data:`~pilot.grading.store.GRADE_COLUMNS`) and the panel from the store, and
gives the same report as the store would for the same grades.

:func:`write_grading_outputs` writes the CSV tables, the booktabs tables
(:func:`pilot.latex.write_table`, captions led by the data's label:
SIMULATED for a simulated wave or a dry-run study) and ``grading_macros.tex``,
one ``\\newcommand`` per number the manuscript states, each named
``\\grading...``. :func:`write_not_run` writes the same macro names, each
saying the wave was not run, so the manuscript compiles either way;
``\\gradingWaveRun`` is 1 or 0 for the text to branch on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pilot import backends, latex, protocol
from pilot.grading import agreement, store
from pilot.judges.rubric import Criterion, scenario_criteria
from pilot.report import stand_ins
from pilot.stats import estimability
from pilot.stats.primary import InferenceSettings

MACRO_FILE = "grading_macros.tex"
# Short headers keep the LaTeX tables within the text width (the CSV tables keep the column names).
_HEADERS = {
    "n_packages": "Packages",
    "n_values": "Values",
    "n_pairs": "Pairs",
    "reference": "GDPval",
    "panel_mean": "Panel",
    "expert_mean": "Experts",
}
#: The tables' labels that name the graders, each in the words of a wave played by stand-ins (``{who}``: their plural
#: noun, ``{one}``: its singular), longest first so a compound is replaced whole; a wave of experts keeps its labels.
_GRADER_LABELS = (
    (re.compile(r"\bexpert-expert\b"), "{one} pairs"),
    (re.compile(r"\bExpert-expert\b"), "{One} pairs"),
    (re.compile(r"\bpanel-experts\b"), "panel vs {who}"),
    (re.compile(r"\bPanel-experts\b"), "Panel vs {who}"),
    (re.compile(r"\bpanel-expert\b"), "panel vs {one}"),
    (re.compile(r"\bexpert-graded packages\b"), "packages graded by {who}"),
    (re.compile(r"\ban expert grade\b"), "a grade of the {who}"),
    (re.compile(r"\bexperts\b"), "{who}"),
    (re.compile(r"\bExperts\b"), "{Who}"),
    (re.compile(r"\bexpert\b"), "{one}"),
    (re.compile(r"\bExpert\b"), "{One}"),
)


def grader_label(text: str, who: str) -> str:
    """A table's label (a row's name, a header, a note) in the words of the wave's graders.

    ``who`` is :func:`pilot.report.stand_ins.grader_noun` of the wave's source: for ``experts`` the label is returned as
    it is; for a stand-in (``simulated graders``) every word naming experts names the stand-in instead, so no row read
    alone reads as people ("alpha among experts" becomes "alpha among simulated graders").
    """
    if who == "experts":
        return text
    one = who[:-1] if who.endswith("s") else who
    words = {"who": who, "one": one, "Who": who[:1].upper() + who[1:], "One": one[:1].upper() + one[1:]}
    for pattern, repl in _GRADER_LABELS:
        text = pattern.sub(repl.format(**words), text)
    return text


def who_graded(report: GradingReport) -> str:
    """The wave's graders by what they are: ``simulated graders`` for a stand-in wave, ``experts`` otherwise."""
    return stand_ins.grader_noun(report.source.split(",")[0] if report.source else "experts")


def in_graders_words(df: pd.DataFrame, who: str) -> pd.DataFrame:
    """``df`` with every header and text cell in the words of the wave's graders (:func:`grader_label`)."""
    if who == "experts":
        return df
    out = df.rename(columns=lambda c: grader_label(str(c), who))
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].map(lambda v: grader_label(v, who) if isinstance(v, str) else v)
    return out


#: What every wave-dependent macro reads when the wave was not run.
NOT_RUN = "not run"


#: 9 pt with narrower gaps: the grading tables fit the text width without being shrunk below 8 pt.
_TABLE_FONT = "\\footnotesize\\setlength{\\tabcolsep}{4pt}"


@dataclass
class GradingReport:
    """A grading wave's results; ``summary`` holds the headline rows (numbers or ``not estimable (reason)``).

    ``reliability``, ``acceptance``, ``bias``, ``bias_contrast``, ``h1`` and
    ``coverage`` are numeric tables (NaN where nothing can be estimated, the
    reason in ``note``); ``experts``, ``panel`` and ``packages`` the tables
    they are computed from.
    """

    reliability: pd.DataFrame
    acceptance: pd.DataFrame
    bias: pd.DataFrame
    bias_contrast: pd.DataFrame
    h1: pd.DataFrame
    coverage: pd.DataFrame
    summary: pd.DataFrame
    experts: pd.DataFrame = field(repr=False)
    panel: pd.DataFrame = field(repr=False)
    packages: pd.DataFrame = field(repr=False)
    wave: str = ""
    source: str = ""
    label: str = ""
    seed: int = 0
    B: int = 0
    level: float = 0.95
    q: float = 0.0
    contrast: tuple[str, str] = ("", "")
    arms: list[str] = field(default_factory=list)
    #: The study's human wave, for the sentence on which waves of people ran: ``participants``, ``simulated`` or "".
    human_source: str = ""

    def to_latex(self, **kwargs: Any) -> str:
        return self.summary.to_latex(index=False, float_format="%.3f", **kwargs)

    @classmethod
    def from_store(
        cls,
        study_folder: Path,
        wave: str,
        *,
        seed: int | None = None,
        B: int | None = None,
        study: protocol.Study | None = None,
        label: str | None = None,
    ) -> GradingReport:
        """The report of wave ``wave`` from the study's store; ``seed`` defaults to the wave's, ``B`` to the study's
        resamples."""
        grades, panel, wave_seed, study_label = _read_store(Path(study_folder), wave)
        return grading_report(
            grades,
            panel,
            seed=wave_seed if seed is None else seed,
            B=_resamples(B, study),
            study=study,
            label=study_label if label is None else label,
            sample=_sample(Path(study_folder), wave),
        )

    @classmethod
    def from_export(
        cls,
        csv_path: Path,
        study_folder: Path,
        wave: str,
        *,
        seed: int | None = None,
        B: int | None = None,
        study: protocol.Study | None = None,
        label: str | None = None,
    ) -> GradingReport:
        """The report from the coordinator's export instead of the store's grades (the panel still from the store).

        Refused when the export is of another wave or lists an assignment
        (package, run, grader) the wave does not have.
        """
        grades = read_export(Path(csv_path))
        stored, panel, wave_seed, study_label = _read_store(Path(study_folder), wave)
        waves = sorted(set(grades["wave"]) - {wave})
        if waves:
            raise store.GradingError(f"{csv_path}: an export of wave(s) {', '.join(waves)}, not of {wave}")
        key = ["package_id", "run_id", "grader_id"]
        known = set(map(tuple, stored[key].to_numpy()))
        stray = sorted(set(map(tuple, grades[key].to_numpy())) - known)
        if stray:
            raise store.GradingError(
                f"{csv_path}: assignment {'/'.join(stray[0])} is not one of wave {wave}'s "
                f"({len(stray)} such assignment(s)); is this the export of another study?"
            )
        return grading_report(
            grades,
            panel,
            seed=wave_seed if seed is None else seed,
            B=_resamples(B, study),
            study=study,
            label=study_label if label is None else label,
            sample=_sample(Path(study_folder), wave),
        )


def _sample(folder: Path, wave: str) -> dict[str, Any]:
    """How the wave drew its packages (``grading_waves.sample_json``): the judged runs offered and those drawn."""
    with store.open_store(folder) as st:
        return dict(store.wave(st.conn, wave).sample or {})


def _resamples(B: int | None, study: protocol.Study | None) -> int:
    return int(B) if B is not None else int((study or protocol.study())["inference"]["bootstrap_resamples"])


def _read_store(folder: Path, wave: str) -> tuple[pd.DataFrame, pd.DataFrame, int, str]:
    """The wave's grades and panel, its seed, and the label of the study's backends."""
    with store.open_store(folder) as st:
        w = store.wave(st.conn, wave)
        used = st.backends_used()
        return store.grades_frame(st.conn, wave), store.panel_frame(st.conn, wave), w.seed, backends.label_of(used)


def read_export(csv_path: Path) -> pd.DataFrame:
    """The coordinator's export as a grade frame (typed as :func:`pilot.grading.agreement.normalise_grades` types
    it)."""
    try:
        raw = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise store.GradingError(
            f"{csv_path}: cannot be read as the grading export ({type(exc).__name__}: {exc})"
        ) from exc
    if "critique" in raw:
        raw["critique"] = raw["critique"].map(store.unescape_critique)
    try:
        return agreement.normalise_grades(raw)
    except ValueError as exc:
        raise store.GradingError(f"{csv_path}: {exc}") from exc


def load_report(
    study_folder: Path,
    wave: str,
    *,
    grades_csv: Path | None = None,
    seed: int | None = None,
    B: int | None = None,
    study: protocol.Study | None = None,
) -> GradingReport:
    """:meth:`GradingReport.from_export` when ``grades_csv`` is given, else :meth:`GradingReport.from_store`."""
    if grades_csv is not None:
        return GradingReport.from_export(grades_csv, study_folder, wave, seed=seed, B=B, study=study)
    return GradingReport.from_store(study_folder, wave, seed=seed, B=B, study=study)


def rubric_criteria(scenarios: Iterable[str]) -> dict[str, list[Criterion]]:
    """Each scenario's rubric criteria, as the judges' prompt reads them (the weights of Q)."""
    return {s: list(scenario_criteria(s)) for s in sorted(set(scenarios))}


def grading_report(
    grades: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    seed: int,
    B: int,
    study: protocol.Study | None = None,
    label: str = "",
    criteria: Mapping[str, Sequence[Criterion]] | None = None,
    sample: Mapping[str, Any] | None = None,
) -> GradingReport:
    """Every estimate of the grading wave from its grades (:data:`~pilot.grading.store.GRADE_COLUMNS`) and panel
    (:data:`~pilot.grading.store.PANEL_COLUMNS`).

    ``criteria`` defaults to the scenarios' rubrics; ``label`` is the data's
    label (SIMULATED, REHEARSAL, "" for a finding), SIMULATED whatever is
    given when the grades come from simulated graders.
    """
    study = study or protocol.study()
    g = agreement.normalise_grades(grades)
    if criteria is None:
        criteria = rubric_criteria(set(g["scenario"]) | set(panel["scenario"]))
    settings = InferenceSettings.from_study(seed, study, B=B)
    contrast = study.hypothesis_contrast("H1").arms
    experts = agreement.expert_table(g, criteria)
    panel_t = agreement.panel_table(panel)
    packages = agreement.package_table(g, experts, panel_t)
    reliability = agreement.reliability_table(experts, panel_t, criteria, B=B, seed=seed, ci_level=settings.level)
    acceptance = agreement.acceptance_table(experts, panel_t, B=B, seed=seed, ci_level=settings.level)
    bias, bias_contrast = agreement.bias_tables(packages, study.arms, contrast, B=B, seed=seed, ci_level=settings.level)
    h1 = agreement.h1_table(packages, arms=study.arms, contrast=contrast, q=study.q, settings=settings)
    coverage = agreement.coverage_table(g, experts, packages, sample=sample)
    source = ",".join(sorted(set(g["source"]) - {""}))
    if "simulated" in source.split(","):
        label = backends.SIMULATED_LABEL  # simulated graders are never a finding, whatever the runs were
    return GradingReport(
        reliability=reliability,
        acceptance=acceptance,
        bias=bias,
        bias_contrast=bias_contrast,
        h1=h1,
        coverage=coverage,
        summary=summary_table(reliability, acceptance, bias_contrast, h1),
        experts=experts,
        panel=panel_t,
        packages=packages,
        wave=",".join(sorted(set(g["wave"]))),
        source=source,
        label=label,
        seed=int(seed),
        B=int(B),
        level=settings.level,
        q=float(study.q),
        contrast=contrast,
        arms=list(study.arms),
    )


def summary_table(
    reliability: pd.DataFrame, acceptance: pd.DataFrame, bias_contrast: pd.DataFrame, h1: pd.DataFrame
) -> pd.DataFrame:
    """The headline rows: measure, estimate, ci_low, ci_high, n, note (numbers or ``not estimable (reason)``)."""
    rows = []  # (row, what the note adds besides the reason, which alone goes into "not estimable (reason)")
    rel = reliability.set_index(["coders", "measure"])
    for coders, words in ((agreement.EXPERTS, "among experts"), (agreement.PANEL_EXPERTS, "panel vs experts")):
        for measure, level in (("Q", "interval"), (agreement.ALL_CRITERIA, "ordinal")):
            r = rel.loc[(coders, measure)]
            rows.append(
                (
                    {
                        "measure": f"alpha {words}, {measure} ({level})",
                        "estimate": r.alpha,
                        "ci_low": r.ci_low,
                        "ci_high": r.ci_high,
                        "n": int(r.n_packages),
                        "note": r.note,
                    },
                    "",
                )
            )
    for r in acceptance.itertuples():
        rows.append(
            (
                {
                    "measure": f"accept {r.statistic}, {r.comparison}",
                    "estimate": r.estimate,
                    "ci_low": r.ci_low,
                    "ci_high": r.ci_high,
                    "n": int(r.n_pairs),
                    "note": r.note,
                },
                f"GDPval: {100 * r.reference:.0f}%" if np.isfinite(r.reference) else "",
            )
        )
    for r in bias_contrast.itertuples():
        rows.append(
            (
                {
                    "measure": f"panel bias in {r.measure}, {r.contrast}",
                    "estimate": r.estimate,
                    "ci_low": r.ci_low,
                    "ci_high": r.ci_high,
                    "n": int(r.n_treated + r.n_control),
                    "note": r.note,
                },
                "",
            )
        )
    for r in h1.itertuples():
        verdict = f"verdict: {r.verdict}" if r.verdict and not estimability.is_not_estimable(r.verdict) else ""
        rows.append(
            (
                {
                    "measure": f"H1 {r.contrast}, {r.grades}" + (" (same packages)" if r.grades == "panel" else ""),
                    "estimate": r.estimate,
                    "ci_low": r.ci_low,
                    "ci_high": r.ci_high,
                    "n": int(r.n_packages),
                    "note": r.note,
                },
                estimability.join_notes(verdict, f"J = {r.n_scenarios}"),
            )
        )
    out = estimability.honest_frame(pd.DataFrame([r for r, _ in rows]), ["estimate", "ci_low", "ci_high"])
    out["note"] = [estimability.join_notes(n, extra) for n, (_, extra) in zip(out["note"], rows, strict=True)]
    return out


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------


def macro_names(arms: Sequence[str]) -> list[str]:
    """Every macro ``grading_macros.tex`` defines, run or not (``arms``: the study's, for the per-arm bias)."""
    ci = ("", "Low", "High")
    names = [
        "WaveRun",
        "DataLabel",
        "Note",
        "Wave",
        "Q",
        "BootstrapB",
        "GradersPerPackage",
        "NAssignments",
        "NSubmitted",
        "NGraders",
        "NPackages",
        "NPackagesNoGrade",
        "NPackagesOneGrade",
        "NPackagesTwoOrMore",
        "NPackagesNoPanel",
        "StandInSentence",
        "WaveStatus",
        "GraderNoun",
        "PeopleWavesSentence",
    ]
    for base in ("AlphaExpertsQ", "AlphaExpertsCriteria", "AlphaPanelQ", "AlphaPanelCriteria"):
        names += [base + s for s in ci] + [base + "N"]
    for who in ("Experts", "Panel"):
        names += [f"Agree{who}Pct{s}" for s in ci] + [f"Agree{who}Pairs"] + [f"Kappa{who}{s}" for s in ci]
    names += ["GDPvalExpertsPct", "GDPvalPanelPct", "GDPvalSource"]
    for m in ("Q", "S"):
        for arm in arms:
            names += [latex.macro_name("Bias", m, arm, s) for s in ci]
    names += ["BiasContrast"] + [f"Bias{m}Contrast{s}" for m in ("Q", "S") for s in ci]
    for who in ("Experts", "Panel"):
        names += [f"HOne{who}{s}" for s in ci] + [f"HOne{who}P", f"HOne{who}Verdict"]
    names += [f"HOneDiff{s}" for s in ci] + ["HOneScenarios", "HOnePackages"]
    return ["grading" + n for n in names]


def _fmt(value: Any, digits: int, reason: str = "", *, percent: bool = False) -> str:
    """A number for the text (true minus sign), or ``not estimable (reason)``; ``percent`` shows a share as a
    percentage."""
    if isinstance(value, (int, float, np.integer, np.floating)) and np.isfinite(value):
        return latex.signed(f"{100 * float(value) if percent else float(value):.{digits}f}")
    return estimability.not_estimable(reason) if reason else estimability.NOT_ESTIMABLE


def _p(p: float) -> str:
    if not np.isfinite(p):
        return estimability.NOT_ESTIMABLE
    return f"\\ensuremath{{={p:.3f}}}" if p >= 0.001 else "\\ensuremath{<0.001}"


def _note(report: GradingReport) -> str:
    where = f"grading wave {latex.latex_escape(report.wave)}"
    if report.label == backends.SIMULATED_LABEL:
        return (
            f"\\relax SIMULATED: every number of the {where} comes from simulated graders or a dry run; none "
            "is a finding."
        )
    if report.label:
        return (
            f"\\relax {report.label}: every number of the {where} comes from a "
            f"{backends.qualifier(report.label) or 'run that is no finding'}."
        )
    return f"\\relax Every number in this section comes from the experts' grades of {where}."


def _macro_values(report: GradingReport) -> dict[str, Any]:
    cov = report.coverage.set_index("item")["count"]
    rel = report.reliability.set_index(["coders", "measure"])
    acc = report.acceptance.set_index(["comparison", "statistic"])
    source = report.source.split(",")[0] if report.source else "experts"
    m: dict[str, Any] = {
        "WaveRun": 1,
        "DataLabel": report.label,
        "Note": _note(report),
        "Wave": report.wave,
        "Q": _fmt(report.q, 0),
        "BootstrapB": report.B,
        "GradersPerPackage": int(report.packages["n_assigned"].max()) if len(report.packages) else 0,
        "NAssignments": int(cov["assignments"]),
        "NSubmitted": int(cov["submitted"]),
        "NGraders": int(cov["graders"]),
        "NPackages": int(cov["packages"]),
        "NPackagesNoGrade": int(cov["packages with 0 grades"]),
        "NPackagesOneGrade": int(cov["packages with 1 grade"]),
        "NPackagesTwoOrMore": int(cov["packages with 2+ grades"]),
        "NPackagesNoPanel": int(cov["packages without a valid judge"]),
        # Who graded, from the registry of stand-ins (pilot.report.stand_ins): every sentence about the graders says it.
        "StandInSentence": latex.LatexText(stand_ins.grading_sentence(source)),
        "WaveStatus": latex.LatexText(stand_ins.grading_status(source)),
        "GraderNoun": stand_ins.grader_noun(source),
        "PeopleWavesSentence": latex.LatexText(stand_ins.people_waves_sentence(source, report.human_source)),
    }
    for base, key in (
        ("AlphaExpertsQ", (agreement.EXPERTS, "Q")),
        ("AlphaExpertsCriteria", (agreement.EXPERTS, agreement.ALL_CRITERIA)),
        ("AlphaPanelQ", (agreement.PANEL_EXPERTS, "Q")),
        ("AlphaPanelCriteria", (agreement.PANEL_EXPERTS, agreement.ALL_CRITERIA)),
    ):
        r = rel.loc[key]
        m[base], m[base + "Low"], m[base + "High"] = _fmt(r.alpha, 3, r.note), _fmt(r.ci_low, 3), _fmt(r.ci_high, 3)
        m[base + "N"] = int(r.n_packages)
    for who, comparison in (("Experts", "expert-expert"), ("Panel", "panel-expert")):
        a, k = acc.loc[(comparison, "agreement")], acc.loc[(comparison, "Cohen's kappa")]
        m[f"Agree{who}Pct"] = _fmt(a.estimate, 1, a.note, percent=True)
        m[f"Agree{who}PctLow"], m[f"Agree{who}PctHigh"] = (
            _fmt(a.ci_low, 1, percent=True),
            _fmt(a.ci_high, 1, percent=True),
        )
        m[f"Agree{who}Pairs"] = int(a.n_pairs)
        m[f"Kappa{who}"], m[f"Kappa{who}Low"], m[f"Kappa{who}High"] = (
            _fmt(k.estimate, 3, k.note),
            _fmt(k.ci_low, 3),
            _fmt(k.ci_high, 3),
        )
    m.update(_gdpval())
    for r in report.bias.itertuples():
        digits = 1 if r.measure == "Q" else 3  # Q points to one decimal, shares of acceptance to three
        base = latex.macro_name("Bias", "Q" if r.measure == "Q" else "S", r.arm)
        m[base], m[base + "Low"], m[base + "High"] = (
            _fmt(r.estimate, digits, r.note),
            _fmt(r.ci_low, digits),
            _fmt(r.ci_high, digits),
        )
    t, c = report.contrast
    m["BiasContrast"] = f"\\ensuremath{{\\mathrm{{{t}}}-\\mathrm{{{c}}}}}"
    for r in report.bias_contrast.itertuples():
        digits = 1 if r.measure == "Q" else 3
        base = f"Bias{'Q' if r.measure == 'Q' else 'S'}Contrast"
        m[base], m[base + "Low"], m[base + "High"] = (
            _fmt(r.estimate, digits, r.note),
            _fmt(r.ci_low, digits),
            _fmt(r.ci_high, digits),
        )
    h = report.h1.set_index("grades")
    for who, key in (("Experts", "experts"), ("Panel", "panel"), ("Diff", "panel minus experts")):
        r = h.loc[key]
        m[f"HOne{who}"], m[f"HOne{who}Low"], m[f"HOne{who}High"] = (
            _fmt(r.estimate, 3, r.note),
            _fmt(r.ci_low, 3),
            _fmt(r.ci_high, 3),
        )
        if who != "Diff":
            m[f"HOne{who}P"], m[f"HOne{who}Verdict"] = _p(r.p_value), r.verdict
    m["HOneScenarios"], m["HOnePackages"] = int(h["n_scenarios"].iloc[0]), int(h["n_packages"].iloc[0])
    return {"grading" + k: v for k, v in m.items()}


def _gdpval() -> dict[str, Any]:
    """GDPval's reference values: constants of the literature, stated whether or not the wave was run."""
    return {
        "GDPvalExpertsPct": _fmt(agreement.GDPVAL_EXPERT_EXPERT, 0, percent=True),
        "GDPvalPanelPct": _fmt(agreement.GDPVAL_GRADER_EXPERT, 0, percent=True),
        "GDPvalSource": "\\relax " + _source(),
    }


def _source() -> str:
    """GDPval's citation for LaTeX, its title in typographic quotes."""
    return latex.latex_escape(agreement.GDPVAL_SOURCE).replace('"', "``", 1).replace('"', "''", 1)


def write_not_run(
    generated_dir: Path, reason: str, *, arms: Sequence[str] | None = None, human_source: str = ""
) -> Path:
    """``grading_macros.tex`` for a study whose grading wave was not run: every macro says so, ``\\gradingWaveRun`` is
    0."""
    arms = list(arms) if arms is not None else protocol.study().arms
    m: dict[str, Any] = {name: NOT_RUN for name in macro_names(arms)}
    m.update(
        {
            "gradingWaveRun": 0,
            "gradingDataLabel": "",
            "gradingNote": f"\\relax The expert grading wave was not run: {latex.latex_escape(reason)}",
            "gradingStandInSentence": latex.LatexText(stand_ins.grading_sentence(None)),
            "gradingWaveStatus": latex.LatexText(stand_ins.grading_status(None)),
            "gradingGraderNoun": "experts",
            "gradingPeopleWavesSentence": latex.LatexText(stand_ins.people_waves_sentence(None, human_source)),
        }
    )
    m.update({"grading" + k: v for k, v in _gdpval().items()})
    return latex.write_macros(m, Path(generated_dir) / MACRO_FILE, comment=f"grading wave not run: {reason}")


def write_grading_outputs(report: GradingReport, tables_dir: Path, generated_dir: Path) -> dict[str, Path]:
    """CSV tables in ``tables_dir``; LaTeX tables and ``grading_macros.tex`` in ``generated_dir``."""
    tables, gen = Path(tables_dir), Path(generated_dir)
    tables.mkdir(parents=True, exist_ok=True)
    gen.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    wave = f"{report.label} {report.wave}" if report.label else report.wave
    honest = {
        "summary": report.summary,
        "reliability": estimability.honest_frame(report.reliability, ["alpha", "ci_low", "ci_high"]),
        "acceptance": estimability.honest_frame(report.acceptance, ["estimate", "ci_low", "ci_high"]),
        "bias": estimability.honest_frame(report.bias, ["estimate", "ci_low", "ci_high", "panel_mean", "expert_mean"]),
        "bias_contrast": estimability.honest_frame(report.bias_contrast, ["estimate", "ci_low", "ci_high"]),
        "h1": estimability.honest_frame(report.h1, ["estimate", "ci_low", "ci_high", "p_value"]),
        "coverage": report.coverage,
        "packages": report.packages,
    }
    for name, df in honest.items():
        out[f"grading_{name}.csv"] = tables / f"grading_{name}.csv"
        df.assign(wave=wave)[["wave", *[c for c in df.columns if c != "wave"]]].to_csv(
            out[f"grading_{name}.csv"], index=False
        )

    pct = f"{100 * report.level:g}\\%"
    # The graders by what they are (simulated graders in a dry run): every caption about them says it.
    who = who_graded(report)
    b = f"{report.B:,}".replace(",", "{,}")
    boot = f"nominal {pct} percentile bootstrap intervals over packages ($B={b}$; not calibrated)"
    sim = report.label

    def label(text: str) -> str:  # a row's label as the table prints it, for the caption that explains it
        return grader_label(text, who)

    def tex(name: str, df: pd.DataFrame, caption: str, *, first_width: str | None = None) -> None:
        if "note" in df and df["note"].fillna("").astype(str).str.strip().eq("").all():
            df = df.drop(columns="note")  # a column with nothing in it says nothing
        # A first column of long labels (a stand-in's noun is longer than "experts") wraps at first_width.
        layout = (
            f">{{\\raggedright\\arraybackslash}}p{{{first_width}}}"
            + "".join("l" if c == "note" else "r" for c in list(df.columns)[1:])
            if first_width
            else None
        )
        df = df.rename(
            columns={
                **_HEADERS,
                "n_treated": f"{report.contrast[0]} packages",
                "n_control": f"{report.contrast[1]} packages",
            }
        )
        # Rows and headers name the graders as the captions do: a stand-in's noun for a simulated wave.
        df = in_graders_words(df, who)
        # Never shrunk to fit: a table wider than the text is an overfull box that tools/check_latex_log.py names.
        path = latex.write_table(
            df,
            gen / f"grading_{name}_table.tex",
            caption=caption,
            label=f"tab:grading-{name.replace('_', '-')}",
            simulated=sim,
            font=_TABLE_FONT,
            column_format=layout,
        )
        out[path.name] = path

    tex(
        "summary",
        honest["summary"],
        (
            f"Grading wave {latex.latex_escape(report.wave)} of the {who}: Krippendorff's alpha among the {who} "
            f"and between the LLM panel and the {who}, agreement of the accept decisions, the panel's bias in the "
            f"primary contrast and H1 on the grades of the {who}, with {boot} (H1: the primary analysis's "
            "scenario-cluster bootstrap). $n$: packages (alpha, bias, H1) or pairs of decisions."
        ),
        first_width="7.4cm",
    )
    headline = honest["reliability"][honest["reliability"]["measure"].isin(["Q", agreement.ALL_CRITERIA])]
    tex(
        "reliability",
        headline[["coders", "measure", "level", "alpha", "ci_low", "ci_high", "n_packages", "n_values", "note"]],
        (
            "Krippendorff's alpha, interval for Q (0--100) and ordinal for the 0--4 criterion scores pooled "
            f"over every criterion, with {boot}. {label('Panel-experts')}: the panel's value (median of the "
            f"judges' scores; mean of their Q) against the median of the {who}. Every criterion of every scenario "
            "separately: grading\\_reliability.csv."
        ),
    )
    tex(
        "acceptance",
        honest["acceptance"][
            ["comparison", "statistic", "estimate", "ci_low", "ci_high", "n_pairs", "n_packages", "reference", "note"]
        ],
        (
            f"Agreement of the accept decisions (share of pairs agreeing, and Cohen's kappa), with {boot}. "
            f"{label('Expert-expert')}: every pair of the {who} grading a package; {label('panel-expert')}: the "
            "panel's majority vote "
            f"(a tie counts as not accepted) against each of the {who}. Reference: GDPval's agreement "
            f"({_source()}), on pairwise comparisons of deliverables rather than accept decisions."
        ),
    )
    tex(
        "bias",
        honest["bias"][
            ["measure", "arm", "estimate", "ci_low", "ci_high", "n_packages", "panel_mean", "expert_mean", "note"]
        ],
        (
            f"The LLM panel's bias per arm: mean over the arm's packages of the panel minus the mean of the {who} "
            f"(Q in points; accept as a share), with nominal {pct} percentile bootstrap intervals resampling "
            f"packages within the arm ($B={b}$)."
        ),
    )
    tex(
        "bias_contrast",
        honest["bias_contrast"],
        (
            f"The panel's bias in the primary contrast: the bias in {report.contrast[0]} minus the bias in "
            f"{report.contrast[1]}, with nominal {pct} percentile bootstrap intervals resampling packages within "
            "each arm."
        ),
    )
    tex(
        "h1",
        honest["h1"][
            ["grades", "estimate", "ci_low", "ci_high", "p_value", "n_scenarios", "n_packages", "verdict", "note"]
        ],
        (
            f"H1 recomputed: the primary contrast {report.contrast[0]}$-${report.contrast[1]} of acceptance "
            f"($D$, not $E$, $Q \\geq {report.q:g}$) with the mean Q of the {who} and, over the same packages, "
            "with the panel's Q; scenario-equal weights, scenario-cluster percentile bootstrap and sign-flip "
            "$p$ as in the primary analysis."
        ),
    )
    tex(
        "coverage",
        report.coverage,
        (
            "Coverage of the grading wave: assignments, submitted grades, grades per package, and every "
            "exclusion with its reason."
        ),
    )
    out[MACRO_FILE] = latex.write_macros(_macro_values(report), gen / MACRO_FILE, comment=f"grading wave {report.wave}")
    return out


# --------------------------------------------------------------------------
# Sentences
# --------------------------------------------------------------------------

TEXT_FILE = "grading_text.tex"


def _interval_words(lo: float, hi: float, digits: int) -> str:
    return f"{_fmt(lo, digits)} to {_fmt(hi, digits)}"


def grading_sentences(report: GradingReport, truth: Mapping[str, Any] | None = None) -> list[str]:
    """The calibration section's claims, each written from its number (a claim no number supports is not made).

    ``truth`` is the planted bias of a SIMULATED wave (``truth.json``):
    the sentences then say whether the reported interval recovers it.
    """
    prefix = f"{report.label}. " if report.label else ""
    # The graders by what they are: "simulated graders" for a stand-in wave (pilot.backends.GRADER_STAND_INS).
    who = who_graded(report)
    out: list[str] = []
    cov = report.coverage.set_index("item")["count"]
    out.append(
        f"{prefix}Of {int(cov['assignments'])} assignments to {int(cov['graders'])} graders, "
        f"{int(cov['submitted'])} were submitted; {int(cov['packages with 2+ grades'])} of "
        f"{int(cov['packages'])} packages have two or more grades, "
        f"{int(cov['packages with 1 grade'])} have one and {int(cov['packages with 0 grades'])} none."
    )
    rel = report.reliability.set_index(["coders", "measure"])
    for coders, words in (
        (agreement.EXPERTS, f"among the {who}"),
        (agreement.PANEL_EXPERTS, f"between the LLM panel and the {who}"),
    ):
        r = rel.loc[(coders, "Q")]
        if np.isfinite(r.alpha):
            out.append(
                f"{prefix}Krippendorff's alpha on Q {words} is {_fmt(r.alpha, 3)} "
                f"({_interval_words(r.ci_low, r.ci_high, 3)}, {int(r.n_packages)} packages)."
            )
        else:
            out.append(f"{prefix}Krippendorff's alpha on Q {words} is {estimability.not_estimable(r.note)}.")
    acc = report.acceptance.set_index(["comparison", "statistic"])
    for comparison, words, ref in (
        ("expert-expert", f"between two {who}", agreement.GDPVAL_EXPERT_EXPERT),
        ("panel-expert", f"between the panel and one of the {who}", agreement.GDPVAL_GRADER_EXPERT),
    ):
        a, k = acc.loc[(comparison, "agreement")], acc.loc[(comparison, "Cohen's kappa")]
        if np.isfinite(a.estimate):
            kappa = (
                f"Cohen's kappa {_fmt(k.estimate, 3)}"
                if np.isfinite(k.estimate)
                else f"Cohen's kappa {estimability.not_estimable(k.note)}"
            )
            out.append(
                f"{prefix}The accept decisions agree {words} in {_fmt(a.estimate, 1, percent=True)}\\% of "
                f"{int(a.n_pairs)} pairs ({_fmt(a.ci_low, 1, percent=True)}\\% to "
                f"{_fmt(a.ci_high, 1, percent=True)}\\%; {kappa}), against {100 * ref:.0f}\\% in GDPval."
            )
        else:
            out.append(f"{prefix}Agreement of the accept decisions {words} is {estimability.not_estimable(a.note)}.")
    t, c = report.contrast
    bc = report.bias_contrast.set_index("measure")
    if "Q" in bc.index:
        r = bc.loc["Q"]
        if np.isfinite(r.estimate):
            if r.ci_low > 0:
                verdict = (
                    f"the panel favours {t}'s packages over {c}'s more than the {who} do, so part of the "
                    "primary contrast on Q is the judges'"
                )
            elif r.ci_high < 0:
                verdict = (
                    f"the panel favours {c}'s packages over {t}'s more than the {who} do, so the judges work "
                    "against the primary contrast on Q"
                )
            else:
                verdict = (
                    "the interval includes zero: these grades show no difference between the arms in how far "
                    f"the panel departs from the {who}"
                )
            out.append(
                f"{prefix}The panel's bias (panel minus {who}, Q points) in {t} less that in {c} is "
                f"{_fmt(r.estimate, 1)} ({_interval_words(r.ci_low, r.ci_high, 1)}): {verdict}."
            )
            if truth is not None and "bias_q_contrast" in truth:
                planted = float(truth["bias_q_contrast"])
                inside = r.ci_low <= planted <= r.ci_high
                out.append(
                    f"{prefix}The simulated graders were given a bias of {_fmt(planted, 1)} points in this contrast; "
                    f"the interval {'contains' if inside else 'does not contain'} it."
                )
        else:
            out.append(f"{prefix}The panel's bias in the primary contrast is {estimability.not_estimable(r.note)}.")
    h = report.h1.set_index("grades")
    e, p = h.loc["experts"], h.loc["panel"]
    if np.isfinite(e.estimate):
        out.append(
            f"{prefix}On the {who}' grades the primary contrast is {_fmt(e.estimate, 3)} "
            f"({_interval_words(e.ci_low, e.ci_high, 3)}, {int(e.n_scenarios)} scenarios, "
            f"{int(e.n_packages)} packages), against {_fmt(p.estimate, 3)} "
            f"({_interval_words(p.ci_low, p.ci_high, 3)}) on the panel's grades of the same packages."
        )
    else:
        out.append(f"{prefix}H1 on the {who}' grades is {estimability.not_estimable(e.note)}.")
    return out


def write_text(
    report: GradingReport | None, generated_dir: Path, *, truth: Mapping[str, Any] | None = None, not_run: str = ""
) -> Path:
    """``grading_text.tex``: the section's sentences, or the one sentence that says why the wave was not run."""
    if report is None:
        body = f"The expert grading wave was not run for this study: {latex.latex_escape(not_run)}."
    else:
        body = "\n\n".join(grading_sentences(report, truth))
    path = Path(generated_dir) / TEXT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "% Generated by the grading stage (notebooks/06_grading.py); do not edit.\n" + body + "\n", encoding="utf-8"
    )
    return path


# --------------------------------------------------------------------------
# Figure
# --------------------------------------------------------------------------

FIGURE_FILE = "grading_bias.pdf"


def bias_figure(report: GradingReport, figures_dir: Path, generated_dir: Path) -> dict[str, Path]:
    """The panel's bias in Q per arm with its interval (``grading_bias.pdf``) and its figure environment."""
    import matplotlib.pyplot as plt

    from pilot.report.stage_outputs import figure_env
    from pilot.stats.figures import save_figure

    who = who_graded(report)
    q = report.bias[report.bias["measure"] == "Q"].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(5.5, 0.45 * max(len(q), 1) + 1.3))
    y = np.arange(len(q))[::-1]
    for yi, r in zip(y, q.itertuples(), strict=True):
        if not np.isfinite(r.estimate):
            ax.annotate(
                "not estimable",
                (0.5, yi),
                xycoords=("axes fraction", "data"),
                ha="center",
                va="center",
                fontsize=9,
                color="0.35",
            )
            continue
        primary = r.arm in report.contrast
        ax.errorbar(
            r.estimate,
            yi,
            xerr=[[r.estimate - r.ci_low], [r.ci_high - r.estimate]],
            fmt="s" if primary else "o",
            color="black" if primary else "0.4",
            capsize=3,
            markersize=6 if primary else 5,
        )
    ax.axvline(0, color="0.6", lw=0.8, ls="--")
    ax.set_yticks(y, list(q["arm"]))
    ax.tick_params(labelsize=9)
    ax.set_xlabel(f"panel minus {who}, Q points (0-100 scale)", fontsize=9)
    tag = f"{report.label}: " if report.label else ""
    ax.set_title(f"{tag}the LLM panel's bias per arm, nominal {100 * report.level:g}% intervals", fontsize=9)
    pdf = save_figure(fig, Path(figures_dir) / FIGURE_FILE)
    t, c = report.contrast
    env = figure_env(
        pdf,
        Path(generated_dir) / "grading_bias_figure.tex",
        label="fig:grading-bias",
        simulated=report.label,
        caption=(
            f"The LLM panel's bias per arm: mean over the arm's packages of the panel's Q minus the mean Q of the "
            f"{who}, "
            f"with percentile bootstrap intervals resampling packages within the arm. Squares: the arms of the "
            f"primary contrast ({t} and {c}); their difference is the judges' part of that contrast."
        ),
    )
    return {pdf.name: pdf, env.name: env}
