"""Load and validate the preregistered protocol (``protocol/``).

The protocol is data: ``study.yml`` (every constant the design fixes),
``arms/arms.yml`` with each arm's documentation, and ``amendments.csv``. A
malformed file is refused with :class:`ProtocolError`, whose message names
the file, the field and the reason.
"""

from __future__ import annotations

import csv
import datetime as _dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from pilot import judge_providers, paths
from pilot.protocol import request_policy
from pilot.protocol.request_policy import PolicyError, RequestPolicy


class ProtocolError(ValueError):
    """A protocol file is missing or malformed."""

    def __init__(self, path: Path | str, field: str, reason: str) -> None:
        self.path = Path(path)
        self.field = field
        self.reason = reason
        super().__init__(f"{paths.shown(self.path)}: field '{field}': {reason}")


def read_yaml(path: Path, *, text_scalars: bool = False) -> Any:
    """Parse a YAML file, turning every failure into a ProtocolError.

    ``text_scalars`` keeps every scalar as its text (for exact decimals, which
    must never pass through a float).
    """
    if not path.is_file():
        raise ProtocolError(path, "<file>", "file not found")
    try:
        text = path.read_text(encoding="utf-8")
        return yaml.load(text, Loader=yaml.BaseLoader) if text_scalars else yaml.safe_load(text)
    except UnicodeDecodeError as exc:
        raise ProtocolError(path, "<file>", f"not valid UTF-8 ({exc.reason})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ProtocolError(path, "<file>", f"not valid YAML{where}: {exc}") from exc


def validate(data: Any, schema: dict[str, Any], path: Path) -> None:
    """Validate ``data`` against a JSON schema; the first error becomes a ProtocolError."""
    import jsonschema  # loaded when a file is first validated, not by `pilot --help`

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "<root>"
        raise ProtocolError(path, where, err.message)


# --------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------

ARM_ID = r"^A[0-9]+$"
SCENARIO_ID = r"^[A-Z]+-[0-9]{2}$"
SET_NAME = r"^[a-z][a-z0-9-]{0,30}$"
HEADER_NAME = r"^[a-z0-9][a-z0-9-]{0,79}$"
CONTRAST_NAME = r"^[a-z][a-z0-9-]{0,40}$"
BETA_NAME = r"^[a-z0-9][a-z0-9.-]{0,79}$"
_pos = {"type": "number", "exclusiveMinimum": 0}
_nonneg = {"type": "number", "minimum": 0}
_posint = {"type": "integer", "minimum": 1}
_prob = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
_str = {"type": "string", "minLength": 1}


def object_schema(props: dict[str, Any], required: Iterable[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props if required is None else required),
        "additionalProperties": False,
    }


def _grid(lo: dict[str, Any] = _nonneg) -> dict[str, Any]:
    return object_schema({"start": lo, "stop": lo, "step": _pos})


#: A preregistered contrast: its name and its two arms, treated then control.
_CONTRAST = object_schema(
    {
        "name": {"type": "string", "pattern": CONTRAST_NAME},
        "arms": {"type": "array", "items": {"type": "string", "pattern": ARM_ID}, "minItems": 2, "maxItems": 2},
    }
)
#: The hypotheses that test a contrast, and which kind each must name: H1 is read on the primary contrast's own p,
#: H2 and H3 on a Holm-adjusted p, which only a secondary contrast has.
CONTRAST_HYPOTHESES = {"H1": "primary", "H2": "secondary", "H3": "secondary"}


STUDY_SCHEMA: dict[str, Any] = object_schema(
    {
        "study": object_schema({"title": _str, "short_name": _str, "protocol_version": _str}),
        "worker": object_schema({"model": _str, "effort": _str, "user_prompt": _str}),
        "cli": object_schema(
            {
                "package": _str,
                "package_version": _str,
                "version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
                "bare": {"type": "boolean"},
                "permission_prompts": {"enum": ["none", "host"]},
                "output_format": {"const": "stream-json"},
                "max_turns": _posint,
                "max_output_tokens": _posint,
            }
        ),
        "sandbox": object_schema(
            {
                "user_prefix": {"type": "string", "pattern": r"^[a-z][a-z0-9-]{0,20}$"},
                "first_uid": {"type": "integer", "minimum": 1000, "maximum": 4294967000},
                "slots": {"type": "integer", "minimum": 1, "maximum": 256},
                "renderer": object_schema(
                    {
                        "user": {"type": "string", "pattern": r"^[a-z][a-z0-9-]{0,30}$"},
                        "uid": {"type": "integer", "minimum": 1000, "maximum": 4294967000},
                    }
                ),
                "limits": object_schema(
                    {
                        "memory_mb": {"type": "integer", "minimum": 64},
                        "processes": {"type": "integer", "minimum": 16},
                        "cpu_cores": _pos,
                        "workspace_mb": {"type": "integer", "minimum": 1},
                        "tmp_mb": {"type": "integer", "minimum": 1},
                        "stream_line_kb": {"type": "integer", "minimum": 64},
                        "transcript_mb": {"type": "integer", "minimum": 1},
                    }
                ),
            }
        ),
        "model_proxy": object_schema(
            {
                "forwarded_headers": {
                    "type": "array",
                    "items": {"type": "string", "pattern": HEADER_NAME},
                    "minItems": 1,
                    "uniqueItems": True,
                },
                "api_versions": {
                    "type": "array",
                    "items": {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
                    "minItems": 1,
                    "uniqueItems": True,
                },
                "betas": {"type": "array", "items": {"type": "string", "pattern": BETA_NAME}, "uniqueItems": True},
            }
        ),
        "transfer": object_schema({"max_package_mb": _posint}),
        "caps": object_schema(
            {
                "global": object_schema({"usd": _pos, "wall_s": _pos}),
                "scenarios": {
                    "type": "object",
                    "propertyNames": {"pattern": SCENARIO_ID},
                    "additionalProperties": object_schema({"usd": _pos, "wall_s": _pos}, required=[]),
                },
            }
        ),
        "envelope": object_schema({"usd": _pos}),
        "design": object_schema(
            {
                "arms": {
                    "type": "array",
                    "items": {"type": "string", "pattern": ARM_ID},
                    "minItems": 2,
                    "uniqueItems": True,
                },
                "n_scenarios": _posint,
                "scenario_set": {"type": "string", "pattern": SET_NAME},
                "pilot_repeats": _posint,
                "assignment_seed": {"type": "integer", "minimum": 0},
            }
        ),
        "scenario_sets": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": SET_NAME},
            "additionalProperties": {
                "type": "array",
                "items": {"type": "string", "pattern": SCENARIO_ID},
                "minItems": 1,
                "uniqueItems": True,
            },
        },
        "judges": object_schema(
            {
                "panel": {
                    "type": "array",
                    "minItems": 1,
                    "items": object_schema(
                        {
                            "id": {"type": "string", "pattern": r"^J[0-9]+$"},
                            # provider/model: the judge provider (pilot.judge_providers) and the model it runs.
                            "model": {"type": "string", "pattern": judge_providers.MEMBER_PATTERN},
                            "draw": _posint,
                        }
                    ),
                },
                "reserve_usd_per_run": _nonneg,
            }
        ),
        "outcomes": object_schema(
            {
                "q": {"type": "number", "minimum": 0, "maximum": 100},
                "q_grid": {"type": "array", "minItems": 1, "items": {"type": "number", "minimum": 0, "maximum": 100}},
                "human_minutes_per_question": _nonneg,
                "intervention_minutes": _nonneg,
            }
        ),
        "inference": object_schema(
            {
                "alpha": _prob,
                "bootstrap_resamples": _posint,
                "permutations": _posint,
                "primary_contrast": _CONTRAST,
                "secondary_contrasts": {"type": "array", "items": _CONTRAST},
                "secondary_adjustment": {"enum": ["holm", "bonferroni", "none"]},
            }
        ),
        "frontier": object_schema({"budget_usd": _grid(_pos), "human_minutes": _grid()}),
        "scale_rule": object_schema(
            {
                "cost_inflation": {"type": "number", "minimum": 1},
                "third_repeat": object_schema({"runs": _posint, "reserve_usd": _nonneg}),
                "sensitivity": object_schema({"runs": _posint, "reserve_usd": _nonneg}),
                "recorded_pilot_mean_cost_usd": _pos,
                "deferred_scenarios": _posint,
            }
        ),
        "hypotheses": object_schema(
            {
                "contrasts": object_schema(
                    {h: {"type": "string", "pattern": CONTRAST_NAME} for h in CONTRAST_HYPOTHESES}
                ),
                "ari_min": _prob,
                "violation_rate_max": _prob,
            }
        ),
        "human_wave": object_schema(
            {
                "participants_per_scenario_per_condition": _posint,
                "conditions": {"type": "array", "items": _str, "minItems": 1},
            }
        ),
        "sensitivity_models": object_schema(
            {
                "arm": {"type": "string", "pattern": ARM_ID},
                "models": {"type": "array", "items": _str, "minItems": 1, "uniqueItems": True},
                "repeats": _posint,
            }
        ),
        "power": object_schema(
            {
                "scenario_sd_logit": _nonneg,
                "baseline": _prob,
                "alpha": _prob,
                "J": {"type": "array", "items": {"type": "integer", "minimum": 2}, "minItems": 1},
                "R": {"type": "array", "items": _posint, "minItems": 1},
                "delta": {"type": "array", "items": _prob, "minItems": 1},
                "simulations": _posint,
                "seed": {"type": "integer", "minimum": 0},
                "reported": {
                    "type": "array",
                    "items": object_schema(
                        {
                            "J": {"type": "integer", "minimum": 2},
                            "R": _posint,
                            "delta": _prob,
                            "power": {"type": "number", "minimum": 0, "maximum": 1},
                        }
                    ),
                },
            }
        ),
    }
)

#: Node capabilities an arm may require (``requires``): what :mod:`pilot.nodes` detects on a host.
CAPABILITIES = ["macos", "linux", "libreoffice", "chromium", "portal"]
#: A CLI tool's name (``--tools``) and a feature's.
TOOL_NAME = r"^[A-Z][A-Za-z0-9]{0,63}$"
FEATURE_NAME = r"^[a-z][a-z0-9_]{0,63}$"

_BOUND = {
    "oneOf": [
        {"enum": [request_policy.BODY, request_policy.CONTEXT]},
        object_schema({request_policy.ALLOWANCE: {"type": "integer", "minimum": 1}}),
    ]
}
_BLOCKS = {"type": "object", "propertyNames": {"pattern": request_policy.BLOCK_KIND}, "additionalProperties": _BOUND}
_KINDS = {
    "type": "array",
    "items": {"type": "string", "pattern": request_policy.BLOCK_KIND},
    "minItems": 1,
    "uniqueItems": True,
}
#: ``request_policy`` of arms.yml: what every arm's requests may carry through the model proxy.
REQUEST_POLICY_SCHEMA: dict[str, Any] = object_schema(
    {
        "blocks": {**_BLOCKS, "minProperties": 1},
        "system_blocks": _KINDS,
        "sources": {
            "type": "object",
            "propertyNames": {"pattern": request_policy.BLOCK_KIND},
            "additionalProperties": _KINDS,
        },
    }
)
#: An arm's own ``proxy``: block kinds and server tools it adds to the common policy.
ARM_PROXY_SCHEMA: dict[str, Any] = object_schema(
    {
        "blocks": _BLOCKS,
        "server_tools": {
            "type": "object",
            "propertyNames": {"pattern": request_policy.SERVER_TOOL_TYPE},
            "additionalProperties": object_schema(
                {
                    "name": {"type": "string", "pattern": r"^[a-z][a-z0-9_]{0,63}$"},
                    "usage": {"type": "string", "pattern": request_policy.USAGE_COUNTER},
                    "max_uses": {"type": "integer", "minimum": 1, "maximum": 100},
                    "per_use": _BOUND,
                }
            ),
        },
    },
    required=[],
)

#: arms.yml as a whole: the vocabularies its arms are written in, the common request policy, and the arms
#: (each checked against the vocabularies by :func:`arm_schema`).
ARMS_SCHEMA: dict[str, Any] = object_schema(
    {
        "tools": {
            "type": "array",
            "items": {"type": "string", "pattern": TOOL_NAME},
            "minItems": 1,
            "uniqueItems": True,
        },
        "features": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": FEATURE_NAME},
            "additionalProperties": {"type": ["string", "null"], "minLength": 1},
        },
        "request_policy": REQUEST_POLICY_SCHEMA,
        "arms": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": ARM_ID},
            "additionalProperties": {"type": "object"},
        },
    }
)


