"""Read the decision a deliverable states, not merely the words it contains.

A brief asks for decisions: recommend a supplier, approve or decline a
request, rate a risk, choose an action. A memo that names the right supplier
while recommending another, or that says "declined" in passing while
recommending approval, must not pass. The decision is extracted from where
the brief puts it (a section of a document, a labelled workbook line, a CSV
column), clause by clause:

- a *decision clause* is one with a decision verb (recommend, award, select,
  propose, approve ...) or, for a labelled line or a table cell, the whole
  cell;
- in a decision clause the option chosen is the first option named after
  the verb (before it when none follows: "Northwind should be awarded");
- a negation just before the verb ("do not recommend", "cannot approve") or
  just before the option ("not Ridgeway", "rather than Ridgeway") turns the
  choice into a rejection; with two options, rejecting one chooses the other.

The verdict names what was read and where.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

DECISION_VERBS = re.compile(
    r"\b(recommend\w*|award\w*|select\w*|choos\w*|chose|propos\w*|prefer\w*|advis\w*|conclu\w*|decision|verdict|"
    r"should (?:go|be given) to|goes to|appoint\w*|approv\w*|declin\w*|reject\w*|refus\w*)\b",
    re.I,
)
NEGATORS = re.compile(
    r"\b(not|no|never|cannot|can't|won't|don't|doesn't|isn't|shouldn't|wouldn't|neither|nor|rather than|instead of|"
    r"over|against|except|excluding|excluded|exclude|unlike)\b|n't\b",
    re.I,
)
_CLAUSE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|;\s*|:\s+|\n+")
#: The same boundaries, kept by ``re.split`` so that a label's colon can be told from a sentence's end.
_CLAUSE_SPLIT_KEEP = re.compile(f"({_CLAUSE_SPLIT.pattern})")
#: A label before a colon is short ("DSCR", "Debt / EBITDA (section 4.3)").
_LABEL_WORDS = 6
WORD = re.compile(r"\S+")


@dataclass
class Decision:
    """What one place of a deliverable decides: options chosen and rejected, with the clauses read."""

    chosen: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    clauses: list[str] = field(default_factory=list)

    def verdict(self, options: list[str]) -> str | None:
        """The single option decided, or None when nothing or several are decided."""
        chosen = list(dict.fromkeys(self.chosen))
        if len(options) == 2 and not chosen:
            # With two options, rejecting one is choosing the other.
            others = [o for o in options if o not in self.rejected]
            if len(others) == 1 and self.rejected:
                return others[0]
        if len(chosen) == 1 and chosen[0] not in self.rejected:
            return chosen[0]
        return None


def _window_negated(text: str, start: int, words: int = 4) -> bool:
    """Whether a negation stands among the ``words`` words just before ``start``."""
    before = WORD.findall(text[:start])[-words:]
    return bool(NEGATORS.search(" ".join(before)))


def _mentions(clause: str, options: dict[str, re.Pattern[str]]) -> list[tuple[int, str, int]]:
    """(start, option, end) of every option named in the clause, in order, overlaps resolved by the longest."""
    found = []
    for key, rx in options.items():
        for m in rx.finditer(clause):
            found.append((m.start(), key, m.end()))
    found.sort(key=lambda t: (t[0], -(t[2] - t[0])))
    out, last_end = [], -1
    for start, key, end in found:
        if start >= last_end:
            out.append((start, key, end))
            last_end = end
    return out


def compile_options(options: dict[str, str]) -> dict[str, re.Pattern[str]]:
    return {key: re.compile(r"(?<![\w-])(?:" + pat + r")(?![\w-])", re.I) for key, pat in options.items()}


def read_clause(
    clause: str, options: dict[str, re.Pattern[str]], *, whole_cell: bool = False
) -> tuple[str | None, str | None]:
    """(chosen, rejected) option of one clause; ``whole_cell`` treats the clause as a decision without a verb."""
    mentions = _mentions(clause, options)
    if not mentions:
        return None, None
    verbs = [m for m in DECISION_VERBS.finditer(clause) if not any(s <= m.start() < e for s, _, e in mentions)]
    if not verbs:
        # A cell is a decision by place; an option that is itself a verdict word ("approve", "decline")
        # is its own verb; any other clause without a decision verb decides nothing.
        start, key, _ = mentions[0]
        if whole_cell or DECISION_VERBS.match(clause, start):
            return (None, key) if _window_negated(clause, start) else (key, None)
        return None, None
    verb = verbs[0]
    verb_negated = _window_negated(clause, verb.start())
    after = [m for m in mentions if m[0] >= verb.end()]
    if after:
        start, key, _ = after[0]
        # Only a negation between the verb and the option qualifies the option ("recommend not awarding to X").
        option_negated = bool(NEGATORS.search(" ".join(WORD.findall(clause[verb.end() : start])[-4:])))
    else:
        start, key, _ = mentions[-1]
        option_negated = _window_negated(clause, start)
    return (None, key) if verb_negated != option_negated else (key, None)


def read_decision(text: str, options: dict[str, str], *, whole_cell: bool = False) -> Decision:
    """The decision stated in ``text`` among ``options`` (key -> regex)."""
    compiled = compile_options(options)
    out = Decision()
    clauses = [text] if whole_cell else [c for c in _CLAUSE_SPLIT.split(text) if c and c.strip()]
    for clause in clauses:
        chosen, rejected = read_clause(clause, compiled, whole_cell=whole_cell)
        if chosen or rejected:
            out.clauses.append(" ".join(clause.split())[:200])
        if chosen:
            out.chosen.append(chosen)
        if rejected:
            out.rejected.append(rejected)
    return out


# ---------------------------------------------------------------- set-valued decisions
#
# Some briefs ask for a set rather than one choice: "name any clinic that misses
# the waiting-time target". Each option is then classified by the clauses that
# speak of the criterion's topic (the target): a *property* verb ("missed",
# "above", "exceeds") puts the options of its clause in the set, a *complement*
# verb ("met", "within") puts them outside it; a negation before the verb flips
# it ("did not meet"), a negation just before an option flips it for that
# option alone ("all clinics except Hillcrest met the target"), and an elliptic
# clause ("...; Hillcrest did not") takes the previous clause's verb, negated.
# A clause that speaks of what should or will happen ("should bring the wait
# under 20 minutes", "will show whether") states no finding and is skipped.

#: Negations that qualify one option (just before it), not the verb.
OPTION_NEGATORS = re.compile(
    r"(?:\b(?:not|except|excluding|apart from|other than|unlike|but not|save)"
    r"|\b(?:all|every|each)(?:\s+[\w-]+){0,2}\s+but)\s*$",
    re.I,
)
#: Words that make a clause a plan or a condition rather than a finding.
NOT_A_FINDING = re.compile(
    r"\b(should|must|will|would|could|may|might|whether|if|aim\w*|plan\w*|expect\w*|hope\w*|intend\w*|until|unless"
    r"|to bring|to get|to keep)\b",
    re.I,
)
#: An elliptic negation that repeats the previous clause's verb ("Hillcrest did not").
ELLIPTIC_NEGATION = re.compile(
    r"\b(?:did|does|do|has|have|had|was|were|is|are)\s*(?:not|n't)\b|\bdidn't\b|\bdoesn't\b|\bwasn't\b|\bisn't\b", re.I
)
#: Clause boundaries inside a sentence: a contrast ("met the target, but Hillcrest did not"). "All but X" is an
#: exception, not a boundary.
_CONTRAST = re.compile(r"(?:,\s*|\s+)(?:but|while|whereas|although|though)\s+", re.I)
_EXCEPTION_BEFORE = re.compile(r"\b(?:all|every|each|none|nobody|any)\b(?:\s+\S+){0,2}\s*$", re.I)


@dataclass
class SetDecision:
    """How one text classifies each option: ``inside`` (has the property) and ``outside``, with the clauses read."""

    inside: dict[str, str] = field(default_factory=dict)
    outside: dict[str, str] = field(default_factory=dict)
    clauses: list[str] = field(default_factory=list)

    def merge(self, other: SetDecision) -> None:
        for k, v in other.inside.items():
            self.inside.setdefault(k, v)
        for k, v in other.outside.items():
            self.outside.setdefault(k, v)
        self.clauses.extend(other.clauses)

    @property
    def contradicted(self) -> list[str]:
        """Options said to be both inside and outside the set."""
        return [k for k in self.inside if k in self.outside]


def _split_contrasts(clause: str) -> list[str]:
    parts, start = [], 0
    for m in _CONTRAST.finditer(clause):
        if _EXCEPTION_BEFORE.search(clause[start : m.start()]) and not clause[start : m.start()].strip().endswith(","):
            continue  # "all clinics but Hillcrest": an exception inside one clause
        parts.append(clause[start : m.start()])
        start = m.end()
    parts.append(clause[start:])
    return [p for p in parts if p.strip()]


#: A line of this many words or more that ends without a stop is a wrapped line of prose: the next line continues it.
_WRAPPED_MIN_WORDS = 6
_TABLE_CELL = " | "
_YES = re.compile(r"^\s*(?:yes|y|true|✓|✔|✅|x)\s*$", re.I)
_NO = re.compile(r"^\s*(?:no|n|false|✗|✘|❌|-)\s*$", re.I)
#: A verdict cell without a decision header ("Status: FAIL"): a verb in a few words and no figure.
_VERDICT_CELL_WORDS = 4
#: A verb in the infinitive states a purpose or a requirement, not a finding ("to comply, the loan would need ...").
_INFINITIVE = re.compile(r"\bto\s*$", re.I)

# A table flattened into one line of text, as some PDF and Word writers produce
# ("Ratio Calculation Result Policy Complies DSCR 960,000 / 833,197 1.15x min 1.25x No Debt / EBITDA ... Yes"),
# is read by its header's order: the titles tell which column is the verdict, and a row is the option that
# starts it with its cells. Read as prose, the header's "Complies" would be the verb of every row.

#: Where a sentence ends inside a block: a flattened header and its rows hold none ("1.15x" and "960,000" are no ends).
_SENTENCE_MARK = re.compile(r"[.!;:](?=\s|$)|,(?=\s)")
#: A bare Yes/No cell as a table writes it (capitalised, or a mark); a lower-case "no" is a word of prose.
_FLAT_VERDICT = re.compile(r"(?<!\S)(?:Yes|YES|No|NO|True|TRUE|False|FALSE|[✓✔✅✗✘❌])(?!\S)")
#: A column title is short; a header has a few of them, and a row a few short cells.
_TITLE_WORDS = 4
_HEADER_TITLES = 10
_ROW_CHARS = 480
_FIGURE = re.compile(r"\d")

_Row = tuple[str, bool, str]  # (option, inside, the row as written)


@dataclass
class _FlatTable:
    """A flattened table found in a block: the span it covers and what its rows say (none when it cannot be read)."""

    start: int
    end: int
    rows: list[_Row]


def _titles(header: str, topic_rx: re.Pattern[str], verb_rx: re.Pattern[str]) -> list[str] | None:
    """The column titles of a flattened header, or None when the words are not a header.

    A title starts with a capital ("Ratio", "Policy limit", "Median wait (min)"); a word that does not
    continues the title before it, and so does a topic word right after a verb ("Meets Target").
    """
    titles: list[str] = []
    for tok in header.split():
        last = titles[-1] if titles else ""
        continues = bool(titles) and (
            not tok[0].isupper()
            or last.endswith(("/", "&", "-"))
            or bool(verb_rx.search(last) and not topic_rx.search(last) and topic_rx.match(tok))
        )
        if continues:
            titles[-1] += " " + tok
        elif tok[0].isupper():
            titles.append(tok)
        else:
            return None
    if not 2 <= len(titles) <= _HEADER_TITLES or any(len(t.split()) > _TITLE_WORDS for t in titles):
        return None
    return titles


def _verdict_phrase(
    cells: str, verb_rx: re.Pattern[str], not_a_finding: re.Pattern[str], *, figure: bool
) -> bool | None:
    """A row's closing verdict cell read by its verb ("FAIL", "Within limit"): inside, outside, or None.

    The cell is what follows the row's last figure: four words at most, with a verb and no plan.
    ``figure`` asks for a figure before it, as a row under no decision title has ("1.15x min 1.25x FAIL").
    """
    words = cells.split()
    last = max((k for k, w in enumerate(words) if _FIGURE.search(w)), default=None)
    if figure and last is None:
        return None
    phrase = " ".join(words[(last + 1) if last is not None else 0 :])
    verb = verb_rx.search(phrase)
    if not phrase or verb is None or len(phrase.split()) > _VERDICT_CELL_WORDS or not_a_finding.search(phrase):
        return None
    return bool(verb.group("p")) != bool(NEGATORS.search(phrase[: verb.start()]))


class _FlatRows:
    """The rows of a flattened table in one block, read from a position by the layout its header gives."""

    def __init__(
        self,
        block: str,
        mentions: list[tuple[int, str, int]],
        marks: list[int],
        verb_rx: re.Pattern[str],
        not_a_finding: re.Pattern[str],
    ) -> None:
        self.block, self.mentions, self.marks = block, mentions, marks
        self.starts = [m[0] for m in mentions]
        self.verb_rx, self.not_a_finding = verb_rx, not_a_finding

    def skip(self, pos: int) -> int:
        """The first non-blank position at or after ``pos``."""
        return len(self.block) - len(self.block[pos:].lstrip())

    def at(self, pos: int) -> int | None:
        """The index of the option named at ``pos``, if one is."""
        k = bisect.bisect_left(self.starts, pos)
        return k if k < len(self.starts) and self.starts[k] == pos else None

    def limit(self, pos: int) -> int:
        """Where a row from ``pos`` must end: its sentence's end, and a row is short."""
        k = bisect.bisect_right(self.marks, pos)
        return min(self.marks[k] if k < len(self.marks) else len(self.block), pos + _ROW_CHARS)

    def yes_no(self, sign: re.Match[str], polarity: bool) -> bool:
        return polarity if _YES.match(sign.group()) else not polarity

    def closing(self, pos: int, polarity: bool | None) -> tuple[list[_Row], int] | None:
        """Rows that end on their verdict, from ``pos``: (rows, where the table ends), or None when they cannot be read.

        ``polarity`` is the decision title's; without one (None) a bare Yes/No says nothing.
        """
        rows: list[_Row] = []
        while True:
            pos = self.skip(pos)
            k = self.at(pos)
            if k is None:
                # Two verdicts in a row: one of them has no row.
                return None if _FLAT_VERDICT.match(self.block, pos) else (rows, pos)
            _, key, end = self.mentions[k]
            limit = self.limit(end)
            # The row runs to its Yes/No, or to the next option's name (the same option named again is one of its
            # cells).
            other = next(
                (
                    self.starts[j]
                    for j in range(k + 1, len(self.mentions))
                    if self.starts[j] >= limit or self.mentions[j][1] != key
                ),
                limit,
            )
            other = min(other, limit)
            sign = _FLAT_VERDICT.search(self.block, end, other)
            if sign is not None:
                if polarity is None:
                    return None
                rows.append((key, self.yes_no(sign, polarity), " ".join(self.block[pos : sign.end()].split())))
                pos = sign.end()
                continue
            inside = _verdict_phrase(self.block[end:other], self.verb_rx, self.not_a_finding, figure=polarity is None)
            if inside is not None:
                rows.append((key, inside, " ".join(self.block[pos:other].split())))
                pos = other
                continue
            # A Yes/No past another option's name may close either row.
            return None if _FLAT_VERDICT.search(self.block, other, limit) else (rows, pos)

    def leading(self, pos: int, polarity: bool) -> tuple[list[_Row], int] | None:
        """Rows whose Yes/No follows the option ("DSCR No 1.15x min 1.25x"): (rows, where the table ends), or None."""
        rows: list[_Row] = []
        k = self.at(self.skip(pos))
        while k is not None:
            start, key, end = self.mentions[k]
            sign = _FLAT_VERDICT.match(self.block, self.skip(end))
            if sign is None:
                return None
            limit = self.limit(sign.end())
            # The next row starts where an option is followed by its Yes/No; the cells between are this row's.
            k = next(
                (
                    j
                    for j in range(k + 1, len(self.mentions))
                    if self.starts[j] >= limit or _FLAT_VERDICT.match(self.block, self.skip(self.mentions[j][2]))
                ),
                None,
            )
            if k is not None and self.starts[k] >= limit:
                k = None
            stop = self.starts[k] if k is not None else limit
            if _FLAT_VERDICT.search(self.block, sign.end(), stop):
                return None
            rows.append((key, self.yes_no(sign, polarity), " ".join(self.block[start:stop].split())))
            pos = stop
        return rows, pos


