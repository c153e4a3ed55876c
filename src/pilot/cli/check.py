"""``pilot check`` (the oracle on a finished workspace) and ``pilot selfcheck`` (the A4 tool)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pilot.protocol import ProtocolError

#: ``pilot check`` exit statuses: what happened is never confused with how the deliverable fared.
EXIT_ACCEPTED = 0
EXIT_FAILED = 1  # a required criterion failed
EXIT_CRITICAL = 3  # a critical violation (inputs/ changed)
EXIT_EVALUATION_ERROR = 4  # the evaluation itself could not run (2 stays argparse's usage error)
EXIT_BY_OUTCOME = {
    "accepted": EXIT_ACCEPTED,
    "failed": EXIT_FAILED,
    "critical_violation": EXIT_CRITICAL,
    "evaluation_error": EXIT_EVALUATION_ERROR,
}

CHECK_EPILOG = """exit status: 0 accepted (D=1); 1 a required criterion failed; 3 critical violation
(inputs/ changed, E=1); 4 the evaluation itself could not run (unknown scenario, missing
workspace, unreadable input hashes, LibreOffice unavailable); 2 usage error.
With --json the verdict is always printed as JSON, errors included."""


def register(subparsers: argparse._SubParsersAction) -> None:
    c = subparsers.add_parser(
        "check",
        help="run a scenario's oracle on a finished workspace",
        epilog=CHECK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("scenario", help="scenario ID, e.g. ACC-01")
    c.add_argument("workspace", type=Path, help="workspace folder holding inputs/ and outputs/")
    c.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    c.add_argument(
        "--input-hashes", type=Path, help="JSON file of the input hashes taken at layout (default: the bundle's inputs)"
    )
    c.set_defaults(func=_check)
    s = subparsers.add_parser("selfcheck", help="the A4 self-check: presence and well-formedness of the deliverables")
    s.add_argument("workspace", type=Path)
    s.add_argument("--scenario", help="scenario ID (default: the one embedded in WORKSPACE/selfcheck.py)")
    s.set_defaults(func=_selfcheck)


def _evaluation_error(args: argparse.Namespace, message: str) -> int:
    if args.json:
        print(
            json.dumps(
                {
                    "scenario": args.scenario,
                    "workspace": str(args.workspace),
                    "outcome": "evaluation_error",
                    "D": None,
                    "E": None,
                    "errors": [message],
                },
                indent=2,
            )
        )
    else:
        print(f"error: {message}")
    return EXIT_EVALUATION_ERROR


def _check(args: argparse.Namespace) -> int:
    from pilot.oracles import guard

    # The parse child imports its libraries while this process loads the scenario and the evaluator.
    guard.prestart()
    from pilot.oracle_formats.evaluate import evaluate
    from pilot.protocol.scenario import load_scenario

    try:
        sc = load_scenario(args.scenario)
    except ProtocolError as exc:
        return _evaluation_error(args, str(exc))
    if not args.workspace.is_dir():
        return _evaluation_error(args, f"{args.workspace}: no such workspace folder")
    hashes = None
    if args.input_hashes:
        try:
            hashes = json.loads(args.input_hashes.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return _evaluation_error(args, f"{args.input_hashes}: cannot read the input hashes ({exc})")
        if not isinstance(hashes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()
        ):
            return _evaluation_error(
                args, f"{args.input_hashes}: the input hashes must be a JSON object of path -> hash strings"
            )
    try:
        ev = evaluate(sc, args.workspace, hashes)
    except Exception as exc:  # noqa: BLE001 - the evaluator's own failure is an evaluation error, not a verdict
        return _evaluation_error(args, f"the evaluation failed ({type(exc).__name__}: {exc})")
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
        for r in ev.errors:
            print(f"  EVALUATION ERROR  {r}")
        for d, notes in ev.notes.items():
            for note in notes:
                print(f"  NOTE  {d}: {note}")
        print(
            f"D={int(ev.D)} E={int(ev.E)} criteria {ev.criteria_passed}/{ev.criteria_total} "
            f"({ev.seconds:.1f} s) - {ev.outcome.replace('_', ' ')}"
        )
    return EXIT_BY_OUTCOME[ev.outcome]


def _selfcheck(args: argparse.Namespace) -> int:
    from pilot.oracle_formats.selfcheck import run_selfcheck

    report = run_selfcheck(args.workspace, args.scenario)
    print(report.text)
    return 0 if report.passed else 1
