"""Outcomes of one run -> one run-table row that the statistics' schema accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pilot import protocol, runtable
from pilot.outcomes import (
    OutcomeError,
    acceptance,
    agent_cost,
    human_minutes,
    quality,
    rows_from_store,
    run_row,
    run_table,
)
from pilot.run_record import RunRecord
from pilot.scenarios import list_scenarios, load_scenario


def _judge(
    jid: str, score: float | None, accept: bool | None = True, cost: float = 0.01, error: str | None = None
) -> dict:
    model = "claude-opus-5-5" if jid == "J1" else "claude-sonnet-5-5"
    return {
        "judge_id": jid,
        "model": model,
        "draw": 1,
        "backend": "simulated",
        "criterion_scores": {},
        "accept": accept,
        "rationale": "",
        "score_0_100": score,
        "cost_usd": cost,
        "attempts": 1,
        "error": error,
    }


def record(arm: str = "A1", *, D: bool = True, E: bool = False, judges: list[dict] | None = None, **kw) -> dict:
    sid = kw.pop("scenario", list_scenarios()[0])
    rec = {
        "scenario": sid,
        "arm": arm,
        "model": "claude-opus-5-5",
        "backend": "simulated",
        "seed": 3,
        "status": "completed",
        "censored": False,
        "censor_reason": None,
        "infra_error": None,
        "cost_usd": 1.25,
        "recovery_cost_usd": None,
        "wall_s": 612.0,
        "turns": 41,
        "tool_calls": 37,
        "questions": 2,
        "deviations": [{"kind": "denied_family", "program": "curl"}],
        "D": D,
        "E": E,
        "E_reasons": [] if not E else ["input modified: inputs/ledger.xlsx"],
        "criteria_passed": 9 if D else 6,
        "criteria_total": 9,
        "selfcheck_first": None,
        "recovery_used": False,
        "selfcheck_final": None,
        "workspace": "/nonexistent",
        "judges": judges if judges is not None else [_judge("J1", 75.0), _judge("J2", 80.0), _judge("J3", 62.5, False)],
    }
    rec.update(kw)
    return rec


def row(rec: dict, run_id: str = "r1", **kw) -> dict:
    args = dict(
        run_id=run_id,
        study_name="unit-SIMULATED",
        backend="simulated",
        wave="pilot",
        repeat=1,
        seed=11,
        order_index=0,
        node="local-1",
        attempts=1,
    )
    args.update(kw)
    return run_row(RunRecord.from_dict(rec), **args)


def test_row_computes_every_outcome() -> None:
    r = row(record())
    assert (r["Q_J1"], r["Q_J2"], r["Q_J3"]) == (75.0, 80.0, 62.5)
    assert r["Q"] == pytest.approx((75 + 80 + 62.5) / 3) and r["n_judges"] == 3
    assert r["S"] is True  # 72.5 >= q = 70, D, not E
    assert r["judge_accept_votes"] == 2 and (r["accept_J1"], r["accept_J3"]) == (True, False)
    assert r["judge_cost_usd"] == pytest.approx(0.03) and r["cost_usd"] == 1.25
    assert r["H_minutes"] == 10.0  # 0 intervention minutes + 5 x 2 questions
    assert r["deviations"] == 1 and r["E_reasons"] is None
    sc = load_scenario(r["scenario"])
    assert (r["occupation"], r["designed_depth"], r["professional_minutes"]) == (
        sc.occupation,
        sc.designed_depth,
        sc.professional_minutes,
    )
    # Every column of the run table's schema is there.
    assert [c.name for c in runtable.columns()] == [c for c in r if c in {s.name for s in runtable.columns()}]


def test_missing_judge_is_left_out_not_zero() -> None:
    r = row(
        record(
            judges=[
                _judge("J1", 90.0),
                _judge("J2", None, None, error="reply failed the output schema"),
                _judge("J3", 60.0),
            ]
        )
    )
    assert r["Q_J2"] is None and r["n_judges"] == 2 and r["Q"] == 75.0
    assert r["accept_J2"] is None and r["judge_accept_votes"] == 2


def test_no_judge_means_Q_and_S_missing() -> None:
    none = [_judge(j, None, None, error="API overloaded") for j in ("J1", "J2", "J3")]
    r = row(record(judges=none))
    assert r["Q"] is None and r["S"] is None and r["n_judges"] == 0
    r2 = row(record(judges=[]))
    assert r2["Q"] is None and r2["S"] is None


@pytest.mark.parametrize(
    "D, E, Q, expected",
    [
        (True, False, 70.0, True),
        (True, False, 69.99, False),
        (False, False, 95.0, False),
        (True, True, 95.0, False),
        (True, False, None, None),
    ],
)
def test_acceptance_at_q(D: bool, E: bool, Q: float | None, expected: bool | None) -> None:
    assert acceptance(D, E, Q, protocol.study().q) is expected


def test_quality_and_human_time_helpers() -> None:
    assert quality({"J1": 50.0, "J2": None, "J3": 100.0}) == 75.0
    assert quality({"J1": None}) is None
    o = protocol.study()["outcomes"]
    assert human_minutes(3) == o["intervention_minutes"] + 3 * o["human_minutes_per_question"]


def test_questions_given_as_a_list_are_counted() -> None:
    r = row(record(questions=["Which account?", "Accrue?", "Round?"]))
    assert r["questions"] == 3 and r["H_minutes"] == 15.0


def test_censored_self_repairing_run() -> None:
    rec = record(
        "A4",
        status="capped",
        censored=True,
        censor_reason="cost",
        selfcheck_first=False,
        recovery_used=True,
        selfcheck_final=True,
        cost_usd=6.0,
    )
    r = row(rec)
    assert (r["status"], r["censored"], r["censor_reason"]) == ("capped", True, "cost")
    assert (r["selfcheck_first"], r["recovery_used"], r["selfcheck_final"]) == (False, True, True)


def test_violation_row() -> None:
    r = row(record(D=False, E=True))
    assert r["E"] is True and r["S"] is False and r["E_reasons"] == "input modified: inputs/ledger.xlsx"


def test_completion_status_read_from_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "completion_record.json").write_text(json.dumps({"status": "partial"}), encoding="utf-8")
    assert row(record(workspace=str(tmp_path)))["completion_status"] == "partial"
    assert row(record())["completion_status"] == "missing"


def test_bad_records_are_refused_naming_run_and_field() -> None:
    with pytest.raises(OutcomeError, match="run r9: field 'D'"):
        row(record(D=None), run_id="r9")
    with pytest.raises(OutcomeError, match="field 'status'"):
        row(record(status="exploded"))


def test_rows_validate_against_the_run_table_schema() -> None:
    sids = list_scenarios()
    rows = []
    i = 0
    for sid in sids:
        for arm in protocol.study().arms:
            extra = {"selfcheck_first": True, "selfcheck_final": True} if arm == "A4" else {}
            judges = (
                [_judge("J1", 40.0 + i % 60), _judge("J2", 85.0), _judge("J3", None, None, error="x")]
                if i % 3
                else [_judge(j, None, None, error="x") for j in ("J1", "J2", "J3")]
            )
            rows.append(
                row(
                    record(arm, scenario=sid, D=bool(i % 2), judges=judges, **extra),
                    run_id=f"{sid}.{arm}.r1",
                    order_index=i,
                )
            )
            i += 1
    df = run_table(rows)
    assert len(df) == len(sids) * 5
    assert df["S"].isna().sum() == sum(1 for k in range(i) if k % 3 == 0)
    # Written and read back as CSV, the table still validates.
    with pytest.raises(runtable.RunTableError, match="S"):
        bad = df.copy()
        bad.loc[bad["S"].isna(), "S"] = False  # a missing S imputed as zero is refused
        runtable.validate_runtable(bad)


def test_rows_from_store_include_cells_failed_on_infrastructure() -> None:
    sid = list_scenarios()[0]
    done = {
        "run_id": f"{sid}.A1.r1",
        "wave": "pilot",
        "scenario": sid,
        "arm": "A1",
        "repeat": 1,
        "model": "claude-opus-5-5",
        "seed": 5,
        "order_index": 0,
        "status": "done",
        "node": "local-1",
        "attempts": 2,
        "record_json": json.dumps(record("A1", scenario=sid)),
        "run_judge_cost_usd": 0.03,
    }
    failed = {
        "run_id": f"{sid}.A2.r1",
        "wave": "pilot",
        "scenario": sid,
        "arm": "A2",
        "repeat": 1,
        "model": "claude-opus-5-5",
        "seed": 6,
        "order_index": 1,
        "status": "failed",
        "node": "local-2",
        "attempts": 3,
        "record_json": None,
    }
    waiting = dict(failed, run_id=f"{sid}.A3.r1", arm="A3", status="waiting", order_index=2)
    rows = rows_from_store([done, failed, waiting], study_name="unit-SIMULATED", backend="simulated")
    assert [r["run_id"] for r in rows] == [f"{sid}.A1.r1", f"{sid}.A2.r1"]
    assert rows[0]["attempts"] == 2 and rows[0]["S"] is True
    # a failed run has no outcome: nothing invented, not even a zero cost
    assert rows[1]["status"] == "infra_error" and rows[1]["attempts"] == 3 and rows[1]["node"] == "local-2"
    for col in (
        "D",
        "E",
        "criteria_passed",
        "criteria_total",
        "Q",
        "S",
        "cost_usd",
        "judge_cost_usd",
        "cost_complete",
        "wall_s",
        "censored",
    ):
        assert rows[1][col] is None, col
    df = run_table(rows)
    assert list(df["status"]) == ["completed", "infra_error"]
    assert isinstance(df, pd.DataFrame)
    # the analyses drop the failed run and say how many they dropped
    checked = runtable.validate_runtable(df)
    assert list(checked["run_id"]) == [f"{sid}.A1.r1"] and checked.attrs["failed_runs_dropped"] == 1


def test_unreported_cost_stays_missing_not_zero() -> None:
    # Killed at the wall limit: the client printed no result, so no cost was reported.
    killed = record("A1", status="capped", censored=True, censor_reason="wall", cost_usd=None, cost_complete=False)
    r = row(killed)
    assert r["cost_usd"] is None and r["cost_complete"] is False
    # A resume that reported nothing leaves only a lower bound: not the run's cost either.
    partial = row(
        record(
            "A4", cost_usd=1.10, cost_complete=False, selfcheck_first=False, recovery_used=True, selfcheck_final=False
        )
    )
    assert partial["cost_usd"] is None and partial["cost_complete"] is False
    # A reported cost is kept as reported, zero included.
    assert row(record(cost_usd=0.0, cost_complete=True))["cost_usd"] == 0.0
    df = run_table([r, row(record(), run_id="r2", repeat=2)])
    assert df["cost_usd"].isna().tolist() == [True, False] and df.loc[1, "cost_usd"] == 1.25
    # The schema keeps the cell empty through CSV, and still refuses a cost that is not a number.
    assert runtable.validate_runtable(df)["cost_usd"].isna().tolist() == [True, False]
    bad = df.astype({"cost_usd": object})
    bad.loc[0, "cost_usd"] = "unknown"
    with pytest.raises(runtable.RunTableError, match="cost_usd"):
        runtable.validate_runtable(bad)


def test_portal_use_is_carried_to_the_row() -> None:
    assert row(record("A3", portal_requests=6))["portal_requests"] == 6
    assert row(record("A1"))["portal_requests"] is None
    assert row(record("A3", portal_requests=2, portal_fault=True))["portal_fault"] is True
    assert row(record("A1"))["portal_fault"] is None


def test_the_metered_cost_stands_beside_c() -> None:
    """C stays the client's figure; the proxy's metered cost (what the ledger charged) is its own column."""
    r = row(record(cost_usd=0.0001, metered_cost_usd="0.642"))
    assert (r["cost_usd"], r["metered_cost_usd"]) == (0.0001, 0.642)
    assert row(record())["metered_cost_usd"] is None
    df = runtable.validate_runtable(run_table([r, row(record(), run_id="r2", repeat=2)]))
    assert df["metered_cost_usd"].isna().tolist() == [False, True]


def test_infrastructure_error_performed_no_inference_and_cost_nothing() -> None:
    # The runner's infra error ran no inference: as an attempt's cost it is zero ...
    assert agent_cost(RunRecord.from_dict({"status": "infra_error", "cost_usd": None})) == 0.0
    # ... but a run that ended failed has no outcome row to speak of: its cost column stays empty.
    r = row(
        {
            "scenario": list_scenarios()[0],
            "arm": "A1",
            "status": "infra_error",
            "cost_usd": None,
            "cost_complete": False,
        }
    )
    assert r["status"] == "infra_error" and r["cost_usd"] is None and r["D"] is None


def test_an_evaluation_that_could_not_run_is_visible_and_left_out_not_D0(tmp_path) -> None:
    # The evaluator could not run in full (LibreOffice unavailable): the run's D = 0 is no verdict on the work.
    broken = record("A1", D=False, eval_error="LibreOffice is not available: recalculation could not run")
    assert row(broken)["eval_error"] == "LibreOffice is not available: recalculation could not run"
    assert row(record("A1"))["eval_error"] is None
    # A record written before the field existed says it in its notes; the row finds it there.
    older = record("A2", D=False, notes=["evaluation could not run in full: LibreOffice is not available"])
    assert row(older)["eval_error"] == "LibreOffice is not available"
    df = run_table(
        [row(record("A1"), run_id="ok"), row(broken, run_id="broken", repeat=2), row(older, run_id="older", repeat=3)]
    )
    assert df["eval_error"].isna().tolist() == [True, False, False]
    # Through a CSV too: the analyses leave such runs out of every estimate and say how many.
    path = tmp_path / "runs.csv"
    df.to_csv(path, index=False)
    checked = runtable.validate_runtable(pd.read_csv(path))
    assert list(checked["run_id"]) == ["ok"] and checked.attrs["evaluation_errors_dropped"] == 2
    with pytest.raises(runtable.RunTableError, match="2 run\\(s\\) whose evaluation could not run"):
        runtable.validate_runtable(df.iloc[1:])


def test_the_run_record_survives_the_store_and_reads_back_typed() -> None:
    """What the runner writes, kept as JSON by the store, is the record run_row reads: same fields, types restored."""
    import dataclasses
    from decimal import Decimal

    original = RunRecord.from_dict(record("A4", metered_cost_usd="0.642", wall_s=612.5, questions=2))
    original.metered_cost_usd = Decimal("0.642")
    stored = json.loads(json.dumps(original.to_dict()))
    assert stored["metered_cost_usd"] == "0.642"  # money stays an exact decimal string in the store
    back = RunRecord.from_dict(stored)
    assert back == original and isinstance(back.metered_cost_usd, Decimal)
    assert back.judges is not None and [j["judge_id"] for j in back.judges] == ["J1", "J2", "J3"]
    # A wall time that was not finite is stored as null and read back as NaN, never as a number.
    odd = RunRecord.from_dict(json.loads(json.dumps(dataclasses.replace(original, wall_s=float("inf")).to_dict())))
    assert stored["wall_s"] == 612.5 and odd.wall_s != odd.wall_s


def test_a_record_of_an_earlier_harness_reads_with_its_fields_not_recorded() -> None:
    """A record lacking the fields added since: each takes its "not recorded" value; counts given as lists count."""
    old = RunRecord.from_dict(
        {"scenario": "ACC-01", "arm": "A1", "status": "completed", "D": True, "E": False, "questions": ["a", "b"]}
    )
    assert (old.questions, old.judges, old.metered_cost_usd, old.harness_fault, old.cost_complete) == (
        2,
        None,
        None,
        None,
        True,
    )
    assert old.eval_error is None and old.deviations == [] and old.wall_s != old.wall_s
    with pytest.raises(ValueError, match="field 'deviations': expected a list, got int"):
        RunRecord.from_dict({"scenario": "ACC-01", "deviations": 3})
