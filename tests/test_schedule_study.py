"""A newcomer's path through ``pilot study``: create, run on the simulated backend, inspect, export."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from schedule_support import make_root

from pilot import runtable
from pilot.schedule import list_scenario_ids

# The study runs on the simulated backend through the oracle, which recalculates workbooks.
pytestmark = pytest.mark.usefixtures("soffice")


def test_simulated_study_end_to_end_from_the_command_line(tmp_path):
    scenarios = list_scenario_ids()
    if not scenarios:
        pytest.skip("no scenario bundle under protocol/scenarios yet")
    sid = scenarios[0]
    root = make_root(tmp_path)
    env = dict(os.environ, PILOT_ROOT=str(root))

    def pilot(*args):
        return subprocess.run(
            [sys.executable, "-m", "pilot", "study", *args], env=env, capture_output=True, text=True, timeout=300
        )

    made = pilot("create", "e2e", "--scenarios", sid)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["pilot_cells"] == 10

    ran = pilot("run", "e2e", "--backend", "simulated")  # default run function: runner, oracle, judges
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "spent $" in ran.stderr and "10/10" in ran.stderr  # the progress bar

    status = pilot("status", "e2e", "--json")
    info = json.loads(status.stdout)
    total = next(r for r in info["by_arm"] if r["arm"] == "all")
    assert total["done"] == 10 and info["ledger_problems"] == [] and info["envelope"]["reserved_usd"] == 0
    assert info["envelope"]["spent_usd"] > 0

    exported = pilot("export", "e2e")
    assert exported.returncode == 0, exported.stderr
    table = runtable.read_runtable(root / "analysis" / "data" / "e2e" / "runs.csv")
    assert len(table) == 10 and set(table["backend"]) == {"simulated"}
    assert sorted(table["order_index"]) == list(range(10)) and table["node"].notna().all()
    assert set(table.loc[table["arm"] == "A2", "node"]) == {"mac-1"}
    # a second run of a finished study dispatches nothing and changes nothing
    again = pilot("run", "e2e", "--no-progress")
    assert again.returncode == 0 and re.search(r"dispatched attempts\s+0\n", again.stdout), again.stdout
    assert json.loads(pilot("status", "e2e", "--json").stdout) == info
