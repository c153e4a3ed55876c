"""Benchmark: the vectorised cluster bootstrap and sign-flip test against scipy.stats doing the same work.

The work is the resampling the primary and sensitivity stages do on one
10 x 5 x 3 study (a SIMULATED synthetic run table): percentile bootstrap
intervals (B = 5,000) for every scenario-level statistic (acceptance per
arm, the four contrasts at each q of the grid, the budget and human-time
frontiers) and the exact sign-flip test (2^10 sign vectors) for every
contrast at each q. The reference is ``scipy.stats.bootstrap`` and
``scipy.stats.permutation_test`` (vectorised statistic), one call per
statistic, in the same process. Answers are compared: the p-values must be
equal, and each interval end must lie within scipy's bootstrap quantiles at
the nominal level plus or minus four Monte Carlo standard errors of the
difference of two independent estimates of a level, sqrt(2a(1-a)/B).

Run: ``.venv/bin/python benchmarks/bench_stats.py``.
"""

from __future__ import annotations

import os

# Small matrix products: one BLAS thread avoids thread start-up and contention on a
# shared 2-core machine. It applies to both sides (scipy's resampling uses no BLAS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time

import numpy as np
from scipy import stats

from pilot import protocol
from pilot.simulated import synthetic
from pilot.stats import estimators, resampling
from pilot.stats.estimators import Layout


def _mean(x, axis):
    return np.mean(x, axis=axis)


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def workload(seed: int = 20260415) -> tuple[np.ndarray, np.ndarray]:
    """Scenario-level columns to bootstrap (J, K) and the contrast columns to test (J, C)."""
    study = protocol.study()
    df = synthetic.generate_runtable(seed, sensitivity_wave=False)
    layout = Layout.of(df, study.arms)
    boot_cols, test_cols = [], []
    for q in study["outcomes"]["q_grid"]:
        means = layout.means(estimators.acceptance_values(df, q))
        d = estimators.contrast_differences(means, layout, study.contrasts)
        test_cols.append(d)
        boot_cols.append(d)
        if q == study.q:
            boot_cols.append(means)
    S = estimators.acceptance_values(df, study.q)
    for grid, resource in (
        (study.grid("budget_usd"), df["cost_usd"].to_numpy()),
        (study.grid("human_minutes"), df["H_minutes"].to_numpy()),
    ):
        for b in grid:
            boot_cols.append(layout.means(np.where(np.isnan(S), np.nan, (S == 1) & (resource <= b + 1e-9))))
    X = np.concatenate(boot_cols, axis=1)
    D = np.concatenate(test_cols, axis=1)
    return X[:, ~np.isnan(X).any(axis=0)], D[:, ~np.isnan(D).any(axis=0)]


def ours(X: np.ndarray, D: np.ndarray, B: int, n_perm: int, seed: int):
    counts = resampling.bootstrap_counts(np.random.default_rng(seed), X.shape[0], B)
    lo, hi = resampling.percentile_interval(resampling.bootstrap_means(X, counts))
    p = resampling.sign_flip_test(D, n_permutations=n_perm).p_value
    return lo, hi, p


def reference(X: np.ndarray, D: np.ndarray, B: int, n_perm: int, seed: int):
    rng = np.random.default_rng(seed + 1)
    lo, hi, dists = [], [], []
    for k in range(X.shape[1]):
        r = stats.bootstrap((X[:, k],), np.mean, n_resamples=B, method="percentile", rng=rng)
        lo.append(r.confidence_interval.low)
        hi.append(r.confidence_interval.high)
        dists.append(r.bootstrap_distribution)
    p = [
        stats.permutation_test(
            (D[:, c],), _mean, permutation_type="samples", n_resamples=n_perm, vectorized=True
        ).pvalue
        for c in range(D.shape[1])
    ]
    return np.array(lo), np.array(hi), np.array(p), dists


def agree(ours_out, ref_out, B: int) -> tuple[bool, bool, float]:
    lo, hi, p = ours_out
    rlo, rhi, rp, dists = ref_out
    p_equal = bool(np.array_equal(p, rp))
    ok = True
    for k, dist in enumerate(dists):
        for value, a in ((lo[k], 0.025), (hi[k], 0.975)):
            tol = 4 * np.sqrt(2 * a * (1 - a) / B)
            ok &= bool(np.quantile(dist, a - tol) - 1e-12 <= value <= np.quantile(dist, a + tol) + 1e-12)
    return p_equal, ok, float(max(np.abs(lo - rlo).max(), np.abs(hi - rhi).max()))


def main() -> None:
    study = protocol.study()
    B, n_perm = int(study["inference"]["bootstrap_resamples"]), int(study["inference"]["permutations"])
    X, D = workload()
    print(
        f"workload: {X.shape[1]} bootstrapped statistics and {D.shape[1]} sign-flip tests over "
        f"J={X.shape[0]} scenarios; B={B}, permutations={n_perm} (exact: 2^{X.shape[0]})"
    )

    t_ours, out = best_of(lambda: ours(X, D, B, n_perm, 1))
    t_ref, ref = best_of(lambda: reference(X, D, B, n_perm, 1), repeat=1)
    p_equal, ci_ok, max_diff = agree(out, ref, B)
    print(
        f"all statistics    pilot.stats {t_ours * 1e3:8.1f} ms   scipy.stats {t_ref * 1e3:8.1f} ms   ratio "
        f"{t_ref / t_ours:6.1f}x   p-values equal: {p_equal}   intervals within MC tolerance: {ci_ok} (max "
        f"|diff| {max_diff:.3f})"
    )

    x1, d1 = X[:, [0]], D[:, [0]]
    t1, o1 = best_of(lambda: ours(x1, d1, B, n_perm, 2), repeat=20)
    r1t, r1 = best_of(lambda: reference(x1, d1, B, n_perm, 2), repeat=5)
    p_equal1, ok1, diff1 = agree(o1, r1, B)
    print(
        f"one contrast      pilot.stats {t1 * 1e3:8.2f} ms   scipy.stats {r1t * 1e3:8.2f} ms   ratio "
        f"{r1t / t1:6.1f}x   p-values equal: {p_equal1}   intervals within MC tolerance: {ok1} (max |diff| "
        f"{diff1:.3f})"
    )
    stage_computations()  # warm the imports (statsmodels, lifelines, krippendorff)
    print(
        "primary + sensitivity computations, 10 x 5 x 3 study (table generation, validation, every "
        f"estimate, test and H1-H7, separation checks, exploratory Firth fit): {stage_computations():.2f} "
        "s (budget 10 s)"
    )


def stage_computations(seed: int = 20260415) -> float:
    """Wall time of every computation of the primary and sensitivity stages on a 10 x 5 x 3 study (budget: 10 s)."""
    from pilot import runtable
    from pilot.stats import stage_computations as stages

    t = time.perf_counter()
    df = runtable.validate_runtable(synthetic.generate_runtable(seed))
    stages.primary_stage(df, seed=seed)
    stages.sensitivity_stage(df, seed=seed)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
