"""`make manuscript` fails on a typesetting fault: the Makefile's own PDF rule, run on a planted fault.

The repository's Makefile is copied beside a one-page manuscript in a temporary
folder, and its rule for ``manuscript/build/main.pdf`` is made with every stage
taken as done (``make -o``), so latexmk and the gate (tools/check-typesetting.sh)
run exactly as in ``make manuscript``. A planted overfull box, an undefined
reference and figure text under 7 pt each fail the build, the PDF is kept beside
as ``main.failed-checks.pdf`` and the fault is named; a clean page passes. The
rule may not tolerate a failing check (no ``-`` before it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pilot import paths

pytestmark = pytest.mark.usefixtures("latex")


def _stage_stamps(makefile: str) -> tuple[str, ...]:
    """The stamps the PDF's rule waits for, as the Makefile lists them (``STAGE_STAMPS``), and LaTeX's own."""
    listed = " ".join(ln for ln in makefile.splitlines() if re.match(r"STAGE_STAMPS\s*[:+]?=", ln))
    return ("system-latex", *re.findall(r"\$\(RUN_STAMPS\)/([\w-]+)", listed))


def _rule(makefile: str) -> list[str]:
    """The recipe lines of the rule that typesets manuscript/build/main.pdf."""
    lines = makefile.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("manuscript/build/main.pdf:"))
    out = []
    for ln in lines[start + 1 :]:
        if not ln.startswith("\t"):
            break
        out.append(ln)
    return out


def test_every_stage_the_pdf_waits_for_is_taken_as_done():
    stamps = _stage_stamps((paths.ROOT / "Makefile").read_text(encoding="utf-8"))
    # The stages the manuscript reads, by hand: a new stage must appear here too, so the planted faults stay alone.
    assert {"stage-pilot", "stage-primary", "stage-grading", "stage-human", "rejudge"} <= set(stamps)


def test_the_rule_lets_no_check_fail_quietly():
    rule = _rule((paths.ROOT / "Makefile").read_text(encoding="utf-8"))
    assert any("tools/check-typesetting.sh" in ln for ln in rule)
    assert not [ln for ln in rule if ln.lstrip("\t").startswith("-")], "a check prefixed with '-' cannot fail the build"


def _make(tmp_path: Path, body: str, *, figure: str = "") -> subprocess.CompletedProcess:
    for tool in ("latexmk", "pdflatex", "make"):
        assert shutil.which(tool), f"{tool} is part of make test (build/stamps/system-latex)"
    root = tmp_path / "repo"
    (root / "manuscript" / "sections").mkdir(parents=True, exist_ok=True)
    (root / "gen").mkdir()
    (root / "fig").mkdir(exist_ok=True)
    shutil.copy(paths.ROOT / "Makefile", root / "Makefile")
    shutil.copytree(paths.ROOT / "tools", root / "tools")
    (root / "manuscript" / "references.bib").write_text("", encoding="utf-8")
    (root / "manuscript" / "main.tex").write_text(
        "\\documentclass{article}\n\\usepackage{graphicx}\n\\graphicspath{{../fig/}}\n\\begin{document}\n"
        + body
        + "\n\\end{document}\n",
        encoding="utf-8",
    )
    if figure:
        (root / "gen" / "tiny_figure.tex").write_text(figure, encoding="utf-8")
    args = ["make", "manuscript/build/main.pdf", f"BIN={Path(sys.executable).parent}", "GENERATED=gen", "FIGURES=fig"]
    for stamp in _stage_stamps((paths.ROOT / "Makefile").read_text(encoding="utf-8")):
        args += ["-o", f"build/stamps/{stamp}"]
    return subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=240)


def _pdfs(tmp_path: Path) -> set[str]:
    build = tmp_path / "repo" / "manuscript" / "build"
    return {p.name for p in build.glob("*.pdf")}


def test_a_clean_page_passes(tmp_path):
    out = _make(tmp_path, "A page that fits. See Section~\\ref{s}.\n\\section{One}\\label{s}")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert _pdfs(tmp_path) == {"main.pdf"}


def test_a_planted_overfull_box_fails_the_build(tmp_path):
    out = _make(tmp_path, "A box that sticks out: \\hbox to 1.5\\textwidth{x}.")
    assert out.returncode != 0
    assert re.search(r"Overfull \\hbox \(\d+(\.\d+)?pt\) in paragraph at lines 5--6 \[\./main\.tex\]", out.stderr)
    assert _pdfs(tmp_path) == {"main.failed-checks.pdf"}, "the PDF that failed is kept beside, not as the target"
    # The next make does not take the failed PDF as done: it typesets again and fails again.
    again = _make_again(tmp_path)
    assert again.returncode != 0 and "Overfull" in again.stderr


def _make_again(tmp_path: Path) -> subprocess.CompletedProcess:
    root = tmp_path / "repo"
    args = ["make", "manuscript/build/main.pdf", f"BIN={Path(sys.executable).parent}", "GENERATED=gen", "FIGURES=fig"]
    for stamp in _stage_stamps((paths.ROOT / "Makefile").read_text(encoding="utf-8")):
        args += ["-o", f"build/stamps/{stamp}"]
    return subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=240)


def test_an_undefined_reference_fails_the_build(tmp_path):
    out = _make(tmp_path, "See Table~\\ref{tab:nowhere}.")
    assert out.returncode != 0
    assert "undefined Reference `tab:nowhere'" in out.stderr
    assert _pdfs(tmp_path) == {"main.failed-checks.pdf"}


def test_figure_text_under_seven_points_fails_the_build(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 2))
    ax.set_title("four-point text", fontsize=4)
    ax.plot([0, 1], [0, 1])
    (tmp_path / "repo" / "fig").mkdir(parents=True, exist_ok=True)
    fig.savefig(tmp_path / "repo" / "fig" / "tiny.pdf")
    plt.close(fig)
    figure = "\\begin{figure}\\centering\\includegraphics[width=\\linewidth]{tiny.pdf}\\caption{Tiny.}\\end{figure}\n"
    out = _make(tmp_path, "\\input{../gen/tiny_figure.tex}", figure=figure)
    assert out.returncode != 0
    assert "figure text below 7 pt" in out.stderr and "tiny.pdf" in out.stderr
