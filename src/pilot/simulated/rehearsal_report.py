"""The rehearsal report: did every real part of the harness do its job against the scripted model?

A rehearsal (backend ``rehearsal``, :mod:`pilot.backends`) runs a small study
through the pinned CLI in the sandbox, the metering proxy, the oracles and
three CLI judge sessions, with the model played by the scripted model server
(:mod:`pilot.simulated.scripted_model`), whose record says what each run should have
produced. :func:`collect` checks every run of the study against that known
truth and against the harness's own records:

- the run ended as the branch its first attempt played says it must
  (:mod:`pilot.simulated.rehearsal_branches`, :func:`check_branch`):
  completed on the normal path, capped at cost or wall and evaluated as
  delivered, an agent error after inference began, or an infrastructure
  error before any model output rerun once under the same id; in a real CLI
  session (the pinned version), isolated; and every branch of the plan was
  played by some run;
- the scripted server's record is found by the proxy's run label alone
  (a record it had to key by folder is a finding, :func:`check_labelled`);
- every deliverable the scripted worker wrote exists in the workspace;
- the oracle's verdicts agree with what the scripted worker planted, from the
  planted defects' declarations alone (:func:`pilot.defects.plant_defect`;
  the harness never runs the oracle to know the truth): ``D`` equals
  ``expected_pass``, each planted defect fails one of the criteria it
  declares, and no undeclared criterion fails (:func:`check_declared`);
  every deliverable holds exactly the bytes a tool call wrote whole, or the
  digest the worker's own ``sha256sum`` reported in the sandbox for a file
  its solver made (:func:`deliverables_by_tool`);
- on A4 the controller is held to the plan's predictions, made from the
  declarations before the run (:func:`check_controller`): its first and
  final self-check verdicts, the one resume granted after a failing
  self-check or an agent error and withheld after a passing one or a spent
  cap, never a second, and the self-check seen as a tool call in each
  session of the harness's transcript (:func:`selfcheck_calls`);
- every judge of the panel returned a parsed verdict, but for those the
  attempt's judge branches meant to be missing, and the judges' cost was
  recorded; each recorded judge's scores and verdict are the scripted judge's
  grades, and its score their rubric-weighted mean
  (:func:`check_judge_grades`); each judge ended as its branch says, and Q is
  the mean of the others, never a zero for a missing judge
  (:func:`check_judge_branches`);
- costs reconcile, exactly in Decimal: the CLI-reported cost against the
  proxy-metered cost within the runner's tolerance (the larger of one cent and
  2 % of the metered cost, :func:`pilot.protocol.prices.cost_tolerance`),
  and the ledger's charge equal to the metered cost plus the judges' to the
  micro-dollar; the metered cost equal, exactly, to the proxy's usage log
  priced afresh from ``protocol/prices.yml`` (:func:`price_usage_log`);
- the deviations are exactly the ones the scripted worker planted (the
  generative model's drawn attempt at a denied program, and on every shell
  arm that denies one a program the host has, tried directly, through
  ``bash -c`` and by its absolute path), each stopped where the route says
  (the CLI's deny rule, or the sandbox's mask) and recorded with what
  answered: the stub for a program the host has, "absent" for one it lacks;
  and nothing else was refused (no other CLI denial, no network refusal);
- a worker that used the portal left requests in the portal's access log;
- every arm this host serves is in the study, and the exported run table has
  the real table's columns and passes the same validation.

Each mismatch is a finding to fix before the real study; ``pilot study
rehearsal-report`` exits 1 when there is any. The report (``report.md`` and
``report.json``) says REHEARSAL: it checks the harness, never the agent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd

from pilot import backends, ledger, paths, protocol
from pilot.protocol.prices import cost_tolerance, finite_decimal
from pilot.protocol.scenario import load_scenario

#: The proxy's usage log of one run, under the attempt's harness record (one per proxy run folder).
USAGE_LOG = "proxy_usage.jsonl"

LABEL = backends.label(backends.REHEARSAL)
REPORT_MD = "report.md"
REPORT_JSON = "report.json"


@dataclass
class RunCheck:
    """What one run of the rehearsal did, and what in it does not match."""

    run_id: str
    scenario: str
    arm: str
    status: str
    attempts: int
    wall_s: float | None = None
    harness_s: float | None = None
    #: the whole attempt, judges included, from the store's start and finish
    attempt_s: float | None = None
    cli_sessions: int = 0
    deliverables_expected: list[str] = field(default_factory=list)
    deliverables_by_tool: list[str] = field(default_factory=list)
    D: bool | None = None
    expected_pass: bool | None = None
    judges_parsed: int = 0
    judges_total: int = 0
    cli_cost_usd: str | None = None
    metered_cost_usd: str | None = None
    judge_cost_usd: str | None = None
    charged_usd: str | None = None
    deviations: int = 0
    #: attempts at denied programs the scripted worker planted (each must be recorded as exactly one deviation)
    planted_deviations: int = 0
    refusals: int = 0
    #: the worker branch the run's first attempt played ("normal": none), and the judge branches by judge id
    branch: str = "normal"
    judge_branches: dict[str, str] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    @property
    def oracle_agrees(self) -> bool:
        return self.D is not None and self.expected_pass is not None and self.D == self.expected_pass

    @property
    def costs_reconcile(self) -> bool:
        return not any(f.startswith("cost:") for f in self.findings)


@dataclass
class RehearsalReport:
    """Every run's check, the study-level findings, and how to read them."""

    study: str
    arms: list[str]
    host_arms: list[str]
    runs: list[RunCheck]
    study_findings: list[str]
    run_table: str | None = None
    label: str = LABEL
    #: the branches the rehearsal's plan asked for (empty: no plan)
    branches_planned: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[str]:
        """Every finding: the study's, then each run's prefixed with its run id."""
        return list(self.study_findings) + [f"{r.run_id}: {f}" for r in self.runs for f in r.findings]

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def summary(self) -> pd.DataFrame:
        """Per arm: runs, completed, deliverables by tool call, oracle agreements, judges parsed, costs reconciled,
        deviations, refusals, wall time, findings."""
        rows = []
        for arm in self.arms:
            rs = [r for r in self.runs if r.arm == arm]
            walls = [r.attempt_s for r in rs if r.attempt_s is not None]
            delivered = sum(len(r.deliverables_by_tool) for r in rs)
            expected = sum(len(r.deliverables_expected) for r in rs)
            rows.append(
                {
                    "arm": arm,
                    "runs": len(rs),
                    "completed": sum(r.status == "completed" for r in rs),
                    "cli_sessions": sum(r.cli_sessions for r in rs),
                    "deliverables": f"{delivered}/{expected}",
                    "oracle_agrees": f"{sum(r.oracle_agrees for r in rs)}/{len(rs)}",
                    "judges_parsed": f"{sum(r.judges_parsed for r in rs)}/{sum(r.judges_total for r in rs)}",
                    "costs_reconcile": f"{sum(r.costs_reconcile for r in rs)}/{len(rs)}",
                    "deviations": f"{sum(r.deviations for r in rs)} (planted {sum(r.planted_deviations for r in rs)})",
                    "refusals": sum(r.refusals for r in rs),
                    "attempt_s_max": round(max(walls), 1) if walls else "not recorded",
                    "findings": sum(len(r.findings) for r in rs),
                }
            )
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "note": (
                f"{self.label}: a rehearsal of the harness against the scripted model; nothing here is a "
                "finding about the agent."
            ),
            "study": self.study,
            "arms": self.arms,
            "host_arms": self.host_arms,
            "run_table": self.run_table,
            "ok": self.ok,
            "findings": self.findings,
            "by_arm": self.summary.to_dict(orient="records"),
            "runs": [asdict(r) for r in self.runs],
        }

    def to_markdown(self) -> str:
        lines = [
            f"# {self.label}: rehearsal report of study {self.study}",
            "",
            f"**{self.label} (not a finding).** The real harness (pinned CLI, sandbox, metering proxy, oracles, "
            "three CLI judges) against the scripted model server; it checks the harness, never the agent.",
            "",
            (
                f"Arms rehearsed: {', '.join(self.arms) or 'none'} (this host serves "
                f"{', '.join(self.host_arms) or 'none'})."
            ),
            f"Run table: {self.run_table or 'not exported'}.",
            "",
            "## Per arm",
            "",
            _markdown_table(self.summary),
            "",
            "## Per run",
            "",
            _markdown_table(
                pd.DataFrame(
                    [
                        {
                            "run": r.run_id,
                            "branch": r.branch + "".join(f"; {j} {b}" for j, b in sorted(r.judge_branches.items())),
                            "status": r.status,
                            "attempts": r.attempts,
                            "CLI sessions": r.cli_sessions,
                            "deliverables by tool": f"{len(r.deliverables_by_tool)}/{len(r.deliverables_expected)}",
                            "D / expected": f"{_yn(r.D)} / {_yn(r.expected_pass)}",
                            "judges": f"{r.judges_parsed}/{r.judges_total}",
                            "CLI USD": _usd(r.cli_cost_usd),
                            "metered USD": _usd(r.metered_cost_usd),
                            "judges USD": _usd(r.judge_cost_usd),
                            "ledger USD": _usd(r.charged_usd),
                            "deviations / planted": f"{r.deviations}/{r.planted_deviations}",
                            "refusals": r.refusals,
                            "agent s": "not recorded" if r.wall_s is None else f"{r.wall_s:.1f}",
                            "attempt s": "not recorded" if r.attempt_s is None else f"{r.attempt_s:.1f}",
                        }
                        for r in self.runs
                    ]
                )
            )
            if self.runs
            else "(no runs)",
            "",
            f"## Findings to fix before the real study ({len(self.findings)})",
            "",
        ]
        lines += [f"- {f}" for f in self.findings] or ["None: every check held."]
        if self.branches_planned:
            lines += [
                "",
                "## Branches",
                "",
                "Played: " + (", ".join(sorted(self.branches_played)) or "none") + ".",
                "Planned but not played: "
                + (", ".join(sorted(set(self.branches_planned) - set(self.branches_played))) or "none")
                + ".",
            ]
        return "\n".join(lines) + "\n"

    @property
    def branches_played(self) -> set[str]:
        return {r.branch for r in self.runs if r.branch != "normal"} | {
            b for r in self.runs for b in r.judge_branches.values()
        }


