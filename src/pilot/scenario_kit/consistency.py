"""The checks of ``pilot scenarios check`` that read a bundle's files: brief, oracle and rubric agree, and the
judges' prompt carries no answer.

- :func:`brief_oracle_rubric` ("brief/oracle/rubric"): every deliverable the oracle, the rubric or scenario.yml
  names is asked for in the brief by its exact file name, and every file the brief asks for is a deliverable;
  what the oracle reads (sheets, labels, sections, columns, scales) is what the brief asks for; the rubric's
  weights sum to exactly 1 and each criterion has text for the anchors 0, 2 and 4.
- :func:`judge_blinding` ("judge blinding"): the prompt the panel would build for the gold package shows none
  of the oracle's ids, patterns or descriptions, no expected value and no planted fact of the oracle's header
  comment that the gold deliverables do not state themselves, and stays within the judges' bounds.

Both are pure: they read the bundle and the gold workspace and render; nothing runs LibreOffice (the judges'
renderer reads files as they are).
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from pilot.agents.model_proxy import FRAMING_ALLOWANCE_TOKENS
from pilot.judges.blinding import scrub
from pilot.judges.panel import RETRY_NOTE
from pilot.judges.prompt import JudgePrompt, prompt_for_run
from pilot.judges.render import RenderLimits
from pilot.judges.rubric import ANCHOR_LEVELS, RubricError
from pilot.protocol import design
from pilot.protocol.design import ProtocolError, read_yaml
from pilot.protocol.prices import PriceTable
from pilot.protocol.scenario import Criterion, Scenario, Trap
from pilot.scenario_kit.report import CheckRow

CHECK_BRIEF = "brief/oracle/rubric"
CHECK_BLINDING = "judge blinding"

# A file name as briefs and rubrics write one (``merit_increases_2027.xlsx``, ``bom_P-4400_pump_assembly.csv``).
_FILE_NAME = re.compile(
    r"(?<![\w.-])[A-Za-z0-9][\w.-]*\.(?:xlsx|xlsm|xls|docx|doc|pdf|csv|tsv|json|txt|md|html?|xml|ya?ml|pptx|odt|ods|zip)"
    r"(?![\w-])(?!\.\w)",
    re.I,
)
# Words that state a deliverable's format beside its name ("an Excel workbook", "a Word memo", "as a PDF").
_FORMAT_WORDS = {
    "xlsx": re.compile(r"(?i:\bexcel\b|\bworkbooks?\b|\bspreadsheets?\b)"),
    "docx": re.compile(r"\bWord\b|(?i:\bword document\b)"),
    "pdf": re.compile(r"(?i:\bpdf\b)"),
    "pptx": re.compile(r"(?i:\bpowerpoint\b|\bslide deck\b)"),
    "csv": re.compile(r"(?i:\bcsv\b|\bcomma[- ]separated\b)"),
}
# Where a deliverable's entry in the brief ends: a blank line, the next numbered item or a heading.
_ENTRY_END = re.compile(r"^\s*$|^\s*(?:\d+[.)]\s|#)")

# A number as prose, tables and rendered cells write it: 76976, 76,976, 6,233.40, 10.06 (signs and units apart).
_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w)(?!\.\d)")
# A record code a header comment plants (E-1017, A-10077, ECN-118, HW-1180, R-0088, MA-2026-031).
_CODE = re.compile(r"(?<![\w-])[A-Z][A-Z0-9]{0,5}(?:-[A-Z0-9]+)*-\d[A-Z0-9]*(?![\w-])")
# A numbered list item's marker.
_LIST_MARK = re.compile(r"^\s*\d+[.)](?=\s)")
# A pattern is plain text when, its escapes undone, none of these remain.
_REGEX_SYNTAX = re.compile(r"[()\[\]{}?*+|^$\\]")
# The notes of a rendering that the row, sheet or page bounds shortened. Those bounds are the renderer's design
# (a data sheet is shown in part to every run's judges), so they are reported, not failed.
_LIMIT_NOTES = re.compile(
    r"\((?:first \d+ rows[^)]*shown|the workbook has \d+ sheets[^)]*|the PDF has \d+ pages[^)]*)\)"
)
# What the renderer adds around the work (sheet sizes, page markers, bound notes): not something the work states.
_FURNITURE = re.compile(
    r"^Sheet '.*' \(\d+ rows x \d+ columns\)$|^(?:Part '.*' )?\(\d+ rows x \d+ columns\)$|^Table \(\d+ rows\):$"
    r"|^--- page \d+ of \d+ ---$|^\(the workbook has \d+ sheets.*\)$|^\(first \d+ rows.*shown\)$"
    r"|^\(the PDF has \d+ pages.*\)$",
    re.M,
)
# The number the renderer puts in the first cell of each workbook row.
_ROW_NUMBER = re.compile(r"^\|\s*\d+\s*\|", re.M)
# The most bytes one rendered character can take in UTF-8.
_MAX_UTF8_BYTES = 4
# Room for the notices a cut deliverable and the package's joins add beyond the character budget.
_NOTICE_CHARS = 100
# The longest text a judge is sent is the prompt and, on its retry, the reminder with a reason of up to 200 characters.
_RETRY_BYTES = len(RETRY_NOTE.encode("utf-8")) + _MAX_UTF8_BYTES * 200


def _shown_number(shown: list, value: Decimal) -> tuple[str, str] | None:
    """Where the judges are first shown ``value`` (the piece and the number as written), or None."""
    for piece in shown:
        hit = next((t for t, x in _numbers(piece.text) if _states(x, value)), None)
        if hit is not None:
            return piece.where, hit
    return None


def _row(scenario: Scenario, check: str, ok: bool, reason: str, seconds: float = 0.0) -> CheckRow:
    return CheckRow(scenario.id, check, ok, reason, seconds)


def _rows(scenario: Scenario, check: str, findings: list[str], passed: str, started: float) -> list[CheckRow]:
    """One failing row per finding, or one passing row; the check's time goes on its first row."""
    seconds = time.perf_counter() - started
    if not findings:
        return [_row(scenario, check, True, passed, seconds)]
    unique = list(dict.fromkeys(findings))
    return [_row(scenario, check, False, f, seconds if i == 0 else 0.0) for i, f in enumerate(unique)]


