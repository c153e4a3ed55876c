"""SIMULATED run tables drawn from a stated generative model.

The model lives in ``analysis/config/synthetic_runtable.yml`` (its header
states every equation); this module reads those numbers and draws run tables
with the schema of :mod:`pilot.runtable`. Every table it makes carries
SIMULATED in its ``study`` column and ``synthetic`` as its backend. Because
the truth is known, :func:`planted_acceptance` integrates the model to give
the acceptance each arm should have, which the calibration checks the
estimators against.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pilot import backends, paths, protocol, runtable

SYNTHETIC_CONFIG = paths.CONFIG_DIR / "synthetic_runtable.yml"
BACKEND = backends.SYNTHETIC

_REQUIRED = (
    "arms",
    "scenario_sd_logit",
    "completion",
    "abstention",
    "violation",
    "quality",
    "judges",
    "selfcheck",
    "recovery",
    "tool_calls",
    "turns",
    "cost",
    "wall",
    "questions",
    "nodes",
    "infra_rerun_probability",
    "fallback_scenarios",
    "extra_scenarios",
)
# Every per-arm parameter: copied from one arm to another to plant a null contrast.
ARM_KEYED = (
    ("completion", "arm"),
    ("abstention", "arm"),
    ("violation", "arm"),
    ("quality", "arm"),
    ("tool_calls", "median"),
    ("cost", "median"),
    ("wall", "median_s"),
    ("questions", "arm"),
)


@dataclass(frozen=True)
class ScenarioSpec:
    """What the generator needs to know about one scenario."""

    id: str
    occupation: str
    designed_depth: int
    professional_minutes: float
    criteria_total: int


class SyntheticModel:
    """The generative model's parameters (a validated view of the YAML)."""

    def __init__(self, params: dict[str, Any], source: str = "<dict>") -> None:
        missing = [k for k in _REQUIRED if k not in params]
        if missing:
            raise protocol.ProtocolError(source, missing[0], "missing from the synthetic model")
        arms = list(params["arms"])
        for section, key in ARM_KEYED:
            have = set(params[section][key])
            if have != set(arms):
                raise protocol.ProtocolError(
                    source, f"{section}.{key}", f"needs exactly the arms {arms}, got {sorted(have)}"
                )
        self.params = params
        self.source = source
        self.arms = arms

    @classmethod
    def load(cls, path: Path | None = None) -> SyntheticModel:
        path = Path(path) if path else SYNTHETIC_CONFIG
        data = protocol.read_yaml(path)
        if not isinstance(data, dict):
            raise protocol.ProtocolError(path, "<root>", "must be a mapping")
        return cls(data, source=str(path))

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def arm_vector(self, section: str, key: str) -> np.ndarray:
        return np.array([float(self.params[section][key][a]) for a in self.arms])

    def with_null(self, treated: str, control: str) -> SyntheticModel:
        """The same model with every parameter of ``treated`` set to ``control``'s (no effect planted)."""
        p = copy.deepcopy(self.params)
        for section, key in ARM_KEYED:
            p[section][key][treated] = p[section][key][control]
        return SyntheticModel(p, source=f"{self.source} (null {treated}={control})")


