"""SCM-01, supply-chain planning: January material requirements plan and expedite list for a product family.

The planner nets the January 2027 requirements of the TrailFlame camping-stove
family (TF-100, TF-200, TF-300) down the bills of material against stock,
safety stock and open purchase orders, sizes the planned orders to the
suppliers' lot rules and names the components whose planned orders must be
expedited: those whose supplier lead time is longer than the 28 days from the
plan release (7 December 2026) to the build start (4 January 2027).

Planted facts:

- The forecast lists TF-300's January figure twice: version 1 (800, published
  10 November) and version 2 (650, 28 November); the latest version governs.
  Gross requirements: TF-100 1,200, TF-200 900, TF-300 650.
- The BOM workbook holds TF-200 revision B (superseded on 1 December 2026)
  beside revision C, which replaces burner BR-20 with BR-22 (ECO-2611). On
  revision C, BR-22 nets to 800 (planned 1,000, lead 35 days: expedite) and
  BR-20 to 0; on revision B, BR-20 would net 600 (expedite) and BR-22 nothing.
- Inventory counts O-ring SEAL-05 in packs of 10: 620 PK10 = 6,200 each,
  against a gross 5,500 + safety stock 500: net 0. Read as 620 each it would
  net 5,380 (lead 30 days: expedite).
- Open PO PO-41187 (VLV-14, 1,200) was cancelled by Orrin Valve Co. in a
  supplier notice of 2 December 2026; without it VLV-14 nets 1,100 (planned
  1,500, lead 49 days: expedite). Counting it, VLV-14 nets 0.
- Policy exception: single-source igniter IGN-30 holds safety stock of 40 %
  of the month's gross requirement (620) instead of the item master's 150;
  it nets 470 (planned 500, lead 56 days: expedite). With 150 it nets 0.
- PO-41203 (BOX-TF, 1,000) is exported twice; counted once BOX-TF nets 1,100
  (planned 1,250).
- HSE-08's lead time is exactly the 28 days available: it arrives on the
  build date and is not expedited (the policy expedites only a lead time
  longer than the days available).
- Expedite set: BR-22, IGN-30, VLV-14. PSL-12 plans 1,000 (1,500 on the
  superseded forecast, on which SEAL-05 would also net 100 and be expedited).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from decimal import ROUND_CEILING, Decimal
from pathlib import Path

import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import (
    autosize,
    iso_or_day_first,
    read_csv_dicts,
    rng,
    style_header,
    write_completion_record,
)
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_text

# The generator's one random source: it draws the December and February forecasts (not planned here) and the POs' order
# dates.
SEED = 771204

FORECAST_CSV = "demand_forecast.csv"
BOM_XLSX = "bom_trailflame.xlsx"
INVENTORY_CSV = "inventory.csv"
POS_CSV = "open_purchase_orders.csv"
NOTICES_CSV = "supplier_notices.csv"
TERMS_DOCX = "supplier_terms.docx"
POLICY_TXT = "planning_policy.txt"
PLAN_XLSX = "mrp_plan.xlsx"
MEMO_DOCX = "expedite_memo.docx"

MONTH = "2027-01"
RELEASE = dt.date(2026, 12, 7)
NEED = dt.date(2027, 1, 4)
SS_SINGLE_SOURCE = Decimal("0.40")
SKUS = ["TF-100", "TF-200", "TF-300"]
SKU_NAMES = {
    "TF-100": "TrailFlame 100 single-burner stove",
    "TF-200": "TrailFlame 200 stove with piezo ignition",
    "TF-300": "TrailFlame 300 remote-canister stove",
}

# component, description, uom in stock, on hand (in that uom), item-master safety stock (each)
COMPONENTS = [
    ("BDY-10", "Stove body, pressed aluminium", "EA", 1900, 300),
    ("BR-20", "Burner head, 2.6 kW, brass", "EA", 1650, 150),
    ("BR-22", "Burner head, 2.8 kW, stainless, flame spreader", "EA", 400, 150),
    ("VLV-14", "Needle valve assembly with spindle", "EA", 1100, 250),
    ("IGN-30", "Piezo igniter with lead and electrode", "EA", 1500, 150),
    ("SEAL-05", "O-ring, fluorocarbon, 9 x 1.5 mm", "PK10", 620, 500),
    ("HSE-08", "Braided fuel hose, 400 mm, with fittings", "EA", 300, 100),
    ("PSL-12", "Pot support, folding, set of three arms", "EA", 2000, 200),
    ("KNB-03", "Control knob, glass-filled nylon", "EA", 3400, 300),
    ("BOX-TF", "Retail carton, printed, family size", "EA", 900, 250),
]
CODES = [c[0] for c in COMPONENTS]
PACK = {"EA": 1, "PK10": 10}

# Bills of material, quantity per stove. TF-200 revision B (superseded) used BR-20 where C uses BR-22.
_COMMON = {"BDY-10": 1, "VLV-14": 1, "SEAL-05": 2, "PSL-12": 1, "KNB-03": 1, "BOX-TF": 1}
BOMS = {
    "TF-100": {**_COMMON, "BR-20": 1},
    "TF-200 rev B": {**_COMMON, "BR-20": 1, "IGN-30": 1},
    "TF-200 rev C": {**_COMMON, "BR-22": 1, "IGN-30": 1},
    "TF-300": {**_COMMON, "BR-22": 1, "IGN-30": 1, "HSE-08": 1},
}
EFFECTIVE = {"TF-100": "TF-100", "TF-200": "TF-200 rev C", "TF-300": "TF-300"}

# January forecasts: TF-300 appears in two versions; the later one governs.
JANUARY = [
    ("TF-100", 1200, 2, "2026-11-28"),
    ("TF-200", 900, 2, "2026-11-28"),
    ("TF-300", 800, 1, "2026-11-10"),
    ("TF-300", 650, 2, "2026-11-28"),
]

# component, supplier, lead time as the terms state it, minimum order (each), order multiple (each), unit of sale
TERMS = [
    ("BDY-10", "Aldworth Castings Ltd", "9 weeks", 500, 100, "each"),
    ("BR-20", "Vantor Burners GmbH", "6 weeks", 250, 250, "each"),
    ("BR-22", "Vantor Burners GmbH", "5 weeks", 250, 250, "each"),
    ("VLV-14", "Orrin Valve Co.", "7 weeks", 500, 500, "each"),
    ("IGN-30", "Kwan Piezo Components", "8 weeks", 100, 100, "each"),
    ("SEAL-05", "Medway Seals Ltd", "30 days", 1000, 10, "packs of 10"),
    ("HSE-08", "Flexline Hose Ltd", "4 weeks", 200, 200, "each"),
    ("PSL-12", "Aldworth Castings Ltd", "14 days", 500, 500, "each"),
    ("KNB-03", "Pressform Plastics", "28 days", 1000, 500, "each"),
    ("BOX-TF", "Corrapak Packaging", "10 days", 250, 250, "each"),
]
SUPPLIER = {t[0]: t[1] for t in TERMS}

# po, component, quantity (each), due date as exported (two formats), status in the ERP
CANCELLED_PO = "PO-41187"
DUPLICATED_PO = "PO-41203"
OPEN_POS = [
    ("PO-41152", "BDY-10", 1500, "2026-12-18", "Open"),
    ("PO-41166", "BR-22", 500, "21/12/2026", "Open"),
    (CANCELLED_PO, "VLV-14", 1200, "2026-12-22", "Open"),
    ("PO-41190", "VLV-14", 800, "30/12/2026", "Open"),
    ("PO-41195", "IGN-30", 200, "2026-12-29", "Open"),
    (DUPLICATED_PO, "BOX-TF", 1000, "17/12/2026", "Open"),
]


def lead_days(text: str, where: str = TERMS_DOCX) -> int:
    """A lead time as the terms state it ('5 weeks', '30 days') in calendar days."""
    m = re.fullmatch(r"\s*(\d+)\s*(week|day)s?\s*", text, re.I)
    if m is None:
        raise ValueError(f"{where}: lead time {text!r} is neither in weeks nor in days")
    return int(m.group(1)) * (7 if m.group(2).lower() == "week" else 1)


def lot(net: int, moq: int, multiple: int) -> int:
    """The planned order for a net requirement: nothing for none, else the multiple above it, at least the minimum."""
    if net <= 0:
        return 0
    return max(moq, math.ceil(net / multiple) * multiple)


# ------------------------------------------------------------------ inputs


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    g = rng(SEED)
    inputs_dir = Path(inputs_dir)
    paths = []

    # Forecast: December (already in the build) and February (next plan) from the seed, January as planted.
    rows = []
    for sku in SKUS:
        rows.append([sku, "2026-12", int(g.integers(9, 14)) * 100, 2, "2026-10-30"])
    for sku, qty, ver, pub in JANUARY:
        rows.append([sku, MONTH, qty, ver, pub])
    for sku in SKUS:
        rows.append([sku, "2027-02", int(g.integers(7, 12)) * 100, 1, "2026-11-28"])
    paths.append(write_csv(inputs_dir / FORECAST_CSV, ["sku", "month", "forecast_units", "version", "published"], rows))

    paths.append(_write_bom(inputs_dir))

    rows = [[c, d, uom, oh, ss] for c, d, uom, oh, ss in COMPONENTS]
    paths.append(
        write_csv(inputs_dir / INVENTORY_CSV, ["item", "description", "uom", "on_hand", "safety_stock_each"], rows)
    )

    # Open POs as the ERP exports them; the duplicated line is an export glitch, the cancelled one still shows as open.
    ordered = [RELEASE - dt.timedelta(days=int(g.integers(20, 60))) for _ in OPEN_POS]
    rows = []
    for (po, item, qty, due, status), od in zip(OPEN_POS, ordered, strict=True):
        rows.append([po, item, SUPPLIER[item], od.isoformat(), qty, "EA", due, status])
        if po == DUPLICATED_PO:
            rows.append([po, item, SUPPLIER[item], od.isoformat(), qty, "EA", due, status])
    paths.append(
        write_csv(
            inputs_dir / POS_CSV,
            ["po_number", "item", "supplier", "order_date", "qty", "uom", "due_date", "status"],
            rows,
        )
    )

    notices = [
        [
            "2026-11-26",
            "Vantor Burners GmbH",
            "PO-41166",
            "Order confirmation",
            "We confirm PO-41166 for 500 BR-22 burner heads, delivery 21 December 2026.",
        ],
        [
            "2026-11-30",
            "Kwan Piezo Components",
            "",
            "Price list 2027",
            "Our 2027 price list applies to orders placed from 1 January 2027. Lead times are unchanged.",
        ],
        [
            "2026-12-02",
            "Orrin Valve Co.",
            CANCELLED_PO,
            "Cancellation of your order",
            (
                "Following your buyer's request of 1 December to move the valve volume to the new spindle "
                f"design, we have cancelled {CANCELLED_PO} (1,200 VLV-14) in full. Nothing will ship against "
                "it. PO-41190 is not affected."
            ),
        ],
        [
            "2026-12-03",
            "Corrapak Packaging",
            DUPLICATED_PO,
            "Delivery booking",
            f"Delivery of {DUPLICATED_PO}, 1,000 cartons, booked for 17/12/2026 at the Halden dock.",
        ],
    ]
    paths.append(write_csv(inputs_dir / NOTICES_CSV, ["date", "supplier", "po_number", "subject", "message"], notices))

    table = [[c, s, lt, f"{moq:,}", f"{mult:,}", unit] for c, s, lt, moq, mult, unit in TERMS]
    blocks = [
        Heading("Halden Outdoor Equipment - approved supplier terms, TrailFlame components"),
        Para(
            "Issued by Purchasing, 1 December 2026. These terms apply to every purchase order placed from "
            "that date. Lead times are from the date the order is placed to the date the goods are "
            "received at the Halden dock, in calendar days or weeks."
        ),
        Table(
            [
                "Component",
                "Approved supplier",
                "Lead time",
                "Minimum order (each)",
                "Order multiple (each)",
                "Unit of sale",
            ],
            table,
        ),
        Heading("Notes", 2),
        Para(
            "Order quantities below the minimum are raised to the minimum; above it, they are rounded up "
            "to the order multiple."
        ),
        Para("Medway Seals sells O-rings only in sealed packs of 10; the minimum of 1,000 each is 100 packs."),
        Para(
            "Kwan Piezo Components is the only approved source for the piezo igniter since Brenner "
            "Ignition was removed from the approved list in October 2026; every other component has a "
            "second approved source for contingency."
        ),
    ]
    paths.append(write_docx(blocks, inputs_dir / TERMS_DOCX, title="Approved supplier terms"))

    policy = f"""Halden Outdoor Equipment - Supply planning policy (rev. 7, November 2026)

