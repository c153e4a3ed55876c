"""Traps proved by the wrong answer itself, and the probes of each criterion's tolerance and patterns.

Each trap that ``oracle.yml`` declares gets a *fallen package*: the package
of a worker who falls into it. It is built from the gold package by the
trap's ``fallen`` edits (cells typed over, passages reworded) or, when the
trap declares none, by the generator module's
``solve_fallen(trap_id, inputs_dir, outputs_dir)``, the reference solver
with the careless reading. It is evaluated in the same batch as every other
package, and:

- ``trap:<id>``: exactly the trap's ``caught_by`` criteria fail on it (an
  optional criterion it also fails is noted: it decides nothing), each
  required, none a check that any delivered file satisfies whatever it says
  (presence, form, length, sections, formulas, the completion record), each
  breaking alone under its own mutation; the package is not accepted and
  touches no input;
- ``probe:<criterion>`` (a bundle that declares traps): a numeric
  criterion's tolerance admits no figure of a fallen package that the gold
  does not state (the figure a trap produces is rejected however near it
  lands; its mutation row proves the figure just outside the tolerance is
  rejected too); a text criterion's patterns are not all satisfied by the
  brief's own words (a generic word any deliverable repeating the brief
  would use), and no fallen package of a trap it catches satisfies them.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from pilot import defects
from pilot.oracles.evaluate import FORM_KINDS, CriterionResult, Evaluation
from pilot.protocol.scenario import Criterion, Scenario, Trap
from pilot.scenario_kit.readings import NUMERIC_KINDS, Reading, read_package
from pilot.scenario_kit.report import CheckRow

#: The criterion kinds read as words: their patterns must say more than the brief does.
TEXT_KINDS = ("text_contains", "workbook_contains")
#: What a module provides to build a trap's fallen package when oracle.yml declares no edits for it.
SOLVE_FALLEN = "solve_fallen"


class FallenUnavailable(ValueError):
    """A trap's fallen package cannot be built: no edits and no ``solve_fallen``, or building it failed."""


@dataclass
class Fallen:
    """One trap's fallen package: where it is and how it was made, or why it could not be made; then its evaluation."""

    trap: Trap
    workspace: Path | None
    made: str
    evaluation: Evaluation | None = None


def package_name(trap: Trap) -> str:
    return f"fallen:{trap.id}"


def build_fallen(scenario: Scenario, trap: Trap, gold: Path, dst: Path) -> Fallen:
    """The fallen package of ``trap`` under ``dst``, made from the gold workspace ``gold``."""
    ws = defects.copy_workspace(gold, dst)
    if trap.fallen:
        made = []
        for i, edit in enumerate(trap.fallen):
            try:
                made.append(defects.apply_fallen_edit(scenario, ws, edit))
            except (defects.DefectNotApplicable, KeyError, ValueError) as exc:
                return Fallen(trap, None, f"its fallen edit {i} ({edit.file}) cannot be made: {exc}")
        return Fallen(trap, ws, "; ".join(made))
    from pilot.scenarios.generate import library_module

    module = library_module(scenario)
    solver: Callable | None = getattr(module, SOLVE_FALLEN, None)
    if solver is None:
        return Fallen(
            trap,
            None,
            f"no fallen package: declare under the trap in oracle.yml the edits of the gold that fall into it "
            f"(fallen:), or define {SOLVE_FALLEN}(trap_id, inputs_dir, outputs_dir) in {module.__name__}",
        )
    out = ws / "outputs"
    shutil.rmtree(out)
    out.mkdir()
    try:
        solver(trap.id, ws / "inputs", out)
    except Exception as exc:  # noqa: BLE001 - the author's solver: its failure is the row's reason, not a crash
        return Fallen(trap, None, f"{module.__name__}.{SOLVE_FALLEN}({trap.id!r}) failed: {type(exc).__name__}: {exc}")
    return Fallen(trap, ws, f"{module.__name__}.{SOLVE_FALLEN}({trap.id!r}), the reference solver misled by the trap")


