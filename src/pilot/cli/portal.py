"""``pilot portal generate`` and ``pilot portal serve``: build a scenario's portal content, or look at it."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from pilot import paths
from pilot.portal.wire import port_argument


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("portal", help="generate or serve the enterprise portal of a scenario")
    ps = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    g = ps.add_parser("generate", help="write protocol/scenarios/<ID>/portal/ from the scenario's inputs")
    g.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO", help="scenario ids (default: every scenario with uses_portal: true)"
    )
    g.add_argument(
        "--check",
        action="store_true",
        help="write nothing; fail if a committed portal/ differs from the generator's output",
    )
    g.set_defaults(func=_generate)

    s = ps.add_parser("serve", help="serve a scenario's portal on loopback to look at it in a browser")
    s.add_argument("scenario", metavar="SCENARIO")
    where = s.add_mutually_exclusive_group()
    where.add_argument(
        "--port", type=port_argument, default=0, help="port on 127.0.0.1, 1-65535 (default: any free port)"
    )
    where.add_argument(
        "--unix-socket", type=Path, default=None, help="listen on this Unix socket (mode 0600) instead of a TCP port"
    )
    s.add_argument(
        "--content", type=Path, default=None, help="content folder (default: protocol/scenarios/<ID>/portal)"
    )
    s.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help=f"folder for the access and server logs (default: {paths.PORTAL_SERVE_DIR}/<ID>)",
    )
    s.set_defaults(func=_serve)


def _generate(args: argparse.Namespace) -> int:
    from pilot.portal.content import PortalContentError, check_portal, generate_portal, portal_scenarios

    try:
        ids = args.scenarios or portal_scenarios()
    except PortalContentError as exc:
        print(f"pilot portal generate: {exc}", file=sys.stderr)
        return 1
    if not ids:
        print(f"pilot portal generate: no scenario under {paths.SCENARIOS_DIR} has uses_portal: true", file=sys.stderr)
        return 1
    status = 0
    for sid in ids:
        scenario_dir = paths.SCENARIOS_DIR / sid
        if not scenario_dir.is_dir():
            print(f"pilot portal generate: {scenario_dir}: no such scenario", file=sys.stderr)
            status = 1
            continue
        try:
            if args.check:
                problems = check_portal(scenario_dir)
                for line in problems:
                    print(line, file=sys.stderr)
                print(f"{sid}: {'stale' if problems else 'current'}")
                status = status or int(bool(problems))
            else:
                print(generate_portal(scenario_dir))
        except PortalContentError as exc:
            print(f"pilot portal generate: {exc}", file=sys.stderr)
            status = 1
    return status


def _serve(args: argparse.Namespace) -> int:
    from pilot.portal.instance import PortalStartError, start_instance

    log_dir = args.log_dir or paths.PORTAL_SERVE_DIR / args.scenario
    try:
        instance = start_instance(
            args.scenario, log_dir, content_dir=args.content, port=args.port, unix_socket=args.unix_socket
        )
    except PortalStartError as exc:
        print(f"pilot portal serve: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with instance:
        # Printed for the person at this terminal; no file receives the password.
        where = f"Unix socket {instance.unix_socket}" if instance.unix_socket else f"{instance.url}/"
        print(f"portal of {args.scenario}: {where}")
        print(f"  username: {instance.credentials.username}")
        print(f"  password: {instance.credentials.password}")
        print(f"  access log: {instance.access_log_path}")
        print("Ctrl-C stops it.", flush=True)
        try:
            while not stop.wait(0.5) and instance.running:
                pass
        except KeyboardInterrupt:
            pass
        code = 0 if instance.running else 1
    if code:
        print(
            f"pilot portal serve: the server process ended on its own; see {instance.server_log_path}", file=sys.stderr
        )
    return code
