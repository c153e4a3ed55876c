"""The preregistered protocol: the design (``study.yml``, arms, amendments), the scenario bundles and the prices.

- :mod:`pilot.protocol.design`: load and validate ``study.yml``,
  ``arms/arms.yml`` and ``amendments.csv`` (its names are re-exported here:
  ``protocol.study()``, ``protocol.ProtocolError``, ...);
- :mod:`pilot.protocol.scenario`: one scenario bundle (``protocol/scenarios/<ID>/``) loaded and validated;
- :mod:`pilot.protocol.request_policy`: what an arm's requests may carry through the model proxy (arms.yml);
- :mod:`pilot.protocol.prices`: the pinned price table, usage and the cost tolerance;
- :mod:`pilot.protocol.validation`: everything at once, bundles included
  (``load_all``, ``load_scenarios``; loaded on first use, as are the bundles).
"""

from pilot.lazy_exports import lazy_exports
from pilot.protocol.design import (
    AMENDMENT_COLUMNS,
    AMENDMENT_STAGES,
    ARM_ID,
    ARMS_SCHEMA,
    CAPABILITIES,
    SCENARIO_ID,
    STUDY_SCHEMA,
    Arm,
    ArmVocabulary,
    Caps,
    Contrast,
    ProtocolError,
    Study,
    arm_instructions,
    arm_vocabulary,
    arms,
    common_policy,
    common_request_policy,
    load_amendments,
    load_arms,
    load_study,
    object_schema,
    read_yaml,
    study,
    validate,
)

_EXPORTS = {name: "pilot.protocol.validation" for name in ("check_rubric_weights", "load_all", "load_scenarios")}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "AMENDMENT_COLUMNS",
    "AMENDMENT_STAGES",
    "Arm",
    "ARM_ID",
    "arm_instructions",
    "arm_vocabulary",
    "ArmVocabulary",
    "arms",
    "ARMS_SCHEMA",
    "CAPABILITIES",
    "Caps",
    "common_policy",
    "Contrast",
    "common_request_policy",
    "load_amendments",
    "load_arms",
    "load_study",
    "object_schema",
    "ProtocolError",
    "read_yaml",
    "SCENARIO_ID",
    "Study",
    "study",
    "STUDY_SCHEMA",
    "validate",
    "check_rubric_weights",
    "load_all",
    "load_scenarios",
]
