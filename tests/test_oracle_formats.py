"""Slide decks (.pptx) as deliverables: the deck reader, the dispatcher, the self-check, the render and the manifest.

Every deck here is built by hand with python-pptx with known content, and every
expected value is that content, not what the code under test reports.
"""

from __future__ import annotations

import importlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from docx import Document
from pptx import Presentation
from pptx.util import Inches

from pilot import freeze
from pilot.oracle_formats import evaluate as dispatch
from pilot.oracle_formats.pptx_reader import parse, read_deck
from pilot.oracle_formats.selfcheck import run_selfcheck
from pilot.protocol import design
from pilot.protocol.scenario import load_scenario, load_scenario_from

core = importlib.import_module("pilot.oracles.evaluate")


def build_deck(
    path: Path,
    *,
    breaching: str = "Billing and Technical breached the SLA target this month. "
    "Onboarding and Accounts met the SLA target.",
    table: bool = True,
    notes: str = "Say the P1 rule",
) -> Path:
    """Three slides: a title slide, an SLA table by team, the breaching teams."""
    prs = Presentation()
    s1 = prs.slides.add_slide(prs.slide_layouts[0])
    s1.shapes.title.text = "Support review, October"
    s1.placeholders[1].text = "For the head of support"
    s2 = prs.slides.add_slide(prs.slide_layouts[5])
    s2.shapes.title.text = "SLA attainment by team"
    if table:
        rows = [
            ["Team", "Attainment"],
            ["Billing", "88.0%"],
            ["Onboarding", "95.5%"],
            ["Technical", "90.1%"],
            ["Accounts", "97.0%"],
        ]
        shape = s2.shapes.add_table(len(rows), 2, Inches(1), Inches(1.5), Inches(6), Inches(3))
        for i, r in enumerate(rows):
            for j, v in enumerate(r):
                shape.table.cell(i, j).text = v
    s3 = prs.slides.add_slide(prs.slide_layouts[1])
    s3.shapes.title.text = "Teams in breach"
    body = s3.placeholders[1].text_frame
    body.text = breaching
    body.add_paragraph().text = "Tickets awaiting customer were paused on the SLA clock."
    s3.notes_slide.notes_text_frame.text = notes
    path.parent.mkdir(parents=True, exist_ok=True)
    prs.save(str(path))
    return path


# ------------------------------------------------------------------ the reader


def test_reader_reads_titles_lines_tables_and_notes(tmp_path):
    deck = parse(build_deck(tmp_path / "outputs" / "d.pptx"))
    assert [s.title for s in deck.slides] == ["Support review, October", "SLA attainment by team", "Teams in breach"]
    assert deck.slides[0].lines == ["For the head of support"]
    assert deck.slides[1].tables == [
        [
            ["Team", "Attainment"],
            ["Billing", "88.0%"],
            ["Onboarding", "95.5%"],
            ["Technical", "90.1%"],
            ["Accounts", "97.0%"],
        ]
    ]
    assert "Billing | 88.0%" in deck.slides[1].lines
    assert deck.slides[2].notes == ["Say the P1 rule"]
    # Notes are not on the slides: the document view leaves them out; titles are its headings.
    lines = deck.lines()
    assert "Say the P1 rule" not in lines
    assert lines[:3] == ["Support review, October", "For the head of support", "SLA attainment by team"]


def test_reader_reads_text_inside_a_group(tmp_path):
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "Grouped"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(2), Inches(4), Inches(1)).text_frame.text = "Inside the group"
    prs.save(str(tmp_path / "g.pptx"))
    deck = parse(tmp_path / "g.pptx")
    assert [(s.title, s.lines) for s in deck.slides] == [("Grouped", ["Inside the group"])]


def _macro_deck(src: Path, dst: Path) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, zin.read(item.filename))
        zout.writestr("ppt/vbaProject.bin", b"\x00" * 64)
    return dst


