"""Studies for the viewer's tests, built once per test run with the real scheduler and the simulated backend.

``simulated_study()`` is one scenario under all five arms, twice (10 runs),
with a seed whose draws include shell-arm deviations (one typed directly,
one through ``bash -c``) and a changed input (E). ``models_study()`` is the
same scenario and seed under arms A0 and A3 with the model-sensitivity wave
(A3 under two other worker models, twice each): 8 runs, two models apart.
``deck_study()`` is the slide-deck scenario under A1 and A3, twice.
``caps_study()`` is ACC-01 under A1 and A4, twice, at a seed whose A4 run
ACC-01.A4.r2 reaches the turn cap in its first session, is resumed and
completes (its run-table censoring is empty). ``rehearsal_study()`` runs the real pinned CLI in its sandbox behind the
metering proxy, the scripted model server answering (no key, no network):
ACC-01 under A1, whose run plays the dollar cap reached mid-run, and under
A4, whose first session ends on an API error and is resumed, so its proxy
records hold real token counts, a capped run and a resumed one.
``run_table()`` exports a study's run table (``pilot study export``) outside
the study, for tests that compute expected values without the viewer's code. ``infra_study()`` is run
by the scheduler's fake run function with every A0 attempt failing on
infrastructure, so its A0 runs end failed after three attempts.

Under pytest-xdist the studies are built once per test run, not once per
worker: the first worker to need one builds it in the run's shared folder
(``PILOT_TEST_SHARED_DIR``, under pytest's base temporary folder, which pytest
prunes itself) while holding a lock; the others wait and then read the same
folder. The studies are read-only to their users (a test that changes one
works on ``copy_study``).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from schedule_support import make_root

SCENARIO = "ACC-01"
DECK_SCENARIO = "CX-01"  # its deliverables include a slide deck
PDF_SCENARIO = "BANK-01"  # its credit memo is a PDF holding a table of ratios, beside a workbook
SEED = 5  # this seed's draws: A1 curl typed directly, A1 wget and A2 curl through bash -c, A2 changes an input
_BUILT: dict[str, Path] = {}
_TMP = Path(tempfile.mkdtemp(prefix="pilot-view-tests-"))
atexit.register(shutil.rmtree, _TMP, True)


def pilot(
    root: Path, *args: str, extra_env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    env = dict(os.environ, PILOT_ROOT=str(root), **(extra_env or {}))
    proc = subprocess.run([sys.executable, "-m", "pilot", *args], env=env, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"pilot {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _shared_dir() -> Path | None:
    """The folder every worker of this test run shares (None outside pytest-xdist)."""
    shared = os.environ.get("PILOT_TEST_SHARED_DIR")
    return Path(shared) if shared and os.environ.get("PYTEST_XDIST_WORKER") else None


@contextmanager
def _exclusive(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".view-support.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        yield


def _built(name: str, build: Callable[[Path], Path]) -> Path:
    """``build(root)``'s study folder, made once per test run (per process outside xdist)."""
    if name in _BUILT:
        return _BUILT[name]
    shared = _shared_dir()
    if shared is None:
        if "root" not in _BUILT:
            _BUILT["root"] = make_root(_TMP)
        _BUILT[name] = build(_BUILT["root"])
        return _BUILT[name]
    with _exclusive(shared):
        root = shared / "root"
        if not root.exists():
            make_root(shared)
        done = shared / f"{name}.built"
        if not done.exists():
            try:
                build(root)
            except BaseException:
                # A half-built study would make the next worker's `study create` fail: it starts over instead.
                shutil.rmtree(root / "analysis" / "data" / _STUDY_NAMES[name], ignore_errors=True)
                raise
            done.write_text("built\n")
        _BUILT[name] = root / "analysis" / "data" / _STUDY_NAMES[name]
    return _BUILT[name]


_STUDY_NAMES = {
    "simulated": "viewsim",
    "infra": "viewinfra",
    "models": "viewmodels",
    "deck": "viewdeck",
    "rehearsal": "viewrehearsal",
    "caps": "viewcaps",
    "pdf": "viewpdf",
}
CAPS_SEED = 7  # ACC-01.A4.r2's first session draws more turns than the cap allows; the resume completes the run
#: The rehearsal study's branches (``pilot.simulated.rehearsal_branches``): a capped run and a resumed one.
REHEARSAL_BRANCHES = """cap_usd: 1.20
runs:
  ACC-01.A1.r1: {worker: cap_mid_run}
  ACC-01.A4.r1: {worker: api_500_mid_run}
"""


def _build_simulated(root: Path) -> Path:
    pilot(root, "study", "create", "viewsim", "--scenarios", SCENARIO, "--seed", str(SEED))
    pilot(root, "study", "run", "viewsim", "--no-progress")
    return root / "analysis" / "data" / "viewsim"


def _build_infra(root: Path) -> Path:
    pilot(root, "study", "create", "viewinfra", "--scenarios", SCENARIO, "--seed", "3")
    pilot(
        root,
        "study",
        "run",
        "viewinfra",
        "--no-progress",
        "--runner",
        "pilot.simulated.fake_runs:sleep_run",
        extra_env={"PILOT_FAKE_INFRA_ARMS": "A0"},
        check=False,
    )
    return root / "analysis" / "data" / "viewinfra"


