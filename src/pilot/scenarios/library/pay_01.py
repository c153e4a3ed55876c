"""PAY-01, payroll: October payroll variance review before release.

The payroll officer reviews the draft October 2026 payroll of Harrow & Vale Foods
against the September register as paid, applies the pay policy (monthly salary is
annual / 12; part months pro rata by calendar days; overtime at 1.5 x the hourly
rate of annual / 1,950, timesheet hours in h:mm) and the HR change notice, and names
the set of employees whose October pay must be corrected before the run is released.

Planted facts:

- Dale Fenwick (E1006) left on 30/09/2026 (the HR notice writes the date
  day-first) and was paid in full in September; the draft October register still
  pays him a full month, 2,875.00. Corrected: 0.00.
- Priya Anand (E1009) was promoted from 34,500 to 37,200 a year. The HR notice
  first gave the rise as effective 1 October; its correction (same notice,
  later entry) makes it 16 October. The draft pays the new salary for the whole
  month (3,100.00); pro rata 15 days old and 16 days new of 31: 1,391.13 +
  1,600.00 = 2,991.13.
- Tomasz Wrobel (E1012) worked 4:00 + 3:45 = 7:45 overtime (h:mm); the draft
  keyed it as 7.45 decimal hours (overtime 168.52) instead of 7.75 (175.31):
  gross 2,618.52 corrected to 2,625.31. His variance against September, 39.59,
  is under the policy's threshold, so only a check of the overtime finds it.
  Two other h:mm entries were keyed right (4:30 as 4.50, 3:15 as 3.25) and
  6:00 needs no conversion.
- The timesheet export lists Kieran Walsh's (E1010) 6:00 on 14 October twice
  (same approval reference, re-approved, date once day-first, once ISO); the
  draft pays it once, right. Counted twice: 12 hours, gross 2,415.84.
- Grace Obi (E1003) took unpaid leave 1-9 September, so September paid 21/30 of
  a month and October's full month shows a variance of +42.9%: correct, no
  correction (the distractor a variance-only review flags).
- Totals: September 38,563.90; draft October 39,771.43; corrected 36,794.35;
  corrections -2,977.08 (-2,875.00, -108.87, +6.79). The set to correct:
  {Fenwick, Anand, Wrobel}.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import (
    autosize,
    decimal_amount,
    iso_or_day_first,
    read_csv_dicts,
    rng,
    style_header,
    write_completion_record,
)
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_text

# The generator's one random source: it draws the salaries of the employees no trap turns on.
SEED = 270941

SEPT_CSV = "payroll_register_2026-09.csv"
DRAFT_XLSX = "payroll_draft_2026-10.xlsx"
OVERTIME_CSV = "overtime_timesheets_2026-10.csv"
HR_DOCX = "hr_change_notice_oct2026.docx"
POLICY_TXT = "pay_policy.txt"
BOOK_XLSX = "october_variance.xlsx"
MEMO_DOCX = "variance_memo.docx"

CENT = Decimal("0.01")
ANNUAL_HOURS = Decimal(1950)  # 37.5 hours x 52 weeks
OT_PREMIUM = Decimal("1.5")
OCT_DAYS, SEP_DAYS = 31, 30

# id, name, department
STAFF = [
    ("E1001", "Helen Marsh", "Finance"),
    ("E1002", "Owen Pritchard", "Production"),
    ("E1003", "Grace Obi", "Quality"),
    ("E1004", "Callum Reid", "Production"),
    ("E1005", "Sunita Rao", "Sales"),
    ("E1006", "Dale Fenwick", "Warehouse"),
    ("E1007", "Megan Lloyd", "Finance"),
    ("E1008", "Idris Bello", "Production"),
    ("E1009", "Priya Anand", "Quality"),
    ("E1010", "Kieran Walsh", "Warehouse"),
    ("E1011", "Ruth Adeyemi", "Sales"),
    ("E1012", "Tomasz Wrobel", "Production"),
    ("E1013", "Fiona Grant", "Warehouse"),
    ("E1014", "Lewis Hart", "Engineering"),
]
NAMES = {i: n for i, n, _ in STAFF}
# Fixed salaries of the employees the traps and the distractor turn on; the others are drawn.
FIXED_SALARY = {
    "E1003": 31800,
    "E1006": 34500,
    "E1009": 34500,
    "E1012": 29400,
    "E1004": 27300,
    "E1010": 26100,
    "E1013": 25200,
}
LEAVER, LEAVER_LAST_DAY = "E1006", dt.date(2026, 9, 30)
RISER, RISE_NEW, RISE_FROM, RISE_FIRST_NOTICE = "E1009", 37200, dt.date(2026, 10, 16), dt.date(2026, 10, 1)
RETURNER, UNPAID_DAYS = "E1003", 9  # unpaid leave 1-9 September
KEYING_SLIP = "E1012"
REPEATED_OT = "E1010"  # one timesheet line exported twice
# October overtime: employee -> (date worked as the timesheet writes it, h:mm); Sept overtime in decimal hours.
OT_OCT = {
    "E1004": [("2026-10-07", "4:30")],
    "E1010": [("14/10/2026", "6:00")],
    "E1012": [("2026-10-10", "4:00"), ("21/10/2026", "3:45")],
    "E1013": [("2026-10-24", "3:15")],
}
OT_SEP = {"E1004": Decimal("3.50"), "E1012": Decimal("6.00"), "E1002": Decimal("2.25")}


def q2(x: Decimal) -> Decimal:
    return x.quantize(CENT, rounding=ROUND_HALF_UP)


def monthly(annual: Decimal) -> Decimal:
    return q2(annual / 12)


def hourly(annual: Decimal) -> Decimal:
    return q2(annual / ANNUAL_HOURS)


def ot_pay(annual: Decimal, hours: Decimal) -> Decimal:
    return q2(hours * hourly(annual) * OT_PREMIUM)


def hm_to_hours(text: str, *, where: str = OVERTIME_CSV) -> Decimal:
    """'7:45' -> 7.75 hours; the timesheet records hours and minutes, never decimals."""
    m = re.fullmatch(r"\s*(\d+):([0-5]\d)\s*", text)
    if m is None:
        raise ValueError(f"{where}: field 'overtime_hhmm': {text!r} is not hours:minutes")
    return Decimal(m.group(1)) + Decimal(m.group(2)) / 60


def _salaries() -> dict[str, int]:
    g = rng(SEED)
    out = {}
    for i, _, _ in STAFF:
        drawn = int(g.integers(240, 520)) * 100
        out[i] = FIXED_SALARY.get(i, drawn)
    return out


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    inputs_dir = Path(inputs_dir)
    sal = _salaries()
    paths = []

    # September as paid: the returner's basic pro rata (21 of 30 days), overtime in decimal hours.
    rows = []
    for i, name, dept in STAFF:
        a = Decimal(sal[i])
        basic = q2(a / 12 * (SEP_DAYS - UNPAID_DAYS) / SEP_DAYS) if i == RETURNER else monthly(a)
        h = OT_SEP.get(i, Decimal(0))
        ot = ot_pay(a, h)
        rows.append([i, name, dept, sal[i], f"{basic:.2f}", f"{h:.2f}", f"{ot:.2f}", f"{basic + ot:.2f}"])
    paths.append(
        write_csv(
            inputs_dir / SEPT_CSV,
            [
                "employee_id",
                "name",
                "department",
                "annual_salary",
                "basic_pay",
                "overtime_hours",
                "overtime_pay",
                "gross_pay",
            ],
            rows,
        )
    )

    # The draft October register: every September employee at a full month, the rise from the first notice,
    # overtime keyed from the h:mm timesheet as if it were decimal (right where the minutes are :00, :30 or :15
    # keyed as the decimals .50/.25, wrong for 3:45).
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Draft register"
    ws.append(
        [
            "Employee ID",
            "Name",
            "Department",
            "Annual salary",
            "Basic pay",
            "Overtime hours",
            "Overtime pay",
            "Gross pay",
        ]
    )
    style_header(ws)
    keyed = {"E1004": Decimal("4.50"), "E1010": Decimal("6.00"), "E1012": Decimal("7.45"), "E1013": Decimal("3.25")}
    for i, name, dept in STAFF:
        a = Decimal(RISE_NEW if i == RISER else sal[i])
        basic = monthly(a)
        h = keyed.get(i, Decimal(0))
        ot = ot_pay(a, h)
        ws.append([i, name, dept, int(a), float(basic), float(h), float(ot), float(basic + ot)])
    autosize(ws, {"A": 12, "B": 18, "C": 13, "D": 13, "E": 11, "F": 14, "G": 12, "H": 11})
    notes = wb.create_sheet("Run notes")
    for line in [
        "October 2026 payroll - draft run 1, prepared 27/10/2026 by payroll bureau",
        "Starting point: September 2026 employee list; salaries updated from HR notices received by 02/10/2026.",
        "Overtime hours keyed from the timesheet export (column overtime_hhmm).",
        "Pay date 30 October 2026. Release deadline to the bank: 28 October 2026, 12:00.",
    ]:
        notes.append([line])
    notes["A1"].font = Font(bold=True)
    autosize(notes, {"A": 110})
    paths.append(save_workbook(wb, inputs_dir / DRAFT_XLSX))

    # Approved overtime for October: hours and minutes, dates as two supervisors write them.
    # The system exported Kieran Walsh's shift twice when it was re-approved: same approval reference, the date
    # in the other format. Counted twice it doubles his overtime.
    g = rng(SEED + 1)
    refs = [int(x) for x in g.choice(np.arange(3000, 4000), size=sum(len(e) for e in OT_OCT.values()), replace=False)]
    ot_rows, k = [], 0
    for i, entries in OT_OCT.items():
        for date, hm in entries:
            ot_rows.append([f"OT-{refs[k]}", i, NAMES[i], date, hm, "approved"])
            k += 1
    dup = next(r for r in ot_rows if r[1] == REPEATED_OT)
    ot_rows.append(
        [
            dup[0],
            dup[1],
            dup[2],
            iso_or_day_first(dup[3], OVERTIME_CSV).isoformat(),
            dup[4],
            "approved (re-approved 26/10/2026)",
        ]
    )
    paths.append(
        write_csv(
            inputs_dir / OVERTIME_CSV,
            ["approval_ref", "employee_id", "name", "date_worked", "overtime_hhmm", "status"],
            ot_rows,
        )
    )

    paths.append(_write_hr_notice(inputs_dir, sal))
    paths.append(_write_policy(inputs_dir))
    return paths


def _write_hr_notice(inputs_dir: Path, sal: dict[str, int]) -> Path:
    blocks = [
        Heading("HR change notice - September and October 2026"),
        Para(
            "Harrow & Vale Foods Ltd, People team, to Payroll. Changes to be applied in the payroll of the month in "
            "which they take effect. Entries are listed in the order they were issued; a later entry about the same "
            "change replaces an earlier one."
        ),
        Table(
            ["Entry", "Issued", "Employee", "Change", "Effective"],
            [
                [
                    "1",
                    "02/09/2026",
                    f"{RETURNER} {NAMES[RETURNER]}",
                    "Unpaid leave 1-9 September 2026 (9 calendar days); returns 10 September.",
                    "01/09/2026",
                ],
                [
                    "2",
                    "22/09/2026",
                    f"{LEAVER} {NAMES[LEAVER]}",
                    (
                        "Resignation. Last day of service 30/09/2026; paid to that date in the September "
                        "payroll. No payment in lieu of notice."
                    ),
                    "30/09/2026",
                ],
                [
                    "3",
                    "01/10/2026",
                    f"{RISER} {NAMES[RISER]}",
                    f"Promotion to Quality Supervisor; salary {sal[RISER]:,} to {RISE_NEW:,} a year.",
                    f"{RISE_FIRST_NOTICE:%d/%m/%Y}",
                ],
                [
                    "4",
                    "13/10/2026",
                    f"{RISER} {NAMES[RISER]}",
                    f"Correction to entry 3: the promotion takes effect on {RISE_FROM.day} {RISE_FROM:%B %Y}, "
                    f"the date the role was vacated, not on 1 October. Salary {RISE_NEW:,} from that date.",
                    f"{RISE_FROM:%d/%m/%Y}",
                ],
            ],
        ),
        Para("No other starters, leavers or salary changes were notified for October 2026."),
    ]
    return write_docx(blocks, inputs_dir / HR_DOCX, title="HR change notice - September and October 2026")


def _write_policy(inputs_dir: Path) -> Path:
    text = """Harrow & Vale Foods Ltd - Pay policy for monthly-paid employees (extract for payroll)

