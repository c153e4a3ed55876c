"""One check per criterion kind of ``oracle.yml``.

Each function takes the workspace context and the criterion and returns
``(passed, reason)``; the reason says what was found and what was expected,
naming the file, sheet and cell, so a person can act on it. Workbook values
and error values are read only from the copy LibreOffice recalculated.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from decimal import Decimal

from pilot import paths
from pilot.oracles import amounts
from pilot.oracles.amounts import exact, show
from pilot.oracles.context import WorkspaceContext, cells_of, find_substitutes
from pilot.oracles.decisions import SetDecision, read_decision, read_set
from pilot.oracles.readers import is_error_value, is_formula, numbers_in, word_count
from pilot.protocol.scenario import COMPLETION_RECORD, Criterion

Outcome = tuple[bool, str]


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
    return (
        False,
        (
            f"{n} formula cells in {where}; the brief asks for a working, formula-bearing workbook (at least "
            f"{need} formulas expected)"
        ),
    )


def check_no_error_values(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    links = ctx.external_links(c.file)
    if links:
        return False, (
            f"{c.file} links to other workbooks ({', '.join(links[:3])}): the values taken from them are cached copies "
            "that cannot be recalculated or verified here"
        )
    wb, reason = ctx.recalculated(c.file)
    if reason:
        return False, reason
    errors = [
        f"{ws.title}!{cell.coordinate} = {cell.value}"
        for ws in wb.worksheets
        for cell in cells_of(ws)
        if is_error_value(cell)
    ]
    if errors:
        more = f" and {len(errors) - 5} more" if len(errors) > 5 else ""
        return False, f"after recalculation {c.file} shows error values: {'; '.join(errors[:5])}{more}"
    return True, f"no error values in {c.file} after recalculation"


# A label cell may carry a sign word before the label ("Less: outstanding cheques") and a qualifier after it
# ("Total unit cost (CAD)", "Balance per bank statement, 31 Oct 2026"); nothing else.
_LABEL_HEAD = r"(?:(?:add|less|plus|minus)\s*:?\s*)?"
_LABEL_TAIL = r"(?:\s*[,(\[:\u2013\u2014-].*|\s+(?:at|as at|as of|for|on|in)\b.*)?"


def normalise_label(text: str) -> str:
    """A label cell as compared: Unicode-normalised, case-folded, whitespace collapsed, no trailing colon."""
    t = " ".join(unicodedata.normalize("NFKC", text).split()).casefold()
    return t.rstrip(":").strip()


def label_pattern(label: str) -> re.Pattern[str]:
    """The criterion's label as a whole-cell pattern (anchors written in the oracle file are redundant)."""
    core = re.sub(r"^\^?(?:\\s\*)?", "", label)
    core = re.sub(r"(?:\\s\*)?\$?$", "", core)
    return re.compile(_LABEL_HEAD + "(?:" + core + ")" + _LABEL_TAIL, re.I)


def label_cells(ws, label: str) -> list:
    """Every cell of ``ws`` whose whole (normalised) text is the label."""
    rx = label_pattern(label)
    return [
        cell
        for cell in cells_of(ws)
        if isinstance(cell.value, str) and not cell.value.startswith("=") and rx.fullmatch(normalise_label(cell.value))
    ]


def _stored(ws, row: int, col: int):
    store = getattr(ws, "_cells", None)
    return store.get((row, col)) if store is not None else ws.cell(row, col)


def value_cell(ws, label_cell, column_pat: str | None):
    """(cell, None) holding the line's value, or (None, reason).

    Without a column, the value is the first non-empty cell to the right of
    the label (the brief's "label in one cell and the value in the cell to
    its right"); with one, the cell of the label's row under the nearest
    header above it that matches the column pattern.
    """
    row = label_cell.row
    if column_pat:
        rx = re.compile(column_pat, re.I)
        header_col = None
        for cell in reversed(cells_of(ws)):
            if (
                cell.row < row
                and isinstance(cell.value, (str, int))
                and not isinstance(cell.value, bool)
                and rx.search(str(cell.value))
            ):
                header_col = cell.column
                break
        if header_col is None:
            return None, f"no column headed /{column_pat}/ above {ws.title}!{label_cell.coordinate}"
        target = _stored(ws, row, header_col)
        if target is None or target.value is None or (isinstance(target.value, str) and not target.value.strip()):
            return (
                None,
                f"{ws.title}!{label_cell.coordinate.rstrip('0123456789')}{row} row has nothing under /{column_pat}/",
            )
        return target, None
    for cell in sorted(
        (c for c in cells_of(ws) if c.row == row and c.column > label_cell.column), key=lambda c: c.column
    ):
        if cell.value is None or (isinstance(cell.value, str) and not cell.value.strip()):
            continue
        return cell, None
    return None, f"nothing to the right of the label at {ws.title}!{label_cell.coordinate}"


