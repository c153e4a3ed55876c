"""The judge panel: rubric, output schema, retry-then-missing, and the SIMULATED judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from judge_files import RUBRIC, FakeScenario, gold_outputs, write_csv, write_memo, write_workbook

from pilot import paths, protocol
from pilot.judges import JudgeResult, criteria_from, judge_run, prompt_for_run, weighted_score
from pilot.judges.backend import JudgeReply, JudgeRequest
from pilot.judges.rubric import RubricError
from pilot.judges.schema import VerdictError, output_schema, parse_verdict
from pilot.simulated.judge import SimulatedJudge, deliverable_quality, load_config

CRITERIA = criteria_from(RUBRIC)


# ---------------------------------------------------------------- rubric


def test_weighted_score_is_the_weighted_mean_times_25() -> None:
    # weights 3, 2, 1: (3*4 + 2*2 + 1*0) / 6 = 16/6 on 0-4 -> x25
    assert weighted_score({"accuracy": 4, "completeness": 2, "clarity": 0}, CRITERIA) == pytest.approx(16 / 6 * 25)
    assert weighted_score({"accuracy": 4, "completeness": 4, "clarity": 4}, CRITERIA) == 100.0
    assert weighted_score({"accuracy": 0, "completeness": 0, "clarity": 0}, CRITERIA) == 0.0
    with pytest.raises(KeyError, match="clarity"):
        weighted_score({"accuracy": 4, "completeness": 4}, CRITERIA)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r["criteria"][1].pop("weight"), "criteria.1.weight"),
        (lambda r: r["criteria"][0].__setitem__("weight", -1), "criteria.0.weight"),
        (lambda r: r["criteria"][2]["anchors"].pop(2), "criteria.2.anchors"),
        (lambda r: r["criteria"][2].__setitem__("id", "accuracy"), "criteria.2.id"),
        (lambda r: r.__setitem__("criteria", []), "criteria"),
    ],
)
def test_bad_rubric_is_refused_naming_the_field(mutate, field: str) -> None:
    rubric = json.loads(json.dumps(RUBRIC))
    for c in rubric["criteria"]:
        c["anchors"] = {int(k): v for k, v in c["anchors"].items()}
    mutate(rubric)
    with pytest.raises(RubricError) as err:
        criteria_from(rubric, source="rubric.yml")
    assert err.value.field == field and "rubric.yml" in str(err.value)


# ---------------------------------------------------------------- schema


def test_valid_reply_parses_plain_and_fenced() -> None:
    body = {
        "criterion_scores": {"accuracy": 3, "completeness": 4, "clarity": 2},
        "accept": False,
        "rationale": "Travel overrun unexplained.",
    }
    v = parse_verdict(json.dumps(body), CRITERIA)
    assert v.criterion_scores == {"accuracy": 3, "completeness": 4, "clarity": 2} and v.accept is False
    fenced = "My view:\n```json\n" + json.dumps(body) + "\n```"
    assert parse_verdict(fenced, CRITERIA) == v


@pytest.mark.parametrize(
    "reply, message",
    [
        (
            '{"criterion_scores": {"accuracy": 5, "completeness": 4, "clarity": 2}, "accept": true, "rationale": "x"}',
            "criterion_scores.accuracy",
        ),
        (
            (
                '{"criterion_scores": {"accuracy": 2.5, "completeness": 4, "clarity": 2}, "accept": true, '
                '"rationale": "x"}'
            ),
            "criterion_scores.accuracy",
        ),
        ('{"criterion_scores": {"accuracy": 3, "completeness": 4}, "accept": true, "rationale": "x"}', "clarity"),
        (
            (
                '{"criterion_scores": {"accuracy": 3, "completeness": 4, "clarity": 2, "style": 1}, "accept": '
                'true, "rationale": "x"}'
            ),
            "style",
        ),
        (
            '{"criterion_scores": {"accuracy": 3, "completeness": 4, "clarity": 2}, "accept": "yes", "rationale": "x"}',
            "accept",
        ),
        ('{"criterion_scores": {"accuracy": 3, "completeness": 4, "clarity": 2}, "accept": true}', "rationale"),
        (
            (
                '{"criterion_scores": {"accuracy": true, "completeness": 4, "clarity": 2}, "accept": true, '
                '"rationale": "x"}'
            ),
            "accuracy",
        ),
        ("I would accept this.", "no JSON object"),
        ('{"criterion_scores": {"accuracy": 3,', "no JSON object"),
    ],
)
def test_reply_breaking_the_schema_is_refused(reply: str, message: str) -> None:
    with pytest.raises(VerdictError, match=message):
        parse_verdict(reply, CRITERIA)


def test_schema_lists_exactly_the_rubric_ids() -> None:
    s = output_schema(CRITERIA)
    assert s["properties"]["criterion_scores"]["required"] == ["accuracy", "completeness", "clarity"]
    assert s["additionalProperties"] is False and s["required"] == ["criterion_scores", "accept", "rationale"]


# ---------------------------------------------------------------- panel


class ScriptedJudge:
    """A backend answering from a per-judge script of replies (a test double of a judge model)."""

    name = "scripted"

    def __init__(self, script: dict[str, list[JudgeReply]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.requests: list[JudgeRequest] = []

    def complete(self, request: JudgeRequest) -> JudgeReply:
        self.requests.append(request)
        return self.script[request.judge_id].pop(0)


def _ok(scores: tuple[int, int, int], accept: bool = True, cost: float = 0.01) -> JudgeReply:
    return JudgeReply(
        json.dumps(
            {
                "criterion_scores": dict(zip(["accuracy", "completeness", "clarity"], scores, strict=True)),
                "accept": accept,
                "rationale": "r",
            }
        ),
        cost,
    )


def test_panel_is_the_study_panel_and_scores_each_judge(tmp_path: Path) -> None:
    sc = FakeScenario(tmp_path)
    out = gold_outputs(tmp_path / "ws" / "outputs")
    backend = ScriptedJudge({"J1": [_ok((4, 4, 4))], "J2": [_ok((2, 2, 2), False)], "J3": [_ok((4, 2, 0))]})
    results = judge_run(sc, out, backend=backend, seed=5)
    panel = protocol.study().judge_panel
    assert [(r.judge_id, r.model, r.draw) for r in results] == [(j["id"], j["model"], j["draw"]) for j in panel]
    assert [r.score_0_100 for r in results] == [100.0, 50.0, pytest.approx(16 / 6 * 25)]
    assert [r.accept for r in results] == [True, False, True]
    # Every judge sees the same prompt, in its own call.
    assert len({r.prompt for r in backend.requests}) == 1 and len(backend.requests) == 3
    assert all(r.available and r.attempts == 1 and r.error is None for r in results)


def test_schema_failure_is_retried_once_then_the_judge_is_missing(tmp_path: Path) -> None:
    sc = FakeScenario(tmp_path)
    out = gold_outputs(tmp_path / "ws" / "outputs")
    bad = JudgeReply('{"criterion_scores": {"accuracy": 9}}', 0.02)
    backend = ScriptedJudge(
        {
            "J1": [bad, _ok((3, 3, 3), cost=0.03)],
            "J2": [bad, bad],
            "J3": [JudgeReply(None, 0.0, "API overloaded"), JudgeReply(None, 0.0, "API overloaded")],
        }
    )
    j1, j2, j3 = judge_run(sc, out, backend=backend, seed=5)
    assert j1.available and j1.attempts == 2 and j1.score_0_100 == 75.0 and j1.cost_usd == pytest.approx(0.05)
    assert not j2.available and j2.attempts == 2 and j2.score_0_100 is None and "output schema" in j2.error
    assert j2.cost_usd == pytest.approx(0.04) and j2.accept is None
    assert not j3.available and j3.error == "API overloaded"
    retry = [r for r in backend.requests if r.judge_id == "J1"][1]
    assert retry.attempt == 1 and "previous answer could not be used" in retry.prompt


def test_judge_result_round_trips_to_dict() -> None:
    r = JudgeResult("J1", "m", 1, "simulated", {"a": 3}, True, "ok", 75.0, 0.01, 1, None)
    assert JudgeResult(**r.to_dict()) == r


# ---------------------------------------------------------------- simulated judge


def test_simulated_panel_is_deterministic_in_the_seed(tmp_path: Path) -> None:
    sc = FakeScenario(tmp_path)
    out = gold_outputs(tmp_path / "ws" / "outputs")
    a = judge_run(sc, out, backend="simulated", seed=11)
    b = judge_run(sc, out, backend="simulated", seed=11)
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    draws = {
        tuple(tuple(sorted(r.criterion_scores.items())) for r in judge_run(sc, out, backend="simulated", seed=s))
        for s in range(12)
    }
    assert len(draws) > 1  # the noise is real
    assert all(r.backend == "simulated" and "SIMULATED" in r.rationale for r in a if r.available)
    assert all(r.cost_usd > 0 for r in a)
    opus = [r for r in a if "opus" in r.model][0]
    sonnet = [r for r in a if "sonnet" in r.model][0]
    assert opus.cost_usd > sonnet.cost_usd  # priced per model from the config


def _mean_score(sc: FakeScenario, out: Path, seeds: range) -> tuple[float, float]:
    scores, accepts = [], []
    for s in seeds:
        for r in judge_run(sc, out, backend="simulated", seed=s):
            if r.available:
                scores.append(r.score_0_100)
                accepts.append(r.accept)
    return sum(scores) / len(scores), sum(accepts) / len(accepts)


def test_simulated_judge_reads_the_observable_features(tmp_path: Path) -> None:
    sc = FakeScenario(tmp_path)
    gold = gold_outputs(tmp_path / "gold" / "outputs")
    # The study's judges read a workbook from its recalculated copy, every formula with its value; a workbook
    # that stores its computed values shows them the same, without a LibreOffice pass in this test.
    write_workbook(gold / "budget.xlsx", cached=True)
    flat = tmp_path / "flat" / "outputs"
    flat.mkdir(parents=True)
    write_workbook(flat / "budget.xlsx", formulas=False)
    write_memo(flat / "memo.docx", sections={"Summary": "Spend was on plan."}, table=False)
    sub = tmp_path / "sub" / "outputs"
    sub.mkdir(parents=True)
    write_csv(sub / "budget.csv", [["Line", "Budget"], ["Total", "1300"]])
    (sub / "memo.md").write_text("# Memo\n## Summary\n" + "Spend was on plan. " * 20, encoding="utf-8")
    half = tmp_path / "half" / "outputs"
    half.mkdir(parents=True)
    write_workbook(half / "budget.xlsx")
    seeds = range(25)
    g, f, s, h = (_mean_score(sc, d, seeds) for d in (gold, flat, sub, half))
    assert g[0] >= 80 and g[1] >= 0.8
    assert g[0] > f[0] > s[0]
    assert h[1] == 0.0  # a missing file is never accepted
    assert h[0] < g[0] - 25


def test_deliverable_quality_follows_the_stated_model(tmp_path: Path) -> None:
    cfg = load_config().raw["quality"]
    sc = FakeScenario(tmp_path)
    out = gold_outputs(tmp_path / "o")
    write_workbook(out / "budget.xlsx", cached=True, error=True)
    prompt = prompt_for_run(sc, out)
    book, memo, record = prompt.package.deliverables
    assert record.status == "delivered" and "status: completed" in record.text
    assert deliverable_quality(book, cfg) == pytest.approx(1 - cfg["per_error_value"])
    assert deliverable_quality(memo, cfg) == 1.0
    (out / "memo.docx").unlink()
    missing = prompt_for_run(sc, out).package.deliverables[1]
    assert deliverable_quality(missing, cfg) == 0.0


def test_malformed_simulated_replies_exercise_retry(tmp_path: Path) -> None:
    cfg = yaml.safe_load(paths.SIMULATED_JUDGES_FILE.read_text(encoding="utf-8"))
    for j in cfg["judges"].values():
        j["malformed_rate"] = 1.0
    p = tmp_path / "sim.yml"
    p.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    sc = FakeScenario(tmp_path)
    out = gold_outputs(tmp_path / "ws" / "outputs")
    results = judge_run(sc, out, backend=SimulatedJudge(load_config(p)), seed=3)
    assert all(not r.available and r.attempts == 2 and "output schema" in r.error for r in results)
    assert all(r.cost_usd > 0 for r in results)  # a failed reply still costs money


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda c: c["judges"]["J1"].pop("noise_sd"), "judges.J1"),
        (lambda c: c["judges"]["J2"].__setitem__("malformed_rate", 1.5), "judges.J2.malformed_rate"),
        (lambda c: c["quality"].__setitem__("substitute", "half"), "quality.substitute"),
        (lambda c: c.__setitem__("surprise", 1), "<root>"),
    ],
)
def test_bad_simulated_config_names_file_and_field(tmp_path: Path, edit, field: str) -> None:
    cfg = yaml.safe_load(paths.SIMULATED_JUDGES_FILE.read_text(encoding="utf-8"))
    edit(cfg)
    p = tmp_path / "simulated_judges.yml"
    p.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with pytest.raises(protocol.ProtocolError) as err:
        load_config(p)
    assert err.value.field == field and "simulated_judges.yml" in str(err.value)


def test_unknown_backend_is_refused(tmp_path: Path) -> None:
    sc = FakeScenario(tmp_path)
    with pytest.raises(ValueError, match="unknown judge backend"):
        judge_run(sc, gold_outputs(tmp_path / "o"), backend="gpt", seed=1)
