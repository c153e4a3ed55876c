"""Calibration of the primary inference on the synthetic generator, whose truth is known.

Many SIMULATED studies are drawn from the generative model and each is
analysed exactly as the primary stage analyses a run table: repeat means,
the four contrasts, the scenario-cluster percentile bootstrap and the
sign-flip test, Holm over the secondary three. Three conditions: ``planted``
(the model as stated) measures how often each 95 per cent interval covers
the planted contrast; ``null`` (A3's parameters set to A1's) how often the
tests reject when there is no effect; ``tail`` (the primary control arm A1
pushed to near 0% acceptance) what the intervals do at the edge of the scale.

Every study is analysed with the bootstrap resamples and sign vectors the
primary stage itself draws for a table of J scenarios at the resampling seed
(``primary_analysis``: ``default_rng([seed, 2])`` for the counts,
``default_rng([seed, 1])`` for random sign vectors; exact enumeration of all
``2^J`` when that is at most the permutation count). The calibration thus
measures the preregistered procedure as it will run, seed included; given
those draws the simulated studies are independent, so the Monte Carlo
standard errors are the binomial ones. It also makes the work one matrix
product per block (:mod:`pilot.stats.batch_inference`, the code the stage
runs for one study).

The runs are drawn a block of studies at a time (``default_rng([seed, start])``),
one ``draw_runs`` call per arm set; the conditions share the runs of the
arms they leave unchanged (:func:`draw_conditions`). The planted truth comes
from :func:`pilot.simulated.synthetic.planted_acceptance` (seed 0, common random
numbers across arms).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pilot import protocol, runtable
from pilot.simulated import synthetic
from pilot.stats import batch_inference, estimators, primary, resampling
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
    treated, control = study.primary_contrast.arms
    params = copy.deepcopy(model.params)
    params["completion"]["arm"][control] = TAIL_COMPLETION_LOGIT
    tail = synthetic.SyntheticModel(params, source=f"{model.source} (tail: {control} near 0%)")
    return {"planted": model, "null": model.with_null(treated, control), "tail": tail}


def _arm_key(model: synthetic.SyntheticModel, arm: str) -> str:
    """What an arm's planted acceptance depends on: the shared parameters and the arm's own."""
    shared = {k: v for k, v in model.params.items() if k != "arms"}
    own = {f"{section}.{key}": model.params[section][key][arm] for section, key in synthetic.ARM_KEYED}
    for section, key in synthetic.ARM_KEYED:
        shared = {**shared, section: {**shared[section], key: None}}
    return repr((sorted(own.items()), repr(shared)))


def planted_truths(
    models: dict[str, synthetic.SyntheticModel], specs: list, contrasts: list, draws: int, study: protocol.Study
) -> dict[str, tuple[dict[str, float], dict[str, float]]]:
    """Per condition: the planted contrasts and arm acceptances. An arm whose parameters (and the shared
    ones) equal an arm already integrated is not integrated again: with the same draws its value is the same."""
    cache: dict[str, float] = {}
    out = {}
    for name, m in models.items():
        todo = [a for a in m.arms if _arm_key(m, a) not in cache]
        if todo:
            t = synthetic.planted_acceptance(m, specs=specs, draws=draws, study=study, arms=todo).set_index("arm")[
                "p_equal"
            ]
            cache.update({_arm_key(m, a): float(t[a]) for a in todo})
        p = {a: cache[_arm_key(m, a)] for a in m.arms}
        out[name] = ({estimators.contrast_name(c): p[c[0]] - p[c[1]] for c in contrasts}, p)
    return out


def _draw_arms(
    rng: np.random.Generator,
    model: synthetic.SyntheticModel,
    specs: list,
    u: np.ndarray,
    arms: Sequence[int],
    repeats: int,
    study: protocol.Study,
) -> np.ndarray:
    """S for the runs of the given arms (indices into ``model.arms``) given the scenario effects ``u`` ``(n, J)``: ``(n,
    J, len(arms), R)``."""
    n_studies, J = u.shape
    depth = np.array([s.designed_depth for s in specs], dtype=float)
    depth_c = depth - depth.mean()
    caps = [study.caps_for(s.id) for s in specs]
    shape = (n_studies, J, len(arms), repeats)
    j_idx = np.broadcast_to(np.arange(J)[None, :, None, None], shape).ravel()
    a_idx = np.broadcast_to(np.asarray(arms)[None, None, :, None], shape).ravel()
    u_run = np.broadcast_to(u[:, :, None, None], shape).ravel()
    cap_usd = np.array([c.usd for c in caps])[j_idx]
    cap_wall = np.array([c.wall_s for c in caps])[j_idx]
    out = synthetic.draw_runs(rng, model, a_idx, depth_c[j_idx], u_run, cap_usd, cap_wall, study, acceptance_only=True)
    # The run table stores Q to four decimals and S follows the stored Q (as generate_runtable does).
    S = runtable.acceptance(out["D"], out["E"], np.round(out["Q"], 4), study.q)
    return S.reshape(shape)


def draw_acceptance(
    rng: np.random.Generator,
    model: synthetic.SyntheticModel,
    specs: list,
    n_studies: int,
    repeats: int,
    study: protocol.Study,
) -> np.ndarray:
    """S for every run of ``n_studies`` studies, ``(n_studies, J, A, R)`` (NaN: no judge), as ``generate_runtable``
    draws them."""
    u = rng.normal(0.0, model["scenario_sd_logit"], (n_studies, len(specs)))
    return _draw_arms(rng, model, specs, u, range(len(model.arms)), repeats, study)


def draw_conditions(
    rng: np.random.Generator,
    models: dict[str, synthetic.SyntheticModel],
    specs: list,
    n_studies: int,
    repeats: int,
    study: protocol.Study,
) -> dict[str, np.ndarray]:
    """:func:`draw_acceptance` for every condition, with common random numbers across conditions.

    The first condition's studies are drawn in full. Each other condition
    shares their scenario effects and the runs of every arm whose parameters
    (and the shared ones) it leaves unchanged, and draws only the arms it
    changes (null: A3; tail: A1). Each condition's studies are distributed
    exactly as separate draws would be; the conditions are merely correlated,
    which no per-condition number depends on, and about half the runs are drawn.
    """
    names = list(models)
    first = models[names[0]]
    u = rng.normal(0.0, first["scenario_sd_logit"], (n_studies, len(specs)))
    out = {names[0]: _draw_arms(rng, first, specs, u, range(len(first.arms)), repeats, study)}
    for name in names[1:]:
        m = models[name]
        if m.arms != first.arms or m["scenario_sd_logit"] != first["scenario_sd_logit"]:
            out[name] = draw_acceptance(rng, m, specs, n_studies, repeats, study)
            continue
        changed = [k for k, a in enumerate(m.arms) if _arm_key(m, a) != _arm_key(first, a)]
        S = out[names[0]].copy()
        if changed:
            S[:, :, changed, :] = _draw_arms(rng, m, specs, u, changed, repeats, study)
        out[name] = S
    return out


def scenario_differences(S: np.ndarray, arms: Sequence[str], contrasts: Sequence[Sequence[str]]) -> np.ndarray:
    """``(n, J, K)``: per study and scenario, treated minus control repeat mean (NaN: an arm without a scored run)."""
    valid_run = ~np.isnan(S)
    n_run = valid_run.sum(axis=3)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(n_run > 0, np.where(valid_run, S, 0.0).sum(axis=3) / np.maximum(n_run, 1), np.nan)  # (n, J, A)
    idx = {a: k for k, a in enumerate(arms)}
    return np.stack([means[:, :, idx[t]] - means[:, :, idx[c]] for t, c in contrasts], axis=2)


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
    p_value and n_scenarios, each ``(n, K)``, as
    :func:`pilot.stats.primary.contrast_table` computes them for one study
    (see :mod:`pilot.stats.batch_inference` for the sense of "as").
    """
    L = batch_inference.grid_denominator(S.shape[3])
    y = batch_inference.on_grid(scenario_differences(S, arms, contrasts), L)
    return batch_inference.contrast_inference(y, L, counts, signs, level, exact=signs.shape[0] == 2 ** S.shape[1])


