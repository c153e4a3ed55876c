"""Run a helper program (LibreOffice above all) on worker material, confined, never with the harness's reach.

What the harness runs on files a worker wrote (recalculating a workbook,
rendering a deck or a document) runs under bubblewrap, built from nothing:

* no network: namespaces of its own (``--unshare-all``), loopback only;
* read-only: the host's system trees and a short list of ``/etc`` entries
  (:mod:`pilot.bubblewrap`, shared with the agent's sandbox), and exactly the
  files and folders it is given, each at its own path;
* one writable folder for its output; a private HOME and ``TMPDIR``, and a
  private ``/var/tmp``, on tmpfs of a bounded size, gone with the process;
  nothing else takes a write (``/tmp`` is read-only);
* a user namespace holding no capability and allowed no further one, a new
  session, and death with its parent;
* bounded: wall time (the whole tree is killed: it is the sandbox's PID
  namespace), address space (``RLIMIT_AS``), the size of any file it writes
  (``RLIMIT_FSIZE``), no core files, and for the dedicated renderer its
  processes (``RLIMIT_NPROC``);
* unprivileged: a root harness runs it as the dedicated renderer user of
  ``study.yml`` ``sandbox.renderer`` (made by ``pilot sandbox users --create``
  with the worker users); an unprivileged harness as itself.

A host that cannot build the confinement makes :func:`run` refuse with one
line naming what is missing, unless the operator opted out for development
(``PILOT_ISOLATION=unisolated``, what ``--allow-unisolated`` sets): the
helper then runs unconfined and its result says so.

Material crosses the wall only through :func:`copy_regular`: a regular file
opened without following a link, bounded by size, copied into a file the
harness creates.
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import resource
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pilot import worker_files
from pilot.bubblewrap import ETC_ENTRIES, PRIVILEGE_FLAGS, bwrap_problems, stage_binds, system_layout

#: The environment variable of the development opt-out (``pilot.runner`` reads the same one).
ISOLATION_ENV = "PILOT_ISOLATION"
OPT_OUT = "unisolated"
#: How a confined run is held, as results record it.
BUBBLEWRAP = "bubblewrap"

MIB = 1024 * 1024
#: Read-only extras every helper gets when the host has them: the font cache (without it fontconfig rebuilds one
#: per run in the private HOME, seconds each time).
SHARED_CACHES = ("/var/cache/fontconfig",)
#: Host environment variables a helper inherits (locale and time zone: they shape dates and numbers it prints);
#: nothing else of the harness's environment (no key, no proxy setting) reaches it.
INHERITED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "TZ")
#: At most this much of a helper's stdout and stderr is kept (its tail).
OUTPUT_TAIL_BYTES = 64 * 1024


class ConfinementUnavailable(RuntimeError):
    """This host cannot confine a helper; the message is one line naming what is missing and what to run."""


class UnsafeFile(OSError):
    """A file refused at the wall: a link, not a regular file, or larger than its bound."""


@dataclass(frozen=True)
class Limits:
    """What one confined run may use."""

    wall_s: float
    memory_bytes: int = 4096 * MIB
    #: The largest file it may write (its output included).
    file_bytes: int = 256 * MIB
    #: The size of each private tmpfs (HOME and TMPDIR; ``/var/tmp``).
    scratch_bytes: int = 512 * MIB
    #: Processes and threads of the dedicated renderer uid, all its runs on the host together.
    processes: int = 2048

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Identity:
    """The uid a helper runs as, and whether the harness switches to it (a root harness)."""

    uid: int
    gid: int
    name: str
    switch: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "gid": self.gid, "name": self.name, "dedicated": self.switch}


@dataclass(frozen=True)
class Completed:
    """One helper run: how it ended, the tail of what it printed, and how it was held."""

    returncode: int | None
    timed_out: bool
    #: The tail of its stdout (and of its stderr too, unless they were kept apart: then in ``errors``).
    output: str
    seconds: float
    #: ``bubblewrap``, or ``unisolated`` when the operator's opt-out let it run without the confinement.
    confinement: str
    identity: dict[str, Any] = field(default_factory=dict)
    #: Why it ran unconfined (the host's missing pieces), when it did.
    unconfined_reason: str = ""
    #: The helper's pid as the host sees it (bubblewrap's ``child-pid``), when known.
    inner_pid: int | None = None
    #: The tail of its stderr when it was kept apart from its stdout.
    errors: str = ""

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0


# --------------------------------------------------------------------------
# Who it runs as
# --------------------------------------------------------------------------


def renderer_account(study: Any | None = None) -> tuple[str, int]:
    """The dedicated renderer user of ``study.yml`` ``sandbox.renderer``: (name, uid)."""
    if study is None:
        from pilot import protocol

        study = protocol.study()
    r = study["sandbox"]["renderer"]
    return str(r["user"]), int(r["uid"])


def missing_renderer(study: Any | None = None) -> str | None:
    """Why the dedicated renderer user is unusable (absent, or another uid, or no group of its own), else None."""
    name, uid = renderer_account(study)
    try:
        pw = pwd.getpwnam(name)
        grp.getgrgid(pw.pw_gid)
    except KeyError:
        return f"{name} (uid {uid}) does not exist"
    if pw.pw_uid != uid or pw.pw_uid == 0 or pw.pw_gid == 0:
        return f"{name} has uid {pw.pw_uid} and gid {pw.pw_gid}; expected uid {uid} and a group of its own"
    return None


def create_system_user(name: str, uid: int) -> bool:
    """Create ``name`` as a system user with uid ``uid``, a group of its own, no home and no login shell (root only).

    False when it exists already.
    """
    try:
        pwd.getpwnam(name)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        group_args: list[str] = []  # a group with that id exists: the user gets its own named group anyway
    except KeyError:
        subprocess.run(["groupadd", "--system", "--gid", str(uid), name], check=True, capture_output=True)
        group_args = ["--gid", str(uid)]
    subprocess.run(
        [
            "useradd",
            "--system",
            "--uid",
            str(uid),
            *group_args,
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        check=True,
        capture_output=True,
    )
    return True


def own_identity() -> Identity:
    """The harness's own user (an unprivileged harness runs a helper as itself)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return Identity(uid, gid, name)


