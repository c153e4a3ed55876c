"""Protocol fidelity and the per-arm run flow, against counts worked out by hand from small tables."""

from __future__ import annotations

import json

import pandas as pd

from pilot.report import run_fidelity

ARMS = ["A0", "A1"]
# Six finished runs: their statuses, violations, caps, deviations and nodes are chosen so every count below is read off
# by eye.
RUNS = pd.DataFrame(
    {
        "run_id": ["r1", "r2", "r3", "r4", "r5", "r6"],
        "arm": ["A0", "A0", "A0", "A1", "A1", "A1"],
        "model": ["w", "w", "w", "w", "w", "other"],
        "status": ["completed", "capped", "agent_error", "completed", "capped", "completed"],
        "censored": [False, True, False, False, True, False],
        "censor_reason": [None, "wall", None, None, "cost", None],
        "E": [True, False, False, False, "True", None],
        "deviations": [2, 0, 0, 1, 0, 0],
        "eval_error": [None, None, None, "oracle crashed", None, None],
        "D": [1.0, 0.0, 0.0, None, 1.0, 1.0],
        "n_judges": [3, 3, 0, 0, 3, 3],
        "S": [0.0, 0.0, None, None, 1.0, 1.0],
        "node": ["n1", "n1", "n2", "n2", "n2", "n1"],
    }
)
RECORDS = [
    {"run_id": "r1", "deviations": [{"blocked_by": "mask"}, {"blocked_by": "cli_rule"}]},
    {"run_id": "r4", "deviations": [{"blocked_by": "mask"}]},
    {"run_id": "r2", "deviations": []},
]


def _table() -> pd.DataFrame:
    return run_fidelity.fidelity(RUNS, RECORDS, ARMS).set_index("measure")


def test_fidelity_counts_each_measure_per_arm():
    t = _table()
    assert t.loc["finished runs"].to_dict() == {"A0": 3, "A1": 3, "all": 6}
    assert t.loc["runs with a deviation"].to_dict() == {"A0": 1, "A1": 1, "all": 2}
    assert t.loc["deviations stopped by the sandbox's program mask"].to_dict() == {"A0": 1, "A1": 1, "all": 2}
    assert t.loc["deviations stopped by a CLI permission rule"].to_dict() == {"A0": 1, "A1": 0, "all": 1}
    # E written as True, as the string "True" and missing: two violations.
    assert t.loc["runs with a critical violation (E)"].to_dict() == {"A0": 1, "A1": 1, "all": 2}
    assert t.loc["agent errors"].to_dict() == {"A0": 1, "A1": 0, "all": 1}
    assert t.loc["capped at the wall cap"].to_dict() == {"A0": 1, "A1": 0, "all": 1}
    assert t.loc["capped at the cost cap"].to_dict() == {"A0": 0, "A1": 1, "all": 1}
    assert t.loc["evaluation errors"].to_dict() == {"A0": 0, "A1": 1, "all": 1}
    # The table has no harness_fault column: none is counted, and the row is there all the same.
    assert t.loc["harness faults after inference"].to_dict() == {"A0": 0, "A1": 0, "all": 0}
    assert t.loc["runs on node n1"].to_dict() == {"A0": 2, "A1": 1, "all": 3}
    assert t.loc["runs on node n2"].to_dict() == {"A0": 1, "A1": 2, "all": 3}


def test_other_models_have_a_column_of_their_own():
    t = run_fidelity.fidelity(RUNS, RECORDS, ARMS, "w").set_index("measure")
    # r6 is A1's run of another model: by hand, A1 keeps r4 and r5, the new column holds r6, "all" all six.
    assert t.loc["finished runs"].to_dict() == {"A0": 3, "A1": 2, run_fidelity.OTHER_MODELS: 1, "all": 6}
    assert t.loc["runs on node n1"].to_dict() == {"A0": 2, "A1": 0, run_fidelity.OTHER_MODELS: 1, "all": 3}


def test_only_routes_that_occur_are_listed():
    routes = [m for m in _table().index if m.startswith("deviations ")]
    assert routes == ["deviations stopped by a CLI permission rule", "deviations stopped by the sandbox's program mask"]


def test_records_are_read_from_the_store_rows():
    rows = [
        {"run_id": "r1", "record_json": json.dumps({"deviations": [{"blocked_by": "mask"}]})},
        {"run_id": "r9", "record_json": "not json"},
    ]
    assert run_fidelity.records_of(rows) == [{"deviations": [{"blocked_by": "mask"}], "run_id": "r1"}, {"run_id": "r9"}]


