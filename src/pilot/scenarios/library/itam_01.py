"""ITAM-01, IT asset management: software licence true-up against the entitlements.

The software asset manager counts, for six per-device licensed products, the
devices that need a licence on the true-up date (30 November 2026) from the
discovery tool's installation inventory, as the licensing rules define it
(a device counts once however many installations or scan records show the
product; decommissioned devices are excluded; the free Viewer edition of
Meridian Project Planner needs no licence), sets them against the licences of
the contracts in force on that date, and names the products that are
under-licensed and must be bought before the vendor audit, with the cost.

Planted facts (the inventory has 257 rows for 236 product-device pairs):

- A device counts once: 21 rows repeat a product already found on the same
  device (19 a second version left behind by an upgrade, or the same
  installation reported by both discovery sources, with the date written
  day-first by one of them and ISO by the other; 2 the Meridian Viewer
  beside a paid edition). Quillon PDF Editor Pro has
  69 rows but 60 devices, 58 of them in service, against 60 licences:
  compliant (counting rows: 67, a shortfall of 7).
- Decommissioned devices are excluded (12 pairs). Vantage Design Suite: 43
  devices counted (47 with the 4 decommissioned) against 25 + 15 = 40
  licences: short 3 at 1,842.50, 5,527.50 (7 and 12,897.50 counting them).
  Halden Stats: 15 devices against 15 licences, exactly covered (18 and a
  shortfall of 3 with the decommissioned devices).
- Exception in the licensing rules: the Viewer edition of Meridian Project
  Planner is free. 28 devices have a paid edition (2 of them also the
  Viewer), 8 only the Viewer: 28 against 30 licences, compliant (36 and a
  shortfall of 6 if the Viewer is counted).
- Superseded contract: Corvid Diagram Studio's CT-2023-0412 (30 licences)
  expired on 31 August 2026 and was replaced by the renewal CT-2026-0917
  (35), whose order confirmation (a PDF) says so; the entitlements workbook
  still lists both. 38 devices against 35 licences: short 3 at 289.90,
  869.70 (compliant against 65 if both lines are summed).
- Tessel Screen Capture: 34 devices against 40 licences, compliant.
- Under-licensed, to buy: exactly Vantage Design Suite and Corvid Diagram
  Studio; total true-up cost 6,397.20. Each trap missed alone changes that
  set or that total.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np
import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, fmt_money, read_csv_dicts, rng, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_pdf, write_text

# The generator's one random source: it draws the fleet's asset tags and statuses, which devices carry
# each product, the versions, discovery sources and scan dates.
SEED = 454614

INVENTORY_CSV = "install_inventory.csv"
ENTITLEMENTS_XLSX = "entitlements.xlsx"
RULES_TXT = "licensing_rules.txt"
RENEWAL_PDF = "corvid_renewal_order.pdf"
BOOK_XLSX = "true_up.xlsx"
MEMO_DOCX = "true_up_memo.docx"

TRUE_UP_DATE = dt.date(2026, 11, 30)
STATUSES = ("In use", "In repair", "In stock", "Decommissioned")
DECOMMISSIONED = "Decommissioned"
VIEWER = "Viewer"
# The discovery sources write their scan dates differently: one ISO, the other day-first.
SOURCES = {"EndpointCentral": "%Y-%m-%d", "NetAudit": "%d/%m/%Y"}

VANTAGE, QUILLON, MERIDIAN, CORVID, HALDEN, TESSEL = (
    "Vantage Design Suite",
    "Quillon PDF Editor Pro",
    "Meridian Project Planner",
    "Corvid Diagram Studio",
    "Halden Stats",
    "Tessel Screen Capture",
)
PRODUCTS = [VANTAGE, QUILLON, MERIDIAN, CORVID, HALDEN, TESSEL]


@dataclass(frozen=True)
class Plan:
    """What the generator plants for one product (the answer follows from the rules, not from here)."""

    vendor: str
    sku: str
    price: str
    counted: int  # devices in service with a paid edition
    decommissioned: int  # decommissioned devices still showing the product
    repeats: int  # extra rows for a product already on the device
    editions: tuple[str, ...]
    versions: tuple[str, ...]
    viewer_only: int = 0  # devices with only the free Viewer (Meridian)
    viewer_too: int = 0  # devices with a paid edition and the Viewer (Meridian)


PLAN = {
    VANTAGE: Plan("Vantage Software", "VDS-DEV-PERP", "1842.50", 43, 4, 4, ("Design",), ("2025.1", "2025.3", "2026.1")),
    QUILLON: Plan("Quillon Systems", "QPE-PRO-DEV", "149.00", 58, 2, 9, ("Pro",), ("11.4", "12.0", "12.1")),
    MERIDIAN: Plan(
        "Meridian Labs",
        "MPP-STD-DEV",
        "612.00",
        28,
        1,
        1,
        ("Standard", "Professional"),
        ("8.2", "9.0"),
        viewer_only=8,
        viewer_too=2,
    ),
    CORVID: Plan("Corvid Software", "CDS-DEV-SUB", "289.90", 38, 1, 2, ("Standard",), ("5.6", "6.0")),
    HALDEN: Plan("Halden Analytics", "HST-DESK-DEV", "1275.00", 15, 3, 1, ("Desktop",), ("29.1", "30.0")),
    TESSEL: Plan("Tessel Ltd", "TSC-STD-DEV", "54.60", 34, 1, 2, ("Standard",), ("4.2", "4.3")),
}

# Contract lines of the entitlements workbook: ref, product, licences, start, end, remarks.
CONTRACTS = [
    ("CT-2024-0311", VANTAGE, 25, dt.date(2024, 4, 1), dt.date(2027, 3, 31), ""),
    (
        "CT-2025-0788",
        VANTAGE,
        15,
        dt.date(2025, 10, 1),
        dt.date(2027, 3, 31),
        "Additional licences, co-terminous with CT-2024-0311",
    ),
    ("CT-2025-0102", QUILLON, 60, dt.date(2025, 2, 1), dt.date(2027, 1, 31), ""),
    ("CT-2024-0650", MERIDIAN, 30, dt.date(2024, 7, 1), dt.date(2027, 6, 30), "Paid editions (Standard, Professional)"),
    ("CT-2023-0412", CORVID, 30, dt.date(2023, 9, 1), dt.date(2026, 8, 31), ""),
    ("CT-2026-0917", CORVID, 35, dt.date(2026, 9, 1), dt.date(2029, 8, 31), "Renewal, see order confirmation"),
    ("CT-2025-0233", HALDEN, 15, dt.date(2025, 5, 1), dt.date(2027, 4, 30), ""),
    ("CT-2026-0140", TESSEL, 40, dt.date(2026, 1, 1), dt.date(2026, 12, 31), ""),
]
SUPERSEDED = "CT-2023-0412"

N_DEVICES = 150  # in service (in use, in repair, in stock)
N_DECOMMISSIONED = 10
CENT = Decimal("0.01")

INVENTORY_HEADER = ["asset_tag", "hostname", "device_status", "product", "edition", "version", "source", "last_scan"]


# ------------------------------------------------------------------ inputs


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    g = rng(SEED)
    inputs_dir = Path(inputs_dir)
    return [
        _write_inventory(inputs_dir, g),
        _write_entitlements(inputs_dir),
        _write_rules(inputs_dir),
        _write_renewal(inputs_dir),
    ]


def _fleet(g: np.random.Generator) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(asset tag, hostname, status) for the devices in service and the decommissioned ones."""
    numbers = [int(x) for x in g.choice(np.arange(10000, 19999), size=N_DEVICES + N_DECOMMISSIONED, replace=False)]
    kinds = g.choice(["LT", "DT"], size=len(numbers), p=[0.7, 0.3])
    sites = g.choice(["lon", "man", "bri"], size=len(numbers), p=[0.5, 0.3, 0.2])
    live_status = g.choice(STATUSES[:3], size=N_DEVICES, p=[0.9, 0.05, 0.05])
    devices = [(f"{k}-{n}", f"{s}-{k.lower()}-{n}", "") for n, k, s in zip(numbers, kinds, sites, strict=True)]
    live = [(t, h, str(st)) for (t, h, _), st in zip(devices[:N_DEVICES], live_status, strict=True)]
    dead = [(t, h, DECOMMISSIONED) for t, h, _ in devices[N_DEVICES:]]
    return live, dead


