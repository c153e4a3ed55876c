"""SIMULATED expert graders: the embedded default of the grading wave.

In a dry run no person grades anything, so the grading stage would have no
input. This module draws expert grades from the model stated in
``analysis/config/simulated_graders.yml`` (described there, in one place):
each grader's grade of a criterion is the LLM panel's median grade less a
planted arm bias and the grader's severity, plus noise, rounded and bounded
to 0-4. The wave is stored with source ``simulated``, so everything made
from it is labelled SIMULATED, and the planted bias is written beside it as
the truth the calibration must recover (``truth.json``), exactly as the dry
run's planted arm effects are for the primary analysis.

Nothing here stands in for an expert in a real study: ``pilot grading
simulate`` refuses a wave of experts' grades and a study not run on the
simulated backend.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pilot import backends, paths, protocol
from pilot.grading import store as grading_store
from pilot.grading.plan import CreatedWave, create_wave, eligible_packages, grading_dir
from pilot.judges.rubric import MAX_SCORE, scenario_criteria, weighted_score
from pilot.store import atomic_write_text

_nonneg = {"type": "number", "minimum": 0}
CONFIG_SCHEMA: dict = protocol.object_schema(
    {
        "seed_salt": {"type": "integer", "minimum": 0},
        "graders_per_occupation": {"type": "integer", "minimum": 2},
        "per_package": {"type": "integer", "minimum": 2},
        "sample_per_stratum": {"type": ["integer", "null"], "minimum": 1},
        "severity_mean": {"type": "number"},
        "severity_sd": _nonneg,
        "noise_sd": _nonneg,
        "accept_sd": _nonneg,
        "planted_bias": {"type": "object", "additionalProperties": {"type": "number"}},
        "active_time": protocol.object_schema(
            {"median_s": {"type": "number", "exclusiveMinimum": 0}, "log_sd": _nonneg}
        ),
    }
)
TRUTH_FILE = "truth.json"
GRADERS_FILE = "simulated_graders.csv"


@dataclass(frozen=True)
class SimulatedGraderConfig:
    """The validated SIMULATED grader model."""

    path: Path
    raw: dict

    def bias_points(self, arm: str) -> float:
        return float(self.raw["planted_bias"].get(arm, 0.0))


@dataclass(frozen=True)
class SimulatedWave:
    """A SIMULATED wave drawn in full, and the truth it plants (bias in Q points, 0-100 scale)."""

    created: CreatedWave
    truth: dict[str, Any]
    truth_file: Path


def load_config(path: Path | None = None) -> SimulatedGraderConfig:
    """Read and validate the SIMULATED grader model; a bad file names the field and reason."""
    path = Path(path) if path is not None else paths.SIMULATED_GRADERS_FILE
    data = protocol.read_yaml(path)
    protocol.validate(data, CONFIG_SCHEMA, path)
    return SimulatedGraderConfig(path, data)


def graders_csv(occupations: list[str], per_occupation: int) -> str:
    """A graders file of simulated graders, ``per_occupation`` for each occupation (ids in the reserved .invalid
    domain)."""
    lines = ["name,contact,occupations"]
    n = 0
    for occ in sorted(occupations):
        for _ in range(per_occupation):
            n += 1
            lines.append(f"Simulated grader {n:02d},sim-grader-{n:02d}@simulated.invalid,{occ}")
    return "\n".join(lines) + "\n"


def planted_truth(config: SimulatedGraderConfig, arms: list[str], contrast: tuple[str, str]) -> dict[str, Any]:
    """The bias the model plants, on the 0-100 scale: per arm, and for the contrast (a uniform shift of b points is 25
    b)."""
    per_arm = {arm: 100.0 / MAX_SCORE * config.bias_points(arm) for arm in arms}
    a, b = contrast
    return {
        "label": "SIMULATED",
        "config": paths.shown(config.path),
        "bias_q_by_arm": per_arm,
        "contrast": f"{a}-{b}",
        "bias_q_contrast": per_arm.get(a, 0.0) - per_arm.get(b, 0.0),
        "note": (
            "planted before rounding to whole grades and bounding to 0-4; both move a grade near the ends of the scale"
        ),
    }


def not_dry_run(used: Iterable[str]) -> list[str]:
    """The backends of ``used`` whose outputs are not SIMULATED: a real agent, real participants, a rehearsal.

    A dry run may hold the simulated agent's runs and a SIMULATED human wave (``simulated-human``) alike.
    """
    return sorted(b for b in used if backends.label(b) != backends.SIMULATED_LABEL)


def simulate_wave(
    study_folder: Path, wave: str, config_path: Path | None = None, *, replace: bool = False, seed: int | None = None
) -> SimulatedWave:
    """Create SIMULATED wave ``wave`` of a dry-run study and submit a grade for every assignment.

    ``replace`` removes an earlier SIMULATED wave of that name first (never
    a wave of experts' grades).
    """
    config = load_config(config_path)
    raw = config.raw
    study_folder = Path(study_folder)
    with grading_store.open_store(study_folder) as st:
        info = st.study()
        wave_seed = int(info.seed if seed is None else seed)
        used = st.backends_used()
        if not_dry_run(used):
            raise grading_store.GradingError(
                f"study {info.name} was run on {', '.join(sorted(used))}: simulated graders grade dry runs only; "
                "a real study's packages are graded by people (pilot grading create ... --graders FILE)"
            )
        if replace:
            grading_store.delete_simulated_wave(st.conn, wave)
        occupations = sorted({p.occupation for p in eligible_packages(st.conn, model=info.worker_model)})
    folder = grading_dir(study_folder, wave)
    folder.mkdir(parents=True, exist_ok=True)
    graders_file = atomic_write_text(
        folder / GRADERS_FILE, graders_csv(occupations, int(raw["graders_per_occupation"]))
    )
    created = create_wave(
        study_folder,
        wave,
        graders_file,
        per_package=int(raw["per_package"]),
        per_stratum=raw["sample_per_stratum"],
        seed=wave_seed,
        source="simulated",
        simulation=raw,
    )
    rng = np.random.default_rng([int(raw["seed_salt"]), wave_seed, zlib.crc32(wave.encode())])
    severity = {
        g.grader_id: rng.normal(float(raw["severity_mean"]), float(raw["severity_sd"])) for g in created.graders
    }
    study = protocol.study()
    with grading_store.open_store(study_folder) as st:
        panel = grading_store.panel_frame(st.conn, wave)
        medians = panel.groupby(["run_id", "criterion"])["score"].median()
        deliverable = panel.groupby("run_id")["D"].first()
        ids = grading_store.package_ids(st.conn, wave)
        aid = grading_store.assignment_ids(st.conn, wave)
        for a in sorted(created.assignments, key=lambda a: (a.package.run_id, a.slot)):
            p = a.package
            crit = scenario_criteria(p.scenario)
            grades: dict[str, int] = {}
            for c in crit:
                m = float(medians.get((p.run_id, c.id), np.nan))
                if not np.isfinite(m):
                    m = MAX_SCORE / 2  # a criterion no judge scored: the scale's middle
                latent = m - config.bias_points(p.arm) - severity[a.grader_id] + rng.normal(0.0, float(raw["noise_sd"]))
                grades[c.id] = int(np.clip(np.rint(latent), 0, MAX_SCORE))
            score = weighted_score(grades, crit)
            accept = bool(deliverable.get(p.run_id)) and score + rng.normal(0.0, float(raw["accept_sd"])) >= float(
                study.q
            )
            active = float(raw["active_time"]["median_s"]) * float(
                np.exp(rng.normal(0.0, float(raw["active_time"]["log_sd"])))
            )
            grading_store.save_grade(
                st.conn,
                wave,
                a.grader_id,
                aid[(ids[p.run_id], a.grader_id)],
                scores_by_criterion={c.id: (grades[c.id], "SIMULATED grade: no critique") for c in crit},
                accept=accept,
                active_s=active,
                submit=True,
            )
        arms = sorted({a.package.arm for a in created.assignments})
    truth = planted_truth(config, arms, study.primary_contrast.arms)
    truth_file = atomic_write_text(folder / TRUTH_FILE, json.dumps(truth, indent=2, sort_keys=True) + "\n")
    return SimulatedWave(created, truth, truth_file)


def read_truth(study_folder: Path, wave: str) -> dict[str, Any] | None:
    """The planted truth of a SIMULATED wave (None for a wave of experts' grades)."""
    f = grading_dir(study_folder, wave) / TRUTH_FILE
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else None
