"""Oracle reasons written for people: the words a pattern stands for, not its syntax.

The deterministic oracles (frozen code) state their reasons with the
patterns of ``oracle.yml`` as written: ``does not mention: NSF|returned|dishonou?red``,
``no cell labelled /balance per bank( statement)?/``, ``names exactly {DSCR}``.
A reader wants what the pattern is for. :func:`pattern_words` reads a pattern
with Python's own regular-expression parser and lists the plain phrases it
accepts (an optional part with and without it, each alternative apart);
:func:`for_people` puts those phrases in the reason where the criterion's own
patterns stand, so only patterns the criterion declares are ever rewritten.
:func:`criterion_intent` says what a criterion checks, from its author's
``description`` when there is one. The oracle's own words stay available
beside the rewritten ones.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

try:  # the parser behind re.compile: Python 3.11 moved it from sre_parse
    import re._parser as _sre  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - older interpreters
    import sre_parse as _sre

#: Plain phrases listed at most per pattern (an optional part doubles them).
MAX_PHRASES = 64
_C = _sre  # constants (LITERAL, BRANCH, ...) live on the parser module in every version
_PARAM_KEYS = ("label", "column", "near", "section", "topic", "key")


def _const(name: str) -> Any:
    return getattr(_C, name, None) or getattr(getattr(_C, "_constants", _C), name, None)


LITERAL, NOT_LITERAL, ANY, IN, AT, BRANCH, SUBPATTERN = map(
    _const, ("LITERAL", "NOT_LITERAL", "ANY", "IN", "AT", "BRANCH", "SUBPATTERN")
)
MAX_REPEAT, MIN_REPEAT, CATEGORY, RANGE, NEGATE = map(
    _const, ("MAX_REPEAT", "MIN_REPEAT", "CATEGORY", "RANGE", "NEGATE")
)
_SPACE_CATEGORIES = {str(_const(n)) for n in ("CATEGORY_SPACE", "CATEGORY_NOT_WORD")}
_DIGIT_CATEGORIES = {str(_const("CATEGORY_DIGIT"))}


def _limit(options: list[str]) -> list[str]:
    out = list(dict.fromkeys(options))
    if len(out) > MAX_PHRASES:
        out = sorted(out, key=len)[:MAX_PHRASES]
    return out


def _product(a: list[str], b: list[str]) -> list[str]:
    return _limit([x + y for x in a for y in b])


def _class_text(items: list[tuple[Any, Any]]) -> str:
    """One character a class stands for: a space for a whitespace class, a digit, else its first member."""
    for op, arg in items:
        if op is NEGATE:
            return " "
        if op is CATEGORY:
            if str(arg) in _SPACE_CATEGORIES:
                return " "
            if str(arg) in _DIGIT_CATEGORIES:
                return "0"
            return "x"
        if op is LITERAL:
            return chr(arg)
        if op is RANGE:
            return chr(arg[0])
    return ""


def _spaces_only(parsed: Any) -> bool:
    return all((op is IN and _class_text(list(arg)) == " ") or (op is LITERAL and arg == 32) for op, arg in parsed)


def _wildcard(parsed: Any) -> bool:
    """A repeated class of letters, digits or anything (``\\w*``, ``\\d+``, ``.*``): it reads as "…"."""
    return all(op is ANY or (op is IN and _class_text(list(arg)) != " ") for op, arg in parsed)


def _phrases(parsed: Any) -> list[str]:
    """The strings a parsed pattern accepts, one per choice of its alternatives and optional parts."""
    out = [""]
    for op, arg in parsed:
        if op is LITERAL:
            opts = [chr(arg)]
        elif op is IN:
            opts = [_class_text(list(arg))]
        elif op in (ANY, NOT_LITERAL):
            opts = ["…"]
        elif op is AT:
            opts = [""]
        elif op is BRANCH:
            opts = _limit([p for branch in arg[1] for p in _phrases(branch)])
        elif op is SUBPATTERN:
            opts = _phrases(arg[-1])
        elif op in (MAX_REPEAT, MIN_REPEAT):
            low, _high, sub = arg
            once = _phrases(sub)
            if _wildcard(sub):
                opts = ["…"]
            elif low == 0:
                # An optional run of spaces reads as one space; any other optional part with and without it.
                opts = [" "] if _spaces_only(sub) else _limit([""] + once)
            else:
                opts = once if _spaces_only(sub) else _limit([p * min(low, 3) for p in once])
        else:
            opts = [""]
        out = _product(out, opts)
    return out


def _tidy(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@lru_cache(maxsize=4096)
def pattern_words(pattern: str) -> tuple[tuple[str, ...], ...]:
    """The plain phrases of a pattern, one tuple per top-level alternative, shortest phrase first.

    >>> pattern_words("NSF|returned|dishonou?red")
    (('NSF',), ('returned',), ('dishonored', 'dishonoured'))
    >>> pattern_words("balance per bank( statement)?")
    (('balance per bank', 'balance per bank statement'),)
    """
    try:
        parsed = _sre.parse(pattern)
    except (re.error, RecursionError, ValueError, TypeError):
        return ((pattern,),)
    items = list(parsed)
    branches = items[0][1][1] if len(items) == 1 and items[0][0] is BRANCH else [parsed]
    out = []
    for b in branches:
        phrases = sorted({_tidy(p) for p in _phrases(b)} - {""}, key=lambda p: (len(p), p))
        if phrases:
            out.append(tuple(phrases))
    return tuple(out) or ((pattern,),)


def _quote(text: str) -> str:
    return f"“{text}”"


def describe_pattern(pattern: str) -> str:
    """A pattern in words: ``“NSF”, “returned” or “dishonored” (or “dishonoured”)``."""
    parts = []
    for phrases in pattern_words(pattern):
        if len(phrases) == 1:
            parts.append(_quote(phrases[0]))
        elif len(phrases) == 2:
            parts.append(f"{_quote(phrases[0])} (or {_quote(phrases[1])})")
        else:
            parts.append(f"{_quote(phrases[0])} (or a longer form such as {_quote(phrases[-1])})")
    if len(parts) <= 1:
        return parts[0] if parts else _quote(pattern)
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def _patterns(criterion: Any) -> list[str]:
    """Every pattern string the criterion declares (its ``patterns`` and its labels, columns, sections ...)."""
    if criterion is None:
        return []
    get = criterion.get
    found: list[str] = []
    for key in ("patterns", *_PARAM_KEYS):
        v = get(key)
        for p in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(p, str) and p:
                found.append(p)
    opts = get("options")
    if isinstance(opts, dict):
        found += [str(v) for v in opts.values() if isinstance(v, str) and v]
    return sorted(dict.fromkeys(found), key=len, reverse=True)


def _looks_like_syntax(pattern: str) -> bool:
    return bool(re.search(r"[\\|()?*+\[\]{}^$]", pattern))


def _mention_list(tail: str, patterns: list[str]) -> str | None:
    """``tail`` ("p1, p2") rewritten pattern by pattern when it is exactly a list of the criterion's patterns."""
    out, rest = [], tail
    while rest:
        p = next((p for p in patterns if rest == p or rest.startswith(p + ", ")), None)
        if p is None:
            return None
        out.append(describe_pattern(p))
        rest = rest[len(p) + 2 :] if rest != p else ""
    return "; ".join(out)


