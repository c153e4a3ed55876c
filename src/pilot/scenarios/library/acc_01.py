"""ACC-01, accounting: the October bank reconciliation of an operating account.

Planted facts: two September cheques that clear in October, a deposit in
transit, three outstanding cheques, bank charges and interest missing from
the ledger, a returned customer cheque (NSF), and cheque 10448 posted in the
ledger as 1,254.00 but cleared by the bank at its true 1,524.00 (a 270.00
transposition). The adjusted balances tie, leaving no unreconciled difference.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, money, read_csv_dicts, rng, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_text

SEED = 260101
BANK_CSV = "bank_statement_2026-10.csv"
LEDGER_XLSX = "cash_ledger_2026-10.xlsx"
PRIOR_TXT = "reconciliation_2026-09_summary.txt"
RECON_XLSX = "bank_reconciliation_2026-10.xlsx"
MEMO_DOCX = "reconciliation_memo.docx"

BANK_OPENING = 84215.40
SEPT_OUTSTANDING = [("10421", "Kelso Freight Ltd.", 1850.00), ("10425", "Brightwater Utilities", 612.35)]
CUSTOMERS = [
    "Arden Marine",
    "Pellham Tools",
    "Northcote Hydraulics",
    "Vesta Agritech",
    "Orrin Pumps",
    "Castell Fabrication",
]
SUPPLIERS = [
    "Kelso Freight Ltd.",
    "Brightwater Utilities",
    "Ironvale Steel",
    "Marston Packaging",
    "Quill Office Supply",
    "Tarrow Electrical",
    "Denholm Castings",
]


def _day(d: int) -> str:
    return dt.date(2026, 10, d).isoformat()


def _transactions() -> list[dict]:
    """The October cash events as they truly happened."""
    g = rng(SEED)
    events = []
    chq = 10440
    for d in range(1, 32):
        if dt.date(2026, 10, d).weekday() >= 5:
            continue
        if g.random() < 0.55:
            events.append(
                {
                    "date": d,
                    "kind": "deposit",
                    "party": CUSTOMERS[g.integers(len(CUSTOMERS))],
                    "amount": money(g.uniform(2500, 14000)),
                }
            )
        if g.random() < 0.6 and chq < 10467:
            events.append(
                {
                    "date": d,
                    "kind": "cheque",
                    "no": str(chq),
                    "party": SUPPLIERS[g.integers(len(SUPPLIERS))],
                    "amount": money(g.uniform(300, 4200)),
                }
            )
            chq += 1
        if d in (15, 30):
            events.append(
                {
                    "date": d,
                    "kind": "eft",
                    "party": "Payroll - Halden Components",
                    "amount": 18650.00 if d == 15 else 18725.50,
                }
            )
    # Three cheques written in the last days of the month, still uncleared at 31 October.
    for d, amount in ((28, 3275.00), (29, 918.40), (30, 2040.00)):
        events.append(
            {
                "date": d,
                "kind": "cheque",
                "no": str(chq),
                "party": SUPPLIERS[g.integers(len(SUPPLIERS))],
                "amount": amount,
                "late": True,
            }
        )
        chq += 1
    for e in events:
        if e.get("no") == "10448":
            e["amount"] = 1524.00
    return events


DEPOSIT_IN_TRANSIT = 12480.00
NSF = ("Vesta Agritech", 1360.00)
FEES = [(31, "Monthly account fee", 45.00), (20, "Outgoing wire fee", 25.00)]
INTEREST = (31, "Interest credit", 38.17)


def generate(inputs_dir: Path) -> list[Path]:
    events = _transactions()
    # The NSF cheque: deposited on the 8th, returned by the bank on the 14th.
    nsf_dep = {"date": 8, "kind": "deposit", "party": NSF[0], "amount": NSF[1], "ref": "DEP-1008B"}
    events.append(nsf_dep)
    events.sort(key=lambda e: (e["date"], e["kind"], e.get("no", "")))
    ledger_rows, bank_rows = [], []
    n_je = 120
    for e in events:
        n_je += 1
        je = f"JE-2026-10-{n_je:04d}"
        if e["kind"] == "deposit":
            same_day = [r for r in ledger_rows if r[0] == _day(e["date"]) and r[1].startswith("DEP")]
            ref = e.get("ref") or f"DEP-10{e['date']:02d}{'ABCDEF'[len(same_day)]}"
            ledger_rows.append((_day(e["date"]), ref, je, f"Customer receipt - {e['party']}", "", e["amount"], 0.0))
            bank_rows.append((e["date"], f"DEPOSIT {ref}", ref, 0.0, e["amount"]))
        elif e["kind"] == "cheque":
            booked = 1254.00 if e["no"] == "10448" else e["amount"]
            if e["no"] == "10448":
                je = "JE-2026-10-0147"
            ledger_rows.append(
                (_day(e["date"]), f"CHQ {e['no']}", je, f"Supplier payment - {e['party']}", e["no"], 0.0, booked)
            )
            if not e.get("late"):
                clear = min(e["date"] + 3, 30)
                bank_rows.append((clear, f"CHEQUE {e['no']}", e["no"], e["amount"], 0.0))
        else:
            ledger_rows.append((_day(e["date"]), "EFT-PAYROLL", je, e["party"], "", 0.0, e["amount"]))
            bank_rows.append((e["date"], "EFT DEBIT PAYROLL HALDEN", f"PAY{e['date']:02d}", e["amount"], 0.0))
    # Deposit in transit: booked on the 31st, credited by the bank in November.
    ledger_rows.append(
        (_day(31), "DEP-1031A", "JE-2026-10-0199", "Customer receipt - Orrin Pumps", "", DEPOSIT_IN_TRANSIT, 0.0)
    )
    for no, _party, amt in SEPT_OUTSTANDING:
        bank_rows.append((2 if no == "10421" else 6, f"CHEQUE {no}", no, amt, 0.0))
    bank_rows.append((14, f"RETURNED ITEM NSF - {NSF[0].upper()}", "RTN-1014", NSF[1], 0.0))
    for d, text, amt in FEES:
        bank_rows.append((d, text.upper(), "FEE", amt, 0.0))
    bank_rows.append((INTEREST[0], INTEREST[1].upper(), "INT", 0.0, INTEREST[2]))
    bank_rows.sort(key=lambda r: (r[0], r[2]))

    bal = BANK_OPENING
    out_bank = []
    for d, desc, ref, debit, credit in bank_rows:
        bal = money(bal - debit + credit)
        out_bank.append(
            (_day(d), desc, ref, f"{debit:.2f}" if debit else "", f"{credit:.2f}" if credit else "", f"{bal:.2f}")
        )
    paths = [
        write_csv(inputs_dir / BANK_CSV, ["date", "description", "reference", "debit", "credit", "balance"], out_bank)
    ]

    ledger_opening = money(BANK_OPENING - sum(a for _, _, a in SEPT_OUTSTANDING))
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "GL 1010"
    ws.append(["Halden Components Ltd. - General ledger account 1010 Cash - Operating (Northbridge Bank ****4471)"])
    ws["A1"].font = Font(bold=True)
    ws.append(["Period: October 2026. Amounts in CAD."])
    ws.append([])
    ws.append(["Date", "Reference", "Journal", "Description", "Cheque no.", "Debit", "Credit"])
    style_header(ws, 4)
    ws.append([_day(1), "OPENING", "", "Opening balance 1 October 2026", "", ledger_opening, None])
    for r in ledger_rows:
        ws.append([r[0], r[1], r[2], r[3], r[4], r[5] or None, r[6] or None])
    autosize(ws, {"A": 12, "B": 13, "C": 17, "D": 44, "E": 11, "F": 12, "G": 12})
    paths.append(save_workbook(wb, inputs_dir / LEDGER_XLSX))

    prior = [
        "Halden Components Ltd. - Bank reconciliation summary, 30 September 2026",
        "Account: Northbridge Bank operating account ****4471 / GL 1010",
        "",
        f"Balance per bank statement, 30 Sep 2026:      {BANK_OPENING:>12,.2f}",
        "Deposits in transit:                                 0.00",
        "Outstanding cheques at 30 Sep 2026:",
    ]
    prior += [f"  Cheque {no}  {party:<28} {amt:>10,.2f}" for no, party, amt in SEPT_OUTSTANDING]
    prior += [
        f"Adjusted bank balance:                       {ledger_opening:>12,.2f}",
        f"Balance per general ledger, 30 Sep 2026:     {ledger_opening:>12,.2f}",
        "Unreconciled difference:                             0.00",
        "",
        "Prepared by: R. Okafor (Senior Accountant). Reviewed by: M. Lindqvist (Controller).",
    ]
    paths.append(write_text(inputs_dir / PRIOR_TXT, "\n".join(prior)))
    return paths


def _num(s: str) -> float:
    return float(s) if s not in ("", None) else 0.0


def analyse(inputs_dir: Path) -> dict:
    """Match the ledger to the bank statement and derive every reconciling item."""
    bank = read_csv_dicts(inputs_dir / BANK_CSV)
    wb = openpyxl.load_workbook(inputs_dir / LEDGER_XLSX)
    ws = wb["GL 1010"]
    rows = [r for r in ws.iter_rows(min_row=5, values_only=True) if r[0]]
    ledger_opening = float(rows[0][5])
    entries = rows[1:]
    ledger_close = money(ledger_opening + sum((r[5] or 0) - (r[6] or 0) for r in entries))
    bank_close = float(bank[-1]["balance"])
    bank_cheques = {b["reference"]: _num(b["debit"]) for b in bank if b["description"].startswith("CHEQUE")}
    bank_deps = {b["reference"]: _num(b["credit"]) for b in bank if b["description"].startswith("DEPOSIT")}
    outstanding = [(r[4], r[3], float(r[6])) for r in entries if r[4] and str(r[4]) not in bank_cheques]
    in_transit = [(r[1], r[3], float(r[5])) for r in entries if r[1].startswith("DEP") and r[1] not in bank_deps]
    misposted = [
        (str(r[4]), r[2], float(r[6]), bank_cheques[str(r[4])])
        for r in entries
        if r[4] and str(r[4]) in bank_cheques and abs(bank_cheques[str(r[4])] - float(r[6])) > 0.005
    ]
    fees = [(b["date"], b["description"], _num(b["debit"])) for b in bank if "FEE" in b["description"]]
    interest = [(b["date"], b["description"], _num(b["credit"])) for b in bank if "INTEREST" in b["description"]]
    nsf = [(b["date"], b["description"], _num(b["debit"])) for b in bank if "NSF" in b["description"]]
    dit = money(sum(a for *_, a in in_transit))
    oc = money(sum(a for *_, a in outstanding))
    adj_bank = money(bank_close + dit - oc)
    adj_ledger = money(
        ledger_close
        - sum(a for *_, a in fees)
        + sum(a for *_, a in interest)
        - sum(a for *_, a in nsf)
        - sum(booked - ledger for _, _, ledger, booked in misposted)
    )
    return {
        "bank_close": bank_close,
        "ledger_close": ledger_close,
        "outstanding": outstanding,
        "in_transit": in_transit,
        "misposted": misposted,
        "fees": fees,
        "interest": interest,
        "nsf": nsf,
        "dit": dit,
        "oc": oc,
        "adj_bank": adj_bank,
        "adj_ledger": adj_ledger,
    }


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    a = analyse(inputs_dir)
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Reconciliation"
    ws.append(["Halden Components Ltd. - Bank reconciliation, 31 October 2026 (GL 1010 / Northbridge ****4471)"])
    ws["A1"].font = Font(bold=True)
    ws.append([])
    items = wb.create_sheet("Items")
    items.append(["Type", "Reference", "Description", "Amount"])
    style_header(items)
    r = 2
    ranges = {}
    for label, rows in (
        ("Deposit in transit", a["in_transit"]),
        ("Outstanding cheque", [(f"Cheque {n}", d, amt) for n, d, amt in a["outstanding"]]),
    ):
        start = r
        for ref, desc, amt in rows:
            items.append([label, ref, desc, amt])
            r += 1
        ranges[label] = f"Items!D{start}:D{r - 1}"
    autosize(items, {"A": 20, "B": 16, "C": 42, "D": 12})
    ws.append(["Balance per bank statement, 31 Oct 2026", a["bank_close"]])  # row 3
    ws.append(["Add: deposits in transit", f"=SUM({ranges['Deposit in transit']})"])  # 4
    ws.append(["Less: outstanding cheques", f"=SUM({ranges['Outstanding cheque']})"])  # 5
    ws.append(["Adjusted bank balance", "=B3+B4-B5"])  # 6
    ws.append([])
    ws.append(["Balance per general ledger, 31 Oct 2026", a["ledger_close"]])  # 8
    adj = wb.create_sheet("Adjustments")
    adj.append(
        ["Proposed entry", "Reference", "Explanation", "Debit account", "Credit account", "Effect on ledger cash"]
    )
    style_header(adj)
    for d, desc, amt in a["fees"]:
        adj.append(["Bank charges", d, desc.title(), "6420 Bank charges", "1010 Cash", -amt])
    for d, desc, amt in a["interest"]:
        adj.append(["Interest income", d, desc.title(), "1010 Cash", "7100 Interest income", amt])
    for d, desc, amt in a["nsf"]:
        adj.append(
            [
                "Returned customer cheque (NSF)",
                d,
                desc.title(),
                "1200 Accounts receivable - Vesta Agritech",
                "1010 Cash",
                -amt,
            ]
        )
    for no, je, booked, cleared in a["misposted"]:
        adj.append(
            [
                f"Correct cheque {no} (transposition)",
                je,
                f"Cheque {no} booked at {booked:,.2f}; cleared at {cleared:,.2f}",
                "2000 Accounts payable",
                "1010 Cash",
                -(cleared - booked),
            ]
        )
    last = adj.max_row
    adj.append(["Total adjustments to ledger cash", "", "", "", "", f"=SUM(F2:F{last})"])
    autosize(adj, {"A": 34, "B": 18, "C": 46, "D": 36, "E": 22, "F": 14})
    ws.append(["Add/(less): adjustments to the ledger (sheet Adjustments)", f"=Adjustments!F{last + 1}"])  # 9
    ws.append(["Adjusted ledger balance", "=B8+B9"])  # 10
    ws.append([])
    ws.append(["Unreconciled difference", "=ROUND(B6-B10,2)"])  # 12
    for row in (3, 4, 5, 6, 8, 9, 10, 12):
        ws.cell(row=row, column=2).number_format = "#,##0.00"
    for row in (6, 10, 12):
        ws.cell(row=row, column=1).font = Font(bold=True)
    autosize(ws, {"A": 58, "B": 16})
    outputs_dir.mkdir(parents=True, exist_ok=True)
    recon = save_workbook(wb, outputs_dir / RECON_XLSX)

    no, je, booked, cleared = a["misposted"][0]
    blocks = [
        Heading("Summary"),
        Para(
            "The operating account (Northbridge Bank ****4471, GL 1010) reconciles at 31 October 2026. "
            f"The bank statement closes at {a['bank_close']:,.2f} and the general ledger at "
            f"{a['ledger_close']:,.2f}. After the timing items on the bank side and the proposed "
            f"adjustments on the ledger side, both adjusted balances stand at {a['adj_bank']:,.2f} and the "
            "unreconciled difference is nil."
        ),
        Para(
            "Two September cheques (10421 and 10425) that were outstanding at the end of last month "
            "cleared in the first week of October, which is why the opening balances of the bank and the "
            "ledger differ; they need no action."
        ),
        Heading("Reconciling items"),
        Para(
            f"Deposits in transit total {a['dit']:,.2f}: the Orrin Pumps receipt booked on 31 October, "
            f"which the bank will credit in early November. Outstanding cheques total {a['oc']:,.2f} "
            f"(cheques {', '.join(str(n) for n, _, _ in a['outstanding'])}), all issued in the last week "
            "of the month."
        ),
        Table(
            ["Item", "Amount"],
            [
                ["Deposits in transit", a["dit"]],
                ["Outstanding cheques", a["oc"]],
                ["Adjusted bank balance", a["adj_bank"]],
                ["Adjusted ledger balance", a["adj_ledger"]],
            ],
        ),
        Para(
            f"On the ledger side, the bank charged fees of {sum(x for *_, x in a['fees']):,.2f} and "
            f"credited interest of {sum(x for *_, x in a['interest']):,.2f}, neither of which has been "
            f"booked. The bank also returned a Vesta Agritech cheque of {a['nsf'][0][2]:,.2f} unpaid (NSF) "
            "on 14 October; the receipt was booked on 8 October and has not been reversed."
        ),
        Para(
            f"Cheque {no} was posted in the ledger ({je}) at {booked:,.2f}, while the bank paid "
            f"{cleared:,.2f}, the amount of the supplier's invoice. This is a transposition error of "
            f"{cleared - booked:,.2f} in the ledger."
        ),
        Heading("Proposed adjusting entries"),
        Para(
            "Book the bank charges to 6420 Bank charges and the interest to 7100 Interest income. Reverse "
            "the returned Vesta Agritech receipt against accounts receivable so that collections can "
            "pursue it. Correct the posting of the transposed cheque by a further credit to cash of "
            f"{cleared - booked:,.2f} against accounts payable. The Adjustments sheet of the workbook "
            "lists each entry with its effect on ledger cash."
        ),
        Heading("Follow-up"),
        Para(
            "Confirm in the first week of November that the deposit in transit has been credited and "
            "chase any outstanding cheque still open after 60 days. Ask Accounts Receivable to contact "
            "Vesta Agritech about the returned cheque and to put the account on hold until it is "
            "replaced. Review why the transposed amount passed the payment approval check, since the "
            "cheque register and the ledger should agree before posting."
        ),
    ]
    memo = write_docx(blocks, outputs_dir / MEMO_DOCX, title="October 2026 bank reconciliation - GL 1010")
    record = write_completion_record(
        outputs_dir, [RECON_XLSX, MEMO_DOCX], notes="Reconciliation ties; four adjusting entries proposed."
    )
    return [recon, memo, record]
