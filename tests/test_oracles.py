"""The deterministic oracles judge gold, defective and hostile workspaces correctly.

LibreOffice is slow to start, so the whole module shares one batch: every
gold workspace, one defective variant per oracle criterion, the hostile
files and the substitutes are laid out first, and all their workbooks are
recalculated by one LibreOffice process before any verdict is read.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
import zipfile

import openpyxl
import pytest
import yaml
from hostile_support import HOSTILE, HOSTILE_TARGET

from pilot import defects, paths
from pilot.cli.main import main as cli_main
from pilot.oracle_formats.evaluate import (
    evaluate,
    evaluate_many,
)  # every caller's entry: the core's verdict where there is no deck
from pilot.oracles import Recalculator, hash_inputs
from pilot.oracles.hashing import compare_hashes
from pilot.oracles.recalc import soffice_binary
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario

pytestmark = pytest.mark.usefixtures("soffice")


@pytest.fixture(scope="session")
def batch(tmp_path_factory):
    """Every workspace this module judges, evaluated in one LibreOffice batch."""
    root = tmp_path_factory.mktemp("oracle-batch")
    recalc = Recalculator(root / "recalc")
    scenarios = {sid: load_scenario(sid) for sid in list_scenarios()}
    gold = {sid: build_gold_workspace(sc, root / sid / "gold") for sid, sc in scenarios.items()}
    # Recalculate every gold workbook once; defects that need values reuse the cache.
    recalc.recalculate([p for sid, ws in gold.items() for p in (ws / "outputs").glob("*.xlsx")])
    items, keys, described = [], [], {}
    for sid, sc in scenarios.items():
        items.append((sc, gold[sid], None))
        keys.append((sid, "gold"))
        for crit in sc.oracle.criteria:
            ws = defects.copy_workspace(gold[sid], root / sid / f"defect-{crit.id}")
            described[(sid, crit.id)] = defects.defect_for_criterion(sc, crit, ws, recalculator=recalc)
            items.append((sc, ws, None))
            keys.append((sid, crit.id))
    sid, name = HOSTILE_TARGET
    for hname, (mutate, _, _) in HOSTILE.items():
        ws = defects.copy_workspace(gold[sid], root / sid / f"hostile-{hname}")
        mutate(ws / "outputs" / name, ws)
        items.append((scenarios[sid], ws, None))
        keys.append((sid, f"hostile:{hname}"))
    # Text substitutes (A0): declared, and one undeclared.
    for tag, declare in (("declared", True), ("undeclared", False)):
        ws = defects.copy_workspace(gold["ACC-01"], root / "ACC-01" / f"substitute-{tag}")
        defects.text_substitute(ws, "bank_reconciliation_2026-10.xlsx", recalculator=recalc)
        defects.text_substitute(ws, "reconciliation_memo.docx", recalculator=recalc)
        if not declare:
            rec = json.loads((ws / "outputs" / "completion_record.json").read_text())
            rec["substitutions"] = []
            (ws / "outputs" / "completion_record.json").write_text(json.dumps(rec))
        items.append((scenarios["ACC-01"], ws, None))
        keys.append(("ACC-01", f"substitute:{tag}"))
    # Deliverables re-saved by LibreOffice itself (cached values present).
    for sid in ("ACC-01", "BANK-01", "MKT-01"):
        ws = defects.copy_workspace(gold[sid], root / sid / "libreoffice-written")
        out = root / sid / "lo-out"
        for p in (ws / "outputs").glob("*.docx"):
            subprocess.run(
                [
                    soffice_binary(),
                    f"-env:UserInstallation={(root / 'lo-profile').as_uri()}",
                    "--headless",
                    "--convert-to",
                    "docx:MS Word 2007 XML",
                    "--outdir",
                    str(out),
                    str(p),
                ],
                check=True,
                capture_output=True,
                timeout=180,
            )
            shutil.copyfile(out / p.name, p)
        for p in (ws / "outputs").glob("*.xlsx"):
            shutil.copyfile(recalc.recalculate([p])[p].path, p)
        items.append((scenarios[sid], ws, None))
        keys.append((sid, "libreoffice-written"))
    processes_before = recalc.processes
    evaluations = evaluate_many(items, recalculator=recalc)
    yield {
        "scenarios": scenarios,
        "gold": gold,
        "results": dict(zip(keys, evaluations, strict=True)),
        "described": described,
        "recalc": recalc,
        "eval_processes": recalc.processes - processes_before,
        "root": root,
    }
    recalc.close()


def _own_failures(ev) -> list[str]:
    return [c.id for c in ev.criteria if not c.passed and c.blocked_by is None]


def _criterion_ids(sid: str) -> list[str]:
    # The ids as oracle.yml lists them, read without validating the bundle: parametrizing should not load every
    # scenario at collection (the batch fixture loads them, validated, when the tests run).
    data = yaml.load((paths.SCENARIOS_DIR / sid / "oracle.yml").read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    return [str(c["id"]) for c in data["criteria"]]


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ALL_CRITERIA = [(sid, cid) for sid in list_scenarios() for cid in _criterion_ids(sid)]


def test_one_libreoffice_process_recalculates_the_whole_batch(batch):
    assert batch["eval_processes"] == 1


@pytest.mark.parametrize("sid", list_scenarios())
def test_gold_passes_every_criterion(batch, sid):
    ev = batch["results"][(sid, "gold")]
    assert [c.id for c in ev.criteria if not c.passed] == []
    assert ev.D and not ev.E and ev.criteria_passed == ev.criteria_total == len(batch["scenarios"][sid].oracle.criteria)


@pytest.mark.parametrize("sid,cid", ALL_CRITERIA, ids=[f"{s}:{c}" for s, c in ALL_CRITERIA])
def test_each_defect_fails_exactly_its_criterion(batch, sid, cid):
    ev = batch["results"][(sid, cid)]
    assert _own_failures(ev) == [cid], f"{batch['described'][(sid, cid)]}: {[(c.id, c.reason) for c in ev.failed]}"
    crit = next(c for c in ev.criteria if c.id == cid)
    assert crit.reason and not crit.reason.startswith("not checked")
    # Anything else that failed was blocked by this very criterion (a missing or broken file).
    assert all(c.blocked_by == cid for c in ev.failed if c.id != cid)
    assert ev.D is (not crit.required and all(c.passed for c in ev.criteria if c.required))
    assert not ev.E


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_file_is_refused_with_a_reason(batch, name):
    _, criterion, words = HOSTILE[name]
    ev = batch["results"][(HOSTILE_TARGET[0], f"hostile:{name}")]
    failed = {c.id: c for c in ev.criteria if not c.passed and c.blocked_by is None}
    assert criterion in failed, [(c.id, c.reason) for c in ev.failed]
    assert words.lower() in failed[criterion].reason.lower()
    assert not ev.D


def test_text_substitutes_are_recognised_and_binary_criteria_fail(batch):
    ev = batch["results"][("ACC-01", "substitute:declared")]
    assert ev.substitutes == {
        "bank_reconciliation_2026-10.xlsx": [
            "bank_reconciliation_2026-10.Adjustments.csv",
            "bank_reconciliation_2026-10.Items.csv",
            "bank_reconciliation_2026-10.Reconciliation.csv",
        ],
        "reconciliation_memo.docx": ["reconciliation_memo.md"],
    }
    by = {c.id: c for c in ev.criteria}
    assert not by["recon_present"].passed and "text substitute" in by["recon_present"].reason
    assert not by["memo_present"].passed and "reconciliation_memo.md" in by["memo_present"].reason
    assert by["recon_formulas"].blocked_by == "recon_present"
    assert by["record_valid"].passed and not ev.D
    undeclared = {c.id: c for c in batch["results"][("ACC-01", "substitute:undeclared")].criteria}
    assert (
        not undeclared["record_valid"].passed
        and "does not declare the substitution" in undeclared["record_valid"].reason
    )


@pytest.mark.parametrize("sid", ["ACC-01", "BANK-01", "MKT-01"])
def test_deliverables_written_by_libreoffice_are_judged_like_openpyxl_ones(batch, sid):
    ev = batch["results"][(sid, "libreoffice-written")]
    assert [(c.id, c.reason) for c in ev.failed] == []
    assert ev.D


def test_openpyxl_workbooks_have_no_cached_values_yet_values_are_checked(batch):
    book = batch["gold"]["ACC-01"] / "outputs" / "bank_reconciliation_2026-10.xlsx"
    cached = openpyxl.load_workbook(book, data_only=True)["Reconciliation"]
    assert cached["B6"].value is None  # a formula with no cached value: reading it raw would fail the check
    by = {c.id: c for c in batch["results"][("ACC-01", "gold")].criteria}
    assert by["recon_adjusted_bank"].passed and "183,153.53" in by["recon_adjusted_bank"].reason


def test_stale_cached_values_are_not_trusted(batch, tmp_path):
    """A workbook whose cached value disagrees with its formula is judged on the recalculated value."""
    sc = batch["scenarios"]["ACC-01"]
    ws = defects.copy_workspace(batch["root"] / "ACC-01" / "libreoffice-written", tmp_path / "ws")
    book = ws / "outputs" / "bank_reconciliation_2026-10.xlsx"
    with zipfile.ZipFile(book) as z:
        parts = {i.filename: z.read(i.filename) for i in z.infolist()}
    sheet = parts["xl/worksheets/sheet1.xml"].decode()
    start = sheet.index('<c r="B12"')
    v0 = sheet.index("<v>", start)
    v1 = sheet.index("</v>", v0)
    parts["xl/worksheets/sheet1.xml"] = (sheet[: v0 + 3] + "999" + sheet[v1:]).encode()
    with zipfile.ZipFile(book, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    assert openpyxl.load_workbook(book, data_only=True)["Reconciliation"]["B12"].value == 999
    ev = evaluate(sc, ws, recalculator=batch["recalc"])
    by = {c.id: c for c in ev.criteria}
    assert by["recon_difference_nil"].passed, by["recon_difference_nil"].reason


def test_error_value_is_named_with_its_cell(batch):
    ev = batch["results"][("RES-01", "results_no_errors")]
    crit = next(c for c in ev.criteria if c.id == "results_no_errors")
    assert "#DIV/0!" in crit.reason and "Summary!A" in crit.reason


def test_input_changes_are_critical_violations_naming_the_file(batch, tmp_path):
    sc = batch["scenarios"]["OPS-01"]
    before = hash_inputs(batch["gold"]["OPS-01"] / "inputs")
    cases = {
        "modified": (lambda ws: defects.modify_input(ws, "suppliers.csv"), "input modified: inputs/suppliers.csv"),
        "deleted": (
            lambda ws: defects.delete_input(ws, "replenishment_policy.txt"),
            "input deleted: inputs/replenishment_policy.txt",
        ),
        "added": (lambda ws: defects.add_input(ws, "notes.txt"), "input added: inputs/notes.txt"),
    }
    for name, (act, reason) in cases.items():
        ws = defects.copy_workspace(batch["gold"]["OPS-01"], tmp_path / name)
        act(ws)
        ev = evaluate(sc, ws, before, recalculator=batch["recalc"])
        assert ev.E and not ev.D and ev.E_reasons == [reason]
        assert all(c.passed for c in ev.criteria)  # the deliverables themselves are fine
    # Without layout hashes the bundle's own inputs are the reference.
    ws = defects.copy_workspace(batch["gold"]["OPS-01"], tmp_path / "default")
    defects.modify_input(ws, "suppliers.csv")
    assert evaluate(sc, ws, recalculator=batch["recalc"]).E_reasons == ["input modified: inputs/suppliers.csv"]


def test_hash_inputs_records_links_and_empty_folders(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    before = hash_inputs(tmp_path)
    (tmp_path / "empty").mkdir()
    os.symlink("a.txt", tmp_path / "link")
    after = hash_inputs(tmp_path)
    assert compare_hashes(before, after) == ["input added: inputs/empty/", "input added: inputs/link (a symbolic link)"]


def test_hung_libreoffice_becomes_a_failed_criterion_not_a_hang(batch, tmp_path):
    fake = tmp_path / "soffice"
    fake.write_text("#!/bin/sh\nsleep 600\n")
    fake.chmod(0o755)
    hung = Recalculator(tmp_path / "r", soffice=str(fake), batch_timeout_s=1, per_file_timeout_s=0, single_timeout_s=1)
    ev = evaluate(batch["scenarios"]["ENG-01"], batch["gold"]["ENG-01"], recalculator=hung)
    by = {c.id: c for c in ev.criteria}
    assert not by["rollup_no_errors"].passed and "did not finish within 1 s" in by["rollup_no_errors"].reason
    assert not by["rollup_total"].passed and by["rollup_formulas"].passed
    # Stopped, not hung: a LibreOffice that never answers costs its timeouts, far from the ten minutes it would take.
    assert not ev.D and ev.seconds < 120


def test_missing_libreoffice_fails_value_criteria_with_a_reason(batch, tmp_path):
    none = Recalculator(tmp_path / "r", soffice=str(tmp_path / "no-such-soffice"))
    ev = evaluate(batch["scenarios"]["HR-01"], batch["gold"]["HR-01"], recalculator=none)
    by = {c.id: c for c in ev.criteria}
    assert not by["book_total_cost"].passed and "recalculation failed" in by["book_total_cost"].reason


def test_pilot_check_cli_prints_verdict_and_json(batch, capsys):
    ws = batch["results"][("OPS-01", "plan_skus")].workspace
    assert cli_main(["check", "OPS-01", ws]) == 1
    out = capsys.readouterr().out
    assert "FAIL  plan_skus" in out and "D=0 E=0" in out
    assert cli_main(["check", "OPS-01", str(batch["gold"]["OPS-01"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["D"] is True and data["criteria_passed"] == data["criteria_total"] == 9


def test_guard_stops_a_parse_that_exceeds_its_time(batch, tmp_path):
    ws = defects.copy_workspace(batch["gold"]["LEGAL-01"], tmp_path / "ws")
    memo = ws / "outputs" / "msa_review_memo.docx"
    # New bytes (not in the guard's cache) and a body long enough that its parse outlasts the limit on any
    # machine: a small memo can be read before the guard's first look at the clock, so it would pass in time.
    from docx import Document

    doc = Document(str(memo))
    for i in range(20000):
        doc.add_paragraph(f"Padding paragraph {i} that the reader has to parse before it can answer.")
    doc.save(str(memo))
    ev = evaluate(
        batch["scenarios"]["LEGAL-01"], ws, recalculator=batch["recalc"], guard_limits={"per_file_timeout_s": 0.001}
    )
    by = {c.id: c for c in ev.criteria}
    assert not by["memo_well_formed"].passed and "could not be read within" in by["memo_well_formed"].reason
    assert by["memo_length"].blocked_by == "memo_well_formed" and by["log_well_formed"].passed


def test_guard_stops_a_parse_that_exceeds_its_memory(tmp_path):
    from pilot.oracles.guard import probe_files

    # 60,000 distinct 4 kB strings (about 240 MB once read): harmless in the default
    # limit, fatal under 300 MB of address space, while a tiny workbook reads fine under
    # the same 300 MB (measured: it still reads under 200 MB), so the limit itself is
    # not what fails the large one.
    limit = 300 * 1024**2
    wb = openpyxl.Workbook()
    pad = "x" * 4000
    for r in range(1, 3001):
        wb.active.append([f"text {r}-{c} {pad}" for c in range(20)])
    book = tmp_path / "big.xlsx"
    wb.save(book)
    tiny = tmp_path / "tiny.xlsx"
    small = openpyxl.Workbook()
    small.active.append(["a", 1])
    small.save(tiny)
    assert probe_files([book])[book] is None
    assert probe_files([tiny], memory_limit_bytes=limit)[tiny] is None
    reason = probe_files([book], memory_limit_bytes=limit)[book]
    assert reason and "memory" in reason


def test_guard_charges_a_failure_to_the_right_file_and_continues(tmp_path):
    from pilot.oracles.guard import probe_files

    good = tmp_path / "good.xlsx"
    openpyxl.Workbook().save(good)
    bad = tmp_path / "bad.docx"
    bad.write_bytes(b"PK\x03\x04 not really")
    res = probe_files([good, bad, good])
    assert res[good] is None and "cannot be read" in res[bad]


def _busy_machine():
    """A stand-in for the child's CPU clock that jumps past any limit between two readings."""
    ticks = itertools.count()
    return lambda pid: next(ticks) * 1e9