1. Horizon. The monthly plan covers the next calendar month's build. The plan for
   January 2027 is released on Monday {RELEASE.day} {RELEASE:%B %Y}; the January build starts
   on Monday {NEED.day} {NEED:%B %Y}, and every component must be on hand by that date.
2. Demand. Use the latest published version of the forecast for each product and
   month; earlier versions are superseded. Gross requirement of a component = sum
   over products of forecast units x quantity per unit on the BOM revision in
   effect on the build start date.
3. Units. Plan every component in each (pieces). Stock held in packs is converted
   at the pack size stated in its unit of measure (PK10 = 10 each).
4. Supply. Count stock on hand and open purchase orders due on or before the build
   start date. An order the supplier has cancelled is not supply, whatever the
   ERP status says. Count each purchase order once.
5. Safety stock. Hold the item master safety stock (safety_stock_each in the
   inventory file) for each component.
6. Net requirement = gross requirement + safety stock - on hand - open PO receipts,
   and nil when that is negative.
7. Planned orders. Size each planned order on the supplier terms: nil for a nil net
   requirement; otherwise the net requirement rounded up to the order multiple,
   and never below the minimum order.
8. Expediting. A planned order placed on the release date arrives after the
   supplier lead time. When the lead time in calendar days is longer than the days
   from the release date to the build start, the component must be expedited
   (buyer to negotiate a pull-in or a premium freight). An order whose lead time
   equals the days available arrives on the build date and is not expedited.
