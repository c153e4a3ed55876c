"""Named defects that turn a gold workspace into a realistic defective one.

Used two ways: the tests derive, for every oracle criterion, a variant that
fails exactly that criterion (``defect_for_criterion``); the simulated agent
backend draws named defects (``apply_defect``) to produce the kinds of
failure real workers produce: a missing file, a workbook of pasted values,
an error value, a wrong figure, a thin document, a missing section, an
omitted fact, a broken completion record, a touched input, a text
substitute.

Every function edits real files in place and returns a one-line description.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path

import numpy as np

from pilot.oracles.readers import (
    document_lines as _core_document_lines,
)
from pilot.oracles.readers import (
    is_formula,
    numbers_in,
    parse_number,
    read_csv,
    word_count,
)
from pilot.protocol.scenario import COMPLETION_RECORD, Criterion, Scenario
from pilot.scenarios.officeio import Heading, Para, normalize_zip, write_csv, write_document

#: How the document readers write the cells of a table row on one line (pilot.oracles.readers).
_TABLE_CELL = " | "


class DefectNotApplicable(ValueError):
    """The defect cannot be applied to this workspace (no suitable file or criterion)."""


def _out(workspace: Path, name: str) -> Path:
    return Path(workspace) / "outputs" / name


def _record(workspace: Path) -> dict | None:
    p = _out(workspace, COMPLETION_RECORD)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _save_record(workspace: Path, record: dict) -> None:
    _out(workspace, COMPLETION_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def drop_deliverable(workspace: Path, name: str, *, update_record: bool = True) -> str:
    """Delete a deliverable; the completion record then says 'partial' and no longer lists it."""
    _out(workspace, name).unlink()
    if update_record and name != COMPLETION_RECORD:
        rec = _record(workspace)
        if rec is not None:
            rec["deliverables"] = [d for d in rec.get("deliverables", []) if d != name]
            rec["status"] = "partial"
            _save_record(workspace, rec)
    return f"dropped {name}"


def empty_file(workspace: Path, name: str) -> str:
    _out(workspace, name).write_bytes(b"")
    return f"emptied {name}"


def corrupt_file(workspace: Path, name: str) -> str:
    """Damage a file so it is no longer a valid file of its kind (non-empty)."""
    p = _out(workspace, name)
    data = p.read_bytes()
    suffix = p.suffix.lower()
    if suffix in (".xlsx", ".docx", ".pptx"):
        p.write_bytes(data[: max(64, int(len(data) * 0.6))])
        return f"truncated the archive {name} to 60%"
    if suffix == ".pdf":
        p.write_bytes(b"%XDF-" + data[5:])
        return f"overwrote the PDF header of {name}"
    if suffix == ".json":
        p.write_bytes(data[: len(data) // 2])
        return f"cut {name} in half (invalid JSON)"
    half = len(data) // 2
    p.write_bytes(data[:half] + b"\xff\xfe\xfa" + data[half:])
    return f"inserted invalid UTF-8 bytes into {name}"


# --------------------------------------------------------------------------
# Workbooks
# --------------------------------------------------------------------------


def _load(path: Path, data_only: bool = False):
    import openpyxl

    return openpyxl.load_workbook(path, data_only=data_only)


def _save(wb, path: Path) -> None:
    wb.save(path)
    normalize_zip(path)


def strip_formulas(workspace: Path, name: str, *, recalculator=None) -> str:
    """Replace every formula by its value, as if the figures were pasted (values from LibreOffice)."""
    from pilot.oracles.evaluate import default_recalculator

    path = _out(workspace, name)
    rec = (recalculator or default_recalculator()).recalculate([path])[path]
    if rec.error or rec.path is None:
        raise DefectNotApplicable(f"{name}: {rec.error}")
    values = _load(rec.path, data_only=True)
    wb = _load(path)
    n = 0
    for ws in wb.worksheets:
        vs = values[ws.title]
        for row in ws.iter_rows():
            for cell in row:
                if is_formula(cell):
                    cell.value = vs[cell.coordinate].value
                    n += 1
    _save(wb, path)
    return f"replaced {n} formulas in {name} by their values"


def inject_error_value(workspace: Path, name: str, sheet: str | None = None) -> str:
    """Add a division by zero below the used range of a sheet."""
    path = _out(workspace, name)
    wb = _load(path)
    ws = wb[sheet] if sheet else wb.worksheets[0]
    row = ws.max_row + 3
    ws.cell(row=row, column=1, value="=1/0")
    _save(wb, path)
    return f"wrote =1/0 into {ws.title}!A{row} of {name}"


# A cell or range reference inside a formula, sheet-qualified or not: A1, $B$8, A2:A40, Summary!$B$8,
# 'October pay'!K7 ('' is a quote inside a quoted name). An unquoted sheet name is a run of word characters and dots,
# so an operator ends it (=ROUND(G2*Summary!$B$8,2) refers to G2 and to Summary!B8), and a reference starts where no
# name character precedes it and ends where no function call follows (LOG10( is no cell).
_REF = re.compile(
    r"(?<![\w.$'!])(?:'((?:[^']|'')+)'!|([A-Za-z_][\w.]*)!)?"
    r"\$?([A-Z]{1,3})\$?(\d+)(?::\$?([A-Z]{1,3})\$?(\d+))?(?![\w(])"
)


def formula_references(formula: str, own_sheet: str) -> list[tuple[str, int, int, int, int]]:
    """Every cell or range ``formula`` refers to: (sheet, first column, first row, last column, last row), 1-based;
    a reference without a sheet is on ``own_sheet``."""
    from openpyxl.utils import column_index_from_string

    out = []
    for m in _REF.finditer(formula):
        quoted, bare, col1, row1, col2, row2 = m.groups()
        sheet = quoted.replace("''", "'") if quoted is not None else (bare or own_sheet)
        c1, r1 = column_index_from_string(col1), int(row1)
        c2, r2 = (column_index_from_string(col2), int(row2)) if col2 else (c1, r1)
        out.append((sheet.strip(), min(c1, c2), min(r1, r2), max(c1, c2), max(r1, r2)))
    return out


def _is_referenced(wb, ws, cell) -> bool:
    """Whether any formula in the workbook refers to ``cell`` (directly or inside a range)."""
    for other in wb.worksheets:
        for row in other.iter_rows():
            for c in row:
                if not is_formula(c) or c is cell:
                    continue
                for sheet, c1, r1, c2, r2 in formula_references(str(c.value)[1:], other.title):
                    if sheet == ws.title and c1 <= cell.column <= c2 and r1 <= cell.row <= r2:
                        return True
    return False


def shown(value: object) -> str:
    """A cell's or figure's value as a row of the check prints it: a number exactly, with thousands separators."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float, Decimal)):
        d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        return format(d, ",f")
    return repr(value) if not (isinstance(value, str) and value.startswith("=")) else value


