"""What a run's requests may carry: the checks the model proxy makes before it forwards anything.

Every decision is taken on the parsed body, against allow-lists: the request
fields (:data:`MESSAGE_KEYS`, :data:`COUNT_KEYS`), the headers
(:class:`HeaderPolicy`, from ``study.yml``'s ``model_proxy``), and the
content blocks, sources and server tools of the run's arm
(:class:`~pilot.protocol.request_policy.RequestPolicy`, from
``protocol/arms/arms.yml``: its common ``request_policy`` and the arm's own
``proxy``). A request outside them is a
:class:`~pilot.agents.model_proxy.wire.RequestRefused` naming the field and
the reason. What passes is described to the meter as :class:`RequestFacts`:
the blocks whose input the body does not bound, the allowances on top of it,
and the server-tool uses the request may make.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pilot.agents.model_proxy.wire import RequestRefused, short_repr
from pilot.protocol.design import PROXY_OWN_HEADERS
from pilot.protocol.prices import PriceTable
from pilot.protocol.request_policy import ALLOWANCE, CONTEXT, RequestPolicy, ServerTool

#: The fields a messages request may carry: those the pinned CLI sends and plain sampling controls.
#: Refused, by not being here: ``mcp_servers`` and ``container`` (the API reaching out on the agent's
#: behalf), ``service_tier`` and ``speed`` (billed at other rates than the table's).
MESSAGE_KEYS = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "context_management",
        "output_config",
        "output_format",
    }
)
#: Keys of a messages body that count_tokens accepts: the fields a count_tokens request may carry, and those
#: the proxy sends when it counts a request itself.
COUNT_KEYS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "context_management",
        "output_config",
        "output_format",
    }
)


@dataclass(frozen=True)
class HeaderPolicy:
    """Which request headers pass upstream: ``study.yml`` ``model_proxy`` (validated on load).

    A header not in ``forwarded`` is dropped (and counted per run); an
    ``anthropic-version`` outside ``api_versions`` or an ``anthropic-beta``
    naming a beta outside ``betas`` refuses the request before its body is read.
    """

    forwarded: frozenset[str]
    api_versions: frozenset[str]
    betas: frozenset[str]

    @classmethod
    def from_study(cls, study: Any = None) -> HeaderPolicy:
        if study is None:
            from pilot import protocol

            study = protocol.study()
        raw = study["model_proxy"]
        return cls(
            forwarded=frozenset(h.lower() for h in raw["forwarded_headers"]) - PROXY_OWN_HEADERS,
            api_versions=frozenset(raw["api_versions"]),
            betas=frozenset(raw["betas"]),
        )

    def refusal(self, headers: Any) -> RequestRefused | None:
        """The refusal of a request whose version or betas are not the study's, or None."""
        versions = headers.get_all("anthropic-version") or []
        for version in versions:
            if version.strip() not in self.api_versions:
                return RequestRefused(
                    "version_not_allowed",
                    f"anthropic-version {short_repr(version.strip(), 80)} is not available in this study "
                    f"(allowed: {', '.join(sorted(self.api_versions))})",
                    close=True,
                )
        asked = [b.strip() for value in headers.get_all("anthropic-beta") or [] for b in value.split(",")]
        refused = sorted({b for b in asked if b and b not in self.betas})
        if refused:
            return RequestRefused(
                "beta_not_allowed",
                f"anthropic-beta {[short_repr(b, 80) for b in refused[:10]]} is not available in this study",
                close=True,
                betas=[b[:80] for b in refused[:10]],
            )
        return None

    def forward(self, headers: Any) -> tuple[dict[str, str], list[str]]:
        """The headers to send upstream (one value each, the betas joined) and the names dropped."""
        out: dict[str, str] = {}
        dropped: list[str] = []
        for name, value in headers.items():
            key = name.lower()
            if key in PROXY_OWN_HEADERS:
                continue
            if key not in self.forwarded:
                dropped.append(key[:80])
            elif key == "anthropic-beta" and key in out:
                out[key] += "," + value
            else:
                out[key] = value
        return out, dropped


@dataclass(frozen=True)
class ServerToolOffer:
    """A server tool a checked request offers the model, and the uses its definition allows (``max_uses``)."""

    tool: ServerTool
    uses: int


