"""Taking back what the worker wrote: a walk by file descriptor that follows no link and keeps nothing of the worker's.

Every step opens an entry relative to its folder's descriptor
(``openat``/``fstatat``/``mkdirat``/``fchown``/``fchmod``), with
``O_NOFOLLOW`` and ``AT_SYMLINK_NOFOLLOW``, never by a path a link could
redirect, so a tree of any depth and any link in it is handled alike.

* :func:`copy_tree` is the take-back of a session on its bounded disk
  (:mod:`pilot.agents.bounded_disk`), and the hand-over before one: a copy
  into a fresh tree of the copier's own. Only folders, regular files and
  symbolic links are copied (links as links, their targets never read);
  every other entry (FIFO, socket, device), every entry deeper than
  :data:`MAX_DEPTH` folders or with a path longer than :data:`MAX_PATH`
  bytes, a file larger than the bound, and whatever would carry the copy
  past its bytes or entries is left out: it goes with the disk, and the
  report names it. A hard link's every name is its own copy, within the
  same bound on bytes. A copy has no set-id bit and no world-writable mode,
  and its owner can always read it.
* :func:`take_back_in_place` serves a sandbox without a bounded disk (the
  macOS profile): every entry is re-owned by the harness with the same
  modes, except a file with another name (a hard link, whose other name may
  lie outside the tree): its name in the tree is removed, never re-owned.
  It visits the tree through the harness's one walk by descriptor
  (:meth:`pilot.worker_files.Folder.walk`).
* :func:`remove_tree` removes a tree by descriptor (children before their
  folder), and :func:`chmod_entry` changes one entry's mode without
  following a link; the session store's seal uses both.

Both return a :class:`TakeBack` report: what was taken back, and what was
removed with why (a count, and the first :data:`NAMES_KEPT` names).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilot import worker_files

#: Folder levels below the root of a taken-back tree (deeper entries are removed with everything beneath them).
MAX_DEPTH = 64
#: Bytes of a path relative to the root of a taken-back tree (a longer one is removed).
MAX_PATH = 2048
#: How many removed names a report keeps (the count is always whole).
NAMES_KEPT = 50
#: The read and write size of a copy.
CHUNK = 1 << 20

_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_SETID = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


def safe_mode(st_mode: int) -> int:
    """The mode a taken-back entry gets: no set-id or sticky bit, not world-writable, always open to its owner."""
    owner = 0o700 if stat.S_ISDIR(st_mode) else 0o600
    return (stat.S_IMODE(st_mode) & ~_SETID & ~stat.S_IWOTH) | owner


@dataclass(frozen=True)
class CopyBounds:
    """What one copy may take: bytes of file data, entries, folder depth and path length."""

    max_bytes: int
    max_entries: int
    max_depth: int = MAX_DEPTH
    max_path: int = MAX_PATH


@dataclass
class TakeBack:
    """What a take-back did: entries and bytes taken, and what was removed, with why."""

    entries: int = 0
    bytes: int = 0
    hard_links: int = 0
    removed: int = 0
    removed_names: list[str] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)

    def remove(self, rel: str, reason: str) -> None:
        self.removed += 1
        self.reasons[reason] += 1
        if len(self.removed_names) < NAMES_KEPT:
            self.removed_names.append(f"{_printable(rel)} ({reason})")

    def add(self, other: TakeBack) -> None:
        self.entries += other.entries
        self.bytes += other.bytes
        self.hard_links += other.hard_links
        for name in other.removed_names:
            if len(self.removed_names) < NAMES_KEPT:
                self.removed_names.append(name)
        self.removed += other.removed
        self.reasons.update(other.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "bytes": self.bytes,
            "hard_links": self.hard_links,
            "removed": self.removed,
            "removed_by_reason": dict(sorted(self.reasons.items())),
            "removed_names": list(self.removed_names),
            "removed_names_kept": NAMES_KEPT,
        }


def _printable(rel: str) -> str:
    text = rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text if len(text) <= 300 else text[:140] + " ... " + text[-140:]


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file, folder or link"


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def chmod_entry(name: str, dir_fd: int, mode: int, st: os.stat_result | None = None) -> None:
    """Set the mode of the entry ``name`` of the folder ``dir_fd``, never following a link.

    Linux has no chmod that refuses a link: the entry is pinned by an ``O_PATH`` descriptor and changed through it
    (``/proc/self/fd``). A link is refused (``ELOOP``), and so is an entry that is no longer ``st`` when given.
    """
    pfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        now = os.fstat(pfd)
        if stat.S_ISLNK(now.st_mode):
            raise OSError(errno.ELOOP, "is a symbolic link (its mode is not changed)", name)
        if st is not None and not os.path.samestat(now, st):
            raise PermissionError(errno.EACCES, "the entry changed while it was taken back")
        os.chmod(f"/proc/self/fd/{pfd}", mode)
    finally:
        os.close(pfd)


def _open_own(name: str, dir_fd: int, flags: int, st: os.stat_result) -> int:
    """Open an entry; one of the copier's own whose mode closes it to its owner (an unprivileged harness's disk) is
    opened to its owner first (:func:`chmod_entry`)."""
    need = 0o500 if stat.S_ISDIR(st.st_mode) else 0o400
    euid = os.geteuid()
    if euid != 0 and st.st_uid == euid and (st.st_mode & need) != need:
        chmod_entry(name, dir_fd, stat.S_IMODE(st.st_mode) | need, st)
    return os.open(name, flags, dir_fd=dir_fd)


def _copy_data(src: int, dst: int, size: int, budget: int) -> int:
    """Copy a regular file's data (holes stay holes); the bytes written, or -1 when they would pass ``budget``."""
    written = 0
    pos = 0
    while pos < size:
        try:
            data = os.lseek(src, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            raise
        hole = os.lseek(src, data, os.SEEK_HOLE)
        off = data
        while off < hole:
            chunk = os.pread(src, min(CHUNK, hole - off), off)
            if not chunk:
                break
            if written + len(chunk) > budget:
                return -1
            os.pwrite(dst, chunk, off)
            written += len(chunk)
            off += len(chunk)
        pos = hole
    os.ftruncate(dst, size)
    return written


def _finish(fd: int, st: os.stat_result, owner: tuple[int, int] | None) -> None:
    if owner is not None:
        os.fchown(fd, *owner)
    os.fchmod(fd, safe_mode(st.st_mode))
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def copy_tree(
    src_fd: int,
    dst_fd: int,
    limits: CopyBounds,
    *,
    owner: tuple[int, int] | None = None,
    report: TakeBack | None = None,
    rel: str = "",
) -> TakeBack:
    """Copy the folder open at ``src_fd`` into the (empty) folder open at ``dst_fd``, by descriptor, within ``limits``.

    The copies belong to the copier, or to ``owner`` (uid, gid) when given
    (the hand-over to a dedicated worker uid). ``rel`` names the source
    folder in the report. The root folder's own mode, owner and times are
    the caller's to set.
    """
    report = report if report is not None else TakeBack()
    # Each frame: source folder, destination folder, its relative path, depth, names left, its stat (None: the root).
    stack: list[tuple[int, int, str, int, list[str], os.stat_result | None]] = [
        (src_fd, dst_fd, rel, 0, sorted(os.listdir(src_fd), reverse=True), None)
    ]
    try:
        while stack:
            sfd, dfd, here, depth, names, dst_st = stack[-1]
            if not names:
                stack.pop()
                if dst_st is not None:
                    _finish(dfd, dst_st, owner)
                    os.close(sfd)
                    os.close(dfd)
                continue
            name = names.pop()
            path = _join(here, name)
            try:
                st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
            except OSError as exc:
                report.remove(path, f"unreadable: {exc.strerror}")
                continue
            if len(path.encode("utf-8", "surrogateescape")) > limits.max_path:
                report.remove(path, f"a path longer than {limits.max_path} bytes")
                continue
            if report.entries >= limits.max_entries:
                report.remove(path, f"past the bound of {limits.max_entries} entries")
                continue
            try:
                if stat.S_ISDIR(st.st_mode):
                    if depth + 1 > limits.max_depth:
                        report.remove(path, f"a folder deeper than {limits.max_depth} levels, with all it holds")
                        continue
                    child = _open_own(name, sfd, _DIR_OPEN, st)
                    try:
                        if not os.path.samestat(os.fstat(child), st):
                            report.remove(path, "changed while it was taken back")
                            os.close(child)
                            continue
                        names_below = sorted(os.listdir(child), reverse=True)
                        os.mkdir(name, 0o700, dir_fd=dfd)
                        out = os.open(name, _DIR_OPEN, dir_fd=dfd)
                    except OSError:
                        os.close(child)
                        raise
                    report.entries += 1
                    stack.append((child, out, path, depth + 1, names_below, st))
                elif stat.S_ISLNK(st.st_mode):
                    target = os.readlink(name, dir_fd=sfd)
                    os.symlink(target, name, dir_fd=dfd)
                    if owner is not None:
                        os.chown(name, *owner, dir_fd=dfd, follow_symlinks=False)
                    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dfd, follow_symlinks=False)
                    report.entries += 1
                elif stat.S_ISREG(st.st_mode):
                    _copy_file(name, sfd, dfd, st, path, limits, owner, report)
                else:
                    report.remove(path, _kind(st.st_mode))
            except OSError as exc:
                report.remove(path, f"could not be taken back: {exc.strerror or exc}")
    finally:
        for sfd, dfd, _, _, _, dst_st in stack:
            if dst_st is not None:
                os.close(sfd)
                os.close(dfd)
    return report