def _numeric(cell) -> tuple[Decimal | None, str | None]:
    """A value cell as an exact number, or the reason it is not one (text that reads as a number is named)."""
    if amounts.stored_as_text(cell.value):
        return None, f"holds {cell.value!r} stored as text, not a number"
    val = amounts.cell_decimal(cell.value)
    if val is None:
        return None, f"holds {cell.value!r}, not a number"
    return val, None


def _recalculated_sheets(ctx: WorkspaceContext, c: Criterion):
    """The criterion's sheets of the recalculated workbook, or (None, reason)."""
    wb, reason = ctx.recalculated(c.file)
    if reason:
        return None, reason
    return _sheets(wb, c)


def labelled_numbers(
    sheets, label: str, column: str | None
) -> tuple[list[tuple[str, str, Decimal]], list[str], list[str]]:
    """Every value on a line whose whole label cell is ``label``: ((cell, label text, exact number) read, problems,
    the problems that are numbers stored as text).

    A problem is a label with no value where one is expected, or a value
    that is not a number (text that reads as one is named "stored as text").
    """
    read: list[tuple[str, str, Decimal]] = []
    problems: list[str] = []
    as_text: list[str] = []
    for ws in sheets:
        for cell in label_cells(ws, label):
            vcell, problem = value_cell(ws, cell, column)
            if vcell is None:
                problems.append(problem)
                continue
            val, problem = _numeric(vcell)
            if val is None:
                problems.append(f"{ws.title}!{vcell.coordinate} ({cell.value.strip()!r}) {problem}")
                if amounts.stored_as_text(vcell.value):
                    as_text.append(problems[-1])
                continue
            read.append((f"{ws.title}!{vcell.coordinate}", cell.value.strip(), val))
    return read, problems, as_text


