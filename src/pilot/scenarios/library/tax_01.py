"""TAX-01, indirect tax: the quarterly VAT return of Pennant Heating Services Ltd, July to September 2026.

The tax accountant prepares the return for the quarter ended 30 September 2026
(boxes 1 to 7) from the sales ledger export (CSV), the purchase ledger workbook
(sheets Purchase ledger and Expense claims) and a supplier's revised invoice
(PDF), applying the company's VAT guidance note, and writes a memo naming
every adjustment. The guidance note holds the rules; the brief states none.

Planted facts:

- Cut-off: the exports ran to 5 October. Sales invoices SI-3132 (01/10/2026,
  day-first; VAT 1,192.00) and SI-3133 (2026-10-02; VAT 37.13) and purchase
  invoice PI-5722 (2 October; VAT 862.00) belong to the next return; SI-3131,
  dated 30/09/2026, belongs to this one.
- Credit notes: the sales export and the purchase ledger show credit notes as
  positive amounts with the document type "Credit note": CN-0207, CN-0208 and
  CN-0209 (VAT 3,103.09, net 15,515.42) and the supplier's SC-4410, ledger
  line PI-5721 (VAT 94.60, net 472.99). The guidance note makes them negative.
- Foreign currency: SI-3116 to Lindqvist Fastigheter AB (UK office) is in euro
  (net 14,600.00, VAT 2,920.00); at the guidance note's August rate 0.8547 it
  is net 12,478.62, VAT 2,495.72.
- Duplicate: SI-3118 is exported twice (same number, same figures; VAT 16.73).
- Superseded: the ledger carries Northgate Controls' invoice NC-88213 (line
  PI-5711) at net 11,640.00, VAT 2,328.00; the revised invoice NC-88213-R1
  (PDF) replaces it at net 9,840.00, VAT 1,968.00.
- Blocked input VAT: expense claims EC-0412 and EC-0419 are client
  entertainment (category "Entertainment"): VAT 97.20 + 230.00 = 327.20 is not
  recoverable, their net stays in box 7; the staff summer party EC-0415
  (VAT 248.00), filed under the same category, is recoverable.
- The return: box 1 = 37,480.48, box 4 = 15,662.91, box 5 = 21,817.57,
  box 6 = 209,119.30, box 7 = 92,073.17.
- The decision: the set of transactions left out of the return or whose VAT
  is restricted is exactly SI-3132, SI-3133, PI-5722, EC-0412 and EC-0419;
  the look-alikes SI-3131, EC-0415 and PI-5721 are not in it.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import (
    autosize,
    fmt_money,
    iso_or_day_first,
    read_csv_dicts,
    rng,
    style_header,
    write_completion_record,
)
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_pdf, write_text

# The generator's one random source: it draws the routine ledger lines (dates, customers, suppliers, amounts).
SEED = 271930

SALES_CSV = "sales_ledger_export.csv"
PURCHASES_XLSX = "purchase_ledger_Q3.xlsx"
REVISED_PDF = "northgate_invoice_NC-88213-R1.pdf"
GUIDANCE_TXT = "vat_guidance_note.txt"
RETURN_XLSX = "vat_return_Q3.xlsx"
MEMO_DOCX = "vat_memo.docx"

PERIOD_START = dt.date(2026, 7, 1)
PERIOD_END = dt.date(2026, 9, 30)
CENT = Decimal("0.01")
RATES = {"S": Decimal("0.20"), "R": Decimal("0.05"), "Z": Decimal("0"), "E": Decimal("0")}
# HMRC period rates (sterling per euro) the guidance note states, by month of the invoice date.
EUR_RATES = {7: Decimal("0.8512"), 8: Decimal("0.8547"), 9: Decimal("0.8561")}

FX_INVOICE = "SI-3116"
FX_NET_EUR = Decimal("14600.00")
DUPLICATE = "SI-3118"
LATE_SALES = ("SI-3132", "SI-3133")
LAST_DAY_SALE = "SI-3131"
LATE_PURCHASE = "PI-5722"
SUPERSEDED = "NC-88213"
LEDGER_NC = (Decimal("11640.00"), Decimal("2328.00"))
REVISED_NC = (Decimal("9840.00"), Decimal("1968.00"))
STAFF_PARTY = "EC-0415"

BUSINESS_CUSTOMERS = [
    "Harlow Community Trust",
    "Castleford Leisure Centre",
    "Beacon Hotels Ltd",
    "Wrexley Primary Academy",
    "Millbrook Care Homes",
    "Okafor Property Management",
    "St Aidan's Church Hall",
    "Tamworth Foods Ltd",
]
DOMESTIC_CUSTOMERS = ["Mr and Mrs Ellery", "J. Patel", "S. Thornbury", "R. and K. Lowe", "Mrs D. Haines"]
# supplier, description, VAT code, the largest net amount (pence) an invoice of theirs draws
SUPPLIERS = [
    ("Midland Boiler Distributors", "Boilers and heat exchangers for resale", "S", 1400000),
    ("Kerrow Fuels Ltd", "Heating oil, bulk purchase for resale", "S", 1400000),
    ("Trent Pipe & Fittings", "Pipework and fittings", "S", 260000),
    ("Fleetline Vehicle Leasing", "Van lease, service vehicles", "S", 260000),
    ("Severn Office Supplies", "Stationery and office consumables", "S", 260000),
    ("Albion Insurance Brokers", "Employer's liability insurance", "E", 1400000),
    ("Hollins Training Ltd", "Gas Safe refresher course", "S", 260000),
]


def _q(x: Decimal) -> Decimal:
    return x.quantize(CENT, rounding=ROUND_HALF_UP)


def _rand_date(g, month: int, lo: int = 1, hi: int = 28) -> dt.date:
    return dt.date(2026, month, int(g.integers(lo, hi + 1)))


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    g = rng(SEED)
    inputs_dir = Path(inputs_dir)
    return [
        _write_sales(inputs_dir, g),
        _write_purchases(inputs_dir, g),
        _write_revised(inputs_dir),
        _write_guidance(inputs_dir),
    ]


def _write_sales(inputs_dir: Path, g) -> Path:
    # (date, customer, description, code, net, currency), in invoice-number order from SI-3101.
    lines: list[tuple[dt.date, str, str, str, Decimal, str]] = []
    for month in (7, 8, 9):
        days = sorted(int(d) for d in g.choice(range(1, 29), size=8, replace=False))
        for k, day in enumerate(days):
            d = dt.date(2026, month, day)
            if k % 4 == 1:
                lines.append(
                    (
                        d,
                        DOMESTIC_CUSTOMERS[int(g.integers(len(DOMESTIC_CUSTOMERS)))],
                        "Heating oil delivery (domestic)",
                        "R",
                        Decimal(int(g.integers(28000, 96000))) / 100,
                        "GBP",
                    )
                )
            else:
                kind = [
                    "Boiler replacement",
                    "Annual service contract",
                    "Heating system repair",
                    "Commissioning and controls upgrade",
                ][int(g.integers(4))]
                lines.append(
                    (
                        d,
                        BUSINESS_CUSTOMERS[int(g.integers(len(BUSINESS_CUSTOMERS)))],
                        kind,
                        "S",
                        Decimal(int(g.integers(45000, 1860000))) / 100,
                        "GBP",
                    )
                )
        lines.append(
            (
                dt.date(2026, month, 1),
                "Corvan Logistics Ltd",
                "Depot unit 4 rent, sublet (no option to tax)",
                "E",
                Decimal("2750.00"),
                "GBP",
            )
        )
    lines.append(
        (
            dt.date(2026, 7, 22),
            "Nordvarme AS (Bergen, Norway)",
            "Burner spare parts, exported",
            "Z",
            Decimal("6385.00"),
            "GBP",
        )
    )
    lines.append(
        (
            dt.date(2026, 9, 9),
            "Nordvarme AS (Bergen, Norway)",
            "Burner spare parts, exported",
            "Z",
            Decimal("4120.50"),
            "GBP",
        )
    )
    lines.append(
        (
            dt.date(2026, 8, 14),
            "Lindqvist Fastigheter AB (UK office)",
            "Heating plant overhaul, Reading office",
            "S",
            FX_NET_EUR,
            "EUR",
        )
    )
    lines.sort(key=lambda r: (r[0], r[1]))
    lines.append((PERIOD_END, "Beacon Hotels Ltd", "Boiler replacement", "S", Decimal("8420.00"), "GBP"))
    lines.append(
        (dt.date(2026, 10, 1), "Castleford Leisure Centre", "Annual service contract", "S", Decimal("5960.00"), "GBP")
    )
    lines.append((dt.date(2026, 10, 2), "J. Patel", "Heating oil delivery (domestic)", "R", Decimal("742.60"), "GBP"))

    rows = []
    for n, (d, cust, desc, code, net, cur) in enumerate(lines, start=3101):
        ref = f"SI-{n}"
        vat = _q(net * RATES[code])
        # The branch's entries carry day-first dates; the head office's are ISO.
        day_first = n % 3 == 0 or ref == LATE_SALES[0] or ref == LAST_DAY_SALE
        when = d.strftime("%d/%m/%Y") if day_first else d.isoformat()
        rows.append([ref, "Invoice", when, cust, desc, code, cur, f"{net:.2f}", f"{vat:.2f}", ""])
    assert any(r[0] == FX_INVOICE and r[6] == "EUR" for r in rows), "the EUR invoice moved"
    assert [r[0] for r in rows[-3:]] == [LAST_DAY_SALE, *LATE_SALES], "the cut-off invoices moved"
    by_ref = {r[0]: r for r in rows}
    # Credit notes: positive in the export, the type column says what they are.
    credits = [
        ("CN-0207", dt.date(2026, 7, 29), "SI-3104", Decimal("0.25")),
        ("CN-0208", dt.date(2026, 8, 25), "SI-3110", Decimal("1")),
        ("CN-0209", dt.date(2026, 9, 18), "SI-3120", Decimal("0.5")),
    ]
    for cn, d, orig, share in credits:
        o = by_ref[orig]
        net = _q(Decimal(o[7]) * share)
        rows.append(
            [
                cn,
                "Credit note",
                d.isoformat(),
                o[3],
                f"Credit against {orig}: {'price adjustment' if share < 1 else 'order cancelled'}",
                o[5],
                "GBP",
                f"{net:.2f}",
                f"{_q(net * RATES[o[5]]):.2f}",
                orig,
            ]
        )
    rows.sort(key=lambda r: (iso_or_day_first(r[2], SALES_CSV), r[0]))
    # The old export repeats a line: the same invoice twice, one under the other.
    at = next(i for i, r in enumerate(rows) if r[0] == DUPLICATE)
    rows.insert(at + 1, list(rows[at]))
    return write_csv(
        inputs_dir / SALES_CSV,
        [
            "doc_no",
            "doc_type",
            "date",
            "customer",
            "description",
            "vat_code",
            "currency",
            "net_amount",
            "vat_amount",
            "related_doc",
        ],
        rows,
    )


def _write_purchases(inputs_dir: Path, g) -> Path:
    wb = openpyxl.Workbook()
    notes = wb.active
    notes.title = "Notes"
    for line in [
        "Pennant Heating Services Ltd - purchase ledger and expense claims, VAT quarter July to September 2026",
        "Exported from the accounts system on 5 October 2026. Amounts in GBP as posted.",
        (
            "Sheets: Purchase ledger (supplier invoices and credit notes), Expense claims (staff claims with "
            "VAT receipts), VAT codes."
        ),
        "Supplier credit notes are posted as positive amounts with the document type 'Credit note'.",
    ]:
        notes.append([line])
    notes["A1"].font = Font(bold=True)
    autosize(notes, {"A": 110})

    pl = wb.create_sheet("Purchase ledger")
    pl.append(["Ref", "Doc type", "Date", "Supplier", "Supplier invoice", "Description", "VAT code", "Net", "VAT"])
    style_header(pl)
    lines = []
    for month in (7, 8, 9):
        for sup, desc, code, top in SUPPLIERS:
            if code == "E" and month != 7:
                continue  # insurance is paid annually
            d = _rand_date(g, month)
            net = Decimal(int(g.integers(9000, top))) / 100
            lines.append([d, sup, desc, code, net])
    lines.append(
        [dt.date(2026, 8, 12), "Northgate Controls Ltd", "Zone controls and thermostats for resale", "S", LEDGER_NC[0]]
    )
    lines.sort(key=lambda r: (r[0], r[1]))
    rows = []
    for n, (d, sup, desc, code, net) in enumerate(lines, start=5701):
        vat = LEDGER_NC[1] if sup.startswith("Northgate") else _q(net * RATES[code])
        inv = (
            SUPERSEDED
            if sup.startswith("Northgate")
            else f"{sup.split()[0][:3].upper()}-{int(g.integers(10000, 99999))}"
        )
        rows.append([f"PI-{n}", "Invoice", d, sup, inv, desc, code, float(net), float(vat)])
    # A supplier credit note against the first boiler invoice, and an October invoice the export picked up.
    first_mbd = next(r for r in rows if r[3].startswith("Midland"))
    credit = _q(Decimal(str(first_mbd[7])) * Decimal("0.1"))
    rows.append(
        [
            f"PI-{5701 + len(rows)}",
            "Credit note",
            dt.date(2026, 9, 24),
            first_mbd[3],
            "SC-4410",
            f"Credit against {first_mbd[4]}: two units returned",
            "S",
            float(credit),
            float(_q(credit * RATES["S"])),
        ]
    )
    rows.append(
        [
            f"PI-{5701 + len(rows)}",
            "Invoice",
            dt.date(2026, 10, 2),
            "Trent Pipe & Fittings",
            "TRE-80417",
            "Pipework and fittings",
            "S",
            4310.00,
            862.00,
        ]
    )
    assert [r[0] for r in rows[-2:]] == ["PI-5721", LATE_PURCHASE], "the credit note and the October invoice moved"
    for r in rows:
        pl.append(r)
        pl.cell(row=pl.max_row, column=3).number_format = "dd/mm/yyyy"
    autosize(pl, {"A": 9, "B": 12, "C": 11, "D": 28, "E": 14, "F": 44, "G": 9, "H": 11, "I": 10})

    ec = wb.create_sheet("Expense claims")
    ec.append(["Claim", "Date", "Employee", "Description", "Category", "Net", "VAT"])
    style_header(ec)
    claims = [
        (
            "EC-0409",
            dt.date(2026, 7, 8),
            "Dan Roper",
            "Hotel, Leicester, two nights for site commissioning",
            "Travel",
            "212.50",
        ),
        ("EC-0410", dt.date(2026, 7, 16), "Priya Shah", "Train fares, Birmingham supplier visit", "Travel", "84.60"),
        ("EC-0411", dt.date(2026, 7, 30), "Dan Roper", "Meals while working away, Leicester", "Subsistence", "46.80"),
        (
            "EC-0412",
            dt.date(2026, 8, 6),
            "Fiona Carr",
            "Dinner with Beacon Hotels' facilities team ahead of contract renewal",
            "Entertainment",
            "486.00",
        ),
        ("EC-0413", dt.date(2026, 8, 13), "Tom Ellis", "Tools: press-fit jaws", "Tools", "318.40"),
        ("EC-0414", dt.date(2026, 8, 27), "Priya Shah", "Parking, Reading site", "Travel", "36.00"),
        (
            "EC-0415",
            dt.date(2026, 9, 4),
            "Fiona Carr",
            "Staff summer party, all employees, The Mill Inn",
            "Entertainment",
            "1240.00",
        ),
        ("EC-0416", dt.date(2026, 9, 10), "Tom Ellis", "Fuel for service van (receipts attached)", "Travel", "154.20"),
        ("EC-0417", dt.date(2026, 9, 15), "Dan Roper", "Protective workwear", "Tools", "96.00"),
        ("EC-0418", dt.date(2026, 9, 22), "Priya Shah", "Meals while working away, Reading", "Subsistence", "38.60"),
        (
            "EC-0419",
            dt.date(2026, 9, 25),
            "Fiona Carr",
            "Hospitality box at Trent Bridge for Okafor Property Management directors",
            "Entertainment",
            "1150.00",
        ),
    ]
    for ref, d, emp, desc, cat, net in claims:
        net_d = Decimal(net)
        vat = Decimal(0) if ref == "EC-0410" else _q(net_d * RATES["S"])  # rail fares are zero-rated
        ec.append([ref, d, emp, desc, cat, float(net_d), float(vat)])
        ec.cell(row=ec.max_row, column=2).number_format = "dd/mm/yyyy"
    autosize(ec, {"A": 9, "B": 11, "C": 12, "D": 70, "E": 14, "F": 10, "G": 9})

    codes = wb.create_sheet("VAT codes")
    codes.append(["Code", "Meaning", "Rate"])
    style_header(codes)
    for code, meaning, rate in [
        ("S", "Standard rate", 0.20),
        ("R", "Reduced rate", 0.05),
        ("Z", "Zero rate", 0.0),
        ("E", "Exempt", 0.0),
    ]:
        codes.append([code, meaning, rate])
    autosize(codes, {"A": 6, "B": 16, "C": 6})
    return save_workbook(wb, inputs_dir / PURCHASES_XLSX)


def _write_revised(inputs_dir: Path) -> Path:
    # The original billed 30 controllers for 15: 15 x 120.00 = 1,800.00, the ledger's excess over the revision.
    assert LEDGER_NC[0] - REVISED_NC[0] == 15 * Decimal("120.00")
    blocks = [
        Heading("Northgate Controls Ltd - Revised tax invoice NC-88213-R1"),
        Para("Unit 7, Riverside Trading Estate, Derby DE24 8HX. VAT registration GB 284 1937 55."),
        Para(
            "To: Pennant Heating Services Ltd, Accounts Payable. Date of revised invoice: 19 August 2026. "
            "Original invoice: NC-88213 dated 12 August 2026."
        ),
        Para(
            "This revised invoice replaces invoice NC-88213, which was issued with 30 zone controllers in "
            "place of the 15 delivered. Please cancel NC-88213 in your records and account for this "
            "invoice instead. The tax point is unchanged."
        ),
        Table(
            ["Item", "Description", "Qty", "Unit price (GBP)", "Net (GBP)"],
            [
                ["ZC-400", "Wireless zone controller", "15", "120.00", "1,800.00"],
                ["TH-210", "Programmable room thermostat", "60", "78.00", "4,680.00"],
                ["HB-050", "Wiring centre, 5-zone", "12", "280.00", "3,360.00"],
            ],
        ),
        Table(
            ["", "GBP"],
            [
                ["Net total", fmt_money(REVISED_NC[0])],
                ["VAT at 20%", fmt_money(REVISED_NC[1])],
                ["Total due", fmt_money(REVISED_NC[0] + REVISED_NC[1])],
            ],
        ),
        Para("Payment terms 30 days from the original invoice date."),
    ]
    return write_pdf(blocks, inputs_dir / REVISED_PDF, title="Northgate Controls - revised invoice NC-88213-R1")


def _write_guidance(inputs_dir: Path) -> Path:
    text = f"""Pennant Heating Services Ltd - VAT guidance note for preparing the quarterly return