1. Salary. Employees are paid monthly in arrears on the last working day of the month. The monthly
   salary is the annual salary divided by 12, rounded to the penny.

2. Part months. Where an employee starts, leaves, takes unpaid leave or has a change of salary during
   a month, the month's salary is apportioned by calendar days: monthly salary x days at that salary
   / calendar days in the month, each part rounded to the penny. A salary change applies from its
   effective date.

3. Leavers. An employee is paid to the last day of service and not after it. Final pay is made in the
   payroll of the month in which the last day of service falls.

4. Overtime. Approved overtime is paid at 1.5 times the hourly rate. The hourly rate is the annual
   salary divided by 1,950 (37.5 hours x 52 weeks), rounded to the penny; overtime pay is hours x hourly
   rate x 1.5, rounded to the penny. Timesheets record overtime in hours and minutes (h:mm); payroll
   converts them to decimal hours (7:15 is 7.25 hours).

5. Variance review. Before each payroll is released, the gross pay of every employee is compared with
   the previous month. Every variance of more than GBP 50.00 or 5% of the previous month's gross pay is
   explained, and an error found is corrected before release. A variance explained by an authorised
   change is not an error.

6. Amounts are gross pay in pounds sterling, before tax, National Insurance and pension deductions.
"""
    return write_text(inputs_dir / POLICY_TXT, text)


# ------------------------------------------------------------------ the answer from the inputs alone


def _hr_entries(inputs_dir: Path) -> list[list[str]]:
    from docx import Document

    doc = Document(str(inputs_dir / HR_DOCX))
    if not doc.tables:
        raise ValueError(f"{HR_DOCX}: no table of change entries")
    rows = [[c.text for c in r.cells] for r in doc.tables[0].rows]
    if [h.strip() for h in rows[0]] != ["Entry", "Issued", "Employee", "Change", "Effective"]:
        raise ValueError(
            f"{HR_DOCX}: the change table's header is {rows[0]!r}, not Entry/Issued/Employee/Change/Effective"
        )
    return rows[1:]


def _overtime_lines(inputs_dir: Path) -> list[dict[str, str]]:
    """Approved timesheet lines, each approval counted once (a re-approved line is exported again)."""
    seen: dict[str, dict[str, str]] = {}
    for r in read_csv_dicts(inputs_dir / OVERTIME_CSV):
        if not r["status"].strip().lower().startswith("approved"):
            continue
        first = seen.setdefault(r["approval_ref"], r)
        if first is not r and (
            first["employee_id"],
            iso_or_day_first(first["date_worked"], OVERTIME_CSV),
            first["overtime_hhmm"],
        ) != (r["employee_id"], iso_or_day_first(r["date_worked"], OVERTIME_CSV), r["overtime_hhmm"]):
            raise ValueError(f"{OVERTIME_CSV}: approval_ref {r['approval_ref']!r} names two different overtime lines")
    return list(seen.values())


def compute(inputs_dir: Path) -> dict:
    """October pay as the policy and the HR notice make it, the draft's errors and the set to correct."""
    inputs_dir = Path(inputs_dir)
    sept = {r["employee_id"]: r for r in read_csv_dicts(inputs_dir / SEPT_CSV)}
    ws = openpyxl.load_workbook(inputs_dir / DRAFT_XLSX)["Draft register"]
    draft = {r[0]: r for r in ws.iter_rows(min_row=2, values_only=True) if r[0]}
    missing = sorted(set(sept) - set(draft))
    if missing:
        raise ValueError(f"{DRAFT_XLSX}: sheet 'Draft register' has no row for {', '.join(missing)} of {SEPT_CSV}")
    salary = {i: decimal_amount(r["annual_salary"], f"{SEPT_CSV}: {i} annual_salary") for i, r in sept.items()}

    # HR notice: leavers and salary changes; a later entry about the same change replaces the earlier one.
    last_day: dict[str, dt.date] = {}
    change: dict[str, tuple[Decimal, dt.date]] = {}
    for _, _, who, what, eff in _hr_entries(inputs_dir):
        emp = who.split()[0]
        when = iso_or_day_first(eff, f"{HR_DOCX}: {who} Effective")
        if "Last day of service" in what:
            last_day[emp] = when
        m = re.search(r"salary ([\d,]+) to ([\d,]+) a year|Salary ([\d,]+) from that date", what)
        if m:
            new = decimal_amount(m.group(2) or m.group(3), f"{HR_DOCX}: {who} Change")
            change[emp] = (new, when)

    hours: dict[str, Decimal] = {}
    for r in _overtime_lines(inputs_dir):
        hours[r["employee_id"]] = hours.get(r["employee_id"], Decimal(0)) + hm_to_hours(r["overtime_hhmm"])

    month_start, month_end = dt.date(2026, 10, 1), dt.date(2026, 10, 31)
    rows = []
    for i, name, dept in STAFF:
        a = salary[i]
        if i in last_day and last_day[i] < month_start:
            basic = Decimal(0)
        elif i in change and month_start < change[i][1] <= month_end:
            new, eff = change[i]
            old_days = (eff - month_start).days
            basic = q2(a / 12 * old_days / OCT_DAYS) + q2(new / 12 * (OCT_DAYS - old_days) / OCT_DAYS)
        else:
            basic = monthly(change[i][0] if i in change else a)
        h = hours.get(i, Decimal(0)) if basic else Decimal(0)
        ot = ot_pay(a, h)
        d = draft[i]
        rows.append(
            {
                "id": i,
                "name": name,
                "department": dept,
                "sept": decimal_amount(sept[i]["gross_pay"], f"{SEPT_CSV}: {i} gross_pay"),
                "draft": q2(decimal_amount(d[7], f"{DRAFT_XLSX}: {i} Gross pay")),
                "draft_hours": decimal_amount(d[5], f"{DRAFT_XLSX}: {i} Overtime hours"),
                "basic": basic,
                "hours": h,
                "hourly": hourly(a),
                "ot": ot,
                "gross": basic + ot,
            }
        )
    for r in rows:
        r["correction"] = r["gross"] - r["draft"]
        r["variance"] = r["gross"] - r["sept"]
    to_correct = [r["id"] for r in rows if r["correction"] != 0]
    return {
        "rows": rows,
        "to_correct": to_correct,
        "total_sept": sum((r["sept"] for r in rows), Decimal(0)),
        "total_draft": sum((r["draft"] for r in rows), Decimal(0)),
        "total_gross": sum((r["gross"] for r in rows), Decimal(0)),
        "total_correction": sum((r["correction"] for r in rows), Decimal(0)),
        "salary": salary,
        "change": change,
        "last_day": last_day,
        "hours": hours,
    }


