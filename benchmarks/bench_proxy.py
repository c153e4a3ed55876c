"""Overhead of the metering model proxy per request, against a direct call to the scripted Messages API.

Reference, in the same process: one POST /v1/messages straight to the fake
API of tests/fake_messages_api.py (loopback TCP, a fresh connection per
request, as that server closes each). Measured: the same request through a
run's proxy listener (loopback TCP and the Unix socket), which checks the run
token, the framing and the run's in-flight slots from the headers, reads the
body, parses it and checks it against the field and content-block allow-lists,
reads its cache lifetimes, writes it anew, bounds and reserves the worst case,
forwards with the real key, relays the answer, prices its usage in decimals
and appends the usage and exchange rows. Both a whole (JSON) and a streamed
(server-sent events) answer are timed, for two bodies: a 2 kB prompt, and a
conversation shaped like the pinned CLI's (system prompt and tools with cache
breakpoints, tool calls and their results; about 100 kB).

The direct call and the two proxied ones are made in turn, round after
round, and the overhead is the median over rounds of (proxied - direct): a
change in the machine's load during the run then moves both sides alike.
Target: the proxy adds under 5 ms per request.

    .venv/bin/python benchmarks/bench_proxy.py [--requests 300]
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

from fake_messages_api import FakeMessagesAPI

from pilot import protocol
from pilot.agents.model_proxy import MeteringProxy, UnixHTTPConnection, read_exchanges
from pilot.protocol.prices import PriceTable

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


def _conversation(model: str, stream: bool) -> dict:
    """A request shaped like the pinned CLI's mid-session: cached system blocks, tool schemas, tool calls and
    results."""
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "d" * 80} for i in range(12)},
        "required": ["p0"],
    }
    tools = [{"name": f"Tool{i}", "description": "t" * 600, "input_schema": schema} for i in range(12)]
    messages: list[dict] = [
        {"role": "user", "content": [{"type": "text", "text": "Read BRIEF.md and carry it out. " * 20}]}
    ]
    for turn in range(20):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Next I look at the file. " * 4},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{turn:03d}",
                        "name": "Tool1",
                        "input": {"p0": f"/w/file{turn}.md", "p1": "x" * 200},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{turn:03d}", "content": "line of the file\n" * 150}
                ],
            }
        )
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    system = [
        {"type": "text", "text": "You are a careful office worker. " * 40},
        {"type": "text", "text": "s" * 6000, "cache_control": {"type": "ephemeral"}},
    ]
    return {
        "model": model,
        "max_tokens": 32000,
        "stream": stream,
        "system": system,
        "tools": tools,
        "messages": messages,
        "thinking": {"type": "adaptive"},
        "metadata": {"user_id": "bench"},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--requests", type=int, default=300, help="rounds per case (each round: direct, proxy tcp, proxy unix)"
    )
    args = ap.parse_args()
    model = protocol.study()["worker"]["model"]
    prices = PriceTable.load()
    with (
        FakeMessagesAPI(model, []) as api,
        tempfile.TemporaryDirectory() as tmp,
        MeteringProxy(api.url, "sk-bench-real-key", prices, Path(tmp)) as proxy,
    ):
        meter = proxy.open_run("bench", Decimal("1000000"), model)
        host, port = api.url.removeprefix("http://").split(":")
        phost, pport = meter.base_url.removeprefix("http://").split(":")
        paths = {
            "direct": lambda: http.client.HTTPConnection(host, int(port), timeout=30),
            "proxy tcp": lambda: http.client.HTTPConnection(phost, int(pport), timeout=30),
            "proxy unix": lambda: UnixHTTPConnection(meter.socket_path),
        }
        base = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
        keys = {"direct": "sk-bench-real-key", "proxy tcp": meter.token, "proxy unix": meter.token}
        print(f"{args.requests} rounds per case (direct, proxy tcp, proxy unix in turn); median ms per request;")
        print("overhead = median over rounds of (proxied - direct), ratio = median proxied / median direct")
        print(f"{'body':<22} {'answer':<7} {'path':<11} {'ms':>8} {'ratio':>6} {'overhead ms':>12}")
        worst = {"2 kB prompt": 0.0, "conversation": 0.0}
        for label in worst:
            for stream in (False, True):
                request = (
                    {
                        "model": model,
                        "max_tokens": 1024,
                        "stream": stream,
                        "messages": [{"role": "user", "content": "x" * 2000}],
                    }
                    if label == "2 kB prompt"
                    else _conversation(model, stream)
                )
                body = json.dumps(request).encode()
                times: dict[str, list[float]] = {name: [] for name in paths}
                for n in range(args.requests + 10):
                    for name, connect in paths.items():
                        t = _one(connect, body, {**base, "x-api-key": keys[name]})
                        if n >= 10:  # the first rounds warm up
                            times[name].append(t * 1000)
                kind = "stream" if stream else "json"
                ref = statistics.median(times["direct"])
                shown = f"{label} ({len(body) // 1000} kB)"
                print(f"{shown:<22} {kind:<7} {'direct':<11} {ref:8.3f} {1.0:6.2f} {0.0:12.3f}")
                for name in ("proxy tcp", "proxy unix"):
                    ms = statistics.median(times[name])
                    over = statistics.median(p - d for p, d in zip(times[name], times["direct"], strict=True))
                    worst[label] = max(worst[label], over)
                    print(f"{shown:<22} {kind:<7} {name:<11} {ms:8.3f} {ms / ref:6.2f} {over:12.3f}")
        proxy.close_run("bench")
        rows = read_exchanges(meter.exchanges_path)
        print(
            f"metered {len(meter.requests)} requests, {meter.metered_usd} USD; {len(rows)} exchange rows; "
            f"refusals {sum(meter.refusal_counts.values())}"
        )
    for label, over in worst.items():
        verdict = "met" if over < TARGET_MS else "NOT met"
        print(f"{label}: largest overhead {over:.3f} ms per request; target < {TARGET_MS} ms: {verdict}")


if __name__ == "__main__":
    main()
