"""An unprivileged harness user for the tests a root harness runs twice: once as root, once as a user without privilege.

The user (``pilot-test-harness``) is made here when missing (root only); a
test then runs a short Python program as that user, with every capability
dropped, from this checkout's sources.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

from pilot import paths

#: The test's own unprivileged harness user.
HARNESS_USER = "pilot-test-harness"
HARNESS_UID = 61990


def harness_user() -> tuple[int, int]:
    """The unprivileged harness user's uid and gid (made as a system user when missing; root only)."""
    try:
        pw = pwd.getpwnam(HARNESS_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--uid",
                str(HARNESS_UID),
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                HARNESS_USER,
            ],
            check=True,
            capture_output=True,
        )
        pw = pwd.getpwnam(HARNESS_USER)
    return pw.pw_uid, pw.pw_gid


def passable(path: Path) -> None:
    """``path`` and every folder above it may be walked through by others (pytest's roots are private to root)."""
    for p in [path, *path.parents]:
        if p == Path("/"):
            break
        if not os.stat(p).st_mode & 0o001:
            os.chmod(p, os.stat(p).st_mode | 0o001)


def can_read(uid: int, gid: int, path: Path) -> bool:
    return (
        subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "test", "-r", str(path)]
        ).returncode
        == 0
    )


def site_packages() -> Path:
    return Path(next(p for p in sys.path if p.endswith("site-packages")))


def run_as(uid: int, gid: int, code: str, *, home: Path, timeout: float) -> subprocess.CompletedProcess:
    """``python -c code`` as the user, with no capability, this checkout's sources and site-packages on its path."""
    # The harness's interpreter may live in root's home (pyenv): the system's runs the same packages then.
    python = os.path.realpath(sys.executable)
    if not can_read(uid, gid, Path(python)):
        python = "/usr/bin/python3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        HOME=str(home),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join([str(paths.ROOT / "src"), str(site_packages())]),
    )
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            python,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=str(home),
    )
