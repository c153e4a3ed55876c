"""Interpreting sentences under the stage tables: every number read from the table, true minus signs, labels."""

from __future__ import annotations

import math

import pandas as pd

from pilot.report import sentences


def test_the_primary_contrast_reads_as_a_sentence():
    row = {
        "contrast": "A3-A1",
        "estimate": 0.0667,
        "ci_low": -0.2,
        "ci_high": 0.3667,
        "p_value": 0.875,
        "role": "primary",
    }
    assert sentences.contrast_sentence(row) == (
        "A3 \u2212 A1 is 0.067 (nominal 95% CI \u22120.200 to 0.367), p = 0.875: no evidence of a premium in this run."
    )


def test_a_small_p_reads_as_evidence_and_keeps_its_sign():
    row = {"contrast": "A1-A0", "estimate": -0.31, "ci_low": -0.5, "ci_high": -0.1, "p_value": 0.2, "p_holm": 0.0004}
    text = sentences.contrast_sentence(row, holm=True, prefix="SIMULATED (dry run): ")
    assert text.startswith("SIMULATED (dry run): A1 \u2212 A0 is \u22120.310")
    assert "p < 0.001 (Holm)" in text and "evidence of a negative premium" in text


def test_numbers_never_print_negative_zero_or_nan():
    assert sentences.num(-0.0001) == "0.000"
    assert sentences.num(float("nan")) == "not estimable"
    assert sentences.num("not estimable (separation)") == "not estimable (separation)"
    assert sentences.usd(1.4) == "$1.40"
    assert sentences.pval(math.nan) == "p not estimable"
    row = {
        "contrast": "A3-A1",
        "estimate": float("nan"),
        "ci_low": float("nan"),
        "ci_high": float("nan"),
        "p_value": float("nan"),
    }
    assert sentences.contrast_sentence(row) == "A3 \u2212 A1 is not estimable in this run."


def test_secondary_contrasts_are_read_with_holm():
    con = pd.DataFrame(
        [
            {
                "contrast": "A3-A1",
                "estimate": 0.1,
                "ci_low": 0.0,
                "ci_high": 0.2,
                "p_value": 0.04,
                "p_holm": math.nan,
                "role": "primary",
            },
            {
                "contrast": "A1-A0",
                "estimate": 0.2,
                "ci_low": 0.1,
                "ci_high": 0.3,
                "p_value": 0.01,
                "p_holm": 0.03,
                "role": "secondary",
            },
        ]
    )
    text = sentences.contrasts_sentences(con)
    assert "p = 0.040: evidence of a premium" in text and "p = 0.030 (Holm)" in text


def test_status_sentence_reads_the_ledger_columns():
    status = pd.DataFrame(
        [
            {
                "wave": "pilot",
                "arm": "A0",
                "done": 20,
                "in_flight": 0,
                "waiting": 0,
                "failed": 0,
                "failed_attempts": 1,
                "spent_usd": 30.5,
                "reserved_usd": 0.0,
            },
            {
                "wave": "all",
                "arm": "all",
                "done": 98,
                "in_flight": 0,
                "waiting": 0,
                "failed": 2,
                "failed_attempts": 3,
                "spent_usd": 140.25,
                "reserved_usd": 0.0,
            },
        ]
    )
    assert sentences.status_sentence(status, 800.0) == (
        "98 of 100 assigned runs are done and 2 failed; 3 infrastructure attempts were rerun; "
        "$140.25 spent of the $800.00 envelope ($0.00 still reserved)."
    )


def test_a_degenerate_logistic_fit_is_not_read():
    summary = pd.DataFrame(
        [{"term": "A3 vs A1", "odds_ratio": 1e140, "or_ci_low": 0.0, "or_ci_high": math.inf, "p_value": 0.99}]
    )
    text = sentences.logistic_sentence(summary, "A3 vs A1", note="Perfect separation detected")
    assert text == "The odds ratio A3 vs A1 is not estimable (Perfect separation detected), so no reading is given."


