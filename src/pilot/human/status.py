"""Where each session of a wave stands: what the experimenter's page and ``pilot human status`` show.

One row per participant (never their contact): condition, scenario, state,
the clock (started, time left, submitted, time on task, active time), the H1
assistant's use, the experimenter's intervention minutes and, once the run
is evaluated, its D and E.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from pilot.human import session, store
from pilot.store import HUMAN_WAVE, Store


def clock_text(seconds: float) -> str:
    """Seconds as ``H:MM:SS``."""
    s = max(0, int(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def utc_time(stamp: str) -> str:
    """A timestamp of the store (ISO 8601) as the pages show it, to the second: ``2026-12-06 09:47:06 UTC``."""
    if not stamp:
        return ""
    return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def status_rows(st: Store, wave: str, *, at: float | None = None) -> list[dict[str, Any]]:
    """The wave's sessions in plan order (refused for an unknown wave)."""
    store.wave(st.conn, wave)
    now_epoch = time.time() if at is None else at
    verdicts = {
        r["run_id"]: {"D": r["D"], "E": r["E"], "run_status": r["status"]}
        for r in st.conn.execute(
            "SELECT r.run_id, e.D, e.E, r.status FROM runs r LEFT JOIN evaluations e USING (run_id) "
            "JOIN cells c USING (run_id) WHERE c.wave = ?",
            (HUMAN_WAVE,),
        )
    }
    out = []
    for r in store.participants(st.conn, wave):
        pid = r["participant_id"]
        clock = session.clock_of(r)
        exchanges = store.exchanges(st.conn, wave, pid)
        out.append(
            {
                "participant_id": pid,
                "occupation": r["occupation"],
                "condition": r["condition"],
                "scenario": r["scenario"],
                "status": r["status"],
                "run_id": r["run_id"],
                "started": r["started_at"] or "",
                "left": clock_text(clock.left(now_epoch)) if clock is not None and r["status"] == "started" else "",
                "submitted": r["submitted_at"] or "",
                "ended_by": r["ended_by"] or "",
                "time_on_task": clock_text(float(r["time_on_task_s"])) if r["time_on_task_s"] is not None else "",
                "active": clock_text(store.active_seconds(st.conn, wave, pid)),
                "exchanges": sum(1 for e in exchanges if e["status"] == "answered"),
                "assistant_usd": f"{sum(float(e['cost_usd'] or 0) for e in exchanges):.4f}",
                "intervention": store.intervention_minutes(st.conn, wave, pid),
                "verdict": verdicts.get(r["run_id"]),
                "note": r["evaluation_note"] or "",
            }
        )
    return out
