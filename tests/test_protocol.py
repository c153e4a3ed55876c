"""The protocol loader: the repository's files validate, malformed ones are refused with file, field and reason."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
import yaml

from pilot import paths
from pilot.protocol import (
    AMENDMENT_STAGES,
    ProtocolError,
    load_all,
    load_amendments,
    load_arms,
    load_scenarios,
    load_study,
)


def test_repository_protocol_is_valid():
    loaded = load_all()
    study = loaded["study"]
    assert study.arms == ["A0", "A1", "A2", "A3", "A4"]
    assert study.envelope_usd == 800.0
    assert study.q == 70
    ids = [a["id"] for a in loaded["amendments"]]
    assert ids[:12] == [
        "A-001",
        "A-002",
        "A-005",
        "A-006",
        "A-009",
        "A-010",
        "A-011",
        "A-012",
        "A-013",
        "A-014",
        "A-015",
        "A-016",
    ]
    # After A-016 (the extension set, with EST-01) the amendments follow in order of id, and every bundle beyond the
    # design's ten joined a set by an amendment of its own, titled "Extension scenario <ID>" (pilot protocol amend).
    later = loaded["amendments"][12:]
    assert [a["id"] for a in later] == [f"A-{17 + k:03d}" for k in range(len(later))]
    added = {sc.id for sc in loaded["scenarios"]} - set(study.scenario_set("pilot"))
    titled = {a["title"].removeprefix("Extension scenario ") for a in later if a["title"].startswith("Extension ")}
    assert titled | {"EST-01"} == added
    assert [a["title"] for a in loaded["amendments"] if "EST-01" in a["content"]][0] == "Extension scenario set"
    assert all(a["stage"] in ("before rerun pilot", "after rerun pilot") for a in later)
    assert study["cli"]["max_output_tokens"] == 32000


def test_amendments_use_one_line_ending():
    data = paths.AMENDMENTS_FILE.read_bytes()
    assert b"\r" not in data and data.endswith(b"\n")


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
    # The design section's premiums, bound to the hypotheses by name.
    assert [(h, study.hypothesis_contrast(h).arms) for h in ("H1", "H2", "H3")] == [
        ("H1", ("A3", "A1")),
        ("H2", ("A1", "A0")),
        ("H3", ("A4", "A3")),
    ]
    assert study.primary_contrast.name == "computer-use-premium" and study.primary_contrast.primary
    assert [j["model"] for j in study.judge_panel] == ["claude-opus-5-5", "claude-sonnet-5-5", "claude-sonnet-5-5"]


def test_arms_tool_sets_and_denials():
    arms = load_arms()
    assert arms["A0"].tools == ("Read", "Write", "Edit", "Glob", "Grep")
    assert set(arms["A1"].denied_families) == {
        "osascript",
        "open",
        "soffice",
        "textutil",
        "qlmanage",
        "cupsfilter",
        "curl",
        "wget",
    }
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
        (
            lambda d: d["inference"]["primary_contrast"].__setitem__("arms", ["A3", "A9"]),
            "inference.primary_contrast.arms",
            "not in design.arms",
        ),
        (
            lambda d: d["inference"]["secondary_contrasts"][2].__setitem__("name", "shell-premium"),
            "inference.secondary_contrasts.2.name",
            "'shell-premium' already names inference.secondary_contrasts.0",
        ),
        (
            lambda d: d["inference"].__setitem__("secondary_contrasts", [["A1", "A0"]]),
            "inference.secondary_contrasts.0",
            "is not of type 'object'",
        ),
        (
            lambda d: d["hypotheses"]["contrasts"].__setitem__("H2", "shell"),
            "hypotheses.contrasts.H2",
            "names 'shell', which is no contrast under inference (computer-use-premium, shell-premium, ",
        ),
        (
            lambda d: d["hypotheses"]["contrasts"].__setitem__("H1", "shell-premium"),
            "hypotheses.contrasts.H1",
            "H1 is read on the primary contrast's own p, but 'shell-premium' is a secondary contrast",
        ),
        (
            lambda d: d["hypotheses"]["contrasts"].__setitem__("H3", "computer-use-premium"),
            "hypotheses.contrasts.H3",
            "H3 is read on a Holm-adjusted p, which the primary contrast 'computer-use-premium' does not have",
        ),
        (lambda d: d["hypotheses"].pop("contrasts"), "hypotheses", "'contrasts' is a required property"),
        (
            lambda d: d["design"].__setitem__("assignment_seed", 1.5),
            "design.assignment_seed",
            "is not of type 'integer'",
        ),
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


def test_each_arm_declares_its_access_rank(tmp_path):
    assert {a: arm.access_rank for a, arm in load_arms().items()} == {"A0": 0, "A1": 1, "A2": 2, "A3": 3, "A4": 4}
    folder = _arms_copy(tmp_path)
    data = yaml.safe_load((folder / "arms.yml").read_text())
    del data["arms"]["A2"]["access_rank"]
    _write(folder / "arms.yml", data)
    with pytest.raises(ProtocolError, match="'access_rank' is a required property") as exc:
        load_arms(folder / "arms.yml")
    assert exc.value.field == "arms.A2"
    for arm in data["arms"].values():
        arm["access_rank"] = 1
    _write(folder / "arms.yml", data)
    with pytest.raises(ProtocolError, match="H5's trend along access needs two ranks") as exc:
        load_arms(folder / "arms.yml", study=load_study())
    assert exc.value.field == "arms.A0.access_rank"


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
        (
            "id,date,stage,title,content\nA-001,2026-01-01,before pilot,t,c\nA-001,2026-01-02,before pilot,t,c\n",
            "line 3.id",
            "duplicate",
        ),
        ("id,date,stage,title,content\nA-001,2026-13-45,before pilot,t,c\n", "line 2.date", "not a calendar date"),
        ("id,date,stage,title,content\nA-001,2026-02-30,before pilot,t,c\n", "line 2.date", "not a calendar date"),
        ("id,date,stage,title,content\nA-001,2026-01-01,during lunch,t,c\n", "line 2.stage", "is not one of"),
        (
            "id,date,stage,title,content\nA-001,2026-05-01,after pilot,t,c\nA-002,2026-05-02,before pilot,t,c\n",
            "line 3.stage",
            "earlier amendment A-001",
        ),
        (
            "id,date,stage,title,content\nA-001,2026-05-01,before pilot,t,c\nA-002,2026-04-01,before pilot,t,c\n",
            "line 3.date",
            "dated 2026-05-01",
        ),
        (
            "id,date,stage,title,content\nA-002,2026-05-01,before pilot,t,c\nA-001,2026-05-02,before pilot,t,c\n",
            "line 3.id",
            "id order",
        ),
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


def test_repository_amendments_keep_date_and_stage_order():
    rows = load_amendments()
    stages = [AMENDMENT_STAGES.index(r["stage"]) for r in rows]
    assert stages == sorted(stages) and [r["date"] for r in rows] == sorted(r["date"] for r in rows)
    # The recorded study's pilot comes before this rerun's amendments.
    a010 = next(r for r in rows if r["id"] == "A-010")
    assert a010["stage"] == "before rerun pilot" and a010["date"] > next(r for r in rows if r["id"] == "A-009")["date"]


def _scenarios_copy(tmp_path: Path) -> Path:
    root = tmp_path / "scenarios"
    shutil.copytree(paths.SCENARIOS_DIR, root, ignore=shutil.ignore_patterns("portal"))
    return root


def _edit_yaml(path: Path, edit) -> None:
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_every_bundle_is_validated_and_belongs_to_a_set():
    study = load_study()
    loaded = load_scenarios(study)
    # The design: ten preregistered scenarios; the extension holds them and adds; every bundle is in a set.
    assert study["design"]["n_scenarios"] == 10 and study.default_scenario_set == "pilot"
    assert len(study.scenario_set()) == 10 and "EST-01" in study.scenario_set("extension")
    assert set(study.scenario_set("pilot")) < set(study.scenario_set("extension"))
    assert {sc.id for sc in loaded} == {sid for ids in study.scenario_sets.values() for sid in ids}
    assert study.set_of(reversed(study.scenario_set("pilot"))) == "pilot" and study.set_of(["ACC-01"]) is None


@pytest.mark.parametrize(
    "file, edit, field, reason",
    [
        ("scenario.yml", lambda d: d.update(designed_depth="deep"), "designed_depth", "not of type 'integer'"),
        ("scenario.yml", lambda d: d.update(ocupation=d.pop("occupation")), "<root>", "ocupation"),
        (
            "rubric.yml",
            lambda d: d["criteria"][0].update(weight=d["criteria"][0]["weight"] + 0.6),
            "criteria.*.weight",
            "not 1",
        ),
    ],
)
def test_a_bad_bundle_fails_validation_with_file_field_reason(tmp_path, file, edit, field, reason):
    root = _scenarios_copy(tmp_path)
    _edit_yaml(root / "HR-01" / file, edit)
    with pytest.raises(ProtocolError) as exc:
        load_scenarios(load_study(), root)
    assert exc.value.path.name == file and exc.value.path.parent.name == "HR-01"
    assert exc.value.field == field
    assert reason in exc.value.reason


def test_n_scenarios_must_match_the_design_set(tmp_path):
    path, data = _study_copy(tmp_path)
    data["design"]["n_scenarios"] = 11
    with pytest.raises(ProtocolError) as exc:
        load_study(_write(path, data))
    assert (
        exc.value.field == "scenario_sets.pilot"
        and "holds 10 scenarios but design.n_scenarios says 11" in exc.value.reason
    )


@pytest.mark.parametrize(
    "edit, field, reason",
    [
        (lambda d: d["design"].update(scenario_set="everything"), "design.scenario_set", "not in scenario_sets"),
        (lambda d: d["scenario_sets"].update(Pilot2=["ACC-01"]), "scenario_sets", "does not match"),
        (lambda d: d["scenario_sets"]["extension"].append("ACC-01"), "scenario_sets.extension", "non-unique"),
        (
            lambda d: d["scenario_sets"]["extension"].append("acc-9"),
            f"scenario_sets.extension.{len(load_study().scenario_set('extension'))}",
            "does not match",
        ),
    ],
)
def test_a_malformed_scenario_set_is_refused(tmp_path, edit, field, reason):
    path, data = _study_copy(tmp_path)
    edit(data)
    with pytest.raises(ProtocolError) as exc:
        load_study(_write(path, data))
    assert exc.value.field == field and reason in exc.value.reason, (exc.value.field, exc.value.reason)


def test_a_set_must_name_bundles_and_every_bundle_must_be_in_a_set(tmp_path):
    path, data = _study_copy(tmp_path)
    data["scenario_sets"]["extension"].append("ZZZ-01")
    with pytest.raises(ProtocolError) as exc:
        load_scenarios(load_study(_write(path, data)))
    assert (
        exc.value.field == "scenario_sets.extension"
        and "names ZZZ-01, which protocol/scenarios/ does not hold" in exc.value.reason
    )
    path, data = _study_copy(tmp_path)
    data["scenario_sets"]["extension"].remove("EST-01")
    with pytest.raises(ProtocolError) as exc:
        load_scenarios(load_study(_write(path, data)))
    assert exc.value.field == "scenario_sets" and "the bundle EST-01 is in no scenario set" in exc.value.reason


def test_protocol_tables_report_a_bad_bundle_without_a_traceback(tmp_path, monkeypatch, capsys):
    from pilot.cli import protocol as protocol_cli

    root = _scenarios_copy(tmp_path)
    _edit_yaml(root / "HR-01" / "scenario.yml", lambda d: d.update(designed_depth="deep"))
    monkeypatch.setattr(paths, "SCENARIOS_DIR", root)
    assert protocol_cli._validate(argparse.Namespace()) == 1
    assert protocol_cli._tables(argparse.Namespace(out=tmp_path / "generated")) == 1
    err = capsys.readouterr().err
    assert err.count("HR-01/scenario.yml: field 'designed_depth'") == 2 and "Traceback" not in err
    assert not (tmp_path / "generated").exists()


@pytest.mark.parametrize("bad", [0, -1, "32000", 1.5, None])
def test_max_output_tokens_must_be_a_positive_integer(bad, tmp_path):
    import yaml

    data = yaml.safe_load((paths.PROTOCOL_DIR / "study.yml").read_text(encoding="utf-8"))
    data["cli"]["max_output_tokens"] = bad
    path = tmp_path / "study.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ProtocolError, match="max_output_tokens"):
        load_study(path)
