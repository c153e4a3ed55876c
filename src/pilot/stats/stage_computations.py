"""The computations of the primary and sensitivity stages, one call each.

The stage notebooks call these and then display and write what they return,
so a test (or a reviewer) can run a stage's every computation on any run table
without a notebook kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from pilot import protocol
from pilot.stats import hypotheses, primary, sensitivity
from pilot.stats.hypotheses import HypothesisResult
from pilot.stats.primary import PrimaryResult


@dataclass
class PrimaryStage:
    result: PrimaryResult
    hypotheses: list[HypothesisResult]


@dataclass
class SensitivityStage:
    results: dict[str, object]
    hypotheses: list[HypothesisResult]


def primary_stage(
    runs: pd.DataFrame,
    *,
    seed: int,
    study: protocol.Study | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
) -> PrimaryStage:
    """The primary analysis and H1, H2, H3, H5, H6 on a validated run table."""
    study = study or protocol.study()
    result = primary.primary_analysis(runs, seed=seed, study=study, B=B, n_permutations=n_permutations)
    st = result.settings
    hyps = [
        hypotheses.h1(runs, result=result, study=study),
        hypotheses.h2(runs, result=result, study=study),
        hypotheses.h3(runs, result=result, seed=seed, study=study),
        hypotheses.h5(runs, seed=seed, study=study, B=st.B, n_permutations=st.n_permutations),
        hypotheses.h6(runs, seed=seed, study=study, B=st.B),
    ]
    return PrimaryStage(result, hyps)


def sensitivity_stage(
    runs: pd.DataFrame,
    *,
    seed: int,
    study: protocol.Study | None = None,
    B: int | None = None,
    n_permutations: int | None = None,
) -> SensitivityStage:
    """Every sensitivity analysis and secondary endpoint, and H4 and H7, on a validated run table."""
    study = study or protocol.study()
    r: dict[str, object] = {}
    r["q_grid"] = sensitivity.q_grid(runs, seed=seed, study=study, B=B, n_permutations=n_permutations)
    r["minutes_weighted"] = sensitivity.minutes_weighted(
        runs, seed=seed, study=study, B=B, n_permutations=n_permutations
    )
    r["small_sample"] = sensitivity.small_sample_contrasts(
        runs, seed=seed, study=study, B=B, n_permutations=n_permutations
    )
    r["logistic"] = sensitivity.logistic_cluster(runs, study=study)
    r["kaplan_meier"] = sensitivity.kaplan_meier(runs, study=study)
    r["cost_per_accepted"] = sensitivity.cost_per_accepted(runs, seed=seed, study=study, B=B)
    # The literal reading (runs without a reported cost left out), a sensitivity of the charged one.
    r["cost_per_accepted_reported"] = sensitivity.cost_per_accepted(
        runs, seed=seed, study=study, B=B, cost_reading="reported"
    )
    r["frontier_budget"] = sensitivity.frontier(runs, "budget", seed=seed, study=study, B=B)
    # The same frontier with an unreported cost within no budget, the sensitivity of the one cost rule.
    r["frontier_budget_reported"] = sensitivity.frontier(
        runs, "budget", seed=seed, study=study, B=B, cost_reading="reported"
    )
    r["frontier_human"] = sensitivity.frontier(runs, "human", seed=seed, study=study, B=B)
    r["secondary"] = sensitivity.secondary_endpoints(runs, study=study)
    r["models"] = sensitivity.model_sensitivity(runs, seed=seed, study=study, B=B)
    r["recovery_index"] = sensitivity.recovery_index(runs, seed=seed, study=study, B=B)
    r["reliability"] = sensitivity.reliability(runs, study=study)
    r["agreement"] = sensitivity.judge_agreement(runs, study=study)
    return SensitivityStage(r, [hypotheses.h4(runs, study=study), hypotheses.h7(runs, study=study)])
