"""The oracle reads decisions, labelled values and money the way a careful grader would.

For every scenario the gold passes (``test_oracles``) and every criterion has a
defect that fails it alone, decisions and closed scales included. Here: the
named mutations a grader would try against a grader (a memo naming the right
option while recommending another, a count row above an amount row, a number
stored as text, one cent either side of an exact amount, a rating outside the
brief's scale), and the harmless variants that must pass (extra files and
folders, a PDF with a script, an archive entry nothing reads, number formats,
sheet order, label case). All variants share one LibreOffice batch.
"""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import flatten_support
import openpyxl
import pytest

from pilot import defects
from pilot.oracles import Recalculator, evaluate_many
from pilot.scenarios import build_gold_workspace, load_scenario
from pilot.scenarios.officeio import normalize_zip

pytestmark = pytest.mark.usefixtures("soffice")

ACC_BOOK = "bank_reconciliation_2026-10.xlsx"
MKT_BOOK = "campaign_performance_q3.xlsx"
PROC_BOOK = "bid_evaluation.xlsx"


def _edit_book(ws: Path, name: str, edit) -> None:
    path = ws / "outputs" / name
    wb = openpyxl.load_workbook(path)
    edit(wb)
    wb.save(path)
    normalize_zip(path)


def _set(sheet: str, coord: str, value):
    def edit(wb):
        wb[sheet][coord] = value

    return edit


def _reword(name: str, old: str, new: str):
    """Replace one sentence of a document (wrapped lines allowed); the rest stays as it is."""
    import re

    def mutate(ws: Path) -> None:
        def tr(lines):
            joined = "\n".join(lines)
            pattern = re.escape(old).replace(r"\ ", r"\s+")
            assert re.search(pattern, joined), f"{old!r} not in {name}"
            return re.sub(pattern, new, joined).split("\n")

        sid = next(k for k, v in SCENARIO_OF.items() if v == name)
        defects._rewrite_document(ws / "outputs" / name, tr, load_scenario(sid).deliverable(name).required_sections)

    return mutate


def _rewords(name: str, *pairs: tuple[str, str]):
    """Several sentences of one document replaced, each as :func:`_reword` does."""
    steps = [_reword(name, old, new) for old, new in pairs]

    def mutate(ws: Path) -> None:
        for step in steps:
            step(ws)

    return mutate


SCENARIO_OF = {
    "PROC-01": "award_recommendation.pdf",
    "BANK-01": "credit_memo.pdf",
    "HEALTH-01": "clinic_access_report_2026-10.pdf",
}
HEALTH_REPORT = SCENARIO_OF["HEALTH-01"]
HEALTH_SUMMARY = "Three clinics met the 20-minute waiting-time target; Hillcrest did not"
HEALTH_WAITS = "Hillcrest's median of 30 minutes is more than one and a half times the target."
PROC_CHOICE = "I recommend awarding the contract to Northwind Fasteners"
BANK_CHOICE = "I do not recommend approval of the request as structured"
BANK_DSCR = "The DSCR is therefore 1.15x, below the policy minimum of 1.25x"
BANK_LEVERAGE = "Leverage of 3.39x is within the 3.50x maximum"
BANK_BECAUSE = (
    "I do not recommend approval of the request as structured, because it fails the debt service coverage test."
)


def _bank_memo(table: tuple[list[str], list[list[str]]] | None, compliance: str, recommendation: str):
    """BANK-01's memo written afresh as another analyst might: the gold's facts, its own table and wording."""
    from pilot.scenarios.officeio import Heading, Para, Table, write_pdf

    def mutate(ws: Path) -> None:
        blocks = [
            Heading("Request"),
            Para(
                "Marlow & Finch Packaging Ltd. asks for a term loan of 2,400,000 CAD over 7 years at a "
                "fixed 7.25% with level monthly payments of 36,516.44 (438,197 a year), to finance a "
                "second extrusion line costing 3,050,000."
            ),
            Heading("Borrower"),
            Para(
                "An established flexible packaging manufacturer in Hamilton with 86 employees, banking "
                "with us since 2019 and with an unused revolving line at the last two year-ends. Revenue "
                "grew from 11.84 million in FY2023 to 13.19 million in FY2025. Equity of 6.70 million "
                "against total assets of 8.69 million, cash of 0.64 million and existing term debt of "
                "0.85 million with the Northshore Credit Union, amortising until 2029, make for a "
                "conservative balance sheet; earnings are the weakness."
            ),
            Para(
                "Receivables and inventory are in line with the activity level, working capital is "
                "positive, and the owners have run the business for more than twenty years. The new line "
                "would add capacity for food-grade films, where the order book is growing."
            ),
            Heading("Financial analysis"),
            Para(
                "EBITDA was 870,000, 950,000 and 810,000 in FY2023-FY2025. The one-off supplier "
                "settlement of 150,000 in note 1 is added back under policy 4.2, giving adjusted EBITDA "
                "of 960,000. Existing debt service is 395,000 a year; with the proposed facility, total "
                "annual debt service would be 833,197. Total funded debt would be 3,250,000. Margins "
                "narrowed in FY2025 because operating costs grew faster than revenue, even after the "
                "add-back, and the projected revenue of the new line cannot be counted."
            ),
        ]
        if table is not None:
            blocks.append(Table(*table))
        blocks += [
            Heading("Policy compliance"),
            Para(compliance),
            Heading("Recommendation"),
            Para(recommendation),
            Para(
                "Questions for the relationship manager: whether the borrower would accept a smaller "
                "facility or a longer amortisation, and whether the shareholders would inject equity or "
                "give a guarantee."
            ),
        ]
        write_pdf(blocks, ws / "outputs" / "credit_memo.pdf", title="Credit memo - Marlow & Finch Packaging Ltd.")

    return mutate


BANK_DECLINE = (
    "Decline the request as submitted. I recommend that we offer a facility of about 2,042,915 on the "
    "same rate and term, which would produce a DSCR of 1.25x and comply with policy, or the full amount "
    "over a longer amortisation if the asset life supports it; an exception for the full request belongs "
    "to the Senior Credit Committee with documented mitigants."
)
BANK_STATUS_TABLE = (
    ["Ratio", "Actual", "Policy limit", "Status"],
    [["DSCR", "1.15x", "min 1.25x", "FAIL"], ["Debt / EBITDA", "3.39x", "max 3.50x", "PASS"]],
)


def _flatten_table(name: str, last_cells: dict[str, str] | None = None):
    """The document's table written as one line of text, its cells in reading order, as some writers flatten a table.

    ``last_cells`` (a row's first cell -> text) rewrites the last cell of those rows: a flattened table with another
    verdict.
    """
    sid = next(k for k, v in SCENARIO_OF.items() if v == name)
    return flatten_support.flatten_pdf_table(sid, name, last_cells)


