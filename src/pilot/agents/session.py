"""One agent session's outcome, how it is classified, and how sessions add up to a run.

Both backends (the real CLI and the simulated agent) hand the runner a
:class:`SessionOutcome` per session; :func:`classify` and
:func:`combined_cost` are the one place the rules live:

* **infra_error**: no inference was performed. The process did not start,
  or it ended (error, crash, or the wall limit) before any model output, or
  the API answered an error status before any model output.
* **capped**: the session hit a cap: ``error_max_budget_usd`` (cost),
  ``error_max_turns`` (turns), or the outer wall-clock kill (wall), or a
  resource bound of its sandbox (memory, processes, disk, tmp, stream;
  :mod:`pilot.agents.bounds`). The
  deliverables are evaluated as delivered and the run is censored.
* **agent_error**: inference began and the session then failed
  (``error_during_execution``, an API error after model output, a crash
  without a result). That is an outcome of the run, not a rerun.
* **completed**: a ``success`` result without ``is_error``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pilot.agents.audit import StreamSummary

#: From this CLI version on, a resumed session reports the session's cumulative cost.
CUMULATIVE_RESUME_COST_FROM = (2, 1, 277)

COMPLETED, CAPPED, AGENT_ERROR, INFRA_ERROR = "completed", "capped", "agent_error", "infra_error"
_CAP_SUBTYPES = {"error_max_budget_usd": "cost", "error_max_turns": "turns"}

#: The prompt of the one recovery resume (A4). The first session's prompt is study.yml's.
RESUME_PROMPT = (
    "Your session ended before the assignment was finished; you are resumed once with the remaining "
    "budget and time: read CHECKPOINT.md, run python selfcheck.py, and complete the assignment in BRIEF.md."
)


@dataclass
class SessionOutcome:
    """What one launch of the agent produced."""

    index: int
    summary: StreamSummary
    wall_s: float
    exit_code: int | None = None
    start_error: str | None = None
    timed_out: bool = False
    cli_version: str | None = None
    stderr_tail: str = ""
    resumed_from: str | None = None
    #: The session id the harness gave the CLI (``--session-id``; a resume keeps it): the one resumed, never a streamed
    #: one.
    assigned_session_id: str | None = None
    #: A resource bound the session reached (``pilot.agents.bounds.BOUND_REASONS``) and what was seen.
    bound: str | None = None
    bound_detail: str | None = None
    #: What the harness took back after the session (``pilot.agents.takeback.TakeBack.to_dict``): entries, bytes and
    #: what was removed, with why; None when nothing was handed to the worker.
    taken_back: dict | None = None

    @property
    def result(self) -> dict | None:
        return self.summary.result

    @property
    def session_id(self) -> str | None:
        if self.result and self.result.get("session_id"):
            return str(self.result["session_id"])
        return self.summary.session_ids[-1] if self.summary.session_ids else None

    @property
    def reported_cost(self) -> float | None:
        r = self.result
        if r is None or r.get("total_cost_usd") is None:
            return None
        return float(r["total_cost_usd"])

    def to_dict(self) -> dict:
        r = self.result or {}
        return {
            "index": self.index,
            "session_id": self.session_id,
            "assigned_session_id": self.assigned_session_id,
            "resumed_from": self.resumed_from,
            "bound": self.bound,
            "bound_detail": self.bound_detail,
            "taken_back": self.taken_back,
            "exit_code": self.exit_code,
            "start_error": self.start_error,
            "timed_out": self.timed_out,
            "wall_s": round(self.wall_s, 3),
            "cli_version": self.cli_version,
            "result_subtype": r.get("subtype"),
            "result_is_error": r.get("is_error"),
            "terminal_reason": r.get("terminal_reason"),
            "api_error_status": r.get("api_error_status"),
            "reported_cost_usd": self.reported_cost,
            "num_turns_reported": r.get("num_turns"),
            "model_output": self.summary.model_output,
            "tools_offered": self.summary.tools_available[-1] if self.summary.tools_available else None,
            "turns": self.summary.turns,
            "tool_calls": len(self.summary.tool_calls),
            "stderr_tail": self.stderr_tail[-2000:],
        }


@dataclass(frozen=True)
class Classification:
    status: str
    censor_reason: str | None = None
    infra_error: str | None = None
    detail: str = ""

    @property
    def censored(self) -> bool:
        return self.status == CAPPED


def _tail(s: SessionOutcome) -> str:
    t = s.stderr_tail.strip().splitlines()
    return f": {t[-1][:300]}" if t else ""


def classify(s: SessionOutcome) -> Classification:
    """The status of one session under the rules of the module docstring."""
    if s.start_error:
        return Classification(INFRA_ERROR, infra_error=f"start_failed: {s.start_error}")
    if s.bound:
        # The worker reached a resource bound of its sandbox: censored at that bound, deliverables as delivered.
        return Classification(CAPPED, censor_reason=s.bound, detail=s.bound_detail or "")
    r = s.result
    sub = (r or {}).get("subtype")
    if not s.summary.model_output:
        if r is not None and sub in _CAP_SUBTYPES:
            return Classification(CAPPED, censor_reason=_CAP_SUBTYPES[sub])
        if r is not None and sub == "success" and not r.get("is_error"):
            return Classification(COMPLETED)
        if r is not None and r.get("api_error_status") is not None:
            return Classification(
                INFRA_ERROR, infra_error=f"api_error_status {r['api_error_status']} before any model output"
            )
        if s.timed_out:
            return Classification(INFRA_ERROR, infra_error="no model output before the wall limit")
        if r is not None:
            return Classification(INFRA_ERROR, infra_error=f"error result ({sub}) before any model output")
        return Classification(
            INFRA_ERROR, infra_error=f"exited with code {s.exit_code} before any model output{_tail(s)}"
        )
    if s.timed_out:
        return Classification(CAPPED, censor_reason="wall")
    if r is None:
        return Classification(
            AGENT_ERROR, detail=f"exited with code {s.exit_code} without a result after inference began{_tail(s)}"
        )
    if sub in _CAP_SUBTYPES:
        return Classification(CAPPED, censor_reason=_CAP_SUBTYPES[sub])
    if sub == "success" and not r.get("is_error"):
        return Classification(COMPLETED)
    if r.get("api_error_status") is not None:
        return Classification(AGENT_ERROR, detail=f"API error status {r['api_error_status']} after inference began")
    return Classification(AGENT_ERROR, detail=f"{sub or 'error'}: {'; '.join(map(str, r.get('errors') or []))[:300]}")


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    nums = re.findall(r"\d+", version)
    return tuple(int(x) for x in nums[:3]) if len(nums) >= 3 else None


def resume_reports_cumulative(version: str | None) -> bool:
    """Whether a resumed session's ``total_cost_usd`` already includes the sessions before it."""
    v = version_tuple(version)
    return v is not None and v >= CUMULATIVE_RESUME_COST_FROM


