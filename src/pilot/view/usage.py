"""Token counts and cost per request, from the model proxy's usage record of an attempt.

The metering proxy (:mod:`pilot.agents.model_proxy`) appends one JSON line
per request it answered to ``<attempt>/record/proxy/<run folder>/proxy_usage.jsonl``,
on the harness side (the worker never reaches the run folder). The viewer
and the Inspect export read it here, tolerantly and by field name: a row is
a model request when it carries token counts, whatever other fields a later
proxy adds; a torn last line (the harness stopped mid-write) is left out and
counted. A run without a record (a stand-in CLI that is its own model) has no
token counts: they are missing, never zero. The simulated agent writes a
stand-in of the record (:mod:`pilot.simulated.tokens`) whose every row is
marked ``"simulated": true``: its requests, and any sum of them, say so
(``simulated``), so that wherever they are shown they read SIMULATED.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from pilot.protocol.prices import Usage
from pilot.workspace import harness_record_dir

#: The proxy's file names (``pilot.agents.model_proxy.USAGE_FILE_NAME``, ``EXCHANGES_FILE_NAME``), kept here so that
#: reading a finished study does not import the proxy's server code.
USAGE_FILE = "proxy_usage.jsonl"
EXCHANGES_FILE = "proxy_exchanges.jsonl"
#: Read at most this much of one record (a run of 150 turns writes well under a megabyte).
MAX_RECORD_BYTES = 32 * 1024 * 1024
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
#: What a dry run's token counts are, wherever they are shown.
SIMULATED_TOKENS = (
    "SIMULATED: drawn by the simulated agent's token model (analysis/config/simulated_agent.yml) so that their price "
    "at protocol/prices.yml is each session's drawn cost; no model was called, nothing was metered"
)
#: What a real run's token counts are, and the words for a run without any.
METERED_TOKENS = "the model proxy's record (metered)"
NO_TOKENS = "not recorded (no model proxy record)"


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        d = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return d if d.is_finite() else None


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time as the proxy and the store write it (``Z`` or an offset), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Request:
    """One model request the proxy answered: its sequence number, time, model, tokens and cost."""

    seq: int
    at: datetime | None
    model: str
    status: int | None
    message_id: str | None
    duration_s: float | None
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    cost_usd: Decimal | None
    complete: bool
    note: str | None
    #: Drawn by the simulated agent's token model (a stand-in row), not metered by a proxy.
    simulated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_write_tokens + self.cache_read_tokens


@dataclass
class Tokens:
    """Tokens and cost summed over requests."""

    requests: int = 0
    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0
    cost_usd: Decimal = Decimal(0)
    #: Some of the requests summed are SIMULATED (drawn by the simulated agent, not metered).
    simulated: bool = False

    def add(self, r: Request) -> None:
        self.simulated = self.simulated or r.simulated
        self.requests += 1
        self.input += r.input_tokens
        self.output += r.output_tokens
        self.cache_write += r.cache_write_tokens
        self.cache_read += r.cache_read_tokens
        self.cost_usd += r.cost_usd or Decimal(0)

    def merge(self, other: Tokens) -> None:
        for name in ("requests", "input", "output", "cache_write", "cache_read", "cost_usd"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.simulated = self.simulated or other.simulated

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_write + self.cache_read


@dataclass
class UsageRecord:
    """What the proxy recorded for one attempt: its model requests in the metering order."""

    requests: list[Request] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    torn_lines: int = 0
    unreadable_lines: int = 0
    capped_reason: str | None = None

    @property
    def found(self) -> bool:
        return bool(self.files)

    @property
    def simulated(self) -> bool:
        """Whether the record holds SIMULATED rows (the simulated agent's stand-in of the proxy's record)."""
        return any(r.simulated for r in self.requests)

    def tokens(self) -> Tokens:
        t = Tokens()
        for r in self.requests:
            t.add(r)
        return t

    def by_model(self) -> dict[str, Tokens]:
        out: dict[str, Tokens] = {}
        for r in self.requests:
            out.setdefault(r.model, Tokens()).add(r)
        return out


def source_of(tokens: Tokens | UsageRecord | None) -> str:
    """Where token counts come from, in words: the proxy's record, the simulated agent's stand-in, or none."""
    if tokens is None or (isinstance(tokens, UsageRecord) and not tokens.found):
        return NO_TOKENS
    return SIMULATED_TOKENS if tokens.simulated else METERED_TOKENS


def _request(row: dict[str, Any]) -> Request | None:
    """A model request from a usage row, or None for any other row (opened, refused, closed, count_tokens)."""
    if not any(k in row for k in TOKEN_FIELDS):
        return None
    duration = row.get("duration_ms")
    counts = Usage.from_api(row)  # the proxy writes the API's own field names
    return Request(
        seq=_count(row.get("seq")),
        at=parse_time(row.get("at")),
        model=str(row.get("model") or ""),
        status=row.get("status") if isinstance(row.get("status"), int) else None,
        message_id=str(row["message_id"]) if isinstance(row.get("message_id"), str) else None,
        duration_s=float(duration) / 1000
        if isinstance(duration, (int, float)) and not isinstance(duration, bool)
        else None,
        input_tokens=counts.input_tokens,
        output_tokens=counts.output_tokens,
        cache_write_tokens=counts.cache_creation_input_tokens,
        cache_read_tokens=counts.cache_read_input_tokens,
        cost_usd=_decimal(row.get("cost_usd")),
        complete=row.get("usage_complete") is not False,
        note=str(row["note"]) if row.get("note") else None,
        simulated=row.get("simulated") is True,
    )


def record_files(attempt_folder: Path, name: str = USAGE_FILE) -> list[Path]:
    """The proxy's ``name`` files of one attempt (regular files only, never a link), in a stable order."""
    root = harness_record_dir(Path(attempt_folder)) / "proxy"
    if not root.is_dir() or root.is_symlink():
        return []
    found = []
    with os.scandir(root) as entries:
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                continue
            p = Path(e.path) / name
            if p.is_file() and not p.is_symlink():
                found.append(p)
    return sorted(found)