# -------------------------------------------------------------------------- the trap rows


def _failing(ev: Evaluation) -> dict[str, CriterionResult]:
    return {c.id: c for c in ev.criteria if not c.passed}


def catcher_problems(scenario: Scenario, trap: Trap) -> list[str]:
    """What makes a declared catching criterion unable to catch the trap: optional, or a check any file satisfies."""
    problems = []
    for cid in trap.caught_by:
        c = scenario.oracle.by_id(cid)
        if c.kind in FORM_KINDS:
            problems.append(
                f"{cid} is a {c.kind} criterion, which any delivered file satisfies whatever it says: "
                "it cannot catch a trap"
            )
        if not c.required:
            problems.append(f"{cid} is not required, so falling into the trap still passes")
    return problems


def fallen_problems(trap: Trap, fallen: Fallen) -> tuple[list[str], list[str]]:
    """(problems, notes) of a trap's evaluated fallen package: it must fail every catching criterion and no other
    required one, not be accepted and touch no input. An optional criterion it also fails is a note, not a problem
    (it decides nothing)."""
    ev = fallen.evaluation
    if fallen.workspace is None or ev is None:
        return [fallen.made], []
    problems, notes = [], []
    failing = _failing(ev)
    declared = set(trap.caught_by)
    passed = [
        f"{cid} ({next(c.reason for c in ev.criteria if c.id == cid)})" for cid in trap.caught_by if cid not in failing
    ]
    if passed:
        problems.append("its fallen package passes " + "; ".join(passed))
    beyond = [f"{cid} ({c.reason})" for cid, c in failing.items() if cid not in declared and c.required]
    if beyond:
        problems.append("its fallen package also fails " + "; ".join(beyond) + ", which caught_by does not name")
    optional = [cid for cid, c in failing.items() if cid not in declared and not c.required]
    if optional:
        notes.append(f"it also fails the optional {', '.join(optional)}")
    if ev.D:
        problems.append("its fallen package is accepted (D=1)")
    if ev.E:
        problems.append(f"its fallen package touches an input (E=1: {'; '.join(ev.E_reasons)})")
    return problems, notes


def trap_row(scenario: Scenario, trap: Trap, fallen: Fallen, mutation_rows: dict[str, CheckRow]) -> CheckRow:
    """``trap:<id>``: the fallen package fails exactly the catching criteria, each a required content check that
    breaks alone under its mutation; anything else is named."""
    problems = catcher_problems(scenario, trap)
    for cid in trap.caught_by:
        row = mutation_rows.get(f"mutation:{cid}")
        if row is None or not row.ok:
            problems.append(f"{cid} does not break alone under its mutation ({row.reason if row else 'no mutation'})")
    found, notes = fallen_problems(trap, fallen)
    problems += found
    if problems:
        return CheckRow(scenario.id, f"trap:{trap.id}", False, "; ".join(problems))
    return CheckRow(
        scenario.id,
        f"trap:{trap.id}",
        True,
        f"its fallen package fails exactly {', '.join(trap.caught_by)} (D=0)"
        + (f"; {'; '.join(notes)}" if notes else "")
        + f": {fallen.made}",
    )


# -------------------------------------------------------------------------- the probes


def _figures(values: tuple[Decimal, ...]) -> str:
    return ", ".join(defects.shown(v) for v in dict.fromkeys(values))