Finance department, issued April 2026; applies to every return until replaced.

1. Period. A return covers the transactions whose tax point falls in the quarter. For this business the
   tax point is the invoice date (or the credit note date). An invoice dated after the last day of the
   quarter belongs to the next return, even when the ledger export picked it up.

2. Rates and codes. S standard rate 20%; R reduced rate 5% (heating oil delivered to domestic customers);
   Z zero rate (goods exported outside the UK); E exempt (rent of the sublet depot unit, on which the company
   has not opted to tax; insurance). Zero-rated and exempt sales carry no output VAT but their net value is
   part of box 6; zero-rated and exempt purchases likewise go in box 7.

3. Credit notes. The ledgers show credit notes as positive amounts with the document type "Credit note".
   A credit note issued reduces output VAT (box 1) and sales (box 6); a credit note received reduces input
   VAT (box 4) and purchases (box 7). Enter them as negative amounts in the workings.

4. Ledger exports. The sales ledger export repeats a line now and then; an invoice number is unique and is
   counted once. Dates from the branch office are written day-first (dd/mm/yyyy).

5. Foreign currency. An invoice issued in another currency is converted to sterling, net and VAT, at the
   HMRC period rate for the month of the invoice date. Rates for euro invoices (sterling per euro) in the
   current quarter: July 2026 {EUR_RATES[7]}, August 2026 {EUR_RATES[8]}, September 2026 {EUR_RATES[9]}.

