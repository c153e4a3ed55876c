"""The metering model proxy against the scripted Messages API, and the pinned CLI through it.

The proxy runs for real (threaded HTTP listeners on loopback TCP and a Unix
socket); upstream is tests/fake_messages_api.py. Prices are compared with
hand-computed decimals, never with floats.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import subprocess
import threading
from decimal import Decimal
from pathlib import Path

import pytest

from fake_messages_api import FakeMessagesAPI, text_turn, tool_turn
from real_cli_support import real_cli
from pilot import protocol
from pilot.agents.model_proxy import (
    CAP_STATUS,
    MeteringProxy,
    PriceTable,
    UnixHTTPConnection,
    Usage,
    cost_disagreement,
    study_models,
)
from pilot.protocol import ProtocolError

MODEL = protocol.study()["worker"]["model"]
REAL_KEY = "sk-ant-real-key-held-by-the-harness"


@pytest.fixture(scope="module")
def prices() -> PriceTable:
    return PriceTable.load()


def _post(url_or_sock: str | Path, path: str, body: dict | bytes, token: str | None, *, bearer: bool = False,
          method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    if isinstance(url_or_sock, Path):
        conn: http.client.HTTPConnection = UnixHTTPConnection(url_or_sock)
    else:
        host, port = url_or_sock.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    if token is not None:
        headers["authorization" if bearer else "x-api-key"] = f"Bearer {token}" if bearer else token
    try:
        conn.request(method, path, body=data if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _request(max_tokens: int = 1024, stream: bool = False, text: str = "hello", model: str = MODEL) -> dict:
    return {"model": model, "max_tokens": max_tokens, "stream": stream, "messages": [{"role": "user", "content": text}]}


def _sse_events(raw: bytes) -> list[dict]:
    return [json.loads(line[5:]) for line in raw.split(b"\n") if line.startswith(b"data:")]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ----------------------------------------------------------------- price table


def test_the_pinned_table_prices_every_study_model_in_decimals(prices):
    assert set(study_models(protocol.study())) <= set(prices.models)
    opus = prices.price(MODEL)
    for name in ("input", "output", "cache_write", "cache_write_1h", "cache_read"):
        assert isinstance(getattr(opus, name), Decimal)
    assert opus.input == Decimal("4.00") and opus.output == Decimal("20.00")


def test_pricing_is_exact(prices):
    opus = prices.price(MODEL)
    usage = Usage(input_tokens=1234, output_tokens=567, cache_creation_input_tokens=8901,
                  cache_read_input_tokens=23456, cache_creation_1h_input_tokens=1000)
    # By hand, USD per million: 1234*4 + 567*20 + 7901*5 + 1000*8 + 23456*0.2
    #   = 4936 + 11340 + 39505 + 8000 + 4691.2 = 68472.2 -> 0.0684722 USD
    assert opus.cost(usage) == Decimal("0.0684722")
    # Ten one-token inputs add up to exactly ten times one (floats would not: 10 * 4e-6 summed).
    assert sum((opus.cost(Usage(input_tokens=1)) for _ in range(10)), Decimal(0)) == Decimal("0.00004")
    # The worst case of 1,000 input tokens and max_tokens 128,000: input at the dearest rate (1-hour cache write, 8).
    assert opus.worst_case(1000, 128000) == Decimal("2.568")
    # Without a one-hour cache lifetime in the request the dearest input rate is the 5-minute write, 5.
    assert opus.worst_case(1000, 128000, one_hour_cache=False) == Decimal("2.565")


def test_usage_reads_the_api_shapes():
    u = Usage.from_api({"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 30, "cache_read_input_tokens": 40,
                        "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 10}})
    assert u == Usage(10, 1, 30, 40, 10)
    assert u.updated({"output_tokens": 77}) == Usage(10, 77, 30, 40, 10)
    assert Usage.from_api({"input_tokens": -5, "output_tokens": "3", "cache_read_input_tokens": True}) == Usage()


_GOOD = """unit: usd_per_million_tokens
models:
  m-1:
    input: 1.5
    output: 7
    cache_write: 1.875
    cache_write_1h: 3
    cache_read: 0.15
    max_input_tokens: 200000
