"""The design's tables and numbers, generated from ``protocol/`` for the manuscript.

Table ``tab:arms`` comes from ``protocol/arms``, table ``tab:caps`` from the
caps of ``protocol/study.yml``, and ``design_macros.tex`` holds one macro per
design constant the text states.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pilot import paths
from pilot.latex import LatexText, latex_escape, macro_name, number_word, write_macros, write_table
from pilot.protocol import Arm, ArmVocabulary, Study, arm_vocabulary, load_amendments, load_arms, load_study

# What holds for every arm: said once in the arms table's caption, not in every row.
SHARED_ENFORCEMENT = (
    "every arm runs in an allow-listed sandbox (bubblewrap; \\texttt{sandbox-exec} on macOS): only the "
    "workspace is writable, and no checkout, other run or host \\texttt{/tmp} exists in it; the worker runs "
    "as an unprivileged user of its own in its own user namespace with no capability, so no mount or mask "
    "can be undone, and its programs cannot reach the agent client's process (a nested Landlock domain); "
    "memory, processes, disk and \\texttt{/tmp} are bounded per attempt; what the model said and which tools "
    "it called are recorded by the harness's model proxy, with the client's stream as a second witness; every "
    "attempt at something denied is audited as a deviation"
)


def enforcement_text(arm: Arm) -> str:
    """How each of the arm's own limits holds, in words for the arms table (the shared part is
    ``SHARED_ENFORCEMENT``)."""
    # Mirrors pilot.agents.launch, pilot.agents.sandbox and pilot.agents.audit.
    parts = []
    if not arm.has_shell:
        parts.append("tool set fixed with \\texttt{-{}-tools}: no shell exists")
    absent = [name for key, name in (("libreoffice", "LibreOffice"), ("chromium", "Chromium")) if not arm.feature(key)]
    if arm.has_shell and absent:
        parts.append(f"{' and '.join(absent)} install trees absent")
    if arm.denied_families:
        parts.append(
            "denied programs: CLI deny rules \\texttt{Bash(name:*)} and a refusing stub over each, however called"
        )
    if arm.feature("portal"):
        parts.append("network: its own portal and the model proxy only, as bridged sockets")
    else:
        parts.append("no network but the model proxy's socket")
    return "; ".join(parts)


def arms_frame(arms: dict[str, Arm], vocabulary: ArmVocabulary | None = None) -> pd.DataFrame:
    """Table ``tab:arms``: each arm's tools, denials, what it adds (in arms.yml's words for its features) and more."""
    vocabulary = vocabulary or arm_vocabulary()
    rows = []
    for arm in arms.values():
        feats = [text for key, text in vocabulary.features.items() if text and arm.features.get(key)]
        feats += [
            f"server tool \\texttt{{{latex_escape(tool.name)}}} through the model proxy (at most {tool.max_uses} "
            "uses a request)"
            for tool in arm.request_policy.server_tools.values()
        ]
        if arm.recovery_resumes:
            feats.append(f"{arm.recovery_resumes} bounded recovery resume")
        rows.append(
            {
                "Arm": f"{arm.id} ({arm.name})",
                "Tools": ", ".join(arm.tools),
                "Denied in the shell": ", ".join(f"\\texttt{{{latex_escape(d)}}}" for d in arm.denied_families)
                or "none",
                "Adds": "; ".join(feats) or "---",
                "Requires node": ", ".join(arm.requires) or "any",
                "Enforcement": enforcement_text(arm),
            }
        )
    return pd.DataFrame(rows)


def caps_frame(study: Study, scenario_ids: list[str] | None = None) -> pd.DataFrame:
    """The global caps, then each scenario of ``scenario_ids`` (default: every one with its own caps) with its caps."""
    own = study["caps"]["scenarios"]
    ids = sorted(scenario_ids) if scenario_ids is not None else sorted(own)
    g = study.global_caps
    rows = [
        {"Scenario": "global (all others)", "Dollar cap": g.usd, "Wall limit (s)": int(g.wall_s), "Source": "global"}
    ]
    for sid in ids:
        caps = study.caps_for(sid)
        rows.append(
            {
                "Scenario": sid,
                "Dollar cap": caps.usd,
                "Wall limit (s)": int(caps.wall_s),
                "Source": "A-006" if sid in own else "global",
            }
        )
    return pd.DataFrame(rows)


def design_macros(study: Study, scenario_set: str | None = None) -> dict[str, object]:
    """The design's numbers as macros, for a study of ``scenario_set`` (default: the design's own set)."""
    r = study.raw
    from pilot.scale_rule import rule_run_counts

    set_name = scenario_set or study.default_scenario_set
    n_scenarios = len(study.scenario_set(set_name))
    third_runs, sensitivity_runs = rule_run_counts(study, n_scenarios)
    m: dict[str, object] = {
        "WorkerModel": f"\\texttt{{{r['worker']['model']}}}",
        "CliVersion": r["cli"]["version"],
        "MaxTurns": int(r["cli"]["max_turns"]),
        "GlobalCapUsd": f"{study.global_caps.usd:.2f}",
        "GlobalCapWallS": int(study.global_caps.wall_s),
        "EnvelopeUsd": int(study.envelope_usd) if study.envelope_usd == int(study.envelope_usd) else study.envelope_usd,
        "NumArms": len(study.arms),
        "NumScenarios": n_scenarios,
        "DesignNumScenarios": int(r["design"]["n_scenarios"]),
        "ScenarioSetName": f"\\texttt{{{set_name}}}",
        "ScenarioSetSentence": _set_sentence(study, set_name),
        "PilotRepeats": study.pilot_repeats,
        "PilotRuns": n_scenarios * len(study.arms) * study.pilot_repeats,
        "AssignmentSeed": str(study.assignment_seed),
        "NumJudges": len(study.judge_panel),
        "QThreshold": int(study.q),
        "QGridMin": int(min(r["outcomes"]["q_grid"])),
        "QGridMax": int(max(r["outcomes"]["q_grid"])),
        "BootstrapResamples": int(r["inference"]["bootstrap_resamples"]),
        "Permutations": int(r["inference"]["permutations"]),
        "HumanMinutesPerQuestion": int(r["outcomes"]["human_minutes_per_question"]),
        "BudgetGridMin": f"{study.grid('budget_usd')[0]:.2f}",
        "BudgetGridMax": f"{study.grid('budget_usd')[-1]:.2f}",
        "ScaleInflation": f"{r['scale_rule']['cost_inflation']:.2f}",
        "ScaleThirdRuns": third_runs,
        "ScaleThirdReserve": int(r["scale_rule"]["third_repeat"]["reserve_usd"]),
        "ScaleSensRuns": sensitivity_runs,
        "ScaleSensReserve": int(r["scale_rule"]["sensitivity"]["reserve_usd"]),
        "SensitivityArm": r["sensitivity_models"]["arm"],
        "SensitivityRepeats": int(r["sensitivity_models"]["repeats"]),
        "SensitivityModels": " and ".join(f"\\texttt{{{m}}}" for m in r["sensitivity_models"]["models"]),
        "ScaleRecordedMeanCost": f"{r['scale_rule']['recorded_pilot_mean_cost_usd']:.2f}",
        "DeferredScenarios": int(r["scale_rule"]["deferred_scenarios"]),
        "AriMin": "one half" if r["hypotheses"]["ari_min"] == 0.5 else f"{r['hypotheses']['ari_min']:.2f}",
        "ViolationRateMaxPct": int(round(100 * r["hypotheses"]["violation_rate_max"])),
        "HumanParticipants": int(r["human_wave"]["participants_per_scenario_per_condition"]),
        "ConfidencePct": int(round(100 * (1 - r["inference"]["alpha"]))),
        "PercentileLow": f"{50 * r['inference']['alpha']:.1f}",
        "PercentileHigh": f"{100 - 50 * r['inference']['alpha']:.1f}",
        "PowerScenarioSd": f"{r['power']['scenario_sd_logit']:.1f}",
        "PowerBaseline": f"{r['power']['baseline']:.2f}",
        "PowerSimulations": int(r["power"]["simulations"]),
    }
    for i, judge in enumerate(study.judge_panel, start=1):
        m[macro_name("Judge", i, "Model")] = f"\\texttt{{{judge['model']}}}"
    # Counts the design text states in words ("five file tools").
    arms = load_arms(study=study)
    first, shell = study.arms[0], next((a for a in study.arms if arms[a].has_shell), study.arms[0])
    m["ArmZeroToolCount"] = number_word(len(arms[first].tools))
    m["ArmShellDeniedCount"] = number_word(len(arms[shell].denied_families))
    closed = closed_to_file_tools(study.scenario_set(set_name))
    m["AZeroClosedCountWord"] = number_word(len(closed))
    m["AZeroClosedList"] = _and_list([f"{sid} ({', '.join(kinds)})" for sid, kinds in closed.items()]) or "none"
    feasible = feasible_with_text_substitutes(study.scenario_set(set_name))
    m["AZeroFeasibleCount"] = len(feasible)
    m["AZeroFeasibleCountWord"] = number_word(len(feasible))
    m["AZeroFeasibleList"] = _and_list(feasible) or "none"
    m["NumScenariosWord"] = number_word(n_scenarios)
    m["DesignNumScenariosWord"] = number_word(int(r["design"]["n_scenarios"]))
    m["NumArmsWord"] = number_word(len(study.arms))
    m["NumJudgesWord"] = number_word(len(study.judge_panel))
    return m


#: Office formats the restricted arm's file tools cannot open (its Read tool reads text, images and PDFs).
CLOSED_TO_FILE_TOOLS = {".xlsx": "workbook", ".docx": "document", ".pptx": "slide deck"}


def closed_to_file_tools(scenario_ids: list[str]) -> dict[str, list[str]]:
    """Scenario id -> the kinds of its inputs that an arm with file tools alone cannot open (scenarios with none left
    out)."""
    out: dict[str, list[str]] = {}
    for sid in scenario_ids:
        inputs = paths.SCENARIOS_DIR / sid / "inputs"
        kinds = sorted({CLOSED_TO_FILE_TOOLS[f.suffix] for f in inputs.rglob("*") if f.suffix in CLOSED_TO_FILE_TOOLS})
        if kinds:
            out[sid] = kinds
    return out


#: Deliverable formats a text substitute stands in for (the restricted arm writes no binary file).
BINARY_DELIVERABLES = (".xlsx", ".docx", ".pdf", ".pptx")


def feasible_with_text_substitutes(scenario_ids: list[str]) -> list[str]:
    """The scenarios in which the restricted arm can reach D = 1 at all: no binary deliverable has a required
    ``present`` criterion, which a text substitute fails by design (``pilot scenarios check`` holds that it does)."""
    from pilot.protocol.scenario import load_scenario

    out = []
    for sid in scenario_ids:
        sc = load_scenario(sid)
        blocked = [
            c
            for c in sc.oracle.criteria
            if c.kind == "present" and c.required and Path(str(c.file)).suffix.lower() in BINARY_DELIVERABLES
        ]
        if not blocked:
            out.append(sid)
    return out


def _set_sentence(study: Study, set_name: str) -> LatexText:
    """Which scenario set the study runs, as a sentence of the design section."""
    ids, design_ids = study.scenario_set(set_name), study.scenario_set()
    n = number_word(len(ids))
    if set_name == study.default_scenario_set:
        return LatexText(f"This study runs the design's own scenario set, \\texttt{{{set_name}}}, of {n} scenarios.")
    added, left = [i for i in ids if i not in design_ids], [i for i in design_ids if i not in ids]
    parts = [
        f"This study runs the scenario set \\texttt{{{set_name}}} of \\texttt{{protocol/study.yml}}, {n} scenarios: "
    ]
    parts.append(
        f"the design's {number_word(len(design_ids) - len(left))} of set \\texttt{{{study.default_scenario_set}}}"
    )
    if added:
        parts.append(
            f" and {number_word(len(added))} added to the protocol after its preregistration ({_and_list(added)})"
        )
    if left:
        parts.append(f", without {_and_list(left)}")
    return LatexText("".join(parts) + ".")


def _and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def amendments_frame() -> pd.DataFrame:
    rows = load_amendments()
    return pd.DataFrame(
        [{"ID": r["id"], "Date": r["date"], "Stage": r["stage"], "Amendment": r["title"]} for r in rows]
    )


def write_design_outputs(out_dir: Path | None = None, scenario_set: str | None = None) -> list[Path]:
    """Write ``arms_table.tex``, ``caps_table.tex``, ``amendments_table.tex``, ``design_macros.tex`` and the scenario
    table.

    ``scenario_set`` names the study's set in ``study.yml`` (default: the design's own); the caps and
    scenario tables list its scenarios only.
    """
    out = Path(out_dir or paths.GENERATED_DIR)
    study = load_study()
    arms = load_arms(study=study)
    scenario_ids = study.scenario_set(scenario_set)
    written = [
        write_table(
            arms_frame(arms),
            out / "arms_table.tex",
            caption=(
                "Treatment arms, generated from \\texttt{protocol/arms}. Every arm shares the model, brief, "
                "inputs, caps and common policy; "
            )
            + SHARED_ENFORCEMENT
            + ".",
            label="tab:arms",
            escape=False,
            column_format="".join(
                f">{{\\raggedright\\arraybackslash}}p{{{w}}}"
                for w in ("1.6cm", "1.7cm", "2.0cm", "3.0cm", "1.5cm", "3.9cm")
            ),
            font="\\footnotesize",
        ),
        write_table(
            caps_frame(study, scenario_ids),
            out / "caps_table.tex",
            caption=(
                "Per-run caps, generated from \\texttt{protocol/study.yml}: the larger of the global caps and "
                "the scenario author's own (A-006)."
            ),
            label="tab:caps",
            float_format="%.2f",
        ),
        write_table(
            amendments_frame(),
            out / "amendments_table.tex",
            caption="Amendments to the protocol, generated from \\texttt{protocol/amendments.csv}.",
            label="tab:amendments",
            # The stage on one line ("before rerun pilot"); the title wraps in what is left of the text width.
            column_format="lll>{\\raggedright\\arraybackslash}p{8.4cm}",
        ),
        write_macros(design_macros(study, scenario_set), out / "design_macros.tex", comment="From protocol/study.yml."),
    ]
    from pilot.report.apparatus import write_apparatus_macros
    from pilot.report.deviations import write_subsection

    written.append(write_apparatus_macros(out, study, scenario_set))
    written.append(write_subsection(out))
    if scenario_ids:
        from pilot.report.scenario_table import write_scenarios_table

        written.append(write_scenarios_table(out, scenario_ids))
    return written
