"""CTDM-01, clinical-trial data management: the data-cleaning query review before database lock.

The data manager of the HALCYON-2 study (24 subjects at three sites, five
visits each) applies the data validation plan's edit checks to the CRF export
and decides which subjects need a data query, then counts the protocol
deviations (visits out of window) per site. The answer comes from the rules of
the plan, the visit schedule, the subjects' status and the lab-range note.

Planted facts:

- Site 102's EDC writes dates day-first (02/03/2026), the other sites ISO;
  read month-first, most of site 102's visits fall out of window.
- Site 103 reports glucose in mg/dL (divide by 18.0); the others in mmol/L.
- The lab-range note supersedes the plan's appendix range (3.9-11.1 mmol/L)
  with 3.0-13.9 mmol/L. Out of range: 101-002 V3 15.2 mmol/L, 102-007 V2
  2.6 mmol/L, 103-004 V4 262 mg/dL (14.6). Within the current range but not
  the superseded one: 101-006 V4 12.4 mmol/L, 103-007 V5 62 mg/dL (3.4).
  103-001 V3 198 mg/dL (11.0) is in range once converted.
- Out of window: 101-003 V3 (day 20, window 12-18), 101-007 V4 (day 25,
  26-32), 102-006 V4 (day 34), 103-005 V3 (day 11). The plan's section 4.3
  extends Visit 5's late window to +10 days under protocol amendment 2, so
  103-002 V5 on day 64 is no deviation (it is under the schedule's +5).
- 103-006's Visit 3 is entered twice: one query on the second entry.
- 102-003 withdrew consent on 25/03/2026 (day 22); its Visits 4 (day 30) and
  5 (day 70, out of window) must not be used: a query on each, no deviation.
- Query set: 101-002, 101-003, 101-007, 102-003, 102-006, 102-007,
  103-004, 103-005, 103-006 (nine subjects, ten queries). Window deviations:
  site 101 two, 102 one, 103 one.
"""

from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import openpyxl

from pilot.scenarios.common import autosize, read_csv_dicts, rng, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_docx, write_text

# The generator's one random source: it draws the subjects' Day 1 dates, the visit jitter and the normal glucose values.
SEED = 749736
CRF_CSV = "crf_export.csv"
SCHEDULE_XLSX = "visit_schedule.xlsx"
DVP_DOCX = "data_validation_plan.docx"
NOTE_TXT = "lab_range_note.txt"
BOOK_XLSX = "query_log.xlsx"
MEMO_DOCX = "dm_status_memo.docx"

SITES = ["101", "102", "103"]
DAY_FIRST_SITE = "102"
MGDL_SITE = "103"
MGDL_PER_MMOL = Decimal("18.0")
# visit, name, target study day, days allowed early, days allowed late (as the schedule states them)
SCHEDULE = [
    ("V1", "Screening", -14, 7, 7),
    ("V2", "Baseline (Day 1)", 1, 0, 0),
    ("V3", "Week 2", 15, 3, 3),
    ("V4", "Week 4", 29, 3, 3),
    ("V5", "Week 8 / end of treatment", 57, 5, 5),
]
V5_LATE_AMENDED = 10  # data validation plan 4.3: protocol amendment 2
RANGE_V1 = (Decimal("3.9"), Decimal("11.1"))  # the plan's appendix, superseded
RANGE_V2 = (Decimal("3.0"), Decimal("13.9"))  # the lab-range note
WITHDRAWN = ("102-003", 22)  # subject, study day of withdrawal of consent

# Planted visit days (subject, visit) -> study day, and glucose as reported (value in the site's unit).
DAYS = {
    ("101-003", "V3"): 20,
    ("101-007", "V4"): 25,
    ("102-006", "V4"): 34,
    ("103-005", "V3"): 11,
    ("103-002", "V5"): 64,
    ("102-003", "V4"): 30,
    ("102-003", "V5"): 70,
}
GLUCOSE = {
    ("101-002", "V3"): "15.2",
    ("102-007", "V2"): "2.6",
    ("103-004", "V4"): "262",
    ("101-006", "V4"): "12.4",
    ("103-007", "V5"): "62",
    ("103-001", "V3"): "198",
}
DUPLICATE = ("103-006", "V3")


def subjects() -> list[str]:
    return [f"{s}-{k:03d}" for s in SITES for k in range(1, 9)]


