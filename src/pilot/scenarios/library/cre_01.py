"""CRE-01, commercial real estate: the 2026 service-charge reconciliation of Harbour Point, a multi-tenant office
building.

The property manager allocates the year's actual costs from the cost ledger to
the tenants by their proportions under the leases (net internal area over the
building's total lettable area, let or not), applies the one lease cap, takes
off each tenant's on-account payments for the year and states each tenant's
balancing charge (positive, due from the tenant) or credit (negative). The
asset manager, who writes the brief, wants the chiller replacement recovered
through the service charge; the leases exclude it.

Planted facts:

- The Ledger sheet of the cost ledger totals 395,894.88 (38 lines). Its line
  L-0027, "Chiller no. 2 replacement - new plant, capital project CX-2026-04",
  48,600.00, is a capital replacement of plant excluded by Schedule 4,
  paragraph 3(b) of every lease: recoverable costs are 347,294.88.
- The Summary sheet was prepared on 15 December 2026 and misses the
  December accrual L-0038 (electricity, 6,842.15): its total, 389,052.73, does
  not tie to the ledger; the Ledger sheet governs.
- The rent roll gives two areas in m2 (Brightwater 380, Delphine 445); at
  10.7639 sq ft to the m2 the lettable area is 26,580.2175 sq ft.
- Unit 1.02 (2,850 sq ft) is vacant all year: its share, 37,237.87 (the
  remainder after the let units' rounded shares), is borne by the landlord
  (Schedule 4, paragraph 4), not spread over the tenants.
- Corran Insurance Brokers' side letter (clause 7.4) caps its charge at the
  2025 certified 74,120.00 plus 3%: 76,343.60 against 80,355.38 apportioned;
  the excess 4,011.78 is borne by the landlord. Corran's balance is a credit
  of 2,323.92 (without the cap, a charge of 1,687.86).
- The payments export lists Alder & Finch's Q2 payment twice (one payment
  id, 17,268.48) and Delphine Health's payment of its 2025 balancing charge
  (1,284.50), which is not an on-account payment for 2026.
- Balancing charges (charge for the year less on-account paid; positive due
  from the tenant): Alder & Finch 1,482.02, Brightwater 1,122.56, Corran
  -2,323.92, Delphine 1,314.57, Everly 905.68. The tenants' charges
  (306,045.23), the vacant share, the cap excess and the excluded chiller tie
  to the ledger's 395,894.88.
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
    decimal_amount,
    fmt_money,
    read_csv_dicts,
    rng,
    style_header,
    write_completion_record,
)
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_text

# The generator's one random source: it draws the ledger's amounts, dates and invoice numbers.
SEED = 270431

LEDGER_XLSX = "cost_ledger_2026.xlsx"
RENT_ROLL_CSV = "rent_roll.csv"
LEASES_DOCX = "lease_abstracts.docx"
PAYMENTS_CSV = "on_account_payments.csv"
PROCEDURE_TXT = "reconciliation_procedure.txt"
BOOK_XLSX = "service_charge_reconciliation.xlsx"
MEMO_DOCX = "reconciliation_memo.docx"

CENT = Decimal("0.01")
SQFT_PER_M2 = Decimal("10.7639")
ALDER, BRIGHT, CORRAN, DELPHINE, EVERLY = (
    "Alder & Finch LLP",
    "Brightwater Analytics Ltd",
    "Corran Insurance Brokers Ltd",
    "Delphine Health Ltd",
    "Everly Recruitment Ltd",
)
TENANTS = [ALDER, BRIGHT, CORRAN, DELPHINE, EVERLY]
VACANT_UNIT = "1.02"
# unit, tenant ('' when vacant), area, unit of measure, lease start as the rent roll writes it
UNITS = [
    ("G.01", ALDER, "5400", "sq ft", "2019-03-25"),
    ("G.02", BRIGHT, "380", "m2", "14/06/2021"),
    ("1.01", CORRAN, "6150", "sq ft", "2018-09-29"),
    (VACANT_UNIT, "", "2850", "sq ft", ""),
    ("2.01", DELPHINE, "445", "m2", "01/02/2022"),
    ("2.02", EVERLY, "3300", "sq ft", "2023-06-24"),
]
CAP_RATE = Decimal("0.03")
CORRAN_2025 = Decimal("74120.00")
CERTIFIED_2025 = {
    ALDER: Decimal("58110.40"),
    BRIGHT: Decimal("44050.75"),
    CORRAN: CORRAN_2025,
    DELPHINE: Decimal("51540.10"),
    EVERLY: Decimal("35505.60"),
}
BUDGET_2026 = Decimal("340000.00")
# cost head, number of ledger lines, typical net amount per line
HEADS = [
    ("Cleaning (common parts)", 6, 7000),
    ("Security and reception", 6, 13200),
    ("Lift maintenance", 4, 3800),
    ("HVAC maintenance", 4, 6500),
    ("Electricity (common parts)", 5, 10200),
    ("Buildings insurance", 1, 47400),
    ("Repairs and maintenance", 6, 4300),
    ("Management fee", 4, 10400),
]
CAPEX = ("HVAC maintenance", "Chiller no. 2 replacement - new plant, capital project CX-2026-04", Decimal("48600.00"))
ACCRUAL = (
    "Electricity (common parts)",
    "December 2026 electricity, accrued (invoice not yet received)",
    Decimal("6842.15"),
)
LATE_2025 = Decimal("1284.50")


def _area_sqft(area: str, unit: str) -> Decimal:
    return Decimal(area) * SQFT_PER_M2 if unit == "m2" else Decimal(area)


def _ledger_lines() -> list[tuple[str, str, str, str, str, Decimal]]:
    """(line, date, invoice, cost head, description, net) in date order; the capex line and the accrual planted."""
    g = rng(SEED)
    raw = []
    for head, n, typical in HEADS:
        for k in range(n):
            month = 1 + (12 * k) // n + int(g.integers(0, max(1, 12 // n)))
            day = int(g.integers(1, 28))
            amount = (Decimal(str(round(float(g.uniform(0.8, 1.2)) * typical, 2)))).quantize(CENT)
            raw.append(
                (
                    dt.date(2026, min(month, 12), day),
                    head,
                    f"{head.split(' (')[0]} - {dt.date(2026, min(month, 12), 1):%B} invoice",
                    amount,
                )
            )
    raw.append((dt.date(2026, 9, 14), CAPEX[0], CAPEX[1], CAPEX[2]))
    raw.sort(key=lambda r: (r[0], r[1]))
    raw.append((dt.date(2026, 12, 31), ACCRUAL[0], ACCRUAL[1], ACCRUAL[2]))
    invoices = [int(x) for x in g.choice(range(10000, 99999), size=len(raw), replace=False)]
    return [
        (f"L-{i + 1:04d}", d.isoformat(), f"INV-{invoices[i]}", head, desc, amt)
        for i, (d, head, desc, amt) in enumerate(raw)
    ]


def _shares() -> dict[str, Decimal]:
    total = sum(_area_sqft(a, u) for _, _, a, u, _ in UNITS)
    return {unit: _area_sqft(a, u) / total for unit, _, a, u, _ in UNITS}


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    inputs_dir = Path(inputs_dir)
    lines = _ledger_lines()
    paths = [_write_ledger(inputs_dir, lines)]
    rows = [
        [u, t or "(vacant)", a, uom, start, "Let" if t else "Vacant - since 25/12/2025, Arkwright Design lease expired"]
        for u, t, a, uom, start in UNITS
    ]
    paths.append(
        write_csv(inputs_dir / RENT_ROLL_CSV, ["unit", "tenant", "area", "area_unit", "lease_start", "status"], rows)
    )
    paths.append(_write_leases(inputs_dir))
    paths.append(write_text(inputs_dir / PROCEDURE_TXT, PROCEDURE))

    # On-account demands: a quarter of the 2026 budget times the tenant's proportion, paid on the quarter days.
    shares = _shares()
    quarter_days = [
        ("Q1", "25/12/2025", "2025-12-23"),
        ("Q2", "25/03/2026", "2026-03-24"),
        ("Q3", "24/06/2026", "2026-06-22"),
        ("Q4", "29/09/2026", "2026-09-28"),
    ]
    pay, n = [], 1
    for unit, tenant, *_ in UNITS:
        if not tenant:
            continue
        q = (BUDGET_2026 * shares[unit] / 4).quantize(CENT, rounding=ROUND_HALF_UP)
        for k, (quarter, day_first, iso) in enumerate(quarter_days):
            # The bank export writes some receipt dates day-first, others ISO.
            received = day_first if (n + k) % 3 == 0 else iso
            pay.append(
                [f"P-26{n:03d}", tenant, unit, received, f"Service charge on account {quarter} 2026", f"{q:.2f}"]
            )
            n += 1
            if tenant == ALDER and quarter == "Q2":
                pay.append(list(pay[-1]))  # the bank export lists the same payment twice
        if tenant == DELPHINE:
            pay.append(
                [f"P-26{n:03d}", tenant, unit, "2026-02-11", "Service charge 2025 balancing charge", f"{LATE_2025:.2f}"]
            )
            n += 1
    paths.append(
        write_csv(
            inputs_dir / PAYMENTS_CSV, ["payment_id", "tenant", "unit", "date_received", "reference", "amount_gbp"], pay
        )
    )
    return paths


PROCEDURE = """Harbour Point - service charge year-end reconciliation procedure (managing agent's office manual, \
section 6)

1. Year. The service charge year runs 1 January to 31 December. The actual costs are the lines of the
   Ledger sheet of the year's cost ledger workbook, which is the book of account. Other sheets of that
   workbook (summaries, budgets) are working papers and are not updated after they are prepared.
2. What may be recovered is set by the leases (lease abstracts, Schedule 4). Any cost a lease excludes
   stays with the landlord and is shown as such; do not net it off silently.
3. Areas. Apportion by net internal area in square feet. Convert an area given in square metres at
   1 m2 = 10.7639 sq ft. Do not round the proportions; round each amount to the penny.
4. On-account payments. Count each payment once (the bank export can repeat a payment id). Only the
   quarterly on-account payments demanded for the year being reconciled count against that year;
   payments of an earlier year's balancing charge or of arrears belong to that earlier year.
5. Balancing charge. Balancing charge = the tenant's service charge for the year (after any lease cap)
   less its on-account payments for the year. A positive figure is a balancing charge payable by the
   tenant; a negative figure is a credit due to the tenant.
6. Tie-out. The tenants' charges, plus every amount borne by the landlord (excluded costs, the share of
   vacant units, any excess over a lease cap), must equal the total of the ledger to the penny.
