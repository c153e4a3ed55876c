"""Stage 07's computations: H0 and H1 beside each agent arm, with the primary analysis's estimator and bootstrap.

The agent runs are those of the study's worker model (:func:`pilot.runtable.primary_rows`);
the human runs come from the human wave's run table (:mod:`pilot.human.export`).
Both are restricted to the scenarios the human wave covers, so every group
is estimated over the same scenarios. Then, exactly as stage 04
(:func:`pilot.stats.primary.primary_analysis`):

- each group's acceptance is the scenario-weighted mean of its scenarios'
  repeat means of S (equal weights), with a percentile interval from the
  scenario-cluster bootstrap (scenarios resampled with replacement, the
  study's B); a run without S drops out of its scenario's repeat mean;
- each contrast (H1 - H0, and each condition minus each agent arm) is the
  within-scenario paired difference over the scenarios both groups have,
  with the same bootstrap's interval and a sign-flip p-value. No contrast of
  the human wave is confirmatory: the p-values are Holm-adjusted over the
  whole family and the table says "descriptive".

Beside them: time on task (a person's start to completion record; an agent
run's wall time) per group with the same estimator and bootstrap, and the H1
assistant's use (requests, tokens, metered cost per session). Every output
carries the data's label; a wave of SIMULATED participants says so and that
no person took part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pilot import backends, protocol, runtable
from pilot.stats import estimability, estimators, resampling
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings, acceptance_table, contrast_table, holm

#: What a wave of SIMULATED participants' outputs say beside their label.
NO_PERSON = "no person took part"


@dataclass
class HumanComparison:
    """The stage's results; ``summary`` is the contrast table as reported."""

    acceptance: pd.DataFrame
    contrasts: pd.DataFrame
    time: pd.DataFrame
    assistant: pd.DataFrame
    settings: InferenceSettings
    scenarios: list[str]
    label: str
    people: bool
    q: float

    @property
    def tag(self) -> str:
        """What every caption and sentence starts with (for SIMULATED participants: and "no person took part")."""
        if not self.people:
            return f"SIMULATED ({NO_PERSON})"
        return self.label

    @property
    def summary(self) -> pd.DataFrame:
        return estimability.honest_frame(self.contrasts, ["estimate", "ci_low", "ci_high", "p_value", "p_holm"])

    @property
    def acceptance_summary(self) -> pd.DataFrame:
        return estimability.honest_frame(self.acceptance, ["p_hat", "ci_low", "ci_high"])


def human_contrasts(conditions: Sequence[str], arms: Sequence[str]) -> list[tuple[str, str]]:
    """H1 - H0 first, then each condition minus each agent arm."""
    c = list(conditions)
    return [(c[1], c[0])] + [(h, a) for h in c for a in arms]


def _group_means(
    layout: Layout, values: np.ndarray, weights: np.ndarray, counts: np.ndarray, level: float
) -> pd.DataFrame:
    means = layout.means(values)
    est = estimators.arm_means(means, weights)
    reps = resampling.bootstrap_means(means, counts, weights)
    lo, hi = resampling.percentile_interval(reps, level)
    n = (~np.isnan(means)).sum(axis=0)
    runs = np.bincount(layout.a[(layout.a >= 0) & ~np.isnan(values)], minlength=layout.A)
    notes = [
        estimability.join_notes("no run" if k == 0 else "", flag)
        for k, flag in zip(runs, estimability.interval_flags(lo, hi, n), strict=True)
    ]
    return pd.DataFrame(
        {
            "group": layout.arms,
            "estimate": est,
            "ci_low": lo,
            "ci_high": hi,
            "n_runs": runs,
            "n_scenarios": n,
            "note": notes,
        }
    )


