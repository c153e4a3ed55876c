"""Shared helpers of the primary and sensitivity notebook tests (not a conftest: imported explicitly)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pilot import paths, runtable
from pilot.simulated import synthetic
from pilot.stages import write_parameterized_notebook


def fresh_runtable(tmp_path: Path, seed: int = 97, n_scenarios: int = 6) -> Path:
    """A run table the stages have never seen: a new SIMULATED table written as CSV."""
    df = synthetic.generate_runtable(seed, n_scenarios=n_scenarios, repeats=2)
    return runtable.write_runtable(df, tmp_path / "fresh_runs.csv")


def output_dirs(tmp_path: Path) -> dict[str, Path]:
    return {name: tmp_path / name for name in ("tables", "figures", "generated")}


def stage_params(
    out: dict[str, Path], runs: Path | str, seed: int = 5, B: int = 300, perms: int = 500
) -> dict[str, object]:
    return {
        "seed": seed,
        "runs": str(runs),
        "bootstrap_resamples": B,
        "permutations": perms,
        "tables_dir": str(out["tables"]),
        "figures_dir": str(out["figures"]),
        "generated_dir": str(out["generated"]),
    }


def run_under_nbval(stage: str, params: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    nb = write_parameterized_notebook(stage, params, tmp_path / f"{stage}.ipynb")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider", "-q", str(nb)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_cli(stage: str, params: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """``pilot stage NAME -p KEY VALUE ...`` as a user types it (values as strings)."""
    args = [sys.executable, "-m", "pilot", "stage", stage, "--output", str(tmp_path / f"{stage}.executed.ipynb")]
    for k, v in params.items():
        args += ["-p", k, str(v)]
    env = dict(os.environ, PILOT_ROOT=str(paths.ROOT))
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
