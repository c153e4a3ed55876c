"""HR-01, human resources: the 2027 merit increase worksheet.

Planted facts: three employees fall below their grade's 2027 band minimum
after merit and must be raised to it; two would exceed the band maximum and
are capped; two were hired after the eligibility cut-off and receive no
merit (but are still brought to the band minimum). The total cost of
increases must tie to the sum of the individual increases.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import numpy as np
import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, read_csv_dicts, rng, style_header, write_completion_record
from pilot.scenarios.officeio import save_workbook, write_csv, write_text

SEED = 261111
EMPLOYEES_CSV = "employees_2026.csv"
BANDS_XLSX = "salary_bands_2027.xlsx"
GUIDE_TXT = "merit_guidelines_2027.txt"
OUT_XLSX = "merit_increases_2027.xlsx"

BANDS = {
    "G3": (48_000, 56_000, 64_000),
    "G4": (55_000, 64_000, 73_000),
    "G5": (64_000, 75_000, 86_000),
    "G6": (76_000, 89_000, 102_000),
}
MERIT = {5: 0.05, 4: 0.035, 3: 0.025, 2: 0.0, 1: 0.0}
CUTOFF = dt.date(2026, 7, 1)
DEPTS = ["Finance", "Customer Service", "Operations", "IT", "Sales"]


def generate(inputs_dir: Path) -> list[Path]:
    g = rng(SEED)
    rows = []
    grades = list(BANDS)
    for i in range(1, 49):
        grade = grades[int(g.integers(len(grades)))]
        lo, mid, hi = BANDS[grade]
        salary = int(np.rint(g.uniform(lo * 1.02, hi * 0.94) / 100) * 100)
        rating = int(g.choice([2, 3, 3, 3, 4, 4, 5]))
        hired = dt.date(2012, 1, 1) + dt.timedelta(days=int(g.integers(0, 5000)))
        rows.append([f"E-{1000 + i}", DEPTS[int(g.integers(len(DEPTS)))], grade, salary, rating, hired.isoformat()])
    # Planted cases.
    rows[16][2:6] = ["G4", 52_400, 3, "2019-05-13"]  # E-1017: below G4 minimum even after merit
    rows[41][2:6] = ["G3", 46_100, 4, "2021-09-01"]  # E-1042: below G3 minimum
    rows[7][2:6] = ["G5", 84_900, 5, "2015-02-02"]  # E-1008: capped at G5 maximum
    rows[29][2:6] = ["G6", 100_500, 4, "2013-10-21"]  # E-1030: capped at G6 maximum
    rows[44][2:6] = ["G5", 63_000, 5, "2026-09-14"]  # E-1045: new hire, below G5 minimum: no merit, raised to minimum
    rows[22][2:6] = ["G3", 55_000, 4, "2026-08-03"]  # E-1023: new hire, no merit
    paths = [
        write_csv(
            inputs_dir / EMPLOYEES_CSV,
            ["employee_id", "department", "grade", "salary_2026", "rating_2026", "hire_date"],
            rows,
        )
    ]
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Bands 2027"
    ws.append(["Grade", "Minimum", "Midpoint", "Maximum"])
    style_header(ws)
    for gr, (lo, mid, hi) in BANDS.items():
        ws.append([gr, lo, mid, hi])
    paths.append(save_workbook(wb, inputs_dir / BANDS_XLSX))
    guide = f"""2027 merit review - guidelines (People & Culture)

Merit increase by 2026 performance rating, applied to the 2026 base salary:
  rating 5: 5.0%    rating 4: 3.5%    rating 3: 2.5%    rating 2 or 1: no merit increase

Eligibility: employees hired on or after {CUTOFF:%d %B %Y} are not eligible for a merit increase this cycle.

Band rules (2027 bands attached):
  - After merit, no salary may exceed the maximum of the employee's 2027 band; cap it at the maximum.
  - After merit, any salary below the minimum of the 2027 band is raised to the minimum (market adjustment). This \
applies to every employee, eligible for merit or not.

