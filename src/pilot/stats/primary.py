"""The primary analysis: acceptance per arm and the preregistered contrasts.

Acceptance ``p_a`` per arm with scenario-cluster percentile bootstrap
intervals; the contrasts of ``protocol/study.yml`` (primary A3-A1; secondary
A1-A0, A4-A3, A2-A1) with bootstrap intervals, sign-flip p-values and, for the
secondary family, Holm-adjusted p-values (statsmodels).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

from pilot import protocol, runtable
from pilot.stats import batch_inference, estimability, estimators, resampling, small_sample
from pilot.stats.estimators import Layout


@dataclass
class InferenceSettings:
    """Resampling settings; defaults from ``protocol/study.yml``."""

    B: int
    n_permutations: int
    seed: int
    level: float = 0.95

    @classmethod
    def from_study(
        cls, seed: int, study: protocol.Study | None = None, *, B: int | None = None, n_permutations: int | None = None
    ) -> InferenceSettings:
        study = study or protocol.study()
        inf = study["inference"]
        return cls(
            B=int(B or inf["bootstrap_resamples"]),
            n_permutations=int(n_permutations or inf["permutations"]),
            seed=int(seed),
            level=1 - float(inf["alpha"]),
        )


@dataclass
class PrimaryResult:
    """Acceptance per arm and the contrasts; ``summary`` is the contrast table."""

    acceptance: pd.DataFrame
    contrasts: pd.DataFrame
    settings: InferenceSettings
    q: float
    weights: str
    simulated: bool
    study_name: str
    replicates: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def summary(self) -> pd.DataFrame:
        """The contrasts as reported: numbers or ``not estimable (reason)``; the primary contrast's ``p_holm`` empty."""
        return contrast_summary(self.contrasts)

    @property
    def acceptance_summary(self) -> pd.DataFrame:
        """Acceptance per arm as reported: numbers or ``not estimable (reason)``."""
        return estimability.honest_frame(self.acceptance, ["p_hat", "ci_low", "ci_high"])

    def to_latex(self, **kwargs: Any) -> str:
        return str(self.summary.to_latex(index=False, float_format="%.3f", **kwargs))

    def contrast(self, name: str) -> pd.Series:
        return self.contrasts.set_index("contrast").loc[name]


def holm(p_values: Sequence[float], alpha: float = 0.05, method: str = "holm") -> np.ndarray:
    """Adjusted p-values over the whole family (statsmodels; ``method`` as multipletests names it).

    The family keeps its preregistered size: a member without a p-value (NaN,
    not estimable) enters the adjustment as p = 1, which can only raise the
    others' adjusted values (for Holm, the smallest is still multiplied by the
    full family size), and its own adjusted value stays NaN.
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        filled = np.where(ok, p, 1.0)
        if method == "none":
            adj = filled
        elif method == "holm":  # the same numbers as multipletests (tested), without its garbage collection per call
            adj = holm_many(filled[None, :])[0]
        else:
            adj = multipletests(filled, alpha=alpha, method=method)[1]
        out[ok] = adj[ok]
    return out


def holm_many(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of each row of ``(n, m)`` p-values at once.

    The same numbers as statsmodels' ``multipletests(method="holm")`` per row
    (a test checks it); used where thousands of families are adjusted, since
    statsmodels runs a garbage collection on every call.
    """
    p = np.atleast_2d(np.asarray(p_values, dtype=float))
    m = p.shape[1]
    order = np.argsort(p, axis=1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=1)
    adj = np.minimum(1.0, np.maximum.accumulate(sorted_p * np.arange(m, 0, -1), axis=1))
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=1)
    return out


