"""The power simulation: exact tests against scipy, determinism, size, monotonicity, the design's table."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from scipy import stats
from sign_flip_reference import sign_flip_pvalue

from pilot.latex import write_macros
from pilot.stats import power as pw
from pilot.stats import resampling

DESIGN = pw.PowerDesign.from_study()


def _integer_rows(seed: int, n: int, J: int, R: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-R, R + 1, size=(n, J))
    x[::4] = np.abs(x[::4])  # some rows all of one sign, where p-values are small
    x[1] = 0  # an all-zero row
    x[2] = 2  # a constant non-zero row
    return x


def test_design_comes_from_study_yml():
    assert DESIGN.scenario_sd_logit == 0.8 and DESIGN.baseline == 0.5 and DESIGN.alpha == 0.05
    assert DESIGN.J == (10, 20, 40) and DESIGN.R == (2, 3) and DESIGN.delta == (0.15, 0.25, 0.35)
    assert [(r.J, r.R, r.delta, r.power) for r in DESIGN.reported] == [
        (10, 3, 0.25, 0.408),
        (10, 3, 0.35, 0.729),
        (40, 3, 0.25, 0.968),
    ]
    assert len(DESIGN.grid_cells()) == 18
    assert set(DESIGN.doubling_cells()) == {(10, r, d) for r in (4, 6) for d in DESIGN.delta}


@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")  # scipy on constant rows
def test_vectorised_pvalues_equal_scipy():
    x = _integer_rows(3, 60, 10, 3)
    d = x.astype(float)  # integer-valued floats keep scipy's tie handling exact
    t = pw.pvalues(x, "paired-t")
    flip = pw.pvalues(x, "sign-flip")
    wil = pw.pvalues(x, "wilcoxon")
    sign = pw.pvalues(x, "sign")
    for i, row in enumerate(d):
        with np.errstate(all="ignore"):
            t_ref = stats.ttest_1samp(row, 0).pvalue
        assert t[i] == pytest.approx(1.0 if np.isnan(t_ref) else t_ref, abs=1e-9), row
        nz = int(np.count_nonzero(row))
        flip_ref = stats.permutation_test((row,), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
        assert flip[i] == pytest.approx(flip_ref, abs=1e-12), row
        # scipy's default for n <= 13 with ties is the exact permutation distribution of the signed ranks
        assert wil[i] == pytest.approx(stats.wilcoxon(row).pvalue if nz else 1.0, abs=1e-12), row
        assert sign[i] == pytest.approx(stats.binomtest(int((row > 0).sum()), nz).pvalue if nz else 1.0, abs=1e-12), row


def test_sign_flip_exact_equals_scipy_the_slow_reference_and_the_lattice():
    """The one sign-flip test (pilot.stats.resampling) on the power table's own differences."""
    d = np.array([0.5, -1 / 3, 1.0, 2 / 3, 1 / 3, 0.0, 0.5, -0.5])
    ours = resampling.sign_flip_test(d)
    ref = stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf, alternative="two-sided")
    assert ours.exact and ours.n_permutations == 2**8
    assert ours.p_value[0] == pytest.approx(ref.pvalue, abs=1e-12)
    assert (ours.p_value[0], True) == pytest.approx(sign_flip_pvalue(d), abs=1e-12)
    lattice = pw.lattice_pvalues(np.rint(6 * d).astype(int)[None], "sign-flip")[0]
    assert ours.p_value[0] == pytest.approx(lattice, abs=1e-12)


def test_sign_flip_monte_carlo_is_seeded_and_close_to_exact():
    rng = np.random.default_rng(5)
    x = rng.integers(-1, 3, size=20)
    exact = pw.lattice_pvalues(x[None], "sign-flip")[0]
    a = resampling.sign_flip_test(x / 3, n_permutations=20_000, rng=np.random.default_rng(11))
    b = resampling.sign_flip_test(x / 3, n_permutations=20_000, rng=np.random.default_rng(11))
    assert not a.exact and a.p_value[0] == b.p_value[0]
    assert abs(a.p_value[0] - exact) <= 4 * np.sqrt(exact * (1 - exact) / 20_000) + 1 / 20_001
    slow, slow_exact = sign_flip_pvalue(x / 3, permutations=20_000, seed=11)
    assert not slow_exact and abs(slow - exact) <= 4 * np.sqrt(exact * (1 - exact) / 20_000) + 1 / 20_001


