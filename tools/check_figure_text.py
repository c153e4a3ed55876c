#!/usr/bin/env python3
"""Check that every figure the manuscript includes prints its smallest text at 7 pt or more.

    tools/check_figure_text.py GENERATED_DIR FIGURES_DIR [--min-pt 7]

Reads the figure environments the stages wrote (GENERATED_DIR/*_figure.tex) and
the hand-written sections (manuscript/sections/*.tex), finds each included PDF
as LaTeX does (the manuscript folder, then FIGURES_DIR), and scales its smallest
font by the width it is printed at (pilot.report.figure_text).

Exit status: 0 when every figure's text is large enough; 1 naming each that is not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pilot import paths
from pilot.report import figure_text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("generated_dir", type=Path)
    ap.add_argument("figures_dir", type=Path)
    ap.add_argument("--min-pt", type=float, default=figure_text.MIN_PRINTED_PT)
    args = ap.parse_args(argv)
    tex = sorted(args.generated_dir.glob("*_figure.tex")) + sorted((paths.MANUSCRIPT_DIR / "sections").glob("*.tex"))
    figures = figure_text.included_figures(tex, [paths.MANUSCRIPT_DIR, args.figures_dir])
    problems = figure_text.too_small(figures, args.min_pt)
    for line in problems:
        print(f"figure text below {args.min_pt:g} pt: {line}", file=sys.stderr)
    smallest = min((f.printed_pt for f in figures), default=float("nan"))
    print(f"{len(figures)} figures; smallest printed text {smallest:.1f} pt; {len(problems)} below {args.min_pt:g} pt")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
