"""The run store of one study: a SQLite file in WAL mode under ``analysis/data/<study>/``.

Tables: ``studies`` (seed, protocol version, nodes, freeze manifest),
``cells`` (one per assigned run with its wave, order index, per-run seed and
state), ``attempts`` (every attempt kept, with node, outcome, error and
charge), ``runs`` (the run record of the attempt that finished the run),
``evaluations``, ``judge_scores``, and the ledger (``pilot.ledger``).

Every state change of a run is one ``BEGIN IMMEDIATE`` transaction that
moves the cell, the attempt and the ledger together, so a scheduler killed at
any instant leaves a store that is consistent as of its last commit: a
finished run is either fully recorded or still in flight, never half.
Durability: WAL with ``synchronous=NORMAL`` survives a killed process (the
case that matters here); only a power cut may lose the last commits.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from pilot import ledger, paths
from pilot.executors.base import AttemptOutcome, CellSpec, read_outcome_file

STORE_FILE = "study.sqlite"
WAVES = ("pilot", "repeat3", "sensitivity")

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
    freeze_taken_at TEXT
);
CREATE TABLE IF NOT EXISTS cells (
    run_id TEXT PRIMARY KEY,
    wave TEXT NOT NULL CHECK (wave IN ('pilot', 'repeat3', 'sensitivity')),
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
    outcome TEXT NOT NULL CHECK (outcome IN ('running', 'completed', 'capped', 'agent_error', 'infra_error', 'interrupted')),
    error TEXT,
    reserved_micro INTEGER NOT NULL,
    charged_micro INTEGER,
    cost_usd REAL,
    judge_cost_usd REAL,
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
"""


class _EnvelopeRefused(Exception):
    pass


class StoreError(RuntimeError):
    """The store is missing, belongs to another study, or was asked something impossible."""


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


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


