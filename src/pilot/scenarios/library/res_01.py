"""RES-01, research: analysis of an employee engagement survey.

Planted facts: respondent R-0088 appears twice (an exact duplicate: keep one);
R-0173 records satisfaction 77 on a 1-7 scale (out of range: exclude). 239
responses remain. The West region's satisfaction is markedly lower than the
other regions'.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openpyxl
import pandas as pd
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, rng, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_text

SEED = 260202
SURVEY_CSV = "staff_survey_2026.csv"
CODEBOOK_MD = "codebook.md"
RESULTS_XLSX = "survey_results.xlsx"
NOTE_DOCX = "research_note.docx"
REGIONS = ["Central", "East", "North", "South", "West"]
MEANS = {"Central": 5.0, "East": 5.2, "North": 5.3, "South": 5.1, "West": 3.9}


def generate(inputs_dir: Path) -> list[Path]:
    g = rng(SEED)
    rows = []
    for i in range(1, 241):
        region = REGIONS[int(g.integers(len(REGIONS)))]
        sat = int(np.clip(np.rint(g.normal(MEANS[region], 1.0)), 1, 7))
        work = int(np.clip(np.rint(g.normal(4.2 if region != "West" else 5.4, 1.1)), 1, 7))
        tenure = round(float(g.gamma(2.0, 3.0)), 1)
        rec = "yes" if sat >= 5 or (sat == 4 and g.random() < 0.4) else "no"
        rows.append([f"R-{i:04d}", region, tenure, sat, work, rec])
    rows[172][3] = 77  # R-0173: keying error
    dup = list(rows[87])
    rows.insert(150, dup)  # R-0088 submitted twice
    paths = [
        write_csv(
            inputs_dir / SURVEY_CSV,
            ["respondent_id", "region", "tenure_years", "satisfaction", "workload", "would_recommend"],
            rows,
        )
    ]
    codebook = """# Staff survey 2026: codebook

Fielded 6-20 October 2026 to all 612 staff; one response per person.

| variable | meaning | valid values |
|---|---|---|
| respondent_id | anonymised respondent code | R-0001 ... |
| region | region of the respondent's office | Central, East, North, South, West |
| tenure_years | years with the organisation | 0-45 |
| satisfaction | "Overall, how satisfied are you with your job?" | 1 (very dissatisfied) to 7 (very satisfied) |
| workload | "My workload is manageable" (reverse: higher = heavier) | 1 to 7 |
| would_recommend | would recommend the organisation as a place to work | yes, no |

Data handling rules (Research & Insight standard RI-4):