def test_simulation_is_deterministic_under_its_seed():
    cells = [(10, 2, 0.25), (20, 3, 0.15)]
    a = pw.simulate_power(DESIGN, cells=cells, simulations=400, seed=7)
    b = pw.simulate_power(DESIGN, cells=cells, simulations=400, seed=7)
    c = pw.simulate_power(DESIGN, cells=cells, simulations=400, seed=8)
    assert a.summary.equals(b.summary)
    assert not a.summary.power.equals(c.summary.power)
    # a cell's value does not depend on which other cells are simulated with it
    alone = pw.simulate_power(DESIGN, cells=cells[:1], simulations=400, seed=7)
    assert alone.power(10, 2, 0.25, "sign-flip") == a.power(10, 2, 0.25, "sign-flip")


def test_no_effect_gives_power_near_alpha():
    n = 4000
    res = pw.simulate_power(
        DESIGN, cells=[(20, 3, 0.0), (40, 3, 0.0)], readings=list(pw.EFFECT_READINGS), simulations=n, seed=3
    )
    tol = 4 * np.sqrt(0.05 * 0.95 / n)
    for reading in pw.EFFECT_READINGS:
        for J in (20, 40):
            assert abs(res.power(J, 3, 0.0, "paired-t", reading) - 0.05) <= tol
            # exact permutation tests never exceed their level (up to Monte Carlo error)
            for test in ("sign-flip", "wilcoxon", "sign"):
                assert res.power(J, 3, 0.0, test, reading) <= 0.05 + tol
    assert res.power(40, 3, 0.0, "sign-flip") >= 0.05 - tol  # and at J = 40 the lattice is fine enough to reach it


@pytest.mark.parametrize("reading", list(pw.EFFECT_READINGS))
def test_power_increases_with_delta(reading):
    res = pw.simulate_power(
        DESIGN, cells=[(20, 2, d) for d in (0.0, *DESIGN.delta)], readings=[reading], simulations=1500, seed=9
    )
    for test in pw.TESTS:
        curve = [res.power(20, 2, d, test, reading) for d in (0.0, *DESIGN.delta)]
        assert all(a < b for a, b in pairwise(curve)), (test, curve)


def test_documented_reading_reproduces_the_design_table():
    cells = [(r.J, r.R, r.delta) for r in DESIGN.reported]
    res = pw.simulate_power(DESIGN, cells=cells, readings=list(pw.EFFECT_READINGS), simulations=DESIGN.simulations)
    rep = res.reproduction(pw.TABLE_TEST, pw.TABLE_READING)
    assert list(rep.columns[:5]) == ["J", "R", "delta", "reading", "test"]
    assert (rep.z.abs() <= 3).all(), rep
    assert np.allclose(rep.mc_se, np.sqrt(rep.power * (1 - rep.power) / DESIGN.simulations))
    ranking = res.reproducing()
    assert ranking.iloc[0][["reading", "test"]].tolist() == [pw.TABLE_READING, pw.TABLE_TEST]
    # the preregistered exact test is the less powerful one at J = 10
    assert res.power(10, 3, 0.25, "sign-flip") < res.power(10, 3, 0.25, "paired-t") - 0.05


