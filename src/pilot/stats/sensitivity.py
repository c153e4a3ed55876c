"""Sensitivity analyses and secondary endpoints.

Each function takes a validated run table and returns a result object with
a ``summary`` DataFrame: the q grid, professional-minutes weights, a
cluster-robust logistic regression (statsmodels), Kaplan-Meier curves of
time to completion with cap-censored runs (lifelines) and log-rank tests,
joint bootstraps of cost per accepted deliverable, the acceptance frontiers
over budgets and human-time allowances, the Autonomous Recovery Index of A4,
and the agreement of the three judges (Krippendorff's alpha, ordinal).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from pilot import protocol, runtable
from pilot.stats import estimability, estimators, logistic, primary, resampling, small_sample
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings


@dataclass
class TableResult:
    """A named result: ``table`` holds the numbers (NaN where nothing can be estimated, the reason in
    its ``note`` column); ``summary`` is what is reported: each value a number, ``∞`` (only in the
    ``infinite`` columns) or ``not estimable (reason)``; it renders to LaTeX."""

    name: str
    table: pd.DataFrame
    details: dict[str, Any] = field(default_factory=dict, repr=False)
    infinite: tuple[str, ...] = ()

    @property
    def summary(self) -> pd.DataFrame:
        return estimability.honest_frame(self.table, infinite=self.infinite)

    def to_latex(self, **kwargs: Any) -> str:
        return str(self.summary.to_latex(index=False, float_format="%.3f", **kwargs))


def _setup(df: pd.DataFrame, study: protocol.Study | None) -> tuple[protocol.Study, pd.DataFrame, Layout]:
    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    return study, rows, Layout.of(rows, study.arms)


# --------------------------------------------------------------------------
# q grid and weights
# --------------------------------------------------------------------------


def q_grid(
    df: pd.DataFrame,
    *,
    seed: int = 0,
    study: protocol.Study | None = None,
    grid: Sequence[float] | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
) -> TableResult:
    """Every contrast and arm acceptance at each threshold q of the preregistered grid (50..90)."""
    study, rows, layout = _setup(df, study)
    settings = InferenceSettings.from_study(seed, study, B=B, n_permutations=n_permutations)
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 2]), layout.J, settings.B)
    signs, _ = resampling.sign_vectors(layout.J, settings.n_permutations, np.random.default_rng([settings.seed, 1]))
    w = layout.weights("equal")
    out, arms = [], []
    for q in grid or study["outcomes"]["q_grid"]:
        means = layout.means(estimators.acceptance_values(rows, q))
        tab, _ = primary.contrast_table(
            means,
            layout,
            study.contrasts,
            w,
            settings,
            counts=counts,
            signs=signs,
            adjustment=study["inference"]["secondary_adjustment"],
        )
        out.append(tab.assign(q=float(q)))
        arms.append(pd.DataFrame({"q": float(q), "arm": layout.arms, "p_hat": estimators.arm_means(means, w)}))
    table = pd.concat(out, ignore_index=True)[
        ["q", "contrast", "role", "estimate", "ci_low", "ci_high", "p_value", "p_holm", "n_scenarios", "note"]
    ]
    acc = pd.concat(arms, ignore_index=True)
    acc["note"] = np.where(np.isnan(acc["p_hat"]), "no scored run", "")
    return TableResult("q_grid", table, {"acceptance": acc})


def minutes_weighted(
    df: pd.DataFrame,
    *,
    seed: int = 0,
    study: protocol.Study | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
) -> primary.PrimaryResult:
    """The primary analysis with professional-minutes weights."""
    return primary.primary_analysis(df, seed=seed, weights="minutes", study=study, B=B, n_permutations=n_permutations)


def small_sample_contrasts(
    df: pd.DataFrame,
    *,
    seed: int = 0,
    study: protocol.Study | None = None,
    result: primary.PrimaryResult | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
) -> TableResult:
    """Each preregistered contrast with its preregistered interval and test beside two small-sample readings.

    The studentised interval (t with J - 1 degrees of freedom) and the wild
    cluster bootstrap-t (Rademacher weights over every sign vector at J <= 14,
    Webb's six-point weights drawn with the stage's seed beyond; interval WCU,
    p-value WCR) of the same mean of scenario differences
    (:mod:`pilot.stats.small_sample`). Sensitivities only: every verdict rests
    on the preregistered percentile interval and sign-flip test.
    """
    study, rows, layout = _setup(df, study)
    res = (
        result
        if result is not None
        else primary.primary_analysis(df, seed=seed, study=study, B=B, n_permutations=n_permutations)
    )
    level = res.settings.level
    means = layout.means(estimators.acceptance_values(rows, study.q))
    d = estimators.contrast_differences(means, layout, study.contrasts)
    w = layout.weights("equal")
    out, kinds = [], []
    for k, pair in enumerate(study.contrasts):
        name = estimators.contrast_name(pair)
        pre = res.contrast(name)
        t_lo, t_hi = small_sample.t_interval(d[:, k], w, level)
        wild = small_sample.wild_cluster_bootstrap(
            d[:, k], w, level, rng=np.random.default_rng([res.settings.seed, 29, k])
        )
        n_scen = int((~np.isnan(d[:, k])).sum())
        kinds.append(wild.weights)
        out.append(
            {
                "contrast": name,
                "estimate": float(pre.estimate),
                "pct_low": float(pre.ci_low),
                "pct_high": float(pre.ci_high),
                "t_low": t_lo,
                "t_high": t_hi,
                "wild_low": wild.ci_low,
                "wild_high": wild.ci_high,
                "p_sign_flip": float(pre.p_value),
                "p_wild": wild.p_value,
                "n_scenarios": n_scen,
                "note": estimability.join_notes(
                    str(pre.note or ""),
                    "fewer than two scenarios: no studentised reading" if n_scen < 2 else "",
                ),
            }
        )
    weights = "; ".join(dict.fromkeys(k for k in kinds if k))
    return TableResult("small_sample_contrasts", pd.DataFrame(out), {"wild_weights": weights, "level": level})


# --------------------------------------------------------------------------
# Cluster-robust logistic regression
# --------------------------------------------------------------------------


def logistic_cluster(
    df: pd.DataFrame, *, study: protocol.Study | None = None, reference: str | None = None, firth: bool = True
) -> TableResult:
    """Logistic regression of S on arm, standard errors clustered by scenario (statsmodels GLM).

    Rows are the arms' log-odds ratios against ``reference`` (the primary
    contrast's control arm by default), with odds ratios and 95% intervals,
    and beside them the same Wald statistics read against t(G - 1) (``p_t``,
    ``or_ci_t_*``), a small-sample sensitivity.
    An arm whose scored runs are all accepted or all not accepted separates
    the data: its odds ratio has no finite estimate, so its term is reported
    as not estimable and the model is fitted on the other arms (every term is
    not estimable when the reference arm separates). ``details["firth"]``
    holds an exploratory penalised (Firth) fit of every arm, labelled as such.
    """
    study, rows, layout = _setup(df, study)
    reference = reference or study.primary_contrast.control
    level = InferenceSettings.from_study(0, study).level
    S = estimators.acceptance_values(rows, study.q)
    keep = ~np.isnan(S)
    arm = rows["arm"].to_numpy()
    others = [a for a in layout.arms if a != reference]
    reasons: dict[str, str] = {}
    for a in layout.arms:
        y = S[keep & (arm == a)]
        if y.size == 0:
            reasons[a] = f"no scored run in {a}"
        elif y.min() == y.max():
            reasons[a] = f"separation: {a} at {y[0]:.0%} acceptance"
    fitted = [a for a in others if a not in reasons]
    if reference in reasons:
        res = logistic.unestimable_fit(
            ["intercept"] + [f"{a} vs {reference}" for a in fitted],
            f"reference arm: {reasons[reference]}",
            int(keep.sum()),
            int(len(np.unique(layout.j[keep]))),
        )
        use = keep
    else:
        use = keep & np.isin(arm, [reference] + fitted)
        X = np.column_stack([np.ones(use.sum())] + [(arm[use] == a).astype(float) for a in fitted])
        res = logistic.fit(
            S[use], X, ["intercept"] + [f"{a} vs {reference}" for a in fitted], layout.j[use], level=level
        )
    by_term = dict(zip(res.terms, range(len(res.terms)), strict=True))
    out = []
    for term, a in [("intercept", reference)] + [(f"{a} vs {reference}", a) for a in others]:
        if term in by_term:
            k = by_term[term]
            c, se, p, lo, hi, why = (
                res.coef[k],
                res.se[k],
                res.p_value[k],
                res.ci_low[k],
                res.ci_high[k],
                res.reasons[k],
            )
            p_t, lo_t, hi_t = res.p_t[k], res.ci_t_low[k], res.ci_t_high[k]
        else:
            c = se = p = lo = hi = p_t = lo_t = hi_t = np.nan
            why = reasons[a]
        out.append(
            {
                "term": term,
                "log_odds": c,
                "se_cluster": se,
                "p_value": p,
                "odds_ratio": np.exp(c),
                "or_ci_low": np.exp(lo),
                "or_ci_high": np.exp(hi),
                # The same statistic against t(G - 1): a small-sample sensitivity beside the preregistered normal
                # reference.
                "p_t": p_t,
                "or_ci_t_low": np.exp(lo_t),
                "or_ci_t_high": np.exp(hi_t),
                "note": why,
            }
        )
    table = pd.DataFrame(out)
    details = {
        "fit": res.details.get("fit"),
        "n_runs": int(use.sum()),
        "n_clusters": int(res.n_clusters),
        "note": res.note,
    }
    if firth:
        present = [a for a in others if a not in reasons or not reasons[a].startswith("no scored")]
        if reference not in reasons or not reasons[reference].startswith("no scored"):
            m = keep & np.isin(arm, [reference] + present)
            Xf = np.column_stack([np.ones(m.sum())] + [(arm[m] == a).astype(float) for a in present])
            details["firth"] = (
                logistic.firth_fit(S[m], Xf, ["intercept"] + [f"{a} vs {reference}" for a in present], level=level)
                if m.sum()
                else None
            )
    return TableResult("logistic_cluster", table, details)


# --------------------------------------------------------------------------
# Kaplan-Meier time to completion
# --------------------------------------------------------------------------


def completion_times(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Durations (minutes of wall time) and events: a run that completed is an event; a capped run, an
    agent error or an infrastructure failure is censored at its wall time."""
    t = rows["wall_s"].to_numpy(dtype=float) / 60.0
    event = (rows["status"] == "completed").to_numpy() & ~rows["censored"].to_numpy(dtype=bool)
    return t, event


