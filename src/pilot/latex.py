"""LaTeX for the manuscript: tables with their caption and label, one macro per number, escaping, and the SIMULATED tag.

Every number the manuscript states comes from a file written here: tables
(``write_table``) and macro files with one ``\\newcommand`` per number
(``write_macros``). A table computed from data that is not a finding says
so in its caption (SIMULATED for a dry run, REHEARSAL for a rehearsal; the
label comes from the backend, :mod:`pilot.backends`), and macros carry it so
the text can say it too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from pilot.backends import SIMULATED_LABEL

SIMULATED_TAG = SIMULATED_LABEL


def data_label(simulated: bool | str) -> str:
    """The label a caption or title starts with: a backend's label as given (:func:`pilot.backends.label`),
    SIMULATED for ``True``, nothing for ``False`` or ``""`` (a finding)."""
    if isinstance(simulated, str):
        return simulated
    return SIMULATED_TAG if simulated else ""


_DIGITS = ["Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine"]
_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    # Symbols the result objects print, which T1-encoded LaTeX has no glyph for in text.
    "\u221e": r"\ensuremath{\infty}",
    "\u2212": r"\ensuremath{-}",
    "\u2265": r"\ensuremath{\geq}",
    "\u2264": r"\ensuremath{\leq}",
    "\u00b2": r"\textsuperscript{2}",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text (a double hyphen stays two hyphens, as in ``--tools``)."""
    out = "".join(_ESCAPES.get(c, c) for c in str(text))
    out = out.replace("--", "-{}-").replace("-{}--", "-{}-{}-")
    return out.replace(">=", "\\ensuremath{\\geq}").replace("<=", "\\ensuremath{\\leq}")


# Column names of result tables, in words (LaTeX). Unlisted snake_case names
# become words with their first letter capitalised.
HEADER_WORDS: dict[str, str] = {
    "arm": "Arm",
    "p_hat": "$\\hat p_a$",
    "ci_low": "2.5\\%",
    "ci_high": "97.5\\%",
    "n_runs": "Runs",
    "n_scored": "Scored",
    "estimate": "Estimate",
    "p_value": "$p$",
    "p_holm": "$p_{\\mathrm{Holm}}$",
    "n_scenarios": "$J$",
    "contrast": "Contrast",
    "role": "Role",
    "term": "Term",
    "log_odds": "Log odds",
    "se_cluster": "SE (clustered)",
    "odds_ratio": "Odds ratio",
    "or_ci_low": "OR 2.5\\%",
    "or_ci_high": "OR 97.5\\%",
    # Small-sample readings beside the preregistered ones (pilot.stats.small_sample).
    "p_t": "$p$, $t(J{-}1)$",
    "or_ci_t_low": "OR 2.5\\%, $t$",
    "or_ci_t_high": "OR 97.5\\%, $t$",
    "pct_low": "Pct.\\ 2.5\\%",
    "pct_high": "Pct.\\ 97.5\\%",
    "t_low": "$t$ 2.5\\%",
    "t_high": "$t$ 97.5\\%",
    "wild_low": "Wild 2.5\\%",
    "wild_high": "Wild 97.5\\%",
    "p_sign_flip": "$p$ sign-flip",
    "p_wild": "$p$ wild",
    "accepted_in_all_R": "All $R$ accepted",
    "scenarios_with_R": "Scenarios with $R$",
    **{f"pass_{k}": f"pass$^{k}$" for k in range(1, 10)},
    "median_min": "Median (min)",
    "cost_per_run": "Cost per run (\\$)",
    "cost_per_accepted": "Cost per accepted (\\$)",
    "share_lowest": "Share lowest",
    "n_charged": "N charged",
    "n_no_cost": "N no cost",
    "cost_usd": "Cost (\\$)",
    "judge_cost_usd": "Judge cost (\\$)",
    "wall_min": "Wall (min)",
    "tool_calls": "Tool calls",
    "I2": "$I^2$",
    "i2": "$I^2$",
    "tau2": "$\\tau^2$",
    "q": "$q$",
    "n": "$n$",
    "spent_usd": "Spent (\\$)",
    "reserved_usd": "Reserved (\\$)",
    "budget_usd": "Budget (\\$)",
    "human_minutes": "Human time (min)",
    "se": "SE",
    "quantity": "Quantity",
    "value": "Value",
    "statistic": "Statistic",
    "df": "df",
}
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)+$|^[a-z][a-z0-9]*$")


