"""The pinned price table (``protocol/prices.yml``), token usage and the cost tolerance.

Every dollar the study charges comes from here: the metering proxy prices
each answer's usage with :class:`PriceTable`, the CLI judges price their
sessions with it, and :func:`cost_disagreement` says when the client's own
cost differs from the metered one by more than the preregistered tolerance.
Amounts are :class:`decimal.Decimal` throughout.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from pilot import judge_providers, paths
from pilot.protocol.design import ProtocolError, read_yaml

PRICES_FILE = paths.PROTOCOL_DIR / "prices.yml"
MILLION = Decimal(1_000_000)
#: Per-million prices of one model; all required, all non-negative decimals.
PRICE_FIELDS = ("input", "output", "cache_write", "cache_write_1h", "cache_read")


@dataclass(frozen=True)
class Usage:
    """Token counts of one answer as the API reports them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    #: The part of ``cache_creation_input_tokens`` written with a one-hour lifetime.
    cache_creation_1h_input_tokens: int = 0

    @classmethod
    def from_api(cls, usage: dict[str, Any] | None) -> Usage:
        """From a ``usage`` object of a message or a ``message_delta`` event (missing counts are 0)."""
        u = usage or {}

        def count(key: str, src: dict[str, Any] = u) -> int:
            v = src.get(key)
            return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

        creation = u.get("cache_creation")
        split: dict[str, Any] = creation if isinstance(creation, dict) else {}
        return cls(
            input_tokens=count("input_tokens"),
            output_tokens=count("output_tokens"),
            cache_creation_input_tokens=count("cache_creation_input_tokens"),
            cache_read_input_tokens=count("cache_read_input_tokens"),
            cache_creation_1h_input_tokens=count("ephemeral_1h_input_tokens", split),
        )

    def updated(self, delta: dict[str, Any] | None) -> Usage:
        """This usage with the counts a ``message_delta`` event carries (cumulative, so they replace)."""
        d = delta or {}
        new = Usage.from_api(d)
        fields = {name: getattr(new, name) if name in d else getattr(self, name) for name in self.as_dict()}
        if isinstance(d.get("cache_creation"), dict):
            fields["cache_creation_1h_input_tokens"] = new.cache_creation_1h_input_tokens
        return Usage(**fields)

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_1h_input_tokens": self.cache_creation_1h_input_tokens,
        }


@dataclass(frozen=True)
class ModelPrice:
    """One model's pinned prices, USD per million tokens."""

    model: str
    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal
    #: The largest input the API accepts for this model: no request bills more input than this.
    max_input_tokens: int

    def dearest_input(self, one_hour_cache: bool = True) -> Decimal:
        """The highest rate an input token can be billed at (plain, cache write or cache read).

        The one-hour cache-write rate only applies to a request that may ask for
        that lifetime (:func:`asks_one_hour_cache`).
        """
        rates = [self.input, self.cache_write, self.cache_read] + ([self.cache_write_1h] if one_hour_cache else [])
        return max(rates)

    def cost(self, usage: Usage) -> Decimal:
        """The exact price of one answer's usage."""
        one_hour = min(usage.cache_creation_1h_input_tokens, usage.cache_creation_input_tokens)
        five_min = usage.cache_creation_input_tokens - one_hour
        total = (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + five_min * self.cache_write
            + one_hour * self.cache_write_1h
            + usage.cache_read_input_tokens * self.cache_read
        )
        return total / MILLION

    def worst_case(self, input_bound_tokens: int, max_tokens: int, one_hour_cache: bool = True) -> Decimal:
        """The most a request can cost: its input bound at the dearest input rate plus max_tokens of output."""
        return (input_bound_tokens * self.dearest_input(one_hour_cache) + max_tokens * self.output) / MILLION


def _decimal(path: Path, where: str, value: Any, unit: str = "USD per million tokens") -> Decimal:
    # The table is read with every scalar as text, so a price never passes through a float.
    if not isinstance(value, str) or not value.strip():
        raise ProtocolError(path, where, f"must be a number ({unit})")
    try:
        d = Decimal(value.strip())
    except InvalidOperation:
        raise ProtocolError(path, where, f"not a decimal number: {value!r}") from None
    if not d.is_finite() or d < 0:
        raise ProtocolError(path, where, f"must be a finite number >= 0, got {value!r}")
    return d


def _positive_int(path: Path, where: str, value: Any) -> int:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9][0-9_]*", value.strip()):
        raise ProtocolError(path, where, f"must be a positive integer, got {value!r}")
    n = int(value.strip().replace("_", ""))
    if n <= 0:
        raise ProtocolError(path, where, f"must be a positive integer, got {value!r}")
    return n


def study_models(study: Any) -> list[str]:
    """Every model study.yml names: the worker, the judges and the sensitivity models."""
    raw = study.raw if hasattr(study, "raw") else study
    models = [raw["worker"]["model"]]
    # A judge is named provider/model; the price is the model's.
    models += [judge_providers.split(j["model"])[1] for j in raw.get("judges", {}).get("panel", [])]
    models += list(raw.get("sensitivity_models", {}).get("models", []))
    return list(dict.fromkeys(models))


