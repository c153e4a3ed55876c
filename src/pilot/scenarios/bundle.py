"""The scenario bundle's names where the frozen oracle code imports them (``from pilot.scenarios.bundle import ...``).

Bundles are loaded by :mod:`pilot.protocol.scenario`. The oracle code is part
of every study's freeze manifest, so it keeps this import path rather than
change a frozen file; new code imports :mod:`pilot.protocol.scenario`.
"""

from pilot.protocol.scenario import COMPLETION_RECORD, Criterion, Deliverable, Scenario, load_scenario

__all__ = ["COMPLETION_RECORD", "Criterion", "Deliverable", "Scenario", "load_scenario"]
