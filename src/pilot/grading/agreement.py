"""The experts' grades against each other and against the LLM panel: pure functions over the grading frames.

Inputs are the two long frames of :mod:`pilot.grading.store`: the grades
(:data:`~pilot.grading.store.GRADE_COLUMNS`, from the store or the
coordinator's export) and the panel (:data:`~pilot.grading.store.PANEL_COLUMNS`).
Nothing here reads a file or the store; :mod:`pilot.grading.report` does.

Tables
    :func:`expert_table`: one row per submitted grade (package x grader): the
    scores per criterion (columns ``criterion:<id>``), the expert's Q (the
    rubric-weighted 0-100 score, the judges' ``score_0_100`` formula,
    :func:`pilot.judges.rubric.weighted_score`) and the accept decision.
    :func:`panel_table`: one row per package: per criterion the median of the
    valid judges' integer scores, the panel's Q (mean of the judges' Q, the
    run's Q), the panel's accept (majority of the judges' votes), D and E.
    :func:`package_table`: one row per package of the wave joining both, with
    the per-package bias ``d_Q`` and ``d_S``.

Measures
    Krippendorff's alpha (:func:`alpha_estimate`, the ``krippendorff``
    package): ordinal for the 0-4 criterion scores, interval for Q (a 0-100
    score whose differences mean the same anywhere on the scale), among the
    experts (graders x packages, NaN where a grader did not grade a package)
    and between the panel and the experts (two coders per package: the
    panel's value and the experts' median). A criterion is a scenario's own
    (``SCENARIO/criterion``: rubrics differ between scenarios); ``all
    criteria`` pools every criterion of every package as units on the same 0-4
    scale, so differences between criteria count as agreement too (read it
    beside Q, not instead of it). Cohen's kappa and percent agreement of the
    accept decisions (:func:`acceptance_table`). The panel's bias
    (:func:`bias_tables`): per package ``d_Q`` = panel Q - mean expert Q and
    ``d_S`` = panel accept - mean expert accept (the accept decisions; the
    bias in S itself is H1's ``panel minus experts``), per arm the mean over
    packages, and the contrast of those means between the primary contrast's
    arms. H1 recomputed on the experts' grades (:func:`h1_table`).

Intervals
    Percentile bootstrap over packages (a seeded :class:`numpy.random.Generator`,
    B resamples): alpha and acceptance agreement resample the packages that
    carry the measure (for the pooled criteria a package's criteria go
    together; alpha's replicates are the package's coincidence-matrix formula
    in matrix form, :func:`alpha_replicates`, tested equal to it); the bias resamples packages within each arm
    (independently per arm, so the contrast's replicate is the difference of the two arms'); H1
    uses the primary analysis's scenario-cluster bootstrap and sign-flip test
    (:mod:`pilot.stats.primary`). An estimate is a number or ``not estimable
    (reason)`` (:mod:`pilot.stats.estimability`): alpha and agreement when
    fewer than 2 packages carry two or more values, or when every value is the
    same.

Missing grades
    An assignment not submitted is no grade (a draft is not a grade). A package
    enters a comparison with the panel (panel-expert alpha and acceptance
    agreement, the bias, H1) with at least one submitted grade; agreement among
    experts needs two or more on the package. A grade lacking a rubric
    criterion's score (the site refuses to submit one; an edited export may
    hold one) has no expert Q and counts only for its other criteria and its
    accept decision. A package without a valid judge has no panel values, and
    no D or E either (the panel frame carries them), so it is left out of
    every comparison with the panel and of H1. Every exclusion is counted,
    with its reason, in :func:`coverage_table`.

Ties
    The median of an even number of scores (two valid judges, when one of
    three failed; two experts, always, with K = 2) is the mean of the middle
    two, a half point. Half points are kept, never rounded: ordinal alpha
    takes the value domain 0, 0.5, ..., 4, a half point being a category
    between its neighbours (categories no one used change nothing). The
    panel's accept is the majority of the valid judges' votes; a tie (two
    valid judges who disagree) counts as not accepted, since acceptance needs
    a majority, and the tie is flagged (``panel_tie``). A package without a
    vote has no panel accept.

K > 2 graders per package
    Alpha takes any number of coders per unit. Expert-expert acceptance
    agreement pools every pair of slots i < j of a package (K(K-1)/2 pairs, the
    lower slot as Cohen's first rater; with K = 2 slot 1 against slot 2); the
    bootstrap resamples packages, so a package's pairs go together. Panel-expert
    agreement pairs the panel's accept with each expert's accept on the
    package (K pairs).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from pilot import runtable
from pilot.grading.store import GRADE_COLUMNS
from pilot.judges.rubric import MAX_SCORE, Criterion, weighted_score
from pilot.stats import estimability, estimators, resampling
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings, contrast_table

#: Prefix of the per-criterion score columns of the expert and panel tables (a criterion id may be any string).
CRITERION_PREFIX = "criterion:"
#: The ordinal value domain: whole grades and the half points a median of an even number of grades gives.
HALF_POINTS = np.arange(0.0, MAX_SCORE + 0.25, 0.5)
#: GDPval's reference values, shown beside ours for scale. GDPval's graders compare two deliverables (which
#: is better, or as good), not accept/reject one, so the numbers are of a kindred task, not the same one.
GDPVAL_SOURCE = 'OpenAI (2025), "GDPval: Evaluating AI model performance on real-world economically valuable tasks"'
GDPVAL_EXPERT_EXPERT = 0.71
GDPVAL_GRADER_EXPERT = 0.66

ALL_CRITERIA = "all criteria"
EXPERTS = "experts"
PANEL_EXPERTS = "panel-experts"
# Independent random streams per family of estimates, all from the one seed (H1 uses the primary analysis's own).
_ALPHA_STREAM, _ACCEPT_STREAM, _BIAS_STREAM = 10, 20, 30
_TEXT_COLUMNS = (
    "wave",
    "source",
    "package_id",
    "run_id",
    "scenario",
    "arm",
    "model",
    "grader_id",
    "status",
    "criterion",
    "critique",
)
_META = ["package_id", "run_id", "scenario", "arm", "model"]


def criterion_column(criterion_id: str) -> str:
    return CRITERION_PREFIX + criterion_id


# --------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------


def normalise_grades(grades: pd.DataFrame) -> pd.DataFrame:
    """The grade frame with one type per column, whether it came from the store or from a CSV export.

    Text columns are strings (an empty criterion marks an assignment without a
    grade), ``score`` and ``accept`` floats (NaN where there is none), ``slot``
    an integer. A column missing, or a score or accept that is not a number,
    is refused naming the column and the row.
    """
    missing = [c for c in GRADE_COLUMNS if c not in grades.columns]
    if missing:
        raise ValueError(f"grade table lacks column(s) {', '.join(missing)} (expected {', '.join(GRADE_COLUMNS)})")
    out = grades[list(GRADE_COLUMNS)].copy().reset_index(drop=True)
    for c in _TEXT_COLUMNS:
        out[c] = out[c].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    for c in ("score", "accept", "active_s"):
        col = out[c].map(lambda v: np.nan if v is None or (isinstance(v, str) and v.strip() == "") else v)
        num = pd.to_numeric(col, errors="coerce")
        bad = np.flatnonzero(num.isna() & col.notna())
        if bad.size:
            raise ValueError(f"grade table: column {c}, row {bad[0] + 1}: {col.iloc[bad[0]]!r} is not a number")
        out[c] = num.astype(float)
    out["slot"] = pd.to_numeric(out["slot"], errors="raise").astype(int)
    return out


def expert_table(grades: pd.DataFrame, criteria: Mapping[str, Sequence[Criterion]]) -> pd.DataFrame:
    """One row per submitted grade: meta, ``grader_id``, ``slot``, ``accept``, ``Q``, ``missing`` and the criterion
    columns.

    ``criteria`` maps each scenario to its rubric's criteria (the weights of
    Q). ``Q`` is NaN when a rubric criterion has no score (``missing`` names
    them); ``outside_rubric`` names scores of criteria the rubric does not have
    (ignored).
    """
    g = normalise_grades(grades)
    g = g[g["criterion"] != ""]
    keys = [*_META, "grader_id", "slot", "accept"]
    rows = []
    for key, part in g.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key, strict=True))
        scenario = row["scenario"]
        if scenario not in criteria:
            raise ValueError(f"no rubric given for scenario {scenario} (package {row['package_id']})")
        rubric = list(criteria[scenario])
        ids = {c.id for c in rubric}
        scores = {str(c): s for c, s in zip(part["criterion"], part["score"], strict=True) if not math.isnan(s)}
        missing = [c.id for c in rubric if c.id not in scores]
        row["Q"] = np.nan if missing else weighted_score({c: int(s) for c, s in scores.items() if c in ids}, rubric)
        row["missing"] = ", ".join(missing)
        row["outside_rubric"] = ", ".join(sorted(set(scores) - ids))
        row.update({criterion_column(c.id): scores.get(c.id, np.nan) for c in rubric})
        rows.append(row)
    fixed = [*keys, "Q", "missing", "outside_rubric"]
    out = pd.DataFrame(rows, columns=fixed + sorted({k for r in rows for k in r} - set(fixed)))
    return out.sort_values(["package_id", "slot"]).reset_index(drop=True)


def panel_table(panel: pd.DataFrame) -> pd.DataFrame:
    """One row per package the panel judged: meta, D, E, ``n_judges``, ``Q``, ``accept``, ``panel_tie``, criterion
    columns.

    A criterion's value is the median of the valid judges' scores (a half
    point when their number is even and the middle two differ); ``Q`` is the
    mean of the judges' Q; ``accept`` the majority of the judges' votes, a tie
    counting as not accepted (``panel_tie`` marks it), NaN without a vote.
    """
    cols = [*_META, "D", "E", "n_judges", "Q", "accept", "panel_tie"]
    if panel.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, part in panel.groupby(_META, sort=True):
        row = dict(zip(_META, key, strict=True))
        row["D"], row["E"] = _flag(part["D"].iloc[0]), _flag(part["E"].iloc[0])
        judges = part.drop_duplicates("judge_id")
        votes = [
            bool(v) for v in judges["judge_accept"] if v is not None and not (isinstance(v, float) and math.isnan(v))
        ]
        yes = sum(votes)
        row["n_judges"] = len(judges)
        row["Q"] = float(judges["judge_q"].astype(float).mean())
        row["accept"] = float(yes * 2 > len(votes)) if votes else np.nan
        row["panel_tie"] = bool(votes) and yes * 2 == len(votes)
        for criterion, scores in part.groupby("criterion", sort=True)["score"]:
            row[criterion_column(str(criterion))] = float(np.median(scores.astype(float)))
        rows.append(row)
    out = pd.DataFrame(rows)
    return out[cols + sorted(c for c in out.columns if c not in cols)].reset_index(drop=True)


def _flag(v: Any) -> float:
    """A verdict (D, E) as 1.0 / 0.0, NaN when the record has none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return np.nan
    return float(bool(v))


