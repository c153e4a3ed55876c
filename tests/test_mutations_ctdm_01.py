"""CTDM-01's oracle fails the packages of a data manager who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
data manager would have produced it: site 102's dates read month-first, the
withdrawn subject's later visits used, the schedule's Visit 5 window taken over
the plan's amended one, the superseded glucose range applied, site 103's mg/dL
compared unconverted, the duplicate visit missed. The criteria each must fail
are worked out from the trap (which cell or sentence the mistake changes, with
the figures of ctdm_01's docstring), not read off the oracle. Phrasings a
careful data manager might use instead of the gold's must pass. All variants
share one LibreOffice batch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import mutation_support
import pytest
from mutation_support import Mutation, in_turn, set_cell
from openpyxl.workbook.workbook import Workbook

pytestmark = pytest.mark.usefixtures("soffice")

SID = "CTDM-01"
BOOK = "query_log.xlsx"
MEMO = "dm_status_memo.docx"

# The gold workbook's layout (ctdm_01._write_book). Checks: one row per record in the export's order, from row 2;
# E visit date, H-I window, M used (Yes/No), N out of window (a formula). Row 55 is 102-003's Visit 4 (CRF-0054),
# 56 its Visit 5 (CRF-0055, day 70), 91 is 103-002's Visit 5 (day 64). Queries: rows 2-11 are Q-001 to Q-010, row 5
# and 6 102-003's EC-04 queries, row 11 the duplicate CRF-0121. Summary: B7 'Total queries' =COUNTA over Queries.
WD_V4, WD_V5, V5_103_002 = 55, 56, 91
DUP_QUERY_ROW = 11
TOTAL_OVER_ROWS = "=COUNTA(Queries!A2:A60)"  # a careless worker's own count, over the rows it wrote


def _book(*edits: Callable[[Workbook], None]) -> Mutation:
    """Edit the workbook with functions of the loaded workbook, as a worker writing other figures would."""
    return mutation_support.edit_workbook(BOOK, *edits)


def _add_query(record: str, subject: str, visit: str, check: str, text: str):
    def edit(wb) -> None:
        q = wb["Queries"]
        q.append([f"Q-{q.max_row:03d}", record, subject, subject[:3], visit, check, text])
        wb["Summary"]["B7"] = TOTAL_OVER_ROWS

    return edit


def _delete_query(row: int):
    def edit(wb) -> None:
        wb["Queries"].delete_rows(row)

    return edit


def _month_first(wb) -> None:
    """Site 102's dates read month-first wherever the day could be a month: 02/03/2026 becomes 3 February."""
    ws, n = wb["Checks"], 0
    for r in range(2, ws.max_row + 1):
        date = ws[f"E{r}"].value
        if ws[f"C{r}"].value == "102" and isinstance(date, dt.datetime) and date.day <= 12 and date.day != date.month:
            ws[f"E{r}"] = date.replace(month=date.day, day=date.month)
            n += 1
    assert n >= 5, "too few site 102 dates could be misread for the variant to mean anything"


def _schedule_v5_window(wb) -> None:
    """Every Visit 5 checked against the schedule's late window of 5 days (57 + 5 = 62) instead of the plan's 10."""
    ws = wb["Checks"]
    for r in range(2, ws.max_row + 1):
        if ws[f"D{r}"].value == "V5":
            ws[f"I{r}"] = 62


def _memo(*pairs: tuple[str, str]) -> Mutation:
    """Replace sentences of the memo (wrapped lines allowed); the rest stays as the gold wrote it."""
    return mutation_support.replace_sentences(SID, MEMO, *pairs)


def _queries_section(text: str) -> Mutation:
    """Replace the whole Queries section's body by ``text``."""
    return mutation_support.replace_section_body(
        SID, MEMO, "Queries", lambda line: line.strip() == "Protocol deviations", text
    )