def test_secondary_sentence_keeps_arm_names():
    summary = pd.DataFrame({"arm": ["A0", "A1"], "E": [0.0, 0.1], "cost_usd": [0.3, 1.2], "wall_min": [5.0, 9.25]})
    assert sentences.secondary_sentence(summary) == (
        "Critical violations are most frequent in A1 (0.100); the costliest arm per run is A1 ($1.20); "
        "the slowest is A1 (9.2 minutes)."
    )


def test_a_hypothesis_paragraph_names_the_failing_part_and_keeps_case():
    row = {
        "hypothesis": "H3",
        "statement": "self-repair premium A4-A3 >= 0 and ARI > 0.5",
        "criterion": "premium estimate >= 0 and ARI estimate > 0.5",
        "estimate": "premium 0.100; ARI 0.400",
        "interval": "0.000 to 0.200; 0.100 to 0.700",
        "test": "Holm-adjusted p = 0.500; ARI n/a",
        "verdict": "not consistent",
        "failing": "the ARI 0.400 is not above 0.5",
        "remark": "",
    }
    text = sentences.hypothesis_paragraph(row)
    # H4's intervals are cluster-robust Wald intervals, named as such and not given the bootstrap's calibration.
    h4 = sentences.hypothesis_paragraph({**row, "hypothesis": "H4"})
    assert "; Wald interval (nominal 95%, not calibrated) 0.000 to 0.200;" in h4
    assert text == (
        "Self-repair premium A4-A3 >= 0 and ARI > 0.5. Estimate: premium 0.100; ARI 0.400; interval (nominal 95%) "
        "0.000 to 0.200; 0.100 to 0.700; Holm-adjusted p = 0.500; ARI n/a. The criterion is: premium estimate "
        ">= 0 and ARI estimate > 0.5. The verdict is not consistent: the ARI 0.400 is not above 0.5."
    )
    # In the manuscript the bootstrap intervals' label carries their calibrated coverage; the Wald ones keep theirs.
    from pilot.latex import latex_escape
    from pilot.report.stage_outputs import INTERVAL_NOTE, _interval_notes

    assert f"; interval ({INTERVAL_NOTE}) 0.000 to 0.200;" in _interval_notes(latex_escape(text))
    assert INTERVAL_NOTE not in _interval_notes(latex_escape(h4))


def test_h6s_cost_intervals_say_the_calibration_did_not_measure_them():
    row = {
        "hypothesis": "H6",
        "statement": "cost per accepted deliverable lowest in A1 or A3, not A0",
        "criterion": "lowest finite point estimate in A1 or A3",
        "estimate": "lowest A1: $2.57",
        "interval": "1.90 to 3.40",
        "test": "share of resamples lowest in A1/A3: 0.80",
        "verdict": "consistent",
        "failing": "",
        "remark": "",
    }
    h6 = sentences.hypothesis_paragraph(row)
    assert "; interval (nominal 95%, coverage not measured for cost) 1.90 to 3.40;" in h6
    # The contrasts' calibrated coverage is not lent to the cost ratio when the stage labels the paragraph's intervals.
    from pilot.latex import latex_escape
    from pilot.report.stage_outputs import INTERVAL_NOTE, _interval_notes

    shown = _interval_notes(latex_escape(h6))
    assert INTERVAL_NOTE not in shown
    assert "interval (nominal 95\\%, coverage not measured for cost) 1.90 to 3.40" in shown


def test_an_exploratory_paragraph_is_described_not_judged_and_reads_csv_gaps():
    row = {
        "hypothesis": "H7",
        "statement": "heterogeneity across occupations (exploratory)",
        "criterion": "descriptive",
        "estimate": "pooled premium 0.100",
        "interval": "n/a",
        "test": "Cochran p = 0.011",
        "verdict": "exploratory",
        "failing": float("nan"),
        "remark": float("nan"),
    }
    text = sentences.hypothesis_paragraph(row)
    assert (
        "Estimate: pooled premium 0.100; Cochran p = 0.011." in text
        and "interval" not in text
        and "It is exploratory: described, not judged." in text
        and "nan" not in text
    )
