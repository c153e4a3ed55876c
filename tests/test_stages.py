"""The stage runner: stage discovery, parameter checking and execution through papermill."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from pilot import paths
from pilot.stages import StageError, build_notebook, check_parameters, list_stages, run_stage

TINY = """# %% [markdown]
# A tiny stage for tests.

# %% tags=["parameters"]
seed: int = 1  # random seed
scale: float = 2.0  # multiplier
label: str = "x"  # a label
out_dir: str = ""  # where to write

# %%
from pathlib import Path
Path(out_dir, "result.json").write_text('{"value": %s, "label": "%s"}' % (seed * scale, label))
"""


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


def _stage_folder(tmp_path: Path, monkeypatch, name: str, text: str) -> None:
    """A notebooks folder holding one stage file, with the build folder under ``tmp_path``."""
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    (nbdir / name).write_text(text)
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", nbdir)
    monkeypatch.setattr(paths, "NOTEBOOK_BUILD_DIR", tmp_path / "build")


@pytest.mark.usefixtures("notebook")
def test_run_stage_executes_with_papermill(tmp_path, monkeypatch):
    _stage_folder(tmp_path, monkeypatch, "09_tiny.py", TINY)
    out = run_stage("tiny", {"seed": "4", "out_dir": str(tmp_path)})
    assert out.exists()
    assert json.loads((tmp_path / "result.json").read_text()) == {"value": 8.0, "label": "x"}


def test_every_stage_file_round_trips_through_jupytext_unchanged():
    """Opening a stage in JupyterLab and saving it (the pairing in jupytext.toml) leaves the file as it is."""
    import jupytext
    from jupytext.config import load_jupytext_configuration_file

    config = load_jupytext_configuration_file(str(paths.ROOT / "jupytext.toml"))
    for stage in list_stages().values():
        text = stage.source.read_text(encoding="utf-8")
        nb = jupytext.reads(text, fmt="py:percent", config=config)
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }  # as Lab adds it
        assert jupytext.writes(nb, fmt="py:percent", config=config) == text, f"{stage.source.name} changes when saved"


FAILING = """# %% tags=["parameters"]
seed: int = 1  # random seed

# %%
x = seed + 1

# %%
raise ValueError(f"bad value {x}")
"""


@pytest.mark.usefixtures("notebook")
def test_a_failing_stage_names_the_executed_notebook_and_the_cell(tmp_path, monkeypatch, capfd):
    from pilot import stages

    _stage_folder(tmp_path, monkeypatch, "09_failing.py", FAILING)
    with pytest.raises(stages.StageFailed) as exc:
        run_stage("failing", {"seed": "4"})
    err = exc.value
    assert err.notebook == tmp_path / "build" / "09_failing.ipynb" and err.notebook.is_file()
    assert (err.ename, err.evalue) == ("ValueError", "bad value 5")
    assert err.source_line == 8  # the raising line of the percent file
    assert str(err.notebook) in str(err) and f"cell {err.cell_index}" in str(err)
    # From the command line: one traceback (the kernel's), then the line naming notebook and cell.
    from pilot.cli.main import main

    assert main(["stage", "failing"]) == 1
    out = capfd.readouterr().err
    assert out.count("Traceback") <= 1 and "PapermillExecutionError" not in out
    assert "09_failing.ipynb" in out and "09_failing.py line 8" in out


@pytest.mark.usefixtures("notebook")
def test_stage_kernels_use_no_tcp_transport(tmp_path, monkeypatch, capfd):
    _stage_folder(tmp_path, monkeypatch, "09_tiny.py", TINY)
    run_stage("tiny", {"out_dir": str(tmp_path)})
    assert "without encryption" not in capfd.readouterr().err


def test_stage_paths_are_read_from_the_repository_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert paths.from_root("analysis/tables") == paths.ROOT / "analysis" / "tables"
    assert paths.from_root(tmp_path / "x") == tmp_path / "x"