def numeric_probe(scenario: Scenario, c: Criterion, gold: Reading, fallen: list[tuple[Fallen, Reading]]) -> CheckRow:
    """``probe:<criterion>`` of a numeric criterion: its tolerance admits no figure of a fallen package the gold
    does not state."""
    tol = f"{defects.shown(c.get('expected'))} ± {defects.shown(c.get('tolerance'))}"
    problems, moved = [], []
    for f, reading in fallen:
        new = [v for v in reading.figures if v not in gold.figures]
        moved += new
        admitted = [v for v in reading.accepted if v not in gold.accepted]
        passed = f.evaluation is not None and any(r.id == c.id and r.passed for r in f.evaluation.criteria)
        if passed and admitted and not set(reading.accepted) & set(gold.accepted):
            problems.append(
                f"its tolerance {tol} admits {_figures(tuple(admitted))}, the figure of trap {f.trap.id}'s "
                "fallen package "
                f"(the gold states {_figures(gold.accepted) or 'nothing it accepts'})"
            )
    if problems:
        return CheckRow(scenario.id, f"probe:{c.id}", False, "; ".join(problems))
    if moved:
        # The fallen figures nearest the expected value: those a looser tolerance would admit first.
        expected = Decimal(repr(c.get("expected")))
        nearest = sorted(dict.fromkeys(moved), key=lambda v: abs(v - expected))[:3]
        return CheckRow(
            scenario.id,
            f"probe:{c.id}",
            True,
            f"{tol} admits none of the fallen packages' figures (nearest: {_figures(tuple(nearest))})",
        )
    return CheckRow(scenario.id, f"probe:{c.id}", True, f"{tol}; no trap moves its figure")


def _brief_words(brief: str, pattern: str) -> str | None:
    """Where the brief (markup and line breaks removed) satisfies ``pattern``, quoted with its line; None if nowhere."""
    for n, line in enumerate(brief.splitlines(), 1):
        m = re.search(pattern, line.replace("`", "").replace("*", ""), re.I)
        if m:
            return f"{m.group(0)!r}, brief.md line {n}"
    flat = " ".join(brief.replace("`", "").replace("*", "").split())
    m = re.search(pattern, flat, re.I)
    return f"{m.group(0)!r}, across lines of brief.md" if m else None


def text_probe(scenario: Scenario, c: Criterion, fallen: list[Fallen]) -> CheckRow:
    """``probe:<criterion>`` of a text criterion: the brief's own words do not satisfy all its patterns, and no
    fallen package of a trap it catches does."""
    problems = []
    patterns = list(c.get("patterns"))
    where = [_brief_words(scenario.brief, p) for p in patterns]
    if all(where):
        problems.append(
            f"the brief's own words satisfy {'each of its patterns' if len(patterns) > 1 else 'its pattern'} ("
            + "; ".join(f"/{p}/ by {w}" for p, w in zip(patterns, where, strict=True))
            + f"): a {c.file} that repeats the brief passes it; name what only the careful answer states"
        )
    for f in fallen:
        if c.id in f.trap.caught_by and f.evaluation is not None:
            res = next(r for r in f.evaluation.criteria if r.id == c.id)
            if res.passed:
                problems.append(
                    f"trap {f.trap.id}'s fallen package, whose wording it must reject, satisfies it ({res.reason})"
                )
    if problems:
        return CheckRow(scenario.id, f"probe:{c.id}", False, "; ".join(problems))
    catching = [f.trap.id for f in fallen if c.id in f.trap.caught_by]
    return CheckRow(
        scenario.id,
        f"probe:{c.id}",
        True,
        "the brief's words do not satisfy it"
        + (f"; the fallen package of {', '.join(catching)} does not either" if catching else ""),
    )


def probe_rows(scenario: Scenario, gold: Path, fallen: list[Fallen], recalculator) -> list[CheckRow]:
    """Every numeric and text criterion of a bundle that declares traps, probed with the fallen packages."""
    numeric = [c for c in scenario.oracle.criteria if c.kind in NUMERIC_KINDS]
    built = [f for f in fallen if f.workspace is not None and f.evaluation is not None]
    gold_reads = read_package(scenario, gold, numeric, recalculator)
    fallen_reads = [(f, read_package(scenario, ws, numeric, recalculator)) for f in built if (ws := f.workspace)]
    rows = []
    for c in scenario.oracle.criteria:
        if c.kind in NUMERIC_KINDS:
            rows.append(numeric_probe(scenario, c, gold_reads[c.id], [(f, r[c.id]) for f, r in fallen_reads]))
        elif c.kind in TEXT_KINDS:
            rows.append(text_probe(scenario, c, built))
    return rows
