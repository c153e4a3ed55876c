"""The rehearsal's branch plan, the scripted server's worker branches on the wire, and the report's checks of
how each branch, the A4 controller and the deliverables' bytes must come out."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from pilot import paths, protocol
from pilot.simulated import rehearsal_branches as rb
from pilot.simulated import rehearsal_report as rehearsal
from pilot.simulated.scripted_model import ScriptedModelServer

PLAN_FILE = paths.ROOT / "analysis" / "config" / "rehearsal_branches.yml"
MODEL = protocol.study()["worker"]["model"]
PROMPT = protocol.study()["worker"]["user_prompt"]


# ----------------------------------------------------------------- the plan


def test_the_plan_make_rehearsal_uses_plays_every_branch_on_runs_it_creates():
    plan = rb.load_plan(PLAN_FILE)
    assert plan.played == set(rb.BRANCHES)
    makefile = (paths.ROOT / "Makefile").read_text()
    scenarios = next(
        line.split("?=")[1].split() for line in makefile.splitlines() if line.startswith("REHEARSAL_SCENARIOS ?=")
    )
    for key in plan.runs:
        sid, arm, rep = key.split(".")
        assert sid in scenarios and arm in protocol.arms() and rep == "r1", key
    # Each worker branch on its own run: one run cannot end two ways.
    workers = [r.worker for r in plan.runs.values() if r.worker]
    assert sorted(workers) == sorted(rb.WORKER_BRANCHES)


@pytest.mark.parametrize(
    "raw, where",
    [
        ({"runs": {"ACC-01.A1.r1": {"worker": "cap"}}}, "runs.ACC-01.A1.r1.worker: 'cap' is not a worker branch"),
        (
            {"runs": {"ACC-01.A1.r1": {"worker": "wall_limit"}}},
            "runs.ACC-01.A1.r1: the wall_limit branch needs the plan's wall_s",
        ),
        ({"runs": {"ACC-01.A1.r1": {"worker": "cap_mid_run"}}}, "the cap_mid_run branch needs the plan's cap_usd"),
        ({"runs": {"ACC-01.A1": {"worker": "overloaded_at_start"}}}, "runs.ACC-01.A1: a run is named by its folder"),
        (
            {"runs": {"ACC-01.A1.r1": {"judges": {"J2": "late"}}}},
            "runs.ACC-01.A1.r1.judges.J2: 'late' is not a judge branch",
        ),
        ({"runs": {}, "wall": 3}, "unknown field(s) wall"),
        ({"runs": {}, "wall_s": -1}, "wall_s: expected a positive number"),
        ([], "expected a mapping with a 'runs' mapping"),
    ],
)
def test_a_bad_plan_is_refused_naming_the_file_the_run_and_the_field(tmp_path, raw, where):
    f = tmp_path / "plan.yml"
    f.write_text(yaml.safe_dump(raw))
    with pytest.raises(rb.PlanError) as exc:
        rb.load_plan(f)
    assert str(exc.value).startswith(str(f)) and where in str(exc.value)


def test_a_branch_is_played_on_the_first_attempt_only_and_its_limits_only_tighten(tmp_path, monkeypatch):
    from pilot.pipeline import upstream_limits

    monkeypatch.setenv(rb.PLAN_ENV, str(PLAN_FILE))
    plan = rb.load_plan()
    first = plan.for_attempt(tmp_path / "ACC-01.A3.r1" / "attempt-1")
    assert first.worker == "wall_limit" and plan.for_attempt(tmp_path / "ACC-01.A3.r1" / "attempt-2") == rb.RunBranch()
    assert plan.for_attempt(tmp_path / "HR-01.A1.r1" / "attempt-1") == rb.RunBranch()
    env, limits = upstream_limits({"ANTHROPIC_BASE_URL": "http://127.0.0.1:1", **first.limits()})
    assert env == {"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"} and limits == {"wall_s": 240.0}
    rb.write_record(tmp_path / "rec", first)
    assert rb.read_record(tmp_path / "rec") == first


# ----------------------------------------------------------------- the worker branches on the wire


def _first_worker_request(server: ScriptedModelServer, stream: bool) -> tuple[int, dict[str, str], bytes]:
    import http.client

    host, port = server.base_url.removeprefix("http://").split(":")
    body = {
        "model": MODEL,
        "max_tokens": 32000,
        "stream": stream,
        "system": [{"type": "text", "text": "Primary working directory: /w/run/workspace"}],
        "tools": [{"name": n, "input_schema": {"type": "object"}} for n in ("Bash", "Read", "Write")],
        "messages": [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}],
    }
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "POST",
            "/v1/messages",
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json", "x-api-key": server.api_key},
        )
        resp = conn.getresponse()
        try:
            data = resp.read()
        except http.client.IncompleteRead as exc:  # the cut stream
            data = exc.partial
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def test_overloaded_at_start_answers_529_not_to_be_retried(tmp_path):
    with ScriptedModelServer(seed=1, record_dir=tmp_path / "s", branch=rb.RunBranch("overloaded_at_start")) as server:
        for _ in range(2):  # every try of the first request, as a persistent overload would
            status, headers, body = _first_worker_request(server, stream=True)
            assert status == 529 and headers["x-should-retry"] == "false"
            assert json.loads(body)["error"]["type"] == "overloaded_error"


def test_stream_cut_at_start_sends_the_first_event_and_drops_the_connection(tmp_path):
    with ScriptedModelServer(seed=1, record_dir=tmp_path / "s", branch=rb.RunBranch("stream_cut_at_start")) as server:
        for stream in (True, False):  # the client's non-streaming retry meets the same cut
            status, headers, body = _first_worker_request(server, stream=stream)
            events = [json.loads(line[5:]) for line in body.split(b"\n") if line.startswith(b"data:")]
            assert status == 200 and headers["content-type"] == "text/event-stream"
            assert [e["type"] for e in events] == ["message_start"]


def test_without_a_branch_the_first_request_is_the_reading(tmp_path):
    with ScriptedModelServer(seed=1, record_dir=tmp_path / "s") as server:
        status, _, body = _first_worker_request(server, stream=False)
    assert status == 200 and [b["input"]["file_path"] for b in json.loads(body)["content"]] == [
        "/w/run/workspace/BRIEF.md",
        "/w/run/workspace/POLICY.md",
    ]


# ----------------------------------------------------------------- the report's checks


def _attempt(outcome: str, error: str | None = None) -> dict:
    return {"outcome": outcome, "error": error, "workspace": "/x"}


@pytest.mark.parametrize(
    "branch, rec, history, recovery, want",
    [
        (None, {"status": "completed"}, [_attempt("completed")], False, []),
        (
            "cap_mid_run",
            {"status": "capped", "censor_reason": "cost", "D": 1, "metered_cost_usd": "1.19", "caps_usd": 1.2},
            [_attempt("capped")],
            False,
            [],
        ),
        (
            "cap_mid_run",
            {"status": "completed", "D": 1},
            [_attempt("completed")],
            False,
            ["ended completed (no reason); the design says capped (cost)"],
        ),
        (
            "cap_mid_run",
            {"status": "capped", "censor_reason": "cost", "D": 1, "metered_cost_usd": "1.21", "caps_usd": 1.2},
            [_attempt("capped")],
            False,
            ["metered 1.21 USD is over the run's cap of 1.2 USD"],
        ),
        (
            "wall_limit",
            {"status": "capped", "censor_reason": "cost", "D": 1},
            [_attempt("capped")],
            False,
            ["censored at 'cost', expected 'wall'"],
        ),
        (
            "wall_limit",
            {"status": "capped", "censor_reason": "wall", "D": None},
            [_attempt("capped")],
            False,
            ["not evaluated"],
        ),
        ("api_500_mid_run", {"status": "agent_error", "D": 0}, [_attempt("agent_error")], False, []),
        ("api_500_mid_run", {"status": "completed", "D": 0}, [_attempt("completed")], True, []),
        (
            "api_500_mid_run",
            {"status": "infra_error", "infra_error": "x", "D": None},
            [_attempt("infra_error")],
            False,
            ["ended infra_error (x); the design says agent_error", "not evaluated"],
        ),
        (
            "overloaded_at_start",
            {"status": "completed"},
            [_attempt("infra_error", "api_error_status 529"), _attempt("completed")],
            False,
            [],
        ),
        (
            "overloaded_at_start",
            {"status": "completed"},
            [_attempt("completed")],
            False,
            ["the run has 1 attempt(s)", "its first attempt ended 'completed', not as an infrastructure error"],
        ),
        (
            "stream_cut_at_start",
            {"status": "capped", "censor_reason": "cost"},
            [_attempt("capped")],
            False,
            ["the run has 1 attempt(s)", "not as an infrastructure error", "the design says completed"],
        ),
    ],
)
def test_each_branch_is_held_to_the_ending_the_design_gives_it(branch, rec, history, recovery, want):
    found = rehearsal.check_branch(branch, rec, history, recovery=recovery)
    assert len(found) == len(want), found
    for f, w in zip(found, want, strict=True):
        assert w in f, (f, w)


def _a4(
    selfcheck_expected: bool,
    resume_expected: bool,
    reason: str = "withheld: the self-check passes and the session completes",
) -> dict:
    return {
        "selfcheck_expected": selfcheck_expected,
        "resume_expected": resume_expected,
        "resume_reason": reason,
        "selfcheck_breaks": [] if selfcheck_expected else ["memo_present"],
    }


def test_the_controller_is_held_to_the_plan_and_to_the_transcript():
    passing = [_a4(True, False)]
    honest = {"selfcheck_first": True, "selfcheck_final": True, "recovery_used": False, "sessions": [{}]}
    assert rehearsal.check_controller(passing, honest, [1]) == []
    # Granted after a passing self-check (the controller misread it).
    wrong = dict(honest, selfcheck_first=False, recovery_used=True, sessions=[{}, {}])
    found = rehearsal.check_controller(passing, wrong, [1, 1])
    assert any(f.startswith("self-check: the controller's first verdict is False") for f in found)
    assert any(f.startswith("recovery: the controller granted the resume; the plan says withheld") for f in found)
    # Withheld after a failing one.
    failing = [_a4(False, True, "granted: the self-check fails (memo_present)"), _a4(True, False)]
    found = rehearsal.check_controller(failing, dict(honest, selfcheck_first=True), [1])
    assert any("the plan says granted: the self-check fails (memo_present)" in f for f in found)
    # Granted as planned, but the resume's own verdict disagrees; and a second resume.
    granted = {"selfcheck_first": False, "selfcheck_final": False, "recovery_used": True, "sessions": [{}, {}, {}]}
    found = rehearsal.check_controller(failing, granted, [1, 1])
    assert any("the final verdict is False; the resume's plan says pass" in f for f in found)
    assert any("3 sessions; the arm grants one resume at most" in f for f in found)
    # The self-check was not seen as a tool call in the resumed session.
    found = rehearsal.check_controller(failing, dict(granted, selfcheck_final=True, sessions=[{}, {}]), [1, 0])
    assert found == ["self-check: the harness's transcript shows no self-check tool call in session 2"]
    # The worker's own self-check came out otherwise than foretold.
    own = [dict(_a4(True, False), worker_selfcheck={"passed": False, "tail": "SELF-CHECK FAILED: 1 problem(s)"})]
    assert any(
        "the worker's own self-check in session 1 failed; the plan says it passes" in f
        for f in rehearsal.check_controller(own, honest, [1])
    )


def test_self_check_calls_are_counted_per_cli_session_of_the_transcript(tmp_path):
    def call(cmd: str) -> dict:
        return {
            "type": "assistant",
            "message": {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": cmd}}]},
        }

    init = {"type": "system", "subtype": "init", "session_id": "same-id-on-resume"}
    events = [
        init,
        call("cd /w && python3 selfcheck.py"),
        call("ls"),
        init,
        call("python3 solve.py"),
        init,
        call("python3 selfcheck.py"),
    ]
    t = tmp_path / "transcript.jsonl"
    t.write_text("".join(json.dumps(e) + "\n" for e in events) + "not json\n")
    assert rehearsal.selfcheck_calls(t) == [1, 0, 1]


def test_a_deliverable_is_held_to_the_bytes_its_tool_call_wrote(tmp_path):
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "memo.md").write_text("# Memo\n")
    digest = hashlib.sha256(b"# Memo\n").hexdigest()  # by hand, not by the code under test
    assert rehearsal.deliverables_by_tool(["outputs/memo.md"], tmp_path, {"outputs/memo.md": digest}, {}) == (
        ["outputs/memo.md"],
        [],
    )
    (tmp_path / "outputs" / "memo.md").write_text("# Memo.\n")
    assert rehearsal.deliverables_by_tool(["outputs/memo.md"], tmp_path, {"outputs/memo.md": digest}, {}) == (
        [],
        ["deliverable outputs/memo.md: its SHA-256 is not that of the bytes the scripted worker's tool call wrote"],
    )
    assert (
        "not in the workspace"
        in rehearsal.deliverables_by_tool(["outputs/gone.csv"], tmp_path, {"outputs/gone.csv": digest}, {})[1][0]
    )


def test_sha256sum_output_is_read_line_by_line():
    from pilot.simulated.scripted_model import parse_sha256sum

    text = (
        "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881  outputs/a b.csv\n"
        "sha256sum: outputs/gone.txt: No such file or directory\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 *outputs/empty.bin\n"
    )
    assert parse_sha256sum(text) == {
        "outputs/a b.csv": "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
        "outputs/empty.bin": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    }


def test_a_worker_record_without_the_proxys_label_is_a_finding_and_no_truth(tmp_path):
    attempt = tmp_path / "LEGAL-01.A1.r1" / "attempt-1"
    unlabelled = {f"unlabelled:{attempt}/workspace": {"scenario": "LEGAL-01", "arm": "A1"}}
    assert rehearsal.truth_for_attempt(unlabelled, attempt, "LEGAL-01", "A1") is None
    assert rehearsal.check_labelled(unlabelled, attempt)[0].startswith(
        "proxy: the worker's requests reached the scripted server without the run label"
    )
    assert rehearsal.check_labelled({str(attempt): {}}, attempt) == []


def test_a_cli_stopped_at_the_wall_owes_no_cost_report():
    kw = dict(metered_usd="0.2", judge_usd=Decimal_("0.01"), charged_micro=210000, charge_basis="metered")
    assert rehearsal.reconcile_costs(None, cli_stopped=True, **kw) == []
    assert rehearsal.reconcile_costs(None, **kw) == ["cost: the CLI reported no cost"]


def Decimal_(text: str):
    from decimal import Decimal

    return Decimal(text)


def test_the_plan_file_is_the_one_the_makefile_passes():
    makefile = (paths.ROOT / "Makefile").read_text()
    assert "REHEARSAL_BRANCHES ?= analysis/config/rehearsal_branches.yml" in makefile
    assert Path(PLAN_FILE).is_file()


def test_the_worker_s_own_digests_are_read_from_the_harness_s_transcript(tmp_path):
    """Also when the run was capped before the scripted server saw the result: the CLI recorded it."""
    d1 = hashlib.sha256(b"a").hexdigest()
    d2 = hashlib.sha256(b"b").hexdigest()
    events = [
        {"type": "system", "subtype": "init"},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Bash",
                        "input": {"command": "cd '/w' && sha256sum -- 'outputs/a.csv'"},
                    }
                ]
            },
        },
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": f"{d1}  outputs/a.csv"}]},
        },
        # a result of another call that merely looks like a digest line is not the worker's report
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "t9", "content": f"{d2}  outputs/b.csv"}]},
        },
        {"type": "system", "subtype": "init"},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "Bash",
                        "input": {"command": "cd '/w' && sha256sum -- 'outputs/a.csv'"},
                    }
                ]
            },
        },
        {
            "type": "user",
            "message": {
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [{"type": "text", "text": f"{d2}  outputs/a.csv"}],
                    }
                ]
            },
        },
    ]
    t = tmp_path / "transcript.jsonl"
    t.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert rehearsal.reported_digests(t) == {"outputs/a.csv": d2}  # the resume's report over the first session's