def analyse_studies(
    y: np.ndarray, L: int, counts: np.ndarray, signs: np.ndarray, level: float, *, exact: bool, chunk: int = 20
) -> dict[str, np.ndarray]:
    """The stage's contrast inference for every study of ``y`` (``(n, J, C)`` differences times ``L``),
    with one set of bootstrap ``counts`` ``(B, J)`` and ``signs`` for all, a few studies at a time
    (so the resampled means, a few MB, stay in cache)."""
    out: dict[str, list[np.ndarray]] = {}
    for a in range(0, y.shape[0], chunk):
        res = batch_inference.contrast_inference(y[a : a + chunk], L, counts, signs, level, exact=exact)
        for k, v in res.items():
            out.setdefault(k, []).append(v)
    return {k: np.concatenate(v) for k, v in out.items()}


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
    resampling_seed: int | None = None,
) -> CalibrationResult:
    """Draw ``n_studies`` SIMULATED studies per condition and analyse each like the primary stage.

    Every study is analysed with the bootstrap resamples and sign vectors that
    :func:`pilot.stats.primary.primary_analysis` draws for a J-scenario table
    with seed ``resampling_seed`` (default ``seed``).
    """
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

        iterator = tqdm(blocks, desc=f"calibration J={J}", unit="block")
    L = batch_inference.grid_denominator(repeats)
    # The primary stage's own draws for this seed and J (primary_analysis / contrast_table).
    rs = seed if resampling_seed is None else int(resampling_seed)
    counts = resampling.bootstrap_counts(np.random.default_rng([rs, 2]), J, settings.B)
    signs, exact = resampling.sign_vectors(J, settings.n_permutations, np.random.default_rng([rs, 1]))
    parts: dict[str, list[dict[str, np.ndarray]]] = {name: [] for name in models}
    for start, n in iterator:
        S = draw_conditions(np.random.default_rng([seed, start]), models, specs, n, repeats, study)
        # Every condition's differences side by side, analysed in one pass.
        y = np.concatenate(
            [batch_inference.on_grid(scenario_differences(S[name], study.arms, contrasts), L) for name in models],
            axis=2,
        )
        res = analyse_studies(y, L, counts, signs, settings.level, exact=exact)
        for k_cond, name in enumerate(models):
            parts[name].append({k: v[:, k_cond * K : (k_cond + 1) * K] for k, v in res.items()})
    records = []
    for name in models:
        res = {k: np.concatenate([p[k] for p in parts[name]]) for k in parts[name][0]}
        p_holm = np.full_like(res["p_value"], np.nan)
        if K > 1:
            p_holm[:, 1:] = primary.holm_many(np.where(np.isnan(res["p_value"][:, 1:]), 1.0, res["p_value"][:, 1:]))
            p_holm[:, 1:] = np.where(np.isnan(res["p_value"][:, 1:]), np.nan, p_holm[:, 1:])
        planted = np.array([truths[name][0][c] for c in names])
        frame = pd.DataFrame(
            {
                "condition": name,
                "study": np.repeat(np.arange(n_studies), K),
                "contrast": np.tile(names, n_studies),
                "role": np.tile(["primary"] + ["secondary"] * (K - 1), n_studies),
                "estimate": res["estimate"].ravel(),
                "ci_low": res["ci_low"].ravel(),
                "ci_high": res["ci_high"].ravel(),
                "p_value": res["p_value"].ravel(),
                "p_holm": p_holm.ravel(),
                "n_scenarios": res["n_scenarios"].ravel(),
                "planted": np.tile(planted, n_studies),
            }
        )
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
        rows.append(
            {
                "condition": cond,
                "contrast": con,
                "J": J,
                "R": repeats,
                "studies": n,
                "planted": g.planted.iloc[0],
                "planted_treated": truths[cond][1][t],
                "planted_control": truths[cond][1][c],
                "mean_estimate": g.estimate.mean(),
                "bias_mc_se": g.estimate.std(ddof=1) / np.sqrt(n),
                "coverage": cov,
                "coverage_mc_se": np.sqrt(cov * (1 - cov) / n),
                "rejection": rej,
                "rejection_mc_se": np.sqrt(rej * (1 - rej) / n),
                "mean_ci_width": (g.ci_high - g.ci_low).mean(),
                "zero_width_share": g.zero_width.mean(),
                "B": settings.B,
                "permutations": settings.n_permutations,
            }
        )
    return CalibrationResult(pd.DataFrame(rows), studies)


