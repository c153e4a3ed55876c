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

Every decision is taken on the parsed body, and what is forwarded is that
parsed body written anew, so the API reads exactly what was checked (no escape
or duplicate key means one thing here and another there). A request may carry
only allow-listed fields and content blocks: no URL or Files API sources (the
API would fetch them, or read uploads of the shared key), no server tools, no
MCP servers or containers; the same holds for ``count_tokens``, which is also
rate-limited per run. The token, the framing and the size of a request are
checked from its headers before any byte of its body is read, a run has a
bounded number of connections and requests in flight, and refusals are
counted per reason with only the first few of each written whole.

Request headers pass upstream only from ``study.yml``'s ``model_proxy`` lists
(:class:`HeaderPolicy`): others are dropped and counted, and an API version or
beta the lists do not name refuses the request before its body is read.

Every forwarded request is booked once (:class:`OpenRequest`,
:meth:`RunMeter.book`), at the usage its events report as they arrive; an
answer cut, malformed or ended at the event-line bound (lines are split in
linear time, :class:`EventLines`) is booked at what it said, its output at
``max_tokens``. Closing a run (:meth:`MeteringProxy.close_run`, which the
runner calls when the agent is done) refuses whatever comes, waits a bounded
time for the requests in flight and books any still open at its reserved
worst case, so no request the upstream bills is missed.

Beside the usage record the proxy writes ``proxy_exchanges.jsonl``: for each
answered messages request, every block of the request the record does not
hold yet (tool results, and any other block with its message and role) and
the content the model answered (text, tool calls), bounded; see
:func:`read_exchanges` and :func:`request_blocks`.
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from pilot.protocol.design import PROXY_OWN_HEADERS
from pilot.protocol.prices import ModelPrice, PriceTable, Usage

log = logging.getLogger(__name__)

USAGE_FILE_NAME = "proxy_usage.jsonl"


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
#: The Messages API refuses bodies over 32 MB; so does the proxy, from the Content-Length, before reading.
MAX_BODY_BYTES = 32 * 1024 * 1024
#: Requests of one run being read, checked or relayed at once. The pinned CLI sends one at a time in print
#: mode (no arm has a subagent tool), so 8 is ample for it and bounds what one run can make the harness hold.
MAX_IN_FLIGHT = 8
#: The announced bodies of one run's requests in flight, together: one body of the largest size and room
#: for small ones beside it. This bounds the request bytes one run can make the harness hold (a body's
#: parsed form, while it is checked, comes on top).
MAX_IN_FLIGHT_BODY_BYTES = MAX_BODY_BYTES + 8 * 1024 * 1024
#: Open connections of one run (each is a harness thread); beyond it a new connection is closed unread.
#: The CLI needs one at a time, a few with the connections its HTTP client keeps alive.
MAX_OPEN_CONNECTIONS = 32
#: The longest wait for the next bytes of a body once its headers are in (the CLI sends a body at once).
BODY_IDLE_TIMEOUT_S = 60.0
#: After a refusal whose body was not read: how much the client may still send, dropped unread, and for how
#: long, so that the answer reaches it before the connection closes.
LINGER_BYTES = 1024 * 1024
LINGER_S = 2.0
#: count_tokens is free, but it runs on the shared key and is not metered: a run may burst this many calls and
#: then one a second. The pinned CLI made no such call in the sessions seen through the proxy; it can make one
#: to size a large tool result before sending it, so a few a turn at most, and its turns take seconds.
COUNT_TOKENS_BURST = 20
COUNT_TOKENS_PER_MINUTE = 60
#: Refusal rows written whole (and kept in ``RunMeter.refusals``) per reason; the rest are only counted.
REFUSAL_ROWS_PER_REASON = 5
#: The reason keys refusals are counted under (``RunMeter.refusal_counts``).
REFUSAL_KEYS = frozenset(
    {
        "bad_token",
        "run_closed",
        "not_offered",
        "length_required",
        "bad_content_length",
        "body_too_large",
        "too_many_in_flight",
        "in_flight_bytes",
        "too_many_connections",
        "body_incomplete",
        "invalid_json",
        "invalid_request",
        "model_not_priced",
        "model_not_allowed",
        "max_tokens",
        "field_not_allowed",
        "server_tool",
        "block_not_allowed",
        "url_source",
        "file_source",
        "source_not_allowed",
        "rate_limited",
        "cap",
        "beta_not_allowed",
        "version_not_allowed",
    }
)
#: The exchange record beside the usage record.
EXCHANGES_FILE_NAME = "proxy_exchanges.jsonl"
#: The longest text (and serialised tool input) an exchange row keeps of one block; longer ones are cut.
EXCHANGE_TEXT_LIMIT = 100_000
#: The exchange rows one run may write; past it one ``exchanges_truncated`` row, and metering goes on.
EXCHANGES_MAX_BYTES = 64 * 1024 * 1024
#: No server-sent event line of an answer is longer than this: a longer one ends the answer where it stands (it is
#: booked at what its events had said, the output at ``max_tokens``), and the usage row says so. The API's events
#: are deltas of a few hundred bytes; 16 MiB holds any whole message the API could send as one event.
MAX_EVENT_LINE_BYTES = 16 * 1024 * 1024
#: How long closing a run waits for its requests still in flight to be answered and booked; what is still open then
#: is booked at its reserved worst case (the upstream bills it whether or not anyone reads the answer).
CLOSE_WAIT_S = 30.0
#: Keys (of blocks and messages) the exchange record remembers per run as already kept; past it a block is kept again.
SEEN_KEYS_MAX = 100_000
#: Blocks of one request kept in its exchange row (tool results and any other); the rest are counted, not kept.
REQUEST_BLOCKS_MAX = 256
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
# What belongs to one connection or is set by the proxy itself: never passed on (the run label, set by the proxy
# when asked, is added after).
_HOP_BY_HOP = PROXY_OWN_HEADERS - {RUN_ID_HEADER}
#: The fields a messages request may carry: those the pinned CLI sends and plain sampling controls.
#: Refused, by not being here: ``mcp_servers`` and ``container`` (the API reaching out on the agent's
#: behalf), ``service_tier`` and ``speed`` (billed at other rates than the table's).
MESSAGE_KEYS = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "context_management",
        "output_config",
        "output_format",
    }
)
#: Keys of a messages body that count_tokens accepts: the fields a count_tokens request may carry, and those
#: the proxy sends when it counts a request itself.
COUNT_KEYS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "context_management",
        "output_config",
        "output_format",
    }
)
# PROXY_OWN_HEADERS (from pilot.protocol.design, which refuses a study.yml that lists one): the headers the proxy
# sets itself or that belong to one connection, never taken from the client.


@dataclass(frozen=True)
class HeaderPolicy:
    """Which request headers pass upstream: ``study.yml`` ``model_proxy`` (validated on load).

    A header not in ``forwarded`` is dropped (and counted per run); an
    ``anthropic-version`` outside ``api_versions`` or an ``anthropic-beta``
    naming a beta outside ``betas`` refuses the request before its body is read.
    """

    forwarded: frozenset[str]
    api_versions: frozenset[str]
    betas: frozenset[str]

    @classmethod
    def from_study(cls, study: Any = None) -> HeaderPolicy:
        if study is None:
            from pilot import protocol

            study = protocol.study()
        raw = study["model_proxy"]
        return cls(
            forwarded=frozenset(h.lower() for h in raw["forwarded_headers"]) - PROXY_OWN_HEADERS,
            api_versions=frozenset(raw["api_versions"]),
            betas=frozenset(raw["betas"]),
        )

    def refusal(self, headers: Any) -> RequestRefused | None:
        """The refusal of a request whose version or betas are not the study's, or None."""
        versions = headers.get_all("anthropic-version") or []
        for version in versions:
            if version.strip() not in self.api_versions:
                return RequestRefused(
                    "version_not_allowed",
                    f"anthropic-version {_short(version.strip(), 80)} is not available in this study "
                    f"(allowed: {', '.join(sorted(self.api_versions))})",
                    close=True,
                )
        asked = [b.strip() for value in headers.get_all("anthropic-beta") or [] for b in value.split(",")]
        refused = sorted({b for b in asked if b and b not in self.betas})
        if refused:
            return RequestRefused(
                "beta_not_allowed",
                f"anthropic-beta {[_short(b, 80) for b in refused[:10]]} is not available in this study",
                close=True,
                betas=[b[:80] for b in refused[:10]],
            )
        return None

    def forward(self, headers: Any) -> tuple[dict[str, str], list[str]]:
        """The headers to send upstream (one value each, the betas joined) and the names dropped."""
        out: dict[str, str] = {}
        dropped: list[str] = []
        for name, value in headers.items():
            key = name.lower()
            if key in PROXY_OWN_HEADERS:
                continue
            if key not in self.forwarded:
                dropped.append(key[:80])
            elif key == "anthropic-beta" and key in out:
                out[key] += "," + value
            else:
                out[key] = value
        return out, dropped


