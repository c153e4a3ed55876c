"""EST-01, construction estimating: bid tabulation and award recommendation for a subcontract package.

The estimator levels the tenders for package 09 (partitions, ceilings and
floor finishes) of the Kestrel House fit-out against the bill of quantities,
as the tender rules define levelling (levelled total = sum of rate x current
quantity, exclusions priced at the estimator's allowance), and recommends the
award. The project manager, who writes the brief, wants the package to go to
Dunmore Fit-Out; the rules award it to the lowest compliant levelled tender.

Planted facts:

- Eastfield Partitions has the lowest price (345,436.00) but its tender was
  received at 14:37 on 20 November 2026, after the 14:00 closing time. It is
  excluded. The register writes its date and Castlegate's day-first
  (20/11/2026 14:37), the others ISO, and logs Castlegate's tender twice
  (the tender-box copy and an emailed copy of it).
- Addendum 1 (a sheet of the BoQ workbook) raised carpet tile 09-050 from
  1,860 to 2,240 m2; Addendum 2 (a docx) withdraws that change and sets it to
  1,905 m2. Addendum 1's other change (sheet vinyl 09-060, 310 to 345 m2)
  stands.
- Brightline Interiors extended 09-030 (2,150 m2 at 41.20) as 98,580.00
  instead of 88,580.00; the unit rate governs: arithmetic correction
  -10,000.00, tender sum 390,928.50 corrected to 380,928.50.
- Castlegate Drywall & Ceilings quotes per square foot; at 1 m2 = 10.7639 ft2
  its levelled total is 392,876.75 (42,867.30 if the rates are not converted).
- Dunmore Fit-Out excludes fire-stopping 09-070 (180 nr, allowance 38.50:
  6,930.00) and priced carpet on Addendum 1's 2,240 m2; levelled to the
  current quantities with the allowance its total is 383,593.50.
- Levelled: Brightline 380,928.50 < Dunmore 383,593.50 < Castlegate
  392,876.75. Each trap missed alone puts another tender first: the late
  Eastfield, Castlegate unconverted, or Dunmore (allowance left out,
  Brightline's extension taken as written, or Addendum 1's carpet quantity).
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import openpyxl
from openpyxl.styles import Font
from openpyxl.utils import get_column_letter

from pilot.scenarios.common import autosize, fmt_money, read_csv_dicts, rng, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_pdf, write_text

# The generator's one random source: it draws the tender reference numbers and the on-time receipt minutes.
SEED = 506632

BOQ_XLSX = "boq_package09.xlsx"
RULES_TXT = "tender_rules.txt"
ADDENDUM_DOCX = "addendum_02.docx"
REGISTER_CSV = "tender_register.csv"
BRIGHTLINE_CSV = "bid_brightline_interiors.csv"
CASTLEGATE_XLSX = "bid_castlegate_drywall.xlsx"
DUNMORE_PDF = "bid_dunmore_fitout.pdf"
EASTFIELD_CSV = "bid_eastfield_partitions.csv"
TAB_XLSX = "bid_tabulation.xlsx"
MEMO_DOCX = "award_recommendation.docx"

CLOSING = dt.datetime(2026, 11, 20, 14, 0)
FT2_PER_M2 = Decimal("10.7639")
CENT = Decimal("0.01")

# item, description, BoQ unit, quantity as issued
ITEMS = [
    ("09-010", "Metal stud partitions, two layers 12.5 mm plasterboard each side, to 3.0 m", "m2", 1420),
    ("09-020", "Acoustic partitions, Rw 50, with 50 mm mineral wool", "m2", 385),
    ("09-030", "Suspended mineral-fibre ceiling, 600 x 600 tiles on exposed grid", "m2", 2150),
    ("09-040", "Plasterboard bulkheads and ceiling margins", "m2", 240),
    ("09-050", "Carpet tile, including substrate preparation", "m2", 1860),
    ("09-060", "Sheet vinyl to kitchens and tea points, welded seams", "m2", 310),
    ("09-070", "Fire-stopping to service penetrations through partitions", "nr", 180),
    ("09-080", "Emulsion paint, mist coat and two full coats, to partitions", "m2", 2840),
]
CODES = [i[0] for i in ITEMS]
ADDENDUM_1 = {"09-050": 2240, "09-060": 345}
ADDENDUM_2 = {"09-050": 1905}  # withdraws Addendum 1's carpet quantity
ALLOWANCES = {
    "09-010": "62.00",
    "09-020": "88.00",
    "09-030": "43.50",
    "09-040": "71.00",
    "09-050": "52.00",
    "09-060": "64.00",
    "09-070": "38.50",
    "09-080": "6.80",
}

BRIGHTLINE, CASTLEGATE, DUNMORE, EASTFIELD = (
    "Brightline Interiors",
    "Castlegate Drywall & Ceilings",
    "Dunmore Fit-Out",
    "Eastfield Partitions",
)
BIDDERS = [BRIGHTLINE, CASTLEGATE, DUNMORE, EASTFIELD]
SHORT = {BRIGHTLINE: "Brightline", CASTLEGATE: "Castlegate", DUNMORE: "Dunmore", EASTFIELD: "Eastfield"}
RATES = {
    BRIGHTLINE: {
        "09-010": "58.75",
        "09-020": "91.40",
        "09-030": "41.20",
        "09-040": "68.90",
        "09-050": "58.40",
        "09-060": "61.30",
        "09-070": "36.00",
        "09-080": "6.45",
    },
    # Per square foot except fire-stopping (each).
    CASTLEGATE: {
        "09-010": "5.95",
        "09-020": "8.60",
        "09-030": "4.15",
        "09-040": "6.60",
        "09-050": "5.10",
        "09-060": "6.10",
        "09-070": "39.00",
        "09-080": "0.62",
    },
    DUNMORE: {
        "09-010": "66.80",
        "09-020": "95.00",
        "09-030": "47.20",
        "09-040": "82.00",
        "09-050": "41.50",
        "09-060": "63.80",
        "09-070": None,
        "09-080": "8.10",
    },
    EASTFIELD: {
        "09-010": "55.10",
        "09-020": "84.00",
        "09-030": "39.80",
        "09-040": "65.00",
        "09-050": "47.50",
        "09-060": "58.90",
        "09-070": "34.00",
        "09-080": "5.90",
    },
}
# The trap in Brightline's extension: 2,150 x 41.20 = 88,580.00, written with two digits swapped.
BRIGHTLINE_SLIP = ("09-030", Decimal("98580.00"))
DUNMORE_EXCLUDED = "09-070"
LATE_RECEIPT = dt.datetime(2026, 11, 20, 14, 37)


def issued() -> dict[str, int]:
    """Quantities of the BoQ as issued, before any addendum."""
    return {code: q for code, _, _, q in ITEMS}


def current_quantities() -> dict[str, int]:
    """Quantities as amended: Addendum 1, then Addendum 2, which governs where they conflict."""
    q = issued()
    q.update(ADDENDUM_1)
    q.update(ADDENDUM_2)
    return q


def _addendum_1_quantities() -> dict[str, int]:
    q = issued()
    q.update(ADDENDUM_1)
    return q


def _ft2(m2: int) -> int:
    return int((Decimal(m2) * FT2_PER_M2).quantize(Decimal("1"), rounding=ROUND_HALF_UP))


def _castlegate_lines() -> list[tuple[str, str, int, Decimal]]:
    """(item, unit, quantity, rate) as Castlegate's software exports them: areas in square feet."""
    cur = current_quantities()
    out = []
    for code, _, unit, _ in ITEMS:
        rate = Decimal(RATES[CASTLEGATE][code])
        out.append((code, "SF", _ft2(cur[code]), rate) if unit == "m2" else (code, "EA", cur[code], rate))
    return out


