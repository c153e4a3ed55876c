"""The harness's one reader of what a worker wrote: opened beneath a folder, never followed, bounded in bytes.

Every file in a workspace, a scratch home or an outputs folder was written by
the worker, who may have made it a symbolic link to a host file, a FIFO that
blocks whoever opens it, a sparse file of terabytes, or a tree deeper than
``PATH_MAX``. The harness runs with more reach than the worker, so it reads
such material only through this module:

* **Beneath a folder, no link followed.** A file is opened relative to a
  descriptor of its root folder, never by a path the kernel resolves from
  ``/``. On Linux that is ``openat2(2)`` with ``RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` (through ``ctypes``: the
  standard library has no binding): no component may be a link, ``..``
  cannot climb out, ``/proc``'s magic links are refused. Where ``openat2``
  is missing (a kernel before 5.6, a seccomp filter that refuses it, macOS)
  the same walk is made one name at a time with ``openat(O_NOFOLLOW |
  O_DIRECTORY)``, which refuses a link at every step.
* **Only a regular file is ever opened.** The entry is looked at first with
  ``fstatat(AT_SYMLINK_NOFOLLOW)`` (no open, no side effect): a link, a
  folder, a FIFO, a socket or a device is refused without being opened. The
  open itself is ``O_NONBLOCK | O_NOCTTY | O_NOFOLLOW`` (a FIFO swapped in
  never blocks, a terminal never becomes the harness's), and ``fstat`` on
  the open descriptor must show the same regular file.
* **Bounded by size, sparse or not.** A file whose ``st_size`` is above the
  caller's bound is refused before a byte is read (a sparse file counts its
  whole length), and no more than that bound is ever read.
* **Trees by descriptor.** :meth:`Folder.walk` opens each folder from its
  parent's descriptor by one name: no path is resolved again, so
  ``PATH_MAX`` limits nothing; the caller bounds the depth and the entries,
  and at most one descriptor per level is open.

Every refusal is a :class:`Refused` that names the file (relative to the
root) and says why; callers turn it into a reason, a digest or a note. The
bytes read through this module are counted (:func:`bytes_read`), so a run
record can say how much of the worker's material its harness read.
:func:`private_copy` gives a library that wants a path (openpyxl,
python-docx, pypdf, LibreOffice) a copy of the bytes in a folder of the
harness's own, so no library ever opens a path the worker could redirect.

This module imports nothing of ``pilot``: every room above reads through it.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import ctypes
import errno
import hashlib
import os
import posixpath
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------- openat2

#: ``openat2(2)`` is system call 437 on every Linux architecture (the unified table, from 5.6 on).
SYS_OPENAT2 = 437
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
#: What every open beneath a root asks of the kernel.
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: A folder is opened to be listed; a file to be read. Neither may block, become a terminal or leak into a child.
DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | os.O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC
_CHUNK = 1024 * 1024
_PATH_MAX = 4096


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _libc_syscall() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


_SYSCALL = _libc_syscall()


def openat2(dir_fd: int, path: str, flags: int, resolve: int = RESOLVE) -> int:
    """``openat2(dir_fd, path, {flags, 0, resolve})``; raises :class:`OSError` with the kernel's errno."""
    if _SYSCALL is None:
        raise OSError(errno.ENOSYS, "openat2 is not available on this system", path)
    how = _OpenHow(flags, 0, resolve)
    fd = _SYSCALL(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def _probe_openat2() -> bool:
    """Whether this kernel serves ``openat2`` with the resolve flags (a seccomp filter may refuse it)."""
    if _SYSCALL is None:
        return False
    try:
        fd = openat2(-100, ".", DIR_FLAGS)  # AT_FDCWD
    except OSError:
        return False
    os.close(fd)
    return True


#: Whether :func:`openat2` is used; where it is not, the walk one name at a time with ``O_NOFOLLOW`` is.
HAVE_OPENAT2 = _probe_openat2()

# ---------------------------------------------------------------------------------------------- refusals

MISSING = "missing"
LINK = "link"
FOLDER = "folder"
SPECIAL = "special"
TOO_LARGE = "too_large"
OUTSIDE = "outside"
CHANGED = "changed"
UNREADABLE = "unreadable"
NOT_A_FOLDER = "not_a_folder"
KINDS = (MISSING, LINK, FOLDER, SPECIAL, TOO_LARGE, OUTSIDE, CHANGED, UNREADABLE, NOT_A_FOLDER)


class Refused(Exception):
    """A worker file the harness does not read: ``path`` (relative to the root), ``kind`` (:data:`KINDS`), ``reason``.

    ``reason`` completes a sentence that starts with the file's name (``"outputs/x.xlsx " + reason``); ``size`` and
    ``limit`` are set for :data:`TOO_LARGE`; ``outward`` tells a link that points out of the root from one that
    stays inside (both are refused).
    """

    def __init__(
        self,
        path: str,
        kind: str,
        reason: str,
        *,
        size: int | None = None,
        limit: int | None = None,
        outward: bool | None = None,
    ) -> None:
        self.path, self.kind, self.reason = path, kind, reason
        self.size, self.limit, self.outward = size, limit, outward
        super().__init__(f"{path} {reason}")


def describe_mode(mode: int) -> str:
    """What an entry is, in words."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _classify(rel: str, st: os.stat_result, max_bytes: int | None, link_outward: bool | None = None) -> None:
    """Raise :class:`Refused` unless ``st`` is a regular file within ``max_bytes``."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        where = "outside its folder" if link_outward else "inside its folder"
        raise Refused(
            rel, LINK, f"is a symbolic link pointing {where} (links are not followed)", outward=bool(link_outward)
        )
    if stat.S_ISDIR(mode):
        raise Refused(rel, FOLDER, "is a folder")
    if not stat.S_ISREG(mode):
        raise Refused(rel, SPECIAL, f"is {describe_mode(mode)}, not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise Refused(
            rel,
            TOO_LARGE,
            f"is {st.st_size} bytes, above the limit of {max_bytes} bytes (not read)",
            size=st.st_size,
            limit=max_bytes,
        )


def split_relative(rel: str | os.PathLike[str]) -> list[str]:
    """The names of a relative path, or :class:`Refused` (kind :data:`OUTSIDE`) for one that could leave its root."""
    text = os.fspath(rel)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\0" in text:
        raise Refused(text, OUTSIDE, "holds a NUL byte")
    if text.startswith("/"):
        raise Refused(text, OUTSIDE, "is an absolute path, not one below its folder")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused(text, OUTSIDE, "climbs out of its folder ('..')")
    return parts


def _link_outward(dir_parts: list[str], target: str) -> bool:
    """Whether a link in ``dir_parts`` with ``target`` points out of the root (decided on its text, never followed)."""
    if target.startswith("/"):
        return True
    joined = posixpath.normpath(posixpath.join(*dir_parts, target) if dir_parts else target)
    return joined == ".." or joined.startswith("../")


# ---------------------------------------------------------------------------------------------- counting

_COUNT_LOCK = threading.Lock()
_BYTES_READ = 0


def _count(n: int) -> None:
    global _BYTES_READ
    with _COUNT_LOCK:
        _BYTES_READ += n


def bytes_read() -> int:
    """Bytes of worker files this process has read through this module (a run record keeps its own share)."""
    return _BYTES_READ


def _read_fd(fd: int, size: int, sink: Callable[[bytes], object] | None = None) -> bytes:
    """Up to ``size`` bytes from ``fd`` (the size ``fstat`` gave), counted; each chunk to ``sink`` (a hash's update,
    a file's write) when given, else all of them returned."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        try:
            chunk = os.read(fd, min(_CHUNK, left))
        except BlockingIOError:
            break
        if not chunk:
            break
        left -= len(chunk)
        _count(len(chunk))
        if sink is not None:
            sink(chunk)
        else:
            chunks.append(chunk)
    return b"".join(chunks)


# ---------------------------------------------------------------------------------------------- a folder


@dataclass(frozen=True)
class Listed:
    """One entry of a listed folder: its name, what it is (``file``, ``folder``, ``link``, ``special``) and its size."""

    name: str
    kind: str
    size: int
    mode: int


def kind_of_mode(mode: int) -> str:
    """``file``, ``folder``, ``link`` or ``special``: what an entry is, from its own mode."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "link"
    return "special"


class Folder:
    """A root folder held open by descriptor; every read beneath it goes through :meth:`open_file`.

    ``root`` is a path the harness chose (its own prefix may hold links of the operator's); its last component
    must not be a link. Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        try:
            self.fd = os.open(self.root, DIR_FLAGS | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            raise Refused(str(self.root), MISSING, "not found") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                try:
                    mode = os.lstat(self.root).st_mode
                except OSError:
                    mode = 0
                if stat.S_ISLNK(mode):
                    raise Refused(str(self.root), LINK, "is a symbolic link (not followed)") from None
                raise Refused(str(self.root), NOT_A_FOLDER, f"is {describe_mode(mode)}, not a folder") from None
            raise Refused(str(self.root), UNREADABLE, f"cannot be opened ({exc.strerror})") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- resolving ----------------------------------------------------------------------------------------------
    def _open_dir(self, parts: list[str], rel: str) -> int:
        """A descriptor of the folder ``parts`` beneath the root (the root itself for none), or :class:`Refused`."""
        if not parts:
            return os.dup(self.fd)
        try:
            joined = "/".join(parts)
            # A path longer than the kernel takes in one call (PATH_MAX) is walked a name at a time instead.
            if HAVE_OPENAT2 and len(os.fsencode(joined)) < _PATH_MAX:
                return openat2(self.fd, joined, DIR_FLAGS)
            fd = os.dup(self.fd)
            try:
                for name in parts:
                    nfd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                    os.close(fd)
                    fd = nfd
            except BaseException:
                os.close(fd)
                raise
            return fd
        except OSError as exc:
            raise self._diagnose(parts, rel, exc) from None

    def _diagnose(self, parts: list[str], rel: str, exc: OSError) -> Refused:
        """Why the folders ``parts`` could not be opened: the first missing, linked or non-folder one, named."""
        fd = os.dup(self.fd)
        try:
            for i, name in enumerate(parts):
                shown = "/".join(parts[: i + 1])
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    return Refused(rel, MISSING, "not found")
                except OSError as e:
                    return Refused(rel, UNREADABLE, f"cannot be read ({e.strerror} at {shown})")
                if stat.S_ISLNK(st.st_mode):
                    try:
                        outward = _link_outward(parts[:i], os.readlink(name, dir_fd=fd))
                    except OSError:
                        outward = True
                    where = "outside its folder" if outward else "inside its folder"
                    return Refused(
                        rel,
                        LINK,
                        f"lies below {shown}, a symbolic link pointing {where} (links are not followed)",
                        outward=outward,
                    )
                if not stat.S_ISDIR(st.st_mode):
                    return Refused(rel, NOT_A_FOLDER, f"cannot be reached: {shown} is {describe_mode(st.st_mode)}")
                try:
                    nfd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as e:
                    return Refused(rel, UNREADABLE, f"cannot be read ({e.strerror} at {shown})")
                os.close(fd)
                fd = nfd
        finally:
            os.close(fd)
        if exc.errno == errno.EXDEV:
            return Refused(rel, OUTSIDE, "lies outside its folder")
        return Refused(rel, UNREADABLE, f"cannot be read ({exc.strerror})")

    def open_folder(self, rel: str | os.PathLike[str] = "") -> int:
        """A descriptor of the folder at ``rel`` beneath the root (no link followed), or :class:`Refused`; the caller
        closes it."""
        text = os.fspath(rel)
        return self._open_dir(split_relative(text), text or ".")

    def lstat(self, rel: str | os.PathLike[str]) -> os.stat_result:
        """The entry's own status (a link's, never its target's), or :class:`Refused` when it cannot be reached."""
        text = os.fspath(rel)
        parts = split_relative(text)
        if not parts:
            return os.fstat(self.fd)
        dfd = self._open_dir(parts[:-1], text)
        try:
            return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            raise Refused(text, MISSING, "not found") from None
        except OSError as exc:
            raise Refused(text, UNREADABLE, f"cannot be read ({exc.strerror})") from None
        finally:
            os.close(dfd)

    def exists(self, rel: str | os.PathLike[str]) -> bool:
        """Whether an entry (of any kind, a link included) is at ``rel``, reached without following anything."""
        try:
            self.lstat(rel)
        except Refused as exc:
            if exc.kind in (MISSING, NOT_A_FOLDER):
                return False
            raise
        return True

    def open_file(self, rel: str | os.PathLike[str], *, max_bytes: int | None) -> tuple[int, os.stat_result]:
        """(descriptor, fstat) of the regular file at ``rel``, at most ``max_bytes`` long; the caller closes it."""
        text = os.fspath(rel)
        parts = split_relative(text)
        if not parts:
            raise Refused(text, FOLDER, "is a folder")
        dfd = self._open_dir(parts[:-1], text)
        try:
            return _open_leaf(dfd, parts[-1], text, max_bytes, parts[:-1])
        finally:
            os.close(dfd)

    def read_bytes(self, rel: str | os.PathLike[str], *, max_bytes: int) -> bytes:
        """The bytes of the regular file at ``rel`` (refused above ``max_bytes``), counted in :func:`bytes_read`."""
        fd, st = self.open_file(rel, max_bytes=max_bytes)
        try:
            return _read_fd(fd, min(st.st_size, max_bytes))
        finally:
            os.close(fd)

    def read_prefix(self, rel: str | os.PathLike[str], *, max_bytes: int) -> tuple[bytes, int]:
        """(the first ``max_bytes`` bytes, the whole size) of the regular file at ``rel``, whatever its size: for a
        page that shows the start of a long text. Nothing but a regular file is opened, no link followed."""
        fd, st = self.open_file(rel, max_bytes=None)
        try:
            return _read_fd(fd, min(st.st_size, max_bytes)), st.st_size
        finally:
            os.close(fd)

    def sha256(self, rel: str | os.PathLike[str], *, max_bytes: int) -> str:
        """SHA-256 (hex) of the regular file at ``rel``, streamed; refused above ``max_bytes``."""
        fd, st = self.open_file(rel, max_bytes=max_bytes)
        try:
            h = hashlib.sha256()
            _read_fd(fd, min(st.st_size, max_bytes), h.update)
            return h.hexdigest()
        finally:
            os.close(fd)

    def listdir(self, rel: str | os.PathLike[str] = "", *, max_entries: int = 10_000) -> list[Listed]:
        """The entries of the folder at ``rel``, sorted by name, links and special files included (never followed).

        At most ``max_entries`` are returned (the first the folder yields, then sorted); a folder that cannot be
        reached raises :class:`Refused`.
        """
        text = os.fspath(rel)
        dfd = self._open_dir(split_relative(text), text or ".")
        try:
            return _list_fd(dfd, max_entries)
        finally:
            os.close(dfd)

    def walk(
        self, rel: str | os.PathLike[str] = "", *, max_depth: int, max_entries: int
    ) -> Generator[Listing, None, None]:
        """The folders of the tree at ``rel`` one by one (depth first, children by name), each opened by descriptor.

        Each :class:`Listing` holds its folder's entries while it is being looked at (:meth:`Entry.open`,
        :meth:`Entry.sha256` work then, not later). A child folder at depth ``max_depth`` or deeper is not walked
        (its entry says ``too_deep``); after ``max_entries`` entries in all the walk stops, the last listing saying
        ``truncated``. At most one descriptor per level of the current path is open.
        """
        text = os.fspath(rel)
        top = self._open_dir(split_relative(text), text or ".")
        yield from _walk_fd(top, max_depth, max_entries)


def _open_leaf(
    dfd: int, name: str, rel: str, max_bytes: int | None, dir_parts: list[str]
) -> tuple[int, os.stat_result]:
    """Open the regular file ``name`` of the folder ``dfd``: looked at first, opened only if it is one, then checked."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        raise Refused(rel, MISSING, "not found") from None
    except OSError as exc:
        raise Refused(rel, UNREADABLE, f"cannot be read ({exc.strerror})") from None
    outward = None
    if stat.S_ISLNK(st.st_mode):
        try:
            outward = _link_outward(dir_parts, os.readlink(name, dir_fd=dfd))
        except OSError:
            outward = True
    _classify(rel, st, max_bytes, outward)
    try:
        if HAVE_OPENAT2:
            fd = openat2(dfd, name, FILE_FLAGS)
        else:
            fd = os.open(name, FILE_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
    except FileNotFoundError:
        raise Refused(rel, MISSING, "not found") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.EXDEV):
            raise Refused(rel, CHANGED, "became a symbolic link while it was opened (not followed)") from None
        raise Refused(rel, UNREADABLE, f"cannot be read ({exc.strerror})") from None
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            raise Refused(rel, CHANGED, "was replaced while it was opened (not read)")
        _classify(rel, st2, max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return fd, st2


def _list_fd(dfd: int, max_entries: int) -> list[Listed]:
    out: list[Listed] = []
    with os.scandir(dfd) as it:
        for entry in it:
            if len(out) >= max_entries:
                break
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            out.append(Listed(entry.name, kind_of_mode(st.st_mode), st.st_size, st.st_mode))
    return sorted(out, key=lambda e: e.name)


# ---------------------------------------------------------------------------------------------- the walk


@dataclass
class Entry:
    """One entry met by :meth:`Folder.walk`: ``rel`` (POSIX, from the walk's root), its own status, what it is.

    ``kind`` is ``file``, ``folder``, ``link``, ``special`` or ``unreadable`` (``error`` says why). A folder's
    ``too_deep`` says the walk will not enter it.
    """

    rel: str
    name: str
    kind: str
    st: os.stat_result | None
    error: str | None = None
    too_deep: bool = False
    #: Set it False while the listing is looked at, and the walk does not enter this folder.
    descend: bool = True
    _dir_fd: int = field(default=-1, repr=False)

    @property
    def dir_fd(self) -> int:
        """The descriptor of the entry's folder, open while its listing is looked at: a caller that changes the entry
        (its mode, its owner, its removal) does so relative to it, by :attr:`name`, never by a path."""
        return self._dir_fd

    def open(self, *, max_bytes: int | None) -> tuple[int, os.stat_result]:
        """(descriptor, fstat) of this regular file, checked to be the entry the walk saw; the caller closes it."""
        return _open_leaf(self._dir_fd, self.name, self.rel, max_bytes, [])

    def read_bytes(self, *, max_bytes: int) -> bytes:
        fd, st = self.open(max_bytes=max_bytes)
        try:
            return _read_fd(fd, min(st.st_size, max_bytes))
        finally:
            os.close(fd)

    def sha256(self, *, max_bytes: int) -> str:
        fd, st = self.open(max_bytes=max_bytes)
        try:
            h = hashlib.sha256()
            _read_fd(fd, min(st.st_size, max_bytes), h.update)
            return h.hexdigest()
        finally:
            os.close(fd)

    def link_target(self) -> str:
        """A link's target text (read, never followed)."""
        return os.readlink(self.name, dir_fd=self._dir_fd)

    def rewrite(self, data: bytes) -> None:
        """Put ``data`` in this file's place: a new file in the same folder, renamed over it, both by descriptor (its
        permission bits kept, owned by the harness)."""
        tmp = f".{self.name}.{os.getpid()}.rewrite"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | _O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=self._dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), stat.S_IMODE(self.st.st_mode) if self.st is not None else 0o644)
            os.replace(tmp, self.name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self._dir_fd)
            raise