def _squash(text: str) -> str:
    return " ".join(text.split())


def _literal(text: str) -> re.Pattern[str]:
    """``text`` as a whole phrase: not inside a longer word or number, any run of whitespace alike."""
    body = r"\s+".join(re.escape(part) for part in text.split())
    return re.compile(r"(?<![A-Za-z0-9])" + body + r"(?![A-Za-z0-9])", re.I)


def _names_exactly(name: str) -> re.Pattern[str]:
    # Exact and whole: ``memo.docx`` inside ``reconciliation_memo.docx`` or ``x.xlsx`` inside ``x.xlsx.bak`` is not it.
    return re.compile(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])(?!\.\w)")


# ---------------------------------------------------------------- brief, oracle and rubric


def _input_names(scenario: Scenario) -> set[str]:
    if not scenario.inputs_dir.is_dir():
        return set()
    return {p.name for p in scenario.inputs_dir.rglob("*") if p.is_file()}


def _entry(lines: list[str], i: int) -> str:
    """The brief's entry that line ``i`` opens or sits in: up to a blank line, the next item or a heading."""
    out = [lines[i]]
    for line in lines[i + 1 :]:
        if _ENTRY_END.match(line):
            break
        out.append(line)
    return " ".join(out)


def _ids(label: str, ids: list[str]) -> str:
    ids = list(dict.fromkeys(ids))
    return f"{label} {ids[0]}" if len(ids) == 1 else f"{label.replace('criterion', 'criteria')} {', '.join(ids)}"


def _named_by(scenario: Scenario, rubric_names: dict[str, list[str]]) -> dict[str, str]:
    """Deliverable name -> who names it: scenario.yml, oracle criteria, rubric criteria."""
    names = list(
        dict.fromkeys(
            [d.name for d in scenario.deliverables] + [c.file for c in scenario.oracle.criteria] + list(rubric_names)
        )
    )
    out = {}
    for name in names:
        who = ["scenario.yml"] if any(d.name == name for d in scenario.deliverables) else []
        oracle = [c.id for c in scenario.oracle.criteria if c.file == name]
        if oracle:
            who.append(_ids("oracle criterion", oracle))
        if rubric_names.get(name):
            who.append(_ids("rubric criterion", rubric_names[name]))
        out[name] = "; ".join(who)
    return out


def _deliverable_findings(scenario: Scenario, brief: str, rubric_names: dict[str, list[str]]) -> list[str]:
    lines = brief.splitlines()
    kinds = {d.name: d.kind for d in scenario.deliverables}
    inputs = _input_names(scenario)
    mentioned = {m.group(0) for m in _FILE_NAME.finditer(brief)}
    findings = []
    for name, who in _named_by(scenario, rubric_names).items():
        if name not in kinds:
            findings.append(f"rubric.yml names {name} ({who}), which is not a deliverable of scenario.yml")
            continue
        rx = _names_exactly(name)
        hits = [i for i, line in enumerate(lines) if rx.search(line)]
        if not hits:
            close = difflib.get_close_matches(name, sorted(mentioned - inputs), n=1, cutoff=0.6)
            seen = f"; it names {close[0]} instead" if close else ""
            findings.append(f"brief.md does not name the deliverable {name} ({who}) by its exact file name{seen}")
            continue
        kind = kinds[name]
        if kind == "completion_record":
            # The completion record needs its name in the brief (policy item 7: "the completion record the brief
            # asks for"; all ten briefs list completion_record.json as a numbered deliverable), but no format word:
            # its format is the working policy's (protocol/completion_record.schema.json), and the ten briefs call
            # it "the completion record described in your working policy", never a "JSON file".
            continue
        # The exact name carries the extension; a format word beside it must not name another format.
        entries = [_FILE_NAME.sub(" ", _entry(lines, i)) for i in hits]
        own = _FORMAT_WORDS.get(kind)
        if own is not None and not any(own.search(e) for e in entries):
            others = sorted({k for e in entries for k, rx_k in _FORMAT_WORDS.items() if k != kind and rx_k.search(e)})
            if others:
                findings.append(
                    f"brief.md describes the deliverable {name} as {' or '.join(others)}, but scenario.yml makes it a "
                    f"deliverable of kind {kind}"
                )
    for name in sorted(mentioned):
        if name not in kinds and name not in inputs:
            line = next(i for i, ln in enumerate(lines) if _names_exactly(name).search(ln)) + 1
            findings.append(
                f"brief.md (line {line}) names {name}, which is neither a deliverable of scenario.yml "
                f"({', '.join(kinds)}) nor a file in inputs/"
            )
    return findings


