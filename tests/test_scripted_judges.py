"""The scripted judges of a rehearsal: the label that names each judge call, the judge branches, and the report's
checks.

The scripted model server tells the panel's members apart by the label the
CLI judge sends with every call (``x-pilot-judge``, ``x-pilot-judge-attempt``),
never by the order of the calls: J2 and J3 share a model, and a retry would
otherwise be taken for the other. The judge branches
(:mod:`pilot.simulated.rehearsal_branches`) are played per labelled member
and attempt, and the report holds each judge to the branch it played.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from pilot import pipeline, protocol
from pilot.judges.backend import JudgeReply, JudgeRequest
from pilot.judges.claude_judge import JUDGE_ATTEMPT_HEADER, JUDGE_HEADER, LABEL_REQUESTS_KEY, ClaudeCodeJudge
from pilot.judges.panel import judge_prompt, judge_run, make_backend
from pilot.judges.prompt import JudgePrompt, prompt_for_run
from pilot.judges.schema import VerdictError, parse_verdict
from pilot.scenarios import load_scenario
from pilot.simulated import rehearsal_branches
from pilot.simulated import rehearsal_report as rehearsal
from pilot.simulated.rehearsal_branches import RunBranch
from pilot.simulated.scripted_model import (
    JUDGES_FILE,
    ScriptedModelServer,
    judge_hold_s,
    scripted_record_dir,
    scripted_upstream,
)

SID = "LEGAL-01"
MODELS = {str(j["id"]): str(j["model"]) for j in protocol.study().judge_panel}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The outputs folder of LEGAL-01's reference package."""
    from pilot.simulated import agent as simulated

    sc = load_scenario(SID)
    ws = tmp_path_factory.mktemp("package")
    shutil.copytree(sc.inputs_dir, ws / "inputs")
    simulated.write_gold(sc, ws)
    return ws / "outputs"


@pytest.fixture(scope="module")
def prompt(outputs: Path) -> JudgePrompt:
    return prompt_for_run(load_scenario(SID), outputs)


