"""The text-only checks of ``pilot scenarios check``: every real bundle passes them, and each planted break fails.

A break is planted in a copy of a real bundle (it keeps its id, so its caps still match study.yml) and the copy
is loaded as the loader loads any bundle; the gold workspaces of the real bundles are built once per module.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pilot import paths
from pilot.judges.render import RenderLimits
from pilot.protocol import design
from pilot.protocol.prices import PRICES_FILE, PriceTable
from pilot.protocol.scenario import Scenario, list_scenarios, load_scenario, load_scenario_from
from pilot.scenario_kit.consistency import CHECK_BLINDING, CHECK_BRIEF, brief_oracle_rubric, judge_blinding
from pilot.scenario_kit.report import CheckRow
from pilot.scenarios import build_gold_workspace

IDS = list_scenarios()


@pytest.fixture(scope="module")
def golds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every real bundle's gold workspace, built once."""
    root = tmp_path_factory.mktemp("gold")
    return {sid: build_gold_workspace(load_scenario(sid), root / sid) for sid in IDS}


def _copy(tmp_path: Path, sid: str, **edits: Callable[[str], str]) -> Path:
    """A copy of bundle ``sid`` under ``tmp_path/sid``, each named file edited by its function."""
    dst = tmp_path / sid
    shutil.copytree(paths.SCENARIOS_DIR / sid, dst)
    for name, edit in edits.items():
        f = dst / f"{name}.{'md' if name == 'brief' else 'yml'}"
        text = f.read_text(encoding="utf-8")
        changed = edit(text)
        assert changed != text, f"the planted edit of {f.name} changed nothing"
        f.write_text(changed, encoding="utf-8")
    return dst


def _planted(tmp_path: Path, sid: str, **edits: Callable[[str], str]) -> Scenario:
    return load_scenario_from(_copy(tmp_path, sid, **edits), design.study())