@dataclass
class CostAccount:
    """The run's agent cost over its sessions, with how it was reckoned."""

    total_usd: float | None
    per_session_usd: list[float | None] = field(default_factory=list)
    method: str = ""
    complete: bool = True


def combined_cost(sessions: list[SessionOutcome]) -> CostAccount:
    """The parent run's cost: neither double- nor under-counting a resume.

    From CLI 2.1.277 on, a resume reports the session's cumulative total, so
    the parent cost is the last report; before that each process starts from
    zero, so the reports add up. A session without a result (killed, crashed)
    leaves its own spend unknown: a later cumulative report still covers it,
    otherwise the total is marked incomplete (a lower bound).
    """
    if not sessions:
        return CostAccount(None, [], "no session", False)
    first = sessions[0]
    total = first.reported_cost
    per = [first.reported_cost]
    complete = first.reported_cost is not None
    method = "single session"
    for s in sessions[1:]:
        rep = s.reported_cost
        if resume_reports_cumulative(s.cli_version):
            method = f"cumulative resume report (CLI {s.cli_version})"
            if rep is None:
                per.append(None)
                complete = False
                continue
            per.append(rep - total if total is not None else None)
            total, complete = rep, True
        else:
            method = f"sum of session reports (CLI {s.cli_version})"
            per.append(rep)
            if rep is None:
                complete = False
            else:
                total = (total or 0.0) + rep
    return CostAccount(total, per, method, complete)
