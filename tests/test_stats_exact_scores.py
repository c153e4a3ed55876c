"""Exact scores: every grade vector of every rubric, at every q of the grid, gives the S that exact arithmetic gives.

The reference is integer arithmetic: with weights in thousandths W_i (M = sum W_i) a
judge's score is 25 N / M with N = sum W_i g_i, and Q over k judges meets q exactly
when 25 (N_1 + ... + N_k) >= q k M.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from pilot import outcomes, paths, protocol, runtable
from pilot.judges import rubric

SCENARIOS = runtable.known_scenarios()


def _criteria(sid: str) -> list[rubric.Criterion]:
    return rubric.criteria_from(protocol.read_yaml(paths.SCENARIOS_DIR / sid / "rubric.yml"), sid)


def _thousandths(crit: list[rubric.Criterion]) -> np.ndarray:
    w = [rubric.exact_weight(c.weight) * 1000 for c in crit]
    assert all(x.denominator == 1 for x in w)
    return np.array([int(x) for x in w])


def _grid() -> list[int]:
    study = protocol.study()
    return sorted({int(q) for q in study["outcomes"]["q_grid"]} | {int(study.q)})


def test_the_known_case_is_exactly_seventy():
    crit = _criteria("LEGAL-01")
    grades = dict(zip([c.id for c in crit], (3, 3, 1, 3, 4), strict=True))
    assert rubric.exact_score(grades, crit) == 70
    assert rubric.weighted_score(grades, crit) == 70.0
    # The float mean of float weights lands below 70: the defect this module prevents.
    naive = 100.0 * sum(c.weight * grades[c.id] for c in crit) / sum(c.weight for c in crit) / 4
    assert naive < 70
    assert (
        outcomes.acceptance(True, False, outcomes.exact_quality({"a": rubric.weighted_score(grades, crit)}), 70) is True
    )


@pytest.mark.parametrize("sid", SCENARIOS)
def test_every_grade_vector_single_judge(sid):
    crit = _criteria(sid)
    W = _thousandths(crit)
    M = int(W.sum())
    ids = [c.id for c in crit]
    vectors = np.array(list(itertools.product(range(rubric.MAX_SCORE + 1), repeat=len(crit))))
    N = vectors @ W
    stored = np.empty(len(vectors))
    naive_flips = 0
    for i, g in enumerate(vectors):
        grades = dict(zip(ids, map(int, g), strict=True))
        exact = rubric.exact_score(grades, crit)
        assert exact == Fraction(25 * int(N[i]), M)
        score = rubric.weighted_score(grades, crit)
        assert outcomes.exact_judge_score(score) == exact
        stored[i] = outcomes.quality({"j": score})
        naive = 100.0 * sum(c.weight * grades[c.id] for c in crit) / sum(c.weight for c in crit) / 4
        naive_flips += sum((naive >= q) != (25 * int(N[i]) >= q * M) for q in _grid())
    for q in _grid():
        expected = 25 * N >= q * M
        got = runtable.acceptance(np.ones(len(N)), np.zeros(len(N)), stored, q)
        np.testing.assert_array_equal(got.astype(bool), expected, err_msg=f"{sid} at q={q}")
        # The run-row path: exact Q through outcomes.acceptance.
        for i in np.flatnonzero(np.abs(25 * N - q * M) <= M):  # the vectors at or next to the threshold
            Qx = outcomes.exact_quality({"j": float(Fraction(25 * int(N[i]), M))})
            assert outcomes.acceptance(True, False, Qx, q) == bool(expected[i])
    if sid in ("LEGAL-01", "PROC-01"):
        assert naive_flips > 0  # the float computation gets some of these wrong; the exact one gets none


@pytest.mark.parametrize("sid", SCENARIOS)
def test_every_panel_total_up_to_three_judges(sid):
    """Q over k judges depends on the grades only through N_1 + ... + N_k: every reachable total is checked."""
    crit = _criteria(sid)
    W = _thousandths(crit)
    M = int(W.sum())
    singles = sorted({int(n) for n in np.array(list(itertools.product(range(5), repeat=len(crit)))) @ W})
    for k in (1, 2, 3):
        reps: dict[int, tuple[int, ...]] = {}
        for combo in itertools.combinations_with_replacement(singles, k):
            reps.setdefault(sum(combo), combo)
        totals = sorted(reps)
        stored = []
        for T in totals:
            scores = {f"j{i}": float(Fraction(25 * n, M)) for i, n in enumerate(reps[T])}
            Qx = outcomes.exact_quality(scores)
            assert Qx == Fraction(25 * T, k * M)
            stored.append(outcomes.stored_quality(Qx))
            assert Qx - Fraction(1, 10**6) < Fraction(stored[-1]) <= Qx
        T = np.array(totals)
        for q in _grid():
            expected = 25 * T >= q * k * M
            got = runtable.acceptance(np.ones(len(T)), np.zeros(len(T)), np.array(stored), q).astype(bool)
            np.testing.assert_array_equal(got, expected, err_msg=f"{sid}, {k} judges, q={q}")
            for t in T[np.abs(25 * T - q * k * M) <= k * M]:
                assert outcomes.acceptance(True, False, Fraction(25 * int(t), k * M), q) == bool(25 * t >= q * k * M)


def test_float_noise_in_an_old_table_cannot_flip_s():
    Q = np.array([69.99999999999999, 70.0, 70.00000000000001, 89.99999999999999, 69.999999])
    np.testing.assert_array_equal(runtable.acceptance(np.ones(5), np.zeros(5), Q, 70), [1, 1, 1, 1, 0])
    assert runtable.acceptance([1], [0], [89.99999999999999], 90)[0] == 1


def test_a_rubric_weight_with_more_than_three_decimals_is_refused():
    crit = [{"id": "a", "weight": 0.3333, "description": "x", "anchors": {0: "a", 2: "b", 4: "c"}}]
    with pytest.raises(rubric.RubricError, match="at most 3 decimals"):
        rubric.criteria_from(crit)


def test_a_score_that_is_not_a_rubric_score_is_refused():
    with pytest.raises(ValueError, match="not a rubric score"):
        outcomes.exact_judge_score(71.23456789)


def test_kaplan_meier_median_is_exact_where_floats_move_it_one_event_late():
    from lifelines import KaplanMeierFitter

    from pilot.stats import sensitivity

    # Six runs completing at minutes 1..6: S(3) = 5/6 * 4/5 * 3/4 = 1/2 exactly, so the median is 3.
    t, ev = np.arange(1.0, 7.0), np.ones(6, bool)
    median, at = sensitivity.km_exact(t, ev, [2.5, 3.0, 6.0])
    assert median == 3.0 and at == [pytest.approx(4 / 6), 0.5, 0.0]
    assert KaplanMeierFitter().fit(t, ev).median_survival_time_ == 4.0  # the float product lands above 1/2
    # Elsewhere both agree with lifelines (reference implementation).
    rng = np.random.default_rng(0)
    for _ in range(20):
        tt = rng.uniform(1, 30, 25).round(1)
        ee = rng.random(25) < 0.7
        kmf = KaplanMeierFitter().fit(tt, ee)
        _, at = sensitivity.km_exact(tt, ee, [5.0, 10.0, 20.0])
        np.testing.assert_allclose(at, kmf.survival_function_at_times([5.0, 10.0, 20.0]).to_numpy(), atol=1e-12)


def test_agreement_sees_equal_scores_as_ties():
    from pilot.simulated import synthetic
    from pilot.stats import sensitivity

    df = runtable.validate_runtable(synthetic.generate_runtable(4, n_scenarios=5))
    noisy = df.copy()
    for c in ("Q_J1", "Q_J2", "Q_J3"):
        noisy[c] = noisy[c] + np.where(np.arange(len(df)) % 2, 1e-14, -1e-14)
    a = sensitivity.judge_agreement(df).table.set_index(["measure", "judges"])["value"]
    b = sensitivity.judge_agreement(noisy).table.set_index(["measure", "judges"])["value"]
    pd.testing.assert_series_equal(a, b)
