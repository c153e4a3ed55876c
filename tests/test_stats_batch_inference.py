"""The exact, many-studies contrast inference against the per-study stage and the float reference."""

from __future__ import annotations

import numpy as np
import pytest

from pilot import protocol
from pilot.simulated import calibration, synthetic
from pilot.stats import batch_inference, primary, resampling
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings

FIELDS = ("estimate", "ci_low", "ci_high", "p_value", "n_scenarios")


def _stage(S_i: np.ndarray, J: int, counts_i: np.ndarray, signs: np.ndarray, B: int, P: int) -> dict[str, np.ndarray]:
    """One study through primary.contrast_table, the primary stage's own function."""
    study = protocol.study()
    layout = Layout(
        [f"S{j}" for j in range(J)], study.arms, [""] * J, np.ones(J), np.ones(J), np.zeros(1, int), np.zeros(1, int)
    )
    scored = (~np.isnan(S_i)).sum(axis=2)
    means = np.where(scored > 0, np.nansum(S_i, axis=2) / np.maximum(scored, 1), np.nan)
    tab, _ = primary.contrast_table(
        means, layout, study.contrasts, np.ones(J), InferenceSettings(B, P, 0), counts=counts_i, signs=signs
    )
    return {k: tab[k].to_numpy(dtype=float) for k in FIELDS}