#: The most of a deliverable read to check its digest (the oracle's limit for a deliverable).
DELIVERABLE_MAX_BYTES = 50 * 1024 * 1024


def _usd(text: str | None) -> str:
    """A dollar amount for the table, to the micro-dollar (the JSON keeps each as recorded)."""
    d = finite_decimal(text)
    return "none" if d is None else f"{d:.6f}"


def _yn(v: bool | None) -> str:
    return "missing" if v is None else ("pass" if v else "fail")


def _markdown_table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(out)


# --------------------------------------------------------------------------
# The checks, each a pure function of what the harness recorded
# --------------------------------------------------------------------------


def reconcile_costs(
    cli_usd: Any,
    metered_usd: Any,
    judge_usd: Any,
    charged_micro: int | None,
    charge_basis: str | None,
    *,
    cli_stopped: bool = False,
) -> list[str]:
    """Findings (``cost: ...``) where the CLI's reported cost, the proxy's metered cost and the ledger's charge
    disagree.

    The CLI's figure may differ from the metered one by the runner's
    tolerance (max of one cent and 2 % of the metered cost); the ledger must
    have charged exactly the metered cost plus the judges', in micro-dollars,
    on the metered basis. A run whose proxy metered nothing is a finding
    too: then no cost flowed through the proxy and nothing was reconciled.
    ``cli_stopped``: the harness stopped the CLI at the wall limit, so it
    could report no cost (the metered one settles the run).
    """

    out: list[str] = []
    cli, metered, judges = finite_decimal(cli_usd), finite_decimal(metered_usd), finite_decimal(judge_usd)
    if metered is None:
        out.append("cost: the proxy metered no cost for the run")
    elif metered <= 0:
        out.append("cost: the proxy metered 0 USD: no usage flowed through the proxy, so nothing was reconciled")
    if cli is None and not cli_stopped:
        out.append("cost: the CLI reported no cost")
    if cli is not None and metered is not None:
        tol = cost_tolerance(metered)
        if abs(cli - metered) > tol:
            out.append(
                f"cost: the CLI reported {cli} USD, the proxy metered {metered} USD: a gap of {cli - metered:+} USD "
                f"beyond the tolerance of {tol} USD"
            )
    if judges is None:
        out.append("cost: the judges' cost was not recorded")
    if charged_micro is None:
        out.append("cost: the ledger recorded no charge for the run's attempt")
    elif metered is not None and judges is not None:
        expected = ledger.to_micro(metered + judges)
        if int(charged_micro) != expected:
            out.append(
                f"cost: the ledger charged {Decimal(int(charged_micro)) / ledger.MICRO} USD, not the "
                f"metered cost plus the judges' ({metered} + {judges} = {Decimal(expected) / ledger.MICRO} "
                "USD)"
            )
    if charge_basis is not None and charge_basis != "metered":
        out.append(f"cost: the ledger charged on the {charge_basis!r} basis, not the metered cost")
    return out


