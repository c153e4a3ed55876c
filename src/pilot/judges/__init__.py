"""Blind LLM judges: rendering, prompt, output schema, panel and backends."""

from pilot.judges.panel import BACKENDS, JudgeResult, judge_prompt, judge_run, make_backend
from pilot.judges.prompt import JudgePrompt, build_prompt, prompt_for_run
from pilot.judges.render import RenderedDeliverable, RenderedPackage, RenderLimits, render_package
from pilot.judges.rubric import Criterion, RubricError, criteria_from, weighted_score

__all__ = [
    "BACKENDS",
    "Criterion",
    "JudgePrompt",
    "JudgeResult",
    "RenderLimits",
    "RenderedDeliverable",
    "RenderedPackage",
    "RubricError",
    "build_prompt",
    "criteria_from",
    "judge_prompt",
    "judge_run",
    "make_backend",
    "prompt_for_run",
    "render_package",
    "weighted_score",
]
