"""The seven preregistered expectations, H1-H7, each as a function returning a result object.

Every result has a ``summary`` DataFrame (renders to LaTeX), the criterion it
was judged by, and a verdict: ``consistent``, ``not consistent``,
``not estimable (reason)`` when an estimate the criterion needs cannot be made
from this table, or, for H7, ``exploratory``. A verdict is a reading of this
run table only; with J=10 the intervals are wide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import pandas as pd
from scipy import stats as sps

from pilot import protocol, runtable
from pilot.stats import estimability, estimators, logistic, primary, resampling, sensitivity, small_sample
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings, PrimaryResult


@dataclass
class HypothesisResult:
    """One hypothesis: its statement, criterion, table of estimates and verdict.

    ``verdict`` is ``consistent``, ``not consistent``, ``not estimable (reason)``
    or, for the exploratory H7, ``exploratory``; ``verdict_class`` is the first
    three without the reason, and ``reason`` the reason alone. ``table`` holds
    the numbers (NaN where nothing can be estimated, the reason in ``note``);
    ``summary`` is what is reported: every estimate a number, ``∞`` where a
    ratio is infinite, or ``not estimable (reason)``.
    """

    id: str
    statement: str
    criterion: str
    table: pd.DataFrame
    verdict: str
    exploratory: bool = False
    infinite: tuple[str, ...] = ()
    #: The parts of the criterion this table fails, each in words with its number (empty unless "not consistent").
    failing: tuple[str, ...] = ()
    #: The headline the summary table and the discussion print: estimate, interval and test, as text.
    estimate: str = ""
    interval: str = ""
    test: str = ""
    #: What the numbers say beyond the verdict, read from them (an interval against its test, a rate at its limit), or
    #: "".
    remark: str = ""

    @property
    def summary(self) -> pd.DataFrame:
        return estimability.honest_frame(self.table, infinite=self.infinite)

    @property
    def verdict_class(self) -> str:
        return estimability.verdict_class(self.verdict)

    @property
    def reason(self) -> str:
        v = self.verdict
        return v[len(estimability.NOT_ESTIMABLE) + 2 : -1] if estimability.is_not_estimable(v) else ""

    def to_latex(self, **kwargs: Any) -> str:
        return str(self.summary.to_latex(index=False, float_format="%.3f", **kwargs))

    def row(self) -> dict[str, Any]:
        return {
            "hypothesis": self.id,
            "statement": self.statement,
            "criterion": self.criterion,
            "estimate": self.estimate,
            "interval": self.interval,
            "test": self.test,
            "verdict": self.verdict,
            "failing": "; ".join(self.failing),
            "remark": self.remark,
            "verdict_class": self.verdict_class,
            "reason": self.reason,
        }


#: A cell where no test or count applies (an index has no p-value), as distinct from "not estimable (reason)".
NOT_APPLICABLE = "n/a"


MINUS = "\u2212"


def shown(value: object, digits: int = 3) -> str:
    """A number as a verdict's text prints it: fixed decimals, a true minus, ``∞`` for an infinite ratio, "not
    estimable" when missing."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value) if value not in (None, "") else "not estimable"
    if np.isnan(x):
        return "not estimable"
    if np.isinf(x):
        return "\u221e" if x > 0 else MINUS + "\u221e"
    text = f"{abs(x):.{digits}f}"
    return (MINUS if x < 0 and float(text) != 0 else "") + text


def shown_interval(low: object, high: object, digits: int = 3) -> str:
    """ "low to high", or "not estimable" when either end is missing (an infinite end stays ∞)."""
    ends = [shown(low, digits), shown(high, digits)]
    return "not estimable" if "not estimable" in ends else f"{ends[0]} to {ends[1]}"


