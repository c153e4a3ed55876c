"""The checks of ``pilot scenarios check`` that evaluate packages: can the oracle pass the reference and fail the rest?

For each scenario the kit builds, from the gold package, the packages a run
could hand in, each with what the oracle must say about it, declared here
and not read off the oracle:

- ``gold``: D = 1, E = 0, every criterion passes;
- ``no-op``: an empty ``outputs/``: D = 0, E = 0, every required criterion that names a deliverable fails;
- ``substitute:<file>``: the A0 text substitute of a binary deliverable (declared in the completion
  record): its ``present`` criterion fails, the criteria of that file are blocked by it, nothing else fails;
- ``mutation:<criterion>``: the defect of :mod:`pilot.defects` made for that criterion: it fails and
  nothing else does on its own (a criterion of the same file may be blocked by it); a required criterion no
  defect can break is a failure of the bundle;
- ``input:<edit>``: an input edited, deleted, added or replaced by a symlink: E = 1;
- ``cheat:<kind>``: the inputs handed in under the deliverables' names, a completion record claiming success
  over an empty package, another scenario's gold package under this one's names, a deliverable that is a
  symlink out of the workspace, a workbook of hard-coded values: each D = 0, each verdict within
  :data:`VERDICT_BOUND_S`;
- ``defect:<name>``: each named defect the simulated agent and the scripted worker plant
  (:data:`pilot.defects.PLANTERS`, those that apply), drawn with a seed of the scenario's, breaks what it declares:
  some of its declared criteria fail on their own and nothing outside them fails (D stays 1 only when what it hit
  is optional), or E = 1 for an input defect;
- ``self-check``: the A4 tool passes the gold package and fails the no-op and every text substitute.

Every package of every scenario is evaluated in one batch, so one LibreOffice
recalculates all their workbooks.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pilot import defects, paths
from pilot.protocol import ProtocolError
from pilot.protocol.scenario import COMPLETION_RECORD, Scenario, list_scenarios, load_scenario
from pilot.scenario_kit import readings, traps
from pilot.scenario_kit.report import CheckReport, CheckRow
from pilot.scenarios.generate import build_gold_workspace, check_inputs

#: Binary deliverables a text substitute stands in for (A0).
BINARY_KINDS = ("xlsx", "docx", "pdf", "pptx")
#: A verdict on a hostile or cheating package must come within this many seconds.
VERDICT_BOUND_S = 60.0
#: The pilot's ten bundles name their traps in the oracle header's prose: their oracle.yml is in every study's freeze
#: manifest, so it cannot gain a ``traps:`` list (protocol/interpretations.md). Every other bundle must declare its
#: traps.
TRAPS_IN_PROSE = frozenset(
    {"ACC-01", "BANK-01", "ENG-01", "HEALTH-01", "HR-01", "LEGAL-01", "MKT-01", "OPS-01", "PROC-01", "RES-01"}
)


@dataclass
class Package:
    """One package of one scenario, how it was made, and the rule its evaluation must satisfy."""

    scenario: Scenario
    name: str
    workspace: Path
    made: str
    expect: Callable[..., str | None]  # (evaluation) -> None when as declared, else why not
    evaluation: object | None = None


@dataclass
class ScenarioPackages:
    scenario: Scenario
    packages: list[Package] = field(default_factory=list)
    rows: list[CheckRow] = field(default_factory=list)
    build_s: float = 0.0
    # One fallen package per declared trap, evaluated in the same batch and judged by its trap row.
    fallen: list[traps.Fallen] = field(default_factory=list)


# -------------------------------------------------------------------------- what each package must give


def _failed(ev) -> dict[str, object]:
    return {c.id: c for c in ev.criteria if not c.passed}


def _own(ev) -> set[str]:
    return {c.id for c in ev.criteria if not c.passed and c.blocked_by is None}


def expect_gold(ev) -> str | None:
    bad = _failed(ev)
    if bad or ev.E or not ev.D:
        return f"gold: D={int(bool(ev.D))} E={int(bool(ev.E))}; failing " + "; ".join(
            f"{k} ({c.reason})" for k, c in bad.items()
        )
    return None


def expect_noop(scenario: Scenario) -> Callable:
    required = [c.id for c in scenario.oracle.criteria if c.required and c.file]

    def check(ev) -> str | None:
        bad = _failed(ev)
        passing = [cid for cid in required if cid not in bad]
        if ev.D or ev.E or passing:
            return (
                f"an empty outputs/ gives D={int(bool(ev.D))} E={int(bool(ev.E))}; "
                f"still passing: {', '.join(passing) or 'none'}"
            )
        return None

    return check


def expect_substitute(scenario: Scenario, name: str) -> Callable:
    present = [c.id for c in scenario.oracle.criteria if c.kind == "present" and c.file == name]

    def check(ev) -> str | None:
        own = _own(ev)
        if not present:
            return f"{name} has no 'present' criterion, so a text substitute of it is judged only by what it says"
        if own != set(present):
            return f"the text substitute of {name} fails {sorted(own) or 'nothing'} on its own, not exactly {present}"
        stray = [c.id for c in ev.criteria if not c.passed and c.blocked_by is not None and c.file != name]
        if stray:
            return f"the text substitute of {name} also fails {stray}, criteria of other files"
        if ev.D and any(c.required for c in scenario.oracle.criteria if c.id in present):
            return f"the text substitute of {name} is accepted (D=1)"
        return None

    return check


def expect_only(criterion: str) -> Callable:
    def check(ev) -> str | None:
        own = _own(ev)
        if own != {criterion}:
            return f"fails {sorted(own) or 'nothing'} on its own, not exactly [{criterion}]"
        stray = [c.id for c in ev.criteria if not c.passed and c.blocked_by not in (None, criterion)]
        if stray:
            return f"also fails {stray}, blocked by another criterion"
        if ev.E:
            return "counted as a critical violation (E=1), though no input changed"
        return None

    return check


def expect_critical(ev) -> str | None:
    return None if ev.E else f"E=0: the input-hash check missed it ({'; '.join(ev.E_reasons) or 'no reason'})"


def expect_declared(planted: defects.Planted) -> Callable:
    """A named defect breaks what it declares: an input defect is critical; any other fails some of its declared
    criteria on its own, and nothing it does not declare fails, on its own or blocked."""

    def check(ev) -> str | None:
        if planted.critical:
            return expect_critical(ev)
        declared = set(planted.breaks)
        own = _own(ev)
        if not own:
            return f"no criterion fails: the oracle does not see it (declared {sorted(declared)})"
        beyond = sorted(
            c.id for c in ev.criteria if not c.passed and c.id not in declared and c.blocked_by not in declared
        )
        if not own <= declared or beyond:
            return f"fails {sorted(own | set(beyond))}, beyond what it declares ({sorted(declared)})"
        if ev.E:
            return "counted as a critical violation (E=1), though it touches no input"
        return None

    return check


def expect_rejected(ev) -> str | None:
    if ev.D:
        return "accepted (D=1)"
    if ev.seconds > VERDICT_BOUND_S:
        return f"the verdict took {ev.seconds:.0f} s, over the bound of {VERDICT_BOUND_S:.0f} s"
    return None


# -------------------------------------------------------------------------- building the packages


def _copy(gold: Path, dst: Path) -> Path:
    return defects.copy_workspace(gold, dst)


def _empty_outputs(ws: Path) -> str:
    out = ws / "outputs"
    shutil.rmtree(out)
    out.mkdir()
    return "emptied outputs/"


def _symlink_input(ws: Path) -> str:
    files = sorted(p for p in (ws / "inputs").rglob("*") if p.is_file())
    target = files[len(files) // 2]
    content = ws.parent / f"{ws.name}-outside-{target.name}"
    shutil.copyfile(target, content)
    target.unlink()
    target.symlink_to(content)
    return (
        f"replaced inputs/{target.relative_to(ws / 'inputs').as_posix()} by a symlink to an identical file outside "
        "the workspace"
    )


def _inputs_as_deliverables(scenario: Scenario, ws: Path) -> str:
    inputs = sorted(p for p in (ws / "inputs").rglob("*") if p.is_file())
    record = _read_record(ws)
    for d in scenario.file_deliverables:
        (ws / "outputs" / d.name).unlink(missing_ok=True)
        same = [p for p in inputs if p.suffix.lower() == Path(d.name).suffix.lower()] or inputs
        shutil.copyfile(same[0], ws / "outputs" / d.name)
    _write_record(ws, record)
    return "copied inputs to outputs/ under the deliverables' names"


def _record_over_nothing(scenario: Scenario, ws: Path) -> str:
    record = _read_record(ws) or {"status": "completed", "deliverables": [d.name for d in scenario.file_deliverables]}
    _empty_outputs(ws)
    record["status"] = "completed"
    _write_record(ws, record)
    return "an empty package whose completion record claims every deliverable"


def _other_gold(scenario: Scenario, ws: Path, other: Scenario, other_gold: Path) -> str:
    theirs = sorted(p for p in (other_gold / "outputs").iterdir() if p.is_file() and p.name != COMPLETION_RECORD)
    for d in scenario.file_deliverables:
        (ws / "outputs" / d.name).unlink(missing_ok=True)
        same = [p for p in theirs if p.suffix.lower() == Path(d.name).suffix.lower()] or theirs
        shutil.copyfile(same[0], ws / "outputs" / d.name)
    return f"{other.id}'s gold deliverables under this scenario's names"


def _symlink_out(scenario: Scenario, ws: Path, gold: Path) -> str:
    d = scenario.file_deliverables[0]
    path = ws / "outputs" / d.name
    path.unlink()
    path.symlink_to((gold / "outputs" / d.name).resolve())
    return f"outputs/{d.name} is a symlink to the gold file outside the workspace"


def _read_record(ws: Path) -> dict | None:
    path = ws / "outputs" / COMPLETION_RECORD
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_record(ws: Path, record: dict | None) -> None:
    if record is not None:
        (ws / "outputs" / COMPLETION_RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")


def build_packages(
    scenario: Scenario,
    root: Path,
    *,
    other: tuple[Scenario, Path] | None = None,
    recalculator=None,
    prove_traps: bool = True,
    verdicts_only: bool = False,
) -> ScenarioPackages:
    """Every package of ``scenario`` under ``root``, each with its declared expectation (nothing evaluated yet), and
    with ``prove_traps`` the fallen package of each declared trap. With ``verdicts_only``, the gold, no-op and
    mutation packages alone: those whose verdicts a study's freeze holds (:mod:`pilot.scenario_kit.verdicts`)."""
    t0 = time.perf_counter()
    out = ScenarioPackages(scenario)
    gold = build_gold_workspace(scenario, root / "gold")
    sid = scenario.id

    def add(name: str, make: Callable[[Path], str], expect: Callable) -> None:
        ws = _copy(gold, root / name.replace(":", "-"))
        try:
            made = make(ws)
        except defects.DefectNotApplicable as exc:
            out.rows.append(CheckRow(sid, name, False, f"no such package can be made: {exc}"))
            return
        out.packages.append(Package(scenario, name, ws, made, expect))

    out.packages.append(Package(scenario, "gold", gold, "the reference solution", expect_gold))
    add("no-op", _empty_outputs, expect_noop(scenario))
    for d in scenario.file_deliverables:
        if d.kind in BINARY_KINDS and not verdicts_only:
            add(
                f"substitute:{d.name}",
                lambda ws, n=d.name: defects.text_substitute(ws, n, recalculator=recalculator),
                expect_substitute(scenario, d.name),
            )
    # A numeric criterion's mutation lands just outside its tolerance, so its row proves the tolerance is as tight as
    # written; a line that feeds a total moves from the figure the gold shows there.
    numeric = [c for c in scenario.oracle.criteria if c.kind in readings.NUMERIC_KINDS]
    gold_reads = readings.read_package(scenario, gold, numeric, recalculator or _recalculator()) if numeric else {}
    for c in scenario.oracle.criteria:
        name = f"mutation:{c.id}"
        ws = _copy(gold, root / name.replace(":", "-"))
        wrong, stated, near = None, None, ""
        if c.kind in readings.NUMERIC_KINDS:
            wrong = readings.just_outside(c)
            if wrong is not None:
                near = f" (just outside {defects.shown(c.get('expected'))} ± {defects.shown(c.get('tolerance'))})"
                shown_now = gold_reads[c.id].accepted
                stated = float(shown_now[0]) if shown_now else None
        try:
            made = (
                defects.defect_for_criterion(scenario, c, ws, recalculator=recalculator, wrong=wrong, stated=stated)
                + near
            )
        except defects.DefectNotApplicable as exc:
            # An optional criterion nothing breaks weakens nothing; a required one is a criterion that cannot fail.
            out.rows.append(CheckRow(sid, name, not c.required, f"no plausible mistake breaks it: {exc}"))
            continue
        out.packages.append(Package(scenario, name, ws, made, expect_only(c.id)))
    if verdicts_only:
        out.build_s = time.perf_counter() - t0
        return out
    rng_seed = int.from_bytes(sid.encode(), "big") % (2**32)
    for name in defects.applicable_defects(scenario):
        ws = _copy(gold, root / f"defect-{name}")
        try:
            planted = defects.plant_defect(name, scenario, ws, np.random.default_rng(rng_seed))
        except defects.DefectNotApplicable as exc:
            out.rows.append(
                CheckRow(sid, f"defect:{name}", False, f"listed as applicable but cannot be planted: {exc}")
            )
            continue
        out.packages.append(Package(scenario, f"defect:{name}", ws, planted.description, expect_declared(planted)))
    add("input:edited", defects.modify_input, expect_critical)
    add("input:deleted", defects.delete_input, expect_critical)
    add("input:added", defects.add_input, expect_critical)
    add("input:symlinked", _symlink_input, expect_critical)
    add("cheat:inputs as deliverables", lambda ws: _inputs_as_deliverables(scenario, ws), expect_rejected)
    add("cheat:record over nothing", lambda ws: _record_over_nothing(scenario, ws), expect_rejected)
    if other is not None:
        add(f"cheat:{other[0].id} gold", lambda ws: _other_gold(scenario, ws, other[0], other[1]), expect_rejected)
    add("cheat:symlink out", lambda ws: _symlink_out(scenario, ws, gold), expect_rejected)
    for d in scenario.file_deliverables:
        if d.requires_formulas:
            add(
                f"cheat:hard-coded {d.name}",
                lambda ws, n=d.name: defects.strip_formulas(ws, n, recalculator=recalculator),
                expect_rejected,
            )
    for trap in scenario.oracle.traps if prove_traps else ():
        out.fallen.append(traps.build_fallen(scenario, trap, gold, root / f"fallen-{trap.id}"))
    out.build_s = time.perf_counter() - t0
    return out


