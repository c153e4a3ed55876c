"""docs/architecture.md's "Adding an arm", followed in a copy of the repository's protocol.

A sixth arm (A5: A3 plus web search through the model proxy) exists only in
a temporary root (``PILOT_ROOT``): the test touches exactly the files the
walk-through lists, counts them against the bound of ten, runs the arm on
the simulated backend (a stand-in agent: its run is SIMULATED) and holds a
request of it to the real proxy's policy check.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from pilot import paths

DOC = paths.ROOT / "docs" / "architecture.md"
SEARCH = {
    "web_search_20250305": {
        "name": "web_search",
        "usage": "web_search_requests",
        "max_uses": 3,
        "per_use": {"allowance": 20000},
    }
}


def walkthrough_files() -> list[str]:
    """The files the walk-through's numbered steps name, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Adding an arm", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\d+\. `([^`]+)`", section, flags=re.M)]


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _dump(path: Path, data: dict) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_sixth_arm_by_the_walkthrough(tmp_path):
    steps = walkthrough_files()
    assert steps[0] == "protocol/arms/arms.yml" and len(steps) < 10, steps
    root = tmp_path / "repo"
    shutil.copytree(paths.PROTOCOL_DIR, root / "protocol", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(paths.CONFIG_DIR, root / "analysis" / "config")
    before = _snapshot(root)

    # 1. The arm's entry: A3's, plus web search through the proxy.
    arms_file = root / "protocol" / "arms" / "arms.yml"
    arms = _yaml(arms_file)
    arms["arms"]["A5"] = {**arms["arms"]["A3"], "name": "full computer use with web search", "doc": "A5.md"}
    arms["arms"]["A5"]["proxy"] = {"server_tools": SEARCH}
    _dump(arms_file, arms)
    # 2. Its instructions.
    a3_doc = (root / "protocol" / "arms" / "A3.md").read_text(encoding="utf-8")
    (root / "protocol" / "arms" / "A5.md").write_text(a3_doc + "\nYou may search the web.\n", encoding="utf-8")
    # 3. The study runs it.
    study_file = root / "protocol" / "study.yml"
    text = study_file.read_text(encoding="utf-8")
    assert text.count("  arms: [A0, A1, A2, A3, A4]\n") == 1
    study_file.write_text(text.replace("  arms: [A0, A1, A2, A3, A4]\n", "  arms: [A0, A1, A2, A3, A4, A5]\n"), "utf-8")
    # 4. The fee of a search.
    prices_file = root / "protocol" / "prices.yml"
    prices_file.write_text(
        prices_file.read_text(encoding="utf-8") + "server_tools:\n  web_search_requests: 0.01\n", encoding="utf-8"
    )
    # 5. The simulated agent's model of it (A3's).
    sim_file = root / "analysis" / "config" / "simulated_agent.yml"
    sim = _yaml(sim_file)
    sim["arms"]["A5"] = sim["arms"]["A3"]
    _dump(sim_file, sim)
    # 6. The amendment.
    with (root / "protocol" / "amendments.csv").open("a", encoding="utf-8", newline="") as f:
        f.write('A-999,2026-12-06,before rerun pilot,Arm A5,"A test arm: A3 with web search through the proxy."\n')

    after = _snapshot(root)
    touched = sorted(k for k in after if before.get(k) != after[k])
    assert touched == sorted(step.replace("<ID>", "A5") for step in steps), (touched, steps)
    assert len(touched) < 10

    out = tmp_path / "run"
    script = f"""
import json, sys
from decimal import Decimal
from pilot import protocol
from pilot.agents.model_proxy import RequestRefused, check_request
from pilot.cli.main import main
from pilot.protocol.prices import PriceTable

arms = protocol.load_arms()
model = protocol.study()["worker"]["model"]
prices = PriceTable.load()
body = {{"model": model, "max_tokens": 100, "messages": [{{"role": "user", "content": "hi"}}],
         "tools": [{{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}}]}}
facts = check_request(body, count_tokens=False, models=frozenset([model]), prices=prices,
                      policy=arms["A5"].request_policy)
try:
    check_request(body, count_tokens=False, models=frozenset([model]), prices=prices,
                  policy=arms["A3"].request_policy)
    a3 = "allowed"
except RequestRefused as exc:
    a3 = exc.key
fee = str(prices.server_tools["web_search_requests"])
print(json.dumps({{"a5_uses": facts.server_tool_uses, "a3": a3, "fee": fee}}))
sys.exit(main(["run-one", "ACC-01", "A5", "--backend", "simulated", "--out", {str(out)!r}, "--seed", "7"]))
"""
    env = dict(os.environ, PILOT_ROOT=str(root))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads(proc.stdout.splitlines()[0])
    assert first == {"a5_uses": 2, "a3": "server_tool", "fee": "0.01"}
    record = json.loads((out / "run_record.json").read_text(encoding="utf-8"))
    assert record["arm"] == "A5" and record["backend"] == "simulated" and record["scenario"] == "ACC-01"
