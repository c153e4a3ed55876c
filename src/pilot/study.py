"""A study as a library: create, run a wave, retry, change the envelope, show its status and export its run table.

``pilot study`` (:mod:`pilot.cli.study`) parses options and calls these;
notebooks call them directly (``create_study``, ``run_study_wave``). Each
refusal is a :class:`StudyError` whose message names the file or option
and what to do.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilot import backends, ledger, paths, protocol, study_freeze
from pilot.executors.base import check_run_function
from pilot.nodes import HOST_ARMS, host_arms, load_nodes, nodes_from_text
from pilot.schedule import (
    LOCK_FILE,
    ScheduleError,
    Scheduler,
    WaveResult,
    assignment_csv,
    build_cells,
    check_servable,
    list_scenario_ids,
    study_lock,
)
from pilot.store import HUMAN_WAVE, STORE_FILE, WAVES, Store, atomic_write_text

if TYPE_CHECKING:  # pandas loads on first use: the study commands start without it
    import pandas as pd

BACKENDS = backends.AGENT_BACKENDS
EXECUTORS = ("local", "dask")
RUNS_FILE = paths.RUNS_FILE_NAME
_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_AMENDMENT_ID = re.compile(r"^A-\d{3}$")


class StudyError(RuntimeError):
    """A study command cannot proceed; the message says why."""


def _requires() -> dict[str, tuple[str, ...]]:
    return {a: arm.requires for a, arm in protocol.arms().items()}


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
        raise StudyError(
            f"{paths.shown(paths.ARMS_FILE)}: no arm {', '.join(unknown)} (its arms are "
            f"{', '.join(defined)}); correct --arms"
        )
    outside = [a for a in items if a not in design]
    if outside:
        raise StudyError(
            f"{paths.shown(paths.STUDY_FILE)}: arm {', '.join(outside)} is not in design.arms "
            f"({', '.join(design)}); correct --arms"
        )
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
            f"{paths.shown(paths.SCENARIOS_DIR)}: no scenario bundle {', '.join(missing)} (known: "
            f"{', '.join(known) or 'none'}); correct --scenarios"
        )
    dup = sorted({s for s in ids if ids.count(s) > 1})
    if dup:
        raise StudyError(f"--scenarios: {', '.join(dup)} given twice")
    for sid in ids:
        try:
            load_scenario(sid)
        except Exception as exc:  # any defect of a bundle refuses the study
            raise StudyError(
                f"{paths.shown(paths.SCENARIOS_DIR / sid)}: the bundle does not load "
                f"({str(exc).splitlines()[0]}); fix it first"
            ) from exc


def check_runner(ref: str | None) -> str | None:
    """Refuse a run function that cannot be imported or called before anything is stored or spent."""
    if ref is None:
        return None
    try:
        check_run_function(ref)
    except ValueError as exc:
        raise StudyError(f"--runner: {exc}; nothing was stored or dispatched") from exc
    return ref


#: Backends whose studies ``create --fresh`` may delete: their runs are checks of the harness, never findings (a dry
#: run's SIMULATED participants among them; a wave of people never).
DISCARDABLE_BACKENDS = frozenset({*backends.AGENT_BACKENDS, backends.SIMULATED_HUMAN}) - backends.REAL_BACKENDS


def discard_study(name: str) -> bool:
    """Delete study ``name`` if it holds no attempt on a real backend (a dry run or a rehearsal); True if there was one.

    A real study is never deleted: that is refused, naming its backends.
    Call it holding the study's lock (:func:`create_study` with ``fresh`` does),
    so that no other command is creating or running the study meanwhile.
    """
    import shutil

    folder = paths.study_dir(name)
    store_file = folder / STORE_FILE
    if not store_file.exists():
        return False
    with Store.open(folder) as old:
        used = set(old.backends_used())
    real = sorted(used - DISCARDABLE_BACKENDS)
    if real:
        raise StudyError(
            f"{paths.shown(store_file)}: refusing to delete study {name}: it holds attempts on {', '.join(real)}"
        )
    # The store first: a delete cut short leaves no study rather than a store without its workspaces.
    for part in (store_file, Path(f"{store_file}-wal"), Path(f"{store_file}-shm")):
        part.unlink(missing_ok=True)
    for entry in folder.iterdir():
        # The lock file stays: the caller holds it, and a command waiting on it must wait on the same file.
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return True


#: How long a create waits for another create of the same name (its hold on the study is short) before refusing.
CREATE_WAIT_S = 60.0


def _enter_lock(stack: ExitStack, folder: Path) -> None:
    """Hold the study's lock in ``stack``; on release the lock file is emptied, as a pid in it names a holder."""
    stack.enter_context(study_lock(folder))
    stack.callback(_clear_holder, folder / LOCK_FILE)  # runs first, while the lock is still held


