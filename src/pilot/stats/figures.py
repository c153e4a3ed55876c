"""Figures of the primary and sensitivity stages (matplotlib, written as PDF).

A figure drawn from a run table that is not a finding carries its label
(SIMULATED, REHEARSAL) in its title.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from pilot.latex import data_label


def _title(text: str, simulated: bool | str) -> str:
    tag = data_label(simulated)
    return f"{tag}: {text}" if tag else text


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Write the figure as PDF (for the manuscript) and as a PNG beside it (shown inline by the stage notebooks)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    # A fixed creation date keeps the PDF byte-reproducible.
    fig.savefig(path, metadata={"CreationDate": None})
    fig.savefig(path.with_suffix(".png"), dpi=110)
    plt.close(fig)
    return path


def forest_plot(contrasts: pd.DataFrame, path: Path, *, simulated: bool | str) -> Path:
    """Contrasts with their 95% bootstrap intervals; the primary contrast on top."""
    fig, ax = plt.subplots(figsize=(5.5, 0.55 * len(contrasts) + 1.2))
    y = np.arange(len(contrasts))[::-1]
    for yi, (_, r) in zip(y, contrasts.iterrows(), strict=True):
        primary = r["role"] == "primary"
        p = r["p_value"] if primary else r["p_holm"]
        if not np.isfinite(r["estimate"]):  # nothing to draw: say so where the point would be
            ax.annotate(
                "not estimable",
                (0.5, yi),
                xycoords=("axes fraction", "data"),
                va="center",
                ha="center",
                fontsize=8,
                color="0.35",
            )
            continue
        ax.errorbar(
            r["estimate"],
            yi,
            xerr=[[r["estimate"] - r["ci_low"]], [r["ci_high"] - r["estimate"]]],
            fmt="s" if primary else "o",
            color="black" if primary else "0.35",
            capsize=3,
            markersize=6 if primary else 5,
        )
        # A p-value below 0.001 reads "< 0.001", as in the tables, never "= 0.000".
        text = ("< 0.001" if p < 0.001 else f"= {p:.3f}") if np.isfinite(p) else "not estimable"
        ax.annotate(
            f"p{'' if primary else ' (Holm)'} {text}",
            (1.02, yi),
            xycoords=("axes fraction", "data"),
            va="center",
            fontsize=8,
        )
    ax.axvline(0, color="0.6", lw=0.8, ls="--")
    ax.set_yticks(
        y,
        [
            f"{c.replace('-', chr(0x2212))} ({'primary' if r == 'primary' else 'secondary'})"
            for c, r in zip(contrasts["contrast"], contrasts["role"], strict=True)
        ],
    )
    ax.set_xlabel("difference in scenario-weighted acceptance")
    ax.set_title(_title("contrasts with nominal 95% cluster-bootstrap intervals", simulated), fontsize=9)
    return save_figure(fig, path)


def km_plot(fitters: dict[str, Any], path: Path, *, simulated: bool | str) -> Path:
    """Kaplan-Meier curves of the share of runs not yet completed, per arm (cap-censored runs marked)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for kmf in fitters.values():
        kmf.plot_survival_function(ax=ax, ci_show=False, show_censors=True, censor_styles={"marker": "|", "ms": 6})
    # The legend sits beside the axes, never over the curves.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_xlabel("wall time (minutes)")
    ax.set_ylabel("share not yet completed")
    ax.set_title(_title("time to completion (Kaplan-Meier)", simulated), fontsize=9)
    return save_figure(fig, path)


def frontier_plot(
    table: pd.DataFrame, x: str, xlabel: str, path: Path, *, simulated: bool | str, p_hat: dict[str, Any] | None = None
) -> Path:
    """Acceptance within an allowance, one small panel per arm on shared axes, each with its 95% bootstrap band;
    ``p_hat``: each arm's acceptance at any allowance, drawn dashed."""
    arms = list(dict.fromkeys(table["arm"]))
    # Drawn at the text width it is printed at, so its 7.5-pt ticks print at 7.5 pt.
    fig, axes = plt.subplots(1, len(arms), figsize=(6.5, 2.6), sharex=True, sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms, strict=True):
        part = table[table["arm"] == arm]
        ax.fill_between(part[x], part["ci_low"], part["ci_high"], color="0.82", lw=0)
        ax.plot(part[x], part["p_hat"], color="black", lw=1.2, marker="o", ms=2)
        if p_hat is not None and arm in p_hat and np.isfinite(p_hat[arm]):
            ax.axhline(p_hat[arm], color="0.35", lw=0.8, ls="--")
        ax.set_title(arm, fontsize=9)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7.5)
        ax.grid(alpha=0.25, lw=0.5)
    axes[0][0].set_ylabel("accepted within allowance", fontsize=8)
    fig.supxlabel(xlabel, fontsize=8)
    fig.suptitle(_title(f"acceptance frontier over {xlabel}", simulated), fontsize=9)
    return save_figure(fig, path)


def q_grid_plot(
    table: pd.DataFrame, path: Path, *, simulated: bool | str, contrasts: Sequence[str] | None = None
) -> Path:
    """Each contrast's estimate and interval across the threshold q."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    names = list(contrasts or table["contrast"].unique())
    for k, name in enumerate(names):
        part = table[table["contrast"] == name]
        off = (k - (len(names) - 1) / 2) * 0.6
        ax.errorbar(
            part["q"] + off,
            part["estimate"],
            yerr=[part["estimate"] - part["ci_low"], part["ci_high"] - part["estimate"]],
            fmt="o-",
            ms=3,
            capsize=2,
            label=name.replace("-", "\u2212"),  # a difference of arms, with the text's minus sign
        )
    ax.axhline(0, color="0.6", lw=0.8, ls="--")
    ax.set_xlabel("quality threshold q")
    ax.set_ylabel("contrast")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(_title("contrasts across the quality threshold", simulated), fontsize=9)
    return save_figure(fig, path)
