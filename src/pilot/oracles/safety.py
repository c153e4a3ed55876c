"""Defences against hostile or broken deliverables.

Nothing a worker writes is opened before it has been screened here: it is
read beneath the workspace by the harness's bounded reader
(:mod:`pilot.worker_files`: no link followed, a regular file of bounded size,
copied into a folder of the harness's own before any library sees it), and
an office archive must be a real, unencrypted, macro-free Office Open XML
zip whose declared uncompressed size is bounded (zip bombs). Each
check returns a reason a person can act on instead of raising, so a hostile
file becomes a failed criterion and never a crash or a hang.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pilot import worker_files

MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_UNCOMPRESSED_BYTES = 32 * 1024 * 1024
MAX_ZIP_ENTRIES = 5000
MAX_RATIO = 200.0
MAX_PDF_BYTES = 25 * 1024 * 1024

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ZIP_MAGIC = b"PK\x03\x04"

MAIN_PART = {".xlsx": "xl/workbook.xml", ".docx": "word/document.xml", ".pptx": "ppt/presentation.xml"}
PART_KIND = {
    "xl/workbook.xml": "an Excel workbook",
    "word/document.xml": "a Word document",
    "ppt/presentation.xml": "a PowerPoint deck",
}


def human_size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


@dataclass(frozen=True)
class Screened:
    """Result of screening one path: ``path`` is usable when ``reason`` is None."""

    path: Path
    size: int
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def screen_path(candidate: Path, workspace: Path, *, max_bytes: int = MAX_FILE_BYTES) -> Screened:
    """Read ``candidate`` beneath ``workspace`` through the bounded reader; its ``path`` is a private copy of the bytes.

    The file must be a regular, non-empty file of at most ``max_bytes`` reached
    from the workspace without following any link (:mod:`pilot.worker_files`:
    ``openat2`` beneath the workspace, no symbolic or magic link, nothing but a
    regular file opened, the size bounded before a byte is read). What is read
    is copied into a folder of the harness's own, and every later reader
    (the format screens, the guarded parse, openpyxl, python-docx, pypdf,
    LibreOffice) opens that copy, never a path the worker could redirect. A
    candidate that is already such a copy is taken as it is.
    """
    name = candidate.name
    if worker_files.is_private_copy(candidate):
        try:
            st = os.lstat(candidate)
        except OSError as exc:
            return Screened(candidate, 0, f"{name} cannot be read ({exc.strerror})")
        if not stat.S_ISREG(st.st_mode):
            return Screened(candidate, 0, f"{name} is not a regular file (pipe, socket or device)")
        if st.st_size == 0:
            return Screened(candidate, 0, f"{name} is empty (0 bytes)")
        return Screened(candidate, st.st_size, None)
    try:
        rel = worker_files.relative_to(candidate, workspace)
        with worker_files.Folder(workspace) as folder:
            copy, size = worker_files.private_copy(folder, rel, max_bytes=max_bytes)
    except worker_files.Refused as exc:
        return Screened(candidate, exc.size or 0, refusal_reason(name, exc, max_bytes))
    if size == 0:
        return Screened(copy, 0, f"{name} is empty (0 bytes)")
    return Screened(copy, size, None)


def refusal_reason(name: str, exc: worker_files.Refused, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The reason a deliverable the bounded reader refused is not read, in the oracle's words."""
    if exc.kind in (worker_files.MISSING, worker_files.NOT_A_FOLDER):
        return f"{name} not found" if exc.kind == worker_files.MISSING else f"{name} {exc.reason}"
    if exc.kind == worker_files.LINK:
        if exc.reason.startswith("lies below"):
            where = "outside the workspace" if exc.outward else "below a link"
            return f"{name} lies {where} through a linked folder (links are not followed)"
        if exc.outward:
            return f"{name} is a symlink pointing outside the workspace (links are not followed)"
        return f"{name} is a symlink (links are not followed, even inside the workspace)"
    if exc.kind == worker_files.FOLDER:
        return f"{name} is a folder"
    if exc.kind == worker_files.SPECIAL:
        return f"{name} is not a regular file (pipe, socket or device)"
    if exc.kind == worker_files.TOO_LARGE:
        return f"{name} is {human_size(exc.size or 0)}, above the {human_size(max_bytes)} limit for a deliverable"
    if exc.kind == worker_files.OUTSIDE:
        return f"{name} lies outside the workspace"
    return f"{name} {exc.reason}"


