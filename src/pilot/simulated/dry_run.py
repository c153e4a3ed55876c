"""The known truth of the dry run: the acceptance its SIMULATED backends plant, per arm.

A dry run (``backend = simulated``) sends every run through the real harness,
but the agent and the judges follow stated generative models:
``analysis/config/simulated_agent.yml`` (:mod:`pilot.simulated.agent`) and
``analysis/config/simulated_judges.yml`` (:mod:`pilot.simulated.judge`).
:func:`planted_acceptance` reads those same two files (never a copy of their
numbers) and derives, for scenario j and arm a, the probability that a run is
accepted, ``p_ja = P(S = 1 | S scored)`` with ``S = 1{D=1, E=0, Q>=q}``, and
the arm's scenario-weighted value ``p_a = J^-1 sum_j p_ja``, which is what the
primary estimator :math:`\\hat p_a` targets.

Derivation (every step follows the code of the simulated backends, the runner
and the oracle):

1. Session one writes the scenario's reference solution, then draws each model
   defect k independently with ``p_jak = logistic(logit(p_ak) + depth_logit
   (d_j - depth_centre))``. A defect acts only where it applies to the
   scenario (:func:`pilot.defects.applicable_defects`), and each one
   that acts fails a criterion of the oracle: ``text_substitutes`` the
   presence of every binary deliverable, ``error_values`` the
   ``no_error_values`` criterion of a workbook, ``short_document`` a
   ``min_words`` criterion, ``missing`` the presence of a deliverable,
   ``invalid_record`` the completion record's validity; ``modify_input`` sets
   E. :func:`defect_effects` reads from the scenario's oracle whether that
   criterion is required (so D = 0); a defect that would leave D = 1 on a
   changed package is outside this derivation and raises
   :class:`DryRunModelError`. Hence, before caps, D = 1 and E = 0 with
   probability ``prod_k (1 - p_jak)`` over the acting defects.
2. The session's cost, wall time and turns are lognormal draws; the cap whose
   ratio (draw / cap) is largest and above one ends it, and then with
   probability ``capped_missing`` a deliverable and the completion record are
   missing (D = 0). The cap probability is estimated by seeded Monte Carlo of
   those draws (no files written).
3. An agent error changes no file, so outside A4 it does not move S.
4. Arms with the self-check and one recovery resume (A4): the self-check
   catches every D-breaking defect of the model (:data:`SELFCHECK_CATCHES`;
   ``modify_input`` it cannot see), and a cap or an agent error also asks
   for the resume. The resume runs when the runner's conditions hold (a cost
   cap or a wall kill leaves no budget or no known cost, so no resume; at
   least ``MIN_RESUME_USD`` and ``MIN_RESUME_WALL_S`` must remain), is itself
   drawn (cost and wall scaled by the recovery fractions) against the
   remaining budget, wall time and turn cap, and when it is not capped,
   rewrites the reference solution with probability ``recovery.repair``.
   A changed input stays changed. A resume never makes a clean package worse.
   The process draws of both sessions are Monte Carlo; the discrete events
   are integrated analytically per draw (Rao-Blackwellised).
5. Judges: a run with D = 1 and E = 0 holds exactly the reference solution,
   so Q's law is the judge model applied to the rendered reference package
   (rendered once per scenario with the real renderer): judge k scores
   criterion c ``round(clip(4 U + bias_k + offset_c + N(0, sd_k), 0, 4))``,
   its 0-100 score is the rubric-weighted mean x 25, a judge is missing when
   both its attempts break the schema (probability ``malformed_rate^2``), and
   Q is the mean over the available judges. ``P(Q >= q | at least one judge)``
   is estimated by seeded Monte Carlo of that noise.

So ``p_ja = P(E = 0) * E_draws[P(clean package after the run)] * P(Q >= q)``,
the Monte Carlo standard error combining both estimated factors by the delta
method. Everything here is a property of the SIMULATION: a check of the
harness and the estimator, never a finding.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pilot import paths, protocol
from pilot.simulated.agent import NAMED_DEFECTS

#: The model defects whose damage the A4 self-check reports (presence, error
#: values after recalculation, minimum length, completion-record validity);
#: ``capped_missing`` is a missing deliverable and record.
SELFCHECK_CATCHES = frozenset(
    {"text_substitutes", "error_values", "short_document", "missing", "invalid_record", "capped_missing"}
)
#: The oracle criterion kind each D-breaking model defect fails (by construction in pilot.defects).
_DEFECT_CRITERION = {
    "text_substitutes": "present",
    "error_values": "no_error_values",
    "short_document": "min_words",
    "missing": "present",
    "invalid_record": "completion_record",
    "wrong_decision": "decision",
}


class DryRunModelError(ValueError):
    """The simulated models contain a case this derivation does not cover; names the file, field and reason."""

    def __init__(self, path: Path | str, field: str, reason: str) -> None:
        self.path, self.field, self.reason = str(path), field, reason
        super().__init__(f"{path}: field '{field}': {reason}")


@dataclass(frozen=True)
class DefectEffect:
    """What one model defect does to one scenario's run."""

    defect: str
    applies: bool
    effect: str | None  # "D", "E" or None (does not act)
    caught_by_selfcheck: bool
    criterion: str | None


