"""Which runner and judge branches a rehearsal plays, run by run.

A rehearsal that only ever plays the happy path proves nothing about the
branches that decide what a real run is worth: a cap reached mid-run, the
wall limit, an API error before or after the model said anything, a stream
cut, and judges that answer garbage or not at all. The plan (a YAML file,
``analysis/config/rehearsal_branches.yml`` for ``make rehearsal``, named by
the environment variable :data:`PLAN_ENV`) assigns at most one worker branch
and any judge branches to a run, by the run's folder name
(``SCENARIO.ARM.rN``). A branch is played on the run's first attempt only:
an infrastructure error is rerun under the same id, and the rerun plays the
normal path, as a real rerun would meet a healthy API.

Every branch states what the design says must come of it
(:attr:`Branch.expect`); the rehearsal report holds each run to its branch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: The environment variable that names a rehearsal's branch plan (unset: every run plays the normal path).
PLAN_ENV = "PILOT_REHEARSAL_BRANCHES"
#: What the scripted server records of the branches it was asked to play, beside its truth.
BRANCH_FILE = "branch.json"


@dataclass(frozen=True)
class Branch:
    name: str
    side: str  # "worker" or "judge"
    what: str  # what the scripted server does
    expect: str  # what the design says must come of it


WORKER_BRANCHES: dict[str, Branch] = {
    b.name: b
    for b in (
        Branch(
            "cap_mid_run",
            "worker",
            (
                "the answer to the last tool step reports enough usage that the metered cost leaves less than "
                "the next request's worst case, so the model proxy refuses the closing request"
            ),
            (
                "the run ends capped (cost) and is evaluated on the deliverables as written; no resume (the "
                "proxy ended the run)"
            ),
        ),
        Branch(
            "wall_limit",
            "worker",
            "the closing answer is held past the run's wall limit (the plan's wall_s)",
            "the run ends capped (wall) after model output and is evaluated on the deliverables as written",
        ),
        Branch(
            "overloaded_at_start",
            "worker",
            "the first request is answered 529 overloaded_error, not to be retried",
            "no model output, so an infrastructure error; the run is rerun under the same id and the rerun completes",
        ),
        Branch(
            "api_500_mid_run",
            "worker",
            "the closing request is answered 500 api_error, not to be retried, after the tool steps",
            (
                "inference had begun, so an agent error, evaluated on the deliverables as written; on A4 the "
                "one resume is granted"
            ),
        ),
        Branch(
            "stream_cut_at_start",
            "worker",
            "the first answer's stream is cut after its first event, every time it is asked",
            "no model output, so an infrastructure error; the run is rerun under the same id and the rerun completes",
        ),
    )
}

JUDGE_BRANCHES: dict[str, Branch] = {
    b.name: b
    for b in (
        Branch(
            "judge_malformed_once",
            "judge",
            "the judge's first reply is not JSON; its retry is a valid grade",
            "the panel retries once and the judge is present (2 attempts)",
        ),
        Branch(
            "judge_schema_invalid",
            "judge",
            "both of the judge's replies are JSON that fails the output schema",
            "the judge is missing for the run (never scored zero); Q comes from the others",
        ),
        Branch(
            "judge_timeout",
            "judge",
            "both of the judge's replies are held past the judges' time limit (the plan's judge_timeout_s)",
            "the judge is missing for the run (never scored zero); Q comes from the others",
        ),
    )
}

BRANCHES: dict[str, Branch] = {**WORKER_BRANCHES, **JUDGE_BRANCHES}
#: Branches whose first attempt is an infrastructure error, rerun under the same id.
RERUN_BRANCHES = frozenset({"overloaded_at_start", "stream_cut_at_start"})


class PlanError(ValueError):
    """A branch plan that names an unknown branch or run, or is not of the documented shape."""


@dataclass(frozen=True)
class RunBranch:
    """The branches one attempt plays (empty: the normal path)."""

    worker: str | None = None
    judges: Mapping[str, str] = field(default_factory=dict)
    wall_s: float | None = None
    judge_timeout_s: float | None = None
    cap_usd: float | None = None

    @property
    def names(self) -> list[str]:
        return ([self.worker] if self.worker else []) + sorted(set(self.judges.values()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "judges": dict(self.judges),
            "wall_s": self.wall_s,
            "judge_timeout_s": self.judge_timeout_s,
            "cap_usd": self.cap_usd,
        }

    def limits(self) -> dict[str, str]:
        """The rehearsal's own limits for this attempt, as the scripted upstream hands them to the run function."""
        from pilot.pipeline import UPSTREAM_CAP_KEY, UPSTREAM_JUDGE_TIMEOUT_KEY, UPSTREAM_WALL_KEY

        out = {}
        if self.worker == "cap_mid_run" and self.cap_usd is not None:
            out[UPSTREAM_CAP_KEY] = str(self.cap_usd)
        if self.worker == "wall_limit" and self.wall_s is not None:
            out[UPSTREAM_WALL_KEY] = str(self.wall_s)
        if "judge_timeout" in self.judges.values() and self.judge_timeout_s is not None:
            out[UPSTREAM_JUDGE_TIMEOUT_KEY] = str(self.judge_timeout_s)
        return out