def against_nominal(rate: float, mc_se: float, nominal: float) -> str:
    """Where a simulated rate sits against its nominal value: "within Monte Carlo error of", "above" or "below".

    Within two Monte Carlo standard errors (at least 0.001, so a rate of exactly the nominal with a zero
    standard error still reads as within) counts as within.
    """
    if abs(rate - nominal) <= 2 * max(mc_se, 0.001):
        return "within Monte Carlo error of"
    return "above" if rate > nominal else "below"


def level_sentence(rows: Sequence[tuple[int, float, float]], alpha: float) -> str:
    """The sign-flip test's rejection rate under the null, per study size ``(J, rate, mc_se)``, read against
    ``alpha``."""

    def reading(rate: float, se: float) -> str:
        where = against_nominal(rate, se, alpha)
        return f"{where} the level" + (", so conservative there" if where == "below" else "")

    parts = [
        f"{rate:.3f} of the studies at J = {j} (Monte Carlo s.e. {se:.3f}; {reading(rate, se)})" for j, rate, se in rows
    ]
    return (
        f"With no effect planted, the sign-flip test rejects the primary null in {' and in '.join(parts)}, "
        f"against a level of {alpha:g}."
    )


def coverage_sentence(rows: Sequence[tuple[int, float, float]], level: float) -> str:
    """The primary interval's coverage of the planted contrast, per study size ``(J, coverage, mc_se)``, read against
    ``level``."""
    parts = [
        f"{cov:.3f} of the studies at J = {j} (Monte Carlo s.e. {se:.3f}; "
        f"{against_nominal(cov, se, level)} the nominal {level:.0%})"
        for j, cov, se in rows
    ]
    below = [j for j, cov, se in rows if against_nominal(cov, se, level) == "below"]
    tail = (
        f" Where it covers less than its nominal level (J = {', '.join(map(str, below))}), the intervals "
        f"should be read as narrower than a {level:.0%} interval, and the sign-flip test, whose level is "
        "checked above, is the one the criteria rest on."
        if below
        else ""
    )
    return f"The percentile interval covers the planted primary contrast in {' and in '.join(parts)}.{tail}"
