"""The judge providers: who answers a judge panel member's prompt, one registry entry each.

A panel member of ``protocol/study.yml`` is named ``provider/model``
(``claude-code/claude-opus-5-5``): the provider is chosen per member, not by
the agent backend, and the model is what that provider is asked to run. A
provider is a lazy ``"module:attr"`` reference to a factory
``new_judge(claude_bin=, study=, environ=, timeout_s=) -> JudgeBackend``
(:mod:`pilot.judges.backend`), imported only when a member needs it, so
that naming a provider loads nothing.

- ``claude-code``: the pinned Claude Code CLI, one single-turn session per
  call (:mod:`pilot.judges.claude_judge`); with a rehearsal's upstream in
  its environment it talks to the scripted model server instead, and the
  rehearsal's label says so.
- ``simulated``: the stand-in judges (:mod:`pilot.simulated.judge`), which
  score a rendered package's observable features without any model. A
  stand-in is never named in study.yml: a backend whose outputs carry a label
  (:func:`pilot.backends.label`) has its own judge play every member.

A second real provider (another vendor's API, a local model) is one entry
here and one module holding its factory; the panel, the prompt, the schema
check and the run table stay as they are.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

#: The label of a stand-in provider's verdicts (as :data:`pilot.backends.SIMULATED_LABEL`).
SIMULATED_LABEL = "SIMULATED"
#: ``provider/model``: a provider's name, a slash, the model's id.
MEMBER_PATTERN = r"^[a-z][a-z0-9-]{0,63}/[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


@dataclass(frozen=True)
class JudgeProvider:
    """One provider: its name, the factory of its judges, and its label (``""``: its verdicts can be findings)."""

    name: str
    factory: str
    label: str = ""

    @property
    def finding(self) -> bool:
        return self.label == ""


REGISTRY: dict[str, JudgeProvider] = {
    p.name: p
    for p in (
        JudgeProvider("claude-code", "pilot.judges.claude_judge:new_judge"),
        JudgeProvider("simulated", "pilot.simulated.judge:new_judge", SIMULATED_LABEL),
    )
}


class UnknownProvider(ValueError):
    """A provider name the registry does not hold."""


def get(name: str) -> JudgeProvider:
    """The registry entry of ``name``; an unknown name is refused with the list of known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownProvider(f"unknown judge provider {name!r}; the providers are {', '.join(REGISTRY)}") from None


def split(member: str) -> tuple[str, str]:
    """``provider/model`` as its two parts (the first slash divides them)."""
    provider, sep, model = member.partition("/")
    if not sep or not provider or not model:
        raise UnknownProvider(f"{member!r} is not provider/model")
    return provider, model


def new_judge(name: str, **kwargs: Any) -> Any:
    """A judge of provider ``name`` (its factory imported on first use), made with ``kwargs``."""
    module, _, attr = get(name).factory.partition(":")
    return getattr(importlib.import_module(module), attr)(**kwargs)
