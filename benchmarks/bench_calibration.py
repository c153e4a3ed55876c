"""Benchmark: the calibration's batch path against the per-study path it replaced.

Workload: SIMULATED studies of the design's shape (J scenarios x 5 arms x 3
repeats, J = 10 and 40) under the three calibration conditions, each analysed
as the primary stage analyses a run table: the four contrasts' estimates, 95%
percentile intervals from B = 5,000 scenario-cluster resamples, and sign-flip
p-values (20,000 sign vectors; exact enumeration when 2^J is at most that).

Two comparisons, each reference and batch in this process, one after the other:

1. Whole study (draw + analyse), per study and all three conditions.
   Reference, the per-study path: what the calibration did before it was
   vectorised, on today's functions: one run table per study and condition
   (``synthetic.generate_runtable``), its repeat means (``Layout``), and
   ``primary.contrast_table`` with the study's own resamples.
   Batch: the body of ``run_calibration``: ``draw_conditions`` for a block of
   studies, then ``analyse_studies`` with the stage's resamples for the seed.
2. Analysis only, on the same differences and the same resamples: each study
   alone with the float code the stage used before the integer path
   (``bootstrap_means``, ``percentile_interval``, ``sign_flip_test``) against
   ``analyse_studies``. The answers are compared: estimates and interval ends
   within 1e-12 (rounding), p-values equal except where the float path's
   rounding decided an exact tie (counted and printed).

Run: ``.venv/bin/python benchmarks/bench_calibration.py``.
"""

from __future__ import annotations

import os

# Small matrix products: one BLAS thread avoids thread start-up and contention on a shared
# 2-core machine (both sides use BLAS the same way).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time

import numpy as np

from pilot import protocol
from pilot.simulated import calibration, synthetic
from pilot.stats import batch_inference, estimators, primary, resampling
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings


def reference(y_float: np.ndarray, counts: np.ndarray, signs: np.ndarray, level: float) -> dict[str, np.ndarray]:
    """Each study alone, with the float code of the per-study stage (``y_float``: ``(n, J, C)`` differences)."""
    n, J, C = y_float.shape
    out = {k: np.empty((n, C)) for k in ("estimate", "ci_low", "ci_high", "p_value")}
    for i in range(n):
        d = y_float[i]
        out["estimate"][i] = resampling.weighted_mean(d)
        out["ci_low"][i], out["ci_high"][i] = resampling.percentile_interval(
            resampling.bootstrap_means(d, counts), level
        )
        out["p_value"][i] = resampling.sign_flip_test(d, signs=signs).p_value
    return out


def per_study_path(J: int, n: int, seed: int) -> None:
    """The calibration before vectorisation: one run table per study and condition, analysed alone."""
    study = protocol.study()
    model = synthetic.SyntheticModel.load()
    settings = InferenceSettings.from_study(seed, study)
    specs = synthetic.study_scenarios(seed, J, model, study)
    for i in range(n):
        for m in calibration.condition_models(model, study).values():
            df = synthetic.generate_runtable(
                seed * 1000 + i, repeats=3, model=m, sensitivity_wave=False, study=study, scenarios=specs
            )
            layout = Layout.of(df, study.arms)
            means = layout.means(estimators.acceptance_values(df, study.q))
            primary.contrast_table(
                means,
                layout,
                study.contrasts,
                layout.weights("equal"),
                InferenceSettings(settings.B, settings.n_permutations, seed * 1000 + i, settings.level),
                adjustment=None,
            )


def batch_path(J: int, n: int, seed: int) -> None:
    """The body of run_calibration for one block of n studies."""
    study = protocol.study()
    model = synthetic.SyntheticModel.load()
    settings = InferenceSettings.from_study(seed, study)
    models = calibration.condition_models(model, study)
    specs = synthetic.study_scenarios(seed, J, model, study)
    L = batch_inference.grid_denominator(3)
    counts = resampling.bootstrap_counts(np.random.default_rng([seed, 2]), J, settings.B)
    signs, exact = resampling.sign_vectors(J, settings.n_permutations, np.random.default_rng([seed, 1]))
    S = calibration.draw_conditions(np.random.default_rng([seed, 0]), models, specs, n, 3, study)
    y = np.concatenate(
        [
            batch_inference.on_grid(calibration.scenario_differences(S[c], study.arms, study.contrasts), L)
            for c in models
        ],
        axis=2,
    )
    calibration.analyse_studies(y, L, counts, signs, settings.level, exact=exact)


def whole(J: int, n_ref: int, n_batch: int, seed: int = 20260417) -> tuple[float, float]:
    batch_path(J, 5, seed)  # loads the model and scenarios once, for both sides
    t = time.perf_counter()
    per_study_path(J, n_ref, seed)
    t_ref = (time.perf_counter() - t) / n_ref
    t = time.perf_counter()
    batch_path(J, n_batch, seed)
    return t_ref, (time.perf_counter() - t) / n_batch


def analysis_only(J: int, n: int, seed: int = 20260417) -> dict[str, float]:
    study = protocol.study()
    model = synthetic.SyntheticModel.load()
    settings = InferenceSettings.from_study(seed, study)
    models = calibration.condition_models(model, study)
    specs = synthetic.study_scenarios(seed, J, model, study)
    S = calibration.draw_conditions(np.random.default_rng([seed, 0]), models, specs, n, 3, study)
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
    return {"ref_s": t_ref / n, "batch_s": t_batch / n, "p_differs": ties, "p_checked": got["p_value"].size}


def main() -> int:
    print("1. Whole study, three conditions (per study)")
    print(f"{'J':>3} {'per-study path':>15} {'batch':>10} {'ratio':>7}")
    for J, n_ref, n_batch in ((10, 30, 1000), (40, 10, 500)):
        ref, batch = whole(J, n_ref, n_batch)
        print(
            f"{J:>3} {ref * 1e3:>12.1f} ms {batch * 1e3:>7.2f} ms {ref / batch:>6.1f}x   ({n_ref} and "
            f"{n_batch} studies)"
        )
    print("2. Analysis only, same differences and resamples (per study, three conditions)")
    print(
        f"{'J':>3} {'float per study':>15} {'batch':>10} {'ratio':>7}  p-values differing (exact ties the "
        "float path rounded)"
    )
    for J, n in ((10, 300), (40, 100)):
        r = analysis_only(J, n)
        print(
            f"{J:>3} {r['ref_s'] * 1e3:>12.2f} ms {r['batch_s'] * 1e3:>7.2f} ms "
            f"{r['ref_s'] / r['batch_s']:>6.1f}x  {r['p_differs']} of {r['p_checked']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
