"""Where the tests find the real pinned Claude Code CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pilot.agents import claude_code


def real_cli() -> Path | None:
    """``PILOT_TEST_CLAUDE_BIN`` when it names a file, else the CLI bundled in ``claude-agent-sdk`` (the ``agent`` extra)."""
    env = os.environ.get("PILOT_TEST_CLAUDE_BIN")
    if env and Path(env).is_file():
        return Path(env)
    return claude_code.bundled_cli()


def require_real_sandbox() -> Path:
    """The real CLI, after checking that it and the sandbox are here: a test of them fails, never skips, without them."""
    import pytest

    from pilot.agents import sandbox

    cli = real_cli()
    if cli is None:
        pytest.fail("no real Claude Code CLI: `make test` installs the 'agent' extra (or set PILOT_TEST_CLAUDE_BIN)")
    if sandbox.isolation_problems():
        pytest.fail("; ".join(sandbox.isolation_problems()))
    return cli


def rehearsal_environment(mp, data_dir: Path, *, pythonpath: str | None = None) -> None:
    """What every rehearsal test sets before its study runs (``mp``: a pytest MonkeyPatch).

    The study's data in ``data_dir``; the harness's own environment standing in for build/worker-env (it has the
    solvers' packages); no API key and an unreachable upstream, so nothing can reach a real API; no branch plan
    unless the test names one. Child processes (the local executor's supervisors, dask workers started after
    this) inherit it; ``pythonpath`` is put before theirs, for a run function that lives among the tests.
    """
    import sys

    from pilot import paths
    from pilot.agents import worker_env

    mp.setattr(paths, "DATA_DIR", data_dir)
    mp.setenv(worker_env.ENV_VAR, sys.prefix)
    mp.delenv("ANTHROPIC_API_KEY", raising=False)  # a rehearsal needs none
    mp.setenv("ANTHROPIC_BASE_URL", "http://192.0.2.1:9")  # nor the operator's upstream: nothing may go there
    mp.delenv("PILOT_REHEARSAL_BRANCHES", raising=False)
    if pythonpath:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [pythonpath, os.environ.get("PYTHONPATH")])))


def passable(p: Path) -> None:
    """Let any user walk down to ``p`` (pytest's and the checkout's folders may be private to root)."""
    for q in [p, *p.parents]:
        if q == Path("/"):
            break
        if not os.stat(q).st_mode & 0o001:
            os.chmod(q, os.stat(q).st_mode | 0o001)


#: The tests' own unprivileged harness user (made when missing; root only), shared by every test that runs the harness
#: without privilege.
HARNESS_USER = "pilot-test-harness"
HARNESS_UID = 61990


def harness_user() -> tuple[int, int]:
    """The uid and gid of the tests' unprivileged harness user, made first if missing (needs root)."""
    import pwd

    try:
        pw = pwd.getpwnam(HARNESS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--uid", str(HARNESS_UID), "--user-group", "--no-create-home"]
            + ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", HARNESS_USER],
            check=True,
            capture_output=True,
        )
        pw = pwd.getpwnam(HARNESS_USER)
    return pw.pw_uid, pw.pw_gid


def run_python_as(uid: int, gid: int, code: str, *, home: Path, timeout: float) -> subprocess.CompletedProcess:
    """Python ``code`` run by an unprivileged harness user (no capability, no supplementary group) in ``home``.

    The user's interpreter imports this checkout's package and the test environment's site-packages; the test fails
    (never skips) when the user cannot read them.
    """
    import sys

    import pytest

    from pilot import paths

    def readable(p: Path) -> bool:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "test", "-r", str(p)]
        return subprocess.run(cmd).returncode == 0

    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    for p in [paths.ROOT / "src", site, real_cli()]:
        if p is None or not readable(p):
            pytest.fail(
                f"{p} is not readable by an unprivileged user: the unprivileged half cannot run from this checkout"
            )
    # The harness's interpreter may live in root's home (pyenv): the system's runs the same packages then.
    python = os.path.realpath(sys.executable)
    if not readable(Path(python)):
        python = "/usr/bin/python3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        HOME=str(home),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join([str(paths.ROOT / "src"), str(site)]),
    )
    argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    return subprocess.run(
        [*argv, python, "-c", code], capture_output=True, text=True, env=env, timeout=timeout, cwd=str(home)
    )


def run_as_unprivileged_harness(base: Path, script: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a Python ``script`` as the tests' unprivileged harness user (from root), in ``base``, which it is given.

    ``base``'s parents are made passable; the checkout's sources, the site packages and the CLI must be readable by
    that user (the test fails otherwise). Returns the finished process (stdout and stderr as text).
    """
    uid, gid = harness_user()
    passable(base)
    os.chown(base, uid, gid)
    return run_python_as(uid, gid, script, home=base, timeout=timeout)