_MENTION = re.compile(r"^(?P<head>.*?\b(?:does not mention|mentions))(?P<colon>:?) (?P<tail>.+)$", re.S)
_SET = re.compile(r"\bexactly \{([^{}]*)\}")


def for_people(reason: Any, criterion: Any = None) -> str:
    """The oracle's reason with the criterion's patterns in words (unchanged when it quotes none of them)."""
    text = "" if reason is None else str(reason)
    patterns = _patterns(criterion)
    m = _MENTION.match(text)
    if m and patterns:
        listed = _mention_list(m.group("tail"), patterns)
        if listed is not None:
            verb = "does not mention" if m.group("head").endswith("does not mention") else "mentions"
            head = m.group("head")[: -len(verb)]
            return f"{head}{verb} {listed}"
    for p in patterns:
        if f"/{p}/" in text:
            text = text.replace(f"/{p}/", describe_pattern(p))
    text = _SET.sub(lambda s: "exactly " + (", ".join(x.strip() for x in s.group(1).split(",")) or "none"), text)
    return text


def rewritten(reason: Any, criterion: Any = None) -> bool:
    """Whether :func:`for_people` changes the reason (the page then offers the oracle's own words too)."""
    return for_people(reason, criterion) != ("" if reason is None else str(reason))


def _file(c: Any) -> str:
    return str(getattr(c, "file", "") or "the deliverable")


