"""Load and validate one scenario bundle (``protocol/scenarios/<ID>/``).

A bundle is data: ``brief.md``, ``inputs/``, ``scenario.yml``, ``oracle.yml``
and ``rubric.yml``. Each file is validated on load; a malformed one is
refused with a :class:`~pilot.protocol.ProtocolError` naming the file, the
field and the reason. The caps a bundle states must equal the caps the study
protocol gives it (A-006), so the two can never drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pilot import paths
from pilot.protocol import design as protocol
from pilot.protocol.design import Caps, ProtocolError, read_yaml, validate

DELIVERABLE_KINDS = ["xlsx", "docx", "pdf", "csv", "completion_record", "pptx"]
COMPLETION_RECORD = "completion_record.json"

# Parameters each criterion kind takes besides id, kind, required, file.
CRITERION_PARAMS: dict[str, dict[str, dict[str, Any]]] = {
    "present": {},
    "well_formed": {},
    "formulas": {"min_count": {"type": "integer", "minimum": 1}, "sheet": {"type": "string"}},
    "no_error_values": {},
    "min_words": {},
    "sections": {},
    "completion_record": {},
    "labelled_value": {
        "label": {"type": "string", "minLength": 1},
        "expected": {"type": "number"},
        "tolerance": {"type": "number", "minimum": 0},
        "sheet": {"type": "string"},
        "column": {"type": "string"},
        "also_accept_percent": {"type": "boolean"},
        "absolute": {"type": "boolean"},
    },
    "workbook_contains": {"patterns": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}},
    "text_contains": {"patterns": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}},
    "text_number": {
        "expected": {"type": "number"},
        "tolerance": {"type": "number", "minimum": 0},
        "near": {"type": "string", "minLength": 1},
    },
    "csv_columns": {"columns": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "csv_keys": {
        "key": {"type": "string"},
        "expected": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "exact": {"type": "boolean"},
    },
    "csv_value": {
        "key": {"type": "string"},
        "key_value": {"type": "string"},
        "column": {"type": "string"},
        "expected": {"type": "number"},
        "tolerance": {"type": "number", "minimum": 0},
    },
    # A decision the brief asks for: the option chosen where the brief puts it (a document section,
    # a labelled workbook line, or a CSV row's column), among options named by regex.
    # A set-valued decision ("name any clinic that misses the target") has a list as ``expected``
    # and says how its clauses are read: the topic, the verbs that put an option inside the set
    # and outside it (regexes), and the property in words for the reasons.
    "decision": {
        "expected": {
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
            ]
        },
        "options": {"type": "object", "minProperties": 2, "additionalProperties": {"type": "string", "minLength": 1}},
        "section": {
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
            ]
        },
        "topic": {"type": "string", "minLength": 1},
        "property_verbs": {"type": "string", "minLength": 1},
        "complement_verbs": {"type": "string", "minLength": 1},
        "property": {"type": "string", "minLength": 1},
        "complement": {"type": "string", "minLength": 1},
        "plans": {"type": "string", "minLength": 1},
        "state_all": {"type": "boolean"},
        "label": {"type": "string", "minLength": 1},
        "sheet": {"type": "string"},
        "key": {"type": "string"},
        "key_value": {"type": "string"},
        "column": {"type": "string"},
    },
    # A scale or vocabulary the brief fixes for a CSV column.
    "closed_scale": {
        "column": {"type": "string", "minLength": 1},
        "values": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
    },
    # Bounds the brief fixes for several labelled lines of a workbook (MKT-01: every channel's Q4 budget
    # between 10 % and 40 % of the budget): one line per label, each value within [minimum, maximum].
    "labelled_bounds": {
        "labels": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "uniqueItems": True},
        "minimum": {"type": "number"},
        "maximum": {"type": "number"},
        "sheet": {"type": "string"},
        "column": {"type": "string"},
    },
}
REQUIRED_PARAMS = {
    "labelled_value": ["label", "expected", "tolerance"],
    "workbook_contains": ["patterns"],
    "text_contains": ["patterns"],
    "text_number": ["expected", "tolerance"],
    "csv_columns": ["columns"],
    "csv_keys": ["key", "expected"],
    "csv_value": ["key", "key_value", "column", "expected", "tolerance"],
    "decision": ["expected", "options"],
    "closed_scale": ["column", "values"],
    "labelled_bounds": ["labels"],
}
# What a set-valued decision must state besides its place.
SET_DECISION_PARAMS = ("topic", "property_verbs", "complement_verbs", "property", "complement")
# What only a set-valued decision may state: the above, and how its findings are read.
SET_DECISION_ONLY = SET_DECISION_PARAMS + ("plans", "state_all")
# Where a decision is read, by deliverable kind: the parameters that must be given.
DECISION_PLACE = {
    "docx": ("section",),
    "pdf": ("section",),
    "pptx": ("section",),
    "xlsx": ("label",),
    "csv": ("key", "key_value", "column"),
}
# Kinds read as a document with headings (a deck's headings are its slide titles, read by pilot.oracle_formats).
DOCUMENT_KINDS = ("docx", "pdf", "pptx")
# Which deliverable kinds a criterion kind applies to.
APPLIES_TO = {
    "formulas": {"xlsx"},
    "no_error_values": {"xlsx"},
    "labelled_value": {"xlsx"},
    "workbook_contains": {"xlsx"},
    "min_words": {"docx", "pdf", "pptx"},
    "sections": {"docx", "pdf", "pptx"},
    "text_contains": {"docx", "pdf", "csv", "pptx"},
    "text_number": {"docx", "pdf", "pptx"},
    "csv_columns": {"csv"},
    "csv_keys": {"csv"},
    "csv_value": {"csv"},
    "decision": {"docx", "pdf", "xlsx", "csv", "pptx"},
    "closed_scale": {"csv"},
    "labelled_bounds": {"xlsx"},
    "completion_record": {"completion_record"},
}

_str = {"type": "string", "minLength": 1}
SCENARIO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "id",
        "title",
        "occupation",
        "designed_depth",
        "professional_minutes",
        "caps",
        "uses_portal",
        "arm_features",
        "generator",
        "deliverables",
    ],
    "properties": {
        "id": {"type": "string", "pattern": protocol.SCENARIO_ID},
        "title": _str,
        "occupation": _str,
        "designed_depth": {"type": "integer", "minimum": 1, "maximum": 5},
        "professional_minutes": {"type": "number", "exclusiveMinimum": 0},
        "caps": {
            "type": "object",
            "additionalProperties": False,
            "required": ["usd", "wall_s"],
            "properties": {
                "usd": {"type": "number", "exclusiveMinimum": 0},
                "wall_s": {"type": "number", "exclusiveMinimum": 0},
            },
        },
        "uses_portal": {"type": "boolean"},
        # Each a feature of arms.yml's vocabulary (checked on load: the vocabulary is data).
        "arm_features": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "generator": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"},
        "deliverables": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "kind"],
                "properties": {
                    "name": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+\.(xlsx|docx|pdf|csv|json|pptx)$"},
                    "kind": {"enum": DELIVERABLE_KINDS},
                    "requires_formulas": {"type": "boolean"},
                    "min_words": {"type": "integer", "minimum": 1},
                    "required_sections": {"type": "array", "items": _str},
                    "required_columns": {"type": "array", "items": _str},
                },
            },
        },
    },
}


def _criteria_file_schema(min_items: int, criterion: dict[str, Any]) -> dict[str, Any]:
    """A file that holds one list, ``criteria``, of at least ``min_items`` entries (oracle.yml and rubric.yml)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["criteria"],
        "properties": {"criteria": {"type": "array", "minItems": min_items, "items": criterion}},
    }


