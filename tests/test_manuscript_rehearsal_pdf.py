"""The manuscript built from a rehearsal says REHEARSAL on its title and on every page, and nothing of a dry run.

What ``make rehearsal`` does after its runs, on a study whose runs cost nothing:
the study is created as the rehearsal creates it (``pilot study create
--arms host``) under a temporary repository root (``PILOT_ROOT``), and every
run is finished in its store as an attempt on the rehearsal backend, its
record taken from a synthetic run table (so the run table the stages read
says ``rehearsal`` in its backend column, and the store, the run report and
the run table agree). Every stage the manuscript reads then runs from the
command line with small draws into temporary folders: 01 and 02 on the
store, 04 and 05 on the exported run table, 03, the design tables and the
calibration beside them. ``tools/typeset-manuscript.sh`` typesets a copy of
manuscript/ from those folders, each page is read with pdftotext and
``tools/check_pdf_label.py`` (the Makefile's check) must pass it. Stage 01
on the rehearsal backend first checks that the sandbox can isolate a run
(bubblewrap, which ``make test`` installs), though it dispatches nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from manuscript_support import calibration_command, study_root

from pilot import backends, freeze, paths, protocol
from pilot.attempt import AttemptOutcome
from pilot.simulated import synthetic
from pilot.store import Store

# The rehearsal drives the pinned CLI in the agent's sandbox, and its oracles recalculate with LibreOffice.
pytestmark = pytest.mark.usefixtures("notebook", "latex", "real_cli", "soffice")

STUDY = "rehearsal"
LABEL = backends.label(backends.REHEARSAL)
BANNER_END = "no number in this document is a finding"
# Enough scenarios and repeats that no arm sits at 0% or 100% acceptance and every model can be fitted:
# this test is about the labels, not about the stages' degenerate cases.
SYNTHETIC_SEED, N_SCENARIOS, REPEATS = 7, 4, 2
# Small draws: the test reads labels, not estimates (each stage's numbers are tested where it is).
DRAWS = {"bootstrap_resamples": 60, "permutations": 60}


def _run(args: list[str], root: Path, cwd: Path) -> None:
    env = dict(os.environ, PILOT_ROOT=str(root), OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _pilot(*args: object) -> list[str]:
    return [sys.executable, "-m", "pilot", *map(str, args)]


def _record(row: pd.Series, study: protocol.Study) -> dict:
    """The run record a rehearsal's runner would have returned for this synthetic row."""

    def value(v):
        return None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)

    judge_cost = float(row["judge_cost_usd"])
    judges = [
        {
            "judge_id": j["id"],
            "model": j["model"],
            "score_0_100": value(row[f"Q_{j['id']}"]),
            "accept": None if pd.isna(row[f"Q_{j['id']}"]) else bool(row[f"Q_{j['id']}"] >= study.q),
            "cost_usd": judge_cost / len(study.judge_panel),
            "error": None,
            "criterion_scores": {},
            "backend": backends.CLAUDE_CODE,
        }
        for j in study.judge_panel
    ]
    keys = (
        "scenario",
        "arm",
        "model",
        "status",
        "censored",
        "censor_reason",
        "D",
        "E",
        "criteria_passed",
        "criteria_total",
        "cost_usd",
        "wall_s",
        "turns",
        "tool_calls",
        "questions",
        "completion_status",
        "selfcheck_first",
        "recovery_used",
        "selfcheck_final",
    )
    rec = {k: value(row[k]) for k in keys}
    rec.update(
        judges=judges,
        E_reasons=[row["E_reasons"]] if isinstance(row["E_reasons"], str) else [],
        cost_complete=True,
        enforcement="bubblewrap",
        deviations=[],
        eval_error=None,
    )
    return rec


def _finish_as_rehearsal(folder: Path) -> int:
    """Finish every waiting run of the store as an attempt on the rehearsal backend; returns how many."""
    study = protocol.study()
    syn = synthetic.generate_runtable(SYNTHETIC_SEED, n_scenarios=N_SCENARIOS, repeats=REPEATS)
    by_cell = {
        (r["scenario"], r["arm"], int(r["repeat"])): r
        for _, r in syn[syn["model"] == study["worker"]["model"]].iterrows()
    }
    with Store.open(folder) as st:
        info = st.study()
        st.set_freeze_manifest(freeze.take_manifest(scenarios=info.scenarios))  # as the pilot wave's start takes it
        cells = st.cells(status="waiting")
        for cell in cells:
            row = by_cell[(cell.scenario, cell.arm, int(cell.repeat))]
            started = st.begin_attempt(cell, "linux-1", backends.REHEARSAL, folder / "workspaces")
            assert started is not None, "the envelope refused a run"
            st.finish_attempt(
                started.attempt_id,
                AttemptOutcome(
                    record=_record(row, study),
                    cost_usd=float(row["cost_usd"]),
                    judge_cost_usd=float(row["judge_cost_usd"]),
                ),
                max_infra_attempts=3,
            )
        return len(cells)