@dataclass(frozen=True)
class RequestFacts:
    """What the meter needs of a checked request."""

    model: str
    #: None for count_tokens, which has no output.
    max_tokens: int | None
    images: int
    documents: int
    #: Whether any cache_control may ask for the one-hour lifetime (then its dearer write rate is reserved).
    one_hour_cache: bool
    #: Tokens the arm's policy allows on top of the body's bytes (``{allowance: N}`` blocks: images).
    allowance_tokens: int = 0
    #: The first block kind (by name) whose input nothing in the body bounds (``context``), or None.
    context_block: str | None = None
    #: The server tools the request offers, with the uses each may make.
    server_tools: tuple[ServerToolOffer, ...] = ()

    @property
    def server_tool_uses(self) -> int:
        """The most server-tool uses the request may make (each one more sampling pass of the same request)."""
        return sum(offer.uses for offer in self.server_tools)


def default_policy() -> RequestPolicy:
    """The common request policy of the repository's arms.yml (what a run opened without an arm's policy is held to)."""
    from pilot.protocol.design import common_request_policy

    return common_request_policy()


def cache_control_may_be_one_hour(cache_control: Any) -> bool:
    """False only for the spellings that surely mean the 5-minute lifetime; anything unclear is read as one hour."""
    five_minutes = (
        isinstance(cache_control, dict)
        and cache_control.get("type") == "ephemeral"
        and set(cache_control) <= {"type", "ttl"}
        and cache_control.get("ttl", "5m") == "5m"
    )
    return not five_minutes


def asks_one_hour_cache(body: Any) -> bool:
    """Whether any ``cache_control`` object anywhere in the parsed body may ask for the one-hour lifetime.

    Read on the parsed value, so no spelling of the key (``"t\\u0074l"``) gets past; walked everywhere
    (system, messages, nested tool results, tools, even tool inputs), since a cache breakpoint the API
    honours in a place not walked would be billed at a rate not reserved.
    """
    todo = [body]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if "cache_control" in item and cache_control_may_be_one_hour(item["cache_control"]):
                return True
            todo.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            todo.extend(v for v in item if isinstance(v, (dict, list)))
    return False


def check_content(
    content: Any, where: str, policy: RequestPolicy, *, allowed: frozenset[str] | None = None
) -> Counter[str]:
    """Check a content value (a string or a list of blocks) against the arm's block allow-list; its blocks by kind.

    Nested content (a tool result's, a document's ``content`` source) is checked
    with the same rules; ``allowed`` narrows the kinds (a system prompt's).
    Raises :class:`RequestRefused` naming the first block that is not allowed.
    """
    allowed = policy.block_kinds if allowed is None else allowed
    kinds: Counter[str] = Counter()
    todo: list[tuple[Any, str]] = [(content, where)]
    while todo:
        item, at = todo.pop()
        if isinstance(item, str):
            continue
        if not isinstance(item, list):
            raise RequestRefused("invalid_request", f"{at}: must be a string or a list of content blocks")
        for i, block in enumerate(item):
            here = f"{at}.{i}"
            if not isinstance(block, dict):
                raise RequestRefused("invalid_request", f"{here}: a content block must be an object")
            kind = block.get("type")
            if not isinstance(kind, str) or kind not in allowed:
                raise RequestRefused(
                    "block_not_allowed",
                    f"{here}.type: content blocks of type {short_repr(kind)} are not "
                    f"available in this study (allowed: {', '.join(sorted(allowed))})",
                )
            kinds[kind] += 1
            if kind in policy.sources:
                sources = policy.sources[kind]
                source = block.get("source")
                stype = source.get("type") if isinstance(source, dict) else None
                if stype == "url" and stype not in sources:
                    raise RequestRefused(
                        "url_source",
                        f"{here}.source: {kind} sources of type 'url' are not available in this "
                        "study (the API would fetch the URL: network access the run does not have)",
                    )
                if stype == "file" and stype not in sources:
                    raise RequestRefused(
                        "file_source",
                        f"{here}.source: {kind} sources of type 'file' (Files API uploads) "
                        "are not available in this study; send the data inline (base64)",
                    )
                if not isinstance(stype, str) or stype not in sources:
                    raise RequestRefused(
                        "source_not_allowed",
                        f"{here}.source.type: {short_repr(stype)} is not available for "
                        f"{kind} blocks (allowed: {', '.join(sorted(sources))})",
                    )
                if stype == "content" and isinstance(source, dict):
                    todo.append((source.get("content"), f"{here}.source.content"))
            elif kind == "tool_result" and block.get("content") is not None:
                todo.append((block["content"], f"{here}.content"))
    return kinds


