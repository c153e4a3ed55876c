"""`pilot scenarios check` over every bundle: the cost of proving each trap with its fallen package.

Reference run (named ``without-traps``): the check with no fallen package and
no probe (``prove_traps=False``), as it stood before traps were proved by their
fallen packages. Measured run (``with-traps``): the whole check, each declared
trap's fallen package evaluated in the same LibreOffice batch as every other
package, then the probes. Both runs check the same bundles in the same Python
process, each with a fresh recalculator and work folder; the order alternates
over ``--rounds`` so that a machine's load falls on both alike. The target is a
ratio of at most 1.5.

    .venv/bin/python benchmarks/bench_scenario_check.py [--rounds 1] [ID ...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pilot.oracles import Recalculator, guard
from pilot.scenario_kit.checks import check_scenarios


def _run(ids: list[str] | None, prove_traps: bool, root: Path) -> tuple[float, int, int]:
    """(seconds, rows, failed rows) of one check with a fresh recalculator and no parse cache."""
    guard.clear_cache()
    with Recalculator(root / "recalc") as r:
        t0 = time.perf_counter()
        report = check_scenarios(ids, workdir=root / "work", prove_traps=prove_traps, recalculator=r)
        seconds = time.perf_counter() - t0
    return seconds, len(report.rows), len(report.failures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="scenario IDs (default: every bundle)")
    parser.add_argument("--rounds", type=int, default=1, help="alternating pairs of runs")
    args = parser.parse_args(argv)
    times: dict[bool, list[float]] = {False: [], True: []}
    rows: dict[bool, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        for k in range(args.rounds):
            for prove in (False, True) if k % 2 == 0 else (True, False):
                seconds, n, failed = _run(args.ids or None, prove, Path(tmp) / f"r{k}-{int(prove)}")
                times[prove].append(seconds)
                rows[prove] = (n, failed)
    ref, measured = statistics.median(times[False]), statistics.median(times[True])
    print(f"without-traps (reference): {ref:.1f} s, {rows[False][0]} rows, {rows[False][1]} failed")
    print(f"with-traps:                {measured:.1f} s, {rows[True][0]} rows, {rows[True][1]} failed")
    print(f"ratio with-traps / without-traps: {measured / ref:.2f} (target at most 1.50)")
    return 0 if rows[True][1] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
