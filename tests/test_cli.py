"""The ``pilot`` command: its table of commands, and what starting it loads.

A study command or ``pilot --help`` runs in a fresh interpreter, as an
operator's shell or the scheduler's tests start it, and must not load the
statistics, office or web stacks it does not use.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from pilot.cli import main as cli

HEAVY = (
    "pandas",
    "numpy",
    "scipy",
    "statsmodels",
    "lifelines",
    "matplotlib",
    "flask",
    "openpyxl",
    "docx",
    "pypdf",
    "reportlab",
    "jsonschema",
    "dask",
    "distributed",
    "papermill",
    "nbformat",
    "jupytext",
)

PROBE = """
import json, sys
from pilot.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def _start(*argv: str) -> tuple[str, list[str]]:
    """Help text printed and the heavy packages loaded by ``pilot *argv`` in a fresh interpreter."""
    res = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    *text, loaded = res.stdout.rstrip("\n").split("\n")
    return "\n".join(text), json.loads(loaded)


def test_every_module_registers_exactly_the_commands_the_table_gives_it():
    for module in cli.COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert set(sub.choices) == {c for c, m in cli.COMMANDS.items() if m == module}, module


@pytest.mark.parametrize(
    "argv", [["study", "status", "s", "--json"], ["check", "ACC-01", "ws"], ["worker-env", "show"]]
)
def test_a_command_parses_alike_with_its_module_alone_and_with_every_module(argv):
    assert vars(cli.build_parser(argv[0]).parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


def test_help_lists_every_command_and_loads_no_heavy_stack():
    text, loaded = _start("--help")
    assert loaded == []
    for command in cli.COMMANDS:
        assert f"    {command}" in text, command


@pytest.mark.parametrize(
    "argv", [["study", "--help"], ["study", "run", "--help"], ["judge", "--help"], ["portal", "serve", "--help"]]
)
def test_a_command_s_help_loads_no_heavy_stack(argv):
    text, loaded = _start(*argv)
    assert loaded == [] and text.startswith(f"usage: pilot {argv[0]}")


def test_pilot_without_a_command_shows_the_whole_help():
    res = subprocess.run([sys.executable, "-m", "pilot"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and all(f"    {c}" in res.stdout for c in cli.COMMANDS)
