"""``pilot human create``: a human wave of a study, planned and stored all at once or not at all.

What a wave is made of, in one transaction of the study's store:

- the wave's row (seed, the consent text's version and digest, the
  assistant's budget as ``study.yml`` fixes it now, the experimenter's
  sign-in hash, the optional ethics approval reference);
- one row per participant (pseudonym, occupation, eligibility route,
  condition, scenario, run id, the hash of their sign-in token), with the
  condition and scenario from the seeded randomisation
  (:mod:`pilot.human.assignment`), decided before anyone signs in;
- one cell per participant in the study's ``cells`` (wave ``human``, arm H0
  or H1, backend chosen at the start), so the session's run is an ordinary
  assigned run of the study.

Beside the store, in ``analysis/data/<study>/human/<wave>/``: ``assignment.csv``
(the plan, no contact; written before any session) and ``links.csv`` (each
participant's contact and personal sign-in link, and the experimenter's;
owner-only, mode 0600). The contact column is written to ``links.csv`` only:
it never enters the store, the run table or any export.

A study never mixes SIMULATED participants with people: a wave of one kind
is refused in a study that holds a wave of the other, and SIMULATED
participants are refused in a study whose agent runs are findings.
"""

from __future__ import annotations

import csv
import io
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot import backends, paths, protocol
from pilot.attempt import CellSpec
from pilot.grading import tokens
from pilot.human import store
from pilot.human.assignment import Placement, assign, run_id
from pilot.human.assistant import Settings
from pilot.human.consent import load_consent
from pilot.human.participants import Participant, read_participants, write_owner_only
from pilot.schedule import run_seed
from pilot.store import HUMAN_WAVE, atomic_write_text, insert_cells, now

LINKS_FILE = "links.csv"
ASSIGNMENT_FILE = "assignment.csv"
#: The participant site's own secret and session store (pilot.web_sessions), beside the plan (owner-only files).
SECRET_FILE = "site.secret"
SESSIONS_FILE = "sessions.sqlite"
#: The model column of a human session's run: the worker is a person (H1's assistant model is kept apart).
HUMAN_MODEL = "human"
#: The conditions the site knows: H0 without AI, H1 with the assistant.
CONDITIONS = ("H0", "H1")
ASSISTED = "H1"
_WAVE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


@dataclass(frozen=True)
class CreatedWave:
    """What ``pilot human create`` made: the plan, and the tokens (shown once, stored only as hashes)."""

    wave: str
    placements: list[Placement]
    participant_tokens: dict[str, str]
    experimenter_token: str
    links_file: Path
    assignment_file: Path


def wave_dir(study_folder: Path, wave: str) -> Path:
    return Path(study_folder) / "human" / wave


def scenarios_by_occupation(scenario_ids: Sequence[str]) -> dict[str, list[str]]:
    from pilot.scenarios import load_scenario

    out: dict[str, list[str]] = {}
    for sid in scenario_ids:
        out.setdefault(load_scenario(sid).occupation, []).append(sid)
    return out


def check_conditions(study: protocol.Study) -> list[str]:
    conditions = list(study["human_wave"]["conditions"])
    if conditions != list(CONDITIONS):
        raise store.HumanWaveError(
            f"{paths.shown(paths.STUDY_FILE)}: field 'human_wave.conditions': the participant site runs "
            f"{', '.join(CONDITIONS)} (without AI, with the assistant), not {', '.join(conditions)}"
        )
    return conditions


def check_mixing(st: Any, source: str) -> None:
    """Refuse SIMULATED participants beside people, or beside agent runs that are findings (and the other way round)."""
    held = store.sources(st.conn)
    if source == "simulated" and "participants" in held:
        raise store.HumanWaveError(
            f"study {st.study().name} holds a wave of people; SIMULATED participants are never mixed into it"
        )
    if source == "participants" and "simulated" in held:
        raise store.HumanWaveError(
            f"study {st.study().name} holds a wave of SIMULATED participants; people's wave goes into a study of "
            "its own (pilot study create NAME), never beside stand-ins"
        )
    if source == "simulated":
        agents = set(st.backends_used()) - backends.PARTICIPANT_BACKENDS
        real = sorted(b for b in agents if backends.label(b) == "")
        if real:
            raise store.HumanWaveError(
                f"study {st.study().name} has agent runs on {', '.join(real)}, which are findings; "
                "SIMULATED participants belong to a dry run only"
            )


