"""``pilot study``: create, run, inspect and export a study.

- ``pilot study create NAME [--seed N] [--nodes FILE] [--scenarios ID ...]``
  makes the store under ``analysis/data/NAME/`` with the pilot wave's seeded
  assignment (also written to ``assignment_pilot.csv``).
- ``pilot study run NAME [--backend simulated|claude-code] [--executor local|dask]
  [--scheduler ADDRESS] [--wave pilot|repeat3|sensitivity]`` dispatches the
  wave's waiting runs; run it again after an interruption and it resumes.
- ``pilot study status NAME`` shows cells done, in flight, waiting and failed,
  failed attempts and dollars per arm, and the envelope.
- ``pilot study export NAME`` writes the run table ``analysis/data/NAME/runs.csv``;
  later waves are pooled only if the freeze verification passes.
- ``pilot study verify-freeze NAME`` compares the protocol with the manifest
  taken when the pilot started.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from pilot import freeze, paths, protocol
from pilot.executors.base import PIPELINE_RUN_FUNCTION
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
)
from pilot.store import WAVES, Store, StoreError

BACKENDS = ("simulated", "claude-code")
EXECUTORS = ("local", "dask")
RUNS_FILE = "runs.csv"
_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class StudyError(RuntimeError):
    """A study command cannot proceed; the message says why."""


def _requires() -> dict[str, tuple[str, ...]]:
    return {a: arm.requires for a, arm in protocol.arms().items()}


def create_study(name: str, *, seed: int | None = None, nodes_file: Path | None = None, scenarios: list[str] | None = None) -> Store:
    """Create the study's store with the pilot wave's seeded assignment."""
    if not _STUDY_NAME.match(name):
        raise StudyError(f"study name {name!r}: use letters, digits, '-', '_' or '.', starting with a letter or digit")
    study = protocol.study()
    seed = study.assignment_seed if seed is None else int(seed)
    nodes_path = Path(nodes_file) if nodes_file else paths.NODES_FILE
    nodes = load_nodes(nodes_path)
    ids = list_scenario_ids(scenarios)
    if not ids:
        raise StudyError("no scenarios found: add bundles under protocol/scenarios/ or pass --scenarios ID ...")
    cells = build_cells(name, "pilot", ids, seed, study=study)
    try:
        check_servable(cells, nodes, _requires())
    except ScheduleError as exc:
        print(f"warning: {exc} (with the dask executor the cluster's workers count instead)", file=sys.stderr)
    folder = paths.study_dir(name)
    store = Store.create(
        folder,
        name=name,
        seed=seed,
        protocol_version=str(study["study"]["protocol_version"]),
        worker_model=str(study["worker"]["model"]),
        envelope_usd=study.envelope_usd,
        scenarios=ids,
        nodes_source=str(nodes_path),
        nodes_yaml=nodes_path.read_text(encoding="utf-8"),
    )
    store.add_cells(cells)
    (folder / "assignment_pilot.csv").write_text(assignment_csv(cells), encoding="utf-8")
    return store


def ensure_wave(store: Store, wave: str) -> int:
    """Add a later wave's cells (same seed, its own permutation) if not there yet; returns how many were added."""
    if store.has_wave(wave):
        return 0
    info = store.study()
    cells = build_cells(info.name, wave, info.scenarios, info.seed)
    store.add_cells(cells)
    (store.folder / f"assignment_{wave}.csv").write_text(assignment_csv(cells), encoding="utf-8")
    return len(cells)


