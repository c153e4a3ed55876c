"""The human wave's run table: one row per evaluated session, the agent run table's columns plus time on task.

Rows come from the study's store through :func:`pilot.outcomes.rows_from_store`,
the code that makes the agent run table, so D, E, Q, S, C and H of a human
run are computed exactly as an agent run's. The table is validated by the
run table's own rules (:func:`pilot.runtable.validate_runtable`) with the
human conditions as its arms, and carries, besides the schema's columns,
``time_on_task_s``, ``active_s``, ``intervention_minutes`` and the H1
assistant's ``assistant_requests``, ``assistant_tokens`` and
``assistant_cost_usd``. No contact and no participant id is in it: a row
names its run (scenario, condition, wave, repeat) and nothing of the person.

Sessions not yet evaluated are left out (they are not runs yet), and so are
the runs of participants who withdrew after the analysis had started; both
are counted and said.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pilot import outcomes, paths, protocol, runtable
from pilot.human import store
from pilot.human.withdraw import withdrawn_run_ids
from pilot.store import HUMAN_WAVE, atomic_write_text


class HumanExportError(RuntimeError):
    """The human wave's table cannot be written (no evaluated session); the message says why."""


@dataclass(frozen=True)
class HumanTable:
    """The table and what was left out of it."""

    table: pd.DataFrame
    pending: int
    withdrawn: int


def human_table(study_folder: Path) -> HumanTable:
    """The human wave's run table of the study in ``study_folder`` (every wave's evaluated sessions)."""
    with store.open_store(Path(study_folder)) as st:
        info = st.study()
        excluded = withdrawn_run_ids(st)
        rows = [r for r in st.finished_rows() if r["wave"] == HUMAN_WAVE]
    done = [r for r in rows if r.get("record_json") and r["run_id"] not in excluded]
    pending = sum(1 for r in rows if not r.get("record_json"))
    if not done:
        raise HumanExportError(
            f"study {info.name} has no evaluated human session yet ({pending} assigned, not evaluated)"
        )
    table = pd.DataFrame(outcomes.rows_from_store(done, study_name=info.name, backend="human"))
    names = [c.name for c in runtable.columns()]
    table = table[names + [c for c in table.columns if c not in names]]
    study = protocol.study()
    runtable.validate_runtable(
        table, source="human run table (pilot.human.export)", arms=study["human_wave"]["conditions"]
    )
    return HumanTable(table, pending, len(excluded))


def export_human_table(study_folder: Path, out: Path | None = None) -> tuple[Path, HumanTable]:
    """Write the human wave's run table (``human_runs.csv`` in the study's folder by default), atomically."""
    made = human_table(study_folder)
    target = Path(out) if out is not None else Path(study_folder) / paths.HUMAN_RUNS_FILE_NAME
    atomic_write_text(target, made.table.to_csv(index=False))
    return target, made


def read_human_table(path: Path) -> pd.DataFrame:
    """Read and validate an exported human run table (the run table's rules, the conditions as arms)."""
    path = Path(path)
    if not path.is_file():
        raise runtable.RunTableError(str(path), None, "file not found")
    raw = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=list(runtable.MISSING_SPELLINGS))
    conditions = protocol.study()["human_wave"]["conditions"]
    return runtable.validate_runtable(raw, source=path, arms=conditions)
