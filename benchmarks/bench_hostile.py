"""Refusing a hostile deliverable: evaluating each of ACC-01's hostile workbooks, against evaluating its gold package.

Reference run (named ``gold``): ACC-01's reference package evaluated by the
oracle, its workbook recalculated by LibreOffice (a fresh recalculator each
time, so nothing comes from a cache). Measured runs: the same package with the
workbook replaced by each hostile file of ``tests/hostile_support.py`` (a zip
bomb, a truncated zip, a 1 GB sparse file, a FIFO, an encrypted or macro
workbook, ...), evaluated the same way. All in this process, best of
``--repeat``. A hostile file should cost no more than an honest one: the
oracle refuses it before any reader expands it (the ratio near or below 1).

    .venv/bin/python benchmarks/bench_hostile.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hostile_support import HOSTILE, HOSTILE_TARGET

from pilot.defects import copy_workspace
from pilot.oracles import Recalculator, evaluate
from pilot.protocol.scenario import Scenario
from pilot.scenarios import build_gold_workspace, load_scenario


def _evaluate_s(sc: Scenario, ws: Path, work: Path, repeat: int) -> float:
    best = float("inf")
    for k in range(repeat):
        with Recalculator(work / f"recalc-{k}") as recalc:
            t0 = time.perf_counter()
            evaluate(sc, ws, recalculator=recalc)
            best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="evaluations of each package; the best is kept")
    args = parser.parse_args(argv)
    sid, name = HOSTILE_TARGET
    sc = load_scenario(sid)
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        root = Path(tmp)
        gold = build_gold_workspace(sc, root / "gold")
        ref = _evaluate_s(sc, gold, root / "ref", args.repeat)
        print(f"reference: the gold package of {sid}, {ref:.2f} s")
        print(f"{'hostile file':<22} {'seconds':>8} {'ratio':>7}")
        for hname, (mutate, _, _) in HOSTILE.items():
            ws = copy_workspace(gold, root / hname)
            mutate(ws / "outputs" / name, ws)
            s = _evaluate_s(sc, ws, root / f"work-{hname}", args.repeat)
            print(f"{hname:<22} {s:8.2f} {s / ref:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
