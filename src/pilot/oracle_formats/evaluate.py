"""The oracle's entry point for every caller: the core oracle, or the core plus the deck reader.

Every scenario is judged by :func:`pilot.oracles.evaluate.evaluate`, the one
criterion loop and verdict. A scenario with no slide-deck deliverable is read
by the core's context and checks, so its verdict is the core's byte for byte.
A scenario with a ``pptx`` deliverable is read with :class:`DeckContext` and
:func:`check_deck_criterion`: the core context for every other file, and
:mod:`pilot.oracle_formats.pptx_reader` for the deck, whose slide titles are
its headings (the ``sections`` a decision is read under) and whose tables are
read as ``a | b | c`` rows, as a docx's are.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable
from pathlib import Path

from pilot.oracle_formats.pptx_reader import Deck, read_deck
from pilot.oracles import criteria as core_criteria
from pilot.oracles.context import WorkspaceContext, output_names
from pilot.oracles.evaluate import (
    FORM_KINDS,
    Check,
    CriterionResult,
    Evaluation,
    check_criterion,
    default_recalculator,
)
from pilot.oracles.recalc import Recalculator
from pilot.protocol.scenario import Criterion, Scenario

# The module, not the function of the same name that pilot.oracles exports.
core = importlib.import_module("pilot.oracles.evaluate")

DECK_KIND = "pptx"
#: Text delivered in place of a deck: noted as a substitute, and it fails the deck's presence criterion.
DECK_SUBSTITUTES = (".md", ".txt")

__all__ = [
    "CriterionResult",
    "DeckContext",
    "check_deck_criterion",
    "Evaluation",
    "default_recalculator",
    "evaluate",
    "evaluate_form",
    "evaluate_many",
    "has_deck",
    "reading",
    "FORM_KINDS",
]


def has_deck(scenario: Scenario) -> bool:
    """Whether ``scenario`` delivers a slide deck (and so needs this module rather than the core alone)."""
    return any(d.kind == DECK_KIND for d in scenario.deliverables)


class DeckContext(WorkspaceContext):
    """The core workspace context, reading ``pptx`` deliverables with the deck reader."""

    def _is_deck(self, name: str) -> bool:
        return self.deliverable(name).kind == DECK_KIND

    def status(self, name: str):
        st = super().status(name)
        if st.ok or st.substitutes or not self._is_deck(name):
            return st
        deliv = self.deliverable(name)
        names = output_names(self.outputs)
        if name in names or not names:
            return st
        subs = tuple(
            p
            for p in (self.outputs / n for n in names)
            if p.name != name
            and p.suffix.lower() in DECK_SUBSTITUTES
            and (p.stem == deliv.stem or p.name.startswith(deliv.stem + "."))
        )
        if not subs:
            return st
        from pilot.oracles.context import FileStatus

        shown = ", ".join(p.name for p in subs)
        res = FileStatus(
            name,
            None,
            f"{name} was not delivered; the text substitute {shown} stands in its place, "
            f"and this criterion requires the {deliv.kind} format",
            subs,
        )
        self._memo[("status", name)] = res
        return res

    def deck(self, name: str) -> tuple[Deck | None, str | None]:
        """The parsed deck, or the reason it cannot be read (screened and probed first)."""

        def compute():
            st = self.status(name)
            if not st.ok:
                return None, st.reason
            return read_deck(st.path, self.workspace, guard_limits=self.guard_limits)

        return self._cached(("deck", name), compute)

    def screened(self, name: str) -> str | None:
        if not self._is_deck(name):
            return super().screened(name)
        from pilot.oracles import safety

        st = self.status(name)
        return st.reason if not st.ok else safety.screen_ooxml(st.path, ".pptx")

    def guarded(self, name: str) -> str | None:
        if not self._is_deck(name):
            return super().guarded(name)
        return self.deck(name)[1]

    def well_formed(self, name: str) -> str | None:
        if not self._is_deck(name):
            return super().well_formed(name)
        deck, reason = self.deck(name)
        if reason:
            return reason
        if not deck.slides:
            return f"{name} has no slides"
        return None if any(line.strip() for line in deck.lines()) else f"{name} holds no text on its slides"

    def lines(self, name: str, *, layout: bool = False):
        if not self._is_deck(name):
            return super().lines(name, layout=layout)
        deck, reason = self.deck(name)
        return (deck.lines(), None) if reason is None else (None, reason)


class _AsDocument:
    """A view of the context in which a deck is a document: the core's decision check reads it under its
    headings (slide titles), and the core's completion-record check knows its text substitutes (.md, .txt)."""

    def __init__(self, ctx: DeckContext) -> None:
        self._ctx = ctx
        sc = ctx.scenario
        self.scenario = dataclasses.replace(
            sc,
            deliverables=tuple(
                dataclasses.replace(d, kind="docx") if d.kind == DECK_KIND else d for d in sc.deliverables
            ),
        )

    def deliverable(self, name: str):
        d = self._ctx.deliverable(name)
        return dataclasses.replace(d, kind="docx") if d.kind == DECK_KIND else d

    def __getattr__(self, attr: str):
        return getattr(self._ctx, attr)


def check_deck_criterion(ctx: WorkspaceContext, crit: Criterion) -> tuple[bool, str]:
    """The core's check of ``crit``, a deck's decision and completion record read as a document's."""
    assert isinstance(ctx, DeckContext)  # the deck reading always pairs this check with its context
    if crit.kind == "decision" and ctx.deliverable(crit.file).kind == DECK_KIND:
        # A deck's decision is read under a slide title exactly as a document's under a heading.
        return core_criteria.check_decision(_AsDocument(ctx), crit)
    if crit.kind == "completion_record":
        return core_criteria.check_completion_record(_AsDocument(ctx), crit)
    return check_criterion(ctx, crit)


def reading(scenario: Scenario) -> tuple[type[WorkspaceContext], Check]:
    """How ``scenario``'s workspaces are read: the deck reading when it delivers a deck, else the core's."""
    if has_deck(scenario):
        return DeckContext, check_deck_criterion
    return WorkspaceContext, check_criterion


def evaluate(
    scenario: Scenario,
    workspace: Path,
    input_hashes: dict[str, str] | None = None,
    *,
    recalculator: Recalculator | None = None,
    guard_limits: dict | None = None,
) -> Evaluation:
    """Judge ``workspace`` against ``scenario``'s oracle (:func:`pilot.oracles.evaluate.evaluate`, read as
    :func:`reading` says)."""
    context, check = reading(scenario)
    return core.evaluate(
        scenario,
        workspace,
        input_hashes,
        recalculator=recalculator,
        guard_limits=guard_limits,
        context=context,
        check=check,
    )


def evaluate_form(
    scenario: Scenario,
    workspace: Path,
    *,
    recalculator: Recalculator | None = None,
    guard_limits: dict | None = None,
) -> tuple[list[CriterionResult], list[str]]:
    """The oracle's form checks alone (no answer is consulted): (results, evaluation errors)."""
    context, check = reading(scenario)
    return core.evaluate_form(
        scenario, workspace, recalculator=recalculator, guard_limits=guard_limits, context=context, check=check
    )


def evaluate_many(
    items: Iterable[tuple[Scenario, Path, dict[str, str] | None]],
    *,
    recalculator: Recalculator | None = None,
) -> list[Evaluation]:
    """Evaluate many workspaces, recalculating all their workbooks in one LibreOffice process."""
    return core.evaluate_many(items, recalculator=recalculator, evaluate_one=evaluate)
