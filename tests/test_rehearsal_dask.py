"""A rehearsal through the dask executor: the real harness run by two real dask worker processes.

The same rehearsal as ``test_rehearsal.py`` (the real pinned CLI in the real
sandbox behind the metering proxy, a scripted model server per attempt, three
real CLI judge sessions), but ``pilot study run --executor dask`` against a
real dask scheduler with two worker processes on this machine. Each attempt
then starts its supervisor, its scripted model server and its judges inside a
dask worker, which is where the local executor's rehearsal cannot look. Not
skipped without the CLI or the sandbox: it fails, because a rehearsal that did
not run proves nothing.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from distributed import Client, LocalCluster, Nanny, get_task_stream
from real_cli_support import rehearsal_environment, require_real_sandbox

from pilot import runtable
from pilot.agents import worker_env
from pilot.simulated import rehearsal_report as rehearsal
from pilot.store import STORE_FILE

SID = "LEGAL-01"
# A0 and A1 need no capability, so either worker may take either run; they are the two cheapest arms of the scenario.
ARMS = ["A0", "A1"]
NAME = "rehearsal-dask"
# One slot each: the study's scheduler (least loaded first) then puts one run on each worker.
WORKERS = ("dask-w1", "dask-w2")
pytestmark = pytest.mark.usefixtures("real_cli", "bwrap", "soffice", "dask")


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory):
    require_real_sandbox()
    from pilot.study import create_study, export_run_table, run_study_wave

    root = tmp_path_factory.mktemp("rehearsal-dask")
    with pytest.MonkeyPatch.context() as mp:
        # Only this process reads the data folder: the executor names each attempt's folder to its worker by absolute
        # path, and the workers find the protocol from their own import of pilot (PILOT_ROOT when the clone is
        # elsewhere). The workers inherit this environment when they spawn, so it is set before the cluster starts.
        rehearsal_environment(mp, root / "data")
        cluster = LocalCluster(n_workers=0, processes=True, dashboard_address=None, silence_logs=40)
        client = None
        try:
            for name in WORKERS:
                cluster.worker_spec[name] = {
                    "cls": Nanny,
                    "options": {"name": name, "nthreads": 1, "memory_limit": 0, "resources": {"slots": 1, "linux": 1}},
                }
            cluster.sync(cluster._correct_state)
            client = Client(cluster)
            client.wait_for_workers(len(WORKERS), timeout=60)
            name_of = {addr: info["name"] for addr, info in client.scheduler_info(n_workers=-1)["workers"].items()}
            # What each worker process really holds: a worker spawned before these were set would run elsewhere.
            seen = client.run(_rehearsal_environ)
            assert set(seen.values()) == {(sys.prefix, None, "http://192.0.2.1:9")}, seen
            create_study(NAME, scenarios=[SID], arms=",".join(ARMS), pilot_repeats=1).close()
            # The dask scheduler's own record of which worker ran which task, independent of what the store says.
            with get_task_stream(client) as stream:
                result = run_study_wave(
                    NAME,
                    backend="rehearsal",
                    executor="dask",
                    scheduler_address=cluster.scheduler_address,
                    progress=False,
                )
            table_path, _ = export_run_table(NAME, out=root / "out" / "runs.csv")
            report = rehearsal.collect(NAME, run_table=table_path, host_arms=ARMS)
            study_dir = root / "data" / NAME
            with sqlite3.connect(study_dir / STORE_FILE) as conn:
                conn.row_factory = sqlite3.Row
                attempts = [
                    dict(r) for r in conn.execute("SELECT run_id, attempt_no, node, outcome, workspace FROM attempts")
                ]
            yield {
                "result": result,
                "report": report,
                "table": runtable.read_runtable(table_path),
                "attempts": attempts,
                "tasks": stream.data,
                "name_of": name_of,
                "study_dir": study_dir,
            }
        finally:
            if client is not None:
                client.close()
            cluster.close()


def _rehearsal_environ() -> tuple[str | None, str | None, str | None]:
    import os

    return os.environ.get(worker_env.ENV_VAR), os.environ.get("ANTHROPIC_API_KEY"), os.environ.get("ANTHROPIC_BASE_URL")


def test_the_dask_workers_rehearse_every_run_and_the_report_finds_nothing(rehearsed):
    report = rehearsed["report"]
    assert rehearsed["result"].stop_reason == "complete"
    assert report.findings == [], "\n".join(report.findings)
    assert sorted(r.arm for r in report.runs) == ARMS
    for r in report.runs:
        assert r.status == "completed" and r.attempts == 1 and r.cli_sessions >= 1
        assert r.D is not None and r.D == r.expected_pass
        assert r.judges_parsed == r.judges_total == 3
        assert r.metered_cost_usd is not None and r.judge_cost_usd is not None
    # Inside a dask worker the attempt was still sandboxed, as the local executor's are.
    table = rehearsed["table"]
    assert set(table["backend"]) == {"rehearsal"} and set(table["enforcement"]) <= {"bubblewrap", "sandbox-exec"}
    assert runtable.data_label(table) == "REHEARSAL" and table["n_judges"].eq(3).all()


def test_each_attempt_ran_on_a_dask_worker_that_the_store_names(rehearsed):
    attempts = rehearsed["attempts"]
    assert len(attempts) == len(ARMS) and {a["outcome"] for a in attempts} == {"completed"}
    # The node stored on each attempt is a worker's name, and one run went to each worker (neither the local
    # executor's virtual nodes nor a single worker doing everything).
    assert sorted(a["node"] for a in attempts) == sorted(WORKERS)
    # Each attempt's task ran on the worker the store names, by the dask scheduler's own task stream.
    ran_on = {
        t["key"]: rehearsed["name_of"].get(t["worker"])
        for t in rehearsed["tasks"]
        if str(t["key"]).startswith("attempt-")
    }
    for a in attempts:
        key = f"attempt-{a['run_id']}-{Path(a['workspace']).name}"
        assert ran_on.get(key) == a["node"], (key, ran_on)
        # ... and wrote its workspace under this study's folder, which the worker knew only from the submitted path.
        assert Path(a["workspace"]).is_relative_to(rehearsed["study_dir"]) and Path(a["workspace"]).is_dir()