def header_words(name: object) -> str:
    """A column name as a table header: listed names from :data:`HEADER_WORDS`, other snake_case names in words."""
    text = str(name)
    plain = text.replace("\\_", "_")
    if plain in HEADER_WORDS:
        return HEADER_WORDS[plain]
    arm_share = re.fullmatch(r"p_(A[0-9]+)", plain)
    if arm_share:
        return f"$\\hat p_{{\\mathrm{{{arm_share.group(1)}}}}}$"
    if _IDENTIFIER.match(plain):
        words = plain.replace("_", " ")
        words = re.sub(r"(\d+)min\b", r"\1 min", words)
        words = re.sub(r"^n ", "number of ", words)
        words = re.sub(r"\bci low$", "2.5%", words)
        words = re.sub(r"\bci high$", "97.5%", words)
        words = latex_escape(words[:1].upper() + words[1:])
        return re.sub(r"\busd\b", lambda _: "(\\$)", words)
    return text


_P_COLUMN = re.compile(r"^(p|p_value|p_holm|p_.*|.*_p)$")
_SHARE_COLUMN = re.compile(r"^p_(a[0-9]+|hat)$")
_USD_COLUMN = re.compile(r"usd|cost|dollar")
_MINUTES_COLUMN = re.compile(r"(^|_)min$|minutes")


def signed(text: str) -> str:
    """A formatted number with a true minus sign; a negative zero loses its sign."""
    if text.startswith("-"):
        body = text[1:]
        if re.fullmatch(r"[0.]+", body):
            return body
        return "\\ensuremath{-}" + body
    return text


def column_format_for(name: str, default: str = "%.3f") -> str:
    """Decimals by what a column holds: three for p-values, two for dollars, one for minutes."""
    plain = str(name).replace("\\_", "_").lower()
    if _P_COLUMN.match(plain):
        return "%.3f"
    if _USD_COLUMN.search(plain):
        return "%.2f"
    if _MINUTES_COLUMN.search(plain):
        return "%.1f"
    return default


def _cell(value: object, fmt: str, *, escape: bool, is_p: bool) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "---"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int,)) or (hasattr(value, "dtype") and value.dtype.kind in "iu"):
        return f"{int(value):,}".replace(",", "{,}")
    if isinstance(value, float) or (hasattr(value, "dtype") and value.dtype.kind == "f"):
        v = float(value)
        if math.isinf(v):
            return "$\\infty$" if v > 0 else "$-\\infty$"
        if is_p and 0 <= v < 0.001:
            return "$<$0.001"
        return signed(fmt % v)
    text = str(value)
    if escape:
        text = latex_escape(text)
        text = re.sub(r"(?<![A-Za-z])I2(?![A-Za-z0-9])", "$I^2$", text)
    return contrast_minus(text)


#: A contrast of two arms as the data name it ("A3-A1", "p(A3) - p(A1)"): a difference, printed with a true minus.
_CONTRAST = re.compile(r"(?<![\w$])((?:p\()?A\d+\)?)\s?-\s?((?:p\()?A\d+\)?)(?![\w])")


def contrast_minus(text: str) -> str:
    """``A3-A1`` as ``A3$-$A1`` (and ``p(A3) - p(A1)`` with a spaced minus), so a table prints the text's minus sign."""
    return _CONTRAST.sub(
        lambda m: f"{m.group(1)}$-${m.group(2)}" if "(" not in m.group(1) else f"{m.group(1)} $-$ {m.group(2)}", text
    )


_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


def number_word(n: int) -> str:
    """Small counts in words, as running text writes them; larger ones as digits."""
    return _WORDS[n] if 0 <= n < len(_WORDS) else f"{n:,}".replace(",", "{,}")


def macro_name(*parts: object) -> str:
    """A valid LaTeX macro name from parts: digits spelled out, other symbols dropped.

    ``macro_name("power", "J", 10, "R", 3)`` gives ``PowerJOneZeroRThree``.
    """
    out = []
    for part in parts:
        s = str(part)
        s = "".join(_DIGITS[int(c)] if c.isdigit() else c for c in s)
        words = re.split(r"[^A-Za-z]+", s)
        out.append("".join(w[:1].upper() + w[1:] for w in words if w))
    name = "".join(out)
    if not name:
        raise ValueError(f"no letters in macro parts {parts!r}")
    return name


