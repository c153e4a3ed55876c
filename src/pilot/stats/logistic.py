"""Logistic regressions that report a coefficient only when the data can estimate it.

Maximum likelihood has no finite answer under complete or quasi-complete
separation (an arm at 0% or 100% acceptance, or a covariate threshold that
splits accepted from not accepted runs); statsmodels then returns huge
coefficients without a warning. :func:`separating_direction` detects
separation exactly, as a linear programme (Konis 2007): the data are separated
when some ``b != 0`` has ``(2y-1) x_i b >= 0`` for every run. :func:`fit`
checks that first, then the fit's convergence and the size of its
coefficients and standard errors, and reports each term as a number or
``not estimable (reason)``. Beside the preregistered normal reference each
term carries the same Wald statistic read against t(G - 1), G the number of
scenario clusters (:func:`pilot.stats.small_sample.t_reference`), a
small-sample sensitivity that no verdict rests on.

:func:`firth_fit` is a penalised (Firth) fit that stays finite under
separation; it is exploratory only (``protocol/interpretations.md``) and never
feeds a verdict.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from pilot.stats import small_sample

# Beyond these a logit coefficient (log-odds per unit) or its standard error means the likelihood is
# flat towards infinity (near separation), not an estimate: exp(15) is an odds ratio of 3 million.
MAX_COEF = 15.0
MAX_SE = 50.0
MIN_CLUSTERS = 3


@dataclass
class LogitFit:
    """Coefficients, cluster-robust standard errors, p-values and intervals per term (NaN: not estimable, see
    ``reasons``)."""

    terms: list[str]
    coef: np.ndarray
    se: np.ndarray
    p_value: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    reasons: list[str]
    n_obs: int
    n_clusters: int
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict, repr=False)
    #: The same Wald statistics read against t(G - 1) instead of the normal (a small-sample sensitivity, never the
    #: verdict's).
    p_t: np.ndarray = field(default_factory=lambda: np.array([]))
    ci_t_low: np.ndarray = field(default_factory=lambda: np.array([]))
    ci_t_high: np.ndarray = field(default_factory=lambda: np.array([]))

    def __post_init__(self) -> None:
        if self.p_t.size != len(self.terms):  # no t reading given: NaN, as the normal reading of an unestimable term
            nan = np.full(len(self.terms), np.nan)
            self.p_t, self.ci_t_low, self.ci_t_high = nan.copy(), nan.copy(), nan.copy()

    def estimable(self, term: str) -> bool:
        """The term has a point estimate (its errors may still be missing, see ``reasons``)."""
        return bool(np.isfinite(self.coef[self.terms.index(term)]))

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "term": self.terms,
                "coef": self.coef,
                "se": self.se,
                "p_value": self.p_value,
                "ci_low": self.ci_low,
                "ci_high": self.ci_high,
                "p_t": self.p_t,
                "ci_t_low": self.ci_t_low,
                "ci_t_high": self.ci_t_high,
                "note": self.reasons,
            }
        )


def separating_direction(X: np.ndarray, y: np.ndarray, tol: float = 1e-7) -> np.ndarray | None:
    """A direction ``b`` (entries in [-1, 1]) that separates the outcomes, or None when there is none.

    Maximises ``sum_i s_i x_i b`` subject to ``s_i x_i b >= 0`` (``s = 2y - 1``):
    the optimum is zero exactly when the maximum-likelihood estimate exists.
    """
    X = np.asarray(X, dtype=float)
    s = 2.0 * np.asarray(y, dtype=float) - 1.0
    A = s[:, None] * X
    res = optimize.linprog(
        -A.sum(axis=0), A_ub=-A, b_ub=np.zeros(len(A)), bounds=[(-1.0, 1.0)] * X.shape[1], method="highs"
    )
    if res.status != 0 or -res.fun <= tol * max(1.0, len(A)):
        return None
    b = np.where(np.abs(res.x) > tol, res.x, 0.0)
    return b if np.any(b) else None


def unestimable_fit(terms: list[str], reason: str, n_obs: int, n_clusters: int, note: str = "") -> LogitFit:
    """A fit that could not be made: every coefficient and interval is NaN, each term carrying the reason."""
    nan = np.full(len(terms), np.nan)
    return LogitFit(
        terms,
        nan.copy(),
        nan.copy(),
        nan.copy(),
        nan.copy(),
        nan.copy(),
        [reason] * len(terms),
        n_obs,
        n_clusters,
        note or reason,
    )


def fit(y: np.ndarray, X: np.ndarray, terms: list[str], groups: np.ndarray, *, level: float = 0.95) -> LogitFit:
    """Logistic regression of ``y`` on ``X`` (with its intercept column), standard errors clustered by ``groups``."""
    # The GLM alone: statsmodels.api would import its time-series and graphics modules too (seconds).
    from statsmodels.genmod import families
    from statsmodels.genmod.generalized_linear_model import GLM

    y = np.asarray(y, dtype=float)
    X = np.asarray(X, dtype=float)
    n, G = len(y), len(np.unique(groups))
    if n == 0:
        return unestimable_fit(terms, "no scored run", 0, 0)
    if y.min() == y.max():
        return unestimable_fit(
            terms, "no variation in S (" + ("every run accepted" if y[0] == 1 else "no run accepted") + ")", n, G
        )
    if np.linalg.matrix_rank(X) < X.shape[1]:
        return unestimable_fit(terms, "collinear design (a term has no variation among scored runs)", n, G)
    b = separating_direction(X, y)
    if b is not None:
        hit = [t for t, v in zip(terms, b, strict=True) if v != 0]
        return unestimable_fit(
            terms,
            f"separation: the outcomes are split by {', '.join(hit)} (no finite maximum-likelihood estimate)",
            n,
            G,
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if G >= MIN_CLUSTERS:
                res = GLM(y, X, family=families.Binomial()).fit(cov_type="cluster", cov_kwds={"groups": groups})
            else:  # the point estimate only: a cluster-robust variance from one or two clusters is no variance
                res = GLM(y, X, family=families.Binomial()).fit()
        except (np.linalg.LinAlgError, ValueError) as exc:
            return unestimable_fit(terms, f"fit failed ({type(exc).__name__})", n, G)
    if not getattr(res, "converged", True):
        return unestimable_fit(terms, "the fit did not converge", n, G)
    coef, se, p = np.asarray(res.params, float), np.asarray(res.bse, float), np.asarray(res.pvalues, float)
    ci = np.asarray(res.conf_int(alpha=1 - level), float)
    reasons = []
    for c, s in zip(coef, se, strict=True):
        if not (np.isfinite(c) and np.isfinite(s)) or abs(c) > MAX_COEF or s > MAX_SE or s <= 0:
            reasons.append("coefficient or standard error explodes (near separation)")
        else:
            reasons.append("")
    bad = np.array([bool(r) for r in reasons])

    def nanify(v: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.where(bad, np.nan, v)
        return out

    notes = sorted(
        {
            str(w.message).splitlines()[0]
            for w in caught
            if "converge" in str(w.message).lower() or "separation" in str(w.message).lower()
        }
    )
    if G < MIN_CLUSTERS:
        few = f"{G} scenario cluster(s); cluster-robust errors need at least {MIN_CLUSTERS}"
        nan = np.full(len(terms), np.nan)
        return LogitFit(
            terms,
            nanify(coef),
            nan.copy(),
            nan.copy(),
            nan.copy(),
            nan.copy(),
            [r or few for r in reasons],
            n,
            G,
            "; ".join([*notes, few]),
            {"fit": res},
        )
    t_read = np.array([small_sample.t_reference(c, s, G, level) for c, s in zip(coef, se, strict=True)], dtype=float)
    return LogitFit(
        terms,
        nanify(coef),
        nanify(se),
        nanify(p),
        nanify(ci[:, 0]),
        nanify(ci[:, 1]),
        reasons,
        n,
        G,
        "; ".join(notes),
        {"fit": res},
        nanify(t_read[:, 0]),
        nanify(t_read[:, 1]),
        nanify(t_read[:, 2]),
    )


def firth_fit(
    y: np.ndarray, X: np.ndarray, terms: list[str], *, level: float = 0.95, max_iter: int = 100, tol: float = 1e-8
) -> pd.DataFrame:
    """Firth's penalised logistic regression (Jeffreys-prior penalty), finite under separation.

    EXPLORATORY: Wald intervals from the penalised information, no clustering;
    reported beside the maximum-likelihood table, never used for a verdict.
    """
    y = np.asarray(y, dtype=float)
    X = np.asarray(X, dtype=float)
    beta = np.zeros(X.shape[1])
    converged = False
    for _ in range(max_iter):
        p = 1 / (1 + np.exp(-(X @ beta)))
        W = p * (1 - p)
        info = X.T @ (X * W[:, None])
        try:
            inv = np.linalg.inv(info)
        except np.linalg.LinAlgError:
            break
        h = np.einsum("ij,jk,ik->i", X * np.sqrt(W)[:, None], inv, X * np.sqrt(W)[:, None])
        score = X.T @ (y - p + h * (0.5 - p))
        step = inv @ score
        # Halve a step that would leave the coefficients implausibly far out (keeps the iteration stable).
        while np.max(np.abs(step)) > 5:
            step /= 2
        beta = beta + step
        if np.max(np.abs(step)) < tol:
            converged = True
            break
    z = stats.norm.ppf(0.5 + level / 2)
    if not converged:
        nan = np.full(len(terms), np.nan)
        return pd.DataFrame(
            {
                "term": terms,
                "coef": nan,
                "se": nan,
                "ci_low": nan,
                "ci_high": nan,
                "note": "exploratory Firth fit did not converge",
            }
        )
    p = 1 / (1 + np.exp(-(X @ beta)))
    se = np.sqrt(np.diag(np.linalg.inv(X.T @ (X * (p * (1 - p))[:, None]))))
    return pd.DataFrame(
        {
            "term": terms,
            "coef": beta,
            "se": se,
            "ci_low": beta - z * se,
            "ci_high": beta + z * se,
            "note": "exploratory (Firth penalised likelihood)",
        }
    )