def _amount(c: Any) -> str:
    exp, tol = c.get("expected"), c.get("tolerance")
    if exp is None:
        return ""
    return f"{exp}" + (f" ± {tol}" if tol not in (None, 0, 0.0) else "")


def criterion_intent(c: Any) -> str:
    """What a criterion checks, in words: its author's description, else a sentence made from its kind and fields."""
    if c is None:
        return ""
    if getattr(c, "description", ""):
        return str(c.description)
    kind, f = str(getattr(c, "kind", "")), _file(c)
    where = f" on sheet {c.get('sheet')}" if c.get("sheet") else ""
    under = f" under {describe_pattern(c.get('column'))}" if c.get("column") else ""
    if kind == "present":
        return f"{f} is delivered"
    if kind == "well_formed":
        return f"{f} is a valid, readable file of its type"
    if kind == "formulas":
        return f"{f} is a working workbook with at least {c.get('min_count', 1)} formulas"
    if kind == "no_error_values":
        return f"{f} shows no error values after recalculation"
    if kind == "min_words":
        return f"{f} is long enough for the brief"
    if kind == "sections":
        return f"{f} has every section the brief asks for"
    if kind == "completion_record":
        return "the completion record is valid and matches the delivered files"
    if kind == "labelled_value":
        return f"{f} states {describe_pattern(c.get('label'))}{under}{where} = {_amount(c)}"
    if kind == "labelled_bounds":
        return f"{f}: each line{under} stays within the brief's bounds"
    if kind in ("workbook_contains", "text_contains"):
        pats = c.get("patterns") or []
        return f"{f} mentions " + "; ".join(describe_pattern(p) for p in pats)
    if kind == "text_number":
        near = f" near {describe_pattern(c.get('near'))}" if c.get("near") else ""
        return f"{f} states {_amount(c)}{near}"
    if kind == "csv_columns":
        return f"{f} has the columns {', '.join(map(str, c.get('columns') or []))}"
    if kind == "csv_keys":
        return f"{f} lists exactly the expected {c.get('key')} values"
    if kind == "csv_value":
        return f"{f}: {c.get('column')} for {c.get('key')} {c.get('key_value')} = {_amount(c)}"
    if kind == "decision":
        exp = c.get("expected")
        exp = ", ".join(map(str, exp)) if isinstance(exp, (list, tuple)) else exp
        what = (
            f"the row {c.get('key')} {c.get('key_value')}" if c.get("key_value") else describe_pattern(c.get("label"))
        )
        if c.get("section"):
            sec = c.get("section")
            what = "the section " + (" or ".join(map(str, sec)) if isinstance(sec, (list, tuple)) else str(sec))
        elif not c.get("label") and not c.get("key_value"):
            what = "the deliverable"
        return f"{f}: {what} decides {exp}"
    if kind == "closed_scale":
        return f"{f}: column {c.get('column')} uses only {', '.join(map(str, c.get('values') or []))}"
    return f"{f}: {kind.replace('_', ' ')}"
