"""Interactive review: a stage run the way JupyterLab runs it (kernel in notebooks/) reads the study's
table, shows its figures and sentences inline, and writes nothing under notebooks/."""

from __future__ import annotations

import nbformat
import papermill
import pytest
from notebook_helpers import fresh_runtable, output_dirs, stage_params

from pilot import paths
from pilot.report import stage_outputs
from pilot.stages import write_parameterized_notebook


def _listing() -> set[str]:
    return {str(p.relative_to(paths.NOTEBOOKS_DIR)) for p in paths.NOTEBOOKS_DIR.rglob("*")}


@pytest.mark.usefixtures("notebook")
def test_primary_stage_run_from_notebooks_shows_figures_and_writes_nothing_there(tmp_path):
    runs = fresh_runtable(tmp_path, seed=11, n_scenarios=4)
    out = output_dirs(tmp_path)
    nb = write_parameterized_notebook("primary", stage_params(out, runs, B=100, perms=100), tmp_path / "primary.ipynb")
    before = _listing()
    papermill.execute_notebook(
        str(nb),
        str(tmp_path / "executed.ipynb"),
        cwd=str(paths.NOTEBOOKS_DIR),
        kernel_name="python3",
        progress_bar=False,
    )
    assert _listing() == before  # nothing written beside the stage files
    executed = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the forest plot is not shown inline"
    markdown = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert any(m.startswith("SIMULATED (synthetic run table): A3 \u2212 A1 is ") for m in markdown)
    assert (out["figures"] / "primary_forest.pdf").is_file() and (out["figures"] / "primary_forest.png").is_file()


def test_the_default_run_table_is_the_study_export(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "DATA_DIR", tmp_path / "data")
    with pytest.raises(stage_outputs.RunTableMissing, match="runs = 'synthetic'"):
        stage_outputs.stage_runs("", 1, study="pilot-none")
    table = fresh_runtable(tmp_path, seed=3, n_scenarios=3)
    (tmp_path / "data" / "pilot-x").mkdir(parents=True)
    table.rename(tmp_path / "data" / "pilot-x" / paths.RUNS_FILE_NAME)
    data = stage_outputs.stage_runs("", 1, study="pilot-x")
    assert len(data.runs) > 0 and data.source.endswith("pilot-x/runs.csv")


def test_the_synthetic_table_is_an_explicit_labelled_choice(tmp_path):
    data = stage_outputs.stage_runs("synthetic", 3, tmp_path)
    assert data.synthetic and data.simulated and data.source.startswith("SIMULATED synthetic")
    assert "synthetic run table" in data.note
    assert (tmp_path / "runtable_SIMULATED_synthetic.csv").is_file()
