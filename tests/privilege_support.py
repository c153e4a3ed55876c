"""Running a harness as an unprivileged user from a root test (the tests' own user, made when missing).

A test that is not root already runs without privilege: it runs the harness as itself.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

from pilot import paths

#: The tests' own unprivileged harness user (made when missing; root only), shared by every test that runs the harness
#: without privilege.
HARNESS_USER = "pilot-test-harness"
HARNESS_UID = 61990


def harness_user() -> tuple[int, int]:
    """The uid and gid of :data:`HARNESS_USER`, created (a system user without a home or shell) when missing."""
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


def passable(p: Path) -> None:
    """Let any user walk down to ``p`` (pytest's and the checkout's folders may be private to root)."""
    for q in [p, *p.parents]:
        if q == Path("/"):
            break
        if not os.stat(q).st_mode & 0o001:
            os.chmod(q, os.stat(q).st_mode | 0o001)


def run_python_as(uid: int, gid: int, code: str, *, home: Path, timeout: float) -> subprocess.CompletedProcess:
    """Python ``code`` run by an unprivileged harness user (no capability, no supplementary group) in ``home``.

    The user's interpreter imports this checkout's package and the test environment's site-packages; the test fails
    (never skips) when the user cannot read them or the real CLI. A test that is not root runs ``code`` as itself
    (there is no privilege to drop, and none to drop it with).
    """
    import pytest
    from real_cli_support import real_cli

    drop = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"] if os.geteuid() == 0 else []

    def readable(p: Path) -> bool:
        return subprocess.run([*drop, "test", "-r", str(p)]).returncode == 0

    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    for p in [paths.ROOT / "src", site, real_cli()]:
        if p is None or not readable(p):
            pytest.fail(f"{p} is not readable by an unprivileged user: the unprivileged half cannot run from here")
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
    return subprocess.run(
        [*drop, *(["--inh-caps=-all", "--bounding-set=-all"] if drop else []), python, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=str(home),
    )


def run_as_harness_user(base: Path, code: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``python -c code`` as :data:`HARNESS_USER` in ``base`` (made passable and given to it) with this checkout;
    a test that is not root runs it as itself.

    Returns the finished process and the user's uid.
    """
    if os.geteuid() != 0:
        return run_python_as(os.getuid(), os.getgid(), code, home=base, timeout=timeout), os.getuid()
    uid, gid = harness_user()
    # pytest's own temporary root is private to root: the test user gets a folder of its own beneath a passable one.
    passable(base)
    os.chown(base, uid, gid)
    return run_python_as(uid, gid, code, home=base, timeout=timeout), uid
