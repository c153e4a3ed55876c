"""The design's ten scenarios' traps, proved by the wrong answer itself.

The ten frozen bundles name their planted traps in the prose header of ``oracle.yml``, which cannot gain a
``traps:`` list (it is in every study's freeze manifest; protocol/interpretations.md). Their traps are declared here
instead, in the kit's own terms: each with the edits of the gold package that make its *fallen package* (the
package of a worker who falls into it) and the criteria that must catch it. The criteria are worked out by hand
from the trap and the gold's formulas (written beside each trap), not read off the oracle. All fallen packages share
one LibreOffice batch, and the kit judges them as ``pilot scenarios check`` judges an added bundle's: exactly the
catching criteria fail, each required and a check of content; a numeric criterion's tolerance admits no figure of
a fallen package that the gold does not state.

One prose trap the oracle does not see, and one tolerance that admits a trap's figure, are declared below with
the figures that show it (the design is frozen, so they are recorded, not changed).
"""

from __future__ import annotations

from pathlib import Path

import openpyxl
import pytest

from pilot.oracle_formats.evaluate import evaluate_many
from pilot.oracles import Recalculator
from pilot.protocol import study
from pilot.protocol.scenario import FallenEdit, Trap, load_scenario
from pilot.scenario_kit import traps
from pilot.scenario_kit.readings import NUMERIC_KINDS, read_package
from pilot.scenarios import build_gold_workspace

pytestmark = pytest.mark.usefixtures("soffice")


def cell(file: str, sheet: str, ref: str, value: object) -> FallenEdit:
    return FallenEdit("cell", file, {"sheet": sheet, "cell": ref, "value": value})


def text(file: str, old: str, new: str) -> FallenEdit:
    return FallenEdit("text", file, {"text": old, "becomes": new})


def csv_cell(file: str, key: str, key_value: str, column: str, value: str) -> FallenEdit:
    return FallenEdit("csv", file, {"key": key, "key_value": key_value, "column": column, "value": value})


ACC_BOOK, ACC_MEMO = "bank_reconciliation_2026-10.xlsx", "reconciliation_memo.docx"
BANK_BOOK = "credit_analysis.xlsx"
ENG_BOOK = "bom_cost_rollup.xlsx"
HEALTH_REPORT = "clinic_access_report_2026-10.pdf"
HR_BOOK = "merit_increases_2027.xlsx"
LEGAL_MEMO, LEGAL_LOG = "msa_review_memo.docx", "issues_log.csv"
MKT_BOOK, MKT_NOTE = "campaign_performance_q3.xlsx", "q4_budget_recommendation.docx"
OPS_PLAN = "reorder_plan.csv"
PROC_BOOK = "bid_evaluation.xlsx"
RES_BOOK, RES_NOTE = "survey_results.xlsx", "research_note.docx"


def _clear_row(file: str, sheet: str, row: int, columns: str) -> list[FallenEdit]:
    return [cell(file, sheet, f"{c}{row}", None) for c in columns]


def _scored(row: int) -> list[FallenEdit]:
    """PROC-01: a bid admitted to scoring, with the same formulas as the compliant rows."""
    return [
        cell(PROC_BOOK, "Evaluation", f"E{row}", "Yes"),
        cell(PROC_BOOK, "Evaluation", f"F{row}", f'=50*_xlfn.MINIFS($B$2:$B$6,$E$2:$E$6,"Yes")/B{row}'),
        cell(PROC_BOOK, "Evaluation", f"G{row}", f'=30*_xlfn.MINIFS($C$2:$C$6,$E$2:$E$6,"Yes")/C{row}'),
        cell(PROC_BOOK, "Evaluation", f"H{row}", f'=20*_xlfn.MINIFS($D$2:$D$6,$E$2:$E$6,"Yes")/D{row}'),
        cell(PROC_BOOK, "Evaluation", f"I{row}", f"=F{row}+G{row}+H{row}"),
    ]


