"""The backends a study runs on: one registry entry each, with its label and the roles it plays.

- ``simulated``: the embedded default, a dry run of the harness (the
  simulated agent writes the deliverables, the simulated judges score them
  without a CLI). Its outputs say SIMULATED.
- ``claude-code``: the real study: the pinned Claude Code CLI in the sandbox,
  the model reached through the metering proxy, three CLI judge sessions.
  Its outputs carry no label: they are findings.
- ``rehearsal``: the real harness of ``claude-code`` end to end (pinned CLI,
  sandbox, metering proxy, CLI judges) with the model played by the
  project's scripted model server (:mod:`pilot.simulated.scripted_model`).
  No key, no network, no dollar. Its outputs say REHEARSAL: they check the
  harness, never the agent.
- ``synthetic``: run tables drawn from a declared model
  (:mod:`pilot.simulated.synthetic`), for the statistics' own checks;
  SIMULATED as well.
- ``human``: the human wave's participants (conditions H0 and H1), who work
  through the participant site (:mod:`pilot.human`); their sessions are runs
  of the study like any other, judged by the study's own panel. Findings.
- ``simulated-human``: SIMULATED participants drawn from a stated model
  (:mod:`pilot.simulated.participants`), only to exercise the human wave's
  pipeline in a dry run; no person took part.

A role is a ``"module:attr"`` reference, imported only when that backend is
asked for it, so a real run never loads a stand-in:

- ``agent``: ``start_agent(**launch) -> (agent, worker_env_record, launch_error)``;
- ``judge``: ``new_judge(claude_bin=, study=, environ=, timeout_s=) -> JudgeBackend``;
- ``upstream``: a context manager ``(attempt_dir, seed) -> {ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY}``
  that the attempt's proxy and judges talk to instead of this process's (a rehearsal's also asks for labelled
  judge requests and may carry its own limits: :mod:`pilot.pipeline`);
- ``identity``: ``() -> {name: value}``, what a run depends on besides the protocol's files (the real CLI's
  version, the worker environment's lock), for :func:`pilot.identity.protocol_identity`;
- ``runtable``: ``(seed) -> DataFrame``, a run table of this backend;
- ``scenarios``: ``(ids) -> list[str]``, scenario ids a table of this backend may name beyond the bundles;
- ``participants``: ``(study_folder, wave, **options) -> ...``, a human wave drawn from a stated model (a stand-in's).

Whatever reads a run table asks :func:`label` which label its numbers
carry; no other module spells one. Adding a backend is one entry of
:data:`REGISTRY`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SIMULATED = "simulated"
CLAUDE_CODE = "claude-code"
REHEARSAL = "rehearsal"
SYNTHETIC = "synthetic"
HUMAN = "human"
SIMULATED_HUMAN = "simulated-human"

SIMULATED_LABEL = "SIMULATED"
REHEARSAL_LABEL = "REHEARSAL"
#: How each label reads where a sentence starts with it.
_QUALIFIERS = {SIMULATED_LABEL: "dry run", REHEARSAL_LABEL: "not a finding"}


@dataclass(frozen=True)
class Backend:
    """One backend: its label, whether its numbers are findings, whether it runs the CLI, and its roles."""

    name: str
    label: str  # "" for findings
    runs_cli: bool
    roles: Mapping[str, str] = field(default_factory=dict)
    judged_by: str | None = None  # the judge backend an agent backend's runs are judged by

    @property
    def finding(self) -> bool:
        return self.label == ""


REGISTRY: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            SIMULATED,
            SIMULATED_LABEL,
            runs_cli=False,
            judged_by=SIMULATED,
            roles={
                "agent": "pilot.simulated.agent:start_agent",
                "judge": "pilot.simulated.judge:new_judge",
            },
        ),
        Backend(
            CLAUDE_CODE,
            "",
            runs_cli=True,
            judged_by=CLAUDE_CODE,
            roles={
                "agent": "pilot.agents.claude_code:start_agent",
                "judge": "pilot.judges.claude_judge:new_judge",
                "identity": "pilot.agents.identity_extras:cli_identity",
            },
        ),
        Backend(
            REHEARSAL,
            REHEARSAL_LABEL,
            runs_cli=True,
            judged_by=CLAUDE_CODE,
            roles={
                "agent": "pilot.agents.claude_code:start_agent",
                "upstream": "pilot.simulated.scripted_model:scripted_upstream",
                "identity": "pilot.agents.identity_extras:cli_identity",
            },
        ),
        Backend(
            SYNTHETIC,
            SIMULATED_LABEL,
            runs_cli=False,
            roles={
                "runtable": "pilot.simulated.synthetic:generate_runtable",
                "scenarios": "pilot.simulated.synthetic:standin_scenarios",
            },
        ),
        # People on the participant site: no agent role (nothing here launches them), judged by the CLI judges of a
        # real study (a dry-run study's human runs are judged as its agent runs are: pilot.human.evaluate).
        Backend(HUMAN, "", runs_cli=False, judged_by=CLAUDE_CODE),
        Backend(
            SIMULATED_HUMAN,
            SIMULATED_LABEL,
            runs_cli=False,
            judged_by=SIMULATED,
            roles={"participants": "pilot.simulated.participants:simulate_wave"},
        ),
    )
}


@dataclass(frozen=True)
class StandIn:
    """A part of a build played by a stand-in: which part, whom it stands in for, and the stated model it follows."""

    part: str  # "agent", "judges", "graders", "participants"
    stands_for: str  # in words: "the agent under study", "the experts of A-015", ...
    model: str  # where its stated model is (a file or module), "" when it follows none
    kind: str = (
        "simulated"  # how the stand-in is made: "simulated" (a stated model) or "scripted" (the scripted server)
    )

    def phrase(self) -> str:
        """ "simulated graders standing in for the experts of A-015 (analysis/config/simulated_graders.yml)"."""
        return f"{self.kind} {self.part} standing in for {self.stands_for}" + (f" ({self.model})" if self.model else "")


#: What each backend's stand-ins are, by the part of the build they play (a real backend has none). Every sentence the
#: manuscript writes about such a part is written from these entries (:mod:`pilot.report.stand_ins`).
STAND_INS: dict[str, tuple[StandIn, ...]] = {
    SIMULATED: (
        StandIn("agent", "the agent under study (Claude Code)", "analysis/config/simulated_agent.yml"),
        StandIn("judges", "the three LLM judges", "analysis/config/simulated_judges.yml"),
    ),
    REHEARSAL: (
        StandIn("model", "the model behind the agent and the judges", "pilot.simulated.scripted_model", "scripted"),
    ),
    SYNTHETIC: (
        StandIn("run table", "the runs of the agent and the judges", "analysis/config/synthetic_runtable.yml"),
    ),
    CLAUDE_CODE: (),
}

#: The sources of a grading wave (``pilot grading create --source``): experts are people; a simulated wave is a
#: stand-in.
GRADER_STAND_INS: dict[str, StandIn | None] = {
    "experts": None,
    SIMULATED: StandIn("graders", "the experts of A-015", "analysis/config/simulated_graders.yml"),
}

#: The waves of people the protocol defines, each with where its protocol is; a build says which of them it ran.
PEOPLE_WAVES: tuple[tuple[str, str], ...] = (
    ("the expert grading wave (A-005, A-015)", "protocol/human/evaluation.md"),
    (
        "the human wave of participants working without AI (H0) and with conversational assistance (H1; A-002)",
        "protocol/human/protocol.md",
    ),
)


def stand_ins(backend: str) -> tuple[StandIn, ...]:
    """The stand-ins of ``backend``'s builds (none for the real study); an unknown backend is refused."""
    get(backend)
    return STAND_INS.get(backend, ())