def _in_turn(*mutations):
    """Several workspace mutations applied in order, as one."""

    def mutate(ws: Path) -> None:
        for step in mutations:
            step(ws)

    return mutate


#: Scenarios whose gold states a decision in a table, with the flattened-table variants below that cover each.
FLATTENED_TABLE_VARIANTS = {
    "BANK-01": (
        "credit_memo_table_flattened",
        "credit_memo_table_flattened_is_the_only_statement",
        "credit_memo_flattened_table_says_dscr_complies",
        "credit_memo_flattened_table_says_leverage_fails",
    ),
}


def _count_row_above(wb):
    ws = wb["Reconciliation"]
    ws["D1"], ws["E1"] = "Number of outstanding cheques", 3


def _same_label_twice(value):
    def edit(wb):
        ws = wb["Reconciliation"]
        ws["D5"], ws["E5"] = "Outstanding cheques:", value

    return edit


def _thousands_and_order(wb):
    ws = wb["Reconciliation"]
    for row in ws.iter_rows():
        for cell in row:
            cell.number_format = "#,##0.00"
    wb.move_sheet("Reconciliation", offset=len(wb.sheetnames) - 1)
    ws["A3"] = ws["A3"].value.upper()


def _unread_archive_entry(ws: Path) -> None:
    path = ws / "outputs" / ACC_BOOK
    src = zipfile.ZipFile(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info, src.read(info))
        z.writestr("customXml/notes-for-nobody.txt", "an entry no reader extracts")
    path.write_bytes(buf.getvalue())


def _extras(ws: Path) -> None:
    out = ws / "outputs"
    (out / "scratch" / "deeper").mkdir(parents=True)
    (out / "scratch" / "deeper" / "calc.py").write_text("print('working file')\n")
    (out / "README.txt").write_text("Working notes, not a deliverable.\n")
    shutil.copyfile(out / ACC_BOOK, out / "bank_reconciliation_2026-10 (draft).xlsx")


def _pdf_with_script(ws: Path) -> None:
    from pypdf import PdfWriter
    from pypdf.actions import JavaScript

    path = ws / "outputs" / "award_recommendation.pdf"
    w = PdfWriter(clone_from=str(path))
    w.add_open_action(JavaScript("app.alert('opened');"))
    with open(path, "wb") as fh:
        w.write(fh)