def _shift(cell, delta: float) -> None:
    if is_formula(cell):
        cell.value = f"={str(cell.value)[1:]}+({delta:g})"
    else:
        cell.value = (parse_number(cell.value) or 0.0) + delta


def _sheet_named(wb, sheet: str | None) -> list:
    """The sheets a criterion reads: the one named (as the oracle matches names, case and spaces aside), or all."""
    if not sheet:
        return list(wb.worksheets)
    found = [ws for ws in wb.worksheets if ws.title.strip().lower() == sheet.strip().lower()]
    if not found:
        raise DefectNotApplicable(f"no sheet named {sheet!r}")
    return found


def misstate_labelled_value(
    workspace: Path,
    name: str,
    label: str,
    wrong: float,
    sheet: str | None = None,
    column: str | None = None,
    *,
    expected: float | None = None,
    avoid_labels: tuple[str, ...] = (),
) -> str:
    """Make the figure reported against ``label`` wrong without disturbing any other figure.

    The line is found as the oracle finds it (the whole label cell, the value
    to its right or under ``column``). The value cell is overwritten when no
    formula depends on it. When a total depends on it, the figure is shifted
    by ``wrong - expected`` (``expected``: the figure the line shows now) and
    a sibling in the same column is shifted back (the total still ties, the
    line is wrong). Otherwise the line is retired and restated with the wrong
    figure at the bottom. The description names each cell changed, with its
    old and new content.
    """
    from pilot.oracles.criteria import label_cells, value_cell

    path = _out(workspace, name)
    wb = _load(path)
    rx = re.compile(label, re.I)
    for ws in _sheet_named(wb, sheet):
        for cell in label_cells(ws, label):
            target, _ = value_cell(ws, cell, column)
            if target is not None and not (is_formula(target) or parse_number(target.value) is not None):
                target = None
            where = f"{ws.title}!{target.coordinate}" if target is not None else ""
            if target is not None and not _is_referenced(wb, ws, target):
                old = target.value
                target.value = wrong
                _save(wb, path)
                return f"overwrote {where} ({cell.value!r}) in {name}: {shown(old)} -> {shown(wrong)}"
            if target is not None and expected is not None and column:
                avoid = [re.compile(a, re.I) for a in avoid_labels]
                for sib_row in ws.iter_rows(min_row=2):
                    lab = sib_row[0]
                    sib = ws.cell(row=lab.row, column=target.column)
                    if (
                        lab.row == target.row
                        or not isinstance(lab.value, str)
                        or any(a.search(lab.value) for a in avoid)
                        or rx.search(lab.value)
                    ):
                        continue
                    if is_formula(sib) or parse_number(sib.value) is not None:
                        delta = wrong - expected
                        old_t, old_s = target.value, sib.value
                        _shift(target, delta)
                        _shift(sib, -delta)
                        _save(wb, path)
                        there = f"{ws.title}!{sib.coordinate}"
                        return (
                            f"moved {shown(round(delta, 10))} from {there} to {where} ({cell.value!r}) in {name}, "
                            f"{shown(expected)} -> {shown(wrong)}: {where} {shown(old_t)} -> {shown(target.value)}, "
                            f"{there} {shown(old_s)} -> {shown(sib.value)}"
                        )
            if _is_referenced(wb, ws, cell) or column:
                raise DefectNotApplicable(f"{name}: the line /{label}/ feeds other formulas")
            text = cell.value
            cell.value = "Superseded line"
            r = ws.max_row + 2
            ws.cell(row=r, column=1, value=text)
            ws.cell(row=r, column=2, value=wrong)
            _save(wb, path)
            return (
                f"retitled {ws.title}!{cell.coordinate} ({text!r}) in {name} 'Superseded line' and restated the line "
                f"at {ws.title}!A{r}:B{r} as {shown(wrong)}"
            )
    raise DefectNotApplicable(f"{name}: no cell labelled /{label}/")


def remove_workbook_text(workspace: Path, name: str, pattern: str) -> str:
    path = _out(workspace, name)
    wb = _load(path)
    rx = re.compile(pattern, re.I)
    changed = []
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, str) and not cell.value.startswith("=") and rx.search(cell.value):
                    old, cell.value = cell.value, rx.sub("(omitted)", cell.value)
                    changed.append(f"{ws.title}!{cell.coordinate} {old!r} -> {cell.value!r}")
    _save(wb, path)
    return (
        f"removed /{pattern}/ from {len(changed)} cell(s) of {name}: "
        + "; ".join(changed[:3])
        + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    )


# --------------------------------------------------------------------------
# Documents (docx, pdf, md, and slide decks): read as lines, transform, render again
# --------------------------------------------------------------------------


def document_lines(path: Path) -> tuple[list[str] | None, str | None]:
    """A document's lines; a deck's are its slide titles, text and table rows (pilot.oracle_formats.pptx_reader)."""
    if Path(path).suffix.lower() == ".pptx":
        from pilot.oracle_formats.pptx_reader import parse

        try:
            return parse(Path(path)).lines(), None
        except Exception as exc:  # noqa: BLE001 - a deck that cannot be read takes no document defect
            return None, f"{Path(path).name} cannot be read as a slide deck ({type(exc).__name__})"
    return _core_document_lines(path)


def _readable_lines(path: Path) -> list[str]:
    """A document's lines (:func:`document_lines`), or :class:`DefectNotApplicable` with the reason it has none."""
    lines, reason = document_lines(path)
    if reason or lines is None:
        raise DefectNotApplicable(reason or f"{Path(path).name}: no lines to read")
    return lines