@dataclass(frozen=True)
class BranchPlan:
    runs: Mapping[str, RunBranch]
    source: str = ""

    def for_attempt(self, attempt_dir: Path) -> RunBranch:
        """The branches of this attempt: its run's, on the first attempt; none on a rerun."""
        attempt_dir = Path(attempt_dir)
        if attempt_dir.name != "attempt-1":
            return RunBranch()
        return self.runs.get(attempt_dir.parent.name, RunBranch())

    @property
    def played(self) -> set[str]:
        return {n for rb in self.runs.values() for n in rb.names}


def parse_plan(raw: Any, source: str = "<plan>") -> BranchPlan:
    """A plan from its YAML mapping; :class:`PlanError` naming the file, the run and the field when it is wrong."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("runs"), Mapping):
        raise PlanError(f"{source}: expected a mapping with a 'runs' mapping of SCENARIO.ARM.rN to branches")
    unknown = sorted(set(raw) - {"runs", "wall_s", "judge_timeout_s", "cap_usd"})
    if unknown:
        raise PlanError(
            f"{source}: unknown field(s) {', '.join(unknown)} (known: runs, wall_s, judge_timeout_s, cap_usd)"
        )

    def seconds(key: str) -> float | None:
        v = raw.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise PlanError(f"{source}: {key}: expected a positive number, got {v!r}")
        return float(v)

    wall_s, judge_timeout_s, cap_usd = seconds("wall_s"), seconds("judge_timeout_s"), seconds("cap_usd")
    runs: dict[str, RunBranch] = {}
    for key, spec in raw["runs"].items():
        where = f"{source}: runs.{key}"
        if not isinstance(key, str) or key.count(".") != 2 or not key.rsplit(".", 1)[1].startswith("r"):
            raise PlanError(f"{where}: a run is named by its folder, SCENARIO.ARM.rN")
        if not isinstance(spec, Mapping) or set(spec) - {"worker", "judges"}:
            raise PlanError(f"{where}: expected a mapping with 'worker' and/or 'judges'")
        worker = spec.get("worker")
        if worker is not None and worker not in WORKER_BRANCHES:
            raise PlanError(f"{where}.worker: {worker!r} is not a worker branch (known: {', '.join(WORKER_BRANCHES)})")
        judges = spec.get("judges") or {}
        if not isinstance(judges, Mapping):
            raise PlanError(f"{where}.judges: expected a mapping of judge id to branch")
        for jid, b in judges.items():
            if b not in JUDGE_BRANCHES:
                raise PlanError(
                    f"{where}.judges.{jid}: {b!r} is not a judge branch (known: {', '.join(JUDGE_BRANCHES)})"
                )
        if worker == "wall_limit" and wall_s is None:
            raise PlanError(f"{where}: the wall_limit branch needs the plan's wall_s")
        if worker == "cap_mid_run" and cap_usd is None:
            raise PlanError(f"{where}: the cap_mid_run branch needs the plan's cap_usd")
        if "judge_timeout" in judges.values() and judge_timeout_s is None:
            raise PlanError(f"{where}: the judge_timeout branch needs the plan's judge_timeout_s")
        runs[key] = RunBranch(worker, {str(k): str(v) for k, v in judges.items()}, wall_s, judge_timeout_s, cap_usd)
    return BranchPlan(runs, source)


def load_plan(path: Path | str | None = None) -> BranchPlan:
    """The plan at ``path``, else the one :data:`PLAN_ENV` names, else the empty plan."""
    path = path if path is not None else os.environ.get(PLAN_ENV) or None
    if path is None:
        return BranchPlan({})
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"{p}: cannot read the rehearsal's branch plan ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise PlanError(f"{p}: not YAML ({exc})") from None
    return parse_plan(raw, str(p))


def write_record(record_dir: Path, branch: RunBranch) -> None:
    Path(record_dir).mkdir(parents=True, exist_ok=True)
    (Path(record_dir) / BRANCH_FILE).write_text(json.dumps(branch.to_dict(), sort_keys=True) + "\n", encoding="utf-8")


def read_record(record_dir: Path) -> RunBranch | None:
    """What an attempt's scripted server was asked to play (None: no record, an attempt before branch plans)."""
    p = Path(record_dir) / BRANCH_FILE
    if not p.is_file():
        return None
    d = json.loads(p.read_text(encoding="utf-8"))
    return RunBranch(
        d.get("worker"), dict(d.get("judges") or {}), d.get("wall_s"), d.get("judge_timeout_s"), d.get("cap_usd")
    )
