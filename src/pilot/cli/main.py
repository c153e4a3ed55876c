"""The ``pilot`` command. Each sub-command lives beside the code it drives.

A module listed in ``COMMAND_MODULES`` provides ``register(subparsers)`` and
sets ``func`` on its parser; ``func(args)`` returns the exit status.
``COMMANDS`` names the top-level commands each module registers, so that
``pilot study ...`` imports the study's module alone: a command module may
pull in the statistics or office stack, and the scheduler, its tests and an
operator's shell should not wait for what they do not use. ``pilot --help``
(or a command that is not listed) registers every module.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, str] = {
    "protocol": "pilot.cli.protocol",
    "stage": "pilot.cli.stage",
    "portal": "pilot.cli.portal",
    "study": "pilot.cli.study",
    "scenarios": "pilot.cli.scenarios",
    "check": "pilot.cli.check",
    "selfcheck": "pilot.cli.check",
    "run-one": "pilot.cli.run_one",
    "worker-env": "pilot.cli.worker",
    "sandbox": "pilot.cli.worker",
    "judge": "pilot.cli.judge",
    "view": "pilot.cli.view",
    "grading": "pilot.cli.grading",
    "human": "pilot.cli.human",
}
COMMAND_MODULES = list(dict.fromkeys(COMMANDS.values()))


def _command_of(argv: list[str]) -> str | None:
    """The sub-command ``argv`` starts with, or None (``pilot`` itself takes no option but ``--help``)."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with ``command``'s module alone when it is a listed command."""
    parser = argparse.ArgumentParser(
        prog="pilot", description="Run, evaluate and report the preregistered computer-access study."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else COMMAND_MODULES
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        build_parser().print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
