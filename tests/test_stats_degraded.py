"""Both stages run on every degraded table a real study can produce, and say why where they cannot estimate.

Each table is a valid SIMULATED table degraded by :func:`pilot.stats.degraded.degrade`;
the stages' computations (:mod:`pilot.stats.stage_computations`) and their writers
run on it. Every reported value must be a finite number, ∞ where a ratio is
infinite, or ``not estimable (reason)``; the verdicts must follow.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from pilot import protocol, runtable
from pilot.latex import latex_escape
from pilot.report import stage_outputs
from pilot.simulated import synthetic
from pilot.stats import degraded, estimability, stage_computations

B, P = 200, 500


@cache
def base() -> pd.DataFrame:
    return runtable.validate_runtable(synthetic.generate_runtable(11, n_scenarios=8))


@cache
def stages(kind: str):
    df = degraded.degrade(base(), kind)
    return (
        df,
        stage_computations.primary_stage(df, seed=3, B=B, n_permutations=P),
        stage_computations.sensitivity_stage(df, seed=3, B=B, n_permutations=P),
    )


def verdicts(kind: str) -> dict[str, str]:
    _, p, s = stages(kind)
    return {h.id: h.verdict for h in p.hypotheses + s.hypotheses}


def reported_problems(kind: str) -> list[str]:
    _, p, s = stages(kind)
    bad = [f"primary contrasts: {b}" for b in estimability.check_reported(p.result.summary)]
    bad += [f"primary acceptance: {b}" for b in estimability.check_reported(p.result.acceptance_summary)]
    for name, r in s.results.items():
        bad += [f"{name}: {b}" for b in estimability.check_reported(r.summary, infinite=getattr(r, "infinite", ()))]
    bad += [f"logrank: {b}" for b in estimability.check_reported(s.results["kaplan_meier"].details["tests_summary"])]
    for h in p.hypotheses + s.hypotheses:
        bad += [f"{h.id}: {b}" for b in estimability.check_reported(h.summary, infinite=h.infinite)]
    return bad


def test_the_check_catches_nan_and_raw_infinity():
    df = pd.DataFrame({"x": [1.0, np.nan, np.inf], "note": ["", "", ""]})
    assert len(estimability.check_reported(df)) == 2
    shown = estimability.honest_frame(df.assign(note=["", "no run in A2", ""]), infinite=["x"])
    assert shown["x"].tolist() == [1.0, "not estimable (no run in A2)", "∞"]
    assert estimability.check_reported(shown, infinite=["x"]) == []


@pytest.mark.parametrize("kind", degraded.KINDS)
def test_both_stages_finish_and_report_numbers_or_reasons(kind, tmp_path: Path):
    df, p, s = stages(kind)
    assert reported_problems(kind) == []
    for h in p.hypotheses + s.hypotheses:
        assert h.verdict_class in estimability.VERDICTS, (h.id, h.verdict)
        if h.verdict_class == estimability.NOT_ESTIMABLE:
            assert h.reason, h.id
    data = stage_outputs.StageData(df, f"degraded ({kind})", True, True, str(df["study"].iloc[0]))
    written = stage_outputs.write_primary(p.result, p.hypotheses, data, tmp_path / "t", tmp_path / "f", tmp_path / "g")
    written.update(
        stage_outputs.write_sensitivity(s.results, s.hypotheses, data, tmp_path / "t", tmp_path / "f", tmp_path / "g")
    )
    for name, path in written.items():
        if path.suffix in (".csv", ".tex"):
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"(?<![A-Za-z])(nan|inf)(?![A-Za-z])", text, re.IGNORECASE), name
            assert "e+30" not in text, name
            assert "∞" not in text or path.suffix == ".csv", name  # the symbol, not the character, in LaTeX
            if path.suffix == ".tex":
                # A bare % ends the line for LaTeX: a verdict such as "(0% or 100% acceptance)" must arrive escaped.
                bare = [ln for ln in text.splitlines() if "\\caption{" in ln and re.search(r"(?<!\\)%", ln)]
                assert not bare, (name, bare[0][:200])


def test_an_unjudged_arm_makes_its_contrasts_not_estimable():
    v = verdicts("unjudged_arm")
    assert v["H1"] == "not estimable (A3-A1: no scored run in A3)"
    assert v["H3"].startswith("not estimable (A4-A3: no scored run in A3")
    _, p, _ = stages("unjudged_arm")
    assert p.result.summary.set_index("contrast").loc["A3-A1", "estimate"] == "not estimable (no scored run in A3)"


def test_no_judges_leaves_only_judge_free_verdicts():
    v = verdicts("no_judges")
    for h in ("H1", "H2", "H3", "H4", "H6"):
        assert v[h].startswith("not estimable"), (h, v[h])
    assert v["H5"] in ("consistent", "not consistent")  # critical violations need no judge
    _, _, s = stages("no_judges")
    ag = s.results["agreement"].summary
    assert ag["value"].map(estimability.is_not_estimable).all()


def test_a_single_judge_per_run_makes_agreement_not_estimable():
    _, _, s = stages("single_judge")
    ag = s.results["agreement"].summary.set_index("measure")
    assert (
        ag.loc["Krippendorff alpha (ordinal)", "value"]
        == "not estimable (needs two judges scoring the same run; no run has two)"
    )
    assert ag["value"].map(estimability.is_not_estimable).all()


def test_an_absent_arm_keeps_the_holm_family_at_three():
    _, p, _ = stages("absent_arm")
    con = p.result.contrasts.set_index("contrast")
    sec = con[con.role == "secondary"]
    assert len(sec) == 3 and np.isnan(sec.loc["A2-A1", "p_holm"])
    others = sec.drop(index="A2-A1")
    expected = multipletests(others.p_value.tolist() + [1.0], method="holm")[1][:2]
    np.testing.assert_allclose(others.p_holm, expected)
    shown = p.result.summary.set_index("contrast")
    assert shown.loc["A2-A1", "p_holm"] == "not estimable (no scored run in A2)"
    assert shown.loc["A3-A1", "p_holm"] == ""


def test_all_fail_flags_degenerate_intervals_and_infinite_ratios():
    _, p, s = stages("all_fail")
    con = p.result.contrasts
    assert (con.estimate == 0).all() and con.note.str.contains(estimability.ZERO_WIDTH).all()
    cost = s.results["cost_per_accepted"].summary
    assert (cost.cost_per_accepted == estimability.INFINITY).all()
    assert (
        verdicts("all_fail")["H6"]
        == "not estimable (every arm's cost per accepted deliverable is infinite (no accepted run in any arm))"
    )
    lg = s.results["logistic"].summary
    assert lg.drop(columns=["term", "note"]).map(estimability.is_not_estimable).all().all()
    assert "no variation in S" in lg.note.iloc[0] or "at 0% acceptance" in lg.note.iloc[0]


def test_all_success_is_not_a_finding_of_the_logit():
    _, p, s = stages("all_success")
    assert (p.result.acceptance.p_hat == 1).all() and p.result.acceptance.note.str.contains(
        estimability.ZERO_WIDTH
    ).all()
    lg = s.results["logistic"].summary
    assert lg.odds_ratio.map(estimability.is_not_estimable).all()
    assert verdicts("all_success")["H4"].startswith("not estimable")


def test_an_arm_at_zero_or_one_is_separation_not_an_odds_ratio():
    _, _, s = stages("arm_at_one")  # A3 at 100%
    lg = s.results["logistic"].summary.set_index("term")
    assert lg.loc["A3 vs A1", "odds_ratio"] == "not estimable (separation: A3 at 100% acceptance)"
    assert estimability.is_number(lg.loc["A0 vs A1", "odds_ratio"])
    _, _, s = stages("arm_at_zero")  # A1, the reference, at 0%
    lg = s.results["logistic"].summary
    assert lg.odds_ratio.map(estimability.is_not_estimable).all()
    assert lg.note.str.contains("reference arm: separation: A1 at 0% acceptance").all()
    firth = s.results["logistic"].details["firth"]
    assert np.isfinite(firth.coef).all() and (firth.note.str.startswith("exploratory")).all()


def test_a_scenario_missing_from_an_arm_drops_it_from_that_arms_contrasts():
    df, p, _ = stages("scenario_missing_from_arm")
    J = df.scenario.nunique()
    con = p.result.contrasts.set_index("contrast")
    assert con.loc["A3-A1", "n_scenarios"] == J - 1 and con.loc["A4-A3", "n_scenarios"] == J - 1
    assert con.loc["A1-A0", "n_scenarios"] == J


def test_two_repeats_compute_everything_a_full_table_does():
    v = verdicts("two_repeats")
    assert all(not x.startswith("not estimable") for h, x in v.items() if h not in ("H4",))


def test_degrade_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="kind must be one of"):
        degraded.degrade(base(), "half_judged")


def test_the_degraded_tables_are_what_they_say():
    study = protocol.study()
    t = degraded.degrade(base(), "absent_arm")
    assert "A2" not in set(t.arm)
    t = degraded.degrade(base(), "single_judge")
    assert t.n_judges.max() == 1
    t = degraded.degrade(base(), "arm_at_one")
    assert t[t.arm == study.contrasts[0][0]].S.dropna().all()


def test_failed_runs_are_left_out_and_counted_in_the_macros():
    df = synthetic.generate_runtable(11, n_scenarios=4)
    df.loc[[0, 5], "status"] = "infra_error"
    runs = runtable.validate_runtable(df)
    assert len(runs) == len(df) - 2
    data = stage_outputs.StageData(runs, "test", True, True, str(runs["study"].iloc[0]))
    assert stage_outputs.common_macros(data)["ResultsFailedRunsDropped"] == 2


@pytest.mark.parametrize("kind", ["all_fail", "arm_at_one"])
def test_the_h4_text_macro_states_the_reasons_the_fits_give(kind, tmp_path: Path):
    df, p, s = stages(kind)
    h4 = next(h for h in s.hypotheses if h.id == "H4")
    data = stage_outputs.StageData(df, f"degraded ({kind})", True, True, str(df["study"].iloc[0]))
    stage_outputs.write_sensitivity(s.results, s.hypotheses, data, tmp_path / "t", tmp_path / "f", tmp_path / "g")
    macros = (tmp_path / "g" / "sensitivity_macros.tex").read_text(encoding="utf-8")
    line = next(ln for ln in macros.splitlines() if "\\SensHFourFitNotes}" in ln)
    notes = [n for n in h4.table["note"] if isinstance(n, str) and n]
    assert notes, kind  # a degraded table must leave a reason in some fit
    for n in notes:
        assert latex_escape(n.split("; ")[0].split(" (")[0]) in line, (n, line)
    if kind == "all_fail":
        assert "no variation in S" in line and "separation" not in line


def test_h6s_cost_intervals_carry_their_own_note_not_the_contrasts_calibration(tmp_path: Path):
    df = base()
    p = stage_computations.primary_stage(df, seed=3, B=B, n_permutations=P)
    s = stage_computations.sensitivity_stage(df, seed=3, B=B, n_permutations=P)
    data = stage_outputs.StageData(df, "intact", True, True, str(df["study"].iloc[0]))
    stage_outputs.write_primary(p.result, p.hypotheses, data, tmp_path / "t", tmp_path / "f", tmp_path / "g")
    primary_rows = pd.read_csv(tmp_path / "t" / "primary_hypotheses.csv")  # as stage 05 reads them back
    stage_outputs.write_sensitivity(
        s.results, s.hypotheses, data, tmp_path / "t", tmp_path / "f", tmp_path / "g", primary_hypotheses=primary_rows
    )
    cost = "(nominal 95\\%, coverage not measured for cost)"
    calibrated = "\\IntervalNote{}"

    def caption(name: str) -> str:
        text = (tmp_path / "g" / name).read_text(encoding="utf-8")
        return next(ln for ln in text.splitlines() if ln.startswith("\\caption{"))

    assert cost in caption("primary_h6_table.tex") and calibrated not in caption("primary_h6_table.tex")
    assert calibrated in caption("primary_h1_table.tex") and cost not in caption("primary_h1_table.tex")
    assert cost in caption("sensitivity_cost_table.tex") and calibrated not in caption("sensitivity_cost_table.tex")
    summary = caption("hypotheses_summary_table.tex")
    assert f"for H6 joint bootstraps of the cost ratio {cost}" in summary and calibrated in summary
    paragraphs = (tmp_path / "g" / "discussion_hypotheses.tex").read_text(encoding="utf-8").split("\\paragraph{")
    h6 = next(x for x in paragraphs if x.startswith("H6."))
    h1 = next(x for x in paragraphs if x.startswith("H1."))
    assert f"interval {cost}" in h6 and calibrated not in h6
    assert calibrated in h1 and "coverage not measured" not in h1