9. Rounding. Quantities are whole units; do not round the net requirement before
   sizing the order.

Exception QA-2026-11 (approved by the Operations Director, 12 November 2026):
single-source components carry safety stock equal to 40% of the month's gross
requirement instead of the item master figure in rule 5, until a second source
is qualified. Purchasing's supplier terms say which components are single-source.
"""
    paths.append(write_text(inputs_dir / POLICY_TXT, policy))
    return paths


def _write_bom(inputs_dir: Path) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Index"
    ws.append(["Product", "Revision", "Sheet", "Status", "Effective from", "Effective to"])
    style_header(ws)
    ws.append(["TF-100", "D", "TF-100", "Released", "2025-09-01", ""])
    ws.append(["TF-200", "B", "TF-200 rev B", "Superseded", "2026-03-01", "2026-11-30"])
    ws.append(["TF-200", "C", "TF-200 rev C", "Released", "2026-12-01", ""])
    ws.append(["TF-300", "A", "TF-300", "Released", "2026-05-15", ""])
    autosize(ws, {"A": 10, "B": 10, "C": 16, "D": 12, "E": 15, "F": 15})
    desc = {c: d for c, d, *_ in COMPONENTS}
    for sheet, bom in BOMS.items():
        s = wb.create_sheet(sheet)
        s.append(["Component", "Description", "Qty per", "UoM"])
        style_header(s)
        for code in CODES:
            if code in bom:
                s.append([code, desc[code], bom[code], "EA"])
        autosize(s, {"A": 11, "B": 48, "C": 9, "D": 6})
    eco = wb.create_sheet("Revisions")
    eco.append(["ECO", "Product", "From rev", "To rev", "Effective", "Change"])
    style_header(eco)
    eco.append(["ECO-2603", "TF-200", "A", "B", "2026-03-01", "Pot support PSL-12 replaces PSL-10 (folding arms)."])
    eco.append(
        [
            "ECO-2611",
            "TF-200",
            "B",
            "C",
            "2026-12-01",
            "Burner BR-22 (2.8 kW, stainless) replaces BR-20 on TF-200; BR-20 remains on TF-100.",
        ]
    )
    autosize(eco, {"A": 10, "B": 9, "C": 9, "D": 8, "E": 12, "F": 90})
    return save_workbook(wb, inputs_dir / BOM_XLSX)


# ------------------------------------------------------------------ the answer from the inputs


def _int(text: str, where: str) -> int:
    try:
        return int(str(text).replace(",", "").strip())
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a whole number") from None


def read_terms(inputs_dir: Path) -> dict[str, dict]:
    """The supplier terms table of the docx: component -> supplier, lead days, minimum, multiple."""
    import docx

    doc = docx.Document(str(Path(inputs_dir) / TERMS_DOCX))
    out: dict[str, dict] = {}
    for table in doc.tables:
        for row in table.rows[1:]:
            cells = [c.text.strip() for c in row.cells]
            where = f"{TERMS_DOCX}, {cells[0]}"
            out[cells[0]] = {
                "supplier": cells[1],
                "lead": lead_days(cells[2], where),
                "lead_text": cells[2],
                "moq": _int(cells[3], where),
                "multiple": _int(cells[4], where),
            }
    text = " ".join(p.text for p in doc.paragraphs)
    # The note names the single source by supplier; the component is the one that supplier alone provides.
    m = re.search(r"(\w+ \w+ \w+) is the only approved source", text)
    if m is None:
        raise ValueError(f"{TERMS_DOCX}: no single-source note")
    single = [c for c, t in out.items() if t["supplier"] == m.group(1)]
    for c in out:
        out[c]["single_source"] = c in single
    return out


def compute(inputs_dir: Path) -> dict:
    """The plan as the policy defines it, from the inputs alone."""
    inputs_dir = Path(inputs_dir)
    # Forecast: January, the latest version of each product.
    latest: dict[str, tuple[int, int]] = {}
    for k, r in enumerate(read_csv_dicts(inputs_dir / FORECAST_CSV), start=2):
        if r["month"] != MONTH:
            continue
        ver = _int(r["version"], f"{FORECAST_CSV} row {k}, version")
        if r["sku"] not in latest or ver > latest[r["sku"]][0]:
            latest[r["sku"]] = (ver, _int(r["forecast_units"], f"{FORECAST_CSV} row {k}, forecast_units"))
    forecast = {s: latest[s][1] for s in SKUS}

    # BOM: the revision in effect on the build start date, per the Index sheet.
    wb = openpyxl.load_workbook(inputs_dir / BOM_XLSX, read_only=True)
    sheets = {}
    for prod, _, sheet, _, frm, to in list(wb["Index"].iter_rows(min_row=2, values_only=True)):
        where = f"{BOM_XLSX} Index {prod}"
        if iso_or_day_first(str(frm), where) <= NEED and (not to or iso_or_day_first(str(to), where) >= NEED):
            sheets[prod] = sheet
    qty_per = {
        s: {str(r[0]): int(r[2]) for r in wb[sheets[s]].iter_rows(min_row=2, values_only=True) if r[0]} for s in SKUS
    }

    terms = read_terms(inputs_dir)
    inv = {r["item"]: r for r in read_csv_dicts(inputs_dir / INVENTORY_CSV)}
    cancelled = {
        r["po_number"]
        for r in read_csv_dicts(inputs_dir / NOTICES_CSV)
        if re.search(r"cancel", r["subject"] + r["message"], re.I)
        and re.search(r"cancelled\s+" + re.escape(r["po_number"]), r["message"])
    } - {""}
    receipts = {c: 0 for c in CODES}
    seen = set()
    for k, r in enumerate(read_csv_dicts(inputs_dir / POS_CSV), start=2):
        if r["po_number"] in seen or r["po_number"] in cancelled:
            continue
        seen.add(r["po_number"])
        if iso_or_day_first(r["due_date"], f"{POS_CSV} row {k}, due_date") <= NEED:
            receipts[r["item"]] += _int(r["qty"], f"{POS_CSV} row {k}, qty") * PACK[r["uom"]]

    days = (NEED - RELEASE).days
    rows = {}
    for c in CODES:
        gross = sum(forecast[s] * qty_per[s].get(c, 0) for s in SKUS)
        t = terms[c]
        ss = (
            int((SS_SINGLE_SOURCE * gross).to_integral_value(rounding=ROUND_CEILING))
            if t["single_source"]
            else _int(inv[c]["safety_stock_each"], f"{INVENTORY_CSV} {c}")
        )
        on_hand = _int(inv[c]["on_hand"], f"{INVENTORY_CSV} {c}, on_hand") * PACK[inv[c]["uom"]]
        net = max(0, gross + ss - on_hand - receipts[c])
        planned = lot(net, t["moq"], t["multiple"])
        rows[c] = {
            "gross": gross,
            "ss": ss,
            "on_hand": on_hand,
            "receipts": receipts[c],
            "net": net,
            "planned": planned,
            "lead": t["lead"],
            "expedite": planned > 0 and t["lead"] > days,
            "single_source": t["single_source"],
        }
    return {
        "forecast": forecast,
        "qty_per": qty_per,
        "bom_sheets": sheets,
        "terms": terms,
        "inv": inv,
        "cancelled": sorted(cancelled),
        "rows": rows,
        "days": days,
        "expedite": [c for c in CODES if rows[c]["expedite"]],
    }


# ------------------------------------------------------------------ the gold deliverables


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful planner would: a formula-driven MRP workbook and the expedite memo."""
    a = compute(inputs_dir)
    outputs_dir = Path(outputs_dir)
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = _write_plan(a, outputs_dir / PLAN_XLSX)
    memo = _write_memo(a, outputs_dir / MEMO_DOCX)
    record = write_completion_record(
        outputs_dir,
        [PLAN_XLSX, MEMO_DOCX],
        questions=[
            "Can Purchasing confirm that no replacement order was raised with Orrin Valve Co. when "
            "PO-41187 was cancelled?"
        ],
        notes=(
            "TF-200 planned on BOM revision C; TF-300 on forecast version 2; SEAL-05 stock converted from "
            "packs of 10; PO-41187 excluded as cancelled and PO-41203 counted once; IGN-30 safety stock per "
            "exception QA-2026-11."
        ),
    )
    return [book, memo, record]


