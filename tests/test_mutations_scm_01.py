"""SCM-01's oracle fails the packages of a planner who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
planner would have produced it: TF-200 exploded on its superseded BOM
revision, the O-rings' packs of 10 read as pieces, the cancelled valve order
counted as supply, the single-source igniter left at the item master's safety
stock, TF-300's superseded forecast used, the duplicated carton order counted
twice, a lead time equal to the days available expedited. The criteria each
must fail are worked out from the trap (which cells the mistake moves through
the workbook's formulas, or which sentence of the memo it changes), not read
off the oracle. Careful wordings other than the gold's must pass. All
variants share one LibreOffice batch.
"""

from __future__ import annotations

import mutation_support
import pytest
from mutation_support import Mutation, in_turn

from pilot.scenarios import load_scenario

pytestmark = pytest.mark.usefixtures("soffice")

SID = "SCM-01"
BOOK = "mrp_plan.xlsx"
MEMO = "expedite_memo.docx"

# The gold workbook's layout (scm_01._write_plan). MRP and Expedite rows 2-11 are BDY-10, BR-20, BR-22, VLV-14,
# IGN-30, SEAL-05, HSE-08, PSL-12, KNB-03, BOX-TF; MRP column D is the safety stock, M the expedite flag. BOM
# column C holds TF-200's quantities per unit (row 3 BR-20, row 4 BR-22); Forecast C4 is TF-300's January figure;
# Supply D7 is SEAL-05's pieces per stock unit, and Supply E17 and E21 say whether the cancelled PO-41187 and
# the second export line of PO-41203 are counted.

GOLD_SET = "BR-22, VLV-14 and IGN-30 must be expedited"
GOLD_IN_TIME = (
    "HSE-08, PSL-12 and BOX-TF have planned orders that arrive in time for the build: HSE-08's lead time "
    "of 28 days equals the days available, so it lands on the build date."
)
GOLD_CANCEL = "Orrin Valve Co. cancelled PO-41187 (1,200 VLV-14)"
GOLD_SS = (
    "Under exception QA-2026-11 its safety stock is 40% of the month's gross requirement of 1,550, that is 620 units, "
    "instead of the item master's 150."
)


