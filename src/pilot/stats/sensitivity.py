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
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from pilot import protocol
from pilot.stats import estimators, primary, resampling, runtable
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings


@dataclass
class TableResult:
    """A named result whose ``summary`` DataFrame renders to LaTeX."""

    name: str
    summary: pd.DataFrame
    details: dict = field(default_factory=dict, repr=False)

    def to_latex(self, **kwargs) -> str:
        return self.summary.to_latex(index=False, float_format="%.3f", **kwargs)


def _setup(df: pd.DataFrame, study: protocol.Study | None) -> tuple[protocol.Study, pd.DataFrame, Layout]:
    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    return study, rows, Layout.of(rows, study.arms)


# --------------------------------------------------------------------------
# q grid and weights
# --------------------------------------------------------------------------


def q_grid(df: pd.DataFrame, *, seed: int = 0, study: protocol.Study | None = None, grid: Sequence[float] | None = None, B: int | None = None, n_permutations: int | None = None) -> TableResult:
    """Every contrast and arm acceptance at each threshold q of the preregistered grid (50..90)."""
    study, rows, layout = _setup(df, study)
    settings = InferenceSettings.from_study(seed, study, B=B, n_permutations=n_permutations)
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 2]), layout.J, settings.B)
    signs, _ = resampling.sign_vectors(layout.J, settings.n_permutations, np.random.default_rng([settings.seed, 1]))
    w = layout.weights("equal")
    out, arms = [], []
    for q in grid or study["outcomes"]["q_grid"]:
        means = layout.means(estimators.acceptance_values(rows, q))
        tab, _ = primary.contrast_table(means, layout, study.contrasts, w, settings, counts=counts, signs=signs, adjustment=study["inference"]["secondary_adjustment"])
        out.append(tab.assign(q=float(q)))
        arms.append(pd.DataFrame({"q": float(q), "arm": layout.arms, "p_hat": estimators.arm_means(means, w)}))
    summary = pd.concat(out, ignore_index=True)[["q", "contrast", "estimate", "ci_low", "ci_high", "p_value", "p_holm", "n_scenarios"]]
    return TableResult("q_grid", summary, {"acceptance": pd.concat(arms, ignore_index=True)})


def minutes_weighted(df: pd.DataFrame, *, seed: int = 0, study: protocol.Study | None = None, B: int | None = None, n_permutations: int | None = None) -> primary.PrimaryResult:
    """The primary analysis with professional-minutes weights."""
    return primary.primary_analysis(df, seed=seed, weights="minutes", study=study, B=B, n_permutations=n_permutations)


# --------------------------------------------------------------------------
# Cluster-robust logistic regression
# --------------------------------------------------------------------------


def logistic_cluster(df: pd.DataFrame, *, study: protocol.Study | None = None, reference: str | None = None) -> TableResult:
    """Logistic regression of S on arm, standard errors clustered by scenario (statsmodels GLM).

    Rows are the arms' log-odds ratios against ``reference`` (the primary
    contrast's control arm by default), with odds ratios and 95% intervals.
    """
    import statsmodels.api as sm

    study, rows, layout = _setup(df, study)
    reference = reference or study.contrasts[0][1]
    S = estimators.acceptance_values(rows, study.q)
    keep = ~np.isnan(S)
    present = set(rows["arm"][keep])
    others = [a for a in layout.arms if a != reference and a in present]
    X = np.column_stack([np.ones(keep.sum())] + [(rows["arm"].to_numpy()[keep] == a).astype(float) for a in others])
    groups = layout.j[keep]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = sm.GLM(S[keep], X, family=sm.families.Binomial()).fit(cov_type="cluster", cov_kwds={"groups": groups})
    note = "; ".join(sorted({str(w.message).splitlines()[0] for w in caught if "separation" in str(w.message).lower()}))
    ci = np.asarray(fit.conf_int(alpha=1 - InferenceSettings.from_study(0, study).level))
    params, bse, pv = np.asarray(fit.params), np.asarray(fit.bse), np.asarray(fit.pvalues)
    summary = pd.DataFrame(
        {
            "term": ["intercept"] + [f"{a} vs {reference}" for a in others],
            "log_odds": params,
            "se_cluster": bse,
            "p_value": pv,
            "odds_ratio": np.exp(params),
            "or_ci_low": np.exp(ci[:, 0]),
            "or_ci_high": np.exp(ci[:, 1]),
        }
    )
    return TableResult("logistic_cluster", summary, {"fit": fit, "n_runs": int(keep.sum()), "n_clusters": int(len(np.unique(groups))), "note": note})


# --------------------------------------------------------------------------
# Kaplan-Meier time to completion
# --------------------------------------------------------------------------