class LineTooLong(Exception):
    """A server-sent event line longer than the bound (:class:`EventLines`)."""


class EventLines:
    """Splits a byte stream into lines, in time linear in its length, holding at most ``limit`` bytes of one line.

    The pending line is a list of pieces joined once, when its newline comes;
    only the new chunk is searched for a newline. Each byte is copied at most
    twice (cut out of its chunk, and joined into its line); ``work`` counts
    the bytes copied (a test reads it to show the cost is linear). A line
    longer than ``limit`` raises :class:`LineTooLong` as soon as it passes the
    bound, before it is held whole.
    """

    def __init__(self, limit: int = MAX_EVENT_LINE_BYTES) -> None:
        self.limit = limit
        self._pending: list[bytes] = []
        self._size = 0
        self.work = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines this chunk completes (without their ``\\n`` or ``\\r\\n``)."""
        lines: list[bytes] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end
            if self._size + stop - start > self.limit:
                self._pending, self._size = [], 0
                raise LineTooLong(f"an event line longer than {self.limit} bytes")
            # The whole chunk is kept as it is when it holds no newline; any other part is cut out (a copy).
            piece = chunk if start == 0 and end < 0 else chunk[start:stop]
            if piece is not chunk:
                self.work += len(piece)
            if end < 0:
                if piece:
                    self._pending.append(piece)
                    self._size += len(piece)
                return lines
            if self._pending:
                self._pending.append(piece)
                line = b"".join(self._pending)
                self._pending, self._size = [], 0
                self.work += len(line)
            else:
                line = piece
            lines.append(line[:-1] if line.endswith(b"\r") else line)
            start = end + 1


class RequestRefused(Exception):
    """A request the proxy does not forward: a short stable reason key, the HTTP answer and a message naming the field.

    ``record`` is the reason written to the usage record when it differs from
    the message the agent is sent; ``close`` ends the connection (the body, if
    any, was not read).
    """

    def __init__(
        self,
        key: str,
        message: str,
        status: int = 400,
        error_type: str = "invalid_request_error",
        *,
        close: bool = False,
        record: str | None = None,
        **detail: Any,
    ) -> None:
        super().__init__(message)
        self.key, self.message, self.status, self.error_type = key, message, status, error_type
        self.close, self.record, self.detail = close, record or message, detail


#: Content-block kinds a request may carry, anywhere (message content, tool results, a document's content).
#: Left out on purpose: server-tool blocks (``server_tool_use``, ``*_tool_result``, ``mcp_*``), which run on
#: the API's side; ``container_upload`` (a Files API id); ``search_result``, which the pinned CLI does not send;
#: and the ``tool_reference`` / ``tool_addition`` / ``tool_removal`` blocks of tool search and mid-conversation
#: tool changes, which it sends only with tools no arm has (ToolSearch, MCP servers), and which load tool
#: definitions whose size the body does not bound.
BLOCK_TYPES = frozenset({"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"})
#: A system prompt is text.
SYSTEM_BLOCK_TYPES = frozenset({"text"})
#: The sources an image or a document may have: inline data only. A ``url`` source is fetched by the API
#: (network access an arm without network does not have); a ``file`` source names an upload of the shared key.
SOURCE_TYPES = {"image": frozenset({"base64"}), "document": frozenset({"base64", "text", "content"})}


@dataclass(frozen=True)
class RequestFacts:
    """What the meter needs of a checked request."""

    model: str
    #: None for count_tokens, which has no output.
    max_tokens: int | None
    images: int
    documents: int
    #: Whether any cache_control may ask for the one-hour lifetime (then its dearer write rate is reserved).
    one_hour_cache: bool


def cache_control_may_be_one_hour(cache_control: Any) -> bool:
    """False only for the spellings that surely mean the 5-minute lifetime; anything unclear is read as one hour."""
    five_minutes = (
        isinstance(cache_control, dict)
        and cache_control.get("type") == "ephemeral"
        and set(cache_control) <= {"type", "ttl"}
        and cache_control.get("ttl", "5m") == "5m"
    )
    return not five_minutes


def asks_one_hour_cache(body: Any) -> bool:
    """Whether any ``cache_control`` object anywhere in the parsed body may ask for the one-hour lifetime.

    Read on the parsed value, so no spelling of the key (``"t\\u0074l"``) gets past; walked everywhere
    (system, messages, nested tool results, tools, even tool inputs), since a cache breakpoint the API
    honours in a place not walked would be billed at a rate not reserved.
    """
    todo = [body]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if "cache_control" in item and cache_control_may_be_one_hour(item["cache_control"]):
                return True
            todo.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            todo.extend(v for v in item if isinstance(v, (dict, list)))
    return False


def check_content(content: Any, where: str, *, allowed: frozenset[str] = BLOCK_TYPES) -> tuple[int, int]:
    """Check a content value (a string or a list of blocks) against the block allow-list; (images, documents) in it.

    Nested content (a tool result's, a document's ``content`` source) is checked
    with the same rules. Raises :class:`RequestRefused` naming the first block that is not allowed.
    """
    images = documents = 0
    todo: list[tuple[Any, str]] = [(content, where)]
    while todo:
        item, at = todo.pop()
        if isinstance(item, str):
            continue
        if not isinstance(item, list):
            raise RequestRefused("invalid_request", f"{at}: must be a string or a list of content blocks")
        for i, block in enumerate(item):
            here = f"{at}.{i}"
            if not isinstance(block, dict):
                raise RequestRefused("invalid_request", f"{here}: a content block must be an object")
            kind = block.get("type")
            if not isinstance(kind, str) or kind not in allowed:
                raise RequestRefused(
                    "block_not_allowed",
                    f"{here}.type: content blocks of type {_short(kind)} are not "
                    f"available in this study (allowed: {', '.join(sorted(allowed))})",
                )
            if kind in SOURCE_TYPES:
                source = block.get("source")
                stype = source.get("type") if isinstance(source, dict) else None
                if stype == "url":
                    raise RequestRefused(
                        "url_source",
                        f"{here}.source: {kind} sources of type 'url' are not available in this "
                        "study (the API would fetch the URL: network access the run does not have)",
                    )
                if stype == "file":
                    raise RequestRefused(
                        "file_source",
                        f"{here}.source: {kind} sources of type 'file' (Files API uploads) "
                        "are not available in this study; send the data inline (base64)",
                    )
                if not isinstance(stype, str) or stype not in SOURCE_TYPES[kind]:
                    raise RequestRefused(
                        "source_not_allowed",
                        f"{here}.source.type: {_short(stype)} is not available for "
                        f"{kind} blocks (allowed: {', '.join(sorted(SOURCE_TYPES[kind]))})",
                    )
                if kind == "image":
                    images += 1
                else:
                    documents += 1
                if stype == "content":
                    todo.append((source.get("content"), f"{here}.source.content"))
            elif kind == "tool_result" and block.get("content") is not None:
                todo.append((block["content"], f"{here}.content"))
    return images, documents


def check_request(body: Any, *, count_tokens: bool, models: frozenset[str], prices: PriceTable) -> RequestFacts:
    """Check a parsed messages (or count_tokens) body against the allow-lists; what the meter needs of it.

    Raises :class:`RequestRefused` with a message naming the field and the reason.
    """
    if not isinstance(body, dict):
        raise RequestRefused("invalid_json", "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or model not in prices.models:
        raise RequestRefused(
            "model_not_priced", f"model {_short(model)} has no pinned price in the study's price table"
        )
    if model not in models:
        raise RequestRefused(
            "model_not_allowed",
            f"model {model!r} is not available to this run",
            record=f"model {model!r} is not this run's ({sorted(models)})",
        )
    max_tokens = None
    if not count_tokens:
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise RequestRefused("max_tokens", "max_tokens: must be a positive integer")
    unknown = sorted(set(body) - (COUNT_KEYS if count_tokens else MESSAGE_KEYS))
    if unknown:
        where = " on count_tokens" if count_tokens else ""
        raise RequestRefused(
            "field_not_allowed",
            f"request fields {[k[:80] for k in unknown[:10]]} are not available{where} in this study",
        )
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise RequestRefused("invalid_request", "tools: must be a list of tool objects")
        server_tools = [t.get("type") for t in tools if t.get("type") not in (None, "custom")]
        if server_tools:
            # Server tools run on the API's side (web search and fetch, code execution): a way out of the
            # sandbox, and billed per use outside the token prices the table pins.
            raise RequestRefused(
                "server_tool",
                f"server tools {[t[:80] if isinstance(t, str) else _short(t, 80) for t in server_tools[:10]]} "
                "are not available in this study",
            )
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise RequestRefused("invalid_request", "messages: must be a list of messages")
    images = documents = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestRefused("invalid_request", f"messages.{i}: must be an object")
        if "content" in message:
            n_images, n_documents = check_content(message["content"], f"messages.{i}.content")
            images, documents = images + n_images, documents + n_documents
    if body.get("system") is not None:
        check_content(body["system"], "system", allowed=SYSTEM_BLOCK_TYPES)
    return RequestFacts(
        model=model, max_tokens=max_tokens, images=images, documents=documents, one_hour_cache=asks_one_hour_cache(body)
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_body(raw: bytes) -> Any:
    """The request body's JSON value; :class:`RequestRefused` when it is not JSON (NaN and Infinity are not)."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise RequestRefused("invalid_json", f"the request body is not valid JSON ({str(exc)[:200]})") from None


