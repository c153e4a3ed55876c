"""One participant's session, from consent to submission: what the site does, without the web.

States (``human_participants.status``): ``assigned`` (the link was made),
``declined`` (consent refused; they may still agree later), ``consented``,
``started`` (the clock runs), ``submitted`` (the completion record is in,
by the participant or at the wall limit), ``evaluated`` (the run has its
verdict). A withdrawal removes the row (:mod:`pilot.human.withdraw`).

The clock (``protocol/interpretations.md``, "The human wave's clock"):
the session starts when the participant says so; the scenario's wall limit
of ``study.yml`` runs from then without pause; time on task is the time from
the start to the completion record; a session still open at the limit is
closed then, as an agent's run is, censored on ``wall`` and evaluated as
delivered. Active time (the task page in view and in use within the last
minute, counted by the page) is recorded apart.

Starting a session opens the run's attempt in the study's store
(:meth:`pilot.store.Store.begin_attempt`: the envelope reserves the
assistant's budget and the judges' reserve, as for an agent run) and lays
out the workspace in the attempt's folder (:mod:`pilot.human.bundle`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from pilot import paths
from pilot.human import bundle, store, uploads
from pilot.human.consent import Consent
from pilot.store import Store, now

#: The node a human session's attempt is recorded on (the study's own machine, where the site runs).
SITE_NODE = "participant-site"
#: The input hashes taken at layout, kept in the attempt's folder beside the workspace (never inside it).
INPUT_HASHES_FILE = "input_hashes.json"
#: The completion record's statuses, as the schema has them.
RECORD_STATUSES = ("completed", "partial", "abandoned")
#: A question or the notes longer than this is refused (pages of text; the form is for questions and notes).
MAX_FIELD_CHARS = 20_000
#: The reason written for a stand-in whose reason the participant had not given when the time ran out.
NO_REASON = "(no reason given before the time limit)"
#: Active seconds one page view may add at most, however long it stays open (the longest wall limit and more).
MAX_ACTIVE_S = 4 * 3600.0


class SessionError(ValueError):
    """A step the session's state does not allow, or a form that cannot be taken; the message is for the participant."""


@dataclass(frozen=True)
class Clock:
    """A started session's clock: when it started, its wall limit, and what is left at ``at``."""

    started_epoch: float
    wall_limit_s: float

    @property
    def deadline(self) -> float:
        return self.started_epoch + self.wall_limit_s

    def left(self, at: float) -> float:
        return max(0.0, self.deadline - at)

    def expired(self, at: float) -> bool:
        return at >= self.deadline


def clock_of(row: Any) -> Clock | None:
    if row["started_epoch"] is None or row["wall_limit_s"] is None:
        return None
    return Clock(float(row["started_epoch"]), float(row["wall_limit_s"]))


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def session_row(st: Store, wave: str, participant_id: str) -> Any:
    row = store.participant(st.conn, wave, participant_id)
    if row is None:
        raise SessionError("There is no such session.")
    return row


def attempt_of(st: Store, run_id: str) -> Any:
    """The run's latest attempt (a human session has one), or None before the start."""
    return st.conn.execute(
        "SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt_no DESC LIMIT 1", (run_id,)
    ).fetchone()


def attempt_dir(st: Store, run_id: str) -> Path | None:
    a = attempt_of(st, run_id)
    return Path(a["workspace"]) if a is not None else None


def workspace_of(st: Store, run_id: str) -> Path | None:
    folder = attempt_dir(st, run_id)
    return folder / "workspace" if folder is not None else None


# ---------------------------------------------------------------------- consent
def decide_consent(st: Store, wave: str, participant_id: str, agree: bool, consent: Consent) -> str:
    """Record a consent decision (with the text's version and digest); returns the new status."""
    row = session_row(st, wave, participant_id)
    if row["status"] not in ("assigned", "declined", "consented"):
        raise SessionError("Your consent was recorded when you started; to stop, use Withdraw.")
    with st.transaction() as c:
        if agree:
            store.set_status(c, wave, participant_id, "consented", consent_version=consent.version, consented_at=now())
        else:
            store.set_status(c, wave, participant_id, "declined", declined_at=now())
        store.log_event(
            c,
            wave,
            "consent" if agree else "consent_declined",
            participant_id=participant_id,
            detail={"version": consent.version, "sha256": consent.sha256},
        )
    return "consented" if agree else "declined"


