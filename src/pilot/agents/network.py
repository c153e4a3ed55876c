"""The harness side of the sandbox's only ways out: Unix sockets, each with one purpose.

A run's sandbox has no network of its own (``--unshare-net``). Each allowed
endpoint is a Unix socket served here, bound into the sandbox and bridged
to a loopback port inside it (:mod:`pilot.agents.sandbox`):

* :class:`UnixBridge` forwards a socket to one loopback TCP address of the
  harness's host (the run's own portal, which listens on 127.0.0.1);
* :class:`RefusingProxy` is the HTTP(S) proxy named in the agent's
  environment: it answers every request with 403 and logs the destination
  asked for, so a program that tries the network through the usual proxy
  variables (curl, urllib, requests, pip) leaves a record; connections
  that ignore the proxy fail inside the namespace (no route) and are read
  from the tool results by the audit.

The model proxy (:mod:`pilot.agents.model_proxy`) serves its own socket.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
import time
from pathlib import Path

from pilot.agents.sandbox import STUB_MARKER

REFUSAL_LOG = "network_refusals.jsonl"


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixService:
    """A threaded Unix-socket server started on construction and stopped by :meth:`close`."""

    handler: type[socketserver.BaseRequestHandler]

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = Path(socket_path)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        if self.socket_path.exists() or self.socket_path.is_socket():
            self.socket_path.unlink()
        self.server = _Server(str(self.socket_path), self._make_handler())
        self.server.service = self  # type: ignore[attr-defined]
        os.chmod(self.socket_path, 0o666)
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()

    def _make_handler(self) -> type[socketserver.BaseRequestHandler]:
        return self.handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class _BridgeHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        svc: UnixBridge = self.server.service  # type: ignore[attr-defined]
        try:
            upstream = socket.create_connection((svc.host, svc.port), timeout=10)
        except OSError:
            return
        upstream.settimeout(None)
        t = threading.Thread(target=_pump, args=(upstream, self.request), daemon=True)
        t.start()
        _pump(self.request, upstream)
        t.join()
        upstream.close()


class UnixBridge(_UnixService):
    """Forward every connection on ``socket_path`` to ``host:port`` (a loopback service of the harness)."""

    handler = _BridgeHandler

    def __init__(self, socket_path: Path, host: str, port: int) -> None:
        self.host, self.port = host, int(port)
        super().__init__(socket_path)


class _RefusalHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        svc: RefusingProxy = self.server.service  # type: ignore[attr-defined]
        try:
            line = self.rfile.readline(8192).decode("latin-1").strip()
        except OSError:
            return
        parts = line.split()
        method, target = (parts[0], parts[1]) if len(parts) >= 2 else (line, "")
        svc.record(method, target)
        body = f"network access refused: this arm has no network ({STUB_MARKER})\n".encode()
        head = (
            f"HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        ).encode()
        try:
            self.wfile.write(head + body)
        except OSError:
            pass


#: Distinct destinations the refusal log names one by one; requests to further ones are only counted.
MAX_LOGGED_DESTINATIONS = 100


class RefusingProxy(_UnixService):
    """An HTTP proxy that refuses everything and logs what was asked for to ``log_path``.

    Each distinct destination (method and target) is written once, when it is
    first asked for, up to :data:`MAX_LOGGED_DESTINATIONS`; on :meth:`close`
    one row counts the requests per logged destination and those to the rest.
    So a worker that asks a million times leaves a log (and deviations) of
    bounded size, and every request is still counted.
    """

    handler = _RefusalHandler

    def __init__(self, socket_path: Path, log_path: Path) -> None:
        self.log_path = Path(log_path)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._others = 0
        super().__init__(socket_path)

    def record(self, method: str, target: str) -> None:
        key = (method[:20], target[:500])
        with self._lock:
            if key in self._counts:
                self._counts[key] += 1
                return
            if len(self._counts) >= MAX_LOGGED_DESTINATIONS:
                self._others += 1
                return
            self._counts[key] = 1
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"time": round(time.time(), 3), "method": key[0], "target": key[1]}) + "\n")

    def close(self) -> None:
        super().close()
        with self._lock:
            if self._counts or self._others:
                row = {
                    "kind": "counts",
                    "counts": [[m, t, n] for (m, t), n in self._counts.items()],
                    "others": self._others,
                }
                with open(self.log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row) + "\n")
            self._counts, self._others = {}, 0

    def refusals(self) -> list[dict]:
        """What was refused so far, as :func:`read_refusals` reads it from the closed log."""
        with self._lock:
            return _refusal_rows([(m, t, n) for (m, t), n in self._counts.items()], self._others)


def _refusal_rows(destinations: list[tuple[str, str, int]], others: int) -> list[dict]:
    out = [{"method": m, "target": t, "count": n} for m, t, n in destinations]
    if others:
        out.append(
            {
                "method": "",
                "target": f"further destinations past the log's bound of {MAX_LOGGED_DESTINATIONS}",
                "count": others,
            }
        )
    return out


def read_refusals(path: Path) -> list[dict]:
    """The refused destinations logged for a run, each with its ``count`` of requests (empty when none).

    Requests to destinations past the log's bound come as one last row naming how many there were.
    """
    path = Path(path)
    if not path.is_file():
        return []
    rows: list[dict] = []
    counts: dict[tuple[str, str], int] = {}
    others = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict):
            continue
        if row.get("kind") == "counts":
            counts = {(str(m), str(t)): int(n) for m, t, n in row.get("counts") or []}
            others = int(row.get("others") or 0)
        else:
            rows.append(row)
    # A log without its closing row (the harness was killed) counts each logged destination once.
    keys = [(str(r.get("method", "")), str(r.get("target", ""))) for r in rows]
    return _refusal_rows([(m, t, counts.get((m, t), 1)) for m, t in keys], others)