def _res_record_kept(respondent: str, region: str, tenure: float, satisfaction: int, workload: int, recommend: str):
    """RES-01: the record the codebook excludes kept as row 241 of Data, every Summary range taken to row 241."""
    edits = [
        cell(RES_BOOK, "Data", f"{col}241", value)
        for col, value in zip("ABCDEF", [respondent, region, tenure, satisfaction, workload, recommend], strict=True)
    ]
    # The gold's Summary formulas read Data rows 2 to 240 (B3:B6 and the regional table B9:D13).
    for ref in ["B3", "B4", "B5", "B6", *[f"{c}{r}" for r in range(9, 14) for c in "BCD"]]:
        edits.append(
            FallenEdit("cell", RES_BOOK, {"sheet": "Summary", "cell": ref, "value": "=from-gold", "range": 241})
        )
    return edits


#: Scenario -> its prose traps, each with the edits of its fallen package and the criteria that must catch it.
TRAPS: dict[str, list[Trap]] = {
    "ACC-01": [
        # Cheque 10448 booked at 1,254.00, paid at 1,524.00: no correcting entry. Ledger adjustments -1,391.83 instead
        # of -1,661.83, so the adjusted ledger is 183,423.53 and the difference -270.00; the memo never names the
        # cheque or the 270.00.
        Trap(
            "transposed_cheque",
            "cheque 10448 posted at 1,254.00 but paid at 1,524.00",
            ("recon_adjusted_ledger", "recon_difference_nil", "memo_names_items", "memo_states_transposition"),
            (
                *_clear_row(ACC_BOOK, "Adjustments", 6, "ABCDEF"),
                text(
                    ACC_MEMO,
                    "Cheque 10448 was posted in the ledger (JE-2026-10-0147) at 1,254.00, while the bank paid "
                    "1,524.00, the amount of the supplier's invoice. This is a transposition error of 270.00 in the "
                    "ledger.",
                    "",
                ),
                text(
                    ACC_MEMO,
                    "Correct the posting of the transposed cheque by a further credit to cash of 270.00 against "
                    "accounts payable. ",
                    "",
                ),
            ),
        ),
        # Vesta Agritech's returned cheque (NSF, 1,360.00) left in cash: the adjusted ledger is 184,513.53 and the
        # difference -1,360.00; the memo never mentions the returned cheque or Vesta.
        Trap(
            "returned_cheque",
            "a customer cheque of 1,360.00 returned unpaid (NSF) and not charged back",
            ("recon_adjusted_ledger", "recon_difference_nil", "memo_names_items"),
            (
                *_clear_row(ACC_BOOK, "Adjustments", 5, "ABCDEF"),
                text(
                    ACC_MEMO,
                    "The bank also returned a Vesta Agritech cheque of 1,360.00 unpaid (NSF) on 14 October; the "
                    "receipt was booked on 8 October and has not been reversed.",
                    "",
                ),
                text(
                    ACC_MEMO,
                    "Reverse the returned Vesta Agritech receipt against accounts receivable so that collections can "
                    "pursue it. ",
                    "",
                ),
                text(
                    ACC_MEMO,
                    "Ask Accounts Receivable to contact Vesta Agritech about the returned cheque and to put the "
                    "account on hold until it is replaced. ",
                    "",
                ),
            ),
        ),
    ],
    "BANK-01": [
        # The one-off settlement not added back: adjusted EBITDA 810,000, DSCR ROUND(810,000 / 833,197.31, 2) = 0.97,
        # debt / EBITDA ROUND(3,250,000 / 810,000, 2) = 4.01.
        Trap(
            "one_off_addback",
            "the one-off supplier settlement of note 1 not added back under policy 4.2",
            ("analysis_adjusted_ebitda", "analysis_dscr", "analysis_leverage"),
            (cell(BANK_BOOK, "Financials", "D9", 0),),
        ),
        # The existing term debt's service left out: total 438,197.31 and DSCR ROUND(960,000 / 438,197.31, 2) = 2.19.
        Trap(
            "existing_debt_service",
            "the existing Northshore loan's 395,000 a year left out of total debt service",
            ("analysis_total_debt_service", "analysis_dscr"),
            (cell(BANK_BOOK, "Ratios", "B8", "=B6"),),
        ),
    ],
    "ENG-01": [
        # The superseded seal kit M-2231 at 96.00 USD costed instead of ECN-118's M-2290 at 131.50: no M-2290 line, and
        # the total falls by (131.50 - 96.00) x 1.38 = 48.99 to 2,935.62.
        Trap(
            "ecn_not_applied",
            "ECN-118 replaces seal kit M-2231 by M-2290",
            ("rollup_ecn_applied", "rollup_total"),
            (
                cell(ENG_BOOK, "Rollup", "A8", "M-2231"),
                cell(ENG_BOOK, "Rollup", "B8", "Mechanical seal kit 38mm (carbon/ceramic)"),
                cell(ENG_BOOK, "Rollup", "E8", 96),
            ),
        ),
        # Quantities per parent not multiplied down the levels: 4 bolts and 4 nuts per flange, not 8 per pump. The
        # bolts' line is 11.40 instead of 22.80, and the total falls by 11.40 + 3.80.
        Trap(
            "quantities_not_extended",
            "quantities per parent multiplied down every level of the bill",
            ("rollup_bolts_extended", "rollup_total"),
            (cell(ENG_BOOK, "Rollup", "D3", 4), cell(ENG_BOOK, "Rollup", "D4", 4)),
        ),
    ],
    "HEALTH-01": [
        # Cancellations kept in the no-show base: 9.6 % instead of 10.1 %.
        Trap(
            "cancellations_kept",
            "the no-show rate counts no-shows against attended and missed appointments only",
            ("report_no_show_rate",),
            (
                text(HEALTH_REPORT, "10.1%", "9.6%"),
                text(
                    HEALTH_REPORT,
                    "the no-show rate counts no-shows against appointments that were attended or missed; "
                    "cancellations are left out of both.",
                    "the no-show rate counts no-shows against every appointment booked.",
                ),
            ),
        ),
        # The median waits reported without comparing them with the target: Hillcrest is never said to miss it.
        Trap(
            "clinic_over_target",
            "Hillcrest's median wait of 30 minutes misses the 20-minute target",
            ("report_names_clinics_over_target",),
            (
                text(
                    HEALTH_REPORT,
                    "Three clinics met the 20-minute waiting-time target; Hillcrest did not",
                    "Waiting times differed between the clinics; Hillcrest had the longest",
                ),
                text(
                    HEALTH_REPORT,
                    "Hillcrest's median of 30 minutes is more than one and a half times the target.",
                    "Hillcrest's median was 30 minutes.",
                ),
            ),
        ),
    ],
    "HR-01": [
        # Band minimums ignored (every minimum 0): E-1017, E-1042 and E-1045 keep their merit salaries, so the count
        # raised to the minimum is 0 and both the cost of increases and the 2027 payroll fall (by thousands).
        Trap(
            "band_minimum",
            "salaries below the band minimum are raised to it",
            ("book_raised_to_minimum", "book_total_cost", "book_payroll_2027"),
            tuple(cell(HR_BOOK, "Bands", f"B{r}", 0) for r in range(2, 6)),
        ),
        # E-1023, hired 3 August 2026, given merit: rating 4, 3.5 % of 55,000 = 1,925 more.
        Trap(
            "late_hire_merit",
            "staff hired on or after 1 July 2026 get no merit increase",
            ("book_total_cost", "book_payroll_2027"),
            (cell(HR_BOOK, "Increases", "G24", "Yes"),),
        ),
    ],
    "LEGAL-01": [
        # The 8.2 / Schedule B conflict missed: no row for it (nor for clause 1.2, which makes the Schedule prevail) in
        # the log, and the memo reads clause 8.2 alone (as long as the gold: the brief asks for 450 words).
        Trap(
            "termination_conflict",
            "clause 8.2 and Schedule B paragraph 4 conflict, and clause 1.2 makes the Schedule prevail",
            ("memo_finds_conflict", "log_clauses"),
            (
                text(
                    LEGAL_LOG,
                    "8.2 / Schedule B para 4,\"Termination for convenience conflicts: clause 8.2 allows 30 days' "
                    "notice without penalty, Schedule B para 4 requires 180 days and all remaining fees; under clause "
                    '1.2 the Schedule prevails.",High,"Delete Schedule B para 4 (or align it with 8.2) and amend '
                    "clause 1.2 so the body prevails over the Schedules; notice of no more than 90 days, no payment "
                    'beyond services delivered."\n9.4,',
                    "9.4,",
                ),
                text(
                    LEGAL_LOG,
                    '1.2,"Order of precedence lets the Schedules override the body of the agreement, which is how '
                    'Schedule B para 4 defeats clause 8.2.",Medium,Reverse the order of precedence: the body prevails '
                    "unless a Schedule expressly amends a named clause.",
                    "",
                ),
                text(
                    LEGAL_MEMO,
                    "Termination for convenience (clause 8.2 and Schedule B paragraph 4). Clause 8.2 lets Corvane "
                    "terminate on 30 days' notice without penalty, which is within our playbook. Schedule B paragraph "
                    "4 says the opposite: 180 days' notice and payment of all fees for the rest of the term. Because "
                    "clause 1.2 makes the Schedules prevail over the body, the Schedule B version would govern, and "
                    "leaving early in year one would cost close to three years of fees. Risk: high.",
                    "Termination for convenience (clause 8.2). Clause 8.2 lets Corvane terminate on 30 days' notice "
                    "without penalty, which is within our playbook, and the other termination rights are standard for "
                    "an agreement of this kind. Risk: low.",
                ),
                text(
                    LEGAL_MEMO,
                    "Delete Schedule B paragraph 4 or align it with clause 8.2, and reverse clause 1.2 so that the "
                    "body prevails unless a Schedule expressly amends a named clause. ",
                    "",
                ),
            ),
        ),
        # The three-month liability cap rated Medium in the log.
        Trap(
            "liability_cap",
            "a liability cap of three months' fees, a quarter of the playbook minimum",
            ("log_rates_liability_cap_high",),
            (csv_cell(LEGAL_LOG, "clause", "11.1", "risk_rating", "Medium"),),
        ),
    ],
    "MKT-01": [
        # Week 9's Paid Social conversions and revenue kept doubled (85 -> 170, 43,068.36 -> 86,136.72): Paid Social's
        # revenue is 216,856.13 and its ROAS 216,856.13 / 44,621.62 = 4.86; the note never mentions the incident (its
        # sentence about the data is another of the same length: the brief asks for 300 words).
        Trap(
            "duplicated_conversions",
            "week 9's Paid Social conversions and revenue recorded twice",
            ("book_paid_social_roas", "note_names_incident", "note_states_corrected_roas"),
            (
                cell(MKT_BOOK, "Data (corrected)", "F43", 170),
                cell(MKT_BOOK, "Data (corrected)", "G43", 86136.72),
                cell(MKT_BOOK, "Data (corrected)", "H43", None),
                text(
                    MKT_NOTE,
                    " The campaign export overstates Paid Social: incident note MA-2026-031 records that in week 9 "
                    "every Paid Social conversion fired twice, so week-9 conversions and revenue for that channel "
                    "were halved before any figure in this note was computed.",
                    " The channel figures below are taken from the campaign export as it was delivered, week by week, "
                    "for the thirteen weeks of the quarter, and every figure in this note is computed from them in the "
                    "workbook, so each can be traced to its week and channel.",
                ),
                text(
                    MKT_NOTE,
                    "Paid Social | 44,621.62 | 173,787.77 | 3.89",
                    "Paid Social | 44,621.62 | 216,856.13 | 4.86",
                ),
                text(
                    MKT_NOTE,
                    "On the uncorrected export Paid Social would show a ROAS of 4.86 and look like our strongest paid "
                    "channel. Corrected, its ROAS is 3.89, behind Email and Search.",
                    "Paid Social shows a ROAS of 4.86, our strongest paid channel after Email.",
                ),
            ),
        ),
    ],
    "OPS-01": [
        # Discontinued HW-1420 ordered like any SKU at its reorder point: 13-week demand 483, 37.15 a week; reorder
        # point 37.15 x 3 = 111.46; 3 on hand; (111.46 + 4 x 37.15 - 3) / 24 rounds up to 11 cases, 264.
        Trap(
            "discontinued_sku",
            "HW-1420 is discontinued and never reordered",
            ("plan_skus",),
            (
                text(
                    OPS_PLAN,
                    "HW-1690,LED work light 20W,S-04,343,0,90.15,450.77,470",
                    "HW-1690,LED work light 20W,S-04,343,0,90.15,450.77,470\n"
                    "HW-1420,Hinge 75mm steel (legacy),S-01,3,0,37.15,111.46,264",
                ),
            ),
        ),
        # HW-1180's on-hand of -12 kept as -12: the order-up-to level 814.77 less -12 is 826.77, which rounds up to
        # the same 17 cases of 50 as 814.77: the order is 850 either way, and only the plan's on_hand column differs.
        Trap(
            "negative_on_hand",
            "HW-1180's negative on-hand counts as zero",
            (),
            (csv_cell(OPS_PLAN, "sku", "HW-1180", "on_hand", "-12"),),
        ),
    ],
    "PROC-01": [
        # Apex scored though its ISO 9001 certificate expired: the best compliant price becomes Apex's 1.842, so
        # Northwind's price score is 50 x 1.842 / 1.967 and Ridgeway's 50 x 1.842 / 2.034. Apex scores 50 + 14.29 +
        # 6.13 = 70.4, below Northwind's 82.38: the recommendation and the contract value stand.
        Trap(
            "expired_certificate",
            "Apex's ISO 9001 certificate expired before the award date",
            ("eval_northwind_total", "eval_ridgeway_total"),
            tuple(_scored(2)),
        ),
        # Brennan's late quotation scored: best price 1.905; Brennan 50 + 30 x 10 / 14 + 20 x 95 / 150 = 84.10 beats
        # Northwind's 48.42 + 25.00 + 10.56 = 83.98, so the careless evaluation recommends Brennan at 1.905 x 120,000.
        Trap(
            "late_quotation",
            "Brennan's quotation arrived after the deadline",
            ("eval_northwind_total", "eval_ridgeway_total", "eval_recommends_winner", "eval_contract_value"),
            (
                *_scored(3),
                cell(PROC_BOOK, "Evaluation", "B8", "Brennan Tool & Supply"),
                cell(PROC_BOOK, "Evaluation", "B10", "=B3*B9"),
            ),
        ),
    ],
    "RES-01": [
        # R-0088's second submission kept (West, satisfaction 4): 240 responses; the overall mean
        # ROUND((1,158 + 4) / 240, 2) = 4.84; West's mean ROUND((275 + 4) / 67, 2) = 4.16, 0.0067 from 4.1667.
        Trap(
            "duplicate_kept",
            "R-0088 submitted twice; the first submission is kept",
            ("results_n", "results_west_mean", "note_names_cleaning"),
            (
                *_res_record_kept("R-0088", "West", 6.6, 4, 7, "no"),
                text(
                    RES_NOTE,
                    "Respondent R-0088 submitted twice; following rule RI-4 the first submission was kept. ",
                    "Each record of the file was taken as one response, as the file holds it. ",
                ),
            ),
        ),
        # R-0173's satisfaction of 77 kept (Central): 240 responses, the overall mean ROUND((1,158 + 77) / 240, 2) =
        # 5.15, which the note states.
        Trap(
            "out_of_range_kept",
            "R-0173's satisfaction of 77 is outside the 1-7 scale and is excluded",
            ("results_n", "results_overall_mean", "note_names_cleaning", "note_states_overall_mean"),
            (
                *_res_record_kept("R-0173", "Central", 3.6, 77, 4, "yes"),
                text(
                    RES_NOTE,
                    "Respondent R-0173 has a satisfaction score of 77, outside the 1-7 scale, which is a recording "
                    "error; that response was excluded from every analysis. ",
                    "Each satisfaction score was taken as it is recorded in the file, and every response was included "
                    "in the analysis that follows. ",
                ),
                text(RES_NOTE, "Overall mean satisfaction is 4.85", "Overall mean satisfaction is 5.15"),
            ),
        ),
    ],
}

