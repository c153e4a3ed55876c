"""SIMULATED participants: the embedded default of the human wave, for a dry run only. No person takes part.

In a dry run nobody sits at the participant site, so the human wave's
pipeline would have no input. This module draws a wave of SIMULATED
participants from the model stated in ``analysis/config/simulated_participants.yml``
(described there, in one place) and puts each through the same steps a
person's session takes (:mod:`pilot.human.session`): consent, start, every
file uploaded through the oracle's admission, the completion record's form,
and in H1 messages to the assistant through the real metering proxy, answered
by the project's scripted model server (no key, no network); then the wave
is evaluated by the study's own evaluators (:mod:`pilot.human.evaluate`).

The truth the stage compares its estimates with (each condition's planted
probability of D = 1 per scenario, the median time on task, the chance of
reaching the wall limit) is derived from the model alone and written beside
the wave, ``truth.json``, before the first draw. The wave is stored with
source ``simulated`` and backend ``simulated-human``: every table, figure and
sentence made from it says SIMULATED and that no person took part, and the
study refuses a wave of people beside it (:func:`pilot.human.wave.check_mixing`).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from pilot import paths, protocol
from pilot.human import evaluate, session, store, uploads
from pilot.human.assistant import Assistant, AssistantUnavailable, Settings
from pilot.human.participants import Participant
from pilot.human.wave import ASSISTED, CONDITIONS, create_wave, scenarios_by_occupation, wave_dir
from pilot.human.withdraw import discard_simulated_wave
from pilot.simulated.agent import plant_model_defects, write_gold
from pilot.simulated.dry_run import defect_effects
from pilot.store import atomic_write_text

TRUTH_FILE = "truth.json"
#: The defects a participant's package can carry (the simulated agent's defect functions; see the model file).
PARTICIPANT_DEFECTS = ("error_values", "short_document", "missing", "wrong_decision")
#: Deliverable kinds a SIMULATED participant may hand in as a text stand-in.
STAND_IN_KINDS = ("docx", "pdf", "pptx")
LABEL = "SIMULATED"
NO_PERSON = "no person took part"

_prob = {"type": "number", "minimum": 0, "maximum": 1}
_pos = {"type": "number", "exclusiveMinimum": 0}
_CONDITION = protocol.object_schema(
    {
        "defects": protocol.object_schema({d: _prob for d in PARTICIPANT_DEFECTS}),
        "stand_in": _prob,
        "time_fraction": _pos,
        "time_sigma": {"type": "number", "minimum": 0},
        "questions_rate": {"type": "number", "minimum": 0},
    }
)
CONFIG_SCHEMA: dict[str, Any] = protocol.object_schema(
    {
        "seed_salt": {"type": "integer", "minimum": 0},
        "participants_per_scenario_per_condition": {"type": "integer", "minimum": 1},
        "depth_centre": {"type": "number"},
        "depth_logit": {"type": "number"},
        "capped_missing": _prob,
        "active_low": _prob,
        "active_high": _prob,
        "messages_rate": {"type": "number", "minimum": 0},
        "conditions": protocol.object_schema({c: _CONDITION for c in CONDITIONS}),
    }
)


def load_config(path: Path | None = None) -> dict[str, Any]:
    """Read and validate the SIMULATED participants' model (errors name the file, field and reason)."""
    path = Path(path or paths.SIMULATED_PARTICIPANTS_FILE)
    data = protocol.read_yaml(path)
    protocol.validate(data, CONFIG_SCHEMA, path)
    if data["active_low"] > data["active_high"]:
        raise protocol.ProtocolError(path, "active_low", "is above active_high")
    return dict(data)


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def defect_probability(p: float, depth: float, cfg: dict[str, Any]) -> float:
    """A defect's probability on a scenario of designed depth ``depth`` (the model's logit shift)."""
    if p <= 0.0 or p >= 1.0:
        return p
    return _logistic(math.log(p / (1 - p)) + float(cfg["depth_logit"]) * (depth - float(cfg["depth_centre"])))