#: A server tool's usage counter (``usage.server_tool_use``): what its uses are billed under.
SERVER_TOOL_COUNTER = re.compile(r"^[a-z][a-z0-9_]{0,63}_requests$")


@dataclass(frozen=True)
class PriceTable:
    """The pinned per-model prices of ``protocol/prices.yml``, and the fee of each server tool's use."""

    path: Path
    models: dict[str, ModelPrice]
    #: USD per use of a server tool, by the usage counter it is billed under (``server_tools``; none by default).
    server_tools: dict[str, Decimal] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | str | None = None, *, required_models: Iterable[str] | None = None) -> PriceTable:
        """Read and validate the table; every error names the file, the field and the reason.

        ``required_models`` defaults to every model ``protocol/study.yml`` names
        (when the table is the protocol's own); each must have a price.
        """
        path = Path(path) if path is not None else PRICES_FILE
        raw = read_yaml(path, text_scalars=True)
        if not isinstance(raw, dict):
            raise ProtocolError(path, "<root>", "must be a mapping with 'unit' and 'models'")
        unknown = set(raw) - {"unit", "models", "server_tools"}
        if unknown:
            raise ProtocolError(
                path, sorted(unknown)[0], "unknown field (expected 'unit', 'models' and optionally 'server_tools')"
            )
        if raw.get("unit") != "usd_per_million_tokens":
            raise ProtocolError(path, "unit", f"must be 'usd_per_million_tokens', got {raw.get('unit')!r}")
        entries = raw.get("models")
        if not isinstance(entries, dict) or not entries:
            raise ProtocolError(path, "models", "must be a non-empty mapping of model id to prices")
        models: dict[str, ModelPrice] = {}
        for model, entry in entries.items():
            where = f"models.{model}"
            if not isinstance(entry, dict):
                raise ProtocolError(path, where, "must be a mapping of price fields")
            expected = set(PRICE_FIELDS) | {"max_input_tokens"}
            extra = set(entry) - expected
            if extra:
                raise ProtocolError(path, f"{where}.{sorted(extra)[0]}", f"unknown field (expected {sorted(expected)})")
            for name in sorted(expected):
                if name not in entry:
                    raise ProtocolError(path, f"{where}.{name}", "missing")
            prices = {name: _decimal(path, f"{where}.{name}", entry[name]) for name in PRICE_FIELDS}
            models[model] = ModelPrice(
                model=model,
                max_input_tokens=_positive_int(path, f"{where}.max_input_tokens", entry["max_input_tokens"]),
                **prices,
            )
        fees = raw.get("server_tools") or {}
        if not isinstance(fees, dict):
            raise ProtocolError(path, "server_tools", "must be a mapping of usage counter to USD per use")
        for counter in fees:
            if not isinstance(counter, str) or not SERVER_TOOL_COUNTER.match(counter):
                raise ProtocolError(
                    path, f"server_tools.{counter}", "must be a usage counter such as web_search_requests"
                )
        server_tools = {
            counter: _decimal(path, f"server_tools.{counter}", fee, "USD per use") for counter, fee in fees.items()
        }
        if required_models is None and path.resolve() == PRICES_FILE.resolve():
            from pilot import protocol

            required_models = study_models(protocol.study())
        for model in required_models or ():
            if model not in models:
                raise ProtocolError(
                    path, f"models.{model}", "missing: the study uses this model, so it needs a pinned price"
                )
        return cls(path=path, models=models, server_tools=server_tools)

    def price(self, model: str) -> ModelPrice:
        try:
            return self.models[model]
        except KeyError:
            raise KeyError(f"{self.path}: no pinned price for model {model!r}") from None


# --------------------------------------------------------------------------
# CLI-reported versus metered cost
# --------------------------------------------------------------------------

#: A client-reported cost may differ from the metered one by this much before the run gets a note.
TOLERANCE_ABS_USD = Decimal("0.01")
TOLERANCE_REL = Decimal("0.02")


def _as_decimal(x: Decimal | float | int | str) -> Decimal:
    # A float from the CLI's JSON is taken at its shortest decimal spelling, not its binary expansion.
    return x if isinstance(x, Decimal) else Decimal(str(x))


def finite_decimal(value: Any) -> Decimal | None:
    """A reported amount as a finite Decimal (at its shortest decimal spelling), or None when it is none (a bool, NaN,
    text)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def cost_tolerance(metered_usd: Decimal) -> Decimal:
    """The stated tolerance: the larger of one cent and 2 % of the metered cost."""
    return max(TOLERANCE_ABS_USD, TOLERANCE_REL * abs(metered_usd))


def cost_disagreement(cli_usd: Decimal | float | str | None, metered_usd: Decimal | float | str) -> str | None:
    """The run note when the client's reported cost and the proxy's metered cost disagree beyond tolerance."""
    metered = _as_decimal(metered_usd)
    if cli_usd is None:
        return f"the client reported no cost; the proxy metered {metered} USD"
    cli = _as_decimal(cli_usd)
    gap = cli - metered
    tol = cost_tolerance(metered)
    if abs(gap) <= tol:
        return None
    return (
        f"client-reported cost {cli} USD differs from the metered {metered} USD by {gap:+} USD, "
        f"beyond the tolerance of {tol} USD (max of 0.01 USD and 2 % of metered)"
    )
