"""``pilot scenarios new``: a skeleton that loads, regenerates byte for byte, whose gold passes, whose gaps are listed.

Everything is written into a temporary copy of the repository's ``protocol/`` and
``src/``. The checks that import the new library module run in a subprocess with
``PILOT_ROOT`` and ``PYTHONPATH`` pointing at that copy, so the repository itself is
never written; the other checks read the copy in this process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kit_support
import pytest

from pilot import paths
from pilot.protocol import SCENARIO_ID, load_study
from pilot.protocol.scenario import CRITERION_PARAMS, load_scenario_from
from pilot.protocol.validation import check_rubric_weights
from pilot.scenario_kit import skeleton
from pilot.scenario_kit.skeleton import MARKER, new_scenario, skeleton_paths, todo_markers

SID = "TEST-01"
OCCUPATION = "finance"
TITLE = "October records review"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch repository: copies of protocol/ and src/, nothing else."""
    base = tmp_path_factory.mktemp("skeleton-root")
    for part in ("protocol", "src"):
        shutil.copytree(
            paths.ROOT / part, base / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        )
    return base


@pytest.fixture(scope="module")
def written(root: Path) -> list[Path]:
    assert not (paths.SCENARIOS_DIR / SID).exists(), "the repository must not hold the test's scenario"
    return new_scenario(SID, occupation=OCCUPATION, title=TITLE, root=root)


@pytest.fixture(scope="module")
def bundle(root: Path, written: list[Path]) -> Path:
    return skeleton_paths(SID, root)[0]


@pytest.fixture(scope="module")
def module_path(root: Path, written: list[Path]) -> Path:
    return skeleton_paths(SID, root)[1]


