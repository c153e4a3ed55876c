"""A run's event stream (stream-json lines) as a readable conversation.

Each line of the transcript becomes zero or more items: the start of a
session, the assistant's text, each tool call with its input and its result
(shortened, the whole kept for an expander), a permission denial, the
session's closing result. Deviations recorded on the run (``pilot.agents.audit``)
are attached to the tool call they name, and a critical violation (an input
file changed, added or deleted) to the tool calls that name that input.
Nothing here is trusted: it is data for an HTML-escaping template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Characters of a tool result shown before its expander.
SHORT_CHARS = 400
#: Characters of one tool result or input kept at all (the stream may hold megabytes).
FULL_CHARS = 20_000
#: Lines of a transcript read at most.
MAX_LINES = 20_000

_INPUT_REASON = re.compile(r"^input (modified|added|deleted): (?P<path>.+)$")


@dataclass
class Item:
    """One entry of the conversation."""

    kind: str  # session | text | thinking | tool | denial | result | user | note
    anchor: str
    line: int
    session: int
    text: str = ""
    name: str = ""
    input: str = ""
    result: str | None = None
    result_short: str | None = None
    result_error: bool = False
    deviations: list[dict] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    turn: int | None = None  # the assistant turn within its session (1, 2, ...), for what the assistant said or called
    timestamp: str = ""  # as the stream gave it, when it gave one

    @property
    def flagged(self) -> bool:
        return bool(self.deviations or self.violations)

    def same_step(self, other: Item) -> bool:
        """Whether ``other`` repeats this step exactly (same session, call, input and result; neither flagged)."""
        if self.flagged or other.flagged or self.kind != other.kind or self.session != other.session:
            return False
        if self.kind == "tool":
            return (self.name, self.input, self.result, self.result_error, self.meta.get("denied")) == (
                other.name,
                other.input,
                other.result,
                other.result_error,
                other.meta.get("denied"),
            )
        return self.kind in ("text", "thinking", "user", "denial", "note") and (self.name, self.text) == (
            other.name,
            other.text,
        )


@dataclass
class Step:
    """An item and the identical items that followed it at once (shown once, "×n", the rest in an expander)."""

    item: Item
    repeats: list[Item]

    @property
    def count(self) -> int:
        return 1 + len(self.repeats)


@dataclass
class Conversation:
    """The items of one attempt's stream, and what could not be placed."""

    items: list[Item]
    unplaced_deviations: list[dict]
    unplaced_violations: list[str]
    unreadable_lines: int
    cut: bool

    @property
    def flagged(self) -> list[Item]:
        return [i for i in self.items if i.flagged]

    @property
    def steps(self) -> list[Step]:
        """The items with identical consecutive ones collapsed into one step."""
        out: list[Step] = []
        for it in self.items:
            if out and out[-1].item.same_step(it):
                out[-1].repeats.append(it)
            else:
                out.append(Step(it, []))
        return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, dict):
                if b.get("type") == "text":
                    parts.append(str(b.get("text", "")))
                elif b.get("type") == "image":
                    parts.append("[image]")
                else:
                    parts.append(json.dumps(b, ensure_ascii=False, default=str))
            else:
                parts.append(str(b))
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def _pretty(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"command"} and isinstance(value["command"], str):
        return value["command"]
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _violation_paths(e_reasons: Iterable[str]) -> list[tuple[str, str]]:
    """(reason, path under the workspace) for each input-hash violation."""
    out = []
    for r in e_reasons or []:
        m = _INPUT_REASON.match(str(r).strip())
        if m:
            out.append((str(r), m.group("path")))
    return out


