"""A small calibration run: the machinery of the appendix table, on few studies."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pilot import paths
from pilot.stats.calibration import run_calibration


@pytest.fixture(scope="module")
def small():
    return run_calibration(60, seed=3, B=500, truth_draws=100_000)


def test_small_calibration_is_sane(small):
    s = small.summary.set_index(["condition", "contrast"])
    assert set(s.index.get_level_values(0)) == {"planted", "null"}
    assert s.loc[("null", "A3-A1"), "planted"] == 0.0
    assert s.loc[("planted", "A3-A1"), "planted"] > 0.05
    # 60 studies: loose bounds, but a broken interval or test falls outside them.
    assert s.loc[("null", "A3-A1"), "rejection"] <= 0.12
    assert 0.75 <= s.loc[("planted", "A3-A1"), "coverage"] <= 1.0
    assert abs(s.loc[("planted", "A3-A1"), "mean_estimate"] - s.loc[("planted", "A3-A1"), "planted"]) < 0.05
    st = small.studies
    assert len(st) == 60 * 2 * 4
    assert (st.covered == ((st.ci_low <= st.planted) & (st.planted <= st.ci_high))).all()
    assert np.isfinite(st.p_holm).all()


def test_the_script_writes_the_appendix_table(tmp_path: Path):
    spec = importlib.util.spec_from_file_location("calibration_script", paths.ANALYSIS_DIR / "calibration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--studies", "8", "--scenarios", "10", "--bootstrap", "200", "--truth-draws", "100000", "--quiet", "--tables-dir", str(tmp_path / "t"), "--generated-dir", str(tmp_path / "g")])
    assert rc == 0
    t = pd.read_csv(tmp_path / "t" / "calibration.csv")
    assert {"coverage", "coverage_mc_se", "rejection", "planted", "J"} <= set(t.columns) and (t.studies == 8).all()
    tex = (tmp_path / "g" / "calibration_table.tex").read_text()
    assert "\\textbf{SIMULATED.}" in tex and "\\label{tab:calibration}" in tex
    assert "\\newcommand{\\CalJOneZeroNullAThreeMinusAOneRejection}" in (tmp_path / "g" / "calibration_macros.tex").read_text()
