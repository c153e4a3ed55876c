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
