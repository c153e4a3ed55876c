"""The A4 self-check: ship the standalone tool into a workspace and run it.

The tool (``selfcheck_tool.py``) imports nothing from ``pilot``; the
workspace copy carries the deliverable specification (names, formats,
formula and length requirements, all stated in the brief) embedded between
markers. It never sees ``oracle.yml``, the rubric or the solver. The
controller runs the pristine package copy against the workspace, with the
specification taken from the scenario, so a worker who edits its own copy
cannot change the verdict.
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
    """What the self-check may know: the deliverables as the brief states them."""
    return {"scenario": scenario.id, "deliverables": [d.to_dict() for d in scenario.deliverables]}


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


def run_selfcheck(workspace: Path, scenario: Scenario | str | None = None, *, timeout: float = TIMEOUT_S) -> SelfCheckReport:
    """Run the pristine tool on ``workspace``; the spec comes from ``scenario`` or the workspace copy."""
    workspace = Path(workspace)
    if scenario is not None:
        sc = load_scenario(scenario) if isinstance(scenario, str) else scenario
        spec = selfcheck_spec(sc)
    else:
        spec = embedded_spec(workspace)
        if spec is None:
            return SelfCheckReport(False, [f"FAIL  no self-check specification: {workspace / WORKSPACE_NAME} is missing or altered"], 2)
        if spec.get("scenario"):
            try:
                spec = selfcheck_spec(load_scenario(spec["scenario"]))
            except Exception:  # noqa: BLE001 - an unknown scenario keeps the embedded spec
                pass
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(spec, fh)
        spec_file = fh.name
    try:
        proc = subprocess.run(
            [sys.executable, str(SELFCHECK_TOOL), str(workspace), "--spec", spec_file],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired:
        return SelfCheckReport(False, [f"FAIL  the self-check did not finish within {timeout:.0f} s"], 124)
    finally:
        Path(spec_file).unlink(missing_ok=True)
    lines = proc.stdout.splitlines() + [f"ERROR {l}" for l in proc.stderr.splitlines() if l.strip()]
    return SelfCheckReport(proc.returncode == 0, lines, proc.returncode)