def test_reader_refuses_hostile_or_wrong_files(tmp_path):
    ws = tmp_path / "ws"
    good = build_deck(ws / "outputs" / "good.pptx")
    macro = _macro_deck(good, ws / "outputs" / "macro.pptx")
    doc = ws / "outputs" / "memo.pptx"
    d = Document()
    d.add_paragraph("not a deck")
    d.save(str(doc))
    text = ws / "outputs" / "plain.pptx"
    text.write_text("slide one\n", encoding="utf-8")
    outside = tmp_path / "elsewhere.pptx"
    shutil.copy(good, outside)
    link = ws / "outputs" / "link.pptx"
    link.symlink_to(outside)

    assert read_deck(good, ws)[1] is None
    assert "VBA macros" in read_deck(macro, ws)[1]
    assert "is a Word document" in read_deck(doc, ws)[1]
    assert "not a zip archive" in read_deck(text, ws)[1]
    assert "outside the workspace" in read_deck(link, ws)[1]
    assert read_deck(ws / "outputs" / "absent.pptx", ws)[1] == "absent.pptx not found"


# ------------------------------------------------------------------ a deck scenario

ORACLE = """
criteria:
  - {id: deck_present, kind: present, required: true, file: review.pptx}
  - {id: deck_well_formed, kind: well_formed, required: true, file: review.pptx}
  - {id: deck_sections, kind: sections, required: true, file: review.pptx}
  - {id: deck_names_rule, kind: text_contains, required: true, file: review.pptx, patterns: ['awaiting customer']}
  - {id: deck_states_billing, kind: text_number, required: true, file: review.pptx, expected: 88.0, tolerance: 0.05,
     near: Billing}
  - id: deck_breaching_teams
    kind: decision
    required: true
    file: review.pptx
    section: Teams in breach
    expected: [Billing, Technical]
    options: {Billing: 'Billing', Onboarding: 'Onboarding', Technical: 'Technical', Accounts: 'Accounts'}
    state_all: true
    topic: 'SLA|target|breach\\w*'
    property_verbs: 'breach\\w*|missed|below'
    complement_verbs: 'met|achieved|above'
    property: "breached the SLA target"
    complement: "met the SLA target"
  - {id: notes_present, kind: present, required: true, file: notes.csv}
  - {id: notes_well_formed, kind: well_formed, required: true, file: notes.csv}
  - {id: record_present, kind: present, required: true, file: completion_record.json}
  - {id: record_valid, kind: completion_record, required: true, file: completion_record.json}
"""


@pytest.fixture()
def deck_bundle(tmp_path) -> Path:
    ops = load_scenario("OPS-01")
    b = tmp_path / "bundles" / "TST-01"
    shutil.copytree(ops.inputs_dir, b / "inputs")
    (b / "scenario.yml").write_text(
        f"""id: TST-01
title: A deck fixture
occupation: testing
designed_depth: 1
professional_minutes: 10
caps: {{usd: {ops.caps.usd}, wall_s: {ops.caps.wall_s}}}
uses_portal: false
arm_features: [python_env, text_substitutes, self_check]
generator: ops_01
deliverables:
  - {{name: review.pptx, kind: pptx, required_sections: [SLA attainment by team, Teams in breach]}}
  - {{name: notes.csv, kind: csv}}
  - {{name: completion_record.json, kind: completion_record}}
""",
        encoding="utf-8",
    )
    (b / "brief.md").write_text("Deliver review.pptx, notes.csv and completion_record.json.\n", encoding="utf-8")
    (b / "oracle.yml").write_text(ORACLE, encoding="utf-8")
    shutil.copy(ops.rubric.path, b / "rubric.yml")
    return b


def _workspace(bundle: Path, root: Path, deck: bool = True, **deck_kw) -> Path:
    ws = root / "ws"
    shutil.copytree(bundle / "inputs", ws / "inputs")
    out = ws / "outputs"
    out.mkdir(parents=True)
    if deck:
        build_deck(out / "review.pptx", **deck_kw)
    (out / "notes.csv").write_text("team,note\nBilling,late\n", encoding="utf-8")
    record = {
        "status": "completed",
        "deliverables": ["review.pptx", "notes.csv"],
        "substitutions": [],
        "questions": [],
        "notes": "",
    }
    (out / "completion_record.json").write_text(json.dumps(record), encoding="utf-8")
    return ws


def _verdicts(ev) -> dict[str, bool]:
    return {c.id: c.passed for c in ev.criteria}