6. Corrected invoices. When a supplier replaces an invoice with a revised one, the revised invoice is the
   document that supports the claim: account for its figures and not those of the invoice it replaces.

7. Input VAT. VAT on purchases and expenses used for the taxable business is recoverable in box 4 when
   supported by a VAT invoice or receipt. The following is never recoverable, whatever the ledger code:
   (a) VAT on cars available for private use; (b) VAT on business entertainment, meaning hospitality of any
   kind for anyone who is not an employee: clients, prospective clients, suppliers. Entertainment of
   employees only (for example the staff party) is not business entertainment and its VAT is recoverable.
   Expense claims record both under the category "Entertainment": read the description. The net value of
   an expense whose VAT is blocked still goes in box 7.

8. Partial exemption. The exempt rent makes the company partly exempt, but its exempt input tax is within
   the de minimis limits this year, so no restriction applies to the input VAT of this quarter.

9. Boxes. Box 1 output VAT; box 2 VAT on acquisitions from the EU (nil for this business); box 3 = box 1
   + box 2; box 4 input VAT recoverable; box 5 = box 3 - box 4 (payable when positive); box 6 sales and
   other outputs excluding VAT; box 7 purchases and other inputs excluding VAT. The company reports every
   box to the penny in its workings.
"""
    return write_text(inputs_dir / GUIDANCE_TXT, text)


# ------------------------------------------------------------------ the answer from the inputs alone


def _dec(v: object) -> Decimal:
    return Decimal(str(v).replace(",", "").strip())


def _as_date(v: object, where: str) -> dt.date:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    raise ValueError(f"{PURCHASES_XLSX}: {where}: {v!r} is not a date")


def _revised_invoice(inputs_dir: Path) -> tuple[str, Decimal, Decimal]:
    """The invoice the revised one replaces, and its net and VAT, from the PDF."""
    from pypdf import PdfReader

    text = "\n".join(p.extract_text() or "" for p in PdfReader(str(inputs_dir / REVISED_PDF)).pages)
    replaced = re.search(r"replaces invoice (\S+?),", text)
    net = re.search(r"Net total\s+([\d,]+\.\d\d)", text)
    vat = re.search(r"VAT at 20%\s+([\d,]+\.\d\d)", text)
    if not (replaced and net and vat):
        raise ValueError(f"{REVISED_PDF}: the replaced invoice, net total or VAT not found")
    return replaced.group(1), _dec(net.group(1)), _dec(vat.group(1))


def compute(inputs_dir: Path) -> dict:
    """The guidance note's answer: each line's treatment and the seven boxes."""
    inputs_dir = Path(inputs_dir)
    sales, seen, duplicates = [], set(), []
    for r in read_csv_dicts(inputs_dir / SALES_CSV):
        if r["doc_no"] in seen:
            duplicates.append(r["doc_no"])
            continue
        seen.add(r["doc_no"])
        d = iso_or_day_first(r["date"], f"{SALES_CSV}: field 'date'")
        where = f"{SALES_CSV}: {r['doc_no']}"
        if r["doc_type"] not in ("Invoice", "Credit note"):
            raise ValueError(f"{where}: field 'doc_type': {r['doc_type']!r} is neither 'Invoice' nor 'Credit note'")
        if r["vat_code"] not in RATES:
            raise ValueError(f"{where}: field 'vat_code': {r['vat_code']!r} is not one of {', '.join(RATES)}")
        sign = Decimal(-1) if r["doc_type"] == "Credit note" else Decimal(1)
        if r["currency"] == "GBP":
            fx = Decimal(1)
        elif r["currency"] == "EUR" and d.month in EUR_RATES:
            fx = EUR_RATES[d.month]
        else:
            raise ValueError(f"{where}: field 'currency': no rate for {r['currency']!r} in {d:%B %Y} in {GUIDANCE_TXT}")
        net, vat = _q(_dec(r["net_amount"]) * fx) * sign, _q(_dec(r["vat_amount"]) * fx) * sign
        sales.append(
            dict(
                ref=r["doc_no"],
                type=r["doc_type"],
                date=d,
                party=r["customer"],
                desc=r["description"],
                code=r["vat_code"],
                currency=r["currency"],
                net_ccy=_dec(r["net_amount"]),
                vat_ccy=_dec(r["vat_amount"]),
                fx=fx,
                sign=sign,
                net=net,
                vat=vat,
                in_period=PERIOD_START <= d <= PERIOD_END,
            )
        )
    replaced, rev_net, rev_vat = _revised_invoice(inputs_dir)
    wb = openpyxl.load_workbook(inputs_dir / PURCHASES_XLSX)
    purchases = []
    for i, r in enumerate(wb["Purchase ledger"].iter_rows(min_row=2, values_only=True), start=2):
        if not r[0]:
            continue
        ref, typ, d, sup, inv, desc, code, net, vat = r
        d = _as_date(d, f"sheet Purchase ledger, row {i}, column Date")
        sign = Decimal(-1) if typ == "Credit note" else Decimal(1)
        net, vat = _dec(net), _dec(vat)
        revised = inv == replaced
        if revised:
            net, vat = rev_net, rev_vat
        purchases.append(
            dict(
                ref=ref,
                type=typ,
                date=d,
                party=sup,
                inv=inv,
                desc=desc,
                code=code,
                sign=sign,
                net=net * sign,
                vat=vat * sign,
                blocked=False,
                revised=revised,
                in_period=PERIOD_START <= d <= PERIOD_END,
            )
        )
    for i, r in enumerate(wb["Expense claims"].iter_rows(min_row=2, values_only=True), start=2):
        if not r[0]:
            continue
        ref, d, emp, desc, cat, net, vat = r
        d = _as_date(d, f"sheet Expense claims, row {i}, column Date")
        # Business entertainment: hospitality for anyone not an employee (guidance 7(b)); the staff party is
        # recoverable.
        blocked = cat == "Entertainment" and not re.search(r"\bstaff\b|all employees", desc, re.I)
        purchases.append(
            dict(
                ref=ref,
                type="Expense claim",
                date=d,
                party=emp,
                inv="",
                desc=desc,
                code="S",
                sign=Decimal(1),
                net=_dec(net),
                vat=_dec(vat),
                blocked=blocked,
                revised=False,
                in_period=PERIOD_START <= d <= PERIOD_END,
            )
        )
    box1 = sum((s["vat"] for s in sales if s["in_period"]), Decimal(0))
    box6 = sum((s["net"] for s in sales if s["in_period"]), Decimal(0))
    box4 = sum((p["vat"] for p in purchases if p["in_period"] and not p["blocked"]), Decimal(0))
    blocked_vat = sum((p["vat"] for p in purchases if p["in_period"] and p["blocked"]), Decimal(0))
    # Box 7: every purchase in the period at its net value, those with blocked VAT included (guidance 7).
    box7 = sum((p["net"] for p in purchases if p["in_period"]), Decimal(0))
    excluded = [s["ref"] for s in sales if not s["in_period"]] + [p["ref"] for p in purchases if not p["in_period"]]
    restricted = [p["ref"] for p in purchases if p["blocked"] and p["in_period"]]
    return dict(
        sales=sales,
        purchases=purchases,
        duplicates=duplicates,
        replaced=replaced,
        revised=(rev_net, rev_vat),
        box1=box1,
        box2=Decimal(0),
        box3=box1,
        box4=box4,
        box5=box1 - box4,
        box6=box6,
        box7=box7,
        blocked_vat=blocked_vat,
        excluded=excluded,
        restricted=restricted,
    )


# ------------------------------------------------------------------ the gold deliverables


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful tax accountant would: a formula-driven return and the memo."""
    a = compute(inputs_dir)
    outputs_dir = Path(outputs_dir)
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = _write_return(a, outputs_dir / RETURN_XLSX)
    memo = _write_memo(a, outputs_dir / MEMO_DOCX)
    record = write_completion_record(
        outputs_dir,
        [RETURN_XLSX, MEMO_DOCX],
        questions=[
            "Has Northgate Controls' original invoice NC-88213 been cancelled in the purchase ledger, so "
            "that it is not paid?"
        ],
        notes=(
            f"Sales invoices {', '.join(LATE_SALES)} and purchase invoice {LATE_PURCHASE} are dated October "
            "2026 and are left for the next return. VAT on client entertainment "
            f"({', '.join(a['restricted'])}) is not claimed."
        ),
    )
    return [book, memo, record]


