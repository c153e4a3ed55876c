"""The A4 self-check: ship the standalone tool into a workspace and run it.

The tool (``selfcheck_tool.py``) imports nothing from ``pilot``; the
workspace copy carries the deliverable specification (names, formats,
formula and length requirements, all stated in the brief) embedded between
markers. It never sees the answers in ``oracle.yml``, the rubric or the
solver. The controller runs the pristine package copy against the
workspace (in a child process under a time and a memory limit), with the
specification taken from the scenario, so a worker who edits its own copy
cannot change the verdict; and the controller's verdict also requires the
oracle's own form checks (:data:`pilot.oracles.evaluate.FORM_KINDS`, read
through the oracle's guarded reader) to pass, so the self-check can never
pass what the oracle fails on form.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pilot.scenarios.bundle import Scenario, load_scenario

SELFCHECK_TOOL = Path(__file__).with_name("selfcheck_tool.py")
WORKSPACE_NAME = "selfcheck.py"
_SPEC_LINE = re.compile(r"^SPEC_JSON = .*$", re.M)
TIMEOUT_S = 300.0


@dataclass
class SelfCheckReport:
    passed: bool
    lines: list[str] = field(default_factory=list)
    exit_code: int = 0

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def selfcheck_spec(scenario: Scenario) -> dict:
    """What the self-check may know: the deliverables as the brief states them, and the oracle's form thresholds.

    ``min_formulas`` is the oracle's formula count for a workbook (a form
    threshold, not an answer), so the tool fails a workbook the oracle's
    formula check would fail.
    """
    deliverables = []
    for d in scenario.deliverables:
        entry = d.to_dict()
        counts = [
            int(c.get("min_count", 1))
            for c in scenario.oracle.criteria
            if c.kind == "formulas" and c.file == d.name and not c.get("sheet")
        ]
        if counts:
            entry["min_formulas"] = max(counts)
        deliverables.append(entry)
    return {"scenario": scenario.id, "deliverables": deliverables}


def tool_source(scenario: Scenario) -> str:
    """The tool's source with the scenario's specification embedded."""
    src = SELFCHECK_TOOL.read_text(encoding="utf-8")
    spec = json.dumps(selfcheck_spec(scenario), sort_keys=True)
    return _SPEC_LINE.sub(lambda _: f"SPEC_JSON = {spec!r}", src, count=1)


def install_selfcheck(scenario: Scenario, workspace: Path) -> Path:
    """Write ``<workspace>/selfcheck.py`` for an A4 run."""
    path = Path(workspace) / WORKSPACE_NAME
    path.write_text(tool_source(scenario), encoding="utf-8")
    path.chmod(0o755)
    return path


def embedded_spec(workspace: Path) -> dict | None:
    path = Path(workspace) / WORKSPACE_NAME
    if not path.is_file():
        return None
    m = _SPEC_LINE.search(path.read_text(encoding="utf-8", errors="replace"))
    if not m:
        return None
    try:
        literal = m.group(0).split("=", 1)[1].strip()
        import ast

        value = ast.literal_eval(literal)
        return json.loads(value) if isinstance(value, str) else None
    except (ValueError, SyntaxError, json.JSONDecodeError):
        return None


def run_selfcheck(
    workspace: Path,
    scenario: Scenario | str | None = None,
    *,
    timeout: float = TIMEOUT_S,
    recalculator=None,
) -> SelfCheckReport:
    """Run the pristine tool on ``workspace`` and the oracle's form checks; the spec comes from ``scenario`` or the
    workspace copy."""
    workspace = Path(workspace)
    sc = None
    if scenario is not None:
        sc = load_scenario(scenario) if isinstance(scenario, str) else scenario
        spec = selfcheck_spec(sc)
    else:
        spec = embedded_spec(workspace)
        if spec is None:
            return SelfCheckReport(
                False, [f"FAIL  no self-check specification: {workspace / WORKSPACE_NAME} is missing or altered"], 2
            )
        if spec.get("scenario"):
            try:
                sc = load_scenario(spec["scenario"])
                spec = selfcheck_spec(sc)
            except Exception:  # noqa: BLE001 - an unknown scenario keeps the embedded spec
                pass
    report = _run_tool(workspace, spec, timeout)
    if sc is not None:
        report = _with_form_checks(report, sc, workspace, recalculator)
    return report


def _with_form_checks(report: SelfCheckReport, scenario: Scenario, workspace: Path, recalculator) -> SelfCheckReport:
    """The tool's report, failed as well by every oracle form check that fails (named once, with the oracle's
    reason)."""
    from pilot.oracles.evaluate import evaluate_form

    results, errors = evaluate_form(scenario, workspace, recalculator=recalculator)
    failed = [r for r in results if not r.passed and r.blocked_by is None]
    tool_fails = [line for line in report.lines if line.startswith("FAIL")]
    # A file the tool already fails is reported once, by the tool.
    extra = [
        f"FAIL  {r.reason} (oracle form check {r.id})" for r in failed if not any(r.file in line for line in tool_fails)
    ]
    # An evaluation that could not run (no LibreOffice here) is said, not counted against the work.
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
    lines = body + extra + warnings + [f"SELF-CHECK FAILED: {n} problem(s)"]
    return SelfCheckReport(False, lines, report.exit_code or 1)


def _run_tool(workspace: Path, spec: dict, timeout: float) -> SelfCheckReport:
    import tempfile

    from pilot.oracles.guard import MEMORY_LIMIT_BYTES, _limit

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(spec, fh)
        spec_file = fh.name
    try:
        # The tool parses what the worker wrote: bounded in memory as the oracle's guarded reader is.
        proc = subprocess.run(
            [sys.executable, "-I", str(SELFCHECK_TOOL), str(workspace), "--spec", spec_file],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            preexec_fn=_limit(MEMORY_LIMIT_BYTES),
        )
    except subprocess.TimeoutExpired:
        return SelfCheckReport(False, [f"FAIL  the self-check did not finish within {timeout:.0f} s"], 124)
    finally:
        Path(spec_file).unlink(missing_ok=True)
    lines = proc.stdout.splitlines() + [f"ERROR {line}" for line in proc.stderr.splitlines() if line.strip()]
    return SelfCheckReport(proc.returncode == 0, lines, proc.returncode)