def shown_p(value: object, name: str = "p") -> str:
    """A p-value in words: "p = 0.123", "p < 0.001", or "p not estimable"."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"{name} {value}" if value not in (None, "") else f"{name} not estimable"
    if np.isnan(x):
        return f"{name} not estimable"
    return f"{name} < 0.001" if x < 0.001 else f"{name} = {x:.3f}"


def _exact(value: float) -> float:
    """A rate or index as the ratio of counts it is: rounded to 12 decimals, so 1/10 computed as 0.09999999999999999
    meets a threshold of 0.1 as 0.1."""
    return round(float(value), 12)


def _judge(*parts: tuple[str, tuple[bool | None, str]]) -> tuple[str, tuple[str, ...]]:
    """The verdict of a conjunction of named parts, and the parts known to fail (named in words with their numbers)."""
    return estimability.all_of(*(c for _, c in parts)), tuple(words for words, (ok, _) in parts if ok is False)


def _primary(df: pd.DataFrame, result: PrimaryResult | None, seed: int, **kw: Any) -> PrimaryResult:
    return result if result is not None else primary.primary_analysis(df, seed=seed, **kw)


def _contrast_row(res: PrimaryResult, name: str, p_col: str) -> pd.DataFrame:
    r = res.contrast(name)
    t, c = name.split("-")
    # The column is named for the p it holds, so a Holm-adjusted p is headed as one wherever the table is printed.
    return pd.DataFrame(
        [
            {
                "quantity": f"p({t}) - p({c})",
                "estimate": r.estimate,
                "ci_low": r.ci_low,
                "ci_high": r.ci_high,
                p_col: r[p_col],
                "n_scenarios": int(r.n_scenarios),
                "note": r.note,
            }
        ]
    )


def _known(value: float, reason: str) -> tuple[bool | None, str]:
    """Whether a number is there to judge (None with the reason when it is not)."""
    return (True, "") if estimability.known(value) else (None, reason)


def _cond(value: float, test: Callable[[float], bool], reason: str) -> tuple[bool | None, str]:
    """A condition on a number: its truth, or None (with the reason) when the number is not estimable."""
    return (bool(test(value)), "") if estimability.known(value) else (None, reason)


def _contrast_verdict(
    r: pd.Series, p: float, alpha: float, name: str, adjusted: str = ""
) -> tuple[str, tuple[str, ...]]:
    why = estimability.first_reason(str(r.note)) or "no estimate"
    p_name = f"the {adjusted}p-value" if adjusted else "the sign-flip p-value"
    return _judge(
        (f"the estimate {shown(r.estimate)} is not above 0", _cond(r.estimate, lambda v: v > 0, f"{name}: {why}")),
        (
            f"{p_name} {shown(p)} is not below {alpha:g}",
            _cond(
                p,
                lambda v: v < alpha,
                f"{name}: {why}" if not estimability.known(r.estimate) else f"{name}: no {adjusted}p-value",
            ),
        ),
    )


class _Headline(TypedDict):
    estimate: str
    interval: str
    test: str
    remark: str


def _contrast_headline(r: pd.Series, p: float, p_name: str, alpha: float, level: float) -> _Headline:
    return {
        "estimate": shown(r.estimate),
        "interval": shown_interval(r.ci_low, r.ci_high),
        "test": shown_p(p, p_name),
        "remark": _contrast_remark(r, p, p_name, alpha, level),
    }


def _interval_against_test(
    low: float, high: float, p: float, p_name: str, alpha: float, level: float, nonzero: int | None = None
) -> str:
    """A sentence when a percentile interval excludes zero while its test's p-value is not below alpha (else "")."""
    if (
        not (estimability.known(low) and estimability.known(high) and estimability.known(p))
        or not (low > 0 or high < 0)
        or p < alpha
    ):
        return ""
    pct = f"nominal {level:.0%}"
    return (
        f"The {pct} percentile interval ({shown(low)} to {shown(high)}) excludes zero while the {p_name} "
        f"({shown(p)}) is not below {alpha:g}. The two do not answer the same question: the sign-flip test "
        "is exact under its null at any number of scenarios, but a scenario whose value is zero carries "
        "no sign, and with k scenarios of non-zero value the smallest p-value it can reach is 2 divided "
        "by 2 to the power k"
        + (
            f" (here k = {nonzero}, so p cannot fall below {min(1.0, 2 / 2**nonzero):.3f})"
            if nonzero is not None
            else ""
        )
        + "; the percentile interval can cover less often than its nominal level with few scenarios, as the "
        "calibration appendix measures. The criterion rests on the test."
    )


def _contrast_remark(r: pd.Series, p: float, p_name: str, alpha: float, level: float) -> str:
    """What a contrast's interval says beside its test, from the numbers."""
    if not (estimability.known(r.ci_low) and estimability.known(r.ci_high)):
        return ""
    lo, hi, pct = shown(r.ci_low), shown(r.ci_high), f"nominal {level:.0%}"
    discord = _interval_against_test(r.ci_low, r.ci_high, p, p_name, alpha, level)
    if discord:
        return discord
    if r.ci_low <= 0 <= r.ci_high:
        return (
            f"The {pct} interval runs from {lo} to {hi} and includes zero: this table is compatible with "
            "no difference and with differences as large as "
            f"{lo if abs(r.ci_low) > abs(r.ci_high) else hi}; it neither shows the effect nor rules it out."
        )
    return f"The {pct} interval ({lo} to {hi}) lies on one side of zero."