def _scan(g: np.random.Generator, source: str, dead: bool) -> str:
    # A decommissioned device was last seen before it was retired; a device in service in the last fortnight.
    day = (
        dt.date(2026, 7, 1) + dt.timedelta(days=int(g.integers(0, 90)))
        if dead
        else dt.date(2026, 11, 12) + dt.timedelta(days=int(g.integers(0, 14)))
    )
    return day.strftime(SOURCES[source])


def _write_inventory(inputs_dir: Path, g: np.random.Generator) -> Path:
    live, dead = _fleet(g)
    sources = list(SOURCES)
    rows: list[list[str]] = []
    for product in PRODUCTS:
        p = PLAN[product]
        n_live = p.counted + p.viewer_only
        on_live = [live[int(i)] for i in g.choice(len(live), size=n_live, replace=False)]
        on_dead = [dead[int(i)] for i in g.choice(len(dead), size=p.decommissioned, replace=False)]
        pairs = []  # (device, edition)
        for k, d in enumerate(on_live):
            edition = VIEWER if k >= p.counted else str(g.choice(p.editions))
            pairs.append((d, edition))
        for d in on_dead:
            pairs.append((d, str(g.choice(p.editions))))
        first_rows = []
        for d, edition in pairs:
            src = sources[int(g.integers(len(sources)))]
            row = [
                d[0],
                d[1],
                d[2],
                product,
                edition,
                str(g.choice(p.versions)),
                src,
                _scan(g, src, d[2] == DECOMMISSIONED),
            ]
            rows.append(row)
            first_rows.append(row)
        # Devices with a paid edition and the free Viewer beside it (Meridian): one licence each.
        for d, _ in pairs[: p.viewer_too]:
            src = sources[int(g.integers(len(sources)))]
            rows.append([d[0], d[1], d[2], product, VIEWER, str(g.choice(p.versions)), src, _scan(g, src, False)])
        # Repeats on devices in service with a paid edition: an older version left by an upgrade, or the
        # same installation reported by the other discovery source.
        for i in g.choice(p.counted - p.viewer_too, size=p.repeats, replace=False):
            base = first_rows[p.viewer_too + int(i)]
            other = sources[1 - sources.index(base[6])]
            if int(g.integers(2)) == 0 and len(p.versions) > 1:
                older = [v for v in p.versions if v != base[5]][0]
                rows.append(base[:5] + [older, base[6], base[7]])
            else:
                when = dt.datetime.strptime(base[7], SOURCES[base[6]]).date()
                rows.append(base[:6] + [other, when.strftime(SOURCES[other])])
    # The export is sorted by device, as the discovery tool lists it; a device's rows sit together.
    rows.sort(key=lambda r: (r[0], r[3], r[6], r[5]))
    return write_csv(inputs_dir / INVENTORY_CSV, INVENTORY_HEADER, rows)


