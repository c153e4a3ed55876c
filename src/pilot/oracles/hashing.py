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


def hash_inputs(inputs_dir: Path) -> dict[str, str]:
    """Map each entry under ``inputs_dir`` (relative POSIX path) to a content hash."""
    root = Path(inputs_dir)
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir != Path(".") and not dirnames and not filenames:
            out[rel_dir.as_posix() + "/"] = DIR_MARK
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            rel = (rel_dir / name).as_posix()
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "symlink:" + hashlib.sha256(os.readlink(p).encode()).hexdigest()
            elif stat.S_ISREG(st.st_mode):
                out[rel] = file_digest(p)
            else:
                out[rel] = "special:" + stat.filemode(st.st_mode)
    return out


def compare_hashes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Reasons, one per differing input, naming the file."""
    reasons = []
    for name in sorted(set(before) | set(after)):
        if name not in after:
            reasons.append(f"input deleted: inputs/{name}")
        elif name not in before:
            reasons.append(f"input added: inputs/{name}")
        elif before[name] != after[name]:
            reasons.append(f"input modified: inputs/{name}")
    return reasons
