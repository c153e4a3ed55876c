"""Reading a run's folders without trusting them.

Everything under an attempt folder was written by, or next to, an agent: a
deliverable may be a symbolic link to a file elsewhere, a name may try to
climb out of its folder, a transcript may be huge. The viewer reads only
regular files that resolve inside the attempt folder, lists deliverables
by scanning the folder (a download names an entry of that list, never a
path), and caps how much of any file it reads.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

#: Read at most this much of a text file the viewer shows (a brief, a self-check report).
MAX_TEXT_BYTES = 2_000_000


@dataclass(frozen=True)
class OutputFile:
    """One regular file in a run's ``outputs/`` folder, offered for download."""

    name: str
    path: Path
    size: int


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` resolves to a place inside ``root`` (symbolic links followed for the check only)."""
    try:
        return Path(path).resolve().is_relative_to(Path(root).resolve())
    except (OSError, RuntimeError):
        return False


def regular_file(path: Path, root: Path) -> bool:
    """A regular file, not a symbolic link, whose every part lies inside ``root``."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and inside(path, root)


def read_text(path: Path, root: Path, limit: int = MAX_TEXT_BYTES) -> str | None:
    """The text of a regular file inside ``root`` (cut at ``limit`` bytes); None if absent or refused."""
    if not regular_file(path, root):
        return None
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    text = data[:limit].decode("utf-8", errors="replace")
    return text + "\n[... cut: the file is longer]" if len(data) > limit else text


def output_files(outputs: Path, root: Path) -> list[OutputFile]:
    """The regular files directly in ``outputs`` (links, folders and anything outside ``root`` left out)."""
    if not outputs.is_dir() or outputs.is_symlink() or not inside(outputs, root):
        return []
    found = []
    with os.scandir(outputs) as entries:
        for e in entries:
            if e.is_file(follow_symlinks=False) and inside(Path(e.path), root):
                found.append(OutputFile(e.name, Path(e.path), e.stat(follow_symlinks=False).st_size))
    return sorted(found, key=lambda f: f.name)


def links_in(outputs: Path) -> list[str]:
    """Names of symbolic links in ``outputs`` (the viewer never follows them)."""
    if not outputs.is_dir() or outputs.is_symlink():
        return []
    with os.scandir(outputs) as entries:
        return sorted(e.name for e in entries if e.is_symlink())
