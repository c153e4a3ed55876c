"""The ``pilot`` command. Each sub-command lives beside the code it drives.

A module listed in ``COMMAND_MODULES`` provides ``register(subparsers)`` and
sets ``func`` on its parser; ``func(args)`` returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = [
    "pilot.protocol_cli",
    "pilot.stages",
    "pilot.portal.cli",
    "pilot.study_cli",
    "pilot.scenarios.cli",
    "pilot.oracles.cli",
    "pilot.runner_cli",
    "pilot.judges.cli",
    "pilot.view.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pilot", description="Run, evaluate and report the preregistered computer-access study.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