def _fmt(d: dt.date, site: str) -> str:
    return d.strftime("%d/%m/%Y") if site == DAY_FIRST_SITE else d.isoformat()


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    g = rng(SEED)
    inputs_dir = Path(inputs_dir)
    day1 = {s: dt.date(2026, 3, 2) + dt.timedelta(days=int(g.integers(0, 12))) for s in subjects()}
    rows, n = [], 0
    for s in subjects():
        site = s[:3]
        for visit, _, target, early, late in SCHEDULE:
            jitter = 0 if visit == "V2" else int(g.integers(-min(early, late) + 1, min(early, late)))
            day = DAYS.get((s, visit), target + jitter)
            date = day1[s] + dt.timedelta(days=day - 1 if day > 0 else day)
            mmol = Decimal(str(round(float(g.uniform(4.3, 7.6)), 1)))
            value = GLUCOSE.get((s, visit))
            if value is None:
                value = str((mmol * MGDL_PER_MMOL).quantize(Decimal("1"))) if site == MGDL_SITE else str(mmol)
            n += 1
            row = [f"CRF-{n:04d}", s, site, visit, _fmt(date, site), value, "mg/dL" if site == MGDL_SITE else "mmol/L"]
            rows.append(row)
            if (s, visit) == DUPLICATE:
                dup = list(row)
    # The second entry of the duplicated visit, keyed again by the site some lines further down.
    n += 1
    at = next(i for i, r in enumerate(rows) if r[1] == DUPLICATE[0] and r[3] == "V5")
    rows.insert(at + 3, [f"CRF-{n:04d}"] + dup[1:])
    paths = [
        write_csv(
            inputs_dir / CRF_CSV,
            ["record_id", "subject_id", "site", "visit", "visit_date", "glucose", "glucose_unit"],
            rows,
        )
    ]
    paths.append(_write_schedule(inputs_dir, day1))
    paths.append(_write_dvp(inputs_dir))
    paths.append(write_text(inputs_dir / NOTE_TXT, NOTE))
    return paths


NOTE = """HALCYON-2 - Central laboratory notice CL-2026-07
From: Meridian Central Laboratory, clinical trials desk
To: HALCYON-2 data management; site coordinators 101, 102, 103
Date: 16 February 2026

Subject: glucose alert range, version 2

The glucose alert range printed in Appendix B of the data validation plan
(version 1: 3.9 - 11.1 mmol/L) was the fasting reference range. HALCYON-2
samples are non-fasting, and the medical monitor has approved the
non-fasting alert range below. Version 2 supersedes version 1 for every
sample of the study, including samples taken before this notice.

  Glucose alert range, version 2: 3.0 - 13.9 mmol/L (limits inclusive)

Values reported in mg/dL are converted as stated in the data validation
plan before they are compared with the range. The plan's Appendix B will
be updated at its next revision.
"""


def _write_schedule(inputs_dir: Path, day1: dict[str, dt.date]) -> Path:
    wb = openpyxl.Workbook()
    sch = wb.active
    sch.title = "Schedule"
    sch.append(["Visit", "Name", "Target study day", "Window early (days)", "Window late (days)"])
    style_header(sch)
    for visit, name, target, early, late in SCHEDULE:
        sch.append([visit, name, target, early, late])
    sch.append([])
    sch.append(
        [
            "Study day 1 is the date of Visit 2 (baseline); study day = visit date - Day 1 date + 1. "
            "There is no day 0: the day before Day 1 is day -1."
        ]
    )
    autosize(sch, {"A": 8, "B": 28, "C": 17, "D": 20, "E": 19})
    sites = wb.create_sheet("Sites")
    sites.append(["Site", "Principal investigator", "Country", "EDC date format", "Glucose unit"])
    style_header(sites)
    sites.append(["101", "Dr. Helena Marsh", "United Kingdom", "YYYY-MM-DD", "mmol/L"])
    sites.append(["102", "Dr. Pieter van Dam", "Netherlands", "DD/MM/YYYY", "mmol/L"])
    sites.append(["103", "Dr. Rosa Delgado", "United States", "YYYY-MM-DD", "mg/dL"])
    autosize(sites, {"A": 6, "B": 24, "C": 16, "D": 16, "E": 13})
    subj = wb.create_sheet("Subjects")
    subj.append(["Subject", "Site", "Randomised", "Status", "Date of withdrawal of consent"])
    style_header(subj)
    for s in subjects():
        if s == WITHDRAWN[0]:
            wd = day1[s] + dt.timedelta(days=WITHDRAWN[1] - 1)
            subj.append([s, s[:3], "Yes", "Withdrawn (consent)", wd.strftime("%d-%b-%Y")])
        else:
            subj.append([s, s[:3], "Yes", "Ongoing", ""])
    autosize(subj, {"A": 10, "B": 6, "C": 11, "D": 20, "E": 28})
    return save_workbook(wb, inputs_dir / SCHEDULE_XLSX)


