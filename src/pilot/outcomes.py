"""The outcomes of one run: one row of the run table.

From a run's record (:class:`pilot.run_record.RunRecord`, as the runner wrote
it with the judges' results under ``judges``, read back from the store by
:meth:`~pilot.run_record.RunRecord.from_dict`) and its cell (run id, wave,
seed, order, node, attempts), :func:`run_row` computes every run-table column
of :mod:`pilot.runtable`:

- D, E and the oracle counts as the evaluator reported them;
- each judge's rubric-weighted score on 0-100 (``Q_<judge>``), missing when
  that judge is; Q, their mean over the available judges, missing (never
  zero) when none is; S = 1{D, not E, Q >= q} at the protocol's q, missing
  with Q; the accept votes. Q and S are computed exactly (rationals, see
  :func:`exact_quality`); the table stores Q truncated to whole micro-points
  (:data:`Q_DECIMALS`), which cannot move it across any threshold stated in
  micro-points;
- C (agent cost, recovery included; missing, never zero, when the client
  did not report it, e.g. a session killed at the wall limit) and the
  judges' cost;
- H = intervention minutes + minutes per unanswered question x questions
  (``protocol/study.yml`` ``outcomes``);
- wall time, censoring, turns, tool calls, questions, deviations, the
  self-check and recovery fields, and the scenario's designed depth and
  professional minutes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from pilot import protocol
from pilot.run_record import RunRecord, evaluation_error

if TYPE_CHECKING:  # pandas loads with the run table, not in every attempt's process
    import pandas as pd

COMPLETION_STATUSES = ("completed", "partial", "abandoned")
#: The most of a completion record read to learn its status (the oracle's limit for a deliverable).
COMPLETION_RECORD_MAX_BYTES = 50 * 1024 * 1024
# A run whose every attempt failed on infrastructure: it has no outcome at all.
FAILED_STATUS = "infra_error"
# What a failed run's row keeps: who and where it was, and the scenario's own properties; every outcome is empty.
_FAILED_ROW_KEEPS = frozenset(
    {
        "run_id",
        "study",
        "backend",
        "scenario",
        "occupation",
        "arm",
        "repeat",
        "model",
        "wave",
        "seed",
        "order_index",
        "node",
        "attempts",
        "status",
        "designed_depth",
        "professional_minutes",
        "charged_usd",
    }
)
# Q is stored truncated (never rounded up) to this many decimals: a stored Q meets a threshold
# with at most this many decimals exactly when the exact Q does.
Q_DECIMALS = 6
# A judge's score is 25 x (sum of thousandth-weights x grades) / (sum of thousandth-weights)
# (weights have at most three decimals, pilot.judges.rubric): a rational whose denominator is at
# most 10^6 while the weights sum to at most 1000. Two such rationals differ by at least 10^-12,
# far more than a float's error at 0-100 (< 10^-14), so the nearest one recovers the score exactly.
SCORE_DENOMINATOR = 10**6


class OutcomeError(ValueError):
    """A run record that cannot become a run-table row; names the run and the field."""

    def __init__(self, run_id: str, field: str, reason: str) -> None:
        self.run_id, self.field, self.reason = run_id, field, reason
        super().__init__(f"run {run_id}: field '{field}': {reason}")


def _count(value: Any) -> int:
    """A count given as a number or as the list of the things counted."""
    if value is None:
        return 0
    if isinstance(value, (list, tuple)):
        return len(value)
    return int(value)


def _opt_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _finite(value: Any, default: float = 0.0) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return default
    return f if math.isfinite(f) else default


def agent_cost(record: RunRecord) -> float | None:
    """C, the agent's cost: None (missing, never zero) when the client did not report all of it.

    A session killed at the wall limit prints no result, so the runner
    records ``cost_usd`` None or, after a resume, a partial sum with
    ``cost_complete`` false; neither is the run's cost. An infrastructure
    error performed no inference by definition, so its cost is zero.
    """
    value = record.cost_usd
    cost = None if value is None or isinstance(value, bool) else _finite(value, math.nan)
    if cost is not None and math.isfinite(cost) and record.cost_complete is not False:
        return cost
    if record.status == "infra_error" and value is None:
        return 0.0
    return None


def judge_scores(judges: Iterable[Any], panel_ids: Iterable[str]) -> dict[str, float | None]:
    """judge id -> score on 0-100, None where the judge is missing (error, no score, absent)."""
    by_id: dict[str, Any] = {}
    for j in judges:
        d = j.to_dict() if hasattr(j, "to_dict") else dict(j)
        by_id[str(d.get("judge_id"))] = d
    out: dict[str, float | None] = {}
    for jid in panel_ids:
        d = by_id.get(jid)
        score = None if d is None or d.get("error") else d.get("score_0_100")
        out[jid] = None if score is None or not math.isfinite(float(score)) else float(score)
    return out


def exact_judge_score(score: float | Fraction) -> Fraction:
    """A judge's 0-100 score as the exact rational it stands for (see :data:`SCORE_DENOMINATOR`)."""
    if isinstance(score, Fraction):
        return score
    exact = Fraction(float(score)).limit_denominator(SCORE_DENOMINATOR)
    if abs(float(exact) - float(score)) > 1e-12:  # not a rubric score: refuse rather than guess
        raise ValueError(
            f"judge score {score!r} is not a rubric score (a rational with denominator at most {SCORE_DENOMINATOR})"
        )
    return exact