def _flat_table(
    block: str,
    options: dict[str, re.Pattern[str]],
    topic_rx: re.Pattern[str],
    verb_rx: re.Pattern[str],
    not_a_finding: re.Pattern[str],
) -> _FlatTable | None:
    """The first flattened table in ``block``, or None when it holds none.

    The header is the run of column titles just before an option starts the first row. With the decision
    title ("Complies", "Meets target") last, each row ends on its Yes/No (or a verdict cell with a verb);
    with it second, after the options' own column, the Yes/No follows the option. A decision title
    elsewhere, a Yes/No after another option's name, or two in a row cannot be read: the table, up to the
    end of its sentence, is then no statement either way. Without a decision title, two rows or more that
    each close on a verdict cell after a figure ("1.15x min 1.25x FAIL") are read by that cell.
    """
    mentions = _mentions(block, options)
    marks = [m.end() for m in _SENTENCE_MARK.finditer(block)]
    rows = _FlatRows(block, mentions, marks, verb_rx, not_a_finding)
    for i, (first, _, _) in enumerate(mentions):
        k = bisect.bisect_right(marks, first)
        start = max(marks[k - 1] if k else 0, mentions[i - 1][2] if i else 0)
        header = block[start:first]
        titles = _titles(header, topic_rx, verb_rx)
        if titles is None:
            continue
        start += len(header) - len(header.lstrip())
        decisions = [j for j, t in enumerate(titles) if topic_rx.search(t) and verb_rx.search(t)]
        unreadable = _FlatTable(start, marks[k] if k < len(marks) else len(block), [])
        if not decisions:
            found = rows.closing(first, None)
            if found is None or len(found[0]) < 2:
                continue
        elif len(decisions) > 1 or decisions[0] not in (1, len(titles) - 1):
            return unreadable
        else:
            title = titles[decisions[0]]
            m = verb_rx.search(title)
            polarity = bool(m.group("p")) != bool(NEGATORS.search(title[: m.start()]))
            found = rows.closing(first, polarity) if decisions[0] == len(titles) - 1 else rows.leading(first, polarity)
            if found is None or not found[0]:
                return unreadable
        return _FlatTable(start, found[1], found[0])
    return None