def human_cells(
    study_name: str, seed: int, placements: Sequence[Placement], order_start: int, settings: Settings, wave: str
) -> list[CellSpec]:
    """The cells of a wave's sessions: wave ``human``, arm = condition, the assistant's budget as H1's cap."""
    study = protocol.study()
    judge_reserve = float(study["judges"]["reserve_usd_per_run"])
    cells = []
    for p in placements:
        rid = run_id(p.scenario, p.condition, wave, p.repeat)
        cap = float(settings.usd_per_session) if p.condition == ASSISTED else 0.0
        cells.append(
            CellSpec(
                run_id=rid,
                study=study_name,
                wave=HUMAN_WAVE,
                scenario=p.scenario,
                arm=p.condition,
                repeat=p.repeat,
                model=HUMAN_MODEL,
                order_index=order_start + p.position,
                seed=run_seed(seed, rid),
                cap_usd=cap,
                wall_s=float(study.caps_for(p.scenario).wall_s),
                reserve_usd=round(cap + judge_reserve, 6),
            )
        )
    return cells


def create_wave(
    study_folder: Path,
    wave: str,
    participants_file: Path | None,
    *,
    seed: int | None = None,
    per_condition: int | None = None,
    scenarios: Sequence[str] | None = None,
    ethics_approval: str | None = None,
    source: str = "participants",
    simulation: dict[str, Any] | None = None,
    participants: Sequence[Participant] | None = None,
) -> CreatedWave:
    """Make human wave ``wave`` of the study in ``study_folder`` (refused if it exists or no plan can be made).

    ``participants`` (a SIMULATED wave's drawn participants) replaces reading
    ``participants_file``. ``seed`` defaults to the study's; the plan follows
    from it, the tokens from the system's random source.
    """
    if not _WAVE_NAME.match(wave):
        raise store.HumanWaveError(f"wave name {wave!r}: use lower-case letters, digits and hyphens (at most 40)")
    if source not in store.WAVE_SOURCES:
        raise store.HumanWaveError(f"source {source!r}: participants or simulated")
    study = protocol.study()
    conditions = check_conditions(study)
    consent = load_consent()
    settings = Settings.from_study(study)
    backend = backends.SIMULATED_HUMAN if source == "simulated" else backends.HUMAN
    folder = Path(study_folder)
    with store.open_store(folder) as st:
        info = st.study()
        if wave in store.waves(st.conn):
            raise store.HumanWaveError(f"human wave {wave!r} exists already in study {info.name}; choose another name")
        check_mixing(st, source)
        chosen = list(scenarios) if scenarios else list(info.scenarios)
        outside = [s for s in chosen if s not in info.scenarios]
        if outside:
            raise store.HumanWaveError(
                f"scenario(s) {', '.join(outside)} are not in study {info.name} ({', '.join(info.scenarios)})"
            )
        by_occupation = scenarios_by_occupation(chosen)
        if participants is None:
            if participants_file is None:
                raise store.HumanWaveError("a wave of people needs its participants file (--participants FILE)")
            people = read_participants(Path(participants_file), by_occupation)
        else:
            people = list(participants)
        n = int(per_condition or study["human_wave"]["participants_per_scenario_per_condition"])
        seed = int(info.seed if seed is None else seed)
        taken: dict[tuple[str, str], int] = {}
        for r in st.conn.execute(
            "SELECT scenario, arm, MAX(repeat) FROM cells WHERE wave = ? GROUP BY scenario, arm", (HUMAN_WAVE,)
        ):
            taken[(r[0], r[1])] = int(r[2])
        placements = assign(
            people, by_occupation, conditions, n, study=info.name, wave=wave, seed=seed, repeats_taken=taken
        )
        start = st.conn.execute(
            "SELECT COALESCE(MAX(order_index) + 1, 0) FROM cells WHERE wave = ?", (HUMAN_WAVE,)
        ).fetchone()[0]
        cells = human_cells(info.name, seed, placements, int(start), settings, wave)
        person_tokens = {p.participant.participant_id: tokens.new_token() for p in placements}
        experimenter = tokens.new_token()
        shown_file = (
            "(drawn: SIMULATED participants)"
            if participants is not None
            else paths.shown(Path(participants_file or ""))
        )
        with st.transaction() as c:
            c.execute(
                "INSERT INTO human_waves (wave, created_at, seed, per_condition, source, backend, participants_file, "
                "consent_version, consent_sha256, experimenter_token_hash, ethics_approval, scenarios_json, "
                "assistant_json, simulation_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    wave,
                    now(),
                    seed,
                    n,
                    source,
                    backend,
                    shown_file,
                    consent.version,
                    consent.sha256,
                    tokens.token_hash(experimenter),
                    ethics_approval,
                    json.dumps(chosen),
                    json.dumps(settings.as_dict()),
                    json.dumps(simulation) if simulation else None,
                ),
            )
            insert_cells(c, cells)
            c.executemany(
                "INSERT INTO human_participants (wave, participant_id, occupation, eligibility, line, position, "
                "condition, scenario, run_id, session_id, token_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        wave,
                        p.participant.participant_id,
                        p.participant.occupation,
                        p.participant.eligibility,
                        p.participant.line,
                        p.position,
                        p.condition,
                        p.scenario,
                        cell.run_id,
                        secrets.token_hex(12),
                        tokens.token_hash(person_tokens[p.participant.participant_id]),
                    )
                    for p, cell in zip(placements, cells, strict=True)
                ],
            )
            store.log_event(
                c,
                wave,
                "create",
                detail={"participants": len(placements), "seed": seed, "per_condition": n, "source": source},
            )
            target = wave_dir(folder, wave)
            assignment = atomic_write_text(target / ASSIGNMENT_FILE, assignment_csv(placements, cells))
            links = write_links(target, placements, person_tokens, experimenter)
    return CreatedWave(wave, placements, person_tokens, experimenter, links, assignment)


