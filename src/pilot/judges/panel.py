"""The judge panel of ``protocol/study.yml`` and the judging of one run.

Each panel member (J1: one draw of the primary model; J2, J3: two
independent draws of the second model) receives the same blind prompt in its
own single-turn session. A reply that fails the output schema is retried
once; after that the judge is missing for the run, never scored zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pilot import backends, judge_providers, protocol
from pilot.judges.backend import JudgeBackend, JudgeRequest
from pilot.judges.prompt import JudgePrompt, prompt_for_run
from pilot.judges.render import RenderLimits
from pilot.judges.rubric import weighted_score
from pilot.judges.schema import VerdictError, parse_verdict

RETRY_NOTE = (
    "\n\nYour previous answer could not be used ({reason}). "
    "Answer again with the JSON object only, exactly in the form given above.\n"
)


@dataclass
class JudgeResult:
    """One judge's verdict on one run (or why it is missing)."""

    judge_id: str
    model: str
    draw: int
    backend: str
    criterion_scores: dict[str, int] = field(default_factory=dict)
    accept: bool | None = None
    rationale: str = ""
    score_0_100: float | None = None
    cost_usd: float = 0.0
    attempts: int = 0
    error: str | None = None

    @property
    def available(self) -> bool:
        return self.error is None and self.score_0_100 is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_backend(
    backend: str | JudgeBackend,
    *,
    claude_bin: Path | str | None = None,
    study: protocol.Study | None = None,
    environ: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> JudgeBackend:
    """A judge backend by name (``simulated`` or ``claude-code``), or the object given (as it was made).

    ``environ`` gives the CLI judges their upstream (the rehearsal's scripted model server) instead of this process's;
    ``timeout_s`` their time limit per call (None: the backend's own; the simulated judges need none).
    """
    if not isinstance(backend, str):
        return backend
    if backend not in backends.JUDGE_BACKENDS:
        raise ValueError(f"unknown judge backend {backend!r}; choose one of {list(backends.JUDGE_BACKENDS)}")
    return backends.role(backend, "judge")(claude_bin=claude_bin, study=study, environ=environ, timeout_s=timeout_s)


def make_panel(
    backend: str | JudgeBackend,
    panel: Iterable[dict],
    *,
    claude_bin: Path | str | None = None,
    study: protocol.Study | None = None,
    environ: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> dict[str, JudgeBackend]:
    """Each panel member's judge, by member id.

    A backend whose outputs carry a label (``simulated``: a dry run) has its
    own stand-in judge play every member, so nothing it scores can read as a
    finding; the real judge backend (``claude-code``, whose runs are findings)
    gives each member the judge of the provider study.yml names for it
    (:mod:`pilot.judge_providers`), one judge per provider. A judge object
    given instead of a name plays every member (tests, scripted sessions).
    """
    members = list(panel)
    if not isinstance(backend, str) or backend not in backends.REAL_BACKENDS:
        judge = make_backend(backend, claude_bin=claude_bin, study=study, environ=environ, timeout_s=timeout_s)
        return {m["id"]: judge for m in members}
    made: dict[str, JudgeBackend] = {}
    for m in members:
        if m["provider"] not in made:
            made[m["provider"]] = judge_providers.new_judge(
                m["provider"], claude_bin=claude_bin, study=study, environ=environ, timeout_s=timeout_s
            )
    return {m["id"]: made[m["provider"]] for m in members}


def judge_prompt(
    prompt: JudgePrompt, *, backend: JudgeBackend | Mapping[str, JudgeBackend], seed: int, panel: Iterable[dict]
) -> list[JudgeResult]:
    """Ask every panel member about one prepared prompt: ``backend`` is one judge for every member, or each
    member's judge by member id (:func:`make_panel`)."""
    results = []
    for member in panel:
        judge = backend[member["id"]] if isinstance(backend, Mapping) else backend
        res = JudgeResult(member["id"], member["model"], int(member["draw"]), judge.name)
        text = prompt.text
        for attempt in (0, 1):
            reply = judge.complete(
                JudgeRequest(
                    member["id"],
                    member["model"],
                    int(member["draw"]),
                    attempt,
                    text,
                    prompt.criteria,
                    prompt.package,
                    int(seed),
                )
            )
            res.attempts = attempt + 1
            res.cost_usd += float(reply.cost_usd or 0.0)
            if reply.error is not None:
                res.error = reply.error
                text = prompt.text
                continue
            try:
                verdict = parse_verdict(reply.text or "", prompt.criteria)
            except VerdictError as exc:
                res.error = f"reply failed the output schema: {exc}"
                text = prompt.text + RETRY_NOTE.format(reason=str(exc)[:200])
                continue
            res.error = None
            res.criterion_scores = verdict.criterion_scores
            res.accept = verdict.accept
            res.rationale = verdict.rationale
            res.score_0_100 = weighted_score(verdict.criterion_scores, prompt.criteria)
            break
        results.append(res)
    return results


def judge_run(
    scenario: Any,
    outputs_dir: Path,
    *,
    backend: str | JudgeBackend,
    seed: int,
    withheld: Iterable[str] = (),
    study: protocol.Study | None = None,
    claude_bin: Path | str | None = None,
    limits: RenderLimits | None = None,
    environ: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> list[JudgeResult]:
    """Judge one run's deliverables with the study's panel.

    ``scenario`` provides ``brief_path``, ``rubric`` and ``deliverables``;
    ``withheld`` lists the run's own identifiers (run id, node, workspace)
    that must not reach a judge; ``environ`` the CLI judges' upstream
    (default: this process's); ``timeout_s`` the time limit of each judge
    call (default: the backend's; a rehearsal's is shorter). Returns one
    result per panel member, in panel order; a missing judge has ``error``
    set and no score.
    """
    study = study or protocol.study()
    prompt = prompt_for_run(scenario, Path(outputs_dir), withheld=withheld, limits=limits)
    judges = make_panel(
        backend, study.judge_panel, claude_bin=claude_bin, study=study, environ=environ, timeout_s=timeout_s
    )
    return judge_prompt(prompt, backend=judges, seed=seed, panel=study.judge_panel)
