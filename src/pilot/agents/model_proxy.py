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

Beside the usage record the proxy writes ``proxy_exchanges.jsonl``: for each
answered messages request, the tool results the model was shown and the
content it answered (text, tool calls), bounded; see :func:`read_exchanges`.
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
    }
)
#: The exchange record beside the usage record.
EXCHANGES_FILE_NAME = "proxy_exchanges.jsonl"
#: The longest text (and serialised tool input) an exchange row keeps of one block; longer ones are cut.
EXCHANGE_TEXT_LIMIT = 100_000
#: The exchange rows one run may write; past it one ``exchanges_truncated`` row, and metering goes on.
EXCHANGES_MAX_BYTES = 64 * 1024 * 1024
#: No server-sent event line of an answer is longer than this; a longer one is dropped, not held.
MAX_EVENT_LINE_BYTES = 16 * 1024 * 1024
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
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "x-api-key",
        "authorization",
        "accept-encoding",
        "expect",
    }
)
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
# The anthropic-beta header is passed on as the client sends it: the pinned CLI sends several betas, and an
# allow-list written without seeing every one it may send could break it. What a beta could add is held by the
# field and block allow-lists (no mcp_servers, container, server tools, URL or file sources).


# --------------------------------------------------------------------------
# What a request may carry
# --------------------------------------------------------------------------


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


def serialise_body(body: dict) -> bytes:
    """The bytes the proxy forwards: the checked value written anew.

    So the API reads exactly what the proxy checked: no escape, duplicate key or
    other spelling of the client's can mean one thing here and another there.
    """
    try:
        try:
            return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (sent as an escape) has no UTF-8 form: write every non-ASCII character escaped instead.
            return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("ascii")
    except (ValueError, RecursionError) as exc:
        raise RequestRefused(
            "invalid_json", f"the request body cannot be forwarded as JSON ({str(exc)[:200]})"
        ) from None


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


