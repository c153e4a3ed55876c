"""TAX-01's oracle fails the packages of a VAT accountant who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
preparer would have produced it: the October invoices taken into the return,
credit notes added instead of subtracted, the euro invoice left in euro, the
duplicated export line counted twice, the superseded Northgate invoice
claimed at the ledger's figures, client entertainment VAT reclaimed (or the
staff party's VAT blocked as well), and the memo's list of what was left out
or restricted got wrong. The criteria each must fail are worked out from the
trap (which box or sentence the mistake changes), not read off the oracle:
every box is a formula on the Sales and Purchases workings, so a wrong
treatment of a sales line moves boxes 1, 5 and 6, and one of a purchase line
boxes 4 and 5, and 7 when its net moves too. Careful wordings other than the
gold's must pass. All variants share one LibreOffice batch.
"""

from __future__ import annotations

import flatten_support
import mutation_support
import openpyxl
import pytest
from mutation_support import Mutation, in_turn

from pilot import defects
from pilot.scenarios import load_scenario

pytestmark = pytest.mark.usefixtures("soffice")

SID = "TAX-01"
BOOK = "vat_return_Q3.xlsx"
MEMO = "vat_memo.docx"

# The gold workbook's layout (tax_01._write_return). Sales: column I the rate to sterling, J the sign, M "In return";
# row 12, 22, 31 the credit notes CN-0207/8/9, 18 the euro invoice SI-3116, 21 the second SI-3118 line, 37 and 38
# the October invoices SI-3132 and SI-3133. Purchases: H/I net and VAT, J the sign, M "VAT blocked", O "In return";
# row 22 the supplier credit note PI-5721, 23 the October invoice PI-5722, 27 and 34 the client entertainment
# claims EC-0412 and EC-0419, 30 the staff party EC-0415, 36 the revised invoice NC-88213-R1 the line PI-5711 reads.
SALES_BOX = {"book_box1", "book_box5", "book_box6"}
PURCHASE_VAT_BOX = {"book_box4", "book_box5"}
PURCHASE_BOX = {"book_box4", "book_box5", "book_box7"}

GOLD_PARTY = "is staff entertainment and its VAT of GBP 248.00 is claimed in full"
GOLD_LAST_DAY = "dated 30 September 2026, is included"
GOLD_LATE_PURCHASE = (
    "Purchase invoice PI-5722 from Trent Pipe & Fittings, dated 2 October 2026, is excluded for the same reason."
)
GOLD_REVISED = "by revised invoice NC-88213-R1 at net 9,840.00, VAT 1,968.00"
GOLD_LATE_PURCHASE_ROW = "PI-5722 | Yes | 2 Oct 2026 | 862.00 | Invoice dated after 30 September (next return)"


