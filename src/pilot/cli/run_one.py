"""``pilot run-one`` (one attempt of one run) and ``pilot worker-env`` (the worker's Python environment)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pilot import backends, paths


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-one", help="perform one attempt of one run and print its run record as JSON")
    p.add_argument("scenario", help="scenario id, e.g. ACC-01")
    p.add_argument("arm", help="arm id, e.g. A1")
    p.add_argument("--backend", choices=backends.AGENT_BACKENDS, default="simulated",
                   help="simulated (embedded default, SIMULATED outputs), claude-code (the pinned CLI) or rehearsal "
                        "(the pinned CLI against the scripted model server, REHEARSAL outputs; its record in OUT.scripted/)")
    p.add_argument("--out", type=Path, required=True, help="run folder: workspace, transcript, evaluation and run record go here (reset first)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw of the attempt")
    p.add_argument("--model", default=None, help="worker model (default: study.yml worker.model)")
    p.add_argument("--claude-bin", type=Path, default=None, help="the CLI to run (default: claude_agent_sdk's bundled CLI, else claude on PATH)")
    p.add_argument("--worker-env", type=Path, default=None, help=f"the worker Python environment (default: {paths.WORKER_ENV_DIR.relative_to(paths.ROOT)})")
    p.add_argument("--allow-unisolated", action="store_true",
                   help="development only: run the claude-code backend without its sandbox "
                        "(recorded as enforcement 'unisolated'; the analysis refuses such runs)")
    p.set_defaults(func=_run_one)

    w = sub.add_parser("worker-env", help="build or show the worker's Python environment (shell arms)")
    ws = w.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = ws.add_parser("build", help="create it with venv and pip from worker_requirements.txt")
    b.add_argument("--dir", type=Path, default=paths.WORKER_ENV_DIR)
    b.set_defaults(func=_env_build)
    s = ws.add_parser("show", help="print its recorded versions")
    s.add_argument("--dir", type=Path, default=paths.WORKER_ENV_DIR)
    s.set_defaults(func=_env_show)

    sb = sub.add_parser("sandbox", help="the sandbox's unprivileged worker users (a root harness runs every worker as one)")
    sbs = sb.add_subparsers(dest="action", metavar="ACTION", required=True)
    u = sbs.add_parser("users", help="list the worker users of study.yml sandbox; --create makes the missing ones (root)")
    u.add_argument("--create", action="store_true", help="create the missing users as system users without a home or a shell")
    u.set_defaults(func=_sandbox_users)


def _run_one(args: argparse.Namespace) -> int:
    from pilot.pipeline import model_upstream
    from pilot.protocol import ProtocolError
    from pilot.runner import RunnerError, run_attempt

    try:
        with model_upstream(args.backend, args.out.resolve(), args.seed) as upstream:
            rec = run_attempt(
                args.scenario, args.arm, backend=args.backend, out_dir=args.out, seed=args.seed, model=args.model,
                claude_bin=args.claude_bin, worker_env=args.worker_env, isolation="unisolated" if args.allow_unisolated else None,
                environ=upstream,
            )
    except (RunnerError, ProtocolError, KeyError, FileNotFoundError) as exc:
        print(f"pilot run-one: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rec.to_dict(), indent=2, default=str))
    return 0 if rec.status != "infra_error" else 3


def _env_build(args: argparse.Namespace) -> int:
    from pilot.agents import worker_env

    versions = worker_env.build(args.dir)
    print(json.dumps(versions, indent=2, sort_keys=True))
    return 0


def _env_show(args: argparse.Namespace) -> int:
    from pilot.agents import worker_env

    try:
        versions = worker_env.recorded_versions(args.dir)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"pilot worker-env show: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(versions, indent=2, sort_keys=True))
    return 0


def _sandbox_users(args: argparse.Namespace) -> int:
    from pilot import protocol
    from pilot.agents import worker_user

    users = worker_user.SandboxUsers.from_study(protocol.study())
    if args.create and worker_user.is_root():
        try:
            made = worker_user.create_users(users)
        except (OSError, RuntimeError) as exc:
            print(f"pilot sandbox users: {exc}", file=sys.stderr)
            return 1
        if made:
            print(f"created {', '.join(made)}")
    elif args.create:
        print("pilot sandbox users: not root: an unprivileged harness runs the sandbox as itself, nothing to create")
        return 0
    missing = worker_user.missing_users(users)
    for slot in range(users.slots):
        name = users.name(slot)
        print(f"{name}\tuid {users.uid(slot)}\t{'missing' if any(m.split()[0] == name for m in missing) else 'present'}")
    if missing and worker_user.is_root():
        print(f"pilot sandbox users: missing {', '.join(missing)}: run `pilot sandbox users --create`", file=sys.stderr)
        return 1
    return 0
