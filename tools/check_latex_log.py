#!/usr/bin/env python3
"""Check a LaTeX log: the build fails on what a reader would see as a typesetting fault.

    tools/check_latex_log.py LOG [--max-pt 1.0]

Failures, each named with the file TeX was reading and the input lines:

* an overfull box ("Overfull \\hbox (12.3pt too wide)", "Overfull \\vbox (4.0pt too
  high)") sticking out by more than --max-pt;
* an underfull \\hbox of badness 10000 (a line with nothing to stretch but its
  spaces) inside a generated table (a file named ``*_table.tex``): a cell that
  wraps where it should not;
* a reference or citation still undefined after the last pass.

Other underfull boxes (loose spacing in running text) are counted and listed,
not failed. latexmk runs pdflatex several times into one log, so a box reported
in several passes counts once, and references are read from the last pass only
(an earlier pass has undefined references by construction).

Exit status: 0 when nothing fails; 1 naming each failure; 2 when the log cannot be read.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

_BOX = re.compile(r"^(Overfull|Underfull) \\([hv])box \((?:(\d+(?:\.\d+)?)pt too (?:wide|high)|badness (\d+))\)(.*)$")
# A file TeX opens: "(./sections/results.tex" or "(/abs/path/x.tex", the form TeX writes when it starts reading one.
_OPEN = re.compile(r"\((\.?/[^\s()]+\.(?:tex|sty|cls|clo|cfg|def|fd))")


@dataclass(frozen=True)
class Box:
    kind: str  # "Overfull" or "Underfull"
    axis: str  # "h" or "v"
    points: float | None  # how far it sticks out (overfull only)
    badness: int | None  # underfull only
    where: str  # the input lines TeX names, e.g. "in paragraph at lines 7--22"
    source: str  # the last file TeX opened before the warning

    def describe(self) -> str:
        size = f"{self.points:g}pt" if self.points is not None else f"badness {self.badness}"
        return f"{self.kind} \\{self.axis}box ({size}) {self.where.strip()} [{self.source or 'unknown file'}]"


def boxes(log: str) -> list[Box]:
    """Every box warning in ``log``, once each, in order of first report."""
    found: dict[tuple, Box] = {}
    # TeX writes "(" and a path when it opens a file and ")" when it closes it: a stack of the open
    # ones names the file being read (other parentheses in the log push and pop a placeholder).
    stack: list[str] = []
    for line in log.splitlines():
        m = _BOX.match(line)
        if m:
            kind, axis, pts, bad, where = m.groups()
            source = next((f for f in reversed(stack) if f), "")
            box = Box(kind, axis, float(pts) if pts else None, int(bad) if bad else None, where, source)
            found.setdefault((kind, axis, pts, bad, where), box)  # a later pass's report of the same box counts once
            continue
        i = 0
        while i < len(line):
            if line[i] == "(":
                o = _OPEN.match(line, i)
                stack.append(o.group(1) if o else "")
                i = o.end() if o else i + 1
            elif line[i] == ")":
                if stack:
                    stack.pop()
                i += 1
            else:
                i += 1
    return list(found.values())


#: A reference or citation TeX could not resolve ("Reference `x' on page 3 undefined", natbib's "Citation `y' ...").
_UNDEFINED = re.compile(r"(?:LaTeX|Package natbib) Warning: (Reference|Citation) `([^']+)' on page (\d+) undefined")
#: Where one pdflatex pass starts in a latexmk log.
_PASS = "This is pdfTeX"


def undefined_references(log: str) -> list[str]:
    """Each reference or citation undefined in the last pdflatex pass of ``log``, once: ``Reference `x' (page 3)``."""
    last = log.rsplit(_PASS, 1)[-1]
    seen: dict[tuple[str, str], str] = {}
    for kind, key, page in _UNDEFINED.findall(last):
        seen.setdefault((kind, key), f"{kind} `{key}' (page {page})")
    return list(seen.values())


def is_table(source: str) -> bool:
    """Whether TeX was reading a generated table (``generated/*_table.tex``)."""
    return source.endswith("_table.tex")


def failures(log: str, max_pt: float = 1.0) -> tuple[list[str], list[Box]]:
    """What fails the build (in words), and the underfull boxes that are only listed."""
    found = boxes(log)
    fail = [b.describe() for b in found if b.kind == "Overfull" and b.points is not None and b.points > max_pt]
    fail += [
        b.describe() + " in a table"
        for b in found
        if b.kind == "Underfull"
        and b.axis == "h"
        and b.badness is not None
        and b.badness >= 10000
        and is_table(b.source)
    ]
    fail += [f"undefined {r}" for r in undefined_references(log)]
    listed = [
        b for b in found if b.kind == "Underfull" and not (b.badness and b.badness >= 10000 and is_table(b.source))
    ]
    return fail, listed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="the LaTeX log (latexmk.log or main.log)")
    ap.add_argument("--max-pt", type=float, default=1.0, help="largest overfull box tolerated, in points (default 1.0)")
    args = ap.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        print(f"{args.log}: cannot be read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    fail, listed = failures(text, args.max_pt)
    for line in fail:
        print(f"{args.log}: {line}", file=sys.stderr)
    print(
        f"{args.log}: {len(fail)} typesetting failure(s) (overfull boxes above {args.max_pt:g}pt, lines of "
        f"badness 10000 in tables, undefined references); {len(listed)} other underfull box(es) listed, "
        "not failed"
    )
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
