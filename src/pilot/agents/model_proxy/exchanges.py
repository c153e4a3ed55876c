"""A run's records on the harness side, and the exchange record: what the model was shown and what it said.

Each run's records live in a folder of its own under the proxy's
``record_dir`` (:func:`record_folder_name`): the usage record
(:data:`USAGE_FILE_NAME`, written by :mod:`.metering`) and the exchange
record (:data:`EXCHANGES_FILE_NAME`). An exchange row holds every block of a
request the record does not hold yet (tool results, and any other block with
its message and role: what was injected into the conversation) and the
content the model answered (text, tool calls), each bounded; see
:func:`read_exchanges` and :func:`request_blocks`. A block is known by a key
that the proxy can also compute from a streamed answer, so the model's own
answers, sent back in the next request's history, are known as already kept.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilot.agents.model_proxy.wire import short_repr

USAGE_FILE_NAME = "proxy_usage.jsonl"
#: The exchange record beside the usage record.
EXCHANGES_FILE_NAME = "proxy_exchanges.jsonl"
#: The longest text (and serialised tool input) an exchange row keeps of one block; longer ones are cut.
EXCHANGE_TEXT_LIMIT = 100_000
#: Keys (of blocks and messages) the exchange record remembers per run as already kept; past it a block is kept again.
SEEN_KEYS_MAX = 100_000
#: Blocks of one request kept in its exchange row (tool results and any other); the rest are counted, not kept.
REQUEST_BLOCKS_MAX = 256

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


def record_folder_name(run_id: str) -> str:
    """The run's folder under ``record_dir``: the run id itself when it is a plain name, else a safe spelling with a
    digest."""
    if _SAFE_NAME.match(run_id):
        return run_id
    plain = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._-")[-40:] or "run"
    return f"{plain}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def exchanges_path(record_dir: Path, run_id: str) -> Path:
    """Where the proxy writes a run's exchange record, under the proxy's ``record_dir``."""
    return Path(record_dir) / record_folder_name(run_id) / EXCHANGES_FILE_NAME


def read_exchanges(path: Path) -> list[dict]:
    """The rows of an exchange record, in the meter's order (:func:`read_exchange_record` without its torn flag)."""
    return read_exchange_record(path)[0]


def read_exchange_record(path: Path) -> tuple[list[dict], bool]:
    """The rows of an exchange record, in the meter's order, and whether its last line was torn.

    A torn last line (the harness stopped mid-write) is left out; a line
    elsewhere that is not a JSON object is an error naming the file and the line.
    """
    raw = Path(path).read_bytes()
    lines = raw.split(b"\n")
    rows: list[dict] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            if n == len(lines):  # no newline after it: a write cut short
                return rows, True
            raise ValueError(f"{path}: line {n}: not a JSON object ({exc})") from None
        rows.append(row)
    return rows, False


def _clip(text: str, limit: int = EXCHANGE_TEXT_LIMIT) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def _bounded_input(value: Any) -> tuple[Any, bool]:
    """A tool input as recorded: the object itself, or its serialised start under ``_unparsed`` when too large."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return {"_unparsed": short_repr(value, EXCHANGE_TEXT_LIMIT)}, True
    if len(text) <= EXCHANGE_TEXT_LIMIT:
        return value, False
    return {"_unparsed": text[:EXCHANGE_TEXT_LIMIT]}, True


def flatten_tool_result(content: Any, limit: int = EXCHANGE_TEXT_LIMIT) -> tuple[str, bool]:
    """A tool result's content as text: strings and text blocks joined by newlines, other blocks as ``[image]`` etc."""
    if content is None:
        return "", False
    if isinstance(content, str):
        return _clip(content, limit)
    parts: list[str] = []
    size = 0
    for item in content if isinstance(content, list) else [content]:
        if isinstance(item, str):
            part = item
        elif isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            part = item["text"]
        elif isinstance(item, dict):
            part = f"[{str(item.get('type'))[:40]}]"
        else:
            part = f"[{type(item).__name__}]"
        size += len(part) + (1 if parts else 0)
        parts.append(part)
        if size > limit:
            break
    return _clip("\n".join(parts), limit)


# Which blocks a request adds. A block is known by a key: its role, its kind and what it says, less its
# ``cache_control`` (the client moves its cache breakpoints from request to request). A text, a tool call and a
# thinking block have keys of their own that the proxy can also compute from a streamed answer, so that the model's
# own answers, sent back in the next request's history, are known as already kept.


