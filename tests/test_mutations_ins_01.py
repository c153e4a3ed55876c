"""INS-01's oracle fails the packages of a claims handler who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
team leader would have produced it: the superseded limit used, the adjuster's
revised estimate ignored, the euro reserve left unconverted, a reserve let go
below nil, the limit not applied, the duplicate FNOL or the claim notified
after the cut-off reviewed, and the SIU referrals with a claim too many or
too few. The criteria each must fail are worked out from the trap (which cell
or sentence the mistake changes), not read off the oracle. All variants share
one LibreOffice batch.
"""

from __future__ import annotations

import mutation_support
import pytest
from mutation_support import Mutation

pytestmark = pytest.mark.usefixtures("soffice")

SID = "INS-01"
BOOK = "reserve_review.xlsx"
MEMO = "siu_referrals.docx"

# The gold workbook's layout (ins_01._write_book): Reserves rows 2-15 are the 14 claims reviewed in claim
# order (row 7 CLM-26-0633, 11 CLM-26-0652, 12 CLM-26-0657, 13 CLM-26-0660, 14 CLM-26-0663), columns E paid,
# F outstanding estimate, G incurred, H deductible, I limit, J net incurred, K FX rate, L required reserve GBP;
# row 16 is blank, B17 the claims reviewed, B18 the total; Settings!B2 the EUR rate.
LAST = 15


def _book(*edits: tuple[str, str, object]) -> Mutation:
    """Set cells of the workbook (sheet, cell, value), as a worker typing other figures or formulas would."""
    return mutation_support.set_cells(BOOK, *edits)


