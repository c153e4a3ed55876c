"""The input-hash check: any change, deletion or addition under ``inputs/`` is critical.

``hash_inputs`` is taken when the workspace is laid out and again after the
run; ``compare_hashes`` names every file that differs. Symlinks are hashed
by their target text (never followed) and empty folders are recorded, so an
added link or folder counts as an addition.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

DIR_MARK = "<dir>"


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (hex), streamed by the standard library."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


#: Bounds on the tree walked under inputs/: a deeper or larger tree is itself a change.
MAX_DEPTH = 64
MAX_ENTRIES = 100_000
#: Hash values that are not a content hash: what compare_hashes says about them.
UNREADABLE = "unreadable:"
TOO_DEEP = "too-deep"
TOO_MANY = "too-many"


def hash_inputs(inputs_dir: Path) -> dict[str, str]:
    """Map each entry under ``inputs_dir`` (relative POSIX path) to a content hash.

    Never raises on what a worker may have made of the tree: the walk is
    iterative (a deep tree cannot exhaust the stack), bounded in depth and
    in entries, never follows a link and never opens a special file; an
    entry that cannot be read is recorded as unreadable, a folder below the
    depth bound or past the entry bound is recorded as such. Each of these
    differs from any hash taken at layout, so it is reported as a change.
    """
    root = Path(inputs_dir)
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel_dir, depth = stack.pop()
        here = root / rel_dir if rel_dir else root
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            out[rel_dir + "/"] = UNREADABLE + (exc.strerror or type(exc).__name__)
            continue
        if rel_dir and not entries:
            out[rel_dir + "/"] = DIR_MARK
        subdirs = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if len(out) >= MAX_ENTRIES:
                out[rel] = TOO_MANY
                stack.clear()
                break
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    out[rel] = "symlink:" + hashlib.sha256(os.fsencode(os.readlink(entry.path))).hexdigest()
                elif stat.S_ISDIR(st.st_mode):
                    if depth + 1 >= MAX_DEPTH:
                        out[rel + "/"] = TOO_DEEP
                    else:
                        subdirs.append(rel)
                elif stat.S_ISREG(st.st_mode):
                    out[rel] = file_digest(Path(entry.path))
                else:
                    out[rel] = "special:" + stat.filemode(st.st_mode)
            except OSError as exc:
                out[rel] = UNREADABLE + (exc.strerror or type(exc).__name__)
        stack.extend((d, depth + 1) for d in reversed(subdirs))
    return out


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
