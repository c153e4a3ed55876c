"""Stage 06 end to end on a dry run's study: a SIMULATED wave, the coordinator's export, and a study with no wave.

The planted bias comes from ``analysis/config/simulated_graders.yml`` (0.4
criterion points in A3, none elsewhere: 0.4 x 25 = 10 Q points in A3 - A1).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from view_support import copy_study, pilot, simulated_study

from pilot import paths

pytestmark = pytest.mark.usefixtures("notebook")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("grading-stage") / "root"
    (root / "analysis" / "data").mkdir(parents=True)
    for part in ("protocol", "notebooks"):
        os.symlink(paths.ROOT / part, root / part)
    os.symlink(paths.CONFIG_DIR, root / "analysis" / "config")
    copy_study(simulated_study(), root / "analysis" / "data" / "viewsim")
    return root


def _stage(root: Path, out: Path, **params: object):
    args = [
        "stage",
        "grading",
        "--output",
        str(out / "06.ipynb"),
        "-p",
        "study_name",
        "viewsim",
        "-p",
        "tables_dir",
        str(out / "tables"),
        "-p",
        "figures_dir",
        str(out / "figures"),
        "-p",
        "generated_dir",
        str(out / "generated"),
        "-p",
        "bootstrap_resamples",
        "200",
    ]
    for k, v in params.items():
        args += ["-p", k, str(v)]
    return pilot(root, *args, check=False)


@pytest.fixture(scope="module")
def simulated(root, tmp_path_factory) -> tuple[dict, Path]:
    """A SIMULATED wave of the dry run's study, and the stage's outputs on it (read from the store)."""
    made = json.loads(pilot(root, "grading", "simulate", "viewsim", "sim").stdout)
    out = tmp_path_factory.mktemp("grading-stage-store")
    proc = _stage(root, out, wave="sim")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return made, out


def test_a_simulated_wave_is_analysed_labelled_and_its_planted_bias_stated(root, simulated):
    made, tmp_path = simulated
    assert made["label"] == "SIMULATED" and made["planted_bias_q_contrast"] == pytest.approx(10.0)
    truth = json.loads((root / made["truth"]).read_text())
    assert truth["bias_q_by_arm"] == {"A0": 0.0, "A1": 0.0, "A2": 0.0, "A3": 10.0, "A4": 0.0}
    macros = (tmp_path / "generated" / "grading_macros.tex").read_text()
    assert "\\newcommand{\\gradingWaveRun}{1}" in macros and "\\newcommand{\\gradingDataLabel}{SIMULATED}" in macros
    text = (tmp_path / "generated" / "grading_text.tex").read_text()
    sentences = [line for line in text.splitlines() if line and not line.startswith("%")]
    assert len(sentences) >= 6 and all(line.startswith("SIMULATED.") for line in sentences)
    assert "were given a bias of 10.0 points in this contrast; the interval " in text
    summary = pd.read_csv(tmp_path / "tables" / "grading_summary.csv")
    assert (summary["wave"] == "SIMULATED sim").all() and len(summary) >= 8
    coverage = pd.read_csv(tmp_path / "tables" / "grading_coverage.csv").set_index("item")["count"]
    assert coverage["submitted"] == coverage["assignments"] == 2 * coverage["packages"]
    for table in ("summary", "bias", "coverage"):
        assert "SIMULATED" in (tmp_path / "generated" / f"grading_{table}_table.tex").read_text()
    assert (tmp_path / "figures" / "grading_bias.pdf").read_bytes().startswith(b"%PDF")
    assert "\\textbf{SIMULATED.}" in (tmp_path / "generated" / "grading_bias_figure.tex").read_text()


def test_the_coordinators_export_round_trips_into_the_same_report(root, simulated, tmp_path):
    _, a = simulated
    export = tmp_path / "export.csv"
    assert json.loads(pilot(root, "grading", "export", "viewsim", "sim", "--out", str(export)).stdout)["rows"] > 0
    b = tmp_path / "export"
    assert _stage(root, b, wave="sim", grades=str(export)).returncode == 0
    for name in ("grading_summary.csv", "grading_bias.csv", "grading_h1.csv", "grading_coverage.csv"):
        assert (a / "tables" / name).read_text() == (b / "tables" / name).read_text(), name


def test_no_wave_of_experts_says_not_run_and_an_unknown_wave_is_named(root, tmp_path):
    proc = _stage(root, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\\newcommand{\\gradingWaveRun}{0}" in (tmp_path / "generated" / "grading_macros.tex").read_text()
    assert (
        "was not run for this study: study viewsim has no wave of experts' grades"
        in (tmp_path / "generated" / "grading_text.tex").read_text()
    )
    proc = _stage(root, tmp_path / "x", wave="nobody")
    assert proc.returncode == 1 and "no grading wave 'nobody'" in proc.stderr


def test_simulate_never_replaces_a_wave_of_experts_grades(root, tmp_path):
    graders = tmp_path / "g.csv"
    graders.write_text("name,contact,occupations\nAda,ada@example.org,accounting\nBo,@bo,accounting\n")
    pilot(root, "grading", "create", "viewsim", "people", "--graders", str(graders))
    proc = pilot(root, "grading", "simulate", "viewsim", "people", "--replace", check=False)
    assert proc.returncode == 2 and "holds experts' grades; it is never replaced" in proc.stderr
    assert "people\texperts" in pilot(root, "grading", "list", "viewsim").stdout


def test_simulated_graders_grade_a_dry_run_with_its_simulated_human_wave_and_nothing_real():
    from pilot.simulated.graders import not_dry_run

    # By the backends' registry: the simulated agent and SIMULATED participants are a dry run; the rest is not.
    assert not_dry_run(["simulated", "simulated-human"]) == []
    assert not_dry_run(["simulated"]) == []
    assert not_dry_run(["simulated", "human"]) == ["human"]
    assert not_dry_run(["rehearsal", "simulated"]) == ["rehearsal"]
    assert not_dry_run(["claude-code", "simulated-human"]) == ["claude-code"]
