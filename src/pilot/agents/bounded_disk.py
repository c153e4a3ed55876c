"""The disk of one session: a size-limited tmpfs whose size is the workspace bound, held by the kernel.

The worker's writable folders that outlive the sandbox (the workspace, the
scratch home and the CLI's config folder) live, while a session runs, on a
tmpfs of ``study.yml`` ``sandbox.limits.workspace_mb`` bytes and at most
:data:`MAX_ENTRIES` entries. The kernel counts every byte the worker
allocates there: a file held open after ``unlink``, a file below a path
longer than ``PATH_MAX``, a burst of ``fallocate`` calls. Past the size a
write fails with ``ENOSPC``; nothing reaches the host's disk.

The tmpfs is mounted in a mount namespace of its own, never in the host's:

* a root harness: a child process makes a private mount namespace and
  mounts the tmpfs there (on an empty folder of the harness's);
* an unprivileged harness: the child makes a user namespace (mapping only
  its own uid and gid) and a mount namespace owned by it, and mounts the
  tmpfs there, which the kernel allows any user.

The child hands the harness three descriptors (the tmpfs's root folder,
the mount namespace and, unprivileged, the user namespace) and exits. The
harness keeps the tmpfs alive by them alone: the session's launch joins
the namespace before it execs bubblewrap, which binds the tmpfs's folders
at the paths the worker knows; the harness copies its own files in before
the session and takes the worker's back out after it by file descriptor
(:mod:`pilot.agents.takeback`). Closing the descriptors frees the tmpfs,
and the kernel closes them when the harness dies, however it dies: no
mount is left behind on the host.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The folders a session's disk holds, by the name of their folder in the run (workspace) or its agent folder.
HOLDS = ("workspace", "home", "claude-config")
#: The most entries (files, folders, links) the disk holds (tmpfs ``nr_inodes``): a flood of empty files is bounded too.
MAX_ENTRIES = 200_000
#: The disk counts as full when less than this is left (a writer stops at its last whole page, or short of it).
FULL_SLACK_BYTES = 256 * 1024
#: What the launch record calls each way of holding the disk.
KIND = "tmpfs"

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 16384, 1 << 18


@functools.cache
def _libc() -> ctypes.CDLL:
    # Loaded in the harness, before any fork: a forked child only calls it.
    return ctypes.CDLL(None, use_errno=True)


class BoundedDiskError(RuntimeError):
    """The session's bounded disk could not be made (a fault of the host, before any inference)."""


def namespace_kind(root: bool | None = None) -> str:
    """How this harness holds the disk: ``mount`` (a root harness) or ``user+mount`` (an unprivileged one)."""
    root = (os.geteuid() == 0) if root is None else root
    return "mount" if root else "user+mount"


def describe_plan(size_bytes: int, root: bool | None = None) -> dict[str, Any]:
    """The bounded disk a session of this harness gets, as data (the launch record's ``confinement.disk``)."""
    return {
        "kind": KIND,
        "namespace": namespace_kind(root),
        "bytes": int(size_bytes),
        "entries": MAX_ENTRIES,
        "holds": list(HOLDS),
        "persistence": "copied in from the run folder before each session; taken back into the run folder, "
        "by file descriptor, after it; freed with the session",
    }