def format_number(value: object, digits: int = 3) -> str:
    """Format a number for the text; missing values print as an em dash."""
    if value is None:
        return "---"
    if isinstance(value, float) and math.isnan(value):
        return "---"
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return f"{value:,}".replace(",", "{,}")
    if isinstance(value, float):
        return signed(f"{value:.{digits}f}")
    return latex_escape(str(value))


_DOLLAR_MACRO = re.compile(r"Usd|Cost|CPA|Dollars")
_MINUTES_MACRO = re.compile(r"Median|Minutes")


def macro_digits(name: str, default: int) -> int:
    """Decimals of a macro's number by what it holds: two for dollars, one for minutes, else ``default``."""
    if _DOLLAR_MACRO.search(name):
        return 2
    if _MINUTES_MACRO.search(name):
        return 1
    return default


class LatexText(str):
    """A macro value that is already LaTeX (a generated sentence with markup): written as it is, never escaped."""


def write_macros(values: Mapping[str, object], path: Path, *, digits: int = 3, comment: str = "") -> Path:
    """Write one ``\\newcommand`` per entry; keys must already be macro names."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["% Generated file: do not edit. " + comment.strip()]
    for key, value in values.items():
        if not re.fullmatch(r"[A-Za-z]+", key):
            raise ValueError(f"{key!r} is not a valid LaTeX macro name (letters only)")
        raw = isinstance(value, LatexText) or (isinstance(value, str) and value.startswith("\\"))
        text = value if raw else format_number(value, macro_digits(key, digits))
        lines.append(f"\\newcommand{{\\{key}}}{{{text}}}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


_NOT_ESTIMABLE = "not estimable"


# A cell merged into the "not estimable" cell before it (removed from the row after pandas writes it).
_MERGED = "\x00merged"


def _merge_not_estimable_runs(shown: pd.DataFrame, *, note_column: int | None) -> None:
    """Two or more neighbouring "not estimable" cells of a row (the reason in its note) become one cell spanning them.

    A row of an arm without runs then reads "not estimable" once across the table, instead of eleven times side by
    side, which would push the table past the page.
    """
    for r in range(len(shown)):
        row = list(shown.iloc[r])
        k = 0
        while k < len(row):
            j = k
            while j < len(row) and row[j] == _NOT_ESTIMABLE and j != note_column:
                j += 1
            if j - k >= 2:
                shown.iat[r, k] = f"\\multicolumn{{{j - k}}}{{c}}{{{_NOT_ESTIMABLE}}}"
                for m in range(k + 1, j):
                    shown.iat[r, m] = _MERGED
            k = max(j, k + 1)


def _short_reasons(df: pd.DataFrame) -> pd.DataFrame:
    """Where a row's note already gives the reason, its cells read "not estimable" without repeating it."""
    note = next((c for c in df.columns if str(c).lower() == "note"), None)
    if note is None:
        return df
    out = df.copy()
    for c in out.columns:
        if c == note:
            continue
        vals = out[c].tolist()
        new = [
            _NOT_ESTIMABLE
            if isinstance(v, str)
            and v.startswith(_NOT_ESTIMABLE + " (")
            and isinstance(n, str)
            and n
            and v[len(_NOT_ESTIMABLE) + 2 : -1] in n
            else v
            for v, n in zip(vals, out[note].tolist(), strict=True)
        ]
        if new != vals:
            out[c] = pd.Series(new, index=out.index, dtype=object)
    return out


def escape_text_cells(df: pd.DataFrame) -> pd.DataFrame:
    """Text cells escaped for LaTeX (for tables written with ``escape=False`` because their headers hold math)."""
    return df.apply(
        lambda col: (
            col.map(lambda v: latex_escape(v).replace("<", "\\textless{}") if isinstance(v, str) else v)
            if col.dtype == object
            else col
        )
    )