def _treatment_sale(s: dict, first: bool) -> tuple[str, str]:
    if not first:
        return "No", f"Duplicate line: {s['ref']} is already counted above"
    if not s["in_period"]:
        return "No", "Dated after 30 September 2026: next return (guidance 1)"
    if s["type"] == "Credit note":
        return "Yes", "Credit note: negative (guidance 3)"
    if s["currency"] == "EUR":
        return "Yes", f"EUR invoice converted at the {s['date']:%B} rate (guidance 5)"
    return "Yes", ""


def _write_return(a: dict, path: Path) -> Path:
    wb = openpyxl.Workbook()
    ret = wb.active
    ret.title = "VAT return"
    sales = wb.create_sheet("Sales")
    purch = wb.create_sheet("Purchases")

    # Sales: every line of the export, the duplicate kept visible but out of the return.
    sales.append(
        [
            "Doc no",
            "Type",
            "Date",
            "Customer",
            "VAT code",
            "Currency",
            "Net (currency)",
            "VAT (currency)",
            "Rate to GBP",
            "Sign",
            "Net GBP",
            "VAT GBP",
            "In return",
            "Treatment",
        ]
    )
    style_header(sales)
    rows: list[tuple[dict, bool]] = []
    for s in a["sales"]:
        rows.append((s, True))
        if s["ref"] in a["duplicates"]:
            rows.append((s, False))
    for s, first in rows:
        r = sales.max_row + 1
        inc, why = _treatment_sale(s, first)
        sales.append(
            [
                s["ref"],
                s["type"],
                s["date"],
                s["party"],
                s["code"],
                s["currency"],
                float(s["net_ccy"]),
                float(s["vat_ccy"]),
                float(s["fx"]),
                int(s["sign"]),
                f"=ROUND(G{r}*I{r},2)*J{r}",
                f"=ROUND(H{r}*I{r},2)*J{r}",
                inc,
                why,
            ]
        )
        sales.cell(row=r, column=3).number_format = "dd/mm/yyyy"
    last_s = sales.max_row
    autosize(
        sales,
        {
            "A": 9,
            "B": 11,
            "C": 11,
            "D": 34,
            "E": 8,
            "F": 8,
            "G": 13,
            "H": 12,
            "I": 10,
            "J": 5,
            "K": 12,
            "L": 11,
            "M": 9,
            "N": 52,
        },
    )

    # Purchases: the ledger with the revised Northgate figures, then the expense claims.
    purch.append(
        [
            "Ref",
            "Type",
            "Date",
            "Supplier or employee",
            "Supplier invoice",
            "Description",
            "VAT code",
            "Net as posted",
            "VAT as posted",
            "Sign",
            "Net",
            "VAT",
            "VAT blocked",
            "Recoverable VAT",
            "In return",
            "Treatment",
        ]
    )
    style_header(purch)
    # The revised invoice's figures sit below the ledger lines, where the superseded line's formulas read them.
    rev_row = 2 + len(a["purchases"]) + 1
    for p in a["purchases"]:
        r = purch.max_row + 1
        why = ""
        if p["revised"]:
            why = (
                f"Superseded: revised invoice {SUPERSEDED}-R1 governs, net {fmt_money(a['revised'][0])}, VAT "
                f"{fmt_money(a['revised'][1])} (guidance 6)"
            )
        elif p["blocked"]:
            why = "Client entertainment: VAT blocked, net stays in box 7 (guidance 7(b))"
        elif p["ref"] == STAFF_PARTY:
            why = "Staff entertainment: VAT recoverable (guidance 7)"
        elif p["type"] == "Credit note":
            why = "Credit note received: negative (guidance 3)"
        if not p["in_period"]:
            why = "Dated after 30 September 2026: next return (guidance 1)"
        net, vat = LEDGER_NC if p["revised"] else (abs(p["net"]), abs(p["vat"]))
        src_net, src_vat = (f"H{rev_row}", f"I{rev_row}") if p["revised"] else (f"H{r}", f"I{r}")
        purch.append(
            [
                p["ref"],
                p["type"],
                p["date"],
                p["party"],
                p["inv"],
                p["desc"],
                p["code"],
                float(net),
                float(vat),
                int(p["sign"]),
                f"={src_net}*J{r}",
                f"={src_vat}*J{r}",
                "Yes" if p["blocked"] else "No",
                f'=IF(M{r}="Yes",0,L{r})',
                "Yes" if p["in_period"] else "No",
                why,
            ]
        )
        purch.cell(row=r, column=3).number_format = "dd/mm/yyyy"
    last_p = purch.max_row
    purch.append([])
    purch.append(
        [
            f"{SUPERSEDED}-R1",
            "Revised invoice",
            "",
            "Northgate Controls Ltd",
            f"{SUPERSEDED}-R1",
            f"Replaces {SUPERSEDED}; figures used for line {next(p['ref'] for p in a['purchases'] if p['revised'])}",
            "S",
            float(a["revised"][0]),
            float(a["revised"][1]),
        ]
    )
    assert purch.max_row == rev_row
    autosize(
        purch,
        {
            "A": 12,
            "B": 15,
            "C": 11,
            "D": 28,
            "E": 14,
            "F": 48,
            "G": 8,
            "H": 12,
            "I": 11,
            "J": 5,
            "K": 12,
            "L": 11,
            "M": 11,
            "N": 14,
            "O": 9,
            "P": 60,
        },
    )

    # The return: each box a formula on the workings, none on another box, so every box traces to the ledgers.
    S = lambda col: f'SUMIFS(Sales!{col}2:{col}{last_s},Sales!M2:M{last_s},"Yes")'  # noqa: E731
    P = lambda col: f'SUMIFS(Purchases!{col}2:{col}{last_p},Purchases!O2:O{last_p},"Yes")'  # noqa: E731
    ret.append(["Box", "Description", "Amount (GBP)"])
    style_header(ret)
    for box, desc, f in [
        ("Box 1", "VAT due on sales and other outputs", f"=ROUND({S('L')},2)"),
        ("Box 2", "VAT due on acquisitions from EU member states", 0),
        ("Box 3", "Total VAT due", f"=ROUND({S('L')},2)"),
        ("Box 4", "VAT reclaimed on purchases and other inputs", f"=ROUND({P('N')},2)"),
        ("Box 5", "Net VAT payable or repayable", f"=ROUND({S('L')}-{P('N')},2)"),
        ("Box 6", "Total value of sales and all other outputs excluding VAT", f"=ROUND({S('K')},2)"),
        ("Box 7", "Total value of purchases and all other inputs excluding VAT", f"=ROUND({P('K')},2)"),
    ]:
        ret.append([box, desc, f])
        ret.cell(row=ret.max_row, column=3).number_format = "#,##0.00"
    ret.append([])
    ret.append(["Return period", "1 July 2026 to 30 September 2026"])
    ret.append(["Blocked input VAT (client entertainment)", "", f"=ROUND({P('L')}-{P('N')},2)"])
    autosize(ret, {"A": 40, "B": 58, "C": 16})
    return save_workbook(wb, path)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _day(d: dt.date) -> str:
    return f"{d.day} {d:%B %Y}"