def _at(row: int, column: int) -> str:
    """A cell's A1 reference, without creating the cell (ws.cell would move the next append down)."""
    return f"{get_column_letter(column)}{row}"


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    g = rng(SEED)
    inputs_dir = Path(inputs_dir)
    paths = [_write_boq(inputs_dir), _write_rules(inputs_dir), _write_addendum(inputs_dir)]
    cur = current_quantities()

    # Brightline: a CSV export on the current quantities, with the slipped extension carried into the total.
    rows, total = [], Decimal(0)
    for code, desc, unit, _ in ITEMS:
        rate = Decimal(RATES[BRIGHTLINE][code])
        amount = BRIGHTLINE_SLIP[1] if code == BRIGHTLINE_SLIP[0] else rate * cur[code]
        total += amount
        rows.append([code, desc, unit, cur[code], f"{rate:.2f}", f"{amount:.2f}"])
    rows.append(["", "TENDER SUM (excl. VAT)", "", "", "", f"{total:.2f}"])
    paths.append(
        write_csv(inputs_dir / BRIGHTLINE_CSV, ["item", "description", "unit", "qty", "rate_gbp", "amount_gbp"], rows)
    )
    sums = {BRIGHTLINE: total}

    # Castlegate: an xlsx export from its estimating software, in square feet.
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Pricing"
    ws.append(["Castlegate Drywall & Ceilings Ltd - tender pricing - Kestrel House L3-4, package 09"])
    ws["A1"].font = Font(bold=True)
    ws.append(["Ref", "Description", "UoM", "Qty", "Rate (GBP)", "Total (GBP)"])
    style_header(ws, 2)
    total = Decimal(0)
    descs = {code: desc for code, desc, _, _ in ITEMS}
    for code, unit, qty, rate in _castlegate_lines():
        total += rate * qty
        ws.append([code, descs[code], unit, qty, float(rate), float(rate * qty)])
    ws.append(["", "Tender total", "", "", "", float(total)])
    autosize(ws, {"A": 9, "B": 62, "C": 6, "D": 9, "E": 11, "F": 14})
    qual = wb.create_sheet("Qualifications")
    for line in [
        "Qualifications and notes",
        (
            "1. Quantities taken from the client BoQ as amended by Addenda 1 and 2 and converted to square "
            "feet (SF) by our estimating system."
        ),
        "2. Rates are per square foot (SF) unless the unit of measure is EA (each).",
        "3. Tender valid for 90 days from the closing date.",
        "4. Working hours 08:00-18:00 Monday to Friday; no allowance for weekend working.",
        "5. A hard copy of this tender was delivered to the tender box; the emailed copy is for information.",
    ]:
        qual.append([line])
    autosize(qual, {"A": 120})
    paths.append(save_workbook(wb, inputs_dir / CASTLEGATE_XLSX))
    sums[CASTLEGATE] = total

    # Dunmore: a quotation letter as a PDF, priced on Addendum 1 and excluding fire-stopping.
    a1 = _addendum_1_quantities()
    table, total = [], Decimal(0)
    for code, desc, unit, _ in ITEMS:
        rate = RATES[DUNMORE][code]
        if rate is None:
            table.append([code, desc, unit, f"{a1[code]:,}", "Excluded", "Excluded"])
            continue
        amount = Decimal(rate) * a1[code]
        total += amount
        table.append([code, desc, unit, f"{a1[code]:,}", rate, fmt_money(amount)])
    table.append(["", "Tender sum (excluding VAT)", "", "", "", fmt_money(total)])
    letter = [
        Heading("Dunmore Fit-Out Ltd - Quotation DFO-Q-2611"),
        Para(
            "To: Hallam & Rees Construction Ltd, Estimating Department. Project: Kestrel House, Levels 3-4 fit-out. "
            "Subcontract package 09: partitions, ceilings and floor finishes. Date: 19 November 2026."
        ),
        Para(
            "Thank you for the invitation to tender. We are pleased to submit our prices for package 09 "
            "below. Our tender is based on the bill of quantities as amended by Addendum No. 1, which we "
            "acknowledge."
        ),
        Table(["Item", "Description", "Unit", "Qty", "Rate (GBP)", "Amount (GBP)"], table),
        Heading("Exclusions and qualifications", 2),
        Para(
            "1. Fire-stopping to service penetrations (item 09-070) is excluded: we understand it is "
            "carried out by the mechanical and electrical subcontractor after the services are installed."
        ),
        Para("2. Prices are fixed for the duration of the works and exclude VAT."),
        Para(
            "3. We have allowed for working in an occupied building on Levels 1 and 2, as on our previous "
            "packages for you."
        ),
        Para("Yours faithfully, Aidan Dunmore, Managing Director"),
    ]
    paths.append(write_pdf(letter, inputs_dir / DUNMORE_PDF, title="Dunmore Fit-Out - quotation"))
    sums[DUNMORE] = total

    # Eastfield: a CSV export like Brightline's; the tender arrived after the closing time.
    rows, total = [], Decimal(0)
    for code, _desc, unit, _ in ITEMS:
        rate = Decimal(RATES[EASTFIELD][code])
        total += rate * cur[code]
        rows.append([code, unit, cur[code], f"{rate:.2f}", f"{rate * cur[code]:.2f}"])
    rows.append(["TOTAL", "", "", "", f"{total:.2f}"])
    paths.append(
        write_csv(inputs_dir / EASTFIELD_CSV, ["boq_ref", "unit", "quantity", "unit_rate", "line_total"], rows)
    )
    sums[EASTFIELD] = total

    # The tender opening register: clerks wrote dates in two formats; Castlegate's emailed copy was logged too.
    refs = [int(x) for x in g.choice(np.arange(400, 500), size=5, replace=False)]
    minutes = [int(x) for x in g.integers(0, 60, size=3)]
    received = {
        BRIGHTLINE: f"2026-11-18 10:{minutes[0]:02d}",
        CASTLEGATE: f"19/11/2026 15:{minutes[1]:02d}",
        DUNMORE: f"2026-11-20 11:{minutes[2]:02d}",
        EASTFIELD: LATE_RECEIPT.strftime("%d/%m/%Y %H:%M"),
    }
    acknowledged = {BRIGHTLINE: "1, 2", CASTLEGATE: "1, 2", DUNMORE: "1", EASTFIELD: "1, 2"}
    how = {
        BRIGHTLINE: "tender box",
        CASTLEGATE: "tender box",
        DUNMORE: "tender box",
        EASTFIELD: "hand delivered to reception",
    }
    reg = []
    for k, b in enumerate(BIDDERS):
        reg.append([f"T09-{refs[k]}", b, received[b], how[b], acknowledged[b], f"{sums[b]:.2f}", ""])
    reg.insert(
        2,
        [
            f"T09-{refs[4]}",
            CASTLEGATE,
            f"19/11/2026 15:{min(minutes[1] + 12, 59):02d}",
            "email",
            "1, 2",
            f"{sums[CASTLEGATE]:.2f}",
            "emailed copy of the tender-box submission",
        ],
    )
    paths.append(
        write_csv(
            inputs_dir / REGISTER_CSV,
            ["tender_ref", "bidder", "received", "received_by", "addenda_acknowledged", "tender_sum_gbp", "remarks"],
            reg,
        )
    )
    return paths


