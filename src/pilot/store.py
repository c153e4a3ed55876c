"""The run store of one study: a SQLite file in WAL mode under ``analysis/data/<study>/``.

Tables: ``studies`` (seed, protocol version, nodes, freeze manifest),
``cells`` (one per assigned run with its wave, order index, per-run seed and
state), ``attempts`` (every attempt kept, with node, outcome, error and
charge), ``runs`` (the run record of the attempt that finished the run),
``evaluations``, ``judge_scores``, ``reevaluations`` (each record a
re-evaluation replaced, :meth:`Store.replace_evaluation`), and the ledger
(``pilot.ledger``). The human wave's sessions are cells of wave ``human``
(arms H0 and H1) whose attempts the participant site opens and closes
(:mod:`pilot.human`); its own tables (participants, sessions, the
assistant's exchanges) sit beside these, never inside them.

Every state change of a run is one ``BEGIN IMMEDIATE`` transaction that
moves the cell, the attempt and the ledger together, so a scheduler killed at
any instant leaves a store that is consistent as of its last commit: a
finished run is either fully recorded or still in flight, never half.
Durability: WAL with ``synchronous=NORMAL`` survives a killed process (the
case that matters here); only a power cut may lose the last commits.

A study is created whole or not at all: the store is built beside its final
name and linked into place once every cell is in it. SQLite's own failures
(a full or read-only disk, a truncated or corrupted file) become a
:class:`StoreError` whose one-line message names the file and what to do.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pilot import ledger, paths
from pilot.attempt import AttemptOutcome, CellSpec, read_outcome_file, was_launched
from pilot.backends import PARTICIPANT_BACKENDS

STORE_FILE = "study.sqlite"
#: The waves the scheduler runs (agent arms).
WAVES = ("pilot", "repeat3", "sensitivity")
#: The wave of the human sessions (H0, H1), which the participant site runs, never the scheduler.
HUMAN_WAVE = "human"

SCHEMA = """
CREATE TABLE IF NOT EXISTS studies (
    name TEXT PRIMARY KEY,
    seed INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    protocol_version TEXT NOT NULL,
    worker_model TEXT NOT NULL,
    scenarios_json TEXT NOT NULL,
    nodes_source TEXT,
    nodes_yaml TEXT,
    freeze_manifest_json TEXT,
    freeze_taken_at TEXT,
    arms_json TEXT,
    run_function TEXT,
    freeze_lock_json TEXT
);
CREATE TABLE IF NOT EXISTS cells (
    run_id TEXT PRIMARY KEY,
    wave TEXT NOT NULL CHECK (wave IN ('pilot', 'repeat3', 'sensitivity', 'human')),
    order_index INTEGER NOT NULL,
    scenario TEXT NOT NULL,
    arm TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    model TEXT NOT NULL,
    seed INTEGER NOT NULL,
    cap_usd REAL NOT NULL,
    wall_s REAL NOT NULL,
    reserve_micro INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'waiting' CHECK (status IN ('waiting', 'in_flight', 'done', 'failed')),
    node TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    infra_attempts INTEGER NOT NULL DEFAULT 0,
    UNIQUE (wave, order_index)
);
CREATE INDEX IF NOT EXISTS cells_by_state ON cells (wave, status, order_index);
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES cells (run_id),
    attempt_no INTEGER NOT NULL,
    node TEXT NOT NULL,
    backend TEXT NOT NULL,
    workspace TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    outcome TEXT NOT NULL CHECK (outcome IN ('running', 'completed', 'capped', 'agent_error', \
'infra_error', 'interrupted')),
    error TEXT,
    reserved_micro INTEGER NOT NULL,
    charged_micro INTEGER,
    cost_usd REAL,
    judge_cost_usd REAL,
    charge_basis TEXT CHECK (charge_basis IN ('reported', 'metered', 'reservation', 'released')),
    UNIQUE (run_id, attempt_no)
);
CREATE INDEX IF NOT EXISTS attempts_running ON attempts (outcome);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY REFERENCES cells (run_id),
    attempt_id INTEGER NOT NULL REFERENCES attempts (attempt_id),
    status TEXT NOT NULL,
    censored INTEGER,
    censor_reason TEXT,
    cost_usd REAL,  -- NULL when the client reported no cost (the ledger charged the reservation)
    judge_cost_usd REAL NOT NULL,
    wall_s REAL,
    finished_at TEXT NOT NULL,
    record_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS evaluations (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
    D INTEGER,
    E INTEGER,
    E_reasons_json TEXT,
    criteria_passed INTEGER,
    criteria_total INTEGER,
    criteria_json TEXT
);
CREATE TABLE IF NOT EXISTS judge_scores (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    judge_id TEXT NOT NULL,
    model TEXT,
    score_0_100 REAL,
    accept INTEGER,
    criterion_scores_json TEXT,
    cost_usd REAL,
    error TEXT,
    PRIMARY KEY (run_id, judge_id)
);
CREATE TABLE IF NOT EXISTS reevaluations (
    reevaluation_id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    at TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('verdict', 'eval_error')),
    previous_eval_error TEXT,
    eval_error TEXT,
    previous_record_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reevaluations_by_run ON reevaluations (run_id);