def _json_bytes(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (sent as an escape) has no UTF-8 form: write every non-ASCII character escaped instead.
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def serialise_request(body: dict) -> tuple[bytes, list[bytes]]:
    """The bytes the proxy forwards (the checked value written anew), and each message's own bytes within them.

    So the API reads exactly what the proxy checked: no escape, duplicate key or
    other spelling of the client's can mean one thing here and another there.
    The body is written key by key as ``json.dumps`` writes it, each message
    on its own, so that the exchange record can tell the messages it has
    already kept by their bytes without writing them a second time.
    """
    try:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return _json_bytes(body), []
        parts = [_json_bytes(m) for m in messages]
        out = [b"{"]
        for i, (key, value) in enumerate(body.items()):
            out.append((b"," if i else b"") + _json_bytes(key) + b":")
            out.append(b"[" + b",".join(parts) + b"]" if key == "messages" else _json_bytes(value))
        out.append(b"}")
        return b"".join(out), parts
    except (ValueError, RecursionError) as exc:
        raise RequestRefused(
            "invalid_json", f"the request body cannot be forwarded as JSON ({str(exc)[:200]})"
        ) from None


def serialise_body(body: dict) -> bytes:
    """The bytes the proxy forwards (:func:`serialise_request` without the messages' parts)."""
    return serialise_request(body)[0]


def _short(value: Any, limit: int = 200) -> str:
    # An agent-chosen value quoted in a message or a record row, bounded.
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------
# Worst case of one request
# --------------------------------------------------------------------------


def input_bound(body_bytes: int, images: int, documents: int, price: ModelPrice) -> tuple[int, str]:
    """An upper bound on a request's billed input tokens from its body alone, and how it was found.

    ``body_bytes`` is the size of the forwarded body, which carries every text
    the model reads (a token covers at least one byte of it; escapes only add
    bytes). With a document block the body does not bound the input (a PDF's
    pages are rendered as text and images), so the bound is the model's largest input.
    """
    if documents:
        return price.max_input_tokens, "max_input (document)"
    bound = body_bytes + FRAMING_ALLOWANCE_TOKENS + IMAGE_ALLOWANCE_TOKENS * images
    return min(bound, price.max_input_tokens), "body_bytes"


def body_input_bound(body_bytes: int, body: dict, price: ModelPrice) -> tuple[int, str]:
    """:func:`input_bound` of a parsed body (its images and documents counted by :func:`check_content`)."""
    images = documents = 0
    for i, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict) and "content" in message:
            n_images, n_documents = check_content(message["content"], f"messages.{i}.content")
            images, documents = images + n_images, documents + n_documents
    return input_bound(body_bytes, images, documents, price)


def count_input_bound(counted: int, price: ModelPrice) -> int:
    """The input bound from an upstream count_tokens answer, with its margin."""
    bound = math.ceil(Decimal(counted) * COUNT_MARGIN) + FRAMING_ALLOWANCE_TOKENS
    return min(bound, price.max_input_tokens)


# --------------------------------------------------------------------------
# The exchange record: what the model was shown of tool results, and what it said
# --------------------------------------------------------------------------


def exchanges_path(record_dir: Path, run_id: str) -> Path:
    """Where the proxy writes a run's exchange record, under the proxy's ``record_dir``."""
    return Path(record_dir) / record_folder_name(run_id) / EXCHANGES_FILE_NAME


def read_exchanges(path: Path) -> list[dict]:
    """The rows of an exchange record, in the meter's order (:func:`read_exchange_record` without its torn flag)."""
    return read_exchange_record(path)[0]


def read_exchange_record(path: Path) -> tuple[list[dict], bool]:
    """The rows of an exchange record, in the meter's order, and whether its last line was torn.

    A torn last line (the harness stopped mid-write) is left out; a line
    elsewhere that is not a JSON object is an error naming the file and the line.
    """
    raw = Path(path).read_bytes()
    lines = raw.split(b"\n")
    rows: list[dict] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            if n == len(lines):  # no newline after it: a write cut short
                return rows, True
            raise ValueError(f"{path}: line {n}: not a JSON object ({exc})") from None
        rows.append(row)
    return rows, False


def _clip(text: str, limit: int = EXCHANGE_TEXT_LIMIT) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def _bounded_input(value: Any) -> tuple[Any, bool]:
    """A tool input as recorded: the object itself, or its serialised start under ``_unparsed`` when too large."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return {"_unparsed": _short(value, EXCHANGE_TEXT_LIMIT)}, True
    if len(text) <= EXCHANGE_TEXT_LIMIT:
        return value, False
    return {"_unparsed": text[:EXCHANGE_TEXT_LIMIT]}, True


def flatten_tool_result(content: Any, limit: int = EXCHANGE_TEXT_LIMIT) -> tuple[str, bool]:
    """A tool result's content as text: strings and text blocks joined by newlines, other blocks as ``[image]`` etc."""
    if content is None:
        return "", False
    if isinstance(content, str):
        return _clip(content, limit)
    parts: list[str] = []
    size = 0
    for item in content if isinstance(content, list) else [content]:
        if isinstance(item, str):
            part = item
        elif isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            part = item["text"]
        elif isinstance(item, dict):
            part = f"[{str(item.get('type'))[:40]}]"
        else:
            part = f"[{type(item).__name__}]"
        size += len(part) + (1 if parts else 0)
        parts.append(part)
        if size > limit:
            break
    return _clip("\n".join(parts), limit)


# Which blocks a request adds. A block is known by a key: its role, its kind and what it says, less its
# ``cache_control`` (the client moves its cache breakpoints from request to request). A text, a tool call and a
# thinking block have keys of their own that the proxy can also compute from a streamed answer, so that the model's
# own answers, sent back in the next request's history, are known as already kept.


def _key(role: str, kind: str, payload: bytes) -> bytes:
    return hashlib.blake2b(f"{role}\0{kind}\0".encode() + payload, digest_size=16).digest()


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str).encode("ascii")


def _without_cache_control(block: dict) -> dict:
    out = {k: v for k, v in block.items() if k != "cache_control"}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = [
            {k: v for k, v in item.items() if k != "cache_control"} if isinstance(item, dict) else item
            for item in content
        ]
    return out


def block_key(role: str, block: Any) -> bytes:
    """The key of one content block of a request: the same for the same block wherever its cache breakpoint is."""
    try:
        if not isinstance(block, dict):
            return _key(role, "json", _canonical(block))
        kind, keys = block.get("type"), set(block) - {"cache_control"}
        if kind == "text" and keys == {"type", "text"} and isinstance(block["text"], str):
            return _key(role, "text", hashlib.blake2b(_text_bytes(block["text"]), digest_size=16).digest())
        if kind == "thinking" and keys == {"type", "thinking", "signature"}:
            thinking, signature = block["thinking"], block["signature"]
            if isinstance(thinking, str) and isinstance(signature, str):
                digest = hashlib.blake2b(_text_bytes(thinking), digest_size=16).digest()
                return _key(role, "thinking", digest + _text_bytes(signature))
        if kind == "tool_use" and keys == {"type", "id", "name", "input"}:
            return _key(role, "tool_use", _canonical([block["id"], block["name"], block["input"]]))
        return _key(role, "json", _canonical(_without_cache_control(block)))
    except (ValueError, TypeError, RecursionError):
        return secrets.token_bytes(16)  # no key: the block is kept as new