def read_head(path: Path, n: int = 1024) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


def screen_ooxml(path: Path, suffix: str | None = None) -> str | None:
    """Return why ``path`` is not a safe Office Open XML archive of its kind, or None."""
    suffix = (suffix or path.suffix).lower()
    name = path.name
    head = read_head(path, 8)
    if head.startswith(OLE_MAGIC):
        return (
            f"{name} is an OLE compound file, not an Office Open XML archive: "
            "a password-protected (encrypted) Office file or a legacy .xls/.doc saved under a new extension"
        )
    if not head.startswith(ZIP_MAGIC):
        if head.startswith(b"%PDF"):
            return f"{name} is a PDF saved with the extension {suffix}"
        return f"{name} is not a zip archive (starts with {head[:8]!r}); an {suffix} file is a zip of XML parts"
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return f"{name} is a corrupt or truncated zip archive ({exc})"
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_ENTRIES:
            return f"{name} holds {len(infos)} archive entries, above the limit of {MAX_ZIP_ENTRIES}"
        total = 0
        names = set()
        for info in infos:
            names.add(info.filename)
            if info.flag_bits & 0x1:
                return f"{name} has encrypted archive entries ({info.filename})"
            total += info.file_size
            if info.file_size > 1_000_000 and info.compress_size and info.file_size / info.compress_size > MAX_RATIO:
                return (
                    f"{name} looks like a zip bomb: entry {info.filename} expands "
                    f"{info.file_size / max(info.compress_size, 1):.0f}-fold to "
                    f"{human_size(info.file_size)}"
                )
        if total > MAX_UNCOMPRESSED_BYTES:
            return (
                f"{name} expands to {human_size(total)}, above the {human_size(MAX_UNCOMPRESSED_BYTES)} limit "
                "(zip bomb?)"
            )
        if "[Content_Types].xml" not in names:
            return f"{name} is a zip archive but not an Office file (no [Content_Types].xml)"
        lowered = {n.lower() for n in names}
        if any(n.endswith("vbaproject.bin") for n in lowered):
            return f"{name} contains VBA macros (vbaProject.bin): a macro-enabled file saved as {suffix}"
        try:
            ctypes = zf.read("[Content_Types].xml")
        except Exception as exc:  # noqa: BLE001 - a damaged entry is a finding, not a crash
            return f"{name}: [Content_Types].xml cannot be read ({exc})"
        if b"macroEnabled" in ctypes:
            return f"{name} declares a macro-enabled content type: a macro-enabled file saved as {suffix}"
        want = MAIN_PART.get(suffix)
        if want and want not in names:
            found = next((PART_KIND[p] for p in PART_KIND if p in names), "some other Office file")
            return f"{name} has the extension {suffix} but is {found} (no {want})"
        bad = _first_bad_entry(zf)
        if bad:
            return f"{name} is damaged: {bad}"
    return None


def _first_bad_entry(zf: zipfile.ZipFile) -> str | None:
    try:
        bad = zf.testzip()
    except Exception as exc:  # noqa: BLE001
        return f"archive cannot be read ({exc})"
    return f"entry {bad} fails its checksum" if bad else None


def screen_pdf(path: Path) -> str | None:
    head = read_head(path, 1024)
    name = path.name
    if head.startswith(ZIP_MAGIC):
        return f"{name} is a zip archive (an Office file?) saved with the extension .pdf"
    if b"%PDF-" not in head:
        return f"{name} is not a PDF (no %PDF- header)"
    if path.stat().st_size > MAX_PDF_BYTES:
        return f"{name} is {human_size(path.stat().st_size)}, above the PDF limit of {human_size(MAX_PDF_BYTES)}"
    return None


def decode_utf8(path: Path) -> tuple[str | None, str | None]:
    """Return (text, None) or (None, reason) for a text deliverable."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, f"{path.name} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