def _rewrite_document(path: Path, transform: Callable[[list[str]], list[str]], sections: tuple[str, ...] = ()) -> None:
    from pilot.oracles.criteria import heading_matches

    lines = _readable_lines(path)
    new = transform([line for line in lines if line.strip()])
    blocks = [Heading(t) if any(heading_matches(t, s) for s in sections) else Para(t) for t in new if t.strip()]
    if path.suffix.lower() == ".pptx":
        from pilot.scenarios.deckio import write_deck

        write_deck(blocks, path)  # one slide per required section, as the deck reader reads its headings
    else:
        write_document(blocks, path)


def _flex(pattern: str) -> str:
    return pattern.replace(" ", r"\s+")


def _mentions(matches: list[str]) -> str:
    found = list(dict.fromkeys(matches))
    return ", ".join(repr(m) for m in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")


def remove_text(workspace: Path, name: str, pattern: str, sections: tuple[str, ...] = ()) -> str:
    """Remove every mention matching ``pattern`` from a document or CSV; the description quotes what was removed."""
    path = _out(workspace, name)
    if path.suffix.lower() == ".csv":
        text = path.read_text(encoding="utf-8")
        hits = [m.group(0) for m in re.finditer(pattern, text, re.I)]
        path.write_text(re.sub(pattern, "(omitted)", text, flags=re.I), encoding="utf-8")
        return f"replaced {len(hits)} mention(s) of /{pattern}/ in {name} ({_mentions(hits)}) by '(omitted)'"
    hits = []

    def tr(lines: list[str]) -> list[str]:
        joined = "\n".join(lines)
        hits.extend(m.group(0) for m in re.finditer(_flex(pattern), joined, re.I))
        return re.sub(_flex(pattern), "(omitted)", joined, flags=re.I).split("\n")

    _rewrite_document(path, tr, sections)
    return f"replaced {len(hits)} mention(s) of /{pattern}/ in {name} ({_mentions(hits)}) by '(omitted)'"


def outside_tolerance(expected: float, tolerance: float, wrong: float, decimals: int | None = None) -> Decimal:
    """``wrong`` as a figure written with ``decimals`` places (as given when None), moved outward one place at a time
    until the oracle's exact comparison no longer accepts it for ``expected`` within ``tolerance``."""
    from pilot.oracles import amounts

    e, tol, w = amounts.exact(expected), amounts.exact(tolerance), amounts.exact(wrong)
    if decimals is None:
        return w
    step = Decimal(1).scaleb(-decimals)
    up = w >= e
    v = w.quantize(step, rounding=ROUND_CEILING if up else ROUND_FLOOR)
    while amounts.within(v, e, tol):
        v += step if up else -step
    return v


def replace_number(
    workspace: Path, name: str, expected: float, tolerance: float, wrong: float, sections: tuple[str, ...] = ()
) -> str:
    """Restate every figure within ``tolerance`` of ``expected`` as ``wrong``, written to the figure's own places and
    kept outside the tolerance at them; the description names each figure changed."""
    path = _out(workspace, name)

    from pilot.oracles import amounts

    def close(tok: str) -> bool:
        # The oracle's own exact comparison, so every figure it would accept is restated.
        val = amounts.text_decimal(tok)
        return val is not None and amounts.within(val, amounts.exact(expected), amounts.exact(tolerance))

    changed: list[str] = []

    def tr(lines: list[str]) -> list[str]:
        joined = "\n".join(lines)
        tokens = sorted({tok for _, tok, _ in numbers_in(joined) if close(tok)}, key=len, reverse=True)
        for tok in tokens:
            decimals = len(tok.split(".")[1].rstrip("%)")) if "." in tok else 0
            new = f"{outside_tolerance(expected, tolerance, wrong, decimals):,.{decimals}f}" + (
                "%" if tok.endswith("%") else ""
            )
            changed.append(f"{tok!r} -> {new!r}")
            joined = re.sub(r"(?<![\d.,])" + re.escape(tok) + r"(?![\d])", new, joined)
        return joined.split("\n")

    _rewrite_document(path, tr, sections)
    return (
        f"restated the figures within {shown(tolerance)} of {shown(expected)} in {name}: " + "; ".join(changed)
        if changed
        else f"no figure within {shown(tolerance)} of {shown(expected)} in {name} to restate"
    )


def rename_section(workspace: Path, name: str, section: str, sections: tuple[str, ...] = ()) -> str:
    from pilot.oracles.criteria import heading_matches

    path = _out(workspace, name)

    def tr(lines: list[str]) -> list[str]:
        return ["Further remarks" if heading_matches(line, section) else line for line in lines]

    _rewrite_document(path, tr, tuple(s for s in sections if s != section))
    return f"removed the section heading {section!r} from {name}"


def truncate_document(
    workspace: Path,
    name: str,
    keep: tuple[str, ...] = (),
    sections: tuple[str, ...] = (),
    keep_in: dict[str, tuple[str, ...]] | None = None,
) -> str:
    """Keep only the headings and a one-line note quoting ``keep``: a thin document.

    ``keep_in`` maps a section to sentences kept under its own heading (a decision stays where the brief asks for it).
    """
    from pilot.oracles.criteria import heading_matches

    path = _out(workspace, name)

    def tr(lines: list[str]) -> list[str]:
        snippets = list(keep)
        heads = [line for line in lines if any(heading_matches(line, s) for s in sections)]
        out = (heads[:1] + ["Notes: " + "; ".join(snippets)] + heads[1:]) if snippets else heads + ["Draft to follow."]
        for section, kept in (keep_in or {}).items():
            at = next((i for i, line in enumerate(out) if heading_matches(line, section)), None)
            if at is not None:
                out[at + 1 : at + 1] = list(kept)
        return out

    _rewrite_document(path, tr, sections)
    lines, _ = document_lines(path)
    return f"cut {name} down to {word_count(lines or [])} words"


# --------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------


def _csv_table(path: Path) -> tuple[list[str], list[list[str]]]:
    table, reason = read_csv(path)
    if reason:
        raise DefectNotApplicable(reason)
    return table


def rename_csv_column(workspace: Path, name: str, column: str) -> str:
    path = _out(workspace, name)
    header, rows = _csv_table(path)
    header = [f"{h}_old" if h.strip().lower() == column.lower() else h for h in header]
    write_csv(path, header, rows)
    return f"renamed column {column!r} of {name}"


def drop_csv_rows(workspace: Path, name: str, key: str, value: str) -> str:
    from pilot.oracles.criteria import key_token

    path = _out(workspace, name)
    header, rows = _csv_table(path)
    i = [h.strip().lower() for h in header].index(key.lower())
    rx = key_token(value)
    kept = [r for r in rows if not rx.search(r[i])]
    if len(kept) == len(rows):
        raise DefectNotApplicable(f"{name}: no row with {key} = {value}")
    write_csv(path, header, kept)
    return f"dropped the row(s) for {value} from {name}"


def change_csv_value(workspace: Path, name: str, key: str, key_value: str, column: str, new: float) -> str:
    path = _out(workspace, name)
    header, rows = _csv_table(path)
    low = [h.strip().lower() for h in header]
    ki, vi = low.index(key.lower()), low.index(column.lower())
    d = Decimal(repr(new)) if isinstance(new, float) else Decimal(new)
    written = format(d.quantize(Decimal(1)) if d == d.to_integral_value() else d, "f")
    old = []
    for n, r in enumerate(rows, start=2):
        if r[ki].strip().lower() == key_value.lower():
            old.append(f"row {n} {r[vi]!r}")
            r[vi] = written
    if not old:
        raise DefectNotApplicable(f"{name}: no row with {key} = {key_value}")
    write_csv(path, header, rows)
    return f"set {column} of {key_value} in {name}: {', '.join(old)} -> {written!r}"


def set_csv_cell(workspace: Path, name: str, key: str, key_value: str, column: str, new: str) -> str:
    """Write ``new`` into ``column`` of the row(s) whose ``key`` names ``key_value`` as a whole token."""
    from pilot.oracles.criteria import key_token

    path = _out(workspace, name)
    header, rows = _csv_table(path)
    low = [h.strip().lower() for h in header]
    ki, vi = low.index(key.lower()), low.index(column.lower())
    hits = [(n, r) for n, r in enumerate(rows, start=2) if key_token(key_value).search(r[ki])]
    if not hits:
        raise DefectNotApplicable(f"{name}: no row with {key} = {key_value}")
    old = [f"row {n} {r[vi]!r}" for n, r in hits]
    for _, r in hits:
        r[vi] = new
    write_csv(path, header, rows)
    return f"set {column} of {key_value} in {name}: {', '.join(old)} -> {new!r}"


def off_scale_value(
    workspace: Path,
    name: str,
    column: str,
    value: str = "Critical",
    avoid_keys: tuple[str, ...] = (),
    key: str | None = None,
) -> str:
    """Rate one row outside the brief's scale (the last row not checked by another criterion)."""
    from pilot.oracles.criteria import key_token

    path = _out(workspace, name)
    header, rows = _csv_table(path)
    low = [h.strip().lower() for h in header]
    vi = low.index(column.lower())
    ki = low.index(key.lower()) if key and key.lower() in low else None
    for r in reversed(rows):
        if ki is not None and any(key_token(k).search(r[ki]) for k in avoid_keys):
            continue
        old, r[vi] = r[vi], value
        write_csv(path, header, rows)
        return f"rated a row of {name} {value!r} instead of {old!r} (outside the brief's scale)"
    raise DefectNotApplicable(f"{name}: every row is checked by another criterion")


def wrong_decision(scenario: Scenario, c: Criterion, workspace: Path) -> str:
    """State another decision where the brief asks for it, the right option still named elsewhere.

    A labelled workbook line or a CSV cell gets another option; in a document
    section, each clause that chooses the planted option chooses another
    instead, and a clause that rejects the other option ("I do not recommend
    approval") loses its negation.
    """
    from pilot.oracles.criteria import heading_matches, label_cells, value_cell
    from pilot.oracles.decisions import DECISION_VERBS, NEGATORS, WORD, compile_options, read_clause

    options = dict(c.get("options"))
    want = c.get("expected")
    if isinstance(want, list):
        return _wrong_set_decision(scenario, c, workspace)
    other = next(k for k in options if k != want)
    kind = scenario.deliverable(c.file).kind
    if kind == "csv":
        return set_csv_cell(workspace, c.file, c.get("key"), c.get("key_value"), c.get("column"), other)
    if kind == "xlsx":
        path = _out(workspace, c.file)
        wb = _load(path)
        for ws in [wb[c.get("sheet")]] if c.get("sheet") else wb.worksheets:
            for cell in label_cells(ws, c.get("label")):
                vcell, _ = value_cell(ws, cell, None)
                if vcell is not None:
                    vcell.value = other
                    _save(wb, path)
                    return f"set {ws.title}!{vcell.coordinate} ({cell.value!r}) in {c.file} to {other!r}"
        raise DefectNotApplicable(f"{c.file}: no line labelled /{c.get('label')}/")
    compiled = compile_options(options)
    sections = scenario.deliverable(c.file).required_sections
    changed = []

    def flip(clause: str) -> str:
        chosen, rejected = read_clause(clause, compiled)
        if chosen == want:
            changed.append(clause)
            return compiled[want].sub(other, clause)
        if rejected is not None and rejected != want:
            verb = DECISION_VERBS.search(clause)
            if verb is not None:
                head = clause[: verb.start()]
                words = WORD.findall(head)
                keep = [
                    w for i, w in enumerate(words) if not (i >= len(words) - 4 and NEGATORS.fullmatch(w.strip(".,;:")))
                ]
                changed.append(clause)
                return " ".join(keep) + (" " if keep else "") + clause[verb.start() :]
        return clause

    def tr(lines: list[str]) -> list[str]:
        out, inside = [], False
        for line in lines:
            if heading_matches(line, c.get("section")):
                inside = True
            elif any(heading_matches(line, s) for s in sections):
                inside = False
            elif inside:
                line = " ".join(flip(part) for part in re.split(r"(?<=[.;])\s+", line))
            out.append(line)
        return out

    _rewrite_document(_out(workspace, c.file), tr, sections)
    if not changed:
        raise DefectNotApplicable(f"{c.file}: the section {c.get('section')!r} states no decision to change")
    return (
        f"made the {c.get('section')!r} section of {c.file} decide {other} instead of {want} ({len(changed)} clause(s))"
    )


def set_reading(c: Criterion) -> dict:
    """How a set-valued decision criterion reads its clauses: keyword arguments of pilot.oracles.decisions.read_set."""
    return dict(
        topic=c.get("topic"),
        property_verbs=c.get("property_verbs"),
        complement_verbs=c.get("complement_verbs"),
        plans=c.get("plans"),
    )


def _wrong_set_decision(scenario: Scenario, c: Criterion, workspace: Path) -> str:
    """A set-valued decision names another option in place of each planted one, in every section where it is stated."""
    from pilot.oracles.criteria import heading_matches
    from pilot.oracles.decisions import compile_options, read_set

    options = dict(c.get("options"))
    want = c.get("expected")
    other = next(k for k in options if k not in want)
    compiled = compile_options(options)
    wanted = c.get("section")
    targets = [wanted] if isinstance(wanted, str) else list(wanted)
    sections = scenario.deliverable(c.file).required_sections
    changed = []

    def swap(body: list[str], section: str | None) -> list[str]:
        # One section stating the wrong decision is enough to fail the criterion; renaming in the next ones too
        # (a flattened table among them) would take away figures other criteria read.
        if section is None or not body or changed:
            return body
        # A section with a table keeps its lines, so each row stays a row (joined, the table would read as one row).
        rows = any(_TABLE_CELL in line for line in body)
        text = "\n".join(body) if rows else " ".join(body)
        inside = [k for k in want if k in read_set(text, options, **set_reading(c)).inside]
        if not inside:
            return body
        for k in inside:
            text = compiled[k].sub(other, text)
        changed.append(section)
        return text.split("\n") if rows else [text]

    def tr(lines: list[str]) -> list[str]:
        out, body, current = [], [], None
        for line in lines:
            heading = next((s for s in sections if heading_matches(line, s)), None)
            if heading is None:
                body.append(line)
                continue
            out += swap(body, current)
            out.append(line)
            body, current = [], next((t for t in targets if t.lower() == heading.lower()), None)
        return out + swap(body, current)

    _rewrite_document(_out(workspace, c.file), tr, sections)
    if not changed:
        raise DefectNotApplicable(
            f"{c.file}: no section of {targets} names {', '.join(want)} as one that {c.get('property')}"
        )
    return (
        f"named {other} instead of {', '.join(want)} as one that {c.get('property')} in "
        f"{', '.join(repr(s) for s in changed)} of {c.file}"
    )


def breach_bound(scenario: Scenario, c: Criterion, workspace: Path, *, recalculator=None) -> str:
    """Move money between two lines of a bounds criterion so that one leaves the bounds and the total stays.

    The line with the largest value is raised past the maximum by a round
    amount (10 % of the maximum), taken from the line with the most room
    above the minimum, which stays within the bounds; with a minimum only,
    the smallest line is cut below it and the amount given to the largest.
    Lines that another criterion of the same file reads are left alone, so
    this criterion alone fails.
    """
    import math

    from pilot.oracles.criteria import label_cells, label_pattern, normalise_label, value_cell
    from pilot.oracles.evaluate import default_recalculator

    path = _out(workspace, c.file)
    rec = (recalculator or default_recalculator()).recalculate([path])[path]
    if rec.error or rec.path is None:
        raise DefectNotApplicable(f"{c.file}: {rec.error}")
    values, wb = _load(rec.path, data_only=True), _load(path)
    others = [
        label_pattern(o.get("label"))
        for o in scenario.oracle.criteria
        if o.file == c.file and o.id != c.id and o.get("label")
    ]
    lines = []
    for ws in [wb[c.get("sheet")]] if c.get("sheet") else wb.worksheets:
        for label in c.get("labels"):
            for cell in label_cells(ws, label):
                vcell, _ = value_cell(ws, cell, c.get("column"))
                val = parse_number(values[ws.title][vcell.coordinate].value) if vcell is not None else None
                if val is not None and not any(o.fullmatch(normalise_label(cell.value)) for o in others):
                    lines.append((val, ws, vcell, cell.value))
    if len(lines) < 2:
        raise DefectNotApplicable(f"{c.file}: fewer than two lines of {c.id} that no other criterion reads")
    lo, hi = c.get("minimum"), c.get("maximum")
    lines.sort(key=lambda t: t[0])
    if hi is not None:
        (val, ws, target, label), donor = lines[-1], lines[0 if lo is None else -2]
        delta = math.ceil((hi * 1.1 - val) / 1000) * 1000
        if lo is not None and donor[0] - delta < lo:
            raise DefectNotApplicable(f"{c.file}: no line can give {delta:,} and stay at or above {lo:,}")
    else:
        (val, ws, target, label), donor = lines[0], lines[-1]
        delta = -(math.ceil((val - lo * 0.9) / 1000) * 1000)
    _shift(target, delta)
    _shift(donor[2], -delta)
    _save(wb, path)
    return (
        f"moved {abs(delta):,} {'to' if delta > 0 else 'from'} {ws.title}!{target.coordinate} ({label!r}) "
        f"{'from' if delta > 0 else 'to'} {donor[1].title}!{donor[2].coordinate} ({donor[3]!r}) in {c.file}, outside "
        f"the bounds of {c.id}"
    )


# --------------------------------------------------------------------------
# Completion record, inputs, substitutes
# --------------------------------------------------------------------------


def break_completion_record(workspace: Path, how: str = "status") -> str:
    """'status': a status outside the schema; 'json': not JSON at all."""
    path = _out(workspace, COMPLETION_RECORD)
    if how == "json":
        path.write_text('{"status": "completed", "deliverables": [', encoding="utf-8")
        return "wrote an unterminated completion record"
    rec = _record(workspace) or {}
    rec["status"] = "done"
    _save_record(workspace, rec)
    return "set the completion record's status to 'done' (not in the schema)"


def modify_input(workspace: Path, rel: str | None = None) -> str:
    files = sorted(p for p in (Path(workspace) / "inputs").rglob("*") if p.is_file())
    target = (Path(workspace) / "inputs" / rel) if rel else files[0]
    with open(target, "ab") as fh:
        fh.write(b"\n")
    return f"modified inputs/{target.relative_to(Path(workspace) / 'inputs').as_posix()}"


def delete_input(workspace: Path, rel: str | None = None) -> str:
    files = sorted(p for p in (Path(workspace) / "inputs").rglob("*") if p.is_file())
    target = (Path(workspace) / "inputs" / rel) if rel else files[-1]
    target.unlink()
    return f"deleted inputs/{target.relative_to(Path(workspace) / 'inputs').as_posix()}"


def add_input(workspace: Path, rel: str = "scratch_notes.txt") -> str:
    target = Path(workspace) / "inputs" / rel
    target.write_text("working notes\n", encoding="utf-8")
    return f"added inputs/{rel}"


def text_substitute(
    workspace: Path, name: str, *, recalculator=None, reason: str = "no program available to write the binary format"
) -> str:
    """Replace a binary deliverable by its closest text equivalent under the same base name, declared in the record."""
    path = _out(workspace, name)
    suffix = path.suffix.lower()
    written: list[str] = []
    if suffix == ".xlsx":
        from pilot.oracles.evaluate import default_recalculator

        rec = (recalculator or default_recalculator()).recalculate([path])[path]
        wb = _load(rec.path if rec.path else path, data_only=True)
        for ws in wb.worksheets:
            target = (
                path.with_suffix(".csv") if len(wb.worksheets) == 1 else path.with_name(f"{path.stem}.{ws.title}.csv")
            )
            rows = [["" if v is None else v for v in r] for r in ws.iter_rows(values_only=True)]
            write_csv(target, rows[0] if rows else [], rows[1:])
            written.append(target.name)
    elif suffix in (".docx", ".pdf", ".pptx"):
        lines = _readable_lines(path)
        target = path.with_suffix(".md")
        target.write_text("\n\n".join(line for line in lines if line.strip()) + "\n", encoding="utf-8")
        written.append(target.name)
    else:
        raise DefectNotApplicable(f"{name} is already a text format")
    path.unlink()
    rec = _record(workspace)
    if rec is not None:
        rec["deliverables"] = [d for d in rec.get("deliverables", []) if d != name] + written
        rec.setdefault("substitutions", []).extend(
            {"requested": name, "delivered": w, "reason": reason} for w in written
        )
        _save_record(workspace, rec)
    return f"delivered {', '.join(written)} in place of {name}"


# --------------------------------------------------------------------------
# Declared edits: a trap's fallen package made from the gold (oracle.yml, traps[].fallen)
# --------------------------------------------------------------------------


def set_workbook_cell(workspace: Path, name: str, sheet: str, cell: str, value: object) -> str:
    """Type ``value`` (a figure, text or a formula) over one cell of workbook ``name``; the description says what was
    there before."""
    path = _out(workspace, name)
    wb = _load(path)
    ws = _sheet_named(wb, sheet)[0]
    old = ws[cell].value
    ws[cell] = value
    _save(wb, path)
    return f"set {ws.title}!{cell} of {name}: {shown(old)} -> {shown(value)}"


def reword(workspace: Path, name: str, text: str, becomes: str, sections: tuple[str, ...] = ()) -> str:
    """Replace every occurrence of ``text`` (any run of whitespace matching a space) by ``becomes`` in a document or
    CSV deliverable; the text must be there, or the edit would change nothing."""
    path = _out(workspace, name)
    pattern = re.compile(r"\s+".join(re.escape(part) for part in text.split()))
    short = text if len(text) <= 60 else text[:57] + "..."
    if path.suffix.lower() == ".csv":
        raw = path.read_text(encoding="utf-8")
        n = len(pattern.findall(raw))
        if not n:
            raise DefectNotApplicable(f"{name} does not contain {short!r}")
        path.write_text(pattern.sub(lambda _: becomes, raw), encoding="utf-8")
        return f"reworded {short!r} in {name} ({n}x)"
    found: list[int] = []

    def tr(lines: list[str]) -> list[str]:
        joined = "\n".join(lines)
        found.append(len(pattern.findall(joined)))
        return pattern.sub(lambda _: becomes, joined).split("\n")

    lines = _readable_lines(path)
    if not pattern.search("\n".join(line for line in lines if line.strip())):
        raise DefectNotApplicable(f"{name} does not contain {short!r}")
    _rewrite_document(path, tr, sections)
    return f"reworded {short!r} in {name} ({found[0]}x)"


def apply_fallen_edit(scenario: Scenario, workspace: Path, edit) -> str:
    """Apply one edit of a trap's ``fallen`` list (a :class:`pilot.protocol.scenario.FallenEdit`) to a gold copy."""
    if edit.form == "cell":
        value = edit.get("value")
        if edit.get("date") is not None:
            import datetime as dt

            value = dt.datetime.fromisoformat(edit.get("date"))
        return set_workbook_cell(workspace, edit.file, edit.get("sheet"), edit.get("cell"), value)
    if edit.form == "text":
        sections = scenario.deliverable(edit.file).required_sections
        return reword(workspace, edit.file, edit.get("text"), edit.get("becomes"), sections)
    return set_csv_cell(
        workspace, edit.file, edit.get("key"), edit.get("key_value"), edit.get("column"), edit.get("value")
    )


# --------------------------------------------------------------------------
# Systematic: one defect per criterion
# --------------------------------------------------------------------------


def _wrong(expected: float, tol: float) -> float:
    return round(expected + max(1000.0, abs(expected) * 0.5) + 10 * tol, 2)


def _snippets(scenario: Scenario, workspace: Path, file: str, skip: str) -> tuple[str, ...]:
    """Quotes from a document that satisfy its other text criteria, kept when it is thinned."""
    lines = _readable_lines(_out(workspace, file))
    text = re.sub(r"\s+", " ", " ".join(lines))
    out: list[str] = []
    for c in scenario.oracle.criteria:
        if c.file != file or c.id == skip:
            continue
        if c.kind == "text_contains":
            for p in c.get("patterns"):
                m = re.search(p, text, re.I)
                if m:
                    out.append(m.group(0))
        elif c.kind == "text_number":
            tok = next((t for v, t, _ in numbers_in(text) if abs(v - c.get("expected")) <= c.get("tolerance")), None)
            if tok:
                near = (
                    re.search(c.get("near"), text, re.I).group(0)
                    if c.get("near") and re.search(c.get("near"), text, re.I)
                    else ""
                )
                out.append(f"{near} {tok}".strip())
    return tuple(out)


def _decision_clauses(scenario: Scenario, workspace: Path, file: str) -> dict[str, tuple[str, ...]]:
    """section -> the clauses that state the decisions the oracle reads there, kept when a document is thinned."""
    from pilot.oracles.criteria import section_text
    from pilot.oracles.decisions import read_decision, read_set

    lines = _readable_lines(_out(workspace, file))
    out: dict[str, tuple[str, ...]] = {}
    for c in scenario.oracle.criteria:
        if c.file == file and c.kind == "decision":
            wanted = c.get("section")
            for section in [wanted] if isinstance(wanted, str) else wanted:
                text = section_text(lines, section, scenario.deliverable(file).required_sections) or ""
                if isinstance(c.get("expected"), list):
                    # Sentences whole: an elliptic clause ("Hillcrest did not") needs the one before it.
                    read = read_set(text, dict(c.get("options")), **set_reading(c))
                    lines_in = text.splitlines()
                    prose = " ".join(line for line in lines_in if _TABLE_CELL not in line)
                    kept = tuple(
                        s
                        for s in re.split(r"(?<=[.!?])\s+", " ".join(prose.split()))
                        if any(q in s for q in read.clauses)
                    )
                    # A table that states the decision is kept whole, header first, each row a line of its own.
                    rows = [line for line in lines_in if _TABLE_CELL in line]
                    if any(" ".join(q.split()) in " ".join(r.split()) for r in rows for q in read.clauses):
                        kept += tuple(rows)
                else:
                    kept = tuple(read_decision(text, dict(c.get("options"))).clauses)
                out[section] = out.get(section, ()) + kept
    return out


def defect_for_criterion(
    scenario: Scenario,
    criterion: Criterion | str,
    workspace: Path,
    *,
    recalculator=None,
    wrong: float | None = None,
    stated: float | None = None,
) -> str:
    """Apply the defect that makes ``criterion`` (and only it) fail on a gold workspace.

    A numeric criterion's figure becomes ``wrong`` (by default far outside its tolerance); ``stated`` is the figure
    the gold shows on a labelled line, from which a line that feeds a total is shifted (by default the criterion's
    expected value).
    """
    c = scenario.oracle.by_id(criterion) if isinstance(criterion, str) else criterion
    if wrong is None and c.kind in ("labelled_value", "text_number", "csv_value"):
        wrong = _wrong(c.get("expected"), c.get("tolerance"))
    d = scenario.deliverable(c.file)
    sections = d.required_sections
    k = c.kind
    if k == "present":
        return drop_deliverable(workspace, c.file)
    if k == "well_formed":
        return corrupt_file(workspace, c.file)
    if k == "formulas":
        return strip_formulas(workspace, c.file, recalculator=recalculator)
    if k == "no_error_values":
        return inject_error_value(workspace, c.file)
    if k == "labelled_value":
        avoid = tuple(
            o.get("label")
            for o in scenario.oracle.criteria
            if o.file == c.file and o.kind == "labelled_value" and o.id != c.id
        )
        return misstate_labelled_value(
            workspace,
            c.file,
            c.get("label"),
            wrong,
            c.get("sheet"),
            c.get("column"),
            expected=c.get("expected") if stated is None else stated,
            avoid_labels=avoid,
        )
    if k == "workbook_contains":
        return remove_workbook_text(workspace, c.file, c.get("patterns")[0])
    if k == "min_words":
        return truncate_document(
            workspace,
            c.file,
            _snippets(scenario, workspace, c.file, c.id),
            sections,
            _decision_clauses(scenario, workspace, c.file),
        )
    if k == "sections":
        return rename_section(workspace, c.file, sections[0], sections)
    if k == "text_contains":
        return remove_text(workspace, c.file, c.get("patterns")[0], sections)
    if k == "text_number":
        return replace_number(workspace, c.file, c.get("expected"), c.get("tolerance"), wrong, sections)
    if k == "csv_columns":
        used = {
            str(o.get(p)).lower()
            for o in scenario.oracle.criteria
            if o.file == c.file and o.id != c.id
            for p in ("key", "column")
        }
        candidates = [col for col in c.get("columns") if col.lower() not in used]
        if not candidates:
            raise DefectNotApplicable(f"{c.id}: every required column is used by another criterion")
        return rename_csv_column(workspace, c.file, candidates[-1])
    if k == "csv_keys":
        used = {
            str(o.get("key_value")).lower()
            for o in scenario.oracle.criteria
            if o.file == c.file and o.kind == "csv_value"
        }
        key = next((x for x in c.get("expected") if x.lower() not in used), None)
        if key is None:
            raise DefectNotApplicable(f"{c.id}: every expected key is checked by a csv_value criterion")
        return drop_csv_rows(workspace, c.file, c.get("key"), key)
    if k == "csv_value":
        return change_csv_value(workspace, c.file, c.get("key"), c.get("key_value"), c.get("column"), wrong)
    if k == "completion_record":
        return break_completion_record(workspace)
    if k == "decision":
        return wrong_decision(scenario, c, workspace)
    if k == "labelled_bounds":
        return breach_bound(scenario, c, workspace, recalculator=recalculator)
    if k == "closed_scale":
        keys = tuple(
            o.get("key_value")
            for o in scenario.oracle.criteria
            if o.file == c.file and o.kind == "decision" and o.get("key_value")
        )
        key = next(
            (
                o.get("key")
                for o in scenario.oracle.criteria
                if o.file == c.file and o.kind == "decision" and o.get("key")
            ),
            None,
        )
        return off_scale_value(workspace, c.file, c.get("column"), avoid_keys=keys, key=key)
    raise DefectNotApplicable(f"no defect for criterion kind {k}")


# --------------------------------------------------------------------------
# Named defects for the simulated agent
# --------------------------------------------------------------------------


def _pick(rng: np.random.Generator, items: list):
    if not items:
        raise DefectNotApplicable("nothing to apply the defect to")
    return items[int(rng.integers(len(items)))]


def _crit(scenario: Scenario, kinds: set[str]) -> list[Criterion]:
    return [c for c in scenario.oracle.criteria if c.kind in kinds]


@dataclass(frozen=True)
class Planted:
    """A named defect as planted: what was done, the criteria it declares it breaks, and whether it touches an input."""

    description: str
    breaks: tuple[str, ...] = ()
    critical: bool = False


def _file_criteria(sc: Scenario, name: str, kinds: frozenset[str]) -> tuple[str, ...]:
    return tuple(c.id for c in sc.oracle.criteria if c.file == name and c.kind in kinds)


def _on_file(
    make: Callable[[Path, str], str], pick: Callable[[Scenario], list[str]], kinds: frozenset[str]
) -> Callable[[Scenario, Path, np.random.Generator], Planted]:
    # A defect of one file declares the criteria of that file, of these kinds, that fail on their own (the file's
    # other criteria may then be blocked by them).
    def plant(sc: Scenario, ws: Path, g: np.random.Generator) -> Planted:
        name = _pick(g, pick(sc))
        return Planted(make(ws, name), _file_criteria(sc, name, kinds))

    return plant


def _on_criterion(
    kinds: set[str] | None = None, required_decisions: bool = False
) -> Callable[[Scenario, Path, np.random.Generator], Planted]:
    # A defect made for one criterion: it declares that criterion alone.
    def plant(sc: Scenario, ws: Path, g: np.random.Generator) -> Planted:
        pool = [c for c in _crit(sc, {"decision"}) if c.required] if required_decisions else _crit(sc, kinds or set())
        c = _pick(g, pool)
        return Planted(defect_for_criterion(sc, c, ws), (c.id,))

    return plant


def _on_record(sc: Scenario, ws: Path, g: np.random.Generator) -> Planted:
    how = _pick(g, ["status", "json"])
    return Planted(
        break_completion_record(ws, how), tuple(c.id for c in sc.oracle.criteria if c.kind == "completion_record")
    )


def _on_input(make: Callable[[Path], str]) -> Callable[[Scenario, Path, np.random.Generator], Planted]:
    def plant(sc: Scenario, ws: Path, g: np.random.Generator) -> Planted:
        return Planted(make(ws), critical=True)

    return plant


def _substitute(sc: Scenario, ws: Path, g: np.random.Generator) -> Planted:
    name = _pick(g, [d.name for d in sc.file_deliverables if d.kind in ("xlsx", "docx", "pdf", "pptx")])
    return Planted(
        text_substitute(ws, name), tuple(c.id for c in sc.oracle.criteria if c.file == name and c.kind == "present")
    )


def _files(sc: Scenario) -> list[str]:
    return [d.name for d in sc.file_deliverables]


#: The named defects the simulated agent and the scripted worker plant, each drawing its target with the generator
#: it is given and declaring the criteria it breaks (``pilot scenarios check`` proves each declaration).
PLANTERS: dict[str, Callable[[Scenario, Path, np.random.Generator], Planted]] = {
    "drop_deliverable": _on_file(drop_deliverable, _files, frozenset({"present"})),
    "empty_file": _on_file(empty_file, _files, frozenset({"present", "well_formed"})),
    "corrupt_file": _on_file(corrupt_file, _files, frozenset({"present", "well_formed"})),
    "strip_formulas": _on_file(
        strip_formulas,
        lambda sc: [d.name for d in sc.file_deliverables if d.requires_formulas],
        frozenset({"formulas"}),
    ),
    "inject_error_value": _on_file(
        inject_error_value,
        lambda sc: [d.name for d in sc.file_deliverables if d.kind == "xlsx"],
        frozenset({"no_error_values"}),
    ),
    "wrong_value": _on_criterion({"labelled_value", "text_number", "csv_value"}),
    "omit_fact": _on_criterion({"text_contains", "workbook_contains", "csv_keys"}),
    "truncate_document": _on_criterion({"min_words"}),
    "drop_section": _on_criterion({"sections"}),
    "break_completion_record": _on_record,
    "modify_input": _on_input(modify_input),
    "delete_input": _on_input(delete_input),
    "add_input": _on_input(add_input),
    "text_substitute": _substitute,
    # One required decision stated wrongly (a wrong supplier, approval for decline, a wrong clinic).
    "wrong_decision": _on_criterion(required_decisions=True),
}


def expected_verdict(scenario: Scenario, planted: list[Planted]) -> tuple[bool | None, bool]:
    """What the oracle must say of a gold package with ``planted`` applied, from the declarations alone: (D, E).

    D falls when a planted defect's declared criteria are all required (whichever of them fails, acceptance
    falls), or when an input defect makes the run a critical violation (E); it stands when no declared criterion
    is required; it cannot be foretold (None) when a defect declares a mix.
    """
    required = {c.id: c.required for c in scenario.oracle.criteria}
    if any(p.critical for p in planted):
        return False, True  # a critical violation is never accepted
    verdict: bool | None = True
    for p in planted:
        flags = {required[c] for c in p.breaks}
        if flags == {True}:
            return False, False
        if flags == {True, False}:
            verdict = None
    return verdict, False


def applicable_defects(scenario: Scenario) -> list[str]:
    """Names of the defects that make sense for this scenario's deliverables."""
    kinds = {d.kind for d in scenario.file_deliverables}
    ck = {c.kind for c in scenario.oracle.criteria}
    out = [
        "drop_deliverable",
        "empty_file",
        "corrupt_file",
        "break_completion_record",
        "modify_input",
        "delete_input",
        "add_input",
    ]
    if any(d.requires_formulas for d in scenario.file_deliverables):
        out.append("strip_formulas")
    if "xlsx" in kinds:
        out.append("inject_error_value")
    if ck & {"labelled_value", "text_number", "csv_value"}:
        out.append("wrong_value")
    if ck & {"text_contains", "workbook_contains", "csv_keys"}:
        out.append("omit_fact")
    if "min_words" in ck:
        out.append("truncate_document")
    if "sections" in ck:
        out.append("drop_section")
    if kinds & {"xlsx", "docx", "pdf", "pptx"}:
        out.append("text_substitute")
    if any(c.kind == "decision" and c.required for c in scenario.oracle.criteria):
        out.append("wrong_decision")
    return out


def apply_defect(name: str, scenario: Scenario, workspace: Path, rng: np.random.Generator) -> str:
    """Apply the named defect to a gold workspace, choosing its target with ``rng``."""
    return plant_defect(name, scenario, workspace, rng).description


def plant_defect(name: str, scenario: Scenario, workspace: Path, rng: np.random.Generator) -> Planted:
    """Apply the named defect as :func:`apply_defect` does, and say which criteria it declares it breaks."""
    if name not in PLANTERS:
        raise KeyError(f"unknown defect {name!r}; known: {sorted(PLANTERS)}")
    return PLANTERS[name](scenario, Path(workspace), rng)


def copy_workspace(src: Path, dst: Path) -> Path:
    """A copy of a workspace (symlinks kept as links) to mutate."""
    if Path(dst).exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    return Path(dst)
