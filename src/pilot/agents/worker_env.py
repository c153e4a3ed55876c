"""The worker's Python environment: built apart from the harness's, recorded with its versions.

The shell arms (A1-A4) find ``python3`` of this environment first on their
PATH. It holds the packages ``worker_requirements.txt`` pins (the design's
list: pandas, openpyxl, python-docx, reportlab, pypdf, matplotlib,
statsmodels, duckdb, sqlite3 and others) and nothing of the harness, so the
worker cannot import the oracles or the solvers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pilot import paths

REQUIREMENTS_FILE = Path(__file__).with_name("worker_requirements.txt")
VERSIONS_FILE = "versions.json"

_PROBE = r"""
import json, sys, sqlite3
from importlib import metadata
names = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0], "sqlite3": sqlite3.sqlite_version}
for n in names:
    try:
        out[n] = metadata.version(n)
    except metadata.PackageNotFoundError:
        out[n] = None
print(json.dumps(out))
"""


def requirements() -> dict[str, str]:
    """The pinned packages, name -> version."""
    pins: dict[str, str] = {}
    for n, line in enumerate(REQUIREMENTS_FILE.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"{REQUIREMENTS_FILE}: line {n}: expected 'name==version', got {line!r}")
        pins[name.strip()] = version.strip()
    return pins


def python_of(env_dir: Path) -> Path:
    return Path(env_dir) / "bin" / "python3"


def probe_versions(env_dir: Path) -> dict[str, str | None]:
    """Ask the environment's own interpreter which versions it holds."""
    py = python_of(env_dir)
    if not py.exists():
        raise FileNotFoundError(f"{py}: the worker environment has no python3")
    out = subprocess.run(
        [str(py), "-c", _PROBE, json.dumps(sorted(requirements()))], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise RuntimeError(f"{py}: version probe failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def recorded_versions(env_dir: Path) -> dict[str, str | None]:
    """The versions written when the environment was built, else probed now."""
    f = Path(env_dir) / VERSIONS_FILE
    if f.is_file():
        return json.loads(f.read_text(encoding="utf-8"))
    return probe_versions(env_dir)


def build(env_dir: Path | None = None, *, python: str | None = None) -> dict[str, str | None]:
    """Create the environment with ``venv`` and pip, then record its versions."""
    env_dir = Path(env_dir or paths.WORKER_ENV_DIR)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python or sys.executable, "-m", "venv", "--clear", str(env_dir)], check=True)
    subprocess.run([str(python_of(env_dir)), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS_FILE)], check=True)
    versions = probe_versions(env_dir)
    wrong = {k: (v, versions.get(k)) for k, v in requirements().items() if versions.get(k) != v}
    if wrong:
        raise RuntimeError(f"{env_dir}: installed versions differ from {REQUIREMENTS_FILE.name}: {wrong}")
    (env_dir / VERSIONS_FILE).write_text(json.dumps(versions, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return versions


#: Names the worker environment to use instead of ``build/worker-env`` (e.g. one built once and shared by a node's
#: checkouts).
ENV_VAR = "PILOT_WORKER_ENV"


def default_env() -> Path | None:
    """The worker environment ``PILOT_WORKER_ENV`` names (the runner checks it has a python3), else the built one, if
    there is one."""
    named = os.environ.get(ENV_VAR)
    if named:
        return Path(named)
    return paths.WORKER_ENV_DIR if python_of(paths.WORKER_ENV_DIR).exists() else None