"""


@pytest.mark.parametrize(
    "edit, field, reason",
    [
        (lambda s: s.replace("    output: 7\n", ""), "models.m-1.output", "missing"),
        (lambda s: s.replace("input: 1.5", "input: -1"), "models.m-1.input", ">= 0"),
        (lambda s: s.replace("input: 1.5", "input: cheap"), "models.m-1.input", "not a decimal"),
        (lambda s: s.replace("input: 1.5", "input: NaN"), "models.m-1.input", "finite"),
        (lambda s: s.replace("cache_read: 0.15", "cache_read: 0.15\n    web_search: 10"), "models.m-1.web_search", "unknown field"),
        (lambda s: s.replace("usd_per_million_tokens", "usd_per_token"), "unit", "usd_per_million_tokens"),
        (lambda s: s.replace("200000", "0"), "models.m-1.max_input_tokens", "positive integer"),
        (lambda s: s.replace("models:", "models: [\n"), "<file>", "not valid YAML"),
        (lambda s: "unit: usd_per_million_tokens\nmodels: {}\n", "models", "non-empty"),
    ],
)
def test_a_bad_table_is_refused_naming_file_field_and_reason(tmp_path, edit, field, reason):
    path = tmp_path / "prices.yml"
    path.write_text(edit(_GOOD), encoding="utf-8")
    with pytest.raises(ProtocolError) as err:
        PriceTable.load(path)
    assert err.value.field == field and reason in err.value.reason and "prices.yml" in str(err.value)


def test_a_table_without_the_study_model_is_refused(tmp_path):
    path = tmp_path / "prices.yml"
    path.write_text(_GOOD, encoding="utf-8")
    assert PriceTable.load(path).price("m-1").cache_write == Decimal("1.875")
    with pytest.raises(ProtocolError, match=f"models.{MODEL}.*needs a pinned price"):
        PriceTable.load(path, required_models=[MODEL])


# ----------------------------------------------------------------- the proxy


@pytest.fixture
def upstream():
    with FakeMessagesAPI(MODEL, [], usage={"input_tokens": 2000, "output_tokens": 300, "cache_creation_input_tokens": 1500,
                                           "cache_read_input_tokens": 5000}) as api:
        yield api


@pytest.fixture
def proxy(upstream, prices, tmp_path):
    with MeteringProxy(upstream.url, REAL_KEY, prices, tmp_path / "records") as p:
        yield p


# 2000*4 + 300*20 + 1500*5 + 5000*0.2 = 8000 + 6000 + 7500 + 1000 = 22500 per million
ONE_ANSWER = Decimal("0.0225")


def test_json_and_streamed_answers_are_relayed_metered_and_recorded(proxy, upstream, tmp_path):
    meter = proxy.open_run("LEGAL-01.A1.r1", Decimal("4.00"), MODEL)
    status, _, data = _post(meter.base_url, "/v1/messages?beta=true", _request(), meter.token)
    assert status == 200 and json.loads(data)["content"] == [{"type": "text", "text": "ok"}]
    status, headers, data = _post(meter.base_url, "/v1/messages", _request(stream=True), meter.token)
    events = _sse_events(data)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert [e["type"] for e in events][0] == "message_start" and events[-1]["type"] == "message_stop"
    assert meter.metered_usd == 2 * ONE_ANSWER and isinstance(meter.metered_usd, Decimal)
    rows = _rows(tmp_path / "records" / "LEGAL-01.A1.r1" / "proxy_usage.jsonl")
    used = [r for r in rows if r["kind"] == "messages"]
    assert [r["stream"] for r in used] == [False, True]
    assert all(r["cost_usd"] == "0.0225" and r["usage_complete"] and r["input_tokens"] == 2000 and r["output_tokens"] == 300
               and r["cache_creation_input_tokens"] == 1500 and r["cache_read_input_tokens"] == 5000 for r in used)
    assert used[-1]["metered_usd"] == "0.0450" and meter.requests == used
    # The upstream saw the real key, never the run token.
    assert [h["x-api-key"] for h in upstream.headers] == [REAL_KEY, REAL_KEY]
    assert not any(meter.token in json.dumps(h) for h in upstream.headers)


def _start_stream(meter) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A streamed request through the run's TCP listener, its answer's head read."""
    host, port = meter.base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("POST", "/v1/messages", body=json.dumps(_request(stream=True)), headers={"x-api-key": meter.token})
    return conn, conn.getresponse()


