"""A study on dask workers that share nothing with its host but the network.

A real dask scheduler and worker processes on this machine, each worker with
a repository of its own (a copy of protocol/, src/ and analysis/config/ in a
temporary folder: its own ``PILOT_ROOT``, its own ``pilot`` on its
``PYTHONPATH``), none of them under the study's data folder. A small
simulated study runs on them; every run's files must then be in the study's
folder with the digests the worker's package listed, the viewer must show
them and ``reevaluate`` must find each workspace the one the run left. A
worker whose protocol differs by one byte in one oracle file is refused and
named; a package broken in the packing is an infrastructure error rerun
under the same id; a worker killed between its attempt and the transfer
loses nothing and duplicates nothing, and once restarted cleans the folder
the killed attempt left.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# The functions this module runs on the workers travel by value: the workers have no tests/ to import them from.
import cloudpickle
import pytest
from distributed import Client

from pilot import paths
from pilot.store import Store

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCENARIOS = ["LEGAL-01", "HR-01"]
ARMS = "A0,A1"
DASK = Path(sys.executable).with_name("dask")
# The workers run simulated studies whose oracles recalculate workbooks.
pytestmark = pytest.mark.usefixtures("dask", "soffice")


def _own_repository(root: Path, *, oracle_byte: bool = False) -> Path:
    """A worker's own repository: a copy, not a link, so that nothing is shared with the study's host."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for part in ("protocol", "src", "analysis/config"):
        shutil.copytree(paths.ROOT / part, root / part, ignore=ignore)
    if oracle_byte:
        f = root / "protocol" / "scenarios" / SCENARIOS[0] / "oracle.yml"
        f.write_bytes(f.read_bytes() + b"\n")
    return root