def _clear_holder(lock: Path) -> None:
    try:
        with open(lock, "r+", encoding="utf-8") as fh:
            fh.truncate()
    except OSError:
        pass  # a stale pid only makes a later refusal name a process that is gone


def _exists(name: str) -> StudyError:
    return StudyError(
        f"{paths.shown(paths.study_dir(name) / STORE_FILE)}: study {name!r} already exists; choose another name"
    )


def _hold_study(stack: ExitStack, name: str, *, fresh: bool) -> None:
    """Take study ``name``'s lock (the one ``pilot study run`` holds) into ``stack``, for a create.

    A plain create waits while another create of the name holds it and is
    refused as soon as that one's store exists; ``fresh`` deletes, so it
    never waits: it is refused whenever another command holds the study.
    """
    folder = paths.study_dir(name)
    deadline = time.monotonic() + CREATE_WAIT_S
    while True:
        if not fresh and (folder / STORE_FILE).exists():
            raise _exists(name)
        try:
            _enter_lock(stack, folder)
            return
        except ScheduleError:
            if fresh or time.monotonic() > deadline:
                try:
                    holder = (folder / LOCK_FILE).read_text(encoding="utf-8").strip() or "unknown"
                except OSError:
                    holder = "unknown"
                raise StudyError(
                    f"{paths.shown(folder / LOCK_FILE)}: study {name!r} is being created or run by another "
                    f"process (pid {holder}); "
                    + ("--fresh deletes a study only while no other command holds it: " if fresh else "")
                    + "wait for that one to finish, then run again"
                ) from None
            time.sleep(0.05)


def write_assignment(store: Store, wave: str) -> Path:
    """Write ``assignment_<wave>.csv`` beside the store from the store's own committed rows, atomically.

    Call it only holding the study (a create's new store, or the study's
    lock): a command that lost the study must not write beside it. An
    unchanged file is left alone.
    """
    path = store.folder / f"assignment_{wave}.csv"
    text = assignment_csv(store.cells(wave))
    try:
        if path.read_text(encoding="utf-8") == text:
            return path
    except (OSError, UnicodeDecodeError):
        pass  # missing or unreadable: written below
    return atomic_write_text(path, text)