def check_labelled_value(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    """The value on the line whose whole label cell is the criterion's label, compared exactly.

    When several cells carry the label, every one that has a value must
    agree; the reason names the cells read.
    """
    sheets, reason = _recalculated_sheets(ctx, c)
    if reason:
        return False, reason
    expected, tol = exact(c.get("expected")), exact(c.get("tolerance"))
    read, problems, stated = labelled_numbers(sheets, c.get("label"), c.get("column"))
    if not read:
        if problems:
            return False, f"{c.file}: label /{c.get('label')}/ found but " + "; ".join(problems[:3])
        return False, f"{c.file}: no cell labelled /{c.get('label')}/ (whole cell; after recalculation)"
    if stated:
        return False, f"{c.file}: " + "; ".join(stated[:3])

    def ok(val: Decimal) -> bool:
        v = abs(val) if c.get("absolute") else val
        if amounts.within(v, expected, tol):
            return True
        return bool(c.get("also_accept_percent")) and (
            amounts.within(v, 100 * expected, 100 * tol) or amounts.within(v / 100, expected, tol)
        )

    values = {v for _, _, v in read}
    where = ", ".join(f"{w} ({lab!r}) = {show(v)}" for w, lab, v in read)
    if len(read) > 1 and not all(ok(v) for v in values) and len(values) > 1:
        return (
            False,
            (
                f"{c.file}: the label /{c.get('label')}/ appears {len(read)} times with different values: "
                f"{where}; expected {show(expected)} ± {show(tol)}"
            ),
        )
    if all(ok(v) for _, _, v in read):
        return True, f"{where}, expected {show(expected)} ± {show(tol)}" + (
            f" ({len(read)} cells read, all agree)" if len(read) > 1 else ""
        )
    return False, f"{where}; expected {show(expected)} ± {show(tol)}"


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
    texts = [
        str(cell.value)
        for ws in wb.worksheets
        for cell in cells_of(ws)
        if isinstance(cell.value, str) and not str(cell.value).startswith("=")
    ]
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


def heading_matches(line: str, section: str) -> bool:
    text = _NUMBERING.sub("", line).strip().strip("*_:").strip().lower()
    sec = section.lower()
    # "Summary" also matches a heading "Executive summary"; a short line only, never body text.
    return (text.startswith(sec) and len(text) <= len(sec) + 60) or (text.endswith(sec) and len(text) <= len(sec) + 30)


def check_sections(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    lines, reason = ctx.lines(c.file)
    if reason:
        return False, reason
    sections = ctx.deliverable(c.file).required_sections
    missing = [s for s in sections if not any(heading_matches(line, s) for line in lines)]
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
    expected, tol = exact(c.get("expected")), exact(c.get("tolerance"))
    nums = numbers_in(text)
    near = c.get("near")
    if near:
        spans = [m.span() for m in re.finditer(near, text, re.I)]
        if not spans:
            return False, f"{c.file} never mentions /{near}/, near which {show(expected)} should be stated"
        nums = [n for n in nums if any(s - 200 <= n[2] <= e + 200 for s, e in spans)]
    for _, tok, _ in nums:
        val = amounts.text_decimal(tok)
        if val is not None and amounts.within(val, expected, tol):
            return True, f"{c.file} states {tok} (expected {show(expected)} ± {show(tol)})"
    ctxt = f" near /{near}/" if near else ""
    return False, f"{c.file} never states {show(expected)} ± {show(tol)}{ctxt}"


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


def _csv_column(ctx: WorkspaceContext, c: Criterion, column: str):
    """((rows, index of ``column``), None) for the criterion's CSV, or (None, reason)."""
    table, reason = ctx.csv(c.file)
    if reason:
        return None, reason
    header, rows = table
    i = _col(header, column)
    if i is None:
        return None, f"{c.file} has no column {column!r}"
    return (rows, i), None


def check_csv_keys(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    found, reason = _csv_column(ctx, c, c.get("key"))
    if reason:
        return False, reason
    rows, i = found
    cells = [r[i].strip() for r in rows]
    want = list(c.get("expected"))
    missing = [k for k in want if not any(key_token(k).search(v) for v in cells)]
    if missing:
        return False, f"{c.file} column {c.get('key')!r} lacks {', '.join(missing)}"
    if c.get("exact"):
        extra = [v for v in cells if not any(key_token(k).search(v) for k in want)]
        if extra:
            return False, f"{c.file} column {c.get('key')!r} lists {', '.join(extra)}, which should not be there"
    return True, f"{c.file} column {c.get('key')!r} lists {', '.join(want)}" + (
        " and nothing else" if c.get("exact") else ""
    )


def key_token(key: str) -> re.Pattern[str]:
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
    expected, tol = exact(c.get("expected")), exact(c.get("tolerance"))
    for n, r in enumerate(rows, start=2):
        if r[ki].strip().lower() == c.get("key_value").lower():
            val = amounts.text_decimal(r[vi])
            if val is None:
                return False, f"{c.file} row {n}: {c.get('column')} = {r[vi]!r} is not a number"
            if amounts.within(val, expected, tol):
                return True, f"{c.file} row {n}: {c.get('column')} = {r[vi]} (expected {show(expected)} ± {show(tol)})"
            return (
                False,
                (
                    f"{c.file} row {n} ({c.get('key_value')}): {c.get('column')} = {r[vi]}; expected "
                    f"{show(expected)} ± {show(tol)}"
                ),
            )
    return False, f"{c.file} has no row with {c.get('key')} = {c.get('key_value')}"


def _key_rows(c: Criterion, header: list[str], rows: list[list[str]]):
    """(line number, row) of the CSV rows whose key column names the criterion's key value as a whole token."""
    ki = _col(header, c.get("key"))
    tok = key_token(c.get("key_value"))
    return [(n, r) for n, r in enumerate(rows, start=2) if tok.search(r[ki])] if ki is not None else None


def section_text(lines: list[str], section: str, sections: tuple[str, ...]) -> str | None:
    """The text under the heading ``section`` up to the next required heading, or None when there is no such heading."""
    start = next((i for i, line in enumerate(lines) if heading_matches(line, section)), None)
    if start is None:
        return None
    others = [s for s in sections if s.lower() != section.lower()]
    end = next(
        (j for j in range(start + 1, len(lines)) if any(heading_matches(lines[j], s) for s in others)), len(lines)
    )
    return "\n".join(lines[start + 1 : end])


def _decision_places(ctx: WorkspaceContext, c: Criterion) -> tuple[list[tuple[str, str, bool]] | None, str | None]:
    """Where the decision is stated: (place, text, whole_cell) for each, or a reason."""
    kind = ctx.deliverable(c.file).kind
    if kind in ("docx", "pdf"):
        # A set is often stated in a table ("Complies: Yes / No"): a PDF's tables are read as rows for it.
        lines, reason = ctx.lines(c.file, layout=isinstance(c.get("expected"), list))
        if reason:
            return None, reason
        wanted = c.get("section")
        # Several sections: the decision is read in those present (a missing heading is the sections criterion's
        # failure).
        places = []
        for section in [wanted] if isinstance(wanted, str) else wanted:
            text = section_text(lines, section, ctx.deliverable(c.file).required_sections)
            if text is not None:
                places.append((f"section {section!r}", text, False))
        if not places:
            where = repr(wanted) if isinstance(wanted, str) else " or ".join(map(repr, wanted))
            return None, f"{c.file} has no section {where}, where the brief asks for the decision"
        return places, None
    if kind == "xlsx":
        sheets, reason = _recalculated_sheets(ctx, c)
        if reason:
            return None, reason
        places = []
        for ws in sheets:
            for cell in label_cells(ws, c.get("label")):
                vcell, _ = value_cell(ws, cell, None)
                if vcell is not None and isinstance(vcell.value, str):
                    places.append((f"{ws.title}!{vcell.coordinate} ({cell.value.strip()!r})", vcell.value, True))
        if not places:
            return None, f"{c.file}: no cell labelled /{c.get('label')}/ with a stated choice to its right"
        return places, None
    table, reason = ctx.csv(c.file)
    if reason:
        return None, reason
    header, rows = table
    vi = _col(header, c.get("column"))
    found = _key_rows(c, header, rows)
    if found is None or vi is None:
        return None, f"{c.file} lacks column {c.get('key') if found is None else c.get('column')!r}"
    if not found:
        return None, f"{c.file} has no row with {c.get('key')} = {c.get('key_value')}"
    return [
        (f"{c.file} row {n} ({c.get('key')} {r[_col(header, c.get('key'))].strip()!r}), {c.get('column')}", r[vi], True)
        for n, r in found
    ], None


def check_decision(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    """The decision the deliverable states where the brief asks for it, compared with the planted one."""
    places, reason = _decision_places(ctx, c)
    if reason:
        return False, reason
    options = dict(c.get("options"))
    want = c.get("expected")
    if isinstance(want, list):
        return _check_set_decision(c, places, options, want)
    problems, read = [], []
    for where, text, whole in places:
        d = read_decision(text, options, whole_cell=whole)
        verdict = d.verdict(list(options))
        if verdict is None:
            if not d.chosen and not d.rejected:
                problems.append(f"{where} states no choice among {', '.join(options)}")
            else:
                problems.append(
                    f"{where} does not decide one option (chosen: {', '.join(dict.fromkeys(d.chosen)) or 'none'}; "
                    f"rejected: {', '.join(dict.fromkeys(d.rejected)) or 'none'})"
                )
        elif verdict != want:
            quote = f": {d.clauses[0]!r}" if d.clauses else ""
            problems.append(f"{where} decides {verdict}, not {want}{quote}")
        else:
            read.append(where)
    if problems:
        return False, f"{c.file}: " + "; ".join(problems[:3])
    return True, f"{c.file}: {', '.join(read)} decides {want}"


def _check_set_decision(
    c: Criterion, places: list[tuple[str, str, bool]], options: dict[str, str], want: list[str]
) -> Outcome:
    """A set-valued decision ("name any clinic that misses the target"): exactly the planted options, each said to have
    the property."""
    found = SetDecision()
    for _, text, _ in places:
        found.merge(
            read_set(
                text,
                options,
                topic=c.get("topic"),
                property_verbs=c.get("property_verbs"),
                complement_verbs=c.get("complement_verbs"),
                plans=c.get("plans"),
            )
        )
    prop, where = c.get("property"), " and ".join(w for w, _, _ in places)
    problems = []
    for key in options:
        if key in want and key in found.outside:
            problems.append(f"says {key} {c.get('complement')} ({found.outside[key]!r}), but {key} {prop}")
        elif key in want and key not in found.inside:
            problems.append(f"does not name {key} as one that {prop}")
        elif key not in want and key in found.inside:
            problems.append(f"names {key} as one that {prop} ({found.inside[key]!r}), but {key} {c.get('complement')}")
        elif key not in want and c.get("state_all") and key not in found.outside:
            # The brief asks for every option's verdict ("whether the request complies", ratio by ratio).
            problems.append(f"does not say that {key} {c.get('complement')}")
    if problems:
        return False, f"{c.file} ({where}): " + "; ".join(problems[:3])
    named = ", ".join(want) if want else "none"
    return (
        True,
        f"{c.file} ({where}) names exactly {{{named}}} as {'the ones' if len(want) != 1 else 'the one'} that {prop}",
    )


def check_closed_scale(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    """Every value of a CSV column is one of the brief's scale (case and spacing aside)."""
    found, reason = _csv_column(ctx, c, c.get("column"))
    if reason:
        return False, reason
    rows, vi = found
    allowed = {normalise_label(v): v for v in c.get("values")}
    bad = [f"row {n}: {r[vi].strip()!r}" for n, r in enumerate(rows, start=2) if normalise_label(r[vi]) not in allowed]
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        return (
            False,
            (
                f"{c.file} column {c.get('column')!r} goes outside the brief's scale "
                f"({', '.join(c.get('values'))}): {'; '.join(bad[:5])}{more}"
            ),
        )
    return True, f"{c.file} column {c.get('column')!r} uses only {', '.join(c.get('values'))}"


def bounds_text(lo: Decimal | None, hi: Decimal | None) -> str:
    """The span a bounds criterion allows, in words (bounds inclusive)."""
    if lo is not None and hi is not None:
        return f"between {show(lo)} and {show(hi)} inclusive"
    return f"at least {show(lo)}" if lo is not None else f"at most {show(hi)}"


def check_labelled_bounds(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    """Every listed line (one per label) holds a number within the brief's bounds, compared exactly, bounds inclusive.

    A line that is missing, holds a number stored as text, or carries its
    label more than once with different values fails, named; so does any
    value below the minimum or above the maximum, naming its cell and label.
    """
    sheets, reason = _recalculated_sheets(ctx, c)
    if reason:
        return False, reason
    lo = exact(c.get("minimum")) if c.get("minimum") is not None else None
    hi = exact(c.get("maximum")) if c.get("maximum") is not None else None
    span = bounds_text(lo, hi)
    where_sheet = f" on sheet {c.get('sheet')!r}" if c.get("sheet") else ""
    under = f" under /{c.get('column')}/" if c.get("column") else ""
    read: list[str] = []
    problems: list[str] = []
    for label in c.get("labels"):
        found, trouble, stated = labelled_numbers(sheets, label, c.get("column"))
        if stated:
            problems += stated
            continue
        if not found:
            problems.append(trouble[0] if trouble else f"no line labelled /{label}/{where_sheet} (whole cell)")
            continue
        if len({v for *_, v in found}) > 1:
            cells = ", ".join(f"{w} = {show(v)}" for w, _, v in found)
            problems.append(f"the label /{label}/ appears {len(found)} times{under} with different values: {cells}")
            continue
        for w, lab, v in found:
            if lo is not None and v < lo:
                problems.append(f"{w} ({lab!r}) = {show(v)}, below the minimum {show(lo)}")
            elif hi is not None and v > hi:
                problems.append(f"{w} ({lab!r}) = {show(v)}, above the maximum {show(hi)}")
            else:
                read.append(f"{w} ({lab!r}) = {show(v)}")
    if problems:
        more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
        return False, f"{c.file}: " + "; ".join(problems[:5]) + more + f"; every line must be {span}"
    return True, f"{c.file}: {', '.join(read)}; each {span}"


_SCHEMA_CACHE: dict = {}


def completion_schema() -> dict:
    if "schema" not in _SCHEMA_CACHE:
        _SCHEMA_CACHE["schema"] = json.loads(paths.COMPLETION_SCHEMA_FILE.read_text(encoding="utf-8"))
    return _SCHEMA_CACHE["schema"]


def check_completion_record(ctx: WorkspaceContext, c: Criterion) -> Outcome:
    import jsonschema  # loaded by the one criterion that needs it, not by `pilot --help`

    record, reason = ctx.json(c.file)
    if reason:
        return False, reason
    errors = sorted(
        jsonschema.Draft202012Validator(completion_schema()).iter_errors(record),
        key=lambda e: list(map(str, e.absolute_path)),
    )
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "<root>"
        return False, f"{c.file} does not match protocol/completion_record.schema.json: field '{where}': {e.message}"
    problems = []
    outputs = ctx.outputs
    for name in record["deliverables"]:
        if name != COMPLETION_RECORD and ctx.output_kind(name) != "file":
            problems.append(f"lists {name}, which is not in outputs/")
    declared = {s["delivered"] for s in record["substitutions"]}
    for s in record["substitutions"]:
        if "/" in s["delivered"] or "\\" in s["delivered"]:
            problems.append(f"declares the substitute {s['delivered']}, a path rather than a file name in outputs/")
        elif ctx.output_kind(s["delivered"]) != "file":
            problems.append(f"declares the substitute {s['delivered']}, which is not in outputs/")
    for d in ctx.scenario.file_deliverables:
        if ctx.output_kind(d.name) is not None:
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
    "decision": check_decision,
    "closed_scale": check_closed_scale,
    "labelled_bounds": check_labelled_bounds,
}
