"""The grading wave's tables in the study's SQLite store.

The tables sit beside the study's own (created when a store is first used
for grading, ``CREATE TABLE IF NOT EXISTS``); no statement here reads from or
writes to ``judge_scores``, ``runs`` or ``evaluations`` except the one read
of the finished runs a wave draws from. Tokens are kept only as hashes
(:mod:`pilot.grading.tokens`). A grade is saved as a draft any number of
times and submitted once; a submitted grade is never changed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pilot.store import STORE_FILE, Store, StoreError, now

SCHEMA = """
CREATE TABLE IF NOT EXISTS grading_waves (
    wave TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    seed INTEGER NOT NULL,
    per_package INTEGER NOT NULL CHECK (per_package >= 2),
    sample_json TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('experts', 'simulated')),
    graders_file TEXT NOT NULL,
    coordinator_token_hash TEXT NOT NULL,
    simulation_json TEXT  -- the simulated graders' model (source 'simulated'), else NULL
);
CREATE TABLE IF NOT EXISTS graders (
    wave TEXT NOT NULL REFERENCES grading_waves (wave),
    grader_id TEXT NOT NULL,
    name TEXT NOT NULL,
    contact TEXT NOT NULL,
    occupations_json TEXT NOT NULL,
    line INTEGER NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    PRIMARY KEY (wave, grader_id)
);
CREATE TABLE IF NOT EXISTS grading_packages (
    wave TEXT NOT NULL REFERENCES grading_waves (wave),
    package_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    scenario TEXT NOT NULL,
    arm TEXT NOT NULL,
    model TEXT NOT NULL,
    occupation TEXT NOT NULL,
    PRIMARY KEY (wave, package_id),
    UNIQUE (wave, run_id)
);
CREATE TABLE IF NOT EXISTS grading_assignments (
    wave TEXT NOT NULL,
    assignment_id TEXT NOT NULL,
    package_id TEXT NOT NULL,
    grader_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'saved', 'submitted')),
    accept INTEGER CHECK (accept IN (0, 1)),
    saved_at TEXT,
    submitted_at TEXT,
    active_s REAL NOT NULL DEFAULT 0 CHECK (active_s >= 0),
    PRIMARY KEY (wave, assignment_id),
    UNIQUE (wave, package_id, grader_id),
    UNIQUE (wave, package_id, slot),
    UNIQUE (wave, grader_id, position),
    FOREIGN KEY (wave, package_id) REFERENCES grading_packages (wave, package_id),
    FOREIGN KEY (wave, grader_id) REFERENCES graders (wave, grader_id)
);
CREATE TABLE IF NOT EXISTS grading_scores (
    wave TEXT NOT NULL,
    assignment_id TEXT NOT NULL,
    criterion TEXT NOT NULL,
    score INTEGER CHECK (score BETWEEN 0 AND 4),
    critique TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (wave, assignment_id, criterion),
    FOREIGN KEY (wave, assignment_id) REFERENCES grading_assignments (wave, assignment_id)
);
CREATE TABLE IF NOT EXISTS grading_events (
    event_id INTEGER PRIMARY KEY,
    wave TEXT NOT NULL,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    grader_id TEXT,
    assignment_id TEXT,
    detail_json TEXT
);
CREATE INDEX IF NOT EXISTS grading_events_by_assignment ON grading_events (wave, assignment_id);
"""

#: Columns of the long grade table (one row per assignment and criterion): the export and the report's input.
GRADE_COLUMNS = (
    "wave",
    "source",
    "package_id",
    "run_id",
    "scenario",
    "arm",
    "model",
    "grader_id",
    "slot",
    "status",
    "criterion",
    "score",
    "critique",
    "accept",
    "active_s",
)


class GradingError(StoreError):
    """A grading wave cannot be created, read or written; the message says which and why."""


@dataclass(frozen=True)
class Wave:
    wave: str
    created_at: str
    seed: int
    per_package: int
    sample: dict[str, Any]
    source: str
    graders_file: str
    simulation: dict[str, Any] | None

    @property
    def simulated(self) -> bool:
        return self.source == "simulated"


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the grading tables in a study store that lacks them (idempotent)."""
    conn.executescript(SCHEMA)


