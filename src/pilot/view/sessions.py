"""A run's sessions as a reader asks about them: which caps were hit, by which session, and why a resume was granted.

The run table keeps the run's final censoring (``censor_reason``): after a
recovery resume that is the resume's. A first session that hit its turn cap
and was then resumed is a run that hit a cap all the same, so the viewer
reads every session of the record (:meth:`pilot.agents.session.SessionOutcome.to_dict`)
with the runner's own rules (:func:`pilot.agents.session.classify`): a
resource bound of the sandbox, the outer wall-clock kill after model output,
or the CLI's budget or turn result. The run's own censoring is given to the
session it came from when the session's report alone does not name it (the
model proxy's cost cap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The CLI result subtypes that are caps (``pilot.agents.session.classify``).
CAP_SUBTYPES = {"error_max_budget_usd": "cost", "error_max_turns": "turns"}
#: Each cap in words.
CAP_WORDS = {
    "cost": "the dollar cap",
    "wall": "the wall-clock limit",
    "turns": "the turn cap",
    "memory": "the memory bound",
    "processes": "the process bound",
    "disk": "the disk bound",
    "tmp": "the /tmp bound",
    "stream": "the event-stream bound",
}


def session_label(index: int) -> str:
    """What a session is called on every page: ``session 1 (first session)``, ``session 2 (recovery resume)``."""
    return f"session {index + 1} ({'first session' if index == 0 else 'recovery resume'})"


@dataclass(frozen=True)
class CapHit:
    """One session that reached one cap."""

    session: int  # 0-based, as the record numbers them
    cap: str
    detail: str = ""

    @property
    def label(self) -> str:
        return f"{self.cap} (session {self.session + 1})"

    @property
    def words(self) -> str:
        return f"{session_label(self.session)} reached {CAP_WORDS.get(self.cap, self.cap)}" + (
            f" ({self.detail})" if self.detail else ""
        )


def session_cap(session: dict[str, Any]) -> str | None:
    """The cap one session reached, read from its record as the runner classifies it; None when it reached none."""
    if session.get("start_error"):
        return None
    if session.get("bound"):
        return str(session["bound"])
    if session.get("timed_out") and session.get("model_output", True):
        return "wall"
    return CAP_SUBTYPES.get(str(session.get("result_subtype") or ""))


def final_session(rec: dict[str, Any]) -> int:
    """The session whose ending is the run's (the resume when it ran, otherwise the first)."""
    sessions = rec.get("sessions") or []
    return 1 if rec.get("recovery_used") and len(sessions) > 1 else 0


def cap_hits(rec: dict[str, Any]) -> list[CapHit]:
    """Every session of the run that reached a cap, in session order (the run's own censoring included)."""
    sessions = rec.get("sessions") or []
    hits = []
    for i, s in enumerate(sessions):
        if not isinstance(s, dict):
            continue
        cap = session_cap(s)
        if cap:
            hits.append(CapHit(i, cap, str(s.get("bound_detail") or "")))
    reason = rec.get("censor_reason")
    if rec.get("censored") and reason:
        last = final_session(rec) if sessions else 0
        if not any(h.session == last and h.cap == reason for h in hits):
            hits.append(CapHit(last, str(reason)))
            hits.sort(key=lambda h: h.session)
    return hits


def first_session_problems(rec: dict[str, Any]) -> list[str]:
    """Why the first session called for a resume under the runner's rule: a failed self-check, a cap, an error."""
    sessions = rec.get("sessions") or []
    first = sessions[0] if sessions and isinstance(sessions[0], dict) else {}
    out = []
    if rec.get("selfcheck_first") is False:
        out.append("the first session's deliverables failed the self-check")
    cap = next((h for h in cap_hits(rec) if h.session == 0), None)
    if cap is not None:
        out.append(f"the first session reached {CAP_WORDS.get(cap.cap, cap.cap)}")
    elif first and first.get("api_error_status") is not None:
        out.append(f"the first session ended in an error of the model API (status {first.get('api_error_status')})")
    elif first and (first.get("result_is_error") or first.get("result_subtype") not in (None, "success")):
        out.append(f"the first session ended in an agent error ({first.get('result_subtype') or 'no result'})")
    elif first and first.get("result_subtype") is None and not first.get("timed_out") and first.get("model_output"):
        out.append("the first session ended in an agent error (no result)")
    return out


@dataclass(frozen=True)
class ResumeDecision:
    """The controller's decision on the one recovery resume, in words."""

    granted: bool | None  # None: the arm has no self-check (no decision to take)
    headline: str
    why: str


def resume_decision(rec: dict[str, Any]) -> ResumeDecision:
    """Why the resume was granted, withheld or not needed (``pilot.runner``: a failed self-check, a cap or an error)."""
    if rec.get("selfcheck_first") is None:
        return ResumeDecision(None, "no self-check", "the arm has no self-check and no recovery resume")
    problems = first_session_problems(rec)
    because = "; ".join(problems)
    if rec.get("recovery_used"):
        return ResumeDecision(True, "resume granted", because or "the first session asked for it")
    skipped = rec.get("recovery_skipped")
    if skipped:
        return ResumeDecision(
            False, "resume withheld", f"{skipped}" + (f" (it was called for: {because})" if because else "")
        )
    if problems:
        return ResumeDecision(False, "resume not granted", because + "; no resume is left to the arm")
    return ResumeDecision(
        False, "no resume needed", "the first session completed and its deliverables passed the self-check"
    )
