"""The human wave's tables in the study's SQLite store, beside the study's own and never inside them.

A session's run is an ordinary cell, attempt and run of wave ``human``
(:mod:`pilot.store`); everything else about the participant lives here:

- ``human_waves``: one row per wave (seed, the consent version, the
  experimenter's sign-in hash, the assistant's budget as fixed at creation,
  whether the wave is of people or SIMULATED participants, when analysis
  started);
- ``human_participants``: one row per participant: pseudonym, occupation,
  eligibility route, condition, scenario, run id, sign-in hash, and the
  session's state and clock. No contact: it never enters the store;
- ``human_uploads`` (every upload, admitted or refused, with its reason),
  ``human_assistant`` (every exchange with the H1 assistant: what was typed,
  the reply, tokens and metered cost), ``human_pageviews`` (active time per
  page view), ``human_interventions`` (the experimenter's minutes, each with
  its reason), ``human_events`` (sign-ins, consent, start, submit, ...);
- ``human_withdrawals`` and ``human_deletions``: what remains of a
  participant who withdrew, and the log of every deletion.

Tokens are kept only as hashes (:mod:`pilot.grading.tokens`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot.store import STORE_FILE, Store, StoreError, now

SCHEMA = """
CREATE TABLE IF NOT EXISTS human_waves (
    wave TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    seed INTEGER NOT NULL,
    per_condition INTEGER NOT NULL CHECK (per_condition >= 1),
    source TEXT NOT NULL CHECK (source IN ('participants', 'simulated')),
    backend TEXT NOT NULL,
    participants_file TEXT NOT NULL,
    consent_version TEXT NOT NULL,
    consent_sha256 TEXT NOT NULL,
    experimenter_token_hash TEXT NOT NULL,
    ethics_approval TEXT,
    scenarios_json TEXT NOT NULL,
    assistant_json TEXT NOT NULL,
    simulation_json TEXT,
    analysis_started_at TEXT
);
CREATE TABLE IF NOT EXISTS human_participants (
    wave TEXT NOT NULL REFERENCES human_waves (wave),
    participant_id TEXT NOT NULL,
    occupation TEXT NOT NULL,
    eligibility TEXT NOT NULL,
    line INTEGER NOT NULL,
    position INTEGER NOT NULL,
    condition TEXT NOT NULL,
    scenario TEXT NOT NULL,
    run_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL UNIQUE,
    token_hash TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL DEFAULT 'assigned' CHECK (status IN
        ('assigned', 'declined', 'consented', 'started', 'submitted', 'evaluated', 'withdrawn')),
    consent_version TEXT,
    consented_at TEXT,
    declined_at TEXT,
    started_at TEXT,
    started_epoch REAL,
    wall_limit_s REAL,
    submitted_at TEXT,
    ended_by TEXT CHECK (ended_by IN ('participant', 'deadline')),
    time_on_task_s REAL CHECK (time_on_task_s >= 0),
    completion_json TEXT,
    evaluated_at TEXT,
    evaluation_note TEXT,
    PRIMARY KEY (wave, participant_id)
);
CREATE TABLE IF NOT EXISTS human_uploads (
    upload_id INTEGER PRIMARY KEY,
    wave TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    at TEXT NOT NULL,
    requested TEXT NOT NULL,
    saved_as TEXT,
    size INTEGER NOT NULL,
    sha256 TEXT,
    admitted INTEGER NOT NULL CHECK (admitted IN (0, 1)),
    reason TEXT
);
CREATE TABLE IF NOT EXISTS human_assistant (
    exchange_id INTEGER PRIMARY KEY,
    wave TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    at TEXT NOT NULL,
    prompt TEXT NOT NULL,
    reply TEXT,
    status TEXT NOT NULL CHECK (status IN ('answered', 'refused', 'failed')),
    message_id TEXT,
    input_tokens INTEGER,
    cache_creation_input_tokens INTEGER,
    cache_read_input_tokens INTEGER,
    output_tokens INTEGER,
    cost_usd TEXT,
    error TEXT
);
CREATE TABLE IF NOT EXISTS human_pageviews (
    wave TEXT NOT NULL,
    view_id TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    served_epoch REAL NOT NULL,
    active_s REAL NOT NULL DEFAULT 0 CHECK (active_s >= 0),
    PRIMARY KEY (wave, view_id)
);
CREATE TABLE IF NOT EXISTS human_interventions (
    intervention_id INTEGER PRIMARY KEY,
    wave TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    at TEXT NOT NULL,
    minutes REAL NOT NULL CHECK (minutes >= 0),
    reason TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS human_events (
    event_id INTEGER PRIMARY KEY,
    wave TEXT NOT NULL,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    participant_id TEXT,
    detail_json TEXT
);
CREATE TABLE IF NOT EXISTS human_withdrawals (
    wave TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    at TEXT NOT NULL,
    via TEXT NOT NULL CHECK (via IN ('site', 'command')),
    action TEXT NOT NULL CHECK (action IN ('deleted', 'excluded')),
    stage TEXT NOT NULL,
    charged_usd REAL NOT NULL DEFAULT 0,
    reason TEXT,
    PRIMARY KEY (wave, participant_id)
);
CREATE TABLE IF NOT EXISTS human_deletions (
    deletion_id INTEGER PRIMARY KEY,
    wave TEXT NOT NULL,
    at TEXT NOT NULL,
    participant_id TEXT,
    what TEXT NOT NULL,
    detail_json TEXT
);
CREATE INDEX IF NOT EXISTS human_events_by_participant ON human_events (wave, participant_id);
CREATE INDEX IF NOT EXISTS human_assistant_by_participant ON human_assistant (wave, participant_id);
CREATE INDEX IF NOT EXISTS human_uploads_by_participant ON human_uploads (wave, participant_id);
"""

#: The tables holding a participant's own data (deleted when they withdraw before analysis starts).
PARTICIPANT_TABLES = ("human_uploads", "human_assistant", "human_pageviews", "human_interventions", "human_events")
#: Session states in which a participant may still work on the task.
OPEN_STATES = ("started",)
WAVE_SOURCES = ("participants", "simulated")


class HumanWaveError(StoreError):
    """A human wave cannot be created, read or changed; the message says which and why."""


@dataclass(frozen=True)
class Wave:
    """One human wave as the store keeps it."""

    wave: str
    created_at: str
    seed: int
    per_condition: int
    source: str
    backend: str
    participants_file: str
    consent_version: str
    consent_sha256: str
    ethics_approval: str | None
    scenarios: list[str]
    assistant: dict[str, Any]
    simulation: dict[str, Any] | None
    analysis_started_at: str | None

    @property
    def simulated(self) -> bool:
        return self.source == "simulated"


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the human wave's tables in a study store that lacks them (idempotent)."""
    conn.executescript(SCHEMA)


def connect(study_folder: Path) -> Store:
    """The study's store with the human tables present, for a caller that keeps it open (the participant site)."""
    path = Path(study_folder) / STORE_FILE
    if not path.is_file():
        raise HumanWaveError(f"no study store at {path} (create the study first: pilot study create NAME)")
    st = Store.open(Path(study_folder))
    try:
        ensure_schema(st.conn)
    except BaseException:
        st.close()
        raise
    return st


@contextmanager
def open_store(study_folder: Path) -> Iterator[Store]:
    """The study's store with the human tables present, closed on exit."""
    st = connect(study_folder)
    try:
        yield st
    finally:
        st.close()


def waves(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT wave FROM human_waves ORDER BY created_at, wave")]


def wave(conn: sqlite3.Connection, name: str) -> Wave:
    row = conn.execute("SELECT * FROM human_waves WHERE wave = ?", (name,)).fetchone()
    if row is None:
        raise HumanWaveError(
            f"no human wave {name!r} in this study (waves: {', '.join(waves(conn)) or 'none'}; "
            "create one with pilot human create STUDY WAVE --participants FILE)"
        )
    return Wave(
        row["wave"],
        row["created_at"],
        int(row["seed"]),
        int(row["per_condition"]),
        row["source"],
        row["backend"],
        row["participants_file"],
        row["consent_version"],
        row["consent_sha256"],
        row["ethics_approval"],
        json.loads(row["scenarios_json"]),
        json.loads(row["assistant_json"]),
        json.loads(row["simulation_json"]) if row["simulation_json"] else None,
        row["analysis_started_at"],
    )


def sources(conn: sqlite3.Connection) -> set[str]:
    """The kinds of waves the study holds: ``participants`` (people) or ``simulated`` (both never: refused)."""
    return {r[0] for r in conn.execute("SELECT DISTINCT source FROM human_waves")}


def study_sources(study_folder: Path) -> set[str]:
    """:func:`sources` of a study's store, read only (empty when the study has no store or no human wave)."""
    db = Path(study_folder) / "study.sqlite"
    if not db.is_file():
        return set()
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'human_waves'").fetchone() is None:
            return set()
        return {r[0] for r in conn.execute("SELECT DISTINCT source FROM human_waves")}
    finally:
        conn.close()


def log_event(
    conn: sqlite3.Connection,
    wave_name: str,
    kind: str,
    *,
    participant_id: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    conn.execute(
        "INSERT INTO human_events (wave, at, kind, participant_id, detail_json) VALUES (?, ?, ?, ?, ?)",
        (wave_name, now(), kind, participant_id, json.dumps(dict(detail), default=str) if detail else None),
    )


def log_deletion(
    conn: sqlite3.Connection,
    wave_name: str,
    what: str,
    *,
    participant_id: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """One line of the deletion log (``human_deletions``): what was deleted, for whom, when."""
    conn.execute(
        "INSERT INTO human_deletions (wave, at, participant_id, what, detail_json) VALUES (?, ?, ?, ?, ?)",
        (wave_name, now(), participant_id, what, json.dumps(dict(detail), default=str) if detail else None),
    )


def participant(conn: sqlite3.Connection, wave_name: str, participant_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM human_participants WHERE wave = ? AND participant_id = ?", (wave_name, participant_id)
    ).fetchone()
    return row


def own_session(conn: sqlite3.Connection, wave_name: str, participant_id: str, session_id: str) -> sqlite3.Row | None:
    """The signed-in participant's session when ``session_id`` is theirs; None for anyone else's (the site's 404)."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM human_participants WHERE wave = ? AND participant_id = ? AND session_id = ?",
        (wave_name, participant_id, session_id),
    ).fetchone()
    return row


def participant_by_token_hash(conn: sqlite3.Connection, wave_name: str, digest: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM human_participants WHERE wave = ? AND token_hash = ?", (wave_name, digest)
    ).fetchone()
    return row


def experimenter_hash(conn: sqlite3.Connection, wave_name: str) -> str:
    row = conn.execute("SELECT experimenter_token_hash FROM human_waves WHERE wave = ?", (wave_name,)).fetchone()
    return str(row[0]) if row else ""


def participants(conn: sqlite3.Connection, wave_name: str) -> list[sqlite3.Row]:
    return conn.execute("SELECT * FROM human_participants WHERE wave = ? ORDER BY position", (wave_name,)).fetchall()


def set_status(conn: sqlite3.Connection, wave_name: str, participant_id: str, status: str, **fields: Any) -> None:
    """Move a participant's session to ``status`` and set the named columns (one statement)."""
    allowed = {
        "consent_version",
        "consented_at",
        "declined_at",
        "started_at",
        "started_epoch",
        "wall_limit_s",
        "submitted_at",
        "ended_by",
        "time_on_task_s",
        "evaluated_at",
        "evaluation_note",
    }
    unknown = set(fields) - allowed
    if unknown:
        raise HumanWaveError(f"unknown session field(s): {', '.join(sorted(unknown))}")
    sets = ", ".join(["status = ?"] + [f"{k} = ?" for k in fields])
    conn.execute(
        f"UPDATE human_participants SET {sets} WHERE wave = ? AND participant_id = ?",
        (status, *fields.values(), wave_name, participant_id),
    )


def completion_draft(row: Mapping[str, Any]) -> dict[str, Any]:
    """What the participant has put in the completion record's form so far (empty when nothing)."""
    raw = row["completion_json"]
    return dict(json.loads(raw)) if raw else {}


def save_completion_draft(
    conn: sqlite3.Connection, wave_name: str, participant_id: str, draft: Mapping[str, Any]
) -> None:
    conn.execute(
        "UPDATE human_participants SET completion_json = ? WHERE wave = ? AND participant_id = ?",
        (json.dumps(dict(draft)), wave_name, participant_id),
    )


def uploads(conn: sqlite3.Connection, wave_name: str, participant_id: str) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM human_uploads WHERE wave = ? AND participant_id = ? ORDER BY upload_id",
        (wave_name, participant_id),
    ).fetchall()


def exchanges(conn: sqlite3.Connection, wave_name: str, participant_id: str) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM human_assistant WHERE wave = ? AND participant_id = ? ORDER BY exchange_id",
        (wave_name, participant_id),
    ).fetchall()


def active_seconds(conn: sqlite3.Connection, wave_name: str, participant_id: str) -> float:
    row = conn.execute(
        "SELECT COALESCE(SUM(active_s), 0) FROM human_pageviews WHERE wave = ? AND participant_id = ?",
        (wave_name, participant_id),
    ).fetchone()
    return float(row[0])


def intervention_minutes(conn: sqlite3.Connection, wave_name: str, participant_id: str) -> float | None:
    """The experimenter's minutes for a session in all; None when none was recorded."""
    row = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(minutes), 0) FROM human_interventions WHERE wave = ? AND participant_id = ?",
        (wave_name, participant_id),
    ).fetchone()
    return float(row[1]) if row[0] else None


def withdrawals(conn: sqlite3.Connection, wave_name: str | None = None) -> list[sqlite3.Row]:
    sql = "SELECT * FROM human_withdrawals" + (" WHERE wave = ?" if wave_name else "") + " ORDER BY at"
    return conn.execute(sql, (wave_name,) if wave_name else ()).fetchall()


def deletions(conn: sqlite3.Connection, wave_name: str | None = None) -> list[sqlite3.Row]:
    sql = "SELECT * FROM human_deletions" + (" WHERE wave = ?" if wave_name else "") + " ORDER BY deletion_id"
    return conn.execute(sql, (wave_name,) if wave_name else ()).fetchall()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction on the store's connection (``BEGIN IMMEDIATE``), rolled back on any failure."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
