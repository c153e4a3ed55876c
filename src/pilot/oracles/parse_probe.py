"""Child process of :mod:`pilot.oracles.guard`: try to parse each file, report one JSON line per file.

Run as a script (never imported by the evaluator): it imports only the
office libraries, parses each file the way the evaluator will, and prints
``{"i": index, "ok": bool, "error": str}`` as soon as each file is done, so
the parent knows which file a hang or a crash belongs to. The files are named
on the command line, or, with ``--serve``, one JSON line per file on stdin
(the guard keeps one such child for a whole process).
"""

from __future__ import annotations

import json
import sys
import warnings


def parse(path: str) -> None:
    lower = path.lower()
    if lower.endswith(".xlsx"):
        import openpyxl

        wb = openpyxl.load_workbook(path, data_only=False)
        for ws in wb.worksheets:
            for _ in getattr(ws, "_cells", {}).values():
                pass
    elif lower.endswith(".docx"):
        from docx import Document

        doc = Document(path)
        for block in doc.iter_inner_content():
            getattr(block, "text", None)
            for row in getattr(block, "rows", []):
                for cell in row.cells:
                    _ = cell.text  # reading a cell's text parses it
    elif lower.endswith(".pdf"):
        import logging

        from pypdf import PdfReader

        logging.getLogger("pypdf").setLevel(logging.CRITICAL)
        reader = PdfReader(path, strict=False)
        if not reader.is_encrypted:
            for page in reader.pages[:200]:
                page.extract_text()
                # The evaluator also reads a PDF in layout mode (tables as rows), which lays text out by
                # position: a page whose positions would make that text huge must fail here, not there.
                try:
                    page.extract_text(extraction_mode="layout")
                except MemoryError:
                    raise
                except Exception:  # noqa: BLE001 - the evaluator then reads the page as plain lines
                    pass


def verdict(i: int, path: str) -> dict:
    try:
        parse(path)
        return {"i": i, "ok": True, "error": ""}
    except MemoryError:
        return {"i": i, "ok": False, "error": "exhausted the memory limit while being read", "memory": True}
    except Exception as exc:  # noqa: BLE001 - any failure is reported, the next file still runs
        return {"i": i, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    serve = argv[:1] == ["--serve"]
    preload = serve and argv[1:2] == ["--preload"]
    for i, path in enumerate(argv[1 + preload :] if serve else argv):
        print(json.dumps(verdict(i, path)), flush=True)
    if preload:
        # Started ahead of its first file: the office libraries are imported while it waits.
        import docx  # noqa: F401
        import openpyxl  # noqa: F401
        import pypdf  # noqa: F401
    if serve:
        # One JSON line {"path": ...} per file on stdin, one verdict line back each; EOF ends the child.
        for i, line in enumerate(sys.stdin):
            print(json.dumps(verdict(i, json.loads(line)["path"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
