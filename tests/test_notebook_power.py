"""The power stage notebook runs under nbval on small parameters and writes its outputs where told."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from pilot.stages import StageError, write_parameterized_notebook

pytestmark = pytest.mark.usefixtures("notebook")


def test_power_notebook_under_nbval(tmp_path: Path):
    out = {name: tmp_path / name for name in ("tables", "figures", "generated")}
    nb_path = write_parameterized_notebook(
        "power",
        {
            "simulations": "300",  # a command-line string, coerced to the declared int
            "seed": 11,
            "tables_dir": str(out["tables"]),
            "figures_dir": str(out["figures"]),
            "generated_dir": str(out["generated"]),
        },
        tmp_path / "03_power.ipynb",
    )
    nb = nbformat.read(nb_path, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "simulations = 300" in injected[0].source

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval-lax",
            "--nbval-current-env",
            "-p",
            "no:cacheprovider",
            "-q",
            str(nb_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout

    table = pd.read_csv(out["tables"] / "power_pilot.csv")
    assert {"J", "R", "delta", "test", "power", "mc_se"} <= set(table.columns)
    assert set(table.simulations) == {300} and set(table.seed) == {11}
    assert table[table.reported.notna()].shape[0] == 3
    assert (out["figures"] / "power_curves.pdf").read_bytes().startswith(b"%PDF")
    assert "\\label{tab:power}" in (out["generated"] / "power_table.tex").read_text()
    assert "\\newcommand{\\PowerReproJOneZeroRThreeDTwoFive}" in (out["generated"] / "power_macros.tex").read_text()


def test_power_notebook_refuses_an_undeclared_parameter(tmp_path: Path):
    with pytest.raises(StageError, match="unknown parameter"):
        write_parameterized_notebook("power", {"sims": 10}, tmp_path / "x.ipynb")


def test_power_notebook_defaults_follow_study_yml(tmp_path: Path):
    from pilot.protocol import study
    from pilot.stages import declared_parameters

    nb_path = write_parameterized_notebook("power", {}, tmp_path / "03_power.ipynb")
    declared = declared_parameters(nb_path)
    assert {"seed", "tables_dir", "figures_dir", "generated_dir", "simulations"} <= set(declared)
    power = study()["power"]
    assert int(declared["seed"]["default"]) == power["seed"]
    assert int(declared["simulations"]["default"]) == power["simulations"]
    assert all(info.get("help") for info in declared.values())