def _book(*edits: tuple[str, str, object]) -> Mutation:
    """Set cells of the return workbook (sheet, cell, value), as a preparer coding a line otherwise would."""
    return mutation_support.set_cells(BOOK, *edits)


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences (or table rows) of the memo; the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # The export's October invoices kept in the return (01/10/2026 read as 10 January, or no cut-off at all):
    # 1,229.13 more output VAT and 6,702.60 more sales.
    "october_sales_included": (_book(("Sales", "M37", "Yes"), ("Sales", "M38", "Yes")), SALES_BOX),
    # The October purchase invoice claimed now: 862.00 more input VAT, 4,310.00 more purchases.
    "october_purchase_included": (_book(("Purchases", "O23", "Yes")), PURCHASE_BOX),
    # Credit notes taken with the export's positive sign: they add to output VAT and sales instead of reducing them.
    "customer_credit_notes_added": (_book(("Sales", "J12", 1), ("Sales", "J22", 1), ("Sales", "J31", 1)), SALES_BOX),
    # The supplier's credit note added: input VAT and purchases overstated by twice its amount.
    "supplier_credit_note_added": (_book(("Purchases", "J22", 1)), PURCHASE_BOX),
    # The euro invoice's amounts taken as pounds.
    "euro_invoice_unconverted": (_book(("Sales", "I18", 1)), SALES_BOX),
    # The euro invoice at July's rate instead of the rate for its own month, August.
    "euro_invoice_at_another_month_rate": (_book(("Sales", "I18", 0.8512)), SALES_BOX),
    # SI-3118 counted twice.
    "duplicate_line_counted": (_book(("Sales", "M21", "Yes")), SALES_BOX),
    # Northgate's invoice claimed at the ledger's superseded figures: 360.00 more VAT, 1,800.00 more purchases.
    "superseded_invoice_figures": (_book(("Purchases", "H36", 11640), ("Purchases", "I36", 2328)), PURCHASE_BOX),
    # The memo never names the revised invoice nor its figures.
    "memo_leaves_the_revision_unstated": (_memo((GOLD_REVISED, "by a later document")), {"memo_names_revised_invoice"}),
    # Client entertainment reclaimed: 327.20 more input VAT; the net of box 7 does not move.
    "client_entertainment_reclaimed": (_book(("Purchases", "M27", "No"), ("Purchases", "M34", "No")), PURCHASE_VAT_BOX),
    # Every "Entertainment" claim blocked, the staff party too: 248.00 too little input VAT.
    "staff_party_blocked": (_book(("Purchases", "M30", "Yes")), PURCHASE_VAT_BOX),
    # The same in the memo: the staff party said blocked, so the set holds a transaction it must not.
    "memo_blocks_the_staff_party": (
        _memo((GOLD_PARTY, "is entertainment too and its VAT of GBP 248.00 is blocked")),
        {"memo_excluded_or_restricted"},
    ),
    # The invoice dated on the quarter's last day said to be left out.
    "memo_excludes_the_last_day_invoice": (
        _memo((GOLD_LAST_DAY, "dated 30 September 2026, is excluded as well")),
        {"memo_excluded_or_restricted"},
    ),
    # The October purchase invoice not named among the transactions left out (prose and table).
    "memo_omits_the_october_purchase": (
        _memo((GOLD_LATE_PURCHASE, ""), (GOLD_LATE_PURCHASE_ROW, "")),
        {"memo_excluded_or_restricted"},
    ),
    # A memo whose net payable was taken before the entertainment restriction (21,817.57 - 327.20).
    "memo_net_payable_before_restriction": (_memo(("21,817.57", "21,490.37")), {"memo_states_net_payable"}),
    # The whole careless package of reclaiming client entertainment: workbook and memo.
    "entertainment_reclaimed_everywhere": (
        in_turn(_book(("Purchases", "M27", "No"), ("Purchases", "M34", "No")), _memo(("21,817.57", "21,490.37"))),
        PURCHASE_VAT_BOX | {"memo_states_net_payable"},
    ),
    # Careful wordings other than the gold's: the restriction stated as "not recoverable", the cut-off as
    # "deferred to the next return", and the box labels with their descriptions in column A.
    "restriction_worded_otherwise": (
        _memo(
            ("is blocked under guidance 7(b)", "is not recoverable under guidance 7(b)"),
            ("is excluded for the same reason", "is deferred to the next return for the same reason"),
        ),
        set(),
    ),
    "revision_stated_in_round_pounds": (
        _memo((GOLD_REVISED, "by revised invoice NC-88213 R1 at net GBP 9,840, VAT GBP 1,968")),
        set(),
    ),
    "box_labels_with_descriptions": (
        _book(
            ("VAT return", "A2", "Box 1 - VAT due on sales"),
            ("VAT return", "A5", "Box 4 - VAT reclaimed"),
            ("VAT return", "A6", "Box 5 - net VAT payable"),
            ("VAT return", "A7", "Box 6 - sales ex VAT"),
            ("VAT return", "A8", "Box 7 - purchases ex VAT"),
        ),
        set(),
    ),
}

