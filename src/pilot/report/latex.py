"""Generated LaTeX for the manuscript.

Every number the manuscript states comes from a file written here: tables
(``write_table``) and macro files with one ``\\newcommand`` per number
(``write_macros``). A table computed from simulated data says SIMULATED in
its caption, and macros carry the flag so the text can say it too.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Mapping

import pandas as pd

SIMULATED_TAG = "SIMULATED"

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
}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text."""
    return "".join(_ESCAPES.get(c, c) for c in str(text))


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
        return f"{value:.{digits}f}"
    return latex_escape(str(value))


def write_macros(values: Mapping[str, object], path: Path, *, digits: int = 3, comment: str = "") -> Path:
    """Write one ``\\newcommand`` per entry; keys must already be macro names."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["% Generated file: do not edit. " + comment.strip()]
    for key, value in values.items():
        if not re.fullmatch(r"[A-Za-z]+", key):
            raise ValueError(f"{key!r} is not a valid LaTeX macro name (letters only)")
        text = value if isinstance(value, str) and value.startswith("\\") else format_number(value, digits)
        lines.append(f"\\newcommand{{\\{key}}}{{{text}}}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_table(
    df: pd.DataFrame,
    path: Path,
    *,
    caption: str,
    label: str,
    simulated: bool = False,
    float_format: str = "%.3f",
    column_format: str | None = None,
    escape: bool = True,
    note: str | None = None,
    font: str = "\\small",
) -> Path:
    """Write ``df`` as a booktabs table environment; prefix the caption with SIMULATED when asked."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cap = (f"\\textbf{{{SIMULATED_TAG}.}} " if simulated else "") + caption
    body = df.to_latex(
        index=False,
        escape=escape,
        float_format=lambda v: float_format % v,
        column_format=column_format,
        na_rep="---",
    )
    parts = [
        "% Generated file: do not edit.",
        "\\begin{table}[htbp]",
        "\\centering",
        font,
        f"\\caption{{{cap}}}",
        f"\\label{{{label}}}",
        body.strip(),
    ]
    if note:
        parts.append(f"\\par\\smallskip\\footnotesize {note}")
    parts.append("\\end{table}")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path
