#!/usr/bin/env python3
"""Check that a manuscript PDF carries a label on its title and on every page's banner.

    tools/check_pdf_label.py PDF LABEL

LABEL is what main.tex's \\NotFindingLabel prints: SIMULATED, REHEARSAL, or
"SIMULATED and REHEARSAL" for a mix. Every page's first line of text must be
the banner, "LABEL — ... no number in this document is a finding", and page 1
must carry the title prefix "LABEL:". A banner naming another label (the mix
where a single label is expected, or the reverse) counts as missing.

The text is read with pdftotext (poppler-utils), which ends every page with a
form feed. Exit status: 0 when every page carries the label; 1 naming the
pages that do not; 2 when pdftotext is missing or the PDF cannot be read.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

BANNER_END = "no number in this document is a finding"


def page_texts(pdf: str) -> list[str]:
    """The text of each page, in order (pdftotext's reading order, UTF-8)."""
    proc = subprocess.run(["pdftotext", "-enc", "UTF-8", pdf, "-"], capture_output=True, check=True)
    pages = proc.stdout.decode("utf-8").split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def has_banner(text: str, label: str) -> bool:
    line = first_line(text)
    # The banner's dash is an em dash in the PDF's text (LaTeX's ---).
    return line.startswith(f"{label} \u2014 ") and line.endswith(BANNER_END)


def has_title_prefix(text: str, label: str) -> bool:
    return any(ln.strip().startswith(f"{label}: ") for ln in text.splitlines())


def spans(pages: list[int]) -> str:
    """1, 3-5, 9: page numbers as ranges."""
    out: list[str] = []
    for p in pages:
        if out and p == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{p}"
        else:
            out.append(str(p))
    return ", ".join(out)


def check(pdf: str, label: str) -> tuple[int, list[str]]:
    """The page count and one problem per line (empty when the label is everywhere)."""
    pages = page_texts(pdf)
    problems: list[str] = []
    if not pages:
        return 0, [f"{pdf}: no page text"]
    missing = [n for n, text in enumerate(pages, start=1) if not has_banner(text, label)]
    if missing:
        problems.append(f"{len(missing)} of {len(pages)} page(s) without the {label} banner: {spans(missing)}")
        for n in missing[:3]:
            problems.append(f"  page {n} begins: {first_line(pages[n - 1])[:100]!r}")
    if not has_title_prefix(pages[0], label):
        problems.append(f"page 1 has no title prefix '{label}:'")
    return len(pages), problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pdf")
    ap.add_argument("label", help="SIMULATED, REHEARSAL or 'SIMULATED and REHEARSAL'")
    args = ap.parse_args(argv)
    if shutil.which("pdftotext") is None:
        print("check_pdf_label: pdftotext not found (Debian/Ubuntu package poppler-utils)", file=sys.stderr)
        return 2
    try:
        n, problems = check(args.pdf, args.label)
    except subprocess.CalledProcessError as exc:
        print(
            f"check_pdf_label: pdftotext could not read {args.pdf}: {exc.stderr.decode(errors='replace').strip()}",
            file=sys.stderr,
        )
        return 2
    if problems:
        print(f"{args.pdf}: not labelled {args.label} throughout", file=sys.stderr)
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(f"{args.pdf}: {n} pages, {args.label} on page 1's title and on every page's banner")
    return 0


if __name__ == "__main__":
    sys.exit(main())
