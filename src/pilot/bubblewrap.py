"""What every bubblewrap confinement on this host is built from: the agent's sandbox and a confined helper alike.

* the host's system trees (``/usr`` and the ``/bin``, ``/lib*`` links or
  folders; on a merged-``/usr`` host the links are recreated, not bound) and
  the short list of ``/etc`` entries programs read at start;
* the privilege flags: a user namespace of its own with every capability
  dropped and no further user namespace allowed, whoever starts it;
* the bind stage: a root harness that runs bubblewrap as an unprivileged uid
  re-exposes each bind source under :data:`STAGE_DIR` in a mount namespace of
  its own child, so the uid needs no right to walk to the source;
* whether this host can build one at all (:func:`bwrap_problems`).

The agent's sandbox (:mod:`pilot.agents.sandbox`) and the confined helpers
(:mod:`pilot.confined`) both build on these; neither copies them.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: The system trees bound read-only when they are folders (as symlinks when the host links them, merged /usr).
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

#: The few /etc entries programs need (user names, loader cache, fonts, alternatives links, time zone).
ETC_ENTRIES = (
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/fonts",
    "/etc/mime.types",
    "/etc/magic",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/matplotlibrc",
    "/etc/python3",
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/inputrc",
    "/etc/locale.alias",
)

#: The namespaces and privileges of every confinement: its own user namespace with no capability in it and no
#: further user namespace allowed (so nothing inside can regain a capability by making one), whoever starts it.
PRIVILEGE_FLAGS = ("--unshare-user", "--disable-userns", "--cap-drop", "ALL")


def system_layout() -> tuple[list[str], list[tuple[str, str]]]:
    """The host's system trees: folders to bind read-only, and links to recreate (``/bin -> usr/bin``)."""
    binds: list[str] = []
    links: list[tuple[str, str]] = []
    for tree in SYSTEM_TREES:
        p = Path(tree)
        if p.is_symlink():
            links.append((tree, os.readlink(tree)))
        elif p.is_dir():
            binds.append(tree)
    return binds, links


# --------------------------------------------------------------------------
# Bind sources a dropped uid may not reach
# --------------------------------------------------------------------------

#: Where a root harness stages the binds for an unprivileged uid (a tmpfs in the launch's own mount namespace).
STAGE_DIR = "/run/pilot-stage"
_BIND_OPTS = ("--ro-bind", "--bind")
#: How many arguments each bubblewrap option used here takes (the rest take none).
_BWRAP_ARGS = {
    "--size": 1,
    "--tmpfs": 1,
    "--remount-ro": 1,
    "--proc": 1,
    "--dev": 1,
    "--chdir": 1,
    "--hostname": 1,
    "--cap-drop": 1,
    "--info-fd": 1,
    "--unsetenv": 1,
    "--dir": 1,
    "--perms": 1,
    "--setenv": 2,
    "--symlink": 2,
    "--ro-bind": 2,
    "--bind": 2,
}

_MS_RDONLY, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 4096, 16384, 1 << 18
_CLONE_NEWNS = 0x00020000


@dataclass(frozen=True)
class BindStage:
    """Every bind source of a launch re-exposed under :data:`STAGE_DIR`, for a confinement started as another uid.

    An unprivileged uid may have no right to walk to a source (a checkout
    under ``/root``, a private temporary folder). The launch's child (still
    root) makes a mount namespace of its own, mounts a tmpfs at
    :data:`STAGE_DIR` and bind-mounts each source there; bubblewrap, run as
    the unprivileged uid, binds from the stage. The stage exists only in that
    child's namespace: it goes with the launch, whatever kills it, and the
    host's mounts never change.
    """

    entries: tuple[tuple[str, str, bool], ...]  # (source, staged path, is a folder)

    def mount(self) -> None:
        """In the child before exec, as root: a private mount namespace holding the stage."""
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)

        def check(rc: int, what: str) -> None:
            if rc != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"{what}: {os.strerror(err)}")

        check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
        os.makedirs(STAGE_DIR, exist_ok=True)
        check(libc.mount(b"tmpfs", STAGE_DIR.encode(), b"tmpfs", 0, b"mode=0711,size=64k"), f"tmpfs on {STAGE_DIR}")
        for src, staged, is_dir in self.entries:
            if is_dir:
                os.mkdir(staged, 0o711)
            else:
                os.close(os.open(staged, os.O_CREAT | os.O_WRONLY, 0o600))
            check(libc.mount(src.encode(), staged.encode(), None, _MS_BIND | _MS_REC, None), f"bind {src}")


