"""The money side of the model proxy: each request's worst case reserved against the run's cap, each answer booked.

Before a request is forwarded its worst case is reserved against the run's
dollar cap (:func:`worst_case`): an upper bound on its input tokens priced at
the dearest input rate, plus its ``max_tokens`` at the output rate, plus the
fee of every server-tool use it may make. A request whose worst case would
take the metered spend (plus what other requests of the run have in flight)
over the cap is refused and the run is marked capped; so the metered spend of
a run never exceeds its cap (see ``protocol/interpretations.md``, "Metered
cost and the dollar cap").

The input bound (:func:`input_bound`) comes first from the request body
alone: a token covers at least one byte of the text it encodes, so the
body's size plus a fixed allowance for the API's own framing and the arm's
per-block allowances (an image's) bounds one sampling pass; a block whose
input the body does not bound (a document's rendered pages) makes it the
model's whole input. A request offering server tools may take one more pass
for each use, each reading what the uses before it added (the arm's declared
per-use bound, :class:`~pilot.protocol.request_policy.ServerTool`): the bound
is the sum over those passes (:func:`server_tool_input`). Only when the bound
would cross the cap does the relay ask the upstream ``count_tokens`` for the
request's input (:func:`count_input_bound`, with a safety margin).

Every forwarded request is booked once (:class:`OpenRequest`,
:meth:`RunMeter.book`), at the usage its events report as they arrive; an
answer cut, malformed or ended at the event-line bound is booked at what it
said, its output at ``max_tokens``. Closing a run books any request still
open at its reserved worst case, so no request the upstream bills is missed.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
import socketserver
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pilot.agents.model_proxy.exchanges import SEEN_KEYS_MAX, AnswerRecord, RequestBlocks
from pilot.agents.model_proxy.policy import RequestFacts, default_policy
from pilot.agents.model_proxy.wire import RequestRefused
from pilot.protocol.prices import ModelPrice, Usage
from pilot.protocol.request_policy import CONTEXT, RequestPolicy

log = logging.getLogger(__name__)

#: Tokens allowed on top of the body size for the API's own framing of a request
#: (role markers, the tool-use preamble, tool-definition wrappers).
FRAMING_ALLOWANCE_TOKENS = 4096
#: count_tokens is an estimate of the input ("may differ by a small amount"):
#: its answer is raised by this factor plus the framing allowance.
COUNT_MARGIN = Decimal("1.05")
#: The Messages API refuses bodies over 32 MB; so does the proxy, from the Content-Length, before reading.
MAX_BODY_BYTES = 32 * 1024 * 1024
#: Requests of one run being read, checked or relayed at once. The pinned CLI sends one at a time in print
#: mode (no arm has a subagent tool), so 8 is ample for it and bounds what one run can make the harness hold.
MAX_IN_FLIGHT = 8
#: The announced bodies of one run's requests in flight, together: one body of the largest size and room
#: for small ones beside it. This bounds the request bytes one run can make the harness hold (a body's
#: parsed form, while it is checked, comes on top).
MAX_IN_FLIGHT_BODY_BYTES = MAX_BODY_BYTES + 8 * 1024 * 1024
#: Open connections of one run (each is a harness thread); beyond it a new connection is closed unread.
#: The CLI needs one at a time, a few with the connections its HTTP client keeps alive.
MAX_OPEN_CONNECTIONS = 32
#: count_tokens is free, but it runs on the shared key and is not metered: a run may burst this many calls and
#: then one a second. The pinned CLI made no such call in the sessions seen through the proxy; it can make one
#: to size a large tool result before sending it, so a few a turn at most, and its turns take seconds.
COUNT_TOKENS_BURST = 20
COUNT_TOKENS_PER_MINUTE = 60
#: Refusal rows written whole (and kept in ``RunMeter.refusals``) per reason; the rest are only counted.
REFUSAL_ROWS_PER_REASON = 5
#: The reason keys refusals are counted under (``RunMeter.refusal_counts``).
REFUSAL_KEYS = frozenset(
    {
        "bad_token",
        "run_closed",
        "not_offered",
        "length_required",
        "bad_content_length",
        "body_too_large",
        "too_many_in_flight",
        "in_flight_bytes",
        "too_many_connections",
        "body_incomplete",
        "invalid_json",
        "invalid_request",
        "model_not_priced",
        "model_not_allowed",
        "max_tokens",
        "field_not_allowed",
        "server_tool",
        "block_not_allowed",
        "url_source",
        "file_source",
        "source_not_allowed",
        "rate_limited",
        "cap",
        "beta_not_allowed",
        "version_not_allowed",
    }
)
#: The exchange rows one run may write; past it one ``exchanges_truncated`` row, and metering goes on.
EXCHANGES_MAX_BYTES = 64 * 1024 * 1024


# --------------------------------------------------------------------------
# Worst case of one request
# --------------------------------------------------------------------------


def input_bound(body_bytes: int, facts: RequestFacts, price: ModelPrice) -> tuple[int, str]:
    """An upper bound on one sampling pass's billed input tokens from the request alone, and how it was found.

    ``body_bytes`` is the size of the forwarded body, which carries every text
    the model reads (a token covers at least one byte of it; escapes only add
    bytes); the arm's allowances (an image's) come on top. With a block the
    body does not bound (a document: its pages are rendered as text and
    images) the bound is the model's largest input.
    """
    if facts.context_block is not None:
        return price.max_input_tokens, f"max_input ({facts.context_block})"
    bound = body_bytes + FRAMING_ALLOWANCE_TOKENS + facts.allowance_tokens
    return min(bound, price.max_input_tokens), "body_bytes"


def count_input_bound(counted: int, price: ModelPrice) -> int:
    """The input bound from an upstream count_tokens answer, with its margin."""
    bound = math.ceil(Decimal(counted) * COUNT_MARGIN) + FRAMING_ALLOWANCE_TOKENS
    return min(bound, price.max_input_tokens)


def server_tool_input(first_pass: int, facts: RequestFacts, price: ModelPrice) -> int:
    """The input bound of a whole request whose first sampling pass is bounded by ``first_pass``.

    Each server-tool use may add a pass that reads everything before it plus
    what the use returned (its ``per_use`` bound: an allowance, or the whole
    context); the largest additions are taken first, and no pass reads more
    than the model's largest input. Without server tools it is ``first_pass``.
    """
    adds = sorted(
        (
            price.max_input_tokens if offer.tool.per_use.kind == CONTEXT else offer.tool.per_use.tokens
            for offer in facts.server_tools
            for _ in range(offer.uses)
        ),
        reverse=True,
    )
    total = current = first_pass
    for add in adds:
        current = min(current + add, price.max_input_tokens)
        total += current
    return total


def server_tool_fees(facts: RequestFacts, fees: Mapping[str, Decimal]) -> Decimal:
    """The fees of every server-tool use the request may make (``prices.yml`` ``server_tools``, USD per use)."""
    return sum((fees[offer.tool.usage] * offer.uses for offer in facts.server_tools), Decimal(0))


def worst_case(
    first_pass: int, facts: RequestFacts, price: ModelPrice, fees: Mapping[str, Decimal]
) -> tuple[int, Decimal]:
    """The request's whole input bound and its worst case in USD: input at the dearest rate, ``max_tokens`` of
    output, and every server-tool use's fee."""
    bound = server_tool_input(first_pass, facts, price)
    return bound, price.worst_case(bound, facts.max_tokens or 0, facts.one_hour_cache) + server_tool_fees(facts, fees)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class TokenBucket:
    """A rate limit: ``burst`` requests at once, refilled at ``per_minute``; the clock is the caller's."""

    def __init__(self, burst: int, per_minute: int) -> None:
        self.burst, self.per_minute = burst, per_minute
        self._tokens = float(burst)
        self._at: float | None = None
        self._lock = threading.Lock()

    def take(self, now: float) -> bool:
        """Take one request's token at time ``now`` (seconds); False when none is left."""
        with self._lock:
            if self._at is not None:
                self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._at) * self.per_minute / 60)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


