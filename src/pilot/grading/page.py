"""What the grade page shows, built from what the judges received: the brief as a document, the package as tables.

The brief is the scenario's own Markdown, rendered with markdown-it (its raw
HTML disabled, so nothing in it becomes markup). The package is the judges'
rendered text, split into blocks the page lays out: a deliverable's heading,
its notes, paragraphs, and every run of ``| a | b |`` lines as a table with
its cells. No word is added or dropped: the cells are the text the judges
read, escaped by the template.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

#: A line the renderer writes about a deliverable, not of it: shown apart from the content.
_NOTE = re.compile(r"^\((?:.*)\)$|^\[\.\.\. .*\]$")
_SHEET = re.compile(
    r"^(Sheet '.*' \(\d+ rows x \d+ columns\)|Part '.*'.*|Table \(\d+ rows\):|--- page \d+ of \d+ ---)$"
)


@dataclass
class Block:
    """One piece of a deliverable as the page lays it out: ``kind`` is heading, caption, note, text or table."""

    kind: str
    text: str = ""
    rows: list[list[str]] = field(default_factory=list)
    header: list[str] = field(default_factory=list)


@lru_cache(maxsize=64)
def brief_html(markdown: str) -> str:
    """The brief as HTML: headings, lists, tables and emphasis; any HTML in the source is shown as text."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
    return md.render(markdown)


def _cells(line: str) -> list[str]:
    inner = line.strip()
    if inner.startswith("|"):
        inner = inner[1:]
    if inner.endswith("|"):
        inner = inner[:-1]
    return [c.strip() for c in inner.split("|")]


def blocks(text: str) -> list[Block]:
    """The judges' text of one deliverable as blocks (its ``### name`` heading first)."""
    out: list[Block] = []
    table: list[list[str]] = []

    def flush() -> None:
        if table:
            # A workbook's first row names its columns (A, B, ...): that row is the header.
            header = (
                table[0]
                if table[0] and table[0][0] == "" and all(re.fullmatch(r"[A-Z]{1,3}", c) for c in table[0][1:])
                else []
            )
            out.append(Block("table", rows=table[1:] if header else list(table), header=header))
            table.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1:
            table.append(_cells(stripped))
            continue
        flush()
        if not stripped:
            continue
        if stripped.startswith("### "):
            out.append(Block("heading", stripped[4:]))
        elif _SHEET.match(stripped):
            out.append(Block("caption", stripped))
        elif _NOTE.match(stripped):
            out.append(Block("note", stripped))
        else:
            out.append(Block("text", line.rstrip()))
    flush()
    return out
