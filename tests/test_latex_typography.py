"""Typography of generated tables and macros: headers in words, true minus signs, decimals by quantity."""

from __future__ import annotations

import math

import pandas as pd

from pilot.latex import latex_escape, write_macros, write_table


def test_tables_have_word_headers_true_minus_and_decimals_by_quantity(tmp_path):
    df = pd.DataFrame(
        {
            "arm": ["A0", "A1"],
            "estimate": [-0.2, -0.00004],
            "p_value": [0.87512, 0.0002],
            "cost_usd": [1.4049, 0.5],
            "median_min": [12.345, math.inf],
            "I2": [0.25, 0.5],
            "criterion": ["Q >= 70", "uses --tools"],
        }
    )
    text = write_table(df, tmp_path / "t.tex", caption="c", label="tab:t").read_text()
    header = next(line for line in text.splitlines() if line.startswith("Arm"))
    assert header.startswith("Arm & Estimate & $p$ & Cost (\\$) & Median (min) & $I^2$ & Criterion")
    assert "_" not in header
    assert "\\ensuremath{-}0.200" in text and "-0.000" not in text and " 0.000 " in text
    assert "0.875" in text and "$<$0.001" in text
    assert "1.40" in text and "1.405" not in text and "12.3" in text and "$\\infty$" in text
    assert "\\ensuremath{\\geq} 70" in text and "-{}-tools" in text
    assert "\\begin{tabular}{lrrrrrl}" in text


def test_escape_keeps_double_hyphens_apart():
    assert latex_escape("--tools Read") == "-{}-tools Read"


def test_macros_use_minus_signs_and_decimals_by_quantity(tmp_path):
    text = write_macros(
        {"ContrastEst": -0.0667, "ZeroEst": -0.0001, "SensCPAAOne": 2.345, "SensKMMedianAOne": 12.34},
        tmp_path / "m.tex",
    ).read_text()
    assert "\\newcommand{\\ContrastEst}{\\ensuremath{-}0.067}" in text
    assert "\\newcommand{\\ZeroEst}{0.000}" in text
    assert "{\\SensCPAAOne}{2.35}" in text or "{\\SensCPAAOne}{2.34}" in text
    assert "{\\SensKMMedianAOne}{12.3}" in text


def test_symbols_of_result_objects_have_latex_spellings():
    assert latex_escape("∞") == "\\ensuremath{\\infty}"
    assert latex_escape("−0.2 ≥ 0") == "\\ensuremath{-}0.2 \\ensuremath{\\geq} 0"


def test_a_reason_given_in_the_note_is_not_repeated_in_every_cell(tmp_path):
    reason = "not estimable (no variation in S (no run accepted))"
    df = pd.DataFrame(
        {
            "model": ["A0", "A1"],
            "depth_slope": [reason, -0.2],
            "depth_ci_low": [reason, -0.9],
            "note": ["no variation in S (no run accepted)", ""],
        }
    )
    text = write_table(df, tmp_path / "t.tex", caption="c", label="tab:t").read_text()
    # Two neighbouring cells with nothing to show read "not estimable" once, across both; the note says why.
    assert "A0 & \\multicolumn{2}{c}{not estimable} & no variation in S (no run accepted)" in text
    assert "Depth slope & Depth 2.5\\%" in text and "\\begin{tabular}{lrrl}" in text


def test_an_arms_share_is_a_proportion_not_a_p_value(tmp_path):
    # H7's per-occupation shares (0 of 3 accepted) beside a real p-value of 0.0002.
    df = pd.DataFrame({"occupation": ["law"], "p_A3": [0.0], "p_hat": [0.0004], "p_value": [0.0002]})
    row = next(
        line
        for line in write_table(df, tmp_path / "t.tex", caption="c", label="tab:t").read_text().splitlines()
        if line.startswith("law")
    )
    assert row == "law & 0.000 & 0.000 & $<$0.001 \\\\"


def test_an_empty_note_column_is_left_out_and_a_used_one_kept(tmp_path):
    empty = pd.DataFrame({"arm": ["A0", "A1"], "estimate": [0.1, 0.2], "note": ["", None]})
    text = write_table(empty, tmp_path / "e.tex", caption="c", label="tab:e").read_text()
    assert "Note" not in text and "\\begin{tabular}{lr}" in text
    used = empty.assign(note=["", "one scenario"])
    text = write_table(used, tmp_path / "u.tex", caption="c", label="tab:u").read_text()
    assert "Arm & Estimate & Note" in text and "one scenario" in text


def test_a_row_with_nothing_estimable_reads_not_estimable_once_across_it(tmp_path):
    ne = "not estimable (no run in A2)"
    df = pd.DataFrame(
        {
            "arm": ["A1", "A2"],
            "D": [0.5, ne],
            "E": [0.1, ne],
            "Q": [70.0, ne],
            "n_charged": [1, 0],
            "note": ["", "no run in A2"],
        }
    )
    text = write_table(df, tmp_path / "t.tex", caption="c", label="tab:t").read_text()
    rows = {line.split(" &")[0]: line for line in text.splitlines() if line.startswith(("A1", "A2"))}
    # The three missing values become one cell spanning their three columns; the count and the note keep theirs.
    assert rows["A2"].replace(" ", "") == "A2&\\multicolumn{3}{c}{notestimable}&0&noruninA2\\\\"
    assert rows["A1"].count("&") == rows["A2"].count("&") + 2
    # A single missing value stays a cell of its own.
    one = write_table(
        df.assign(E=[0.1, 0.2], Q=[70.0, 71.0]), tmp_path / "u.tex", caption="c", label="tab:u"
    ).read_text()
    assert "multicolumn" not in one and "not estimable" in one


def test_notes_below_mark_their_rows_with_letters_and_keep_the_table_narrow(tmp_path):
    df = pd.DataFrame(
        {
            "contrast": ["A3-A1", "A1-A0", "A2-A1", "A4-A3"],
            "estimate": [0.1, 0.2, None, 0.3],
            "note": ["", "a lattice point (2 of 4 have 0.5%)", "no scored run in A2", "no scored run in A2"],
        }
    )
    text = write_table(df, tmp_path / "t.tex", caption="C.", label="tab:t", notes_below=True).read_text()
    body = text[text.index("\\midrule") : text.index("\\bottomrule")]
    # By hand: the note column is gone; each distinct note gets the next letter, a repeated note its first letter.
    assert "Note" not in text[text.index("\\toprule") : text.index("\\midrule")]
    assert [ln.split("&")[0].strip() for ln in body.splitlines()[1:]] == [
        "A3$-$A1",
        "A1$-$A0 (a)",
        "A2$-$A1 (b)",
        "A4$-$A3 (b)",
    ]
    assert (
        "\\parbox{\\linewidth}{\\footnotesize (a) a lattice point (2 of 4 have 0.5\\%); (b) no scored run in A2.}"
        in text
    )
