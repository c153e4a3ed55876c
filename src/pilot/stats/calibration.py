"""Calibration of the primary inference on the synthetic generator, whose truth is known.

Many SIMULATED studies are drawn from the generative model and each is
analysed exactly as the primary stage analyses a run table: repeat means,
the four contrasts, the scenario-cluster percentile bootstrap and the
sign-flip test, Holm over the secondary three. Three conditions: ``planted``
(the model as stated) measures how often each 95 per cent interval covers
the planted contrast; ``null`` (A3's parameters set to A1's) how often the
tests reject when there is no effect; ``tail`` (the primary control arm A1
pushed to near 0% acceptance) what the intervals do at the edge of the scale.

The work is vectorised over studies, in blocks: one call of the generator's
``draw_runs`` draws every run of a block, and each study of the block gets its
own bootstrap resamples (a ``(studies, B, J)`` count array), shared by the
same study of the other conditions. The sign vectors
are the exact enumeration of all ``2^J`` when that is at most the permutation
count (the same for every study, as in the stage); otherwise a block's studies
share one set of random sign vectors (each study's test is still the stage's
randomised test; only the studies' Monte Carlo draws are shared).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from pilot import protocol
from pilot.stats import estimators, primary, resampling, runtable, synthetic
from pilot.stats.primary import InferenceSettings

CONDITIONS = ("planted", "null", "tail")
# The tail condition: the control arm's completion logit lowered until its acceptance is near 0%.
TAIL_COMPLETION_LOGIT = -5.0


@dataclass
class CalibrationResult:
    """Per condition and contrast: coverage, rejection rate, bias, with Monte Carlo standard errors;
    ``studies`` holds every study's numbers."""

    summary: pd.DataFrame
    studies: pd.DataFrame


def condition_models(model: synthetic.SyntheticModel, study: protocol.Study) -> dict[str, synthetic.SyntheticModel]:
    treated, control = study.contrasts[0]
    params = copy.deepcopy(model.params)
    params["completion"]["arm"][control] = TAIL_COMPLETION_LOGIT
    tail = synthetic.SyntheticModel(params, source=f"{model.source} (tail: {control} near 0%)")
    return {"planted": model, "null": model.with_null(treated, control), "tail": tail}


def _arm_key(model: synthetic.SyntheticModel, arm: str) -> str:
    """What an arm's planted acceptance depends on: the shared parameters and the arm's own."""
    shared = {k: v for k, v in model.params.items() if k != "arms"}
    own = {f"{section}.{key}": model.params[section][key][arm] for section, key in synthetic._ARM_KEYED}
    for section, key in synthetic._ARM_KEYED:
        shared = {**shared, section: {**shared[section], key: None}}
    return repr((sorted(own.items()), repr(shared)))


def planted_truths(models: dict[str, synthetic.SyntheticModel], specs: list, contrasts: list, draws: int, study: protocol.Study) -> dict[str, tuple[dict[str, float], dict[str, float]]]:
    """Per condition: the planted contrasts and arm acceptances. An arm whose parameters (and the shared
    ones) equal an arm already integrated is not integrated again: with the same draws its value is the same."""
    cache: dict[str, float] = {}
    out = {}
    for name, m in models.items():
        todo = [a for a in m.arms if _arm_key(m, a) not in cache]
        if todo:
            t = synthetic.planted_acceptance(m, specs=specs, draws=draws, study=study, arms=todo).set_index("arm")["p_equal"]
            cache.update({_arm_key(m, a): float(t[a]) for a in todo})
        p = {a: cache[_arm_key(m, a)] for a in m.arms}
        out[name] = ({estimators.contrast_name(c): p[c[0]] - p[c[1]] for c in contrasts}, p)
    return out