def identity(study: Any | None = None) -> Identity:
    """Whom a helper runs as: the dedicated renderer user for a root harness, the harness itself otherwise.

    Raises :class:`ConfinementUnavailable` when a root harness lacks the renderer user.
    """
    if os.geteuid() != 0:
        return own_identity()
    problem = missing_renderer(study)
    if problem:
        raise ConfinementUnavailable(
            f"LibreOffice and the other helpers never run as root: the renderer user {problem} "
            "(study.yml sandbox.renderer); create it with `pilot sandbox users --create`"
        )
    name, _ = renderer_account(study)
    pw = pwd.getpwnam(name)
    return Identity(pw.pw_uid, pw.pw_gid, name, switch=True)


# --------------------------------------------------------------------------
# Can this host confine a helper?
# --------------------------------------------------------------------------


def problems(study: Any | None = None) -> tuple[str, ...]:
    """What this host lacks to confine a helper (empty when nothing)."""
    found = list(bwrap_problems())
    if os.geteuid() == 0:
        problem = missing_renderer(study)
        if problem:
            found.append(f"the renderer user {problem}: run `pilot sandbox users --create`")
    return tuple(found)


def opted_out() -> bool:
    """Whether the operator opted out of isolation for development (``PILOT_ISOLATION=unisolated``)."""
    return os.environ.get(ISOLATION_ENV) == OPT_OUT


def require(study: Any | None = None) -> None:
    """Raise :class:`ConfinementUnavailable` (one line) when helpers cannot be confined here and nobody opted out."""
    found = problems(study)
    if found and not opted_out():
        raise ConfinementUnavailable(
            "cannot confine LibreOffice on this host: "
            + "; ".join(found)
            + " (or pass --allow-unisolated for development only; it is recorded)"
        )


# --------------------------------------------------------------------------
# Across the wall
# --------------------------------------------------------------------------