def arm_schema(tools: Iterable[str], features: Iterable[str]) -> dict[str, Any]:
    """One arm of arms.yml, written in the file's vocabularies: its tools among ``tools``, every feature said."""
    props = {
        "name": _str,
        "access_rank": {"type": "integer", "minimum": 0},
        "doc": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+\.md$"},
        "tools": {"type": "array", "items": {"enum": list(tools)}, "minItems": 1, "uniqueItems": True},
        "denied_families": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^[A-Za-z0-9_.+-]+$"},
            "uniqueItems": True,
        },
        "features": object_schema({f: {"type": "boolean"} for f in features}),
        "recovery_resumes": {"type": "integer", "minimum": 0, "maximum": 1},
        "requires": {"type": "array", "items": {"enum": CAPABILITIES}, "uniqueItems": True},
        "proxy": ARM_PROXY_SCHEMA,
    }
    return object_schema(props, required=[k for k in props if k != "proxy"])


AMENDMENT_COLUMNS = ["id", "date", "stage", "title", "content"]


# --------------------------------------------------------------------------
# Typed views
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Caps:
    """Spending cap and wall limit of one run."""

    usd: float
    wall_s: float


@dataclass(frozen=True)
class Contrast:
    """A preregistered contrast of acceptance, treated minus control, under the name ``study.yml`` gives it."""

    name: str
    treated: str
    control: str
    primary: bool

    @property
    def arms(self) -> tuple[str, str]:
        return (self.treated, self.control)


