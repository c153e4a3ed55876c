"""The generators' shared date reading: ISO or day-first, never month-first, with bad input refused by file and field."""

from __future__ import annotations

import datetime as dt

import pytest

from pilot.scenarios.common import iso_or_day_first


@pytest.mark.parametrize("text,want", [
    ("2026-10-07", dt.date(2026, 10, 7)),
    ("07/10/2026", dt.date(2026, 10, 7)),  # day first: 7 October, not 10 July
    (" 30/09/2026 ", dt.date(2026, 9, 30)),
])
def test_iso_and_day_first_dates_are_read(text, want):
    assert iso_or_day_first(text, "x.csv: field 'date'") == want


@pytest.mark.parametrize("text", ["10/13/2026", "31-09-2026", "2026-02-30", "7 Oct 2026", ""])
def test_other_forms_are_refused_naming_the_file_and_field(text):
    with pytest.raises(ValueError) as err:
        iso_or_day_first(text, "claims_register.csv: field 'loss_date'")
    assert str(err.value).startswith(f"claims_register.csv: field 'loss_date': {text!r} is in neither format")
