"""A stand-in worker environment for runner and launch tests: a folder whose ``bin/python3`` is the system
interpreter."""

from __future__ import annotations

from pathlib import Path


def make_worker_env(parent: Path) -> Path:
    """Create ``<parent>/worker-env/bin/python3`` (a link to ``/usr/bin/python3``) and return the environment folder."""
    env = parent / "worker-env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python3").symlink_to("/usr/bin/python3")
    return env