def test_deck_scenario_gold_is_accepted(deck_bundle, tmp_path):
    sc = load_scenario_from(deck_bundle)
    ev = dispatch.evaluate(sc, _workspace(deck_bundle, tmp_path))
    assert isinstance(ev, core.Evaluation)
    assert not ev.errors and not ev.E
    assert all(_verdicts(ev).values()), [c.reason for c in ev.failed]
    assert ev.D


def test_deck_scenario_wrong_set_fails_only_the_decision(deck_bundle, tmp_path):
    sc = load_scenario_from(deck_bundle)
    # Accounts said to breach as well: a set with one team too many.
    ws = _workspace(
        deck_bundle,
        tmp_path,
        breaching="Billing, Technical and Accounts breached the SLA target. Onboarding met the SLA target.",
    )
    ev = dispatch.evaluate(sc, ws)
    assert [c.id for c in ev.failed] == ["deck_breaching_teams"]
    assert not ev.D


def test_deck_without_table_fails_the_number(deck_bundle, tmp_path):
    sc = load_scenario_from(deck_bundle)
    ev = dispatch.evaluate(sc, _workspace(deck_bundle, tmp_path, table=False))
    assert [c.id for c in ev.failed] == ["deck_states_billing"]


def test_text_substitute_fails_only_the_deck_presence(deck_bundle, tmp_path):
    sc = load_scenario_from(deck_bundle)
    ws = _workspace(deck_bundle, tmp_path, deck=False)
    (ws / "outputs" / "review.md").write_text("# Teams in breach\nBilling and Technical breached.\n", encoding="utf-8")
    record = json.loads((ws / "outputs" / "completion_record.json").read_text())
    record["deliverables"] = ["review.md", "notes.csv"]
    record["substitutions"] = [{"requested": "review.pptx", "delivered": "review.md", "reason": "no deck program"}]
    (ws / "outputs" / "completion_record.json").write_text(json.dumps(record), encoding="utf-8")
    ev = dispatch.evaluate(sc, ws)
    failed = {c.id: c.blocked_by for c in ev.failed}
    deck_ids = {
        "deck_present",
        "deck_well_formed",
        "deck_sections",
        "deck_names_rule",
        "deck_states_billing",
        "deck_breaching_teams",
    }
    assert set(failed) == deck_ids
    assert [k for k, v in failed.items() if v is None] == ["deck_present"]
    assert ev.substitutes == {"review.pptx": ["review.md"]}


@pytest.mark.usefixtures("bwrap")  # run_selfcheck runs the tool confined
def test_selfcheck_agrees_with_the_oracle_form_verdict(deck_bundle, tmp_path):
    sc = load_scenario_from(deck_bundle)
    ws = _workspace(deck_bundle, tmp_path)
    assert run_selfcheck(ws, sc).passed
    # A Word document saved as .pptx: the oracle's well-formedness fails, so must the self-check.
    d = Document()
    d.add_paragraph("Teams in breach")
    d.save(str(ws / "outputs" / "review.pptx"))
    form, _ = dispatch.evaluate_form(sc, ws)
    assert {c.id for c in form if not c.passed} == {"deck_well_formed", "deck_sections"}
    rep = run_selfcheck(ws, sc)
    assert not rep.passed
    assert any("is a Word document" in line for line in rep.lines)


def test_a_scenario_without_a_deck_gets_the_core_verdict_unchanged(tmp_path):
    sc = load_scenario("OPS-01")
    ws = tmp_path / "ws"
    shutil.copytree(sc.inputs_dir, ws / "inputs")
    (ws / "outputs").mkdir()
    (ws / "outputs" / "reorder_plan.csv").write_text("sku,order_qty\nHW-1180,850\n", encoding="utf-8")
    a, b = dispatch.evaluate(sc, ws).to_dict(), core.evaluate(sc, ws).to_dict()
    a.pop("seconds"), b.pop("seconds")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert not dispatch.has_deck(sc)


# ------------------------------------------------------------------ the manifest rule


