"""Withdrawal and deletion, as the consent says: what a participant leaves behind is the record that they withdrew.

A participant withdraws from the site (the Withdraw page) or through the
coordinator (``pilot human withdraw STUDY WAVE PARTICIPANT``). Before the
wave's analysis has started (:func:`mark_analysis_started`, which the human
wave's export does) everything of theirs is deleted, in this order:

1. the assistant's books are closed by the caller (the site) so nothing more
   is spent; then the session's run leaves the study's store
   (:meth:`pilot.store.Store.remove_run`: its cell, attempt, record,
   evaluation and judge scores), its charge kept in the ledger so that the
   envelope's account still balances;
2. the attempt's folder (the workspace with the uploads and the completion
   record, the proxy's record of the assistant's exchanges, the evaluation);
3. their rows of the human tables (session, uploads, assistant exchanges,
   page views, interventions, events);
4. their line of the owner-only links file (their contact).

What remains is one ``human_withdrawals`` row (who by pseudonym, when, how,
at which stage, what it cost) and the deletion log (``human_deletions``, one
line per thing deleted). After the analysis has started their run is kept
but marked withdrawn, and every later export leaves it out and counts it.

``pilot human delete STUDY WAVE --contacts`` removes every contact of a wave
once the wave is over (the retention the operating procedure states); it is
logged the same way.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot.human import session, store
from pilot.human.evaluate import charge_so_far
from pilot.human.wave import SESSIONS_FILE, remove_contact, wave_dir
from pilot.store import Store, now

VIAS = ("site", "command")


@dataclass(frozen=True)
class Withdrawal:
    """What a withdrawal did: deleted (before analysis) or excluded (after), the stage it came at, what it cost."""

    participant_id: str
    action: str
    stage: str
    charged_usd: float
    deleted: dict[str, int]


def mark_analysis_started(st: Store, wave: str) -> None:
    """Record that the wave's data were handed to analysis (the first export): from then on withdrawal excludes."""
    with st.transaction() as c:
        c.execute(
            "UPDATE human_waves SET analysis_started_at = ? WHERE wave = ? AND analysis_started_at IS NULL",
            (now(), wave),
        )


def withdraw(st: Store, wave: str, participant_id: str, *, via: str, reason: str | None = None) -> Withdrawal:
    """Withdraw one participant (see the module's description); refused for an unknown or already withdrawn one."""
    if via not in VIAS:
        raise store.HumanWaveError(f"via {via!r}: site or command")
    w = store.wave(st.conn, wave)
    row = store.participant(st.conn, wave, participant_id)
    if row is None:
        done = st.conn.execute(
            "SELECT at FROM human_withdrawals WHERE wave = ? AND participant_id = ?", (wave, participant_id)
        ).fetchone()
        if done is not None:
            raise store.HumanWaveError(f"participant {participant_id} of wave {wave} withdrew already ({done[0]})")
        raise store.HumanWaveError(f"wave {wave} has no participant {participant_id}")
    if row["status"] == "withdrawn":
        raise store.HumanWaveError(f"participant {participant_id} of wave {wave} withdrew already")
    stage = str(row["status"])
    folder = session.attempt_dir(st, row["run_id"])
    if w.analysis_started_at is not None:
        return _exclude(st, wave, row, via, reason, stage)
    charged = 0.0
    deleted: dict[str, int] = {}
    cell = st.conn.execute("SELECT 1 FROM cells WHERE run_id = ?", (row["run_id"],)).fetchone()
    if cell is not None:
        open_charge = charge_so_far(folder) if folder is not None else None
        removed = st.remove_run(row["run_id"], reason=f"participant withdrew ({via})", open_charge_usd=open_charge)
        charged = float(removed["charged_usd"])
        deleted["run"] = 1
    runs_dir = (st.folder / "workspaces" / row["run_id"]).resolve()
    if runs_dir.is_relative_to((st.folder / "workspaces").resolve()) and runs_dir.exists():
        shutil.rmtree(runs_dir)  # workspaces/<run id>/: the attempt's folder (uploads, record, proxy record)
        deleted["files"] = 1
    with st.transaction() as c:
        for table in store.PARTICIPANT_TABLES:
            n = c.execute(f"DELETE FROM {table} WHERE wave = ? AND participant_id = ?", (wave, participant_id)).rowcount
            if n:
                deleted[table] = int(n)
        c.execute("DELETE FROM human_participants WHERE wave = ? AND participant_id = ?", (wave, participant_id))
        deleted["session"] = 1
        contacts = remove_contact(wave_dir(st.folder, wave), participant_id)
        deleted["contact"] = contacts
        deleted["sign_in"] = sign_out_everywhere(st.folder, wave, participant_id)
        c.execute(
            "INSERT INTO human_withdrawals (wave, participant_id, at, via, action, stage, charged_usd, reason) "
            "VALUES (?, ?, ?, ?, 'deleted', ?, ?, ?)",
            (wave, participant_id, now(), via, stage, charged, reason),
        )
        for what, n in sorted(deleted.items()):
            store.log_deletion(c, wave, what, participant_id=participant_id, detail={"rows": n, "why": "withdrawal"})
    return Withdrawal(participant_id, "deleted", stage, charged, deleted)