def _page_texts(pdf: Path) -> list[str]:
    out = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], capture_output=True, check=True).stdout.decode(
        "utf-8"
    )
    pages = out.split("\f")
    return pages[:-1] if not pages[-1].strip() else pages


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    for tool in ("pdflatex", "latexmk", "pdftotext", "pdfinfo"):
        assert shutil.which(tool), (
            f"{tool} is part of make test (make system-latex; pdftotext and pdfinfo: poppler-utils)"
        )
    tmp = tmp_path_factory.mktemp("rehearsal-pdf")
    root = study_root(tmp)
    out = {d: tmp / d for d in ("tables", "figures", "generated", "notebooks")}
    dirs = [
        "-p",
        "tables_dir",
        out["tables"],
        "-p",
        "figures_dir",
        out["figures"],
        "-p",
        "generated_dir",
        out["generated"],
    ]
    scenarios = sorted(
        synthetic.generate_runtable(SYNTHETIC_SEED, n_scenarios=N_SCENARIOS, repeats=REPEATS)["scenario"].unique()
    )

    _run(
        _pilot("study", "create", STUDY, "--scenarios", *scenarios, "--arms", "host", "--pilot-repeats", REPEATS),
        root,
        tmp,
    )
    n_runs = _finish_as_rehearsal(root / "analysis" / "data" / STUDY)
    study = ["-p", "study", STUDY, "-p", "backend", backends.REHEARSAL]
    # Stages 01 and 02 resume the study (nothing is left to dispatch); both export its run table, which 04 and 05 read.
    _run(_pilot("stage", "pilot", *dirs, *study, "--output", out["notebooks"] / "01.ipynb"), root, tmp)
    _run(_pilot("stage", "scale-rule", *dirs, *study, "--output", out["notebooks"] / "02.ipynb"), root, tmp)
    runs = root / "analysis" / "data" / STUDY / paths.RUNS_FILE_NAME
    table = ["-p", "runs", runs, "-p", "seed", 5] + [x for k, v in DRAWS.items() for x in ("-p", k, v)]
    chains = [
        [
            _pilot("stage", "primary", *dirs, *table, "--output", out["notebooks"] / "04.ipynb"),
            _pilot("stage", "sensitivity", *dirs, *table, "--output", out["notebooks"] / "05.ipynb"),
        ],
        [
            _pilot("protocol", "tables", "--out", out["generated"]),
            _pilot("stage", "power", *dirs, "-p", "simulations", 40, "--output", out["notebooks"] / "03.ipynb"),
            calibration_command(out["tables"], out["generated"]),
        ],
    ]
    # Two chains at once: they write different files and read none of each other's.
    with ThreadPoolExecutor(max_workers=2) as pool:
        for fut in [pool.submit(lambda c=c: [_run([str(a) for a in cmd], root, tmp) for cmd in c]) for c in chains]:
            fut.result()

    ms = tmp / "manuscript"
    _run(
        [str(paths.ROOT / "tools" / "typeset-manuscript.sh"), str(ms), str(out["generated"]), str(out["figures"])],
        root,
        tmp,
    )
    pdf = ms / "build" / "main.pdf"
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return {
        "pdf": pdf,
        "pages": _page_texts(pdf),
        "n_pdf_pages": int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1)),
        "generated": out["generated"],
        "figures": out["figures"],
        "runs": pd.read_csv(runs),
        "n_runs": n_runs,
    }


def test_the_run_table_and_the_label_macros_say_rehearsal(built):
    runs = built["runs"]
    assert len(runs) == built["n_runs"] > 0 and set(runs["backend"]) == {backends.REHEARSAL}
    assert runs.groupby("arm")["S"].agg(lambda s: 0 < s.astype(float).mean() < 1).all(), (
        "an arm at 0% or 100% acceptance"
    )
    gen = built["generated"]
    for macro, file in (
        ("StudyDataLabel", "study_macros.tex"),
        ("RunDataLabel", "run_macros.tex"),
        ("ResultsDataLabel", "primary_macros.tex"),
    ):
        assert f"\\newcommand{{\\{macro}}}{{{LABEL}}}" in (gen / file).read_text(encoding="utf-8"), file
    # A rehearsal has no planted truth: the dry-run appendix has nothing to print.
    assert not (gen / "dry_run_truth_table.tex").exists()