def _recalculator():
    from pilot.oracle_formats.evaluate import default_recalculator

    return default_recalculator()


# -------------------------------------------------------------------------- the checks


def _selfcheck_rows(sp: ScenarioPackages, recalculator=None) -> list[CheckRow]:
    from pilot.oracle_formats.selfcheck import run_selfcheck

    t0 = time.perf_counter()
    wanted = {
        p.name: p.name == "gold" for p in sp.packages if p.name in ("gold", "no-op") or p.name.startswith("substitute:")
    }
    problems = []
    for p in sp.packages:
        if p.name in wanted:
            rep = run_selfcheck(p.workspace, sp.scenario, recalculator=recalculator)
            if rep.passed != wanted[p.name]:
                problems.append(
                    f"{p.name}: the self-check {'fails' if wanted[p.name] else 'passes'} it"
                    + (f" ({rep.lines[0]})" if rep.lines and not rep.passed else "")
                )
    return [
        CheckRow(
            sp.scenario.id,
            "self-check parity",
            not problems,
            "; ".join(problems) or f"passes gold, fails {len(wanted) - 1} package(s)",
            time.perf_counter() - t0,
        )
    ]


def _trap_rows(sp: ScenarioPackages, rows: list[CheckRow]) -> list[CheckRow]:
    """Each declared trap is caught: its fallen package fails exactly the criteria that catch it, each required, a
    check of content and breaking alone under its mutation (:func:`pilot.scenario_kit.traps.trap_row`)."""
    scenario = sp.scenario
    sid = scenario.id
    if not scenario.oracle.traps:
        if sid in TRAPS_IN_PROSE:
            return [
                CheckRow(
                    sid,
                    "traps",
                    True,
                    "named in the oracle header's prose (a frozen pilot bundle); not checked one by one",
                )
            ]
        return [
            CheckRow(
                sid,
                "traps",
                False,
                "oracle.yml declares no traps: list each planted trap with the criteria that catch it",
            )
        ]
    verdict = {r.check: r for r in rows if r.scenario == sid and r.check.startswith("mutation:")}
    return [traps.trap_row(scenario, f.trap, f, verdict) for f in sp.fallen]


