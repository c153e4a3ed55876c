"""``pilot grading create``: draw, assign and store a grading wave, all at once or not at all."""

from __future__ import annotations

import csv
import io
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot import paths
from pilot.grading import tokens
from pilot.grading.assignment import Assignment, Package, arm_spread, assign, draw_sample
from pilot.grading.graders import Grader, read_graders
from pilot.grading.store import GradingError, log_event, open_store
from pilot.store import HUMAN_WAVE, atomic_write_private, now

#: The study waves a grading wave draws from by default: the primary analysis's runs (not the model-sensitivity wave).
PRIMARY_WAVES = ("pilot", "repeat3")
#: The statuses of a finished run: what it delivered was evaluated and judged, however its session ended.
FINISHED = ("completed", "capped", "agent_error")
#: Where a wave's sign-in links are written (readable by the owner alone): analysis/data/STUDY/grading/WAVE/links.csv
LINKS_FILE = "links.csv"
#: The grading site's secret and its open sessions, beside the links (owner-only; pilot.web_sessions).
SECRET_FILE = "site.secret"
SESSIONS_FILE = "sessions.sqlite"
_WAVE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


@dataclass(frozen=True)
class CreatedWave:
    """What ``pilot grading create`` made: the plan, and the tokens (shown once, stored only as hashes)."""

    wave: str
    packages: list[Package]
    assignments: list[Assignment]
    graders: list[Grader]
    grader_tokens: dict[str, str]
    coordinator_token: str
    links_file: Path
    spread: dict[str, int]
    offered: int


def grading_dir(study_folder: Path, wave: str) -> Path:
    return Path(study_folder) / "grading" / wave


def eligible_packages(
    conn: Any, *, study_waves: Sequence[str] = PRIMARY_WAVES, model: str | None = None
) -> list[Package]:
    """Finished runs of ``study_waves`` (and ``model``) that the panel judged: the packages a grading wave may draw."""
    from pilot.scenarios import load_scenario

    occupations: dict[str, str] = {}
    out = []
    marks = ",".join("?" * len(study_waves))
    for r in conn.execute(
        f"SELECT c.run_id, c.wave, c.scenario, c.arm, c.model, r.record_json FROM cells c JOIN runs r USING (run_id) "
        f"WHERE c.wave IN ({marks}) ORDER BY c.run_id",
        tuple(study_waves),
    ):
        # A human session's worker is a person (model "human"): the model filter is the agents'.
        if model is not None and r["model"] != model and r["wave"] != HUMAN_WAVE:
            continue
        rec = json.loads(r["record_json"])
        # Every finished run the primary analysis scores, an agent error included (protocol/human/evaluation.md:
        # all of them).
        if rec.get("status") not in FINISHED:
            continue
        if not any(j.get("score_0_100") is not None and not j.get("error") for j in rec.get("judges") or []):
            continue
        if r["scenario"] not in occupations:
            occupations[r["scenario"]] = load_scenario(r["scenario"]).occupation
        out.append(Package(r["run_id"], r["scenario"], r["arm"], r["model"], occupations[r["scenario"]]))
    return out