def _order_also(sku: str):
    """OPS-01's reorder plan also orders a SKU that is above its reorder point (a wrong choice of what to order)."""
    import csv

    def mutate(ws: Path) -> None:
        plan = ws / "outputs" / "reorder_plan.csv"
        with plan.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
        extra = list(rows[-1])
        extra[0] = sku
        with plan.open("w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows(rows + [extra])

    return mutate


RES_BOOK = "survey_results.xlsx"


def _edits(*steps):
    """Several workbook edits applied in order, as one edit."""

    def edit(wb):
        for step in steps:
            step(wb)

    return edit


def _roas_proportional_unbounded(wb):
    """MKT-01's Q4 budget split in proportion to corrected ROAS without the CMO's 10-40 % bounds (Display lands near 8
    %)."""
    ws = wb["Channels"]
    for r in range(2, 7):
        ws[f"F{r}"] = f"=E{r}/SUM($E$2:$E$6)"


def _without_label(wb):
    """MKT-01's Affiliates line renamed, its formulas kept working: the channel has no line of its own."""
    ws = wb["Channels"]
    for col in "BCD":
        ws[f"{col}6"] = ws[f"{col}6"].value.replace(",A6,", ',"Affiliates",')
    ws["A6"] = "Partner sites"


def _transposition_the_wrong_way(wb):
    """ACC-01's cheque 10448 correction booked as a debit to cash: the ledger gains 270.00 instead of losing it."""
    ws = wb["Adjustments"]
    ws["D6"], ws["E6"], ws["F6"] = "1010 Cash", "2000 Accounts payable", 270


def _nsf_not_charged_back(wb):
    """ACC-01's returned Vesta Agritech cheque left in cash (no entry proposed for it)."""
    ws = wb["Adjustments"]
    ws["A5"], ws["C5"], ws["D5"], ws["E5"], ws["F5"] = (
        "Returned customer cheque (NSF): no entry, replacement expected",
        "Returned Item Nsf - Vesta Agritech",
        None,
        None,
        0,
    )


def _transposition_reversed_and_rebooked(wb):
    """ACC-01's cheque 10448 corrected as two entries (reverse 1,254.00, rebook 1,524.00): the same decision, in other
    entries."""
    ws = wb["Adjustments"]
    ws.insert_rows(7)
    ws["A6"], ws["C6"], ws["D6"], ws["E6"], ws["F6"] = (
        "Reverse cheque 10448 as booked",
        "Cheque 10448 booked at 1,254.00",
        "1010 Cash",
        "2000 Accounts payable",
        1254,
    )
    for col, value in zip(
        "ABCDEF",
        [
            "Rebook cheque 10448 as cleared",
            "JE-2026-10-0147",
            "Cheque 10448 cleared at 1,524.00",
            "2000 Accounts payable",
            "1010 Cash",
            -1524,
        ],
        strict=True,
    ):
        ws[f"{col}7"] = value
    ws["A8"], ws["F8"] = "Total adjustments to ledger cash", "=SUM(F2:F7)"
    wb["Reconciliation"]["B9"] = "=Adjustments!F8"


def _keep_in_data(*row):
    """RES-01's cleaned data keep a record the codebook excludes (appended, with every Summary formula's range extended
    to it)."""
    import re

    def edit(wb):
        data = wb["Data"]
        last = data.max_row + 1
        data.append(list(row))
        for line in wb["Summary"].iter_rows():
            for cell in line:
                if isinstance(cell.value, str) and cell.value.startswith("="):
                    cell.value = re.sub(
                        r"(Data![A-F]\$?\d+:\$?[A-F]\$?)" + str(last - 1) + r"\b", r"\g<1>" + str(last), cell.value
                    )

    return edit


def _also_exclude(respondent: str, reason: str):
    """RES-01's cleaned data lose a valid record, which the exclusions list then names."""

    def edit(wb):
        data = wb["Data"]
        at = next(c.row for c in data["A"] if c.value == respondent)
        data.delete_rows(at)
        summary = wb["Summary"]
        summary.append([respondent, reason])

    return edit


# name -> (scenario, mutation, criterion, passes?, words its reason must contain)
VARIANTS = {
    # Labelled values: a whole label cell, several cells must agree, money in exact decimal cents.
    "count_row_above_amount_row": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _count_row_above),
        "recon_outstanding_cheques",
        True,
        "Reconciliation!B5",
    ),
    "same_label_twice_agreeing": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _same_label_twice(6233.40)),
        "recon_outstanding_cheques",
        True,
        "all agree",
    ),
    "same_label_twice_disagreeing": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _same_label_twice(6200)),
        "recon_outstanding_cheques",
        False,
        "appears 2 times with different values",
    ),
    "balance_stored_as_text": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _set("Reconciliation", "B3", "176906.93")),
        "recon_bank_balance",
        False,
        "stored as text",
    ),
    # The balance feeds the adjusted balance and the difference, which fail with it (KNOCK_ON).
    "one_cent_below_to_the_cent": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _set("Reconciliation", "B3", 176906.92)),
        "recon_bank_balance",
        False,
        "176,906.92; expected 176,906.93 ± 0",
    ),
    "one_cent_above_to_the_cent": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _set("Reconciliation", "B3", 176906.94)),
        "recon_bank_balance",
        False,
        "176,906.94; expected 176,906.93 ± 0",
    ),
    "one_cent_below_within_a_cent": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _set("Channels", "B9", 162810.43)),
        "book_total_spend",
        True,
        "162,810.43",
    ),
    "one_cent_above_within_a_cent": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _set("Channels", "B9", 162810.45)),
        "book_total_spend",
        True,
        "162,810.45",
    ),
    "two_cents_below_within_a_cent": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _set("Channels", "B9", 162810.42)),
        "book_total_spend",
        False,
        "expected 162,810.44 ± 0.01",
    ),
    "two_cents_above_within_a_cent": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _set("Channels", "B9", 162810.46)),
        "book_total_spend",
        False,
        "expected 162,810.44 ± 0.01",
    ),
    # Decisions: read where the brief asks for them.
    "workbook_recommends_other_supplier": (
        "PROC-01",
        lambda ws: _edit_book(ws, PROC_BOOK, _set("Evaluation", "B8", "Ridgeway Manufacturing")),
        "eval_recommends_winner",
        False,
        "Evaluation!B8 ('Recommended supplier') decides Ridgeway, not Northwind",
    ),
    "workbook_negates_the_winner": (
        "PROC-01",
        lambda ws: _edit_book(ws, PROC_BOOK, _set("Evaluation", "B8", "Not Northwind")),
        "eval_recommends_winner",
        False,
        "Evaluation!B8",
    ),
    "memo_names_winner_recommends_other": (
        "PROC-01",
        _reword(
            "award_recommendation.pdf",
            PROC_CHOICE,
            "Northwind Fasteners scored highest, yet I recommend awarding the contract to Ridgeway Manufacturing",
        ),
        "award_recommends_winner",
        False,
        "section 'Recommendation' does not decide one option (chosen: Ridgeway",
    ),
    "memo_negates_the_winner": (
        "PROC-01",
        _reword(
            "award_recommendation.pdf", PROC_CHOICE, "I do not recommend awarding the contract to Northwind Fasteners"
        ),
        "award_recommends_winner",
        False,
        "section 'Recommendation' does not decide one option",
    ),
    "memo_recommends_winner_in_other_words": (
        "PROC-01",
        _reword(
            "award_recommendation.pdf",
            PROC_CHOICE,
            "The contract should go to Northwind Fasteners rather than Ridgeway Manufacturing",
        ),
        "award_recommends_winner",
        True,
        "decides Northwind",
    ),
    "credit_memo_approves_though_declining": (
        "BANK-01",
        _reword(
            "credit_memo.pdf",
            BANK_CHOICE,
            "I recommend approval of the request as structured although earnings have been declining",
        ),
        "memo_declines_request",
        False,
        "decides approve, not decline",
    ),
    "credit_memo_declines_plainly": (
        "BANK-01",
        _reword("credit_memo.pdf", BANK_CHOICE, "The request as structured should be declined"),
        "memo_declines_request",
        True,
        "decides decline",
    ),
    # BANK-01's per-ratio compliance, a set: the request fails the policy on DSCR alone.
    "credit_memo_says_dscr_complies": (
        "BANK-01",
        _reword("credit_memo.pdf", BANK_DSCR, "The DSCR is therefore 1.15x, which meets the policy minimum"),
        "memo_states_ratio_compliance",
        False,
        "says DSCR complies with the credit policy",
    ),
    "credit_memo_says_leverage_fails": (
        "BANK-01",
        _reword("credit_memo.pdf", BANK_LEVERAGE, "Leverage of 3.39x is above the 3.50x maximum"),
        "memo_states_ratio_compliance",
        False,
        "names Debt / EBITDA as one that fails the credit policy",
    ),
    "credit_memo_leaves_leverage_unjudged": (
        "BANK-01",
        _reword("credit_memo.pdf", BANK_LEVERAGE, "Leverage is 3.39x"),
        "memo_states_ratio_compliance",
        False,
        "does not say that Debt / EBITDA complies with the credit policy",
    ),
    # The same verdicts as other analysts write them: a status table, labels with their findings, "breach" and "inside",
    # and a counter-offer that does comply ("would produce a DSCR of 1.25x"), which is not a finding about the request.
    "credit_memo_status_table": (
        "BANK-01",
        _bank_memo(
            BANK_STATUS_TABLE,
            (
                "The request does not comply with section 4.1: adjusted EBITDA of 960,000 over total debt "
                "service of 833,197 gives a DSCR of 1.15x. To comply with 4.1 the loan would need to be "
                "reduced to about 2,042,915, which would bring the DSCR to 1.25x."
            ),
            BANK_DECLINE,
        ),
        "memo_states_ratio_compliance",
        True,
        "names exactly {DSCR}",
    ),
    "credit_memo_labels_and_findings": (
        "BANK-01",
        _bank_memo(
            None,
            "DSCR: 960,000 / 833,197 = 1.15x against a policy minimum of 1.25x (section 4.1), does not comply. "
            "Debt / EBITDA: 3,250,000 / 960,000 = 3.39x against a policy maximum of 3.50x (section 4.3), complies.",
            BANK_DECLINE,
        ),
        "memo_states_ratio_compliance",
        True,
        "names exactly {DSCR}",
    ),
    "credit_memo_breach_and_inside": (
        "BANK-01",
        _bank_memo(
            None,
            (
                "The pro forma DSCR of 1.15x (960,000 / 833,197) is well short of the 1.25x policy minimum, a "
                "breach of section 4.1. Total debt to EBITDA of 3.39x (3,250,000 / 960,000) remains inside "
                "the 3.50x limit of section 4.3."
            ),
            BANK_DECLINE,
        ),
        "memo_states_ratio_compliance",
        True,
        "names exactly {DSCR}",
    ),
    "credit_memo_status_table_says_dscr_passes": (
        "BANK-01",
        _bank_memo(
            (
                BANK_STATUS_TABLE[0],
                [["DSCR", "1.15x", "min 1.25x", "PASS"], ["Debt / EBITDA", "3.39x", "max 3.50x", "PASS"]],
            ),
            (
                "Adjusted EBITDA of 960,000 over total debt service of 833,197 gives a DSCR of 1.15x; the "
                "minimum is 1.25x."
            ),
            BANK_DECLINE,
        ),
        "memo_states_ratio_compliance",
        False,
        "says DSCR complies with the credit policy",
    ),
    # The gold's ratio table flattened into one line ("Ratio Calculation Result Policy Complies DSCR ... No Debt /
    # EBITDA ... Yes"): each Yes/No belongs to the ratio that starts its row, so the line says what the table said; with
    # another verdict it is caught.
    "credit_memo_table_flattened": (
        "BANK-01",
        _flatten_table("credit_memo.pdf"),
        "memo_states_ratio_compliance",
        True,
        "names exactly {DSCR}",
    ),
    "credit_memo_table_flattened_is_the_only_statement": (
        "BANK-01",
        _in_turn(
            _flatten_table("credit_memo.pdf"),
            _rewords(
                "credit_memo.pdf", (BANK_DSCR, "The DSCR is therefore 1.15x"), (BANK_LEVERAGE, "Leverage is 3.39x")
            ),
        ),
        "memo_states_ratio_compliance",
        True,
        "names exactly {DSCR}",
    ),
    "credit_memo_flattened_table_says_dscr_complies": (
        "BANK-01",
        _flatten_table("credit_memo.pdf", {"DSCR": "Yes"}),
        "memo_states_ratio_compliance",
        False,
        "says DSCR complies with the credit policy ('DSCR 960,000 / 833,197 1.15x min 1.25x Yes')",
    ),
    "credit_memo_flattened_table_says_leverage_fails": (
        "BANK-01",
        _flatten_table("credit_memo.pdf", {"Debt / EBITDA": "No"}),
        "memo_states_ratio_compliance",
        False,
        (
            "names Debt / EBITDA as one that fails the credit policy ('Debt / EBITDA 3,250,000 / 960,000 "
            "3.39x max 3.50x No')"
        ),
    ),
    "credit_memo_never_says_dscr_fails": (
        "BANK-01",
        _rewords(
            "credit_memo.pdf",
            (BANK_DSCR, "The DSCR is therefore 1.15x"),
            (BANK_BECAUSE, "I do not recommend approval of the request as structured."),
        ),
        "memo_states_ratio_compliance",
        False,
        "does not name DSCR as one that fails the credit policy",
    ),
    "credit_memo_compliance_in_other_words": (
        "BANK-01",
        _rewords(
            "credit_memo.pdf",
            (BANK_DSCR, "The DSCR would be 1.15x and so does not meet the 1.25x minimum"),
            (BANK_LEVERAGE, "Debt / EBITDA: 3.39x against a maximum of 3.50x, compliant"),
        ),
        "memo_states_ratio_compliance",
        True,
        "names exactly {DSCR}",
    ),
    # A set-valued decision: HEALTH-01 names exactly the clinics that miss the waiting-time target (Hillcrest).
    "clinic_named_is_the_wrong_one": (
        "HEALTH-01",
        _reword(HEALTH_REPORT, HEALTH_SUMMARY, "Three clinics met the 20-minute waiting-time target; Lakeview did not"),
        "report_names_clinics_over_target",
        False,
        "names Lakeview as one that misses the waiting-time target",
    ),
    "clinic_named_with_a_wrong_one": (
        "HEALTH-01",
        _reword(HEALTH_REPORT, HEALTH_SUMMARY, "Hillcrest and Lakeview missed the 20-minute waiting-time target"),
        "report_names_clinics_over_target",
        False,
        "names Lakeview as one that misses",
    ),
    "clinic_over_target_not_named": (
        "HEALTH-01",
        _rewords(
            HEALTH_REPORT,
            (HEALTH_SUMMARY, "Waiting times differed between the clinics; Hillcrest had the longest"),
            (HEALTH_WAITS, "Hillcrest's median was 30 minutes."),
        ),
        "report_names_clinics_over_target",
        False,
        "does not name Hillcrest as one that misses the waiting-time target",
    ),
    "clinic_over_target_said_to_meet_it": (
        "HEALTH-01",
        _reword(
            HEALTH_REPORT, HEALTH_SUMMARY, "Every clinic met the 20-minute waiting-time target, Hillcrest included"
        ),
        "report_names_clinics_over_target",
        False,
        "says Hillcrest meets the waiting-time target",
    ),
    "clinic_over_target_all_but": (
        "HEALTH-01",
        _reword(HEALTH_REPORT, HEALTH_SUMMARY, "All clinics but Hillcrest met the 20-minute waiting-time target"),
        "report_names_clinics_over_target",
        True,
        "names exactly {Hillcrest}",
    ),
    "clinic_over_target_did_not_meet": (
        "HEALTH-01",
        _reword(
            HEALTH_REPORT, HEALTH_SUMMARY, "Hillcrest did not meet the 20-minute target, unlike the other three clinics"
        ),
        "report_names_clinics_over_target",
        True,
        "names exactly {Hillcrest}",
    ),
    "clinic_over_target_missed_at": (
        "HEALTH-01",
        _rewords(
            HEALTH_REPORT,
            (HEALTH_SUMMARY, "The waiting-time target was missed at Hillcrest only"),
            (HEALTH_WAITS, "Hillcrest, at 30 minutes, is above the 20-minute target."),
        ),
        "report_names_clinics_over_target",
        True,
        "names exactly {Hillcrest}",
    ),
    # OPS-01's decision is which SKUs to order this week: one more than the plan needs fails.
    "reorder_plan_orders_a_sku_above_its_reorder_point": (
        "OPS-01",
        _order_also("HW-1010"),
        "plan_skus",
        False,
        "HW-1010",
    ),
    # Closed scales.
    "risk_rated_critical": (
        "LEGAL-01",
        lambda ws: defects.off_scale_value(ws, "issues_log.csv", "risk_rating", "Critical"),
        "log_risk_scale",
        False,
        "'Critical'",
    ),
    "risk_rated_severe": (
        "LEGAL-01",
        lambda ws: defects.off_scale_value(ws, "issues_log.csv", "risk_rating", "Severe"),
        "log_risk_scale",
        False,
        "'Severe'",
    ),
    "risk_rated_lower_case": (
        "LEGAL-01",
        lambda ws: defects.off_scale_value(ws, "issues_log.csv", "risk_rating", "medium"),
        "log_risk_scale",
        True,
        "uses only High, Medium, Low",
    ),
    "high_risk_rated_medium": (
        "LEGAL-01",
        lambda ws: defects.set_csv_cell(ws, "issues_log.csv", "clause", "9.4", "risk_rating", "Medium"),
        "log_rates_data_residency_high",
        False,
        "decides Medium, not High",
    ),
    # MKT-01's allocation bounds; ACC-01's entries and RES-01's exclusions, checked through the figures they fix.
    "allocation_display_a_cent_below_the_floor": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _edits(_set("Channels", "G4", 19999.99), _set("Channels", "G2", 40208.26))),
        "book_allocation_within_bounds",
        False,
        "Channels!G4 ('Display') = 19,999.99, below the minimum 20,000",
    ),
    "allocation_display_exactly_at_the_floor": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _set("Channels", "G4", 20000)),
        "book_allocation_within_bounds",
        True,
        "Channels!G4 ('Display') = 20,000",
    ),
    "allocation_email_a_cent_above_the_cap": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _edits(_set("Channels", "G5", 80000.01), _set("Channels", "G2", 31908.16))),
        "book_allocation_within_bounds",
        False,
        "Channels!G5 ('Email') = 80,000.01, above the maximum 80,000",
    ),
    "allocation_email_exactly_at_the_cap": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _edits(_set("Channels", "G5", 80000), _set("Channels", "G2", 31908.17))),
        "book_allocation_within_bounds",
        True,
        "Channels!G5 ('Email') = 80,000",
    ),
    "allocation_budget_stored_as_text": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _set("Channels", "G5", "71699.92")),
        "book_allocation_within_bounds",
        False,
        "Channels!G5 ('Email') holds '71699.92' stored as text",
    ),
    "allocation_channel_without_a_line": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _without_label),
        "book_allocation_within_bounds",
        False,
        "no line labelled /affiliates/ on sheet 'Channels'",
    ),
    "allocation_roas_proportional_without_bounds": (
        "MKT-01",
        lambda ws: _edit_book(ws, MKT_BOOK, _roas_proportional_unbounded),
        "book_allocation_within_bounds",
        False,
        "Channels!G4 ('Display') = 16,",
    ),
    "adjusting_entry_transposition_the_wrong_way": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _transposition_the_wrong_way),
        "recon_adjusted_ledger",
        False,
        "Reconciliation!B10 ('Adjusted ledger balance') = 183,693.53; expected 183,153.53 ± 0",
    ),
    "adjusting_entry_nsf_not_charged_back": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _nsf_not_charged_back),
        "recon_adjusted_ledger",
        False,
        "Reconciliation!B10 ('Adjusted ledger balance') = 184,513.53; expected 183,153.53 ± 0",
    ),
    "adjusting_entry_transposition_reversed_and_rebooked": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _transposition_reversed_and_rebooked),
        "recon_adjusted_ledger",
        True,
        "Reconciliation!B10 ('Adjusted ledger balance') = 183,153.53",
    ),
    "exclusion_out_of_range_record_kept": (
        "RES-01",
        lambda ws: _edit_book(ws, RES_BOOK, _keep_in_data("R-0173", "Central", 3.6, 77, 4, "yes")),
        "results_n",
        False,
        "Summary!B3 ('Responses analysed') = 240; expected 239 ± 0",
    ),
    "exclusion_duplicate_kept_twice": (
        "RES-01",
        lambda ws: _edit_book(ws, RES_BOOK, _keep_in_data("R-0088", "West", 6.6, 4, 7, "no")),
        "results_n",
        False,
        "Summary!B3 ('Responses analysed') = 240; expected 239 ± 0",
    ),
    "exclusion_of_a_valid_record_too": (
        "RES-01",
        lambda ws: _edit_book(ws, RES_BOOK, _also_exclude("R-0002", "workload answer looked careless: excluded")),
        "results_n",
        False,
        "Summary!B3 ('Responses analysed') = 238; expected 239 ± 0",
    ),
    # Harmless by design (protocol/interpretations.md): these pass.
    "extra_files_and_folders": ("ACC-01", _extras, None, True, ""),
    "number_formats_sheet_order_label_case": (
        "ACC-01",
        lambda ws: _edit_book(ws, ACC_BOOK, _thousands_and_order),
        None,
        True,
        "",
    ),
    "archive_entry_nothing_reads": ("ACC-01", _unread_archive_entry, None, True, ""),
    "pdf_with_a_script": ("PROC-01", _pdf_with_script, None, True, ""),
}