- A respondent who submitted more than once is counted once (keep the first submission).
- A value outside its valid range is a recording error: exclude that response from every analysis and report it.
- Report means to two decimals, with the number of responses behind each.
"""
    paths.append(write_text(inputs_dir / CODEBOOK_MD, codebook))
    return paths


def clean(inputs_dir: Path) -> tuple[pd.DataFrame, list[str], list[str]]:
    df = pd.read_csv(inputs_dir / SURVEY_CSV)
    dups = sorted(df.loc[df.duplicated("respondent_id"), "respondent_id"].unique())
    df = df.drop_duplicates("respondent_id", keep="first")
    bad = ~df["satisfaction"].between(1, 7) | ~df["workload"].between(1, 7) | ~df["region"].isin(REGIONS)
    invalid = sorted(df.loc[bad, "respondent_id"])
    return df.loc[~bad].reset_index(drop=True), dups, invalid


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    df, dups, invalid = clean(inputs_dir)
    n = len(df)
    wb = openpyxl.Workbook()
    summ = wb.active
    summ.title = "Summary"
    data = wb.create_sheet("Data")
    data.append(list(df.columns))
    style_header(data)
    for r in df.itertuples(index=False):
        data.append(list(r))
    last = n + 1
    summ.append(["Staff survey 2026 - results (cleaned data on sheet Data)"])
    summ["A1"].font = Font(bold=True)
    summ.append([])
    summ.append(["Responses analysed", f"=COUNT(Data!D2:D{last})"])
    summ.append(["Overall mean satisfaction", f"=ROUND(AVERAGE(Data!D2:D{last}),2)"])
    summ.append(["Overall mean workload", f"=ROUND(AVERAGE(Data!E2:E{last}),2)"])
    summ.append(["Share who would recommend", f'=ROUND(COUNTIF(Data!F2:F{last},"yes")/COUNTA(Data!F2:F{last}),3)'])
    summ.append([])
    summ.append(["Region", "Responses", "Mean satisfaction", "Mean workload"])
    for cell in summ[8]:
        cell.font = Font(bold=True)
    for region in REGIONS:
        r = summ.max_row + 1
        summ.append(
            [
                region,
                f"=COUNTIF(Data!B2:B{last},A{r})",
                f"=ROUND(AVERAGEIF(Data!B2:B{last},A{r},Data!D2:D{last}),2)",
                f"=ROUND(AVERAGEIF(Data!B2:B{last},A{r},Data!E2:E{last}),2)",
            ]
        )
    summ.append([])
    summ.append(["Excluded or merged records"])
    for rid in dups:
        summ.append([rid, "duplicate submission: first kept"])
    for rid in invalid:
        summ.append([rid, "satisfaction outside 1-7: excluded"])
    autosize(summ, {"A": 30, "B": 34, "C": 18, "D": 15})
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = save_workbook(wb, outputs_dir / RESULTS_XLSX)

    overall = round(df["satisfaction"].mean(), 2)
    by = (
        df.groupby("region")
        .agg(n=("satisfaction", "size"), sat=("satisfaction", "mean"), work=("workload", "mean"))
        .round(2)
    )
    others = df.loc[df.region != "West", "satisfaction"].mean()
    corr = df["satisfaction"].corr(df["workload"])
    blocks = [
        Heading("Data"),
        Para(
            f"The 2026 staff survey file holds {len(df) + len(dups) + len(invalid)} records. Respondent "
            f"{', '.join(dups)} submitted twice; following rule RI-4 the first submission was kept. "
            f"Respondent {', '.join(invalid)} has a satisfaction score of 77, outside the 1-7 scale, which "
            f"is a recording error; that response was excluded from every analysis. {n} responses remain."
        ),
        Heading("Method"),
        Para(
            "Satisfaction and workload are seven-point items analysed as scores. For each region I report "
            "the number of responses and the mean satisfaction and workload to two decimals, computed by "
            "formulas on the cleaned data in the workbook survey_results.xlsx, so every figure can be "
            "traced to the records. Differences between regions are described, not tested formally; with "
            "regional samples of about fifty, a difference of a full scale point is well beyond what "
            "sampling noise would produce."
        ),
        Para(
            "Before any figure was computed, every variable was checked against the valid values in the "
            "codebook: regions against the five named offices, satisfaction and workload against the 1-7 "
            "range, and respondent codes for repeats. Only the two records named above failed these "
            "checks. The share of respondents who would recommend the organisation is reported alongside "
            "the means as a plain proportion of the cleaned responses."
        ),
        Heading("Findings"),
        Para(f"Overall mean satisfaction is {overall:.2f} on the seven-point scale across {n} responses."),
        Table(
            ["Region", "Responses", "Mean satisfaction", "Mean workload"],
            [[r, int(by.loc[r, "n"]), f"{by.loc[r, 'sat']:.2f}", f"{by.loc[r, 'work']:.2f}"] for r in REGIONS],
        ),
        Para(
            f"West stands apart: its mean satisfaction is {by.loc['West', 'sat']:.2f}, against "
            f"{others:.2f} in the other four regions combined, and its staff report the heaviest workload "
            f"({by.loc['West', 'work']:.2f}). Across all respondents, satisfaction and workload are "
            f"negatively correlated (r = {corr:.2f}), which is consistent with workload being part of the "
            "explanation for West."
        ),
        Heading("Limitations"),
        Para(
            "The survey reached the staff who chose to respond, so the results may not represent the "
            "whole workforce; response rates by region were not provided and should be checked before the "
            "figures are presented as regional estimates. The items are single questions rather than "
            "validated scales, and the association with workload is correlational: it does not show that "
            "workload causes the lower satisfaction in West. A follow-up with the West management team "
            "and a look at staffing levels would help interpret the result."
        ),
        Para(
            "Finally, a single survey wave describes one moment. Whether West's position is new or "
            "long-standing cannot be judged without the 2025 results, which used a different question "
            "wording; I would not compare the two years directly without a bridging analysis."
        ),
    ]
    note = write_docx(blocks, outputs_dir / NOTE_DOCX, title="Staff survey 2026 - research note")
    record = write_completion_record(
        outputs_dir,
        [RESULTS_XLSX, NOTE_DOCX],
        questions=["Are regional response rates available to weight the regional means?"],
    )
    return [book, note, record]
