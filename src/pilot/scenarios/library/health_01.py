"""HEALTH-01, healthcare administration: the monthly access report of four clinics.

Planted facts: the no-show rate is defined on attended plus no-show
appointments only (cancellations excluded); Hillcrest's median wait from
arrival to being seen is far above the 20-minute target while the other
clinics meet it; three records have a seen time before the arrival time
(clock errors) and must be left out of the waiting-time figures.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

from pilot.scenarios.common import rng, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, write_csv, write_pdf, write_text

SEED = 260909
APPTS_CSV = "appointments_2026-10.csv"
DEFS_TXT = "report_definitions.txt"
REPORT_PDF = "clinic_access_report_2026-10.pdf"
CLINICS = {"Riverside": 13.0, "Hillcrest": 33.0, "Lakeview": 15.0, "Old Town": 11.0}
NO_SHOW_P = {"Riverside": 0.08, "Hillcrest": 0.14, "Lakeview": 0.10, "Old Town": 0.07}
BAD_CLOCK = {"A-10077", "A-10412", "A-10790"}


def generate(inputs_dir: Path) -> list[Path]:
    g = rng(SEED)
    rows = []
    n = 10000
    for day in range(1, 32):
        date = dt.date(2026, 10, day)
        if date.weekday() >= 5:
            continue
        for clinic, wait in CLINICS.items():
            for _ in range(int(g.integers(9, 14))):
                n += 1
                aid = f"A-{n}"
                booked = dt.datetime.combine(date, dt.time(8)) + dt.timedelta(minutes=int(g.integers(0, 32)) * 15)
                u = g.random()
                if u < 0.05:
                    status = "cancelled"
                elif u < 0.05 + NO_SHOW_P[clinic]:
                    status = "no-show"
                else:
                    status = "attended"
                arrival = seen = ""
                if status == "attended":
                    arr = booked + dt.timedelta(minutes=int(g.integers(-15, 10)))
                    w = max(1, int(np.rint(g.gamma(4.0, wait / 4.0))))
                    s = arr + dt.timedelta(minutes=w)
                    arrival, seen = arr.strftime("%H:%M"), s.strftime("%H:%M")
                rows.append([aid, clinic, date.isoformat(), booked.strftime("%H:%M"), arrival, seen, status])
    for r in rows:
        if r[0] in BAD_CLOCK:
            r[6] = "attended"
            arr = dt.datetime.strptime(r[3], "%H:%M")
            r[4], r[5] = arr.strftime("%H:%M"), (arr - dt.timedelta(minutes=50)).strftime("%H:%M")
    paths = [
        write_csv(
            inputs_dir / APPTS_CSV,
            ["appointment_id", "clinic", "date", "booked_time", "arrival_time", "seen_time", "status"],
            rows,
        )
    ]
    defs = """Community clinics - monthly access report: definitions (Quality & Performance, 2026)

No-show rate: appointments with status "no-show" divided by appointments that were either attended or no-show. \
Cancellations (any kind) are excluded from numerator and denominator. Report as a percentage with one decimal.

Waiting time: minutes from arrival_time to seen_time for attended appointments. Records whose seen time is earlier \
than the arrival time are clock errors: exclude them from waiting-time figures and state how many were excluded.

Target: median waiting time of 20 minutes or less at each clinic. A clinic above target must be named in the report \
with an action.

The report goes to the Director of Ambulatory Care and is filed with the Board quality committee papers.
"""
    paths.append(write_text(inputs_dir / DEFS_TXT, defs))
    return paths


def analyse(inputs_dir: Path) -> dict:
    df = pd.read_csv(inputs_dir / APPTS_CSV)
    base = df[df.status.isin(["attended", "no-show"])]
    rate = 100 * (base.status == "no-show").mean()
    by_rate = base.groupby("clinic").status.apply(lambda s: 100 * (s == "no-show").mean())
    att = df[df.status == "attended"].copy()
    t = lambda c: pd.to_datetime(att[c], format="%H:%M")  # noqa: E731
    att["wait"] = (t("seen_time") - t("arrival_time")).dt.total_seconds() / 60
    bad = sorted(att.loc[att.wait < 0, "appointment_id"])
    att = att[att.wait >= 0]
    med = att.groupby("clinic").wait.median()
    return {
        "n": len(df),
        "rate": rate,
        "by_rate": by_rate,
        "median": med,
        "overall_median": att.wait.median(),
        "bad": bad,
        "attended": len(att),
    }


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    a = analyse(inputs_dir)
    over = [c for c in a["median"].index if a["median"][c] > 20]
    clinics = sorted(CLINICS)
    blocks = [
        Heading("Summary"),
        Para(
            f"In October 2026 the four community clinics booked {a['n']:,} appointments. The no-show rate "
            f"across the clinics was {a['rate']:.1f}%, and the median wait from arrival to being seen was "
            f"{a['overall_median']:.0f} minutes. Three clinics met the 20-minute waiting-time target; "
            f"{', '.join(over)} did not, with a median wait of {a['median'][over[0]]:.0f} minutes, and "
            "needs action this month."
        ),
        Heading("No-show rate"),
        Para(
            "Following the report definitions, the no-show rate counts no-shows against appointments that "
            "were attended or missed; cancellations are left out of both. The overall rate was "
            f"{a['rate']:.1f}%. Hillcrest also has the highest no-show rate, which suggests that long "
            "waits and missed appointments may be linked there."
        ),
        Table(
            ["Clinic", "No-show rate", "Median wait (min)"],
            [[c, f"{a['by_rate'][c]:.1f}%", f"{a['median'][c]:.0f}"] for c in clinics],
        ),
        Heading("Waiting times"),
        Para(
            f"Waiting times were computed for {a['attended']:,} attended appointments. {len(a['bad'])} "
            f"records ({', '.join(a['bad'])}) show a seen time earlier than the arrival time; they are "
            "clock errors and were excluded from the waiting-time figures, as the definitions require. "
            "Riverside, Lakeview and Old Town have medians well within the target. Hillcrest's median of "
            f"{a['median']['Hillcrest']:.0f} minutes is more than one and a half times the target."
        ),
        Heading("Actions"),
        Para(
            "Hillcrest: the clinic manager should review the session templates and staffing against "
            "arrivals by hour in November and report back to the Director by 15 December; a reminder-call "
            "pilot for Hillcrest patients would address the no-show rate at the same time. All clinics: "
            "the three clock errors point to a check-in kiosk problem that the systems team should fix so "
            "that next month's figures are complete. The next report will show whether the Hillcrest "
            "changes have brought the median wait back under 20 minutes."
        ),
    ]
    outputs_dir.mkdir(parents=True, exist_ok=True)
    report = write_pdf(blocks, outputs_dir / REPORT_PDF, title="Clinic access report - October 2026")
    record = write_completion_record(outputs_dir, [REPORT_PDF])
    return [report, record]
