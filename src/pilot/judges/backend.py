"""What a judge backend is given and returns.

Both backends (the real Claude Code CLI and the simulated judge) receive the
same :class:`JudgeRequest` and answer with a :class:`JudgeReply` whose text
goes through the same schema check. The real backend reads only
``request.prompt``; the simulated one reads the rendered package's features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pilot.judges.rubric import Criterion

if TYPE_CHECKING:  # the office readers load with the panel, not with `pilot judge --help`
    from pilot.judges.render import RenderedPackage


@dataclass(frozen=True)
class JudgeRequest:
    """One call to one judge of the panel."""

    judge_id: str
    model: str
    draw: int
    attempt: int  # 0 for the first call, 1 for the one retry
    prompt: str
    criteria: list[Criterion]
    package: RenderedPackage
    seed: int


@dataclass(frozen=True)
class JudgeReply:
    """A backend's raw answer: the reply text, what it cost, or why it failed."""

    text: str | None
    cost_usd: float
    error: str | None = None


class JudgeBackend(Protocol):
    """A way of asking one judge for a verdict."""

    name: str

    def complete(self, request: JudgeRequest) -> JudgeReply: ...
