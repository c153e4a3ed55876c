"""Real deliverable files for the judge tests (xlsx, docx, pdf, csv, md), written with the office libraries."""

from __future__ import annotations

import json
from pathlib import Path

import docx
from openpyxl import Workbook
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas

RUBRIC = {
    "criteria": [
        {
            "id": "accuracy",
            "name": "Accuracy",
            "weight": 3,
            "description": "The figures agree with the inputs and the calculations are right.",
            "anchors": {
                0: "Most figures are wrong or unsupported.",
                2: "Some figures are wrong.",
                4: "Every figure is right and traceable.",
            },
        },
        {
            "id": "completeness",
            "name": "Completeness",
            "weight": 2,
            "description": "Every requested file and section is there.",
            "anchors": {0: "Most of it is missing.", 2: "Something is missing.", 4: "Nothing is missing."},
        },
        {
            "id": "clarity",
            "name": "Clarity",
            "weight": 1,
            "description": "A reader can follow the work.",
            "anchors": {0: "Unreadable.", 2: "Readable with effort.", 4: "Clear and well organised."},
        },
    ]
}

BRIEF = """# Quarterly budget review

Prepare `budget.xlsx` (a workbook with a Summary sheet whose totals are formulas)
and `memo.docx` (a memo with the sections Summary, Findings and Recommendation),
and write `outputs/completion_record.json`.
"""

DELIVERABLES = [
    {"name": "budget.xlsx", "kind": "xlsx", "requires_formulas": True},
    {
        "name": "memo.docx",
        "kind": "docx",
        "min_words": 40,
        "required_sections": ["Summary", "Findings", "Recommendation"],
    },
    {"name": "completion_record.json", "kind": "completion_record"},
]

MEMO_PARAGRAPHS = {
    "Summary": (
        "Spending in the third quarter came to 1,250 thousand, 4 per cent under the approved budget of 1,300 thousand."
    ),
    "Findings": (
        "Travel ran 12 per cent over plan while salaries were on plan. The under-spend sits in capital items "
        "deferred to January."
    ),
    "Recommendation": (
        "Keep the full-year forecast unchanged and ask the travel budget holders to explain the overrun by "
        "the next review."
    ),
}


class FakeScenario:
    """The attributes of a scenario that the judges read."""

    def __init__(
        self, root: Path, sid: str = "FIN-09", deliverables: list | None = None, rubric: dict | None = None
    ) -> None:
        self.id = sid
        self.dir = root / sid
        self.dir.mkdir(parents=True, exist_ok=True)
        self.brief_path = self.dir / "brief.md"
        self.brief_path.write_text(BRIEF, encoding="utf-8")
        self.deliverables = deliverables if deliverables is not None else [dict(d) for d in DELIVERABLES]
        self.rubric = rubric if rubric is not None else RUBRIC
        self.occupation = "financial analyst"
        self.designed_depth = 2
        self.professional_minutes = 90.0


def write_workbook(
    path: Path, *, formulas: bool = True, error: bool = False, cached: bool = False, extra_rows: int = 0
) -> Path:
    """The budget workbook; ``cached`` stores computed results beside the formulas, as a spreadsheet program does."""
    wb = Workbook()
    ws = wb.active
    ws.title = "Summary"
    ws.append(["Line", "Budget", "Actual", "Variance"])
    rows = [("Salaries", 800, 800), ("Travel", 100, 112), ("Capital", 400, 338)]
    for i, (name, b, a) in enumerate(rows, start=2):
        ws.append([name, b, a, f"=C{i}-B{i}" if formulas else a - b])
    ws.append(
        [
            "Total",
            "=SUM(B2:B4)" if formulas else 1300,
            "=SUM(C2:C4)" if formulas else 1250,
            "=SUM(D2:D4)" if formulas else -50,
        ]
    )
    if error:
        ws["E2"] = "=1/0"
    for k in range(extra_rows):
        r = 6 + k
        ws.append([f"Detail {k}", k, k + 1, f"=C{r}-B{r}" if formulas else 1])
    notes = wb.create_sheet("Notes")
    notes["A1"] = "Source: ledger extract of 30 September"
    wb.save(path)
    if cached and formulas:
        values = {"D2": "0", "D3": "12", "D4": "-62", "B5": "1300", "C5": "1250", "D5": "-50"}
        if error:
            values["E2"] = "#DIV/0!"
        set_cached_values(path, "xl/worksheets/sheet1.xml", values)
    return path


