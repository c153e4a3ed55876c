"""The embedded default agent (SIMULATED): the reference solver plus drawn defects, real files.

Its generative model is one file, ``analysis/config/simulated_agent.yml``
(:data:`pilot.paths.SIMULATED_AGENT_FILE`), whose header states every
assumption; :func:`model_text` returns it for quoting beside any output.
A session writes real deliverables into the workspace (the scenario's
solver, then the defects of ``pilot.defects``) and an event
stream in the CLI's stream-json shape (every event marked
``"simulated": true``), so the runner collects, audits, classifies and
evaluates it exactly as it does a real session. On arms with the portal,
for scenarios that use it, the first session signs in to the run's portal
and downloads a document and a record over real HTTP
(:class:`pilot.portal.client.PortalClient`), so its use shows in the
instance's access log as an agent's would. Deterministic from the seed.
"""

from __future__ import annotations

import json
import math
import shutil
import uuid
import zlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from pilot import paths
from pilot.agents.audit import StreamSummary, parse_stream
from pilot.agents.sandbox import STUB_MARKER
from pilot.agents.session import SessionOutcome, resume_reports_cumulative
from pilot.protocol import Arm, ProtocolError, read_yaml, validate

DEFECTS = (
    "text_substitutes",
    "error_values",
    "short_document",
    "missing",
    "invalid_record",
    "modify_input",
    "wrong_decision",
)
#: Defects added to the model later: drawn from a stream of their own (spawned from the session's), so the
#: session's other draws, and every seed chosen for them, are those of the model without these defects.
OWN_STREAM_DEFECTS = ("wrong_decision",)
#: The named defect of :mod:`pilot.defects` behind each model defect: what the simulated agent plants and what the
#: dry run's derivation tests for applicability (``text_substitutes`` is planted once per office deliverable).
NAMED_DEFECTS = {
    "text_substitutes": "text_substitute",
    "error_values": "inject_error_value",
    "short_document": "truncate_document",
    "missing": "drop_deliverable",
    "invalid_record": "break_completion_record",
    "modify_input": "modify_input",
    "wrong_decision": "wrong_decision",
}

_prob = {"type": "number", "minimum": 0, "maximum": 1}
_pos = {"type": "number", "exclusiveMinimum": 0}
_ARM_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "cost_median",
        "cost_sigma",
        "wall_median",
        "wall_sigma",
        "usd_per_turn",
        "tool_calls_per_turn",
        "tool_mix",
        "questions_rate",
        "agent_error",
        "denied_attempt",
        "defects",
    ],
    "properties": {
        "cost_median": _pos,
        "cost_sigma": {"type": "number", "minimum": 0},
        "wall_median": _pos,
        "wall_sigma": {"type": "number", "minimum": 0},
        "usd_per_turn": _pos,
        "tool_calls_per_turn": {"type": "number", "minimum": 0},
        "tool_mix": {"type": "object", "minProperties": 1, "additionalProperties": _pos},
        "questions_rate": {"type": "number", "minimum": 0},
        "agent_error": _prob,
        "denied_attempt": _prob,
        "defects": {
            "type": "object",
            "additionalProperties": False,
            "required": list(DEFECTS),
            "properties": {d: _prob for d in DEFECTS},
        },
        "recovery": {
            "type": "object",
            "additionalProperties": False,
            "required": ["repair", "cost_fraction", "wall_fraction"],
            "properties": {"repair": _prob, "cost_fraction": _pos, "wall_fraction": _pos},
        },
    },
}
MODEL_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "backend",
        "cli_version",
        "depth_centre",
        "depth_logit",
        "depth_log_cost",
        "turns_sigma",
        "overshoot",
        "capped_missing",
        "bypass_share",
        "denied_commands",
        "arms",
    ],
    "properties": {
        "backend": {"const": "simulated"},
        "cli_version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "depth_centre": {"type": "number"},
        "depth_logit": {"type": "number"},
        "depth_log_cost": {"type": "number"},
        "turns_sigma": {"type": "number", "minimum": 0},
        "overshoot": {"type": "number", "minimum": 0},
        "capped_missing": _prob,
        "bypass_share": _prob,
        "denied_commands": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}},
        "arms": {"type": "object", "minProperties": 1, "additionalProperties": _ARM_SCHEMA},
    },
}