# Run in the scratch repository: the library lookup, regeneration and the gold, then a second skeleton at the
# default root (PILOT_ROOT). Prints one JSON object.
_CHECK = r"""
import json, sys, tempfile
from pathlib import Path
import pilot
from pilot import paths
from pilot.oracles.evaluate import evaluate
from pilot.protocol import load_study
from pilot.protocol.scenario import load_scenario_from
from pilot.scenario_kit.skeleton import new_scenario
from pilot.scenarios.generate import build_gold_workspace, check_inputs, library_module

sid = sys.argv[1]
sc = load_scenario_from(paths.SCENARIOS_DIR / sid, load_study())
out = {"pilot": pilot.__file__, "root": str(paths.ROOT), "module": library_module(sc).__file__}
out["inputs"] = check_inputs(sc)
with tempfile.TemporaryDirectory() as tmp:
    ev = evaluate(sc, build_gold_workspace(sc, Path(tmp) / "gold"))
out["gold"] = {"D": ev.D, "E": ev.E, "errors": ev.errors, "criteria": [c.id for c in ev.criteria],
               "failed": [f"{c.id}: {c.reason}" for c in ev.criteria if not c.passed]}
second = new_scenario("TEST-02", occupation="operations", title="Default root")
load_scenario_from(paths.SCENARIOS_DIR / "TEST-02", load_study())
out["default_root"] = [str(p) for p in second]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def checked(root: Path, written: list[Path], soffice: str) -> dict:
    env = {**os.environ, "PILOT_ROOT": str(root), "PYTHONPATH": str(root / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, SID], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


# ----------------------------------------------------------------------------- what is written


def test_the_skeleton_is_written_under_root_and_nowhere_else(
    root: Path, written: list[Path], bundle: Path, module_path: Path
):
    names = [p.relative_to(root).as_posix() for p in written]
    assert names == kit_support.skeleton_files(SID)
    assert all(p.is_file() for p in written)
    assert not (paths.SCENARIOS_DIR / SID).exists()
    assert not (paths.ROOT / "src" / "pilot" / "scenarios" / "library" / "test_01.py").exists()
    # study.yml is left as it was: a new scenario enters a study as an extension set.
    assert (root / "protocol" / "study.yml").read_bytes() == paths.STUDY_FILE.read_bytes()


def test_the_skeleton_loads_with_the_study_caps(root: Path, bundle: Path):
    study = load_study(root / "protocol" / "study.yml")
    sc = load_scenario_from(bundle, study)
    check_rubric_weights(sc)
    assert (sc.id, sc.title, sc.occupation, sc.generator) == (SID, TITLE, OCCUPATION, "test_01")
    assert sc.caps == study.caps_for(SID) == study.global_caps
    assert [d.kind for d in sc.deliverables] == ["xlsx", "docx", "completion_record"]
    assert all(set(c.anchors) == {0, 2, 4} for c in sc.rubric.criteria)
    # Every deliverable has at least one active criterion besides its presence.
    for d in sc.deliverables:
        assert [c for c in sc.oracle.criteria if c.file == d.name and c.kind != "present"], d.name


def test_the_library_module_is_found_in_the_scratch_repository(root: Path, checked: dict):
    assert Path(checked["pilot"]).is_relative_to(root)
    assert Path(checked["root"]) == root.resolve()
    assert Path(checked["module"]) == root / "src" / "pilot" / "scenarios" / "library" / "test_01.py"


def test_inputs_regenerate_byte_for_byte(checked: dict):
    assert checked["inputs"] == []


@pytest.mark.usefixtures("soffice")
def test_gold_passes_every_active_criterion(checked: dict, bundle: Path, root: Path):
    gold = checked["gold"]
    assert gold["failed"] == [] and gold["errors"] == []
    assert gold["D"] is True and gold["E"] is False
    sc = load_scenario_from(bundle, load_study(root / "protocol" / "study.yml"))
    assert gold["criteria"] == [c.id for c in sc.oracle.criteria]


def test_root_defaults_to_the_repository_root(checked: dict, root: Path):
    assert checked["default_root"]
    assert all(Path(p).is_relative_to(root.resolve()) for p in checked["default_root"])
    assert not (paths.SCENARIOS_DIR / "TEST-02").exists()


# ----------------------------------------------------------------------------- what is left to write


def test_todo_markers_are_listed_in_every_authored_file(bundle: Path, module_path: Path):
    found = todo_markers(bundle, module_path)
    by_file: dict[str, list[int]] = {}
    for entry in found:
        m = re.fullmatch(r"(.+):(\d+): (.*)", entry)
        assert m, entry
        path, line, text = Path(m.group(1)), int(m.group(2)), m.group(3)
        assert MARKER in text
        assert MARKER in path.read_text(encoding="utf-8").splitlines()[line - 1]
        by_file.setdefault(path.name, []).append(line)
    assert {"brief.md", "oracle.yml", "rubric.yml", module_path.name, "test_mutations_test_01.py"} <= set(by_file)
    assert found == todo_markers(bundle, module_path)


def test_a_finished_bundle_lists_no_markers():
    assert (
        todo_markers(
            paths.SCENARIOS_DIR / "OPS-01", paths.ROOT / "src" / "pilot" / "scenarios" / "library" / "ops_01.py"
        )
        == []
    )


def _uncommented(text: str) -> str:
    """The file with its commented examples (``#`` then two spaces of YAML indentation) put back."""
    return re.sub(r"(?m)^# (  .*)$", r"\1", text)


def test_every_criterion_kind_has_a_commented_example_that_loads(root: Path, bundle: Path, tmp_path: Path):
    oracle_text = (bundle / "oracle.yml").read_text(encoding="utf-8")
    for kind in CRITERION_PARAMS:
        assert re.search(rf"(?m)^#   - (\{{id: \w+, |id: \w+\n#     )kind: {kind}\b", oracle_text), kind
    # Uncommented (with the commented CSV deliverable and a brief that names it), the examples load as written.
    copy = shutil.copytree(bundle, tmp_path / SID)
    for name in ("scenario.yml", "oracle.yml", "rubric.yml"):
        (copy / name).write_text(_uncommented((copy / name).read_text(encoding="utf-8")), encoding="utf-8")
    with (copy / "brief.md").open("a", encoding="utf-8") as fh:
        fh.write(f"\n4. **`{skeleton.REGISTER}`** — the register.\n")
    sc = load_scenario_from(copy, load_study(root / "protocol" / "study.yml"))
    assert {c.kind for c in sc.oracle.criteria} == set(CRITERION_PARAMS)
    assert skeleton.REGISTER in [d.name for d in sc.deliverables]
    assert len(sc.rubric.criteria) == 5


# ----------------------------------------------------------------------------- refusals


def _refused(root: Path, match: str, sid: str = "NEW-01", **kw) -> None:
    before = _tree(root)
    args = {"occupation": "finance", "title": "A title", **kw}
    with pytest.raises(ValueError, match=match):
        new_scenario(sid, root=root, **args)
    assert _tree(root) == before, "a refusal wrote something"


@pytest.mark.parametrize(
    "sid", ["test-01", "TEST01", "TEST-1", "TEST-001", "T3ST-01", "", " TEST-09", "TEST-09\n", "TEST_09"]
)
def test_an_id_outside_the_protocol_pattern_is_refused(root: Path, written: list[Path], sid: str):
    assert not re.fullmatch(SCENARIO_ID, sid)
    _refused(root, re.escape(f"scenario id {sid!r}: does not match the protocol's pattern"), sid)


@pytest.mark.parametrize("sid", [SID, "OPS-01"])
def test_an_existing_bundle_is_refused(root: Path, written: list[Path], sid: str):
    _refused(root, rf"scenario {sid}: the bundle .*protocol/scenarios/{sid} already exists", sid)


def test_an_existing_library_module_is_refused(root: Path, written: list[Path]):
    module = skeleton_paths("MOD-01", root)[1]
    module.write_text('"""A module of the same name, written before the bundle."""\n', encoding="utf-8")
    _refused(root, r"scenario MOD-01: the library module .*library/mod_01\.py already exists", "MOD-01")
    assert not skeleton_paths("MOD-01", root)[0].exists()


def test_an_existing_test_file_is_refused(root: Path, written: list[Path]):
    tests = skeleton.mutation_tests_path("TST-01", root)
    tests.write_text('"""Tests of the same name, written before the bundle."""\n', encoding="utf-8")
    _refused(root, r"scenario TST-01: the test file .*tests/test_mutations_tst_01\.py already exists", "TST-01")
    assert not skeleton_paths("TST-01", root)[0].exists() and not skeleton_paths("TST-01", root)[1].exists()


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("occupation", "", "occupation is empty"),
        ("occupation", "   ", "occupation is empty"),
        ("title", "", "title is empty"),
        ("title", "\t\n", "title is empty"),
        ("title", "Two\nlines", "title spans several lines"),
        ("title", "Portal reconciliation", "title mentions the portal"),
    ],
)
def test_an_empty_or_unusable_field_is_refused(root: Path, written: list[Path], field: str, value: str, reason: str):
    _refused(root, rf"scenario NEW-01: {reason}", **{field: value})


