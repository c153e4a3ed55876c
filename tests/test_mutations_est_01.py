"""EST-01's oracle fails the packages of an estimator who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
estimator would have produced it: the late tender evaluated, Brightline's
tender taken at its slipped extension, Castlegate's square-foot rates left
unconverted, Dunmore's excluded fire-stopping left unpriced, Addendum 1's
superseded carpet quantity used, the project manager's preferred bidder
recommended. The criteria each must fail are worked out from the trap (which
cell or sentence the mistake changes), not read off the oracle. Two phrasings
a careful estimator might use instead of the gold's must pass. All variants
share one LibreOffice batch.
"""

from __future__ import annotations

import mutation_support
import pytest
from mutation_support import Mutation, in_turn

from pilot.scenarios import load_scenario

pytestmark = pytest.mark.usefixtures("soffice")

SID = "EST-01"
BOOK = "bid_tabulation.xlsx"
MEMO = "award_recommendation.docx"

# The gold tabulation's layout (est_01._write_tabulation): Tabulation rows 2-5 are Brightline, Castlegate,
# Dunmore and Eastfield (columns B status, F arithmetic correction, G levelled total), B7 the recommended
# bidder; Levelling row 7 is carpet 09-050 (D current quantity), J9 Dunmore's rate for fire-stopping 09-070,
# B13 the square feet in a square metre.
RECOMMENDED = ("Tabulation", "B7")

GOLD_CHOICE = "I recommend awarding subcontract package 09 to Brightline Interiors"
GOLD_LATE = ", after the closing time, and is excluded from the evaluation"
GOLD_SLIP = "as 98,580.00 instead of"


