"""What every bundle's ``pilot scenarios check`` report must hold, shared by the kit's test files."""

from __future__ import annotations

from pilot.defects import applicable_defects
from pilot.protocol.scenario import load_scenario
from pilot.scenario_kit.report import CheckReport

#: The deliverable kinds the kit delivers as text in place of the binary file (a substitute row each).
SUBSTITUTED_KINDS = ("xlsx", "docx", "pdf", "pptx")


def assert_every_check_passes(report: CheckReport, scenarios: list[str]) -> None:
    failed = [(r.scenario, r.check, r.reason) for r in report.failures]
    assert failed == []
    assert set(report.summary.scenario) == set(scenarios)


def assert_whole_matrix(report: CheckReport, sid: str) -> None:
    """Every row the kit owes ``sid``: bundle, inputs, gold, no-op, every mutation, substitute, trap, defect and
    cheat."""
    checks = set(report.summary[report.summary.scenario == sid].check)
    sc = load_scenario(sid)
    expected = {
        "bundle",
        "finished",
        "inputs regenerate",
        "gold",
        "no-op",
        "self-check parity",
        "brief/oracle/rubric",
        "judge blinding",
        "input:edited",
        "input:deleted",
        "input:added",
        "input:symlinked",
        "cheat:inputs as deliverables",
        "cheat:record over nothing",
        "cheat:symlink out",
    }
    expected |= {f"mutation:{c.id}" for c in sc.oracle.criteria}
    # The design's ten name their traps in prose (one "traps" row); a later bundle's traps: list gets a row per trap,
    # and each of its figures and text criteria a probe row.
    expected |= {f"trap:{t.id}" for t in sc.oracle.traps} if sc.oracle.traps else {"traps"}
    if sc.oracle.traps:
        probed = ("labelled_value", "text_number", "csv_value", "text_contains", "workbook_contains")
        expected |= {f"probe:{c.id}" for c in sc.oracle.criteria if c.kind in probed}
    expected |= {f"substitute:{d.name}" for d in sc.file_deliverables if d.kind in SUBSTITUTED_KINDS}
    expected |= {f"cheat:hard-coded {d.name}" for d in sc.file_deliverables if d.requires_formulas}
    assert expected <= checks, sorted(expected - checks)
    assert any(c.startswith("cheat:") and c.endswith(" gold") for c in checks)  # another scenario's gold package
    assert {f"defect:{n}" for n in applicable_defects(sc)} <= checks


def skeleton_files(sid: str) -> list[str]:
    """What ``pilot scenarios new SID`` writes, relative to the repository root, in the order it lists them (the docs'
    walkthrough names the same files): the bundle, its two example inputs, the library module and the test file."""
    module = sid.lower().replace("-", "_")
    bundle = f"protocol/scenarios/{sid}"
    return [
        f"{bundle}/brief.md",
        f"{bundle}/scenario.yml",
        f"{bundle}/oracle.yml",
        f"{bundle}/rubric.yml",
        f"{bundle}/inputs/policy.txt",
        f"{bundle}/inputs/records.csv",
        f"src/pilot/scenarios/library/{module}.py",
        f"tests/test_mutations_{module}.py",
    ]
