"""What the tests that build a manuscript from a small study share: a repository root of their own and the stages'
small-draw commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pilot import paths


def study_root(tmp: Path) -> Path:
    """A repository root whose analysis/data is empty: the real protocol, notebooks, manuscript and config."""
    root = tmp / "root"
    (root / "analysis" / "data").mkdir(parents=True)
    for name in ("protocol", "notebooks", "manuscript", "src"):
        os.symlink(paths.ROOT / name, root / name)
    os.symlink(paths.CONFIG_DIR, root / "analysis" / "config")
    return root


def calibration_command(tables: Path, generated: Path) -> list[object]:
    """analysis/calibration.py with draws small enough for a test (it reads no run table)."""
    return [
        sys.executable,
        paths.ROOT / "analysis" / "calibration.py",
        "--tables-dir",
        tables,
        "--generated-dir",
        generated,
        "--studies",
        5,
        "--truth-draws",
        5_000,
        "--bootstrap",
        60,
        "--permutations",
        60,
        "--quiet",
    ]
