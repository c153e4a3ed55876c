"""``pilot study export --format inspect``: the study's runs read back by Inspect's own reader and data frames."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from view_support import SCENARIO, pilot, simulated_study

from pilot.view import conversation
from pilot.view.inspect_log import SCORES, export_inspect
from pilot.view.study import StudyReader


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = simulated_study()
    out = tmp_path_factory.mktemp("inspect")
    done = export_inspect(StudyReader(folder), out)
    assert done.samples == 10  # the study's ten runs
    return StudyReader(folder), done.logs, out


def test_one_log_per_arm_and_one_sample_per_run_with_the_run_table_scores(exported):
    from inspect_ai.log import read_eval_log

    reader, logs, _ = exported
    rows = {r["run_id"]: r for r in reader.index_rows()}
    assert len(logs) == 5  # the study: one scenario, five arms, one model
    seen = set()
    for path in logs:
        log = read_eval_log(str(path))
        arm = log.eval.metadata["arm"]
        assert log.eval.metadata["label"] == "SIMULATED" and log.eval.model == reader.info.worker_model
        assert log.eval.dataset.samples == len(log.samples) == 2  # two repeats of the one scenario
        for s in log.samples:
            row = rows[s.id]
            seen.add(s.id)
            assert row["arm"] == arm and s.metadata["scenario"] == SCENARIO and s.epoch == row["repeat"]
            for k in SCORES:
                want = row.get(k)
                if want is None or (isinstance(want, float) and math.isnan(want)):
                    assert k not in s.scores and k in s.metadata["missing_scores"]
                else:
                    assert s.scores[k].value == pytest.approx(float(want)), (s.id, k)
    assert seen == set(rows)


def test_the_conversation_is_the_transcript_s_tool_calls_and_text(exported):
    from inspect_ai.log import read_eval_log

    reader, logs, _ = exported
    log = read_eval_log(str(next(p for p in logs if "_A1_" in p.name)))
    s = log.samples[0]
    conv = conversation.read(reader.run_attempts(s.id)[-1].transcript)
    tools = [i for i in conv.items if i.kind == "tool"]
    assert tools, "the simulated A1 run calls tools"
    calls = [c for m in s.messages if m.role == "assistant" for c in (m.tool_calls or [])]
    assert [c.function for c in calls] == [i.name for i in tools]
    results = [m for m in s.messages if m.role == "tool"]
    assert len(results) == len(tools) and [m.tool_call_id for m in results] == [c.id for c in calls]
    assert s.messages[0].role == "user" and "BRIEF.md" in s.messages[0].text


def test_inspect_s_data_frames_read_the_logs(exported):
    from inspect_ai.analysis import evals_df, samples_df

    _, logs, out = exported
    ev = evals_df(str(out))
    assert len(ev) == len(logs)
    sm = samples_df(str(out))
    assert len(sm) == 10 and isinstance(sm, pd.DataFrame)


def test_the_command_writes_the_logs_and_says_where(tmp_path):
    folder = simulated_study()
    root = folder.parent.parent.parent
    out = tmp_path / "logs"
    done = pilot(root, "study", "export", folder.name, "--format", "inspect", "--out", str(out))
    said = json.loads(done.stdout)
    assert said["format"] == "inspect" and said["samples"] == 10 and len(said["logs"]) == 5
    assert sorted(p.name for p in out.glob("*.eval")) == sorted(p.split("/")[-1] for p in said["logs"])
