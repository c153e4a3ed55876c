"""What the model proxy lets an arm's requests carry, as ``protocol/arms/arms.yml`` declares it.

``request_policy`` at the top of arms.yml holds for every arm: the content
blocks a request may carry, how the input tokens of each are bounded before
the proxy reserves the request's worst case, the block kinds of a system
prompt, and the sources an image or a document may have. An arm's own
``proxy`` adds to it (block kinds and server tools), never takes away; so an
arm without one is held to the common policy. The proxy
(:mod:`pilot.agents.model_proxy.policy`) checks each request against the
:class:`RequestPolicy` of its run's arm; nothing of it is a constant there.

A bound is one of ``body`` (the block's bytes in the request body bound its
tokens: a token covers at least one byte of the text it encodes),
``{allowance: N}`` (its bytes plus ``N`` tokens: an image, whose scaled pixels
cost tokens its bytes do not show) or ``context`` (nothing in the body bounds
it: a request holding one reserves the model's whole input, or what the
upstream's count_tokens says).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BODY, ALLOWANCE, CONTEXT = "body", "allowance", "context"
BLOCK_KIND = r"^[a-z][a-z0-9_]{0,63}$"
#: The API's versioned server-tool types (``web_search_20250305``): a name and a date.
SERVER_TOOL_TYPE = r"^[a-z][a-z0-9_]{0,63}_[0-9]{8}$"
#: The usage counter a server tool is billed under (``usage.server_tool_use.web_search_requests``).
USAGE_COUNTER = r"^[a-z][a-z0-9_]{0,63}_requests$"


class PolicyError(ValueError):
    """A policy that does not hold together: the field (below ``request_policy`` or an arm's ``proxy``) and why."""

    def __init__(self, field: str, reason: str) -> None:
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True)
class TokenBound:
    """How the proxy bounds the input tokens one block (or one server-tool use) adds to a request."""

    kind: str
    tokens: int = 0

    @classmethod
    def parse(cls, value: Any) -> TokenBound:
        """From its validated spelling: ``body``, ``context`` or ``{allowance: N}``."""
        if isinstance(value, dict):
            return cls(ALLOWANCE, int(value[ALLOWANCE]))
        return cls(str(value))

    def as_data(self) -> Any:
        return {ALLOWANCE: self.tokens} if self.kind == ALLOWANCE else self.kind


@dataclass(frozen=True)
class ServerTool:
    """A server tool (run on the API's side) an arm may offer the model, and what one use of it may cost."""

    #: The tool definition's ``type`` (``web_search_20250305``).
    type: str
    #: The definition's ``name`` the API gives that type (``web_search``).
    name: str
    #: The usage counter its uses are billed under (``web_search_requests``); its price is in ``prices.yml``.
    usage: str
    #: The most uses one request may ask for: a definition must set ``max_uses``, at most this.
    max_uses: int
    #: The input tokens one use may add to each later sampling pass of the same request (its results).
    per_use: TokenBound


@dataclass(frozen=True)
class RequestPolicy:
    """The blocks, sources and server tools one arm's requests may carry, and how each block's input is bounded."""

    blocks: Mapping[str, TokenBound]
    system_blocks: frozenset[str]
    sources: Mapping[str, frozenset[str]]
    server_tools: Mapping[str, ServerTool] = field(default_factory=dict)
    #: The arm this policy is (None: the common policy every arm starts from).
    arm: str | None = None

    @classmethod
    def common(cls, spec: Mapping[str, Any]) -> RequestPolicy:
        """The common policy from ``request_policy`` (validated by :mod:`pilot.protocol.design`)."""
        blocks = {kind: TokenBound.parse(bound) for kind, bound in spec["blocks"].items()}
        for kind in spec["system_blocks"]:
            if kind not in blocks:
                raise PolicyError("system_blocks", f"{kind!r} is not among request_policy.blocks")
        for kind in spec["sources"]:
            if kind not in blocks:
                raise PolicyError(f"sources.{kind}", f"{kind!r} is not among request_policy.blocks")
        return cls(
            blocks=blocks,
            system_blocks=frozenset(spec["system_blocks"]),
            sources={kind: frozenset(types) for kind, types in spec["sources"].items()},
        )

    def widened(self, arm: str, spec: Mapping[str, Any] | None) -> RequestPolicy:
        """This policy with an arm's own ``proxy`` additions (validated by :mod:`pilot.protocol.design`)."""
        spec = spec or {}
        added = {kind: TokenBound.parse(bound) for kind, bound in (spec.get("blocks") or {}).items()}
        for kind in added:
            if kind in self.blocks:
                raise PolicyError(
                    f"blocks.{kind}",
                    "is already in request_policy.blocks (an arm adds block kinds, never redefines one)",
                )
        tools = {
            kind: ServerTool(
                type=kind,
                name=str(tool["name"]),
                usage=str(tool["usage"]),
                max_uses=int(tool["max_uses"]),
                per_use=TokenBound.parse(tool["per_use"]),
            )
            for kind, tool in (spec.get("server_tools") or {}).items()
        }
        return RequestPolicy(
            blocks={**self.blocks, **added},
            system_blocks=self.system_blocks,
            sources=self.sources,
            server_tools={**self.server_tools, **tools},
            arm=arm,
        )

    @property
    def block_kinds(self) -> frozenset[str]:
        return frozenset(self.blocks)

    def usage_counters(self) -> list[str]:
        """The usage counters of the server tools this policy allows (each needs a price)."""
        return sorted({tool.usage for tool in self.server_tools.values()})

    def summary(self) -> dict[str, Any]:
        """What the proxy's record says of the policy a run was held to (its arm's additions only)."""
        return {
            "arm": self.arm,
            "server_tools": {
                kind: {"max_uses": t.max_uses, "usage": t.usage, "per_use": t.per_use.as_data()}
                for kind, t in sorted(self.server_tools.items())
            },
        }