# The gold memo's Queries lines, one paragraph per subject.
CLEAR_103_002 = (
    "103-002: no query needed. Visit 5 on study day 64 is within the late window of 10 days of plan section 4.3 "
    "(protocol amendment 2)."
)
CLEAR_101_006 = (
    "101-006: no query needed. Visit 4 glucose 12.4 mmol/L is within the current alert range 3.0-13.9 mmol/L "
    "(version 2 of the lab note)."
)
CLEAR_103_007 = (
    "103-007: no query needed. Visit 5 glucose 62 mg/dL converts to 3.4 mmol/L, within the current alert range."
)
CLEAR_103_001 = "103-001: no query needed. Visit 3 glucose 198 mg/dL converts to 11.0 mmol/L, within the alert range."
QUERY_103_006 = "103-006: data query needed. V3 entered twice; record CRF-0121 is the duplicate (EC-03)."
INTRO = (
    "Below is the verdict for every subject queried and for each subject that a first reading of the export would "
    "have queried but that the plan clears."
)

# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # Site 102 read month-first: study days move by about a month, so several of its used visits fall out of window.
    # Only site 102's deviation count moves (the query sheet is left as it was).
    "dates_month_first": (_book(_month_first), {"book_dev_102"}),
    # 102-003's Visits 4 and 5 used: Visit 5 (day 70, window 52-67) becomes a site 102 deviation, and the two
    # EC-04 queries become one EC-01 query (10 - 2 + 1 = 9). 102-003 is still queried, so the memo's set holds.
    "withdrawn_data_used": (
        _book(
            set_cell("Checks", f"M{WD_V4}", "Yes"),
            set_cell("Checks", f"M{WD_V5}", "Yes"),
            _delete_query(6),
            _delete_query(5),
            _add_query("CRF-0055", "102-003", "V5", "EC-01", "Visit out of window."),
        ),
        {"book_dev_102", "book_total_queries"},
    ),
    # The schedule's Visit 5 window (52-62) over the plan's 4.3 (52-67): 103-002 on day 64 becomes a site 103
    # deviation, an eleventh query, and a subject queried in error.
    "v5_window_from_schedule": (
        in_turn(
            _book(_schedule_v5_window, _add_query("CRF-0090", "103-002", "V5", "EC-01", "Visit out of window.")),
            _memo(
                (
                    CLEAR_103_002,
                    "103-002: data query needed. V5 on study day 64, outside its window of days 52 to 62 (EC-01).",
                )
            ),
        ),
        {"book_dev_103", "book_total_queries", "memo_query_set"},
    ),
    # Appendix B's superseded range (3.9-11.1): 101-006 (12.4) and 103-007 (3.4) queried, twelve queries.
    "superseded_range": (
        in_turn(
            _book(
                _add_query("CRF-0029", "101-006", "V4", "EC-02", "Glucose out of range."),
                _add_query("CRF-0115", "103-007", "V5", "EC-02", "Glucose out of range."),
            ),
            _memo(
                (
                    CLEAR_101_006,
                    (
                        "101-006: data query needed. V4 glucose 12.4 mmol/L, outside the alert range 3.9-11.1 "
                        "mmol/L (EC-02)."
                    ),
                ),
                (
                    CLEAR_103_007,
                    (
                        "103-007: data query needed. V5 glucose 3.4 mmol/L, outside the alert range 3.9-11.1 "
                        "mmol/L (EC-02)."
                    ),
                ),
            ),
        ),
        {"book_total_queries", "memo_query_set"},
    ),
    # The memo quotes Appendix B's range throughout although the queries are right: the current range is not stated.
    "memo_quotes_appendix_range": (
        _memo(
            *[
                (old, old.replace("13.9", "11.1").replace("3.0", "3.9"))
                for old in [
                    "alert range 3.0-13.9 mmol/L",
                    (
                        "version 2 of the central laboratory's note, 3.0 to 13.9 mmol/L, which supersedes the "
                        "3.9 to 11.1 mmol/L range still printed in Appendix B of the plan."
                    ),
                ]
            ]
        ),
        {"memo_current_range"},
    ),
    # Site 103's mg/dL compared with the mmol/L range: every site 103 subject out of range and queried.
    "glucose_unconverted": (
        _memo(
            (
                CLEAR_103_001,
                "103-001: data query needed. Visit 3 glucose 198, outside the alert range (EC-02).\n"
                "103-003: data query needed. Glucose values outside the alert range (EC-02).\n"
                "103-008: data query needed. Glucose values outside the alert range (EC-02).",
            )
        ),
        {"memo_query_set"},
    ),
    # The second record of 103-006's Visit 3 not seen: nine queries, 103-006 left out of the set.
    "duplicate_missed": (
        in_turn(_book(_delete_query(DUP_QUERY_ROW)), _memo((QUERY_103_006 + "\n", ""))),
        {"book_total_queries", "memo_query_set"},
    ),
    # Careful wordings other than the gold's: the set as one list instead of a line per subject, the cleared subjects
    # together.
    "queries_as_lists": (
        _queries_section(
            "The following subjects need a data query: 101-002 (Visit 3 glucose above the alert range, "
            "EC-02), 101-003 and 101-007 (visits out of window, EC-01), 102-003 (two visits after "
            "withdrawal of consent, EC-04), 102-006 (Visit 4 out of window), 102-007 (Visit 2 glucose "
            "below the range), 103-004 (Visit 4 glucose 14.6 mmol/L), 103-005 (Visit 3 out of window) and "
            "103-006 (Visit 3 entered twice, EC-03). Subjects 103-002, 101-006, 103-007, 103-001 and "
            "102-004 were reviewed against the edit checks and need no query."
        ),
        set(),
    ),
    # A supposition about a cleared subject states no finding.
    "supposition_beside_the_queries": (
        _memo((INTRO, INTRO + " Read against the schedule alone, subject 103-002 would fail its window.")),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("ctdm01"))


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


