"""H1's assistant: the worker arms' model, reached through the study's metering proxy, with no tools and no files.

The participant site relays what an H1 participant types to the model and
the answer back. Everything goes through :class:`pilot.agents.model_proxy.MeteringProxy`
exactly as an agent run's requests do: the proxy holds the key, checks every
request against its allow-list, reserves each request's worst case against
the session's own budget (``study.yml`` ``human_wave.assistant.usd_per_session``)
and books what the answer cost, in :class:`~decimal.Decimal`, to the
session's usage record in the attempt's folder
(``record/proxy/.../proxy_usage.jsonl``, where an agent run's record lies),
so the viewer and the Inspect export read a human run's tokens as they read
an agent's. A request the budget cannot cover is refused by the proxy, and
the participant is told that the budget is spent.

The request holds nothing but the conversation: a short fixed system text,
the messages typed so far and the answers, the worker model and the reply
limit (``max_tokens``). No tool is offered, nothing of the workspace is
sent, and no header the proxy's lists do not name.

A session's run is reopened on the proxy after a restart of the site with
what is left of its budget (the budget less what its record already booked).
"""

from __future__ import annotations

import http.client
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pilot import paths, protocol
from pilot.workspace import harness_record_dir

#: The assistant's whole instruction: what it is and what it cannot do. Nothing of the assignment.
SYSTEM_PROMPT = (
    "You are a conversational assistant. The person writing to you is doing a piece of professional office work. "
    "You cannot see their files, their screen or their computer, and you cannot run anything: you know only what "
    "they type or paste here. Answer their questions as a knowledgeable colleague would."
)
#: The Messages API version the assistant's requests name (one of the proxy's allowed versions).
API_VERSION = "2023-06-01"
#: How long one answer may take before the participant is told the assistant did not answer.
TIMEOUT_S = 180.0
#: The proxy's folder for a session's record, inside the attempt's harness record (as an agent run's).
PROXY_DIR = "proxy"


