"""``pilot worker-env`` (the worker's Python environment) and ``pilot sandbox users`` (the unprivileged worker
users)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pilot import paths


def register(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("worker-env", help="build or show the worker's Python environment (shell arms)")
    ws = w.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = ws.add_parser("build", help="create it with venv and pip from worker_requirements.txt")
    b.add_argument("--dir", type=Path, default=paths.WORKER_ENV_DIR)
    b.set_defaults(func=_env_build)
    s = ws.add_parser("show", help="print its recorded versions")
    s.add_argument("--dir", type=Path, default=paths.WORKER_ENV_DIR)
    s.set_defaults(func=_env_show)

    sb = sub.add_parser(
        "sandbox",
        help="the sandbox's unprivileged users (a root harness runs every worker, and LibreOffice, as one of them)",
    )
    sbs = sb.add_subparsers(dest="action", metavar="ACTION", required=True)
    u = sbs.add_parser(
        "users", help="list the worker and renderer users of study.yml sandbox; --create makes the missing ones (root)"
    )
    u.add_argument(
        "--create", action="store_true", help="create the missing users as system users without a home or a shell"
    )
    u.set_defaults(func=_sandbox_users)


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
    from pilot import confined, protocol
    from pilot.agents import worker_user

    study = protocol.study()
    users = worker_user.SandboxUsers.from_study(study)
    renderer, renderer_uid = confined.renderer_account(study)
    if args.create and worker_user.is_root():
        try:
            made = worker_user.create_users(users)
            if confined.create_system_user(renderer, renderer_uid):
                made.append(renderer)
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
        print(
            f"{name}\tuid {users.uid(slot)}\t{'missing' if any(m.split()[0] == name for m in missing) else 'present'}"
        )
    # The renderer runs LibreOffice on what workers delivered; it is no worker's identity.
    bad_renderer = confined.missing_renderer(study)
    print(f"{renderer}\tuid {renderer_uid}\t{'missing' if bad_renderer else 'present'} (renderer)")
    if bad_renderer:
        missing.append(bad_renderer)
    if missing and worker_user.is_root():
        print(f"pilot sandbox users: missing {', '.join(missing)}: run `pilot sandbox users --create`", file=sys.stderr)
        return 1
    return 0
