"""Run a preregistered stage: a jupytext percent notebook executed by papermill.

``notebooks/NN_name.py`` is the stage ``name`` (underscores read as hyphens,
so ``02_scale_rule.py`` is ``scale-rule``). The percent file is converted to
a notebook with jupytext, its parameters are checked against the notebook's
``parameters`` cell (papermill itself only warns on an unknown name, we
refuse it), and papermill executes it into ``build/notebooks/``.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pilot import paths

_STAGE_FILE = re.compile(r"^(\d+)_([a-z0-9_]+)\.py$")


class StageError(ValueError):
    """A stage or a parameter given to it is unknown or has the wrong type."""


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class StageFailed(RuntimeError):
    """A cell of an executed stage notebook raised; names the notebook, the cell and the source line."""

    def __init__(
        self,
        stage: Stage,
        notebook: Path,
        cell_index: int,
        exec_count: int | None,
        source_line: int | None,
        ename: str,
        evalue: str,
        traceback: list[str],
    ) -> None:
        self.stage, self.notebook, self.cell_index = stage, notebook, cell_index
        self.exec_count, self.source_line = exec_count, source_line
        self.ename, self.evalue = ename, evalue
        self.traceback = [_ANSI.sub("", t) for t in traceback]
        where = f"{paths.shown(stage.source)}" + (f" line {source_line}" if source_line else "")
        super().__init__(
            f"stage {stage.name} failed in cell {cell_index} (execution count {exec_count}) of "
            f"{paths.shown(notebook)}, from {where}: {ename}: {evalue}"
        )


def _source_line(source: Path, cell_source: str) -> int | None:
    """The line of the percent file where a cell with this source starts (its first code line)."""
    first = next((ln for ln in cell_source.splitlines() if ln.strip()), None)
    if first is None:
        return None
    for n, line in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1):
        if line == first:
            return n
    return None


@dataclass(frozen=True)
class Stage:
    name: str
    order: int
    source: Path

    @property
    def built_notebook(self) -> Path:
        return paths.NOTEBOOK_BUILD_DIR / f"{self.source.stem}.source.ipynb"

    @property
    def executed_notebook(self) -> Path:
        return paths.NOTEBOOK_BUILD_DIR / f"{self.source.stem}.ipynb"


def list_stages(notebooks_dir: Path | None = None) -> dict[str, Stage]:
    """All stages under ``notebooks/``, keyed by name, in their numbered order."""
    folder = notebooks_dir or paths.NOTEBOOKS_DIR
    stages = []
    for f in sorted(folder.glob("*.py")):
        m = _STAGE_FILE.match(f.name)
        if m:
            stages.append(Stage(name=m.group(2).replace("_", "-"), order=int(m.group(1)), source=f))
    return {s.name: s for s in sorted(stages, key=lambda s: s.order)}


def get_stage(name: str) -> Stage:
    stages = list_stages()
    if name not in stages:
        raise StageError(f"unknown stage {name!r}; the stages are: {', '.join(stages) or 'none'}")
    return stages[name]


def build_notebook(source: Path, target: Path) -> Path:
    """Convert a percent ``.py`` file to ``.ipynb`` with jupytext, with a Python kernelspec."""
    import jupytext

    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.setdefault("jupytext", {})["source_file"] = str(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(nb, target, fmt="ipynb")
    return target


def declared_parameters(notebook: Path) -> dict[str, dict[str, Any]]:
    """The parameters a notebook declares, as papermill reads them (name -> inferred type, default, help)."""
    import papermill

    return {name: dict(info) for name, info in papermill.inspect_notebook(str(notebook)).items()}


def _coerce(name: str, value: Any, info: Mapping[str, Any]) -> Any:
    kind = (info.get("inferred_type_name") or "None").lower()
    if not isinstance(value, str) or kind in ("str", "none"):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise StageError(f"parameter {name!r}: cannot read {value!r} ({exc})") from exc
    checks = {"int": (int,), "float": (int, float), "bool": (bool,), "list": (list,), "dict": (dict,)}
    expected = checks.get(kind)
    if expected and (not isinstance(parsed, expected) or (kind in ("int", "float") and isinstance(parsed, bool))):
        raise StageError(f"parameter {name!r} expects {kind}, got {value!r}")
    return float(parsed) if kind == "float" else parsed


def check_parameters(notebook: Path, params: Mapping[str, Any], *, source: Path | None = None) -> dict[str, Any]:
    """Refuse parameters the notebook does not declare; coerce command-line strings to the declared type.

    ``source`` names the percent file in messages (default: the notebook itself).
    """
    declared = declared_parameters(notebook)
    unknown = sorted(set(params) - set(declared))
    if unknown:
        where = (
            source.relative_to(paths.ROOT)
            if source is not None and source.is_relative_to(paths.ROOT)
            else (source or notebook).name
        )
        raise StageError(
            f"{where}: unknown parameter(s) {', '.join(unknown)}; declared: {', '.join(sorted(declared)) or 'none'}"
        )
    return {k: _coerce(k, v, declared[k]) for k, v in params.items()}


def write_parameterized_notebook(name: str, params: Mapping[str, Any], target: Path) -> Path:
    """Build stage ``name`` as ``target`` (.ipynb) with ``params`` injected the way papermill does, unexecuted.

    For running a stage under another executor (e.g. ``pytest --nbval-lax``)
    with the same parameter checks as ``run_stage``.
    """
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    stage = get_stage(name)
    target = Path(target)
    built = build_notebook(stage.source, target)
    checked = check_parameters(built, dict(params), source=stage.source)
    # load_notebook_node gives every cell the metadata papermill expects (tags)
    nb = parameterize_notebook(load_notebook_node(str(built)), checked, kernel_name="python3", language="python")
    nbformat.write(nb, target)
    return target


def _ipc_kernel_manager(folder: Path) -> type:
    """A kernel manager whose kernels talk over IPC sockets in ``folder`` (a private temporary
    folder) instead of TCP ports: nothing on the network can reach the kernel, two stages running
    at once never share a socket, and ipykernel has no plain-text transport to warn about."""
    from jupyter_client import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

        @default("ip")
        def _ip_default(self) -> str:
            return str(folder / "kernel")

    return IPCKernelManager


def run_stage(
    name: str, params: Mapping[str, Any] | None = None, *, output: Path | None = None, progress: bool = False
) -> Path:
    """Build, check and execute one stage; returns the executed notebook's path."""
    import papermill

    stage = get_stage(name)
    built = build_notebook(stage.source, stage.built_notebook)
    checked = check_parameters(built, dict(params or {}), source=stage.source)
    from papermill.exceptions import PapermillExecutionError

    out = Path(output) if output else stage.executed_notebook
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="pilot-kernel-") as sockets:
            papermill.execute_notebook(
                str(built),
                str(out),
                parameters=checked,
                cwd=str(paths.ROOT),
                kernel_name="python3",
                progress_bar=progress,
                log_output=False,
                kernel_manager_class=_ipc_kernel_manager(Path(sockets)),
            )
    except PapermillExecutionError as exc:
        raise StageFailed(
            stage,
            out,
            exc.cell_index,
            exc.exec_count,
            _source_line(stage.source, exc.source or ""),
            exc.ename,
            exc.evalue,
            list(exc.traceback or []),
        ) from None
    return out