def _copy_code(dst: Path, with_formats: bool) -> Path:
    src = Path(freeze.__file__).resolve().parent
    shutil.copytree(src / "oracles", dst / "pilot" / "oracles", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        src / "scenarios" / "library",
        dst / "pilot" / "scenarios" / "library",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    if with_formats:
        shutil.copytree(
            src / "oracle_formats", dst / "pilot" / "oracle_formats", ignore=shutil.ignore_patterns("__pycache__")
        )
    return dst / "pilot" / "oracles"


def test_pilot_manifest_is_unchanged_by_the_deck_room(tmp_path):
    pilot = design.study().scenario_set("pilot")
    assert len(pilot) == 10
    before = freeze.take_manifest(oracle_code=_copy_code(tmp_path / "before", with_formats=False), scenarios=pilot)
    after = freeze.take_manifest(oracle_code=_copy_code(tmp_path / "after", with_formats=True), scenarios=pilot)
    assert before == after
    assert not [k for k in after if k.startswith("pilot/oracle_formats/")]


def test_the_deck_room_is_hashed_for_a_study_with_a_deck(tmp_path, deck_bundle):
    root = tmp_path / "root"
    scen = root / "protocol" / "scenarios"
    shutil.copytree(load_scenario("OPS-01").dir, scen / "OPS-01")
    shutil.copytree(deck_bundle, scen / "TST-01")
    code = _copy_code(tmp_path / "code", with_formats=True)
    with_deck = freeze.take_manifest(root, code, scenarios=["OPS-01", "TST-01"])
    without = freeze.take_manifest(root, code, scenarios=["OPS-01"])
    room = sorted(k for k in with_deck if k.startswith("pilot/oracle_formats/"))
    assert room == [
        "pilot/oracle_formats/__init__.py",
        "pilot/oracle_formats/evaluate.py",
        "pilot/oracle_formats/pptx_reader.py",
        "pilot/oracle_formats/selfcheck.py",
    ]
    assert not [k for k in without if k.startswith("pilot/oracle_formats/")]
    # An edit of the deck reader is a change the freeze check reports, for the deck study only.
    (code.parent / "oracle_formats" / "pptx_reader.py").write_text("# edited\n", encoding="utf-8")
    report = freeze.verify(with_deck, root, code, scenarios=["OPS-01", "TST-01"])
    assert [(c.path, c.category, c.change) for c in report.changes] == [
        ("pilot/oracle_formats/pptx_reader.py", "oracle", "modified")
    ]
    assert freeze.verify(without, root, code, scenarios=["OPS-01"]).ok


# ------------------------------------------------------------------ what the judges see


def test_judges_read_a_deck_slide_by_slide(tmp_path):
    from pilot.judges.render import render_deliverable

    ws = tmp_path / "ws"
    build_deck(ws / "outputs" / "review.pptx")
    r = render_deliverable("review.pptx", ws / "outputs")
    assert (r.status, r.format) == ("delivered", "deck")
    lines = r.text.splitlines()
    for expected in [
        "## Slide 1: Support review, October",
        "## Slide 2: SLA attainment by team",
        "Technical | 90.1%",
        "## Slide 3: Teams in breach",
        "Notes: Say the P1 rule",
    ]:
        assert expected in lines
    assert r.features["n_slides"] == 3 and r.features["n_tables"] == 1
    _macro_deck(ws / "outputs" / "review.pptx", ws / "outputs" / "macro.pptx")
    refused = render_deliverable("macro.pptx", ws / "outputs")
    assert "refused" in refused.text and "VBA macros" in refused.text


def test_the_extension_set_with_cx01_hashes_the_deck_room():
    study = design.study()
    extension, pilot = study.scenario_set("extension"), study.scenario_set("pilot")
    assert "CX-01" in extension and "CX-01" not in pilot
    room = [
        "pilot/oracle_formats/__init__.py",
        "pilot/oracle_formats/evaluate.py",
        "pilot/oracle_formats/pptx_reader.py",
        "pilot/oracle_formats/selfcheck.py",
    ]
    assert sorted(k for k in freeze.take_manifest(scenarios=extension) if k.startswith("pilot/oracle_formats/")) == room
    assert not [k for k in freeze.take_manifest(scenarios=pilot) if k.startswith("pilot/oracle_formats/")]
    # A study of CX-01 alone: its own bundle and generator, the room, and no other scenario's files.
    alone = freeze.take_manifest(scenarios=["CX-01"])
    assert set(room) <= set(alone)
    assert "pilot/scenarios/library/cx_01.py" in alone and "pilot/scenarios/library/ops_01.py" not in alone