def h1(
    df: pd.DataFrame,
    *,
    result: PrimaryResult | None = None,
    seed: int = 0,
    study: protocol.Study | None = None,
    **kw: Any,
) -> HypothesisResult:
    """H1 (primary): the computer-use premium p(A3) - p(A1) > 0."""
    study = study or protocol.study()
    res = _primary(df, result, seed, study=study, **kw)
    name = estimators.contrast_name(study.hypothesis_contrast("H1").arms)
    r = res.contrast(name)
    alpha = 1 - res.settings.level
    verdict, failing = _contrast_verdict(r, r.p_value, alpha, name)
    return HypothesisResult(
        "H1",
        f"computer-use premium {name} > 0",
        f"estimate > 0 and sign-flip p < {alpha:g} (two-sided)",
        _contrast_row(res, name, "p_value"),
        verdict,
        failing=failing,
        **_contrast_headline(r, r.p_value, "sign-flip p", alpha, res.settings.level),
    )


def h2(
    df: pd.DataFrame,
    *,
    result: PrimaryResult | None = None,
    seed: int = 0,
    study: protocol.Study | None = None,
    **kw: Any,
) -> HypothesisResult:
    """H2: the shell premium p(A1) - p(A0) > 0 (Holm-adjusted over the secondary family of three)."""
    study = study or protocol.study()
    res = _primary(df, result, seed, study=study, **kw)
    name = estimators.contrast_name(study.hypothesis_contrast("H2").arms)
    r = res.contrast(name)
    alpha = 1 - res.settings.level
    verdict, failing = _contrast_verdict(r, r.p_holm, alpha, name, "Holm-adjusted ")
    return HypothesisResult(
        "H2",
        f"shell premium {name} > 0",
        f"estimate > 0 and Holm-adjusted p < {alpha:g}",
        _contrast_row(res, name, "p_holm"),
        verdict,
        failing=failing,
        **_contrast_headline(r, r.p_holm, "Holm-adjusted p", alpha, res.settings.level),
    )


def h3(
    df: pd.DataFrame,
    *,
    result: PrimaryResult | None = None,
    seed: int = 0,
    study: protocol.Study | None = None,
    **kw: Any,
) -> HypothesisResult:
    """H3: the self-repair premium p(A4) - p(A3) >= 0 and an Autonomous Recovery Index above one half."""
    study = study or protocol.study()
    res = _primary(df, result, seed, study=study, **kw)
    name = estimators.contrast_name(study.hypothesis_contrast("H3").arms)
    r = res.contrast(name)
    ari = sensitivity.recovery_index(df, seed=seed, study=study, B=res.settings.B).table.set_index("index").loc["ARI"]
    table = pd.concat(
        [
            _contrast_row(res, name, "p_holm"),
            pd.DataFrame(
                [
                    {
                        "quantity": f"ARI ({int(ari.recovered)}/{int(ari.eligible)} eligible runs)",
                        "estimate": ari.estimate,
                        "ci_low": ari.ci_low,
                        "ci_high": ari.ci_high,
                        "p_holm": NOT_APPLICABLE,
                        "n_scenarios": NOT_APPLICABLE,
                        "note": ari.note or "no test: a descriptive index over runs",
                    }
                ]
            ),
        ],
        ignore_index=True,
    )
    ari_min = float(study["hypotheses"]["ari_min"])
    verdict, failing = _judge(
        (
            f"the premium {shown(r.estimate)} is below 0",
            _cond(r.estimate, lambda v: v >= 0, f"{name}: {estimability.first_reason(str(r.note)) or 'no estimate'}"),
        ),
        (
            f"the ARI {shown(ari.estimate)} is not above {ari_min:g}",
            _cond(
                ari.estimate,
                lambda v: _exact(v) > ari_min,
                f"ARI: {estimability.first_reason(str(ari.note)) or 'no estimate'}",
            ),
        ),
    )
    return HypothesisResult(
        "H3",
        f"self-repair premium {name} >= 0 and ARI > {ari_min:g}",
        f"premium estimate >= 0 and ARI estimate > {ari_min:g}",
        table,
        verdict,
        failing=failing,
        estimate=f"premium {shown(r.estimate)}; ARI {shown(ari.estimate)}",
        interval=f"{shown_interval(r.ci_low, r.ci_high)}; {shown_interval(ari.ci_low, ari.ci_high)}",
        test=f"{shown_p(r.p_holm, 'Holm-adjusted p')}; ARI {NOT_APPLICABLE}",
        remark=(
            f"The ARI counts {int(ari.recovered)} of {int(ari.eligible)} eligible runs (a first session "
            "that failed its self-check, was capped or ended in an error) that passed the self-check "
            "after the one recovery; "
            + (
                "the premium is a difference of acceptance, which the recovery can raise only in those runs."
                if int(ari.eligible)
                else "with no eligible run the index has nothing to count."
            )
        ),
    )


