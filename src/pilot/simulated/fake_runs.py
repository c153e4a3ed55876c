"""Run functions that do no study work, for exercising the scheduler alone.

They stand where ``pilot.pipeline.run_cell`` normally goes (``pilot study run
--runner pilot.simulated.fake_runs:sleep_run``) so that the scheduler's
ordering, node choice, envelope, crash recovery and executors can be tested
and benchmarked without agents or evaluation. Their records carry
``"runner": "fake"`` and no outcome columns; they are never a dry run of the
study (that is the simulated backend).

Behaviour is set from the environment, which worker processes inherit:
``PILOT_FAKE_SLEEP_S`` (seconds each attempt takes, default 0),
``PILOT_FAKE_INFRA_FIRST`` (probability that a run's first attempt is an
infrastructure error, drawn from the run's seed), ``PILOT_FAKE_INFRA_ARMS``
(comma-separated arms whose attempts always fail as infrastructure errors),
``PILOT_FAKE_CAPPED`` (probability a run reaches its dollar cap),
``PILOT_FAKE_CRASH_ARMS`` (comma-separated arms whose first attempt kills
its own worker process, as a lost machine would), ``PILOT_FAKE_SPAWN`` (when
``1``, each attempt leaves processes behind the way office tools do: one in
its own session with an empty environment, and one daemonised by a shell
that exits; their pids are listed in ``outputs/spawned.txt``).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np

from pilot.attempt import AttemptOutcome, CellSpec


def _attempt_no(attempt_dir: Path) -> int:
    name = attempt_dir.name
    return int(name.rsplit("-", 1)[1]) if name.startswith("attempt-") else 1


def noop_run(cell: CellSpec, attempt_dir: Path, node: str, backend: str, seed: int) -> AttemptOutcome:
    """Return at once with a cost drawn from the run's seed."""
    rng = np.random.default_rng(seed)
    cost = round(float(rng.uniform(0.2, 0.8)) * min(cell.cap_usd, 4.0) / 4.0, 6)
    record = {
        "runner": "fake",
        "run_id": cell.run_id,
        "scenario": cell.scenario,
        "arm": cell.arm,
        "model": cell.model,
        "backend": backend,
        "node": node,
        "status": "completed",
        "censored": False,
        "cost_usd": cost,
        "wall_s": 0.0,
    }
    return AttemptOutcome(record=record, cost_usd=cost, judge_cost_usd=0.05)


def _leave_processes(listing: Path) -> None:
    """Start processes meant to outlive the attempt (as soffice and oosplash do) and list their pids."""
    own_session = subprocess.Popen(
        ["sleep", "600"], start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    )
    daemon = subprocess.run(
        ["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True
    )
    listing.write_text(f"{own_session.pid}\n{int(daemon.stdout.strip())}\n", encoding="utf-8")


def long_run(cell: CellSpec, attempt_dir: Path, node: str, backend: str, seed: int) -> AttemptOutcome:
    """Leave processes behind (as ``PILOT_FAKE_SPAWN`` does) and then run for ten minutes: an attempt that must be
    stopped."""
    (attempt_dir / "outputs").mkdir(exist_ok=True)
    _leave_processes(attempt_dir / "outputs" / "spawned.txt")
    time.sleep(600)
    return AttemptOutcome(record={"runner": "fake", "run_id": cell.run_id, "status": "completed"}, cost_usd=0.0)


def sleep_run(cell: CellSpec, attempt_dir: Path, node: str, backend: str, seed: int) -> AttemptOutcome:
    """Sleep, leave a file in the workspace, and finish; infra errors and caps as the environment says."""
    rng = np.random.default_rng(seed)
    sleep_s = float(os.environ.get("PILOT_FAKE_SLEEP_S", "0"))
    infra_first = float(os.environ.get("PILOT_FAKE_INFRA_FIRST", "0"))
    infra_arms = {a for a in os.environ.get("PILOT_FAKE_INFRA_ARMS", "").split(",") if a}
    capped_p = float(os.environ.get("PILOT_FAKE_CAPPED", "0"))
    draw_infra, draw_cap, draw_cost = rng.uniform(size=3)
    attempt = _attempt_no(attempt_dir)
    (attempt_dir / "outputs").mkdir(exist_ok=True)
    (attempt_dir / "outputs" / "note.txt").write_text(f"{cell.run_id} attempt {attempt} on {node}\n", encoding="utf-8")
    if os.environ.get("PILOT_FAKE_SPAWN") == "1":
        _leave_processes(attempt_dir / "outputs" / "spawned.txt")
    time.sleep(sleep_s)
    if attempt == 1 and cell.arm in {a for a in os.environ.get("PILOT_FAKE_CRASH_ARMS", "").split(",") if a}:
        os._exit(17)
    if cell.arm in infra_arms or (attempt == 1 and draw_infra < infra_first):
        return AttemptOutcome(infra_error=f"fake infrastructure error on {node} (attempt {attempt})")
    capped = bool(draw_cap < capped_p)
    cost = cell.cap_usd if capped else round(0.2 + 0.6 * float(draw_cost), 6)
    record = {
        "runner": "fake",
        "run_id": cell.run_id,
        "scenario": cell.scenario,
        "arm": cell.arm,
        "model": cell.model,
        "backend": backend,
        "node": node,
        "attempt": attempt,
        "status": "capped" if capped else "completed",
        "censored": capped,
        "censor_reason": "cost" if capped else None,
        "cost_usd": cost,
        "wall_s": sleep_s,
    }
    return AttemptOutcome(record=record, cost_usd=cost, judge_cost_usd=0.05, status=record["status"])
