"""Agreement of the experts' grades with each other and with the LLM panel, the panel's bias, and H1 on expert grades.

Expected values come from elsewhere: Krippendorff's (2011) worked example
("Computing Krippendorff's Alpha-Reliability", 4 observers x 12 units,
nominal alpha = 0.743) and a hand implementation of the coincidence-matrix
formula for the other levels; Cohen's kappa and percent agreement from 2x2
tables worked by hand; means per arm and their contrast worked by hand on
small tables; and a planted bias the report must recover.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from pilot import protocol
from pilot.grading import agreement as ag
from pilot.grading import report as rp
from pilot.grading.store import GRADE_COLUMNS, PANEL_COLUMNS
from pilot.judges.rubric import Criterion
from pilot.stats.primary import InferenceSettings

N = np.nan
# Krippendorff (2011), section C: observers A-D x units 1-12, "." (here NaN) where an observer gave no value.
KRIPPENDORFF_2011 = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
        [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
    ]
)


def _criteria(ids=("c1", "c2", "c3"), weights=(0.5, 0.3, 0.2)) -> list[Criterion]:
    return [
        Criterion(i, w, f"criterion {i}", {0: "none", 2: "some", 4: "all"}) for i, w in zip(ids, weights, strict=True)
    ]


CRITERIA = {"S1": _criteria(), "S2": _criteria(), "S3": _criteria(), "S4": _criteria()}


def hand_alpha(data: np.ndarray, level: str) -> float:
    """Krippendorff's alpha straight from the definitions: coincidences o_ck, margins n_c, alpha = 1 - (n-1) sum o d /
    sum n_c n_k d."""
    o: dict[tuple[float, float], float] = defaultdict(float)
    for u in range(data.shape[1]):
        vals = [v for v in data[:, u] if not np.isnan(v)]
        if len(vals) < 2:
            continue
        for i, j in itertools.permutations(range(len(vals)), 2):
            o[(vals[i], vals[j])] += 1 / (len(vals) - 1)
    values = sorted({c for c, _ in o})
    n_c = {c: sum(o[(c, k)] for k in values) for c in values}
    n = sum(n_c.values())

    def delta(c: float, k: float) -> float:
        if level == "nominal":
            return float(c != k)
        if level == "interval":
            return (c - k) ** 2
        lo, hi = min(c, k), max(c, k)
        return (sum(n_c[g] for g in values if lo <= g <= hi) - (n_c[c] + n_c[k]) / 2) ** 2

    observed = sum(o[(c, k)] * delta(c, k) for c in values for k in values)
    expected = sum(n_c[c] * n_c[k] * delta(c, k) for c in values for k in values) / (n - 1)
    return 1 - observed / expected


# ------------------------------------------------------------------ Krippendorff's alpha


def test_alpha_reproduces_krippendorffs_worked_example():
    assert ag.krippendorff_alpha(KRIPPENDORFF_2011, "nominal") == pytest.approx(0.743, abs=5e-4)
    assert hand_alpha(KRIPPENDORFF_2011, "nominal") == pytest.approx(0.743, abs=5e-4)  # the hand formula is the paper's
    for level, published in (
        ("ordinal", 0.815),
        ("interval", 0.849),
    ):  # the paper's values for the same data at these levels
        assert hand_alpha(KRIPPENDORFF_2011, level) == pytest.approx(published, abs=5e-4)
        assert ag.krippendorff_alpha(KRIPPENDORFF_2011, level) == pytest.approx(
            hand_alpha(KRIPPENDORFF_2011, level), abs=1e-12
        )


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_the_bootstrap_replicates_are_the_same_alpha_as_the_package_on_the_resampled_units(level):
    data = KRIPPENDORFF_2011
    ones = np.ones((1, data.shape[1]))
    assert ag.alpha_replicates(data, level, ones)[0] == pytest.approx(hand_alpha(data, level), abs=1e-12)
    rng = np.random.default_rng(3)
    for _ in range(5):
        idx = rng.integers(0, data.shape[1], data.shape[1])
        counts = np.bincount(idx, minlength=data.shape[1])[None, :].astype(float)
        assert ag.alpha_replicates(data, level, counts)[0] == pytest.approx(hand_alpha(data[:, idx], level), abs=1e-12)


def test_alpha_replicates_take_a_packages_units_together():
    # units 0-1 belong to package 0, units 2-3 to package 1, ...: drawing package 1 twice doubles both of its units
    data = np.array([[1, 2, 3, 1, 0, 4], [1, 3, 3, 0, 1, 4], [2, 2, N, 1, 0, 3.0]])
    groups = np.array([0, 0, 1, 1, 2, 2])
    counts = np.array([[0.0, 2.0, 1.0]])
    expected = hand_alpha(data[:, [2, 3, 2, 3, 4, 5]], "ordinal")
    assert ag.alpha_replicates(data, "ordinal", counts, groups=groups, value_domain=ag.HALF_POINTS)[0] == pytest.approx(
        expected, abs=1e-12
    )


def test_alpha_interval_is_reproducible_and_holds_the_estimate():
    rng = np.random.default_rng(0)
    true = rng.integers(0, 5, 30).astype(float)
    data = np.clip(true + rng.integers(-1, 2, (3, 30)), 0, 4)
    data[rng.random(data.shape) < 0.2] = np.nan
    a = ag.alpha_estimate(data, "ordinal", B=300, rng=np.random.default_rng([7, 1]), value_domain=ag.HALF_POINTS)
    b = ag.alpha_estimate(data, "ordinal", B=300, rng=np.random.default_rng([7, 1]), value_domain=ag.HALF_POINTS)
    assert a == b
    assert a["ci_low"] <= a["alpha"] <= a["ci_high"] and a["note"] == ""
    assert a["alpha"] == pytest.approx(hand_alpha(data, "ordinal"), abs=1e-12)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (np.array([[1.0, 2.0, N], [1.0, N, 3.0]]), "1 package(s) with two or more values; needs at least 2"),
        (np.array([[2.0, 2.0, 2.0], [2.0, 2.0, N]]), "every value is the same (no variation to agree on)"),
        (np.full((1, 0), np.nan), "0 package(s) with two or more values; needs at least 2"),
    ],
)
def test_alpha_is_not_estimable_on_too_little(data, reason):
    est = ag.alpha_estimate(data, "ordinal", B=50, rng=np.random.default_rng(0))
    assert np.isnan(est["alpha"]) and np.isnan(est["ci_low"]) and est["note"] == reason


# ------------------------------------------------------------------ acceptance agreement


def test_cohens_kappa_and_percent_agreement_by_hand():
    table = np.array([[20, 5], [10, 15]])  # p_o = 35/50; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = (0.7-0.5)/(1-0.5)
    assert ag.percent_agreement(table) == pytest.approx(0.7)
    assert ag.cohen_kappa(table) == pytest.approx(0.4)
    assert np.isnan(ag.cohen_kappa(np.array([[0, 0], [0, 9]])))  # both always yes: chance agreement 1, kappa 0/0


def test_cohens_kappa_with_unequal_margins_by_hand():
    # rows: rater 1 (30 in the first category, 20 in the second); columns: rater 2 (20, 30)
    table = np.array([[18, 12], [2, 18]])
    # p_o = (18 + 18) / 50 = 0.72; p_e = (30 * 20 + 20 * 30) / 50^2 = 0.48; kappa = 0.24 / 0.52
    assert ag.percent_agreement(table) == pytest.approx(0.72)
    assert ag.cohen_kappa(table) == pytest.approx(0.24 / 0.52)


def _grade_rows(
    package,
    scenario,
    arm,
    grader,
    slot,
    scores,
    accept,
    *,
    status="submitted",
    wave="w",
    source="experts",
    criteria=("c1", "c2", "c3"),
):
    base = {
        "wave": wave,
        "source": source,
        "package_id": package,
        "run_id": f"{scenario}.{arm}.{package}",
        "scenario": scenario,
        "arm": arm,
        "model": "m",
        "grader_id": grader,
        "slot": slot,
        "status": status,
        "active_s": 600.0,
    }
    if status != "submitted":
        return [{**base, "criterion": "", "score": None, "critique": "", "accept": None}]
    return [
        {**base, "criterion": c, "score": s, "critique": f"on {c}, with a comma", "accept": int(accept)}
        for c, s in zip(criteria, scores, strict=True)
    ]


def _panel_rows(package, scenario, arm, judges, *, D=True, E=False, criteria=("c1", "c2", "c3")):
    """``judges``: (judge_id, scores, judge_q, accept) per valid judge."""
    return [
        {
            "package_id": package,
            "run_id": f"{scenario}.{arm}.{package}",
            "scenario": scenario,
            "arm": arm,
            "model": "m",
            "D": D,
            "E": E,
            "judge_id": j,
            "criterion": c,
            "score": s,
            "judge_q": q,
            "judge_accept": acc,
        }
        for j, scores, q, acc in judges
        for c, s in zip(criteria, scores, strict=True)
    ]


def _grades(rows) -> pd.DataFrame:
    return pd.DataFrame([r for rs in rows for r in rs], columns=list(GRADE_COLUMNS))


def _panel(rows) -> pd.DataFrame:
    return pd.DataFrame([r for rs in rows for r in rs], columns=list(PANEL_COLUMNS))


def test_acceptance_agreement_by_hand_with_two_graders_per_package():
    # slot 1 vs slot 2: (1,1) (1,0) (0,0) (0,0): agreement 3/4; p_yes 2/4 and 1/4, p_e = 0.5, kappa = (0.75-0.5)/0.5
    decisions = [(1, 1), (1, 0), (0, 0), (0, 0)]
    grades = _grades(
        _grade_rows(f"P{i}", "S1", "A1", f"G{s}", s, (2, 2, 2), d[s - 1])
        for i, d in enumerate(decisions)
        for s in (1, 2)
    )
    experts = ag.expert_table(grades, CRITERIA)
    # the panel accepts P0 and P1 (3 and 2 of 3 votes), not P2 or P3: against the experts 1,1 1,0 0,0 0,0 -> 7 of 8
    # agree
    votes = [(True, True, True), (True, True, False), (False, False, True), (False, False, False)]
    panel = ag.panel_table(
        _panel(
            _panel_rows(f"P{i}", "S1", "A1", [(f"J{j}", (2, 2, 2), 50.0, v[j]) for j in range(3)])
            for i, v in enumerate(votes)
        )
    )
    t = ag.acceptance_table(experts, panel, B=200, seed=1).set_index(["comparison", "statistic"])
    assert t.loc[("expert-expert", "agreement"), "estimate"] == pytest.approx(0.75)
    assert t.loc[("expert-expert", "Cohen's kappa"), "estimate"] == pytest.approx(0.5)
    assert t.loc[("expert-expert", "agreement"), "n_pairs"] == 4
    assert t.loc[("panel-expert", "agreement"), "estimate"] == pytest.approx(7 / 8)
    # panel a = (1,1,1,1,0,0,0,0), experts b = (1,1,1,0,0,0,0,0): p_o 7/8, p_e = 0.5*3/8 + 0.5*5/8 = 0.5, kappa = 0.75
    assert t.loc[("panel-expert", "Cohen's kappa"), "estimate"] == pytest.approx(0.75)
    assert t.loc[("expert-expert", "agreement"), "reference"] == ag.GDPVAL_EXPERT_EXPERT == 0.71
    assert t.loc[("panel-expert", "agreement"), "reference"] == ag.GDPVAL_GRADER_EXPERT == 0.66
    for key in t.index:
        assert t.loc[key, "ci_low"] <= t.loc[key, "estimate"] <= t.loc[key, "ci_high"]


def test_three_graders_pool_every_pair_of_slots():
    grades = _grades(_grade_rows("P1", "S1", "A1", f"G{s}", s, (2, 2, 2), a) for s, a in ((1, 1), (2, 1), (3, 0)))
    pairs = ag.expert_pairs(ag.expert_table(grades, CRITERIA))
    assert list(zip(pairs["slot_a"], pairs["slot_b"], pairs["a"], pairs["b"], strict=True)) == [
        (1, 2, 1, 1),
        (1, 3, 1, 0),
        (2, 3, 1, 0),
    ]


def test_acceptance_agreement_needs_two_packages():
    grades = _grades(_grade_rows("P1", "S1", "A1", f"G{s}", s, (2, 2, 2), 1) for s in (1, 2))
    t = ag.acceptance_table(ag.expert_table(grades, CRITERIA), ag.panel_table(_panel([])), B=50, seed=0)
    assert t["estimate"].isna().all()
    assert set(t["note"]) == {
        "1 package(s) with a pair of decisions; needs at least 2",
        "0 package(s) with a pair of decisions; needs at least 2",
    }


# ------------------------------------------------------------------ tables, ties and the bias


def test_expert_q_panel_ties_and_the_package_bias_by_hand():
    # weights 0.5, 0.3, 0.2: scores (4,2,0) give 100*(2+0.6)/4 = 65, (2,2,2) give 50; mean 57.5
    grades = _grades(
        [
            _grade_rows("P1", "S1", "A3", "G1", 1, (4, 2, 0), 1),
            _grade_rows("P1", "S1", "A3", "G2", 2, (2, 2, 2), 0),
            _grade_rows("P2", "S1", "A1", "G1", 1, (1, 1, 1), 0, status="open"),
        ]
    )
    experts = ag.expert_table(grades, CRITERIA)
    assert experts["Q"].tolist() == [65.0, 50.0]
    # two valid judges: medians (4+3)/2 and (1+2)/2 are half points; Q the mean 75; votes 1-1: a tie, not accepted
    panel = ag.panel_table(
        _panel(
            [
                _panel_rows("P1", "S1", "A3", [("J1", (4, 1, 0), 80.0, True), ("J2", (3, 2, 0), 70.0, False)]),
                _panel_rows("P2", "S1", "A1", [(f"J{j}", (2, 2, 2), 50.0, j < 2) for j in range(3)]),
            ]
        )
    )
    p1, p2 = panel.set_index("package_id").loc["P1"], panel.set_index("package_id").loc["P2"]
    assert (p1["criterion:c1"], p1["criterion:c2"], p1["criterion:c3"]) == (3.5, 1.5, 0.0)
    assert (p1["Q"], p1["accept"], bool(p1["panel_tie"])) == (75.0, 0.0, True)
    assert (p2["accept"], bool(p2["panel_tie"])) == (1.0, False)  # 2 of 3 votes
    packages = ag.package_table(grades, experts, panel).set_index("package_id")
    assert packages.loc["P1", "d_Q"] == pytest.approx(75 - 57.5)
    assert packages.loc["P1", "d_S"] == pytest.approx(0 - 0.5)
    assert packages.loc["P2", "n_grades"] == 0 and np.isnan(packages.loc["P2", "d_Q"])
    cov = ag.coverage_table(grades, experts, packages.reset_index()).set_index("item")["count"]
    assert (
        cov["assignments"],
        cov["submitted"],
        cov["open"],
        cov["packages with 0 grades"],
        cov["packages with 2+ grades"],
        cov["packages with a panel tie on accept"],
    ) == (3, 2, 1, 1, 1, 1)


def test_a_grade_missing_a_score_has_no_q_and_is_counted():
    rows = _grade_rows("P1", "S1", "A1", "G1", 1, (4, 2, 0), 1)[:2]  # c3 never scored
    experts = ag.expert_table(_grades([rows]), CRITERIA)
    assert np.isnan(experts.loc[0, "Q"]) and experts.loc[0, "missing"] == "c3"


def _bias_packages() -> pd.DataFrame:
    # A3: d_Q 10, 20, 30 (mean 20), d_S 1, 0, 0.5 (mean 0.5); A1: d_Q 0, 4 (mean 2), d_S 0, -0.5 (mean -0.25)
    rows = [("A3", 10, 1.0), ("A3", 20, 0.0), ("A3", 30, 0.5), ("A1", 0, 0.0), ("A1", 4, -0.5)]
    return pd.DataFrame(
        {
            "package_id": [f"P{i}" for i in range(len(rows))],
            "scenario": "S1",
            "arm": [r[0] for r in rows],
            "d_Q": [float(r[1]) for r in rows],
            "d_S": [r[2] for r in rows],
            "panel_q": 80.0,
            "expert_q_mean": [80.0 - r[1] for r in rows],
            "panel_accept": 1.0,
            "expert_accept_mean": [1 - r[2] for r in rows],
        }
    )


def test_bias_per_arm_and_its_contrast_by_hand():
    bias, contrast = ag.bias_tables(_bias_packages(), ["A0", "A1", "A3"], ("A3", "A1"), B=500, seed=4)
    b = bias.set_index(["measure", "arm"])
    assert b.loc[("Q", "A3"), "estimate"] == pytest.approx(20.0) and b.loc[("Q", "A1"), "estimate"] == pytest.approx(
        2.0
    )
    assert b.loc[("accept", "A3"), "estimate"] == pytest.approx(0.5) and b.loc[
        ("accept", "A1"), "estimate"
    ] == pytest.approx(-0.25)
    assert b.loc[("Q", "A3"), "expert_mean"] == pytest.approx(60.0)
    assert (
        np.isnan(b.loc[("Q", "A0"), "estimate"])
        and b.loc[("Q", "A0"), "note"] == "no package of A0 with an expert grade and a panel value"
    )
    c = contrast.set_index("measure")
    assert c.loc["Q", "estimate"] == pytest.approx(18.0) and c.loc["accept", "estimate"] == pytest.approx(0.75)
    assert (c.loc["Q", "n_treated"], c.loc["Q", "n_control"]) == (3, 2)
    for t in (b.dropna(subset=["estimate"]), c):
        assert ((t["ci_low"] <= t["estimate"]) & (t["estimate"] <= t["ci_high"])).all()
    again = ag.bias_tables(_bias_packages(), ["A0", "A1", "A3"], ("A3", "A1"), B=500, seed=4)
    pd.testing.assert_frame_equal(again[1], contrast)
    other = ag.bias_tables(_bias_packages(), ["A0", "A1", "A3"], ("A3", "A1"), B=500, seed=5)[1]
    assert not np.allclose(other[["ci_low", "ci_high"]], contrast[["ci_low", "ci_high"]])


def test_bias_contrast_is_not_estimable_without_an_arm():
    packages = _bias_packages()
    _, contrast = ag.bias_tables(packages[packages["arm"] == "A3"], ["A1", "A3"], ("A3", "A1"), B=50, seed=0)
    assert contrast["estimate"].isna().all()
    assert set(contrast["note"]) == {"no package of A1 with an expert grade and a panel value"}


# ------------------------------------------------------------------ H1 on expert grades


def _h1_packages(rates: dict[tuple[str, str], list[tuple[float, float]]]) -> pd.DataFrame:
    """(scenario, arm) -> per package (expert Q, panel Q); D = 1, E = 0 throughout."""
    rows = [
        {"package_id": f"{s}{a}{i}", "scenario": s, "arm": a, "expert_q_mean": eq, "panel_q": pq, "D": 1.0, "E": 0.0}
        for (s, a), qs in rates.items()
        for i, (eq, pq) in enumerate(qs)
    ]
    return pd.DataFrame(rows)


def test_h1_on_expert_grades_by_hand():
    # experts: S1 A3 1,1 - A1 0,1 = 0.5; S2 A3 1,0 - A1 0 = 0.5: mean 0.5. Panel (Q 90 everywhere but S2 A1): S1 1-1 =
    # 0, S2 1-0 = 1: mean 0.5.
    packages = _h1_packages(
        {
            ("S1", "A3"): [(80, 90), (75, 90)],
            ("S1", "A1"): [(60, 90), (70, 90)],
            ("S2", "A3"): [(71, 90), (40, 90)],
            ("S2", "A1"): [(69.9, 60)],
        }
    )
    study = protocol.study()
    settings = InferenceSettings.from_study(1, study, B=400)
    t = ag.h1_table(packages, arms=study.arms, contrast=("A3", "A1"), q=70.0, settings=settings).set_index("grades")
    assert t.loc["experts", "estimate"] == pytest.approx(0.5)
    assert t.loc["panel", "estimate"] == pytest.approx(0.5)
    assert t.loc["panel minus experts", "estimate"] == pytest.approx(0.0)  # S1: 0 - 0.5, S2: 1 - 0.5
    assert (t["n_scenarios"] == 2).all() and (t["n_packages"] == 7).all()
    assert t.loc["experts", "verdict"] == "not consistent"  # two scenarios: the sign-flip p cannot fall below 0.05


@pytest.mark.parametrize(
    ("rates", "reason"),
    [
        (
            {("S1", "A3"): [(80, 90)], ("S1", "A1"): [(60, 90)], ("S2", "A3"): [(80, 90)], ("S2", "A4"): [(60, 90)]},
            "no package with an expert grade for S2 in A1",
        ),
        (
            {("S1", "A3"): [(80, 90)], ("S1", "A1"): [(60, 90)]},
            "1 scenario(s) with expert-graded packages in both arms; needs at least 2",
        ),
    ],
)
def test_h1_is_not_estimable_when_coverage_falls_short(rates, reason):
    study = protocol.study()
    t = ag.h1_table(
        _h1_packages(rates),
        arms=study.arms,
        contrast=("A3", "A1"),
        q=70.0,
        settings=InferenceSettings.from_study(1, study, B=50),
    )
    assert t["estimate"].isna().all() and set(t["note"]) == {reason}
    assert set(t["verdict"]) == {f"not estimable ({reason})"}


# ------------------------------------------------------------------ the report: planted bias, export, outputs


def _synthetic(seed: int, shift_points: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Four scenarios x A1, A3 x 6 packages; 3 judges and 2 experts per package.

    Judges score a package's true grade t plus noise in {-1, 0, 1}; experts
    score t plus the same kind of noise, less ``shift_points`` in A3: the
    panel is ``25 * shift_points`` Q points above the experts in A3 and level
    with them in A1. t is drawn where no grade leaves 0-4, so nothing is clipped.
    """
    rng = np.random.default_rng(seed)
    crit = _criteria()
    grades, panel = [], []
    for s, arm, i in itertools.product(("S1", "S2", "S3", "S4"), ("A1", "A3"), range(6)):
        pid = f"{s}{arm}{i}"
        low = 2 if arm == "A3" else 1
        t = rng.integers(low, 4, 3)
        shift = shift_points if arm == "A3" else 0
        judges = []
        for j in range(3):
            sc = t + rng.integers(-1, 2, 3)
            q = 100 * sum(c.weight * v for c, v in zip(crit, sc, strict=True)) / 4
            judges.append((f"J{j}", tuple(int(v) for v in sc), q, bool(q >= 60)))
        panel.append(_panel_rows(pid, s, arm, judges, D=bool(rng.random() < 0.9)))
        for slot in (1, 2):
            sc = t - shift + rng.integers(-1, 2, 3)
            grades.append(_grade_rows(pid, s, arm, f"G{s}{slot}", slot, tuple(int(v) for v in sc), rng.random() < 0.5))
    return _grades(grades), _panel(panel)