def test_a_stream_is_relayed_as_it_arrives(prices, tmp_path):
    gate = threading.Event()
    with FakeMessagesAPI(MODEL, [], stream_gate=gate) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path) as proxy:
        meter = proxy.open_run("r1", Decimal("4.00"), MODEL)
        conn, resp = _start_stream(meter)
        # The upstream holds the rest of the answer until the gate opens: the first event must already be here.
        first = resp.read1(65536)
        assert b"message_start" in first and b"message_stop" not in first
        gate.set()
        rest = resp.read()
        conn.close()
        assert b"message_stop" in rest
        assert meter.metered_usd == Decimal("0.014")  # (2000 x 4 + 300 x 20) per million


def test_the_unix_socket_listener_serves_the_same_run(proxy, upstream):
    meter = proxy.open_run("r-unix", Decimal("4.00"), MODEL)
    assert meter.socket_path.is_socket() and oct(meter.socket_path.stat().st_mode & 0o777) == "0o600"
    status, _, _ = _post(meter.socket_path, "/v1/messages", _request(stream=True), meter.token)
    assert status == 200 and meter.metered_usd == ONE_ANSWER


@pytest.mark.parametrize("presented", [None, "", "sk-ant-real-key-held-by-the-harness", "pilot-run-forged"])
def test_a_missing_or_wrong_token_is_refused_and_logged(proxy, upstream, tmp_path, presented):
    meter = proxy.open_run("r-tok", Decimal("4.00"), MODEL)
    status, headers, data = _post(meter.base_url, "/v1/messages", _request(), presented)
    assert status == 401 and headers["x-should-retry"] == "false"
    assert json.loads(data) == {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
    assert upstream.requests == [] and meter.metered_usd == 0
    assert [r["reason"] for r in meter.refusals] == ["missing or wrong run token"]
    assert _rows(meter.record_path)[-1]["kind"] == "refused"


def test_bearer_token_works_and_another_runs_token_does_not(proxy, upstream):
    a = proxy.open_run("run-a", Decimal("4.00"), MODEL)
    b = proxy.open_run("run-b", Decimal("4.00"), MODEL)
    assert _post(a.base_url, "/v1/messages", _request(), a.token, bearer=True)[0] == 200
    assert _post(a.base_url, "/v1/messages", _request(), b.token)[0] == 401
    assert _post(b.socket_path, "/v1/messages", _request(), a.token)[0] == 401
    assert len(upstream.requests) == 1 and a.metered_usd == ONE_ANSWER and b.metered_usd == 0


def test_other_endpoints_are_forwarded_or_answered_deliberately(proxy, upstream):
    meter = proxy.open_run("r-ep", Decimal("4.00"), MODEL)
    status, _, data = _post(meter.base_url, "/v1/messages/count_tokens", {"model": MODEL, "messages": []}, meter.token)
    assert status == 200 and json.loads(data) == {"input_tokens": 100} and len(upstream.counted) == 1
    assert _post(meter.base_url, "/", b"", meter.token, method="HEAD")[0] == 200
    status, _, data = _post(meter.base_url, "/v1/files", b"{}", meter.token)
    assert status == 404 and json.loads(data)["error"]["type"] == "not_found_error"
    status, _, data = _post(meter.base_url, "/v1/messages", _request(model="claude-unpriced-1"), meter.token)
    assert status == 400 and "no pinned price" in json.loads(data)["error"]["message"]
    status, _, data = _post(meter.base_url, "/v1/messages", _request(model="claude-sonnet-5-5"), meter.token)
    assert status == 400 and "not available to this run" in json.loads(data)["error"]["message"]
    wider = proxy.open_run("r-ep-wider", Decimal("4.00"), MODEL, other_models=["claude-sonnet-5-5"])
    assert _post(wider.base_url, "/v1/messages", _request(model="claude-sonnet-5-5"), wider.token)[0] == 200
    upstream.requests.clear()
    tools = {**_request(), "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    assert _post(meter.base_url, "/v1/messages", tools, meter.token)[0] == 400
    for extra in ({"mcp_servers": [{"type": "url", "url": "https://example.org/mcp", "name": "x"}]}, {"service_tier": "auto"}, {"speed": "fast"}):
        status, _, data = _post(meter.base_url, "/v1/messages", {**_request(), **extra}, meter.token)
        assert status == 400 and "allow-list" not in data.decode() and "not available in this study" in data.decode()
    assert upstream.requests == [] and meter.metered_usd == 0
    assert [r["kind"] for r in meter.requests] == ["count_tokens"]


def test_a_request_target_cannot_steer_the_key_elsewhere(proxy, upstream):
    meter = proxy.open_run("r-target", Decimal("4.00"), MODEL)
    assert _post(meter.base_url, "//evil.example/v1/messages", _request(), meter.token)[0] == 404  # read as a path
    assert _post(meter.base_url, "http://evil.example/v1/messages?beta=true", _request(), meter.token)[0] == 200
    assert upstream.paths == ["/v1/messages?beta=true"]


def test_one_huge_turn_cannot_cross_the_cap(proxy, upstream):
    """The issue's finding: one turn took a 4-dollar run to 20 dollars. Its max_tokens alone is worth 20 dollars."""
    meter = proxy.open_run("r-huge", Decimal("4.00"), MODEL)
    status, headers, data = _post(meter.base_url, "/v1/messages", _request(max_tokens=1_000_000, stream=True), meter.token)
    err = json.loads(data)["error"]
    assert status == CAP_STATUS == 402 and err["type"] == "billing_error" and headers["x-should-retry"] == "false"
    assert "run cost cap reached" in err["message"] and "worst case 20.02" in err["message"]
    assert upstream.requests == [] and meter.capped and "cap of 4.00 USD" in meter.capped_reason
    # The run is over: even a small request is refused now.
    assert _post(meter.base_url, "/v1/messages", _request(), meter.token)[0] == 402
    assert upstream.requests == [] and meter.metered_usd == 0
    assert [r["capped"] for r in meter.refusals] == [True, True]
    assert meter.refusals[1]["reason"].startswith("the run is already capped (metered 0 USD")


def test_spend_accumulates_up_to_but_never_over_the_cap(proxy, upstream):
    meter = proxy.open_run("r-acc", Decimal("0.20"), MODEL)
    statuses = [_post(meter.base_url, "/v1/messages", _request(max_tokens=2000), meter.token)[0] for _ in range(12)]
    # Each answer costs 0.0225; the worst case of the next is about 0.04 (bytes bound) + 2000 x 20 per million.
    assert statuses[0] == 200 and statuses[-1] == 402 and statuses == sorted(statuses)
    assert meter.capped and meter.metered_usd <= meter.cap_usd
    assert meter.metered_usd == statuses.count(200) * ONE_ANSWER


def test_count_tokens_tightens_a_bound_that_would_cross(prices, tmp_path):
    big = "x" * 400_000  # 400 kB of text: the body bound alone is ~404k tokens, 3.2 USD at the dearest input rate
    with FakeMessagesAPI(MODEL, [], count_tokens=100_000) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path) as proxy:
        meter = proxy.open_run("r-count", Decimal("2.00"), MODEL)
        assert _post(meter.base_url, "/v1/messages?beta=true", _request(max_tokens=1000, text=big), meter.token)[0] == 200
        row = meter.requests[-1]
        assert api.paths[0] == "/v1/messages/count_tokens?beta=true"
        assert row["bound_method"] == "count_tokens" and row["input_bound_tokens"] == 105_000 + 4096
        assert api.counted and "max_tokens" not in api.counted[0] and api.counted[0]["messages"][0]["content"] == big
    with FakeMessagesAPI(MODEL, [], count_tokens=None) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path) as proxy:
        meter = proxy.open_run("r-count-fails", Decimal("2.00"), MODEL)
        status, _, data = _post(meter.base_url, "/v1/messages", _request(max_tokens=1000, text=big), meter.token)
        assert status == 402 and "count_tokens could not tighten" in json.loads(data)["error"]["message"]
        assert api.requests == [] and meter.capped


