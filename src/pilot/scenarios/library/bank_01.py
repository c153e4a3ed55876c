"""BANK-01, banking: credit analysis of a term-loan request.

Planted facts: FY2025 operating expenses include a one-off legal settlement
of 150,000 disclosed in the notes, which the credit policy lets the analyst
add back to EBITDA. Even after the add-back, the debt service coverage with
the proposed 2.4 million loan (7 years, 7.25 per cent, level monthly
payments) falls below the policy minimum of 1.25x, while leverage is within
policy. The request cannot be approved as structured.
"""

from __future__ import annotations

from pathlib import Path

import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_pdf, write_text

FIN_XLSX = "borrower_financials_FY2023-2025.xlsx"
APPLICATION_TXT = "loan_application.txt"
POLICY_PDF = "credit_policy_extract.pdf"
ANALYSIS_XLSX = "credit_analysis.xlsx"
MEMO_PDF = "credit_memo.pdf"

YEARS = [2023, 2024, 2025]
INCOME = {
    "Revenue": [11_840_000, 12_610_000, 13_190_000],
    "Cost of goods sold": [8_170_000, 8_760_000, 9_300_000],
    "Operating expenses (excluding depreciation)": [2_800_000, 2_900_000, 3_080_000],
    "Depreciation": [410_000, 430_000, 455_000],
    "Interest expense": [98_000, 91_000, 84_000],
    "Income tax": [92_000, 111_000, 64_000],
}
BALANCE_2025 = {
    "Cash": 640_000,
    "Accounts receivable": 1_720_000,
    "Inventory": 1_380_000,
    "Property, plant and equipment (net)": 4_950_000,
    "Accounts payable": 1_140_000,
    "Existing term debt": 850_000,
    "Shareholders' equity": 6_700_000,
}
ONE_OFF = 150_000
EXISTING_DEBT_SERVICE = 395_000
LOAN, YEARS_TERM, RATE = 2_400_000, 7, 0.0725
MIN_DSCR, MAX_LEVERAGE = 1.25, 3.50


def generate(inputs_dir: Path) -> list[Path]:
    wb = openpyxl.Workbook()
    inc = wb.active
    inc.title = "Income statement"
    inc.append(["Marlow & Finch Packaging Ltd. - Income statement (CAD), fiscal years ending 31 December"])
    inc["A1"].font = Font(bold=True)
    inc.append(["Line item", *[f"FY{y}" for y in YEARS]])
    style_header(inc, 2)
    for k, v in INCOME.items():
        inc.append([k, *v])
    autosize(inc, {"A": 46, "B": 14, "C": 14, "D": 14})
    bal = wb.create_sheet("Balance sheet")
    bal.append(["Balance sheet at 31 December 2025 (CAD)", "FY2025"])
    style_header(bal)
    for k, v in BALANCE_2025.items():
        bal.append([k, v])
    autosize(bal, {"A": 40, "B": 14})
    notes = wb.create_sheet("Notes")
    notes.append(["Notes to the FY2025 statements"])
    notes.append(
        [
            "1. Operating expenses for FY2025 include a one-off settlement of a supplier dispute of "
            "150,000, paid in September 2025. It is not expected to recur."
        ]
    )
    notes.append(
        [
            "2. Existing term debt: Northshore Credit Union loan, scheduled principal and interest of "
            "395,000 per year until 2029."
        ]
    )
    notes.append(["3. No dividends were paid in FY2023-FY2025."])
    autosize(notes, {"A": 120})
    paths = [save_workbook(wb, inputs_dir / FIN_XLSX)]
    app = f"""Commercial loan application - summary (received 24 November 2026)

Borrower: Marlow & Finch Packaging Ltd., Hamilton, Ontario. Flexible packaging manufacturer, founded 2004, 86 employees.
Relationship: operating account and 500,000 revolving line with us since 2019; line unused at the last two year-ends.

Request: new term loan of {LOAN:,.0f} CAD to finance a second extrusion line (total cost 3,050,000; the balance of \
650,000 from cash on hand).
Proposed terms: {YEARS_TERM} years, fixed rate {RATE * 100:.2f}% per year, level monthly payments of principal and \
interest, first-ranking charge on the new line.
Management projection: the new line adds 1.9 million of revenue from FY2027 at current margins.

Relationship manager comment: "Strong, loyal client, growing every year. I would like to get this to committee in \
December."
"""
    paths.append(write_text(inputs_dir / APPLICATION_TXT, app))
    policy = [
        Heading("Commercial Credit Policy - extract (section 4, term lending)"),
        Para(
            "4.1 Debt service coverage. The debt service coverage ratio (DSCR) is EBITDA for the most "
            "recent fiscal year divided by total annual debt service, meaning scheduled principal and "
            "interest on all existing term debt plus the first full year of payments on the proposed "
            "facility. The minimum DSCR for a term loan is 1.25x."
        ),
        Para(
            "4.2 Adjustments. EBITDA may be adjusted for non-recurring items that are disclosed in the "
            "notes to the financial statements. Projected earnings of the financed asset may not be "
            "included in the DSCR calculation."
        ),
        Para(
            "4.3 Leverage. Total funded debt, including the proposed facility, may not exceed 3.50 times "
            "EBITDA for the most recent fiscal year."
        ),
        Para(
            "4.4 Exceptions. A request that fails 4.1 or 4.3 may only be approved as a documented policy "
            "exception by the Senior Credit Committee, with the mitigating factors stated. An analyst may "
            "recommend a restructured facility that complies with policy."
        ),
        Para(
            "4.5 The credit memo must state each ratio with its calculation, the policy limit, and "
            "whether the request complies."
        ),
    ]
    paths.append(write_pdf(policy, inputs_dir / POLICY_PDF, title="Credit policy extract"))
    return paths


