"""Speed of the vectorised power simulation against a plain loop over scipy.stats.

Reference: one simulated study at a time, drawing the two arms with
``scipy.stats.binom.rvs`` and calling ``ttest_1samp``, ``wilcoxon``,
``binomtest`` and ``permutation_test`` (exact enumeration when 2^J <= 20,000,
else 20,000 seeded random sign vectors, as preregistered). Both do the same
per-study work over the same grid cells; the reference runs fewer studies per
cell, so the ratio compares time per simulated study. Prints the ratio and
the wall time of the whole grid at the preregistered number of studies.

    .venv/bin/python benchmarks/bench_power.py [--loop-sims 30]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from scipy import special, stats

from pilot.stats import power as pw


def loop_reference(design: pw.PowerDesign, cells, sims: int, seed: int) -> dict[str, float]:
    """Rejection rate per test, pooled over cells, one study and one scipy call at a time."""
    rng = np.random.default_rng(seed)
    rejections = dict.fromkeys(pw.TESTS, 0)
    for J, R, delta in cells:
        shift = pw.logit_shift(delta, design.baseline, design.scenario_sd_logit, pw.TABLE_READING)
        for _ in range(sims):
            b = rng.normal(0.0, design.scenario_sd_logit, J)
            logit0 = special.logit(design.baseline) + b
            k0 = stats.binom.rvs(R, special.expit(logit0), random_state=rng)
            k1 = stats.binom.rvs(R, special.expit(logit0 + shift), random_state=rng)
            d = (k1 - k0) / R
            nonzero = int(np.count_nonzero(d))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                p_t = stats.ttest_1samp(d, 0.0).pvalue
            p_w = stats.wilcoxon(d).pvalue if nonzero else 1.0
            p_s = stats.binomtest(int((d > 0).sum()), nonzero).pvalue if nonzero else 1.0
            resamples = np.inf if 2**J <= 20_000 else 20_000
            p_f = stats.permutation_test(
                (d,), np.mean, permutation_type="samples", n_resamples=resamples, rng=rng
            ).pvalue
            for test, p in (("paired-t", p_t), ("wilcoxon", p_w), ("sign", p_s), ("sign-flip", p_f)):
                rejections[test] += int(np.nan_to_num(p, nan=1.0) <= design.alpha)
    return {t: r / (sims * len(cells)) for t, r in rejections.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop-sims", type=int, default=30, help="studies per cell in the scipy loop")
    args = parser.parse_args()

    design = pw.PowerDesign.from_study()
    cells = design.grid_cells()
    n = design.simulations

    start = time.perf_counter()
    vec = pw.simulate_power(design, cells=cells, simulations=n)
    t_vec = time.perf_counter() - start

    start = time.perf_counter()
    ref = loop_reference(design, cells, args.loop_sims, design.seed)
    t_loop = time.perf_counter() - start

    per_vec = t_vec / (n * len(cells))
    per_loop = t_loop / (args.loop_sims * len(cells))
    print(f"cells: {len(cells)} (the preregistered grid), tests: {', '.join(pw.TESTS)}")
    print(f"vectorised numpy : {n:>6} studies/cell  {t_vec:8.2f} s  {per_vec * 1e6:10.1f} us/study")
    print(f"scipy.stats loop : {args.loop_sims:>6} studies/cell  {t_loop:8.2f} s  {per_loop * 1e6:10.1f} us/study")
    print(f"speed-up (time per study, loop / vectorised): {per_loop / per_vec:,.0f}x")
    print(f"whole grid at {n} studies per cell: {t_vec:.2f} s (target: under 60 s)")
    grid_mean = vec.summary.groupby("test").power.mean()
    print("grid-mean power, vectorised vs loop (loop Monte Carlo SE in brackets):")
    m = args.loop_sims * len(cells)
    for test in pw.TESTS:
        se = np.sqrt(ref[test] * (1 - ref[test]) / m)
        print(f"  {test:10s} {grid_mean[test]:.3f}  vs  {ref[test]:.3f} ({se:.3f})")


if __name__ == "__main__":
    main()
