"""The SIMULATED judge: the embedded default that runs offline.

It reads what the rendering of a run's deliverables shows (presence, text
substitutes, formulas, error values, length, headings) and turns it into
criterion scores with per-judge bias and noise, as stated in
``analysis/config/simulated_judges.yml`` (the model is described there, in
one place). Draws are seeded from the run's seed, the judge and the attempt,
so a study is reproducible. Its replies are JSON text and go through the same
schema check as a real judge's. Everything it produces is a dry run.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from pilot import paths, protocol
from pilot.judges.backend import JudgeReply, JudgeRequest
from pilot.judges.render import COMPLETION_RECORD, RenderedDeliverable
from pilot.judges.rubric import MAX_SCORE, weighted_score

_num = {"type": "number"}
_nonneg = {"type": "number", "minimum": 0}
_prob = {"type": "number", "minimum": 0, "maximum": 1}
_price = protocol.object_schema({"input": _nonneg, "output": _nonneg})

CONFIG_SCHEMA: dict = protocol.object_schema(
    {
        "seed_salt": {"type": "integer", "minimum": 0},
        "quality": protocol.object_schema(
            {
                "substitute": _prob,
                "unreadable": _prob,
                "no_formulas": _prob,
                "per_error_value": _prob,
                "error_values_max": _prob,
                "min_words": {"type": "integer", "minimum": 0},
                "short_text": _prob,
                "headings_min_words": {"type": "integer", "minimum": 0},
                "no_headings": _prob,
                "missing_sections": _prob,
                "no_completion_record": _prob,
            }
        ),
        "rendering_effect": protocol.object_schema({"uncomputed_formulas": _prob}),
        "criterion_sd": _nonneg,
        # What the rendering cannot show (the substance of the work): a share of packages falls short by a drawn
        # number of criterion points, the same for every judge of the run. It lets the judges, not the oracle,
        # decide part of the acceptances (packages that pass the oracle and fall below q).
        "unseen_shortfall": protocol.object_schema(
            {"share": _prob, "points_low": _nonneg, "points_high": _nonneg},
            required=["share", "points_low", "points_high"],
        ),
        "judges": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": r"^J[0-9]+$"},
            "additionalProperties": protocol.object_schema(
                {
                    "bias": _num,
                    "noise_sd": _nonneg,
                    "accept_threshold": {"type": "number", "minimum": 0, "maximum": 100},
                    "accept_sd": _nonneg,
                    "malformed_rate": _prob,
                }
            ),
        },
        "cost": protocol.object_schema(
            {
                "chars_per_token": {"type": "number", "exclusiveMinimum": 0},
                "output_tokens": {"type": "integer", "minimum": 0},
                "price_per_mtok": {"type": "object", "additionalProperties": _price},
                "default_price_per_mtok": _price,
            }
        ),
    }
)
# The unseen shortfall is optional: a model without it leaves every decision past the oracle to what the files show.
CONFIG_SCHEMA["required"] = [k for k in CONFIG_SCHEMA["required"] if k != "unseen_shortfall"]


@dataclass(frozen=True)
class SimulatedJudgeConfig:
    """The validated SIMULATED judge model."""

    path: Path
    raw: dict

    def judge(self, judge_id: str) -> dict:
        try:
            return self.raw["judges"][judge_id]
        except KeyError:
            raise protocol.ProtocolError(
                self.path,
                f"judges.{judge_id}",
                "the study's panel names this judge but the simulated model does not define it",
            ) from None


def load_config(path: Path | None = None) -> SimulatedJudgeConfig:
    """Read and validate the SIMULATED judge model; a bad file names the field and reason."""
    path = Path(path) if path is not None else paths.SIMULATED_JUDGES_FILE
    data = protocol.read_yaml(path)
    protocol.validate(data, CONFIG_SCHEMA, path)
    return SimulatedJudgeConfig(path, data)


#: The stream a run's unseen shortfall is drawn from (apart from every judge's own draws).
SHORTFALL_STREAM = 0x5F


def unseen_shortfall(raw: dict, seed: int) -> float:
    """The criterion points by which the run's package falls short of what its rendering shows (0 for most runs).

    Drawn once per run from the run's seed, so the three judges and both attempts of a judge see the same
    shortfall: with probability ``share`` a uniform draw between ``points_low`` and ``points_high``.
    """
    spec = raw.get("unseen_shortfall")
    if not spec or float(spec["share"]) <= 0:
        return 0.0
    rng = np.random.default_rng([int(seed), int(raw["seed_salt"]), SHORTFALL_STREAM])
    hit, points = rng.random(), rng.uniform(float(spec["points_low"]), float(spec["points_high"]))
    return float(points) if hit < float(spec["share"]) else 0.0


@lru_cache(maxsize=4)
def _cached_config(path: str) -> SimulatedJudgeConfig:
    return load_config(Path(path))


def uncomputed_penalty(raw: dict) -> float:
    """The quality a workbook loses when every formula is shown without a value (``rendering_effect``)."""
    return float((raw.get("rendering_effect") or {}).get("uncomputed_formulas", 0.0))


def deliverable_quality(d: RenderedDeliverable, q: dict, uncomputed: float = 0.0) -> float:
    """Quality in [0, 1] of one rendered deliverable, from its observable features.

    ``uncomputed``: what a workbook loses when its rendering shows every formula without a value (in proportion to
    the share so shown; :func:`uncomputed_penalty`).
    """
    f = d.features
    if d.status == "missing":
        return 0.0
    if d.status == "unreadable":
        return float(q["unreadable"])
    words = int(f.get("n_words", 0))
    cells = int(f.get("n_cells", 0))
    if words == 0 and cells == 0 and int(f.get("n_rows", 0)) == 0:
        return float(q["unreadable"])
    req = d.requirements
    u = float(q["substitute"]) if d.status == "substitute" else 1.0
    if d.format in ("workbook", "table"):
        wants_formulas = req.get("requires_formulas", d.format == "workbook")
        if cells > 0 and int(f.get("n_formulas", 0)) == 0 and wants_formulas:
            u -= float(q["no_formulas"])
        u -= min(float(q["error_values_max"]), float(q["per_error_value"]) * int(f.get("n_error_values", 0)))
        formulas = int(f.get("n_formulas", 0))
        if d.format == "workbook" and formulas:
            u -= uncomputed * int(f.get("n_formulas_uncomputed", 0)) / formulas
    else:
        min_words = int(req.get("min_words") or q["min_words"])
        if words < min_words:
            u -= float(q["short_text"]) * (1.0 - words / max(min_words, 1))
        if d.format == "document" and words >= q["headings_min_words"] and int(f.get("n_headings", 0)) == 0:
            u -= float(q["no_headings"])
    sections = req.get("required_sections") or ()
    if sections:
        u -= float(q["missing_sections"]) * (1.0 - int(f.get("sections_found", 0)) / len(sections))
    return float(min(1.0, max(0.0, u)))


def criterion_offset(criterion_id: str, sd: float, salt: int) -> float:
    # Fixed per criterion id, the same for every judge and run.
    rng = np.random.default_rng([salt, zlib.crc32(criterion_id.encode("utf-8"))])
    return float(rng.normal(0.0, sd))


class SimulatedJudge:
    """SIMULATED judge backend (embedded default)."""

    name = "simulated"

    def __init__(self, config: SimulatedJudgeConfig | Path | None = None) -> None:
        if isinstance(config, SimulatedJudgeConfig):
            self.config = config
        else:
            self.config = _cached_config(str(Path(config) if config is not None else paths.SIMULATED_JUDGES_FILE))

    def _rng(self, request: JudgeRequest) -> np.random.Generator:
        jnum = int(request.judge_id.lstrip("J") or 0)
        return np.random.default_rng(
            [int(request.seed), int(self.config.raw["seed_salt"]), jnum, int(request.draw), int(request.attempt)]
        )

    def cost(self, request: JudgeRequest) -> float:
        c = self.config.raw["cost"]
        price = c["price_per_mtok"].get(request.model, c["default_price_per_mtok"])
        tokens_in = len(request.prompt) / float(c["chars_per_token"])
        return (tokens_in * price["input"] + int(c["output_tokens"]) * price["output"]) / 1e6

    def verdict(self, request: JudgeRequest, rng: np.random.Generator) -> dict[str, Any]:
        """The simulated judge's answer as the JSON object a real judge would give."""
        raw = self.config.raw
        jc = self.config.judge(request.judge_id)
        items = [d for d in request.package.deliverables if d.requested != COMPLETION_RECORD]
        record = [d for d in request.package.deliverables if d.requested == COMPLETION_RECORD]
        qualities = [deliverable_quality(d, raw["quality"], uncomputed_penalty(raw)) for d in items]
        u = float(np.mean(qualities)) if qualities else 0.0
        if record and record[0].status != "delivered":
            u = max(0.0, u - float(raw["quality"]["no_completion_record"]))
        scores: dict[str, int] = {}
        short = unseen_shortfall(raw, int(request.seed))
        for c in request.criteria:
            mu = (
                MAX_SCORE * u
                - short
                + float(jc["bias"])
                + criterion_offset(c.id, float(raw["criterion_sd"]), int(raw["seed_salt"]))
            )
            scores[c.id] = int(np.clip(np.rint(mu + rng.normal(0.0, float(jc["noise_sd"]))), 0, MAX_SCORE))
        score = weighted_score(scores, request.criteria)
        missing = [d.requested for d in items if d.status == "missing"]
        accept = bool(not missing and score + rng.normal(0.0, float(jc["accept_sd"])) >= float(jc["accept_threshold"]))
        notes = []
        if missing:
            notes.append(f"missing: {', '.join(missing)}")
        subs = [d.requested for d in items if d.status == "substitute"]
        if subs:
            notes.append(f"delivered in another format: {', '.join(subs)}")
        errs = sum(int(d.features.get("n_error_values", 0)) for d in items)
        if errs:
            notes.append(f"{errs} error value(s) in workbooks")
        flat = [
            d.requested
            for d in items
            if d.format == "workbook" and d.features.get("n_cells") and not d.features.get("n_formulas")
        ]
        if flat:
            notes.append(f"no formulas in {', '.join(flat)}")
        bare = [d.requested for d in items if d.format == "workbook" and d.features.get("n_formulas_uncomputed")]
        if bare:
            notes.append(f"formulas shown without values in {', '.join(bare)}")
        if short > 0:
            notes.append(f"substance below what the files show by {short:.2f} criterion points")
        rationale = f"SIMULATED judge: package quality {u:.2f}" + (
            "; " + "; ".join(notes) if notes else "; all requested files present and well formed"
        )
        return {"criterion_scores": scores, "accept": accept, "rationale": rationale}

    def complete(self, request: JudgeRequest) -> JudgeReply:
        rng = self._rng(request)
        jc = self.config.judge(request.judge_id)
        cost = self.cost(request)
        if rng.random() < float(jc["malformed_rate"]):
            # A reply cut short: not valid JSON, so the schema check fails it.
            body = json.dumps(self.verdict(request, rng))
            return JudgeReply(body[: len(body) // 2], cost, None)
        return JudgeReply(json.dumps(self.verdict(request, rng)), cost, None)


def new_judge(
    *, claude_bin: Any = None, study: Any = None, environ: Any = None, timeout_s: Any = None
) -> SimulatedJudge:
    """The ``judge`` role of the simulated backend (:mod:`pilot.backends`); it needs no CLI, study, upstream or time
    limit."""
    return SimulatedJudge()