def draw_acceptance(rng: np.random.Generator, model: synthetic.SyntheticModel, specs: list, n_studies: int, repeats: int, study: protocol.Study) -> np.ndarray:
    """S for every run of ``n_studies`` studies, ``(n_studies, J, A, R)`` (NaN: no judge), as ``generate_runtable`` draws them."""
    J, A = len(specs), len(model.arms)
    depth = np.array([s.designed_depth for s in specs], dtype=float)
    depth_c = depth - depth.mean()
    caps = [study.caps_for(s.id) for s in specs]
    shape = (n_studies, J, A, repeats)
    j_idx = np.broadcast_to(np.arange(J)[None, :, None, None], shape).ravel()
    a_idx = np.broadcast_to(np.arange(A)[None, None, :, None], shape).ravel()
    u = rng.normal(0.0, model["scenario_sd_logit"], (n_studies, J))
    u_run = np.broadcast_to(u[:, :, None, None], shape).ravel()
    cap_usd = np.array([c.usd for c in caps])[j_idx]
    cap_wall = np.array([c.wall_s for c in caps])[j_idx]
    out = synthetic.draw_runs(rng, model, a_idx, depth_c[j_idx], u_run, cap_usd, cap_wall, study)
    # The run table stores Q to four decimals and S follows the stored Q (as generate_runtable does).
    S = runtable.acceptance(out["D"], out["E"], np.round(out["Q"], 4), study.q)
    return S.reshape(shape)


def analyse_block(
    S: np.ndarray,
    arms: Sequence[str],
    contrasts: Sequence[Sequence[str]],
    counts: np.ndarray,
    signs: np.ndarray,
    level: float,
) -> dict[str, np.ndarray]:
    """The primary stage's contrast analysis for a block of studies at once.

    ``S``: ``(n, J, A, R)``; ``counts``: ``(n, B, J)`` bootstrap counts, one set
    per study; ``signs``: ``(P, J)``. Returns estimate, ci_low, ci_high,
    p_value and n_scenarios, each ``(n, K)``, computed as
    :func:`pilot.stats.primary.contrast_table` computes them for one study.
    """
    valid_run = ~np.isnan(S)
    n_run = valid_run.sum(axis=3)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(n_run > 0, np.where(valid_run, S, 0.0).sum(axis=3) / np.maximum(n_run, 1), np.nan)  # (n, J, A)
    idx = {a: k for k, a in enumerate(arms)}
    d = np.stack([means[:, :, idx[t]] - means[:, :, idx[c]] for t, c in contrasts], axis=2)  # (n, J, K)
    valid = ~np.isnan(d)
    x = np.where(valid, d, 0.0)
    v = valid.astype(float)
    den = v.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.where(den > 0, x.sum(axis=1) / np.where(den > 0, den, 1), np.nan)
        # Batched matrix products (BLAS): one resampled mean per study, resample and contrast.
        reps = np.matmul(counts, x) / np.matmul(counts, v)  # (n, B, K); NaN where a resample has no value
    a = (1 - level) / 2
    lo = np.empty_like(est)
    hi = np.empty_like(est)
    clean = ~np.isnan(reps).any(axis=1)  # (n, K): no NaN replicate, the stage's fast path
    ordered = np.sort(reps, axis=1)
    lo_fast = resampling._linear_quantile(np.moveaxis(ordered, 1, 0), a)
    hi_fast = resampling._linear_quantile(np.moveaxis(ordered, 1, 0), 1 - a)
    lo[:], hi[:] = lo_fast, hi_fast
    for i, k in zip(*np.nonzero(~clean)):  # rare: a resample without the statistic (the stage ignores it)
        lo[i, k], hi[i, k] = resampling.percentile_interval(reps[i, :, k], level)
    observed = est
    null = np.matmul(signs[None, :, :], x) / np.where(den > 0, den, np.nan)[:, None, :]
    gamma = np.abs(resampling._TIE_EPS * observed)[:, None, :]
    greater = (null >= observed[:, None, :] - gamma).sum(axis=1)
    less = (null <= observed[:, None, :] + gamma).sum(axis=1)
    exact = signs.shape[0] == 2 ** S.shape[1]
    adj = 0 if exact else 1
    P = signs.shape[0]
    p = np.minimum(1.0, 2 * np.minimum((greater + adj) / (P + adj), (less + adj) / (P + adj)))
    p = np.where(np.isnan(observed), np.nan, p)
    return {"estimate": est, "ci_low": lo, "ci_high": hi, "p_value": p, "n_scenarios": valid.sum(axis=1)}