def price_usage_log(paths_: Iterable[Path], prices_file: Path) -> tuple[Decimal, int]:
    """The agent's cost priced afresh from the proxy's usage log (every answered request) and ``prices.yml``'s rates.

    Written from the price file's own definitions, in decimals: uncached input, output, 5-minute cache writes
    (``cache_write``), 1-hour cache writes (``cache_write_1h``, a part of the cache writes the log counts), cache
    reads; USD per million tokens. Returns the cost and the number of priced requests.
    """
    import yaml

    rates = {
        m: {k: Decimal(str(v)) for k, v in r.items()}
        for m, r in yaml.safe_load(Path(prices_file).read_text(encoding="utf-8"))["models"].items()
    }
    total, n = Decimal(0), 0
    for path in paths_:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("kind") != "messages" or row.get("status") != 200:
                continue
            r = rates[row["model"]]
            writes, one_hour = (
                int(row.get("cache_creation_input_tokens") or 0),
                int(row.get("cache_creation_1h_input_tokens") or 0),
            )
            total += (
                int(row.get("input_tokens") or 0) * r["input"]
                + int(row.get("output_tokens") or 0) * r["output"]
                + (writes - one_hour) * r["cache_write"]
                + one_hour * r["cache_write_1h"]
                + int(row.get("cache_read_input_tokens") or 0) * r["cache_read"]
            ) / Decimal(1_000_000)
            n += 1
    return total, n


def check_usage_log(
    priced: Decimal, requests: int, metered_usd: Any, judge_usd: Any, charged_micro: int | None
) -> list[str]:
    """The proxy's metered cost and the ledger's charge against the usage log priced afresh
    (:func:`price_usage_log`)."""
    out = []
    if not requests:
        return ["cost: the proxy's usage log holds no answered request"]
    metered = finite_decimal(metered_usd)
    if metered is None or metered != priced:
        out.append(
            f"cost: the proxy metered {metered_usd} USD, but its usage log priced from prices.yml comes to "
            f"{priced} USD over {requests} request(s)"
        )
    judges = finite_decimal(judge_usd)
    if charged_micro is not None and judges is not None and int(charged_micro) != ledger.to_micro(priced + judges):
        out.append(
            f"cost: the ledger charged {Decimal(int(charged_micro)) / ledger.MICRO} USD, not the usage "
            f"log's {priced} USD plus the judges' {judges} USD"
        )
    return out


#: The judge branches after which the judge must be missing for the run (never scored zero).
MISSING_JUDGE_BRANCHES = frozenset({"judge_schema_invalid", "judge_timeout"})


def _judge_present(j: Mapping[str, Any]) -> bool:
    return j.get("error") is None and j.get("score_0_100") is not None


def check_judges(
    judges: Iterable[Mapping[str, Any]] | None, panel_size: int, branch: Any = None
) -> tuple[int, list[str]]:
    """How many judges returned a parsed verdict, and a finding for each that did not (or for a short panel); a judge
    that ``branch`` (the attempt's :class:`~pilot.simulated.rehearsal_branches.RunBranch`) meant to be missing is no
    finding here when missing (:func:`check_judge_branches` holds it to its branch)."""
    judges = list(judges or [])
    planned = {jid for jid, b in (getattr(branch, "judges", None) or {}).items() if b in MISSING_JUDGE_BRANCHES}
    parsed = [j for j in judges if _judge_present(j)]
    out = [
        f"judge {j.get('judge_id')}: no parsed verdict ({j.get('error') or 'no score'})"
        for j in judges
        if j not in parsed and str(j.get("judge_id")) not in planned
    ]
    if len(judges) != panel_size:
        out.append(f"judges: {len(judges)} judge result(s) recorded, the panel has {panel_size}")
    if any(j.get("backend") != backends.judge_backend(backends.REHEARSAL) for j in parsed):
        out.append("judges: a verdict came from another backend than the CLI judges")
    return len(parsed), out


def check_declared(criteria: list[Mapping[str, Any]], declared: list[Mapping[str, Any]]) -> list[str]:
    """The oracle's verdicts, criterion by criterion, against what the planted defects declare they break.

    Each planted defect (other than an input edit) must fail at least one of its declared criteria, on its own or
    blocked by another planted defect's; no criterion may fail that no planted defect declares, on its own or
    blocked by an undeclared one.
    """
    out = []
    union = {cid for d in declared for cid in d.get("breaks") or []}
    # A declared criterion counts as broken when it failed on its own, or blocked by what another planted defect
    # declares (a memo cut short and then dropped altogether fails its length check as blocked by its presence).
    broken = {
        c["id"]
        for c in criteria
        if not c.get("passed") and (c.get("blocked_by") is None or c.get("blocked_by") in union)
    }
    for d in declared:
        if d.get("critical") or not d.get("breaks"):
            continue
        if not broken & set(d["breaks"]):
            out.append(
                f"oracle: the planted defect {d['defect']} ({d.get('description', '')[:120]}) declares "
                f"{', '.join(d['breaks'])}, but none of them failed"
            )
    for c in criteria:
        if c.get("passed"):
            continue
        if c["id"] not in union and c.get("blocked_by") not in union:
            out.append(
                f"oracle: {c['id']} failed ({str(c.get('reason') or '')[:160]}), which no planted defect declares"
            )
    return out


def read_scripted_grades(record_dir: Path) -> dict[str, dict]:
    """The grades the scripted judges gave, by judge id (the last valid grade of its calls), from ``judges.jsonl``.

    An answer a judge branch made unusable (not JSON, failing the schema) is no grade; a row without ``valid``
    (a record of before the branches) always was one.
    """
    from pilot.simulated.scripted_model import JUDGES_FILE

    path = Path(record_dir) / JUDGES_FILE
    out: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if row.get("valid", True):
                    out[str(row["judge"])] = row
    return out


def check_judge_grades(
    recorded: list[Mapping[str, Any]], scripted: Mapping[str, Mapping[str, Any]], weights: Mapping[str, float]
) -> list[str]:
    """Each judge's recorded scores and verdict equal the scripted judge's grades, and its score is the rubric's
    weighted mean of them rescaled to 0-100 (``rubric.yml``: criteria scored 0-4), computed here in decimals."""
    out = []
    for j in recorded:
        jid = str(j.get("judge_id"))
        if j.get("error"):
            continue  # a judge that failed is check_judges' finding
        grade = scripted.get(jid)
        if grade is None:
            out.append(f"judges: {jid} has a recorded verdict but the scripted judges graded no call as {jid}")
            continue
        if dict(j.get("criterion_scores") or {}) != dict(grade.get("scores") or {}):
            out.append(
                f"judges: {jid} recorded scores {j.get('criterion_scores')} but the scripted judge gave "
                f"{grade.get('scores')}"
            )
            continue
        if bool(j.get("accept")) != bool(grade.get("accept")):
            out.append(
                f"judges: {jid} recorded accept={j.get('accept')} but the scripted judge gave "
                f"accept={grade.get('accept')}"
            )
        expected = sum(Decimal(repr(float(weights[k]))) * Decimal(int(v)) for k, v in grade["scores"].items()) * 100 / 4
        if j.get("score_0_100") is None or abs(Decimal(repr(float(j["score_0_100"]))) - expected) > Decimal("1e-9"):
            out.append(
                f"judges: {jid} recorded a score of {j.get('score_0_100')} but its grades give "
                f"{expected.normalize()} on the rubric"
            )
    return out


