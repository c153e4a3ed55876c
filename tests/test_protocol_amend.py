"""``pilot protocol amend``: the next amendment written as the file writes its rows, and a scenario joining a set.

Everything runs on a copy of ``protocol/`` under a temporary root. The expected rows are written out by hand here
(the csv module's minimal quoting: a field with a comma is quoted, one without is not).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pilot import paths
from pilot.protocol import ProtocolError, load_amendments, load_study
from pilot.protocol.amend import amend
from pilot.protocol.validation import check_added_scenarios

DESIGN = ["ACC-01", "BANK-01", "ENG-01", "HEALTH-01", "HR-01", "LEGAL-01", "MKT-01", "OPS-01", "PROC-01", "RES-01"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(paths.PROTOCOL_DIR, tmp_path / "protocol", ignore=shutil.ignore_patterns("portal"))
    return tmp_path


def _files(root: Path) -> dict[str, bytes]:
    return {name: (root / "protocol" / name).read_bytes() for name in ("amendments.csv", "study.yml")}


def _add_bundle(root: Path, sid: str, like: str = "OPS-01") -> None:
    """A bundle of id ``sid``: a copy of ``like`` under the new id (the loader asks the id to match the folder)."""
    dst = root / "protocol" / "scenarios" / sid
    shutil.copytree(root / "protocol" / "scenarios" / like, dst)
    spec = dst / "scenario.yml"
    spec.write_text(spec.read_text(encoding="utf-8").replace(f"id: {like}", f"id: {sid}"), encoding="utf-8")


def test_an_amendment_is_appended_as_one_row_with_the_next_id(root: Path):
    before = _files(root)
    last = load_amendments(root / "protocol" / "amendments.csv")[-1]
    made = amend(
        "Judge retry bound stated", "Made before any run, identical for every arm.", date="2026-12-06", root=root
    )
    number = int(last["id"][2:]) + 1
    assert (made.id, made.stage) == (f"A-{number:03d}", last["stage"])
    content = '"Made before any run, identical for every arm."'
    row = f"A-{number:03d},2026-12-06,{last['stage']},Judge retry bound stated,{content}\n"
    assert _files(root)["amendments.csv"] == before["amendments.csv"] + row.encode()
    assert _files(root)["study.yml"] == before["study.yml"]


def test_a_crlf_file_keeps_crlf(root: Path):
    path = root / "protocol" / "amendments.csv"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    before = path.read_bytes()
    amend("A title", "Plain content", date="2026-12-06", root=root)
    added = path.read_bytes()[len(before) :]
    assert added.endswith(b",A title,Plain content\r\n") and added.count(b"\n") == 1


def test_a_file_that_mixes_line_endings_is_refused(root: Path):
    path = root / "protocol" / "amendments.csv"
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:3]) + b"\r\n" + b"\n".join(lines[3:]))
    before = _files(root)
    with pytest.raises(ProtocolError) as exc:
        amend("A title", "Plain content", date="2026-12-06", root=root)
    assert exc.value.path == path and "mixes line endings (1 CRLF" in exc.value.reason
    assert _files(root) == before


@pytest.mark.parametrize(
    ("kw", "field", "reason"),
    [
        ({"date": "2026-01-01"}, "date", "is dated 2026-01-01 but the earlier amendment"),
        ({"date": "2026-12-06", "stage": "before pilot"}, "stage", "is made 'before pilot' but the earlier amendment"),
        ({"date": "2026-12-06", "stage": "after the pilot"}, "stage", "is not one of"),
        ({"date": "06/12/2026"}, "date", "is not a YYYY-MM-DD date"),
    ],
)
def test_a_row_the_file_would_refuse_is_not_written(root: Path, kw: dict, field: str, reason: str):
    before = _files(root)
    with pytest.raises(ProtocolError) as exc:
        amend("A title", "Plain content", root=root, **kw)
    assert exc.value.path == root / "protocol" / "amendments.csv"
    assert exc.value.field.endswith(field) and reason in exc.value.reason, (exc.value.field, exc.value.reason)
    assert _files(root) == before


def test_a_scenario_joins_a_new_set_with_the_design_and_its_own_amendment(root: Path):
    _add_bundle(root, "CUS-01")
    before = _files(root)
    made = amend(
        None,
        "Made before any run of the customs set.",
        scenario="CUS-01",
        scenario_set="customs",
        root=root,
        date="2026-12-06",
    )
    assert made.title == "Extension scenario CUS-01"
    study_text = (root / "protocol" / "study.yml").read_text(encoding="utf-8")
    added = set(study_text.splitlines()) - set(before["study.yml"].decode().splitlines())
    assert added == {"  customs: [" + ", ".join(DESIGN + ["CUS-01"]) + "]"}
    # The comments of study.yml stay; the set reads back as the design's ten and the new bundle.
    assert study_text.count("#") == before["study.yml"].decode().count("#")
    study = load_study(root / "protocol" / "study.yml")
    assert study.scenario_set("customs") == sorted(DESIGN + ["CUS-01"])
    rows = load_amendments(root / "protocol" / "amendments.csv")
    check_added_scenarios(study, rows, list(study.scenario_set("extension")) + ["CUS-01"])


def test_a_scenario_joins_an_existing_set_inside_its_list(root: Path):
    _add_bundle(root, "CUS-01")
    amend(
        None,
        "Made before any run of the extension set.",
        scenario="CUS-01",
        scenario_set="extension",
        root=root,
        date="2026-12-06",
    )
    data = yaml.safe_load((root / "protocol" / "study.yml").read_text(encoding="utf-8"))
    assert data["scenario_sets"]["extension"][-2:] == ["GRANT-01", "CUS-01"]
    assert "CUS-01" not in data["scenario_sets"]["pilot"]


@pytest.mark.parametrize(
    ("sid", "set_name", "reason"),
    [
        ("CUS-09", "customs", "no bundle CUS-09"),
        ("OPS-01", "extension", "already holds OPS-01"),
        ("cus-01", "customs", "is not a scenario id"),
        ("CUS-01", "Customs Set", "is not a set name"),
    ],
)
def test_a_scenario_that_cannot_join_is_refused_and_nothing_is_written(
    root: Path, sid: str, set_name: str, reason: str
):
    _add_bundle(root, "CUS-01")
    before = _files(root)
    with pytest.raises(ProtocolError) as exc:
        amend(None, "Content.", scenario=sid, scenario_set=set_name, root=root, date="2026-12-06")
    assert reason in exc.value.reason
    assert _files(root) == before


def test_a_bundle_no_amendment_adds_is_refused_by_the_protocol():
    study = load_study()
    rows = load_amendments()
    bundles = list(study.scenario_set("extension")) + ["CUS-01"]
    with pytest.raises(ProtocolError) as exc:
        check_added_scenarios(study, rows, bundles)
    assert exc.value.path == paths.AMENDMENTS_FILE
    assert "no amendment adds the bundle CUS-01" in exc.value.reason
    assert "pilot protocol amend --scenario CUS-01 --set NAME" in exc.value.reason
    twice = rows + [dict(rows[-1], id="A-099", title="Extension scenario GRANT-01")]
    with pytest.raises(ProtocolError, match="GRANT-01 is added twice"):
        check_added_scenarios(study, twice, list(study.scenario_set("extension")))


def test_the_command_writes_and_prints_the_row(root: Path):
    _add_bundle(root, "CUS-01")
    env = {**os.environ, "PILOT_ROOT": str(root)}
    args = ["--scenario", "CUS-01", "--set", "customs", "--content", "Made before any run.", "--date", "2026-12-06"]

    def run() -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pilot", "protocol", "amend", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    first = run()
    assert first.returncode == 0, first.stderr
    assert "Extension scenario CUS-01" in first.stdout and "scenario_sets.customs holds 11 scenarios" in first.stdout
    again = run()
    assert again.returncode == 1
    assert again.stderr.startswith("pilot protocol amend: ") and "already holds CUS-01" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
