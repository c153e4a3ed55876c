"""INS-01, insurance claims: large-loss reserve review and SIU referrals for November 2026's open property claims.

The property claims team leader at Harrowgate Mutual reviews the open claims
at the month-end cut-off (30 November 2026): each claim's required reserve
under the reserving guideline (incurred = paid + outstanding estimate, less
the deductible, capped at the current limit, less what is paid, never below
nil, euro claims converted at the month-end rate) and the SET of claims to
refer to the special investigation unit under the guideline's red flags.

Planted facts:

- The register logs CLM-26-0640 (Fenwick Florists, escape of water on
  12 November) twice: CLM-26-0641 is the broker's re-entered FNOL of the same
  loss. Counted once; 14 claims are reviewed (17 register lines, less the
  duplicate, the closed CLM-26-0598 and CLM-26-0671, notified on 01/12/2026,
  after the cut-off, although its policy incepted 18 days before the loss).
- FNOL dates are written ISO or day-first. CLM-26-0621's "11/10/2026" is
  11 October, 9 days after its loss; read month-first it is 39 days late.
- CLM-26-0614 was notified 38 days after its loss, but the loss falls in the
  declared catastrophe event CAT-2610 (Storm Elin, 18-20 October 2026): the
  guideline's exception, no referral.
- CLM-26-0633 (Elmstead Joinery, fire): the policy schedule's Limits sheet
  carries version 1 (120,000.00, superseded) and endorsement version 2
  (200,000.00 from 20 September 2026). Reserve 235,000 - 10,000 deductible,
  capped at 200,000, less 20,000 paid: 180,000.00 (100,000.00 on the
  superseded limit). The cover was increased 46 days before the loss: a red
  flag.
- CLM-26-0657's outstanding estimate is revised by the adjuster's note of
  27 November from 22,000 to 61,000: reserve 60,000.00 (21,000.00 on the
  register's figure).
- CLM-26-0652 is a euro policy: 55,500.00 EUR at 0.8650 = 48,007.50 GBP.
- CLM-26-0660's incurred (1,850) is below its 2,500 deductible: reserve
  nil, not -650.00. CLM-26-0663 is capped at its 150,000 limit: 110,000.00.
- SIU referrals, exactly: CLM-26-0618 (notified 39 days late, no catastrophe),
  CLM-26-0633 (cover increased within 60 days), CLM-26-0640 (policy incepted
  42 days before the loss) and CLM-26-0645 (adjuster: account inconsistent
  with the physical evidence). Total required reserve 662,557.50 GBP.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import openpyxl

from pilot.scenarios.common import (
    autosize,
    fmt_money,
    iso_or_day_first,
    read_csv_dicts,
    rng,
    style_header,
    write_completion_record,
)
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_text

# The generator's one random source: it draws the three routine claims' dates and amounts.
SEED = 631417

REGISTER_CSV = "claims_register.csv"
SCHEDULE_XLSX = "policy_schedule.xlsx"
NOTES_DOCX = "adjuster_notes.docx"
GUIDE_TXT = "reserving_and_siu_guideline.txt"
BOOK_XLSX = "reserve_review.xlsx"
MEMO_DOCX = "siu_referrals.docx"

CUTOFF = dt.date(2026, 11, 30)
EUR_GBP = Decimal("0.8650")
LATE_DAYS = 30
NEW_COVER_DAYS = 60
CAT = ("CAT-2610", "Storm Elin", dt.date(2026, 10, 18), dt.date(2026, 10, 20))
CENT = Decimal("0.01")

# policy, insured, inception, currency, deductible, [(version, effective, limit, status)]
POLICIES = [
    ("HM-P-1001", "Ashdown Bakery Ltd", "2025-04-01", "GBP", 1000, [(1, "2025-04-01", 250000, "current")]),
    ("HM-P-1002", "Brookfield Dental Practice", "2026-02-01", "GBP", 2500, [(1, "2026-02-01", 500000, "current")]),
    ("HM-P-1003", "Carrow Motors Ltd", "2025-07-15", "GBP", 1000, [(1, "2025-07-15", 100000, "current")]),
    ("HM-P-1004", "Denholm Print Works", "2025-11-01", "GBP", 5000, [(1, "2025-11-01", 150000, "current")]),
    (
        "HM-P-1005",
        "Elmstead Joinery Ltd",
        "2026-01-10",
        "GBP",
        10000,
        [
            (1, "2026-01-10", 120000, "superseded by endorsement E2"),
            (2, "2026-09-20", 200000, "current (endorsement E2: contents sum insured increased)"),
        ],
    ),
    ("HM-P-1006", "Fenwick Florists", "2026-10-01", "GBP", 500, [(1, "2026-10-01", 75000, "current")]),
    ("HM-P-1007", "Greyfriars Hotel Ltd", "2024-06-01", "GBP", 2500, [(1, "2024-06-01", 400000, "current")]),
    ("HM-P-1008", "Harbour Lofts DAC (Cork)", "2026-03-01", "EUR", 1500, [(1, "2026-03-01", 300000, "current")]),
    ("HM-P-1009", "Ivydene Care Home", "2025-12-01", "GBP", 1000, [(1, "2025-12-01", 250000, "current")]),
    ("HM-P-1010", "Juniper Nurseries", "2025-05-01", "GBP", 2500, [(1, "2025-05-01", 60000, "current")]),
    ("HM-P-1011", "Kingsmead Self Storage", "2025-09-01", "GBP", 5000, [(1, "2025-09-01", 150000, "current")]),
    ("HM-P-1012", "Larch Veterinary Practice", "2026-11-10", "GBP", 1000, [(1, "2026-11-10", 80000, "current")]),
    ("HM-P-1013", "Milton Opticians", "2025-02-01", "GBP", 500, [(1, "2025-02-01", 50000, "current")]),
    ("HM-P-1014", "Northgate Cafe", "2025-03-01", "GBP", 1000, [(1, "2025-03-01", 100000, "current")]),
    ("HM-P-1015", "Oakridge Pharmacy", "2024-10-01", "GBP", 1000, [(1, "2024-10-01", 150000, "current")]),
    ("HM-P-1016", "Pennant Print & Copy", "2025-08-01", "GBP", 500, [(1, "2025-08-01", 75000, "current")]),
]

# claim, policy, peril, loss date, FNOL as the register writes it, paid, outstanding estimate, status, cat code, remarks
PLANTED = [
    (
        "CLM-26-0598",
        "HM-P-1013",
        "Theft",
        "2026-09-10",
        "2026-09-11",
        "9300.00",
        "0.00",
        "closed",
        "",
        "settled 28/10/2026",
    ),
    ("CLM-26-0611", "HM-P-1001", "Escape of water", "2026-10-14", "2026-10-16", "12400.00", "18750.00", "open", "", ""),
    ("CLM-26-0614", "HM-P-1002", "Storm", "2026-10-19", "26/11/2026", "0.00", "46200.00", "open", "CAT-2610", ""),
    ("CLM-26-0618", "HM-P-1003", "Theft", "2026-09-28", "2026-11-06", "0.00", "27900.00", "open", "", ""),
    ("CLM-26-0621", "HM-P-1004", "Fire", "2026-10-02", "11/10/2026", "35000.00", "52300.00", "open", "", ""),
    ("CLM-26-0633", "HM-P-1005", "Fire", "2026-11-05", "2026-11-07", "20000.00", "215000.00", "open", "", ""),
    ("CLM-26-0640", "HM-P-1006", "Escape of water", "2026-11-12", "2026-11-13", "0.00", "38400.00", "open", "", ""),
    (
        "CLM-26-0641",
        "HM-P-1006",
        "Escape of water",
        "2026-11-12",
        "14/11/2026",
        "0.00",
        "38400.00",
        "open",
        "",
        "FNOL received from broker",
    ),
    ("CLM-26-0645", "HM-P-1007", "Fire", "2026-11-08", "2026-11-09", "15000.00", "64000.00", "open", "", ""),
    (
        "CLM-26-0652",
        "HM-P-1008",
        "Storm",
        "2026-11-03",
        "04/11/2026",
        "8000.00",
        "57000.00",
        "open",
        "",
        "amounts in EUR",
    ),
    ("CLM-26-0657", "HM-P-1009", "Escape of water", "2026-10-27", "2026-10-29", "4200.00", "22000.00", "open", "", ""),
    ("CLM-26-0660", "HM-P-1010", "Storm", "2026-11-18", "19/11/2026", "0.00", "1850.00", "open", "", ""),
    ("CLM-26-0663", "HM-P-1011", "Flood", "2026-11-02", "2026-11-04", "40000.00", "180000.00", "open", "", ""),
    ("CLM-26-0671", "HM-P-1012", "Theft", "2026-11-28", "01/12/2026", "0.00", "18000.00", "open", "", ""),
]
ROUTINE = [
    ("CLM-26-0626", "HM-P-1014", "Accidental damage"),
    ("CLM-26-0649", "HM-P-1015", "Escape of water"),
    ("CLM-26-0666", "HM-P-1016", "Theft"),
]
REVISED = ("CLM-26-0657", Decimal("61000.00"))
INCONSISTENT = "CLM-26-0645"


def _dec(v: object) -> Decimal:
    return Decimal(str(v).replace(",", "").strip())


def _register_rows() -> list[list[str]]:
    g = rng(SEED)
    rows = [list(r) for r in PLANTED]
    for cid, pol, peril in ROUTINE:
        loss = dt.date(2026, 10, 1) + dt.timedelta(days=int(g.integers(0, 55)))
        fnol = loss + dt.timedelta(days=int(g.integers(1, 6)))
        paid = Decimal(int(g.integers(0, 80)) * 50)
        os_ = Decimal(int(g.integers(60, 400)) * 50)
        fn = fnol.strftime("%d/%m/%Y") if int(g.integers(0, 2)) else fnol.isoformat()
        rows.append([cid, pol, peril, loss.isoformat(), fn, f"{paid:.2f}", f"{os_:.2f}", "open", "", ""])
    return sorted(rows, key=lambda r: r[0])


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    inputs_dir = Path(inputs_dir)
    rows = _register_rows()
    paths = [
        write_csv(
            inputs_dir / REGISTER_CSV,
            [
                "claim_id",
                "policy_no",
                "peril",
                "loss_date",
                "fnol_date",
                "currency",
                "paid",
                "outstanding_estimate",
                "status",
                "cat_code",
                "remarks",
            ],
            [r[:5] + [next(p[3] for p in POLICIES if p[0] == r[1])] + r[5:] for r in rows],
        )
    ]
    paths.append(_write_schedule(inputs_dir))
    paths.append(_write_notes(inputs_dir))
    paths.append(_write_guideline(inputs_dir))
    return paths


def _write_schedule(inputs_dir: Path) -> Path:
    wb = openpyxl.Workbook()
    pol = wb.active
    pol.title = "Policies"
    pol.append(["Policy", "Insured", "Inception", "Expiry", "Currency"])
    style_header(pol)
    for p, name, inc, cur, _, _ in POLICIES:
        d = dt.date.fromisoformat(inc)
        pol.append([p, name, d, d.replace(year=d.year + 1) - dt.timedelta(days=1), cur])
    for row in pol.iter_rows(min_row=2, min_col=3, max_col=4):
        for cell in row:
            cell.number_format = "dd/mm/yyyy"
    autosize(pol, {"A": 11, "B": 30, "C": 12, "D": 12, "E": 9})
    ded = wb.create_sheet("Deductibles")
    ded.append(["Policy", "Deductible each and every loss (policy currency)"])
    style_header(ded)
    for p, _, _, _, d, _ in POLICIES:
        ded.append([p, d])
    autosize(ded, {"A": 11, "B": 46})
    lim = wb.create_sheet("Limits")
    lim.append(["Policy", "Version", "Effective from", "Limit of indemnity (policy currency)", "Status"])
    style_header(lim)
    for p, _, _, _, _, versions in POLICIES:
        for v, eff, limit, status in versions:
            lim.append([p, v, dt.date.fromisoformat(eff), limit, status])
    for row in lim.iter_rows(min_row=2, min_col=3, max_col=3):
        for cell in row:
            cell.number_format = "dd/mm/yyyy"
    autosize(lim, {"A": 11, "B": 8, "C": 14, "D": 34, "E": 58})
    return save_workbook(wb, inputs_dir / SCHEDULE_XLSX)


def _write_notes(inputs_dir: Path) -> Path:
    blocks = [
        Heading("Adjuster notes - open property claims, November 2026"),
        Para(
            "Harrowgate Mutual Insurance, Property Claims. Notes by the field adjusters, latest first "
            "within each claim."
        ),
        Heading("CLM-26-0614 - Brookfield Dental Practice", 2),
        Para(
            "26 November: roof covering and ceiling damage from Storm Elin on 19 October. The practice "
            "manager was dealing with the repairs herself and only notified us when the contractor's "
            "invoice arrived. Damage is consistent with the storm; neighbouring premises have similar "
            "damage."
        ),
        Heading("CLM-26-0618 - Carrow Motors Ltd", 2),
        Para(
            "10 November: theft of diagnostic equipment and tools from the workshop. The owner says he was abroad and "
            "did not notice the loss until his return. Police reference obtained; no sign of forced entry was recorded."
        ),
        Heading("CLM-26-0633 - Elmstead Joinery Ltd", 2),
        Para(
            "12 November: fire in the finishing shop overnight; stock and machinery destroyed. Fire "
            "brigade report awaited. Contents loss estimated at 235,000 including debris removal."
        ),
        Heading("CLM-26-0645 - Greyfriars Hotel Ltd", 2),
        Para(
            "20 November: kitchen fire. The general manager's account (a fryer fire at 22:30 during service) is "
            "inconsistent with the physical evidence: the burn pattern starts at a storage room away from the fryers "
            "and the alarm log shows the kitchen closed at 21:00. Account inconsistent."
        ),
        Heading("CLM-26-0652 - Harbour Lofts DAC", 2),
        Para(
            "9 November: storm damage to the roof and two top-floor units in Cork. Figures in the "
            "register are in euro, the policy currency."
        ),
        Heading("CLM-26-0657 - Ivydene Care Home", 2),
        Para(
            "27 November: revised estimate. The contractor's quote for the escape of water, including "
            "drying and replastering two wings, brings the outstanding estimate to "
            f"{fmt_money(REVISED[1])}, replacing the 22,000.00 on the register (not yet updated)."
        ),
        Para("30 October: leak from a failed joint in the first-floor plant room. Initial estimate 22,000.00."),
        Heading("CLM-26-0663 - Kingsmead Self Storage", 2),
        Para(
            "6 November: river flooding of the ground floor units. Customers' goods excluded; building "
            "and fit-out only."
        ),
    ]
    return write_docx(blocks, inputs_dir / NOTES_DOCX, title="Adjuster notes - November 2026")


def _write_guideline(inputs_dir: Path) -> Path:
    code, name, start, end = CAT
    text = f"""Harrowgate Mutual Insurance - Property Claims
