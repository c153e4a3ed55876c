"""What a numeric criterion reads in a package: the figures where it looks, and those its tolerance accepts.

The kit compares these between the gold package and each trap's fallen
package (a tolerance that accepts the fallen package's figure, which the gold
does not state, admits the trap), and takes the gold's figure as the base
from which a mutation moves a line just outside its tolerance. They are read
with the oracle's own readers, from the copy LibreOffice recalculated (the
recalculator's cache: no second conversion) and the documents as the oracle
reads them; the comparison is the oracle's exact one
(:func:`pilot.oracles.amounts.within`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import cast

from pilot.oracles import amounts
from pilot.oracles.criteria import labelled_numbers
from pilot.oracles.readers import numbers_in
from pilot.protocol.scenario import Criterion, Scenario

#: The criterion kinds that compare one figure with an expected value within a tolerance.
NUMERIC_KINDS = ("labelled_value", "text_number", "csv_value")
#: How far either side of a ``near`` match a document figure is read (pilot.oracles.criteria.check_text_number).
NEAR_CHARS = 200


@dataclass(frozen=True)
class Reading:
    """The figures a numeric criterion finds in one package, and those it accepts; ``reason`` when it reads none."""

    figures: tuple[Decimal, ...] = ()
    accepted: tuple[Decimal, ...] = ()
    reason: str = ""


def accepts(c: Criterion, value: Decimal) -> bool:
    """Whether criterion ``c`` accepts ``value``, as the oracle compares (``absolute`` and ``also_accept_percent``
    of a labelled value included)."""
    expected, tol = amounts.exact(c.get("expected")), amounts.exact(c.get("tolerance"))
    v = abs(value) if c.get("absolute") else value
    if amounts.within(v, expected, tol):
        return True
    return bool(c.get("also_accept_percent")) and (
        amounts.within(v, 100 * expected, 100 * tol) or amounts.within(v / 100, expected, tol)
    )


def just_outside(c: Criterion) -> float | None:
    """The figure one place beyond criterion ``c``'s tolerance (``expected + tolerance`` plus one unit of the finer of
    the two as written), or None when the criterion would still accept it (a percentage read both ways near zero)."""
    expected, tol = amounts.exact(c.get("expected")), amounts.exact(c.get("tolerance"))
    # A finite decimal's exponent is an int (the casts tell the type checker; nothing changes at run time).
    places = max(-cast(int, expected.as_tuple().exponent), -cast(int, tol.as_tuple().exponent), 0)
    wrong = expected + tol + Decimal(1).scaleb(-places)
    return None if accepts(c, wrong) else float(wrong)


def _sheets(wb, sheet: str | None) -> list:
    if not sheet:
        return list(wb.worksheets)
    return [ws for ws in wb.worksheets if ws.title.strip().lower() == sheet.strip().lower()]


def read(ctx, c: Criterion) -> Reading:
    """The figures criterion ``c`` reads in the workspace of ``ctx`` (a :class:`pilot.oracles.context.WorkspaceContext`
    or the deck-aware one), and those it accepts."""
    if c.kind == "labelled_value":
        wb, reason = ctx.recalculated(c.file)
        if reason:
            return Reading(reason=reason)
        found, problems, _ = labelled_numbers(_sheets(wb, c.get("sheet")), c.get("label"), c.get("column"))
        figures = tuple(v for _, _, v in found)
        return _reading(c, figures, "; ".join(problems) or f"no line labelled /{c.get('label')}/")
    if c.kind == "csv_value":
        table, reason = ctx.csv(c.file)
        if reason:
            return Reading(reason=reason)
        cells = _csv_cells(table, c.get("key"), c.get("key_value"), c.get("column"))
        figures = tuple(v for v in (amounts.text_decimal(x) for x in cells) if v is not None)
        return _reading(c, figures, f"no row with {c.get('key')} = {c.get('key_value')}")
    if c.kind == "text_number":
        text, reason = ctx.text(c.file)
        if reason:
            return Reading(reason=reason)
        text = _flatten(text)
        spans = [m.span() for m in re.finditer(c.get("near"), text, re.I)] if c.get("near") else None
        near: list[Decimal] = []
        for _, tok, at in _numbers(text):
            if spans is None or any(s - NEAR_CHARS <= at <= e + NEAR_CHARS for s, e in spans):
                value = amounts.text_decimal(tok)
                if value is not None:
                    near.append(value)
        return _reading(c, tuple(near), f"no figure near /{c.get('near')}/")
    raise ValueError(f"{c.id}: a {c.kind} criterion reads no single figure")


def _reading(c: Criterion, figures: tuple[Decimal, ...], none: str) -> Reading:
    return Reading(figures, tuple(v for v in figures if accepts(c, v)), "" if figures else none)


def _flatten(text: str) -> str:
    # As the oracle reads a document's figures: any run of whitespace is one space.
    return re.sub(r"\s+", " ", text)


def _numbers(text: str):
    return numbers_in(text)


def _csv_cells(table, key: str, key_value: str, column: str) -> list[str]:
    """The ``column`` cell of the first row whose ``key`` is ``key_value``, the one the oracle reads (or none)."""
    header, rows = table
    low = [h.strip().lower() for h in header]
    if key.lower() not in low or column.lower() not in low:
        return []
    ki, vi = low.index(key.lower()), low.index(column.lower())
    return [r[vi] for r in rows if len(r) > max(ki, vi) and r[ki].strip().lower() == key_value.lower()][:1]


def read_package(scenario: Scenario, workspace: Path, criteria: list[Criterion], recalculator) -> dict[str, Reading]:
    """Each numeric criterion of ``criteria`` read in ``workspace`` (its workbooks recalculated by ``recalculator``)."""
    from pilot.oracle_formats.evaluate import DeckContext

    ctx = DeckContext(scenario, Path(workspace), recalculator)
    return {c.id: read(ctx, c) for c in criteria if c.kind in NUMERIC_KINDS}