def _write_plan(a: dict, path: Path) -> Path:
    wb = openpyxl.Workbook()
    mrp = wb.active
    mrp.title = "MRP"
    par = wb.create_sheet("Parameters")
    fc = wb.create_sheet("Forecast")
    bom = wb.create_sheet("BOM")
    sup = wb.create_sheet("Supply")
    exp = wb.create_sheet("Expedite")
    n = len(CODES)

    par.append(["Parameter", "Value", "Source"])
    style_header(par)
    par.append(["Plan release date", RELEASE, "planning policy rule 1"])
    par.append(["Build start (need date)", NEED, "planning policy rule 1"])
    par.append(["Days available", "=B3-B2", "release to build start"])
    par.append(["Single-source safety stock, share of gross", float(SS_SINGLE_SOURCE), "exception QA-2026-11"])
    par["B2"].number_format = par["B3"].number_format = "yyyy-mm-dd"
    autosize(par, {"A": 42, "B": 14, "C": 30})

    fc.append(["Product", "Description", "January 2027 forecast (units)", "Version used", "Published"])
    style_header(fc)
    pub = {s: (v, p) for s, _, v, p in JANUARY}
    for s in SKUS:
        fc.append([s, SKU_NAMES[s], a["forecast"][s], pub[s][0], pub[s][1]])
    fc.append(["Superseded: TF-300 version 1 (800 units, published 2026-11-10) is replaced by version 2 (rule 2)."])
    autosize(fc, {"A": 10, "B": 42, "C": 28, "D": 13, "E": 12})

    # BOM: quantity per unit on the effective revisions, a row per component, one column per product.
    bom.append(["Component"] + [f"{s} ({a['bom_sheets'][s]})" for s in SKUS])
    style_header(bom)
    for c in CODES:
        bom.append([c] + [a["qty_per"][s].get(c, 0) for s in SKUS])
    bom.append(
        [
            "TF-200 revision B (superseded 30 Nov 2026) is not used: ECO-2611 replaces BR-20 by BR-22 on "
            "TF-200 from 1 Dec 2026."
        ]
    )
    autosize(bom, {"A": 11, "B": 18, "C": 22, "D": 18})

    # Supply: stock converted to each, PO lines counted or excluded with the reason.
    sup.append(["Item", "Stock UoM", "On hand (stock UoM)", "Each per UoM", "On hand (each)"])
    style_header(sup)
    for k, c in enumerate(CODES):
        r = 2 + k
        inv = a["inv"][c]
        sup.append([c, inv["uom"], int(inv["on_hand"]), PACK[inv["uom"]], f"=C{r}*D{r}"])
    po0 = n + 4
    sup.cell(row=po0 - 1, column=1, value="Open purchase orders")
    sup.cell(row=po0 - 1, column=1).font = Font(bold=True)
    for j, h in enumerate(["PO number", "Item", "Qty (each)", "Due date", "Counted", "Qty counted", "Reason"], start=1):
        sup.cell(row=po0, column=j, value=h)
    style_header(sup, po0)
    r = po0
    for po, item, qty, due, _ in OPEN_POS:
        for dup in [False, True] if po == DUPLICATED_PO else [False]:
            r += 1
            due_d = iso_or_day_first(due, POS_CSV)
            if po in a["cancelled"]:
                counted, reason = "No", "cancelled by the supplier (notice of 2 Dec 2026)"
            elif dup:
                counted, reason = "No", "duplicate export line of the same PO"
            else:
                counted, reason = (
                    ("Yes", "due before the build start") if due_d <= NEED else ("No", "due after the build start")
                )
            sup.append([po, item, qty, due_d, counted, f'=IF(E{r}="Yes",C{r},0)', reason])
            sup.cell(row=r, column=4).number_format = "yyyy-mm-dd"
    po_last = r
    autosize(sup, {"A": 20, "B": 10, "C": 18, "D": 12, "E": 14, "F": 12, "G": 50})

    # MRP: one row per component, every figure a formula from the sheets above and the supplier terms columns.
    mrp.append(
        [
            "Component",
            "Description",
            "Gross requirement",
            "Safety stock",
            "On hand (each)",
            "Open PO receipts",
            "Net requirement",
            "Minimum order",
            "Order multiple",
            "Planned order",
            "Lead time (days)",
            "Days available",
            "Expedite",
        ]
    )
    style_header(mrp)
    desc = {c: d for c, d, *_ in COMPONENTS}
    for k, c in enumerate(CODES):
        r = 2 + k
        t = a["terms"][c]
        gross = f"=BOM!B{r}*Forecast!$C$2+BOM!C{r}*Forecast!$C$3+BOM!D{r}*Forecast!$C$4"
        ss = f"=ROUNDUP(Parameters!$B$5*C{r},0)" if t["single_source"] else int(a["inv"][c]["safety_stock_each"])
        mrp.append(
            [
                c,
                desc[c],
                gross,
                ss,
                f"=Supply!E{r}",
                f"=SUMIF(Supply!$B${po0 + 1}:$B${po_last},A{r},Supply!$F${po0 + 1}:$F${po_last})",
                f"=MAX(0,C{r}+D{r}-E{r}-F{r})",
                t["moq"],
                t["multiple"],
                f"=IF(G{r}<=0,0,MAX(H{r},CEILING(G{r},I{r})))",
                t["lead"],
                "=Parameters!$B$4",
                f'=IF(AND(J{r}>0,K{r}>L{r}),"Yes","No")',
            ]
        )
    autosize(
        mrp,
        {
            "A": 11,
            "B": 44,
            "C": 12,
            "D": 12,
            "E": 12,
            "F": 12,
            "G": 12,
            "H": 10,
            "I": 10,
            "J": 12,
            "K": 10,
            "L": 10,
            "M": 10,
        },
    )

    exp.append(["Component", "Expedite", "Planned order", "Lead time (days)", "Days available"])
    style_header(exp)
    for k, c in enumerate(CODES):
        r = 2 + k
        exp.append([c, f'=IF(MRP!M{r}="Yes","Expedite","No")', f"=MRP!J{r}", f"=MRP!K{r}", f"=MRP!L{r}"])
    autosize(exp, {"A": 11, "B": 18, "C": 14, "D": 16, "E": 14})
    return save_workbook(wb, path)


