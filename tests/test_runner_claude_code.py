"""The claude-code backend end to end, against the CLI test double (tests/fake_claude/claude).

Each test scripts the double (what the "model" does, how the session ends),
runs one real attempt (workspace, bubblewrap, process group, transcript,
audit, oracle) and checks the run record.
"""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from fake_messages_api import FakeMessagesAPI

from pilot import paths, protocol
from pilot.agents import launch, sandbox
from pilot.agents.claude_code import PREFLIGHT_BASE_URL
from pilot.protocol import Caps
from pilot.runner import run_attempt

FAKE_CLI = paths.ROOT / "tests" / "fake_claude" / "claude"
SID = "ACC-01"

pytestmark = pytest.mark.usefixtures("bwrap", "soffice")


@pytest.fixture(scope="module")
def gold_steps() -> list[dict]:
    """Bash steps that write the scenario's reference deliverables (the solver's real files)."""
    from pilot.scenarios import load_scenario, solve

    sc = load_scenario(SID)
    with tempfile.TemporaryDirectory() as tmp:
        files = solve(SID, sc.inputs_dir, Path(tmp))
        steps = []
        for f in sorted(files):
            b64 = base64.b64encode(f.read_bytes()).decode()
            steps.append(
                {
                    "tool": "Bash",
                    "input": {"command": f"mkdir -p outputs && printf %s '{b64}' | base64 -d > 'outputs/{f.name}'"},
                }
            )
    return steps


class FakePortal:
    def __init__(self, fail: bool = False):
        self.fail, self.stopped = fail, False

    def __call__(self, scenario_id, run_dir):
        if self.fail:
            raise RuntimeError("health check timed out")
        return self

    # Nothing answers there; a port above 1023, as every real portal has (the unprivileged sandbox binds no lower one).
    url = "http://127.0.0.1:59123"

    def write_credentials(self, workspace):
        p = Path(workspace) / "portal_credentials.json"
        p.write_text(json.dumps({"url": self.url, "username": "u", "password": "p"}))
        return p

    def describe(self):
        return {"url": self.url}

    def stop(self):
        self.stopped = True

    def secrets(self):
        return ()

    def end_of_run(self):
        from pilot.portal.instance import PortalRunEnd

        self.stop()
        return PortalRunEnd(healthy=True, reason=None, requests=0)