def cap_probability(condition: dict[str, Any]) -> float:
    """P(time on task reaches the wall limit): LogNormal(log(f w), s) >= w, whatever the wall limit w."""
    f, s = float(condition["time_fraction"]), float(condition["time_sigma"])
    if s == 0:
        return 1.0 if f >= 1 else 0.0
    return 0.5 * math.erfc(-math.log(f) / s / math.sqrt(2))


def planted_truth(cfg: dict[str, Any], scenario_ids: list[str]) -> dict[str, Any]:
    """What the model plants, per condition and scenario: P(D = 1), P(capped), the median time on task (seconds).

    P(D = 1) is the product over the defects that apply to the scenario and
    fail D (:func:`pilot.simulated.dry_run.defect_effects`) of their absence,
    times the absence of a stand-in where the scenario has a document
    deliverable, times the absence of the capped session's missing file; the
    reference package passes every criterion (``pilot scenarios check``).
    """
    from pilot.scenarios import load_scenario

    study = protocol.study()
    out: dict[str, Any] = {"label": LABEL, "note": NO_PERSON, "model": cfg, "conditions": {}}
    for cond in CONDITIONS:
        c = cfg["conditions"][cond]
        p_cap = cap_probability(c)
        rows = {}
        for sid in scenario_ids:
            scenario = load_scenario(sid)
            depth = float(scenario.designed_depth)
            effects = {e.defect: e for e in defect_effects(scenario, PARTICIPANT_DEFECTS)}
            p_d = 1.0
            for d in PARTICIPANT_DEFECTS:
                e = effects[d]
                if e.applies and e.effect == "D":
                    p_d *= 1.0 - defect_probability(float(c["defects"][d]), depth, cfg)
            if any(x.kind in STAND_IN_KINDS for x in scenario.file_deliverables):
                p_d *= 1.0 - float(c["stand_in"])
            p_d *= 1.0 - p_cap * float(cfg["capped_missing"])
            wall = float(study.caps_for(sid).wall_s)
            rows[sid] = {
                "p_D": p_d,
                "p_capped": p_cap,
                "median_time_on_task_s": min(wall, float(c["time_fraction"]) * wall),
            }
        out["conditions"][cond] = {
            "scenarios": rows,
            "p_D": float(np.mean([r["p_D"] for r in rows.values()])),
            "p_capped": p_cap,
        }
    return out


def read_truth(study_folder: Path, wave: str) -> dict[str, Any] | None:
    path = wave_dir(study_folder, wave) / TRUTH_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def drawn_participants(scenario_ids: list[str], per_condition: int) -> list[Participant]:
    """As many SIMULATED participants per occupation as its places (scenarios x conditions x per condition)."""
    out: list[Participant] = []
    for occupation, scen in sorted(scenarios_by_occupation(scenario_ids).items()):
        for _ in range(len(scen) * len(CONDITIONS) * per_condition):
            k = len(out) + 1
            out.append(Participant(f"SIM-{k:04d}", f"sim-{k:04d}@participants.invalid", occupation, "practice", k + 1))
    return out


def _rng(salt: int, seed: int, run_id: str) -> np.random.Generator:
    return np.random.default_rng([int(salt), int(seed) & 0xFFFFFFFF, zlib.crc32(run_id.encode())])


def _stand_in(path: Path) -> Path:
    """A document deliverable as the text a participant saves instead (``.txt`` under its base name)."""
    from pilot.defects import document_lines

    lines, why = document_lines(path)
    target = path.with_suffix(".txt")
    target.write_text("\n".join(lines or [why or ""]) + "\n", encoding="utf-8")
    path.unlink()
    return target