def _notes_as_letters(df: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """``df`` without its note column, each row with a note marked ``(a)``, ``(b)`` ... in its first cell (one
    letter per distinct note, in order), and the notes by letter."""
    col = next((c for c in df.columns if str(c).replace("\\_", "_").lower() == "note"), None)
    if col is None:
        return df, []
    letters: dict[str, str] = {}
    marked = []
    for first, text in zip(df.iloc[:, 0].tolist(), df[col].tolist(), strict=True):
        if isinstance(text, str) and text.strip():
            n = len(letters)
            letter = letters.setdefault(text.strip(), "abcdefghijklmnopqrstuvwxyz"[n] if n < 26 else str(n + 1))
            marked.append(f"{first} ({letter})")
        else:
            marked.append(first)
    out = df.drop(columns=col)
    out[out.columns[0]] = pd.Series(marked, index=out.index, dtype=object)
    return out, [(letter, text) for text, letter in letters.items()]


def write_table(
    df: pd.DataFrame,
    path: Path,
    *,
    caption: str,
    label: str,
    simulated: bool | str = False,
    float_format: str = "%.3f",
    column_format: str | None = None,
    escape: bool = True,
    note: str | None = None,
    font: str = "\\small",
    notes_below: bool = False,
) -> Path:
    """Write ``df`` as a booktabs table environment; prefix the caption with the data's label (``simulated``: see
    :func:`data_label`).

    ``notes_below``: a table with many columns has no room for its notes; each distinct note gets a letter, marked on
    its rows' first cell, and the notes are printed below the table, so a study whose rows carry long notes (a
    rehearsal's missing arm, a lattice point) typesets as one whose rows carry none.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tag = data_label(simulated)
    cap = (f"\\textbf{{{tag}.}} " if tag else "") + contrast_minus(caption)
    # Cells are formatted here, column by column (true minus signs; decimals by
    # what the column holds), and headers put in words; then nothing is escaped twice.
    df = _short_reasons(df)
    marks: list[str] = []
    if notes_below:
        df, lettered = _notes_as_letters(df)
        marks = [f"({letter}) {_cell(text, '%s', escape=escape, is_p=False)}" for letter, text in lettered]
    if column_format is None:
        # A note column with nothing in it says nothing: it is left out (a table with an explicit layout keeps its
        # columns).
        empty = [
            c
            for c in df.columns
            if str(c).replace("\\_", "_").lower() == "note"
            and all(
                v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())
                for v in df[c].tolist()
            )
        ]
        df = df.drop(columns=empty)
    shown = pd.DataFrame(index=df.index)
    for i, col in enumerate(df.columns):
        fmt = column_format_for(col, float_format)
        plain = str(col).replace("\\_", "_").lower()
        # An arm's share (p_A3, p_hat) is a proportion, not a p-value: 0/3 prints 0.000, never "<0.001".
        is_p = bool(_P_COLUMN.match(plain)) and not _SHARE_COLUMN.match(plain)
        shown[i] = [_cell(v, fmt, escape=escape, is_p=is_p) for v in df[col].tolist()]
    shown.columns = [
        contrast_minus(header_words(c) if (escape or _IDENTIFIER.match(str(c).replace("\\_", "_"))) else str(c))
        for c in df.columns
    ]
    if column_format is None:  # numbers right-aligned, text left-aligned

        def is_number(v: object) -> bool:
            return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))

        def is_value(v: object) -> bool:  # a number, or what stands in for one
            return is_number(v) or (isinstance(v, str) and (v.startswith(_NOT_ESTIMABLE) or v == "\u221e"))

        numeric = [
            any(is_number(v) for v in vals) and all(is_value(v) for v in vals)
            for vals in ([v for v in df[c].tolist() if v is not None] for c in df.columns)
        ]
        # A long note (a fit's reason) wraps in a column of its own width, so the table is not shrunk to nothing.
        long_note = [
            str(c).lower() == "note" and max((len(str(v)) for v in df[c].tolist()), default=0) > 40 for c in df.columns
        ]
        column_format = "".join(
            ">{\\raggedright\\arraybackslash}p{4.5cm}" if w else ("r" if n else "l")
            for n, w in zip(numeric, long_note, strict=True)
        )
    _merge_not_estimable_runs(
        shown,
        note_column=next((i for i, c in enumerate(df.columns) if str(c).replace("\\_", "_").lower() == "note"), None),
    )
    body = shown.to_latex(index=False, escape=False, column_format=column_format, na_rep="---")
    body = re.sub(r"\s*&\s*" + _MERGED, "", body)
    parts = [
        "% Generated file: do not edit.",
        "\\begin{table}[htbp]",
        "\\centering",
        font,
        f"\\caption{{{cap}}}",
        f"\\label{{{label}}}",
        body.strip(),
    ]
    if marks:  # set as a paragraph of the table's width, not centred line by line
        parts.append(f"\\par\\smallskip\\parbox{{\\linewidth}}{{\\footnotesize {'; '.join(marks)}.}}")
    if note:
        parts.append(f"\\par\\smallskip\\footnotesize {note}")
    parts.append("\\end{table}")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path
