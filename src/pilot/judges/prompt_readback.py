"""Reading a judge prompt back: the scenario, the rubric and the package's observable features.

A judge receives only the text :func:`pilot.judges.prompt.build_prompt`
makes. A scripted judge that has nothing else (the rehearsal's model server)
recovers from that text what the SIMULATED judge's model reads: which
scenario the brief is, the rubric's criteria, and for every requested file
its status (delivered, in another format, missing, unreadable), rendering
family and the features the rendering shows (words, headings, cells,
formulas, error values, required sections found). Counts are taken from the
rendered text, so they are those of what the judge was shown (a rendering
cut at its character budget shows fewer words than the file holds).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pilot.judges.render import (
    COMPLETION_RECORD,
    FORMAT_LABELS,
    RenderedDeliverable,
    RenderedPackage,
    format_of,
    sections_found,
)
from pilot.judges.rubric import Criterion, criteria_from

ASSIGNMENT = "== THE ASSIGNMENT (the brief the team member received) =="
RUBRIC = "== THE RUBRIC =="
PACKAGE = "== THE PACKAGE HANDED IN =="
ANSWER = "== YOUR ANSWER =="

_ERROR_VALUES = re.compile(r"#(?:DIV/0!|REF!|VALUE!|NAME\?|N/A|NUM!|NULL!)")
_COLUMN = re.compile(r"[A-Z]{1,3}")
#: A workbook cell of the recalculated rendering that shows a formula after its value: ``0.2 [=ROUND(B9/B8,2)]``.
_VALUE_AND_FORMULA = re.compile(r"(?:^|\s)\[=.*\]$")
_RECEIVED = re.compile(r"^\(received as (.+?): (.+)\)$")
_NOT_SHOWN = ("(this file cannot be shown", "(refused: ")


class PromptNotUnderstood(ValueError):
    """The text is not a judge prompt of this study, or a part of it cannot be read back."""


def _between(text: str, start: str, end: str) -> str:
    i, j = text.find(start), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise PromptNotUnderstood(f"the prompt lacks the part {start!r} .. {end!r}")
    return text[i + len(start) : j].strip()


def _chunks(package: str, names: list[str]) -> dict[str, list[str]]:
    """Requested name -> the lines rendered under its ``### name`` heading."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in package.splitlines():
        head = line[4:].strip() if line.startswith("### ") else None
        if head in names and head not in out:
            current = head
            out[current] = []
            continue
        if current is not None:
            out[current].append(line)
    return out


def _features(fmt: str, lines: list[str]) -> dict[str, Any]:
    body = [ln for ln in lines if ln.strip() and not (ln.startswith("(") and ln.endswith(")"))]
    f: dict[str, Any] = {"present": True}
    table = [ln for ln in body if ln.lstrip().startswith("|")]
    if fmt == "workbook":
        rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in table]
        # Each sheet's first line is its column letters; each row's first cell its number.
        rows = [r for r in rows if not (r and r[0] == "" and all(_COLUMN.fullmatch(c) for c in r[1:]))]
        cells = [c for r in rows for c in r[1:]]
        # A formula is shown as ``=F -> v`` or a bare ``=F`` (the stored rendering: bare when the file stores no
        # value), or as ``v [=F]`` (the recalculated rendering).
        bare = sum(1 for c in cells if c.startswith("=") and " -> " not in c)
        f.update(
            n_cells=sum(1 for c in cells if c),
            n_formulas=sum(1 for c in cells if c.startswith("=") or _VALUE_AND_FORMULA.search(c)),
            n_error_values=sum(1 for c in cells if _ERROR_VALUES.search(c)),
            n_formulas_uncomputed=bare,
        )
    elif fmt == "table":
        cells = [c.strip() for ln in table for c in ln.strip().strip("|").split("|")]
        rows = [m for ln in lines for m in re.findall(r"\((\d+) rows x \d+ columns\)", ln)]
        f.update(
            n_cells=sum(1 for c in cells if c),
            n_rows=sum(int(r) for r in rows) or len(table),
            n_formulas=sum(1 for c in cells if c.startswith("=")),
            n_error_values=sum(1 for c in cells if _ERROR_VALUES.search(c)),
        )
    else:
        text_lines = [
            ln
            for ln in body
            if not re.match(r"^--- page \d+ of \d+ ---$", ln) and not re.match(r"^Table \(\d+ rows\):$", ln)
        ]
        words = sum(
            len(
                (
                    ln.strip().strip("|").replace("|", " ")
                    if ln.lstrip().startswith("|")
                    else re.sub(r"^(#{1,6}|-)\s+", "", ln)
                ).split()
            )
            for ln in text_lines
        )
        f.update(n_words=words, n_headings=sum(1 for ln in text_lines if re.match(r"^#{1,6}\s+\S", ln)))
    return f