def create_study(
    name: str,
    *,
    seed: int | None = None,
    nodes_file: Path | None = None,
    scenarios: list[str] | None = None,
    arms: list[str] | str | None = None,
    run_function: str | None = None,
    fresh: bool = False,
    pilot_repeats: int | None = None,
    scenario_set: str | None = None,
) -> Store:
    """Validate everything, then create the study's store with the pilot wave's seeded assignment, in one step.

    The study runs ``scenarios`` when given, else the scenario set ``scenario_set`` of ``study.yml``
    (``scenario_sets``), else the design's own set (``design.scenario_set``, the preregistered ten).

    ``pilot_repeats`` gives the pilot wave fewer repeats than the design's (1 to ``design.pilot_repeats``; a rehearsal
    uses 1).

    ``fresh`` first deletes an existing study of that name that holds only dry-run or rehearsal attempts
    (:func:`discard_study`).

    Two creates of one name at once: the store takes exactly one; the other
    is refused and writes nothing. The store is made, and
    ``assignment_pilot.csv`` written from its rows, holding the study's lock,
    which ``fresh`` needs free (it is refused while another command holds it).
    """
    if not _STUDY_NAME.match(name):
        raise StudyError(f"study name {name!r}: use letters, digits, '-', '_' or '.', starting with a letter or digit")
    folder = paths.study_dir(name)
    if not fresh and (folder / STORE_FILE).exists():
        raise _exists(name)
    study = protocol.study()
    seed = study.assignment_seed if seed is None else int(seed)
    chosen_arms = parse_arms(arms)
    if pilot_repeats is not None and not 1 <= int(pilot_repeats) <= study.pilot_repeats:
        raise StudyError(
            f"--pilot-repeats {pilot_repeats}: give 1 to {study.pilot_repeats} "
            f"(design.pilot_repeats in {paths.shown(paths.STUDY_FILE)})"
        )
    nodes_path = Path(nodes_file) if nodes_file else paths.NODES_FILE
    nodes = load_nodes(nodes_path)
    if scenarios and scenario_set:
        raise StudyError("give either --scenarios or --scenario-set, not both")
    if scenarios:
        check_scenarios(list(scenarios))
        ids = list_scenario_ids(scenarios)
    else:
        try:
            ids = study.scenario_set(scenario_set)
        except protocol.ProtocolError as exc:
            raise StudyError(f"--scenario-set {scenario_set}: {exc}") from None
        check_scenarios(ids)
    if not ids:
        raise StudyError("no scenarios found: add bundles under protocol/scenarios/ or pass --scenarios ID ...")
    check_runner(run_function)
    cells = build_cells(
        name,
        "pilot",
        ids,
        seed,
        study=study,
        arms=chosen_arms,
        repeats=None if pilot_repeats is None else list(range(1, int(pilot_repeats) + 1)),
    )
    try:
        check_servable(cells, nodes, _requires())
    except ScheduleError as exc:
        print(f"warning: {exc} (with the dask executor the cluster's workers count instead)", file=sys.stderr)
    nodes_yaml = nodes_path.read_text(encoding="utf-8")
    with ExitStack() as held:
        _hold_study(held, name, fresh=fresh)
        if fresh:
            discard_study(name)
        if (folder / STORE_FILE).exists():
            raise _exists(name)
        store = Store.create(
            folder,
            name=name,
            seed=seed,
            protocol_version=str(study["study"]["protocol_version"]),
            worker_model=str(study["worker"]["model"]),
            envelope_usd=study.envelope_usd,
            scenarios=ids,
            nodes_source=str(nodes_path),
            nodes_yaml=nodes_yaml,
            cells=cells,
            arms=chosen_arms,
            run_function=run_function,
        )
        try:
            write_assignment(store, "pilot")
        except BaseException:
            # A study is created whole or not at all: while the lock is held no other command can have run or changed
            # it.
            store.close()
            for part in (store.path, Path(f"{store.path}-wal"), Path(f"{store.path}-shm")):
                part.unlink(missing_ok=True)
            raise
        return store


def ensure_wave(store: Store, wave: str) -> int:
    """Add a later wave's cells (same seed, its own permutation) if not there yet; returns how many were added.

    Call under the study's lock (:meth:`Scheduler.run` does, as ``prepare``):
    two operators starting one wave at once must not both add it. The
    wave's assignment file is written from the store's rows (put back if it
    was lost or disagrees).
    """
    if store.has_wave(wave):
        write_assignment(store, wave)
        return 0
    info = store.study()
    study = protocol.study()
    if wave == "sensitivity" and info.arms is not None and study["sensitivity_models"]["arm"] not in info.arms:
        raise StudyError(
            f"study {info.name} has arms {', '.join(info.arms)}; the sensitivity wave runs arm "
            f"{study['sensitivity_models']['arm']}, which it lacks"
        )
    cells = build_cells(
        info.name, wave, info.scenarios, info.seed, study=study, arms=info.arms if wave != "sensitivity" else None
    )
    store.add_cells(cells)
    write_assignment(store, wave)
    return len(cells)


def agent_backends(store: Store) -> list[str]:
    """The backends the study's agent runs used (a human wave's participants are not agents: pilot.human)."""
    used = set(store.backends_used())
    return sorted(used - backends.PARTICIPANT_BACKENDS)


def _check_backend(store: Store, backend: str) -> None:
    other = set(agent_backends(store)) - {backend}
    if other:
        raise StudyError(
            f"study {store.study().name} was run with backend {', '.join(sorted(other))}; "
            f"a study never mixes backends (create another study for {backend})"
        )