def check_tools(tools: Any, policy: RequestPolicy) -> tuple[ServerToolOffer, ...]:
    """Check a request's tool definitions: every server tool must be one the arm allows, with ``max_uses`` set within
    its bound. Custom tools (the CLI's own, run in the sandbox) pass. Raises :class:`RequestRefused`."""
    if tools is None:
        return ()
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RequestRefused("invalid_request", "tools: must be a list of tool objects")
    server = [(i, t) for i, t in enumerate(tools) if t.get("type") not in (None, "custom")]
    refused = [
        t.get("type") for _, t in server if not isinstance(t.get("type"), str) or t["type"] not in policy.server_tools
    ]
    if refused:
        # Server tools run on the API's side (web search and fetch, code execution): a way out of the sandbox, and
        # billed per use beside the token prices; an arm offers only those its policy names, each bounded.
        allowed = f" (this arm's: {', '.join(sorted(policy.server_tools))})" if policy.server_tools else ""
        raise RequestRefused(
            "server_tool",
            f"server tools {[t[:80] if isinstance(t, str) else short_repr(t, 80) for t in refused[:10]]} "
            f"are not available in this study{allowed}",
        )
    offers = []
    for i, definition in server:
        tool = policy.server_tools[definition["type"]]
        if definition.get("name") != tool.name:
            raise RequestRefused(
                "server_tool",
                f"tools.{i}.name: a {tool.type} tool is named {tool.name!r}, "
                f"not {short_repr(definition.get('name'), 80)}",
            )
        uses = definition.get("max_uses")
        if not isinstance(uses, int) or isinstance(uses, bool) or not 1 <= uses <= tool.max_uses:
            raise RequestRefused(
                "server_tool",
                f"tools.{i}.max_uses: a {tool.type} tool must set max_uses, from 1 to {tool.max_uses} on this arm "
                f"(got {short_repr(uses, 80)}): its uses are reserved against the run's cap",
            )
        offers.append(ServerToolOffer(tool, uses))
    return tuple(offers)


def check_request(
    body: Any,
    *,
    count_tokens: bool,
    models: frozenset[str],
    prices: PriceTable,
    policy: RequestPolicy | None = None,
) -> RequestFacts:
    """Check a parsed messages (or count_tokens) body against the allow-lists; what the meter needs of it.

    ``policy`` is the run's arm's (default: the common policy of arms.yml).
    Raises :class:`RequestRefused` with a message naming the field and the reason.
    """
    policy = policy if policy is not None else default_policy()
    if not isinstance(body, dict):
        raise RequestRefused("invalid_json", "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or model not in prices.models:
        raise RequestRefused(
            "model_not_priced", f"model {short_repr(model)} has no pinned price in the study's price table"
        )
    if model not in models:
        raise RequestRefused(
            "model_not_allowed",
            f"model {model!r} is not available to this run",
            record=f"model {model!r} is not this run's ({sorted(models)})",
        )
    max_tokens = None
    if not count_tokens:
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise RequestRefused("max_tokens", "max_tokens: must be a positive integer")
    unknown = sorted(set(body) - (COUNT_KEYS if count_tokens else MESSAGE_KEYS))
    if unknown:
        where = " on count_tokens" if count_tokens else ""
        raise RequestRefused(
            "field_not_allowed",
            f"request fields {[k[:80] for k in unknown[:10]]} are not available{where} in this study",
        )
    offers = check_tools(body.get("tools"), policy)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise RequestRefused("invalid_request", "messages: must be a list of messages")
    kinds: Counter[str] = Counter()
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestRefused("invalid_request", f"messages.{i}: must be an object")
        if "content" in message:
            kinds += check_content(message["content"], f"messages.{i}.content", policy)
    if body.get("system") is not None:
        kinds += check_content(body["system"], "system", policy, allowed=policy.system_blocks)
    bounds = {kind: policy.blocks[kind] for kind in kinds}
    return RequestFacts(
        model=model,
        max_tokens=max_tokens,
        images=kinds["image"],
        documents=kinds["document"],
        one_hour_cache=asks_one_hour_cache(body),
        allowance_tokens=sum(b.tokens * kinds[k] for k, b in bounds.items() if b.kind == ALLOWANCE),
        context_block=min((k for k, b in bounds.items() if b.kind == CONTEXT), default=None),
        server_tools=offers,
    )
