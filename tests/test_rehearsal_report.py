"""The rehearsal report's checks: each mismatch it exists to catch makes a finding, and agreement makes none."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pandas as pd

from pilot import backends, runtable
from pilot.simulated import rehearsal_report as rehearsal
from pilot.latex import write_table
from pilot.report.sentences import data_prefix

METERED = Decimal("0.412345")
JUDGES = Decimal("0.031")


def _charged(metered: Decimal = METERED, judges: Decimal = JUDGES) -> int:
    return int((metered + judges) * 1_000_000)


def test_costs_that_agree_make_no_finding_and_the_tolerance_edge_is_exact():
    assert rehearsal.reconcile_costs(0.412345, str(METERED), JUDGES, _charged(), "metered") == []
    # 2 % of 0.75 is 0.015 (above one cent): a gap of exactly 0.015 is within, one micro-dollar more is not.
    metered = Decimal("0.75")
    at_edge = rehearsal.reconcile_costs(0.765, str(metered), JUDGES, _charged(metered), "metered")
    beyond = rehearsal.reconcile_costs(0.765001, str(metered), JUDGES, _charged(metered), "metered")
    assert at_edge == []
    assert len(beyond) == 1 and "beyond the tolerance of 0.0150" in beyond[0]
    # below 0.50 USD the cent rules: 0.01 off a 0.10 metered cost is within, 0.010001 is not
    assert rehearsal.reconcile_costs(0.11, "0.10", JUDGES, _charged(Decimal("0.10")), "metered") == []
    assert rehearsal.reconcile_costs(0.110001, "0.10", JUDGES, _charged(Decimal("0.10")), "metered")


def test_every_cost_mismatch_is_a_finding():
    def one(*args):
        found = rehearsal.reconcile_costs(*args)
        assert found and all(f.startswith("cost:") for f in found), found
        return " ".join(found)

    assert "ledger charged" in one(0.412345, str(METERED), JUDGES, _charged() + 1, "metered")  # one micro-dollar off
    assert "ledger charged" in one(0.412345, str(METERED), JUDGES, _charged(judges=Decimal(0)), "metered")  # judges left out
    assert "'reported' basis" in one(0.412345, str(METERED), JUDGES, _charged(), "reported")
    assert "no charge" in one(0.412345, str(METERED), JUDGES, None, None)
    assert "CLI reported no cost" in one(None, str(METERED), JUDGES, _charged(), "metered")
    assert "metered no cost" in one(0.412345, None, JUDGES, _charged(), "metered")
    # zero everywhere agrees with itself, but then nothing flowed through the proxy: a finding, not a pass
    assert "metered 0 USD" in one(0.0, "0", Decimal(0), 0, "metered")


def test_oracle_judges_and_deliverables_mismatches_are_findings(tmp_path):
    assert rehearsal.check_oracle(True, True) == [] and rehearsal.check_oracle(False, False) == []
    assert "should fail" in rehearsal.check_oracle(True, False)[0]
    assert rehearsal.check_oracle(None, True) and rehearsal.check_oracle(True, None)

    good = {"judge_id": "J1", "error": None, "score_0_100": 80.0, "backend": "claude-code"}
    assert rehearsal.check_judges([good, dict(good, judge_id="J2"), dict(good, judge_id="J3")], 3) == (3, [])
    parsed, found = rehearsal.check_judges([good, dict(good, judge_id="J2"), dict(good, judge_id="J3", error="reply failed the output schema", score_0_100=None)], 3)
    assert parsed == 2 and len(found) == 1 and "J3" in found[0]
    assert rehearsal.check_judges([good], 3)[1]  # a short panel
    assert rehearsal.check_judges([dict(good, backend="simulated")] * 3, 3)[1]  # not the CLI judges

    ws = tmp_path / "workspace"
    (ws / "outputs").mkdir(parents=True)
    (ws / "outputs" / "memo.docx").write_bytes(b"x")
    (ws / "outputs" / "log.csv").write_text("a\n")
    calls = [SimpleNamespace(input={"command": "python3 solve.py --out outputs/memo.docx"})]
    ok, found = rehearsal.deliverables_by_tool(["outputs/memo.docx", "outputs/log.csv", "outputs/gone.txt"], ws, calls)
    assert ok == ["outputs/memo.docx"]
    assert any("log.csv" in f and "no tool call" in f for f in found) and any("gone.txt" in f and "not in the workspace" in f for f in found)


def test_a_rehearsal_table_is_labelled_rehearsal_wherever_its_numbers_appear(tmp_path):
    df = pd.DataFrame({"backend": ["rehearsal", "rehearsal"], "study": ["rehearsal", "rehearsal"]})
    assert runtable.data_label(df) == backends.REHEARSAL_LABEL == "REHEARSAL" and runtable.is_simulated(df)
    assert runtable.data_label(df.assign(backend="claude-code")) == ""
    assert runtable.data_label(df.assign(backend=["rehearsal", "simulated"])) == "SIMULATED"
    assert data_prefix(runtable.data_label(df)) == "REHEARSAL (not a finding): "
    assert data_prefix(True) == "SIMULATED (dry run): " and data_prefix("") == ""
    tex = write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.tex", caption="Cap.", label="tab:t", simulated=runtable.data_label(df))
    assert "\\textbf{REHEARSAL.} Cap." in tex.read_text()
    report = rehearsal.RehearsalReport(study="r", arms=["A1"], host_arms=["A1"], runs=[], study_findings=["study: no run was assigned"])
    assert report.to_markdown().startswith("# REHEARSAL:") and report.to_dict()["label"] == "REHEARSAL" and not report.ok


def test_deviations_must_be_exactly_the_planted_attempts():
    sessions = [{"denied_attempt": {"family": "wget", "how": "bash -c", "command": "bash -c 'wget x'"}}, {"denied_attempt": None}]
    planted = rehearsal.planted_deviations(sessions)
    assert planted == [("wget", "bash -c", "mask")]
    recorded = [{"family": "wget", "via": "bash -c", "blocked_by": "mask"}]
    assert rehearsal.check_deviations(planted, recorded, cli_denials=0, network_refusals=0) == []
    # the planted attempt missed by the audit, or recorded as stopped by something else
    assert "not recorded" in rehearsal.check_deviations(planted, [], 0, 0)[0]
    wrong = rehearsal.check_deviations(planted, [{"family": "wget", "via": "bash -c", "blocked_by": "not_blocked"}], 0, 0)
    assert len(wrong) == 2 and "planted no such attempt" in wrong[0]
    # a deviation or a refusal of a worker that planted nothing
    assert rehearsal.check_deviations([], recorded, 0, 0)
    assert rehearsal.check_deviations([], [], 1, 0) and rehearsal.check_deviations([], [], 0, 1)
    # a direct attempt is refused by the CLI's deny rule: exactly one permission denial
    direct = rehearsal.planted_deviations([{"denied_attempt": {"family": "curl", "how": "direct"}}])
    assert direct == [("curl", "command", "cli_rule")]
    rec = [{"family": "curl", "via": "command", "blocked_by": "cli_rule"}]
    assert rehearsal.check_deviations(direct, rec, 1, 0) == [] and rehearsal.check_deviations(direct, rec, 0, 0)


def test_the_oracle_is_held_to_the_planted_defects_declarations(tmp_path, monkeypatch):
    """A criterion the oracle gets wrong shows as a finding, whatever the oracle says of the whole run."""
    import numpy as np

    from pilot import defects
    from pilot.oracles import criteria as oracle_criteria
    from pilot.oracles.evaluate import evaluate
    from pilot.protocol.scenario import load_scenario
    from pilot.scenarios import build_gold_workspace
    from pilot.simulated.rehearsal_report import check_declared

    sc = load_scenario("OPS-01")
    ws = defects.copy_workspace(build_gold_workspace(sc, tmp_path / "gold"), tmp_path / "dropped")
    planted = defects.plant_defect("drop_deliverable", sc, ws, np.random.default_rng(0))
    declared = [{"defect": "drop_deliverable", "description": planted.description, "breaks": list(planted.breaks), "critical": False}]
    rows = [c.to_dict() if hasattr(c, "to_dict") else dict(c.__dict__) for c in evaluate(sc, ws).criteria]
    assert check_declared(rows, declared) == []
    assert defects.expected_verdict(sc, [planted]) == (False, False)
    # The presence check broken so that it passes a missing file: the declared criterion no longer fails.
    monkeypatch.setitem(oracle_criteria.CHECKS, "present", lambda ctx, c: (True, "weakened for the test"))
    weak = [c.to_dict() if hasattr(c, "to_dict") else dict(c.__dict__) for c in evaluate(sc, ws).criteria]
    found = check_declared(weak, declared)
    assert any("declares plan_present, but none of them failed" in f for f in found), found
    assert any("which no planted defect declares" in f for f in found), found


def test_the_usage_log_is_priced_by_hand_from_the_price_file(tmp_path):
    import json
    from decimal import Decimal

    from pilot import paths
    from pilot.simulated.rehearsal_report import check_usage_log, price_usage_log

    log = tmp_path / "proxy_usage.jsonl"
    rows = [{"kind": "opened", "model": "claude-opus-5-5"},
            {"kind": "messages", "status": 200, "model": "claude-opus-5-5", "input_tokens": 3, "output_tokens": 104,
             "cache_creation_input_tokens": 288, "cache_creation_1h_input_tokens": 0, "cache_read_input_tokens": 3858},
            {"kind": "messages", "status": 200, "model": "claude-sonnet-5-5", "input_tokens": 10, "output_tokens": 1000,
             "cache_creation_input_tokens": 100, "cache_creation_1h_input_tokens": 40, "cache_read_input_tokens": 0},
            {"kind": "messages", "status": 402, "model": "claude-opus-5-5", "input_tokens": 0, "output_tokens": 0}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # By hand, USD per million (protocol/prices.yml): opus 3*4 + 104*20 + 288*5 + 3858*0.2 = 4303.6;
    # sonnet 10*2 + 1000*10 + 60*2.5 + 40*4 = 10330; the refused request is not billed.
    priced, n = price_usage_log([log], paths.PROTOCOL_DIR / "prices.yml")
    assert (priced, n) == (Decimal("0.0146336"), 2)
    assert check_usage_log(priced, n, "0.0146336", "0.01", 24634) == []
    assert "comes to 0.0146336 USD over 2 request(s)" in check_usage_log(priced, n, "0.0146337", "0.01", 24634)[0]
    assert "not the usage log's" in check_usage_log(priced, n, "0.0146336", "0.01", 24635)[0]
