"""Operator mistakes and faults of `pilot study`: each ends in one `pilot study:` line naming the file and what to do,
and loses nothing."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedule_support import finish_cells, make_root, read_only

from pilot import paths, protocol, runtable
from pilot.store import STORE_FILE, Store

FAKE = "pilot.simulated.fake_runs:sleep_run"
NOOP = "pilot.simulated.fake_runs:noop_run"


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PILOT_FAKE_")}
    env.update({"PILOT_ROOT": str(root), **extra})
    return env


def pilot(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pilot", "study", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def one_line_fault(res: subprocess.CompletedProcess, *needles: str) -> str:
    """The command failed with exactly one `pilot study:` line (no traceback) containing every needle."""
    assert res.returncode != 0, res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in res.stderr, res.stderr
    faults = [ln for ln in lines if ln.startswith("pilot study:")]
    assert len(faults) == 1, res.stderr
    for n in needles:
        assert re.search(n, faults[0]), (n, faults[0])
    return faults[0]


def _db(root: Path, name: str) -> Path:
    return root / "analysis" / "data" / name / STORE_FILE


# ------------------------------------------------------------------ create


def test_create_validates_everything_before_storing_anything(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    data = root / "analysis" / "data"
    one_line_fault(
        pilot(env, "create", "typo", "--scenarios", "ACC-1"), r"protocol/scenarios", r"ACC-1", r"correct --scenarios"
    )
    one_line_fault(
        pilot(env, "create", "typo", "--scenarios", "ACC-01", "--runner", "pilot.pipeline:run_cel"),
        r"--runner",
        r"run_cel",
        r"nothing was stored",
    )
    one_line_fault(
        pilot(env, "create", "typo", "--scenarios", "ACC-01", "--runner", "pilot.no_such_module:run"), r"cannot import"
    )
    one_line_fault(pilot(env, "create", "typo", "--arms", "A0,A9"), r"protocol/arms/arms.yml", r"A9")
    one_line_fault(pilot(env, "create", "typo", "--arms", "A0,A0"), r"given twice")
    bad_nodes = tmp_path / "nodes.yml"
    bad_nodes.write_text("nodes:\n  - name: n1\n    capabilities: [gpu]\n    slots: 1\n")
    one_line_fault(pilot(env, "create", "typo", "--nodes", str(bad_nodes)), r"nodes.yml", r"capabilities")
    one_line_fault(pilot(env, "create", "typo", "--nodes", str(tmp_path / "missing.yml")), r"missing.yml", r"not found")
    assert not (data / "typo" / STORE_FILE).exists()


def test_create_takes_the_design_set_unless_another_is_named(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    design = protocol.study()
    made = pilot(env, "create", "ten", "--runner", NOOP)
    assert made.returncode == 0, made.stderr
    out = json.loads(made.stdout)
    # The preregistered ten: 10 scenarios x 5 arms x 2 repeats, whatever else protocol/scenarios/ holds.
    assert out["scenario_set"] == "pilot" and out["scenarios"] == 10 and out["pilot_cells"] == 10 * 5 * 2
    n_ext = len(design.scenario_set("extension"))  # the set as study.yml declares it
    made = pilot(env, "create", "ext", "--scenario-set", "extension", "--runner", NOOP)
    assert made.returncode == 0, made.stderr
    out = json.loads(made.stdout)
    assert out["scenario_set"] == "extension" and out["scenarios"] == n_ext and out["pilot_cells"] == n_ext * 5 * 2
    with Store.open(root / "analysis" / "data" / "ext") as st:
        assert sorted(st.study().scenarios) == sorted(design.scenario_set("extension"))
    one_line_fault(
        pilot(env, "create", "typo", "--scenario-set", "extensions"),
        r"--scenario-set extensions",
        r"no scenario set 'extensions'",
    )
    one_line_fault(
        pilot(env, "create", "typo", "--scenario-set", "pilot", "--scenarios", "ACC-01"),
        r"either --scenarios or --scenario-set",
    )
    assert not (root / "analysis" / "data" / "typo" / STORE_FILE).exists()


def test_create_with_a_subset_of_arms_stores_them_and_later_waves_keep_them(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    made = pilot(env, "create", "linux", "--scenarios", "ACC-01", "RES-01", "--arms", "A1,A0,A3", "--runner", NOOP)
    assert made.returncode == 0, made.stderr
    out = json.loads(made.stdout)
    assert out["arms"] == ["A0", "A1", "A3"] and out["pilot_cells"] == 2 * 3 * 2
    with Store.open(root / "analysis" / "data" / "linux") as st:
        assert st.study().arms == ["A0", "A1", "A3"] and st.study().run_function == NOOP
        assert {c.arm for c in st.cells("pilot")} == {"A0", "A1", "A3"}
    assert "A2" not in (root / "analysis" / "data" / "linux" / "assignment_pilot.csv").read_text()
    # the study's own run function is used without --runner; the third repeat keeps the study's arms
    ran = pilot(env, "run", "linux", "--no-progress")
    assert ran.returncode == 0, ran.stderr
    ran = pilot(env, "run", "linux", "--wave", "repeat3", "--no-progress")
    assert ran.returncode == 0, ran.stderr
    with Store.open(root / "analysis" / "data" / "linux") as st:
        assert {c.arm for c in st.cells("repeat3")} == {"A0", "A1", "A3"} and st.counts("repeat3")["done"] == 6
    # the sensitivity wave runs A3, which this study has; a study without A3 is refused it
    assert pilot(env, "create", "noa3", "--scenarios", "ACC-01", "--arms", "A0", "--runner", NOOP).returncode == 0
    assert pilot(env, "run", "noa3", "--no-progress").returncode == 0
    one_line_fault(pilot(env, "run", "noa3", "--wave", "sensitivity", "--no-progress"), r"sensitivity wave runs arm A3")


def test_an_interrupted_create_leaves_no_study(tmp_path, monkeypatch):
    root = make_root(tmp_path)
    monkeypatch.setattr(paths, "DATA_DIR", root / "analysis" / "data")
    from pilot import store as store_mod
    from pilot.study import create_study

    def boom(c, cells):
        c.execute(
            "INSERT INTO cells (run_id, wave, order_index, scenario, arm, repeat, model, seed, cap_usd, "
            "wall_s, reserve_micro) VALUES ('x', 'pilot', 0, 'ACC-01', 'A0', 1, 'm', 1, 1, 1, 1)"
        )
        raise KeyboardInterrupt  # the operator's Ctrl-C in the middle of writing the cells

    monkeypatch.setattr(store_mod, "_insert_cells", boom)
    with pytest.raises(KeyboardInterrupt):
        create_study("half", scenarios=["ACC-01"])
    folder = root / "analysis" / "data" / "half"
    assert not (folder / STORE_FILE).exists() and not list(folder.glob("*.partial-*"))
    env = _env(root)
    one_line_fault(
        pilot(env, "run", "half", "--runner", NOOP, "--no-progress"), r"no study store", r"create the study first"
    )
    # a store left empty by older code is refused by name rather than reported complete
    monkeypatch.undo()
    conn = sqlite3.connect(folder / STORE_FILE)
    conn.executescript(store_mod.SCHEMA)
    conn.execute(
        "INSERT INTO studies (name, seed, created_at, protocol_version, worker_model, scenarios_json) "
        "VALUES ('half', 1, 'x', '1', 'm', '[]')"
    )
    conn.commit()
    conn.close()
    one_line_fault(
        pilot(env, "run", "half", "--runner", NOOP, "--no-progress"),
        r"study.sqlite",
        r"no cells",
        r"create the study again",
    )


# ------------------------------------------------------------------ run, failures and retry


def test_failed_runs_make_run_exit_nonzero_grouped_and_retry_reopens_them(tmp_path):
    root = make_root(tmp_path)
    assert pilot(_env(root), "create", "f", "--scenarios", "ACC-01", "--runner", FAKE).returncode == 0
    ran = pilot(_env(root, PILOT_FAKE_INFRA_ARMS="A1"), "run", "f", "--no-progress")
    assert ran.returncode == 4, ran.stderr
    assert "2 run(s) of wave pilot ended failed" in ran.stderr
    assert re.search(
        (
            r"^  2 run\(s\), e\.g\. fake infrastructure error on \S+ \(attempt 3\) \[ACC-01\.A1\.r[12], "
            r"ACC-01\.A1\.r[12]\]$"
        ),
        ran.stderr,
        re.M,
    ), ran.stderr
    assert "pilot study retry f --failed" in ran.stderr
    # rerunning does not reopen them by itself
    again = pilot(_env(root), "run", "f", "--no-progress")
    assert again.returncode == 4 and re.search(r"dispatched attempts\s+0\n", again.stdout)
    one_line_fault(pilot(_env(root), "retry", "f", "ACC-01.A0.r1"), r"not failed")
    one_line_fault(pilot(_env(root), "retry", "f"), r"either --failed or the run ids")
    re_opened = pilot(_env(root), "retry", "f", "--failed")
    assert re_opened.returncode == 0 and sorted(json.loads(re_opened.stdout)["reopened"]) == [
        "ACC-01.A1.r1",
        "ACC-01.A1.r2",
    ]
    fixed = pilot(_env(root), "run", "f", "--no-progress")
    assert fixed.returncode == 0, fixed.stderr
    with Store.open(root / "analysis" / "data" / "f") as st:
        assert st.counts("pilot") == {"waiting": 0, "in_flight": 0, "done": 10, "failed": 0}
        history = st.attempts("ACC-01.A1.r1")
        assert [a["attempt_no"] for a in history] == [1, 2, 3, 4] and [a["outcome"] for a in history][-1] == "completed"
        assert len(st.events("reopen")) == 2 and st.audit() == []


@pytest.mark.usefixtures("dask")
def test_run_refusals_take_no_freeze_manifest_and_reserve_nothing(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    assert pilot(env, "create", "m", "--scenarios", "ACC-01", "--runner", FAKE).returncode == 0
    one_line_fault(
        pilot(env, "run", "m", "--runner", "pilot.pipeline:run_cel", "--no-progress"),
        r"run_cel",
        r"nothing was stored or dispatched",
    )
    one_line_fault(pilot(env, "run", "m", "--executor", "dask", "--no-progress"), r"--scheduler ADDRESS")
    # a second scheduler on the same study is refused by name, before it takes anything
    folder = root / "analysis" / "data" / "m"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
                "f.write('4242'); f.flush(); print('locked', flush=True); time.sleep(60)"
            ),
            str(folder / "scheduler.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        one_line_fault(
            pilot(env, "run", "m", "--no-progress"),
            r"scheduler.lock",
            r"another scheduler \(pid 4242\)",
            r"wait for it",
        )
        one_line_fault(pilot(env, "retry", "m", "--failed"), r"another scheduler", r"retry once it has stopped")
    finally:
        holder.kill()
        holder.wait()
    conn = read_only(folder / STORE_FILE)
    try:
        assert conn.execute("SELECT freeze_manifest_json FROM studies").fetchone()[0] is None
        assert conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0] == 0
    finally:
        conn.close()
    assert pilot(env, "run", "m", "--no-progress").returncode == 0
    conn = read_only(folder / STORE_FILE)
    try:
        taken = conn.execute("SELECT freeze_taken_at FROM studies").fetchone()[0]
        first = conn.execute("SELECT MIN(started_at) FROM attempts").fetchone()[0]
    finally:
        conn.close()
    assert taken is not None and taken >= first  # taken as the wave started, not before


def test_two_operators_starting_the_third_repeat_at_once(tmp_path):
    root = make_root(tmp_path)
    env = _env(root, PILOT_FAKE_SLEEP_S="0.4")
    assert pilot(env, "create", "two", "--scenarios", "ACC-01", "--runner", FAKE).returncode == 0
    assert pilot(_env(root), "run", "two", "--no-progress").returncode == 0
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pilot", "study", "run", "two", "--wave", "repeat3", "--no-progress"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], results
    loser = next(err for p, (out, err) in zip(procs, results, strict=True) if p.returncode == 2)
    assert "IntegrityError" not in loser and "Traceback" not in loser
    assert re.search(r"^pilot study: .*scheduler.lock: another scheduler", loser, re.M), loser
    with Store.open(root / "analysis" / "data" / "two") as st:
        assert st.counts("repeat3")["done"] == 5 and len(st.cells("repeat3")) == 5 and st.audit() == []


# ------------------------------------------------------------------ envelope


def _root_with_own_protocol(tmp: Path) -> Path:
    """A root whose protocol is a copy (the envelope command appends to its amendments.csv)."""
    root = tmp / "root"
    (root / "analysis" / "data").mkdir(parents=True)
    shutil.copytree(paths.PROTOCOL_DIR, root / "protocol", symlinks=False)
    os.symlink(paths.CONFIG_DIR, root / "analysis" / "config")
    return root


def test_exhausted_envelope_has_a_documented_way_forward(tmp_path):
    root = _root_with_own_protocol(tmp_path)
    env = _env(root, PILOT_FAKE_SLEEP_S="0")
    amendments = root / "protocol" / "amendments.csv"
    before = amendments.read_text()
    # Amendment ids the protocol does not use yet (the protocol gains amendments over time).
    first = 1 + max(int(r["id"][2:]) for r in protocol.load_amendments(amendments))
    low, high, written = (f"A-{n:03d}" for n in range(first, first + 3))
    assert pilot(env, "create", "env", "--scenarios", "ACC-01", "--runner", FAKE).returncode == 0
    # lowered before any spending to 8 dollars: one run's worst case (ACC-01: 6.00 + 0.30 for judges) fits while spent
    # <= 1.70
    one_line_fault(pilot(env, "envelope", "env", "--set", "20", "--amendment", "11"), r"A-NNN")
    one_line_fault(pilot(env, "envelope", "env", "--set", "-3", "--amendment", low), r"positive")
    one_line_fault(pilot(env, "envelope", "env", "--set", "0.0000001", "--amendment", low), r"six decimals")
    set_low = pilot(env, "envelope", "env", "--set", "8", "--amendment", low)
    assert set_low.returncode == 0, set_low.stderr
    ran = pilot(env, "run", "env", "--no-progress")
    assert ran.returncode == 3
    assert "envelope exhausted" in ran.stderr and "pilot study envelope env --set USD --amendment A-NNN" in ran.stderr
    # editing study.yml does nothing to an existing study, and says so
    study_yml = root / "protocol" / "study.yml"
    text = study_yml.read_text()
    assert text.count("usd: 800.00") == 1
    study_yml.write_text(text.replace("usd: 800.00", "usd: 900.00"))
    ran = pilot(env, "run", "env", "--no-progress")
    assert ran.returncode == 3 and "sets an envelope of 900.00 dollars but study env keeps 8.00" in ran.stderr
    with Store.open(root / "analysis" / "data" / "env") as st:
        spent = st.balance().spent_usd
    one_line_fault(
        pilot(env, "envelope", "env", "--set", "0.5", "--amendment", high), r"below what study env has already spent"
    )
    raised = pilot(env, "envelope", "env", "--set", "800", "--amendment", high)
    assert raised.returncode == 0, raised.stderr
    assert json.loads(raised.stdout)["old_usd"] == 8.0 and json.loads(raised.stdout)["new_usd"] == 800.0
    done = pilot(env, "run", "env", "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(amendments.open()))
    added = [r for r in rows if r["id"] in (low, high)]
    assert [r["id"] for r in added] == [low, high] and "from 8.00 to 800.00 dollars" in added[1]["content"]
    assert amendments.read_text().startswith(before) and protocol.load_amendments(amendments)
    status = json.loads(pilot(env, "status", "env", "--json").stdout)
    assert [(c["old_usd"], c["new_usd"], c["amendment_id"]) for c in status["envelope_changes"]] == [
        (float(protocol.study().envelope_usd), 8.0, low),
        (8.0, 800.0, high),
    ]
    assert status["ledger_problems"] == [] and status["envelope"]["envelope_usd"] == 800.0 and spent > 0
    # an amendment already written (with its rationale) is referenced, not duplicated
    # dated as the last amendment, so the order of dates holds on any day the suite runs
    last_date = list(csv.DictReader(amendments.open()))[-1]["date"]
    with amendments.open("a") as fh:
        fh.write(
            f'{written},{last_date},before rerun pilot,Envelope for the rerun,"Raised to 900 dollars to '
            'rerun failed runs."\n'
        )
    assert pilot(env, "envelope", "env", "--set", "900", "--amendment", written).returncode == 0
    assert [r["id"] for r in csv.DictReader(amendments.open())].count(written) == 1


# ------------------------------------------------------------------ damaged stores


def test_a_truncated_or_corrupted_store_is_named_and_left_in_place(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    assert pilot(env, "create", "c", "--scenarios", "ACC-01", "--runner", NOOP).returncode == 0
    assert pilot(env, "run", "c", "--no-progress").returncode == 0
    db = _db(root, "c")
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    for cmd in (("status", "c"), ("run", "c", "--no-progress"), ("export", "c")):
        one_line_fault(
            pilot(env, *cmd),
            r"study.sqlite",
            r"(truncated or corrupted|no study|no cells)",
            r"restore it from a backup",
        )
    assert db.read_bytes() == data[: len(data) // 2]  # nothing overwrote the evidence
    db.write_bytes(b"x" * len(data))
    one_line_fault(pilot(env, "status", "c"), r"study.sqlite", r"truncated or corrupted", r"restore it from a backup")


@pytest.mark.usefixtures("dask")
def test_lost_dask_scheduler_is_one_line(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    assert pilot(env, "create", "d", "--scenarios", "ACC-01", "--runner", NOOP).returncode == 0
    res = pilot(env, "run", "d", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:9", "--no-progress")
    one_line_fault(res, r"cannot reach the dask scheduler at tcp://127.0.0.1:9", r"start it")
    with Store.open(root / "analysis" / "data" / "d") as st:
        assert st.study().freeze_manifest is None and not st.attempts()


# ------------------------------------------------------------------ full and read-only disks (a real small file system)


def _can_mount() -> bool:
    try:
        return (
            subprocess.run(
                ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_export_is_atomic_and_failed_runs_have_no_outcomes(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    assert pilot(env, "create", "x", "--scenarios", "ACC-01").returncode == 0
    with Store.open(root / "analysis" / "data" / "x") as st:
        finish_cells(st, failed=2)
    res = pilot(env, "export", "x")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["failed_runs"] == 2 and json.loads(res.stdout)["rows"] == 10
    text = (root / "analysis" / "data" / "x" / "runs.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    failed = [r for r in rows if r["status"] == "infra_error"]
    assert len(failed) == 2
    for r in failed:  # nothing invented: outcomes and costs empty, the ledger's charge and the attempts kept
        assert all(
            r[c] == "" for c in ("D", "E", "criteria_passed", "Q", "S", "cost_usd", "judge_cost_usd", "cost_complete")
        ), r
        assert r["attempts"] == "3" and r["charged_usd"] == "0.0"
    checked = runtable.read_runtable(root / "analysis" / "data" / "x" / "runs.csv")
    assert len(checked) == 8 and checked.attrs["failed_runs_dropped"] == 2
    assert not list((root / "analysis" / "data" / "x").glob(".runs.csv.*"))  # nothing left beside it


def _can_mount() -> bool:
    try:
        return (
            subprocess.run(
                ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_full_and_read_only_disks_lose_nothing(tmp_path):
    if not _can_mount():
        pytest.skip("needs root and mount namespaces (unshare -m) to make a small file system")
    root = make_root(tmp_path)
    data = root / "analysis" / "data"
    # Two studies made on the ordinary disk: one finished (to export), one waiting (to run).
    env = _env(root, PILOT_FAKE_SLEEP_S="0")
    assert pilot(env, "create", "done", "--scenarios", "ACC-01").returncode == 0
    with Store.open(data / "done") as st:
        finish_cells(st, failed=1)
    assert pilot(env, "export", "done").returncode == 0
    assert pilot(env, "create", "todo", "--scenarios", "ACC-01", "RES-01", "--runner", FAKE).returncode == 0
    saved = tmp_path / "saved"
    shutil.copytree(data, saved)
    py = sys.executable
    # In a private mount namespace a 3 MB tmpfs replaces analysis/data: it is filled, then made read-only.
    script = tmp_path / "faults.sh"
    script.write_text(f"""set -u