def judged_branch(attempt_dir: Path) -> Any:
    """The branches of the attempt whose deliverables the judges judged (its own record; None: a record of before
    the branch plans)."""
    from pilot.simulated.rehearsal_branches import read_record
    from pilot.simulated.scripted_model import scripted_record_dir

    return read_record(scripted_record_dir(Path(attempt_dir)))


def check_judge_branches(recorded_judges: Iterable[Mapping[str, Any]] | None, branch: Any) -> list[str]:
    """Each recorded judge ended as the judge branch it played says it must (:mod:`pilot.simulated.rehearsal_branches`),
    and Q is the mean of the judges that are not missing.

    ``branch`` is the attempt's :class:`~pilot.simulated.rehearsal_branches.RunBranch` (None: every judge played no
    branch). judge_schema_invalid and judge_timeout: missing (an error, no score) after two attempts, the retry
    included; judge_malformed_once: present after two attempts; no branch: present after one. Q is computed as the
    run table has it (:func:`pilot.outcomes.quality` of the record's judges): a missing judge counted as a zero, or a
    judge meant to be missing that got a score in, makes it something else than the mean of the others.
    """
    from pilot.outcomes import Q_DECIMALS, judge_scores, quality

    judges = [dict(j) for j in recorded_judges or []]
    played = dict(getattr(branch, "judges", None) or {})
    ids = [str(j.get("judge_id")) for j in judges]
    out = [
        f"judge {jid}: the plan gave it the {name} branch, but no result of it is recorded"
        for jid, name in sorted(played.items())
        if jid not in ids
    ]
    for j in judges:
        jid, name, attempts = str(j.get("judge_id")), played.get(str(j.get("judge_id"))), int(j.get("attempts") or 0)
        why = j.get("error") or "no score"
        if name in MISSING_JUDGE_BRANCHES:
            if j.get("error") is None or j.get("score_0_100") is not None or j.get("criterion_scores"):
                out.append(
                    f"judge {jid}: played {name}, so it must be missing (an error, no score), but it is recorded with "
                    f"error {j.get('error')!r} and score {j.get('score_0_100')!r}"
                )
            want = 2
        elif name == "judge_malformed_once":
            if not _judge_present(j):
                out.append(
                    f"judge {jid}: played {name}, so its retry's grade must be recorded, but it is missing ({why})"
                )
            want = 2
        else:
            if not _judge_present(j):
                out.append(f"judge {jid}: played no branch, so it must be present, but it is missing ({why})")
            want = 1
        if attempts != want:
            out.append(
                f"judge {jid}: played {name or 'no branch'}, so the panel asks it {want} time(s), but "
                f"{attempts} attempt(s) are recorded"
            )
    others = [
        float(j["score_0_100"])
        for j in judges
        if played.get(str(j.get("judge_id"))) not in MISSING_JUDGE_BRANCHES and _judge_present(j)
    ]
    Q = quality(judge_scores(judges, ids))
    expected = sum(others) / len(others) if others else None
    if expected is None:
        if Q is not None:
            out.append(
                f"judges: Q is {Q}, but no judge that was not meant to be missing has a score (Q must be missing)"
            )
    elif Q is None or abs(Q - expected) > 10.0**-Q_DECIMALS:
        as_zero = sum(others) / max(1, len(judges))
        note = (
            " (the missing judge(s) counted as zero)"
            if Q is not None and len(others) < len(judges) and abs(Q - as_zero) <= 10.0**-Q_DECIMALS
            else ""
        )
        out.append(
            f"judges: Q is {Q}, not {expected:.6f}, the mean of the {len(others)} judge(s) not meant to be "
            f"missing{note}"
        )
    return out


def check_oracle(D: bool | None, expected_pass: bool | None) -> list[str]:
    """A finding when the oracle's D is missing or differs from the scripted worker's known outcome."""
    if expected_pass is None:
        return [
            "oracle: the planted defects' declarations cannot foretell D (one declares required and optional criteria)"
        ]
    if D is None:
        return ["oracle: the run has no verdict D"]
    if bool(D) != bool(expected_pass):
        return [
            f"oracle: D={int(bool(D))} but the scripted worker planted a run that should "
            f"{'pass' if expected_pass else 'fail'}"
        ]
    return []


