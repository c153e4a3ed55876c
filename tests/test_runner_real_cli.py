"""The real pinned CLI, launched exactly as a run launches it, against a scripted Messages API on loopback.

Needs a real CLI (the ``real_cli`` fixture: the one bundled in ``claude-agent-sdk``,
``pip install -e '.[agent]'``, or the file named by ``PILOT_TEST_CLAUDE_BIN``) and the sandbox.
No request leaves the machine: ``ANTHROPIC_BASE_URL`` points at the fake API.
"""

from __future__ import annotations

import pytest
from fake_messages_api import FakeMessagesAPI, text_turn, tool_turn

from pilot import protocol
from pilot.agents import claude_code, sandbox
from pilot.protocol import Caps
from pilot.runner import run_attempt

SID = "LEGAL-01"


pytestmark = pytest.mark.usefixtures("real_cli", "bwrap")


@pytest.fixture
def not_bare(monkeypatch):
    # The pinned CLI's --bare leaves Bash, Edit and Read only (A-010; see test_bare_mode_strips_the_tool_set).
    monkeypatch.setitem(protocol.study().raw["cli"], "bare", False)


def _run(tmp_path, arm, api, worker_env, cli, caps=Caps(20.0, 120)):
    # The cap covers the model proxy's worst case of a request (its input plus max_tokens at the output price).
    return run_attempt(
        SID,
        arm,
        backend="claude-code",
        out_dir=tmp_path / "runs" / "r",
        seed=1,
        claude_bin=cli,
        caps=caps,
        worker_env=worker_env,
        evaluate=False,
        environ={"ANTHROPIC_API_KEY": "sk-ant-test-only", "ANTHROPIC_BASE_URL": api.url},
    )


def test_denials_hold_both_ways_and_the_stream_is_read(tmp_path, worker_env, real_cli, not_bare):
    out = tmp_path / "runs" / "r" / "workspace" / "outputs" / "note.md"
    turns = [
        tool_turn("Bash", {"command": "bash -c 'curl --version'; echo rc=$?", "description": "probe"}, "toolu_01"),
        tool_turn("Bash", {"command": "curl --version", "description": "probe"}, "toolu_02"),
        tool_turn("Write", {"file_path": str(out), "content": "# Note\n"}, "toolu_03"),
        text_turn("Done."),
    ]
    with FakeMessagesAPI(protocol.study()["worker"]["model"], turns) as api:
        rec = _run(tmp_path, "A1", api, worker_env, real_cli)
        results = api.tool_results()
        requests = list(api.requests)
    assert rec.status == "completed" and rec.turns == 4
    assert rec.tool_calls_by_tool == {"Bash": 2, "Write": 1}
    assert out.read_text() == "# Note\n"
    assert sandbox.STUB_MARKER in results["toolu_01"] and "rc=126" in results["toolu_01"]
    assert "denied" in results["toolu_02"].lower()
    devs = {(d["tool_use_id"], d["via"], d["blocked_by"]) for d in rec.deviations}
    assert devs == {("toolu_01", "bash -c", "mask"), ("toolu_02", "command", "cli_rule")}
    assert rec.cost_usd and rec.cost_usd > 0 and rec.cost_usd == rec.sessions[0]["reported_cost_usd"]
    # every request the pinned CLI sent through the proxy asked for the protocol's output bound.
    sent = {r.get("max_tokens") for r in requests if r.get("model") == protocol.study()["worker"]["model"]}
    assert sent == {protocol.study()["cli"]["max_output_tokens"]}


def test_resume_reports_the_session_total(tmp_path, worker_env, real_cli, not_bare):
    with FakeMessagesAPI(
        protocol.study()["worker"]["model"], [text_turn("Stopping early."), text_turn("Resumed.")]
    ) as api:
        rec = _run(tmp_path, "A4", api, worker_env, real_cli)
        sent = [len(r.get("messages", [])) for r in api.requests if r.get("model") == api.model]
    first, second = rec.sessions
    assert rec.selfcheck_first is False and rec.recovery_used
    assert second["resumed_from"] == first["session_id"] == second["session_id"]
    assert sent[1] > sent[0]  # the resumed request carries the first session's conversation
    assert second["reported_cost_usd"] == pytest.approx(2 * first["reported_cost_usd"])  # cumulative, CLI >= 2.1.277
    assert rec.cost_usd == pytest.approx(second["reported_cost_usd"])
    assert rec.recovery_cost_usd == pytest.approx(first["reported_cost_usd"])


def test_bare_mode_and_the_arm_tool_sets(tmp_path, worker_env, real_cli):
    """With study.yml's bare mode, the runner refuses a CLI that would offer another tool set than the arm's."""
    with FakeMessagesAPI(protocol.study()["worker"]["model"], [text_turn("Done.")]) as api:
        rec = _run(tmp_path, "A0", api, worker_env, real_cli)
        calls = len(api.requests)
    if rec.status == "infra_error":
        assert "tool set mismatch" in rec.infra_error and calls == 0
    else:
        assert rec.sessions[0]["tools_offered"] and sorted(rec.sessions[0]["tools_offered"]) == sorted(
            protocol.arms()["A0"].tools
        )


def test_the_study_launch_offers_each_arm_its_tool_set(tmp_path, worker_env, real_cli):
    """As study.yml launches the CLI (no --bare, A-010), A0 gets exactly its five tools and the model is called."""
    assert protocol.study()["cli"]["bare"] is False
    with FakeMessagesAPI(protocol.study()["worker"]["model"], [text_turn("Done.")]) as api:
        rec = _run(tmp_path, "A0", api, worker_env, real_cli)
        calls = len(api.requests)
    assert rec.status == "completed" and calls >= 1
    assert sorted(rec.sessions[0]["tools_offered"]) == ["Edit", "Glob", "Grep", "Read", "Write"]


def test_bare_mode_strips_the_tool_set(tmp_path, worker_env, real_cli, monkeypatch):
    """The finding behind A-010, on the pinned CLI: --bare leaves A0 with Edit and Read, and the attempt is refused."""
    version = claude_code.cli_version(real_cli, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    if version != protocol.study()["cli"]["version"]:
        pytest.skip(f"CLI {version} is not the pinned {protocol.study()['cli']['version']}")
    monkeypatch.setitem(protocol.study().raw["cli"], "bare", True)
    with FakeMessagesAPI(protocol.study()["worker"]["model"], [text_turn("Done.")]) as api:
        rec = _run(tmp_path, "A0", api, worker_env, real_cli)
        calls = len(api.requests)
    assert rec.status == "infra_error" and calls == 0
    assert "tool set mismatch" in rec.infra_error and "offers ['Edit', 'Read']" in rec.infra_error
