"""The scenarios' code: seeded input generators and reference solvers (``library/``), and the office writers they use.

A bundle's files (brief, inputs, ``scenario.yml``, oracle and rubric) are
loaded by :mod:`pilot.protocol.scenario`; its loading names are re-exported
here for convenience.
"""

from pilot.protocol.scenario import (
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
