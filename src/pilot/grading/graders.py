"""The graders file: who grades, and for which occupations.

A CSV with the header ``name,contact,occupations``: ``contact`` is an e-mail
address or a handle (unique in the file), ``occupations`` one or more of the
scenarios' occupations separated by ``;`` (as ``scenario.yml`` spells them).
Every fault names the file, the line, the field and the reason.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pilot import paths

COLUMNS = ("name", "contact", "occupations")
_CONTACT = re.compile(r"^(?:[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+|@?[A-Za-z0-9][A-Za-z0-9._-]{1,63})$")


class GraderFileError(ValueError):
    """A graders file that cannot be used; the message names file, line, field and reason."""

    def __init__(self, path: Path | str, line: int | None, field: str, reason: str) -> None:
        self.path, self.line, self.field, self.reason = Path(path), line, field, reason
        where = f"line {line}, " if line is not None else ""
        super().__init__(f"{paths.shown(Path(path))}: {where}field '{field}': {reason}")


@dataclass(frozen=True)
class Grader:
    """One grader as the file gives them; ``grader_id`` is their opaque id in the wave (``G01`` ...)."""

    grader_id: str
    name: str
    contact: str
    occupations: tuple[str, ...]
    line: int


def read_graders(path: Path, occupations: Iterable[str] | None = None) -> list[Grader]:
    """The graders in ``path``, in file order.

    With ``occupations`` (the occupations of the scenarios to be graded), a
    grader none of whose occupations is among them is refused, naming the line:
    they could never be assigned a package.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise GraderFileError(path, None, "file", f"cannot be read ({type(exc).__name__}: {exc})") from exc
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise GraderFileError(path, 1, "header", f"the file is empty; expected the header {','.join(COLUMNS)}")
    header = [h.strip() for h in rows[0]]
    if header != list(COLUMNS):
        raise GraderFileError(
            path, 1, "header", f"expected {','.join(COLUMNS)}, found {','.join(header) or '(nothing)'}"
        )
    known = None if occupations is None else {o.strip().lower(): o for o in occupations}
    graders: list[Grader] = []
    seen: dict[str, int] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(COLUMNS):
            raise GraderFileError(
                path, line, "row", f"has {len(row)} fields, expected {len(COLUMNS)} ({','.join(COLUMNS)})"
            )
        name, contact, occ = (cell.strip() for cell in row)
        if not name:
            raise GraderFileError(path, line, "name", "is empty")
        if not _CONTACT.match(contact):
            raise GraderFileError(path, line, "contact", f"{contact!r} is neither an e-mail address nor a handle")
        key = contact.lower()
        if key in seen:
            raise GraderFileError(path, line, "contact", f"{contact!r} is already the contact of line {seen[key]}")
        seen[key] = line
        listed = tuple(dict.fromkeys(o.strip() for o in occ.split(";") if o.strip()))
        if not listed:
            raise GraderFileError(path, line, "occupations", "is empty; list one or more occupations separated by ';'")
        if known is not None:
            matching = tuple(known[o.lower()] for o in listed if o.lower() in known)
            if not matching:
                raise GraderFileError(
                    path,
                    line,
                    "occupations",
                    f"{'; '.join(listed)} matches no occupation of the scenarios graded "
                    f"({'; '.join(sorted(known.values()))})",
                )
            listed = matching
        graders.append(Grader(f"G{len(graders) + 1:02d}", name, contact, listed, line))
    if not graders:
        raise GraderFileError(path, None, "rows", "the file lists no grader")
    return graders