def test_a_document_is_bounded_by_the_count_or_refused(prices, tmp_path):
    doc = {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}}]}]}
    with FakeMessagesAPI(MODEL, [], count_tokens=3000) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path) as proxy:
        meter = proxy.open_run("r-doc", Decimal("4.00"), MODEL)
        assert _post(meter.base_url, "/v1/messages", doc, meter.token)[0] == 200
        assert meter.requests[-1]["bound_method"] == "count_tokens" and len(api.counted) == 1


def test_two_runs_at_once_are_metered_apart(proxy, upstream):
    runs = [proxy.open_run(f"r-par-{i}", Decimal("4.00"), MODEL) for i in range(2)]
    results: list[int] = []

    def client(meter, stream: bool) -> None:
        for _ in range(5):
            results.append(_post(meter.socket_path if stream else meter.base_url, "/v1/messages", _request(stream=stream), meter.token)[0])

    threads = [threading.Thread(target=client, args=(m, s)) for m in runs for s in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 20 and len(upstream.requests) == 20
    for meter in runs:
        rows = [r for r in _rows(meter.record_path) if r["kind"] == "messages"]
        assert len(rows) == 10 and meter.metered_usd == 10 * ONE_ANSWER and meter.reserved_usd == 0
        assert [r["seq"] for r in _rows(meter.record_path)] == list(range(1, 12))
        assert {r["run_id"] for r in rows} == {meter.run_id}


def test_a_closed_run_is_refused(proxy, upstream):
    meter = proxy.open_run("r-close", Decimal("4.00"), MODEL)
    assert _post(meter.base_url, "/v1/messages", _request(), meter.token)[0] == 200
    proxy.close_run("r-close")
    with pytest.raises(OSError):
        _post(meter.base_url, "/v1/messages", _request(), meter.token)
    assert not meter.socket_path.exists()
    rows = _rows(meter.record_path)
    assert rows[-1]["kind"] == "closed"
    assert rows[0]["kind"] == "opened" and rows[-1]["kind"] == "closed" and rows[-1]["metered_usd"] == "0.0225"
    odd = proxy.open_run("/tmp/../runs/attempt 1", Decimal("1"), MODEL)  # a path as run id: a safe folder of its own
    assert odd.record_path.parent.parent == meter.record_path.parent.parent
    assert re.fullmatch(r"tmp_\.\._runs_attempt_1-[0-9a-f]{12}", odd.record_path.parent.name)
    with pytest.raises(ValueError, match="already open"):
        proxy.open_run(odd.run_id, Decimal("1"), MODEL)
    with pytest.raises(ValueError, match="positive Decimal"):
        proxy.open_run("r-float", 4.0, MODEL)  # type: ignore[arg-type]


class _ScriptedUpstream:
    """A one-handler upstream for answers the fake API does not give (cut streams, overload errors)."""

    def __init__(self, respond) -> None:
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["content-length"]))
                respond(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "_ScriptedUpstream":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _cut_after_start(handler) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.end_headers()
    start = {"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 1000, "output_tokens": 1}}}
    handler.wfile.write(f"event: message_start\ndata: {json.dumps(start)}\n\n".encode())


def _overloaded(handler) -> None:
    data = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).encode()
    handler.send_response(529)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def test_a_kept_alive_connection_is_refused_once_the_run_is_closed(proxy, upstream):
    meter = proxy.open_run("r-keep", Decimal("4.00"), MODEL)
    host, port = meter.base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"x-api-key": meter.token, "content-type": "application/json"}
    conn.request("POST", "/v1/messages", body=json.dumps(_request()), headers=headers)
    assert conn.getresponse().read() and len(upstream.requests) == 1
    proxy.close_run("r-keep")
    conn.request("POST", "/v1/messages", body=json.dumps(_request()), headers=headers)
    resp = conn.getresponse()
    assert resp.status == 403 and json.loads(resp.read())["error"]["type"] == "permission_error"
    conn.close()
    assert len(upstream.requests) == 1 and meter.refusals[-1]["reason"] == "run closed"