def _extra_claim(claim: str, policy: str, paid: float, os_: float, deductible: float, limit: float):
    """A sixteenth claim line in the blank row 16, with the count and total widened to take it in."""
    r = LAST + 1
    return _book(
        ("Reserves", f"A{r}", claim),
        ("Reserves", f"B{r}", policy),
        ("Reserves", f"D{r}", "GBP"),
        ("Reserves", f"E{r}", paid),
        ("Reserves", f"F{r}", os_),
        ("Reserves", f"G{r}", f"=E{r}+F{r}"),
        ("Reserves", f"H{r}", deductible),
        ("Reserves", f"I{r}", limit),
        ("Reserves", f"J{r}", f"=MIN(MAX(G{r}-H{r},0),I{r})"),
        ("Reserves", f"K{r}", 1),
        ("Reserves", f"L{r}", f"=ROUND(MAX(J{r}-E{r},0)*K{r},2)"),
        ("Reserves", "B17", f"=COUNTA(A2:A{r})"),
        ("Reserves", "B18", f"=SUM(L2:L{r})"),
    )


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of the memo (wrapped lines allowed); the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # Version 1's limit of 120,000, which endorsement E2 superseded: 235,000 - 10,000 capped at 120,000, less
    # 20,000 paid, is 100,000 instead of 180,000; the total falls by 80,000, the memo's figures stay.
    "superseded_limit": (_book(("Reserves", "I7", 120000)), {"book_reserve_0633", "book_total_reserve"}),
    # The register's 22,000 in place of the adjuster's revised 61,000: 21,000 instead of 60,000.
    "revised_estimate_ignored": (_book(("Reserves", "F12", 22000)), {"book_reserve_0657", "book_total_reserve"}),
    # The euro claim's 55,500.00 reported as if in pounds (rate 1): 48,007.50 becomes 55,500.00.
    "euro_left_unconverted": (_book(("Settings", "B2", 1)), {"book_reserve_0652", "book_total_reserve"}),
    # Neither floor at nil: 1,850 incurred less a 2,500 deductible gives a reserve of -650.00.
    "reserve_below_nil": (
        _book(("Reserves", "J13", "=MIN(G13-H13,I13)"), ("Reserves", "L13", "=ROUND((J13-E13)*K13,2)")),
        {"book_reserve_0660", "book_total_reserve"},
    ),
    # The limit not applied: 220,000 - 5,000 less 40,000 paid is 175,000 instead of 110,000.
    "limit_not_applied": (_book(("Reserves", "J14", "=MAX(G14-H14,0)")), {"book_reserve_0663", "book_total_reserve"}),
    # The broker's duplicate FNOL reviewed as a claim of its own: 15 claims and 37,900.00 more.
    "duplicate_fnol_reviewed": (
        _extra_claim("CLM-26-0641", "HM-P-1006", 0, 38400, 500, 75000),
        {"book_claims_reviewed", "book_total_reserve"},
    ),
    # The claim notified on 1 December reviewed in November: 15 claims and 17,000.00 more.
    "after_cutoff_reviewed": (
        _extra_claim("CLM-26-0671", "HM-P-1012", 0, 18000, 1000, 80000),
        {"book_claims_reviewed", "book_total_reserve"},
    ),
    # The catastrophe exception missed: the Storm Elin claim referred as late.
    "catastrophe_claim_referred": (
        _memo(
            (
                "CLM-26-0614 is not referred to the SIU although it was notified",
                "CLM-26-0614 is referred to the SIU because it was notified",
            )
        ),
        {"memo_siu_referrals"},
    ),
    # 11/10/2026 read month-first, 10 November: a prompt notification taken for a late one and referred.
    "day_first_date_misread": (
        _memo(
            (
                (
                    "CLM-26-0621 is not referred to the SIU: its FNOL date 11/10/2026 is day-first, 11 "
                    "October 2026, so it was notified 9 days"
                ),
                (
                    "CLM-26-0621 is referred to the SIU because its FNOL date 11/10/2026 is 10 November 2026, "
                    "so it was notified 39 days"
                ),
            )
        ),
        {"memo_siu_referrals"},
    ),
    # The endorsement read only as a limit, not as the increase of cover it is: Elmstead not referred.
    "cover_increase_missed": (
        _memo(
            (
                "CLM-26-0633 (Elmstead Joinery Ltd) is referred to the SIU because",
                "CLM-26-0633 (Elmstead Joinery Ltd) is not referred to the SIU although",
            )
        ),
        {"memo_siu_referrals"},
    ),
    # The December claim, with its new-cover flag, referred in November's memo.
    "after_cutoff_claim_referred": (
        _memo(
            (
                "CLM-26-0671 was notified on 1 December 2026, after the cut-off, and belongs to December's review",
                "CLM-26-0671 is referred to the SIU because its policy incepted 18 days before the loss",
            )
        ),
        {"memo_siu_referrals"},
    ),
    # A careful wording other than the gold's: the referrals put as the writer's own act.
    "referrals_in_the_first_person": (
        _memo(
            (
                "CLM-26-0618 (Carrow Motors Ltd) is referred to the SIU because",
                "I refer CLM-26-0618 (Carrow Motors Ltd) to the SIU because",
            )
        ),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("ins01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


# Referral verdicts as other team leaders write them, read without a document: the claims each puts inside the set
# (referred) and outside it (not referred).
REFERRAL_PHRASINGS = {
    "CLM-26-0618 is referred to the SIU: it was notified 39 days after the loss.": ({"CLM-26-0618"}, set()),
    "CLM-26-0640 and CLM-26-0645 are referred to the special investigation unit.": (
        {"CLM-26-0640", "CLM-26-0645"},
        set(),
    ),
    "CLM-26-0614 is not referred to the SIU, because the loss falls within Storm Elin.": (set(), {"CLM-26-0614"}),
    "CLM-26-0611, CLM-26-0626 and CLM-26-0649 show no red flag and are not referred.": (
        set(),
        {"CLM-26-0611", "CLM-26-0626", "CLM-26-0649"},
    ),
    "CLM-26-0671 should be considered for referral in December's review.": (set(), set()),
}


@pytest.mark.parametrize("text", list(REFERRAL_PHRASINGS))
def test_referral_phrasings(text):
    assert mutation_support.read_set_as(SID, "memo_siu_referrals", text) == REFERRAL_PHRASINGS[text]
