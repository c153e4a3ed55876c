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


def flow_by_arm(
    cells: pd.DataFrame, attempts: pd.DataFrame, runs: pd.DataFrame, arms: list[str], worker_model: str
) -> pd.DataFrame:
    """One row per step of :data:`FLOW_BY_ARM`, one column per arm and ``total``."""
    out: dict[str, list[int]] = {}
    a_arm = _arm_of(attempts["run_id"], cells) if len(attempts) else pd.Series(dtype=object)
    for arm in arms:
        c = cells[cells["arm"] == arm] if len(cells) else cells
        a = attempts[(a_arm == arm).to_numpy()] if len(attempts) else attempts
        r = runs[runs["arm"] == arm] if len(runs) else runs
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
    table["total"] = table[arms].sum(axis=1) if arms else 0
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


def fidelity(runs: pd.DataFrame, records: Iterable[Mapping[str, Any]], arms: list[str]) -> pd.DataFrame:
    """One row per measure of protocol fidelity, one column per arm and ``all``.

    Rows: finished runs; runs with a deviation and the deviations by the route
    that stopped them (only routes that occur); runs with a critical violation;
    agent errors; capped runs by the cap reached; runs whose evaluation failed;
    runs a harness fault after inference shaped (``harness_fault``); and the runs per node. Every count is over the
    finished runs of the export.
    """
    routes = _deviation_routes(records)
    rows: list[tuple[str, dict[str, int]]] = []

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
    for node in sorted(set(runs["node"].dropna().astype(str))) if len(runs) else []:
        rows.append((f"runs on node {node}", per_arm(lambda r, node=node: (r["node"].astype(str) == node).sum())))
    return pd.DataFrame([{"measure": m, **v} for m, v in rows])
