"""Cost of the workspace digest each run now records, against the oracle's evaluation of the same workspace.

Reference run (named ``evaluation``): ``pilot.oracles.evaluate`` of each
scenario's gold workspace with a warm recalculator (the workbooks already
recalculated once, so LibreOffice's start is not counted): the least the
runner spends evaluating a finished run. Measured run (``digest``): the
manifest of every entry of the same workspace and its SHA-256
(:func:`pilot.runner.workspace_manifest`, :func:`pilot.runner.manifest_digest`),
which the runner takes once per run and ``pilot study reevaluate`` takes
twice per re-evaluated run. Medians over the repeats, in the same process.

    .venv/bin/python benchmarks/bench_workspace_digest.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pilot import runner
from pilot.oracles import Recalculator, evaluate
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-digest-") as tmp, Recalculator(Path(tmp) / "recalc") as recalc:
        for sid in list_scenarios():
            sc = load_scenario(sid)
            ws = build_gold_workspace(sc, Path(tmp) / sid)
            evaluate(sc, ws, recalculator=recalc)  # warm: workbooks recalculated and cached by content
            ref = _median(lambda sc=sc, ws=ws: evaluate(sc, ws, recalculator=recalc), args.repeats)
            dig = _median(lambda ws=ws: runner.manifest_digest(runner.workspace_manifest(ws)), args.repeats)
            entries = len(runner.workspace_manifest(ws))
            rows.append((sid, entries, ref, dig))
    print(f"{'scenario':<10} {'entries':>7} {'evaluation ms':>14} {'digest ms':>10} {'ratio':>7}")
    for sid, n, ref, dig in rows:
        print(f"{sid:<10} {n:>7} {ref * 1000:>14.1f} {dig * 1000:>10.2f} {dig / ref:>7.4f}")
    ref_all, dig_all = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(
        f"all scenarios: digest / evaluation = {dig_all / ref_all:.4f} ({dig_all * 1000:.1f} ms against "
        f"{ref_all * 1000:.1f} ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
