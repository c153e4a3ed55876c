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
    # The design's ten name their traps in prose (one "traps" row); a later bundle's traps: list gets a row per trap.
    expected |= {f"trap:{t.id}" for t in sc.oracle.traps} if sc.oracle.traps else {"traps"}
    expected |= {f"substitute:{d.name}" for d in sc.file_deliverables if d.kind in SUBSTITUTED_KINDS}
    expected |= {f"cheat:hard-coded {d.name}" for d in sc.file_deliverables if d.requires_formulas}
    assert expected <= checks, sorted(expected - checks)
    assert any(c.startswith("cheat:") and c.endswith(" gold") for c in checks)  # another scenario's gold package
    assert {f"defect:{n}" for n in applicable_defects(sc)} <= checks
