"""The refusing HTTP proxy under a flood: every request is counted, the log and the deviations stay bounded."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

from pilot.agents import network
from pilot.agents.audit import StreamSummary, network_deviations

#: 2,000 requests over 300 destinations: destination i is asked for i % 300, so the first 200 get 7 requests each
#: (0..1999 hits each of 0..199 seven times and 200..299 six times).
REQUESTS, DESTINATIONS = 2000, 300


def _ask(sock_path: Path, target: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(sock_path))
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        return s.recv(4096)


def test_a_flood_of_refused_destinations_is_counted_exactly_and_logged_within_bounds(tmp_path):
    sock_dir = Path(tempfile.mkdtemp(prefix="pilot-refusal-"))  # short enough for a Unix socket path
    log = tmp_path / network.REFUSAL_LOG
    proxy = network.RefusingProxy(sock_dir / "r.sock", log)
    try:
        for i in range(REQUESTS):
            assert b"403 Forbidden" in _ask(sock_dir / "r.sock", f"http://host{i % DESTINATIONS}.example/")
        live = proxy.refusals()
    finally:
        proxy.close()
    bound = network.MAX_LOGGED_DESTINATIONS
    assert bound < DESTINATIONS
    # The live view and the closed log agree, and both count every request.
    closed = network.read_refusals(log)
    assert closed == live
    assert sum(r["count"] for r in closed) == REQUESTS
    named = closed[:-1]
    assert len(named) == bound and [r["target"] for r in named] == [f"http://host{i}.example/" for i in range(bound)]
    assert all(r["count"] == 7 for r in named)  # destinations 0..99 are each asked 7 times
    assert closed[-1]["count"] == REQUESTS - 7 * bound and "further destinations" in closed[-1]["target"]
    # One line per logged destination and one closing line: the log does not grow with the requests.
    assert len(log.read_text().splitlines()) == bound + 1
    devs = network_deviations(StreamSummary(), network_allowed=False, isolated=True, refusals=closed)
    assert len(devs) == bound + 1 and devs[0].command == "GET http://host0.example/ (7 requests)"


def test_a_log_without_its_closing_row_counts_each_destination_once(tmp_path):
    log = tmp_path / network.REFUSAL_LOG
    log.write_text('{"time": 1.0, "method": "CONNECT", "target": "example.com:443"}\n')
    assert network.read_refusals(log) == [{"method": "CONNECT", "target": "example.com:443", "count": 1}]