def analyse(inputs_dir: Path) -> dict:
    wb = openpyxl.load_workbook(inputs_dir / FIN_XLSX)
    inc = {r[0]: r[1:] for r in wb["Income statement"].iter_rows(min_row=3, values_only=True) if r[0]}
    bal = {r[0]: r[1] for r in wb["Balance sheet"].iter_rows(min_row=2, values_only=True) if r[0]}
    ebitda = [
        inc["Revenue"][i] - inc["Cost of goods sold"][i] - inc["Operating expenses (excluding depreciation)"][i]
        for i in range(3)
    ]
    adj = ebitda[2] + ONE_OFF
    r = RATE / 12
    n = YEARS_TERM * 12
    monthly = LOAN * r / (1 - (1 + r) ** -n)
    new_ds = 12 * monthly
    total_ds = EXISTING_DEBT_SERVICE + new_ds
    dscr = adj / total_ds
    leverage = (bal["Existing term debt"] + LOAN) / adj
    # Largest loan on the same terms that meets the minimum DSCR.
    max_ds_new = adj / MIN_DSCR - EXISTING_DEBT_SERVICE
    max_loan = max_ds_new / 12 * (1 - (1 + r) ** -n) / r
    return {
        "ebitda": ebitda,
        "adj": adj,
        "monthly": monthly,
        "new_ds": new_ds,
        "total_ds": total_ds,
        "dscr": dscr,
        "leverage": leverage,
        "max_loan": max_loan,
    }


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    a = analyse(inputs_dir)
    wb = openpyxl.Workbook()
    fin = wb.active
    fin.title = "Financials"
    fin.append(["Line item", *[f"FY{y}" for y in YEARS]])
    style_header(fin)
    for k, v in INCOME.items():
        fin.append([k, *v])
    fin.append(["EBITDA", "=B2-B3-B4", "=C2-C3-C4", "=D2-D3-D4"])  # row 8
    fin.append(["Add back: one-off settlement (note 1)", 0, 0, ONE_OFF])  # 9
    fin.append(["Adjusted EBITDA", "=B8+B9", "=C8+C9", "=D8+D9"])  # 10
    autosize(fin, {"A": 46, "B": 14, "C": 14, "D": 14})
    rat = wb.create_sheet("Ratios")
    rows = [
        ("Loan amount", LOAN),  # 2
        ("Annual interest rate", RATE),  # 3
        ("Term (months)", YEARS_TERM * 12),  # 4
        ("Monthly payment (proposed loan)", "=PMT(B3/12,B4,-B2)"),  # 5
        ("Annual debt service (proposed loan)", "=12*B5"),  # 6
        ("Annual debt service (existing term debt, note 2)", EXISTING_DEBT_SERVICE),  # 7
        ("Total annual debt service", "=B6+B7"),  # 8
        ("Adjusted EBITDA FY2025", "=Financials!D10"),  # 9
        ("DSCR (Adjusted EBITDA / total debt service)", "=ROUND(B9/B8,2)"),  # 10
        ("Policy minimum DSCR", MIN_DSCR),  # 11
        ("Existing term debt", BALANCE_2025["Existing term debt"]),  # 12
        ("Total funded debt / Adjusted EBITDA", "=ROUND((B12+B2)/B9,2)"),  # 13
        ("Policy maximum debt / EBITDA", MAX_LEVERAGE),  # 14
        ("Maximum loan meeting 1.25x on the same terms", "=PV(B3/12,B4,-(B9/B11-B7)/12)"),  # 15
    ]
    rat.append(["Measure", "Value"])
    style_header(rat)
    for label, v in rows:
        rat.append([label, v])
    for r in (2, 5, 6, 7, 8, 9, 12, 15):
        rat.cell(row=r, column=2).number_format = "#,##0.00"
    autosize(rat, {"A": 52, "B": 16})
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = save_workbook(wb, outputs_dir / ANALYSIS_XLSX)

    blocks = [
        Heading("Request"),
        Para(
            f"Marlow & Finch Packaging Ltd. requests a term loan of {LOAN:,.0f} CAD over {YEARS_TERM} "
            f"years at a fixed {RATE * 100:.2f}% with level monthly payments, to finance a second "
            "extrusion line costing 3,050,000, the balance to come from cash. The monthly payment would "
            f"be {a['monthly']:,.2f}, or {a['new_ds']:,.0f} a year."
        ),
        Heading("Borrower"),
        Para(
            "The borrower is an established flexible packaging manufacturer in Hamilton with 86 employees "
            "and a clean relationship with the bank since 2019; its revolving line has been unused at the "
            "last two year-ends. Revenue grew from 11.84 million in FY2023 to 13.19 million in FY2025."
        ),
        Para(
            "The balance sheet at the end of FY2025 is conservative: shareholders' equity of 6.70 million "
            "against total assets of 8.69 million, cash of 0.64 million, and existing term debt of 0.85 "
            "million with the Northshore Credit Union, amortising until 2029. Working capital is positive "
            "and receivables and inventory are in line with the activity level. The weakness is earnings, "
            "not the balance sheet."
        ),
        Heading("Financial analysis"),
        Para(
            f"EBITDA was {a['ebitda'][0]:,.0f}, {a['ebitda'][1]:,.0f} and {a['ebitda'][2]:,.0f} in "
            "FY2023-FY2025. FY2025 operating expenses include a one-off supplier settlement of "
            f"{ONE_OFF:,.0f} disclosed in note 1; policy 4.2 allows it to be added back, giving adjusted "
            f"EBITDA of {a['adj']:,.0f}. Margins narrowed in FY2025 because operating costs grew faster "
            "than revenue even after the add-back."
        ),
        Table(
            ["Ratio", "Calculation", "Result", "Policy", "Complies"],
            [
                ["DSCR", f"{a['adj']:,.0f} / {a['total_ds']:,.0f}", f"{a['dscr']:.2f}x", "min 1.25x", "No"],
                [
                    "Debt / EBITDA",
                    f"{BALANCE_2025['Existing term debt'] + LOAN:,.0f} / {a['adj']:,.0f}",
                    f"{a['leverage']:.2f}x",
                    "max 3.50x",
                    "Yes",
                ],
            ],
        ),
        Heading("Policy compliance"),
        Para(
            f"Total annual debt service would be {a['total_ds']:,.0f}: {EXISTING_DEBT_SERVICE:,.0f} on the "
            f"existing Northshore loan and {a['new_ds']:,.0f} on the proposed facility. The DSCR is "
            f"therefore {a['dscr']:.2f}x, below the policy minimum of 1.25x (section 4.1). Leverage of "
            f"{a['leverage']:.2f}x is within the 3.50x maximum (section 4.3). Management's projection of "
            "additional revenue from the new line cannot be counted under section 4.2."
        ),
        Heading("Recommendation"),
        Para(
            "I do not recommend approval of the request as structured, because it fails the debt service "
            "coverage test. On the same rate and term, the largest loan that meets 1.25x is about "
            f"{a['max_loan']:,.0f}. I recommend offering a facility of that size, or the full amount over "
            "a longer amortisation if the asset life supports it, with the borrower funding the "
            "difference from cash or equity. A policy exception for the full request should only go to "
            "the Senior Credit Committee with documented mitigants such as a guarantee or additional "
            "security."
        ),
    ]
    memo = write_pdf(blocks, outputs_dir / MEMO_PDF, title="Credit memo - Marlow & Finch Packaging Ltd.")
    record = write_completion_record(
        outputs_dir,
        [ANALYSIS_XLSX, MEMO_PDF],
        questions=["Would the borrower accept a smaller facility or a longer amortisation?"],
    )
    return [book, memo, record]
