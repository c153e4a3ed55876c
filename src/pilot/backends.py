"""The backends a study runs on, and the label every output of each carries.

- ``simulated``: the embedded default, a dry run of the harness (the
  simulated agent writes the deliverables, the simulated judges score them
  without a CLI). Its outputs say SIMULATED.
- ``claude-code``: the real study: the pinned Claude Code CLI in the sandbox,
  the model reached through the metering proxy, three CLI judge sessions.
  Its outputs carry no label: they are findings.
- ``rehearsal``: the real harness of ``claude-code`` end to end (pinned CLI,
  sandbox, metering proxy, CLI judges) with the model played by the
  project's scripted model server (:mod:`pilot.simulated.scripted_model`). No key, no
  network, no dollar. Its outputs say REHEARSAL: they check the harness,
  never the agent.

A synthetic run table (:mod:`pilot.simulated.synthetic`) has backend
``synthetic`` and is SIMULATED as well. Whatever reads a run table asks
:func:`label` which label its numbers carry; no other module spells one.
"""

from __future__ import annotations

from typing import Iterable

SIMULATED = "simulated"
CLAUDE_CODE = "claude-code"
REHEARSAL = "rehearsal"
SYNTHETIC = "synthetic"

#: Backends ``pilot study run`` and the runner accept.
AGENT_BACKENDS = (SIMULATED, CLAUDE_CODE, REHEARSAL)
#: Backends that run the pinned CLI inside the sandbox behind the metering proxy.
CLI_BACKENDS = frozenset({CLAUDE_CODE, REHEARSAL})
#: Backends whose numbers are findings.
REAL_BACKENDS = frozenset({CLAUDE_CODE})

SIMULATED_LABEL = "SIMULATED"
REHEARSAL_LABEL = "REHEARSAL"
_LABELS = {SIMULATED: SIMULATED_LABEL, SYNTHETIC: SIMULATED_LABEL, REHEARSAL: REHEARSAL_LABEL}
#: How each label reads where a sentence starts with it.
_QUALIFIERS = {SIMULATED_LABEL: "dry run", REHEARSAL_LABEL: "not a finding"}


def label(backend: str) -> str:
    """The label of one backend's outputs: ``""`` for the real study; any backend not known as real is SIMULATED."""
    if backend in REAL_BACKENDS:
        return ""
    return _LABELS.get(backend, SIMULATED_LABEL)


def label_of(backends: Iterable[str]) -> str:
    """The label of a table whose rows come from ``backends``: a rehearsal's or a dry run's, never a finding's if any row is not real.

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
    """The judge backend an agent backend is judged by: the CLI judges for every CLI backend."""
    return CLAUDE_CODE if agent_backend in CLI_BACKENDS else SIMULATED