def _write_entitlements(inputs_dir: Path) -> Path:
    wb = openpyxl.Workbook()
    readme = wb.active
    readme.title = "Read me"
    for line in [
        "Software entitlements register - Calder Voss Group IT",
        "One line per contract or order. Quantities are licences per device unless the metric says otherwise.",
        "Maintained by IT Procurement; dates are contract start and end dates (inclusive).",
        (
            "Prices on the 'True-up prices' sheet are the vendors' quoted prices for additional licences "
            "bought at true-up."
        ),
    ]:
        readme.append([line])
    readme["A1"].font = Font(bold=True)
    autosize(readme, {"A": 110})

    ent = wb.create_sheet("Entitlements")
    ent.append(["Contract ref", "Product", "Vendor", "Metric", "Licences", "Start date", "End date", "Remarks"])
    style_header(ent)
    for ref, product, qty, start, end, remark in CONTRACTS:
        ent.append([ref, product, PLAN[product].vendor, "Per device", qty, start, end, remark])
        for col in "FG":
            ent[f"{col}{ent.max_row}"].number_format = "dd/mm/yyyy"
    autosize(ent, {"A": 14, "B": 26, "C": 18, "D": 11, "E": 9, "F": 12, "G": 12, "H": 52})

    prices = wb.create_sheet("True-up prices")
    prices.append(["Product", "Vendor", "SKU", "Price per device licence (GBP, excl. VAT)", "Quote valid until"])
    style_header(prices)
    for product in PRODUCTS:
        p = PLAN[product]
        prices.append([product, p.vendor, p.sku, float(Decimal(p.price)), dt.date(2026, 12, 31)])
        prices[f"D{prices.max_row}"].number_format = "#,##0.00"
        prices[f"E{prices.max_row}"].number_format = "dd/mm/yyyy"
    autosize(prices, {"A": 26, "B": 18, "C": 14, "D": 22, "E": 16})
    return save_workbook(wb, inputs_dir / ENTITLEMENTS_XLSX)


