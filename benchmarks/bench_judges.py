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

Cold rendering per run (``--cold``): each gold package's whole prompt is
rendered with the guard's verdicts forgotten, as a standalone ``pilot judge``
does for a run the process has not evaluated, against the named reference
``unguarded``: the same render in the same process with the parse child
bypassed (every file admitted after the path and format screens, the
pre-guard cost). Both in one process (the guard's one child serves the whole
process) and as fresh processes (interpreter start and imports included),
interleaved, median of the repeats.

    .venv/bin/python benchmarks/bench_judges.py [--repeats 5] [--cold]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pilot.judges import prompt_for_run
from pilot.judges.render import format_of, render_deliverable
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario
from pilot.simulated.judge import load_config


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


@contextlib.contextmanager
def unguarded():
    """The reference: the parse child bypassed, every screened file admitted (the pre-guard cost)."""
    from pilot.oracles import guard

    real = guard.probe_cached
    guard.probe_cached = lambda paths, **kw: {p: None for p in paths}
    try:
        yield
    finally:
        guard.probe_cached = real


_FRESH = """
import sys, time
from pathlib import Path
t = time.perf_counter()
if sys.argv[3] == "guarded":
    from pilot.oracles import guard
    guard.prestart()  # as `pilot judge` does
from pilot.judges import prompt_for_run
from pilot.scenarios import load_scenario
if sys.argv[3] == "unguarded":
    from pilot.oracles import guard
    guard.probe_cached = lambda paths, **kw: {p: None for p in paths}
prompt_for_run(load_scenario(sys.argv[1]), Path(sys.argv[2]))
print(time.perf_counter() - t)
"""


def cold(repeats: int) -> None:
    from pilot.oracles import guard

    print(
        "Cold rendering per run: the whole prompt, guard verdicts forgotten, against the unguarded "
        "reference (median ms)"
    )
    print(
        f"{'scenario':<10} {'in-process':>11} {'unguarded':>10} {'ratio':>6}   {'fresh proc':>11} "
        f"{'unguarded':>10} {'ratio':>6}"
    )
    totals = [0.0, 0.0, 0.0, 0.0]
    with tempfile.TemporaryDirectory(prefix="bench-judges-cold-") as tmp:
        for sid in list_scenarios():
            sc = load_scenario(sid)
            out = build_gold_workspace(sc, Path(tmp) / sid) / "outputs"
            guarded_t, ref_t, fresh_g, fresh_r = [], [], [], []
            for _ in range(repeats):
                guard.clear_cache()
                t = time.perf_counter()
                prompt_for_run(sc, out)
                guarded_t.append(time.perf_counter() - t)
                with unguarded():
                    t = time.perf_counter()
                    prompt_for_run(sc, out)
                    ref_t.append(time.perf_counter() - t)
                for mode, acc in (("guarded", fresh_g), ("unguarded", fresh_r)):
                    done = subprocess.run(
                        [sys.executable, "-c", _FRESH, sid, str(out), mode], capture_output=True, text=True, check=True
                    )
                    acc.append(float(done.stdout.split()[-1]))
            row = [statistics.median(x) for x in (guarded_t, ref_t, fresh_g, fresh_r)]
            totals = [a + b for a, b in zip(totals, row, strict=True)]
            print(
                f"{sid:<10} {row[0] * 1e3:>11.1f} {row[1] * 1e3:>10.1f} {row[0] / row[1]:>6.2f}   "
                f"{row[2] * 1e3:>11.1f} {row[3] * 1e3:>10.1f} {row[2] / row[3]:>6.2f}"
            )
    n = len(list_scenarios())
    print(
        f"mean per run: in-process {totals[0] / n * 1e3:.1f} ms vs unguarded {totals[1] / n * 1e3:.1f} ms, "
        f"ratio {totals[0] / totals[1]:.2f}; fresh process {totals[2] / n * 1e3:.1f} ms vs unguarded "
        f"{totals[3] / n * 1e3:.1f} ms, ratio {totals[2] / totals[3]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions per file (median reported)")
    parser.add_argument(
        "--cold", action="store_true", help="only the cold per-run rendering against the unguarded reference"
    )
    args = parser.parse_args()
    if args.cold:
        cold(args.repeats)
        return
    cost = load_config().raw["cost"]
    cpt = float(cost["chars_per_token"])
    prices = cost["price_per_mtok"]

    print("Judge prompt size per scenario (gold package)")
    print(
        f"{'scenario':<10} {'chars':>8} {'~tokens':>8} "
        + " ".join(f"{m[:18]:>20}" for m in prices)
        + "  (input $ per judge)"
    )
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
                t_render = timed(lambda name=d.name, out=ws / "outputs": render_deliverable(name, out), args.repeats)
                t_ref = timed(lambda path=path: reference_read(path), args.repeats)
                rows.append((sid, d.name, format_of(path), path.stat().st_size, t_render, t_ref))

    print()
    print("Rendering time per deliverable against reading it with its library alone (same process, median)")
    print(f"{'scenario':<10} {'file':<40} {'format':<9} {'bytes':>8} {'render ms':>10} {'ref ms':>8} {'ratio':>6}")
    for sid, name, fmt, size, tr, tf in rows:
        print(f"{sid:<10} {name[:40]:<40} {fmt:<9} {size:>8} {tr * 1e3:>10.2f} {tf * 1e3:>8.2f} {tr / tf:>6.2f}")
    if rows:
        total_r = sum(r[4] for r in rows)
        total_f = sum(r[5] for r in rows)
        print(
            f"all {len(rows)} deliverables: render {total_r * 1e3:.1f} ms, reference {total_f * 1e3:.1f} "
            f"ms, ratio {total_r / total_f:.2f}"
        )


if __name__ == "__main__":
    main()
