"""The model proxy's HTTP side: one listener per run, each request checked, reserved, relayed and booked.

The agent never holds the real API key. Each run gets its own listener (a
Unix socket file the sandbox binds in, and a loopback TCP address for hosts
without the bridge) and a random per-run token that is worthless anywhere
else. The proxy checks the token, swaps it for the real key, forwards the
request upstream and relays the answer, server-sent events chunk by chunk as
they arrive, reading each answer's usage as it goes.

The token, the framing and the size of a request are checked from its
headers before any byte of its body is read (:class:`_Handler`); a run has a
bounded number of connections and requests in flight, and refusals are
counted per reason with only the first few of each written whole. The body
is then checked against the run's arm's policy (:mod:`.policy`), its worst
case reserved (:mod:`.metering`), and what is forwarded is the parsed body
written anew (:mod:`.wire`). Closing a run (:meth:`MeteringProxy.close_run`,
which the runner calls when the agent is done) refuses whatever comes, waits
a bounded time for the requests in flight and books any still open at its
reserved worst case.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import secrets
import shutil
import socket
import socketserver
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pilot.agents.model_proxy.exchanges import (
    EXCHANGES_FILE_NAME,
    USAGE_FILE_NAME,
    record_folder_name,
    request_blocks,
)
from pilot.agents.model_proxy.metering import (
    COUNT_TOKENS_BURST,
    COUNT_TOKENS_PER_MINUTE,
    MAX_BODY_BYTES,
    MAX_OPEN_CONNECTIONS,
    REFUSAL_ROWS_PER_REASON,
    OpenRequest,
    RunMeter,
    count_input_bound,
    input_bound,
    worst_case,
)
from pilot.agents.model_proxy.policy import COUNT_KEYS, HeaderPolicy, check_request, default_policy
from pilot.agents.model_proxy.wire import (
    COUNT_ROUTE,
    MAX_EVENT_LINE_BYTES,
    MESSAGES_ROUTE,
    RUN_ID_HEADER,
    EventLines,
    LineTooLong,
    RequestRefused,
    error_body,
    parse_body,
    run_id_header_value,
    serialise_body,
    serialise_request,
    short_repr,
)
from pilot.protocol.design import PROXY_OWN_HEADERS, ProtocolError
from pilot.protocol.prices import PriceTable, Usage
from pilot.protocol.request_policy import RequestPolicy

log = logging.getLogger(__name__)

COUNT_TIMEOUT_S = 30.0
#: The longest wait for the next bytes of a body once its headers are in (the CLI sends a body at once).
BODY_IDLE_TIMEOUT_S = 60.0
#: After a refusal whose body was not read: how much the client may still send, dropped unread, and for how
#: long, so that the answer reaches it before the connection closes.
LINGER_BYTES = 1024 * 1024
LINGER_S = 2.0
#: How long closing a run waits for its requests still in flight to be answered and booked; what is still open then
#: is booked at its reserved worst case (the upstream bills it whether or not anyone reads the answer).
CLOSE_WAIT_S = 30.0
#: An upstream connection idle longer than this is not reused (servers close idle ones after a few seconds).
KEEP_ALIVE_IDLE_S = 4.0
#: Unix socket paths longer than this do not fit ``sockaddr_un``.
MAX_SOCKET_PATH = 100
#: The status and error type of a cap refusal. Every refusal also carries
#: ``x-should-retry: false``. On the pinned CLI (2.1.332) a 402 ends the session
#: after one request (``api_error_status: 402``); 400 is re-sent a few times,
#: 413 is reported as an oversized conversation, and 401, 429 and 529 without
#: that header are retried with back-off for minutes.
CAP_STATUS = 402
CAP_ERROR_TYPE = "billing_error"
CAP_MESSAGE_PREFIX = "run cost cap reached"
# What belongs to one connection or is set by the proxy itself: never passed on (the run label, set by the proxy
# when asked, is added after).
_HOP_BY_HOP = PROXY_OWN_HEADERS - {RUN_ID_HEADER}


def _linger(sock: socket.socket) -> None:
    """Half-close, then read and drop what the client still sends, within a bound.

    A connection closed with unread bytes is reset, and a reset can destroy
    the answer before the client reads it: a client that sent its body at once
    (as most do) then sees a broken connection instead of the refusal. The
    bytes are dropped as they come, so nothing accumulates.
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        deadline, left = time.monotonic() + LINGER_S, LINGER_BYTES
        while left > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            chunk = sock.recv(min(65536, left))
            if not chunk:
                break
            left -= len(chunk)
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pilot-model-proxy"
    #: An idle agent connection is dropped after this long (a tool call between two requests can take minutes).
    timeout = 3600
    sys_version = ""
    server: _Listener

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("model proxy: " + format, *args)

    def setup(self) -> None:
        super().setup()
        self._linger = False
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def finish(self) -> None:
        super().finish()
        if self._linger:
            _linger(self.connection)

    def handle_expect_100(self) -> bool:
        # Deferred: "100 Continue" is sent only once the token, the size and a slot are checked (see _read_exact).
        return True

    def do_POST(self) -> None:
        self._handle()

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_POST

    # -- plumbing -----------------------------------------------------------

    def _declared_length(self) -> int:
        """The body size the headers announce; RequestRefused (the body unread) when it is not one bounded number."""
        if self.headers.get("transfer-encoding") is not None:
            # A chunked upload has no size to check before reading it; the pinned CLI always sends a Content-Length.
            raise RequestRefused(
                "length_required",
                "request bodies must carry a Content-Length (chunked uploads are not accepted)",
                411,
                "invalid_request_error",
                close=True,
            )
        values = [v.strip() for v in self.headers.get_all("content-length") or []]
        if not values:
            return 0
        if len(set(values)) != 1 or not re.fullmatch(r"[0-9]{1,15}", values[0]):
            raise RequestRefused(
                "bad_content_length",
                f"content-length {short_repr(values, 100)}: must be one non-negative integer",
                400,
                close=True,
            )
        n = int(values[0])
        if n > MAX_BODY_BYTES:
            raise RequestRefused(
                "body_too_large",
                f"content-length {n}: request bodies over {MAX_BODY_BYTES} bytes are refused",
                413,
                "request_too_large",
                close=True,
            )
        return n

    def _read_exact(self, n: int) -> bytes:
        """Exactly the announced ``n`` bytes of body (never more), each wait for them bounded."""
        if n == 0:
            return b""
        if (self.headers.get("expect") or "").lower() == "100-continue":
            self.send_response_only(100)
            self.end_headers()
        self.connection.settimeout(BODY_IDLE_TIMEOUT_S)
        try:
            data = self.rfile.read(n)
        except OSError:
            data = b""
        finally:
            self.connection.settimeout(self.timeout)
        if len(data) != n:
            raise RequestRefused(
                "body_incomplete",
                f"the request body ended (or stalled) before its content-length of {n} bytes",
                400,
                close=True,
            )
        return data

    def _send_error(self, status: int, kind: str, message: str, close: bool = False) -> None:
        data = error_body(kind, message)
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("x-should-retry", "false")
            if close:
                # The body was not read: the connection cannot carry another request.
                self.send_header("connection", "close")
                self._linger = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _upstream_path(self) -> str:
        # Rebuilt from the path and query alone: a request target naming another host ("//host/..." or
        # "http://host/...") cannot steer where the real key goes.
        parts = urlsplit(self.path)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def _token(self) -> str | None:
        key = self.headers.get("x-api-key")
        if key:
            return key.strip()
        auth = self.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return None

    # -- one request ----------------------------------------------------------

    def _handle(self) -> None:
        meter = self.server.meter
        route = urlsplit(self.path).path.rstrip("/")
        try:
            self._dispatch(meter, self.server.proxy, route)
        except RequestRefused as refused:
            if refused.close:
                self.close_connection = True
            meter.refuse(refused.key, refused.record, path=route[:200], method=self.command, **refused.detail)
            self._send_error(refused.status, refused.error_type, refused.message, close=refused.close)

    def _dispatch(self, meter: RunMeter, proxy: MeteringProxy, route: str) -> None:
        # Everything the headers can decide is decided before a byte of the body is read.
        if not meter.token_ok(self._token()):
            raise RequestRefused(
                "bad_token",
                "invalid x-api-key",
                401,
                "authentication_error",
                close=True,
                record="missing or wrong run token",
            )
        if meter.closed:
            raise RequestRefused(
                "run_closed", f"run {meter.run_id} is closed", 403, "permission_error", close=True, record="run closed"
            )
        if self.command in ("HEAD", "GET") and route == "":
            # A reachability probe of the base URL: answered here, nothing leaves.
            if (
                self.headers.get("transfer-encoding") is not None
                or (self.headers.get("content-length") or "0").strip() != "0"
            ):
                self.close_connection = True
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.command != "POST" or route not in (MESSAGES_ROUTE, COUNT_ROUTE):
            raise RequestRefused(
                "not_offered",
                f"{self.command} {(route or '/')[:200]} is not offered by the run's model proxy",
                404,
                "not_found_error",
                close=True,
                record="endpoint not offered by the proxy",
            )
        refused = proxy.headers.refusal(self.headers)
        if refused is not None:
            raise refused
        n = self._declared_length()
        if route == COUNT_ROUTE and not meter.count_bucket.take(proxy.clock()):
            raise RequestRefused(
                "rate_limited",
                f"count_tokens: more than {COUNT_TOKENS_BURST} requests at once or "
                f"{COUNT_TOKENS_PER_MINUTE} a minute are not available to a run",
                429,
                "rate_limit_error",
                close=True,
            )
        busy = meter.enter_request(n)
        if busy is not None:
            raise busy
        try:
            body = parse_body(self._read_exact(n))
            if route == COUNT_ROUTE:
                facts = check_request(
                    body, count_tokens=True, models=meter.models, prices=proxy.prices, policy=meter.policy
                )
                payload = serialise_body(body)
                del body  # only the forwarded bytes are held while the answer is relayed
                request = OpenRequest(
                    {"kind": "count_tokens", "path": route, "model": facts.model}, None, Decimal(0), None, None
                )
                meter.reserve(Decimal(0), request)
                return self._forward(meter, proxy, payload, request)
            plan = self._plan_messages(meter, proxy, body)
            del body
            if plan is not None:
                self._forward(meter, proxy, *plan)
            return None
        finally:
            meter.leave_request(n)

    def _plan_messages(self, meter: RunMeter, proxy: MeteringProxy, body: Any) -> tuple | None:
        """Check a messages request and reserve its worst case: the forward's arguments, or None when the cap refused
        it."""
        facts = check_request(body, count_tokens=False, models=meter.models, prices=proxy.prices, policy=meter.policy)
        payload, parts = serialise_request(body)
        blocks = request_blocks(body, meter.seen, parts)
        price = proxy.prices.price(facts.model)
        max_tokens = facts.max_tokens
        assert max_tokens is not None
        first, method = input_bound(len(payload), facts, price)
        bound, worst = worst_case(first, facts, price, meter.server_tool_fees)
        info = {
            "kind": "messages",
            "path": MESSAGES_ROUTE,
            "model": facts.model,
            "stream": bool(body.get("stream")),
            "max_tokens": max_tokens,
        }
        offered: dict[str, int] = {}
        for offer in facts.server_tools:
            offered[offer.tool.usage] = offered.get(offer.tool.usage, 0) + offer.uses
        request = OpenRequest(info, price, worst, max_tokens, blocks, offered=offered, fees=meter.server_tool_fees)
        refusal = meter.reserve(worst, request)
        if refusal is not None and not meter.capped:
            counted = proxy.count_tokens(body, self.headers, urlsplit(self.path).query, run_id=meter.run_id)
            if counted is None:
                refusal += "; count_tokens could not tighten the bound"
            else:
                first, method = min(first, count_input_bound(counted, price)), "count_tokens"
                bound, worst = worst_case(first, facts, price, meter.server_tool_fees)
                request.worst = worst
                refusal = meter.reserve(worst, request)
        if offered:
            method += f"; {facts.server_tool_uses} server-tool uses"
        if refusal is not None:
            meter.mark_capped(refusal)
            meter.refuse(
                "cap",
                refusal,
                path=MESSAGES_ROUTE,
                model=facts.model,
                max_tokens=max_tokens,
                input_bound_tokens=bound,
                bound_method=method,
                worst_case_usd=str(worst),
                one_hour_cache=facts.one_hour_cache,
                capped=True,
                **({"server_tool_uses_offered": offered} if offered else {}),
            )
            self._send_error(CAP_STATUS, CAP_ERROR_TYPE, f"{CAP_MESSAGE_PREFIX}: {refusal}")
            return None
        info.update(
            input_bound_tokens=bound,
            bound_method=method,
            one_hour_cache=facts.one_hour_cache,
            worst_case_usd=str(worst),
        )
        if offered:
            info["server_tool_uses_offered"] = offered
        return payload, request

    def _forward(self, meter: RunMeter, proxy: MeteringProxy, payload: bytes, request: OpenRequest) -> None:
        """Relay one request upstream and its answer back; book it before the answer's last byte leaves.

        Booking first means that once the agent has a whole answer, the meter
        already holds its cost (and its exchange row). Whatever ends the relay,
        the request is booked (:meth:`RunMeter.book`, once).
        """
        headers, dropped = proxy.headers.forward(self.headers)
        if dropped:
            meter.count_dropped_headers(dropped)
        if proxy.label_upstream:
            headers[RUN_ID_HEADER] = run_id_header_value(meter.run_id)
        try:
            try:
                resp = proxy.upstream_request(self.command, self._upstream_path(), payload, headers)
            except (OSError, http.client.HTTPException) as exc:
                request.add_note(f"upstream unreachable: {exc}")
                request.usage, request.complete = Usage(), True
                meter.book(request)
                self._send_error(502, "api_error", "the model API could not be reached")
                return
            request.status, request.answered = resp.status, True
            ctype = (resp.getheader("content-type") or "").lower()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP:
                    self.send_header(k, v)
            if "text/event-stream" in ctype:
                client_ok = self._relay_stream(resp, request)
                meter.book(request)
                if client_ok and request.ended_by is None:
                    try:
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        self.close_connection = True
                else:
                    self.close_connection = True
            else:
                data = resp.read()
                if request.info["kind"] == "messages":
                    self._read_whole(data, request)
                meter.book(request)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            if not resp.will_close and request.ended_by is None:
                proxy.release_connection(resp)
        finally:
            if not request.booked:
                meter.book(request)

    @staticmethod
    def _read_whole(data: bytes, request: OpenRequest) -> None:
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            message = None
        if isinstance(message, dict):
            request.answer.whole(message)
        if request.status != 200:
            return
        try:
            if not isinstance(message, dict):
                raise ValueError("not an object")
            request.usage = Usage.from_api(message["usage"])
            request.read_server_tool_use(message["usage"])
            request.message_id, request.complete = message.get("id"), True
            request.service_tier = message["usage"].get("service_tier")
        except (ValueError, KeyError, TypeError, AttributeError):
            request.add_note("answer carried no readable usage")

    def _relay_stream(self, resp: http.client.HTTPResponse, request: OpenRequest) -> bool:
        """Relay server-sent events chunk by chunk, reading usage from message_start and message_delta as they come.

        Lines are split in linear time and held only up to the bound
        (:class:`EventLines`): a longer line ends the answer there, as a cut
        (the agent's stream is closed without its last chunk). Returns whether
        the agent is still connected. When it is not, the upstream answer is
        still read to its end: it is billed whole, so its usage must be seen.
        """
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        client_ok = True
        lines = EventLines(MAX_EVENT_LINE_BYTES)
        while True:
            try:
                chunk = resp.read1(65536)
            except (OSError, http.client.HTTPException) as exc:
                # The upstream cut its stream: the answer is booked at what it said (the output at max_tokens), and
                # the agent sees the cut as it happened rather than a stream the proxy closed for it.
                request.add_note(f"the upstream cut the stream mid-way ({type(exc).__name__})")
                request.ended_by = "upstream_cut"
                break
            if not chunk:
                break
            if client_ok:
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                except OSError:
                    client_ok = False
                    request.add_note("the agent closed the connection mid-stream")
            try:
                for line in lines.feed(chunk):
                    if line.startswith(b"data:"):
                        self._read_event(line[5:], request)
            except LineTooLong:
                # No event of the API is this long: the answer ends here, booked at what its events had said.
                request.add_note(f"an event line passed {MAX_EVENT_LINE_BYTES} bytes: the answer was ended there")
                request.ended_by = "event_line_bound"
                request.answer.failed = True
                resp.close()
                break
        return client_ok

    @staticmethod
    def _read_event(data: bytes, request: OpenRequest) -> None:
        try:
            event = json.loads(data)
            if not isinstance(event, dict):
                raise ValueError("not an object")
            kind = event.get("type")
            if kind == "message_start":
                message = event.get("message") or {}
                request.usage, request.message_id = Usage.from_api(message.get("usage")), message.get("id")
                request.read_server_tool_use(message.get("usage"))
                request.service_tier = (message.get("usage") or {}).get("service_tier")
            elif kind == "message_delta" and request.usage is not None:
                request.usage = request.usage.updated(event.get("usage"))
                request.read_server_tool_use(event.get("usage"))
                request.complete = True
            elif kind == "error":
                request.add_note(f"stream error event: {json.dumps(event.get('error'), default=str)[:300]}")
        except (ValueError, TypeError, AttributeError, RecursionError):
            request.answer.failed = True
            return
        request.answer.event(event)