def create_wave(
    study_folder: Path,
    wave: str,
    graders_file: Path,
    *,
    per_package: int = 2,
    per_stratum: int | None = None,
    seed: int | None = None,
    source: str = "experts",
    simulation: Mapping[str, Any] | None = None,
    study_waves: Sequence[str] = PRIMARY_WAVES,
) -> CreatedWave:
    """Make grading wave ``wave`` of the study in ``study_folder`` (refused if it exists, or if no plan can be made).

    ``seed`` defaults to the study's seed; the sample, the assignment and the
    package ids follow from it. The tokens come from the system's random
    source, never from the seed, and are written once to ``links.csv``.
    """
    if not _WAVE_NAME.match(wave):
        raise GradingError(f"wave name {wave!r}: use lower-case letters, digits and hyphens (at most 40)")
    if source not in ("experts", "simulated"):
        raise GradingError(f"source {source!r}: experts or simulated")
    with open_store(study_folder) as st:
        conn = st.conn
        info = st.study()
        seed = int(info.seed if seed is None else seed)
        if conn.execute("SELECT 1 FROM grading_waves WHERE wave = ?", (wave,)).fetchone():
            raise GradingError(f"grading wave {wave!r} exists already in study {info.name}; choose another name")
        offered = eligible_packages(conn, study_waves=study_waves, model=info.worker_model)
        if not offered:
            raise GradingError(
                f"study {info.name} has no judged, finished run in waves {', '.join(study_waves)} to grade"
            )
        occupations = sorted({p.occupation for p in offered})
        graders = read_graders(Path(graders_file), occupations)
        # One seed, several independent streams: the sample, the plan, the package ids.
        streams = random.Random(f"grading:{info.name}:{wave}:{seed}")
        sample = draw_sample(offered, per_stratum, streams.getrandbits(63))
        plan = assign(sample, graders, per_package, streams.getrandbits(63))
        ids = _package_ids(sample, streams)
        grader_tokens = {g.grader_id: tokens.new_token() for g in graders}
        coordinator = tokens.new_token()
        sample_spec = {
            "per_stratum": per_stratum,
            "study_waves": list(study_waves),
            "model": info.worker_model,
            "offered": len(offered),
            "drawn": len(sample),
        }
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO grading_waves (wave, created_at, seed, per_package, sample_json, source, graders_file, "
                "coordinator_token_hash, simulation_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    wave,
                    now(),
                    seed,
                    per_package,
                    json.dumps(sample_spec),
                    source,
                    paths.shown(Path(graders_file)),
                    tokens.token_hash(coordinator),
                    json.dumps(dict(simulation)) if simulation else None,
                ),
            )
            conn.executemany(
                "INSERT INTO graders (wave, grader_id, name, contact, occupations_json, line, token_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        wave,
                        g.grader_id,
                        g.name,
                        g.contact,
                        json.dumps(list(g.occupations)),
                        g.line,
                        tokens.token_hash(grader_tokens[g.grader_id]),
                    )
                    for g in graders
                ],
            )
            conn.executemany(
                "INSERT INTO grading_packages (wave, package_id, run_id, scenario, arm, model, occupation) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(wave, ids[p.run_id], p.run_id, p.scenario, p.arm, p.model, p.occupation) for p in sample],
            )
            conn.executemany(
                "INSERT INTO grading_assignments (wave, assignment_id, package_id, grader_id, position, slot) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (wave, f"{streams.getrandbits(64):016x}", ids[a.package.run_id], a.grader_id, a.position, a.slot)
                    for a in plan
                ],
            )
            log_event(
                conn,
                wave,
                "create",
                detail={"packages": len(sample), "assignments": len(plan), "graders": len(graders)},
            )
            links = _write_links(grading_dir(study_folder, wave), graders, grader_tokens, coordinator)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return CreatedWave(wave, sample, plan, graders, grader_tokens, coordinator, links, arm_spread(plan), len(offered))


def _package_ids(sample: Iterable[Package], rng: random.Random) -> dict[str, str]:
    """Opaque package ids P0001 ... in a seeded order, so an id says nothing of the run, arm or scenario."""
    runs = sorted(p.run_id for p in sample)
    rng.shuffle(runs)
    return {run: f"P{i:04d}" for i, run in enumerate(runs, start=1)}


def _write_links(folder: Path, graders: Sequence[Grader], grader_tokens: Mapping[str, str], coordinator: str) -> Path:
    """The personal sign-in paths, for the coordinator to send out (owner-only file; the store keeps hashes alone)."""
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["role", "grader_id", "name", "contact", "path"])
    w.writerow(["coordinator", "", "", "", f"/coordinator/signin/{coordinator}"])
    for g in graders:
        w.writerow(["grader", g.grader_id, g.name, g.contact, f"/signin/{grader_tokens[g.grader_id]}"])
    return atomic_write_private(folder / LINKS_FILE, buf.getvalue())
