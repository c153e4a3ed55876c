"""A study's runs as Inspect eval logs, written with ``inspect_ai``'s own types and log writer.

``pilot study export NAME --format inspect`` writes one log per arm and
worker model (``<study>_<arm>_<model>.eval``, task ``<study>_<arm>_<model>``).
A sample is a scenario under the arm (id ``<scenario>.<arm>``); the repeats
are its epochs, so Inspect's epoch grouping and reduction apply. What a
native log holds is reproduced from the study's own records:

- the brief as the sample's input; the worker's prompt, the conversation
  (from the harness's copy of the CLI stream) and the A4 resume prompt as
  its messages;
- events: the sample's start; per session a span with one model event per
  request the model proxy answered (input, output, tokens with cache reads
  and writes, cost, time; from the stream where no proxy record exists),
  one tool event per call with its result and any deviation flagged on it,
  the cap a session reached, and between sessions the A4 self-check verdict,
  the controller's decision on the resume and its prompt; then the scoring;
- ``model_usage`` from the proxy record, ``total_time`` and
  ``working_time``, ``limit`` for a capped run (which cap), ``error`` for an
  agent error or a run whose every attempt failed on infrastructure (the
  earlier failed attempts as ``error_retries``);
- D, E, Q and S as scores, each explained (the failed criteria with their
  reasons written for people, the changed inputs with their digests, each
  judge's grades and rationale in the score's metadata); a missing score is
  left out and named in ``missing_scores``;
- per log the results (mean D, E, Q and S over the samples' epoch means, with
  standard errors, by Inspect's own ``mean_score`` reducer and ``mean`` and
  ``stderr`` metrics) and the stats (first start, last end, token usage).

Every log's metadata carries the study's label (SIMULATED, REHEARSAL or
``real``), and so does every sample's, so a dry run read in ``inspect view``
or Inspect's data frames still says what it is. A dry run's tokens are the
simulated agent's stand-in of the proxy's record (:mod:`pilot.simulated.tokens`):
its model events carry them like a real run's, and say SIMULATED in their
metadata, as do the sample's and the log's ``tokens_source``. ``inspect_ai`` is an
optional extra (``pip install -e '.[inspect]'``), imported here only.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pilot.agents.session import RESUME_PROMPT
from pilot.protocol.prices import Usage
from pilot.view import changes, conversation, oracle_text, sessions, usage
from pilot.view.study import StudyReader

#: The run-table columns that become scores; the rest of the row is the sample's metadata.
SCORES = ("D", "E", "Q", "S")
#: Inspect's limit type for each of the study's caps (a sandbox's resource bounds are "custom").
LIMIT_TYPES = {"cost": "cost", "wall": "time", "turns": "turn"}
#: Each score's meaning, for the log's scorer list.
SCORE_MEANINGS = {
    "D": "deterministic completion: every required oracle criterion passed and no critical violation",
    "E": "critical violation: an input file changed, added or deleted",
    "Q": "quality: the mean of the available judges' rubric scores, 0-100",
    "S": "acceptance: 1{D = 1, E = 0, Q >= q}",
}


class InspectExportError(RuntimeError):
    """The export cannot be written (the optional extra is missing, or the study has no run)."""


def _inspect() -> Any:
    try:
        import inspect_ai.dataset as dataset
        import inspect_ai.event as event
        import inspect_ai.log as log
        import inspect_ai.model as model
        import inspect_ai.scorer as scorer
        import inspect_ai.tool as tool
    except ImportError as exc:  # the extra is optional: say which one to install
        raise InspectExportError(
            "the Inspect export needs the optional extra: pip install -e '.[inspect]' (inspect-ai)"
        ) from exc
    return _Api(dataset, event, log, model, scorer, tool)


@dataclass(frozen=True)
class _Api:
    dataset: Any
    event: Any
    log: Any
    model: Any
    scorer: Any
    tool: Any


def _plain(value: Any) -> Any:
    """A JSON-safe metadata value: missing numbers as None, numpy scalars as Python ones."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _score_value(value: Any) -> float | None:
    v = _plain(value)
    if v is None or v == "":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _arguments(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {"input": text}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def _file_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-") or "x"


def _stable_id(*parts: Any) -> str:
    """A short identifier that is the same every time the same study is exported (Inspect's ids are 22 characters)."""
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:22]