Reserving and SIU referral guideline (version 4, 1 July 2026)

Part A - Scope of the monthly review
A1. The monthly large-loss review covers every property claim that is open at the cut-off date and was
    notified (first notification of loss, FNOL) on or before it. For November 2026 the cut-off is
    {CUTOFF:%d %B %Y}. A claim notified after the cut-off belongs to the next month's review.
A2. Closed claims are not reviewed.
A3. A loss notified twice (the same policy and date of loss, e.g. a broker re-entering the FNOL) is one
    claim: keep the earlier claim number and ignore the other entry.

Part B - Reserving
B1. Incurred = paid to date + outstanding estimate. Where an adjuster's note dated after the register
    entry gives a revised outstanding estimate, the revised estimate is used.
B2. Net incurred = incurred less the deductible, capped at the policy's limit of indemnity, and never
    below nil. Deductible and limit are those of the policy schedule in force at the date of loss; an
    endorsement replaces the version it supersedes from its effective date.
B3. Required reserve = net incurred less paid to date, never below nil.
B4. Amounts are calculated in the policy currency and reported in GBP. Euro amounts are converted at the
    month-end rate: 1 EUR = {EUR_GBP} GBP. Round the GBP reserve to the penny.
B5. The total required reserve for the month is the sum of the GBP reserves of the claims reviewed.