def _envelope_drift(store: Store) -> str | None:
    """A warning when ``protocol/study.yml`` names another envelope than the study keeps (editing it changes
    nothing)."""
    kept = store.balance().envelope_usd
    written = protocol.study().envelope_usd
    if ledger.to_micro(written) == ledger.to_micro(kept):
        return None
    name = store.study().name
    return (
        f"warning: {paths.shown(paths.STUDY_FILE)} sets an envelope of {written:.2f} dollars but study "
        f"{name} keeps {kept:.2f}; an existing study changes its envelope only through `pilot study "
        f"envelope {name} --set USD --amendment A-NNN`"
    )


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
    record_verdicts: bool | None = None,
) -> WaveResult:
    """Run (or resume) one wave of a study; the Python form of ``pilot study run``.

    Everything that can refuse (backend, run function, nodes, the lock) is
    checked before the freeze manifest is taken or anything is reserved.
    When the pilot starts, the freeze's lock records the oracle's verdicts on
    the study's gold, no-op and mutation packages if ``record_verdicts``
    (by default when the backend's runs are findings: a dry run's lock holds
    the code digest and commit alone; :mod:`pilot.study_freeze`).
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
            # Under the lock: a file another create overwrote (before creates took the lock) is put back from the store.
            prepare = lambda st: write_assignment(st, "pilot")  # noqa: E731
            if info.freeze_manifest is None:
                scen = info.scenarios
                verdicts = backends.label(backend) == "" if record_verdicts is None else record_verdicts
                on_start = lambda st: study_freeze.take(st, scen, verdicts=verdicts)  # noqa: E731
        else:
            if info.freeze_manifest is None:
                raise StudyError(f"study {name} has no freeze manifest: run the pilot wave first")
            report = study_freeze.verify(store)
            if not report.ok:
                print(
                    "warning: the frozen protocol changed since the pilot; this wave will not be pooled:",
                    file=sys.stderr,
                )
                print("\n".join(report.lines()), file=sys.stderr)
            prepare = lambda st: ensure_wave(st, wave)  # noqa: E731 - under the study lock, see ensure_wave
        requires = _requires()
        if executor == "dask":
            if not scheduler_address:
                raise StudyError("--executor dask needs --scheduler ADDRESS (e.g. tcp://host:8786)")
            from pilot.executors.dask import DaskExecutor
            from pilot.identity import protocol_identity

            # The workers share no disk with this host: each proves it holds this protocol before it runs anything,
            # and sends the attempt's files home.
            identity = protocol_identity(list(info.scenarios) if info.scenarios else None, backend=backend)
            ex: Any = DaskExecutor(
                scheduler_address,
                run_function,
                requires,
                identity=identity,
                scenarios=list(info.scenarios) if info.scenarios else None,
                limit_bytes=protocol.study().transfer_limit_bytes,
            )
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
            sched = Scheduler(
                store,
                ex,
                nodes,
                backend=backend,
                requires=requires,
                max_infra_attempts=max_infra_attempts,
                progress=progress,
            )
            result = sched.run(wave, prepare=prepare, on_start=on_start)
        finally:
            ex.close()
        from pilot.outcomes import unevaluated_rows

        result.unevaluated = [r["run_id"] for r in unevaluated_rows(store.finished_rows(), wave)]
        result.failure_lines = failure_lines(store, wave) if result.counts.get("failed") else []
        return result
    finally:
        store.close()


def retry_runs(name: str, run_ids: list[str] | None = None) -> list[str]:
    """Reopen failed runs (all of them when ``run_ids`` is None) under their run ids; the next ``run`` dispatches
    them."""
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
    """Add one row to ``amendments.csv`` (atomically) after checking the result is still a valid file; returns the old
    text."""
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
        raise StudyError(
            f"--amendment {amendment!r}: amendment ids have the form A-NNN (see {paths.shown(paths.AMENDMENTS_FILE)})"
        )
    store = Store.open(paths.study_dir(name))
    try:
        bal = store.balance()
        new_micro = ledger.to_micro(value)
        if new_micro < ledger.to_micro(bal.spent_usd) + ledger.to_micro(bal.reserved_usd):
            raise StudyError(
                f"--set {value}: below what study {name} has already spent and reserved "
                f"({bal.spent_usd + bal.reserved_usd:.2f} dollars); choose at least that"
            )
        amendments = protocol.load_amendments()
        existing = next((r for r in amendments if r["id"] == amendment), None)
        old_text = None
        if existing is None:
            row = {
                "id": amendment,
                "date": datetime.now(UTC).strftime("%Y-%m-%d"),
                # This repository's studies are reruns of the protocol: the stage never goes back (the validator's
                # rule).
                "stage": protocol.AMENDMENT_STAGES[
                    max(
                        [protocol.AMENDMENT_STAGES.index("before rerun pilot")]
                        + [protocol.AMENDMENT_STAGES.index(r["stage"]) for r in amendments]
                    )
                ],
                "title": "Dollar envelope changed",
                "content": (
                    f"The dollar envelope of study {name} was changed from {bal.envelope_usd:.2f} to "
                    f"{value:.2f} dollars with {bal.spent_usd:.2f} spent and {bal.reserved_usd:.2f} "
                    "reserved; every other rule of A-001 is unchanged."
                ),
            }
            old_text = _append_amendment(paths.AMENDMENTS_FILE, row)
        try:
            with store.transaction() as c:
                old, new = ledger.set_envelope(
                    c, new_micro, amendment, note=(existing or {}).get("title", "Dollar envelope changed")
                )
                store.record_event(
                    c, "envelope", None, amendment=amendment, old_usd=ledger.to_usd(old), new_usd=ledger.to_usd(new)
                )
        except BaseException:
            if old_text is not None:
                atomic_write_text(paths.AMENDMENTS_FILE, old_text)  # the change did not happen: neither did its record
            raise
        return {
            "study": name,
            "amendment": amendment,
            "old_usd": ledger.to_usd(old),
            "new_usd": ledger.to_usd(new),
            "amendment_added": existing is None,
            "amendments_file": str(paths.AMENDMENTS_FILE),
        }
    except ledger.LedgerError as exc:
        raise StudyError(str(exc)) from exc
    finally:
        store.close()


def status_table(store: Store) -> pd.DataFrame:
    """Per wave and arm: runs done (of which without a verdict), in flight, waiting, failed, failed attempts, dollars
    spent and reserved."""
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
    the analyses drop them and say how many (:func:`pilot.runtable.validate_runtable`).
    Into the study's folder (the default) only holding the study's lock, so
    the file is the store's as of one moment; refused while a run holds it.
    """
    from pilot import outcomes

    store = Store.open(paths.study_dir(name))
    held = ExitStack()
    try:
        target = Path(out) if out else store.folder / RUNS_FILE
        if target.resolve().parent == store.folder.resolve():
            try:
                _enter_lock(held, store.folder)
            except ScheduleError as exc:
                raise StudyError(
                    f"{exc}; export once it has stopped, or write the table elsewhere with --out FILE"
                ) from exc
        info = store.study()
        rows = store.finished_rows()
        later = [r for r in rows if r["wave"] not in ("pilot", HUMAN_WAVE)]
        if later and not pilot_only:
            if info.freeze_manifest is None:
                raise StudyError(f"study {name} has later waves but no freeze manifest; export with --pilot-only")
            study_freeze.verify(store).raise_if_changed()
        if pilot_only:
            rows = [r for r in rows if r["wave"] == "pilot"]
        # The human wave's sessions have a table of their own (pilot.human.export): this one holds the agent runs.
        rows = [r for r in rows if r["wave"] != HUMAN_WAVE]
        backends = agent_backends(store)
        if len(backends) != 1:
            raise StudyError(f"study {name} has agent attempts on backends {backends}; expected exactly one")
        fake = [
            r["run_id"] for r in rows if r.get("record_json") and json.loads(r["record_json"]).get("runner") == "fake"
        ]
        if fake:
            raise StudyError(
                f"study {name} was run with a fake run function ({len(fake)} runs, e.g. {fake[0]}): it has "
                "no outcomes to export"
            )
        pending = [r["run_id"] for r in rows if r["status"] in ("waiting", "in_flight")]
        if pending:
            print(
                f"warning: {len(pending)} assigned run(s) not finished yet are left out of the run table "
                f"(e.g. {pending[0]}); run `pilot study run {name}` to finish them",
                file=sys.stderr,
            )
        table = outcomes.run_table(outcomes.rows_from_store(rows, study_name=info.name, backend=backends[0]))
        atomic_write_text(target, table.to_csv(index=False))
        return target, table
    finally:
        held.close()
        store.close()


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