#: Prose traps whose fallen package the oracle accepts: the trap, and why (worked out by hand).
UNSEEN = {
    ("OPS-01", "negative_on_hand"): "the order quantity is 850 whether -12 counts as zero or not",
}
#: Tolerances that admit a figure of a fallen package the gold does not state: (scenario, criterion, trap) -> the
#: figure. The trap is still caught, by another criterion.
ADMITTED = {
    # 4.84 is within 0.006 of 4.8452; the gold states 4.85. results_n catches the trap.
    ("RES-01", "results_overall_mean", "duplicate_kept"): "4.84",
}


def _resolve(edit: FallenEdit, gold: Path) -> FallenEdit:
    """A RES-01 Summary formula taken from the gold with its Data range ending at row ``range`` instead of 240."""
    if edit.get("value") != "=from-gold":
        return edit
    wb = openpyxl.load_workbook(gold / "outputs" / edit.file)
    formula = wb[edit.get("sheet")][edit.get("cell")].value
    assert "240" in formula, formula
    return FallenEdit(
        "cell",
        edit.file,
        {"sheet": edit.get("sheet"), "cell": edit.get("cell"), "value": formula.replace("240", str(edit.get("range")))},
    )


def test_the_ten_are_the_designs_and_each_has_its_traps():
    assert sorted(TRAPS) == sorted(study().scenario_set("pilot"))
    for sid, declared in TRAPS.items():
        sc = load_scenario(sid)
        assert not sc.oracle.traps, f"{sid}'s oracle.yml is frozen; its traps are declared here"
        for trap in declared:
            assert set(trap.caught_by) <= {c.id for c in sc.oracle.criteria}, (sid, trap.id)
            assert traps.catcher_problems(sc, trap) == [], (sid, trap.id)