def _write_dvp(inputs_dir: Path) -> Path:
    blocks = [
        Heading("HALCYON-2 Data Validation Plan, version 1.2"),
        Para(
            "Sponsor: Corvane Therapeutics. Protocol HAL-2-301, amendment 2. This plan defines the edit "
            "checks applied to the electronic case report form (CRF) data before database lock, and how "
            "queries and protocol deviations are recorded."
        ),
        Heading("1. Scope", 2),
        Para(
            "The checks apply to every record of the CRF export (one record per subject and visit). A "
            "record is one row of the export, identified by its record_id. A data query is raised on a "
            "record, never on a subject as a whole: one query per record per edit check that fails."
        ),
        Heading("2. Dates and units", 2),
        Para(
            "Dates are read in the format of the site's EDC configuration (visit schedule workbook, sheet "
            "Sites). Glucose reported in mg/dL is converted to mmol/L by dividing by 18.0 before any "
            "comparison; the converted value is rounded to one decimal place."
        ),
        Heading("3. Edit checks", 2),
        Para(
            "EC-01 Visit window. The study day of each visit (visit schedule, sheet Schedule) must lie "
            "within the target day minus the early window and plus the late window, limits inclusive. A "
            "visit outside its window fails EC-01 and is a protocol deviation of the site (minor, visit "
            "out of window)."
        ),
        Para(
            "EC-02 Glucose. The glucose value, in mmol/L, must lie within the glucose alert range (Appendix B), limits "
            "inclusive. A value outside the range fails EC-02. EC-02 is a data query, not a protocol deviation."
        ),
        Para(
            "EC-03 Duplicate visit. A subject has at most one record per visit. A second record of the "
            "same subject and visit fails EC-03; the query is raised on the later record (the higher "
            "record_id), which the site deletes."
        ),
        Para(
            "EC-04 Withdrawal. Data collected after the date on which a subject withdrew consent must not "
            "be used. Each such record fails EC-04 and is queried for removal. A record failing EC-04 is "
            "not assessed by EC-01 to EC-03 and counts toward no protocol deviation."
        ),
        Heading("4. Queries and deviations", 2),
        Para(
            "4.1 Every failed check is entered in the query log with the record_id, subject, visit, edit check and the "
            "text of the query to the site."
        ),
        Para(
            "4.2 Protocol deviations are counted per site from the EC-01 failures of the records that are "
            "used. A duplicated record counts once."
        ),
        Para(
            "4.3 Under protocol amendment 2 (section 6.4 of the protocol) the late window of Visit 5 is "
            "extended to 10 days, to allow the end-of-treatment visit to be combined with the safety "
            "follow-up. The early window of Visit 5 is unchanged. The visit schedule workbook still shows "
            "the window of the original protocol."
        ),
        Para(
            "4.4 Queries are issued to the sites through the EDC; the data manager reviews the query log before lock."
        ),
        Heading("Appendix B. Laboratory alert ranges", 2),
        Table(
            ["Analyte", "Unit", "Lower limit", "Upper limit", "Version"], [["Glucose", "mmol/L", "3.9", "11.1", "1"]]
        ),
    ]
    return write_docx(blocks, inputs_dir / DVP_DOCX, title="HALCYON-2 Data Validation Plan")


# ------------------------------------------------------------------ the rules' answer


def _parse_date(text: str, site: str, where: str) -> dt.date:
    fmt = "%d/%m/%Y" if site == DAY_FIRST_SITE else "%Y-%m-%d"
    try:
        return dt.datetime.strptime(text, fmt).date()
    except ValueError:
        raise ValueError(f"{where}: visit_date {text!r} is not a date in site {site}'s format {fmt}") from None


def _mmol(value: str, unit: str, where: str) -> Decimal:
    try:
        v = Decimal(value)
    except ArithmeticError:
        raise ValueError(f"{where}: glucose {value!r} is not a number") from None
    if unit == "mmol/L":
        return v
    if unit == "mg/dL":
        return (v / MGDL_PER_MMOL).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    raise ValueError(f"{where}: glucose_unit {unit!r} is neither mmol/L nor mg/dL")