def _write_boq(inputs_dir: Path) -> Path:
    wb = openpyxl.Workbook()
    cover = wb.active
    cover.title = "Cover"
    for line in [
        "Hallam & Rees Construction Ltd - Kestrel House, Levels 3-4 office fit-out",
        "Subcontract package 09: partitions, ceilings and floor finishes",
        "Bill of quantities as issued with the invitation to tender, 2 November 2026",
        "Quantities are net, measured in square metres (m2) or number (nr). Changes are issued by addendum.",
        (
            "Sheets: BoQ (as issued), Addendum 1 (issued 6 November 2026), Allowances (estimator's rates, "
            "internal: not issued to tenderers)."
        ),
    ]:
        cover.append([line])
    cover["A1"].font = Font(bold=True)
    autosize(cover, {"A": 110})
    boq = wb.create_sheet("BoQ")
    boq.append(["Item", "Description", "Unit", "Quantity"])
    style_header(boq)
    for code, desc, unit, q in ITEMS:
        boq.append([code, desc, unit, q])
    autosize(boq, {"A": 9, "B": 64, "C": 6, "D": 10})
    add = wb.create_sheet("Addendum 1")
    add.append(["Addendum No. 1 - issued 6 November 2026"])
    add["A1"].font = Font(bold=True)
    add.append(["No.", "Item", "Change", "Quantity before", "Quantity after"])
    style_header(add, 2)
    add.append(
        [
            1,
            "09-020",
            "Description clarified: Rw 50 is the laboratory rating of the tested system. No change to quantity.",
            385,
            385,
        ]
    )
    add.append([2, "09-050", "Level 3 annex added to the carpet tile areas.", 1860, ADDENDUM_1["09-050"]])
    add.append([3, "09-060", "Additional tea point on Level 4.", 310, ADDENDUM_1["09-060"]])
    autosize(add, {"A": 5, "B": 8, "C": 90, "D": 16, "E": 15})
    allow = wb.create_sheet("Allowances")
    allow.append(["Item", "Unit", "Allowance rate (GBP)", "Basis"])
    style_header(allow)
    basis = {"09-070": "Specialist fire-stopping rate, Levels 1-2 final account"}
    for code, _, unit, _ in ITEMS:
        allow.append([code, unit, float(Decimal(ALLOWANCES[code])), basis.get(code, "Cost plan rate, Q4 2026")])
    autosize(allow, {"A": 9, "B": 6, "C": 20, "D": 56})
    return save_workbook(wb, inputs_dir / BOQ_XLSX)