# The memo's decision table (section Adjustments; the Box table under Return figures states no decision): every
# transaction the set is about, the five in it and the three look-alikes, with its verdict as Yes/No in the second
# column, whose title "Excluded or VAT blocked" holds a topic word of the criterion (VAT) and its verbs. Some Word
# writers flatten a table into one paragraph of its cells in reading order (FLAT_GOLD below). The oracle reads such
# a line by its header's order: the titles Transaction, Excluded or VAT blocked, Date, VAT (GBP) and Reason, the
# decision title second, so each row's Yes/No follows the transaction that starts it, and no cell holds a
# sentence's end that would cut a row short. So the flattened table says what the Word table says: it passes
# beside the prose, and alone once the prose is reworded to state nothing; a row given the other verdict
# contradicts the prose and fails the set alone, for a transaction in the set (SI-3132 said included) and for a
# look-alike outside it (the staff party EC-0415 said blocked); with the prose reworded, the table's own verdict
# for SI-3132 is what fails.
MEMO_TABLE = ("Transaction", "Excluded or VAT blocked", "Date", "VAT (GBP)", "Reason")
FLAT_GOLD = (
    "Transaction Excluded or VAT blocked Date VAT (GBP) Reason "
    "SI-3132 Yes 1 Oct 2026 1,192.00 Tax point after 30 September (next return) "
    "SI-3133 Yes 2 Oct 2026 37.13 Tax point after 30 September (next return) "
    "PI-5722 Yes 2 Oct 2026 862.00 Invoice dated after 30 September (next return) "
    "EC-0412 Yes 6 Aug 2026 97.20 Client entertainment (guidance 7(b)) "
    "EC-0419 Yes 25 Sep 2026 230.00 Client entertainment (guidance 7(b)) "
    "SI-3131 No 30 Sep 2026 1,684.00 Tax point on the last day of the quarter "
    "PI-5721 No 24 Sep 2026 -94.60 Supplier credit note SC-4410 (reduces box 4) "
    "EC-0415 No 4 Sep 2026 248.00 Staff entertainment (recoverable)"
)
# The prose of Adjustments reworded to state facts and no verdict, as a preparer who leaves the verdicts to the
# table writes it: no transaction said excluded, deferred, blocked, included or claimed.
PROSE_WITHOUT_VERDICTS = (
    (
        (
            "are excluded from this return, because their tax point falls after 30 September; they belong to "
            "the next quarter"
        ),
        "were raised in October",
    ),
    ("is excluded for the same reason", "was received in October"),
    ("dated 30 September 2026, is included in this return", "dated 30 September 2026, is for a boiler replacement"),
    (
        "is blocked under guidance 7(b), GBP 327.20 in all; their net values remain in box 7",
        "comes to GBP 327.20 in all",
    ),
    (GOLD_PARTY, "is staff entertainment with VAT of GBP 248.00"),
)


def _verdict(ref: str, verdict: str) -> Mutation:
    """The memo's decision table with ``ref``'s row given another verdict (its second cell), the rest as the gold wrote
    it."""

    def mutate(ws) -> None:
        from docx import Document

        from pilot.scenarios.officeio import normalize_zip

        path = ws / "outputs" / MEMO
        doc = Document(str(path))
        table = next(t for t in doc.tables if tuple(c.text.strip() for c in t.rows[0].cells) == MEMO_TABLE)
        rows = [r for r in table.rows if r.cells[0].text.strip() == ref]
        # A row the table lacks, or the verdict it already has, would change nothing and pass for the wrong reason.
        assert len(rows) == 1 and rows[0].cells[1].text.strip() != verdict, (ref, verdict)
        rows[0].cells[1].text = verdict
        doc.save(str(path))
        normalize_zip(path)

    return mutate


def _flattened(*edits: Mutation) -> Mutation:
    """The decision table flattened into one paragraph, after ``edits`` (verdicts given to its rows)."""
    return in_turn(*edits, flatten_support.flatten_docx_table(MEMO, MEMO_TABLE))


