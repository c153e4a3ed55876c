"""Cost of running each attempt in its own supervised process tree (pilot.executors.isolation).

Runs the same no-op attempts (``fake_runs:noop_run``) through the local
executor twice in one process: inline (the reference: no process at all)
and isolated (one supervisor and one worker process per attempt, the
default). Prints the wall time per attempt of each and the difference: the
fixed price a real attempt (minutes of agent time) pays for its isolation.

    .venv/bin/python benchmarks/bench_isolation.py [N]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from pilot.executors.local import LocalExecutor
from pilot.schedule import build_cells

RUN = "pilot.simulated.fake_runs:noop_run"


def per_attempt_s(processes: bool, n: int, workdir: Path) -> float:
    cells = build_cells("bench", "pilot", ["ACC-01", "RES-01", "BANK-01", "OPS-01", "LEGAL-01"], 7)[:n]
    ex = LocalExecutor(RUN, 1, processes=processes)
    t0 = time.perf_counter()
    try:
        for k, cell in enumerate(cells):
            ex.submit(
                k,
                cell,
                "local-1",
                workdir / ("iso" if processes else "inline") / cell.run_id / "attempt-1",
                "simulated",
            )
            got: list = []
            while not got:
                got = ex.wait(1.0)
            assert got[0][1].infra_error is None, got[0][1].infra_error
    finally:
        ex.close()
    return (time.perf_counter() - t0) / len(cells)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory() as tmp:
        inline = per_attempt_s(False, n, Path(tmp))
        isolated = per_attempt_s(True, n, Path(tmp))
    df = pd.DataFrame(
        {
            "executor": ["inline (reference)", "isolated process tree"],
            "s_per_attempt": [inline, isolated],
            "ratio_vs_inline": [1.0, isolated / inline],
        }
    )
    print(f"{n} no-op attempts each, one at a time; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(df.to_string(index=False))
    print(f"isolation costs {isolated - inline:.3f} s per attempt")


if __name__ == "__main__":
    main()
