"""Blind LLM judges: rendering, prompt, output schema, panel and backends."""

from pilot.lazy_exports import lazy_exports

_EXPORTS = {
    "JudgeResult": "pilot.judges.panel",
    "judge_prompt": "pilot.judges.panel",
    "judge_run": "pilot.judges.panel",
    "make_backend": "pilot.judges.panel",
    "make_panel": "pilot.judges.panel",
    "JudgePrompt": "pilot.judges.prompt",
    "build_prompt": "pilot.judges.prompt",
    "prompt_for_run": "pilot.judges.prompt",
    "RenderedDeliverable": "pilot.judges.render",
    "RenderedPackage": "pilot.judges.render",
    "RenderLimits": "pilot.judges.render",
    "render_package": "pilot.judges.render",
    "Criterion": "pilot.judges.rubric",
    "RubricError": "pilot.judges.rubric",
    "criteria_from": "pilot.judges.rubric",
    "scenario_criteria": "pilot.judges.rubric",
    "weighted_score": "pilot.judges.rubric",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "Criterion",
    "JudgePrompt",
    "JudgeResult",
    "RenderLimits",
    "RenderedDeliverable",
    "RenderedPackage",
    "RubricError",
    "build_prompt",
    "criteria_from",
    "scenario_criteria",
    "judge_prompt",
    "judge_run",
    "make_backend",
    "make_panel",
    "prompt_for_run",
    "render_package",
    "weighted_score",
]