def package_table(grades: pd.DataFrame, experts: pd.DataFrame, panel: pd.DataFrame) -> pd.DataFrame:
    """One row per package of the wave (assigned, or judged): grade counts, expert and panel values, ``d_Q`` and
    ``d_S``.

    ``d_Q`` = panel Q - mean expert Q (grades with a Q), ``d_S`` = panel accept
    - mean expert accept; NaN where either side is missing.
    """
    g = normalise_grades(grades)
    meta = pd.concat([g[_META], panel[_META]]).drop_duplicates("package_id").sort_values("package_id")
    assigned = g.drop_duplicates(["package_id", "grader_id"]).groupby("package_id").size()
    by = experts.groupby("package_id")
    out = meta.set_index("package_id")
    out["n_assigned"] = assigned.reindex(out.index).fillna(0).astype(int)
    out["n_grades"] = by.size().reindex(out.index).fillna(0).astype(int)
    out["n_q"] = by["Q"].count().reindex(out.index).fillna(0).astype(int)
    out["expert_q_mean"] = by["Q"].mean().reindex(out.index)
    out["expert_q_median"] = by["Q"].median().reindex(out.index)
    out["expert_accept_mean"] = by["accept"].mean().reindex(out.index)
    p = panel.set_index("package_id")
    out["n_judges"] = p["n_judges"].reindex(out.index).fillna(0).astype(int)
    for c in ("D", "E"):
        out[c] = p[c].reindex(out.index).astype(float)
    out["panel_q"] = p["Q"].reindex(out.index).astype(float)
    out["panel_accept"] = p["accept"].reindex(out.index).astype(float)
    out["panel_tie"] = p["panel_tie"].reindex(out.index).fillna(False).astype(bool)
    out["d_Q"] = out["panel_q"] - out["expert_q_mean"]
    out["d_S"] = out["panel_accept"] - out["expert_accept_mean"]
    return out.reset_index()