ORACLE_SCHEMA: dict[str, Any] = _criteria_file_schema(
    1,
    {
        "type": "object",
        "required": ["id", "kind", "required", "file"],
        "properties": {
            "id": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"},
            "kind": {"enum": list(CRITERION_PARAMS)},
            "required": {"type": "boolean"},
            "file": {"type": "string", "minLength": 1},
            "description": {"type": "string"},
        },
    },
)
# What the brief's entry for a criterion's file says to ask for what the criterion reads (a regex, read case-blind);
# the words of a text criterion's patterns are the answer, which the brief never states, so they need one.
ORACLE_SCHEMA["properties"]["criteria"]["items"]["properties"]["brief_asks"] = {"type": "string", "minLength": 1}

#: One edit of the gold package that turns it into a trap's fallen package (``traps[].fallen``): a workbook cell typed
#: over (figure, text or formula, or a date), a passage of a document or CSV reworded, or a CSV cell.
FALLEN_EDIT_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["file", "sheet", "cell", "value"],
            "properties": {
                "file": _str,
                "sheet": _str,
                "cell": {"type": "string", "pattern": r"^[A-Z]{1,3}[1-9][0-9]*$"},
                "value": {"type": ["number", "string", "null"]},
            },
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["file", "sheet", "cell", "date"],
            "properties": {
                "file": _str,
                "sheet": _str,
                "cell": {"type": "string", "pattern": r"^[A-Z]{1,3}[1-9][0-9]*$"},
                "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
            },
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["file", "text", "becomes"],
            "properties": {"file": _str, "text": _str, "becomes": {"type": "string"}},
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["file", "key", "key_value", "column", "value"],
            "properties": {"file": _str, "key": _str, "key_value": _str, "column": _str, "value": {"type": "string"}},
        },
    ]
}
#: The deliverable kinds each form of fallen edit applies to.
FALLEN_EDIT_KINDS = {"cell": {"xlsx"}, "text": {"docx", "pdf", "pptx", "csv"}, "csv": {"csv"}}

