"""Protocol fidelity per arm, and each arm's run flow from assignment to analysis.

Two tables a referee asks for beside the run flow of the whole study:

* ``flow_by_arm``: the CONSORT-style path of each arm's cells, from assigned
  to analysed, with the runs that left the path at each step counted where
  they left it;
* ``fidelity``: what departed from the protocol in each arm: deviations by
  the route that stopped them, critical violations, agent errors, censoring
  by reason, failed evaluations, and the nodes the runs ran on.

Both are read from the store (cells, attempts, each run's record) and the
exported run table, so they describe the study they were built from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pandas as pd

# The steps of an arm's flow, in order, with what each counts; ``left`` marks
# the counts of runs that leave the path at that step rather than pass it.
FLOW_BY_ARM: tuple[tuple[str, str], ...] = (
    ("assigned", "cells (scenario, repeat) assigned to the arm, all waves"),
    ("dispatched", "cells with at least one attempt"),
    ("infrastructure reruns", "attempts that failed for infrastructure or were interrupted and were rerun"),
    ("failed", "cells that ran out of infrastructure attempts (no outcome)"),
    ("finished", "cells with an outcome recorded"),
    ("completed", "finished runs that ended on their own"),
    ("capped", "finished runs stopped at a cap (censored)"),
    ("agent error", "finished runs whose agent ended in an error"),
    ("evaluated", "finished runs the oracles evaluated without an evaluation error"),
    ("judged", "evaluated runs with at least one judge score"),
    ("other model", "judged runs of a model-sensitivity wave (not in the primary analysis)"),
    ("analysed", "runs of the worker model with an acceptance value (the primary analysis)"),
)

#: How a deviation was stopped (the record's ``blocked_by``), in the words the table prints.
ROUTES: dict[str, str] = {
    "cli_rule": "stopped by a CLI permission rule",
    "mask": "stopped by the sandbox's program mask",
    "tool_absent": "tool absent from the arm",
    "no_network": "stopped by the sandbox's network namespace",
    "refusing_proxy": "stopped by the refusing proxy",
    "refused": "refused connection",
    "not_run": "written, never run",
    "not_blocked": "not blocked",
}
_FAILED_ATTEMPTS = ("infra_error", "interrupted")


def _flag(values: pd.Series) -> pd.Series:
    """A yes/no column read as booleans, missing as no (the run table writes True/False, 1/0 or nothing)."""
    return values.map(lambda v: str(v).strip().lower() in ("true", "1", "1.0", "yes"))


def _arm_of(run_ids: Iterable[str], cells: pd.DataFrame) -> pd.Series:
    arm = dict(zip(cells["run_id"], cells["arm"], strict=True)) if len(cells) else {}
    return pd.Series([arm.get(r) for r in run_ids], dtype=object)


#: The column of the flow that holds the model-sensitivity runs, apart from the worker model's arms.
OTHER_MODELS = "other models"


def flow_by_arm(
    cells: pd.DataFrame, attempts: pd.DataFrame, runs: pd.DataFrame, arms: list[str], worker_model: str
) -> pd.DataFrame:
    """One row per step of :data:`FLOW_BY_ARM`, one column per arm of the worker model, one for every run of the
    model-sensitivity models (when there are any: never pooled into their arm), and ``total``."""
    out: dict[str, list[int]] = {}
    # Each cell's model: the store's cells say it; a table of cells without it takes the model from the run table.
    source = cells if len(cells) and "model" in cells else runs
    model_of = dict(zip(source["run_id"], source["model"], strict=True)) if len(source) and "model" in source else {}
    a_arm = _arm_of(attempts["run_id"], cells) if len(attempts) else pd.Series(dtype=object)
    a_worker = (
        pd.Series([model_of.get(r, worker_model) == worker_model for r in attempts["run_id"]], dtype=bool)
        if len(attempts)
        else pd.Series(dtype=bool)
    )
    c_worker = (
        pd.Series(
            [model_of.get(r, worker_model) == worker_model for r in cells["run_id"]], index=cells.index, dtype=bool
        )
        if len(cells)
        else pd.Series(dtype=bool)
    )
    r_worker = (runs["model"] == worker_model) if len(runs) else pd.Series(dtype=bool)
    others = bool(len(cells)) and not bool(c_worker.all())
    columns: list[tuple[str, pd.Series, pd.Series, pd.Series]] = []
    for arm in arms:
        columns.append(
            (
                arm,
                (cells["arm"] == arm) & c_worker if len(cells) else pd.Series(dtype=bool),
                (a_arm == arm).to_numpy() & a_worker.to_numpy() if len(attempts) else pd.Series(dtype=bool),
                (runs["arm"] == arm) & r_worker if len(runs) else pd.Series(dtype=bool),
            )
        )
    if others:
        columns.append(
            (
                OTHER_MODELS,
                ~c_worker,
                ~a_worker.to_numpy() if len(attempts) else pd.Series(dtype=bool),
                ~r_worker if len(runs) else pd.Series(dtype=bool),
            )
        )
    for arm, c_mask, a_mask, r_mask in columns:
        c = cells[c_mask] if len(cells) else cells
        a = attempts[a_mask] if len(attempts) else attempts
        r = runs[r_mask] if len(runs) else runs
        status = r["status"].astype(str) if len(r) else pd.Series(dtype=str)
        evaluated = (
            (r["D"].notna() & (r["eval_error"].isna() | (r["eval_error"].astype(str) == "")))
            if len(r)
            else pd.Series(dtype=bool)
        )
        judged = (
            evaluated & (pd.to_numeric(r["n_judges"], errors="coerce").fillna(0) > 0)
            if len(r)
            else pd.Series(dtype=bool)
        )
        worker = (r["model"] == worker_model) if len(r) else pd.Series(dtype=bool)
        analysed = worker & r["S"].notna() if len(r) else pd.Series(dtype=bool)
        out[arm] = [
            len(c),
            int(a["run_id"].nunique()) if len(a) else 0,
            int(a["outcome"].isin(_FAILED_ATTEMPTS).sum()) if len(a) else 0,
            int((c["status"] == "failed").sum()) if len(c) else 0,
            int((c["status"] == "done").sum()) if len(c) else 0,
            int((status == "completed").sum()),
            int((status == "capped").sum()),
            int((status == "agent_error").sum()),
            int(evaluated.sum()),
            int(judged.sum()),
            int((judged & ~worker).sum()),
            int(analysed.sum()),
        ]
    table = pd.DataFrame({"step": [s for s, _ in FLOW_BY_ARM], **out})
    shown = [k for k in out]
    table["total"] = table[shown].sum(axis=1) if shown else 0
    return table


def _deviation_routes(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per run id: how many of its deviations each route stopped."""
    got: dict[str, dict[str, int]] = {}
    for rec in records:
        devs = rec.get("deviations") or []
        if not isinstance(devs, list):
            continue
        for d in devs:
            route = str(d.get("blocked_by") or "unrecorded") if isinstance(d, Mapping) else "unrecorded"
            got.setdefault(str(rec.get("run_id")), {}).setdefault(route, 0)
            got[str(rec["run_id"])][route] += 1
    return got


