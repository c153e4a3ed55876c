"""Run functions with a planted controller fault, for the rehearsal report to catch (test-only).

``inverted_first_selfcheck`` is the study's own run function (:func:`pilot.pipeline.run_cell`) with one fault:
the A4 controller reads its first self-check the wrong way round, so it grants the resume after a passing
self-check and withholds it after a failing one. Nothing else changes; the files and records are the harness's.
"""

from __future__ import annotations

from pathlib import Path

from pilot import pipeline, runner
from pilot.attempt import AttemptOutcome, CellSpec


def inverted_first_selfcheck(cell: CellSpec, attempt_dir: Path, node: str, backend: str, seed: int) -> AttemptOutcome:
    real = runner._selfcheck
    seen: list[bool] = []

    def inverted(workspace: Path, scenario):
        passed, lines = real(workspace, scenario)
        seen.append(passed)
        return (not passed if len(seen) == 1 else passed), lines

    runner._selfcheck = inverted
    try:
        return pipeline.run_cell(cell, attempt_dir, node, backend, seed)
    finally:
        runner._selfcheck = real