#: The memo's decision table: one row per transaction the set is about (the five in it and the look-alikes
#: outside it), its verdict a Yes/No right after the reference, under a title that names the decision. No cell
#: holds ", " or ":" (a sentence's end in running text), so the table says the same as a Word table and
#: flattened into one line of text, as some writers produce. The layout is the gold's choice, not the oracle's:
#: with the verdict last the table reads the same (tests/test_mutations_tax_01.py, memo_table_verdict_last*).
DECISION_TABLE_HEADER = ("Transaction", "Excluded or VAT blocked", "Date", "VAT (GBP)", "Reason")


def _decision_rows(a: dict) -> list[list[str]]:
    """The decision table's rows: those left out or restricted first, then those kept in full, each in ledger order."""
    inside = set(a["excluded"]) | set(a["restricted"])
    reasons = {ref: "Tax point after 30 September (next return)" for ref in LATE_SALES}
    reasons[LAST_DAY_SALE] = "Tax point on the last day of the quarter"
    reasons[LATE_PURCHASE] = "Invoice dated after 30 September (next return)"
    reasons[STAFF_PARTY] = "Staff entertainment (recoverable)"
    for p in a["purchases"]:
        if p["blocked"]:
            reasons[p["ref"]] = "Client entertainment (guidance 7(b))"
        elif p["type"] == "Credit note":
            reasons[p["ref"]] = f"Supplier credit note {p['inv']} (reduces box 4)"
    rows = [
        [
            x["ref"],
            "Yes" if x["ref"] in inside else "No",
            f"{x['date'].day} {x['date']:%b %Y}",
            fmt_money(x["vat"]),
            reasons[x["ref"]],
        ]
        for x in [*a["sales"], *a["purchases"]]
        if x["ref"] in reasons
    ]
    # Every transaction of the set is a row, and so is each look-alike: the table states the whole decision.
    assert inside <= {r[0] for r in rows} and len(rows) == len(reasons), "the decision table misses a transaction"
    return sorted(rows, key=lambda r: r[1] != "Yes")


