"""A simulated study for the benchmarks, built once with the real scheduler under a repository root of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pilot import paths


def build_study(
    root: Path, name: str, *, waves: Sequence[str], scenarios: Sequence[str] = (), seed: int | None = None
) -> Path:
    """The folder of study ``name`` under ``root`` (every scenario unless ``scenarios`` names some), made once and
    reused."""
    folder = root / "analysis" / "data" / name
    if (folder / "study.sqlite").is_file():
        return folder
    (root / "analysis" / "data").mkdir(parents=True, exist_ok=True)
    for link_name, target in (("protocol", paths.PROTOCOL_DIR), ("analysis/config", paths.CONFIG_DIR)):
        link = root / link_name
        if not link.exists():
            link.symlink_to(target)
    env = dict(os.environ, PILOT_ROOT=str(root))
    run = [sys.executable, "-m", "pilot", "study"]
    create = (
        run
        + ["create", name]
        + (["--scenarios", *scenarios] if scenarios else [])
        + (["--seed", str(seed)] if seed is not None else [])
    )
    subprocess.run(create, env=env, check=True, capture_output=True)
    for wave in waves:
        print(f"building the benchmark study: wave {wave} ...", flush=True)
        subprocess.run(run + ["run", name, "--wave", wave, "--no-progress"], env=env, check=True, capture_output=True)
    return folder
