"""PAY-01's oracle fails the packages of a payroll officer who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
reviewer would have produced it: the leaver paid for October, the mid-month
rise taken for the whole month (or from the superseded notice entry), the h:mm
overtime taken as decimal hours, the re-exported timesheet line counted twice,
the variance that September's unpaid leave explains treated as an error. The
criteria each must fail are worked out from the trap (which cell or sentence
the mistake changes), not read off the oracle. Careful phrasings other than the
gold's must pass. All variants share one LibreOffice batch.
"""

from __future__ import annotations

import re

import mutation_support
import pytest
from mutation_support import Mutation, in_turn

pytestmark = pytest.mark.usefixtures("soffice")

SID = "PAY-01"
BOOK = "october_variance.xlsx"
MEMO = "variance_memo.docx"

# The gold workbook's layout (pay_01._write_book): 'October pay' rows 2-15 are E1001-E1014 in order
# (D days at the old salary, F days at the new one), so Fenwick is row 7, Anand row 10, Walsh row 11;
# Overtime rows 2-6 are the approved lines once each (E hours, F minutes, G decimal hours), Walsh's
# 6:00 on row 3 and Wrobel's 3:45 on row 5; Variance row 16 is the Total row (H the correction total).
TOTALS = ("book_total_corrected", "book_total_correction")

GOLD_FENWICK = "Dale Fenwick's October pay must be corrected to nil."
GOLD_KEYED = "the draft keyed it as 7.45 hours"
CORRECTIONS_END = "Every other employee's October pay is correct as drafted"