def check_bundle(scenario_id: str) -> tuple[Scenario | None, list[CheckRow]]:
    """Schema, caps equal to ``study.yml``, and byte-identical regeneration of the inputs."""
    t0 = time.perf_counter()
    try:
        sc = load_scenario(scenario_id)
    except (ProtocolError, KeyError, FileNotFoundError) as exc:
        return None, [CheckRow(scenario_id, "bundle", False, str(exc).splitlines()[0], time.perf_counter() - t0)]
    rows = [CheckRow(scenario_id, "bundle", True, "schema valid; caps equal study.yml", time.perf_counter() - t0)]
    from pilot.scenario_kit.skeleton import MARKER, mutation_tests_path, todo_markers
    from pilot.scenarios.generate import library_module

    todo = todo_markers(Path(sc.dir), Path(library_module(sc).__file__))
    own_tests = mutation_tests_path(scenario_id)
    # The suite runs every added scenario's own mutation tests; `pilot scenarios new` writes the file.
    missing = [] if scenario_id in TRAPS_IN_PROSE or own_tests.is_file() else [paths.shown(own_tests)]
    left = (
        f"{paths.shown(own_tests)} is missing (the suite runs each added scenario's own mutation tests); "
        if missing
        else ""
    ) + (
        f"{len(todo)} {MARKER} left to fill in: " + "; ".join(todo[:8]) + (" ..." if len(todo) > 8 else "")
        if todo
        else ""
    )
    rows.append(CheckRow(scenario_id, "finished", not (todo or missing), left or f"no {MARKER} left"))
    t1 = time.perf_counter()
    problems = check_inputs(sc)
    rows.append(
        CheckRow(
            scenario_id,
            "inputs regenerate",
            not problems,
            "; ".join(problems[:3]) + (f" and {len(problems) - 3} more" if len(problems) > 3 else "")
            if problems
            else "byte-identical",
            time.perf_counter() - t1,
        )
    )
    return sc, rows


