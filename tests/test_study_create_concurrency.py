"""Commands racing on one study: only the one that holds it writes the files beside its store, and they agree with the
store.

Two ``pilot study create`` of one name at once: the store takes exactly one,
and ``assignment_pilot.csv`` must be that one's assignment, not the last
writer's. The same for a later wave's ``assignment_<wave>.csv``, for
``runs.csv``, and for ``create --fresh``, which must not delete a study
another command is creating or running.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from schedule_support import finish_cells, make_root

from pilot.schedule import assignment_csv, build_cells, study_lock
from pilot.store import STORE_FILE, Store

NOOP = "pilot.simulated.fake_runs:noop_run"
SCENARIOS = ["ACC-01", "LEGAL-01"]  # a pilot of some tens of cells: quick to create, enough to tell two seeds apart
RACERS = 4
ROUNDS = 2

# Each racer loads everything first, says so, then waits for the go file: the creates start within a millisecond of each
# other.
_RACER = r"""
import sys, time
from pathlib import Path
from pilot import protocol
from pilot.cli.main import main
import pilot.study
protocol.study()
print("ready", flush=True)
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.0005)
sys.exit(main(sys.argv[2:]))
"""


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PILOT_FAKE_")}
    env["PILOT_ROOT"] = str(root)
    return env


def _pilot(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pilot", "study", *args], env=_env(root), capture_output=True, text=True, timeout=timeout
    )


def _fault(res: subprocess.CompletedProcess) -> str:
    """The one ``pilot study:`` line of a refused command (no traceback)."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    faults = [ln for ln in res.stderr.splitlines() if ln.startswith("pilot study:")]
    assert len(faults) == 1, res.stderr
    return faults[0]


