"""tools/check_latex_log.py: overfull boxes above the tolerance, lines of badness 10000 in a generated table and
references undefined after the last pass fail, named by file and lines; other underfull boxes are listed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pilot import paths

TOOL = paths.ROOT / "tools" / "check_latex_log.py"

# Shaped as pdflatex writes it: files opened with "(" and closed with ")", the same box in two passes.
LOG = r"""This is pdfTeX, Version 3.141592653-2.6-1.40.24
(./main.tex (./generated/design_macros.tex) (./sections/results.tex
(./generated/run_flow_table.tex
Overfull \hbox (25.76416pt too wide) in paragraph at lines 7--22
 [][]
)
Underfull \hbox (badness 10000) in paragraph at lines 14--14
[]\T1/lmr/m/n/10.95 x
Overfull \hbox (0.90349pt too wide) in paragraph at lines 7--23
 [][]
) (./sections/appendix.tex
Overfull \vbox (3.5pt too high) has occurred while \output is active
)
Overfull \hbox (25.76416pt too wide) in paragraph at lines 7--22
"""


def _run(tmp_path: Path, text: str, *extra: str) -> subprocess.CompletedProcess:
    log = tmp_path / "latexmk.log"
    log.write_text(text, encoding="utf-8")
    return subprocess.run([sys.executable, str(TOOL), str(log), *extra], capture_output=True, text=True)


def test_boxes_over_a_point_fail_with_their_file_and_lines(tmp_path):
    out = _run(tmp_path, LOG)
    assert out.returncode == 1
    failed = [ln for ln in out.stderr.splitlines() if "Overfull" in ln]
    # 25.76 pt in the run-flow table (reported in two passes, counted once) and 3.5 pt in the appendix; 0.90 pt is
    # tolerated.
    assert len(failed) == 2
    assert "25.7642pt" in failed[0] and "lines 7--22" in failed[0] and "./generated/run_flow_table.tex" in failed[0]
    assert "3.5pt" in failed[1] and "./sections/appendix.tex" in failed[1]
    assert "2 typesetting failure(s)" in out.stdout and "1 other underfull box(es) listed, not failed" in out.stdout


def test_a_clean_log_passes_and_the_tolerance_is_an_option(tmp_path):
    assert _run(tmp_path, "(./main.tex)\nOutput written on main.pdf (3 pages).\n").returncode == 0
    assert _run(tmp_path, LOG, "--max-pt", "30").returncode == 0


def test_an_unreadable_log_is_an_error_of_its_own(tmp_path):
    out = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "missing.log")], capture_output=True, text=True)
    assert out.returncode == 2 and "missing.log" in out.stderr


# A line of badness 10000 inside a generated table: a cell that wraps where it should not.
TABLE_LOG = r"""This is pdfTeX, Version 3.141592653-2.6-1.40.24
(./main.tex (./sections/appendix_protocol.tex (./generated/amendments_table.tex
Underfull \hbox (badness 10000) in paragraph at lines 16--16
[]\T1/lmr/m/n/10.95 before rerun
Underfull \hbox (badness 4012) in paragraph at lines 17--17
[]\T1/lmr/m/n/10.95 pilot
)))
"""


def test_a_line_of_badness_10000_in_a_table_fails_and_a_lesser_one_is_listed(tmp_path):
    out = _run(tmp_path, TABLE_LOG)
    assert out.returncode == 1
    failed = out.stderr.splitlines()
    assert len(failed) == 1 and "badness 10000" in failed[0] and "amendments_table.tex" in failed[0]
    assert "in a table" in failed[0]
    assert "1 other underfull box(es) listed" in out.stdout


# Two passes: the first has an undefined reference (as every first pass does), the last resolves it but not a citation.
PASSES_LOG = r"""This is pdfTeX, Version 3.141592653-2.6-1.40.24
(./main.tex
LaTeX Warning: Reference `tab:h1' on page 3 undefined on input line 12.
Package natbib Warning: Citation `yao2024taubench' on page 2 undefined on input line 40.
)
This is pdfTeX, Version 3.141592653-2.6-1.40.24
(./main.tex
Package natbib Warning: Citation `yao2024taubench' on page 2 undefined on input line 40.
)
"""


def test_only_references_undefined_after_the_last_pass_fail(tmp_path):
    out = _run(tmp_path, PASSES_LOG)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [f"{tmp_path / 'latexmk.log'}: undefined Citation `yao2024taubench' (page 2)"]
    resolved = PASSES_LOG.rsplit("This is pdfTeX", 1)[0] + "This is pdfTeX, Version 3\n(./main.tex)\n"
    assert _run(tmp_path, resolved).returncode == 0