def scenario_specs(
    model: SyntheticModel,
    n_scenarios: int | None = None,
    *,
    rng: np.random.Generator | None = None,
    study: protocol.Study | None = None,
) -> list[ScenarioSpec]:
    """The scenarios of a synthetic study (``design.n_scenarios`` of them by default).

    The protocol's bundles come first (their occupation, designed depth,
    professional minutes and number of oracle criteria); while fewer bundles
    exist than asked for, the model's ``fallback_scenarios`` not already
    present fill the list, and beyond those synthetic ones (``SYN-NN``) whose
    depth, minutes and criteria are drawn uniformly from ``extra_scenarios``.
    """
    study = study or protocol.study()
    n = int(study["design"]["n_scenarios"]) if n_scenarios is None else int(n_scenarios)
    base: list[ScenarioSpec] = []
    if runtable.known_scenarios():
        from pilot import scenarios as bundles  # the scenario package, once its bundles exist

        # The design's own set (the preregistered ten), not every bundle an extension adds.
        held = set(bundles.list_scenarios())
        for sid in (s for s in study.scenario_set() if s in held):
            sc = bundles.load_scenario(sid)
            crit = getattr(getattr(sc, "oracle", None), "criteria", None)
            base.append(
                ScenarioSpec(
                    sc.id,
                    sc.occupation,
                    int(sc.designed_depth),
                    float(sc.professional_minutes),
                    len(crit) if crit else 10,
                )
            )
    have = {s.id for s in base}
    for s in model["fallback_scenarios"]:
        if len(base) >= n:
            break
        if str(s["id"]) not in have:
            base.append(
                ScenarioSpec(
                    str(s["id"]),
                    str(s["occupation"]),
                    int(s["designed_depth"]),
                    float(s["professional_minutes"]),
                    int(s["criteria_total"]),
                )
            )
    if n <= len(base):
        return base[:n]
    rng = rng or np.random.default_rng(0)
    ex = model["extra_scenarios"]
    out = list(base)
    for k in range(len(base) + 1, n + 1):
        out.append(
            ScenarioSpec(
                f"SYN-{k:02d}" if k < 100 else f"SYNX-{k % 100:02d}",
                f"synthetic occupation {k}",
                int(rng.integers(ex["designed_depth"][0], ex["designed_depth"][1] + 1)),
                float(rng.integers(ex["professional_minutes"][0], ex["professional_minutes"][1] + 1)),
                int(rng.integers(ex["criteria_total"][0], ex["criteria_total"][1] + 1)),
            )
        )
    return out


def study_scenarios(
    seed: int, n_scenarios: int | None = None, model: SyntheticModel | None = None, study: protocol.Study | None = None
) -> list[ScenarioSpec]:
    """The scenarios ``generate_runtable(seed, n_scenarios=...)`` uses (stand-ins drawn with the seed)."""
    return scenario_specs(
        model or SyntheticModel.load(), n_scenarios, rng=np.random.default_rng([seed, 5]), study=study
    )


