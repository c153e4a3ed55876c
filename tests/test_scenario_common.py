"""The generators' shared readings: dates ISO or day-first (never month-first) and amounts exact, bad input refused by
file and field."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from pilot.scenarios.common import decimal_amount, fmt_money, iso_or_day_first


@pytest.mark.parametrize(
    "text,want",
    [
        ("2026-10-07", dt.date(2026, 10, 7)),
        ("07/10/2026", dt.date(2026, 10, 7)),  # day first: 7 October, not 10 July
        (" 30/09/2026 ", dt.date(2026, 9, 30)),
    ],
)
def test_iso_and_day_first_dates_are_read(text, want):
    assert iso_or_day_first(text, "x.csv: field 'date'") == want


@pytest.mark.parametrize("text", ["10/13/2026", "31-09-2026", "2026-02-30", "7 Oct 2026", ""])
def test_other_forms_are_refused_naming_the_file_and_field(text):
    with pytest.raises(ValueError) as err:
        iso_or_day_first(text, "claims_register.csv: field 'loss_date'")
    assert str(err.value).startswith(f"claims_register.csv: field 'loss_date': {text!r} is in neither format")


@pytest.mark.parametrize(
    "value,want",
    [
        ("1,234.50", Decimal("1234.50")),
        (" -94.60 ", Decimal("-94.60")),
        (0.1, Decimal("0.1")),
        (61000, Decimal("61000")),
    ],
)
def test_amounts_are_read_exactly(value, want):
    got = decimal_amount(value, "ledger.xlsx: Ledger!F2")
    assert got == want and str(got) == str(want)  # 0.1 is the cell's 0.1, not the binary float's expansion


@pytest.mark.parametrize("value", ["GBP 12", "12.3.4", "", None])
def test_what_is_not_an_amount_is_refused_naming_its_place(value):
    with pytest.raises(ValueError, match=r"^ledger\.xlsx: Ledger!F2: .* is not an amount$"):
        decimal_amount(value, "ledger.xlsx: Ledger!F2")


def test_amounts_print_as_a_ledger_does():
    assert [fmt_money(x) for x in (Decimal("1234.5"), Decimal("-94.6"), 21817.574, Decimal("0"))] == [
        "1,234.50",
        "-94.60",
        "21,817.57",
        "0.00",
    ]