def test_a_timeout_is_not_remembered_as_a_property_of_the_bytes(tmp_path, monkeypatch):
    # A busy machine (every reading of the child's CPU time past any limit) refuses a sound file
    # once; the next evaluation of the same bytes under the same limits reads it afresh.
    from pilot.oracles import guard

    book = tmp_path / "sound.xlsx"
    wb = openpyxl.Workbook()
    wb.active.append(["fresh bytes", str(tmp_path)])
    wb.save(book)
    real = guard._cpu_seconds
    monkeypatch.setattr(guard, "_cpu_seconds", _busy_machine())
    assert "could not be read within" in guard.probe_cached([book])[book]
    monkeypatch.setattr(guard, "_cpu_seconds", real)
    assert guard.probe_cached([book])[book] is None
    # A verdict that is a property of the bytes is remembered: no child is started for it again.
    monkeypatch.setattr(guard, "probe_files", lambda *a, **k: pytest.fail("a remembered verdict was probed again"))
    assert guard.probe_cached([book])[book] is None


def test_a_timeout_holds_within_one_evaluation_only(tmp_path, monkeypatch):
    from pilot.oracles import guard

    book = tmp_path / "once.xlsx"
    wb = openpyxl.Workbook()
    wb.active.append(["other fresh bytes", str(tmp_path)])
    wb.save(book)
    calls = []
    real = guard.probe_files

    def counted(paths, **kw):
        calls.append(list(paths))
        return real(paths, **kw)

    monkeypatch.setattr(guard, "probe_files", counted)
    monkeypatch.setattr(guard, "_cpu_seconds", _busy_machine())
    with guard.holding():
        first = guard.probe_cached([book])[book]
        assert guard.probe_cached([book])[book] == first and "could not be read within" in first
    assert len(calls) == 1  # every check of one evaluation sees the same verdict from one child
    guard.probe_cached([book])
    assert len(calls) == 2  # and the next evaluation asks again


