"""The whole protocol validated at once: every file, every scenario bundle and the price table.

It sits above the scenario bundles (which read the study's caps and
features from :mod:`pilot.protocol.design`), so the design never imports a
bundle; ``pilot protocol validate`` calls :func:`load_all`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pilot import paths
from pilot.protocol.design import ProtocolError, Study, load_amendments, load_arms, load_study
from pilot.protocol.prices import PriceTable, study_models
from pilot.protocol.scenario import load_scenario_from


def check_rubric_weights(scenario: Any) -> None:
    """A rubric's weights sum to one exactly (compared as decimals, as they are written)."""
    from decimal import Decimal

    total = sum(Decimal(repr(c.weight)) for c in scenario.rubric.criteria)
    if total != 1:
        raise ProtocolError(scenario.rubric.path, "criteria.*.weight", f"weights sum to {total}, not 1")


def load_scenarios(study: Study, root: Path | None = None) -> list[Any]:
    """Every scenario bundle under ``protocol/scenarios``, validated, and as many as ``design.n_scenarios`` says."""
    root = Path(root) if root is not None else paths.SCENARIOS_DIR
    if not root.is_dir():
        raise ProtocolError(root, "<dir>", "the scenarios folder is missing")
    bundles = sorted(p for p in root.iterdir() if p.is_dir())
    for b in bundles:
        if not (b / "scenario.yml").is_file():
            raise ProtocolError(b / "scenario.yml", "<file>", "a folder under protocol/scenarios/ must be a bundle with a scenario.yml")
    loaded = [load_scenario_from(b, study) for b in bundles]
    for sc in loaded:
        check_rubric_weights(sc)
    expected = int(study.raw["design"]["n_scenarios"])
    if len(loaded) != expected:
        raise ProtocolError(
            study.path, "design.n_scenarios",
            f"says {expected} but protocol/scenarios/ holds {len(loaded)} bundles ({', '.join(b.name for b in bundles)})",
        )
    return loaded


def load_all() -> dict[str, Any]:
    """Validate every protocol file, every scenario bundle and the price table included; used by ``pilot protocol validate``."""
    s = load_study()
    return {"study": s, "arms": load_arms(study=s), "amendments": load_amendments(), "scenarios": load_scenarios(s),
            "prices": PriceTable.load(required_models=study_models(s))}