# The planted traps an oracle names, each with the criteria that catch a run falling into it and the package of a
# worker who falls into it (``fallen``: edits of the gold package; or the generator module's ``solve_fallen``).
# ``pilot scenarios check`` builds that package and proves exactly those criteria fail on it; optional for the
# pilot's ten bundles, whose traps are named in prose and whose fallen packages live in the test suite.
ORACLE_SCHEMA["properties"]["traps"] = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "description", "caught_by"],
        "properties": {
            "id": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"},
            "description": {"type": "string", "minLength": 1},
            "caught_by": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string"}},
            "fallen": {"type": "array", "minItems": 1, "items": FALLEN_EDIT_SCHEMA},
            # Words of brief.md the author confirms may name this trap's answer (each must occur in the brief).
            "brief_names": {"type": "array", "minItems": 1, "uniqueItems": True, "items": _str},
        },
    },
}

RUBRIC_SCHEMA: dict[str, Any] = _criteria_file_schema(
    3,
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "name", "weight", "description", "anchors"],
        "properties": {
            "id": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"},
            "name": _str,
            "weight": {"type": "number", "exclusiveMinimum": 0},
            "description": _str,
            "anchors": {
                "type": "object",
                "additionalProperties": False,
                "required": ["0", "2", "4"],
                "properties": {"0": _str, "2": _str, "4": _str},
            },
        },
    },
)


@dataclass(frozen=True)
class Deliverable:
    """One file the brief asks for."""

    name: str
    kind: str
    requires_formulas: bool = False
    min_words: int | None = None
    required_sections: tuple[str, ...] = ()
    required_columns: tuple[str, ...] = ()

    @property
    def stem(self) -> str:
        return Path(self.name).stem

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "requires_formulas": self.requires_formulas,
            "min_words": self.min_words,
            "required_sections": list(self.required_sections),
            "required_columns": list(self.required_columns),
        }


@dataclass(frozen=True)
class Criterion:
    """One deterministic oracle criterion."""

    id: str
    kind: str
    required: bool
    file: str
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    # The words of the brief's entry for ``file`` that ask for what the criterion reads (a regex; ``brief_asks``).
    brief_asks: str = ""

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