def _rewrite_binds(argv: list[str], rewrite: Callable[[str, str, str], str]) -> list[str]:
    """``argv`` with each ``--ro-bind``/``--bind SRC DST`` before ``--`` reading from ``rewrite(option, SRC, DST)``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out.extend(argv[i:])
            break
        if a in _BIND_OPTS and i + 2 < len(argv):
            out += [a, rewrite(a, argv[i + 1], argv[i + 2]), argv[i + 2]]
            i += 3
            continue
        n = 1 + _BWRAP_ARGS.get(a, 0)
        out.extend(argv[i : i + n])
        i += n
    return out


def map_binds(argv: list[str], sources: dict[str, str]) -> list[str]:
    """``argv`` with each ``--bind SRC DST`` whose ``SRC`` is a key of ``sources`` reading from its value instead.

    The worker's writable folders are bound from the session's bounded disk
    (:mod:`pilot.agents.bounded_disk`) at the paths the worker knows them by.
    """
    return _rewrite_binds(argv, lambda opt, src, dst: sources.get(src, src) if opt == "--bind" else src)


def stage_binds(argv: list[str], elsewhere: frozenset[str] = frozenset()) -> tuple[list[str], BindStage]:
    """``argv`` with every ``--ro-bind``/``--bind SRC DST`` reading its source from the stage (:class:`BindStage`).

    Sources that do not exist stay as they are, so bubblewrap names them in
    its error; ``elsewhere`` names folders that exist only in the mount
    namespace the launch joins (the bounded disk's), staged all the same.
    """
    entries: list[tuple[str, str, bool]] = []

    def stage(opt: str, src: str, dst: str) -> str:
        if not (src in elsewhere or os.path.exists(src)):
            return src
        staged = f"{STAGE_DIR}/{len(entries)}"
        entries.append((src, staged, src in elsewhere or os.path.isdir(src)))
        return staged

    return _rewrite_binds(argv, stage), BindStage(tuple(entries))


# --------------------------------------------------------------------------
# Can this host build one?
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def bwrap_problems() -> tuple[str, ...]:
    """What this host lacks to run bubblewrap unprivileged, each with how to fix it (empty when nothing).

    bubblewrap must be installed and able to make a user namespace for an
    unprivileged uid: a root harness probes as ``nobody``, as it will run it.
    """
    if platform.system() != "Linux":
        return (f"bubblewrap confinement needs Linux (this host is {platform.system()})",)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return (
            "bubblewrap (bwrap) is not installed: run `tools/ensure-system-packages.sh sandbox` "
            "(or `apt-get install bubblewrap socat`)",
        )
    binds, links = system_layout()
    probe = [bwrap, "--die-with-parent", *PRIVILEGE_FLAGS, "--unshare-pid", "--unshare-net"]
    for dst, target in links:
        probe += ["--symlink", target, dst]
    for b in binds:
        probe += ["--ro-bind", b, b]
    probe += ["--proc", "/proc", "--dev", "/dev", "--", "/bin/true"]
    try:
        # A root harness runs bubblewrap as an unprivileged user: probe as one (nobody), not as root.
        drop = _probe_as_nobody if os.geteuid() == 0 else None
        out = subprocess.run(probe, capture_output=True, text=True, timeout=30, preexec_fn=drop)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (f"bubblewrap does not run: {exc}",)
    if out.returncode != 0:
        return (
            f"bubblewrap cannot create an unprivileged user namespace on this host ({out.stderr.strip()[-300:]}): "
            "the worker never keeps a capability, so user namespaces must be allowed "
            "(`sysctl kernel.unprivileged_userns_clone=1`, or on Ubuntu "
            "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`; "
            "`user.max_user_namespaces` above 0)",
        )
    return ()


def _probe_as_nobody() -> None:
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