def _race(root: Path, tmp: Path, commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Start every command (``pilot`` arguments) at once; their results in the same order."""
    go = tmp / f"go-{time.monotonic_ns()}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(go), *cmd],
            env=_env(root),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cmd in commands
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.communicate()
        go.touch()
        done = []
        for cmd, p in zip(commands, procs, strict=True):
            out, err = p.communicate(timeout=300)
            done.append(subprocess.CompletedProcess(cmd, p.returncode, out, err))
        return done
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _file_rows(path: Path) -> dict[int, str]:
    return {int(r["order_index"]): r["run_id"] for r in csv.DictReader(path.read_text(encoding="utf-8").splitlines())}


def _store_rows(store: Store, wave: str) -> dict[int, str]:
    return {c.order_index: c.run_id for c in store.cells(wave)}


def _disagreeing(file_rows: dict[int, str], store_rows: dict[int, str]) -> int:
    return sum(file_rows.get(i) != store_rows.get(i) for i in set(file_rows) | set(store_rows))


def _nothing_left_beside(folder: Path) -> None:
    left = [p.name for p in folder.iterdir() if p.name.startswith(".") or ".partial-" in p.name]
    assert not left, left


# ------------------------------------------------------------------ create


def test_racing_creates_one_wins_and_the_assignment_file_is_the_stores(tmp_path):
    root = make_root(tmp_path)
    data = root / "analysis" / "data"
    per_round = []
    for rnd in range(ROUNDS):
        name = f"race{rnd}"
        seeds = [1000 * (rnd + 1) + k for k in range(RACERS)]  # one assignment per racer
        results = _race(
            root, tmp_path, [["study", "create", name, "--seed", str(s), "--scenarios", *SCENARIOS] for s in seeds]
        )
        won = [r for r in results if r.returncode == 0]
        assert len(won) == 1, [(r.returncode, r.stderr) for r in results]
        for r in results:
            if r.returncode != 0:
                assert f"study {name!r} already exists; choose another name" in _fault(r)
        seed = json.loads(won[0].stdout.splitlines()[-1])["seed"]
        assert seed in seeds
        folder = data / name
        with Store.open(folder) as st:
            assert st.study().seed == seed
            in_store = _store_rows(st, "pilot")
            from_store = assignment_csv(st.cells("pilot"))
        on_disk = _file_rows(folder / "assignment_pilot.csv")
        per_round.append(_disagreeing(on_disk, in_store))
        if per_round[-1] == 0:
            # Byte for byte: the winner's seeded assignment, as the store keeps it.
            text = (folder / "assignment_pilot.csv").read_text(encoding="utf-8")
            assert text == from_store == assignment_csv(build_cells(name, "pilot", SCENARIOS, seed))
        _nothing_left_beside(folder)
    assert per_round == [0] * ROUNDS, (
        f"assignment_pilot.csv disagrees with the store on {per_round} order indices of {len(in_store)} (per round)"
    )


def test_a_create_waits_while_another_command_holds_the_study_then_decides(tmp_path):
    root = make_root(tmp_path)
    folder = root / "analysis" / "data" / "held"
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with study_lock(folder):
            held.set()
            release.wait(60)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(30)
        proc = subprocess.Popen(
            [sys.executable, "-m", "pilot", "study", "create", "held", "--seed", "5", "--scenarios", *SCENARIOS],
            env=_env(root),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            assert not (folder / STORE_FILE).exists() and not (folder / "assignment_pilot.csv").exists()
            time.sleep(0.05)
    finally:
        release.set()
        t.join()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    with Store.open(folder) as st:
        assert (folder / "assignment_pilot.csv").read_text(encoding="utf-8") == assignment_csv(st.cells("pilot"))


# ------------------------------------------------------------------ --fresh


def test_fresh_refuses_a_study_another_command_holds_and_deletes_nothing(tmp_path):
    root = make_root(tmp_path)
    folder = root / "analysis" / "data" / "fr"
    assert _pilot(root, "create", "fr", "--seed", "1", "--scenarios", *SCENARIOS).returncode == 0
    store_bytes = (folder / STORE_FILE).read_bytes()
    file_bytes = (folder / "assignment_pilot.csv").read_bytes()
    with study_lock(folder):  # as `pilot study run fr` holds it
        line = _fault(_pilot(root, "create", "fr", "--fresh", "--seed", "2", "--scenarios", *SCENARIOS))
        assert "study 'fr'" in line and "another process" in line and "scheduler.lock" in line, line
        assert (folder / STORE_FILE).read_bytes() == store_bytes
        assert (folder / "assignment_pilot.csv").read_bytes() == file_bytes
    # Once nobody holds it, --fresh replaces it, and the new file is the new store's.
    res = _pilot(root, "create", "fr", "--fresh", "--seed", "2", "--scenarios", *SCENARIOS)
    assert res.returncode == 0, res.stderr
    with Store.open(folder) as st:
        assert st.study().seed == 2
        assert (folder / "assignment_pilot.csv").read_text(encoding="utf-8") == assignment_csv(st.cells("pilot"))
    _nothing_left_beside(folder)


def test_fresh_refuses_while_another_create_of_the_name_holds_it(tmp_path):
    root = make_root(tmp_path)
    folder = root / "analysis" / "data" / "mid"
    with study_lock(folder):  # a create of "mid" in progress: its store is not linked yet
        line = _fault(_pilot(root, "create", "mid", "--fresh", "--seed", "3", "--scenarios", *SCENARIOS))
        assert "study 'mid'" in line and "another process" in line, line
        assert not (folder / STORE_FILE).exists() and not (folder / "assignment_pilot.csv").exists()


def test_racing_fresh_creates_never_leave_a_file_that_disagrees(tmp_path):
    root = make_root(tmp_path)
    folder = root / "analysis" / "data" / "again"
    assert _pilot(root, "create", "again", "--seed", "9", "--scenarios", *SCENARIOS).returncode == 0
    for rnd in range(2):
        seeds = [100 * (rnd + 1) + k for k in range(4)]
        results = _race(
            root,
            tmp_path,
            [["study", "create", "again", "--fresh", "--seed", str(s), "--scenarios", *SCENARIOS] for s in seeds],
        )
        won = [r for r in results if r.returncode == 0]
        assert len(won) >= 1, [r.stderr for r in results]
        for r in results:
            if r.returncode != 0:
                line = _fault(r)
                assert "another process" in line or "already exists" in line, line
        with Store.open(folder) as st:
            assert st.study().seed in {json.loads(r.stdout.splitlines()[-1])["seed"] for r in won}
            assert _disagreeing(_file_rows(folder / "assignment_pilot.csv"), _store_rows(st, "pilot")) == 0
        _nothing_left_beside(folder)


# ------------------------------------------------------------------ later waves and the run table


def test_racing_wave_starts_add_the_wave_once_and_its_file_is_the_stores(tmp_path):
    root = make_root(tmp_path)
    folder = root / "analysis" / "data" / "w"
    assert _pilot(root, "create", "w", "--seed", "21", "--scenarios", *SCENARIOS, "--runner", NOOP).returncode == 0
    res = _pilot(root, "run", "w", "--no-progress")
    assert res.returncode == 0, res.stderr
    results = _race(root, tmp_path, [["study", "run", "w", "--wave", "repeat3", "--no-progress"]] * 4)
    assert any(r.returncode == 0 for r in results), [r.stderr for r in results]
    for r in results:
        if r.returncode != 0:
            assert "another scheduler" in _fault(r)
    with Store.open(folder) as st:
        assert len(st.cells("repeat3")) == len(build_cells("w", "repeat3", SCENARIOS, 21))
        assert (folder / "assignment_repeat3.csv").read_text(encoding="utf-8") == assignment_csv(st.cells("repeat3"))
    _nothing_left_beside(folder)


def test_a_run_under_the_lock_puts_back_an_assignment_file_that_disagrees_with_the_store(tmp_path):
    # Studies created before creates were serialised may keep the losing racer's file: the next run repairs it.
    root = make_root(tmp_path)
    folder = root / "analysis" / "data" / "fix"
    assert _pilot(root, "create", "fix", "--seed", "4", "--scenarios", *SCENARIOS, "--runner", NOOP).returncode == 0
    wrong = assignment_csv(build_cells("fix", "pilot", SCENARIOS, 5))
    (folder / "assignment_pilot.csv").write_text(wrong, encoding="utf-8")
    assert _pilot(root, "run", "fix", "--no-progress").returncode == 0
    assert _pilot(root, "run", "fix", "--wave", "repeat3", "--no-progress").returncode == 0
    (folder / "assignment_repeat3.csv").unlink()
    assert _pilot(root, "run", "fix", "--wave", "repeat3", "--no-progress").returncode == 0
    with Store.open(folder) as st:
        for wave in ("pilot", "repeat3"):
            assert (folder / f"assignment_{wave}.csv").read_text(encoding="utf-8") == assignment_csv(st.cells(wave)), (
                wave
            )


def test_export_beside_the_store_refuses_while_the_study_is_held_and_elsewhere_goes_ahead(tmp_path):
    root = make_root(tmp_path)
    folder = root / "analysis" / "data" / "ex"
    assert _pilot(root, "create", "ex", "--seed", "6", "--scenarios", "ACC-01").returncode == 0
    with Store.open(folder) as st:
        finish_cells(st)
    with study_lock(folder):  # a run of the study in progress
        line = _fault(_pilot(root, "export", "ex"))
        assert "scheduler.lock" in line and "--out" in line, line
        assert not (folder / "runs.csv").exists()
        elsewhere = tmp_path / "out" / "runs.csv"
        res = _pilot(root, "export", "ex", "--out", str(elsewhere))
        assert res.returncode == 0 and elsewhere.is_file(), res.stderr
    res = _pilot(root, "export", "ex")
    assert res.returncode == 0, res.stderr
    assert (folder / "runs.csv").read_bytes() == elsewhere.read_bytes()


@pytest.mark.parametrize("wave", ["pilot", "repeat3"])
def test_the_assignment_file_is_written_from_the_stores_rows(tmp_path, monkeypatch, wave):
    # Whatever a command computed, the file is what the store committed.
    from pilot import paths
    from pilot.study import create_study, ensure_wave

    monkeypatch.setattr(paths, "DATA_DIR", make_root(tmp_path) / "analysis" / "data")
    with create_study("rows", seed=8, scenarios=SCENARIOS) as st:
        if wave != "pilot":
            with study_lock(st.folder):
                assert ensure_wave(st, wave) > 0
        assert (st.folder / f"assignment_{wave}.csv").read_text(encoding="utf-8") == assignment_csv(st.cells(wave))