def check_scenarios(
    ids: Iterable[str] | None = None,
    *,
    workdir: Path,
    text_checks: bool = True,
    prove_traps: bool = True,
    recalculator=None,
) -> CheckReport:
    """Run every check on each scenario (all bundles by default); the packages are built under ``workdir``.

    ``prove_traps=False`` builds no fallen package and probes nothing (a declared trap then gets no row): the check
    as it stood before traps were proved by their fallen packages, which benchmarks/bench_scenario_check.py times as
    its reference. ``recalculator`` defaults to the process's own.
    """
    from pilot.oracle_formats.evaluate import default_recalculator, evaluate_many

    ids = list(ids) if ids else list_scenarios()
    report = CheckReport()
    loaded: list[Scenario] = []
    for sid in ids:
        sc, rows = check_bundle(sid)
        report.extend(rows)
        if sc is not None:
            loaded.append(sc)
    recalc = recalculator or default_recalculator()
    golds: dict[str, Path] = {}
    built: list[ScenarioPackages] = []
    for i, sc in enumerate(loaded):
        # Another scenario's gold: the next one in the list (a scenario alone borrows none).
        # A bundle made by the same generator (a copy under another id) has the same gold: it lends none.
        other = None
        o = next(
            (
                loaded[(i + k) % len(loaded)]
                for k in range(1, len(loaded))
                if loaded[(i + k) % len(loaded)].generator != sc.generator
            ),
            None,
        )
        if o is not None:
            golds.setdefault(o.id, build_gold_workspace(o, workdir / "_others" / o.id))
            other = (o, golds[o.id])
        built.append(build_packages(sc, workdir / sc.id, other=other, recalculator=recalc, prove_traps=prove_traps))
    # Every package of every scenario, the fallen packages among them, in one batch: one LibreOffice recalculates all.
    items = [(p.scenario, p.workspace, None) for sp in built for p in sp.packages]
    items += [(sp.scenario, f.workspace, None) for sp in built for f in sp.fallen if f.workspace is not None]
    it = iter(evaluate_many(items, recalculator=recalc))
    for sp in built:
        report.rows.append(
            CheckRow(
                sp.scenario.id,
                "packages built",
                True,
                f"{len(sp.packages)} packages from the gold one"
                + (f", and {len(sp.fallen)} fallen package(s), one per declared trap" if sp.fallen else ""),
                sp.build_s,
            )
        )
        report.extend(sp.rows)
        for p in sp.packages:
            p.evaluation = next(it)
            why = p.expect(p.evaluation)
            report.rows.append(
                CheckRow(sp.scenario.id, p.name, why is None, why or p.made, float(p.evaluation.seconds))
            )
    for sp in built:
        for f in sp.fallen:
            if f.workspace is not None:
                f.evaluation = next(it)
    for sp in built:
        report.extend(_trap_rows(sp, report.rows))
        if sp.scenario.oracle.traps and prove_traps:
            gold = next(p.workspace for p in sp.packages if p.name == "gold")
            report.extend(traps.probe_rows(sp.scenario, gold, sp.fallen, recalc))
        report.extend(_selfcheck_rows(sp, recalculator=recalc))
        if text_checks:
            report.extend(_text_rows(sp))
    return report


def _text_rows(sp: ScenarioPackages) -> list[CheckRow]:
    from pilot.scenario_kit import consistency

    gold = next(p.workspace for p in sp.packages if p.name == "gold")
    # Each text check times itself (on its first row).
    return consistency.brief_oracle_rubric(sp.scenario) + consistency.judge_blinding(sp.scenario, gold)
