"""``pilot stage NAME [-p KEY VALUE ...] [--output PATH]`` and ``pilot stage --list``: run a preregistered stage
notebook."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pilot import paths
from pilot.stages import StageError, StageFailed, build_notebook, declared_parameters, list_stages, run_stage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stage", help="execute a preregistered stage notebook with papermill")
    p.add_argument("name", nargs="?", help="stage name (omit with --list)")
    p.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("KEY", "VALUE"),
        help="set a declared parameter",
    )
    p.add_argument("--output", type=Path, help="where to write the executed notebook")
    p.add_argument("--list", action="store_true", help="list the stages and their parameters")
    p.set_defaults(func=_cmd_stage)


def _cmd_stage(args: argparse.Namespace) -> int:
    if args.list or not args.name:
        for stage in list_stages().values():
            built = build_notebook(stage.source, stage.built_notebook)
            params = declared_parameters(built)
            print(f"{stage.name:12s} {stage.source.relative_to(paths.ROOT)}")
            for k, info in params.items():
                print(f"    {k} = {info.get('default')}  # {info.get('help', '')}")
        return 0
    params = dict(args.parameter)
    try:
        out = run_stage(args.name, params, output=args.output, progress=sys.stderr.isatty())
    except StageError as exc:
        print(f"pilot stage: {exc}", file=sys.stderr)
        return 2
    except StageFailed as exc:
        # The kernel's traceback once, then one line naming the notebook and the cell.
        print("\n".join(exc.traceback), file=sys.stderr)
        print(f"pilot stage: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"stage": args.name, "notebook": str(out)}))
    return 0
