"""The A4 self-check for every scenario: the core's, with the deck-aware form checks for a deck scenario.

The core (:func:`pilot.oracles.selfcheck.run_selfcheck`) fails the self-check
on every oracle form check that fails, read through the core oracle, which
knows no deck. For a scenario with a ``pptx`` deliverable the same pristine
tool runs, and the form checks are those of
:func:`pilot.oracle_formats.evaluate.evaluate_form`, so the self-check's
verdict on a deck agrees with the oracle's form verdict.
"""

from __future__ import annotations

from pathlib import Path

from pilot.oracle_formats.evaluate import evaluate_form, has_deck
from pilot.oracles import selfcheck as core
from pilot.oracles.selfcheck import SelfCheckReport, embedded_spec, selfcheck_spec
from pilot.protocol.scenario import Scenario, load_scenario


def run_selfcheck(
    workspace: Path,
    scenario: Scenario | str | None = None,
    *,
    timeout: float = core.TIMEOUT_S,
    recalculator=None,
) -> SelfCheckReport:
    """As :func:`pilot.oracles.selfcheck.run_selfcheck`; a deck scenario's form checks read the deck."""
    workspace = Path(workspace)
    sc = None
    if scenario is not None:
        sc = load_scenario(scenario) if isinstance(scenario, str) else scenario
    else:
        spec = embedded_spec(workspace)
        if spec and spec.get("scenario"):
            try:
                sc = load_scenario(spec["scenario"])
            except Exception:  # noqa: BLE001 - an unknown scenario: the core decides, as it does
                sc = None
    if sc is None or not has_deck(sc):
        return core.run_selfcheck(workspace, scenario, timeout=timeout, recalculator=recalculator)
    report = core.run_tool(workspace, selfcheck_spec(sc), timeout)
    return _with_form_checks(report, sc, workspace, recalculator)


def _with_form_checks(report: SelfCheckReport, scenario: Scenario, workspace: Path, recalculator) -> SelfCheckReport:
    """The core's merge of the tool's report with the failed form checks (same wording), on the deck-aware checks."""
    results, errors = evaluate_form(scenario, workspace, recalculator=recalculator)
    failed = [r for r in results if not r.passed and r.blocked_by is None]
    tool_fails = [line for line in report.lines if line.startswith("FAIL")]
    extra = [
        f"FAIL  {r.reason} (oracle form check {r.id})" for r in failed if not any(r.file in line for line in tool_fails)
    ]
    warnings = [f"WARN  the oracle's form checks could not run in full: {e}" for e in errors]
    if not extra and (report.passed or not failed):
        return (
            SelfCheckReport(report.passed, report.lines[:-1] + warnings + report.lines[-1:], report.exit_code)
            if warnings
            else report
        )
    if not extra:
        return report
    body = [line for line in report.lines if not line.startswith(("SELF-CHECK PASSED", "SELF-CHECK FAILED"))]
    n = len(tool_fails) + len(extra)
    return SelfCheckReport(
        False, body + extra + warnings + [f"SELF-CHECK FAILED: {n} problem(s)"], report.exit_code or 1
    )
