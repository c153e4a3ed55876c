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
    """Every scenario bundle under ``protocol/scenarios``, validated; each belongs to a scenario set and every set's ids
    are bundles."""
    root = Path(root) if root is not None else paths.SCENARIOS_DIR
    if not root.is_dir():
        raise ProtocolError(root, "<dir>", "the scenarios folder is missing")
    bundles = sorted(p for p in root.iterdir() if p.is_dir())
    for b in bundles:
        if not (b / "scenario.yml").is_file():
            raise ProtocolError(
                b / "scenario.yml", "<file>", "a folder under protocol/scenarios/ must be a bundle with a scenario.yml"
            )
    loaded = [load_scenario_from(b, study) for b in bundles]
    for sc in loaded:
        check_rubric_weights(sc)
    names = {b.name for b in bundles}
    for set_name, ids in study.scenario_sets.items():
        missing = [sid for sid in ids if sid not in names]
        if missing:
            raise ProtocolError(
                study.path,
                f"scenario_sets.{set_name}",
                f"names {', '.join(missing)}, which protocol/scenarios/ does not hold",
            )
    in_sets = {sid for ids in study.scenario_sets.values() for sid in ids}
    for b in bundles:
        if b.name not in in_sets:
            raise ProtocolError(
                study.path,
                "scenario_sets",
                f"the bundle {b.name} is in no scenario set: a finished scenario joins a set by amendment before any "
                f"run of it (`pilot protocol amend --scenario {b.name} --set NAME --content ...` writes both)",
            )
    return loaded


def check_added_scenarios(study: Study, amendments: list[dict[str, str]], bundles: list[str]) -> None:
    """Every bundle beyond the design's set was added by an amendment of its own, titled ``Extension scenario <ID>``
    (:mod:`pilot.protocol.amend`), once; and every such amendment names a bundle."""
    from pilot.protocol.amend import EXTENSION_TITLE, added_by

    design = set(study.scenario_set(None))
    added = added_by(amendments)
    for sid, ids in added.items():
        if len(ids) > 1:
            raise ProtocolError(paths.AMENDMENTS_FILE, "title", f"{sid} is added twice, by {' and '.join(ids)}")
        if sid not in bundles:
            raise ProtocolError(
                paths.AMENDMENTS_FILE, "title", f"{ids[0]} adds {sid}, which protocol/scenarios/ does not hold"
            )
    for sid in bundles:
        if sid not in design and sid not in added:
            sets = [name for name, ids in study.scenario_sets.items() if sid in ids]
            raise ProtocolError(
                paths.AMENDMENTS_FILE,
                "title",
                f"no amendment adds the bundle {sid} (in set {', '.join(sets) or 'none'}): a scenario joins a set by "
                "an "
                f"amendment titled '{EXTENSION_TITLE}{sid}', made before any run of the set; write it with "
                f"`pilot protocol amend --scenario {sid} --set NAME --content ...`",
            )


def load_all() -> dict[str, Any]:
    """Validate every protocol file, every scenario bundle and the price table included; used by ``pilot protocol
    validate``."""
    s = load_study()
    amendments = load_amendments()
    scenarios = load_scenarios(s)
    check_added_scenarios(s, amendments, [sc.id for sc in scenarios])
    return {
        "study": s,
        "arms": load_arms(study=s),
        "amendments": amendments,
        "scenarios": scenarios,
        "prices": PriceTable.load(required_models=study_models(s)),
    }