def _time(value: Any) -> datetime | None:
    t = usage.parse_time(value)
    if t is not None and t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def model_usage_of(api: _Api, tokens: usage.Tokens) -> Any:
    """Inspect's ModelUsage of summed proxy counts (input: uncached input tokens, as the API reports them)."""
    return api.model.ModelUsage(
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        total_tokens=tokens.total,
        input_tokens_cache_write=tokens.cache_write,
        input_tokens_cache_read=tokens.cache_read,
        total_cost=float(tokens.cost_usd),
    )


def _request_usage(api: _Api, r: usage.Request) -> Any:
    t = usage.Tokens()
    t.add(r)
    return model_usage_of(api, t)


def _stream_usage(api: _Api, u: dict[str, Any] | None) -> Any:
    """The usage a stream line reported (the real CLI's assistant lines carry one), or None."""
    if not u:
        return None
    counts = Usage.from_api(u)
    return api.model.ModelUsage(
        input_tokens=counts.input_tokens,
        output_tokens=counts.output_tokens,
        total_tokens=counts.input_tokens
        + counts.output_tokens
        + counts.cache_creation_input_tokens
        + counts.cache_read_input_tokens,
        input_tokens_cache_write=counts.cache_creation_input_tokens,
        input_tokens_cache_read=counts.cache_read_input_tokens,
    )


@dataclass
class _Turn:
    """One answer of the model in the stream: its session, text, tool calls and where it stands."""

    session: int
    message_id: str
    items: list[conversation.Item]
    timestamp: str
    usage: dict[str, Any] | None
    model: str = ""

    @property
    def synthetic(self) -> bool:
        """A message the CLI wrote itself (``<synthetic>``, e.g. an API error shown to the agent): no model call."""
        return self.model.startswith("<")

    @property
    def text(self) -> str:
        return "\n\n".join(i.text for i in self.items if i.kind == "text" and i.text)

    @property
    def tools(self) -> list[conversation.Item]:
        return [i for i in self.items if i.kind == "tool"]


def turns_of(conv: conversation.Conversation | None) -> list[_Turn]:
    """The model's answers in stream order (items of one assistant message grouped, whatever lines they span)."""
    out: list[_Turn] = []
    if conv is None:
        return out
    for it in conv.items:
        if it.kind not in ("text", "thinking", "tool") or it.turn is None:
            continue
        mid = str(it.meta.get("message_id") or "")
        if out and out[-1].session == it.session and out[-1].items[-1].turn == it.turn:
            out[-1].items.append(it)
            out[-1].usage = out[-1].usage or it.meta.get("usage")
            continue
        out.append(_Turn(it.session, mid, [it], it.timestamp, it.meta.get("usage"), str(it.meta.get("model") or "")))
    return out


class _SampleBuilder:
    """Messages and events of one sample, in order, with times relative to its start."""

    def __init__(self, api: _Api, run_id: str, start: datetime, model_name: str) -> None:
        self.api, self.run_id, self.start, self.model_name = api, run_id, start, model_name
        self.messages: list[Any] = []
        self.events: list[Any] = []
        self.span: str | None = None
        self.last = start
        self._n = 0

    def mid(self) -> str:
        self._n += 1
        return f"{self.run_id}/m{self._n}"

    def _common(self, at: datetime | None) -> dict[str, Any]:
        # An event whose time was not recorded stands at the last time known before it, so the order holds.
        at = at or self.last
        self.last = max(self.last, at)
        return {
            "timestamp": at,
            "working_start": max(0.0, (at - self.start).total_seconds()),
            "span_id": self.span,
        }

    def add(self, cls: Any, at: datetime | None = None, **fields: Any) -> Any:
        ev = cls(**self._common(at), **fields)
        self.events.append(ev)
        return ev

    def message(self, msg: Any) -> Any:
        self.messages.append(msg)
        return msg


def _judges_text(judges: list[dict[str, Any]]) -> str:
    parts = []
    for j in judges:
        if j.get("error") or j.get("score_0_100") is None:
            parts.append(f"{j.get('judge_id')} ({j.get('model')}): missing ({j.get('error') or 'no score'})")
        else:
            vote = "accept" if j.get("accept") else "not accept"
            parts.append(f"{j.get('judge_id')} ({j.get('model')}): {float(j['score_0_100']):.1f}, {vote}")
    return "; ".join(parts)