def copy_regular(src: Path, dst: Path, max_bytes: int) -> int:
    """Copy the regular file ``src`` to the new file ``dst``; the number of bytes copied.

    ``src`` is read through the bounded reader (:func:`pilot.worker_files.copy_out`, beneath its folder): no link
    is followed, a pipe never blocks; anything that is not a regular file, or holds more than ``max_bytes`` (sparse
    or not), raises :class:`UnsafeFile` and leaves no ``dst``, and a file that grows while read is copied at the size
    it had when opened. ``dst`` must not exist.
    """
    src, dst = Path(src), Path(dst)
    try:
        with worker_files.Folder(src.parent) as folder:
            return worker_files.copy_out(folder, src.name, dst, max_bytes=max_bytes, mode=0o644)
    except worker_files.Refused as exc:
        if exc.kind in (worker_files.FOLDER, worker_files.SPECIAL):
            raise UnsafeFile(0, f"{src.name}: not a regular file") from None
        if exc.kind == worker_files.TOO_LARGE:
            raise UnsafeFile(0, f"{src.name}: {exc.size} bytes, above the {max_bytes}-byte bound") from None
        code = {worker_files.LINK: errno.ELOOP, worker_files.MISSING: errno.ENOENT}.get(exc.kind, errno.EACCES)
        raise UnsafeFile(code, f"{src.name}: cannot be opened without following a link ({exc})") from None


def python_binds() -> list[Path]:
    """What of this Python lies outside the system trees (its environment, its base interpreter): read-only binds."""
    found: list[Path] = []
    for p in (
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ):
        path = Path(p)
        if not str(path).startswith(("/usr/", "/bin", "/sbin", "/lib")) and path not in found and path.exists():
            found.append(path)
    return found


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def _existing(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if os.path.lexists(p)]


def bwrap_argv(
    argv: Sequence[str],
    *,
    read_only: Sequence[Path],
    writable: Path | None,
    scratch: Path,
    limits: Limits,
    info_fd: int | None = None,
    bwrap: str = "bwrap",
) -> list[str]:
    """The bubblewrap command line that runs ``argv`` confined (every path inside is the host's own path)."""
    binds, links = system_layout()
    out = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        *PRIVILEGE_FLAGS,
        "--hostname",
        "pilot-confined",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    # A private /var/tmp, which LibreOffice needs writable for its pipe (it tries /tmp, then /var/tmp). /tmp stays on
    # the read-only root: the folders a helper is given often lie under the host's /tmp, and their parents inside
    # are then mere mount points it cannot write beside.
    out += ["--size", str(limits.scratch_bytes), "--tmpfs", "/var/tmp"]
    for dst, target in links:
        out += ["--symlink", target, dst]
    for p in binds:
        out += ["--ro-bind", p, p]
    for p in _existing([*ETC_ENTRIES, *SHARED_CACHES]):
        out += ["--ro-bind", p, p]
    seen: set[str] = set()
    for given in read_only:
        s = str(Path(given).absolute())
        if s not in seen:
            seen.add(s)
            out += ["--ro-bind", s, s]
    if writable is not None:
        out += ["--bind", str(Path(writable).absolute()), str(Path(writable).absolute())]
    s = str(Path(scratch).absolute())
    out += ["--size", str(limits.scratch_bytes), "--tmpfs", s, "--dir", f"{s}/home", "--dir", f"{s}/tmp"]
    # Nothing but the folders named above takes a write.
    out += ["--remount-ro", "/", "--chdir", s]
    if info_fd is not None:
        out += ["--info-fd", str(info_fd)]
    return [*out, "--", *argv]


def _child(ident: Identity | None, limits: Limits, stage: Any) -> Any:
    """What the child does before exec: stage the binds, set the bounds, drop to the identity, die with the harness."""

    def setup() -> None:
        if stage is not None:
            stage.mount()
        os.umask(0o022)
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if ident is not None and ident.switch:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
            os.setgroups([])
            os.setresgid(ident.gid, ident.gid, ident.gid)
            os.setresuid(ident.uid, ident.uid, ident.uid)
        # After the change of uid: the kernel clears the parent-death signal when credentials change.
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG

    return setup


