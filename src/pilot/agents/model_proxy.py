"""The harness-side metering proxy between a run's agent and the Messages API.

The agent never holds the real API key. Each run gets its own listener (a Unix
socket file the sandbox binds in, and a loopback TCP address for hosts
without the bridge) and a random per-run token that is worthless anywhere
else. The proxy checks the token, swaps it for the real key, forwards the
request upstream and relays the answer, server-sent events chunk by chunk as
they arrive. Every answer's usage (input, output, cache-write and cache-read
tokens) is priced from the pinned table in ``protocol/prices.yml`` in
:class:`decimal.Decimal` and appended to ``<record_dir>/<run_id>/proxy_usage.jsonl``
on the harness side.

Before a request is forwarded its worst case is reserved against the run's
dollar cap: an upper bound on its input tokens priced at the dearest input
rate, plus its ``max_tokens`` at the output rate. A request whose worst case
would take the metered spend (plus what other requests of the run have in
flight) over the cap is refused and the run is marked capped; so the metered
spend of a run never exceeds its cap (see ``protocol/interpretations.md``,
"Metered cost and the dollar cap").

The input bound is computed in two steps. First from the request body alone:
a token covers at least one byte of the text it encodes and the body carries
every text the model reads (JSON escapes only add bytes), so the body's size
plus a fixed allowance for the API's own framing and a per-image allowance
bounds the input of any request without documents. Only when that bound would
cross the cap (or the request holds a document, whose rendered pages the body
size does not bound) does the proxy ask the upstream ``count_tokens`` endpoint
for the request's input and add a safety margin; if that call fails the
request is refused rather than guessed.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import math
import re
import secrets
import shutil
import socket
import socketserver
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote, unquote, urlsplit

from pilot import paths
from pilot.protocol import ProtocolError, read_yaml

log = logging.getLogger(__name__)

PRICES_FILE = paths.PROTOCOL_DIR / "prices.yml"
USAGE_FILE_NAME = "proxy_usage.jsonl"

MILLION = Decimal(1_000_000)
#: Per-million prices of one model; all required, all non-negative decimals.
PRICE_FIELDS = ("input", "output", "cache_write", "cache_write_1h", "cache_read")

#: Tokens allowed on top of the body size for the API's own framing of a request
#: (role markers, the tool-use preamble, tool-definition wrappers).
FRAMING_ALLOWANCE_TOKENS = 4096
#: Tokens allowed per image block on top of its bytes (an image costs about
#: width x height / 750 tokens after the API scales it down; 5,000 covers the
#: largest scaled image with room).
IMAGE_ALLOWANCE_TOKENS = 5000
#: count_tokens is an estimate of the input ("may differ by a small amount"):
#: its answer is raised by this factor plus the framing allowance.
COUNT_MARGIN = Decimal("1.05")
COUNT_TIMEOUT_S = 30.0
#: The Messages API refuses bodies over 32 MB; the proxy refuses beyond this.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: An upstream connection idle longer than this is not reused (servers close idle ones after a few seconds).
KEEP_ALIVE_IDLE_S = 4.0
#: Unix socket paths longer than this do not fit ``sockaddr_un``.
MAX_SOCKET_PATH = 100

#: The status and error type of a cap refusal. Every refusal also carries
#: ``x-should-retry: false``. On the pinned CLI (2.1.332) a 402 ends the session
#: after one request (``api_error_status: 402``); 400 is re-sent a few times,
#: 413 is reported as an oversized conversation, and 401, 429 and 529 without
#: that header are retried with back-off for minutes.
CAP_STATUS = 402
CAP_ERROR_TYPE = "billing_error"
CAP_MESSAGE_PREFIX = "run cost cap reached"

#: The header naming the run of a request, sent upstream only by a proxy made with ``label_upstream``.
RUN_ID_HEADER = "x-pilot-run-id"


def run_id_header_value(run_id: str) -> str:
    """The run id as a header value: percent-encoded UTF-8 (a run id may be any folder path)."""
    return quote(run_id, safe="/._-:+@=,")


def run_id_from_header(value: str | None) -> str | None:
    """The run id a labelled request carries, or None."""
    return unquote(value) if value else None


_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
     "transfer-encoding", "upgrade", "host", "content-length", "x-api-key", "authorization", "accept-encoding"}
)
#: The fields a messages request may carry: those the pinned CLI sends and plain sampling controls.
#: Refused, by not being here: ``mcp_servers`` and ``container`` (the API reaching out on the agent's
#: behalf), ``service_tier`` and ``speed`` (billed at other rates than the table's).
MESSAGE_KEYS = frozenset(
    {"model", "messages", "system", "max_tokens", "stream", "metadata", "tools", "tool_choice", "thinking", "temperature",
     "top_p", "top_k", "stop_sequences", "context_management", "output_config", "output_format"}
)
#: Keys of a messages body that count_tokens accepts (the rest would be refused).
_COUNT_KEYS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "context_management", "output_config", "output_format")


# --------------------------------------------------------------------------
# Prices
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Token counts of one answer as the API reports them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    #: The part of ``cache_creation_input_tokens`` written with a one-hour lifetime.
    cache_creation_1h_input_tokens: int = 0

    @classmethod
    def from_api(cls, usage: dict | None) -> "Usage":
        """From a ``usage`` object of a message or a ``message_delta`` event (missing counts are 0)."""
        u = usage or {}

        def count(key: str, src: dict = u) -> int:
            v = src.get(key)
            return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

        split = u.get("cache_creation") if isinstance(u.get("cache_creation"), dict) else {}
        return cls(
            input_tokens=count("input_tokens"),
            output_tokens=count("output_tokens"),
            cache_creation_input_tokens=count("cache_creation_input_tokens"),
            cache_read_input_tokens=count("cache_read_input_tokens"),
            cache_creation_1h_input_tokens=count("ephemeral_1h_input_tokens", split),
        )

    def updated(self, delta: dict | None) -> "Usage":
        """This usage with the counts a ``message_delta`` event carries (cumulative, so they replace)."""
        d = delta or {}
        new = Usage.from_api(d)
        fields = {name: getattr(new, name) if name in d else getattr(self, name) for name in self.as_dict()}
        if isinstance(d.get("cache_creation"), dict):
            fields["cache_creation_1h_input_tokens"] = new.cache_creation_1h_input_tokens
        return Usage(**fields)

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_1h_input_tokens": self.cache_creation_1h_input_tokens,
        }


@dataclass(frozen=True)
class ModelPrice:
    """One model's pinned prices, USD per million tokens."""

    model: str
    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal
    #: The largest input the API accepts for this model: no request bills more input than this.
    max_input_tokens: int

    def dearest_input(self, one_hour_cache: bool = True) -> Decimal:
        """The highest rate an input token can be billed at (plain, cache write or cache read).

        The one-hour cache-write rate only applies to a request that asks for
        that lifetime (a ``"ttl"`` in its body).
        """
        rates = [self.input, self.cache_write, self.cache_read] + ([self.cache_write_1h] if one_hour_cache else [])
        return max(rates)

    def cost(self, usage: Usage) -> Decimal:
        """The exact price of one answer's usage."""
        one_hour = min(usage.cache_creation_1h_input_tokens, usage.cache_creation_input_tokens)
        five_min = usage.cache_creation_input_tokens - one_hour
        total = (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + five_min * self.cache_write
            + one_hour * self.cache_write_1h
            + usage.cache_read_input_tokens * self.cache_read
        )
        return total / MILLION

    def worst_case(self, input_bound_tokens: int, max_tokens: int, one_hour_cache: bool = True) -> Decimal:
        """The most a request can cost: its input bound at the dearest input rate plus max_tokens of output."""
        return (input_bound_tokens * self.dearest_input(one_hour_cache) + max_tokens * self.output) / MILLION


