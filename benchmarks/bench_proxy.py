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

Then one long event line: an answer whose single data line holds 1 MiB and
then 16 MiB (just under the proxy's bound), written by the upstream in
16 KiB pieces, read straight from the upstream (reference) and through the
proxy; and the line splitting alone (:class:`EventLines`) against the
concatenation the relay used before (its pending line grown by ``+=`` and
split again at each newline), on the same 4 KiB chunks, beside copying the
same bytes once (the floor of any linear splitter). Linear work shows as a
16 MiB / 1 MiB ratio near 16 of the bytes copied (``EventLines.work``) and as
a time per MiB that stays near the floor's at both sizes; the concatenation's
time per MiB grows with the line. Where a 1 MiB buffer stays in the caches
and a 16 MiB one is a fresh mapping each time (page faults), even the floor's
time ratio is well above 16, so the time ratio alone says little there; the
relay's own overhead (proxy minus direct) is printed with its ratio too.

    .venv/bin/python benchmarks/bench_proxy.py [--requests 300] [--line-rounds 5]
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
from pilot.agents.model_proxy import (
    MAX_EVENT_LINE_BYTES,
    EventLines,
    MeteringProxy,
    UnixHTTPConnection,
    read_exchanges,
)
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


class _LongLineUpstream:
    """An upstream whose streamed answer holds one data line of ``size`` bytes, written in 16 KiB pieces."""

    def __init__(self, model: str) -> None:
        import http.server
        import threading

        self.size = 1 << 20
        upstream = self
        start = {"type": "message_start", "message": {"id": "msg_long", "model": model, "usage": {"input_tokens": 10}}}
        delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}
        head = f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
        tail = f"\n\nevent: message_delta\ndata: {json.dumps(delta)}\n\nevent: message_stop\ndata: {{}}\n\n".encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                self.wfile.write(head)
                line = b'data: {"type":"ping","pad":"' + b"p" * (upstream.size - 32) + b'"}'
                for i in range(0, len(line), 16384):
                    self.wfile.write(line[i : i + 16384])
                self.wfile.write(tail)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _former_split(chunks: list[bytes]) -> int:
    """The relay's former line splitting: the pending line grown by concatenation, split again at each newline."""
    pending, lines = b"", 0
    for chunk in chunks:
        pending += chunk
        if b"\n" in chunk:
            *done, pending = pending.split(b"\n")
            lines += len(done)
    return lines


def _split(chunks: list[bytes]) -> int:
    lines = EventLines(MAX_EVENT_LINE_BYTES)
    return sum(len(lines.feed(c)) for c in chunks)


def long_lines(model: str, prices: PriceTable, rounds: int) -> None:
    """Time one long event line, 1 MiB and 16 MiB, straight and through the proxy, and the splitting alone."""
    sizes = {"1 MiB": 1 << 20, "16 MiB": MAX_EVENT_LINE_BYTES - 1024}
    up = _LongLineUpstream(model)
    host, port = up.url.removeprefix("http://").split(":")
    body = json.dumps(
        {"model": model, "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "long"}]}
    ).encode()
    base = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    print()
    print(f"one long event line, median of {rounds} rounds (ms); ratio = 16 MiB / 1 MiB (linear: near 16)")
    with tempfile.TemporaryDirectory() as tmp, MeteringProxy(up.url, "sk-bench-real-key", prices, Path(tmp)) as proxy:
        meter = proxy.open_run("bench-long", Decimal("1000000"), model)
        phost, pport = meter.base_url.removeprefix("http://").split(":")
        relay: dict[str, dict[str, float]] = {"direct": {}, "proxy tcp": {}}
        for label, size in sizes.items():
            up.size = size
            times: dict[str, list[float]] = {"direct": [], "proxy tcp": []}
            for _ in range(rounds):
                for name, (h, p_, key) in {
                    "direct": (host, port, "sk-bench-real-key"),
                    "proxy tcp": (phost, pport, meter.token),
                }.items():
                    times[name].append(
                        _one(
                            lambda h=h, p_=p_: http.client.HTTPConnection(h, int(p_), timeout=120),
                            body,
                            {**base, "x-api-key": key},
                        )
                        * 1000
                    )
            for name in times:
                relay[name][label] = statistics.median(times[name])
        booked = [r for r in meter.requests if r.get("usage_complete")]
        print(f"{'path':<26} {'1 MiB':>10} {'16 MiB':>10} {'ratio':>7}")
        for name, by in relay.items():
            print(f"{name:<26} {by['1 MiB']:10.1f} {by['16 MiB']:10.1f} {by['16 MiB'] / by['1 MiB']:7.2f}")
        over = {k: relay["proxy tcp"][k] - relay["direct"][k] for k in sizes}
        print(
            f"{'proxy - direct':<26} {over['1 MiB']:10.1f} {over['16 MiB']:10.1f} {over['16 MiB'] / over['1 MiB']:7.2f}"
        )
        print(f"  every answer booked whole: {len(booked)} of {len(meter.requests)}")
    # The splitting alone, against copying the same bytes once (the floor of any linear splitter): the time per MiB
    # of a linear one stays near the floor's at both sizes, whatever the caches do; the former's grows with the line.
    cases = {"copy once (reference)": _copy_once, "EventLines (now)": _split, "concatenation (former)": _former_split}
    split: dict[str, dict[str, float]] = {name: {} for name in cases}
    work: dict[str, int] = {}
    for label, size in sizes.items():
        data = b"data: " + b"x" * size + b"\n"
        chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
        for name, fn in cases.items():
            runs = []
            for _ in range(1 if name.startswith("concatenation") else max(rounds, 9)):
                t0 = time.perf_counter()
                assert fn(chunks) == 1
                runs.append((time.perf_counter() - t0) * 1000)
            split[name][label] = statistics.median(runs)
        lines = EventLines(MAX_EVENT_LINE_BYTES)
        for c in chunks:
            lines.feed(c)
        work[label] = lines.work
    mib = {label: size / (1 << 20) for label, size in sizes.items()}
    print("line splitting alone, 4 KiB chunks: median ms, and ms per MiB")
    print(f"{'':<26} {'1 MiB':>10} {'16 MiB':>10} {'ratio':>7} {'/MiB 1':>8} {'/MiB 16':>8}")
    for name, by in split.items():
        per = [by[k] / mib[k] for k in sizes]
        print(
            f"{name:<26} {by['1 MiB']:10.2f} {by['16 MiB']:10.2f} {by['16 MiB'] / by['1 MiB']:7.2f} "
            f"{per[0]:8.3f} {per[1]:8.3f}"
        )
    print(
        f"EventLines work (bytes copied): {work['1 MiB']} and {work['16 MiB']}, "
        f"ratio {work['16 MiB'] / work['1 MiB']:.2f} for a line {mib['16 MiB'] / mib['1 MiB']:.2f} times as long"
    )


def _copy_once(chunks: list[bytes]) -> int:
    return len([b"".join(chunks)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--requests", type=int, default=300, help="rounds per case (each round: direct, proxy tcp, proxy unix)"
    )
    ap.add_argument("--line-rounds", type=int, default=5, help="rounds of the long event line measurement")
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
    long_lines(model, prices, args.line_rounds)


if __name__ == "__main__":
    main()
