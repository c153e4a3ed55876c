"""Small-sample sensitivities beside the preregistered inference, never instead of it.

With J = 10 scenario clusters the preregistered percentile bootstrap covers
less than its nominal level (Appendix B measures it) and a cluster-robust
Wald test with a normal reference rejects too often. This module gives the
readings a referee asks for at that size, each reported beside the
preregistered one:

* :func:`t_interval`: the studentised interval of a contrast, the mean of the
  J scenario differences with a t(J - 1) reference (equal weights: the
  one-sample t interval; weighted: the same with the weighted mean's
  sandwich variance and the J / (J - 1) correction);
* :func:`wild_cluster_bootstrap`: the wild cluster bootstrap-t of the same
  mean (one value per cluster, so the regression on a constant), with
  Rademacher weights enumerated over all 2^J sign vectors when that is at most
  ``max_enumerate`` and Webb's six-point weights drawn with a seed otherwise
  (MacKinnon and Webb 2017). The interval inverts the unrestricted bootstrap-t
  (WCU); the p-value imposes the null (WCR);
* :func:`t_reference`: a cluster-robust Wald statistic read against t(G - 1)
  instead of the normal, as statsmodels does with ``use_t=True``;
* :func:`lattice_atoms` and :func:`lattice_flag`: a percentile interval whose
  end sits on a value the bootstrap reaches with probability above alpha / 2.
  When k of the J scenarios share the value v, a resample made only of them
  has mean v, with probability at least (k / J)^J. An atom heavier than
  alpha / 2 lies inside the exact percentile interval, so a Monte Carlo
  interval that excludes v, or ends on it, says nothing about v: the flag
  names it, and no sentence may rest on that end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: Webb's six-point distribution: plus or minus sqrt(1/2), 1 and sqrt(3/2), each with probability 1/6.
WEBB_POINTS: np.ndarray = np.array(
    [-math.sqrt(1.5), -1.0, -math.sqrt(0.5), math.sqrt(0.5), 1.0, math.sqrt(1.5)], dtype=float
)
#: Sign vectors enumerated (Rademacher) up to this many; beyond it Webb's weights are drawn.
MAX_ENUMERATE = 20_000
#: Draws of Webb's weights when the sign vectors are too many to enumerate.
WEBB_DRAWS = 9_999


def _clean(values: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(values, dtype=float).ravel()
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float).ravel()
    ok = ~np.isnan(x)
    return x[ok], w[ok]


def weighted_mean_se(values: np.ndarray, weights: np.ndarray | None = None) -> tuple[float, float, int]:
    """The weighted mean of cluster values, its standard error and the number of clusters J.

    The variance is the sandwich ``J / (J - 1) * sum w_j^2 (x_j - m)^2 / (sum w_j)^2``, which for
    equal weights is the sample variance over J (the one-sample t statistic's).
    """
    x, w = _clean(values, weights)
    J = int(x.size)
    if J == 0:
        return math.nan, math.nan, 0
    m = float((w * x).sum() / w.sum())
    if J < 2:
        return m, math.nan, J
    var = J / (J - 1) * float((w**2 * (x - m) ** 2).sum()) / float(w.sum()) ** 2
    return m, math.sqrt(var), J


def t_interval(values: np.ndarray, weights: np.ndarray | None = None, level: float = 0.95) -> tuple[float, float]:
    """The studentised interval ``m -/+ t(J - 1) se`` of the mean of J cluster values (NaN below two clusters)."""
    m, se, J = weighted_mean_se(values, weights)
    if J < 2 or not math.isfinite(se):
        return math.nan, math.nan
    t = float(stats.t.ppf(0.5 + level / 2, J - 1))
    return m - t * se, m + t * se


def t_reference(estimate: float, se: float, n_clusters: int, level: float = 0.95) -> tuple[float, float, float]:
    """A Wald statistic read against t(G - 1): two-sided p and interval (NaN below two clusters or without an SE)."""
    if n_clusters < 2 or not (math.isfinite(estimate) and math.isfinite(se)) or se <= 0:
        return math.nan, math.nan, math.nan
    df = n_clusters - 1
    p = float(2 * stats.t.sf(abs(estimate / se), df))
    t = float(stats.t.ppf(0.5 + level / 2, df))
    return p, estimate - t * se, estimate + t * se


@dataclass(frozen=True)
class WildBootstrap:
    """A wild cluster bootstrap-t of a mean of cluster values."""

    estimate: float
    ci_low: float
    ci_high: float
    p_value: float  # two-sided, the null imposed (WCR)
    weights: str  # "Rademacher, enumerated" or "Webb, drawn"
    n_draws: int
    n_clusters: int


def _studentised(star: np.ndarray, w: np.ndarray, centre: float) -> np.ndarray:
    """``(m* - centre) / se*`` for each row of bootstrap cluster values ``star`` (B, J)."""
    J = star.shape[1]
    sw = w.sum()
    m = star @ w / sw
    var = J / (J - 1) * ((star - m[:, None]) ** 2 @ (w**2)) / sw**2
    se = np.sqrt(np.maximum(var, 0.0))
    num = m - centre
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, num / np.where(se > 0, se, 1.0), np.where(num == 0, 0.0, np.sign(num) * np.inf))
    return t


def _auxiliary(J: int, rng: np.random.Generator | None, max_enumerate: int) -> tuple[np.ndarray, str]:
    if 2**J <= max_enumerate:
        codes = np.arange(2**J)[:, None]
        return np.where((codes >> np.arange(J)) & 1, -1.0, 1.0), "Rademacher, enumerated"
    gen = rng if rng is not None else np.random.default_rng(0)
    return WEBB_POINTS[gen.integers(0, 6, size=(WEBB_DRAWS, J))], "Webb, drawn"


def wild_cluster_bootstrap(
    values: np.ndarray,
    weights: np.ndarray | None = None,
    level: float = 0.95,
    *,
    rng: np.random.Generator | None = None,
    max_enumerate: int = MAX_ENUMERATE,
) -> WildBootstrap:
    """The wild cluster bootstrap-t interval (WCU) and p-value (WCR) of the mean of J cluster values.

    WCU: ``x*_j = m + v_j (x_j - m)``, ``t* = (m* - m) / se*``, interval
    ``[m - t*_(1-a/2) se, m - t*_(a/2) se]``. WCR: ``x*_j = v_j x_j`` (residuals under
    ``mean = 0``), ``p = P(|t*| >= |t|)`` with ties counted. Quantiles are
    numpy's linear interpolation over the bootstrap distribution.
    """
    x, w = _clean(values, weights)
    J = int(x.size)
    m, se, _ = weighted_mean_se(x, w)
    if J < 2 or not math.isfinite(se):
        return WildBootstrap(m, math.nan, math.nan, math.nan, "", 0, J)
    v, kind = _auxiliary(J, rng, max_enumerate)
    a = (1 - level) / 2
    if se == 0:  # every cluster has the same value: nothing varies in any resample
        return WildBootstrap(m, m, m, 0.0 if m != 0 else 1.0, kind, int(v.shape[0]), J)
    t_u = _studentised(m + v * (x - m)[None, :], w, m)
    q_lo, q_hi = np.quantile(t_u, [a, 1 - a])
    t_obs = m / se
    t_r = _studentised(v * x[None, :], w, 0.0)
    p = float((np.abs(t_r) >= abs(t_obs) * (1 - 1e-12)).mean())
    return WildBootstrap(m, float(m - q_hi * se), float(m - q_lo * se), p, kind, int(v.shape[0]), J)


@dataclass(frozen=True)
class LatticeAtom:
    """A value k of the J clusters share, reached by a resample of them alone with probability at least ``mass``."""

    value: float
    k: int
    J: int
    mass: float


def lattice_atoms(values: np.ndarray, level: float = 0.95, *, tol: float = 1e-12) -> list[LatticeAtom]:
    """The values shared by enough clusters that a bootstrap resample reaches them with probability above alpha / 2."""
    x = np.asarray(values, dtype=float).ravel()
    x = x[~np.isnan(x)]
    J = int(x.size)
    out: list[LatticeAtom] = []
    if J == 0:
        return out
    alpha = 1 - level
    seen: list[float] = []
    for v in np.sort(x):
        if any(abs(v - s) <= tol for s in seen):
            continue
        seen.append(float(v))
        k = int((np.abs(x - v) <= tol).sum())
        mass = (k / J) ** J
        if mass > alpha / 2:
            out.append(LatticeAtom(float(v), k, J, mass))
    return out


def lattice_flag(low: float, high: float, values: np.ndarray, level: float = 0.95, *, tol: float = 1e-12) -> str:
    """A note when a percentile interval ends on, or its Monte Carlo ends exclude, a heavy bootstrap atom ('' else).

    An atom of mass above alpha / 2 lies inside the exact percentile interval,
    so the interval cannot be read as excluding it, whatever the Monte Carlo
    draw gave.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return ""
    notes = []
    for atom in lattice_atoms(values, level, tol=tol):
        on_end = abs(low - atom.value) <= tol or abs(high - atom.value) <= tol
        outside = atom.value < low - tol or atom.value > high + tol
        if on_end or outside:
            notes.append(
                # No '; ' inside a note: it separates notes, and estimability.join_notes drops a repeated part.
                f"percentile end on a lattice point ({atom.k} of {atom.J} scenarios have {_plain(atom.value)}, "
                f"which a resample reaches with probability at least {atom.mass:.3f} > {(1 - level) / 2:g}, "
                "so the exact interval contains it)"
            )
    return "; ".join(notes)


def _plain(v: float) -> str:
    text = f"{abs(v):.3f}"
    return ("\u2212" if v < 0 and float(text) != 0 else "") + text


def pass_hat_k(successes: np.ndarray, trials: np.ndarray, k: int) -> np.ndarray:
    """tau-bench's pass^k per task: ``C(c, k) / C(n, k)``, the chance that k of the n trials drawn without
    replacement all succeeded (NaN where fewer than k trials were scored)."""
    c = np.asarray(successes, dtype=int).ravel()
    n = np.asarray(trials, dtype=int).ravel()
    out = np.full(c.shape, np.nan)
    for i, (ci, ni) in enumerate(zip(c, n, strict=True)):
        if ni >= k >= 1:
            out[i] = math.comb(int(ci), k) / math.comb(int(ni), k)
    return out
