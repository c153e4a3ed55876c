"""Judge panel members named provider/model in study.yml, each given its own provider's judge.

The real provider today is the pinned CLI (``claude-code``); a second one is
registered here by a test (``judge_files:second_provider``) to show that a
provider is one registry entry and one factory, with the panel, prompt and
schema check untouched. Dry runs keep their stand-in judges for every member.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from judge_files import FakeScenario, SecondProviderJudge, gold_outputs

from pilot import judge_providers, paths, protocol
from pilot.judges import judge_run, make_panel
from pilot.judges.claude_judge import ClaudeCodeJudge
from pilot.protocol import ProtocolError, load_study
from pilot.protocol.prices import study_models
from pilot.simulated.judge import SimulatedJudge

SECOND = judge_providers.JudgeProvider("second", "judge_files:second_provider")


def _study_with(tmp_path: Path, models: list[str]) -> Path:
    folder = tmp_path / "protocol"
    shutil.copytree(paths.PROTOCOL_DIR, folder, ignore=shutil.ignore_patterns("scenarios"))
    path = folder / "study.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for member, model in zip(data["judges"]["panel"], models, strict=True):
        member["model"] = model
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_the_study_panel_names_a_provider_and_a_model_for_each_member():
    panel = protocol.study().judge_panel
    # protocol/study.yml, as written: the CLI for every member, the models as priced.
    assert [(j["id"], j["provider"], j["model"], j["draw"]) for j in panel] == [
        ("J1", "claude-code", "claude-opus-5-5", 1),
        ("J2", "claude-code", "claude-sonnet-5-5", 1),
        ("J3", "claude-code", "claude-sonnet-5-5", 2),
    ]
    assert {"claude-opus-5-5", "claude-sonnet-5-5"} <= set(study_models(protocol.study()))
    assert "claude-code/claude-opus-5-5" not in study_models(protocol.study())


@pytest.mark.parametrize(
    "member, reason",
    [
        ("nobody/claude-opus-5-5", "unknown judge provider 'nobody'"),
        ("simulated/claude-opus-5-5", "is a stand-in (SIMULATED)"),
        ("claude-opus-5-5", "does not match"),
    ],
)
def test_a_panel_member_must_name_a_real_provider(tmp_path, member, reason):
    path = _study_with(tmp_path, [member, "claude-code/claude-sonnet-5-5", "claude-code/claude-sonnet-5-5"])
    with pytest.raises(ProtocolError) as exc:
        load_study(path)
    assert exc.value.path == path and exc.value.field == "judges.panel.0.model" and reason in str(exc.value)


def test_each_member_gets_its_own_providers_judge(tmp_path, monkeypatch):
    monkeypatch.setitem(judge_providers.REGISTRY, "second", SECOND)
    study = load_study(
        _study_with(
            tmp_path, ["second/other-model-1", "claude-code/claude-sonnet-5-5", "claude-code/claude-sonnet-5-5"]
        )
    )
    judges = make_panel("claude-code", study.judge_panel, claude_bin=Path("/nonexistent/claude"), study=study)
    assert isinstance(judges["J1"], SecondProviderJudge) and judges["J1"].made_with["study"] is study
    assert isinstance(judges["J2"], ClaudeCodeJudge) and judges["J2"] is judges["J3"]  # one judge per provider
    # A dry run's stand-in plays every member, whatever provider study.yml names.
    dry = make_panel("simulated", study.judge_panel, study=study)
    assert all(isinstance(j, SimulatedJudge) for j in dry.values())


def test_a_second_provider_judges_its_member_through_the_same_panel(tmp_path, monkeypatch):
    monkeypatch.setitem(judge_providers.REGISTRY, "second", SECOND)
    models = ["second/other-model-1", "second/other-model-2", "second/other-model-2"]
    study = load_study(_study_with(tmp_path, models))
    sc = FakeScenario(tmp_path)
    out = gold_outputs(tmp_path / "ws" / "outputs")
    results = judge_run(sc, out, backend="claude-code", seed=3, study=study)
    # Every criterion at 4 of 4: a weighted score of 100 (rubric weights sum to one, times 25).
    assert [(r.judge_id, r.model, r.backend, r.score_0_100) for r in results] == [
        ("J1", "other-model-1", "second-provider", 100.0),
        ("J2", "other-model-2", "second-provider", 100.0),
        ("J3", "other-model-2", "second-provider", 100.0),
    ]
