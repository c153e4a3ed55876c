"""The protocol loader: the repository's files validate, malformed ones are refused with file, field and reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pilot import paths
from pilot.protocol import ProtocolError, load_all, load_amendments, load_arms, load_study


def test_repository_protocol_is_valid():
    loaded = load_all()
    study = loaded["study"]
    assert study.arms == ["A0", "A1", "A2", "A3", "A4"]
    assert study.envelope_usd == 800.0
    assert study.q == 70
    assert [a["id"] for a in loaded["amendments"]] == ["A-001", "A-002", "A-005", "A-006", "A-009", "A-010"]


def test_caps_are_the_larger_of_global_and_own():
    study = load_study()
    assert (study.caps_for("ACC-01").usd, study.caps_for("ACC-01").wall_s) == (6.0, 3600.0)
    assert (study.caps_for("RES-01").usd, study.caps_for("RES-01").wall_s) == (6.0, 2700.0)
    assert (study.caps_for("BANK-01").usd, study.caps_for("BANK-01").wall_s) == (5.0, 2400.0)
    assert (study.caps_for("LEGAL-01").usd, study.caps_for("LEGAL-01").wall_s) == (4.0, 2400.0)
    assert (study.caps_for("HR-01").usd, study.caps_for("HR-01").wall_s) == (4.0, 1800.0)


def test_design_constants():
    study = load_study()
    assert study.grid("budget_usd")[0] == 0.5 and study.grid("budget_usd")[-1] == 4.0
    assert study["inference"]["bootstrap_resamples"] == 5000
    assert study["inference"]["permutations"] == 20000
    assert study.contrasts == [("A3", "A1"), ("A1", "A0"), ("A4", "A3"), ("A2", "A1")]
    assert [j["model"] for j in study.judge_panel] == ["claude-opus-5-5", "claude-sonnet-5-5", "claude-sonnet-5-5"]


def test_arms_tool_sets_and_denials():
    arms = load_arms()
    assert arms["A0"].tools == ("Read", "Write", "Edit", "Glob", "Grep")
    assert set(arms["A1"].denied_families) == {"osascript", "open", "soffice", "textutil", "qlmanage", "cupsfilter", "curl", "wget"}
    assert set(arms["A2"].denied_families) == {"soffice", "curl", "wget"}
    assert arms["A2"].requires == ("macos",)
    assert arms["A3"].denied_families == () and arms["A3"].feature("portal")
    assert arms["A4"].recovery_resumes == 1 and arms["A4"].feature("self_check")


def _study_copy(tmp_path: Path) -> tuple[Path, dict]:
    data = yaml.safe_load(paths.STUDY_FILE.read_text())
    return tmp_path / "study.yml", data


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "mutate, field, reason",
    [
        (lambda d: d["caps"]["global"].__setitem__("usd", "four"), "caps.global.usd", "is not of type 'number'"),
        (lambda d: d["caps"]["global"].__setitem__("usd", -1), "caps.global.usd", "less than or equal to the minimum"),
        (lambda d: d["envelope"].pop("usd"), "envelope", "'usd' is a required property"),
        (lambda d: d["outcomes"].__setitem__("q", 72), "outcomes.q", "must be one of outcomes.q_grid"),
        (lambda d: d["inference"].__setitem__("primary_contrast", ["A3", "A9"]), "inference.primary_contrast", "not in design.arms"),
        (lambda d: d["design"].__setitem__("assignment_seed", 1.5), "design.assignment_seed", "is not of type 'integer'"),
        (lambda d: d.__setitem__("unexpected", 1), "<root>", "Additional properties are not allowed"),
        (lambda d: d["caps"]["scenarios"].__setitem__("acc01", {"usd": 5}), "caps.scenarios", "does not match"),
        (lambda d: d["judges"]["panel"].append(dict(d["judges"]["panel"][0])), "judges.panel", "unique"),
    ],
)
def test_malformed_study_is_refused_naming_file_field_reason(tmp_path, mutate, field, reason):
    path, data = _study_copy(tmp_path)
    mutate(data)
    _write(path, data)
    with pytest.raises(ProtocolError) as exc:
        load_study(path)
    err = exc.value
    assert err.path == path
    assert err.field == field
    assert reason in err.reason
    assert str(path) in str(err) and field in str(err)


def test_unparsable_yaml_names_the_line(tmp_path):
    path = tmp_path / "study.yml"
    path.write_text("study:\n  title: [unclosed\n")
    with pytest.raises(ProtocolError, match=r"study.yml: field '<file>': not valid YAML at line"):
        load_study(path)


def test_missing_file(tmp_path):
    with pytest.raises(ProtocolError, match="file not found"):
        load_study(tmp_path / "nope.yml")


def _arms_copy(tmp_path: Path) -> Path:
    target = tmp_path / "arms"
    shutil.copytree(paths.ARMS_DIR, target)
    return target


def test_arm_with_unknown_tool_is_refused(tmp_path):
    folder = _arms_copy(tmp_path)
    data = yaml.safe_load((folder / "arms.yml").read_text())
    data["arms"]["A1"]["tools"].append("Teleport")
    _write(folder / "arms.yml", data)
    with pytest.raises(ProtocolError) as exc:
        load_arms(folder / "arms.yml")
    assert exc.value.field == "arms.A1.tools.6"


def test_arm_denying_programs_without_a_shell_is_refused(tmp_path):
    folder = _arms_copy(tmp_path)
    data = yaml.safe_load((folder / "arms.yml").read_text())
    data["arms"]["A0"]["denied_families"] = ["curl"]
    _write(folder / "arms.yml", data)
    with pytest.raises(ProtocolError, match="no Bash tool") as exc:
        load_arms(folder / "arms.yml")
    assert exc.value.field == "arms.A0.denied_families"


def test_arm_documentation_must_exist(tmp_path):
    folder = _arms_copy(tmp_path)
    (folder / "A3.md").unlink()
    with pytest.raises(ProtocolError, match="A3.md not found") as exc:
        load_arms(folder / "arms.yml")
    assert exc.value.field == "arms.A3.doc"


def test_arms_missing_a_design_arm_is_refused(tmp_path):
    folder = _arms_copy(tmp_path)
    data = yaml.safe_load((folder / "arms.yml").read_text())
    del data["arms"]["A4"]
    _write(folder / "arms.yml", data)
    with pytest.raises(ProtocolError, match=r"\['A4'\]"):
        load_arms(folder / "arms.yml", study=load_study())


@pytest.mark.parametrize(
    "text, field, reason",
    [
        ("id,date,title\nA-001,2026-01-01,x\n", "<header>", "columns must be"),
        ("id,date,stage,title,content\nA-1,2026-01-01,s,t,c\n", "line 2.id", "not of the form A-NNN"),
        ("id,date,stage,title,content\nA-001,01/02/2026,s,t,c\n", "line 2.date", "YYYY-MM-DD"),
        ("id,date,stage,title,content\nA-001,2026-01-01,s,t,c\nA-001,2026-01-02,s,t,c\n", "line 3.id", "duplicate"),
        ("id,date,stage,title,content\nA-001,2026-01-01,s,,c\n", "line 2.title", "must not be empty"),
        ("id,date,stage,title,content\nA-001,2026-01-01,s,t\n", "line 2", "wrong number of fields"),
    ],
)
def test_malformed_amendments_are_refused(tmp_path, text, field, reason):
    path = tmp_path / "amendments.csv"
    path.write_text(text)
    with pytest.raises(ProtocolError) as exc:
        load_amendments(path)
    assert exc.value.field == field
    assert reason in exc.value.reason