@dataclass
class Listing:
    """One folder of a walk: ``rel`` ("" for the walk's root), its depth, its entries by name, or why it is unread."""

    rel: str
    depth: int
    entries: list[Entry]
    error: str | None = None
    truncated: bool = False


class _Held:
    """A folder's descriptor, kept open while children of it wait to be opened from it."""

    def __init__(self, fd: int) -> None:
        self.fd, self.waiting = fd, 0

    def release(self) -> None:
        self.waiting -= 1
        if self.waiting <= 0 and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _walk_fd(top: int, max_depth: int, max_entries: int) -> Generator[Listing, None, None]:
    # Stack items: (rel, depth, parent holding a descriptor or None for the top, name in the parent).
    stack: list[tuple[str, int, _Held | None, str]] = [("", 0, None, "")]
    seen = 0
    held: list[_Held] = []
    try:
        while stack:
            rel, depth, parent, name = stack.pop()
            if parent is None:
                fd, top = top, -1
            else:
                try:
                    fd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent.fd)
                except OSError as exc:
                    parent.release()
                    yield Listing(rel, depth, [], error=exc.strerror or type(exc).__name__)
                    continue
                parent.release()
            here = _Held(fd)
            held.append(here)
            entries: list[Entry] = []
            truncated = False
            try:
                with os.scandir(fd) as it:
                    raw: list[os.DirEntry[str]] = []
                    for d in it:
                        if seen + len(raw) >= max_entries:
                            truncated = True
                            break
                        raw.append(d)
                    raw.sort(key=lambda d: d.name)
                    for d in raw:
                        child = f"{rel}/{d.name}" if rel else d.name
                        try:
                            st = d.stat(follow_symlinks=False)
                        except OSError as exc:
                            entries.append(Entry(child, d.name, "unreadable", None, exc.strerror or type(exc).__name__))
                            continue
                        kind = kind_of_mode(st.st_mode)
                        entries.append(
                            Entry(child, d.name, kind, st, too_deep=kind == "folder" and depth + 1 >= max_depth)
                        )
            except OSError as exc:
                here.release()
                yield Listing(rel, depth, [], error=exc.strerror or type(exc).__name__)
                continue
            seen += len(entries)
            for e in entries:
                e._dir_fd = fd
            yield Listing(rel, depth, entries, truncated=truncated)
            if truncated:
                return
            subdirs = [e for e in entries if e.kind == "folder" and not e.too_deep and e.descend]
            here.waiting = len(subdirs)
            if not subdirs:
                here.waiting = 1
                here.release()
            for e in reversed(subdirs):
                stack.append((e.rel, depth + 1, here, e.name))
    finally:
        if top >= 0:
            os.close(top)
        for h in held:
            if h.fd >= 0:
                os.close(h.fd)
                h.fd = -1


