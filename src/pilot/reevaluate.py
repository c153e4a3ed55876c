"""Evaluate again, in place, the finished runs whose evaluation could not run (``pilot study reevaluate``).

A finished run whose evaluation could not run in full (LibreOffice
unavailable, the guarded reader could not start, the evaluator failed) has
``eval_error`` on its record and no verdict: the analyses leave it out
(protocol/interpretations.md, "Evaluation errors are not verdicts"). Its
workspace is kept. This module gives such a run its verdict:

- **Selection.** By default every finished run whose current record has an
  evaluation error; or the runs named. A named run that has a verdict, or
  that is not finished (waiting, in flight, failed on infrastructure: those
  are for ``pilot study run`` and ``pilot study retry``), is refused with the
  reason, and nothing is done. There is no flag to re-evaluate a verdict
  that stands: on a frozen oracle and an unchanged workspace it can only
  differ through the machine, and choosing which verdicts to redo would be a
  forking path.
- **Trust.** The runner records a digest of the whole workspace when the
  agent is done, before anything reads it (``workspace_sha256``, and the
  manifest ``workspace_manifest.json`` beside the workspace). A run whose
  workspace is missing, or differs from that digest (before or after the
  evaluation), is refused, naming what changed; so is a record older than
  the digest. The oracle must be the study's: when the frozen protocol
  changed since the pilot started (:mod:`pilot.freeze`), nothing is
  re-evaluated.
- **Evaluation.** Exactly the runner's (:func:`pilot.runner.evaluate_finished`:
  input-hash check against the hashes taken at layout, the oracle, the
  guarded reader), on the kept workspace. The agent never runs again. The
  judges ran when the run finished (the pipeline judges every run that is
  not an infrastructure error, and their rendering needs neither LibreOffice
  nor the oracle), so their grades are kept and nothing is spent.
- **Store.** :meth:`pilot.store.Store.replace_evaluation`: in one
  transaction the earlier record goes to the ``reevaluations`` history and
  the new one becomes the run's current record. A kill at any point leaves
  the old state or the new one; the command run again finishes the job, and
  a run that got its verdict is no longer selected. An evaluation that fails
  again leaves the run with its (updated) ``eval_error``, still out of the
  estimates.

The study's lock is held throughout, so no scheduler runs the study meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pilot import backends, study_freeze
from pilot.outcomes import unevaluated_rows
from pilot.run_record import EVAL_ERROR_NOTE, evaluation_error
from pilot.store import Store, atomic_write_text, now

#: The file each re-evaluation writes beside the attempt's ``evaluation.json`` (which is kept).
REEVALUATION_FILE = "reevaluation-{n}.json"
#: How many changed workspace entries a refusal names.
SHOWN_CHANGES = 5


class ReevaluationError(RuntimeError):
    """The re-evaluation cannot start (a named run is not eligible, the protocol changed); nothing was changed."""


@dataclass
class Candidate:
    """One run selected for re-evaluation, and why it is refused if it is."""

    run_id: str
    wave: str
    scenario: str
    arm: str
    eval_error: str
    attempt_dir: Path
    workspace: Path
    record_json: str = field(repr=False)
    refused: str | None = None


@dataclass
class Result:
    """What happened to one run: ``verdict``, ``eval_error`` (evaluated again, could not run again), ``refused``
    or ``would_reevaluate`` (a dry run)."""

    run_id: str
    scenario: str
    arm: str
    outcome: str
    previous_eval_error: str
    D: bool | None = None
    E: bool | None = None
    eval_error: str | None = None
    reason: str | None = None
    reevaluation: int | None = None
    #: Why the run's judges are missing, when judging failed as the run finished (they are not run again).
    judge_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _record(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["record_json"])


def unevaluated(store: Store, wave: str | None = None) -> list[str]:
    """The finished runs (of ``wave``, or all) whose current record has an evaluation error, in seeded order."""
    return [r["run_id"] for r in unevaluated_rows(store.finished_rows(), wave)]


def select(store: Store, run_ids: Iterable[str] | None = None, wave: str | None = None) -> list[Candidate]:
    """The runs to re-evaluate: every finished run with an evaluation error, or the named ones (each must be one).

    A named run that is not eligible raises :class:`ReevaluationError` naming it and the reason; nothing is selected
    then.
    """
    rows = {r["run_id"]: r for r in store.finished_rows()}
    wanted = list(dict.fromkeys(run_ids)) if run_ids else None
    if wanted is not None:
        problems = []
        for rid in wanted:
            r = rows.get(rid)
            if r is None:
                problems.append(f"run {rid}: no such run in study {store.study().name}")
            elif r["status"] == "failed":
                problems.append(
                    f"run {rid}: it failed on infrastructure and has no finished record; "
                    f"that is for `pilot study retry {store.study().name} {rid}`"
                )
            elif r["status"] != "done" or not r.get("record_json"):
                problems.append(f"run {rid}: it is {r['status']}, not finished; `pilot study run` finishes it")
            elif wave is not None and r["wave"] != wave:
                problems.append(f"run {rid}: it is in wave {r['wave']}, not {wave}")
            elif evaluation_error(_record(r)) is None:
                rec = _record(r)
                problems.append(
                    f"run {rid}: its evaluation ran (D={int(bool(rec.get('D')))}, E={int(bool(rec.get('E')))}); "
                    "a verdict that stands is never re-evaluated"
                )
        if problems:
            raise ReevaluationError("nothing re-evaluated: " + "; ".join(problems))
        chosen = [rows[rid] for rid in wanted]
    else:
        chosen = unevaluated_rows(rows.values(), wave)
    out = []
    finals = store.final_attempts()
    for r in chosen:
        rec = _record(r)
        attempt_dir = Path(finals[r["run_id"]]["workspace"])
        workspace = Path(rec.get("workspace") or attempt_dir / "workspace")
        cand = Candidate(
            r["run_id"],
            r["wave"],
            r["scenario"],
            r["arm"],
            str(evaluation_error(rec)),
            attempt_dir,
            workspace,
            r["record_json"],
        )
        cand.refused = untrusted(rec, attempt_dir, workspace)
        out.append(cand)
    return out


def untrusted(rec: dict[str, Any], attempt_dir: Path, workspace: Path) -> str | None:
    """Why the workspace cannot be taken as the one the run left; None when its digest matches the record's."""
    from pilot import runner
    from pilot.oracles.hashing import compare_hashes

    digest = rec.get("workspace_sha256")
    if not digest or not isinstance(rec.get("input_hashes"), dict):
        return (
            "its record holds no digest of the workspace the run left (records written before workspace "
            "digests were kept), so the workspace cannot be shown to be the run's"
        )
    # The runner records the resolved path; the store keeps the attempt's folder as the scheduler named it (links
    # allowed).
    if workspace.parent.resolve() != attempt_dir.resolve():
        return f"its record names the workspace {workspace}, which is not in its attempt's folder {attempt_dir}"
    if workspace.is_symlink() or not workspace.is_dir():
        return f"its workspace {workspace} is missing"
    current = runner.workspace_manifest(workspace)
    if runner.manifest_digest(current) == digest:
        return None
    why = f"its workspace {workspace} changed since the run (digest differs from the record's)"
    try:
        recorded = json.loads((attempt_dir / runner.WORKSPACE_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = None
    # The manifest beside the workspace names the changes only when it is the one the record's digest was taken of.
    if isinstance(recorded, dict) and runner.manifest_digest(recorded) == digest:
        changes = compare_hashes(recorded, current, noun="entry", folder="")
        more = f" and {len(changes) - SHOWN_CHANGES} more" if len(changes) > SHOWN_CHANGES else ""
        why += ": " + ", ".join(changes[:SHOWN_CHANGES]) + more
    return why


def check_protocol(store: Store) -> None:
    """Refuse when the frozen protocol (scenarios, oracles, oracle code) changed since the pilot started."""
    info = store.study()
    if info.freeze_manifest is None:
        return
    report = study_freeze.verify(store)
    if not report.ok:
        raise ReevaluationError(
            "nothing re-evaluated: the frozen protocol changed since the pilot started, so a re-evaluation "
            "would not use the oracle the study's other runs were judged by: " + "; ".join(report.lines())
        )


def study_backend(store: Store) -> str:
    """The backend of the study's agent runs; a human wave's participants (pilot.human) are not one of them, and a
    study with no agent run has its participants' backend. Several backends are joined by commas."""
    used = set(store.backends_used())
    named = sorted(used - backends.PARTICIPANT_BACKENDS) or sorted(used)
    return named[0] if len(named) == 1 else ",".join(named)


def reevaluated_record(rec: dict[str, Any], ev: Any, *, at: str, count: int) -> dict[str, Any]:
    """The run's record with the new evaluation: its verdict fields, its notes, and when it was given."""
    from pilot import runner

    previous = evaluation_error(rec)
    new = dict(rec)
    new.update(runner.evaluation_fields(ev))
    notes = [n for n in rec.get("notes") or [] if not str(n).startswith(EVAL_ERROR_NOTE)]
    notes += runner.evaluation_notes(ev)
    notes.append(
        f"re-evaluated at {at} (pilot study reevaluate, #{count}); the evaluation it replaces could not run: {previous}"
    )
    new["notes"] = notes
    new["reevaluation"] = {"at": at, "count": count, "previous_eval_error": previous}
    return new


def reevaluate_one(store: Store, cand: Candidate) -> Result:
    """Evaluate one selected, trusted run again and store the outcome (one transaction)."""
    from pilot import runner
    from pilot.scenarios import load_scenario

    rec = json.loads(cand.record_json)
    ev = runner.evaluate_finished(load_scenario(cand.scenario), cand.workspace, rec["input_hashes"], cand.attempt_dir)
    # The verdict must rest on the bytes the run left: the workspace is checked again after the evaluation read it.
    after = untrusted(rec, cand.attempt_dir, cand.workspace)
    if after is not None:
        return Result(cand.run_id, cand.scenario, cand.arm, "refused", cand.eval_error, reason=after)
    count = len(store.reevaluations(cand.run_id)) + 1
    at = now()
    atomic_write_text(cand.attempt_dir / REEVALUATION_FILE.format(n=count), json.dumps(ev.to_dict(), indent=2) + "\n")
    new = reevaluated_record(rec, ev, at=at, count=count)
    store.replace_evaluation(cand.run_id, cand.record_json, new, at=at)
    error = evaluation_error(new)
    return Result(
        cand.run_id,
        cand.scenario,
        cand.arm,
        "eval_error" if error else "verdict",
        cand.eval_error,
        D=new["D"],
        E=new["E"],
        eval_error=error,
        reevaluation=count,
        judge_error=new.get("judge_error"),
    )


def reevaluate_study(
    folder: Path, run_ids: Iterable[str] | None = None, *, wave: str | None = None, dry_run: bool = False
) -> tuple[str, list[Result]]:
    """Re-evaluate a study's runs (the Python form of ``pilot study reevaluate``); returns the study's backend and one
    result per run.

    ``folder`` is the study's folder (``analysis/data/NAME``). Holds the study's lock throughout.
    """
    from pilot.schedule import ScheduleError, study_lock

    store = Store.open(Path(folder))
    try:
        try:
            with study_lock(store.folder):
                backend = study_backend(store)
                chosen = select(store, run_ids, wave)
                if chosen:
                    check_protocol(store)
                results = []
                for cand in chosen:
                    if cand.refused:
                        results.append(
                            Result(
                                cand.run_id, cand.scenario, cand.arm, "refused", cand.eval_error, reason=cand.refused
                            )
                        )
                    elif dry_run:
                        results.append(
                            Result(cand.run_id, cand.scenario, cand.arm, "would_reevaluate", cand.eval_error)
                        )
                    else:
                        results.append(reevaluate_one(store, cand))
                return backend, results
        except ScheduleError as exc:
            raise ReevaluationError(f"{exc}; re-evaluate once it has stopped") from exc
    finally:
        store.close()


def result_line(res: Result, label: str) -> str:
    """One line per run, starting with the study's label (SIMULATED, REHEARSAL; nothing for a real study)."""
    head = f"{label} ({backends.qualifier(label)}): " if label else ""
    what = {
        "verdict": (
            f"re-evaluated #{res.reevaluation}: D={int(bool(res.D))} E={int(bool(res.E))} (was: "
            f"{res.previous_eval_error})"
        ),
        "eval_error": f"re-evaluated #{res.reevaluation}, and the evaluation could not run again: {res.eval_error}",
        "refused": f"refused: {res.reason}",
        "would_reevaluate": (
            "would be re-evaluated (--dry-run: nothing changed; its evaluation could not run: "
            f"{res.previous_eval_error})"
        ),
    }[res.outcome]
    if res.judge_error and res.outcome in ("verdict", "eval_error"):
        what += f"; its judges are missing since it finished (judging failed: {res.judge_error}) and are not run again"
    return f"{head}run {res.run_id} ({res.scenario}, {res.arm}): {what}"