def attempt(tmp_path, arm, script: dict, *, worker_env=None, **kw):
    kw.setdefault("evaluate", False)
    kw.setdefault("portal_starter", FakePortal())
    if "environ" not in kw:
        # The double only checks that the API answers; the model proxy forwards that check to this stand-in.
        with FakeMessagesAPI(protocol.study()["worker"]["model"], []) as api:
            return attempt(
                tmp_path,
                arm,
                script,
                worker_env=worker_env,
                environ={"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "k"},
                **kw,
            )
    # The double is its own model: its turns never pass the proxy, so the run is read from its stream.
    return run_attempt(
        SID,
        arm,
        backend="claude-code",
        out_dir=tmp_path / "runs" / "r1",
        seed=7,
        claude_bin=FAKE_CLI,
        worker_env=worker_env,
        extra_env={"FAKE_CLAUDE_SCRIPT": json.dumps(script)},
        record_from_proxy=False,
        **kw,
    )


def transcript_events(rec) -> list[dict]:
    return [json.loads(line) for line in Path(rec.transcript).read_text().splitlines() if line.strip()]


def invocations(tmp_path, preflight: bool = False) -> list[dict]:
    """The double's launches; the tool-set preflight (API pointed at nothing) apart unless asked for."""
    log = tmp_path / "runs" / "r1" / "agent" / "claude-config" / "fake_claude_invocations.jsonl"
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    return [c for c in calls if (c["env"].get("ANTHROPIC_BASE_URL") == PREFLIGHT_BASE_URL) == preflight]


def test_completed_run_keeps_transcript_workspace_and_record(tmp_path, gold_steps, worker_env):
    script = {
        "sessions": [
            {
                "steps": [
                    {"tool": "Read", "input": {"file_path": "BRIEF.md"}},
                    *gold_steps,
                    {"text": "Checking the workbook."},
                ],
                "end": "success",
            }
        ]
    }
    rec = attempt(tmp_path, "A1", script, worker_env=worker_env, evaluate=True)
    assert rec.status == "completed" and not rec.censored and rec.infra_error is None
    assert rec.D is True and rec.E is False and rec.criteria_passed == rec.criteria_total > 0
    n_steps = 1 + len(gold_steps) + 1 + 1  # tool calls, the text, the final answer
    assert rec.turns == n_steps
    assert rec.cost_usd == pytest.approx(0.05 * n_steps) and rec.cost_complete
    assert rec.tool_calls_by_tool == {"Bash": len(gold_steps), "Read": 1}
    assert rec.questions == len(
        json.loads((Path(rec.workspace) / "outputs" / "completion_record.json").read_text())["questions"]
    )
    assert rec.cli_version == "2.1.332" and rec.enforcement.startswith("bubblewrap")
    assert rec.worker_env["versions"]["python"].count(".") == 2
    # The transcript is the CLI's own stream, line for line.
    events = transcript_events(rec)
    assert events[0]["type"] == "system" and events[0]["subtype"] == "init"
    assert events[-1]["type"] == "result" and events[-1]["total_cost_usd"] == pytest.approx(rec.cost_usd)
    assert sum(e["type"] == "assistant" for e in events) == n_steps
    on_disk = json.loads((tmp_path / "runs" / "r1" / "run_record.json").read_text())
    assert on_disk == json.loads(json.dumps(rec.to_dict(), default=str))
    assert (tmp_path / "runs" / "r1" / "evaluation.json").is_file()
    # The CLI was started as the arm says, the prompt on stdin.
    call = invocations(tmp_path)[-1]
    assert call["stdin"].strip() == protocol.study()["worker"]["user_prompt"]
    assert call["cwd"] == rec.workspace
    # The CLI sees its config folder at the sandbox's own place; the run's mark names the host's folder of this run.
    assert call["env"]["CLAUDE_CONFIG_DIR"] == launch.INSIDE_CONFIG
    assert call["env"][launch.RUN_MARK_VAR].startswith(str((tmp_path / "runs" / "r1").resolve()))


def test_a_run_that_modifies_an_input_gets_E(tmp_path, gold_steps, worker_env):
    script = {
        "sessions": [
            {
                "steps": [
                    *gold_steps,
                    {"tool": "Bash", "input": {"command": "f=$(ls inputs/*.csv | head -1); echo 'x,1' >> \"$f\""}},
                ]
            }
        ]
    }
    rec = attempt(tmp_path, "A1", script, worker_env=worker_env, evaluate=True)
    assert rec.status == "completed"
    assert rec.E is True and rec.D is False
    assert any("modified" in r and ".csv" in r for r in rec.E_reasons)


@pytest.mark.usefixtures("bwrap")
def test_denied_command_through_bash_c_is_a_deviation_and_is_stopped(tmp_path, worker_env):
    script = {
        "sessions": [
            {
                "steps": [
                    {"tool": "Bash", "input": {"command": "curl --version"}},
                    {"tool": "Bash", "input": {"command": "bash -c 'curl --version' ; echo rc=$?"}},
                    {
                        "tool": "Bash",
                        "input": {"command": "python3 -c \"import subprocess; subprocess.run(['wget', '--version'])\""},
                    },
                ]
            }
        ]
    }
    rec = attempt(tmp_path, "A1", script, worker_env=worker_env)
    devs = {(d["family"], d["via"], d["blocked_by"]) for d in rec.deviations}
    assert ("curl", "command", "cli_rule") in devs
    assert ("curl", "bash -c", "mask") in devs
    assert ("wget", "python3 -c", "mask") in devs
    results = {
        e["message"]["content"][0]["tool_use_id"]: e["message"]["content"][0]["content"]
        for e in transcript_events(rec)
        if e["type"] == "user"
    }
    assert "rc=126" in results["toolu_0_001"] and sandbox.STUB_MARKER in results["toolu_0_001"]


@pytest.mark.usefixtures("bwrap")
def test_a2_lifts_the_native_utilities_but_not_libreoffice(tmp_path, worker_env):
    script = {
        "sessions": [
            {
                "steps": [
                    {"tool": "Bash", "input": {"command": "bash -c 'soffice --version' ; echo rc=$?"}},
                    {"tool": "Bash", "input": {"command": "bash -c 'open --version' >/dev/null 2>&1; echo rc=$?"}},
                ]
            }
        ]
    }
    rec = attempt(tmp_path, "A2", script, worker_env=worker_env)
    assert [(d["family"], d["blocked_by"]) for d in rec.deviations] == [("soffice", "mask")]
    results = [e["message"]["content"][0]["content"] for e in transcript_events(rec) if e["type"] == "user"]
    assert "rc=126" in results[0] and "rc=126" not in results[1]
    assert any("requires a macOS node" in n for n in rec.notes) or rec.enforcement.startswith("sandbox-exec")


def test_a0_has_no_shell(tmp_path):
    script = {
        "sessions": [
            {
                "steps": [
                    {"tool": "Bash", "input": {"command": "echo hi > outputs/x.txt"}},
                    {"tool": "Write", "input": {"file_path": "outputs/memo.md", "content": "# Memo\n"}},
                ]
            }
        ]
    }
    rec = attempt(tmp_path, "A0", script)
    assert [(d["kind"], d["tool"]) for d in rec.deviations] == [("tool_not_in_arm", "Bash")]
    assert not (Path(rec.workspace) / "outputs" / "x.txt").exists()
    assert (Path(rec.workspace) / "outputs" / "memo.md").read_text() == "# Memo\n"
    assert (
        invocations(tmp_path)[-1]["argv"][invocations(tmp_path)[-1]["argv"].index("--tools") + 1]
        == "Read,Write,Edit,Glob,Grep"
    )


@pytest.mark.parametrize(
    "caps, max_turns, cost_per_turn, steps, reason",
    [
        (Caps(0.3, 60), None, 0.1, 10, "cost"),
        (Caps(4.0, 60), 3, 0.01, 10, "turns"),
    ],
)
def test_caps_end_the_session_and_censor_the_run(tmp_path, worker_env, caps, max_turns, cost_per_turn, steps, reason):
    script = {"cost_per_turn": cost_per_turn, "sessions": [{"steps": [{"text": f"step {i}"} for i in range(steps)]}]}
    rec = attempt(tmp_path, "A1", script, worker_env=worker_env, caps=caps, max_turns=max_turns)
    assert rec.status == "capped" and rec.censored and rec.censor_reason == reason
    if reason == "cost":
        assert rec.cost_usd >= caps.usd  # a soft cap, checked after each call
        assert (
            float(invocations(tmp_path)[-1]["argv"][invocations(tmp_path)[-1]["argv"].index("--max-budget-usd") + 1])
            == caps.usd
        )
    else:
        assert rec.turns == max_turns


def test_wall_limit_kills_the_whole_process_tree(tmp_path, worker_env):
    marker = f"{int(time.time() * 1000) % 100000 + 100000}"
    script = {
        "sessions": [
            {
                "steps": [
                    {"text": "starting"},
                    {"tool": "Bash", "input": {"command": f"(setsid sleep {marker} &) ; echo started"}},
                    {"sleep": 600},
                ],
                "end": "hang",
            }
        ]
    }
    t0 = time.monotonic()
    rec = attempt(tmp_path, "A1", script, worker_env=worker_env, caps=Caps(4.0, 2.0))
    assert time.monotonic() - t0 < 120  # stopped by the 2 s wall limit, not left to the session's ten minutes
    assert rec.status == "capped" and rec.censor_reason == "wall" and rec.censored
    assert rec.cost_usd is None and rec.cost_complete is False  # killed before the CLI reported its cost
    time.sleep(0.3)
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
    assert left == [], "a process of the killed session survived"


@pytest.mark.parametrize(
    "script, expected",
    [
        ({"start": "refuse"}, "exited with code 1 before any model output"),
        (
            {"sessions": [{"steps": [], "end": "api_error", "api_error_status": 529}]},
            "api_error_status 529 before any model output",
        ),
        (
            {"sessions": [{"steps": [], "end": "silent_crash", "exit_code": 3}]},
            "exited with code 3 before any model output",
        ),
        ({"sessions": [{"steps": [{"sleep": 30}], "end": "hang"}]}, "no model output before the wall limit"),
    ],
)
def test_no_inference_is_an_infrastructure_error(tmp_path, worker_env, script, expected):
    rec = attempt(tmp_path, "A1", script, worker_env=worker_env, caps=Caps(4.0, 2.0))
    assert rec.status == "infra_error" and expected in rec.infra_error
    assert rec.D is None and not rec.censored


def test_start_failures_are_infrastructure_errors(tmp_path, worker_env):
    rec = run_attempt(
        SID,
        "A1",
        backend="claude-code",
        out_dir=tmp_path / "runs" / "a",
        seed=1,
        claude_bin=tmp_path / "no-such-claude",
        worker_env=worker_env,
        portal_starter=FakePortal(),
    )
    assert rec.status == "infra_error" and rec.infra_error.startswith("start_failed")
    rec = run_attempt(
        SID,
        "A1",
        backend="claude-code",
        out_dir=tmp_path / "runs" / "b",
        seed=1,
        claude_bin=FAKE_CLI,
        worker_env=tmp_path / "missing-env",
        portal_starter=FakePortal(),
    )
    assert rec.status == "infra_error" and "worker Python environment is missing" in rec.infra_error
    portal = FakePortal(fail=True)
    rec = run_attempt(
        SID,
        "A3",
        backend="claude-code",
        out_dir=tmp_path / "runs" / "c",
        seed=1,
        claude_bin=FAKE_CLI,
        worker_env=worker_env,
        portal_starter=portal,
    )
    assert rec.status == "infra_error" and rec.infra_error.startswith("portal_start")


@pytest.mark.parametrize(
    "end, extra, detail",
    [
        ("api_error", {"api_error_status": 500}, "API error status 500 after inference began"),
        ("error_during_execution", {}, "error_during_execution"),
        ("error_max_structured_output_retries", {}, "error_max_structured_output_retries"),
        ("crash", {"exit_code": 2}, "exited with code 2 without a result after inference began"),
    ],
)
def test_failures_after_inference_are_agent_errors(tmp_path, worker_env, end, extra, detail):
    script = {"sessions": [{"steps": [{"text": "working"}], "end": end, **extra}]}
    rec = attempt(tmp_path, "A1", script, worker_env=worker_env)
    assert rec.status == "agent_error" and detail in rec.agent_error
    assert rec.infra_error is None and not rec.censored


@pytest.mark.parametrize("version, cumulative", [("2.1.332", True), ("2.1.200", False)])
def test_recovery_resume_cost_is_attributed_once(tmp_path, gold_steps, worker_env, version, cumulative):
    first = [{"text": "reading"}, {"tool": "Read", "input": {"file_path": "BRIEF.md"}}]
    second = [*gold_steps]
    script = {
        "version": version,
        "cost_per_turn": 0.1,
        "sessions": [{"steps": first, "end": "error_during_execution"}, {"steps": second, "end": "success"}],
    }
    rec = attempt(tmp_path, "A4", script, worker_env=worker_env)
    spent_first, spent_second = 0.1 * len(first), 0.1 * (len(second) + 1)
    assert rec.selfcheck_first is False and rec.recovery_used is True and rec.selfcheck_final is True, (
        rec.recovery_skipped
    )
    assert rec.status == "completed"
    assert rec.cost_usd == pytest.approx(spent_first + spent_second)
    assert rec.recovery_cost_usd == pytest.approx(spent_second)
    assert ("cumulative" in rec.cost_method) == cumulative
    calls = invocations(tmp_path)
    assert len(calls) == 2
    resume_argv = calls[1]["argv"]
    # The resume continues the id the harness gave the first session, never one its stream reported.
    first_argv = calls[0]["argv"]
    assigned = first_argv[first_argv.index("--session-id") + 1]
    assert resume_argv[resume_argv.index("--resume") + 1] == assigned == rec.sessions[0]["assigned_session_id"]
    assert "--session-id" not in resume_argv
    # The resume gets what is left of the budget, in the same config folder.
    assert float(resume_argv[resume_argv.index("--max-budget-usd") + 1]) == pytest.approx(
        rec.caps_usd - spent_first, abs=1e-4
    )
    assert calls[0]["env"]["CLAUDE_CONFIG_DIR"] == calls[1]["env"]["CLAUDE_CONFIG_DIR"]
    assert sum(e["type"] == "result" for e in transcript_events(rec)) == 2
    assert rec.turns == len(first) + len(second) + 1


def test_no_resume_when_the_self_check_passes_or_nothing_is_left(tmp_path, gold_steps, worker_env):
    rec = attempt(tmp_path, "A4", {"sessions": [{"steps": gold_steps}]}, worker_env=worker_env)
    assert rec.selfcheck_first is True and rec.recovery_used is False and len(invocations(tmp_path)) == 1
    rec = attempt(
        tmp_path,
        "A4",
        {"cost_per_turn": 0.5, "sessions": [{"steps": [{"text": "a"}] * 5}]},
        worker_env=worker_env,
        caps=Caps(1.0, 60),
    )
    assert rec.status == "capped" and rec.censor_reason == "cost"
    assert rec.recovery_used is False and rec.recovery_skipped.startswith("no budget left")


def test_a3_reaches_a_real_portal_from_inside_the_sandbox(tmp_path, worker_env):
    if not paths.scenario_portal_dir(SID).is_dir():
        pytest.skip("no portal content for the scenario")
    probe = (
        "python3 -c \"import json,urllib.request; c=json.load(open('portal_credentials.json')); "
        "print('status', urllib.request.urlopen(c['url'] + '/healthz').status)\""
    )
    rec = attempt(
        tmp_path,
        "A3",
        {"sessions": [{"steps": [{"tool": "Bash", "input": {"command": probe}}]}]},
        worker_env=worker_env,
        portal_starter=None,
    )
    assert rec.portal and rec.portal["url"].startswith("http://127.0.0.1")
    results = [e for e in transcript_events(rec) if e["type"] == "user"]
    assert "status 200" in results[0]["message"]["content"][0]["content"]
    assert "password" not in json.dumps(rec.to_dict())


def test_an_unreachable_api_is_an_infrastructure_error(tmp_path, worker_env):
    rec = attempt(
        tmp_path,
        "A1",
        {"sessions": [{"steps": [{"tool": "Bash", "input": {"command": "touch outputs/ran"}}]}]},
        worker_env=worker_env,
        environ={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "k"},
    )
    assert rec.status == "infra_error" and "before any model output" in rec.infra_error
    assert not (Path(rec.workspace) / "outputs" / "ran").exists()


def test_the_tool_set_is_checked_before_any_inference(tmp_path, worker_env):
    """The pinned CLI's --bare (2.1.327 and 2.1.332) leaves Bash, Edit and Read: an arm launched so is refused, nothing
    runs."""
    bare = protocol.study()["cli"]["bare"]
    script = {
        "bare_restricts_tools": True,
        "sessions": [{"steps": [{"tool": "Bash", "input": {"command": "touch outputs/ran"}}]}],
    }
    rec = attempt(tmp_path, "A1", script, worker_env=worker_env)
    if bare:
        assert rec.status == "infra_error" and "tool set mismatch" in rec.infra_error
        assert "'Write'" in rec.infra_error
        assert invocations(tmp_path) == [] and len(invocations(tmp_path, preflight=True)) == 1
        assert not (Path(rec.workspace) / "outputs" / "ran").exists()
    else:
        assert rec.status == "completed"
    # The preflight saw exactly the flags of the real launch.
    pre = invocations(tmp_path, preflight=True)[0]["argv"]
    assert pre[pre.index("--tools") + 1] == "Read,Write,Edit,Glob,Grep,Bash" and ("--bare" in pre) == bool(bare)


def test_bare_mode_forced_on_is_refused_before_any_inference(tmp_path, worker_env, monkeypatch):
    """study.yml turns bare mode off (A-010); were it on, the tool-set check would refuse the attempt."""
    monkeypatch.setitem(protocol.study().raw["cli"], "bare", True)
    script = {
        "bare_restricts_tools": True,
        "sessions": [{"steps": [{"tool": "Bash", "input": {"command": "touch outputs/ran"}}]}],
    }
    rec = attempt(tmp_path, "A0", script, worker_env=worker_env)
    assert rec.status == "infra_error" and "tool set mismatch" in rec.infra_error
    assert "offers ['Edit', 'Read']" in rec.infra_error and "(bare mode: True)" in rec.infra_error
    assert invocations(tmp_path) == [] and len(invocations(tmp_path, preflight=True)) == 1
    pre = invocations(tmp_path, preflight=True)[0]["argv"]
    assert "--bare" in pre and pre[pre.index("--tools") + 1] == "Read,Write,Edit,Glob,Grep"


def test_no_resume_when_the_first_sessions_spend_is_unknown(tmp_path, worker_env):
    rec = attempt(
        tmp_path,
        "A4",
        {"sessions": [{"steps": [{"text": "working"}], "end": "crash"}, {"steps": []}]},
        worker_env=worker_env,
    )
    assert rec.status == "agent_error" and rec.selfcheck_first is False, (rec.infra_error, rec.notes)
    assert rec.recovery_used is False and "cost is unknown" in rec.recovery_skipped
    assert rec.cost_usd is None and not rec.cost_complete
    assert len(invocations(tmp_path)) == 1
