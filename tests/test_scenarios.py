"""The pilot's ten scenario bundles (the design's set): structure, validation, byte-stable inputs, solvers, defects, the
table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from pilot import defects, paths, protocol
from pilot.cli.main import main as cli_main
from pilot.protocol import ProtocolError
from pilot.report.scenario_table import scenarios_frame, write_scenarios_table
from pilot.scenarios import build_gold_workspace, check_inputs, load_scenario, load_scenario_from, solve

IDS = protocol.study().scenario_set("pilot")


def test_ten_scenarios_from_distinct_occupations():
    scs = [load_scenario(s) for s in IDS]
    assert len(scs) == 10
    assert len({s.occupation for s in scs}) == 10
    assert {"ACC-01", "RES-01", "BANK-01", "LEGAL-01"} <= set(IDS)


def test_caps_follow_a006():
    study = protocol.study()
    assert load_scenario("ACC-01").caps == protocol.Caps(6.0, 3600.0)
    assert load_scenario("RES-01").caps == protocol.Caps(6.0, 2700.0)
    assert load_scenario("BANK-01").caps == protocol.Caps(5.0, 2400.0)
    assert load_scenario("LEGAL-01").caps == protocol.Caps(4.0, 2400.0)
    for sid in set(IDS) - {"ACC-01", "RES-01", "BANK-01", "LEGAL-01"}:
        assert load_scenario(sid).caps == study.global_caps


def test_deliverable_mix_meets_the_design():
    scs = [load_scenario(s) for s in IDS]
    with_formulas = [s.id for s in scs if any(d.requires_formulas for d in s.deliverables)]
    assert len(with_formulas) >= 5
    kinds = {d.kind for s in scs for d in s.file_deliverables}
    assert kinds == {"xlsx", "docx", "pdf", "csv"}
    assert sum(len(s.file_deliverables) > 1 for s in scs) >= 3
    assert all(s.deliverables[-1].name == "completion_record.json" for s in scs)
    assert all(1 <= s.designed_depth <= 5 and s.professional_minutes > 0 for s in scs)
    assert len({s.designed_depth for s in scs}) >= 3  # H4 needs variation in depth


def test_three_portal_scenarios_and_briefs_that_never_mention_it():
    scs = [load_scenario(s) for s in IDS]
    assert sorted(s.id for s in scs if s.uses_portal) == ["ACC-01", "BANK-01", "PROC-01"]
    for s in scs:
        brief = s.brief
        assert "portal" not in brief.lower()
        assert "outputs/" in brief and "completion_record.json" in brief
        for d in s.deliverables:
            assert d.name in brief
        for f in s.inputs_dir.iterdir():
            assert f.name in brief, f"{s.id}: brief does not name input {f.name}"


def test_rubrics_have_anchors_and_positive_weights():
    for sid in IDS:
        rubric = load_scenario(sid).rubric
        assert abs(sum(rubric.weights().values()) - 1.0) < 1e-9
        assert all(set(c.anchors) == {0, 2, 4} for c in rubric.criteria)


def test_every_criterion_kind_in_the_oracles_is_used_and_most_are_required():
    crits = [c for sid in IDS for c in load_scenario(sid).oracle.criteria]
    kinds = {c.kind for c in crits}
    assert kinds == {
        "present",
        "well_formed",
        "formulas",
        "no_error_values",
        "min_words",
        "sections",
        "completion_record",
        "labelled_value",
        "workbook_contains",
        "text_contains",
        "text_number",
        "csv_columns",
        "csv_keys",
        "csv_value",
        "decision",
        "closed_scale",
        "labelled_bounds",
    }
    assert any(not c.required for c in crits) and sum(c.required for c in crits) > 0.8 * len(crits)


def test_inputs_regenerate_byte_for_byte():
    problems = [p for sid in IDS for p in check_inputs(sid)]
    assert problems == []


def _copy_bundle(tmp_path: Path, sid: str) -> Path:
    dst = tmp_path / sid
    shutil.copytree(paths.SCENARIOS_DIR / sid, dst)
    return dst


def _edit_yaml(path: Path, fn) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize(
    "file,edit,field,words",
    [
        ("scenario.yml", lambda d: d.update(designed_depth=7), "designed_depth", "maximum"),
        ("scenario.yml", lambda d: d.update(caps={"usd": 9.0, "wall_s": 3600}), "caps", "A-006"),
        ("scenario.yml", lambda d: d["deliverables"].pop(), "deliverables", "completion_record.json"),
        ("scenario.yml", lambda d: d.update(uses_portal=False), "arm_features", "portal"),
        ("oracle.yml", lambda d: d["criteria"][0].update(file="nothing.xlsx"), "criteria.0.file", "not a deliverable"),
        ("oracle.yml", lambda d: d["criteria"][4].pop("expected"), "criteria.4.expected", "needs"),
        ("oracle.yml", lambda d: d["criteria"][13].update(kind="formulas"), "criteria.13.kind", "does not apply"),
        (
            "rubric.yml",
            lambda d: d["criteria"][0]["anchors"].pop(2),
            "criteria.0.anchors",
            "'2' is a required property",
        ),
    ],
)
def test_malformed_bundle_is_refused_naming_file_and_field(tmp_path, file, edit, field, words):
    bundle = _copy_bundle(tmp_path, "ACC-01")
    _edit_yaml(bundle / file, edit)
    with pytest.raises(ProtocolError) as err:
        load_scenario_from(bundle)
    assert err.value.path.name == file and err.value.field == field and words in err.value.reason


def _bounds(data: dict) -> dict:
    return next(c for c in data["criteria"] if c["kind"] == "labelled_bounds")


@pytest.mark.parametrize(
    "edit,field,words",
    [
        (lambda c: c.update(minimum=80001), "maximum", "below the minimum"),
        (lambda c: (c.pop("minimum"), c.pop("maximum")), "minimum", "needs 'minimum', 'maximum' or both"),
        (lambda c: c["labels"].append("email ("), "labels.5", "not a valid regular expression"),
        (lambda c: c.update(labels=[]), "labels", "should be non-empty"),
        (lambda c: c.update(maximum="80,000"), "maximum", "is not of type 'number'"),
        (lambda c: c.update(tolerance=1), "tolerance", "not a parameter of a labelled_bounds criterion"),
        (lambda c: c.update(file="q4_budget_recommendation.docx"), "kind", "does not apply to a docx deliverable"),
    ],
)
def test_bounds_criterion_is_validated(tmp_path, edit, field, words):
    bundle = _copy_bundle(tmp_path, "MKT-01")
    _edit_yaml(bundle / "oracle.yml", lambda d: edit(_bounds(d)))
    with pytest.raises(ProtocolError) as err:
        load_scenario_from(bundle)
    assert err.value.path.name == "oracle.yml" and err.value.field.endswith(field) and words in err.value.reason, (
        err.value.field,
        err.value.reason,
    )


def test_brief_that_mentions_the_portal_is_refused(tmp_path):
    bundle = _copy_bundle(tmp_path, "PROC-01")
    (bundle / "brief.md").write_text((bundle / "brief.md").read_text() + "\nThe records are also on the portal.\n")
    with pytest.raises(ProtocolError, match="mentions the portal"):
        load_scenario_from(bundle)


def test_unknown_scenario_is_refused():
    with pytest.raises(ProtocolError, match="no scenario 'XX-99'"):
        load_scenario("XX-99")


def test_solver_reads_the_inputs_it_is_given(tmp_path):
    """A reference solver computes from the inputs, not from constants."""
    sc = load_scenario("OPS-01")
    inputs = tmp_path / "inputs"
    shutil.copytree(sc.inputs_dir, inputs)
    snap = inputs / "inventory_snapshot_2026-11-27.csv"
    snap.write_text(
        snap.read_text().replace(
            "HW-1010,Hex bolt M8x40 zinc (box 100),S-01,480,", "HW-1010,Hex bolt M8x40 zinc (box 100),S-01,0,"
        )
    )
    solve("OPS-01", inputs, tmp_path / "out")
    plan = (tmp_path / "out" / "reorder_plan.csv").read_text()
    assert "HW-1010" in plan
    legal_inputs = tmp_path / "legal"
    shutil.copytree(load_scenario("LEGAL-01").inputs_dir, legal_inputs)
    (legal_inputs / "msa_draft_v3.docx").write_bytes(
        (paths.SCENARIOS_DIR / "ACC-01" / "inputs" / "cash_ledger_2026-10.xlsx").read_bytes()
    )
    with pytest.raises(ValueError):
        solve("LEGAL-01", legal_inputs, tmp_path / "legal-out")


def test_gold_workspace_layout(tmp_path):
    ws = build_gold_workspace("OPS-01", tmp_path / "ws")
    assert (ws / "BRIEF.md").read_text() == load_scenario("OPS-01").brief
    assert sorted(p.name for p in (ws / "outputs").iterdir()) == ["completion_record.json", "reorder_plan.csv"]
    record = json.loads((ws / "outputs" / "completion_record.json").read_text())
    assert record["status"] == "completed" and record["deliverables"] == ["reorder_plan.csv", "completion_record.json"]


def test_named_defects_apply_and_are_seeded(tmp_path):
    sc = load_scenario("LEGAL-01")
    gold = build_gold_workspace(sc, tmp_path / "gold")
    applicable = defects.applicable_defects(sc)
    assert "strip_formulas" not in applicable and "drop_section" in applicable
    for name in (
        "drop_deliverable",
        "truncate_document",
        "omit_fact",
        "break_completion_record",
        "modify_input",
        "text_substitute",
    ):
        a = defects.copy_workspace(gold, tmp_path / f"{name}-a")
        b = defects.copy_workspace(gold, tmp_path / f"{name}-b")
        da = defects.apply_defect(name, sc, a, np.random.default_rng(3))
        db = defects.apply_defect(name, sc, b, np.random.default_rng(3))
        assert da == db and da
    with pytest.raises(KeyError, match="unknown defect"):
        defects.apply_defect("nonsense", sc, gold, np.random.default_rng(0))


def test_cli_lists_the_bundles(capsys):
    assert cli_main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for sid in IDS:
        assert sid in out
    assert "$6.00/3600s" in out and "bank_reconciliation_2026-10.xlsx" in out


def test_scenarios_table(tmp_path):
    frame = scenarios_frame()
    assert list(frame["ID"]) == IDS and set(frame.columns) >= {"ID", "Occupation", "Deliverables", "Depth"}
    tex = write_scenarios_table(tmp_path).read_text()
    assert "\\label{tab:scenarios}" in tex and "ACC-01" in tex and "3{,}600" in tex
    assert "\\nolinkurl{bank_reconciliation_2026-10.xlsx}" in tex and " & yes \\\\" in tex  # ACC-01 has the portal


@pytest.mark.parametrize(
    "edit,field,words",
    [
        (
            lambda c: c.update(expected=["Hillcrest", "Northgate"]),
            "criteria.6.expected",
            "'Northgate' is not one of the options",
        ),
        (lambda c: c.pop("topic"), "criteria.6.topic", "needs 'topic'"),
        (lambda c: c.update(property_verbs="miss(ed"), "criteria.6.property_verbs", "not a valid regular expression"),
        (
            lambda c: c.update(section=["Summary", "Appendix"]),
            "criteria.6.section",
            "'Appendix' is not a required section",
        ),
        (
            lambda c: c.update(expected="Hillcrest"),
            "criteria.6.section",
            "several sections are for a set-valued decision",
        ),
    ],
)
def test_malformed_set_valued_decision_is_refused(tmp_path, edit, field, words):
    bundle = _copy_bundle(tmp_path, "HEALTH-01")
    _edit_yaml(bundle / "oracle.yml", lambda d: edit(d["criteria"][6]))
    with pytest.raises(ProtocolError) as err:
        load_scenario_from(bundle)
    assert err.value.field == field and words in err.value.reason, (err.value.field, err.value.reason)