def play_session(
    st: Any, wave: str, row: Any, cfg: dict[str, Any], seed: int, assistant: Assistant | None
) -> dict[str, Any]:
    """One SIMULATED participant's session, through the site's own steps (see the model file)."""
    from pilot.human.consent import load_consent
    from pilot.scenarios import load_scenario

    pid, run_id, cond = row["participant_id"], row["run_id"], row["condition"]
    c = cfg["conditions"][cond]
    rng = _rng(int(cfg["seed_salt"]), seed, run_id)
    scenario = load_scenario(row["scenario"])
    wall = float(protocol.study().caps_for(scenario.id).wall_s)
    drawn = float(rng.lognormal(math.log(float(c["time_fraction"]) * wall), float(c["time_sigma"])))
    capped = drawn >= wall
    on_task = min(drawn, wall)
    start = time.time() - on_task
    session.decide_consent(st, wave, pid, True, load_consent())
    folder = session.start(st, wave, pid, at=start)
    during = start + 1.0
    depth = float(scenario.designed_depth)
    names = [d for d in PARTICIPANT_DEFECTS if rng.random() < defect_probability(float(c["defects"][d]), depth, cfg)]
    scratch = Path(tempfile.mkdtemp(prefix="pilot-sim-participant-"))
    try:
        shutil.copytree(folder / "workspace" / "inputs", scratch / "inputs")
        write_gold(scenario, scratch)
        planted = [p.description for p in plant_model_defects(scenario, scratch, names, rng)]
        (scratch / "outputs" / "completion_record.json").unlink(missing_ok=True)
        files = {Path(f.name).stem: f for f in (scratch / "outputs").iterdir() if f.is_file()}
        reasons: dict[str, str] = {}
        documents = [d for d in scenario.file_deliverables if d.kind in STAND_IN_KINDS and Path(d.name).stem in files]
        if documents and rng.random() < float(c["stand_in"]):
            d = documents[int(rng.integers(len(documents)))]
            files[Path(d.name).stem] = _stand_in(files[Path(d.name).stem])
            reasons[d.name] = "SIMULATED: the document was saved as plain text"
        lost = capped and rng.random() < float(cfg["capped_missing"])
        offered = [d for d in scenario.file_deliverables if Path(d.name).stem in files]
        if lost and offered:
            offered.pop(int(rng.integers(len(offered))))
        refused = 0
        for d in offered:
            f = files[Path(d.name).stem]
            with open(f, "rb") as fh:
                try:
                    session.upload(st, wave, pid, d.name, f.name, fh, at=during)
                except uploads.UploadRefused:
                    refused += 1
        questions = int(rng.poisson(float(c["questions_rate"])))
        if not lost:
            status = "completed" if len(offered) == len(scenario.file_deliverables) else "partial"
            draft = {
                "status": status if offered else "abandoned",
                "questions": "\n".join(
                    f"(SIMULATED question {i + 1}) Which figure does the manager prefer?" for i in range(questions)
                ),
                "notes": "SIMULATED participant: no person took part.",
                "reasons": reasons,
            }
            session.save_draft(st, wave, pid, draft, at=during)
        messages = int(rng.poisson(float(cfg["messages_rate"]))) if cond == ASSISTED and assistant is not None else 0
        history: list[tuple[str, str]] = []
        for k in range(messages):
            text = f"(SIMULATED participant, message {k + 1}) How should I check the totals of {scenario.title}?"
            try:
                reply = assistant.ask(folder, history, text) if assistant is not None else None
            except AssistantUnavailable as exc:
                session.record_exchange(st, wave, pid, text, None, status=exc.status, error=str(exc))
                continue
            if reply is not None:
                session.record_exchange(st, wave, pid, text, reply)
                history.append((text, reply.text))
        view = f"sim-{run_id}"
        session.page_view(st, wave, pid, view, at=start)
        session.report_active(
            st, wave, pid, view, on_task * float(rng.uniform(cfg["active_low"], cfg["active_high"])), at=start + on_task
        )
        if assistant is not None:
            assistant.close_session(folder)
        session.submit(st, wave, pid, ended_by="deadline" if capped else "participant", at=start + on_task)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"run_id": run_id, "defects": planted, "capped": capped, "messages": messages, "refused_uploads": refused}