def _check_backend(store: Store, backend: str) -> None:
    used = {r[0] for r in store.conn.execute("SELECT DISTINCT backend FROM attempts")}
    other = used - {backend}
    if other:
        raise StudyError(
            f"study {store.study().name} was run with backend {', '.join(sorted(other))}; "
            f"a study never mixes backends (create another study for {backend})"
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
) -> WaveResult:
    """Run (or resume) one wave of a study; the Python form of ``pilot study run``.

    With the claude-code backend the wave refuses to start on a host that
    cannot isolate a run, unless ``allow_unisolated`` (development only;
    every run then records ``enforcement`` ``unisolated``).
    """
    if backend not in BACKENDS:
        raise StudyError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "claude-code":
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
        if wave == "pilot":
            if info.freeze_manifest is None:
                store.set_freeze_manifest(freeze.take_manifest(scenarios=info.scenarios))
        else:
            if info.freeze_manifest is None:
                raise StudyError(f"study {name} has no freeze manifest: run the pilot wave first")
            report = freeze.verify(info.freeze_manifest, scenarios=info.scenarios)
            if not report.ok:
                print("warning: the frozen protocol changed since the pilot; this wave will not be pooled:", file=sys.stderr)
                print("\n".join(report.lines()), file=sys.stderr)
            ensure_wave(store, wave)
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
            if backend == "claude-code" and sys.platform != "darwin":
                fake = [n.name for n in static if "macos" in n.capabilities]
                if fake:
                    raise StudyError(
                        f"nodes {fake} are tagged macos but this host is {sys.platform}: with the claude-code backend "
                        "A2 must run on a real Mac (use the dask executor with a worker there)"
                    )
            ex = LocalExecutor(run_function, workers or sum(n.slots for n in static))
            nodes = static
        else:
            raise StudyError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
        try:
            sched = Scheduler(store, ex, nodes, backend=backend, requires=requires, max_infra_attempts=max_infra_attempts, progress=progress)
            return sched.run(wave)
        finally:
            ex.close()
    finally:
        store.close()


def status_table(store: Store) -> pd.DataFrame:
    """Per wave and arm: runs done, in flight, waiting, failed, failed attempts, dollars spent and reserved."""
    df = pd.DataFrame(store.status_by_arm())
    if df.empty:
        return df
    total = df.drop(columns=["wave", "arm"]).sum(numeric_only=True)
    total["wave"], total["arm"] = "all", "all"
    df = pd.concat([df, total.to_frame().T], ignore_index=True)
    counts = ["done", "in_flight", "waiting", "failed", "failed_attempts"]
    df[counts] = df[counts].astype(int)
    df[["spent_usd", "reserved_usd"]] = df[["spent_usd", "reserved_usd"]].astype(float).round(2)
    return df


def export_run_table(name: str, *, pilot_only: bool = False, out: Path | None = None) -> tuple[Path, pd.DataFrame]:
    """Write the run table of a study; later waves only when the freeze verification passes."""
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
        target.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(target, index=False)
        return target, table
    finally:
        store.close()


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="create, run, inspect and export a study (scheduler, store, envelope)")
    ss = p.add_subparsers(dest="study_command", metavar="ACTION")

    c = ss.add_parser("create", help="create the study's store and the pilot's seeded assignment")
    c.add_argument("name")
    c.add_argument("--seed", type=int, help="assignment seed (default: design.assignment_seed in protocol/study.yml)")
    c.add_argument("--nodes", type=Path, help=f"nodes file (default: {paths.NODES_FILE.relative_to(paths.ROOT)})")
    c.add_argument("--scenarios", nargs="+", metavar="ID", help="scenario ids (default: every scenario bundle)")
    c.set_defaults(func=_cmd_create)

    r = ss.add_parser("run", help="run or resume a wave")
    r.add_argument("name")
    r.add_argument("--backend", choices=BACKENDS, default="simulated", help="agent and judge backend (default: simulated, a dry run)")
    r.add_argument("--executor", choices=EXECUTORS, default="local")
    r.add_argument("--scheduler", metavar="ADDRESS", help="dask scheduler address for --executor dask")
    r.add_argument("--wave", choices=WAVES, default="pilot")
    r.add_argument("--workers", type=int, help="local processes (default: the nodes' total slots)")
    r.add_argument("--max-attempts", type=int, default=3, help="infrastructure attempts per run before it is recorded as failed")
    r.add_argument("--runner", metavar="MODULE:FUNCTION", help=f"run function (default: {PIPELINE_RUN_FUNCTION})")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--allow-unisolated", action="store_true",
                   help="development only: run the claude-code backend without its sandbox (recorded on every run; the analysis refuses such runs)")
    r.set_defaults(func=_cmd_run)

    s = ss.add_parser("status", help="cells, attempts and dollars per wave and arm")
    s.add_argument("name")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=_cmd_status)

    e = ss.add_parser("export", help=f"write the run table analysis/data/NAME/{RUNS_FILE}")
    e.add_argument("name")
    e.add_argument("--pilot-only", action="store_true", help="export the pilot wave alone (no pooling)")
    e.add_argument("--out", type=Path, help="write here instead")
    e.set_defaults(func=_cmd_export)

    v = ss.add_parser("verify-freeze", help="compare the protocol with the manifest taken at pilot start")
    v.add_argument("name")
    v.set_defaults(func=_cmd_verify)

    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _fail(exc: Exception) -> int:
    print(f"pilot study: {exc}", file=sys.stderr)
    return 2