CREATE TABLE IF NOT EXISTS events (
    event_id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    run_id TEXT,
    detail_json TEXT
);
"""

# Columns added after the first stores were written: (table, column, declaration).
_MIGRATIONS = (
    ("studies", "arms_json", "TEXT"),
    ("studies", "run_function", "TEXT"),
    ("studies", "freeze_lock_json", "TEXT"),
    ("attempts", "charge_basis", "TEXT"),
)

# How each charge was reckoned (attempts.charge_basis):
CHARGE_REPORTED = "reported"  # the client's reported cost (simulated backend: no proxy)
CHARGE_METERED = "metered"  # the model proxy's metered agent cost plus the judges' reported cost
CHARGE_RESERVATION = "reservation"  # cost unknown: the whole reservation (worst case)
CHARGE_RELEASED = "released"  # the attempt never launched: nothing was spent
# Stores written before charge_basis existed: a kept cost means it was reported.
_REPORTED = "(a.charge_basis IN ('reported', 'metered') OR (a.charge_basis IS NULL AND a.cost_usd IS NOT NULL))"
_OLD_BASIS_CHECK = "CHECK (charge_basis IN ('reported', 'reservation', 'released'))"
_NEW_BASIS_CHECK = "CHECK (charge_basis IN ('reported', 'metered', 'reservation', 'released'))"
# Stores created before the human wave: the cells' wave CHECK widened to admit it (as the basis CHECK above).
_OLD_WAVE_CHECK = "CHECK (wave IN ('pilot', 'repeat3', 'sensitivity'))"
_NEW_WAVE_CHECK = "CHECK (wave IN ('pilot', 'repeat3', 'sensitivity', 'human'))"


class _EnvelopeRefused(Exception):
    pass


class StoreError(RuntimeError):
    """The store is missing, belongs to another study, or was asked something impossible."""


def _nearly_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20


def describe_fault(exc: BaseException, path: Path) -> str:
    """One line naming the file and what to do, for a SQLite or file-system failure."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    low = text.lower()
    code = getattr(exc, "errno", None)
    where = getattr(exc, "filename", None) or path
    folder = Path(where).parent
    if folder.is_dir() and not os.access(folder, os.W_OK) and code != errno.ENOSPC and "disk is full" not in low:
        # SQLite reports a read-only file system in several ways ("unable to open", "readonly", "I/O error").
        return (
            f"{where}: the file system is read-only or not writable ({text}); make it writable and run the "
            "command again"
        )
    if "disk is full" in low or code == errno.ENOSPC or ("i/o error" in low and _nearly_full(folder)):
        # SQLite reports a full disk as SQLITE_FULL, or as an I/O error when it cannot grow its shared-memory file.
        return (
            f"{where}: the disk is full ({text}); free space on that file system and run the command again "
            "(nothing already recorded was lost)"
        )
    if "readonly" in low or "read-only" in low or code == errno.EROFS:
        return f"{where}: the file or its file system is read-only ({text}); make it writable and run the command again"
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return (
            f"{where}: the study store is truncated or corrupted ({text}); restore it from a backup copy "
            "(the attempts' workspaces beside it are untouched); do not delete it"
        )
    if "locked" in low or "busy" in low:
        return (
            f"{where}: the store is locked by another process ({text}); wait for it to finish and run the command again"
        )
    if "unable to open" in low or code in (errno.ENOENT, errno.EACCES, errno.EPERM):
        return f"{where}: cannot open the study store ({text}); check that the folder exists and is writable"
    return f"{where}: {type(exc).__name__}: {text}"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def store_path(name: str) -> Path:
    return paths.study_dir(name) / STORE_FILE


@dataclass(frozen=True)
class StudyInfo:
    name: str
    seed: int
    created_at: str
    protocol_version: str
    worker_model: str
    scenarios: list[str]
    nodes_source: str | None
    nodes_yaml: str | None
    freeze_manifest: dict[str, str] | None
    freeze_taken_at: str | None
    arms: list[str] | None = None  # None: every arm of the design
    run_function: str | None = None  # None: the default run function
    #: The freeze's lock (pilot.freeze.FreezeLock as JSON): code digest, version, commit, verdicts. None: a study
    #: frozen before locks were kept.
    freeze_lock: dict[str, Any] | None = None


@dataclass(frozen=True)
class StartedAttempt:
    attempt_id: int
    attempt_no: int
    workspace: Path


