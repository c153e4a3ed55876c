"""GRANT-01's oracle fails the packages of a finance officer who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
reviewer would have produced it: the re-posted line claimed twice, the
pre-start order, the post-cut-off fares, the unapproved analyser or the
project dinner claimed, the superseded budget used, indirect costs charged on
all direct costs, the virement threshold misread, the approved microscope or
the day-first purchase-card line disallowed. The criteria each must fail are
worked out from the trap (which cell or sentence the mistake changes), not
read off the oracle; the figures are the oracle header's planted facts and
hand sums of them. Careful wordings other than the gold's must pass. All
variants share one LibreOffice batch.
"""

from __future__ import annotations

import mutation_support
import pytest
from mutation_support import Mutation, in_turn

pytestmark = pytest.mark.usefixtures("soffice")

SID = "GRANT-01"
BOOK = "interim_report.xlsx"
MEMO = "variance_memo.docx"

# The gold Summary's layout (grant_01._write_book): rows 2-7 Staff, Travel, Consumables, Equipment, Other direct
# costs, Indirect costs (B approved budget, C eligible expenditure); B10 Total disallowed; rows 13-18 the
# virement request lines in the same order (the answer in column B).
TRAVEL, CONSUMABLES, EQUIPMENT, OTHER, INDIRECT = "C3", "C4", "C5", "C6", "C7"
EQUIPMENT_BUDGET = "B5"
DISALLOWED = "B10"
VIREMENT_TRAVEL, VIREMENT_CONSUMABLES = "B14", "B15"

# The planted amounts (oracle.yml's header) and the gold's figures.
REPEAT, PRE_START, POST_CUTOFF, ANALYSER, DINNER, MARCH_PCARD = 308.67, 1126.80, 268.40, 14650.00, 412.50, 318.60
GOLD_TRAVEL, GOLD_CONS, GOLD_EQUIP, GOLD_OTHER, GOLD_DISALLOWED = 2529.92, 8285.92, 19549.00, 4510.30, 16457.70
# 20% of all eligible direct costs (62,975.40 + 2,529.92 + 8,285.92 + 19,549.00 + 4,510.30 = 97,850.54) instead of staff
# only.
INDIRECT_ON_ALL_DIRECT = 19570.11

GOLD_REPEAT = "Line GX-58235 appears twice in the export (the same line re-posted); it is one cost and is counted once."
GOLD_ANALYSER = "GBP 14,650.00) is disallowed: equipment over GBP 10,000 bought without prior approval"
GOLD_MICROSCOPE = "is allowable: it is over the GBP 10,000 threshold but the Foundation approved it in advance"
GOLD_MARCH = "is allowable: purchase-card dates are day-first, so it was incurred on 4 March 2026, before the cut-off"


