# %% [markdown]
# # Stage 05 — sensitivity analyses and secondary endpoints
#
# The preregistered sensitivities of the primary analysis: the quality
# threshold $q$ from 50 to 90, professional-minutes weights, a
# cluster-robust logistic regression of $S$ on arm, Kaplan-Meier curves of
# time to completion with cap-censored runs and log-rank tests, and joint
# bootstraps of cost per accepted deliverable. The secondary endpoints: $D$,
# $Q$, $E$, cost, wall time, process counts, abstention, the acceptance
# frontiers over budgets and human-time allowances, the Autonomous Recovery
# Index of A4, and the agreement of the three judges. H4 and H7 (the latter
# exploratory) are judged here.
#
# By default the stage reads the run table that study `study_name` exported, the
# table the manuscript is built from; `runs = "synthetic"` draws the same
# SIMULATED synthetic run table as the primary stage (same seed), and every
# output then says so. Paths are read from the repository root, whatever the
# working directory.

# %% tags=["parameters"]
seed: int = 20260415  # seed of the resampling (and of the synthetic table when runs is empty)
tables_dir: str = "analysis/tables"  # folder for the sensitivity_*.csv tables
figures_dir: str = "manuscript/figures"  # folder for the Kaplan-Meier, frontier and q-grid figures
generated_dir: str = "manuscript/generated"  # folder for the LaTeX tables, figures and sensitivity_macros.tex
study_name: str = "pilot-simulated"  # study whose exported run table is analysed when runs is empty
runs: str = ""  # run table (CSV) to analyse instead; "synthetic": a SIMULATED synthetic table drawn with seed
allow_unisolated: bool = False  # analyse real runs made without the sandbox (development only); refused by default
bootstrap_resamples: int = 0  # B; 0 takes study.yml inference.bootstrap_resamples
permutations: int = 0  # sign-flip permutations; 0 takes study.yml inference.permutations

# %%
import time

import pandas as pd

from pilot import paths, protocol
from pilot.report import sentences, stage_outputs
from pilot.report.inline import say, show_figures
from pilot.stats import stage_computations

study = protocol.study()
tables, figures, generated = (paths.from_root(d) for d in (tables_dir, figures_dir, generated_dir))
started = time.perf_counter()
data = stage_outputs.open_stage(runs, seed, tables, study=study_name, allow_unisolated=allow_unisolated)
stage = stage_computations.sensitivity_stage(
    data.runs, seed=seed, study=study, B=bootstrap_resamples or None, n_permutations=permutations or None
)
results = stage.results
# starts every sentence about numbers that are no finding (SIMULATED, REHEARSAL)
label = sentences.data_prefix(data.label, data.synthetic)
primary_name = "-".join(study.primary_contrast.arms)

# %% [markdown]
# ## The quality threshold and the scenario weights

# %%
say(sentences.q_grid_sentence(results["q_grid"].table, primary_name, prefix=label))
display(results["q_grid"].summary)  # noqa: F821
mw = results["minutes_weighted"].contrasts
say(
    sentences.contrast_sentence(
        mw[mw["contrast"] == primary_name].iloc[0], prefix=label + "Weighted by professional minutes, "
    )
)
results["minutes_weighted"].summary

# %% [markdown]
# ## Cluster-robust logistic regression
#
# Odds ratios of acceptance against the primary contrast's control arm, with
# standard errors clustered by scenario.

# %%
say(
    sentences.logistic_sentence(
        results["logistic"].table,
        f"{study.primary_contrast.treated} vs {study.primary_contrast.control}",
        note=str(results["logistic"].details.get("note") or ""),
        prefix=label,
    )
)
results["logistic"].summary

# %% [markdown]
# ## Time to completion
#
# A run is an event when it completed; a run that reached a cap (or ended in
# an error) is censored at its wall time.

# %%
say(sentences.km_sentence(results["kaplan_meier"].table, results["kaplan_meier"].details["tests"], prefix=label))
display(results["kaplan_meier"].summary)  # noqa: F821
results["kaplan_meier"].details["tests_summary"]

# %% [markdown]
# ## Cost per accepted deliverable, frontiers and secondary endpoints

# %%
say(sentences.cost_sentence(results["cost_per_accepted"].table, prefix=label))
display(results["cost_per_accepted"].summary)  # noqa: F821
say(sentences.secondary_sentence(results["secondary"].table, prefix=label))
results["secondary"].summary

# %% [markdown]
# ## Recovery and judge agreement

# %%
say(sentences.recovery_sentence(results["recovery_index"].table, prefix=label))
display(results["recovery_index"].summary)  # noqa: F821
say(sentences.agreement_sentence(results["agreement"].table, prefix=label))
results["agreement"].summary

# %% [markdown]
# ## H4 and H7
#
# H4: acceptance falling with designed depth and realised tool calls. H7:
# heterogeneity of the premium across occupations, exploratory only.

# %%
hyps = stage.hypotheses
for h in hyps:
    say(sentences.hypothesis_sentence(h, prefix=label))
    display(h.summary)  # noqa: F821

# %% [markdown]
# ## Figures and outputs
#
# The figures below are the ones the manuscript prints: contrasts across the
# quality threshold, Kaplan-Meier curves, and the two acceptance frontiers
# (one panel per arm). CSV tables go to `tables_dir`; LaTeX tables, figure
# environments and macros to `generated_dir`; figures to `figures_dir`.

# %%
# The summary of all seven hypotheses joins the primary stage's rows (H1-H3, H5, H6, read back from its CSV
# table for the same study) to H4 and H7 from this stage.
primary_rows_file = tables / "primary_hypotheses.csv"
primary_rows = pd.read_csv(primary_rows_file, keep_default_na=False) if primary_rows_file.is_file() else None
written = stage_outputs.write_sensitivity(
    results, hyps, data, tables_dir, figures_dir, generated_dir, study=study, primary_hypotheses=primary_rows
)
show_figures(written.values())
print(
    f"{len(written)} files written under {tables.name}/, {figures.name}/ and {generated.name}/ "
    f"in {time.perf_counter() - started:.2f} s"
)
