"""A submitted session becomes a run of the study, evaluated by exactly the agent runs' evaluators.

For each session submitted (by the participant, or closed at its wall limit):

1. the workspace's manifest and digest are recorded before anything reads it
   (:func:`pilot.runner.record_workspace`), as for an agent run;
2. the evaluation is the runner's own (:func:`pilot.runner.evaluate_finished`):
   the input-hash check against the hashes taken at layout, the oracle with
   LibreOffice recalculation and the guarded readers;
3. the run record is the runner's :class:`~pilot.runner.RunRecord`, filled
   for a person (arm H0 or H1, backend ``human``; cost C is the assistant's
   metered cost in H1 and zero in H0, which called no model; wall time is the
   time on task), with the session's own measures under ``human``;
4. the judges are the pipeline's own (:func:`pilot.pipeline.judge_record`):
   the study's panel, the same renderer and blinding, the same prompt: a
   judge is given the deliverables, never who made them;
5. the attempt is closed in the store (:meth:`pilot.store.Store.finish_attempt`):
   the ledger charges what the assistant was metered plus the judges.

The study's judges are the ones its agent runs were judged by (the CLI judges
for a real study, the simulated judges for a dry run; ``PILOT_JUDGE_BACKEND``
overrides both, as for agents); a study with no agent run yet is judged by
the CLI judges of the human backend. One evaluation at a time per wave (a
lock file in the wave's folder), so the site and ``pilot human evaluate``
never evaluate a session twice.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

from pilot import pipeline, runner, study
from pilot.attempt import AttemptOutcome, CellSpec
from pilot.human import session, store
from pilot.human.assistant import Settings
from pilot.human.wave import ASSISTED, wave_dir
from pilot.outcomes import agent_cost
from pilot.store import Store, now
from pilot.view.usage import read_usage

LOCK_FILE = "evaluate.lock"


@contextmanager
def evaluation_lock(study_folder: Path, wave: str) -> Iterator[None]:
    """Hold the wave's evaluation lock (released by the kernel if the process dies)."""
    folder = wave_dir(study_folder, wave)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def judge_backend(st: Store, wave_backend: str) -> str:
    """The judges of the study's agent runs (its one agent backend's), else the human backend's own."""
    agents = study.agent_backends(st)
    return pipeline.judge_backend_for(agents[0] if len(agents) == 1 else wave_backend)


def human_fields(st: Store, row: Any, attempt_folder: Path) -> dict[str, Any]:
    """The session's own measures, kept under ``human`` in the run record (and in the run table's row)."""
    w, pid = row["wave"], row["participant_id"]
    tokens = read_usage(attempt_folder).tokens() if row["condition"] == ASSISTED else None
    settings = Settings.from_mapping(store.wave(st.conn, w).assistant)
    return {
        "time_on_task_s": float(row["time_on_task_s"] or 0.0),
        "active_s": round(store.active_seconds(st.conn, w, pid), 3),
        "intervention_minutes": store.intervention_minutes(st.conn, w, pid),
        "ended_by": row["ended_by"],
        "assistant_requests": tokens.requests if tokens is not None else 0,
        "assistant_tokens": tokens.total if tokens is not None else 0,
        "assistant_cost_usd": float(tokens.cost_usd) if tokens is not None else 0.0,
        "assistant_model": settings.model if row["condition"] == ASSISTED else None,
        "assistant_budget_usd": str(settings.usd_per_session) if row["condition"] == ASSISTED else None,
        "consent_version": row["consent_version"],
    }


def build_record(st: Store, row: Any, attempt: Any, cell: CellSpec, backend: str) -> tuple[runner.RunRecord, Any]:
    """The run record of a submitted session, evaluated (the runner's record type and the runner's evaluation)."""
    from pilot.scenarios import load_scenario

    folder = Path(attempt["workspace"])
    ws = folder / "workspace"
    scenario = load_scenario(row["scenario"])
    hashes = json.loads((folder / session.INPUT_HASHES_FILE).read_text(encoding="utf-8"))
    assisted = row["condition"] == ASSISTED
    tokens = read_usage(folder).tokens() if assisted else None
    metered = tokens.cost_usd if tokens is not None else None
    deadline = row["ended_by"] == "deadline"
    completion, valid, refused = runner.load_completion_record(ws)
    notes = [
        "a human session: "
        + ("closed at the wall limit with what was uploaded" if deadline else "submitted by the participant")
    ]
    if refused:
        notes.append(f"the completion record was not read: {refused}")
    settings = Settings.from_mapping(store.wave(st.conn, row["wave"]).assistant)
    rec = runner.RunRecord(
        scenario=row["scenario"],
        arm=row["condition"],
        model=cell.model,
        backend=backend,
        seed=cell.seed,
        status="capped" if deadline else "completed",
        censored=deadline,
        censor_reason="wall" if deadline else None,
        infra_error=None,
        agent_error=None,
        cost_usd=float(metered) if metered is not None else 0.0,
        cost_complete=True,
        cost_method="metered by the model proxy (H1's assistant)" if assisted else "none: no model was used (H0)",
        recovery_cost_usd=None,
        wall_s=round(float(row["time_on_task_s"] or 0.0), 3),
        turns=tokens.requests if tokens is not None else 0,
        tool_calls=0,
        tool_calls_by_tool={},
        questions=runner.count_questions(completion),
        deviations=[],
        D=None,
        E=None,
        E_reasons=[],
        criteria_passed=None,
        criteria_total=None,
        criteria=[],
        selfcheck_first=None,
        recovery_used=False,
        recovery_skipped=None,
        selfcheck_final=None,
        cli_version=None,
        caps_usd=float(settings.usd_per_session) if assisted else 0.0,
        caps_wall_s=float(row["wall_limit_s"] or cell.wall_s),
        max_turns=0,
        workspace=str(ws),
        transcript=str(folder / runner.TRANSCRIPT),
        completion_record_valid=valid,
        completion_status=completion.get("status") if valid and isinstance(completion, dict) else None,
        enforcement="",
        metered_cost_usd=metered,
        metered_requests=tokens.requests if tokens is not None else None,
        started_at=str(row["started_at"]),
        notes=notes,
        input_hashes=dict(hashes),
    )
    rec.workspace_sha256, rec.workspace_entries = runner.record_workspace(ws, folder)
    ev = runner.evaluate_finished(scenario, ws, hashes)
    (folder / runner.EVALUATION_FILE).write_text(json.dumps(ev.to_dict(), indent=2) + "\n", encoding="utf-8")
    runner.apply_evaluation(rec, ev)
    return rec, ev


