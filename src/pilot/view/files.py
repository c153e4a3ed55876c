"""Reading a run's folders without trusting them.

Everything under an attempt folder was written by, or next to, an agent: a
deliverable may be a symbolic link to a file elsewhere, a pipe, a sparse
file of terabytes, a name may try to climb out of its folder, a transcript
may be huge. The viewer (and the grading site) read it only through the
harness's bounded reader (:mod:`pilot.worker_files`): a file is opened
beneath the folder that holds it, no link is followed, nothing but a
regular file is opened, and no more than a bound is read. Deliverables are
listed by descriptor (a download names an entry of that list, never a
path) and served from the bytes so read, never from a path a server opens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pilot import worker_files

#: Read at most this much of a text file the viewer shows (a brief, a self-check report).
MAX_TEXT_BYTES = 2_000_000
#: The largest delivered file offered for download (the oracle's limit for a deliverable).
MAX_DOWNLOAD_BYTES = 50 * 1024 * 1024
#: The most entries of an outputs folder listed.
MAX_LISTED = 10_000


@dataclass(frozen=True)
class OutputFile:
    """One regular file in a run's ``outputs/`` folder, offered for download.

    ``path`` says where it is (shown, never opened); its bytes are read beneath ``base`` (the workspace) at ``rel``
    by :meth:`read_bytes`.
    """

    name: str
    path: Path
    size: int
    base: Path
    rel: str

    def read_bytes(self) -> bytes:
        """The file's bytes, read through the bounded reader (:class:`pilot.worker_files.Refused` if it changed)."""
        return worker_files.read_bytes(self.base, self.rel, max_bytes=MAX_DOWNLOAD_BYTES)

    def private_copy(self) -> Path:
        """A copy of the file in a folder of the harness's own, under its name (for a program that wants a path)."""
        return worker_files.write_private(self.read_bytes(), self.name)


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` resolves to a place inside ``root`` (symbolic links followed for the check only)."""
    try:
        return Path(path).resolve().is_relative_to(Path(root).resolve())
    except (OSError, RuntimeError):
        return False


def regular_file(path: Path, root: Path) -> bool:
    """A regular file, not a symbolic link, in a folder inside ``root``, looked at without following anything."""
    path = Path(path)
    if not inside(path.parent, root):
        return False
    try:
        with worker_files.Folder(path.parent) as folder:
            return worker_files.kind_of_mode(folder.lstat(path.name).st_mode) == "file"
    except worker_files.Refused:
        return False


def read_text(path: Path, root: Path, limit: int = MAX_TEXT_BYTES) -> str | None:
    """The text of a regular file in a folder inside ``root`` (cut at ``limit`` bytes); None if absent or refused.

    Read beneath the folder that holds it (:mod:`pilot.worker_files`): a link, a pipe or a device is refused
    unopened, and no more than ``limit`` bytes are read whatever the file's size.
    """
    path = Path(path)
    if not inside(path.parent, root):
        return None
    try:
        with worker_files.Folder(path.parent) as folder:
            data, size = folder.read_prefix(path.name, max_bytes=limit)
    except worker_files.Refused:
        return None
    text = data.decode("utf-8", errors="replace")
    return text + "\n[... cut: the file is longer]" if size > limit else text


def _listed(outputs: Path, root: Path) -> list[worker_files.Listed]:
    outputs = Path(outputs)
    if not inside(outputs.parent, root):
        return []
    try:
        with worker_files.Folder(outputs.parent) as folder:
            return folder.listdir(outputs.name, max_entries=MAX_LISTED)
    except worker_files.Refused:
        return []


def output_files(outputs: Path, root: Path) -> list[OutputFile]:
    """The regular files directly in ``outputs`` (links, folders, special files and anything outside ``root`` left
    out), listed beneath the workspace without following a link."""
    outputs = Path(outputs)
    return [
        OutputFile(e.name, outputs / e.name, e.size, outputs.parent, f"{outputs.name}/{e.name}")
        for e in _listed(outputs, root)
        if e.kind == "file"
    ]


def links_in(outputs: Path, root: Path | None = None) -> list[str]:
    """Names of symbolic links in ``outputs`` (the viewer never follows them)."""
    outputs = Path(outputs)
    return [e.name for e in _listed(outputs, root if root is not None else outputs.parent) if e.kind == "link"]
