"""What a stage notebook shows beside its tables: interpreting sentences and its figures, inline.

Each figure is written once, as the PDF the manuscript includes and a PNG of
the same drawing beside it; the notebook shows the PNG, so the executed
notebook holds the very figures the manuscript prints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from pilot import paths

_INCLUDE = re.compile(r"\\includegraphics(?:\[[^\]]*\])?\{([^}]*)\}")


def _ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def say(text: str) -> None:
    """Show a sentence as Markdown in a notebook, as plain text elsewhere."""
    if _ipython():
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)


def show_figures(files: Iterable[Path | str]) -> list[Path]:
    """Show inline each figure among ``files`` (PDFs with a PNG twin, or the figure environments
    that include them); returns the PNGs shown."""
    shown: list[Path] = []
    for f in files:
        f = Path(f)
        if f.suffix == ".tex":  # a generated figure environment: the figure it includes
            found = _INCLUDE.search(f.read_text(encoding="utf-8"))
            if not found:
                continue
            f = (paths.MANUSCRIPT_DIR / found.group(1)).resolve()
        png = f.with_suffix(".png")
        if f.suffix.lower() in (".pdf", ".png") and png.is_file() and png not in shown:
            shown.append(png)
    if _ipython():
        from IPython.display import Image, display

        for png in shown:
            display(Image(filename=str(png)))
    return shown