def parse(lines: Iterable[str], deviations: Iterable[dict] = (), e_reasons: Iterable[str] = ()) -> Conversation:
    """The conversation of one attempt from its stream-json lines."""
    items: list[Item] = []
    tools: dict[str, Item] = {}
    session = -1
    turn = 0
    last_message: object = None
    stamps: dict[int, str] = {}
    unreadable = 0
    cut = False
    for n, raw in enumerate(lines, start=1):
        if n > MAX_LINES:
            cut = True
            break
        raw = raw.strip()
        if not raw:
            continue
        try:
            ev = json.loads(raw)
        except json.JSONDecodeError:
            unreadable += 1
            continue
        if not isinstance(ev, dict):
            unreadable += 1
            continue
        kind, sub = ev.get("type"), ev.get("subtype")
        anchor = f"ev-{n}"
        stamp = ev.get("timestamp")
        stamp = str(stamp) if isinstance(stamp, (str, int, float)) and not isinstance(stamp, bool) else ""
        start = len(items)
        if stamp:
            stamps[n] = stamp
        if kind == "system" and sub == "init":
            session += 1
            turn, last_message = 0, None
            items.append(
                Item(
                    "session",
                    anchor,
                    n,
                    session,
                    timestamp=stamp,
                    meta={
                        "model": str(ev.get("model") or ""),
                        "version": str(ev.get("claude_code_version") or ""),
                        "tools": ", ".join(map(str, ev.get("tools") or [])),
                        "session_id": str(ev.get("session_id") or ""),
                    },
                )
            )
            continue
        s = max(session, 0)
        if kind == "system" and sub == "permission_denied":
            tid = str(ev.get("tool_use_id") or "")
            msg = _cut(str(ev.get("message") or ""), FULL_CHARS)
            if tid in tools:
                tools[tid].meta["denied"] = msg
            else:
                items.append(Item("denial", anchor, n, s, text=msg, name=str(ev.get("tool_name") or "")))
            continue
        if kind == "assistant":
            msg = ev.get("message") or {}
            # One turn is one assistant message; the stream may split a message's blocks over several lines with its id.
            mid = msg.get("id") if isinstance(msg, dict) else None
            if mid is None or mid != last_message:
                turn += 1
            last_message = mid
            content = msg.get("content")
            for i, block in enumerate(content if isinstance(content, list) else [content]):
                a = f"{anchor}-{i}"
                if isinstance(block, str):
                    items.append(Item("text", a, n, s, text=_cut(block, FULL_CHARS)))
                elif not isinstance(block, dict):
                    continue
                elif block.get("type") == "text":
                    items.append(Item("text", a, n, s, text=_cut(str(block.get("text", "")), FULL_CHARS)))
                elif block.get("type") == "thinking":
                    items.append(Item("thinking", a, n, s, text=_cut(str(block.get("thinking", "")), FULL_CHARS)))
                elif block.get("type") == "tool_use":
                    tid = str(block.get("id") or "")
                    it = Item(
                        "tool",
                        a,
                        n,
                        s,
                        name=str(block.get("name") or "?"),
                        input=_cut(_pretty(block.get("input")), FULL_CHARS),
                        meta={"id": tid},
                    )
                    items.append(it)
                    if tid:
                        tools.setdefault(tid, it)
            usage = msg.get("usage") if isinstance(msg, dict) and isinstance(msg.get("usage"), dict) else None
            for k, it in enumerate(items[start:]):
                it.turn, it.timestamp = turn, stamp
                # Which answer of the model this came from (the proxy's record names it too), and its usage once.
                it.meta["message_id"] = str(mid) if isinstance(mid, str) else ""
                it.meta["model"] = str(msg.get("model") or "") if isinstance(msg, dict) else ""
                if usage is not None and k == 0:
                    it.meta["usage"] = usage
            continue
        if kind == "user":
            msg = ev.get("message") or {}
            content = msg.get("content")
            if isinstance(content, str):
                items.append(Item("user", anchor, n, s, text=_cut(content, FULL_CHARS)))
                continue
            for i, block in enumerate(content if isinstance(content, list) else []):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    text = _content_text(block.get("content"))
                    target = tools.get(str(block.get("tool_use_id") or ""))
                    if target is None:
                        target = Item("tool", f"{anchor}-{i}", n, s, name="(result of an unknown call)")
                        items.append(target)
                    target.result = _cut(text, FULL_CHARS)
                    target.result_short = text[:SHORT_CHARS] if len(text) > SHORT_CHARS else None
                    target.result_error = bool(block.get("is_error"))
                elif isinstance(block, dict) and block.get("type") == "text":
                    items.append(Item("user", f"{anchor}-{i}", n, s, text=_cut(str(block.get("text", "")), FULL_CHARS)))
            continue
        if kind == "result":
            items.append(
                Item(
                    "result",
                    anchor,
                    n,
                    s,
                    text=_cut(str(ev.get("result") or ""), FULL_CHARS),
                    timestamp=stamp,
                    meta={
                        "subtype": str(sub or ""),
                        "is_error": bool(ev.get("is_error")),
                        "cost_usd": ev.get("total_cost_usd"),
                        "turns": ev.get("num_turns"),
                        "terminal_reason": str(ev.get("terminal_reason") or ""),
                        "errors": "; ".join(map(str, ev.get("errors") or [])),
                    },
                )
            )
            continue
        items.append(Item("note", anchor, n, s, text=_cut(f"{kind or '?'} {sub or ''}".strip(), 200)))

    for it in items:
        it.timestamp = it.timestamp or stamps.get(it.line, "")
    unplaced: list[dict] = []
    for d in deviations or []:
        target = tools.get(str(d.get("tool_use_id") or ""))
        if target is not None:
            target.deviations.append(dict(d))
        else:
            unplaced.append(dict(d))
    unplaced_v: list[str] = []
    for reason, path in _violation_paths(e_reasons):
        name = Path(path).name
        hits = [it for it in items if it.kind == "tool" and (path in it.input or (name and name in it.input))]
        for it in hits:
            it.violations.append(reason)
        if not hits:
            unplaced_v.append(reason)
    unplaced_v += [str(r) for r in e_reasons or [] if not _INPUT_REASON.match(str(r).strip())]
    return Conversation(items, unplaced, unplaced_v, unreadable, cut)


def read(path: Path | None, deviations: Iterable[dict] = (), e_reasons: Iterable[str] = ()) -> Conversation | None:
    """The conversation of a transcript file, or None when there is none."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return parse(fh, deviations, e_reasons)
    except OSError:
        return None
