"""``pilot study``: create, run, inspect, export and amend a study.

- ``pilot study create NAME [--seed N] [--nodes FILE] [--scenarios ID ...]
  [--arms A0,A1,...|host] [--pilot-repeats N] [--fresh] [--runner MODULE:FUNCTION]`` validates everything (the
  scenario bundles, the arms against ``protocol/arms/arms.yml``; ``host``:
  every arm of the design this host can serve, :func:`host_arms`; the nodes
  file, the run function) and then makes the store under
  ``analysis/data/NAME/`` with the pilot wave's seeded assignment (also
  written to ``assignment_pilot.csv``), all at once or not at all.
- ``pilot study run NAME [--backend simulated|claude-code|rehearsal] [--executor local|dask]
  [--scheduler ADDRESS] [--wave pilot|repeat3|sensitivity]`` dispatches the
  wave's waiting runs; run it again after an interruption and it resumes.
  Exit status 0: the wave is complete; 3: it stopped with runs waiting
  (envelope exhausted, no node); 4: some runs ended failed (listed, grouped
  by error; ``retry`` reopens them).
- ``pilot study retry NAME (--failed | RUN_ID ...)`` reopens failed runs
  under their run ids; their earlier attempts are kept.
- ``pilot study reevaluate NAME [--run RUN_ID ...] [--wave W] [--dry-run] [--json]``
  evaluates again, in place, the finished runs whose evaluation could not run
  (``eval_error``), on their kept workspaces (:mod:`pilot.reevaluate`); the
  records they replace are kept. Exit status 0: every selected run has its
  verdict; 1: some run was refused (its workspace changed or is missing) or
  its evaluation could not run again.
- ``pilot study envelope NAME --set USD --amendment A-NNN`` changes the
  study's dollar envelope under an amendment, recorded in the store and in
  ``protocol/amendments.csv``.
- ``pilot study status NAME`` shows cells done, in flight, waiting and failed,
  failed attempts and dollars per arm, and the envelope.
- ``pilot study export NAME`` writes the run table ``analysis/data/NAME/runs.csv``
  (atomically); later waves are pooled only if the freeze verification passes.
- ``pilot study verify-freeze NAME`` compares the protocol with the manifest
  taken when the pilot started.
- ``pilot study rehearsal-report NAME [--out DIR]`` checks a study run with
  ``--backend rehearsal`` against the scripted model's known truth
  (:mod:`pilot.report.rehearsal`) and writes ``report.md`` and ``report.json``;
  exit 1 when any mismatch is found.

Every failure ends in one line ``pilot study: <file>: <what happened>; <what to do>``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sqlite3
import sys
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pilot import backends, freeze, ledger, paths, protocol
from pilot.executors.base import PIPELINE_RUN_FUNCTION, check_run_function
from pilot.schedule import (
    ScheduleError,
    Scheduler,
    WaveResult,
    assignment_csv,
    build_cells,
    check_servable,
    list_scenario_ids,
    load_nodes,
    nodes_from_text,
    study_lock,
)
from pilot.store import STORE_FILE, WAVES, Store, StoreError, atomic_write_text, describe_fault

if TYPE_CHECKING:  # pandas loads on first use: the study commands start without it
    import pandas as pd

BACKENDS = backends.AGENT_BACKENDS
EXECUTORS = ("local", "dask")
RUNS_FILE = paths.RUNS_FILE_NAME
_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_AMENDMENT_ID = re.compile(r"^A-\d{3}$")
EXIT_INCOMPLETE = 3
EXIT_FAILED_RUNS = 4


class StudyError(RuntimeError):
    """A study command cannot proceed; the message says why."""


def _requires() -> dict[str, tuple[str, ...]]:
    return {a: arm.requires for a, arm in protocol.arms().items()}


def _show(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(paths.ROOT))
    except ValueError:
        return str(path)


#: The ``--arms`` value that picks every arm this host can serve.
HOST_ARMS = "host"


def host_capabilities() -> frozenset[str]:
    """What this machine offers an attempt of the CLI backends, in the capabilities of ``protocol/arms/arms.yml``.

    ``linux`` or ``macos`` by the platform; ``libreoffice`` when soffice is
    found (as the oracles find it); ``chromium`` when the distribution's
    Chromium is installed; ``portal`` always (each run's portal is a local
    HTTP server the harness starts).
    """
    from pilot.oracles.recalc import soffice_binary

    caps = {"portal"}
    if sys.platform.startswith("linux"):
        caps.add("linux")
    elif sys.platform == "darwin":
        caps.add("macos")
    if soffice_binary():
        caps.add("libreoffice")
    if paths.CHROMIUM_BIN.exists():
        caps.add("chromium")
    return frozenset(caps)


def host_arms(capabilities: frozenset[str] | None = None) -> list[str]:
    """The design's arms whose ``requires`` this host offers, in the design's order (a Linux host: all but A2)."""
    caps = host_capabilities() if capabilities is None else capabilities
    requires = _requires()
    arms = [a for a in protocol.study().arms if set(requires.get(a, ())) <= caps]
    if not arms:
        raise StudyError(f"this host offers {', '.join(sorted(caps)) or 'nothing'}, which serves no arm of "
                         f"{_show(paths.ARMS_FILE)}; install what the arms require (tools/ensure-system-packages.sh)")
    return arms


def parse_arms(text: str | list[str] | None) -> list[str] | None:
    """``"A0,A1"`` (or a list) to arm ids in the design's order; each must be an arm of ``protocol/arms/arms.yml``.

    ``"host"`` is every arm of the design this host can serve (:func:`host_arms`).
    """
    if text is None:
        return None
    if text == HOST_ARMS or text == [HOST_ARMS]:
        return host_arms()
    items = [a.strip() for part in ([text] if isinstance(text, str) else text) for a in part.split(",")]
    if not items or any(not a for a in items):
        raise StudyError(f"--arms {text!r}: give arm ids separated by commas, e.g. A0,A1")
    defined = protocol.arms()
    design = protocol.study().arms
    unknown = [a for a in items if a not in defined]
    if unknown:
        raise StudyError(f"{_show(paths.ARMS_FILE)}: no arm {', '.join(unknown)} (its arms are {', '.join(defined)}); correct --arms")
    outside = [a for a in items if a not in design]
    if outside:
        raise StudyError(f"{_show(paths.STUDY_FILE)}: arm {', '.join(outside)} is not in design.arms ({', '.join(design)}); correct --arms")
    dup = sorted({a for a in items if items.count(a) > 1})
    if dup:
        raise StudyError(f"--arms {text!r}: arm {', '.join(dup)} given twice")
    return [a for a in design if a in items]


def check_scenarios(ids: list[str]) -> None:
    """Each id must be a scenario bundle under ``protocol/scenarios/`` that loads."""
    from pilot.scenarios import list_scenarios, load_scenario

    known = list_scenarios()
    missing = [s for s in ids if s not in known]
    if missing:
        raise StudyError(
            f"{_show(paths.SCENARIOS_DIR)}: no scenario bundle {', '.join(missing)} (known: {', '.join(known) or 'none'}); "
            "correct --scenarios"
        )
    dup = sorted({s for s in ids if ids.count(s) > 1})
    if dup:
        raise StudyError(f"--scenarios: {', '.join(dup)} given twice")
    for sid in ids:
        try:
            load_scenario(sid)
        except Exception as exc:  # noqa: BLE001 - any defect of a bundle refuses the study
            raise StudyError(f"{_show(paths.SCENARIOS_DIR / sid)}: the bundle does not load ({str(exc).splitlines()[0]}); fix it first") from exc


def check_runner(ref: str | None) -> str | None:
    """Refuse a run function that cannot be imported or called before anything is stored or spent."""
    if ref is None:
        return None
    try:
        check_run_function(ref)
    except ValueError as exc:
        raise StudyError(f"--runner: {exc}; nothing was stored or dispatched") from exc
    return ref


#: Backends whose studies ``create --fresh`` may delete: their runs are checks of the harness, never findings.
DISCARDABLE_BACKENDS = frozenset(backends.AGENT_BACKENDS) - backends.REAL_BACKENDS


def discard_study(name: str) -> bool:
    """Delete study ``name`` if it holds no attempt on a real backend (a dry run or a rehearsal); True if there was one.

    A real study is never deleted: that is refused, naming its backends.
    """
    import shutil

    folder = paths.study_dir(name)
    if not (folder / STORE_FILE).exists():
        return False
    with Store.open(folder) as old:
        used = {r[0] for r in old.conn.execute("SELECT DISTINCT backend FROM attempts")}
    real = sorted(used - DISCARDABLE_BACKENDS)
    if real:
        raise StudyError(f"{_show(folder / STORE_FILE)}: refusing to delete study {name}: it holds attempts on {', '.join(real)}")
    shutil.rmtree(folder)
    return True


def create_study(name: str, *, seed: int | None = None, nodes_file: Path | None = None, scenarios: list[str] | None = None,
                 arms: list[str] | str | None = None, run_function: str | None = None, fresh: bool = False,
                 pilot_repeats: int | None = None) -> Store:
    """Validate everything, then create the study's store with the pilot wave's seeded assignment, in one step.

    ``pilot_repeats`` gives the pilot wave fewer repeats than the design's (1 to ``design.pilot_repeats``; a rehearsal uses 1).

    ``fresh`` first deletes an existing study of that name that holds only dry-run or rehearsal attempts (:func:`discard_study`).
    """
    if not _STUDY_NAME.match(name):
        raise StudyError(f"study name {name!r}: use letters, digits, '-', '_' or '.', starting with a letter or digit")
    folder = paths.study_dir(name)
    if fresh:
        discard_study(name)
    if (folder / STORE_FILE).exists():
        raise StudyError(f"{_show(folder / STORE_FILE)}: study {name!r} already exists; choose another name")
    study = protocol.study()
    seed = study.assignment_seed if seed is None else int(seed)
    chosen_arms = parse_arms(arms)
    if pilot_repeats is not None and not 1 <= int(pilot_repeats) <= study.pilot_repeats:
        raise StudyError(f"--pilot-repeats {pilot_repeats}: give 1 to {study.pilot_repeats} "
                         f"(design.pilot_repeats in {_show(paths.STUDY_FILE)})")
    nodes_path = Path(nodes_file) if nodes_file else paths.NODES_FILE
    nodes = load_nodes(nodes_path)
    if scenarios:
        check_scenarios(list(scenarios))
    ids = list_scenario_ids(scenarios)
    if not ids:
        raise StudyError("no scenarios found: add bundles under protocol/scenarios/ or pass --scenarios ID ...")
    check_runner(run_function)
    cells = build_cells(name, "pilot", ids, seed, study=study, arms=chosen_arms,
                        repeats=None if pilot_repeats is None else list(range(1, int(pilot_repeats) + 1)))
    try:
        check_servable(cells, nodes, _requires())
    except ScheduleError as exc:
        print(f"warning: {exc} (with the dask executor the cluster's workers count instead)", file=sys.stderr)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "assignment_pilot.csv", assignment_csv(cells))
    return Store.create(
        folder,
        name=name,
        seed=seed,
        protocol_version=str(study["study"]["protocol_version"]),
        worker_model=str(study["worker"]["model"]),
        envelope_usd=study.envelope_usd,
        scenarios=ids,
        nodes_source=str(nodes_path),
        nodes_yaml=nodes_path.read_text(encoding="utf-8"),
        cells=cells,
        arms=chosen_arms,
        run_function=run_function,
    )


def ensure_wave(store: Store, wave: str) -> int:
    """Add a later wave's cells (same seed, its own permutation) if not there yet; returns how many were added.

    Call under the study's lock (:meth:`Scheduler.run` does, as ``prepare``):
    two operators starting one wave at once must not both add it.
    """
    if store.has_wave(wave):
        return 0
    info = store.study()
    study = protocol.study()
    if wave == "sensitivity" and info.arms is not None and study["sensitivity_models"]["arm"] not in info.arms:
        raise StudyError(f"study {info.name} has arms {', '.join(info.arms)}; the sensitivity wave runs arm "
                         f"{study['sensitivity_models']['arm']}, which it lacks")
    cells = build_cells(info.name, wave, info.scenarios, info.seed, study=study, arms=info.arms if wave != "sensitivity" else None)
    store.add_cells(cells)
    atomic_write_text(store.folder / f"assignment_{wave}.csv", assignment_csv(cells))
    return len(cells)


def _check_backend(store: Store, backend: str) -> None:
    used = {r[0] for r in store.conn.execute("SELECT DISTINCT backend FROM attempts")}
    other = used - {backend}
    if other:
        raise StudyError(
            f"study {store.study().name} was run with backend {', '.join(sorted(other))}; "
            f"a study never mixes backends (create another study for {backend})"
        )


def _envelope_drift(store: Store) -> str | None:
    """A warning when ``protocol/study.yml`` names another envelope than the study keeps (editing it changes nothing)."""
    kept = store.balance().envelope_usd
    written = protocol.study().envelope_usd
    if ledger.to_micro(written) == ledger.to_micro(kept):
        return None
    name = store.study().name
    return (f"warning: {_show(paths.STUDY_FILE)} sets an envelope of {written:.2f} dollars but study {name} keeps {kept:.2f}; "
            f"an existing study changes its envelope only through `pilot study envelope {name} --set USD --amendment A-NNN`")


def run_study_wave(
    name: str,
    *,
    wave: str = "pilot",
    backend: str = "simulated",
    executor: str = "local",
    scheduler_address: str | None = None,
    run_function: str | None = None,
    workers: int | None = None,
    max_infra_attempts: int = 3,
    progress: bool = True,
    allow_unisolated: bool = False,
) -> WaveResult:
    """Run (or resume) one wave of a study; the Python form of ``pilot study run``.

    Everything that can refuse (backend, run function, nodes, the lock) is
    checked before the freeze manifest is taken or anything is reserved.
    With the claude-code backend the wave refuses to start on a host that
    cannot isolate a run, unless ``allow_unisolated`` (development only;
    every run then records ``enforcement`` ``unisolated``).
    """
    if backend not in BACKENDS:
        raise StudyError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend in backends.CLI_BACKENDS:
        import os

        from pilot.agents import sandbox
        from pilot.runner import ISOLATION_ENV

        if allow_unisolated:
            os.environ[ISOLATION_ENV] = "unisolated"  # read by every attempt of this process and its local workers
        else:
            try:
                sandbox.require_isolation()
            except sandbox.IsolationUnavailable as exc:
                raise StudyError(str(exc)) from exc
    if wave not in WAVES:
        raise StudyError(f"unknown wave {wave!r}; choose one of {', '.join(WAVES)}")
    store = Store.open(paths.study_dir(name))
    try:
        _check_backend(store, backend)
        info = store.study()
        run_function = check_runner(run_function or info.run_function)
        drift = _envelope_drift(store)
        if drift:
            print(drift, file=sys.stderr)
        on_start: Callable[[Store], None] | None = None
        prepare: Callable[[Store], None] | None = None
        if wave == "pilot":
            if info.freeze_manifest is None:
                scen = info.scenarios
                on_start = lambda st: st.set_freeze_manifest(freeze.take_manifest(scenarios=scen))  # noqa: E731
        else:
            if info.freeze_manifest is None:
                raise StudyError(f"study {name} has no freeze manifest: run the pilot wave first")
            report = freeze.verify(info.freeze_manifest, scenarios=info.scenarios)
            if not report.ok:
                print("warning: the frozen protocol changed since the pilot; this wave will not be pooled:", file=sys.stderr)
                print("\n".join(report.lines()), file=sys.stderr)
            prepare = lambda st: ensure_wave(st, wave)  # noqa: E731 - under the study lock, see ensure_wave
        requires = _requires()
        if executor == "dask":
            if not scheduler_address:
                raise StudyError("--executor dask needs --scheduler ADDRESS (e.g. tcp://host:8786)")
            from pilot.executors.dask import DaskExecutor

            ex: Any = DaskExecutor(scheduler_address, run_function, requires)
            nodes: Any = ex.nodes
        elif executor == "local":
            from pilot.executors.local import LocalExecutor

            static = nodes_from_text(info.nodes_yaml or "", info.nodes_source or "nodes")
            if backend in backends.CLI_BACKENDS and sys.platform != "darwin":
                wanted = set(info.arms or protocol.study().arms)
                needs_mac = sorted(a for a in wanted if "macos" in requires.get(a, ()))
                fake = [n.name for n in static if "macos" in n.capabilities]
                if fake and needs_mac:
                    raise StudyError(
                        f"nodes {fake} are tagged macos but this host is {sys.platform}: with the {backend} backend "
                        f"{', '.join(needs_mac)} must run on a real Mac (use the dask executor with a worker there, "
                        "or create a study without those arms: pilot study create NAME --arms ...)"
                    )
            ex = LocalExecutor(run_function, workers or sum(n.slots for n in static))
            nodes = static
        else:
            raise StudyError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
        try:
            sched = Scheduler(store, ex, nodes, backend=backend, requires=requires, max_infra_attempts=max_infra_attempts, progress=progress)
            return sched.run(wave, prepare=prepare, on_start=on_start)
        finally:
            ex.close()
    finally:
        store.close()


def retry_runs(name: str, run_ids: list[str] | None = None) -> list[str]:
    """Reopen failed runs (all of them when ``run_ids`` is None) under their run ids; the next ``run`` dispatches them."""
    store = Store.open(paths.study_dir(name))
    try:
        try:
            with study_lock(store.folder):
                return store.reopen(run_ids)
        except ScheduleError as exc:
            raise StudyError(f"{exc}; retry once it has stopped") from exc
    finally:
        store.close()


def _append_amendment(path: Path, row: dict[str, str]) -> str:
    """Add one row to ``amendments.csv`` (atomically) after checking the result is still a valid file; returns the old text."""
    old = path.read_text(encoding="utf-8")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([row[c] for c in protocol.AMENDMENT_COLUMNS])
    new = old + ("" if old.endswith("\n") or not old else "\n") + buf.getvalue()
    atomic_write_text(path, new)
    try:
        protocol.load_amendments(path)
    except protocol.ProtocolError:
        atomic_write_text(path, old)
        raise
    return old


def set_envelope(name: str, usd: str | Decimal | float, amendment: str) -> dict[str, Any]:
    """Change a study's dollar envelope under an amendment: in the store's ledger and in ``protocol/amendments.csv``.

    The amendment may already be written in ``amendments.csv`` (with its
    rationale); otherwise a row recording the change is added. The new
    envelope may not be below what is already spent plus reserved.
    """
    try:
        value = Decimal(str(usd))
    except InvalidOperation:
        raise StudyError(f"--set {usd!r}: not an amount of dollars (e.g. 950 or 950.50)") from None
    if not value.is_finite() or value <= 0:
        raise StudyError(f"--set {usd!r}: the envelope must be a positive amount of dollars")
    if value != value.quantize(Decimal("0.000001")):
        raise StudyError(f"--set {usd!r}: at most six decimals (the ledger counts micro-dollars)")
    if not _AMENDMENT_ID.match(amendment):
        raise StudyError(f"--amendment {amendment!r}: amendment ids have the form A-NNN (see {_show(paths.AMENDMENTS_FILE)})")
    store = Store.open(paths.study_dir(name))
    try:
        bal = store.balance()
        new_micro = ledger.to_micro(value)
        if new_micro < ledger.to_micro(bal.spent_usd) + ledger.to_micro(bal.reserved_usd):
            raise StudyError(f"--set {value}: below what study {name} has already spent and reserved "
                             f"({bal.spent_usd + bal.reserved_usd:.2f} dollars); choose at least that")
        amendments = protocol.load_amendments()
        existing = next((r for r in amendments if r["id"] == amendment), None)
        old_text = None
        if existing is None:
            row = {
                "id": amendment,
                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                # This repository's studies are reruns of the protocol: the stage never goes back (the validator's rule).
                "stage": protocol.AMENDMENT_STAGES[max([protocol.AMENDMENT_STAGES.index("before rerun pilot")]
                                                       + [protocol.AMENDMENT_STAGES.index(r["stage"]) for r in amendments])],
                "title": "Dollar envelope changed",
                "content": (f"The dollar envelope of study {name} was changed from {bal.envelope_usd:.2f} to {value:.2f} dollars "
                            f"with {bal.spent_usd:.2f} spent and {bal.reserved_usd:.2f} reserved; every other rule of A-001 is unchanged."),
            }
            old_text = _append_amendment(paths.AMENDMENTS_FILE, row)
        try:
            with store.transaction() as c:
                old, new = ledger.set_envelope(c, new_micro, amendment, note=(existing or {}).get("title", "Dollar envelope changed"))
                store.record_event(c, "envelope", None, amendment=amendment, old_usd=ledger.to_usd(old), new_usd=ledger.to_usd(new))
        except BaseException:
            if old_text is not None:
                atomic_write_text(paths.AMENDMENTS_FILE, old_text)  # the change did not happen: neither did its record
            raise
        return {"study": name, "amendment": amendment, "old_usd": ledger.to_usd(old), "new_usd": ledger.to_usd(new),
                "amendment_added": existing is None, "amendments_file": str(paths.AMENDMENTS_FILE)}
    except ledger.LedgerError as exc:
        raise StudyError(str(exc)) from exc
    finally:
        store.close()


def status_table(store: Store) -> pd.DataFrame:
    """Per wave and arm: runs done (of which without a verdict), in flight, waiting, failed, failed attempts, dollars spent and reserved."""
    import pandas as pd

    df = pd.DataFrame(store.status_by_arm())
    if df.empty:
        return df
    total = df.drop(columns=["wave", "arm"]).sum(numeric_only=True)
    total["wave"], total["arm"] = "all", "all"
    df = pd.concat([df, total.to_frame().T], ignore_index=True)
    counts = ["done", "in_flight", "waiting", "failed", "failed_attempts", "no_verdict"]
    df[counts] = df[counts].astype(int)
    df[["spent_usd", "reserved_usd"]] = df[["spent_usd", "reserved_usd"]].astype(float).round(2)
    return df


def export_run_table(name: str, *, pilot_only: bool = False, out: Path | None = None) -> tuple[Path, pd.DataFrame]:
    """Write the run table of a study (atomically); later waves only when the freeze verification passes.

    Failed runs are rows with status ``infra_error`` and empty outcomes;
    the analyses drop them and say how many (:func:`pilot.stats.runtable.validate_runtable`).
    """
    from pilot import outcomes

    store = Store.open(paths.study_dir(name))
    try:
        info = store.study()
        rows = store.finished_rows()
        later = [r for r in rows if r["wave"] != "pilot"]
        if later and not pilot_only:
            if info.freeze_manifest is None:
                raise StudyError(f"study {name} has later waves but no freeze manifest; export with --pilot-only")
            freeze.verify(info.freeze_manifest, scenarios=info.scenarios).raise_if_changed()
        if pilot_only:
            rows = [r for r in rows if r["wave"] == "pilot"]
        backends = sorted({r[0] for r in store.conn.execute("SELECT DISTINCT backend FROM attempts")})
        if len(backends) != 1:
            raise StudyError(f"study {name} has attempts on backends {backends}; expected exactly one")
        fake = [r["run_id"] for r in rows if r.get("record_json") and json.loads(r["record_json"]).get("runner") == "fake"]
        if fake:
            raise StudyError(f"study {name} was run with a fake run function ({len(fake)} runs, e.g. {fake[0]}): it has no outcomes to export")
        pending = [r["run_id"] for r in rows if r["status"] in ("waiting", "in_flight")]
        if pending:
            print(f"warning: {len(pending)} assigned run(s) not finished yet are left out of the run table "
                  f"(e.g. {pending[0]}); run `pilot study run {name}` to finish them", file=sys.stderr)
        table = outcomes.run_table(outcomes.rows_from_store(rows, study_name=info.name, backend=backends[0]))
        target = Path(out) if out else store.folder / RUNS_FILE
        atomic_write_text(target, table.to_csv(index=False))
        return target, table
    finally:
        store.close()


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="create, run, inspect and export a study (scheduler, store, envelope)")
    ss = p.add_subparsers(dest="study_command", metavar="ACTION")

    c = ss.add_parser("create", help="validate, then create the study's store and the pilot's seeded assignment")
    c.add_argument("name")
    c.add_argument("--seed", type=int, help="assignment seed (default: design.assignment_seed in protocol/study.yml)")
    c.add_argument("--nodes", type=Path, help=f"nodes file (default: {_show(paths.NODES_FILE)})")
    c.add_argument("--scenarios", nargs="+", metavar="ID", help="scenario ids (default: every scenario bundle)")
    c.add_argument("--arms", metavar="A0,A1,...", help="a subset of the design's arms (default: all), checked against protocol/arms/arms.yml; "
                   f"{HOST_ARMS!r}: every arm this host can serve")
    c.add_argument("--runner", metavar="MODULE:FUNCTION", help=f"the study's run function (default: {PIPELINE_RUN_FUNCTION})")
    c.add_argument("--pilot-repeats", type=int, metavar="N", help="repeats of the pilot wave, fewer than the design's (a rehearsal: 1)")
    c.add_argument("--fresh", action="store_true",
                   help="first delete an existing study of this name if it holds only dry-run or rehearsal attempts (refused for a real study)")
    c.set_defaults(func=_cmd_create)

    r = ss.add_parser("run", help="run or resume a wave (exit 3: runs left waiting; 4: runs failed)")
    r.add_argument("name")
    r.add_argument("--backend", choices=BACKENDS, default="simulated",
                   help="agent and judge backend (default: simulated, a dry run; rehearsal: the real harness against the scripted model, no key)")
    r.add_argument("--executor", choices=EXECUTORS, default="local")
    r.add_argument("--scheduler", metavar="ADDRESS", help="dask scheduler address for --executor dask")
    r.add_argument("--wave", choices=WAVES, default="pilot")
    r.add_argument("--workers", type=int, help="local processes (default: the nodes' total slots)")
    r.add_argument("--max-attempts", type=int, default=3, help="infrastructure attempts per run before it is recorded as failed")
    r.add_argument("--runner", metavar="MODULE:FUNCTION", help="run function (default: the study's, else " + PIPELINE_RUN_FUNCTION + ")")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--allow-unisolated", action="store_true",
                   help="development only: run the claude-code backend without its sandbox (recorded on every run; the analysis refuses such runs)")
    r.set_defaults(func=_cmd_run)

    t = ss.add_parser("retry", help="reopen failed runs under their run ids (earlier attempts are kept)")
    t.add_argument("name")
    t.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="failed runs to reopen")
    t.add_argument("--failed", action="store_true", help="reopen every failed run")
    t.set_defaults(func=_cmd_retry)

    q = ss.add_parser("reevaluate", help="evaluate again, in place, finished runs whose evaluation could not run (eval_error); "
                      "exit 1: a run was refused or could not be evaluated again")
    q.add_argument("name")
    q.add_argument("--run", dest="run_ids", nargs="+", action="extend", metavar="RUN_ID",
                   help="these runs only (each must have an evaluation error; default: every such run)")
    q.add_argument("--wave", choices=WAVES, help="runs of this wave only (default: every wave)")
    q.add_argument("--dry-run", action="store_true", help="list what would be re-evaluated or refused, and change nothing")
    q.add_argument("--json", action="store_true", help="print JSON instead of one line per run")
    q.set_defaults(func=_cmd_reevaluate)

    n = ss.add_parser("envelope", help="change the study's dollar envelope under an amendment (store and protocol/amendments.csv)")
    n.add_argument("name")
    n.add_argument("--set", dest="usd", required=True, metavar="USD", help="the new envelope in dollars")
    n.add_argument("--amendment", required=True, metavar="A-NNN", help="the amendment that changes it")
    n.set_defaults(func=_cmd_envelope)

    s = ss.add_parser("status", help="cells, attempts and dollars per wave and arm")
    s.add_argument("name")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=_cmd_status)

    e = ss.add_parser("export", help=f"write the run table analysis/data/NAME/{RUNS_FILE}")
    e.add_argument("name")
    e.add_argument("--pilot-only", action="store_true", help="export the pilot wave alone (no pooling)")
    e.add_argument("--out", type=Path, help="write here instead")
    e.set_defaults(func=_cmd_export)

    h = ss.add_parser("rehearsal-report", help="check a rehearsal study against the scripted model's truth (exit 1: findings to fix)")
    h.add_argument("name")
    h.add_argument("--out", type=Path, default=Path("build/rehearsal"), help="folder for report.md and report.json (default: build/rehearsal)")
    h.add_argument("--runs", type=Path, help="the exported run table to check (default: analysis/data/NAME/runs.csv)")
    h.set_defaults(func=_cmd_rehearsal_report)

    v = ss.add_parser("verify-freeze", help="compare the protocol with the manifest taken at pilot start")
    v.add_argument("name")
    v.set_defaults(func=_cmd_verify)

    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _fail(exc: BaseException | str) -> int:
    print(f"pilot study: {_one_line(str(exc))}", file=sys.stderr)
    return 2


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn every expected fault of a command into one ``pilot study:`` line naming the file and what to do."""

    def run(args: argparse.Namespace) -> int:
        store_file = paths.study_dir(args.name) / STORE_FILE if getattr(args, "name", None) else paths.DATA_DIR
        try:
            return command(args)
        except freeze.FreezeViolation as exc:
            return _fail(f"{_show(paths.PROTOCOL_DIR)}: {exc}; export the pilot alone with --pilot-only")
        except (StudyError, StoreError, ScheduleError, protocol.ProtocolError, ledger.LedgerError) as exc:
            return _fail(exc)
        except sqlite3.Error as exc:
            return _fail(describe_fault(exc, store_file))
        except OSError as exc:
            return _fail(describe_fault(exc, store_file))
        except KeyboardInterrupt:
            _fail(f"interrupted; every finished run is kept in {_show(store_file)}: run the same command again to resume")
            return 130

    return run


