"""The manuscript built from a dry run says what every stand-in is, in every sentence about graders or people.

A small dry run is made as `make manuscript` makes one, under a temporary
repository root (``PILOT_ROOT``): a study of two scenarios and two repeats on
the simulated backend, run for real by the scheduler and the simulated agent
and judges; stages 01 and 02 on its store; a SIMULATED grading wave drawn by
``pilot grading simulate``; the primary, sensitivity and grading stages, the
design tables, the power simulation and the calibration with small draws; and
``tools/typeset-manuscript.sh``. The PDF's text is then read as a referee reads
it, sentence by sentence: every sentence that speaks of graders, experts,
participants or people must say what they were in this build (simulated, a
stand-in, not run, no person). Sentences about cited work (those carrying a
citation) and the bibliography are about other studies and are not read.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from manuscript_support import calibration_command, study_root

from pilot import paths

pytestmark = pytest.mark.usefixtures("notebook", "latex", "soffice")

STUDY = "drylabels"
SCENARIOS = ("HR-01", "OPS-01")
REPEATS = 2
DRAWS = {"bootstrap_resamples": 60, "permutations": 60}

#: Words that describe graders or people.
ABOUT_PEOPLE = re.compile(r"\b(graders?|experts?|participants?|people|persons?)\b", re.IGNORECASE)
#: What a sentence about them must say: what they were in this build.
LABEL = re.compile(
    r"SIMULATED|simulated|stand-in|standing in|not (?:been )?run|no person|no human|no participant|none was run",
)
#: A numbered citation as natbib prints it: the sentence is about a cited work.
CITATION = re.compile(r"\[\d+(?:\s*,\s*\d+)*\]")


def _run(args: list[object], root: Path, cwd: Path) -> str:
    env = dict(os.environ, PILOT_ROOT=str(root), OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _pilot(*args: object) -> list[object]:
    return [sys.executable, "-m", "pilot", *args]


def sentences(text: str) -> list[str]:
    """The PDF's running text as sentences (hyphenation at line ends joined, whitespace collapsed)."""
    flat = re.sub(r"-\n(?=[a-z])", "", text)
    flat = " ".join(flat.split())
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(\\])", flat) if s.strip()]


#: Cells of the protocol record's table (amendment ids, dates): pdftotext reads a table column by column, so its
#: cells run on into one "sentence" that no prose holds many of.
TABLE_CELL = re.compile(r"\bA-\d{3}\b|\b\d{4}-\d{2}-\d{2}\b")


def is_prose(sentence: str) -> bool:
    """A sentence of running text, not a run of table cells: enough words, few of them numbers or record cells."""
    words = sentence.split()
    numbers = sum(bool(re.fullmatch(r"[−\-]?[\d.,%/]+", w)) for w in words)
    return len(words) >= 6 and numbers <= len(words) // 5 and len(TABLE_CELL.findall(sentence)) < 5


def unlabelled(text: str) -> list[str]:
    """Every prose sentence about graders, experts, participants or people that does not say what they were."""
    return [
        s
        for s in sentences(text)
        if is_prose(s) and ABOUT_PEOPLE.search(s) and not LABEL.search(s) and not CITATION.search(s)
    ]


def test_the_rule_flags_what_the_referee_flagged():
    # The two sentences of the earlier dry run's PDF that described simulated graders as people.
    bad = (
        "Judge calibration. The judges were compared with expert graders of each scenario's occupation, who graded "
        "a sample of the packages blind with the same rubric (Appendix C); the panel's bias in the primary contrast "
        "is reported there. Every Q and S in this paper rests on three LLM judges of the worker's model family."
    )
    assert unlabelled(bad) == [
        "The judges were compared with expert graders of each scenario's occupation, who graded a sample of the "
        "packages blind with the same rubric (Appendix C); the panel's bias in the primary contrast is reported there."
    ]
    good = (
        "In wave x (in this build played by simulated graders standing in for the experts of A-015), the simulated "
        "graders graded every judged package. GDPval has experts of the same occupation compare deliverables [4]."
    )
    assert unlabelled(good) == []
    # The amendments table read column by column: its titles name experts, but it is a record, not prose.
    table = (
        "ID Date Stage Amendment A-001 A-002 A-005 A-006 A-009 2026-04-01 2026-04-01 2026-04-08 2026-04-10 "
        "2026-05-20 before pilot before pilot after pilot Dollar envelope Judge calibration deferred Expert grading "
        "procedure stated by the experts of each occupation"
    )
    assert unlabelled(table) == []


#: A printed level of 95 per cent, and what must stand in its sentence: that it is nominal, what it covered, or that
#: it is a Monte Carlo interval of a simulation (power), not an inference from the runs.
NINETY_FIVE = re.compile(r"\b95\s*(?:%|per\s*cent)")
CALIBRATION = re.compile(r"nominal|calibrat|coverage|Monte Carlo", re.IGNORECASE)


def uncalibrated(text: str) -> list[str]:
    """Every sentence that prints a 95 per cent level without saying it is nominal or what it covered."""
    return [s for s in sentences(text) if NINETY_FIVE.search(s) and not CALIBRATION.search(s)]


