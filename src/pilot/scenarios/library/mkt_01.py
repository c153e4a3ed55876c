"""MKT-01, marketing: Q3 campaign performance and the Q4 budget recommendation.

Planted facts: a tracking incident note says Paid Social's week-9
conversions and revenue were recorded twice (a duplicated pixel): the true
figures are half the recorded ones. Corrected, Paid Social's ROAS falls from
looking best-in-class to below Search. Total Q3 spend must tie to the file;
the Q4 allocation must sum to the 200,000 budget.
"""

from __future__ import annotations

from pathlib import Path

import openpyxl
import pandas as pd
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, rng, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_text

SEED = 261313
RESULTS_CSV = "campaign_results_q3_2026.csv"
INCIDENT_TXT = "tracking_incident_note.txt"
GUIDANCE_TXT = "q4_budget_guidance.txt"
BOOK_XLSX = "campaign_performance_q3.xlsx"
MEMO_DOCX = "q4_budget_recommendation.docx"
CHANNELS = {
    "Search": (4200, 4.1),
    "Paid Social": (3600, 3.2),
    "Display": (2500, 1.6),
    "Email": (800, 7.5),
    "Affiliates": (1500, 3.0),
}
Q4_BUDGET = 200_000


def generate(inputs_dir: Path) -> list[Path]:
    g = rng(SEED)
    rows = []
    for week in range(1, 14):
        for ch, (spend0, roas) in CHANNELS.items():
            spend = round(float(spend0 * g.uniform(0.85, 1.15)), 2)
            clicks = int(spend / g.uniform(0.6, 1.4))
            conv = int(clicks * g.uniform(0.02, 0.05))
            revenue = round(float(spend * roas * g.uniform(0.85, 1.15)), 2)
            if ch == "Paid Social" and week == 9:
                conv, revenue = 2 * conv, round(2 * revenue * 4.2, 2)  # a viral week, then double-counted
            rows.append([week, ch, spend, int(spend * g.uniform(180, 420)), clicks, conv, revenue])
    paths = [
        write_csv(
            inputs_dir / RESULTS_CSV,
            ["week", "channel", "spend", "impressions", "clicks", "conversions", "revenue"],
            rows,
        )
    ]
    paths.append(
        write_text(
            inputs_dir / INCIDENT_TXT,
            """Marketing analytics - tracking incident note MA-2026-031 (closed 14 October 2026)

During week 9 of Q3 a second copy of the conversion pixel was live on the Paid Social landing pages after a template \
release.
Every Paid Social conversion in week 9 fired twice. As a result, the week-9 Paid Social conversions AND revenue in \
the campaign export are exactly double the true values.
No other channel and no other week was affected. The export was not corrected at source; analysts must correct it \
when reporting Q3.
""",
        )
    )
    paths.append(
        write_text(
            inputs_dir / GUIDANCE_TXT,
            f"""Q4 2026 paid media budget - guidance from the CMO

Total Q4 budget: {Q4_BUDGET:,} (all five channels).
Allocate on corrected Q3 return on ad spend (ROAS = revenue / spend), but no channel may receive less than 10% or \
more than 40% of the Q4 budget.
Show the Q3 figures the allocation rests on.
""",
        )
    )
    return paths


def corrected(inputs_dir: Path) -> pd.DataFrame:
    df = pd.read_csv(inputs_dir / RESULTS_CSV)
    mask = (df.channel == "Paid Social") & (df.week == 9)
    df.loc[mask, "conversions"] = df.loc[mask, "conversions"] // 2
    df.loc[mask, "revenue"] = (df.loc[mask, "revenue"] / 2).round(2)
    return df


