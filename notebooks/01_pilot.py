# %% [markdown]
# # Stage 01 — the pilot wave
#
# The preregistered pilot runs every scenario under every arm twice
# (10 scenarios x 5 arms x 2 repeats). This stage creates the study, runs the
# pilot wave through the scheduler (seeded order, least-loaded eligible node,
# dollar envelope), evaluates every run with the oracles and the input-hash
# check, has the three blind judges score it, and exports the run table that
# every later stage reads.
#
# With the default `backend = "simulated"` this is a dry run: the agent is the
# scenario's reference solver with defects drawn from the stated generative
# model in `analysis/config/simulated_agent.yml`, and the judges follow
# `analysis/config/simulated_judges.yml`. Everything the dry run writes says
# SIMULATED. With `backend = "claude-code"` the pinned Claude Code CLI does the
# work and real money is spent, never more than the envelope in
# `protocol/study.yml`.
#
# The logic lives in `pilot.study` (create, run, export), `pilot.schedule`,
# `pilot.runner`, `pilot.oracles`, `pilot.judges` and `pilot.outcomes`.

# %% tags=["parameters"]
study: str = "pilot-simulated"  # name of the study folder under analysis/data/
backend: str = "simulated"  # simulated (dry run, embedded default) or claude-code (real, needs ANTHROPIC_API_KEY)
executor: str = "local"  # local (process pool over virtual nodes) or dask
scheduler_address: str = ""  # dask scheduler address, e.g. tcp://10.0.0.5:8786, when executor is dask
nodes: str = ""  # nodes file for the local executor; empty means analysis/config/nodes.yml
workers: int = 0  # worker processes for the local executor; 0 means the nodes' total slots
seed: int = 20260415  # assignment seed; the preregistered one is design.assignment_seed in protocol/study.yml
fresh: bool = False  # delete an existing dry-run or rehearsal study of this name first (refused for a real study)
scenario_set: str = ""  # scenario set of protocol/study.yml for a new study; empty means the design's own (pilot)
tables_dir: str = "analysis/tables"  # folder for the pilot's status table
figures_dir: str = "manuscript/figures"  # folder for figures (this stage writes none)
generated_dir: str = "manuscript/generated"  # folder for study_macros.tex

# %%
import pandas as pd

from pilot import backends, paths, protocol
from pilot.report import pilot_wave, sentences
from pilot.report.inline import say
from pilot.store import STORE_FILE, Store
from pilot.study import create_study, export_run_table, run_study_wave, status_table

pd.set_option("display.width", 160)
tables, generated = paths.from_root(tables_dir), paths.from_root(generated_dir)
tables.mkdir(parents=True, exist_ok=True)
label = backends.label(backend)  # SIMULATED, REHEARSAL, or "" for the real study: the registry says which
prefix = f"{label} ({backends.qualifier(label)}): " if label else ""
folder = paths.study_dir(study)
print(f"study {study} in {folder}; backend {backend} ({label or 'a finding'}); executor {executor}")

# %% [markdown]
# ## The study
#
# A study is created once; running this stage again resumes it. The seed
# fixes the order of the cells byte for byte. A dry run may be started over
# with `fresh = True`, holding the study's lock as `pilot study create --fresh`
# does; a real study is never deleted here.

# %%
if fresh or not (folder / STORE_FILE).exists():
    create_study(
        study,
        seed=seed,
        nodes_file=paths.from_root(nodes) if nodes else None,
        scenario_set=scenario_set or None,
        fresh=fresh,
    ).close()
with Store.open(folder) as store:
    info = store.study()
set_name = protocol.study().set_of(info.scenarios)  # None: a list named at creation, not a set of study.yml
if scenario_set and set_name != scenario_set:
    raise RuntimeError(
        f"study {study} holds {len(info.scenarios)} scenarios, not scenario set {scenario_set!r}: "
        "name another study or start it afresh"
    )
print(
    f"seed {info.seed}; scenario set {set_name or '(a list)'}; {len(info.scenarios)} scenarios: "
    f"{', '.join(info.scenarios)}"
)

# %% [markdown]
# ## The pilot wave
#
# Cells are drawn in their seeded order and dispatched to the least-loaded
# node that can serve the arm. A run that reaches a cap is evaluated as
# delivered and marked censored; an infrastructure error is rerun under the
# same run id, and every attempt is kept.

# %%
result = run_study_wave(
    study,
    wave="pilot",
    backend=backend,
    executor=executor,
    scheduler_address=scheduler_address or None,
    workers=workers or None,
    progress=True,
)
result.summary

# %%
with Store.open(folder) as store:
    status = status_table(store)
    problems = store.audit()
    envelope_usd = store.balance().envelope_usd  # the study's own (an amendment may have changed it since study.yml)
assert not problems, f"ledger audit failed: {problems}"
status.assign(study=study, backend=backend).to_csv(tables / f"pilot_status_{study}.csv", index=False)
say(sentences.status_sentence(status, envelope_usd, prefix=prefix))
status

# %% [markdown]
# ## The run table
#
# One row per assigned run. The scale-rule stage adds the later waves and
# exports the pooled table again; this export lets the analyses run on the
# pilot alone.

# %%
runs_path, runs = export_run_table(study, pilot_only=True)
print(f"wrote {runs_path}: {len(runs)} rows")
# Runs that failed on infrastructure have no outcomes: counted here, left out of every mean.
wave = pilot_wave.pilot_wave(runs, status)
pilot_wave.write_pilot_macros(
    wave, generated, study=study, label=label, set_name=set_name, n_scenarios=len(info.scenarios)
)
say(wave.sentence(prefix))
wave.summary

# %% [markdown]
# ## Runs not accepted
#
# The runs with S = 0 or S missing, for a first look at why. With the viewer
# of this study running (`pilot view <study>`), each run id opens the run's
# page: its conversation, deviations, oracle criteria, the judges' grades and
# the deliverables as the judges saw them.

# %%
from pilot.view import link_run_ids

link_run_ids(wave.not_accepted(), study)
