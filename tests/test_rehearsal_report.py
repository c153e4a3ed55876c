"""The rehearsal report's checks: each mismatch it exists to catch makes a finding, and agreement makes none."""

from __future__ import annotations

from decimal import Decimal

import pandas as pd

from pilot import backends, runtable
from pilot.latex import write_table
from pilot.report.sentences import data_prefix
from pilot.simulated import rehearsal_report as rehearsal

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
    assert "ledger charged" in one(
        0.412345, str(METERED), JUDGES, _charged(judges=Decimal(0)), "metered"
    )  # judges left out
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
    parsed, found = rehearsal.check_judges(
        [
            good,
            dict(good, judge_id="J2"),
            dict(good, judge_id="J3", error="reply failed the output schema", score_0_100=None),
        ],
        3,
    )
    assert parsed == 2 and len(found) == 1 and "J3" in found[0]
    assert rehearsal.check_judges([good], 3)[1]  # a short panel
    assert rehearsal.check_judges([dict(good, backend="simulated")] * 3, 3)[1]  # not the CLI judges

    ws = tmp_path / "workspace"
    (ws / "outputs").mkdir(parents=True)
    (ws / "outputs" / "memo.docx").write_bytes(b"x")
    (ws / "outputs" / "log.csv").write_text("a\n")
    # memo.docx: the digest the worker's sha256sum reported in the sandbox (SHA-256 of b"x", by hand);
    # log.csv: named by a tool call, which proves nothing, and neither written whole nor reported.
    x = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    ok, found = rehearsal.deliverables_by_tool(
        ["outputs/memo.docx", "outputs/log.csv", "outputs/gone.txt"], ws, {}, {"outputs/memo.docx": x}
    )
    assert ok == ["outputs/memo.docx"]
    assert any("log.csv" in f and "no tool call wrote it whole or reported its digest" in f for f in found)
    assert any("gone.txt" in f and "not in the workspace" in f for f in found)
    ok, found = rehearsal.deliverables_by_tool(["outputs/memo.docx"], ws, {}, {"outputs/memo.docx": "0" * 64})
    assert ok == [] and "the digest the worker's sha256sum reported in the sandbox" in found[0]


def test_a_rehearsal_table_is_labelled_rehearsal_wherever_its_numbers_appear(tmp_path):
    df = pd.DataFrame({"backend": ["rehearsal", "rehearsal"], "study": ["rehearsal", "rehearsal"]})
    assert runtable.data_label(df) == backends.REHEARSAL_LABEL == "REHEARSAL" and runtable.is_simulated(df)
    assert runtable.data_label(df.assign(backend="claude-code")) == ""
    assert runtable.data_label(df.assign(backend=["rehearsal", "simulated"])) == "SIMULATED"
    assert data_prefix(runtable.data_label(df)) == "REHEARSAL (not a finding): "
    assert data_prefix(True) == "SIMULATED (dry run): " and data_prefix("") == ""
    tex = write_table(
        pd.DataFrame({"a": [1]}), tmp_path / "t.tex", caption="Cap.", label="tab:t", simulated=runtable.data_label(df)
    )
    assert "\\textbf{REHEARSAL.} Cap." in tex.read_text()
    report = rehearsal.RehearsalReport(
        study="r", arms=["A1"], host_arms=["A1"], runs=[], study_findings=["study: no run was assigned"]
    )
    assert (
        report.to_markdown().startswith("# REHEARSAL:") and report.to_dict()["label"] == "REHEARSAL" and not report.ok
    )