# ---------------------------------------------------------------------- start
def start(st: Store, wave: str, participant_id: str, *, at: float | None = None) -> Path:
    """Start the clock: open the run's attempt (the envelope's reservation) and lay out the workspace.

    Returns the attempt's folder. Refused unless the participant has consented
    and not started; refused, leaving nothing open, when the envelope cannot
    cover the session's reservation.
    """
    from pilot.scenarios import load_scenario

    row = session_row(st, wave, participant_id)
    if row["status"] != "consented":
        raise SessionError(
            "The task starts once, after consent." if row["status"] != "started" else "The task has started already."
        )
    w = store.wave(st.conn, wave)
    cell = next((c for c in st.cells("human") if c.run_id == row["run_id"]), None)
    if cell is None:
        raise SessionError("This session has no run in the study; tell the experimenter.")
    started = st.begin_attempt(cell, SITE_NODE, w.backend, st.folder / "workspaces")
    if started is None:
        raise SessionError(
            "The study's budget cannot cover this session now; nothing has started. Tell the experimenter."
        )
    folder = started.workspace
    try:
        folder.mkdir(parents=True, exist_ok=True)
        laid = bundle.lay_out(load_scenario(row["scenario"]), row["condition"], folder / "workspace")
        (folder / INPUT_HASHES_FILE).write_text(json.dumps(laid.input_hashes, indent=1, sort_keys=True) + "\n")
    except Exception as exc:
        # Nothing of the participant's exists yet: the attempt is released, the cell waits again.
        from pilot.attempt import AttemptOutcome

        st.finish_attempt(
            started.attempt_id,
            AttemptOutcome(infra_error=f"layout: {exc}", launched=False),
            max_infra_attempts=1_000_000,
        )
        raise SessionError("The task could not be prepared; tell the experimenter (nothing has started).") from exc
    epoch = time.time() if at is None else at
    with st.transaction() as c:
        store.set_status(
            c,
            wave,
            participant_id,
            "started",
            started_at=_iso(epoch),
            started_epoch=epoch,
            wall_limit_s=float(cell.wall_s),
        )
        store.log_event(c, wave, "start", participant_id=participant_id, detail={"wall_limit_s": cell.wall_s})
    return folder


def open_session(st: Store, wave: str, participant_id: str, *, at: float | None = None) -> Any:
    """The session's row if it is started and its time is not up; closes it at the wall limit first when it is."""
    row = session_row(st, wave, participant_id)
    if row["status"] != "started":
        raise SessionError(
            {
                "submitted": "You have submitted; the session is closed.",
                "evaluated": "You have submitted; the session is closed.",
            }.get(row["status"], "The task has not started.")
        )
    clock = clock_of(row)
    now_epoch = time.time() if at is None else at
    if clock is not None and clock.expired(now_epoch):
        submit(st, wave, participant_id, ended_by="deadline", at=clock.deadline)
        raise SessionError("The time limit has passed: the session was closed with what you had uploaded.")
    return row


# ---------------------------------------------------------------------- uploads and the form
def upload_target(
    st: Store, wave: str, participant_id: str, requested: str, *, at: float | None = None
) -> tuple[Any, Path]:
    """The deliverable named ``requested`` of an open session, and the session's attempt folder (refused otherwise)."""
    from pilot.scenarios import load_scenario

    row = open_session(st, wave, participant_id, at=at)
    deliverable = next((d for d in bundle.requested_files(load_scenario(row["scenario"])) if d.name == requested), None)
    if deliverable is None:
        raise SessionError(f"The brief asks for no file called {requested}.")
    folder = attempt_dir(st, row["run_id"])
    assert folder is not None
    return deliverable, folder


def record_upload(
    st: Store, wave: str, participant_id: str, requested: str, accepted: uploads.Accepted | None, reason: str | None
) -> None:
    """Keep one upload's outcome: the admitted file (name, size, digest) or the refusal's reason."""
    with st.transaction() as c:
        c.execute(
            "INSERT INTO human_uploads (wave, participant_id, at, requested, saved_as, size, sha256, admitted, reason) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                wave,
                participant_id,
                now(),
                requested,
                accepted.saved_as if accepted else None,
                accepted.size if accepted else 0,
                accepted.sha256 if accepted else None,
                int(accepted is not None),
                reason,
            ),
        )


def upload(
    st: Store,
    wave: str,
    participant_id: str,
    requested: str,
    filename: str,
    stream: BinaryIO,
    *,
    at: float | None = None,
) -> uploads.Accepted:
    """Take one upload for the deliverable named ``requested`` (see :mod:`pilot.human.uploads`); every try is recorded.

    The participant site runs the same three steps with the admission outside
    its store lock (:func:`upload_target`, :func:`pilot.human.uploads.receive`, :func:`record_upload`).
    """
    deliverable, folder = upload_target(st, wave, participant_id, requested, at=at)
    try:
        accepted = uploads.receive(deliverable, filename, stream, folder, folder / "workspace" / "outputs")
    except uploads.UploadRefused as exc:
        record_upload(st, wave, participant_id, requested, None, str(exc))
        raise
    record_upload(st, wave, participant_id, requested, accepted, None)
    return accepted