def _write_rules(inputs_dir: Path) -> Path:
    rules = f"""Kestrel House, Levels 3-4 fit-out - subcontract package 09 (partitions, ceilings and floor finishes)
Instructions to tenderers and tender levelling rules - Hallam & Rees Construction Ltd, 2 November 2026

1. Closing time. Tenders must be received by {CLOSING:%H:%M} on Friday {CLOSING:%d %B %Y}, in the tender box or by hand
   at the site office. The time of receipt is the time recorded in the tender register. A tender received
   after the closing time is not evaluated, whatever its price.

2. Quantities. Tenderers price the bill of quantities (BoQ) as amended by every addendum issued. Where two
   addenda conflict, the later addendum governs.

3. Addenda. A tender that does not acknowledge an addendum is not rejected for that reason: it is levelled
   to the current quantities at the tenderer's own rates.

4. Arithmetic errors. Where an extension (quantity x rate) does not agree with the unit rate, the unit rate
   governs and the extension is corrected; the tender sum is corrected accordingly.

5. Units. Rates are levelled per BoQ unit. A rate quoted in another unit is converted to the BoQ unit
   before levelling (1 m2 = 10.7639 ft2).

6. Exclusions. An item that a tenderer excludes, leaves unpriced or qualifies as "by others" is priced for
   levelling at the estimator's allowance rate (BoQ workbook, sheet Allowances) times the current quantity.

7. Levelled total. The levelled total of a tender is the sum over all BoQ items of the tenderer's rate
   (converted under rule 5, or the allowance under rule 6) times the current quantity.

8. Award. The subcontract is awarded to the compliant tender with the lowest levelled total. Past
   performance, resources and programme were assessed at pre-qualification, which every invited
   tenderer passed; they are not award criteria at this stage.

9. A recommendation to award other than to the lowest compliant levelled tender needs the written
   approval of the Commercial Director, with the reasons and the cost of departing from rule 8.

10. Prices exclude VAT. Tenders remain open for acceptance for 90 days from the closing date.
"""
    return write_text(inputs_dir / RULES_TXT, rules)


def _write_addendum(inputs_dir: Path) -> Path:
    blocks = [
        Heading("Addendum No. 2"),
        Para(
            "Project: Kestrel House, Levels 3-4 fit-out. Subcontract package 09: partitions, ceilings and "
            "floor finishes. Issued 13 November 2026 by Hallam & Rees Construction Ltd, Estimating."
        ),
        Para("Tenderers shall price the following changes and acknowledge this addendum on the form of tender."),
        Heading("1. Carpet tile (item 09-050)", 2),
        Para(
            "The Level 3 annex has been omitted from the works. Item 2 of Addendum No. 1 is withdrawn and "
            f"superseded: the quantity of item 09-050 is {ADDENDUM_2['09-050']:,} m2. The other items of "
            "Addendum No. 1 are unchanged."
        ),
        Heading("2. Ceiling tiles (item 09-030)", 2),
        Para("Tile colour to be white to the manufacturer's standard range. No change to the quantity."),
        Heading("3. Closing time", 2),
        Para(f"The closing time is unchanged: {CLOSING:%H:%M} on Friday {CLOSING:%d %B %Y}."),
    ]
    return write_docx(blocks, inputs_dir / ADDENDUM_DOCX, title="Kestrel House - package 09 - Addendum No. 2")


# ------------------------------------------------------------------ the answer from the inputs alone


def _dec(v: object) -> Decimal:
    return Decimal(str(v).replace(",", "").strip())


def _parse_received(text: str) -> dt.datetime:
    """The register's two date formats: ISO (2026-11-18 10:42) and day-first (20/11/2026 14:37)."""
    for fmt in ("%Y-%m-%d %H:%M", "%d/%m/%Y %H:%M"):
        try:
            return dt.datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    raise ValueError(f"{REGISTER_CSV}: field 'received': {text!r} is in neither format the register uses")