@dataclass(frozen=True)
class FallenEdit:
    """One edit of the gold package towards a trap's fallen package (``traps[].fallen`` of oracle.yml).

    ``form`` is ``cell`` (``sheet``, ``cell``, ``value``: a workbook cell typed over), ``text`` (``text`` reworded as
    ``becomes`` in a document or CSV) or ``csv`` (``key``, ``key_value``, ``column``, ``value``: a CSV cell).
    """

    form: str
    file: str
    params: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


@dataclass(frozen=True)
class Trap:
    """A planted trap: what a careless professional gets wrong, the criteria that catch it, and how the package of
    a worker who falls into it is made from the gold (``fallen``; empty: the generator module's ``solve_fallen``)."""

    id: str
    description: str
    caught_by: tuple[str, ...]
    fallen: tuple[FallenEdit, ...] = ()
    brief_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Oracle:
    path: Path
    criteria: tuple[Criterion, ...]
    traps: tuple[Trap, ...] = ()

    def by_id(self, cid: str) -> Criterion:
        for c in self.criteria:
            if c.id == cid:
                return c
        raise KeyError(cid)


@dataclass(frozen=True)
class RubricCriterion:
    id: str
    name: str
    weight: float
    description: str
    anchors: dict[int, str]


@dataclass(frozen=True)
class Rubric:
    path: Path
    criteria: tuple[RubricCriterion, ...]

    def weights(self) -> dict[str, float]:
        return {c.id: c.weight for c in self.criteria}


@dataclass(frozen=True)
class Scenario:
    """A validated scenario bundle."""

    id: str
    title: str
    occupation: str
    dir: Path
    caps: Caps
    designed_depth: int
    professional_minutes: float
    deliverables: tuple[Deliverable, ...]
    uses_portal: bool
    arm_features: tuple[str, ...]
    generator: str
    oracle: Oracle
    rubric: Rubric

    @property
    def brief_path(self) -> Path:
        return self.dir / "brief.md"

    @property
    def inputs_dir(self) -> Path:
        return self.dir / "inputs"

    @property
    def portal_dir(self) -> Path:
        return self.dir / "portal"

    @property
    def brief(self) -> str:
        return self.brief_path.read_text(encoding="utf-8")

    def deliverable(self, name: str) -> Deliverable:
        for d in self.deliverables:
            if d.name == name:
                return d
        raise KeyError(f"{self.id} has no deliverable {name!r}")

    @property
    def file_deliverables(self) -> tuple[Deliverable, ...]:
        """The deliverables other than the completion record."""
        return tuple(d for d in self.deliverables if d.kind != "completion_record")


