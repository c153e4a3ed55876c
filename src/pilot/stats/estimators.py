"""Scenario-level estimators: repeat means, scenario-weighted arm means, paired contrasts.

The estimand of the design: ``p_a = sum_j w_j R_j^-1 sum_r S_jra / sum_j w_j``,
with equal weights (primary) or professional-minutes weights (sensitivity).
A run whose outcome is missing drops out of its scenario's repeat mean; a
scenario with no observed run in an arm drops out of that arm's mean and of
every contrast involving the arm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pilot import protocol, runtable
from pilot.stats import resampling

WEIGHTS = ("equal", "minutes")


@dataclass(frozen=True)
class Layout:
    """Where each run sits: its scenario and arm index, plus the scenarios' properties."""

    scenarios: list[str]
    arms: list[str]
    occupation: list[str]
    minutes: np.ndarray
    depth: np.ndarray
    j: np.ndarray  # scenario index per run
    a: np.ndarray  # arm index per run (-1: an arm outside ``arms``)

    @classmethod
    def of(cls, df: pd.DataFrame, arms: Sequence[str] | None = None) -> Layout:
        arms = list(arms) if arms is not None else protocol.study().arms
        scen = sorted(df["scenario"].unique())
        first = df.drop_duplicates("scenario").set_index("scenario").loc[scen]
        j = pd.Index(scen).get_indexer(df["scenario"])
        a = pd.Index(arms).get_indexer(df["arm"])
        return cls(
            scen,
            arms,
            first["occupation"].astype(str).tolist(),
            first["professional_minutes"].to_numpy(dtype=float),
            first["designed_depth"].to_numpy(dtype=float),
            j,
            a,
        )

    @property
    def J(self) -> int:
        return len(self.scenarios)

    @property
    def A(self) -> int:
        return len(self.arms)

    def weights(self, kind: str = "equal") -> np.ndarray:
        if kind == "equal":
            return np.ones(self.J)
        if kind == "minutes":
            return self.minutes.copy()
        raise ValueError(f"weights must be one of {WEIGHTS}, got {kind!r}")

    def sums(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (scenario, arm): sum of the observed values and their count, each ``(J, A)``."""
        v = np.asarray(values, dtype=float)
        keep = (self.a >= 0) & ~np.isnan(v)
        cell = self.j[keep] * self.A + self.a[keep]
        s = np.bincount(cell, weights=v[keep], minlength=self.J * self.A).reshape(self.J, self.A)
        n = np.bincount(cell, minlength=self.J * self.A).reshape(self.J, self.A).astype(float)
        return s, n

    def means(self, values: np.ndarray) -> np.ndarray:
        """Repeat means per (scenario, arm), ``(J, A)``; NaN where no run has a value."""
        s, n = self.sums(values)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, s / np.where(n > 0, n, 1), np.nan)

    def runs_per_arm(self) -> np.ndarray:
        return np.bincount(self.a[self.a >= 0], minlength=self.A)

    def arm_index(self, arm: str) -> int:
        return self.arms.index(arm)


def contrast_name(pair: Sequence[str]) -> str:
    return f"{pair[0]}-{pair[1]}"


def contrast_differences(means: np.ndarray, layout: Layout, contrasts: Sequence[Sequence[str]]) -> np.ndarray:
    """Within-scenario paired differences of repeat means, ``(J, K)`` for K contrasts (treated minus control)."""
    cols = [means[:, layout.arm_index(t)] - means[:, layout.arm_index(c)] for t, c in contrasts]
    return np.column_stack(cols) if cols else np.empty((layout.J, 0))


def arm_means(means: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Scenario-weighted mean of each arm, ``(A,)``."""
    return resampling.weighted_mean(means, weights)


def scenario_weighted(
    df: pd.DataFrame, column: str | np.ndarray, *, weights: str = "equal", layout: Layout | None = None
) -> pd.Series:
    """The design's estimator applied to any per-run quantity: one value per arm."""
    layout = layout or Layout.of(df)
    values = (
        df[column].to_numpy(dtype=float, na_value=np.nan)
        if isinstance(column, str)
        else np.asarray(column, dtype=float)
    )
    return pd.Series(arm_means(layout.means(values), layout.weights(weights)), index=layout.arms)


def acceptance_values(df: pd.DataFrame, q: float | None = None) -> np.ndarray:
    """S per run at threshold q (the protocol's q by default); NaN where Q is missing."""
    q = protocol.study().q if q is None else q
    return runtable.acceptance(
        df["D"].to_numpy(dtype=float, na_value=np.nan),
        df["E"].to_numpy(dtype=float, na_value=np.nan),
        df["Q"].to_numpy(dtype=float, na_value=np.nan),
        q,
    )