def grader_stand_in(source: str) -> StandIn | None:
    """The stand-in a grading wave of ``source`` is (None for a wave of experts); an unknown source is refused."""
    if source not in GRADER_STAND_INS:
        raise UnknownBackend(f"unknown grading source {source!r}; the sources are {', '.join(GRADER_STAND_INS)}")
    return GRADER_STAND_INS[source]


class UnknownBackend(ValueError):
    """A backend name the registry does not hold, or a role it does not play."""


def names(role: str | None = None) -> tuple[str, ...]:
    """The registered backends (those playing ``role`` when given), in registry order."""
    return tuple(n for n, b in REGISTRY.items() if role is None or role in b.roles)


def get(name: str) -> Backend:
    """The registry entry of ``name``; an unknown name is refused with the list of known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownBackend(f"unknown backend {name!r}; the backends are {', '.join(REGISTRY)}") from None


def has_role(name: str, role: str) -> bool:
    return role in get(name).roles


def role(name: str, role_name: str) -> Any:
    """What ``name`` plays as ``role_name``, imported on first use; refused when it plays no such role."""
    backend = get(name)
    ref = backend.roles.get(role_name)
    if ref is None:
        playing = names(role_name)
        raise UnknownBackend(
            f"backend {name!r} has no {role_name} role; the backends with one are {', '.join(playing) or 'none'}"
        )
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


#: Backends ``pilot study run`` and the runner accept.
AGENT_BACKENDS = names("agent")
#: Backends whose judges the panel can use (``PILOT_JUDGE_BACKEND``).
JUDGE_BACKENDS = names("judge")
#: Backends that run the pinned CLI inside the sandbox behind the metering proxy.
CLI_BACKENDS = frozenset(n for n, b in REGISTRY.items() if b.runs_cli)
#: Backends whose numbers are findings.
REAL_BACKENDS = frozenset(n for n, b in REGISTRY.items() if b.finding)
#: Backends of the human wave's sessions (people, or SIMULATED participants): their runs are wave ``human``, kept
#: apart from the agent runs (the agent run table, a study's one agent backend, a scheduler's recovery).
PARTICIPANT_BACKENDS = frozenset({HUMAN, SIMULATED_HUMAN})


def label(backend: str) -> str:
    """The label of one backend's outputs: ``""`` for the real study; any backend not known as real is SIMULATED."""
    entry = REGISTRY.get(backend)
    return entry.label if entry is not None else SIMULATED_LABEL


def label_of(backends: Iterable[str]) -> str:
    """The label of a table whose rows come from ``backends``: a rehearsal's or a dry run's, never a finding's if any
    row is not real.

    SIMULATED wins over REHEARSAL when both occur (a mixed table is no rehearsal of anything).
    """
    labels = {label(str(b)) for b in backends}
    for candidate in (SIMULATED_LABEL, REHEARSAL_LABEL):
        if candidate in labels:
            return candidate
    return ""


def qualifier(text_label: str) -> str:
    """What a label means, in the words that follow it: ``dry run`` for SIMULATED, ``not a finding`` for REHEARSAL."""
    return _QUALIFIERS.get(text_label, "")


def judge_backend(agent_backend: str) -> str:
    """The judge backend an agent backend is judged by (the CLI judges for every CLI backend)."""
    judged_by = get(agent_backend).judged_by
    if judged_by is None:
        raise UnknownBackend(f"backend {agent_backend!r} runs no agent, so nothing of it is judged")
    return judged_by
