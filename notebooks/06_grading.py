# %% [markdown]
# # Stage 06 — expert grading and the LLM judges
#
# The calibration wave that A-005 deferred: experts of each scenario's
# occupation grade a sample of the study's packages blind, with the study's
# own rubric (`pilot grading create` / `serve`, `protocol/human/evaluation.md`).
# This stage compares their grades with the LLM panel's: Krippendorff's alpha
# among the experts and between the panel and the experts, agreement of the
# accept decisions (percent and Cohen's kappa) beside GDPval's 71 % and 66 %,
# the panel's bias (panel minus experts) per arm and in the primary contrast,
# and H1 recomputed on the experts' grades where the coverage allows.
#
# `wave` names the grading wave; empty takes the study's most recent wave of
# experts' grades, and with none the stage writes that the wave was not run.
# A dry run's wave comes from SIMULATED graders (`pilot grading simulate`,
# `analysis/config/simulated_graders.yml`) with a planted bias, and the stage
# says whether its interval recovers it. All logic lives in `pilot.grading`.

# %% tags=["parameters"]
seed: int = 20260415  # seed of the bootstrap over packages (and of H1's scenario bootstrap)
tables_dir: str = "analysis/tables"  # folder for the grading_*.csv tables
figures_dir: str = "manuscript/figures"  # folder for grading_bias.pdf (the panel's bias per arm)
generated_dir: str = "manuscript/generated"  # folder for LaTeX tables, figure, grading_text.tex, grading_macros.tex
study_name: str = "pilot-simulated"  # study whose grading wave is analysed
wave: str = ""  # grading wave; "": the study's most recent wave of experts' grades (none: not run)
grades: str = ""  # the coordinator's export (CSV) to read instead of the store's grades
bootstrap_resamples: int = 0  # B over packages; 0 takes study.yml inference.bootstrap_resamples

# %%
import dataclasses
import time

from pilot import paths, protocol
from pilot.grading import report as grading_report
from pilot.grading import store as grading_store
from pilot.human import store as human_store
from pilot.report.inline import say, show_figures
from pilot.simulated.graders import read_truth

study = protocol.study()
tables, figures, generated = (paths.from_root(d) for d in (tables_dir, figures_dir, generated_dir))
folder = paths.study_dir(study_name)
started = time.perf_counter()
not_run = ""
chosen = wave
if not (folder / "study.sqlite").is_file():
    not_run = f"study {study_name} has no store"
else:
    with grading_store.open_store(folder) as st:
        waves = {w: grading_store.wave(st.conn, w) for w in grading_store.waves(st.conn)}
    if chosen and chosen not in waves:
        raise grading_store.GradingError(
            f"study {study_name} has no grading wave {chosen!r} (waves: {', '.join(waves) or 'none'})"
        )
    if not chosen:
        experts = [w for w, info in waves.items() if info.source == "experts"]
        chosen = experts[-1] if experts else ""
        if not chosen:
            not_run = f"study {study_name} has no wave of experts' grades"
# The study's human wave (people, SIMULATED participants, or none): the sentence on which waves of people ran says it.
human_source = ",".join(sorted(human_store.study_sources(folder)))
print("grading wave:", chosen or f"none ({not_run})")

# %% [markdown]
# ## Agreement and the panel's bias
#
# Every estimate is a number with its interval or "not estimable (reason)";
# the coverage table counts every package left out and why.

# %%
if not_run:
    grading_report.write_not_run(generated, not_run, human_source=human_source)
    text = grading_report.write_text(None, generated, not_run=not_run)
    say(f"The expert grading wave was not run: {not_run}.")
else:
    result = grading_report.load_report(
        folder,
        chosen,
        grades_csv=paths.from_root(grades) if grades else None,
        seed=seed,
        B=bootstrap_resamples or None,
        study=study,
    )
    result = dataclasses.replace(result, human_source=human_source)
    truth = read_truth(folder, chosen) if result.source == "simulated" else None
    written = grading_report.write_grading_outputs(result, tables, generated)
    text = grading_report.write_text(result, generated, truth=truth)
    for sentence in grading_report.grading_sentences(result, truth):
        say(sentence)
    # The tables as the manuscript labels them: a simulated wave's rows name its stand-ins, not experts.
    who = grading_report.who_graded(result)
    display(grading_report.in_graders_words(result.coverage, who))  # noqa: F821
    grading_report.in_graders_words(result.summary, who)

# %% [markdown]
# ## Per arm

# %%
if not not_run:
    drawn = grading_report.bias_figure(result, figures, generated)
    show_figures([drawn[grading_report.FIGURE_FILE]])
    display(grading_report.in_graders_words(result.bias, who))  # noqa: F821
    grading_report.in_graders_words(result.h1, who)

# %%
print(f"stage 06 took {time.perf_counter() - started:.1f} s")
