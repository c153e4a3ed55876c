"""Every path the project uses, in one place.

No notebook, test or module builds a repository path by hand; they import it
from here. ``PILOT_ROOT`` overrides the repository root, which otherwise is
the folder above ``src/`` that holds ``protocol/study.yml``.
"""

from __future__ import annotations

import os
from pathlib import Path


def _find_root() -> Path:
    env = os.environ.get("PILOT_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "protocol" / "study.yml").is_file():
            return parent
    # An installed (non-editable) package: fall back to the working directory.
    cwd = Path.cwd().resolve()
    for parent in (cwd, *cwd.parents):
        if (parent / "protocol" / "study.yml").is_file():
            return parent
    raise RuntimeError("cannot find the repository root (a folder holding protocol/study.yml); set PILOT_ROOT")


ROOT: Path = _find_root()

PROTOCOL_DIR = ROOT / "protocol"
STUDY_FILE = PROTOCOL_DIR / "study.yml"
ARMS_DIR = PROTOCOL_DIR / "arms"
ARMS_FILE = ARMS_DIR / "arms.yml"
SCENARIOS_DIR = PROTOCOL_DIR / "scenarios"
AMENDMENTS_FILE = PROTOCOL_DIR / "amendments.csv"
HUMAN_DIR = PROTOCOL_DIR / "human"
INTERPRETATIONS_FILE = PROTOCOL_DIR / "interpretations.md"
COMPLETION_SCHEMA_FILE = PROTOCOL_DIR / "completion_record.schema.json"

ANALYSIS_DIR = ROOT / "analysis"
DATA_DIR = ANALYSIS_DIR / "data"
TABLES_DIR = ANALYSIS_DIR / "tables"
CONFIG_DIR = ANALYSIS_DIR / "config"
SIMULATED_JUDGES_FILE = CONFIG_DIR / "simulated_judges.yml"
SIMULATED_GRADERS_FILE = CONFIG_DIR / "simulated_graders.yml"
# The SIMULATED participants' model of a dry run's human wave (pilot.simulated.participants).
SIMULATED_PARTICIPANTS_FILE = CONFIG_DIR / "simulated_participants.yml"
# The consent text the participant site shows before anything of the task (its version line is validated on load).
CONSENT_FILE = HUMAN_DIR / "consent.md"
# The default nodes file of the scheduler (virtual nodes of the local executor).
NODES_FILE = CONFIG_DIR / "nodes.yml"

MANUSCRIPT_DIR = ROOT / "manuscript"
GENERATED_DIR = MANUSCRIPT_DIR / "generated"
FIGURES_DIR = MANUSCRIPT_DIR / "figures"
MANUSCRIPT_BUILD_DIR = MANUSCRIPT_DIR / "build"

NOTEBOOKS_DIR = ROOT / "notebooks"
BUILD_DIR = ROOT / "build"
NOTEBOOK_BUILD_DIR = BUILD_DIR / "notebooks"
BENCHMARKS_DIR = ROOT / "benchmarks"
# The worker's own Python environment (shell arms), apart from the harness's .venv.
WORKER_ENV_DIR = BUILD_DIR / "worker-env"
# The simulated agent's generative model (one file, quoted wherever its outputs appear).
SIMULATED_AGENT_FILE = CONFIG_DIR / "simulated_agent.yml"


# The distribution's Chromium (Debian package `chromium`), driven by Playwright.
CHROMIUM_BIN = Path("/usr/bin/chromium")
# `pilot portal serve` keeps its access and server logs here.
PORTAL_SERVE_DIR = BUILD_DIR / "portal"


def scenario_portal_dir(scenario_id: str) -> Path:
    """Committed portal content of one scenario (written by ``pilot portal generate``)."""
    return SCENARIOS_DIR / scenario_id / "portal"


def from_root(path: str | Path) -> Path:
    """A path as a stage parameter gives it: relative paths are read from the repository root,
    whatever the working directory (JupyterLab starts a kernel in ``notebooks/``)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else ROOT / p


# The run table a study exports (``pilot study export``), inside its folder.
RUNS_FILE_NAME = "runs.csv"


def study_runs_file(name: str) -> Path:
    """The exported run table of study ``name``."""
    return study_dir(name) / RUNS_FILE_NAME


# The run table of a study's human wave (``pilot human export``, and ``pilot study export`` beside runs.csv).
HUMAN_RUNS_FILE_NAME = "human_runs.csv"


def study_human_runs_file(name: str) -> Path:
    """The exported human-wave run table of study ``name``."""
    return study_dir(name) / HUMAN_RUNS_FILE_NAME


def study_dir(name: str) -> Path:
    """Folder of one study's store, workspaces and exported run table."""
    return DATA_DIR / name


# A running `pilot view` notes its address here (never in the study folder), for the notebooks' links.
VIEW_DIR = BUILD_DIR / "view"


def shown(path: str | Path) -> str:
    """A path as messages show it: relative to the repository root when it lies inside, else as it is."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)
