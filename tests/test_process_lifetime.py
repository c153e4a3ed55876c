"""Every attempt's process tree ends with the attempt and with the scheduler; a resume sweeps what was left."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from schedule_support import NODES, REQUIRES, make_root, make_store, read_only

from pilot.executors import proctree
from pilot.executors.local import LocalExecutor
from pilot.schedule import Scheduler
from pilot.store import STORE_FILE

FAKE = "pilot.simulated.fake_runs:sleep_run"


def spawned_pids(folder: Path) -> list[int]:
    """The processes every attempt under ``folder`` deliberately left behind (fake_runs' ``spawned.txt``)."""
    return [int(x) for f in folder.rglob("spawned.txt") for x in f.read_text().split()]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :][:1] not in ("Z", "X")


def survivors(pids: list[int], *, grace_s: float = 10.0) -> list[int]:
    """Those still alive once a grace period has passed (ending a tree takes a moment)."""
    deadline = time.monotonic() + grace_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_processes_an_attempt_leaves_end_with_it_and_a_crash_touches_no_neighbour(tmp_path, monkeypatch):
    monkeypatch.setenv("PILOT_FAKE_SPAWN", "1")  # each attempt starts a process in its own session and a daemon
    monkeypatch.setenv("PILOT_FAKE_CRASH_ARMS", "A2")  # and A2's first attempts die after spawning them
    monkeypatch.setenv("PILOT_FAKE_SLEEP_S", "0.05")
    st = make_store(tmp_path, scenarios=["ACC-01"])
    ex = LocalExecutor(FAKE, 5)
    try:
        res = Scheduler(st, ex, NODES, backend="simulated", requires=REQUIRES, progress=False, poll_s=0.05).run("pilot")
    finally:
        ex.close()
    assert res.counts["done"] == 10
    pids = spawned_pids(st.folder / "workspaces")
    assert len(pids) == 2 * 12  # two per attempt: ten runs, two of them twice
    assert survivors(pids, grace_s=2) == []
    assert proctree.tagged(str(st.folder)) == []
    crashed = [a for a in st.attempts() if a["outcome"] == "infra_error"]
    assert len(crashed) == 2 and all(".A2." in a["run_id"] for a in crashed)


def _cli(root: Path, *args: str, **env: str) -> subprocess.Popen:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PILOT_FAKE_")}
    e.update({"PILOT_ROOT": str(root), **env})
    return subprocess.Popen(
        [sys.executable, "-m", "pilot", "study", *args],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_spawned(folder: Path, proc: subprocess.Popen, n: int) -> None:
    deadline = time.monotonic() + 120
    while len(spawned_pids(folder)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "attempts never started their processes"
        time.sleep(0.05)


def test_a_killed_scheduler_takes_its_attempts_trees_and_a_resume_sweeps_the_rest(tmp_path):
    root = make_root(tmp_path)
    made = _cli(root, "create", "p", "--scenarios", "ACC-01", "--runner", FAKE)
    assert made.wait(120) == 0, made.communicate()
    folder = root / "analysis" / "data" / "p"
    slow = {"PILOT_FAKE_SPAWN": "1", "PILOT_FAKE_SLEEP_S": "30"}

    # 1. SIGKILL of the scheduler: every supervisor ends its tree (PR_SET_PDEATHSIG), nothing is left running.
    proc = _cli(root, "run", "p", "--no-progress", **slow)
    _wait_for_spawned(folder, proc, 6)
    proc.kill()
    proc.wait()
    pids = spawned_pids(folder)
    assert survivors(pids) == [], "processes of attempts outlived the killed scheduler"
    assert survivors(proctree.tagged(str(folder))) == []

    # 2. The scheduler and its supervisors all killed at once (nothing could clean up): the next run sweeps the
    # leftovers.
    proc = _cli(root, "run", "p", "--no-progress", **slow)
    _wait_for_spawned(folder, proc, len(pids) + 6)
    time.sleep(0.5)  # the supervisors list their attempts' processes every 0.2 s
    supervisors = proctree.children(proc.pid)
    assert supervisors
    proctree.kill_pids([proc.pid, *supervisors])
    proc.wait()
    # Only those still alive count as leftovers: under load an attempt can be cut off while it starts them.
    left = [p for p in spawned_pids(folder) if p not in pids and alive(p)]
    assert left, "this case needs processes that outlived everything"
    try:
        resume = _cli(root, "run", "p", "--no-progress", PILOT_FAKE_SLEEP_S="0")
        out, err = resume.communicate(timeout=300)
        assert resume.returncode == 0, err
        ended = int(next(ln.split()[-1] for ln in out.splitlines() if ln.startswith("leftover processes ended")))
        assert ended >= len(left)
        assert survivors(left, grace_s=2) == []
    finally:
        proctree.kill_pids([p for p in left if alive(p)])
    conn = read_only(folder / STORE_FILE)
    try:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 10
        assert conn.execute("SELECT reserved_micro FROM ledger_balance").fetchone()[0] == 0
        bases = {r[0] for r in conn.execute("SELECT charge_basis FROM attempts WHERE outcome = 'interrupted'")}
    finally:
        conn.close()
    assert bases <= {"reservation", "released"} and "reservation" in bases
