"""The grading site on a wave of 20 graders x 50 packages: queue, grade page and save, against rendering the package
alone.

A simulated study of five scenarios (every arm, the pilot and repeat3
waves; 75 runs) is built once with the real scheduler and simulated backend
under ``build/bench-grading/`` (about three minutes; reused afterwards), or
given with ``--study-dir``. Each run copies it to a temporary folder and
makes there a wave of two packages per scenario x arm (50) that all 20
graders grade (``per_package`` 20): 50 packages in every queue, 1,000
assignments. Timed in this process with the application's test client,
median of ``--repeat``:

- reference: one package rendered alone, as the judges received it
  (``StudyReader.run`` and ``judged_deliverables`` for the run);
- queue: GET /queue of one grader (50 rows);
- grade page: GET /grade/<id>, going through the grader's packages (each
  timed against rendering that same package alone);
- save: POST /grade/<id> of a draft (the store's transaction included).

Target (issue 28): every page's median under 200 ms; the script exits 1 otherwise.
Usage: ``python benchmarks/bench_grading_site.py [--study-dir PATH] [--repeat 25]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from _simulated_study import build_study

from pilot import paths
from pilot.grading import store
from pilot.grading.plan import create_wave
from pilot.grading.site import create_app
from pilot.portal.app import SignInLimits
from pilot.view.site import judged_deliverables
from pilot.view.study import StudyReader

STUDY = "bench-grading"
SCENARIOS = ("ACC-01", "BANK-01", "LEGAL-01", "OPS-01", "RES-01")
WAVES = ("pilot", "repeat3")
GRADERS = 20
PER_STRATUM = 2  # 5 scenarios x 5 arms x 2 = 50 packages
WAVE = "bench"
TARGET_MS = 200.0


def graders_file(folder: Path) -> Path:
    """Twenty graders, each of every occupation of the study's scenarios."""
    from pilot.scenarios import load_scenario

    occupations = ";".join(sorted({load_scenario(s).occupation for s in SCENARIOS}))
    path = folder / "graders.csv"
    rows = [f"Grader {i},grader{i:02d}@example.org,{occupations}" for i in range(1, GRADERS + 1)]
    path.write_text("name,contact,occupations\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_s(fn, repeat: int) -> float:
    return statistics.median(seconds(fn) for _ in range(repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--study-dir", type=Path, help="an existing study folder (default: build one under build/bench-grading/)"
    )
    ap.add_argument("--repeat", type=int, default=25)
    args = ap.parse_args()
    source = args.study_dir or build_study(
        paths.BUILD_DIR / "bench-grading", STUDY, waves=WAVES, scenarios=SCENARIOS, seed=7
    )
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        folder = shutil.copytree(source, Path(tmp) / source.name, symlinks=True)  # the wave is written to a copy
        made = create_wave(folder, WAVE, graders_file(Path(tmp)), per_package=GRADERS, per_stratum=PER_STRATUM)
        # Every save is a POST: lift the per-session limit so that the timing loop is not answered 429.
        app = create_app(folder, WAVE, post_limits=SignInLimits(max_failures=10**9, window_s=60.0, lockout_s=1.0))
        try:
            return measure(app, folder, made, args.repeat)
        finally:
            app.extensions["pilot.grading"].close()


def measure(app, folder: Path, made, repeat: int) -> int:
    reader = StudyReader(folder)
    grader = "G01"
    client = app.test_client()
    assert client.get(f"/signin/{made.grader_tokens[grader]}").status_code == 303
    with store.open_store(folder) as st:
        queue = [
            (
                r["assignment_id"],
                st.conn.execute(
                    "SELECT p.run_id FROM grading_assignments a JOIN grading_packages p USING (wave, package_id) "
                    "WHERE a.wave = ? AND a.assignment_id = ?",
                    (WAVE, r["assignment_id"]),
                ).fetchone()[0],
            )
            for r in store.queue(st.conn, WAVE, grader)
        ]
    n_assignments = len(made.assignments)

    def get(url: str) -> str:
        resp = client.get(url)
        assert resp.status_code == 200, (url, resp.status_code)
        return resp.get_data(as_text=True)

    # Imports, scenario loading and each package's first rendering, out of every timing.
    for aid, run_id in queue:
        judged_deliverables(reader, reader.run(run_id))
        get(f"/grade/{aid}")
    assert len(re.findall(r'class="open-package"', get("/queue"))) == len(queue) == len(made.packages)

    # The reference and the page in turn, package by package, so that neither gets the quieter moments.
    pairs = [
        (
            seconds(lambda run_id=run_id: judged_deliverables(reader, reader.run(run_id))),
            seconds(lambda aid=aid: get(f"/grade/{aid}")),
        )
        for aid, run_id in (queue[i % len(queue)] for i in range(repeat))
    ]
    t_ref = statistics.median(r for r, _ in pairs)
    t_grade = statistics.median(p for _, p in pairs)
    t_queue = median_s(lambda: get("/queue"), repeat)
    aid = queue[0][0]
    page = get(f"/grade/{aid}")
    form = {
        "csrf": re.search(r'name="csrf" value="([^"]+)"', page).group(1),
        "page": re.search(r'name="page" value="([^"]+)"', page).group(1),
        "action": "save",
        "score-correctness": "3",
        "accept": "no",
        "active_s": "5",
    }

    def save() -> None:
        resp = client.post(f"/grade/{aid}", data=form)
        assert resp.status_code == 303, resp.status_code

    t_save = median_s(save, repeat)
    rows = [("package rendered alone (reference)", t_ref, "")]
    for what, t in (
        ("queue page, GET /queue (50 packages)", t_queue),
        ("grade page, GET /grade/<id>", t_grade),
        ("save a draft, POST /grade/<id>", t_save),
    ):
        rows.append((what, t, f"< {TARGET_MS:.0f} ms: " + ("met" if t * 1000 < TARGET_MS else "NOT met")))
    table = pd.DataFrame(
        [(w, t * 1000, t / t_ref, target) for w, t, target in rows],
        columns=["what", "median ms", "ratio to reference", "target"],
    )
    print(
        f"study {reader.name}: wave {WAVE}, {len(made.graders)} graders x {len(made.packages)} packages "
        f"({n_assignments} assignments); {repeat} repeats; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}"
    )
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    slow = [w for w, t, _ in rows[1:] if t * 1000 >= TARGET_MS]
    if slow:
        print(f"FAILED: median over {TARGET_MS:.0f} ms: {'; '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