"""


def _write_ledger(inputs_dir: Path, lines) -> Path:
    wb = openpyxl.Workbook()
    cover = wb.active
    cover.title = "Cover"
    for text in [
        "Harbour Point, 14 Quayside Road - service charge cost ledger, year ended 31 December 2026",
        "Prepared by the managing agent's accounts team. Amounts are net of VAT, in GBP.",
        (
            "Sheets: Ledger (every cost posted for the year, the book of account), Summary (by cost head, "
            "prepared 15 December 2026 for the budget meeting), Budget 2026, Certified 2025 (each tenant's "
            "certified service charge for 2025)."
        ),
    ]:
        cover.append([text])
    cover["A1"].font = Font(bold=True)
    autosize(cover, {"A": 120})
    led = wb.create_sheet("Ledger")
    led.append(["Line", "Date", "Invoice", "Cost head", "Description", "Net (GBP)"])
    style_header(led)
    for line, date, inv, head, desc, amt in lines:
        led.append([line, date, inv, head, desc, float(amt)])
    autosize(led, {"A": 8, "B": 11, "C": 11, "D": 28, "E": 66, "F": 12})
    summ = wb.create_sheet("Summary")
    summ.append(["Service charge costs by cost head, to 15 December 2026"])
    summ["A1"].font = Font(bold=True)
    summ.append(["Cost head", "Net (GBP)"])
    style_header(summ, 2)
    heads: dict[str, Decimal] = {}
    for _, date, _, head, _, amt in lines:
        if date <= "2026-12-15":
            heads[head] = heads.get(head, Decimal(0)) + amt
    for head, _, _ in HEADS:
        summ.append([head, float(heads[head])])
    summ.append(["Total", float(sum(heads.values()))])
    autosize(summ, {"A": 30, "B": 14})
    bud = wb.create_sheet("Budget 2026")
    bud.append(["Service charge budget 2026 (basis of the quarterly on-account demands)"])
    bud["A1"].font = Font(bold=True)
    bud.append(["Cost head", "Budget (GBP)"])
    style_header(bud, 2)
    weights = [Decimal(n * t) for _, n, t in HEADS]
    for (head, _, _), w in zip(HEADS, weights, strict=True):
        bud.append([head, float((BUDGET_2026 * w / sum(weights)).quantize(Decimal("100")))])
    bud.append(["Total budget", float(BUDGET_2026)])
    autosize(bud, {"A": 30, "B": 14})
    cert = wb.create_sheet("Certified 2025")
    cert.append(["Tenant", "Unit", "Certified service charge 2025 (GBP)"])
    style_header(cert)
    for unit, tenant, *_ in UNITS:
        if tenant:
            cert.append([tenant, unit, float(CERTIFIED_2025[tenant])])
    cert.append(["Arkwright Design Ltd (lease expired 24/12/2025)", VACANT_UNIT, 22580.15])
    autosize(cert, {"A": 48, "B": 6, "C": 34})
    return save_workbook(wb, inputs_dir / LEDGER_XLSX)


def _write_leases(inputs_dir: Path) -> Path:
    rows = []
    for unit, tenant, area, uom, start in UNITS:
        if not tenant:
            continue
        cap = (
            (
                "Clause 7.4 (side letter of 3 March 2023): the service charge for any year shall not "
                "exceed the service charge certified for the previous year by more than 3%; any excess is "
                "borne by the landlord."
            )
            if tenant == CORRAN
            else "None"
        )
        rows.append([tenant, unit, f"{area} {uom}", start, "Schedule 4 (standard)", cap])
    blocks = [
        Heading("Harbour Point - lease abstracts (service charge provisions)"),
        Para(
            "Prepared by Thornbury Estates' legal team from the executed leases, June 2026. All leases of "
            "Harbour Point share the standard service charge schedule (Schedule 4) summarised below; "
            "tenant-specific departures are listed in the table."
        ),
        Heading("Schedule 4 - service charge (standard to every lease)", 2),
        Para(
            "Paragraph 2. Recoverable costs: the proper costs of cleaning, security, lighting and heating "
            "of the common parts, maintenance and repair of the lifts and the heating, ventilation and "
            "air conditioning plant, the insurance of the building, repairs and maintenance of the "
            "structure and common parts, and the managing agent's fee."
        ),
        Para(
            "Paragraph 3. Excluded costs: (a) costs recovered from a particular tenant or from an "
            "insurer; (b) the cost of capital improvements and of the replacement of plant, machinery or "
            "equipment, save for repairs and the replacement of minor components in the course of "
            "maintenance; (c) the costs of letting or marketing any unit, including rent-free periods and "
            "agents' fees."
        ),
        Para(
            "Paragraph 4. The Tenant's proportion is the net internal area of the premises divided by the "
            "total net internal area of the lettable units of the building, whether or not let. The "
            "landlord bears the proportion of any unit that is not let."
        ),
        Para(
            "Paragraph 5. The Tenant pays on account a quarter of the landlord's budget times the "
            "Tenant's proportion on each quarter day. After the year end the landlord certifies the "
            "actual costs; the balancing charge is payable within 21 days of demand and an overpayment is "
            "credited to the Tenant."
        ),
        Heading("Tenant-specific provisions", 2),
        Table(["Tenant", "Unit", "Area", "Lease start", "Service charge", "Cap / exception"], rows),
        Para(
            "The side letter of Corran Insurance Brokers Ltd was granted on the renewal of its lease and "
            "binds the landlord's successors; the other leases contain no cap."
        ),
    ]
    return write_docx(blocks, inputs_dir / LEASES_DOCX, title="Harbour Point - lease abstracts")


# ------------------------------------------------------------------ the answer from the inputs alone


def compute(inputs_dir: Path) -> dict:
    """The leases' answer: recoverable costs, each unit's share, the cap, on-account payments and balances."""
    inputs_dir = Path(inputs_dir)
    wb = openpyxl.load_workbook(inputs_dir / LEDGER_XLSX)
    ledger = [r for r in wb["Ledger"].iter_rows(min_row=2, values_only=True) if r[0]]
    total = sum(
        (decimal_amount(r[5], f"{LEDGER_XLSX}: Ledger line {r[0]}, field 'Net (GBP)'") for r in ledger), Decimal(0)
    )
    # Schedule 4 paragraph 3(b): a capital project (new plant) is excluded.
    excluded_lines = [r for r in ledger if re.search(r"capital project|new plant", str(r[4]), re.I)]
    excluded = sum((decimal_amount(r[5], LEDGER_XLSX) for r in excluded_lines), Decimal(0))
    recoverable = total - excluded
    certified = {
        r[0]: decimal_amount(r[2], f"{LEDGER_XLSX}: Certified 2025")
        for r in wb["Certified 2025"].iter_rows(min_row=2, values_only=True)
        if r[0]
    }
    summary_total = next(
        decimal_amount(r[1], LEDGER_XLSX)
        for r in wb["Summary"].iter_rows(min_row=3, values_only=True)
        if r[0] == "Total"
    )

    roll = read_csv_dicts(inputs_dir / RENT_ROLL_CSV)
    area = {}
    for r in roll:
        if r["area_unit"] not in ("sq ft", "m2"):
            raise ValueError(
                f"{RENT_ROLL_CSV}: unit {r['unit']}, field 'area_unit': {r['area_unit']!r} is neither 'sq ft' nor 'm2'"
            )
        area[r["unit"]] = _area_sqft(r["area"], r["area_unit"])
    total_area = sum(area.values())
    tenant_of = {r["unit"]: r["tenant"] for r in roll if r["status"] == "Let"}
    vacant = [r["unit"] for r in roll if r["status"] != "Let"]
    apportioned = {u: (recoverable * area[u] / total_area).quantize(CENT, rounding=ROUND_HALF_UP) for u in area}

    seen, paid = set(), {t: Decimal(0) for t in tenant_of.values()}
    for r in read_csv_dicts(inputs_dir / PAYMENTS_CSV):
        if r["payment_id"] in seen:
            continue
        seen.add(r["payment_id"])
        if re.search(r"on account .*2026", r["reference"], re.I):
            paid[r["tenant"]] += decimal_amount(
                r["amount_gbp"], f"{PAYMENTS_CSV}: payment {r['payment_id']}, field 'amount_gbp'"
            )

    charge, cap_limit, cap_excess, balance = {}, {}, Decimal(0), {}
    for u, t in tenant_of.items():
        charge[t] = apportioned[u]
        if t == CORRAN:
            cap_limit[t] = (certified[t] * (1 + CAP_RATE)).quantize(CENT, rounding=ROUND_HALF_UP)
            if charge[t] > cap_limit[t]:
                cap_excess = charge[t] - cap_limit[t]
                charge[t] = cap_limit[t]
        balance[t] = charge[t] - paid[t]
    # The landlord takes the vacant unit's proportion as the remainder, so that the pennies of rounding tie (procedure
    # 6).
    vacancy = recoverable - sum((apportioned[u] for u in tenant_of), Decimal(0))
    allocated = sum(charge.values(), Decimal(0)) + vacancy + cap_excess + excluded
    return {
        "total": total,
        "excluded": excluded,
        "excluded_lines": excluded_lines,
        "recoverable": recoverable,
        "summary_total": summary_total,
        "area": area,
        "total_area": total_area,
        "tenant_of": tenant_of,
        "vacant": vacant,
        "apportioned": apportioned,
        "paid": paid,
        "charge": charge,
        "cap_limit": cap_limit,
        "cap_excess": cap_excess,
        "balance": balance,
        "vacancy": vacancy,
        "rounding": total - allocated,
        "certified": certified,
        "n_lines": len(ledger),
    }


# ------------------------------------------------------------------ the gold deliverables


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful property manager would: a formula-driven reconciliation and the memo."""
    a = compute(inputs_dir)
    outputs_dir = Path(outputs_dir)
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = _write_book(a, Path(inputs_dir), outputs_dir / BOOK_XLSX)
    memo = _write_memo(a, outputs_dir / MEMO_DOCX)
    record = write_completion_record(
        outputs_dir,
        [BOOK_XLSX, MEMO_DOCX],
        questions=[
            "Should the cost of the chiller replacement be raised with Thornbury Estates' capital budget "
            "holder rather than carried in the service charge accounts at all?"
        ],
        notes=(
            "The chiller replacement (CX-2026-04) is excluded from the recoverable costs under Schedule 4, "
            "paragraph 3(b). Unit 1.02's share and the excess over Corran's cap are borne by the landlord. "
            "Totals tie to the Ledger sheet."
        ),
    )
    return [book, memo, record]


