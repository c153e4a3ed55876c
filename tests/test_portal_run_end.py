"""A run and its portal: health at the end of the run, requests served, and the password kept out of what the harness
keeps."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fake_messages_api import FakeMessagesAPI
from portal_support import make_scenario

from pilot import paths, protocol
from pilot.portal import PortalClient, start_instance
from pilot.portal.content import generate_portal
from pilot.portal.credentials import REDACTED, Credentials
from pilot.portal.instance import PortalRunEnd
from pilot.portal.redaction import redact_bytes, redact_secrets, redact_tree, secret_forms
from pilot.runner import run_attempt

PORTAL_SID = "ACC-01"  # uses_portal: true
FAKE_CLI = paths.ROOT / "tests" / "fake_claude" / "claude"


@pytest.fixture(scope="module")
def content_dir(tmp_path_factory):
    return generate_portal(make_scenario(tmp_path_factory.mktemp("scenarios")))


def _kill(instance) -> None:
    os.kill(instance.pid, signal.SIGKILL)
    instance._process.wait()


# ------------------------------------------------------------------ health and requests


def test_a_live_portal_is_healthy_and_counts_what_it_served(content_dir, tmp_path):
    with start_instance("TEST-01", tmp_path, content_dir=content_dir) as inst:
        client = PortalClient(inst.url, inst.credentials)
        client.sign_in()
        client.list_documents()
        assert inst.health().ok
        end = inst.end_of_run()
    assert end == PortalRunEnd(healthy=True, reason=None, requests=2)  # health checks are not requests
    assert not end.fault and end.infra_error is None and end.note is None
    assert not inst.running


def test_a_portal_that_died_after_serving_is_a_note(content_dir, tmp_path):
    with start_instance("TEST-01", tmp_path, content_dir=content_dir) as inst:
        client = PortalClient(inst.url, inst.credentials)
        client.sign_in()
        client.list_records()
        client.list_documents()
        _kill(inst)
        health = inst.health()
        assert not health.ok and "exited with status -9" in health.reason
        end = inst.end_of_run()
    assert end.fault and end.requests == 3 and end.infra_error is None
    assert "3 request(s)" in end.note and "exited" in end.note


def test_a_portal_that_died_before_serving_is_an_infrastructure_error(content_dir, tmp_path):
    with start_instance("TEST-01", tmp_path, content_dir=content_dir) as inst:
        _kill(inst)
        end = inst.end_of_run()
    assert end.fault and end.requests == 0 and end.note is None
    assert end.infra_error.startswith("portal_died:")


def test_a_portal_that_stopped_answering_is_not_healthy(content_dir, tmp_path):
    with start_instance("TEST-01", tmp_path, content_dir=content_dir) as inst:
        os.kill(inst.pid, signal.SIGSTOP)
        try:
            health = inst.health(timeout_s=1.0)
        finally:
            os.kill(inst.pid, signal.SIGCONT)
        assert not health.ok and "timed out" in health.reason
        assert inst.health().ok  # answering again once it runs


def test_a_line_cut_short_by_a_kill_does_not_hide_the_requests(content_dir, tmp_path):
    with start_instance("TEST-01", tmp_path, content_dir=content_dir) as inst:
        PortalClient(inst.url, inst.credentials).sign_in()
        inst.stop()
        with open(inst.access_log_path, "a", encoding="utf-8") as fh:
            fh.write('{"action": "api", "pa')
        assert inst.requests_served() == 1


# ------------------------------------------------------------------ redaction


def test_secret_forms_cover_the_password_and_the_basic_token():
    creds = Credentials("analyst-abc123", "s3cret-Pass_word-0123456789")
    token = base64.b64encode(b"analyst-abc123:s3cret-Pass_word-0123456789").decode()
    assert secret_forms(creds) == (creds.password, token)
    text = (
        f'{{"cmd": "curl -u analyst-abc123:{creds.password} http://127.0.0.1/api"}}\n'
        f"> Authorization: Basic {token}\n{json.dumps({'password': creds.password})}"
    )
    clean = redact_secrets(text, secret_forms(creds))
    assert creds.password not in clean and token not in clean and clean.count(REDACTED) == 3
    assert "analyst-abc123" in clean  # the username is no secret
    assert redact_bytes(text.encode(), secret_forms(creds)) == clean.encode()
    assert redact_secrets("a b c ab", ["ab", ""]) == "a b c ab"  # too short to be a secret: left alone


def test_redact_tree_skips_the_workspace_and_follows_no_link(tmp_path):
    secret = "Zm9vYmFyLXNlY3JldC1wYXNz"
    run = tmp_path / "run"
    (run / "workspace").mkdir(parents=True)
    (run / "agent" / "config" / "projects").mkdir(parents=True)
    (run / "transcript.jsonl").write_text(json.dumps({"content": f"password {secret}"}) + "\n")
    (run / "agent" / "stderr-0.log").write_text(f"debug {secret}\n")
    (run / "agent" / "config" / "projects" / "s.jsonl").write_text(secret)
    (run / "workspace" / "portal_credentials.json").write_text(json.dumps({"password": secret}))
    outside = tmp_path / "outside.txt"
    outside.write_text(secret)
    (run / "agent" / "link.txt").symlink_to(outside)
    os.chmod(run / "transcript.jsonl", 0o640)
    changed = redact_tree(run, [secret], skip=("workspace",))
    assert sorted(p.relative_to(run).as_posix() for p in changed) == [
        "agent/config/projects/s.jsonl",
        "agent/stderr-0.log",
        "transcript.jsonl",
    ]
    assert REDACTED in json.loads((run / "transcript.jsonl").read_text())["content"]
    assert (run / "transcript.jsonl").stat().st_mode & 0o777 == 0o640
    assert secret in (run / "workspace" / "portal_credentials.json").read_text()
    assert outside.read_text() == secret
    assert not [p for p in run.rglob(".*") if p.is_file()]  # no temporary file left beside


# ------------------------------------------------------------------ the runner


# A simulated A3 run: its worker saves workbooks through LibreOffice (confined), as A3 workers do.
@pytest.mark.usefixtures("soffice")
def test_a_run_whose_portal_died_unused_is_an_infrastructure_error(tmp_path):
    def starter(scenario_id, run_dir):
        inst = start_instance(scenario_id, run_dir)
        _kill(inst)  # gone before the worker starts
        return inst

    rec = run_attempt(
        PORTAL_SID, "A3", backend="simulated", out_dir=tmp_path / "run", seed=5, evaluate=False, portal_starter=starter
    )
    assert rec.status == "infra_error" and rec.infra_error.startswith("portal_died:")
    assert rec.portal_requests == 0 and rec.portal_fault is True
    assert rec.D is None and rec.E is None
    saved = json.loads((tmp_path / "run" / "run_record.json").read_text())
    assert saved["status"] == "infra_error" and saved["portal_fault"] is True


# A simulated A3 run: its worker saves workbooks through LibreOffice (confined), as A3 workers do.
@pytest.mark.usefixtures("soffice")
def test_a_run_whose_portal_died_after_use_carries_a_note_and_the_fault(tmp_path):
    def starter(scenario_id, run_dir):
        inst = start_instance(scenario_id, run_dir)
        real_end = inst.end_of_run

        def end_after_a_crash():
            _kill(inst)  # the worker has used it; the server dies before the run ends
            return real_end()

        inst.end_of_run = end_after_a_crash
        return inst

    rec = run_attempt(
        PORTAL_SID, "A3", backend="simulated", out_dir=tmp_path / "run", seed=5, evaluate=False, portal_starter=starter
    )
    assert rec.status != "infra_error" and rec.portal_requests == 6 and rec.portal_fault is True
    assert any(n.startswith("portal fault:") and "6 request(s)" in n for n in rec.notes)
    saved = json.loads((tmp_path / "run" / "run_record.json").read_text())
    assert saved["portal_fault"] is True and saved["notes"] == rec.notes


# A simulated A3 run: its worker saves workbooks through LibreOffice (confined), as A3 workers do.
@pytest.mark.usefixtures("soffice")
def test_a_healthy_portal_run_has_no_fault(tmp_path):
    rec = run_attempt(PORTAL_SID, "A3", backend="simulated", out_dir=tmp_path / "a3", seed=5, evaluate=False)
    assert rec.portal_fault is False and rec.portal_requests == 6
    assert not any(n.startswith("portal fault") for n in rec.notes)
    a1 = run_attempt(PORTAL_SID, "A1", backend="simulated", out_dir=tmp_path / "a1", seed=5, evaluate=False)
    assert a1.portal_fault is None and a1.portal_requests is None


@pytest.mark.usefixtures("bwrap")
def test_the_password_a_worker_echoes_is_redacted_from_what_the_harness_keeps(tmp_path, worker_env):
    echo = (
        "cat portal_credentials.json; python3 -c \"import base64,json; c=json.load(open('portal_credentials.json')); "
        "print('Authorization: Basic ' + base64.b64encode((c['username'] + ':' + c['password']).encode()).decode())\""
    )
    script = json.dumps({"sessions": [{"steps": [{"tool": "Bash", "input": {"command": echo}}]}]})
    run_dir = tmp_path / "runs" / "r1"
    # The script goes inline (the sandbox sees no file of the test's); the model proxy forwards the double's check to a
    # stand-in API.
    with FakeMessagesAPI(protocol.study()["worker"]["model"], []) as api:
        rec = run_attempt(
            PORTAL_SID,
            "A3",
            backend="claude-code",
            out_dir=run_dir,
            seed=7,
            claude_bin=FAKE_CLI,
            worker_env=worker_env,
            extra_env={"FAKE_CLAUDE_SCRIPT": script},
            evaluate=False,
            record_from_proxy=False,
            environ={"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "k"},
        )
    creds = json.loads((Path(rec.workspace) / "portal_credentials.json").read_text())  # the worker's copy stays
    forms = secret_forms(Credentials(creds["username"], creds["password"]))
    transcript = Path(rec.transcript).read_text()
    assert transcript.count(REDACTED) >= 2, "the worker's echo should have put the secrets in the transcript"
    assert creds["username"] in transcript
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink() and "workspace" not in path.relative_to(run_dir).parts:
            data = path.read_bytes()
            for form in forms:
                assert form.encode() not in data, path
    for form in forms:
        assert form not in json.dumps(rec.to_dict())


def test_portal_generate_refuses_a_scenario_without_a_portal():
    without = next(
        d.name
        for d in sorted(paths.SCENARIOS_DIR.iterdir())
        if (d / "scenario.yml").is_file() and "uses_portal: false" in (d / "scenario.yml").read_text()
    )
    for extra in ([], ["--check"]):
        run = subprocess.run(
            [sys.executable, "-m", "pilot", "portal", "generate", without, *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 1
        assert f"{without}/scenario.yml: uses_portal: is False, not true" in run.stderr
    assert not (paths.SCENARIOS_DIR / without / "portal").exists()


@pytest.mark.usefixtures("bwrap", "soffice")
def test_the_scheduler_gets_a_dead_unused_portal_as_an_infrastructure_error_to_rerun(tmp_path, monkeypatch):
    """Through the scheduler's run function, with the runner's own portal start (no starter passed)."""
    import pilot.portal
    from pilot import pipeline
    from pilot.attempt import CellSpec

    real_start = pilot.portal.start_instance

    def start_then_die(scenario_id, run_dir, **kw):
        inst = real_start(scenario_id, run_dir, **kw)
        _kill(inst)
        return inst

    monkeypatch.setattr(pilot.portal, "start_instance", start_then_die)
    cell = CellSpec(
        run_id="r-0001",
        study="t",
        wave="pilot",
        scenario=PORTAL_SID,
        arm="A3",
        repeat=1,
        model="m",
        order_index=0,
        seed=5,
        cap_usd=6.0,
        wall_s=3600.0,
        reserve_usd=6.0,
    )
    outcome = pipeline.run_cell(cell, tmp_path / "attempt-1", "linux-1", "simulated", 5)
    assert outcome.infra_error is not None and outcome.infra_error.startswith("portal_died:")
    assert outcome.record["portal_fault"] is True and outcome.record["portal_requests"] == 0


# A simulated A3 run: its worker saves workbooks through LibreOffice (confined), as A3 workers do.
@pytest.mark.usefixtures("soffice")
def test_an_attempt_killed_before_its_redaction_is_redacted_by_the_next(tmp_path):
    """The scheduler keeps <run id>/attempt-N; the next attempt cleans a killed one's folder with the pair in its
    workspace."""
    run = tmp_path / "r-0001"
    killed = run / "attempt-1"
    (killed / "workspace").mkdir(parents=True)
    (killed / "record").mkdir()
    creds = Credentials.generate()
    creds.write_workspace_file(killed / "workspace", "http://127.0.0.1:1")
    token = secret_forms(creds)[1]
    (killed / "transcript.jsonl").write_text(
        json.dumps({"type": "user", "content": f"password {creds.password}"}) + "\n"
    )
    (killed / "record" / "stderr-0.log").write_text(f"Authorization: Basic {token}\n")
    run_attempt(PORTAL_SID, "A3", backend="simulated", out_dir=run / "attempt-2", seed=5, evaluate=False)
    assert (
        REDACTED in (killed / "transcript.jsonl").read_text()
        and creds.password not in (killed / "transcript.jsonl").read_text()
    )
    assert token not in (killed / "record" / "stderr-0.log").read_text()
    assert (
        creds.password in (killed / "workspace" / "portal_credentials.json").read_text()
    )  # the workspace is kept as it was


@pytest.mark.usefixtures("bwrap")
def test_the_stream_copy_is_redacted_as_it_is_written(tmp_path, worker_env, monkeypatch):
    """Without the end-of-run safety net, the harness's transcript still never holds the password."""
    import pilot.portal.redaction as redaction

    monkeypatch.setattr(redaction, "redact_tree", lambda *a, **k: None)  # the end-of-run pass, switched off
    script = json.dumps(
        {"sessions": [{"steps": [{"tool": "Bash", "input": {"command": "cat portal_credentials.json"}}]}]}
    )
    run_dir = tmp_path / "runs" / "r1"
    with FakeMessagesAPI(protocol.study()["worker"]["model"], []) as api:
        rec = run_attempt(
            PORTAL_SID,
            "A3",
            backend="claude-code",
            out_dir=run_dir,
            seed=7,
            claude_bin=FAKE_CLI,
            worker_env=worker_env,
            extra_env={"FAKE_CLAUDE_SCRIPT": script},
            evaluate=False,
            record_from_proxy=False,
            environ={"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "k"},
        )
    creds = json.loads((Path(rec.workspace) / "portal_credentials.json").read_text())
    transcript = Path(rec.transcript).read_text()
    assert creds["username"] in transcript and REDACTED in transcript  # the echo reached the stream
    assert creds["password"] not in transcript