def load_model(path: Path | None = None) -> dict:
    """Read and validate the generative model (errors name the file, field and reason)."""
    path = Path(path or paths.SIMULATED_AGENT_FILE)
    data = read_yaml(path)
    validate(data, MODEL_SCHEMA, path)
    return data


def model_text(path: Path | None = None) -> str:
    """The model file as written, for quoting wherever simulated outputs appear."""
    return Path(path or paths.SIMULATED_AGENT_FILE).read_text(encoding="utf-8")


def _rng(seed: int, scenario_id: str, arm_id: str, session: int) -> np.random.Generator:
    key = [int(seed) & 0xFFFFFFFF, zlib.crc32(scenario_id.encode()), zlib.crc32(arm_id.encode()), int(session)]
    return np.random.default_rng(np.random.SeedSequence(key))


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def shift_probability(p: float, logit_shift: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return p
    return _logistic(math.log(p / (1 - p)) + logit_shift)


@dataclass
class SessionDraw:
    """The drawn process of one simulated session (before the caps end it)."""

    cost: float
    wall: float
    turns: int
    tool_calls: dict[str, int]
    questions: int
    agent_error: bool
    defects: list[str]
    denied: tuple[str, str] | None  # (family, how: direct | bash -c)


def apply_caps(
    draw: SessionDraw, budget_usd: float, wall_s: float, max_turns: int, rng: np.random.Generator, overshoot: float
) -> tuple[bool, str | None, float, float, int, dict[str, int]]:
    """End the session at the cap reached first: (capped, cap, cost, wall, turns, tool calls)."""
    ratios = {
        "cost": draw.cost / budget_usd if budget_usd > 0 else math.inf,
        "wall": draw.wall / wall_s if wall_s > 0 else math.inf,
        "turns": draw.turns / max_turns,
    }
    cap, ratio = max(ratios.items(), key=lambda kv: kv[1])
    if ratio <= 1.0:
        return False, None, draw.cost, draw.wall, draw.turns, dict(draw.tool_calls)
    fraction = 1.0 / ratio
    cost, wall = draw.cost * fraction, draw.wall * fraction
    turns = max_turns if cap == "turns" else max(1, int(math.floor(draw.turns * fraction)))
    calls = {k: int(math.floor(v * fraction)) for k, v in draw.tool_calls.items()}
    if cap == "cost":
        # A soft cap: the CLI checks it after each call, so the last call overshoots it.
        cost = budget_usd * (1.0 + float(rng.uniform(0, overshoot)))
    if cap == "wall":
        wall = wall_s
    return True, cap, cost, wall, turns, calls


def draw_session(cfg: dict, arm: Arm, scenario: Any, rng: np.random.Generator) -> SessionDraw:
    """One session's process drawn from the generative model ``cfg`` for ``arm`` on ``scenario``."""
    a, c = cfg["arms"][arm.id], cfg
    depth = float(getattr(scenario, "designed_depth", c["depth_centre"])) - float(c["depth_centre"])
    cost = float(rng.lognormal(math.log(a["cost_median"]) + c["depth_log_cost"] * depth, a["cost_sigma"]))
    wall = float(rng.lognormal(math.log(a["wall_median"]) + c["depth_log_cost"] * depth, a["wall_sigma"]))
    turns = max(1, int(round(cost / a["usd_per_turn"] * rng.lognormal(0.0, c["turns_sigma"]))))
    n_calls = int(rng.poisson(a["tool_calls_per_turn"] * turns))
    names = sorted(a["tool_mix"])
    weights = np.array([a["tool_mix"][n] for n in names], dtype=float)
    split = rng.multinomial(n_calls, weights / weights.sum())
    tool_calls = {n: int(k) for n, k in zip(names, split, strict=True) if k}
    questions = int(rng.poisson(a["questions_rate"]))
    agent_error = bool(rng.random() < a["agent_error"])
    p = {d: shift_probability(float(a["defects"][d]), c["depth_logit"] * depth) for d in DEFECTS}
    defects = [d for d in DEFECTS if d not in OWN_STREAM_DEFECTS and rng.random() < p[d]]
    own = rng.spawn(1)[0]  # spawning leaves rng's own sequence of draws unchanged
    defects += [d for d in OWN_STREAM_DEFECTS if own.random() < p[d]]
    denied = None
    families = [f for f in arm.denied_families if f in c["denied_commands"]]
    if families and rng.random() < a["denied_attempt"]:
        fam = families[int(rng.integers(len(families)))]
        denied = (fam, "bash -c" if rng.random() < c["bypass_share"] else "direct")
    return SessionDraw(cost, wall, turns, tool_calls, questions, agent_error, defects, denied)


def write_gold(scenario: Any, workspace: Path) -> None:
    """Replace ``outputs/`` of ``workspace`` by the scenario's reference deliverables."""
    from pilot.scenarios import solve

    out = Path(workspace) / "outputs"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    solve(scenario.id, Path(workspace) / "inputs", out)


def question_texts(n: int) -> list[str]:
    """The questions the model's worker puts in its completion record."""
    return [f"(simulated question {i + 1}) Which assumption does the manager prefer here?" for i in range(n)]


def set_questions(workspace: Path, n: int) -> None:
    """Put ``n`` questions in the completion record, if there is a readable one."""
    rec_path = Path(workspace) / "outputs" / "completion_record.json"
    if not rec_path.is_file():
        return
    try:
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return
    if isinstance(rec, dict):
        rec["questions"] = question_texts(n)
        rec_path.write_text(json.dumps(rec, indent=2) + "\n", encoding="utf-8")


def apply_model_defects(scenario: Any, workspace: Path, names: list[str], rng: np.random.Generator) -> list[str]:
    """Apply the model's drawn defects to the real files; one that does not fit the scenario is skipped."""
    return [p.description for p in plant_model_defects(scenario, workspace, names, rng)]


def plant_model_defects(scenario: Any, workspace: Path, names: list[str], rng: np.random.Generator) -> list[Any]:
    """:func:`apply_model_defects`, each planted defect with the criteria it declares it breaks
    (:class:`pilot.defects.Planted`)."""
    from pilot import defects as dx

    workspace = Path(workspace)
    planted: list[dx.Planted] = []
    for name in names:
        try:
            if name == "text_substitutes":
                for d in scenario.file_deliverables:
                    if d.kind in ("xlsx", "docx", "pdf", "pptx") and (workspace / "outputs" / d.name).is_file():
                        planted.append(
                            dx.Planted(
                                dx.text_substitute(workspace, d.name),
                                tuple(
                                    c.id for c in scenario.oracle.criteria if c.file == d.name and c.kind == "present"
                                ),
                            )
                        )
            else:
                planted.append(dx.plant_defect(NAMED_DEFECTS[name], scenario, workspace, rng))
        except (dx.DefectNotApplicable, FileNotFoundError):
            continue
    return planted


@dataclass(frozen=True)
class SimulatedMeter:
    """The simulated run's stand-in for the model proxy's meter: the cost it would have metered, and no exchange
    record."""

    metered_usd: Decimal
    capped: bool = False
    requests: int | None = None
    exchanges_path: None = None


class SimulatedBackend:
    """Sessions of the simulated agent for one run."""

    name = "simulated"
    enforcement = "simulated"

    def __init__(
        self,
        scenario: Any,
        arm: Arm,
        *,
        run_dir: Path,
        workspace: Path,
        seed: int,
        model: str | None = None,
        config: dict | None = None,
    ) -> None:
        self.scenario, self.arm = scenario, arm
        self.run_dir, self.workspace = Path(run_dir), Path(workspace)
        self.seed = int(seed)
        self.model_name = model or "simulated"
        self.cfg = config or load_model()
        if arm.id not in self.cfg["arms"]:
            raise ProtocolError(
                paths.SIMULATED_AGENT_FILE, f"arms.{arm.id}", "the simulated agent has no model for this arm"
            )
        self.arm_cfg = self.cfg["arms"][arm.id]
        # Reads as simulated wherever it is shown; the number still selects the resume-cost behaviour.
        self.version = f"{self.cfg['cli_version']} (simulated)"
        self.transcript = self.run_dir / "transcript.jsonl"
        self.notes = [
            f"SIMULATED agent: generative model {paths.SIMULATED_AGENT_FILE.relative_to(paths.ROOT)} (copied to agent/)"
        ]
        # The assumptions travel with the outputs they produced.
        (self.run_dir / "agent").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "agent" / "SIMULATED_agent_model.yml").write_text(model_text(), encoding="utf-8")
        self._spent = 0.0
        self._questions = 0
        self._session_id: str | None = None

    @property
    def meter(self) -> SimulatedMeter:
        """What a metering proxy would have counted for this run: every session's drawn cost, also of a session killed
        before it reported."""
        return SimulatedMeter(Decimal(str(round(self._spent, 6))))

    # ------------------------------------------------------------------ draws

    def draw(self, rng: np.random.Generator) -> SessionDraw:
        return draw_session(self.cfg, self.arm, self.scenario, rng)

    # ------------------------------------------------------------------ files

    def _write_gold(self) -> None:
        write_gold(self.scenario, self.workspace)

    def _set_questions(self, n: int) -> None:
        set_questions(self.workspace, n)

    def _apply_defects(self, names: list[str], rng: np.random.Generator) -> list[str]:
        return apply_model_defects(self.scenario, self.workspace, names, rng)

    def use_portal(self) -> dict | None:
        """Sign in to the run's portal and fetch the first document and record set (CSV); None without a portal.

        No random draw: the portal use is the same for every run of the arm
        and scenario, and leaves the seeded draws of the session unchanged.
        The files go to ``<run>/agent/portal_downloads``, outside the
        workspace the oracle reads.
        """
        if not (self.arm.feature("portal") and getattr(self.scenario, "uses_portal", False)):
            return None
        from pilot.portal.client import PortalClient, PortalClientError
        from pilot.portal.credentials import CREDENTIALS_FILENAME

        if not (self.workspace / CREDENTIALS_FILENAME).is_file():
            return {"fetched": [], "error": f"no {CREDENTIALS_FILENAME} in the workspace"}
        dest = self.run_dir / "agent" / "portal_downloads"
        dest.mkdir(parents=True, exist_ok=True)
        fetched: list[str] = []
        try:
            client = PortalClient.from_workspace(self.workspace)
            client.sign_in()
            for doc in client.list_documents()[:1]:
                fetched.append(client.download(doc["name"], dest).name)
            for rec in client.list_records()[:1]:
                fetched.append(client.download_record(rec["id"], "csv", dest).name)
            client.sign_out()
        except (PortalClientError, KeyError, ValueError) as exc:
            # An agent that cannot use the portal carries on; the failure is kept with the draws.
            return {"fetched": fetched, "error": str(exc)}
        return {"fetched": fetched, "error": None}

    # ------------------------------------------------------------------ events

    def _events(
        self,
        draw: SessionDraw,
        turns: int,
        calls: dict[str, int],
        cost: float,
        wall: float,
        subtype: str,
        is_error: bool,
        terminal: str,
        session_id: str,
        index: int,
        rng: np.random.Generator,
    ) -> list[str]:
        ev: list[dict] = [
            {
                "type": "system",
                "subtype": "init",
                "session_id": session_id,
                "cwd": str(self.workspace),
                "tools": list(self.arm.tools),
                "model": self.model_name,
                "permissionMode": "bypassPermissions",
                "claude_code_version": self.version,
                "simulated": True,
            }
        ]
        # Spread the tool calls over the turns in a drawn order; the last turn is text.
        order = [n for n, k in sorted(calls.items()) for _ in range(k)]
        rng.shuffle(order)
        slots = (
            np.array_split(np.array(order, dtype=object), max(turns - 1, 1))
            if turns > 1
            else [np.array(order, dtype=object)]
        )
        denied_msgs: list[dict] = []
        tid = 0
        for t in range(turns):
            content: list[dict] = []
            if t < len(slots):
                for name in slots[t]:
                    tid += 1
                    content.append(
                        {
                            "type": "tool_use",
                            "id": f"toolu_sim_{index}_{tid}",
                            "name": str(name),
                            "input": {"description": "simulated"},
                        }
                    )
            if t == 0 and draw.denied is not None and index == 0:
                fam, how = draw.denied
                cmd = self.cfg["denied_commands"][fam]
                tid += 1
                ident = f"toolu_sim_{index}_{tid}"
                command = cmd if how == "direct" else f"bash -c {json.dumps(cmd)}"
                content.append({"type": "tool_use", "id": ident, "name": "Bash", "input": {"command": command}})
                denied_msgs.append({"id": ident, "how": how, "family": fam, "command": command})
            if not content:
                content = [{"type": "text", "text": "(simulated reasoning)"}]
            ev.append(
                {
                    "type": "assistant",
                    "message": {
                        "id": f"msg_sim_{session_id[:8]}_{index}_{t}",
                        "role": "assistant",
                        "model": self.model_name,
                        "content": content,
                    },
                    "simulated": True,
                }
            )
            results = []
            for block in content:
                if block["type"] != "tool_use":
                    continue
                d = next((m for m in denied_msgs if m["id"] == block["id"]), None)
                if d is None:
                    results.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": block["id"],
                            "content": "(simulated tool output)",
                            "is_error": False,
                        }
                    )
                elif d["how"] == "direct":
                    msg = f"Permission to use Bash with command {d['command']} has been denied."
                    ev.append(
                        {
                            "type": "system",
                            "subtype": "permission_denied",
                            "tool_name": "Bash",
                            "tool_use_id": d["id"],
                            "message": msg,
                            "simulated": True,
                        }
                    )
                    results.append({"type": "tool_result", "tool_use_id": d["id"], "content": msg, "is_error": True})
                else:
                    results.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": d["id"],
                            "is_error": True,
                            "content": f"{d['family']}: not available in this environment ({STUB_MARKER})",
                        }
                    )
            if results:
                ev.append({"type": "user", "message": {"role": "user", "content": results}, "simulated": True})
        result = {
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "duration_ms": int(wall * 1000),
            "num_turns": turns,
            "session_id": session_id,
            "total_cost_usd": round(cost, 6),
            "terminal_reason": terminal,
            "permission_denials": [
                {"tool_name": "Bash", "tool_use_id": d["id"], "tool_input": {"command": d["command"]}}
                for d in denied_msgs
                if d["how"] == "direct"
            ],
            "simulated": True,
        }
        if not is_error:
            result["result"] = "(simulated) The assignment is complete."
        else:
            result["errors"] = [terminal]
        ev.append(result)
        return [json.dumps(e) for e in ev]

    # ------------------------------------------------------------------ sessions

    def run_session(
        self,
        index: int,
        *,
        budget_usd: float,
        wall_s: float,
        max_turns: int,
        resume_session_id: str | None = None,
        prompt: str | None = None,
    ) -> SessionOutcome:
        rng = _rng(self.seed, self.scenario.id, self.arm.id, index)
        draw = self.draw(rng)
        if index > 0:
            rec = self.arm_cfg.get("recovery") or {"repair": 0.0, "cost_fraction": 0.3, "wall_fraction": 0.3}
            draw.cost *= rec["cost_fraction"]
            draw.wall *= rec["wall_fraction"]
            draw.turns = max(1, int(round(draw.turns * rec["cost_fraction"])))
            draw.tool_calls = {k: max(0, int(round(v * rec["cost_fraction"]))) for k, v in draw.tool_calls.items()}
            draw.agent_error = False
        capped, cap, cost, wall, turns, calls = apply_caps(
            draw, budget_usd, wall_s, max_turns, rng, self.cfg["overshoot"]
        )
        applied: list[str] = []
        portal_use = None
        if index == 0:
            portal_use = self.use_portal()
            self._write_gold()
            self._questions = draw.questions
            self._set_questions(self._questions)
            applied = self._apply_defects(draw.defects, rng)
            if capped and rng.random() < self.cfg["capped_missing"]:
                applied += self._apply_defects(["missing"], rng)
                (self.workspace / "outputs" / "completion_record.json").unlink(missing_ok=True)
        else:
            rec = self.arm_cfg.get("recovery") or {"repair": 0.0}
            if not capped and rng.random() < rec["repair"]:
                self._write_gold()
                self._set_questions(self._questions)
                applied = ["repaired"]
        session_id = resume_session_id or str(
            uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | int(rng.integers(0, 2**63)))
        )
        self._session_id = session_id
        if capped:
            subtype, is_error, terminal = {
                "cost": ("error_max_budget_usd", True, "budget_exhausted"),
                "turns": ("error_max_turns", True, "max_turns"),
                "wall": (None, True, "killed"),
            }[cap]
        elif draw.agent_error:
            subtype, is_error, terminal = "error_during_execution", True, "error"
        else:
            subtype, is_error, terminal = "success", False, "completed"
        reported = (self._spent + cost) if (index > 0 and resume_reports_cumulative(self.version)) else cost
        lines = self._events(
            draw,
            turns,
            calls,
            reported,
            wall,
            subtype or "error_during_execution",
            is_error,
            terminal,
            session_id,
            index,
            rng,
        )
        if subtype is None:
            lines = lines[:-1]  # killed at the wall limit: the CLI never printed its result
        self._spent += cost
        with open(self.transcript, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        summary = parse_stream(lines, StreamSummary(), session=index)
        (self.run_dir / "agent").mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "agent" / "simulated_draws.jsonl", "a", encoding="utf-8") as fh:
            fh.write(
                json.dumps(
                    {
                        "session": index,
                        "defects_drawn": draw.defects,
                        "defects_applied": applied,
                        "cap": cap if capped else None,
                        "cost_usd": round(cost, 6),
                        "wall_s": round(wall, 3),
                        "turns": turns,
                        "denied": draw.denied,
                        "agent_error": draw.agent_error,
                        "portal": portal_use,
                        "SIMULATED": True,
                    }
                )
                + "\n"
            )
        return SessionOutcome(
            index,
            summary,
            wall,
            exit_code=0 if not is_error else 1,
            timed_out=bool(capped and cap == "wall"),
            cli_version=self.version,
            resumed_from=resume_session_id,
        )


def start_agent(
    *, arm: Arm, scenario: Any, out_dir: Path, ws_root: Path, seed: int, model: str | None = None, **_launch: Any
) -> tuple[SimulatedBackend, None, None]:
    """The ``agent`` role of the simulated backend (:mod:`pilot.backends`); what only a CLI launch needs is ignored."""
    return SimulatedBackend(scenario, arm, run_dir=out_dir, workspace=ws_root, seed=seed, model=model), None, None
