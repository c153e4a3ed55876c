"""The judges' fixed JSON output schema, and parsing a reply against it.

A judge answers with one JSON object: an integer 0-4 for every rubric
criterion (no more, no fewer), whether a demanding manager would accept the
package, and a short rationale. The schema is built from the rubric's ids and
checked with jsonschema; a reply that fails it is retried once by the panel,
then that judge is missing for the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import jsonschema

from pilot.judges.rubric import MAX_SCORE, Criterion

RATIONALE_MAX_CHARS = 1200


def output_schema(criteria: Iterable[Criterion]) -> dict[str, Any]:
    """The JSON schema of a judge's reply for this rubric."""
    ids = [c.id for c in criteria]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "criterion_scores": {
                "type": "object",
                "properties": {cid: {"type": "integer", "minimum": 0, "maximum": MAX_SCORE} for cid in ids},
                "required": ids,
                "additionalProperties": False,
            },
            "accept": {"type": "boolean"},
            "rationale": {"type": "string", "minLength": 1, "maxLength": RATIONALE_MAX_CHARS},
        },
        "required": ["criterion_scores", "accept", "rationale"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class JudgeVerdict:
    """A reply that passed the schema."""

    criterion_scores: dict[str, int]
    accept: bool
    rationale: str


class VerdictError(ValueError):
    """A judge's reply that is not valid JSON or does not follow the schema."""


_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


def _extract_json(text: str) -> Any:
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    m = _FENCE.search(text)
    if m:
        try:
            return json.loads(m.group(1))
        except ValueError:
            pass
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(text[start : end + 1])
        except ValueError as exc:
            raise VerdictError(f"the reply holds no parseable JSON object ({exc.msg})") from None
    raise VerdictError("the reply holds no JSON object")


def parse_verdict(text: str, criteria: Iterable[Criterion]) -> JudgeVerdict:
    """Parse and validate a reply; raise :class:`VerdictError` naming the first problem."""
    crit = list(criteria)
    data = _extract_json(text or "")
    validator = jsonschema.Draft202012Validator(output_schema(crit))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "<root>"
        raise VerdictError(f"field '{where}': {err.message}")
    return JudgeVerdict(
        criterion_scores={c.id: int(data["criterion_scores"][c.id]) for c in crit},
        accept=bool(data["accept"]),
        rationale=data["rationale"].strip(),
    )
