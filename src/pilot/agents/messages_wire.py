"""The Messages API's wire format, as a local server speaks it to the Claude Code CLI.

A message object (text and ``tool_use`` blocks, ``usage``), the same
message as the server-sent events of a streamed answer, the error body, and
a request handler base that writes them: whole JSON or an event stream,
over HTTP/1.1 kept-alive connections with chunked streams as the real API
does (or HTTP/1.0 and a closed connection). Used by the scripted model
server (:mod:`pilot.simulated.scripted_model`) and by the tests' scripted fake.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

#: The usage counts every answer carries.
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def usage_object(**counts: int) -> dict:
    """A ``usage`` object with every count present (missing ones 0)."""
    return {k: int(counts.get(k, 0)) for k in USAGE_KEYS}


def text_block(text: str) -> dict:
    return {"type": "text", "text": text}


def tool_use_block(name: str, tool_input: dict, tool_id: str) -> dict:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def message(content: list[dict], *, model: str, msg_id: str, usage: dict, stop_reason: str | None = None) -> dict:
    """A whole assistant message; the stop reason follows from the content unless given."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def error_body(kind: str, text: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": text}}


def stream_events(msg: dict) -> Iterator[tuple[str, dict]]:
    """The server-sent events of ``msg``: start, one start/delta/stop per block, the final usage, stop."""
    start = dict(msg, content=[], stop_reason=None, usage=dict(msg["usage"], output_tokens=1))
    yield "message_start", {"type": "message_start", "message": start}
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            yield (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
            )
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}},
            )
        else:
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
                },
            )
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                },
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": msg["usage"]["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def tool_results(messages: list[dict]) -> dict[str, tuple[str, bool]]:
    """tool_use_id -> (the text of the result the client sent back, whether it is an error)."""
    out: dict[str, tuple[str, bool]] = {}
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                c = block.get("content")
                text = c if isinstance(c, str) else " ".join(x.get("text", "") for x in c or [] if isinstance(x, dict))
                out[str(block.get("tool_use_id"))] = (text, bool(block.get("is_error")))
    return out


class WireHandler(BaseHTTPRequestHandler):
    """Writes JSON answers and event streams; subclasses set ``protocol_version`` and handle the methods."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        return

    @property
    def _chunked(self) -> bool:
        return self.protocol_version == "HTTP/1.1"

    def read_json(self) -> Any:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        return json.loads(raw or b"{}")

    def send_json(self, obj: dict, status: int = 200, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error_json(self, status: int, kind: str, text: str) -> None:
        # x-should-retry: false, so that the CLI reports the error at once instead of retrying for minutes.
        self.send_json(error_body(kind, text), status, {"x-should-retry": "false"})

    def send_stream(self, msg: dict, gate: threading.Event | None = None, *, cut_after_first: bool = False) -> None:
        """Stream ``msg`` as server-sent events; ``gate`` holds the answer after its first event; ``cut_after_first``
        drops the connection after the first event, as a stream cut mid-way arrives."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        if self._chunked:
            self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for n, (event, data) in enumerate(stream_events(msg)):
            frame = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame) if self._chunked else frame)
            self.wfile.flush()
            if n == 0 and cut_after_first:
                self.close_connection = True
                return
            if n == 0 and gate is not None:
                gate.wait(timeout=30)
        if self._chunked:
            self.wfile.write(b"0\r\n\r\n")
