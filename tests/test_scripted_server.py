"""The scripted model server: its Messages API, the solver it ships, and whole runs of the real CLI against it.

The runner-level tests launch the pinned CLI exactly as a study run does
(bubblewrap sandbox, metering proxy, the arm's tools), with the proxy's
upstream at the scripted server; the worker's deliverables come from the
tool calls it answers with, and the oracle's verdict must be the one the
server recorded as intended.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from pilot import protocol
from pilot.agents import sandbox
from pilot.protocol.prices import cost_disagreement
from pilot.scenarios import load_scenario, solve
from pilot.simulated.scripted_model import ScriptedModelServer, read_truth, solver_command

MODEL = protocol.study()["worker"]["model"]
PROMPT = protocol.study()["worker"]["user_prompt"]
SID = "LEGAL-01"


def _post(
    server: ScriptedModelServer,
    path: str,
    body: dict | None,
    key: str | None,
    method: str = "POST",
    headers: dict | None = None,
) -> tuple[int, dict[str, str], bytes]:
    host, port = server.base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    h = {"content-type": "application/json", **({"x-api-key": key} if key else {}), **(headers or {})}
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _worker_request(stream: bool, cwd: str = "/w/run/workspace") -> dict:
    return {
        "model": MODEL,
        "max_tokens": 32000,
        "stream": stream,
        "system": [{"type": "text", "text": "You are an agent."}],
        "tools": [{"name": n, "input_schema": {"type": "object"}} for n in ("Bash", "Read", "Write")]
        + [{"name": "DeferredToolPlaceholder", "input_schema": {"type": "object"}, "defer_loading": True}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
            {"role": "system", "content": [{"type": "text", "text": f" - Primary working directory: {cwd}\n"}]},
        ],
    }


def _from_events(raw: bytes) -> dict:
    """Reassemble a streamed answer into the message it carries."""
    events = [json.loads(line[5:]) for line in raw.split(b"\n") if line.startswith(b"data:")]
    msg = dict(events[0]["message"])
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for e in events[1:]:
        if e["type"] == "content_block_start":
            blocks[e["index"]] = dict(e["content_block"])
        elif e["type"] == "content_block_delta":
            d = e["delta"]
            if d["type"] == "text_delta":
                blocks[e["index"]]["text"] += d["text"]
            else:
                partial[e["index"]] = partial.get(e["index"], "") + d["partial_json"]
        elif e["type"] == "message_delta":
            msg["stop_reason"] = e["delta"]["stop_reason"]
            msg["usage"] = dict(msg["usage"], **e["usage"])
    for i, js in partial.items():
        blocks[i]["input"] = json.loads(js)
    msg["content"] = [blocks[i] for i in sorted(blocks)]
    assert [e["type"] for e in events][-1] == "message_stop"
    return msg


@pytest.fixture
def server(tmp_path):
    with ScriptedModelServer(seed=3, record_dir=tmp_path / "scripted") as s:
        yield s


# ----------------------------------------------------------------- the protocol


def test_a_worker_turn_whole_and_streamed_is_the_same_message(server):
    status, headers, data = _post(server, "/v1/messages?beta=true", _worker_request(stream=False), server.api_key)
    whole = json.loads(data)
    assert status == 200 and headers["content-type"] == "application/json"
    assert whole["stop_reason"] == "tool_use" and whole["model"] == MODEL
    assert [(b["name"], b["input"]["file_path"]) for b in whole["content"]] == [
        ("Read", "/w/run/workspace/BRIEF.md"),
        ("Read", "/w/run/workspace/POLICY.md"),
    ]
    usage = whole["usage"]
    assert usage["output_tokens"] > 0 and usage["input_tokens"] + usage["cache_creation_input_tokens"] > 0
    status, headers, data = _post(server, "/v1/messages", _worker_request(stream=True), server.api_key)
    streamed = _from_events(data)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert streamed["content"] == whole["content"] and streamed["usage"] == whole["usage"]
    assert streamed["stop_reason"] == "tool_use"


def test_count_tokens_answers_a_positive_count(server):
    status, _, data = _post(server, "/v1/messages/count_tokens", _worker_request(stream=False), server.api_key)
    assert status == 200 and json.loads(data)["input_tokens"] > 0


@pytest.mark.parametrize("key", [None, "sk-ant-some-other-key"])
def test_a_request_without_the_servers_key_is_refused(server, key):
    status, headers, data = _post(server, "/v1/messages", _worker_request(stream=False), key)
    assert status == 401 and headers["x-should-retry"] == "false"
    assert json.loads(data)["error"]["type"] == "authentication_error"
    assert server.requests == 0


def test_what_it_cannot_play_gets_a_400_naming_it(server):
    status, _, data = _post(
        server,
        "/v1/messages",
        {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "Write me a poem"}]},
        server.api_key,
        headers={"x-pilot-run-id": "/runs/r1"},
    )
    err = json.loads(data)["error"]
    assert status == 400 and err["type"] == "invalid_request_error"
    assert "neither a worker session" in err["message"] and "Write me a poem" in err["message"]
    status, _, data = _post(server, "/v1/models", None, server.api_key, method="GET")
    assert status == 400 and "GET /v1/models is not understood" in json.loads(data)["error"]["message"]
    # A worker whose reading results never came back is not guessed at either.
    req = _worker_request(stream=False)
    req["messages"].append(
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_scripted_s0_0_0", "name": "Read", "input": {}}],
        }
    )
    status, _, data = _post(server, "/v1/messages", req, server.api_key)
    assert status == 400 and "BRIEF.md and POLICY.md" in json.loads(data)["error"]["message"]
    rows = [json.loads(x) for x in (server.record_dir / "refusals.jsonl").read_text().splitlines()]
    assert [r["run_id"] for r in rows] == ["/runs/r1", None, None][: len(rows)] and len(rows) == 2


def test_the_shipped_solver_runs_without_the_harness_and_writes_the_reference_files(tmp_path):
    """The solver's source and its helpers alone, under an isolated interpreter, write the same bytes as solve()."""
    sc = load_scenario(SID)
    ws = tmp_path / "ws"
    shutil.copytree(sc.inputs_dir, ws / "inputs")
    cmd = solver_command(str(ws), sc.generator, clear_outputs=False)
    # The harness's interpreter, isolated (-I): the shipped package shadows the installed one, as the script checks.
    out = subprocess.run(
        ["bash", "-c", cmd.replace("python3 -", "python3 -I -", 1)],
        capture_output=True,
        text=True,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    solve(SID, sc.inputs_dir, tmp_path / "gold")
    gold = {p.name: p.read_bytes() for p in (tmp_path / "gold").iterdir()}
    assert gold and {p.name: p.read_bytes() for p in (ws / "outputs").iterdir()} == gold
    # Nothing of the harness came along: only the scenario module and the modules it imports.
    assert "from pilot.oracles.evaluate" not in cmd and "import yaml" not in cmd


def test_read_truth_merges_sessions_and_names_a_bad_line(tmp_path):
    base = {"scenario": SID, "arm": "A4", "deliverables": ["outputs/a.csv"], "selfcheck_called": True}
    rows = [
        dict(base, run_id="r1", session=1, recovery=True, defects=[], expected_pass=True),
        dict(base, run_id="r1", session=0, recovery=False, defects=["missing"], expected_pass=False),
        dict(base, run_id="r2", session=0, recovery=False, defects=[], expected_pass=True, selfcheck_called=False),
    ]
    (tmp_path / "truth.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    truth = read_truth(tmp_path)
    assert [s["session"] for s in truth["r1"]["sessions"]] == [0, 1]
    assert truth["r1"]["expected_pass"] is True and truth["r1"]["recovery"] and truth["r1"]["defects"] == []
    assert truth["r2"]["recovery"] is False and truth["r2"]["selfcheck_called"] is False
    (tmp_path / "truth.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match=r"truth.jsonl: line 1"):
        read_truth(tmp_path)
    assert read_truth(tmp_path / "nowhere") == {}


# ----------------------------------------------------------------- whole runs of the real CLI


def _run(tmp_path: Path, arm: str, seed: int, cli: Path):
    from pilot.runner import run_attempt

    with ScriptedModelServer(seed=seed, record_dir=tmp_path / "scripted") as srv:
        out = tmp_path / "runs" / f"{SID}.{arm}.r1"
        # The worker's Python is the harness's interpreter and packages (the solvers need openpyxl and python-docx);
        # the sandbox binds only that environment, never the repository, so `pilot` is not importable inside.
        rec = run_attempt(
            SID,
            arm,
            backend="claude-code",
            out_dir=out,
            seed=1,
            claude_bin=cli,
            worker_env=Path(sys.prefix),
            label_upstream=True,
            environ={"ANTHROPIC_API_KEY": srv.api_key, "ANTHROPIC_BASE_URL": srv.base_url},
        )
        refusals = list(srv.refusals)
    truth = read_truth(tmp_path / "scripted")
    assert list(truth) == [str(out)]
    return rec, truth[str(out)], refusals, out


def _check(rec, truth, refusals, out: Path, arm: str) -> None:
    assert refusals == []
    assert rec.status == "completed" and rec.enforcement == "bubblewrap"
    assert truth["scenario"] == SID and truth["arm"] == arm
    # The deliverables are there because the worker's tool calls put them there.
    produced = sorted(
        p.relative_to(out / "workspace").as_posix() for p in (out / "workspace" / "outputs").rglob("*") if p.is_file()
    )
    assert produced == truth["deliverables"] and produced
    assert rec.D is truth["expected_pass"]
    assert rec.E is truth["sessions"][-1]["expected_E"]
    # The CLI's own price of the tokens agrees with the proxy's meter (the runner's rule), and both are positive.
    assert rec.metered_cost_usd is not None and rec.metered_cost_usd > Decimal(0)
    assert cost_disagreement(rec.cost_usd, rec.metered_cost_usd) is None
    assert not [n for n in rec.notes if "metered" in n]


@pytest.mark.usefixtures("bwrap")
@pytest.mark.parametrize("arm,seed,tool", [("A1", 237, "Bash"), ("A0", 11, "Write")])
def test_a_run_through_the_real_cli_delivers_by_tool_calls_and_scores_as_intended(tmp_path, arm, seed, tool, real_cli):
    rec, truth, refusals, out = _run(tmp_path, arm, seed, real_cli)
    _check(rec, truth, refusals, out, arm)
    assert rec.tool_calls_by_tool.get(tool, 0) >= 1
    if arm == "A0":
        # The restricted arm hands in text: the drawn substitutes are declared, and the binary files are not there.
        assert "text_substitutes" in truth["defects"] and rec.D is False
        assert not any(p.endswith((".docx", ".xlsx", ".pdf")) for p in truth["deliverables"])
    else:
        # The drawn edit of an input reached the sandbox's copy (E), the thin memo fails the oracle (D).
        assert (
            truth["defects"] == ["short_document", "modify_input"]
            and rec.E is True
            and rec.E_reasons
            and rec.D is False
        )
        # The drawn attempt at a denied program, through bash -c, met the sandbox's mask and is a recorded deviation.
        [session] = truth["sessions"]
        assert session["denied_attempt"]["family"] == "wget" and session["denied_attempt"]["how"] == "bash -c"
        assert any(sandbox.STUB_MARKER in text for text in session["denied_result"].values())
        # With it, the attempts at a denied program the host has, by every route: each recorded as the route it took,
        # with what answered at the program (the stub, past the CLI's rule), as the plan declared.
        from pilot.simulated import rehearsal_report as rehearsal

        declared = rehearsal.planted_programs([session])
        assert len(declared) == len(rehearsal.planted_deviations([session])) == 1 + len(session["host_denied_attempts"])
        assert sorted((d["family"], d["via"], d["blocked_by"], d["program"]) for d in rec.deviations) == sorted(
            (p["family"], *rehearsal.PLANTED_ROUTES[p["how"]], p["program"]) for p in declared
        )


@pytest.mark.usefixtures("bwrap")
def test_a4_self_check_fails_and_the_recovery_session_repairs(tmp_path, real_cli):
    rec, truth, refusals, out = _run(tmp_path, "A4", 3, real_cli)
    _check(rec, truth, refusals, out, "A4")
    first, second = truth["sessions"]
    assert first["defects"] == ["missing"] and first["expected_pass"] is False and first["selfcheck_called"]
    assert second["recovery"] and second["repaired"] and truth["expected_pass"] is True
    assert rec.selfcheck_first is False and rec.recovery_used and rec.selfcheck_final is True and rec.D is True
    assert len(rec.sessions) == 2 and rec.recovery_cost_usd is not None


# ----------------------------------------------------------------- the judges


VARIANTS = {
    "gold": [],
    "a0": ["text_substitutes", "missing"],
    "defective": ["error_values", "short_document", "invalid_record"],
}


def _package_variants(tmp_path: Path, sid: str, names=tuple(VARIANTS)):
    """(name, outputs folder) of a scenario's reference package, its A0 text version and a defective one."""
    import numpy as np

    from pilot.simulated import agent as simulated

    sc = load_scenario(sid)
    for name in names:
        defects = VARIANTS[name]
        ws = tmp_path / sid / name
        shutil.copytree(sc.inputs_dir, ws / "inputs")
        simulated.write_gold(sc, ws)
        simulated.apply_model_defects(sc, ws, defects, np.random.default_rng(1))
        yield name, ws / "outputs"


@pytest.mark.parametrize("sid,variants", [("LEGAL-01", tuple(VARIANTS)), ("ACC-01", ("gold", "defective"))])
def test_the_judge_prompt_read_back_shows_what_the_rendering_showed(tmp_path, sid, variants):
    """Against the rendering itself: every file's status and the SIMULATED judge's quality of it agree."""
    from pilot.judges.prompt import prompt_for_run
    from pilot.judges.prompt_readback import read_back
    from pilot.simulated.judge import deliverable_quality, load_config

    q = load_config().raw["quality"]
    for name, outputs in _package_variants(tmp_path, sid, variants):
        jp = prompt_for_run(load_scenario(sid), outputs)
        scenario, criteria, package = read_back(jp.text)
        assert scenario.id == sid and [c.id for c in criteria] == [c.id for c in jp.criteria]
        want = [(d.requested, d.status, round(deliverable_quality(d, q), 9)) for d in jp.package.deliverables]
        got = [(d.requested, d.status, round(deliverable_quality(d, q), 9)) for d in package.deliverables]
        assert got == want, name


def _judge_body(prompt: str, model: str) -> dict:
    return {
        "model": model,
        "max_tokens": 32000,
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
    }


def test_judges_sharing_a_model_are_told_apart_by_their_label(server, tmp_path):
    from pilot.judges.claude_judge import JUDGE_ATTEMPT_HEADER, JUDGE_HEADER
    from pilot.judges.prompt import prompt_for_run
    from pilot.judges.schema import parse_verdict

    _, outputs = next(_package_variants(tmp_path, SID))
    jp = prompt_for_run(load_scenario(SID), outputs)
    grades = []
    for jid, model in (("J3", "claude-sonnet-5-5"), ("J2", "claude-sonnet-5-5"), ("J1", "claude-opus-5-5")):
        status, _, data = _post(
            server,
            "/v1/messages",
            _judge_body(jp.text, model),
            server.api_key,
            headers={JUDGE_HEADER: jid, JUDGE_ATTEMPT_HEADER: "0"},
        )
        assert status == 200
        grades.append(parse_verdict(json.loads(data)["content"][0]["text"], jp.criteria))
    rows = [json.loads(x) for x in (server.record_dir / "judges.jsonl").read_text().splitlines()]
    assert [r["judge"] for r in rows] == ["J3", "J2", "J1"]
    assert all(g.rationale.startswith("Scripted judge") for g in grades)
    status, _, data = _post(server, "/v1/messages", _judge_body(jp.text, "claude-fable-5-1"), server.api_key)
    assert status == 400 and "no member of the study's panel" in json.loads(data)["error"]["message"]


def test_a_judge_session_through_the_real_cli_gets_the_simulated_judges_grade(tmp_path, monkeypatch, real_cli):
    """The real judge backend (the pinned CLI) asks the server; the grade parses and is the one the
    SIMULATED judge gives the real rendering under the same draw."""
    from pilot.judges.backend import JudgeRequest
    from pilot.judges.claude_judge import ClaudeCodeJudge
    from pilot.judges.prompt import prompt_for_run
    from pilot.judges.schema import parse_verdict
    from pilot.simulated.judge import SimulatedJudge
    from pilot.simulated.scripted_model import _digest

    [(_, outputs)] = _package_variants(tmp_path, SID, ("defective",))
    jp = prompt_for_run(load_scenario(SID), outputs)
    request = JudgeRequest(
        judge_id="J1",
        model="claude-opus-5-5",
        draw=1,
        attempt=0,
        prompt=jp.text,
        criteria=jp.criteria,
        package=jp.package,
        seed=_digest(jp.text + "\0J1") % 2**63,
    )
    from pilot.judges.claude_judge import LABEL_REQUESTS_KEY

    with ScriptedModelServer(seed=1, record_dir=tmp_path / "scripted") as srv:
        reply = ClaudeCodeJudge(
            real_cli,
            environ={"ANTHROPIC_BASE_URL": srv.base_url, "ANTHROPIC_API_KEY": srv.api_key, LABEL_REQUESTS_KEY: "1"},
        ).complete(request)
    assert reply.error is None, reply.error
    verdict = parse_verdict(reply.text, jp.criteria)
    sim = SimulatedJudge()
    expected = sim.verdict(request, sim._rng(request))
    assert verdict.criterion_scores == expected["criterion_scores"] and verdict.accept == expected["accept"]
    assert reply.cost_usd > 0


def test_the_drawn_denied_attempt_can_be_left_out_without_changing_the_other_draws(tmp_path):
    from pilot.simulated.scripted_model import WorkerPlayer

    sc, arm = load_scenario(SID), protocol.arms()["A1"]
    plans = [
        WorkerPlayer(237, tmp_path / str(flag), denied_attempts=flag).plan(sc, arm, f"/r/{SID}.A1.r1", 0, "/w")
        for flag in (True, False)
    ]
    with_attempt, without = plans
    assert with_attempt.truth["denied_attempt"]["family"] == "wget" and without.truth["denied_attempt"] is None
    assert [s[0]["input"]["description"] for s in with_attempt.steps][0] == "Try wget"
    assert with_attempt.steps[1:] == without.steps and with_attempt.truth["defects"] == without.truth["defects"]


def test_every_shell_arm_that_denies_a_program_of_the_host_tries_it_by_every_route(tmp_path):
    from pilot.simulated.scripted_model import HOST_DENIED_ROUTES, WorkerPlayer, host_program

    sc = load_scenario(SID)
    player = WorkerPlayer(237, tmp_path)
    for arm_id in ("A1", "A2", "A3"):
        arm = protocol.arms()[arm_id]
        plan = player.plan(sc, arm, f"/r/{SID}.{arm_id}.r1", 0, "/w")
        host = plan.truth["host_denied_attempts"]
        if not any(host_program(f) for f in arm.denied_families):
            assert host == []  # A3 denies nothing
            continue
        assert [a["how"] for a in host] == list(HOST_DENIED_ROUTES) and len({a["family"] for a in host}) == 1
        family, path = host[0]["family"], host[0]["path"]
        assert family in arm.denied_families and path == host_program(family) and Path(path).is_file()
        assert all(a["present_on_host"] for a in host)
        assert [a["command"].split()[0] for a in host] == [family, "bash", path]
        # each in a step of its own, after the drawn attempt's, and each meant to fail
        commands = [s[0]["input"]["command"] for s in plan.steps]
        at = [commands.index(a["command"], 1 if plan.truth["denied_attempt"] else 0) for a in host]
        assert all(len(plan.steps[i]) == 1 for i in at) and set(at) <= plan.expect_error
        drawn = plan.truth["denied_attempt"]
        assert plan.expect_error == set(at) | ({0} if drawn else set())
        if drawn:
            assert commands[0] == drawn["command"] and drawn["present_on_host"] is (
                host_program(drawn["family"]) is not None
            )


def test_the_shipped_portal_client_signs_in_and_fetches_as_the_models_worker_does(tmp_path):
    """A3's portal step against a real portal instance: the access log shows the worker's use of it."""
    from pilot.portal import start_instance
    from pilot.portal.access_log import summarise_access_log
    from pilot.simulated.scripted_model import portal_command

    ws = tmp_path / "ws"
    ws.mkdir()
    with start_instance("ACC-01", tmp_path / "run") as portal:
        portal.write_credentials(ws)
        cmd = portal_command(str(ws)).replace("python3 -", "python3 -I -", 1)
        out = subprocess.run(
            ["bash", "-c", cmd],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        )
        use = summarise_access_log(portal.access_log_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("downloaded") == 2 and "from pilot.portal.credentials" not in cmd.split("SOURCES")[0]
    assert use["sign_in"] == 1 and use["download"] == 2 and use["sign_out"] == 1
    assert sorted(p.name for p in ws.iterdir()) == ["portal_credentials.json"]  # nothing lands in the workspace


def test_a_repairing_session_supersedes_the_deliverables_written_before_it(tmp_path):
    import json

    from pilot.simulated.scripted_model import TRUTH_FILE, read_truth

    base = {"run_id": "r", "scenario": "EST-01", "arm": "A4", "defects": [], "expected_pass": True, "deliverables": []}
    rows = [
        # Session 0 cut the memo down with an edit written whole; session 1 reran the solver (outputs cleared) and wrote
        # the completion record whole; a run without a repair keeps what session 0 wrote.
        {
            **base,
            "session": 0,
            "written": {"outputs/memo.docx": "aaa", "outputs/completion_record.json": "bbb", "notes.txt": "ccc"},
        },
        {**base, "session": 1, "repaired": True, "written": {"outputs/completion_record.json": "ddd"}},
        {**base, "run_id": "s", "session": 0, "written": {"outputs/memo.docx": "aaa"}},
        {**base, "run_id": "s", "session": 1, "repaired": False, "written": {}},
    ]
    (tmp_path / TRUTH_FILE).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    truth = read_truth(tmp_path)
    assert truth["r"]["written"] == {"outputs/completion_record.json": "ddd", "notes.txt": "ccc"}
    assert truth["s"]["written"] == {"outputs/memo.docx": "aaa"}
