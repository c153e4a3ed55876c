"""The scheduler's run function: runner attempt, then the blind judges, then an outcome the store keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from pilot import pipeline, protocol
from pilot.attempt import AttemptOutcome, CellSpec
from pilot.outcomes import run_row
from pilot.run_record import RunRecord
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario


def cell(arm: str = "A3", sid: str | None = None) -> CellSpec:
    sid = sid or list_scenarios()[0]
    return CellSpec(
        run_id=f"{sid}.{arm}.r1",
        study="unit-SIMULATED",
        wave="pilot",
        scenario=sid,
        arm=arm,
        repeat=1,
        model="claude-opus-5-5",
        order_index=0,
        seed=77,
        cap_usd=4.0,
        wall_s=1800.0,
        reserve_usd=4.3,
    )


def gold_runner(calls: list):
    """Stands in for pilot.runner.run_attempt: lays out a finished attempt with the scenario's gold files."""

    def run_attempt(scenario_id, arm_id, *, backend, out_dir, seed, model=None, **kw):
        calls.append((scenario_id, arm_id, backend, seed, model))
        ws = build_gold_workspace(load_scenario(scenario_id), Path(out_dir) / "workspace")
        return RunRecord.from_dict(
            {
                "scenario": scenario_id,
                "arm": arm_id,
                "model": model,
                "backend": backend,
                "status": "completed",
                "censored": False,
                "censor_reason": None,
                "infra_error": None,
                "cost_usd": 1.5,
                "wall_s": 300.0,
                "turns": 20,
                "tool_calls": 18,
                "questions": 0,
                "deviations": [],
                "D": True,
                "E": False,
                "E_reasons": [],
                "criteria_passed": 5,
                "criteria_total": 5,
                "selfcheck_first": None,
                "recovery_used": False,
                "selfcheck_final": None,
                "workspace": str(ws),
            }
        )

    return run_attempt


def test_run_cell_runs_then_judges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pilot import runner

    calls: list = []
    monkeypatch.setattr(runner, "run_attempt", gold_runner(calls))
    monkeypatch.delenv(pipeline.JUDGE_BACKEND_ENV, raising=False)
    c = cell()
    out = pipeline.run_cell(c, tmp_path / "attempt", "local-1", "simulated", c.seed)
    assert isinstance(out, AttemptOutcome) and out.infra_error is None and out.status == "completed"
    assert calls == [(c.scenario, "A3", "simulated", 77, "claude-opus-5-5")]
    judges = out.record["judges"]
    assert [j["judge_id"] for j in judges] == [j["id"] for j in protocol.study().judge_panel]
    assert all(j["backend"] == "simulated" and j["score_0_100"] is not None for j in judges)
    assert (
        out.cost_usd == 1.5
        and out.judge_cost_usd == pytest.approx(sum(j["cost_usd"] for j in judges))
        and out.judge_cost_usd > 0
    )
    # The outcome becomes a run-table row with the judges' scores.
    r = run_row(
        RunRecord.from_dict(out.record),
        run_id=c.run_id,
        study_name=c.study,
        backend="simulated",
        wave=c.wave,
        repeat=c.repeat,
        seed=c.seed,
        order_index=c.order_index,
        node="local-1",
        attempts=1,
    )
    assert r["n_judges"] == 3 and r["Q"] >= 70 and r["S"] is True
    # Deterministic in the seed.
    again = pipeline.run_cell(c, tmp_path / "attempt2", "local-1", "simulated", c.seed)
    assert [j["criterion_scores"] for j in again.record["judges"]] == [j["criterion_scores"] for j in judges]


def test_infra_error_is_not_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pilot import runner

    monkeypatch.setattr(
        runner,
        "run_attempt",
        lambda *a, **k: RunRecord.from_dict(
            {"status": "infra_error", "infra_error": "portal did not start", "cost_usd": 0.0}
        ),
    )
    out = pipeline.run_cell(cell(), tmp_path / "a", "local-1", "simulated", 1)
    assert out.infra_error == "portal did not start" and out.status == "infra_error"
    assert out.record["judges"] is None and out.judge_cost_usd == 0.0


def test_judging_failure_leaves_judges_missing_not_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pilot import runner

    monkeypatch.setattr(runner, "run_attempt", gold_runner([]))

    def broken(*a, **k):
        raise RuntimeError("renderer exploded")

    monkeypatch.setattr(pipeline, "judge_run", broken)
    out = pipeline.run_cell(cell(), tmp_path / "a", "local-1", "simulated", 1)
    assert out.infra_error is None and out.cost_usd == 1.5
    assert all(
        j["error"].startswith("judging failed: RuntimeError") and j["score_0_100"] is None for j in out.record["judges"]
    )
    assert "renderer exploded" in out.record["judge_error"]


def test_judge_backend_pairing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pipeline.JUDGE_BACKEND_ENV, raising=False)
    assert pipeline.judge_backend_for("simulated") == "simulated"
    assert pipeline.judge_backend_for("claude-code") == "claude-code"
    monkeypatch.setenv(pipeline.JUDGE_BACKEND_ENV, "simulated")
    assert pipeline.judge_backend_for("claude-code") == "simulated"
    monkeypatch.setenv(pipeline.JUDGE_BACKEND_ENV, "gpt")
    with pytest.raises(ValueError, match="PILOT_JUDGE_BACKEND"):
        pipeline.judge_backend_for("simulated")


@pytest.mark.usefixtures("soffice")
@pytest.mark.parametrize("arm", ["A0", "A4"])
def test_run_cell_with_the_real_runner(tmp_path: Path, arm: str) -> None:
    c = cell(arm)
    out = pipeline.run_cell(c, tmp_path / "attempt", "local-1", "simulated", c.seed)
    assert out.infra_error is None, out.infra_error
    assert len(out.record["judges"]) == 3 and out.record["D"] is not None
    r = run_row(
        RunRecord.from_dict(out.record),
        run_id=c.run_id,
        study_name=c.study,
        backend="simulated",
        wave=c.wave,
        repeat=c.repeat,
        seed=c.seed,
        order_index=c.order_index,
        node="local-1",
        attempts=1,
    )
    assert r["arm"] == arm and r["n_judges"] + sum(1 for j in out.record["judges"] if j["error"]) == 3


def test_judge_command_prints_prompt_and_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import json

    from pilot.cli.main import main

    sid = list_scenarios()[0]
    ws = build_gold_workspace(load_scenario(sid), tmp_path / "ws")
    assert main(["judge", sid, str(ws / "outputs"), "--prompt"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("You are a demanding manager") and "== THE RUBRIC ==" in text
    assert main(["judge", sid, str(ws / "outputs"), "--seed", "4"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    assert [v["judge_id"] for v in verdicts] == ["J1", "J2", "J3"]
    assert main(["judge", sid, str(tmp_path / "nope")]) == 2