def defect_effects(scenario: Any, model_defects: Iterable[str]) -> list[DefectEffect]:
    """The effect of each model defect on ``scenario``, read from its deliverables and oracle."""
    from pilot.defects import applicable_defects

    named = set(applicable_defects(scenario))
    crits = list(scenario.oracle.criteria)
    out = []
    for k in model_defects:
        if k not in NAMED_DEFECTS:
            raise DryRunModelError(
                paths.SIMULATED_AGENT_FILE,
                f"defects.{k}",
                "no derivation for this defect (see pilot.simulated.dry_run)",
            )
        applies = NAMED_DEFECTS[k] in named
        if k == "error_values":
            targets = [d.name for d in scenario.file_deliverables if d.kind == "xlsx"]
        elif k == "text_substitutes":
            targets = [d.name for d in scenario.file_deliverables if d.kind in ("xlsx", "docx", "pdf", "pptx")]
        elif k == "missing":
            targets = [d.name for d in scenario.file_deliverables]
        else:
            targets = []
        applies = applies and (bool(targets) or k not in ("error_values", "text_substitutes", "missing"))
        if not applies:
            out.append(DefectEffect(k, False, None, False, None))
            continue
        if k == "modify_input":
            out.append(DefectEffect(k, True, "E", False, None))
            continue
        kind = _DEFECT_CRITERION[k]
        if k == "short_document":
            hit = [c for c in crits if c.kind == kind]
        elif k == "invalid_record":
            hit = [c for c in crits if c.kind == kind]
        elif k == "wrong_decision":
            # It picks among the required decisions only, and any one of them fails D.
            hit = [c for c in crits if c.kind == kind and c.required]
        else:
            hit = [c for c in crits if c.kind == kind and c.file in targets]
            # Every possible target must carry its criterion, or a draw could leave D intact.
            uncovered = sorted(set(targets) - {c.file for c in hit})
            if uncovered:
                raise DryRunModelError(
                    scenario.dir / "oracle.yml" if hasattr(scenario, "dir") else scenario.id,
                    "criteria",
                    (
                        f"defect {k} can hit {uncovered[0]}, which has no {kind} criterion; a run could keep D "
                        "= 1 on a changed package"
                    ),
                )
        soft = [c.id for c in hit if not c.required]
        if not hit or soft:
            raise DryRunModelError(
                scenario.dir / "oracle.yml" if hasattr(scenario, "dir") else scenario.id,
                f"criteria.{soft[0] if soft else kind}",
                f"defect {k} fails a criterion that is not required; a run could keep D = 1 on a changed package",
            )
        out.append(DefectEffect(k, True, "D", k in SELFCHECK_CATCHES, ",".join(c.id for c in hit)))
    return out


# --------------------------------------------------------------------------
# Process draws (caps, resume) by Monte Carlo
# --------------------------------------------------------------------------


def _caps(
    cost: np.ndarray,
    wall: np.ndarray,
    turns: np.ndarray,
    usd: np.ndarray | float,
    wall_s: np.ndarray | float,
    max_turns: int,
):
    """Vectorised ``pilot.simulated.agent.apply_caps``: capped, which cap (0 cost, 1 wall, 2 turns), ratio."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.stack(
            [
                np.where(np.asarray(usd) > 0, cost / usd, np.inf),
                np.where(np.asarray(wall_s) > 0, wall / wall_s, np.inf),
                turns / max_turns,
            ]
        )
    which = np.argmax(r, axis=0)  # ties resolve to the first, as max() over the dict does
    ratio = np.take_along_axis(r, which[None], axis=0)[0]
    return ratio > 1.0, which, ratio


def _session_draws(z: np.ndarray, a: dict, c: dict, depth: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cost, wall, turns of ``SimulatedBackend.draw`` from standard normals z[0..2]."""
    cost = np.exp(math.log(a["cost_median"]) + c["depth_log_cost"] * depth + a["cost_sigma"] * z[0])
    wall = np.exp(math.log(a["wall_median"]) + c["depth_log_cost"] * depth + a["wall_sigma"] * z[1])
    turns = np.maximum(1, np.rint(cost / a["usd_per_turn"] * np.exp(c["turns_sigma"] * z[2])))
    return cost, wall, turns