def test_the_report_recovers_a_planted_bias_in_the_primary_contrast():
    grades, panel = _synthetic(11)
    r = rp.grading_report(grades, panel, seed=3, B=400, criteria=CRITERIA)
    q = r.bias_contrast.set_index("measure").loc["Q"]
    assert q.ci_low <= 25.0 <= q.ci_high  # one criterion point below the panel in A3 only: 25 Q points
    assert q.ci_low > 0
    assert (r.h1["n_scenarios"] == 4).all() and r.label == ""


def test_the_export_round_trips_into_the_same_report(tmp_path):
    grades, panel = _synthetic(5)
    grades = pd.concat(
        [grades, _grades([_grade_rows("S1A10", "S1", "A1", "G9", 3, (), 0, status="saved")])], ignore_index=True
    )
    # critiques a spreadsheet would run as formulas, and one that starts with the escape itself
    grades.loc[0, "critique"], grades.loc[1, "critique"], grades.loc[2, "critique"] = (
        '=HYPERLINK("x")',
        "-2 for totals",
        "'as typed",
    )
    path = tmp_path / "export.csv"
    path.write_text(rp.store.export_csv(grades), encoding="utf-8")  # as `pilot grading export` writes it
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert list(raw["critique"][:3]) == ['\'=HYPERLINK("x")', "'-2 for totals", "''as typed"]
    back = rp.read_export(path)
    assert list(back["critique"][:3]) == ['=HYPERLINK("x")', "-2 for totals", "'as typed"]
    a = rp.grading_report(grades, panel, seed=2, B=100, criteria=CRITERIA)
    b = rp.grading_report(back, panel, seed=2, B=100, criteria=CRITERIA)
    for name in (
        "reliability",
        "acceptance",
        "bias",
        "bias_contrast",
        "h1",
        "coverage",
        "summary",
        "experts",
        "packages",
    ):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)
    assert b.coverage.set_index("item").loc["saved, not submitted", "count"] == 1