def km_exact(t: np.ndarray, event: np.ndarray, times: Sequence[float]) -> tuple[float, list[float]]:
    """The Kaplan-Meier median and the survival at ``times``, with the product computed in rationals.

    The median is the first event time at which S(t) <= 1/2 (lifelines' rule);
    in floats S(t) can come out as 0.5000000000000002 and move the median one
    event late. Infinite when S never reaches one half.
    """
    from fractions import Fraction

    t = np.asarray(t, dtype=float)
    event = np.asarray(event, dtype=bool)
    surv, median, steps = Fraction(1), np.inf, []
    for u in np.unique(t[event]):
        d = int((event & (t == u)).sum())
        n = int((t >= u).sum())
        surv *= Fraction(n - d, n)
        steps.append((u, surv))
        if median == np.inf and surv <= Fraction(1, 2):
            median = float(u)
    at = []
    for x in times:
        s = Fraction(1)
        for u, v in steps:
            if u <= x:
                s = v
        at.append(float(s))
    return median, at


def kaplan_meier(
    df: pd.DataFrame, *, study: protocol.Study | None = None, times: Sequence[float] | None = None
) -> TableResult:
    """Kaplan-Meier curves of time to completion per arm (lifelines) and log-rank tests.

    ``summary``: per arm the runs, events, censored runs, median time to
    completion (exact, :func:`km_exact`; not estimable when it is not reached)
    and the share still running at each of ``times`` (minutes).
    ``details``: the fitted curves, the all-arms log-rank test and the
    primary contrast's pairwise log-rank test (each a number or a reason).
    """
    from lifelines import KaplanMeierFitter
    from lifelines.statistics import logrank_test, multivariate_logrank_test

    study, rows, layout = _setup(df, study)
    t, ev = completion_times(rows)
    times = list(times) if times is not None else [10.0, 20.0, 30.0]
    arm = rows["arm"].to_numpy()
    fitters, out = {}, []
    for a in layout.arms:
        m = arm == a
        if not m.any():
            rec = {"arm": a, "runs": 0, "completed": 0, "censored": 0, "median_min": np.nan}
            rec.update({f"running_at_{int(x)}min": np.nan for x in times})
            rec["note"] = f"no run in {a}"
            out.append(rec)
            continue
        fitters[a] = KaplanMeierFitter(label=a).fit(t[m], ev[m])
        median, surv = km_exact(t[m], ev[m], times)
        rec = {
            "arm": a,
            "runs": int(m.sum()),
            "completed": int(ev[m].sum()),
            "censored": int((~ev[m]).sum()),
            "median_min": median if np.isfinite(median) else np.nan,
        }
        rec.update({f"running_at_{int(x)}min": float(v) for x, v in zip(times, surv, strict=True)})
        rec["note"] = "" if np.isfinite(median) else "median not reached: over half the runs never completed"
        out.append(rec)
    present = [a for a in layout.arms if (arm == a).any()]
    tests = []
    sub = np.isin(arm, present)
    if len(present) < 2:
        tests.append(
            {
                "test": "log-rank, all arms",
                "statistic": np.nan,
                "df": np.nan,
                "p_value": np.nan,
                "note": "fewer than two arms with runs",
            }
        )
    elif not ev.any():
        tests.append(
            {
                "test": "log-rank, all arms",
                "statistic": np.nan,
                "df": np.nan,
                "p_value": np.nan,
                "note": "no completion event",
            }
        )
    else:
        multi = multivariate_logrank_test(t[sub], arm[sub], ev[sub])
        tests.append(
            {
                "test": "log-rank, all arms",
                "statistic": float(multi.test_statistic),
                "df": int(multi.degrees_of_freedom),
                "p_value": float(multi.p_value),
                "note": "",
            }
        )
    treated, control = study.primary_contrast.arms
    mt, mc = arm == treated, arm == control
    name = f"log-rank, {treated} vs {control}"
    missing = [a for a, m in ((treated, mt), (control, mc)) if not m.any()]
    if missing:
        tests.append(
            {
                "test": name,
                "statistic": np.nan,
                "df": 1,
                "p_value": np.nan,
                "note": f"no run in {' and '.join(missing)}",
            }
        )
    elif not (ev[mt].any() or ev[mc].any()):
        tests.append({"test": name, "statistic": np.nan, "df": 1, "p_value": np.nan, "note": "no completion event"})
    else:
        pair = logrank_test(t[mt], t[mc], ev[mt], ev[mc])
        tests.append(
            {"test": name, "statistic": float(pair.test_statistic), "df": 1, "p_value": float(pair.p_value), "note": ""}
        )
    tests_df = pd.DataFrame(tests)
    for i, r in tests_df.iterrows():
        if not r.note and not np.isfinite(r.p_value):
            tests_df.loc[i, "note"] = "no information (no event at any time both arms are at risk)"
    return TableResult(
        "kaplan_meier",
        pd.DataFrame(out),
        {
            "fitters": fitters,
            "tests": tests_df,
            "tests_summary": estimability.honest_frame(tests_df, ["statistic", "df", "p_value"]),
            "times": times,
        },
    )


