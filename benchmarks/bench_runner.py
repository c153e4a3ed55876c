"""Time of one SIMULATED attempt (workspace, agent, audit, evaluation), recalculation excluded.

Reference, in the same process on the same scenario: the scenario's reference
solver writing the gold deliverables once into a fresh folder
(``pilot.scenarios.solve``), the least work any attempt must do. The
measured run is a whole ``run_attempt`` on the simulated backend: reset and
lay out the workspace, the simulated session (solver, drawn defects,
synthetic event stream), the audit, the completion record, the oracle and the
input-hash check. LibreOffice recalculation is excluded by a warm-up attempt
with the same seed first: the oracle's recalculator caches workbooks by
content, so the timed repeats, which write the same bytes, reuse it. A4's
public self-check runs its own LibreOffice process when a workbook has no
cached values; A4 is therefore shown apart and not excluded.

    .venv/bin/python benchmarks/bench_runner.py [--repeats 3] [--arms A0 A1 A3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pilot.runner import run_attempt
from pilot.scenarios import list_scenarios, load_scenario, solve


def time_solver(sid: str, root: Path, repeats: int) -> float:
    sc = load_scenario(sid)
    times = []
    for i in range(repeats + 1):
        out = root / f"gold-{sid}-{i}"
        t0 = time.perf_counter()
        solve(sid, sc.inputs_dir, out)
        if i:  # the first call imports the solver module
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_attempt(sid: str, arm: str, root: Path, repeats: int, seed: int) -> tuple[float, str]:
    run_attempt(sid, arm, backend="simulated", out_dir=root / f"warm-{sid}-{arm}", seed=seed)
    times = []
    status = ""
    for i in range(repeats):
        t0 = time.perf_counter()
        rec = run_attempt(sid, arm, backend="simulated", out_dir=root / f"run-{sid}-{arm}-{i}", seed=seed)
        times.append(time.perf_counter() - t0)
        status = f"{rec.status}, D={rec.D}"
    return statistics.median(times), status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--arms", nargs="+", default=["A0", "A1", "A2", "A3", "A4"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenarios", nargs="*", default=None)
    args = ap.parse_args()
    print("SIMULATED agent: one attempt, evaluation included, LibreOffice recalculation excluded (cached)")
    print(f"{'scenario':10} {'arm':4} {'attempt s':>10} {'solver s':>9} {'ratio':>7}  outcome")
    with tempfile.TemporaryDirectory(prefix="bench-runner-") as tmp:
        root = Path(tmp)
        for sid in args.scenarios or list_scenarios():
            ref = time_solver(sid, root, args.repeats)
            for arm in args.arms:
                t, status = time_attempt(sid, arm, root, args.repeats, args.seed)
                note = "  (includes the self-check's own LibreOffice)" if arm == "A4" else ""
                print(f"{sid:10} {arm:4} {t:10.3f} {ref:9.3f} {t / ref:7.1f}  {status}{note}")


if __name__ == "__main__":
    main()