RULES = """Calder Voss Group IT - Software asset management
Licence true-up: counting rules (SAM procedure 4, revision 3)

These rules apply to the annual true-up of the products licensed per device.
The true-up date for 2026 is 30 November 2026.

1. Source. Installations are taken from the discovery tool's inventory export.
   The export merges two discovery sources (EndpointCentral and NetAudit),
   which write their scan dates differently; the same installation can be
   reported by both.

2. Per device. A device needs one licence of a product if the product is
   installed on it, however many installations, versions, editions or scan
   records the inventory shows for that device. Devices are identified by
   their asset tag.

3. Devices counted. Every device in the inventory counts whatever its status
   (in use, in repair, in stock), except devices whose status is
   Decommissioned: they are excluded, since their disks are wiped before
   disposal and the vendors accept the disposal certificate.

4. Entitlement. A product's entitlement is the sum of the licences of the
   contracts in force on the true-up date. A contract that has ended does not
   count, and a renewal replaces the contract it renews.

5. Shortfall. A product is under-licensed when the devices counted exceed its
   entitlement; a product whose devices equal its entitlement is covered. The
   shortfall is bought at the vendor's true-up price in the entitlements
   register, to the penny, excluding VAT. A surplus is not carried to another
   product.

Vendor terms to note:

- Meridian Project Planner: the Viewer edition is free under Meridian Labs'
  product terms and needs no licence. A device with a paid edition
  (Standard or Professional) needs one licence, whether or not the Viewer is
  also installed.
- Quillon PDF Editor Pro: version 11 and version 12 are the same licensed
  product.
"""


def _write_rules(inputs_dir: Path) -> Path:
    return write_text(inputs_dir / RULES_TXT, RULES)


def _write_renewal(inputs_dir: Path) -> Path:
    blocks = [
        Heading("Corvid Software Ltd - Order confirmation CS-OC-26-3381"),
        Para("Customer: Calder Voss Group IT, Procurement. Date: 14 August 2026. Your reference: PO-2026-1174."),
        Para("Thank you for renewing your Corvid Diagram Studio subscription. This order confirms the renewal below."),
        Table(
            ["Item", "Description", "Quantity", "Term"],
            [
                [
                    "CDS-DEV-SUB",
                    "Corvid Diagram Studio, per-device subscription, Standard edition",
                    "35",
                    "1 September 2026 to 31 August 2029",
                ]
            ],
        ),
        Para(
            "Contract reference CT-2026-0917. This renewal replaces agreement CT-2023-0412 (30 device "
            "licences), which ends on 31 August 2026 and is not renewed separately. Licence keys issued "
            "under CT-2023-0412 remain valid under this renewal; no reinstallation is needed."
        ),
        Para(
            "Additional devices may be licensed at true-up at the price in the quotation attached to your entitlement "
            "register. Prices exclude VAT."
        ),
        Para("Corvid Software Ltd, Customer Licensing"),
    ]
    return write_pdf(blocks, inputs_dir / RENEWAL_PDF, title="Corvid Software - order confirmation")


# ------------------------------------------------------------------ the rules' answer


def _parse_scan(value: str, source: str, where: str) -> dt.date:
    if source not in SOURCES:
        raise ValueError(f"{INVENTORY_CSV}: {where}: field source: unknown discovery source {source!r}")
    try:
        return dt.datetime.strptime(value, SOURCES[source]).date()
    except ValueError:
        raise ValueError(f"{INVENTORY_CSV}: {where}: field last_scan: {value!r} is not a {source} date") from None


