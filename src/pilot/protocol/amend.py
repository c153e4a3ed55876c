"""Amendments written by a command: the next row of ``amendments.csv``, and a scenario joining a scenario set.

``pilot protocol amend`` appends one amendment with the next id, a stage of
:data:`~pilot.protocol.design.AMENDMENT_STAGES` (by default the last
amendment's: stages never go back) and a date (by default today), written as
the file writes its rows (the csv module's minimal quoting, the file's own
line ending) and validated with the whole file before it replaces it.

A scenario added to the design's ten joins a set by an amendment titled
``Extension scenario <ID>`` (:data:`EXTENSION_TITLE`); ``--scenario ID --set
NAME`` writes that amendment and adds the ID to ``scenario_sets.NAME`` of
``study.yml``, a new set holding the design's set and the scenario, as
``extension`` does. The YAML is edited as text, so its comments and layout
stay, and read back to prove the edit is exactly the one intended. Both files
are replaced only once both are valid; a failure leaves both as they were.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from pilot import paths
from pilot.protocol.design import (
    AMENDMENT_STAGES,
    SCENARIO_ID,
    SET_NAME,
    ProtocolError,
    load_amendments,
    load_study,
)

#: How an amendment that adds a scenario to a set is titled (the ID follows).
EXTENSION_TITLE = "Extension scenario "
#: Scenarios added by the amendment that created their set, rather than by one of their own.
ADDED_WITH_THEIR_SET = {"EST-01": "A-016"}


@dataclass(frozen=True)
class Amendment:
    id: str
    date: str
    stage: str
    title: str
    content: str

    def row(self) -> list[str]:
        return [self.id, self.date, self.stage, self.title, self.content]


def _line_ending(data: bytes, path: Path) -> str:
    """The file's one line ending; a file that mixes them is refused (rewriting it would change unrelated lines)."""
    crlf = data.count(b"\r\n")
    lf = data.count(b"\n") - crlf
    if crlf and lf:
        raise ProtocolError(path, "<file>", f"mixes line endings ({crlf} CRLF, {lf} LF); give it one before amending")
    return "\r\n" if crlf else "\n"


def next_amendment(
    title: str, content: str, *, stage: str | None = None, date: str | None = None, path: Path | None = None
) -> Amendment:
    """The amendment that would come next in ``amendments.csv``: its id, and the stage and date it defaults to."""
    path = Path(path) if path is not None else paths.AMENDMENTS_FILE
    rows = load_amendments(path)
    last = rows[-1] if rows else None
    number = int(last["id"].split("-")[1]) + 1 if last else 1
    stage = stage if stage is not None else (last["stage"] if last else AMENDMENT_STAGES[0])
    if stage not in AMENDMENT_STAGES:
        raise ProtocolError(path, "stage", f"{stage!r} is not one of {AMENDMENT_STAGES}")
    date = date if date is not None else dt.date.today().isoformat()
    for field, value in (("title", title), ("content", content)):
        if not value or not value.strip():
            raise ProtocolError(path, field, "must not be empty")
        if "\r" in value or "\n" in value:
            raise ProtocolError(path, field, "must be one line")
    return Amendment(f"A-{number:03d}", date, stage, title.strip(), " ".join(content.split()))


def amended_text(path: Path, amendment: Amendment) -> str:
    """``amendments.csv`` with ``amendment`` appended, as the file writes its rows."""
    data = path.read_bytes()
    ending = _line_ending(data, path)
    text = data.decode("utf-8")
    if text and not text.endswith(ending):
        text += ending
    buf = io.StringIO()
    csv.writer(buf, lineterminator=ending).writerow(amendment.row())
    return text + buf.getvalue()


def _flow_list_span(lines: list[str], start: int) -> tuple[int, int]:
    """(line, column) of the ``]`` closing the flow list that opens on line ``start``."""
    depth = 0
    for i in range(start, len(lines)):
        for j, ch in enumerate(lines[i]):
            if ch == "#":
                break
            if ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
                if depth == 0:
                    return i, j
    raise ValueError("unclosed list")