def connect(study_folder: Path) -> Store:
    """The study's store with the grading tables present, for a caller that keeps it open and closes it (the grading
    site)."""
    path = Path(study_folder) / STORE_FILE
    if not path.is_file():
        raise GradingError(f"no study store at {path} (create and run the study first: pilot study create NAME)")
    st = Store.open(Path(study_folder))
    try:
        ensure_schema(st.conn)
    except BaseException:
        st.close()
        raise
    return st


@contextmanager
def open_store(study_folder: Path) -> Iterator[Store]:
    """The study's store with the grading tables present, closed on exit."""
    st = connect(study_folder)
    try:
        yield st
    finally:
        st.close()


def waves(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT wave FROM grading_waves ORDER BY created_at, wave")]


def wave(conn: sqlite3.Connection, name: str) -> Wave:
    row = conn.execute("SELECT * FROM grading_waves WHERE wave = ?", (name,)).fetchone()
    if row is None:
        have = waves(conn)
        raise GradingError(
            f"no grading wave {name!r} in this study (waves: {', '.join(have) or 'none'}; "
            "create one with pilot grading create STUDY WAVE --graders FILE)"
        )
    return Wave(
        row["wave"],
        row["created_at"],
        int(row["seed"]),
        int(row["per_package"]),
        json.loads(row["sample_json"]),
        row["source"],
        row["graders_file"],
        json.loads(row["simulation_json"]) if row["simulation_json"] else None,
    )


def log_event(
    conn: sqlite3.Connection,
    wave_name: str,
    kind: str,
    *,
    grader_id: str | None = None,
    assignment_id: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    conn.execute(
        "INSERT INTO grading_events (wave, at, kind, grader_id, assignment_id, detail_json) VALUES (?, ?, ?, ?, ?, ?)",
        (wave_name, now(), kind, grader_id, assignment_id, json.dumps(dict(detail)) if detail else None),
    )


def grader_by_token_hash(conn: sqlite3.Connection, wave_name: str, digest: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM graders WHERE wave = ? AND token_hash = ?", (wave_name, digest)).fetchone()


def coordinator_hash(conn: sqlite3.Connection, wave_name: str) -> str:
    return conn.execute("SELECT coordinator_token_hash FROM grading_waves WHERE wave = ?", (wave_name,)).fetchone()[0]


def queue(conn: sqlite3.Connection, wave_name: str, grader_id: str) -> list[sqlite3.Row]:
    """A grader's assignments in their own randomised order (no arm, model or run id among the columns)."""
    return conn.execute(
        "SELECT a.assignment_id, a.position, a.status, a.saved_at, a.submitted_at, p.scenario "
        "FROM grading_assignments a JOIN grading_packages p USING (wave, package_id) "
        "WHERE a.wave = ? AND a.grader_id = ? ORDER BY a.position",
        (wave_name, grader_id),
    ).fetchall()


def package_ids(conn: sqlite3.Connection, wave_name: str) -> dict[str, str]:
    """run id -> its grading package's id, for every package of the wave (the coordinator's view)."""
    sql = "SELECT run_id, package_id FROM grading_packages WHERE wave = ?"
    return {r["run_id"]: r["package_id"] for r in conn.execute(sql, (wave_name,))}


def assignment_ids(conn: sqlite3.Connection, wave_name: str) -> dict[tuple[str, str], str]:
    """(package id, grader id) -> the assignment's id, for every assignment of the wave (the coordinator's view)."""
    sql = "SELECT package_id, grader_id, assignment_id FROM grading_assignments WHERE wave = ?"
    return {(r["package_id"], r["grader_id"]): r["assignment_id"] for r in conn.execute(sql, (wave_name,))}


def assignment(conn: sqlite3.Connection, wave_name: str, grader_id: str, assignment_id: str) -> sqlite3.Row | None:
    """One of ``grader_id``'s own assignments (None for anyone else's, so the site answers 404)."""
    return conn.execute(
        "SELECT a.*, p.run_id, p.scenario FROM grading_assignments a JOIN grading_packages p USING (wave, package_id) "
        "WHERE a.wave = ? AND a.grader_id = ? AND a.assignment_id = ?",
        (wave_name, grader_id, assignment_id),
    ).fetchone()


def scores(conn: sqlite3.Connection, wave_name: str, assignment_id: str) -> dict[str, tuple[int | None, str]]:
    return {
        r["criterion"]: (r["score"], r["critique"])
        for r in conn.execute(
            "SELECT criterion, score, critique FROM grading_scores WHERE wave = ? AND assignment_id = ?",
            (wave_name, assignment_id),
        )
    }


def save_grade(
    conn: sqlite3.Connection,
    wave_name: str,
    grader_id: str,
    assignment_id: str,
    *,
    scores_by_criterion: Mapping[str, tuple[int | None, str]],
    accept: bool | None,
    active_s: float,
    submit: bool,
) -> str:
    """Save (or submit) a grade in one transaction; returns the new status.

    Refused when the assignment is not the grader's, or already submitted, or
    (on submit) when a score or the acceptance is missing. ``active_s`` is
    added to the time already recorded.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = assignment(conn, wave_name, grader_id, assignment_id)
        if row is None:
            raise GradingError(f"assignment {assignment_id} is not one of {grader_id}'s")
        if row["status"] == "submitted":
            raise GradingError("this package was already submitted; a submitted grade is final")
        if submit:
            missing = [c for c, (s, _) in scores_by_criterion.items() if s is None]
            if missing or accept is None:
                parts = ([f"a score for {', '.join(missing)}"] if missing else []) + (
                    ["the acceptance decision"] if accept is None else []
                )
                raise GradingError(f"cannot submit without {' and '.join(parts)}")
        for criterion, (score, critique) in scores_by_criterion.items():
            if score is not None and not (isinstance(score, int) and 0 <= score <= 4):
                raise GradingError(f"criterion {criterion}: score {score!r} is not an integer from 0 to 4")
            conn.execute(
                (
                    "INSERT INTO grading_scores (wave, assignment_id, criterion, score, critique) VALUES (?, "
                    "?, ?, ?, ?) ON CONFLICT (wave, assignment_id, criterion) DO UPDATE SET score = "
                    "excluded.score, critique = excluded.critique"
                ),
                (wave_name, assignment_id, criterion, score, critique or ""),
            )
        status = "submitted" if submit else "saved"
        stamp = now()
        conn.execute(
            (
                "UPDATE grading_assignments SET status = ?, accept = ?, saved_at = ?, submitted_at = ?, "
                "active_s = active_s + ? WHERE wave = ? AND assignment_id = ?"
            ),
            (
                status,
                None if accept is None else int(bool(accept)),
                stamp,
                stamp if submit else None,
                max(0.0, float(active_s)),
                wave_name,
                assignment_id,
            ),
        )
        log_event(conn, wave_name, "submit" if submit else "save", grader_id=grader_id, assignment_id=assignment_id)
        conn.execute("COMMIT")
        return status
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def grades_frame(conn: sqlite3.Connection, wave_name: str, *, submitted_only: bool = True) -> pd.DataFrame:
    """The wave's grades, one row per assignment and criterion (columns :data:`GRADE_COLUMNS`).

    Only submitted grades by default: a draft is not a grade. An assignment
    with no grade yet has one row with ``criterion`` empty, so the coverage
    is counted from the same table.
    """
    w = wave(conn, wave_name)
    rows = conn.execute(
        "SELECT a.assignment_id, p.package_id, p.run_id, p.scenario, p.arm, p.model, a.grader_id, a.slot, a.status, "
        "a.accept, a.active_s, s.criterion, s.score, s.critique "
        "FROM grading_assignments a JOIN grading_packages p USING (wave, package_id) "
        "LEFT JOIN grading_scores s ON s.wave = a.wave AND s.assignment_id = a.assignment_id "
        "WHERE a.wave = ? ORDER BY p.package_id, a.slot, s.criterion",
        (wave_name,),
    ).fetchall()
    out = []
    for r in rows:
        graded = r["status"] == "submitted" or not submitted_only
        out.append(
            {
                "wave": wave_name,
                "source": w.source,
                "package_id": r["package_id"],
                "run_id": r["run_id"],
                "scenario": r["scenario"],
                "arm": r["arm"],
                "model": r["model"],
                "grader_id": r["grader_id"],
                "slot": int(r["slot"]),
                "status": r["status"],
                "criterion": (r["criterion"] or "") if graded else "",
                "score": r["score"] if graded else None,
                "critique": (r["critique"] or "") if graded else "",
                "accept": r["accept"] if graded else None,
                "active_s": float(r["active_s"]),
            }
        )
    frame = pd.DataFrame(out, columns=list(GRADE_COLUMNS))
    if not submitted_only:
        return frame
    # one placeholder row per ungraded assignment
    return frame.drop_duplicates(subset=["package_id", "grader_id", "criterion"]).reset_index(drop=True)


def progress(conn: sqlite3.Connection, wave_name: str) -> dict[str, pd.DataFrame]:
    """Counts of open, saved and submitted assignments per grader and per stratum (scenario x arm)."""
    frame = pd.read_sql_query(
        (
            "SELECT a.grader_id, g.name, p.scenario, p.arm, a.status, a.active_s FROM grading_assignments a "
            "JOIN grading_packages p USING (wave, package_id) JOIN graders g ON g.wave = a.wave AND "
            "g.grader_id = a.grader_id WHERE a.wave = ?"
        ),
        conn,
        params=(wave_name,),
    )

    def counts(keys: list[str]) -> pd.DataFrame:
        table = frame.pivot_table(index=keys, columns="status", values="active_s", aggfunc="count", fill_value=0)
        for s in ("open", "saved", "submitted"):
            if s not in table:
                table[s] = 0
        table = table[["open", "saved", "submitted"]].astype(int)
        table["assigned"] = table.sum(axis=1)
        return table.reset_index()

    return {"grader": counts(["grader_id", "name"]), "stratum": counts(["scenario", "arm"])}


#: Columns of the panel table (one row per package, judge and criterion).
PANEL_COLUMNS = (
    "package_id",
    "run_id",
    "scenario",
    "arm",
    "model",
    "D",
    "E",
    "judge_id",
    "criterion",
    "score",
    "judge_q",
    "judge_accept",
)


def panel_frame(conn: sqlite3.Connection, wave_name: str) -> pd.DataFrame:
    """What the LLM panel gave each package of the wave, read from the runs' records (never written here).

    A judge that failed (an error, no score) has no rows: its grade is
    missing, as the run table treats it. ``D`` and ``E`` are the run's
    verdicts, for acceptance on expert grades.
    """
    out = []
    for r in conn.execute(
        "SELECT p.package_id, p.run_id, p.scenario, p.arm, p.model, r.record_json FROM grading_packages p "
        "JOIN runs r ON r.run_id = p.run_id WHERE p.wave = ? ORDER BY p.package_id",
        (wave_name,),
    ):
        rec = json.loads(r["record_json"])
        base = {k: r[k] for k in ("package_id", "run_id", "scenario", "arm", "model")}
        base["D"], base["E"] = rec.get("D"), rec.get("E")
        for j in rec.get("judges") or []:
            if j.get("error") or j.get("score_0_100") is None:
                continue
            for criterion, score in sorted((j.get("criterion_scores") or {}).items()):
                out.append(
                    {
                        **base,
                        "judge_id": j.get("judge_id"),
                        "criterion": criterion,
                        "score": int(score),
                        "judge_q": float(j["score_0_100"]),
                        "judge_accept": None if j.get("accept") is None else bool(j["accept"]),
                    }
                )
    return pd.DataFrame(out, columns=list(PANEL_COLUMNS))


def delete_simulated_wave(conn: sqlite3.Connection, wave_name: str) -> bool:
    """Remove a SIMULATED wave and all its rows (to draw it again); False when there is none.

    A wave of experts' grades is never removed: people's work is not
    redrawn. Refused for it, naming the wave.
    """
    row = conn.execute("SELECT source FROM grading_waves WHERE wave = ?", (wave_name,)).fetchone()
    if row is None:
        return False
    if row[0] != "simulated":
        raise GradingError(
            f"grading wave {wave_name!r} holds experts' grades; it is never replaced (choose another wave name)"
        )
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table in (
            "grading_events",
            "grading_scores",
            "grading_assignments",
            "grading_packages",
            "graders",
            "grading_waves",
        ):
            conn.execute(f"DELETE FROM {table} WHERE wave = ?", (wave_name,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True


#: A cell starting with one of these runs as a formula when a spreadsheet opens the CSV (OWASP, "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def export_csv(frame: pd.DataFrame) -> str:
    """The grades as the coordinator's CSV: a critique that a spreadsheet would run as a formula gets a leading ``'``.

    A critique starting with ``'`` gets one too, so :func:`unescape_critique`
    gives back exactly what the grader typed.
    """
    out = frame.copy()
    out["critique"] = [("'" + c) if isinstance(c, str) and c.startswith(_FORMULA_START) else c for c in out["critique"]]
    return out.to_csv(index=False)


def unescape_critique(text: str) -> str:
    """A critique as the grader typed it, from the export (:func:`export_csv`)."""
    return text[1:] if text.startswith("'") else text