def test_an_interrupted_stream_is_charged_its_whole_output_allowance(prices, tmp_path):
    """The upstream dies after message_start: the final usage is unknown, so max_tokens of output is charged."""
    with _ScriptedUpstream(_cut_after_start) as up, MeteringProxy(up.url, REAL_KEY, prices, tmp_path) as proxy:
        meter = proxy.open_run("r-cut", Decimal("4.00"), MODEL)
        _post(meter.base_url, "/v1/messages", _request(max_tokens=500, stream=True), meter.token)
        row = meter.requests[-1]
        assert row["usage_complete"] is False and row["output_tokens"] == 500
        assert meter.metered_usd == Decimal("0.014")  # 1000 x 4 + 500 x 20 per million


def test_an_upstream_error_is_relayed_and_not_charged(prices, tmp_path):
    with _ScriptedUpstream(_overloaded) as up, MeteringProxy(up.url, REAL_KEY, prices, tmp_path) as proxy:
        meter = proxy.open_run("r-529", Decimal("4.00"), MODEL)
        status, _, data = _post(meter.base_url, "/v1/messages", _request(stream=True), meter.token)
        assert status == 529 and json.loads(data)["error"]["type"] == "overloaded_error"
        assert meter.metered_usd == 0 and meter.reserved_usd == 0 and meter.requests[-1]["status"] == 529
    with MeteringProxy("http://127.0.0.1:9", REAL_KEY, prices, tmp_path) as proxy:  # nothing listens on port 9
        meter = proxy.open_run("r-down", Decimal("4.00"), MODEL)
        status, _, data = _post(meter.base_url, "/v1/messages", _request(), meter.token)
        assert status == 502 and json.loads(data)["error"]["type"] == "api_error" and meter.reserved_usd == 0