def score_explanations(data: dict[str, Any], q: float, input_changes: list[changes.InputChange]) -> dict[str, Any]:
    """Each score's explanation and metadata: the failed criteria, the changed inputs, the judges, S part by part."""
    rec, row = data["record"], data["row"] or {}
    specs = {c.id: c for c in data["scenario"].oracle.criteria} if data.get("scenario") is not None else {}
    failed = [c for c in rec.get("criteria") or [] if not c.get("passed")]
    failed_meta = [
        {
            "id": c.get("id"),
            "required": c.get("required", True),
            "checks": oracle_text.criterion_intent(specs.get(str(c.get("id")))),
            "reason": oracle_text.for_people(c.get("reason"), specs.get(str(c.get("id")))),
            "reason_as_written": c.get("reason"),
        }
        for c in failed
    ]
    required = [f for f in failed_meta if f["required"]]
    if required:
        d_text = f"D = 0: {len(required)} required criteria failed: " + "; ".join(
            f"{f['id']}: {f['reason']}" for f in required
        )
    elif rec.get("E"):
        d_text = "D = 0: every criterion passed, but an input was changed and D requires the inputs untouched"
    elif row.get("D") is False:
        d_text = "D = 0 (the evaluator named no failed criterion)"
    else:
        d_text = f"D = 1: all {rec.get('criteria_total', '–')} criteria passed" + (
            f" but {len(failed_meta)} optional one(s): " + "; ".join(f"{f['id']}: {f['reason']}" for f in failed_meta)
            if failed_meta
            else ""
        )
    e_meta = [
        {
            "file": f"inputs/{c.name}",
            "change": c.change,
            "expected_sha256": c.expected_digest,
            "actual_sha256": c.actual_digest,
        }
        for c in input_changes
    ]
    if rec.get("E"):
        e_text = (
            "E = 1 (critical violation): "
            + "; ".join(
                f"{c.reason} (expected sha256 {c.expected_digest or 'none: not laid out'}, "
                f"after the run {c.actual_digest or 'none: deleted'})"
                for c in input_changes
            )
            if input_changes
            else "E = 1 (critical violation): " + "; ".join(map(str, rec.get("E_reasons") or []))
        )
    else:
        e_text = "E = 0: every input file is as it was laid out"
    judges = [dict(j) for j in rec.get("judges") or []]
    Q = row.get("Q")
    q_text = (
        f"Q = {Q:.1f}, the mean of {row.get('n_judges')} judge(s): {_judges_text(judges)}"
        if isinstance(Q, (int, float)) and not (isinstance(Q, float) and math.isnan(Q))
        else f"Q is missing: no judge returned a grade ({_judges_text(judges) or 'no judge ran'})"
    )
    S = row.get("S")
    parts = f"D = {row.get('D')}, E = {row.get('E')}, Q = {Q if Q is not None else 'missing'} against q = {q:g}"
    s_text = (
        ("S = 1: accepted" if S else "S = 0: not accepted") + f" ({parts})"
        if S is not None
        else (f"S is missing because Q is ({parts})")
    )
    return {
        "D": (
            d_text,
            {
                "failed_criteria": failed_meta,
                "criteria_passed": rec.get("criteria_passed"),
                "criteria_total": rec.get("criteria_total"),
            },
        ),
        "E": (e_text, {"changed_inputs": e_meta, "E_reasons": list(rec.get("E_reasons") or [])}),
        "Q": (
            q_text,
            {
                "q": q,
                "judges": [
                    {
                        "judge_id": j.get("judge_id"),
                        "model": j.get("model"),
                        "backend": j.get("backend"),
                        "score_0_100": _plain(j.get("score_0_100")),
                        "accept": j.get("accept"),
                        "criterion_scores": j.get("criterion_scores") or {},
                        "rationale": j.get("rationale"),
                        "error": j.get("error"),
                    }
                    for j in judges
                ],
            },
        ),
        "S": (s_text, {"q": q}),
    }


def _limit_of(api: _Api, rec: dict[str, Any]) -> Any:
    """Inspect's limit for a run that ended on a cap: which cap and its value."""
    if not rec.get("censored") or not rec.get("censor_reason"):
        return None
    cap = str(rec["censor_reason"])
    kind = LIMIT_TYPES.get(cap, "custom")
    value = {"cost": rec.get("caps_usd"), "wall": rec.get("caps_wall_s"), "turns": rec.get("max_turns")}.get(cap)
    hit = next((h for h in reversed(sessions.cap_hits(rec)) if h.cap == cap), sessions.CapHit(0, cap))
    return api.log.EvalSampleLimit(type=kind, limit=float(value or 0), reason=hit.words)


