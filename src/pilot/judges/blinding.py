"""Remove from rendered deliverables anything that would tell a judge the condition.

The prompt is built from the brief, the rubric and the rendered deliverables
only, so the arm, model, node, cost, event stream and oracle never enter it
directly. What can still leak is what the worker wrote into its files: a
note that a spreadsheet is a text substitute because the environment has no
shell, a path that encodes the run id, a mention of the self-check or of
LibreOffice. :func:`scrub` removes those, sentence by sentence (cell by cell
in a table row), identically for every arm, so two packages with the same
content and different tells render to the same text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

# Sentences that describe the worker's environment, tools or the harness.
# Kept specific: words such as "shell" or "restricted" alone are ordinary
# business vocabulary and are not removed.
_ENV_PHRASES = [
    r"\bsubstitut\w*\b.{0,80}\b(xlsx|docx|pdf|workbook|spreadsheet|excel|word|binary|office|format|file)",
    r"\b(xlsx|docx|pdf|workbook|spreadsheet|excel|word document|binary|office|format)\b.{0,80}\bsubstitut\w*",
    r"\b(text|markdown|csv|plain[- ]text)\b.{0,40}\b(substitute|equivalent|stand-in|in place of)\b",
    r"\bclosest (text )?equivalent\b",
    r"\bbinary (office )?(file|format|document)s?\b",
    r"\b(cannot|can ?not|can't|could not|couldn't|unable to|not able to|no way to|impossible to)\b.{0,60}"
    r"\b(produce|create|write|generate|save|run|execute|render|convert|recalculat\w*|build|export)\b.{0,60}"
    r"\b(xlsx|docx|excel|word document|binary|office (file|format)s?|programs?|scripts?|formulas?|libreoffice|"
    r"shell|python|spreadsheet file|workbook file|pdf file)\b",
    r"\b(no|without( a| any)?|lack(ing)?( of)?|not have( a| any)?|no access to( a| any)?)\s+"
    r"(shell|terminal|command[- ]line|bash|python|code execution|program execution|scripting|ability to run)",
    r"\bfile tools\b",
    r"\bread, write, edit\b",
    r"\b(my|this) (working )?(environment|sandbox|toolset|tool set|tools)\b.{0,60}"
    r"\b(allow|permit|provide|support|include|lack|limit|restrict|only|does not|doesn't|did not|cannot)",
    r"\b(environment|sandbox) (limitation|restriction|constraint)s?\b",
    r"\b(bash|glob|grep|read|write|edit) tool\b",
    r"\b(libre ?office|soffice|osascript|textutil|qlmanage|cupsfilter|playwright|chromium|headless browser)\b",
    r"\bself[- ]?check\w*",
    r"\bcheckpoint(\.md| file)\b",
    r"\brecovery (session|resume|run|attempt)\b",
    r"\bresum(e|ed|ing) (the |this |my )?(previous |earlier )?session\b",
    r"\bportal_credentials\b",
    r"\b(claude|anthropic|opus|sonnet|haiku|fable)\b",
    r"\b(language model|large language model|llm|ai (assistant|agent|model|system)|as an ai)\b",
    r"\barm\s*A\d\b",
    r"\bA\d\s+arm\b",
    r"\b(restricted|shell|macos|full computer[- ]use|self[- ]repairing)\s+arm\b",
    r"\bcomputer[- ]use\b",
    r"\bself[- ]repair\w*",
    r"\b(event stream|stream-json|total_cost_usd|max[- ]turns|max[- ]budget)\b",
    r"\b(spending cap|budget cap|wall[- ]clock limit|wall limit)\b",
]

# Identifiers: run ids such as ``ACC-01-A3-r2`` or ``ACC-01_A0_2``, uuids, long hashes.
_RUN_ID = re.compile(r"\b[A-Za-z]{2,8}-\d{2}[-_./]+A\d(?:[-_./]+(?:r|rep|repeat)?\d+)?\w*", re.I)
_ARM_REPEAT = re.compile(r"\bA\d[-_](?:r|rep|repeat)\d+\b", re.I)
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{16,}\b", re.I)
# Absolute paths (POSIX, home, Windows): keep only the last component.
_POSIX_PATH = re.compile(r"(?<![\w./:~-])(?:~|/)(?:[^\s/|\"'<>()\[\]]+/)+([^\s/|\"'<>()\[\],;]*)")
_WIN_PATH = re.compile(r"\b[A-Za-z]:\\(?:[^\s\\|\"'<>]+\\)+([^\s\\|\"'<>,;]*)")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?;])\s+(?=\S)")


@lru_cache(maxsize=1)
def _env_pattern() -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in _ENV_PHRASES), re.I)


def is_tell(fragment: str) -> bool:
    """Whether a sentence or cell speaks about the worker's environment or the harness."""
    return bool(_env_pattern().search(fragment))


def _withholdable(literal: str) -> bool:
    # A bare short word ("local", "pilot") would cut ordinary prose; identifiers
    # carry digits or punctuation, or are long.
    return len(literal) >= 4 and (not literal.isalpha() or len(literal) >= 10)


def _strip_paths(text: str) -> str:
    # An absolute path keeps only its last component (a file name is content; its folders are the harness's).
    text = _POSIX_PATH.sub(lambda m: m.group(1), text)
    return _WIN_PATH.sub(lambda m: m.group(1), text)


def _identifier_pattern(withheld: list[str]) -> re.Pattern[str]:
    alts = [r"(?<![\w])" + re.escape(w) + r"(?![\w])" for w in withheld]
    alts += [_RUN_ID.pattern, _ARM_REPEAT.pattern, _UUID.pattern, _HEX.pattern]
    return re.compile("|".join(f"(?:{a})" for a in alts), re.I)


def _drop(fragment: str, ids: re.Pattern[str]) -> bool:
    # A sentence naming the run, the node or the study speaks about the harness, not the work.
    return is_tell(fragment) or bool(ids.search(fragment))


def _scrub_prose(line: str, ids: re.Pattern[str]) -> str:
    parts = _SENTENCE_SPLIT.split(line)
    kept = [p for p in parts if not _drop(p, ids)]
    if len(kept) == len(parts):
        return line
    return " ".join(kept).strip()


def _scrub_row(line: str, ids: re.Pattern[str]) -> str:
    inner = line.strip()
    cells = inner.strip("|").split("|")
    if not any(_drop(c, ids) for c in cells):
        return line
    return "| " + " | ".join("" if _drop(c, ids) else c.strip() for c in cells) + " |"


def scrub(text: str, withheld: Iterable[str] = ()) -> str:
    """The text with condition tells removed.

    ``withheld`` are literal strings that must not reach a judge (the run id,
    the node name, the study name); a sentence or table cell naming one of
    them, or any run id, uuid or long hash, is dropped whole. Absolute paths
    are cut to their last component first, so a workspace path never
    survives.
    """
    lits = sorted({str(w) for w in withheld if w and _withholdable(str(w))}, key=len, reverse=True)
    ids = _identifier_pattern(lits)
    out: list[str] = []
    for line in text.splitlines():
        clean = _strip_paths(line)
        if clean.lstrip().startswith("|"):
            clean = _scrub_row(clean, ids)
        else:
            clean = _scrub_prose(clean, ids)
        # A line that only carried a tell disappears instead of leaving a blank trace.
        if clean.strip() or not line.strip():
            out.append(clean)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out))
