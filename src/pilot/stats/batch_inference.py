"""The primary stage's contrast inference for many studies at once, in exact integer arithmetic.

:func:`pilot.stats.primary.contrast_table` analyses one study: the mean of
the scenario differences, its scenario-cluster percentile bootstrap interval
and its paired sign-flip p-value. The calibration needs the same numbers for
tens of thousands of simulated studies. With equal scenario weights and
acceptance S in {0, 1}, every scenario difference is a multiple of ``1/L``
(``L`` the least common multiple of the possible numbers of scored repeats),
so ``y = L d`` is a small integer: every bootstrap numerator and every
sign-flipped sum is then an integer well inside float32's exact range, and

- bootstrap means are ``(counts @ y) / (L counts @ v)``, one batched matrix
  product per block of studies (float32, exact);
- the sign-flip test compares integers, so a tie with the observed statistic
  is a tie (the per-study test compares floats within a relative tolerance);
- the percentile interval takes the order statistics of these means with
  numpy's linear interpolation, as the stage does.

The primary stage runs this code for its one study whenever the scenario
weights are equal and the differences lie on such a grid
(:func:`pilot.stats.primary.contrast_table`), and the calibration runs it for
blocks of simulated studies, so the two give identical numbers (a test checks
it on random studies). Against the float implementation in
:mod:`pilot.stats.resampling` (still used for weighted analyses), estimates and
interval ends agree to rounding, and p-values agree except where float
rounding decided an exact tie: differences (-2, 1, 3, -2)/3 sum to 1.1e-16 in
floats, and the float test gives p = 0.875 where the exact one gives 1.

The bootstrap counts and sign vectors are inputs: one set per study, or one
``(B, J)`` count matrix shared by every study (then all studies' resampled
numerators come from a single matrix product).
"""

from __future__ import annotations

import math

import numpy as np

from pilot.stats import resampling

# float32 holds every integer up to 2^24 exactly; sums beyond that use float64.
_F32_EXACT = 2**24


def grid_denominator(max_repeats: int) -> int:
    """``L``: every mean of at most ``max_repeats`` values in {0, 1} is a multiple of ``1/L``."""
    return math.lcm(*range(1, max(1, int(max_repeats)) + 1))


def grid_of(d: np.ndarray, max_repeats: int = 10) -> int | None:
    """The smallest ``grid_denominator(r)`` (r <= ``max_repeats``) on whose grid every value of ``d`` lies, else
    None."""
    x = np.asarray(d, dtype=float)
    x = x[~np.isnan(x)]
    for r in range(1, max_repeats + 1):
        L = grid_denominator(r)
        if np.all(np.abs(x * L - np.rint(x * L)) <= 1e-9):
            return L
    return None


def on_grid(d: np.ndarray, L: int) -> np.ndarray:
    """``L d`` as exact integers (float64; NaN stays NaN). Refuses values off the grid."""
    y: np.ndarray = np.rint(d * L)
    off = np.abs(d * L - y)
    if np.nanmax(off, initial=0.0) > 1e-6:
        raise ValueError(f"scenario differences are not multiples of 1/{L}: largest departure {np.nanmax(off) / L:.3g}")
    return y


def _linear_quantile_rows(ordered: np.ndarray, prob: float) -> np.ndarray:
    """numpy's "linear" quantile of each row of ``ordered`` (rows sorted ascending)."""
    pos = prob * (ordered.shape[-1] - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, ordered.shape[-1] - 1)
    q: np.ndarray = ordered[..., lo] + (pos - lo) * (ordered[..., hi] - ordered[..., lo])
    return q


