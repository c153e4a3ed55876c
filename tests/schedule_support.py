"""Helpers shared by the scheduler's tests: study stores in temporary folders and a controllable executor."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from pilot import paths, protocol
from pilot.attempt import AttemptOutcome, CellSpec
from pilot.nodes import Node
from pilot.schedule import build_cells
from pilot.store import Store

SCENARIOS = ["ACC-01", "BANK-01", "LEGAL-01", "RES-01", "OPS-01"]
REQUIRES = {a: arm.requires for a, arm in protocol.arms().items()}
NODES = [
    Node("linux-1", frozenset({"linux", "libreoffice", "chromium", "portal"}), 2),
    Node("linux-2", frozenset({"linux", "libreoffice", "chromium", "portal"}), 2),
    Node("mac-1", frozenset({"macos"}), 1),
]


def make_store(
    folder: Path,
    *,
    name: str = "t",
    seed: int = 11,
    scenarios: list[str] | None = None,
    envelope: float = 800.0,
    wave: str = "pilot",
) -> Store:
    scen = scenarios or SCENARIOS
    st = Store.create(
        folder / name,
        name=name,
        seed=seed,
        protocol_version="1.0",
        worker_model="claude-opus-5-5",
        envelope_usd=envelope,
        scenarios=scen,
    )
    st.add_cells(build_cells(name, wave, scen, seed))
    return st


def make_root(tmp: Path) -> Path:
    """A repository root for subprocesses: the real protocol, an empty analysis folder (PILOT_ROOT points here)."""
    root = tmp / "root"
    (root / "analysis" / "data").mkdir(parents=True)
    os.symlink(protocol.study().path.parent, root / "protocol")
    os.symlink(paths.CONFIG_DIR, root / "analysis" / "config")
    return root


def read_only(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


class ControlledExecutor:
    """An executor test double: holds submitted attempts until the test (or a policy) finishes them.

    ``on_submit`` is called at every submit with (cell, node), so a test can
    assert invariants at the moment of dispatch. ``policy`` maps a cell and
    its attempt folder to the outcome it finishes with; ``batch`` is how many
    held attempts finish per ``wait`` (oldest first).
    """

    def __init__(
        self,
        policy: Callable[[CellSpec, Path], AttemptOutcome],
        *,
        batch: int = 1,
        on_submit: Callable[[CellSpec, str], None] | None = None,
    ) -> None:
        self.policy = policy
        self.batch = batch
        self.on_submit = on_submit
        self.held: list[tuple[int, CellSpec, str, Path]] = []
        self.submitted: list[tuple[str, str]] = []

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None:
        if self.on_submit:
            self.on_submit(cell, node)
        self.submitted.append((cell.run_id, node))
        self.held.append((token, cell, node, Path(attempt_dir)))

    def wait(self, timeout: float) -> list[tuple[int, AttemptOutcome]]:
        done, self.held = self.held[: self.batch], self.held[self.batch :]
        return [(tok, self.policy(cell, folder)) for tok, cell, node, folder in done]

    def close(self) -> None:
        pass


def completed(cost: float = 0.5, judge: float = 0.05) -> Callable[[CellSpec, Path], AttemptOutcome]:
    def policy(cell: CellSpec, folder: Path) -> AttemptOutcome:
        return AttemptOutcome(
            record={"run_id": cell.run_id, "status": "completed"}, cost_usd=cost, judge_cost_usd=judge
        )

    return policy


def outcome_record(cell: CellSpec) -> dict:
    """A complete, valid run record for ``cell`` (what the pipeline would return), without running anything."""
    study = protocol.study()
    judges = [
        {
            "judge_id": j["id"],
            "model": j["model"],
            "score_0_100": 70.0,
            "accept": True,
            "cost_usd": 0.01,
            "error": None,
            "criterion_scores": {},
        }
        for j in study.judge_panel
    ]
    a4 = cell.arm == "A4"
    return {
        "scenario": cell.scenario,
        "arm": cell.arm,
        "model": cell.model,
        "status": "completed",
        "censored": False,
        "D": True,
        "E": False,
        "E_reasons": [],
        "criteria_passed": 3,
        "criteria_total": 4,
        "judges": judges,
        "cost_usd": 1.0,
        "cost_complete": True,
        "wall_s": 30.0,
        "turns": 4,
        "tool_calls": 6,
        "questions": 0,
        "completion_status": "completed",
        "selfcheck_first": True if a4 else None,
        "recovery_used": False,
        "selfcheck_final": True if a4 else None,
    }


def finish_cells(store: Store, *, failed: int = 0, workspace: Path | None = None) -> None:
    """Finish every waiting cell with a valid record, except the first ``failed`` ones, which fail on infrastructure."""
    ws = workspace or store.folder / "workspaces"
    for k, cell in enumerate(store.cells(status="waiting")):
        if k < failed:
            while store.counts()["failed"] < k + 1:
                a = store.begin_attempt(cell, "linux-1", "simulated", ws)
                store.finish_attempt(
                    a.attempt_id, AttemptOutcome(infra_error="transfer failed", cost_usd=0.0), max_infra_attempts=3
                )
            continue
        a = store.begin_attempt(cell, "linux-1", "simulated", ws)
        store.finish_attempt(
            a.attempt_id,
            AttemptOutcome(record=outcome_record(cell), cost_usd=1.0, judge_cost_usd=0.03),
            max_infra_attempts=3,
        )