def _copy_file(
    name: str,
    sfd: int,
    dfd: int,
    st: os.stat_result,
    path: str,
    limits: CopyBounds,
    owner: tuple[int, int] | None,
    report: TakeBack,
) -> None:
    if st.st_size > limits.max_bytes:
        report.remove(path, "a file larger than the bound")
        return
    src = _open_own(name, sfd, _FILE_OPEN, st)
    try:
        if not os.path.samestat(os.fstat(src), st):
            report.remove(path, "changed while it was taken back")
            return
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            n = _copy_data(src, out, st.st_size, limits.max_bytes - report.bytes)
            if n >= 0:
                _finish(out, st, owner)
        finally:
            os.close(out)
        if n < 0:
            os.unlink(name, dir_fd=dfd)
            report.remove(path, f"past the bound of {limits.max_bytes} bytes taken back")
            return
        report.entries += 1
        report.bytes += n
        if st.st_nlink > 1:
            report.hard_links += 1
    finally:
        os.close(src)


def copy_folders(
    folders: Iterable[tuple[str | os.PathLike[str], str]],
    disk_fd: int,
    limits: CopyBounds,
    *,
    to_disk: bool,
    owner: tuple[int, int] | None = None,
) -> TakeBack:
    """Copy folders between the run folder and a session's disk (the hand-over, or the take-back), within one bound.

    ``folders`` pairs each folder of the run (a host path) with its name at
    the root of the disk open at ``disk_fd``. Each destination folder is
    made afresh; on the way back the run folder's former copy is removed
    first, so the host never holds two. ``owner`` owns the copies (the
    worker's uid, on the way to the disk). The bytes and entries of every
    folder count against the same ``limits``.
    """
    report = TakeBack()
    for host, name in folders:
        host = Path(host)
        parent = open_folder(host.parent)
        try:
            if to_disk:
                src_parent, src_name, dst_parent, dst_name = parent, host.name, disk_fd, name
            else:
                src_parent, src_name, dst_parent, dst_name = disk_fd, name, parent, host.name
                remove_tree(dst_name, dst_parent)
            try:
                src = open_folder(src_name, src_parent)
            except FileNotFoundError:
                if to_disk:
                    raise
                report.remove(name, "missing after the session")
                src = None
            os.mkdir(dst_name, 0o700, dir_fd=dst_parent)
            dst = open_folder(dst_name, dst_parent)
            try:
                if src is not None:
                    copy_tree(src, dst, limits, owner=owner, report=report, rel=name)
                    _finish(dst, os.fstat(src), owner)
            finally:
                os.close(dst)
                if src is not None:
                    os.close(src)
        finally:
            os.close(parent)
    return report