def standin_scenarios(ids: Any, model: SyntheticModel | None = None) -> list[str]:
    """Those of ``ids`` that the generator may use in place of bundles: its fallback ids and ``SYN-NN``."""
    model = model or SyntheticModel.load()
    fallback = {str(s["id"]) for s in model["fallback_scenarios"]}
    return [str(i) for i in ids if str(i) in fallback or re.fullmatch(r"SYNX?-[0-9]{2}", str(i))]


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def draw_runs(
    rng: np.random.Generator,
    model: SyntheticModel,
    arm: np.ndarray,
    depth_c: np.ndarray,
    u: np.ndarray,
    cap_usd: np.ndarray,
    cap_wall: np.ndarray,
    study: protocol.Study,
    *,
    acceptance_only: bool = False,
) -> dict[str, np.ndarray]:
    """Draw the outcomes of runs (vectorised); ``arm`` holds indices into ``model.arms``.

    ``acceptance_only`` returns D, E, Q and S and stops there: the draws after
    S are not made, so these four are the same as in a full call.
    """
    n = arm.shape[0]
    p = model.params
    q = study.q
    max_turns = int(study["cli"]["max_turns"])
    recovering = np.array([protocol.arms()[a].recovery_resumes > 0 for a in model.arms])[arm]

    run_sd = float(p["tool_calls"]["run_sd"])
    w = rng.normal(0.0, run_sd, n)
    tool_calls = rng.poisson(
        model.arm_vector("tool_calls", "median")[arm] * np.exp(p["tool_calls"]["depth_per_level"] * depth_c + w)
    )
    turns_raw = tool_calls + rng.poisson(p["turns"]["extra_mean"], n)
    cost_raw = rng.lognormal(
        np.log(model.arm_vector("cost", "median")[arm]) + p["cost"]["depth_per_level"] * depth_c, p["cost"]["sdlog"]
    )
    wall_raw = rng.lognormal(
        np.log(model.arm_vector("wall", "median_s")[arm]) + p["wall"]["depth_per_level"] * depth_c, p["wall"]["sdlog"]
    )

    abstain = rng.random(n) < model.arm_vector("abstention", "arm")[arm]
    error = ~abstain & (rng.random(n) < p["completion"]["agent_error_probability"])
    hit_cost, hit_wall, hit_turns = cost_raw >= cap_usd, wall_raw >= cap_wall, turns_raw >= max_turns
    censored = hit_cost | hit_wall | hit_turns

    c = p["completion"]
    eta_d = (
        c["intercept"]
        + model.arm_vector("completion", "arm")[arm]
        + u
        + c["depth_per_level"] * depth_c
        + c["effort_logit"] * w / run_sd
    )
    d_first = rng.random(n) < _logistic(eta_d)
    d_first &= ~abstain & ~error
    d_first &= ~(censored & (rng.random(n) < c["capped_completion_penalty"]))

    # A4: self-check after the first session; a failure, a cap or an error grants one recovery.
    fail_p = np.where(d_first, p["selfcheck"]["fail_if_complete"], p["selfcheck"]["fail_if_incomplete"])
    sc_first = rng.random(n) >= fail_p
    recovery = recovering & (~sc_first | censored | error)
    rec_pass = recovery & (rng.random(n) < p["recovery"]["pass_probability"])
    d_rec = rng.random(n) < _logistic(eta_d + p["recovery"]["completion_boost"])
    D = np.where(rec_pass, d_rec, d_first)
    sc_final = np.where(recovery, rec_pass, sc_first)
    cost_raw = cost_raw + recovery * rng.lognormal(
        np.log(p["recovery"]["cost_share_median"] * model.arm_vector("cost", "median")[arm]), p["cost"]["sdlog"]
    )
    wall_raw = wall_raw + recovery * rng.lognormal(
        np.log(p["recovery"]["wall_share_median"] * model.arm_vector("wall", "median_s")[arm]), p["wall"]["sdlog"]
    )
    cost = np.minimum(cost_raw, cap_usd)
    wall = np.minimum(wall_raw, cap_wall)
    turns = np.minimum(turns_raw, max_turns)

    E = rng.random(n) < model.arm_vector("violation", "arm")[arm]
    D &= ~E

    qq = p["quality"]
    theta = 100 * _logistic(
        qq["intercept"]
        + model.arm_vector("quality", "arm")[arm]
        + qq["scenario_loading"] * u
        + qq["depth_per_level"] * depth_c
        + qq["completion_shift"] * D
        + rng.normal(0, qq["run_sd"], n)
    )
    theta = np.where(abstain, 0.3 * theta, theta)
    jids = runtable.judge_ids(study)
    scores = {}
    for jid in jids:
        s = np.round(np.clip(theta + p["judges"]["bias"][jid] + rng.normal(0, p["judges"]["sd"][jid], n), 0, 100), 1)
        s[rng.random(n) < p["judges"]["missing_probability"]] = np.nan
        scores[jid] = s
    mat = np.column_stack([scores[j] for j in jids])
    n_judges = (~np.isnan(mat)).sum(axis=1)
    with np.errstate(invalid="ignore"):
        Q = np.where(n_judges > 0, np.nansum(mat, axis=1) / np.maximum(n_judges, 1), np.nan)
    S = runtable.acceptance(D, E, Q, q)
    if acceptance_only:
        return {"D": D, "E": E, "Q": Q, "S": S}
    votes = np.nansum(np.where(np.isnan(mat), 0, mat >= q), axis=1).astype(int)

    questions = rng.poisson(model.arm_vector("questions", "arm")[arm])
    o = study["outcomes"]
    reason = np.where(hit_cost, "cost", np.where(hit_wall, "wall", np.where(hit_turns, "turns", None)))
    status = np.where(censored, "capped", np.where(error & ~rec_pass, "agent_error", "completed"))
    completion = np.where(
        abstain,
        "abandoned",
        np.where(
            error & ~rec_pass,
            "missing",
            np.where(rng.random(n) < p["abstention"]["partial_probability"], "partial", "completed"),
        ),
    )
    return {
        "D": D,
        "E": E,
        "Q": Q,
        "scores": scores,
        "n_judges": n_judges,
        "judge_accept_votes": votes,
        "S": S,
        "cost_usd": np.round(cost, 4),
        "judge_cost_usd": np.round(n_judges * p["judges"]["cost_usd"], 4),
        "wall_s": np.round(wall, 1),
        "turns": turns,
        "tool_calls": tool_calls,
        "questions": questions,
        "H_minutes": o["intervention_minutes"] + o["human_minutes_per_question"] * questions.astype(float),
        "censored": censored,
        "censor_reason": reason,
        "status": status,
        "completion_status": completion,
        "selfcheck_first": sc_first,
        "recovery_used": recovery,
        "selfcheck_final": sc_final,
        "recovering": recovering,
    }