def simulate_wave(
    study_folder: Path, wave: str, *, config: Path | None = None, replace: bool = False, seed: int | None = None
) -> dict[str, Any]:
    """Create SIMULATED wave ``wave`` of a dry-run study, play every session and evaluate them (see the module)."""
    from pilot.simulated.scripted_model import ScriptedModelServer

    cfg = load_config(config)
    folder = Path(study_folder)
    with store.open_store(folder) as st:
        info = st.study()
        if replace and wave in store.waves(st.conn):
            discard_simulated_wave(st, wave)
    wave_seed = int(info.seed if seed is None else seed)
    per = int(cfg["participants_per_scenario_per_condition"])
    target = wave_dir(folder, wave)
    target.mkdir(parents=True, exist_ok=True)
    # The truth before the first draw: it follows from the model alone.
    truth = planted_truth(cfg, list(info.scenarios))
    truth_file = atomic_write_text(target / TRUTH_FILE, json.dumps(truth, indent=2, sort_keys=True) + "\n")
    made = create_wave(
        folder,
        wave,
        None,
        seed=wave_seed,
        per_condition=per,
        source="simulated",
        simulation=cfg,
        participants=drawn_participants(list(info.scenarios), per),
    )
    played = []
    with ScriptedModelServer(seed=wave_seed, record_dir=target / "scripted") as server:
        settings = Settings.from_study()
        assistant = Assistant(settings, upstream_url=server.base_url, api_key=server.api_key)
        try:
            with store.open_store(folder) as st:
                for row in store.participants(st.conn, wave):
                    played.append(play_session(st, wave, row, cfg, wave_seed, assistant))
        finally:
            assistant.close()
    evaluated = evaluate.evaluate_wave(folder, wave)
    return {
        "wave": made.wave,
        "label": LABEL,
        "note": NO_PERSON,
        "participants": len(made.placements),
        "capped": sum(1 for p in played if p["capped"]),
        "assistant_messages": sum(p["messages"] for p in played),
        "evaluated": sum(1 for s in evaluated.values() if s == "done"),
        "truth": paths.shown(truth_file),
    }


def truth_check(humans: Any, truth: dict[str, Any], *, seed: int, B: int = 2000, level: float = 0.95) -> Any:
    """Each condition's estimated P(D = 1) (scenario-weighted, scenario-cluster bootstrap) beside the planted one.

    Also the share of sessions that reached the wall limit beside its planted
    probability. SIMULATED: the truth is the model's, and no person took part.
    """
    import pandas as pd

    from pilot.stats import estimators, resampling
    from pilot.stats.estimators import Layout

    layout = Layout.of(humans, list(CONDITIONS))
    counts = resampling.bootstrap_counts(np.random.default_rng([int(seed), 9]), layout.J, int(B))
    d = humans["D"].to_numpy(dtype=float, na_value=np.nan)
    means = layout.means(d)
    w = layout.weights("equal")
    est = estimators.arm_means(means, w)
    lo, hi = resampling.percentile_interval(resampling.bootstrap_means(means, counts, w), level)
    rows = []
    for k, cond in enumerate(CONDITIONS):
        planted = truth["conditions"][cond]
        per = [planted["scenarios"][s]["p_D"] for s in layout.scenarios if s in planted["scenarios"]]
        p_d = float(np.mean(per)) if per else float("nan")
        capped = humans.loc[humans["arm"] == cond, "censored"].astype(bool)
        rows.append(
            {
                "condition": cond,
                "label": f"{LABEL} ({NO_PERSON})",
                "planted_p_D": p_d,
                "estimate_D": float(est[k]),
                "ci_low": float(lo[k]),
                "ci_high": float(hi[k]),
                "covered": bool(lo[k] <= p_d <= hi[k]),
                "planted_p_capped": float(planted["p_capped"]),
                "observed_capped": float(capped.mean()) if len(capped) else float("nan"),
                "sessions": int(len(capped)),
            }
        )
    return pd.DataFrame(rows)
