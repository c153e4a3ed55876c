"""``pilot study``: create, run, inspect, export and amend a study.

- ``pilot study create NAME [--seed N] [--nodes FILE] [--scenario-set NAME | --scenarios ID ...]
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
- ``pilot study rejudge NAME [--sample all|N] [--rendering R] [--dry-run] [--report-only] [--tables-dir D]
  [--generated-dir D]`` judges finished runs again under the other workbook rendering (:mod:`pilot.rejudge`) and
  writes Q and S per arm under both renderings.
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
  taken when the pilot started; oracle code that changed since passes when
  its verdicts on the study's gold, no-op and mutation packages are the
  frozen ones (recorded), and is refused otherwise, naming the commit to
  resume the study with.
- ``pilot study record-verdicts NAME`` records those verdicts for a study
  frozen without them (by the code that froze it).
- ``pilot study rehearsal-report NAME [--out DIR]`` checks a study run with
  ``--backend rehearsal`` against the scripted model's known truth
  (:mod:`pilot.simulated.rehearsal_report`) and writes ``report.md`` and ``report.json``;
  exit 1 when any mismatch is found.

Every failure ends in one line ``pilot study: <file>: <what happened>; <what to do>``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from pilot import backends, freeze, ledger, paths, protocol, study_freeze
from pilot.executors.base import PIPELINE_RUN_FUNCTION
from pilot.nodes import HOST_ARMS, NodeError
from pilot.schedule import ScheduleError
from pilot.store import STORE_FILE, WAVES, Store, StoreError, describe_fault
from pilot.study import (
    BACKENDS,
    EXECUTORS,
    RUNS_FILE,
    StudyError,
    create_study,
    export_run_table,
    retry_runs,
    run_study_wave,
    set_envelope,
    status_table,
)

EXIT_INCOMPLETE = 3
EXIT_FAILED_RUNS = 4


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="create, run, inspect and export a study (scheduler, store, envelope)")
    ss = p.add_subparsers(dest="study_command", metavar="ACTION")

    c = ss.add_parser("create", help="validate, then create the study's store and the pilot's seeded assignment")
    c.add_argument("name")
    c.add_argument("--seed", type=int, help="assignment seed (default: design.assignment_seed in protocol/study.yml)")
    c.add_argument("--nodes", type=Path, help=f"nodes file (default: {paths.shown(paths.NODES_FILE)})")
    c.add_argument(
        "--scenario-set",
        metavar="NAME",
        help="a scenario set of protocol/study.yml (scenario_sets; default: design.scenario_set, "
        "the preregistered ten)",
    )
    c.add_argument("--scenarios", nargs="+", metavar="ID", help="scenario ids, instead of a set")
    c.add_argument(
        "--arms",
        metavar="A0,A1,...",
        help="a subset of the design's arms (default: all), checked against protocol/arms/arms.yml; "
        f"{HOST_ARMS!r}: every arm this host can serve",
    )
    c.add_argument(
        "--runner", metavar="MODULE:FUNCTION", help=f"the study's run function (default: {PIPELINE_RUN_FUNCTION})"
    )
    c.add_argument(
        "--pilot-repeats",
        type=int,
        metavar="N",
        help="repeats of the pilot wave, fewer than the design's (a rehearsal: 1)",
    )
    c.add_argument(
        "--fresh",
        action="store_true",
        help=(
            "first delete an existing study of this name if it holds only dry-run or rehearsal attempts "
            "(refused for a real study)"
        ),
    )
    c.set_defaults(func=_cmd_create)

    r = ss.add_parser("run", help="run or resume a wave (exit 3: runs left waiting; 4: runs failed)")
    r.add_argument("name")
    r.add_argument(
        "--backend",
        choices=BACKENDS,
        default="simulated",
        help=(
            "agent and judge backend (default: simulated, a dry run; rehearsal: the real harness against the "
            "scripted model, no key)"
        ),
    )
    r.add_argument("--executor", choices=EXECUTORS, default="local")
    r.add_argument("--scheduler", metavar="ADDRESS", help="dask scheduler address for --executor dask")
    r.add_argument("--wave", choices=WAVES, default="pilot")
    r.add_argument("--workers", type=int, help="local processes (default: the nodes' total slots)")
    r.add_argument(
        "--max-attempts", type=int, default=3, help="infrastructure attempts per run before it is recorded as failed"
    )
    r.add_argument(
        "--runner",
        metavar="MODULE:FUNCTION",
        help="run function (default: the study's, else " + PIPELINE_RUN_FUNCTION + ")",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument(
        "--record-verdicts",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=(
            "when the pilot starts, record the oracle's verdicts on the study's gold, no-op and mutation packages in "
            "the freeze (default: for a backend whose runs are findings)"
        ),
    )
    r.add_argument(
        "--allow-unisolated",
        action="store_true",
        help=(
            "development only: run the claude-code backend without its sandbox (recorded on every run; the "
            "analysis refuses such runs)"
        ),
    )
    r.set_defaults(func=_cmd_run)

    t = ss.add_parser("retry", help="reopen failed runs under their run ids (earlier attempts are kept)")
    t.add_argument("name")
    t.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="failed runs to reopen")
    t.add_argument("--failed", action="store_true", help="reopen every failed run")
    t.set_defaults(func=_cmd_retry)

    q = ss.add_parser(
        "reevaluate",
        help="evaluate again, in place, finished runs whose evaluation could not run (eval_error); "
        "exit 1: a run was refused or could not be evaluated again",
    )
    q.add_argument("name")
    q.add_argument(
        "--run",
        dest="run_ids",
        nargs="+",
        action="extend",
        metavar="RUN_ID",
        help="these runs only (each must have an evaluation error; default: every such run)",
    )
    q.add_argument("--wave", choices=WAVES, help="runs of this wave only (default: every wave)")
    q.add_argument(
        "--dry-run", action="store_true", help="list what would be re-evaluated or refused, and change nothing"
    )
    q.add_argument("--json", action="store_true", help="print JSON instead of one line per run")
    q.set_defaults(func=_cmd_reevaluate)

    rj = ss.add_parser(
        "rejudge",
        help="judge finished runs again under the other workbook rendering (A-027) and report Q and S under both",
    )
    rj.add_argument("name")
    rj.add_argument(
        "--sample", default="all", help="all (default) or N: N runs per scenario x arm, seeded (the judges cost money)"
    )
    rj.add_argument("--seed", type=int, help="seed of the sample (default: the study's seed)")
    rj.add_argument(
        "--rendering", choices=("recalculated", "stored"), help="judge under this rendering (default: the other one)"
    )
    rj.add_argument("--dry-run", action="store_true", help="list what would be judged, judge nothing")
    rj.add_argument("--report-only", action="store_true", help="judge nothing; write the tables from what is stored")
    rj.add_argument("--tables-dir", type=Path, help="write rendering_sensitivity*.csv here")
    rj.add_argument("--generated-dir", type=Path, help="write the manuscript's table and macros here")
    rj.set_defaults(func=_cmd_rejudge)

    n = ss.add_parser(
        "envelope", help="change the study's dollar envelope under an amendment (store and protocol/amendments.csv)"
    )
    n.add_argument("name")
    n.add_argument("--set", dest="usd", required=True, metavar="USD", help="the new envelope in dollars")
    n.add_argument("--amendment", required=True, metavar="A-NNN", help="the amendment that changes it")
    n.set_defaults(func=_cmd_envelope)

    s = ss.add_parser("status", help="cells, attempts and dollars per wave and arm")
    s.add_argument("name")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=_cmd_status)

    e = ss.add_parser(
        "export", help=f"write the run table analysis/data/NAME/{RUNS_FILE}, or Inspect eval logs (--format inspect)"
    )
    e.add_argument("name")
    e.add_argument("--pilot-only", action="store_true", help="export the pilot wave alone (no pooling)")
    e.add_argument(
        "--format",
        choices=("csv", "inspect"),
        default="csv",
        help="csv: the run table; inspect: one Inspect eval log per arm and model (the optional extra 'inspect')",
    )
    e.add_argument(
        "--out",
        type=Path,
        help="write here instead (for --format inspect: a folder, default analysis/data/NAME/inspect/)",
    )
    e.set_defaults(func=_cmd_export)

    h = ss.add_parser(
        "rehearsal-report", help="check a rehearsal study against the scripted model's truth (exit 1: findings to fix)"
    )
    h.add_argument("name")
    h.add_argument(
        "--out",
        type=Path,
        default=Path("build/rehearsal"),
        help="folder for report.md and report.json (default: build/rehearsal)",
    )
    h.add_argument("--runs", type=Path, help="the exported run table to check (default: analysis/data/NAME/runs.csv)")
    h.add_argument(
        "--branches",
        type=Path,
        help="the branch plan the rehearsal ran under: every branch must have been played "
        "(default: the plan $PILOT_REHEARSAL_BRANCHES names, if any)",
    )
    h.set_defaults(func=_cmd_rehearsal_report)

    v = ss.add_parser("verify-freeze", help="compare the protocol with the manifest taken at pilot start")
    v.add_argument("name")
    v.set_defaults(func=_cmd_verify)

    rv = ss.add_parser(
        "record-verdicts", help="record the oracle's verdicts in the freeze of a study frozen without them"
    )
    rv.add_argument("name")
    rv.set_defaults(func=_cmd_record_verdicts)

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
            return _fail(f"{paths.shown(paths.PROTOCOL_DIR)}: {exc}; export the pilot alone with --pilot-only")
        except (
            StudyError,
            NodeError,
            StoreError,
            ScheduleError,
            study_freeze.FreezeLockError,
            protocol.ProtocolError,
            ledger.LedgerError,
        ) as exc:
            return _fail(exc)
        except sqlite3.Error as exc:
            return _fail(describe_fault(exc, store_file))
        except OSError as exc:
            return _fail(describe_fault(exc, store_file))
        except KeyboardInterrupt:
            _fail(
                f"interrupted; every finished run is kept in {paths.shown(store_file)}: run the same "
                "command again to resume"
            )
            return 130

    return run


@_guarded
def _cmd_create(args: argparse.Namespace) -> int:
    store = create_study(
        args.name,
        seed=args.seed,
        nodes_file=args.nodes,
        scenarios=args.scenarios,
        arms=args.arms,
        run_function=args.runner,
        fresh=args.fresh,
        pilot_repeats=args.pilot_repeats,
        scenario_set=args.scenario_set,
    )
    with store:
        info = store.study()
        out = {
            "study": info.name,
            "store": str(store.path),
            "seed": info.seed,
            "scenarios": len(info.scenarios),
            "scenario_set": protocol.study().set_of(info.scenarios),
            "arms": info.arms or protocol.study().arms,
            "pilot_cells": store.counts("pilot")["waiting"],
        }
    print(json.dumps(out))
    return 0


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
        record_verdicts=args.record_verdicts,
    )
    print(res.summary.to_string())
    for node, why in sorted(res.refused_nodes.items()):
        # The worker and the file: what to bring to the study's commit before it may take runs again.
        print(f"pilot study: node {node} was sent no more runs in wave {args.wave}: {why}", file=sys.stderr)
    if res.unevaluated:
        print(
            (
                f"note: {len(res.unevaluated)} finished run(s) of wave {args.wave} have no verdict: their "
                f"evaluation could not run (eval_error, e.g. {res.unevaluated[0]}); once the cause is fixed, "
                f"`pilot study reevaluate {args.name}`"
            ),
            file=sys.stderr,
        )
    if res.counts.get("failed"):
        print(
            f"pilot study: {res.counts['failed']} run(s) of wave {args.wave} ended failed, by cause:", file=sys.stderr
        )
        print("\n".join(res.failure_lines), file=sys.stderr)
        print(
            f"pilot study: fix the cause, then `pilot study retry {args.name} --failed` and run again", file=sys.stderr
        )
        return EXIT_FAILED_RUNS
    if res.stop_reason != "complete":
        print(f"pilot study: {res.stop_reason}", file=sys.stderr)
        if res.stop_reason.startswith("envelope exhausted"):
            print(
                f"pilot study: to continue, raise the envelope under an amendment: "
                f"`pilot study envelope {args.name} --set USD --amendment A-NNN`",
                file=sys.stderr,
            )
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
        backend, results = reevaluate.reevaluate_study(
            paths.study_dir(args.name), args.run_ids, wave=args.wave, dry_run=args.dry_run
        )
    except reevaluate.ReevaluationError as exc:
        raise StudyError(f"{paths.shown(paths.study_dir(args.name) / STORE_FILE)}: {exc}") from exc
    label = backends.label_of(backend.split(","))
    if args.json:
        print(
            json.dumps(
                {
                    "study": args.name,
                    "label": label or None,
                    "dry_run": args.dry_run,
                    "runs": [r.to_dict() for r in results],
                },
                default=str,
            )
        )
    else:
        for res in results:
            print(reevaluate.result_line(res, label))
        if not results:
            head = f"{label} ({backends.qualifier(label)}): " if label else ""
            print(f"{head}study {args.name}: no finished run has an evaluation error; nothing to re-evaluate")
    return 1 if any(r.outcome in ("refused", "eval_error") for r in results) else 0


@_guarded
def _cmd_rejudge(args: argparse.Namespace) -> int:
    from pilot import rejudge

    folder = paths.study_dir(args.name)
    if args.sample == "all":
        per_stratum = None
    elif args.sample.isdigit() and int(args.sample) > 0:
        per_stratum = int(args.sample)
    else:
        raise StudyError(f"--sample {args.sample!r}: all, or a positive number of runs per scenario x arm")
    try:
        if not args.report_only:
            done = rejudge.rejudge_study(
                folder, per_stratum=per_stratum, seed=args.seed, rendering=args.rendering, dry_run=args.dry_run
            )
            head = f"{done.label} ({backends.qualifier(done.label)}): " if done.label else ""
            verb = "would judge" if args.dry_run else "judged"
            print(
                f"{head}study {args.name}: {verb} {len(done.judged)} run(s) again with the {done.judge_backend} judges "
                f"(${done.cost_usd:.4f}); {len(done.already)} already rejudged; {len(done.skipped)} skipped"
            )
        written = rejudge.write_outputs(folder, args.tables_dir, args.generated_dir)
    except rejudge.RejudgeError as exc:
        raise StudyError(f"{paths.shown(folder / STORE_FILE)}: {exc}") from exc
    for path in written:
        print(f"wrote {paths.shown(path)}")
    return 0


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
            print(
                json.dumps(
                    {
                        "by_arm": table.to_dict(orient="records"),
                        "envelope": bal.as_dict(),
                        "ledger_problems": problems,
                        "envelope_changes": changes,
                    },
                    default=str,
                )
            )
            return 0 if not problems else 1
        info = store.study()
        print(
            f"study {info.name}  seed {info.seed}  scenarios {len(info.scenarios)}  arms "
            f"{','.join(info.arms or protocol.study().arms)}  store {store.path}"
        )
        print(table.to_string(index=False) if not table.empty else "(no cells)")
        print(
            f"envelope {bal.envelope_usd:.2f}  spent {bal.spent_usd:.2f}  reserved {bal.reserved_usd:.2f}  "
            f"remaining {bal.remaining_usd:.2f} (USD)"
        )
        for ch in changes:
            print(
                f"envelope changed {ch['old_usd']:.2f} -> {ch['new_usd']:.2f} under {ch['amendment_id']} at {ch['at']}"
            )
        print("ledger balances" if not problems else "LEDGER PROBLEMS:\n  " + "\n  ".join(problems))
    return 0 if not problems else 1


@_guarded
def _cmd_export(args: argparse.Namespace) -> int:
    if args.format == "inspect":
        from pilot.view.inspect_log import InspectExportError, export_inspect
        from pilot.view.study import StudyReader, ViewError

        if args.pilot_only:
            return _fail("--pilot-only applies to the run table; the Inspect export holds every run of the study")
        try:
            reader = StudyReader.named(args.name)
            out = args.out or paths.study_dir(args.name) / "inspect"
            done = export_inspect(reader, out)
        except (InspectExportError, ViewError) as exc:
            return _fail(str(exc))
        print(json.dumps({"format": "inspect", "logs": [str(p) for p in done.logs], "samples": done.samples}))
        return 0
    report: dict[str, object] = {}
    folder = paths.study_dir(args.name)
    people = _human_sessions(folder)
    if not people or _has_agent_runs(folder):
        target, table = export_run_table(args.name, pilot_only=args.pilot_only, out=args.out)
        failed = int((table["status"] == "infra_error").sum())
        report.update({"run_table": str(target), "rows": len(table), "failed_runs": failed})
    if people and not args.pilot_only:
        # The human wave's sessions: a table of their own beside the agents' (pilot.human.export), never a contact.
        from pilot.human.export import HumanExportError, export_human_table

        beside = (Path(args.out).parent if args.out else folder) / paths.HUMAN_RUNS_FILE_NAME
        try:
            human_target, made = export_human_table(folder, beside)
        except HumanExportError as exc:
            report["human_runs"] = f"not written: {exc}"
        else:
            report.update(
                {
                    "human_runs": str(human_target),
                    "human_rows": len(made.table),
                    "human_not_evaluated": made.pending,
                    "human_withdrawn_excluded": made.withdrawn,
                }
            )
    print(json.dumps(report))
    return 0


def _human_sessions(folder: Path) -> bool:
    """Whether the study holds a human wave's sessions (cells of wave ``human``)."""
    from pilot.store import HUMAN_WAVE

    with Store.open(folder) as st:
        return st.has_wave(HUMAN_WAVE)