Part C - Referral to the special investigation unit (SIU)
C1. A claim in the review is referred to the SIU if any one of these red flags is present:
    (a) late notification: the FNOL is more than {LATE_DAYS} days after the date of loss;
    (b) new or increased cover: the date of loss is within {NEW_COVER_DAYS} days after the policy's inception
        or after an endorsement that increased the limit;
    (c) the adjuster records that the insured's account of the loss is inconsistent with the
        physical evidence.
C2. Referral is a precaution, not an accusation: state the red flag found and the dates or
    facts behind it.

Part D - Notes
D1. Registers are exported from two systems; dates may appear as YYYY-MM-DD or DD/MM/YYYY.
D2. Flag (a) does not apply where the date of loss falls within a declared catastrophe event, whose
    volumes delay notification; the register's cat_code column marks such claims. Declared events in
    2026: {code} ({name}), {start:%d} to {end:%d %B %Y}.
"""
    return write_text(inputs_dir / GUIDE_TXT, text)


# ------------------------------------------------------------------ the answer from the inputs alone


def compute(inputs_dir: Path) -> dict:
    """The guideline's answer: the claims reviewed, each reserve in GBP, the total and the SIU referrals."""
    from docx import Document

    inputs_dir = Path(inputs_dir)
    wb = openpyxl.load_workbook(inputs_dir / SCHEDULE_XLSX)
    inception = {
        r[0]: (r[2].date() if isinstance(r[2], dt.datetime) else r[2])
        for r in wb["Policies"].iter_rows(min_row=2, values_only=True)
        if r[0]
    }
    names = {r[0]: r[1] for r in wb["Policies"].iter_rows(min_row=2, values_only=True) if r[0]}
    deductible = {r[0]: _dec(r[1]) for r in wb["Deductibles"].iter_rows(min_row=2, values_only=True) if r[0]}
    versions: dict[str, list[tuple[dt.date, Decimal, int]]] = {}
    for r in wb["Limits"].iter_rows(min_row=2, values_only=True):
        if r[0]:
            eff = r[2].date() if isinstance(r[2], dt.datetime) else r[2]
            versions.setdefault(r[0], []).append((eff, _dec(r[3]), int(r[1])))
    notes = "\n".join(p.text for p in Document(str(inputs_dir / NOTES_DOCX)).paragraphs)
    revised = {}
    for block in re.split(r"\n(?=CLM-)", notes):
        m = re.match(r"(CLM-\d\d-\d{4})", block)
        r = re.search(r"revised estimate.*?outstanding estimate to ([\d,]+\.\d\d)", block, re.S)
        if m and r:
            revised[m.group(1)] = _dec(r.group(1))
    inconsistent = set(re.findall(r"(CLM-\d\d-\d{4})[^\n]*\n[^\n]*Account inconsistent", notes))

    reviewed, dropped = [], {}
    seen: dict[tuple[str, str], str] = {}
    for r in read_csv_dicts(inputs_dir / REGISTER_CSV):
        fnol = iso_or_day_first(r["fnol_date"], f"{REGISTER_CSV}: field 'fnol_date'")
        loss = iso_or_day_first(r["loss_date"], f"{REGISTER_CSV}: field 'loss_date'")
        if r["status"] != "open":
            dropped[r["claim_id"]] = "closed"
            continue
        if fnol > CUTOFF:
            dropped[r["claim_id"]] = "notified after the cut-off"
            continue
        key = (r["policy_no"], r["loss_date"])
        if key in seen:
            dropped[r["claim_id"]] = f"duplicate FNOL of {seen[key]}"
            continue
        seen[key] = r["claim_id"]
        reviewed.append({**r, "fnol": fnol, "loss": loss})

    out = []
    for c in reviewed:
        pol = c["policy_no"]
        in_force = max((v for v in versions[pol] if v[0] <= c["loss"]), key=lambda v: v[0])
        paid = _dec(c["paid"])
        os_ = revised.get(c["claim_id"], _dec(c["outstanding_estimate"]))
        incurred = paid + os_
        net = min(max(incurred - deductible[pol], Decimal(0)), in_force[1])
        reserve = max(net - paid, Decimal(0))
        fx = EUR_GBP if c["currency"] == "EUR" else Decimal(1)
        gbp = (reserve * fx).quantize(CENT, rounding=ROUND_HALF_UP)
        flags = []
        delay = (c["fnol"] - c["loss"]).days
        in_cat = c["cat_code"] == CAT[0] and CAT[2] <= c["loss"] <= CAT[3]
        if delay > LATE_DAYS and not in_cat:
            flags.append(f"notified {delay} days after the loss (flag C1(a))")
        starts = [inception[pol]] + [v[0] for v in versions[pol] if v[2] > 1]
        for s in starts:
            if 0 <= (c["loss"] - s).days <= NEW_COVER_DAYS:
                what = "policy incepted" if s == inception[pol] else "limit increased by endorsement"
                flags.append(f"{what} on {s:%d %B %Y}, {(c['loss'] - s).days} days before the loss (flag C1(b))")
        if c["claim_id"] in inconsistent:
            flags.append("adjuster records the account as inconsistent with the physical evidence (flag C1(c))")
        out.append(
            {
                "id": c["claim_id"],
                "policy": pol,
                "insured": names[pol],
                "currency": c["currency"],
                "paid": paid,
                "os": os_,
                "incurred": incurred,
                "deductible": deductible[pol],
                "limit": in_force[1],
                "version": in_force[2],
                "net": net,
                "reserve": reserve,
                "fx": fx,
                "gbp": gbp,
                "flags": flags,
                "delay": delay,
                "in_cat": in_cat,
                "loss": c["loss"],
                "fnol": c["fnol"],
                "revised": c["claim_id"] in revised,
            }
        )
    total = sum((c["gbp"] for c in out), Decimal(0))
    return {"claims": out, "dropped": dropped, "total": total, "referred": [c["id"] for c in out if c["flags"]]}