def test_an_agent_that_hangs_up_mid_stream_is_still_metered_exactly(prices, tmp_path):
    gate = threading.Event()
    with FakeMessagesAPI(MODEL, [], stream_gate=gate) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path) as proxy:
        meter = proxy.open_run("r-hangup", Decimal("4.00"), MODEL)
        conn, resp = _start_stream(meter)
        assert b"message_start" in resp.read1(65536)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        gate.set()
        for _ in range(100):
            if meter.requests:
                break
            threading.Event().wait(0.05)
        row = meter.requests[-1]
        assert row["usage_complete"] is True and row["output_tokens"] == 300 and meter.metered_usd == Decimal("0.014")


def test_a_one_hour_cache_lifetime_raises_the_worst_case(proxy, upstream, prices):
    meter = proxy.open_run("r-ttl", Decimal("4.00"), MODEL)
    plain = _request(max_tokens=100)
    one_hour = {**plain, "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    for body in (plain, one_hour):
        assert _post(meter.base_url, "/v1/messages", body, meter.token)[0] == 200
    opus = prices.price(MODEL)
    first, second = meter.requests
    assert Decimal(first["worst_case_usd"]) == opus.worst_case(first["input_bound_tokens"], 100, one_hour_cache=False)
    assert Decimal(second["worst_case_usd"]) == opus.worst_case(second["input_bound_tokens"], 100, one_hour_cache=True)


def test_a_kept_alive_upstream_connection_is_reused_and_its_chunked_streams_metered(prices, tmp_path):
    with FakeMessagesAPI(MODEL, [], keep_alive=True) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path) as proxy:
        meter = proxy.open_run("r-h11", Decimal("4.00"), MODEL)
        host, port = meter.base_url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        for stream in (True, False, True, True):
            conn.request("POST", "/v1/messages", body=json.dumps(_request(stream=stream)), headers={"x-api-key": meter.token})
            resp = conn.getresponse()
            data = resp.read()
            assert resp.status == 200 and (b"message_stop" in data if stream else json.loads(data)["usage"]["output_tokens"] == 300)
        conn.close()
        assert len(api.requests) == 4 and api.connections == 1  # one agent connection, one upstream connection
        assert meter.metered_usd == 4 * Decimal("0.014") and all(r["usage_complete"] for r in meter.requests)


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory) -> tuple[ssl.SSLContext, Path]:
    """A self-signed certificate for 127.0.0.1: the server's context and the certificate to trust."""
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(d / "cert.pem", d / "key.pem")
    return server, d / "cert.pem"


