"""A scripted stand-in for the Messages API on loopback, to drive the real Claude Code CLI in tests.

Each POST to ``/v1/messages`` for the worker's model takes the next scripted
response (a text or a tool call) and answers it as the API does, streamed
(server-sent events) or whole; requests for other models (the CLI's small
side calls) get a one-word text. Every request body is kept in
``requests``, its headers in ``headers`` and its target in ``paths`` so a test can see what the CLI
sent (tool results included) and with which key. ``count_tokens`` is the
answer of the token-counting endpoint (None: it fails with a 500), and a
``stream_gate`` event holds a streamed answer after its first event until the
test sets it. With ``keep_alive`` it speaks HTTP/1.1 (kept-alive connections,
streams in chunked encoding, as the real API does; ``connections`` counts
them); with ``tls`` it serves HTTPS with that server context.
"""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def text_turn(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}


def tool_turn(name: str, tool_input: dict, tool_id: str) -> dict:
    return {"content": [{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}], "stop_reason": "tool_use"}


class FakeMessagesAPI:
    def __init__(self, model: str, turns: list[dict], usage: tuple[int, int] | dict = (2000, 300),
                 count_tokens: int | None = 100, stream_gate: threading.Event | None = None,
                 keep_alive: bool = False, tls: ssl.SSLContext | None = None) -> None:
        self.model = model
        self.turns = list(turns)
        self.usage = usage
        self.count_tokens = count_tokens
        self.stream_gate = stream_gate
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.counted: list[dict] = []
        self.connections = 0
        self._n = 0
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def log_message(self, *args: Any) -> None:
                return

            def setup(self) -> None:
                super().setup()
                with api._lock:
                    api.connections += 1

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def do_GET(self) -> None:
                self._json({"data": [], "has_more": False})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with api._lock:
                    api.paths.append(self.path)
                if "count_tokens" in self.path:
                    with api._lock:
                        api.counted.append(body)
                    if api.count_tokens is None:
                        return self._json({"type": "error", "error": {"type": "api_error", "message": "count failed"}}, 500)
                    return self._json({"input_tokens": api.count_tokens})
                if not self.path.startswith("/v1/messages"):
                    return self._json({})
                with api._lock:
                    api.requests.append(body)
                    api.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if body.get("model") == api.model and api._n < len(api.turns):
                        turn = api.turns[api._n]
                        api._n += 1
                        msg_id = f"msg_fake_{api._n:03d}"
                    else:
                        turn, msg_id = text_turn("ok"), f"msg_side_{len(api.requests):03d}"
                message = {"id": msg_id, "type": "message", "role": "assistant", "model": body.get("model", api.model),
                           "content": turn["content"], "stop_reason": turn["stop_reason"], "stop_sequence": None,
                           "usage": api.usage_object()}
                if body.get("stream"):
                    return self._stream(message)
                return self._json(message)

            def _json(self, obj: dict, status: int = 200) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                if keep_alive:
                    self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                start = dict(message, content=[], stop_reason=None, usage=dict(message["usage"], output_tokens=1))

                def send(event: str, data: dict) -> None:
                    frame = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame) if keep_alive else frame)
                    self.wfile.flush()

                send("message_start", {"type": "message_start", "message": start})
                if api.stream_gate is not None:
                    api.stream_gate.wait(timeout=30)
                for i, block in enumerate(message["content"]):
                    if block["type"] == "text":
                        send("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
                        send("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}})
                    else:
                        send("content_block_start", {"type": "content_block_start", "index": i,
                                                     "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
                        send("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
                    send("content_block_stop", {"type": "content_block_stop", "index": i})
                send("message_delta", {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                       "usage": {"output_tokens": message["usage"]["output_tokens"]}})
                send("message_stop", {"type": "message_stop"})
                if keep_alive:
                    self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeMessagesAPI":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def usage_object(self) -> dict:
        """The usage every answer reports: ``usage`` as (input, output) or a whole usage object."""
        if isinstance(self.usage, dict):
            return {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, **self.usage}
        return {"input_tokens": self.usage[0], "output_tokens": self.usage[1], "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}

    def tool_results(self) -> dict[str, str]:
        """tool_use_id -> the text of the result the CLI sent back."""
        out: dict[str, str] = {}
        for req in self.requests:
            for msg in req.get("messages", []):
                content = msg.get("content")
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        c = block.get("content")
                        out[block["tool_use_id"]] = c if isinstance(c, str) else " ".join(x.get("text", "") for x in c or [] if isinstance(x, dict))
        return out
