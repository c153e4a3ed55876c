"""The participants file: who takes part in a human wave, in which occupation, and why they are eligible.

A CSV with the header ``participant_id,contact,occupation,eligibility``:

- ``participant_id``: the coordinator's pseudonym for the person (letters,
  digits, ``-`` and ``_``, at most 32), unique in the file; it is what the
  study's store and every record name them by;
- ``contact``: how the coordinator reaches them (an e-mail address or a
  handle), unique in the file; it never enters the study's store or an
  export, and is kept only in the wave's owner-only links file
  (:mod:`pilot.human.wave`);
- ``occupation``: the occupation of the scenarios they may be given, as
  ``scenario.yml`` spells it;
- ``eligibility``: ``practice`` (at least one year of practice in the
  occupation) or ``final-year`` (final-year study in it), the two routes
  ``protocol/human/protocol.md`` admits.

Every malformed or ineligible row is refused, each naming its line, field and
reason, all in one message, so a coordinator fixes the file in one pass.
"""

from __future__ import annotations

import csv
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pilot import paths

COLUMNS = ("participant_id", "contact", "occupation", "eligibility")
#: The routes to eligibility the protocol admits, and what each means.
ELIGIBILITY = {
    "practice": "at least one year of practice in the occupation",
    "final-year": "final-year study in the occupation",
}
PARTICIPANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_CONTACT = re.compile(r"^(?:[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+|@?[A-Za-z0-9][A-Za-z0-9._-]{1,63})$")


@dataclass(frozen=True)
class Problem:
    """One refused row: its line (None for the file as a whole), field and reason."""

    line: int | None
    field: str
    reason: str

    def __str__(self) -> str:
        where = f"line {self.line}, " if self.line is not None else ""
        return f"{where}field '{self.field}': {self.reason}"


class ParticipantFileError(ValueError):
    """A participants file that cannot be used; the message names the file and every refused line, field, reason."""

    def __init__(self, path: Path | str, problems: list[Problem]) -> None:
        self.path, self.problems = Path(path), problems
        shown = paths.shown(Path(path))
        if len(problems) == 1:
            message = f"{shown}: {problems[0]}"
        else:
            message = f"{shown}: {len(problems)} rows refused:\n" + "\n".join(f"  {p}" for p in problems)
        super().__init__(message)


@dataclass(frozen=True)
class Participant:
    """One eligible participant as the file gives them (``occupation`` spelled as the scenarios spell it)."""

    participant_id: str
    contact: str
    occupation: str
    eligibility: str
    line: int


def exposure_warning(path: Path) -> str | None:
    """A warning when the file holding contacts can be read by anyone but its owner (it should be mode 0600)."""
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (
            f"warning: {paths.shown(path)} holds contact details and can be read by others "
            f"(mode {stat.S_IMODE(mode):04o}); make it owner-only: chmod 600 {path}"
        )
    return None


def read_participants(path: Path, occupations: Iterable[str]) -> list[Participant]:
    """The eligible participants in ``path``, in file order; refused with every bad row named.

    ``occupations`` are the occupations of the study's scenarios: a
    participant of any other occupation could never be given a scenario.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ParticipantFileError(
            path, [Problem(None, "file", f"cannot be read ({type(exc).__name__}: {exc})")]
        ) from exc
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise ParticipantFileError(path, [Problem(1, "header", f"the file is empty; expected {','.join(COLUMNS)}")])
    header = [h.strip() for h in rows[0]]
    if header != list(COLUMNS):
        raise ParticipantFileError(
            path, [Problem(1, "header", f"expected {','.join(COLUMNS)}, found {','.join(header) or '(nothing)'}")]
        )
    known = {o.strip().lower(): o for o in occupations}
    problems: list[Problem] = []
    out: list[Participant] = []
    ids: dict[str, int] = {}
    contacts: dict[str, int] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(COLUMNS):
            problems.append(
                Problem(line, "row", f"has {len(row)} fields, expected {len(COLUMNS)} ({','.join(COLUMNS)})")
            )
            continue
        pid, contact, occupation, eligibility = (cell.strip() for cell in row)
        bad = len(problems)
        if not PARTICIPANT_ID.match(pid):
            problems.append(
                Problem(
                    line, "participant_id", f"{pid!r} is not a pseudonym (letters, digits, '-' and '_', at most 32)"
                )
            )
        elif pid.lower() in ids:
            problems.append(Problem(line, "participant_id", f"{pid!r} is already the id of line {ids[pid.lower()]}"))
        if not _CONTACT.match(contact):
            problems.append(Problem(line, "contact", "is neither an e-mail address nor a handle"))
        elif contact.lower() in contacts:
            problems.append(Problem(line, "contact", f"is already the contact of line {contacts[contact.lower()]}"))
        spelled = known.get(occupation.lower())
        if spelled is None:
            problems.append(
                Problem(
                    line,
                    "occupation",
                    f"{occupation!r} is no occupation of the study's scenarios ({'; '.join(sorted(known.values()))})",
                )
            )
        route = eligibility.lower()
        if route not in ELIGIBILITY:
            problems.append(
                Problem(
                    line,
                    "eligibility",
                    f"{eligibility!r}: not eligible; the protocol admits "
                    + " or ".join(f"{k} ({v})" for k, v in ELIGIBILITY.items()),
                )
            )
        ids.setdefault(pid.lower(), line)
        contacts.setdefault(contact.lower(), line)
        if len(problems) == bad and spelled is not None:
            out.append(Participant(pid, contact, spelled, route, line))
    if problems:
        raise ParticipantFileError(path, problems)
    if not out:
        raise ParticipantFileError(path, [Problem(None, "rows", "the file lists no participant")])
    return out


def write_owner_only(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` readable by its owner alone (mode 0600 from creation, replaced atomically)."""
    from pilot.store import atomic_write_text

    old = os.umask(0o077)
    try:
        atomic_write_text(path, text)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return path
