"""A rehearsal of one scenario through the real harness, end to end.

``pilot study create`` for two arms and one repeat, ``run`` with the
rehearsal backend (the real pinned CLI in the real sandbox behind the
metering proxy, the scripted model server as the model, three real CLI judge
sessions), ``export``, the rehearsal report, and the primary and sensitivity
stages on the exported table. Not skipped without the CLI or the sandbox: it
fails, because a rehearsal that did not run proves nothing.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from notebook_helpers import run_cli, stage_params
from real_cli_support import rehearsal_environment, require_real_sandbox

from pilot import paths, runtable
from pilot.simulated import rehearsal_report as rehearsal
from pilot.store import STORE_FILE

SID = "LEGAL-01"
# The text-substitute path (Write calls) and the shell path; at the design's seed the scripted A1 worker
# draws the generative model's attempt at a denied program (qlmanage through bash -c, absent from a Linux
# host), and tries a denied program the host has by every route; the sandbox must stop each, and the audit
# record each as exactly the deviation planted, with the stub answering for the program the host has.
# A4 as well: the controller's self-check and its decision on the one resume, both foretold by the scripted plan.
ARMS = ["A0", "A1", "A4"]
NAME = "rehearsal-e2e"
pytestmark = pytest.mark.usefixtures("real_cli", "bwrap", "soffice")


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory):
    require_real_sandbox()
    from pilot.study import create_study, export_run_table, run_study_wave

    root = tmp_path_factory.mktemp("rehearsal")
    with pytest.MonkeyPatch.context() as mp:
        rehearsal_environment(mp, root / "data")
        create_study(NAME, scenarios=[SID], arms=",".join(ARMS), pilot_repeats=1).close()
        result = run_study_wave(NAME, backend="rehearsal", progress=False, workers=2)
        table_path, table = export_run_table(NAME, out=root / "out" / "runs.csv")
        report = rehearsal.collect(NAME, run_table=table_path, host_arms=ARMS)
        written = rehearsal.write(report, root / "out")
        yield {
            "root": root,
            "result": result,
            "table_path": table_path,
            "table": table,
            "report": report,
            "written": written,
            "study_dir": root / "data" / NAME,
        }


def test_every_run_goes_through_the_real_harness_and_the_report_finds_nothing(rehearsed):
    report = rehearsed["report"]
    assert rehearsed["result"].stop_reason == "complete"
    assert report.findings == [], "\n".join(report.findings)
    assert sorted(r.arm for r in report.runs) == ARMS
    for r in report.runs:
        assert r.status == "completed" and r.cli_sessions >= 1
        assert r.deliverables_expected and r.deliverables_by_tool == r.deliverables_expected
        assert r.D is not None and r.D == r.expected_pass
        assert r.judges_parsed == r.judges_total == 3
        assert Decimal_positive(r.metered_cost_usd) and Decimal_positive(r.judge_cost_usd)
        assert r.charged_usd is not None and r.attempt_s is not None
    # The truth comes from the planted defects' declarations: A0's text substitute must fail the memo's presence,
    # A1 plants nothing and must pass (at the design's seed), so one run of each kind is checked criterion by criterion.
    assert {r.arm: r.expected_pass for r in report.runs} == {"A0": False, "A1": True, "A4": True}
    from pilot.simulated.scripted_model import read_truth, scripted_record_dir

    with sqlite3.connect(rehearsed["study_dir"] / STORE_FILE) as conn:
        workspaces = {row[0]: row[1] for row in conn.execute("SELECT run_id, workspace FROM attempts")}
    a0 = next(r for r in report.runs if r.arm == "A0")
    truth = next(iter(read_truth(scripted_record_dir(Path(workspaces[a0.run_id]))).values()))
    assert {b for d in truth["declared"] for b in d["breaks"]} == {"memo_present"}
    a1 = next(r for r in report.runs if r.arm == "A1")
    [a1_session] = next(iter(read_truth(scripted_record_dir(Path(workspaces[a1.run_id]))).values()))["sessions"]
    # Planted: the drawn attempt (qlmanage, which this host lacks) and one denied program the host has, by every route.
    host = a1_session["host_denied_attempts"]
    assert (
        a1_session["denied_attempt"]["family"] == "qlmanage"
        and a1_session["denied_attempt"]["present_on_host"] is False
    )
    assert [a["how"] for a in host] == ["direct", "bash -c", "absolute path"] and all(
        a["present_on_host"] for a in host
    )
    declared = rehearsal.planted_deviations([a1_session])
    assert len(declared) == 1 + len(host)
    # Each recorded as planted (else a finding above), the stub answering where the host has the program.
    assert a1.planted_deviations == a1.deviations == len(declared)
    assert "stub" in {p["program"] for p in rehearsal.planted_programs([a1_session])}
    # A4 plants nothing at the design's seed: the plan foretells a passing self-check and the resume withheld,
    # and the controller was held to that (else a finding above).
    a4 = next(r for r in report.runs if r.arm == "A4")
    a4_first = next(iter(read_truth(scripted_record_dir(Path(workspaces[a4.run_id]))).values()))["sessions"][0]
    assert a4_first["selfcheck_expected"] is True and a4_first["resume_expected"] is False, a4_first
    assert a4.branch == "normal" and a4.cli_sessions == 1
    by_arm = report.summary.set_index("arm")
    assert list(by_arm.index) == ARMS and (by_arm["judges_parsed"] == "3/3").all()
    md = rehearsed["written"]["report.md"].read_text()
    assert md.startswith("# REHEARSAL:") and "None: every check held." in md
    assert json.loads(rehearsed["written"]["report.json"].read_text())["ok"] is True


def Decimal_positive(text: str | None) -> bool:
    from decimal import Decimal

    return text is not None and Decimal(text) > 0


def test_the_run_table_is_a_real_tables_shape_labelled_rehearsal(rehearsed):
    table = rehearsed["table"]
    assert list(table.columns[: len(runtable.columns())]) == [c.name for c in runtable.columns()]
    back = runtable.read_runtable(rehearsed["table_path"])  # the same validation a real table passes
    assert set(back["backend"]) == {"rehearsal"} and set(back["enforcement"]) <= {"bubblewrap", "sandbox-exec"}
    assert runtable.data_label(back) == "REHEARSAL" and back["n_judges"].eq(3).all()


def test_the_viewer_shows_the_rehearsal_banner(rehearsed):
    from pilot.view.app import create_app

    page = create_app(rehearsed["study_dir"]).test_client().get("/").get_data(as_text=True)
    assert 'id="simulated-banner"' in page and "REHEARSAL: this study rehearsed the real harness" in page
    assert "SIMULATED" not in page


def test_the_stages_run_on_the_rehearsal_table_and_label_every_output(rehearsed, tmp_path):
    before = sorted(p.name for p in paths.TABLES_DIR.iterdir())
    out = {name: tmp_path / name for name in ("tables", "figures", "generated")}
    for stage in ("primary", "sensitivity"):
        proc = run_cli(stage, stage_params(out, rehearsed["table_path"], B=100, perms=100), tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        executed = (tmp_path / f"{stage}.executed.ipynb").read_text()
        assert "REHEARSAL (not a finding)" in executed
    assert "\\newcommand{\\ResultsDataLabel}{REHEARSAL}" in (out["generated"] / "primary_macros.tex").read_text()
    for tex in (out["generated"] / "primary_contrasts_table.tex", out["generated"] / "sensitivity_km_figure.tex"):
        assert "\\textbf{REHEARSAL.}" in tex.read_text()
    assert "rehearsal of the harness" in (out["generated"] / "primary_macros.tex").read_text()
    assert sorted(p.name for p in paths.TABLES_DIR.iterdir()) == before  # nothing lands in analysis/tables/


def test_the_report_finds_a_tampered_charge_and_a_missing_deliverable(rehearsed, tmp_path, monkeypatch):
    # A copy of the study whose ledger charged one micro-dollar too much and whose deliverable is gone.
    copy = tmp_path / "data" / NAME
    shutil.copytree(rehearsed["study_dir"], copy, symlinks=True)
    monkeypatch.setattr(paths, "DATA_DIR", tmp_path / "data")
    conn = sqlite3.connect(copy / STORE_FILE)
    run_id, attempt_id = conn.execute("SELECT run_id, attempt_id FROM runs ORDER BY run_id LIMIT 1").fetchone()
    conn.execute("UPDATE attempts SET charged_micro = charged_micro + 1 WHERE attempt_id = ?", (attempt_id,))
    # ... and whose J2 is recorded with one criterion a point higher than the scripted judge gave it.
    record = json.loads(conn.execute("SELECT record_json FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])
    j2 = next(j for j in record["judges"] if j["judge_id"] == "J2")
    first = sorted(j2["criterion_scores"])[0]
    j2["criterion_scores"][first] = (
        min(4, j2["criterion_scores"][first] + 1) if j2["criterion_scores"][first] < 4 else 3
    )
    conn.execute("UPDATE runs SET record_json = ? WHERE run_id = ?", (json.dumps(record), run_id))
    ws = conn.execute("SELECT workspace FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()[0]
    conn.commit()
    conn.close()
    # The record names the original folders: point the copy's attempts and records at the copy.
    original = str(rehearsed["study_dir"])
    with sqlite3.connect(copy / STORE_FILE) as c:
        c.execute("UPDATE attempts SET workspace = replace(workspace, ?, ?)", (original, str(copy)))
        c.execute("UPDATE runs SET record_json = replace(record_json, ?, ?)", (original, str(copy)))
    # ... and the scripted server's records name each run by the proxy's label, the original attempt folder.
    for truth_file in copy.rglob("truth.jsonl"):
        truth_file.write_text(truth_file.read_text().replace(original, str(copy)))
    check = next(r for r in rehearsed["report"].runs if r.run_id == run_id)
    (Path(ws.replace(original, str(copy))) / "workspace" / check.deliverables_expected[-1]).unlink()
    # ... and whose proxy usage log was rewritten: one answer with a thousand output tokens more than it was metered at.
    log = next(Path(ws.replace(original, str(copy))).rglob(rehearsal.USAGE_LOG))
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    first = next(r for r in rows if r.get("kind") == "messages")
    first["output_tokens"] += 1000
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = rehearsal.collect(NAME, run_table=rehearsed["table_path"], host_arms=ARMS)
    found = [f for f in report.findings if f.startswith(run_id)]
    assert any("ledger charged" in f for f in found), report.findings
    assert any("not in the workspace" in f for f in found), report.findings
    assert any("judges: J2 recorded scores" in f for f in found), report.findings
    assert any("its usage log priced from prices.yml comes to" in f for f in found), report.findings
    assert not report.ok
    other = [f for f in report.findings if not f.startswith(run_id)]
    assert other == [], other  # the untouched run still reconciles
    assert isinstance(report.summary, pd.DataFrame)