@dataclass
class SessionDisk:
    """One session's bounded disk, held by descriptors only.

    ``mountpoint`` is where the tmpfs appears inside its own mount namespace
    (an empty folder of the harness's everywhere else); :meth:`folder` names
    each held folder there, as a bind source for bubblewrap.
    """

    mountpoint: Path
    size_bytes: int
    root_fd: int
    mnt_fd: int
    user_fd: int | None = None
    entries: int = MAX_ENTRIES
    closed: bool = field(default=False, init=False)

    @classmethod
    def create(
        cls, mountpoint: Path, size_bytes: int, entries: int = MAX_ENTRIES, timeout_s: float = 30.0
    ) -> SessionDisk:
        """Mount a fresh tmpfs of ``size_bytes`` in a namespace of its own; ``mountpoint`` must be an empty folder."""
        mountpoint = Path(mountpoint)
        if not mountpoint.is_dir():
            raise BoundedDiskError(f"{mountpoint}: the bounded disk's mount point must be an existing folder")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        opts = f"size={int(size_bytes)},nr_inodes={int(entries)},mode=0755"
        setup = _keeper(theirs.fileno(), str(mountpoint), opts, os.getuid(), os.getgid(), os.geteuid() == 0, _libc())
        try:
            proc = subprocess.Popen(
                [shutil.which("true") or "/bin/true"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=setup,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            ours.close()
            theirs.close()
            raise BoundedDiskError(f"the bounded disk's helper did not start: {exc}") from exc
        theirs.close()
        try:
            ours.settimeout(timeout_s)
            msg, fds, _, _ = socket.recv_fds(ours, 1024, 3, socket.MSG_CMSG_CLOEXEC)
        except OSError as exc:
            raise BoundedDiskError(f"the bounded disk's helper did not answer: {exc}") from exc
        finally:
            ours.close()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not msg.startswith(b"ok") or len(fds) < 2:
            for fd in fds:
                os.close(fd)
            reason = msg.decode("utf-8", "replace").removeprefix("error: ") or "no answer"
            raise BoundedDiskError(
                f"a size-limited tmpfs could not be mounted in a namespace of the harness's own: {reason}"
            )
        return cls(mountpoint, int(size_bytes), fds[0], fds[1], fds[2] if len(fds) > 2 else None, int(entries))

    def folder(self, name: str) -> str:
        """A held folder's path as the disk's mount namespace shows it (a bind source)."""
        if name not in HOLDS:
            raise ValueError(f"{name!r}: the bounded disk holds only {', '.join(HOLDS)}")
        return str(self.mountpoint / name)

    def enter(self) -> None:
        """In the launch's child before exec: join the disk's user namespace (unprivileged) and mount namespace."""
        libc = _libc()
        for fd, kind, what in ((self.user_fd, _CLONE_NEWUSER, "user"), (self.mnt_fd, _CLONE_NEWNS, "mount")):
            if fd is not None and libc.setns(fd, kind) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into the bounded disk's {what} namespace: {os.strerror(err)}")
        os.chdir("/")

    def usage(self) -> tuple[int, int, int]:
        """Bytes used, bytes left and entries left on the disk, as the kernel counts them."""
        st = os.fstatvfs(self.root_fd)
        return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_bavail * st.f_frsize, st.f_favail

    def full(self) -> str | None:
        """What says the disk is full (its bytes or its entries), or None while it has room."""
        used, left, entries_left = self.usage()
        if left < FULL_SLACK_BYTES:
            return f"the workspace disk is full: {used} bytes used of {self.size_bytes} (a size-limited tmpfs)"
        if entries_left <= 0:
            return f"the workspace disk holds its most entries ({self.entries}, a size-limited tmpfs)"
        return None

    def describe(self) -> dict[str, Any]:
        return describe_plan(self.size_bytes, self.user_fd is None) | {"entries": self.entries}

    def close(self) -> None:
        """Let go of the disk: once the session's processes are gone, the kernel frees it and everything on it."""
        if self.closed:
            return
        self.closed = True
        for fd in (self.root_fd, self.mnt_fd, self.user_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self) -> SessionDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _keeper(
    sock_fd: int, target: str, opts: str, uid: int, gid: int, root: bool, libc: ctypes.CDLL
) -> Callable[[], None]:
    """The helper's work, done in the forked child before it execs ``true``: mount, send the descriptors, exit."""

    def setup() -> None:
        sock = socket.socket(fileno=os.dup(sock_fd))
        try:

            def check(rc: int, what: str) -> None:
                if rc != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"{what}: {os.strerror(err)}")

            if root:
                check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            else:
                check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
                # Only the harness's own ids exist in the namespace: nothing there is anybody else's.
                for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                    with open(f"/proc/self/{name}", "w") as fh:
                        fh.write(text)
            # Private first: nothing mounted here propagates to the host's mount namespace.
            check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
            check(
                libc.mount(b"pilot-disk", target.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts.encode()),
                f"mount a tmpfs ({opts}) on {target}",
            )
            fds = [os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)]
            fds.append(os.open("/proc/self/ns/mnt", os.O_RDONLY))
            if not root:
                fds.append(os.open("/proc/self/ns/user", os.O_RDONLY))
            socket.send_fds(sock, [b"ok"], fds)
        except BaseException as exc:  # noqa: BLE001 - every failure is told to the harness, which names it
            try:
                sock.sendall(b"error: " + str(exc).encode("utf-8", "replace")[:500])
            except OSError:
                pass
        finally:
            sock.close()

    return setup
