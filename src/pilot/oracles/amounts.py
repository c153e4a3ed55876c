"""Exact comparison of stated amounts with planted ones, in decimal arithmetic.

A float compared with a cent is a bug: 176,906.92 and 176,906.94 are both one
cent from 176,906.93, yet in binary floating point one difference is a hair
above 0.01 and the other a hair below. Here the expected value and the
tolerance are read as the decimals the oracle file states, a workbook value
is taken to twelve significant digits (which removes the binary noise of a
spreadsheet sum without rounding any real cent away) and written text is
read digit for digit; the comparison ``|found - expected| <= tolerance`` is
then exact, so a tolerance of 0.01 accepts one cent either side and a
tolerance of 0 ("to the cent") accepts only the exact amount.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_TEXT_NUMBER = re.compile(r"^\(?[-−]?[$€£]?\s*\d[\d,]*(?:\.\d+)?\s*%?\)?$")


def exact(value: float | int | str | Decimal) -> Decimal:
    """A number from an oracle file (or a rule) as the decimal it was written as."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    return Decimal(str(value))


def cell_decimal(value: object) -> Decimal | None:
    """A workbook cell's numeric value as a decimal (twelve significant digits), or None if it is not a number.

    Booleans, strings (a number stored as text included) and non-finite
    floats are not numbers here.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int):
        return Decimal(value)
    return Decimal(format(value, ".12g"))


def text_decimal(token: str) -> Decimal | None:
    """A number as written in text ('1,234.50', '(12)', '−3.2', '12.4%' as 12.4) digit for digit, or None."""
    s = token.strip()
    if not s or not _TEXT_NUMBER.match(s):
        return None
    neg = s.startswith(("-", "−")) or (s.startswith("(") and s.endswith(")"))
    core = re.sub(r"[^\d.]", "", s)
    try:
        d = Decimal(core)
    except InvalidOperation:
        return None
    return -d if neg else d


def stored_as_text(value: object) -> bool:
    """Whether a cell holds text that reads as a number ('176906.93', '1,234', '12%')."""
    return isinstance(value, str) and text_decimal(value) is not None


def within(found: Decimal, expected: Decimal, tolerance: Decimal) -> bool:
    return abs(found - expected) <= tolerance


def show(d: Decimal) -> str:
    """A decimal for a reason: thousands separated, as many places as it has (at least two when fractional)."""
    if d == d.to_integral_value():
        return f"{int(d):,}"
    places = max(2, -d.normalize().as_tuple().exponent)
    return f"{d:,.{places}f}"
