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


def test_a_file_that_left_the_frozen_scope_unchanged_does_not_block_but_an_edited_one_does(tmp_path):
    root, code = _tree(tmp_path)
    m = freeze.take_manifest(root, code)
    # The last version of the `pilot check` command under pilot/oracles/ (commit c6b2d2d), byte for byte.
    import hashlib

    kept = Path(__file__).parent / "fixtures" / "frozen" / "oracles_cli_c6b2d2d.py.txt"
    last = hashlib.sha256(kept.read_bytes()).hexdigest()
    assert last in freeze.LEFT_SCOPE["pilot/oracles/cli.py"][1]
    report = freeze.verify({**m, "pilot/oracles/cli.py": last}, root, code)
    assert report.ok and report.left_scope == ["pilot/oracles/cli.py"]
    assert report.lines() == [
        f"freeze verified: {len(m)} files unchanged",
        "  pilot/oracles/cli.py left the frozen scope unchanged (now pilot/cli/check.py, not oracle code)",
    ]
    edited = freeze.verify({**m, "pilot/oracles/cli.py": "0" * 64}, root, code)
    assert not edited.ok and [(c.path, c.change) for c in edited.changes] == [("pilot/oracles/cli.py", "removed")]