def _blocks(text: str) -> list[str]:
    """Prose paragraphs (wrapped lines joined) and table rows (``a | b | c``, one each), in order.

    A short line (a table cell of a PDF, a heading) is a block of its own, so
    the cells of a table are not read as one long clause.
    """
    blocks: list[str] = []
    joinable = False
    for line in (ln.strip() for ln in text.splitlines()):
        if not line:
            joinable = False
            continue
        # A line that starts in lower case continues an unfinished line before it, however short
        # ("Leverage" wrapped away from "of 3.39x is within the maximum").
        continues = (
            line[0].islower()
            and bool(blocks)
            and _TABLE_CELL not in blocks[-1]
            and not blocks[-1].endswith((".", "!", "?", ":", ";"))
        )
        if (joinable or continues) and _TABLE_CELL not in line:
            blocks[-1] += " " + line
        else:
            blocks.append(line)
        last = blocks[-1]
        joinable = (
            _TABLE_CELL not in last
            and len(WORD.findall(line)) >= _WRAPPED_MIN_WORDS
            and not last.endswith((".", "!", "?", ":", ";"))
        )
    return blocks


def read_set(
    text: str,
    options: dict[str, str],
    *,
    topic: str,
    property_verbs: str,
    complement_verbs: str,
    plans: str | None = None,
) -> SetDecision:
    """Which options ``text`` puts inside the set (property verbs) and outside it (complement verbs).

    ``plans`` (a regex; default :data:`NOT_A_FINDING`) names the words that make
    a clause a plan or a condition rather than a finding, where a scenario's
    findings are themselves conditional ("the DSCR would be 1.15x").

    Prose is read clause by clause (above). A table (rows ``a | b | c``, as a
    Word table is read) is read by column: a header cell with a verb and the
    topic ("Meets target", "Above target?") makes its column the decision, and
    each row naming an option says yes or no (or the verb itself) there. A
    table flattened into a line of text is read by its header's order
    (:func:`_flat_table`), the prose around it as prose.
    """
    compiled = compile_options(options)
    topic_rx = re.compile(topic, re.I)
    verb_rx = re.compile(rf"(?P<p>\b(?:{property_verbs}))|(?P<c>\b(?:{complement_verbs}))", re.I)
    not_a_finding = NOT_A_FINDING if plans is None else re.compile(rf"\b(?:{plans})\b", re.I)
    out = SetDecision()

    def put(key: str, inside: bool, quote: str) -> None:
        (out.inside if inside else out.outside).setdefault(key, quote)

    previous: bool | None = None  # the last finding verb read: True = property, False = complement

    def read_prose(block: str) -> None:
        nonlocal previous
        # the options of a label just before a colon ("DSCR: 1.15x - does not comply")
        subject: list[tuple[int, str, int]] = []
        pieces = _CLAUSE_SPLIT_KEEP.split(block)
        for sentence, sep in zip(pieces[::2], pieces[1::2] + [""], strict=True):
            if not sentence.strip():
                continue
            for clause in _split_contrasts(sentence):
                mentions = _mentions(clause, compiled)
                verbs = [m for m in verb_rx.finditer(clause) if not any(s <= m.start() < e for s, _, e in mentions)]
                carried, subject = (subject if verbs and not mentions else []), []
                if carried:
                    # A label and its finding: the options of the clause before are the subject of this one.
                    clause = " ".join(key for _, key, _ in carried) + ": " + clause
                    mentions = _mentions(clause, compiled)
                    verbs = [m for m in verb_rx.finditer(clause) if not any(s <= m.start() < e for s, _, e in mentions)]
                if verbs:
                    # The verb nearest the topic ("Over October, Hillcrest met the target": "met").
                    topics = [(m.start(), m.end()) for m in topic_rx.finditer(clause)]
                    if not topics:
                        continue
                    verb = min(
                        verbs,
                        key=lambda v: min(
                            abs(v.start() - s) if v.start() >= e else abs(s - v.end()) for s, e in topics
                        ),
                    )
                    if not_a_finding.search(clause[: verb.start()]) or _INFINITIVE.search(clause[: verb.start()]):
                        continue
                    inside = bool(verb.group("p"))
                    # "did not meet", "not above"; a negation that is itself before an option belongs to the option.
                    before = clause[: verb.start()]
                    cut = max((e for s, _, e in mentions if e <= verb.start()), default=0)
                    if NEGATORS.search(" ".join(WORD.findall(before[cut:])[-3:])):
                        inside = not inside
                    previous = inside
                elif previous is not None and mentions and ELLIPTIC_NEGATION.search(clause):
                    inside = not previous
                else:
                    continue
                if not mentions:
                    continue
                quote = " ".join(clause.split())[:200]
                for start, key, _ in mentions:
                    put(key, inside != bool(OPTION_NEGATORS.search(clause[max(0, start - 40) : start])), quote)
                out.clauses.append(quote)
            # A short label before a colon, with no verb of its own, is the subject of the clause after the colon only.
            mentions = _mentions(sentence, compiled)
            if (
                sep.startswith(":")
                and mentions
                and len(WORD.findall(sentence)) <= _LABEL_WORDS
                and not verb_rx.search(sentence)
            ):
                subject = mentions

    def read_prose_and_tables(block: str) -> None:
        # A flattened table is read by its rows, the prose around it as prose.
        table = _flat_table(block, compiled, topic_rx, verb_rx, not_a_finding)
        if table is None:
            read_prose(block)
            return
        read_prose(block[: table.start])
        for key, inside, quote in table.rows:
            put(key, inside, quote[:200])
            out.clauses.append(quote[:200])
        read_prose_and_tables(block[table.end :])

    column: tuple[int, bool] | None = None  # the decision column of the table being read, and its polarity
    for block in _blocks(text):
        if _TABLE_CELL in block:
            cells = [c.strip() for c in block.split("|")]
            named = [(k, key) for k, c in enumerate(cells) for _, key, _ in _mentions(c, compiled)[:1]]
            # A header names no option; a row's own verdict cell ("Within limit") is not a header.
            header = (
                []
                if named
                else [(j, m) for j, c in enumerate(cells) if topic_rx.search(c) and (m := verb_rx.search(c))]
            )
            if header:
                j, m = header[0]
                column = (j, bool(m.group("p")) != bool(NEGATORS.search(cells[j][: m.start()])))
                continue
            if not named:
                continue
            if column is None:
                # No decision header ("Status", "Result"): one short cell with a verb and no figure is the verdict,
                # read by its verb below.
                verdicts = [
                    k
                    for k, c in enumerate(cells)
                    if k != named[0][0]
                    and verb_rx.search(c)
                    and len(WORD.findall(c)) <= _VERDICT_CELL_WORDS
                    and not re.search(r"\d", c)
                ]
                if len(verdicts) != 1:
                    continue
                j, polarity = verdicts[0], None  # a verdict cell has a verb: it is never a bare yes or no
            elif column[0] >= len(cells):
                continue
            else:
                j, polarity = column
            cell = cells[j]
            verb = verb_rx.search(cell)
            if _YES.match(cell):
                inside = polarity
            elif _NO.match(cell):
                inside = not polarity
            elif verb is not None:
                inside = bool(verb.group("p")) != bool(NEGATORS.search(cell[: verb.start()]))
            else:
                continue
            put(named[0][1], inside, block[:200])
            out.clauses.append(block[:200])
            continue
        column = None
        read_prose_and_tables(block)
    return out