class Cluster:
    """A dask scheduler and named workers, each a process of its own with its own environment."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.file = tmp / "scheduler.json"
        self.procs: dict[str, subprocess.Popen] = {}
        self.scheduler = subprocess.Popen(
            [
                str(DASK),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(self.file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not self.file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.address = json.loads(self.file.read_text())["address"]
        self.client = Client(self.address, timeout=30)

    def start_worker(self, name: str, root: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PILOT_", "ANTHROPIC_"))}
        # A rehearsal needs no key and must reach no real API; the harness's own environment stands in for the
        # worker environment (it has the solvers' packages), as in the other rehearsal tests.
        env.update(
            PILOT_ROOT=str(root),
            PYTHONPATH=str(root / "src"),
            OPENBLAS_NUM_THREADS="1",
            PILOT_WORKER_ENV=sys.prefix,
            ANTHROPIC_BASE_URL="http://192.0.2.1:9",
        )
        self.procs[name] = subprocess.Popen(
            [
                str(DASK),
                "worker",
                self.address,
                "--name",
                name,
                "--nthreads",
                "1",
                "--no-nanny",
                "--memory-limit",
                "0",
                "--resources",
                "slots=1 linux=1",
                "--no-dashboard",
            ],
            env=env,
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / f"{name}.log", "ab"),
        )
        deadline = time.monotonic() + 60
        while name not in self.names() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert name in self.names(), (self.tmp / f"{name}.log").read_text()[-2000:]

    def names(self) -> dict[str, str]:
        return {info["name"]: addr for addr, info in self.client.scheduler_info(n_workers=-1)["workers"].items()}

    def close(self) -> None:
        self.client.close()
        for p in [*self.procs.values(), self.scheduler]:
            if p.poll() is None:
                p.terminate()
        for p in [*self.procs.values(), self.scheduler]:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()  # nothing of theirs is needed any more: every study of the module has finished
                p.wait(5)


def _where_pilot_lives() -> str:
    import pilot

    return str(Path(pilot.__file__).resolve())


def _break_next_package() -> None:
    """On a worker: the next package loses a byte of its archive in the packing (as a transfer broken mid-way)."""
    from pilot.executors import transfer

    real = transfer.pack_attempt

    def broken(*a, **kw):
        transfer.pack_attempt = real
        pkg = real(*a, **kw)
        data = bytearray(pkg.data)
        data[len(data) // 2] ^= 0xFF
        return transfer.Package(bytes(data), pkg.manifest)

    transfer.pack_attempt = broken


def _die_before_packing() -> None:
    """On a worker: killed between the attempt and the transfer."""
    from pilot.executors import transfer

    transfer.pack_attempt = lambda *a, **kw: os.kill(os.getpid(), signal.SIGKILL)


def _study(name: str, root: Path, cluster: Cluster):
    from pilot.study import create_study, run_study_wave

    create_study(name, scenarios=SCENARIOS, arms=ARMS, pilot_repeats=1).close()
    return run_study_wave(name, backend="simulated", executor="dask", scheduler_address=cluster.address, progress=False)


def _attempts(name: str) -> list[dict]:
    with Store.open(paths.study_dir(name)) as st:
        return sorted(st.attempts(), key=lambda a: (a["run_id"], a["attempt_no"]))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("share-nothing")
    c = Cluster(tmp)
    try:
        for name in ("w1", "w2"):
            c.start_worker(name, _own_repository(tmp / name))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(paths, "DATA_DIR", tmp / "host" / "data")
            yield c
    finally:
        c.close()


def test_every_runs_files_come_home_with_their_digests_and_the_study_uses_them(cluster):
    roots = cluster.client.run(_where_pilot_lives)
    assert {Path(p).parts[-4] for p in roots.values()} == {"w1", "w2"}  # each worker runs its own copy of pilot
    result = _study("apart", cluster.tmp, cluster)
    assert result.stop_reason == "complete" and not result.refused_nodes
    attempts = _attempts("apart")
    assert {a["node"] for a in attempts} == {"w1", "w2"} and all(a["outcome"] == "completed" for a in attempts)
    study_dir = paths.study_dir("apart")
    for a in attempts:
        folder = Path(a["workspace"])
        assert folder.is_relative_to(study_dir)  # where a local run puts it
        manifest = json.loads((folder / "transfer_manifest.json").read_text())
        assert manifest["files"] and manifest["omitted"] == {}
        for rel, entry in manifest["files"].items():
            data = (folder / rel).read_bytes()
            assert len(data) == entry["size"] and hashlib.sha256(data).hexdigest() == entry["sha256"], rel
        assert any(rel.startswith("workspace/outputs/") for rel in manifest["files"])
        origin = json.loads((folder / "transfer_origin.json").read_text())
        assert origin["node"] == a["node"] and Path(origin["worker_folder"]).is_relative_to(cluster.tmp / a["node"])
        assert not Path(origin["worker_folder"]).exists()  # the worker let its private copy go, and what sat beside it
        assert not any(Path(origin["worker_folder"]).parent.iterdir())
    with Store.open(study_dir) as st:
        records = {r["run_id"]: json.loads(r["record_json"]) for r in st.runs()}
    for rec in records.values():
        assert Path(rec["workspace"]).is_relative_to(study_dir), rec["workspace"]  # the record names the study's copy
    # The viewer shows a run's files from the study's copy.
    from pilot.view.app import create_app

    client = create_app(study_dir).test_client()
    run_id = sorted(records)[0]
    resp = client.get(f"/runs/{run_id}")
    page = resp.get_data(as_text=True)
    assert resp.status_code == 200 and run_id in page and "completion_record.json" in page
    # Every workspace the study holds is the one its run left (its digest is the record's), and reevaluate works on
    # it: a run recorded as if its evaluation could not run gets its verdict again from the study's copy.
    from pilot.reevaluate import reevaluate_study, untrusted

    for a in attempts:
        rec = records[a["run_id"]]
        assert untrusted(rec, Path(a["workspace"]), Path(rec["workspace"])) is None, a["run_id"]
    rid = sorted(records)[0]
    with Store.open(study_dir) as st:
        broken = dict(records[rid], eval_error="the evaluation could not run (set by the test)", D=None, E=None)
        st.conn.execute("UPDATE runs SET record_json = ? WHERE run_id = ?", (json.dumps(broken), rid))
        st.conn.commit()
    _, results = reevaluate_study(study_dir, run_ids=[rid])
    assert [(r.outcome, r.D) for r in results] == [("verdict", records[rid]["D"])], results


def test_a_worker_one_byte_off_in_an_oracle_is_refused_and_named(cluster):
    cluster.start_worker("w3", _own_repository(cluster.tmp / "w3", oracle_byte=True))
    try:
        result = _study("one-byte", cluster.tmp, cluster)
        assert result.stop_reason == "complete"
        assert set(result.refused_nodes) == {"w3"}
        assert f"protocol/scenarios/{SCENARIOS[0]}/oracle.yml differs" in result.refused_nodes["w3"]
        attempts = _attempts("one-byte")
        refused = [a for a in attempts if a["node"] == "w3"]
        assert len(refused) == 1 and refused[0]["outcome"] == "infra_error"  # one refusal, then nothing more to w3
        assert all(a["outcome"] == "completed" for a in attempts if a["node"] != "w3")
    finally:
        cluster.procs.pop("w3").terminate()


def test_a_package_broken_after_the_run_keeps_the_run_s_outcome_once(cluster):
    """The files of a finished attempt fail to arrive: the run keeps its outcome (evaluated and judged on the node),
    names the fault, and is never drawn again; the broken package is kept apart."""
    addr = cluster.names()["w1"]
    cluster.client.run(_break_next_package, workers=[addr])
    result = _study("broken", cluster.tmp, cluster)
    assert result.stop_reason == "complete"
    attempts = _attempts("broken")
    assert all(a["outcome"] == "completed" for a in attempts)
    assert len({a["run_id"] for a in attempts}) == len(attempts)  # one attempt each: nothing rerun
    with Store.open(paths.study_dir("broken")) as st:
        records = {r["run_id"]: json.loads(r["record_json"]) for r in st.runs()}
    faulted = [rid for rid, rec in records.items() if rec.get("harness_fault")]
    assert len(faulted) == 1, faulted
    rec = records[faulted[0]]
    fault = rec["harness_fault"]
    assert "(phase transfer): transfer: the files of this attempt from node w1 did not arrive intact" in fault
    assert rec["D"] is not None and rec["judges"]  # its verdict and grades, from the node
    broken = next(a for a in attempts if a["run_id"] == faulted[0])
    kept = list(Path(broken["workspace"]).parent.glob("attempt-1.transfer-failed-*"))
    assert kept and (kept[0] / "package.tar.gz").is_file()


def test_a_worker_killed_between_attempt_and_transfer_loses_and_repeats_nothing(cluster):
    addr = cluster.names()["w2"]
    cluster.client.run(_die_before_packing, workers=[addr])
    result = _study("killed", cluster.tmp, cluster)
    assert result.stop_reason == "complete"
    attempts = _attempts("killed")
    by_run: dict[str, list[dict]] = {}
    for a in attempts:
        by_run.setdefault(a["run_id"], []).append(a)
    for rid, atts in by_run.items():
        assert [a["outcome"] for a in atts].count("completed") == 1, (rid, atts)  # finished exactly once
    lost = [a for a in attempts if a["outcome"] == "infra_error"]
    assert len(lost) == 1 and lost[0]["node"] == "w2"
    # The killed attempt's private folder is left on w2's disk; a restarted w2 cleans it before its first run.
    stale = list((cluster.tmp / "w2" / "analysis" / "worker-attempts" / "w2" / "killed").glob("*/attempt-*"))
    assert stale
    cluster.procs["w2"].wait(30)
    cluster.start_worker("w2", cluster.tmp / "w2")
    from pilot.executors.dask import clean_stale_attempts

    removed = cluster.client.run(clean_stale_attempts, "w2", set(), workers=[cluster.names()["w2"]])
    assert {str(p) for p in stale} <= set(next(iter(removed.values())))
    assert not any(p.exists() for p in stale)


@pytest.mark.usefixtures("real_cli", "bwrap", "soffice")
def test_a_rehearsal_through_the_real_cli_on_a_worker_of_its_own_comes_home_whole(cluster):
    """The real harness on a worker that shares nothing: the scripted server's record travels with the attempt, so the
    study's host checks the run as it checks a local one, and finds nothing."""
    from real_cli_support import require_real_sandbox

    from pilot.simulated import rehearsal_report as rehearsal
    from pilot.study import create_study, export_run_table, run_study_wave

    require_real_sandbox()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ANTHROPIC_API_KEY", raising=False)
        mp.setenv("ANTHROPIC_BASE_URL", "http://192.0.2.1:9")
        mp.setenv("PILOT_WORKER_ENV", sys.prefix)
        create_study("rehearsed", scenarios=["LEGAL-01"], arms="A1", pilot_repeats=1).close()
        result = run_study_wave(
            "rehearsed", backend="rehearsal", executor="dask", scheduler_address=cluster.address, progress=False
        )
        assert result.stop_reason == "complete" and not result.refused_nodes, result.refused_nodes
        table, _ = export_run_table("rehearsed", out=cluster.tmp / "rehearsed.csv")
        report = rehearsal.collect("rehearsed", run_table=table, host_arms=["A1"])
    assert report.findings == [], report.findings
    [run] = report.runs
    assert run.status == "completed" and run.D == run.expected_pass and run.judges_parsed == 3
    [a] = _attempts("rehearsed")
    assert (
        a["node"] in {"w1", "w2"} and (Path(a["workspace"]).with_name("attempt-1.scripted") / "truth.jsonl").is_file()
    )