class OpenRequest:
    """A request the proxy forwarded, from its reservation until it is booked: what its answer has said so far.

    The relay updates it as each event arrives (``message_start`` gives the
    input and cache usage, ``message_delta`` the output), so that whoever books
    it (the relay when the answer ends, or :meth:`RunMeter.close_books` when
    the run closes first) books what the upstream has said by then.
    """

    def __init__(
        self,
        info: dict,
        price: ModelPrice | None,
        worst: Decimal,
        max_tokens: int | None,
        blocks: RequestBlocks | None,
        *,
        offered: Mapping[str, int] | None = None,
        fees: Mapping[str, Decimal] | None = None,
    ) -> None:
        self.info, self.price, self.worst, self.max_tokens, self.blocks = info, price, worst, max_tokens, blocks
        #: Server-tool uses the request offered the model, by usage counter, and the price table's fees per use.
        self.offered: dict[str, int] = dict(offered or {})
        self.fees: Mapping[str, Decimal] = fees or {}
        #: Server-tool uses the answer reported so far (``usage.server_tool_use``), by counter.
        self.server_tool_use: dict[str, int] = {}
        self.started = time.perf_counter()
        self.status = 502
        self.answered = False
        self.usage: Usage | None = None
        self.complete = False
        self.message_id: Any = None
        self.service_tier: Any = None
        self.note: str | None = None
        #: Why the answer ended before its end: ``upstream_cut``, ``event_line_bound``, ``run_closed``; None when whole.
        self.ended_by: str | None = None
        self.answer = AnswerRecord()
        self.booked = False

    def add_note(self, note: str) -> None:
        self.note = f"{self.note}; {note}" if self.note else note

    def read_server_tool_use(self, usage: Any) -> None:
        """The server-tool counts of an API ``usage`` object (message_start, message_delta or a whole answer), which
        are cumulative: each replaces the one before."""
        said = usage.get("server_tool_use") if isinstance(usage, dict) else None
        if isinstance(said, dict):
            for key, n in said.items():
                if isinstance(key, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                    self.server_tool_use[key[:80]] = n

    def _server_tool_cost(self, complete: bool) -> tuple[Decimal, str | None]:
        # The fees of the uses the answer reported; an answer that ended before its final count is charged every use
        # its request offered.
        uses = dict(self.server_tool_use)
        if not complete:
            for key, n in self.offered.items():
                uses[key] = max(uses.get(key, 0), n)
        unpriced = sorted(k for k, n in uses.items() if n and k not in self.fees)
        fee = sum((self.fees[k] * n for k, n in uses.items() if k in self.fees), Decimal(0))
        note = f"server-tool uses {unpriced} have no price in the table" if unpriced else None
        return fee, note

    def usage_row(self) -> dict:
        """The usage row for what the answer has said: priced, with the rules for an answer that told too little."""
        row = {
            **self.info,
            "status": self.status,
            "message_id": self.message_id,
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 3),
        }
        if self.price is None:
            return {**row, "cost_usd": "0", "note": self.note}
        usage, complete, note = self.usage, self.complete, self.note
        if self.status != 200 and usage is None:
            usage, complete = Usage(), True  # the API does not bill a refused or failed request
            note = note or f"upstream status {self.status}: not billed"
        at_worst = usage is None or (bool(self.offered) and not complete)
        if usage is None:
            # An answer began but told nothing of its usage: charge its whole worst case.
            usage = Usage()
            note = (note + "; " if note else "") + "no usage seen: charged the request's worst case"
        elif not complete:
            # The final count never arrived: charge the whole output allowance.
            usage = Usage(**{**usage.as_dict(), "output_tokens": max(usage.output_tokens, self.max_tokens or 0)})
            note = (note + "; " if note else "") + "final usage not seen: output charged at max_tokens"
            if self.offered:
                # A request offering server tools bills a sampling pass per use, and the input of the passes after
                # the one the answer reported is unknown.
                note += "; it offered server tools: charged its worst case"
        cost = self.worst if at_worst else self.price.cost(usage)
        server_fee: Decimal | None = None
        if self.offered or self.server_tool_use:
            server_fee, unpriced = self._server_tool_cost(complete)
            if not at_worst:
                cost += server_fee
            if unpriced:
                note = (note + "; " if note else "") + unpriced
        tier = self.service_tier
        if tier not in (None, "standard"):
            note = (
                note + "; " if note else ""
            ) + f"billed in service tier {tier!r}, priced at the table's standard rates"
        row.update(usage.as_dict())
        row.update(cost_usd=str(cost), usage_complete=complete, service_tier=tier, note=note)
        if server_fee is not None:
            row.update(server_tool_use=dict(self.server_tool_use), server_tool_usd=str(server_fee))
        if self.ended_by is not None:
            row["ended_by"] = self.ended_by
        return row

    def exchange_row(self, cost_usd: str) -> dict | None:
        """The exchange row of a messages request the upstream answered or that was open when the run closed."""
        if self.blocks is None or not (self.answered or self.ended_by == "run_closed"):
            return None
        content, cut = self.answer.content()
        message_id = self.message_id
        return {
            "status": self.status if self.answered else None,
            "model": self.info["model"],
            "message_id": message_id if isinstance(message_id, str) else None,
            "stop_reason": self.answer.stop_reason,
            "complete": self.answer.complete and not self.answer.failed and self.ended_by is None,
            **self.blocks.row(),
            "response_content": content,
            "truncated": bool(self.blocks.truncated or cut),
            "cost_usd": cost_usd,
            "ended_by": self.ended_by,
        }