def test_an_https_upstream_is_verified(prices, tmp_path, tls_pair):
    server_ctx, cert = tls_pair
    with FakeMessagesAPI(MODEL, [], keep_alive=True, tls=server_ctx) as api:
        assert api.url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(cert))
        with MeteringProxy(api.url, REAL_KEY, prices, tmp_path / "a", ssl_context=trusted) as proxy:
            meter = proxy.open_run("r-tls", Decimal("4.00"), MODEL)
            assert _post(meter.base_url, "/v1/messages", _request(stream=True), meter.token)[0] == 200
            assert meter.metered_usd == Decimal("0.014") and api.headers[-1]["x-api-key"] == REAL_KEY
        # The system's trust store does not know this certificate: nothing is sent, the agent gets a 502.
        with MeteringProxy(api.url, REAL_KEY, prices, tmp_path / "b") as proxy:
            meter = proxy.open_run("r-tls-untrusted", Decimal("4.00"), MODEL)
            assert _post(meter.base_url, "/v1/messages", _request(), meter.token)[0] == 502
            assert len(api.requests) == 1 and "upstream unreachable" in meter.requests[-1]["note"]


# ----------------------------------------------------------------- reported vs metered


def test_cost_disagreement_tolerance():
    assert cost_disagreement(0.0225, Decimal("0.0225")) is None
    assert cost_disagreement(0.0325, Decimal("0.0225")) is None  # one cent
    assert cost_disagreement(0.0326, Decimal("0.0225")) is not None
    assert cost_disagreement(Decimal("3.06"), Decimal("3.00")) is None  # 2 % of 3 dollars
    note = cost_disagreement(3.07, Decimal("3.00"))
    assert note and "+0.07" in note and "0.0600" in note
    assert "reported no cost" in cost_disagreement(None, Decimal("1"))


# ----------------------------------------------------------------- the pinned CLI through the proxy


CLI = real_cli()
needs_cli = pytest.mark.skipif(CLI is None, reason="no real Claude Code CLI (install the 'agent' extra or set PILOT_TEST_CLAUDE_BIN)")