def process_probabilities(
    arm: Any,
    model: dict,
    caps: protocol.Caps,
    max_turns: int,
    depth: float,
    p_none_caught: float,
    p_none_uncaught: float,
    z: np.ndarray,
) -> dict[str, Any]:
    """Per-draw probability that the package is clean after the run (E aside), and the cap shares.

    ``z`` holds standard normals of shape (6, n): the first session's cost,
    wall and turns noise, then the resume's.
    """
    from pilot.runner import MIN_RESUME_USD, MIN_RESUME_WALL_S

    a, c = model["arms"][arm.id], model
    cost0, wall0, turns0 = _session_draws(z[:3], a, c, depth)
    capped, which, ratio = _caps(cost0, wall0, turns0, caps.usd, caps.wall_s, max_turns)
    cm = float(c["capped_missing"])
    clean_first = p_none_caught * p_none_uncaught * (1.0 - capped * cm)
    out = {
        "p_capped": float(capped.mean()),
        "p_capped_se": float(capped.std() / math.sqrt(capped.size)),
        "cap_shares": {name: float((capped & (which == i)).mean()) for i, name in enumerate(("cost", "wall", "turns"))},
    }
    recovers = arm.feature("self_check") and arm.recovery_resumes > 0
    if not recovers:
        out["g"] = clean_first
        out["p_resume"] = 0.0
        return out
    rec = a.get("recovery")
    if rec is None:
        raise DryRunModelError(
            paths.SIMULATED_AGENT_FILE,
            f"arms.{arm.id}.recovery",
            "the arm resumes once but its model states no recovery",
        )
    # What the first session reports and leaves (a turn cap scales the draws down; cost and wall caps end any resume).
    frac = np.where(capped, 1.0 / np.where(capped, ratio, 1.0), 1.0)
    spent, used_wall = cost0 * frac, wall0 * frac
    budget_left, wall_left = caps.usd - spent, caps.wall_s - used_wall
    feasible = (~capped | (which == 2)) & (budget_left >= MIN_RESUME_USD) & (wall_left >= MIN_RESUME_WALL_S)
    cost1, wall1, turns1_raw = _session_draws(z[3:6], a, c, depth)
    cost1, wall1 = cost1 * rec["cost_fraction"], wall1 * rec["wall_fraction"]
    turns1 = np.maximum(1, np.rint(turns1_raw * rec["cost_fraction"]))
    capped1, _, _ = _caps(cost1, wall1, turns1, np.maximum(budget_left, 1e-12), np.maximum(wall_left, 1e-12), max_turns)
    repaired = feasible & ~capped1
    # P(dirty and the resume is asked for): a cap or an agent error always asks; otherwise only a failed self-check
    # does.
    dirty = 1.0 - clean_first
    caught_or_capped = 1.0 - p_none_caught * (1.0 - capped * cm)
    ae = float(a["agent_error"])
    dirty_wants = np.where(capped, dirty, ae * dirty + (1.0 - ae) * caught_or_capped)
    out["g"] = clean_first + dirty_wants * repaired * float(rec["repair"])
    out["p_resume"] = float((feasible * np.where(capped, 1.0, ae + (1.0 - ae) * (1.0 - p_none_caught))).mean())
    return out


# --------------------------------------------------------------------------
# Judges on the reference package
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class QualityLaw:
    """P(Q >= q) for one scenario's reference package under the simulated judges."""

    scenario: str
    package_quality: float
    p: float
    se: float
    p_scored: float
    mean_Q: float