def sign_out_everywhere(study_folder: Path, wave: str, participant_id: str) -> int:
    """End every open session of the participant on the site (a running site ends it at its next request)."""
    from pilot import web_sessions

    path = wave_dir(study_folder, wave) / SESSIONS_FILE
    if not path.exists():
        return 0
    sessions = web_sessions.SessionStore(path, web_sessions.SessionLimits(1.0, 1.0))
    try:
        return sessions.close_subject(participant_id)
    finally:
        sessions.close_store()


def _exclude(st: Store, wave: str, row: Any, via: str, reason: str | None, stage: str) -> Withdrawal:
    pid = row["participant_id"]
    sign_out_everywhere(st.folder, wave, pid)
    with st.transaction() as c:
        store.set_status(c, wave, pid, "withdrawn")
        c.execute(
            "INSERT INTO human_withdrawals (wave, participant_id, at, via, action, stage, charged_usd, reason) "
            "VALUES (?, ?, ?, ?, 'excluded', ?, 0, ?)",
            (wave, pid, now(), via, stage, reason),
        )
        removed = remove_contact(wave_dir(st.folder, wave), pid)
        store.log_deletion(c, wave, "contact", participant_id=pid, detail={"rows": removed, "why": "withdrawal"})
        store.log_event(c, wave, "withdrawn_excluded", participant_id=pid)
    return Withdrawal(pid, "excluded", stage, 0.0, {"contact": removed})


def delete_contacts(st: Store, wave: str) -> int:
    """Remove every participant's contact of a wave (retention after the wave), logged; returns the lines removed."""
    store.wave(st.conn, wave)
    removed = remove_contact(wave_dir(st.folder, wave), None)
    with st.transaction() as c:
        store.log_deletion(c, wave, "contacts", detail={"rows": removed, "why": "retention: the wave is over"})
    return removed


def withdrawn_run_ids(st: Store, wave: str | None = None) -> set[str]:
    """Runs of participants who withdrew after analysis started (kept, but left out of every later export)."""
    sql = "SELECT run_id FROM human_participants WHERE status = 'withdrawn'" + (" AND wave = ?" if wave else "")
    return {r[0] for r in st.conn.execute(sql, (wave,) if wave else ())}


def discard_simulated_wave(st: Store, wave: str) -> int:
    """Remove a SIMULATED wave whole (to draw it again): its runs, files, rows and folder; returns the runs removed.

    A wave of people is never discarded: their data go only by withdrawal or by
    the retention rules, each logged. Refused for it, naming the wave.
    """
    w = store.wave(st.conn, wave)
    if not w.simulated:
        raise store.HumanWaveError(
            f"human wave {wave!r} is a wave of people; it is never discarded (choose another name)"
        )
    removed = 0
    for row in store.participants(st.conn, wave):
        if st.conn.execute("SELECT 1 FROM cells WHERE run_id = ?", (row["run_id"],)).fetchone() is not None:
            st.remove_run(row["run_id"], reason=f"SIMULATED wave {wave} drawn again")
            removed += 1
        shutil.rmtree(st.folder / "workspaces" / row["run_id"], ignore_errors=True)
    with st.transaction() as c:
        for table in (
            *store.PARTICIPANT_TABLES,
            "human_participants",
            "human_withdrawals",
            "human_deletions",
            "human_waves",
        ):
            c.execute(f"DELETE FROM {table} WHERE wave = ?", (wave,))
    shutil.rmtree(wave_dir(st.folder, wave), ignore_errors=True)
    return removed
