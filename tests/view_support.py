"""Studies for the viewer's tests, built once per test process with the real scheduler and the simulated backend.

``simulated_study()`` is one scenario under all five arms, twice (10 runs),
with a seed whose draws include shell-arm deviations (one typed directly,
one through ``bash -c``) and a changed input (E). ``infra_study()`` is run
by the scheduler's fake run function with every A0 attempt failing on
infrastructure, so its A0 runs end failed after three attempts.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from schedule_support import make_root

SCENARIO = "ACC-01"
SEED = 5  # this seed's draws: A1 curl typed directly, A1 wget and A2 curl through bash -c, A2 changes an input
_BUILT: dict[str, Path] = {}
_TMP = Path(tempfile.mkdtemp(prefix="pilot-view-tests-"))
atexit.register(shutil.rmtree, _TMP, True)


def pilot(root: Path, *args: str, extra_env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PILOT_ROOT=str(root), **(extra_env or {}))
    proc = subprocess.run([sys.executable, "-m", "pilot", *args], env=env, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"pilot {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _root() -> Path:
    if "root" not in _BUILT:
        _BUILT["root"] = make_root(_TMP)
    return _BUILT["root"]


def simulated_study() -> Path:
    """The folder of a finished simulated study (built on first use)."""
    if "simulated" not in _BUILT:
        root = _root()
        pilot(root, "study", "create", "viewsim", "--scenarios", SCENARIO, "--seed", str(SEED))
        pilot(root, "study", "run", "viewsim", "--no-progress")
        _BUILT["simulated"] = root / "analysis" / "data" / "viewsim"
    return _BUILT["simulated"]


def infra_study() -> Path:
    """The folder of a study whose A0 attempts all failed on infrastructure (fake run function)."""
    if "infra" not in _BUILT:
        root = _root()
        pilot(root, "study", "create", "viewinfra", "--scenarios", SCENARIO, "--seed", "3")
        pilot(root, "study", "run", "viewinfra", "--no-progress", "--runner", "pilot.simulated.fake_runs:sleep_run",
              extra_env={"PILOT_FAKE_INFRA_ARMS": "A0"}, check=False)
        _BUILT["infra"] = root / "analysis" / "data" / "viewinfra"
    return _BUILT["infra"]


def copy_study(folder: Path, dest: Path) -> Path:
    """A copy of a study folder that a test may tamper with (links kept as links)."""
    shutil.copytree(folder, dest, symlinks=True)
    return dest


def tree_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``folder``: (size, mtime in ns), to show that nothing was written."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return out