def _post(
    server: ScriptedModelServer, text: str, model: str, label: tuple[str, str] | None, timeout: float = 60.0
) -> tuple[int, dict]:
    host, port = server.base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    headers = {"content-type": "application/json", "x-api-key": server.api_key}
    if label is not None:
        headers.update({JUDGE_HEADER: label[0], JUDGE_ATTEMPT_HEADER: label[1]})
    body = {
        "model": model,
        "max_tokens": 32000,
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
    }
    try:
        conn.request("POST", "/v1/messages", body=json.dumps(body).encode(), headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _ask(server: ScriptedModelServer, prompt: JudgePrompt, jid: str, attempt: int = 0, text: str | None = None) -> str:
    status, data = _post(server, text or prompt.text, MODELS[jid], (jid, str(attempt)))
    assert status == 200, data
    return data["content"][0]["text"]


def _rows(server: ScriptedModelServer) -> list[dict]:
    return [json.loads(x) for x in (server.record_dir / JUDGES_FILE).read_text(encoding="utf-8").splitlines()]


class HTTPJudge:
    """A judge backend that asks the server as the CLI judge does (the label, a time limit per call), without the
    CLI."""

    name = "claude-code"

    def __init__(self, server: ScriptedModelServer, timeout_s: float = 30.0) -> None:
        self.server, self.timeout_s = server, timeout_s

    def complete(self, request: JudgeRequest) -> JudgeReply:
        try:
            status, data = _post(
                self.server, request.prompt, request.model, (request.judge_id, str(request.attempt)), self.timeout_s
            )
        except TimeoutError:
            return JudgeReply(None, 0.0, f"no answer within {self.timeout_s:g} s")
        if status != 200:
            return JudgeReply(None, 0.0, f"status {status}: {data}")
        return JudgeReply(data["content"][0]["text"], 0.001)


# ----------------------------------------------------------------- the label


def test_a_judge_request_without_its_label_is_refused_naming_the_header(tmp_path, prompt):
    with ScriptedModelServer(seed=1, record_dir=tmp_path / "s") as server:
        status, data = _post(server, prompt.text, MODELS["J2"], None)
        assert status == 400 and JUDGE_HEADER in data["error"]["message"]
        status, data = _post(server, prompt.text, MODELS["J2"], ("J1", "0"))  # J1 is not of J2's model
        assert (
            status == 400
            and "names no panel member" in data["error"]["message"]
            and "J2, J3" in data["error"]["message"]
        )
        status, data = _post(server, prompt.text, MODELS["J1"], ("J1", "2"))
        assert status == 400 and JUDGE_ATTEMPT_HEADER in data["error"]["message"]
        refusals = [json.loads(x) for x in (server.record_dir / "refusals.jsonl").read_text().splitlines()]
        assert len(refusals) == 3 and JUDGE_HEADER in refusals[0]["reason"]
        assert not (server.record_dir / JUDGES_FILE).exists()


def test_j2_and_j3_are_told_apart_by_their_label_whatever_the_order(tmp_path, prompt):
    """The same labelled call gets the same grade in any order, a retry included; the grade is the member's own draw."""
    from pilot.simulated.judge import SimulatedJudge
    from pilot.simulated.scripted_model import _digest

    retry = prompt.text + "\n\nYour previous answer could not be used (x). Answer again with the JSON object only.\n"
    orders = [[("J2", 0), ("J3", 0), ("J2", 1)], [("J2", 1), ("J3", 0), ("J2", 0)], [("J3", 0), ("J2", 0), ("J2", 1)]]
    seen: list[dict[tuple[str, int], str]] = []
    for k, order in enumerate(orders):
        with ScriptedModelServer(seed=1, record_dir=tmp_path / f"s{k}") as server:
            seen.append({(jid, a): _ask(server, prompt, jid, a, retry if a else None) for jid, a in order})
            assert [(r["judge"], r["attempt"]) for r in _rows(server)] == order
    assert seen[0] == seen[1] == seen[2]
    sim = SimulatedJudge()
    for (jid, attempt), text in seen[0].items():
        member = next(j for j in protocol.study().judge_panel if j["id"] == jid)
        request = JudgeRequest(
            jid,
            member["model"],
            int(member["draw"]),
            attempt,
            prompt.text,
            prompt.criteria,
            prompt.package,
            _digest(prompt.text + "\0" + jid) % 2**63,
        )
        want = sim.verdict(request, sim._rng(request))
        got = parse_verdict(text, prompt.criteria)
        assert (got.criterion_scores, got.accept) == (want["criterion_scores"], want["accept"]), (jid, attempt)


# ----------------------------------------------------------------- the branches


def test_judge_malformed_once_answers_prose_then_a_grade(tmp_path, prompt):
    with ScriptedModelServer(
        seed=1, record_dir=tmp_path / "s", branch=RunBranch(judges={"J2": "judge_malformed_once"})
    ) as server:
        first, retry, other = (
            _ask(server, prompt, "J2", 0),
            _ask(server, prompt, "J2", 1),
            _ask(server, prompt, "J3", 0),
        )
        rows = _rows(server)
    with pytest.raises(ValueError):
        json.loads(first)
    with pytest.raises(VerdictError):
        parse_verdict(first, prompt.criteria)
    parse_verdict(retry, prompt.criteria)
    parse_verdict(other, prompt.criteria)
    assert [(r["judge"], r["attempt"], r["branch"], r["answer"], r["valid"]) for r in rows] == [
        ("J2", 0, "judge_malformed_once", "not_json", False),
        ("J2", 1, "judge_malformed_once", "grade", True),
        ("J3", 0, None, "grade", True),
    ]
    grades = rehearsal.read_scripted_grades(server.record_dir)
    assert (
        grades["J2"]["attempt"] == 1
        and grades["J2"]["scores"] == parse_verdict(retry, prompt.criteria).criterion_scores
    )


def test_judge_schema_invalid_answers_json_the_schema_refuses_both_times(tmp_path, prompt):
    with ScriptedModelServer(
        seed=1, record_dir=tmp_path / "s", branch=RunBranch(judges={"J3": "judge_schema_invalid"})
    ) as server:
        answers = [_ask(server, prompt, "J3", a) for a in (0, 1)]
        rows = _rows(server)
    for text in answers:
        data = json.loads(text)
        assert set(data["criterion_scores"]) == {c.id for c in prompt.criteria[1:]}
        with pytest.raises(VerdictError, match=prompt.criteria[0].id):
            parse_verdict(text, prompt.criteria)
    assert [(r["attempt"], r["answer"], r["valid"]) for r in rows] == [
        (0, "schema_invalid", False),
        (1, "schema_invalid", False),
    ]
    assert "J3" not in rehearsal.read_scripted_grades(server.record_dir)


def test_judge_timeout_holds_past_the_limit_and_the_hold_ends(tmp_path, prompt):
    branch = RunBranch(judges={"J1": "judge_timeout"}, judge_timeout_s=0.5)
    hold = judge_hold_s(branch.judge_timeout_s)
    assert hold > branch.judge_timeout_s
    with ScriptedModelServer(seed=1, record_dir=tmp_path / "s", branch=branch) as server:
        with pytest.raises((TimeoutError, socket.timeout)):  # the client gives up at the limit, as the CLI judge does
            _post(server, prompt.text, MODELS["J1"], ("J1", "0"), timeout=branch.judge_timeout_s)
        t = time.monotonic()
        _ask(server, prompt, "J2")  # the others answer at once
        assert time.monotonic() - t < hold
        t = time.monotonic()
        parse_verdict(_ask(server, prompt, "J1", 1), prompt.criteria)  # held, then answered: the thread ends
        assert time.monotonic() - t >= hold
        rows = _rows(server)
    assert [(r["judge"], r["answer"], r["held_s"]) for r in rows] == [
        ("J1", "held", hold),
        ("J2", "grade", None),
        ("J1", "held", hold),
    ]


def test_the_panel_meets_every_judge_branch_and_the_report_finds_nothing(tmp_path, prompt):
    """The panel's retry and its missing judges over the server's branches; the report's judge checks agree."""
    branch = RunBranch(
        judges={"J1": "judge_malformed_once", "J2": "judge_schema_invalid", "J3": "judge_timeout"}, judge_timeout_s=2.0
    )
    with ScriptedModelServer(seed=1, record_dir=tmp_path / "s", branch=branch) as server:
        results = [
            r.to_dict()
            for r in judge_prompt(
                prompt, backend=HTTPJudge(server, timeout_s=2.0), seed=1, panel=protocol.study().judge_panel
            )
        ]
        grades = rehearsal.read_scripted_grades(server.record_dir)
    j1, j2, j3 = results
    assert j1["error"] is None and j1["attempts"] == 2
    assert (
        j2["error"].startswith("reply failed the output schema") and j2["score_0_100"] is None and j2["attempts"] == 2
    )
    assert j3["error"].startswith("no answer within") and j3["score_0_100"] is None and j3["attempts"] == 2
    assert rehearsal.check_judge_branches(results, branch) == []
    assert rehearsal.check_judges(results, 3, branch) == (1, [])
    weights = {c.id: c.weight for c in load_scenario(SID).rubric.criteria}
    assert rehearsal.check_judge_grades(results, grades, weights) == []
    # Without the plan, the same results are findings: two judges missing, three asked twice.
    assert len(rehearsal.check_judges(results, 3)[1]) == 2
    assert len(rehearsal.check_judge_branches(results, None)) == 2 + 3


def test_the_panel_over_the_real_cli_keeps_j2s_retry_its_own(tmp_path, outputs, real_cli):
    """J2 answers prose once, so the calls go J1, J2, J2 (retry), J3: J3's call is not taken for J2's retry, because the
    pinned CLI sends each call's label (ANTHROPIC_CUSTOM_HEADERS) and the server reads it."""
    sc = load_scenario(SID)
    branch = RunBranch(judges={"J2": "judge_malformed_once"})
    with ScriptedModelServer(seed=5, record_dir=tmp_path / "s", branch=branch) as server:
        environ = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": server.api_key, LABEL_REQUESTS_KEY: "1"}
        results = [
            r.to_dict()
            for r in judge_run(
                sc, outputs, backend="claude-code", seed=5, claude_bin=real_cli, environ=environ, timeout_s=120
            )
        ]
        rows = _rows(server)
    assert [(r["judge"], r["attempt"], r["answer"]) for r in rows] == [
        ("J1", 0, "grade"),
        ("J2", 0, "not_json"),
        ("J2", 1, "grade"),
        ("J3", 0, "grade"),
    ]
    assert [(r["judge_id"], r["error"], r["attempts"]) for r in results] == [
        ("J1", None, 1),
        ("J2", None, 2),
        ("J3", None, 1),
    ]
    weights = {c.id: c.weight for c in sc.rubric.criteria}
    assert rehearsal.check_judge_grades(results, rehearsal.read_scripted_grades(server.record_dir), weights) == []
    assert rehearsal.check_judge_branches(results, branch) == []
    assert all(r["cost_usd"] > 0 for r in results)


# ----------------------------------------------------------------- the CLI judge's label and time limit


def test_the_cli_judge_labels_its_calls_only_for_a_scripted_upstream_on_loopback(tmp_path):
    request = JudgeRequest("J3", "claude-sonnet-5-5", 2, 1, "p", [], None, 1)  # no package: only the label is read
    cli = tmp_path / "claude"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    up = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "k"}
    labelled = ClaudeCodeJudge(cli, environ={**up, LABEL_REQUESTS_KEY: "1"})._env(tmp_path, tmp_path, request)
    assert labelled["ANTHROPIC_CUSTOM_HEADERS"] == f"{JUDGE_HEADER}: J3\n{JUDGE_ATTEMPT_HEADER}: 1"
    assert LABEL_REQUESTS_KEY not in labelled  # the request for labels stays with the harness
    assert "ANTHROPIC_CUSTOM_HEADERS" not in ClaudeCodeJudge(cli, environ=up)._env(tmp_path, tmp_path, request)
    assert "ANTHROPIC_CUSTOM_HEADERS" not in ClaudeCodeJudge(cli)._env(tmp_path, tmp_path, request)
    with pytest.raises(ValueError, match="loopback"):
        ClaudeCodeJudge(
            cli,
            environ={
                "ANTHROPIC_BASE_URL": "https://api.anthropic.com",
                "ANTHROPIC_API_KEY": "k",
                LABEL_REQUESTS_KEY: "1",
            },
        )