def _read_quantities(inputs_dir: Path) -> tuple[dict[str, int], dict[str, Decimal], dict[str, str]]:
    """Current quantities (BoQ, Addendum 1, then Addendum 2, which governs), allowance rates and units."""
    from docx import Document

    wb = openpyxl.load_workbook(inputs_dir / BOQ_XLSX)
    qty = {r[0]: int(r[3]) for r in wb["BoQ"].iter_rows(min_row=2, values_only=True) if r[0]}
    units = {r[0]: r[2] for r in wb["BoQ"].iter_rows(min_row=2, values_only=True) if r[0]}
    for r in wb["Addendum 1"].iter_rows(min_row=3, values_only=True):
        if r[1]:
            qty[r[1]] = int(r[4])
    text = "\n".join(p.text for p in Document(str(inputs_dir / ADDENDUM_DOCX)).paragraphs)
    for code, q in re.findall(r"quantity of item (\d\d-\d{3}) is ([\d,]+) m2", text):
        qty[code] = int(q.replace(",", ""))
    allow = {r[0]: _dec(r[2]) for r in wb["Allowances"].iter_rows(min_row=2, values_only=True) if r[0]}
    return qty, allow, units


def compute(inputs_dir: Path) -> dict:
    """The rules' answer: who is excluded, each tender corrected and levelled, and the award."""
    inputs_dir = Path(inputs_dir)
    qty, allow, units = _read_quantities(inputs_dir)
    # A tender logged twice (the tender-box copy, then an emailed copy of it) is one tender: its first entry counts.
    first_entry: dict[str, dict[str, str]] = {}
    for r in read_csv_dicts(inputs_dir / REGISTER_CSV):
        first_entry.setdefault(r["bidder"], r)
    register = list(first_entry.values())
    received = {r["bidder"]: _parse_received(r["received"]) for r in register}
    submitted = {r["bidder"]: _dec(r["tender_sum_gbp"]) for r in register}
    late = [b for b in BIDDERS if received[b] > CLOSING]

    # Each tender's own lines: (quantity priced, rate per BoQ unit or None when excluded, extension as written).
    lines: dict[str, dict[str, tuple[Decimal, Decimal | None, Decimal | None]]] = {}
    bl = {r["item"]: r for r in read_csv_dicts(inputs_dir / BRIGHTLINE_CSV) if r["item"]}
    lines[BRIGHTLINE] = {c: (_dec(bl[c]["qty"]), _dec(bl[c]["rate_gbp"]), _dec(bl[c]["amount_gbp"])) for c in CODES}
    ws = openpyxl.load_workbook(inputs_dir / CASTLEGATE_XLSX)["Pricing"]
    cg = {r[0]: r for r in ws.iter_rows(min_row=3, values_only=True) if r[0]}
    lines[CASTLEGATE] = {}
    for c in CODES:
        _, _, unit, q, rate, amount = cg[c]
        per_unit = _dec(rate) * FT2_PER_M2 if unit == "SF" else _dec(rate)
        lines[CASTLEGATE][c] = (_dec(q), per_unit, _dec(amount))
    ea = {r["boq_ref"]: r for r in read_csv_dicts(inputs_dir / EASTFIELD_CSV)}
    lines[EASTFIELD] = {
        c: (_dec(ea[c]["quantity"]), _dec(ea[c]["unit_rate"]), _dec(ea[c]["line_total"])) for c in CODES
    }
    lines[DUNMORE] = _read_dunmore(inputs_dir)

    out: dict = {"qty": qty, "allow": allow, "units": units, "received": received, "submitted": submitted, "late": late}
    corrected, correction, levelled, allowances = {}, {}, {}, {}
    for b in BIDDERS:
        own = Decimal(0)
        for c in CODES:
            q, rate, _ = lines[b][c]
            if rate is not None:
                # The bidder's own extension, corrected at the unit rate (rule 4); in square feet for Castlegate.
                own += q * rate / FT2_PER_M2 if b == CASTLEGATE and units[c] == "m2" else q * rate
        corrected[b] = own.quantize(CENT, rounding=ROUND_HALF_UP)
        correction[b] = corrected[b] - submitted[b]
        lev, alw = Decimal(0), Decimal(0)
        for c in CODES:
            rate = lines[b][c][1]
            if rate is None:
                alw += allow[c] * qty[c]
                lev += allow[c] * qty[c]
            else:
                lev += rate * qty[c]
        levelled[b] = lev.quantize(CENT, rounding=ROUND_HALF_UP)
        allowances[b] = alw
    compliant = [b for b in BIDDERS if b not in late]
    winner = min(compliant, key=lambda b: levelled[b])
    out.update(
        lines=lines,
        corrected=corrected,
        correction=correction,
        levelled=levelled,
        allowances=allowances,
        compliant=compliant,
        winner=winner,
    )
    return out


def _read_dunmore(inputs_dir: Path) -> dict[str, tuple[Decimal, Decimal | None, Decimal | None]]:
    """Dunmore's priced lines from its PDF quotation (an excluded item has no rate)."""
    from pypdf import PdfReader

    text = "\n".join(page.extract_text() or "" for page in PdfReader(str(inputs_dir / DUNMORE_PDF)).pages)
    out = {}
    for c in CODES:
        m = re.search(
            re.escape(c) + r".*?(?:m2|nr)\s+([\d,]+)\s+(Excluded|[\d.]+)\s+(Excluded|[\d,]+\.\d\d)", text, re.S
        )
        if m is None:
            raise ValueError(f"{DUNMORE_PDF}: item {c} not found in the quotation's table")
        q = _dec(m.group(1))
        out[c] = (q, None, None) if m.group(2) == "Excluded" else (q, _dec(m.group(2)), _dec(m.group(3)))
    return out


