"""A human wave's sessions on the participant site (Flask's test client), evaluated as runs of the study.

Three participants of OPS-01, as the design's hidden check has them: one
without AI (H0), one with the assistant (H1), one who withdraws. The site
shows nothing of the task before consent; the clock is the scenario's wall
limit and closes a session at it; uploads are admitted by the oracle's rules
or refused with a reason; a submitted session becomes a run (arm H0 or H1,
backend ``human``) with D, E, Q, S, time on task and, for H1, the assistant's
metered cost, charged to the envelope; the judges' prompt for a person's
package is, byte for byte, the prompt for an agent's package of the same
files; a withdrawal leaves only its record; no export carries a contact.
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from human_support import (
    CONTACTS,
    DELIVERABLE,
    GOOD_CSV,
    SCENARIO,
    WAVE,
    Participant,
    RecordingJudge,
    build_study,
    copy_study,
    links,
    scripted_assistant,
    write_participants,
)
from schedule_support import make_root
from view_support import pilot

from pilot import pipeline, protocol
from pilot.attempt import CellSpec
from pilot.human import evaluate, session, store
from pilot.human.site import create_app
from pilot.human.wave import create_wave
from pilot.run_record import RunRecord
from pilot.simulated.scripted_model import scripted_assistant_reply


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = make_root(tmp_path_factory.mktemp("human-sessions"))
    return root, build_study(root)


@pytest.fixture
def wave(built, tmp_path):
    """A fresh copy of the study with wave w1 of three participants (two places per condition)."""
    root, folder = built
    copy = copy_study(folder, root / "analysis" / "data" / f"hs-{tmp_path.name[-10:]}")
    create_wave(copy, WAVE, write_participants(tmp_path), per_condition=2)
    with store.open_store(copy) as st:
        by = {r["participant_id"]: r["condition"] for r in store.participants(st.conn, WAVE)}
    return root, copy, by


def _of(by: dict[str, str], condition: str) -> str:
    return next(p for p, c in by.items() if c == condition)


def test_nothing_of_the_task_shows_before_consent_and_a_refusal_shows_nothing_more(wave):
    _, folder, by = wave
    app = create_app(folder, WAVE, evaluate_in_background=False)
    p = Participant(app, links(folder)[_of(by, "H0")])
    consent = p.client.get(p.first).get_data(as_text=True)
    brief = protocol_brief()
    assert "Version: 1.0" in consent and brief[:60] not in consent
    assert p.get("task").status_code == 303 and p.get("ready").status_code == 303
    page = p.post("consent", decision="decline").get_data(as_text=True)
    assert "You chose not to take part" in page and brief[:60] not in page
    assert p.post("start").status_code == 409
    assert p.post("consent", decision="agree").status_code == 303
    ready = p.get("ready").get_data(as_text=True)
    assert brief[:60] not in ready and "60 minutes" not in ready  # the wall limit shows; the brief does not
    with store.open_store(folder) as st:
        kinds = [r["kind"] for r in st.conn.execute("SELECT kind FROM human_events ORDER BY event_id")]
        row = store.participant(st.conn, WAVE, _of(by, "H0"))
    assert kinds[-2:] == ["consent_declined", "consent"] and row["consent_version"] == "1.0"


def protocol_brief() -> str:
    from pilot.scenarios import load_scenario

    return load_scenario(SCENARIO).brief_path.read_text(encoding="utf-8")


def test_uploads_are_admitted_by_the_oracles_rules_and_replaced_until_submission(wave):
    _, folder, by = wave
    app = create_app(folder, WAVE, evaluate_in_background=False)
    p = Participant(app, links(folder)[_of(by, "H0")])
    p.consent_and_start()
    task = p.get("task").get_data(as_text=True)
    assert protocol_brief()[:60] in task and 'id="no-assistant"' in task and 'id="assistant-form"' not in task
    bad = p.upload(b"sku,qty\n\x00\x01\x02", "plan.csv")
    assert bad.status_code == 422 and "holds binary content (NUL bytes), not text" in bad.get_data(as_text=True)
    wrong = p.upload(b"PK\x03\x04not really", "plan.docx")
    assert wrong.status_code == 422
    assert "This place is for reorder_plan.csv, a CSV file (.csv); you sent a .docx file" in wrong.get_data(
        as_text=True
    )
    assert p.upload(b"sku,qty\nA,1\n", "first.csv").status_code == 200
    assert p.upload(GOOD_CSV, "second.csv").status_code == 200
    with store.open_store(folder) as st:
        ws = session.workspace_of(st, store.participant(st.conn, WAVE, _of(by, "H0"))["run_id"])
        tries = [(u["admitted"], u["saved_as"]) for u in store.uploads(st.conn, WAVE, _of(by, "H0"))]
    assert (ws / "outputs" / DELIVERABLE).read_bytes() == GOOD_CSV
    assert tries == [(0, None), (0, None), (1, DELIVERABLE), (1, DELIVERABLE)]
    assert sorted(p.name for p in (ws / "outputs").iterdir()) == [DELIVERABLE]
    assert p.submit(status="").status_code == 400  # the status is required to submit
    assert p.submit().status_code == 303
    assert p.upload(GOOD_CSV, "late.csv").status_code == 303  # closed: back to the participant's own page


def test_the_clock_closes_a_session_at_the_wall_limit_as_a_capped_run(wave):
    _, folder, by = wave
    pid = _of(by, "H0")
    wall = float(protocol.study().caps_for(SCENARIO).wall_s)
    with store.open_store(folder) as st:
        session.decide_consent(st, WAVE, pid, True, __import__("pilot.human.consent", fromlist=["x"]).load_consent())
        session.start(st, WAVE, pid, at=1000.0)
        session.upload(st, WAVE, pid, DELIVERABLE, "mine.csv", __import__("io").BytesIO(GOOD_CSV), at=1000.0 + wall - 1)
        with pytest.raises(session.SessionError, match="time limit has passed"):
            session.open_session(st, WAVE, pid, at=1000.0 + wall + 30)
        row = store.participant(st.conn, WAVE, pid)
        assert (row["status"], row["ended_by"], row["time_on_task_s"]) == ("submitted", "deadline", wall)
        evaluate.evaluate_session(st, WAVE, pid, judge="simulated")
        rec = json.loads(
            st.conn.execute("SELECT record_json FROM runs WHERE run_id = ?", (row["run_id"],)).fetchone()[0]
        )
    # Capped on the wall limit, evaluated as delivered; no status was chosen, so no completion record was written.
    assert (rec["status"], rec["censored"], rec["censor_reason"], rec["wall_s"]) == ("capped", True, "wall", wall)
    assert rec["completion_status"] is None and rec["human"]["time_on_task_s"] == wall and rec["D"] is not None


def test_active_time_never_exceeds_the_time_the_page_was_open(wave):
    _, folder, by = wave
    pid = _of(by, "H0")
    with store.open_store(folder) as st:
        session.page_view(st, WAVE, pid, "v1", at=100.0)
        assert session.report_active(st, WAVE, pid, "v1", 500, at=160.0) == 60.0
        assert session.report_active(st, WAVE, pid, "v1", 30, at=170.0) == 60.0  # never less than kept
        assert session.report_active(st, WAVE, pid, "v1", "nan", at=170.0) == 0.0
        assert session.report_active(st, WAVE, _of(by, "H1"), "v1", 30, at=170.0) == 0.0  # another's view
        assert store.active_seconds(st.conn, WAVE, pid) == 60.0


def test_three_participants_h0_h1_and_one_who_withdraws(wave, tmp_path):
    """The design's check: runs with D, E, Q, S, time on task and the assistant's metered cost; nothing of the third."""
    root, folder, by = wave
    h0, h1 = _of(by, "H0"), [p for p, c in by.items() if c == "H1"]
    leaver, h1 = (h1[1], h1[0]) if len(h1) == 2 else (None, h1[0])
    if leaver is None:  # two H0 and one H1: the second H0 withdraws
        leaver = [p for p, c in by.items() if c == "H0" and p != h0][0]
    with scripted_assistant(folder) as assistant:
        app = create_app(folder, WAVE, evaluate_in_background=False, assistant=assistant)
        first = Participant(app, links(folder)[h0])
        first.consent_and_start()
        first.upload(GOOD_CSV, "plan.csv")
        assert first.submit(questions="Which lead time applies?\nIs the budget firm?").status_code == 303

        second = Participant(app, links(folder)[h1])
        second.consent_and_start()
        message = "How do I set a reorder point for a part with a 14-day lead time?"
        page = second.post("assistant", message=message).get_data(as_text=True)
        assert scripted_assistant_reply(1, message) in page.replace("&#39;", "'")
        second.post("assistant", message="And the safety stock?")
        second.upload(GOOD_CSV, "plan.csv")
        assert second.submit().status_code == 303

        leaver_link = links(folder)[leaver]
        third = Participant(app, leaver_link)
        third.consent_and_start()
        if by[leaver] == "H1":
            third.post("assistant", message="hello")
        third.upload(GOOD_CSV, "plan.csv")
        gone = third.post("withdraw", confirm="withdraw").get_data(as_text=True)
        assert "Everything you produced in this session has been deleted" in gone
        assert third.client.get(leaver_link).status_code == 403

    with store.open_store(folder) as st:
        evaluate.evaluate_session(st, WAVE, h0, judge="simulated")
        evaluate.evaluate_session(st, WAVE, h1, judge="simulated")
        exchanges = store.exchanges(st.conn, WAVE, h1)
        audit = st.audit()
        withdrawals = [dict(r) for r in store.withdrawals(st.conn, WAVE)]
        charged = {
            r["run_id"]: r["charged_micro"] for r in st.conn.execute("SELECT run_id, charged_micro FROM attempts")
        }
        removed = st.conn.execute("SELECT run_id, charged_micro FROM ledger_removed").fetchall()
    assert audit == []
    # The assistant's cost is what the proxy booked: the sum of the exchanges, exact.
    metered = sum(Decimal(e["cost_usd"]) for e in exchanges)
    assert len(exchanges) == 2 and metered > 0

    proc = pilot(root, "study", "export", folder.name)
    report = json.loads(proc.stdout)
    assert report["human_rows"] == 2 and report["human_not_evaluated"] == 0
    table = pd.read_csv(folder / "human_runs.csv")
    by_arm = table.set_index("arm")
    assert set(table["backend"]) == {"human"} and set(table["wave"]) == {"human"} and set(table["model"]) == {"human"}
    for col in ("D", "E", "Q", "S", "time_on_task_s", "active_s", "assistant_cost_usd"):
        assert table[col].notna().all(), col
    assert Decimal(str(by_arm.loc["H1", "assistant_cost_usd"])) == metered
    assert (
        by_arm.loc["H1", "metered_cost_usd"] == by_arm.loc["H1", "cost_usd"] == by_arm.loc["H1", "assistant_cost_usd"]
    )
    assert by_arm.loc["H0", "assistant_cost_usd"] == 0 and by_arm.loc["H0", "cost_usd"] == 0
    # H: the design's zero intervention minutes plus five per question (two questions in H0).
    assert by_arm.loc["H0", "questions"] == 2 and by_arm.loc["H0", "H_minutes"] == 10.0
    # The H1 run was charged its metered assistant cost plus its judges.
    h1_run = by_arm.loc["H1", "run_id"]
    judge_micro = round(float(by_arm.loc["H1", "judge_cost_usd"]) * 1e6)
    assert abs(charged[h1_run] - (int(metered * 1_000_000) + judge_micro)) <= 1

    # The withdrawn participant: a withdrawal record and the deletion log; no row, file, exchange or contact.
    assert [w["participant_id"] for w in withdrawals] == [leaver] and withdrawals[0]["action"] == "deleted"
    assert len(removed) == 1 and removed[0]["run_id"] not in charged
    assert not (folder / "workspaces" / removed[0]["run_id"]).exists()
    links_text = (folder / "human" / WAVE / "links.csv").read_text(encoding="utf-8")
    assert leaver not in links_text and sum(c in links_text for c in CONTACTS) == 2
    with store.open_store(folder) as st:
        for table_name in store.PARTICIPANT_TABLES + ("human_participants",):
            n = st.conn.execute(f"SELECT COUNT(*) FROM {table_name} WHERE participant_id = ?", (leaver,)).fetchone()[0]
            assert n == 0, table_name
        assert (
            st.conn.execute("SELECT COUNT(*) FROM cells WHERE run_id = ?", (removed[0]["run_id"],)).fetchone()[0] == 0
        )

    # No export carries a contact: the run tables, and the Inspect logs.
    pilot(root, "study", "export", folder.name, "--format", "inspect")
    exported = [folder / "runs.csv", folder / "human_runs.csv", *sorted((folder / "inspect").glob("*.eval"))]
    assert len(exported) > 3
    from inspect_ai.log import read_eval_log

    for path in exported:
        # An Inspect log is read with Inspect's own reader (its archive is compressed).
        text = (
            read_eval_log(str(path)).model_dump_json() if path.suffix == ".eval" else path.read_text(encoding="utf-8")
        )
        assert not any(c in text for c in CONTACTS), path
    h1_log = next(p for p in exported if p.name.endswith("_H1_human.eval"))
    sample = read_eval_log(str(h1_log)).samples[0]
    assert sample.metadata["time_on_task_s"] == pytest.approx(float(by_arm.loc["H1", "time_on_task_s"]))


def test_the_judges_prompt_for_a_persons_package_is_the_prompt_for_an_agents_package_of_the_same_files(wave, tmp_path):
    _, folder, by = wave
    pid = _of(by, "H0")
    app = create_app(folder, WAVE, evaluate_in_background=False)
    p = Participant(app, links(folder)[pid])
    p.consent_and_start()
    p.upload(GOOD_CSV, "plan.csv")
    assert p.submit(questions="Which supplier?").status_code == 303
    person = RecordingJudge()
    with store.open_store(folder) as st:
        run_id = store.participant(st.conn, WAVE, pid)["run_id"]
        human_outputs = session.workspace_of(st, run_id) / "outputs"
        evaluate.evaluate_session(st, WAVE, pid, judge=person)
        agent = st.conn.execute("SELECT * FROM cells WHERE wave = 'pilot'").fetchone()
        agent_attempt = Path(st.attempts(agent["run_id"])[-1]["workspace"])
    # The agent's run of the same scenario, its outputs replaced by the person's files (copied byte for byte).
    twin = tmp_path / "agent-attempt"
    shutil.copytree(agent_attempt, twin, symlinks=True)
    shutil.rmtree(twin / "workspace" / "outputs")
    shutil.copytree(human_outputs, twin / "workspace" / "outputs")
    cell = CellSpec(agent["run_id"], folder.name, "pilot", SCENARIO, "A1", 1, agent["model"], 0, 1, 4.0, 1800.0, 4.3)
    robot = RecordingJudge()
    pipeline.judge_record(RunRecord.from_dict({"workspace": str(twin / "workspace")}), cell, "local-1", twin, robot, 1)
    assert len(person.prompts) == len(robot.prompts) == len(protocol.study().judge_panel)
    assert [t.encode("utf-8") for t in person.prompts] == [t.encode("utf-8") for t in robot.prompts]
    assert "human" not in person.prompts[0].lower() and "H0" not in person.prompts[0] and WAVE not in person.prompts[0]


def test_another_participants_session_is_404_and_h0_has_no_assistant_route(wave):
    _, folder, by = wave
    app = create_app(folder, WAVE, evaluate_in_background=False)
    ids = links(folder)
    h0 = Participant(app, ids[_of(by, "H0")])
    other = Participant(app, ids[_of(by, "H1")])
    for tail in ("consent", "ready", "task", "done", "withdraw", f"inputs/{DELIVERABLE}"):
        assert h0.client.get(f"/s/{other.session_id}/{tail}").status_code == 404, tail
    assert (
        h0.client.post(f"/s/{other.session_id}/withdraw", data={"csrf": h0.csrf, "confirm": "withdraw"}).status_code
        == 404
    )
    h0.consent_and_start()
    assert h0.post("assistant", message="hello").status_code == 404
    assert h0.client.post(f"/s/{h0.session_id}/record", data={"action": "save"}).status_code == 403  # no CSRF token
    assert h0.client.get("/experimenter").status_code == 403


def test_withdrawal_after_the_analysis_started_excludes_and_is_counted(wave):
    root, folder, by = wave
    pid = _of(by, "H0")
    app = create_app(folder, WAVE, evaluate_in_background=False)
    p = Participant(app, links(folder)[pid])
    p.consent_and_start()
    p.upload(GOOD_CSV, "plan.csv")
    p.submit()
    with store.open_store(folder) as st:
        evaluate.evaluate_session(st, WAVE, pid, judge="simulated")
    pilot(root, "human", "close", folder.name, WAVE)
    out = json.loads(pilot(root, "human", "withdraw", folder.name, WAVE, pid).stdout)
    assert out["action"] == "excluded"
    report = json.loads(pilot(root, "human", "export", folder.name, check=False).stdout or "{}")
    assert report == {} or report.get("rows") == 0
    log = json.loads(pilot(root, "human", "deletions", folder.name).stdout)
    assert [w["action"] for w in log["withdrawals"]] == ["excluded"]
    assert [d["what"] for d in log["deletions"]] == ["contact"]


def test_the_experimenters_minutes_enter_h_with_their_reason(wave):
    root, folder, by = wave
    pid = _of(by, "H0")
    app = create_app(folder, WAVE, evaluate_in_background=False)
    p = Participant(app, links(folder)[pid])
    p.consent_and_start()
    p.upload(GOOD_CSV, "plan.csv")
    p.submit(questions="One question?")
    e = app.test_client()
    e.get(links(folder)["experimenter"])
    page = e.get("/experimenter").get_data(as_text=True)
    import re

    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    assert not any(c in page for c in CONTACTS)
    # The times are shown to the second in UTC (the store keeps them in ISO 8601 at UTC, to the microsecond).
    with store.open_store(folder) as st:
        started, submitted = (store.participant(st.conn, WAVE, pid)[k] for k in ("started_at", "submitted_at"))
    assert started.endswith("+00:00") and submitted.endswith("+00:00")
    for stamp in (started, submitted):
        assert f'<td class="when">{stamp[:10]} {stamp[11:19]} UTC</td>' in page
    refused = e.post(f"/experimenter/intervention/{pid}", data={"csrf": csrf, "minutes": "4", "reason": ""})
    assert refused.status_code == 400
    assert (
        e.post(
            f"/experimenter/intervention/{pid}",
            data={"csrf": csrf, "minutes": "2.5", "reason": "the workstation froze"},
        ).status_code
        == 303
    )
    with store.open_store(folder) as st:
        evaluate.evaluate_session(st, WAVE, pid, judge="simulated")
    assert (
        e.post(
            f"/experimenter/intervention/{pid}", data={"csrf": csrf, "minutes": "1", "reason": "a second time"}
        ).status_code
        == 303
    )
    pilot(root, "human", "export", folder.name)
    row = pd.read_csv(folder / "human_runs.csv").iloc[0]
    # H = intervention minutes (2.5 + 1) + 5 minutes x 1 question.
    assert (row["intervention_minutes"], row["H_minutes"]) == (3.5, 8.5)


def test_a_restarted_site_signs_no_one_out_and_a_withdrawal_ends_every_session(wave):
    root, folder, by = wave
    pid = _of(by, "H0")
    first_app = create_app(folder, WAVE, evaluate_in_background=False)
    p = Participant(first_app, links(folder)[pid])
    p.consent_and_start()
    cookie = p.client.get_cookie("pilot_participant").value
    first_app.extensions["pilot.human"].close()
    # A new process of the site: the same wave's secret and session store.
    second_app = create_app(folder, WAVE, evaluate_in_background=False)
    again = second_app.test_client()
    again.set_cookie("pilot_participant", cookie)
    assert again.get(f"/s/{p.session_id}/task").status_code == 200
    for name in ("site.secret", "sessions.sqlite"):
        assert (folder / "human" / WAVE / name).stat().st_mode & 0o077 == 0, name
    # Withdrawn by the coordinator's command while signed in: the open session ends at its next request.
    pilot(root, "human", "withdraw", folder.name, WAVE, pid)
    assert again.get(f"/s/{p.session_id}/task").status_code == 403
    second_app.extensions["pilot.human"].close()


def test_human_packages_enter_a_grading_wave_like_any_other(wave, tmp_path):
    root, folder, by = wave
    app = create_app(folder, WAVE, evaluate_in_background=False)
    for pid in (_of(by, "H0"), _of(by, "H1")):
        p = Participant(app, links(folder)[pid])
        p.consent_and_start()
        p.upload(GOOD_CSV, "plan.csv")
        p.submit()
        with store.open_store(folder) as st:
            evaluate.evaluate_session(st, WAVE, pid, judge="simulated")
    graders = tmp_path / "graders.csv"
    graders.write_text("name,contact,occupations\nA,a@example.org,operations\nB,b@example.org,operations\n")
    pilot(root, "grading", "create", folder.name, "experts-h", "--graders", str(graders), "--with-human")
    import sqlite3

    conn = sqlite3.connect(folder / "study.sqlite")
    arms = sorted(r[0] for r in conn.execute("SELECT arm FROM grading_packages WHERE wave = 'experts-h'"))
    # Every finished, judged run of the study: the agent's, an agent error included (protocol/human/evaluation.md:
    # "all of them"), and the two sessions.
    finished = sorted(
        c
        for c, status in conn.execute("SELECT c.arm, r.status FROM cells c JOIN runs r USING (run_id)")
        if status in ("completed", "capped", "agent_error")
    )
    conn.close()
    assert arms == finished and {"H0", "H1"} <= set(arms)