def _load_oracle(path: Path, deliverables: dict[str, Deliverable]) -> Oracle:
    data = read_yaml(path)
    validate(data, ORACLE_SCHEMA, path)
    seen: set[str] = set()
    out = []
    for i, raw in enumerate(data["criteria"]):
        where = f"criteria.{i}"
        kind = raw["kind"]
        allowed = set(CRITERION_PARAMS[kind]) | {"id", "kind", "required", "file", "description", "brief_asks"}
        extra = sorted(set(raw) - allowed)
        if extra:
            raise ProtocolError(path, f"{where}.{extra[0]}", f"not a parameter of a {kind} criterion")
        for p in REQUIRED_PARAMS.get(kind, []):
            if p not in raw:
                raise ProtocolError(path, f"{where}.{p}", f"a {kind} criterion needs {p!r}")
        params = {k: v for k, v in raw.items() if k in CRITERION_PARAMS[kind]}
        validate(params, {"type": "object", "properties": CRITERION_PARAMS[kind]}, path)
        if raw["id"] in seen:
            raise ProtocolError(path, f"{where}.id", f"duplicate criterion id {raw['id']!r}")
        seen.add(raw["id"])
        deliv = deliverables.get(raw["file"])
        if deliv is None:
            raise ProtocolError(path, f"{where}.file", f"{raw['file']!r} is not a deliverable of scenario.yml")
        if kind in APPLIES_TO and deliv.kind not in APPLIES_TO[kind]:
            raise ProtocolError(
                path, f"{where}.kind", f"a {kind} criterion does not apply to a {deliv.kind} deliverable"
            )
        if kind == "formulas" and not deliv.requires_formulas:
            raise ProtocolError(path, f"{where}.kind", f"{deliv.name} is not marked requires_formulas in scenario.yml")
        if kind == "min_words" and not deliv.min_words:
            raise ProtocolError(path, f"{where}.kind", f"{deliv.name} states no min_words in scenario.yml")
        if kind == "sections" and not deliv.required_sections:
            raise ProtocolError(path, f"{where}.kind", f"{deliv.name} states no required_sections in scenario.yml")
        if kind == "decision":
            _check_decision(path, where, raw, deliv)
        if kind == "labelled_bounds":
            _check_bounds(path, where, raw)
        if "brief_asks" in raw:
            try:
                re.compile(raw["brief_asks"])
            except re.error as exc:
                raise ProtocolError(path, f"{where}.brief_asks", f"not a valid regular expression ({exc})") from None
        out.append(
            Criterion(
                raw["id"],
                kind,
                bool(raw["required"]),
                raw["file"],
                params,
                raw.get("description", ""),
                raw.get("brief_asks", ""),
            )
        )
    for d in deliverables.values():
        if not any(c.kind == "present" and c.file == d.name for c in out):
            raise ProtocolError(path, "criteria", f"no presence criterion for deliverable {d.name}")
    traps: list[Trap] = []
    for i, raw in enumerate(data.get("traps") or []):
        if raw["id"] in {t.id for t in traps}:
            raise ProtocolError(path, f"traps.{i}.id", f"duplicate trap id {raw['id']!r}")
        for j, cid in enumerate(raw["caught_by"]):
            if cid not in seen:
                raise ProtocolError(path, f"traps.{i}.caught_by.{j}", f"{cid!r} is not a criterion of this oracle")
        fallen = tuple(
            _fallen_edit(path, f"traps.{i}.fallen.{j}", e, deliverables) for j, e in enumerate(raw.get("fallen") or [])
        )
        traps.append(
            Trap(raw["id"], raw["description"], tuple(raw["caught_by"]), fallen, tuple(raw.get("brief_names") or ()))
        )
    return Oracle(path, tuple(out), tuple(traps))


def _fallen_edit(path: Path, where: str, raw: dict[str, Any], deliverables: dict[str, Deliverable]) -> FallenEdit:
    """One ``fallen`` edit, its form read from its fields and its file a deliverable of the kind the form edits."""
    form = "cell" if "cell" in raw else "text" if "text" in raw else "csv"
    deliv = deliverables.get(raw["file"])
    if deliv is None:
        raise ProtocolError(path, f"{where}.file", f"{raw['file']!r} is not a deliverable of scenario.yml")
    if deliv.kind not in FALLEN_EDIT_KINDS[form]:
        raise ProtocolError(
            path,
            f"{where}.file",
            f"a {form} edit applies to a {' or '.join(sorted(FALLEN_EDIT_KINDS[form]))} deliverable, "
            f"not to {deliv.name} ({deliv.kind})",
        )
    return FallenEdit(form, raw["file"], {k: v for k, v in raw.items() if k != "file"})