def test_a_broken_export_is_refused_naming_what_is_wrong(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("wave,package_id\nw,P1\n", encoding="utf-8")
    with pytest.raises(rp.store.GradingError, match="lacks column"):
        rp.read_export(path)
    grades = _grades([_grade_rows("P1", "S1", "A1", "G1", 1, (2, 2, 2), 1)])
    grades["score"] = grades["score"].astype(object)
    grades.loc[1, "score"] = "two"
    path.write_text(grades.to_csv(index=False), encoding="utf-8")
    with pytest.raises(rp.store.GradingError, match=r"column score, row 2: 'two' is not a number"):
        rp.read_export(path)


def test_outputs_and_not_run_define_the_same_macros(tmp_path):
    grades, panel = _synthetic(8)
    grades["source"] = "simulated"
    r = rp.grading_report(grades, panel, seed=1, B=100, criteria=CRITERIA)
    assert r.label == "SIMULATED"
    written = rp.write_grading_outputs(r, tmp_path / "tables", tmp_path / "gen")
    not_run = rp.write_not_run(tmp_path / "none", "no expert was recruited", arms=r.arms)

    def names(path):
        return re.findall(r"\\newcommand\{\\(grading[A-Za-z]+)\}", path.read_text(encoding="utf-8"))

    assert names(written[rp.MACRO_FILE]) == names(not_run) == rp.macro_names(r.arms)
    assert "\\newcommand{\\gradingWaveRun}{0}" in not_run.read_text(encoding="utf-8")
    table = written["grading_summary_table.tex"].read_text(encoding="utf-8")
    assert "\\textbf{SIMULATED.}" in table and "\\toprule" in table and "\\label{tab:grading-summary}" in table
    assert pd.read_csv(written["grading_summary.csv"])["wave"].iloc[0] == "SIMULATED w"


def _table_labels(path) -> tuple[list[str], list[str]]:
    """A generated table's header cells and the first cell of each row, as the .tex holds them."""
    text = path.read_text(encoding="utf-8")
    head, body = text.split("\\toprule\n", 1)[1].split("\\midrule\n", 1)
    rows = body.split("\\bottomrule", 1)[0].strip().splitlines()
    return [c.strip() for c in head.split("\\\\")[0].split("&")], [r.split("&")[0].strip() for r in rows]


def _tabular(path) -> str:
    text = path.read_text(encoding="utf-8")
    return text[text.index("\\begin{tabular}") : text.index("\\end{tabular}")]


#: Each wave's table labels as the manuscript must print them, written by hand: a wave of simulated graders names its
#: stand-ins in every row and header; a wave of experts keeps the labels it always had.
TABLE_LABELS = {
    "simulated": {
        "summary": [
            "alpha among simulated graders, Q (interval)",
            "alpha among simulated graders, all criteria (ordinal)",
            "alpha panel vs simulated graders, Q (interval)",
            "alpha panel vs simulated graders, all criteria (ordinal)",
            "accept agreement, simulated grader pairs",
            "accept Cohen's kappa, simulated grader pairs",
            "accept agreement, panel vs simulated grader",
            "accept Cohen's kappa, panel vs simulated grader",
            "panel bias in Q, A3$-$A1",
            "panel bias in accept, A3$-$A1",
            "H1 A3$-$A1, simulated graders",
            "H1 A3$-$A1, panel (same packages)",
            "H1 A3$-$A1, panel minus simulated graders",
        ],
        "reliability": ["simulated graders"] * 2 + ["panel vs simulated graders"] * 2,
        "acceptance": ["simulated grader pairs"] * 2 + ["panel vs simulated grader"] * 2,
        "bias header": ["Panel", "Simulated graders"],
        "h1": ["simulated graders", "panel", "panel minus simulated graders"],
        "acceptance caption": "Simulated grader pairs: every pair of the simulated graders grading a package; "
        "panel vs simulated grader: the panel's majority vote",
        "reliability caption": "Panel vs simulated graders: the panel's value",
    },
    "experts": {
        "summary": [
            "alpha among experts, Q (interval)",
            "alpha among experts, all criteria (ordinal)",
            "alpha panel vs experts, Q (interval)",
            "alpha panel vs experts, all criteria (ordinal)",
            "accept agreement, expert-expert",
            "accept Cohen's kappa, expert-expert",
            "accept agreement, panel-expert",
            "accept Cohen's kappa, panel-expert",
            "panel bias in Q, A3$-$A1",
            "panel bias in accept, A3$-$A1",
            "H1 A3$-$A1, experts",
            "H1 A3$-$A1, panel (same packages)",
            "H1 A3$-$A1, panel minus experts",
        ],
        "reliability": ["experts"] * 2 + ["panel-experts"] * 2,
        "acceptance": ["expert-expert"] * 2 + ["panel-expert"] * 2,
        "bias header": ["Panel", "Experts"],
        "h1": ["experts", "panel", "panel minus experts"],
        "acceptance caption": "Expert-expert: every pair of the experts grading a package; panel-expert: the "
        "panel's majority vote",
        "reliability caption": "Panel-experts: the panel's value",
    },
}


@pytest.mark.parametrize("source", sorted(TABLE_LABELS))
def test_a_waves_tables_name_their_rows_and_columns_by_who_graded(source, tmp_path):
    want = TABLE_LABELS[source]
    grades, panel = _synthetic(8)
    grades["source"] = source
    r = rp.grading_report(grades, panel, seed=1, B=100, criteria=CRITERIA)
    written = rp.write_grading_outputs(r, tmp_path / "tables", tmp_path / "gen")
    for name in ("summary", "reliability", "acceptance", "h1"):
        assert _table_labels(written[f"grading_{name}_table.tex"])[1] == want[name], name
    assert _table_labels(written["grading_bias_table.tex"])[0][6:8] == want["bias header"]
    # The captions explain the rows by the labels the rows carry.
    for name in ("acceptance", "reliability"):
        assert want[f"{name} caption"] in written[f"grading_{name}_table.tex"].read_text(encoding="utf-8"), name
    tabulars = {
        name: _tabular(written[f"grading_{name}_table.tex"]).lower()
        for name in ("summary", "reliability", "acceptance", "bias", "bias_contrast", "h1", "coverage")
    }
    if source == "simulated":
        # No header, row or note of any table names experts: read alone, nothing reads as people.
        assert [name for name, cells in tabulars.items() if "expert" in cells] == []
    else:
        assert [name for name, cells in tabulars.items() if "simulated" in cells] == []
    # The CSV tables keep the keys the code and the export read, whoever graded.
    assert set(pd.read_csv(written["grading_reliability.csv"])["coders"]) == {"experts", "panel-experts"}