def _errors_of(api: _Api, data: dict[str, Any]) -> tuple[Any, list[Any]]:
    """(the sample's error or None, the earlier attempts' infrastructure errors)."""
    rec = data["record"]
    attempts = data["attempts"]
    retries = [
        api.log.EvalRetryError(
            message=f"attempt {a['attempt_no']} ({a['outcome']}): {a.get('error') or ''}".strip(),
            traceback="",
            traceback_ansi="",
        )
        for a in attempts
        if not a.get("final") and a.get("outcome") in ("infra_error", "interrupted")
    ]
    if data["run"] is None:
        if data["cell"]["status"] == "failed":
            last = next((a.get("error") for a in reversed(attempts) if a.get("error")), None) or "no error recorded"
            return (
                api.log.EvalError(
                    message=f"infrastructure error: every attempt failed ({len(attempts)}); the last: {last}",
                    traceback="",
                    traceback_ansi="",
                ),
                retries[:-1],
            )
        return None, retries
    if rec.get("status") == "agent_error":
        return (
            api.log.EvalError(
                message=f"agent error: {rec.get('agent_error') or 'the session ended in an error'}",
                traceback="",
                traceback_ansi="",
            ),
            retries,
        )
    return None, retries


def _tool_error(api: _Api, item: conversation.Item) -> Any:
    if not item.result_error and not item.meta.get("denied"):
        return None
    kind = "permission" if item.meta.get("denied") else "unknown"
    return api.tool.ToolCallError(type=kind, message=str(item.meta.get("denied") or item.result or "")[:2000])


def _deviation_words(d: dict[str, Any]) -> str:
    return (
        f"DEVIATION: {str(d.get('kind') or '').replace('_', ' ')} {d.get('family') or ''} via {d.get('via')}, "
        f"stopped by {str(d.get('blocked_by') or '').replace('_', ' ')}: {d.get('command') or ''}"
    ).strip()


def _session_events(
    b: _SampleBuilder,
    data: dict[str, Any],
    conv: conversation.Conversation | None,
    record: usage.UsageRecord,
    exchanges: dict[int, dict[str, Any]],
) -> None:
    """Spans per session with model events (proxy requests or stream turns), tool events, caps and the A4 boundary."""
    api, rec = b.api, data["record"]
    sess = [s for s in rec.get("sessions") or [] if isinstance(s, dict)]
    turns = turns_of(conv)
    by_mid = {t.message_id: t for t in turns if t.message_id}
    used: set[int] = set()
    plan: list[tuple[int, _Turn | None, usage.Request | None]] = []
    session_of_last = 0
    if record.requests:
        for r in record.requests:
            t = by_mid.get(r.message_id or "")
            if t is not None:
                used.add(id(t))
                session_of_last = t.session
            plan.append((t.session if t is not None else session_of_last, t, r))
    for t in turns:
        if id(t) not in used:
            plan.append((t.session, t, None))
    plan.sort(key=lambda p: p[0])  # stable: within a session, the proxy's order, then any turn it did not see
    session_items = {it.session: it for it in (conv.items if conv else []) if it.kind == "session"}
    result_items = {it.session: it for it in (conv.items if conv else []) if it.kind == "result"}
    n_sessions = max([len(sess)] + [p[0] + 1 for p in plan] + [s + 1 for s in session_items])
    tools_offered = [
        api.tool.ToolInfo(name=str(name), description=f"Claude Code's {name} tool")
        for name in (sess[0].get("tools_offered") if sess else None) or []
    ]
    hits = sessions.cap_hits(rec)
    for s in range(n_sessions):
        if s > 0:
            decision = sessions.resume_decision(rec)
            b.span = None
            b.add(
                api.event.InfoEvent,
                _time(session_items[s].timestamp) if s in session_items else None,
                source="A4 self-check and recovery",
                data={
                    "self-check after session 1": {True: "passed", False: "failed"}.get(
                        rec.get("selfcheck_first"), "–"
                    ),
                    "decision": decision.headline,
                    "why": decision.why,
                    "resume prompt": RESUME_PROMPT,
                },
            )
            b.message(
                api.model.ChatMessageUser(
                    id=b.mid(),
                    content=RESUME_PROMPT,
                    source="input",
                    metadata={"from": "the harness: the A4 recovery resume"},
                )
            )
        span = f"session-{s + 1}"
        start_item = session_items.get(s)
        b.add(
            api.event.SpanBeginEvent,
            _time(start_item.timestamp) if start_item else None,
            id=span,
            parent_id=None,
            type="agent",
            name=sessions.session_label(s),
        )
        b.span = span
        if start_item is not None:
            b.add(
                api.event.InfoEvent,
                _time(start_item.timestamp),
                source="session start",
                data={k: v for k, v in start_item.meta.items() if v},
            )
        for _, turn, req in (p for p in plan if p[0] == s):
            if turn is not None and req is None and turn.synthetic:
                b.add(
                    api.event.InfoEvent,
                    _time(turn.timestamp),
                    source="the CLI's own message (no model call)",
                    data=turn.text,
                )
                b.message(
                    api.model.ChatMessageAssistant(
                        id=b.mid(), content=turn.text, source="generate", metadata={"from": "the CLI, not the model"}
                    )
                )
                continue
            _model_event(b, turn, req, exchanges, tools_offered)
            if turn is not None:
                _tool_events(b, turn)
        for h in (h for h in hits if h.session == s):
            kind = LIMIT_TYPES.get(h.cap, "custom")
            value = {"cost": rec.get("caps_usd"), "wall": rec.get("caps_wall_s"), "turns": rec.get("max_turns")}.get(
                h.cap
            )
            b.add(
                api.event.SampleLimitEvent,
                type=kind,
                message=h.words,
                limit=float(value) if value is not None else None,
            )
        end = result_items.get(s)
        info = dict(sess[s]) if s < len(sess) else {}
        if end is not None or info:
            b.add(
                api.event.InfoEvent,
                _time(end.timestamp) if end is not None else None,
                source="session end",
                data={
                    k: v
                    for k, v in {
                        "result": info.get("result_subtype") or (end.meta.get("subtype") if end else None),
                        "terminal reason": info.get("terminal_reason"),
                        "API error status": info.get("api_error_status"),
                        "turns reported": info.get("num_turns_reported"),
                        "cost reported by the CLI (USD)": info.get("reported_cost_usd"),
                        "wall (s)": info.get("wall_s"),
                        "timed out": info.get("timed_out") or None,
                        "resource bound": info.get("bound"),
                        "final words": end.text if end is not None and end.text else None,
                    }.items()
                    if v is not None
                },
            )
        b.add(api.event.SpanEndEvent, id=span)
        b.span = None


