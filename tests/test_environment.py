"""Versions are written once, in pyproject.toml: environment.yml installs the project, the package states its own."""

from __future__ import annotations

import re
import tomllib

import yaml

import pilot
from pilot import paths

PROJECT = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())


def _name(spec: str) -> tuple[str, str]:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", spec.strip())
    assert m, f"not an exact pin: {spec!r}"
    return m.group(1).lower().replace("_", "-"), m.group(2)


def test_every_dependency_is_pinned_exactly():
    project = PROJECT["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    for spec in specs:
        _name(spec)


def test_environment_yml_installs_the_project_and_repeats_no_pin():
    env = yaml.safe_load((paths.ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert len(pip_section) == 1, pip_section
    m = re.fullmatch(r"-e \.\[([a-z,]+)\]", pip_section[0].replace('"', ""))
    assert m, pip_section[0]
    extras = m.group(1).split(",")
    assert set(extras) <= set(PROJECT["project"]["optional-dependencies"]), extras
    assert {"test", "dev"} <= set(extras)
    # Only Python and pip come from conda, at the floor the metadata declares.
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert conda == [f"python{PROJECT['project']['requires-python']}", "pip"]


def test_the_version_is_written_once():
    assert "version" not in PROJECT["project"] and "version" in PROJECT["project"]["dynamic"]
    assert PROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pilot.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", pilot.__version__)


def test_the_build_floor_reads_the_license_expression():
    # `license = "MIT"` (an SPDX string, PEP 639) needs setuptools 77 or later.
    assert isinstance(PROJECT["project"]["license"], str)
    assert PROJECT["build-system"]["requires"] == ["setuptools>=77"]