def _write_book(a: dict, inputs_dir: Path, path: Path) -> Path:
    wb = openpyxl.Workbook()
    rec = wb.active
    rec.title = "Reconciliation"
    costs = wb.create_sheet("Costs")
    areas = wb.create_sheet("Areas")
    pays = wb.create_sheet("Payments")

    # Costs: the Ledger sheet line by line, each marked recoverable or excluded (Schedule 4).
    costs.append(["Line", "Date", "Cost head", "Description", "Net (GBP)", "Recoverable?", "Recoverable (GBP)"])
    style_header(costs)
    ledger = [
        r
        for r in openpyxl.load_workbook(inputs_dir / LEDGER_XLSX)["Ledger"].iter_rows(min_row=2, values_only=True)
        if r[0]
    ]
    excl_ids = {r[0] for r in a["excluded_lines"]}
    for i, r in enumerate(ledger, start=2):
        flag = "No - Schedule 4 para 3(b), capital" if r[0] in excl_ids else "Yes"
        costs.append([r[0], r[1], r[3], r[4], r[5], flag, f'=IF(LEFT(F{i},2)="No",0,E{i})'])
    last = len(ledger) + 1
    ctot = last + 1
    costs.append(["Total", "", "", "", f"=SUM(E2:E{last})", "", f"=SUM(G2:G{last})"])
    costs.append(["Excluded", "", "", "", "", "", f"=E{ctot}-G{ctot}"])
    autosize(costs, {"A": 8, "B": 11, "C": 28, "D": 64, "E": 12, "F": 32, "G": 16})

    # Areas: every lettable unit, let or vacant, converted to sq ft (procedure 3, Schedule 4 paragraph 4).
    areas.append(["Unit", "Occupier", "Area as given", "Unit of measure", "Area (sq ft)", "Proportion"])
    style_header(areas)
    roll = read_csv_dicts(inputs_dir / RENT_ROLL_CSV)
    n = len(roll)
    for i, r in enumerate(roll, start=2):
        areas.append(
            [
                r["unit"],
                r["tenant"],
                float(Decimal(r["area"])),
                r["area_unit"],
                f'=IF(D{i}="m2",C{i}*$B${n + 4},C{i})',
                f"=E{i}/$E${n + 2}",
            ]
        )
    areas.append(["Total lettable area", "", "", "", f"=SUM(E2:E{n + 1})", f"=SUM(F2:F{n + 1})"])
    areas.append([])
    areas.append(["sq ft per m2", float(SQFT_PER_M2)])
    autosize(areas, {"A": 22, "B": 30, "C": 13, "D": 15, "E": 13, "F": 12})
    area_row = {r["unit"]: i for i, r in enumerate(roll, start=2)}

    # Payments: the bank export, each payment once, only 2026 on-account demands counted (procedure 4).
    pays.append(
        [
            "Payment id",
            "Tenant",
            "Date received",
            "Reference",
            "Amount (GBP)",
            "Counted for 2026",
            "Counted amount (GBP)",
        ]
    )
    style_header(pays)
    seen = set()
    rows = read_csv_dicts(inputs_dir / PAYMENTS_CSV)
    for i, r in enumerate(rows, start=2):
        if r["payment_id"] in seen:
            why = "No - repeated payment id"
        elif not re.search(r"on account .*2026", r["reference"], re.I):
            why = "No - not a 2026 on-account payment"
        else:
            why = "Yes"
        seen.add(r["payment_id"])
        pays.append(
            [
                r["payment_id"],
                r["tenant"],
                r["date_received"],
                r["reference"],
                float(Decimal(r["amount_gbp"])),
                why,
                f'=IF(F{i}="Yes",E{i},0)',
            ]
        )
    plast = len(rows) + 1
    autosize(pays, {"A": 11, "B": 30, "C": 13, "D": 40, "E": 13, "F": 34, "G": 20})

    # Reconciliation: one row per tenant; then the tie-out to the ledger.
    rec.append(
        [
            "Tenant",
            "Unit",
            "Area (sq ft)",
            "Proportion",
            "Apportioned cost",
            "Cap limit (2025 certified + 3%)",
            "Charge for the year",
            "On-account paid",
            "Balancing charge (+ due from tenant, - credit)",
        ]
    )
    style_header(rec)
    tenants = list(a["tenant_of"].items())
    for j, (unit, tenant) in enumerate(tenants):
        r = 2 + j
        ar = area_row[unit]
        cap = (
            f"=ROUND({float(a['certified'][tenant])}*(1+{float(CAP_RATE)}),2)" if tenant in a["cap_limit"] else "no cap"
        )
        charge = f"=MIN(E{r},F{r})" if tenant in a["cap_limit"] else f"=E{r}"
        rec.append(
            [
                tenant,
                unit,
                f"=Areas!E{ar}",
                f"=Areas!F{ar}",
                f"=ROUND($B$12*D{r},2)",
                cap,
                charge,
                f"=SUMIF(Payments!$B$2:$B${plast},A{r},Payments!$G$2:$G${plast})",
                f"=ROUND(G{r}-H{r},2)",
            ]
        )
        rec[f"D{r}"].number_format = "0.0000%"
        for col in "EFGHI":
            rec[f"{col}{r}"].number_format = "#,##0.00"
    t = 2 + len(tenants)
    rec.append(
        [
            "Total tenants",
            "",
            f"=SUM(C2:C{t - 1})",
            f"=SUM(D2:D{t - 1})",
            f"=SUM(E2:E{t - 1})",
            "",
            f"=SUM(G2:G{t - 1})",
            f"=SUM(H2:H{t - 1})",
            f"=SUM(I2:I{t - 1})",
        ]
    )
    rec.append([])
    rec.append(["Tie-out to the cost ledger (procedure 6)"])
    rec.cell(row=rec.max_row, column=1).font = Font(bold=True)
    vac = area_row[a["vacant"][0]]
    corran_row = 2 + [tn for _, tn in tenants].index(CORRAN)
    tie = [
        ("Total costs per ledger", f"=Costs!E{ctot}"),  # row 10
        ("Excluded costs", f"=Costs!G{ctot + 1}"),  # row 11
        ("Recoverable costs", "=B10-B11"),  # row 12
        ("Charged to tenants", f"=G{t}"),  # row 13
        (f"Landlord: vacant unit {a['vacant'][0]}", f"=B12-E{t}"),  # row 14, the remainder (procedure 6)
        ("Landlord: excess over Corran's cap", f"=E{corran_row}-G{corran_row}"),
        ("Borne by landlord", "=B14+B15"),  # row 16: recoverable, not charged
        ("Total allocated", "=B13+B16+B11"),
        ("Difference to ledger", "=ROUND(B10-B17,2)"),
    ]
    assert rec.max_row + 1 == 10, rec.max_row  # the formulas above name rows 10-18
    for label, f in tie:
        rec.append([label, f])
        rec.cell(row=rec.max_row, column=2).number_format = "#,##0.00"
    rec.append([])
    rec.append(["Vacant unit proportion (check)", f"=Areas!F{vac}"])
    rec.append(
        [
            "Chiller replacement CX-2026-04",
            "Excluded: capital improvement, borne by the landlord (lease Schedule 4, paragraph 3(b))",
        ]
    )
    autosize(rec, {"A": 40, "B": 14, "C": 12, "D": 11, "E": 16, "F": 22, "G": 16, "H": 16, "I": 22})
    return save_workbook(wb, path)


