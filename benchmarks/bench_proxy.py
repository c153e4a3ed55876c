"""Overhead of the metering model proxy per request, against a direct call to the scripted Messages API.

Reference, in the same process: one POST /v1/messages straight to the fake
API of tests/fake_messages_api.py (loopback TCP, a fresh connection per
request, as that server closes each). Measured: the same request through a
run's proxy listener (loopback TCP and the Unix socket), which checks the run
token, bounds and reserves the worst case, forwards with the real key, relays
the answer, prices its usage in decimals and appends the JSONL row. Both a
whole (JSON) and a streamed (server-sent events) answer are timed. Target: the
proxy adds under 5 ms per request.

    .venv/bin/python benchmarks/bench_proxy.py [--requests 200]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fake_messages_api import FakeMessagesAPI  # noqa: E402
from pilot import protocol  # noqa: E402
from pilot.agents.model_proxy import MeteringProxy, PriceTable, UnixHTTPConnection  # noqa: E402

TARGET_MS = 5.0


def _one(connect, body: bytes, headers: dict[str, str]) -> float:
    t0 = time.perf_counter()
    conn = connect()
    conn.request("POST", "/v1/messages", body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    elapsed = time.perf_counter() - t0
    if resp.status != 200 or b"msg_" not in data:
        raise RuntimeError(f"unexpected answer {resp.status}: {data[:200]!r}")
    return elapsed


def _median_ms(connect, body: bytes, headers: dict[str, str], n: int) -> float:
    for _ in range(10):  # warm-up
        _one(connect, body, headers)
    return statistics.median(_one(connect, body, headers) for _ in range(n)) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    model = protocol.study()["worker"]["model"]
    prices = PriceTable.load()
    with FakeMessagesAPI(model, []) as api, tempfile.TemporaryDirectory() as tmp, \
            MeteringProxy(api.url, "sk-bench-real-key", prices, Path(tmp)) as proxy:
        meter = proxy.open_run("bench", Decimal("1000000"), model)
        host, port = api.url.removeprefix("http://").split(":")
        phost, pport = meter.base_url.removeprefix("http://").split(":")
        direct = lambda: http.client.HTTPConnection(host, int(port), timeout=30)  # noqa: E731
        via_tcp = lambda: http.client.HTTPConnection(phost, int(pport), timeout=30)  # noqa: E731
        via_unix = lambda: UnixHTTPConnection(meter.socket_path)  # noqa: E731
        print(f"{args.requests} requests each, median per request; reference: direct call to the fake API")
        print(f"{'answer':<8} {'path':<12} {'ms':>8} {'ratio':>7} {'overhead ms':>12}")
        worst = 0.0
        for stream in (False, True):
            body = json.dumps({"model": model, "max_tokens": 1024, "stream": stream,
                               "messages": [{"role": "user", "content": "x" * 2000}]}).encode()
            base = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
            ref = _median_ms(direct, body, {**base, "x-api-key": "sk-bench-real-key"}, args.requests)
            kind = "stream" if stream else "json"
            print(f"{kind:<8} {'direct':<12} {ref:8.3f} {1.0:7.2f} {0.0:12.3f}")
            for name, connect in (("proxy tcp", via_tcp), ("proxy unix", via_unix)):
                ms = _median_ms(connect, body, {**base, "x-api-key": meter.token}, args.requests)
                worst = max(worst, ms - ref)
                print(f"{kind:<8} {name:<12} {ms:8.3f} {ms / ref:7.2f} {ms - ref:12.3f}")
        proxy.close_run("bench")
        print(f"metered {len(meter.requests)} requests, {meter.metered_usd} USD; refusals {len(meter.refusals)}")
    verdict = "met" if worst < TARGET_MS else "NOT met"
    print(f"largest overhead {worst:.3f} ms per request; target < {TARGET_MS} ms: {verdict}")


if __name__ == "__main__":
    main()