# Query verdicts as other data managers write them, read without a document: the subjects each puts inside the
# set ("needs a query") and outside it ("no query"). A supposition or a plan states no finding.
QUERY_PHRASINGS = {
    "Subject 101-003: Visit 3 out of window, query raised.": ({"101-003"}, set()),
    "A query was raised for 102-006 (Visit 4 on day 34, window 26-32).": ({"102-006"}, set()),
    "103-006's Visit 3 fails EC-03: the second record is queried for deletion.": ({"103-006"}, set()),
    "No query is needed for 101-006; its glucose is within the current range.": (set(), {"101-006"}),
    "103-002 passes EC-01 under the amended Visit 5 window.": (set(), {"103-002"}),
    "If the schedule's window were applied, 103-002 would be queried.": (set(), set()),
    "Subject | Query needed\n101-002 | Yes\n101-006 | No": ({"101-002"}, {"101-006"}),
    "103-002: no query. Within the amended window.": (set(), {"103-002"}),
    "101-002 - query needed (EC-02): glucose 15.2 mmol/L above the range.": ({"101-002"}, set()),
    "102-004: no query needed; its dates, read day-first, are within their windows.": (set(), {"102-004"}),
}


@pytest.mark.parametrize("text", list(QUERY_PHRASINGS))
def test_query_phrasings(text):
    assert mutation_support.read_set_as(SID, "memo_query_set", text) == QUERY_PHRASINGS[text]


# A malformed export is refused naming the file, the line, the field and the reason, before any check.
@pytest.mark.parametrize(
    "column,value,words",
    [
        (4, "2026-13-40", ["crf_export.csv", "line 5", "visit_date", "'2026-13-40'"]),
        (6, "mmol", ["crf_export.csv", "line 5", "glucose_unit", "'mmol'"]),
        (5, "n/a", ["crf_export.csv", "line 5", "glucose", "'n/a'"]),
        (3, "V9", ["crf_export.csv", "line 5", "visit", "'V9'"]),
    ],
)
def test_malformed_export_is_refused(tmp_path, column, value, words):
    from pilot.scenarios.library import ctdm_01

    message = mutation_support.refusal_of_edited_input(
        SID, tmp_path, ctdm_01.CRF_CSV, 5, column, value, ctdm_01.compute
    )
    assert all(w in message for w in words), message