def _write_memo(a: dict, path: Path) -> Path:
    rows = a["rows"]
    days = a["days"]
    ex = a["expedite"]
    planned = [c for c in CODES if rows[c]["planned"] > 0]
    on_time = [c for c in planned if c not in ex]
    ign = rows["IGN-30"]
    blocks = [
        Heading("Plan basis"),
        Para(
            "This is the material plan for the January 2027 build of the TrailFlame family, released on "
            f"{RELEASE.day} {RELEASE:%B %Y}. The build starts on {NEED.day} {NEED:%B %Y}, so a planned "
            f"order placed today has {days} days to arrive. The plan uses the latest published forecast "
            f"for each stove: TF-100 {a['forecast']['TF-100']:,}, TF-200 {a['forecast']['TF-200']:,} and "
            f"TF-300 {a['forecast']['TF-300']:,} units. TF-300's version 1 figure of 800 units, published "
            "on 10 November, was superseded by version 2 on 28 November and is not used."
        ),
        Para(
            "Requirements are exploded through the bill of material revision in effect on the build "
            "start. For TF-200 that is revision C, released on 1 December 2026 under ECO-2611, which "
            "replaces burner BR-20 with BR-22; revision B, still in the BOM workbook, is superseded and "
            "not used. BR-20 remains on TF-100 only."
        ),
        Heading("Data corrections"),
        Para(
            "O-ring SEAL-05 is held in packs of 10: the inventory's 620 PK10 is "
            f"{rows['SEAL-05']['on_hand']:,} each, which covers the gross requirement of "
            f"{rows['SEAL-05']['gross']:,} and the safety stock of {rows['SEAL-05']['ss']:,}; no order is "
            "needed."
        ),
        Para(
            f"Orrin Valve Co. cancelled {CANCELLED_PO} (1,200 VLV-14) in its notice of 2 December 2026. "
            "The ERP still shows the order as open, but it is not counted as supply; only PO-41190 (800) "
            f"is. {DUPLICATED_PO} for cartons appears twice in the open-order export and is counted once."
        ),
        Para(
            "The igniter IGN-30 is single-source (Kwan Piezo Components). Under exception QA-2026-11 its "
            f"safety stock is 40% of the month's gross requirement of {ign['gross']:,}, that is "
            f"{ign['ss']:,} units, instead of the item master's 150."
        ),
        Heading("Planned orders"),
        Table(
            [
                "Component",
                "Gross",
                "Safety stock",
                "On hand",
                "PO receipts",
                "Net",
                "Planned order",
                "Lead time (days)",
            ],
            [
                [
                    c,
                    f"{rows[c]['gross']:,}",
                    f"{rows[c]['ss']:,}",
                    f"{rows[c]['on_hand']:,}",
                    f"{rows[c]['receipts']:,}",
                    f"{rows[c]['net']:,}",
                    f"{rows[c]['planned']:,}",
                    str(rows[c]["lead"]),
                ]
                for c in planned
            ],
        ),
        Para(
            "Planned orders are the net requirement rounded up to the supplier's order multiple and at "
            "least its minimum order. The other components are covered by stock and open orders this "
            "month. Every figure is worked in mrp_plan.xlsx, where the MRP sheet calculates each line "
            "from the forecast, BOM and supply sheets."
        ),
        Heading("Expedite list"),
        Para(
            f"{', '.join(ex[:-1])} and {ex[-1]} must be expedited: each has a planned order whose supplier "
            f"lead time is longer than the {days} days from release to the build start. "
            + " ".join(
                f"{c} needs {rows[c]['planned']:,} pieces with a lead time of {rows[c]['lead']} days, "
                f"{rows[c]['lead'] - days} days too long."
                for c in ex
            )
            + " The buyers should ask Vantor, Orrin and Kwan for partial deliveries before the build start "
            "or book premium freight."
        ),
        Para(
            f"{', '.join(on_time[:-1])} and {on_time[-1]} have planned orders that arrive in time for the "
            f"build: HSE-08's lead time of {rows['HSE-08']['lead']} days equals the days available, so it "
            "lands on the build date."
        ),
    ]
    return write_docx(blocks, path, title="January 2027 expedite memo - TrailFlame family")