#: Criteria that fail with a variant's own because the changed figure feeds them.
KNOCK_ON = {
    "balance_stored_as_text": {"recon_adjusted_bank", "recon_difference_nil"},
    "one_cent_below_to_the_cent": {"recon_adjusted_bank", "recon_difference_nil"},
    "one_cent_above_to_the_cent": {"recon_adjusted_bank", "recon_difference_nil"},
    "allocation_budget_stored_as_text": {"book_allocation_ties"},
    "allocation_roas_proportional_without_bounds": {"book_display_floor"},
    "adjusting_entry_transposition_the_wrong_way": {"recon_difference_nil"},
    "adjusting_entry_nsf_not_charged_back": {"recon_difference_nil"},
    "exclusion_out_of_range_record_kept": {"results_overall_mean"},
    "exclusion_duplicate_kept_twice": {"results_west_mean"},
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    root = tmp_path_factory.mktemp("mutations")
    golds: dict[str, Path] = {}
    items, names = [], []
    for name, (sid, mutate, _, _, _) in VARIANTS.items():
        if sid not in golds:
            golds[sid] = build_gold_workspace(sid, root / sid / "gold")
        ws = defects.copy_workspace(golds[sid], root / sid / name)
        mutate(ws)
        items.append((load_scenario(sid), ws, None))
        names.append(name)
    with Recalculator(root / "recalc") as r:
        evaluations = evaluate_many(items, recalculator=r)
    return dict(zip(names, evaluations, strict=True))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_is_judged_as_designed(verdicts, name):
    sid, _, cid, passes, words = VARIANTS[name]
    ev = verdicts[name]
    failed = [(c.id, c.reason) for c in ev.failed]
    if cid is None:
        assert ev.D and not failed, failed
        return
    by = {c.id: c for c in ev.criteria}
    assert by[cid].passed is passes, by[cid].reason
    assert words in by[cid].reason, by[cid].reason
    # The mutation touches its criterion alone: everything else stays as the gold had it.
    assert [i for i, _ in failed if i != cid and i not in KNOCK_ON.get(name, ())] == [], failed


# Phrasings of HEALTH-01's set-valued decision read without a document: what each puts inside the set
# ("misses the target") and outside it. A plan or a condition states no finding.
HEALTH_PHRASINGS = {
    "Three clinics met the 20-minute waiting-time target; Hillcrest did not, with a median wait of 30 minutes.": (
        {"Hillcrest"},
        set(),
    ),
    "Riverside, Lakeview and Old Town have medians well within the target.": (
        set(),
        {"Riverside", "Lakeview", "Old Town"},
    ),
    "Hillcrest's median of 30 minutes is more than one and a half times the target.": ({"Hillcrest"}, set()),
    "Only Hillcrest missed the target.": ({"Hillcrest"}, set()),
    "All clinics met the target except Hillcrest.": ({"Hillcrest"}, set()),
    "All clinics but Hillcrest met the target.": ({"Hillcrest"}, set()),
    "Riverside met the target but Hillcrest did not.": ({"Hillcrest"}, {"Riverside"}),
    "Over October, Hillcrest exceeded the 20-minute target.": ({"Hillcrest"}, set()),
    "Hillcrest met the target.": (set(), {"Hillcrest"}),
    "Hillcrest and Lakeview missed the 20-minute target.": ({"Hillcrest", "Lakeview"}, set()),
    "Hillcrest, not Old Town, missed the target.": ({"Hillcrest"}, {"Old Town"}),
    "Hillcrest should bring its median under the 20-minute target by December.": (set(), set()),
    "The next report will show whether the Hillcrest changes have brought the median wait back under 20 minutes.": (
        set(),
        set(),
    ),
    "Hillcrest also has the highest no-show rate, with many missed appointments.": (set(), set()),
    # A label before a colon is the subject of what follows it; a sentence that merely names a clinic is not.
    "Hillcrest: median 30 minutes, above the 20-minute target.": ({"Hillcrest"}, set()),
    "Hillcrest had clock errors in its data. The other clinics met the 20-minute target.": (set(), set()),
    # A wrapped line continues its sentence; a Word table is read by its decision column; a PDF table's cells are not
    # prose.
    (
        "The median wait was 14 minutes overall. Three clinics met the\n20-minute target; Hillcrest did not, "
        "with a median wait of 30 minutes, and needs\naction."
    ): (
        {"Hillcrest"},
        set(),
    ),
    "Clinic | Median wait | Meets target\nHillcrest | 30 | No\nLakeview | 14 | Yes\nOld Town | 10 | Yes": (
        {"Hillcrest"},
        {"Lakeview", "Old Town"},
    ),
    "Clinic | Median wait | Above target?\nHillcrest | 30 | Yes\nRiverside | 11 | No": ({"Hillcrest"}, {"Riverside"}),
    "Clinic\nMedian wait (min)\nMeets target\nHillcrest\n30\nNo\nLakeview\n14\nYes": (set(), set()),
    # A table flattened into one line is read by its header's order; one that judges no clinic (the gold's kind) says
    # nothing.
    "Clinic Median wait (min) Meets target Hillcrest 30 No Lakeview 14 Yes Old Town 10 Yes": (
        {"Hillcrest"},
        {"Lakeview", "Old Town"},
    ),
    "Clinic Median wait (min) Above target? Hillcrest 30 Yes Riverside 11 No": ({"Hillcrest"}, {"Riverside"}),
    "Clinic Median wait Status Hillcrest 30 Above target Lakeview 14 Within target": ({"Hillcrest"}, {"Lakeview"}),
    "Clinic No-show rate Median wait (min) Hillcrest 14.2% 30 Lakeview 9.1% 14 Old Town 8.0% 10 Riverside 7.5% 11": (
        set(),
        set(),
    ),
}


#: BANK-01's ratio table flattened into one line of text, as some PDF and Word writers produce.
BANK_FLAT = (
    "Ratio Calculation Result Policy Complies DSCR 960,000 / 833,197 1.15x min 1.25x No "
    "Debt / EBITDA 3,250,000 / 960,000 3.39x max 3.50x Yes"
)

# BANK-01: which ratios the memo says fail the credit policy (inside) and comply (outside). "Below the minimum"
# fails and "below the maximum" complies; a finding about the proposed loan is conditional ("would be"),
# a counter-offer is not a finding ("a smaller loan would meet"); a label carries its subject to its finding.
BANK_PHRASINGS = {
    "The DSCR is therefore 1.15x, below the policy minimum of 1.25x (section 4.1).": ({"DSCR"}, set()),
    "Leverage of 3.39x is within the 3.50x maximum (section 4.3).": (set(), {"Debt / EBITDA"}),
    "The DSCR would be 1.15x, below the 1.25x minimum required by policy.": ({"DSCR"}, set()),
    "The request does not comply with the DSCR requirement.": ({"DSCR"}, set()),
    "The DSCR fails to meet the 1.25x minimum.": ({"DSCR"}, set()),
    "The request fails the debt service coverage test but meets the leverage limit.": ({"DSCR"}, {"Debt / EBITDA"}),
    "Debt / EBITDA of 3.39x complies with the policy maximum of 3.50x; the DSCR of 1.15x does not.": (
        {"DSCR"},
        {"Debt / EBITDA"},
    ),
    "Debt / EBITDA of 3.39x exceeds the 3.50x maximum.": ({"Debt / EBITDA"}, set()),
    "The DSCR of 1.15x is above the 1.25x minimum.": (set(), {"DSCR"}),
    "Leverage at 3.39x is below the 3.50x maximum, so it passes.": (set(), {"Debt / EBITDA"}),
    "DSCR: 1.15x against a minimum of 1.25x - does not comply.": ({"DSCR"}, set()),
    "Debt / EBITDA: 3.39x against a maximum of 3.50x - complies.": (set(), {"Debt / EBITDA"}),
    "A smaller loan of 2.04 million would meet the DSCR minimum of 1.25x.": (set(), set()),
    "If the loan were reduced to 2,042,915, the DSCR would meet the 1.25x minimum.": (set(), set()),
    "Both ratios comply with policy.": (set(), set()),
    (
        "Ratio | Calculation | Result | Policy | Complies\nDSCR | 960,000 / 833,197 | 1.15x | min 1.25x | "
        "No\nDebt / EBITDA | 3,250,000 / 960,000 | 3.39x | max 3.50x | Yes"
    ): (
        {"DSCR"},
        {"Debt / EBITDA"},
    ),
    "Ratio | Result | Breach?\nDSCR | 1.15x | Yes\nLeverage | 3.39x | No": ({"DSCR"}, {"Debt / EBITDA"}),
    # No decision header: one short verdict cell per row.
    (
        "Ratio | Actual | Limit | Status\nDSCR | 1.15x | min 1.25x | FAIL\nDebt / EBITDA | 3.39x | max 3.50x "
        "| Within limit"
    ): (
        {"DSCR"},
        {"Debt / EBITDA"},
    ),
    # A verb in the infinitive is a requirement, not a finding.
    "To comply with 4.1 the loan would need to be reduced to about 2,042,915, which would bring the DSCR to 1.25x.": (
        set(),
        set(),
    ),
    "The DSCR needs to reach 1.25x to meet the minimum.": (set(), set()),
    # A table flattened into one line: the last column's Yes/No belongs to the ratio that starts its row, not to the
    # header's "Complies"; the prose before and after it is read as prose (a Word paragraph that follows is joined to
    # the line).
    BANK_FLAT: ({"DSCR"}, {"Debt / EBITDA"}),
    BANK_FLAT.replace("1.25x No", "1.25x Yes"): (set(), {"DSCR", "Debt / EBITDA"}),
    BANK_FLAT + " The DSCR is therefore 1.15x, below the policy minimum of 1.25x (section 4.1).": (
        {"DSCR"},
        {"Debt / EBITDA"},
    ),
    "Margins narrowed even after the add-back. " + BANK_FLAT: ({"DSCR"}, {"Debt / EBITDA"}),
    "Leverage of 3.39x is within the 3.50x maximum. Ratio Result Complies DSCR 1.15x No": ({"DSCR"}, {"Debt / EBITDA"}),
    "RATIO RESULT POLICY COMPLIES DSCR 1.15X MIN 1.25X NO DEBT / EBITDA 3.39X MAX 3.50X YES": (
        {"DSCR"},
        {"Debt / EBITDA"},
    ),
    "Ratio Complies Result Policy DSCR No 1.15x min 1.25x Debt / EBITDA Yes 3.39x max 3.50x": (
        {"DSCR"},
        {"Debt / EBITDA"},
    ),
    "Ratio Result Breach? DSCR 1.15x Yes Leverage 3.39x No": ({"DSCR"}, {"Debt / EBITDA"}),
    "Ratio Actual Policy limit Status DSCR 1.15x min 1.25x FAIL Debt / EBITDA 3.39x max 3.50x Within limit": (
        {"DSCR"},
        {"Debt / EBITDA"},
    ),
    # A flattened line that cannot be read unambiguously states nothing either way: the verdict column in the middle, a
    # Yes/No after another ratio's name, two in a row, a lower-case yes or no; the prose after it still counts.
    "Ratio Result Complies Policy DSCR 1.15x No min 1.25x Debt / EBITDA 3.39x Yes max 3.50x": (set(), set()),
    "Ratio Result Complies DSCR 1.15x Debt / EBITDA 3.39x Yes": (set(), set()),
    "Ratio Result Complies DSCR 1.15x No No Debt / EBITDA 3.39x Yes": (set(), set()),
    "Ratio Result Complies DSCR 1.15x no Debt / EBITDA 3.39x yes": (set(), set()),
    (
        "Ratio Result Complies Policy DSCR 1.15x No min 1.25x Debt / EBITDA 3.39x Yes max 3.50x. The DSCR of "
        "1.15x is below the 1.25x minimum."
    ): (
        {"DSCR"},
        set(),
    ),
}
SET_PHRASINGS = [("HEALTH-01", "report_names_clinics_over_target", t, want) for t, want in HEALTH_PHRASINGS.items()] + [
    ("BANK-01", "memo_states_ratio_compliance", t, want) for t, want in BANK_PHRASINGS.items()
]


@pytest.mark.parametrize(
    ("sid", "cid", "text", "want"), SET_PHRASINGS, ids=[f"{s}-{i}" for i, (s, *_rest) in enumerate(SET_PHRASINGS)]
)
def test_set_decision_phrasings(sid, cid, text, want):
    from pilot.oracles.decisions import read_set

    c = load_scenario(sid).oracle.by_id(cid)
    read = read_set(
        text,
        dict(c.get("options")),
        topic=c.get("topic"),
        property_verbs=c.get("property_verbs"),
        complement_verbs=c.get("complement_verbs"),
        plans=c.get("plans"),
    )
    assert (set(read.inside), set(read.outside)) == want


def _flattened_variants(sid: str, pilot: set[str]) -> dict[str, set[str]]:
    """Scenario ``sid``'s flattened-table variants: name -> the criteria each must fail (empty: it must pass).

    The design's ten are declared in this file; an added scenario's in its own tests/test_mutations_<id>.py,
    whose ``FLATTENED_TABLE_VARIANTS`` names variants of its ``VARIANTS`` ((mutation, criteria it must fail)).
    """
    import importlib

    if sid in pilot:
        names = FLATTENED_TABLE_VARIANTS.get(sid, ())
        assert all(VARIANTS[n][0] == sid for n in names), (sid, names)
        return {n: (set() if VARIANTS[n][3] else {VARIANTS[n][2]}) for n in names}
    name = "test_mutations_" + sid.lower().replace("-", "_")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        pytest.fail(
            f"tests/{name}.py is missing: every scenario added to the design's ten has its own mutation tests "
            "(pilot scenarios new writes the file; docs/adding-a-scenario.md)"
        )
    declared = getattr(module, "FLATTENED_TABLE_VARIANTS", {})
    assert set(declared) <= {sid}, f"{module.__file__} declares flattened variants of {sorted(set(declared) - {sid})}"
    return {n: set(module.VARIANTS[n][1]) for n in declared.get(sid, ())}


def test_every_gold_decision_table_has_its_flattened_variants(tmp_path):
    """Each gold document of every bundle (the design's ten and every one added) that states a decision in a table is
    flattened; every added bundle has its own tests/test_mutations_<id>.py (``pilot scenarios new`` writes it).

    A decision table is one inside a section where a decision criterion reads. For every such scenario a
    flattened table must pass and a flattened table with another verdict must fail that decision criterion
    (see :func:`_flattened_variants` for where each scenario's variants live).
    """
    from pilot import protocol
    from pilot.oracles.criteria import section_text
    from pilot.oracles.readers import document_lines
    from pilot.protocol.scenario import list_scenarios

    pilot = set(protocol.study().scenario_set("pilot"))
    assert set(FLATTENED_TABLE_VARIANTS) <= pilot, "an added scenario's flattened variants live in its own file"
    tables: dict[str, set[str]] = {}  # scenario -> the decision criteria that read a table
    for sid in list_scenarios():
        sc = load_scenario(sid)
        # Documents only: a slide deck's decision (read by pilot.oracle_formats, not this reader) has no flattened
        # variants.
        places = [
            (c.id, c.file, c.get("section"))
            for c in sc.oracle.criteria
            if c.kind == "decision" and c.get("section") and sc.deliverable(c.file).kind in ("docx", "pdf")
        ]
        if not places:
            continue
        gold = build_gold_workspace(sid, tmp_path / sid)
        for cid, name, wanted in places:
            lines, reason = document_lines(gold / "outputs" / name, layout=True)
            assert reason is None, reason
            for section in [wanted] if isinstance(wanted, str) else wanted:
                text = section_text(lines, section, sc.deliverable(name).required_sections) or ""
                if any(" | " in line for line in text.splitlines()):
                    tables.setdefault(sid, set()).add(cid)
    covered = {sid: v for sid in list_scenarios() if (v := _flattened_variants(sid, pilot))}
    assert set(tables) == set(covered)
    for sid, variants in covered.items():
        failing = [want for want in variants.values() if want]
        assert len(failing) < len(variants), f"{sid}: no flattened variant that must pass"
        assert failing and all(want & tables[sid] for want in failing), (sid, variants, tables[sid])


def test_a_pdf_table_is_read_by_its_columns_and_prose_stays_prose(tmp_path):
    """A PDF's tables reach a set-valued decision as rows (left-aligned, centred, an empty cell); justified prose does
    not."""
    from reportlab.lib.enums import TA_JUSTIFY
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table

    from pilot.oracles.decisions import read_set
    from pilot.oracles.readers import pdf_lines

    prose = " ".join(
        ["The borrower's earnings fell in FY2025 while the balance sheet stayed conservative and liquid."] * 6
    )
    rows = [
        ["Ratio", "Result", "Policy", "Complies"],
        ["DSCR", "1.15x", "", "No"],
        ["Debt / EBITDA", "3.39x", "max 3.50x", "Yes"],
    ]
    path = tmp_path / "memo.pdf"
    SimpleDocTemplate(str(path)).build(
        [
            Paragraph(prose, ParagraphStyle("j", parent=getSampleStyleSheet()["Normal"], alignment=TA_JUSTIFY)),
            Table(rows),
            Table(rows, style=[("ALIGN", (0, 0), (-1, -1), "CENTER")]),
        ]
    )
    lines, reason = pdf_lines(path, layout=True)
    assert reason is None
    table = [ln for ln in lines if " | " in ln]
    want = ["Ratio | Result | Policy | Complies", "DSCR | 1.15x |  | No", "Debt / EBITDA | 3.39x | max 3.50x | Yes"]
    assert table == want + want, lines
    assert " ".join(ln for ln in lines if ln and " | " not in ln) == prose
    c = load_scenario("BANK-01").oracle.by_id("memo_states_ratio_compliance")
    read = read_set(
        "\n".join(lines),
        dict(c.get("options")),
        topic=c.get("topic"),
        property_verbs=c.get("property_verbs"),
        complement_verbs=c.get("complement_verbs"),
        plans=c.get("plans"),
    )
    assert (set(read.inside), set(read.outside)) == ({"DSCR"}, {"Debt / EBITDA"})
    # Without layout the same PDF gives one cell per line, which no table reading can use.
    plain, _ = pdf_lines(path)
    assert not any(" | " in ln for ln in plain)


def _with_bounds(minimum, maximum):
    """MKT-01 with its allocation bounds replaced (None: that side unbounded)."""
    import dataclasses

    sc = load_scenario("MKT-01")
    params = {
        k: v
        for k, v in sc.oracle.by_id("book_allocation_within_bounds").params.items()
        if k not in ("minimum", "maximum")
    }
    params.update({k: v for k, v in (("minimum", minimum), ("maximum", maximum)) if v is not None})
    crits = tuple(
        dataclasses.replace(c, params=params) if c.id == "book_allocation_within_bounds" else c
        for c in sc.oracle.criteria
    )
    return dataclasses.replace(sc, oracle=dataclasses.replace(sc.oracle, criteria=crits))


# One-sided bounds on the gold allocation (Search 40,208.25, Paid Social 38,478.48, Display 20,000, Email 71,699.92,
# Affiliates 29,613.35), and the defect that breaks each kind of bound while the total still ties.
ONE_SIDED = {
    "minimum_only": (
        (30000, None),
        False,
        [
            "Channels!G4 ('Display') = 20,000, below the minimum 30,000",
            "Channels!G6 ('Affiliates') = 29,613.35, below the minimum 30,000",
            "at least 30,000",
        ],
    ),
    "maximum_only": (
        (None, 40000),
        False,
        [
            "Channels!G2 ('Search') = 40,208.25, above the maximum 40,000",
            "Channels!G5 ('Email') = 71,699.92, above the maximum 40,000",
            "at most 40,000",
        ],
    ),
    "loose_minimum_only": ((10000, None), True, ["each at least 10,000"]),
    "loose_minimum_only_with_defect": ((10000, None), False, ["below the minimum 10,000"]),
    "loose_maximum_only_with_defect": ((None, 90000), False, ["above the maximum 90,000"]),
}


def test_one_sided_bounds_and_their_defect(tmp_path):
    gold = build_gold_workspace("MKT-01", tmp_path / "gold")
    items, described = [], {}
    with Recalculator(tmp_path / "recalc") as r:
        for name, ((lo, hi), _, _) in ONE_SIDED.items():
            sc = _with_bounds(lo, hi)
            ws = defects.copy_workspace(gold, tmp_path / name)
            if name.endswith("_with_defect"):
                described[name] = defects.defect_for_criterion(sc, "book_allocation_within_bounds", ws, recalculator=r)
            items.append((sc, ws, None))
        evaluations = evaluate_many(items, recalculator=r)
    for (name, (_, passes, words)), ev in zip(ONE_SIDED.items(), evaluations, strict=True):
        by = {c.id: c for c in ev.criteria}
        reason = by["book_allocation_within_bounds"].reason
        assert by["book_allocation_within_bounds"].passed is passes, (name, reason)
        assert all(w in reason for w in words), (name, reason)
        assert [c.id for c in ev.failed] == ([] if passes else ["book_allocation_within_bounds"]), (
            name,
            described.get(name),
            [(c.id, c.reason) for c in ev.failed],
        )
