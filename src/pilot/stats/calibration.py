"""Calibration of the primary inference on the synthetic generator, whose truth is known.

Many SIMULATED studies are drawn from the generative model; each is analysed
exactly as the primary stage analyses a run table (repeat means, the four
contrasts, the scenario-cluster percentile bootstrap and the sign-flip test).
Two conditions: ``planted`` (the model as stated) measures how often each
95 per cent interval covers the planted contrast, and ``null`` (A3's
parameters set to A1's) measures how often the primary test rejects at the
5 per cent level when there is no effect.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pilot import protocol
from pilot.stats import estimators, primary, synthetic
from pilot.stats.estimators import Layout
from pilot.stats.primary import InferenceSettings


@dataclass
class CalibrationResult:
    """Per condition and contrast: coverage, rejection rate, bias; ``studies`` holds every study's numbers."""

    summary: pd.DataFrame
    studies: pd.DataFrame


def _truth(model: synthetic.SyntheticModel, specs: list, contrasts: list, draws: int, study: protocol.Study) -> dict[str, float]:
    t = synthetic.planted_acceptance(model, specs=specs, draws=draws, study=study).set_index("arm")["p_equal"]
    return {estimators.contrast_name(c): float(t[c[0]] - t[c[1]]) for c in contrasts}


def run_calibration(
    n_studies: int = 1000,
    *,
    seed: int = 20260417,
    n_scenarios: int | None = None,
    repeats: int = 3,
    B: int | None = None,
    n_permutations: int | None = None,
    truth_draws: int = 1_000_000,
    progress: bool = False,
    study: protocol.Study | None = None,
) -> CalibrationResult:
    """Draw ``n_studies`` SIMULATED studies per condition and analyse each like the primary stage."""
    study = study or protocol.study()
    model = synthetic.SyntheticModel.load()
    contrasts = [tuple(c) for c in study.contrasts]
    treated, control = contrasts[0]
    settings = InferenceSettings.from_study(seed, study, B=B, n_permutations=n_permutations)
    alpha = 1 - settings.level
    conditions = {"planted": model, "null": model.with_null(treated, control)}
    records = []
    iterator = range(n_studies)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc="calibration", unit="study")
    # The scenarios are the design's (the stand-ins beyond the list are fixed by the seed), so the truth is computed once.
    specs = synthetic.study_scenarios(seed, n_scenarios, model, study)
    # truth_draws is the total over scenarios: each scenario's acceptance gets truth_draws / J draws.
    per_scenario = max(10_000, truth_draws // len(specs))
    truths = {name: _truth(m, specs, contrasts, per_scenario, study) for name, m in conditions.items()}
    for i in iterator:
        for name, m in conditions.items():
            df = synthetic.generate_runtable(seed * 1000 + i, repeats=repeats, model=m, sensitivity_wave=False, study=study, scenarios=specs)
            layout = Layout.of(df, study.arms)
            means = layout.means(estimators.acceptance_values(df, study.q))
            tab, _ = primary.contrast_table(
                means, layout, contrasts, layout.weights("equal"),
                InferenceSettings(settings.B, settings.n_permutations, seed * 1000 + i, settings.level),
                adjustment=None,
            )
            records.append(tab.assign(condition=name, study=i, planted=[truths[name][c] for c in tab.contrast]))
    studies = pd.concat(records, ignore_index=True)
    # Holm over the secondary contrasts of every study at once (equal to statsmodels, see the tests).
    if study["inference"]["secondary_adjustment"] == "holm":
        sec = studies[studies.role == "secondary"]
        k = len(contrasts) - 1
        studies.loc[sec.index, "p_holm"] = primary.holm_many(sec.p_value.to_numpy().reshape(-1, k)).ravel()
    else:
        studies.loc[studies.role == "secondary", "p_holm"] = primary.holm(studies.loc[studies.role == "secondary", "p_value"], method=study["inference"]["secondary_adjustment"])
    studies["covered"] = (studies.ci_low <= studies.planted) & (studies.planted <= studies.ci_high)
    studies["rejected"] = studies.p_holm.fillna(studies.p_value) < alpha
    J = len(specs)
    rows = []
    for (cond, con), g in studies.groupby(["condition", "contrast"], sort=False):
        n = len(g)
        cov, rej = g.covered.mean(), g.rejected.mean()
        rows.append({
            "condition": cond, "contrast": con, "J": J, "R": repeats, "studies": n, "planted": g.planted.iloc[0],
            "mean_estimate": g.estimate.mean(), "coverage": cov, "coverage_mc_se": np.sqrt(cov * (1 - cov) / n),
            "rejection": rej, "rejection_mc_se": np.sqrt(rej * (1 - rej) / n), "mean_ci_width": (g.ci_high - g.ci_low).mean(),
            "B": settings.B, "permutations": settings.n_permutations,
        })
    return CalibrationResult(pd.DataFrame(rows), studies)
