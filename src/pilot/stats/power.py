"""Power of the pilot's paired scenario-level test, by vectorised simulation.

The simulated study has the pilot's cluster structure. Scenario ``j`` has a
random intercept ``b_j ~ N(0, sd^2)`` on the logit scale, so the control arm
accepts with probability ``p0_j = expit(logit(baseline) + b_j)``; the treated
arm's probability ``p1_j`` follows one of the effect readings below. Each arm
is run ``R`` times per scenario; the scenario's paired premium is
``d_j = (k1_j - k0_j) / R`` (difference of repeat means), and a two-sided
paired test on ``d_1..d_J`` is done at level ``alpha``.

Because every ``d_j`` lies on the lattice ``{-R..R} / R``, the exact
sign-flip, signed-rank and sign tests have null distributions that depend only
on how many scenarios have each absolute difference. They are computed once
per such count vector by convolution, which makes exact tests for thousands of
simulated studies cheap (see ``_lattice_tail``).

Random numbers: one ``SeedSequence([seed, J, R])`` per design, shared by all
effect sizes and readings of that design (common random numbers), so curves
over ``delta`` are smooth and comparisons between readings are paired.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

if TYPE_CHECKING:  # matplotlib loads when a figure is drawn
    from matplotlib.figure import Figure

# How "an effect of delta points" enters the random-effects model.
EFFECT_READINGS: dict[str, str] = {
    "logit-median": "common logit shift raising the median scenario (b = 0) from the baseline by delta",
    "logit-marginal": "common logit shift raising the mean acceptance over scenarios by delta",
    "probability": "each scenario's own acceptance raised by delta points (capped at 1)",
    "logit-median-heterogeneous": "logit-median shift plus a scenario-specific effect, SD equal to the scenario SD",
}
# The paired scenario-level tests tried; "sign-flip" is the preregistered one.
TESTS: dict[str, str] = {
    "paired-t": "paired t-test on the scenario mean differences",
    "wilcoxon": "Wilcoxon signed-rank test, zeros dropped, exact conditional null",
    "sign": "sign test, zeros dropped, exact binomial",
    "sign-flip": "sign-flip permutation test of the mean difference, exact conditional null",
}
PREREGISTERED_TEST = "sign-flip"
# The reading and test that reproduce the design section's three power values
# (protocol/interpretations.md, "Power simulation"); the 03_power stage checks it.
TABLE_READING = "logit-median"
TABLE_TEST = "paired-t"
TEST_LABELS = {
    "paired-t": "paired t",
    "wilcoxon": "Wilcoxon signed-rank",
    "sign": "sign",
    "sign-flip": "sign-flip (preregistered)",
}


class PowerError(ValueError):
    """A power design or a request to the simulation is malformed."""


# --------------------------------------------------------------------------
# Design constants
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportedPower:
    """A power value the design section states for one cell."""

    J: int
    R: int
    delta: float
    power: float


@dataclass(frozen=True)
class PowerDesign:
    """The constants of the power simulation (``protocol/study.yml``, key ``power``)."""

    scenario_sd_logit: float
    baseline: float
    alpha: float
    J: tuple[int, ...]
    R: tuple[int, ...]
    delta: tuple[float, ...]
    simulations: int
    seed: int
    reported: tuple[ReportedPower, ...] = ()

    @classmethod
    def from_mapping(cls, power: Mapping[str, Any]) -> PowerDesign:
        return cls(
            scenario_sd_logit=float(power["scenario_sd_logit"]),
            baseline=float(power["baseline"]),
            alpha=float(power["alpha"]),
            J=tuple(int(j) for j in power["J"]),
            R=tuple(int(r) for r in power["R"]),
            delta=tuple(float(d) for d in power["delta"]),
            simulations=int(power["simulations"]),
            seed=int(power["seed"]),
            reported=tuple(
                ReportedPower(int(r["J"]), int(r["R"]), float(r["delta"]), float(r["power"]))
                for r in power.get("reported", [])
            ),
        )

    @classmethod
    def from_study(cls) -> PowerDesign:
        """The preregistered constants, read (and validated) from ``protocol/study.yml``."""
        from pilot import protocol

        return cls.from_mapping(protocol.study()["power"])

    def grid_cells(self) -> list[tuple[int, int, float]]:
        """Every (J, R, delta) of the preregistered grid."""
        return list(itertools.product(self.J, self.R, self.delta))

    def doubling_cells(self) -> list[tuple[int, int, float]]:
        """Extra cells that double the repeats of the smallest design (J, 2R), for the doubling comparison."""
        j0 = min(self.J)
        return [(j0, 2 * r, d) for r in self.R for d in self.delta if 2 * r not in self.R]


# --------------------------------------------------------------------------
# Effect readings
# --------------------------------------------------------------------------

_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(80)
_GH_WEIGHTS = _GH_WEIGHTS / _GH_WEIGHTS.sum()  # expectations over N(0, 1)


def marginal_acceptance(shift: float, baseline: float, sd: float) -> float:
    """Mean of ``expit(logit(baseline) + shift + b)`` over ``b ~ N(0, sd^2)`` (Gauss-Hermite)."""
    return float(np.sum(_GH_WEIGHTS * special.expit(special.logit(baseline) + shift + sd * _GH_NODES)))


def logit_shift(delta: float, baseline: float, sd: float, reading: str) -> float:
    """The common logit shift that an effect of ``delta`` means under ``reading``."""
    if not 0 <= baseline + delta < 1:
        raise PowerError(f"baseline {baseline} + delta {delta} must lie in [0, 1)")
    if reading in ("logit-median", "logit-median-heterogeneous"):
        return float(special.logit(baseline + delta) - special.logit(baseline))
    if reading == "logit-marginal":
        target = marginal_acceptance(0.0, baseline, sd) + delta
        if target >= 1:
            raise PowerError(f"delta {delta} takes the mean acceptance to {target:.3f} >= 1")
        return float(optimize.brentq(lambda s: marginal_acceptance(s, baseline, sd) - target, -20, 20, xtol=1e-12))
    raise PowerError(f"reading {reading!r} has no logit shift; readings: {', '.join(EFFECT_READINGS)}")


def _check_reading(reading: str) -> None:
    if reading not in EFFECT_READINGS:
        raise PowerError(f"unknown effect reading {reading!r}; readings: {', '.join(EFFECT_READINGS)}")


def treated_probability(
    p0_logit: np.ndarray,
    delta: float,
    *,
    baseline: float,
    sd: float,
    reading: str,
    effect_noise: np.ndarray | None = None,
) -> np.ndarray:
    """The treated arm's acceptance probability per scenario, given the control arm's logit."""
    _check_reading(reading)
    p: np.ndarray
    if reading == "probability":
        p = np.minimum(special.expit(p0_logit) + delta, 1.0)
        return p
    shift = logit_shift(delta, baseline, sd, reading)
    if reading == "logit-median-heterogeneous":
        if effect_noise is None:
            raise PowerError("the heterogeneous reading needs the scenario-specific effect draws")
        # The extra effect is zero when delta is zero, so the null stays the null.
        p = special.expit(p0_logit + (shift + effect_noise if delta != 0 else 0.0))
        return p
    p = special.expit(p0_logit + shift)
    return p


# --------------------------------------------------------------------------
# Simulated studies
# --------------------------------------------------------------------------


@dataclass
class _DesignDraws:
    """The random numbers of one (J, R) design, shared by all its deltas and readings."""

    b: np.ndarray  # (n, J) scenario intercepts on the logit scale
    u0: np.ndarray  # (n, J, R) uniforms of the control arm's repeats
    u1: np.ndarray  # (n, J, R) uniforms of the treated arm's repeats
    effect_noise: np.ndarray  # (n, J) scenario-specific effects, standard normal


def design_draws(J: int, R: int, simulations: int, *, seed: int, sd: float) -> _DesignDraws:
    if J < 2 or R < 1 or simulations < 1:
        raise PowerError(f"need J >= 2, R >= 1 and simulations >= 1; got J={J}, R={R}, simulations={simulations}")
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence([int(seed), int(J), int(R)]).spawn(4)]
    return _DesignDraws(
        b=streams[0].normal(0.0, sd, (simulations, J)),
        u0=streams[1].random((simulations, J, R)),
        u1=streams[2].random((simulations, J, R)),
        effect_noise=streams[3].standard_normal((simulations, J)),
    )


def simulate_differences(draws: _DesignDraws, delta: float, *, baseline: float, sd: float, reading: str) -> np.ndarray:
    """Integer paired differences ``k1 - k0`` (treated minus control acceptances), shape (n, J)."""
    logit0 = special.logit(baseline) + draws.b
    p1 = treated_probability(
        logit0, delta, baseline=baseline, sd=sd, reading=reading, effect_noise=sd * draws.effect_noise
    )
    k0 = (draws.u0 < special.expit(logit0)[..., None]).sum(axis=-1)
    k1 = (draws.u1 < p1[..., None]).sum(axis=-1)
    diff: np.ndarray = (k1 - k0).astype(np.int64)
    return diff


# --------------------------------------------------------------------------
# Vectorised p-values (rows are simulated studies, columns scenarios)
# --------------------------------------------------------------------------


def paired_t_pvalues(x: np.ndarray) -> np.ndarray:
    """Two-sided one-sample t-test of each row's mean against zero (as ``scipy.stats.ttest_1samp``).

    Integer input keeps zero variance exact: a constant non-zero row gives
    p = 0 (scipy: t = inf), an all-zero row p = 1 (scipy: nan, never a rejection).
    """
    x = np.asarray(x)
    J = x.shape[1]
    s = x.sum(axis=1, dtype=np.float64)
    q = (x.astype(np.float64) ** 2).sum(axis=1)
    var = (q - s * s / J) / (J - 1)
    constant = np.isclose(q * J, s * s, rtol=0, atol=1e-9)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (s / J) / np.sqrt(var / J)
        p = 2.0 * stats.t.sf(np.abs(t), J - 1)
    return np.where(constant, np.where(s != 0, 0.0, 1.0), p)


def _magnitude_counts(x: np.ndarray, max_abs: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: how many entries have |x| = m, and how many have x = +m, for m = 1..max_abs."""
    a = np.abs(x)
    mags = np.arange(1, max_abs + 1)
    counts = (a[..., None] == mags).sum(axis=1)
    positive = (x[..., None] == mags).sum(axis=1)
    return counts, positive


