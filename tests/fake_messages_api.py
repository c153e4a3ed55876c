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

import ssl
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from pilot.agents import messages_wire as wire


def text_turn(text: str) -> dict:
    return {"content": [wire.text_block(text)], "stop_reason": "end_turn"}


def tool_turn(name: str, tool_input: dict, tool_id: str) -> dict:
    return {"content": [wire.tool_use_block(name, tool_input, tool_id)], "stop_reason": "tool_use"}


class FakeMessagesAPI:
    def __init__(
        self,
        model: str,
        turns: list[dict],
        usage: tuple[int, int] | dict = (2000, 300),
        count_tokens: int | None = 100,
        stream_gate: threading.Event | None = None,
        keep_alive: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
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

        class Handler(wire.WireHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                super().setup()
                with api._lock:
                    api.connections += 1

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def do_GET(self) -> None:
                self.send_json({"data": [], "has_more": False})

            def do_POST(self) -> None:
                body = self.read_json()
                with api._lock:
                    api.paths.append(self.path)
                if "count_tokens" in self.path:
                    with api._lock:
                        api.counted.append(body)
                    if api.count_tokens is None:
                        return self.send_json(wire.error_body("api_error", "count failed"), 500)
                    return self.send_json({"input_tokens": api.count_tokens})
                if not self.path.startswith("/v1/messages"):
                    return self.send_json({})
                with api._lock:
                    api.requests.append(body)
                    api.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if body.get("model") == api.model and api._n < len(api.turns):
                        turn = api.turns[api._n]
                        api._n += 1
                        msg_id = f"msg_fake_{api._n:03d}"
                    else:
                        turn, msg_id = text_turn("ok"), f"msg_side_{len(api.requests):03d}"
                message = wire.message(
                    turn["content"],
                    model=body.get("model", api.model),
                    msg_id=msg_id,
                    usage=api.usage_object(),
                    stop_reason=turn["stop_reason"],
                )
                if body.get("stream"):
                    return self.send_stream(message, api.stream_gate)
                return self.send_json(message)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def usage_object(self) -> dict:
        """The usage every answer reports: ``usage`` as (input, output) or a whole usage object."""
        if isinstance(self.usage, dict):
            return {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                **self.usage,
            }
        return {
            "input_tokens": self.usage[0],
            "output_tokens": self.usage[1],
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }

    def tool_results(self) -> dict[str, str]:
        """tool_use_id -> the text of the result the CLI sent back."""
        out: dict[str, str] = {}
        for req in self.requests:
            out.update({k: text for k, (text, _) in wire.tool_results(req.get("messages", [])).items()})
        return out