def _tail_reader(stream: Any, keep: list[bytes]) -> threading.Thread:
    def pump() -> None:
        buf = b""
        while chunk := stream.read1(65536):
            buf = (buf + chunk)[-OUTPUT_TAIL_BYTES:]
        keep.append(buf)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def _read_info(fd: int, deadline: float) -> int | None:
    """bubblewrap's ``--info-fd`` record: the child's pid, or None when it said nothing in time."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        try:
            return int(json.loads(data.decode()).get("child-pid"))
        except (ValueError, TypeError, AttributeError):
            continue
    return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, already dead and waiting to be reaped, is not)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> None:
    """Wait until ``pid`` has died (its namespace emptied with it), at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def run(
    argv: Sequence[str],
    *,
    read_only: Sequence[Path] = (),
    writable: Path | None = None,
    scratch: Path,
    limits: Limits,
    env: Mapping[str, str] | None = None,
    study: Any | None = None,
    merge_stderr: bool = True,
) -> Completed:
    """Run ``argv`` confined; its outcome (never an exception for what the helper did).

    ``read_only`` are the files and folders it may read (each at its own
    path), ``writable`` the one folder it may write (the harness makes it; a
    root harness hands that folder, not its contents, to the renderer user),
    ``scratch`` the path of its private HOME (``scratch/home``) and
    ``TMPDIR`` (``scratch/tmp``): a tmpfs there inside, a fresh folder of the
    harness's when unconfined (it must not exist yet, and is removed after).
    ``merge_stderr`` False keeps stderr apart (:attr:`Completed.errors`). Raises
    :class:`ConfinementUnavailable` when the host cannot confine it and
    nobody opted out.
    """
    require(study)
    found = problems(study)
    is_confined = not found
    scratch = Path(scratch).absolute()
    ident = identity(study) if is_confined else None
    shown_identity = (ident or own_identity()).to_dict()
    environ = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    environ.update({"PATH": "/usr/bin:/bin", "HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp")})
    environ.update(env or {})
    info_r = info_w = None
    stage = None
    if is_confined:
        assert ident is not None
        if writable is not None and ident.switch:
            os.chown(writable, ident.uid, ident.gid)  # the folder the harness made, never what is in it
        info_r, info_w = os.pipe()
        cmd = bwrap_argv(argv, read_only=read_only, writable=writable, scratch=scratch, limits=limits, info_fd=info_w)
        if ident.switch:
            cmd, stage = stage_binds(cmd)
        cwd = "/"
    else:
        (scratch / "home").mkdir(parents=True)
        (scratch / "tmp").mkdir()
        cmd = list(argv)
        cwd = str(scratch)
    t0 = time.monotonic()
    keep: list[bytes] = []
    keep_err: list[bytes] = []
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            env=environ,
            cwd=cwd,
            start_new_session=True,
            pass_fds=(info_w,) if info_w is not None else (),
            preexec_fn=_child(ident, limits, stage),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        for fd in (info_r, info_w):
            if fd is not None:
                os.close(fd)
        if not is_confined:
            shutil.rmtree(scratch, ignore_errors=True)
        return Completed(
            None,
            False,
            f"could not start: {exc}",
            time.monotonic() - t0,
            BUBBLEWRAP if is_confined else OPT_OUT,
            shown_identity,
            "; ".join(found),
        )
    if info_w is not None:
        os.close(info_w)
    readers = [_tail_reader(proc.stdout, keep)]
    if not merge_stderr:
        readers.append(_tail_reader(proc.stderr, keep_err))
    inner = _read_info(info_r, t0 + min(limits.wall_s, 30.0)) if info_r is not None else None
    timed_out = False
    try:
        proc.wait(timeout=max(0.0, limits.wall_s - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        timed_out = True
    # Whatever it left goes too: its process group, and inside bubblewrap its PID namespace, which the kernel empties
    # when the namespace's first process (bubblewrap's child) dies.
    if timed_out and inner is not None:
        _kill(inner)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if inner is not None:
        _wait_gone(inner, 10.0)
    for reader in readers:
        reader.join(timeout=10)
    if info_r is not None:
        os.close(info_r)
    if not is_confined:
        shutil.rmtree(scratch, ignore_errors=True)
    text = (keep[0] if keep else b"").decode("utf-8", "replace")
    if timed_out:
        text = f"did not finish within {limits.wall_s:.0f} s; its process tree was killed\n{text}"
    return Completed(
        None if timed_out else proc.returncode,
        timed_out,
        text,
        time.monotonic() - t0,
        BUBBLEWRAP if is_confined else OPT_OUT,
        shown_identity,
        "; ".join(found),
        inner,
        (keep_err[0] if keep_err else b"").decode("utf-8", "replace"),
    )