def _replace(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert text.count(old) == 1, f"{old!r} is not in the file exactly once"
        return text.replace(old, new)

    return edit


def _failing(rows: list[CheckRow], check: str, *words: str) -> list[CheckRow]:
    """The failing rows of ``check`` whose reason names every one of ``words``; asserts there is one."""
    assert {r.check for r in rows} == {check}
    hits = [r for r in rows if not r.ok and all(w in r.reason for w in words)]
    assert hits, f"no failing {check} row names {words}; rows: {[(r.verdict, r.reason) for r in rows]}"
    return hits


def _passes(rows: list[CheckRow], check: str) -> None:
    assert [(r.check, r.ok) for r in rows] == [(check, True)], [(r.verdict, r.reason) for r in rows]
    assert rows[0].reason


def test_every_bundle_of_every_set_is_checked():
    # Every scenario set's bundles are here, and the design's own set is the preregistered ten.
    st = design.study()
    assert set(IDS) == {sid for ids in st.scenario_sets.values() for sid in ids}
    assert len(st.scenario_set()) == int(st.raw["design"]["n_scenarios"]) == 10


# ---------------------------------------------------------------- the real bundles pass


@pytest.mark.parametrize("sid", IDS)
def test_brief_oracle_rubric_passes_on_every_bundle(sid: str):
    rows = brief_oracle_rubric(load_scenario(sid))
    _passes(rows, CHECK_BRIEF)
    assert rows[0].scenario == sid


@pytest.mark.parametrize("sid", IDS)
def test_judge_blinding_passes_on_every_bundle(sid: str, golds: dict[str, Path]):
    rows = judge_blinding(load_scenario(sid), golds[sid])
    _passes(rows, CHECK_BLINDING)
    assert rows[0].scenario == sid and "bound 1,000,000" in rows[0].reason


def test_an_unedited_copy_passes_both(tmp_path: Path, golds: dict[str, Path]):
    sc = _planted(tmp_path, "HR-01", brief=lambda t: t + "\n")
    _passes(brief_oracle_rubric(sc), CHECK_BRIEF)
    _passes(judge_blinding(sc, golds["HR-01"]), CHECK_BLINDING)


# ---------------------------------------------------------------- brief, oracle and rubric


def test_a_deliverable_renamed_in_the_brief_fails(tmp_path: Path):
    # The loader only asks that the name occur somewhere in the brief, which a longer name still satisfies.
    sc = _planted(
        tmp_path, "HR-01", brief=_replace("**`merit_increases_2027.xlsx`**", "**`final_merit_increases_2027.xlsx`**")
    )
    rows = brief_oracle_rubric(sc)
    _failing(
        rows,
        CHECK_BRIEF,
        "brief.md does not name the deliverable merit_increases_2027.xlsx",
        "exact file name",
        "oracle criteria book_present",
        "book_total_cost",
        "final_merit_increases_2027.xlsx instead",
    )
    _failing(rows, CHECK_BRIEF, "final_merit_increases_2027.xlsx, which is neither a deliverable of scenario.yml")


def test_a_file_the_brief_asks_for_that_is_no_deliverable_fails(tmp_path: Path):
    sc = _planted(
        tmp_path,
        "HR-01",
        brief=_replace(
            "2. **`completion_record.json`**",
            "2. **`merit_letters.docx`** — a Word letter to each employee.\n3. **`completion_record.json`**",
        ),
    )
    _failing(
        brief_oracle_rubric(sc),
        CHECK_BRIEF,
        "brief.md (line",
        "merit_letters.docx",
        "neither a deliverable of scenario.yml",
    )


def test_a_deliverable_described_in_another_format_fails(tmp_path: Path):
    sc = _planted(
        tmp_path, "ENG-01", brief=_replace("an Excel workbook whose costs are formulas", "a PDF whose costs are stated")
    )
    _failing(brief_oracle_rubric(sc), CHECK_BRIEF, "bom_cost_rollup.xlsx as pdf", "deliverable of kind xlsx")


def test_a_sheet_the_oracle_reads_that_the_brief_does_not_ask_for_fails(tmp_path: Path):
    sc = _planted(tmp_path, "HR-01", brief=_replace("a sheet named\n   `Summary`", "a sheet named\n   `Totals`"))
    _failing(
        brief_oracle_rubric(sc),
        CHECK_BRIEF,
        "brief.md's entry for merit_increases_2027.xlsx does not ask for the sheet 'Summary'",
        "book_payroll_2026, book_total_cost",
    )


def test_a_label_asked_for_only_outside_its_files_entry_or_in_the_plural_fails(tmp_path: Path):
    # HR-01's Summary line "Total cost of increases" dropped from the workbook's entry; the words stay elsewhere in
    # the brief, in the plural, which the check once took for the line.
    sc = _planted(
        tmp_path,
        "HR-01",
        brief=lambda t: (
            _replace("   - Total cost of increases\n", "")(t) + "\nTotal costs of increases matter to Finance.\n"
        ),
    )
    _failing(
        brief_oracle_rubric(sc),
        CHECK_BRIEF,
        "brief.md's entry for merit_increases_2027.xlsx does not ask for the line /total cost of increases/",
        "book_total_cost",
    )


def test_a_text_criterion_needs_the_words_of_its_files_entry_that_ask_for_it(tmp_path: Path):
    # PAY-01 declares its traps, so its text criteria say what the brief asks (brief_asks); without it, or with
    # words its file's entry does not hold, the check fails naming the criterion.
    dropped = _planted(
        tmp_path / "a",
        "PAY-01",
        oracle=_replace(", brief_asks: 'the amount in the draft, the correct amount and why'", ""),
    )
    _failing(
        brief_oracle_rubric(dropped),
        CHECK_BRIEF,
        "oracle criterion memo_explains_overtime (text_contains) reads variance_memo.docx",
        "give it brief_asks",
    )
    elsewhere = _planted(
        tmp_path / "b",
        "PAY-01",
        oracle=_replace(
            "brief_asks: 'the amount in the draft, the correct amount and why'", "brief_asks: 'pay policy'"
        ),
    )
    _failing(
        brief_oracle_rubric(elsewhere),
        CHECK_BRIEF,
        "brief.md's entry for variance_memo.docx does not ask for /pay policy/ (its brief_asks)",
        "memo_explains_overtime",
    )


def test_a_brief_sentence_naming_a_traps_answer_fails_unless_the_trap_confirms_it(tmp_path: Path):
    # PAY-01's repeated timesheet line: the sentence names Wrobel's keying slip as 7.45 for 7.75, the two patterns
    # memo_explains_overtime reads, so it gives the overtime trap away.
    said = "Note that Tomasz Wrobel's 7:45 of overtime was keyed as 7.45 hours."
    sc = _planted(
        tmp_path / "a", "PAY-01", brief=_replace("Gross pay in pounds to the penny, before deductions.", said)
    )
    _failing(brief_oracle_rubric(sc), CHECK_BRIEF, "names the answer of trap overtime_hh_mm", "memo_explains_overtime")
    confirmed = _planted(
        tmp_path / "b",
        "PAY-01",
        brief=_replace("Gross pay in pounds to the penny, before deductions.", said),
        oracle=_replace(
            "caught_by: [book_wrobel_corrected,",
            "brief_names: ['was keyed as 7.45 hours']\n    caught_by: [book_wrobel_corrected,",
        ),
    )
    _passes(brief_oracle_rubric(confirmed), CHECK_BRIEF)
    stale = _planted(
        tmp_path / "c",
        "PAY-01",
        oracle=_replace(
            "caught_by: [book_wrobel_corrected,",
            "brief_names: ['was keyed as 7.45 hours']\n    caught_by: [book_wrobel_corrected,",
        ),
    )
    _failing(
        brief_oracle_rubric(stale),
        CHECK_BRIEF,
        "confirms 'was keyed as 7.45 hours', which no sentence of brief.md holds",
    )


def test_rubric_weights_summing_to_0_99_fail(tmp_path: Path):
    sc = _planted(tmp_path, "HR-01", rubric=_replace("weight: 0.15", "weight: 0.14"))
    _failing(brief_oracle_rubric(sc), CHECK_BRIEF, "rubric.yml weights sum to 0.99, not 1", "instructions 0.14")


def test_a_dropped_anchor_2_fails(tmp_path: Path):
    # The loader refuses a rubric without anchor 2, so the copy is loaded first and broken on disk after:
    # the check reads rubric.yml as it stands.
    sc = _planted(tmp_path, "HR-01")
    rubric = sc.rubric.path
    rubric.write_text(
        _replace("      2: Totals present but off by an unexplained amount.\n", "")(rubric.read_text(encoding="utf-8")),
        encoding="utf-8",
    )
    _failing(brief_oracle_rubric(sc), CHECK_BRIEF, "rubric.yml criterion totals has no anchor 2")


def test_a_blank_anchor_fails_both_checks(tmp_path: Path, golds: dict[str, Path]):
    # A blank anchor passes the loader's schema (one character) but not the judges' rubric.
    sc = _planted(tmp_path, "HR-01", rubric=_replace("2: Minor departures.", '2: " "'))
    _failing(brief_oracle_rubric(sc), CHECK_BRIEF, "rubric.yml criterion instructions anchor 2 has no text")
    _failing(
        judge_blinding(sc, golds["HR-01"]), CHECK_BLINDING, "the judges cannot use rubric.yml", "missing anchor text"
    )


# ---------------------------------------------------------------- judge blinding


def test_an_expected_value_the_gold_does_not_state_in_a_rubric_anchor_fails(tmp_path: Path, golds: dict[str, Path]):
    # The gold workbook computes 76,976 by formula and holds no cached value, so the judges would learn it only here.
    sc = _planted(
        tmp_path,
        "HR-01",
        rubric=_replace(
            "4: Totals tie exactly to the rows.", "4: Totals tie exactly to the rows (increases of 76,976 in all)."
        ),
    )
    _failing(
        judge_blinding(sc, golds["HR-01"]),
        CHECK_BLINDING,
        "rubric.yml criterion totals anchor 4 shows 76,976",
        "expected value of oracle criterion book_total_cost",
        "gold deliverables do not state",
    )


def test_an_expected_value_in_the_brief_fails(tmp_path: Path, golds: dict[str, Path]):
    sc = _planted(
        tmp_path,
        "ENG-01",
        brief=_replace("Costs to the cent, please.", "Costs to the cent, please: last year's total was 2,984.61."),
    )
    _failing(
        judge_blinding(sc, golds["ENG-01"]),
        CHECK_BLINDING,
        "brief.md line",
        "2,984.61",
        "oracle criterion rollup_total",
    )


def test_an_expected_value_the_gold_states_is_fair(tmp_path: Path, golds: dict[str, Path]):
    # reorder_plan.csv orders 850 of HW-1180: the judges see the number in the package anyway.
    sc = _planted(
        tmp_path, "OPS-01", rubric=_replace("4: Every quantity right.", "4: Every quantity right (850 of HW-1180).")
    )
    _passes(judge_blinding(sc, golds["OPS-01"]), CHECK_BLINDING)


def test_a_planted_fact_of_the_header_comment_in_the_rubric_fails(tmp_path: Path, golds: dict[str, Path]):
    # HEALTH-01's header names 9.6% as the rate with cancellations wrongly kept; the gold never states it.
    sc = _planted(
        tmp_path,
        "HEALTH-01",
        rubric=_replace("(cancellations kept or clock errors included)", "(cancellations kept, giving 9.6%)"),
    )
    _failing(
        judge_blinding(sc, golds["HEALTH-01"]),
        CHECK_BLINDING,
        "rubric.yml criterion measures anchor 2 shows 9.6",
        "planted fact of oracle.yml's header comment",
    )


def test_an_oracle_criterion_id_in_the_brief_fails(tmp_path: Path, golds: dict[str, Path]):
    sc = _planted(
        tmp_path, "HR-01", brief=_replace("Apply them exactly.", "Apply them exactly (book_raised_to_minimum).")
    )
    _failing(
        judge_blinding(sc, golds["HR-01"]),
        CHECK_BLINDING,
        "brief.md line",
        "oracle criterion id 'book_raised_to_minimum'",
    )


def test_an_oracle_label_pattern_in_the_rubric_fails(tmp_path: Path, golds: dict[str, Path]):
    pattern = "(employees )?raised to (the )?band minimum"
    sc = _planted(
        tmp_path,
        "HR-01",
        rubric=_replace(
            "description: Payroll totals and the cost of increases tie to the rows.",
            f"description: 'Payroll totals and the cost of increases tie to the rows; a line {pattern}.'",
        ),
    )
    _failing(
        judge_blinding(sc, golds["HR-01"]),
        CHECK_BLINDING,
        "rubric.yml criterion totals description",
        "label pattern of oracle criterion book_raised_to_minimum",
        pattern,
    )


def test_an_oracle_regex_in_the_brief_fails(tmp_path: Path, golds: dict[str, Path]):
    pattern = r"clock|earlier than (the )?arrival|before (the )?arrival"
    sc = _planted(tmp_path, "HEALTH-01", brief=_replace("plain language,", f"plain language ({pattern}),"))
    _failing(
        judge_blinding(sc, golds["HEALTH-01"]),
        CHECK_BLINDING,
        "brief.md",
        "text pattern of oracle criterion report_clock_errors",
    )


def test_an_oracle_description_in_the_rubric_fails(tmp_path: Path, golds: dict[str, Path]):
    sc = _planted(
        tmp_path,
        "HEALTH-01",
        rubric=_replace(
            "0: Target breach not identified.",
            "0: Target breach not identified; nor names Hillcrest and states its median wait.",
        ),
    )
    _failing(
        judge_blinding(sc, golds["HEALTH-01"]),
        CHECK_BLINDING,
        "rubric.yml criterion target anchor 0",
        "description of oracle criterion report_hillcrest_median",
    )


def test_a_line_of_the_oracle_copied_into_the_rubric_fails(tmp_path: Path, golds: dict[str, Path]):
    line = "maximum; E-1023 and E-1045 hired after 1 July 2026 (no merit). Total cost"
    sc = _planted(
        tmp_path,
        "HR-01",
        rubric=_replace(
            "applied to every employee in the right order.",
            f"applied to every employee in the right order, cap at the {line} tied.",
        ),
    )
    _failing(
        judge_blinding(sc, golds["HR-01"]),
        CHECK_BLINDING,
        "rubric.yml criterion rules description copies line 3 of oracle.yml",
        line,
    )


def test_a_record_code_of_the_header_comment_in_the_rubric_fails(tmp_path: Path, golds: dict[str, Path]):
    # A record the header comment plants and the gold never names (E-1099, planted in the copy's header) is a leak.
    sc = _planted(
        tmp_path,
        "HR-01",
        oracle=_replace(
            "# Deterministic criteria for HR-01.",
            "# Deterministic criteria for HR-01. E-1099 left in October (out of scope).",
        ),
        rubric=_replace("including the ineligible new hire", "including E-1099 left out and the ineligible new hire"),
    )
    _failing(
        judge_blinding(sc, golds["HR-01"]),
        CHECK_BLINDING,
        "rubric.yml criterion rules anchor 4 shows E-1099",
        "planted fact of oracle.yml's header comment",
    )


def test_a_record_code_the_gold_names_is_fair(tmp_path: Path, golds: dict[str, Path]):
    # E-1045 is a row of the gold workbook, so the judges see it in the package anyway.
    sc = _planted(
        tmp_path,
        "HR-01",
        rubric=_replace("including the ineligible new hire", "including E-1045, the ineligible new hire"),
    )
    _passes(judge_blinding(sc, golds["HR-01"]), CHECK_BLINDING)


def test_a_prompt_over_the_panels_window_fails(tmp_path: Path, golds: dict[str, Path]):
    study = design.study()
    table = PriceTable.load()

    def narrowed(window: int) -> PriceTable:
        text = PRICES_FILE.read_text(encoding="utf-8").replace(
            "max_input_tokens: 1000000", f"max_input_tokens: {window}"
        )
        f = tmp_path / f"prices-{window}.yml"
        f.write_text(text, encoding="utf-8")
        return PriceTable.load(f, required_models=table.models)

    sc = load_scenario("HR-01")
    _failing(
        judge_blinding(sc, golds["HR-01"], study=study, prices=narrowed(10_000)),
        CHECK_BLINDING,
        "the judges' prompt for the gold package may take",
        "over the bound of 10,000",
        "claude-opus-5-5",
    )
    # The gold fits 100,000 tokens, but a package at the rendering bound (60,000 characters) might not.
    _failing(
        judge_blinding(sc, golds["HR-01"], study=study, prices=narrowed(100_000)),
        CHECK_BLINDING,
        "a package at the RenderLimits bound",
        "over the bound of 100,000",
    )


def test_a_gold_cut_by_the_package_bound_fails(golds: dict[str, Path]):
    rows = judge_blinding(load_scenario("HR-01"), golds["HR-01"], limits=RenderLimits(max_total_chars=5000))
    _failing(rows, CHECK_BLINDING, "the gold merit_increases_2027.xlsx is cut", "5,000-character package bound")
