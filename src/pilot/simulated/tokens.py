"""The simulated agent's token record (SIMULATED): a stand-in of the model proxy's usage record.

A simulated session calls no model, so no proxy meters it. So that a dry run
shows tokens where a real run does (the viewer, the Inspect export), each
simulated session appends one row per request it stands for (one per turn)
to the file the proxy writes, ``record/proxy/<run folder>/proxy_usage.jsonl``,
in the proxy's row schema (kind ``messages``, the API's usage field names,
the cost priced exactly at ``protocol/prices.yml``), every row marked
``"simulated": true`` and noted as drawn, not metered.

The counts come from the token model of ``analysis/config/simulated_agent.yml``
(``tokens``; its header states it): the session's drawn cost is the truth and
the model only says how it splits over the requests and the kinds of token.
:func:`draw_shape` draws the shape, :func:`fit_to_cost` scales it to the cost
at the run's model and rounds it to whole tokens (the rule is in its
docstring: the priced tokens reproduce the drawn cost to within half a
cache-read token's price). The draws come from a random stream of their own
(:func:`token_rng`), so every other draw of the simulated agent is what it was
without this record.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import accumulate
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from pilot.protocol.prices import MILLION, ModelPrice, Usage

Number = TypeVar("Number", int, float)

#: Marks every row of the stand-in record, and says what it is wherever the row is shown.
NOTE = "SIMULATED: drawn by the simulated agent's token model (analysis/config/simulated_agent.yml), not metered"
#: The path a real messages request takes through the proxy.
MESSAGES_PATH = "/v1/messages"
#: Mixed into the token stream's seed so that it is a stream of its own (crc32 of b"simulated tokens").
STREAM_TAG = zlib.crc32(b"simulated tokens")

_pos = {"type": "number", "exclusiveMinimum": 0}
_LOGNORMAL = {
    "type": "object",
    "additionalProperties": False,
    "required": ["median", "sigma"],
    "properties": {"median": _pos, "sigma": {"type": "number", "minimum": 0}},
}
#: The ``tokens`` section of the simulated agent's model file.
TOKEN_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["prefix", "uncached_input", "output", "context_growth", "model_time_share"],
    "properties": {
        "prefix": {"type": "integer", "minimum": 1},
        "uncached_input": _LOGNORMAL,
        "output": _LOGNORMAL,
        "context_growth": _LOGNORMAL,
        "model_time_share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    },
}
#: The usage fields a request's counts are written under, with the price each is billed at.
_FIELDS = (
    ("cache_read_input_tokens", "cache_read"),
    ("input_tokens", "input"),
    ("cache_creation_input_tokens", "cache_write"),
    ("output_tokens", "output"),
)


def token_rng(seed: int, scenario_id: str, arm_id: str, session: int) -> np.random.Generator:
    """The token stream of one session: seeded by the run's seed, scenario, arm and session, and its own tag."""
    key = [
        int(seed) & 0xFFFFFFFF,
        zlib.crc32(scenario_id.encode()),
        zlib.crc32(arm_id.encode()),
        int(session),
        STREAM_TAG,
    ]
    return np.random.default_rng(np.random.SeedSequence(key))


def reads_of(writes: Sequence[Number]) -> list[Number]:
    """Each request's cache reads: everything the requests before it wrote to the cache."""
    return list(accumulate(writes[:-1], initial=writes[0] * 0)) if writes else []


@dataclass(frozen=True)
class Shape:
    """A session's drawn token shape before scaling, per request: uncached input, output and cache writes (floats).

    Each request reads from the cache what the requests before it wrote (:attr:`cache_read`).
    """

    input: list[float]
    output: list[float]
    cache_write: list[float]

    def __len__(self) -> int:
        return len(self.output)

    @property
    def cache_read(self) -> list[float]:
        return reads_of(self.cache_write)

    def price(self, price: ModelPrice) -> float:
        """What the shape would cost at ``price`` (USD, 5-minute cache writes)."""
        per_token = (
            sum(self.input) * float(price.input)
            + sum(self.output) * float(price.output)
            + sum(self.cache_write) * float(price.cache_write)
            + sum(self.cache_read) * float(price.cache_read)
        )
        return per_token / 1_000_000


def draw_shape(model: dict[str, Any], requests: int, rng: np.random.Generator) -> Shape:
    """The token model's shape of a session of ``requests`` requests (``model``: the file's ``tokens`` section).

    Drawn in this order: every request's output, then its uncached input, then
    the context each later request adds. The first request writes the prefix
    to the cache; request t >= 1 writes the previous answer and the new
    context; each request reads from the cache everything written before it.
    """
    n = max(int(requests), 1)

    def lognormal(key: str, size: int) -> list[float]:
        spec = model[key]
        return [float(x) for x in rng.lognormal(math.log(spec["median"]), spec["sigma"], size=size)]

    output = lognormal("output", n)
    uncached = lognormal("uncached_input", n)
    growth = lognormal("context_growth", n - 1)
    writes = [float(model["prefix"])] + [output[t - 1] + growth[t - 1] for t in range(1, n)]
    return Shape(uncached, output, writes)