def _blocks_of(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return content
    return [] if content is None else [content]


def _block_row(block: Any) -> tuple[dict, bool]:
    """A request block other than a tool result, as the exchange record keeps it: an image or a document by its
    source's kind and size, any other block as an answer's block is kept."""
    if isinstance(block, dict) and block.get("type") in ("image", "document"):
        given = block.get("source")
        source: dict = given if isinstance(given, dict) else {}
        data = source.get("data")
        row = {"type": block["type"], "source_type": str(source.get("type"))[:40]}
        if isinstance(source.get("media_type"), str):
            row["media_type"] = source["media_type"][:80]
        if isinstance(data, str):
            row["bytes"] = len(data)
        return row, False
    return _content_row(block)


@dataclass
class RequestBlocks:
    """What a request adds to the run's record: the blocks the record does not hold yet, and their keys."""

    messages: int = 0
    tool_results: list[dict] = field(default_factory=list)
    blocks: list[dict] = field(default_factory=list)
    #: New blocks past ``REQUEST_BLOCKS_MAX``: counted only.
    unrecorded: int = 0
    truncated: bool = False
    #: The messages as sent: a request sent again carries the same.
    digest: str = ""
    #: Keys to remember once the exchange is written (the request's blocks and messages).
    keys: list[bytes] = field(default_factory=list, repr=False)

    def row(self) -> dict[str, Any]:
        return {
            "request_messages": self.messages,
            "request_tool_results": self.tool_results,
            "request_blocks": self.blocks,
            "request_blocks_unrecorded": self.unrecorded,
            "request_digest": self.digest,
        }


def request_blocks(body: dict, seen: Callable[[bytes], bool] = lambda key: False, parts: list[bytes] | None = None):
    """The blocks of a request the record does not hold yet (``seen`` says which it does).

    Every block of the system prompt and of every message is read, whatever
    its role: a tool result goes to ``tool_results`` (as before, flattened),
    any other block (a user's text, an image, a text or a call in the history
    the model did not say) to ``blocks`` with its message's index and role.
    A message whose bytes (``parts``, from :func:`serialise_request`) the
    record already holds is passed over whole. Never raises, whatever the body.
    """
    out = RequestBlocks()
    given = body.get("messages")
    messages: list = given if isinstance(given, list) else []
    out.messages = len(messages)
    digest = hashlib.blake2b(digest_size=16)
    todo: list[tuple[int | None, str, Any]] = []
    system = body.get("system")
    if system is not None:
        todo += [(None, "system", b) for b in _blocks_of(system)]
    for i, message in enumerate(messages):
        if parts is not None and i < len(parts):
            mkey = hashlib.blake2b(b"message\0" + parts[i], digest_size=16).digest()
        else:
            mkey = _key("message", "json", _canonical(message)) if isinstance(message, (dict, list)) else b""
        digest.update(mkey)
        if mkey and seen(mkey):
            continue
        out.keys.append(mkey)
        role = str(message.get("role"))[:40] if isinstance(message, dict) else "?"
        content = message.get("content") if isinstance(message, dict) else message
        todo += [(i, role, b) for b in _blocks_of(content)]
    out.digest = digest.hexdigest()
    mine: set[bytes] = set()
    for n, (index, role, block) in enumerate(todo):
        if len(mine) >= SEEN_KEYS_MAX:
            # More new blocks than the record remembers: the rest are counted, not read.
            out.unrecorded += len(todo) - n
            out.truncated = True
            break
        key = block_key(role, block)
        if key in mine or seen(key):
            continue
        mine.add(key)
        out.keys.append(key)
        if len(out.tool_results) + len(out.blocks) >= REQUEST_BLOCKS_MAX:
            out.unrecorded += 1
            out.truncated = True
            continue
        if isinstance(block, dict) and block.get("type") == "tool_result":
            text, cut = flatten_tool_result(block.get("content"))
            tool_use_id, cut_id = _clip(str(block.get("tool_use_id", "")), 1000)
            out.tool_results.append(
                {"tool_use_id": tool_use_id, "is_error": block.get("is_error") is True, "text": text}
            )
            out.truncated = out.truncated or cut or cut_id
        else:
            row, cut = _block_row(block)
            out.blocks.append({"message": index, "role": role, **row})
            out.truncated = out.truncated or cut
    return out


def request_record(body: dict) -> dict[str, Any]:
    """The request's side of its exchange row, the record holding nothing yet: every block is new."""
    blocks = request_blocks(body)
    return {**blocks.row(), "truncated": blocks.truncated}


def _content_row(block: Any) -> tuple[dict, bool]:
    """One block of a whole (JSON) answer as recorded, and whether something was cut."""
    if not isinstance(block, dict):
        return {"type": type(block).__name__}, False
    kind = block.get("type")
    if kind == "text":
        text, cut = _clip(block.get("text") if isinstance(block.get("text"), str) else "")
        return {"type": "text", "text": text}, cut
    if kind == "tool_use":
        tool_input, cut = _bounded_input(block.get("input", {}))
        tool_id, cut_id = _clip(str(block.get("id", "")), 1000)
        name, cut_name = _clip(str(block.get("name", "")), 1000)
        return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}, cut or cut_id or cut_name
    if kind in ("thinking", "redacted_thinking"):
        return {"type": "thinking"}, False  # what the model thought is not kept, only that it did
    return {"type": str(kind)[:80]}, False


class _StreamedBlock:
    """One content block of a streamed answer, its text or its tool input's JSON gathered up to the bound."""

    __slots__ = (
        "kind",
        "id",
        "name",
        "start_input",
        "parts",
        "size",
        "cut",
        "row",
        "hasher",
        "signature",
        "tool_input",
    )

    def __init__(self, start: dict) -> None:
        self.kind = start.get("type")
        self.id, self.name, self.start_input = start.get("id"), start.get("name"), start.get("input")
        self.parts: list[str] = []
        self.size = 0
        self.cut = False
        self.row: tuple[dict, bool] | None = None
        # A text's or a thinking's whole content, hashed as it comes (the record keeps only its first part).
        self.hasher = hashlib.blake2b(digest_size=16) if self.kind in ("text", "thinking") else None
        signature = start.get("signature")
        self.signature: str = signature if isinstance(signature, str) else ""
        self.tool_input: Any = None
        if self.kind == "text" and isinstance(start.get("text"), str) and start["text"]:
            self.hasher.update(_text_bytes(start["text"]))  # type: ignore[union-attr]
            self.add(start["text"])
        if self.kind == "thinking" and isinstance(start.get("thinking"), str):
            self.hasher.update(_text_bytes(start["thinking"]))  # type: ignore[union-attr]

    def add(self, text: str) -> None:
        if self.cut:
            return
        room = EXCHANGE_TEXT_LIMIT - self.size
        if len(text) > room:
            text, self.cut = text[:room], True
        self.parts.append(text)
        self.size += len(text)

    def delta(self, delta: dict) -> None:
        kind = delta.get("type")
        if kind == "text_delta" and self.kind == "text":
            text = str(delta.get("text", ""))
            self.hasher.update(_text_bytes(text))  # type: ignore[union-attr]
            self.add(text)
        elif kind == "input_json_delta" and self.kind == "tool_use":
            self.add(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta" and self.kind == "thinking":
            self.hasher.update(_text_bytes(str(delta.get("thinking", ""))))  # type: ignore[union-attr]
        elif kind == "signature_delta" and self.kind == "thinking":
            self.signature += str(delta.get("signature", ""))

    def key(self) -> bytes | None:
        """The block's key as the next request's history will carry it (None when it cannot be known)."""
        if self.kind == "text" and self.hasher is not None:
            return _key("assistant", "text", self.hasher.digest())
        if self.kind == "thinking" and self.hasher is not None:
            return _key("assistant", "thinking", self.hasher.digest() + _text_bytes(self.signature))
        if self.kind == "tool_use" and not self.finish()[1]:
            try:
                return _key("assistant", "tool_use", _canonical([self.id, self.name, self.tool_input]))
            except (ValueError, TypeError, RecursionError):
                return None
        return None

    def finish(self) -> tuple[dict, bool]:
        if self.row is not None:
            return self.row
        text = "".join(self.parts)
        if self.kind == "tool_use":
            if self.cut:
                tool_input: Any = {"_unparsed": text}
            elif not text:
                tool_input = self.start_input if isinstance(self.start_input, dict) else {}
            else:
                try:
                    tool_input = json.loads(text)
                except (ValueError, RecursionError):
                    tool_input = {"_unparsed": text}
            self.tool_input = tool_input
            row, cut = _content_row({"type": "tool_use", "id": self.id, "name": self.name, "input": tool_input})
            self.row = (row, cut or self.cut)
        elif self.kind == "text":
            self.row = ({"type": "text", "text": text}, self.cut)
        else:
            self.row = _content_row({"type": self.kind})
        return self.row


class AnswerRecord:
    """The content of one answer, gathered from its server-sent events or its whole JSON body, bounded.

    Never raises: an event it cannot read only marks the answer incomplete.
    """

    def __init__(self) -> None:
        self._blocks: dict[int, _StreamedBlock] = {}
        self._whole: list[tuple[dict, bool]] | None = None
        self._whole_keys: list[bytes] = []
        self.stop_reason: str | None = None
        self.complete = False
        self.failed = False

    def event(self, event: dict) -> None:
        try:
            kind = event.get("type")
            if kind == "content_block_start":
                self._blocks[int(event["index"])] = _StreamedBlock(event["content_block"])
            elif kind == "content_block_delta":
                self._blocks[int(event["index"])].delta(event["delta"])
            elif kind == "content_block_stop":
                self._blocks[int(event["index"])].finish()
            elif kind == "message_delta":
                reason = (event.get("delta") or {}).get("stop_reason")
                if isinstance(reason, str):
                    self.stop_reason = reason
            elif kind == "message_stop":
                self.complete = True
        except Exception:  # noqa: BLE001 - whatever the event held, relaying goes on; the record says incomplete
            self.failed = True

    def whole(self, message: dict) -> None:
        """A whole (JSON) answer: a message, or an error body (no content)."""
        try:
            content = message.get("content")
            self._whole = [_content_row(b) for b in (content if isinstance(content, list) else [])]
            self._whole_keys = [block_key("assistant", b) for b in (content if isinstance(content, list) else [])]
            reason = message.get("stop_reason")
            self.stop_reason = reason if isinstance(reason, str) else None
            self.complete = True
        except Exception:  # noqa: BLE001 - as in event()
            self.failed = True

    def content(self) -> tuple[list[dict], bool]:
        """The answer's content blocks in order, and whether some text was cut at the bound."""
        try:
            rows = self._whole if self._whole is not None else [self._blocks[i].finish() for i in sorted(self._blocks)]
        except Exception:  # noqa: BLE001 - as in event()
            self.failed = True
            return [], False
        return [row for row, _ in rows], any(cut for _, cut in rows)

    def keys(self) -> list[bytes]:
        """The keys of the answer's blocks (those that can be known), as the next request's history carries them."""
        if self._whole is not None:
            return list(self._whole_keys)
        try:
            keys = [self._blocks[i].key() for i in sorted(self._blocks)]
        except Exception:  # noqa: BLE001 - as in event()
            return []
        return [k for k in keys if k is not None]


# --------------------------------------------------------------------------
# Per-run meter
# --------------------------------------------------------------------------


def record_folder_name(run_id: str) -> str:
    """The run's folder under ``record_dir``: the run id itself when it is a plain name, else a safe spelling with a
    digest."""
    if _SAFE_NAME.match(run_id):
        return run_id
    plain = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._-")[-40:] or "run"
    return f"{plain}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class TokenBucket:
    """A rate limit: ``burst`` requests at once, refilled at ``per_minute``; the clock is the caller's."""

    def __init__(self, burst: int, per_minute: int) -> None:
        self.burst, self.per_minute = burst, per_minute
        self._tokens = float(burst)
        self._at: float | None = None
        self._lock = threading.Lock()

    def take(self, now: float) -> bool:
        """Take one request's token at time ``now`` (seconds); False when none is left."""
        with self._lock:
            if self._at is not None:
                self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._at) * self.per_minute / 60)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