def assignment_csv(placements: Sequence[Placement], cells: Sequence[CellSpec]) -> str:
    """The wave's plan as written before the first session: who is in which condition and scenario (no contact)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["position", "participant_id", "occupation", "condition", "scenario", "repeat", "run_id"])
    for p, cell in zip(placements, cells, strict=True):
        w.writerow(
            [
                p.position,
                p.participant.participant_id,
                p.participant.occupation,
                p.condition,
                p.scenario,
                p.repeat,
                cell.run_id,
            ]
        )
    return buf.getvalue()


def write_links(
    folder: Path, placements: Sequence[Placement], person_tokens: dict[str, str], experimenter: str
) -> Path:
    """The personal sign-in paths with each participant's contact, for the coordinator alone (mode 0600)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["role", "participant_id", "contact", "path"])
    w.writerow(["experimenter", "", "", f"/experimenter/signin/{experimenter}"])
    for p in placements:
        pid = p.participant.participant_id
        w.writerow(["participant", pid, p.participant.contact, f"/signin/{person_tokens[pid]}"])
    return write_owner_only(Path(folder) / LINKS_FILE, buf.getvalue())


def remove_contact(folder: Path, participant_id: str | None) -> int:
    """Drop a participant's line from the links file (every participant's with None); returns the lines removed."""
    path = Path(folder) / LINKS_FILE
    if not path.is_file():
        return 0
    rows = list(csv.reader(path.read_text(encoding="utf-8").splitlines()))
    if not rows:
        return 0
    keep = [rows[0]] + [
        r for r in rows[1:] if not (r and r[0] == "participant" and (participant_id is None or r[1] == participant_id))
    ]
    removed = len(rows) - len(keep)
    if removed:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(keep)
        write_owner_only(path, buf.getvalue())
    return removed