@pytest.fixture(scope="module")
def fallen(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], traps.Fallen]:
    root = tmp_path_factory.mktemp("fallen-design")
    items, made, golds = [], {}, {}
    for sid, declared in TRAPS.items():
        sc = load_scenario(sid)
        golds[sid] = build_gold_workspace(sc, root / sid / "gold")
        items.append((sc, golds[sid], None))
        for trap in declared:
            resolved = Trap(
                trap.id, trap.description, trap.caught_by, tuple(_resolve(e, golds[sid]) for e in trap.fallen)
            )
            f = traps.build_fallen(sc, resolved, golds[sid], root / sid / trap.id)
            assert f.workspace is not None, f.made
            made[(sid, trap.id)] = f
            items.append((sc, f.workspace, None))
    with Recalculator(root / "recalc") as r:
        evaluations = evaluate_many(items, recalculator=r)
        it = iter(evaluations)
        out: dict = {}
        for sid, declared in TRAPS.items():
            gold_ev = next(it)
            assert gold_ev.D and not gold_ev.failed, (sid, [c.reason for c in gold_ev.failed])
            for trap in declared:
                made[(sid, trap.id)].evaluation = next(it)
            sc = load_scenario(sid)
            numeric = [c for c in sc.oracle.criteria if c.kind in NUMERIC_KINDS]
            out[sid] = (golds[sid], read_package(sc, golds[sid], numeric, r))
        reads = {
            key: read_package(
                load_scenario(key[0]),
                f.workspace,
                [c for c in load_scenario(key[0]).oracle.criteria if c.kind in NUMERIC_KINDS],
                r,
            )
            for key, f in made.items()
        }
    return {"fallen": made, "gold_reads": {sid: v[1] for sid, v in out.items()}, "reads": reads}