class OpenRequest:
    """A request the proxy forwarded, from its reservation until it is booked: what its answer has said so far.

    The relay updates it as each event arrives (``message_start`` gives the
    input and cache usage, ``message_delta`` the output), so that whoever books
    it (the relay when the answer ends, or :meth:`RunMeter.close_books` when
    the run closes first) books what the upstream has said by then.
    """

    def __init__(
        self,
        info: dict,
        price: ModelPrice | None,
        worst: Decimal,
        max_tokens: int | None,
        blocks: RequestBlocks | None,
    ) -> None:
        self.info, self.price, self.worst, self.max_tokens, self.blocks = info, price, worst, max_tokens, blocks
        self.started = time.perf_counter()
        self.status = 502
        self.answered = False
        self.usage: Usage | None = None
        self.complete = False
        self.message_id: Any = None
        self.service_tier: Any = None
        self.note: str | None = None
        #: Why the answer ended before its end: ``upstream_cut``, ``event_line_bound``, ``run_closed``; None when whole.
        self.ended_by: str | None = None
        self.answer = AnswerRecord()
        self.booked = False

    def add_note(self, note: str) -> None:
        self.note = f"{self.note}; {note}" if self.note else note

    def usage_row(self) -> dict:
        """The usage row for what the answer has said: priced, with the rules for an answer that told too little."""
        row = {
            **self.info,
            "status": self.status,
            "message_id": self.message_id,
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 3),
        }
        if self.price is None:
            return {**row, "cost_usd": "0", "note": self.note}
        usage, complete, note = self.usage, self.complete, self.note
        if self.status != 200 and usage is None:
            usage, complete = Usage(), True  # the API does not bill a refused or failed request
            note = note or f"upstream status {self.status}: not billed"
        if usage is None:
            # An answer began but told nothing of its usage: charge its whole worst case.
            cost = self.worst
            usage = Usage()
            note = (note + "; " if note else "") + "no usage seen: charged the request's worst case"
        else:
            if not complete:
                # The final count never arrived: charge the whole output allowance.
                usage = Usage(**{**usage.as_dict(), "output_tokens": max(usage.output_tokens, self.max_tokens or 0)})
                note = (note + "; " if note else "") + "final usage not seen: output charged at max_tokens"
            cost = self.price.cost(usage)
        tier = self.service_tier
        if tier not in (None, "standard"):
            note = (
                note + "; " if note else ""
            ) + f"billed in service tier {tier!r}, priced at the table's standard rates"
        row.update(usage.as_dict())
        row.update(cost_usd=str(cost), usage_complete=complete, service_tier=tier, note=note)
        if self.ended_by is not None:
            row["ended_by"] = self.ended_by
        return row

    def exchange_row(self, cost_usd: str) -> dict | None:
        """The exchange row of a messages request the upstream answered or that was open when the run closed."""
        if self.blocks is None or not (self.answered or self.ended_by == "run_closed"):
            return None
        content, cut = self.answer.content()
        message_id = self.message_id
        return {
            "status": self.status if self.answered else None,
            "model": self.info["model"],
            "message_id": message_id if isinstance(message_id, str) else None,
            "stop_reason": self.answer.stop_reason,
            "complete": self.answer.complete and not self.answer.failed and self.ended_by is None,
            **self.blocks.row(),
            "response_content": content,
            "truncated": bool(self.blocks.truncated or cut),
            "cost_usd": cost_usd,
            "ended_by": self.ended_by,
        }


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
    #: The run's exchange record (``proxy_exchanges.jsonl``, beside the usage record).
    exchanges_path: Path
    metered_usd: Decimal = Decimal(0)
    requests: list[dict] = field(default_factory=list)
    #: The first refusal rows of each reason (at most ``REFUSAL_ROWS_PER_REASON`` each); ``refusal_counts`` has them
    #: all.
    refusals: list[dict] = field(default_factory=list)
    #: Refusals per reason key (``bad_token``, ``url_source``, ``cap``, ...), every one counted.
    refusal_counts: dict[str, int] = field(default_factory=dict)
    capped: bool = False
    capped_reason: str | None = None
    closed: bool = False
    #: Worst cases of the requests now in flight.
    reserved_usd: Decimal = Decimal(0)
    #: Whether the exchange record reached its bound (``EXCHANGES_MAX_BYTES``) and stopped.
    exchanges_truncated: bool = False
    #: Request headers outside the study's list, dropped rather than forwarded: how often, per name.
    dropped_headers: dict[str, int] = field(default_factory=dict)
    #: Requests still open when the run closed and booked then at their worst case.
    booked_at_close: int = 0
    count_bucket: TokenBucket = field(
        default_factory=lambda: TokenBucket(COUNT_TOKENS_BURST, COUNT_TOKENS_PER_MINUTE), repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _seq: int = 0
    _exchange_bytes: int = 0
    _servers: list[socketserver.BaseServer] = field(default_factory=list, repr=False)
    # Requests and connections now open; counted apart from the record's lock, which a long write can hold.
    _slots: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _in_flight: int = 0
    _in_flight_bytes: int = 0
    _connections: int = 0
    # Forwarded requests not yet booked, and the keys of the blocks the exchange record holds.
    _open: set[OpenRequest] = field(default_factory=set, repr=False)
    _seen: set[bytes] = field(default_factory=set, repr=False)
    _closer: Callable[[], Any] | None = field(default=None, repr=False)

    @property
    def env(self) -> dict[str, str]:
        """The agent-side variables for a host without the socket bridge (loopback TCP)."""
        return {"ANTHROPIC_BASE_URL": self.base_url, "ANTHROPIC_API_KEY": self.token}

    @property
    def open_requests(self) -> int:
        """Forwarded requests not yet booked."""
        with self._lock:
            return len(self._open)

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())

    def close(self) -> RunMeter:
        """Close the run on its proxy (:meth:`MeteringProxy.close_run`): refuse what comes, book what is open."""
        if self._closer is not None:
            self._closer()
        return self

    def _write(self, row: dict) -> dict:
        # Called with the lock held: the file order is the metering order.
        self._seq += 1
        row = {"run_id": self.run_id, "seq": self._seq, "at": _now(), **row}
        with self.record_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        return row

    def _write_exchange(self, row: dict) -> None:
        # Called with the lock held, right after the exchange's usage row: both files are in the metering order.
        if self.exchanges_truncated:
            return
        line = (json.dumps(row, default=str) + "\n").encode("ascii")
        if self._exchange_bytes + len(line) > EXCHANGES_MAX_BYTES:
            line = (json.dumps({"seq": row["seq"], "kind": "exchanges_truncated"}) + "\n").encode("ascii")
            self.exchanges_truncated = True
            log.warning(
                "model proxy: the exchange record of run %s reached %s bytes; further exchanges are metered, not "
                "recorded",
                self.run_id,
                EXCHANGES_MAX_BYTES,
            )
        with self.exchanges_path.open("ab") as fh:
            fh.write(line)
        self._exchange_bytes += len(line)

    def seen(self, key: bytes) -> bool:
        """Whether the exchange record already holds a block (or a whole message) with this key."""
        return key in self._seen

    def _remember(self, keys: Iterable[bytes]) -> None:
        # Called with the lock held, as the exchange row that holds these blocks is written.
        for key in keys:
            if len(self._seen) >= SEEN_KEYS_MAX:
                return
            self._seen.add(key)

    def refuse(self, key: str, reason: str, **detail: Any) -> dict:
        """Count a refusal under its reason key; the first few of each key are also written whole and kept."""
        key = re.sub(r"[^a-z0-9_]+", "_", key.lower())[:40] or "other"
        with self._lock:
            n = self.refusal_counts[key] = self.refusal_counts.get(key, 0) + 1
            row = {"kind": "refused", "reason_key": key, "reason": reason, **detail}
            if n <= REFUSAL_ROWS_PER_REASON:
                row = self._write(row)
                self.refusals.append(row)
        if n <= REFUSAL_ROWS_PER_REASON:
            log.warning("model proxy refused a request of run %s (%s): %s", self.run_id, key, reason[:300])
        elif n == REFUSAL_ROWS_PER_REASON + 1:
            log.warning("model proxy: further refusals (%s) of run %s are counted, not logged", key, self.run_id)
        return row

    def count_dropped_headers(self, names: Iterable[str]) -> None:
        with self._lock:
            for name in names:
                if name in self.dropped_headers or len(self.dropped_headers) < REFUSAL_ROWS_PER_REASON * 4:
                    self.dropped_headers[name] = self.dropped_headers.get(name, 0) + 1
                else:
                    self.dropped_headers["(other)"] = self.dropped_headers.get("(other)", 0) + 1

    def reserve(self, worst_usd: Decimal, request: OpenRequest | None = None) -> str | None:
        """Reserve a request's worst case (and hold ``request`` open until it is booked); the refusal reason when it
        would cross the cap. A run already closed refuses (:class:`RequestRefused`, ``run_closed``): nothing is
        forwarded once its books are being closed."""
        with self._lock:
            if self.closed:
                raise RequestRefused(
                    "run_closed",
                    f"run {self.run_id} is closed",
                    403,
                    "permission_error",
                    close=True,
                    record="run closed: the request came while its books were being closed",
                )
            if self.capped:
                return f"the run is already capped ({self.capped_reason})"
            if self.metered_usd + self.reserved_usd + worst_usd > self.cap_usd:
                return (
                    f"metered {self.metered_usd} USD + in flight {self.reserved_usd} USD + this request's worst case "
                    f"{worst_usd} USD would exceed the run's cap of {self.cap_usd} USD"
                )
            self.reserved_usd += worst_usd
            if request is not None:
                self._open.add(request)
            return None

    def mark_capped(self, reason: str) -> None:
        with self._lock:
            if not self.capped:
                self.capped, self.capped_reason = True, reason

    def book(self, request: OpenRequest) -> dict | None:
        """Book a forwarded request at what its answer said (and write its exchange row); once only.

        A request the run's close already booked at its worst case is not booked
        again: what its answer said, arriving late, is written as a ``late_answer``
        row that changes no sum.
        """
        row = request.usage_row()
        with self._lock:
            if request.booked:
                self._write(
                    {
                        "kind": "late_answer",
                        "request_kind": row.get("kind"),
                        **{k: row.get(k) for k in ("model", "status", "message_id", "cost_usd", "note")},
                        **{k: row[k] for k in Usage().as_dict() if k in row},
                    }
                )
                return None
            return self._settle(request, row)

    def _settle(self, request: OpenRequest, row: dict) -> dict:
        # Called with the lock held.
        request.booked = True
        self._open.discard(request)
        self.reserved_usd -= request.worst
        self.metered_usd += Decimal(row["cost_usd"])
        row = self._write({**row, "metered_usd": str(self.metered_usd)})
        self.requests.append(row)
        exchange = request.exchange_row(row["cost_usd"])
        if exchange is not None:
            self._write_exchange({"seq": row["seq"], "at": row["at"], **exchange})
            self._remember(request.blocks.keys if request.blocks is not None else ())
            self._remember(request.answer.keys())
        return row

    def close_books(self, wait_s: float) -> int:
        """Wait up to ``wait_s`` for the forwarded requests to be booked; book those still open at their worst case.

        Call once the run is closed (no request can be forwarded any more).
        Returns how many were booked at their worst case.
        """
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            with self._lock:
                if not self._open:
                    return 0
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        with self._lock:
            still = sorted(self._open, key=lambda r: r.started)
            for request in still:
                request.ended_by = "run_closed"
                said = request.note if not request.answered else request.usage_row().get("note")
                row = {
                    **request.usage_row(),
                    # Not answered yet: no status of the upstream's (the 502 an unreachable upstream gets is not it).
                    "status": request.status if request.answered else None,
                    "cost_usd": str(request.worst),
                    "booked_at": "worst_case",
                    "note": f"still open {wait_s:g} s after the run was closed: booked at its reserved worst case"
                    + (f"; {said}" if said else ""),
                }
                self._settle(request, row)
            self.booked_at_close += len(still)
        if still:
            log.warning(
                "model proxy: run %s closed with %d request(s) open: booked at their worst case",
                self.run_id,
                len(still),
            )
        return len(still)

    # -- admission --------------------------------------------------------------

    def enter_request(self, body_bytes: int) -> RequestRefused | None:
        """Take an in-flight slot for a request announcing ``body_bytes``; the refusal when none is free."""
        with self._slots:
            if self._in_flight >= MAX_IN_FLIGHT:
                return RequestRefused(
                    "too_many_in_flight",
                    f"more than {MAX_IN_FLIGHT} requests of this run at once are not served",
                    429,
                    "rate_limit_error",
                    close=True,
                )
            if self._in_flight_bytes + body_bytes > MAX_IN_FLIGHT_BODY_BYTES:
                return RequestRefused(
                    "in_flight_bytes",
                    f"content-length {body_bytes}: the run's requests in flight would hold more "
                    f"than {MAX_IN_FLIGHT_BODY_BYTES} bytes of body",
                    429,
                    "rate_limit_error",
                    close=True,
                )
            self._in_flight += 1
            self._in_flight_bytes += body_bytes
            return None

    def leave_request(self, body_bytes: int) -> None:
        with self._slots:
            self._in_flight -= 1
            self._in_flight_bytes -= body_bytes

    def connection_opened(self) -> bool:
        """Count a new connection; False (not counted) when the run already has ``MAX_OPEN_CONNECTIONS``."""
        with self._slots:
            if self._connections >= MAX_OPEN_CONNECTIONS:
                return False
            self._connections += 1
            return True

    def connection_closed(self) -> None:
        with self._slots:
            self._connections -= 1