def reference_quality(
    scenario: Any,
    q: float,
    *,
    study: protocol.Study,
    judge_config: Any = None,
    draws: int = 20_000,
    rng: np.random.Generator,
    workdir: Path | None = None,
) -> QualityLaw:
    """Render the scenario's reference deliverables once and draw the judge noise ``draws`` times."""
    import tempfile

    from pilot.judges.prompt import prompt_for_run, requested_names
    from pilot.judges.render import COMPLETION_RECORD, keep_recalculated
    from pilot.judges.rubric import MAX_SCORE
    from pilot.scenarios import solve
    from pilot.simulated.judge import criterion_offset, deliverable_quality, load_config, uncomputed_penalty

    cfg = judge_config or load_config()
    raw = cfg.raw
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        out = Path(tmp) / "workspace" / "outputs"
        out.mkdir(parents=True)
        solve(scenario.id, scenario.inputs_dir, out)
        # Rendered as the dry run's judges read it: workbooks from their recalculated copies.
        kept = keep_recalculated(Path(tmp), out, requested_names(scenario))
        prompt = prompt_for_run(scenario, out, recalculated=kept)
    items = [d for d in prompt.package.deliverables if d.requested != COMPLETION_RECORD]
    record = [d for d in prompt.package.deliverables if d.requested == COMPLETION_RECORD]
    # The package quality U exactly as SimulatedJudge.verdict computes it.
    penalty = uncomputed_penalty(raw)
    u = float(np.mean([deliverable_quality(d, raw["quality"], penalty) for d in items])) if items else 0.0
    if record and record[0].status != "delivered":
        u = max(0.0, u - float(raw["quality"]["no_completion_record"]))
    weights = np.array([c.weight for c in prompt.criteria], dtype=float)
    offsets = np.array(
        [criterion_offset(c.id, float(raw["criterion_sd"]), int(raw["seed_salt"])) for c in prompt.criteria]
    )
    total = np.zeros(draws)
    n_avail = np.zeros(draws)
    # The unseen shortfall: one draw per run, shared by the judges (pilot.simulated.judge.unseen_shortfall).
    spec = raw.get("unseen_shortfall") or {}
    share = float(spec.get("share", 0.0))
    short = np.where(
        rng.random(draws) < share,
        rng.uniform(float(spec.get("points_low", 0.0)), float(spec.get("points_high", 0.0)), draws),
        0.0,
    )
    for member in study.judge_panel:
        jc = cfg.judge(member["id"])
        rate = float(jc["malformed_rate"])
        available = ~((rng.random(draws) < rate) & (rng.random(draws) < rate))  # both attempts break the schema
        mu = MAX_SCORE * u + float(jc["bias"]) + offsets
        scores = np.clip(
            np.rint(mu[None, :] - short[:, None] + rng.normal(0.0, float(jc["noise_sd"]), (draws, len(offsets)))),
            0,
            MAX_SCORE,
        )
        score = 100.0 * (scores @ weights) / weights.sum() / MAX_SCORE
        total += np.where(available, score, 0.0)
        n_avail += available
    scored = n_avail > 0
    Q = total[scored] / n_avail[scored]
    from pilot.runtable import meets_threshold

    accepted = meets_threshold(Q, q)  # in micro-points, as the run table compares Q (float noise cannot flip S)
    n = max(int(accepted.size), 1)
    p = float(accepted.mean()) if accepted.size else float("nan")
    # A smoothed share for the error, so that p = 1 in every draw still reports an error of order 1/n, not zero.
    p_s = (float(accepted.sum()) + 0.5) / (n + 1)
    return QualityLaw(
        scenario.id,
        u,
        p,
        float(math.sqrt(p_s * (1 - p_s) / n)),
        float(scored.mean()),
        float(Q.mean()) if Q.size else float("nan"),
    )


# --------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------


@dataclass
class PlantedAcceptance:
    """The acceptance the dry run's SIMULATED models plant, per arm and per scenario x arm."""

    summary: pd.DataFrame  # arm, planted_p, mc_se
    by_scenario: pd.DataFrame
    quality: pd.DataFrame
    q: float
    seed: int
    draws: int
    judge_draws: int
    sources: tuple[str, ...] = field(default_factory=tuple)

    def planted(self, arm: str) -> float:
        return float(self.summary.set_index("arm").loc[arm, "planted_p"])

    def __repr__(self) -> str:
        return (
            f"PlantedAcceptance(q={self.q:g}, scenarios={self.by_scenario['scenario'].nunique()}, "
            f"draws={self.draws}, SIMULATED)\n{self.summary}"
        )