def read_inventory(inputs_dir: Path) -> list[dict[str, str]]:
    """The inventory's rows, checked: every field present, a known status and source, a readable scan date."""
    path = Path(inputs_dir) / INVENTORY_CSV
    rows = read_csv_dicts(path)
    if not rows or list(rows[0]) != INVENTORY_HEADER:
        raise ValueError(f"{INVENTORY_CSV}: header must be {', '.join(INVENTORY_HEADER)}")
    for n, r in enumerate(rows, start=2):
        where = f"line {n}"
        for field in INVENTORY_HEADER:
            if not (r.get(field) or "").strip():
                raise ValueError(f"{INVENTORY_CSV}: {where}: field {field}: empty")
        if r["device_status"] not in STATUSES:
            raise ValueError(f"{INVENTORY_CSV}: {where}: field device_status: unknown status {r['device_status']!r}")
        if r["product"] not in PRODUCTS:
            raise ValueError(
                f"{INVENTORY_CSV}: {where}: field product: {r['product']!r} is not a per-device licensed product"
            )
        _parse_scan(r["last_scan"], r["source"], where)
    return rows


def read_contracts(inputs_dir: Path) -> list[dict]:
    wb = openpyxl.load_workbook(Path(inputs_dir) / ENTITLEMENTS_XLSX, data_only=True)
    out = []
    for n, row in enumerate(wb["Entitlements"].iter_rows(min_row=2, values_only=True), start=2):
        if row[0] is None:
            continue
        ref, product, _, _, qty, start, end, remark = row[:8]
        if not isinstance(qty, (int, float)) or qty < 0:
            raise ValueError(f"{ENTITLEMENTS_XLSX}: Entitlements row {n}: field Licences: {qty!r} is not a count")
        if not isinstance(start, dt.datetime) or not isinstance(end, dt.datetime):
            raise ValueError(f"{ENTITLEMENTS_XLSX}: Entitlements row {n}: fields Start date, End date: not dates")
        out.append(
            {
                "ref": ref,
                "product": product,
                "licences": int(qty),
                "start": start.date(),
                "end": end.date(),
                "remarks": remark or "",
            }
        )
    return out


def read_prices(inputs_dir: Path) -> dict[str, Decimal]:
    wb = openpyxl.load_workbook(Path(inputs_dir) / ENTITLEMENTS_XLSX, data_only=True)
    out = {}
    for n, row in enumerate(wb["True-up prices"].iter_rows(min_row=2, values_only=True), start=2):
        if row[0] is None:
            continue
        if not isinstance(row[3], (int, float)):
            raise ValueError(f"{ENTITLEMENTS_XLSX}: True-up prices row {n}: field Price: {row[3]!r} is not a price")
        # Decimal via the shortest repr: the register's prices are to the penny.
        out[row[0]] = Decimal(repr(row[3])).quantize(CENT)
    return out


def in_force(c: dict) -> bool:
    """Rule 4: in force on the true-up date (a renewal starts the day after the contract it replaces ends)."""
    return c["start"] <= TRUE_UP_DATE <= c["end"]


def compute(inputs_dir: Path) -> dict:
    """The rules' answer from the inputs alone: per product the devices counted, the entitlement, shortfall and cost."""
    rows = read_inventory(inputs_dir)
    contracts = read_contracts(inputs_dir)
    prices = read_prices(inputs_dir)
    pairs: dict[tuple[str, str], dict] = {}
    for r in rows:
        p = pairs.setdefault(
            (r["product"], r["asset_tag"]), {"status": r["device_status"], "editions": set(), "rows": 0}
        )
        p["editions"].add(r["edition"])
        p["rows"] += 1
    out: dict[str, dict] = {}
    for product in PRODUCTS:
        mine = {tag: p for (prod, tag), p in pairs.items() if prod == product}
        decom = sorted(t for t, p in mine.items() if p["status"] == DECOMMISSIONED)
        viewer_only = sorted(t for t, p in mine.items() if p["status"] != DECOMMISSIONED and p["editions"] == {VIEWER})
        counted = len(mine) - len(decom) - len(viewer_only)
        entitled = sum(c["licences"] for c in contracts if c["product"] == product and in_force(c))
        short = max(0, counted - entitled)
        out[product] = {
            "rows": sum(p["rows"] for p in mine.values()),
            "devices": len(mine),
            "decommissioned": decom,
            "viewer_only": viewer_only,
            "counted": counted,
            "entitled": entitled,
            "shortfall": short,
            "price": prices[product],
            "cost": (prices[product] * short).quantize(CENT),
        }
    buy = [p for p in PRODUCTS if out[p]["shortfall"] > 0]
    return {
        "products": out,
        "pairs": pairs,
        "contracts": contracts,
        "buy": buy,
        "total": sum((out[p]["cost"] for p in PRODUCTS), Decimal(0)),
        "n_rows": len(rows),
    }