def contrast_table(
    means: np.ndarray,
    layout: Layout,
    contrasts: Sequence[Sequence[str]],
    weights: np.ndarray,
    settings: InferenceSettings,
    *,
    counts: np.ndarray | None = None,
    signs: np.ndarray | None = None,
    adjustment: str | None = "holm",
) -> tuple[pd.DataFrame, np.ndarray]:
    """Estimate, bootstrap interval, sign-flip p and adjusted p for each contrast (the first is primary).

    Returns the table and the bootstrap replicates ``(B, K)``.
    """
    rng = np.random.default_rng([settings.seed, 2])  # a stream apart from the synthetic generator's (same seed)
    if counts is None:
        counts = resampling.bootstrap_counts(rng, layout.J, settings.B)
    d = estimators.contrast_differences(means, layout, contrasts)
    if signs is None:
        signs, _ = resampling.sign_vectors(layout.J, settings.n_permutations, np.random.default_rng([settings.seed, 1]))
    exact = signs.shape[0] == 2**layout.J
    w = np.asarray(weights, dtype=float)
    L = batch_inference.grid_of(d) if w.size and np.all(w == w[0]) and w[0] > 0 else None
    if L is not None:
        # Equal weights and differences of repeat means of 0/1 outcomes: exact integer arithmetic,
        # so a tie in the sign-flip test or a zero-width interval is not decided by rounding.
        res = batch_inference.contrast_inference(
            batch_inference.on_grid(d, L)[None], L, counts[None], signs, settings.level, exact=exact, replicates=True
        )
        est, lo, hi, p = res["estimate"][0], res["ci_low"][0], res["ci_high"][0], res["p_value"][0]
        reps = res["replicates"][0]
    else:
        est = resampling.weighted_mean(d, weights)
        reps = resampling.bootstrap_means(d, counts, weights)
        lo, hi = resampling.percentile_interval(reps, settings.level)
        test = resampling.sign_flip_test(d, weights=weights, signs=signs)
        p, exact = test.p_value, test.exact
    p_adj = np.full(len(contrasts), np.nan)  # the primary contrast stands alone: no adjusted p
    if len(contrasts) > 1 and adjustment is not None:  # None: the caller adjusts (many families at once)
        p_adj[1:] = holm(p[1:], 1 - settings.level, method=adjustment)
    n_scen = (~np.isnan(d)).sum(axis=0)
    notes = [
        estimability.join_notes(
            _contrast_reason(means, layout, pair) if k == 0 else "",
            flag,
            small_sample.lattice_flag(float(lo[i]), float(hi[i]), d[:, i], settings.level),
        )
        for i, (pair, k, flag) in enumerate(
            zip(contrasts, n_scen, estimability.interval_flags(lo, hi, n_scen), strict=True)
        )
    ]
    table = pd.DataFrame(
        {
            "contrast": [estimators.contrast_name(c) for c in contrasts],
            "role": ["primary"] + ["secondary"] * (len(contrasts) - 1),
            "estimate": est,
            "ci_low": lo,
            "ci_high": hi,
            "p_value": p,
            "p_holm": p_adj,
            "n_scenarios": n_scen,
            "exact": exact,
            "note": notes,
        }
    )
    return table, reps


def _contrast_reason(means: np.ndarray, layout: Layout, pair: Sequence[str]) -> str:
    """Why a contrast has no scenario: an arm without a scored run, or no scenario scored in both."""
    missing = [a for a in pair if np.isnan(means[:, layout.arm_index(a)]).all()]
    if missing:
        return f"no scored run in {' and '.join(missing)}"
    return f"no scenario with scored runs in both {pair[0]} and {pair[1]}"


def contrast_summary(contrasts: pd.DataFrame) -> pd.DataFrame:
    """A contrast table as reported: numbers or ``not estimable (reason)``, ``p_holm`` empty for the primary
    contrast."""
    out = estimability.honest_frame(contrasts, ["estimate", "ci_low", "ci_high", "p_value", "p_holm"])
    if "role" in out.columns:
        out["p_holm"] = [
            ("" if r == "primary" else v) for v, r in zip(out["p_holm"].astype(object), out["role"], strict=True)
        ]
    return out


def acceptance_table(
    means: np.ndarray,
    layout: Layout,
    weights: np.ndarray,
    settings: InferenceSettings,
    counts: np.ndarray,
    n_runs: np.ndarray,
    n_scored: np.ndarray,
) -> tuple[pd.DataFrame, np.ndarray]:
    est = estimators.arm_means(means, weights)
    reps = resampling.bootstrap_means(means, counts, weights)
    lo, hi = resampling.percentile_interval(reps, settings.level)
    n_scen = (~np.isnan(means)).sum(axis=0)
    notes = [
        estimability.join_notes(("no run" if r == 0 else "no scored run") if s == 0 else "", flag)
        for r, s, flag in zip(n_runs, n_scored, estimability.interval_flags(lo, hi, n_scen), strict=True)
    ]
    return (
        pd.DataFrame(
            {
                "arm": layout.arms,
                "p_hat": est,
                "ci_low": lo,
                "ci_high": hi,
                "n_runs": n_runs,
                "n_scored": n_scored,
                "n_scenarios": n_scen,
                "note": notes,
            }
        ),
        reps,
    )


def primary_analysis(
    df: pd.DataFrame,
    *,
    seed: int = 0,
    q: float | None = None,
    weights: str = "equal",
    study: protocol.Study | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
    contrasts: Sequence[Sequence[str]] | None = None,
) -> PrimaryResult:
    """The preregistered primary analysis of a validated run table (worker-model runs only)."""
    study = study or protocol.study()
    settings = InferenceSettings.from_study(seed, study, B=B, n_permutations=n_permutations)
    q = study.q if q is None else float(q)
    rows = runtable.primary_rows(df, study)
    layout = Layout.of(rows, study.arms)
    S = estimators.acceptance_values(rows, q)
    means = layout.means(S)
    w = layout.weights(weights)
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 2]), layout.J, settings.B)
    _, scored = layout.sums(S)
    acc, acc_reps = acceptance_table(
        means, layout, w, settings, counts, layout.runs_per_arm(), scored.sum(axis=0).astype(int)
    )
    contrasts = list(contrasts or study.contrasts)
    con, con_reps = contrast_table(
        means, layout, contrasts, w, settings, counts=counts, adjustment=study["inference"]["secondary_adjustment"]
    )
    return PrimaryResult(
        acceptance=acc,
        contrasts=con,
        settings=settings,
        q=q,
        weights=weights,
        simulated=runtable.is_simulated(df),
        study_name=str(df["study"].iloc[0]),
        replicates={"acceptance": acc_reps, "contrasts": con_reps},
    )