def exact_quality(scores: Mapping[str, float | Fraction | None]) -> Fraction | None:
    """Q exactly: the mean of the available judges' exact scores; None when none is."""
    vals = [exact_judge_score(s) for s in scores.values() if s is not None]
    return sum(vals, Fraction(0)) / len(vals) if vals else None


def stored_quality(Q: Fraction | float | None) -> float | None:
    """Q as the run table stores it: truncated to :data:`Q_DECIMALS` decimals (never rounded up)."""
    if Q is None:
        return None
    unit = 10**Q_DECIMALS
    return float(Fraction(math.floor(Fraction(Q) * unit), unit))


def quality(scores: Mapping[str, float | None]) -> float | None:
    """Q as stored in the run table (:func:`exact_quality`, then :func:`stored_quality`); None when no judge is
    available."""
    return stored_quality(exact_quality(scores))


def acceptance(D: bool, E: bool, Q: Fraction | float | None, q: float) -> bool | None:
    """S = 1{D, not E, Q >= q}, compared exactly (q as the decimal it is stated as); None (missing, not zero) when Q is
    missing."""
    if Q is None:
        return None
    return bool(D) and not bool(E) and Fraction(Q) >= Fraction(repr(float(q)))


def human_minutes(questions: int, study: protocol.Study | None = None) -> float:
    """H: intervention minutes plus the stated minutes per unanswered question."""
    o = (study or protocol.study())["outcomes"]
    return float(o["intervention_minutes"]) + float(o["human_minutes_per_question"]) * int(questions)


def completion_status(record: RunRecord) -> str:
    """The status the completion record states, or ``missing`` when there is no valid one."""
    status = record.completion_status
    if status in COMPLETION_STATUSES:
        return str(status)
    ws = record.workspace
    if ws:
        # The worker's file, read beneath its workspace by the bounded reader: no link followed, nothing but a
        # regular file opened, at most a deliverable's size read.
        from pilot import worker_files

        try:
            raw = worker_files.read_bytes(ws, "outputs/completion_record.json", max_bytes=COMPLETION_RECORD_MAX_BYTES)
            status = json.loads(raw.decode("utf-8")).get("status")
        except (worker_files.Refused, OSError, ValueError, AttributeError, RecursionError):
            status = None
        if status in COMPLETION_STATUSES:
            return str(status)
    return "missing"


def unevaluated_rows(rows: Iterable[Mapping[str, Any]], wave: str | None = None) -> list[Mapping[str, Any]]:
    """The finished runs among store rows (:meth:`pilot.store.Store.finished_rows`, of ``wave`` or all) whose current
    record has an evaluation error: done, yet no verdict."""
    return [
        r
        for r in rows
        if r["status"] == "done"
        and r.get("record_json")
        and (wave is None or r["wave"] == wave)
        and evaluation_error(json.loads(r["record_json"])) is not None
    ]