def request_record(body: dict) -> dict[str, Any]:
    """The request's side of its exchange row: its message count and the tool results of its last user message."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    last_user = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None)
    content = last_user.get("content") if last_user is not None else None
    results, truncated = [], False
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            text, cut = flatten_tool_result(block.get("content"))
            tool_use_id, cut_id = _clip(str(block.get("tool_use_id", "")), 1000)
            results.append({"tool_use_id": tool_use_id, "is_error": block.get("is_error") is True, "text": text})
            truncated = truncated or cut or cut_id
    return {"request_messages": len(messages), "request_tool_results": results, "truncated": truncated}


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

    __slots__ = ("kind", "id", "name", "start_input", "parts", "size", "cut", "row")

    def __init__(self, start: dict) -> None:
        self.kind = start.get("type")
        self.id, self.name, self.start_input = start.get("id"), start.get("name"), start.get("input")
        self.parts: list[str] = []
        self.size = 0
        self.cut = False
        self.row: tuple[dict, bool] | None = None
        if self.kind == "text" and isinstance(start.get("text"), str) and start["text"]:
            self.add(start["text"])

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
            self.add(str(delta.get("text", "")))
        elif kind == "input_json_delta" and self.kind == "tool_use":
            self.add(str(delta.get("partial_json", "")))

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
    #: The first refusal rows of each reason (at most ``REFUSAL_ROWS_PER_REASON`` each); ``refusal_counts`` has them all.
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

    def _write_exchange(self, row: dict) -> None:
        # Called with the lock held, right after the exchange's usage row: both files are in the metering order.
        if self.exchanges_truncated:
            return
        line = (json.dumps(row, default=str) + "\n").encode("ascii")
        if self._exchange_bytes + len(line) > EXCHANGES_MAX_BYTES:
            line = (json.dumps({"seq": row["seq"], "kind": "exchanges_truncated"}) + "\n").encode("ascii")
            self.exchanges_truncated = True
            log.warning(
                "model proxy: the exchange record of run %s reached %s bytes; further exchanges are metered, not recorded",
                self.run_id,
                EXCHANGES_MAX_BYTES,
            )
        with self.exchanges_path.open("ab") as fh:
            fh.write(line)
        self._exchange_bytes += len(line)

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

    def reserve(self, worst_usd: Decimal) -> str | None:
        """Reserve a request's worst case; the refusal reason when it would cross the cap."""
        with self._lock:
            if self.capped:
                return f"the run is already capped ({self.capped_reason})"
            if self.metered_usd + self.reserved_usd + worst_usd > self.cap_usd:
                return (
                    f"metered {self.metered_usd} USD + in flight {self.reserved_usd} USD + this request's worst case "
                    f"{worst_usd} USD would exceed the run's cap of {self.cap_usd} USD"
                )
            self.reserved_usd += worst_usd
            return None

    def mark_capped(self, reason: str) -> None:
        with self._lock:
            if not self.capped:
                self.capped, self.capped_reason = True, reason

    def settle(self, worst_usd: Decimal, row: dict, exchange: dict | None = None) -> dict:
        """Release a request's reservation and book what it cost (and, for an answered messages request, its exchange)."""
        with self._lock:
            self.reserved_usd -= worst_usd
            self.metered_usd += Decimal(row["cost_usd"])
            row = self._write({**row, "metered_usd": str(self.metered_usd)})
            self.requests.append(row)
            if exchange is not None:
                self._write_exchange({"seq": row["seq"], "at": row["at"], **exchange})
            return row

    def record(self, row: dict) -> dict:
        """Book an exchange that costs nothing (a count_tokens call)."""
        with self._lock:
            row = self._write({**row, "metered_usd": str(self.metered_usd)})
            self.requests.append(row)
            return row

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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
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
                return self._forward(
                    meter,
                    proxy,
                    payload,
                    {"kind": "count_tokens", "path": route, "model": facts.model},
                    None,
                    Decimal(0),
                    None,
                    None,
                )
            plan = self._plan_messages(meter, proxy, body)
            del body
            if plan is not None:
                self._forward(meter, proxy, *plan)
            return None
        finally:
            meter.leave_request(n)

    def _plan_messages(self, meter: RunMeter, proxy: MeteringProxy, body: Any) -> tuple | None:
        """Check a messages request and reserve its worst case: the forward's arguments, or None when the cap refused it."""
        facts = check_request(body, count_tokens=False, models=meter.models, prices=proxy.prices)
        payload = serialise_body(body)
        exchange_request = request_record(body)
        price = proxy.prices.price(facts.model)
        max_tokens = facts.max_tokens
        assert max_tokens is not None
        bound, method = input_bound(len(payload), facts.images, facts.documents, price)
        worst = price.worst_case(bound, max_tokens, facts.one_hour_cache)
        refusal = meter.reserve(worst)
        if refusal is not None and not meter.capped:
            counted = proxy.count_tokens(body, self.headers, urlsplit(self.path).query, run_id=meter.run_id)
            if counted is None:
                refusal += "; count_tokens could not tighten the bound"
            else:
                bound, method = min(bound, count_input_bound(counted, price)), "count_tokens"
                worst = price.worst_case(bound, max_tokens, facts.one_hour_cache)
                refusal = meter.reserve(worst)
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
        info = {
            "kind": "messages",
            "path": MESSAGES_ROUTE,
            "model": facts.model,
            "stream": bool(body.get("stream")),
            "max_tokens": max_tokens,
            "input_bound_tokens": bound,
            "bound_method": method,
            "one_hour_cache": facts.one_hour_cache,
            "worst_case_usd": str(worst),
        }
        return payload, info, price, worst, max_tokens, exchange_request

    def _forward(
        self,
        meter: RunMeter,
        proxy: MeteringProxy,
        payload: bytes,
        info: dict,
        price: ModelPrice | None,
        worst: Decimal,
        max_tokens: int | None,
        exchange_request: dict | None,
    ) -> None:
        """Relay one request upstream and its answer back; book it before the answer's last byte leaves.

        Booking first means that once the agent has a whole answer, the meter
        already holds its cost (and its exchange row).
        """
        started = time.perf_counter()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP and k.lower() != RUN_ID_HEADER}
        if proxy.label_upstream:
            headers[RUN_ID_HEADER] = run_id_header_value(meter.run_id)
        state: dict[str, Any] = {
            "usage": None,
            "complete": False,
            "status": 502,
            "message_id": None,
            "note": None,
            "booked": False,
            "answered": False,
        }
        answer = AnswerRecord()

        def book() -> None:
            if state["booked"]:
                return
            state["booked"] = True
            row = {
                **info,
                "status": state["status"],
                "message_id": state["message_id"],
                "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            }
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
                note = (
                    note + "; " if note else ""
                ) + f"billed in service tier {tier!r}, priced at the table's standard rates"
            row.update(usage.as_dict())
            row.update(cost_usd=str(cost), usage_complete=complete, service_tier=tier, note=note)
            meter.settle(worst, row, self._exchange_row(state, answer, info, exchange_request))

        try:
            try:
                resp = proxy.upstream_request(self.command, self._upstream_path(), payload, headers)
            except (OSError, http.client.HTTPException) as exc:
                state["note"] = f"upstream unreachable: {exc}"
                state["usage"], state["complete"] = Usage(), True
                book()
                self._send_error(502, "api_error", "the model API could not be reached")
                return
            state["status"], state["answered"] = resp.status, True
            ctype = (resp.getheader("content-type") or "").lower()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP:
                    self.send_header(k, v)
            if "text/event-stream" in ctype:
                client_ok = self._relay_stream(resp, state, answer)
                book()
                if client_ok and not state.get("upstream_cut"):
                    try:
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        self.close_connection = True
                else:
                    self.close_connection = True
            else:
                data = resp.read()
                if info["kind"] == "messages":
                    self._read_whole(data, resp.status, state, answer)
                book()
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            if not resp.will_close and not state.get("upstream_cut"):
                proxy.release_connection(resp)
        finally:
            book()

    @staticmethod
    def _exchange_row(
        state: dict[str, Any], answer: AnswerRecord, info: dict, exchange_request: dict | None
    ) -> dict | None:
        """The exchange row of a messages request the upstream answered (None for any other)."""
        if exchange_request is None or not state["answered"]:
            return None
        content, cut = answer.content()
        message_id = state["message_id"]
        return {
            "status": state["status"],
            "model": info["model"],
            "message_id": message_id if isinstance(message_id, str) else None,
            "stop_reason": answer.stop_reason,
            "complete": answer.complete and not answer.failed,
            "request_messages": exchange_request["request_messages"],
            "request_tool_results": exchange_request["request_tool_results"],
            "response_content": content,
            "truncated": bool(exchange_request["truncated"] or cut),
        }

    @staticmethod
    def _read_whole(data: bytes, status: int, state: dict[str, Any], answer: AnswerRecord) -> None:
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            message = None
        if isinstance(message, dict):
            answer.whole(message)
        if status != 200:
            return
        try:
            if not isinstance(message, dict):
                raise ValueError("not an object")
            state["usage"] = Usage.from_api(message["usage"])
            state["message_id"], state["complete"] = message.get("id"), True
            state["service_tier"] = message["usage"].get("service_tier")
        except (ValueError, KeyError, TypeError, AttributeError):
            state["note"] = "answer carried no readable usage"

    def _relay_stream(self, resp: http.client.HTTPResponse, state: dict[str, Any], answer: AnswerRecord) -> bool:
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
            try:
                chunk = resp.read1(65536)
            except (OSError, http.client.HTTPException) as exc:
                # The upstream cut its stream: the answer is booked as incomplete (at its worst case), and the agent
                # sees the cut as it happened rather than a stream the proxy closed for it.
                state["note"] = f"the upstream cut the stream mid-way ({type(exc).__name__})"
                state["upstream_cut"] = True
                break
            if not chunk:
                break
            if client_ok:
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                except OSError:
                    client_ok = False
                    state["note"] = "the agent closed the connection mid-stream"
            pending += chunk
            if b"\n" in chunk:
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.startswith(b"data:"):
                        self._read_event(line[5:], state, answer)
            if len(pending) > MAX_EVENT_LINE_BYTES:
                # No event is this long: drop it (the record says incomplete) rather than hold it.
                pending, answer.failed = b"", True
        return client_ok

    @staticmethod
    def _read_event(data: bytes, state: dict[str, Any], answer: AnswerRecord) -> None:
        try:
            event = json.loads(data)
            if not isinstance(event, dict):
                raise ValueError("not an object")
            kind = event.get("type")
            if kind == "message_start":
                message = event.get("message") or {}
                state["usage"], state["message_id"] = Usage.from_api(message.get("usage")), message.get("id")
                state["service_tier"] = (message.get("usage") or {}).get("service_tier")
            elif kind == "message_delta" and state["usage"] is not None:
                state["usage"] = state["usage"].updated(event.get("usage"))
                state["complete"] = True
            elif kind == "error":
                state["note"] = f"stream error event: {json.dumps(event.get('error'), default=str)[:300]}"
        except (ValueError, TypeError, AttributeError, RecursionError):
            answer.failed = True
            return
        answer.event(event)


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
