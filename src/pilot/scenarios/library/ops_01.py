"""OPS-01, operations: a weekly replenishment (reorder) plan for a parts warehouse.

Planted facts: SKU HW-1180 shows a negative on-hand balance (-12, a
count error the policy says to treat as zero and report); SKU HW-1420 is
discontinued and must never be reordered although it is below its reorder
point; quantities round up to the supplier's case pack. The set of SKUs to
order and each quantity follow from the policy's formulas.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from pilot.scenarios.common import read_csv_dicts, rng, write_completion_record
from pilot.scenarios.officeio import write_csv, write_text

SEED = 260606
SNAPSHOT_CSV = "inventory_snapshot_2026-11-27.csv"
SALES_CSV = "sales_last_13_weeks.csv"
SUPPLIERS_CSV = "suppliers.csv"
POLICY_TXT = "replenishment_policy.txt"
PLAN_CSV = "reorder_plan.csv"

SUPPLIERS = [
    ("S-01", "Kestrel Hardware", 2, 24),
    ("S-02", "Baywater Industrial", 3, 50),
    ("S-03", "Orion Fixings", 1, 12),
    ("S-04", "Lambert Electrical", 4, 10),
]
ITEMS = [
    ("HW-1010", "Hex bolt M8x40 zinc (box 100)", "S-01"),
    ("HW-1025", "Hex nut M8 zinc (box 200)", "S-01"),
    ("HW-1040", "Washer M8 flat (box 500)", "S-02"),
    ("HW-1075", "Wood screw 5x60 (box 200)", "S-01"),
    ("HW-1110", "Anchor plug 8mm (box 100)", "S-03"),
    ("HW-1180", "Threaded rod M10 1m", "S-02"),
    ("HW-1215", "Cable tie 300mm (bag 100)", "S-03"),
    ("HW-1260", "Hose clamp 20-32mm", "S-02"),
    ("HW-1305", "Padlock 40mm brass", "S-04"),
    ("HW-1350", "Extension lead 10m", "S-04"),
    ("HW-1395", "Junction box IP65", "S-04"),
    ("HW-1420", "Hinge 75mm steel (legacy)", "S-01"),
    ("HW-1465", "Drill bit HSS 8mm", "S-03"),
    ("HW-1510", "Masking tape 48mm", "S-02"),
    ("HW-1555", "Silicone sealant clear", "S-02"),
    ("HW-1600", "Safety gloves L (pair)", "S-03"),
    ("HW-1645", "Dust mask FFP2 (box 10)", "S-03"),
    ("HW-1690", "LED work light 20W", "S-04"),
]
DISCONTINUED = {"HW-1420"}


def generate(inputs_dir: Path) -> list[Path]:
    g = rng(SEED)
    weekly = {sku: float(g.uniform(8, 120)) for sku, _, _ in ITEMS}
    sales = []
    for w in range(1, 14):
        for sku, _, _ in ITEMS:
            sales.append([f"2026-W{34 + w:02d}", sku, int(max(0, np.rint(g.normal(weekly[sku], weekly[sku] * 0.25))))])
    snap = []
    lead = {s[0]: s[2] for s in SUPPLIERS}
    for sku, desc, sup in ITEMS:
        rop = weekly[sku] * (lead[sup] + 1)
        low = g.random() < 0.5
        on_hand = int(rop * (g.uniform(0.2, 0.9) if low else g.uniform(1.3, 2.5)))
        on_order = int(weekly[sku] * g.uniform(0.5, 1.5)) if (low and g.random() < 0.3) else 0
        status = "discontinued" if sku in DISCONTINUED else "active"
        snap.append([sku, desc, sup, on_hand, on_order, status])
    for row in snap:
        if row[0] == "HW-1180":
            row[3], row[4] = -12, 0
        if row[0] in DISCONTINUED:
            row[3] = 3
    paths = [
        write_csv(
            inputs_dir / SNAPSHOT_CSV, ["sku", "description", "supplier_id", "on_hand", "on_order", "status"], snap
        ),
        write_csv(inputs_dir / SALES_CSV, ["week", "sku", "units_sold"], sales),
        write_csv(inputs_dir / SUPPLIERS_CSV, ["supplier_id", "supplier", "lead_time_weeks", "case_pack"], SUPPLIERS),
    ]
    policy = """Eastgate parts warehouse - replenishment policy (Operations, rev. 4)

1. Average weekly demand = total units sold over the last 13 weeks / 13.
2. Safety stock = 1 week of average weekly demand.
3. Reorder point = average weekly demand x supplier lead time in weeks + safety stock.
4. An item is ordered when its available stock (on hand + on order) is at or below its reorder point.
5. Order-up-to level = reorder point + 4 weeks of average weekly demand.
   Order quantity = order-up-to level - available stock, rounded UP to a whole number of the supplier's case pack.
6. Discontinued items are never reordered, whatever their stock.
7. A negative on-hand balance is a counting error: treat it as zero for the plan and report the item to the stock \
controller.
"""
    paths.append(write_text(inputs_dir / POLICY_TXT, policy))
    return paths


def plan(inputs_dir: Path) -> tuple[list[dict], list[str]]:
    snap = read_csv_dicts(inputs_dir / SNAPSHOT_CSV)
    sales = read_csv_dicts(inputs_dir / SALES_CSV)
    sup = {s["supplier_id"]: s for s in read_csv_dicts(inputs_dir / SUPPLIERS_CSV)}
    demand: dict[str, float] = {}
    for s in sales:
        demand[s["sku"]] = demand.get(s["sku"], 0) + int(s["units_sold"])
    rows, negative = [], []
    for item in snap:
        sku = item["sku"]
        on_hand = int(item["on_hand"])
        if on_hand < 0:
            negative.append(sku)
            on_hand = 0
        if item["status"] == "discontinued":
            continue
        avg = demand[sku] / 13
        lead = int(sup[item["supplier_id"]]["lead_time_weeks"])
        pack = int(sup[item["supplier_id"]]["case_pack"])
        rop = avg * lead + avg
        available = on_hand + int(item["on_order"])
        if available <= rop:
            qty = math.ceil((rop + 4 * avg - available) / pack - 1e-9) * pack
            rows.append(
                {
                    "sku": sku,
                    "description": item["description"],
                    "supplier_id": item["supplier_id"],
                    "on_hand": on_hand,
                    "on_order": int(item["on_order"]),
                    "avg_weekly_demand": round(avg, 2),
                    "reorder_point": round(rop, 2),
                    "order_qty": qty,
                }
            )
    return rows, negative


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    rows, negative = plan(inputs_dir)
    cols = [
        "sku",
        "description",
        "supplier_id",
        "on_hand",
        "on_order",
        "avg_weekly_demand",
        "reorder_point",
        "order_qty",
    ]
    outputs_dir.mkdir(parents=True, exist_ok=True)
    out = write_csv(outputs_dir / PLAN_CSV, cols, [[r[c] for c in cols] for r in rows])
    record = write_completion_record(
        outputs_dir,
        [PLAN_CSV],
        notes=(
            "Negative on-hand balance treated as zero and to be reported to the stock controller: "
            f"{', '.join(negative)}. Discontinued HW-1420 not reordered."
        ),
    )
    return [out, record]
