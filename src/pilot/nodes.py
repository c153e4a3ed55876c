"""The machines that run attempts: nodes, their capabilities, and the least-loaded choice among them.

A nodes file (``analysis/config/nodes.yml``, or a study's own) lists each
node's name, capabilities (those of ``protocol/arms/arms.yml``) and slots;
:func:`choose_node` sends a run to the eligible node with the lowest load.
:func:`host_capabilities` says what this machine offers, and
:func:`host_arms` which of the design's arms it can therefore serve.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot import paths, protocol


class NodeError(RuntimeError):
    """This host or a nodes file cannot serve what was asked; the message says what to install or correct."""


@dataclass(frozen=True)
class Node:
    """A machine (or virtual machine) that runs attempts."""

    name: str
    capabilities: frozenset[str]
    slots: int

    def serves(self, requires: Iterable[str]) -> bool:
        return set(requires) <= self.capabilities


NODES_SCHEMA: dict = {
    "type": "object",
    "required": ["nodes"],
    "additionalProperties": False,
    "properties": {
        "nodes": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "capabilities", "slots"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$"},
                    "capabilities": {"type": "array", "items": {"enum": protocol.CAPABILITIES}, "uniqueItems": True},
                    "slots": {"type": "integer", "minimum": 1},
                },
            },
        }
    },
}


def parse_nodes(data: Any, source: Path) -> list[Node]:
    """Validate a parsed nodes file; errors name the file, the field and the reason."""
    protocol.validate(data, NODES_SCHEMA, source)
    names = [n["name"] for n in data["nodes"]]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise protocol.ProtocolError(source, f"nodes.{i}.name", f"duplicate node name {name!r}")
    return [Node(n["name"], frozenset(n["capabilities"]), int(n["slots"])) for n in data["nodes"]]


def load_nodes(path: Path | None = None) -> list[Node]:
    """Read a nodes file (YAML: ``nodes: [{name, capabilities, slots}]``)."""
    path = Path(path) if path is not None else paths.NODES_FILE
    return parse_nodes(protocol.read_yaml(path), path)


def nodes_from_text(text: str, source: str) -> list[Node]:
    import yaml

    return parse_nodes(yaml.safe_load(text), Path(source))


def choose_node(requires: Sequence[str], nodes: Sequence[Node], in_flight: Mapping[str, int]) -> str | None:
    """The least-loaded eligible node with a free slot (load = in flight / slots; ties by name), or None."""
    best: tuple[float, str] | None = None
    for node in nodes:
        busy = in_flight.get(node.name, 0)
        if busy >= node.slots or not node.serves(requires):
            continue
        key = (busy / node.slots, node.name)
        if best is None or key < best:
            best = key
    return None if best is None else best[1]


#: The ``--arms`` value that picks every arm this host can serve.
HOST_ARMS = "host"


def host_capabilities() -> frozenset[str]:
    """What this machine offers an attempt of the CLI backends, in the capabilities of ``protocol/arms/arms.yml``.

    ``linux`` or ``macos`` by the platform; ``libreoffice`` when soffice is
    found (as the oracles find it); ``chromium`` when the distribution's
    Chromium is installed; ``portal`` always (each run's portal is a local
    HTTP server the harness starts).
    """
    from pilot.oracles.recalc import soffice_binary

    caps = {"portal"}
    if sys.platform.startswith("linux"):
        caps.add("linux")
    elif sys.platform == "darwin":
        caps.add("macos")
    if soffice_binary():
        caps.add("libreoffice")
    if paths.CHROMIUM_BIN.exists():
        caps.add("chromium")
    return frozenset(caps)


def host_arms(capabilities: frozenset[str] | None = None) -> list[str]:
    """The design's arms whose ``requires`` this host offers, in the design's order (a Linux host: all but A2)."""
    caps = host_capabilities() if capabilities is None else capabilities
    requires = {a: arm.requires for a, arm in protocol.arms().items()}
    arms = [a for a in protocol.study().arms if set(requires.get(a, ())) <= caps]
    if not arms:
        raise NodeError(
            f"this host offers {', '.join(sorted(caps)) or 'nothing'}, which serves no arm of "
            f"{paths.shown(paths.ARMS_FILE)}; install what the arms require (tools/ensure-system-packages.sh)"
        )
    return arms