def generate_runtable(
    seed: int,
    *,
    n_scenarios: int | None = None,
    repeats: int = 3,
    model: SyntheticModel | None = None,
    sensitivity_wave: bool = True,
    study: protocol.Study | None = None,
    scenarios: list[ScenarioSpec] | None = None,
) -> pd.DataFrame:
    """A SIMULATED run table: every scenario x arm x repeat of the worker model, plus the model-sensitivity wave.

    ``repeats`` beyond the pilot's are labelled wave ``repeat3``; the
    sensitivity wave runs ``study.sensitivity_models`` on its arm.
    ``scenarios`` fixes the scenario list (default: ``study_scenarios(seed, n_scenarios)``).
    """
    study = study or protocol.study()
    model = model or SyntheticModel.load()
    rng = np.random.default_rng(seed)
    specs = scenarios or study_scenarios(seed, n_scenarios, model, study)
    J = len(specs)
    arms = model.arms
    u = rng.normal(0.0, model["scenario_sd_logit"], J)
    depth = np.array([s.designed_depth for s in specs], dtype=float)
    depth_c = depth - depth.mean()
    worker = study["worker"]["model"]
    sens = study["sensitivity_models"]

    cells = [(j, a, r, worker) for j in range(J) for a in range(len(arms)) for r in range(1, repeats + 1)]
    if sensitivity_wave:
        a_sens = arms.index(sens["arm"])
        cells += [
            (j, a_sens, r, m) for m in sens["models"] for j in range(J) for r in range(1, int(sens["repeats"]) + 1)
        ]
    j_idx = np.array([c[0] for c in cells])
    a_idx = np.array([c[1] for c in cells])
    caps = [study.caps_for(s.id) for s in specs]
    cap_usd = np.array([caps[j].usd for j in j_idx])
    cap_wall = np.array([caps[j].wall_s for j in j_idx])
    # Another model on the same arm: one logit step lower, the same scenario effects.
    shift = np.array([0.0 if c[3] == worker else -0.4 * (1 + sens["models"].index(c[3])) for c in cells])
    out = draw_runs(rng, model, a_idx, depth_c[j_idx], u[j_idx] + shift, cap_usd, cap_wall, study)

    n = len(cells)
    pilot_r = study.pilot_repeats
    criteria_total = np.array([specs[j].criteria_total for j in j_idx])
    fails = 1 + rng.binomial(np.maximum(criteria_total - 1, 0), 0.25)
    passed = np.where(
        out["D"],
        criteria_total - rng.binomial(np.minimum(2, criteria_total), 0.1),
        np.maximum(criteria_total - fails, 0),
    )
    attempts = 1 + rng.geometric(1 - model["infra_rerun_probability"], n) - 1
    rec = out["recovering"]
    table: dict[str, Any] = {
        "run_id": [f"{specs[c[0]].id}.{arms[c[1]]}.r{c[2]}.{c[3]}" for c in cells],
        "study": f"{runtable.SIMULATED_TAG}-synthetic-seed{seed}",
        "backend": BACKEND,
        "scenario": [specs[j].id for j in j_idx],
        "occupation": [specs[j].occupation for j in j_idx],
        "arm": [arms[a] for a in a_idx],
        "repeat": [c[2] for c in cells],
        "model": [c[3] for c in cells],
        "wave": ["sensitivity" if c[3] != worker else ("pilot" if c[2] <= pilot_r else "repeat3") for c in cells],
        "seed": rng.integers(0, 2**31 - 1, n),
        "order_index": rng.permutation(n),
        "node": rng.choice(model["nodes"], n),
        "attempts": attempts,
        "D": out["D"],
        "E": out["E"],
        "E_reasons": np.where(
            out["E"],
            "input modified: inputs/" + np.array([specs[j].id.lower() for j in j_idx], dtype=object) + "_data.csv",
            None,
        ),
        "criteria_passed": passed,
        "criteria_total": criteria_total,
        "Q": np.round(out["Q"], 4),
    }
    for jid, s in out["scores"].items():
        table[runtable.judge_column(jid)] = s
    S = out["S"]
    table.update(
        {
            "n_judges": out["n_judges"],
            "judge_accept_votes": out["judge_accept_votes"],
            "S": pd.array([None if np.isnan(v) else bool(v) for v in S], dtype="boolean"),
            **{
                k: out[k]
                for k in (
                    "cost_usd",
                    "judge_cost_usd",
                    "wall_s",
                    "turns",
                    "tool_calls",
                    "questions",
                    "H_minutes",
                    "censored",
                    "censor_reason",
                    "status",
                    "completion_status",
                )
            },
            "selfcheck_first": pd.array(
                [bool(v) if r else None for v, r in zip(out["selfcheck_first"], rec, strict=True)], dtype="boolean"
            ),
            "recovery_used": out["recovery_used"],
            "selfcheck_final": pd.array(
                [bool(v) if r else None for v, r in zip(out["selfcheck_final"], rec, strict=True)], dtype="boolean"
            ),
            "designed_depth": depth.astype(int)[j_idx],
            "professional_minutes": np.array([specs[j].professional_minutes for j in j_idx]),
            "enforcement": None,  # no agent ran
        }
    )
    df = pd.DataFrame(table)
    # Q was rounded after S was computed: recompute S from the stored Q so the row is consistent.
    s2 = runtable.acceptance(df["D"], df["E"], df["Q"], study.q)
    df["S"] = pd.array([None if np.isnan(v) else bool(v) for v in s2], dtype="boolean")
    return df.sort_values("order_index").reset_index(drop=True)