def _book(*edits: tuple[str, str, object]) -> Mutation:
    """Set cells of the plan (sheet, cell, value), as a planner typing other figures or formulas would."""
    return mutation_support.set_cells(BOOK, *edits)


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of the memo (wrapped lines allowed); the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # TF-200 on revision B: BR-20 gains TF-200's 900 (net 1,200 + 150 - 1,650 + 900 = 600, planned 750) and BR-22
    # loses them (650 + 150 - 400 - 500 = -100: nothing to order, so no expedite). No other component changes.
    "superseded_bom_revision": (
        _book(("BOM", "C3", 1), ("BOM", "C4", 0)),
        {"book_br20_net", "book_br22_net", "book_br22_expedite"},
    ),
    # SEAL-05's 620 packs read as 620 pieces: 5,500 + 500 - 620 = 5,380 to order at 30 days, a false expedite.
    "packs_read_as_pieces": (_book(("Supply", "D7", 1)), {"book_seal05_on_hand", "book_seal05_expedite"}),
    # The cancelled PO-41187 counted: VLV-14 receives 2,000 and nets 3,000 - 1,100 - 2,000 < 0, so no order.
    "cancelled_po_counted": (_book(("Supply", "E17", "Yes")), {"book_vlv14_net", "book_vlv14_expedite"}),
    # The memo never names the cancelled order (it still says an order was cancelled).
    "memo_leaves_the_cancelled_po_unnamed": (
        _memo((GOLD_CANCEL, "Orrin Valve Co. cancelled its larger VLV-14 order (1,200)")),
        {"memo_names_cancelled_po"},
    ),
    # Exception QA-2026-11 missed: IGN-30 at the item master's 150 nets 1,550 + 150 - 1,500 - 200 = 0.
    "single_source_exception_missed": (_book(("MRP", "D6", 150)), {"book_ign30_planned", "book_ign30_expedite"}),
    # The whole package of a planner who missed the exception: IGN-30 has no planned order in the workbook, the memo
    # states the item master's safety stock in its sentence and its table row, and lists two components.
    "single_source_exception_missed_everywhere": (
        in_turn(
            _book(("MRP", "D6", 150)),
            _memo(
                (GOLD_SS, "Its safety stock is the item master's 150."),
                (
                    "IGN-30 | 1,550 | 620 | 1,500 | 200 | 470 | 500 | 56",
                    "IGN-30 | 1,550 | 150 | 1,500 | 200 | 0 | 0 | 56",
                ),
                (GOLD_SET, "BR-22 and VLV-14 must be expedited"),
            ),
        ),
        {"book_ign30_planned", "book_ign30_expedite", "memo_states_ign30_safety_stock", "memo_expedite_set"},
    ),
    # TF-300 on version 1 (800, not 650): every TF-300 component gains 150. BR-22 nets 950 and VLV-14 1,250 (planned
    # orders unchanged at 1,000 and 1,500); IGN-30's safety stock becomes 680 and it nets 680, planned 700; SEAL-05
    # nets 5,800 + 500 - 6,200 = 100, an order of 1,000 at 30 days, expedited; PSL-12 nets 1,100, planned 1,500.
    # BOX-TF nets 1,250, still 1,250; HSE-08 nets 600, still 600, not expedited.
    "superseded_forecast_version": (
        _book(("Forecast", "C4", 800)),
        {"book_br22_net", "book_vlv14_net", "book_ign30_planned", "book_seal05_expedite", "book_psl12_planned"},
    ),
    # PO-41203 counted twice: BOX-TF receives 2,000 and nets 100, raised to the minimum order of 250.
    "duplicate_po_counted_twice": (_book(("Supply", "E21", "Yes")), {"book_boxtf_planned"}),
    # A lead time equal to the days available taken as too long, in the workbook and the memo.
    "tie_expedited": (
        in_turn(
            _book(("MRP", "M8", '=IF(AND(J8>0,K8>=L8),"Yes","No")')),
            _memo(
                (
                    GOLD_IN_TIME,
                    "PSL-12 and BOX-TF have planned orders that arrive in time for the build. HSE-08 must be "
                    "expedited too: its lead time of 28 days leaves no margin.",
                )
            ),
        ),
        {"book_hse08_expedite", "memo_expedite_set"},
    ),
    # The memo's list leaves out the valve whose order was cancelled.
    "memo_list_misses_a_component": (_memo((GOLD_SET, "BR-22 and IGN-30 must be expedited")), {"memo_expedite_set"}),
    # Careful wordings other than the gold's: "Yes" for the decision, codes without the hyphen, the list
    # stated one component per sentence.
    "yes_for_expedite_and_codes_unhyphenated": (
        _book(("Expedite", "B4", "Yes"), ("Expedite", "A6", "IGN30"), ("MRP", "A3", "BR20")),
        set(),
    ),
    "list_one_sentence_each": (
        _memo(
            (
                GOLD_SET,
                (
                    "The buyers must expedite BR-22. VLV-14 also needs expediting. IGN-30 must be expedited "
                    "as well, and all three"
                ),
            )
        ),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("scm01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


# Expedite lists as other planners write them, read without a document: the components each puts inside the set
# ("must be expedited") and outside it ("arrives in time"). A plan or a supposition states no finding.
EXPEDITE_PHRASINGS = {
    "BR-22, VLV-14 and IGN-30 must be expedited.": ({"BR-22", "VLV-14", "IGN-30"}, set()),
    "VLV-14 cannot arrive before the build start and has to be expedited.": ({"VLV-14"}, set()),
    "SEAL-05 does not need expediting: stock covers it.": (set(), {"SEAL-05"}),
    "HSE-08 arrives on the build date and is not expedited.": (set(), {"HSE-08"}),
    "PSL-12 and BOX-TF arrive in time.": (set(), {"PSL-12", "BOX-TF"}),
    "If BR-20 were still on TF-200 it would need expediting.": (set(), set()),
}


@pytest.mark.parametrize("text", list(EXPEDITE_PHRASINGS))
def test_expedite_phrasings(text):
    assert mutation_support.read_set_as(SID, "memo_expedite_set", text) == EXPEDITE_PHRASINGS[text]


# The Expedite sheet's decision cell as other planners fill it in.
@pytest.mark.parametrize(
    "cell,want",
    [
        ("Expedite", "Expedite"),
        ("Yes", "Expedite"),
        ("EXPEDITE", "Expedite"),
        ("No", "No"),
        ("Not required", "No"),
        ("On time", "No"),
    ],
)
def test_decision_cell_phrasings(cell, want):
    from pilot.oracles.decisions import read_decision

    c = load_scenario(SID).oracle.by_id("book_vlv14_expedite")
    options = dict(c.get("options"))
    assert read_decision(cell, options, whole_cell=True).verdict(list(options)) == want
