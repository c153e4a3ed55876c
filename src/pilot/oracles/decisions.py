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
_WORD = re.compile(r"\S+")


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
    before = _WORD.findall(text[:start])[-words:]
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


def read_clause(clause: str, options: dict[str, re.Pattern[str]], *, whole_cell: bool = False) -> tuple[str | None, str | None]:
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
        option_negated = bool(NEGATORS.search(" ".join(_WORD.findall(clause[verb.end():start])[-4:])))
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