def test_a_root_without_a_study_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match=r"scenario NEW-01: root .* holds no protocol/study\.yml"):
        new_scenario("NEW-01", occupation="finance", title="A title", root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_installing_leaves_nothing(root: Path, written: list[Path], monkeypatch: pytest.MonkeyPatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(skeleton.shutil, "copytree", full_disk)
    before = _tree(root)
    with pytest.raises(OSError, match="No space left"):
        new_scenario("NEW-02", occupation="finance", title="A title", root=root)
    assert _tree(root) == before
    assert not any(p.exists() for p in skeleton_paths("NEW-02", root))
    assert not skeleton.mutation_tests_path("NEW-02", root).exists()


@pytest.mark.usefixtures("soffice")
def test_check_names_what_to_fill_in_and_passes_once_it_is_filled_in(
    root: Path, written: list[Path], bundle: Path, module_path: Path
) -> None:
    env = {**os.environ, "PILOT_ROOT": str(root), "PYTHONPATH": str(root / "src")}

    def pilot(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pilot", "scenarios", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=root,
        )

    first = pilot("check", SID, "--json")
    assert first.returncode == 1, first.stderr
    rows = {r["check"]: r for r in json.loads(first.stdout.splitlines()[0])}
    assert rows["finished"]["verdict"] == "FAIL" and MARKER in rows["finished"]["reason"]
    assert [c for c, r in rows.items() if r["verdict"] != "pass"] == ["finished"], rows
    # The author's part, in its smallest form: every marker answered, the inputs written again from the generator.
    for path in [
        *(bundle / name for name in skeleton.BUNDLE_FILES),
        module_path,
        skeleton.mutation_tests_path(SID, root),
    ]:
        path.write_text(path.read_text(encoding="utf-8").replace(MARKER, "Decided"), encoding="utf-8")
    assert todo_markers(bundle, module_path) == []
    assert pilot("generate", SID).returncode == 0
    second = pilot("check", SID)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{SID}: 0 of" in second.stdout and ", 0 failed" in second.stdout
