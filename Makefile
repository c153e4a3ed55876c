# The study's build graph. `make help` lists the targets, one line each.
#
#   make check        lint, format, types and the tests that need no external component (no root, no apt)
#   make test         the whole suite, with every real component (LibreOffice, the sandbox, the pinned CLI, ...)
#   make manuscript   every stage on the embedded default (a SIMULATED dry run), then manuscript/build/main.pdf
#
# Everything installs what it needs: .venv from pyproject.toml (the only place versions are written) and the
# system packages through tools/ensure-system-packages.sh (the only place the machine is provisioned).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# A recipe that fails leaves no half-written target behind to look up to date next time.
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PILOT := $(BIN)/pilot
STAMPS := build/stamps
# simulated (embedded default, a dry run) or claude-code (real study, needs ANTHROPIC_API_KEY)
BACKEND ?= simulated
SEED ?= 20260415
# The study the pipeline runs: a dry run is started afresh whenever the harness
# changes; a real study is only ever resumed, never deleted.
ifeq ($(BACKEND),simulated)
STUDY ?= pilot-simulated
FRESH := true
else
STUDY ?= pilot-$(BACKEND)
FRESH := false
endif
EXECUTOR ?= local
# The scenario set of protocol/study.yml the pipeline runs: empty means the design's own (pilot), whose
# outputs go to analysis/tables and manuscript/. Another set (SCENARIO_SET=extension) is a study of its
# own (pilot-simulated-extension) with its stamps, tables, figures, generated files and PDF under
# build/sets/<set>/, typeset from a copy of manuscript/ (tools/typeset-manuscript.sh).
SCENARIO_SET ?=
ifneq ($(filter-out pilot,$(SCENARIO_SET)),)
SET_DIR := build/sets/$(SCENARIO_SET)
STUDY := $(STUDY)-$(SCENARIO_SET)
RUN_STAMPS := $(SET_DIR)/stamps
TABLES := $(SET_DIR)/tables
FIGURES := $(SET_DIR)/figures
GENERATED := $(SET_DIR)/generated
SET_ARG := --scenario-set $(SCENARIO_SET)
SET_PARAM := -p scenario_set $(SCENARIO_SET)
STAGE_OUTPUT = --output $(SET_DIR)/notebooks/$(1).ipynb
PDF := $(SET_DIR)/manuscript/build/main.pdf
else
SET_DIR :=
RUN_STAMPS := $(STAMPS)
TABLES := analysis/tables
FIGURES := manuscript/figures
GENERATED := manuscript/generated
SET_ARG :=
SET_PARAM :=
STAGE_OUTPUT =
PDF := manuscript/build/main.pdf
endif
# What the study's runs depend on: every module but the statistics, the report and the stand-ins only the stages use.
STAGE_ONLY_SRC := src/pilot/simulated/dry_run.py src/pilot/simulated/synthetic.py src/pilot/simulated/calibration.py src/pilot/latex.py
HARNESS_SRC := $(filter-out $(STAGE_ONLY_SRC),$(shell find src/pilot -name '*.py' -not -path 'src/pilot/stats/*' -not -path 'src/pilot/report/*' -not -path 'src/pilot/scenario_kit/*')) \
  $(wildcard analysis/config/*.yml) $(shell find protocol -type f)

STAGE_DIRS := -p tables_dir $(TABLES) -p figures_dir $(FIGURES) -p generated_dir $(GENERATED)
REPORT_SRC := $(wildcard src/pilot/report/*.py) src/pilot/latex.py src/pilot/stages.py

help: ## list the targets with one line each
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-22s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# ---------------------------------------------------------------- environment
# System packages by group (venv latex office sandbox browser http): the script checks what is there in a moment
# and installs only what is missing, so these run every time instead of leaving a stamp that could go stale.
SYSTEM_GROUPS := venv latex office sandbox browser http
SYSTEM := $(addprefix system-,$(SYSTEM_GROUPS))
$(SYSTEM): system-%:
	@tools/ensure-system-packages.sh $*

system: $(SYSTEM) ## install every system package the suite and the manuscript use (root or password-less sudo)

# The project and its test and dev extras (pytest, ruff, mypy); reinstalled when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | system-venv
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev]'
	@touch $@

venv: $(VENV)/.installed ## create .venv from pyproject.toml (reused until that file changes)

# A root harness runs every worker as one of study.yml's unprivileged sandbox users; they are made once (the stamp
# stands for accounts on this machine, not for files make could look at).
$(STAMPS)/sandbox-users: $(VENV)/.installed protocol/study.yml | system-sandbox
	$(PILOT) sandbox users --create
	@mkdir -p $(@D) && touch $@

# The real backend needs the pinned CLI (the `agent` extra) and the worker's own Python environment
# (build/worker-env, many files: a stamp stands for it).
$(STAMPS)/agent-env: $(VENV)/.installed src/pilot/agents/worker_requirements.txt
	$(BIN)/python -m pip install -q -e '.[agent]'
	$(PILOT) worker-env build
	@mkdir -p $(@D) && touch $@
ifeq ($(BACKEND),simulated)
BACKEND_DEPS :=
else
BACKEND_DEPS := $(STAMPS)/agent-env
endif

# ---------------------------------------------------------------- stages
# Each stage writes many tables, figures and LaTeX files, so a stamp stands for it. The stamp lists the files the
# stage wrote (those newer than the moment it started); when one of them is gone, `gone` makes the stage a
# prerequisite of FORCE and it runs again, so deleting a generated table rebuilds it. Two stages run at once
# (make -j) may both list a file: deleting it then runs both, never neither.
OUTPUT_DIRS := $(TABLES) $(FIGURES) $(GENERATED)
written = $(if $(wildcard $(1)),$(file < $(1)))
gone = $(if $(filter-out $(wildcard $(call written,$(1))),$(call written,$(1))),FORCE)
define stage_started
@mkdir -p $(@D) $(OUTPUT_DIRS) && touch $@.started
endef
define stage_written
@{ find $(OUTPUT_DIRS) $(1) -type f -newer $@.started ! -name .gitkeep 2>/dev/null || true; } | sort >$@.tmp
@mv $@.tmp $@ && rm -f $@.started
endef

$(RUN_STAMPS)/design-tables: $(VENV)/.installed $(REPORT_SRC) $(wildcard src/pilot/protocol/*.py) $(shell find protocol -type f -not -path '*/inputs/*') \
  manuscript/authors.yml $(call gone,$(RUN_STAMPS)/design-tables)
	$(stage_started)
	$(PILOT) protocol validate
	$(PILOT) protocol tables --out $(GENERATED) $(SET_ARG)
	$(stage_written)

$(RUN_STAMPS)/stage-power: $(VENV)/.installed notebooks/03_power.py src/pilot/stats/power.py $(REPORT_SRC) protocol/study.yml \
  $(call gone,$(RUN_STAMPS)/stage-power)
	$(stage_started)
	$(PILOT) stage power $(STAGE_DIRS) $(call STAGE_OUTPUT,03_power)
	$(stage_written)

# The study: pilot wave, then the scale rule, which runs the waves it adds and
# exports the pooled run table analysis/data/$(STUDY)/runs.csv.
$(RUN_STAMPS)/stage-pilot: $(VENV)/.installed $(STAMPS)/sandbox-users $(BACKEND_DEPS) notebooks/01_pilot.py $(HARNESS_SRC) \
  $(call gone,$(RUN_STAMPS)/stage-pilot) | system-office system-sandbox
	$(stage_started)
	$(PILOT) stage pilot $(STAGE_DIRS) -p study $(STUDY) -p backend $(BACKEND) -p executor $(EXECUTOR) -p fresh $(FRESH) $(SET_PARAM) \
	  $(call STAGE_OUTPUT,01_pilot)
	$(stage_written)

$(RUN_STAMPS)/stage-scale-rule: $(RUN_STAMPS)/stage-pilot notebooks/02_scale_rule.py $(REPORT_SRC) $(call gone,$(RUN_STAMPS)/stage-scale-rule)
	$(stage_started)
	$(PILOT) stage scale-rule $(STAGE_DIRS) -p study $(STUDY) -p backend $(BACKEND) -p executor $(EXECUTOR) -p run_waves true \
	  $(call STAGE_OUTPUT,02_scale_rule)
	$(call stage_written,analysis/data/$(STUDY)/runs.csv)

# The run table the statistics stages read: by default the study's export.
# RUNS=path/to/runs.csv analyses another table; RUNS=synthetic a SIMULATED synthetic one.
RUNS ?= analysis/data/$(STUDY)/runs.csv
RUNS_DEP := $(if $(filter analysis/data/$(STUDY)/runs.csv,$(RUNS)),$(RUN_STAMPS)/stage-scale-rule,$(filter-out synthetic,$(RUNS)))
STATS_SRC := $(filter-out src/pilot/stats/power.py,$(wildcard src/pilot/stats/*.py)) src/pilot/runtable.py src/pilot/simulated/synthetic.py \
  src/pilot/simulated/calibration.py analysis/config/synthetic_runtable.yml

$(RUN_STAMPS)/stage-primary: $(VENV)/.installed notebooks/04_primary.py $(STATS_SRC) $(REPORT_SRC) src/pilot/simulated/dry_run.py protocol/study.yml $(RUNS_DEP) \
  $(call gone,$(RUN_STAMPS)/stage-primary)
	$(stage_started)
	$(PILOT) stage primary $(STAGE_DIRS) -p seed $(SEED) -p study_name $(STUDY) -p runs "$(RUNS)" $(call STAGE_OUTPUT,04_primary)
	$(stage_written)

$(RUN_STAMPS)/stage-sensitivity: $(RUN_STAMPS)/stage-primary $(VENV)/.installed notebooks/05_sensitivity.py $(STATS_SRC) $(REPORT_SRC) protocol/study.yml $(RUNS_DEP) \
  $(call gone,$(RUN_STAMPS)/stage-sensitivity)
	$(stage_started)
	$(PILOT) stage sensitivity $(STAGE_DIRS) -p seed $(SEED) -p study_name $(STUDY) -p runs "$(RUNS)" $(call STAGE_OUTPUT,05_sensitivity)
	$(stage_written)

# Coverage and size of the primary inference over 10,000 SIMULATED studies per condition at J = 10 and 40,
# analysed with the primary stage's own resamples for SEED (about a minute of CPU time; a few minutes of wall time on a
# loaded 2-core machine; see benchmarks/bench_calibration.py).
# CALIBRATION_ARGS passes options to the script (e.g. --studies 1000 for a quick draft build; the
# default is the preregistered 10,000 per condition and the tables state the count used).
CALIBRATION_ARGS ?=
$(RUN_STAMPS)/calibration: $(VENV)/.installed analysis/calibration.py $(STATS_SRC) protocol/study.yml $(call gone,$(RUN_STAMPS)/calibration)
	$(stage_started)
	$(BIN)/python analysis/calibration.py --tables-dir $(TABLES) --generated-dir $(GENERATED) --resampling-seed $(SEED) $(CALIBRATION_ARGS)
	$(stage_written)

# The expert grading wave (A-005): agreement among experts and with the LLM panel, and the panel's
# bias per arm. A dry run draws a SIMULATED wave from analysis/config/simulated_graders.yml (its
# planted bias is the truth the stage must recover); a real study's wave is graded by people
# (pilot grading create/serve, protocol/human/evaluation.md) and GRADING_WAVE names it; with no
# wave the manuscript says the wave was not run.
ifeq ($(BACKEND),simulated)
GRADING_WAVE ?= simulated-experts
else
GRADING_WAVE ?=
endif
GRADING_SRC := $(wildcard src/pilot/grading/*.py) src/pilot/simulated/graders.py analysis/config/simulated_graders.yml
# The study's store is a prerequisite too: a grade submitted on the site makes the stage run again.
$(RUN_STAMPS)/stage-grading: $(RUN_STAMPS)/stage-scale-rule $(RUN_STAMPS)/stage-human notebooks/06_grading.py $(GRADING_SRC) $(REPORT_SRC) \
  protocol/study.yml $(wildcard analysis/data/$(STUDY)/study.sqlite) $(call gone,$(RUN_STAMPS)/stage-grading)
	$(stage_started)
ifeq ($(BACKEND),simulated)
	$(PILOT) grading simulate $(STUDY) $(GRADING_WAVE) --replace
endif
	$(PILOT) stage grading $(STAGE_DIRS) -p seed $(SEED) -p study_name $(STUDY) -p wave "$(GRADING_WAVE)" $(call STAGE_OUTPUT,06_grading)
	$(stage_written)

# The rendering sensitivity (A-027): the study's runs judged again under the other workbook rendering, and Q and S
# per arm under both (manuscript appendix). A dry run rejudges every run (simulated judges: no cost); a real study
# only when REJUDGE_SAMPLE says how many per scenario and arm (all, or N), for its judges cost money; otherwise the
# tables are written from what was rejudged before, if anything.
ifeq ($(BACKEND),simulated)
REJUDGE_SAMPLE ?= all
else
REJUDGE_SAMPLE ?=
endif
$(RUN_STAMPS)/rejudge: $(RUN_STAMPS)/stage-scale-rule src/pilot/rejudge.py $(wildcard src/pilot/judges/*.py) \
  src/pilot/simulated/judge.py analysis/config/simulated_judges.yml $(call gone,$(RUN_STAMPS)/rejudge)
	$(stage_started)
	$(PILOT) study rejudge $(STUDY) $(if $(REJUDGE_SAMPLE),--sample $(REJUDGE_SAMPLE),--report-only) \
	  --tables-dir $(TABLES) --generated-dir $(GENERATED)
	$(stage_written)

# The human wave (A-028): H0 and H1 beside the agent arms. A dry run draws SIMULATED participants (pilot human
# simulate, analysis/config/simulated_participants.yml, its truth written before the draw; no person takes part); a
# real study's wave is run by people on the participant site (pilot human create/serve, protocol/human/) and
# HUMAN_STUDY names the study that holds it; with no wave the manuscript says the human wave was not run. It runs
# before the grading stage, which may draw human packages too: both write the study's store.
HUMAN_STUDY ?= $(STUDY)
HUMAN_SRC := $(wildcard src/pilot/human/*.py) src/pilot/simulated/participants.py analysis/config/simulated_participants.yml
ifeq ($(BACKEND),simulated)
HUMAN_DEPS :=
else
# A session evaluated on the site makes the stage run again.
HUMAN_DEPS := $(wildcard analysis/data/$(HUMAN_STUDY)/study.sqlite)
endif
$(RUN_STAMPS)/stage-human: $(RUN_STAMPS)/stage-scale-rule notebooks/07_human.py $(HUMAN_SRC) $(STATS_SRC) $(REPORT_SRC) protocol/study.yml \
  $(HUMAN_DEPS) $(call gone,$(RUN_STAMPS)/stage-human)
	$(stage_started)
ifeq ($(BACKEND),simulated)
	$(PILOT) human simulate $(STUDY) simulated-participants --replace
endif
	-$(PILOT) human export $(HUMAN_STUDY)
	$(PILOT) stage human $(STAGE_DIRS) -p seed $(SEED) -p study_name $(STUDY) -p human_study $(HUMAN_STUDY) $(call STAGE_OUTPUT,07_human)
	$(call stage_written,analysis/data/$(HUMAN_STUDY)/human_runs.csv)

STAGE_STAMPS := $(RUN_STAMPS)/design-tables $(RUN_STAMPS)/stage-power $(RUN_STAMPS)/stage-pilot $(RUN_STAMPS)/stage-scale-rule
STAGE_STAMPS += $(RUN_STAMPS)/stage-primary $(RUN_STAMPS)/stage-sensitivity $(RUN_STAMPS)/calibration $(RUN_STAMPS)/stage-grading
STAGE_STAMPS += $(RUN_STAMPS)/stage-human $(RUN_STAMPS)/rejudge
.PRECIOUS: $(STAGE_STAMPS)

stages: $(STAGE_STAMPS) ## run every stage whose inputs or outputs changed (cached by make)

# ---------------------------------------------------------------- manuscript
MANUSCRIPT_SRC := manuscript/main.tex $(wildcard manuscript/sections/*.tex) manuscript/references.bib

# The LaTeX log goes under manuscript/build/ (untracked), never beside the sources.
manuscript/build/main.pdf: $(STAGE_STAMPS) $(MANUSCRIPT_SRC) | system-latex
	@mkdir -p manuscript/build
	@rm -f manuscript/build/main.failed-checks.pdf
	cd manuscript && latexmk -pdf -interaction=nonstopmode -halt-on-error -outdir=build main.tex >build/latexmk.log 2>&1 \
	  || { tail -40 build/latexmk.log; exit 1; }
	@# The gate: an overfull box, a line of badness 10000 in a table, an undefined reference or figure text under
	@# 7 pt fails the build, each named; the PDF that failed is kept beside, as main.failed-checks.pdf.
	tools/check-typesetting.sh $@ $(GENERATED) $(FIGURES) $(BIN)/python
	@echo "wrote $@"

# Another scenario set: a copy of manuscript/ that sees only this set's generated files and figures,
# and every page must say SIMULATED (a dry run; a real study of the set runs through BACKEND=...).
build/sets/%/manuscript/build/main.pdf: $(STAGE_STAMPS) $(MANUSCRIPT_SRC) | system-latex
	tools/typeset-manuscript.sh $(SET_DIR)/manuscript $(GENERATED) $(FIGURES)
	tools/check-typesetting.sh $@ $(GENERATED) $(FIGURES) $(BIN)/python
	$(if $(filter simulated,$(BACKEND)),$(BIN)/python tools/check_pdf_label.py $@ SIMULATED)
	@echo "wrote $@"

manuscript: $(PDF) ## run the whole pipeline on the embedded default and write manuscript/build/main.pdf (SCENARIO_SET=extension: a dry run of that set, build/sets/extension/)

# ---------------------------------------------------------------- rehearsal
# The real harness end to end before a dollar is spent: a small study on the
# rehearsal backend (the pinned CLI in the sandbox, the metering proxy, the
# oracles and three CLI judges, with the project's scripted model server
# playing the model), exported, analysed by the primary and sensitivity
# stages into $(REHEARSAL_DIR)/ (never analysis/tables/ or the manuscript's
# folders), and checked by the rehearsal report, which exits non-zero when it
# lists findings. No API key, no network. The study is started afresh each time.
REHEARSAL_STUDY ?= rehearsal
REHEARSAL_SCENARIOS ?= ACC-01 LEGAL-01
# host: every arm this machine can serve (a Linux host: all but A2)
REHEARSAL_ARMS ?= host
REHEARSAL_DIR ?= build/rehearsal
# which runs play which runner and judge branch (cap, wall limit, API errors, a cut stream, bad judge replies)
REHEARSAL_BRANCHES ?= analysis/config/rehearsal_branches.yml
REHEARSAL_DIRS := -p tables_dir $(REHEARSAL_DIR)/tables -p figures_dir $(REHEARSAL_DIR)/figures \
  -p generated_dir $(REHEARSAL_DIR)/generated
REHEARSAL_STAGE_ARGS := $(REHEARSAL_DIRS) -p runs $(REHEARSAL_DIR)/runs.csv -p seed $(SEED)
# The calibration reads no run table and its table states the count it used; 1,000 studies per
# condition (about ten seconds) instead of the preregistered 10,000 keeps the rehearsal short.
REHEARSAL_CALIBRATION_ARGS ?= --studies 1000

# The manuscript typeset from the rehearsal alone, into $(REHEARSAL_DIR)/manuscript/build/main.pdf
# (tools/typeset-manuscript.sh: a copy of manuscript/ whose generated/ and figures/ are the
# rehearsal's, so no file of a dry run can slip in). Stages 01 and 02 resume the rehearsal's study
# (every run is finished, so nothing is dispatched) for the study macros, the run report and the
# scale rule; the design tables, the power simulation and the calibration read no run table and
# are written afresh beside them, and the grading stage says that no expert grading wave was run. Then every page must carry REHEARSAL, and only that label.
define REHEARSAL_MANUSCRIPT
$(PILOT) stage pilot $(REHEARSAL_DIRS) -p study $(REHEARSAL_STUDY) -p backend rehearsal --output $(REHEARSAL_DIR)/notebooks/01_pilot.ipynb
$(PILOT) stage scale-rule $(REHEARSAL_DIRS) -p study $(REHEARSAL_STUDY) -p backend rehearsal --output $(REHEARSAL_DIR)/notebooks/02_scale_rule.ipynb
$(PILOT) protocol tables --out $(REHEARSAL_DIR)/generated
$(PILOT) stage power $(REHEARSAL_DIRS) --output $(REHEARSAL_DIR)/notebooks/03_power.ipynb
$(PILOT) stage grading $(REHEARSAL_DIRS) -p study_name $(REHEARSAL_STUDY) \
  --output $(REHEARSAL_DIR)/notebooks/06_grading.ipynb
$(BIN)/python analysis/calibration.py --tables-dir $(REHEARSAL_DIR)/tables --generated-dir $(REHEARSAL_DIR)/generated \
  --resampling-seed $(SEED) --quiet $(REHEARSAL_CALIBRATION_ARGS) >$(REHEARSAL_DIR)/tables/calibration.log
tools/typeset-manuscript.sh $(REHEARSAL_DIR)/manuscript $(REHEARSAL_DIR)/generated $(REHEARSAL_DIR)/figures
$(BIN)/python tools/check_pdf_label.py $(REHEARSAL_DIR)/manuscript/build/main.pdf REHEARSAL
endef

rehearsal: $(VENV)/.installed $(STAMPS)/sandbox-users $(STAMPS)/agent-env | system-office system-sandbox system-browser system-latex ## rehearse the real study against the scripted model (no key, no network); report and manuscript in build/rehearsal/
	rm -rf $(REHEARSAL_DIR) && mkdir -p $(REHEARSAL_DIR)
	$(PILOT) study create $(REHEARSAL_STUDY) --fresh --scenarios $(REHEARSAL_SCENARIOS) --arms $(REHEARSAL_ARMS) --pilot-repeats 1
	@# exit 4 (runs failed) goes on: the report lists each failed run as a finding
	PILOT_REHEARSAL_BRANCHES=$(REHEARSAL_BRANCHES) $(PILOT) study run $(REHEARSAL_STUDY) --backend rehearsal --no-progress || [ $$? -eq 4 ]
	$(PILOT) study export $(REHEARSAL_STUDY) --out $(REHEARSAL_DIR)/runs.csv
	$(PILOT) stage primary $(REHEARSAL_STAGE_ARGS) --output $(REHEARSAL_DIR)/notebooks/04_primary.ipynb
	$(PILOT) stage sensitivity $(REHEARSAL_STAGE_ARGS) --output $(REHEARSAL_DIR)/notebooks/05_sensitivity.ipynb
	$(REHEARSAL_MANUSCRIPT)
	$(PILOT) study rehearsal-report $(REHEARSAL_STUDY) --out $(REHEARSAL_DIR) --runs $(REHEARSAL_DIR)/runs.csv --branches $(REHEARSAL_BRANCHES)

# The same manuscript steps on a rehearsal already run (its study and $(REHEARSAL_DIR)/runs.csv, analysed by
# the primary and sensitivity stages), e.g. after a change to the manuscript or to what the stages write.
rehearsal-manuscript: $(VENV)/.installed | system-sandbox system-latex ## typeset the manuscript from the last rehearsal into build/rehearsal/manuscript/ and check its REHEARSAL label
	@test -f $(REHEARSAL_DIR)/generated/primary_macros.tex || { echo "no rehearsal in $(REHEARSAL_DIR): run make rehearsal" >&2; exit 1; }
	$(REHEARSAL_MANUSCRIPT)

# ---------------------------------------------------------------- checks
# Each test is marked with the external components it uses (tests/component_tiers.py, applied from the fixtures it
# requests); `make check` runs those with no marker (--fast-tier), which need no root, no apt, nothing but .venv.
check: lint types test-fast ## lint, format and types, then every test that needs no external component (no root, no apt)

lint: $(VENV)/.installed ## ruff's rules and its formatter over the tree
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy over src/: the analysis path strict and clean, the rest held to tools/mypy_baseline.json (it may only shrink).
types: $(VENV)/.installed ## mypy: the analysis path strict with no error, the rest no worse than tools/mypy_baseline.json
	$(BIN)/python tools/mypy_ratchet.py

mypy-baseline: $(VENV)/.installed ## lower tools/mypy_baseline.json to today's counts (after fixing type errors)
	$(BIN)/python tools/mypy_ratchet.py --update

# The test files are spread over TEST_WORKERS processes (pytest-xdist). A file stays on one
# worker, so its module fixtures (one LibreOffice batch, a built study) are built once; files go out in
# collection order, the longest first (tests/conftest.py LONG_FILES). One worker more than the two cores of
# the machine the README times: much of the suite waits on LibreOffice, browsers and subprocesses.
TEST_WORKERS ?= 3
PYTEST := $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-fast: $(VENV)/.installed ## the tests that need none of the components (part of make check)
	$(PYTEST) --fast-tier

# The suite drives the real pinned CLI (the `agent` extra) inside the sandbox.
$(STAMPS)/agent-extra: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[agent]'
	@mkdir -p $(@D) && touch $@

test: $(VENV)/.installed $(STAMPS)/agent-extra $(STAMPS)/sandbox-users | $(SYSTEM) ## run the whole test suite (unit, integration, notebook; every real component)
	PILOT_FORBID_SKIPS=1 $(PYTEST) --durations=25

bench: $(VENV)/.installed ## run the benchmarks under benchmarks/ (ratios against named references)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b; done

# Served from the repository root (the stages resolve their paths from there
# anyway); root may run it, as it runs the build. The lab extra is installed
# only when JupyterLab is missing from the environment.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
LAB_ARGS ?=
lab: $(VENV)/.installed ## open the stage notebooks in JupyterLab for interactive review
	@$(BIN)/python -c 'import jupyterlab' 2>/dev/null || $(BIN)/python -m pip install -q -e '.[lab]'
	$(BIN)/jupyter lab $(LAB_ROOT_FLAG) --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks $(LAB_ARGS)

clean: ## remove built outputs (never protocol/ or collected data under analysis/data/)
	rm -rf build manuscript/build
	find $(GENERATED) $(FIGURES) $(TABLES) -type f ! -name .gitkeep -delete

FORCE:
.PHONY: help system $(SYSTEM) venv stages manuscript rehearsal rehearsal-manuscript check lint types mypy-baseline test-fast \
  test bench lab clean FORCE