def delivered(st: Store, row: Any) -> dict[str, uploads.Accepted]:
    """The files now in ``outputs/`` by requested deliverable: the last admitted upload of each that is still there."""
    folder = workspace_of(st, row["run_id"])
    have = (
        {p.name for p in (folder / "outputs").iterdir()}
        if folder is not None and (folder / "outputs").is_dir()
        else set()
    )
    out: dict[str, uploads.Accepted] = {}
    for u in store.uploads(st.conn, row["wave"], row["participant_id"]):
        if u["admitted"] and u["saved_as"] in have:
            out[u["requested"]] = uploads.Accepted(
                u["requested"], u["saved_as"], int(u["size"]), u["sha256"], u["saved_as"] != u["requested"]
            )
    return out


def read_form(form: Any, requested: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The completion record's form as a draft, with every fault named (what was typed is kept)."""
    errors: list[str] = []
    status = (form.get("status") or "").strip()
    if status and status not in RECORD_STATUSES:
        errors.append("the status must be completed, partial or abandoned")
    questions = (form.get("questions") or "").replace("\r\n", "\n")
    notes = (form.get("notes") or "").replace("\r\n", "\n")
    for label, text in (("questions", questions), ("notes", notes)):
        if len(text) > MAX_FIELD_CHARS:
            errors.append(f"the {label} have {len(text):,} characters; at most {MAX_FIELD_CHARS:,} are kept")
    reasons = {name: (form.get(f"reason-{name}") or "").strip()[:2000] for name in requested}
    return {"status": status, "questions": questions, "notes": notes, "reasons": reasons}, errors


def save_draft(st: Store, wave: str, participant_id: str, draft: dict[str, Any], *, at: float | None = None) -> None:
    open_session(st, wave, participant_id, at=at)
    with st.transaction() as c:
        store.save_completion_draft(c, wave, participant_id, draft)
        store.log_event(c, wave, "record_saved", participant_id=participant_id)


def completion_record(
    draft: dict[str, Any], files: dict[str, uploads.Accepted], *, at_deadline: bool
) -> dict[str, Any] | None:
    """The completion record the form gives (the schema's fields), or None when there is none to write.

    At the wall limit a participant who never chose a status has written no
    record, as an agent stopped before writing its own has none.
    """
    status = draft.get("status") or ""
    if status not in RECORD_STATUSES:
        if at_deadline:
            return None
        raise SessionError("Choose the status of your work (completed, partial or abandoned) before you submit.")
    substitutions = []
    for requested, f in sorted(files.items()):
        if f.substitute:
            reason = (draft.get("reasons") or {}).get(requested, "").strip()
            if not reason:
                if not at_deadline:
                    raise SessionError(f"Say why you delivered {f.saved_as} instead of {requested} (the reason field).")
                reason = NO_REASON
            substitutions.append({"requested": requested, "delivered": f.saved_as, "reason": reason})
    questions = [q.strip() for q in str(draft.get("questions") or "").split("\n") if q.strip()]
    record: dict[str, Any] = {
        "status": status,
        "deliverables": sorted(f.saved_as for f in files.values()),
        "substitutions": substitutions,
        "questions": questions,
    }
    notes = str(draft.get("notes") or "").strip()
    if notes:
        record["notes"] = notes
    schema = json.loads(paths.COMPLETION_SCHEMA_FILE.read_text(encoding="utf-8"))
    import jsonschema

    jsonschema.validate(record, schema)
    return record


def submit(
    st: Store, wave: str, participant_id: str, *, ended_by: str = "participant", at: float | None = None
) -> float:
    """Close the session: write the completion record into ``outputs/`` and stop the clock; returns the time on task.

    ``ended_by`` is ``participant`` (the Submit button; a status must be
    chosen) or ``deadline`` (the wall limit, whatever was saved). Idempotent
    for a session already submitted.
    """
    row = session_row(st, wave, participant_id)
    if row["status"] in ("submitted", "evaluated"):
        return float(row["time_on_task_s"] or 0.0)
    if row["status"] != "started":
        raise SessionError("The task has not started.")
    clock = clock_of(row)
    assert clock is not None
    end = time.time() if at is None else at
    if ended_by == "participant" and clock.expired(end):
        ended_by, end = "deadline", clock.deadline
    end = min(end, clock.deadline)
    at_deadline = ended_by == "deadline"
    record = completion_record(store.completion_draft(row), delivered(st, row), at_deadline=at_deadline)
    ws = workspace_of(st, row["run_id"])
    assert ws is not None
    target = ws / "outputs" / bundle.COMPLETION_RECORD
    if record is not None:
        target.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    elif target.exists():
        target.unlink()
    on_task = max(0.0, end - clock.started_epoch)
    with st.transaction() as c:
        store.set_status(
            c, wave, participant_id, "submitted", submitted_at=_iso(end), ended_by=ended_by, time_on_task_s=on_task
        )
        store.log_event(
            c,
            wave,
            "submit" if ended_by == "participant" else "deadline",
            participant_id=participant_id,
            detail={"time_on_task_s": on_task, "record": record is not None},
        )
    return on_task


# ---------------------------------------------------------------------- the assistant's exchanges
def record_exchange(
    st: Store,
    wave: str,
    participant_id: str,
    prompt: str,
    reply: Any,
    *,
    status: str = "answered",
    error: str | None = None,
) -> None:
    """Keep one exchange with H1's assistant: what was typed, and the answer with its tokens and metered cost
    (``reply`` a :class:`pilot.human.assistant.Reply`), or why there was none."""
    usage = reply.usage if reply is not None else {}
    with st.transaction() as c:
        c.execute(
            "INSERT INTO human_assistant (wave, participant_id, at, prompt, reply, status, message_id, input_tokens, "
            "cache_creation_input_tokens, cache_read_input_tokens, output_tokens, cost_usd, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                wave,
                participant_id,
                now(),
                prompt,
                reply.text if reply is not None else None,
                status if reply is None else "answered",
                reply.message_id if reply is not None else None,
                usage.get("input_tokens"),
                usage.get("cache_creation_input_tokens"),
                usage.get("cache_read_input_tokens"),
                usage.get("output_tokens"),
                str(reply.cost_usd) if reply is not None else None,
                error,
            ),
        )


