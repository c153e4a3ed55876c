"""Oracle cost: evaluation with recalculation batched, against one LibreOffice per workbook.

Reference run (named ``per-file``): every workbook recalculated by its own
LibreOffice process, as a naive evaluator would do it. Measured run
(``batched``): ``evaluate_many`` over the same workspaces, all workbooks
recalculated by one process. Both runs use fresh recalculators (no cache)
and distinct workbook bytes per workspace, in the same Python process.

    .venv/bin/python benchmarks/bench_oracles.py [--copies 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import openpyxl

from pilot.defects import copy_workspace
from pilot.oracles import Recalculator, evaluate, evaluate_many, guard
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario
from pilot.scenarios.officeio import normalize_zip


def _make_distinct(ws: Path, tag: str) -> None:
    """A reviewer's note in each workbook, so no two copies share bytes (no cache hits)."""
    for book in (ws / "outputs").glob("*.xlsx"):
        wb = openpyxl.load_workbook(book)
        wb.worksheets[0].cell(row=wb.worksheets[0].max_row + 3, column=1, value=f"Reviewed copy {tag}")
        wb.save(book)
        normalize_zip(book)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=2, help="workspaces per scenario")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-oracles-") as tmp:
        root = Path(tmp)
        items = []
        for sid in list_scenarios():
            sc = load_scenario(sid)
            gold = build_gold_workspace(sc, root / sid / "gold")
            for k in range(args.copies):
                ws = copy_workspace(gold, root / sid / f"copy{k}")
                _make_distinct(ws, f"{sid}-{k}")
                items.append((sc, ws, None))
        books = [p for _, ws, _ in items for p in (ws / "outputs").glob("*.xlsx")]

        # Reference: one LibreOffice process per workbook.
        per_file = []
        for book in books:
            with Recalculator(root / f"ref-{book.parent.parent.name}-{book.stem}") as r:
                t0 = time.perf_counter()
                res = r.recalculate([book])[book]
                per_file.append(time.perf_counter() - t0)
                assert res.error is None, res.error
        guard.clear_cache()  # each phase parses every file afresh
        t0 = time.perf_counter()
        for sc, ws, h in items:
            evaluate(sc, ws, h, recalculator=Recalculator(root / f"ref-eval-{sc.id}-{ws.name}"))
        per_run_unbatched = (time.perf_counter() - t0) / len(items)

        # Measured: all workbooks of all runs through one LibreOffice process.
        guard.clear_cache()
        with Recalculator(root / "batched") as r:
            t0 = time.perf_counter()
            evaluations = evaluate_many(items, recalculator=r)
            batched_total = time.perf_counter() - t0
            processes = r.processes
        assert all(ev.D for ev in evaluations), [ev.scenario for ev in evaluations if not ev.D]
        per_run_batched = batched_total / len(items)

    rows = [
        ("per-file recalculation, one soffice per workbook (reference), mean", f"{statistics.mean(per_file):.2f} s"),
        ("per-file recalculation, median", f"{statistics.median(per_file):.2f} s"),
        ("evaluation per run, each run recalculating alone", f"{per_run_unbatched:.2f} s"),
        (f"evaluation per run, batched ({processes} soffice process for all runs)", f"{per_run_batched:.2f} s"),
        ("speed-up per run, batched over alone", f"{per_run_unbatched / per_run_batched:.1f}x"),
        (
            "per-file recalculation cost / batched evaluation cost per run",
            f"{statistics.mean(per_file) / per_run_batched:.1f}x",
        ),
    ]
    print(f"workspaces evaluated: {len(items)} ({args.copies} per scenario), workbooks: {len(books)}")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
