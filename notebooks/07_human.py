# %% [markdown]
# # Stage 07 — the human wave beside the agent arms
#
# The design's human conditions: H0, professionals without AI, and H1, with
# conversational assistance (`protocol/human/`, A-028). Their sessions are
# runs of the study evaluated by the same oracle, input-hash check and three
# blind judges as the agents' (`pilot human`), and their run table is
# `human_runs.csv` beside the agents' `runs.csv`.
#
# This stage puts each condition beside each agent arm with the primary
# analysis's estimator (scenario-weighted acceptance, equal weights) and
# scenario-cluster bootstrap, over the scenarios the human wave covers; the
# contrasts (H1 − H0, and each condition minus each agent arm) are paired
# within scenario and descriptive: none is confirmatory. Beside them, time on
# task per condition (the agents' wall time for reference) and the H1
# assistant's metered cost.
#
# A dry run's wave is of SIMULATED participants (`pilot human simulate`,
# `analysis/config/simulated_participants.yml`): every output then says
# SIMULATED and that no person took part, and the stage checks the estimates
# against the model's planted truth. Without a wave the stage writes that the
# human wave was not run. All logic lives in `pilot.human`.

# %% tags=["parameters"]
seed: int = 20260415  # seed of the bootstrap and the sign-flip permutations
tables_dir: str = "analysis/tables"  # folder for human_*.csv
figures_dir: str = "manuscript/figures"  # folder for human_acceptance.pdf
generated_dir: str = "manuscript/generated"  # folder for the LaTeX tables, human_macros.tex and human_text.tex
study_name: str = "pilot-simulated"  # study whose agent run table (runs.csv) the conditions are set beside
human_study: str = ""  # study holding the human wave (its human_runs.csv); "": study_name
bootstrap_resamples: int = 0  # B; 0 takes study.yml inference.bootstrap_resamples
permutations: int = 0  # sign-flip permutations; 0 takes study.yml inference.permutations

# %%
import time

import pandas as pd

from pilot import paths, protocol, runtable
from pilot.human import analysis, export
from pilot.human import report as human_report
from pilot.report.inline import say, show_figures
from pilot.simulated import participants as simulated_participants

pd.set_option("display.width", 160)
study = protocol.study()
tables, figures, generated = (paths.from_root(d) for d in (tables_dir, figures_dir, generated_dir))
started = time.perf_counter()
people_study = human_study or study_name
agents_file = paths.study_runs_file(study_name)
human_file = paths.study_human_runs_file(people_study)
not_run = ""
if not human_file.is_file():
    not_run = f"study {people_study} has no human wave's run table ({paths.shown(human_file)})"
elif not agents_file.is_file():
    not_run = f"study {study_name} has no agent run table ({paths.shown(agents_file)}) to set the wave beside"
print("human wave:", paths.shown(human_file) if not not_run else f"not run ({not_run})")

# %% [markdown]
# ## Acceptance beside the agent arms
#
# A session without any judge's score has no S and drops out of its
# scenario's repeat mean (`n_scored` counts those that remain).

# %%
if not_run:
    human_report.write_not_run(generated, not_run)
    say(f"The human wave was not run: {not_run}. No person took part.")
else:
    agents = runtable.read_runtable(agents_file)
    humans = export.read_human_table(human_file)
    result = analysis.compare(
        agents, humans, seed=seed, study=study, B=bootstrap_resamples or None, n_permutations=permutations or None
    )
    written = human_report.write_outputs(result, tables, figures, generated)
    for sentence in human_report.sentences(result):
        say(sentence.replace("\\%", "%").replace("$-$", "−"))
    display(result.acceptance_summary)  # noqa: F821 (IPython)

# %% [markdown]
# ## The contrasts, time on task and the assistant

# %%
if not not_run:
    display(result.summary)  # noqa: F821
    display(result.time)  # noqa: F821
    display(result.assistant)  # noqa: F821
    show_figures([written[human_report.FIGURE_FILE]])

# %% [markdown]
# ## A dry run's planted truth
#
# SIMULATED participants come from a stated model whose truth was written
# before the draw. Here each condition's estimated P(D = 1) is set beside the
# planted one (`covered`: inside the 95% interval) and the share of sessions
# that reached the wall limit beside its planted probability. A wave of
# people has no such truth.

# %%
if not not_run and not result.people:
    waves = sorted(set(humans["run_id"].str.split(".").str[2]))
    truth = simulated_participants.read_truth(paths.study_dir(people_study), waves[-1])
    if truth is not None:
        check = simulated_participants.truth_check(humans, truth, seed=seed, B=bootstrap_resamples or 2000)
        check.to_csv(tables / "human_truth.csv", index=False)
        say(
            f"SIMULATED (no person took part): the planted P(D = 1) lies inside the nominal 95% interval in "
            f"{int(check['covered'].sum())} of {len(check)} conditions."
        )
        display(check)  # noqa: F821

# %%
print(f"stage 07 took {time.perf_counter() - started:.1f} s")