# ------------------------------------------------------------------ the gold deliverables


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful licence manager would: a formula-driven true-up and the memo."""
    a = compute(inputs_dir)
    outputs_dir = Path(outputs_dir)
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = _write_book(a, inputs_dir, outputs_dir / BOOK_XLSX)
    memo = _write_memo(a, outputs_dir / MEMO_DOCX)
    record = write_completion_record(
        outputs_dir,
        [BOOK_XLSX, MEMO_DOCX],
        questions=[
            "Should the Vantage Design Suite shortfall be bought as an addition to CT-2024-0311, co-terminous with it, "
            "or as a new agreement?"
        ],
        notes=(
            f"Corvid Diagram Studio's {SUPERSEDED} ended on 31 August 2026 and was replaced by its renewal; "
            "only the renewal counts. Decommissioned devices and Meridian Viewer-only installations were not "
            "counted."
        ),
    )
    return [book, memo, record]


def _write_book(a: dict, inputs_dir: Path, path: Path) -> Path:
    wb = openpyxl.Workbook()
    summary = wb.active
    summary.title = "True-up"
    calc = wb.create_sheet("Calculation")
    dev = wb.create_sheet("Devices")
    con = wb.create_sheet("Contracts")
    inv = wb.create_sheet("Inventory")

    # Inventory: the export as received, every row.
    inv.append(INVENTORY_HEADER)
    style_header(inv)
    for r in read_inventory(inputs_dir):
        inv.append([r[k] for k in INVENTORY_HEADER])
    n_inv = inv.max_row
    autosize(inv, {"A": 10, "B": 14, "C": 15, "D": 26, "E": 13, "F": 9, "G": 16, "H": 11})

    # Devices: one line per product and device (rule 2), its status and the editions found; counted by formula (rules 3
    # and the Viewer term).
    dev.append(["Product", "Asset tag", "Status", "Editions found", "Inventory rows", "Counted"])
    style_header(dev)
    for (product, tag), p in sorted(a["pairs"].items(), key=lambda kv: (PRODUCTS.index(kv[0][0]), kv[0][1])):
        r = dev.max_row + 1
        dev.append(
            [
                product,
                tag,
                p["status"],
                ", ".join(sorted(p["editions"])),
                f"=COUNTIFS(Inventory!$D$2:$D${n_inv},A{r},Inventory!$A$2:$A${n_inv},B{r})",
                f'=IF(OR(C{r}="{DECOMMISSIONED}",D{r}="{VIEWER}"),0,1)',
            ]
        )
    n_dev = dev.max_row
    autosize(dev, {"A": 26, "B": 11, "C": 15, "D": 24, "E": 14, "F": 9})

    # Contracts: the register's lines, in force on the true-up date or not (rule 4).
    con.append(["True-up date", TRUE_UP_DATE])
    con["B1"].number_format = "dd/mm/yyyy"
    con.append(
        ["Contract ref", "Product", "Licences", "Start date", "End date", "In force on the true-up date", "Remarks"]
    )
    style_header(con, 2)
    for c in a["contracts"]:
        r = con.max_row + 1
        remark = c["remarks"]
        if c["ref"] == SUPERSEDED:
            remark = "Ended 31/08/2026; replaced by renewal CT-2026-0917 (order confirmation CS-OC-26-3381)"
        con.append(
            [
                c["ref"],
                c["product"],
                c["licences"],
                c["start"],
                c["end"],
                f'=IF(AND(D{r}<=$B$1,E{r}>=$B$1),"Yes","No")',
                remark,
            ]
        )
        for col in "DE":
            con[f"{col}{r}"].number_format = "dd/mm/yyyy"
    n_con = con.max_row
    autosize(con, {"A": 14, "B": 26, "C": 9, "D": 11, "E": 11, "F": 14, "G": 70})

    # Calculation: from inventory rows to devices counted, the entitlement, the shortfall and its cost.
    calc.append(
        [
            "Product",
            "Inventory rows",
            "Devices with the product",
            "Decommissioned (rule 3)",
            "Viewer only (free)",
            "Devices counted",
            "Check (must be nil)",
            "Entitled licences",
            "Shortfall",
            "True-up price",
            "Purchase cost",
        ]
    )
    style_header(calc)
    for product in PRODUCTS:
        r = calc.max_row + 1
        calc.append(
            [
                product,
                f"=COUNTIF(Inventory!$D$2:$D${n_inv},A{r})",
                f"=COUNTIF(Devices!$A$2:$A${n_dev},A{r})",
                f'=COUNTIFS(Devices!$A$2:$A${n_dev},A{r},Devices!$C$2:$C${n_dev},"{DECOMMISSIONED}")',
                f'=COUNTIFS(Devices!$A$2:$A${n_dev},A{r},Devices!$D$2:$D${n_dev},"{VIEWER}",Devices!$C$2:$C${n_dev},"<>{DECOMMISSIONED}")',
                f"=SUMIFS(Devices!$F$2:$F${n_dev},Devices!$A$2:$A${n_dev},A{r})",
                f"=C{r}-D{r}-E{r}-F{r}",
                f'=SUMIFS(Contracts!$C$3:$C${n_con},Contracts!$B$3:$B${n_con},A{r},Contracts!$F$3:$F${n_con},"Yes")',
                f"=MAX(0,F{r}-H{r})",
                float(a["products"][product]["price"]),
                f"=ROUND(I{r}*J{r},2)",
            ]
        )
        for col in "JK":
            calc[f"{col}{r}"].number_format = "#,##0.00"
    last = calc.max_row
    calc.append(
        [
            "Total",
            f"=SUM(B2:B{last})",
            f"=SUM(C2:C{last})",
            f"=SUM(D2:D{last})",
            f"=SUM(E2:E{last})",
            f"=SUM(F2:F{last})",
            f"=SUM(G2:G{last})",
            "",
            "",
            "",
            f"=ROUND(SUM(K2:K{last}),2)",
        ]
    )
    calc[f"K{calc.max_row}"].number_format = "#,##0.00"
    calc.append([])
    calc.append(
        ["True-up prices from entitlements.xlsx, sheet 'True-up prices' (GBP per device licence, excluding VAT)."]
    )
    autosize(calc, {"A": 26, "B": 10, "C": 12, "D": 14, "E": 11, "F": 10, "G": 10, "H": 10, "I": 10, "J": 12, "K": 14})

    # True-up: the summary the brief asks for; every figure links to the Calculation sheet.
    summary.append(["Product", "Purchase needed", "Entitled licences", "Devices counted", "Shortfall", "Purchase cost"])
    style_header(summary)
    for k, product in enumerate(PRODUCTS):
        src = 2 + k
        summary.append(
            [
                product,
                f'=IF(Calculation!I{src}>0,"Yes","No")',
                f"=Calculation!H{src}",
                f"=Calculation!F{src}",
                f"=Calculation!I{src}",
                f"=Calculation!K{src}",
            ]
        )
        summary[f"F{summary.max_row}"].number_format = "#,##0.00"
    summary.append([])
    summary.append(["Total purchase cost", f"=Calculation!K{last + 1}"])
    summary[f"B{summary.max_row}"].number_format = "#,##0.00"
    summary.append(["True-up date", TRUE_UP_DATE])
    summary[f"B{summary.max_row}"].number_format = "dd/mm/yyyy"
    autosize(summary, {"A": 26, "B": 16, "C": 16, "D": 15, "E": 10, "F": 14})
    return save_workbook(wb, path)


_WORDS = ["no", "one", "two", "three", "four", "five", "six"]


def _write_memo(a: dict, path: Path) -> Path:
    P = a["products"]
    buy = a["buy"]
    keep = [p for p in PRODUCTS if p not in buy]
    n_pairs = len(a["pairs"])
    n_decom = sum(len(P[p]["decommissioned"]) for p in PRODUCTS)
    viewer = P[MERIDIAN]
    q = P[QUILLON]
    renewal = next(c for c in a["contracts"] if c["ref"] == "CT-2026-0917")
    old = next(c for c in a["contracts"] if c["ref"] == SUPERSEDED)
    verdicts = []
    for p in PRODUCTS:
        x = P[p]
        if x["shortfall"]:
            verdicts.append(
                Para(
                    f"{p} is under-licensed: {x['counted']} devices counted against {x['entitled']} "
                    f"licences, a shortfall of {x['shortfall']} licences at GBP {fmt_money(x['price'])} "
                    f"each, GBP {fmt_money(x['cost'])}."
                )
            )
    for p in keep:
        x = P[p]
        basis = "exactly covered" if x["counted"] == x["entitled"] else f"a surplus of {x['entitled'] - x['counted']}"
        verdicts.append(
            Para(
                f"{p} is compliant, with {x['counted']} devices counted against {x['entitled']} licences ({basis}); "
                f"no purchase is needed."
            )
        )
    blocks = [
        Heading("Summary"),
        Para(
            f"At the true-up date of 30 November 2026, {_WORDS[len(buy)]} of the six per-device products "
            f"are under-licensed and need a purchase: {' and '.join(buy)}. Buying the shortfall at the "
            f"vendors' true-up prices costs GBP {fmt_money(a['total'])} in total, excluding VAT. The other "
            f"{_WORDS[len(keep)]} products are covered by the contracts in force."
        ),
        Heading("Counting basis"),
        Para(
            f"The discovery export lists {a['n_rows']} installation rows, but a licence is needed per "
            f"device, not per installation (rule 2). The rows come down to {n_pairs} product-device pairs "
            "once the repeats are set aside: older versions left behind by upgrades, and installations "
            "reported by both EndpointCentral and NetAudit, which write the same scan date in different "
            f"formats. Quillon PDF Editor Pro, for example, has {q['rows']} rows for {q['devices']} "
            "devices."
        ),
        Para(
            f"{n_decom} pairs are on decommissioned devices, which rule 3 excludes; devices in repair or "
            f"in stock are counted. Meridian Labs' terms make the {VIEWER} edition of Meridian Project "
            f"Planner free: {len(viewer['viewer_only'])} devices with only the {VIEWER} are not counted, "
            f"while a device with a paid edition counts once even where the {VIEWER} is installed beside "
            "it."
        ),
        Para(
            "Entitlements are the contracts in force on 30 November 2026 (rule 4). For Corvid Diagram "
            f"Studio the register still lists {old['ref']} ({old['licences']} licences), which ended on "
            f"{old['end']:%d %B %Y}; the order confirmation shows that the renewal {renewal['ref']} "
            f"({renewal['licences']} licences) replaces it, so the entitlement is {renewal['licences']}, "
            f"not {old['licences'] + renewal['licences']}. Vantage Design Suite's two contracts are both "
            f"in force and add up to {P[VANTAGE]['entitled']}."
        ),
        Table(
            [
                "Product",
                "Rows",
                "Devices",
                "Decommissioned",
                "Viewer only",
                "Counted",
                "Entitled",
                "Shortfall",
                "Cost (GBP)",
            ],
            [
                [
                    p,
                    str(P[p]["rows"]),
                    str(P[p]["devices"]),
                    str(len(P[p]["decommissioned"])),
                    str(len(P[p]["viewer_only"])),
                    str(P[p]["counted"]),
                    str(P[p]["entitled"]),
                    str(P[p]["shortfall"]),
                    fmt_money(P[p]["cost"]),
                ]
                for p in PRODUCTS
            ],
        ),
        Heading("Purchase required"),
        *verdicts,
        Para(
            f"The total true-up purchase is GBP {fmt_money(a['total'])}. Every figure is a formula in "
            "true_up.xlsx: the Devices sheet lists each product-device pair with its status and editions, "
            "and the Calculation sheet ties the rows of the export to the devices counted, with a nil "
            "check for every product."
        ),
        Para(
            "Before the orders are placed, the decommissioned devices should be confirmed as disposed of in the asset "
            "register, since their last scans are months old and rule 3 relies on the disposal certificates."
        ),
    ]
    return write_docx(blocks, path, title="Software licence true-up, 30 November 2026")
