"""Scenario kit cost: `pilot scenarios check` of one bundle, against evaluating its gold package once.

Reference run (named ``gold``): the bundle's reference package built and
evaluated once by the oracle, with a fresh recalculator (LibreOffice). Measured
run (``check``): ``check_scenarios([sid])``, everything the kit owes a bundle
(the gold, the no-op, every criterion's mutation, substitutes, traps, defects,
cheats, input edits), also with a fresh recalculator. Both in this process, one
scenario after the other. The ratio says how many gold evaluations a check
costs; the seconds say what a bundle's author waits (the target: under a minute
per bundle on a 2-core machine).

    .venv/bin/python benchmarks/bench_scenario_check.py [--scenarios ACC-01 OPS-01]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from pilot.oracles import Recalculator, evaluate
from pilot.scenario_kit.checks import check_scenarios
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="*", help="bundles to time (default: every bundle)")
    args = parser.parse_args(argv)
    print(f"{'scenario':<10} {'gold s':>8} {'check s':>8} {'check/gold':>11}")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="bench-kit-") as tmp:
        for sid in args.scenarios or list_scenarios():
            root = Path(tmp) / sid
            sc = load_scenario(sid)
            t0 = time.perf_counter()
            with Recalculator(root / "recalc") as recalc:
                ev = evaluate(sc, build_gold_workspace(sc, root / "gold"), recalculator=recalc)
            gold = time.perf_counter() - t0
            assert ev.D, f"{sid}: the gold package fails: {[c.id for c in ev.failed]}"
            t0 = time.perf_counter()
            report = check_scenarios([sid], workdir=root / "kit")
            check = time.perf_counter() - t0
            assert not report.failures, [(r.check, r.reason) for r in report.failures]
            worst = max(worst, check)
            print(f"{sid:<10} {gold:8.1f} {check:8.1f} {check / gold:11.1f}")
    print(f"slowest check: {worst:.1f} s (target: under 60 s per bundle)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