def contrast_inference(
    y: np.ndarray,
    L: int,
    counts: np.ndarray,
    signs: np.ndarray,
    level: float,
    *,
    exact: bool,
    replicates: bool = False,
) -> dict[str, np.ndarray]:
    """Estimate, percentile interval, sign-flip p and scenario count per study and column.

    ``y``: ``(n, J, C)`` scenario differences times ``L`` (integers, NaN where a
    scenario has no difference); ``counts``: ``(n, B, J)`` bootstrap counts, or
    ``(B, J)`` shared by every study;
    ``signs``: ``(P, J)`` sign vectors, all ``2^J`` when ``exact``. Returns
    arrays of shape ``(n, C)`` (and the bootstrap means, ``(n, B, C)``, under
    ``replicates`` when ``replicates`` is true).
    """
    n, J, C = y.shape
    valid = ~np.isnan(y)
    yv = np.where(valid, y, 0.0)
    v = valid.astype(float)
    n_scen = valid.sum(axis=1)
    num = yv.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.where(n_scen > 0, num / (L * np.maximum(n_scen, 1)), np.nan)
    big = float(np.abs(yv).max(initial=0.0)) * J >= _F32_EXACT
    ftype = np.float64 if big else np.float32

    # Bootstrap numerators (and, where needed, denominators) as matrix products, (n, C, B).
    B = counts.shape[-2]
    cT = np.swapaxes(counts.astype(ftype, copy=False), -1, -2)

    def resampled(values: np.ndarray) -> np.ndarray:
        rows = np.moveaxis(values, 1, 2).astype(ftype)  # (n, C, J)
        sums: np.ndarray
        if cT.ndim == 2:  # shared resamples: one product for every study
            sums = (rows.reshape(n * C, J) @ cT).reshape(n, C, B)
        else:
            sums = np.matmul(rows, cT)
        return sums

    numb = resampled(yv)
    a = (1 - level) / 2
    lo = np.full((n, C), np.nan)
    hi = np.full((n, C), np.nan)
    full = n_scen == J
    if full.any():
        # Every scenario has the difference: each resample's denominator is J, so the means are in
        # the order of their integer numerators and only the four order statistics need dividing.
        ordered = np.sort(numb[full], axis=-1)
        for out, prob in ((lo, a), (hi, 1 - a)):
            pos = prob * (B - 1)
            k = int(np.floor(pos))
            below = ordered[:, k].astype(float) / (L * J)
            above = ordered[:, min(k + 1, B - 1)].astype(float) / (L * J)
            out[full] = below + (pos - k) * (above - below)
    partial = (n_scen > 0) & ~full
    reps = None
    if partial.any() or replicates:
        denb = resampled(v)
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = numb.astype(float) / (L * denb.astype(float))  # NaN: no scenario in the resample
        for i, k in zip(*np.nonzero(partial), strict=True):
            r = reps[i, k]
            if np.isnan(r).any():  # some resample lacks the statistic; the stage ignores those
                lo[i, k], hi[i, k] = resampling.percentile_interval(r, level)
            else:
                ordered = np.sort(r)
                lo[i, k], hi[i, k] = _linear_quantile_rows(ordered, a), _linear_quantile_rows(ordered, 1 - a)

    # Sign flip: integer sums, so ties are exact.
    P = signs.shape[0]
    cols: np.ndarray = np.ascontiguousarray(np.moveaxis(yv, 1, 2).reshape(n * C, J), dtype=ftype)
    obs = num.reshape(n * C).astype(ftype)
    st: np.ndarray = np.ascontiguousarray(signs.T, dtype=ftype)
    greater = np.empty(n * C, dtype=np.int64)
    less = np.empty(n * C, dtype=np.int64)
    step = max(1, (1 << 20) // max(P, 1))  # about 4 MB of null sums at a time
    for s in range(0, n * C, step):
        T = cols[s : s + step] @ st  # (chunk, P)
        o = obs[s : s + step]
        if P <= 4096:
            greater[s : s + step] = np.count_nonzero(T >= o[:, None], axis=1)
            less[s : s + step] = np.count_nonzero(T <= o[:, None], axis=1)
            continue
        for r in range(T.shape[0]):  # long rows: a flat count per row is several times faster than an axis count
            greater[s + r] = np.count_nonzero(T[r] >= o[r])
            less[s + r] = np.count_nonzero(T[r] <= o[r])
    adj = 0 if exact else 1
    p = np.minimum(1.0, 2 * np.minimum((greater + adj) / (P + adj), (less + adj) / (P + adj))).reshape(n, C)
    p = np.where(n_scen > 0, p, np.nan)
    result = {"estimate": est, "ci_low": lo, "ci_high": hi, "p_value": p, "n_scenarios": n_scen}
    if replicates:
        assert reps is not None  # computed above whenever replicates are asked for
        result["replicates"] = np.moveaxis(reps, 2, 1)  # (n, B, C)
    return result