def evaluate_session(st: Store, wave: str, participant_id: str, *, judge: Any = None) -> str:
    """Evaluate and judge one submitted session and finish its run; returns the run's status in the store.

    ``judge`` (a judge backend name or object) replaces the study's (tests
    pass a recording one). A session not submitted, or already evaluated, is
    left as it is.
    """
    row = session.session_row(st, wave, participant_id)
    if row["status"] != "submitted":
        return str(row["status"])
    attempt = session.attempt_of(st, row["run_id"])
    if attempt is None or attempt["outcome"] != "running":
        raise store.HumanWaveError(f"session {participant_id} of wave {wave} has no open attempt to close")
    w = store.wave(st.conn, wave)
    cell = next(c for c in st.cells("human") if c.run_id == row["run_id"])
    folder = Path(attempt["workspace"])
    rec, _ev = build_record(st, row, attempt, cell, w.backend)
    rec.human = human_fields(st, row, folder)
    rec_path = folder / "run_record.json"
    rec_path.write_text(json.dumps(rec.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    rec = pipeline.judge_record(
        rec, cell, session.SITE_NODE, folder, judge if judge is not None else judge_backend(st, w.backend), cell.seed
    )
    data = rec.to_dict()
    rec_path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    metered = data.get("metered_cost_usd")
    outcome = AttemptOutcome(
        record=data,
        cost_usd=agent_cost(rec),
        judge_cost_usd=float(rec.judge_cost_usd or 0.0),
        status=rec.status,
        metered_cost_usd=str(metered) if metered is not None else None,
    )
    status = st.finish_attempt(int(attempt["attempt_id"]), outcome, max_infra_attempts=1)
    with st.transaction() as c:
        store.set_status(c, wave, participant_id, "evaluated", evaluated_at=now(), evaluation_note=None)
        store.log_event(
            c,
            wave,
            "evaluated",
            participant_id=participant_id,
            detail={"D": data.get("D"), "E": data.get("E"), "judges": len(data.get("judges") or [])},
        )
    return status


def pending(st: Store, wave: str) -> list[str]:
    """The wave's sessions waiting for evaluation (submitted), in plan order."""
    return [r["participant_id"] for r in store.participants(st.conn, wave) if r["status"] == "submitted"]


def close_expired(st: Store, wave: str, *, at: float | None = None) -> list[str]:
    """Close every started session whose wall limit has passed (as the site does on the participant's next request)."""
    closed = []
    when = time.time() if at is None else at
    for r in store.participants(st.conn, wave):
        clock = session.clock_of(r)
        if r["status"] == "started" and clock is not None and clock.expired(when):
            session.submit(st, wave, r["participant_id"], ended_by="deadline", at=clock.deadline)
            closed.append(r["participant_id"])
    return closed


def evaluate_wave(study_folder: Path, wave: str, *, judge: Any = None, only: list[str] | None = None) -> dict[str, str]:
    """Close the sessions past their wall limit, then evaluate the submitted ones (or those named); their statuses."""
    out: dict[str, str] = {}
    with evaluation_lock(study_folder, wave), store.open_store(study_folder) as st:
        close_expired(st, wave)
        for pid in pending(st, wave):
            if only is None or pid in only:
                out[pid] = evaluate_session(st, wave, pid, judge=judge)
    return out


def refresh_intervention(st: Store, wave: str, participant_id: str) -> None:
    """Carry an intervention recorded after the session's evaluation into its run record (H changes with it)."""
    row = session.session_row(st, wave, participant_id)
    if row["status"] != "evaluated":
        return
    minutes = store.intervention_minutes(st.conn, wave, participant_id)
    with st.transaction() as c:
        got = c.execute("SELECT record_json FROM runs WHERE run_id = ?", (row["run_id"],)).fetchone()
        if got is None:
            return
        data = json.loads(got[0])
        human = dict(data.get("human") or {})
        human["intervention_minutes"] = minutes
        data["human"] = human
        c.execute("UPDATE runs SET record_json = ? WHERE run_id = ?", (json.dumps(data, default=str), row["run_id"]))
        st.record_event(c, "intervention", row["run_id"], minutes=minutes)


def charge_so_far(attempt_folder: Path) -> Decimal:
    """What a session's assistant has been metered so far (an open session's charge when it is removed)."""
    return read_usage(Path(attempt_folder)).tokens().cost_usd