def _decimal(path: Path, where: str, value: Any) -> Decimal:
    # The table is read with every scalar as text, so a price never passes through a float.
    if not isinstance(value, str) or not value.strip():
        raise ProtocolError(path, where, "must be a number (USD per million tokens)")
    try:
        d = Decimal(value.strip())
    except InvalidOperation:
        raise ProtocolError(path, where, f"not a decimal number: {value!r}") from None
    if not d.is_finite() or d < 0:
        raise ProtocolError(path, where, f"must be a finite number >= 0, got {value!r}")
    return d


def _positive_int(path: Path, where: str, value: Any) -> int:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9][0-9_]*", value.strip()):
        raise ProtocolError(path, where, f"must be a positive integer, got {value!r}")
    n = int(value.strip().replace("_", ""))
    if n <= 0:
        raise ProtocolError(path, where, f"must be a positive integer, got {value!r}")
    return n


def study_models(study: Any) -> list[str]:
    """Every model study.yml names: the worker, the judges and the sensitivity models."""
    raw = study.raw if hasattr(study, "raw") else study
    models = [raw["worker"]["model"]]
    models += [j["model"] for j in raw.get("judges", {}).get("panel", [])]
    models += list(raw.get("sensitivity_models", {}).get("models", []))
    return list(dict.fromkeys(models))


