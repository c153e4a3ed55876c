"""``pilot check`` (the oracle on a finished workspace) and ``pilot selfcheck`` (the A4 tool)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pilot.protocol import ProtocolError


def register(subparsers: argparse._SubParsersAction) -> None:
    c = subparsers.add_parser("check", help="run a scenario's oracle on a finished workspace")
    c.add_argument("scenario", help="scenario ID, e.g. ACC-01")
    c.add_argument("workspace", type=Path, help="workspace folder holding inputs/ and outputs/")
    c.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    c.add_argument("--input-hashes", type=Path, help="JSON file of the input hashes taken at layout (default: the bundle's inputs)")
    c.set_defaults(func=_check)
    s = subparsers.add_parser("selfcheck", help="the A4 self-check: presence and well-formedness of the deliverables")
    s.add_argument("workspace", type=Path)
    s.add_argument("--scenario", help="scenario ID (default: the one embedded in WORKSPACE/selfcheck.py)")
    s.set_defaults(func=_selfcheck)


def _check(args: argparse.Namespace) -> int:
    from pilot.oracles.evaluate import evaluate
    from pilot.scenarios.bundle import load_scenario

    try:
        sc = load_scenario(args.scenario)
    except ProtocolError as exc:
        print(f"error: {exc}")
        return 2
    if not args.workspace.is_dir():
        print(f"error: {args.workspace}: no such workspace folder")
        return 2
    hashes = None
    if args.input_hashes:
        try:
            hashes = json.loads(args.input_hashes.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            print(f"error: {args.input_hashes}: cannot read the input hashes ({exc})")
            return 2
    ev = evaluate(sc, args.workspace, hashes)
    if args.json:
        print(json.dumps(ev.to_dict(), indent=2))
    else:
        print(f"{sc.id} ({sc.occupation}) - {args.workspace}")
        for c in ev.criteria:
            mark = "PASS" if c.passed else "FAIL"
            req = "required" if c.required else "optional"
            print(f"  {mark}  {c.id:<32} [{req}] {c.reason}")
        for d, subs in ev.substitutes.items():
            print(f"  text substitute for {d}: {', '.join(subs)}")
        for r in ev.E_reasons:
            print(f"  CRITICAL  {r}")
        print(f"D={int(ev.D)} E={int(ev.E)} criteria {ev.criteria_passed}/{ev.criteria_total} ({ev.seconds:.1f} s)")
    return 0 if ev.D else 1


def _selfcheck(args: argparse.Namespace) -> int:
    from pilot.oracles.selfcheck import run_selfcheck

    report = run_selfcheck(args.workspace, args.scenario)
    print(report.text)
    return 0 if report.passed else 1
