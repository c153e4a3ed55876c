"""The verdicts a study's freeze holds: what the running oracle code decides on each scenario's known packages.

For every scenario, the gold package (the reference solution), the no-op
package (an empty ``outputs/``) and one mutation per criterion (a plausible
mistake that breaks that criterion alone, :mod:`pilot.defects`) are built
exactly as ``pilot scenarios check`` builds them and evaluated in one batch.
Each package's verdict is its D, its E and every criterion's pass or fail.
A study records them when its pilot starts (:class:`pilot.freeze.FreezeLock`);
oracle code that changed later is accepted only if it gives the same verdicts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pilot.freeze import Verdicts
from pilot.protocol.scenario import load_scenario
from pilot.scenario_kit.checks import build_packages


def verdict(evaluation: Any) -> dict[str, Any]:
    """One evaluation as the freeze holds it: D, E (0 or 1) and each criterion's result."""
    return {
        "D": int(bool(evaluation.D)),
        "E": int(bool(evaluation.E)),
        "criteria": {c.id: bool(c.passed) for c in evaluation.criteria},
    }


def derive(scenario_ids: Iterable[str], *, workdir: Path | None = None, recalculator: Any = None) -> Verdicts:
    """The verdicts of ``scenario_ids``' gold, no-op and mutation packages with the running code (built under
    ``workdir``, a temporary folder by default); the ``rederive`` of :func:`pilot.freeze.verify`."""
    from pilot.oracle_formats.evaluate import default_recalculator, evaluate_many

    with tempfile.TemporaryDirectory(prefix="pilot-verdicts-") as tmp:
        base = Path(workdir) if workdir is not None else Path(tmp)
        recalc = recalculator or default_recalculator()
        built = [
            build_packages(load_scenario(sid), base / sid, recalculator=recalc, prove_traps=False, verdicts_only=True)
            for sid in sorted(set(scenario_ids))
        ]
        # One batch: the recalculator (LibreOffice) starts once for every package of every scenario.
        items = [(p.scenario, p.workspace, None) for sp in built for p in sp.packages]
        evaluations = iter(evaluate_many(items, recalculator=recalc))
        return {sp.scenario.id: {p.name: verdict(next(evaluations)) for p in sp.packages} for sp in built}