def planted_acceptance(
    model: SyntheticModel | None = None,
    *,
    n_scenarios: int | None = None,
    specs: list[ScenarioSpec] | None = None,
    draws: int = 100_000,
    seed: int = 0,
    q: float | None = None,
    study: protocol.Study | None = None,
    arms: list[str] | None = None,
) -> pd.DataFrame:
    """The model's true acceptance per arm (scenario effects integrated out), by Monte Carlo.

    ``arms`` limits the work to those arms (rows of the others are left out);
    an arm's value depends only on its own parameters and the shared ones.

    ``specs`` fixes the scenarios (``study_scenarios(seed, n)`` for a given
    study); by default the first ``n_scenarios`` of :func:`scenario_specs`.

    Columns: arm, p_equal (equal scenario weights), p_minutes (professional-minutes
    weights), mc_se (of p_equal). Common random numbers across arms keep the
    contrasts' Monte Carlo error far below each arm's.
    """
    study = study or protocol.study()
    model = model or SyntheticModel.load()
    if q is not None:
        study = protocol.Study(path=study.path, raw={**study.raw, "outcomes": {**study.raw["outcomes"], "q": q}})
    specs = specs or scenario_specs(model, n_scenarios, study=study)
    depth = np.array([s.designed_depth for s in specs], dtype=float)
    depth_c = depth - depth.mean()
    minutes = np.array([s.professional_minutes for s in specs])
    which = [model.arms.index(a) for a in arms] if arms is not None else list(range(len(model.arms)))
    per = np.zeros((len(model.arms), len(specs)))
    var = np.zeros_like(per)
    for j, s in enumerate(specs):
        caps = study.caps_for(s.id)
        for a in which:
            rng = np.random.default_rng([seed, j])  # the same draws for every arm
            u = rng.normal(0.0, model["scenario_sd_logit"], draws)
            out = draw_runs(
                rng,
                model,
                np.full(draws, a),
                np.full(draws, depth_c[j]),
                u,
                np.full(draws, caps.usd),
                np.full(draws, caps.wall_s),
                study,
                acceptance_only=True,
            )
            S = out["S"][~np.isnan(out["S"])]
            per[a, j] = S.mean()
            var[a, j] = S.var() / S.size
    return (
        pd.DataFrame(
            {
                "arm": model.arms,
                "p_equal": per.mean(axis=1),
                "p_minutes": per @ minutes / minutes.sum(),
                "mc_se": np.sqrt(var.sum(axis=1)) / len(specs),
            }
        )
        .iloc[which]
        .reset_index(drop=True)
    )
