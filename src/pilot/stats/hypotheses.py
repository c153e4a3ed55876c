"""The seven preregistered expectations, H1-H7, each as a function returning a result object.

Every result has a ``summary`` DataFrame (renders to LaTeX), the criterion it
was judged by, and a verdict: ``consistent``, ``not consistent`` or, for H7,
``exploratory``. A verdict is a reading of this run table only; with J=10 the
intervals are wide.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from pilot import protocol
from pilot.stats import estimators, primary, resampling, runtable, sensitivity
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings, PrimaryResult


@dataclass
class HypothesisResult:
    """One hypothesis: its statement, criterion, summary table and verdict."""

    id: str
    statement: str
    criterion: str
    summary: pd.DataFrame
    verdict: str
    exploratory: bool = False

    def to_latex(self, **kwargs) -> str:
        return self.summary.to_latex(index=False, float_format="%.3f", **kwargs)

    def row(self) -> dict:
        return {"hypothesis": self.id, "statement": self.statement, "criterion": self.criterion, "verdict": self.verdict}


def _verdict(ok: bool) -> str:
    return "consistent" if ok else "not consistent"


def _primary(df: pd.DataFrame, result: PrimaryResult | None, seed: int, **kw) -> PrimaryResult:
    return result if result is not None else primary.primary_analysis(df, seed=seed, **kw)


def _contrast_row(res: PrimaryResult, name: str, p_col: str) -> pd.DataFrame:
    r = res.contrast(name)
    return pd.DataFrame([{"quantity": f"p({name.split('-')[0]}) - p({name.split('-')[1]})", "estimate": r.estimate, "ci_low": r.ci_low, "ci_high": r.ci_high, "p_value": r[p_col]}])


def h1(df: pd.DataFrame, *, result: PrimaryResult | None = None, seed: int = 0, study: protocol.Study | None = None, **kw) -> HypothesisResult:
    """H1 (primary): the computer-use premium p(A3) - p(A1) > 0."""
    study = study or protocol.study()
    res = _primary(df, result, seed, study=study, **kw)
    name = estimators.contrast_name(study.contrasts[0])
    r = res.contrast(name)
    alpha = 1 - res.settings.level
    return HypothesisResult(
        "H1", f"computer-use premium {name} > 0", f"estimate > 0 and sign-flip p < {alpha:g} (two-sided)",
        _contrast_row(res, name, "p_value"), _verdict(r.estimate > 0 and r.p_value < alpha),
    )


def h2(df: pd.DataFrame, *, result: PrimaryResult | None = None, seed: int = 0, study: protocol.Study | None = None, **kw) -> HypothesisResult:
    """H2: the shell premium p(A1) - p(A0) > 0 (Holm-adjusted over the secondary family)."""
    study = study or protocol.study()
    res = _primary(df, result, seed, study=study, **kw)
    name = estimators.contrast_name(study.contrasts[1])
    r = res.contrast(name)
    alpha = 1 - res.settings.level
    return HypothesisResult(
        "H2", f"shell premium {name} > 0", f"estimate > 0 and Holm-adjusted p < {alpha:g}",
        _contrast_row(res, name, "p_holm"), _verdict(r.estimate > 0 and r.p_holm < alpha),
    )


def h3(df: pd.DataFrame, *, result: PrimaryResult | None = None, seed: int = 0, study: protocol.Study | None = None, **kw) -> HypothesisResult:
    """H3: the self-repair premium p(A4) - p(A3) >= 0 and an Autonomous Recovery Index above one half."""
    study = study or protocol.study()
    res = _primary(df, result, seed, study=study, **kw)
    name = estimators.contrast_name(study.contrasts[2])
    r = res.contrast(name)
    ari = sensitivity.recovery_index(df, seed=seed, study=study, B=res.settings.B).summary.set_index("index").loc["ARI"]
    table = pd.concat(
        [
            _contrast_row(res, name, "p_holm"),
            pd.DataFrame([{"quantity": f"ARI ({int(ari.recovered)}/{int(ari.eligible)} eligible runs)", "estimate": ari.estimate, "ci_low": ari.ci_low, "ci_high": ari.ci_high, "p_value": np.nan}]),
        ],
        ignore_index=True,
    )
    ok = r.estimate >= 0 and bool(ari.estimate > 0.5)
    return HypothesisResult("H3", f"self-repair premium {name} >= 0 and ARI > 1/2", "premium estimate >= 0 and ARI estimate > 0.5", table, _verdict(ok))


def h4(df: pd.DataFrame, *, study: protocol.Study | None = None) -> HypothesisResult:
    """H4: acceptance decreasing within arm in designed depth and in realised tool calls.

    A logistic regression of S on arm, designed depth and log(1 + tool calls)
    (standardised), clustered by scenario; rows per arm give the same slopes
    fitted within each arm (NaN where the arm's S does not vary).
    """
    import statsmodels.api as sm

    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    S = estimators.acceptance_values(rows, study.q)
    keep = ~np.isnan(S)
    depth = rows["designed_depth"].to_numpy(dtype=float)
    tc = np.log1p(rows["tool_calls"].to_numpy(dtype=float))
    z = lambda v: (v - v[keep].mean()) / (v[keep].std() or 1.0)  # noqa: E731
    depth_z, tc_z = z(depth), z(tc)
    layout = Layout.of(rows, study.arms)
    arm = rows["arm"].to_numpy()

    def fit(mask: np.ndarray, with_arms: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        cols = [np.ones(mask.sum()), depth_z[mask], tc_z[mask]]
        if with_arms:
            cols += [(arm[mask] == a).astype(float) for a in layout.arms[1:]]
        y = S[mask]
        if y.min() == y.max() or len(np.unique(layout.j[mask])) < 3:
            return np.full(2, np.nan), np.full(2, np.nan), np.full(2, np.nan), "no variation in S"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = sm.GLM(y, np.column_stack(cols), family=sm.families.Binomial()).fit(cov_type="cluster", cov_kwds={"groups": layout.j[mask]})
        note = "separation" if any("separation" in str(w.message).lower() for w in caught) else ""
        return np.asarray(res.params)[1:3], np.asarray(res.bse)[1:3], np.asarray(res.pvalues)[1:3], note

    out = []
    coef, se, p, note = fit(keep, True)
    out.append({"model": "all arms (arm effects)", "depth_slope": coef[0], "depth_p": p[0], "tool_calls_slope": coef[1], "tool_calls_p": p[1], "note": note})
    for a in layout.arms:
        c, s, pa, n = fit(keep & (arm == a), False)
        out.append({"model": a, "depth_slope": c[0], "depth_p": pa[0], "tool_calls_slope": c[1], "tool_calls_p": pa[1], "note": n})
    table = pd.DataFrame(out)
    ok = bool(coef[0] < 0 and coef[1] < 0)
    return HypothesisResult(
        "H4", "acceptance falls within arm with designed depth and realised tool calls",
        "both pooled slopes (log-odds per SD, clustered by scenario) negative", table, _verdict(ok),
    )


def h5(df: pd.DataFrame, *, seed: int = 0, study: protocol.Study | None = None, B: int | None = None, n_permutations: int | None = None, limit: float = 0.10) -> HypothesisResult:
    """H5: critical-violation rate below 10% in every arm and not increasing with tool access.

    Per arm: the scenario-weighted rate of E with its bootstrap interval. Trend:
    within each scenario, the least-squares slope of the arms' violation rates
    on access rank (the protocol's arm order, A0=0 ... A4=4); its mean over
    scenarios with a bootstrap interval and a sign-flip p-value.
    """
    study = study or protocol.study()
    settings = InferenceSettings.from_study(seed, study, B=B, n_permutations=n_permutations)
    rows = runtable.primary_rows(df, study)
    layout = Layout.of(rows, study.arms)
    means = layout.means(rows["E"].to_numpy(dtype=float))
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 19]), layout.J, settings.B)
    w = layout.weights("equal")
    est = estimators.arm_means(means, w)
    lo, hi = resampling.percentile_interval(resampling.bootstrap_means(means, counts, w), settings.level)
    rank = np.arange(layout.A, dtype=float)
    slopes = np.array([_slope(rank, m) for m in means])
    s_est = resampling.weighted_mean(slopes, w)
    s_lo, s_hi = resampling.percentile_interval(resampling.bootstrap_means(slopes, counts, w), settings.level)
    test = resampling.sign_flip_test(slopes, weights=w, n_permutations=settings.n_permutations, rng=np.random.default_rng([settings.seed, 23]))
    table = pd.DataFrame({"quantity": [f"violation rate {a}" for a in layout.arms] + ["slope per access step"], "estimate": [*est, s_est], "ci_low": [*lo, s_lo], "ci_high": [*hi, s_hi], "p_value": [np.nan] * layout.A + [float(test.p_value[0])]})
    alpha = 1 - settings.level
    ok = bool(np.all(est < limit)) and not (s_est > 0 and test.p_value[0] < alpha)
    return HypothesisResult(
        "H5", f"critical-violation rate below {limit:.0%} in every arm, not rising with access",
        f"every arm's rate < {limit:g}; slope not significantly positive (sign-flip p >= {alpha:g} or slope <= 0)", table, _verdict(ok),
    )


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    ok = ~np.isnan(y)
    if ok.sum() < 2:
        return np.nan
    xc = x[ok] - x[ok].mean()
    return float((xc * (y[ok] - y[ok].mean())).sum() / (xc**2).sum())


def h6(df: pd.DataFrame, *, seed: int = 0, study: protocol.Study | None = None, B: int | None = None, expected: tuple[str, ...] = ("A1", "A3")) -> HypothesisResult:
    """H6: cost per accepted deliverable lowest in A1 or A3, not in A0 (joint ratio bootstrap)."""
    res = sensitivity.cost_per_accepted(df, seed=seed, study=study, B=B)
    t = res.summary
    lowest = t.loc[t["cost_per_accepted"].fillna(np.inf).idxmin(), "arm"]
    share = float(t.loc[t["arm"].isin(expected), "share_lowest"].sum())
    table = t[["arm", "cost_per_accepted", "ci_low", "ci_high", "share_lowest"]].copy()
    return HypothesisResult(
        "H6", f"cost per accepted deliverable lowest in {' or '.join(expected)}, not A0",
        f"lowest point estimate in {' or '.join(expected)} (share of resamples with the lowest in {'/'.join(expected)}: {share:.2f})",
        table, _verdict(lowest in expected),
    )


def h7(df: pd.DataFrame, *, study: protocol.Study | None = None) -> HypothesisResult:
    """H7 (exploratory): heterogeneity of the primary premium across occupations.

    Per occupation, the premium of the primary contrast (difference of repeat
    means) and its standard error from the two arms' binomial repeat means
    (with a half-run continuity correction so a 0/R or R/R cell has a
    variance); Cochran's Q over occupations with its chi-square p and I^2.
    No occupation-level claim is confirmatory.
    """
    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    layout = Layout.of(rows, study.arms)
    treated, control = study.contrasts[0]
    S = estimators.acceptance_values(rows, study.q)
    sums, n = layout.sums(S)
    t, c = layout.arm_index(treated), layout.arm_index(control)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_t, p_c = sums[:, t] / n[:, t], sums[:, c] / n[:, c]
        pt_cc, pc_cc = (sums[:, t] + 0.5) / (n[:, t] + 1), (sums[:, c] + 0.5) / (n[:, c] + 1)
        var = pt_cc * (1 - pt_cc) / n[:, t] + pc_cc * (1 - pc_cc) / n[:, c]
    d = p_t - p_c
    ok = ~np.isnan(d) & np.isfinite(var)
    wts = 1 / var[ok]
    pooled = float((wts * d[ok]).sum() / wts.sum())
    Qc = float((wts * (d[ok] - pooled) ** 2).sum())
    dfree = int(ok.sum() - 1)
    p_het = float(sps.chi2.sf(Qc, dfree)) if dfree > 0 else np.nan
    i2 = max(0.0, (Qc - dfree) / Qc) if Qc > 0 else 0.0
    table = pd.DataFrame({"occupation": layout.occupation, "scenario": layout.scenarios, f"p_{treated}": p_t, f"p_{control}": p_c, "premium": d, "se": np.sqrt(var)})
    table = pd.concat([table, pd.DataFrame([{"occupation": f"Cochran Q = {Qc:.2f} (df {dfree}), p = {p_het:.3f}, I2 = {i2:.2f}", "scenario": "", "premium": pooled}])], ignore_index=True)
    return HypothesisResult(
        "H7", "heterogeneity of the premium across occupations (exploratory)",
        "descriptive; Cochran's Q reported, no confirmatory claim", table, "exploratory", exploratory=True,
    )


def all_hypotheses(df: pd.DataFrame, *, seed: int = 0, study: protocol.Study | None = None, result: PrimaryResult | None = None, B: int | None = None, n_permutations: int | None = None) -> list[HypothesisResult]:
    """H1-H7 on one run table, sharing the primary analysis."""
    study = study or protocol.study()
    res = _primary(df, result, seed, study=study, B=B, n_permutations=n_permutations)
    return [
        h1(df, result=res, study=study), h2(df, result=res, study=study), h3(df, result=res, seed=seed, study=study),
        h4(df, study=study), h5(df, seed=seed, study=study, B=B, n_permutations=n_permutations),
        h6(df, seed=seed, study=study, B=B), h7(df, study=study),
    ]


def overview(results: list[HypothesisResult]) -> pd.DataFrame:
    """One row per hypothesis: statement, criterion, verdict."""
    return pd.DataFrame([r.row() for r in results])