def _run_cli(cli: Path, meter, cwd: Path, max_turns: int = 5) -> dict:
    home = cwd / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / "config"), "IS_SANDBOX": "1",
           "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", **meter.env}
    proc = subprocess.run([str(cli), "-p", "--output-format", "stream-json", "--verbose", "--model", MODEL, "--max-turns", str(max_turns),
                           "--permission-mode", "bypassPermissions", "--setting-sources", "", "--tools", "Read,Write"],
                          input="Write note.md.", capture_output=True, text=True, env=env, cwd=cwd, timeout=180)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{") and '"type":"result"' in line]
    assert results, proc.stderr[-2000:]
    return results[-1]


@pytest.mark.slow
@needs_cli
def test_the_pinned_cli_streams_through_the_proxy_and_costs_agree(prices, tmp_path):
    usage = {"input_tokens": 2000, "output_tokens": 300, "cache_creation_input_tokens": 1500, "cache_read_input_tokens": 5000}
    turns = [tool_turn("Write", {"file_path": str(tmp_path / "note.md"), "content": "# Note\n"}, "toolu_01"), text_turn("Done.")]
    with FakeMessagesAPI(MODEL, turns, usage=usage) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path / "records") as proxy:
        meter = proxy.open_run("LEGAL-01.A1.r1", Decimal("4.00"), MODEL)
        result = _run_cli(CLI, meter, tmp_path)
        proxy.close_run(meter.run_id)
        seen_keys = {h["x-api-key"] for h in api.headers}
    assert result["subtype"] == "success" and not result["is_error"] and (tmp_path / "note.md").read_text() == "# Note\n"
    used = [r for r in meter.requests if r["kind"] == "messages"]
    assert len(used) >= 2 and all(r["stream"] and r["usage_complete"] for r in used)
    assert meter.metered_usd == len(used) * ONE_ANSWER
    assert cost_disagreement(result["total_cost_usd"], meter.metered_usd) is None
    assert abs(Decimal(str(result["total_cost_usd"])) - meter.metered_usd) < Decimal("0.000001")
    cli_tokens = result["modelUsage"][MODEL]
    assert cli_tokens["inputTokens"] == sum(r["input_tokens"] for r in used)
    assert cli_tokens["cacheReadInputTokens"] == sum(r["cache_read_input_tokens"] for r in used)
    assert seen_keys == {REAL_KEY} and meter.refusals == []


@pytest.mark.slow
@needs_cli
def test_the_pinned_cli_stops_at_the_first_cap_refusal(prices, tmp_path):
    """The CLI asks for max_tokens 128,000 (2.56 USD of output): under a 1-dollar cap it is refused once and stops."""
    with FakeMessagesAPI(MODEL, [text_turn("Done.")]) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path / "records") as proxy:
        meter = proxy.open_run("r-cli-cap", Decimal("1.00"), MODEL)
        result = _run_cli(CLI, meter, tmp_path)
        upstream_calls = len(api.requests)
    assert result["is_error"] and result["api_error_status"] == 402 and "run cost cap reached" in result["result"]
    assert upstream_calls == 0 and meter.capped and len(meter.refusals) == 1 and meter.metered_usd == 0


@pytest.mark.slow
@needs_cli
def test_the_pinned_cli_with_a_wrong_token_is_refused_once(prices, tmp_path):
    """A forged token: one 401 (x-should-retry false, so the CLI does not retry) and nothing reaches the upstream."""
    with FakeMessagesAPI(MODEL, [text_turn("Done.")]) as api, MeteringProxy(api.url, REAL_KEY, prices, tmp_path / "records") as proxy:
        meter = proxy.open_run("r-cli-forged", Decimal("4.00"), MODEL)

        class Forged:
            env = {**meter.env, "ANTHROPIC_API_KEY": "pilot-run-forged"}

        result = _run_cli(CLI, Forged, tmp_path)
        upstream_calls = len(api.requests)
    assert result["is_error"] and result["api_error_status"] == 401
    assert upstream_calls == 0 and [r["reason"] for r in meter.refusals] == ["missing or wrong run token"]


def test_the_run_is_named_upstream_only_when_asked(prices, tmp_path, upstream):
    """``label_upstream`` (a scripted upstream) sends x-pilot-run-id; by default the upstream never learns the run."""
    for label in (False, True):
        with MeteringProxy(upstream.url, REAL_KEY, prices, tmp_path / f"rec-{label}", label_upstream=label) as p:
            meter = p.open_run("/runs/LEGAL-01 A1/attempt-1", Decimal("4.00"), MODEL)
            # A header of the agent's own naming a run is dropped, whatever the flag.
            host, port = meter.base_url.removeprefix("http://").split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("POST", "/v1/messages", body=json.dumps(_request()),
                         headers={"x-api-key": meter.token, "x-pilot-run-id": "forged"})
            assert conn.getresponse().status == 200
            conn.close()
    seen = [h.get("x-pilot-run-id") for h in upstream.headers]
    assert seen == [None, "/runs/LEGAL-01%20A1/attempt-1"]
    from pilot.agents.model_proxy import run_id_from_header

    assert run_id_from_header(seen[1]) == "/runs/LEGAL-01 A1/attempt-1"
