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
# By default the stage reads the run table that study `study_name` exported
# (`analysis/data/<study>/runs.csv`, written by stages 01 and 02), so running
# it here gives the numbers the manuscript prints. `runs = "synthetic"`
# instead draws a SIMULATED synthetic run table from the generative model in
# `analysis/config/synthetic_runtable.yml`; every output then says so. Paths
# are read from the repository root, whatever the working directory. All
# logic lives in `pilot.stats`.

# %% tags=["parameters"]
seed: int = 20260415  # seed of the bootstrap and permutations (and of the synthetic table when runs is empty)
tables_dir: str = "analysis/tables"  # folder for primary_acceptance.csv, primary_contrasts.csv, primary_hypotheses.csv
figures_dir: str = "manuscript/figures"  # folder for primary_forest.pdf
generated_dir: str = "manuscript/generated"  # folder for the LaTeX tables, figure environments and primary_macros.tex
study_name: str = "pilot-simulated"  # study whose exported run table is analysed when runs is empty
runs: str = ""  # run table (CSV) to analyse instead; "synthetic": a SIMULATED synthetic table drawn with seed
allow_unisolated: bool = False  # analyse real runs made without the sandbox (development only); refused by default
bootstrap_resamples: int = 0  # B; 0 takes study.yml inference.bootstrap_resamples
permutations: int = 0  # sign-flip permutations; 0 takes study.yml inference.permutations

# %%
import time

from pilot import paths, protocol
from pilot.report import sentences, stage_outputs
from pilot.report.inline import say, show_figures
from pilot.simulated import dry_run
from pilot.stats import stage_computations

study = protocol.study()
tables, figures, generated = (paths.from_root(d) for d in (tables_dir, figures_dir, generated_dir))
started = time.perf_counter()
data = stage_outputs.open_stage(runs, seed, tables, study=study_name, allow_unisolated=allow_unisolated)
print(len(data.runs), "runs in the table; worker model:", study["worker"]["model"])
# starts every sentence about numbers that are no finding (SIMULATED, REHEARSAL)
label = sentences.data_prefix(data.label, data.synthetic)

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
say(sentences.acceptance_sentence(result.acceptance, prefix=label))
result.acceptance_summary

# %% [markdown]
# ## The preregistered contrasts
#
# `p_value` is the two-sided sign-flip p; `p_holm` adjusts the three
# secondary contrasts (the primary one stands alone).

# %%
alpha = 1 - result.settings.level
say(sentences.contrasts_sentences(result.contrasts, alpha=alpha, level=result.settings.level, prefix=label))
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
    say(sentences.hypothesis_sentence(h, prefix=label))
    display(h.summary)  # noqa: F821 (IPython)

# %% [markdown]
# ## The forest plot and the outputs
#
# The figure below is the one the manuscript prints. CSV tables go to
# `tables_dir`; the LaTeX tables, the figure environment and one macro per
# cited number to `generated_dir`; the figure to `figures_dir`.

# %%
written = stage_outputs.write_primary(result, hyps, data, tables_dir, figures_dir, generated_dir)
show_figures(written.values())
print(
    f"{len(written)} files written under {tables.name}/, {figures.name}/ and {generated.name}/ "
    f"in {time.perf_counter() - started:.2f} s"
)

# %% [markdown]
# ## The dry run's known truth
#
# A SIMULATED run table has a truth to check the estimates against. For a
# dry run of the harness (`backend` simulated) it is the acceptance each arm
# was planted with, derived from the two stated models the simulated agent
# and judges read (`analysis/config/simulated_agent.yml`,
# `analysis/config/simulated_judges.yml`; `pilot.simulated.dry_run`); for a synthetic
# table it is the generator's own (`pilot.simulated.synthetic`). `covered` says
# whether the arm's 95% interval holds the planted value. A real run table
# has no such truth: nothing is written, and files left by an earlier dry
# run are removed.

# %%
truth = dry_run.truth_for(data.runs, result.acceptance, contrasts=result.contrasts, seed=seed, study=study)
if truth is None:
    removed = dry_run.remove_truth(tables, generated)
    kind = f"{data.label} run table" if data.label else "real run table"  # a rehearsal's truth is its own report's
    print(f"{kind}: no planted truth" + (f"; removed {', '.join(map(str, removed))}" if removed else ""))
else:
    dry_run.write_truth(truth, tables, generated)
    say(
        f"SIMULATED ({truth.kind}): the planted acceptance lies inside the nominal 95% interval in {truth.n_covered} "
        f"of {len(truth.summary)} arms."
    )
    display(truth.summary)  # noqa: F821 (IPython)
    if truth.contrasts is not None:
        say(
            f"SIMULATED ({truth.kind}): the planted contrast lies inside the interval in "
            f"{int(truth.contrasts['covered'].sum())} of {len(truth.contrasts)} contrasts."
        )
        display(truth.contrasts)  # noqa: F821 (IPython)

# %% [markdown]
# ## The answer
#
# The sentence below restates the primary contrast with its label: a dry
# run or a synthetic table answers nothing about the agent under study.

# %%
say(sentences.contrast_sentence(result.contrasts.iloc[0], alpha=alpha, level=result.settings.level, prefix=label))