def test_the_judges_time_limit_reaches_the_cli_judge(tmp_path):
    cli = tmp_path / "claude"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    assert make_backend("claude-code", claude_bin=cli, timeout_s=20).timeout_s == 20.0
    assert make_backend("claude-code", claude_bin=cli).timeout_s == ClaudeCodeJudge(cli).timeout_s
    assert make_backend("simulated", timeout_s=20).name == "simulated"  # the simulated judges need no time limit


def test_the_scripted_upstream_plays_the_plans_branches_and_asks_for_labels(tmp_path, monkeypatch):
    plan = tmp_path / "plan.yml"
    plan.write_text("judge_timeout_s: 7\nruns:\n  ACC-01.A4.r1: {judges: {J3: judge_timeout}}\n", encoding="utf-8")
    monkeypatch.setenv(rehearsal_branches.PLAN_ENV, str(plan))
    first = tmp_path / "runs" / "ACC-01.A4.r1" / "attempt-1"
    with scripted_upstream(first, 1) as upstream:
        assert upstream[pipeline.UPSTREAM_JUDGE_TIMEOUT_KEY] == "7.0" and upstream[LABEL_REQUESTS_KEY] == "1"
        cli = tmp_path / "claude"
        cli.write_text("#!/bin/sh\n")
        cli.chmod(0o755)
        assert ClaudeCodeJudge(cli, environ=upstream).label_requests  # the rehearsal's judges label their calls
    played = rehearsal_branches.read_record(scripted_record_dir(first))
    assert played is not None and dict(played.judges) == {"J3": "judge_timeout"} and played.judge_timeout_s == 7.0
    rerun = first.with_name("attempt-2")
    with scripted_upstream(rerun, 1) as upstream:
        assert pipeline.UPSTREAM_JUDGE_TIMEOUT_KEY not in upstream and upstream[LABEL_REQUESTS_KEY] == "1"
    assert rehearsal_branches.read_record(scripted_record_dir(rerun)) == RunBranch()


