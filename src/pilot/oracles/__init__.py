"""Deterministic oracles: criteria, LibreOffice recalculation, the input-hash check, the A4 self-check."""

from pilot.oracles.evaluate import CriterionResult, Evaluation, default_recalculator, evaluate, evaluate_many
from pilot.oracles.hashing import compare_hashes, hash_inputs
from pilot.oracles.recalc import Recalculator
from pilot.oracles.selfcheck import SELFCHECK_TOOL, SelfCheckReport, install_selfcheck, run_selfcheck

__all__ = [
    "CriterionResult",
    "Evaluation",
    "Recalculator",
    "SELFCHECK_TOOL",
    "SelfCheckReport",
    "install_selfcheck",
    "run_selfcheck",
    "compare_hashes",
    "default_recalculator",
    "evaluate",
    "evaluate_many",
    "hash_inputs",
]
