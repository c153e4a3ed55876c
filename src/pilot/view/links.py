"""Links from the stage notebooks to a running viewer.

``pilot view STUDY`` records its address in ``build/view/<study>.json``
(outside the study folder) while it serves; ``PILOT_VIEW_URL`` overrides it.
When a viewer for the study is known, :func:`run_link` gives a run's page
and :func:`link_run_ids` turns the run ids of a table into links; otherwise
both leave the table as it was, so a batch run without a viewer prints the
same tables as before.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pilot import paths
from pilot.store import pid_alive

URL_ENV = "PILOT_VIEW_URL"


def address_file(study: str) -> Path:
    return paths.VIEW_DIR / f"{study}.json"


def viewer_url(study: str) -> str | None:
    """The address of a running viewer of ``study``, if one is known."""
    env = os.environ.get(URL_ENV)
    if env:
        return env.rstrip("/")
    try:
        data = json.loads(address_file(study).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("study") != study or not pid_alive(int(data.get("pid", 0) or 0)):
        return None
    url = str(data.get("url") or "")
    return url.rstrip("/") if url.startswith("http://127.0.0.1:") else None


def run_link(run_id: str, study: str) -> str | None:
    """The viewer's page of one run, or None when no viewer of the study is running."""
    base = viewer_url(study)
    return None if base is None else f"{base}/runs/{quote(str(run_id), safe='')}"


def link_run_ids(table: Any, study: str, column: str = "run_id") -> Any:
    """``table`` with its run ids as links to the viewer (a pandas Styler), or ``table`` itself without a viewer."""
    base = viewer_url(study)
    if base is None or column not in getattr(table, "columns", ()):
        return table

    def anchor(run_id: Any) -> str:
        rid = str(run_id)
        return f'<a href="{html.escape(base)}/runs/{quote(rid, safe="")}" target="_blank">{html.escape(rid)}</a>'

    return table.style.format(anchor, subset=[column])


def record_address(study: str, url: str) -> Path:
    """Note the running viewer's address for the notebooks (removed by :func:`forget_address`)."""
    path = address_file(study)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"study": study, "url": url, "pid": os.getpid()}) + "\n", encoding="utf-8")
    return path


def forget_address(study: str) -> None:
    path = address_file(study)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