def run_calibration(
    n_studies: int = 10_000,
    *,
    seed: int = 20260417,
    n_scenarios: int | None = None,
    repeats: int = 3,
    B: int | None = None,
    n_permutations: int | None = None,
    truth_draws: int = 1_000_000,
    progress: bool = False,
    study: protocol.Study | None = None,
    conditions: Sequence[str] = CONDITIONS,
    block: int = 100,
) -> CalibrationResult:
    """Draw ``n_studies`` SIMULATED studies per condition and analyse each like the primary stage."""
    study = study or protocol.study()
    model = synthetic.SyntheticModel.load()
    contrasts = [tuple(c) for c in study.contrasts]
    settings = InferenceSettings.from_study(seed, study, B=B, n_permutations=n_permutations)
    alpha = 1 - settings.level
    models = {k: v for k, v in condition_models(model, study).items() if k in conditions}
    specs = synthetic.study_scenarios(seed, n_scenarios, model, study)
    J = len(specs)
    per_scenario = max(10_000, truth_draws // J)
    truths = planted_truths(models, specs, contrasts, per_scenario, study)
    names = [estimators.contrast_name(c) for c in contrasts]
    K = len(contrasts)
    blocks = [(start, min(block, n_studies - start)) for start in range(0, n_studies, block)]
    iterator = blocks
    if progress:
        from tqdm import tqdm

        iterator = tqdm(blocks, desc="calibration", unit="block")
    parts: dict[str, list[dict[str, np.ndarray]]] = {name: [] for name in models}
    for start, n in iterator:
        # Study i of a block has the same bootstrap resamples in every condition (the conditions are
        # separate experiments; sharing the draws across them costs nothing in validity and a third of the time).
        rng = np.random.default_rng([seed, start])
        counts = resampling.bootstrap_counts(rng, J, n * settings.B).reshape(n, settings.B, J)
        signs, _ = resampling.sign_vectors(J, settings.n_permutations, rng)
        for k_cond, name in enumerate(models):
            S = draw_acceptance(np.random.default_rng([seed, start, k_cond]), models[name], specs, n, repeats, study)
            parts[name].append(analyse_block(S, study.arms, contrasts, counts, signs, settings.level))
    records = []
    for name in models:
        res = {k: np.concatenate([p[k] for p in parts[name]]) for k in parts[name][0]}
        p_holm = np.full_like(res["p_value"], np.nan)
        if K > 1:
            p_holm[:, 1:] = primary.holm_many(np.where(np.isnan(res["p_value"][:, 1:]), 1.0, res["p_value"][:, 1:]))
            p_holm[:, 1:] = np.where(np.isnan(res["p_value"][:, 1:]), np.nan, p_holm[:, 1:])
        planted = np.array([truths[name][0][c] for c in names])
        frame = pd.DataFrame({
            "condition": name,
            "study": np.repeat(np.arange(n_studies), K),
            "contrast": np.tile(names, n_studies),
            "role": np.tile(["primary"] + ["secondary"] * (K - 1), n_studies),
            "estimate": res["estimate"].ravel(), "ci_low": res["ci_low"].ravel(), "ci_high": res["ci_high"].ravel(),
            "p_value": res["p_value"].ravel(), "p_holm": p_holm.ravel(), "n_scenarios": res["n_scenarios"].ravel(),
            "planted": np.tile(planted, n_studies),
        })
        records.append(frame)
    studies = pd.concat(records, ignore_index=True)
    studies["covered"] = (studies.ci_low <= studies.planted) & (studies.planted <= studies.ci_high)
    studies["rejected"] = np.where(studies.role == "primary", studies.p_value, studies.p_holm) < alpha
    studies["zero_width"] = studies.ci_low == studies.ci_high
    rows = []
    for (cond, con), g in studies.groupby(["condition", "contrast"], sort=False):
        n = len(g)
        cov, rej = g.covered.mean(), g.rejected.mean()
        t, c = con.split("-")
        rows.append({
            "condition": cond, "contrast": con, "J": J, "R": repeats, "studies": n, "planted": g.planted.iloc[0],
            "planted_treated": truths[cond][1][t], "planted_control": truths[cond][1][c],
            "mean_estimate": g.estimate.mean(), "bias_mc_se": g.estimate.std(ddof=1) / np.sqrt(n),
            "coverage": cov, "coverage_mc_se": np.sqrt(cov * (1 - cov) / n),
            "rejection": rej, "rejection_mc_se": np.sqrt(rej * (1 - rej) / n), "mean_ci_width": (g.ci_high - g.ci_low).mean(),
            "zero_width_share": g.zero_width.mean(),
            "B": settings.B, "permutations": settings.n_permutations,
        })
    return CalibrationResult(pd.DataFrame(rows), studies)
