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
-- Each save of a draft, numbered per assignment: a page saves on the revision it was given, so two tabs on one
-- package cannot overwrite each other unseen. ``tab`` is the page's own random id.
CREATE TABLE IF NOT EXISTS grading_revisions (
    wave TEXT NOT NULL,
    assignment_id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    tab TEXT NOT NULL,
    saved_at TEXT NOT NULL,
    PRIMARY KEY (wave, assignment_id),
    FOREIGN KEY (wave, assignment_id) REFERENCES grading_assignments (wave, assignment_id)
);
-- Time a grader spent with a downloaded file of a package open, as they stated it on returning to the page
-- (recorded apart from the page's own active seconds, grading_assignments.active_s).
CREATE TABLE IF NOT EXISTS grading_file_time (
    entry_id INTEGER PRIMARY KEY,
    wave TEXT NOT NULL,
    assignment_id TEXT NOT NULL,
    file TEXT NOT NULL,
    seconds REAL NOT NULL CHECK (seconds >= 0),
    at TEXT NOT NULL,
    FOREIGN KEY (wave, assignment_id) REFERENCES grading_assignments (wave, assignment_id)
);
"""

#: The subject of the coordinator's sessions (a grader's is their grader id).
COORDINATOR = "coordinator"
#: A submitted grade needs a critique of at least this many characters for every criterion (the procedure,
#: protocol/human/evaluation.md); a draft may have any.
MIN_CRITIQUE_CHARS = 20
#: The most time with a downloaded file one statement may add: a working day.
MAX_FILE_S = 12 * 3600.0

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


class StaleDraft(GradingError):
    """A save based on an earlier revision of the draft than the stored one (another tab or window saved since)."""

    def __init__(self, revision: int, saved_at: str) -> None:
        super().__init__(
            f"this package was saved from another tab or window at {saved_at}; "
            "reload the page to continue from that version (what you typed here is not saved)"
        )
        self.revision, self.saved_at = revision, saved_at


def short_critiques(critiques: Mapping[str, str]) -> list[str]:
    """The criteria whose critique is shorter than :data:`MIN_CRITIQUE_CHARS` (blank characters not counted)."""
    return [c for c, text in critiques.items() if len(" ".join((text or "").split())) < MIN_CRITIQUE_CHARS]


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


def packages(conn: sqlite3.Connection, wave_name: str) -> list[dict[str, Any]]:
    """The wave's packages for the coordinator: id, scenario, arm, and each assignment's grader and status."""
    out: dict[str, dict[str, Any]] = {}
    for r in conn.execute(
        "SELECT p.package_id, p.scenario, p.arm, a.grader_id, a.status FROM grading_packages p "
        "JOIN grading_assignments a USING (wave, package_id) WHERE p.wave = ? ORDER BY p.package_id, a.slot",
        (wave_name,),
    ):
        pkg = out.setdefault(
            r["package_id"], {"package_id": r["package_id"], "scenario": r["scenario"], "arm": r["arm"], "graders": []}
        )
        pkg["graders"].append((r["grader_id"], r["status"]))
    return list(out.values())


def set_link(conn: sqlite3.Connection, wave_name: str, who: str, token_hash: str, *, kind: str) -> None:
    """Store a new sign-in hash for ``who`` (a grader id, or :data:`COORDINATOR`): the old link stops working.

    ``kind`` (``reissue`` or ``revoke``) is logged; a revoked link's hash is that of a token nobody holds.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        if who == COORDINATOR:
            wave(conn, wave_name)
            conn.execute("UPDATE grading_waves SET coordinator_token_hash = ? WHERE wave = ?", (token_hash, wave_name))
        else:
            done = conn.execute(
                "UPDATE graders SET token_hash = ? WHERE wave = ? AND grader_id = ?", (token_hash, wave_name, who)
            ).rowcount
            if not done:
                have = [r[0] for r in conn.execute("SELECT grader_id FROM graders WHERE wave = ?", (wave_name,))]
                raise GradingError(
                    f"no grader {who!r} in wave {wave_name!r} (graders: {', '.join(have) or 'none'}; or {COORDINATOR})"
                )
        log_event(conn, wave_name, f"link_{kind}", grader_id=None if who == COORDINATOR else who, detail={"who": who})
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


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


def revision(conn: sqlite3.Connection, wave_name: str, assignment_id: str) -> tuple[int, str | None, str | None]:
    """(revision, tab, saved_at) of an assignment's draft: (0, None, None) before its first save."""
    row = conn.execute(
        "SELECT revision, tab, saved_at FROM grading_revisions WHERE wave = ? AND assignment_id = ?",
        (wave_name, assignment_id),
    ).fetchone()
    return (0, None, None) if row is None else (int(row[0]), row[1], row[2])


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
    base_revision: int | None = None,
    tab: str = "",
) -> tuple[str, int]:
    """Save (or submit) a grade in one transaction; returns the new status and the draft's revision.

    Refused when the assignment is not the grader's, or already submitted, or
    (on submit) when a score, the acceptance or a critique of
    :data:`MIN_CRITIQUE_CHARS` is missing. With ``base_revision`` (the
    revision the page was given), refused with :class:`StaleDraft` when another
    tab (``tab`` differs) saved since. ``active_s`` is added to the time
    already recorded.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = assignment(conn, wave_name, grader_id, assignment_id)
        if row is None:
            raise GradingError(f"assignment {assignment_id} is not one of {grader_id}'s")
        if row["status"] == "submitted":
            raise GradingError("this package was already submitted; a submitted grade is final")
        current, last_tab, last_saved = revision(conn, wave_name, assignment_id)
        if base_revision is not None and base_revision != current and not (tab and tab == last_tab):
            raise StaleDraft(current, last_saved or "")
        if submit:
            missing = [c for c, (s, _) in scores_by_criterion.items() if s is None]
            short = short_critiques({c: t for c, (_, t) in scores_by_criterion.items()})
            if missing or accept is None or short:
                parts = ([f"a score for {', '.join(missing)}"] if missing else []) + (
                    ["the acceptance decision"] if accept is None else []
                )
                if short:
                    parts.append(f"a critique of at least {MIN_CRITIQUE_CHARS} characters for {', '.join(short)}")
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
        conn.execute(
            "INSERT INTO grading_revisions (wave, assignment_id, revision, tab, saved_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (wave, assignment_id) DO UPDATE SET revision = excluded.revision, tab = excluded.tab, "
            "saved_at = excluded.saved_at",
            (wave_name, assignment_id, current + 1, tab, stamp),
        )
        log_event(conn, wave_name, "submit" if submit else "save", grader_id=grader_id, assignment_id=assignment_id)
        conn.execute("COMMIT")
        return status, current + 1
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def add_file_time(
    conn: sqlite3.Connection, wave_name: str, grader_id: str, assignment_id: str, file: str, seconds: float
) -> float:
    """Record time the grader says they spent with a downloaded file of the package; returns the seconds kept."""
    if assignment(conn, wave_name, grader_id, assignment_id) is None:
        raise GradingError(f"assignment {assignment_id} is not one of {grader_id}'s")
    kept = min(max(0.0, float(seconds)), MAX_FILE_S)
    conn.execute(
        "INSERT INTO grading_file_time (wave, assignment_id, file, seconds, at) VALUES (?, ?, ?, ?, ?)",
        (wave_name, assignment_id, file, kept, now()),
    )
    log_event(
        conn, wave_name, "file_time", grader_id=grader_id, assignment_id=assignment_id, detail={"file": file, "s": kept}
    )
    return kept


def grades_frame(conn: sqlite3.Connection, wave_name: str, *, submitted_only: bool = True) -> pd.DataFrame:
    """The wave's grades, one row per assignment and criterion (columns :data:`GRADE_COLUMNS`, then ``file_s``).

    ``active_s`` is the time on the package's page, ``file_s`` the time the
    grader said they spent with its downloaded files: two measures, never
    added together here.

    Only submitted grades by default: a draft is not a grade. An assignment
    with no grade yet has one row with ``criterion`` empty, so the coverage
    is counted from the same table.
    """
    w = wave(conn, wave_name)
    rows = conn.execute(
        "SELECT a.assignment_id, p.package_id, p.run_id, p.scenario, p.arm, p.model, a.grader_id, a.slot, a.status, "
        "a.accept, a.active_s, s.criterion, s.score, s.critique, "
        "(SELECT COALESCE(SUM(t.seconds), 0) FROM grading_file_time t "
        "WHERE t.wave = a.wave AND t.assignment_id = a.assignment_id) AS file_s "
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
                "file_s": float(r["file_s"]),
            }
        )
    frame = pd.DataFrame(out, columns=[*GRADE_COLUMNS, "file_s"])
    if not submitted_only:
        return frame
    # one placeholder row per ungraded assignment
    return frame.drop_duplicates(subset=["package_id", "grader_id", "criterion"]).reset_index(drop=True)


def progress(conn: sqlite3.Connection, wave_name: str) -> dict[str, pd.DataFrame]:
    """Counts of open, saved and submitted assignments per grader and per stratum (scenario x arm).

    Per grader also: the seconds on the package pages (``active_s``) and with
    downloaded files (``file_s``), the last thing they did on the site
    (``last_activity``, UTC) and ``short_critiques``, the saved or submitted
    assignments with a critique under :data:`MIN_CRITIQUE_CHARS` characters.
    """
    frame = pd.read_sql_query(
        (
            "SELECT a.assignment_id, a.grader_id, g.name, p.scenario, p.arm, a.status, a.active_s "
            "FROM grading_assignments a JOIN grading_packages p USING (wave, package_id) "
            "JOIN graders g ON g.wave = a.wave AND g.grader_id = a.grader_id WHERE a.wave = ?"
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

    graders = counts(["grader_id", "name"])
    file_s = dict(
        conn.execute(
            "SELECT a.grader_id, SUM(t.seconds) FROM grading_file_time t JOIN grading_assignments a "
            "ON a.wave = t.wave AND a.assignment_id = t.assignment_id WHERE t.wave = ? GROUP BY a.grader_id",
            (wave_name,),
        ).fetchall()
    )
    last = dict(
        conn.execute(
            "SELECT grader_id, MAX(at) FROM grading_events WHERE wave = ? AND grader_id IS NOT NULL GROUP BY grader_id",
            (wave_name,),
        ).fetchall()
    )
    critiques: dict[str, dict[str, str]] = {}
    for r in conn.execute(
        "SELECT s.assignment_id, s.criterion, s.critique FROM grading_scores s JOIN grading_assignments a "
        "ON a.wave = s.wave AND a.assignment_id = s.assignment_id WHERE s.wave = ? AND a.status != 'open'",
        (wave_name,),
    ):
        critiques.setdefault(r[0], {})[r[1]] = r[2]
    short = frame[frame["assignment_id"].map(lambda a: bool(short_critiques(critiques.get(a, {"": ""}))))]
    short = short[short["status"] != "open"].groupby("grader_id").size()
    graders["active_s"] = graders["grader_id"].map(frame.groupby("grader_id")["active_s"].sum()).fillna(0.0)
    graders["file_s"] = graders["grader_id"].map(lambda g: float(file_s.get(g) or 0.0))
    graders["last_activity"] = graders["grader_id"].map(lambda g: last.get(g) or "")
    graders["short_critiques"] = graders["grader_id"].map(short).fillna(0).astype(int)
    return {"grader": graders, "stratum": counts(["scenario", "arm"])}


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