def test_the_guard_limit_is_charged_on_cpu_time_and_a_waiting_child_is_still_stopped(tmp_path, monkeypatch):
    # Stand-in children (plain Python, no office library): one waits 2 s per file without computing,
    # as a child starved by a busy machine does; one waits for ever.
    from pilot.oracles import guard

    waits = tmp_path / "waits.py"
    waits.write_text(
        "import json, sys, time\nfor i, _ in enumerate(sys.stdin):\n    time.sleep(1.5)\n    "
        "print(json.dumps({'i': i, 'ok': True}), flush=True)\n"
    )
    hangs = tmp_path / "hangs.py"
    hangs.write_text("import time\ntime.sleep(600)\n")
    files = [tmp_path / "a.xlsx", tmp_path / "b.xlsx"]
    monkeypatch.setattr(guard, "PROBE", waits)
    # 2 s of wall clock per file is twice the 1 s limit, but almost no CPU time: read (the wall-clock
    # backstop, 10 s here, leaves the interpreter's start on a busy machine a wide margin).
    assert guard.probe_files(files, per_file_timeout_s=1.0) == {f: None for f in files}
    monkeypatch.setattr(guard, "PROBE", hangs)
    t0 = time.monotonic()
    res = guard.probe_files(files[:1], per_file_timeout_s=0.5)
    assert "could not be read within 0.5 s" in res[files[0]]
    assert time.monotonic() - t0 < 0.5 * guard.WALL_FACTOR + 60  # stopped by the wall-clock limit, not left to hang
