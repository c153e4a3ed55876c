"""The A4 self-check: ship the standalone tool into a workspace and run it.

The tool (``selfcheck_tool.py``) imports nothing from ``pilot``; the
workspace copy carries the deliverable specification (names, formats,
formula and length requirements, all stated in the brief) embedded between
markers. It never sees the answers in ``oracle.yml``, the rubric or the
solver. The controller runs the pristine package copy (in a child process
under a time and a memory limit, confined: :func:`pilot.confined.run`, no
network, read-only, a private profile and ``/tmp``, never the harness's uid)
on a private snapshot of the deliverables, read beneath the workspace by the
bounded reader (:mod:`pilot.worker_files`), with the specification taken
from the scenario, so a worker who edits its own copy cannot change the
verdict and the tool never opens the worker's files; and the controller's
verdict also requires the oracle's own form checks
(:data:`pilot.oracles.evaluate.FORM_KINDS`, read through the oracle's
guarded reader) to pass, so the self-check can never pass what the oracle
fails on form.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pilot import worker_files
from pilot.protocol.scenario import Scenario, load_scenario

SELFCHECK_TOOL = Path(__file__).with_name("selfcheck_tool.py")
WORKSPACE_NAME = "selfcheck.py"
_SPEC_LINE = re.compile(r"^SPEC_JSON = .*$", re.M)
TIMEOUT_S = 300.0
#: The most of the workspace's ``selfcheck.py`` read to find its embedded specification.
MAX_TOOL_BYTES = 1024 * 1024
#: The most entries of ``outputs/`` the snapshot the tool reads lists.
MAX_OUTPUT_ENTRIES = 10_000


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
    # The workspace copy is the worker's file: read beneath the workspace, bounded, never through a link.
    try:
        raw = worker_files.read_bytes(workspace, WORKSPACE_NAME, max_bytes=MAX_TOOL_BYTES)
    except worker_files.Refused:
        return None
    m = _SPEC_LINE.search(raw.decode("utf-8", errors="replace"))
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
    report = run_tool(workspace, spec, timeout)
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


def snapshot_outputs(workspace: Path, spec: dict, into: Path) -> dict[str, str]:
    """Lay out in ``into`` what the tool reads of the workspace: ``outputs/`` as the bounded reader sees it.

    Each deliverable the specification names is copied with its bytes, read beneath the workspace by
    :mod:`pilot.worker_files` (no link followed, nothing but a regular file opened, at most the deliverable limit
    read); every other regular file of ``outputs/`` is there by name only (empty: the tool reads only the
    deliverables, and only the names of the rest). Links, pipes, devices and folders are left out. Returns
    deliverable name -> why it was not copied, in the oracle's words, for those refused.
    """
    from pilot.oracles.safety import MAX_FILE_BYTES, refusal_reason

    refused: dict[str, str] = {}
    wanted = {d["name"] for d in spec.get("deliverables", []) if isinstance(d, dict) and d.get("name")}
    out = Path(into) / "outputs"
    try:
        folder = worker_files.Folder(workspace)
    except worker_files.Refused:
        return refused
    with folder:
        try:
            listed = folder.listdir("outputs", max_entries=MAX_OUTPUT_ENTRIES)
        except worker_files.Refused:
            return refused  # no outputs/ folder the tool may read: it says so itself
        out.mkdir(parents=True)
        for entry in listed:
            if entry.name in wanted:
                try:
                    data = folder.read_bytes(f"outputs/{entry.name}", max_bytes=MAX_FILE_BYTES)
                except worker_files.Refused as exc:
                    refused[entry.name] = refusal_reason(entry.name, exc)
                    continue
                (out / entry.name).write_bytes(data)
            elif entry.kind == "file":
                (out / entry.name).touch()
    return refused


def run_tool(workspace: Path, spec: dict, timeout: float) -> SelfCheckReport:
    """The pristine tool on a private snapshot of the deliverables, confined (it parses what the worker wrote and
    may start LibreOffice on it: :func:`pilot.confined.run`, bounded in time and memory as the oracle's guarded reader
    is). The snapshot (:func:`snapshot_outputs`) lies under the workspace's own name, so the tool's report reads as
    it would on the workspace.
    """
    import os
    import tempfile

    from pilot import confined, office_convert
    from pilot.oracles.guard import MEMORY_LIMIT_BYTES

    workspace = Path(workspace)
    with tempfile.TemporaryDirectory(prefix="pilot-selfcheck-") as tmp:
        root = Path(tmp)
        staged = root / "ws" / workspace.name
        staged.mkdir(parents=True)
        os.chmod(staged.parent, 0o755)
        refused = snapshot_outputs(workspace, spec, staged)
        spec_file = root / "spec.json"
        spec_file.write_text(json.dumps(spec), encoding="utf-8")
        os.chmod(spec_file, 0o644)
        soffice = shutil.which("soffice") or shutil.which("libreoffice")
        done = confined.run(
            [sys.executable, "-I", str(SELFCHECK_TOOL), str(staged), "--spec", str(spec_file)],
            read_only=[
                staged,
                spec_file,
                SELFCHECK_TOOL,
                *confined.python_binds(),
                *(office_convert.libreoffice_binds(soffice) if soffice else []),
            ],
            scratch=root / "scratch",
            limits=confined.Limits(wall_s=timeout, memory_bytes=MEMORY_LIMIT_BYTES),
            merge_stderr=False,
        )
    if done.timed_out:
        return SelfCheckReport(False, [f"FAIL  the self-check did not finish within {timeout:.0f} s"], 124)
    lines = done.output.splitlines() + [f"ERROR {line}" for line in done.errors.splitlines() if line.strip()]
    # A deliverable the reader refused is absent from the snapshot: the tool's "missing" is replaced by why.
    lines = [f"FAIL  {refused[name]}" if (name := _missing_name(line)) in refused else line for line in lines]
    code = done.returncode if done.returncode is not None else 2
    return SelfCheckReport(code == 0, lines, code)


def _missing_name(line: str) -> str | None:
    """The deliverable a tool line ``FAIL  <name> missing`` names, or None."""
    if line.startswith("FAIL  ") and line.endswith(" missing"):
        return line[len("FAIL  ") : -len(" missing")]
    return None