@dataclass(frozen=True)
class Arm:
    """One treatment arm, as read from ``protocol/arms``."""

    id: str
    name: str
    #: The arm's place on the scale of computer access (``access_rank`` in arms.yml): H5's trend is read along it.
    access_rank: int
    doc_path: Path
    tools: tuple[str, ...]
    denied_families: tuple[str, ...]
    features: dict[str, bool]
    recovery_resumes: int
    requires: tuple[str, ...]
    #: What the model proxy lets this arm's requests carry: arms.yml's ``request_policy`` with the arm's ``proxy``.
    request_policy: RequestPolicy = field(repr=False, compare=False)

    @property
    def documentation(self) -> str:
        return self.doc_path.read_text(encoding="utf-8")

    @property
    def has_shell(self) -> bool:
        return "Bash" in self.tools

    def feature(self, name: str) -> bool:
        """Whether the arm has feature ``name``; a name arms.yml's ``features`` does not declare is an error."""
        try:
            return bool(self.features[name])
        except KeyError:
            raise KeyError(
                f"feature {name!r} is not declared in arms.yml's features ({', '.join(self.features)})"
            ) from None


@dataclass(frozen=True)
class ArmVocabulary:
    """The words arms.yml's arms are written in: its CLI tools and its features (each with the words the design's
    arms table shows for it, or None when the table shows nothing)."""

    tools: tuple[str, ...]
    features: dict[str, str | None]