def _model_event(
    b: _SampleBuilder,
    turn: _Turn | None,
    req: usage.Request | None,
    exchanges: dict[int, dict[str, Any]],
    tools_offered: list[Any],
) -> None:
    api = b.api
    calls = []
    text = turn.text if turn is not None else ""
    if turn is not None:
        calls = [
            api.tool.ToolCall(
                id=str(t.meta.get("id") or t.anchor), function=t.name or "tool", arguments=_arguments(t.input)
            )
            for t in turn.tools
        ]
    elif req is not None and req.seq in exchanges:
        content = exchanges[req.seq].get("response_content") or []
        text = "\n\n".join(str(c.get("text") or "") for c in content if isinstance(c, dict) and c.get("type") == "text")
        calls = [
            api.tool.ToolCall(
                id=str(c.get("id") or ""),
                function=str(c.get("name") or "tool"),
                arguments=c.get("input") if isinstance(c.get("input"), dict) else {"input": c.get("input")},
            )
            for c in content
            if isinstance(c, dict) and c.get("type") == "tool_use"
        ]
    assistant = api.model.ChatMessageAssistant(
        id=b.mid(), content=text, tool_calls=calls or None, model=b.model_name, source="generate"
    )
    completed = req.at if req is not None else _time(turn.timestamp) if turn is not None else None
    started = completed - timedelta(seconds=req.duration_s) if completed and req and req.duration_s else completed
    use = _request_usage(api, req) if req is not None else _stream_usage(api, turn.usage if turn else None)
    error = None
    if req is not None and req.status not in (None, 200):
        error = f"the model API answered status {req.status}" + (f" ({req.note})" if req.note else "")
    output = api.model.ModelOutput(
        model=b.model_name,
        choices=[api.model.ChatCompletionChoice(message=assistant, stop_reason="tool_calls" if calls else "stop")],
        usage=use,
        time=req.duration_s if req is not None else None,
        error=error,
    )
    meta: dict[str, Any] = {}
    if req is not None:
        meta = {
            "proxy_seq": req.seq,
            "message_id": req.message_id,
            "cost_usd": str(req.cost_usd) if req.cost_usd is not None else None,
            "usage_complete": req.complete,
        }
        if req.simulated:
            meta.update(label="SIMULATED", tokens_source=usage.SIMULATED_TOKENS)
    elif turn is not None:
        meta = {"message_id": turn.message_id, "note": "from the CLI stream: the model proxy recorded no such request"}
    b.add(
        api.event.ModelEvent,
        started,
        model=b.model_name,
        input=list(b.messages),
        tools=tools_offered,
        tool_choice="auto",
        config=api.model.GenerateConfig(),
        output=output,
        error=error,
        completed=completed,
        working_time=req.duration_s if req is not None else None,
        metadata=meta or None,
    )
    if turn is not None or calls or text:
        b.message(assistant)


