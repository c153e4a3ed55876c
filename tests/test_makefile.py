"""The Makefile: every target says in one line what it does, and a deleted generated file makes its stage run again.

Read with ``make -n`` (print, do not run) against stamps and a stand-in .venv in a temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pilot import paths

MAKEFILE = paths.ROOT / "Makefile"
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="GNU make is not installed")


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MAKE), "--no-print-directory", "-C", str(paths.ROOT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_make_help_lists_every_target_in_one_line():
    phony = re.search(r"^\.PHONY:(.*?)(?<!\\)$", MAKEFILE.read_text(), re.M | re.S)
    assert phony, "no .PHONY line"
    targets = {t for t in phony.group(1).replace("\\\n", " ").split() if not t.startswith(("$", "FORCE"))}
    out = _make("help")
    assert out.returncode == 0, out.stderr
    listed = dict(re.findall(r"^  (\S+) +(\S.*)$", out.stdout, re.M))
    assert targets <= set(listed), targets - set(listed)
    assert len(out.stdout.splitlines()) == len(listed)  # one line each, nothing else


def test_a_deleted_generated_file_makes_its_stage_run_again(tmp_path: Path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    table = tmp_path / "design_table.tex"
    table.write_text("%")
    stamp = stamps / "design-tables"
    stamp.write_text(f"{table}\n")
    future = time.time() + 3600  # newer than every source the stage reads
    for p in (venv / ".installed", table, stamp):
        os.utime(p, (future, future))
    args = (f"VENV={venv}", f"STAMPS={stamps}", str(stamp))

    up_to_date = _make("-n", *args)
    assert up_to_date.returncode == 0, up_to_date.stderr
    assert "protocol tables" not in up_to_date.stdout

    table.unlink()
    again = _make("-n", *args)
    assert again.returncode == 0, again.stderr
    assert "pilot protocol tables --out manuscript/generated" in again.stdout


def test_ci_runs_the_fast_loop_before_the_whole_suite():
    steps = [ln for ln in (paths.ROOT / ".ci" / "run").read_text().splitlines() if ln.startswith("make")]
    assert steps == ["make check", "make test"]
