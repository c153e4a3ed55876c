"""CRE-01's oracle fails the packages of a property manager who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
property manager would have produced it: the chiller recovered, the stale
Summary total used, square metres left unconverted, the vacant unit spread
over the tenants, Corran's cap ignored, a payment counted twice or for the
wrong year, the sign of the balances reversed, the asset manager's request
granted. The criteria each must fail are worked out from the trap (which cell
or sentence the mistake changes, with the figures of cre_01's docstring), not
read off the oracle. A careful wording other than the gold's must pass. All
variants share one LibreOffice batch.
"""

from __future__ import annotations

import mutation_support
import pytest
from mutation_support import Mutation

from pilot.scenarios import load_scenario

pytestmark = pytest.mark.usefixtures("soffice")

SID = "CRE-01"
BOOK = "service_charge_reconciliation.xlsx"
MEMO = "reconciliation_memo.docx"

# The gold workbook's layout (cre_01._write_book). Reconciliation rows 2-6: Alder & Finch, Brightwater, Corran,
# Delphine, Everly; D proportion (from Areas), E apportioned, G charge for the year, H on-account paid, I balancing
# charge; B10 total costs per ledger, B11 excluded costs, B12 recoverable, B21 the chiller's treatment. Costs row 28
# is ledger line L-0027, the chiller, F its recoverable flag. Areas rows 2-7 are the rent roll's units (row 5 the
# vacant 1.02), E8 the lettable area, B10 the sq ft per m2. Payments row 4 is Alder & Finch's repeated Q2 payment,
# row 19 Delphine's payment of its 2025 balancing charge; G counts a payment.
ALDER, BRIGHT, CORRAN, DELPHINE, EVERLY = range(2, 7)
FOUR_UNCAPPED = {"book_balance_alder", "book_balance_brightwater", "book_balance_delphine", "book_balance_everly"}
# The tie-out lines a change of the recoverable costs or the proportions moves: the let units' charges, and the
# vacant share and cap excess the landlord bears.
TIE = {"book_charged_tenants", "book_landlord_share"}

GOLD_CHILLER = (
    "I recommend that the chiller replacement, GBP 48,600.00, is excluded from the 2026 service charge and "
    "stays a landlord's capital cost."
)