def _write_memo(a: dict, path: Path) -> Path:
    fx = next(s for s in a["sales"] if s["ref"] == FX_INVOICE)
    credits = [s for s in a["sales"] if s["type"] == "Credit note"]
    supplier_credit = next(p for p in a["purchases"] if p["type"] == "Credit note")
    late_p = next(p for p in a["purchases"] if p["ref"] == LATE_PURCHASE)
    late_s = [s for s in a["sales"] if s["ref"] in LATE_SALES]
    blocked = [p for p in a["purchases"] if p["blocked"]]
    party = next(p for p in a["purchases"] if p["ref"] == STAFF_PARTY)
    last_day = next(s for s in a["sales"] if s["ref"] == LAST_DAY_SALE)
    blocks = [
        Heading("Summary"),
        Para(
            "The VAT return of Pennant Heating Services Ltd for the quarter 1 July to 30 September 2026 "
            f"shows output VAT of GBP {fmt_money(a['box1'])} (box 1) and recoverable input VAT of GBP "
            f"{fmt_money(a['box4'])} (box 4), so net VAT of GBP {fmt_money(a['box5'])} is payable to HMRC "
            f"(box 5). Sales excluding VAT are GBP {fmt_money(a['box6'])} (box 6) and purchases excluding "
            f"VAT GBP {fmt_money(a['box7'])} (box 7). Every box in vat_return_Q3.xlsx is a formula on the "
            "Sales and Purchases sheets, which list each ledger line with its treatment."
        ),
        Heading("Adjustments"),
        Para(
            f"Cut-off: sales invoices {late_s[0]['ref']} (dated {_day(late_s[0]['date'])}) and "
            f"{late_s[1]['ref']} (dated {_day(late_s[1]['date'])}) are excluded from this return, because "
            "their tax point falls after 30 September; they belong to the next quarter. Purchase invoice "
            f"{late_p['ref']} from {late_p['party']}, dated {_day(late_p['date'])}, is excluded for the "
            f"same reason. Invoice {last_day['ref']} to {last_day['party']}, dated 30 September 2026, is "
            "included in this return."
        ),
        Para(
            f"Client entertainment: the input VAT on expense claims {blocked[0]['ref']} "
            f"({_lower_first(blocked[0]['desc'])}) and {blocked[1]['ref']} "
            f"({_lower_first(blocked[1]['desc'])}) is blocked under guidance 7(b), GBP "
            f"{fmt_money(a['blocked_vat'])} in all; their net values remain in box 7. Claim "
            f"{party['ref']}, the staff summer party, is staff entertainment and its VAT of GBP "
            f"{fmt_money(party['vat'])} is claimed in full."
        ),
        Para(
            f"Revised supplier invoice: Northgate Controls replaced invoice {a['replaced']} (posted at net "
            f"{fmt_money(LEDGER_NC[0])}, VAT {fmt_money(LEDGER_NC[1])}) by revised invoice "
            f"{a['replaced']}-R1 at net {fmt_money(a['revised'][0])}, VAT {fmt_money(a['revised'][1])}. "
            "The return uses the revised figures, which reduce input VAT by GBP "
            f"{fmt_money(LEDGER_NC[1] - a['revised'][1])} against the ledger."
        ),
        Para(
            "Credit notes: the ledgers show credit notes as positive amounts. Credit notes "
            f"{', '.join(c['ref'] for c in credits)} issued to customers are entered as negatives, "
            f"reducing box 1 by GBP {fmt_money(-sum((c['vat'] for c in credits), Decimal(0)))} and box 6 "
            f"by GBP {fmt_money(-sum((c['net'] for c in credits), Decimal(0)))}; the supplier credit note "
            f"{supplier_credit['inv']} ({supplier_credit['ref']}) reduces box 4 by GBP "
            f"{fmt_money(-supplier_credit['vat'])}."
        ),
        Para(
            f"Foreign currency: invoice {fx['ref']} to {fx['party']} was issued in euro (net EUR "
            f"{fmt_money(fx['net_ccy'])}, VAT EUR {fmt_money(fx['vat_ccy'])}). At the August period rate "
            f"of {fx['fx']} it is net GBP {fmt_money(fx['net'])} and VAT GBP {fmt_money(fx['vat'])}."
        ),
        Para(
            f"Duplicate: invoice {a['duplicates'][0]} appears twice in the sales export with the same "
            "figures; it is counted once."
        ),
        Para(
            "The table lists every transaction at the quarter's cut-off or under the entertainment rule, "
            "with its treatment."
        ),
        Table(list(DECISION_TABLE_HEADER), _decision_rows(a)),
        Heading("Return figures"),
        Table(
            ["Box", "Description", "GBP"],
            [
                ["Box 1", "VAT due on sales and other outputs", fmt_money(a["box1"])],
                ["Box 2", "VAT due on acquisitions from the EU", fmt_money(a["box2"])],
                ["Box 3", "Total VAT due", fmt_money(a["box3"])],
                ["Box 4", "VAT reclaimed on purchases and other inputs", fmt_money(a["box4"])],
                ["Box 5", "Net VAT payable", fmt_money(a["box5"])],
                ["Box 6", "Sales excluding VAT", fmt_money(a["box6"])],
                ["Box 7", "Purchases excluding VAT", fmt_money(a["box7"])],
            ],
        ),
        Para(
            "Zero-rated exports to Nordvarme AS and the exempt rent from Corvan Logistics carry no output "
            "VAT and are included in box 6. The exempt input tax is within the de minimis limits "
            "(guidance 8), so no partial-exemption restriction applies this quarter."
        ),
        Heading("Open points"),
        Para(
            f"The purchase ledger still carries {a['replaced']} at the original figures: it should be "
            "corrected so that the supplier account agrees with the revised invoice. The October invoices "
            "left out here must be picked up in the return for the quarter to 31 December 2026."
        ),
    ]
    return write_docx(blocks, path, title="VAT return, quarter to 30 September 2026 - preparation memo")
