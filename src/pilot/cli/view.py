"""``pilot view STUDY [--port P] [--export DIR]``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pilot import paths
from pilot.cli.signals import stop_on_signals


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "view", help="browse every run of a study in a browser (127.0.0.1), or export it as a static site"
    )
    p.add_argument("study", help="study name (folder under analysis/data/) or the path of a study folder")
    p.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free port; default 8765)")
    p.add_argument(
        "--export", type=Path, metavar="DIR", help="write the pages as a static site to DIR instead of serving"
    )
    p.set_defaults(func=_cmd_view)


def _folder(study: str) -> Path:
    given = Path(study)
    if given.is_dir() and (given / "study.sqlite").is_file():
        return given
    return paths.study_dir(study)


def _cmd_view(args: argparse.Namespace) -> int:
    from pilot.view.study import ViewError

    folder = _folder(args.study)
    try:
        if args.export is not None:
            from pilot.view.export import export_site

            t0 = time.perf_counter()
            res = export_site(folder, args.export)
            print(
                json.dumps(
                    {
                        "export": str(res.folder / "index.html"),
                        "pages": res.pages,
                        "files": res.files,
                        "seconds": round(time.perf_counter() - t0, 2),
                    }
                )
            )
            return 0
        from pilot.view.app import ViewServer
        from pilot.view.links import forget_address, record_address

        server = ViewServer(folder, port=args.port)
    except ViewError as exc:
        print(f"pilot view: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"pilot view: cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc} (choose another --port, or 0)",
            file=sys.stderr,
        )
        return 2
    name = server.app.config.get("STUDY_NAME") or folder.name
    record_address(name, server.url)
    # Handlers first, and the address printed inside the try: a caller may press Ctrl-C as soon as it sees it.
    stop_on_signals()
    try:
        print(f"pilot view: study {name} at {server.url}/ (read-only; Ctrl-C stops)", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        forget_address(name)
    return 0
