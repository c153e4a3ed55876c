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
    from pilot.protocol.design import AMENDMENT_STAGES

    a = ps.add_parser(
        "amend",
        help="append an amendment to protocol/amendments.csv (with --scenario and --set: a scenario joins a set)",
        description="Append the next amendment (id A-NNN) to protocol/amendments.csv, written as the file writes its "
        "rows. With --scenario ID --set NAME it is titled 'Extension scenario ID' and ID joins scenario_sets.NAME of "
        "protocol/study.yml (a new set holds the design's set and ID). Both files are validated before either is "
        "written. Stages, in the order they happen (never going back): " + "; ".join(AMENDMENT_STAGES) + ".",
    )
    a.add_argument("--title", help="the amendment's title (implied by --scenario)")
    a.add_argument("--content", required=True, help="what is amended and why, on one line (made before any run of ...)")
    a.add_argument("--stage", choices=AMENDMENT_STAGES, help="when it is made (default: the last amendment's stage)")
    a.add_argument("--date", help="YYYY-MM-DD (default: today); never before the last amendment's date")
    a.add_argument("--scenario", metavar="ID", help="the bundle that joins a scenario set")
    a.add_argument("--set", dest="scenario_set", metavar="NAME", help="the scenario set it joins (created if new)")
    a.set_defaults(func=_amend)


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


def _amend(args: argparse.Namespace) -> int:
    from pilot.protocol.amend import amend

    try:
        made = amend(
            args.title,
            args.content,
            stage=args.stage,
            date=args.date,
            scenario=args.scenario,
            scenario_set=args.scenario_set,
        )
    except ProtocolError as exc:
        print(f"pilot protocol amend: {exc}", file=sys.stderr)
        return 1
    print(f"{paths.shown(paths.AMENDMENTS_FILE)}: {made.id} {made.date} {made.stage}: {made.title}")
    if args.scenario:
        from pilot.protocol.design import load_study

        n = len(load_study().scenario_set(args.scenario_set))
        print(f"{paths.shown(paths.STUDY_FILE)}: scenario_sets.{args.scenario_set} holds {n} scenarios")
    return 0