FLATTENED_VARIANTS = {
    "memo_table_flattened": (_flattened(), set()),
    "memo_table_flattened_is_the_only_statement": (in_turn(_flattened(), _memo(*PROSE_WITHOUT_VERDICTS)), set()),
    # SI-3132 (dated 1 October) said included: the prose says it is excluded, the table's row the opposite.
    "memo_flattened_table_includes_si_3132": (_flattened(_verdict("SI-3132", "No")), {"memo_excluded_or_restricted"}),
    # The staff party said blocked: a look-alike put in the set.
    "memo_flattened_table_blocks_the_staff_party": (
        _flattened(_verdict("EC-0415", "Yes")),
        {"memo_excluded_or_restricted"},
    ),
    # The table as the only statement, with SI-3132 said included: nothing else names it as left out.
    "memo_flattened_table_alone_includes_si_3132": (
        in_turn(_flattened(_verdict("SI-3132", "No")), _memo(*PROSE_WITHOUT_VERDICTS)),
        {"memo_excluded_or_restricted"},
    ),
}
VARIANTS.update(FLATTENED_VARIANTS)
#: The flattened-table variants the census of tests/test_oracle_mutations.py counts for TAX-01.
FLATTENED_TABLE_VARIANTS = {SID: tuple(FLATTENED_VARIANTS)}
# The reworded prose states nothing on its own: without the table the memo names no transaction at all.
VARIANTS["memo_prose_without_verdicts_and_no_table"] = (
    in_turn(_flattened(), _memo(*PROSE_WITHOUT_VERDICTS, (FLAT_GOLD, ""))),
    {"memo_excluded_or_restricted"},
)


def _verdict_column_last(lines: list[str]) -> list[str]:
    """The decision table with its Yes/No column moved to the end, as another writer would lay it out."""
    at = next(i for i, line in enumerate(lines) if [c.strip() for c in line.split(" | ")] == list(MEMO_TABLE))
    out = list(lines)
    for i in range(at, len(lines)):
        if " | " not in lines[i]:
            break
        cells = lines[i].split(" | ")
        out[i] = " | ".join(cells[:1] + cells[2:] + cells[1:2])
    return out


def _kit(criterion: str) -> Mutation:
    """The authoring kit's own defect for ``criterion``, as `pilot scenarios check` and the dry run apply it."""

    def mutate(ws) -> None:
        defects.defect_for_criterion(load_scenario(SID), criterion, ws)

    return mutate


