"""ITAM-01's oracle fails the packages of a licence manager who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
licence manager would have produced it: inventory rows counted instead of
devices, decommissioned devices counted, Meridian's free Viewer counted, the
ended Corvid contract summed with its renewal, the purchase list in the memo
wrong or incomplete. The criteria each must fail are worked out from the trap
(which cell or sentence the mistake changes, with the inventory's figures of
itam_01's docstring), not read off the oracle. Phrasings a careful manager
might use instead of the gold's must pass. All variants share one
LibreOffice batch.
"""

from __future__ import annotations

import mutation_support
import pytest
from mutation_support import Mutation

pytestmark = pytest.mark.usefixtures("soffice")

SID = "ITAM-01"
BOOK = "true_up.xlsx"
MEMO = "true_up_memo.docx"

# The gold workbook's layout (itam_01._write_book): rows 2-7 of True-up and Calculation are Vantage, Quillon,
# Meridian, Corvid, Halden and Tessel. Calculation: B inventory rows, C devices with the product, D decommissioned,
# E Viewer only, F devices counted (True-up D links to it), H entitled licences. Contracts row 7 is CT-2023-0412,
# F its "in force" flag.
VANTAGE, QUILLON, MERIDIAN, CORVID, HALDEN, TESSEL = range(2, 8)

GOLD_CORVID = (
    "Corvid Diagram Studio is under-licensed: 38 devices counted against 35 licences, a shortfall of 3 licences "
    "at GBP 289.90 each, GBP 869.70."
)
GOLD_HALDEN = (
    "Halden Stats is compliant, with 15 devices counted against 15 licences (exactly covered); no purchase is needed."
)
GOLD_TESSEL = (
    "Tessel Screen Capture is compliant, with 34 devices counted against 40 licences (a surplus of 6); "
    "no purchase is needed."
)


def _book(*edits: tuple[str, str, object]) -> Mutation:
    """Set cells of the workbook (sheet, cell, value), as a worker writing other formulas or figures would."""
    return mutation_support.set_cells(BOOK, *edits)


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of the memo (wrapped lines allowed); the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


