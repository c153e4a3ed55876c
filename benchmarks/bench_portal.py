"""The portal's refusal of an oversized body: answered from the declared length, against an ordinary small request.

A portal instance (waitress on loopback) serves the test scenario of
``tests/portal_support.py``. Reference run (named ``sign-in``): a POST
/api/sign-in with a small JSON body of wrong credentials for a username of its own (so no lockout answers
instead), answered 401. Measured
run (``oversized``): the same request declaring a 1 GB body and sending none of
it, answered 413. Each on a fresh connection, median of ``--repeat``, in this
process. A refusal that read the body first would wait for a gigabyte that never
comes; one answered from the declared length costs about what the reference
costs (a ratio near 1).

    .venv/bin/python benchmarks/bench_portal.py [--repeat 50]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from portal_support import make_scenario, read_json_answer

from pilot.portal import start_instance
from pilot.portal.content import generate_portal


def _exchange(url: str, head: bytes, body: bytes) -> tuple[float, bytes]:
    """Seconds from the request's last byte to the whole answer, and the answer's status line."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(head + body)
        t0 = time.perf_counter()
        data = read_json_answer(sock)
        return time.perf_counter() - t0, data.split(b"\r\n", 1)[0]


def _head(length: int) -> bytes:
    return (
        b"POST /api/sign-in HTTP/1.1\r\nHost: portal\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {length}\r\n\r\n".encode()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50, help="requests of each kind; the median is kept")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-portal-") as tmp:
        content = generate_portal(make_scenario(Path(tmp) / "scenarios"))
        with start_instance("TEST-01", Path(tmp) / "run", content_dir=content) as portal:
            ref, big = [], []
            for k in range(args.repeat):  # in turn, so that neither gets the quieter moments
                body = f'{{"username": "nobody-{k}", "password": "wrong"}}'.encode()
                s, status = _exchange(portal.url, _head(len(body)), body)
                assert b" 401 " in status, status
                ref.append(s)
                s, status = _exchange(portal.url, _head(10**9), b"")
                assert b" 413 " in status, status
                big.append(s)
    r, b = statistics.median(ref), statistics.median(big)
    print(f"sign-in (reference): {r * 1000:.2f} ms; oversized declaration: {b * 1000:.2f} ms; ratio {b / r:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
