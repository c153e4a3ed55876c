"""``pilot protocol validate`` and ``pilot protocol tables``: check the protocol and write its manuscript tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pilot import paths
from pilot.protocol import ProtocolError, load_all


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("protocol", help="validate the protocol or write its manuscript tables")
    ps = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    v = ps.add_parser("validate", help="validate every file under protocol/")
    v.set_defaults(func=_validate)
    t = ps.add_parser("tables", help="write the design tables and macros for the manuscript")
    t.add_argument("--out", type=Path, default=paths.GENERATED_DIR, help="folder for generated LaTeX")
    t.add_argument(
        "--scenario-set",
        default=None,
        metavar="NAME",
        help="the study's scenario set in protocol/study.yml (default: the design's own)",
    )
    t.set_defaults(func=_tables)


def _validate(args: argparse.Namespace) -> int:
    try:
        loaded = load_all()
    except ProtocolError as exc:
        print(f"pilot protocol validate: {exc}", file=sys.stderr)
        return 1
    print(
        f"protocol valid: {len(loaded['arms'])} arms, {len(loaded['scenarios'])} scenario bundles, "
        f"{len(loaded['amendments'])} amendments"
    )
    return 0


def _tables(args: argparse.Namespace) -> int:
    from pilot.report.design_tables import write_design_outputs

    # The tables rest on a valid protocol: check it first, so a bad file is
    # reported by name, field and reason instead of failing halfway.
    try:
        load_all()
        written = write_design_outputs(args.out, args.scenario_set)
    except ProtocolError as exc:
        print(f"pilot protocol tables: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