CASES = [(sid, trap) for sid, declared in TRAPS.items() for trap in declared]


@pytest.mark.parametrize(("sid", "trap"), CASES, ids=[f"{sid}:{trap.id}" for sid, trap in CASES])
def test_each_trap_is_caught_exactly_by_its_criteria(fallen: dict, sid: str, trap: Trap):
    f = fallen["fallen"][(sid, trap.id)]
    if (sid, trap.id) in UNSEEN:
        # The oracle accepts this fallen package: a limit of the frozen design, recorded.
        assert f.evaluation.D and not f.evaluation.failed, [c.reason for c in f.evaluation.failed]
        return
    problems, _ = traps.fallen_problems(trap, f)
    assert problems == [], problems


@pytest.mark.parametrize("sid", list(TRAPS))
def test_no_tolerance_admits_a_fallen_figure_beyond_those_recorded(fallen: dict, sid: str):
    sc = load_scenario(sid)
    admitted = {}
    for c in sc.oracle.criteria:
        if c.kind not in NUMERIC_KINDS:
            continue
        for trap in TRAPS[sid]:
            f = fallen["fallen"][(sid, trap.id)]
            row = traps.numeric_probe(
                sc, c, fallen["gold_reads"][sid][c.id], [(f, fallen["reads"][(sid, trap.id)][c.id])]
            )
            if not row.ok:
                admitted[(sid, c.id, trap.id)] = row.reason
    assert set(admitted) == {k for k in ADMITTED if k[0] == sid}, admitted
    for key, reason in admitted.items():
        assert f"admits {ADMITTED[key]}," in reason, reason
