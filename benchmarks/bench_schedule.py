"""Scheduling at scale: the per-cell overhead of ordering, node choice and store writes.

Creates and dispatches n cells (scenarios x 5 arms x 20 repeats) with the
no-op run function on the inline executor, so that what is timed is the
scheduler itself: the seeded permutation and cell construction (``order``),
the bulk insert of the cells (``insert``), and the dispatch loop (node
choice, the reservation transaction, the settlement transaction, the
progress bookkeeping; ``dispatch``). The executor here calls the run function
in the scheduler's process without creating the attempt's workspace folder:
that reset is file-system work of constant cost per run, whatever n, and is
timed once on its own (``workspace_reset_us``). The reference run is n = 1,000 in the same
process; each larger n is reported as its per-cell time over the
reference's, beside the ratio n log n growth would allow
(log n / log 1000); the verdict uses CPU time (the algorithm), wall time is
shown beside it (it adds the shared disk's write-back waits). Usage: ``python benchmarks/bench_schedule.py [--max
100000]``.
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from pilot import protocol
from pilot.attempt import AttemptOutcome, CellSpec
from pilot.executors.base import reset_workspace
from pilot.nodes import load_nodes
from pilot.schedule import Scheduler, build_cells
from pilot.simulated.fake_runs import noop_run
from pilot.store import Store

ARMS = ["A0", "A1", "A2", "A3", "A4"]
REPEATS = 20
REFERENCE_N = 1_000


class InlineNoWorkspace:
    """Runs the no-op run function at submit time, in this process, with no workspace folder."""

    def __init__(self) -> None:
        self.done: list[tuple[int, AttemptOutcome]] = []

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None:
        self.done.append((token, noop_run(cell, attempt_dir, node, backend, cell.seed)))

    def wait(self, timeout: float) -> list[tuple[int, AttemptOutcome]]:
        out, self.done = self.done, []
        return out

    def close(self) -> None:
        pass


def workspace_reset_us(workdir: Path, k: int = 500) -> float:
    t0 = time.perf_counter()
    for i in range(k):
        reset_workspace(workdir / "ws" / f"r{i}" / "attempt-1")
    return 1e6 * (time.perf_counter() - t0) / k


def one(n: int, workdir: Path) -> dict[str, float]:
    n_scen = n // (len(ARMS) * REPEATS)
    scenarios = [f"S{k:05d}" for k in range(n_scen)]
    study = protocol.study()
    requires = {a: arm.requires for a, arm in protocol.arms().items()}
    folder = workdir / f"n{n}"

    c0 = time.process_time()
    t0 = time.perf_counter()
    cells = build_cells(
        f"bench{n}", "pilot", scenarios, 20260415, study=study, arms=ARMS, repeats=range(1, REPEATS + 1)
    )
    t1 = time.perf_counter()
    store = Store.create(
        folder,
        name=f"bench{n}",
        seed=20260415,
        protocol_version="bench",
        worker_model="none",
        envelope_usd=1e9,
        scenarios=scenarios,
    )
    store.add_cells(cells)
    t2 = time.perf_counter()
    ex = InlineNoWorkspace()
    res = Scheduler(store, ex, load_nodes(), backend="simulated", requires=requires, progress=False, poll_s=0).run(
        "pilot"
    )
    t3 = time.perf_counter()
    cpu = time.process_time() - c0
    assert res.counts["done"] == n and store.audit() == [], (res.counts, store.audit())
    store.close()
    shutil.rmtree(folder)
    return {"n": n, "order_s": t1 - t0, "insert_s": t2 - t1, "dispatch_s": t3 - t2, "total_s": t3 - t0, "cpu_s": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=100_000, help="largest n (a power of ten times 1,000)")
    args = ap.parse_args()
    sizes = [REFERENCE_N]
    while sizes[-1] * 10 <= args.max:
        sizes.append(sizes[-1] * 10)
    with tempfile.TemporaryDirectory(prefix="bench_schedule_") as tmp:
        rows = [one(n, Path(tmp)) for n in sizes]
        reset_us = workspace_reset_us(Path(tmp))
    df = pd.DataFrame(rows)
    for part in ("order", "insert", "dispatch", "total"):
        df[f"{part}_us_per_cell"] = 1e6 * df[f"{part}_s"] / df["n"]
    df["cpu_us_per_cell"] = 1e6 * df["cpu_s"] / df["n"]
    df["wall_ratio_vs_n1000"] = df["total_us_per_cell"] / df["total_us_per_cell"].iloc[0]
    df["cpu_ratio_vs_n1000"] = df["cpu_us_per_cell"] / df["cpu_us_per_cell"].iloc[0]
    df["nlogn_allows"] = [math.log(n) / math.log(REFERENCE_N) for n in df["n"]]
    # CPU time measures the algorithm; wall time adds the shared disk's write-back waits.
    df["within_nlogn"] = df["cpu_ratio_vs_n1000"] <= df["nlogn_allows"]
    cols = [
        "n",
        "total_s",
        "order_us_per_cell",
        "insert_us_per_cell",
        "dispatch_us_per_cell",
        "total_us_per_cell",
        "cpu_us_per_cell",
        "wall_ratio_vs_n1000",
        "cpu_ratio_vs_n1000",
        "nlogn_allows",
        "within_nlogn",
    ]
    print("reference run: n = 1,000 (same process); per-cell time ratio against it")
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"workspace reset (not in the table; constant per run): {reset_us:.0f} us per attempt")


if __name__ == "__main__":
    main()