def _key(role: str, kind: str, payload: bytes) -> bytes:
    return hashlib.blake2b(f"{role}\0{kind}\0".encode() + payload, digest_size=16).digest()


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str).encode("ascii")


def _without_cache_control(block: dict) -> dict:
    out = {k: v for k, v in block.items() if k != "cache_control"}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = [
            {k: v for k, v in item.items() if k != "cache_control"} if isinstance(item, dict) else item
            for item in content
        ]
    return out


def block_key(role: str, block: Any) -> bytes:
    """The key of one content block of a request: the same for the same block wherever its cache breakpoint is."""
    try:
        if not isinstance(block, dict):
            return _key(role, "json", _canonical(block))
        kind, keys = block.get("type"), set(block) - {"cache_control"}
        if kind == "text" and keys == {"type", "text"} and isinstance(block["text"], str):
            return _key(role, "text", hashlib.blake2b(_text_bytes(block["text"]), digest_size=16).digest())
        if kind == "thinking" and keys == {"type", "thinking", "signature"}:
            thinking, signature = block["thinking"], block["signature"]
            if isinstance(thinking, str) and isinstance(signature, str):
                digest = hashlib.blake2b(_text_bytes(thinking), digest_size=16).digest()
                return _key(role, "thinking", digest + _text_bytes(signature))
        if kind == "tool_use" and keys == {"type", "id", "name", "input"}:
            return _key(role, "tool_use", _canonical([block["id"], block["name"], block["input"]]))
        return _key(role, "json", _canonical(_without_cache_control(block)))
    except (ValueError, TypeError, RecursionError):
        return secrets.token_bytes(16)  # no key: the block is kept as new