def planted_acceptance(
    study: protocol.Study | None = None,
    *,
    q: float | None = None,
    scenarios: Sequence[str] | None = None,
    arms: Sequence[str] | None = None,
    seed: int = 20260415,
    draws: int = 200_000,
    judge_draws: int = 20_000,
    agent_model: dict | None = None,
    judge_config: Any = None,
) -> PlantedAcceptance:
    """The planted acceptance of the dry run (see the module docstring for the derivation).

    ``scenarios`` defaults to the design's scenario set, ``arms`` to the study's; ``draws``
    is the Monte Carlo size of the process draws per scenario (common random
    numbers across arms), ``judge_draws`` that of the judge noise.
    """
    from pilot.scenarios import load_scenario
    from pilot.simulated.agent import DEFECTS, load_model, shift_probability

    study = study or protocol.study()
    q = study.q if q is None else float(q)
    if not 0 <= q <= 100:
        raise ValueError(f"q = {q}: the quality threshold is on the 0-100 scale")
    if draws < 100 or judge_draws < 100:
        raise ValueError(
            f"draws = {draws}, judge_draws = {judge_draws}: at least 100 each are needed for a Monte Carlo error"
        )
    model = agent_model or load_model()
    all_arms = protocol.arms()
    arm_ids = list(arms or study.arms)
    for a in arm_ids:
        if a not in all_arms:
            raise ValueError(f"arm {a!r} is not in {paths.ARMS_FILE.name}")
        if a not in model["arms"]:
            raise DryRunModelError(
                paths.SIMULATED_AGENT_FILE, f"arms.{a}", "the simulated agent has no model for this arm"
            )
    sids = list(scenarios or study.scenario_set())
    max_turns = int(study["cli"]["max_turns"])
    rows, qrows = [], []
    for sid in sids:
        sc = load_scenario(sid)
        depth = float(sc.designed_depth) - float(model["depth_centre"])
        effects = {e.defect: e for e in defect_effects(sc, DEFECTS)}
        key = zlib.crc32(sid.encode())
        z = np.random.default_rng([seed, key, 0]).standard_normal((6, draws))  # the same draws for every arm
        law = reference_quality(
            sc, q, study=study, judge_config=judge_config, draws=judge_draws, rng=np.random.default_rng([seed, key, 1])
        )
        qrows.append(
            {
                "scenario": sid,
                "package_quality": law.package_quality,
                "p_quality": law.p,
                "p_quality_se": law.se,
                "p_scored": law.p_scored,
                "mean_Q": law.mean_Q,
            }
        )
        caps = study.caps_for(sid)
        for a in arm_ids:
            arm = all_arms[a]
            logit_shift = float(model["depth_logit"]) * depth
            p = {k: shift_probability(float(model["arms"][a]["defects"][k]), logit_shift) for k in DEFECTS}
            p_none_caught = float(
                np.prod([1 - p[k] for k, e in effects.items() if e.effect == "D" and e.caught_by_selfcheck])
            )
            p_none_uncaught = float(
                np.prod([1 - p[k] for k, e in effects.items() if e.effect == "D" and not e.caught_by_selfcheck])
            )
            p_no_E = float(np.prod([1 - p[k] for k, e in effects.items() if e.effect == "E"]))
            proc = process_probabilities(arm, model, caps, max_turns, depth, p_none_caught, p_none_uncaught, z)
            g = proc["g"]
            g_mean, g_se = float(g.mean()), float(g.std() / math.sqrt(g.size))
            p_de = p_no_E * g_mean
            planted = p_de * law.p
            rel = math.hypot(g_se / g_mean if g_mean > 0 else 0.0, law.se / law.p if law.p > 0 else 0.0)
            rows.append(
                {
                    "scenario": sid,
                    "arm": a,
                    "designed_depth": int(sc.designed_depth),
                    "p_no_defect": p_none_caught * p_none_uncaught,
                    "p_no_E": p_no_E,
                    "p_capped": proc["p_capped"],
                    "p_capped_cost": proc["cap_shares"]["cost"],
                    "p_capped_wall": proc["cap_shares"]["wall"],
                    "p_capped_turns": proc["cap_shares"]["turns"],
                    "p_resume": proc["p_resume"],
                    "p_DE": p_de,
                    "p_DE_se": p_no_E * g_se,
                    "p_quality": law.p,
                    "planted_p": planted,
                    "mc_se": planted * rel,
                }
            )
    by = pd.DataFrame(rows)
    grouped = by.groupby("arm", sort=False)
    summary = pd.DataFrame(
        {
            "arm": arm_ids,
            "planted_p": [float(grouped.get_group(a)["planted_p"].mean()) for a in arm_ids],
            # Scenarios use independent streams; within one the judge factor is shared by the arms, not across
            # scenarios.
            "mc_se": [float(np.sqrt((grouped.get_group(a)["mc_se"] ** 2).sum()) / len(sids)) for a in arm_ids],
        }
    )
    return PlantedAcceptance(
        summary,
        by,
        pd.DataFrame(qrows),
        q,
        int(seed),
        int(draws),
        int(judge_draws),
        (
            str(paths.SIMULATED_AGENT_FILE.relative_to(paths.ROOT)),
            str(paths.SIMULATED_JUDGES_FILE.relative_to(paths.ROOT)),
        ),
    )


# --------------------------------------------------------------------------
# Planted truth beside the estimates (the primary stage)
# --------------------------------------------------------------------------

#: What the primary stage writes for a dry run; removed again when the stage analyses a real run table.
TRUTH_CSV = "dry_run_truth.csv"
TRUTH_BY_SCENARIO_CSV = "dry_run_truth_by_scenario.csv"
TRUTH_TABLE_TEX = "dry_run_truth_table.tex"
TRUTH_MACROS_TEX = "dry_run_macros.tex"
TRUTH_CONTRASTS_CSV = "dry_run_truth_contrasts.csv"
TRUTH_CONTRASTS_TEX = "dry_run_contrasts_table.tex"


