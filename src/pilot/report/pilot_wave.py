"""What stage 01 reports of the pilot wave: its run means per arm, its macros and the runs not accepted.

The stage runs the wave (:func:`pilot.study.run_study_wave`) and exports the
run table; this module turns that table and the ledger's status into what the
notebook shows and the manuscript reads (``study_macros.tex``). A wave in
which no run has an outcome (every run failed on infrastructure, or none was
judged) still reports: each missing number is "not estimable" with its reason,
never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pilot.latex import write_macros
from pilot.report import sentences

#: The outcomes and costs averaged per arm, as the run table names them.
MEAN_COLUMNS = ("D", "E", "Q", "S", "cost_usd", "wall_s")
#: How the notebook rounds each mean for display.
ROUNDING = {"D": 2, "E": 2, "Q": 1, "S": 2, "cost_usd": 2, "wall_s": 0}


@dataclass(frozen=True)
class PilotWave:
    """The pilot wave as exported: its runs with an outcome, those that failed on infrastructure, the means per arm."""

    rows: pd.DataFrame  # pilot runs that did not fail on infrastructure
    failed: int  # pilot runs that failed on infrastructure: no outcome, left out of every mean
    spent_usd: float  # what the ledger charged for the study so far (the status table's total)

    @property
    def summary(self) -> pd.DataFrame:
        """Raw run means per arm (not the scenario-weighted estimates of stage 04), rounded for reading."""
        return self.by_arm().round(ROUNDING)

    def by_arm(self) -> pd.DataFrame:
        """Mean of each outcome and cost per arm over the runs that have it; a column no run has stays, empty."""
        cols = [c for c in MEAN_COLUMNS if c in self.rows]
        # Coerced to numbers: a column in which no run has a value arrives as objects and would be dropped.
        values = self.rows[cols].apply(pd.to_numeric, errors="coerce").astype(float)
        return values.groupby(self.rows["arm"]).mean()

    def total_cost(self) -> pd.Series:
        """Each run's total cost: the agent's and the judges'."""
        return pd.to_numeric(self.rows["cost_usd"], errors="coerce") + pd.to_numeric(
            self.rows["judge_cost_usd"], errors="coerce"
        )

    def macros(self, *, label: str, set_name: str | None, n_scenarios: int) -> dict[str, object]:
        """The numbers ``study_macros.tex`` holds; a mean no run gives is written as "not estimable (reason)"."""
        mean_cost = self.total_cost().mean()
        return {
            "StudyDataLabel": label or "real",
            "StudyScenarioSet": f"\\texttt{{{set_name}}}" if set_name else "a list of scenarios named at creation",
            "StudyNumScenarios": n_scenarios,
            "PilotRunsDone": len(self.rows),
            "PilotInfraAttempts": int(pd.to_numeric(self.rows["attempts"]).sum() - len(self.rows)),
            "PilotCensoredRuns": int(self.rows["censored"].eq(True).sum()),  # a run never censored may read None
            "PilotSpentUsd": float(self.spent_usd),
            "PilotMeanCostUsd": (
                float(mean_cost) if pd.notna(mean_cost) else "not estimable (no pilot run has an outcome)"
            ),
        }

    def sentence(self, prefix: str = "") -> str:
        """The wave in one sentence: runs exported, the range of raw acceptance across arms, the mean cost of a run."""
        s = self.by_arm()["S"].dropna() if "S" in self.rows else pd.Series(dtype=float)
        if s.empty:
            accept = "no arm has a judged run, so raw acceptance is not estimable (no run has S)"
        else:
            accept = (
                "raw run means (not yet the scenario-weighted estimates of stage 04) put acceptance between "
                f"{sentences.num(s.min())} and {sentences.num(s.max())} across arms"
            )
        mean_cost = self.total_cost().mean()
        cost = (
            f"the mean total cost of a run (agent and judges) at {sentences.usd(mean_cost)}"
            if pd.notna(mean_cost)
            else "the mean total cost of a run is not estimable (no run has a cost)"
        )
        failed = f" ({self.failed} more failed on infrastructure and have no outcome)" if self.failed else ""
        return f"{prefix}{len(self.rows)} pilot runs exported{failed}; {accept}, and {cost}."

    def not_accepted(self) -> pd.DataFrame:
        """The runs with S = 0 or S missing, sorted by scenario, arm and run, for a first look at why."""
        cols = ["run_id", "scenario", "arm", "status", "D", "E", "Q", "S"]
        accepted = self.rows["S"].map(lambda v: v is True or v == 1)
        return self.rows.loc[~accepted, cols].sort_values(["scenario", "arm", "run_id"])


def pilot_wave(runs: pd.DataFrame, status: pd.DataFrame) -> PilotWave:
    """The pilot wave of an exported run table, with the ledger's total from the study's status table."""
    pilot = runs[runs["wave"] == "pilot"]
    failed = pilot["status"] == "infra_error"
    totals = status[status["arm"] == "all"]
    spent = float(totals["spent_usd"].iloc[0]) if len(totals) else 0.0
    return PilotWave(rows=pilot[~failed].reset_index(drop=True), failed=int(failed.sum()), spent_usd=spent)


def write_pilot_macros(
    wave: PilotWave, generated_dir: Path, *, study: str, label: str, set_name: str | None, n_scenarios: int
) -> Path:
    """Write ``study_macros.tex`` for the manuscript; returns its path."""
    path = Path(generated_dir) / "study_macros.tex"
    write_macros(
        wave.macros(label=label, set_name=set_name, n_scenarios=n_scenarios),
        path,
        digits=2,
        comment=f"Stage 01 on study {study} ({label or 'real'}).",
    )
    return path
