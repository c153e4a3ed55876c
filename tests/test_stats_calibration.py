"""A small calibration run: the machinery of the appendix table, on few studies."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pilot import paths, protocol
from pilot.simulated import calibration, synthetic
from pilot.simulated.calibration import run_calibration
from pilot.stats import primary, resampling
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings


@pytest.fixture(scope="module")
def small():
    return run_calibration(60, seed=3, B=500, truth_draws=100_000, block=25)


def test_small_calibration_is_sane(small):
    s = small.summary.set_index(["condition", "contrast"])
    assert set(s.index.get_level_values(0)) == {"planted", "null", "tail"}
    assert s.loc[("null", "A3-A1"), "planted"] == 0.0
    assert s.loc[("planted", "A3-A1"), "planted"] > 0.05
    # 60 studies: loose bounds, but a broken interval or test falls outside them.
    assert s.loc[("null", "A3-A1"), "rejection"] <= 0.12
    assert 0.75 <= s.loc[("planted", "A3-A1"), "coverage"] <= 1.0
    assert abs(s.loc[("planted", "A3-A1"), "mean_estimate"] - s.loc[("planted", "A3-A1"), "planted"]) < 0.05
    st = small.studies
    assert len(st) == 60 * 3 * 4
    assert (st.covered == ((st.ci_low <= st.planted) & (st.planted <= st.ci_high))).all()
    # The primary contrast is not adjusted; every secondary one is.
    assert st[st.role == "primary"].p_holm.isna().all() and np.isfinite(st[st.role == "secondary"].p_holm).all()
    # The tail condition puts the control arm near 0% acceptance, and the table says how near.
    assert s.loc[("tail", "A3-A1"), "planted_control"] < 0.05
    for col in ("coverage_mc_se", "rejection_mc_se", "bias_mc_se"):
        assert (s[col] >= 0).all() and (s[col] < 0.1).all()


def test_the_vectorised_block_is_the_stage_analysis_study_by_study():
    """Each study of a block gets the numbers contrast_table gives it with the same resamples and sign vectors."""
    study = protocol.study()
    rng = np.random.default_rng(1)
    model = synthetic.SyntheticModel.load()
    specs = synthetic.study_scenarios(1, 6, model, study)
    S = calibration.draw_acceptance(rng, model, specs, 4, 2, study)
    S[0, 0, 3, :] = np.nan  # a scenario without a scored run in A3
    counts = resampling.bootstrap_counts(rng, 6, 4 * 300).reshape(4, 300, 6)
    signs, _ = resampling.sign_vectors(6, 20_000, rng)
    res = calibration.analyse_block(S, study.arms, study.contrasts, counts, signs, 0.95)
    for i in range(4):
        layout = Layout(
            [s.id for s in specs], study.arms, [""] * 6, np.ones(6), np.ones(6), np.zeros(1, int), np.zeros(1, int)
        )
        scored = (~np.isnan(S[i])).sum(axis=2)
        means = np.where(scored > 0, np.nansum(S[i], axis=2) / np.maximum(scored, 1), np.nan)
        tab, _ = primary.contrast_table(
            means, layout, study.contrasts, np.ones(6), InferenceSettings(300, 20_000, 0), counts=counts[i], signs=signs
        )
        for k in ("estimate", "ci_low", "ci_high", "p_value", "n_scenarios"):
            np.testing.assert_allclose(tab[k].to_numpy(dtype=float), res[k][i], rtol=1e-12, atol=1e-12, err_msg=k)


def test_the_script_writes_the_appendix_table(tmp_path: Path):
    spec = importlib.util.spec_from_file_location("calibration_script", paths.ANALYSIS_DIR / "calibration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(
        [
            "--studies",
            "8",
            "--scenarios",
            "10",
            "--bootstrap",
            "200",
            "--truth-draws",
            "100000",
            "--quiet",
            "--tables-dir",
            str(tmp_path / "t"),
            "--generated-dir",
            str(tmp_path / "g"),
        ]
    )
    assert rc == 0
    t = pd.read_csv(tmp_path / "t" / "calibration.csv")
    assert {"coverage", "coverage_mc_se", "rejection", "planted", "J"} <= set(t.columns) and (t.studies == 8).all()
    tex = (tmp_path / "g" / "calibration_table.tex").read_text()
    assert "\\textbf{SIMULATED.}" in tex and "\\label{tab:calibration}" in tex
    assert (
        "\\newcommand{\\CalJOneZeroNullAThreeMinusAOneRejection}"
        in (tmp_path / "g" / "calibration_macros.tex").read_text()
    )


def test_conditions_share_the_arms_they_leave_unchanged():
    """Common random numbers across conditions: an arm a condition does not change keeps its runs; the
    changed arm is drawn anew from its own parameters (null: A3 as A1; tail: A1 near 0%)."""
    study = protocol.study()
    model = synthetic.SyntheticModel.load()
    models = calibration.condition_models(model, study)
    specs = synthetic.study_scenarios(2, 10, model, study)
    S = calibration.draw_conditions(np.random.default_rng(9), models, specs, 200, 3, study)
    arms = list(study.arms)
    a1, a3 = arms.index("A1"), arms.index("A3")
    for name, changed in (("null", a3), ("tail", a1)):
        for k in range(len(arms)):
            same = np.array_equal(S[name][:, :, k], S["planted"][:, :, k], equal_nan=True)
            assert same == (k != changed), (name, arms[k])
    # Null: A3 has A1's parameters (same scenario effects), so their acceptance agrees within noise.
    assert abs(np.nanmean(S["null"][:, :, a3]) - np.nanmean(S["planted"][:, :, a1])) < 0.04
    assert np.nanmean(S["tail"][:, :, a1]) < 0.05
    # One condition alone is draw_acceptance with the same stream.
    alone = calibration.draw_conditions(np.random.default_rng(9), {"planted": model}, specs, 5, 3, study)["planted"]
    np.testing.assert_array_equal(
        alone, calibration.draw_acceptance(np.random.default_rng(9), model, specs, 5, 3, study)
    )
