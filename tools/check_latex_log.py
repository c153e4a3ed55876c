#!/usr/bin/env python3
"""Check a LaTeX log for boxes that overflow the page by more than a tolerance.

    tools/check_latex_log.py LOG [--max-pt 1.0]

TeX reports "Overfull \\hbox (12.3pt too wide)" and "Overfull \\vbox (4.0pt too
high)" with a length: each above --max-pt is a failure, named with the file TeX
was reading and the input lines. Underfull boxes carry a badness, not a length
(loose spacing, nothing sticks out); they are counted and listed, not failed.
latexmk runs pdflatex several times into one log, so a box reported in several
passes counts once.

Exit status: 0 when no overfull box exceeds the tolerance; 1 naming each that
does; 2 when the log cannot be read.
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
    found = boxes(text)
    over = [b for b in found if b.kind == "Overfull" and b.points is not None and b.points > args.max_pt]
    under = [b for b in found if b.kind == "Underfull"]
    for b in over:
        print(f"{args.log}: {b.describe()}", file=sys.stderr)
    print(
        f"{args.log}: {len(over)} overfull box(es) above {args.max_pt:g}pt; {len(under)} underfull box(es) "
        "(badness only, not failed)"
    )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