def test_the_level_rule_flags_a_bare_ninety_five():
    assert uncalibrated("A3 - A1 is 0.067 (95% CI -0.200 to 0.367). The rest is fine.") == [
        "A3 - A1 is 0.067 (95% CI -0.200 to 0.367)."
    ]
    ok = "Intervals: nominal 95 %; calibrated coverage 0.90 at J = 10, Appendix B. The 95 % level is nominal."
    assert uncalibrated(ok) == []


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    for tool in ("pdflatex", "latexmk", "pdftotext"):
        assert shutil.which(tool), f"{tool} is part of make test (build/stamps/system-latex; pdftotext: poppler-utils)"
    tmp = tmp_path_factory.mktemp("dry-run-labels")
    root = study_root(tmp)
    out = {d: tmp / d for d in ("tables", "figures", "generated", "notebooks")}
    dirs: list[object] = []
    for key in ("tables", "figures", "generated"):
        dirs += ["-p", f"{key}_dir", out[key]]
    _run(
        _pilot("study", "create", STUDY, "--scenarios", *SCENARIOS, "--pilot-repeats", REPEATS),
        root,
        tmp,
    )
    _run(_pilot("study", "run", STUDY, "--backend", "simulated", "--no-progress"), root, tmp)
    study = ["-p", "study", STUDY, "-p", "backend", "simulated"]
    _run(_pilot("stage", "pilot", *dirs, *study, "--output", out["notebooks"] / "01.ipynb"), root, tmp)
    _run(_pilot("stage", "scale-rule", *dirs, *study, "--output", out["notebooks"] / "02.ipynb"), root, tmp)
    _run(_pilot("grading", "simulate", STUDY, "simulated-experts", "--replace"), root, tmp)
    runs = root / "analysis" / "data" / STUDY / paths.RUNS_FILE_NAME
    table = ["-p", "runs", runs, "-p", "seed", 5] + [x for k, v in DRAWS.items() for x in ("-p", k, v)]
    for cmd in (
        _pilot("stage", "primary", *dirs, *table, "--output", out["notebooks"] / "04.ipynb"),
        _pilot("stage", "sensitivity", *dirs, *table, "--output", out["notebooks"] / "05.ipynb"),
        _pilot(
            "stage",
            "grading",
            *dirs,
            "-p",
            "study_name",
            STUDY,
            "-p",
            "wave",
            "simulated-experts",
            "-p",
            "bootstrap_resamples",
            60,
            "--output",
            out["notebooks"] / "06.ipynb",
        ),
        _pilot("protocol", "tables", "--out", out["generated"]),
        _pilot("stage", "power", *dirs, "-p", "simulations", 40, "--output", out["notebooks"] / "03.ipynb"),
        calibration_command(out["tables"], out["generated"]),
    ):
        _run(cmd, root, tmp)
    ms = tmp / "manuscript"
    _run([paths.ROOT / "tools" / "typeset-manuscript.sh", ms, out["generated"], out["figures"]], root, tmp)
    pdf = ms / "build" / "main.pdf"
    text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], capture_output=True, check=True).stdout
    return {"pdf": pdf, "text": text.decode("utf-8"), "generated": out["generated"], "runs": runs}


def test_every_sentence_about_graders_or_people_says_what_they_were(built):
    missing = unlabelled(built["text"])
    assert not missing, "sentences about graders or people without their label:\n" + "\n".join(missing)


def test_the_paper_says_who_graded_and_which_waves_of_people_were_not_run(built):
    whole = " ".join(built["text"].split())
    assert "simulated graders standing in for the experts of A-015 (analysis/config/simulated_graders.yml)" in whole
    assert "no person took part" in whole
    assert "none was run with people for this build" in whole
    assert "has not been run (protocol/human/protocol.md)" in whole
    # What made the runs, from the backends' registry.
    assert "a simulated agent standing in for the agent under study (Claude Code)" in whole


def test_the_grading_coverage_starts_from_every_judged_run(built):
    tex = (built["generated"] / "grading_coverage_table.tex").read_text(encoding="utf-8")
    body = tex.split("\\midrule", 1)[1]
    first = body.strip().splitlines()[0]
    assert first.startswith("judged runs of the primary waves"), first
    judged = int(re.search(r"&\s*(\d+)", first).group(1))
    import pandas as pd

    runs = pd.read_csv(built["runs"])
    expected = int(((runs["wave"].isin(["pilot", "repeat3"])) & (pd.to_numeric(runs["n_judges"]) > 0)).sum())
    assert judged == expected > 0  # every judged run of the primary waves, agent errors included


def test_no_ninety_five_per_cent_without_its_calibration(built):
    missing = uncalibrated(built["text"])
    assert not missing, "a 95 per cent level printed without its nominal label or coverage:\n" + "\n".join(missing)


def test_no_grading_table_names_experts_in_a_row_or_header_of_a_simulated_wave(built):
    tables = sorted(built["generated"].glob("grading_*_table.tex"))
    assert len(tables) >= 7
    for path in tables:
        text = path.read_text(encoding="utf-8")
        cells = text[text.index("\\begin{tabular}") : text.index("\\end{tabular}")]
        assert "expert" not in cells.lower(), path.name