def _check_decision(path: Path, where: str, raw: dict[str, Any], deliv: Deliverable) -> None:
    """A decision names its place as the deliverable's kind requires, and its expected option is one of its options."""
    for p in DECISION_PLACE[deliv.kind]:
        if p not in raw:
            raise ProtocolError(
                path, f"{where}.{p}", f"a decision in a {deliv.kind} deliverable needs {p!r} (where the brief puts it)"
            )
    expected = raw["expected"]
    for e in [expected] if isinstance(expected, str) else expected:
        if e not in raw["options"]:
            raise ProtocolError(path, f"{where}.expected", f"{e!r} is not one of the options {sorted(raw['options'])}")
    if isinstance(expected, list):
        for p in SET_DECISION_PARAMS:
            if p not in raw:
                raise ProtocolError(path, f"{where}.{p}", f"a set-valued decision (expected is a list) needs {p!r}")
        if deliv.kind not in DOCUMENT_KINDS:
            raise ProtocolError(
                path,
                f"{where}.expected",
                f"a set-valued decision is read from a document section, not a {deliv.kind} file",
            )
    elif not isinstance(raw.get("section", ""), str):
        raise ProtocolError(
            path,
            f"{where}.section",
            "a single choice is read in one section; several sections are for a set-valued decision",
        )
    elif any(p in raw for p in SET_DECISION_ONLY):
        raise ProtocolError(
            path,
            f"{where}.expected",
            (
                f"{', '.join(p for p in SET_DECISION_ONLY if p in raw)} apply only to a set-valued decision (a "
                "list as expected)"
            ),
        )
    if deliv.kind in DOCUMENT_KINDS:
        for section in [raw["section"]] if isinstance(raw["section"], str) else raw["section"]:
            if section.lower() not in [s.lower() for s in deliv.required_sections]:
                raise ProtocolError(
                    path, f"{where}.section", f"{section!r} is not a required section of {deliv.name} in scenario.yml"
                )
    elif not isinstance(raw.get("section", ""), str):
        raise ProtocolError(path, f"{where}.section", "a decision outside a document names no sections")
    patterns = {f"options.{k}": v for k, v in raw["options"].items()}
    patterns.update({p: raw[p] for p in ("topic", "property_verbs", "complement_verbs", "plans") if p in raw})
    for key, pat in patterns.items():
        try:
            re.compile(pat)
        except re.error as exc:
            raise ProtocolError(path, f"{where}.{key}", f"not a valid regular expression ({exc})") from None


def _check_bounds(path: Path, where: str, raw: dict[str, Any]) -> None:
    """A bounds criterion states at least one bound, a minimum no greater than its maximum, and labels that are
    regexes."""
    lo, hi = raw.get("minimum"), raw.get("maximum")
    if lo is None and hi is None:
        raise ProtocolError(path, f"{where}.minimum", "a labelled_bounds criterion needs 'minimum', 'maximum' or both")
    if lo is not None and hi is not None and lo > hi:
        raise ProtocolError(path, f"{where}.maximum", f"the maximum {hi} is below the minimum {lo}")
    for i, label in enumerate(raw["labels"]):
        try:
            re.compile(label)
        except re.error as exc:
            raise ProtocolError(path, f"{where}.labels.{i}", f"not a valid regular expression ({exc})") from None


def _load_rubric(path: Path) -> Rubric:
    data = read_yaml(path)
    if isinstance(data, dict) and isinstance(data.get("criteria"), list):
        for c in data["criteria"]:
            if isinstance(c, dict) and isinstance(c.get("anchors"), dict):
                c["anchors"] = {str(k): v for k, v in c["anchors"].items()}
    validate(data, RUBRIC_SCHEMA, path)
    ids = [c["id"] for c in data["criteria"]]
    if len(set(ids)) != len(ids):
        raise ProtocolError(path, "criteria", f"rubric criterion ids must be unique, got {ids}")
    return Rubric(
        path,
        tuple(
            RubricCriterion(
                c["id"], c["name"], float(c["weight"]), c["description"], {int(k): v for k, v in c["anchors"].items()}
            )
            for c in data["criteria"]
        ),
    )


