"""``pilot run-one``: one attempt from the command line, its record printed as JSON and left on disk."""

from __future__ import annotations

import json

import pytest
from fake_messages_api import FakeMessagesAPI
from worker_env_support import make_worker_env

from pilot import paths, protocol
from pilot.cli.main import main

FAKE_CLI = paths.ROOT / "tests" / "fake_claude" / "claude"

RECORD_FIELDS = {
    "status",
    "censored",
    "censor_reason",
    "cost_usd",
    "wall_s",
    "turns",
    "tool_calls",
    "tool_calls_by_tool",
    "questions",
    "deviations",
    "D",
    "E",
    "E_reasons",
    "criteria_passed",
    "criteria_total",
    "criteria",
    "selfcheck_first",
    "recovery_used",
    "selfcheck_final",
    "cli_version",
    "infra_error",
    "workspace",
    "transcript",
}


@pytest.mark.usefixtures("bwrap")  # the A4 run's self-check runs confined
def test_run_one_simulated_prints_the_record_and_leaves_the_run_on_disk(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run-one", "LEGAL-01", "A4", "--backend", "simulated", "--out", str(out), "--seed", "4"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert RECORD_FIELDS <= set(rec)
    assert rec["backend"] == "simulated" and rec["scenario"] == "LEGAL-01" and rec["arm"] == "A4" and rec["seed"] == 4
    assert rec["selfcheck_first"] is not None
    for name in (
        "workspace/BRIEF.md",
        "workspace/POLICY.md",
        "workspace/CHECKPOINT.md",
        "workspace/selfcheck.py",
        "transcript.jsonl",
        "evaluation.json",
        "run_record.json",
    ):
        assert (out / name).is_file(), name
    assert json.loads((out / "run_record.json").read_text()) == rec


@pytest.fixture
def api(monkeypatch):
    """A stand-in Messages API as the operator's upstream; the model proxy forwards to it."""
    with FakeMessagesAPI(protocol.study()["worker"]["model"], []) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-operator-only")
        yield fake


@pytest.mark.usefixtures("bwrap")
def test_run_one_claude_code_against_the_test_double(tmp_path, capsys, api):
    env = make_worker_env(tmp_path)
    out = tmp_path / "runs" / "r"
    code = main(
        [
            "run-one",
            "LEGAL-01",
            "A1",
            "--backend",
            "claude-code",
            "--out",
            str(out),
            "--claude-bin",
            str(FAKE_CLI),
            "--worker-env",
            str(env),
        ]
    )
    rec = json.loads(capsys.readouterr().out)
    assert code == 0 and rec["status"] == "completed" and rec["cli_version"] == "2.1.332"
    assert rec["D"] is False  # the double's default session writes nothing
    assert rec["enforcement"] == "bubblewrap"
    assert (out / "record" / "launch-0.json").is_file() and (out / "transcript.jsonl").stat().st_size > 0


def test_run_one_refuses_a_host_that_cannot_isolate_unless_opted_out(tmp_path, capsys, api, monkeypatch):
    from pilot.agents import sandbox

    monkeypatch.setattr(
        sandbox,
        "isolation_problems",
        lambda: ("bubblewrap (bwrap) is not installed: run `tools/ensure-system-packages.sh sandbox`",),
    )
    env = make_worker_env(tmp_path)
    args = [
        "run-one",
        "LEGAL-01",
        "A1",
        "--backend",
        "claude-code",
        "--out",
        str(tmp_path / "r"),
        "--claude-bin",
        str(FAKE_CLI),
        "--worker-env",
        str(env),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "bwrap" in err and "ensure-system-packages.sh sandbox" in err and not (tmp_path / "r").exists()
    # The development opt-in runs it and says so on the record.
    assert main([*args, "--allow-unisolated"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["enforcement"] == "unisolated" and any("UNISOLATED" in n for n in rec["notes"])


def test_run_one_refuses_bad_arguments_with_a_clear_message(tmp_path, capsys):
    assert main(["run-one", "LEGAL-01", "A9", "--out", str(tmp_path / "x")]) == 2
    assert "arm 'A9'" in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "thesis.tex").write_text("keep me")
    assert main(["run-one", "LEGAL-01", "A1", "--out", str(busy)]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert (busy / "thesis.tex").read_text() == "keep me"