def _book(*edits: tuple[str, object]) -> Mutation:
    """Set cells of the Summary sheet, as a reviewer typing other figures would."""
    return mutation_support.set_cells(BOOK, *(("Summary", coord, value) for coord, value in edits))


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of the memo (wrapped lines allowed); the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # The re-posted consumables line claimed twice: consumables 8,594.59 on a budget of 7,744.00 is 850.59 over,
    # more than 10% (774.40), so a virement is asked for; the memo is silent on the repeat.
    "repeat_claimed_twice": (
        in_turn(
            _book((CONSUMABLES, GOLD_CONS + REPEAT), (VIREMENT_CONSUMABLES, "Yes")),
            _memo((GOLD_REPEAT, "Every line was read once.")),
        ),
        {"book_consumables_eligible", "book_consumables_virement", "memo_names_repeated_line"},
    ),
    # The order of 24 March 2025 claimed: consumables 9,412.72, 21.5% over budget, so a virement is asked for,
    # and the disallowed total falls by 1,126.80.
    "pre_start_order_claimed": (
        _book(
            (CONSUMABLES, GOLD_CONS + PRE_START),
            (DISALLOWED, GOLD_DISALLOWED - PRE_START),
            (VIREMENT_CONSUMABLES, "Yes"),
        ),
        {"book_consumables_eligible", "book_total_disallowed", "book_consumables_virement"},
    ),
    # The April 2026 fares claimed in year 1: travel and the disallowed total move; travel needed a virement anyway.
    "post_cutoff_fares_claimed": (
        _book((TRAVEL, GOLD_TRAVEL + POST_CUTOFF), (DISALLOWED, GOLD_DISALLOWED - POST_CUTOFF)),
        {"book_travel_eligible", "book_total_disallowed"},
    ),
    # The analyser claimed because approval was asked for afterwards: equipment 34,199.00, 0.6% over (no virement).
    "unapproved_analyser_claimed": (
        _book((EQUIPMENT, GOLD_EQUIP + ANALYSER), (DISALLOWED, GOLD_DISALLOWED - ANALYSER)),
        {"book_equipment_eligible", "book_total_disallowed"},
    ),
    "memo_allows_the_analyser": (
        _memo((GOLD_ANALYSER, "GBP 14,650.00) is allowable: approval has been requested")),
        {"memo_disallowed_lines"},
    ),
    # The approved microscope disallowed as equipment over the threshold: the set gains a line.
    "memo_disallows_the_approved_microscope": (
        _memo((GOLD_MICROSCOPE, "is disallowed: it is over the GBP 10,000 threshold")),
        {"memo_disallowed_lines"},
    ),
    # 04/03/2026 read month-first (3 April 2026, after the cut-off): consumables lose 318.60, the disallowed
    # total gains it, and the memo disallows the line.
    "day_first_date_read_month_first": (
        in_turn(
            _book((CONSUMABLES, GOLD_CONS - MARCH_PCARD), (DISALLOWED, GOLD_DISALLOWED + MARCH_PCARD)),
            _memo((GOLD_MARCH, "is disallowed: it was incurred on 3 April 2026, after the cut-off")),
        ),
        {"book_consumables_eligible", "book_total_disallowed", "memo_disallowed_lines"},
    ),
    # The project dinner claimed as an other direct cost: 4,922.80, still under its budget of 4,798.00 + 10%.
    "dinner_claimed": (
        _book((OTHER, GOLD_OTHER + DINNER), (DISALLOWED, GOLD_DISALLOWED - DINNER)),
        {"book_other_eligible", "book_total_disallowed"},
    ),
    # Budget v1's equipment line, which v2 superseded.
    "superseded_budget": (_book((EQUIPMENT_BUDGET, 16000.00)), {"book_equipment_budget"}),
    # Indirect costs at 20% of all direct costs, in the workbook and in the memo.
    "indirect_on_all_direct_costs": (
        in_turn(_book((INDIRECT, INDIRECT_ON_ALL_DIRECT)), _memo(("12,595.08", "19,570.11"))),
        {"book_indirect_costs", "memo_states_indirect"},
    ),
    # Any overspend read as needing a virement, and travel's 18% overlooked.
    "virement_for_any_overspend": (_book((VIREMENT_CONSUMABLES, "Yes")), {"book_consumables_virement"}),
    "travel_virement_missed": (_book((VIREMENT_TRAVEL, "No")), {"book_travel_virement"}),
    # Careful wordings other than the gold's: the disallowed set stated without naming the allowable lines, and
    # a virement line answered in words.
    "only_the_disallowed_lines_named": (
        _memo(
            (
                "Line GX-38292, the confocal microscope (GBP 18,200.00), " + GOLD_MICROSCOPE + " (letter HF/EQ/0231).",
                "The confocal microscope had the Foundation's prior approval (letter HF/EQ/0231).",
            ),
            (
                "Line GX-95346, a purchase-card line dated 04/03/2026, " + GOLD_MARCH + ".",
                "Purchase-card dates were read day-first.",
            ),
        ),
        set(),
    ),
    "virement_answered_in_words": (
        _book(
            (VIREMENT_TRAVEL, "Yes: 18% over budget, request required"),
            (VIREMENT_CONSUMABLES, "No - within the 10% tolerance"),
        ),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("grant01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


# The disallowed set as other reviewers write it, read without a document: the lines each puts inside the set
# ("disallowed") and outside it ("allowable"). A supposition states no finding.
DISALLOWED_PHRASINGS = {
    "Lines GX-11760, GX-98139, GX-70126 and GX-77948 are disallowed.": (
        {"GX-11760", "GX-98139", "GX-70126", "GX-77948"},
        set(),
    ),
    "GX-98139 (rail fares of 9 April 2026) is excluded: it was incurred after the reporting cut-off.": (
        {"GX-98139"},
        set(),
    ),
    "GX-38292, the confocal microscope, is allowable because the Foundation approved it in advance.": (
        set(),
        {"GX-38292"},
    ),
    "Line | Decision\nGX-11760 | Disallowed\nGX-38292 | Allowable": ({"GX-11760"}, {"GX-38292"}),
    "If the Foundation approves it, GX-70126 could be claimed in a later report.": (set(), set()),
}


@pytest.mark.parametrize("text", list(DISALLOWED_PHRASINGS))
def test_disallowed_phrasings(text):
    assert mutation_support.read_set_as(SID, "memo_disallowed_lines", text) == DISALLOWED_PHRASINGS[text]


def test_a_date_in_the_wrong_format_is_named(tmp_path):
    """A purchase-card date written ISO is bad input: the error names the file, the line and the field."""
    from pilot.scenarios.library import grant_01

    with pytest.raises(ValueError, match=r"expenditure_export\.csv: line GX-1, field 'date': '2026-03-04'"):
        grant_01._parse_date("2026-03-04", "PCARD", "GX-1")
