"""The run record: everything one attempt produced that the run table and the audit need.

The runner writes it (:func:`pilot.runner.run_attempt`), the pipeline adds the
judges' results to it (:func:`pilot.pipeline.judge_record`), the store keeps it
as JSON (``runs.record_json``) and :func:`pilot.outcomes.run_row` reads it back
by attribute to make the run's row of the run table. :meth:`RunRecord.from_dict`
is the one reader of a stored record: it restores the types JSON loses (exact
money, non-finite floats) and gives a field that a record written by an earlier
harness lacks its "not recorded" value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from decimal import Decimal
from typing import Any

#: How the runner noted an evaluation that could not run in full on a record written before ``eval_error`` existed.
EVAL_ERROR_NOTE = "evaluation could not run in full: "

#: The value of a field a stored record lacks (written before the field existed, or a run that never started), for
#: the fields the runner must always give.
_NOT_RECORDED: dict[str, Any] = {
    "scenario": "",
    "arm": "",
    "model": "",
    "backend": "",
    "seed": 0,
    "status": "infra_error",
    "censored": False,
    "censor_reason": None,
    "infra_error": None,
    "agent_error": None,
    "cost_usd": None,
    "cost_complete": True,
    "cost_method": "",
    "recovery_cost_usd": None,
    "wall_s": math.nan,
    "turns": 0,
    "tool_calls": 0,
    "tool_calls_by_tool": {},
    "questions": None,
    "deviations": [],
    "D": None,
    "E": None,
    "E_reasons": [],
    "criteria_passed": None,
    "criteria_total": None,
    "criteria": [],
    "selfcheck_first": None,
    "recovery_used": False,
    "recovery_skipped": None,
    "selfcheck_final": None,
    "cli_version": None,
    "caps_usd": math.nan,
    "caps_wall_s": math.nan,
    "max_turns": 0,
    "workspace": "",
    "transcript": "",
}
#: Counts a stored record may give as the list of the things counted.
_COUNTS = ("turns", "tool_calls", "questions")
#: Floats the JSON holds as null when they were not finite (:meth:`RunRecord.to_dict`).
_FLOATS = ("wall_s", "caps_usd", "caps_wall_s", "harness_s")


class RecordError(ValueError):
    """A stored run record that cannot be read as one; names the field and the reason."""


@dataclass
class RunRecord:
    """Everything one attempt produced that the run table and the audit need."""

    scenario: str
    arm: str
    model: str
    backend: str
    seed: int
    status: str
    censored: bool
    censor_reason: str | None
    infra_error: str | None
    agent_error: str | None
    cost_usd: float | None
    cost_complete: bool
    cost_method: str
    recovery_cost_usd: float | None
    wall_s: float
    turns: int
    tool_calls: int
    tool_calls_by_tool: dict[str, int]
    questions: int | None
    deviations: list[dict]
    D: bool | None
    E: bool | None
    E_reasons: list[str]
    criteria_passed: int | None
    criteria_total: int | None
    criteria: list[dict]
    selfcheck_first: bool | None
    recovery_used: bool
    recovery_skipped: str | None
    selfcheck_final: bool | None
    cli_version: str | None
    caps_usd: float
    caps_wall_s: float
    max_turns: int
    workspace: str
    transcript: str
    sessions: list[dict] = field(default_factory=list)
    completion_record_valid: bool | None = None
    completion_status: str | None = None
    #: bubblewrap | sandbox-exec | unisolated (development opt-in) | "" (the simulated backend)
    enforcement: str = ""
    #: The model proxy's metered cost of the run (exact); ``cost_usd`` stays the client's report.
    metered_cost_usd: Decimal | None = None
    metered_requests: int | None = None
    worker_env: dict | None = None
    portal: dict | None = None
    #: Requests to the run's portal (health checks excluded), from its access log; None without a portal.
    portal_requests: int | None = None
    #: The run's portal was not answering at the end of the run; None without a portal.
    portal_fault: bool | None = None
    started_at: str = ""
    harness_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: Why the evaluation itself could not run in full (LibreOffice unavailable ...); None when it ran.
    eval_error: str | None = None
    #: The input hashes taken when the workspace was laid out (the E check's reference).
    input_hashes: dict[str, str] | None = None
    #: SHA-256 of the workspace's manifest when the agent was done, before evaluation (see :func:`record_workspace`),
    #: and its number of entries; None on records written before they were kept.
    workspace_sha256: str | None = None
    workspace_entries: int | None = None
    #: Set when the verdict comes from ``pilot study reevaluate``: when, how many times, and the earlier error.
    reevaluation: dict | None = None
    #: The harness failed after inference began (its phase and the failure): the run stands as delivered, not rerun.
    harness_fault: str | None = None
    #: Bytes of the worker's files the runner read in this attempt (through :mod:`pilot.worker_files`; the judges'
    #: rendering comes after the record is written).
    worker_bytes_read: int | None = None
    #: The blind judges' results (one ``JudgeResult.to_dict()`` per panel member), their cost and why judging failed;
    #: None until the pipeline judged the run (an infrastructure error is never judged).
    judges: list[dict[str, Any]] | None = None
    judge_cost_usd: float | None = None
    judge_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None
            elif isinstance(v, Decimal):
                d[k] = str(v)  # money stays exact: a decimal string, never a float
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        """The record a stored dict holds (``to_dict`` read back from JSON, or a record of an earlier harness).

        A field the dict lacks takes its "not recorded" value (None, empty, or the default the field declares); a count
        given as the list of the things counted is that list's length; ``E_reasons`` given as one string is a list of
        it; a metered cost given as a decimal string is a Decimal again; ``eval_error`` of a record written before
        the field existed is read from its notes (:func:`evaluation_error`). Keys no field names are left out.
        """
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in data:
                values[f.name] = data[f.name]
            elif f.name in _NOT_RECORDED:
                values[f.name] = _NOT_RECORDED[f.name]
            elif f.default_factory is not MISSING:
                values[f.name] = f.default_factory()
            else:
                values[f.name] = f.default
        values["status"] = values["status"] or "infra_error"
        for name in _COUNTS:
            if isinstance(values[name], (list, tuple)):
                values[name] = len(values[name])
        for name in _FLOATS:
            if values[name] is None:
                values[name] = math.nan
        reasons = values["E_reasons"]
        values["E_reasons"] = ([reasons] if reasons else []) if isinstance(reasons, str) else list(reasons or [])
        for name in ("deviations", "notes", "criteria", "sessions"):
            value = values[name]
            if value is None:
                values[name] = []
            elif not isinstance(value, (list, tuple)):
                raise RecordError(f"field '{name}': expected a list, got {type(value).__name__}")
        if values["metered_cost_usd"] is not None:
            values["metered_cost_usd"] = Decimal(str(values["metered_cost_usd"]))
        values["eval_error"] = evaluation_error(data)
        return cls(**values)


def evaluation_error(record: Mapping[str, Any]) -> str | None:
    """Why the run's evaluation could not run in full, or None when it ran.

    From ``eval_error``; a record written before that field existed (no such key) says it in its notes.
    """
    given = record.get("eval_error")
    if isinstance(given, str) and given.strip():
        return given.strip()
    if "eval_error" in record:
        return None  # the field is kept: its None is the answer (a re-evaluated record keeps its old notes in history)
    notes = [str(n)[len(EVAL_ERROR_NOTE) :] for n in record.get("notes") or [] if str(n).startswith(EVAL_ERROR_NOTE)]
    return "; ".join(notes) or None
