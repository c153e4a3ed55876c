"""The manuscript's sentences about stand-ins and about the waves of people, written from the backends' registry.

Whatever part of a build a stand-in plays (the agent, the judges, the
graders, the participants) is described by the registry entry of its backend
or source (:data:`pilot.backends.STAND_INS`, :data:`pilot.backends.GRADER_STAND_INS`),
so every sentence about it says what it is, whom it stands in for and where
its stated model is; and the paper says which waves of people the protocol
defines were not run (:data:`pilot.backends.PEOPLE_WAVES`). The sentences are
LaTeX (paths in typewriter type) and start with the build's label when the
part is no finding.
"""

from __future__ import annotations

from collections.abc import Iterable

from pilot import backends
from pilot.latex import latex_escape


def _tt(model: str) -> str:
    # A path in typewriter type that may break at its slashes and dots (url's \nolinkurl), so no line sticks out.
    return f"\\nolinkurl{{{model}}}"


def _phrase(s: backends.StandIn, article: bool = False) -> str:
    a = "a " if article and not s.part.endswith("s") else ""
    return f"{a}{latex_escape(s.kind)} {latex_escape(s.part)} standing in for {latex_escape(s.stands_for)}" + (
        f" ({_tt(s.model)})" if s.model else ""
    )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def study_sentence(used: Iterable[str]) -> str:
    """What the study's runs were made by: the stand-ins of every backend its attempts used, or the real parts."""
    used = sorted(set(used))  # read once: a generator would be spent before the label is taken
    entries = [s for b in used for s in backends.stand_ins(b)]
    if not entries:
        return (
            "The agent and the judges of this study are the real ones: the pinned CLI and the models the protocol "
            "names."
        )
    label = backends.label_of(used)
    return (
        f"{label}: the runs of this build were made by {_and([_phrase(s, article=True) for s in entries])}; "
        "no model the protocol names was called, and no person took part."
    )


def grader_noun(source: str) -> str:
    """How the text names the graders of a wave: ``simulated graders`` for a stand-in, ``experts`` otherwise."""
    s = backends.grader_stand_in(source)
    return f"{s.kind} graders" if s is not None else "experts"


def grading_status(source: str | None) -> str:
    """The grading wave's status in a phrase: who graded, or that it was not run."""
    if not source:
        return "not run for this study: no person, and no stand-in, graded a package"
    s = backends.grader_stand_in(source)
    if s is None:
        return "run with experts of each scenario's occupation"
    return f"in this build played by {_phrase(s)}; no person took part"


def grading_sentence(source: str | None) -> str:
    """One sentence on who graded the packages of the wave the paper reports (or that none did)."""
    if not source:
        return "The expert grading wave was not run for this study: no person, and no stand-in, graded a package."
    s = backends.grader_stand_in(source)
    if s is None:
        return "The packages were graded by experts of each scenario's occupation (A-015)."
    return (
        f"{backends.SIMULATED_LABEL}: the packages were graded by {_phrase(s)}, drawn by "
        f"\\texttt{{pilot grading simulate}}; no person took part, so the wave checks the analysis, not the judges."
    )


def people_waves_sentence(grading_source: str | None, human_source: str | None = None) -> str:
    """Which waves of people the protocol defines and this build did not run with people.

    ``human_source`` is the study's human wave (:func:`pilot.human.store.study_sources`): ``participants`` (people),
    ``simulated`` (SIMULATED participants), or None/empty when the study has none.
    """
    parts, ran = [], 0
    for wave, where in backends.PEOPLE_WAVES:
        if "grading" in wave:
            s = backends.grader_stand_in(grading_source) if grading_source else None
            if grading_source and s is None:
                ran += 1
                continue  # run with people: not among the waves that were not
            status = f"was played by {s.kind} graders" if s is not None else "has not been run"
        elif human_source == "participants":
            ran += 1
            continue
        elif human_source == "simulated":
            status = (
                f"was played by {backends.SIMULATED_LABEL} participants "
                f"({_tt('analysis/config/simulated_participants.yml')})"
            )
        else:
            status = "has not been run"
        parts.append(f"{latex_escape(wave)} {status} ({_tt(where)})")
    if not parts:
        return "Every wave of people the protocol defines was run."
    lead = "none was run with people for this build" if not ran else "these were not run with people for this build"
    return f"Of the waves of people the protocol defines, {lead}: " + _and(parts) + "."