# --------------------------------------------------------------------------
# Ratios, frontiers, secondary endpoints
# --------------------------------------------------------------------------


#: The readings of a run's agent cost in the cost analyses (protocol/interpretations.md, Cost of a run).
COST_READINGS = ("charged", "reported")


def charged_agent_cost(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each run's agent cost as the ledger charged it, and which runs had no reported cost.

    A run with a reported cost C keeps it. A finished run without one (a
    session killed at the wall limit before the client reported) counts at
    the agent part of its ledger charge (``charged_usd`` less the judges):
    the proxy's metered cost where the proxy metered it, its reservation
    otherwise. A table without the ledger's column leaves such runs missing.
    """
    reported = rows["cost_usd"].to_numpy(dtype=float)
    missing = np.isnan(reported)
    if "charged_usd" not in rows:
        return reported, np.zeros(len(rows), dtype=bool)
    judges = (
        rows["judge_cost_usd"].fillna(0.0).to_numpy(dtype=float) if "judge_cost_usd" in rows else np.zeros(len(rows))
    )
    ledger = rows["charged_usd"].to_numpy(dtype=float) - judges
    fill = missing & np.isfinite(ledger)
    return np.where(fill, np.maximum(ledger, 0.0), reported), fill


def cost_per_accepted(
    df: pd.DataFrame,
    *,
    seed: int = 0,
    study: protocol.Study | None = None,
    B: int | None = None,
    weights: str = "equal",
    cost_reading: str = "charged",
) -> TableResult:
    """Cost per accepted deliverable per arm: scenario-weighted mean agent cost per run over acceptance.

    The joint bootstrap resamples scenarios and recomputes numerator and
    denominator from the same resample. ``share_lowest`` is the share of
    resamples in which the arm has the lowest ratio. ``cost_reading``:
    ``charged`` (every finished run, one without a reported cost at its
    ledger charge: :func:`charged_agent_cost`; ``n_charged`` counts them) or
    ``reported`` (the sensitivity reading: such runs left out).
    """
    if cost_reading not in COST_READINGS:
        raise ValueError(f"cost_reading must be one of {COST_READINGS}, got {cost_reading!r}")
    study, rows, layout = _setup(df, study)
    settings = InferenceSettings.from_study(seed, study, B=B)
    w = layout.weights(weights)
    values, charged = (
        charged_agent_cost(rows)
        if cost_reading == "charged"
        else (rows["cost_usd"].to_numpy(dtype=float), np.zeros(len(rows), dtype=bool))
    )
    n_charged = np.bincount(layout.a[(layout.a >= 0) & charged], minlength=layout.A)
    n_left_out = np.bincount(layout.a[(layout.a >= 0) & np.isnan(values)], minlength=layout.A)
    cost = layout.means(values)
    acc = layout.means(estimators.acceptance_values(rows, study.q))
    scored_arm = ~np.isnan(acc).all(axis=0)
    # A scenario counts in an arm's ratio only where both the cost and the acceptance are observed.
    both = ~np.isnan(cost) & ~np.isnan(acc)
    cost, acc = np.where(both, cost, np.nan), np.where(both, acc, np.nan)
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 7]), layout.J, settings.B)
    reps = resampling.bootstrap_ratios(cost, acc, counts, w)
    cost_run, acc_arm = resampling.weighted_mean(cost, w), resampling.weighted_mean(acc, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = cost_run / acc_arm
    n_runs = layout.runs_per_arm()
    notes = []
    for k, a in enumerate(layout.arms):
        if n_runs[k] == 0:
            notes.append(f"no run in {a}")
        elif not scored_arm[k]:
            notes.append(f"no scored run in {a}")
        elif np.isnan(cost_run[k]):
            notes.append(f"no reported cost in {a}")
        elif np.isnan(est[k]):
            notes.append("no cost and no accepted run (0/0)")
        else:
            notes.append("")
    # A resample with no accepted run has an infinite ratio; keep it in the ordering as the largest value.
    ranked = np.where(np.isnan(reps), np.inf, reps)
    ranked[:, np.isnan(est)] = np.inf  # an arm without an estimate is never the cheapest
    lo, hi = resampling.percentile_interval_infinite(
        ranked, settings.level
    )  # an end that touches an infinite resample stays infinite
    lo, hi = np.where(np.isnan(est), np.nan, lo), np.where(np.isnan(est), np.nan, hi)
    # The cheapest arm of a resample exists only when some arm has a finite ratio in it.
    finite = np.isfinite(ranked).any(axis=1)
    if finite.any():
        lowest = np.bincount(np.argmin(ranked[finite], axis=1), minlength=layout.A) / finite.sum()
        lowest = np.where(np.isnan(est), np.nan, lowest)
    else:
        lowest = np.full(layout.A, np.nan)
        notes = [estimability.join_notes(n, "no resample has an accepted run in any arm") for n in notes]
    flags = estimability.interval_flags(lo, hi, (~np.isnan(cost) & ~np.isnan(acc)).sum(axis=0))
    table = pd.DataFrame(
        {
            "arm": layout.arms,
            "cost_per_run": cost_run,
            "acceptance": acc_arm,
            "cost_per_accepted": est,
            "ci_low": lo,
            "ci_high": hi,
            "share_lowest": lowest,
            "share_resamples": float(finite.mean()),
            "n_charged": n_charged,
            "n_no_cost": n_left_out,
            "note": [estimability.join_notes(n, f) for n, f in zip(notes, flags, strict=True)],
        }
    )
    return TableResult(
        "cost_per_accepted", table, {"replicates": reps}, infinite=("cost_per_accepted", "ci_low", "ci_high")
    )


def frontier(
    df: pd.DataFrame,
    kind: str,
    *,
    seed: int = 0,
    study: protocol.Study | None = None,
    B: int | None = None,
    cost_reading: str = "charged",
) -> TableResult:
    """Acceptance within an allowance, per arm: ``kind`` is ``budget`` (S=1 and cost <= b, over
    ``frontier.budget_usd``) or ``human`` (S=1 and H <= h, over ``frontier.human_minutes``).

    ``cost_reading`` (budget only): ``charged``, the one cost rule (a run
    without a reported cost at its ledger charge: :func:`charged_agent_cost`),
    or ``reported``, the sensitivity reading in which such a run is within no
    budget."""
    if cost_reading not in COST_READINGS:
        raise ValueError(f"cost_reading must be one of {COST_READINGS}, got {cost_reading!r}")
    study, rows, layout = _setup(df, study)
    if kind == "budget":
        # The one cost rule (interpretations.md, Cost of a run); the reported reading leaves an unknown cost
        # within no budget.
        resource = (
            charged_agent_cost(rows)[0]
            if cost_reading == "charged"
            else np.where(
                np.isnan(rows["cost_usd"].to_numpy(dtype=float)), np.inf, rows["cost_usd"].to_numpy(dtype=float)
            )
        )
        grid = study.grid("budget_usd")
    elif kind == "human":
        grid, resource = study.grid("human_minutes"), rows["H_minutes"].to_numpy(dtype=float)
    else:
        raise ValueError(f"kind must be 'budget' or 'human', got {kind!r}")
    settings = InferenceSettings.from_study(seed, study, B=B)
    S = estimators.acceptance_values(rows, study.q)
    w = layout.weights("equal")
    blocks = []
    for b in grid:
        within = np.where(np.isnan(S), np.nan, (S == 1) & (resource <= b + 1e-9))
        blocks.append(layout.means(within))
    means = np.concatenate(blocks, axis=1)  # (J, len(grid) * A)
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 11]), layout.J, settings.B)
    est = resampling.weighted_mean(means, w)
    lo, hi = resampling.percentile_interval(resampling.bootstrap_means(means, counts, w), settings.level)
    col = "budget_usd" if kind == "budget" else "human_minutes"
    n_scen = (~np.isnan(means)).sum(axis=0)
    runs = np.tile(layout.runs_per_arm(), len(grid))
    notes = [
        estimability.join_notes(("no run" if r == 0 else "no scored run") if k == 0 else "", f)
        for r, k, f in zip(runs, n_scen, estimability.interval_flags(lo, hi, n_scen), strict=True)
    ]
    table = pd.DataFrame(
        {
            col: np.repeat(grid, layout.A),
            "arm": np.tile(layout.arms, len(grid)),
            "p_hat": est,
            "ci_low": lo,
            "ci_high": hi,
            "note": notes,
        }
    )
    # Accepted runs that need more than the grid's right end: why the frontier ends below the arm's acceptance.
    accepted = S == 1
    beyond = accepted & ~(resource <= grid[-1] + 1e-9)
    details = {
        "right_end": float(grid[-1]),
        "accepted": {a: int(accepted[layout.a == k].sum()) for k, a in enumerate(layout.arms)},
        "beyond_right_end": {a: int(beyond[layout.a == k].sum()) for k, a in enumerate(layout.arms)},
    }
    return TableResult(f"frontier_{kind}", table, details)


def secondary_endpoints(df: pd.DataFrame, *, study: protocol.Study | None = None) -> TableResult:
    """Per arm, scenario-weighted means of D, E, Q, S, cost, wall time, process counts, abstention and capping."""
    study, rows, layout = _setup(df, study)

    def est(v: Any) -> np.ndarray:
        return estimators.arm_means(layout.means(np.asarray(v, dtype=float)), layout.weights("equal"))

    def f(c: str) -> np.ndarray:
        col: np.ndarray = rows[c].to_numpy(dtype=float, na_value=np.nan)
        return col

    summary = pd.DataFrame(
        {
            "arm": layout.arms,
            "D": est(f("D")),
            "E": est(f("E")),
            "Q": est(f("Q")),
            "S": est(estimators.acceptance_values(rows, study.q)),
            # The agent cost as charged: a run without a reported cost counts at its ledger charge (interpretations.md).
            "cost_usd": est(charged_agent_cost(rows)[0]),
            "wall_min": est(f("wall_s") / 60.0),
            "turns": est(f("turns")),
            "tool_calls": est(f("tool_calls")),
            "questions": est(f("questions")),
            "abstention": est((rows["completion_status"] == "abandoned").to_numpy()),
            "capped": est(f("censored")),
        }
    )
    runs, scored = layout.runs_per_arm(), layout.sums(f("Q"))[1].sum(axis=0)
    summary["note"] = [
        f"no run in {a}" if r == 0 else (f"no scored run in {a} (Q and S)" if k == 0 else "")
        for a, r, k in zip(layout.arms, runs, scored, strict=True)
    ]
    charged = charged_agent_cost(rows)[1]
    return TableResult(
        "secondary_endpoints",
        summary,
        {"n_charged": {a: int(charged[layout.a == k].sum()) for k, a in enumerate(layout.arms)}},
    )


def model_sensitivity(
    df: pd.DataFrame, *, seed: int = 0, study: protocol.Study | None = None, B: int | None = None
) -> TableResult:
    """Acceptance of the sensitivity arm under each model (worker model first), scenario-weighted."""
    study = study or protocol.study()
    arm = study["sensitivity_models"]["arm"]
    sub = df[df["arm"] == arm]
    models = [study["worker"]["model"]] + [m for m in study["sensitivity_models"]["models"] if m in set(sub["model"])]
    settings = InferenceSettings.from_study(seed, study, B=B)
    out = []
    for m in models:
        part = sub[sub["model"] == m]
        if part.empty:
            continue
        layout = Layout.of(part, [arm])
        means = layout.means(estimators.acceptance_values(part, study.q))
        counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 13]), layout.J, settings.B)
        lo, hi = resampling.percentile_interval(resampling.bootstrap_means(means, counts), settings.level)
        n_scen = int((~np.isnan(means)).sum())
        note = estimability.join_notes(
            "no scored run" if n_scen == 0 else "", *estimability.interval_flags(lo, hi, n_scen)
        )
        out.append(
            {
                "arm": arm,
                "model": m,
                "p_hat": float(resampling.weighted_mean(means)[0]),
                "ci_low": float(lo[0]),
                "ci_high": float(hi[0]),
                "n_runs": len(part),
                "note": note,
            }
        )
    return TableResult(
        "model_sensitivity", pd.DataFrame(out, columns=["arm", "model", "p_hat", "ci_low", "ci_high", "n_runs", "note"])
    )


def reliability(df: pd.DataFrame, *, study: protocol.Study | None = None) -> TableResult:
    """Reliability across repeats per arm: tau-bench's pass^k for k = 1 .. R and the share of scenarios accepted in
    all R.

    Per scenario, pass^k = C(c, k) / C(n, k) with c accepted of n scored
    repeats (the chance that k repeats drawn from its n were all accepted); an
    arm's pass^k is the equal-weight mean over the scenarios with at least k
    scored repeats. pass^1 is the arm's acceptance. "Accepted in all R" is the
    share of scenarios whose every scored repeat was accepted, over the
    scenarios with R scored repeats (R the largest number of repeats run).
    Descriptive: no interval and no test.
    """
    study, rows, layout = _setup(df, study)
    S = estimators.acceptance_values(rows, study.q)
    sums, n = layout.sums(S)
    R = int(n.max()) if n.size else 0
    out = []
    for k, a in enumerate(layout.arms):
        c, m = sums[:, k].astype(int), n[:, k].astype(int)
        rec: dict[str, object] = {"arm": a}
        for kk in range(1, R + 1):
            vals = small_sample.pass_hat_k(c, m, kk)
            rec[f"pass_{kk}"] = float(np.nanmean(vals)) if (~np.isnan(vals)).any() else np.nan
        full = m == R
        rec["accepted_in_all_R"] = float((c[full] == R).mean()) if full.any() else np.nan
        rec["scenarios_with_R"] = int(full.sum())
        rec["note"] = "" if full.any() else f"no scenario of {a} has {R} scored repeats"
        out.append(rec)
    return TableResult("reliability", pd.DataFrame(out), {"R": R})


# --------------------------------------------------------------------------
# Autonomous Recovery Index
# --------------------------------------------------------------------------


def recovery_index(
    df: pd.DataFrame,
    *,
    arm: str | None = None,
    seed: int = 0,
    study: protocol.Study | None = None,
    B: int | None = None,
) -> TableResult:
    """The Autonomous Recovery Index of the self-repairing arm (definition in protocol/interpretations.md).

    Eligible runs: the first session failed the self-check, or ended by a
    cap or an error (the controller then grants the recovery). ARI is the
    share of eligible runs that used the recovery and passed the self-check
    afterwards; ``ARI, accepted`` counts those that were also accepted (S=1).
    Intervals: scenario-cluster bootstrap of the ratio (numerator and
    denominator resampled together).
    """
    study = study or protocol.study()
    if arm is None:
        arm = next(a.id for a in protocol.arms().values() if a.recovery_resumes > 0)
    rows = runtable.primary_rows(df, study)
    rows = rows[rows["arm"] == arm].reset_index(drop=True)
    eligible, recovered, accepted = eligibility(rows, study)
    settings = InferenceSettings.from_study(seed, study, B=B)
    out = []
    if rows.empty or not eligible.any():
        why = f"no run in {arm}" if rows.empty else f"no run of {arm} was eligible for recovery"
        for name, num_runs in (("ARI", recovered), ("ARI, accepted", accepted)):
            out.append(
                {
                    "index": name,
                    "arm": arm,
                    "eligible": int(eligible.sum()),
                    "recovered": int(num_runs.sum()),
                    "estimate": np.nan,
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "note": why,
                }
            )
        return TableResult("recovery_index", pd.DataFrame(out))
    layout = Layout.of(rows, [arm])
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 17]), layout.J, settings.B)
    den, _ = layout.sums(eligible.astype(float))
    S = estimators.acceptance_values(rows, study.q)
    for name, num_runs in (("ARI", recovered), ("ARI, accepted", accepted)):
        num, _ = layout.sums(num_runs.astype(float))
        if name == "ARI, accepted":
            # Acceptance needs a judge: only the eligible runs with S count, so the index never treats an unjudged run
            # as not accepted.
            num, _ = layout.sums((accepted & ~np.isnan(S)).astype(float))
            d, _ = layout.sums((eligible & ~np.isnan(S)).astype(float))
        else:
            d = den
        est = num.sum() / d.sum() if d.sum() > 0 else np.nan
        reps = resampling.bootstrap_ratios(num[:, 0], d[:, 0], counts)
        lo, hi = resampling.percentile_interval(reps, settings.level)
        n_scen = int((d[:, 0] > 0).sum())
        note = estimability.join_notes(
            "no eligible run with a judge's score" if d.sum() == 0 else "", *estimability.interval_flags(lo, hi, n_scen)
        )
        out.append(
            {
                "index": name,
                "arm": arm,
                "eligible": int(d.sum()),
                "recovered": int(num.sum()),
                "estimate": est,
                "ci_low": float(lo) if d.sum() > 0 else np.nan,
                "ci_high": float(hi) if d.sum() > 0 else np.nan,
                "note": note,
            }
        )
    return TableResult("recovery_index", pd.DataFrame(out))


def eligibility(rows: pd.DataFrame, study: protocol.Study | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run of the self-repairing arm: eligible for recovery, recovered (passes the self-check after
    the one recovery), and recovered-and-accepted."""
    study = study or protocol.study()
    first = rows["selfcheck_first"].to_numpy(dtype=float, na_value=np.nan)
    final = rows["selfcheck_final"].to_numpy(dtype=float, na_value=np.nan)
    used = rows["recovery_used"].to_numpy(dtype=bool)
    capped_or_error = rows["censored"].to_numpy(dtype=bool) | rows["status"].isin(["agent_error"]).to_numpy()
    eligible = (first == 0) | capped_or_error | used
    recovered = eligible & used & (final == 1)
    S = estimators.acceptance_values(rows, study.q)
    return eligible, recovered, recovered & (S == 1)


# --------------------------------------------------------------------------
# Judge agreement
# --------------------------------------------------------------------------


def interval_alpha(data: np.ndarray) -> float:
    """Krippendorff's alpha for interval data (coders x units, NaN: not coded), in closed form.

    With squared differences, the observed disagreement is
    ``sum_u 2 (m_u sum v^2 - (sum v)^2) / (m_u - 1)`` over units coded at least
    twice and the expected one ``2 (n sum v^2 - (sum v)^2) / (n - 1)`` over all
    their values; alpha = 1 - observed / expected. The same number as the
    krippendorff package (tested), which builds a values-by-values coincidence
    matrix and needs seconds once scores take hundreds of distinct values.
    """
    m = np.asarray(data, dtype=float)
    m = m[:, (~np.isnan(m)).sum(axis=0) >= 2]
    ok = ~np.isnan(m)
    mu = ok.sum(axis=0)
    v = np.where(ok, m, 0.0)
    s1, s2 = v.sum(axis=0), (v**2).sum(axis=0)
    observed = (2 * (mu * s2 - s1**2) / (mu - 1)).sum()
    n = mu.sum()
    expected = 2 * (n * s2.sum() - s1.sum() ** 2) / (n - 1)
    return float(1 - observed / expected)


def judge_agreement(df: pd.DataFrame, *, study: protocol.Study | None = None) -> TableResult:
    """Krippendorff's alpha (ordinal; scores rounded to whole points) over the judges' Q columns, and
    pairwise Pearson and Spearman correlations on the runs both judges scored.

    Agreement needs two coders of the same run: with at most one judge per run
    every measure is reported as not estimable, with that reason. Scores are
    compared in micro-points (as S compares Q), so equal scores are ties.
    """
    import krippendorff
    from scipy import stats

    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    jids = runtable.judge_ids(study)
    mat = np.round(rows[[runtable.judge_column(j) for j in jids]].to_numpy(dtype=float).T, 6)  # judges x runs
    rounded = np.round(mat)
    scored = (~np.isnan(rounded)).sum(axis=0) >= 2
    out = []

    def alpha(data: np.ndarray, level: Literal["ordinal", "interval"], **kw: Any) -> tuple[float, str]:
        """Ordinal alpha from the krippendorff package; interval alpha in closed form (:func:`interval_alpha`)."""
        if not scored.any():
            return np.nan, "needs two judges scoring the same run; no run has two"
        if np.nanmin(data) == np.nanmax(data):
            return np.nan, "every score is the same (no variation to agree on)"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                v = (
                    interval_alpha(data)
                    if level == "interval"
                    else float(krippendorff.alpha(reliability_data=data, level_of_measurement=level, **kw))
                )
        except (ValueError, ZeroDivisionError) as exc:
            return np.nan, f"krippendorff: {exc}"
        return (v, "") if np.isfinite(v) else (np.nan, "no disagreement is possible in these scores")

    a_ord, why_ord = alpha(rounded[:, scored], "ordinal", value_domain=np.arange(0.0, 101.0))
    a_int, why_int = alpha(mat[:, scored], "interval")
    out.append(
        {
            "measure": "Krippendorff alpha (ordinal)",
            "judges": "+".join(jids),
            "value": a_ord,
            "n_runs": int(scored.sum()),
            "note": why_ord,
        }
    )
    out.append(
        {
            "measure": "Krippendorff alpha (interval)",
            "judges": "+".join(jids),
            "value": a_int,
            "n_runs": int(scored.sum()),
            "note": why_int,
        }
    )
    for i in range(len(jids)):
        for k in range(i + 1, len(jids)):
            both = ~np.isnan(mat[i]) & ~np.isnan(mat[k])
            pair = f"{jids[i]}-{jids[k]}"
            for measure, fn in (("Pearson r", stats.pearsonr), ("Spearman rho", stats.spearmanr)):
                if both.sum() < 3:
                    value, why = (
                        np.nan,
                        f"{int(both.sum())} run{'' if int(both.sum()) == 1 else 's'} scored by both; needs at least 3",
                    )
                elif np.ptp(mat[i, both]) == 0 or np.ptp(mat[k, both]) == 0:
                    value, why = np.nan, "a judge's scores do not vary"
                else:
                    value, why = float(fn(mat[i, both], mat[k, both]).statistic), ""
                out.append({"measure": measure, "judges": pair, "value": value, "n_runs": int(both.sum()), "note": why})
    return TableResult("judge_agreement", pd.DataFrame(out))
