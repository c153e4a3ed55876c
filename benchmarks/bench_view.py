"""The viewer on a full-size study: the index page and the static export, against reading the run table alone.

A 190-run simulated study (every scenario, the pilot, repeat3 and
sensitivity waves) is built once with the real scheduler and simulated
backend under ``build/bench-view/`` (a few minutes; reused afterwards), or
given with ``--study-dir``. Timed in this process, best of ``--repeat``:

- reference: the run table alone, as ``pilot study export`` computes it
  (``pilot.outcomes.rows_from_store`` on the store, then ``run_table``);
- index: the index page rendered (``pilot.view.site.render_index``) and the
  same page requested through the Flask application (a whole GET /);
- the scenario list and the scenario × arm overview (GET /scenarios, GET /overview);
- the aggregates ("why") page, rendered (``pilot.view.site.render_why``) and
  requested (GET /why): failures per arm, acceptance with its bootstrap
  interval, the cost-against-Q scatter;
- export: the static site of every page and download (once; it is the
  minute-scale one);
- the Inspect export: one eval log per arm and model, every run a sample with
  its events (``pilot.view.inspect_log.export_inspect``, once).

Targets: the index and the aggregates page under one second, each export of
the 190 runs under a minute.
Usage: ``python benchmarks/bench_view.py [--study-dir PATH] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from _simulated_study import build_study

from pilot import outcomes, paths
from pilot.view import site
from pilot.view.app import create_app
from pilot.view.export import export_site
from pilot.view.inspect_log import export_inspect
from pilot.view.study import StudyReader

STUDY = "bench-view"
WAVES = ("pilot", "repeat3", "sensitivity")


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (the export's worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--study-dir", type=Path, help="an existing study folder (default: build one under build/bench-view/)"
    )
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    folder = args.study_dir or build_study(paths.BUILD_DIR / "bench-view", STUDY, waves=WAVES)
    reader = StudyReader(folder)
    n = len(reader.index_rows())

    def reference() -> None:
        with reader.store() as st:
            rows = st.finished_rows()
        backend = "simulated"
        outcomes.run_table(outcomes.rows_from_store(rows, study_name=reader.name, backend=backend))

    client = create_app(folder).test_client()

    def index_render() -> None:
        site.render_index(reader, site.Links(), live=True)

    def index_get() -> None:
        resp = client.get("/")
        assert resp.status_code == 200

    def why_render() -> None:
        site.render_why(reader, site.Links())

    def other_get(url: str) -> Callable[[], None]:
        def get() -> None:
            assert client.get(url).status_code == 200

        return get

    reference()  # imports and scenario loading, out of every timing
    index_get()
    other_get("/scenarios")()
    t_ref = best(reference, args.repeat)
    t_index = best(index_render, args.repeat)
    t_get = best(index_get, args.repeat)
    t_scen = best(other_get("/scenarios"), args.repeat)
    t_over = best(other_get("/overview"), args.repeat)
    other_get("/why")()  # the statistics' imports, out of the timing
    t_why = best(why_render, args.repeat)
    t_why_get = best(other_get("/why"), args.repeat)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), cpu_s()
        res = export_site(folder, Path(tmp) / "site")
        t_export, c_export = time.perf_counter() - t0, cpu_s() - c0
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), cpu_s()
        inspect = export_inspect(reader, Path(tmp) / "inspect")
        t_inspect, c_inspect = time.perf_counter() - t0, cpu_s() - c0
    load_after = os.getloadavg()[0]
    table = pd.DataFrame(
        [
            ("run table alone (reference)", t_ref, 1.0, ""),
            ("index page, rendered", t_index, t_index / t_ref, "< 1 s: " + ("met" if t_index < 1 else "NOT met")),
            ("index page, GET /", t_get, t_get / t_ref, "< 1 s: " + ("met" if t_get < 1 else "NOT met")),
            ("scenario list, GET /scenarios", t_scen, t_scen / t_ref, ""),
            ("scenario × arm, GET /overview", t_over, t_over / t_ref, ""),
            ("aggregates (why), rendered", t_why, t_why / t_ref, "< 1 s: " + ("met" if t_why < 1 else "NOT met")),
            (
                "aggregates (why), GET /why",
                t_why_get,
                t_why_get / t_ref,
                "< 1 s: " + ("met" if t_why_get < 1 else "NOT met"),
            ),
            (
                f"static export ({res.pages} pages, {res.files} files), wall",
                t_export,
                t_export / t_ref,
                "< 60 s: " + ("met" if t_export < 60 else "NOT met"),
            ),
            ("static export, CPU (all processes)", c_export, c_export / t_ref, ""),
            (
                f"Inspect export ({len(inspect.logs)} logs, {inspect.samples} samples), wall",
                t_inspect,
                t_inspect / t_ref,
                "< 60 s: " + ("met" if t_inspect < 60 else "NOT met"),
            ),
            ("Inspect export, CPU", c_inspect, c_inspect / t_ref, ""),
        ],
        columns=["what", "seconds", "ratio to reference", "target"],
    )
    print(
        f"study {reader.name}: {n} runs ({folder}); {os.cpu_count()} CPUs; "
        f"load average {load_before:.1f} before the export, {load_after:.1f} after"
    )
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if load_before > (os.cpu_count() or 1):
        print(
            "note: the machine was busier than its CPUs during this run; the wall times include waiting for a CPU "
            "(the CPU row is what the export itself costs)"
        )


if __name__ == "__main__":
    main()
