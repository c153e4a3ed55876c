"""``pilot judge``: show the blind prompt of a finished attempt, or have it judged."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pilot.backends import JUDGE_BACKENDS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("judge", help="show the blind judge prompt of a run's outputs, or judge them")
    p.add_argument("scenario", help="scenario id, e.g. ACC-01")
    p.add_argument("outputs", type=Path, help="the run's outputs/ folder")
    p.add_argument("--backend", choices=JUDGE_BACKENDS, default="simulated", help="judge backend (default: simulated)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated judges")
    p.add_argument("--prompt", action="store_true", help="print the prompt only; call no judge")
    p.set_defaults(func=_cmd_judge)


def _cmd_judge(args: argparse.Namespace) -> int:
    from pilot.oracles import guard

    # The guarded reader's parse child starts now and imports its libraries while this process imports its own.
    guard.prestart()
    from pilot.judges.panel import judge_run
    from pilot.judges.prompt import prompt_for_run
    from pilot.scenarios import load_scenario

    if not args.outputs.is_dir():
        print(f"pilot judge: {args.outputs}: not a folder", file=sys.stderr)
        return 2
    scenario = load_scenario(args.scenario)
    if args.prompt:
        sys.stdout.write(prompt_for_run(scenario, args.outputs).text)
        return 0
    results = judge_run(scenario, args.outputs, backend=args.backend, seed=args.seed)
    print(json.dumps([r.to_dict() for r in results], indent=2))
    return 0