# ---------------------------------------------------------------------- active time and interventions
def page_view(st: Store, wave: str, participant_id: str, view_id: str, *, at: float | None = None) -> None:
    """A task page was served: its view id starts counting active seconds (:func:`report_active`)."""
    with st.transaction() as c:
        c.execute(
            "INSERT OR IGNORE INTO human_pageviews (wave, view_id, participant_id, served_epoch) VALUES (?, ?, ?, ?)",
            (wave, view_id, participant_id, time.time() if at is None else at),
        )


def report_active(
    st: Store, wave: str, participant_id: str, view_id: str, seconds: Any, *, at: float | None = None
) -> float:
    """Take a page view's own count of its active seconds (cumulative); returns what is kept for the view.

    Never more than the view has been open (nor than a cap), never less than
    what the view already reported; a view of another participant counts nothing.
    """
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return 0.0
    if not math.isfinite(value) or value < 0:
        return 0.0
    row = st.conn.execute(
        "SELECT served_epoch, active_s FROM human_pageviews WHERE wave = ? AND view_id = ? AND participant_id = ?",
        (wave, view_id, participant_id),
    ).fetchone()
    if row is None:
        return 0.0
    now_epoch = time.time() if at is None else at
    kept = min(value, max(0.0, now_epoch - float(row["served_epoch"])), MAX_ACTIVE_S)
    kept = max(kept, float(row["active_s"]))
    with st.transaction() as c:
        c.execute("UPDATE human_pageviews SET active_s = ? WHERE wave = ? AND view_id = ?", (kept, wave, view_id))
    return kept


def add_intervention(st: Store, wave: str, participant_id: str, minutes: Any, reason: str) -> float:
    """The experimenter's intervention minutes for a session (H's first term), with the reason; returns the total."""
    try:
        value = float(minutes)
    except (TypeError, ValueError):
        raise SessionError(f"minutes must be a number, not {str(minutes)[:20]!r}") from None
    if not math.isfinite(value) or value < 0 or value > 24 * 60:
        raise SessionError("minutes must be between 0 and 1440")
    reason = (reason or "").strip()
    if not reason:
        raise SessionError("say why the intervention was needed (the reason is kept with the minutes)")
    session_row(st, wave, participant_id)
    with st.transaction() as c:
        c.execute(
            "INSERT INTO human_interventions (wave, participant_id, at, minutes, reason) VALUES (?, ?, ?, ?, ?)",
            (wave, participant_id, now(), value, reason[:2000]),
        )
        store.log_event(c, wave, "intervention", participant_id=participant_id, detail={"minutes": value})
    total = store.intervention_minutes(st.conn, wave, participant_id) or 0.0
    return total
