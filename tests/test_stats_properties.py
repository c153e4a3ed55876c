"""Property-based tests: random valid run tables, degraded at random, through both stages' computations.

For every drawn table: no exception; every reported value is a finite number,
∞ where a ratio is infinite, or "not estimable (reason)"; and each verdict
agrees with the estimates it rests on. Draws are derandomised (a fixed
database-free seed), so the suite is deterministic.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pilot import protocol, runtable
from pilot.simulated import synthetic
from pilot.stats import degraded, estimability, stage_computations

STUDY = protocol.study()
ALPHA = float(STUDY["inference"]["alpha"])
B, P = 100, 200


@st.composite
def run_tables(draw) -> pd.DataFrame:
    """A synthetic table (3-6 scenarios, 2-3 repeats) with up to three degradations at random arms."""
    seed = draw(st.integers(0, 10_000))
    df = runtable.validate_runtable(
        synthetic.generate_runtable(
            seed,
            n_scenarios=draw(st.integers(3, 6)),
            repeats=draw(st.integers(2, 3)),
            sensitivity_wave=draw(st.booleans()),
        )
    )
    for kind in draw(st.lists(st.sampled_from(degraded.KINDS), max_size=3)):
        arm = draw(st.sampled_from(STUDY.arms))
        present = df[df["arm"] != arm] if kind == "absent_arm" else df
        if present[present["model"] == STUDY["worker"]["model"]].empty:
            continue  # a table needs some run of the worker model
        df = degraded.degrade(df, kind, arm=arm, scenario=draw(st.sampled_from(sorted(df["scenario"].unique()))))
    return df


def _num(v) -> bool:
    return estimability.is_number(v)


def _check_contrast_verdict(h, p_col: str) -> None:
    r = h.summary.iloc[0]
    est, p = r["estimate"], r[p_col]  # the column is named for the p it holds (p_value or p_holm)
    if h.verdict == "consistent":
        assert _num(est) and est > 0 and _num(p) and p < ALPHA, (h.verdict, r.to_dict())
    elif h.verdict == "not consistent":
        assert _num(est) and (est <= 0 or (_num(p) and p >= ALPHA)), (h.verdict, r.to_dict())
    else:
        assert h.verdict_class == "not estimable" and (not _num(est) or not _num(p)), (h.verdict, r.to_dict())


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(run_tables())
def test_stages_on_random_degraded_tables(df):
    prim = stage_computations.primary_stage(df, seed=5, B=B, n_permutations=P)
    sens = stage_computations.sensitivity_stage(df, seed=5, B=B, n_permutations=P)
    bad = estimability.check_reported(prim.result.summary) + estimability.check_reported(prim.result.acceptance_summary)
    for name, r in sens.results.items():
        bad += [f"{name}: {b}" for b in estimability.check_reported(r.summary, infinite=getattr(r, "infinite", ()))]
    hyps = {h.id: h for h in prim.hypotheses + sens.hypotheses}
    for h in hyps.values():
        bad += [f"{h.id}: {b}" for b in estimability.check_reported(h.summary, infinite=h.infinite)]
        assert h.verdict_class in estimability.VERDICTS
        assert (h.verdict_class == "not estimable") == bool(h.reason)
    assert bad == []

    _check_contrast_verdict(hyps["H1"], "p_value")
    _check_contrast_verdict(hyps["H2"], "p_holm")
    # The primary contrast has no adjusted p; a secondary contrast has one exactly when it has a p.
    con = prim.result.summary
    assert con["p_holm"].iloc[0] == ""
    for _, r in con.iloc[1:].iterrows():
        assert _num(r["p_holm"]) == _num(r["p_value"])
        if _num(r["p_holm"]):
            assert r["p_holm"] >= r["p_value"] - 1e-12

    h4 = hyps["H4"].summary.iloc[0]
    if hyps["H4"].verdict == "consistent":
        assert (
            _num(h4["depth_ci_high"])
            and h4["depth_ci_high"] < 0
            and _num(h4["tool_calls_ci_high"])
            and h4["tool_calls_ci_high"] < 0
        )
    if hyps["H4"].verdict_class == "not estimable":
        assert not (_num(h4["depth_ci_high"]) and _num(h4["tool_calls_ci_high"]))

    h6 = hyps["H6"].summary.set_index("arm")["cost_per_accepted"]
    finite = {a: v for a, v in h6.items() if _num(v)}
    if hyps["H6"].verdict in ("consistent", "not consistent"):
        low = min(finite.values())
        lowest = {a for a, v in finite.items() if v == low}
        assert (hyps["H6"].verdict == "consistent") == lowest.issubset({"A1", "A3"})
    if not finite:
        assert hyps["H6"].verdict_class == "not estimable"

    # Acceptance is a share wherever it is estimated.
    for v in prim.result.acceptance_summary["p_hat"]:
        assert not _num(v) or 0 <= v <= 1
    # Logistic terms: an odds ratio is reported only with a finite, moderate log-odds.
    lg = sens.results["logistic"].summary
    for v in lg["log_odds"]:
        assert not _num(v) or abs(v) <= 15


def test_a_planted_table_passes_the_same_checks_without_degradation():
    df = runtable.validate_runtable(synthetic.generate_runtable(2, n_scenarios=5))
    prim = stage_computations.primary_stage(df, seed=5, B=B, n_permutations=P)
    assert all(np.isfinite(prim.result.contrasts["estimate"]))
    assert all(h.verdict_class != "not estimable" for h in prim.hypotheses)