def _lattice_weights(kind: str, counts: Sequence[int]) -> list[int]:
    """Integer weight of a scenario with |difference| = m (m = 1..), for each test's statistic."""
    if kind == "sign-flip":  # the sum of differences
        return [m for m in range(1, len(counts) + 1)]
    if kind == "sign":  # the count of positive signs
        return [1] * len(counts)
    if kind == "wilcoxon":  # twice the average rank of |d| among non-zero differences
        below = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return [int(2 * lo + c + 1) for lo, c in zip(below, counts, strict=True)]
    raise PowerError(f"no lattice statistic for test {kind!r}")


@lru_cache(maxsize=200_000)
def _lattice_tail(kind: str, counts: tuple[int, ...]) -> np.ndarray:
    """``tail[t] = P(|T| >= t)`` under random signs, where ``T = sum_m w_m (2 B_m - c_m)``, ``B_m ~ Bin(c_m, 1/2)``."""
    weights = _lattice_weights(kind, counts)
    pmf = np.ones(1)
    for w, c in zip(weights, counts, strict=True):
        if c == 0:
            continue
        part = np.zeros(2 * w * c + 1)
        part[:: 2 * w] = [math.comb(c, k) / 2.0**c for k in range(c + 1)]
        pmf = np.convolve(pmf, part)
    half = (len(pmf) - 1) // 2  # pmf is symmetric about its centre, the value 0
    absolute = pmf[half:].copy()
    absolute[1:] += pmf[:half][::-1]
    tail = np.cumsum(absolute[::-1])[::-1]
    return np.minimum(tail, 1.0)


