"""The committed portals of the real scenario bundles: current, and served."""

from __future__ import annotations

import pytest

from pilot import paths
from pilot.portal import PortalClient, start_instance
from pilot.portal.content import check_portal, load_portal_content, portal_scenarios


def _bundles_with_inputs() -> list[str]:
    return [sid for sid in portal_scenarios() if (paths.SCENARIOS_DIR / sid / "inputs").is_dir()]


def test_every_portal_scenario_has_a_current_portal():
    ids = _bundles_with_inputs()
    if not ids:
        pytest.skip("no scenario with uses_portal: true has its inputs yet")
    problems = [line for sid in ids for line in check_portal(paths.SCENARIOS_DIR / sid)]
    assert problems == [], "run `pilot portal generate`:\n" + "\n".join(problems)


def test_a_real_scenario_portal_serves_its_inputs(tmp_path):
    ids = [sid for sid in _bundles_with_inputs() if paths.scenario_portal_dir(sid).is_dir()]
    if not ids:
        pytest.skip("no scenario portal generated yet")
    sid = ids[0]
    inputs = paths.SCENARIOS_DIR / sid / "inputs"
    content = load_portal_content(paths.scenario_portal_dir(sid))
    with start_instance(sid, tmp_path) as portal:  # the committed content, as the runner starts it
        client = PortalClient(portal.url, portal.credentials)
        client.sign_in()
        assert {d["name"] for d in client.list_documents()} == set(content.documents)
        records = client.list_records()
        assert {r["id"] for r in records} == set(content.records)
        assert content.documents or content.records
        for name in list(content.documents)[:2]:
            assert client.download(name, tmp_path / "dl" / name).read_bytes() == (inputs / name).read_bytes()
        for rec in list(content.records.values())[:2]:
            saved = client.download_record(rec.id, "csv", tmp_path / "dl")
            assert saved.read_bytes() == (inputs / rec.source).read_bytes()
            assert len(client.record(rec.id)["rows"]) == rec.n_rows


def test_scenarios_generate_keeps_the_portal_in_step_with_the_inputs(tmp_path):
    """`pilot scenarios generate` rebuilds a portal bundle's content with its inputs; `--check` catches a stale
    portal."""
    import os
    import shutil
    import subprocess
    import sys

    sid = "ACC-01"
    if sid not in _bundles_with_inputs() or not paths.scenario_portal_dir(sid).is_dir():
        pytest.skip(f"{sid} has no inputs or portal yet")
    # A repository root of its own (PILOT_ROOT): the real protocol, a copy of the one bundle it rewrites.
    root = tmp_path / "root"
    (root / "protocol" / "scenarios").mkdir(parents=True)
    (root / "analysis").mkdir()
    for name in ("study.yml", "arms", "amendments.csv", "completion_record.schema.json"):
        os.symlink(paths.PROTOCOL_DIR / name, root / "protocol" / name)
    os.symlink(paths.CONFIG_DIR, root / "analysis" / "config")
    bundle = root / "protocol" / "scenarios" / sid
    shutil.copytree(paths.SCENARIOS_DIR / sid, bundle)
    env = dict(os.environ, PILOT_ROOT=str(root))

    def pilot(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pilot", "scenarios", "generate", sid, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert pilot("--check").returncode == 0
    stale = bundle / "portal" / "records" / "bank-statement-2026-10.csv"
    stale.write_text("date,description\n", encoding="utf-8")
    (bundle / "portal" / "documents" / "left-over.txt").write_text("x", encoding="utf-8")
    checked = pilot("--check")
    assert checked.returncode == 1
    assert "bank-statement-2026-10.csv: differs from the generator's output" in checked.stdout
    assert "left-over.txt: not made by the generator" in checked.stdout
    made = pilot()
    assert made.returncode == 0, made.stderr
    assert f"{sid}: wrote the portal content to {bundle / 'portal'}" in made.stdout
    assert not (bundle / "portal" / "documents" / "left-over.txt").exists()
    assert check_portal(bundle) == [] and pilot("--check").returncode == 0