def allocation(by: pd.DataFrame) -> dict[str, float]:
    """ROAS-proportional shares, clamped to 10-40% and renormalised over the unclamped channels."""
    share = by["roas"] / by["roas"].sum()
    fixed: dict[str, float] = {}
    for _ in range(10):
        free = [c for c in share.index if c not in fixed]
        rest = 1 - sum(fixed.values())
        s = by.loc[free, "roas"] / by.loc[free, "roas"].sum() * rest
        changed = False
        for c in free:
            if s[c] < 0.10:
                fixed[c], changed = 0.10, True
            elif s[c] > 0.40:
                fixed[c], changed = 0.40, True
        if not changed:
            fixed.update(s.to_dict())
            break
    return {c: round(Q4_BUDGET * fixed[c], 2) for c in by.index}


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    df = corrected(inputs_dir)
    by = df.groupby("channel")[["spend", "revenue", "conversions"]].sum()
    by["roas"] = by.revenue / by.spend
    alloc = allocation(by)
    wb = openpyxl.Workbook()
    ch = wb.active
    ch.title = "Channels"
    data = wb.create_sheet("Data (corrected)")
    data.append(list(df.columns) + ["note"])
    style_header(data)
    for r in df.itertuples(index=False):
        note = "corrected: halved (incident MA-2026-031)" if (r.channel == "Paid Social" and r.week == 9) else ""
        data.append(list(r) + [note])
    last = len(df) + 1
    ch.append(["Channel", "Spend", "Revenue", "Conversions", "ROAS", "Q4 share", "Q4 budget"])
    style_header(ch)
    order = list(CHANNELS)
    for i, c in enumerate(order, start=2):
        ch.append(
            [
                c,
                f"=SUMIF('Data (corrected)'!$B$2:$B${last},A{i},'Data (corrected)'!$C$2:$C${last})",
                f"=SUMIF('Data (corrected)'!$B$2:$B${last},A{i},'Data (corrected)'!$G$2:$G${last})",
                f"=SUMIF('Data (corrected)'!$B$2:$B${last},A{i},'Data (corrected)'!$F$2:$F${last})",
                f"=C{i}/B{i}",
                alloc[c] / Q4_BUDGET,
                f"=ROUND(F{i}*$B$10,2)",
            ]
        )
    n = len(order) + 1
    ch.append(
        [
            "Total",
            f"=SUM(B2:B{n})",
            f"=SUM(C2:C{n})",
            f"=SUM(D2:D{n})",
            f"=C{n + 1}/B{n + 1}",
            f"=SUM(F2:F{n})",
            f"=SUM(G2:G{n})",
        ]
    )  # row 7
    ch.append([])
    ch.append(["Total Q3 spend", f"=B{n + 1}"])  # row 9
    ch.append(["Total Q4 budget", Q4_BUDGET])  # row 10
    ch.append(["Q4 allocation total", f"=G{n + 1}"])  # row 11
    for row in ch.iter_rows(min_row=2, max_row=n + 1):
        row[5].number_format = "0.0%"
        row[4].number_format = "0.00"
    ch["A7"].font = Font(bold=True)
    autosize(ch, {"A": 22, "B": 14, "C": 14, "D": 13, "E": 8, "F": 10, "G": 13})
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = save_workbook(wb, outputs_dir / BOOK_XLSX)

    raw = pd.read_csv(inputs_dir / RESULTS_CSV)
    raw_ps = raw[raw.channel == "Paid Social"]
    raw_roas = raw_ps.revenue.sum() / raw_ps.spend.sum()
    ranked = by.sort_values("roas", ascending=False)
    floor = [c for c in order if abs(alloc[c] - 0.10 * Q4_BUDGET) < 0.01]
    ceiling = [c for c in order if abs(alloc[c] - 0.40 * Q4_BUDGET) < 0.01]
    blocks = [
        Heading("Q3 results"),
        Para(
            f"Across the five channels we spent {by.spend.sum():,.2f} in Q3 2026 and, after correcting the "
            f"tracking incident, attributed {by.revenue.sum():,.2f} of revenue, an overall return on ad "
            f"spend (ROAS) of {by.revenue.sum() / by.spend.sum():.2f}. The campaign export overstates Paid "
            "Social: incident note MA-2026-031 records that in week 9 every Paid Social conversion fired "
            "twice, so week-9 conversions and revenue for that channel were halved before any figure in "
            "this note was computed."
        ),
        Heading("Channel performance"),
        Table(
            ["Channel", "Spend", "Revenue", "ROAS"],
            [
                [c, f"{by.loc[c, 'spend']:,.2f}", f"{by.loc[c, 'revenue']:,.2f}", f"{by.loc[c, 'roas']:.2f}"]
                for c in ranked.index
            ],
        ),
        Para(
            f"On the uncorrected export Paid Social would show a ROAS of {raw_roas:.2f} and look like our "
            f"strongest paid channel. Corrected, its ROAS is {by.loc['Paid Social', 'roas']:.2f}, behind "
            f"{' and '.join(c for c in ranked.index if by.loc[c, 'roas'] > by.loc['Paid Social', 'roas'])}. "
            "Email remains by far the most efficient channel but is small and cannot absorb much more "
            "budget; Display is the weakest channel and its spend should be held to the minimum the "
            "guidance allows while we test new creative. Affiliates sit in the middle and earn a share "
            "close to their Q3 weight."
        ),
        Heading("Q4 allocation"),
        Para(
            f"Following the CMO's guidance, the Q4 budget of {Q4_BUDGET:,} is allocated in proportion to "
            "corrected Q3 ROAS, with every channel held between 10% and 40% of the budget. "
            + (f"{', '.join(floor)} {'is' if len(floor) == 1 else 'are'} held at the 10% floor; " if floor else "")
            + (f"{', '.join(ceiling)} {'is' if len(ceiling) == 1 else 'are'} capped at 40%; " if ceiling else "")
            + "the remainder is shared among the other channels in proportion to their ROAS."
        ),
        Table(
            ["Channel", "Q4 budget"],
            [[c, f"{alloc[c]:,.2f}"] for c in order] + [["Total", f"{sum(alloc.values()):,.2f}"]],
        ),
        Heading("Risks"),
        Para(
            "Allocating on one quarter's ROAS assumes Q4 behaves like Q3; seasonal demand in November and "
            "December usually favours Search and Paid Social, so the split should be reviewed after the "
            "first four weeks. Email's ceiling allocation depends on list growth: if we cannot send more "
            "without fatiguing subscribers, the surplus should move to Search. Finally, last-click "
            "attribution flatters Search and Email; a holdout test on Paid Social in Q4 would show its "
            "true incremental value."
        ),
    ]
    memo = write_docx(blocks, outputs_dir / MEMO_DOCX, title="Q3 campaign performance and Q4 budget recommendation")
    record = write_completion_record(outputs_dir, [BOOK_XLSX, MEMO_DOCX])
    return [book, memo, record]