def _price_of(price: ModelPrice, kind: str) -> Decimal:
    return {
        "input": price.input,
        "output": price.output,
        "cache_write": price.cache_write,
        "cache_read": price.cache_read,
    }[kind]


def fit_to_cost(shape: Shape, cost_usd: Decimal, price: ModelPrice) -> list[Usage]:
    """Whole-token usages, one per request, whose exact price at ``price`` is the session's cost ``cost_usd``.

    The rule: the shape's uncached input, output and cache writes are
    multiplied by k = cost / (the shape's price) and rounded to the nearest
    whole token (ties to even); each request's cache reads are the rounded
    cache writes of the requests before it. The remaining difference between
    the cost and the exact price of these counts is then taken by the last
    request, in its cheapest kind of token first (cache reads, at every price
    in the table): that count moves by the difference divided by its price,
    rounded to the nearest token, never below zero; should zero stop it, the
    next cheapest kind takes the rest. So the priced tokens differ from the
    cost by at most half the price of one token of the kind that took the
    difference last: half a cache-read token's price whenever the last
    request has cache reads (every session of two or more requests), e.g.
    0.0000001 USD at 0.20 USD per million. Cache writes are 5-minute ones (no
    1-hour writes).
    """
    if cost_usd < 0:
        raise ValueError(f"a session's cost must be >= 0, got {cost_usd}")
    raw = shape.price(price)
    k = float(cost_usd) / raw if raw > 0 else 0.0
    writes = [round(w * k) for w in shape.cache_write]
    reads = reads_of(writes)
    counts = [
        {
            "input_tokens": round(shape.input[t] * k),
            "output_tokens": round(shape.output[t] * k),
            "cache_creation_input_tokens": writes[t],
            "cache_read_input_tokens": reads[t],
        }
        for t in range(len(shape))
    ]
    residual = cost_usd - sum((price.cost(Usage(**c)) for c in counts), Decimal(0))
    last = counts[-1]
    for field, kind in sorted(_FIELDS, key=lambda fk: _price_of(price, fk[1])):
        p = _price_of(price, kind)
        if p <= 0:
            continue
        step = int((residual * MILLION / p).to_integral_value(ROUND_HALF_EVEN))
        moved = max(0, last[field] + step) - last[field]
        last[field] += moved
        residual -= moved * p / MILLION
    return [Usage(**c) for c in counts]


def request_times(
    shape: Shape, start: datetime, wall_s: float, model_time_share: float
) -> list[tuple[datetime, float]]:
    """(when each request's answer ended, how long it took in seconds) on the session's simulated clock.

    The session's drawn wall time is split into one slot per request, in
    proportion to the request's drawn output; the answer takes
    ``model_time_share`` of its slot, from the slot's start (the rest is the
    tools' time before the next request).
    """
    total = sum(shape.output) or 1.0
    out, at = [], start
    for o in shape.output:
        slot = wall_s * o / total
        took = model_time_share * slot
        out.append((at + timedelta(seconds=took), took))
        at += timedelta(seconds=slot)
    return out


class UsageRecord:
    """The stand-in record of one run: appends each simulated session's rows, numbered and summed as the proxy does."""

    def __init__(self, path: Path, run_id: str, model: str, price: ModelPrice, token_model: dict[str, Any]) -> None:
        self.path, self.run_id, self.model, self.price = Path(path), run_id, model, price
        self.token_model = token_model
        self.seq = 0
        self.requests = 0
        self.metered = Decimal(0)

    def append_session(
        self,
        *,
        session: int,
        cost_usd: Decimal,
        wall_s: float,
        message_ids: list[str],
        start: datetime,
        rng: np.random.Generator,
    ) -> list[dict[str, Any]]:
        """Draw, fit and write the rows of one session (one per message id); the rows written."""
        shape = draw_shape(self.token_model, len(message_ids), rng)
        usages = fit_to_cost(shape, cost_usd, self.price)
        times = request_times(shape, start, wall_s, float(self.token_model["model_time_share"]))
        rows = []
        for mid, use, (at, took) in zip(message_ids, usages, times, strict=True):
            cost = self.price.cost(use)
            self.seq += 1
            self.metered += cost
            rows.append(
                {
                    "run_id": self.run_id,
                    "seq": self.seq,
                    "at": at.isoformat(timespec="milliseconds"),
                    "kind": "messages",
                    "path": MESSAGES_PATH,
                    "model": self.model,
                    "stream": True,
                    "status": 200,
                    "message_id": mid,
                    "duration_ms": round(took * 1000, 3),
                    **use.as_dict(),
                    "cost_usd": str(cost),
                    "usage_complete": True,
                    "service_tier": "standard",
                    "note": NOTE,
                    "metered_usd": str(self.metered),
                    "session": session,
                    "simulated": True,
                }
            )
        self.requests += len(rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in rows))
        return rows