def compute(inputs_dir: Path) -> dict:
    """The edit checks' answer from the inputs alone: every record checked, the queries, deviations per site."""
    inputs_dir = Path(inputs_dir)
    wb = openpyxl.load_workbook(inputs_dir / SCHEDULE_XLSX, read_only=True)
    windows = {}
    for row in wb["Schedule"].iter_rows(min_row=2, values_only=True):
        if row and row[0] and str(row[0]).startswith("V"):
            windows[row[0]] = (int(row[2]), int(row[3]), int(row[4]))
    # Data validation plan 4.3: Visit 5's late window under protocol amendment 2.
    t, e, _ = windows["V5"]
    windows["V5"] = (t, e, V5_LATE_AMENDED)
    withdrawn = {}
    for row in wb["Subjects"].iter_rows(min_row=2, values_only=True):
        if row[4]:
            withdrawn[row[0]] = dt.datetime.strptime(row[4], "%d-%b-%Y").date()
    records = []
    for k, r in enumerate(read_csv_dicts(inputs_dir / CRF_CSV), start=2):
        where = f"{CRF_CSV}, line {k}"
        r = dict(r)
        if r["visit"] not in windows:
            raise ValueError(f"{where}: visit {r['visit']!r} is not in the visit schedule")
        r["date"] = _parse_date(r["visit_date"], r["site"], where)
        r["mmol"] = _mmol(r["glucose"], r["glucose_unit"], where)
        records.append(r)
    day1 = {r["subject_id"]: r["date"] for r in records if r["visit"] == "V2"}
    seen: set[tuple[str, str]] = set()
    queries = []
    for r in records:
        s = r["subject_id"]
        d = (r["date"] - day1[s]).days
        r["day"] = d + 1 if d >= 0 else d
        target, early, late = windows[r["visit"]]
        r["low"], r["high"] = target - early, target + late
        r["checks"], r["used"], r["deviation"] = [], True, False
        if s in withdrawn and r["date"] > withdrawn[s]:
            r["used"] = False
            r["checks"].append("EC-04")
        elif (s, r["visit"]) in seen:
            r["used"] = False
            r["checks"].append("EC-03")
        else:
            seen.add((s, r["visit"]))
            if not r["low"] <= r["day"] <= r["high"]:
                r["checks"].append("EC-01")
                r["deviation"] = True
            if not RANGE_V2[0] <= r["mmol"] <= RANGE_V2[1]:
                r["checks"].append("EC-02")
        queries += [(r, c) for c in r["checks"]]
    deviations = {site: sum(1 for r in records if r["site"] == site and r["deviation"]) for site in SITES}
    per_site = {site: sum(1 for r, _ in queries if r["site"] == site) for site in SITES}
    queried = sorted({r["subject_id"] for r, _ in queries})
    return {
        "records": records,
        "queries": queries,
        "deviations": deviations,
        "queries_per_site": per_site,
        "queried": queried,
        "withdrawn": withdrawn,
        "windows": windows,
    }