class Store:
    """One study's SQLite store. Open it with :meth:`open` (existing) or :meth:`create`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.folder = self.path.parent
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves.
        self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=60.0, check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.executescript(SCHEMA + ledger.SCHEMA)

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
    ) -> "Store":
        path = Path(folder) / STORE_FILE
        if path.exists():
            raise StoreError(f"study {name!r} already exists at {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        store = cls(path)
        with store.transaction() as c:
            c.execute(
                "INSERT INTO studies (name, seed, created_at, protocol_version, worker_model, scenarios_json, nodes_source, nodes_yaml) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (name, int(seed), now(), protocol_version, worker_model, json.dumps(list(scenarios)), nodes_source, nodes_yaml),
            )
            ledger.initialise(c, envelope_usd)
        return store

    @classmethod
    def open(cls, folder: Path) -> "Store":
        path = Path(folder) / STORE_FILE
        if not path.is_file():
            raise StoreError(f"no study store at {path} (create the study first: pilot study create NAME)")
        return cls(path)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from its first statement."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

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
        )

    def set_freeze_manifest(self, manifest: dict[str, str]) -> None:
        """Record the freeze manifest once; a later call leaves the first one in place."""
        with self.transaction() as c:
            c.execute(
                "UPDATE studies SET freeze_manifest_json = ?, freeze_taken_at = ? WHERE freeze_manifest_json IS NULL",
                (json.dumps(manifest, sort_keys=True), now()),
            )

    # ------------------------------------------------------------------ cells
    def add_cells(self, cells: Iterable[CellSpec]) -> int:
        rows = [
            (c.run_id, c.wave, c.order_index, c.scenario, c.arm, c.repeat, c.model, c.seed, c.cap_usd, c.wall_s, ledger.to_micro(c.reserve_usd))
            for c in cells
        ]
        with self.transaction() as c:
            c.executemany(
                "INSERT INTO cells (run_id, wave, order_index, scenario, arm, repeat, model, seed, cap_usd, wall_s, reserve_micro) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

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
            row = c.execute("SELECT status, attempts, reserve_micro FROM cells WHERE run_id = ?", (cell.run_id,)).fetchone()
            if row is None:
                raise StoreError(f"unknown run {cell.run_id}")
            if row["status"] != "waiting":
                raise StoreError(f"run {cell.run_id} is {row['status']}, not waiting")
            attempt_no = row["attempts"] + 1
            workspace = Path(workspace_root) / cell.run_id / f"attempt-{attempt_no}"
            cur = c.execute(
                "INSERT INTO attempts (run_id, attempt_no, node, backend, workspace, started_at, outcome, reserved_micro) "
                "VALUES (?, ?, ?, ?, ?, ?, 'running', ?)",
                (cell.run_id, attempt_no, node, backend, str(workspace), now(), row["reserve_micro"]),
            )
            attempt_id = int(cur.lastrowid)
            if not ledger.reserve(c, cell.run_id, attempt_id, row["reserve_micro"]):
                raise _EnvelopeRefused  # rolls the attempt row back with the transaction
            c.execute("UPDATE cells SET status = 'in_flight', node = ?, attempts = ? WHERE run_id = ?", (node, attempt_no, cell.run_id))
        return StartedAttempt(attempt_id, attempt_no, workspace)

    def finish_attempt(self, attempt_id: int, outcome: AttemptOutcome, *, max_infra_attempts: int) -> str:
        """Settle an attempt and move its run on; returns the run's new status.

        An infrastructure error puts the run back to waiting (same run id,
        rerun after a workspace reset) until ``max_infra_attempts`` infra
        errors, then the run is failed. Any other outcome, a cap included,
        finishes the run with its record.
        """
        with self.transaction() as c:
            a = c.execute("SELECT run_id, outcome, reserved_micro FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
            if a is None or a["outcome"] != "running":
                raise StoreError(f"attempt {attempt_id} is not running")
            run_id = a["run_id"]
            charged, note = ledger.settlement(a["reserved_micro"], outcome.total_cost_usd)
            c.execute(
                "UPDATE attempts SET outcome = ?, error = ?, finished_at = ?, charged_micro = ?, cost_usd = ?, judge_cost_usd = ? "
                "WHERE attempt_id = ?",
                (outcome.status, outcome.infra_error or outcome.record.get("error"), now(), charged,
                 _opt_float(outcome.cost_usd), float(outcome.judge_cost_usd), attempt_id),
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
            "INSERT INTO runs (run_id, attempt_id, status, censored, censor_reason, cost_usd, judge_cost_usd, wall_s, finished_at, record_json) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, attempt_id, outcome.status, _bool(rec.get("censored")), rec.get("censor_reason"), _opt_float(outcome.cost_usd),
             float(outcome.judge_cost_usd), rec.get("wall_s"), now(), json.dumps(rec, default=str)),
        )
        if any(k in rec for k in ("D", "E", "criteria")):
            c.execute(
                "INSERT INTO evaluations (run_id, D, E, E_reasons_json, criteria_passed, criteria_total, criteria_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, _bool(rec.get("D")), _bool(rec.get("E")), _json(rec.get("E_reasons")), rec.get("criteria_passed"),
                 rec.get("criteria_total"), _json(rec.get("criteria"))),
            )
        for j in rec.get("judges") or []:
            c.execute(
                "INSERT INTO judge_scores (run_id, judge_id, model, score_0_100, accept, criterion_scores_json, cost_usd, error) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, j.get("judge_id"), j.get("model"), j.get("score_0_100"), _bool(j.get("accept")),
                 _json(j.get("criterion_scores")), j.get("cost_usd"), j.get("error")),
            )

    def recover_interrupted(self) -> list[dict[str, Any]]:
        """Close every attempt left running by a scheduler that died; their runs wait again.

        Call only while holding the study's scheduler lock (no live
        scheduler can own those attempts then). An interrupted attempt is
        charged what it reported if it finished and left its outcome on disk,
        otherwise its whole reservation: its real spend is unknown, and
        charging the worst case keeps the envelope a hard bound.
        """
        recovered = []
        with self.transaction() as c:
            for a in c.execute("SELECT attempt_id, run_id, reserved_micro, workspace FROM attempts WHERE outcome = 'running'").fetchall():
                left = read_outcome_file(Path(a["workspace"]))
                known = left is not None and left.total_cost_usd is not None
                charged = ledger.to_micro(left.total_cost_usd) if known else a["reserved_micro"]
                how = "its reported cost" if known else "its reservation (cost unknown)"
                c.execute(
                    "UPDATE attempts SET outcome = 'interrupted', error = ?, finished_at = ?, charged_micro = ? WHERE attempt_id = ?",
                    (f"scheduler stopped while the attempt was in flight; charged {how}", now(), charged, a["attempt_id"]),
                )
                ledger.settle(c, a["run_id"], a["attempt_id"], a["reserved_micro"], charged, "interrupted")
                c.execute("UPDATE cells SET status = 'waiting' WHERE run_id = ? AND status = 'in_flight'", (a["run_id"],))
                recovered.append({"attempt_id": a["attempt_id"], "run_id": a["run_id"], "charged_usd": ledger.to_usd(charged)})
            # A cell marked in flight without a running attempt cannot arise from our
            # transactions; repair it anyway so a hand-edited store still resumes.
            c.execute(
                "UPDATE cells SET status = 'waiting' WHERE status = 'in_flight' AND run_id NOT IN "
                "(SELECT run_id FROM attempts WHERE outcome = 'running')"
            )
        return recovered

    def attempts(self, run_id: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM attempts" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY attempt_id"
        return [dict(r) for r in self.conn.execute(sql, (run_id,) if run_id else ())]

    def runs(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM runs ORDER BY run_id")]

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
        """Per wave and arm: cells by state, failed attempts, dollars spent and reserved."""
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
        out = []
        for r in self.conn.execute(sql):
            d = dict(r)
            d["spent_usd"] = ledger.to_usd(d.pop("spent_micro"))
            d["reserved_usd"] = ledger.to_usd(d.pop("reserved_micro"))
            out.append(d)
        return out

    def run_costs(self, wave: str | None = None) -> list[float]:
        """Total dollars (agent and judges, every attempt) of each finished run."""
        sql = (
            "SELECT SUM(COALESCE(a.charged_micro, 0)) FROM cells c JOIN attempts a ON a.run_id = c.run_id "
            "WHERE c.status = 'done'" + (" AND c.wave = ?" if wave else "") + " GROUP BY c.run_id"
        )
        return [ledger.to_usd(r[0]) for r in self.conn.execute(sql, (wave,) if wave else ())]

    def finished_rows(self) -> list[dict[str, Any]]:
        """Each cell joined with its run record (None for runs not finished), in seeded order."""
        sql = """
        SELECT c.*, r.status AS run_status, r.cost_usd AS run_cost_usd, r.judge_cost_usd AS run_judge_cost_usd,
               r.record_json, r.finished_at
        FROM cells c LEFT JOIN runs r ON r.run_id = c.run_id
        ORDER BY CASE c.wave WHEN 'pilot' THEN 0 WHEN 'repeat3' THEN 1 ELSE 2 END, c.order_index
        """
        return [dict(r) for r in self.conn.execute(sql)]
