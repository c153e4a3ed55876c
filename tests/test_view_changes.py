"""What an E = 1 run changed: digests, a text diff, changed CSV and workbook cells, changed Word paragraphs.

Each case lays a scenario's inputs out as the harness does (``pilot.workspace.lay_out``),
edits them the way a worker could (the edit written here is the truth), and
takes the harness's manifest after the run (``pilot.runner.workspace_manifest``);
the digests are checked with ``hashlib`` on the files themselves.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import openpyxl
import pytest
from docx import Document

from pilot import protocol
from pilot.runner import WORKSPACE_MANIFEST, workspace_manifest
from pilot.scenarios import load_scenario
from pilot.view.changes import input_changes
from pilot.workspace import lay_out


def _attempt(tmp_path: Path, sid: str) -> tuple[Path, dict, Path]:
    """An attempt folder with the scenario's inputs laid out, its record's input hashes and the bundle's inputs."""
    sc = load_scenario(sid)
    folder = tmp_path / "attempt-1"
    ws = lay_out(sc, protocol.arms()["A1"], folder / "workspace")
    return folder, {"E": True, "input_hashes": dict(ws.input_hashes)}, Path(sc.inputs_dir)


def _after_run(folder: Path) -> None:
    (folder / WORKSPACE_MANIFEST).write_text(json.dumps(workspace_manifest(folder / "workspace")), encoding="utf-8")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_changed_csv_shows_both_digests_a_diff_and_the_cell(tmp_path):
    folder, rec, bundle = _attempt(tmp_path, "ACC-01")
    path = folder / "workspace" / "inputs" / "bank_statement_2026-10.csv"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    row = lines[3].rstrip("\n").split(",")
    before = row[-1]
    row[-1] = "999999.99"
    lines[3] = ",".join(row) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    _after_run(folder)
    [ch] = input_changes(rec, folder, bundle)
    assert (ch.name, ch.change, ch.kind) == ("bank_statement_2026-10.csv", "modified", "table")
    assert ch.expected_digest == _sha(bundle / ch.name) and ch.actual_digest == _sha(path)
    assert f"-{','.join(lines[3].split(',')[:-1])},{before}" in ch.diff
    assert f"+{lines[3].rstrip()}" in ch.diff
    [cell] = ch.cells
    assert (cell.where, cell.before, cell.after) == (f"row 4, {header[-1]}", before, "999999.99")


def test_a_changed_workbook_shows_the_changed_cell_and_a_deleted_input_its_digest(tmp_path):
    folder, rec, bundle = _attempt(tmp_path, "ACC-01")
    ledger = folder / "workspace" / "inputs" / "cash_ledger_2026-10.xlsx"
    wb = openpyxl.load_workbook(ledger)
    ws = wb.worksheets[0]
    before = ws["B5"].value
    ws["B5"] = "typed over"
    wb.save(ledger)
    (folder / "workspace" / "inputs" / "reconciliation_2026-09_summary.txt").unlink()
    _after_run(folder)
    changes = {c.name: c for c in input_changes(rec, folder, bundle)}
    assert set(changes) == {"cash_ledger_2026-10.xlsx", "reconciliation_2026-09_summary.txt"}
    book = changes["cash_ledger_2026-10.xlsx"]
    assert book.kind == "workbook" and book.actual_digest == _sha(ledger)
    assert [(c.where, c.before, c.after) for c in book.cells] == [
        (f"{ws.title}!B5", None if before is None else str(before), "typed over")
    ]
    gone = changes["reconciliation_2026-09_summary.txt"]
    assert gone.change == "deleted" and gone.actual_digest is None
    assert gone.expected_digest == _sha(bundle / "reconciliation_2026-09_summary.txt")


def test_a_changed_word_document_shows_the_changed_paragraph(tmp_path):
    sc = load_scenario("CRE-01")
    docs = sorted(p.name for p in Path(sc.inputs_dir).iterdir() if p.suffix == ".docx")
    if not docs:
        pytest.fail("CRE-01 has no Word input any more: pick a scenario that has one")
    folder, rec, bundle = _attempt(tmp_path, "CRE-01")
    path = folder / "workspace" / "inputs" / docs[0]
    doc = Document(str(path))
    k, para = next((i, p) for i, p in enumerate(doc.paragraphs) if p.text.strip())
    before = para.text
    for run in para.runs[1:]:
        run.text = ""
    para.runs[0].text = "A sentence the worker wrote over the original."
    doc.save(str(path))
    _after_run(folder)
    [ch] = input_changes(rec, folder, bundle)
    assert ch.kind == "document" and ch.actual_digest == _sha(path)
    assert [(c.before, c.after) for c in ch.cells] == [(before, "A sentence the worker wrote over the original.")]


def test_an_added_input_and_a_link_are_reported_without_following_the_link(tmp_path):
    folder, rec, bundle = _attempt(tmp_path, "ACC-01")
    inputs = folder / "workspace" / "inputs"
    (inputs / "scratch_notes.txt").write_text("working notes\n", encoding="utf-8")
    secret = tmp_path / "outside.txt"
    secret.write_text("not for the viewer\n", encoding="utf-8")
    os.symlink(secret, inputs / "link.txt")
    _after_run(folder)
    changes = {c.name: c for c in input_changes(rec, folder, bundle)}
    added = changes["scratch_notes.txt"]
    assert added.change == "added" and added.expected_digest is None and "+working notes" in added.diff
    link = changes["link.txt"]
    assert link.change == "added" and link.actual_digest.startswith("symlink:")
    assert not link.diff and "not for the viewer" not in json.dumps(link.__dict__, default=str)


def test_bytes_appended_to_a_workbook_change_no_cell_and_say_so(tmp_path):
    from pilot import defects

    folder, rec, bundle = _attempt(tmp_path, "ACC-01")
    # The simulated agent's input edit: one newline appended to the file (a workbook still opens).
    defects.modify_input(folder / "workspace", "cash_ledger_2026-10.xlsx")
    _after_run(folder)
    [ch] = input_changes(rec, folder, bundle)
    assert ch.kind == "workbook" and ch.cells == []
    size = (bundle / "cash_ledger_2026-10.xlsx").stat().st_size
    assert (
        ch.note
        == f"no cell differs: 1 byte(s) added at the end ({size} bytes laid out, {size + 1} bytes after the run)"
    )