New salaries are rounded to the nearest dollar. Effective 1 January 2027.
The total cost of increases is the sum of (new salary - 2026 salary) over all employees.
"""
    paths.append(write_text(inputs_dir / GUIDE_TXT, guide))
    return paths


def compute(inputs_dir: Path) -> list[dict]:
    emps = read_csv_dicts(inputs_dir / EMPLOYEES_CSV)
    wb = openpyxl.load_workbook(inputs_dir / BANDS_XLSX)
    bands = {r[0]: (r[1], r[3]) for r in wb.active.iter_rows(min_row=2, values_only=True)}
    out = []
    for e in emps:
        sal = int(e["salary_2026"])
        eligible = dt.date.fromisoformat(e["hire_date"]) < CUTOFF
        pct = MERIT[int(e["rating_2026"])] if eligible else 0.0
        lo, hi = bands[e["grade"]]
        new = int(math.floor(min(max(sal * (1 + pct), lo), hi) + 0.5))
        out.append(
            {
                **e,
                "eligible": eligible,
                "pct": pct,
                "new": new,
                "increase": new - sal,
                "adjust": "raised to band minimum"
                if sal * (1 + pct) < lo
                else ("capped at band maximum" if sal * (1 + pct) > hi else ""),
            }
        )
    return out


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    emps = compute(inputs_dir)
    wb = openpyxl.Workbook()
    bands = wb.active
    bands.title = "Bands"
    bands.append(["Grade", "Minimum", "Maximum"])
    style_header(bands)
    for gr, (lo, _, hi) in BANDS.items():
        bands.append([gr, lo, hi])
    ws = wb.create_sheet("Increases", 0)
    ws.append(
        [
            "Employee",
            "Department",
            "Grade",
            "Salary 2026",
            "Rating",
            "Hire date",
            "Eligible",
            "Merit %",
            "Salary after merit",
            "Band minimum",
            "Band maximum",
            "New salary 2027",
            "Increase",
            "Adjustment",
        ]
    )
    style_header(ws)
    for i, e in enumerate(emps, start=2):
        ws.append(
            [
                e["employee_id"],
                e["department"],
                e["grade"],
                int(e["salary_2026"]),
                int(e["rating_2026"]),
                e["hire_date"],
                "Yes" if e["eligible"] else "No",
                f'=IF(G{i}="Yes",CHOOSE(E{i},0,0,0.025,0.035,0.05),0)',
                f"=D{i}*(1+H{i})",
                f"=VLOOKUP(C{i},Bands!$A$2:$C$5,2,FALSE)",
                f"=VLOOKUP(C{i},Bands!$A$2:$C$5,3,FALSE)",
                f"=ROUND(MIN(MAX(I{i},J{i}),K{i}),0)",
                f"=L{i}-D{i}",
                f'=IF(I{i}<J{i},"raised to band minimum",IF(I{i}>K{i},"capped at band maximum",""))',
            ]
        )
    last = len(emps) + 1
    summ = wb.create_sheet("Summary", 0)
    summ.append(["2027 merit review - summary"])
    summ["A1"].font = Font(bold=True)
    summ.append([])
    summ.append(["Total payroll 2026", f"=SUM(Increases!D2:D{last})"])
    summ.append(["Total payroll 2027", f"=SUM(Increases!L2:L{last})"])
    summ.append(["Total cost of increases", f"=SUM(Increases!M2:M{last})"])
    summ.append(["Increase as % of 2026 payroll", "=ROUND(B5/B3,4)"])
    summ.append(["Employees raised to band minimum", f'=COUNTIF(Increases!N2:N{last},"raised to band minimum")'])
    summ.append(["Employees capped at band maximum", f'=COUNTIF(Increases!N2:N{last},"capped at band maximum")'])
    summ.append(["Employees not eligible (hired on or after 1 July 2026)", f'=COUNTIF(Increases!G2:G{last},"No")'])
    autosize(summ, {"A": 52, "B": 16})
    autosize(
        ws,
        {
            "A": 10,
            "B": 18,
            "C": 7,
            "D": 12,
            "E": 7,
            "F": 11,
            "G": 9,
            "H": 9,
            "I": 16,
            "J": 13,
            "K": 13,
            "L": 15,
            "M": 10,
            "N": 24,
        },
    )
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = save_workbook(wb, outputs_dir / OUT_XLSX)
    record = write_completion_record(
        outputs_dir,
        [OUT_XLSX],
        notes=(
            "Two employees hired after the cut-off received no merit; one of them was still raised to the band minimum."
        ),
    )
    return [book, record]