def read_rows(path: Path) -> tuple[list[dict[str, Any]], int, int]:
    """The JSON object rows of a JSON-lines record: (rows, torn last lines, other unreadable lines)."""
    with open(path, "rb") as fh:
        raw = fh.read(MAX_RECORD_BYTES)
    lines = raw.split(b"\n")
    rows: list[dict[str, Any]] = []
    torn = bad = 0
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if n == len(lines):  # no newline after it: a write cut short
                torn += 1
            else:
                bad += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad += 1
    return rows, torn, bad


_CACHE: dict[tuple[str, int, int], UsageRecord] = {}


def read_usage(attempt_folder: Path) -> UsageRecord:
    """The model requests the proxy recorded for one attempt (empty, ``found`` False, when it kept no record)."""
    out = UsageRecord()
    for path in record_files(attempt_folder):
        try:
            st = path.stat()
        except OSError:
            continue
        key = (str(path), st.st_mtime_ns, st.st_size)
        part = _CACHE.get(key)
        if part is None:
            part = UsageRecord(files=[path])
            try:
                rows, part.torn_lines, part.unreadable_lines = read_rows(path)
            except OSError:
                rows = []
            for row in rows:
                req = _request(row)
                if req is not None:
                    part.requests.append(req)
                elif row.get("kind") == "closed" and row.get("capped"):
                    part.capped_reason = str(row.get("capped_reason") or "the run's cost cap")
            if len(_CACHE) > 4096:
                _CACHE.clear()
            _CACHE[key] = part
        out.files += part.files
        out.requests += part.requests
        out.torn_lines += part.torn_lines
        out.unreadable_lines += part.unreadable_lines
        out.capped_reason = out.capped_reason or part.capped_reason
    out.requests.sort(key=lambda r: r.seq)
    return out


def read_exchanges(attempt_folder: Path) -> dict[int, dict[str, Any]]:
    """The proxy's exchange rows of one attempt (what the model answered), by the usage row's sequence number."""
    out: dict[int, dict[str, Any]] = {}
    for path in record_files(attempt_folder, EXCHANGES_FILE):
        try:
            rows, _, _ = read_rows(path)
        except OSError:
            continue
        for row in rows:
            if isinstance(row.get("seq"), int):
                out[row["seq"]] = row
    return out