def _brief_asks(brief_norm: str, pattern: str) -> bool:
    """Whether the brief (markup and line breaks removed) holds text the oracle's pattern matches."""
    try:
        return re.search(pattern, brief_norm, re.I) is not None
    except re.error:
        return _literal(pattern).search(brief_norm) is not None


def _whole(pattern: str) -> str:
    """An oracle pattern as whole words of the brief: ``exchange rate`` does not match inside ``exchange rates``.

    Anchors written for a whole cell (``^total$``) are dropped: in prose the label is a phrase among others.
    """
    core = re.sub(r"^\^", "", pattern)
    core = re.sub(r"(?<!\\)\$$", "", core)
    return r"(?<![A-Za-z0-9])(?:" + core + r")(?![A-Za-z0-9])"


def deliverable_entries(scenario: Scenario, brief: str) -> dict[str, str]:
    """Each deliverable's entry in the brief, markup and line breaks removed: every passage that names it by its exact
    file name, from that line up to a blank line, the next numbered item or a heading."""
    lines = brief.splitlines()
    out = {}
    for d in scenario.deliverables:
        rx = _names_exactly(d.name)
        passages = [_entry(lines, i) for i, line in enumerate(lines) if rx.search(line)]
        out[d.name] = _squash(" ".join(passages).replace("`", " ").replace("*", " "))
    return out


def _reads_findings(scenario: Scenario, brief: str, *, own_words: bool) -> list[str]:
    """What the oracle reads is what the brief asks for, in the entry of the file it reads: sheets, labels, columns,
    sections, scales, the length and formulas a file must have, the figures of the text (``near``) and, with
    ``own_words`` (a bundle that declares its traps), what each criterion says the brief asks for (``brief_asks``),
    which a text criterion must give: its patterns are the answer, which the brief never states."""
    entries = deliverable_entries(scenario, brief)
    # (what is missing, in which file) -> the readers that need it
    missing: dict[tuple[str, str], list[str]] = {}
    unstated: list[str] = []

    def need(text: str, what: str, file: str, reader: str, pattern: str | None = None) -> None:
        # A pattern the oracle searches for (a column, a figure's context, brief_asks) is searched; text is a phrase.
        if not _brief_asks(entries.get(file, ""), pattern if pattern is not None else _literal(text).pattern):
            missing.setdefault((what, file), []).append(reader)

    for d in scenario.file_deliverables:
        for s in d.required_sections:
            need(s, f"the section {s!r}", d.name, "scenario.yml")
        for col in d.required_columns:
            need(col, f"the column {col!r}", d.name, "scenario.yml")
        if d.min_words:
            words = f"{d.min_words:,}|{d.min_words}"
            need(words, f"at least {d.min_words:,} words", d.name, "scenario.yml", _whole(words))
        if d.requires_formulas:
            need("formulas", "formulas", d.name, "scenario.yml", r"formulas?")
    for c in scenario.oracle.criteria:
        if c.get("sheet"):
            need(c.get("sheet"), f"the sheet {c.get('sheet')!r}", c.file, c.id)
        label = c.get("label")
        if c.kind in ("labelled_value", "labelled_bounds", "decision") and not c.get("key"):
            # A label read under a column is a row key (a part number, a channel), not a line the brief asks for; a
            # criterion that says what the brief asks (brief_asks) reads a line the brief cannot name (a bidder).
            if c.get("column"):
                need(c.get("column"), f"the column /{c.get('column')}/", c.file, c.id, c.get("column"))
            elif label and not c.brief_asks:
                # The oracle reads a whole label cell: "Exchange rate" is not asked for by "exchange rates".
                need(label, f"the line /{label}/", c.file, c.id, _whole(label))
        for col in c.get("columns") or ():
            need(col, f"the column {col!r}", c.file, c.id)
        if c.kind in ("csv_keys", "csv_value", "closed_scale") or (c.kind == "decision" and c.get("key")):
            for p in ("key", "column"):
                if c.get(p):
                    need(c.get(p), f"the column {c.get(p)!r}", c.file, c.id)
        for v in (c.get("values") or ()) if c.kind == "closed_scale" else ():
            need(v, f"the value {v!r} of column {c.get('column')!r}", c.file, c.id)
        if c.brief_asks:
            need(c.brief_asks, f"/{c.brief_asks}/ (its brief_asks)", c.file, c.id, c.brief_asks)
        elif own_words and c.kind == "text_number" and c.get("near"):
            # The figure's context is what the brief asks for, unless it names the answer (then: brief_asks).
            if not _brief_asks(entries.get(c.file, ""), c.get("near")):
                unstated.append(
                    f"brief.md's entry for {c.file} does not ask for the figure near /{c.get('near')}/, which oracle "
                    f"criterion {c.id} reads: ask for it there, or give the criterion brief_asks, the words of that "
                    "entry that ask for it"
                )
        elif own_words and c.kind in ("text_contains", "workbook_contains", "text_number"):
            unstated.append(
                f"oracle criterion {c.id} ({c.kind}) reads {c.file} for "
                + (f"/{'/, /'.join(c.get('patterns'))}/" if c.get("patterns") else "a figure anywhere in it")
                + f", which the brief cannot state: give it brief_asks, the words of {c.file}'s entry in brief.md "
                "that ask for it"
            )
    findings = []
    for (what, file), readers in missing.items():
        oracle = [r for r in readers if r != "scenario.yml"]
        who = ["scenario.yml requires it"] if "scenario.yml" in readers else []
        if oracle:
            who.append(_ids("oracle criterion", oracle) + " read" + ("s" if len(set(oracle)) == 1 else "") + " it")
        findings.append(f"brief.md's entry for {file} does not ask for {what}, which {' and '.join(who)}")
    return findings + unstated


