"""Hand-computed small examples for the estimator, the frontier, the ratio, the ARI and Kaplan-Meier."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pilot import protocol
from pilot.simulated import synthetic
from pilot.stats import estimators, primary, sensitivity

WORKER = protocol.study()["worker"]["model"]


def _run(scenario, arm, repeat, S, cost=1.0, **kw):
    """One run; S is 1, 0 or None (no judge)."""
    minutes = {"X-01": 60.0, "Y-01": 180.0}[scenario]
    base = dict(
        run_id=f"{scenario}.{arm}.{repeat}",
        study="SIMULATED-hand",
        backend="synthetic",
        scenario=scenario,
        occupation=scenario[0],
        arm=arm,
        repeat=repeat,
        model=WORKER,
        D=True,
        E=False,
        Q={1: 80.0, 0: 50.0, None: np.nan}[S],
        cost_usd=cost,
        H_minutes=0.0,
        wall_s=600.0,
        status="completed",
        censored=False,
        professional_minutes=minutes,
        designed_depth=2,
        selfcheck_first=pd.NA,
        recovery_used=False,
        selfcheck_final=pd.NA,
        tool_calls=10,
    )
    base.update(kw)
    return base


@pytest.fixture()
def hand() -> pd.DataFrame:
    rows = [
        _run("X-01", "A1", 1, 1),
        _run("X-01", "A1", 2, 0),
        _run("X-01", "A1", 3, None),
        _run("X-01", "A3", 1, 1, cost=0.5),
        _run("X-01", "A3", 2, 1, cost=1.5),
        _run("X-01", "A3", 3, 1, cost=0.8),
        _run("Y-01", "A1", 1, 0, cost=2.0),
        _run("Y-01", "A1", 2, 0, cost=2.0),
        _run("Y-01", "A1", 3, 1, cost=2.0),
        _run("Y-01", "A3", 1, 1, cost=2.0),
        _run("Y-01", "A3", 2, 0),
        _run("Y-01", "A3", 3, 0, D=False),
        # A run of another model never enters the primary estimands.
        _run("Y-01", "A3", 1, 1, model="claude-sonnet-5-5"),
    ]
    return pd.DataFrame(rows)


def test_acceptance_equal_and_minutes_weights_by_hand(hand):
    res = primary.primary_analysis(hand, seed=1, B=200)
    p = res.acceptance.set_index("arm")["p_hat"]
    # A1 (1, 0, missing) -> 1/2 (the run without a judge drops out); A3 -> 1
    # Y-01: A1 -> 1/3; A3 -> 1/3
    assert p["A1"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert p["A3"] == pytest.approx((1 + 1 / 3) / 2)
    assert np.isnan(p["A0"])
    assert res.acceptance.set_index("arm").loc["A1", "n_runs"] == 3 + 3
    assert res.acceptance.set_index("arm").loc["A1", "n_scored"] == 5
    c = res.contrast("A3-A1")
    assert c.estimate == pytest.approx(0.25) and c.n_scenarios == 2
    mw = primary.primary_analysis(hand, seed=1, B=200, weights="minutes").acceptance.set_index("arm")["p_hat"]
    assert mw["A1"] == pytest.approx((60 * 0.5 + 180 / 3) / 240)
    assert mw["A3"] == pytest.approx((60 * 1 + 180 / 3) / 240)


def test_scenario_weighted_helper_matches_the_primary_estimator(hand):
    s = estimators.scenario_weighted(hand[hand.model == WORKER], "cost_usd")
    assert s["A1"] == pytest.approx((1.0 + 2.0) / 2)
    assert s["A3"] == pytest.approx(((0.5 + 1.5 + 0.8) / 3 + (2.0 + 1.0 + 1.0) / 3) / 2)


def test_budget_frontier_by_hand(hand):
    fr = sensitivity.frontier(hand, "budget", B=100).table
    at = fr[(fr.budget_usd == 1.0)].set_index("arm")["p_hat"]
    # A3 at b=1: X-01 accepted runs cost 0.5, 1.5, 0.8 -> 2/3; Y-01 the accepted run cost 2.0 -> 0
    assert at["A3"] == pytest.approx((2 / 3 + 0) / 2)
    # A1 at b=1: X-01 (1 accepted at 1.0, 0; missing drops) -> 1/2; Y-01 costs 2.0 -> 0
    assert at["A1"] == pytest.approx(0.25)
    top = fr[fr.budget_usd == 4.0].set_index("arm")["p_hat"]
    p = primary.primary_analysis(hand, B=50).acceptance.set_index("arm")["p_hat"]
    assert top["A3"] == pytest.approx(p["A3"]) and top["A1"] == pytest.approx(p["A1"])
    assert list(fr.budget_usd.unique()) == protocol.study().grid("budget_usd")


def test_human_frontier_counts_minutes(hand):
    df = hand.copy()
    df.loc[0, "H_minutes"] = 10.0  # X-01 A1 repeat 1, accepted
    fr = sensitivity.frontier(df, "human", B=50).table
    a1 = fr[fr.arm == "A1"].set_index("human_minutes")["p_hat"]
    assert a1[0] == pytest.approx((0 + 1 / 3) / 2)
    assert a1[10] == pytest.approx((1 / 2 + 1 / 3) / 2)


def test_cost_per_accepted_by_hand(hand):
    t = sensitivity.cost_per_accepted(hand, B=300).table.set_index("arm")
    assert t.loc["A1", "cost_per_accepted"] == pytest.approx(1.5 / ((1 / 2 + 1 / 3) / 2))
    assert t.loc["A1", "ci_low"] <= t.loc["A1", "cost_per_accepted"] <= t.loc["A1", "ci_high"]
    assert t["share_lowest"].sum() == pytest.approx(1.0)


def test_recovery_index_by_hand():
    a4 = [
        _run("X-01", "A4", 1, 1, selfcheck_first=False, recovery_used=True, selfcheck_final=True),
        _run("X-01", "A4", 2, 0, selfcheck_first=False, recovery_used=True, selfcheck_final=False),
        _run("X-01", "A4", 3, 1, selfcheck_first=True, recovery_used=False, selfcheck_final=True),
        _run(
            "Y-01",
            "A4",
            1,
            0,
            selfcheck_first=True,
            recovery_used=True,
            selfcheck_final=True,
            censored=True,
            status="capped",
        ),
        _run("Y-01", "A4", 2, 1, selfcheck_first=True, recovery_used=False, selfcheck_final=True),
    ]
    t = sensitivity.recovery_index(pd.DataFrame(a4), B=200).table.set_index("index")
    assert t.loc["ARI", "eligible"] == 3 and t.loc["ARI", "recovered"] == 2
    assert t.loc["ARI", "estimate"] == pytest.approx(2 / 3)
    assert t.loc["ARI, accepted", "estimate"] == pytest.approx(1 / 3)


def test_logistic_odds_ratio_equals_the_pooled_odds_ratio(hand):
    t = sensitivity.logistic_cluster(hand).table.set_index("term")
    # Saturated in arm: OR = odds(A3 scored runs 4/6) / odds(A1 scored runs 2/5) = 2 / (2/3) = 3
    assert t.loc["A3 vs A1", "odds_ratio"] == pytest.approx(3.0, rel=1e-6)
    # Every arm has a row; an arm without scored runs is reported as not estimable, with the reason.
    assert list(t.index) == ["intercept", "A0 vs A1", "A2 vs A1", "A3 vs A1", "A4 vs A1"]
    shown = sensitivity.logistic_cluster(hand).summary.set_index("term")
    assert shown.loc["A0 vs A1", "odds_ratio"] == "not estimable (no scored run in A0)"
    # Two scenario clusters: the point estimate stands, the cluster-robust errors do not.
    assert shown.loc["A3 vs A1", "se_cluster"].startswith("not estimable (2 scenario cluster(s)")


def _product_limit(t, e, at):
    """Kaplan-Meier by its definition, for comparison."""
    s, out = 1.0, []
    times = np.unique(t[e])
    for x in at:
        s = 1.0
        for u in times[times <= x]:
            s *= 1 - ((t == u) & e).sum() / (t >= u).sum()
        out.append(s)
    return np.array(out)


def test_kaplan_meier_by_hand_and_against_the_definition():
    rows = [
        _run("X-01", "A1", 1, 1, wall_s=300.0),
        _run("X-01", "A1", 2, 1, wall_s=600.0),
        _run("X-01", "A1", 3, 1, wall_s=600.0, censored=True, status="capped"),
        _run("Y-01", "A1", 1, 1, wall_s=1200.0),
        _run("X-01", "A3", 1, 1, wall_s=400.0),
        _run("Y-01", "A3", 1, 1, wall_s=900.0, status="agent_error"),
    ]
    km = sensitivity.kaplan_meier(pd.DataFrame(rows), times=[5, 10, 20])
    a1 = km.summary.set_index("arm").loc["A1"]
    assert (a1.running_at_5min, a1.running_at_10min, a1.running_at_20min) == pytest.approx((0.75, 0.5, 0.0))
    assert a1.median_min == pytest.approx(10.0) and a1.censored == 1
    df = synthetic.generate_runtable(3, n_scenarios=6)
    km = sensitivity.kaplan_meier(df, times=[5, 10, 15, 25])
    rows = df[df.model == WORKER]
    t, e = sensitivity.completion_times(rows)
    for arm, kmf in km.details["fitters"].items():
        m = (rows.arm == arm).to_numpy()
        np.testing.assert_allclose(
            kmf.survival_function_at_times([5, 10, 15, 25]).to_numpy(),
            _product_limit(t[m], e[m], [5, 10, 15, 25]),
            atol=1e-12,
        )
    assert set(km.details["tests"]["p_value"].between(0, 1)) == {True}


def test_judge_agreement_perfect_and_noisy():
    df = synthetic.generate_runtable(4, n_scenarios=5)
    same = df.copy()
    for j in ("Q_J2", "Q_J3"):
        same[j] = same["Q_J1"]
    same = same.dropna(subset=["Q_J1"])
    t = sensitivity.judge_agreement(same).table.set_index(["measure", "judges"])["value"]
    assert t[("Krippendorff alpha (ordinal)", "J1+J2+J3")] == pytest.approx(1.0)
    assert t[("Pearson r", "J1-J2")] == pytest.approx(1.0)
    noisy = sensitivity.judge_agreement(df).table.set_index("measure")["value"]
    assert 0 < noisy["Krippendorff alpha (ordinal)"] < 1


def test_interval_alpha_equals_the_krippendorff_package():
    import krippendorff

    rng = np.random.default_rng(7)
    for _ in range(5):
        data = np.round(rng.normal(60, 15, (3, 40)), 1)
        data[rng.random(data.shape) < 0.2] = np.nan
        ref = krippendorff.alpha(reliability_data=data, level_of_measurement="interval")
        assert sensitivity.interval_alpha(data) == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_cost_per_accepted_charges_a_run_without_a_reported_cost_at_the_ledger(hand):
    # Y-01's A1 repeat 3 was killed at its wall limit: no reported cost; the ledger charged 4.30 in all, 0.30 of it
    # judges.
    df = hand.assign(charged_usd=hand.cost_usd + 0.3, judge_cost_usd=0.3)
    at = (df.scenario == "Y-01") & (df.arm == "A1") & (df.repeat == 3)
    df.loc[at, ["cost_usd", "charged_usd"]] = [np.nan, 4.3]
    charged = sensitivity.cost_per_accepted(df, B=300).table.set_index("arm")
    reported = sensitivity.cost_per_accepted(df, B=300, cost_reading="reported").table.set_index("arm")
    acc_a1 = (1 / 2 + 1 / 3) / 2
    # By hand, A1's mean cost per run: X-01 (1, 1, 1) -> 1; Y-01 (2, 2, 4.30 - 0.30) -> 8/3 charged, (2, 2) -> 2
    # reported.
    assert charged.loc["A1", "cost_per_accepted"] == pytest.approx((1 + 8 / 3) / 2 / acc_a1)
    assert reported.loc["A1", "cost_per_accepted"] == pytest.approx((1 + 2) / 2 / acc_a1)
    assert (charged.loc["A1", "n_charged"], charged.loc["A1", "n_no_cost"]) == (1, 0)
    assert (reported.loc["A1", "n_charged"], reported.loc["A1", "n_no_cost"]) == (0, 1)
    assert charged.loc["A3", "n_charged"] == 0
    with pytest.raises(ValueError, match="cost_reading"):
        sensitivity.cost_per_accepted(df, B=10, cost_reading="metered")