def completion_times(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Durations (minutes of wall time) and events: a run that completed is an event; a capped run, an
    agent error or an infrastructure failure is censored at its wall time."""
    t = rows["wall_s"].to_numpy(dtype=float) / 60.0
    event = (rows["status"] == "completed").to_numpy() & ~rows["censored"].to_numpy(dtype=bool)
    return t, event


def kaplan_meier(df: pd.DataFrame, *, study: protocol.Study | None = None, times: Sequence[float] | None = None) -> TableResult:
    """Kaplan-Meier curves of time to completion per arm (lifelines) and log-rank tests.

    ``summary``: per arm the runs, events, censored runs, median time to
    completion and the share still running at each of ``times`` (minutes).
    ``details``: the fitted curves, the all-arms log-rank test and the
    primary contrast's pairwise log-rank test.
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
            continue
        kmf = KaplanMeierFitter(label=a).fit(t[m], ev[m])
        fitters[a] = kmf
        surv = kmf.survival_function_at_times(times).to_numpy()
        rec = {"arm": a, "runs": int(m.sum()), "completed": int(ev[m].sum()), "censored": int((~ev[m]).sum()), "median_min": float(kmf.median_survival_time_)}
        rec.update({f"running_at_{int(x)}min": float(s) for x, s in zip(times, surv)})
        out.append(rec)
    multi = multivariate_logrank_test(t, arm, ev)
    treated, control = study.contrasts[0]
    mt, mc = arm == treated, arm == control
    pair = logrank_test(t[mt], t[mc], ev[mt], ev[mc])
    tests = pd.DataFrame(
        [
            {"test": "log-rank, all arms", "statistic": float(multi.test_statistic), "df": int(multi.degrees_of_freedom), "p_value": float(multi.p_value)},
            {"test": f"log-rank, {treated} vs {control}", "statistic": float(pair.test_statistic), "df": 1, "p_value": float(pair.p_value)},
        ]
    )
    return TableResult("kaplan_meier", pd.DataFrame(out), {"fitters": fitters, "tests": tests, "times": times})


# --------------------------------------------------------------------------
# Ratios, frontiers, secondary endpoints
# --------------------------------------------------------------------------


def cost_per_accepted(df: pd.DataFrame, *, seed: int = 0, study: protocol.Study | None = None, B: int | None = None, weights: str = "equal") -> TableResult:
    """Cost per accepted deliverable per arm: scenario-weighted mean agent cost per run over acceptance.

    The joint bootstrap resamples scenarios and recomputes numerator and
    denominator from the same resample. ``share_lowest`` is the share of
    resamples in which the arm has the lowest ratio.
    """
    study, rows, layout = _setup(df, study)
    settings = InferenceSettings.from_study(seed, study, B=B)
    w = layout.weights(weights)
    cost = layout.means(rows["cost_usd"].to_numpy(dtype=float))
    acc = layout.means(estimators.acceptance_values(rows, study.q))
    # A scenario counts in an arm's ratio only where both the cost and the acceptance are observed.
    both = ~np.isnan(cost) & ~np.isnan(acc)
    cost, acc = np.where(both, cost, np.nan), np.where(both, acc, np.nan)
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 7]), layout.J, settings.B)
    reps = resampling.bootstrap_ratios(cost, acc, counts, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = resampling.weighted_mean(cost, w) / resampling.weighted_mean(acc, w)
    # A resample with no accepted run has an infinite ratio; keep it in the ordering as the largest value.
    ranked = np.where(np.isnan(reps), np.inf, reps)
    big = np.finfo(float).max
    lo, hi = resampling.percentile_interval(np.minimum(ranked, big), settings.level)
    lo, hi = np.where(lo >= big / 2, np.inf, lo), np.where(hi >= big / 2, np.inf, hi)
    lowest = np.bincount(np.argmin(ranked, axis=1), minlength=layout.A) / settings.B
    summary = pd.DataFrame(
        {
            "arm": layout.arms,
            "cost_per_run": resampling.weighted_mean(cost, w),
            "acceptance": resampling.weighted_mean(acc, w),
            "cost_per_accepted": est,
            "ci_low": lo,
            "ci_high": hi,
            "share_lowest": lowest,
        }
    )
    return TableResult("cost_per_accepted", summary, {"replicates": reps})


def frontier(df: pd.DataFrame, kind: str, *, seed: int = 0, study: protocol.Study | None = None, B: int | None = None) -> TableResult:
    """Acceptance within an allowance, per arm: ``kind`` is ``budget`` (S=1 and cost <= b, over
    ``frontier.budget_usd``) or ``human`` (S=1 and H <= h, over ``frontier.human_minutes``)."""
    study, rows, layout = _setup(df, study)
    if kind == "budget":
        grid, resource = study.grid("budget_usd"), rows["cost_usd"].to_numpy(dtype=float)
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
    summary = pd.DataFrame(
        {
            col: np.repeat(grid, layout.A),
            "arm": np.tile(layout.arms, len(grid)),
            "p_hat": est,
            "ci_low": lo,
            "ci_high": hi,
        }
    )
    return TableResult(f"frontier_{kind}", summary)


def secondary_endpoints(df: pd.DataFrame, *, study: protocol.Study | None = None) -> TableResult:
    """Per arm, scenario-weighted means of D, E, Q, S, cost, wall time, process counts, abstention and capping."""
    study, rows, layout = _setup(df, study)
    est = lambda v: estimators.arm_means(layout.means(np.asarray(v, dtype=float)), layout.weights("equal"))  # noqa: E731
    f = lambda c: rows[c].to_numpy(dtype=float, na_value=np.nan)  # noqa: E731
    summary = pd.DataFrame(
        {
            "arm": layout.arms,
            "D": est(f("D")),
            "E": est(f("E")),
            "Q": est(f("Q")),
            "S": est(estimators.acceptance_values(rows, study.q)),
            "cost_usd": est(f("cost_usd")),
            "wall_min": est(f("wall_s") / 60.0),
            "turns": est(f("turns")),
            "tool_calls": est(f("tool_calls")),
            "questions": est(f("questions")),
            "abstention": est((rows["completion_status"] == "abandoned").to_numpy()),
            "capped": est(f("censored")),
        }
    )
    return TableResult("secondary_endpoints", summary)


def model_sensitivity(df: pd.DataFrame, *, seed: int = 0, study: protocol.Study | None = None, B: int | None = None) -> TableResult:
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
        out.append({"arm": arm, "model": m, "p_hat": float(resampling.weighted_mean(means)[0]), "ci_low": float(lo[0]), "ci_high": float(hi[0]), "n_runs": len(part)})
    return TableResult("model_sensitivity", pd.DataFrame(out))


# --------------------------------------------------------------------------
# Autonomous Recovery Index
# --------------------------------------------------------------------------


def recovery_index(df: pd.DataFrame, *, arm: str | None = None, seed: int = 0, study: protocol.Study | None = None, B: int | None = None) -> TableResult:
    """The Autonomous Recovery Index of the self-repairing arm (definition in protocol/interpretations.md).

    Eligible runs: the first session failed the self-check, or ended by a
    cap or an error (the controller then grants the recovery). ARI is the
    share of eligible runs that used the recovery and passed the self-check
    afterwards; ``ARI_accepted`` counts those that were also accepted (S=1).
    Intervals: scenario-cluster bootstrap of the ratio (numerator and
    denominator resampled together).
    """
    study = study or protocol.study()
    if arm is None:
        arm = next(a.id for a in protocol.arms().values() if a.recovery_resumes > 0)
    rows = runtable.primary_rows(df, study)
    rows = rows[rows["arm"] == arm].reset_index(drop=True)
    eligible, recovered, accepted = eligibility(rows, study)
    layout = Layout.of(rows, [arm])
    settings = InferenceSettings.from_study(seed, study, B=B)
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 17]), layout.J, settings.B)
    den, _ = layout.sums(eligible.astype(float))
    out = []
    for name, num_runs in (("ARI", recovered), ("ARI_accepted", accepted)):
        num, _ = layout.sums(num_runs.astype(float))
        est = num.sum() / den.sum() if den.sum() > 0 else np.nan
        reps = resampling.bootstrap_ratios(num[:, 0], den[:, 0], counts)
        lo, hi = resampling.percentile_interval(reps, settings.level)
        out.append({"index": name, "arm": arm, "eligible": int(eligible.sum()), "recovered": int(num_runs.sum()), "estimate": est, "ci_low": float(lo), "ci_high": float(hi)})
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