class _Listener(socketserver.ThreadingMixIn):
    daemon_threads = True
    block_on_close = False
    # socketserver's default backlog of 5 makes a burst of connects wait a second for a SYN retransmit.
    request_queue_size = 64
    meter: RunMeter
    proxy: MeteringProxy

    def process_request(self, request: Any, client_address: Any) -> None:
        # Each connection is a thread: past the run's bound it is closed at once, before any byte is read.
        if not self.meter.connection_opened():
            self.meter.refuse(
                "too_many_connections", f"more than {MAX_OPEN_CONNECTIONS} open connections: closed unread"
            )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.meter.connection_closed()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.meter.connection_closed()


class _TCPListener(_Listener, socketserver.TCPServer):
    allow_reuse_address = True


class _UnixListener(_Listener, socketserver.UnixStreamServer):
    pass


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP client connection to a Unix socket file (a run's listener, seen from the harness side)."""

    def __init__(self, socket_path: Path | str, timeout: float = 60.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = str(socket_path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


# --------------------------------------------------------------------------
# The proxy
# --------------------------------------------------------------------------


class MeteringProxy:
    """Holds the real key; opens one metered listener per run.

    >>> with MeteringProxy(url, key, PriceTable.load(), record_dir) as proxy:   # doctest: +SKIP
    ...     meter = proxy.open_run("LEGAL-01.A1.r1", Decimal("4.00"), "claude-opus-5-5")
    ...     # the agent: ANTHROPIC_BASE_URL=meter.base_url, ANTHROPIC_API_KEY=meter.token
    ...     proxy.close_run(meter.run_id)
    """

    def __init__(
        self,
        upstream_url: str,
        api_key: str,
        prices: PriceTable,
        record_dir: Path,
        *,
        socket_dir: Path | None = None,
        timeout_s: float = 600.0,
        ssl_context: ssl.SSLContext | None = None,
        label_upstream: bool = False,
        clock: Callable[[], float] = time.monotonic,
        headers: HeaderPolicy | None = None,
        close_wait_s: float | None = None,
    ) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream_url must be an http(s) URL, got {upstream_url!r}")
        if not api_key:
            # Allowed (a scripted upstream needs none), but a real upstream will refuse every request.
            log.warning("model proxy for %s started without an API key", upstream_url)
        self.upstream_url = upstream_url
        self._scheme, self._host = parts.scheme, parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._api_key = api_key
        self.prices = prices
        self.record_dir = Path(record_dir)
        self.timeout_s = timeout_s
        self._socket_dir_arg = socket_dir
        self.socket_dir: Path | None = None
        self._own_socket_dir = False
        # Certificates are always verified; ssl_context only chooses whom to trust (default: the system's CAs).
        self._ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        # Opt-in, for a local scripted upstream that plays each run: the real API is never told the run's id.
        self.label_upstream = bool(label_upstream)
        #: Seconds, for the count_tokens rate limit (a test passes its own).
        self.clock = clock
        #: Which request headers pass upstream (default: study.yml's ``model_proxy``).
        self.headers = headers if headers is not None else HeaderPolicy.from_study()
        #: How long closing a run waits for its requests in flight (:meth:`close_run`; default ``CLOSE_WAIT_S``).
        self.close_wait_s = CLOSE_WAIT_S if close_wait_s is None else float(close_wait_s)
        self._runs: dict[str, RunMeter] = {}
        self._lock = threading.Lock()
        self._pool = threading.local()
        self._started = False

    def __repr__(self) -> str:
        return f"MeteringProxy(upstream={self.upstream_url!r}, runs={sorted(self._runs)})"

    # -- lifetime -------------------------------------------------------------

    def start(self) -> MeteringProxy:
        if self._started:
            return self
        self.record_dir.mkdir(parents=True, exist_ok=True)
        if self._socket_dir_arg is None:
            self.socket_dir, self._own_socket_dir = Path(tempfile.mkdtemp(prefix="pilot-proxy-")), True
        else:
            self.socket_dir = Path(self._socket_dir_arg)
            self.socket_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.chmod(0o700)
        self._started = True
        return self

    def stop(self) -> None:
        for run_id in list(self._runs):
            if not self._runs[run_id].closed:
                self.close_run(run_id)
        if self._own_socket_dir and self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        self._started = False

    def __enter__(self) -> MeteringProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- runs -----------------------------------------------------------------

    def open_run(
        self,
        run_id: str,
        cap_usd: Decimal,
        model: str,
        *,
        other_models: Iterable[str] = (),
        policy: RequestPolicy | None = None,
    ) -> RunMeter:
        """A new listener (Unix socket and loopback TCP) and token for one run.

        The run may call ``model`` only (the pinned CLI makes no side calls to
        other models in print mode); ``other_models`` widens that on purpose.
        ``policy`` is what its requests may carry: its arm's
        (:attr:`pilot.protocol.Arm.request_policy`); without one, the common
        policy of arms.yml. Every server tool it allows must have a price.
        """
        policy = policy if policy is not None else default_policy()
        unpriced = [c for c in policy.usage_counters() if c not in self.prices.server_tools]
        if unpriced:
            raise ProtocolError(
                self.prices.path, "server_tools", f"no price for {unpriced}, which arm {policy.arm}'s policy allows"
            )
        if not self._started:
            raise RuntimeError("start the proxy before opening a run")
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run id must be a non-empty string, got {run_id!r}")
        if not isinstance(cap_usd, Decimal) or not cap_usd.is_finite() or cap_usd <= 0:
            raise ValueError(f"cap_usd must be a positive Decimal, got {cap_usd!r}")
        models = frozenset({model, *other_models})
        for m in models:
            self.prices.price(m)
        assert self.socket_dir is not None
        name = record_folder_name(run_id)
        sock = self.socket_dir / f"{name}.sock"
        if len(str(sock)) > MAX_SOCKET_PATH:
            sock = self.socket_dir / f"run-{secrets.token_hex(6)}.sock"
        if len(str(sock)) > MAX_SOCKET_PATH:
            raise ValueError(f"socket folder {self.socket_dir} is too long for a Unix socket path")
        with self._lock:
            old = self._runs.get(run_id)
            if old is not None and not old.closed:
                raise ValueError(f"run {run_id} is already open on this proxy")
            run_dir = self.record_dir / name
            run_dir.mkdir(parents=True, exist_ok=True)
            sock.unlink(missing_ok=True)
            tcp = _TCPListener(("127.0.0.1", 0), _Handler)
            unix = _UnixListener(str(sock), _Handler)
            sock.chmod(0o600)
            meter = RunMeter(
                run_id=run_id,
                cap_usd=cap_usd,
                model=model,
                models=models,
                token=f"pilot-run-{secrets.token_urlsafe(32)}",
                socket_path=sock,
                base_url=f"http://127.0.0.1:{tcp.server_address[1]}",
                record_path=run_dir / USAGE_FILE_NAME,
                exchanges_path=run_dir / EXCHANGES_FILE_NAME,
                policy=policy,
                server_tool_fees={c: self.prices.server_tools[c] for c in policy.usage_counters()},
            )
            meter._closer = lambda: self.close_run(run_id)
            # Present from the start, so that a run without exchanges is told apart from a run without a proxy.
            meter.exchanges_path.touch()
            meter._exchange_bytes = meter.exchanges_path.stat().st_size
            for server in (tcp, unix):
                server.meter, server.proxy = meter, self
                meter._servers.append(server)
                threading.Thread(
                    target=server.serve_forever,
                    kwargs={"poll_interval": 0.1},
                    name=f"model-proxy-{run_id}",
                    daemon=True,
                ).start()
            self._runs[run_id] = meter
        meter._write(
            {
                "kind": "opened",
                "cap_usd": str(cap_usd),
                "model": model,
                "models": sorted(models),
                "upstream": self.upstream_url,
                # Which arm's policy the run is held to, and the server tools it allows, when it has any.
                **({"policy": policy.summary()} if policy.arm is not None else {}),
            }
        )
        return meter

    def close_run(self, run_id: str, wait_s: float | None = None) -> RunMeter:
        """Close the run's books: refuse whatever comes, wait for what is in flight, book what is still open.

        From this call on no request of the run is forwarded (one on a
        connection still open is refused and counted, ``run_closed``) and the
        listeners close. The requests already forwarded get up to ``wait_s``
        (default ``close_wait_s``) to be answered and booked at what their
        answers say; any still open then is booked at its reserved worst case,
        so the run's metered cost never misses a request the upstream bills.
        Idempotent.
        """
        meter = self._runs[run_id]
        with meter._lock:
            if meter.closed:
                return meter
            meter.closed = True
        for server in meter._servers:
            server.shutdown()
            server.server_close()
        meter.socket_path.unlink(missing_ok=True)
        meter.close_books(self.close_wait_s if wait_s is None else wait_s)
        with meter._lock:
            counts = dict(sorted(meter.refusal_counts.items()))
            meter._write({"kind": "refusals", "counts": counts})
            meter._write(
                {
                    "kind": "closed",
                    "metered_usd": str(meter.metered_usd),
                    "capped": meter.capped,
                    "capped_reason": meter.capped_reason,
                    "requests": len(meter.requests),
                    "refusals": sum(counts.values()),
                    "booked_at_close": meter.booked_at_close,
                    "dropped_headers": dict(sorted(meter.dropped_headers.items())),
                }
            )
        if any(n > REFUSAL_ROWS_PER_REASON for n in counts.values()):
            log.warning("model proxy: run %s closed with refusals %s", run_id, counts)
        return meter

    def meter(self, run_id: str) -> RunMeter:
        return self._runs[run_id]

    # -- upstream -------------------------------------------------------------

    def _connect(self) -> http.client.HTTPConnection:
        if self._ssl is not None:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout_s, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)

    def upstream_request(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> http.client.HTTPResponse:
        """Send one request upstream with the real key, on this thread's kept-alive connection if it is fresh.

        A request is re-sent on a new connection only when sending it failed
        (the upstream had closed the idle connection, so it never saw it); a
        failure after it was sent is not retried, since the upstream may have
        run and billed it: the agent gets a 502 and its client decides.
        """
        headers = {**headers, "x-api-key": self._api_key, "accept-encoding": "identity"}
        if body or method in ("POST", "PUT", "PATCH"):
            headers["content-length"] = str(len(body))
        reused, idle_since = getattr(self._pool, "conn", None), getattr(self._pool, "idle_since", 0.0)
        self._pool.conn = None
        if reused is not None and time.monotonic() - idle_since > KEEP_ALIVE_IDLE_S:
            reused.close()
            reused = None
        conn: http.client.HTTPConnection = reused or self._connect()
        try:
            conn.request(method, self._prefix + path, body=body or None, headers=headers)
        except (ConnectionResetError, BrokenPipeError):
            if conn is not reused:
                raise
            conn.close()
            conn = self._connect()
            conn.request(method, self._prefix + path, body=body or None, headers=headers)
        resp = conn.getresponse()
        resp._pilot_conn = conn  # type: ignore[attr-defined]
        return resp

    def release_connection(self, resp: http.client.HTTPResponse) -> None:
        """Keep a finished answer's connection for this thread's next request."""
        conn = getattr(resp, "_pilot_conn", None)
        if conn is not None and resp.isclosed():
            old = getattr(self._pool, "conn", None)
            if old is not None:
                old.close()
            self._pool.conn, self._pool.idle_since = conn, time.monotonic()

    def count_tokens(self, body: dict, client_headers: Any, query: str = "", run_id: str | None = None) -> int | None:
        """The upstream count of a messages request's input tokens; None when it cannot be had.

        Sent with the request's own betas and query (``?beta=true``), so that
        the fields the betas add (context management, output config) are accepted.
        """
        payload = json.dumps({k: v for k, v in body.items() if k in COUNT_KEYS}).encode()
        headers = {
            "content-type": "application/json",
            "x-api-key": self._api_key,
            "accept-encoding": "identity",
            "content-length": str(len(payload)),
        }
        for name in ("anthropic-version", "anthropic-beta"):
            # The request's own, already checked against the study's lists (HeaderPolicy.refusal).
            if client_headers.get(name) and name in self.headers.forwarded:
                headers[name] = client_headers[name]
        headers.setdefault("anthropic-version", "2023-06-01")
        if self.label_upstream and run_id is not None:
            headers[RUN_ID_HEADER] = run_id_header_value(run_id)
        conn = self._connect()
        conn.timeout = COUNT_TIMEOUT_S
        try:
            target = self._prefix + "/v1/messages/count_tokens" + (f"?{query}" if query else "")
            conn.request("POST", target, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                log.warning("count_tokens answered %s: %s", resp.status, data[:200])
                return None
            n = json.loads(data).get("input_tokens")
            return n if isinstance(n, int) and n >= 0 else None
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("count_tokens failed: %s", exc)
            return None
        finally:
            conn.close()