def open_folder(path: str | os.PathLike[str], dir_fd: int | None = None) -> int:
    """A descriptor of a folder, refusing a link (``O_NOFOLLOW``) and anything that is not a folder."""
    return os.open(path, _DIR_OPEN, dir_fd=dir_fd)


def remove_tree(name: str, dir_fd: int) -> None:
    """Remove ``name`` under the folder ``dir_fd`` and everything beneath it, by descriptor, at any depth."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    top = _open_own(name, dir_fd, _DIR_OPEN, st)
    # Each frame: the folder's parent descriptor, its name there, its own descriptor, the names left in it.
    stack = [(dir_fd, name, top, os.listdir(top))]
    try:
        while stack:
            parent, dname, fd, names = stack[-1]
            if not names:
                stack.pop()
                os.close(fd)
                os.rmdir(dname, dir_fd=parent)
                continue
            entry = names.pop()
            est = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(est.st_mode):
                sub = _open_own(entry, fd, _DIR_OPEN, est)
                stack.append((fd, entry, sub, os.listdir(sub)))
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        for _, _, fd, _ in stack:
            os.close(fd)


def take_back_in_place(
    root: str | os.PathLike[str], limits: CopyBounds, uid: int | None = None, gid: int | None = None
) -> TakeBack:
    """Re-own a tree the worker wrote in place, by descriptor (a sandbox without a bounded disk).

    Every entry ends owned by ``uid``/``gid`` (the harness's by default) with
    :func:`safe_mode`; a file with more than one name, anything but a file,
    folder or link, and whatever lies past ``limits`` is removed (depth,
    path length, entries) and reported. Bytes are not bounded here: the
    tree is already on the host's disk. A folder is re-owned before the walk
    opens it to list what it holds.
    """
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    report = TakeBack()
    try:
        folder = worker_files.Folder(root)
    except worker_files.Refused as exc:
        if exc.kind == worker_files.MISSING:
            return report
        raise OSError(errno.ELOOP if exc.kind == worker_files.LINK else errno.ENOTDIR, str(exc)) from None
    with folder:
        _reown(folder.fd, os.fstat(folder.fd), uid, gid)
        # The walk's own bounds stay out of the way: what lies past the take-back's is removed, not left unvisited.
        for listing in folder.walk(max_depth=limits.max_depth + 1, max_entries=sys.maxsize):
            if listing.error:
                _remove_unlisted(folder, listing.rel, listing.error, report)
            for entry in listing.entries:
                _take_back_entry(entry, limits, uid, gid, report)
    return report


def _remove_unlisted(folder: worker_files.Folder, rel: str, error: str, report: TakeBack) -> None:
    """A folder re-owned but then not listed (it changed under the walk): removed, with all it holds."""
    parent, _, name = rel.rpartition("/")
    try:
        pfd = folder.open_folder(parent)
        try:
            remove_tree(name, pfd)
        finally:
            os.close(pfd)
        report.remove(rel, f"could not be listed ({error}), with all it holds")
    except (OSError, worker_files.Refused) as exc:
        report.remove(rel, f"could neither be listed ({error}) nor removed: {exc}")


def _take_back_entry(entry: worker_files.Entry, limits: CopyBounds, uid: int, gid: int, report: TakeBack) -> None:
    """Re-own, or remove, one entry met by the walk (a folder the walk must not enter is marked so)."""
    fd, name, path = entry.dir_fd, entry.name, entry.rel
    try:
        if entry.st is None:
            raise OSError(errno.EIO, entry.error or "its status cannot be read")
        st = entry.st
        too_long = len(path.encode("utf-8", "surrogateescape")) > limits.max_path
        past = report.entries >= limits.max_entries
        if stat.S_ISDIR(st.st_mode):
            if too_long or past or entry.too_deep:
                entry.descend = False
                remove_tree(name, fd)
                report.remove(path, "a folder past the take-back's bounds, with all it holds")
                return
            child = open_folder(name, fd)
            try:
                if not os.path.samestat(os.fstat(child), st):
                    entry.descend = False
                    return
                _reown(child, st, uid, gid)
            finally:
                os.close(child)
            report.entries += 1
        elif stat.S_ISLNK(st.st_mode):
            if too_long or past:
                os.unlink(name, dir_fd=fd)
                report.remove(path, "a link past the take-back's bounds")
                return
            os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
            report.entries += 1
        elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            # Its other name may lie outside the tree: never re-owned through this one.
            os.unlink(name, dir_fd=fd)
            report.remove(path, "a hard link (a file with another name)")
        elif stat.S_ISREG(st.st_mode) and not (too_long or past):
            f = os.open(name, _FILE_OPEN, dir_fd=fd)
            try:
                if os.path.samestat(os.fstat(f), st):
                    _reown(f, st, uid, gid)
                    report.entries += 1
                    report.bytes += st.st_blocks * 512
            finally:
                os.close(f)
        else:
            os.unlink(name, dir_fd=fd)
            report.remove(path, "a file past the take-back's bounds" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode))
    except OSError as exc:
        entry.descend = False
        try:
            remove_tree(name, fd)
            report.remove(path, f"could not be taken back: {exc.strerror or exc}")
        except OSError:
            report.remove(path, f"could neither be taken back nor removed: {exc.strerror or exc}")


def _reown(fd: int, st: os.stat_result, uid: int, gid: int) -> None:
    # The owner first: a change of owner may clear set-id bits, and the mode is set last either way.
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.fchown(fd, uid, gid)
    os.fchmod(fd, safe_mode(st.st_mode))