def judge_agreement(df: pd.DataFrame, *, study: protocol.Study | None = None) -> TableResult:
    """Krippendorff's alpha (ordinal; scores rounded to whole points) over the judges' Q columns, and
    pairwise Pearson and Spearman correlations on the runs both judges scored."""
    import krippendorff
    from scipy import stats

    study = study or protocol.study()
    rows = runtable.primary_rows(df, study)
    jids = runtable.judge_ids(study)
    mat = rows[[runtable.judge_column(j) for j in jids]].to_numpy(dtype=float).T  # judges x runs
    rounded = np.round(mat)
    scored = (~np.isnan(rounded)).sum(axis=0) >= 2
    alpha = krippendorff.alpha(reliability_data=rounded[:, scored], level_of_measurement="ordinal", value_domain=np.arange(0.0, 101.0))
    alpha_int = krippendorff.alpha(reliability_data=mat[:, scored], level_of_measurement="interval")
    out = [{"measure": "Krippendorff alpha (ordinal)", "judges": "+".join(jids), "value": float(alpha), "n_runs": int(scored.sum())},
           {"measure": "Krippendorff alpha (interval)", "judges": "+".join(jids), "value": float(alpha_int), "n_runs": int(scored.sum())}]
    for i in range(len(jids)):
        for k in range(i + 1, len(jids)):
            both = ~np.isnan(mat[i]) & ~np.isnan(mat[k])
            if both.sum() >= 3:
                out.append({"measure": "Pearson r", "judges": f"{jids[i]}-{jids[k]}", "value": float(stats.pearsonr(mat[i, both], mat[k, both]).statistic), "n_runs": int(both.sum())})
                out.append({"measure": "Spearman rho", "judges": f"{jids[i]}-{jids[k]}", "value": float(stats.spearmanr(mat[i, both], mat[k, both]).statistic), "n_runs": int(both.sum())})
    return TableResult("judge_agreement", pd.DataFrame(out))
