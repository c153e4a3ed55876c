"""The manuscript's label switch: SIMULATED, REHEARSAL or both on the title and every page, nothing for a finding.

The switch is read out of ``manuscript/main.tex`` as written (from its label
comment to the title) and typeset with the real pdflatex around three pages,
with the label macros the stages write (``StudyDataLabel``, ``RunDataLabel``,
``ResultsDataLabel``); the text is read back with pypdf. The expected words
are the backends' labels (:mod:`pilot.backends`), not the switch's own.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from pypdf import PdfReader

from pilot import backends, paths

MAIN = paths.ROOT / "manuscript" / "main.tex"


def _switch() -> str:
    text = MAIN.read_text(encoding="utf-8")
    start = text.index("% Not a finding whenever")
    end = text.index("% Authors, affiliations")  # the title page's apparatus and PDF metadata follow
    return text[start:end]


def _typeset(tmp_path, labels: dict[str, str]) -> list[str]:
    macros = "".join(rf"\newcommand{{\{name}}}{{{value}}}" + "\n" for name, value in labels.items())
    doc = "\n".join(
        [
            r"\documentclass[11pt]{article}",
            r"\usepackage[T1]{fontenc}",
            r"\usepackage{lmodern}",
            r"\usepackage[margin=2.2cm,headheight=14pt]{geometry}",
            r"\usepackage{xcolor}",
            r"\usepackage{etoolbox}",
            r"\usepackage{fancyhdr}",
            r"\newcommand{\NumArmsWord}{five}",
            macros,
            _switch(),
            r"\date{}",
            r"\begin{document}",
            r"\maketitle",
            r"\thispagestyle{plain}",
            r"\ifnotfinding\noindent\textbf{\NotFindingLabel.} From \NotFindingWhat.\fi",
            r"\newpage Two.\newpage Three.",
            r"\end{document}",
            "",
        ]
    )
    (tmp_path / "doc.tex").write_text(doc, encoding="utf-8")
    subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return [page.extract_text() for page in PdfReader(tmp_path / "doc.pdf").pages]


CASES = {
    "dry run": (
        {
            "StudyDataLabel": backends.label("simulated"),
            "RunDataLabel": backends.label("simulated"),
            "ResultsDataLabel": backends.label("simulated"),
        },
        "SIMULATED",
    ),
    "rehearsal": (
        {
            "StudyDataLabel": backends.label("rehearsal"),
            "RunDataLabel": backends.label("rehearsal"),
            "ResultsDataLabel": backends.label("rehearsal"),
        },
        "REHEARSAL",
    ),
    "a rehearsal analysed with a synthetic table": (
        {"StudyDataLabel": "REHEARSAL", "RunDataLabel": "REHEARSAL", "ResultsDataLabel": backends.label("synthetic")},
        "SIMULATED and REHEARSAL",
    ),
    "the real study": ({"StudyDataLabel": "real", "RunDataLabel": "real", "ResultsDataLabel": "real"}, None),
}


@pytest.mark.usefixtures("latex")
@pytest.mark.parametrize("case", list(CASES))
def test_title_and_every_page_carry_the_label(tmp_path, case):
    labels, word = CASES[case]
    pages = _typeset(tmp_path, labels)
    assert len(pages) == 3
    if word is None:
        assert not any("finding" in p or "SIMULATED" in p or "REHEARSAL" in p for p in pages), pages
        assert pages[0].lstrip().startswith("More computer access")
        return
    for page in pages:
        banner = page.strip().splitlines()[0]
        assert banner.startswith(f"{word} —") and banner.endswith("no number in this document is a finding"), page
    title = " ".join(pages[0].split())
    assert f"{word}: More computer access" in title and f"{word}. From " in title
    assert ("dry run" in title) == ("SIMULATED" in word) and ("rehearsal" in title or "scripted model" in title) == (
        "REHEARSAL" in word
    )
    # Nothing of the other label where it does not apply.
    assert re.search(r"\bREHEARSAL\b", title) if "REHEARSAL" in word else not re.search(r"\bREHEARSAL\b", title)
