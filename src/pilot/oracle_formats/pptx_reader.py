"""A delivered slide deck, read defensively: slide titles, text lines, tables and notes.

The same discipline as the core oracle's readers: the path and the archive are
screened first (:func:`pilot.oracles.safety.screen_path`,
:func:`pilot.oracles.safety.screen_ooxml`: inside the workspace, bounded,
unencrypted, no macros, no zip bomb), then python-pptx parses the deck in a
child process under a time and a memory limit (:func:`probe`), and only then
in the calling process. A bad deck yields a reason a person can act on, never
an exception.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pilot.oracles import safety

#: Bounds on what is read from one deck: a deck is a short summary, never a data dump.
MAX_SLIDES = 200
MAX_LINES = 20_000
PROBE_TIMEOUT_S = 60.0
PROBE_MEMORY_BYTES = 1024 * 1024 * 1024


@dataclass
class Slide:
    """One slide: its title, body lines (tables as ``a | b | c`` rows) and speaker notes."""

    number: int
    title: str
    lines: list[str] = field(default_factory=list)
    tables: list[list[list[str]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Deck:
    slides: list[Slide]

    def lines(self) -> list[str]:
        """The deck as a document: each slide's title as a heading line, then its body lines and tables.

        Notes are left out: the brief's reader sees the slides, not the speaker notes.
        """
        out: list[str] = []
        for s in self.slides:
            if s.title:
                out.append(s.title)
            out.extend(s.lines)
        return out


def _clean(text: str) -> str:
    return " ".join(str(text).replace("\x0b", " ").split())


def _shape_lines(shape, slide: Slide) -> None:
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[_clean(cell.text) for cell in row.cells] for row in shape.table.rows]
        slide.tables.append(rows)
        slide.lines.extend(" | ".join(r) for r in rows)
        return
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    try:
        kind = shape.shape_type
    except NotImplementedError:  # a shape python-pptx cannot classify: its text, if any, is read below
        kind = None
    if kind == MSO_SHAPE_TYPE.GROUP:  # a group: its members in order
        for sub in shape.shapes:
            _shape_lines(sub, slide)
        return
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        for para in shape.text_frame.paragraphs:
            t = _clean(para.text)
            if t:
                slide.lines.append(t)


def parse(path: Path) -> Deck:
    """Parse a deck with python-pptx (raises on a broken file; callers screen and probe first)."""
    from pptx import Presentation

    prs = Presentation(str(path))
    slides: list[Slide] = []
    n_lines = 0
    for i, sl in enumerate(prs.slides, start=1):
        if i > MAX_SLIDES:
            raise ValueError(f"more than {MAX_SLIDES} slides")
        title_shape = sl.shapes.title
        title = _clean(title_shape.text_frame.text) if title_shape is not None and title_shape.has_text_frame else ""
        slide = Slide(i, title)
        for shape in sl.shapes:
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            _shape_lines(shape, slide)
        if sl.has_notes_slide and sl.notes_slide.notes_text_frame is not None:
            slide.notes = [t for t in (_clean(p.text) for p in sl.notes_slide.notes_text_frame.paragraphs) if t]
        n_lines += len(slide.lines) + 1
        if n_lines > MAX_LINES:
            raise ValueError(f"more than {MAX_LINES} lines of text")
        slides.append(slide)
    return Deck(slides)


def _child_setup(mem: int):
    def setup() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    return setup


def probe(
    path: Path, *, timeout_s: float = PROBE_TIMEOUT_S, memory_limit_bytes: int = PROBE_MEMORY_BYTES
) -> str | None:
    """Parse ``path`` in a child process under a time and a memory limit: None when it parsed, else why not.

    Raises OSError when the child cannot be started (not the deck's doing).
    """
    cmd = [sys.executable, "-m", "pilot.oracle_formats.pptx_reader", str(path)]
    # The child imports this very package, whichever checkout it was loaded from.
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    try:
        res = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, preexec_fn=_child_setup(memory_limit_bytes)
        )
    except subprocess.TimeoutExpired:
        return f"took longer than {timeout_s:.0f} s to read"
    try:
        verdict = json.loads(res.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return f"could not be read (the reader stopped with code {res.returncode})"
    return None if verdict.get("ok") else str(verdict.get("error") or "could not be read")


def read_deck(candidate: Path, workspace: Path, *, guard_limits: dict | None = None) -> tuple[Deck | None, str | None]:
    """(deck, None) for an admitted deck, or (None, the reason naming the file)."""
    screened = safety.screen_path(Path(candidate), Path(workspace))
    if not screened.ok:
        return None, screened.reason
    reason = safety.screen_ooxml(screened.path, ".pptx")
    if reason:
        return None, reason
    limits = guard_limits or {}
    verdict = probe(
        screened.path,
        timeout_s=float(limits.get("per_file_timeout_s", PROBE_TIMEOUT_S)),
        memory_limit_bytes=int(limits.get("memory_limit_bytes", PROBE_MEMORY_BYTES)),
    )
    if verdict:
        return None, f"{screened.path.name} {verdict}"
    try:
        return parse(screened.path), None
    except Exception as exc:  # noqa: BLE001 - the probe passed, yet a failure here is still the deck's finding
        return None, f"{screened.path.name} cannot be read as a slide deck ({type(exc).__name__}: {str(exc)[:200]})"


def _main(argv: list[str]) -> int:
    """Child of :func:`probe`: parse one deck and print one JSON verdict line."""
    import warnings

    warnings.simplefilter("ignore")
    try:
        parse(Path(argv[0]))
        print(json.dumps({"ok": True, "error": ""}))
    except MemoryError:
        print(json.dumps({"ok": False, "error": "exhausted the memory limit while being read"}))
    except Exception as exc:  # noqa: BLE001 - any failure is the verdict
        print(json.dumps({"ok": False, "error": f"cannot be read as a slide deck ({type(exc).__name__}: {exc})"[:300]}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
