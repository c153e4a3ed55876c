"""The hand edits and the batch harness shared by the scenario mutation tests (tests/test_mutations_*.py).

A variant is the gold package copied and edited the way a careless worker would have produced it; each test
file names its variants and the exact criteria each must fail. Here live the edits every file makes the same
way (cells of a workbook, sentences of a document) and the one LibreOffice batch that evaluates them all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import openpyxl
from openpyxl.workbook.workbook import Workbook

from pilot import defects
from pilot.oracles import Recalculator, evaluate_many
from pilot.scenarios import build_gold_workspace, load_scenario
from pilot.scenarios.officeio import normalize_zip

#: An edit of a copied workspace, in place.
Mutation = Callable[[Path], None]
#: A variant: its edit and the criteria it must fail, and nothing else (empty: the package passes).
Variant = tuple[Mutation, set[str]]


def edit_workbook(book: str, *edits: Callable[[Workbook], None]) -> Mutation:
    """Apply ``edits`` to the loaded workbook ``outputs/<book>``, then save it as the gold was saved."""

    def mutate(ws: Path) -> None:
        path = ws / "outputs" / book
        wb = openpyxl.load_workbook(path)
        for edit in edits:
            edit(wb)
        wb.save(path)
        normalize_zip(path)  # the gold's zip layout, so the edit is the only difference

    return mutate


def set_cell(sheet: str, coord: str, value: Any) -> Callable[[Workbook], None]:
    """One cell typed over, figure or formula."""

    def edit(wb: Workbook) -> None:
        wb[sheet][coord] = value

    return edit


def set_cells(book: str, *edits: tuple[str, str, Any]) -> Mutation:
    """Set cells (sheet, cell, value) of ``outputs/<book>``, as a worker typing other figures or formulas would."""
    return edit_workbook(book, *(set_cell(sheet, coord, value) for sheet, coord, value in edits))


def rewrite_document(sid: str, name: str, transform: Callable[[list[str]], list[str]]) -> Mutation:
    """Rewrite the text lines of deliverable ``name`` by ``transform``, keeping its required sections."""

    def mutate(ws: Path) -> None:
        defects._rewrite_document(
            ws / "outputs" / name, transform, load_scenario(sid).deliverable(name).required_sections
        )

    return mutate


def replace_sentences(sid: str, name: str, *pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of a document (wrapped lines allowed: any whitespace matches a space); the rest stays.

    Each old sentence must be there, or the variant would edit nothing and pass for the wrong reason.
    """

    def transform(lines: list[str]) -> list[str]:
        joined = "\n".join(lines)
        for old, new in pairs:
            pattern = re.escape(old).replace(r"\ ", r"\s+")
            assert re.search(pattern, joined), f"{old!r} not in {name}"
            joined = re.sub(pattern, lambda _, new=new: new, joined)  # the new text taken literally
        return joined.split("\n")

    return rewrite_document(sid, name, transform)


def replace_section_body(sid: str, name: str, heading: str, is_next: Callable[[str], bool], text: str) -> Mutation:
    """Replace what stands between the line ``heading`` and the first later line for which ``is_next`` holds."""

    def transform(lines: list[str]) -> list[str]:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading)
        end = next(i for i, line in enumerate(lines) if is_next(line))
        return [*lines[: start + 1], text, *lines[end:]]

    return rewrite_document(sid, name, transform)


def in_turn(*steps: Mutation) -> Mutation:
    """Several edits of one package, in the order given."""

    def mutate(ws: Path) -> None:
        for step in steps:
            step(ws)

    return mutate


def evaluate_variants(
    sid: str, variants: Mapping[str, Variant], root: Path, evaluate: Callable[..., list[Any]] = evaluate_many
) -> dict[str, Any]:
    """The gold package and a copy of it per variant, edited, all evaluated in one LibreOffice batch.

    Returns the evaluations by variant name, the gold's under "gold".
    """
    gold = build_gold_workspace(sid, root / "gold")
    sc = load_scenario(sid)
    items, names = [(sc, gold, None)], ["gold"]
    for name, (mutate, _) in variants.items():
        ws = defects.copy_workspace(gold, root / name)
        mutate(ws)
        items.append((sc, ws, None))
        names.append(name)
    with Recalculator(root / "recalc") as r:
        evaluations = evaluate(items, recalculator=r)
    return dict(zip(names, evaluations, strict=True))


def _reasons(ev: Any) -> list[tuple[str, str]]:
    return [(c.id, c.reason) for c in ev.failed]


def assert_gold_passes(ev: Any) -> None:
    """The gold package passes every criterion, with no evaluation error."""
    assert ev.D and not ev.E and not ev.failed, _reasons(ev)


def assert_fails_exactly(ev: Any, want: Iterable[str]) -> None:
    """The variant fails exactly the criteria ``want``: the package is accepted if and only if none."""
    want = set(want)
    assert {c.id for c in ev.failed} == want, _reasons(ev)
    # Every criterion named is required: falling into a trap is never accepted; a careful variant is.
    assert bool(ev.D) is (not want)
    assert not ev.E


def read_set_as(sid: str, criterion: str, text: str) -> tuple[set[str], set[str]]:
    """The options ``text`` puts inside and outside the set, read as the oracle's criterion ``criterion`` reads it."""
    from pilot.oracles.decisions import read_set

    c = load_scenario(sid).oracle.by_id(criterion)
    read = read_set(
        text,
        dict(c.get("options")),
        topic=c.get("topic"),
        property_verbs=c.get("property_verbs"),
        complement_verbs=c.get("complement_verbs"),
        plans=c.get("plans"),
    )
    return set(read.inside), set(read.outside)


def refusal_of_edited_input(
    sid: str, workdir: Path, name: str, line: int, column: int, value: str, compute: Callable[[Path], Any]
) -> str:
    """The message ``compute`` refuses the inputs with once field ``column`` of CSV ``name``'s ``line`` is ``value``.

    ``line`` counts the file's lines from 1, the header's; the scenario's inputs are copied to ``workdir`` first.
    """
    import csv
    import shutil

    import pytest

    inputs = workdir / "inputs"
    shutil.copytree(load_scenario(sid).inputs_dir, inputs)
    path = inputs / name
    rows = list(csv.reader(path.open(newline="", encoding="utf-8")))
    rows[line - 1][column] = value
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    with pytest.raises(ValueError) as exc:
        compute(inputs)
    return str(exc.value)