def _deliverable(name: str, lines: list[str] | None, requirements: dict[str, Any]) -> RenderedDeliverable:
    text = "\n".join([f"### {name}", *(lines or [])])
    if lines is None or any(ln.startswith("(not delivered") for ln in lines[:1]):
        return RenderedDeliverable(
            name,
            [],
            "missing",
            "none",
            text,
            {"present": False, "substitute": False, "unreadable": False},
            requirements=dict(requirements),
        )
    status, fmt, delivered = "delivered", format_of(Path(name)), [name]
    m = _RECEIVED.match(lines[0].strip()) if lines else None
    if m:
        delivered = [x.strip() for x in m.group(1).split(",")]
        label = m.group(2).strip()
        fmt = next((k for k, v in FORMAT_LABELS.items() if v == label), format_of(Path(delivered[0])))
        status = "substitute"
    shown = [ln for ln in lines[1 if m else 0 :] if ln.strip()]
    if name == COMPLETION_RECORD:
        fmt = "text"
    if shown and all(ln.startswith(_NOT_SHOWN) for ln in shown):
        f = {"present": True, "substitute": status == "substitute", "unreadable": True}
        return RenderedDeliverable(name, delivered, "unreadable", fmt, text, f, requirements=dict(requirements))
    if name == COMPLETION_RECORD:
        # The record is rendered as fields, not read as text: its features are its counts.
        n_q = next((int(m.group(1)) for ln in lines for m in [re.match(r"^questions \((\d+)\):$", ln)] if m), 0)
        f = {
            "present": True,
            "substitute": False,
            "unreadable": False,
            "n_questions": n_q,
            "n_substitutions": sum(1 for ln in lines if ln.startswith("in another format: ")),
        }
        return RenderedDeliverable(name, delivered, status, fmt, text, f, requirements=dict(requirements))
    f = _features(fmt, lines)
    f.update(substitute=status == "substitute", unreadable=False)
    d = RenderedDeliverable(name, delivered, status, fmt, text, f, requirements=dict(requirements))
    if requirements.get("required_sections"):
        d.features["sections_found"] = sections_found(text, requirements["required_sections"])
    return d


def read_back(prompt: str) -> tuple[Any, list[Criterion], RenderedPackage]:
    """(scenario, rubric criteria, package) of a judge prompt; :class:`PromptNotUnderstood` when it is not one."""
    from pilot.judges.prompt import deliverable_requirements, requested_names
    from pilot.scenarios import list_scenarios, load_scenario

    brief = _between(prompt, ASSIGNMENT, RUBRIC)
    norm = " ".join(brief.split())
    hits = [load_scenario(s) for s in list_scenarios()]
    hits = [sc for sc in hits if " ".join(sc.brief.split()) == norm]
    if len(hits) != 1:
        raise PromptNotUnderstood(
            f"the prompt's brief matches {len(hits)} scenarios of the protocol (expected exactly one)"
        )
    scenario = hits[0]
    criteria = criteria_from(scenario.rubric, source=f"rubric of {scenario.id}")
    m = re.search(r"^Criterion ids: (.+)$", prompt, re.M)
    if not m or [x.strip() for x in m.group(1).split(",")] != [c.id for c in criteria]:
        raise PromptNotUnderstood(f"the prompt's criterion ids are not those of {scenario.id}'s rubric")
    names = requested_names(scenario)
    chunks = _chunks(_between(prompt, PACKAGE, ANSWER), names)
    reqs = deliverable_requirements(scenario)
    package = RenderedPackage([_deliverable(n, chunks.get(n), reqs.get(n, {})) for n in names])
    return scenario, criteria, package