# --------------------------------------------------------------------------
# The HTTP side
# --------------------------------------------------------------------------

MESSAGES_ROUTE = "/v1/messages"
COUNT_ROUTE = "/v1/messages/count_tokens"


def _error_body(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def _linger(sock: socket.socket) -> None:
    """Half-close, then read and drop what the client still sends, within a bound.

    A connection closed with unread bytes is reset, and a reset can destroy
    the answer before the client reads it: a client that sent its body at once
    (as most do) then sees a broken connection instead of the refusal. The
    bytes are dropped as they come, so nothing accumulates.
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        deadline, left = time.monotonic() + LINGER_S, LINGER_BYTES
        while left > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            chunk = sock.recv(min(65536, left))
            if not chunk:
                break
            left -= len(chunk)
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pilot-model-proxy"
    #: An idle agent connection is dropped after this long (a tool call between two requests can take minutes).
    timeout = 3600
    sys_version = ""
    server: _Listener

    def log_message(self, format: str, *args: Any) -> None:  # `format`: the base class's parameter name
        log.debug("model proxy: " + format, *args)

    def setup(self) -> None:
        super().setup()
        self._linger = False
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def finish(self) -> None:
        super().finish()
        if self._linger:
            _linger(self.connection)

    def handle_expect_100(self) -> bool:
        # Deferred: "100 Continue" is sent only once the token, the size and a slot are checked (see _read_exact).
        return True

    def do_POST(self) -> None:
        self._handle()

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_POST

    # -- plumbing -----------------------------------------------------------

    def _declared_length(self) -> int:
        """The body size the headers announce; RequestRefused (the body unread) when it is not one bounded number."""
        if self.headers.get("transfer-encoding") is not None:
            # A chunked upload has no size to check before reading it; the pinned CLI always sends a Content-Length.
            raise RequestRefused(
                "length_required",
                "request bodies must carry a Content-Length (chunked uploads are not accepted)",
                411,
                "invalid_request_error",
                close=True,
            )
        values = [v.strip() for v in self.headers.get_all("content-length") or []]
        if not values:
            return 0
        if len(set(values)) != 1 or not re.fullmatch(r"[0-9]{1,15}", values[0]):
            raise RequestRefused(
                "bad_content_length",
                f"content-length {_short(values, 100)}: must be one non-negative integer",
                400,
                close=True,
            )
        n = int(values[0])
        if n > MAX_BODY_BYTES:
            raise RequestRefused(
                "body_too_large",
                f"content-length {n}: request bodies over {MAX_BODY_BYTES} bytes are refused",
                413,
                "request_too_large",
                close=True,
            )
        return n

    def _read_exact(self, n: int) -> bytes:
        """Exactly the announced ``n`` bytes of body (never more), each wait for them bounded."""
        if n == 0:
            return b""
        if (self.headers.get("expect") or "").lower() == "100-continue":
            self.send_response_only(100)
            self.end_headers()
        self.connection.settimeout(BODY_IDLE_TIMEOUT_S)
        try:
            data = self.rfile.read(n)
        except OSError:
            data = b""
        finally:
            self.connection.settimeout(self.timeout)
        if len(data) != n:
            raise RequestRefused(
                "body_incomplete",
                f"the request body ended (or stalled) before its content-length of {n} bytes",
                400,
                close=True,
            )
        return data

    def _send_error(self, status: int, kind: str, message: str, close: bool = False) -> None:
        data = _error_body(kind, message)
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("x-should-retry", "false")
            if close:
                # The body was not read: the connection cannot carry another request.
                self.send_header("connection", "close")
                self._linger = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            self.close_connection = True

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
        meter = self.server.meter
        route = urlsplit(self.path).path.rstrip("/")
        try:
            self._dispatch(meter, self.server.proxy, route)
        except RequestRefused as refused:
            if refused.close:
                self.close_connection = True
            meter.refuse(refused.key, refused.record, path=route[:200], method=self.command, **refused.detail)
            self._send_error(refused.status, refused.error_type, refused.message, close=refused.close)

    def _dispatch(self, meter: RunMeter, proxy: MeteringProxy, route: str) -> None:
        # Everything the headers can decide is decided before a byte of the body is read.
        if not meter.token_ok(self._token()):
            raise RequestRefused(
                "bad_token",
                "invalid x-api-key",
                401,
                "authentication_error",
                close=True,
                record="missing or wrong run token",
            )
        if meter.closed:
            raise RequestRefused(
                "run_closed", f"run {meter.run_id} is closed", 403, "permission_error", close=True, record="run closed"
            )
        if self.command in ("HEAD", "GET") and route == "":
            # A reachability probe of the base URL: answered here, nothing leaves.
            if (
                self.headers.get("transfer-encoding") is not None
                or (self.headers.get("content-length") or "0").strip() != "0"
            ):
                self.close_connection = True
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.command != "POST" or route not in (MESSAGES_ROUTE, COUNT_ROUTE):
            raise RequestRefused(
                "not_offered",
                f"{self.command} {(route or '/')[:200]} is not offered by the run's model proxy",
                404,
                "not_found_error",
                close=True,
                record="endpoint not offered by the proxy",
            )
        refused = proxy.headers.refusal(self.headers)
        if refused is not None:
            raise refused
        n = self._declared_length()
        if route == COUNT_ROUTE and not meter.count_bucket.take(proxy.clock()):
            raise RequestRefused(
                "rate_limited",
                f"count_tokens: more than {COUNT_TOKENS_BURST} requests at once or "
                f"{COUNT_TOKENS_PER_MINUTE} a minute are not available to a run",
                429,
                "rate_limit_error",
                close=True,
            )
        busy = meter.enter_request(n)
        if busy is not None:
            raise busy
        try:
            body = parse_body(self._read_exact(n))
            if route == COUNT_ROUTE:
                facts = check_request(body, count_tokens=True, models=meter.models, prices=proxy.prices)
                payload = serialise_body(body)
                del body  # only the forwarded bytes are held while the answer is relayed
                request = OpenRequest(
                    {"kind": "count_tokens", "path": route, "model": facts.model}, None, Decimal(0), None, None
                )
                meter.reserve(Decimal(0), request)
                return self._forward(meter, proxy, payload, request)
            plan = self._plan_messages(meter, proxy, body)
            del body
            if plan is not None:
                self._forward(meter, proxy, *plan)
            return None
        finally:
            meter.leave_request(n)

    def _plan_messages(self, meter: RunMeter, proxy: MeteringProxy, body: Any) -> tuple | None:
        """Check a messages request and reserve its worst case: the forward's arguments, or None when the cap refused
        it."""
        facts = check_request(body, count_tokens=False, models=meter.models, prices=proxy.prices)
        payload, parts = serialise_request(body)
        blocks = request_blocks(body, meter.seen, parts)
        price = proxy.prices.price(facts.model)
        max_tokens = facts.max_tokens
        assert max_tokens is not None
        bound, method = input_bound(len(payload), facts.images, facts.documents, price)
        worst = price.worst_case(bound, max_tokens, facts.one_hour_cache)
        info = {
            "kind": "messages",
            "path": MESSAGES_ROUTE,
            "model": facts.model,
            "stream": bool(body.get("stream")),
            "max_tokens": max_tokens,
        }
        request = OpenRequest(info, price, worst, max_tokens, blocks)
        refusal = meter.reserve(worst, request)
        if refusal is not None and not meter.capped:
            counted = proxy.count_tokens(body, self.headers, urlsplit(self.path).query, run_id=meter.run_id)
            if counted is None:
                refusal += "; count_tokens could not tighten the bound"
            else:
                bound, method = min(bound, count_input_bound(counted, price)), "count_tokens"
                worst = request.worst = price.worst_case(bound, max_tokens, facts.one_hour_cache)
                refusal = meter.reserve(worst, request)
        if refusal is not None:
            meter.mark_capped(refusal)
            meter.refuse(
                "cap",
                refusal,
                path=MESSAGES_ROUTE,
                model=facts.model,
                max_tokens=max_tokens,
                input_bound_tokens=bound,
                bound_method=method,
                worst_case_usd=str(worst),
                one_hour_cache=facts.one_hour_cache,
                capped=True,
            )
            self._send_error(CAP_STATUS, CAP_ERROR_TYPE, f"{CAP_MESSAGE_PREFIX}: {refusal}")
            return None
        info.update(
            input_bound_tokens=bound,
            bound_method=method,
            one_hour_cache=facts.one_hour_cache,
            worst_case_usd=str(worst),
        )
        return payload, request

    def _forward(self, meter: RunMeter, proxy: MeteringProxy, payload: bytes, request: OpenRequest) -> None:
        """Relay one request upstream and its answer back; book it before the answer's last byte leaves.

        Booking first means that once the agent has a whole answer, the meter
        already holds its cost (and its exchange row). Whatever ends the relay,
        the request is booked (:meth:`RunMeter.book`, once).
        """
        headers, dropped = proxy.headers.forward(self.headers)
        if dropped:
            meter.count_dropped_headers(dropped)
        if proxy.label_upstream:
            headers[RUN_ID_HEADER] = run_id_header_value(meter.run_id)
        try:
            try:
                resp = proxy.upstream_request(self.command, self._upstream_path(), payload, headers)
            except (OSError, http.client.HTTPException) as exc:
                request.add_note(f"upstream unreachable: {exc}")
                request.usage, request.complete = Usage(), True
                meter.book(request)
                self._send_error(502, "api_error", "the model API could not be reached")
                return
            request.status, request.answered = resp.status, True
            ctype = (resp.getheader("content-type") or "").lower()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP:
                    self.send_header(k, v)
            if "text/event-stream" in ctype:
                client_ok = self._relay_stream(resp, request)
                meter.book(request)
                if client_ok and request.ended_by is None:
                    try:
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        self.close_connection = True
                else:
                    self.close_connection = True
            else:
                data = resp.read()
                if request.info["kind"] == "messages":
                    self._read_whole(data, request)
                meter.book(request)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            if not resp.will_close and request.ended_by is None:
                proxy.release_connection(resp)
        finally:
            if not request.booked:
                meter.book(request)

    @staticmethod
    def _read_whole(data: bytes, request: OpenRequest) -> None:
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            message = None
        if isinstance(message, dict):
            request.answer.whole(message)
        if request.status != 200:
            return
        try:
            if not isinstance(message, dict):
                raise ValueError("not an object")
            request.usage = Usage.from_api(message["usage"])
            request.message_id, request.complete = message.get("id"), True
            request.service_tier = message["usage"].get("service_tier")
        except (ValueError, KeyError, TypeError, AttributeError):
            request.add_note("answer carried no readable usage")

    def _relay_stream(self, resp: http.client.HTTPResponse, request: OpenRequest) -> bool:
        """Relay server-sent events chunk by chunk, reading usage from message_start and message_delta as they come.

        Lines are split in linear time and held only up to the bound
        (:class:`EventLines`): a longer line ends the answer there, as a cut
        (the agent's stream is closed without its last chunk). Returns whether
        the agent is still connected. When it is not, the upstream answer is
        still read to its end: it is billed whole, so its usage must be seen.
        """
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        client_ok = True
        lines = EventLines(MAX_EVENT_LINE_BYTES)
        while True:
            try:
                chunk = resp.read1(65536)
            except (OSError, http.client.HTTPException) as exc:
                # The upstream cut its stream: the answer is booked at what it said (the output at max_tokens), and
                # the agent sees the cut as it happened rather than a stream the proxy closed for it.
                request.add_note(f"the upstream cut the stream mid-way ({type(exc).__name__})")
                request.ended_by = "upstream_cut"
                break
            if not chunk:
                break
            if client_ok:
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                except OSError:
                    client_ok = False
                    request.add_note("the agent closed the connection mid-stream")
            try:
                for line in lines.feed(chunk):
                    if line.startswith(b"data:"):
                        self._read_event(line[5:], request)
            except LineTooLong:
                # No event of the API is this long: the answer ends here, booked at what its events had said.
                request.add_note(f"an event line passed {MAX_EVENT_LINE_BYTES} bytes: the answer was ended there")
                request.ended_by = "event_line_bound"
                request.answer.failed = True
                resp.close()
                break
        return client_ok

    @staticmethod
    def _read_event(data: bytes, request: OpenRequest) -> None:
        try:
            event = json.loads(data)
            if not isinstance(event, dict):
                raise ValueError("not an object")
            kind = event.get("type")
            if kind == "message_start":
                message = event.get("message") or {}
                request.usage, request.message_id = Usage.from_api(message.get("usage")), message.get("id")
                request.service_tier = (message.get("usage") or {}).get("service_tier")
            elif kind == "message_delta" and request.usage is not None:
                request.usage = request.usage.updated(event.get("usage"))
                request.complete = True
            elif kind == "error":
                request.add_note(f"stream error event: {json.dumps(event.get('error'), default=str)[:300]}")
        except (ValueError, TypeError, AttributeError, RecursionError):
            request.answer.failed = True
            return
        request.answer.event(event)


class _Listener(socketserver.ThreadingMixIn):
    daemon_threads = True
    block_on_close = False
    # socketserver's default backlog of 5 makes a burst of connects wait a second for a SYN retransmit.
    request_queue_size = 64
    meter: RunMeter
    proxy: MeteringProxy

    def process_request(self, request: Any, client_address: Any) -> None:
        # Each connection is a thread: past the run's bound it is closed at once, before any byte is read.
        if not self.meter.connection_opened():
            self.meter.refuse(
                "too_many_connections", f"more than {MAX_OPEN_CONNECTIONS} open connections: closed unread"
            )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.meter.connection_closed()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self.meter.connection_closed()


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

    def __init__(
        self,
        upstream_url: str,
        api_key: str,
        prices: PriceTable,
        record_dir: Path,
        *,
        socket_dir: Path | None = None,
        timeout_s: float = 600.0,
        ssl_context: ssl.SSLContext | None = None,
        label_upstream: bool = False,
        clock: Callable[[], float] = time.monotonic,
        headers: HeaderPolicy | None = None,
        close_wait_s: float | None = None,
    ) -> None:
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
        #: Seconds, for the count_tokens rate limit (a test passes its own).
        self.clock = clock
        #: Which request headers pass upstream (default: study.yml's ``model_proxy``).
        self.headers = headers if headers is not None else HeaderPolicy.from_study()
        #: How long closing a run waits for its requests in flight (:meth:`close_run`; default ``CLOSE_WAIT_S``).
        self.close_wait_s = CLOSE_WAIT_S if close_wait_s is None else float(close_wait_s)
        self._runs: dict[str, RunMeter] = {}
        self._lock = threading.Lock()
        self._pool = threading.local()
        self._started = False

    def __repr__(self) -> str:
        return f"MeteringProxy(upstream={self.upstream_url!r}, runs={sorted(self._runs)})"

    # -- lifetime -------------------------------------------------------------

    def start(self) -> MeteringProxy:
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

    def __enter__(self) -> MeteringProxy:
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
            meter = RunMeter(
                run_id=run_id,
                cap_usd=cap_usd,
                model=model,
                models=models,
                token=f"pilot-run-{secrets.token_urlsafe(32)}",
                socket_path=sock,
                base_url=f"http://127.0.0.1:{tcp.server_address[1]}",
                record_path=run_dir / USAGE_FILE_NAME,
                exchanges_path=run_dir / EXCHANGES_FILE_NAME,
            )
            meter._closer = lambda: self.close_run(run_id)
            # Present from the start, so that a run without exchanges is told apart from a run without a proxy.
            meter.exchanges_path.touch()
            meter._exchange_bytes = meter.exchanges_path.stat().st_size
            for server in (tcp, unix):
                server.meter, server.proxy = meter, self
                meter._servers.append(server)
                threading.Thread(
                    target=server.serve_forever,
                    kwargs={"poll_interval": 0.1},
                    name=f"model-proxy-{run_id}",
                    daemon=True,
                ).start()
            self._runs[run_id] = meter
        meter._write(
            {
                "kind": "opened",
                "cap_usd": str(cap_usd),
                "model": model,
                "models": sorted(models),
                "upstream": self.upstream_url,
            }
        )
        return meter

    def close_run(self, run_id: str, wait_s: float | None = None) -> RunMeter:
        """Close the run's books: refuse whatever comes, wait for what is in flight, book what is still open.

        From this call on no request of the run is forwarded (one on a
        connection still open is refused and counted, ``run_closed``) and the
        listeners close. The requests already forwarded get up to ``wait_s``
        (default ``close_wait_s``) to be answered and booked at what their
        answers say; any still open then is booked at its reserved worst case,
        so the run's metered cost never misses a request the upstream bills.
        Idempotent.
        """
        meter = self._runs[run_id]
        with meter._lock:
            if meter.closed:
                return meter
            meter.closed = True
        for server in meter._servers:
            server.shutdown()
            server.server_close()
        meter.socket_path.unlink(missing_ok=True)
        meter.close_books(self.close_wait_s if wait_s is None else wait_s)
        with meter._lock:
            counts = dict(sorted(meter.refusal_counts.items()))
            meter._write({"kind": "refusals", "counts": counts})
            meter._write(
                {
                    "kind": "closed",
                    "metered_usd": str(meter.metered_usd),
                    "capped": meter.capped,
                    "capped_reason": meter.capped_reason,
                    "requests": len(meter.requests),
                    "refusals": sum(counts.values()),
                    "booked_at_close": meter.booked_at_close,
                    "dropped_headers": dict(sorted(meter.dropped_headers.items())),
                }
            )
        if any(n > REFUSAL_ROWS_PER_REASON for n in counts.values()):
            log.warning("model proxy: run %s closed with refusals %s", run_id, counts)
        return meter

    def meter(self, run_id: str) -> RunMeter:
        return self._runs[run_id]

    # -- upstream -------------------------------------------------------------

    def _connect(self) -> http.client.HTTPConnection:
        if self._ssl is not None:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout_s, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)

    def upstream_request(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> http.client.HTTPResponse:
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
        payload = json.dumps({k: v for k, v in body.items() if k in COUNT_KEYS}).encode()
        headers = {
            "content-type": "application/json",
            "x-api-key": self._api_key,
            "accept-encoding": "identity",
            "content-length": str(len(payload)),
        }
        for name in ("anthropic-version", "anthropic-beta"):
            # The request's own, already checked against the study's lists (HeaderPolicy.refusal).
            if client_headers.get(name) and name in self.headers.forwarded:
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
