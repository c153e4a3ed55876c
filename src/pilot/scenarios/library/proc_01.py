"""PROC-01, procurement: evaluation of supplier bids for an annual fastener contract.

Planted facts: Apex Industrial offers the lowest price but its ISO 9001
certificate expired on 31 October 2026 (supplier register), which the RFQ
makes mandatory; Brennan Tool & Supply's bid arrived after the deadline.
Among the three compliant bids, Northwind Fasteners scores highest on the
RFQ's weighted formula (price 50, delivery 30, quality 20).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, read_csv_dicts, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_pdf

RFQ_PDF = "rfq_PR-2026-044.pdf"
BIDS_CSV = "bids_received.csv"
REGISTER_XLSX = "supplier_register.xlsx"
EVAL_XLSX = "bid_evaluation.xlsx"
AWARD_PDF = "award_recommendation.pdf"

ANNUAL_VOLUME = 120_000
DEADLINE = dt.datetime(2026, 11, 20, 17, 0)
AWARD_DATE = dt.date(2026, 12, 15)
WEIGHTS = {"price": 50, "delivery": 30, "quality": 20}

BIDS = [
    # supplier, unit price (CAD per kit), lead time (days), defect rate (ppm), received
    ("Apex Industrial Supply", 1.842, 21, 310, "2026-11-18 10:42"),
    ("Brennan Tool & Supply", 1.905, 14, 150, "2026-11-21 09:14"),
    ("Coastline Components", 2.118, 10, 420, "2026-11-19 16:05"),
    ("Northwind Fasteners", 1.967, 12, 180, "2026-11-20 11:37"),
    ("Ridgeway Manufacturing", 2.034, 18, 95, "2026-11-17 14:20"),
]
REGISTER = [
    (
        "V-10233",
        "Apex Industrial Supply",
        "2026-10-31",
        "Approved",
        "Certificate renewal audit scheduled for January 2027",
    ),
    ("V-10418", "Brennan Tool & Supply", "2027-06-30", "Approved", ""),
    ("V-10502", "Coastline Components", "2027-03-31", "Approved", ""),
    ("V-10377", "Northwind Fasteners", "2028-01-31", "Approved", "Incumbent for kit PK-12 since 2023"),
    ("V-10611", "Ridgeway Manufacturing", "2027-09-30", "Approved", ""),
]


def generate(inputs_dir: Path) -> list[Path]:
    rfq = [
        Heading("Request for quotation PR-2026-044: stainless fastener kits (PK-12)"),
        Para(
            f"Northgate Water Utilities invites quotations for the supply of {ANNUAL_VOLUME:,} PK-12 "
            "stainless fastener kits per year for two years, delivered to the Eastgate depot in monthly "
            "call-offs."
        ),
        Heading("Submission", 2),
        Para(
            f"Quotations must be received by {DEADLINE:%d %B %Y} at {DEADLINE:%H:%M} local time. Late "
            "quotations will not be evaluated."
        ),
        Heading("Mandatory requirements", 2),
        Para(
            "Suppliers must hold an ISO 9001 certificate that is valid on the award date, "
            f"{AWARD_DATE:%d %B %Y}, as recorded in the utility's supplier register. A quotation that "
            "fails a mandatory requirement is excluded before scoring."
        ),
        Heading("Evaluation", 2),
        Para(
            "Compliant quotations are scored out of 100 points: price 50 points, delivery lead time 30 "
            "points, quality 20 points."
        ),
        Para(
            "Price score = 50 x (lowest compliant unit price / the supplier's unit price). Delivery score "
            "= 30 x (shortest compliant lead time / the supplier's lead time). Quality score = 20 x "
            "(lowest compliant defect rate in ppm / the supplier's defect rate)."
        ),
        Para(
            "The contract is awarded to the compliant supplier with the highest total score. Scores are "
            "rounded to two decimals only for presentation."
        ),
    ]
    paths = [write_pdf(rfq, inputs_dir / RFQ_PDF, title="Request for quotation")]
    paths.append(
        write_csv(
            inputs_dir / BIDS_CSV,
            ["supplier", "unit_price_cad", "lead_time_days", "defect_rate_ppm", "received_at"],
            BIDS,
        )
    )
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Register"
    ws.append(["Vendor ID", "Supplier", "ISO 9001 certificate valid until", "Status", "Comment"])
    style_header(ws)
    for r in REGISTER:
        ws.append(list(r))
    autosize(ws, {"A": 10, "B": 26, "C": 30, "D": 10, "E": 50})
    paths.append(save_workbook(wb, inputs_dir / REGISTER_XLSX))
    return paths


def analyse(inputs_dir: Path) -> dict:
    bids = read_csv_dicts(inputs_dir / BIDS_CSV)
    wb = openpyxl.load_workbook(inputs_dir / REGISTER_XLSX)
    cert = {
        r[1]: dt.date.fromisoformat(str(r[2])[:10])
        for r in wb["Register"].iter_rows(min_row=2, values_only=True)
        if r[1]
    }
    excluded, compliant = {}, []
    for b in bids:
        received = dt.datetime.fromisoformat(b["received_at"])
        if received > DEADLINE:
            excluded[b["supplier"]] = f"late: received {received:%d %b %Y %H:%M}, after the deadline"
        elif cert.get(b["supplier"], dt.date.min) < AWARD_DATE:
            excluded[b["supplier"]] = (
                f"ISO 9001 certificate expired on {cert[b['supplier']]:%d %b %Y}, before the award date"
            )
        else:
            compliant.append(b)
    p0 = min(float(b["unit_price_cad"]) for b in compliant)
    l0 = min(float(b["lead_time_days"]) for b in compliant)
    q0 = min(float(b["defect_rate_ppm"]) for b in compliant)
    scores = {}
    for b in compliant:
        ps = WEIGHTS["price"] * p0 / float(b["unit_price_cad"])
        ds = WEIGHTS["delivery"] * l0 / float(b["lead_time_days"])
        qs = WEIGHTS["quality"] * q0 / float(b["defect_rate_ppm"])
        scores[b["supplier"]] = (ps, ds, qs, ps + ds + qs)
    winner = max(scores, key=lambda s: scores[s][3])
    price = float(next(b["unit_price_cad"] for b in bids if b["supplier"] == winner))
    return {
        "bids": bids,
        "excluded": excluded,
        "compliant": compliant,
        "scores": scores,
        "winner": winner,
        "annual_value": price * ANNUAL_VOLUME,
    }


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    a = analyse(inputs_dir)
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Evaluation"
    ws.append(
        [
            "Supplier",
            "Unit price (CAD)",
            "Lead time (days)",
            "Defect rate (ppm)",
            "Compliant",
            "Price score",
            "Delivery score",
            "Quality score",
            "Total score",
        ]
    )
    style_header(ws)
    n = len(a["bids"])
    for i, b in enumerate(a["bids"], start=2):
        ok = "Yes" if b["supplier"] not in a["excluded"] else "No"
        ws.append([b["supplier"], float(b["unit_price_cad"]), int(b["lead_time_days"]), int(b["defect_rate_ppm"]), ok])
        if ok == "Yes":
            rng_c = f'$E$2:$E${n + 1},"Yes"'
            ws[f"F{i}"] = f"=50*_xlfn.MINIFS($B$2:$B${n + 1},{rng_c})/B{i}"
            ws[f"G{i}"] = f"=30*_xlfn.MINIFS($C$2:$C${n + 1},{rng_c})/C{i}"
            ws[f"H{i}"] = f"=20*_xlfn.MINIFS($D$2:$D${n + 1},{rng_c})/D{i}"
            ws[f"I{i}"] = f"=F{i}+G{i}+H{i}"
        else:
            ws[f"I{i}"] = "excluded"
    r = n + 3
    ws.cell(row=r, column=1, value="Recommended supplier")
    ws.cell(row=r, column=2, value=a["winner"])
    ws.cell(row=r + 1, column=1, value="Annual volume (kits)")
    ws.cell(row=r + 1, column=2, value=ANNUAL_VOLUME)
    ws.cell(row=r + 2, column=1, value="Annual contract value (CAD)")
    win_row = 2 + [b["supplier"] for b in a["bids"]].index(a["winner"])
    ws.cell(row=r + 2, column=2, value=f"=B{win_row}*B{r + 1}")
    ws.cell(row=r + 2, column=1).font = Font(bold=True)
    for row in ws.iter_rows(min_row=2, max_row=n + 1, min_col=6, max_col=9):
        for c in row:
            c.number_format = "0.00"
    exc = wb.create_sheet("Compliance")
    exc.append(["Supplier", "Result", "Reason"])
    style_header(exc)
    for b in a["bids"]:
        exc.append(
            [
                b["supplier"],
                "Excluded" if b["supplier"] in a["excluded"] else "Compliant",
                a["excluded"].get(b["supplier"], "on time; ISO 9001 valid on the award date"),
            ]
        )
    autosize(ws, {"A": 28, "B": 16, "C": 16, "D": 17, "E": 11, "F": 12, "G": 14, "H": 13, "I": 12})
    autosize(exc, {"A": 28, "B": 12, "C": 70})
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = save_workbook(wb, outputs_dir / EVAL_XLSX)

    s = a["scores"]
    ranked = sorted(s, key=lambda k: -s[k][3])
    blocks = [
        Heading("Background"),
        Para(
            f"RFQ PR-2026-044 sought quotations for {ANNUAL_VOLUME:,} PK-12 stainless fastener kits a year "
            "for two years. Five quotations were received. The RFQ requires quotations to arrive by 20 "
            "November 2026 at 17:00 and suppliers to hold an ISO 9001 certificate valid on the award date "
            "of 15 December 2026; compliant quotations are scored on price (50 points), lead time (30) "
            "and defect rate (20), each relative to the best compliant offer."
        ),
        Heading("Compliance check"),
        Para(
            "Apex Industrial Supply quoted the lowest price, but the supplier register shows its ISO 9001 "
            "certificate expired on 31 October 2026 and only a renewal audit in January 2027 is "
            "scheduled, so the certificate will not be valid on the award date. Brennan Tool & Supply's "
            "quotation was received on 21 November 2026 at 09:14, after the deadline. Both quotations are "
            "excluded before scoring, as the RFQ requires. Coastline Components, Northwind Fasteners and "
            "Ridgeway Manufacturing are compliant."
        ),
        Heading("Evaluation"),
        Table(
            ["Supplier", "Price", "Delivery", "Quality", "Total"],
            [[k, f"{s[k][0]:.2f}", f"{s[k][1]:.2f}", f"{s[k][2]:.2f}", f"{s[k][3]:.2f}"] for k in ranked],
        ),
        Para(
            f"{ranked[0]} scores {s[ranked[0]][3]:.2f} points, ahead of {ranked[1]} "
            f"({s[ranked[1]][3]:.2f}) and {ranked[2]} ({s[ranked[2]][3]:.2f}). Its price is the lowest "
            "among the compliant quotations and its lead time is close to the shortest; Ridgeway's better "
            "defect rate does not offset its higher price and longer lead time. The scores are computed "
            "in bid_evaluation.xlsx with the RFQ formulas, so the ranking can be checked line by line."
        ),
        Heading("Recommendation"),
        Para(
            f"I recommend awarding the contract to {a['winner']} at "
            f"{a['annual_value'] / ANNUAL_VOLUME:.3f} CAD per kit, an annual contract value of "
            f"{a['annual_value']:,.2f} CAD ({2 * a['annual_value']:,.2f} CAD over the two-year term). Apex "
            "and Brennan should be told why their quotations were not evaluated. Before award, the buyer "
            "should confirm that the Northwind quotation's validity covers the award date and record the "
            "evaluation in the procurement file."
        ),
    ]
    memo = write_pdf(blocks, outputs_dir / AWARD_PDF, title="Award recommendation - RFQ PR-2026-044")
    record = write_completion_record(outputs_dir, [EVAL_XLSX, AWARD_PDF])
    return [book, memo, record]
