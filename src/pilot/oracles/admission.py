"""The one guarded reader: whether a delivered file may be opened at all, and why not.

The oracle, the judge renderer and the A4 self-check all ask this module
before any library touches a file a worker wrote. Admission is three gates,
each returning a reason a person can act on:

1. the path (:func:`pilot.oracles.safety.screen_path`): it is read beneath
   the workspace by the bounded reader (:mod:`pilot.worker_files`), a
   regular, non-empty file of bounded size reached through no link (no pipe,
   socket or device is opened), and copied into a folder of the harness's own;
2. the format (:func:`screen_format`): an Office file is a real,
   unencrypted, macro-free Office Open XML archive whose expansion is
   bounded, a PDF has a PDF header and a bounded size, a text file is UTF-8;
3. the parse (:mod:`pilot.oracles.guard`): an office file or PDF is parsed
   first in a child process under a time and a memory limit.

Only an admitted file is parsed in the calling process, and only from its
private copy. Every caller gets the same verdict for
the same file, so the judges see exactly what the oracle accepted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pilot import worker_files
from pilot.oracles import guard, safety

#: File kinds by suffix, as the three readers understand them.
KIND_BY_SUFFIX = {
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".docx": "docx",
    ".pdf": "pdf",
    ".csv": "text",
    ".tsv": "text",
    ".md": "text",
    ".markdown": "text",
    ".txt": "text",
    ".text": "text",
    ".json": "text",
    ".html": "text",
    ".htm": "text",
    ".xml": "text",
    ".yaml": "text",
    ".yml": "text",
    ".rst": "text",
}
#: Kinds a library parses (and so the guard child parses first).
PARSED_KINDS = ("xlsx", "docx", "pdf")


def output_names(outputs: Path) -> list[str]:
    """The names in ``outputs/`` (links and special files included), sorted, listed beneath the workspace without
    following a link (:mod:`pilot.worker_files`); none when ``outputs`` is not a folder of the workspace."""
    try:
        with worker_files.Folder(Path(outputs).parent) as folder:
            return [e.name for e in folder.listdir(Path(outputs).name)]
    except worker_files.Refused:
        return []


def kind_of(path: Path, kind: str | None = None) -> str:
    """The admission kind of a file: the deliverable kind when given, else from the suffix."""
    if kind in ("xlsx", "docx", "pdf"):
        return kind
    if kind in ("csv", "completion_record"):
        return "text"
    return KIND_BY_SUFFIX.get(Path(path).suffix.lower(), "other")


@dataclass(frozen=True)
class Admission:
    """The verdict on one delivered file: ``path`` (inside the workspace) is usable when ``reason`` is None."""

    name: str
    path: Path | None
    reason: str | None

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def refusal(self) -> str:
        """How the judges are told about a refused file."""
        return f"refused: {self.reason}"


def screen_format(path: Path, kind: str) -> str | None:
    """Why a screened file is not a safe file of its kind (no library opens it here), or None."""
    if kind == "xlsx":
        return safety.screen_ooxml(path, ".xlsx" if path.suffix.lower() != ".xlsm" else ".xlsm")
    if kind == "docx":
        return safety.screen_ooxml(path, ".docx")
    if kind == "pdf":
        return safety.screen_pdf(path)
    return None


def screen(candidate: Path, workspace: Path, kind: str | None = None) -> Admission:
    """Gates 1 and 2: the path and the format, without parsing."""
    candidate = Path(candidate)
    screened = safety.screen_path(candidate, workspace)
    if not screened.ok:
        return Admission(candidate.name, None, screened.reason)
    reason = screen_format(screened.path, kind_of(candidate, kind))
    if reason:
        return Admission(candidate.name, None, reason)
    return Admission(candidate.name, screened.path, None)


def admit_many(
    candidates: Iterable[tuple[Path, str | None]],
    workspace: Path,
    *,
    guard_limits: dict | None = None,
) -> list[Admission]:
    """All three gates for many files; the office files share one guarded child process."""
    items = [(Path(p), k) for p, k in candidates]
    screened = [screen(p, workspace, k) for p, k in items]
    to_parse = [a.path for a, (p, k) in zip(screened, items, strict=True) if a.ok and kind_of(p, k) in PARSED_KINDS]
    verdicts = guard.probe_cached(to_parse, **(guard_limits or {})) if to_parse else {}
    out = []
    for a in screened:
        verdict = verdicts.get(a.path) if a.ok else None
        out.append(Admission(a.name, None, f"{a.name} {verdict}") if verdict else a)
    return out


def admit(candidate: Path, workspace: Path, kind: str | None = None, *, guard_limits: dict | None = None) -> Admission:
    """All three gates for one file."""
    return admit_many([(candidate, kind)], workspace, guard_limits=guard_limits)[0]


def read_text(adm: Admission, max_bytes: int | None = None) -> tuple[str | None, str | None]:
    """The text of an admitted text file as UTF-8, or the reason it is not text."""
    if not adm.ok:
        return None, adm.reason
    text, reason = safety.decode_utf8(adm.path)
    if reason:
        return None, reason
    if "\x00" in text[:4096]:
        return None, f"{adm.name} holds binary content (NUL bytes), not text"
    return (text if max_bytes is None else text[:max_bytes]), None
