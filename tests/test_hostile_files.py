"""A hostile-file corpus through all three readers: the oracle, the judge renderer and the A4 self-check.

Each hostile file takes the place of a deliverable. The oracle must fail the
deliverable with a reason, the renderer must show the judges "refused:
reason" (never the file's contents or its link's target), the self-check
must fail it, and none of them may hang, exhaust memory or read outside the
workspace. A hostile tree under ``inputs/`` is a critical violation, and
``pilot check`` reports it with its own exit status and JSON.
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from pilot import defects
from pilot.cli.check import EXIT_CRITICAL, EXIT_EVALUATION_ERROR, EXIT_FAILED
from pilot.cli.main import main as cli_main
from pilot.judges.render import render_deliverable
from pilot.oracles import Recalculator, evaluate, run_selfcheck
from pilot.scenarios import build_gold_workspace, load_scenario

pytestmark = pytest.mark.usefixtures("soffice")

BOOK = "bank_reconciliation_2026-10.xlsx"
MEMO = "reconciliation_memo.docx"
LOG = "issues_log.csv"


def _zip(parts: dict[str, bytes | str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return buf.getvalue()


def zip_bomb(p: Path, ws: Path) -> None:
    p.write_bytes(
        _zip(
            {
                "[Content_Types].xml": "<Types/>",
                "xl/workbook.xml": "<workbook/>",
                "xl/worksheets/sheet1.xml": b"\0" * (200 * 1024 * 1024),
            }
        )
    )


def many_small_bombs(p: Path, ws: Path) -> None:
    # Each entry below the per-entry ratio check, together far above the expansion budget.
    parts = {"[Content_Types].xml": "<Types/>", "word/document.xml": "<w:document/>"}
    parts.update({f"word/media/pad{i}.bin": b"\0" * (900 * 1024) for i in range(60)})
    p.write_bytes(_zip(parts))


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 if i > 1 else "")) * 10}">' for i in range(1, 10))
    + ']><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>'
)


def billion_laughs(p: Path, ws: Path) -> None:
    src = zipfile.ZipFile(p)
    parts = {i.filename: src.read(i) for i in src.infolist()}
    parts["word/document.xml"] = BILLION_LAUGHS
    p.write_bytes(_zip(parts))


def sparse_200mb(p: Path, ws: Path) -> None:
    p.unlink()
    with open(p, "wb") as fh:
        fh.truncate(200 * 1024 * 1024)


def encrypted(p: Path, ws: Path) -> None:
    p.write_bytes(bytes.fromhex("d0cf11e0a1b11ae1") + b"\0" * 8000)


def macro(p: Path, ws: Path) -> None:
    src = zipfile.ZipFile(p)
    parts = {i.filename: src.read(i) for i in src.infolist()}
    parts["xl/vbaProject.bin"] = b"\x00Attribute VB_Name"
    p.write_bytes(_zip(parts))


def link_to_passwd(p: Path, ws: Path) -> None:
    p.unlink()
    os.symlink("/etc/passwd", p)


def link_to_another_run(p: Path, ws: Path) -> None:
    # Another run's good deliverable, outside this workspace.
    other = ws.parent / "another-run" / "outputs"
    other.mkdir(parents=True, exist_ok=True)
    os.replace(p, other / p.name)
    os.symlink(other / p.name, p)


def fifo(p: Path, ws: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def folder(p: Path, ws: Path) -> None:
    p.unlink()
    (p / "inner").mkdir(parents=True)


# name -> (scenario, deliverable, mutation, oracle criterion that fails, words in the shared reason)
HOSTILE = {
    "zip_bomb": ("ACC-01", BOOK, zip_bomb, "recon_well_formed", "zip bomb"),
    "many_small_entries": ("ACC-01", MEMO, many_small_bombs, "memo_well_formed", "expands to"),
    "billion_laughs": ("ACC-01", MEMO, billion_laughs, "memo_well_formed", "cannot be read"),
    "file_of_200_mb": ("ACC-01", BOOK, sparse_200mb, "recon_present", "200.0 MB"),
    "encrypted": ("ACC-01", BOOK, encrypted, "recon_well_formed", "encrypted"),
    "macro": ("ACC-01", BOOK, macro, "recon_well_formed", "macro"),
    "symlink_to_passwd": ("LEGAL-01", LOG, link_to_passwd, "log_present", "outside the workspace"),
    "symlink_to_another_run": ("LEGAL-01", LOG, link_to_another_run, "log_present", "outside the workspace"),
    "fifo": ("LEGAL-01", LOG, fifo, "log_present", "not a regular file"),
    "folder_in_place_of_file": ("ACC-01", MEMO, folder, "memo_present", "is a folder"),
}


@pytest.fixture(scope="module")
def recalc(tmp_path_factory):
    with Recalculator(tmp_path_factory.mktemp("hostile-recalc")) as r:
        yield r


@pytest.fixture(scope="module")
def golds(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-gold")
    return {sid: build_gold_workspace(sid, root / sid) for sid in ("ACC-01", "LEGAL-01")}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_deliverable_is_refused_alike_by_all_three_readers(golds, recalc, tmp_path, name):
    sid, file, mutate, cid, words = HOSTILE[name]
    ws = defects.copy_workspace(golds[sid], tmp_path / "ws")
    mutate(ws / "outputs" / file, ws)
    sc = load_scenario(sid)

    t0 = time.monotonic()
    ev = evaluate(sc, ws, recalculator=recalc)
    by = {c.id: c for c in ev.criteria}
    assert not by[cid].passed and words in by[cid].reason, by[cid].reason
    assert not ev.D and not ev.E and ev.outcome == "failed" and ev.errors == []

    shown = render_deliverable(file, ws / "outputs")
    assert shown.status == "unreadable" and "(refused: " in shown.text, shown.text
    assert words in shown.text, shown.text
    assert "root:" not in shown.text and "/etc/passwd" not in shown.text and str(ws.parent) not in shown.text
    assert len(shown.text) < 2000

    report = run_selfcheck(ws, sc, recalculator=recalc)
    assert not report.passed, report.text
    assert any(line.startswith("FAIL") and file in line for line in report.lines), report.text
    assert "root:" not in report.text
    assert time.monotonic() - t0 < 120


def test_judges_never_see_a_linked_record_or_substitute(golds, tmp_path):
    """The completion record and text substitutes pass the same gates as the requested files."""
    ws = defects.copy_workspace(golds["LEGAL-01"], tmp_path / "ws")
    rec = ws / "outputs" / "completion_record.json"
    outside = tmp_path / "elsewhere.json"
    outside.write_text(rec.read_text())
    rec.unlink()
    os.symlink(outside, rec)
    (ws / "outputs" / LOG).unlink()
    os.symlink("/etc/passwd", ws / "outputs" / "issues_log.md")  # a "substitute" that is a link out
    shown = render_deliverable("completion_record.json", ws / "outputs")
    assert shown.status == "unreadable" and "refused:" in shown.text and "status:" not in shown.text
    sub = render_deliverable(LOG, ws / "outputs")
    assert "root:" not in sub.text and "refused:" in sub.text


def test_odd_names_and_deep_trees_in_outputs_are_harmless(golds, recalc, tmp_path):
    ws = defects.copy_workspace(golds["LEGAL-01"], tmp_path / "ws")
    out = ws / "outputs"
    for odd in ("\u202eevil.txt", "line\nbreak.csv", "x" * 240 + ".md", "-rf", " leading space.txt"):
        (out / odd).write_text("noise\n")
    deep = out / "deep"
    for _ in range(300):
        deep = deep / "d"
    os.makedirs(deep)
    sc = load_scenario("LEGAL-01")
    ev = evaluate(sc, ws, recalculator=recalc)
    try:
        assert ev.D and ev.outcome == "accepted", [(c.id, c.reason) for c in ev.failed]
        report = run_selfcheck(ws, sc, recalculator=recalc)
        assert report.passed, report.text
        assert render_deliverable(LOG, out).status == "delivered"
    finally:
        _remove_tree(ws / "outputs" / "deep")


def _deep_inputs(ws: Path) -> None:
    # Deeper than the interpreter's recursion limit when walked recursively.
    rel = "/".join(["d"] * 1100)
    fd = os.open(ws / "inputs", os.O_RDONLY)
    try:
        for part in rel.split("/"):
            os.mkdir(part, dir_fd=fd)
            nfd = os.open(part, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)


def _remove_tree(top: Path) -> None:
    """Remove a tree bottom-up without recursion: shutil.rmtree (and pytest's clean-up of old
    temporary folders, shared by every session on the machine) recurses once per level."""
    order, stack = [], [str(top)]
    while stack:
        d = stack.pop()
        order.append(d)
        with os.scandir(d) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                else:
                    os.unlink(e.path)
    for d in reversed(order):
        os.rmdir(d)


def _fifo_input(ws: Path) -> None:
    os.mkfifo(ws / "inputs" / "pipe")


@pytest.mark.parametrize(
    "make, words",
    [
        (_deep_inputs, "deeper than 64 levels"),
        (_fifo_input, "a pipe, socket or device"),
    ],
)
def test_hostile_tree_under_inputs_is_a_critical_violation_with_json(golds, recalc, tmp_path, capsys, make, words):
    ws = defects.copy_workspace(golds["LEGAL-01"], tmp_path / "ws")
    try:
        make(ws)
        ev = evaluate(load_scenario("LEGAL-01"), ws, recalculator=recalc)
        assert ev.E and ev.outcome == "critical_violation" and any(words in r for r in ev.E_reasons), ev.E_reasons
        assert cli_main(["check", "LEGAL-01", str(ws), "--json"]) == EXIT_CRITICAL
        data = json.loads(capsys.readouterr().out)
        assert data["outcome"] == "critical_violation" and data["E"] is True and data["errors"] == []
    finally:
        _remove_tree(ws)  # a tree deeper than the recursion limit must not outlive the test


def test_an_input_that_cannot_be_read_is_a_change_not_a_crash(golds, tmp_path, monkeypatch):
    # The tests run as root, for whom permissions do not stop a read: the failure is injected.
    from pilot.oracles import hashing

    ws = defects.copy_workspace(golds["LEGAL-01"], tmp_path / "ws")
    before = hashing.hash_inputs(ws / "inputs")
    victim = sorted(before)[0]
    real = hashing.file_digest_of

    def refuse(entry):
        if entry.name == Path(victim).name:
            raise PermissionError(13, "Permission denied")
        return real(entry)

    monkeypatch.setattr(hashing, "file_digest_of", refuse)
    reasons = hashing.compare_hashes(before, hashing.hash_inputs(ws / "inputs"))
    assert reasons == [f"input modified: inputs/{victim} (cannot be read: Permission denied)"]


def test_pilot_check_exit_statuses_and_json_for_every_outcome(golds, tmp_path, capsys):
    ws = defects.copy_workspace(golds["LEGAL-01"], tmp_path / "ws")
    defects.set_csv_cell(ws, LOG, "clause", "9.4", "risk_rating", "Low")
    assert cli_main(["check", "LEGAL-01", str(ws), "--json"]) == EXIT_FAILED
    assert json.loads(capsys.readouterr().out)["outcome"] == "failed"
    assert cli_main(["check", "NOPE-99", str(ws), "--json"]) == EXIT_EVALUATION_ERROR
    data = json.loads(capsys.readouterr().out)
    assert data["outcome"] == "evaluation_error" and data["D"] is None and "NOPE-99" in data["errors"][0]
    assert cli_main(["check", "LEGAL-01", str(tmp_path / "absent"), "--json"]) == EXIT_EVALUATION_ERROR
    assert json.loads(capsys.readouterr().out)["outcome"] == "evaluation_error"
    bad = tmp_path / "hashes.json"
    bad.write_text("[1, 2]")
    assert cli_main(["check", "LEGAL-01", str(ws), "--input-hashes", str(bad)]) == EXIT_EVALUATION_ERROR
    assert "input hashes must be a JSON object" in capsys.readouterr().out


def test_missing_libreoffice_is_an_evaluation_error_not_a_failed_deliverable(golds, tmp_path):
    none = Recalculator(tmp_path / "r", soffice=str(tmp_path / "no-such-soffice"))
    ws = build_gold_workspace("ACC-01", tmp_path / "acc")
    ev = evaluate(load_scenario("ACC-01"), ws, recalculator=none)
    assert ev.outcome == "evaluation_error" and not ev.D
    assert any("LibreOffice could not recalculate" in e for e in ev.errors), ev.errors