def _bool(value: Any) -> int | None:
    return None if value is None else int(bool(value))


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def _insert_cells(c: sqlite3.Connection, cells: Iterable[CellSpec]) -> int:
    rows = [
        (
            x.run_id,
            x.wave,
            x.order_index,
            x.scenario,
            x.arm,
            x.repeat,
            x.model,
            x.seed,
            x.cap_usd,
            x.wall_s,
            ledger.to_micro(x.reserve_usd),
        )
        for x in cells
    ]
    c.executemany(
        (
            "INSERT INTO cells (run_id, wave, order_index, scenario, arm, repeat, model, seed, cap_usd, "
            "wall_s, reserve_micro) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        rows,
    )
    return len(rows)


def insert_cells(c: sqlite3.Connection, cells: Iterable[CellSpec]) -> int:
    """Insert cells inside the caller's write transaction (a human wave's plan is written whole with its own rows)."""
    return _insert_cells(c, cells)


def _insert_evaluation(c: sqlite3.Connection, run_id: str, rec: dict[str, Any]) -> None:
    c.execute(
        (
            "INSERT INTO evaluations (run_id, D, E, E_reasons_json, criteria_passed, criteria_total, "
            "criteria_json) VALUES (?, ?, ?, ?, ?, ?, ?)"
        ),
        (
            run_id,
            _bool(rec.get("D")),
            _bool(rec.get("E")),
            _json(rec.get("E_reasons")),
            rec.get("criteria_passed"),
            rec.get("criteria_total"),
            _json(rec.get("criteria")),
        ),
    )


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    try:
        _fsync(folder)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the rename itself is still atomic


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_partials(folder: Path) -> None:
    """Remove what interrupted creates left (their process is gone)."""
    for f in folder.glob(f"{STORE_FILE}.partial-*"):
        pid = f.name.split(".partial-", 1)[1].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            f.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> Path:
    """Write beside ``path``, fsync, then rename over it: a reader sees the old file or the new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_private(path: Path, text: str) -> Path:
    """:func:`atomic_write_text`, readable and writable by the owner alone (links, secrets)."""
    old = os.umask(0o077)
    try:
        atomic_write_text(path, text)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return Path(path)


class Store:
    """One study's SQLite store. Open it with :meth:`open` (existing) or :meth:`create`."""

    def __init__(self, path: Path, *, check: bool = False) -> None:
        self.path = Path(path)
        self.folder = self.path.parent
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves.
            self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=60.0, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(describe_fault(exc, self.path)) from exc
        try:
            self.conn.row_factory = sqlite3.Row
            if check:
                # A truncated or overwritten file must be named, not half-read.
                bad = self.conn.execute("PRAGMA quick_check(1)").fetchone()[0]
                if bad != "ok":
                    raise sqlite3.DatabaseError(f"database disk image is malformed: {bad}")
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.conn.executescript(SCHEMA + ledger.SCHEMA)
            self._migrate()
        except sqlite3.Error as exc:
            self.conn.close()
            raise StoreError(describe_fault(exc, self.path)) from exc

    def _migrate(self) -> None:
        for table, column, decl in _MIGRATIONS:
            have = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        # Stores created before the 'metered' basis existed: widen the CHECK in place (SQLite's
        # documented procedure for changing a CHECK constraint; existing rows satisfy the wider one).
        widened = (("attempts", _OLD_BASIS_CHECK, _NEW_BASIS_CHECK), ("cells", _OLD_WAVE_CHECK, _NEW_WAVE_CHECK))
        for table, old, new in widened:
            row = self.conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            ).fetchone()
            if row is not None and old in row[0]:
                version = self.conn.execute("PRAGMA schema_version").fetchone()[0]
                self.conn.execute("PRAGMA writable_schema = ON")
                self.conn.execute(
                    "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?",
                    (row[0].replace(old, new), table),
                )
                self.conn.execute(f"PRAGMA schema_version = {int(version) + 1}")
                self.conn.execute("PRAGMA writable_schema = OFF")
                self.conn.commit()

    # ------------------------------------------------------------------ life
    @classmethod
    def create(
        cls,
        folder: Path,
        *,
        name: str,
        seed: int,
        protocol_version: str,
        worker_model: str,
        envelope_usd: float,
        scenarios: list[str],
        nodes_source: str | None = None,
        nodes_yaml: str | None = None,
        cells: Iterable[CellSpec] = (),
        arms: list[str] | None = None,
        run_function: str | None = None,
    ) -> Store:
        """Create the study's store with its cells, all at once.

        The store is written under a temporary name and hard-linked to
        ``study.sqlite`` only when complete, so an interrupted create leaves
        no study (only a temporary file the next create removes) and two
        creates of one name cannot both succeed.
        """
        folder = Path(folder)
        path = folder / STORE_FILE
        if path.exists():
            raise StoreError(f"study {name!r} already exists at {path}")
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale_partials(folder)
        partial = folder / f"{STORE_FILE}.partial-{os.getpid()}"
        try:
            store = cls(partial)
            try:
                with store.transaction() as c:
                    c.execute(
                        (
                            "INSERT INTO studies (name, seed, created_at, protocol_version, worker_model, "
                            "scenarios_json, nodes_source, nodes_yaml, arms_json, run_function) VALUES (?, ?, "
                            "?, ?, ?, ?, ?, ?, ?, ?)"
                        ),
                        (
                            name,
                            int(seed),
                            now(),
                            protocol_version,
                            worker_model,
                            json.dumps(list(scenarios)),
                            nodes_source,
                            nodes_yaml,
                            json.dumps(list(arms)) if arms is not None else None,
                            run_function,
                        ),
                    )
                    ledger.initialise(c, envelope_usd)
                    _insert_cells(c, cells)
                # Fold the WAL into the file so that the one file linked below is the whole store.
                store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                store.conn.execute("PRAGMA journal_mode=DELETE")
            finally:
                store.close()
            _fsync(partial)
            try:
                os.link(partial, path)
            except FileExistsError:
                raise StoreError(f"study {name!r} already exists at {path}") from None
            _fsync_dir(folder)
        except OSError as exc:
            raise StoreError(describe_fault(exc, partial)) from exc
        finally:
            for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm"), Path(f"{partial}-journal")):
                leftover.unlink(missing_ok=True)
        return cls(path)

    @classmethod
    def open(cls, folder: Path) -> Store:
        path = Path(folder) / STORE_FILE
        if not path.is_file():
            raise StoreError(f"no study store at {path} (create the study first: pilot study create NAME)")
        if path.stat().st_size == 0:
            raise StoreError(
                f"{path}: the study store is empty (truncated); restore it from a backup copy, or if no run was ever "
                "made remove the folder and create the study again"
            )
        store = cls(path, check=True)
        try:
            row = store.conn.execute("SELECT COUNT(*) FROM studies").fetchone()[0]
            cells = store.conn.execute("SELECT COUNT(*) FROM cells").fetchone()[0]
        except sqlite3.Error as exc:
            store.close()
            raise StoreError(describe_fault(exc, path)) from exc
        if row != 1 or cells == 0:
            store.close()
            raise StoreError(
                f"{path}: the store holds {'no study' if row != 1 else 'no cells'} (an interrupted or foreign file); "
                "restore it from a backup copy, or if no run was ever made remove the folder and create the study again"
            )
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from its first statement.

        A SQLite failure inside it (full or read-only disk, corruption) rolls
        the whole transaction back and becomes a :class:`StoreError`.
        """
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(describe_fault(exc, self.path)) from exc
        try:
            yield self.conn
        except BaseException as exc:
            try:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled back (e.g. after SQLITE_FULL)
            if isinstance(exc, sqlite3.Error):
                raise StoreError(describe_fault(exc, self.path)) from exc
            raise
        else:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                try:
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise StoreError(describe_fault(exc, self.path)) from exc

    def record_event(self, c: sqlite3.Connection, kind: str, run_id: str | None = None, **detail: Any) -> None:
        """Keep what an operator did (a retry, an envelope change) in the store, inside the caller's transaction."""
        c.execute(
            "INSERT INTO events (at, kind, run_id, detail_json) VALUES (?, ?, ?, ?)",
            (now(), kind, run_id, json.dumps(detail, default=str, sort_keys=True)),
        )

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM events" + (" WHERE kind = ?" if kind else "") + " ORDER BY event_id"
        return [dict(r) for r in self.conn.execute(sql, (kind,) if kind else ())]

    # ------------------------------------------------------------------ study
    def study(self) -> StudyInfo:
        row = self.conn.execute("SELECT * FROM studies").fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no study row")
        return StudyInfo(
            name=row["name"],
            seed=row["seed"],
            created_at=row["created_at"],
            protocol_version=row["protocol_version"],
            worker_model=row["worker_model"],
            scenarios=json.loads(row["scenarios_json"]),
            nodes_source=row["nodes_source"],
            nodes_yaml=row["nodes_yaml"],
            freeze_manifest=json.loads(row["freeze_manifest_json"]) if row["freeze_manifest_json"] else None,
            freeze_taken_at=row["freeze_taken_at"],
            # Read-only readers may see a store written before these columns existed.
            arms=json.loads(row["arms_json"]) if "arms_json" in row.keys() and row["arms_json"] else None,
            run_function=row["run_function"] if "run_function" in row.keys() else None,
            freeze_lock=(
                json.loads(row["freeze_lock_json"])
                if "freeze_lock_json" in row.keys() and row["freeze_lock_json"]
                else None
            ),
        )

    def set_freeze_manifest(self, manifest: dict[str, str]) -> None:
        """Record the freeze manifest once; a later call leaves the first one in place."""
        with self.transaction() as c:
            c.execute(
                "UPDATE studies SET freeze_manifest_json = ?, freeze_taken_at = ? WHERE freeze_manifest_json IS NULL",
                (json.dumps(manifest, sort_keys=True), now()),
            )

    def set_freeze_lock(self, lock: dict[str, Any], *, replace: bool = False) -> None:
        """Record the freeze's lock once (with its manifest); ``replace`` updates it (code accepted since, verdicts
        recorded later by the code that froze the study)."""
        with self.transaction() as c:
            c.execute(
                "UPDATE studies SET freeze_lock_json = ?" + ("" if replace else " WHERE freeze_lock_json IS NULL"),
                (json.dumps(lock, sort_keys=True),),
            )

    # ------------------------------------------------------------------ cells
    def add_cells(self, cells: Iterable[CellSpec]) -> int:
        with self.transaction() as c:
            return _insert_cells(c, cells)

    def has_wave(self, wave: str) -> bool:
        return self.conn.execute("SELECT 1 FROM cells WHERE wave = ? LIMIT 1", (wave,)).fetchone() is not None

    def _cell(self, row: sqlite3.Row, study: str) -> CellSpec:
        return CellSpec(
            run_id=row["run_id"],
            study=study,
            wave=row["wave"],
            scenario=row["scenario"],
            arm=row["arm"],
            repeat=row["repeat"],
            model=row["model"],
            order_index=row["order_index"],
            seed=row["seed"],
            cap_usd=row["cap_usd"],
            wall_s=row["wall_s"],
            reserve_usd=ledger.to_usd(row["reserve_micro"]),
        )

    def cells(self, wave: str | None = None, status: str | None = None) -> list[CellSpec]:
        """Cells in their seeded order (by wave, then order index)."""
        study = self.study().name
        sql = "SELECT * FROM cells WHERE 1=1"
        args: list[Any] = []
        if wave is not None:
            sql += " AND wave = ?"
            args.append(wave)
        if status is not None:
            sql += " AND status = ?"
            args.append(status)
        sql += " ORDER BY CASE wave WHEN 'pilot' THEN 0 WHEN 'repeat3' THEN 1 ELSE 2 END, order_index"
        return [self._cell(r, study) for r in self.conn.execute(sql, args)]

    def cell_rows(self, wave: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM cells" + (" WHERE wave = ?" if wave else "") + " ORDER BY wave, order_index"
        return [dict(r) for r in self.conn.execute(sql, (wave,) if wave else ())]

    # ------------------------------------------------------------------ attempts
    def begin_attempt(self, cell: CellSpec, node: str, backend: str, workspace_root: Path) -> StartedAttempt | None:
        """Reserve the cell's worst case and open an attempt on ``node``; None if the envelope refuses.

        One transaction: the reservation, the attempt row and the cell's move
        to in-flight commit together or not at all.
        """
        try:
            return self._begin_attempt(cell, node, backend, workspace_root)
        except _EnvelopeRefused:
            return None

    def _begin_attempt(self, cell: CellSpec, node: str, backend: str, workspace_root: Path) -> StartedAttempt:
        with self.transaction() as c:
            row = c.execute(
                "SELECT status, attempts, reserve_micro FROM cells WHERE run_id = ?", (cell.run_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"unknown run {cell.run_id}")
            if row["status"] != "waiting":
                raise StoreError(f"run {cell.run_id} is {row['status']}, not waiting")
            attempt_no = row["attempts"] + 1
            workspace = Path(workspace_root) / cell.run_id / f"attempt-{attempt_no}"
            cur = c.execute(
                (
                    "INSERT INTO attempts (run_id, attempt_no, node, backend, workspace, started_at, outcome, "
                    "reserved_micro) VALUES (?, ?, ?, ?, ?, ?, 'running', ?)"
                ),
                (cell.run_id, attempt_no, node, backend, str(workspace), now(), row["reserve_micro"]),
            )
            attempt_id = int(cur.lastrowid)
            if not ledger.reserve(c, cell.run_id, attempt_id, row["reserve_micro"]):
                raise _EnvelopeRefused  # rolls the attempt row back with the transaction
            c.execute(
                "UPDATE cells SET status = 'in_flight', node = ?, attempts = ? WHERE run_id = ?",
                (node, attempt_no, cell.run_id),
            )
        return StartedAttempt(attempt_id, attempt_no, workspace)

    def finish_attempt(self, attempt_id: int, outcome: AttemptOutcome, *, max_infra_attempts: int) -> str:
        """Settle an attempt and move its run on; returns the run's new status.

        An infrastructure error puts the run back to waiting (same run id,
        rerun after a workspace reset) until ``max_infra_attempts`` infra
        errors, then the run is failed. Any other outcome, a cap included,
        finishes the run with its record.
        """
        with self.transaction() as c:
            a = c.execute(
                "SELECT run_id, outcome, reserved_micro FROM attempts WHERE attempt_id = ?", (attempt_id,)
            ).fetchone()
            if a is None or a["outcome"] != "running":
                raise StoreError(f"attempt {attempt_id} is not running")
            run_id = a["run_id"]
            if not outcome.launched:
                charged, note, basis = 0, "never launched: reservation released, nothing charged", CHARGE_RELEASED
            else:
                charged, note = ledger.settlement(a["reserved_micro"], outcome.charge_usd, metered=outcome.metered)
                basis = (
                    CHARGE_RESERVATION
                    if outcome.charge_usd is None
                    else (CHARGE_METERED if outcome.metered else CHARGE_REPORTED)
                )
            c.execute(
                (
                    "UPDATE attempts SET outcome = ?, error = ?, finished_at = ?, charged_micro = ?, cost_usd "
                    "= ?, judge_cost_usd = ?, charge_basis = ? WHERE attempt_id = ?"
                ),
                (
                    outcome.status,
                    outcome.infra_error or outcome.record.get("error"),
                    now(),
                    charged,
                    _opt_float(outcome.cost_usd),
                    float(outcome.judge_cost_usd),
                    basis,
                    attempt_id,
                ),
            )
            ledger.settle(c, run_id, attempt_id, a["reserved_micro"], charged, f"attempt {outcome.status}; {note}")
            if outcome.infra_error is not None:
                infra = c.execute("SELECT infra_attempts FROM cells WHERE run_id = ?", (run_id,)).fetchone()[0] + 1
                status = "failed" if infra >= max_infra_attempts else "waiting"
                c.execute("UPDATE cells SET status = ?, infra_attempts = ? WHERE run_id = ?", (status, infra, run_id))
                return status
            self._record_run(c, run_id, attempt_id, outcome)
            c.execute("UPDATE cells SET status = 'done' WHERE run_id = ?", (run_id,))
            return "done"

    def _record_run(self, c: sqlite3.Connection, run_id: str, attempt_id: int, outcome: AttemptOutcome) -> None:
        rec = outcome.record
        c.execute(
            (
                "INSERT INTO runs (run_id, attempt_id, status, censored, censor_reason, cost_usd, "
                "judge_cost_usd, wall_s, finished_at, record_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (
                run_id,
                attempt_id,
                outcome.status,
                _bool(rec.get("censored")),
                rec.get("censor_reason"),
                _opt_float(outcome.cost_usd),
                float(outcome.judge_cost_usd),
                rec.get("wall_s"),
                now(),
                json.dumps(rec, default=str),
            ),
        )
        if any(k in rec for k in ("D", "E", "criteria")):
            _insert_evaluation(c, run_id, rec)
        for j in rec.get("judges") or []:
            c.execute(
                (
                    "INSERT INTO judge_scores (run_id, judge_id, model, score_0_100, accept, "
                    "criterion_scores_json, cost_usd, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    run_id,
                    j.get("judge_id"),
                    j.get("model"),
                    j.get("score_0_100"),
                    _bool(j.get("accept")),
                    _json(j.get("criterion_scores")),
                    j.get("cost_usd"),
                    j.get("error"),
                ),
            )

    def replace_evaluation(self, run_id: str, expected_record_json: str, record: dict[str, Any], *, at: str) -> int:
        """Make ``record`` the run's current record after a re-evaluation, keeping the one it replaces; returns the
        history row's id.

        One transaction: the earlier record goes to ``reevaluations``, the new
        one to ``runs`` and ``evaluations``, and an event is kept, all or
        nothing. ``expected_record_json`` is the record the re-evaluation
        started from: if the run's current record is another one by then (a
        second re-evaluation finished first), nothing is changed and
        :class:`StoreError` says so, so a run never gets two verdicts.
        """
        from pilot.run_record import evaluation_error

        with self.transaction() as c:
            row = c.execute("SELECT record_json FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: run {run_id} has no finished record to re-evaluate")
            if row["record_json"] != expected_record_json:
                raise StoreError(
                    f"{self.path}: run {run_id}'s record changed while it was re-evaluated (another re-evaluation?); "
                    "nothing was replaced: run the command again"
                )
            previous = json.loads(row["record_json"])
            error = evaluation_error(record)
            cur = c.execute(
                (
                    "INSERT INTO reevaluations (run_id, at, outcome, previous_eval_error, eval_error, "
                    "previous_record_json) VALUES (?, ?, ?, ?, ?, ?)"
                ),
                (
                    run_id,
                    at,
                    "eval_error" if error else "verdict",
                    evaluation_error(previous),
                    error,
                    row["record_json"],
                ),
            )
            c.execute("UPDATE runs SET record_json = ? WHERE run_id = ?", (json.dumps(record, default=str), run_id))
            c.execute("DELETE FROM evaluations WHERE run_id = ?", (run_id,))
            _insert_evaluation(c, run_id, record)
            self.record_event(
                c,
                "reevaluate",
                run_id,
                outcome="eval_error" if error else "verdict",
                eval_error=error,
                previous_eval_error=evaluation_error(previous),
                D=record.get("D"),
                E=record.get("E"),
            )
            return int(cur.lastrowid)

    def reevaluations(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """The records that re-evaluations replaced, oldest first."""
        sql = "SELECT * FROM reevaluations" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY reevaluation_id"
        return [dict(r) for r in self.conn.execute(sql, (run_id,) if run_id else ())]

    def recover_interrupted(self) -> list[dict[str, Any]]:
        """Close every attempt left running by a scheduler that died; their runs wait again.

        Call only while holding the study's scheduler lock (no live
        scheduler can own those attempts then). An interrupted attempt that
        finished and left its outcome on disk is charged what it reported;
        one that never launched its run function (no launch mark in its
        workspace) is released at no charge; any other is charged its whole
        reservation, marked as such: its real spend is unknown, and the
        worst case keeps the envelope a hard bound. Interrupted attempts do
        not count toward a run's infrastructure limit.
        """
        recovered = []
        # A human session's attempt belongs to the participant site, which closes it (pilot.human), never a scheduler.
        people = ",".join("?" * len(PARTICIPANT_BACKENDS))
        with self.transaction() as c:
            for a in c.execute(
                "SELECT attempt_id, run_id, reserved_micro, workspace FROM attempts WHERE outcome = 'running' "
                f"AND backend NOT IN ({people})",
                sorted(PARTICIPANT_BACKENDS),
            ).fetchall():
                workspace = Path(a["workspace"])
                left = read_outcome_file(workspace)
                if left is not None and left.charge_usd is not None:
                    charged = ledger.to_micro(left.charge_usd)
                    basis, how = (
                        (CHARGE_METERED, "its metered cost") if left.metered else (CHARGE_REPORTED, "its reported cost")
                    )
                elif not was_launched(workspace):
                    charged, basis, how = 0, CHARGE_RELEASED, "nothing (it never launched; reservation released)"
                else:
                    charged, basis, how = a["reserved_micro"], CHARGE_RESERVATION, "its reservation (cost unknown)"
                c.execute(
                    (
                        "UPDATE attempts SET outcome = 'interrupted', error = ?, finished_at = ?, "
                        "charged_micro = ?, charge_basis = ?, cost_usd = ?, judge_cost_usd = ? WHERE "
                        "attempt_id = ?"
                    ),
                    (
                        f"scheduler stopped while the attempt was in flight; charged {how}",
                        now(),
                        charged,
                        basis,
                        _opt_float(left.cost_usd) if basis in (CHARGE_REPORTED, CHARGE_METERED) and left else None,
                        float(left.judge_cost_usd) if basis in (CHARGE_REPORTED, CHARGE_METERED) and left else None,
                        a["attempt_id"],
                    ),
                )
                ledger.settle(
                    c, a["run_id"], a["attempt_id"], a["reserved_micro"], charged, f"interrupted; charged {how}"
                )
                c.execute(
                    "UPDATE cells SET status = 'waiting' WHERE run_id = ? AND status = 'in_flight'", (a["run_id"],)
                )
                recovered.append(
                    {
                        "attempt_id": a["attempt_id"],
                        "run_id": a["run_id"],
                        "charged_usd": ledger.to_usd(charged),
                        "charge_basis": basis,
                        "workspace": str(workspace),
                    }
                )
            # A cell marked in flight without a running attempt cannot arise from our
            # transactions; repair it anyway so a hand-edited store still resumes.
            c.execute(
                "UPDATE cells SET status = 'waiting' WHERE status = 'in_flight' AND run_id NOT IN "
                "(SELECT run_id FROM attempts WHERE outcome = 'running')"
            )
        return recovered

    def reopen(self, run_ids: Iterable[str] | None = None, *, reason: str = "retry") -> list[str]:
        """Put failed cells back to waiting under their run ids (all failed cells when ``run_ids`` is None).

        Their attempts stay as they are (attempt numbers continue) and the
        infrastructure count starts again; each reopening is kept as an
        event. Asking to reopen a cell that is not failed is an error.
        """
        with self.transaction() as c:
            if run_ids is None:
                ids = [
                    r[0]
                    for r in c.execute("SELECT run_id FROM cells WHERE status = 'failed' ORDER BY wave, order_index")
                ]
            else:
                ids = list(dict.fromkeys(run_ids))
                for rid in ids:
                    row = c.execute("SELECT status FROM cells WHERE run_id = ?", (rid,)).fetchone()
                    if row is None:
                        raise StoreError(f"{self.path}: no run {rid!r} in this study")
                    if row[0] != "failed":
                        raise StoreError(f"run {rid} is {row[0]}, not failed; only failed runs are reopened")
            for rid in ids:
                n = c.execute("SELECT infra_attempts FROM cells WHERE run_id = ?", (rid,)).fetchone()[0]
                c.execute("UPDATE cells SET status = 'waiting', infra_attempts = 0 WHERE run_id = ?", (rid,))
                self.record_event(c, "reopen", rid, reason=reason, infra_attempts_before=n)
        return ids

    def remove_run(self, run_id: str, *, reason: str, open_charge_usd: Any = None) -> dict[str, Any]:
        """Delete one run of the human wave from the store (a participant withdrew), keeping every dollar it cost.

        One transaction: an attempt still open is settled first, at
        ``open_charge_usd`` (what the session's assistant was metered) or, when
        that is unknown, at its whole reservation; each attempt's charge is kept
        in the ledger (:func:`pilot.ledger.keep_removed_charge`); then the run's
        judge scores, evaluation, earlier records, run, attempts and cell are
        deleted and an event says so. Only a run of wave ``human`` is ever removed.
        """
        with self.transaction() as c:
            cell = c.execute("SELECT wave FROM cells WHERE run_id = ?", (run_id,)).fetchone()
            if cell is None:
                raise StoreError(f"{self.path}: no run {run_id!r} in this study")
            if cell["wave"] != HUMAN_WAVE:
                raise StoreError(f"run {run_id} is of wave {cell['wave']}; only a human session's run is ever removed")
            charged_total = 0
            attempts = c.execute(
                "SELECT attempt_id, outcome, reserved_micro, charged_micro FROM attempts WHERE run_id = ?", (run_id,)
            ).fetchall()
            for a in attempts:
                charged = a["charged_micro"]
                if a["outcome"] == "running":
                    if open_charge_usd is None:
                        charged, note = a["reserved_micro"], "removed while open; cost unknown: charged its reservation"
                    else:
                        charged, note = ledger.to_micro(open_charge_usd), "removed while open; charged its metered cost"
                    ledger.settle(c, run_id, a["attempt_id"], a["reserved_micro"], charged, note)
                ledger.keep_removed_charge(c, run_id, a["attempt_id"], int(charged or 0), reason)
                charged_total += int(charged or 0)
            for table in ("judge_scores", "evaluations", "reevaluations", "runs", "attempts", "cells"):
                c.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            self.record_event(
                c, "remove_run", run_id, reason=reason, attempts=len(attempts), charged_usd=ledger.to_usd(charged_total)
            )
        return {"run_id": run_id, "attempts": len(attempts), "charged_usd": ledger.to_usd(charged_total)}

    def failures(self, wave: str | None = None) -> list[dict[str, Any]]:
        """Each failed cell with the error of its last attempt."""
        sql = (
            "SELECT c.run_id, c.wave, c.arm, c.scenario, c.infra_attempts, a.error, a.node FROM cells c "
            "LEFT JOIN attempts a ON a.attempt_id = (SELECT MAX(attempt_id) FROM attempts WHERE run_id = c.run_id) "
            "WHERE c.status = 'failed'" + (" AND c.wave = ?" if wave else "") + " ORDER BY c.wave, c.order_index"
        )
        return [dict(r) for r in self.conn.execute(sql, (wave,) if wave else ())]

    def attempts(self, run_id: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM attempts" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY attempt_id"
        return [dict(r) for r in self.conn.execute(sql, (run_id,) if run_id else ())]

    def runs(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM runs ORDER BY run_id")]

    def cell(self, run_id: str) -> dict[str, Any] | None:
        """The cell of ``run_id``, or None when the study has no such run."""
        row = self.conn.execute("SELECT * FROM cells WHERE run_id = ?", (run_id,)).fetchone()
        return dict(row) if row else None

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The finished run ``run_id`` (its record and the attempt it came from), or None when it is not finished."""
        row = self.conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return dict(row) if row else None

    def final_attempts(self) -> dict[str, dict[str, Any]]:
        """run id -> the attempt whose record is the finished run's."""
        sql = "SELECT r.run_id, a.* FROM runs r JOIN attempts a ON a.attempt_id = r.attempt_id"
        return {r["run_id"]: dict(r) for r in self.conn.execute(sql)}

    def scenario_evaluations(self, scenario_id: str) -> dict[str, dict[str, Any]]:
        """run id -> the stored evaluation (criteria and E reasons as JSON) of each run of ``scenario_id``."""
        sql = "SELECT e.* FROM evaluations e JOIN cells c ON c.run_id = e.run_id WHERE c.scenario = ?"
        return {r["run_id"]: dict(r) for r in self.conn.execute(sql, (scenario_id,))}

    def backends_used(self) -> list[str]:
        """The agent backends the study's attempts ran on, sorted (empty before the first attempt)."""
        return [r[0] for r in self.conn.execute("SELECT DISTINCT backend FROM attempts ORDER BY backend")]

    # ------------------------------------------------------------------ summaries
    def balance(self) -> ledger.Balance:
        return ledger.balance(self.conn)

    def audit(self) -> list[str]:
        return ledger.audit(self.conn)

    def counts(self, wave: str | None = None) -> dict[str, int]:
        sql = "SELECT status, COUNT(*) FROM cells" + (" WHERE wave = ?" if wave else "") + " GROUP BY status"
        got = dict(self.conn.execute(sql, (wave,) if wave else ()).fetchall())
        return {s: int(got.get(s, 0)) for s in ("waiting", "in_flight", "done", "failed")}

    def status_by_arm(self) -> list[dict[str, Any]]:
        """Per wave and arm: cells by state, finished runs without a verdict, failed attempts, dollars spent and
        reserved."""
        sql = """
        SELECT c.wave, c.arm,
               SUM(c.status = 'done') AS done, SUM(c.status = 'in_flight') AS in_flight,
               SUM(c.status = 'waiting') AS waiting, SUM(c.status = 'failed') AS failed,
               COALESCE(SUM(a.failed_attempts), 0) AS failed_attempts,
               COALESCE(SUM(a.charged), 0) AS spent_micro, COALESCE(SUM(a.reserved), 0) AS reserved_micro
        FROM cells c LEFT JOIN (
            SELECT run_id,
                   SUM(outcome IN ('infra_error', 'interrupted')) AS failed_attempts,
                   SUM(COALESCE(charged_micro, 0)) AS charged,
                   SUM(CASE WHEN outcome = 'running' THEN reserved_micro ELSE 0 END) AS reserved
            FROM attempts GROUP BY run_id
        ) a ON a.run_id = c.run_id
        GROUP BY c.wave, c.arm
        ORDER BY CASE c.wave WHEN 'pilot' THEN 0 WHEN 'repeat3' THEN 1 ELSE 2 END, c.arm
        """
        no_verdict = self._no_verdict_by_arm()
        out = []
        for r in self.conn.execute(sql):
            d = dict(r)
            d["no_verdict"] = no_verdict.get((d["wave"], d["arm"]), 0)
            d["spent_usd"] = ledger.to_usd(d.pop("spent_micro"))
            d["reserved_usd"] = ledger.to_usd(d.pop("reserved_micro"))
            out.append(d)
        return out

    def _no_verdict_by_arm(self) -> dict[tuple[str, str], int]:
        """(wave, arm) -> finished runs whose evaluation could not run (``eval_error``): done, yet no verdict."""
        from pilot.outcomes import unevaluated_rows

        counts: dict[tuple[str, str], int] = {}
        for r in unevaluated_rows(self.finished_rows()):
            counts[(r["wave"], r["arm"])] = counts.get((r["wave"], r["arm"]), 0) + 1
        return counts

    def run_costs(self, wave: str | None = None) -> list[float]:
        """Total dollars charged (agent and judges, every attempt) to each finished run."""
        sql = (
            "SELECT SUM(COALESCE(a.charged_micro, 0)) FROM cells c JOIN attempts a ON a.run_id = c.run_id "
            "WHERE c.status = 'done'" + (" AND c.wave = ?" if wave else "") + " GROUP BY c.run_id"
        )
        return [ledger.to_usd(r[0]) for r in self.conn.execute(sql, (wave,) if wave else ())]

    def run_charges(self, wave: str | None = None) -> list[tuple[int, bool]]:
        """Each finished run's charge in micro-dollars, and whether it rests on a reservation (no cost was reported or
        metered).

        A run is charged what its attempts were charged from an observation
        (the proxy's metered cost, else the reported one; judges included) and,
        when its finishing attempt has no such cost (a session killed at the
        wall limit before the client reported), that attempt's reservation.
        Attempts that did not finish the run and were charged a reservation
        (an interrupted scheduler, a lost worker) are restarts, not the run's
        cost, and count nothing; see protocol/interpretations.md (Cost of a run).
        """
        return list(self.run_charges_by_id(wave).values())

    def run_charges_by_id(self, wave: str | None = None) -> dict[str, tuple[int, bool]]:
        """:meth:`run_charges` keyed by run id (in run-id order), for showing each run's charge beside its reported
        cost."""
        sql = (
            f"SELECT c.run_id, SUM(CASE WHEN {_REPORTED} THEN a.charged_micro ELSE 0 END) AS observed, "
            f"SUM(CASE WHEN a.attempt_id = r.attempt_id AND NOT ({_REPORTED}) THEN "
            "COALESCE(a.charged_micro, 0) ELSE 0 END) AS reserved, SUM(CASE WHEN a.attempt_id = "
            f"r.attempt_id AND NOT ({_REPORTED}) THEN 1 ELSE 0 END) AS final_unknown FROM cells c JOIN "
            "runs r ON r.run_id = c.run_id JOIN attempts a ON a.run_id = c.run_id WHERE c.status = 'done'"
            + (" AND c.wave = ?" if wave else "")
            + " GROUP BY c.run_id ORDER BY c.run_id"
        )
        return {
            row["run_id"]: (int(row["observed"]) + int(row["reserved"]), bool(row["final_unknown"]))
            for row in self.conn.execute(sql, (wave,) if wave else ())
        }

    def finished_rows(self) -> list[dict[str, Any]]:
        """Each cell joined with its run record (None for runs not finished), in seeded order."""
        sql = """
        SELECT c.*, r.status AS run_status, r.cost_usd AS run_cost_usd, r.judge_cost_usd AS run_judge_cost_usd,
               r.record_json, r.finished_at,
               (SELECT SUM(COALESCE(a.charged_micro, 0)) FROM attempts a WHERE a.run_id = c.run_id) AS charged_micro
        FROM cells c LEFT JOIN runs r ON r.run_id = c.run_id
        ORDER BY CASE c.wave WHEN 'pilot' THEN 0 WHEN 'repeat3' THEN 1 ELSE 2 END, c.order_index
        """
        return [dict(r) for r in self.conn.execute(sql)]