def _tool_events(b: _SampleBuilder, turn: _Turn) -> None:
    api = b.api
    for t in turn.tools:
        msg = api.model.ChatMessageTool(
            id=b.mid(),
            content=t.result or "",
            tool_call_id=str(t.meta.get("id") or t.anchor),
            function=t.name or "tool",
            error=_tool_error(api, t),
        )
        meta = None
        if t.deviations or t.violations:
            meta = {"deviations": [dict(d) for d in t.deviations], "critical_violations": list(t.violations)}
        b.add(
            api.event.ToolEvent,
            _time(t.timestamp),
            id=str(t.meta.get("id") or t.anchor),
            function=t.name or "tool",
            arguments=_arguments(t.input),
            result=t.result or "",
            error=_tool_error(api, t),
            events=[],
            message_id=msg.id,
            metadata=meta,
        )
        for d in t.deviations:
            b.add(api.event.InfoEvent, _time(t.timestamp), source="deviation", data=_deviation_words(d))
        for v in t.violations:
            b.add(api.event.InfoEvent, _time(t.timestamp), source="critical violation", data=f"CRITICAL VIOLATION: {v}")
        b.message(msg)


@dataclass(frozen=True)
class _Context:
    label: str
    prompt: str
    q: float
    worker: str
    simulated: bool


def build_sample(api: _Api, reader: StudyReader, row: dict[str, Any], ctx: _Context) -> Any:
    """One run as an Inspect sample (its id the scenario and arm, its epoch the repeat)."""
    run_id = str(row["run_id"])
    data = reader.run(run_id, row=row)
    rec, cell = data["record"], data["cell"]
    final = data["final"]
    folder = final["files"].folder if final is not None else None
    start = _time(final.get("started_at")) if final else None
    end = _time(final.get("finished_at")) if final else None
    start = start or _time(cell.get("finished_at")) or datetime.now(UTC)
    model_name = str(row.get("model") or ctx.worker)
    b = _SampleBuilder(api, run_id, start, model_name)
    conv = next((c for a, c in data["conversations"] if a.get("final")), None)
    record = usage.read_usage(folder) if folder is not None else usage.UsageRecord()
    exchanges = usage.read_exchanges(folder) if folder is not None and record.found else {}
    sample_id = f"{cell['scenario']}.{cell['arm']}"
    b.add(
        api.event.SampleInitEvent,
        start,
        sample=api.dataset.Sample(input=data["brief"], id=sample_id, metadata={"run_id": run_id}),
        state={"messages": [{"role": "user", "content": ctx.prompt}]},
    )
    b.message(api.model.ChatMessageUser(id=b.mid(), content=ctx.prompt, source="input"))
    if data["run"] is not None:
        _session_events(b, data, conv, record, exchanges)
    inputs_dir = Path(data["scenario"].inputs_dir) if data.get("scenario") is not None else None
    input_changes = changes.input_changes(rec, folder, inputs_dir) if rec.get("E") and folder is not None else []
    explained = score_explanations(data, ctx.q, input_changes) if data["run"] is not None else {}
    scores = {}
    for k in SCORES:
        v = _score_value((data["row"] or row).get(k))
        if v is None:
            continue
        text, meta = explained.get(k, ("", {}))
        scores[k] = api.scorer.Score(value=v, explanation=text, metadata=meta)
    if scores:
        b.add(api.event.SpanBeginEvent, end, id="scorers", parent_id=None, type="scorers", name="scorers")
        b.span = "scorers"
        for k, sc in scores.items():
            b.add(api.event.ScoreEvent, end, score=sc, target="", intermediate=False, scorer=k)
        b.add(api.event.SpanEndEvent, end, id="scorers")
        b.span = None
    error, retries = _errors_of(api, data)
    if error is not None:
        b.add(api.event.ErrorEvent, end, error=error)
    limit = _limit_of(api, rec)
    tokens = record.tokens() if record.found else None
    usage_by_model = {m: model_usage_of(api, t) for m, t in record.by_model().items()} if record.found else {}
    wall = _score_value(rec.get("wall_s"))
    elapsed = (end - start).total_seconds() if end is not None else None
    # A simulated run's wall time is drawn, not elapsed: it is the sample's time as the run table states it.
    total_time = wall if ctx.simulated or elapsed is None else max(elapsed, wall or 0.0)
    last_text = next((m.text for m in reversed(b.messages) if m.role == "assistant" and m.text), "")
    meta = {
        k: _plain(v)
        for k, v in (data["row"] or row).items()
        if k not in SCORES and isinstance(v, (str, int, float, bool, type(None)))
    }
    meta.update(
        {
            "run_id": run_id,
            "label": ctx.label,
            "missing_scores": [k for k in SCORES if k not in scores],
            "cap_hits": [h.words for h in sessions.cap_hits(rec)],
            "resume": sessions.resume_decision(rec).headline if rec else None,
            "deviations": [_deviation_words(d) for d in rec.get("deviations") or [] if isinstance(d, dict)],
            "tokens_source": usage.source_of(record),
        }
    )
    return api.log.EvalSample(
        id=sample_id,
        epoch=int(cell["repeat"]),
        input=data["brief"],
        target="",
        messages=b.messages,
        output=api.model.ModelOutput(
            model=model_name,
            choices=[
                api.model.ChatCompletionChoice(
                    message=api.model.ChatMessageAssistant(content=last_text, model=model_name), stop_reason="stop"
                )
            ],
            usage=model_usage_of(api, tokens) if tokens is not None else None,
        ),
        scores=scores,
        metadata=meta,
        events=b.events,
        model_usage=usage_by_model,
        started_at=_iso(start),
        completed_at=_iso(end),
        total_time=round(total_time, 3) if total_time is not None else None,
        working_time=round(wall, 3) if wall is not None else None,
        uuid=_stable_id(reader.name, run_id),
        error=error,
        error_retries=retries or None,
        limit=limit,
        time_limit=int(rec["caps_wall_s"]) if rec.get("caps_wall_s") else None,
        turn_count=rec.get("turns") if isinstance(rec.get("turns"), int) else None,
    )