def set_cached_values(path: Path, member: str, values: dict[str, str]) -> None:
    """Fill the empty cached values openpyxl leaves after each formula (an error value gets t="e")."""
    import re
    import zipfile

    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == member:
                text = data.decode("utf-8")
                for ref, v in values.items():
                    kind = ' t="e"' if v.startswith("#") else ""
                    text, n = re.subn(
                        rf'<c r="{ref}"([^>]*)><f>(.*?)</f><v\s*/?>(?:</v>)?</c>',
                        rf'<c r="{ref}"{kind}><f>\2</f><v>{v}</v></c>',
                        text,
                    )
                    assert n == 1, (ref, n)
                data = text.encode("utf-8")
            zout.writestr(item, data)
    tmp.replace(path)


def write_memo(
    path: Path, *, sections: dict[str, str] | None = None, extra: list[str] | None = None, table: bool = True
) -> Path:
    d = docx.Document()
    d.add_heading("Third-quarter budget review", level=1)
    for title, text in (sections if sections is not None else MEMO_PARAGRAPHS).items():
        d.add_heading(title, level=2)
        d.add_paragraph(text)
    for line in extra or []:
        d.add_paragraph(line)
    if table:
        t = d.add_table(rows=3, cols=3)
        for r, row in enumerate([["Line", "Budget", "Actual"], ["Travel", "100", "112"], ["Capital", "400", "338"]]):
            for c, v in enumerate(row):
                t.cell(r, c).text = v
    d.add_paragraph("Prepared for the finance committee.", style="List Bullet")
    d.save(path)
    return path


def write_pdf(path: Path, lines: list[str], pages: int = 1) -> Path:
    c = canvas.Canvas(str(path), pagesize=A4)
    for p in range(pages):
        y = 800
        for line in lines:
            c.drawString(72, y, line)
            y -= 16
        c.drawString(72, 60, f"Page {p + 1}")
        c.showPage()
    c.save()
    return path


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    import csv

    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    return path


def write_record(
    outputs: Path,
    deliverables: list[str],
    substitutions: list[dict] | None = None,
    questions: list[str] | None = None,
    notes: str = "",
) -> Path:
    rec = {
        "status": "completed",
        "deliverables": deliverables,
        "substitutions": substitutions or [],
        "questions": questions or [],
        "notes": notes,
    }
    p = outputs / "completion_record.json"
    p.write_text(json.dumps(rec, indent=2), encoding="utf-8")
    return p


def gold_outputs(outputs: Path) -> Path:
    """A complete, well-formed package."""
    outputs.mkdir(parents=True, exist_ok=True)
    write_workbook(outputs / "budget.xlsx")
    write_memo(outputs / "memo.docx")
    write_record(outputs, ["budget.xlsx", "memo.docx"])
    return outputs


class SecondProviderJudge:
    """A judge of a second provider registered by a test (``judge_files:second_provider``): it answers every member
    with the same verdict and keeps what it was given, so that a test sees which members reached it."""

    name = "second-provider"

    def __init__(self, **made_with: object) -> None:
        self.made_with = made_with
        self.requests: list = []

    def complete(self, request):  # the JudgeBackend protocol (pilot.judges.backend)
        from pilot.judges.backend import JudgeReply

        self.requests.append(request)
        scores = {c.id: 4 for c in request.criteria}
        return JudgeReply(json.dumps({"criterion_scores": scores, "accept": True, "rationale": "r"}), 0.01)


def second_provider(**kwargs: object) -> SecondProviderJudge:
    return SecondProviderJudge(**kwargs)