def records_of(store_runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each finished run's record (``runs.record_json``), with its run id."""
    out = []
    for row in store_runs:
        try:
            rec = json.loads(row["record_json"])
        except (TypeError, ValueError):
            rec = {}
        out.append({**(rec if isinstance(rec, dict) else {}), "run_id": row["run_id"]})
    return out


def _named(runs: pd.DataFrame, column: str) -> pd.Series:
    """Whether each run has a non-empty text in ``column`` (all False for a table without it)."""
    if column not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs[column].notna() & (runs[column].astype(str).str.strip() != "")


def fidelity(
    runs: pd.DataFrame, records: Iterable[Mapping[str, Any]], arms: list[str], worker_model: str | None = None
) -> pd.DataFrame:
    """One row per measure of protocol fidelity, one column per arm and ``all``.

    With ``worker_model``, the arms' columns count the worker model's runs and the other models' runs (the
    model-sensitivity wave) have a column of their own (:data:`OTHER_MODELS`), never pooled into their arm.

    Rows: finished runs; runs with a deviation and the deviations by the route
    that stopped them (only routes that occur); runs with a critical violation;
    agent errors; capped runs by the cap reached; runs whose evaluation failed;
    runs a harness fault after inference shaped (``harness_fault``); and the runs per node. Every count is over the
    finished runs of the export.
    """
    routes = _deviation_routes(records)
    rows: list[tuple[str, dict[str, int]]] = []
    if worker_model is not None and len(runs) and "model" in runs and (runs["model"] != worker_model).any():
        runs = runs.assign(arm=runs["arm"].where(runs["model"] == worker_model, OTHER_MODELS))
        arms = [*arms, OTHER_MODELS]

    def per_arm(f: Callable[..., Any]) -> dict[str, int]:
        vals = {a: int(f(runs[runs["arm"] == a])) if len(runs) else 0 for a in arms}
        vals["all"] = int(f(runs)) if len(runs) else 0
        return vals

    rows.append(("finished runs", per_arm(len)))
    dev = pd.to_numeric(runs["deviations"], errors="coerce").fillna(0) if len(runs) else pd.Series(dtype=float)
    runs = runs.assign(_dev=dev)
    rows.append(("runs with a deviation", per_arm(lambda r: (r["_dev"] > 0).sum())))
    seen = sorted(
        {k for v in routes.values() for k in v},
        key=lambda k: (list(ROUTES).index(k) if k in ROUTES else len(ROUTES), k),
    )
    for route in seen:
        words = ROUTES.get(route, route.replace("_", " "))
        rows.append(
            (
                f"deviations {words}",
                per_arm(lambda r, route=route: sum(routes.get(str(i), {}).get(route, 0) for i in r["run_id"])),
            )
        )
    rows.append(("runs with a critical violation (E)", per_arm(lambda r: _flag(r["E"]).sum())))
    rows.append(("agent errors", per_arm(lambda r: (r["status"] == "agent_error").sum())))
    reasons = sorted(set(runs.loc[_flag(runs["censored"]), "censor_reason"].dropna().astype(str))) if len(runs) else []
    for reason in reasons:
        rows.append(
            (
                f"capped at the {reason} cap",
                per_arm(
                    lambda r, reason=reason: (_flag(r["censored"]) & (r["censor_reason"].astype(str) == reason)).sum()
                ),
            )
        )
    rows.append(
        ("evaluation errors", per_arm(lambda r: (r["eval_error"].notna() & (r["eval_error"].astype(str) != "")).sum()))
    )
    # A harness fault after inference leaves the run its own outcome (never rerun); each one is counted here.
    rows.append(("harness faults after inference", per_arm(lambda r: _named(r, "harness_fault").sum())))
    # Where the arm's limits were, and were not, enforced: a stand-in agent runs in no sandbox, and a macOS arm
    # served by a host that is not macOS never had its macOS enforcement exercised.
    by_id = {str(rec.get("run_id")): rec for rec in records}
    unsandboxed = {i for i, rec in by_id.items() if str(rec.get("enforcement") or "") == "simulated"}
    off_platform = {
        i for i, rec in by_id.items() if any("requires a macOS node" in str(n) for n in rec.get("notes") or [])
    }
    rows.append(
        (
            "runs without the arm's sandbox (simulated agent)",
            per_arm(lambda r: r["run_id"].astype(str).isin(unsandboxed).sum()),
        )
    )
    rows.append(
        (
            "runs of a macOS arm on a host that is not macOS",
            per_arm(lambda r: r["run_id"].astype(str).isin(off_platform).sum()),
        )
    )
    for node in sorted(set(runs["node"].dropna().astype(str))) if len(runs) else []:
        rows.append((f"runs on node {node}", per_arm(lambda r, node=node: (r["node"].astype(str) == node).sum())))
    return pd.DataFrame([{"measure": m, **v} for m, v in rows])


def resume_decisions(records: Iterable[Mapping[str, Any]], runs: pd.DataFrame, arm: str) -> pd.DataFrame:
    """The controller's decision on the one recovery resume for every finished run of ``arm``: granted, withheld or
    not needed, with the reason in words (:func:`pilot.view.sessions.resume_decision`; numbers such as the seconds
    left are dropped, so like reasons count together). Columns: decision, reason, runs.
    """
    from pilot.view.sessions import resume_decision

    arms = dict(zip(runs["run_id"].astype(str), runs["arm"].astype(str), strict=True)) if len(runs) else {}
    counts: dict[tuple[str, str], int] = {}
    for rec in records:
        if arms.get(str(rec.get("run_id"))) != arm:
            continue
        d = resume_decision(dict(rec))
        reason = re.sub(r"\s*\([^()]*\d[^()]*\)", "", d.why).strip()
        counts[(d.headline, reason)] = counts.get((d.headline, reason), 0) + 1
    order = {"resume granted": 0, "resume withheld": 1, "resume not granted": 2, "no resume needed": 3}
    out = [
        {"decision": h, "reason": r, "runs": n}
        for (h, r), n in sorted(counts.items(), key=lambda kv: (order.get(kv[0][0], 9), -kv[1], kv[0][1]))
    ]
    return pd.DataFrame(out, columns=["decision", "reason", "runs"])


#: The groups of the failure taxonomy, in the order the table prints them.
FAILURE_GROUPS: tuple[tuple[str, str], ...] = (
    ("failed criterion", "kinds"),
    ("deviation", "deviations"),
    ("critical violation", "violations"),
    ("cap reached", "caps"),
)


def failure_taxonomy(rows: list[dict[str, Any]], worker_model: str, arms: list[str]) -> pd.DataFrame:
    """What failed, per arm of the worker model, counted from every run's record: runs failing at least one oracle
    criterion of each kind (out of the evaluated runs), runs with a deviation of each family, a critical violation
    of each kind and a cap of each kind reached (out of the finished runs). The counts are the viewer's "why" page's
    (:mod:`pilot.view.aggregates`), restricted to the worker model's runs.

    Columns: group, what, then per arm the runs showing it and, in ``<arm>_of``, the runs that could.
    """
    from pilot.view import aggregates

    mine = [r for r in rows if str(r.get("model") or "") == worker_model and str(r.get("arm")) in arms]
    cols = [c for c in aggregates.columns_of(mine, worker_model) if not c.sensitivity]
    tables = {
        "kinds": aggregates.failed_kinds(mine, cols, worker_model),
        "deviations": aggregates.deviation_families(mine, cols, worker_model),
        "violations": aggregates.violations(mine, cols, worker_model),
        "caps": aggregates.caps_hit(mine, cols, worker_model),
    }
    by_arm = {c.arm: c.key for c in cols}
    out = []
    for group, key in FAILURE_GROUPS:
        for t in tables[key]:
            rec: dict[str, Any] = {"group": group, "what": t.label}
            for a in arms:
                cell = t.cells.get(by_arm.get(a, ""), aggregates.Cell())
                rec[a], rec[f"{a}_of"] = int(cell.hits), int(cell.of)
            out.append(rec)
    return pd.DataFrame(out, columns=["group", "what", *[x for a in arms for x in (a, f"{a}_of")]])