def results_of(api: _Api, samples: list[Any]) -> tuple[Any, list[Any]]:
    """Per score: each sample's epochs reduced by Inspect's ``mean_score``, then its ``mean`` and ``stderr`` metrics."""
    reduce = api.scorer.mean_score()
    mean, stderr = api.scorer.mean(), api.scorer.stderr()
    out, reductions = [], []
    ids = sorted({s.id for s in samples})
    for k in SCORES:
        per_id: dict[str, list[Any]] = {}
        for s in samples:
            if k in (s.scores or {}):
                per_id.setdefault(s.id, []).append(s.scores[k])
        reduced = [api.scorer.SampleScore(score=reduce(per_id[i]), sample_id=i) for i in ids if i in per_id]
        reductions.append(
            api.log.EvalSampleReductions(
                scorer=k,
                reducer="mean",
                samples=[api.log.EvalSampleScore(value=r.score.value, sample_id=r.sample_id) for r in reduced],
            )
        )
        scored = sum(len(v) for v in per_id.values())
        metrics = {}
        if reduced:
            metrics = {
                "mean": api.log.EvalMetric(name="mean", value=float(mean(reduced))),
                "stderr": api.log.EvalMetric(name="stderr", value=float(stderr(reduced))),
            }
        out.append(
            api.log.EvalScore(
                name=k,
                scorer=k,
                reducer="mean",
                scored_samples=scored,
                unscored_samples=len(samples) - scored,
                metrics=metrics,
                metadata={"meaning": SCORE_MEANINGS[k]},
            )
        )
    completed = sum(1 for s in samples if s.error is None or s.scores)
    # Acceptance heads the log (Inspect's headline is otherwise the first score).
    headline = api.log.HeadlineMetric(scorer="S", score="S", metric="mean", reducer="mean")
    return (
        api.log.EvalResults(total_samples=len(samples), completed_samples=completed, scores=out, headline=headline),
        reductions,
    )


@dataclass(frozen=True)
class InspectExport:
    """What an export wrote: the logs (one per arm and model) and the samples in them (one per run)."""

    logs: list[Path]
    samples: int


