# %% [markdown]
# # Stage 02 — the scale rule and the later waves
#
# The pilot ran every scenario under every arm twice. Whether the study then
# grows was fixed before any run: with $\bar c$ the mean total cost of a pilot
# run (agent and judges, every attempt of the run) and $E_r$ the envelope not
# yet spent or reserved,
#
# 1. a third repeat is added if $1.15\,\bar c \times 50 \le E_r - 100$;
# 2. then the model sensitivities (the two sensitivity models on A3, two
#    repeats each) are run if $1.15\,\bar c \times 40$ fits in what remains
#    minus 50, what remains being $E_r$ less the third repeat's projected cost
#    when the third repeat was added (`protocol/interpretations.md`).
#
# Both $\bar c$ and $E_r$ are read from the study's ledger, never typed in.
# The constants come from `protocol/study.yml` (`scale_rule`). The stage writes
# the decision, its inputs and the amendment it implies; asked to, it also runs
# the waves the rule adds, and before a later wave is pooled with the pilot it
# checks the freeze manifest taken when the pilot started.
#
# The logic lives in `pilot.scale_rule`, `pilot.freeze`, `pilot.study_freeze` and
# `pilot.study`.

# %% tags=["parameters"]
study: str = "pilot-simulated"  # name of the study under analysis/data/ whose pilot has run
seed: int = 20260415  # seed of record for this stage (the waves reuse the study's own assignment seed)
tables_dir: str = "analysis/tables"  # folder for scale_rule_<study>.csv/.json/_amendment.txt and freeze_<study>.csv
figures_dir: str = "manuscript/figures"  # folder for scale_rule.pdf
generated_dir: str = "manuscript/generated"  # folder for scale_rule_macros.tex (one macro per number)
run_waves: bool = False  # also run the waves the rule adds (third repeat, then sensitivities)
backend: str = "simulated"  # backend of the added waves: simulated (dry run) or claude-code
executor: str = "local"  # executor of the added waves: local or dask
scheduler_address: str = ""  # dask scheduler address when executor is dask
export: bool = True  # export the run table afterwards (pooled when the freeze verification passes)

# %%
import pandas as pd
from IPython.display import display

from pilot import paths, scale_rule, study_freeze
from pilot.backends import SIMULATED_LABEL, label_of
from pilot.report import sentences
from pilot.report.inline import say, show_figures
from pilot.store import Store

pd.set_option("display.width", 140)
tables, figures, generated = (paths.from_root(d) for d in (tables_dir, figures_dir, generated_dir))
store = Store.open(paths.study_dir(study))
backends = store.backends_used()
data_label = label_of(backends) if backends else SIMULATED_LABEL  # SIMULATED, REHEARSAL, or "" for a real study
print(
    f"study {study}: backend {', '.join(backends) or 'none'}{f' ({data_label})' if data_label else ''}, "
    f"seed of record {seed}"
)
print(pd.DataFrame(store.status_by_arm()).to_string(index=False))

# %% [markdown]
# ## The inputs, from the ledger
#
# $\bar c$ is averaged over the finished pilot runs; each run's cost is what
# the ledger charged for all its attempts (an infrastructure retry that cost
# something counts toward its run). $E_r$ is the envelope less what is spent
# and what is still reserved.

# %%
inputs = scale_rule.inputs_from_store(store, "pilot")
n_scenarios = len(store.study().scenarios)  # the rule's run counts follow the study's scenario set
decision = scale_rule.decide(inputs, n_scenarios=n_scenarios)
problems = store.audit()
assert not problems, problems
decision.summary

# %% [markdown]
# ## The decision and the amendment it implies

# %%
written = scale_rule.write_decision(
    decision, study, simulated=data_label, tables_dir=tables, generated_dir=generated, figures_dir=figures
)
say(
    sentences.data_prefix(data_label)
    + decision.amendment_text()
    + " This is this study's decision, from its own ledger; amendment A-009 records the recorded study's."
)
show_figures(written.values())
store.close()

# %% [markdown]
# ## The added waves and the freeze verification
#
# With `run_waves` set, each wave the rule adds runs through the same
# scheduler, store and envelope as the pilot. Pooling with the pilot is
# allowed only when no scenario, oracle, rubric or arm text changed since the
# pilot started; any change is listed file by file below and blocks pooling
# (`pilot study export` then refuses to pool).

# %%
if run_waves:
    from pilot.study import run_study_wave

    for wave in decision.waves:
        res = run_study_wave(
            study,
            wave=wave,
            backend=backend,
            executor=executor,
            scheduler_address=scheduler_address or None,
            progress=True,
        )
        print(res.summary.to_string())

with Store.open(paths.study_dir(study)) as store:
    info = store.study()
    # Through the study's lock: oracle code refactored since the pilot passes when its verdicts are the frozen ones.
    report = study_freeze.verify(store) if info.freeze_manifest is not None else None
print("\n".join(report.lines()) if report is not None else "no freeze manifest: the pilot has not started")
study_freeze.write_outputs(report, info, tables, generated)

# %% [markdown]
# ## The pooled run table
#
# When the freeze verification passes, the later waves are pooled with the
# pilot and the run table is exported again; otherwise only the pilot is
# exported and the later waves stay out of every analysis.

# %%
from pilot.study import export_run_table

pooled = report is not None and report.ok
if export:
    runs_path, runs = export_run_table(study, pilot_only=not pooled)
    print(f"wrote {runs_path}: {len(runs)} rows ({'pooled' if pooled else 'pilot only'})")
    display(runs.groupby(["wave", "arm"]).size().unstack(fill_value=0))

# %% [markdown]
# ## This run in numbers
#
# The flow of the study's cells (planned, dispatched, attempts and
# infrastructure reruns, failed, finished, censored, judged, analysed), the
# same path for each arm, the protocol's fidelity per arm (deviations by what
# stopped them, critical violations, agent errors, caps reached, nodes) and
# what the ledger charged per arm and wave against the envelope. The
# manuscript's section on this run prints these tables, this figure and
# these numbers; all come from the store and the exported run table.

# %%
from pilot.report import run_report

exported = (
    runs if export else (pd.read_csv(paths.study_runs_file(study)) if paths.study_runs_file(study).is_file() else None)
)
with Store.open(paths.study_dir(study)) as store:
    report = run_report.collect(store, exported)
written = run_report.write(report, tables, figures, generated)
prefix = sentences.data_prefix(report.label)
say(
    f"{prefix}Of {report.count('planned')} planned runs, {report.count('finished')} finished and "
    f"{report.count('failed')} failed, after {report.count('attempts')} attempts "
    f"({report.count('infrastructure reruns')} infrastructure reruns); {report.count('censored')} were "
    f"censored at a cap, {report.count('judged')} judged and {report.count('analysed')} analysed."
)
display(report.flow)
say(
    f"{prefix}The ledger charged {sentences.usd(report.balance.spent_usd)} of the "
    f"{sentences.usd(report.balance.envelope_usd)} envelope ({sentences.usd(report.balance.reserved_usd)} "
    f"still reserved, {sentences.usd(report.balance.remaining_usd)} left)."
)
display(report.ledger.round(2))
fid = report.fidelity.set_index("measure")["all"]
say(
    f"{prefix}Protocol fidelity: {fid['runs with a deviation']} finished runs recorded a deviation, "
    f"{fid['runs with a critical violation (E)']} a critical violation and {fid['agent errors']} an agent "
    f"error; {fid['evaluation errors']} evaluations failed."
)
display(report.flow_by_arm)
display(report.fidelity)
show_figures(written.values())