@dataclass
class RunMeter:
    """One run's listener, token and running account. Read it; the proxy writes it."""

    run_id: str
    cap_usd: Decimal
    model: str
    #: The models this run may call (``model`` and any widened on purpose).
    models: frozenset[str]
    token: str = field(repr=False)
    socket_path: Path
    base_url: str
    record_path: Path
    #: The run's exchange record (``proxy_exchanges.jsonl``, beside the usage record).
    exchanges_path: Path
    #: What the run's requests may carry: its arm's policy (the common one of arms.yml when opened without).
    policy: RequestPolicy = field(default_factory=default_policy, repr=False)
    #: The price table's fee per server-tool use, by usage counter (``prices.yml`` ``server_tools``).
    server_tool_fees: Mapping[str, Decimal] = field(default_factory=dict, repr=False)
    metered_usd: Decimal = Decimal(0)
    requests: list[dict] = field(default_factory=list)
    #: The first refusal rows of each reason (at most ``REFUSAL_ROWS_PER_REASON`` each); ``refusal_counts`` has them
    #: all.
    refusals: list[dict] = field(default_factory=list)
    #: Refusals per reason key (``bad_token``, ``url_source``, ``cap``, ...), every one counted.
    refusal_counts: dict[str, int] = field(default_factory=dict)
    capped: bool = False
    capped_reason: str | None = None
    closed: bool = False
    #: Worst cases of the requests now in flight.
    reserved_usd: Decimal = Decimal(0)
    #: Whether the exchange record reached its bound (``EXCHANGES_MAX_BYTES``) and stopped.
    exchanges_truncated: bool = False
    #: Request headers outside the study's list, dropped rather than forwarded: how often, per name.
    dropped_headers: dict[str, int] = field(default_factory=dict)
    #: Requests still open when the run closed and booked then at their worst case.
    booked_at_close: int = 0
    count_bucket: TokenBucket = field(
        default_factory=lambda: TokenBucket(COUNT_TOKENS_BURST, COUNT_TOKENS_PER_MINUTE), repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _seq: int = 0
    _exchange_bytes: int = 0
    _servers: list[socketserver.BaseServer] = field(default_factory=list, repr=False)
    # Requests and connections now open; counted apart from the record's lock, which a long write can hold.
    _slots: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _in_flight: int = 0
    _in_flight_bytes: int = 0
    _connections: int = 0
    # Forwarded requests not yet booked, and the keys of the blocks the exchange record holds.
    _open: set[OpenRequest] = field(default_factory=set, repr=False)
    _seen: set[bytes] = field(default_factory=set, repr=False)
    _closer: Callable[[], Any] | None = field(default=None, repr=False)

    @property
    def env(self) -> dict[str, str]:
        """The agent-side variables for a host without the socket bridge (loopback TCP)."""
        return {"ANTHROPIC_BASE_URL": self.base_url, "ANTHROPIC_API_KEY": self.token}

    @property
    def open_requests(self) -> int:
        """Forwarded requests not yet booked."""
        with self._lock:
            return len(self._open)

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())

    def close(self) -> RunMeter:
        """Close the run on its proxy (:meth:`MeteringProxy.close_run`): refuse what comes, book what is open."""
        if self._closer is not None:
            self._closer()
        return self

    def _write(self, row: dict) -> dict:
        # Called with the lock held: the file order is the metering order.
        self._seq += 1
        row = {"run_id": self.run_id, "seq": self._seq, "at": _now(), **row}
        with self.record_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        return row

    def _write_exchange(self, row: dict) -> None:
        # Called with the lock held, right after the exchange's usage row: both files are in the metering order.
        if self.exchanges_truncated:
            return
        line = (json.dumps(row, default=str) + "\n").encode("ascii")
        if self._exchange_bytes + len(line) > EXCHANGES_MAX_BYTES:
            line = (json.dumps({"seq": row["seq"], "kind": "exchanges_truncated"}) + "\n").encode("ascii")
            self.exchanges_truncated = True
            log.warning(
                "model proxy: the exchange record of run %s reached %s bytes; further exchanges are metered, "
                "not recorded",
                self.run_id,
                EXCHANGES_MAX_BYTES,
            )
        with self.exchanges_path.open("ab") as fh:
            fh.write(line)
        self._exchange_bytes += len(line)

    def seen(self, key: bytes) -> bool:
        """Whether the exchange record already holds a block (or a whole message) with this key."""
        return key in self._seen

    def _remember(self, keys: Iterable[bytes]) -> None:
        # Called with the lock held, as the exchange row that holds these blocks is written.
        for key in keys:
            if len(self._seen) >= SEEN_KEYS_MAX:
                return
            self._seen.add(key)

    def refuse(self, key: str, reason: str, **detail: Any) -> dict:
        """Count a refusal under its reason key; the first few of each key are also written whole and kept."""
        key = re.sub(r"[^a-z0-9_]+", "_", key.lower())[:40] or "other"
        with self._lock:
            n = self.refusal_counts[key] = self.refusal_counts.get(key, 0) + 1
            row = {"kind": "refused", "reason_key": key, "reason": reason, **detail}
            if n <= REFUSAL_ROWS_PER_REASON:
                row = self._write(row)
                self.refusals.append(row)
        if n <= REFUSAL_ROWS_PER_REASON:
            log.warning("model proxy refused a request of run %s (%s): %s", self.run_id, key, reason[:300])
        elif n == REFUSAL_ROWS_PER_REASON + 1:
            log.warning("model proxy: further refusals (%s) of run %s are counted, not logged", key, self.run_id)
        return row

    def count_dropped_headers(self, names: Iterable[str]) -> None:
        with self._lock:
            for name in names:
                if name in self.dropped_headers or len(self.dropped_headers) < REFUSAL_ROWS_PER_REASON * 4:
                    self.dropped_headers[name] = self.dropped_headers.get(name, 0) + 1
                else:
                    self.dropped_headers["(other)"] = self.dropped_headers.get("(other)", 0) + 1

    def reserve(self, worst_usd: Decimal, request: OpenRequest | None = None) -> str | None:
        """Reserve a request's worst case (and hold ``request`` open until it is booked); the refusal reason when it
        would cross the cap. A run already closed refuses (:class:`RequestRefused`, ``run_closed``): nothing is
        forwarded once its books are being closed."""
        with self._lock:
            if self.closed:
                raise RequestRefused(
                    "run_closed",
                    f"run {self.run_id} is closed",
                    403,
                    "permission_error",
                    close=True,
                    record="run closed: the request came while its books were being closed",
                )
            if self.capped:
                return f"the run is already capped ({self.capped_reason})"
            if self.metered_usd + self.reserved_usd + worst_usd > self.cap_usd:
                return (
                    f"metered {self.metered_usd} USD + in flight {self.reserved_usd} USD + this request's worst case "
                    f"{worst_usd} USD would exceed the run's cap of {self.cap_usd} USD"
                )
            self.reserved_usd += worst_usd
            if request is not None:
                self._open.add(request)
            return None

    def mark_capped(self, reason: str) -> None:
        with self._lock:
            if not self.capped:
                self.capped, self.capped_reason = True, reason

    def book(self, request: OpenRequest) -> dict | None:
        """Book a forwarded request at what its answer said (and write its exchange row); once only.

        A request the run's close already booked at its worst case is not booked
        again: what its answer said, arriving late, is written as a ``late_answer``
        row that changes no sum.
        """
        row = request.usage_row()
        with self._lock:
            if request.booked:
                self._write(
                    {
                        "kind": "late_answer",
                        "request_kind": row.get("kind"),
                        **{k: row.get(k) for k in ("model", "status", "message_id", "cost_usd", "note")},
                        **{k: row[k] for k in Usage().as_dict() if k in row},
                    }
                )
                return None
            return self._settle(request, row)

    def _settle(self, request: OpenRequest, row: dict) -> dict:
        # Called with the lock held.
        request.booked = True
        self._open.discard(request)
        self.reserved_usd -= request.worst
        self.metered_usd += Decimal(row["cost_usd"])
        if request.offered and Decimal(row["cost_usd"]) > request.worst and not self.capped:
            # The arm's declared per-use bound did not hold: nothing more is forwarded for the run.
            self.capped = True
            self.capped_reason = (
                f"an answer cost {row['cost_usd']} USD, more than its reserved worst case {request.worst} USD "
                "(the arm's per-use bound of its server tools did not hold)"
            )
        row = self._write({**row, "metered_usd": str(self.metered_usd)})
        self.requests.append(row)
        exchange = request.exchange_row(row["cost_usd"])
        if exchange is not None:
            self._write_exchange({"seq": row["seq"], "at": row["at"], **exchange})
            self._remember(request.blocks.keys if request.blocks is not None else ())
            self._remember(request.answer.keys())
        return row

    def close_books(self, wait_s: float) -> int:
        """Wait up to ``wait_s`` for the forwarded requests to be booked; book those still open at their worst case.

        Call once the run is closed (no request can be forwarded any more).
        Returns how many were booked at their worst case.
        """
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            with self._lock:
                if not self._open:
                    return 0
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        with self._lock:
            still = sorted(self._open, key=lambda r: r.started)
            for request in still:
                request.ended_by = "run_closed"
                said = request.note if not request.answered else request.usage_row().get("note")
                row = {
                    **request.usage_row(),
                    # Not answered yet: no status of the upstream's (the 502 an unreachable upstream gets is not it).
                    "status": request.status if request.answered else None,
                    "cost_usd": str(request.worst),
                    "booked_at": "worst_case",
                    "note": f"still open {wait_s:g} s after the run was closed: booked at its reserved worst case"
                    + (f"; {said}" if said else ""),
                }
                self._settle(request, row)
            self.booked_at_close += len(still)
        if still:
            log.warning(
                "model proxy: run %s closed with %d request(s) open: booked at their worst case",
                self.run_id,
                len(still),
            )
        return len(still)

    # -- admission --------------------------------------------------------------

    def enter_request(self, body_bytes: int) -> RequestRefused | None:
        """Take an in-flight slot for a request announcing ``body_bytes``; the refusal when none is free."""
        with self._slots:
            if self._in_flight >= MAX_IN_FLIGHT:
                return RequestRefused(
                    "too_many_in_flight",
                    f"more than {MAX_IN_FLIGHT} requests of this run at once are not served",
                    429,
                    "rate_limit_error",
                    close=True,
                )
            if self._in_flight_bytes + body_bytes > MAX_IN_FLIGHT_BODY_BYTES:
                return RequestRefused(
                    "in_flight_bytes",
                    f"content-length {body_bytes}: the run's requests in flight would hold more "
                    f"than {MAX_IN_FLIGHT_BODY_BYTES} bytes of body",
                    429,
                    "rate_limit_error",
                    close=True,
                )
            self._in_flight += 1
            self._in_flight_bytes += body_bytes
            return None

    def leave_request(self, body_bytes: int) -> None:
        with self._slots:
            self._in_flight -= 1
            self._in_flight_bytes -= body_bytes

    def connection_opened(self) -> bool:
        """Count a new connection; False (not counted) when the run already has ``MAX_OPEN_CONNECTIONS``."""
        with self._slots:
            if self._connections >= MAX_OPEN_CONNECTIONS:
                return False
            self._connections += 1
            return True

    def connection_closed(self) -> None:
        with self._slots:
            self._connections -= 1
