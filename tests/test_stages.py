"""The stage runner: stage discovery, parameter checking and execution through papermill."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from pilot import paths
from pilot.stages import StageError, build_notebook, check_parameters, list_stages, run_stage

TINY = '''# %% [markdown]
# A tiny stage for tests.

# %% tags=["parameters"]
seed: int = 1  # random seed
scale: float = 2.0  # multiplier
label: str = "x"  # a label
out_dir: str = ""  # where to write

# %%
from pathlib import Path
Path(out_dir, "result.json").write_text('{"value": %s, "label": "%s"}' % (seed * scale, label))
'''


@pytest.fixture()
def tiny_notebook(tmp_path: Path) -> Path:
    src = tmp_path / "09_tiny.py"
    src.write_text(TINY)
    return build_notebook(src, tmp_path / "09_tiny.ipynb")


def test_unknown_parameter_is_refused(tiny_notebook):
    with pytest.raises(StageError, match=r"unknown parameter\(s\) sede; declared: label, out_dir, scale, seed"):
        check_parameters(tiny_notebook, {"sede": "3"})


def test_command_line_strings_are_coerced_to_declared_types(tiny_notebook):
    got = check_parameters(tiny_notebook, {"seed": "3", "scale": "0.5", "label": "42"})
    assert got == {"seed": 3, "scale": 0.5, "label": "42"}
    assert isinstance(got["scale"], float)


@pytest.mark.parametrize("key, value", [("seed", "three"), ("seed", "1.5"), ("scale", "true")])
def test_wrong_types_are_refused(tiny_notebook, key, value):
    with pytest.raises(StageError, match=f"parameter '{key}' expects"):
        check_parameters(tiny_notebook, {key: value})


def test_built_notebook_has_one_parameters_cell(tiny_notebook):
    nb = nbformat.read(tiny_notebook, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_every_stage_declares_the_notebook_contract(tmp_path):
    stages = list_stages()
    assert stages, "no stage notebooks found"
    for stage in stages.values():
        nb = build_notebook(stage.source, tmp_path / f"{stage.source.stem}.ipynb")
        from pilot.stages import declared_parameters

        declared = declared_parameters(nb)
        for key in ("seed", "tables_dir", "figures_dir", "generated_dir"):
            assert key in declared, f"{stage.source.name} lacks parameter {key}"
        params_cells = [c for c in nbformat.read(nb, as_version=4).cells if "parameters" in c.metadata.get("tags", [])]
        assert len(params_cells) == 1, f"{stage.source.name} needs exactly one parameters cell"
        for name, info in declared.items():
            assert info.get("help"), f"{stage.source.name}: parameter {name} has no help comment"


def test_unknown_stage_is_refused():
    with pytest.raises(StageError, match="unknown stage 'nope'"):
        run_stage("nope")


@pytest.mark.notebook
def test_run_stage_executes_with_papermill(tmp_path, monkeypatch):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    (nbdir / "09_tiny.py").write_text(TINY)
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", nbdir)
    monkeypatch.setattr(paths, "NOTEBOOK_BUILD_DIR", tmp_path / "build")
    out = run_stage("tiny", {"seed": "4", "out_dir": str(tmp_path)})
    assert out.exists()
    assert json.loads((tmp_path / "result.json").read_text()) == {"value": 8.0, "label": "x"}