def _book(*edits: tuple[str, str, object]) -> Mutation:
    """Set cells of the variance workbook (sheet, cell, value), as a reviewer typing other figures would."""
    return mutation_support.set_cells(BOOK, *edits)


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of the memo (wrapped lines allowed); the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # The leaver kept on for a full October (31 days at his salary): his corrected figure becomes the draft's
    # 2,875.00, and both totals move by as much.
    "leaver_paid_for_october": (_book(("October pay", "D7", 31)), {"book_fenwick_corrected", *TOTALS}),
    # The memo clears the leaver: only two of the three are named as needing correction.
    "memo_clears_the_leaver": (
        _memo((GOLD_FENWICK, "Dale Fenwick's October pay is correct as drafted.")),
        {"memo_names_corrections"},
    ),
    # The rise from the superseded entry 3 (1 October): the new salary for all 31 days, 3,100.00.
    "rise_from_the_superseded_entry": (
        _book(("October pay", "D10", 0), ("October pay", "F10", 31)),
        {"book_anand_corrected", *TOTALS},
    ),
    # The rise missed altogether: the old salary for all 31 days, 2,875.00.
    "rise_ignored": (_book(("October pay", "D10", 31), ("October pay", "F10", 0)), {"book_anand_corrected", *TOTALS}),
    # 3:45 read as 3.45 decimal hours, as the bureau keyed it: Wrobel's overtime 7.45 hours, gross 2,618.52.
    "overtime_hhmm_read_as_decimal": (_book(("Overtime", "G5", 3.45)), {"book_wrobel_corrected", *TOTALS}),
    # The memo names the corrected hours but never what the draft keyed.
    "memo_leaves_the_keying_unstated": (_memo((GOLD_KEYED, "the draft keyed it wrongly")), {"memo_explains_overtime"}),
    # Walsh's re-exported line counted twice: 12 hours, 120.42 more overtime in the corrected column (Walsh
    # is no criterion's row; both totals move), and the memo asks to correct his pay too.
    "repeated_timesheet_line_counted_twice": (
        in_turn(
            _book(("Overtime", "E3", 12)),
            _memo(
                (
                    CORRECTIONS_END,
                    "Kieran Walsh's October pay must be corrected from GBP 2,295.42 to GBP 2,415.84. "
                    + CORRECTIONS_END,
                )
            ),
        ),
        {*TOTALS, "memo_names_corrections"},
    ),
    # The explained variance treated as an error: Grace Obi named among those to correct.
    "unpaid_leave_variance_treated_as_error": (
        _memo(
            (
                CORRECTIONS_END,
                "Grace Obi's October pay must be corrected: it is 42.9% above September. " + CORRECTIONS_END,
            )
        ),
        {"memo_names_corrections"},
    ),
    # The correction signed draft minus corrected, against the brief's convention.
    "correction_with_the_sign_reversed": (
        _book(("Variance", "H16", "=-ROUND(SUM(H2:H15),2)")),
        {"book_total_correction"},
    ),
    # Careful wordings other than the gold's: a label and its finding, an employee ID, and a right one named
    # in the section as correct (the brief asks not to, but it states no correction).
    "corrections_as_labels": (_memo((GOLD_FENWICK, "Dale Fenwick (E1006): to be corrected to nil.")), set()),
    "right_pay_named_as_correct": (
        _memo((CORRECTIONS_END, "Grace Obi's October pay is correct as drafted. " + CORRECTIONS_END)),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("pay01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


# Correction findings as other payroll officers write them, read without a document: the employees each puts
# inside the set ("must be corrected") and outside it ("correct as drafted"). A supposition states no finding.
CORRECTION_PHRASINGS = {
    "Dale Fenwick left on 30 September and must not be paid for October.": ({"Fenwick"}, set()),
    "Priya Anand is overpaid by GBP 108.87 in the draft.": ({"Anand"}, set()),
    "Tomasz Wrobel is underpaid: his overtime needs correcting to 7.75 hours.": ({"Wrobel"}, set()),
    "E1012: to be corrected (overtime keyed as 7.45 hours).": ({"Wrobel"}, set()),
    "Grace Obi's October pay is correct; the variance is her September unpaid leave.": (set(), {"Obi"}),
    "Kieran Walsh needs no correction: the repeated timesheet line is one shift.": (set(), {"Walsh"}),
    "If Kieran Walsh's timesheet line were paid twice he would be overpaid.": (set(), set()),
}


@pytest.mark.parametrize("text", list(CORRECTION_PHRASINGS))
def test_correction_phrasings(text):
    assert mutation_support.read_set_as(SID, "memo_names_corrections", text) == CORRECTION_PHRASINGS[text]


# The generator's answer against hand calculations (pay policy rules 2 and 4), and its refusals of bad input.
def test_compute_matches_the_hand_calculation():
    from decimal import Decimal

    from pilot import paths
    from pilot.scenarios.library import pay_01

    a = pay_01.compute(paths.SCENARIOS_DIR / SID / "inputs")
    by = {r["id"]: r for r in a["rows"]}
    # 34,500 / 12 x 15/31 = 1,391.13 and 37,200 / 12 x 16/31 = 1,600.00.
    assert by["E1009"]["gross"] == Decimal("2991.13")
    # 29,400 / 1,950 = 15.08 an hour; 7.75 h x 15.08 x 1.5 = 175.31 on a monthly 2,450.00.
    assert by["E1012"]["gross"] == Decimal("2625.31")
    # The re-exported line paid once: 6 h x 13.38 x 1.5 = 120.42 on 2,175.00, as the draft has it.
    assert by["E1010"]["correction"] == 0 and by["E1010"]["gross"] == Decimal("2295.42")
    assert by["E1006"]["gross"] == 0
    assert a["to_correct"] == ["E1006", "E1009", "E1012"]


@pytest.mark.parametrize("text,hours", [("7:45", "7.75"), ("4:30", "4.5"), ("3:15", "3.25"), ("6:00", "6")])
def test_hours_and_minutes(text, hours):
    from decimal import Decimal

    from pilot.scenarios.library.pay_01 import hm_to_hours

    assert hm_to_hours(text) == Decimal(hours)


def test_decimal_hours_in_the_timesheet_are_refused():
    from pilot.scenarios.library.pay_01 import OVERTIME_CSV, hm_to_hours

    with pytest.raises(ValueError, match=re.escape(OVERTIME_CSV) + ".*overtime_hhmm.*7.45"):
        hm_to_hours("7.45")