# ----------------------------------------------------------------- the report


def _judge(
    jid: str, score: float | None, attempts: int = 1, error: str | None = None, scores: dict | None = None
) -> dict[str, Any]:
    return {
        "judge_id": jid,
        "backend": "claude-code",
        "score_0_100": score,
        "attempts": attempts,
        "error": error,
        "criterion_scores": scores if scores is not None else ({} if score is None else {"a": 2, "b": 3}),
        "accept": bool(score),
    }


def test_a_judge_recorded_with_another_judges_grade_is_a_finding(tmp_path):
    """J2's grade recorded as J3's (and J3's as J2's): the scripted rows, by label, say whose each grade was."""
    rows = [
        {"judge": "J2", "attempt": 0, "valid": True, "answer": "grade", "scores": {"a": 4, "b": 4}, "accept": True},
        {"judge": "J3", "attempt": 0, "valid": True, "answer": "grade", "scores": {"a": 1, "b": 2}, "accept": False},
        {"judge": "J1", "attempt": 0, "valid": False, "answer": "not_json", "scores": None, "accept": None},
    ]
    (tmp_path / JUDGES_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    grades = rehearsal.read_scripted_grades(tmp_path)
    assert set(grades) == {"J2", "J3"}  # an answer that is no grade is not one
    weights = {"a": 0.5, "b": 0.5}
    right = [_judge("J2", 100.0, scores={"a": 4, "b": 4}), _judge("J3", 37.5, scores={"a": 1, "b": 2})]
    right[1]["accept"] = False
    assert rehearsal.check_judge_grades(right, grades, weights) == []
    swapped = [dict(right[0], judge_id="J3"), dict(right[1], judge_id="J2")]
    found = rehearsal.check_judge_grades(swapped, grades, weights)
    assert any(f.startswith("judges: J3 recorded scores") for f in found) and any(
        f.startswith("judges: J2 recorded scores") for f in found
    )


def test_a_missing_judge_the_plan_did_not_mean_is_a_finding():
    branch = RunBranch(judges={"J3": "judge_timeout"}, judge_timeout_s=20)
    planned = [_judge("J1", 80.0), _judge("J2", 60.0), _judge("J3", None, 2, "the CLI did not answer within 20 s")]
    assert rehearsal.check_judges(planned, 3, branch) == (2, [])
    assert rehearsal.check_judge_branches(planned, branch) == []
    unplanned = [
        _judge("J1", 80.0),
        _judge("J2", None, 2, "reply failed the output schema"),
        _judge("J3", None, 2, "timeout"),
    ]
    parsed, found = rehearsal.check_judges(unplanned, 3, branch)
    assert parsed == 1 and found == ["judge J2: no parsed verdict (reply failed the output schema)"]
    found = rehearsal.check_judge_branches(unplanned, branch)
    assert any(f.startswith("judge J2: played no branch, so it must be present") for f in found)
    assert any("judge J2: played no branch, so the panel asks it 1 time(s), but 2" in f for f in found)
    assert not any(f.startswith("judge J3") for f in found)


def test_each_judge_is_held_to_its_branch_and_q_to_the_mean_of_the_others():
    branch = RunBranch(judges={"J1": "judge_malformed_once", "J2": "judge_schema_invalid"})
    good = [_judge("J1", 70.0, 2), _judge("J2", None, 2, "reply failed the output schema"), _judge("J3", 50.0)]
    assert rehearsal.check_judge_branches(good, branch) == []
    # The malformed reply was taken without the retry; the schema-invalid judge got a score in.
    found = rehearsal.check_judge_branches([_judge("J1", 70.0, 1), _judge("J2", 40.0, 2), _judge("J3", 50.0)], branch)
    assert any("J1: played judge_malformed_once, so the panel asks it 2 time(s), but 1" in f for f in found)
    assert any(f.startswith("judge J2: played judge_schema_invalid, so it must be missing") for f in found)
    assert any(f.startswith("judges: Q is 53.333333, not 60.000000") for f in found)
    # A missing judge recorded as a zero, no error: Q then counts it.
    found = rehearsal.check_judge_branches(
        [_judge("J1", 70.0, 2), _judge("J2", 0.0, 2, scores={"a": 0, "b": 0}), _judge("J3", 50.0)], branch
    )
    assert any("counted as zero" in f for f in found)
    # The retry's grade lost: J1 missing after its malformed reply.
    found = rehearsal.check_judge_branches([_judge("J1", None, 2, "reply failed"), good[1], good[2]], branch)
    assert found == [
        "judge J1: played judge_malformed_once, so its retry's grade must be recorded, but it is missing (reply failed)"
    ]
    # A judge the plan named that has no result at all.
    assert rehearsal.check_judge_branches([good[0], good[2]], branch)[0].startswith("judge J2: the plan gave it")