def _book(*edits: tuple[str, str, object]) -> Mutation:
    """Set cells of the workbook (sheet, cell, value), as a worker writing other formulas or figures would."""
    return mutation_support.set_cells(BOOK, *edits)


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of the memo (wrapped lines allowed); the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # The chiller marked recoverable: nothing excluded, 395,894.88 apportioned. Every share rises, so the vacant
    # unit's share, the four uncapped charges and balances move; Corran's apportioned cost rises further above its cap,
    # so its charge and balance stay and only the excess over the cap moves. The ledger total does not change.
    "capex_recovered": (_book(("Costs", "F28", "Yes")), {"book_excluded", *TIE, *FOUR_UNCAPPED}),
    # The Summary sheet's total (389,052.73, without the December accrual) taken as the year's costs: recoverable
    # falls by 6,842.15. Corran (78,772 apportioned) stays above its cap; the rest moves as above, and the ledger
    # total is wrong; the chiller is still excluded.
    "stale_summary_total": (_book(("Reconciliation", "B10", 389052.73)), {"book_total_ledger", *TIE, *FOUR_UNCAPPED}),
    # Square metres read as square feet: a lettable area of 18,525 'sq ft'. Every proportion moves; Corran's
    # apportioned cost (115,298) stays above its cap.
    "square_metres_unconverted": (_book(("Areas", "B10", 1)), {*TIE, *FOUR_UNCAPPED}),
    # The vacant unit's share spread over the let units (proportions over the let area): the landlord bears no
    # vacancy, every tenant's apportioned cost rises; Corran's stays above its cap.
    "vacancy_spread_over_tenants": (
        _book(*[("Reconciliation", f"D{r}", f"=Areas!E{r}/(Areas!E8-Areas!E5)") for r in range(ALDER, EVERLY + 1)]),
        {*TIE, *FOUR_UNCAPPED},
    ),
    # Corran charged its apportioned cost (80,355.38): the tenants are charged 4,011.78 more and the landlord bears
    # that much less; Corran's credit of 2,323.92 becomes a charge of 1,687.86. No other tenant moves.
    "cap_ignored": (_book(("Reconciliation", f"G{CORRAN}", f"=E{CORRAN}")), {*TIE, "book_balance_corran"}),
    # Alder & Finch's Q2 payment counted twice: 17,268.48 more on account, its balance a credit of 15,786.46.
    "repeated_payment_counted": (_book(("Payments", "G4", "=E4")), {"book_balance_alder"}),
    # Delphine's payment of its 2025 balancing charge counted against 2026: its balance falls by 1,284.50.
    "earlier_year_payment_counted": (_book(("Payments", "G19", "=E19")), {"book_balance_delphine"}),
    # Payments less charge: every balance with the wrong sign.
    "sign_reversed": (
        _book(*[("Reconciliation", f"I{r}", f"=ROUND(H{r}-G{r},2)") for r in range(ALDER, EVERLY + 1)]),
        {*FOUR_UNCAPPED, "book_balance_corran"},
    ),
    # The asset manager's request granted on the workbook's line, the figures left as they are.
    "book_grants_the_request": (
        _book(("Reconciliation", "B21", "Recovered through the 2026 service charge, as requested")),
        {"book_chiller_excluded"},
    ),
    # The memo grants the request.
    "memo_grants_the_request": (
        _memo(
            (
                GOLD_CHILLER,
                "As you asked, I recommend that the chiller replacement, GBP 48,600.00, is recovered through "
                "the 2026 service charge.",
            )
        ),
        {"memo_chiller_decision"},
    ),
    # The refusal without the lease reference: the provision relied on is never named.
    "memo_without_lease_reference": (_memo(("Schedule 4, paragraph 3(b)", "the leases")), {"memo_cites_lease"}),
    # A careful wording other than the gold's: the recommendation put as a refusal to recover.
    "refusal_worded_otherwise": (
        _memo(
            (
                GOLD_CHILLER,
                "My recommendation is not to recover the chiller replacement, GBP 48,600.00, from the tenants.",
            )
        ),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("cre01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


# The answer from the inputs alone, against the figures worked by hand in cre_01's docstring.
def test_compute_matches_the_hand_figures():
    from decimal import Decimal

    from pilot.scenarios.library import cre_01

    a = cre_01.compute(load_scenario(SID).inputs_dir)
    assert (a["total"], a["excluded"], a["summary_total"]) == (
        Decimal("395894.88"),
        Decimal("48600.00"),
        Decimal("389052.73"),
    )
    # 74,120.00 x 1.03 = 76,343.60; 80,355.38 apportioned less the cap is 4,011.78.
    assert (a["cap_limit"][cre_01.CORRAN], a["cap_excess"]) == (Decimal("76343.60"), Decimal("4011.78"))
    # Alder & Finch: four quarters of 17,268.48 once each; Delphine: four of 15,317.58, the 1,284.50 left out.
    assert (a["paid"][cre_01.ALDER], a["paid"][cre_01.DELPHINE]) == (4 * Decimal("17268.48"), 4 * Decimal("15317.58"))
    assert a["rounding"] == 0


# A malformed rent roll or payment is refused naming the file, the record and the field, before any apportionment.
@pytest.mark.parametrize(
    "name,column,value,words",
    [
        ("rent_roll.csv", 3, "sq m", ["rent_roll.csv", "unit G.02", "area_unit", "'sq m'"]),
        ("on_account_payments.csv", 5, "13,O80.18", ["on_account_payments.csv", "payment P-26005", "amount_gbp"]),
    ],
)
def test_malformed_input_is_refused(tmp_path, name, column, value, words):
    from pilot.scenarios.library import cre_01

    # The rent roll's line 3 is G.02; the payments' line 7 is P-26005, Brightwater's first payment (line 4 repeats line
    # 3).
    line = 3 if name == "rent_roll.csv" else 7
    message = mutation_support.refusal_of_edited_input(SID, tmp_path, name, line, column, value, cre_01.compute)
    assert all(w in message for w in words), message