def export_inspect(reader: StudyReader, out_dir: Path) -> InspectExport:
    """Write the study's runs as Inspect eval logs under ``out_dir``."""
    api = _inspect()
    from pilot import protocol

    rows = reader.index_rows()
    if not rows:
        raise InspectExportError(f"study {reader.name} has no run to export")
    simulated = reader.simulated(rows)
    label = "SIMULATED" if simulated else (reader.label() or "real")
    ctx = _Context(
        label=label,
        prompt=str(protocol.study()["worker"]["user_prompt"]),
        q=float(protocol.study().q),
        worker=reader.info.worker_model,
        simulated=simulated,
    )
    overview = reader.overview()
    running = overview["total"]["waiting"] + overview["total"]["in_flight"] > 0
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, str], list[Any]] = {}
    waves: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        key = (str(row.get("arm")), str(row.get("model") or ctx.worker))
        groups.setdefault(key, []).append(build_sample(api, reader, row, ctx))
        waves.setdefault(key, set()).add(str(row.get("wave")))
    written = []
    import inspect_ai

    for (arm, model_name), samples in sorted(groups.items()):
        samples.sort(key=lambda s: (s.id, s.epoch))
        results, reductions = results_of(api, samples)
        starts = [at for s in samples if (at := _time(s.started_at)) is not None]
        ends = [at for s in samples if (at := _time(s.completed_at)) is not None]
        totals: dict[str, usage.Tokens] = {}
        for s in samples:
            for m, u in (s.model_usage or {}).items():
                t = totals.setdefault(m, usage.Tokens())
                t.merge(
                    usage.Tokens(
                        0,
                        u.input_tokens,
                        u.output_tokens,
                        u.input_tokens_cache_write or 0,
                        u.input_tokens_cache_read or 0,
                        Decimal(str(u.total_cost or 0)),
                    )
                )
        sources = {str((s.metadata or {}).get("tokens_source")) for s in samples}
        # A log with any SIMULATED tokens says so first, whatever else its samples hold.
        tokens_source = next(
            (x for x in (usage.SIMULATED_TOKENS, usage.METERED_TOKENS) if x in sources), usage.NO_TOKENS
        )
        sensitivity = model_name != ctx.worker
        # Inspect reads "a/b" as a package and a task: the study, arm and model joined by underscores instead.
        task = f"{reader.name}_{arm}_{model_name}"
        ids = sorted({s.id for s in samples})
        spec = api.log.EvalSpec(
            eval_id=_stable_id(reader.name, "eval", arm, model_name),
            run_id=_stable_id(reader.name, "run", reader.info.created_at),
            created=reader.info.created_at,
            task=task,
            task_id=_stable_id(reader.name, "task", arm, model_name),
            task_display_name=f"{arm} · {model_name}" + (" (model sensitivity)" if sensitivity else ""),
            task_description=f"study {reader.name}: arm {arm}, worker model {model_name}"
            + ("" if label == "real" else f" ({label}: not a finding about the agent under study)"),
            model=model_name,
            dataset=api.log.EvalDataset(name=reader.name, samples=len(ids), sample_ids=ids),
            config=api.log.EvalConfig(epochs=max(s.epoch for s in samples), epochs_reducer=["mean"]),
            packages={"inspect_ai": inspect_ai.__version__},
            # As a native log lists its scorers (validated into Inspect's own EvalScorer).
            scorers=[
                {
                    "name": k,
                    "options": {},
                    "metrics": [
                        {"name": "inspect_ai/mean", "options": {}},
                        {"name": "inspect_ai/stderr", "options": {}},
                    ],
                    "metadata": {"meaning": SCORE_MEANINGS[k]},
                }
                for k in SCORES
            ],
            # What the agent and its tools wrote is shown as plain text (no markdown, links or media) in inspect view.
            viewer={"trust_content": False},
            metadata={
                "label": label,
                "study": reader.name,
                "arm": arm,
                "model": model_name,
                "waves": sorted(waves[(arm, model_name)]),
                "model_sensitivity": sensitivity,
                "tokens_source": tokens_source,
                "note": "" if label == "real" else f"{label}: not a finding about the agent under study",
            },
        )
        log = api.log.EvalLog(
            eval=spec,
            plan=api.log.EvalPlan(
                name="pilot",
                steps=[
                    api.log.EvalPlanStep(solver="workspace", params={"arm": arm}),
                    api.log.EvalPlanStep(solver="claude_code", params={"model": model_name, "arm": arm}),
                    api.log.EvalPlanStep(solver="oracles_and_judges", params={"q": ctx.q}),
                ],
            ),
            status="started" if running else "success",
            results=results,
            stats=api.log.EvalStats(
                started_at=_iso(min(starts)) if starts else reader.info.created_at,
                completed_at=_iso(max(ends)) if ends else reader.info.created_at,
                model_usage={m: model_usage_of(api, t) for m, t in totals.items()},
            ),
            samples=samples,
        )
        # Set after construction: EvalLog's validator for older logs would copy them into a results dict.
        log.reductions = reductions
        path = out_dir / f"{_file_part(reader.name)}_{_file_part(arm)}_{_file_part(model_name)}.eval"
        api.log.write_eval_log(log, str(path))
        written.append(path)
    return InspectExport(written, len(rows))