def h4(df: pd.DataFrame, *, study: protocol.Study | None = None) -> HypothesisResult:
    """H4: acceptance decreasing within arm in designed depth and in realised tool calls.

    A logistic regression of S on arm, designed depth and log(1 + tool calls)
    (both standardised over the scored runs), clustered by scenario; an arm
    whose scored runs are all accepted or all not accepted carries no
    information on a within-arm slope and is left out of the pooled fit (its
    intercept would be infinite). Rows per arm give the same slopes fitted
    within each arm. Every fit is checked for separation, convergence and
    exploding coefficients first (:mod:`pilot.stats.logistic`). The verdict
    needs evidence: both pooled slopes negative with 95% intervals below zero.
    """
    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    level = InferenceSettings.from_study(0, study).level
    S = estimators.acceptance_values(rows, study.q)
    keep = ~np.isnan(S)
    depth = rows["designed_depth"].to_numpy(dtype=float)
    tc = np.log1p(rows["tool_calls"].to_numpy(dtype=float))

    def z(v: np.ndarray) -> np.ndarray:
        if not keep.any():
            return v
        sd = v[keep].std()
        out: np.ndarray = (v - v[keep].mean()) / (sd if sd > 0 else 1.0)
        return out

    depth_z, tc_z = z(depth), z(tc)
    layout = Layout.of(rows, study.arms)
    arm = rows["arm"].to_numpy()
    terms = ["depth", "tool_calls"]
    # The names a fit's messages use (a separation note names its terms in words).
    words = {"depth": "designed depth", "tool_calls": "log(1 + tool calls)"}

    def row(model: str, mask: np.ndarray, with_arms: bool) -> tuple[dict[str, Any], logistic.LogitFit]:
        informative = [a for a in layout.arms if (mask & (arm == a)).any() and np.ptp(S[mask & (arm == a)]) > 0]
        left_out = [a for a in layout.arms if (mask & (arm == a)).any() and a not in informative]
        m = mask & np.isin(arm, informative) if with_arms else mask
        cols = [np.ones(m.sum()), depth_z[m], tc_z[m]]
        names = ["intercept", *(words[t] for t in terms)]
        if with_arms:
            cols += [(arm[m] == a).astype(float) for a in informative[1:]]
            names += [f"arm {a}" for a in informative[1:]]
        if not m.any():
            fit = logistic.unestimable_fit(
                names, "no scored run" if not mask.any() else "every arm at 0% or 100% acceptance", 0, 0
            )
        else:
            fit = logistic.fit(S[m], np.column_stack(cols), names, layout.j[m], level=level)
        rec: dict[str, Any] = {"model": model}
        for t in terms:
            k = names.index(words[t])
            rec.update(
                {
                    f"{t}_slope": fit.coef[k],
                    f"{t}_ci_low": fit.ci_low[k],
                    f"{t}_ci_high": fit.ci_high[k],
                    f"{t}_p": fit.p_value[k],
                    f"{t}_p_t": fit.p_t[k],
                }
            )
        why = estimability.join_notes(*(fit.reasons[names.index(words[t])] for t in terms))
        rec["n_runs"] = int(m.sum())
        rec["note"] = estimability.join_notes(
            why, f"left out (0% or 100% acceptance): {', '.join(left_out)}" if with_arms and left_out else ""
        )
        return rec, fit

    pooled, fit = row("all arms (arm effects)", keep, True)
    out = [pooled]
    for a in layout.arms:
        rec, _ = row(a, keep & (arm == a), False)
        if not (keep & (arm == a)).any():
            rec["note"] = f"no scored run in {a}" if (arm == a).any() else f"no run in {a}"
        out.append(rec)
    table = pd.DataFrame(out)
    why = estimability.first_reason(str(pooled["note"])) or "no estimate"
    verdict, failing = _judge(
        (
            f"the depth slope's upper limit {shown(pooled['depth_ci_high'])} is not below 0",
            _cond(pooled["depth_ci_high"], lambda v: v < 0, f"pooled fit: {why}"),
        ),
        (
            f"the tool-call slope's upper limit {shown(pooled['tool_calls_ci_high'])} is not below 0",
            _cond(pooled["tool_calls_ci_high"], lambda v: v < 0, f"pooled fit: {why}"),
        ),
    )
    return HypothesisResult(
        "H4",
        "acceptance falls within arm with designed depth and realised tool calls",
        f"both pooled slopes (log-odds per SD, clustered by scenario) negative with nominal {level:.0%} Wald "
        "intervals below zero",
        table,
        verdict,
        failing=failing,
        estimate=f"depth {shown(pooled['depth_slope'])}; tool calls {shown(pooled['tool_calls_slope'])}",
        interval=(
            f"{shown_interval(pooled['depth_ci_low'], pooled['depth_ci_high'])}; "
            f"{shown_interval(pooled['tool_calls_ci_low'], pooled['tool_calls_ci_high'])}"
        ),
        test=f"cluster-robust Wald {shown_p(pooled['depth_p'])}; {shown_p(pooled['tool_calls_p'])}",
        remark=(
            f"The pooled fit uses {int(pooled['n_runs'])} scored runs"
            + (f" ({pooled['note']})" if pooled["note"] else "")
            + "; tool calls are realised, not assigned, so their slope describes an association, not an "
            "effect of tool use."
        ),
    )