def _cmd_create(args: argparse.Namespace) -> int:
    try:
        store = create_study(args.name, seed=args.seed, nodes_file=args.nodes, scenarios=args.scenarios)
    except (StudyError, StoreError, ScheduleError, protocol.ProtocolError) as exc:
        return _fail(exc)
    info = store.study()
    out = {"study": info.name, "store": str(store.path), "seed": info.seed, "scenarios": len(info.scenarios), "pilot_cells": store.counts("pilot")["waiting"]}
    store.close()
    print(json.dumps(out))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    try:
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
    except (StudyError, StoreError, ScheduleError, protocol.ProtocolError) as exc:
        return _fail(exc)
    print(res.summary.to_string())
    return 0 if res.stop_reason == "complete" else 3


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        store = Store.open(paths.study_dir(args.name))
    except StoreError as exc:
        return _fail(exc)
    with store:
        table = status_table(store)
        bal = store.balance()
        problems = store.audit()
        if args.json:
            print(json.dumps({"by_arm": table.to_dict(orient="records"), "envelope": bal.as_dict(), "ledger_problems": problems}, default=str))
            return 0
        info = store.study()
        print(f"study {info.name}  seed {info.seed}  scenarios {len(info.scenarios)}  store {store.path}")
        print(table.to_string(index=False) if not table.empty else "(no cells)")
        print(
            f"envelope {bal.envelope_usd:.2f}  spent {bal.spent_usd:.2f}  reserved {bal.reserved_usd:.2f}  remaining {bal.remaining_usd:.2f} (USD)"
        )
        print("ledger balances" if not problems else "LEDGER PROBLEMS:\n  " + "\n  ".join(problems))
    return 0 if not problems else 1


def _cmd_export(args: argparse.Namespace) -> int:
    try:
        target, table = export_run_table(args.name, pilot_only=args.pilot_only, out=args.out)
    except freeze.FreezeViolation as exc:
        print(f"pilot study export: {exc}\n(export the pilot alone with --pilot-only)", file=sys.stderr)
        return 2
    except (StudyError, StoreError) as exc:
        return _fail(exc)
    print(json.dumps({"run_table": str(target), "rows": len(table)}))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    try:
        store = Store.open(paths.study_dir(args.name))
    except StoreError as exc:
        return _fail(exc)
    with store:
        info = store.study()
    if info.freeze_manifest is None:
        return _fail(StudyError(f"study {args.name} has no freeze manifest yet (it is taken when the pilot starts)"))
    report = freeze.verify(info.freeze_manifest, scenarios=info.scenarios)
    print("\n".join(report.lines()))
    return 0 if report.ok else 1
