"""``pilot run-one``: one attempt of one run, its run record printed as JSON."""

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
    p.add_argument(
        "--backend",
        choices=backends.AGENT_BACKENDS,
        default="simulated",
        help="simulated (embedded default, SIMULATED outputs), claude-code (the pinned CLI) or rehearsal "
        "(the pinned CLI against the scripted model server, REHEARSAL outputs; its record in OUT.scripted/)",
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="run folder: workspace, transcript, evaluation and run record go here (reset first)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw of the attempt")
    p.add_argument("--model", default=None, help="worker model (default: study.yml worker.model)")
    p.add_argument(
        "--claude-bin",
        type=Path,
        default=None,
        help="the CLI to run (default: claude_agent_sdk's bundled CLI, else claude on PATH)",
    )
    p.add_argument(
        "--worker-env",
        type=Path,
        default=None,
        help=f"the worker Python environment (default: {paths.WORKER_ENV_DIR.relative_to(paths.ROOT)})",
    )
    p.add_argument(
        "--allow-unisolated",
        action="store_true",
        help="development only: run the claude-code backend without its sandbox "
        "(recorded as enforcement 'unisolated'; the analysis refuses such runs)",
    )
    p.set_defaults(func=_run_one)


def _run_one(args: argparse.Namespace) -> int:
    from pilot.pipeline import model_upstream
    from pilot.protocol import ProtocolError
    from pilot.runner import RunnerError, run_attempt

    try:
        with model_upstream(args.backend, args.out.resolve(), args.seed) as upstream:
            rec = run_attempt(
                args.scenario,
                args.arm,
                backend=args.backend,
                out_dir=args.out,
                seed=args.seed,
                model=args.model,
                claude_bin=args.claude_bin,
                worker_env=args.worker_env,
                isolation="unisolated" if args.allow_unisolated else None,
                environ=upstream,
            )
    except (RunnerError, ProtocolError, KeyError, FileNotFoundError) as exc:
        print(f"pilot run-one: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rec.to_dict(), indent=2, default=str))
    return 0 if rec.status != "infra_error" else 3