@dataclass(frozen=True)
class Study:
    """The validated ``study.yml`` with typed accessors for what the code uses."""

    path: Path
    raw: dict[str, Any] = field(repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    @property
    def arms(self) -> list[str]:
        return list(self.raw["design"]["arms"])

    @property
    def pilot_repeats(self) -> int:
        return int(self.raw["design"]["pilot_repeats"])

    @property
    def assignment_seed(self) -> int:
        return int(self.raw["design"]["assignment_seed"])

    @property
    def envelope_usd(self) -> float:
        return float(self.raw["envelope"]["usd"])

    @property
    def q(self) -> float:
        return float(self.raw["outcomes"]["q"])

    @property
    def judge_panel(self) -> list[dict[str, Any]]:
        """The panel's members: ``id``, ``provider`` and ``model`` (study.yml's ``provider/model`` split), ``draw``."""
        members = []
        for j in self.raw["judges"]["panel"]:
            provider, model = judge_providers.split(j["model"])
            members.append({**j, "provider": provider, "model": model})
        return members

    @property
    def transfer_limit_bytes(self) -> int:
        """The most an attempt's package from a dask worker may weigh (``transfer.max_package_mb``, in MiB)."""
        return int(self.raw["transfer"]["max_package_mb"]) * 1024 * 1024

    @property
    def scenario_sets(self) -> dict[str, list[str]]:
        """Every named scenario set (``scenario_sets``), in the order study.yml lists them."""
        return {name: list(ids) for name, ids in self.raw["scenario_sets"].items()}

    @property
    def default_scenario_set(self) -> str:
        """The set a study runs when none is named: the preregistered design's (``design.scenario_set``)."""
        return str(self.raw["design"]["scenario_set"])

    def scenario_set(self, name: str | None = None) -> list[str]:
        """The scenario ids of set ``name`` (the default set when None), sorted; an unknown name is refused."""
        name = self.default_scenario_set if name is None else name
        if name not in self.raw["scenario_sets"]:
            raise ProtocolError(
                self.path, "scenario_sets", f"no scenario set {name!r} (sets: {', '.join(self.raw['scenario_sets'])})"
            )
        return sorted(self.raw["scenario_sets"][name])

    def set_of(self, scenario_ids: Iterable[str]) -> str | None:
        """The name of the set holding exactly ``scenario_ids``, or None (a study of a hand-picked list)."""
        wanted = sorted(scenario_ids)
        return next((name for name, ids in self.raw["scenario_sets"].items() if sorted(ids) == wanted), None)

    @property
    def global_caps(self) -> Caps:
        g = self.raw["caps"]["global"]
        return Caps(float(g["usd"]), float(g["wall_s"]))

    def caps_for(self, scenario_id: str) -> Caps:
        """The larger of the global caps and the scenario author's own (A-006)."""
        g = self.global_caps
        own = self.raw["caps"]["scenarios"].get(scenario_id, {})
        return Caps(max(g.usd, float(own.get("usd", 0.0))), max(g.wall_s, float(own.get("wall_s", 0.0))))

    def grid(self, name: str) -> list[float]:
        """A ``frontier`` grid (``budget_usd`` or ``human_minutes``) as a list, ends included."""
        g = self.raw["frontier"][name]
        n = int(round((g["stop"] - g["start"]) / g["step"]))
        return [round(g["start"] + i * g["step"], 10) for i in range(n + 1)]

    @property
    def named_contrasts(self) -> list[Contrast]:
        """Every preregistered contrast, the primary first, then the secondary ones in their order."""
        inf = self.raw["inference"]
        return [
            Contrast(c["name"], c["arms"][0], c["arms"][1], i == 0)
            for i, c in enumerate([inf["primary_contrast"], *inf["secondary_contrasts"]])
        ]

    @property
    def contrasts(self) -> list[tuple[str, str]]:
        """The contrasts' arm pairs (treated, control), the primary first."""
        return [c.arms for c in self.named_contrasts]

    @property
    def primary_contrast(self) -> Contrast:
        return self.named_contrasts[0]

    def contrast(self, name: str) -> Contrast:
        """The contrast named ``name`` under ``inference``; an unknown name is refused."""
        found = {c.name: c for c in self.named_contrasts}
        if name not in found:
            raise ProtocolError(self.path, "inference", f"no contrast named {name!r} (contrasts: {', '.join(found)})")
        return found[name]

    def hypothesis_contrast(self, hypothesis: str) -> Contrast:
        """The contrast a premium hypothesis (H1, H2, H3) tests, by the name ``hypotheses.contrasts`` gives it."""
        return self.contrast(self.raw["hypotheses"]["contrasts"][hypothesis])


def _check_study_semantics(data: dict[str, Any], path: Path) -> None:
    arms = data["design"]["arms"]
    _check_contrasts(data, path)
    if data["sensitivity_models"]["arm"] not in arms:
        raise ProtocolError(
            path, "sensitivity_models.arm", f"arm {data['sensitivity_models']['arm']!r} is not in design.arms"
        )
    if data["outcomes"]["q"] not in data["outcomes"]["q_grid"]:
        raise ProtocolError(path, "outcomes.q", "the primary threshold must be one of outcomes.q_grid")
    ids = [j["id"] for j in data["judges"]["panel"]]
    if len(set(ids)) != len(ids):
        raise ProtocolError(path, "judges.panel", f"judge ids must be unique, got {ids}")
    for i, member in enumerate(data["judges"]["panel"]):
        name = judge_providers.split(member["model"])[0]
        provider = judge_providers.REGISTRY.get(name)
        if provider is None:
            raise ProtocolError(
                path,
                f"judges.panel.{i}.model",
                f"unknown judge provider {name!r} (the providers: {', '.join(judge_providers.REGISTRY)})",
            )
        if not provider.finding:
            raise ProtocolError(
                path,
                f"judges.panel.{i}.model",
                f"{name!r} is a stand-in ({provider.label}): a dry run's backend chooses it, the study never names it",
            )
    for name in ("budget_usd", "human_minutes"):
        g = data["frontier"][name]
        if g["stop"] < g["start"]:
            raise ProtocolError(path, f"frontier.{name}.stop", "must not be below start")
    sets = data["scenario_sets"]
    default = data["design"]["scenario_set"]
    if default not in sets:
        raise ProtocolError(
            path, "design.scenario_set", f"names {default!r}, which is not in scenario_sets ({', '.join(sets)})"
        )
    if len(sets[default]) != data["design"]["n_scenarios"]:
        raise ProtocolError(
            path,
            f"scenario_sets.{default}",
            f"holds {len(sets[default])} scenarios but design.n_scenarios says {data['design']['n_scenarios']}",
        )
    _check_model_proxy(data["model_proxy"], path)
    if data["caps"]["scenarios"]:
        for sid, own in data["caps"]["scenarios"].items():
            if not own:
                raise ProtocolError(path, f"caps.scenarios.{sid}", "names neither usd nor wall_s")
    _check_renderer(data["sandbox"], path)


def _check_contrasts(data: dict[str, Any], path: Path) -> None:
    """Each contrast compares two arms of the design under a name of its own; each premium hypothesis names one of the
    kind it is read on (:data:`CONTRAST_HYPOTHESES`)."""
    arms, inf = data["design"]["arms"], data["inference"]
    fields = ["inference.primary_contrast"] + [
        f"inference.secondary_contrasts.{i}" for i in range(len(inf["secondary_contrasts"]))
    ]
    named: dict[str, str] = {}
    for where, c in zip(fields, [inf["primary_contrast"], *inf["secondary_contrasts"]], strict=True):
        for a in c["arms"]:
            if a not in arms:
                raise ProtocolError(path, f"{where}.arms", f"arm {a!r} is not in design.arms {arms}")
        if c["arms"][0] == c["arms"][1]:
            raise ProtocolError(path, f"{where}.arms", "a contrast needs two different arms")
        if c["name"] in named:
            raise ProtocolError(path, f"{where}.name", f"{c['name']!r} already names {named[c['name']]}")
        named[c["name"]] = where
    primary = inf["primary_contrast"]["name"]
    for hyp, kind in CONTRAST_HYPOTHESES.items():
        name = data["hypotheses"]["contrasts"][hyp]
        where = f"hypotheses.contrasts.{hyp}"
        if name not in named:
            raise ProtocolError(
                path, where, f"names {name!r}, which is no contrast under inference ({', '.join(named)})"
            )
        if kind == "primary" and name != primary:
            raise ProtocolError(
                path, where, f"{hyp} is read on the primary contrast's own p, but {name!r} is a secondary contrast"
            )
        if kind == "secondary" and name == primary:
            raise ProtocolError(
                path, where, f"{hyp} is read on a Holm-adjusted p, which the primary contrast {name!r} does not have"
            )


def _check_renderer(sandbox: dict[str, Any], path: Path) -> None:
    """The renderer is an identity of its own: neither a worker slot's uid nor a worker's name."""
    r, first, slots = sandbox["renderer"], sandbox["first_uid"], sandbox["slots"]
    if first <= r["uid"] < first + slots:
        raise ProtocolError(
            path, "sandbox.renderer.uid", f"{r['uid']} is a worker slot's uid ({first} to {first + slots - 1})"
        )
    if r["user"].startswith(sandbox["user_prefix"]) and r["user"][len(sandbox["user_prefix"]) :].isdigit():
        raise ProtocolError(path, "sandbox.renderer.user", f"{r['user']!r} is a worker slot's name")


#: Headers the model proxy sets itself, or that belong to one connection: never passed on from the client.
PROXY_OWN_HEADERS = frozenset(
    {
        "accept-encoding",
        "authorization",
        "connection",
        "content-length",
        "expect",
        "host",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "x-api-key",
        "x-pilot-run-id",
    }
)


def _check_model_proxy(section: dict[str, Any], path: Path) -> None:
    """The header lists must name headers the proxy may pass on, and pass on the two it checks by value."""
    headers = section["forwarded_headers"]
    own = sorted(set(headers) & PROXY_OWN_HEADERS)
    if own:
        raise ProtocolError(
            path,
            "model_proxy.forwarded_headers",
            f"{own[0]!r} is set by the proxy itself or belongs to one connection; it cannot be passed on",
        )
    for name, values in (("anthropic-version", "api_versions"), ("anthropic-beta", "betas")):
        if section[values] and name not in headers:
            raise ProtocolError(
                path,
                "model_proxy.forwarded_headers",
                f"model_proxy.{values} lists values of {name}, which is not among the forwarded headers",
            )


def load_study(path: Path | None = None) -> Study:
    """Read and validate ``protocol/study.yml``."""
    path = Path(path) if path is not None else paths.STUDY_FILE
    data = read_yaml(path)
    validate(data, STUDY_SCHEMA, path)
    _check_study_semantics(data, path)
    return Study(path=path, raw=data)


def _read_arms_file(path: Path) -> tuple[dict[str, Any], ArmVocabulary]:
    """arms.yml parsed and checked as a whole (:data:`ARMS_SCHEMA`), and its vocabularies."""
    data = read_yaml(path)
    validate(data, ARMS_SCHEMA, path)
    return data, ArmVocabulary(tools=tuple(data["tools"]), features=dict(data["features"]))


_VOCABULARIES: dict[tuple[str, int, int], ArmVocabulary] = {}


def arm_vocabulary(path: Path | None = None) -> ArmVocabulary:
    """The vocabularies of arms.yml (``tools`` and ``features``), read once per version of the file."""
    path = Path(path) if path is not None else paths.ARMS_FILE
    if not path.is_file():
        raise ProtocolError(path, "<file>", "file not found")
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _VOCABULARIES:
        _VOCABULARIES[key] = _read_arms_file(path)[1]
    return _VOCABULARIES[key]


def common_request_policy(path: Path | None = None) -> RequestPolicy:
    """arms.yml's ``request_policy``: what every arm's requests may carry through the model proxy."""
    path = Path(path) if path is not None else paths.ARMS_FILE
    data, _ = _read_arms_file(path)
    return _common_policy(data, path)


def _common_policy(data: dict[str, Any], path: Path) -> RequestPolicy:
    try:
        return RequestPolicy.common(data["request_policy"])
    except PolicyError as exc:
        raise ProtocolError(path, f"request_policy.{exc.field}", exc.reason) from None


def load_arms(path: Path | None = None, study: Study | None = None) -> dict[str, Arm]:
    """Read and validate ``protocol/arms/arms.yml`` and check each arm's documentation exists."""
    path = Path(path) if path is not None else paths.ARMS_FILE
    data, vocabulary = _read_arms_file(path)
    props = ARMS_SCHEMA["properties"]
    each = arm_schema(vocabulary.tools, vocabulary.features)
    validate(
        data, {**ARMS_SCHEMA, "properties": {**props, "arms": {**props["arms"], "additionalProperties": each}}}, path
    )
    common = _common_policy(data, path)
    arms: dict[str, Arm] = {}
    for arm_id, spec in data["arms"].items():
        doc = path.parent / spec["doc"]
        if not doc.is_file():
            raise ProtocolError(
                path, f"arms.{arm_id}.doc", f"documentation file {spec['doc']} not found beside arms.yml"
            )
        if not doc.read_text(encoding="utf-8").strip():
            raise ProtocolError(doc, "<file>", "arm documentation is empty")
        if spec["denied_families"] and "Bash" not in spec["tools"]:
            raise ProtocolError(
                path, f"arms.{arm_id}.denied_families", "denies shell programs but the arm has no Bash tool"
            )
        if spec["features"].get("self_check", False) != (spec["recovery_resumes"] > 0):
            raise ProtocolError(
                path,
                f"arms.{arm_id}.recovery_resumes",
                "a recovery resume goes with the self-check feature and only with it",
            )
        try:
            policy = common.widened(arm_id, spec.get("proxy"))
        except PolicyError as exc:
            raise ProtocolError(path, f"arms.{arm_id}.proxy.{exc.field}", exc.reason) from None
        arms[arm_id] = Arm(
            id=arm_id,
            name=spec["name"],
            access_rank=int(spec["access_rank"]),
            doc_path=doc,
            tools=tuple(spec["tools"]),
            denied_families=tuple(spec["denied_families"]),
            features=dict(spec["features"]),
            recovery_resumes=int(spec["recovery_resumes"]),
            requires=tuple(spec["requires"]),
            request_policy=policy,
        )
    policy_md = path.parent / "policy.md"
    if not policy_md.is_file() or not policy_md.read_text(encoding="utf-8").strip():
        raise ProtocolError(policy_md, "<file>", "the common policy is missing or empty")
    study = study if study is not None else (load_study() if path == paths.ARMS_FILE else None)
    if study is not None:
        missing = [a for a in study.arms if a not in arms]
        if missing:
            raise ProtocolError(path, "arms", f"design.arms names {missing} but arms.yml does not define them")
        if len({arms[a].access_rank for a in study.arms}) < 2:
            raise ProtocolError(
                path,
                f"arms.{study.arms[0]}.access_rank",
                "every arm of design.arms has the same access rank: H5's trend along access needs two ranks",
            )
    return arms


def common_policy(arms_dir: Path | None = None) -> str:
    """The policy text shared by every arm."""
    return ((arms_dir or paths.ARMS_DIR) / "policy.md").read_text(encoding="utf-8")


def arm_instructions(arm: Arm) -> str:
    """The common policy with the arm's documentation appended, as the worker reads it."""
    return common_policy(arm.doc_path.parent).rstrip() + "\n\n" + arm.documentation.strip() + "\n"


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_AMEND_ID = re.compile(r"^A-\d{3}$")
# The stages an amendment can be made at, in the order they happen. The first
# two belong to the recorded study (its pilot is amendment A-009's); the last
# two to a rerun of the protocol by this repository, which comes after it.
AMENDMENT_STAGES = ["before pilot", "after pilot", "before rerun pilot", "after rerun pilot"]


def load_amendments(path: Path | None = None) -> list[dict[str, str]]:
    """Read ``protocol/amendments.csv``: one row per amendment with id, date, stage, title, content.

    Dates must be real calendar dates, and along the ids neither the date nor
    the stage (``AMENDMENT_STAGES``) may go back.
    """
    path = Path(path) if path is not None else paths.AMENDMENTS_FILE
    if not path.is_file():
        raise ProtocolError(path, "<file>", "file not found")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        if header != AMENDMENT_COLUMNS:
            raise ProtocolError(path, "<header>", f"columns must be {AMENDMENT_COLUMNS}, got {header}")
        rows = list(reader)
    seen: set[str] = set()
    previous: tuple[str, _dt.date, int] | None = None
    for n, row in enumerate(rows, start=2):
        if None in row or any(v is None for v in row.values()):
            raise ProtocolError(path, f"line {n}", "wrong number of fields")
        if not _AMEND_ID.match(row["id"]):
            raise ProtocolError(path, f"line {n}.id", f"{row['id']!r} is not of the form A-NNN")
        if row["id"] in seen:
            raise ProtocolError(path, f"line {n}.id", f"duplicate amendment {row['id']}")
        seen.add(row["id"])
        if not _DATE.match(row["date"]):
            raise ProtocolError(path, f"line {n}.date", f"{row['date']!r} is not a YYYY-MM-DD date")
        try:
            date = _dt.date.fromisoformat(row["date"])
        except ValueError as exc:
            raise ProtocolError(path, f"line {n}.date", f"{row['date']!r} is not a calendar date ({exc})") from None
        for col in ("stage", "title", "content"):
            if not row[col].strip():
                raise ProtocolError(path, f"line {n}.{col}", "must not be empty")
        if row["stage"] not in AMENDMENT_STAGES:
            raise ProtocolError(path, f"line {n}.stage", f"{row['stage']!r} is not one of {AMENDMENT_STAGES}")
        rank = AMENDMENT_STAGES.index(row["stage"])
        if previous is not None:
            prev_id, prev_date, prev_rank = previous
            if row["id"] < prev_id:
                raise ProtocolError(
                    path, f"line {n}.id", f"{row['id']} comes after {prev_id}; list amendments in id order"
                )
            if date < prev_date:
                raise ProtocolError(
                    path,
                    f"line {n}.date",
                    f"{row['id']} is dated {date} but the earlier amendment {prev_id} is dated {prev_date}",
                )
            if rank < prev_rank:
                raise ProtocolError(
                    path,
                    f"line {n}.stage",
                    (
                        f"{row['id']} is made {row['stage']!r} but the earlier amendment {prev_id} was made "
                        f"{AMENDMENT_STAGES[prev_rank]!r}"
                    ),
                )
        previous = (row["id"], date, rank)
    return rows


@lru_cache(maxsize=1)
def study() -> Study:
    """The repository's validated study protocol (cached)."""
    return load_study()


@lru_cache(maxsize=1)
def arms() -> dict[str, Arm]:
    """The repository's validated arms (cached)."""
    return load_arms(study=study())
