"""A scenario's rubric as the judges use it: weighted criteria with anchors.

``rubric.yml`` lists criteria, each with an id, a weight, what it assesses and
the anchors for the scores 0, 2 and 4. The scenario loader may hand the rubric
over as the parsed mapping or as an object; :func:`criteria_from` accepts
both and refuses a malformed rubric with a message naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

ANCHOR_LEVELS = (0, 2, 4)
MAX_SCORE = 4
# Weights are stated in thousandths at most, so every score is a rational with a small
# denominator and is computed exactly (see exact_score).
WEIGHT_DECIMALS = 3


class RubricError(ValueError):
    """A rubric that the judges cannot use."""

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source, self.field, self.reason = source, field, reason
        super().__init__(f"{source}: field '{field}': {reason}")


@dataclass(frozen=True)
class Criterion:
    """One rubric criterion: id, weight, what it assesses, and its 0/2/4 anchors."""

    id: str
    weight: float
    description: str
    anchors: dict[int, str]


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _anchors(raw: Any, source: str, field: str) -> dict[int, str]:
    if raw is None:
        raise RubricError(source, field, "anchors for 0, 2 and 4 are required")
    if isinstance(raw, Mapping):
        items = {}
        for k, v in raw.items():
            try:
                level = int(k)
            except (TypeError, ValueError):
                raise RubricError(source, f"{field}.{k}", "anchor keys must be the scores 0, 2 and 4") from None
            items[level] = str(v).strip()
    elif isinstance(raw, (list, tuple)) and len(raw) == len(ANCHOR_LEVELS):
        items = {lvl: str(v).strip() for lvl, v in zip(ANCHOR_LEVELS, raw, strict=True)}
    else:
        raise RubricError(source, field, "must map the scores 0, 2 and 4 to their descriptions")
    missing = [lvl for lvl in ANCHOR_LEVELS if not items.get(lvl)]
    if missing:
        raise RubricError(source, field, f"missing anchor text for score(s) {missing}")
    bad = [lvl for lvl in items if not 0 <= lvl <= MAX_SCORE]
    if bad:
        raise RubricError(source, field, f"anchor scores must lie in 0..{MAX_SCORE}, got {bad}")
    return dict(sorted(items.items()))


def criteria_from(rubric: Any, source: str = "rubric") -> list[Criterion]:
    """The rubric's criteria in their stated order.

    ``rubric`` is the parsed ``rubric.yml`` (a mapping with ``criteria``), a
    bare list of criteria, or an object with a ``criteria`` attribute.
    """
    if isinstance(rubric, Mapping) or hasattr(rubric, "criteria"):
        raw = _get(rubric, "criteria")
        source = str(_get(rubric, "path", None) or source)
    else:
        raw = rubric
    if not isinstance(raw, (list, tuple)) or not raw:
        raise RubricError(source, "criteria", "must be a non-empty list of criteria")
    out: list[Criterion] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        field = f"criteria.{i}"
        if isinstance(item, Criterion):
            out.append(item)
            seen.add(item.id)
            continue
        cid = _get(item, "id")
        if not isinstance(cid, str) or not cid.strip():
            raise RubricError(source, f"{field}.id", "a criterion needs a non-empty string id")
        if cid in seen:
            raise RubricError(source, f"{field}.id", f"duplicate criterion id {cid!r}")
        seen.add(cid)
        weight = _get(item, "weight", None)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            raise RubricError(source, f"{field}.weight", f"must be a positive number, got {weight!r}")
        if (10**WEIGHT_DECIMALS) % exact_weight(weight).denominator:
            raise RubricError(
                source, f"{field}.weight", f"must be stated with at most {WEIGHT_DECIMALS} decimals, got {weight!r}"
            )
        desc = _get(item, "description", None) or _get(item, "name", None) or _get(item, "title", None)
        if not isinstance(desc, str) or not desc.strip():
            raise RubricError(source, f"{field}.description", "a criterion needs a description of what it assesses")
        title = _get(item, "name", None) or _get(item, "title", None)
        if isinstance(title, str) and title.strip() and title.strip() not in desc:
            desc = f"{title.strip()}: {desc.strip()}"
        out.append(
            Criterion(
                cid, float(weight), " ".join(desc.split()), _anchors(_get(item, "anchors"), source, f"{field}.anchors")
            )
        )
    return out


@lru_cache(maxsize=64)
def scenario_criteria(scenario_id: str) -> tuple[Criterion, ...]:
    """The criteria of the protocol's scenario ``scenario_id``, as the judges' prompt reads them (loaded once per
    process)."""
    from pilot.scenarios import load_scenario

    scenario = load_scenario(scenario_id)
    return tuple(criteria_from(scenario.rubric, source=f"rubric of {scenario.id}"))


def exact_weight(weight: float) -> Fraction:
    """A weight as the decimal the rubric states (0.35 is 7/20, not the float nearest to it)."""
    return Fraction(repr(float(weight)))


def exact_score(scores: Mapping[str, int], criteria: Iterable[Criterion]) -> Fraction:
    """The rubric-weighted mean of integer 0-4 grades rescaled to 0-100, as an exact rational.

    A float mean of float weights puts (3,3,1,3,4) on LEGAL-01 at
    69.99999999999999, below a threshold of 70 it meets; rationals cannot.
    """
    crit = list(criteria)
    missing = [c.id for c in crit if c.id not in scores]
    if missing:
        raise KeyError(f"scores missing for criteria {missing}")
    total_w = sum(exact_weight(c.weight) for c in crit)
    mean = sum(exact_weight(c.weight) * int(scores[c.id]) for c in crit) / total_w
    return 100 * mean / MAX_SCORE


def weighted_score(scores: Mapping[str, int], criteria: Iterable[Criterion]) -> float:
    """:func:`exact_score` as the float nearest to it (a whole or half point stays exactly that)."""
    return float(exact_score(scores, criteria))
