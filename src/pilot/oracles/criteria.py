"""One check per criterion kind of ``oracle.yml``.

Each function takes the workspace context and the criterion and returns
``(passed, reason)``; the reason says what was found and what was expected,
naming the file, sheet and cell, so a person can act on it. Workbook values
and error values are read only from the copy LibreOffice recalculated.
"""

from __future__ import annotations

import json
import re
from typing import Callable

import jsonschema

from pilot import paths
from pilot.oracles.context import WorkspaceContext, cells_of, find_substitutes
from pilot.oracles.readers import is_error_value, is_formula, numbers_in, parse_number, word_count
from pilot.scenarios.bundle import COMPLETION_RECORD, Criterion

Outcome = tuple[bool, str]


def _fmt(v: float) -> str:
    return f"{v:,.4f}".rstrip("0").rstrip(".") if abs(v) < 100 else f"{v:,.2f}"


def check_present(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    st = ctx.status(c.file)
    if st.ok:
        return True, f"{c.file} delivered ({st.path.stat().st_size} bytes)"
    return False, st.reason


def check_well_formed(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    reason = ctx.well_formed(c.file)
    if reason:
        return False, reason
    return True, f"{c.file} is a valid {ctx.deliverable(c.file).kind} file"


def _sheets(wb, c: Criterion):
    want = c.get("sheet")
    if not want:
        return list(wb.worksheets), None
    for ws in wb.worksheets:
        if ws.title.strip().lower() == want.strip().lower():
            return [ws], None
    return None, f"{c.file} has no sheet named {want!r} (sheets: {', '.join(ws.title for ws in wb.worksheets)})"


def check_formulas(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    wb, reason = ctx.workbook(c.file, data_only=False)
    if reason:
        return False, reason
    sheets, reason = _sheets(wb, c)
    if reason:
        return False, reason
    n = sum(1 for ws in sheets for cell in cells_of(ws) if is_formula(cell))
    need = int(c.get("min_count", 1))
    where = f"sheet {c.get('sheet')!r}" if c.get("sheet") else "the workbook"
    if n >= need:
        return True, f"{n} formula cells in {where} (at least {need} required)"
    return False, f"{n} formula cells in {where}; the brief asks for a working, formula-bearing workbook (at least {need} formulas expected)"


def check_no_error_values(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    wb, reason = ctx.recalculated(c.file)
    if reason:
        return False, reason
    errors = [f"{ws.title}!{cell.coordinate} = {cell.value}" for ws in wb.worksheets for cell in cells_of(ws) if is_error_value(cell)]
    if errors:
        more = f" and {len(errors) - 5} more" if len(errors) > 5 else ""
        return False, f"after recalculation {c.file} shows error values: {'; '.join(errors[:5])}{more}"
    return True, f"no error values in {c.file} after recalculation"


def _row_value(ws, label_cell, column_pat: str | None):
    cells = cells_of(ws)
    row = label_cell.row
    if column_pat:
        rx = re.compile(column_pat, re.I)
        header_col = None
        for cell in reversed(cells):
            if cell.row < row and isinstance(cell.value, (str, int)) and not isinstance(cell.value, bool) and rx.search(str(cell.value)):
                header_col = cell.column
                break
        if header_col is None:
            return None, f"no column headed /{column_pat}/ above {ws.title}!{label_cell.coordinate}"
        target = ws._cells.get((row, header_col)) if hasattr(ws, "_cells") else ws.cell(row, header_col)
        val = parse_number(target.value) if target is not None else None
        if val is None:
            coord = f"{ws.title}!{target.coordinate}" if target is not None else f"row {row}"
            return None, f"{coord} (under /{column_pat}/) holds no number"
        return (val, target), None
    for cell in cells:
        if cell.row == row and cell.column > label_cell.column:
            val = parse_number(cell.value)
            if val is not None:
                return (val, cell), None
    return None, f"no number to the right of the label at {ws.title}!{label_cell.coordinate}"


def check_labelled_value(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    wb, reason = ctx.recalculated(c.file)
    if reason:
        return False, reason
    sheets, reason = _sheets(wb, c)
    if reason:
        return False, reason
    rx = re.compile(c.get("label"), re.I)
    expected, tol = float(c.get("expected")), float(c.get("tolerance"))
    first_problem = None
    for ws in sheets:
        for cell in cells_of(ws):
            if isinstance(cell.value, str) and rx.search(cell.value):
                found, problem = _row_value(ws, cell, c.get("column"))
                if found is None:
                    first_problem = first_problem or problem
                    continue
                val, vcell = found
                if c.get("absolute"):
                    val = abs(val)
                ok = abs(val - expected) <= tol
                if not ok and c.get("also_accept_percent"):
                    ok = abs(val - 100 * expected) <= 100 * tol or abs(val / 100 - expected) <= tol
                where = f"{ws.title}!{vcell.coordinate}"
                if ok:
                    return True, f"{where} ({cell.value.strip()!r}) = {_fmt(val)}, expected {_fmt(expected)} ± {_fmt(tol)}"
                return False, f"{where} ({cell.value.strip()!r}) = {_fmt(val)}; expected {_fmt(expected)} ± {_fmt(tol)}"
    if first_problem:
        return False, f"{c.file}: label /{c.get('label')}/ found but {first_problem}"
    return False, f"{c.file}: no cell labelled /{c.get('label')}/ (after recalculation)"


def _mentions(c: Criterion, text: str) -> Outcome:
    """Whether ``text`` matches every one of the criterion's ``patterns`` (case-insensitive), naming those it lacks."""
    missing = [p for p in c.get("patterns") if not re.search(p, text, re.I)]
    if missing:
        return False, f"{c.file} does not mention: {', '.join(missing)}"
    return True, f"{c.file} mentions {', '.join(c.get('patterns'))}"


def check_workbook_contains(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    wb, reason = ctx.workbook(c.file, data_only=False)
    if reason:
        return False, reason
    texts = [str(cell.value) for ws in wb.worksheets for cell in cells_of(ws) if isinstance(cell.value, str) and not str(cell.value).startswith("=")]
    return _mentions(c, "\n".join(texts))


def check_min_words(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    lines, reason = ctx.lines(c.file)
    if reason:
        return False, reason
    n = word_count(lines)
    need = ctx.deliverable(c.file).min_words
    if n >= need:
        return True, f"{c.file} has {n} words (at least {need} required)"
    return False, f"{c.file} has {n} words; the brief asks for at least {need}"


_NUMBERING = re.compile(r"^\s*(?:#+\s*)?(?:[*_]+)?\s*(?:(?:\d+(?:\.\d+)*|[A-Z]|[ivxIVX]+)[.)]\s+)?")


def _heading_matches(line: str, section: str) -> bool:
    text = _NUMBERING.sub("", line).strip().strip("*_:").strip().lower()
    sec = section.lower()
    # "Summary" also matches a heading "Executive summary"; a short line only, never body text.
    return (text.startswith(sec) and len(text) <= len(sec) + 60) or (text.endswith(sec) and len(text) <= len(sec) + 30)


def check_sections(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    lines, reason = ctx.lines(c.file)
    if reason:
        return False, reason
    sections = ctx.deliverable(c.file).required_sections
    missing = [s for s in sections if not any(_heading_matches(line, s) for line in lines)]
    if missing:
        return False, f"{c.file} lacks the required section(s): {', '.join(missing)}"
    return True, f"{c.file} has every required section ({', '.join(sections)})"


def _flat(text: str) -> str:
    """Whitespace collapsed, so a phrase wrapped across PDF lines still matches."""
    return re.sub(r"\s+", " ", text)


def check_text_contains(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    text, reason = ctx.text(c.file)
    if reason:
        return False, reason
    return _mentions(c, _flat(text))


def check_text_number(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    text, reason = ctx.text(c.file)
    if reason:
        return False, reason
    text = _flat(text)
    expected, tol = float(c.get("expected")), float(c.get("tolerance"))
    nums = numbers_in(text)
    near = c.get("near")
    if near:
        spans = [m.span() for m in re.finditer(near, text, re.I)]
        if not spans:
            return False, f"{c.file} never mentions /{near}/, near which {_fmt(expected)} should be stated"
        nums = [n for n in nums if any(s - 200 <= n[2] <= e + 200 for s, e in spans)]
    for val, tok, _ in nums:
        if abs(val - expected) <= tol:
            return True, f"{c.file} states {tok} (expected {_fmt(expected)} ± {_fmt(tol)})"
    ctxt = f" near /{near}/" if near else ""
    return False, f"{c.file} never states {_fmt(expected)} ± {_fmt(tol)}{ctxt}"


def _col(header: list[str], name: str) -> int | None:
    low = [h.strip().lower() for h in header]
    return low.index(name.lower()) if name.lower() in low else None


def check_csv_columns(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    table, reason = ctx.csv(c.file)
    if reason:
        return False, reason
    header, _ = table
    missing = [col for col in c.get("columns") if _col(header, col) is None]
    if missing:
        return False, f"{c.file} lacks column(s) {', '.join(missing)} (header: {', '.join(header)})"
    return True, f"{c.file} has the columns {', '.join(c.get('columns'))}"


def check_csv_keys(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    table, reason = ctx.csv(c.file)
    if reason:
        return False, reason
    header, rows = table
    i = _col(header, c.get("key"))
    if i is None:
        return False, f"{c.file} has no column {c.get('key')!r}"
    cells = [r[i].strip() for r in rows]
    want = list(c.get("expected"))
    missing = [k for k in want if not any(key_token(k).search(v) for v in cells)]
    if missing:
        return False, f"{c.file} column {c.get('key')!r} lacks {', '.join(missing)}"
    if c.get("exact"):
        extra = [v for v in cells if not any(key_token(k).search(v) for k in want)]
        if extra:
            return False, f"{c.file} column {c.get('key')!r} lists {', '.join(extra)}, which should not be there"
    return True, f"{c.file} column {c.get('key')!r} lists {', '.join(want)}" + (" and nothing else" if c.get("exact") else "")


def key_token(key: str) -> "re.Pattern[str]":
    """A key as a whole token: '8.2' matches '8.2' and 'cl. 8.2 / Sch. B' but not '18.2' or '8.21'."""
    return re.compile(r"(?<![\w.])" + re.escape(key) + r"(?![\w]|\.\d)", re.I)


def check_csv_value(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    table, reason = ctx.csv(c.file)
    if reason:
        return False, reason
    header, rows = table
    ki, vi = _col(header, c.get("key")), _col(header, c.get("column"))
    if ki is None or vi is None:
        return False, f"{c.file} lacks column {c.get('key') if ki is None else c.get('column')!r}"
    expected, tol = float(c.get("expected")), float(c.get("tolerance"))
    for n, r in enumerate(rows, start=2):
        if r[ki].strip().lower() == c.get("key_value").lower():
            val = parse_number(r[vi])
            if val is None:
                return False, f"{c.file} row {n}: {c.get('column')} = {r[vi]!r} is not a number"
            if abs(val - expected) <= tol:
                return True, f"{c.file} row {n}: {c.get('column')} = {r[vi]} (expected {_fmt(expected)} ± {_fmt(tol)})"
            return False, f"{c.file} row {n} ({c.get('key_value')}): {c.get('column')} = {r[vi]}; expected {_fmt(expected)} ± {_fmt(tol)}"
    return False, f"{c.file} has no row with {c.get('key')} = {c.get('key_value')}"


_SCHEMA_CACHE: dict = {}


def completion_schema() -> dict:
    if "schema" not in _SCHEMA_CACHE:
        _SCHEMA_CACHE["schema"] = json.loads(paths.COMPLETION_SCHEMA_FILE.read_text(encoding="utf-8"))
    return _SCHEMA_CACHE["schema"]


def check_completion_record(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    record, reason = ctx.json(c.file)
    if reason:
        return False, reason
    errors = sorted(jsonschema.Draft202012Validator(completion_schema()).iter_errors(record), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "<root>"
        return False, f"{c.file} does not match protocol/completion_record.schema.json: field '{where}': {e.message}"
    problems = []
    outputs = ctx.outputs
    for name in record["deliverables"]:
        if name != COMPLETION_RECORD and not (outputs / name).is_file():
            problems.append(f"lists {name}, which is not in outputs/")
    declared = {s["delivered"] for s in record["substitutions"]}
    for s in record["substitutions"]:
        if not (outputs / s["delivered"]).is_file():
            problems.append(f"declares the substitute {s['delivered']}, which is not in outputs/")
    for d in ctx.scenario.file_deliverables:
        if (outputs / d.name).exists():
            continue
        subs = find_substitutes(outputs, d)
        undeclared = [p.name for p in subs if p.name not in declared]
        if undeclared:
            problems.append(f"does not declare the substitution of {', '.join(undeclared)} for {d.name}")
        if not subs and record["status"] == "completed":
            problems.append(f"says 'completed' but {d.name} was not delivered")
    if problems:
        return False, f"{c.file} " + "; ".join(problems)
    return True, f"{c.file} is valid (status {record['status']}, {len(record['questions'])} question(s))"


CHECKS: dict[str, Callable[[WorkspaceContext, Criterion], Outcome]] = {
    "present": check_present,
    "well_formed": check_well_formed,
    "formulas": check_formulas,
    "no_error_values": check_no_error_values,
    "min_words": check_min_words,
    "sections": check_sections,
    "completion_record": check_completion_record,
    "labelled_value": check_labelled_value,
    "workbook_contains": check_workbook_contains,
    "text_contains": check_text_contains,
    "text_number": check_text_number,
    "csv_columns": check_csv_columns,
    "csv_keys": check_csv_keys,
    "csv_value": check_csv_value,
}
