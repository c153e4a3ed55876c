"""Kill -9 the scheduler mid-run, start it again: it resumes, loses and repeats nothing, and the ledger balances."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from schedule_support import make_root, read_only
from test_process_lifetime import survivors

from pilot.store import STORE_FILE

RUNNER = "pilot.simulated.fake_runs:sleep_run"
SCENARIOS = ["ACC-01", "BANK-01", "RES-01"]  # 30 runs


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PILOT_ROOT": str(root), "PILOT_FAKE_SLEEP_S": "0.3", "PILOT_FAKE_INFRA_FIRST": "0.15"})
    return env


def _pilot(*args: str, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pilot", "study", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _snapshot(db: Path) -> tuple[dict, list]:
    conn = read_only(db)
    try:
        runs = {r["run_id"]: dict(r) for r in conn.execute("SELECT * FROM runs")}
        attempts = [dict(r) for r in conn.execute("SELECT * FROM attempts ORDER BY attempt_id")]
    finally:
        conn.close()
    return runs, attempts


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _kill_when(db: Path, proc: subprocess.Popen, done_at_least: int) -> tuple[dict, list, list[int]]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if db.exists():
            conn = read_only(db)
            try:
                done = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
                running = conn.execute("SELECT COUNT(*) FROM attempts WHERE outcome = 'running'").fetchone()[0]
            finally:
                conn.close()
            # An attempt is 'running' from its reservation, a moment before its worker process starts (and a moment
            # after it ends): the kill waits for a worker to be there, so that it lands mid-attempt.
            kids = _children(proc.pid) if done >= done_at_least and running > 0 else []
            if kids:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                # Read after the kill: a snapshot taken just before it could miss an attempt begun in between.
                return (*_snapshot(db), kids)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(
        "the scheduler never reached the kill point (enough runs done, an attempt running, "
        "and the local executor's worker processes its children)"
    )


def test_sigkill_and_resume_loses_and_repeats_nothing(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    subprocess.run(
        [sys.executable, "-m", "pilot", "study", "create", "k", "--scenarios", *SCENARIOS],
        env=env,
        check=True,
        capture_output=True,
    )
    db = root / "analysis" / "data" / "k" / STORE_FILE
    run_args = ("run", "k", "--runner", RUNNER, "--no-progress")

    finished_before: dict = {}
    interrupted_ids: set[str] = set()
    for kill_after in (2, 9, 17):  # three kills at different points of the wave
        proc = _pilot(*run_args, env=env)
        runs, attempts, kids = _kill_when(db, proc, kill_after)
        assert kids, "the local executor's worker processes should be children of the scheduler"
        # They end within the grace period (their supervisor notices the kill), however loaded the machine.
        assert survivors(kids) == [], "worker processes outlived the killed scheduler"
        # nothing finished before a kill is lost or changed afterwards
        for rid, row in finished_before.items():
            assert runs[rid] == row
        finished_before = runs
        interrupted_ids |= {a["run_id"] for a in attempts if a["outcome"] == "running"}

    final = _pilot(*run_args, env=env)
    out, err = final.communicate(timeout=120)
    assert final.returncode == 0, err

    runs, attempts = _snapshot(db)
    assert len(runs) == 30
    for rid, row in finished_before.items():
        assert runs[rid] == row  # the last kill's finished runs survived the resume untouched
    by_run: dict[str, list[dict]] = {}
    for a in attempts:
        by_run.setdefault(a["run_id"], []).append(a)
    for rid, atts in by_run.items():
        outcomes = [a["outcome"] for a in atts]
        assert outcomes.count("completed") + outcomes.count("capped") == 1, (rid, outcomes)  # finished exactly once
        assert outcomes[-1] in ("completed", "capped")
        assert [a["attempt_no"] for a in atts] == list(range(1, len(atts) + 1))  # same run id, numbered attempts
        assert runs[rid]["attempt_id"] == atts[-1]["attempt_id"]
    interrupted = [a for a in attempts if a["outcome"] == "interrupted"]
    assert {a["run_id"] for a in interrupted} == interrupted_ids and interrupted
    assert all("scheduler stopped" in a["error"] for a in interrupted)
    # every interrupted attempt was rerun under the same id
    assert all(by_run[a["run_id"]][-1]["attempt_no"] > a["attempt_no"] for a in interrupted)

    status = subprocess.run(
        [sys.executable, "-m", "pilot", "study", "status", "k"], env=env, capture_output=True, text=True
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "ledger balances" in status.stdout
    conn = read_only(db)
    try:
        spent, reserved = conn.execute("SELECT spent_micro, reserved_micro FROM ledger_balance").fetchone()
        charged = conn.execute("SELECT SUM(charged_micro) FROM attempts").fetchone()[0]
    finally:
        conn.close()
    assert reserved == 0 and spent == charged
