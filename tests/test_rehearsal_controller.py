"""The rehearsal report catches an A4 controller that decides the one resume the wrong way.

A rehearsal of LEGAL-01 on A4 with two repeats, through the real harness (pinned CLI, sandbox, proxy, judges)
and the scripted model server, at a study seed where the first repeat's worker leaves a deliverable out (its
self-check must fail and the resume be granted) and the second delivers everything (the self-check must pass
and the resume be withheld). The run function is the study's own with one planted fault
(``rehearsal_faults.inverted_first_selfcheck``): the controller reads its first self-check the wrong way round.
The report must name both wrong decisions, and nothing else; with the study's own run function it must find
nothing. Not skipped without the CLI or the sandbox.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from real_cli_support import rehearsal_environment, require_real_sandbox

from pilot import paths
from pilot.simulated import rehearsal_report as rehearsal

NAME = "rehearsal-controller"
#: At this study seed the scripted A4 worker's first session omits a deliverable in repeat 1 and plants nothing
#: in repeat 2 (the test checks the plan's declarations say so before it reads the report).
SEED = 0
pytestmark = pytest.mark.usefixtures("real_cli", "bwrap", "soffice")


@pytest.fixture(scope="module", params=["honest", "faulty"])
def rehearsed(request, tmp_path_factory):
    require_real_sandbox()
    from pilot.study import create_study, export_run_table, run_study_wave

    root = tmp_path_factory.mktemp(f"rehearsal-controller-{request.param}")
    run_function = "rehearsal_faults:inverted_first_selfcheck" if request.param == "faulty" else None
    tests_dir = str(Path(__file__).resolve().parent)
    with pytest.MonkeyPatch.context() as mp:
        # The attempts run in child processes: they find the fault's module on the path they inherit.
        rehearsal_environment(mp, root / "data", pythonpath=tests_dir)
        create_study(
            NAME, seed=SEED, scenarios=["LEGAL-01"], arms="A4", pilot_repeats=2, run_function=run_function
        ).close()
        result = run_study_wave(NAME, backend="rehearsal", progress=False, workers=2)
        table_path, _ = export_run_table(NAME, out=root / "out" / "runs.csv")
        yield {
            "kind": request.param,
            "result": result,
            "report": rehearsal.collect(NAME, run_table=table_path, host_arms=["A4"]),
        }


def test_the_controller_is_held_to_the_plans_predictions(rehearsed):
    """Honest: the resume granted after the failing self-check, withheld after the passing one, 0 findings.
    Faulty: both wrong decisions named, and nothing else."""
    report = rehearsed["report"]
    assert rehearsed["result"].stop_reason == "complete"
    runs = {r.run_id: r for r in report.runs}
    assert sorted(runs) == ["LEGAL-01.A4.r1", "LEGAL-01.A4.r2"]
    # The declarations, not the oracle, say what the controller should have seen.
    from pilot.simulated.scripted_model import read_truth, scripted_record_dir
    from pilot.store import Store

    with Store.open(paths.study_dir(NAME)) as store:
        folders = {a["run_id"]: Path(a["workspace"]) for a in store.attempts()}
    first = {rid: next(iter(read_truth(scripted_record_dir(folders[rid])).values()))["sessions"][0] for rid in runs}
    assert first["LEGAL-01.A4.r1"]["selfcheck_expected"] is False and first["LEGAL-01.A4.r1"]["resume_expected"] is True
    assert first["LEGAL-01.A4.r2"]["selfcheck_expected"] is True and first["LEGAL-01.A4.r2"]["resume_expected"] is False

    if rehearsed["kind"] == "honest":
        assert report.findings == [], report.findings
        assert runs["LEGAL-01.A4.r1"].cli_sessions == 2 and runs["LEGAL-01.A4.r2"].cli_sessions == 1
        return
    withheld = runs["LEGAL-01.A4.r1"].findings
    assert any(f.startswith("self-check: the controller's first verdict is True") for f in withheld), withheld
    assert any(f.startswith("recovery: the controller withheld the resume; the plan says granted") for f in withheld), (
        withheld
    )
    granted = runs["LEGAL-01.A4.r2"].findings
    assert any(f.startswith("self-check: the controller's first verdict is False") for f in granted), granted
    assert any(f.startswith("recovery: the controller granted the resume; the plan says withheld") for f in granted), (
        granted
    )
    # Only the controller's findings: everything else of both runs holds.
    other = [f for r in report.runs for f in r.findings if not f.startswith(("self-check:", "recovery:"))]
    assert other == [] and report.study_findings == [], (other, report.study_findings)
    assert not report.ok
