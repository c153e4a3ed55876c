"""Chaos: the scheduler is killed with SIGKILL at seeded random moments, many times, and every invariant holds after
each kill.

Invariants: a finished run is recorded once and never changes afterwards;
each run finishes through exactly one attempt, attempts numbered without a
gap; the ledger balances to the micro-dollar (its balance row equals its
journal, what is reserved equals the reservations of attempts still open,
what is spent equals what settled attempts were charged) and holds the
envelope; once resumed to the end no reservation is left open; an attempt
that never launched was charged nothing; and no process of any attempt
survives a kill. The number of kills and the time spent are bounded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from schedule_support import make_root, read_only
from test_process_lifetime import spawned_pids, survivors

from pilot.attempt import was_launched
from pilot.executors import proctree
from pilot.ledger import audit
from pilot.store import STORE_FILE

SEED = 20261201
FAKE = "pilot.simulated.fake_runs:sleep_run"
KILLS = 20
BUDGET_S = 75.0  # wall time for the kills; the final resume and the checks come on top


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PILOT_FAKE_")}
    # Runs long enough that the two waves outlast the kills: at 0.3 s a fast machine finished both after seven kills.
    env.update(
        {
            "PILOT_ROOT": str(root),
            "PILOT_FAKE_SLEEP_S": "1.5",
            "PILOT_FAKE_INFRA_FIRST": "0.2",
            "PILOT_FAKE_CAPPED": "0.1",
            "PILOT_FAKE_SPAWN": "1",
        }
    )
    return env


def _state(db: Path) -> tuple[dict, list, list[str]]:
    conn = read_only(db)
    try:
        runs = {r["run_id"]: dict(r) for r in conn.execute("SELECT * FROM runs")}
        attempts = [dict(r) for r in conn.execute("SELECT * FROM attempts ORDER BY attempt_id")]
        problems = audit(conn)
    finally:
        conn.close()
    return runs, attempts, problems


def _check(db: Path, finished_before: dict, *, final: bool) -> dict:
    runs, attempts, problems = _state(db)
    assert problems == [], problems  # the ledger is exact at every kill, not only at the end
    for rid, row in finished_before.items():
        assert runs.get(rid) == row, f"finished run {rid} was lost or changed"
    by_run: dict[str, list[dict]] = {}
    for a in attempts:
        by_run.setdefault(a["run_id"], []).append(a)
    for rid, atts in by_run.items():
        assert [a["attempt_no"] for a in atts] == list(range(1, len(atts) + 1)), rid
        finishing = [a for a in atts if a["outcome"] in ("completed", "capped")]
        assert len(finishing) == (1 if rid in runs else 0), (rid, [a["outcome"] for a in atts])
        if rid in runs:
            assert runs[rid]["attempt_id"] == finishing[0]["attempt_id"]
        for a in atts:
            if a["outcome"] == "interrupted" and not was_launched(Path(a["workspace"])):
                assert a["charged_micro"] == 0 and a["charge_basis"] == "released", a
            if a["outcome"] != "running":
                assert a["charge_basis"] in ("reported", "reservation", "released"), a
    if final:
        assert not any(a["outcome"] == "running" for a in attempts)
    return runs


def test_random_kills_keep_every_invariant(tmp_path):
    rng = np.random.default_rng(SEED)
    root = make_root(tmp_path)
    env = _env(root)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pilot",
            "study",
            "create",
            "chaos",
            "--scenarios",
            "ACC-01",
            "BANK-01",
            "RES-01",
            "--runner",
            FAKE,
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    folder = root / "analysis" / "data" / "chaos"
    db = folder / STORE_FILE
    finished: dict = {}
    kills, waves = 0, ["pilot", "repeat3"]
    t0 = time.monotonic()
    while kills < KILLS and waves and time.monotonic() - t0 < BUDGET_S:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pilot", "study", "run", "chaos", "--wave", waves[0], "--no-progress"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Anywhere from the interpreter starting, through recovery and the sweep, to dispatching and settling.
        try:
            proc.wait(timeout=float(rng.uniform(0.3, 4.0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            kills += 1
        else:
            assert proc.returncode == 0, proc.stderr.read()
            waves.pop(0)  # this wave finished between kills: go on with the next
        proc.stderr.close()
        assert survivors(proctree.tagged(str(folder))) == [], "a process of an attempt survived the kill"
        assert survivors(spawned_pids(folder)) == []
        if db.exists():
            finished = _check(db, finished, final=False)
    print(f"chaos: {kills} kills in {time.monotonic() - t0:.0f} s")
    assert kills >= 8, f"only {kills} kills happened; the test did not exercise the scheduler"

    for wave in ["pilot", "repeat3"]:
        done = subprocess.run(
            [sys.executable, "-m", "pilot", "study", "run", "chaos", "--wave", wave, "--no-progress"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
    runs = _check(db, finished, final=True)
    assert len(runs) == 30 + 15
    conn = read_only(db)
    try:
        spent, reserved, envelope = conn.execute(
            "SELECT spent_micro, reserved_micro, envelope_micro FROM ledger_balance"
        ).fetchone()
        charged = conn.execute("SELECT SUM(charged_micro) FROM attempts").fetchone()[0]
        cells = conn.execute("SELECT status, COUNT(*) FROM cells GROUP BY status").fetchall()
    finally:
        conn.close()
    assert (
        reserved == 0 and spent == charged and spent <= envelope
    )  # no dangling reservation, exact to the micro-dollar
    assert dict(cells) == {"done": 45}
    assert survivors(spawned_pids(folder), grace_s=1) == []
