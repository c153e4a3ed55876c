"""INS-01, insurance claims: Large-loss claims review: reserves and special-investigation referrals.

TODO(author): say in a paragraph what the task is and which facts are planted, as the other
library modules do; oracle.yml's header names the same facts with their figures.

Planted facts (the skeleton's stub, to replace): records.csv lists record R-0017 twice, and
the counting rules say a record is counted once and reported; the records counted and the
total amount follow from the rules once the second entry is dropped.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import openpyxl
from openpyxl.styles import Font

from pilot.scenarios.common import autosize, read_csv_dicts, rng, style_header, write_completion_record
from pilot.scenarios.officeio import Heading, Para, Table, save_workbook, write_csv, write_document, write_text

# The generator's one random source: a new seed changes every input, and so oracle.yml's figures.
SEED = 631417
RECORDS_CSV = "records.csv"
POLICY_TXT = "policy.txt"
BOOK_XLSX = "analysis.xlsx"
MEMO_DOCX = "memo.docx"
CATEGORIES = ["Travel", "Supplies", "Services", "Equipment"]
N_RECORDS = 40
# The trap, a stub: one record entered twice. TODO(author): plant the inconsistency your task turns
# on (a figure that does not tie, a rule one file breaks, a record another contradicts) and name
# it in the header comment of oracle.yml.
DUPLICATE = "R-0017"


def generate(inputs_dir: Path) -> list[Path]:
    """Write the inputs from the seed alone, so they regenerate byte for byte."""
    # TODO(author): generate your task's inputs. Write office files with pilot.scenarios.officeio
    # (save_workbook, write_document), which pin the timestamps a plain save would change.
    g = rng(SEED)
    start = dt.date(2026, 10, 1)
    rows = [[f"R-{i:04d}", (start + dt.timedelta(days=int(g.integers(0, 31)))).isoformat(),
             CATEGORIES[int(g.integers(len(CATEGORIES)))], f"{g.uniform(40, 4000):.2f}"] for i in range(1, N_RECORDS + 1)]
    # The second entry a few lines further down, where a reader skimming the file misses it.
    at = next(i for i, r in enumerate(rows) if r[0] == DUPLICATE)
    rows.insert(at + 6, list(rows[at]))
    paths = [write_csv(inputs_dir / RECORDS_CSV, ["record_id", "date", "category", "amount"], rows)]
    policy = """Records - counting rules

1. Count each record once. A record id that appears more than once is the same record
   entered twice: keep its first entry, drop the others, and report the id.
2. The total amount is the sum of the amounts of the records counted, to the cent.
"""
    paths.append(write_text(inputs_dir / POLICY_TXT, policy))
    return paths


def compute(inputs_dir: Path) -> dict:
    """The rules' answer from the inputs alone: the records counted, the ids entered twice, the count, the total."""
    # TODO(author): compute your task's answer; oracle.yml states its figures.
    seen: set[str] = set()
    kept, repeats = [], []
    for r in read_csv_dicts(inputs_dir / RECORDS_CSV):
        if r["record_id"] in seen:
            repeats.append(r["record_id"])
            continue
        seen.add(r["record_id"])
        kept.append(r)
    # Decimal: the total is exact to the cent, as the rules ask.
    total = sum((Decimal(r["amount"]) for r in kept), Decimal("0"))
    return {"records": kept, "repeats": repeats, "count": len(kept), "total": total}


def solve(inputs_dir: Path, outputs_dir: Path) -> list[Path]:
    """Write the gold deliverables as a careful professional would: formulas in the workbook, the trap reported."""
    # TODO(author): write your task's gold deliverables; they must pass every criterion of oracle.yml.
    facts = compute(inputs_dir)
    wb = openpyxl.Workbook()
    summ = wb.active
    summ.title = "Summary"
    data = wb.create_sheet("Records")
    data.append(["Record", "Date", "Category", "Amount"])
    style_header(data)
    for r in facts["records"]:
        data.append([r["record_id"], r["date"], r["category"], float(r["amount"])])
    last = len(facts["records"]) + 1
    summ.append(["Records review - summary"])
    summ["A1"].font = Font(bold=True)
    summ.append([])
    summ.append(["Records counted", f"=COUNTA(Records!A2:A{last})"])
    summ.append(["Total amount", f"=ROUND(SUM(Records!D2:D{last}),2)"])
    summ.append([])
    summ.append(["Category", "Records", "Amount"])
    for cell in summ[summ.max_row]:
        cell.font = Font(bold=True)
    for c in CATEGORIES:
        r = summ.max_row + 1
        summ.append([c, f"=COUNTIF(Records!C2:C{last},A{r})", f"=ROUND(SUMIF(Records!C2:C{last},A{r},Records!D2:D{last}),2)"])
    summ.append([])
    summ.append(["Not counted"])
    for rid in facts["repeats"]:
        summ.append([rid, "entered twice: first entry kept"])
    autosize(summ, {"A": 24, "B": 32, "C": 14})
    autosize(data, {"A": 10, "B": 12, "C": 12, "D": 12})
    outputs_dir.mkdir(parents=True, exist_ok=True)
    book = save_workbook(wb, outputs_dir / BOOK_XLSX)

    total, count, repeats = f"{facts['total']:,.2f}", facts["count"], ", ".join(facts["repeats"])
    by_cat = {c: [r for r in facts["records"] if r["category"] == c] for c in CATEGORIES}
    blocks = [
        Heading("Summary"),
        Para(f"The records file has {count + len(facts['repeats'])} lines but {count} distinct records: record {repeats} "
             f"is entered twice. Counted once, as the counting rules require, the {count} records come to a total "
             f"amount of {total}."),
        Heading("Findings"),
        Para(f"Every record id was checked for repeats before any figure was computed. Record {repeats} appears a "
             "second time a few lines below its first entry, with the same date, category and amount, so it is "
             "the same record entered twice rather than a second transaction. Following rule 1, the first entry "
             "was kept and the second dropped; the workbook lists the records counted on its Records sheet and "
             "computes the summary figures from them with formulas, so each figure can be traced."),
        Table(["Category", "Records", "Amount"],
              [[c, len(rs), f"{sum((Decimal(r['amount']) for r in rs), Decimal('0')):,.2f}"] for c, rs in by_cat.items()]),
        Heading("Follow-up"),
        Para(f"Record {repeats} should be corrected at its source so that the next extract lists it once; until then "
             "any total taken straight from the file overstates the amount by that record. No other record id "
             "repeats, and no amount is missing or negative, so no further correction is needed."),
    ]
    memo = write_document(blocks, outputs_dir / MEMO_DOCX, title="Records review")
    record = write_completion_record(outputs_dir, [BOOK_XLSX, MEMO_DOCX],
                                     notes=f"Record {repeats} is entered twice in records.csv; counted once.")
    return [book, memo, record]