def test_variance_equation_matches_simulated_spread_and_doubling():
    res = pw.simulate_power(
        DESIGN,
        cells=[(10, 3, 0.25), (20, 3, 0.25), (10, 6, 0.25)],
        tests=["paired-t", "sign-flip"],
        simulations=3000,
        seed=1,
    )
    per_cell = res.summary.drop_duplicates(["J", "R"])
    assert np.allclose(per_cell.premium_var_simulated, per_cell.premium_var_equation, rtol=0.08)
    between, within = pw.premium_variance_components(0.25, baseline=0.5, sd=0.8)
    assert 0 < between < within
    assert pw.premium_variance(20, 3, between, within) < pw.premium_variance(10, 6, between, within)
    table = res.doubling(0.25, "paired-t")
    assert (table.power_2J > table.power_2R).all() and (table.power_2R > table.power).all()


def test_bad_requests_are_refused():
    with pytest.raises(pw.PowerError, match="unknown effect reading 'odds'"):
        pw.simulate_power(DESIGN, cells=[(10, 2, 0.25)], readings=["odds"], simulations=10)
    with pytest.raises(pw.PowerError, match="unknown test 'z'"):
        pw.simulate_power(DESIGN, cells=[(10, 2, 0.25)], tests=["z"], simulations=10)
    with pytest.raises(pw.PowerError, match=r"must lie in \[0, 1\)"):
        pw.logit_shift(0.6, 0.5, 0.8, "logit-median")
    with pytest.raises(pw.PowerError, match="need J >= 2"):
        pw.simulate_power(DESIGN, cells=[(1, 2, 0.25)], simulations=10)
    with pytest.raises(pw.PowerError, match="integer"):
        pw.lattice_pvalues(np.array([[0.5, 1.0]]), "sign-flip")


def test_result_renders_latex_and_macros(tmp_path):
    cells = DESIGN.grid_cells() + DESIGN.doubling_cells()
    grid = pw.simulate_power(DESIGN, cells=cells, simulations=200, seed=2)
    readings = pw.simulate_power(
        DESIGN,
        cells=[(r.J, r.R, r.delta) for r in DESIGN.reported] + [(10, 3, 0.0)],
        readings=list(pw.EFFECT_READINGS),
        simulations=200,
        seed=2,
    )
    hetero = pw.simulate_power(
        DESIGN, cells=[c for c in cells if c[0] <= 20], readings=["logit-median-heterogeneous"], simulations=200, seed=2
    )
    assert {"J", "R", "delta", "test", "power", "mc_se"} <= set(grid.summary.columns)
    latex = grid.to_latex()
    assert "\\toprule" in latex and latex.count("\\\\") == 1 + len(DESIGN.grid_cells())
    macros = pw.power_macros(grid, readings, hetero)
    assert macros["PowerReportedJOneZeroRThreeDTwoFive"] == "0.408"
    assert macros["PowerReproJFourZeroRThreeDTwoFive"] == f"{grid.power(40, 3, 0.25, 'paired-t'):.3f}"
    text = write_macros(macros, tmp_path / "m.tex").read_text()
    assert "\\newcommand{\\PowerDoubleScenariosSignFlip}" in text and "\\newcommand{\\PowerHeteroVarBetween}" in text


def test_each_scenario_set_is_read_off_the_grid_at_its_size():
    grid = pw.simulate_power(DESIGN, cells=DESIGN.grid_cells(), simulations=200, seed=3)
    text = pw.scenario_sets_sentence(grid, {"pilot": 10, "extension": 20, "odd": 7})
    # The sentence carries the grid's own cells at the first stated effect (25 points), one per repeat count.
    for J in (10, 20):
        for R in DESIGN.R:
            assert f"{grid.power(J, R, 0.25, pw.TABLE_TEST, pw.TABLE_READING):.3f} with the \\(t\\)-test" in text
            assert f"{grid.power(J, R, 0.25, pw.PREREGISTERED_TEST, pw.TABLE_READING):.3f} with the sign-flip" in text
    assert "\\texttt{extension} of \\(J=20\\) scenarios" in text
    assert "\\texttt{odd} has \\(J=7\\) scenarios, outside the simulated grid" in text
    assert pw.scenario_sets_sentence(grid, {}) == ""
