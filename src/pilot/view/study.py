"""Everything the viewer shows about a study, read without ever writing.

The store is opened read-only, one short connection per question, so a
running ``pilot study run`` is never held up: SQLite's WAL lets readers and
the one writer proceed together. A store that has no ``-wal`` file beside it
has no writer connected (a writer in WAL mode keeps that file while it is
open), and is read as immutable so that not even SQLite's coordination files
are created in the study folder. The viewer takes no lock, neither SQLite's
write lock nor the scheduler's study lock.

Run-table columns come from :func:`pilot.outcomes.rows_from_store`, the same
code ``pilot study export`` uses, so the viewer and the run table cannot
disagree about D, E, Q or S.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pilot import ledger, outcomes, paths, protocol
from pilot.judges.rubric import scenario_criteria
from pilot.store import STORE_FILE, WAVES, Store, StoreError
from pilot.view import conversation, files, sessions, usage

#: The attempt folder layout the scheduler writes (``pilot.schedule.Scheduler``).
WORKSPACES = "workspaces"
#: The index's columns (in order); ``charge_usd`` is the run's charge (:meth:`pilot.store.Store.run_charges_by_id`).
INDEX_COLUMNS = (
    "scenario",
    "arm",
    "model",
    "repeat",
    "wave",
    "status",
    "D",
    "E",
    "Q",
    "S",
    "cost_usd",
    "charge_usd",
    "wall_s",
    "tokens",
    "turns",
    "tool_calls",
    "deviations",
    "hit_cap",
    "censor_reason",
    "sessions",
    "recovery_used",
    "selfcheck_first",
    "selfcheck_final",
    "attempts",
)
#: The columns shown before a reader chooses (the rest one click away in the column chooser): they fit 1440 px.
#: The run id names the scenario, arm and repeat, and the model of a model-sensitivity run.
DEFAULT_COLUMNS = (
    "arm",
    "status",
    "D",
    "E",
    "Q",
    "S",
    "cost_usd",
    "wall_s",
    "tokens",
    "deviations",
    "hit_cap",
    "recovery_used",
)
#: What a phone shows before a reader chooses (390 px wide).
NARROW_COLUMNS = ("Q", "S")
#: A reader's name for each column (the run table's names are for code), and what it means.
COLUMN_LABELS = {
    "run_id": ("run", "the run's id: scenario, arm, repeat (and model, for the model-sensitivity wave)"),
    "scenario": ("scenario", "the professional scenario"),
    "arm": ("arm", "the experimental arm (A0-A4)"),
    "model": ("model", "the worker model of the run"),
    "repeat": ("repeat", "the repeat of this scenario and arm"),
    "wave": ("wave", "pilot, repeat3 (the third repeat) or sensitivity (other worker models, arm A3)"),
    "status": ("status", "how the run ended"),
    "D": ("D delivered", "D = 1: every required oracle criterion passed and the inputs are untouched"),
    "E": ("E violation", "E = 1: a critical violation (an input file changed, added or deleted)"),
    "Q": ("Q quality", "the judges' mean score, 0-100"),
    "S": ("S accepted", "S = 1: D = 1, E = 0 and Q at or above the threshold q"),
    "cost_usd": ("agent cost (reported)", "the agent's cost as its client reported it (C in the run table)"),
    "charge_usd": (
        "charged",
        "what the envelope was charged for the run (agent and judges; the reservation when no cost was "
        "reported or metered, marked ‡)",
    ),
    "wall_s": ("wall time (s)", "the run's wall-clock seconds"),
    "turns": ("turns", "the agent's turns"),
    "tool_calls": ("tool calls", "the agent's tool calls"),
    "deviations": ("deviations", "recorded deviations (attempts to reach what the arm forbids)"),
    "attempts": ("attempts", "attempts the scheduler made (more than one after an infrastructure error)"),
    "tokens": (
        "tokens",
        "tokens the model proxy metered for the run's final attempt (input, cache writes and reads, output); "
        "– where no proxy record exists (a simulated run)",
    ),
    "hit_cap": (
        "hit a cap",
        "every cap a session reached, with the session named (a first session capped and then resumed counts too)",
    ),
    "censor_reason": ("censored", "the cap the run's final session ended on (the run table's censor_reason)"),
    "sessions": ("sessions", "agent sessions: 2 when the A4 recovery resume ran"),
    "recovery_used": ("recovery", "A4: the one recovery resume was used"),
    "selfcheck_first": ("self-check 1st", "A4: the self-check after the first session"),
    "selfcheck_final": ("self-check final", "A4: the self-check at the end of the run (after the resume if any)"),
}


class ViewError(StoreError):
    """The study cannot be shown (missing store, unknown run); the message says which and why."""


class ReadOnlyStore(Store):
    """A :class:`pilot.store.Store` on a read-only connection: its queries, none of its writes.

    Any write method fails inside SQLite ("attempt to write a readonly
    database"); the viewer calls none.
    """

    def __init__(self, path: Path) -> None:  # deliberately not Store.__init__ (no schema, no pragmas)
        self.path = Path(path)
        self.folder = self.path.parent
        wal = self.path.with_name(self.path.name + "-wal")
        mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
        self.conn = sqlite3.connect(
            f"file:{quote(str(self.path.resolve()))}?{mode}",
            uri=True,
            timeout=10.0,
            isolation_level=None,
            check_same_thread=False,
        )
        self.conn.row_factory = sqlite3.Row


def _usd(micro: int | None) -> float | None:
    return None if micro is None else ledger.to_usd(int(micro))


@dataclass
class RunFiles:
    """Where one attempt's files are (all inside the study folder)."""

    folder: Path
    attempt_no: int = 0

    @property
    def workspace(self) -> Path:
        return self.folder / "workspace"

    @property
    def outputs(self) -> Path:
        return self.workspace / "outputs"

    @property
    def transcript(self) -> Path:
        # The harness's copy of the CLI stream, outside the agent's reach.
        from pilot.workspace import transcript_path

        return transcript_path(self.folder)


class StudyReader:
    """Read-only access to one study folder (``analysis/data/<name>/``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.store_path = self.folder / STORE_FILE
        if not self.store_path.is_file():
            raise ViewError(
                f"no study store at {self.store_path} (create and run the study first: pilot study create NAME)"
            )
        with self.store() as st:
            self.info = st.study()
        self.name = self.info.name

    @classmethod
    def named(cls, name: str) -> StudyReader:
        return cls(paths.study_dir(name))

    @contextmanager
    def store(self) -> Iterator[ReadOnlyStore]:
        """A read-only store whose queries all see one snapshot (one read transaction), closed on exit.

        Without the transaction each query of e.g. the ledger audit could see
        a different moment of a running study and report a false imbalance.
        A reader holds no lock a writer waits for.
        """
        st = ReadOnlyStore(self.store_path)
        try:
            st.conn.execute("BEGIN")
            yield st
        finally:
            try:
                st.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            st.close()

    # ------------------------------------------------------------------ study level
    def backends(self, st: ReadOnlyStore) -> list[str]:
        return st.backends_used()

    def overview(self) -> dict[str, Any]:
        """Progress, envelope, ledger audit and counts per wave and arm."""
        with self.store() as st:
            counts = {w: st.counts(w) for w in WAVES if st.has_wave(w)}
            bal = st.balance()
            return {
                "backends": self.backends(st),
                "counts": counts,
                "total": {k: sum(c[k] for c in counts.values()) for k in ("waiting", "in_flight", "done", "failed")},
                "balance": bal.as_dict() | {"remaining_usd": bal.remaining_usd},
                "ledger_problems": st.audit(),
                "by_arm": st.status_by_arm(),
            }

    def index_rows(self) -> list[dict[str, Any]]:
        """One row per assigned run: run-table columns for finished runs, the cell's state for the rest."""
        with self.store() as st:
            cells = st.finished_rows()
            backends = self.backends(st)
            charges = st.run_charges_by_id()
            finals = final_attempts(st)
        backend = backends[0] if len(backends) == 1 else ",".join(backends) or "none"
        computed = _run_table_rows(cells, self.name, backend)
        errors = computed.pop("__errors__", {})
        out = []
        for c in cells:
            row = computed.get(c["run_id"])
            if row is not None:
                _add_charge(row, charges.get(c["run_id"]))
                final = finals.get(c["run_id"])
                folder = self.attempt_files(c["run_id"], final).folder if final is not None else None
                add_facts(row, json.loads(c["record_json"]) if c.get("record_json") else {}, folder)
            if row is None:
                state = (
                    c.get("run_status")
                    if c.get("record_json")
                    else {"in_flight": "in flight"}.get(c["status"], c["status"])
                )
                row = {
                    "run_id": c["run_id"],
                    "scenario": c["scenario"],
                    "arm": c["arm"],
                    "model": c["model"],
                    "repeat": c["repeat"],
                    "wave": c["wave"],
                    "status": state,
                    "attempts": c["attempts"],
                    "deviations": None,
                    "problem": errors.get(c["run_id"]),
                }
                add_facts(row, {}, None)
            out.append(row)
        return out

    def run_ids(self) -> list[str]:
        """Every run id in the run table's order (waves in turn, each in its seeded order)."""
        with self.store() as st:
            return [r["run_id"] for r in st.finished_rows()]

    def label(self) -> str:
        """The label of this study's backends (SIMULATED, REHEARSAL, or "" for a real study;
        :func:`pilot.backends.label_of`)."""
        from pilot import backends

        with self.store() as st:
            return backends.label_of(self.backends(st))

    def simulated(self, rows: list[dict[str, Any]] | None = None) -> bool:
        """Whether any number of this study comes from a simulated agent or judge."""
        with self.store() as st:
            if "simulated" in self.backends(st):
                return True
        return any(r.get("judge_backend") == "simulated" for r in rows or [])

    # ------------------------------------------------------------------ run level
    def attempt_files(self, run_id: str, attempt_no: int) -> RunFiles:
        check_run_id(run_id)
        folder = self.folder / WORKSPACES / run_id / f"attempt-{int(attempt_no)}"
        if not files.inside(folder, self.folder):
            raise ViewError(f"run {run_id}: its attempt folder lies outside the study folder {self.folder}")
        return RunFiles(folder, int(attempt_no))

    def run_attempts(self, run_id: str) -> list[RunFiles]:
        """The folders of every attempt of ``run_id``, oldest first."""
        with self.store() as st:
            numbers = sorted(a["attempt_no"] for a in st.attempts(run_id))
        return [self.attempt_files(run_id, n) for n in numbers]

    def run(self, run_id: str, row: dict[str, Any] | None = None) -> dict[str, Any]:
        """Everything the run page shows about one run (``row``: its index row, if already computed)."""
        with self.store() as st:
            cell = st.cell(run_id)
            if cell is None:
                raise ViewError(f"no run {run_id!r} in study {self.name}")
            attempts = st.attempts(run_id)
            run = st.run(run_id)
        record = json.loads(run["record_json"]) if run and run.get("record_json") else {}
        final_no = next((a["attempt_no"] for a in attempts if run and a["attempt_id"] == run["attempt_id"]), None)
        for a in attempts:
            a["charged_usd"] = _usd(a.get("charged_micro"))
            a["reserved_usd"] = _usd(a.get("reserved_micro"))
            a["final"] = a["attempt_no"] == final_no
            a["files"] = self.attempt_files(run_id, a["attempt_no"])
            a["outcome_record"] = None
            if not a["final"]:
                text = files.read_text(a["files"].folder / "run_record.json", self.folder)
                try:
                    a["outcome_record"] = json.loads(text) if text else None
                except ValueError:
                    a["outcome_record"] = None
        from pilot.scenarios import load_scenario

        scenario = load_scenario(cell["scenario"])
        final = next((a for a in attempts if a["final"]), attempts[-1] if attempts else None)
        rf: RunFiles | None = final["files"] if final else None
        brief = files.read_text(rf.workspace / "BRIEF.md", self.folder) if rf else None
        brief_source = "the workspace of the attempt" if brief is not None else "the scenario bundle"
        if brief is None:
            brief = scenario.brief_path.read_text(encoding="utf-8")
        conversations = []
        for a in attempts:
            path = a["files"].transcript
            conv = None
            if files.regular_file(path, self.folder):
                rec = record if a["final"] else (a["outcome_record"] or {})
                conv = conversation.read(path, rec.get("deviations") or [], rec.get("E_reasons") or [])
            conversations.append((a, conv))
        selfcheck = {}
        if rf:
            for key in ("selfcheck_first", "selfcheck_final"):
                selfcheck[key] = files.read_text(rf.folder / f"{key}.txt", self.folder)
        if run and (row is None or "D" not in row):
            with self.store() as st:
                backends = self.backends(st)
            row = _run_table_rows(
                [
                    {
                        **cell,
                        "run_status": run["status"],
                        "run_cost_usd": run["cost_usd"],
                        "run_judge_cost_usd": run["judge_cost_usd"],
                        "record_json": run["record_json"],
                        "finished_at": run["finished_at"],
                    }
                ],
                self.name,
                ",".join(backends),
            ).get(run_id)
            if row is not None:
                with self.store() as st:
                    _add_charge(row, st.run_charges_by_id().get(run_id))
        if row is not None and "hit_cap" not in row:
            add_facts(row, record, final["files"].folder if final and run else None)
        return {
            "run_id": run_id,
            "cell": cell,
            "run": run,
            "record": record,
            "row": row,
            "attempts": attempts,
            "final": final,
            "scenario": scenario,
            "brief": brief,
            "brief_source": brief_source,
            "conversations": conversations,
            "selfcheck": selfcheck,
            "rubric": _rubric(scenario),
            "judges": _judges(record, scenario),
        }

    def runs_of_scenario(self, scenario_id: str, rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The index rows of one scenario, each with its failed criteria grouped by reason and its E reasons."""
        rows = rows if rows is not None else self.index_rows()
        found = [dict(r) for r in rows if r["scenario"] == scenario_id]
        if not found:
            raise ViewError(f"no runs of scenario {scenario_id!r} in study {self.name}")
        with self.store() as st:
            evals = {
                run_id: (e["criteria_json"], e["E_reasons_json"])
                for run_id, e in st.scenario_evaluations(scenario_id).items()
            }
        from pilot.scenarios import load_scenario
        from pilot.view.oracle_text import for_people

        try:
            specs = {c.id: c for c in load_scenario(scenario_id).oracle.criteria}
        except Exception:  # noqa: BLE001 - a scenario that no longer loads keeps its reasons as the oracle wrote them
            specs = {}
        for r in found:
            crit_json, e_json = evals.get(r["run_id"], (None, None))
            failed = [
                {**c, "reason": for_people(c.get("reason"), specs.get(str(c.get("id"))))}
                for c in json.loads(crit_json or "[]")
                if not c.get("passed")
            ]
            r["failed_criteria"] = failed
            r["failed_groups"] = group_by_reason(failed)
            r["e_reasons"] = [str(x) for x in json.loads(e_json or "[]")]
        return found


def group_by_reason(criteria: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failed criteria with one reason shown once: ``{"reason", "ids", "count"}`` in first-seen order.

    An oracle whose first check fails marks every check that depends on it
    "not checked: X failed"; listing that line seven times hides the one
    reason that matters.
    """
    groups: dict[str, dict[str, Any]] = {}
    for c in criteria:
        reason = str(c.get("reason") or "")
        g = groups.setdefault(reason, {"reason": reason, "ids": [], "count": 0})
        g["ids"].append(str(c.get("id")))
        g["count"] += 1
    return list(groups.values())


def final_attempts(st: ReadOnlyStore) -> dict[str, int]:
    """run id -> the number of the attempt whose record is the run's."""
    return {run_id: int(a["attempt_no"]) for run_id, a in st.final_attempts().items()}


def _violation_kind(reason: str) -> str:
    """``input modified: inputs/x.csv`` -> ``input modified`` (the family of a critical violation)."""
    head = str(reason).split(":", 1)[0].strip()
    return head or "other"


def add_facts(row: dict[str, Any], rec: dict[str, Any], attempt_folder: Path | None) -> dict[str, Any]:
    """What the index asks of a run beyond the run table: sessions, caps hit, tokens, failed criteria, deviations.

    Every key is a plain value or a list of strings except ``tokens_detail``
    (a :class:`pilot.view.usage.Tokens`, or None without a proxy record).
    """
    runs_sessions = [s for s in rec.get("sessions") or [] if isinstance(s, dict)]
    hits = sessions.cap_hits(rec) if rec else []
    row["sessions"] = len(runs_sessions) if rec else None
    row["cap_hits"] = [h.label for h in hits]
    row["cap_kinds"] = sorted({h.cap for h in hits})
    row["hit_cap"] = "; ".join(h.label for h in hits) or None
    row["failed_ids"] = [str(c.get("id")) for c in rec.get("criteria") or [] if not c.get("passed")]
    row["failed_kinds"] = sorted({str(c.get("kind")) for c in rec.get("criteria") or [] if not c.get("passed")})
    row["required_failed_ids"] = [
        str(c.get("id")) for c in rec.get("criteria") or [] if not c.get("passed") and c.get("required", True)
    ]
    row["dev_families"] = sorted(
        {str(d.get("family") or d.get("kind") or "other") for d in rec.get("deviations") or [] if isinstance(d, dict)}
    )
    row["violation_kinds"] = sorted({_violation_kind(r) for r in rec.get("E_reasons") or []})
    tokens = None
    if attempt_folder is not None:
        record = usage.read_usage(attempt_folder)
        tokens = record.tokens() if record.found else None
    row["tokens_detail"] = tokens
    row["tokens"] = tokens.total if tokens is not None else None
    return row


def _add_charge(row: dict[str, Any], charge: tuple[int, bool] | None) -> None:
    """The run's charge (interpretations: cost of a run) beside its reported cost, and whether it is the reservation."""
    row["charge_usd"] = None if charge is None else ledger.to_usd(charge[0])
    row["charge_on_reservation"] = bool(charge and charge[1])


def check_run_id(run_id: str) -> str:
    """``run_id`` if it can name a file or folder (the store's ids always can); a :class:`ViewError` otherwise."""
    if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith(".") or "\0" in run_id:
        raise ViewError(f"run id {run_id!r} cannot name a folder")
    return run_id


def _run_table_rows(cells: list[dict[str, Any]], study_name: str, backend: str) -> dict[str, Any]:
    """run id -> run-table row; a row the run table refuses is reported under ``__errors__`` instead."""
    try:
        rows = outcomes.rows_from_store(cells, study_name=study_name, backend=backend)
        return {r["run_id"]: r for r in rows}
    except (outcomes.OutcomeError, ValueError, KeyError, TypeError, protocol.ProtocolError):
        pass
    out: dict[str, Any] = {"__errors__": {}}
    for c in cells:
        if not c.get("record_json") and c.get("status") != "failed":
            continue  # not run yet: no row, and nothing wrong
        try:
            for r in outcomes.rows_from_store([c], study_name=study_name, backend=backend):
                out[r["run_id"]] = r
        except (outcomes.OutcomeError, ValueError, KeyError, TypeError, protocol.ProtocolError) as exc:
            out["__errors__"][c["run_id"]] = f"not a run-table row: {exc}"
    return out


def _rubric(scenario: Any) -> list[Any]:

    try:
        return list(scenario_criteria(scenario.id))
    except Exception:  # noqa: BLE001 - a rubric problem must not hide the run; the page says the rubric is unreadable
        return []


def _judges(record: dict[str, Any], scenario: Any) -> list[dict[str, Any]]:
    judges = [dict(j) for j in record.get("judges") or []]
    for j in judges:
        j["available"] = not j.get("error") and j.get("score_0_100") is not None
    return judges