def test_flow_by_arm_follows_each_cell_to_the_analysis():
    cells = pd.DataFrame(
        {
            "run_id": ["r1", "r2", "r3", "r4", "r5", "r6", "r7"],
            "arm": ["A0", "A0", "A0", "A1", "A1", "A1", "A1"],
            "status": ["done"] * 6 + ["failed"],
        }
    )
    attempts = pd.DataFrame(
        {
            "run_id": ["r1", "r2", "r3", "r4", "r5", "r6", "r7", "r7", "r4"],
            "outcome": ["ok"] * 6 + ["infra_error", "infra_error", "interrupted"],
        }
    )
    t = run_fidelity.flow_by_arm(cells, attempts, RUNS, ARMS, "w").set_index("step")
    # r6 is A1's run of another model: it has a column of its own and is never pooled into A1.
    assert list(t.columns) == ["A0", "A1", run_fidelity.OTHER_MODELS, "total"]
    expected = {  # step: (A0, A1, other models), counted by hand from RUNS and the tables above
        "assigned": (3, 3, 1),
        "dispatched": (3, 3, 1),
        "infrastructure reruns": (0, 3, 0),
        "failed": (0, 1, 0),
        "finished": (3, 2, 1),
        "completed": (1, 1, 1),
        "capped": (1, 1, 0),
        "agent error": (1, 0, 0),
        "evaluated": (3, 1, 1),  # r4 has an evaluation error
        "judged": (2, 1, 1),  # r3 was not judged
        "other model": (0, 0, 1),
        "analysed": (2, 1, 0),
    }
    for step, (a0, a1, other) in expected.items():
        got = (t.loc[step, "A0"], t.loc[step, "A1"], t.loc[step, run_fidelity.OTHER_MODELS], t.loc[step, "total"])
        assert got == (a0, a1, other, a0 + a1 + other), step


def test_the_summary_orders_seven_hypotheses_and_names_a_missing_one(tmp_path):
    from pilot.report import stage_outputs
    from pilot.report.stage_outputs import StageData

    rows = [
        {
            "hypothesis": f"H{i}",
            "statement": f"s{i}",
            "criterion": f"c{i}",
            "estimate": "0.100",
            "interval": "0.000 to 0.200",
            "test": "p = 0.500",
            "verdict": "not consistent" if i == 5 else "consistent",
            "failing": "A1's rate 0.100 is not below 0.1" if i == 5 else "",
            "remark": "",
        }
        for i in (7, 2, 1, 5, 4, 3)
    ]  # out of order, H6 missing
    summary = stage_outputs.hypotheses_summary(rows)
    assert list(summary["hypothesis"]) == ["H1", "H2", "H3", "H4", "H5", "H7"]
    data = StageData(runs=RUNS, source="test", synthetic=False, simulated=True, study_name="t")
    out = stage_outputs.write_hypotheses_summary(summary, data, tmp_path / "t", tmp_path / "g")
    table = out["hypotheses_summary_table.tex"].read_text()
    assert (
        "not consistent: A1's rate 0.100 is not below 0.1" in table
        and "Not in this table, because their stage wrote no result: H6." in table
    )
    paragraphs = out["discussion_hypotheses.tex"].read_text()
    assert [line.split("}")[0] for line in paragraphs.splitlines() if line.startswith("\\paragraph")] == [
        f"\\paragraph{{H{i}." for i in (1, 2, 3, 4, 5, 7)
    ]


def test_the_secondary_cost_counts_a_run_without_a_reported_cost_at_its_charge():
    from pilot import runtable
    from pilot.simulated import synthetic
    from pilot.stats import sensitivity

    runs = runtable.validate_runtable(synthetic.generate_runtable(31))
    first = runs.index[(runs["arm"] == "A1") & (runs["model"] == runs["model"].iloc[0])][0]
    runs.loc[first, "charged_usd"] = float(runs.loc[first, "cost_usd"]) + float(runs.loc[first, "judge_cost_usd"]) + 5.0
    base = sensitivity.secondary_endpoints(runs).table.set_index("arm")
    runs.loc[first, "cost_usd"] = float(
        "nan"
    )  # killed before it reported; the ledger charged 5 dollars more than it drew
    after = sensitivity.secondary_endpoints(runs)
    t = after.table.set_index("arm")
    # Scenario-weighted: the run's scenario mean in A1 rises by 5 / (its scenario's A1 runs), the arm mean by that over
    # J.
    rows = runtable.primary_rows(runs)
    n_cell = int(((rows["arm"] == "A1") & (rows["scenario"] == runs.loc[first, "scenario"])).sum())
    J = rows["scenario"].nunique()
    assert abs((t.loc["A1", "cost_usd"] - base.loc["A1", "cost_usd"]) - 5.0 / n_cell / J) < 1e-9
    assert after.details["n_charged"]["A1"] == 1 and sum(after.details["n_charged"].values()) == 1