def _build_models(root: Path) -> Path:
    pilot(root, "study", "create", "viewmodels", "--scenarios", SCENARIO, "--seed", str(SEED), "--arms", "A0,A3")
    pilot(root, "study", "run", "viewmodels", "--no-progress")
    pilot(root, "study", "run", "viewmodels", "--no-progress", "--wave", "sensitivity")
    return root / "analysis" / "data" / "viewmodels"


def _build_deck(root: Path) -> Path:
    pilot(root, "study", "create", "viewdeck", "--scenarios", DECK_SCENARIO, "--seed", str(SEED), "--arms", "A1,A3")
    pilot(root, "study", "run", "viewdeck", "--no-progress")
    return root / "analysis" / "data" / "viewdeck"


def _build_pdf(root: Path) -> Path:
    pilot(
        root,
        "study",
        "create",
        "viewpdf",
        "--scenarios",
        PDF_SCENARIO,
        "--seed",
        str(SEED),
        "--arms",
        "A1,A3",
        "--pilot-repeats",
        "1",
    )
    pilot(root, "study", "run", "viewpdf", "--no-progress", "--wave", "pilot")
    return root / "analysis" / "data" / "viewpdf"


def _build_rehearsal(root: Path) -> Path:
    import sys as _sys

    from pilot import paths

    if not (root / "src").exists():
        # The scripted model ships the scenario's solver source from the repository root's src/.
        (root / "src").symlink_to(paths.ROOT / "src")
    plan = root / "view_rehearsal_branches.yml"
    plan.write_text(REHEARSAL_BRANCHES, encoding="utf-8")
    env = {
        "PILOT_WORKER_ENV": _sys.prefix,  # the harness's environment stands in for build/worker-env
        "ANTHROPIC_API_KEY": "",  # a rehearsal needs none
        "ANTHROPIC_BASE_URL": "http://192.0.2.1:9",  # nothing may reach an upstream
        "PILOT_REHEARSAL_BRANCHES": str(plan),
    }
    pilot(root, "study", "create", "viewrehearsal", "--scenarios", SCENARIO, "--arms", "A1,A4", "--pilot-repeats", "1")
    pilot(root, "study", "run", "viewrehearsal", "--no-progress", "--backend", "rehearsal", extra_env=env)
    return root / "analysis" / "data" / "viewrehearsal"


def _build_caps(root: Path) -> Path:
    pilot(root, "study", "create", "viewcaps", "--scenarios", SCENARIO, "--seed", str(CAPS_SEED), "--arms", "A1,A4")
    pilot(root, "study", "run", "viewcaps", "--no-progress")
    return root / "analysis" / "data" / "viewcaps"


def caps_study() -> Path:
    """A finished simulated study in which one A4 run's first session reached the turn cap and was resumed."""
    return _built("caps", _build_caps)


def rehearsal_study() -> Path:
    """A finished rehearsal study (real CLI, sandbox and proxy; scripted model): a capped A1 run, a resumed A4 run."""
    return _built("rehearsal", _build_rehearsal)


def deck_study() -> Path:
    """A finished simulated study of the slide-deck scenario under A1 and A3, twice each (built on first use)."""
    return _built("deck", _build_deck)


def pdf_study() -> Path:
    """A finished simulated study of a scenario whose memo is a PDF with a table, A1 and A3 (built on first use)."""
    return _built("pdf", _build_pdf)


def models_study() -> Path:
    """The folder of a finished simulated study with a model-sensitivity wave (built on first use)."""
    return _built("models", _build_models)


def run_table(folder: Path, dest: Path) -> Path:
    """``dest``: the run table of the study in ``folder`` as ``pilot study export`` writes it (the study is not
    written)."""
    pilot(folder.parent.parent.parent, "study", "export", folder.name, "--out", str(dest))
    return dest


#: A usage row's token counts (the proxy writes the API's own names; so does the simulated agent's stand-in).
TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def final_usage_rows(folder: Path, run_id: str) -> list[dict]:
    """The usage rows (``proxy_usage.jsonl``) of a run's final attempt, read from its files, the attempt named by the
    store."""
    import json
    import sqlite3

    with sqlite3.connect(f"file:{folder / 'study.sqlite'}?mode=ro", uri=True) as con:
        [(n,)] = con.execute(
            "SELECT a.attempt_no FROM runs r JOIN attempts a ON a.attempt_id = r.attempt_id WHERE r.run_id = ?",
            (run_id,),
        )
    files = sorted((folder / "workspaces" / run_id / f"attempt-{n}" / "record" / "proxy").glob("*/proxy_usage.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text(encoding="utf-8").splitlines()]


def simulated_study() -> Path:
    """The folder of a finished simulated study (built on first use)."""
    return _built("simulated", _build_simulated)


def infra_study() -> Path:
    """The folder of a study whose A0 attempts all failed on infrastructure (fake run function)."""
    return _built("infra", _build_infra)


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