# ------------------------------------------------------------------ the gold deliverables


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful data manager would: a formula-driven query log and the status memo."""
    a = compute(inputs_dir)
    outputs_dir = Path(outputs_dir)
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = _write_book(a, outputs_dir / BOOK_XLSX)
    memo = _write_memo(a, outputs_dir / MEMO_DOCX)
    record = write_completion_record(
        outputs_dir,
        [BOOK_XLSX, MEMO_DOCX],
        questions=[
            "Can Appendix B of the data validation plan be revised to the version 2 glucose range before lock, so that "
            "the plan and the note agree?"
        ],
        notes="Glucose checked against the version 2 range of the lab-range note; Visit 5 window per plan 4.3; subject "
        "102-003's data after withdrawal of consent queried for removal and left out of the deviation counts.",
    )
    return [book, memo, record]


def _write_book(a: dict, path: Path) -> Path:
    wb = openpyxl.Workbook()
    summ = wb.active
    summ.title = "Summary"
    chk = wb.create_sheet("Checks")
    ql = wb.create_sheet("Queries")
    chk.append(
        [
            "Record",
            "Subject",
            "Site",
            "Visit",
            "Visit date",
            "Day 1 date",
            "Study day",
            "Window from",
            "Window to",
            "Glucose as reported",
            "Unit",
            "Glucose mmol/L",
            "Used",
            "Out of window",
            "Out of range",
            "Edit checks failed",
        ]
    )
    style_header(chk)
    first = 2
    for k, r in enumerate(a["records"]):
        i = first + k
        d1 = next(x["date"] for x in a["records"] if x["subject_id"] == r["subject_id"] and x["visit"] == "V2")
        chk.append(
            [
                r["record_id"],
                r["subject_id"],
                r["site"],
                r["visit"],
                r["date"],
                d1,
                f"=IF(E{i}>=F{i},E{i}-F{i}+1,E{i}-F{i})",
                r["low"],
                r["high"],
                float(r["glucose"]),
                r["glucose_unit"],
                f'=IF(K{i}="mg/dL",ROUND(J{i}/18,1),J{i})',
                "Yes" if r["used"] else "No",
                f'=IF(AND(M{i}="Yes",OR(G{i}<H{i},G{i}>I{i})),1,0)',
                f'=IF(AND(M{i}="Yes",OR(L{i}<{RANGE_V2[0]},L{i}>{RANGE_V2[1]})),1,0)',
                ", ".join(r["checks"]),
            ]
        )
        chk[f"E{i}"].number_format = "yyyy-mm-dd"
        chk[f"F{i}"].number_format = "yyyy-mm-dd"
    last = first + len(a["records"]) - 1
    autosize(chk, {"A": 10, "B": 9, "E": 12, "F": 12, "P": 18})

    ql.append(["Query", "Record", "Subject", "Site", "Visit", "Edit check", "Query text"])
    style_header(ql)
    texts = {
        "EC-01": (
            "Visit date gives study day {day}, outside the window (days {low} to {high}). Please confirm the date."
        ),
        "EC-02": "Glucose {glucose} {unit} ({mmol} mmol/L) is outside the alert range 3.0-13.9 mmol/L. Please confirm.",
        "EC-03": "Second record of this visit for the subject. Please delete the duplicate entry.",
        "EC-04": "Visit dated after the subject's withdrawal of consent: the data may not be used. Please remove it.",
    }
    for n, (r, c) in enumerate(a["queries"], start=1):
        ql.append(
            [
                f"Q-{n:03d}",
                r["record_id"],
                r["subject_id"],
                r["site"],
                r["visit"],
                c,
                texts[c].format(
                    day=r["day"],
                    low=r["low"],
                    high=r["high"],
                    glucose=r["glucose"],
                    unit=r["glucose_unit"],
                    mmol=r["mmol"],
                ),
            ]
        )
    qlast = 1 + len(a["queries"])
    autosize(ql, {"A": 7, "B": 10, "C": 9, "D": 6, "E": 6, "F": 10, "G": 100})

    summ.append(["Site", "Records", "Window deviations", "Queries", "Subjects queried"])
    style_header(summ)
    for j, site in enumerate(SITES):
        r = 2 + j
        subj = ", ".join(s for s in a["queried"] if s.startswith(site))
        summ.append(
            [
                f"Site {site}",
                f'=COUNTIF(Checks!C{first}:C{last},"{site}")',
                f'=COUNTIFS(Checks!C{first}:C{last},"{site}",Checks!N{first}:N{last},1)',
                f'=COUNTIF(Queries!D2:D{qlast},"{site}")',
                subj,
            ]
        )
    summ.append(["Total", "=SUM(B2:B4)", "=SUM(C2:C4)", "=SUM(D2:D4)", ""])
    summ.append([])
    summ.append(["Total queries", f"=COUNTA(Queries!A2:A{qlast})"])
    # Distinct subjects among the queries: each subject's rows count 1/n times; a blank row counts nothing
    # (the &"" keeps its COUNTIF from being zero).
    rng_c = f"Queries!C2:C{qlast}"
    summ.append(["Subjects needing a query", f'=SUMPRODUCT(({rng_c}<>"")/COUNTIF({rng_c},{rng_c}&""))'])
    autosize(summ, {"A": 26, "B": 10, "C": 19, "D": 10, "E": 40})
    return save_workbook(wb, path)


# Subjects a first reading queries but the plan clears, with the reason the memo gives.
CLEARED = [
    (
        "101-006",
        "Visit 4 glucose 12.4 mmol/L is within the current alert range 3.0-13.9 mmol/L (version 2 of the lab note)",
    ),
    ("102-004", "visit dates read day-first, as site 102's EDC writes them, all lie within their windows"),
    ("103-001", "Visit 3 glucose 198 mg/dL converts to 11.0 mmol/L, within the alert range"),
    (
        "103-002",
        "Visit 5 on study day 64 is within the late window of 10 days of plan section 4.3 (protocol amendment 2)",
    ),
    ("103-007", "Visit 5 glucose 62 mg/dL converts to 3.4 mmol/L, within the current alert range"),
]


def _write_memo(a: dict, path: Path) -> Path:
    dev, qps = a["deviations"], a["queries_per_site"]
    wd_subject = WITHDRAWN[0]
    wd_date = a["withdrawn"][wd_subject]
    by_subject: dict[str, list] = {}
    for r, c in a["queries"]:
        by_subject.setdefault(r["subject_id"], []).append((r, c))

    def why(r: dict, c: str) -> str:
        if c == "EC-01":
            return f"{r['visit']} on study day {r['day']}, outside its window of days {r['low']} to {r['high']} (EC-01)"
        if c == "EC-02":
            conv = f" ({r['mmol']} mmol/L)" if r["glucose_unit"] == "mg/dL" else ""
            return (
                f"{r['visit']} glucose {r['glucose']} {r['glucose_unit']}{conv}, outside the alert range "
                "3.0-13.9 mmol/L (EC-02)"
            )
        if c == "EC-03":
            return f"{r['visit']} entered twice; record {r['record_id']} is the duplicate (EC-03)"
        return f"{r['visit']} dated {r['date']:%d %b %Y}, after the withdrawal of consent (EC-04)"

    lines = [
        Para(f"{s}: data query needed. " + "; ".join(why(r, c) for r, c in items) + ".")
        for s, items in sorted(by_subject.items())
    ]
    lines += [Para(f"{s}: no query needed. {reason[0].upper()}{reason[1:]}.") for s, reason in CLEARED]
    total_q = len(a["queries"])
    blocks = [
        Heading("Summary"),
        Para(
            f"All {len(a['records'])} records of the CRF export were run through edit checks EC-01 to "
            f"EC-04 of the data validation plan. {len(a['queried'])} subjects need a data query, with "
            f"{total_q} queries in all (site 101: {qps['101']}, site 102: {qps['102']}, site 103: "
            f"{qps['103']}). Protocol deviations for visits out of window: site 101 {dev['101']}, site 102 "
            f"{dev['102']}, site 103 {dev['103']}, {sum(dev.values())} in total. The database is not ready "
            "to lock until these queries are resolved."
        ),
        Heading("Method"),
        Para(
            "Site 102's export writes dates day-first (DD/MM/YYYY), as its EDC configuration on the Sites "
            "sheet states; the other sites write ISO dates. Each date was read in its site's format "
            "before study days were computed from the Visit 2 date. Site 103 reports glucose in mg/dL; "
            "its values were divided by 18.0 and rounded to one decimal before comparison. The glucose "
            "alert range applied is version 2 of the central laboratory's note, 3.0 to 13.9 mmol/L, which "
            "supersedes the 3.9 to 11.1 mmol/L range still printed in Appendix B of the plan. Visit 5 "
            "windows use the late window of 10 days of section 4.3 of the plan (protocol amendment 2), "
            "not the 5 days the schedule workbook still shows."
        ),
        Heading("Queries"),
        Para(
            "Below is the verdict for every subject queried and for each subject that a first reading of the export "
            "would have queried but that the plan clears. The query log lists each query by record, with its text."
        ),
        *lines,
        Heading("Protocol deviations"),
        Table(
            ["Site", "Visits out of window (protocol deviations)", "Queries"],
            [[f"Site {s}", str(dev[s]), str(qps[s])] for s in SITES]
            + [["Total", str(sum(dev.values())), str(total_q)]],
        ),
        Para(
            f"Each deviation is an EC-01 failure of a record that is used. Subject {wd_subject}'s Visit 5 "
            "is out of window but is not counted, because its data may not be used; the duplicated Visit "
            "3 of subject 103-006 is counted once."
        ),
        Heading("Data not used"),
        Para(
            f"Subject {wd_subject} withdrew consent on {wd_date:%d %B %Y}. Its Visit 4 and Visit 5 records "
            "are dated after that and must not be used (EC-04): each is queried for removal, and neither "
            "enters the glucose checks or the deviation counts. The second record of subject 103-006's "
            "Visit 3 is a duplicate to be deleted."
        ),
    ]
    return write_docx(blocks, path, title="HALCYON-2 data management status before lock")
