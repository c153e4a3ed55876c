"""ENG-01, engineering: the cost roll-up of a multi-level bill of materials.

Planted facts: quantities multiply down the levels (four bolts per flange,
two flanges per housing); some component prices are quoted in USD and must
be converted at the costing rate; engineering change notice ECN-118 replaces
seal kit M-2231 by M-2290 for this costing. The total unit cost must tie to
the sum of the extended costs.
"""

from __future__ import annotations

from pathlib import Path

import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, read_csv_dicts, style_header, write_completion_record
from pilot.scenarios.officeio import save_workbook, write_csv, write_text

BOM_CSV = "bom_P-4400_pump_assembly.csv"
PRICES_XLSX = "component_prices_2026Q4.xlsx"
ECN_TXT = "ECN-118_change_notice.txt"
NOTES_TXT = "costing_notes.txt"
OUT_XLSX = "bom_cost_rollup.xlsx"
FX_USD_CAD = 1.38

# level, part, parent, description, quantity per parent, make/buy
BOM = [
    (0, "P-4400", "", "Centrifugal pump assembly 4in", 1, "make"),
    (1, "H-1100", "P-4400", "Pump housing sub-assembly", 1, "make"),
    (2, "C-2010", "H-1100", "Volute casting, ductile iron", 1, "buy"),
    (2, "F-2050", "H-1100", "Flange, 4in ANSI 150", 2, "make"),
    (3, "B-3001", "F-2050", "Bolt M16x70 A4-80", 4, "buy"),
    (3, "N-3002", "F-2050", "Nut M16 A4-80", 4, "buy"),
    (3, "G-3003", "F-2050", "Gasket 4in EPDM", 1, "buy"),
    (1, "R-1200", "P-4400", "Rotating assembly", 1, "make"),
    (2, "I-2110", "R-1200", "Impeller 230mm bronze", 1, "buy"),
    (2, "S-2120", "R-1200", "Shaft 38mm 316SS", 1, "buy"),
    (2, "M-2231", "R-1200", "Mechanical seal kit 38mm (carbon/ceramic)", 1, "buy"),
    (2, "K-2140", "R-1200", "Bearing 6308-2Z", 2, "buy"),
    (1, "E-1300", "P-4400", "Motor 7.5kW IE3", 1, "buy"),
    (1, "X-1400", "P-4400", "Baseplate and coupling kit", 1, "buy"),
    (1, "L-1500", "P-4400", "Assembly and test labour (hours)", 3.5, "buy"),
]
PRICES = [
    ("C-2010", 412.50, "CAD"),
    ("B-3001", 2.85, "CAD"),
    ("N-3002", 0.95, "CAD"),
    ("G-3003", 6.40, "CAD"),
    ("I-2110", 265.00, "USD"),
    ("S-2120", 148.00, "USD"),
    ("M-2231", 96.00, "USD"),
    ("M-2290", 131.50, "USD"),
    ("K-2140", 18.75, "CAD"),
    ("E-1300", 1180.00, "CAD"),
    ("X-1400", 322.00, "CAD"),
    ("L-1500", 68.00, "CAD"),
]