def lattice_pvalues(x: np.ndarray, kind: str) -> np.ndarray:
    """Exact two-sided sign-flip p-values of integer paired differences, one per row.

    ``kind`` picks the statistic: ``"sign-flip"`` (sum of differences),
    ``"wilcoxon"`` (signed ranks of |d|, zeros dropped, average ranks for ties)
    or ``"sign"`` (number of positive differences, zeros dropped). The null
    distribution conditions on the observed |d| and is exact.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise PowerError("lattice p-values need integer differences (k1 - k0)")
    max_abs = max(int(np.abs(x).max(initial=0)), 1)
    counts, positive = _magnitude_counts(x, max_abs)
    keys, inverse = np.unique(counts, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    tails, offsets, weights = [], [0], []
    for key in keys:
        key_t = tuple(int(v) for v in key)
        tails.append(_lattice_tail(kind, key_t))
        offsets.append(offsets[-1] + len(tails[-1]))
        weights.append(_lattice_weights(kind, key_t))
    flat = np.concatenate(tails)
    w = np.asarray(weights, dtype=np.int64)[inverse]  # (n, max_abs)
    observed = np.abs((w * (2 * positive - counts)).sum(axis=1))
    tail: np.ndarray = flat[np.asarray(offsets[:-1])[inverse] + observed]
    return tail


def pvalues(x: np.ndarray, test: str) -> np.ndarray:
    """Two-sided p-values of ``test`` for each row of integer paired differences."""
    if test == "paired-t":
        return paired_t_pvalues(x)
    if test in ("wilcoxon", "sign", "sign-flip"):
        return lattice_pvalues(x, test)
    raise PowerError(f"unknown test {test!r}; tests: {', '.join(TESTS)}")


# --------------------------------------------------------------------------
# Variance of the paired premium under the cluster structure
# --------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def premium_variance_components(
    delta: float, *, baseline: float, sd: float, reading: str = "logit-median"
) -> tuple[float, float]:
    """``(sigma_b^2, sigma_w^2)`` of the scenario premium ``p1_j - p0_j``.

    ``sigma_b^2`` is the between-scenario variance of the true premium and
    ``sigma_w^2 = E[p1(1-p1) + p0(1-p0)]`` the variance of one run's paired
    difference within a scenario, so that
    ``Var(mean d) = (sigma_b^2 + sigma_w^2 / R) / J``.
    """
    _check_reading(reading)
    b = sd * _GH_NODES[:, None]
    u = sd * _GH_NODES[None, :] if reading == "logit-median-heterogeneous" else np.zeros((1, 1))
    w = _GH_WEIGHTS[:, None] * (_GH_WEIGHTS[None, :] if u.shape[1] > 1 else np.ones((1, 1)))
    logit0 = special.logit(baseline) + b + 0 * u
    p0 = special.expit(logit0)
    p1 = treated_probability(logit0, delta, baseline=baseline, sd=sd, reading=reading, effect_noise=u + 0 * b)
    premium = p1 - p0
    mean = np.sum(w * premium)
    between = float(np.sum(w * (premium - mean) ** 2))
    within = float(np.sum(w * (p1 * (1 - p1) + p0 * (1 - p0))))
    return between, within


def premium_variance(J: int, R: int, between: float, within: float) -> float:
    """Equation ``eq:premium-var-cluster``: ``(sigma_b^2 + sigma_w^2 / R) / J``."""
    return (between + within / R) / J


# --------------------------------------------------------------------------
# The simulation and its result
# --------------------------------------------------------------------------


def monte_carlo_se(power: np.ndarray | float, n: int) -> np.ndarray | float:
    """Binomial Monte Carlo standard error ``sqrt(p (1 - p) / n)``."""
    se: np.ndarray | float = np.sqrt(np.asarray(power) * (1 - np.asarray(power)) / n)
    return se


@dataclass
class PowerResult:
    """Power per (J, R, delta, reading, test); ``summary`` holds one row each."""

    summary: pd.DataFrame
    design: PowerDesign
    simulations: int
    seed: int
    readings: tuple[str, ...]
    tests: tuple[str, ...]
    _index: dict[tuple[int, int, float, str, str], float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._index = {
            (int(r.J), int(r.R), round(float(r.delta), 6), r.reading, r.test): float(r.power)
            for r in self.summary.itertuples(index=False)
        }

    def power(self, J: int, R: int, delta: float, test: str, reading: str | None = None) -> float:
        key = (int(J), int(R), round(float(delta), 6), reading or self.readings[0], test)
        if key not in self._index:
            raise KeyError(f"no simulated cell J={J}, R={R}, delta={delta}, reading={key[3]}, test={test}")
        return self._index[key]

    def mc_se(self, J: int, R: int, delta: float, test: str, reading: str | None = None) -> float:
        return float(monte_carlo_se(self.power(J, R, delta, test, reading), self.simulations))

    def reproduction(self, test: str = "paired-t", reading: str | None = None) -> pd.DataFrame:
        """The design's reported cells beside this simulation's values.

        ``z`` divides the difference by the standard error of a difference of
        two independent estimates (the reported value is itself a Monte Carlo
        estimate from ``design.simulations`` studies).
        """
        rows = []
        for rep in self.design.reported:
            p = self.power(rep.J, rep.R, rep.delta, test, reading)
            se = float(monte_carlo_se(p, self.simulations))
            se_rep = float(monte_carlo_se(rep.power, self.design.simulations))
            rows.append(
                {
                    "J": rep.J,
                    "R": rep.R,
                    "delta": rep.delta,
                    "reading": reading or self.readings[0],
                    "test": test,
                    "reported": rep.power,
                    "power": p,
                    "mc_se": se,
                    "z": (p - rep.power) / math.hypot(se, se_rep),
                }
            )
        return pd.DataFrame(rows)

    def reproducing(self, max_z: float = 3.0) -> pd.DataFrame:
        """Every (reading, test) with the largest |z| over the reported cells, and whether it is within ``max_z``."""
        rows = []
        for reading, test in itertools.product(self.readings, self.tests):
            try:
                rep = self.reproduction(test, reading)
            except KeyError:
                continue
            worst = float(rep["z"].abs().max())
            rows.append({"reading": reading, "test": test, "max_abs_z": worst, "reproduces": worst <= max_z})
        return pd.DataFrame(rows).sort_values("max_abs_z", ignore_index=True)

    def doubling(self, delta: float, test: str, reading: str | None = None) -> pd.DataFrame:
        """From each smallest-J design (J, R): power after doubling the scenarios vs doubling the repeats."""
        j0 = min(self.design.J)
        rows = []
        for R in self.design.R:
            try:
                base = self.power(j0, R, delta, test, reading)
                more_j = self.power(2 * j0, R, delta, test, reading)
                more_r = self.power(j0, 2 * R, delta, test, reading)
            except KeyError:
                continue
            rows.append(
                {"J": j0, "R": R, "delta": delta, "test": test, "power": base, "power_2J": more_j, "power_2R": more_r}
            )
        return pd.DataFrame(rows)

    def table_frame(self, reading: str | None = None) -> pd.DataFrame:
        """One row per (J, R, delta) of the grid, one column of power per test (for the manuscript)."""
        reading = reading or self.readings[0]
        df = self.summary[(self.summary.reading == reading) & self.summary.in_design_grid]
        wide = df.pivot_table(index=["J", "R", "delta"], columns="test", values="power").reset_index()
        wide = wide[["J", "R", "delta", *[t for t in self.tests if t in wide.columns]]]
        wide.columns.name = None
        wide["delta"] = (wide["delta"] * 100).round().astype(int)
        return wide.rename(columns={"delta": "effect (points)"})

    def plot(self, reading: str | None = None, *, reported: bool = True) -> Figure:
        """Power curves over delta, one panel per test, a line per (J, R) of the grid; returns the figure."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        reading = reading or self.readings[0]
        df = self.summary[(self.summary.reading == reading) & self.summary.in_design_grid]
        ncol = 2 if len(self.tests) > 1 else 1
        nrow = math.ceil(len(self.tests) / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(3.4 * ncol, 2.8 * nrow), sharex=True, sharey=True, squeeze=False)
        colours = dict(zip(sorted(self.design.J), ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"], strict=False))
        styles = dict(zip(sorted(self.design.R), ["--", "-", ":", "-."], strict=False))
        # The repeats differ in marker as well as in line, so the legend's short samples tell them apart.
        markers = dict(zip(sorted(self.design.R), ["o", "s", "^", "D"], strict=False))
        hollow = dict(zip(sorted(self.design.R), [True, False, True, False], strict=False))
        for ax, test in zip(axes.flat, self.tests, strict=False):
            part = df[df.test == test]
            for (J, R), cell in part.groupby(["J", "R"]):
                cell = cell.sort_values("delta")
                ax.errorbar(
                    cell.delta * 100,
                    cell.power,
                    yerr=1.96 * cell.mc_se,
                    color=colours.get(J, "k"),
                    linestyle=styles.get(R, "-"),
                    marker=markers.get(R, "o"),
                    markersize=3.5,
                    markerfacecolor="white" if hollow.get(R, False) else colours.get(J, "k"),
                    capsize=2,
                    label=f"J={J}, R={R}",
                )
            if reported and test == TABLE_TEST and reading == TABLE_READING:
                for rep in self.design.reported:
                    ax.plot(rep.delta * 100, rep.power, marker="x", color="black", markersize=7, linestyle="none")
            ax.axhline(self.design.alpha, color="grey", linewidth=0.8)
            ax.set_title(TEST_LABELS.get(test, test), fontsize=9)
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
        for ax in axes[-1]:
            ax.set_xlabel("effect (percentage points)")
        for ax in axes[:, 0]:
            ax.set_ylabel("power")
        for ax in list(axes.flat)[len(self.tests) :]:
            ax.set_visible(False)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(
            handles,
            labels,
            loc="lower center",
            ncol=min(len(labels), 3),
            fontsize=7.5,
            frameon=False,
            handlelength=3.2,
        )  # 7.5 pt prints at 7 pt at 0.95 of the text width; long samples show dashed against solid
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        return fig

    def to_latex(self, reading: str | None = None, **kwargs: Any) -> str:
        """The grid as a LaTeX tabular (booktabs), power per test."""
        kwargs.setdefault("float_format", "%.3f")
        return str(self.table_frame(reading).to_latex(index=False, **kwargs))


def simulate_power(
    design: PowerDesign | None = None,
    *,
    cells: Iterable[tuple[int, int, float]] | None = None,
    readings: Sequence[str] = ("logit-median",),
    tests: Sequence[str] = tuple(TESTS),
    simulations: int | None = None,
    seed: int | None = None,
) -> PowerResult:
    """Simulate ``simulations`` studies per (J, R, delta) cell and each reading; reject at ``design.alpha``.

    ``cells`` defaults to the design grid. Cells of the same (J, R) share their
    random numbers (see the module docstring).
    """
    design = design or PowerDesign.from_study()
    n = int(simulations if simulations is not None else design.simulations)
    seed = int(seed if seed is not None else design.seed)
    for r in readings:
        _check_reading(r)
    for t in tests:
        if t not in TESTS:
            raise PowerError(f"unknown test {t!r}; tests: {', '.join(TESTS)}")
    cells = list(cells) if cells is not None else design.grid_cells()
    grid = set((j, r, round(d, 6)) for j, r, d in design.grid_cells())
    by_design: dict[tuple[int, int], list[float]] = {}
    for J, R, delta in cells:
        by_design.setdefault((int(J), int(R)), []).append(float(delta))
    rows = []
    for (J, R), deltas in by_design.items():
        draws = design_draws(J, R, n, seed=seed, sd=design.scenario_sd_logit)
        for delta, reading in itertools.product(deltas, readings):
            x = simulate_differences(
                draws, delta, baseline=design.baseline, sd=design.scenario_sd_logit, reading=reading
            )
            between, within = premium_variance_components(
                delta, baseline=design.baseline, sd=design.scenario_sd_logit, reading=reading
            )
            variances = {
                # the simulated studies' spread of the mean premium beside eq:premium-var-cluster
                "premium_var_simulated": float(np.var(x.mean(axis=1) / R, ddof=1)),
                "premium_var_equation": premium_variance(J, R, between, within),
            }
            for test in tests:
                rejections = int(np.sum(pvalues(x, test) <= design.alpha))
                power = rejections / n
                rows.append(
                    {
                        "J": J,
                        "R": R,
                        "delta": delta,
                        "reading": reading,
                        "test": test,
                        "power": power,
                        "mc_se": float(monte_carlo_se(power, n)),
                        "rejections": rejections,
                        "simulations": n,
                        "seed": seed,
                        "in_design_grid": (J, R, round(delta, 6)) in grid,
                        **variances,
                    }
                )
    summary = pd.DataFrame(rows).sort_values(["reading", "test", "J", "R", "delta"], ignore_index=True)
    return PowerResult(
        summary=summary, design=design, simulations=n, seed=seed, readings=tuple(readings), tests=tuple(tests)
    )


# --------------------------------------------------------------------------
# Numbers the manuscript cites
# --------------------------------------------------------------------------


def _words(values: Sequence[object]) -> str:
    items = [str(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def power_macros(
    grid: PowerResult,
    readings: PowerResult,
    heterogeneous: PowerResult | None = None,
    scenario_sets: Mapping[str, int] | None = None,
) -> dict[str, object]:
    """One LaTeX macro per number the power section states.

    ``grid`` is the table reading over the grid and the doubling cells,
    ``readings`` every reading on the reported cells (and the null cell used
    for the size), ``heterogeneous`` the doubling cells under the
    heterogeneous reading.
    """
    from pilot.latex import macro_name

    design = grid.design

    def cell(prefix: str, J: int, R: int, delta: float) -> str:
        return macro_name(prefix, "J", J, "R", R, "D", round(delta * 100))

    def p3(v: float) -> str:
        return f"{v:.3f}"

    out: dict[str, object] = {
        "PowerSimulationsRun": grid.simulations,
        "PowerSeedRun": str(grid.seed),
        "PowerGridJ": ", ".join(str(j) for j in design.J),  # set notation: {10, 20, 40}
        "PowerGridR": ", ".join(str(r) for r in design.R),
        "PowerGridDelta": _words([round(d * 100) for d in design.delta]),
        "PowerAlphaPct": f"{design.alpha * 100:g}",
        "PowerHeteroSd": f"{design.scenario_sd_logit:g}",
    }
    for k, rep in enumerate(design.reported, start=1):
        out[macro_name("PowerCell", k, "J")] = rep.J
        out[macro_name("PowerCell", k, "R")] = rep.R
        out[macro_name("PowerCell", k, "Delta")] = round(rep.delta * 100)
        t = grid.power(rep.J, rep.R, rep.delta, TABLE_TEST, TABLE_READING)
        f = grid.power(rep.J, rep.R, rep.delta, PREREGISTERED_TEST, TABLE_READING)
        out[cell("PowerReported", rep.J, rep.R, rep.delta)] = p3(rep.power)
        out[cell("PowerRepro", rep.J, rep.R, rep.delta)] = p3(t)
        out[cell("PowerReproSe", rep.J, rep.R, rep.delta)] = p3(float(monte_carlo_se(t, grid.simulations)))
        out[cell("PowerSignFlip", rep.J, rep.R, rep.delta)] = p3(f)
        out[cell("PowerSignFlipSe", rep.J, rep.R, rep.delta)] = p3(float(monte_carlo_se(f, grid.simulations)))
    repro = grid.reproduction(TABLE_TEST, TABLE_READING)
    out["PowerReproMaxAbsZ"] = f"{repro.z.abs().max():.1f}"
    ranking = readings.reproducing()
    others = ranking[~((ranking.reading == TABLE_READING) & (ranking.test == TABLE_TEST))]
    out["PowerOtherReadingsMinZ"] = f"{others.max_abs_z.min():.1f}"
    out["PowerReadingsTried"] = len(readings.readings)
    out["PowerTestsTried"] = len(readings.tests)

    base = design.reported[0]
    null = readings.summary[(readings.summary.delta == 0) & (readings.summary.reading == TABLE_READING)]
    if not null.empty:
        J0, R0 = int(null.J.iloc[0]), int(null.R.iloc[0])
        out["PowerSizeJ"], out["PowerSizeR"] = J0, R0
        out["PowerSizeT"] = p3(readings.power(J0, R0, 0.0, TABLE_TEST, TABLE_READING))
        out["PowerSizeSignFlip"] = p3(readings.power(J0, R0, 0.0, PREREGISTERED_TEST, TABLE_READING))
    frames = [grid.summary] + ([heterogeneous.summary] if heterogeneous is not None else [])
    cells = pd.concat(frames).drop_duplicates(["J", "R", "delta", "reading"])
    gap = (cells.premium_var_simulated / cells.premium_var_equation - 1).abs().max()
    out["PowerVarMaxRelDiffPct"] = f"{100 * gap:.1f}"
    out["PowerDoubleJ"], out["PowerDoubleR"] = base.J, base.R
    out["PowerDoubleJTwice"], out["PowerDoubleRTwice"] = 2 * base.J, 2 * base.R
    out["PowerDoubleDelta"] = round(base.delta * 100)
    sources = [("", grid, TABLE_READING)]
    if heterogeneous is not None:
        sources.append(("Hetero", heterogeneous, "logit-median-heterogeneous"))
    for tag, res, reading in sources:
        for test, name in ((TABLE_TEST, "T"), (PREREGISTERED_TEST, "SignFlip")):
            out[f"Power{tag}DoubleBase{name}"] = p3(res.power(base.J, base.R, base.delta, test, reading))
            out[f"Power{tag}DoubleScenarios{name}"] = p3(res.power(2 * base.J, base.R, base.delta, test, reading))
            out[f"Power{tag}DoubleRepeats{name}"] = p3(res.power(base.J, 2 * base.R, base.delta, test, reading))
        between, within = premium_variance_components(
            base.delta, baseline=design.baseline, sd=design.scenario_sd_logit, reading=reading
        )
        out[f"Power{tag}VarBetween"] = f"{between:.4f}"
        out[f"Power{tag}VarWithin"] = f"{within:.3f}"
        out[f"Power{tag}VarBase"] = f"{premium_variance(base.J, base.R, between, within):.4f}"
        out[f"Power{tag}VarDoubleScenarios"] = f"{premium_variance(2 * base.J, base.R, between, within):.4f}"
        out[f"Power{tag}VarDoubleRepeats"] = f"{premium_variance(base.J, 2 * base.R, between, within):.4f}"
    out["PowerScenarioSetsSentence"] = scenario_sets_sentence(grid, scenario_sets or {})
    return out


def scenario_sets_sentence(grid: PowerResult, scenario_sets: Mapping[str, int]) -> str:
    """What the grid says of each named scenario set's size, at the stated cells' repeats and effect, as LaTeX.

    ``scenario_sets`` maps a set's name to its number of scenarios; a size outside the grid is said to be so.
    """
    from pilot.latex import LatexText

    base = grid.design.reported[0]
    parts = []
    for name, J in scenario_sets.items():
        if J not in grid.design.J:
            parts.append(f"the scenario set \\texttt{{{name}}} has \\(J={J}\\) scenarios, outside the simulated grid")
            continue
        cells = []
        for R in grid.design.R:
            t = grid.power(J, R, base.delta, TABLE_TEST, TABLE_READING)
            f = grid.power(J, R, base.delta, PREREGISTERED_TEST, TABLE_READING)
            cells.append(f"\\(R={R}\\): {t:.3f} with the \\(t\\)-test and {f:.3f} with the sign-flip test")
        parts.append(
            f"for the scenario set \\texttt{{{name}}} of \\(J={J}\\) scenarios, power at "
            f"{round(base.delta * 100)} points is " + "; at ".join(["at " + cells[0]] + cells[1:])
        )
    if not parts:
        return LatexText("")
    text = "; ".join(parts)
    return LatexText(text[0].upper() + text[1:] + ".")