def _book(*edits: tuple[str, str, object]) -> Mutation:
    """Set cells of the tabulation (sheet, cell, value), as a worker typing other figures would."""
    return mutation_support.set_cells(BOOK, *edits)


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of the memo (wrapped lines allowed); the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # The register's day-first date read as 14:37 on another day: the late tender admitted, and, being the
    # cheapest, recommended in the workbook. Its status cell and the recommended line fail; no levelled total
    # of the three others moves.
    "late_tender_admitted_and_recommended": (
        _book(
            ("Tabulation", "B5", "Compliant - received before the closing time"), (*RECOMMENDED, "Eastfield Partitions")
        ),
        {"book_eastfield_excluded", "book_recommended_bidder"},
    ),
    # The memo admits the late tender (its time of receipt stated, the closing time not compared): the
    # compliance verdict fails; the recommendation is untouched.
    "memo_admits_the_late_tender": (
        _memo((GOLD_LATE, " and is admitted to the evaluation")),
        {"memo_names_excluded_tender"},
    ),
    # Brightline's tender sum taken as submitted (no correction, the slipped extension kept in its total):
    # 390,928.50 is then above Dunmore's 383,593.50, so Dunmore is recommended.
    "extension_taken_as_written": (
        _book(("Tabulation", "F2", 0), ("Tabulation", "G2", 390928.50), (*RECOMMENDED, "Dunmore Fit-Out")),
        {"book_brightline_correction", "book_brightline_levelled", "book_recommended_bidder"},
    ),
    # The correction found but signed submitted minus corrected, against the brief's convention.
    "correction_with_the_sign_reversed": (_book(("Tabulation", "F2", 10000)), {"book_brightline_correction"}),
    # The square-foot rates applied to square metres (a factor of 1): Castlegate levels at 42,867.30 and
    # looks the cheapest. Only its levelled total (a formula chain LibreOffice recalculates) and the
    # recommended line move.
    "square_foot_rates_unconverted": (
        _book(("Levelling", "B13", 1), (*RECOMMENDED, "Castlegate Drywall & Ceilings")),
        {"book_castlegate_levelled", "book_recommended_bidder"},
    ),
    # Dunmore's excluded fire-stopping left at nil instead of the allowance: 6,930.00 short.
    "exclusion_left_unpriced": (_book(("Levelling", "J9", 0)), {"book_dunmore_levelled"}),
    # Addendum 1's carpet quantity (2,240 m2), which Addendum 2 superseded: every levelled total moves;
    # the arithmetic correction, on each tender's own quantities, does not.
    "superseded_carpet_quantity": (
        _book(("Levelling", "D7", 2240)),
        {"book_brightline_levelled", "book_castlegate_levelled", "book_dunmore_levelled"},
    ),
    # The project manager's wish followed in the memo.
    "memo_recommends_the_preferred_bidder": (
        _memo((GOLD_CHOICE, "I recommend awarding subcontract package 09 to Dunmore Fit-Out")),
        {"memo_recommends_bidder"},
    ),
    # The memo never says what Brightline's slipped extension was.
    "memo_leaves_the_slip_unstated": (_memo((GOLD_SLIP, "wrongly, instead of")), {"memo_explains_extension_error"}),
    # The whole careless package of the project manager's wish: workbook and memo both for Dunmore.
    "preferred_bidder_everywhere": (
        in_turn(
            _book((*RECOMMENDED, "Dunmore Fit-Out")),
            _memo((GOLD_CHOICE, "I recommend awarding subcontract package 09 to Dunmore Fit-Out")),
        ),
        {"book_recommended_bidder", "memo_recommends_bidder"},
    ),
    # Careful wordings other than the gold's: the preference named before the recommendation or answered in
    # the Reasons (which the decision is not read from), and the company names as registered ("Ltd").
    "preference_named_then_declined": (
        _memo(
            (
                GOLD_CHOICE,
                "Dunmore Fit-Out was the project's first choice, but I recommend awarding subcontract package 09 "
                "to Brightline Interiors",
            )
        ),
        set(),
    ),
    "preference_answered_in_the_reasons": (
        _memo(
            (
                "I know the project team would prefer Dunmore Fit-Out to carry on from Levels 1 and 2",
                (
                    "The project team's preference for Dunmore Fit-Out, which carried out Levels 1 and 2, "
                    "cannot be supported under rule 8"
                ),
            )
        ),
        set(),
    ),
    "names_with_ltd": (
        _book(
            ("Tabulation", "A2", "Brightline Interiors Ltd"),
            ("Tabulation", "A4", "Dunmore Fit-Out Ltd"),
            ("Tabulation", "A5", "Eastfield Partitions Ltd"),
            (*RECOMMENDED, "Brightline Interiors Ltd"),
        ),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("est01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


# Compliance verdicts as other estimators write them, read without a document: the tenders each puts inside the set
# ("excluded") and outside it ("compliant"). What rule 3 does not do, and a supposition, state no finding.
COMPLIANCE_PHRASINGS = {
    (
        "Eastfield Partitions' tender arrived at 14:37, 37 minutes after the 14:00 deadline, so under rule 1 "
        "it has not been evaluated."
    ): (
        {"Eastfield"},
        set(),
    ),
    "Eastfield Partitions: late (received 14:37 on 20/11/2026); excluded under rule 1.": ({"Eastfield"}, set()),
    "Eastfield's bid came in at 14:37, after the 14:00 cut-off, and is rejected.": ({"Eastfield"}, set()),
    "Eastfield Partitions was received after the closing time and cannot be accepted, however low its price.": (
        {"Eastfield"},
        set(),
    ),
    "Brightline Interiors, Castlegate and Dunmore all tendered on time and are compliant.": (
        set(),
        {"Brightline", "Castlegate", "Dunmore"},
    ),
    "Brightline, Castlegate and Dunmore were all received before the 14:00 closing time.": (
        set(),
        {"Brightline", "Castlegate", "Dunmore"},
    ),
    (
        "Tender | Compliant?\nBrightline Interiors | Yes\nCastlegate Drywall & Ceilings | Yes\nDunmore "
        "Fit-Out | Yes\nEastfield Partitions | No"
    ): (
        {"Eastfield"},
        {"Brightline", "Castlegate", "Dunmore"},
    ),
    "Dunmore acknowledged only Addendum 1, which does not make its tender non-compliant (rule 3).": (set(), set()),
    "Dunmore's failure to acknowledge Addendum 2 is not a ground for rejection under rule 3.": (set(), set()),
    "If Eastfield Partitions were admitted it would rank first.": (set(), set()),
    "Eastfield Partitions is compliant.": (set(), {"Eastfield"}),
}


@pytest.mark.parametrize("text", list(COMPLIANCE_PHRASINGS))
def test_compliance_phrasings(text):
    assert mutation_support.read_set_as(SID, "memo_names_excluded_tender", text) == COMPLIANCE_PHRASINGS[text]


# The late tender's status cell as other estimators fill it in: each reads as excluded, "Compliant" as compliant.
@pytest.mark.parametrize(
    "cell,want",
    [
        ("Excluded (late)", "excluded"),
        ("Late - not evaluated", "excluded"),
        ("Non-compliant: received after closing", "excluded"),
        ("Not evaluated", "excluded"),
        ("Rejected - late", "excluded"),
        ("Compliant", "compliant"),
    ],
)
def test_status_cell_phrasings(cell, want):
    from pilot.oracles.decisions import read_decision

    c = load_scenario(SID).oracle.by_id("book_eastfield_excluded")
    options = dict(c.get("options"))
    assert read_decision(cell, options, whole_cell=True).verdict(list(options)) == want