# ------------------------------------------------------------------ the gold deliverables


def _m(x: Decimal) -> str:
    return f"{x:,.2f}"


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful payroll officer would: a formula-driven variance book and the memo."""
    a = compute(inputs_dir)
    outputs_dir = Path(outputs_dir)
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = _write_book(a, inputs_dir, outputs_dir / BOOK_XLSX)
    memo = _write_memo(a, outputs_dir / MEMO_DOCX)
    record = write_completion_record(
        outputs_dir,
        [BOOK_XLSX, MEMO_DOCX],
        questions=["Has HR confirmed that no payment in lieu of notice is due to Dale Fenwick?"],
        notes="The draft October register needs three corrections before release (Fenwick, Anand, Wrobel); "
        "Grace Obi's variance is her September unpaid leave and needs none.",
    )
    return [book, memo, record]


def _write_book(a: dict, inputs_dir: Path, path: Path) -> Path:
    rows = a["rows"]
    n = len(rows)
    wb = openpyxl.Workbook()
    var = wb.active
    var.title = "Variance"
    calc = wb.create_sheet("October pay")
    ot = wb.create_sheet("Overtime")

    # Overtime: each approved timesheet line, h:mm converted to decimal hours by formula.
    ot.append(["Employee ID", "Name", "Date worked", "Overtime (h:mm)", "Hours", "Minutes", "Decimal hours"])
    style_header(ot)
    for r in _overtime_lines(inputs_dir):
        k = ot.max_row + 1
        h, mnt = r["overtime_hhmm"].split(":")
        ot.append(
            [
                r["employee_id"],
                r["name"],
                iso_or_day_first(r["date_worked"], OVERTIME_CSV).isoformat(),
                r["overtime_hhmm"],
                int(h),
                int(mnt),
                f"=E{k}+F{k}/60",
            ]
        )
    ot_last = ot.max_row
    raw = [r["approval_ref"] for r in read_csv_dicts(inputs_dir / OVERTIME_CSV)]
    for ref in sorted({x for x in raw if raw.count(x) > 1}):
        ot.append([])
        ot.append([f"Approval {ref} is exported twice (re-approved); counted once."])
    autosize(ot, {"A": 12, "B": 18, "C": 12, "D": 15, "E": 8, "F": 9, "G": 13})

    # October pay: salary at each rate, days at it, basic pro rata, overtime at 1.5 x annual / 1,950.
    calc.append(
        [
            "Employee ID",
            "Name",
            "Annual salary (old)",
            "Days at old salary",
            "Annual salary (new)",
            "Days at new salary",
            "Basic pay",
            "Overtime hours",
            "Hourly rate",
            "Overtime pay",
            "October gross (corrected)",
        ]
    )
    style_header(calc)
    for k, r in enumerate(rows):
        x = 2 + k
        i = r["id"]
        old = a["salary"][i]
        if i in a["last_day"]:
            old_days, new, new_days = 0, old, 0
        elif i in a["change"]:
            new, eff = a["change"][i]
            old_days, new_days = (eff - dt.date(2026, 10, 1)).days, OCT_DAYS - (eff - dt.date(2026, 10, 1)).days
        else:
            old_days, new, new_days = OCT_DAYS, old, 0
        calc.append(
            [
                i,
                r["name"],
                float(old),
                old_days,
                float(new),
                new_days,
                f"=ROUND(C{x}/12*D{x}/{OCT_DAYS},2)+ROUND(E{x}/12*F{x}/{OCT_DAYS},2)",
                f"=SUMIF(Overtime!$A$2:$A${ot_last},A{x},Overtime!$G$2:$G${ot_last})*(D{x}+F{x}>0)",
                f"=ROUND(C{x}/1950,2)",
                f"=ROUND(H{x}*I{x}*1.5,2)",
                f"=G{x}+J{x}",
            ]
        )
    autosize(calc, {"A": 12, "B": 18, "C": 12, "D": 10, "E": 12, "F": 10, "G": 11, "H": 10, "I": 10, "J": 11, "K": 14})

    # Variance: one row per employee, the September and draft figures as given, the corrected figure from October pay.
    var.append(
        [
            "Employee ID",
            "Name",
            "September gross",
            "October draft gross",
            "October corrected gross",
            "Variance (corrected - September)",
            "Variance %",
            "Correction (corrected - draft)",
            "Status",
            "Explanation",
        ]
    )
    style_header(var)
    why = {
        LEAVER: "Left 30/09/2026 (HR notice entry 2); no pay due in October.",
        RISER: "Rise effective 16 October (HR notice entry 4 replaces entry 3): 15 days old salary, 16 days new.",
        KEYING_SLIP: "Overtime 4:00 + 3:45 = 7.75 hours, keyed as 7.45.",
        RETURNER: "September reduced by 9 days' unpaid leave (HR notice entry 1); October is a full month.",
    }
    for k, r in enumerate(rows):
        x = 2 + k
        status = "To be corrected" if r["id"] in a["to_correct"] else "Correct as drafted"
        note = why.get(r["id"], "Overtime as approved." if r["hours"] or r["id"] in OT_SEP else "")
        var.append(
            [
                r["id"],
                r["name"],
                float(r["sept"]),
                float(r["draft"]),
                f"='October pay'!K{x}",
                f"=E{x}-C{x}",
                f"=IF(C{x}=0,0,F{x}/C{x})",
                f"=E{x}-D{x}",
                status,
                note,
            ]
        )
        var[f"G{x}"].number_format = "0.0%"
    t = n + 2
    var.append(
        ["Total", ""]
        + [f"=ROUND(SUM({c}2:{c}{n + 1}),2)" for c in "CDEF"]
        + [f"=IF(C{t}=0,0,F{t}/C{t})", f"=ROUND(SUM(H2:H{n + 1}),2)"]
    )
    var[f"G{t}"].number_format = "0.0%"
    for x in range(2, t + 1):
        for c in "CDEFH":
            var[f"{c}{x}"].number_format = "#,##0.00"
    autosize(var, {"A": 12, "B": 18, "C": 15, "D": 17, "E": 20, "F": 18, "G": 10, "H": 18, "I": 20, "J": 70})
    return save_workbook(wb, path)


def _write_memo(a: dict, path: Path) -> Path:
    by = {r["id"]: r for r in a["rows"]}
    lv, rs, wr, ret = by[LEAVER], by[RISER], by[KEYING_SLIP], by[RETURNER]
    old, new = a["salary"][RISER], a["change"][RISER][0]
    old_part = q2(old / 12 * 15 / OCT_DAYS)
    new_part = q2(new / 12 * 16 / OCT_DAYS)
    flagged = [
        r
        for r in a["rows"]
        if abs(r["variance"]) > 50 or (r["sept"] and abs(r["variance"]) > r["sept"] * Decimal("0.05"))
    ]
    others = [r for r in flagged if r["id"] not in a["to_correct"] and r["id"] != RETURNER]
    blocks = [
        Heading("Summary"),
        Para(
            f"The draft October 2026 payroll totals GBP {_m(a['total_draft'])} gross against GBP "
            f"{_m(a['total_sept'])} paid in September. Checked against the pay policy, the HR change "
            "notice and the approved overtime timesheets, three employees' October pay is wrong in the "
            f"draft. Corrected, the October gross payroll total is GBP {_m(a['total_gross'])}, GBP "
            f"{_m(-a['total_correction'])} less than the draft. The run should not be released until the "
            "three corrections are made."
        ),
        Table(
            ["Employee", "Draft gross", "Corrected gross", "Correction"],
            [
                [f"{by[i]['name']} ({i})", _m(by[i]["draft"]), _m(by[i]["gross"]), _m(by[i]["correction"])]
                for i in a["to_correct"]
            ]
            + [["Total", _m(a["total_draft"]), _m(a["total_gross"]), _m(a["total_correction"])]],
        ),
        Heading("Variances"),
        Para(
            "Every employee's October gross pay was recalculated from the policy and compared with "
            f"September. {len(flagged)} employees show a variance above the policy's threshold of GBP "
            "50.00 or 5% once the corrections are made; each is explained in the workbook "
            "october_variance.xlsx, sheet Variance, and all its figures are formulas."
        ),
        Para(
            f"Grace Obi's October pay is GBP {_m(ret['gross'])} against GBP {_m(ret['sept'])} in "
            f"September, an increase of {ret['variance'] / ret['sept'] * 100:.1f}%. September was reduced "
            "for nine days of unpaid leave (HR notice entry 1); October is a full month, so her October "
            "pay is correct as drafted and needs no correction."
        ),
        Para(
            "The other variances above the threshold, "
            f"{' and '.join(r['name'] + chr(39) + 's' for r in others)}, are approved overtime that "
            "September did not have. Each overtime payment was recalculated at 1.5 times the hourly rate "
            "(annual salary divided by 1,950) on the timesheet hours converted from hours and minutes to "
            "decimal hours. Kieran Walsh's 6:00 hours on 14 October appear twice in the timesheet export "
            "under the same approval reference, once re-approved; they are one shift and are paid once, "
            "as the draft does."
        ),
        Heading("Corrections"),
        Para(
            "Dale Fenwick's October pay must be corrected to nil. He resigned with a last day of service "
            "of 30 September 2026 (HR notice entry 2) and was paid to that date in September; the draft "
            f"still pays him a full month of GBP {_m(lv['draft'])}. Under rule 3 of the pay policy he is "
            "not paid after his last day of service."
        ),
        Para(
            f"Priya Anand's October pay must be corrected from GBP {_m(rs['draft'])} to GBP "
            f"{_m(rs['gross'])}. The draft applies her new salary of {new:,.0f} for the whole month, "
            "following entry 3 of the HR notice; entry 4 replaces it and makes the promotion effective on "
            "16 October 2026. Under rule 2 the month is apportioned by calendar days: 15 days at "
            f"{old:,.0f} a year (GBP {_m(old_part)}) and 16 days at {new:,.0f} (GBP {_m(new_part)})."
        ),
        Para(
            f"Tomasz Wrobel's October pay must be corrected from GBP {_m(wr['draft'])} to GBP "
            f"{_m(wr['gross'])}. His approved overtime is 4:00 and 3:45, 7 hours 45 minutes in all, which "
            "is 7.75 decimal hours; the draft keyed it as 7.45 hours. At his hourly rate of GBP "
            f"{_m(wr['hourly'])} his overtime pay is GBP {_m(wr['ot'])}."
        ),
        Para(
            "Every other employee's October pay is correct as drafted, including the overtime keyed as "
            "4.50, 6.00 and 3.25 hours, which match the timesheets' 4:30, 6:00 and 3:15."
        ),
        Heading("Release"),
        Para(
            "Release the October payroll once the three corrections above are made in the payroll system "
            f"and a second draft shows a gross total of GBP {_m(a['total_gross'])}. The bank deadline is "
            "12:00 on 28 October 2026. HR should confirm that no payment in lieu of notice is due to Dale "
            "Fenwick, and the bureau should key overtime in decimal hours converted from the timesheet, "
            "not as typed."
        ),
    ]
    return write_docx(blocks, path, title="October 2026 payroll variance review")