def generate(inputs_dir: Path) -> list[Path]:
    paths = [
        write_csv(
            inputs_dir / BOM_CSV, ["level", "part_no", "parent", "description", "qty_per_parent", "make_buy"], BOM
        )
    ]
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Prices"
    ws.append(["Part no.", "Unit cost", "Currency", "Source"])
    style_header(ws)
    for p, c, cur in PRICES:
        ws.append([p, c, cur, "Supplier quote Q4 2026" if p != "L-1500" else "Standard labour rate per hour"])
    autosize(ws, {"A": 10, "B": 10, "C": 9, "D": 32})
    paths.append(save_workbook(wb, inputs_dir / PRICES_XLSX))
    paths.append(
        write_text(
            inputs_dir / ECN_TXT,
            """ENGINEERING CHANGE NOTICE ECN-118 (approved 12 November 2026)

Product: P-4400 centrifugal pump assembly
Change: replace mechanical seal kit M-2231 (carbon/ceramic) by M-2290 (silicon carbide/silicon carbide), same \
quantity, in the rotating assembly R-1200.
Reason: field failures of M-2231 in abrasive service.
Effectivity: all units built from 1 January 2027. Standard costs for 2027 must reflect the change.
""",
        )
    )
    paths.append(
        write_text(
            inputs_dir / NOTES_TXT,
            f"""Costing notes - 2027 standard cost (Cost Engineering)

- Roll up the cost of one P-4400 from its purchased ("buy") items: extended quantity x unit cost, where the extended \
quantity multiplies the quantities down every level of the bill.
- "Make" items carry no cost of their own; their cost is the cost of their children.
- Convert USD prices to CAD at the 2027 costing rate of {FX_USD_CAD:.2f} CAD per USD.
- Apply every approved engineering change notice effective for 2027.
""",
        )
    )
    return paths


def rollup(inputs_dir: Path) -> list[dict]:
    bom = read_csv_dicts(inputs_dir / BOM_CSV)
    wb = openpyxl.load_workbook(inputs_dir / PRICES_XLSX)
    prices = {r[0]: (float(r[1]), r[2]) for r in wb["Prices"].iter_rows(min_row=2, values_only=True) if r[0]}
    qty = {"": 1.0}
    out = []
    for b in bom:
        q = float(b["qty_per_parent"]) * (qty[b["parent"]] if b["parent"] else 1.0)
        qty[b["part_no"]] = q
        if b["make_buy"] != "buy":
            continue
        part = "M-2290" if b["part_no"] == "M-2231" else b["part_no"]  # ECN-118
        cost, cur = prices[part]
        cad = cost * FX_USD_CAD if cur == "USD" else cost
        out.append(
            {
                "part": part,
                "description": b["description"]
                if part == b["part_no"]
                else "Mechanical seal kit 38mm (SiC/SiC), per ECN-118",
                "level": int(b["level"]),
                "ext_qty": q,
                "unit_cost": cost,
                "currency": cur,
                "unit_cad": cad,
                "extended": q * cad,
            }
        )
    return out


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    items = rollup(inputs_dir)
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Rollup"
    ws.append(
        [
            "Part no.",
            "Description",
            "Level",
            "Extended qty",
            "Unit cost",
            "Currency",
            "Unit cost (CAD)",
            "Extended cost (CAD)",
        ]
    )
    style_header(ws)
    for i, it in enumerate(items, start=2):
        ws.append(
            [
                it["part"],
                it["description"],
                it["level"],
                it["ext_qty"],
                it["unit_cost"],
                it["currency"],
                None,
                f"=D{i}*G{i}",
            ]
        )
    n = len(items) + 1
    ws.append([])
    ws.append(["Total unit cost (CAD)", f"=ROUND(SUM(H2:H{n}),2)"])  # n+2
    ws.append(["USD/CAD costing rate", FX_USD_CAD])  # row n+3
    ws.cell(row=n + 2, column=1).font = Font(bold=True)
    # The rate sits in row n+3; the unit-cost formulas point at it.
    for i in range(2, n + 1):
        ws[f"G{i}"] = f'=IF(F{i}="USD",E{i}*$B${n + 3},E{i})'
    ws.append(["Change vs. M-2231 seal kit (CAD, ECN-118)", f"=(131.5-96)*$B${n + 3}"])
    autosize(ws, {"A": 40, "B": 46, "C": 6, "D": 12, "E": 10, "F": 9, "G": 15, "H": 18})
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = save_workbook(wb, outputs_dir / OUT_XLSX)
    record = write_completion_record(
        outputs_dir, [OUT_XLSX], notes="M-2231 replaced by M-2290 per ECN-118; USD prices converted at 1.38."
    )
    return [book, record]