def h5(
    df: pd.DataFrame,
    *,
    seed: int = 0,
    study: protocol.Study | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
    limit: float | None = None,
    arms: dict[str, protocol.Arm] | None = None,
) -> HypothesisResult:
    """H5: critical-violation rate below the protocol's limit (``hypotheses.violation_rate_max``, 10%) in every arm and
    not increasing with tool access.

    Per arm: the scenario-weighted rate of E with its bootstrap interval. Trend:
    within each scenario, the least-squares slope of the arms' violation rates
    on their access rank (``access_rank`` of ``arms``, by default arms.yml's: A0=0 ... A4=4); its mean
    over scenarios with a bootstrap interval and a sign-flip p-value. E needs no
    judge, so H5 stays estimable without judges; an arm without runs leaves
    "every arm" unjudgeable unless another arm already breaks the limit.
    """
    study = study or protocol.study()
    limit = float(study["hypotheses"]["violation_rate_max"]) if limit is None else limit
    settings = InferenceSettings.from_study(seed, study, B=B, n_permutations=n_permutations)
    rows = runtable.primary_rows(df, study)
    layout = Layout.of(rows, study.arms)
    means = layout.means(rows["E"].to_numpy(dtype=float))
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 19]), layout.J, settings.B)
    w = layout.weights("equal")
    est = estimators.arm_means(means, w)
    lo, hi = resampling.percentile_interval(resampling.bootstrap_means(means, counts, w), settings.level)
    arms = arms if arms is not None else protocol.arms()
    rank = np.array([arms[a].access_rank for a in layout.arms], dtype=float)
    slopes = np.array([_slope(rank, m) for m in means])
    s_est = float(resampling.weighted_mean(slopes, w))
    s_lo, s_hi = (
        float(v) for v in resampling.percentile_interval(resampling.bootstrap_means(slopes, counts, w), settings.level)
    )
    test = resampling.sign_flip_test(
        slopes, weights=w, n_permutations=settings.n_permutations, rng=np.random.default_rng([settings.seed, 23])
    )
    n_scen = [*(~np.isnan(means)).sum(axis=0), int((~np.isnan(slopes)).sum())]
    flags = estimability.interval_flags([*lo, s_lo], [*hi, s_hi], n_scen)
    reasons = [f"no run in {a}" for a in layout.arms] + ["no scenario with runs in two arms"]
    # An end of the slope's percentile interval on a value many scenarios share says nothing about that value.
    lattice = small_sample.lattice_flag(float(np.ravel(s_lo)[0]), float(np.ravel(s_hi)[0]), slopes, settings.level)
    flags[-1] = estimability.join_notes(flags[-1], lattice)
    notes = [estimability.join_notes(reasons[i] if n_scen[i] == 0 else "", flags[i]) for i in range(len(n_scen))]
    table = pd.DataFrame(
        {
            "quantity": [f"violation rate {a}" for a in layout.arms] + ["slope per access step"],
            "estimate": [*est, s_est],
            "ci_low": [*lo, s_lo],
            "ci_high": [*hi, s_hi],
            "p_value": [NOT_APPLICABLE] * layout.A + [float(test.p_value[0])],
            "n_scenarios": n_scen,
            "note": notes,
        }
    )
    table.loc[: layout.A - 1, "note"] = [
        estimability.join_notes(n, "no p-value: descriptive rate") for n in table["note"].iloc[: layout.A]
    ]
    alpha = 1 - settings.level
    slope_p = float(test.p_value[0])
    verdict, failing = _judge(
        *(
            (f"{a}'s rate {shown(e)} is not below {limit:g}", _cond(e, lambda v: _exact(v) < limit, f"no run in {a}"))
            for a, e in zip(layout.arms, est, strict=True)
        ),
        (
            f"the slope {shown(s_est)} is positive with sign-flip p {shown(slope_p)} below {alpha:g}",
            _cond(s_est, lambda v: not (v > 0 and slope_p < alpha), "trend: no scenario with runs in two arms"),
        ),
    )
    known_rates = [
        (a, e, l_, h_) for a, e, l_, h_ in zip(layout.arms, est, lo, hi, strict=True) if estimability.known(e)
    ]
    top = max(known_rates, key=lambda t: t[1]) if known_rates else None
    return HypothesisResult(
        "H5",
        f"critical-violation rate below {limit:.0%} in every arm, not rising with access",
        f"every arm's rate < {limit:g}; slope not significantly positive (sign-flip p >= {alpha:g} or slope <= 0)",
        table,
        verdict,
        failing=failing,
        estimate=(f"highest rate {shown(top[1])} ({top[0]}); " if top else "highest rate not estimable; ")
        + f"slope {shown(s_est)}",
        interval=(f"{shown_interval(top[2], top[3])}; " if top else "")
        + shown_interval(s_lo, s_hi)
        + (" (an end on a lattice point: not read against zero)" if lattice else ""),
        test=f"slope: {shown_p(slope_p, 'sign-flip p')}",
        remark=" ".join(
            [
                *(
                    f"{a}'s rate equals the limit of {limit:g} exactly; the criterion is strict (below), "
                    f"so {a} fails it by the smallest margin a rate can."
                    for a, e in zip(layout.arms, est, strict=True)
                    if estimability.known(e) and _exact(e) == limit
                ),
                (
                    f"The slope's percentile interval is not read against zero: {lattice}."
                    if lattice
                    else _interval_against_test(
                        s_lo,
                        s_hi,
                        slope_p,
                        "slope's sign-flip p-value",
                        alpha,
                        settings.level,
                        nonzero=int((np.abs(slopes[~np.isnan(slopes)]) > 1e-12).sum()),
                    )
                ),
            ]
        ).strip(),
    )


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    ok = ~np.isnan(y)
    if ok.sum() < 2:
        return np.nan
    xc = x[ok] - x[ok].mean()
    return float((xc * (y[ok] - y[ok].mean())).sum() / (xc**2).sum())


