"""Hostile deliverables: each mutation of ACC-01's workbook, the criterion it must fail and the words of the reason.

Shared by the oracle tests (``tests/test_oracles.py``) and the benchmark of what refusing them costs
(``benchmarks/bench_hostile.py``).
"""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from pathlib import Path

HOSTILE_TARGET = ("ACC-01", "bank_reconciliation_2026-10.xlsx")


def _bomb(p: Path, ws: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
        z.writestr("xl/worksheets/sheet1.xml", b"\0" * (200 * 1024 * 1024))
    p.write_bytes(buf.getvalue())


def _macro(p: Path, ws: Path) -> None:
    src = zipfile.ZipFile(p)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for info in src.infolist():
            z.writestr(info, src.read(info))
        z.writestr("xl/vbaProject.bin", b"\x00Attribute VB_Name")
    p.write_bytes(buf.getvalue())


def _symlink_out(p: Path, ws: Path) -> None:
    p.unlink()
    os.symlink("/etc/passwd", p)


def _sparse_1gb(p: Path, ws: Path) -> None:
    p.unlink()
    with open(p, "wb") as fh:
        fh.truncate(1024**3)


def _fifo(p: Path, ws: Path) -> None:
    p.unlink()
    os.mkfifo(p)


# name -> (mutation, criterion that must fail, words its reason must contain)
HOSTILE = {
    "truncated_zip": (lambda p, ws: p.write_bytes(p.read_bytes()[:2500]), "recon_well_formed", "corrupt or truncated"),
    "zip_bomb": (_bomb, "recon_well_formed", "zip bomb"),
    "encrypted_workbook": (
        lambda p, ws: p.write_bytes(bytes.fromhex("d0cf11e0a1b11ae1") + b"\0" * 8000),
        "recon_well_formed",
        "encrypted",
    ),
    "macro_renamed": (_macro, "recon_well_formed", "macro"),
    "wrong_extension": (
        lambda p, ws: shutil.copyfile(ws / "outputs" / "reconciliation_memo.docx", p),
        "recon_well_formed",
        "Word document",
    ),
    "symlink_outside": (_symlink_out, "recon_present", "outside the workspace"),
    "one_gigabyte": (_sparse_1gb, "recon_present", "1.0 GB"),
    "empty": (lambda p, ws: p.write_bytes(b""), "recon_present", "empty"),
    "fifo": (_fifo, "recon_present", "not a regular file"),
    "invalid_utf8_record": (
        lambda p, ws: (ws / "outputs" / "completion_record.json").write_bytes(b'{"status": "\xff"}'),
        "record_valid",
        "UTF-8",
    ),
}