def _has_agent_runs(folder: Path) -> bool:
    from pilot.study import agent_backends

    with Store.open(folder) as st:
        return bool(agent_backends(st)) or any(c.wave != "human" for c in st.cells())


@_guarded
def _cmd_rehearsal_report(args: argparse.Namespace) -> int:
    import os

    from pilot.simulated import rehearsal_report as rehearsal
    from pilot.simulated.rehearsal_branches import PLAN_ENV

    plan = args.branches or (Path(os.environ[PLAN_ENV]) if os.environ.get(PLAN_ENV) else None)
    report = rehearsal.collect(
        args.name,
        run_table=paths.from_root(args.runs) if args.runs else None,
        branch_plan=paths.from_root(plan) if plan else None,
    )
    written = rehearsal.write(report, paths.from_root(args.out))
    print(report.to_markdown())
    print(json.dumps({"report": {k: paths.shown(v) for k, v in written.items()}, "findings": len(report.findings)}))
    if report.findings:
        print(
            (
                f"pilot study: the rehearsal of {args.name} has {len(report.findings)} finding(s) to fix "
                f"before the real study (listed in {paths.shown(written[rehearsal.REPORT_MD])})"
            ),
            file=sys.stderr,
        )
        return 1
    return 0


@_guarded
def _cmd_verify(args: argparse.Namespace) -> int:
    with Store.open(paths.study_dir(args.name)) as store:
        if store.study().freeze_manifest is None:
            return _fail(
                StudyError(f"study {args.name} has no freeze manifest yet (it is taken when the pilot starts)")
            )
        report = study_freeze.verify(store)
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


@_guarded
def _cmd_record_verdicts(args: argparse.Namespace) -> int:
    with Store.open(paths.study_dir(args.name)) as store:
        lock = study_freeze.record_verdicts(store)
    n = freeze.count_packages(lock.verdicts or {})
    print(f"study {args.name}: the verdicts of {n} packages recorded (code digest {lock.code_digest[:16]})")
    return 0