def run_row(
    record: RunRecord,
    *,
    run_id: str,
    study_name: str,
    backend: str,
    wave: str,
    repeat: int,
    seed: int,
    order_index: int,
    node: str,
    attempts: int,
    scenario: Any = None,
    study: protocol.Study | None = None,
) -> dict[str, Any]:
    """One run-table row from a run record and its cell.

    ``scenario`` (a loaded scenario, or None to load it by the record's
    ``scenario`` id) gives the occupation, designed depth and professional
    minutes. ``record`` may be empty for a run whose every attempt failed
    on infrastructure: the row then says so (status ``infra_error``) and
    every outcome column is empty, costs included (the ledger's charge is
    in ``charged_usd`` where the caller knows it); the analyses drop such
    rows and count them (:func:`pilot.runtable.validate_runtable`).
    """
    study = study or protocol.study()
    rec = record
    panel_ids = [j["id"] for j in study.judge_panel]
    sid = rec.scenario or getattr(scenario, "id", None)
    if not sid:
        raise OutcomeError(run_id, "scenario", "the record names no scenario and none was given")
    if scenario is None:
        from pilot.scenarios import load_scenario

        scenario = load_scenario(sid)
    if getattr(scenario, "id", sid) != sid:
        raise OutcomeError(run_id, "scenario", f"record is for {sid} but scenario {scenario.id} was given")

    status = rec.status
    if status not in ("completed", "capped", "agent_error", "infra_error"):
        raise OutcomeError(run_id, "status", f"{status!r} is not a run status")
    for key, given in (("D", rec.D), ("E", rec.E)):
        if status != "infra_error" and given is None:
            raise OutcomeError(run_id, key, "the evaluator's result is missing")
    D, E = bool(rec.D), bool(rec.E)

    scores = judge_scores(rec.judges or [], panel_ids)
    Q_exact = exact_quality(scores)
    Q = stored_quality(Q_exact)
    judges = [dict(j) for j in rec.judges or []]
    votes = sum(1 for j in judges if not j.get("error") and j.get("score_0_100") is not None and j.get("accept"))
    judge_cost = sum(_finite(j.get("cost_usd")) for j in judges)
    if rec.judge_cost_usd is not None:
        judge_cost = _finite(rec.judge_cost_usd)

    questions = _count(rec.questions)
    criteria_total = rec.criteria_total
    if criteria_total is None:
        criteria_total = len(getattr(getattr(scenario, "oracle", None), "criteria", ()) or ()) or 1
    censored = bool(rec.censored)
    cost = agent_cost(rec)

    row: dict[str, Any] = {
        "run_id": run_id,
        "study": study_name,
        "backend": backend,
        "scenario": sid,
        "occupation": getattr(scenario, "occupation", ""),
        "arm": rec.arm or None,
        "repeat": int(repeat),
        "model": rec.model or study["worker"]["model"],
        "wave": wave,
        "seed": int(seed),
        "order_index": int(order_index),
        "node": node,
        "attempts": int(attempts),
        "D": D,
        "E": E,
        "E_reasons": "; ".join(str(r) for r in rec.E_reasons) if rec.E_reasons else None,
        "criteria_passed": int(rec.criteria_passed or 0),
        "criteria_total": int(criteria_total),
        "Q": Q,
    }
    for jid in panel_ids:
        row[f"Q_{jid}"] = scores[jid]
    row.update(
        {
            "n_judges": sum(1 for s in scores.values() if s is not None),
            "judge_accept_votes": votes,
            "S": acceptance(D, E, Q_exact, study.q),
            "cost_usd": cost,
            "judge_cost_usd": judge_cost,
            "wall_s": _finite(rec.wall_s),
            "turns": _count(rec.turns),
            "tool_calls": _count(rec.tool_calls),
            "questions": questions,
            "H_minutes": human_minutes(questions, study),
            "censored": censored,
            "censor_reason": rec.censor_reason if censored else None,
            "status": "capped" if censored else status,
            "completion_status": completion_status(rec),
            "selfcheck_first": _opt_bool(rec.selfcheck_first),
            "recovery_used": bool(rec.recovery_used),
            "selfcheck_final": _opt_bool(rec.selfcheck_final),
            "designed_depth": int(getattr(scenario, "designed_depth", 1)),
            "professional_minutes": float(getattr(scenario, "professional_minutes", 0.0)),
            # How the agent's access was enforced; a dry run has none.
            "enforcement": rec.enforcement or None,
            # Beyond the schema's columns, carried along for the process analyses.
            "deviations": len(rec.deviations),
            "cost_complete": cost is not None,
            # The model proxy's metered agent cost beside C (what the ledger charged); missing where nothing metered it.
            "metered_cost_usd": None if rec.metered_cost_usd is None else _finite(rec.metered_cost_usd),
            # Requests to the run's portal (A3/A4 on portal scenarios); missing where there was no portal.
            "portal_requests": rec.portal_requests,
            # The portal was not answering at the end of the run (a note on the run); missing where there was no portal.
            "portal_fault": rec.portal_fault,
            "judge_backend": judges[0].get("backend") if judges else None,
            # The evaluation itself could not run in full: D and E are then no verdict (analysis leaves the run out).
            "eval_error": rec.eval_error,
            # The current verdict was given by `pilot study reevaluate` (its time); missing for a run's first
            # evaluation.
            "reevaluated_at": (rec.reevaluation or {}).get("at"),
            # The harness failed after inference began: the run stands as delivered (never rerun), and says so here.
            "harness_fault": rec.harness_fault or None,
        }
    )
    for jid in panel_ids:
        j = next((j for j in judges if j.get("judge_id") == jid), None)
        row[f"accept_{jid}"] = None if j is None or j.get("error") or j.get("accept") is None else bool(j["accept"])
    if status == FAILED_STATUS:
        row = {k: (v if k in _FAILED_ROW_KEEPS else None) for k, v in row.items()}
    return row


