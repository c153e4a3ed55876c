"""The ten scenario bundles: loading, input generation and reference solvers."""

from pilot.scenarios.bundle import (
    COMPLETION_RECORD,
    Criterion,
    Deliverable,
    Oracle,
    Rubric,
    Scenario,
    list_scenarios,
    load_scenario,
    load_scenario_from,
)
from pilot.scenarios.generate import build_gold_workspace, check_inputs, generate_inputs, solve

__all__ = [
    "COMPLETION_RECORD",
    "Criterion",
    "Deliverable",
    "Oracle",
    "Rubric",
    "Scenario",
    "build_gold_workspace",
    "check_inputs",
    "generate_inputs",
    "list_scenarios",
    "load_scenario",
    "load_scenario_from",
    "solve",
]