def test_deviations_must_be_exactly_the_planted_attempts():
    sessions = [
        {"denied_attempt": {"family": "wget", "how": "bash -c", "command": "bash -c 'wget x'"}},
        {"denied_attempt": None},
    ]
    planted = rehearsal.planted_deviations(sessions)
    assert planted == [("wget", "bash -c", "mask")]
    recorded = [{"family": "wget", "via": "bash -c", "blocked_by": "mask"}]
    assert rehearsal.check_deviations(planted, recorded, cli_denials=0, network_refusals=0) == []
    # the planted attempt missed by the audit, or recorded as stopped by something else
    assert "not recorded" in rehearsal.check_deviations(planted, [], 0, 0)[0]
    wrong = rehearsal.check_deviations(
        planted, [{"family": "wget", "via": "bash -c", "blocked_by": "not_blocked"}], 0, 0
    )
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
    declared = [
        {
            "defect": "drop_deliverable",
            "description": planted.description,
            "breaks": list(planted.breaks),
            "critical": False,
        }
    ]
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
    rows = [
        {"kind": "opened", "model": "claude-opus-5-5"},
        {
            "kind": "messages",
            "status": 200,
            "model": "claude-opus-5-5",
            "input_tokens": 3,
            "output_tokens": 104,
            "cache_creation_input_tokens": 288,
            "cache_creation_1h_input_tokens": 0,
            "cache_read_input_tokens": 3858,
        },
        {
            "kind": "messages",
            "status": 200,
            "model": "claude-sonnet-5-5",
            "input_tokens": 10,
            "output_tokens": 1000,
            "cache_creation_input_tokens": 100,
            "cache_creation_1h_input_tokens": 40,
            "cache_read_input_tokens": 0,
        },
        {"kind": "messages", "status": 402, "model": "claude-opus-5-5", "input_tokens": 0, "output_tokens": 0},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # By hand, USD per million (protocol/prices.yml): opus 3*4 + 104*20 + 288*5 + 3858*0.2 = 4303.6;
    # sonnet 10*2 + 1000*10 + 60*2.5 + 40*4 = 10330; the refused request is not billed.
    priced, n = price_usage_log([log], paths.PROTOCOL_DIR / "prices.yml")
    assert (priced, n) == (Decimal("0.0146336"), 2)
    assert check_usage_log(priced, n, "0.0146336", "0.01", 24634) == []
    assert "comes to 0.0146336 USD over 2 request(s)" in check_usage_log(priced, n, "0.0146337", "0.01", 24634)[0]
    assert "not the usage log's" in check_usage_log(priced, n, "0.0146336", "0.01", 24635)[0]


def _host_attempts(family: str = "curl", path: str = "/usr/bin/curl") -> list[dict]:
    cmd = f"{family} -sS https://example.com/rates.csv -o rates.csv"
    commands = {"direct": cmd, "bash -c": f"bash -c '{cmd}'", "absolute path": path + cmd[len(family) :]}
    return [
        {"family": family, "how": how, "command": c, "present_on_host": True, "path": path}
        for how, c in commands.items()
    ]


def _recorded(attempt: dict, program: str, blocked_by: str | None = None) -> dict:
    via, blocked = rehearsal.PLANTED_ROUTES[attempt["how"]]
    return {
        "kind": "denied_family",
        "family": attempt["family"],
        "via": via,
        "blocked_by": blocked_by or blocked,
        "command": attempt["command"],
        "program": program,
    }


def _session() -> dict:
    drawn = {
        "family": "qlmanage",
        "how": "bash -c",
        "command": "bash -c 'qlmanage -p outputs/report.pdf'",
        "present_on_host": False,
        "path": None,
    }
    return {"denied_attempt": drawn, "host_denied_attempts": _host_attempts()}


def _as_planted(
    s: dict, host_programs: tuple[str, str, str] = ("not_reached", "stub", "not_reached"), drawn: str = "absent"
) -> list[dict]:
    return [_recorded(s["denied_attempt"], drawn)] + [
        _recorded(a, p) for a, p in zip(s["host_denied_attempts"], host_programs, strict=True)
    ]


def _check(s: dict, recorded: list[dict], cli_denials: int = 2) -> list[str]:
    return rehearsal.check_deviations(
        rehearsal.planted_deviations([s]), recorded, cli_denials, 0, rehearsal.planted_programs([s])
    )


def test_the_attempts_at_a_program_of_the_host_are_planted_deviations_by_every_route():
    s = _session()
    # the pinned CLI reads the program of /usr/bin/curl by its name: its rule refuses the path as it refuses the name
    assert rehearsal.planted_deviations([s]) == [
        ("qlmanage", "bash -c", "mask"),
        ("curl", "command", "cli_rule"),
        ("curl", "bash -c", "mask"),
        ("curl", "command", "cli_rule"),
    ]
    # what must answer at each program: nothing for the absent one, the stub past the CLI's rule, nothing before it
    assert [(p["family"], p["how"], p["program"]) for p in rehearsal.planted_programs([s])] == [
        ("qlmanage", "bash -c", "absent"),
        ("curl", "direct", "not_reached"),
        ("curl", "bash -c", "stub"),
        ("curl", "absolute path", "not_reached"),
    ]
    assert _check(s, _as_planted(s)) == []
    # two attempts the CLI's rule refuses: two permission denials, not one
    assert any("1 CLI permission denial(s), the scripted worker planted 2" in f for f in _check(s, _as_planted(s), 1))


def test_a_planted_stub_attempt_recorded_as_absent_is_a_finding():
    s = _session()
    found = _check(s, _as_planted(s, ("not_reached", "absent", "not_reached")))
    # stopped as planted (blocked by the mask), so only the program tells that the stub never answered
    assert found == [
        "deviation: the planted attempt at curl by route bash -c is recorded with program 'absent' "
        "(via bash -c, blocked by mask), not 'stub'"
    ]


def test_an_absent_program_recorded_as_stub_and_a_missing_program_field_are_findings():
    s = _session()
    recorded = _as_planted(s, drawn="stub")
    recorded[3]["program"] = None  # a record of an audit that kept no program
    found = _check(s, recorded)
    assert len(found) == 2
    assert "qlmanage by route bash -c is recorded with program 'stub'" in found[0] and found[0].endswith("not 'absent'")
    assert "curl by route absolute path is recorded with program None" in found[1]


def test_a_planted_command_no_deviation_records_is_a_finding_naming_its_route():
    s = _session()
    # the absolute path recorded under another command (or not at all): the route is named
    recorded = _as_planted(s)
    recorded[3]["command"] = "curl -sS https://example.com/other.csv"
    found = _check(s, recorded)
    assert (
        len(found) == 1
        and "curl by route absolute path" in found[0]
        and "under no deviation of its command" in found[0]
    )
    # a CLI whose rule let the path through to the mask: another route than planted, and one denial short
    through = _as_planted(s)[:3] + [_recorded(s["host_denied_attempts"][2], "stub", blocked_by="mask")]
    found = _check(s, through, 1)
    assert any("curl via command (blocked by mask) recorded, but" in f for f in found)
    assert any("planted attempt at curl (via command, to be blocked by cli_rule) is not recorded" in f for f in found)
    assert any(
        "by route absolute path is recorded with program 'stub'" in f and "not 'not_reached'" in f for f in found
    )
    assert any("1 CLI permission denial(s), the scripted worker planted 2" in f for f in found)


def test_a_truth_that_does_not_say_whether_the_host_has_the_program_checks_no_program():
    # a record written before the presence was recorded: its route is still checked, what answered cannot be
    old = [{"denied_attempt": {"family": "wget", "how": "bash -c", "command": "bash -c 'wget x'"}}]
    assert rehearsal.planted_programs(old) == []
    recorded = [{"family": "wget", "via": "bash -c", "blocked_by": "mask", "command": "bash -c 'wget x'"}]
    assert (
        rehearsal.check_deviations(rehearsal.planted_deviations(old), recorded, 0, 0, rehearsal.planted_programs(old))
        == []
    )
    # a direct attempt's program is never reached, whatever the truth says of the host
    direct = [{"denied_attempt": {"family": "curl", "how": "direct", "command": "curl x"}}]
    assert rehearsal.planted_programs(direct) == [
        {"family": "curl", "how": "direct", "command": "curl x", "program": "not_reached"}
    ]
