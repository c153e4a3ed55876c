"""The portal's access log: one JSON object a line, kept with the run's transcript.

A line records what was asked and what was answered, never what was sent:
the path without its query string (a password put in a URL stays out), no
headers, no bodies; the signed-in user appears as the credential's
fingerprint. ``summarise_access_log`` counts portal use for the analysis.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections import Counter
from pathlib import Path

ACCESS_LOG_NAME = "portal_access.jsonl"
SERVER_LOG_NAME = "portal_server.log"

# Each request is filed under one action.
ACTIONS = (
    "health",
    "sign_in_page",
    "sign_in",
    "sign_in_failed",
    "sign_in_limited",
    "sign_out",
    "bad_request",
    "page",
    "api",
    "download",
    "refused",
    "not_found",
)


class AccessLog:
    """Append-only, thread-safe writer; each line is flushed as it is written."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def write(
        self,
        *,
        method: str,
        path: str,
        status: int,
        action: str,
        size: int | None,
        duration_ms: float,
        remote: str | None,
        user: str | None,
    ) -> None:
        entry = {
            "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            "method": method,
            "path": path,
            "status": status,
            "action": action,
            "bytes": size,
            "duration_ms": round(duration_ms, 2),
            "remote": remote,
            "user": user,
        }
        line = json.dumps(entry, sort_keys=True)
        with self._lock:
            self._fh.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_access_log(path: Path) -> list[dict]:
    """The entries of an access log (an absent log reads as no access)."""
    path = Path(path)
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    entries = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                break  # a line cut short by a server killed while writing it
            raise ValueError(f"{path}: line {lineno}: not JSON: {exc}") from exc
    return entries


def summarise_access_log(path: Path) -> dict[str, int]:
    """Counts per action plus ``requests`` (all but health checks) for one run's log."""
    counts = Counter(e.get("action", "unknown") for e in read_access_log(path))
    summary = {action: counts.get(action, 0) for action in ACTIONS}
    summary["requests"] = sum(n for action, n in counts.items() if action != "health")
    return summary