D={data}
mount -t tmpfs -o size=3m tmpfs "$D" || exit 90
cp -a {saved}/. "$D"/
st() {{ "{py}" -m pilot study "$@"; echo "rc=$?"; }}
dd if=/dev/zero of="$D/fill" bs=4k >/dev/null 2>&1
echo '== export-full'; st export done
cmp -s "$D/done/runs.csv" {saved}/done/runs.csv && echo same-csv
echo '== run-full'; st run todo --no-progress
echo '== create-full'; st create more --scenarios ACC-01
rm -f "$D/fill"
echo '== run-after'; st run todo --no-progress
dd if=/dev/zero of="$D/fill" bs=4k >/dev/null 2>&1
echo '== retry-full'; st retry todo --failed
rm -f "$D/fill"
mount -o remount,ro "$D"
echo '== run-ro'; st run todo --no-progress
echo '== export-ro'; st export done
echo '== create-ro'; st create other --scenarios ACC-01
mount -o remount,rw "$D"
echo '== status-final'; st status todo --json
cmp -s "$D/done/runs.csv" {saved}/done/runs.csv && echo same-csv
""")
    res = subprocess.run(["unshare", "-m", "sh", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert "rc=90" not in res.stdout, res.stdout + res.stderr
    sections = dict(re.findall(r"== (\S+)\n(.*?)(?=\n== |\Z)", res.stdout, re.S))
    faults = [ln for ln in res.stderr.splitlines() if ln.startswith("pilot study:")]
    assert "Traceback" not in res.stderr, res.stderr
    assert "rc=2" in sections["export-full"] and "same-csv" in sections["export-full"]
    for name in ("run-full", "create-full", "retry-full"):
        assert "rc=2" in sections[name], (name, res.stdout, res.stderr)
    assert "rc=0" in sections["run-after"], res.stderr
    for name in ("run-ro", "export-ro", "create-ro"):
        assert "rc=2" in sections[name], (name, res.stdout, res.stderr)
    assert "same-csv" in sections["status-final"]
    final = json.loads(sections["status-final"].split("rc=")[0])
    assert final["ledger_problems"] == [] and final["envelope"]["reserved_usd"] == 0
    assert next(r for r in final["by_arm"] if r["arm"] == "all")["done"] == 20
    full = [f for f in faults if "disk is full" in f]
    ro = [f for f in faults if "read-only" in f]
    shown = "\n".join(faults)
    assert len(full) == 4 and all("free space" in f for f in full), shown
    assert len(ro) == 3 and all("make it writable" in f for f in ro), shown
    assert len(faults) == 7, shown


@pytest.mark.usefixtures("dask")
def test_dask_scheduler_lost_mid_wave_is_one_line_and_the_next_run_recovers(tmp_path):
    root = make_root(tmp_path)
    env = _env(root)
    assert pilot(env, "create", "lost", "--scenarios", "ACC-01", "--runner", FAKE).returncode == 0
    # A whole cluster in one process: killing it loses the scheduler (and its worker) at once.
    caps = {"slots": 4, "linux": 4, "libreoffice": 4, "chromium": 4, "portal": 4, "macos": 4}
    cluster = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time\nfrom distributed import LocalCluster\nc = LocalCluster(n_workers=1, "
                "threads_per_worker=4, processes=False, protocol='tcp://', dashboard_address=None, "
                f"resources={caps!r})\nprint(c.scheduler_address, flush=True)\ntime.sleep(600)\n"
            ),
        ],
        env=_env(root, PILOT_FAKE_SLEEP_S="30", PILOT_FAKE_SPAWN="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        address = cluster.stdout.readline().strip()
        assert address.startswith("tcp://"), address
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pilot",
                "study",
                "run",
                "lost",
                "--executor",
                "dask",
                "--scheduler",
                address,
                "--no-progress",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        folder = root / "analysis" / "data" / "lost"
        # The worker runs its attempts in private folders of its own (here under the same root's analysis/).
        attempts_at = root / "analysis"
        deadline = time.monotonic() + 120
        while len(list(attempts_at.rglob("spawned.txt"))) < 2:
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.1)
        cluster.kill()
        cluster.wait()
        out, err = run.communicate(timeout=240)
    finally:
        if cluster.poll() is None:
            cluster.kill()
    one_line_fault(
        subprocess.CompletedProcess(run.args, run.returncode, out, err),
        r"lost the dask scheduler at " + re.escape(address),
        r"next `pilot study run`",
    )
    pids = [int(x) for f in attempts_at.rglob("spawned.txt") for x in f.read_text().split()]
    deadline = time.monotonic() + 10
    while any(
        Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split(")")[-1][:3] for p in pids
    ):
        assert time.monotonic() < deadline, "processes of attempts outlived their lost cluster"
        time.sleep(0.1)
    resumed = pilot(env, "run", "lost", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    with Store.open(folder) as st:
        assert st.counts("pilot")["done"] == 10 and st.audit() == [] and st.balance().reserved_usd == 0
        attempts = st.attempts()
        assert {a["outcome"] for a in attempts} >= {"interrupted", "completed"}, [
            (a["outcome"], a["error"]) for a in attempts
        ]
