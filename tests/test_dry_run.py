"""The dry run's planted acceptance, checked against the harness it describes.

The derivation in ``pilot.simulated.dry_run`` is compared with the empirical acceptance
of the real simulated pipeline (runner with the SIMULATED agent, oracle,
A4 self-check and recovery, SIMULATED judges, outcomes) over many seeds, and
its structural claims (which defect breaks D or sets E, which the self-check
reports) are checked on real files with the real oracle and self-check.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pilot import outcomes, protocol
from pilot.simulated import dry_run
from pilot.simulated.agent import load_model

OPS = "OPS-01"  # one CSV deliverable: a run takes a few hundredths of a second

#: Tolerance in standard errors: |empirical - planted| <= Z * sqrt(p (1 - p) / n + mc_se^2).
#: Two-sided, Z = 4 leaves a false alarm of about 6e-5 per comparison under a correct derivation.
Z = 4.0


def _empirical(tmp_path: Path, sid: str, arm: str, n: int) -> dict[str, np.ndarray]:
    from pilot.judges import judge_run
    from pilot.runner import run_attempt
    from pilot.scenarios import load_scenario

    study = protocol.study()
    panel = [j["id"] for j in study.judge_panel]
    scenario = load_scenario(sid)
    DE, S, capped = [], [], []
    for seed in range(n):
        rec = run_attempt(sid, arm, backend="simulated", out_dir=tmp_path / "run", seed=seed)
        assert rec.status != "infra_error", rec.infra_error
        judges = judge_run(scenario, Path(rec.workspace) / "outputs", backend="simulated", seed=seed)
        Q = outcomes.quality(outcomes.judge_scores(judges, panel))
        s = outcomes.acceptance(rec.D, rec.E, Q, study.q)
        DE.append(bool(rec.D) and not rec.E)
        if s is not None:  # an unscored run drops out, as in the estimator
            S.append(s)
        # The first session's cap, as the backend recorded it (a resume's own cap is not part of p_capped).
        first = json.loads(
            (tmp_path / "run" / "agent" / "simulated_draws.jsonl").read_text(encoding="utf-8").splitlines()[0]
        )
        capped.append(first["cap"] is not None)
    return {"DE": np.array(DE, float), "S": np.array(S, float), "capped": np.array(capped, float)}


def _within(observed: np.ndarray, planted: float, mc_se: float) -> tuple[bool, float, float]:
    n = observed.size
    tol = Z * math.sqrt(planted * (1 - planted) / n + mc_se**2)
    return abs(observed.mean() - planted) <= tol, float(observed.mean()), tol


# A4's self-check recalculates with LibreOffice, which runs only confined (bubblewrap): both components are used.
@pytest.mark.usefixtures("soffice")
@pytest.mark.parametrize(("arm", "n"), [("A1", 300), ("A4", 100)])
def test_planted_acceptance_matches_the_simulated_pipeline(tmp_path, arm, n):
    truth = dry_run.planted_acceptance(scenarios=[OPS], arms=[arm], draws=50_000, judge_draws=5_000, seed=11)
    row = truth.by_scenario.set_index("arm").loc[arm]
    runs = _empirical(tmp_path, OPS, arm, n)
    for what, planted, se in (
        ("S", row.planted_p, row.mc_se),
        ("DE", row.p_DE, row.p_DE_se),
        ("capped", row.p_capped, 0.0),
    ):
        ok, seen, tol = _within(runs[what], float(planted), float(se))
        assert ok, (
            f"{OPS} x {arm}: empirical {what} {seen:.3f} over {runs[what].size} runs vs planted "
            f"{planted:.3f} (tolerance {tol:.3f})"
        )
    if arm == "A4":
        # The recovery is part of the truth: without it the planted value would be the first session's alone.
        assert row.p_resume > 0
        assert row.p_DE > row.p_no_E * row.p_no_defect * (1 - row.p_capped * float(load_model()["capped_missing"]))


@pytest.mark.usefixtures("soffice")
def test_each_model_defect_breaks_D_or_sets_E_and_the_selfcheck_reports_it(tmp_path):
    """The structural claims of the derivation, on real files with the real oracle and self-check."""
    from pilot import defects as dx
    from pilot.oracles import evaluate, hash_inputs, run_selfcheck
    from pilot.scenarios import build_gold_workspace, load_scenario
    from pilot.simulated.agent import DEFECTS, NAMED_DEFECTS

    sid = "PROC-01"  # a workbook, a document and decisions: every defect of the model applies
    sc = load_scenario(sid)
    effects = {e.defect: e for e in dry_run.defect_effects(sc, DEFECTS)}
    assert all(e.applies for e in effects.values())
    gold = build_gold_workspace(sc, tmp_path / "gold")
    hashes = hash_inputs(sc.inputs_dir)
    base = evaluate(sc, gold, hashes)
    assert base.D and not base.E
    for k in DEFECTS:
        ws = dx.copy_workspace(gold, tmp_path / k)
        if k == "text_substitutes":
            for d in sc.file_deliverables:
                if d.kind in ("xlsx", "docx", "pdf"):
                    dx.text_substitute(ws, d.name)
        else:
            dx.apply_defect(NAMED_DEFECTS[k], sc, ws, np.random.default_rng(0))
        ev = evaluate(sc, ws, hashes)
        if effects[k].effect == "E":
            assert ev.E, k
        else:
            assert not ev.D and not ev.E, f"{k} should break D only: {[c.id for c in ev.failed]}"
            assert run_selfcheck(ws, sc).passed is (not effects[k].caught_by_selfcheck), k


def test_what_the_derivation_gives_without_running_anything():
    truth = dry_run.planted_acceptance(draws=2_000, judge_draws=500, seed=3)
    by = truth.by_scenario
    assert list(truth.summary.columns) == ["arm", "planted_p", "mc_se"]
    # The arm's value is the equal-weight mean over the scenarios, as the estimator's target.
    for a, grp in by.groupby("arm"):
        assert truth.planted(a) == pytest.approx(grp["planted_p"].mean())
    # A0 delivers text in place of every binary file: only the CSV-only scenario can be accepted.
    a0 = by[by.arm == "A0"].set_index("scenario")["planted_p"]
    assert (a0.drop(OPS) == 0).all() and a0[OPS] > 0.5
    assert ((by.planted_p >= 0) & (by.planted_p <= by.p_DE + 1e-12)).all()
    assert (by.loc[by.arm != "A4", "p_resume"] == 0).all() and (by.loc[by.arm == "A4", "p_resume"] > 0).all()
    # Deterministic from the seed; q = 100 is out of reach for almost every draw.
    again = dry_run.planted_acceptance(draws=2_000, judge_draws=500, seed=3)
    assert again.summary.equals(truth.summary)
    strict = dry_run.planted_acceptance(q=100, scenarios=[OPS], arms=["A1"], draws=500, judge_draws=500, seed=3)
    assert strict.planted("A1") < truth.by_scenario.set_index(["scenario", "arm"]).loc[(OPS, "A1"), "planted_p"]


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="q = 140"):
        dry_run.planted_acceptance(q=140, scenarios=[OPS], draws=200, judge_draws=200)
    with pytest.raises(ValueError, match="A9"):
        dry_run.planted_acceptance(arms=["A9"], scenarios=[OPS], draws=200, judge_draws=200)
    model = load_model()
    model["arms"] = {k: v for k, v in model["arms"].items() if k != "A2"}
    with pytest.raises(dry_run.DryRunModelError, match="arms.A2"):
        dry_run.planted_acceptance(agent_model=model, scenarios=[OPS], draws=200, judge_draws=200)


def _table(backend: str, n_scenarios: int = 3):
    from pilot.simulated import synthetic

    df = synthetic.generate_runtable(7, n_scenarios=n_scenarios, repeats=2, sensitivity_wave=False)
    return df.assign(backend=backend, judge_backend="simulated" if backend == "simulated" else None)


def test_the_primary_stage_truth_for_each_kind_of_run_table(tmp_path):
    from pilot.simulated import synthetic
    from pilot.stats import primary

    tables, gen = tmp_path / "t", tmp_path / "g"
    # A dry run of the harness: planted from the simulated agent's and judges' models, over the table's scenarios.
    runs = _table("simulated")
    acc = primary.primary_analysis(runs, seed=1, B=200, n_permutations=100).acceptance
    truth = dry_run.truth_for(runs, acc, seed=1, draws=2_000, judge_draws=500)
    assert truth is not None and truth.kind == "harness"
    assert set(truth.by_scenario["scenario"]) == set(runs["scenario"])
    direct = dry_run.planted_acceptance(scenarios=sorted(set(runs["scenario"])), seed=1, draws=2_000, judge_draws=500)
    assert truth.summary.set_index("arm")["planted_p"].to_dict() == pytest.approx(
        direct.summary.set_index("arm")["planted_p"].to_dict()
    )
    s = truth.summary
    assert list(s.columns) == ["arm", "planted_p", "planted_mc_se", "p_hat", "ci_low", "ci_high", "covered"]
    assert (s["covered"] == ((s.ci_low <= s.planted_p) & (s.planted_p <= s.ci_high))).all()
    written = dry_run.write_truth(truth, tables, gen)
    tex = written[dry_run.TRUTH_TABLE_TEX].read_text()
    assert (
        "\\caption{\\textbf{SIMULATED.}" in tex
        and "\\label{tab:dry-run-truth}" in tex
        and "simulated\\_agent.yml" in tex
    )
    macros = written[dry_run.TRUTH_MACROS_TEX].read_text()
    assert (
        "\\newcommand{\\DryRunKind}{harness}" in macros
        and f"\\newcommand{{\\DryRunCovered}}{{{truth.n_covered}}}" in macros
    )
    assert "\\newcommand{\\DryRunPlantedAThree}" in macros
    assert len(pd.read_csv(tables / dry_run.TRUTH_CSV)) == 5

    # Real judges on simulated work follow no stated model, and a real table has no planted truth: nothing, and old
    # files go.
    assert dry_run.truth_for(runs.assign(judge_backend="claude-code"), acc, seed=1) is None
    real = runs.assign(backend="claude-code", judge_backend="claude-code")
    assert dry_run.truth_for(real, acc, seed=1) is None
    removed = dry_run.remove_truth(tables, gen)
    assert {p.name for p in removed} >= {dry_run.TRUTH_CSV, dry_run.TRUTH_TABLE_TEX, dry_run.TRUTH_MACROS_TEX}
    assert not (gen / dry_run.TRUTH_TABLE_TEX).exists()

    # The synthetic generator's table: its own planted acceptance, for the scenarios as the table describes them.
    syn = _table(synthetic.BACKEND)
    acc = primary.primary_analysis(syn, seed=1, B=200, n_permutations=100).acceptance
    truth = dry_run.truth_for(syn, acc, seed=1, synthetic_draws=2_000)
    assert truth.kind == "synthetic" and truth.by_scenario is None
    specs = synthetic.study_scenarios(7, 3)
    own = synthetic.planted_acceptance(specs=specs, draws=2_000, seed=1).set_index("arm")["p_equal"]
    assert truth.summary.set_index("arm")["planted_p"].to_dict() == pytest.approx(own.to_dict())
