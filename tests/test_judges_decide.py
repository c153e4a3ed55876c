"""The dry run's judges decide part of the acceptances: the unseen shortfall, its truth, and the planted contrasts.

The shortfall's law is the one stated in analysis/config/simulated_judges.yml
(checked against the stated share by counting over many runs); the planted
contrast is worked by hand on a small table; the grading wave's coverage table
starts from every judged run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pilot.grading import agreement
from pilot.simulated import dry_run
from pilot.simulated.judge import load_config, unseen_shortfall


def test_the_shortfall_is_drawn_once_per_run_with_the_stated_share():
    raw = load_config().raw
    spec = raw["unseen_shortfall"]
    # The same run (seed) gets the same shortfall, whoever asks: every judge and both attempts see it.
    assert unseen_shortfall(raw, 12345) == unseen_shortfall(raw, 12345)
    draws = np.array([unseen_shortfall(raw, s) for s in range(5_000)])
    hit = draws > 0
    # The share of runs that fall short: the stated share within four binomial standard errors.
    se = np.sqrt(spec["share"] * (1 - spec["share"]) / draws.size)
    assert abs(hit.mean() - spec["share"]) < 4 * se
    assert draws[hit].min() >= spec["points_low"] and draws[hit].max() <= spec["points_high"]
    # Uniform between the bounds: its mean is their midpoint (four standard errors of a uniform mean).
    width = spec["points_high"] - spec["points_low"]
    assert abs(draws[hit].mean() - (spec["points_low"] + spec["points_high"]) / 2) < 4 * width / np.sqrt(12 * hit.sum())


def test_a_model_without_the_shortfall_leaves_every_run_whole():
    raw = dict(load_config().raw)
    raw.pop("unseen_shortfall")
    assert unseen_shortfall(raw, 7) == 0.0
    assert unseen_shortfall({**raw, "unseen_shortfall": {"share": 0.0, "points_low": 1, "points_high": 2}}, 7) == 0.0


def test_planted_contrasts_by_hand():
    # Two scenarios: A3 planted 0.8 and 0.6, A1 0.5 and 0.7; A3 - A1 = mean(0.3, -0.1) = 0.1.
    by = pd.DataFrame(
        {
            "scenario": ["S1", "S1", "S2", "S2"],
            "arm": ["A3", "A1", "A3", "A1"],
            "planted_p": [0.8, 0.5, 0.6, 0.7],
        }
    )
    est = pd.DataFrame({"contrast": ["A3-A1"], "estimate": [0.2], "ci_low": [0.05], "ci_high": [0.35]})
    out = dry_run.planted_contrasts(by, est).iloc[0]
    assert out.planted == pytest.approx(0.1) and bool(out.covered)
    est.loc[0, ["ci_low", "ci_high"]] = [0.15, 0.35]
    assert not bool(dry_run.planted_contrasts(by, est).iloc[0].covered)


def test_the_grading_coverage_starts_from_every_judged_run():
    from pilot.grading.store import GRADE_COLUMNS

    grades = pd.DataFrame(columns=list(GRADE_COLUMNS))
    experts = pd.DataFrame({"missing": [], "outside_rubric": []})
    packages = pd.DataFrame(
        {"n_grades": [2, 2], "n_judges": [3, 3], "D": [1, 0], "E": [0, 0], "panel_tie": [False, False]}
    )
    sample = {"offered": 5, "drawn": 2, "per_stratum": 1}
    cov = agreement.coverage_table(grades, experts, packages, sample=sample)
    assert list(cov["item"][:3]) == ["judged runs of the primary waves", "drawn into the wave", "not drawn"]
    assert list(cov["count"][:3]) == [5, 2, 3]
    assert "agent errors included" in cov["note"].iloc[0]
    whole = agreement.coverage_table(grades, experts, packages, sample={"offered": 2, "drawn": 2, "per_stratum": None})
    assert whole["note"].iloc[1] == "all of them" and whole["count"].iloc[2] == 0


def test_the_q_sensitivity_moves_with_the_shortfall_and_is_flat_without_it():
    # The planted acceptance of one scenario and arm at the three thresholds of the q sensitivity. With the stated
    # shortfall the judges turn down some sound packages (D = 1, E = 0), more of them the higher q: acceptance falls
    # from q = 50 to 85 by many Monte Carlo errors. Without it they accept every sound package, whatever q: the
    # acceptance is the oracle's share p_DE at every q (the flat sensitivity of a dry run that could not test S).
    from pilot.simulated.judge import SimulatedJudgeConfig

    cfg = load_config()
    whole = SimulatedJudgeConfig(cfg.path, {k: v for k, v in cfg.raw.items() if k != "unseen_shortfall"})

    def at(q: float, judge_config: SimulatedJudgeConfig) -> pd.Series:
        truth = dry_run.planted_acceptance(
            scenarios=["OPS-01"], arms=["A1"], draws=20_000, judge_draws=4_000, seed=11, q=q, judge_config=judge_config
        )
        return truth.by_scenario.iloc[0]

    low, mid, high = (at(q, cfg) for q in (50, 70, 85))
    for a, b in ((low, mid), (mid, high)):
        assert a.planted_p - b.planted_p > 6 * np.hypot(a.mc_se, b.mc_se)
    # At q = 70 the stated share (0.3) of runs falling short puts a visible part of the sound packages below q.
    assert 0.05 < 1 - mid.planted_p / mid.p_DE < 0.3
    flat = [at(q, whole) for q in (50, 85)]
    for r in flat:
        assert r.planted_p == pytest.approx(r.p_DE, abs=4 * r.mc_se + 1e-3)