@pytest.mark.parametrize("seed", range(6))
def test_a_block_of_studies_gets_exactly_what_the_stage_gives_each(seed):
    """Random studies (2 to 40 scenarios, 1 to 3 repeats, missing scores, arms at 0%): the batch
    path's numbers are identical, study by study, to primary.contrast_table with the same draws."""
    study = protocol.study()
    model = synthetic.SyntheticModel.load()
    rng = np.random.default_rng(seed)
    J = [2, 5, 9, 12, 40, 7][seed]
    R = [1, 2, 3, 3, 3, 2][seed]
    P = [20_000, 20_000, 300, 20_000, 2_000, 64][seed]  # exact enumeration for J <= 14 at 20,000; random otherwise
    n, B = 12, 400
    S = calibration.draw_acceptance(rng, model, synthetic.study_scenarios(seed, J, model, study), n, R, study)
    S[rng.random(S.shape) < 0.15] = np.nan
    S[: n // 3, :, 1, :] = 0.0  # an arm at 0% in some studies
    S[0, :, 3, :] = np.nan  # a study without a scored run in A3
    counts = np.stack([resampling.bootstrap_counts(rng, J, B) for _ in range(n)])
    signs, exact = resampling.sign_vectors(J, P, rng)
    res = calibration.analyse_block(S, study.arms, study.contrasts, counts, signs, 0.95)
    # The calibration's way: one count matrix for every study (the stage's own for its seed).
    shared = calibration.analyse_block(S, study.arms, study.contrasts, counts[0], signs, 0.95)
    for i in range(n):
        one = _stage(S[i], J, counts[i], signs, B, P)
        same = _stage(S[i], J, counts[0], signs, B, P)
        for k in FIELDS:
            np.testing.assert_array_equal(res[k][i], one[k], err_msg=f"study {i}, {k}")
            np.testing.assert_array_equal(shared[k][i], same[k], err_msg=f"study {i}, {k} (shared counts)")


@pytest.mark.parametrize("seed", range(4))
def test_the_exact_path_is_the_float_reference_where_floats_are_exact(seed):
    """With repeat means in halves (dyadic, so float sums are exact) the integer path and the float
    implementation (resampling.bootstrap_means / percentile_interval / sign_flip_test) agree exactly."""
    rng = np.random.default_rng(100 + seed)
    J, K, B = [3, 8, 15, 30][seed], 4, 1_000
    d = rng.integers(-2, 3, size=(J, K)) / 2.0
    d[rng.random(d.shape) < 0.1] = np.nan
    counts = resampling.bootstrap_counts(rng, J, B)
    signs, exact = resampling.sign_vectors(J, 5_000, rng)
    res = batch_inference.contrast_inference(
        batch_inference.on_grid(d, 2)[None], 2, counts[None], signs, 0.95, exact=exact
    )
    reps = resampling.bootstrap_means(d, counts)
    lo, hi = resampling.percentile_interval(reps, 0.95)
    test = resampling.sign_flip_test(d, signs=signs)
    np.testing.assert_allclose(res["estimate"][0], resampling.weighted_mean(d), rtol=1e-15)
    np.testing.assert_allclose(res["ci_low"][0], lo, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(res["ci_high"][0], hi, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(res["p_value"][0], test.p_value)


def test_a_tie_is_a_tie_in_thirds():
    """Differences (-2, 1, 3, -2)/3 sum to exactly 0, so p = 1 (every sign vector ties or beats it on
    one side); summed in floats they give 1.1e-16 and the float test returns 0.875."""
    d = np.array([-2.0, 1.0, 3.0, -2.0]) / 3
    signs, exact = resampling.sign_vectors(4, 20_000, np.random.default_rng(0))
    assert exact and resampling.sign_flip_test(d, signs=signs).p_value[0] == 0.875  # the float reference
    res = batch_inference.contrast_inference(
        batch_inference.on_grid(d[:, None], 3)[None], 3, np.ones((1, 10, 4)), signs, 0.95, exact=True
    )
    assert res["p_value"][0, 0] == 1.0 and res["estimate"][0, 0] == 0.0
    # The stage itself now uses the exact path for such data.
    study = protocol.study()
    layout = Layout(
        ["a", "b", "c", "d"], study.arms, [""] * 4, np.ones(4), np.ones(4), np.zeros(1, int), np.zeros(1, int)
    )
    means = np.zeros((4, len(study.arms)))
    t, c = study.contrasts[0]
    means[:, layout.arm_index(t)] = np.array([1, 1, 3, 1]) / 3
    means[:, layout.arm_index(c)] = np.array([1, 0, 0, 1])
    d_stage = means[:, layout.arm_index(t)] - means[:, layout.arm_index(c)]
    assert resampling.sign_flip_test(d_stage, signs=signs).p_value[0] < 1  # what the float test made of it
    tab, _ = primary.contrast_table(means, layout, study.contrasts, np.ones(4), InferenceSettings(200, 20_000, 0))
    assert tab.p_value.iloc[0] == 1.0 and tab.estimate.iloc[0] == 0.0


def test_a_zero_width_interval_is_exactly_zero_width():
    """Every scenario difference 1/3: every resampled mean is 1/3 exactly, so the interval has zero width."""
    d = np.full((7, 1), 1 / 3)
    counts = resampling.bootstrap_counts(np.random.default_rng(4), 7, 2_000)
    signs, exact = resampling.sign_vectors(7, 20_000, np.random.default_rng(5))
    res = batch_inference.contrast_inference(
        batch_inference.on_grid(d, 3)[None], 3, counts[None], signs, 0.95, exact=exact
    )
    assert res["ci_low"][0, 0] == res["ci_high"][0, 0] == 1 / 3


def test_grid_detection_and_refusal():
    assert batch_inference.grid_of(np.array([0.0, 1.0, -1.0])) == 1
    assert batch_inference.grid_of(np.array([0.5, np.nan])) == 2
    assert batch_inference.grid_of(np.array([1 / 3, 2 / 3 - 1 / 2])) == 6
    assert batch_inference.grid_of(np.array([0.123])) is None
    with pytest.raises(ValueError, match="not multiples of 1/3"):
        batch_inference.on_grid(np.array([0.25]), 3)
    # Weighted (not equal) scenario weights stay on the float path: the stage still works.
    study = protocol.study()
    layout = Layout(["a", "b", "c"], study.arms, [""] * 3, np.ones(3), np.ones(3), np.zeros(1, int), np.zeros(1, int))
    means = np.random.default_rng(0).integers(0, 2, size=(3, len(study.arms))).astype(float)
    tab, _ = primary.contrast_table(
        means, layout, study.contrasts, np.array([1.0, 2.0, 3.0]), InferenceSettings(200, 20_000, 0)
    )
    assert np.isfinite(tab.estimate).all()
