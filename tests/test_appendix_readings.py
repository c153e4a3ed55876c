"""The appendices' readings of their numbers (calibration level and coverage, the dry run's judge part), against
hand-worked cases."""

from __future__ import annotations

from pilot.simulated.calibration import against_nominal, coverage_sentence, level_sentence


def test_a_rate_is_read_against_two_monte_carlo_errors():
    assert against_nominal(0.052, 0.002, 0.05) == "within Monte Carlo error of"  # 0.002 away, 2 s.e. = 0.004
    assert against_nominal(0.062, 0.002, 0.05) == "above"  # 0.012 away
    assert against_nominal(0.017, 0.001, 0.05) == "below"
    assert against_nominal(0.05, 0.0, 0.05) == "within Monte Carlo error of"  # a zero s.e. still allows 0.002


def test_the_level_sentence_says_conservative_only_below():
    text = level_sentence([(10, 0.017, 0.0013), (40, 0.049, 0.0022)], 0.05)
    assert "0.017 of the studies at J = 10 (Monte Carlo s.e. 0.001; below the level, so conservative there)" in text
    assert "0.049 of the studies at J = 40 (Monte Carlo s.e. 0.002; within Monte Carlo error of the level)" in text


def test_the_coverage_sentence_warns_only_where_coverage_falls_short():
    short = coverage_sentence([(10, 0.895, 0.003), (40, 0.947, 0.002)], 0.95)  # 0.055 and 0.003 short of 0.95
    assert "below the nominal 95%" in short and "(J = 10)" in short and "narrower than a 95% interval" in short
    fine = coverage_sentence([(10, 0.948, 0.003)], 0.95)
    assert "within Monte Carlo error of the nominal 95%" in fine and "narrower" not in fine


def test_the_dry_runs_judge_part_is_said_plainly():
    import pandas as pd

    from pilot.simulated.dry_run import judge_part_sentence

    flat = pd.DataFrame({"scenario": ["ACC-01", "ACC-01", "HR-01"], "p_quality": [1.0, 0.99996, 1.0]})
    text = judge_part_sentence(flat, 70)
    assert text.startswith(
        "In all 2 scenarios the simulated judges accept the clean reference package with probability 1.000"
    )
    assert "never reject a clean package at q = 70" in text
    mixed = pd.DataFrame({"scenario": ["ACC-01", "HR-01"], "p_quality": [0.97, 0.9]})
    # 1 - 0.97 and 1 - 0.90, by hand: the share of runs in which the judges put a clean package below q.
    assert "below q = 70 in 0.030 to 0.100 of runs over the 2 scenarios (most often in HR-01)" in judge_part_sentence(
        mixed, 70
    )
