"""The input-hash check: any change, deletion or addition under ``inputs/`` is critical.

``hash_inputs`` is taken when the workspace is laid out and again after the
run; ``compare_hashes`` names every file that differs. Symlinks are hashed
by their target text (never followed) and empty folders are recorded, so an
added link or folder counts as an addition. The tree is read through the
harness's bounded reader (:mod:`pilot.worker_files`): walked by descriptor,
never following a link, never opening anything but a regular file, and
never reading a file larger than :data:`MAX_FILE_BYTES` or more than
:data:`MAX_TOTAL_BYTES` in all (such a file gets a value that says so, which
differs from any content hash: an input it replaced is a change).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from pilot import worker_files

DIR_MARK = "<dir>"


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (hex), streamed by the standard library."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


#: Bounds on the tree walked under inputs/: a deeper or larger tree is itself a change.
MAX_DEPTH = 64
MAX_ENTRIES = 100_000
#: The largest file whose bytes are hashed: the largest any reader of the harness admits (pilot.oracles.safety).
MAX_FILE_BYTES = 50 * 1024 * 1024
#: The most bytes one walk reads in all; files after that are recorded by size, unread.
MAX_TOTAL_BYTES = 512 * 1024 * 1024
#: Hash values that are not a content hash: what compare_hashes says about them.
UNREADABLE = "unreadable:"
TOO_DEEP = "too-deep"
TOO_MANY = "too-many"
OVERSIZE = "oversize:"
UNREAD = "unread:"


def hash_inputs(inputs_dir: Path) -> dict[str, str]:
    """Map each entry under ``inputs_dir`` (relative POSIX path) to a content hash.

    Never raises on what a worker may have made of the tree: the walk is by
    descriptor (a deep tree exhausts neither the stack nor ``PATH_MAX``),
    bounded in depth and in entries, never follows a link and never opens a
    special file; an entry that cannot be read is recorded as unreadable, a
    folder below the depth bound or past the entry bound is recorded as such,
    a file above :data:`MAX_FILE_BYTES` (a sparse one too) by its size alone,
    and so is every file once the walk has read :data:`MAX_TOTAL_BYTES`. Each
    of these differs from any hash taken at layout, so it is reported as a
    change. ``inputs_dir`` itself replaced by a link is recorded under ``""``.
    """
    root = Path(inputs_dir)
    out: dict[str, str] = {}
    try:
        folder = worker_files.Folder(root)
    except worker_files.Refused as exc:
        if exc.kind == worker_files.LINK:
            out[""] = "symlink:" + hashlib.sha256(os.fsencode(os.readlink(root))).hexdigest()
        elif exc.kind not in (worker_files.MISSING, worker_files.NOT_A_FOLDER):
            out[""] = UNREADABLE + exc.reason
        return out
    budget = MAX_TOTAL_BYTES
    with folder:
        walk = folder.walk(max_depth=MAX_DEPTH, max_entries=MAX_ENTRIES + 1)
        try:
            for listing in walk:
                rel_dir = listing.rel
                if listing.error is not None:
                    out[rel_dir + "/"] = UNREADABLE + listing.error
                    continue
                if rel_dir and not listing.entries:
                    out[rel_dir + "/"] = DIR_MARK
                for entry in listing.entries:
                    rel = entry.rel
                    if len(out) >= MAX_ENTRIES:
                        out[rel] = TOO_MANY
                        return out
                    if entry.kind == "unreadable" or entry.st is None:
                        out[rel] = UNREADABLE + (entry.error or "unknown")
                    elif entry.kind == "link":
                        try:
                            out[rel] = "symlink:" + hashlib.sha256(os.fsencode(entry.link_target())).hexdigest()
                        except OSError as exc:
                            out[rel] = UNREADABLE + (exc.strerror or type(exc).__name__)
                    elif entry.kind == "folder":
                        if entry.too_deep:
                            out[rel + "/"] = TOO_DEEP
                    elif entry.kind == "file":
                        size = entry.st.st_size
                        if size > MAX_FILE_BYTES:
                            out[rel] = f"{OVERSIZE}{size}"
                        elif size > budget:
                            out[rel] = f"{UNREAD}{size}"
                        else:
                            try:
                                out[rel] = file_digest_of(entry)
                                budget -= size
                            except worker_files.Refused as exc:
                                out[rel] = UNREADABLE + exc.reason
                            except OSError as exc:
                                out[rel] = UNREADABLE + (exc.strerror or type(exc).__name__)
                    else:
                        out[rel] = "special:" + stat.filemode(entry.st.st_mode)
                if listing.truncated and len(out) < MAX_ENTRIES:
                    out[(rel_dir + "/" if rel_dir else "") + "..."] = TOO_MANY
                    return out
        finally:
            walk.close()
    return out


def file_digest_of(entry: worker_files.Entry) -> str:
    """SHA-256 (hex) of a regular file met by the walk, read beneath its folder (at most :data:`MAX_FILE_BYTES`)."""
    return entry.sha256(max_bytes=MAX_FILE_BYTES)


def _what(value: str) -> str:
    if value.startswith(UNREADABLE):
        return f" (cannot be read: {value[len(UNREADABLE) :]})"
    if value == TOO_DEEP:
        return f" (a folder tree deeper than {MAX_DEPTH} levels; not read further)"
    if value == TOO_MANY:
        return f" (more than {MAX_ENTRIES} entries; not read further)"
    if value.startswith("special:"):
        return " (a pipe, socket or device, not a regular file)"
    if value.startswith("symlink:"):
        return " (a symbolic link)"
    if value.startswith(OVERSIZE):
        return (
            f" (a file of {value[len(OVERSIZE) :]} bytes, above the {MAX_FILE_BYTES} bytes any reader admits; not read)"
        )
    if value.startswith(UNREAD):
        return f" (a file of {value[len(UNREAD) :]} bytes, not read: the walk had read its {MAX_TOTAL_BYTES} bytes)"
    return ""


def compare_hashes(
    before: dict[str, str], after: dict[str, str], *, noun: str = "input", folder: str = "inputs/"
) -> list[str]:
    """Reasons, one per differing entry, naming the file (``noun`` and ``folder`` say what the tree is)."""
    reasons = []
    for name in sorted(set(before) | set(after)):
        if name not in after:
            reasons.append(f"{noun} deleted: {folder}{name}")
        elif name not in before:
            reasons.append(f"{noun} added: {folder}{name}{_what(after[name])}")
        elif before[name] != after[name]:
            reasons.append(f"{noun} modified: {folder}{name}{_what(after[name])}")
    return reasons