@dataclass(frozen=True)
class PriceTable:
    """The pinned per-model prices of ``protocol/prices.yml``."""

    path: Path
    models: dict[str, ModelPrice]

    @classmethod
    def load(cls, path: Path | str | None = None, *, required_models: Iterable[str] | None = None) -> "PriceTable":
        """Read and validate the table; every error names the file, the field and the reason.

        ``required_models`` defaults to every model ``protocol/study.yml`` names
        (when the table is the protocol's own); each must have a price.
        """
        path = Path(path) if path is not None else PRICES_FILE
        raw = read_yaml(path, text_scalars=True)
        if not isinstance(raw, dict):
            raise ProtocolError(path, "<root>", "must be a mapping with 'unit' and 'models'")
        unknown = set(raw) - {"unit", "models"}
        if unknown:
            raise ProtocolError(path, sorted(unknown)[0], "unknown field (expected 'unit' and 'models')")
        if raw.get("unit") != "usd_per_million_tokens":
            raise ProtocolError(path, "unit", f"must be 'usd_per_million_tokens', got {raw.get('unit')!r}")
        entries = raw.get("models")
        if not isinstance(entries, dict) or not entries:
            raise ProtocolError(path, "models", "must be a non-empty mapping of model id to prices")
        models: dict[str, ModelPrice] = {}
        for model, entry in entries.items():
            where = f"models.{model}"
            if not isinstance(entry, dict):
                raise ProtocolError(path, where, "must be a mapping of price fields")
            expected = set(PRICE_FIELDS) | {"max_input_tokens"}
            extra = set(entry) - expected
            if extra:
                raise ProtocolError(path, f"{where}.{sorted(extra)[0]}", f"unknown field (expected {sorted(expected)})")
            for name in sorted(expected):
                if name not in entry:
                    raise ProtocolError(path, f"{where}.{name}", "missing")
            prices = {name: _decimal(path, f"{where}.{name}", entry[name]) for name in PRICE_FIELDS}
            models[model] = ModelPrice(model=model, max_input_tokens=_positive_int(path, f"{where}.max_input_tokens", entry["max_input_tokens"]), **prices)
        if required_models is None and path.resolve() == PRICES_FILE.resolve():
            from pilot import protocol

            required_models = study_models(protocol.study())
        for model in required_models or ():
            if model not in models:
                raise ProtocolError(path, f"models.{model}", "missing: the study uses this model, so it needs a pinned price")
        return cls(path=path, models=models)

    def price(self, model: str) -> ModelPrice:
        try:
            return self.models[model]
        except KeyError:
            raise KeyError(f"{self.path}: no pinned price for model {model!r}") from None


# --------------------------------------------------------------------------
# CLI-reported versus metered cost
# --------------------------------------------------------------------------

#: A client-reported cost may differ from the metered one by this much before the run gets a note.
TOLERANCE_ABS_USD = Decimal("0.01")
TOLERANCE_REL = Decimal("0.02")


def _as_decimal(x: Decimal | float | int | str) -> Decimal:
    # A float from the CLI's JSON is taken at its shortest decimal spelling, not its binary expansion.
    return x if isinstance(x, Decimal) else Decimal(str(x))


def cost_tolerance(metered_usd: Decimal) -> Decimal:
    """The stated tolerance: the larger of one cent and 2 % of the metered cost."""
    return max(TOLERANCE_ABS_USD, TOLERANCE_REL * abs(metered_usd))


def cost_disagreement(cli_usd: Decimal | float | str | None, metered_usd: Decimal | float | str) -> str | None:
    """The run note when the client's reported cost and the proxy's metered cost disagree beyond tolerance."""
    metered = _as_decimal(metered_usd)
    if cli_usd is None:
        return f"the client reported no cost; the proxy metered {metered} USD"
    cli = _as_decimal(cli_usd)
    gap = cli - metered
    tol = cost_tolerance(metered)
    if abs(gap) <= tol:
        return None
    return (f"client-reported cost {cli} USD differs from the metered {metered} USD by {gap:+} USD, "
            f"beyond the tolerance of {tol} USD (max of 0.01 USD and 2 % of metered)")


# --------------------------------------------------------------------------
# Worst case of one request
# --------------------------------------------------------------------------


def _blocks(body: dict) -> Iterable[dict]:
    """Every content block of the messages and the system prompt, nested tool results included."""
    stack: list[Any] = [body.get("system"), *[m.get("content") for m in body.get("messages") or [] if isinstance(m, dict)]]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            yield item
            if isinstance(item.get("content"), list):
                stack.append(item["content"])


def body_input_bound(body_bytes: int, body: dict, price: ModelPrice) -> tuple[int, str]:
    """An upper bound on the request's billed input tokens from its body alone, and how it was found.

    With a document block the body does not bound the input (a PDF's pages are
    rendered as text and images), so the bound is the model's largest input.
    """
    images = documents = 0
    for block in _blocks(body):
        kind = block.get("type")
        if kind == "image":
            images += 1
        elif kind == "document":
            documents += 1
    if documents:
        return price.max_input_tokens, "max_input (document)"
    bound = body_bytes + FRAMING_ALLOWANCE_TOKENS + IMAGE_ALLOWANCE_TOKENS * images
    return min(bound, price.max_input_tokens), "body_bytes"


