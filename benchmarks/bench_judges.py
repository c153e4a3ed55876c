"""Judge prompts: their size per scenario, and the rendering time per deliverable.

For every scenario bundle, the gold package (the reference solver's files)
is rendered and turned into the blind prompt; the script prints the prompt's
size in characters and in estimated tokens (characters / 3.8, the SIMULATED
judge's assumption) and the estimated input cost per judge of the panel.

Rendering time per deliverable is shown as a ratio against a named reference
run in the same process on the same file: opening it with the library alone
(openpyxl ``load_workbook`` read-only and iterating every cell's value for a
workbook, ``python-docx`` ``Document`` and every paragraph's text for a
document, ``pypdf`` ``extract_text`` for a PDF, ``csv.reader`` for a CSV).
The renderer does more (two passes over a workbook for formulas and cached
values, tables in order, bounds, features), so a ratio near 2 for workbooks
is what the design costs.

    .venv/bin/python benchmarks/bench_judges.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from pathlib import Path

from pilot.judges import prompt_for_run
from pilot.judges.render import format_of, render_deliverable
from pilot.judges.simulated import load_config
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario


def reference_read(path: Path) -> int:
    """Read the file with its library alone; returns a size so the work is not optimised away."""
    fmt = format_of(path)
    if fmt == "workbook":
        from openpyxl import load_workbook

        wb = load_workbook(path, read_only=True)
        n = sum(1 for ws in wb.worksheets for row in ws.iter_rows(values_only=True) for v in row if v is not None)
        wb.close()
        return n
    if fmt == "document":
        import docx

        return sum(len(p.text) for p in docx.Document(str(path)).paragraphs)
    if fmt == "pdf":
        from pypdf import PdfReader

        return sum(len(p.extract_text() or "") for p in PdfReader(str(path)).pages)
    if fmt == "table":
        with path.open(newline="", encoding="utf-8") as fh:
            return sum(len(r) for r in csv.reader(fh))
    return len(path.read_bytes())


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions per file (median reported)")
    args = parser.parse_args()
    cost = load_config().raw["cost"]
    cpt = float(cost["chars_per_token"])
    prices = cost["price_per_mtok"]

    print("Judge prompt size per scenario (gold package)")
    print(f"{'scenario':<10} {'chars':>8} {'~tokens':>8} " + " ".join(f"{m[:18]:>20}" for m in prices) + "  (input $ per judge)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-judges-") as tmp:
        for sid in list_scenarios():
            sc = load_scenario(sid)
            ws = build_gold_workspace(sc, Path(tmp) / sid)
            prompt = prompt_for_run(sc, ws / "outputs")
            tokens = len(prompt.text) / cpt
            dollars = " ".join(f"{tokens * p['input'] / 1e6:>20.4f}" for p in prices.values())
            print(f"{sid:<10} {len(prompt.text):>8} {tokens:>8.0f} {dollars}")
            for d in sc.deliverables:
                path = ws / "outputs" / d.name
                if d.kind == "completion_record" or not path.is_file():
                    continue
                t_render = timed(lambda: render_deliverable(d.name, ws / "outputs"), args.repeats)
                t_ref = timed(lambda: reference_read(path), args.repeats)
                rows.append((sid, d.name, format_of(path), path.stat().st_size, t_render, t_ref))

    print()
    print("Rendering time per deliverable against reading it with its library alone (same process, median)")
    print(f"{'scenario':<10} {'file':<40} {'format':<9} {'bytes':>8} {'render ms':>10} {'ref ms':>8} {'ratio':>6}")
    for sid, name, fmt, size, tr, tf in rows:
        print(f"{sid:<10} {name[:40]:<40} {fmt:<9} {size:>8} {tr * 1e3:>10.2f} {tf * 1e3:>8.2f} {tr / tf:>6.2f}")
    if rows:
        total_r = sum(r[4] for r in rows)
        total_f = sum(r[5] for r in rows)
        print(f"all {len(rows)} deliverables: render {total_r * 1e3:.1f} ms, reference {total_f * 1e3:.1f} ms, ratio {total_r / total_f:.2f}")


if __name__ == "__main__":
    main()