# ---------------------------------------------------------------------------------------------- one-call helpers


def read_bytes(root: str | os.PathLike[str], rel: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """The bytes of ``root/rel`` read beneath ``root`` (:meth:`Folder.read_bytes`)."""
    with Folder(root) as folder:
        return folder.read_bytes(rel, max_bytes=max_bytes)


def relative_to(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str:
    """``path`` below ``root`` as a relative POSIX path, decided on the text alone (nothing resolved, no link followed).

    Raises :class:`Refused` (kind :data:`OUTSIDE`) when ``path`` is not lexically below ``root``.
    """
    p = posixpath.normpath(os.path.abspath(os.fspath(path)))
    r = posixpath.normpath(os.path.abspath(os.fspath(root)))
    if p == r:
        return ""
    if not p.startswith(r.rstrip("/") + "/"):
        raise Refused(os.fspath(path), OUTSIDE, f"lies outside {root}")
    return p[len(r.rstrip("/")) + 1 :]


# ---------------------------------------------------------------------------------------------- private copies

_COPIES_LOCK = threading.Lock()
_COPIES: dict[str, object] = {"root": None, "pid": None}
_SCOPE: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar("worker_files_scope", default=None)


def _remove_copies_root() -> None:
    root = _COPIES.get("root")
    if root is not None and _COPIES.get("pid") == os.getpid():
        shutil.rmtree(str(root), ignore_errors=True)


atexit.register(_remove_copies_root)


def copies_root() -> Path:
    """This process's folder of private copies (owner-only), made on first use and removed when the process exits."""
    with _COPIES_LOCK:
        if _COPIES["root"] is None or _COPIES["pid"] != os.getpid() or not Path(str(_COPIES["root"])).is_dir():
            _COPIES["root"] = Path(tempfile.mkdtemp(prefix="pilot-worker-copies-"))
            _COPIES["pid"] = os.getpid()
        return Path(str(_COPIES["root"]))


def is_private_copy(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a copy :func:`private_copy` made in this process (decided on the text: it made the path)."""
    root = _COPIES.get("root")
    if root is None or _COPIES.get("pid") != os.getpid():
        return False
    try:
        relative_to(path, str(root))
    except Refused:
        return False
    return True


@contextlib.contextmanager
def copies_scope() -> Iterator[None]:
    """Private copies made within this block are removed when the outermost such block ends."""
    if _SCOPE.get() is not None:
        yield
        return
    made: list[Path] = []
    token = _SCOPE.set(made)
    try:
        yield
    finally:
        _SCOPE.reset(token)
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def write_private(data: bytes, name: str) -> Path:
    """``data`` written as ``name`` in a fresh owner-only folder of :func:`copies_root`; the file's path."""
    base = posixpath.basename(name) or "file"
    folder = Path(tempfile.mkdtemp(dir=copies_root()))
    made = _SCOPE.get()
    if made is not None:
        made.append(folder)
    dest = folder / base
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | _O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return dest


def copy_out(
    folder: Folder, rel: str | os.PathLike[str], dst: str | os.PathLike[str], *, max_bytes: int, mode: int
) -> int:
    """Copy the regular file at ``rel`` beneath ``folder`` into the new file ``dst`` (of mode ``mode``, which must not
    exist) through the bounded reader; the bytes copied.

    ``rel`` is refused as :meth:`Folder.open_file` refuses it (a link, not a regular file, above ``max_bytes``); no
    more than the size it had when opened is copied. ``dst`` is created without following a link and removed again
    when the copy fails.
    """
    fd, st = folder.open_file(rel, max_bytes=max_bytes)
    try:
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | _O_CLOEXEC, mode)
        copied = 0
        try:

            def write(chunk: bytes) -> None:
                nonlocal copied
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
                copied += len(chunk)

            _read_fd(fd, min(st.st_size, max_bytes), write)
        except BaseException:
            os.close(out)
            with contextlib.suppress(OSError):
                os.unlink(dst)
            raise
        os.close(out)
        return copied
    finally:
        os.close(fd)


def private_copy(folder: Folder, rel: str | os.PathLike[str], *, max_bytes: int) -> tuple[Path, int]:
    """(path, size) of a copy of ``rel`` beneath ``folder``, read through the bounded reader, under its own name.

    A library that insists on a path (openpyxl, python-docx, pypdf, LibreOffice) is given this copy: it sits in a
    folder of the harness's own, so nothing the library opens can be redirected by the worker.
    """
    data = folder.read_bytes(rel, max_bytes=max_bytes)
    return write_private(data, os.fspath(rel)), len(data)