def count_input_bound(counted: int, price: ModelPrice) -> int:
    """The input bound from an upstream count_tokens answer, with its margin."""
    bound = math.ceil(Decimal(counted) * COUNT_MARGIN) + FRAMING_ALLOWANCE_TOKENS
    return min(bound, price.max_input_tokens)


# --------------------------------------------------------------------------
# Per-run meter
# --------------------------------------------------------------------------


def record_folder_name(run_id: str) -> str:
    """The run's folder under ``record_dir``: the run id itself when it is a plain name, else a safe spelling with a digest."""
    if _SAFE_NAME.match(run_id):
        return run_id
    plain = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._-")[-40:] or "run"
    return f"{plain}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class RunMeter:
    """One run's listener, token and running account. Read it; the proxy writes it."""

    run_id: str
    cap_usd: Decimal
    model: str
    #: The models this run may call (``model`` and any widened on purpose).
    models: frozenset[str]
    token: str = field(repr=False)
    socket_path: Path
    base_url: str
    record_path: Path
    metered_usd: Decimal = Decimal(0)
    requests: list[dict] = field(default_factory=list)
    refusals: list[dict] = field(default_factory=list)
    capped: bool = False
    capped_reason: str | None = None
    closed: bool = False
    #: Worst cases of the requests now in flight.
    reserved_usd: Decimal = Decimal(0)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _seq: int = 0
    _servers: list[socketserver.BaseServer] = field(default_factory=list, repr=False)

    @property
    def env(self) -> dict[str, str]:
        """The agent-side variables for a host without the socket bridge (loopback TCP)."""
        return {"ANTHROPIC_BASE_URL": self.base_url, "ANTHROPIC_API_KEY": self.token}

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())

    def _write(self, row: dict) -> dict:
        # Called with the lock held: the file order is the metering order.
        self._seq += 1
        row = {"run_id": self.run_id, "seq": self._seq, "at": _now(), **row}
        with self.record_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        return row

    def refuse(self, reason: str, **detail: Any) -> dict:
        with self._lock:
            row = self._write({"kind": "refused", "reason": reason, **detail})
            self.refusals.append(row)
        log.warning("model proxy refused a request of run %s: %s", self.run_id, reason)
        return row

    def reserve(self, worst_usd: Decimal) -> str | None:
        """Reserve a request's worst case; the refusal reason when it would cross the cap."""
        with self._lock:
            if self.capped:
                return f"the run is already capped ({self.capped_reason})"
            if self.metered_usd + self.reserved_usd + worst_usd > self.cap_usd:
                return (f"metered {self.metered_usd} USD + in flight {self.reserved_usd} USD + this request's worst case "
                        f"{worst_usd} USD would exceed the run's cap of {self.cap_usd} USD")
            self.reserved_usd += worst_usd
            return None

    def mark_capped(self, reason: str) -> None:
        with self._lock:
            if not self.capped:
                self.capped, self.capped_reason = True, reason

    def settle(self, worst_usd: Decimal, row: dict) -> dict:
        """Release a request's reservation and book what it cost."""
        with self._lock:
            self.reserved_usd -= worst_usd
            self.metered_usd += Decimal(row["cost_usd"])
            row = self._write({**row, "metered_usd": str(self.metered_usd)})
            self.requests.append(row)
            return row

    def record(self, row: dict) -> dict:
        """Book an exchange that costs nothing (a count_tokens call)."""
        with self._lock:
            row = self._write({**row, "metered_usd": str(self.metered_usd)})
            self.requests.append(row)
            return row


# --------------------------------------------------------------------------
# The HTTP side
# --------------------------------------------------------------------------


