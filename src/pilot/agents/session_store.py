"""The CLI's session store between the first session and the A4 resume: sealed, checked, lent back.

The store is the CLI's config folder (``CLAUDE_CONFIG_DIR``, shown at
:data:`pilot.agents.launch.INSIDE_CONFIG`): the transcript a resume continues
and the tool results it refers to. The worker's shell cannot write it
(Landlock) and the CLI's file tools may not (:data:`pilot.agents.launch.STORE_RULES`),
but Landlock does not cover a file's metadata: from the shell, ``chmod``,
``utime`` and ``setxattr`` on the store succeed while the worker owns its
files (a ``chmod 000`` would leave the resume nothing to read, an old
modification time would have the CLI's start-up clean-up delete it). So:

* :func:`seal`, when the first session has ended and the harness has taken
  its files back: what the kernel could not stop is undone and recorded
  (entries that are neither files nor folders removed, modes and times put
  back within the CLI's own, extended attributes removed, the shell
  snapshots the worker's shell wrote emptied), then every entry's metadata
  and content digest is recorded (:class:`Seal`);
* :func:`check`, just before the resume: the store must be what was sealed.
  An entry added, removed, of another kind or with other content refuses
  the resume (the reason goes on the run as ``recovery_skipped``); a change
  of metadata alone is restored and recorded;
* :func:`lend`, for the resume itself when the harness runs the sandbox as a
  dedicated user: the sealed entries stay the harness's, readable and
  writable to the worker's group, so the kernel refuses ``chmod``,
  ``chown`` and an explicit ``utime`` on them from the worker's shell
  (the owner or a capability is needed, and the worker has neither).

Every walk is the harness's one walk by file descriptor
(:meth:`pilot.worker_files.Folder.walk`): it never follows a link, reads at
most :data:`MAX_HASHED_BYTES` in all, and refuses a store deeper than
:data:`MAX_DEPTH` folders or larger than :data:`MAX_ENTRIES` entries (far
beyond what the CLI makes). Entries are removed and their modes changed by
descriptor too (:func:`pilot.agents.takeback.remove_tree`,
:func:`pilot.agents.takeback.chmod_entry`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from pilot import worker_files
from pilot.agents.takeback import chmod_entry, remove_tree

#: The folder of the store the worker's shell writes by design (the CLI's shell snapshots); emptied at the seal.
SHELL_SNAPSHOTS = "shell-snapshots"
#: How much of the store's content the harness hashes in all; past it an entry is recorded without a digest,
#: and any later change of it refuses the resume (it cannot be told to be metadata alone).
MAX_HASHED_BYTES = 1 << 30
#: Slack around the first session's window for the times the CLI gave its files (clock granularity).
TIME_SLACK_NS = 2_000_000_000
#: The deepest and the largest store a walk reads; a store past either is refused (the CLI makes a few levels).
MAX_DEPTH = 64
MAX_ENTRIES = 100_000
#: Mode bits no store entry keeps: set-id, sticky, and writable by group or others.
_STRIPPED = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class StoreRefused(Exception):
    """The store is not what the first session left: the resume is refused, the message says why."""


@dataclass(frozen=True)
class Entry:
    """One entry of the store as the seal recorded it."""

    kind: str  # "dir" or "file"
    ino: int
    mode: int
    uid: int
    gid: int
    size: int
    atime_ns: int  # recorded, never compared: reads change it
    mtime_ns: int
    xattrs: tuple[str, ...] = ()
    digest: str | None = None  # files: sha256 of the content, None past MAX_HASHED_BYTES


@dataclass
class Seal:
    """The store when the first session ended (after the harness restored what the kernel could not stop)."""

    entries: dict[str, Entry]
    sealed_at: float
    restored: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sealed_at": self.sealed_at,
            "restored": list(self.restored),
            "entries": {k: asdict(v) for k, v in sorted(self.entries.items())},
        }


@dataclass
class Check:
    """What the check before the resume found: the metadata it restored, or the reason the resume is refused."""

    restored: list[str] = field(default_factory=list)
    refusal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"restored": list(self.restored), "refusal": self.refusal}


def _st(entry: worker_files.Entry) -> os.stat_result:
    assert entry.st is not None  # _walk refuses an entry whose status it could not read
    return entry.st


def _kind(st: os.stat_result) -> str | None:
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return None


def _xattrs(fd: int) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listxattr(fd)))
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return ()
        raise


def _digest(fd: int, size: int, budget: list[int]) -> str | None:
    if size > budget[0]:
        budget[0] = 0
        return None
    h = hashlib.sha256()
    read = 0
    while chunk := os.read(fd, 1 << 20):
        read += len(chunk)
        if read > size:  # grew while read: the size recorded would not be its size
            break
        h.update(chunk)
    budget[0] -= read
    return h.hexdigest()


def _walk(root: str) -> Iterator[worker_files.Entry]:
    """Every entry below ``root``, parents first, by descriptor, no link followed
    (:meth:`pilot.worker_files.Folder.walk`).

    The caller may change an entry (its mode, say) before the walk lists what a folder holds; one that removes a
    folder sets its ``descend`` to False. What cannot be read raises :class:`OSError`; a store past the walk's
    bounds, :class:`StoreRefused`.
    """
    try:
        folder = worker_files.Folder(root)
    except worker_files.Refused as exc:
        raise OSError(errno.ENOENT if exc.kind == worker_files.MISSING else errno.EIO, str(exc)) from None
    with folder:
        for listing in folder.walk(max_depth=MAX_DEPTH, max_entries=MAX_ENTRIES):
            if listing.error:
                raise OSError(errno.EIO, f"{listing.rel or 'the session store'} cannot be listed ({listing.error})")
            for entry in listing.entries:
                if entry.st is None:
                    raise OSError(errno.EIO, f"{entry.rel} cannot be read ({entry.error})")
                if entry.too_deep:
                    raise StoreRefused(f"{entry.rel} lies deeper than {MAX_DEPTH} folders")
                yield entry
            if listing.truncated:
                raise StoreRefused(f"the session store holds more than {MAX_ENTRIES} entries")


def _open_entry(dfd: int, name: str, kind: str) -> int:
    flags = _READ | (os.O_DIRECTORY if kind == "dir" else 0)
    return os.open(name, flags, dir_fd=dfd)


def _record(dfd: int, name: str, st: os.stat_result, kind: str, budget: list[int]) -> Entry:
    fd = _open_entry(dfd, name, kind)
    try:
        now = os.fstat(fd)
        if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
            raise StoreRefused(f"{name} was replaced while the store was read")
        digest = _digest(fd, now.st_size, budget) if kind == "file" else None
        return Entry(
            kind,
            now.st_ino,
            stat.S_IMODE(now.st_mode),
            now.st_uid,
            now.st_gid,
            now.st_size if kind == "file" else 0,
            now.st_atime_ns,
            now.st_mtime_ns,
            _xattrs(fd),
            digest,
        )
    finally:
        os.close(fd)


def _canonical_mode(mode: int, kind: str) -> int:
    mode = stat.S_IMODE(mode) & ~_STRIPPED
    return mode | (0o700 if kind == "dir" else 0o600)


def _strip_xattrs(dfd: int, name: str, kind: str, names: tuple[str, ...]) -> None:
    fd = _open_entry(dfd, name, kind)
    try:
        for attr in names:
            os.removexattr(fd, attr)
    finally:
        os.close(fd)


def seal(root: os.PathLike[str] | str, *, started_ns: int, ended_ns: int | None = None) -> Seal:
    """Undo what the kernel could not stop during the first session, then record the store (see the module).

    ``started_ns`` is when the store was laid out (the earliest time the CLI
    can have given a file); ``ended_ns`` when the first session ended. A time
    outside that window is put back to ``ended_ns``.
    """
    root = os.fspath(root)
    ended_ns = time.time_ns() if ended_ns is None else ended_ns
    low, high = started_ns - TIME_SLACK_NS, ended_ns + TIME_SLACK_NS
    restored: list[str] = []
    budget = [MAX_HASHED_BYTES]
    entries: dict[str, Entry] = {}
    refusals: list[str] = []
    for e in _walk(root):
        path, dfd, name, st = e.rel, e.dir_fd, e.name, _st(e)
        kind = _kind(st)
        top = path.split("/", 1)[0]
        if kind is None:
            remove_tree(name, dfd)
            restored.append(f"{path}: removed (not a file or folder: mode {stat.filemode(st.st_mode)})")
            continue
        if top == SHELL_SNAPSHOTS and path != SHELL_SNAPSHOTS:
            # Written by the worker's shell by design; the resumed CLI makes a snapshot of its own.
            e.descend = False
            remove_tree(name, dfd)
            restored.append(f"{path}: removed (a shell snapshot)")
            continue
        if kind == "file" and st.st_nlink > 1:
            refusals.append(f"{path} has {st.st_nlink} links")
            continue
        mode = _canonical_mode(st.st_mode, kind)
        if mode != stat.S_IMODE(st.st_mode):
            chmod_entry(name, dfd, mode)
            restored.append(f"{path}: mode {stat.S_IMODE(st.st_mode):04o} -> {mode:04o}")
        if not low <= st.st_mtime_ns <= high:
            os.utime(name, ns=(ended_ns, ended_ns), dir_fd=dfd, follow_symlinks=False)
            restored.append(f"{path}: modification time outside the first session's window put back to its end")
        entry = _record(dfd, name, os.stat(name, dir_fd=dfd, follow_symlinks=False), kind, budget)
        if entry.xattrs:
            user = tuple(a for a in entry.xattrs if a.startswith("user."))
            _strip_xattrs(dfd, name, kind, user)
            restored.append(f"{path}: extended attributes {', '.join(entry.xattrs)} removed")
            entry = _record(dfd, name, os.stat(name, dir_fd=dfd, follow_symlinks=False), kind, budget)
            if entry.xattrs:
                refusals.append(f"{path} keeps extended attributes {', '.join(entry.xattrs)}")
        entries[path] = entry
    if refusals:
        raise StoreRefused("the session store holds what the CLI never makes: " + "; ".join(refusals[:5]))
    return Seal(entries, time.time(), restored)


def check(root: os.PathLike[str] | str, sealed: Seal) -> Check:
    """Compare the store with ``sealed`` before the resume: restore metadata, refuse any other change."""
    root = os.fspath(root)
    out = Check()
    seen: set[str] = set()
    changed: list[str] = []
    budget = [MAX_HASHED_BYTES]
    for e in _walk(root):
        path, dfd, name, st = e.rel, e.dir_fd, e.name, _st(e)
        seen.add(path)
        want = sealed.entries.get(path)
        kind = _kind(st)
        if want is None:
            changed.append(f"{path} was added")
            continue
        if kind != want.kind or st.st_ino != want.ino:
            changed.append(f"{path} was replaced")
            continue
        if kind == "dir" and stat.S_IMODE(st.st_mode) != want.mode:
            # Restored first: the walk descends into it next.
            chmod_entry(name, dfd, want.mode)
            out.restored.append(f"{path}: mode {stat.S_IMODE(st.st_mode):04o} -> {want.mode:04o}")
        if kind == "file" and stat.S_IMODE(st.st_mode) & 0o400 == 0:
            chmod_entry(name, dfd, want.mode)
            out.restored.append(f"{path}: mode {stat.S_IMODE(st.st_mode):04o} -> {want.mode:04o}")
        now = _record(dfd, name, os.stat(name, dir_fd=dfd, follow_symlinks=False), kind, budget)
        if kind == "file" and (now.size != want.size or now.digest is None or now.digest != want.digest):
            changed.append(f"{path} has other content")
            continue
        _restore(dfd, name, path, now, want, out.restored)
    removed = sorted(set(sealed.entries) - seen)
    changed += [f"{p} was removed" for p in removed[:5]]
    if changed:
        out.refusal = (
            f"the session store changed after the first session ended ({len(changed)} "
            f"{'entry' if len(changed) == 1 else 'entries'}: {'; '.join(changed[:5])}); "
            "the resume would read a store the worker could have changed"
        )
    return out


def _restore(dfd: int, name: str, path: str, now: Entry, want: Entry, restored: list[str]) -> None:
    if now.mode != want.mode:
        chmod_entry(name, dfd, want.mode)
        restored.append(f"{path}: mode {now.mode:04o} -> {want.mode:04o}")
    if (now.uid, now.gid) != (want.uid, want.gid):
        os.chown(name, want.uid, want.gid, dir_fd=dfd, follow_symlinks=False)
        restored.append(f"{path}: owner {now.uid}:{now.gid} -> {want.uid}:{want.gid}")
    extra = tuple(a for a in now.xattrs if a not in want.xattrs)
    if extra:
        _strip_xattrs(dfd, name, now.kind, extra)
        restored.append(f"{path}: extended attributes {', '.join(extra)} removed")
    # The access time is left alone: the harness's own reads change it, and nothing the CLI does depends on it.
    if now.mtime_ns != want.mtime_ns and now.kind == "file":
        os.utime(name, ns=(now.atime_ns, want.mtime_ns), dir_fd=dfd, follow_symlinks=False)
        restored.append(f"{path}: modification time put back")


def lend(root: os.PathLike[str] | str, *, worker_uid: int, worker_gid: int, owner_uid: int) -> int:
    """For the resume under a dedicated worker user: the sealed entries stay the harness's, open to the worker's group.

    Folders get the group's read, write and search bits, files its read and
    write bits (the CLI appends to the transcript it resumes and writes new
    files beside it); the owner stays ``owner_uid``, so the worker's shell can
    change no mode, owner or time of them. The shell snapshots folder alone is
    the worker's (its shell writes there). Returns how many entries were lent.
    """
    root = os.fspath(root)
    n = 0
    os.chown(root, owner_uid, worker_gid, follow_symlinks=False)
    os.chmod(root, (stat.S_IMODE(os.stat(root, follow_symlinks=False).st_mode) | 0o770) & ~0o7007)
    for e in _walk(root):
        path, dfd, name, st = e.rel, e.dir_fd, e.name, _st(e)
        kind = _kind(st)
        if kind is None:
            continue
        if path.split("/", 1)[0] == SHELL_SNAPSHOTS:
            os.chown(name, worker_uid, worker_gid, dir_fd=dfd, follow_symlinks=False)
            continue
        os.chown(name, owner_uid, worker_gid, dir_fd=dfd, follow_symlinks=False)
        group = 0o070 if kind == "dir" else 0o060
        chmod_entry(name, dfd, (stat.S_IMODE(st.st_mode) | group) & ~0o7007)
        n += 1
    return n


def reclaim(root: os.PathLike[str] | str, *, worker_gid: int, owner_uid: int, owner_gid: int) -> None:
    """After the resume: what :func:`lend` opened to the worker's group is the harness's alone again."""
    root = os.fspath(root)
    st = os.stat(root, follow_symlinks=False)
    if st.st_uid == owner_uid and st.st_gid == worker_gid:
        os.chown(root, owner_uid, owner_gid, follow_symlinks=False)
        os.chmod(root, stat.S_IMODE(st.st_mode) & ~0o7077)
    for e in _walk(root):
        dfd, name, st = e.dir_fd, e.name, _st(e)
        if _kind(st) is not None and st.st_uid == owner_uid and st.st_gid == worker_gid:
            os.chown(name, owner_uid, owner_gid, dir_fd=dfd, follow_symlinks=False)
            chmod_entry(name, dfd, stat.S_IMODE(st.st_mode) & ~0o7077)