def _verdicts(text: str) -> Mutation:
    """Replace the whole Purchase required section's verdicts, product by product, by ``text``."""
    return mutation_support.replace_section_body(
        SID, MEMO, "Purchase required", lambda line: line.startswith("The total true-up purchase is"), text
    )


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # Quillon counted by rows of devices in service (69 rows less the 2 decommissioned pairs = 67): 7 short at
    # 149.00, so the total rises by 1,043.00. Only Quillon's count and the total move.
    "rows_counted_not_devices": (
        _book(("Calculation", f"F{QUILLON}", f"=B{QUILLON}-D{QUILLON}")),
        {"book_quillon_devices", "book_total_cost"},
    ),
    # Decommissioned devices left in (devices with the product less Viewer-only): Vantage 47, Quillon 60,
    # Meridian 29, Corvid 39, Halden 18, Tessel 35. Every count the oracle reads moves; Corvid's shortfall becomes
    # 4 and Halden falls short, so the total moves; Corvid's entitlement does not.
    "decommissioned_devices_counted": (
        _book(*[("Calculation", f"F{r}", f"=C{r}-E{r}") for r in range(VANTAGE, TESSEL + 1)]),
        {
            "book_vantage_devices",
            "book_quillon_devices",
            "book_meridian_devices",
            "book_halden_devices",
            "book_corvid_shortfall",
            "book_total_cost",
        },
    ),
    # Meridian's Viewer-only devices counted: 36 against 30, 6 short at 612.00.
    "free_viewer_counted": (
        _book(("Calculation", f"F{MERIDIAN}", f"=C{MERIDIAN}-D{MERIDIAN}")),
        {"book_meridian_devices", "book_total_cost"},
    ),
    # The ended Corvid contract counted beside its renewal: 65 licences, no shortfall, the total 869.70 lower.
    "superseded_contract_summed": (
        _book(("Contracts", "F7", "Yes")),
        {"book_corvid_entitled", "book_corvid_shortfall", "book_total_cost"},
    ),
    # The memo's verdict for Corvid taken from the register's two lines.
    "memo_corvid_covered": (
        _memo(
            (
                GOLD_CORVID,
                "Corvid Diagram Studio is compliant, with 38 devices counted against 65 licences; no purchase is "
                "needed.",
            )
        ),
        {"memo_purchase_set"},
    ),
    # Halden's exact cover read as a shortfall (devices equal to licences are covered, rule 5).
    "memo_halden_short": (
        _memo(
            (
                GOLD_HALDEN,
                "Halden Stats is under-licensed, with 15 devices counted against 15 licences and no headroom.",
            )
        ),
        {"memo_purchase_set"},
    ),
    # A product left without a verdict: the brief asks for all six.
    "memo_tessel_left_out": (_memo((GOLD_TESSEL, "")), {"memo_purchase_set"}),
    # Careful wordings other than the gold's: a list, then the others covered together.
    "verdicts_as_lists": (
        _verdicts(
            "Two products are under-licensed and need a purchase: Vantage Design Suite (43 devices against 40 "
            "licences, 3 to buy, GBP 5,527.50) and Corvid Diagram Studio (38 against 35, 3 to buy, GBP 869.70). "
            "Quillon PDF Editor Pro, Meridian Project Planner, Halden Stats and Tessel Screen Capture are covered by "
            "the licences in force."
        ),
        set(),
    ),
    # The reason for a verdict stated as a supposition ("would") is no finding about Meridian.
    "supposition_beside_the_verdicts": (
        _memo(
            (
                GOLD_HALDEN,
                "Counting its Viewer installations would have put Meridian Project Planner short. " + GOLD_HALDEN,
            )
        ),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("itam01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


# Purchase verdicts as other licence managers write them, read without a document: the products each puts inside
# the set ("needs a purchase") and outside it ("covered"). A supposition or a plan states no finding.
PURCHASE_PHRASINGS = {
    "Vantage Design Suite: 43 devices against 40 licences - 3 licences must be bought.": ({"Vantage"}, set()),
    "We need to buy 3 more Corvid Diagram Studio licences.": ({"Corvid"}, set()),
    "Corvid is short by 3 licences once the expired contract is set aside.": ({"Corvid"}, set()),
    "Halden Stats is exactly covered (15 devices, 15 licences), so no purchase is required.": (set(), {"Halden"}),
    "Quillon PDF Editor Pro does not need a purchase.": (set(), {"Quillon"}),
    "Tessel Screen Capture has a surplus of 6 licences.": (set(), {"Tessel"}),
    "Buy 3 licences of Vantage Design Suite (GBP 5,527.50).": ({"Vantage"}, set()),
    "Corvid Diagram Studio needs 3 more licences.": ({"Corvid"}, set()),
    "Halden Stats needs no purchase: 15 devices, 15 licences.": (set(), {"Halden"}),
    "Meridian Project Planner needs no additional licences.": (set(), {"Meridian"}),
    "No licences need to be bought for Tessel Screen Capture.": (set(), {"Tessel"}),
    "Quillon PDF Editor Pro: nothing to buy.": (set(), {"Quillon"}),
    "Meridian Project Planner is fully licensed once the free Viewer is left out.": (set(), {"Meridian"}),
    "Product | Purchase needed\nVantage Design Suite | Yes\nQuillon PDF Editor Pro | No\nCorvid Diagram Studio | Yes": (
        {"Vantage", "Corvid"},
        {"Quillon"},
    ),
    "If the decommissioned devices were counted, Halden Stats would be short.": (set(), set()),
    "Counting every row would have made Quillon PDF Editor Pro look under-licensed.": (set(), set()),
}


@pytest.mark.parametrize("text", list(PURCHASE_PHRASINGS))
def test_purchase_phrasings(text):
    assert mutation_support.read_set_as(SID, "memo_purchase_set", text) == PURCHASE_PHRASINGS[text]


# A malformed inventory is refused naming the file, the line, the field and the reason, before any count.
@pytest.mark.parametrize(
    "column,value,words",
    [
        (2, "Retired", ["install_inventory.csv", "line 5", "device_status", "'Retired'"]),
        (7, "2026-13-40", ["install_inventory.csv", "line 5", "last_scan"]),
        (6, "ScanMaster", ["install_inventory.csv", "line 5", "source", "'ScanMaster'"]),
    ],
)
def test_malformed_inventory_is_refused(tmp_path, column, value, words):
    from pilot.scenarios.library import itam_01

    message = mutation_support.refusal_of_edited_input(
        SID, tmp_path, itam_01.INVENTORY_CSV, 5, column, value, itam_01.compute
    )
    assert all(w in message for w in words), message