def _blocks_of(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return content
    return [] if content is None else [content]


def _block_row(block: Any) -> tuple[dict, bool]:
    """A request block other than a tool result, as the exchange record keeps it: an image or a document by its
    source's kind and size, any other block as an answer's block is kept."""
    if isinstance(block, dict) and block.get("type") in ("image", "document"):
        given = block.get("source")
        source: dict = given if isinstance(given, dict) else {}
        data = source.get("data")
        row = {"type": block["type"], "source_type": str(source.get("type"))[:40]}
        if isinstance(source.get("media_type"), str):
            row["media_type"] = source["media_type"][:80]
        if isinstance(data, str):
            row["bytes"] = len(data)
        return row, False
    return _content_row(block)


@dataclass
class RequestBlocks:
    """What a request adds to the run's record: the blocks the record does not hold yet, and their keys."""

    messages: int = 0
    tool_results: list[dict] = field(default_factory=list)
    blocks: list[dict] = field(default_factory=list)
    #: New blocks past ``REQUEST_BLOCKS_MAX``: counted only.
    unrecorded: int = 0
    truncated: bool = False
    #: The messages as sent: a request sent again carries the same.
    digest: str = ""
    #: Keys to remember once the exchange is written (the request's blocks and messages).
    keys: list[bytes] = field(default_factory=list, repr=False)

    def row(self) -> dict[str, Any]:
        return {
            "request_messages": self.messages,
            "request_tool_results": self.tool_results,
            "request_blocks": self.blocks,
            "request_blocks_unrecorded": self.unrecorded,
            "request_digest": self.digest,
        }


def request_blocks(body: dict, seen: Callable[[bytes], bool] = lambda key: False, parts: list[bytes] | None = None):
    """The blocks of a request the record does not hold yet (``seen`` says which it does).

    Every block of the system prompt and of every message is read, whatever
    its role: a tool result goes to ``tool_results`` (as before, flattened),
    any other block (a user's text, an image, a text or a call in the history
    the model did not say) to ``blocks`` with its message's index and role.
    A message whose bytes (``parts``, from :func:`serialise_request`) the
    record already holds is passed over whole. Never raises, whatever the body.
    """
    out = RequestBlocks()
    given = body.get("messages")
    messages: list = given if isinstance(given, list) else []
    out.messages = len(messages)
    digest = hashlib.blake2b(digest_size=16)
    todo: list[tuple[int | None, str, Any]] = []
    system = body.get("system")
    if system is not None:
        todo += [(None, "system", b) for b in _blocks_of(system)]
    for i, message in enumerate(messages):
        if parts is not None and i < len(parts):
            mkey = hashlib.blake2b(b"message\0" + parts[i], digest_size=16).digest()
        else:
            mkey = _key("message", "json", _canonical(message)) if isinstance(message, (dict, list)) else b""
        digest.update(mkey)
        if mkey and seen(mkey):
            continue
        out.keys.append(mkey)
        role = str(message.get("role"))[:40] if isinstance(message, dict) else "?"
        content = message.get("content") if isinstance(message, dict) else message
        todo += [(i, role, b) for b in _blocks_of(content)]
    out.digest = digest.hexdigest()
    mine: set[bytes] = set()
    for n, (index, role, block) in enumerate(todo):
        if len(mine) >= SEEN_KEYS_MAX:
            # More new blocks than the record remembers: the rest are counted, not read.
            out.unrecorded += len(todo) - n
            out.truncated = True
            break
        key = block_key(role, block)
        if key in mine or seen(key):
            continue
        mine.add(key)
        out.keys.append(key)
        if len(out.tool_results) + len(out.blocks) >= REQUEST_BLOCKS_MAX:
            out.unrecorded += 1
            out.truncated = True
            continue
        if isinstance(block, dict) and block.get("type") == "tool_result":
            text, cut = flatten_tool_result(block.get("content"))
            tool_use_id, cut_id = _clip(str(block.get("tool_use_id", "")), 1000)
            out.tool_results.append(
                {"tool_use_id": tool_use_id, "is_error": block.get("is_error") is True, "text": text}
            )
            out.truncated = out.truncated or cut or cut_id
        else:
            row, cut = _block_row(block)
            out.blocks.append({"message": index, "role": role, **row})
            out.truncated = out.truncated or cut
    return out


def request_record(body: dict) -> dict[str, Any]:
    """The request's side of its exchange row, the record holding nothing yet: every block is new."""
    blocks = request_blocks(body)
    return {**blocks.row(), "truncated": blocks.truncated}


def _content_row(block: Any) -> tuple[dict, bool]:
    """One block of a whole (JSON) answer as recorded, and whether something was cut."""
    if not isinstance(block, dict):
        return {"type": type(block).__name__}, False
    kind = block.get("type")
    if kind == "text":
        said = block.get("text")
        text, cut = _clip(said if isinstance(said, str) else "")
        return {"type": "text", "text": text}, cut
    if kind == "tool_use":
        tool_input, cut = _bounded_input(block.get("input", {}))
        tool_id, cut_id = _clip(str(block.get("id", "")), 1000)
        name, cut_name = _clip(str(block.get("name", "")), 1000)
        return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}, cut or cut_id or cut_name
    if kind in ("thinking", "redacted_thinking"):
        return {"type": "thinking"}, False  # what the model thought is not kept, only that it did
    return {"type": str(kind)[:80]}, False