@_guarded
def _cmd_create(args: argparse.Namespace) -> int:
    store = create_study(args.name, seed=args.seed, nodes_file=args.nodes, scenarios=args.scenarios, arms=args.arms, run_function=args.runner,
                         fresh=args.fresh, pilot_repeats=args.pilot_repeats)
    with store:
        info = store.study()
        out = {"study": info.name, "store": str(store.path), "seed": info.seed, "scenarios": len(info.scenarios),
               "arms": info.arms or protocol.study().arms, "pilot_cells": store.counts("pilot")["waiting"]}
    print(json.dumps(out))
    return 0


def failure_lines(store: Store, wave: str | None = None) -> list[str]:
    """Failed runs grouped by the first line of their last error, largest group first."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for f in store.failures(wave):
        why = (f.get("error") or "no error recorded").strip().splitlines()[0][:200]
        # One cause told apart by node, attempt or path numbers is still one cause.
        key = why.replace(f["run_id"], "<run>")
        if f.get("node"):
            key = key.replace(f["node"], "<node>")
        key = re.sub(r"\d+", "#", key)
        groups.setdefault(key, (why, []))[1].append(f["run_id"])
    lines = []
    for _key, (why, ids) in sorted(groups.items(), key=lambda kv: (-len(kv[1][1]), kv[0])):
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        lines.append(f"  {len(ids)} run(s), e.g. {why} [{shown}]")
    return lines


@_guarded
def _cmd_run(args: argparse.Namespace) -> int:
    res = run_study_wave(
        args.name,
        wave=args.wave,
        backend=args.backend,
        executor=args.executor,
        scheduler_address=args.scheduler,
        run_function=args.runner,
        workers=args.workers,
        max_infra_attempts=args.max_attempts,
        progress=not args.no_progress,
        allow_unisolated=args.allow_unisolated,
    )
    print(res.summary.to_string())
    from pilot import reevaluate

    with Store.open(paths.study_dir(args.name)) as store:
        unevaluated = reevaluate.unevaluated(store, args.wave)
    if unevaluated:
        print(f"note: {len(unevaluated)} finished run(s) of wave {args.wave} have no verdict: their evaluation could not run "
              f"(eval_error, e.g. {unevaluated[0]}); once the cause is fixed, `pilot study reevaluate {args.name}`", file=sys.stderr)
    if res.counts.get("failed"):
        with Store.open(paths.study_dir(args.name)) as store:
            lines = failure_lines(store, args.wave)
        print(f"pilot study: {res.counts['failed']} run(s) of wave {args.wave} ended failed, by cause:", file=sys.stderr)
        print("\n".join(lines), file=sys.stderr)
        print(f"pilot study: fix the cause, then `pilot study retry {args.name} --failed` and run again", file=sys.stderr)
        return EXIT_FAILED_RUNS
    if res.stop_reason != "complete":
        print(f"pilot study: {res.stop_reason}", file=sys.stderr)
        if res.stop_reason.startswith("envelope exhausted"):
            print(f"pilot study: to continue, raise the envelope under an amendment: "
                  f"`pilot study envelope {args.name} --set USD --amendment A-NNN`", file=sys.stderr)
        return EXIT_INCOMPLETE
    return 0


@_guarded
def _cmd_retry(args: argparse.Namespace) -> int:
    if args.failed == bool(args.run_ids):
        return _fail("retry: give either --failed or the run ids to reopen")
    ids = retry_runs(args.name, None if args.failed else list(args.run_ids))
    print(json.dumps({"study": args.name, "reopened": ids}))
    if not ids:
        print(f"pilot study: study {args.name} has no failed run to reopen", file=sys.stderr)
    return 0


@_guarded
def _cmd_reevaluate(args: argparse.Namespace) -> int:
    from pilot import reevaluate

    try:
        backend, results = reevaluate.reevaluate_study(paths.study_dir(args.name), args.run_ids, wave=args.wave, dry_run=args.dry_run)
    except reevaluate.ReevaluationError as exc:
        raise StudyError(f"{_show(paths.study_dir(args.name) / STORE_FILE)}: {exc}") from exc
    label = backends.label_of(backend.split(","))
    if args.json:
        print(json.dumps({"study": args.name, "label": label or None, "dry_run": args.dry_run,
                          "runs": [r.to_dict() for r in results]}, default=str))
    else:
        for res in results:
            print(reevaluate.result_line(res, label))
        if not results:
            head = f"{label} ({backends.qualifier(label)}): " if label else ""
            print(f"{head}study {args.name}: no finished run has an evaluation error; nothing to re-evaluate")
    return 1 if any(r.outcome in ("refused", "eval_error") for r in results) else 0


@_guarded
def _cmd_envelope(args: argparse.Namespace) -> int:
    print(json.dumps(set_envelope(args.name, args.usd, args.amendment)))
    return 0


@_guarded
def _cmd_status(args: argparse.Namespace) -> int:
    store = Store.open(paths.study_dir(args.name))
    with store:
        table = status_table(store)
        bal = store.balance()
        problems = store.audit()
        changes = ledger.envelope_changes(store.conn)
        if args.json:
            print(json.dumps({"by_arm": table.to_dict(orient="records"), "envelope": bal.as_dict(), "ledger_problems": problems,
                              "envelope_changes": changes}, default=str))
            return 0 if not problems else 1
        info = store.study()
        print(f"study {info.name}  seed {info.seed}  scenarios {len(info.scenarios)}  arms {','.join(info.arms or protocol.study().arms)}  "
              f"store {store.path}")
        print(table.to_string(index=False) if not table.empty else "(no cells)")
        print(
            f"envelope {bal.envelope_usd:.2f}  spent {bal.spent_usd:.2f}  reserved {bal.reserved_usd:.2f}  remaining {bal.remaining_usd:.2f} (USD)"
        )
        for ch in changes:
            print(f"envelope changed {ch['old_usd']:.2f} -> {ch['new_usd']:.2f} under {ch['amendment_id']} at {ch['at']}")
        print("ledger balances" if not problems else "LEDGER PROBLEMS:\n  " + "\n  ".join(problems))
    return 0 if not problems else 1


@_guarded
def _cmd_export(args: argparse.Namespace) -> int:
    target, table = export_run_table(args.name, pilot_only=args.pilot_only, out=args.out)
    failed = int((table["status"] == "infra_error").sum())
    print(json.dumps({"run_table": str(target), "rows": len(table), "failed_runs": failed}))
    return 0


@_guarded
def _cmd_rehearsal_report(args: argparse.Namespace) -> int:
    from pilot.report import rehearsal

    report = rehearsal.collect(args.name, run_table=paths.from_root(args.runs) if args.runs else None)
    written = rehearsal.write(report, paths.from_root(args.out))
    print(report.to_markdown())
    print(json.dumps({"report": {k: _show(v) for k, v in written.items()}, "findings": len(report.findings)}))
    if report.findings:
        print(f"pilot study: the rehearsal of {args.name} has {len(report.findings)} finding(s) to fix before the real study "
              f"(listed in {_show(written[rehearsal.REPORT_MD])})", file=sys.stderr)
        return 1
    return 0


@_guarded
def _cmd_verify(args: argparse.Namespace) -> int:
    with Store.open(paths.study_dir(args.name)) as store:
        info = store.study()
    if info.freeze_manifest is None:
        return _fail(StudyError(f"study {args.name} has no freeze manifest yet (it is taken when the pilot starts)"))
    report = freeze.verify(info.freeze_manifest, scenarios=info.scenarios)
    print("\n".join(report.lines()))
    return 0 if report.ok else 1