class AssistantUnavailable(RuntimeError):
    """The assistant cannot answer (budget spent, the model unreachable); the message is for the participant."""

    def __init__(self, message: str, *, status: str = "failed") -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Settings:
    """What ``study.yml`` fixes for the assistant: budget per session, reply limit, message limit, and the model."""

    usd_per_session: Decimal
    max_tokens: int
    max_message_chars: int
    model: str

    @classmethod
    def from_study(cls, study: protocol.Study | None = None) -> Settings:
        study = study or protocol.study()
        a = study["human_wave"]["assistant"]
        return cls(
            Decimal(str(a["usd_per_session"])),
            int(a["max_tokens"]),
            int(a["max_message_chars"]),
            str(study["worker"]["model"]),
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Settings:
        return cls(
            Decimal(str(data["usd_per_session"])),
            int(data["max_tokens"]),
            int(data["max_message_chars"]),
            str(data["model"]),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "usd_per_session": str(self.usd_per_session),
            "max_tokens": self.max_tokens,
            "max_message_chars": self.max_message_chars,
            "model": self.model,
        }


@dataclass(frozen=True)
class Reply:
    """One answered exchange: the text, the message id, the tokens and the cost the proxy booked."""

    text: str
    message_id: str | None
    usage: dict[str, int]
    cost_usd: Decimal


def record_dir(attempt_dir: Path) -> Path:
    """Where the proxy writes a session's usage and exchange records (inside the attempt's harness record)."""
    return harness_record_dir(Path(attempt_dir)) / PROXY_DIR


def booked_usd(attempt_dir: Path) -> Decimal:
    """What the proxy has booked to a session so far, from its usage record (every open of the run on a proxy)."""
    from pilot.view.usage import read_usage

    return read_usage(Path(attempt_dir)).tokens().cost_usd


def messages_of(history: Sequence[tuple[str, str]], text: str) -> list[dict[str, Any]]:
    """The conversation as the Messages API reads it: earlier turns (each prompt and its answer), then the new text."""
    out: list[dict[str, Any]] = []
    for prompt, answer in history:
        out.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
        out.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    out.append({"role": "user", "content": [{"type": "text", "text": text}]})
    return out


class Assistant:
    """The site's one metering proxy and the sessions' runs on it (opened on a session's first message)."""

    def __init__(self, settings: Settings, *, upstream_url: str | None = None, api_key: str | None = None) -> None:
        self.settings = settings
        env = os.environ
        self.upstream_url = upstream_url or env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        self._api_key = api_key if api_key is not None else env.get("ANTHROPIC_API_KEY", "")
        self._proxies: dict[str, Any] = {}
        self._meters: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._session_locks: dict[str, threading.Lock] = {}

    def _proxy(self, attempt_dir: Path) -> Any:
        from pilot.agents.model_proxy import MeteringProxy
        from pilot.protocol.prices import PriceTable

        key = str(attempt_dir)
        proxy = self._proxies.get(key)
        if proxy is None:
            prices = PriceTable.load(paths.PROTOCOL_DIR / "prices.yml")
            proxy = MeteringProxy(self.upstream_url, self._api_key, prices, record_dir(attempt_dir)).start()
            self._proxies[key] = proxy
        return proxy

    def _meter(self, attempt_dir: Path) -> Any:
        """The session's open run on its proxy, opened (again, after a restart) with what is left of its budget."""
        key = str(attempt_dir)
        meter = self._meters.get(key)
        if meter is not None and not meter.closed and not meter.capped:
            return meter
        left = self.settings.usd_per_session - booked_usd(attempt_dir)
        if meter is not None and meter.capped or left <= 0:
            raise AssistantUnavailable(
                "The assistant's budget for this session is spent; it cannot answer any more.", status="refused"
            )
        proxy = self._proxy(attempt_dir)
        if meter is not None and not meter.closed:
            proxy.close_run(key)
        meter = proxy.open_run(key, left, self.settings.model)
        self._meters[key] = meter
        return meter

    def ask(self, attempt_dir: Path, history: Sequence[tuple[str, str]], text: str) -> Reply:
        """Send ``text`` after ``history`` and return the answer; :class:`AssistantUnavailable` when there is none."""
        text = text.strip()
        if not text:
            raise AssistantUnavailable("Type a message first.", status="refused")
        if len(text) > self.settings.max_message_chars:
            raise AssistantUnavailable(
                f"The message has {len(text):,} characters; "
                f"at most {self.settings.max_message_chars:,} can be sent at once.",
                status="refused",
            )
        key = str(attempt_dir)
        with self._lock:
            lock = self._session_locks.setdefault(key, threading.Lock())
        with lock:  # one message of a session at a time: the conversation is one thread
            with self._lock:
                meter = self._meter(Path(attempt_dir))
            body = {
                "model": self.settings.model,
                "max_tokens": self.settings.max_tokens,
                "system": SYSTEM_PROMPT,
                "messages": messages_of(history, text),
            }
            status, data = self._post(meter, body)
            if status == 402:
                raise AssistantUnavailable(
                    "The assistant's budget for this session is spent; it cannot answer any more.", status="refused"
                )
            if status != 200:
                raise AssistantUnavailable(
                    f"The assistant did not answer (status {status}); try again in a moment, or carry on without it."
                )
            try:
                message = json.loads(data)
                blocks = message.get("content") or []
                answer = "\n\n".join(
                    str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
                )
                usage = {k: int(v) for k, v in (message.get("usage") or {}).items() if isinstance(v, int)}
                message_id = message.get("id") if isinstance(message.get("id"), str) else None
            except (ValueError, AttributeError, TypeError) as exc:
                raise AssistantUnavailable("The assistant's answer could not be read; try again.") from exc
            cost = next(
                (Decimal(str(r["cost_usd"])) for r in reversed(meter.requests) if r.get("message_id") == message_id),
                None,
            )
            if cost is None:
                raise AssistantUnavailable(
                    "The assistant's answer was not metered; it is not shown. Tell the experimenter."
                )
            return Reply(answer, message_id, usage, cost)

    @staticmethod
    def _post(meter: Any, body: dict[str, Any]) -> tuple[int, bytes]:
        parts = urlsplit(meter.base_url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=TIMEOUT_S)
        payload = json.dumps(body).encode("utf-8")
        try:
            conn.request(
                "POST",
                "/v1/messages",
                body=payload,
                headers={
                    "content-type": "application/json",
                    "anthropic-version": API_VERSION,
                    "x-api-key": meter.token,
                    "content-length": str(len(payload)),
                },
            )
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise AssistantUnavailable("The assistant could not be reached; try again in a moment.") from exc
        finally:
            conn.close()

    def close_session(self, attempt_dir: Path) -> None:
        """Close a session's books (at submission, deadline or withdrawal): nothing more is sent for it."""
        key = str(attempt_dir)
        with self._lock:
            meter = self._meters.pop(key, None)
            proxy = self._proxies.pop(key, None)
        if meter is not None and proxy is not None:
            proxy.close_run(key)
        if proxy is not None:
            proxy.stop()

    def close(self) -> None:
        for key in list(self._proxies):
            self.close_session(Path(key))
