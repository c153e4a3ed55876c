"""Stage 07 end to end on a dry run: SIMULATED participants beside the agent arms, and a study with no human wave.

The SIMULATED wave comes from ``analysis/config/simulated_participants.yml``
(two participants per scenario and condition); its truth is written before
the first draw. Every table, figure caption, macro file and sentence says
SIMULATED and that no person took part; without a wave the stage writes that
the human wave was not run. The generated files and the manuscript's section
are typeset by LaTeX.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from view_support import pilot

from pilot import paths

pytestmark = pytest.mark.usefixtures("notebook")
TAG = "SIMULATED (no person took part)"
SCENARIOS = ("OPS-01", "HR-01")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("human-stage") / "root"
    (root / "analysis" / "data").mkdir(parents=True)
    for part in ("protocol", "notebooks", "src"):
        os.symlink(paths.ROOT / part, root / part)
    os.symlink(paths.CONFIG_DIR, root / "analysis" / "config")
    pilot(
        root,
        "study",
        "create",
        "hst",
        "--scenarios",
        *SCENARIOS,
        "--arms",
        "A1,A3",
        "--pilot-repeats",
        "1",
        "--seed",
        "4",
    )
    pilot(root, "study", "run", "hst", "--no-progress")
    pilot(root, "study", "create", "nohuman", "--scenarios", "OPS-01", "--arms", "A1", "--pilot-repeats", "1")
    pilot(root, "study", "run", "nohuman", "--no-progress")
    pilot(root, "study", "export", "nohuman")
    return root


def _stage(root: Path, out: Path, study: str):
    args = ["stage", "human", "--output", str(out / "07.ipynb"), "-p", "study_name", study]
    for name in ("tables", "figures", "generated"):
        args += ["-p", f"{name}_dir", str(out / name)]
    args += ["-p", "bootstrap_resamples", "300", "-p", "permutations", "500"]
    return pilot(root, *args, check=False)


@pytest.fixture(scope="module")
def simulated(root, tmp_path_factory):
    made = json.loads(pilot(root, "human", "simulate", "hst", "sim").stdout)
    pilot(root, "study", "export", "hst")
    out = tmp_path_factory.mktemp("human-stage-out")
    proc = _stage(root, out, "hst")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return made, out


def test_the_simulated_wave_is_drawn_after_its_truth_and_runs_through_the_evaluators(root, simulated):
    made, _ = simulated
    assert (made["label"], made["note"], made["participants"], made["evaluated"]) == (
        "SIMULATED",
        "no person took part",
        8,
        8,
    )
    folder = root / "analysis" / "data" / "hst"
    truth_file = root / made["truth"]
    truth = json.loads(truth_file.read_text())
    assert truth["label"] == "SIMULATED" and truth["note"] == "no person took part"
    import sqlite3

    conn = sqlite3.connect(folder / "study.sqlite")
    created = conn.execute("SELECT created_at FROM human_waves WHERE wave = 'sim'").fetchone()[0]
    first_start = conn.execute("SELECT MIN(started_at) FROM attempts WHERE backend = 'simulated-human'").fetchone()[0]
    conn.close()
    written = datetime.fromtimestamp(truth_file.stat().st_mtime).astimezone()
    assert written <= datetime.fromisoformat(created) <= datetime.fromisoformat(first_start)
    table = pd.read_csv(folder / "human_runs.csv")
    assert len(table) == 8 and set(table["backend"]) == {"simulated-human"}
    assert sorted(table.groupby(["scenario", "arm"]).size().tolist()) == [2] * 4
    assert table["Q"].notna().all() and (table.loc[table["arm"] == "H0", "assistant_cost_usd"] == 0).all()
    # The agents' run table is untouched by the wave: its own runs only.
    agents = pd.read_csv(folder / "runs.csv")
    assert set(agents["arm"]) == {"A1", "A3"} and len(agents) == 4


def test_every_output_says_simulated_and_that_no_person_took_part(simulated):
    _, out = simulated
    for name in ("human_acceptance.csv", "human_contrasts.csv", "human_time.csv", "human_assistant.csv"):
        frame = pd.read_csv(out / "tables" / name)
        assert set(frame["label"]) == {TAG}, name
    truth = pd.read_csv(out / "tables" / "human_truth.csv")
    assert set(truth["label"]) == {TAG} and list(truth["condition"]) == ["H0", "H1"]
    for name in ("human_acceptance_table.tex", "human_contrasts_table.tex", "human_time_table.tex", "human_figure.tex"):
        text = (out / "generated" / name).read_text()
        assert "\\caption{\\textbf{SIMULATED (no person took part).}" in text, name
    sentences = [
        line
        for line in (out / "generated" / "human_text.tex").read_text().splitlines()
        if line and not line.startswith("%")
    ]
    assert len(sentences) == 4 and all(line.startswith(TAG + ": ") for line in sentences)
    macros = (out / "generated" / "human_macros.tex").read_text()
    assert "\\newcommand{\\humanWaveRun}{1}" in macros and "\\newcommand{\\humanDataLabel}{SIMULATED}" in macros
    contrasts = pd.read_csv(out / "tables" / "human_contrasts.csv")
    assert list(contrasts["contrast"])[:3] == ["H1-H0", "H0-A1", "H0-A3"] and set(contrasts["role"]) == {"descriptive"}
    # No 95 per cent without saying it is nominal: the calibration measured the agent arms' contrasts, not this wave.
    printed = " ".join((out / "generated" / n).read_text() for n in ("human_text.tex", "human_acceptance_table.tex"))
    before = re.findall(r"(\w+)\s+95\\?%", printed)
    assert before and set(before) == {"nominal"}, before


def test_a_study_without_a_human_wave_says_it_was_not_run(root, tmp_path):
    proc = _stage(root, tmp_path, "nohuman")
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "generated" / "human_text.tex").read_text()
    assert "The human wave (H0, H1) was not run for this study" in text and "No person took part" in text
    assert "\\newcommand{\\humanWaveRun}{0}" in (tmp_path / "generated" / "human_macros.tex").read_text()
    assert not list((tmp_path / "tables").glob("human_*.csv"))


@pytest.mark.parametrize("which", ["simulated", "not-run"])
def test_the_section_typesets_with_the_generated_files(root, simulated, tmp_path, which, latex):
    _, out = simulated
    doc = tmp_path / "doc"
    (doc / "sections").mkdir(parents=True)
    if which == "simulated":
        shutil.copytree(out / "generated", doc / "generated")
        shutil.copytree(out / "figures", doc / "figures")
        for env in (doc / "generated").glob("*figure.tex"):
            env.write_text(env.read_text().replace(str(out / "figures"), "figures"))
            env.write_text(
                "\n".join(
                    "\\includegraphics[width=0.8\\linewidth]{figures/human_acceptance.pdf}"
                    if "includegraphics" in ln
                    else ln
                    for ln in env.read_text().splitlines()
                )
            )
    else:
        proc = _stage(root, tmp_path / "nr", "nohuman")
        assert proc.returncode == 0
        shutil.copytree(tmp_path / "nr" / "generated", doc / "generated")
    shutil.copy(paths.MANUSCRIPT_DIR / "sections" / "human_wave.tex", doc / "sections" / "human_wave.tex")
    (doc / "main.tex").write_text(
        "\\documentclass{article}\\usepackage{booktabs,graphicx,etoolbox,array}\n"
        "\\InputIfFileExists{generated/human_macros.tex}{}{}\\providecommand{\\humanWaveRun}{0}\n"
        "\\begin{document}\\section{Design}\\label{sec:design-hyp}\\input{sections/human_wave.tex}\\end{document}\n"
    )
    proc = subprocess.run(
        ["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "main.tex"],
        cwd=doc,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (doc / "main.log").read_text()[-3000:]
    pdftext = subprocess.run(["pdftotext", "main.pdf", "-"], cwd=doc, capture_output=True, text=True).stdout
    if which == "simulated":
        assert "SIMULATED" in pdftext and "no person took part" in pdftext and "Table" in pdftext
    else:
        assert "was not run for this study" in " ".join(pdftext.split())