def test_page_one_and_every_page_carry_rehearsal(built):
    pages = built["pages"]
    assert len(pages) == built["n_pdf_pages"] >= 15, len(pages)
    wrong = [
        n
        for n, text in enumerate(pages, start=1)
        if not (_first_line(text).startswith(f"{LABEL} \u2014 ") and _first_line(text).endswith(BANNER_END))
    ]
    assert not wrong, (
        f"pages without the {LABEL} banner: {wrong}; page {wrong[0]} begins {_first_line(pages[wrong[0] - 1])!r}"
    )
    first = " ".join(pages[0].split())
    assert f"{LABEL}: More computer access" in first
    assert f"{LABEL}. Every number in this abstract" in first and f"(study {STUDY})" in first
    whole = " ".join(" ".join(pages).split())
    # One label only: the calibration appendix says SIMULATED of its own synthetic studies (as it does in
    # every build), which is no number of this run and does not make the document a mix.
    assert "SIMULATED and REHEARSAL" not in whole and "dry runs and rehearsals" not in whole
    assert f"{LABEL}. This section describes study {STUDY}" in whole
    assert re.search(rf"Table \d+: {LABEL}\. Run flow of study {STUDY}", whole)
    assert re.search(rf"Table \d+: {LABEL}\. Preregistered contrasts of acceptance", whole)
    assert re.search(r"Table \d+: SIMULATED\. ", whole)  # the calibration table
    assert "The dry run and its known truth" not in whole


def test_the_makefile_check_passes_it_and_names_the_pages_without_the_label(built, tmp_path):
    from pypdf import PdfReader, PdfWriter

    check = [sys.executable, str(paths.ROOT / "tools" / "check_pdf_label.py")]
    ok = subprocess.run([*check, str(built["pdf"]), LABEL], capture_output=True, text=True)
    assert ok.returncode == 0 and f"{built['n_pdf_pages']} pages" in ok.stdout, ok.stdout + ok.stderr
    # The mix where a rehearsal is expected, or the other way round, is not the label.
    mix = subprocess.run([*check, str(built["pdf"]), "SIMULATED and REHEARSAL"], capture_output=True, text=True)
    assert mix.returncode == 1 and f"{built['n_pdf_pages']} of {built['n_pdf_pages']} page(s)" in mix.stderr
    assert f": 1-{built['n_pdf_pages']}" in mix.stderr and "no title prefix" in mix.stderr
    # Pages 3 and 4 without a banner (blank), page 1 as it was: those two are named, nothing else.
    reader, writer = PdfReader(built["pdf"]), PdfWriter()
    for page in reader.pages[:2]:
        writer.add_page(page)
    box = reader.pages[0].mediabox
    writer.add_blank_page(width=box.width, height=box.height)
    writer.add_blank_page(width=box.width, height=box.height)
    writer.add_page(reader.pages[2])
    holed = tmp_path / "holed.pdf"
    with holed.open("wb") as f:
        writer.write(f)
    bad = subprocess.run([*check, str(holed), LABEL], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"2 of 5 page(s) without the {LABEL} banner: 3-4" in bad.stderr and "title prefix" not in bad.stderr


def test_no_box_sticks_out_more_than_a_point(built):
    # tools/check_latex_log.py on the LaTeX log of this build: an overfull box above 1 pt names its file and lines.
    log = built["pdf"].parent / "latexmk.log"
    out = subprocess.run(
        [sys.executable, str(paths.ROOT / "tools" / "check_latex_log.py"), str(log)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "0 typesetting failure(s)" in out.stdout


def test_every_figure_prints_its_text_at_seven_points_or_more(built):
    from pilot.report import figure_text

    tex = sorted(built["generated"].glob("*_figure.tex")) + sorted((paths.MANUSCRIPT_DIR / "sections").glob("*.tex"))
    figures = figure_text.included_figures(tex, [paths.MANUSCRIPT_DIR, built["figures"]])
    # The run flow, forest, Kaplan-Meier, quality grid, both frontiers, the power curves and the scale rule at least.
    names = {f.pdf.name for f in figures}
    assert {
        "run_flow.pdf",
        "primary_forest.pdf",
        "sensitivity_km.pdf",
        "sensitivity_frontier_budget.pdf",
        "power_curves.pdf",
        "scale_rule.pdf",
    } <= names, names
    assert figure_text.too_small(figures) == []


def test_no_generated_table_is_shrunk_or_set_below_eight_points(built):
    # A table wider than the text is an overfull box (the latexmk-log test above); it is never scaled down to fit.
    shrinking = re.compile(r"\\(resizebox|scalebox|tiny|scriptsize|adjustbox)\b")
    tables = [p for p in built["generated"].glob("*.tex") if "\\begin{tabular}" in p.read_text(encoding="utf-8")]
    assert len(tables) >= 20, [p.name for p in tables]
    offenders = [p.name for p in tables if shrinking.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
