# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Stage 04 — the primary analysis
#
# The preregistered primary endpoint is acceptance,
# $S = \mathbf{1}\{D=1, E=0, Q\ge q\}$ with $q=70$, where $Q$ is the mean of
# the judges available for the run (missing, never zero, when no judge is).
# Each arm's acceptance is the scenario-weighted mean of the scenarios'
# repeat means, $\hat p_a = J^{-1}\sum_j R_j^{-1}\sum_r S_{jra}$.
#
# The contrasts come from `protocol/study.yml`: the primary A3−A1 and the
# secondary A1−A0, A4−A3 and A2−A1, whose p-values are Holm-adjusted over the
# three. Intervals: scenario-cluster percentile bootstrap (scenarios
# resampled with replacement, B = 5,000). Tests: paired sign-flip permutation
# over scenarios (exact enumeration when 2^J is at most the permutation
# count). The stage also judges H1, H2, H3, H5 and H6.
#
# With `runs` empty the stage draws a SIMULATED synthetic run table from the
# generative model in `analysis/config/synthetic_runtable.yml`; every output
# then says SIMULATED. All logic lives in `pilot.stats`.

# %% tags=["parameters"]
seed: int = 20260415  # seed of the bootstrap and permutations (and of the synthetic table when runs is empty)
tables_dir: str = "analysis/tables"  # folder for primary_acceptance.csv, primary_contrasts.csv, primary_hypotheses.csv
figures_dir: str = "manuscript/figures"  # folder for primary_forest.pdf
generated_dir: str = "manuscript/generated"  # folder for the LaTeX tables, figure environments and primary_macros.tex
runs: str = ""  # path of the run table (CSV); empty: a SIMULATED synthetic table drawn with seed
allow_unisolated: bool = False  # analyse real runs made without the sandbox (development only); refused by default
bootstrap_resamples: int = 0  # B; 0 takes study.yml inference.bootstrap_resamples
permutations: int = 0  # sign-flip permutations; 0 takes study.yml inference.permutations

# %%
import time

from pilot import dry_run, protocol
from pilot.stats import stage_computations, stage_outputs

study = protocol.study()
started = time.perf_counter()
data = stage_outputs.open_stage(runs, seed, tables_dir, allow_unisolated)
print(len(data.runs), "runs in the table; worker model:", study["worker"]["model"])

# %% [markdown]
# ## Acceptance per arm
#
# Runs without any judge output have no $S$ and drop out of their scenario's
# repeat mean (`n_scored` counts the runs that remain).

# %%
stage = stage_computations.primary_stage(
    data.runs, seed=seed, study=study, B=bootstrap_resamples or None, n_permutations=permutations or None
)
result = stage.result
result.acceptance_summary

# %% [markdown]
# ## The preregistered contrasts
#
# `p_value` is the two-sided sign-flip p; `p_holm` adjusts the three
# secondary contrasts (the primary one stands alone).

# %%
result.summary

# %% [markdown]
# ## Hypotheses judged here
#
# H1 (primary premium), H2 (shell premium), H3 (self-repair premium and the
# Autonomous Recovery Index), H5 (critical violations) and H6 (cost per
# accepted deliverable). Each verdict applies the criterion stated beside it
# to this run table; H4 and H7 are in the sensitivity stage.

# %%
hyps = stage.hypotheses
for h in hyps:
    print(f"{h.id}: {h.statement} -> {h.verdict}")
    display(h.summary)  # noqa: F821 (IPython)

# %% [markdown]
# ## Outputs
#
# CSV tables to `tables_dir`; LaTeX tables, the forest-plot figure
# environment and one macro per cited number to `generated_dir`; the forest
# plot to `figures_dir`.

# %%
written = stage_outputs.write_primary(result, hyps, data, tables_dir, figures_dir, generated_dir)
for name, path in written.items():
    print(f"{name:36s} {path}")
print(f"primary stage computations and outputs: {time.perf_counter() - started:.2f} s")

# %% [markdown]
# ## The dry run's known truth
#
# A SIMULATED run table has a truth to check the estimates against. For a
# dry run of the harness (`backend` simulated) it is the acceptance each arm
# was planted with, derived from the two stated models the simulated agent
# and judges read (`analysis/config/simulated_agent.yml`,
# `analysis/config/simulated_judges.yml`; `pilot.dry_run`); for a synthetic
# table it is the generator's own (`pilot.stats.synthetic`). `covered` says
# whether the arm's 95% interval holds the planted value. A real run table
# has no such truth: nothing is written, and files left by an earlier dry
# run are removed.

# %%
truth = dry_run.truth_for(data.runs, result.acceptance, seed=seed, study=study)
if truth is None:
    removed = dry_run.remove_truth(tables_dir, generated_dir)
    print("real run table: no planted truth" + (f"; removed {', '.join(map(str, removed))}" if removed else ""))
else:
    for name, path in dry_run.write_truth(truth, tables_dir, generated_dir).items():
        print(f"{name:36s} {path}")
    print(f"SIMULATED ({truth.kind}): the planted value lies in {truth.n_covered} of {len(truth.summary)} intervals")
    display(truth.summary)  # noqa: F821 (IPython)
