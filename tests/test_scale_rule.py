"""The preregistered scale rule: both conditions, their boundaries, inputs from the ledger, and the stage."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from schedule_support import make_root, make_store

from pilot import protocol
from pilot.attempt import AttemptOutcome, launch_mark
from pilot.ledger import to_micro
from pilot.scale_rule import ScaleInputs, ScaleRuleError, decide, inputs_from_store

STUDY = protocol.study()


def _inputs(c_bar: float, remaining: float, n: int = 100) -> ScaleInputs:
    return ScaleInputs(c_bar_usd=c_bar, n_runs=n, envelope_usd=800.0, spent_usd=800.0 - remaining, reserved_usd=0.0)


def test_a009_pilot_cost_meets_both_conditions():
    d = decide(_inputs(1.07, 800 - 107.0))
    assert d.third_cost_usd == pytest.approx(1.15 * 1.07 * 50)
    assert d.add_third_repeat and d.run_sensitivities and d.waves == ["repeat3", "sensitivity"]
    # what remains for the sensitivities is net of the third repeat's projected cost
    assert d.remaining_after_third_usd == pytest.approx(693.0 - 1.15 * 1.07 * 50)
    text = d.amendment_text()
    assert "1.07" in text and "third repeat was added" in text and "claude-sonnet-5-5 and claude-fable-5-1" in text


def test_boundaries_are_inclusive_and_each_condition_can_fail():
    c = 2.0
    third = 1.15 * c * 50  # 115
    d = decide(_inputs(c, third + 100))  # equality: added
    assert d.add_third_repeat
    assert d.sensitivity_limit_usd == pytest.approx(100 - 50) and not d.run_sensitivities  # 92 > 50
    d = decide(_inputs(c, third + 100 - 0.01))
    assert not d.add_third_repeat
    # without the third repeat the whole remainder is there for the sensitivities: 92 <= 214.99 - 50
    assert d.remaining_after_third_usd == pytest.approx(third + 99.99) and d.run_sensitivities
    assert d.waves == ["sensitivity"]
    d = decide(_inputs(10.0, 200))
    assert d.waves == [] and "no third repeat" in d.amendment_text() and "were not run" in d.amendment_text()
    with pytest.raises(ScaleRuleError, match="at least one finished"):
        decide(_inputs(1.0, 500, n=0))


def test_summary_frame_lists_inputs_and_both_sides():
    s = decide(_inputs(1.07, 693.0)).summary
    assert isinstance(s, pd.DataFrame) and list(s.columns) == ["quantity", "value"]
    q = dict(zip(s["quantity"], s["value"], strict=True))
    assert q["remaining envelope E_r (USD)"] == pytest.approx(693.0)
    assert q["add third repeat"] is True


def test_inputs_come_from_the_ledger_every_attempt_and_judges_included(tmp_path):
    st = make_store(tmp_path, scenarios=["ACC-01"])
    cells = st.cells("pilot")
    costs = []
    for k, cell in enumerate(cells[:4]):
        if k == 0:  # an infra attempt that still cost something counts toward its run
            a = st.begin_attempt(cell, "n", "simulated", tmp_path / "ws")
            st.finish_attempt(a.attempt_id, AttemptOutcome(infra_error="x", cost_usd=0.1), max_infra_attempts=3)
        a = st.begin_attempt(cell, "n", "simulated", tmp_path / "ws")
        st.finish_attempt(
            a.attempt_id, AttemptOutcome(record={}, cost_usd=1.0 + k, judge_cost_usd=0.2), max_infra_attempts=3
        )
        costs.append(1.0 + k + 0.2 + (0.1 if k == 0 else 0))
    inputs = inputs_from_store(st)
    assert inputs.n_runs == 4 and inputs.c_bar_usd == pytest.approx(sum(costs) / 4)
    assert inputs.remaining_usd == pytest.approx(STUDY.envelope_usd - sum(costs))


def test_c_bar_counts_observed_costs_only_so_restarts_do_not_distort_it(tmp_path):
    st = make_store(tmp_path, scenarios=["ACC-01"])
    cells = st.cells("pilot")
    for cell in cells[:4]:
        a = st.begin_attempt(cell, "n", "simulated", tmp_path / "ws")
        st.finish_attempt(
            a.attempt_id, AttemptOutcome(record={}, cost_usd=1.0, judge_cost_usd=0.25), max_infra_attempts=3
        )
    before = inputs_from_store(st)
    # Five scheduler kills with attempts in flight: each launched attempt is charged its whole reservation ...
    for cell in cells[4:9]:
        a = st.begin_attempt(cell, "n", "simulated", tmp_path / "ws")
        a.workspace.mkdir(parents=True)
        launch_mark(a.workspace).write_text("1 1\n")
    st.recover_interrupted()
    # ... and the runs are then finished at their ordinary cost.
    for cell in cells[4:9]:
        a = st.begin_attempt(cell, "n", "simulated", tmp_path / "ws")
        st.finish_attempt(
            a.attempt_id, AttemptOutcome(record={}, cost_usd=1.0, judge_cost_usd=0.25), max_infra_attempts=3
        )
    # A run killed at its wall limit reports no cost: it is charged its reservation, counted in c-bar at that
    # charge and counted apart; c-bar over the nine reported runs alone is the sensitivity reading.
    a = st.begin_attempt(cells[9], "n", "simulated", tmp_path / "ws")
    st.finish_attempt(
        a.attempt_id,
        AttemptOutcome(record={}, cost_usd=None, judge_cost_usd=0.25, status="capped"),
        max_infra_attempts=3,
    )
    after = inputs_from_store(st)
    assert before.c_bar_usd == 1.25
    assert after.c_bar_usd == pytest.approx(
        (9 * 1.25 + cells[9].reserve_usd) / 10
    )  # by hand: the restarts count nothing
    assert (after.n_runs, after.n_unknown_cost, after.c_bar_reported_usd) == (10, 1, 1.25)
    d = decide(after)
    assert (
        d.reported_only is not None and d.reported_only.inputs.c_bar_usd == 1.25 and d.reported_only.inputs.n_runs == 9
    )
    rows = dict(zip(d.summary.quantity, d.summary.value, strict=True))
    assert rows["of which charged their reservation (no reported or metered cost)"] == 1
    assert rows["sensitivity: c_bar over reported or metered costs only (USD)"] == 1.25
    # the envelope still carries every worst-case charge: E_r is not flattered by the rule
    charged = sum(c.reserve_usd for c in cells[4:10])
    assert to_micro(after.spent_usd) == to_micro(9 * 1.25 + 0.0) + sum(to_micro(c.reserve_usd) for c in cells[4:10])
    assert charged > 0 and st.audit() == []


@pytest.mark.usefixtures("notebook")
def test_stage_writes_decision_inputs_and_amendment(tmp_path, monkeypatch):
    from schedule_support import NODES, REQUIRES

    from pilot.executors.local import LocalExecutor
    from pilot.schedule import Scheduler
    from pilot.stages import run_stage

    root = make_root(tmp_path)
    st = make_store(root / "analysis" / "data", name="scale", scenarios=["ACC-01", "RES-01"])
    Scheduler(
        st,
        LocalExecutor("pilot.simulated.fake_runs:noop_run", 1, processes=False),
        NODES,
        backend="simulated",
        requires=REQUIRES,
        progress=False,
        poll_s=0,
    ).run("pilot")
    expected = decide(
        inputs_from_store(st), n_scenarios=len(st.study().scenarios)
    )  # the stage scales the rule's runs to the study
    st.close()
    monkeypatch.setenv("PILOT_ROOT", str(root))  # the kernel reads this study's store
    tables, figures, generated = tmp_path / "tables", tmp_path / "figures", tmp_path / "generated"
    run_stage(
        "scale-rule",
        {
            "study": "scale",
            "seed": 1,
            "tables_dir": str(tables),
            "figures_dir": str(figures),
            "generated_dir": str(generated),
            "export": False,
        },
        output=tmp_path / "nb.ipynb",
    )
    decision = json.loads((tables / "scale_rule_scale.json").read_text())
    assert decision["waves"] == expected.waves and decision["c_bar_usd"] == pytest.approx(expected.inputs.c_bar_usd)
    inputs = pd.read_csv(tables / "scale_rule_scale.csv")
    assert "remaining envelope E_r (USD)" in set(inputs["quantity"])
    assert (tables / "scale_rule_scale_amendment.txt").read_text().strip() == "[SIMULATED] " + expected.amendment_text()
    assert (figures / "scale_rule.pdf").read_bytes().startswith(b"%PDF")
    macros = (generated / "scale_rule_macros.tex").read_text()
    assert "\\newcommand" in macros and "SIMULATED" in macros


def test_a_study_of_twenty_scenarios_doubles_the_rule_s_run_counts():
    # study.yml states 50 third-repeat runs and 40 sensitivity runs for the design's ten scenarios:
    # one run per scenario and arm (10 x 5) and per scenario, model and repeat (10 x 2 x 2).
    d10, d20 = decide(_inputs(1.07, 693.0)), decide(_inputs(1.07, 693.0), n_scenarios=20)
    assert (d10.third_runs, d10.sensitivity_runs) == (50, 40)
    assert (d20.third_runs, d20.sensitivity_runs) == (100, 80)
    # 1.15 x 1.07 x 100 = 123.05 fits in 693 - 100; the ten-scenario cost is half of it.
    assert d20.third_cost_usd == pytest.approx(2 * d10.third_cost_usd) == pytest.approx(123.05)