def load_scenario_from(bundle: Path, study: protocol.Study | None = None) -> Scenario:
    """Load and validate the bundle in folder ``bundle``."""
    bundle = Path(bundle)
    spath = bundle / "scenario.yml"
    data = read_yaml(spath)
    validate(data, SCENARIO_SCHEMA, spath)
    sid = data["id"]
    if sid != bundle.name:
        raise ProtocolError(spath, "id", f"{sid!r} does not match the bundle folder {bundle.name!r}")
    study = study or protocol.study()
    caps = study.caps_for(sid)
    stated = Caps(float(data["caps"]["usd"]), float(data["caps"]["wall_s"]))
    if stated != caps:
        raise ProtocolError(spath, "caps", f"states {stated} but protocol/study.yml gives {caps} (A-006)")
    deliverables = []
    for i, d in enumerate(data["deliverables"]):
        deliv = Deliverable(
            name=d["name"],
            kind=d["kind"],
            requires_formulas=bool(d.get("requires_formulas", False)),
            min_words=d.get("min_words"),
            required_sections=tuple(d.get("required_sections", ())),
            required_columns=tuple(d.get("required_columns", ())),
        )
        ext = Path(deliv.name).suffix.lstrip(".")
        if (deliv.kind == "completion_record") != (deliv.name == COMPLETION_RECORD) or (
            deliv.kind != "completion_record" and ext != deliv.kind
        ):
            raise ProtocolError(
                spath, f"deliverables.{i}.kind", f"kind {deliv.kind!r} does not match the file name {deliv.name!r}"
            )
        if deliv.requires_formulas and deliv.kind != "xlsx":
            raise ProtocolError(spath, f"deliverables.{i}.requires_formulas", "only a workbook can require formulas")
        deliverables.append(deliv)
    names = [d.name for d in deliverables]
    if len(set(names)) != len(names):
        raise ProtocolError(spath, "deliverables", f"duplicate deliverable names {names}")
    if COMPLETION_RECORD not in names:
        raise ProtocolError(spath, "deliverables", "every scenario requires outputs/completion_record.json")
    # The study's own arms file (a study.yml read from elsewhere falls back to the repository's).
    arms_file = study.path.parent / "arms" / "arms.yml"
    features = protocol.arm_vocabulary(arms_file if arms_file.is_file() else paths.ARMS_FILE).features
    for i, name in enumerate(data["arm_features"]):
        if name not in features:
            raise ProtocolError(
                spath, f"arm_features.{i}", f"{name!r} is not a feature of arms.yml (features: {', '.join(features)})"
            )
    if data["uses_portal"] != ("portal" in data["arm_features"]):
        raise ProtocolError(spath, "arm_features", "lists 'portal' exactly when uses_portal is true")
    brief = bundle / "brief.md"
    if not brief.is_file() or not brief.read_text(encoding="utf-8").strip():
        raise ProtocolError(brief, "<file>", "the brief is missing or empty")
    text = brief.read_text(encoding="utf-8")
    for n in names:
        if n not in text:
            raise ProtocolError(brief, "<text>", f"does not name the deliverable {n}")
    if "portal" in text.lower():
        raise ProtocolError(brief, "<text>", "mentions the portal; the brief is identical for every arm")
    if not (bundle / "inputs").is_dir():
        raise ProtocolError(bundle / "inputs", "<dir>", "the inputs folder is missing")
    dmap = {d.name: d for d in deliverables}
    return Scenario(
        id=sid,
        title=data["title"],
        occupation=data["occupation"],
        dir=bundle,
        caps=caps,
        designed_depth=int(data["designed_depth"]),
        professional_minutes=float(data["professional_minutes"]),
        deliverables=tuple(deliverables),
        uses_portal=bool(data["uses_portal"]),
        arm_features=tuple(data["arm_features"]),
        generator=data["generator"],
        oracle=_load_oracle(bundle / "oracle.yml", dmap),
        rubric=_load_rubric(bundle / "rubric.yml"),
    )


def list_scenarios(root: Path | None = None) -> list[str]:
    """IDs of the bundles under ``protocol/scenarios`` (folders holding a scenario.yml), sorted."""
    root = Path(root or paths.SCENARIOS_DIR)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "scenario.yml").is_file())


@cache
def _cached(sid: str, root: str) -> Scenario:
    return load_scenario_from(Path(root) / sid)


def load_scenario(sid: str, root: Path | None = None) -> Scenario:
    """The validated bundle ``sid`` (cached per process)."""
    root = Path(root or paths.SCENARIOS_DIR)
    if not (root / sid / "scenario.yml").is_file():
        raise ProtocolError(
            root / sid / "scenario.yml", "<file>", f"no scenario {sid!r}; known: {list_scenarios(root)}"
        )
    return _cached(sid, str(root))
