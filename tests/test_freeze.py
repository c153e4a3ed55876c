"""Freeze verification: a manifest at pilot start; any change is reported file by file and blocks pooling."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from schedule_support import make_root

from pilot import freeze


def _tree(tmp: Path) -> tuple[Path, Path]:
    root = tmp / "repo"
    scen = root / "protocol" / "scenarios" / "ACC-01"
    (scen / "inputs").mkdir(parents=True)
    for name, text in {
        "scenario.yml": "id: ACC-01\ngenerator: acc_01\n",
        "oracle.yml": "criteria: []\n",
        "rubric.yml": "criteria: []\n",
        "BRIEF.md": "Close the books.\n",
        "inputs/ledger.csv": "a,b\n1,2\n",
    }.items():
        (scen / name).write_text(text)
    arms = root / "protocol" / "arms"
    arms.mkdir(parents=True)
    (arms / "A0.md").write_text("No shell.\n")
    (arms / "arms.yml").write_text("arms: {}\n")
    code = root / "src" / "pilot" / "oracles"
    code.mkdir(parents=True)
    (code / "evaluate.py").write_text("X = 1\n")
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "evaluate.cpython-311.pyc").write_bytes(b"\0")
    lib = root / "src" / "pilot" / "scenarios" / "library"
    lib.mkdir(parents=True)
    (lib / "acc_01.py").write_text("def solve(): pass\n")
    (lib / "shared.py").write_text("Z = 3\n")
    return root, code


def test_manifest_covers_scenarios_oracles_rubrics_and_arms(tmp_path):
    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code)
    assert set(m) == {
        "protocol/scenarios/ACC-01/scenario.yml",
        "protocol/scenarios/ACC-01/oracle.yml",
        "protocol/scenarios/ACC-01/rubric.yml",
        "protocol/scenarios/ACC-01/BRIEF.md",
        "protocol/scenarios/ACC-01/inputs/ledger.csv",
        "protocol/arms/A0.md",
        "protocol/arms/arms.yml",
        "pilot/oracles/evaluate.py",
        "pilot/scenarios/library/acc_01.py",
        "pilot/scenarios/library/shared.py",
    }
    assert all(len(h) == 64 for h in m.values())
    assert freeze.verify(m, root, code).ok
    # the repository's own manifest holds the arm texts and the oracle code
    real = freeze.take_manifest()
    assert "protocol/arms/policy.md" in real and any(k.startswith("pilot/oracles/") for k in real)


def test_every_change_reported_file_by_file_and_blocks(tmp_path):
    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code)
    scen = root / "protocol" / "scenarios" / "ACC-01"
    (scen / "rubric.yml").write_text("criteria: [{id: c1}]\n")
    (scen / "inputs" / "ledger.csv").unlink()
    (root / "protocol" / "arms" / "A0.md").write_text("No shell at all.\n")
    (code / "extra.py").write_text("Y = 2\n")
    report = freeze.verify(m, root, code)
    assert not report.ok
    got = {(c.path, c.category, c.change) for c in report.changes}
    assert got == {
        ("protocol/scenarios/ACC-01/rubric.yml", "rubric", "modified"),
        ("protocol/scenarios/ACC-01/inputs/ledger.csv", "scenario", "removed"),
        ("protocol/arms/A0.md", "arm", "modified"),
        ("pilot/oracles/extra.py", "oracle", "added"),
    }
    assert list(report.summary.columns) == ["path", "category", "change", "frozen_sha256", "current_sha256"]
    with pytest.raises(freeze.FreezeViolation) as err:
        report.raise_if_changed()
    for path, _, _ in got:
        assert path in str(err.value)


def test_a_scenario_outside_the_study_does_not_block_but_shared_code_does(tmp_path):
    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code, scenarios=["ACC-01"])
    new = root / "protocol" / "scenarios" / "BANK-01"
    new.mkdir()
    (new / "scenario.yml").write_text("id: BANK-01\ngenerator: bank_01\n")
    lib = root / "src" / "pilot" / "scenarios" / "library"
    (lib / "bank_01.py").write_text("def solve(): pass\n")
    assert freeze.verify(m, root, code, scenarios=["ACC-01"]).ok
    assert not freeze.verify(m, root, code).ok  # without the study's list, the new bundle counts
    (lib / "shared.py").write_text("Z = 4\n")
    (lib / "acc_01.py").write_text("def solve(): return 1\n")
    changed = {c.path for c in freeze.verify(m, root, code, scenarios=["ACC-01"]).changes}
    assert changed == {"pilot/scenarios/library/shared.py", "pilot/scenarios/library/acc_01.py"}


def test_cli_takes_manifest_at_pilot_start_and_export_refuses_to_pool_a_changed_protocol(tmp_path):
    root = make_root(tmp_path)
    env = dict(os.environ, PILOT_ROOT=str(root))
    pilot = [sys.executable, "-m", "pilot", "study"]

    def run(*args):
        return subprocess.run([*pilot, *args], env=env, capture_output=True, text=True)

    assert run("create", "f", "--scenarios", "ACC-01").returncode == 0
    early = run("run", "f", "--wave", "repeat3", "--runner", "pilot.simulated.fake_runs:noop_run", "--no-progress")
    assert early.returncode == 2 and "run the pilot wave first" in early.stderr
    for wave in ("pilot", "repeat3"):
        r = run("run", "f", "--wave", wave, "--runner", "pilot.simulated.fake_runs:noop_run", "--no-progress")
        assert r.returncode == 0, r.stderr
    ok = run("verify-freeze", "f")
    assert ok.returncode == 0 and "unchanged" in ok.stdout

    db = root / "analysis" / "data" / "f" / "study.sqlite"
    conn = sqlite3.connect(db)
    manifest = json.loads(conn.execute("SELECT freeze_manifest_json FROM studies").fetchone()[0])
    assert "protocol/arms/A3.md" in manifest
    manifest["protocol/arms/A3.md"] = "0" * 64  # as if A3's text had been edited after the pilot started
    conn.execute("UPDATE studies SET freeze_manifest_json = ?", (json.dumps(manifest),))
    conn.commit()
    conn.close()

    bad = run("verify-freeze", "f")
    assert bad.returncode == 1 and "modified" in bad.stdout and "protocol/arms/A3.md" in bad.stdout
    blocked = run("export", "f")
    assert blocked.returncode == 2 and "pooling blocked" in blocked.stderr and "protocol/arms/A3.md" in blocked.stderr
    assert not (root / "analysis" / "data" / "f" / "runs.csv").exists()


def _verdicts(**criteria: bool) -> freeze.Verdicts:
    return {"ACC-01": {"gold": {"D": 1, "E": 0, "criteria": dict(criteria)}}}


def test_changed_code_with_the_frozen_verdicts_is_accepted_once_and_then_recorded(tmp_path):
    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code)
    frozen = _verdicts(c1=True, c2=True)
    lock = freeze.FreezeLock("0.1.0", freeze.code_digest(m), "abc123", frozen)
    # the lock's code digest covers the code alone: a rubric edit leaves it as it was
    assert lock.code_digest == freeze.manifest_digest({k: v for k, v in m.items() if k.startswith("pilot/")})
    (code / "evaluate.py").write_text("X = 1  # the same oracle, refactored\n")
    asked: list[list[str]] = []

    def same(ids: list[str]) -> freeze.Verdicts:
        asked.append(ids)
        return _verdicts(c1=True, c2=True)

    report = freeze.verify(m, root, code, lock=lock, rederive=same)
    assert asked == [["ACC-01"]]
    assert report.ok and report.accepted_by == "re-derived" and report.packages_compared == 1
    assert [(c.path, c.change) for c in report.accepted_code] == [("pilot/oracles/evaluate.py", "modified")]
    assert report.lines()[0] == f"freeze verified: {len(m) - 1} files unchanged"
    assert "identical: accepted and recorded" in report.lines()[1]
    assert freeze.accept(lock, report) and lock.accepted[0]["code_digest"] == report.code_digest
    assert not freeze.accept(lock, report)  # recorded once

    def never(ids: list[str]) -> freeze.Verdicts:
        raise AssertionError("accepted code is not derived again")

    again = freeze.verify(m, root, code, lock=freeze.FreezeLock.from_json(lock.to_json()), rederive=never)
    assert again.ok and again.accepted_by == "recorded"


def test_changed_code_with_other_verdicts_blocks_and_names_the_commit_to_resume_with(tmp_path):
    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code)
    lock = freeze.FreezeLock("0.1.0", freeze.code_digest(m), "abc123", _verdicts(c1=True, c2=True))
    (code / "evaluate.py").write_text("X = 2\n")
    report = freeze.verify(m, root, code, lock=lock, rederive=lambda ids: _verdicts(c1=True, c2=False))
    assert not report.ok and report.differences == ["ACC-01 gold: c2 passes -> fails"]
    assert [(c.path, c.category) for c in report.changes] == [("pilot/oracles/evaluate.py", "oracle")]
    assert report.resume_with == "commit abc123 (pilot 0.1.0)"
    assert report.lines()[-1] == "  resume this study with commit abc123 (pilot 0.1.0), the code that froze it"
    with pytest.raises(freeze.FreezeViolation, match="commit abc123"):
        report.raise_if_changed()
    # D and E are compared too, and a package no longer made is a difference
    gone = freeze.verdict_differences(
        {"S": {"gold": {"D": 1, "E": 0, "criteria": {}}, "no-op": {"D": 0, "E": 0, "criteria": {}}}},
        {"S": {"gold": {"D": 0, "E": 0, "criteria": {}}}},
    )
    assert gone == ["S gold: D 1 -> 0", "S no-op: no longer made"]


def test_a_protocol_change_blocks_whatever_the_verdicts_and_a_lock_without_verdicts_names_its_commit(tmp_path):
    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code)
    lock = freeze.FreezeLock("0.1.0", freeze.code_digest(m), "abc123", _verdicts(c1=True))
    (code / "evaluate.py").write_text("X = 2\n")
    (root / "protocol" / "arms" / "A0.md").write_text("A shell after all.\n")

    def never(ids: list[str]) -> freeze.Verdicts:
        raise AssertionError("a changed protocol blocks before any verdict is derived")

    report = freeze.verify(m, root, code, lock=lock, rederive=never)
    assert {c.path for c in report.changes} == {"pilot/oracles/evaluate.py", "protocol/arms/A0.md"}
    (root / "protocol" / "arms" / "A0.md").write_text("No shell.\n")
    bare = freeze.FreezeLock("0.1.0", freeze.code_digest(m), "abc123", None)
    report = freeze.verify(m, root, code, lock=bare, rederive=never)
    assert not report.ok and report.resume_with == "commit abc123 (pilot 0.1.0) (it recorded no verdicts)"


def test_a_study_frozen_before_locks_names_the_last_commit_before_its_manifest(tmp_path):
    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code)
    (code / "evaluate.py").write_text("X = 2\n")
    repo = Path(freeze.__file__).resolve().parent
    git = ["git", "-C", str(repo), "log", "-1", "--before=2026-12-01T00:00:00", "--format=%H"]
    expected = subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
    report = freeze.verify(m, root, code, taken_at="2026-12-01T00:00:00")
    assert not report.ok and expected and report.resume_with.startswith(f"commit {expected}, the last before")


def _code_copy(tmp: Path, name: str, edit: tuple[str, str, str]) -> dict[str, str]:
    """The package copied beside the test with one edit (file, old, new) made in it; the environment running it."""
    import shutil

    src = tmp / name
    shutil.copytree(Path(freeze.__file__).resolve().parent, src / "pilot", ignore=shutil.ignore_patterns("__pycache__"))
    rel, old, new = edit
    target = src / "pilot" / rel
    text = target.read_text(encoding="utf-8")
    assert old in text
    target.write_text(text.replace(old, new), encoding="utf-8")
    return {"PYTHONPATH": str(src)}


def test_a_frozen_study_resumed_with_refactored_oracle_code(tmp_path):
    """A study frozen with its verdicts; the oracle code refactored in a copied tree: a behaviour-neutral edit is
    accepted and recorded, an edit that changes a verdict is refused with the commit that froze the study named."""
    root = make_root(tmp_path)
    env = dict(os.environ, PILOT_ROOT=str(root))

    def run(*args, extra=None):
        return subprocess.run(
            [sys.executable, "-m", "pilot", "study", *args],
            env={**env, **(extra or {})},
            capture_output=True,
            text=True,
        )

    assert run("create", "f", "--scenarios", "OPS-01").returncode == 0
    fake = ("--runner", "pilot.simulated.fake_runs:noop_run", "--no-progress")
    assert run("run", "f", "--wave", "pilot", "--record-verdicts", *fake).returncode == 0
    assert run("run", "f", "--wave", "repeat3", *fake).returncode == 0
    db = root / "analysis" / "data" / "f" / "study.sqlite"

    def lock() -> dict:
        with sqlite3.connect(db) as conn:
            return json.loads(conn.execute("SELECT freeze_lock_json FROM studies").fetchone()[0])

    frozen = lock()
    head = subprocess.run(
        ["git", "-C", str(Path(freeze.__file__).parent), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert head and frozen["commit"].startswith(head)
    # gold, no-op and one mutation per criterion of OPS-01's nine (oracle.yml): 11 packages
    assert set(frozen["verdicts"]) == {"OPS-01"} and len(frozen["verdicts"]["OPS-01"]) == 11
    assert frozen["verdicts"]["OPS-01"]["gold"]["D"] == 1 and frozen["verdicts"]["OPS-01"]["no-op"]["D"] == 0

    # A refactoring: a helper renamed. The oracle's bytes change; what it decides does not.
    neutral = _code_copy(tmp_path, "neutral", ("oracles/criteria.py", "_col(", "_column_index("))
    where = subprocess.run(
        [sys.executable, "-c", "import pilot; print(pilot.__file__)"],
        env={**env, **neutral},
        capture_output=True,
        text=True,
    )
    assert where.stdout.strip() == str(tmp_path / "neutral" / "pilot" / "__init__.py")
    ok = run("verify-freeze", "f", extra=neutral)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert (
        "the verdicts of 11 gold, no-op and mutation packages derived again are identical: accepted and recorded"
        in (ok.stdout)
    )
    assert "modified pilot/oracles/criteria.py" in ok.stdout
    accepted = lock()["accepted"]
    assert len(accepted) == 1 and accepted[0]["packages"] == 11
    # The export gets past the freeze (the fake runs then have no outcomes to export: its next refusal).
    exported = run("export", "f", extra=neutral)
    assert "pooling blocked" not in exported.stderr and "fake run function" in exported.stderr
    assert "accepted earlier" in run("verify-freeze", "f", extra=neutral).stdout

    # A change of behaviour: every csv figure accepted within a million of the expected one. Each numeric
    # criterion's mutation lies just outside its tolerance (0 for OPS-01's quantities), so it passes now.
    changed = _code_copy(
        tmp_path,
        "changed",
        ("oracles/criteria.py", "amounts.within(val, expected, tol)", "amounts.within(val, expected, tol + 10**6)"),
    )
    bad = run("verify-freeze", "f", extra=changed)
    assert bad.returncode == 1
    assert "mutation:plan_qty_negative_stock: plan_qty_negative_stock fails -> passes" in bad.stdout
    assert f"resume this study with commit {frozen['commit']} (pilot {frozen['pilot_version']})" in bad.stdout
    blocked = run("export", "f", extra=changed)
    assert blocked.returncode == 2 and "pooling blocked" in blocked.stderr and frozen["commit"] in blocked.stderr
    assert len(lock()["accepted"]) == 1  # nothing recorded for the refused code


def test_a_store_frozen_before_locks_opens_names_its_commit_and_records_verdicts_later(tmp_path):
    """A study frozen before locks were kept (its store has no lock column): it opens, the column is added, a
    changed oracle file blocks and names the last commit before its manifest was taken, and the verdicts can be
    recorded only by the code that froze it."""
    root = make_root(tmp_path)
    env = dict(os.environ, PILOT_ROOT=str(root))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "pilot", "study", *args], env=env, capture_output=True, text=True)

    assert run("create", "f", "--scenarios", "OPS-01").returncode == 0
    fake = ("--runner", "pilot.simulated.fake_runs:noop_run", "--no-progress")
    assert run("run", "f", "--wave", "pilot", *fake).returncode == 0
    db = root / "analysis" / "data" / "f" / "study.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE studies DROP COLUMN freeze_lock_json")  # the schema before locks
        manifest_json, taken_at = conn.execute("SELECT freeze_manifest_json, freeze_taken_at FROM studies").fetchone()
    manifest = json.loads(manifest_json)
    assert "pilot/oracles/criteria.py" in manifest
    with sqlite3.connect(db) as conn:
        edited = {**manifest, "pilot/oracles/criteria.py": "0" * 64}  # as if the oracle had been edited since
        conn.execute("UPDATE studies SET freeze_manifest_json = ?", (json.dumps(edited),))

    git = ["git", "-C", str(Path(freeze.__file__).resolve().parent), "log", "-1", f"--before={taken_at}", "--format=%H"]
    before = subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
    bad = run("verify-freeze", "f")
    assert bad.returncode == 1 and "modified oracle   pilot/oracles/criteria.py" in bad.stdout
    assert f"resume this study with commit {before}, the last before its manifest was taken" in bad.stdout
    refused = run("record-verdicts", "f")
    assert refused.returncode == 2 and "can be recorded only by the code that froze it" in refused.stderr
    assert str(db) in refused.stderr and "pilot/oracles/criteria.py" in refused.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT freeze_lock_json FROM studies").fetchone()[0] is None  # the column is back

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE studies SET freeze_manifest_json = ?", (manifest_json,))
    recorded = run("record-verdicts", "f")
    assert recorded.returncode == 0, recorded.stderr
    assert "the verdicts of 11 packages recorded" in recorded.stdout
    with sqlite3.connect(db) as conn:
        lock = json.loads(conn.execute("SELECT freeze_lock_json FROM studies").fetchone()[0])
    head = subprocess.run([*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert lock["commit"].startswith(head) and lock["verdicts"]["OPS-01"]["gold"]["D"] == 1


def test_a_malformed_lock_is_refused_naming_the_store_and_field(tmp_path):
    from pilot.store import Store
    from pilot.study_freeze import FreezeLockError, verify

    root = make_root(tmp_path)
    env = dict(os.environ, PILOT_ROOT=str(root))
    assert (
        subprocess.run(
            [sys.executable, "-m", "pilot", "study", "create", "f", "--scenarios", "OPS-01"], env=env
        ).returncode
        == 0
    )
    folder = root / "analysis" / "data" / "f"
    with Store.open(folder) as store:
        store.set_freeze_manifest({"protocol/arms/A0.md": "0" * 64})
        store.set_freeze_lock(
            {"pilot_version": "0.1.0", "code_digest": 7, "commit": None, "verdicts": None, "accepted": []}
        )
        with pytest.raises(
            FreezeLockError, match=r"study\.sqlite: studies\.freeze_lock_json of study f: field 'code_digest'"
        ):
            verify(store)


def test_the_stage_writes_the_freeze_check_as_the_manuscript_reads_it(tmp_path):
    from dataclasses import replace

    import pandas as pd

    from pilot import study_freeze
    from pilot.store import StudyInfo

    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code)
    (root / "protocol" / "arms" / "A0.md").write_text("No shell at all.\n")
    report = freeze.verify(m, root, code)
    info = StudyInfo("s1", 1, "2026-04-15", "1", "m", ["ACC-01"], None, None, m, "2026-04-15T09:30:00+00:00")
    out = study_freeze.write_outputs(report, info, tmp_path / "t", tmp_path / "g")
    macros = out["macros"].read_text(encoding="utf-8")
    assert "\\newcommand{\\FreezeTakenAt}{2026-04-15}" in macros and "\\FreezeSentence" in macros
    table = pd.read_csv(out["table"])
    assert list(table["path"]) == ["protocol/arms/A0.md"] and set(table["ok"]) == {False}
    assert out["table"].name == "freeze_s1.csv"
    # Before the pilot: no manifest, one sentence saying nothing was pooled, and no table.
    out = study_freeze.write_outputs(None, replace(info, freeze_manifest=None), tmp_path / "t2", tmp_path / "g2")
    assert set(out) == {"macros"} and study_freeze.NO_MANIFEST_SENTENCE in out["macros"].read_text(encoding="utf-8")
