# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

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
# With `runs` empty the stage draws the same SIMULATED synthetic run table as
# the primary stage (same seed); every output then says SIMULATED.

# %% tags=["parameters"]
seed: int = 20260415  # seed of the resampling (and of the synthetic table when runs is empty)
tables_dir: str = "analysis/tables"  # folder for the sensitivity_*.csv tables
figures_dir: str = "manuscript/figures"  # folder for the Kaplan-Meier, frontier and q-grid figures
generated_dir: str = "manuscript/generated"  # folder for the LaTeX tables, figure environments and sensitivity_macros.tex
runs: str = ""  # path of the run table (CSV); empty: a SIMULATED synthetic table drawn with seed
allow_unisolated: bool = False  # analyse real runs made without the sandbox (development only); refused by default
bootstrap_resamples: int = 0  # B; 0 takes study.yml inference.bootstrap_resamples
permutations: int = 0  # sign-flip permutations; 0 takes study.yml inference.permutations

# %%
import time

from pilot import protocol
from pilot.stats import stage_computations, stage_outputs

study = protocol.study()
started = time.perf_counter()
data = stage_outputs.open_stage(runs, seed, tables_dir, allow_unisolated)
stage = stage_computations.sensitivity_stage(
    data.runs, seed=seed, study=study, B=bootstrap_resamples or None, n_permutations=permutations or None
)
results = stage.results

# %% [markdown]
# ## The quality threshold and the scenario weights

# %%
display(results["q_grid"].summary)  # noqa: F821
results["minutes_weighted"].summary

# %% [markdown]
# ## Cluster-robust logistic regression
#
# Odds ratios of acceptance against the primary contrast's control arm, with
# standard errors clustered by scenario.

# %%
results["logistic"].summary

# %% [markdown]
# ## Time to completion
#
# A run is an event when it completed; a run that reached a cap (or ended in
# an error) is censored at its wall time.

# %%
display(results["kaplan_meier"].summary)  # noqa: F821
results["kaplan_meier"].details["tests_summary"]

# %% [markdown]
# ## Cost per accepted deliverable, frontiers and secondary endpoints

# %%
display(results["cost_per_accepted"].summary)  # noqa: F821
results["secondary"].summary

# %% [markdown]
# ## Recovery and judge agreement

# %%
display(results["recovery_index"].summary)  # noqa: F821
results["agreement"].summary

# %% [markdown]
# ## H4 and H7
#
# H4: acceptance falling with designed depth and realised tool calls. H7:
# heterogeneity of the premium across occupations, exploratory only.

# %%
hyps = stage.hypotheses
for h in hyps:
    print(f"{h.id}: {h.statement} -> {h.verdict}")
    display(h.summary)  # noqa: F821

# %% [markdown]
# ## Outputs

# %%
written = stage_outputs.write_sensitivity(results, hyps, data, tables_dir, figures_dir, generated_dir, study=study)
for name, path in written.items():
    print(f"{name:44s} {path}")
print(f"sensitivity stage computations and outputs: {time.perf_counter() - started:.2f} s")