# --------------------------------------------------------------------------
# Krippendorff's alpha
# --------------------------------------------------------------------------


def krippendorff_alpha(data: np.ndarray, level: str, value_domain: Sequence[float] | None = None) -> float:
    """Alpha of a coders x units matrix (NaN: not coded) from the ``krippendorff`` package."""
    import krippendorff

    kw = {} if value_domain is None else {"value_domain": np.asarray(value_domain, dtype=float)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no variation gives 0/0; the caller states the reason
        return float(
            krippendorff.alpha(reliability_data=np.asarray(data, dtype=float), level_of_measurement=level, **kw)
        )


def alpha_replicates(
    data: np.ndarray,
    level: str,
    counts: np.ndarray,
    *,
    groups: np.ndarray | None = None,
    value_domain: Sequence[float] | None = None,
) -> np.ndarray:
    """Alpha in each bootstrap resample, ``(B,)``: ``counts[b, g]`` is how often group (package) g is drawn.

    The same coincidence-matrix formula as the krippendorff package (tested
    equal), in matrix form: a package's coincidences are summed once and each
    resample weights them by its counts. One call of the package per resample
    would take minutes at B = 2000 over the fifty-odd criteria. ``groups``
    gives each unit's package (0..G-1; default: every unit its own);
    ``level`` is nominal, ordinal or interval. A resample without variation
    gives NaN.
    """
    x = np.asarray(data, dtype=float)
    groups = np.arange(x.shape[1]) if groups is None else np.asarray(groups, dtype=int)
    G = counts.shape[1]
    ok = ~np.isnan(x)
    m = ok.sum(axis=0)
    use = m >= 2  # a unit coded once has no pair, so no coincidence
    with np.errstate(invalid="ignore", divide="ignore"):
        if level == "interval":  # squared differences: sums of values and of squares suffice
            v = np.where(ok, x, 0.0) * use
            s1, s2 = v.sum(axis=0), (v**2).sum(axis=0)
            observed = np.where(use, 2 * (m * s2 - s1**2) / np.where(use, m - 1, 1), 0.0)
            per = [np.bincount(groups, weights=w, minlength=G) for w in (observed, m * use, s1, s2)]
            obs, n, S1, S2 = (counts @ w for w in per)
            return 1 - obs / (2 * (n * S2 - S1**2) / (n - 1))
        domain = np.unique(x[ok]) if value_domain is None else np.asarray(value_domain, dtype=float)
        V = len(domain)
        vc = (x.T[:, :, None] == domain[None, None, :]).sum(axis=1).astype(float)  # units x values
        unit = (vc[:, :, None] * vc[:, None, :] - vc[:, :, None] * np.eye(V)) / np.where(use, m - 1, 1)[:, None, None]
        unit[~use] = 0.0
        per_group = np.zeros((G, V * V))
        np.add.at(per_group, groups, unit.reshape(len(vc), V * V))
        o = (counts @ per_group).reshape(-1, V, V)
        n_v = o.sum(axis=1)
        n = n_v.sum(axis=1)
        e = (n_v[:, :, None] * n_v[:, None, :] - n_v[:, :, None] * np.eye(V)) / (n - 1)[:, None, None]
        if level == "nominal":
            d = np.broadcast_to(1.0 - np.eye(V), o.shape)
        elif level == "ordinal":  # (n_c/2 + n_{c+1} + ... + n_{k-1} + n_k/2)^2, from each resample's margins
            i = np.arange(V)
            lo, hi = np.minimum.outer(i, i), np.maximum.outer(i, i)
            cum = np.cumsum(n_v, axis=1)
            between = cum[:, hi] - cum[:, lo] + n_v[:, lo]
            d = (between - (n_v[:, :, None] + n_v[:, None, :]) / 2) ** 2
        else:
            raise ValueError(f"level {level!r}: nominal, ordinal or interval")
        return 1 - (o * d).sum(axis=(1, 2)) / (e * d).sum(axis=(1, 2))


def alpha_estimate(
    data: np.ndarray,
    level: str,
    *,
    B: int,
    rng: np.random.Generator,
    groups: np.ndarray | None = None,
    value_domain: Sequence[float] | None = None,
    ci_level: float = 0.95,
) -> dict[str, Any]:
    """Alpha with its percentile bootstrap interval over packages: ``alpha, ci_low, ci_high, n_packages, n_values,
    note``.

    Only packages with a unit coded twice or more carry alpha, and only they
    are resampled. Not estimable (NaN, the reason in ``note``) with fewer than
    2 such packages, or when every value is the same.
    """
    x = np.asarray(data, dtype=float)
    groups = np.arange(x.shape[1]) if groups is None else np.asarray(groups, dtype=int)
    pairable = (~np.isnan(x)).sum(axis=0) >= 2
    packages, g = np.unique(groups[pairable], return_inverse=True)
    vals = x[:, pairable]
    out = {
        "alpha": np.nan,
        "ci_low": np.nan,
        "ci_high": np.nan,
        "n_packages": len(packages),
        "n_values": int((~np.isnan(vals)).sum()),
        "note": "",
    }
    if len(packages) < 2:
        out["note"] = f"{len(packages)} package(s) with two or more values; needs at least 2"
        return out
    if np.nanmin(vals) == np.nanmax(vals):
        out["note"] = "every value is the same (no variation to agree on)"
        return out
    out["alpha"] = krippendorff_alpha(vals, level, value_domain)
    reps = alpha_replicates(
        vals, level, resampling.bootstrap_counts(rng, len(packages), B), groups=g, value_domain=value_domain
    )
    reps[~np.isfinite(reps)] = np.nan
    lo, hi = resampling.percentile_interval(reps, ci_level)
    out["ci_low"], out["ci_high"] = float(lo), float(hi)
    flat = int(np.isnan(reps).sum())
    if flat:
        out["note"] = f"{flat} of {B} resamples had no variation and are left out of the interval"
    return out


def _long(table: pd.DataFrame, ids: list[str]) -> pd.DataFrame:
    """The criterion columns of an expert or panel table as rows: ``ids``, criterion, score (scored cells only)."""
    cols = [c for c in table.columns if str(c).startswith(CRITERION_PREFIX)]
    long = table.melt(id_vars=ids, value_vars=cols, var_name="criterion", value_name="score")
    long["criterion"] = long["criterion"].str.slice(len(CRITERION_PREFIX))
    return long.dropna(subset=["score"])


def _matrix(long: pd.DataFrame, coder: str, unit: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Coders x units (NaN: not coded), and each unit's package index."""
    if long.empty:
        return np.full((1, 0), np.nan), np.empty(0, dtype=int)
    wide = long.pivot_table(index=coder, columns=unit, values="score", aggfunc="first")
    packages = wide.columns.get_level_values(0) if len(unit) > 1 else wide.columns
    return wide.to_numpy(dtype=float), pd.Index(sorted(set(packages))).get_indexer(packages)


def _stack(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """The two coders' rows one under the other (an empty side left out, so the columns keep their types)."""
    parts = [f for f in (first, second) if not f.empty]
    return pd.concat(parts, ignore_index=True) if parts else first


def reliability_table(
    experts: pd.DataFrame,
    panel: pd.DataFrame,
    criteria: Mapping[str, Sequence[Criterion]],
    *,
    B: int,
    seed: int,
    ci_level: float = 0.95,
) -> pd.DataFrame:
    """Krippendorff's alpha among the experts and between panel and experts: Q (interval), all criteria and each
    criterion (ordinal).

    Rows: ``coders`` (experts, panel-experts), ``measure`` (Q, all criteria,
    SCENARIO/criterion for the scenarios of the wave), ``level``, ``alpha``,
    ``ci_low``, ``ci_high``, ``n_packages`` (packages with two or more
    values), ``n_values``, ``note``. The panel-experts coders are the panel's
    value and the experts' median per package; a package only one of them
    scored has no pair and carries nothing.
    """
    ex = _long(experts, ["package_id", "scenario", "grader_id"])
    ex_q = experts.rename(columns={"Q": "score"}).dropna(subset=["score"])
    unit = ["package_id", "scenario", "criterion"]
    pe = _stack(
        _long(panel, ["package_id", "scenario"]).assign(coder="panel"),
        ex.groupby(unit, as_index=False)["score"].median().assign(coder=EXPERTS),
    )
    pe_q = _stack(
        panel.rename(columns={"Q": "score"})[["package_id", "scenario", "score"]].assign(coder="panel"),
        ex_q.groupby(["package_id", "scenario"], as_index=False)["score"].median().assign(coder=EXPERTS),
    ).dropna(subset=["score"])
    present = set(experts["scenario"]) | set(panel["scenario"])
    keys = [(s, c.id) for s in sorted(present) for c in criteria.get(s, ())]
    rows = []
    for ci, (coders, long, q, coder) in enumerate(
        ((EXPERTS, ex, ex_q, "grader_id"), (PANEL_EXPERTS, pe, pe_q, "coder"))
    ):
        specs = [("Q", "interval", q, ["package_id"]), (ALL_CRITERIA, "ordinal", long, ["package_id", "criterion"])]
        specs += [
            (f"{s}/{c}", "ordinal", long[(long["scenario"] == s) & (long["criterion"] == c)], ["package_id"])
            for s, c in keys
        ]
        for mi, (measure, level, frame, by) in enumerate(specs):
            data, groups = _matrix(frame, coder, by)
            est = alpha_estimate(
                data,
                level,
                B=B,
                rng=np.random.default_rng([seed, _ALPHA_STREAM, ci, mi]),
                groups=groups,
                value_domain=HALF_POINTS if level == "ordinal" else None,
                ci_level=ci_level,
            )
            rows.append({"coders": coders, "measure": measure, "level": level, **est})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------
# Acceptance agreement
# --------------------------------------------------------------------------


def cohen_kappa(table: np.ndarray) -> float:
    """Cohen's kappa of a 2x2 table (rows: first rater's no/yes, columns: second's), statsmodels; NaN when undefined.

    Undefined when the table is empty or both raters gave one and the same
    decision throughout (chance agreement 1: kappa is 0/0).
    """
    from statsmodels.stats.inter_rater import cohens_kappa

    t = np.asarray(table, dtype=float)
    total = t.sum()
    if total == 0 or t.sum(axis=1) @ t.sum(axis=0) == total**2:
        return np.nan
    return float(cohens_kappa(t, return_results=False))


def percent_agreement(table: np.ndarray) -> float:
    """Share of pairs on the diagonal of a 2x2 table (NaN for an empty table)."""
    t = np.asarray(table, dtype=float)
    return float(np.trace(t) / t.sum()) if t.sum() > 0 else np.nan


def expert_pairs(experts: pd.DataFrame) -> pd.DataFrame:
    """Pairs of submitted grades on the same package: every slot pair i < j (``a`` the lower slot's accept, ``b`` the
    higher's)."""
    rows = []
    for pid, part in experts.sort_values("slot").groupby("package_id", sort=True):
        acc, slots = part["accept"].tolist(), part["slot"].tolist()
        rows += [
            {"package_id": pid, "slot_a": slots[i], "slot_b": slots[j], "a": acc[i], "b": acc[j]}
            for i in range(len(acc))
            for j in range(i + 1, len(acc))
        ]
    return pd.DataFrame(rows, columns=["package_id", "slot_a", "slot_b", "a", "b"]).dropna(subset=["a", "b"])


def panel_expert_pairs(experts: pd.DataFrame, panel: pd.DataFrame) -> pd.DataFrame:
    """The panel's accept (``a``) against each expert's (``b``) on every package with both."""
    p = panel.set_index("package_id")["accept"]
    out = experts[["package_id", "slot", "accept"]].rename(columns={"accept": "b"})
    out.insert(1, "a", p.reindex(out["package_id"]).to_numpy(dtype=float))
    return out.dropna(subset=["a", "b"]).reset_index(drop=True)


def _tables(pairs: pd.DataFrame) -> np.ndarray:
    """Per package (in id order) its 2x2 table, flattened ``(P, 4)``: cells no-no, no-yes, yes-no, yes-yes."""
    cell = (2 * pairs["a"].astype(int) + pairs["b"].astype(int)).to_numpy()
    ids, idx = np.unique(pairs["package_id"].to_numpy(dtype=str), return_inverse=True)
    flat = np.zeros((len(ids), 4))
    np.add.at(flat, (idx, cell), 1.0)
    return flat


def agreement_rows(
    pairs: pd.DataFrame, comparison: str, reference: float, *, B: int, rng: np.random.Generator, ci_level: float = 0.95
) -> list[dict[str, Any]]:
    """Percent agreement and Cohen's kappa of ``pairs`` (columns package_id, a, b) with bootstrap intervals over
    packages."""
    base = {"comparison": comparison, "n_pairs": len(pairs), "n_packages": int(pairs["package_id"].nunique())}
    rows = [
        {
            **base,
            "statistic": "agreement",
            "reference": reference,
            "reference_source": "GDPval" if np.isfinite(reference) else "",
        },
        {**base, "statistic": "Cohen's kappa", "reference": np.nan, "reference_source": ""},
    ]
    for r in rows:
        r.update({"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan, "note": ""})
    if base["n_packages"] < 2:
        for r in rows:
            r["note"] = f"{base['n_packages']} package(s) with a pair of decisions; needs at least 2"
        return rows
    flat = _tables(pairs)
    table = flat.sum(axis=0).reshape(2, 2)
    reps = resampling.bootstrap_counts(rng, len(flat), B) @ flat
    agree = (reps[:, 0] + reps[:, 3]) / reps.sum(axis=1)
    kappas = np.array([cohen_kappa(t.reshape(2, 2)) for t in reps])
    one_sided = bool((table.sum(axis=0) == 0).any() or (table.sum(axis=1) == 0).any())
    for r, est, rep in ((rows[0], percent_agreement(table), agree), (rows[1], cohen_kappa(table), kappas)):
        if not np.isfinite(est):
            r["note"] = "every decision is the same on both sides (kappa is 0/0)"
            continue
        lo, hi = resampling.percentile_interval(rep, ci_level)
        r.update({"estimate": est, "ci_low": float(lo), "ci_high": float(hi)})
        left_out = int(np.isnan(rep).sum())
        r["note"] = estimability.join_notes(
            f"{left_out} of {B} resamples had one decision throughout and are left out of the interval"
            if left_out
            else "",
            "one side gave one decision throughout (kappa is 0 by construction)" if r is rows[1] and one_sided else "",
            *estimability.interval_flags(lo, hi, base["n_packages"]),
        )
    return rows


def acceptance_table(
    experts: pd.DataFrame, panel: pd.DataFrame, *, B: int, seed: int, ci_level: float = 0.95
) -> pd.DataFrame:
    """Agreement of the accept decisions, expert-expert and panel-expert, with GDPval's reference agreement beside
    them."""
    rows = agreement_rows(
        expert_pairs(experts),
        "expert-expert",
        GDPVAL_EXPERT_EXPERT,
        B=B,
        rng=np.random.default_rng([seed, _ACCEPT_STREAM, 0]),
        ci_level=ci_level,
    )
    rows += agreement_rows(
        panel_expert_pairs(experts, panel),
        "panel-expert",
        GDPVAL_GRADER_EXPERT,
        B=B,
        rng=np.random.default_rng([seed, _ACCEPT_STREAM, 1]),
        ci_level=ci_level,
    )
    cols = [
        "comparison",
        "statistic",
        "estimate",
        "ci_low",
        "ci_high",
        "n_pairs",
        "n_packages",
        "reference",
        "reference_source",
        "note",
    ]
    return pd.DataFrame(rows)[cols]


# --------------------------------------------------------------------------
# The panel's bias
# --------------------------------------------------------------------------

BIAS_MEASURES = (("Q", "d_Q", "panel_q", "expert_q_mean"), ("accept", "d_S", "panel_accept", "expert_accept_mean"))


def bias_tables(
    packages: pd.DataFrame, arms: Sequence[str], contrast: Sequence[str], *, B: int, seed: int, ci_level: float = 0.95
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The panel's bias per arm (mean of ``d_Q``, ``d_S`` over the arm's packages) and its contrast between
    ``contrast``'s arms.

    A package enters with its d (a grade and a panel value on that side).
    Intervals: percentile bootstrap resampling packages within each arm; the
    contrast's replicates are differences of the two arms' replicates.
    Packages are treated as independent here (the scenario clustering enters
    H1, not these).
    """
    per_arm, contrasts = [], []
    for mi, (measure, col, panel_col, expert_col) in enumerate(BIAS_MEASURES):
        reps: dict[str, np.ndarray] = {}
        means: dict[str, float] = {}
        n: dict[str, int] = {}
        for ai, arm in enumerate(arms):
            have = packages[(packages["arm"] == arm) & packages[col].notna()]
            v = have[col].to_numpy(dtype=float)
            n[arm] = len(v)
            row = {
                "measure": measure,
                "arm": arm,
                "estimate": np.nan,
                "ci_low": np.nan,
                "ci_high": np.nan,
                "n_packages": len(v),
                "panel_mean": float(have[panel_col].mean()) if len(v) else np.nan,
                "expert_mean": float(have[expert_col].mean()) if len(v) else np.nan,
                "note": "",
            }
            if len(v):
                counts = resampling.bootstrap_counts(np.random.default_rng([seed, _BIAS_STREAM, mi, ai]), len(v), B)
                reps[arm] = counts @ v / len(v)
                means[arm] = float(v.mean())
                lo, hi = resampling.percentile_interval(reps[arm], ci_level)
                row.update(
                    {
                        "estimate": means[arm],
                        "ci_low": float(lo),
                        "ci_high": float(hi),
                        "note": "rests on one package" if len(v) == 1 else "",
                    }
                )
            else:
                row["note"] = f"no package of {arm} with an expert grade and a panel value"
            per_arm.append(row)
        t, c = contrast
        row = {
            "measure": measure,
            "contrast": estimators.contrast_name(contrast),
            "estimate": np.nan,
            "ci_low": np.nan,
            "ci_high": np.nan,
            "n_treated": n.get(t, 0),
            "n_control": n.get(c, 0),
            "note": "",
        }
        lacking = [a for a in (t, c) if a not in reps]
        if lacking:
            row["note"] = f"no package of {' and '.join(lacking)} with an expert grade and a panel value"
        else:
            lo, hi = resampling.percentile_interval(reps[t] - reps[c], ci_level)
            row.update(
                {
                    "estimate": means[t] - means[c],
                    "ci_low": float(lo),
                    "ci_high": float(hi),
                    "note": "an arm rests on one package" if min(n[t], n[c]) == 1 else "",
                }
            )
        contrasts.append(row)
    return pd.DataFrame(per_arm), pd.DataFrame(contrasts)


# --------------------------------------------------------------------------
# H1 on the experts' grades
# --------------------------------------------------------------------------


def h1_table(
    packages: pd.DataFrame, *, arms: Sequence[str], contrast: Sequence[str], q: float, settings: InferenceSettings
) -> pd.DataFrame:
    """The primary contrast of acceptance on the experts' grades, on the panel's over the same packages, and their
    difference.

    Expert acceptance ``S_e = D and not E and mean expert Q >= q`` per package,
    the panel's ``S_p`` the same with the panel's Q (the run's S). Both go
    through the primary analysis's estimator (scenario-equal-weighted mean of
    per-scenario arm rates, :func:`pilot.stats.primary.contrast_table`: its
    scenario-cluster bootstrap and sign-flip test) with the same resamples, so
    ``panel minus experts`` is the judges' bias in H1's own terms. A package
    enters with an expert Q, a panel Q, D and E. Not estimable when a scenario
    of the wave lacks such a package in either arm of the contrast (the
    scenario set, hence the estimand, would differ from the primary
    analysis's) or fewer than 2 scenarios have them.
    """
    name = estimators.contrast_name(contrast)
    ok = packages[
        packages["expert_q_mean"].notna() & packages["panel_q"].notna() & packages["D"].notna() & packages["E"].notna()
    ]
    wave_scenarios = sorted(packages["scenario"].unique())
    lacking = [
        f"{s} in {a}" for s in wave_scenarios for a in contrast if not ((ok["scenario"] == s) & (ok["arm"] == a)).any()
    ]
    n_scen = int(sum(all(((ok["scenario"] == s) & (ok["arm"] == a)).any() for a in contrast) for s in wave_scenarios))
    base = {"contrast": name, "n_scenarios": n_scen, "n_packages": int(ok["arm"].isin(contrast).sum())}
    labels = ("experts", "panel", "panel minus experts")
    reason = ""
    if lacking:
        reason = f"no package with an expert grade for {', '.join(lacking)}"
    elif n_scen < 2:
        reason = f"{n_scen} scenario(s) with expert-graded packages in both arms; needs at least 2"
    if reason:
        return pd.DataFrame(
            [
                {
                    "grades": g,
                    **base,
                    "estimate": np.nan,
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "p_value": np.nan,
                    "verdict": estimability.not_estimable(reason),
                    "note": reason,
                }
                for g in labels
            ]
        )
    # Equal scenario weights need neither minutes nor depth; Layout reads the columns all the same.
    frame = ok.assign(occupation="", professional_minutes=np.nan, designed_depth=np.nan)
    layout = Layout.of(frame, list(arms))
    w = layout.weights("equal")
    counts = resampling.bootstrap_counts(
        np.random.default_rng([settings.seed, 2]), layout.J, settings.B
    )  # the primary analysis's stream
    rows, diffs = [], []
    for g, qcol in (("experts", "expert_q_mean"), ("panel", "panel_q")):
        S = runtable.acceptance(frame["D"], frame["E"], frame[qcol], q)
        means = layout.means(S)
        table, _ = contrast_table(means, layout, [tuple(contrast)], w, settings, counts=counts, adjustment=None)
        r = table.iloc[0]
        diffs.append(estimators.contrast_differences(means, layout, [tuple(contrast)]))
        alpha = 1 - settings.level
        verdict = estimability.all_of(
            (bool(r.estimate > 0), "")
            if estimability.known(r.estimate)
            else (None, f"{name}: {r.note or 'no estimate'}"),
            (bool(r.p_value < alpha), "") if estimability.known(r.p_value) else (None, f"{name}: no p-value"),
        )
        rows.append(
            {
                "grades": g,
                **base,
                "estimate": float(r.estimate),
                "ci_low": float(r.ci_low),
                "ci_high": float(r.ci_high),
                "p_value": float(r.p_value),
                "verdict": verdict,
                "note": str(r.note),
            }
        )
    d = diffs[1] - diffs[0]
    lo, hi = resampling.percentile_interval(resampling.bootstrap_means(d, counts, w), settings.level)
    rows.append(
        {
            "grades": labels[2],
            **base,
            "estimate": float(resampling.weighted_mean(d, w)[0]),
            "ci_low": float(lo[0]),
            "ci_high": float(hi[0]),
            "p_value": np.nan,
            "verdict": "",
            "note": estimability.join_notes("descriptive: no test", *estimability.interval_flags(lo, hi, n_scen)),
        }
    )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------
# Coverage
# --------------------------------------------------------------------------


def coverage_table(
    grades: pd.DataFrame, experts: pd.DataFrame, packages: pd.DataFrame, *, sample: Mapping[str, Any] | None = None
) -> pd.DataFrame:
    """What was assigned and submitted, how many grades each package has, and every exclusion with its reason.

    With the wave's ``sample`` (``offered``: the judged runs of the primary waves, agent errors included;
    ``drawn``; ``per_stratum``), the table starts from every judged run and counts those the sample left out.
    """
    g = normalise_grades(grades)
    assignments = g.drop_duplicates(["package_id", "grader_id"])
    status = assignments["status"].value_counts()
    n = packages["n_grades"]
    no_panel = packages["n_judges"] == 0
    no_de = packages["n_grades"].gt(0) & ~no_panel & (packages["D"].isna() | packages["E"].isna())
    rows: list[tuple[str, int, str]] = []
    if sample and sample.get("offered") is not None:
        offered, drawn = int(sample["offered"]), int(sample.get("drawn", len(packages)))
        per = sample.get("per_stratum")
        rows += [
            (
                "judged runs of the primary waves",
                offered,
                "every finished run of the worker model that a judge scored, agent errors included",
            ),
            (
                "drawn into the wave",
                drawn,
                "all of them" if per is None else f"at most {int(per)} per scenario and arm (seeded)",
            ),
            ("not drawn", offered - drawn, "left out by the sample rule" if offered > drawn else ""),
        ]
    rows += [
        ("assignments", len(assignments), ""),
        ("graders", int(assignments["grader_id"].nunique()), ""),
        ("submitted", int(status.get("submitted", 0)), ""),
        ("saved, not submitted", int(status.get("saved", 0)), "a draft is no grade: left out"),
        ("open", int(status.get("open", 0)), "not graded: left out"),
        ("packages", len(packages), ""),
        ("packages with 0 grades", int((n == 0).sum()), "left out of every estimate"),
        (
            "packages with 1 grade",
            int((n == 1).sum()),
            "in the comparisons with the panel; left out of agreement among experts (needs 2)",
        ),
        ("packages with 2+ grades", int((n >= 2).sum()), ""),
        (
            "packages without a valid judge",
            int(no_panel.sum()),
            "no panel value, D or E: left out of every comparison with the panel and of H1",
        ),
        ("packages without D or E", int(no_de.sum()), "left out of H1"),
        (
            "packages with a panel tie on accept",
            int(packages["panel_tie"].sum()),
            "the judges' votes split evenly: counted as not accepted",
        ),
        (
            "grades missing a criterion score",
            int((experts["missing"] != "").sum()),
            "no expert Q: left out of the Q measures, kept for the rest",
        ),
        (
            "grades with scores outside the rubric",
            int((experts["outside_rubric"] != "").sum()),
            "those scores are ignored",
        ),
    ]
    return pd.DataFrame(rows, columns=["item", "count", "note"])
