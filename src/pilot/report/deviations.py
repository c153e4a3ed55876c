"""The manuscript's "Deviations from the registered protocol", written from the protocol's own files.

Every amendment made after the registered design (``protocol/amendments.csv``,
stages after ``registered_through``) is listed with what it changed and its
expected effect (``protocol/deviations.yml``); numbers missing from the
amendment sequence are named with the reason the file gives; and the
subsection says which freeze the pooling of this run's waves rests on. The
file is validated on load and refused with its file, field and reason; an
amendment without an entry is printed as "not stated" and named by
:func:`missing_entries`, which the tests hold empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot import paths
from pilot.latex import latex_escape
from pilot.protocol import AMENDMENT_STAGES, ProtocolError, load_amendments, object_schema, read_yaml, validate

DEVIATIONS_FILE: Path = paths.PROTOCOL_DIR / "deviations.yml"

_TEXT = {"type": "string", "pattern": r"\S"}
_ID = {"type": "string", "pattern": r"^A-\d{3}$"}
SCHEMA: dict[str, Any] = object_schema(
    {
        "registered_through": {"enum": list(AMENDMENT_STAGES)},
        "gaps": object_schema({"ids": {"type": "array", "items": _ID}, "why": _TEXT}),
        "amendments": {
            "type": "object",
            "propertyNames": {"pattern": r"^A-\d{3}$"},
            "additionalProperties": object_schema({"changed": _TEXT, "effect": _TEXT}),
        },
    }
)


@dataclass(frozen=True)
class Deviation:
    id: str
    date: str
    stage: str
    title: str
    changed: str
    effect: str


@dataclass(frozen=True)
class Deviations:
    registered_through: str
    listed: tuple[Deviation, ...]
    gaps: tuple[str, ...]
    gaps_why: str
    unexplained_gaps: tuple[str, ...]
    missing: tuple[str, ...]


def _number(amendment_id: str) -> int:
    return int(amendment_id.split("-")[1])


def load(path: Path | None = None, amendments_path: Path | None = None) -> Deviations:
    """The amendments after registration with their changes and effects, and the gaps in the numbering."""
    path = Path(path or DEVIATIONS_FILE)
    raw = read_yaml(path)
    validate(raw, SCHEMA, path)
    rows = load_amendments(amendments_path) if amendments_path else load_amendments()
    known = {r["id"] for r in rows}
    stray = sorted(set(raw["amendments"]) - known)
    if stray:
        raise ProtocolError(path, f"amendments.{stray[0]}", "no amendment of protocol/amendments.csv has this id")
    rank = AMENDMENT_STAGES.index(raw["registered_through"])
    listed, missing = [], []
    for r in rows:
        if AMENDMENT_STAGES.index(r["stage"]) <= rank:
            continue
        entry = raw["amendments"].get(r["id"])
        if entry is None:
            missing.append(r["id"])
        listed.append(
            Deviation(
                r["id"],
                r["date"],
                r["stage"],
                r["title"],
                _clean(entry["changed"]) if entry else "not stated (protocol/deviations.yml has no entry)",
                _clean(entry["effect"]) if entry else "not stated",
            )
        )
    numbers = sorted(_number(i) for i in known)
    gaps = [f"A-{n:03d}" for n in range(1, numbers[-1] + 1) if n not in set(numbers)] if numbers else []
    explained = set(raw["gaps"]["ids"])
    return Deviations(
        raw["registered_through"],
        tuple(listed),
        tuple(gaps),
        _clean(raw["gaps"]["why"]),
        tuple(g for g in gaps if g not in explained),
        tuple(missing),
    )


def missing_entries(dev: Deviations | None = None) -> list[str]:
    """What the subsection cannot state: amendments without an entry, and numbering gaps without the reason."""
    dev = dev or load()
    return [f"{i}: no entry in protocol/deviations.yml" for i in dev.missing] + [
        f"{g}: a gap in the numbering that protocol/deviations.yml does not explain" for g in dev.unexplained_gaps
    ]


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).strip()


def _and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def subsection(dev: Deviations | None = None) -> str:
    """The LaTeX of the subsection (label ``sec:deviations``)."""
    dev = dev or load()
    items = "\n".join(
        f"\\item[{d.id}] ({latex_escape(d.date)}, {latex_escape(d.stage)}) \\emph{{{latex_escape(d.title)}}}: "
        f"{latex_escape(d.changed)}; expected effect: {latex_escape(d.effect)}."
        for d in dev.listed
    )
    first, last = (dev.listed[0].id, dev.listed[-1].id) if dev.listed else ("", "")
    explained = [g for g in dev.gaps if g not in dev.unexplained_gaps]
    gap_text = ""
    if explained:
        gap_text += f" The numbering skips {_and_list(explained)}: {latex_escape(dev.gaps_why)}."
    if dev.unexplained_gaps:
        gap_text += (
            f" The numbering also skips {_and_list(list(dev.unexplained_gaps))}, which the protocol does not explain."
        )
    listed = (
        "Table~\\ref{tab:amendments} lists every amendment; those of the stages up to "
        f"``{latex_escape(dev.registered_through)}'' (the recorded study's) belong to the registered design. "
        f"The {len(dev.listed)} made after it, {first} to {last}, are this "
        "run's deviations from the registered protocol, each with what it changed and the effect expected of it before "
        "any run of this study:"
        if dev.listed
        else "No amendment was made after the registered design."
    )
    freeze = (
        "\\paragraph{Which freeze the pooling rests on.} The registered design pooled the recorded study's "
        "third repeat "
        "on that study's freeze check (A-009), whose manifest this repository does not hold; it predates every "
        "amendment above, so it covers other oracles for MKT-01, BANK-01 and HEALTH-01 (A-012 to A-014) than this run "
        "used, and this run's waves are never pooled with the recorded study's runs. This run's own waves are pooled "
        "on this run's freeze check, whose manifest was taken when its pilot started"
        "\\ifdef{\\FreezeTakenAt}{ (\\FreezeTakenAt)}{}, after every amendment above. "
        "\\ifdef{\\FreezeSentence}{\\FreezeSentence}{no freeze check was made for this build.}"
    )
    return (
        "% Generated by pilot protocol tables (pilot.report.deviations) from protocol/amendments.csv and "
        "protocol/deviations.yml; do not edit.\n"
        "\\subsection{Deviations from the registered protocol}\\label{sec:deviations}\n\n"
        f"{listed}\n"
        + (
            "{\\small\\begin{description}[leftmargin=0pt,style=unboxed,itemsep=1pt,font=\\normalfont\\bfseries]\n"
            + items
            + "\n\\end{description}}\n"
            if dev.listed
            else ""
        )
        + (gap_text.strip() + "\n\n" if gap_text else "\n")
        + freeze
        + "\n"
    )


def write_subsection(out_dir: Path) -> Path:
    """Write ``deviations.tex`` into ``out_dir``."""
    path = Path(out_dir) / "deviations.tex"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(subsection(), encoding="utf-8")
    return path