def deliverables_by_tool(
    expected: Iterable[str], workspace: Path, written: Mapping[str, str], reported: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """Of the deliverables the scripted worker wrote, those whose bytes in the workspace are what its tool calls wrote,
    and a finding for each other.

    A file's SHA-256 must equal the digest of the bytes a tool call carried whole (a Write call, an edit step), or,
    for a file the solver made in the sandbox, the digest the worker's own ``sha256sum`` tool call reported at the end
    of its session. A name in a tool call proves nothing (the solver's shipped source names every deliverable).
    """
    from pilot import worker_files

    def digest(name: str) -> str | None:
        # The worker's file, read beneath the workspace by the bounded reader: no link followed, bounded.
        try:
            with worker_files.Folder(workspace) as folder:
                return folder.sha256(name, max_bytes=DELIVERABLE_MAX_BYTES)
        except worker_files.Refused:
            return None

    ok: list[str] = []
    out: list[str] = []
    for name in expected:
        want = written.get(name) or reported.get(name)
        got = digest(name)
        if got is None:
            out.append(f"deliverable {name}: the scripted worker wrote it but it is not in the workspace")
        elif want is None:
            out.append(f"deliverable {name}: present, but no tool call wrote it whole or reported its digest")
        elif got != want:
            source = (
                "the bytes the scripted worker's tool call wrote"
                if name in written
                else "the digest the worker's sha256sum reported in the sandbox"
            )
            out.append(f"deliverable {name}: its SHA-256 is not that of {source}")
        else:
            ok.append(name)
    return ok, out


#: How the harness must record a planted attempt at a denied program, by how the scripted worker made it: (via,
#: blocked_by). The pinned CLI's deny rule (``Bash(curl:*)``) reads a command's program by its name, so
#: ``/usr/bin/curl`` typed as a command is refused by the rule as ``curl`` is (one permission denial each); only ``bash
#: -c`` gets past it to the mask in the run's namespace.
PLANTED_ROUTES = {
    "bash -c": ("bash -c", "mask"),
    "direct": ("command", "cli_rule"),
    "absolute path": ("command", "cli_rule"),
}


def _planted_attempts(session: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A session's planted attempts at denied programs: the generative model's drawn one, then those at a program of the
    host."""
    drawn = session.get("denied_attempt")
    return ([drawn] if drawn else []) + [a for a in session.get("host_denied_attempts") or [] if a]


def planted_deviations(sessions: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(family, via, blocked_by) of every attempt at a denied program the scripted worker planted in these sessions."""
    out = []
    for s in sessions:
        for d in _planted_attempts(s):
            via, blocked = PLANTED_ROUTES.get(str(d.get("how")), (f"unknown route {d.get('how')!r}", "?"))
            out.append((str(d.get("family")), via, blocked))
    return out


def expected_program(attempt: Mapping[str, Any]) -> str | None:
    """What must answer at a planted attempt's program in the namespace (the audit's ``program``), or None when the
    truth does not say whether the host has the program (a record written before it did).

    The CLI's rule refuses before anything runs; past it, a program the host has meets the stub bound over it, and
    one the host lacks is simply not there, which proves nothing about the stub.
    """
    from pilot.agents.audit import PROGRAM_ABSENT, PROGRAM_NOT_REACHED, PROGRAM_STUB

    _, blocked = PLANTED_ROUTES.get(str(attempt.get("how")), ("", "?"))
    if blocked == "cli_rule":
        return PROGRAM_NOT_REACHED
    if "present_on_host" not in attempt:
        return None
    return PROGRAM_STUB if attempt.get("present_on_host") else PROGRAM_ABSENT


def planted_programs(sessions: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Every planted attempt whose truth says what must answer at its program: family, route (how), command, program."""
    out = []
    for s in sessions:
        for d in _planted_attempts(s):
            want = expected_program(d)
            if want is not None:
                out.append(
                    {
                        "family": str(d.get("family")),
                        "how": str(d.get("how")),
                        "command": str(d.get("command")),
                        "program": want,
                    }
                )
    return out


def check_deviations(
    planted: list[tuple[str, str, str]],
    deviations: Iterable[Mapping[str, Any]],
    cli_denials: int,
    network_refusals: int,
    programs: Iterable[Mapping[str, str]] = (),
) -> list[str]:
    """Findings where the recorded deviations and refusals are not exactly the planted ones.

    A planted attempt typed as a command (by the program's name or its path) is refused by the CLI's deny rule:
    one permission denial each; any other denial or any network refusal is the harness refusing what the scripted
    worker may do. ``programs``
    (:func:`planted_programs`) says, per planted command, what must have answered at the program: the deviation
    recorded for that command must say so (a stub that did not answer for a program the host has is a finding,
    however the attempt was stopped).
    """
    from collections import Counter

    deviations = list(deviations)
    got = Counter((str(d.get("family")), str(d.get("via")), str(d.get("blocked_by"))) for d in deviations)
    want = Counter(planted)
    out = []
    for key in sorted((got - want).elements()):
        out.append(
            f"deviation: {key[0]} via {key[1]} (blocked by {key[2]}) recorded, but the scripted worker "
            "planted no such attempt"
        )
    for key in sorted((want - got).elements()):
        out.append(
            f"deviation: the planted attempt at {key[0]} (via {key[1]}, to be blocked by {key[2]}) is not "
            "recorded as such"
        )
    # Per command: the audit keeps the first 2000 characters of a command, so the planted one is compared as it keeps
    # it.
    recorded: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for d in deviations:
        if d.get("kind", "denied_family") == "denied_family":
            recorded.setdefault((str(d.get("family")), str(d.get("command"))), []).append(d)
    for p in programs:
        key = (str(p["family"]), str(p["command"])[:2000])
        mine = recorded.get(key) or []
        if not mine:
            out.append(
                f"deviation: the planted attempt at {p['family']} by route {p['how']} "
                f"({p['command'][:120]}) is recorded under no deviation of its command (the program must "
                f"be recorded as {p['program']!r})"
            )
            continue
        d = mine.pop(0)  # the same command planted twice is recorded twice
        if str(d.get("program")) != p["program"]:
            out.append(
                f"deviation: the planted attempt at {p['family']} by route {p['how']} is recorded with program "
                f"{d.get('program')!r} (via {d.get('via')}, blocked by {d.get('blocked_by')}), not {p['program']!r}"
            )
    direct = sum(1 for p in planted if p[2] == "cli_rule")
    if cli_denials != direct:
        out.append(
            f"sandbox: {cli_denials} CLI permission denial(s), the scripted worker planted {direct} attempt(s) "
            "the CLI's rule refuses"
        )
    if network_refusals:
        out.append(f"sandbox: {network_refusals} network refusal(s) of a worker that made no network attempt")
    return out


def truth_for_attempt(
    truth: Mapping[str, Mapping[str, Any]], attempt_dir: Path, scenario: str, arm: str
) -> Mapping[str, Any] | None:
    """The scripted worker's record of this attempt, by run id (the proxy's label, which is the attempt's folder).

    There is no fallback to the scenario and the arm: a proxy that stopped labelling its requests leaves only
    ``unlabelled:`` records, and that is a finding (:func:`check_labelled`), not something to look past.
    """
    for key in attempt_names(attempt_dir):
        if key in truth:
            return truth[key]
    return None


def attempt_names(attempt_dir: Path) -> tuple[str, ...]:
    """The names the proxy may have labelled this attempt's requests with: its folder here, and, for an attempt a
    dask worker ran in a private folder of its own, that folder (the package's origin record)."""
    from pilot.executors.dask import ORIGIN_FILE

    names = [str(attempt_dir), str(Path(attempt_dir).resolve())]
    origin = Path(attempt_dir) / ORIGIN_FILE
    if origin.is_file():
        try:
            names.append(str(json.loads(origin.read_text(encoding="utf-8"))["worker_folder"]))
        except (ValueError, KeyError, TypeError):
            pass
    return tuple(names)


def check_labelled(truth: Mapping[str, Mapping[str, Any]], attempt_dir: Path) -> list[str]:
    """A finding for every worker record the scripted server could not name by the proxy's run label."""
    names = attempt_names(attempt_dir)
    return [
        f"proxy: the worker's requests reached the scripted server without the run label (recorded as {key!r})"
        for key in truth
        if key.startswith("unlabelled:") or key not in names
    ]


#: How a run must end, by the worker branch its first attempt played (None: the normal path).
BRANCH_OUTCOMES = {
    None: ("completed", None),
    "cap_mid_run": ("capped", "cost"),
    "wall_limit": ("capped", "wall"),
    "api_500_mid_run": ("agent_error", None),
    "overloaded_at_start": ("completed", None),  # after the rerun
    "stream_cut_at_start": ("completed", None),
}


def check_branch(
    branch: str | None, rec: Mapping[str, Any], history: list[Mapping[str, Any]], *, recovery: bool
) -> list[str]:
    """The run ended as the design says its branch must (:mod:`pilot.simulated.rehearsal_branches`).

    ``history`` is the run's attempts in order; ``recovery`` whether the A4 resume was due (then an agent error of the
    first session is followed by the resume, and the run ends as the resume does).
    """
    from pilot.simulated.rehearsal_branches import RERUN_BRANCHES

    status, reason = BRANCH_OUTCOMES.get(branch, (None, None))
    if status is None:
        return [f"branch: {branch!r} is not a branch the report knows"]
    if branch == "api_500_mid_run" and recovery:
        status = "completed"
    out = []
    name = branch or "normal path"
    if branch in RERUN_BRANCHES:
        first = history[0] if history else {}
        if len(history) != 2:
            out.append(
                f"branch {name}: the run has {len(history)} attempt(s); the design reruns the "
                "infrastructure error once under the same id"
            )
        if first.get("outcome") != "infra_error":
            error = str(first.get("error") or "").splitlines()[0][:160] if first.get("error") else "no error recorded"
            out.append(
                f"branch {name}: its first attempt ended {first.get('outcome')!r}, not as an infrastructure error "
                f"({error})"
            )
    elif len(history) != 1:
        out.append(f"branch {name}: the run took {len(history)} attempts, expected one")
    got = rec.get("status")
    if got != status:
        detail = rec.get("censor_reason") or rec.get("agent_error") or rec.get("infra_error") or "no reason"
        out.append(
            f"branch {name}: the run ended {got} ({detail}); the design says {status}"
            + (f" ({reason})" if reason else "")
        )
    elif reason is not None and rec.get("censor_reason") != reason:
        out.append(f"branch {name}: censored at {rec.get('censor_reason')!r}, expected {reason!r}")
    if branch in ("cap_mid_run", "wall_limit", "api_500_mid_run") and rec.get("D") is None:
        out.append(f"branch {name}: the run was not evaluated on the deliverables as written (D missing)")
    if (
        branch == "cap_mid_run"
        and rec.get("metered_cost_usd") is not None
        and rec.get("caps_usd") is not None
        and Decimal(str(rec["metered_cost_usd"])) > Decimal(str(rec["caps_usd"]))
    ):
        out.append(
            f"branch {name}: metered {rec['metered_cost_usd']} USD is over the run's cap of {rec['caps_usd']} USD"
        )
    return out


def _transcript_events(transcript: Path) -> Iterator[dict]:
    """The events of the harness's copy of the CLI's stream, one JSON object a line (unreadable lines skipped)."""
    try:
        lines = Path(transcript).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            yield ev


def _blocks(ev: Mapping[str, Any]) -> list[dict]:
    """The content blocks of an event's message (none when it has no message)."""
    message = ev.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content or [] if isinstance(b, dict)] if isinstance(content, list) else []


def _bash_command(block: Mapping[str, Any]) -> str | None:
    """The command of a Bash tool call, None for any other block."""
    if block.get("type") == "tool_use" and block.get("name") == "Bash":
        return str((block.get("input") or {}).get("command", ""))
    return None


def reported_digests(transcript: Path) -> dict[str, str]:
    """path -> SHA-256 that the worker's own ``sha256sum`` tool calls printed, read from the harness's transcript
    (the tool results the CLI recorded), later sessions over earlier ones. Read there, not from the scripted server:
    a run stopped at its cap never sends the server the request that carries the last result."""
    from pilot.simulated.scripted_model import parse_sha256sum

    calls: set[str] = set()
    out: dict[str, str] = {}
    for ev in _transcript_events(transcript):
        for b in _blocks(ev):
            if ev.get("type") == "assistant" and " && sha256sum -- " in (_bash_command(b) or ""):
                calls.add(str(b.get("id")))
            elif (
                ev.get("type") == "user"
                and b.get("type") == "tool_result"
                and str(b.get("tool_use_id")) in calls
                and not b.get("is_error")
            ):
                content = b.get("content")
                text = (
                    content
                    if isinstance(content, str)
                    else "\n".join(str(c.get("text", "")) for c in content or [] if isinstance(c, dict))
                )
                out.update(parse_sha256sum(text))
    return out


def selfcheck_calls(transcript: Path) -> list[int]:
    """How many times each CLI session of the harness's transcript called the self-check through Bash.

    Sessions are told apart by the CLI's ``system``/``init`` event (a resume keeps the session id, so the id cannot).
    """
    counts: list[int] = []
    for ev in _transcript_events(transcript):
        if ev.get("type") == "system" and ev.get("subtype") == "init":
            counts.append(0)
        elif ev.get("type") == "assistant" and counts:
            counts[-1] += sum(1 for b in _blocks(ev) if "selfcheck.py" in (_bash_command(b) or ""))
    return counts


def check_controller(
    sessions: list[Mapping[str, Any]], rec: Mapping[str, Any], calls_per_session: list[int]
) -> list[str]:
    """The A4 controller against the scripted plan's predictions: the self-check verdicts, the resume decision (one at
    most), and the self-check observed as a tool call in each session of the harness's own transcript."""
    if not sessions:
        return ["self-check: no plan of the first session to hold the controller to"]
    first = sessions[0]
    out = []
    want_resume = first.get("resume_expected")
    if want_resume is None:
        return ["self-check: the scripted plan made no prediction for the A4 controller"]
    if rec.get("selfcheck_first") is None or bool(rec.get("selfcheck_first")) != bool(first.get("selfcheck_expected")):
        out.append(
            f"self-check: the controller's first verdict is {rec.get('selfcheck_first')!r}; the plan's "
            f"declarations say {'pass' if first.get('selfcheck_expected') else 'fail'}"
            + (
                f" (form criteria broken: {', '.join(first.get('selfcheck_breaks') or [])})"
                if first.get("selfcheck_breaks")
                else ""
            )
        )
    if bool(rec.get("recovery_used")) != bool(want_resume):
        out.append(
            f"recovery: the controller {'granted' if rec.get('recovery_used') else 'withheld'} the resume; "
            f"the plan says {first.get('resume_reason')} "
            f"({rec.get('recovery_skipped') or 'no reason recorded'})"
        )
    record_sessions = rec.get("sessions") or []
    if len(record_sessions) > 2:
        out.append(f"recovery: {len(record_sessions)} sessions; the arm grants one resume at most")
    if rec.get("recovery_used"):
        second = sessions[1] if len(sessions) > 1 else None
        if second is None:
            out.append("recovery: the controller resumed, but the scripted server played no second session")
        elif bool(rec.get("selfcheck_final")) != bool(second.get("selfcheck_expected")):
            out.append(
                f"self-check: the final verdict is {rec.get('selfcheck_final')!r}; the resume's plan says "
                f"{'pass' if second.get('selfcheck_expected') else 'fail'}"
            )
    elif rec.get("selfcheck_final") != rec.get("selfcheck_first"):
        out.append(
            f"self-check: no resume ran, yet the final verdict {rec.get('selfcheck_final')!r} differs from the first"
        )
    played = len(sessions) if rec.get("recovery_used") else 1
    for k in range(played):
        if k >= len(calls_per_session) or calls_per_session[k] < 1:
            out.append(f"self-check: the harness's transcript shows no self-check tool call in session {k + 1}")
        own = sessions[k].get("worker_selfcheck") if k < len(sessions) else None
        if (
            own is not None
            and sessions[k].get("selfcheck_expected") is not None
            and bool(own.get("passed")) != bool(sessions[k]["selfcheck_expected"])
        ):
            out.append(
                f"self-check: the worker's own self-check in session {k + 1} "
                f"{'passed' if own.get('passed') else 'failed'}; the plan says it "
                f"{'passes' if sessions[k]['selfcheck_expected'] else 'fails'} "
                f"({str(own.get('tail') or '')[-120:]})"
            )
    return out


# --------------------------------------------------------------------------
# Collect from a study
# --------------------------------------------------------------------------


def check_run(
    row: Mapping[str, Any],
    attempt: Mapping[str, Any],
    *,
    panel_size: int,
    pinned_cli: str,
    history: list[Mapping[str, Any]] | None = None,
) -> RunCheck:
    """Check one finished (or failed) run of the rehearsal against its records and the scripted worker's truth.

    ``history`` is every attempt of the run in order (the last is ``attempt``); the branch its first attempt played
    decides how the run must have ended.
    """
    from pilot.agents import audit, network
    from pilot.simulated import rehearsal_branches
    from pilot.simulated.scripted_model import read_truth, scripted_record_dir
    from pilot.workspace import harness_record_dir, transcript_path

    rec = json.loads(row["record_json"]) if row.get("record_json") else {}
    history = list(history) if history else [attempt]
    attempt_dir = Path(attempt["workspace"])
    chk = RunCheck(
        run_id=row["run_id"],
        scenario=row["scenario"],
        arm=row["arm"],
        status=row.get("run_status") or row["status"],
        attempts=int(row.get("attempts") or 0),
    )
    if not rec:
        chk.findings.append(
            f"run: not finished (cell {row['status']}; last error: "
            f"{(attempt.get('error') or 'none').splitlines()[0][:200]})"
        )
        return chk
    chk.wall_s, chk.harness_s = rec.get("wall_s"), rec.get("harness_s")
    chk.attempt_s = _seconds_between(attempt.get("started_at"), attempt.get("finished_at"))
    planned = (
        rehearsal_branches.read_record(scripted_record_dir(Path(history[0]["workspace"])))
        if history and history[0].get("workspace")
        else None
    )
    if chk.status != "completed" and not (planned and planned.worker):
        # A run that plays a worker branch is held to that branch's ending by check_branch instead.
        chk.findings.append(
            f"run: ended {chk.status} "
            f"({rec.get('censor_reason') or rec.get('agent_error') or rec.get('infra_error') or 'no reason'})"
        )
    if rec.get("backend") != backends.REHEARSAL:
        chk.findings.append(f"run: recorded backend {rec.get('backend')!r}, not {backends.REHEARSAL!r}")
    if rec.get("enforcement") in ("", None, "unisolated"):
        chk.findings.append(f"sandbox: the run was not isolated (enforcement {rec.get('enforcement')!r})")
    sessions = rec.get("sessions") or []
    chk.cli_sessions = sum(1 for s in sessions if s.get("cli_version"))
    if not chk.cli_sessions:
        chk.findings.append("cli: no session reported a CLI version: the pinned CLI did not run")
    elif any(s.get("cli_version") and s.get("cli_version") != pinned_cli for s in sessions):
        chk.findings.append(
            f"cli: a session ran CLI {sorted({s.get('cli_version') for s in sessions})}, not the pinned {pinned_cli}"
        )

    try:
        truths = read_truth(scripted_record_dir(attempt_dir))
    except (OSError, ValueError) as exc:
        truths = {}
        chk.findings.append(f"truth: the scripted server's record cannot be read ({exc})")
    for refusal in _server_refusals(scripted_record_dir(attempt_dir))[:5]:
        chk.findings.append(f"scripted server: could not play a request ({str(refusal.get('reason'))[:200]})")
    truth = truth_for_attempt(truths, attempt_dir, chk.scenario, chk.arm)
    branches_played = [
        rehearsal_branches.read_record(scripted_record_dir(Path(a["workspace"]))) for a in history if a.get("workspace")
    ]
    branches_played = [b for b in branches_played if b is not None]
    if truth is None:
        chk.findings.append(
            f"truth: the scripted server recorded no worker session for this run ({len(truths)} record(s))"
        )
        truth = {}

    summary = audit.read_transcript(transcript_path(attempt_dir))
    workspace = Path(rec.get("workspace") or attempt_dir / "workspace")
    chk.deliverables_expected = [str(d) for d in truth.get("deliverables") or []]
    if truth and not chk.deliverables_expected:
        chk.findings.append("deliverables: the scripted worker wrote no deliverable")
    chk.deliverables_by_tool, found = deliverables_by_tool(
        chk.deliverables_expected, workspace, truth.get("written") or {}, reported_digests(transcript_path(attempt_dir))
    )
    chk.findings += found

    chk.D = rec.get("D")
    chk.expected_pass = truth.get("expected_pass") if truth else None
    chk.findings += check_oracle(chk.D, chk.expected_pass) if truth else []
    if truth:
        chk.findings += check_declared(list(rec.get("criteria") or []), list(truth.get("declared") or []))
    sessions = list(truth.get("sessions") or [])
    if truth:
        planted_E = sessions[-1].get("expected_E") if sessions else None
        if planted_E is not None and rec.get("E") is not None and bool(rec.get("E")) != bool(planted_E):
            chk.findings.append(
                f"oracle: E={int(bool(rec.get('E')))} but the scripted worker planted E={int(bool(planted_E))} "
                f"({'; '.join(rec.get('E_reasons') or []) or 'no reason recorded'})"
            )
        errors = [(tid, text) for s in sessions for tid, text in (s.get("tool_errors") or {}).items()]
        for tid, text in errors[:5]:
            chk.findings.append(f"tool call {tid} of the scripted worker failed in the sandbox: {str(text)[:200]}")
        if any(s.get("portal_used") for s in sessions):
            use = (rec.get("portal") or {}).get("use") or {}
            if not rec.get("portal_requests") or not use.get("sign_in"):
                chk.findings.append(
                    f"portal: the scripted worker used the portal, but its access log shows "
                    f"{rec.get('portal_requests') or 0} request(s) and {use.get('sign_in') or 0} sign-in(s)"
                )
        arm = protocol.arms()[chk.arm]
        if arm.feature("self_check"):
            chk.findings += check_controller(sessions, rec, selfcheck_calls(transcript_path(attempt_dir)))
        elif rec.get("recovery_used"):
            chk.findings.append(f"recovery: arm {chk.arm} has no self-check, yet the controller resumed")
    chk.findings += check_labelled(truths, attempt_dir)
    first_branch = branches_played[0] if branches_played else None
    chk.branch = (first_branch.worker if first_branch else None) or "normal"
    chk.judge_branches = dict(first_branch.judges) if first_branch else {}
    if truth and first_branch is not None:
        resumed = bool(sessions and sessions[0].get("resume_expected"))
        chk.findings += check_branch(first_branch.worker, rec, list(history or []), recovery=resumed)

    chk.judges_total = panel_size
    chk.judges_parsed, jf = check_judges(rec.get("judges"), panel_size, judged_branch(attempt_dir))
    chk.findings += jf
    chk.findings += check_judge_branches(rec.get("judges"), judged_branch(attempt_dir))
    chk.findings += check_judge_grades(
        rec.get("judges") or [],
        read_scripted_grades(scripted_record_dir(attempt_dir)),
        {c.id: c.weight for c in load_scenario(chk.scenario).rubric.criteria},
    )

    judge_cost = rec.get("judge_cost_usd")
    chk.cli_cost_usd = None if rec.get("cost_usd") is None else str(finite_decimal(rec.get("cost_usd")))
    chk.metered_cost_usd = rec.get("metered_cost_usd")
    chk.judge_cost_usd = None if judge_cost is None else str(finite_decimal(judge_cost))
    charged = attempt.get("charged_micro")
    chk.charged_usd = None if charged is None else str(Decimal(int(charged)) / ledger.MICRO)
    chk.findings += reconcile_costs(
        rec.get("cost_usd"),
        rec.get("metered_cost_usd"),
        None if judge_cost is None else Decimal(str(float(judge_cost))),
        charged,
        attempt.get("charge_basis"),
        cli_stopped=rec.get("censor_reason") == "wall",
    )
    priced, requests = price_usage_log(
        sorted(harness_record_dir(attempt_dir).rglob(USAGE_LOG)), paths.PROTOCOL_DIR / "prices.yml"
    )
    chk.findings += check_usage_log(priced, requests, rec.get("metered_cost_usd"), judge_cost, charged)
    if judge_cost is not None and chk.judges_parsed and not finite_decimal(judge_cost):
        chk.findings.append("cost: the judges ran but their cost was recorded as 0 USD")

    deviations = rec.get("deviations") or []
    planted = planted_deviations(sessions)
    network_refused = sum(
        int(r.get("count", 1)) for r in network.read_refusals(harness_record_dir(attempt_dir) / network.REFUSAL_LOG)
    )
    chk.deviations, chk.planted_deviations = len(deviations), len(planted)
    chk.refusals = len(summary.permission_denied) + network_refused
    chk.findings += check_deviations(
        planted, deviations, len(summary.permission_denied), network_refused, planted_programs(sessions)
    )
    return chk


def _seconds_between(start: str | None, end: str | None) -> float | None:
    from datetime import datetime

    try:
        return round((datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds(), 1)
    except (TypeError, ValueError):
        return None


def _server_refusals(record_dir: Path) -> list[dict]:
    """The requests the scripted server could not play (its ``refusals.jsonl``): each a harness or script mismatch."""
    from pilot.simulated import scripted_model as scripted

    path = Path(record_dir) / getattr(scripted, "REFUSALS_FILE", "refusals.jsonl")
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            row = {"reason": f"unreadable line {line[:80]!r}"}
        out.append(row if isinstance(row, dict) else {"reason": str(row)})
    return out


def check_run_table(path: Path) -> list[str]:
    """Findings when the exported table lacks the real table's columns or fails its validation."""
    from pilot import runtable

    if not Path(path).is_file():
        return [f"run table: {path} was not exported"]
    out = []
    header = list(pd.read_csv(path, nrows=0).columns)
    want = [c.name for c in runtable.columns()]
    missing = [c for c in want if c not in header]
    if missing:
        out.append(f"run table: {path} lacks the columns {', '.join(missing)}")
    try:
        df = runtable.read_runtable(path)
    except runtable.RunTableError as exc:
        return out + [f"run table: fails validation: {exc}"]
    if runtable.data_label(df) != LABEL:
        out.append(f"run table: its label is {runtable.data_label(df)!r}, not {LABEL}")
    return out


def collect(
    name: str,
    *,
    run_table: Path | None = None,
    host_arms: list[str] | None = None,
    branch_plan: Path | str | None = None,
) -> RehearsalReport:
    """Check every run of rehearsal study ``name`` (its store under ``analysis/data/``).

    With ``branch_plan`` (the plan the rehearsal ran under) every branch must have been played by some run.
    """
    from pilot.nodes import host_arms as serve
    from pilot.simulated import rehearsal_branches
    from pilot.store import Store

    study = protocol.study()
    with Store.open(paths.study_dir(name)) as store:
        info = store.study()
        used = store.backends_used()
        rows = store.finished_rows()
        attempts = {
            a["run_id"]: a for a in sorted(store.attempts(), key=lambda a: a["attempt_no"])
        }  # the last attempt of each run
        history: dict[str, list[dict]] = {}
        for a in sorted(store.attempts(), key=lambda a: a["attempt_no"]):
            history.setdefault(a["run_id"], []).append(a)
        runs_attempt = {r["run_id"]: r["attempt_id"] for r in store.runs()}
        by_id = {a["attempt_id"]: a for a in store.attempts()}
    arms = list(info.arms or study.arms)
    host = list(host_arms) if host_arms is not None else serve()
    findings: list[str] = []
    if used != [backends.REHEARSAL]:
        findings.append(f"study: attempts ran on backend(s) {used or 'none'}, not {backends.REHEARSAL!r}")
    missing = [a for a in host if a not in arms]
    if missing:
        findings.append(f"study: this host serves {', '.join(missing)} but the rehearsal left them out")
    checks = []
    for row in rows:
        attempt = (
            by_id.get(runs_attempt.get(row["run_id"]))
            or attempts.get(row["run_id"])
            or {"workspace": "", "error": None}
        )
        checks.append(
            check_run(
                row,
                attempt,
                panel_size=len(study.judge_panel),
                pinned_cli=str(study["cli"]["version"]),
                history=history.get(row["run_id"]),
            )
        )
    if not checks:
        findings.append("study: no run was assigned")
    table = Path(run_table) if run_table else paths.study_runs_file(name)
    findings += check_run_table(table)
    report = RehearsalReport(
        study=name, arms=arms, host_arms=host, runs=checks, study_findings=findings, run_table=str(table)
    )
    plan = rehearsal_branches.load_plan(branch_plan) if branch_plan is not None else None
    if plan is not None:
        report.branches_planned = sorted(plan.played)
        every = set(rehearsal_branches.BRANCHES)
        missed = sorted(every - report.branches_played)
        if missed:
            report.study_findings.append(
                f"branches: never played across the runs: {', '.join(missed)} (the plan is {plan.source})"
            )
    return report


def write(report: RehearsalReport, out_dir: Path) -> dict[str, Path]:
    """``report.md`` and ``report.json`` under ``out_dir``."""
    from pilot.store import atomic_write_text

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = atomic_write_text(out_dir / REPORT_MD, report.to_markdown())
    js = atomic_write_text(out_dir / REPORT_JSON, json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    return {REPORT_MD: md, REPORT_JSON: js}