def compare(
    agents: pd.DataFrame,
    humans: pd.DataFrame,
    *,
    seed: int,
    study: protocol.Study | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
) -> HumanComparison:
    """The stage's analysis of a validated agent run table and a validated human run table."""
    study = study or protocol.study()
    settings = InferenceSettings.from_study(seed, study, B=B, n_permutations=n_permutations)
    q = float(study.q)
    conditions = list(study["human_wave"]["conditions"])
    # The study's agent arms (a study may run fewer than the design's five).
    arms = [a for a in study.arms if a in set(agents["arm"])]
    scenarios = sorted(humans["scenario"].unique())
    agent_rows = runtable.primary_rows(agents, study)
    agent_rows = agent_rows[agent_rows["scenario"].isin(scenarios)]
    shared = ["scenario", "arm", "occupation", "professional_minutes", "designed_depth", "D", "E", "Q", "wall_s"]
    people = humans[shared + ["time_on_task_s", "assistant_cost_usd", "assistant_requests", "assistant_tokens"]]
    combined = pd.concat([agent_rows[shared], people], ignore_index=True)
    layout = Layout.of(combined, [*arms, *conditions])
    w = layout.weights("equal")
    counts = resampling.bootstrap_counts(np.random.default_rng([settings.seed, 2]), layout.J, settings.B)
    S = estimators.acceptance_values(combined, q)
    means = layout.means(S)
    _, scored = layout.sums(S)
    acc, _ = acceptance_table(means, layout, w, settings, counts, layout.runs_per_arm(), scored.sum(axis=0).astype(int))
    acc = acc.rename(columns={"arm": "group"})
    acc.insert(1, "kind", ["person" if g in conditions else "agent" for g in acc["group"]])
    pairs = human_contrasts(conditions, arms)
    con, _ = contrast_table(means, layout, pairs, w, settings, counts=counts, adjustment=None)
    con["role"] = "descriptive"
    con["p_holm"] = holm(con["p_value"].to_numpy(dtype=float), 1 - settings.level, method="holm")
    # Time on task for people, wall time for agents, in minutes, with the same estimator and bootstrap.
    minutes = (
        np.where(
            combined["arm"].isin(conditions).to_numpy(),
            pd.to_numeric(combined.get("time_on_task_s"), errors="coerce").to_numpy(dtype=float),
            pd.to_numeric(combined["wall_s"], errors="coerce").to_numpy(dtype=float),
        )
        / 60.0
    )
    time = _group_means(layout, minutes, w, counts, settings.level).rename(columns={"estimate": "minutes"})
    time.insert(1, "measure", ["time on task" if g in conditions else "wall time" for g in time["group"]])
    assisted = humans[humans["arm"] == conditions[1]]
    cost = np.where(
        combined["arm"] == conditions[1], pd.to_numeric(combined.get("assistant_cost_usd"), errors="coerce"), np.nan
    ).astype(float)
    per_session = _group_means(layout, cost, w, counts, settings.level)
    row = per_session[per_session["group"] == conditions[1]].iloc[0]
    assistant = pd.DataFrame(
        [
            {
                "condition": conditions[1],
                "sessions": len(assisted),
                "requests": int(pd.to_numeric(assisted["assistant_requests"], errors="coerce").fillna(0).sum()),
                "tokens": int(pd.to_numeric(assisted["assistant_tokens"], errors="coerce").fillna(0).sum()),
                "cost_usd_total": float(pd.to_numeric(assisted["assistant_cost_usd"], errors="coerce").fillna(0).sum()),
                "cost_usd_per_session": row["estimate"],
                "ci_low": row["ci_low"],
                "ci_high": row["ci_high"],
                "note": row["note"] if len(assisted) else "no H1 session",
            }
        ]
    )
    labels = backends.label_of([*agents["backend"].astype(str).unique(), *humans["backend"].astype(str).unique()])
    people_ok = not (humans["backend"] == backends.SIMULATED_HUMAN).any()
    return HumanComparison(acc, con, time, assistant, settings, scenarios, labels, people_ok, q)