def run_table(rows: Iterable[Mapping[str, Any]], study: protocol.Study | None = None) -> pd.DataFrame:
    """The run table from rows of :func:`run_row`, validated by :mod:`pilot.runtable`."""
    import pandas as pd

    from pilot import runtable

    df = pd.DataFrame(list(rows))
    names = [c.name for c in runtable.columns(study)]
    df = df[names + [c for c in df.columns if c not in names]]
    runtable.validate_runtable(df, source="run table (pilot.outcomes)", study=study)
    return df


def rows_from_store(
    finished_rows: Iterable[Mapping[str, Any]], *, study_name: str, backend: str, study: protocol.Study | None = None
) -> list[dict[str, Any]]:
    """Run-table rows from :meth:`pilot.store.Store.finished_rows` (cells joined with their records).

    A cell that finished carries its record; a cell whose every attempt failed
    on infrastructure becomes a row with status ``infra_error``; a cell not
    yet run is left out (it is not a run yet).
    """
    out = []
    scenarios: dict[str, Any] = {}
    for r in finished_rows:
        if r.get("record_json"):
            rec = json.loads(r["record_json"])
        elif r.get("status") == "failed":
            rec = {"scenario": r["scenario"], "arm": r["arm"], "model": r["model"], "status": "infra_error"}
        else:
            continue
        rec.setdefault("scenario", r["scenario"])
        rec.setdefault("arm", r["arm"])
        rec.setdefault("model", r["model"])
        if rec.get("judge_cost_usd") is None and r.get("run_judge_cost_usd") is not None:
            rec["judge_cost_usd"] = r["run_judge_cost_usd"]
        record = RunRecord.from_dict(rec)
        sid = record.scenario
        if sid not in scenarios:
            from pilot.scenarios import load_scenario

            scenarios[sid] = load_scenario(sid)
        out.append(
            run_row(
                record,
                run_id=r["run_id"],
                study_name=study_name,
                backend=backend,
                wave=r["wave"],
                repeat=r["repeat"],
                seed=r["seed"],
                order_index=r["order_index"],
                node=r.get("node") or "",
                attempts=max(int(r.get("attempts") or 1), 1),
                scenario=scenarios[sid],
                study=study,
            )
        )
        if r.get("charged_micro") is not None:
            out[-1]["charged_usd"] = int(r["charged_micro"]) / 1_000_000
    return out