def h6(
    df: pd.DataFrame,
    *,
    seed: int = 0,
    study: protocol.Study | None = None,
    B: int | None = None,
    expected: tuple[str, ...] = ("A1", "A3"),
) -> HypothesisResult:
    """H6: cost per accepted deliverable lowest in A1 or A3, not in A0 (joint ratio bootstrap).

    The lowest point estimate among the arms with an estimate decides. When
    every arm's ratio is infinite (no accepted run anywhere) no arm is lowest
    and the verdict is not estimable; so is it when A0 or an expected arm has
    no estimate (the comparison the hypothesis makes cannot be made). Ties for
    the lowest finite ratio count as consistent only if every tied arm is expected.
    """
    res = sensitivity.cost_per_accepted(df, seed=seed, study=study, B=B)
    t = res.table
    # How many runs of each arm are charged at the ledger's charge for want of a reported cost (interpretations.md, Cost
    # of a run).
    table = t[["arm", "cost_per_accepted", "ci_low", "ci_high", "share_lowest", "n_charged", "note"]].copy()
    est = t.set_index("arm")["cost_per_accepted"]
    notes = t.set_index("arm")["note"]
    needed = [a for a in (*expected, "A0") if a in est.index]
    missing = [a for a in needed if np.isnan(est[a])]
    finite = est[np.isfinite(est)]
    share = float(t.loc[t["arm"].isin(expected), "share_lowest"].sum())
    if missing:
        verdict = estimability.not_estimable(
            "; ".join(f"{a}: {estimability.first_reason(str(notes[a])) or 'no estimate'}" for a in missing)
        )
    elif finite.empty:
        verdict = estimability.not_estimable(
            "every arm's cost per accepted deliverable is infinite (no accepted run in any arm)"
        )
    else:
        lowest = finite[finite == finite.min()].index.tolist()
        verdict = estimability.verdict(all(a in expected for a in lowest))
    lowest = finite[finite == finite.min()].index.tolist() if not finite.empty else []
    failing = (
        (f"the lowest cost per accepted deliverable is in {' and '.join(lowest)}",)
        if verdict == estimability.NOT_CONSISTENT
        else ()
    )
    by_arm = t.set_index("arm")
    n_charged = int(table["n_charged"].sum())
    return HypothesisResult(
        "H6",
        f"cost per accepted deliverable lowest in {' or '.join(expected)}, not A0",
        (
            f"lowest finite point estimate in {' or '.join(expected)} (share of resamples with the lowest in "
            f"{'/'.join(expected)}: {share:.2f})"
        ),
        table,
        verdict,
        infinite=("cost_per_accepted", "ci_low", "ci_high"),
        failing=failing,
        estimate=(
            f"lowest {' and '.join(lowest)}: ${shown(finite.min(), 2)}"
            if lowest
            else "no finite cost per accepted deliverable"
        ),
        interval="; ".join(shown_interval(by_arm.loc[a, "ci_low"], by_arm.loc[a, "ci_high"], 2) for a in lowest)
        or "not estimable",
        test=f"share of resamples lowest in {'/'.join(expected)}: {share:.2f}",
        remark=(
            f"In {share:.0%} of the joint bootstrap resamples the cheapest arm per accepted deliverable "
            f"was {' or '.join(expected)}; "
            + (
                f"{n_charged} run without a reported cost is"
                if n_charged == 1
                else f"{n_charged} runs without a reported cost are"
            )
            + " charged at the ledger's charge."
        ),
    )


