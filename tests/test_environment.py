"""The pip and conda spellings of the environment pin the same packages at the same versions."""

from __future__ import annotations

import re
import tomllib

import yaml

from pilot import paths


def _name(spec: str) -> tuple[str, str]:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", spec.strip())
    assert m, f"not an exact pin: {spec!r}"
    return m.group(1).lower().replace("_", "-"), m.group(2)


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    pip_pins = dict(_name(s) for s in project["dependencies"])
    for extra in ("test", "lab"):
        pip_pins.update(_name(s) for s in project["optional-dependencies"][extra])
    env = yaml.safe_load((paths.ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    conda_pins = dict(_name(s) for s in pip_section if not s.startswith("-e"))
    assert conda_pins == pip_pins


def test_every_dependency_is_pinned_exactly():
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    for spec in specs:
        _name(spec)