def _anchor_levels(raw: Any) -> dict[int, Any]:
    out: dict[int, Any] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            try:
                out[int(k)] = v
            except (TypeError, ValueError):
                continue
    return out


def _rubric_findings(rubric_path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """The rubric as its file stands: weights summing to one, anchors 0, 2 and 4; and the file names it uses.

    The file is read afresh, not taken from the loaded bundle, so that a rubric edited since (or one the
    loader would refuse) is checked as written.
    """
    try:
        data = read_yaml(rubric_path)
    except ProtocolError as exc:
        return [f"rubric.yml cannot be read: {exc.reason}"], {}
    criteria = data.get("criteria") if isinstance(data, dict) else None
    if not isinstance(criteria, list) or not criteria:
        return ["rubric.yml has no list of criteria"], {}
    findings: list[str] = []
    names: dict[str, list[str]] = {}
    total = Decimal(0)
    shown = []
    weights_ok = True
    for i, c in enumerate(criteria):
        if not isinstance(c, dict):
            findings.append(f"rubric.yml criteria.{i} is not a mapping")
            continue
        cid = str(c.get("id") or f"criteria.{i}")
        w = c.get("weight")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or w <= 0:
            findings.append(f"rubric.yml criterion {cid} has no positive weight (got {w!r})")
            weights_ok = False
        else:
            # As check_rubric_weights (pilot.protocol.validation) reads them: the decimal as written, never a float sum.
            total += Decimal(repr(float(w)))
            shown.append(f"{cid} {w}")
        anchors = _anchor_levels(c.get("anchors"))
        for level in ANCHOR_LEVELS:
            if level not in anchors:
                findings.append(f"rubric.yml criterion {cid} has no anchor {level}")
            elif not isinstance(anchors[level], str) or not anchors[level].strip():
                findings.append(f"rubric.yml criterion {cid} anchor {level} has no text")
        texts = [c.get("name"), c.get("description"), *anchors.values()]
        for t in texts:
            if isinstance(t, str):
                for m in _FILE_NAME.finditer(t):
                    names.setdefault(m.group(0), []).append(cid)
    if weights_ok and total != 1:
        findings.append(f"rubric.yml weights sum to {total}, not 1 ({', '.join(shown)})")
    return findings, names


def brief_oracle_rubric(scenario: Scenario) -> list[CheckRow]:
    """The brief asks for exactly the deliverables the oracle and the rubric name, and the rubric is well formed.

    Each deliverable of scenario.yml and each file an oracle criterion or the rubric names is named in
    brief.md by its exact file name (which carries its format; a format word beside it must agree); every
    file name in the brief is a deliverable or an input; the sheets, lines, sections, columns, scales, length
    and formulas the oracle reads are asked for in the entry of the file it reads them in (and, in a bundle
    that declares its traps, each text criterion's ``brief_asks``); no sentence of the brief states a trap's
    answer unless the trap confirms it (``brief_names``); the rubric's weights sum to exactly 1 as decimals and
    each of its criteria has text for the anchors 0, 2 and 4.
    """
    started = time.perf_counter()
    brief = scenario.brief
    rubric_findings, rubric_names = _rubric_findings(scenario.rubric.path)
    findings = _deliverable_findings(scenario, brief, rubric_names)
    findings += _reads_findings(scenario, brief, own_words=bool(scenario.oracle.traps))
    findings += giveaways(scenario)
    findings += rubric_findings
    n_files = len(scenario.deliverables)
    passed = (
        f"brief.md names all {n_files} deliverables exactly and asks for nothing else; the oracle's "
        f"{len(scenario.oracle.criteria)} criteria read what each file's entry asks for; rubric.yml weights sum to 1 "
        f"and its {len(scenario.rubric.criteria)} criteria have anchors 0, 2 and 4"
    )
    return _rows(scenario, CHECK_BRIEF, findings, passed, started)


# ---------------------------------------------------------------- what the brief gives away


def giveaways(scenario: Scenario) -> list[str]:
    """Sentences of the brief that state the answer of a trap's catching criterion (its expected figure, option or
    key, or all its patterns), each unless the trap's ``brief_names`` confirms it; and confirmations the brief no
    longer holds."""
    sentences = brief_sentences(scenario.brief)
    findings = []
    for trap in scenario.oracle.traps:
        for n, sentence in sentences:
            named = _answers_named(scenario, trap, sentence)
            if not named:
                continue
            if any(" ".join(phrase.split()).lower() in sentence.lower() for phrase in trap.brief_names):
                continue
            findings.append(
                f'brief.md line {n} names the answer of trap {trap.id} ({"; ".join(named)}): "{_shorten(sentence)}"; '
                "a brief states no answer: reword it, or confirm it under the trap's brief_names"
            )
        for phrase in trap.brief_names:
            if not any(" ".join(phrase.split()).lower() in s.lower() for _, s in sentences):
                findings.append(
                    f"trap {trap.id}'s brief_names confirms {phrase!r}, which no sentence of brief.md holds"
                )
    return findings


def _shorten(text: str, width: int = 140) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _answers_named(scenario: Scenario, trap: Trap, sentence: str) -> list[str]:
    named = []
    for cid in trap.caught_by:
        c = scenario.oracle.by_id(cid)
        if c.kind in ("labelled_value", "text_number", "csv_value"):
            hit = states_figure(sentence, Decimal(repr(c.get("expected"))))
            if hit:
                named.append(f"{cid}'s expected figure, as {hit}")
        elif c.kind in ("text_contains", "workbook_contains") and all(
            re.search(p, sentence, re.I) for p in c.get("patterns")
        ):
            named.append(
                f"{cid}'s pattern{'s' if len(c.get('patterns')) > 1 else ''} /{'/, /'.join(c.get('patterns'))}/"
            )
        elif c.kind == "csv_keys":
            keys = [k for k in c.get("expected") if re.search(r"(?<![\w.-])" + re.escape(k) + r"(?![\w-])", sentence)]
            if keys:
                named.append(f"{cid}'s expected key{'s' if len(keys) > 1 else ''} {', '.join(keys)}")
        elif c.kind == "decision":
            decided = _decided(c, sentence)
            if decided:
                named.append(f"{cid}'s expected {'options' if len(decided) > 1 else 'option'} {', '.join(decided)}")
    return named


def _decided(c: Criterion, sentence: str) -> list[str]:
    """The expected options of decision ``c`` that ``sentence`` decides, read as the oracle reads the deliverable."""
    from pilot.oracles.decisions import read_decision, read_set

    options = dict(c.get("options"))
    wanted = c.get("expected")
    if isinstance(wanted, list):
        from pilot.defects import set_reading

        inside = read_set(sentence, options, **set_reading(c)).inside
        return [o for o in wanted if o in inside]
    return [wanted] if wanted in read_decision(sentence, options).chosen else []


# ---------------------------------------------------------------- judge blinding


@dataclass(frozen=True)
class _Shown:
    """One piece of bundle text the judges read, and where it comes from."""

    where: str
    text: str


def _brief_pieces(brief: str) -> list[_Shown]:
    """The brief line by line, and as a whole (a phrase may wrap over a line break).

    A list item's number ("1.") is the brief's layout, not a figure, and is left out.
    """
    lines = [_LIST_MARK.sub("", line) for line in brief.splitlines()]
    pieces = [_Shown(f"brief.md line {i}", line) for i, line in enumerate(lines, 1) if line.strip()]
    return pieces + [_Shown("brief.md", _squash("\n".join(lines)))]


def _rubric_pieces(prompt: JudgePrompt) -> list[_Shown]:
    # The rubric's text as the prompt shows it (name and description, anchors), not its ids and weights: those
    # are the rubric's structure, and the anchor levels and weights are numbers of their own.
    out = []
    for c in prompt.criteria:
        out.append(_Shown(f"rubric.yml criterion {c.id} description", c.description))
        for level, anchor in c.anchors.items():
            out.append(_Shown(f"rubric.yml criterion {c.id} anchor {level}", _squash(anchor)))
    return out


def _first(pieces: Iterable[_Shown], rx: re.Pattern[str]) -> str | None:
    for p in pieces:
        if rx.search(p.text):
            return p.where
    return None


def _numbers(text: str) -> Iterator[tuple[str, Decimal]]:
    for m in _NUMBER.finditer(text):
        yield m.group(0), Decimal(m.group(0).replace(",", ""))


def _states(x: Decimal, v: Decimal) -> bool:
    """Whether a written number ``x`` states the value ``v``: equal, or the two agree to the precision of the less
    precise one when that one has at least three significant digits (1.15 states 1.1522; 1 does not)."""
    x, v = abs(x), abs(v)
    if x == v:
        return True
    coarse, fine = (x, v) if x.as_tuple().exponent >= v.as_tuple().exponent else (v, x)
    digits = len(coarse.normalize().as_tuple().digits) if coarse else 0
    if digits < 3:
        return False
    try:
        return fine.quantize(Decimal(1).scaleb(coarse.as_tuple().exponent), rounding=ROUND_HALF_UP) == coarse
    except InvalidOperation:
        return False


def states_figure(text: str, value: Decimal) -> str | None:
    """The number ``text`` writes for ``value`` (to the precision it writes it, three significant digits at least),
    or None."""
    return next((t for t, x in _numbers(text) if _states(x, value)), None)


# Where a sentence of prose ends: a full stop, question or exclamation mark before a space and a capital or a quote.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(*`])")


def brief_sentences(brief: str) -> list[tuple[int, str]]:
    """The brief's sentences, markup removed, each with the line it starts on; a list item is a sentence of its own."""
    out: list[tuple[int, str]] = []
    block: list[tuple[int, str]] = []

    def flush() -> None:
        if not block:
            return
        text, starts = "", []
        for n, line in block:
            starts.append((len(text), n))
            text += line.strip() + " "
        pos = 0
        for part in _SENTENCE_END.split(text):
            where = text.find(part, pos)
            pos = where + len(part)
            n = max((ln for at, ln in starts if at <= where), default=block[0][0])
            if part.strip():
                out.append((n, _squash(part.replace("`", "").replace("*", ""))))
        block.clear()

    for n, line in enumerate(brief.splitlines(), 1):
        if _ENTRY_END.match(line) or re.match(r"^\s*[-*]\s", line):
            flush()
        if line.strip() and not line.lstrip().startswith("#"):
            block.append((n, _LIST_MARK.sub("", re.sub(r"^\s*[-*]\s", "", line))))
    flush()
    return out


def _plain(pattern: str) -> str | None:
    """The text a pattern stands for when it is plain (``8\\.2`` is 8.2), or None when it is a regex."""
    undone = re.sub(r"\\([^A-Za-z0-9])", r"\1", pattern)
    if _REGEX_SYNTAX.search(re.sub(r"\\[^A-Za-z0-9]", "", pattern)):
        return None
    return undone


def _alternatives(pattern: str) -> list[str]:
    """A pattern's top-level alternatives (``ISO|certif`` is ISO and certif)."""
    out, depth, cur, esc = [], 0, "", False
    for ch in pattern:
        if esc:
            cur += ch
            esc = False
            continue
        if ch == "\\":
            esc = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append(cur)
            cur = ""
            continue
        cur += ch
    return out + [cur]


@dataclass(frozen=True)
class _Spec:
    """One piece of the oracle's specification that must not reach the judges unless the work states it."""

    text: str
    what: str  # how a finding names it
    kind: str  # id | regex | description | answer


# How a finding names the field a pattern comes from.
_FIELD_NAMES = {"labels": "label", "patterns": "text", "near": "'near'", "topic": "topic", "plans": "plans"}


def _oracle_specs(criteria: Iterable[Criterion]) -> list[_Spec]:
    out: list[_Spec] = []
    for c in criteria:
        of = f"of oracle criterion {c.id}"
        out.append(_Spec(c.id, "the oracle criterion id", "id"))
        if c.description:
            out.append(_Spec(c.description, f"the description {of}", "description"))
        # Patterns whose words are facts (a label, a name, a clause number), and those whose words are grammar
        # (the verbs and hedges a set-valued decision reads clauses by): only the first give answers.
        facts: list[tuple[str, str]] = []
        grammar: list[tuple[str, str]] = []
        for p in ("label", "near"):
            if isinstance(c.get(p), str):
                facts.append((p, c.get(p)))
        for p in ("labels", "patterns"):
            facts += [(p, s) for s in c.get(p) or ()]
        if c.kind == "decision":
            facts += [(f"options.{k}", v) for k, v in (c.get("options") or {}).items()]
            grammar += [
                (p, c.get(p))
                for p in ("topic", "property_verbs", "complement_verbs", "plans")
                if isinstance(c.get(p), str)
            ]
        for field_, pat in facts + grammar:
            if _plain(pat) is None:
                out.append(_Spec(pat, f"the {_FIELD_NAMES.get(field_, field_)} pattern {of}", "regex"))
        for field_, pat in facts:
            for alt in _alternatives(pat):
                plain = (_plain(alt) or "").strip()
                if plain:
                    out.append(
                        _Spec(plain, f"{plain!r} from the {_FIELD_NAMES.get(field_, field_)} pattern {of}", "answer")
                    )
        # A decision's expected option is not listed: the gold passes every decision criterion (the kit's gold
        # check, `pilot scenarios validate`), so the gold states that answer in its own words, and a rubric naming
        # the right call tells the judges nothing the gold package does not.
        if c.kind == "csv_keys":
            out += [_Spec(str(e), f"the expected key {str(e)!r} {of}", "answer") for e in c.get("expected") or ()]
        for p in ("key_value", "property", "complement"):
            if isinstance(c.get(p), str):
                out.append(_Spec(c.get(p), f"the {p} {c.get(p)!r} {of}", "answer"))
    # The same text once, under its strictest kind.
    rank = {"id": 0, "regex": 1, "description": 2, "answer": 3}
    best: dict[str, _Spec] = {}
    for s in out:
        key = s.text.lower()
        if key not in best or rank[s.kind] < rank[best[key].kind]:
            best[key] = s
    return list(best.values())


def _expected_values(criteria: Iterable[Criterion]) -> list[tuple[Decimal, Criterion]]:
    out = []
    for c in criteria:
        v = c.get("expected")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        d = Decimal(repr(v))
        out.append((d, c))
        if c.get("also_accept_percent"):
            out.append((d * 100, c))
    return out


def _header_comment(scenario: Scenario) -> tuple[str, str]:
    """The comment block at the top of oracle.yml, where the planted facts are stated, and the same text with the
    scenario's own id and its generator's module name (``HR-01``, ``hr_01.py``) blanked: names, not facts."""
    lines = []
    for line in scenario.oracle.path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            lines.append(line.lstrip("#").strip())
        elif line.strip():
            break
    text = " ".join(lines)
    masked = text
    for name in (scenario.id, f"{scenario.generator}.py", scenario.generator):
        masked = re.sub(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", lambda m: " " * len(m.group(0)), masked)
    return text, masked


# A comment line shorter than this says too little to be a copy rather than a coincidence.
_MIN_COMMENT_WORDS = 6


def _comment_lines(oracle_path: Path) -> list[tuple[int, str]]:
    """oracle.yml's comment lines (line number, text) long enough that a verbatim copy can only be a copy."""
    out = []
    for n, line in enumerate(oracle_path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if text.startswith("#"):
            text = text.lstrip("#").strip()
        elif " # " in line:
            text = line.split(" # ", 1)[1].strip()
        else:
            continue
        if len(text.split()) >= _MIN_COMMENT_WORDS:
            out.append((n, _squash(text)))
    return out


def _context(text: str, start: int, end: int, width: int = 30) -> str:
    """The words around ``text[start:end]``, for a finding to quote."""
    lo = text.rfind(" ", 0, max(start - width, 0)) + 1
    hi = text.find(" ", min(end + width, len(text)))
    return _squash(text[lo : hi if hi != -1 else len(text)])


def _work_only(prompt: JudgePrompt, withheld: list[str]) -> str:
    """The gold deliverables as the judges read them, without the renderer's furniture: what the work states."""
    parts = []
    for d in prompt.package.deliverables:
        text = _FURNITURE.sub(" ", scrub(d.text, withheld))
        if d.format == "workbook":
            text = _ROW_NUMBER.sub("|", text)
        parts.append(text)
    return _squash("\n".join(parts))


def _leak_findings(scenario: Scenario, prompt: JudgePrompt, gold: str) -> list[str]:
    brief_pieces = _brief_pieces(scenario.brief.strip())
    rubric_pieces = _rubric_pieces(prompt)
    shown = brief_pieces + rubric_pieces
    gold_numbers = [n for _, n in _numbers(gold)]
    brief_all = brief_pieces[-1].text
    findings = []

    def in_gold(v: Decimal) -> bool:
        return any(_states(g, v) for g in gold_numbers)

    for spec in _oracle_specs(scenario.oracle.criteria):
        rx = _literal(spec.text)
        if spec.kind == "id":
            # An id is the oracle's own vocabulary: fair nowhere, the package included.
            where = _first(shown + [_Shown("the rendered gold package", gold)], rx)
            if where:
                findings.append(f"{where} shows {spec.what} {spec.text!r} (oracle.yml)")
        elif spec.kind in ("regex", "description"):
            where = _first(shown, rx)
            if where and not rx.search(gold):
                findings.append(f"{where} shows {spec.what} as literal text: {spec.text!r} (oracle.yml)")
        elif not rx.search(gold) and not rx.search(brief_all):
            # Plain words the brief states are known to worker and judges alike; the rubric repeating them tells the
            # judges nothing new. Words only the oracle (and not the gold) holds are a planted answer.
            where = _first(rubric_pieces, rx)
            if where:
                findings.append(
                    f"{where} shows {spec.what} (oracle.yml), which neither the gold deliverables nor the brief state"
                )
    for v, c in _expected_values(scenario.oracle.criteria):
        if in_gold(v):
            continue
        found = _shown_number(shown, v)
        if found is not None:
            findings.append(
                f"{found[0]} shows {found[1]}, the expected value of oracle criterion {c.id} ({c.file}: {v}), "
                f"which the gold deliverables do not state"
            )
    for n, line in _comment_lines(scenario.oracle.path):
        rx = _literal(line)
        where = _first(shown, rx)
        if where and not rx.search(gold):
            findings.append(f"{where} copies line {n} of oracle.yml: {line!r}")
    header, masked = _header_comment(scenario)
    codes: dict[str, re.Match[str]] = {}
    for m in _CODE.finditer(masked):
        codes.setdefault(m.group(0), m)
    expected = {v for v, _ in _expected_values(scenario.oracle.criteria)}
    # A code's digits are the code's, checked as a code below.
    facts = _CODE.sub(lambda m: " " * len(m.group(0)), masked)
    seen: set[Decimal] = set()
    for m in _NUMBER.finditer(facts):
        v = Decimal(m.group(0).replace(",", ""))
        if v in seen or v in expected or in_gold(v):
            continue  # an expected value is reported above, under its criterion
        seen.add(v)
        found = _shown_number(shown, v)
        if found is not None:
            findings.append(
                f"{found[0]} shows {found[1]}, a planted fact of oracle.yml's header comment "
                f'("{_context(header, m.start(), m.end())}"), which the gold deliverables do not state'
            )
    for code, m in codes.items():
        rx = _literal(code)
        if rx.search(gold) or rx.search(brief_all):
            continue
        where = _first(rubric_pieces, rx)
        if where:
            findings.append(
                f"{where} shows {code}, a planted fact of oracle.yml's header comment "
                f'("{_context(header, m.start(), m.end())}"), which neither the gold deliverables nor the brief state'
            )
    return findings


def _panel_bound(study: design.Study, prices: PriceTable) -> tuple[int, str]:
    """The judges' token bound: the largest input the smallest-windowed model of the panel accepts."""
    bounds = sorted((prices.price(j["model"]).max_input_tokens, j["model"]) for j in study.judge_panel)
    return bounds[0]


def _bound_findings(
    prompt: JudgePrompt, package_text: str, lim: RenderLimits, study: design.Study, prices: PriceTable
) -> tuple[list[str], str]:
    findings = []
    for d in prompt.package.deliverables:
        if not d.present:
            findings.append(f"the gold {d.requested} reaches the judges as {d.status}, not as the work")
        if d.truncated:
            findings.append(
                f"the gold {d.requested} is cut at its share of the {lim.max_total_chars:,}-character package bound "
                f"(RenderLimits.max_total_chars): the judges would grade part of it"
            )
    bound, model = _panel_bound(study, prices)
    # The project's own upper bound on a request's input (pilot.agents.model_proxy.input_bound): every token
    # covers at least one byte of the text, plus the API's framing.
    sent = len(prompt.text.encode("utf-8")) + _RETRY_BYTES
    gold_tokens = sent + FRAMING_ALLOWANCE_TOKENS
    # Any run's prompt: the same brief and rubric, and a package as long as RenderLimits lets one be.
    rest = sent - len(package_text.encode("utf-8"))
    package_max = _MAX_UTF8_BYTES * (lim.max_total_chars + _NOTICE_CHARS * len(prompt.package.deliverables))
    any_tokens = rest + package_max + FRAMING_ALLOWANCE_TOKENS
    where = f"max_input_tokens of {model}, the judges' smallest window in protocol/prices.yml"
    if gold_tokens > bound:
        findings.append(
            f"the judges' prompt for the gold package may take {gold_tokens:,} tokens, over the bound of {bound:,} "
            f"({where})"
        )
    elif any_tokens > bound:
        findings.append(
            "brief.md and rubric.yml leave a package at the RenderLimits bound a prompt of up to "
            f"{any_tokens:,} tokens, over the bound of {bound:,} ({where})"
        )
    summary = (
        f"prompt at most {gold_tokens:,} tokens for the gold, {any_tokens:,} for any package within RenderLimits, "
        f"bound {bound:,} ({where})"
    )
    notes = [f"{d.requested} {n}" for d in prompt.package.deliverables for n in _LIMIT_NOTES.findall(d.text)]
    if notes:
        summary += "; shown in part by the rendering bounds, as for every run: " + ", ".join(notes)
    return findings, summary


def judge_blinding(
    scenario: Scenario,
    gold_workspace: Path,
    *,
    study: design.Study | None = None,
    prices: PriceTable | None = None,
    limits: RenderLimits | None = None,
) -> list[CheckRow]:
    """The judges' prompt for the gold package carries no answer and fits the judges' bounds.

    The prompt is built as the panel builds it (:func:`pilot.judges.prompt.prompt_for_run` on
    ``gold_workspace/outputs``, with the panel's default :class:`RenderLimits` unless ``limits`` is given).
    It fails when it shows an oracle criterion id anywhere; an oracle pattern (as written) or description in
    the brief or rubric; an oracle ``expected`` value, or a number of oracle.yml's header comment, in the
    brief or rubric that the rendered gold deliverables do not state; a pattern's plain words, a key the
    oracle expects or a record code of the header comment in the rubric that neither the gold nor the brief
    states; a gold deliverable missing or cut by the package's character bound; a rubric the judges refuse;
    or a prompt whose input bound (bytes plus the API's framing, as the model proxy bounds a request)
    exceeds the largest input of the panel's models, for the gold or for any package within the rendering
    bounds (``study`` and ``prices`` default to the protocol's).
    """
    started = time.perf_counter()
    study = study or design.study()
    prices = prices or PriceTable.load()
    lim = limits or RenderLimits()
    outputs = Path(gold_workspace) / "outputs"
    try:
        prompt = prompt_for_run(scenario, outputs, limits=limits)
    except RubricError as exc:
        return _rows(
            scenario,
            CHECK_BLINDING,
            [f"the judges cannot use rubric.yml: field {exc.field!r}: {exc.reason}"],
            "",
            started,
        )
    out_abs = outputs.resolve()
    withheld = [str(out_abs), str(out_abs.parent)]
    # The package exactly as build_prompt shows it (scrubbed of tells and of the workspace's paths).
    package_text = scrub(prompt.package.text, withheld).strip()
    findings = []
    if package_text and package_text not in prompt.text:
        findings.append("the rendered gold package is not found in the judges' prompt as built by prompt_for_run")
    findings += _leak_findings(scenario, prompt, _work_only(prompt, withheld))
    bound_findings, summary = _bound_findings(prompt, package_text, lim, study, prices)
    findings += bound_findings
    passed = (
        "no oracle id, pattern, expected value or planted fact reaches the judges beyond what the gold states; "
        f"{summary}"
    )
    return _rows(scenario, CHECK_BLINDING, findings, passed, started)