@dataclass
class DryRunTruth:
    """Planted acceptance per arm beside the primary estimates of a SIMULATED run table."""

    summary: pd.DataFrame  # arm, planted_p, planted_mc_se, p_hat, ci_low, ci_high, covered
    kind: str  # "harness" (simulated backends) or "synthetic" (pilot.simulated.synthetic)
    study_name: str
    sources: tuple[str, ...]
    draws: int
    by_scenario: pd.DataFrame | None = None
    judge_draws: int | None = None
    q: float = 70.0
    #: The planted contrasts beside their estimates (contrast, planted, estimate, ci_low, ci_high, covered), or None
    contrasts: pd.DataFrame | None = None

    @property
    def n_covered(self) -> int:
        return int(self.summary["covered"].sum())


def truth_kind(runs: pd.DataFrame) -> str | None:
    """``harness`` for a dry run of the harness, ``synthetic`` for the generator's tables, None for a real table."""
    from pilot.simulated import synthetic

    backend = runs["backend"].astype(str)
    if (backend == synthetic.BACKEND).all():
        return "synthetic"
    if (backend == "simulated").all():
        # Real judges on simulated work would not follow the judge model: no planted truth then.
        if "judge_backend" in runs.columns:
            jb = runs["judge_backend"].dropna().astype(str)
            if not (jb == "simulated").all():
                return None
        return "harness"
    return None


def compare_with_estimates(planted: pd.DataFrame, acceptance: pd.DataFrame) -> pd.DataFrame:
    """Join planted (arm, planted_p, mc_se) with estimates (arm, p_hat, ci_low, ci_high); covered = planted in the
    interval."""
    est = acceptance.set_index("arm")
    pl = planted.set_index("arm")
    missing = [a for a in est.index if a not in pl.index]
    if missing:
        raise ValueError(f"no planted acceptance for arm(s) {missing}")
    out = pd.DataFrame(
        {
            "arm": list(est.index),
            "planted_p": [float(pl.loc[a, "planted_p"]) for a in est.index],
            "planted_mc_se": [float(pl.loc[a, "mc_se"]) for a in est.index],
            "p_hat": est["p_hat"].astype(float).to_numpy(),
            "ci_low": est["ci_low"].astype(float).to_numpy(),
            "ci_high": est["ci_high"].astype(float).to_numpy(),
        }
    )
    out["covered"] = (out["ci_low"] <= out["planted_p"]) & (out["planted_p"] <= out["ci_high"])
    return out


def planted_contrasts(by_scenario: pd.DataFrame, contrasts: pd.DataFrame) -> pd.DataFrame:
    """Each contrast's planted value, the equal-weight mean over scenarios of the two arms' planted acceptance
    difference (what the contrast estimates), beside the estimate and its interval; covered = planted in it."""
    wide = by_scenario.pivot_table(index="scenario", columns="arm", values="planted_p")
    rows = []
    for _, r in contrasts.iterrows():
        t, c = str(r["contrast"]).split("-")
        planted = float((wide[t] - wide[c]).mean()) if t in wide and c in wide else float("nan")
        lo, hi = float(r["ci_low"]), float(r["ci_high"])
        rows.append(
            {
                "contrast": str(r["contrast"]),
                "planted": planted,
                "estimate": float(r["estimate"]),
                "ci_low": lo,
                "ci_high": hi,
                "covered": bool(lo <= planted <= hi) if np.isfinite(planted) and np.isfinite(lo) else False,
            }
        )
    return pd.DataFrame(rows)


def truth_for(
    runs: pd.DataFrame,
    acceptance: pd.DataFrame,
    *,
    contrasts: pd.DataFrame | None = None,
    seed: int,
    study: protocol.Study | None = None,
    q: float | None = None,
    draws: int = 200_000,
    judge_draws: int = 20_000,
    synthetic_draws: int = 20_000,
) -> DryRunTruth | None:
    """The planted truth of a SIMULATED run table beside its estimates; None for a real table.

    A harness dry run uses :func:`planted_acceptance` over the table's
    scenarios; a synthetic table uses :func:`pilot.simulated.synthetic.planted_acceptance`
    with the scenarios as the table describes them (scenario effects integrated out).
    """
    from pilot import runtable
    from pilot.simulated import synthetic

    study = study or protocol.study()
    kind = truth_kind(runs)
    if kind is None:
        return None
    rows = runtable.primary_rows(runs, study)
    sids = sorted(set(rows["scenario"].astype(str)))  # the bundles' order, whatever order the runs came in
    name = str(runs["study"].iloc[0])
    arms = list(acceptance["arm"])
    if kind == "harness":
        pa = planted_acceptance(study, q=q, scenarios=sids, arms=arms, seed=seed, draws=draws, judge_draws=judge_draws)
        return DryRunTruth(
            compare_with_estimates(pa.summary, acceptance),
            kind,
            name,
            pa.sources,
            draws,
            pa.by_scenario,
            judge_draws,
            pa.q,
            planted_contrasts(pa.by_scenario, contrasts) if contrasts is not None else None,
        )
    first = rows.drop_duplicates("scenario").set_index("scenario")
    specs = [
        synthetic.ScenarioSpec(
            s,
            str(first.loc[s, "occupation"]),
            int(first.loc[s, "designed_depth"]),
            float(first.loc[s, "professional_minutes"]),
            int(first.loc[s, "criteria_total"]),
        )
        for s in sids
    ]
    table = synthetic.planted_acceptance(specs=specs, draws=synthetic_draws, seed=seed, q=q, study=study)
    planted = table.rename(columns={"p_equal": "planted_p"})[["arm", "planted_p", "mc_se"]]
    src = (str(synthetic.SYNTHETIC_CONFIG.relative_to(paths.ROOT)),)
    return DryRunTruth(
        compare_with_estimates(planted, acceptance),
        kind,
        name,
        src,
        synthetic_draws,
        None,
        None,
        study.q if q is None else float(q),
    )


