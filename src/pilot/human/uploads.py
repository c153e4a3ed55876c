"""A participant's upload: checked on arrival by the oracle's own admission, then put where an agent's file would be.

A participant uploads each requested deliverable into its own slot. The
bytes are written into a staging folder of the session (never into
``outputs/`` first), and admitted by exactly the gates the oracle, the
judges' renderer and the A4 self-check apply to an agent's file
(:mod:`pilot.oracles.admission`: the bounded reader, the format screen, the
parse in a guarded child; a deck through the deck reader,
:func:`pilot.oracle_formats.pptx_reader.read_deck`). Only an admitted file
is moved into ``outputs/`` under the deliverable's name, replacing an earlier
upload of that slot; a refused one is deleted and its reason shown to the
participant, in the oracle's own words.

The name a file is saved under is the deliverable's: the participant's own
file name does not matter, only its suffix. A suffix other than the
requested one is accepted only for a text stand-in (``.csv``, ``.md``,
``.txt``), saved under the deliverable's base name as an agent's text
substitute is, and declared a substitution in the completion record; any
other suffix is refused with what to save instead.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pilot import worker_files
from pilot.oracles import admission, safety

#: Suffixes a participant may deliver in place of the requested format (a text stand-in, as A0's substitutes).
TEXT_STAND_INS = (".csv", ".md", ".txt")
#: What each requested kind is, for the participant's messages.
KIND_WORDS = {
    "xlsx": "an Excel workbook (.xlsx)",
    "docx": "a Word document (.docx)",
    "pdf": "a PDF document (.pdf)",
    "pptx": "a PowerPoint deck (.pptx)",
    "csv": "a CSV file (.csv)",
}
#: The most bytes one upload may hold: the largest file any reader of the harness admits.
MAX_UPLOAD_BYTES = safety.MAX_FILE_BYTES
_CHUNK = 1024 * 1024


class UploadRefused(ValueError):
    """An upload that is not taken; the message says why and what to do, in words for the participant."""


@dataclass(frozen=True)
class Accepted:
    """An admitted upload: its name in ``outputs/``, its size and digest, and whether it stands in."""

    requested: str
    saved_as: str
    size: int
    sha256: str
    substitute: bool


def saved_name(deliverable: Any, filename: str) -> str:
    """The name an upload for ``deliverable`` is saved under (its name, or its stem with a stand-in's suffix)."""
    wanted = Path(deliverable.name).suffix.lower()
    given = Path(filename or "").suffix.lower()
    if given == wanted:
        return str(deliverable.name)
    if given in TEXT_STAND_INS:
        return f"{Path(deliverable.name).stem}{given}"
    what = KIND_WORDS.get(deliverable.kind, f"a {wanted} file")
    sent = f"a {given} file" if given else "a file without a suffix"
    stand_ins = ", ".join(TEXT_STAND_INS)
    raise UploadRefused(
        f"This place is for {deliverable.name}, {what}; you sent {sent}. Save your work as {wanted} "
        f"(or, if you cannot, as a text file {stand_ins}, which counts as a substitute) and upload it again."
    )


def _write_stream(stream: IO[bytes], target: Path, limit: int) -> int:
    """Copy ``stream`` to a new file ``target`` (never opened through a link), refusing past ``limit`` bytes."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    total = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := stream.read(_CHUNK):
            total += len(chunk)
            if total > limit:
                raise UploadRefused(
                    f"The file is larger than {safety.human_size(limit)}, the most any deliverable may weigh; "
                    "make it smaller (fewer images, no embedded copies) and upload it again."
                )
            out.write(chunk)
    return total


def admission_reason(candidate: Path, staging: Path, kind: str) -> str | None:
    """Why the oracle would not read ``candidate`` (staged beneath ``staging``), or None: the oracle's own gates."""
    with worker_files.copies_scope():
        if kind == "pptx" and candidate.suffix.lower() == ".pptx":
            from pilot.oracle_formats.pptx_reader import read_deck

            return read_deck(candidate, staging)[1]
        verdict = admission.admit(candidate, staging, kind if candidate.suffix.lower() == f".{kind}" else None)
        if not verdict.ok:
            return verdict.reason
        if admission.kind_of(candidate) == "text":
            _, reason = admission.read_text(verdict)
            return reason
    return None


def receive(deliverable: Any, filename: str, stream: IO[bytes], session_dir: Path, outputs: Path) -> Accepted:
    """Stage, admit and save one upload for ``deliverable``; raises :class:`UploadRefused` with the reason.

    ``session_dir`` is the attempt's folder (the staging folder is made in it,
    outside the workspace); ``outputs`` is the workspace's ``outputs/``.
    """
    name = saved_name(deliverable, filename)
    staging = Path(session_dir) / "incoming" / secrets.token_hex(8)
    staging.mkdir(parents=True, mode=0o700)
    try:
        staged = staging / name
        size = _write_stream(stream, staged, MAX_UPLOAD_BYTES)
        if size == 0:
            raise UploadRefused(f"The file you sent for {deliverable.name} is empty (0 bytes); choose the saved file.")
        reason = admission_reason(staged, staging, deliverable.kind)
        if reason:
            raise UploadRefused(
                f"{reason}. The evaluator could not read this file; check it opens, save it again and upload it."
            )
        digest = hashlib.sha256()
        with open(staged, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
        Path(outputs).mkdir(exist_ok=True)
        # One saved file per deliverable: a stand-in replaces the requested format's file and the other way round.
        for old in Path(outputs).iterdir():
            if old.name != name and Path(old.name).stem == Path(deliverable.name).stem and old.is_file():
                old.unlink()
        os.replace(staged, Path(outputs) / name)
        return Accepted(str(deliverable.name), name, size, digest.hexdigest(), name != deliverable.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