# ------------------------------------------------------------------ the gold deliverables


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful team leader would: a formula-driven review and the SIU memo."""
    a = compute(inputs_dir)
    outputs_dir = Path(outputs_dir)
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = _write_book(a, outputs_dir / BOOK_XLSX)
    memo = _write_memo(a, outputs_dir / MEMO_DOCX)
    record = write_completion_record(
        outputs_dir,
        [BOOK_XLSX, MEMO_DOCX],
        questions=[
            "Can the register's outstanding estimate for CLM-26-0657 be updated to the adjuster's revised figure?"
        ],
        notes=(
            "CLM-26-0641 is the broker's duplicate FNOL of CLM-26-0640 and was counted once; CLM-26-0671 was "
            "notified after the 30 November cut-off and belongs to December's review."
        ),
    )
    return [book, memo, record]


def _write_book(a: dict, path: Path) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Reserves"
    ws.append(
        [
            "Claim",
            "Policy",
            "Insured",
            "Currency",
            "Paid",
            "Outstanding estimate",
            "Incurred",
            "Deductible",
            "Limit in force",
            "Net incurred",
            "FX rate to GBP",
            "Required reserve GBP",
            "SIU referral",
        ]
    )
    style_header(ws)
    claims = a["claims"]
    first, last = 2, 1 + len(claims)
    for k, c in enumerate(claims):
        r = first + k
        ws.append(
            [
                c["id"],
                c["policy"],
                c["insured"],
                c["currency"],
                float(c["paid"]),
                float(c["os"]),
                f"=E{r}+F{r}",
                float(c["deductible"]),
                float(c["limit"]),
                f"=MIN(MAX(G{r}-H{r},0),I{r})",
                "=Settings!B2" if c["currency"] == "EUR" else 1,
                f"=ROUND(MAX(J{r}-E{r},0)*K{r},2)",
                "Refer" if c["flags"] else "No referral",
            ]
        )
        for col in "EFGHIJL":
            ws[f"{col}{r}"].number_format = "#,##0.00"
    ws.append([])
    ws.append(["Claims reviewed", f"=COUNTA(A{first}:A{last})"])
    ws.append(["Total required reserve GBP", f"=SUM(L{first}:L{last})"])
    ws.cell(row=ws.max_row, column=2).number_format = "#,##0.00"
    ws.append(["Claims referred to SIU", f'=COUNTIF(M{first}:M{last},"Refer")'])
    autosize(
        ws,
        {
            "A": 28,
            "B": 11,
            "C": 28,
            "D": 9,
            "E": 12,
            "F": 14,
            "G": 12,
            "H": 11,
            "I": 13,
            "J": 13,
            "K": 9,
            "L": 16,
            "M": 12,
        },
    )
    st = wb.create_sheet("Settings")
    st.append(["Setting", "Value", "Source"])
    style_header(st)
    st.append(["EUR to GBP, month-end", float(EUR_GBP), "Guideline B4"])
    st.append(["Cut-off date", CUTOFF, "Guideline A1"])
    st["B3"].number_format = "dd/mm/yyyy"
    autosize(st, {"A": 24, "B": 12, "C": 14})
    sf = wb.create_sheet("SIU flags")
    sf.append(["Claim reference", "Date of loss", "FNOL", "Days to notify", "Catastrophe event", "Red flags"])
    style_header(sf)
    for k, c in enumerate(claims):
        r = 2 + k
        sf.append(
            [
                c["id"],
                c["loss"],
                c["fnol"],
                f"=C{r}-B{r}",
                "CAT-2610" if c["in_cat"] else "",
                "; ".join(c["flags"]) or "none",
            ]
        )
        sf[f"B{r}"].number_format = sf[f"C{r}"].number_format = "dd/mm/yyyy"
    autosize(sf, {"A": 15, "B": 12, "C": 12, "D": 14, "E": 17, "F": 90})
    ex = wb.create_sheet("Not reviewed")
    ex.append(["Register entry", "Reason"])
    style_header(ex)
    for cid, why in a["dropped"].items():
        ex.append([cid, why])
    autosize(ex, {"A": 15, "B": 40})
    return save_workbook(wb, path)


def _write_memo(a: dict, path: Path) -> Path:
    by = {c["id"]: c for c in a["claims"]}
    ref = [by[i] for i in a["referred"]]
    rest = [c for c in a["claims"] if not c["flags"]]
    c0614, c0621, c0633, c0652, c0657 = (
        by[i] for i in ("CLM-26-0614", "CLM-26-0621", "CLM-26-0633", "CLM-26-0652", "CLM-26-0657")
    )
    blocks = [
        Heading("Summary"),
        Para(
            f"This memo reports the November 2026 large-loss review of open property claims at the cut-off of "
            f"{CUTOFF:%d %B %Y}. {len(a['claims'])} claims were reviewed. Their required reserves total GBP "
            f"{fmt_money(a['total'])}, worked in reserve_review.xlsx. Under Part C of the reserving and SIU guideline, "
            f"{len(ref)} claims are referred to the SIU: {', '.join(c['id'] for c in ref)}."
        ),
        Heading("Referrals"),
    ]
    for c in ref:
        blocks.append(
            Para(
                f"{c['id']} ({c['insured']}) is referred to the SIU because the {'; '.join(c['flags'])}. "
                f"Its required reserve is GBP {fmt_money(c['gbp'])}.".replace(
                    "because the notified", "because it was notified"
                )
                .replace("because the policy", "because its policy")
                .replace("because the limit", "because its limit")
            )
        )
    blocks.append(
        Para(
            "Referral is a precaution under guideline C2, not an allegation against the insured; the handling "
            "adjusters continue to progress these claims."
        )
    )
    blocks += [
        Heading("Claims not referred"),
        Para(
            f"The other {len(rest)} claims reviewed, {', '.join(c['id'] for c in rest)}, show no red flag and are not "
            f"referred to the SIU."
        ),
        Para(
            f"{c0614['id']} is not referred to the SIU although it was notified {c0614['delay']} days after the loss: "
            f"the loss on {c0614['loss']:%d %B %Y} falls within the declared catastrophe event CAT-2610 (Storm Elin, "
            f"18 to 20 October 2026), and guideline D2 disapplies the late-notification flag for such losses."
        ),
        Para(
            f"{c0621['id']} is not referred to the SIU: its FNOL date 11/10/2026 is day-first, 11 October "
            f"2026, so it was notified {c0621['delay']} days after the loss of {c0621['loss']:%d %B %Y}, "
            "within the 30 days."
        ),
        Para(
            "Three register entries were left out of the review and are not referred in it. CLM-26-0641 "
            "is the broker's second notification of the same loss as CLM-26-0640 (the same policy and "
            "date of loss), so the loss is counted once under its earlier number. CLM-26-0671 was "
            "notified on 1 December 2026, after the cut-off, and belongs to December's review, where its "
            "new-cover red flag must be considered. CLM-26-0598 is closed."
        ),
        Heading("Reserves"),
        Para(
            "Each reserve follows Part B of the guideline: incurred is paid plus the outstanding estimate, less the "
            "deductible, capped at the limit in force at the date of loss and never below nil; the required reserve is "
            "net incurred less paid, and euro amounts are converted at 0.8650 GBP per EUR."
        ),
        Para(
            f"{c0633['id']} is reserved on the limit of endorsement version 2, GBP "
            f"{fmt_money(c0633['limit'])} from 20 September 2026, which superseded version 1's 120,000.00: "
            f"incurred {fmt_money(c0633['incurred'])} less the {fmt_money(c0633['deductible'])} deductible "
            f"is capped at {fmt_money(c0633['limit'])}, and less {fmt_money(c0633['paid'])} paid the "
            f"required reserve is GBP {fmt_money(c0633['gbp'])}."
        ),
        Para(
            f"{c0657['id']} uses the adjuster's revised outstanding estimate of {fmt_money(c0657['os'])} "
            "of 27 November in place of the register's 22,000.00: required reserve GBP "
            f"{fmt_money(c0657['gbp'])}. {c0652['id']} is a euro policy: EUR {fmt_money(c0652['reserve'])} "
            f"at 0.8650 is GBP {fmt_money(c0652['gbp'])}. CLM-26-0660's incurred of 1,850.00 is below its "
            "2,500.00 deductible, so its reserve is nil. CLM-26-0663 is capped at its 150,000.00 limit: "
            "GBP 110,000.00."
        ),
        Table(
            ["Claim", "Insured", "Currency", "Net incurred", "Required reserve GBP"],
            [[c["id"], c["insured"], c["currency"], fmt_money(c["net"]), fmt_money(c["gbp"])] for c in a["claims"]]
            + [["Total", "", "", "", fmt_money(a["total"])]],
        ),
        Para(
            f"The total required reserve of GBP {fmt_money(a['total'])} ties to the sum of the claim lines "
            "on the Reserves sheet, where every figure is a formula."
        ),
    ]
    return write_docx(blocks, path, title="SIU referrals and reserve review - November 2026")
