"""The real judge backend (Claude Code CLI, single turn, no tools, JSON) against a test double of the CLI."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from judge_files import FakeScenario, gold_outputs

from pilot import protocol
from pilot.judges import claude_judge, judge_run
from pilot.judges.claude_judge import ClaudeCodeJudge, ClaudeNotFound, locate_claude, parse_cli_output

FAKE = Path(__file__).with_name("fake_claude_judge.py")


def fake_cli(tmp_path: Path, mode: str) -> tuple[Path, Path]:
    """A wrapper executable around the fake CLI, fixing its mode and log folder."""
    log = tmp_path / f"log-{mode}"
    wrapper = tmp_path / f"claude-{mode}"
    wrapper.write_text(
        f'#!/bin/sh\nFAKE_JUDGE_MODE={mode} FAKE_JUDGE_LOG="{log}" exec "{sys.executable}" "{FAKE}" "$@"\n',
        encoding="utf-8",
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in (log / "calls.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def run(tmp_path: Path):
    sc = FakeScenario(tmp_path)
    out = gold_outputs(tmp_path / "runs" / "FIN-09.A3.r1" / "outputs")
    return sc, out


def test_judges_through_the_cli_single_turn_tool_less(tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch) -> None:
    sc, out = run
    cli, log = fake_cli(tmp_path, "ok")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("SOME_OPERATOR_SECRET", "do-not-pass")
    results = judge_run(sc, out, backend="claude-code", seed=1, claude_bin=cli)
    assert [r.error for r in results] == [None, None, None]
    assert [r.score_0_100 for r in results] == [75.0, 75.0, 75.0]
    # Judge cost is the client's total_cost_usd.
    assert [r.cost_usd for r in results] == [0.0123, 0.0045, 0.0045]
    seen = calls(log)
    assert len(seen) == 3
    panel = protocol.study().judge_panel
    for call, member in zip(seen, panel, strict=True):
        argv = call["argv"]
        assert argv[:3] == ["-p", "--output-format", "json"]
        assert argv[argv.index("--tools") + 1] == "" and argv[argv.index("--max-turns") + 1] == "1"
        assert argv[argv.index("--model") + 1] == member["model"]
        assert argv[argv.index("--setting-sources") + 1] == ""
        assert ("--bare" in argv) == bool(protocol.study()["cli"]["bare"])  # study.yml cli.bare (false since A-010)
        # A fresh, empty config folder and working folder per call.
        assert call["config_dir_empty"] and call["cwd_empty"]
        assert "SOME_OPERATOR_SECRET" not in call["env_keys"] and "ANTHROPIC_API_KEY" in call["env_keys"]
        assert call["prompt"].startswith("You are a demanding manager")
        assert "| 5 | Total | =SUM(B2:B4) |" in call["prompt"]
    assert len({c["config_dir"] for c in seen}) == 3


def test_fenced_reply_is_accepted(tmp_path: Path, run) -> None:
    sc, out = run
    cli, _ = fake_cli(tmp_path, "fenced")
    results = judge_run(sc, out, backend="claude-code", seed=1, claude_bin=cli)
    assert all(r.available for r in results)


def test_schema_failure_retried_once_through_the_cli(tmp_path: Path, run) -> None:
    sc, out = run
    cli, log = fake_cli(tmp_path, "bad_once")
    results = judge_run(sc, out, backend="claude-code", seed=1, claude_bin=cli)
    # J1 (opus) and J2 (first sonnet draw) fail once and succeed on the retry;
    # J3 is a fresh session of the same model and answers at once.
    assert [r.attempts for r in results] == [2, 2, 1]
    assert all(r.available for r in results)
    assert results[0].cost_usd == pytest.approx(2 * 0.0123)
    assert "previous answer could not be used" in calls(log)[1]["prompt"]


@pytest.mark.parametrize(
    "mode, message", [("bad", "output schema"), ("error", "529"), ("garbage", "without a result object")]
)
def test_failing_cli_leaves_the_judge_missing(tmp_path: Path, run, mode: str, message: str) -> None:
    sc, out = run
    cli, log = fake_cli(tmp_path, mode)
    results = judge_run(sc, out, backend="claude-code", seed=1, claude_bin=cli)
    assert all(not r.available and r.score_0_100 is None and r.attempts == 2 for r in results)
    assert all(message in r.error for r in results)
    assert len(calls(log)) == 6


def test_wrong_cli_version_is_refused(tmp_path: Path, run) -> None:
    sc, out = run
    cli, log = fake_cli(tmp_path, "old_version")
    results = judge_run(sc, out, backend="claude-code", seed=1, claude_bin=cli)
    assert all("not the pinned 2.1.332" in r.error for r in results)
    assert not (log / "calls.jsonl").exists()  # no judging call was made


def test_locate_claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli, _ = fake_cli(tmp_path, "ok")
    assert locate_claude(cli) == cli
    monkeypatch.setenv("PILOT_CLAUDE_BIN", str(cli))
    assert locate_claude() == cli
    # Nothing anywhere: a clear error saying how to provide one.
    monkeypatch.setenv("PILOT_CLAUDE_BIN", str(tmp_path / "nope"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(claude_judge.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ClaudeNotFound, match="PILOT_CLAUDE_BIN"):
        locate_claude()


def test_parse_cli_output_cases() -> None:
    ok = parse_cli_output(
        json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "{}", "total_cost_usd": 0.5}),
        0,
    )
    assert ok.text == "{}" and ok.cost_usd == 0.5 and ok.error is None
    # is_error with subtype success is an API failure, not a verdict.
    api = parse_cli_output(
        json.dumps(
            {"type": "result", "subtype": "success", "is_error": True, "api_error_status": 500, "total_cost_usd": 0.1}
        ),
        1,
    )
    assert api.text is None and "500" in api.error and api.cost_usd == 0.1
    turns = parse_cli_output(
        json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": True, "total_cost_usd": 0.2}), 1
    )
    assert "error_max_turns" in turns.error
    empty = parse_cli_output("", 1, "boom")
    assert "boom" in empty.error and empty.cost_usd == 0.0


def test_command_is_the_documented_one(tmp_path: Path) -> None:
    cli, _ = fake_cli(tmp_path, "ok")
    cmd = ClaudeCodeJudge(cli).command("claude-sonnet-5-5")
    bare = ["--bare"] if protocol.study()["cli"]["bare"] else []  # off since A-010
    assert cmd[1:] == [
        "-p",
        "--output-format",
        "json",
        "--tools",
        "",
        "--max-turns",
        "1",
        "--model",
        "claude-sonnet-5-5",
        "--setting-sources",
        "",
        *bare,
    ]