class _StreamedBlock:
    """One content block of a streamed answer, its text or its tool input's JSON gathered up to the bound."""

    __slots__ = (
        "kind",
        "id",
        "name",
        "start_input",
        "parts",
        "size",
        "cut",
        "row",
        "hasher",
        "signature",
        "tool_input",
    )

    def __init__(self, start: dict) -> None:
        self.kind = start.get("type")
        self.id, self.name, self.start_input = start.get("id"), start.get("name"), start.get("input")
        self.parts: list[str] = []
        self.size = 0
        self.cut = False
        self.row: tuple[dict, bool] | None = None
        # A text's or a thinking's whole content, hashed as it comes (the record keeps only its first part).
        self.hasher = hashlib.blake2b(digest_size=16) if self.kind in ("text", "thinking") else None
        signature = start.get("signature")
        self.signature: str = signature if isinstance(signature, str) else ""
        self.tool_input: Any = None
        if self.kind == "text" and isinstance(start.get("text"), str) and start["text"]:
            self.hasher.update(_text_bytes(start["text"]))  # type: ignore[union-attr]
            self.add(start["text"])
        if self.kind == "thinking" and isinstance(start.get("thinking"), str):
            self.hasher.update(_text_bytes(start["thinking"]))  # type: ignore[union-attr]

    def add(self, text: str) -> None:
        if self.cut:
            return
        room = EXCHANGE_TEXT_LIMIT - self.size
        if len(text) > room:
            text, self.cut = text[:room], True
        self.parts.append(text)
        self.size += len(text)

    def delta(self, delta: dict) -> None:
        kind = delta.get("type")
        if kind == "text_delta" and self.kind == "text":
            text = str(delta.get("text", ""))
            self.hasher.update(_text_bytes(text))  # type: ignore[union-attr]
            self.add(text)
        elif kind == "input_json_delta" and self.kind == "tool_use":
            self.add(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta" and self.kind == "thinking":
            self.hasher.update(_text_bytes(str(delta.get("thinking", ""))))  # type: ignore[union-attr]
        elif kind == "signature_delta" and self.kind == "thinking":
            self.signature += str(delta.get("signature", ""))

    def key(self) -> bytes | None:
        """The block's key as the next request's history will carry it (None when it cannot be known)."""
        if self.kind == "text" and self.hasher is not None:
            return _key("assistant", "text", self.hasher.digest())
        if self.kind == "thinking" and self.hasher is not None:
            return _key("assistant", "thinking", self.hasher.digest() + _text_bytes(self.signature))
        if self.kind == "tool_use" and not self.finish()[1]:
            try:
                return _key("assistant", "tool_use", _canonical([self.id, self.name, self.tool_input]))
            except (ValueError, TypeError, RecursionError):
                return None
        return None

    def finish(self) -> tuple[dict, bool]:
        if self.row is not None:
            return self.row
        text = "".join(self.parts)
        if self.kind == "tool_use":
            if self.cut:
                tool_input: Any = {"_unparsed": text}
            elif not text:
                tool_input = self.start_input if isinstance(self.start_input, dict) else {}
            else:
                try:
                    tool_input = json.loads(text)
                except (ValueError, RecursionError):
                    tool_input = {"_unparsed": text}
            self.tool_input = tool_input
            row, cut = _content_row({"type": "tool_use", "id": self.id, "name": self.name, "input": tool_input})
            self.row = (row, cut or self.cut)
        elif self.kind == "text":
            self.row = ({"type": "text", "text": text}, self.cut)
        else:
            self.row = _content_row({"type": self.kind})
        return self.row


class AnswerRecord:
    """The content of one answer, gathered from its server-sent events or its whole JSON body, bounded.

    Never raises: an event it cannot read only marks the answer incomplete.
    """

    def __init__(self) -> None:
        self._blocks: dict[int, _StreamedBlock] = {}
        self._whole: list[tuple[dict, bool]] | None = None
        self._whole_keys: list[bytes] = []
        self.stop_reason: str | None = None
        self.complete = False
        self.failed = False

    def event(self, event: dict) -> None:
        try:
            kind = event.get("type")
            if kind == "content_block_start":
                self._blocks[int(event["index"])] = _StreamedBlock(event["content_block"])
            elif kind == "content_block_delta":
                self._blocks[int(event["index"])].delta(event["delta"])
            elif kind == "content_block_stop":
                self._blocks[int(event["index"])].finish()
            elif kind == "message_delta":
                reason = (event.get("delta") or {}).get("stop_reason")
                if isinstance(reason, str):
                    self.stop_reason = reason
            elif kind == "message_stop":
                self.complete = True
        except Exception:  # noqa: BLE001 - whatever the event held, relaying goes on; the record says incomplete
            self.failed = True

    def whole(self, message: dict) -> None:
        """A whole (JSON) answer: a message, or an error body (no content)."""
        try:
            content = message.get("content")
            self._whole = [_content_row(b) for b in (content if isinstance(content, list) else [])]
            self._whole_keys = [block_key("assistant", b) for b in (content if isinstance(content, list) else [])]
            reason = message.get("stop_reason")
            self.stop_reason = reason if isinstance(reason, str) else None
            self.complete = True
        except Exception:  # noqa: BLE001 - as in event()
            self.failed = True

    def content(self) -> tuple[list[dict], bool]:
        """The answer's content blocks in order, and whether some text was cut at the bound."""
        try:
            rows = self._whole if self._whole is not None else [self._blocks[i].finish() for i in sorted(self._blocks)]
        except Exception:  # noqa: BLE001 - as in event()
            self.failed = True
            return [], False
        return [row for row, _ in rows], any(cut for _, cut in rows)

    def keys(self) -> list[bytes]:
        """The keys of the answer's blocks (those that can be known), as the next request's history carries them."""
        if self._whole is not None:
            return list(self._whole_keys)
        try:
            keys = [self._blocks[i].key() for i in sorted(self._blocks)]
        except Exception:  # noqa: BLE001 - as in event()
            return []
        return [k for k in keys if k is not None]