def remove_truth(tables_dir: Path | str, generated_dir: Path | str) -> list[Path]:
    """Delete dry-run truth files left by an earlier SIMULATED analysis (a real table has none)."""
    gone = []
    for p in (
        Path(tables_dir) / TRUTH_CSV,
        Path(tables_dir) / TRUTH_BY_SCENARIO_CSV,
        Path(generated_dir) / TRUTH_TABLE_TEX,
        Path(generated_dir) / TRUTH_MACROS_TEX,
        Path(tables_dir) / TRUTH_CONTRASTS_CSV,
        Path(generated_dir) / TRUTH_CONTRASTS_TEX,
    ):
        if p.is_file():
            p.unlink()
            gone.append(p)
    return gone


def _sci(v: float) -> str:
    """A small positive number for LaTeX: 4.1e-05 as $4.1\\times10^{-5}$."""
    if not np.isfinite(v) or v == 0:
        return "\\ensuremath{0}"
    mant, exp = f"{v:.1e}".split("e")
    return f"\\ensuremath{{{mant}\\times10^{{{int(exp)}}}}}"


def judge_part_sentence(by_scenario: pd.DataFrame, q: float) -> str:
    """What the judges' part of the planted acceptance does in this model, read from its per-scenario values."""
    low = by_scenario.loc[by_scenario["p_quality"].idxmin()]
    n = int(by_scenario["scenario"].nunique())
    if round(float(low["p_quality"]), 3) >= 1.0:
        return (
            f"In all {n} scenarios the simulated judges accept the clean reference package with "
            "probability 1.000 (to three decimals): in this model they never reject a clean package at q "
            f"= {q:g}, so the oracle and the caps alone decide acceptance, and the quality-threshold "
            "sensitivity stays flat for every q below the judges' lowest score of a clean package."
        )
    high = by_scenario.loc[by_scenario["p_quality"].idxmax()]
    return (
        f"The simulated judges put a clean package below q = {q:g} in {1 - float(high['p_quality']):.3f} to "
        f"{1 - float(low['p_quality']):.3f} of runs over the {n} scenarios (most often in {low['scenario']}), "
        "through the unseen shortfall stated in the judges' model: these are the acceptances the judges, not "
        "the oracle, decide, and they are why the quality-threshold sensitivity moves."
    )