def _write_memo(a: dict, path: Path) -> Path:
    bal, charge, paid = a["balance"], a["charge"], a["paid"]
    capex = a["excluded_lines"][0]
    vac = a["vacant"][0]
    corran_unit = next(u for u, t in a["tenant_of"].items() if t == CORRAN)
    owing = [t for t in a["tenant_of"].values() if bal[t] > 0]
    credited = [t for t in a["tenant_of"].values() if bal[t] < 0]
    rows = []
    for unit, tenant in a["tenant_of"].items():
        b = bal[tenant]
        rows.append(
            [
                tenant,
                unit,
                fmt_money(a["apportioned"][unit]),
                fmt_money(charge[tenant]),
                fmt_money(paid[tenant]),
                fmt_money(b),
                "balancing charge due" if b > 0 else "credit due to tenant",
            ]
        )
    blocks = [
        Heading("Summary"),
        Para(
            "The 2026 service charge for Harbour Point is reconciled. The Ledger sheet of the cost ledger "
            f"totals GBP {fmt_money(a['total'])} over {a['n_lines']} lines. Of that, GBP "
            f"{fmt_money(a['excluded'])} for the chiller replacement is excluded by the leases, leaving "
            f"recoverable costs of GBP {fmt_money(a['recoverable'])}. The tenants are charged GBP "
            f"{fmt_money(sum(charge.values(), Decimal(0)))}; the landlord bears the vacant unit {vac} "
            f"share of GBP {fmt_money(a['vacancy'])}, the excess over Corran's cap of GBP "
            f"{fmt_money(a['cap_excess'])} and the excluded chiller cost. These amounts tie to the ledger "
            "total to the penny."
        ),
        Para(
            f"{len(owing)} tenants have a balancing charge to pay ({', '.join(owing)}) and {len(credited)} "
            f"is due a credit ({', '.join(credited)}). Balances are stated as the charge for the year less "
            "the on-account payments for 2026: a positive figure is payable by the tenant, a negative "
            "figure is a credit to the tenant."
        ),
        Heading("Costs and exclusions"),
        Para(
            "The actual costs are the lines of the Ledger sheet, the book of account. The Summary sheet "
            f"of the same workbook totals GBP {fmt_money(a['summary_total'])}: it was prepared on 15 "
            "December 2026 and misses the December electricity accrual posted on 31 December, so it was "
            f"not used. Line {capex[0]}, '{capex[4]}', GBP {fmt_money(a['excluded'])}, is the installation "
            "of new plant under capital project CX-2026-04. Schedule 4, paragraph 3(b) of every lease "
            "excludes the cost of capital improvements and of the replacement of plant, other than "
            "repairs, so it is not a recoverable cost."
        ),
        Heading("Apportionment"),
        Para(
            "Each tenant's proportion is its net internal area over the total net internal area of the "
            "lettable units, let or not (Schedule 4, paragraph 4). The rent roll gives Brightwater's and "
            "Delphine's areas in square metres; they were converted at 10.7639 sq ft to the m2, which "
            f"makes the building's lettable area {a['total_area'].quantize(Decimal('0.0001')):,} sq ft. "
            "Proportions were not rounded; each amount is rounded to the penny."
        ),
        Para(
            "Corran Insurance Brokers Ltd's side letter (clause 7.4) caps its service charge at its 2025 "
            f"certified charge, GBP {fmt_money(a['certified'][CORRAN])}, plus 3%: GBP "
            f"{fmt_money(a['cap_limit'][CORRAN])}. Its apportioned cost of GBP "
            f"{fmt_money(a['apportioned'][corran_unit])} exceeds the cap, so it is charged GBP "
            f"{fmt_money(charge[CORRAN])} and the excess of GBP {fmt_money(a['cap_excess'])} is borne by "
            "the landlord, not by the other tenants."
        ),
        Heading("Landlord's share"),
        Para(
            f"Unit {vac} was vacant for the whole year. Under Schedule 4, paragraph 4 the landlord bears "
            f"its proportion, GBP {fmt_money(a['vacancy'])}, which is not spread over the let units. With "
            f"the cap excess of GBP {fmt_money(a['cap_excess'])} and the chiller cost of GBP "
            f"{fmt_money(a['excluded'])}, the landlord bears GBP "
            f"{fmt_money(a['vacancy'] + a['cap_excess'] + a['excluded'])} of the year's costs."
        ),
        Heading("Tenant balances"),
        Para(
            "On-account payments count once each: the bank export repeats Alder & Finch's Q2 payment "
            "under the same payment id, and Delphine Health's payment of February 2026 settled its 2025 "
            "balancing charge, so neither counts against 2026."
        ),
        Table(
            ["Tenant", "Unit", "Apportioned", "Charge for the year", "On-account paid", "Balancing charge", "Meaning"],
            rows,
        ),
        Para(f"Corran Insurance Brokers Ltd is due a credit of GBP {fmt_money(-bal[CORRAN])}."),
        Heading("Chiller replacement"),
        Para(
            f"I recommend that the chiller replacement, GBP {fmt_money(a['excluded'])}, is excluded from "
            "the 2026 service charge and stays a landlord's capital cost. Schedule 4, paragraph 3(b) of "
            "each lease excludes capital improvements and the replacement of plant, save for repairs, and "
            "the new chiller is a replacement of plant under a capital project. Charging it to the "
            "tenants would breach every lease in the building, invite challenge of the whole "
            "reconciliation and put the certificate at risk. If it were charged, each tenant would pay "
            f"its proportion of GBP {fmt_money(a['excluded'])} on top of the figures above, and Corran's "
            "cap would absorb none of it for the landlord."
        ),
        Para(
            "The cost can be recovered only through rent, for example at the next review, or with the tenants' written "
            "agreement to a variation of Schedule 4; the reconciliation sent to the tenants leaves it out."
        ),
    ]
    return write_docx(blocks, path, title="Harbour Point - service charge reconciliation 2026")
