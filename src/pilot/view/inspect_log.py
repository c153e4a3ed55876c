"""A study's runs as Inspect eval logs, written by ``inspect_ai``'s own log writer.

``pilot study export NAME --format inspect`` writes one log per arm and
model (``<study>_<arm>_<model>.eval``), one sample per run: the worker's
prompt as the input, the conversation from the harness's copy of the CLI
stream as messages (the assistant's text, each tool call and its result, a
note where a session starts), D, E, Q and S as scores, and the run table's
other columns in the sample's metadata. Every log's metadata carries the
study's label (SIMULATED, REHEARSAL, or ``real``), so a dry run read in
``inspect view`` or Inspect's data frames still says what it is.

``inspect_ai`` is an optional extra (``pip install -e '.[inspect]'``); it
is imported here only, when an export is asked for.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot.view import conversation
from pilot.view.study import StudyReader

#: The run-table columns that become scores; the rest of the row is the sample's metadata.
SCORES = ("D", "E", "Q", "S")


class InspectExportError(RuntimeError):
    """The export cannot be written (the optional extra is missing, or the study has no run)."""


def _inspect() -> Any:
    try:
        import inspect_ai.log as log
        import inspect_ai.model as model
        import inspect_ai.scorer as scorer
        import inspect_ai.tool as tool
    except ImportError as exc:  # the extra is optional: say which one to install
        raise InspectExportError(
            "the Inspect export needs the optional extra: pip install -e '.[inspect]' (inspect-ai)"
        ) from exc
    return log, model, scorer, tool


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
    if isinstance(v, bool):
        return float(v)
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


def messages_of(conv: conversation.Conversation | None, prompt: str) -> list[Any]:
    """The conversation as Inspect chat messages: the prompt, then each session's text, tool calls and results."""
    _, model, _, tool = _inspect()
    out: list[Any] = [model.ChatMessageUser(content=prompt)]
    if conv is None:
        return out
    for item in conv.items:
        if item.kind == "session" and item.session > 0:
            # A later session is the self-repairing arm's resume: the harness, not the model, started it.
            out.append(
                model.ChatMessageUser(content=f"[harness] session {item.session + 1} (resume): {item.text}".strip())
            )
        elif item.kind == "text" and item.text:
            out.append(model.ChatMessageAssistant(content=item.text))
        elif item.kind == "tool":
            call_id = item.anchor or f"call-{item.line}"
            out.append(
                model.ChatMessageAssistant(
                    content="",
                    tool_calls=[
                        tool.ToolCall(id=call_id, function=item.name or "tool", arguments=_arguments(item.input))
                    ],
                )
            )
            out.append(
                model.ChatMessageTool(
                    content=item.result or "",
                    tool_call_id=call_id,
                    function=item.name or "tool",
                    error=tool.ToolCallError(type="unknown", message=item.result or "") if item.result_error else None,
                )
            )
        elif item.kind == "user" and item.text:
            out.append(model.ChatMessageUser(content=item.text))
    return out


def _file_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-") or "x"


@dataclass(frozen=True)
class InspectExport:
    """What an export wrote: the logs (one per arm and model) and the samples in them (one per run)."""

    logs: list[Path]
    samples: int


def export_inspect(reader: StudyReader, out_dir: Path) -> InspectExport:
    """Write the study's runs as Inspect eval logs under ``out_dir``."""
    log, _, scorer, _ = _inspect()
    from pilot import protocol

    rows = reader.index_rows()
    if not rows:
        raise InspectExportError(f"study {reader.name} has no run to export")
    label = reader.label() or "real"
    prompt = str(protocol.study()["worker"]["user_prompt"])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        run_id = str(row["run_id"])
        attempts = reader.run_attempts(run_id)
        final = attempts[-1] if attempts else None
        conv = conversation.read(final.transcript if final else None)
        scores = {k: scorer.Score(value=v) for k in SCORES if (v := _score_value(row.get(k))) is not None}
        meta = {k: _plain(v) for k, v in row.items() if k not in SCORES and not isinstance(v, (list, dict))}
        meta.update({"label": label, "missing_scores": [k for k in SCORES if k not in scores]})
        sample = log.EvalSample(
            id=run_id,
            epoch=int(row.get("repeat") or 1),
            input=prompt,
            target="",
            messages=messages_of(conv, prompt),
            scores=scores,
            metadata=meta,
        )
        model_name = str(row.get("model") or reader.info.worker_model)
        groups.setdefault((str(row.get("arm")), model_name), []).append(sample)
    written = []
    for (arm, model_name), samples in sorted(groups.items()):
        spec = log.EvalSpec(
            created=reader.info.created_at,
            task=f"{reader.name}/{arm}",
            model=model_name,
            dataset=log.EvalDataset(name=reader.name, samples=len(samples)),
            config=log.EvalConfig(),
            metadata={
                "label": label,
                "study": reader.name,
                "arm": arm,
                "model": model_name,
                "note": "" if label == "real" else f"{label}: not a finding about the agent under study",
            },
        )
        path = out_dir / f"{_file_part(reader.name)}_{_file_part(arm)}_{_file_part(model_name)}.eval"
        log.write_eval_log(log.EvalLog(eval=spec, status="success", samples=samples), str(path))
        written.append(path)
    return InspectExport(written, len(rows))