def write_truth(truth: DryRunTruth, tables_dir: Path | str, generated_dir: Path | str) -> dict[str, Path]:
    """The CSV table, the LaTeX table (label ``tab:dry-run-truth``) and the macros of the dry run's truth."""
    from pilot.latex import latex_escape, macro_name, write_macros, write_table

    tables, gen = Path(tables_dir), Path(generated_dir)
    tables.mkdir(parents=True, exist_ok=True)
    gen.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    s = truth.summary
    out[TRUTH_CSV] = tables / TRUTH_CSV
    s.assign(study=truth.study_name, backend="simulated" if truth.kind == "harness" else "synthetic").to_csv(
        out[TRUTH_CSV], index=False
    )
    if truth.by_scenario is not None:
        out[TRUTH_BY_SCENARIO_CSV] = tables / TRUTH_BY_SCENARIO_CSV
        truth.by_scenario.assign(study=truth.study_name).to_csv(out[TRUTH_BY_SCENARIO_CSV], index=False)
    # Monte Carlo errors are orders of magnitude below the estimates' spread: shown with their exponent, not as 0.000.
    show = s.assign(covered=s["covered"].map({True: "yes", False: "no"}), planted_mc_se=s["planted_mc_se"].map(_sci))
    models = " and ".join(f"\\texttt{{{latex_escape(x)}}}" for x in truth.sources)
    how = (
        "derived from the stated models of the simulated agent and judges ("
        + models
        + "; Monte Carlo over the process and judge draws)"
        if truth.kind == "harness"
        else "of the synthetic generator (" + models + "; scenario effects integrated out by Monte Carlo)"
    )
    out[TRUTH_TABLE_TEX] = write_table(
        show.rename(
            columns={
                "arm": "Arm",
                "planted_p": "Planted $p_a$",
                "planted_mc_se": "MC s.e.",
                "p_hat": "$\\hat p_a$",
                "ci_low": "2.5\\%",
                "ci_high": "97.5\\%",
                "covered": "Covered",
            }
        ),
        gen / TRUTH_TABLE_TEX,
        caption=(
            f"Dry run: the acceptance each arm was planted with at $q={truth.q:g}$, {how}, beside the primary "
            "estimate $\\hat p_a$ and its scenario-cluster bootstrap interval (\\IntervalNote{}) from the same "
            "run table. Nothing here is a finding."
        ),
        label="tab:dry-run-truth",
        simulated=True,
        escape=False,
        float_format="%.3f",
    )
    if truth.contrasts is not None:
        con = truth.contrasts
        out[TRUTH_CONTRASTS_CSV] = tables / TRUTH_CONTRASTS_CSV
        con.assign(study=truth.study_name).to_csv(out[TRUTH_CONTRASTS_CSV], index=False)
        from pilot.latex import macro_name as _macro

        n_scen = int(truth.by_scenario["scenario"].nunique()) if truth.by_scenario is not None else 0

        def calibrated(name: str) -> str:
            # The coverage the calibration measured for this contrast at this number of scenarios (Appendix B).
            macro = "\\" + _macro("Cal", "J", n_scen, "planted", name.replace("-", "Minus"), "Coverage")
            return f"\\ifdef{{{macro}}}{{{macro}}}{{---}}"

        shown_con = pd.DataFrame(
            {
                "Contrast": [c.replace("-", "$-$") for c in con["contrast"]],
                "Planted": con["planted"],
                "Estimate": con["estimate"],
                "2.5\\%": con["ci_low"],
                "97.5\\%": con["ci_high"],
                "Covered": con["covered"].map({True: "yes", False: "no"}),
                "Calibrated coverage": [calibrated(c) for c in con["contrast"]],
            }
        )
        out[TRUTH_CONTRASTS_TEX] = write_table(
            shown_con,
            gen / TRUTH_CONTRASTS_TEX,
            caption=(
                f"Dry run: each preregistered contrast as planted at $q={truth.q:g}$ (the equal-weight mean over "
                "scenarios of the two arms' planted acceptance difference, the quantity the contrast estimates) "
                "beside its estimate and scenario-cluster bootstrap interval (\\IntervalNote{}) from the same run "
                "table; calibrated coverage: how often intervals of this construction covered the planted contrast "
                "over the calibration's simulated studies at this number of scenarios "
                "(Appendix~\\ref{app:calibration}). Nothing here is a finding."
            ),
            label="tab:dry-run-contrasts",
            simulated=True,
            escape=False,
            float_format="%.3f",
        )
    m: dict[str, object] = {
        "DryRunKind": "harness" if truth.kind == "harness" else "synthetic",
        "DryRunStudy": truth.study_name,
        "DryRunArms": int(len(s)),
        "DryRunCovered": truth.n_covered,
        "DryRunMaxAbsError": float((s["p_hat"] - s["planted_p"]).abs().max()),
        "DryRunMaxMCSE": _sci(float(s["planted_mc_se"].max())),
        "DryRunDraws": int(truth.draws),
        "DryRunQ": int(truth.q) if float(truth.q).is_integer() else float(truth.q),
    }
    if truth.judge_draws is not None:
        m["DryRunJudgeDraws"] = int(truth.judge_draws)
    if truth.by_scenario is not None:
        m["DryRunScenarios"] = int(truth.by_scenario["scenario"].nunique())
        m["DryRunMinQualityP"] = float(truth.by_scenario["p_quality"].min())
        m["DryRunJudgeSentence"] = judge_part_sentence(truth.by_scenario, truth.q)
    if truth.contrasts is not None:
        m["DryRunContrastsCovered"] = int(truth.contrasts["covered"].sum())
        m["DryRunContrasts"] = int(len(truth.contrasts))
        m["DryRunContrastsMaxAbsError"] = float((truth.contrasts["estimate"] - truth.contrasts["planted"]).abs().max())
    for _, r in s.iterrows():
        m[macro_name("DryRun", "Planted", r.arm)] = float(r.planted_p)
        m[macro_name("DryRun", "Estimate", r.arm)] = float(r.p_hat)
    out[TRUTH_MACROS_TEX] = write_macros(
        m, gen / TRUTH_MACROS_TEX, comment=f"dry-run truth (SIMULATED, {truth.kind}); study {truth.study_name}"
    )
    return out
