"""One assigned run from start to finish: the scheduler's run function.

:func:`run_cell` performs one attempt of a cell with the runner (workspace,
agent under caps, deliverables, oracles, A4 self-check and recovery), and
unless the attempt ended in an infrastructure error, has the run's
deliverables judged blind by the study's panel. It returns the
:class:`~pilot.executors.base.AttemptOutcome` the scheduler stores: the run
record with the judges' results under ``judges``, the agent's cost (recovery
included) and the judges' cost. The run table row is computed from that
record at export (:func:`pilot.outcomes.run_row`).

The judges use the backend paired with the agent's (the CLI judges for
``claude-code`` and ``rehearsal``, the simulated judges for ``simulated``);
``PILOT_JUDGE_BACKEND`` overrides it, e.g. to judge a simulated run with
real judges.

With the ``rehearsal`` backend (whose ``upstream`` role is
:func:`pilot.simulated.scripted_model.scripted_upstream`) the attempt's own
process starts one scripted model server for the attempt: the metering proxy forwards the agent's requests to it and the
three CLI judge sessions are pointed at it, so nothing reaches the network
and no key is needed. Every attempt runs in its own supervised process, on
this machine (local executor) or on a dask worker, so one server per
attempt is one per process and works alike with both executors. The
server's record (the scripted worker's known truth) is kept beside the
attempt's folder, in ``attempt-N.scripted/`` (:func:`pilot.simulated.scripted_model.scripted_record_dir`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pilot import backends
from pilot.attempt import AttemptOutcome, CellSpec
from pilot.judges import judge_run
from pilot.run_record import RunRecord

JUDGE_BACKEND_ENV = "PILOT_JUDGE_BACKEND"
#: Keys an upstream role may add to its mapping for a rehearsal's own limits: a run's wall limit and the judges' time
#: limit, shorter than the study's so that a rehearsal can play those branches in minutes. Never passed to a process.
UPSTREAM_WALL_KEY = "PILOT_REHEARSAL_WALL_S"
UPSTREAM_JUDGE_TIMEOUT_KEY = "PILOT_REHEARSAL_JUDGE_TIMEOUT_S"
#: ... and a run's dollar cap, lower than the study's, so that a rehearsal reaches it within a few requests.
UPSTREAM_CAP_KEY = "PILOT_REHEARSAL_CAP_USD"


def judge_backend_for(agent_backend: str) -> str:
    """The judge backend paired with an agent backend."""
    override = os.environ.get(JUDGE_BACKEND_ENV)
    if override:
        if override not in backends.JUDGE_BACKENDS:
            raise ValueError(f"{JUDGE_BACKEND_ENV}={override!r} is not one of {list(backends.JUDGE_BACKENDS)}")
        return override
    return backends.judge_backend(agent_backend)


def _missing_judges(error: str) -> list[dict[str, Any]]:
    from pilot import protocol

    return [
        {
            "judge_id": j["id"],
            "model": j["model"],
            "draw": j["draw"],
            "backend": None,
            "criterion_scores": {},
            "accept": None,
            "rationale": "",
            "score_0_100": None,
            "cost_usd": 0.0,
            "attempts": 0,
            "error": error,
        }
        for j in protocol.study().judge_panel
    ]


def judge_record(
    record: RunRecord,
    cell: CellSpec,
    node: str,
    attempt_dir: Path,
    judge_backend: str,
    seed: int,
    environ: dict[str, str] | None = None,
    judge_timeout_s: float | None = None,
) -> RunRecord:
    """Judge a finished attempt's deliverables and add the results to its record.

    ``environ`` names the CLI judges' upstream (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``) instead of this
    process's; ``judge_timeout_s`` a rehearsal's shorter time limit per judge call (None: the backend's own).
    """
    from pilot.scenarios import load_scenario

    workspace = Path(record.workspace or attempt_dir)
    outputs = workspace / "outputs"
    # What identifies this run must not reach a judge even if a file mentions it.
    withheld = [cell.run_id, node, cell.study, str(attempt_dir), str(workspace), str(workspace.resolve())]
    try:
        results = judge_run(
            load_scenario(cell.scenario),
            outputs,
            backend=judge_backend,
            seed=seed,
            withheld=withheld,
            environ=environ,
            timeout_s=judge_timeout_s,
        )
        record.judges = [r.to_dict() for r in results]
        record.judge_error = None
    except Exception as exc:  # noqa: BLE001 - a judging failure leaves the judges missing; the agent run stands
        record.judges = _missing_judges(f"judging failed: {type(exc).__name__}: {exc}")
        record.judge_error = f"{type(exc).__name__}: {exc}"
    record.judge_cost_usd = float(sum(float(j.get("cost_usd") or 0.0) for j in record.judges))
    return record


def run_cell(cell: CellSpec, attempt_dir: Path, node: str, backend: str, seed: int) -> AttemptOutcome:
    """The scheduler's run function: runner attempt, then (unless infra error) the judges."""
    with model_upstream(backend, attempt_dir, seed) as upstream:
        return _run_cell(cell, attempt_dir, node, backend, seed, upstream)


@contextmanager
def model_upstream(backend: str, attempt_dir: Path, seed: int) -> Iterator[dict[str, str] | None]:
    """The upstream an attempt's proxy and judges use: the backend's ``upstream`` role when it has one (a rehearsal's
    scripted model server, stopped on exit); None for every other backend (this process's environment)."""
    if not backends.has_role(backend, "upstream"):
        yield None
        return
    with backends.role(backend, "upstream")(attempt_dir, seed) as upstream:
        yield upstream


def upstream_limits(upstream: dict[str, str] | None) -> tuple[dict[str, str] | None, dict[str, float]]:
    """The upstream mapping without a rehearsal's own limits, and those limits ("wall_s", "usd", "judge_timeout_s")."""
    if upstream is None:
        return None, {}
    env = dict(upstream)
    keys = {"wall_s": UPSTREAM_WALL_KEY, "usd": UPSTREAM_CAP_KEY, "judge_timeout_s": UPSTREAM_JUDGE_TIMEOUT_KEY}
    limits = {name: float(env.pop(key)) for name, key in keys.items() if env.get(key)}
    for key in keys.values():
        env.pop(key, None)
    return env, limits


def _run_cell(
    cell: CellSpec, attempt_dir: Path, node: str, backend: str, seed: int, upstream: dict[str, str] | None
) -> AttemptOutcome:
    from pilot import protocol, runner
    from pilot.outcomes import agent_cost

    upstream, limits = upstream_limits(upstream)
    caps = None
    if "wall_s" in limits or "usd" in limits:
        # A rehearsal's own limits only ever tighten the study's.
        own = protocol.study().caps_for(cell.scenario)
        caps = protocol.Caps(
            min(own.usd, limits.get("usd", own.usd)), min(own.wall_s, limits.get("wall_s", own.wall_s))
        )
    judge_timeout_s = limits.get("judge_timeout_s")
    rec = runner.run_attempt(
        cell.scenario,
        cell.arm,
        backend=backend,
        out_dir=Path(attempt_dir),
        seed=seed,
        model=cell.model,
        environ=upstream,
        caps=caps,
    )
    # None when the client reported no (complete) cost: the ledger then charges the whole reservation.
    cost = agent_cost(rec)
    # The proxy's metered cost settles the envelope (the simulated backend has none: its reported cost does), as the
    # exact decimal string the record keeps.
    metered = rec.to_dict()["metered_cost_usd"]
    if rec.status == "infra_error":
        return AttemptOutcome(
            infra_error=rec.infra_error or "infrastructure error",
            record=rec.to_dict(),
            cost_usd=cost,
            metered_cost_usd=metered,
        )
    rec = judge_record(
        rec,
        cell,
        node,
        Path(attempt_dir),
        judge_backend_for(backend),
        seed,
        environ=upstream,
        judge_timeout_s=judge_timeout_s,
    )
    return AttemptOutcome(
        record=rec.to_dict(),
        cost_usd=cost,
        judge_cost_usd=float(rec.judge_cost_usd or 0.0),
        status=rec.status,
        metered_cost_usd=metered,
    )
