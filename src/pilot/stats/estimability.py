"""Numbers or reasons: how every estimate and verdict of the analysis is reported.

An estimate is either a finite number or the string ``not estimable (reason)``;
a ratio that is infinite by definition (cost per accepted deliverable with no
accepted run) is the symbol ``∞``. A verdict is ``consistent``,
``not consistent`` or ``not estimable (reason)`` (``exploratory`` for the
exploratory expectation). The analyses compute on numeric frames (NaN where
nothing can be estimated, with the reason in a ``note`` column) and turn them
into the ``summary`` frames the stages print with :func:`honest_frame`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

NOT_ESTIMABLE = "not estimable"
INFINITY = "∞"
CONSISTENT = "consistent"
NOT_CONSISTENT = "not consistent"
EXPLORATORY = "exploratory"
VERDICTS = (CONSISTENT, NOT_CONSISTENT, NOT_ESTIMABLE, EXPLORATORY)

ZERO_WIDTH = "zero-width interval"
ONE_SCENARIO = "rests on one scenario"


def not_estimable(reason: str) -> str:
    """``not estimable (reason)``."""
    return f"{NOT_ESTIMABLE} ({reason or 'no data'})"


def is_not_estimable(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(NOT_ESTIMABLE)


def is_number(value: Any) -> bool:
    """A finite real number (not a bool, not NaN, not infinite)."""
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, (bool, np.bool_))
        and math.isfinite(float(value))
    )


def join_notes(*notes: Any) -> str:
    """Notes joined by '; ', empty ones and repeats dropped."""
    out: list[str] = []
    for n in notes:
        for part in [] if n is None or (isinstance(n, float) and math.isnan(n)) else str(n).split("; "):
            if part and part not in out:
                out.append(part)
    return "; ".join(out)


def cell(value: Any, reason: str = "", *, infinite_ok: bool = False) -> Any:
    """One reported value: the number, ``∞`` where infinity is a value, or ``not estimable (reason)``."""
    if value is None or value is pd.NA:
        return not_estimable(reason)
    if isinstance(value, (str, bool, np.bool_)):  # labels, flags; '' marks a value that does not apply
        return value
    v = float(value)
    if math.isnan(v):
        return not_estimable(reason)
    if math.isinf(v):
        if infinite_ok and v > 0:
            return INFINITY
        return not_estimable(reason or "infinite")
    return value


def honest_frame(
    df: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    note: str = "note",
    infinite: Iterable[str] = (),
    default_reason: str = "no data",
) -> pd.DataFrame:
    """A copy of ``df`` whose numeric ``columns`` hold finite numbers, ``∞`` (only in ``infinite``) or
    ``not estimable (reason)``, the reason taken from the row's ``note`` column."""
    out = df.copy()
    cols = (
        list(columns)
        if columns is not None
        else [c for c in df.columns if c != note and not pd.api.types.is_bool_dtype(df[c])]
    )
    inf_cols = set(infinite)
    reasons = out[note].fillna("").astype(str).tolist() if note in out.columns else [""] * len(out)
    for c in cols:
        vals = out[c].tolist()
        if all(is_number(v) or isinstance(v, str) for v in vals):
            continue
        out[c] = pd.Series(
            [
                cell(v, first_reason(r) or default_reason, infinite_ok=c in inf_cols)
                for v, r in zip(vals, reasons, strict=True)
            ],
            index=out.index,
            dtype=object,
        )
    return out


def first_reason(note: str) -> str:
    """The reason part of a note (flags such as a zero-width interval are not reasons)."""
    parts = [p for p in note.split("; ") if p and p not in (ZERO_WIDTH, ONE_SCENARIO)]
    return "; ".join(parts)


def interval_flags(low: Any, high: Any, n_scenarios: Any) -> list[str]:
    """Per row: ``zero-width interval`` and/or ``rests on one scenario`` (joined), else ''."""
    lo = np.atleast_1d(np.asarray(low, dtype=float))
    hi = np.atleast_1d(np.asarray(high, dtype=float))
    n = np.broadcast_to(np.atleast_1d(np.asarray(n_scenarios, dtype=float)), lo.shape)
    out = []
    for a, b, k in zip(lo, hi, n, strict=True):
        flags = []
        if np.isfinite(a) and np.isfinite(b) and a == b:
            flags.append(ZERO_WIDTH)
        if k == 1:
            flags.append(ONE_SCENARIO)
        out.append("; ".join(flags))
    return out


def verdict(ok: bool | None, reason: str = "") -> str:
    """``consistent`` / ``not consistent``, or ``not estimable (reason)`` when ``ok`` is None."""
    if ok is None:
        return not_estimable(reason)
    return CONSISTENT if ok else NOT_CONSISTENT


def verdict_class(v: str) -> str:
    """The verdict without its reason: one of :data:`VERDICTS`."""
    return NOT_ESTIMABLE if is_not_estimable(v) else v


def check_reported(
    df: pd.DataFrame, columns: Sequence[str] | None = None, *, infinite: Iterable[str] = ()
) -> list[str]:
    """Problems in a reported frame: cells that are neither finite numbers, ``∞`` (in ``infinite``) nor reasons."""
    inf_cols = set(infinite)
    bad = []
    for c in columns if columns is not None else df.columns:
        for i, v in enumerate(df[c].tolist()):
            if is_number(v) or is_not_estimable(v) or (v == INFINITY and c in inf_cols):
                continue
            if isinstance(v, (str, bool, np.bool_)) and not (isinstance(v, str) and v in ("nan", "inf", "-inf")):
                continue  # labels and flags
            bad.append(f"{c}[{i}]={v!r}")
    return bad


def all_of(*conditions: tuple[bool | None, str]) -> str:
    """The verdict of a conjunction of conditions, each ``(holds, reason if unknown)``.

    A condition known to fail makes the verdict ``not consistent`` whatever the
    others; otherwise any unknown one makes it ``not estimable`` with its reason.
    """
    if any(ok is False for ok, _ in conditions):
        return NOT_CONSISTENT
    unknown = [r for ok, r in conditions if ok is None]
    if unknown:
        return not_estimable(join_notes(*unknown))
    return CONSISTENT


def known(value: Any) -> bool:
    """The value is a finite number (so a condition on it can be judged)."""
    return is_number(value)