def h7(df: pd.DataFrame, *, study: protocol.Study | None = None) -> HypothesisResult:
    """H7 (exploratory): heterogeneity across occupations, read two ways.

    Acceptance: each occupation's share of accepted runs over all arms, and
    Pearson's chi-square test of accepted x occupation over the scored runs.
    The premium: per occupation, the primary contrast (difference of repeat
    means) and its standard error from the two arms' binomial repeat means
    (with a half-run continuity correction so a 0/R or R/R cell has a
    variance); Cochran's Q over occupations with its chi-square p and I^2.
    No occupation-level claim is confirmatory.
    """
    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    layout = Layout.of(rows, study.arms)
    treated, control = study.primary_contrast.arms
    S = estimators.acceptance_values(rows, study.q)
    sums, n = layout.sums(S)
    t, c = layout.arm_index(treated), layout.arm_index(control)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_t, p_c = sums[:, t] / n[:, t], sums[:, c] / n[:, c]
        pt_cc, pc_cc = (sums[:, t] + 0.5) / (n[:, t] + 1), (sums[:, c] + 0.5) / (n[:, c] + 1)
        var = pt_cc * (1 - pt_cc) / n[:, t] + pc_cc * (1 - pc_cc) / n[:, c]
    d = p_t - p_c
    ok = ~np.isnan(d) & np.isfinite(var)
    dfree = int(ok.sum() - 1)
    if ok.any():
        wts = 1 / var[ok]
        pooled = float((wts * d[ok]).sum() / wts.sum())
        Qc = float((wts * (d[ok] - pooled) ** 2).sum())
    else:
        pooled, Qc = np.nan, np.nan
    p_het = float(sps.chi2.sf(Qc, dfree)) if dfree > 0 else np.nan
    i2 = (max(0.0, (Qc - dfree) / Qc) if Qc > 0 else 0.0) if dfree > 0 else np.nan
    scen_note = [
        ""
        if k
        else (f"no scored run in {' and '.join(a for a, n_a in ((treated, n[j, t]), (control, n[j, c])) if n_a == 0)}")
        for j, k in enumerate(ok)
    ]
    acc = np.array([np.nansum(S[(layout.j == j)]) for j in range(layout.J)], dtype=float)
    scored = np.array([int((~np.isnan(S[layout.j == j])).sum()) for j in range(layout.J)], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = acc / scored
    has = scored > 0
    if has.sum() >= 2 and 0 < acc[has].sum() < scored[has].sum():
        chi2, p_acc, dof_acc, _ = sps.chi2_contingency(
            np.column_stack([acc[has], scored[has] - acc[has]]), correction=False
        )
        acc_why = ""
    else:
        chi2, p_acc, dof_acc = np.nan, np.nan, max(int(has.sum()) - 1, 0)
        acc_why = (
            "needs two occupations with scored runs" if has.sum() < 2 else "every scored run has the same acceptance"
        )
    table = pd.DataFrame(
        {
            "occupation": layout.occupation,
            "scenario": layout.scenarios,
            "share_accepted": share,
            f"p_{treated}": p_t,
            f"p_{control}": p_c,
            "premium": d,
            "se": np.sqrt(var),
            "note": scen_note,
        }
    )
    het_why = "needs two scenarios with a premium" if dfree <= 0 else ""
    pooled_why = "no scenario with scored runs in both arms" if not ok.any() else ""

    def fmt(v: float, why: str, spec: str) -> str:
        return f"{v:{spec}}" if np.isfinite(v) else estimability.not_estimable(why)

    acc_text = f"acceptance: chi2 = {fmt(chi2, acc_why, '.2f')} (df {int(dof_acc)}), p = {fmt(p_acc, acc_why, '.3f')}"
    text = (
        f"premium: Cochran Q = {fmt(Qc, het_why, '.2f')} (df {max(dfree, 0)}), p = {fmt(p_het, het_why, '.3f')}, "
        f"I2 = {fmt(i2, het_why, '.2f')}, around the inverse-variance weighted premium {shown(pooled)}"
    )
    # The premium this table reports is the preregistered estimand (equal scenario weights); the inverse-variance
    # weighted mean is only the centre Cochran's Q is taken around, named as such wherever it is printed.
    equal_premium = float(np.mean(d[~np.isnan(d)])) if (~np.isnan(d)).any() else np.nan
    pooled_share = float(acc[has].sum() / scored[has].sum()) if has.any() else np.nan
    table = pd.concat(
        [
            table.astype({"share_accepted": object, f"p_{treated}": object, f"p_{control}": object, "se": object}),
            pd.DataFrame(
                [
                    {
                        "occupation": f"{acc_text}; {text}",
                        "scenario": "pooled",
                        "share_accepted": pooled_share,
                        f"p_{treated}": "",
                        f"p_{control}": "",
                        "premium": equal_premium,
                        "se": "",
                        "note": estimability.join_notes(pooled_why, "equal weights"),
                    }
                ]
            ),
        ],
        ignore_index=True,
    )
    spread = f"{shown(np.nanmin(share[has]))} to {shown(np.nanmax(share[has]))}" if has.any() else "not estimable"
    return HypothesisResult(
        "H7",
        "heterogeneity across occupations, in acceptance and in the premium (exploratory)",
        (
            "descriptive; chi-square of acceptance by occupation and Cochran's Q of the premium reported, no "
            "confirmatory claim"
        ),
        table,
        "exploratory",
        exploratory=True,
        estimate=(
            f"acceptance {spread} across occupations; premium {shown(equal_premium)} (equal weights, as the primary "
            f"contrast); inverse-variance weighted {shown(pooled)} (descriptive)"
        ),
        interval=NOT_APPLICABLE,
        test=(
            f"acceptance: {shown_p(p_acc, 'chi-square p')}; premium: {shown_p(p_het, 'Cochran p')}, I² = {shown(i2, 2)}"
        ),
        remark=(
            "Each occupation is one scenario, so occupation and scenario cannot be told apart; with "
            f"{int(has.sum())} occupations these numbers describe this table and support no claim about an "
            "occupation."
        ),
    )


def all_hypotheses(
    df: pd.DataFrame,
    *,
    seed: int = 0,
    study: protocol.Study | None = None,
    result: PrimaryResult | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
) -> list[HypothesisResult]:
    """H1-H7 on one run table, sharing the primary analysis."""
    study = study or protocol.study()
    res = _primary(df, result, seed, study=study, B=B, n_permutations=n_permutations)
    return [
        h1(df, result=res, study=study),
        h2(df, result=res, study=study),
        h3(df, result=res, seed=seed, study=study),
        h4(df, study=study),
        h5(df, seed=seed, study=study, B=B, n_permutations=n_permutations),
        h6(df, seed=seed, study=study, B=B),
        h7(df, study=study),
    ]


def overview(results: list[HypothesisResult]) -> pd.DataFrame:
    """One row per hypothesis: statement, criterion, verdict."""
    return pd.DataFrame([r.row() for r in results])
