"""The Messages API's wire format, as the model proxy reads and writes it.

A request body is parsed once (:func:`parse_body`; NaN and Infinity are not
JSON) and, once checked, written anew (:func:`serialise_request`), so the API
reads exactly what the proxy checked. Answers arrive as server-sent events,
split into lines in linear time and bounded in length (:class:`EventLines`).
A request the proxy does not forward is a :class:`RequestRefused`, answered
as the API answers an error. Nothing here decides what is allowed
(:mod:`.policy`) or what it costs (:mod:`.metering`).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, unquote

#: No server-sent event line of an answer is longer than this: a longer one ends the answer where it stands (it is
#: booked at what its events had said, the output at ``max_tokens``), and the usage row says so. The API's events
#: are deltas of a few hundred bytes; 16 MiB holds any whole message the API could send as one event.
MAX_EVENT_LINE_BYTES = 16 * 1024 * 1024

#: The header naming the run of a request, sent upstream only by a proxy made with ``label_upstream``.
RUN_ID_HEADER = "x-pilot-run-id"


def run_id_header_value(run_id: str) -> str:
    """The run id as a header value: percent-encoded UTF-8 (a run id may be any folder path)."""
    return quote(run_id, safe="/._-:+@=,")


def run_id_from_header(value: str | None) -> str | None:
    """The run id a labelled request carries, or None."""
    return unquote(value) if value else None


MESSAGES_ROUTE = "/v1/messages"
COUNT_ROUTE = "/v1/messages/count_tokens"


def error_body(kind: str, message: str) -> bytes:
    """An error answer's body, as the API writes one."""
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


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


def short_repr(value: Any, limit: int = 200) -> str:
    """An agent-chosen value as quoted in a refusal or a record row: its repr, bounded."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