def set_joined_text(study_path: Path, set_name: str, scenario_id: str) -> str:
    """``study.yml`` with ``scenario_id`` added to ``scenario_sets.<set_name>`` (a new set: the design's set and it)."""
    data = study_path.read_bytes()
    ending = _line_ending(data, study_path)
    lines = data.decode("utf-8").split(ending)
    study = load_study(study_path)
    sets = study.scenario_sets
    top = next((i for i, line in enumerate(lines) if re.match(r"^scenario_sets:\s*(#.*)?$", line)), None)
    if top is None:
        raise ProtocolError(study_path, "scenario_sets", "no block 'scenario_sets:' at the top level to add to")
    end = next(
        (i for i in range(top + 1, len(lines)) if lines[i] and not lines[i][0].isspace() and lines[i][0] != "#"),
        len(lines),
    )
    if set_name in sets:
        at = next((i for i in range(top + 1, end) if re.match(rf"^\s+{re.escape(set_name)}:\s*\[", lines[i])), None)
        if at is None:
            raise ProtocolError(study_path, f"scenario_sets.{set_name}", "is not written as a [..] list to add to")
        i, j = _flow_list_span(lines, at)
        lines[i] = lines[i][:j].rstrip() + f", {scenario_id}" + lines[i][j:]
        wanted = {**sets, set_name: sets[set_name] + [scenario_id]}
    else:
        design = study.scenario_set(None)
        last = max(i for i in range(top, end) if lines[i].strip() and not lines[i].lstrip().startswith("#"))
        lines.insert(last + 1, f"  {set_name}: [{', '.join(design + [scenario_id])}]")
        wanted = {**sets, set_name: design + [scenario_id]}
    text = ending.join(lines)
    if yaml.safe_load(text)["scenario_sets"] != wanted:
        raise ProtocolError(study_path, f"scenario_sets.{set_name}", "the edit would not read back as intended")
    return text


def _replace_all(new: dict[Path, str]) -> None:
    """Write each file's new text beside it, then move them into place; on a failure, put back what was moved."""
    staged: dict[Path, Path] = {}
    old: dict[Path, bytes] = {}
    try:
        for path, text in new.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            staged[path] = Path(tmp)
        for path, staged_copy in staged.items():
            old[path] = path.read_bytes()
            os.replace(staged_copy, path)
    except BaseException:
        for path, data in old.items():
            path.write_bytes(data)
        for staged_copy in staged.values():
            staged_copy.unlink(missing_ok=True)
        raise


def amend(
    title: str | None,
    content: str,
    *,
    stage: str | None = None,
    date: str | None = None,
    scenario: str | None = None,
    scenario_set: str | None = None,
    root: Path | None = None,
) -> Amendment:
    """Append an amendment (and, with ``scenario`` and ``scenario_set``, add the scenario to the set); the amendment.

    Both files are checked as they would be written (the amendments in order of id, date and stage, the study's
    sets naming bundles) before either is replaced.
    """
    root = Path(root) if root is not None else paths.ROOT
    amendments = root / paths.AMENDMENTS_FILE.relative_to(paths.ROOT)
    study_path = root / paths.STUDY_FILE.relative_to(paths.ROOT)
    new: dict[Path, str] = {}
    if scenario is not None:
        if scenario_set is None:
            raise ProtocolError(study_path, "scenario_sets", "a scenario joins a named set: give --set NAME")
        if not re.fullmatch(SCENARIO_ID, scenario):
            raise ProtocolError(amendments, "title", f"{scenario!r} is not a scenario id ({SCENARIO_ID})")
        if not re.fullmatch(SET_NAME, scenario_set):
            raise ProtocolError(study_path, "scenario_sets", f"{scenario_set!r} is not a set name ({SET_NAME})")
        bundle = root / paths.SCENARIOS_DIR.relative_to(paths.ROOT) / scenario / "scenario.yml"
        if not bundle.is_file():
            raise ProtocolError(bundle, "<file>", f"no bundle {scenario}: write it first (pilot scenarios new)")
        sets = load_study(study_path).scenario_sets
        if scenario in sets.get(scenario_set, []):
            raise ProtocolError(study_path, f"scenario_sets.{scenario_set}", f"already holds {scenario}")
        wanted = f"{EXTENSION_TITLE}{scenario}"
        if title is not None and title != wanted:
            raise ProtocolError(amendments, "title", f"an amendment adding {scenario} is titled {wanted!r}")
        title = wanted
        new[study_path] = set_joined_text(study_path, scenario_set, scenario)
    if title is None:
        raise ProtocolError(amendments, "title", "give the amendment a title (or --scenario ID --set NAME)")
    amendment = next_amendment(title, content, stage=stage, date=date, path=amendments)
    new[amendments] = amended_text(amendments, amendment)
    with tempfile.TemporaryDirectory(prefix="pilot-amend-") as tmp:
        for path, text in new.items():
            staged = Path(tmp) / path.name
            staged.write_text(text, encoding="utf-8", newline="")
            try:
                load_amendments(staged) if path == amendments else load_study(staged)
            except ProtocolError as exc:  # named as the file it would become
                raise ProtocolError(path, exc.field, exc.reason) from None
    _replace_all(new)
    return amendment


def added_by(amendments: list[dict[str, str]]) -> dict[str, list[str]]:
    """Scenario ID -> the ids of the amendments that add it to a set (titled ``Extension scenario <ID>``, or the
    amendment that created its set)."""
    out: dict[str, list[str]] = {sid: [aid] for sid, aid in ADDED_WITH_THEIR_SET.items()}
    for a in amendments:
        rest = a["title"][len(EXTENSION_TITLE) :].strip() if a["title"].startswith(EXTENSION_TITLE) else ""
        if re.fullmatch(SCENARIO_ID, rest):
            out.setdefault(rest, []).append(a["id"])
    return out
