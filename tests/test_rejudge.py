"""The rendering sensitivity: finished runs judged again under the workbook rendering before A-027.

On a copy of the viewer's simulated study (ACC-01 under the five arms,
twice; judged by the pipeline under the recalculated rendering), every run
is judged again under ``stored`` with the same simulated panel and the run's
own seed. The simulated judges' stated rendering effect
(``analysis/config/simulated_judges.yml``, ``rendering_effect``) is what may
differ: a workbook shown with bare formulas loses quality, a text substitute
(A0's CSV) has no formula to lose it on. Q and S per arm under both
renderings are written for the manuscript, labelled SIMULATED.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from view_support import simulated_study

from pilot import paths, rejudge
from pilot.judges.render import DEFAULT_RENDERING
from pilot.simulated.judge import load_config
from pilot.store import Store


@pytest.fixture(scope="module")
def rejudged(tmp_path_factory):
    base = tmp_path_factory.mktemp("rejudge")
    folder = shutil.copytree(simulated_study(), base / "viewsim", symlinks=True)
    first = rejudge.rejudge_study(folder)
    again = rejudge.rejudge_study(folder)
    return folder, first, again


def test_every_judged_run_is_judged_once_more_under_the_other_rendering(rejudged):
    folder, first, again = rejudged
    with Store.open(folder) as st:
        rows = {r["run_id"]: json.loads(r["record_json"]) for r in st.finished_rows() if r.get("record_json")}
        stored = st.conn.execute("SELECT run_id, rendering, judge_backend, n_judges FROM rejudgements").fetchall()
    judged = {rid for rid, rec in rows.items() if rec.get("judge_rendering") == DEFAULT_RENDERING}
    assert judged and set(first.judged) == {
        rid for rid in judged if rejudge.judged_q(rows[rid]["judges"])[0] is not None
    }
    assert {r[1] for r in stored} == {"stored"} and {r[2] for r in stored} == {"simulated"}
    assert first.label == "SIMULATED" and first.cost_usd > 0
    # A second call judges nothing again.
    assert again.judged == [] and sorted(again.already) == sorted(first.judged) and again.cost_usd == 0


def test_bare_formulas_cost_quality_under_the_earlier_rendering_and_a_substitute_loses_nothing(rejudged):
    folder, _, _ = rejudged
    paired = rejudge.paired_runs(folder)
    assert not paired.empty and paired["Q_stored"].notna().all() and paired["Q_recalculated"].notna().all()
    assert load_config().raw["rendering_effect"]["uncomputed_formulas"] > 0
    # A0 delivers its workbook as CSV text: nothing to show without a value, so the same grades (same seed).
    a0 = paired[paired.arm == "A0"]
    assert not a0.empty and (a0.Q_stored == a0.Q_recalculated).all()
    # The others deliver openpyxl workbooks (no stored values): same noise, lower quality, never a higher grade,
    # except where the earlier rendering hid an error value that the recalculated copy shows (=1/0 stores none).
    with Store.open(folder) as st:
        ws = {
            r[0]: r[1]
            for r in st.conn.execute("SELECT x.run_id, a.workspace FROM runs x JOIN attempts a USING (attempt_id)")
        }
    from pilot.judges.prompt import requested_names
    from pilot.judges.recalculated import Recalculated
    from pilot.judges.render import render_package
    from pilot.scenarios import load_scenario

    names = requested_names(load_scenario("ACC-01"))
    for row in paired[paired.arm != "A0"].itertuples():
        attempt = Path(ws[row.run_id])
        package = render_package(attempt / "workspace" / "outputs", names, recalculated=Recalculated.load(attempt))
        errors = sum(int(d.features.get("n_error_values", 0)) for d in package.deliverables)
        if errors == 0:
            assert row.Q_stored <= row.Q_recalculated, row.run_id
    workbook_arms = paired[paired.arm != "A0"]
    assert (workbook_arms.Q_stored < workbook_arms.Q_recalculated).any()


def test_q_and_s_per_arm_under_both_renderings_are_written_for_the_manuscript(rejudged, tmp_path):
    folder, _, _ = rejudged
    env = dict(os.environ, PILOT_ROOT=str(paths.ROOT))
    tables, generated = tmp_path / "tables", tmp_path / "generated"
    proc = subprocess.run(
        [sys.executable, "-m", "pilot", "study", "rejudge", str(folder), "--report-only",
         "--tables-dir", str(tables), "--generated-dir", str(generated)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = pd.read_csv(tables / rejudge.TABLE_CSV)
    assert sorted(summary.arm) == ["A0", "A1", "A2", "A3", "A4"] and set(summary.label) == {"SIMULATED"}
    # The table's numbers are the paired runs' scenario-weighted means (one scenario: the plain means here).
    paired = rejudge.paired_runs(folder)
    for r in summary.itertuples():
        runs = paired[paired.arm == r.arm]
        assert r.n == len(runs)
        assert r.Q_stored == pytest.approx(runs.Q_stored.mean()) and r.Q_recalculated == pytest.approx(
            runs.Q_recalculated.mean()
        )
        assert r.S_stored == pytest.approx(runs.S_stored.astype(float).mean())
        assert r.delta_Q == pytest.approx(r.Q_recalculated - r.Q_stored)
    contrasts = pd.read_csv(tables / rejudge.CONTRASTS_CSV)
    assert contrasts.contrast.iloc[0] == "A3-A1"
    tex = (generated / rejudge.TABLE_TEX).read_text()
    assert "SIMULATED" in tex and "tab:rendering-sensitivity" in tex and "A3" in tex
    assert "\\newcommand{\\RenderingLabel}{SIMULATED}" in (generated / rejudge.MACROS_TEX).read_text()
