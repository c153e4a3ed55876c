"""Percentile intervals over replicates that may be infinite: ∞ stays ∞, against numpy's own percentile where both are
defined."""

from __future__ import annotations

import numpy as np
import pytest

from pilot.stats.resampling import percentile_interval_infinite


def test_finite_replicates_match_numpy_linear_percentile():
    rng = np.random.default_rng(3)
    reps = rng.gamma(2.0, size=(997, 4))
    lo, hi = percentile_interval_infinite(reps, 0.95)
    np.testing.assert_allclose(lo, np.percentile(reps, 2.5, axis=0), rtol=1e-12)
    np.testing.assert_allclose(hi, np.percentile(reps, 97.5, axis=0), rtol=1e-12)


def test_an_end_touching_an_infinite_replicate_is_infinite():
    # 40 replicates 1..39 and one infinite: the 97.5% point sits at position 0.975 * 39 = 38.025,
    # 2.5% of the way from the 39th value (39) to the infinite one, so the upper end is infinite, not a huge number.
    reps = np.concatenate([np.arange(1.0, 40.0), [np.inf]])[:, None]
    lo, hi = percentile_interval_infinite(reps, 0.95)
    assert np.isinf(hi[0]) and hi[0] > 0
    assert lo[0] == pytest.approx(
        np.percentile(np.arange(1.0, 40.0).tolist() + [1e300], 2.5), rel=1e-12
    )  # the lower end never sees the infinite replicate
    # Every replicate infinite: both ends infinite, never NaN.
    lo, hi = percentile_interval_infinite(np.full((10, 1), np.inf), 0.95)
    assert np.isinf(lo[0]) and np.isinf(hi[0])


def test_an_exact_order_statistic_next_to_infinity_stays_finite():
    # 41 replicates, two infinite: the 97.5% point is position 39.0 exactly, the 40th value (40), with no weight on
    # infinity.
    reps = np.concatenate([np.arange(1.0, 40.0), [40.0, np.inf]])[:, None]
    _, hi = percentile_interval_infinite(reps, 0.95)
    assert hi[0] == 40.0