def _error_body(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pilot-model-proxy"
    #: An idle agent connection is dropped after this long (a tool call between two requests can take minutes).
    timeout = 3600
    sys_version = ""
    server: "_Listener"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("model proxy: " + format, *args)

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        self._handle()

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_POST

    # -- plumbing -----------------------------------------------------------

    def _read_body(self) -> bytes:
        """The request body; ValueError when its framing is malformed or it is too large."""
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline(64).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                if len(out) + size > MAX_BODY_BYTES:
                    raise ValueError(f"request bodies over {MAX_BODY_BYTES} bytes are refused")
                out += self.rfile.read(size)
                self.rfile.readline(64)
        n = int(self.headers.get("content-length") or 0)
        if n < 0 or n > MAX_BODY_BYTES:
            raise ValueError(f"content-length {n}: bodies over {MAX_BODY_BYTES} bytes are refused")
        return self.rfile.read(n) if n else b""

    def _send_error(self, status: int, kind: str, message: str) -> None:
        data = _error_body(kind, message)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-should-retry", "false")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _upstream_path(self) -> str:
        # Rebuilt from the path and query alone: a request target naming another host ("//host/..." or
        # "http://host/...") cannot steer where the real key goes.
        parts = urlsplit(self.path)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def _token(self) -> str | None:
        key = self.headers.get("x-api-key")
        if key:
            return key.strip()
        auth = self.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return None

    # -- one request ----------------------------------------------------------

    def _handle(self) -> None:
        meter, proxy = self.server.meter, self.server.proxy
        route = urlsplit(self.path).path.rstrip("/")
        try:
            # Read even when the request is refused below, so the agent sees the answer rather than a broken pipe.
            body: bytes | None = self._read_body()
            oversized = None
        except ValueError as exc:
            body, oversized = None, str(exc)
            self.close_connection = True
        if not meter.token_ok(self._token()):
            self.close_connection = True
            meter.refuse("missing or wrong run token", path=route, method=self.command)
            return self._send_error(401, "authentication_error", "invalid x-api-key")
        if meter.closed:
            self.close_connection = True
            meter.refuse("run closed", path=route, method=self.command)
            return self._send_error(403, "permission_error", f"run {meter.run_id} is closed")
        if body is None:
            meter.refuse(f"malformed or oversized request body ({oversized})", path=route)
            return self._send_error(413, "request_too_large", str(oversized))
        if self.command == "POST" and route == "/v1/messages":
            return self._messages(meter, proxy, body)
        if self.command == "POST" and route == "/v1/messages/count_tokens":
            # Free upstream; relayed and recorded, never charged.
            return self._forward(meter, proxy, body, {"kind": "count_tokens", "path": route}, None, Decimal(0), None)
        if self.command in ("HEAD", "GET") and route == "":
            # A reachability probe of the base URL: answered here, nothing leaves.
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
            return None
        meter.refuse("endpoint not offered by the proxy", path=route, method=self.command)
        return self._send_error(404, "not_found_error", f"{self.command} {route or '/'} is not offered by the run's model proxy")

    def _messages(self, meter: RunMeter, proxy: "MeteringProxy", raw: bytes) -> None:
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            meter.refuse(f"body is not a JSON object ({exc})", path="/v1/messages")
            return self._send_error(400, "invalid_request_error", "request body must be a JSON object")
        model = body.get("model")
        max_tokens = body.get("max_tokens")
        if not isinstance(model, str) or model not in proxy.prices.models:
            meter.refuse(f"no pinned price for model {model!r}", path="/v1/messages", model=model)
            return self._send_error(400, "invalid_request_error", f"model {model!r} has no pinned price in the study's price table")
        if model not in meter.models:
            meter.refuse(f"model {model!r} is not this run's ({sorted(meter.models)})", path="/v1/messages", model=model)
            return self._send_error(400, "invalid_request_error", f"model {model!r} is not available to this run")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            meter.refuse("max_tokens missing or not a positive integer", path="/v1/messages", model=model)
            return self._send_error(400, "invalid_request_error", "max_tokens: must be a positive integer")
        unknown = sorted(set(body) - MESSAGE_KEYS)
        if unknown:
            meter.refuse(f"request fields outside the allow-list: {unknown}", path="/v1/messages", model=model)
            return self._send_error(400, "invalid_request_error", f"request fields {unknown} are not available in this study")
        server_tools = [t.get("type") for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") not in (None, "custom")]
        if server_tools:
            # Server tools run on the API's side (web search and fetch, code execution): a way out of the
            # sandbox, and billed per use outside the token prices the table pins.
            meter.refuse(f"server tools not priced: {server_tools}", path="/v1/messages", model=model)
            return self._send_error(400, "invalid_request_error", f"server tools {server_tools} are not available in this study")
        price = proxy.prices.price(model)
        bound, method = body_input_bound(len(raw), body, price)
        one_hour = b'"ttl"' in raw  # any cache lifetime named: allow the one-hour write rate
        worst = price.worst_case(bound, max_tokens, one_hour)
        refusal = meter.reserve(worst)
        if refusal is not None and not meter.capped:
            counted = proxy.count_tokens(body, self.headers, urlsplit(self.path).query, run_id=meter.run_id)
            if counted is None:
                refusal += "; count_tokens could not tighten the bound"
            else:
                bound, method = min(bound, count_input_bound(counted, price)), "count_tokens"
                worst = price.worst_case(bound, max_tokens, one_hour)
                refusal = meter.reserve(worst)
        if refusal is not None:
            meter.mark_capped(refusal)
            meter.refuse(refusal, path="/v1/messages", model=model, max_tokens=max_tokens, input_bound_tokens=bound,
                         bound_method=method, worst_case_usd=str(worst), capped=True)
            return self._send_error(CAP_STATUS, CAP_ERROR_TYPE, f"{CAP_MESSAGE_PREFIX}: {refusal}")
        info = {"kind": "messages", "path": "/v1/messages", "model": model, "stream": bool(body.get("stream")),
                "max_tokens": max_tokens, "input_bound_tokens": bound, "bound_method": method, "worst_case_usd": str(worst)}
        return self._forward(meter, proxy, raw, info, price, worst, max_tokens)

    def _forward(self, meter: RunMeter, proxy: "MeteringProxy", raw: bytes, info: dict,
                 price: ModelPrice | None, worst: Decimal, max_tokens: int | None) -> None:
        """Relay one request upstream and its answer back; book it before the answer's last byte leaves.

        Booking first means that once the agent has a whole answer, the meter
        already holds its cost.
        """
        started = time.perf_counter()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP and k.lower() != RUN_ID_HEADER}
        if proxy.label_upstream:
            headers[RUN_ID_HEADER] = run_id_header_value(meter.run_id)
        state: dict[str, Any] = {"usage": None, "complete": False, "status": 502, "message_id": None, "note": None, "booked": False}

        def book() -> None:
            if state["booked"]:
                return
            state["booked"] = True
            row = {**info, "status": state["status"], "message_id": state["message_id"],
                   "duration_ms": round((time.perf_counter() - started) * 1000, 3)}
            if price is None:
                meter.record({**row, "cost_usd": "0", "note": state["note"]})
                return
            usage, complete, note = state["usage"], state["complete"], state["note"]
            if state["status"] != 200 and usage is None:
                usage, complete = Usage(), True  # the API does not bill a refused or failed request
                note = note or f"upstream status {state['status']}: not billed"
            if usage is None:
                # An answer began but told nothing of its usage: charge its whole worst case.
                cost = worst
                usage = Usage()
                note = (note + "; " if note else "") + "no usage seen: charged the request's worst case"
            else:
                if not complete:
                    # The final count never arrived: charge the whole output allowance.
                    usage = Usage(**{**usage.as_dict(), "output_tokens": max(usage.output_tokens, max_tokens or 0)})
                    note = (note + "; " if note else "") + "final usage not seen: output charged at max_tokens"
                cost = price.cost(usage)
            tier = state.get("service_tier")
            if tier not in (None, "standard"):
                note = (note + "; " if note else "") + f"billed in service tier {tier!r}, priced at the table's standard rates"
            row.update(usage.as_dict())
            row.update(cost_usd=str(cost), usage_complete=complete, service_tier=tier, note=note)
            meter.settle(worst, row)

        try:
            try:
                resp = proxy.upstream_request(self.command, self._upstream_path(), raw, headers)
            except (OSError, http.client.HTTPException) as exc:
                state["note"] = f"upstream unreachable: {exc}"
                state["usage"], state["complete"] = Usage(), True
                book()
                self._send_error(502, "api_error", "the model API could not be reached")
                return
            state["status"] = resp.status
            ctype = (resp.getheader("content-type") or "").lower()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP:
                    self.send_header(k, v)
            if "text/event-stream" in ctype:
                client_ok = self._relay_stream(resp, state)
                book()
                if client_ok:
                    try:
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        self.close_connection = True
                else:
                    self.close_connection = True
            else:
                data = resp.read()
                if resp.status == 200 and info["kind"] == "messages":
                    try:
                        message = json.loads(data)
                        state["usage"] = Usage.from_api(message["usage"])
                        state["message_id"], state["complete"] = message.get("id"), True
                        state["service_tier"] = message["usage"].get("service_tier")
                    except (ValueError, KeyError, TypeError):
                        state["note"] = "answer carried no readable usage"
                book()
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            if not resp.will_close:
                proxy.release_connection(resp)
        finally:
            book()

    def _relay_stream(self, resp: http.client.HTTPResponse, state: dict[str, Any]) -> bool:
        """Relay server-sent events chunk by chunk, reading usage from message_start and message_delta.

        Returns whether the agent is still connected. When it is not, the
        upstream answer is still read to its end: it is billed whole, so its
        usage must be seen.
        """
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        client_ok = True
        pending = b""
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            if client_ok:
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                except OSError:
                    client_ok = False
                    state["note"] = "the agent closed the connection mid-stream"
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.startswith(b"data:"):
                    self._read_event(line[5:], state)
        return client_ok

    @staticmethod
    def _read_event(data: bytes, state: dict[str, Any]) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "message_start":
            message = event.get("message") or {}
            state["usage"], state["message_id"] = Usage.from_api(message.get("usage")), message.get("id")
            state["service_tier"] = (message.get("usage") or {}).get("service_tier")
        elif kind == "message_delta" and state["usage"] is not None:
            state["usage"] = state["usage"].updated(event.get("usage"))
            state["complete"] = True
        elif kind == "error":
            state["note"] = f"stream error event: {json.dumps(event.get('error'))[:300]}"


class _Listener(socketserver.ThreadingMixIn):
    daemon_threads = True
    block_on_close = False
    meter: RunMeter
    proxy: "MeteringProxy"


class _TCPListener(_Listener, socketserver.TCPServer):
    allow_reuse_address = True


class _UnixListener(_Listener, socketserver.UnixStreamServer):
    pass


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP client connection to a Unix socket file (a run's listener, seen from the harness side)."""

    def __init__(self, socket_path: Path | str, timeout: float = 60.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = str(socket_path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


# --------------------------------------------------------------------------
# The proxy
# --------------------------------------------------------------------------


class MeteringProxy:
    """Holds the real key; opens one metered listener per run.

    >>> with MeteringProxy(url, key, PriceTable.load(), record_dir) as proxy:   # doctest: +SKIP
    ...     meter = proxy.open_run("LEGAL-01.A1.r1", Decimal("4.00"), "claude-opus-5-5")
    ...     # the agent: ANTHROPIC_BASE_URL=meter.base_url, ANTHROPIC_API_KEY=meter.token
    ...     proxy.close_run(meter.run_id)
    """

    def __init__(self, upstream_url: str, api_key: str, prices: PriceTable, record_dir: Path, *,
                 socket_dir: Path | None = None, timeout_s: float = 600.0, ssl_context: ssl.SSLContext | None = None,
                 label_upstream: bool = False) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream_url must be an http(s) URL, got {upstream_url!r}")
        if not api_key:
            # Allowed (a scripted upstream needs none), but a real upstream will refuse every request.
            log.warning("model proxy for %s started without an API key", upstream_url)
        self.upstream_url = upstream_url
        self._scheme, self._host = parts.scheme, parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._api_key = api_key
        self.prices = prices
        self.record_dir = Path(record_dir)
        self.timeout_s = timeout_s
        self._socket_dir_arg = socket_dir
        self.socket_dir: Path | None = None
        self._own_socket_dir = False
        # Certificates are always verified; ssl_context only chooses whom to trust (default: the system's CAs).
        self._ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        # Opt-in, for a local scripted upstream that plays each run: the real API is never told the run's id.
        self.label_upstream = bool(label_upstream)
        self._runs: dict[str, RunMeter] = {}
        self._lock = threading.Lock()
        self._pool = threading.local()
        self._started = False

    def __repr__(self) -> str:
        return f"MeteringProxy(upstream={self.upstream_url!r}, runs={sorted(self._runs)})"

    # -- lifetime -------------------------------------------------------------

    def start(self) -> "MeteringProxy":
        if self._started:
            return self
        self.record_dir.mkdir(parents=True, exist_ok=True)
        if self._socket_dir_arg is None:
            self.socket_dir, self._own_socket_dir = Path(tempfile.mkdtemp(prefix="pilot-proxy-")), True
        else:
            self.socket_dir = Path(self._socket_dir_arg)
            self.socket_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.chmod(0o700)
        self._started = True
        return self

    def stop(self) -> None:
        for run_id in list(self._runs):
            if not self._runs[run_id].closed:
                self.close_run(run_id)
        if self._own_socket_dir and self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        self._started = False

    def __enter__(self) -> "MeteringProxy":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- runs -----------------------------------------------------------------

    def open_run(self, run_id: str, cap_usd: Decimal, model: str, *, other_models: Iterable[str] = ()) -> RunMeter:
        """A new listener (Unix socket and loopback TCP) and token for one run.

        The run may call ``model`` only (the pinned CLI makes no side calls to
        other models in print mode); ``other_models`` widens that on purpose.
        """
        if not self._started:
            raise RuntimeError("start the proxy before opening a run")
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run id must be a non-empty string, got {run_id!r}")
        if not isinstance(cap_usd, Decimal) or not cap_usd.is_finite() or cap_usd <= 0:
            raise ValueError(f"cap_usd must be a positive Decimal, got {cap_usd!r}")
        models = frozenset({model, *other_models})
        for m in models:
            self.prices.price(m)
        assert self.socket_dir is not None
        name = record_folder_name(run_id)
        sock = self.socket_dir / f"{name}.sock"
        if len(str(sock)) > MAX_SOCKET_PATH:
            sock = self.socket_dir / f"run-{secrets.token_hex(6)}.sock"
        if len(str(sock)) > MAX_SOCKET_PATH:
            raise ValueError(f"socket folder {self.socket_dir} is too long for a Unix socket path")
        with self._lock:
            old = self._runs.get(run_id)
            if old is not None and not old.closed:
                raise ValueError(f"run {run_id} is already open on this proxy")
            run_dir = self.record_dir / name
            run_dir.mkdir(parents=True, exist_ok=True)
            sock.unlink(missing_ok=True)
            tcp = _TCPListener(("127.0.0.1", 0), _Handler)
            unix = _UnixListener(str(sock), _Handler)
            sock.chmod(0o600)
            meter = RunMeter(run_id=run_id, cap_usd=cap_usd, model=model, models=models, token=f"pilot-run-{secrets.token_urlsafe(32)}",
                             socket_path=sock, base_url=f"http://127.0.0.1:{tcp.server_address[1]}",
                             record_path=run_dir / USAGE_FILE_NAME)
            for server in (tcp, unix):
                server.meter, server.proxy = meter, self
                meter._servers.append(server)
                threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                 name=f"model-proxy-{run_id}", daemon=True).start()
            self._runs[run_id] = meter
        meter._write({"kind": "opened", "cap_usd": str(cap_usd), "model": model, "models": sorted(models), "upstream": self.upstream_url})
        return meter

    def close_run(self, run_id: str) -> RunMeter:
        """Close the run's listeners; any further request of the run is refused."""
        meter = self._runs[run_id]
        if meter.closed:
            return meter
        meter.closed = True
        for server in meter._servers:
            server.shutdown()
            server.server_close()
        meter.socket_path.unlink(missing_ok=True)
        with meter._lock:
            meter._write({"kind": "closed", "metered_usd": str(meter.metered_usd), "capped": meter.capped,
                          "capped_reason": meter.capped_reason, "requests": len(meter.requests), "refusals": len(meter.refusals)})
        return meter

    def meter(self, run_id: str) -> RunMeter:
        return self._runs[run_id]

    # -- upstream -------------------------------------------------------------

    def _connect(self) -> http.client.HTTPConnection:
        if self._ssl is not None:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout_s, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)

    def upstream_request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> http.client.HTTPResponse:
        """Send one request upstream with the real key, on this thread's kept-alive connection if it is fresh.

        A request is re-sent on a new connection only when sending it failed
        (the upstream had closed the idle connection, so it never saw it); a
        failure after it was sent is not retried, since the upstream may have
        run and billed it: the agent gets a 502 and its client decides.
        """
        headers = {**headers, "x-api-key": self._api_key, "accept-encoding": "identity"}
        if body or method in ("POST", "PUT", "PATCH"):
            headers["content-length"] = str(len(body))
        reused, idle_since = getattr(self._pool, "conn", None), getattr(self._pool, "idle_since", 0.0)
        self._pool.conn = None
        if reused is not None and time.monotonic() - idle_since > KEEP_ALIVE_IDLE_S:
            reused.close()
            reused = None
        conn = reused or self._connect()
        try:
            conn.request(method, self._prefix + path, body=body or None, headers=headers)
        except (ConnectionResetError, BrokenPipeError):
            if conn is not reused:
                raise
            conn.close()
            conn = self._connect()
            conn.request(method, self._prefix + path, body=body or None, headers=headers)
        resp = conn.getresponse()
        resp._pilot_conn = conn  # type: ignore[attr-defined]
        return resp

    def release_connection(self, resp: http.client.HTTPResponse) -> None:
        """Keep a finished answer's connection for this thread's next request."""
        conn = getattr(resp, "_pilot_conn", None)
        if conn is not None and resp.isclosed():
            old = getattr(self._pool, "conn", None)
            if old is not None:
                old.close()
            self._pool.conn, self._pool.idle_since = conn, time.monotonic()

    def count_tokens(self, body: dict, client_headers: Any, query: str = "", run_id: str | None = None) -> int | None:
        """The upstream count of a messages request's input tokens; None when it cannot be had.

        Sent with the request's own betas and query (``?beta=true``), so that
        the fields the betas add (context management, output config) are accepted.
        """
        payload = json.dumps({k: body[k] for k in _COUNT_KEYS if k in body}).encode()
        headers = {"content-type": "application/json", "x-api-key": self._api_key, "accept-encoding": "identity",
                   "content-length": str(len(payload))}
        for name in ("anthropic-version", "anthropic-beta"):
            if client_headers.get(name):
                headers[name] = client_headers[name]
        headers.setdefault("anthropic-version", "2023-06-01")
        if self.label_upstream and run_id is not None:
            headers[RUN_ID_HEADER] = run_id_header_value(run_id)
        conn = self._connect()
        conn.timeout = COUNT_TIMEOUT_S
        try:
            target = self._prefix + "/v1/messages/count_tokens" + (f"?{query}" if query else "")
            conn.request("POST", target, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                log.warning("count_tokens answered %s: %s", resp.status, data[:200])
                return None
            n = json.loads(data).get("input_tokens")
            return n if isinstance(n, int) and n >= 0 else None
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("count_tokens failed: %s", exc)
            return None
        finally:
            conn.close()
