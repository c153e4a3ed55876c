"""Benchmark: the calibration's batch analysis of many studies against the per-study path.

Workload: SIMULATED studies of the design's shape (J scenarios x 5 arms x 3
repeats) under the three calibration conditions, each analysed as the primary
stage analyses a run table: the four contrasts' estimates, 95% percentile
intervals from B = 5,000 scenario-cluster resamples, and sign-flip p-values
(20,000 sign vectors; exact enumeration when 2^J is at most that).

- Reference (the per-study path): each study analysed alone, with the stage's
  float code as it stood before the integer path (``bootstrap_means``,
  ``percentile_interval``, ``sign_flip_test``), one study at a time (its
  three conditions' four contrasts in one call), as the calibration analysed
  studies before it was vectorised.
- Batch: :func:`pilot.stats.calibration.analyse_studies`, the code
  ``run_calibration`` runs, on the same studies.

Both use the primary stage's resamples and sign vectors for the seed (the
calibration analyses every study with them); drawing the runs is not timed.

Both run in this process, one after the other, on the same data; the ratio is
reference time over batch time. The answers are compared: estimates and
interval ends within 1e-12 (rounding), p-values equal except where the float
path's rounding decided an exact tie (counted and printed).

Run: ``.venv/bin/python benchmarks/bench_calibration.py [studies_J10] [studies_J40]``.
"""

from __future__ import annotations

import os

# Small matrix products: one BLAS thread avoids thread start-up and contention on a shared
# 2-core machine (both sides use BLAS the same way).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from pilot import protocol  # noqa: E402
from pilot.stats import batch_inference, calibration, resampling, synthetic  # noqa: E402
from pilot.stats.primary import InferenceSettings  # noqa: E402


def reference(y_float: np.ndarray, counts: np.ndarray, signs: np.ndarray, level: float) -> dict[str, np.ndarray]:
    """Each study alone, with the float code of the per-study stage (``y_float``: ``(n, J, C)`` differences)."""
    n, J, C = y_float.shape
    out = {k: np.empty((n, C)) for k in ("estimate", "ci_low", "ci_high", "p_value")}
    for i in range(n):
        c = counts
        d = y_float[i]
        out["estimate"][i] = resampling.weighted_mean(d)
        out["ci_low"][i], out["ci_high"][i] = resampling.percentile_interval(resampling.bootstrap_means(d, c), level)
        out["p_value"][i] = resampling.sign_flip_test(d, signs=signs).p_value
    return out


def bench(J: int, n: int, seed: int = 20260417) -> dict[str, float]:
    study = protocol.study()
    model = synthetic.SyntheticModel.load()
    settings = InferenceSettings.from_study(seed, study)
    models = calibration.condition_models(model, study)
    specs = synthetic.study_scenarios(seed, J, model, study)
    S = calibration.draw_conditions(np.random.default_rng([seed, 0, 0]), models, specs, n, 3, study)
    d = np.concatenate([calibration.scenario_differences(S[c], study.arms, study.contrasts) for c in models], axis=2)
    L = batch_inference.grid_denominator(3)
    counts = resampling.bootstrap_counts(np.random.default_rng([seed, 2]), J, settings.B)
    signs, exact = resampling.sign_vectors(J, settings.n_permutations, np.random.default_rng([seed, 1]))

    t = time.perf_counter()
    ref = reference(d, counts, signs, settings.level)
    t_ref = time.perf_counter() - t
    t = time.perf_counter()
    got = calibration.analyse_studies(batch_inference.on_grid(d, L), L, counts, signs, settings.level, exact=exact)
    t_batch = time.perf_counter() - t

    # The same answers: estimates and intervals up to rounding; p-values equal but for exact ties.
    for k in ("estimate", "ci_low", "ci_high"):
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-12, atol=1e-14, err_msg=k)
    ties = int((got["p_value"] != ref["p_value"]).sum())
    return {"J": J, "studies": n, "ref_s": t_ref, "batch_s": t_batch, "ratio": t_ref / t_batch, "p_differs": ties, "p_checked": got["p_value"].size}


def main(argv: list[str]) -> int:
    sizes = [(10, int(argv[0]) if argv else 300), (40, int(argv[1]) if len(argv) > 1 else 100)]
    print(f"{'J':>3} {'studies':>7} {'per-study path':>15} {'batch':>9} {'ratio':>7}  p-values differing (exact ties the float path rounded)")
    for J, n in sizes:
        r = bench(J, n)
        print(
            f"{J:>3} {n:>7} {r['ref_s'] / n * 1e3:>12.1f} ms {r['batch_s'] / n * 1e3:>6.2f} ms {r['ratio']:>6.1f}x  "
            f"{r['p_differs']} of {r['p_checked']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