VERDICT_LAST = mutation_support.rewrite_document(SID, MEMO, _verdict_column_last)
# The kit's wrong decision and thinned memo must work on any table layout, not only on the gold's: with the verdict
# last, the decision is still read by its column, renamed rows state another set, and a thinned memo keeps the table.
VARIANTS.update(
    {
        "memo_table_verdict_last": (VERDICT_LAST, set()),
        "memo_table_verdict_last_kit_wrong_decision": (
            in_turn(VERDICT_LAST, _kit("memo_excluded_or_restricted")),
            {"memo_excluded_or_restricted"},
        ),
        "memo_table_verdict_last_kit_thinned": (in_turn(VERDICT_LAST, _kit("memo_length")), {"memo_length"}),
    }
)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("tax01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


@pytest.mark.parametrize(
    "name,words",
    [
        # The complement and the property as oracle.yml words them, each with its row as the flattened line writes it.
        (
            "memo_flattened_table_includes_si_3132",
            (
                "says SI-3132 is included in this return in full ('SI-3132 No 1 Oct 2026 1,192.00 Tax point "
                "after 30 September (next return)')"
            ),
        ),
        (
            "memo_flattened_table_blocks_the_staff_party",
            (
                "names EC-0415 as one that is left out of this return or has its VAT restricted ('EC-0415 Yes "
                "4 Sep 2026 248.00 Staff entertainment (recoverable)')"
            ),
        ),
        (
            "memo_flattened_table_alone_includes_si_3132",
            "says SI-3132 is included in this return in full ('SI-3132 No 1 Oct 2026",
        ),
    ],
)
def test_flattened_table_with_another_verdict_is_caught_on_its_row(verdicts, name, words):
    """The flattened table's row with the other verdict is what fails, quoted as the line writes it."""
    by = {c.id: c for c in verdicts[name].criteria}
    reason = by["memo_excluded_or_restricted"].reason
    assert words in reason, reason


def test_flattening_replaces_the_decision_table_alone(tmp_path):
    """The decision table becomes one paragraph where it stood; the Box table and every other part stay as they were."""
    import zipfile

    from pilot import defects
    from pilot.oracles.readers import document_lines
    from pilot.scenarios import build_gold_workspace

    gold = build_gold_workspace(SID, tmp_path / "gold")
    ws = defects.copy_workspace(gold, tmp_path / "flat")
    flatten_support.flatten_docx_table(MEMO, MEMO_TABLE)(ws)
    before, after = (zipfile.ZipFile(w / "outputs" / MEMO) for w in (gold, ws))
    assert before.namelist() == after.namelist()
    assert [n for n in before.namelist() if before.read(n) != after.read(n)] == ["word/document.xml"]
    assert [t[0] for t in flatten_support.docx_table_rows(ws / "outputs" / MEMO)] == [["Box", "Description", "GBP"]]
    lines, reason = document_lines(ws / "outputs" / MEMO, layout=True)
    assert reason is None
    # The gold's table as the memo writes it, row by row, then the next heading.
    at = lines.index(FLAT_GOLD)
    assert lines[at - 1].startswith("The table lists every transaction") and lines[at + 1] == "Return figures"
    # A verdict for a row the table does not have would change nothing: refused.
    bad = defects.copy_workspace(gold, tmp_path / "bad")
    with pytest.raises(AssertionError, match="no table row starts with"):
        flatten_support.flatten_docx_table(MEMO, MEMO_TABLE, {"SI-3118": "Counted once"})(bad)
    # So would a verdict for a row the table lacks, or the verdict the row already has.
    for ref, verdict in (("SI-3118", "Yes"), ("SI-3132", "Yes")):
        with pytest.raises(AssertionError, match=ref):
            _verdict(ref, verdict)(bad)


# The set as other preparers write it, read without a document: the transactions each puts inside the set
# (left out or restricted) and outside it (included in full). A plan for next quarter states no finding.
SET_PHRASINGS = {
    "SI-3132 and SI-3133 are dated October 2026 and belong to the next return.": ({"SI-3132", "SI-3133"}, set()),
    "The VAT on EC-0412 and EC-0419 (client entertainment) is non-recoverable and has not been claimed.": (
        {"EC-0412", "EC-0419"},
        set(),
    ),
    "EC-0415 is a staff party: its VAT is recoverable in full.": (set(), {"EC-0415"}),
    "SI-3131 is dated 30 September and is included in this return.": (set(), {"SI-3131"}),
    "PI-5722 is left out of this return (tax point 2 October).": ({"PI-5722"}, set()),
    "Transaction | Treatment\nSI-3132 | Excluded\nEC-0419 | VAT blocked": ({"SI-3132", "EC-0419"}, set()),
    "PI-5722 should be claimed in the return to 31 December.": (set(), set()),
    # Left out now and taken into the next return: a deferral, not an inclusion.
    "SI-3132 and SI-3133 (dated 1 and 2 October 2026) have been excluded and will be included in the Q4 return.": (
        {"SI-3132", "SI-3133"},
        set(),
    ),
    "SI-3132 and SI-3133 are excluded from Q3; they will be included in the Q4 return.": (
        {"SI-3132", "SI-3133"},
        set(),
    ),
    "EC-0415 (staff summer party) is staff entertainment, so its VAT remains recoverable.": (set(), {"EC-0415"}),
    "Sales invoice SI-3131 is dated 30/09/2026 and falls within the quarter.": (set(), {"SI-3131"}),
    "The VAT on EC-0412 is irrecoverable; EC-0415 is recoverable.": ({"EC-0412"}, {"EC-0415"}),
    # The gold's decision table as a Word table is read, and flattened into one line: the same verdicts.
    "Transaction | Excluded or VAT blocked | Date | VAT (GBP) | Reason\n"
    "SI-3132 | Yes | 1 Oct 2026 | 1,192.00 | Tax point after 30 September (next return)\n"
    "SI-3133 | Yes | 2 Oct 2026 | 37.13 | Tax point after 30 September (next return)\n"
    f"{GOLD_LATE_PURCHASE_ROW}\n"
    "EC-0412 | Yes | 6 Aug 2026 | 97.20 | Client entertainment (guidance 7(b))\n"
    "EC-0419 | Yes | 25 Sep 2026 | 230.00 | Client entertainment (guidance 7(b))\n"
    "SI-3131 | No | 30 Sep 2026 | 1,684.00 | Tax point on the last day of the quarter\n"
    "PI-5721 | No | 24 Sep 2026 | -94.60 | Supplier credit note SC-4410 (reduces box 4)\n"
    "EC-0415 | No | 4 Sep 2026 | 248.00 | Staff entertainment (recoverable)": (
        {"SI-3132", "SI-3133", "PI-5722", "EC-0412", "EC-0419"},
        {"SI-3131", "PI-5721", "EC-0415"},
    ),
    FLAT_GOLD: ({"SI-3132", "SI-3133", "PI-5722", "EC-0412", "EC-0419"}, {"SI-3131", "PI-5721", "EC-0415"}),
}


@pytest.mark.parametrize("text", list(SET_PHRASINGS))
def test_set_phrasings(text):
    assert mutation_support.read_set_as(SID, "memo_excluded_or_restricted", text) == SET_PHRASINGS[text]


def test_answer_from_the_inputs_alone():
    """compute() on the committed inputs gives the boxes worked by hand from the planted lines.

    Box 4 by hand: the ledger's recoverable VAT as posted, less Northgate's 360.00 (2,328.00 to 1,968.00),
    less the supplier credit note's 94.60 counted negative instead of positive (2 x 94.60), less the October
    invoice's 862.00 and the client entertainment's 97.20 + 230.00. The other boxes are stated in
    oracle.yml's header, from the same planted lines.
    """
    from decimal import Decimal

    from pilot.scenarios.library import tax_01

    inputs = load_scenario(SID).inputs_dir
    a = tax_01.compute(inputs)
    wb = openpyxl.load_workbook(inputs / tax_01.PURCHASES_XLSX)
    posted = sum(Decimal(str(r[8])) for r in wb["Purchase ledger"].iter_rows(min_row=2, values_only=True) if r[0])
    posted += sum(Decimal(str(r[6])) for r in wb["Expense claims"].iter_rows(min_row=2, values_only=True) if r[0])
    by_hand = (
        posted - Decimal("360.00") - 2 * Decimal("94.60") - Decimal("862.00") - Decimal("97.20") - Decimal("230.00")
    )
    assert a["box4"] == by_hand == Decimal("15662.91")
    assert a["excluded"] == ["SI-3132", "SI-3133", "PI-5722"]
    assert a["restricted"] == ["EC-0412", "EC-0419"]
    assert a["duplicates"] == ["SI-3118"]
    assert a["box5"] == a["box1"] - a["box4"]


@pytest.mark.parametrize(
    "column,value,words",
    [
        ("date", "31-09-2026", "field 'date': '31-09-2026' is in neither format"),
        ("doc_type", "Refund", "SI-3101: field 'doc_type': 'Refund'"),
        ("vat_code", "X", "SI-3101: field 'vat_code': 'X'"),
        ("currency", "USD", "SI-3101: field 'currency': no rate for 'USD' in July 2026"),
    ],
)
def test_malformed_sales_line_is_refused_naming_file_and_field(tmp_path, column, value, words):
    import csv
    import shutil

    from pilot.scenarios.library import tax_01

    inputs = tmp_path / "inputs"
    shutil.copytree(load_scenario(SID).inputs_dir, inputs)
    path = inputs / tax_01.SALES_CSV
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    rows[0][column] = value
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(ValueError) as err:
        tax_01.compute(inputs)
    assert tax_01.SALES_CSV in str(err.value) and words in str(err.value)
