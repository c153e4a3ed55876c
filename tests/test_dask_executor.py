"""The dask executor on a real LocalCluster: eligibility by worker resources, pinning, and a lost worker."""

from __future__ import annotations

import os
import threading
import time

import pytest

pytest.importorskip("distributed")

from distributed import Client, LocalCluster, Nanny
from schedule_support import REQUIRES, make_store, read_only
from test_process_lifetime import alive, spawned_pids, survivors

from pilot.executors import proctree
from pilot.executors.dask import DaskExecutor, nodes_from_workers, run_attempt_on_worker
from pilot.schedule import Scheduler

RUNNER = "pilot.simulated.fake_runs:sleep_run"
LINUX = {"slots": 2, "linux": 2, "libreoffice": 2, "chromium": 2, "portal": 2}
MAC = {"slots": 1, "macos": 1}
pytestmark = pytest.mark.usefixtures("dask")


@pytest.fixture(scope="module")
def client():
    # Workers inherit the environment at start: each fake attempt takes 0.4 s and leaves processes behind.
    old = os.environ.get("PILOT_FAKE_SLEEP_S")
    os.environ["PILOT_FAKE_SLEEP_S"] = "0.4"
    os.environ["PILOT_FAKE_SPAWN"] = "1"
    cluster = LocalCluster(n_workers=0, processes=True, dashboard_address=None, silence_logs=40)
    for name, res in (("linux-a", LINUX), ("mac-a", MAC)):
        cluster.worker_spec[name] = {
            "cls": Nanny,
            "options": {"name": name, "nthreads": res["slots"], "resources": res, "memory_limit": 0},
        }
    cluster.sync(cluster._correct_state)
    c = Client(cluster)
    c.wait_for_workers(2, timeout=60)
    yield c
    c.close()
    cluster.close()
    os.environ.pop("PILOT_FAKE_SPAWN", None)
    if old is None:
        os.environ.pop("PILOT_FAKE_SLEEP_S", None)
    else:
        os.environ["PILOT_FAKE_SLEEP_S"] = old


def _node_of_address(client) -> dict[str, str]:
    return {addr: info["name"] for addr, info in client.scheduler_info(n_workers=-1)["workers"].items()}


def test_nodes_come_from_worker_resources(client):
    nodes, addresses = nodes_from_workers(client.scheduler_info(n_workers=-1)["workers"])
    by_name = {n.name: n for n in nodes}
    assert set(by_name) == {"linux-a", "mac-a"}
    assert by_name["mac-a"].capabilities == {"macos"} and by_name["mac-a"].slots == 1
    assert by_name["linux-a"].serves(REQUIRES["A3"]) and not by_name["linux-a"].serves(REQUIRES["A2"])
    assert set(addresses.values()) == set(_node_of_address(client))


def test_runs_land_on_eligible_workers_and_a_lost_worker_is_rerun(client, tmp_path):
    st = make_store(tmp_path, scenarios=["ACC-01", "RES-01"])  # 20 runs, 4 of them A2
    ex = DaskExecutor(client, RUNNER, REQUIRES)
    sched = Scheduler(
        st, ex, ex.nodes, backend="simulated", requires=REQUIRES, progress=False, poll_s=0.1, node_wait_s=60
    )
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("r", sched.run("pilot")))
    t.start()

    # Wait until an A2 run is in flight on the mac worker, then kill that worker's process.
    db = st.path
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline:
        conn = read_only(db)
        row = conn.execute(
            "SELECT run_id, attempt_no FROM attempts WHERE outcome = 'running' AND node = 'mac-a'"
        ).fetchone()
        conn.close()
        if row is not None:
            victim = dict(row)
        else:
            time.sleep(0.05)
    assert victim is not None, "no run ever reached the mac worker"
    mac_addr = next(a for a, n in _node_of_address(client).items() if n == "mac-a")
    try:
        client.run(os._exit, 1, workers=[mac_addr])
    except Exception:  # noqa: BLE001 - the worker dies while answering
        pass
    t.join(120)
    assert not t.is_alive()
    ex.close()

    res = result["r"]
    assert res.stop_reason == "complete" and res.counts["done"] == 20
    atts = st.attempts()
    # A2 only ever ran on the macOS-tagged worker; A3/A4 only on the worker with the office stack
    assert {a["node"] for a in atts if ".A2." in a["run_id"]} == {"mac-a"}
    assert {a["node"] for a in atts if ".A3." in a["run_id"] or ".A4." in a["run_id"]} == {"linux-a"}
    lost = [a for a in atts if a["outcome"] == "infra_error"]
    # the run in flight on the killed worker became an infrastructure error of that attempt
    # (normally the victim seen above; any run the worker held at the moment of the kill qualifies)
    assert lost and all(a["node"] == "mac-a" and "mac-a" in a["error"] for a in lost), [
        (a["node"], a["error"]) for a in lost
    ]
    assert all("lost" in a["error"] or "failed" in a["error"] for a in lost)
    # each was rerun under the same id, after the nanny brought the worker back, and finished there
    for a in lost:
        again = [b for b in atts if b["run_id"] == a["run_id"]]
        assert again[-1]["outcome"] == "completed" and again[-1]["attempt_no"] > a["attempt_no"]
        assert again[-1]["node"] == "mac-a"
    assert st.audit() == []
    # every process the attempts left behind ended with its attempt, on the killed worker too
    assert survivors(spawned_pids(st.folder / "workspaces")) == []


def test_a_released_attempt_ends_its_process_tree_on_the_worker(client, tmp_path):
    """When the study's scheduler stops or dies its futures are released: the attempt's whole tree ends."""
    st = make_store(tmp_path, scenarios=["ACC-01"])
    cell = next(c for c in st.cells("pilot") if c.arm == "A1")
    folder = tmp_path / "ws" / cell.run_id / "attempt-1"
    linux = next(a for a, n in _node_of_address(client).items() if n == "linux-a")
    fut = client.submit(
        run_attempt_on_worker,
        "pilot.simulated.fake_runs:long_run",
        cell,
        str(folder),
        "linux-a",
        "simulated",
        workers=[linux],
        resources={"slots": 1},
        pure=False,
    )
    deadline = time.monotonic() + 60
    while not (folder / "outputs" / "spawned.txt").exists():
        assert time.monotonic() < deadline and fut.status == "pending", fut.status
        time.sleep(0.05)
    time.sleep(0.2)
    pids = spawned_pids(folder)
    assert len(pids) == 2 and all(alive(p) for p in pids)
    supervisors = proctree.tagged(str(folder))
    assert supervisors  # the supervisor and its worker carry the attempt's tag
    fut.release()  # what a stopped or dead scheduler's client amounts to
    assert survivors(pids, grace_s=15) == [] and survivors(supervisors, grace_s=5) == []
