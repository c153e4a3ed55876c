"""Helpers shared by the scenario generators and reference solvers."""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from pilot.protocol.scenario import COMPLETION_RECORD


def rng(seed: int) -> np.random.Generator:
    """The one random source of a generator: seeded, never global."""
    return np.random.default_rng(seed)


def money(x: float) -> float:
    """Round to cents the way a ledger does (half away from zero)."""
    return float(np.sign(x) * np.floor(abs(x) * 100 + 0.5) / 100)


def fmt_money(x: float | Decimal) -> str:
    """An amount as a ledger prints it: thousands separated, two decimals (1,234.50)."""
    return f"{x:,.2f}"


def decimal_amount(v: object, where: str) -> Decimal:
    """An amount as written in an input ("1,234.50", 1234.5), exactly; otherwise a ValueError naming ``where``."""
    try:
        return Decimal(str(v).replace(",", "").strip())
    except InvalidOperation as exc:
        raise ValueError(f"{where}: {v!r} is not an amount") from exc


def read_csv_dicts(path: Path) -> list[dict[str, str]]:
    with Path(path).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


#: The two date formats the scenarios' exports mix: ISO (2026-10-07) and day-first (07/10/2026).
ISO_OR_DAY_FIRST = ("%Y-%m-%d", "%d/%m/%Y")


def iso_or_day_first(text: str, where: str) -> dt.date:
    """A date written ISO or day-first; otherwise a ValueError naming ``where`` (the file and field)."""
    for fmt in ISO_OR_DAY_FIRST:
        try:
            return dt.datetime.strptime(text.strip(), fmt).date()
        except ValueError:
            continue
    raise ValueError(f"{where}: {text!r} is in neither format the inputs use (YYYY-MM-DD or DD/MM/YYYY)")


def write_completion_record(
    outputs: Path,
    delivered: Iterable[str],
    *,
    status: str = "completed",
    substitutions: Sequence[dict] = (),
    questions: Sequence[str] = (),
    notes: str = "",
) -> Path:
    """Write ``outputs/completion_record.json`` as the brief asks."""
    record = {
        "status": status,
        "deliverables": [*list(delivered), COMPLETION_RECORD],
        "substitutions": list(substitutions),
        "questions": list(questions),
        "notes": notes,
    }
    path = Path(outputs) / COMPLETION_RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def style_header(ws, row: int = 1) -> None:
    """Bold header row and a frozen pane, as a tidy analyst would leave a sheet."""
    from openpyxl.styles import Font

    for cell in ws[row]:
        cell.font = Font(bold=True)
    ws.freeze_panes = f"A{row + 1}"


def autosize(ws, widths: dict[str, float] | None = None) -> None:
    for col, w in (widths or {}).items():
        ws.column_dimensions[col].width = w