# ------------------------------------------------------------------ the gold deliverables


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful estimator would: a formula-driven tabulation and the award memo."""
    a = compute(inputs_dir)
    outputs_dir = Path(outputs_dir)
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = _write_tabulation(a, outputs_dir / TAB_XLSX)
    memo = _write_memo(a, outputs_dir / MEMO_DOCX)
    record = write_completion_record(
        outputs_dir,
        [TAB_XLSX, MEMO_DOCX],
        questions=[
            "Will Brightline Interiors confirm in writing that its tender stands at the corrected sum for item 09-030?"
        ],
        notes=(
            "Eastfield Partitions' tender arrived after the closing time and was not evaluated. Dunmore "
            "Fit-Out's tender was levelled to Addendum 2's carpet quantity, with fire-stopping priced at the "
            "allowance."
        ),
    )
    return [book, memo, record]


def _write_tabulation(a: dict, path: Path) -> Path:
    wb = openpyxl.Workbook()
    tab = wb.active
    tab.title = "Tabulation"
    rates = wb.create_sheet("Bid rates")
    lev = wb.create_sheet("Levelling")
    n = len(CODES)
    first, last = 3, 2 + n  # item rows on Bid rates and Levelling

    # Bid rates: each tender's own quantities, rates and extensions as submitted, and the extensions corrected.
    rates.append(
        ["Tenders as submitted (own quantities, quoted units); corrected extension = quantity x rate (tender rule 4)"]
    )
    rates["A1"].font = Font(bold=True)
    head = ["Item"]
    for b in BIDDERS:
        s = SHORT[b]
        head += [f"{s} unit", f"{s} qty", f"{s} rate", f"{s} amount as submitted", f"{s} amount corrected"]
    rates.append(head)
    style_header(rates, 2)
    for k, c in enumerate(CODES):
        r = first + k
        row: list = [c]
        for j, b in enumerate(BIDDERS):
            q, rate, amount = a["lines"][b][c]
            col = 2 + 5 * j
            unit = ("SF" if a["units"][c] == "m2" else "EA") if b == CASTLEGATE else a["units"][c]
            shown_rate = rate / FT2_PER_M2 if b == CASTLEGATE and a["units"][c] == "m2" else rate
            qcell = _at(r, col + 1)
            rcell = _at(r, col + 2)
            row += [
                unit,
                float(q),
                float(shown_rate.quantize(CENT)) if shown_rate is not None else "excluded",
                float(amount) if amount is not None else "excluded",
                f"=ROUND({qcell}*{rcell},2)" if rate is not None else 0,
            ]
        rates.append(row)
    tot = last + 1
    row = ["Tender sum"]
    for j in range(len(BIDDERS)):
        col = 2 + 5 * j
        sub = get_column_letter(col + 3)
        cor = get_column_letter(col + 4)
        row += ["", "", "", f"=SUM({sub}{first}:{sub}{last})", f"=SUM({cor}{first}:{cor}{last})"]
    rates.append(row)
    autosize(rates, {"A": 12})

    # Levelling: every tender evaluated (received in time) at its rate per BoQ unit times the current quantity;
    # exclusions at the allowance.
    ev = a["compliant"]
    lev.append(
        [
            "Levelled to the current quantities (BoQ + Addendum 1 + Addendum 2, the later governing); "
            "rates per BoQ unit; exclusions at the estimator's allowance (tender rules 2, 5, 6, 7)"
        ]
    )
    lev["A1"].font = Font(bold=True)
    head = ["Item", "Unit", "Qty as issued", "Current qty", "Allowance rate"]
    for b in ev:
        head += [f"{SHORT[b]} rate per BoQ unit", f"{SHORT[b]} levelled amount"]
    lev.append(head)
    style_header(lev, 2)
    iss = issued()
    for k, c in enumerate(CODES):
        r = first + k
        row = [c, a["units"][c], iss[c], a["qty"][c], float(a["allow"][c])]
        for j, b in enumerate(ev):
            src = _at(r, 2 + 5 * BIDDERS.index(b) + 2)
            rcol = _at(r, 6 + 2 * j)
            if a["lines"][b][c][1] is None:
                row += [f"=E{r}", f"=ROUND(D{r}*{rcol},2)"]  # excluded: the allowance rate (rule 6)
            elif b == CASTLEGATE and a["units"][c] == "m2":
                row += [f"='Bid rates'!{src}*$B${tot + 2}", f"=D{r}*{rcol}"]  # per ft2 to per m2 (rule 5)
            else:
                row += [f"='Bid rates'!{src}", f"=ROUND(D{r}*{rcol},2)"]
        lev.append(row)
    row = ["Levelled total", "", "", "", ""]
    for j in range(len(ev)):
        colL = get_column_letter(7 + 2 * j)
        row += ["", f"=ROUND(SUM({colL}{first}:{colL}{last}),2)"]
    lev.append(row)
    lev.append([])
    lev.append(["ft2 per m2", float(FT2_PER_M2)])
    lev.append(["Reconciliation", "", "", "", ""] + sum(([SHORT[b], ""] for b in ev), []))
    # The bridge from each tender as submitted to its levelled total, line by line; the check line must be nil.
    recon = tot + 3
    labels = [
        "Tender sum as submitted",
        "Arithmetic corrections (rule 4)",
        "Quantity and unit adjustments (rules 2, 3, 5)",
        "Exclusions priced at allowance (rule 6)",
        "Bridge total",
        "Check: bridge total less levelled total",
    ]
    for i, lab in enumerate(labels):
        r = recon + 1 + i
        row = [lab, "", "", "", ""]
        for j, b in enumerate(ev):
            sub = _at(tot, 2 + 5 * BIDDERS.index(b) + 3)
            cor = _at(tot, 2 + 5 * BIDDERS.index(b) + 4)
            col = get_column_letter(7 + 2 * j)
            here = col
            excl = [f"{col}{first + k}" for k, c in enumerate(CODES) if a["lines"][b][c][1] is None]
            if i == 0:
                f = f"='Bid rates'!{sub}"
            elif i == 1:
                f = f"=ROUND('Bid rates'!{cor}-'Bid rates'!{sub},2)"
            elif i == 2:
                # Item by item: the levelled amount of each priced item less the tender's own corrected extension.
                f = f"=ROUND(SUM({col}{first}:{col}{last})-{'-'.join(excl) + '-' if excl else ''}'Bid rates'!{cor},2)"
            elif i == 3:
                f = "=" + "+".join(excl) if excl else 0
            elif i == 4:
                f = f"=SUM({here}{recon + 1}:{here}{recon + 4})"
            else:
                f = f"=ROUND({here}{recon + 5}-{col}{tot},2)"
            row += ["", f]
        lev.append(row)
    autosize(lev, {"A": 40, "B": 6, "C": 12, "D": 11, "E": 14})

    # Tabulation: one row per tender received.
    tab.append(
        [
            "Bidder",
            "Status",
            "Received",
            "Addenda acknowledged",
            "Tender sum as submitted",
            "Arithmetic correction (corrected - submitted)",
            "Levelled total",
            "Rank",
        ]
    )
    style_header(tab)
    ack = {BRIGHTLINE: "1, 2", CASTLEGATE: "1, 2", DUNMORE: "1 only", EASTFIELD: "1, 2"}
    ranked = sorted(a["compliant"], key=lambda b: a["levelled"][b])
    for j, b in enumerate(BIDDERS):
        r = 2 + j
        cor = _at(tot, 2 + 5 * j + 4)
        if b in a["late"]:
            status = (
                f"Excluded - received {a['received'][b]:%d %b %Y %H:%M}, after the {CLOSING:%H:%M} closing "
                "time (rule 1)"
            )
            tab.append(
                [
                    b,
                    status,
                    a["received"][b].strftime("%Y-%m-%d %H:%M"),
                    ack[b],
                    float(a["submitted"][b]),
                    "not evaluated",
                    "not evaluated",
                    "",
                ]
            )
        else:
            L = _at(tot, 7 + 2 * ev.index(b))
            tab.append(
                [
                    b,
                    "Compliant - received before the closing time",
                    a["received"][b].strftime("%Y-%m-%d %H:%M"),
                    ack[b],
                    float(a["submitted"][b]),
                    f"=ROUND('Bid rates'!{cor}-E{r},2)",
                    f"=Levelling!{L}",
                    ranked.index(b) + 1,
                ]
            )
    for r in range(2, 2 + len(BIDDERS)):
        for col in "EFG":
            tab[f"{col}{r}"].number_format = "#,##0.00"
    tab.append([])
    win = ev.index(a["winner"])
    tab.append(["Recommended bidder", a["winner"]])
    tab.append(["Recommended subcontract sum (levelled)", f"=Levelling!{_at(tot, 7 + 2 * win)}"])
    tab.cell(row=tab.max_row, column=2).number_format = "#,##0.00"
    autosize(tab, {"A": 38, "B": 70, "C": 17, "D": 12, "E": 16, "F": 22, "G": 16, "H": 6})
    return save_workbook(wb, path)


def _write_memo(a: dict, path: Path) -> Path:
    lv, sub, cor = a["levelled"], a["submitted"], a["correction"]
    win = a["winner"]
    runner = sorted(a["compliant"], key=lambda b: lv[b])[1]
    gap = lv[runner] - lv[win]
    late = a["late"][0]
    slip_code = BRIGHTLINE_SLIP[0]
    q, rate, written = a["lines"][BRIGHTLINE][slip_code]
    excl_qty = a["qty"][DUNMORE_EXCLUDED]
    excl_allow = a["allow"][DUNMORE_EXCLUDED]
    a1 = _addendum_1_quantities()["09-050"]
    cur_carpet = a["qty"]["09-050"]
    carpet_adj = (cur_carpet - a1) * a["lines"][DUNMORE]["09-050"][1]
    blocks = [
        Heading("Recommendation"),
        Para(
            f"I recommend awarding subcontract package 09 to {win} at its levelled total of GBP "
            f"{fmt_money(lv[win])}, the lowest compliant levelled tender under rule 8 of the tender rules."
        ),
        Heading("Bids received"),
        Para(
            "Four tenders for subcontract package 09 (partitions, ceilings and floor finishes) are "
            "recorded in the tender register. Brightline Interiors, Castlegate Drywall & Ceilings and "
            f"Dunmore Fit-Out used the tender box; {late} delivered its tender by hand to reception. The "
            "register also lists an emailed copy of Castlegate's tender: it is the same tender as the "
            "tender-box copy and is counted once. The register writes some receipt times day-first and "
            "others year-first; they were read as dates before being compared with the closing time."
        ),
        Table(
            ["Bidder", "Received", "Addenda", "Tender sum as submitted (GBP)"],
            [
                [
                    b,
                    a["received"][b].strftime("%d %b %Y %H:%M"),
                    "1, 2" if b != DUNMORE else "1 only",
                    fmt_money(sub[b]),
                ]
                for b in BIDDERS
            ],
        ),
        Heading("Compliance"),
        Para(
            "The closing time in rule 1 of the tender rules was 14:00 on Friday 20 November 2026, "
            f"confirmed unchanged by Addendum No. 2. {late} was received at {a['received'][late]:%H:%M} on "
            f"{a['received'][late]:%d %B %Y}, after the closing time, and is excluded from the evaluation "
            "although it carries the lowest price on the register."
        ),
        Para(
            "Brightline Interiors, Castlegate Drywall & Ceilings and Dunmore Fit-Out were received before "
            "the closing time and are admitted to levelling. Dunmore acknowledged Addendum No. 1 only; "
            "rule 3 does not reject a tender for that, so Dunmore is levelled to the current quantities "
            "at its own rates."
        ),
        Heading("Levelling"),
        Para(
            "Every admitted tender was levelled to the current quantities: the BoQ as issued, amended by "
            "Addendum No. 1 and then by Addendum No. 2, which withdraws Addendum 1's carpet tile quantity "
            f"for item 09-050 ({a1:,} m2) and sets it at {cur_carpet:,} m2. Addendum 1's increase of the "
            f"sheet vinyl, item 09-060, to {a['qty']['09-060']:,} m2 still stands."
        ),
        Para(
            f"Brightline Interiors extended item {slip_code} ({int(q):,} m2 at {rate:.2f}) as "
            f"{fmt_money(written)} instead of {fmt_money(q * rate)}. Under rule 4 the unit rate governs, "
            f"so the tender sum of {fmt_money(sub[BRIGHTLINE])} is corrected by "
            f"{fmt_money(cor[BRIGHTLINE])} to {fmt_money(a['corrected'][BRIGHTLINE])}."
        ),
        Para(
            "Castlegate Drywall & Ceilings quoted its area rates per square foot on quantities converted "
            "to square feet. Under rule 5 each rate was converted to a rate per square metre at 10.7639 "
            "square feet to the square metre before being applied to the current quantities; its "
            "fire-stopping rate is per penetration and was used as quoted. Its levelled total of "
            f"{fmt_money(lv[CASTLEGATE])} differs from its tender sum by "
            f"{fmt_money(lv[CASTLEGATE] - sub[CASTLEGATE])}, the rounding of its quantities to whole "
            "square feet."
        ),
        Para(
            f"Dunmore Fit-Out excluded fire-stopping to service penetrations, item {DUNMORE_EXCLUDED}, as "
            "work of the mechanical and electrical subcontractor. Under rule 6 the item is priced at the "
            f"estimator's allowance of {excl_allow:.2f} per penetration for {excl_qty} penetrations, "
            f"{fmt_money(excl_allow * excl_qty)}. Its carpet was priced on {a1:,} m2 and is levelled to "
            f"{cur_carpet:,} m2 at its own rate, a reduction of {fmt_money(-carpet_adj)}. Its levelled "
            f"total is therefore {fmt_money(sub[DUNMORE])} less {fmt_money(-carpet_adj)} plus "
            f"{fmt_money(excl_allow * excl_qty)}, {fmt_money(lv[DUNMORE])}."
        ),
        Table(
            ["Bidder", "Tender sum as submitted", "Arithmetic correction", "Levelled total", "Rank"],
            [
                [b, fmt_money(sub[b]), fmt_money(cor[b]), fmt_money(lv[b]), str(k + 1)]
                for k, b in enumerate(sorted(a["compliant"], key=lambda x: lv[x]))
            ],
        ),
        Para(
            "Each levelled total ties to the tender as submitted plus its arithmetic corrections, "
            "quantity and unit adjustments and allowances; the bridge is on the Levelling sheet of "
            "bid_tabulation.xlsx, where every figure is a formula and the check line is nil for every "
            "tender."
        ),
        Heading("Reasons"),
        Para(
            f"{win}'s tender is the lowest compliant levelled tender, and rule 8 of the tender rules makes "
            "that the only award criterion at this stage. I know the project team would prefer Dunmore "
            "Fit-Out to carry on from Levels 1 and 2, and its figure on the register looks the keenest of "
            "the tenders received in time. Levelled on the same basis as the others, with its "
            "fire-stopping exclusion priced at the allowance and its carpet brought to Addendum No. 2, "
            f"Dunmore's total is GBP {fmt_money(lv[runner])}, GBP {fmt_money(gap)} above {win}. Past "
            "performance was assessed at pre-qualification and is not an award criterion at this stage. "
            f"Placing the package with Dunmore instead would cost GBP {fmt_money(gap)} more. Rule 9 allows "
            "a departure from the lowest compliant tender only with the Commercial Director's written "
            "approval and reasons, and none arise from the tenders."
        ),
        Para(
            f"Before the order is placed, {win} should confirm in writing that it stands by its rates and "
            "by the corrected tender sum, and the fire-stopping scope should be confirmed with the "
            "mechanical and electrical subcontractor so that it is neither paid twice nor missed."
        ),
    ]
    return write_docx(blocks, path, title="Award recommendation - Kestrel House package 09")
