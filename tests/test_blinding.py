"""The judges are blind: no arm, model, node, cost, event stream, oracle or other judge's output reaches a prompt.

Real prompts are rendered for every arm from real files: packages written
the way each arm's worker writes them (A0's text substitutes with a note on
its limits, A1/A2's openpyxl and python-docx files, A3/A4's LibreOffice and
self-check mentions), in workspaces whose paths encode the run id, and, where
the scenario bundles exist, every scenario's gold deliverables and the
runner's own simulated runs.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from judge_files import FakeScenario, write_csv, write_memo, write_record, write_workbook

from pilot import protocol
from pilot.judges import build_prompt, judge_prompt, judge_run, prompt_for_run
from pilot.judges.backend import JudgeReply, JudgeRequest
from pilot.judges.blinding import is_tell, scrub

NODE = "mac-mini-03"
STUDY = "blinding-study-7"
COST = "1.0734"

ARM_NOTES = {
    "A0": [
        (
            "Note: this memo is a Markdown substitute for memo.docx because binary office formats cannot be "
            "produced in this environment."
        ),
        "I only had the file tools (Read, Write, Edit, Glob, Grep) and no shell, so the workbook is delivered as CSV.",
    ],
    "A1": [
        "The workbook was generated with openpyxl from a Python script run in the Bash tool.",
        "The memo text went through the Write tool first; run FIN-09.A1.r2 of blinding-study-7 on mac-mini-03.",
    ],
    "A2": [
        "The memo was converted with textutil and checked with osascript.",
        "Run FIN-09.A2.r2 finished on mac-mini-03.",
    ],
    "A3": [
        "All totals were recalculated with LibreOffice headless before delivery.",
        "Bank balances were read from the portal (portal_credentials.json) with Playwright and Chromium.",
        "As the full computer use arm A3, I had every tool available.",
    ],
    "A4": [
        "The self-check passed on the second try after the recovery session resumed the previous session.",
        "CHECKPOINT.md was kept up to date throughout.",
        "Prepared by Claude (claude-opus-5-5) as an AI agent; total_cost_usd was 1.0734.",
    ],
}


def _run_dir(root: Path, arm: str) -> Path:
    return (
        root / "analysis" / "data" / STUDY / "workspaces" / f"FIN-09.{arm}.r2" / "attempt-1" / "workspace" / "outputs"
    )


def _questions(tells: bool) -> list[str]:
    q = ["Should capital items deferred to January be accrued?"]
    return (["Should I have recalculated the workbook in LibreOffice?"] + q) if tells else q


def write_arm_package(root: Path, arm: str, *, tells: bool) -> Path:
    """The package an arm's worker would hand in, with (or without) its tell-tale notes."""
    out = _run_dir(root, arm)
    out.mkdir(parents=True, exist_ok=True)
    notes = ARM_NOTES[arm] if tells else []
    source = f"Source: {out.parent / 'inputs' / 'ledger.csv'}" if tells else "Source: ledger.csv"
    if arm == "A0":
        write_csv(out / "budget.csv", [["Line", "Budget", "Actual"], ["Total", "1300", "1250"], [source, "", ""]])
        body = (
            "# Third-quarter budget review\n\n"
            + "\n\n".join(notes)
            + "\n\n## Summary\nSpending came to 1,250 thousand.\n\n## Findings\nTravel ran 12 per cent over plan.\n"
        )
        (out / "memo.md").write_text(body, encoding="utf-8")
        subs = [
            {
                "requested": "budget.xlsx",
                "delivered": "budget.csv",
                "reason": "no shell: binary formats cannot be produced (arm A0)",
            },
            {"requested": "memo.docx", "delivered": "memo.md", "reason": "restricted arm, file tools only"},
        ]
        write_record(
            out,
            ["budget.csv", "memo.md"],
            substitutions=subs,
            questions=_questions(tells),
            notes=" ".join(notes) + " Travel overrun traced to the September conference.",
        )
    else:
        write_workbook(out / "budget.xlsx", cached=arm in ("A3", "A4"))
        write_memo(out / "memo.docx", extra=notes + [source])
        write_record(
            out,
            ["budget.xlsx", "memo.docx"],
            questions=_questions(tells),
            notes=" ".join(notes) + " Travel overrun traced to the September conference.",
        )
    return out


def forbidden_strings(root: Path, arm: str) -> list[str]:
    """What must never reach a judge: condition, model, node, cost, paths, harness words, arm documentation."""
    study = protocol.study()
    arms = protocol.arms()
    models = {
        study["worker"]["model"],
        *study["sensitivity_models"]["models"],
        *(j["model"] for j in study.judge_panel),
    }
    out = [
        *arms,
        *models,
        NODE,
        STUDY,
        COST,
        "FIN-09.",
        str(root),
        "claude",
        "anthropic",
        "LibreOffice",
        "soffice",
        "textutil",
        "osascript",
        "Playwright",
        "Chromium",
        "portal_credentials",
        "self-check",
        "CHECKPOINT",
        "recovery session",
        "substitute",
        "file tools",
        "no shell",
        "Bash tool",
        "total_cost_usd",
        "computer use",
        "restricted arm",
        "AI agent",
        "event stream",
        "stream-json",
    ]
    # No sentence of the arms' documentation or the common policy either.
    for doc in [a.doc_path for a in arms.values()] + [next(iter(arms.values())).doc_path.parent / "policy.md"]:
        text = " ".join(doc.read_text(encoding="utf-8").split())
        out += [s.strip() for s in re.split(r"(?<=[.:])\s+", text) if len(s.strip()) > 40]
    return out


def assert_blind(prompt: str, root: Path, arm: str) -> None:
    lower = prompt.lower()
    for s in forbidden_strings(root, arm):
        if re.fullmatch(r"A\d", s):
            assert not re.search(rf"\b{s}\b", prompt), f"arm id {s} reached the prompt"
        else:
            assert s.lower() not in lower, f"{s!r} reached the prompt of {arm}"


@pytest.mark.parametrize("arm", list(ARM_NOTES))
def test_no_tell_reaches_the_prompt_of_any_arm(tmp_path: Path, arm: str) -> None:
    sc = FakeScenario(tmp_path / "protocol")
    out = write_arm_package(tmp_path, arm, tells=True)
    prompt = prompt_for_run(sc, out, withheld=[f"FIN-09.{arm}.r2", NODE, STUDY]).text
    assert_blind(prompt, tmp_path, arm)
    # The work itself still reaches the judge.
    assert "1,250 thousand" in prompt and "Travel ran 12 per cent over plan" in prompt
    assert "Travel overrun traced to the September conference." in prompt
    assert "questions (1):\n- Should capital items deferred to January be accrued?" in prompt
    assert "Source: ledger.csv" in prompt
    if arm == "A0":
        assert "in another format: requested budget.xlsx, delivered budget.csv (a reason is given)" in prompt
        assert "(received as memo.md: plain text)" in prompt


@pytest.mark.parametrize("arm", list(ARM_NOTES))
def test_tells_change_nothing_in_the_prompt(tmp_path: Path, arm: str) -> None:
    """The same work with and without the arm's tells gives the same prompt, byte for byte."""
    sc = FakeScenario(tmp_path / "protocol")
    told = prompt_for_run(
        sc, write_arm_package(tmp_path / "told", arm, tells=True), withheld=[f"FIN-09.{arm}.r2", NODE, STUDY]
    ).text
    clean = prompt_for_run(sc, write_arm_package(tmp_path / "clean", arm, tells=False)).text
    assert told == clean


def test_arms_with_the_same_files_get_the_same_prompt(tmp_path: Path) -> None:
    """A1 and A2 deliver the same openpyxl files: nothing in their prompts tells them apart."""
    sc = FakeScenario(tmp_path / "protocol")
    prompts = {
        a: prompt_for_run(sc, write_arm_package(tmp_path, a, tells=True), withheld=[f"FIN-09.{a}.r2", NODE, STUDY]).text
        for a in ("A1", "A2")
    }
    assert prompts["A1"] == prompts["A2"]


def test_prompt_builders_take_nothing_that_could_carry_the_condition() -> None:
    banned = {
        "arm",
        "arm_id",
        "model",
        "node",
        "cost",
        "cost_usd",
        "record",
        "transcript",
        "events",
        "oracle",
        "evaluation",
        "judges",
        "other_judges",
    }
    for fn in (build_prompt, prompt_for_run, judge_run, judge_prompt):
        params = set(inspect.signature(fn).parameters)
        assert not params & banned, f"{fn.__name__} takes {params & banned}"


def test_no_judge_sees_another_judges_output(tmp_path: Path) -> None:
    sc = FakeScenario(tmp_path / "protocol")
    out = write_arm_package(tmp_path, "A3", tells=False)
    seen: list[JudgeRequest] = []

    class Recorder:
        name = "recorder"

        def complete(self, request: JudgeRequest) -> JudgeReply:
            seen.append(request)
            marker = f"MARKER-{request.judge_id}"
            return JudgeReply(
                json.dumps(
                    {"criterion_scores": {c.id: 2 for c in request.criteria}, "accept": False, "rationale": marker}
                ),
                0.01,
            )

    judge_run(sc, out, backend=Recorder(), seed=1)
    assert len({r.prompt for r in seen}) == 1
    assert not any("MARKER" in r.prompt for r in seen)


def test_oracle_and_run_record_never_enter(tmp_path: Path) -> None:
    """The run record, transcript and oracle evaluation live beside the outputs; none is read."""
    sc = FakeScenario(tmp_path / "protocol")
    out = write_arm_package(tmp_path, "A4", tells=False)
    run_dir = out.parent.parent
    (run_dir / "run_record.json").write_text(json.dumps({"arm": "A4", "cost_usd": 1.0734, "D": True}), encoding="utf-8")
    (run_dir / "transcript.jsonl").write_text(
        '{"type": "system", "subtype": "init", "model": "claude-opus-5-5"}\n', encoding="utf-8"
    )
    (out / "evaluation.json").write_text(
        json.dumps({"criteria": [{"id": "oracle_total_ties", "passed": False}]}), encoding="utf-8"
    )
    prompt = prompt_for_run(sc, out).text
    for s in ("oracle_total_ties", "1.0734", "run_record", "transcript", "init"):
        assert s not in prompt


@pytest.mark.parametrize(
    "fragment, tell",
    [
        ("Totals recalculated in LibreOffice.", True),
        ("Delivered as CSV because I have no shell.", True),
        ("This is a text substitute for the workbook.", True),
        ("The restricted shares vest in 2027.", False),
        ("Shell Canada Ltd. is the counterparty.", False),
        ("Checkpoint review on 12 December.", False),
        ("Substitute counsel will attend the hearing.", False),
        ("Cell A1 holds the title; A3 the date.", False),
        ("The environment only benefits when emissions fall.", False),
        ("We cannot create a new vendor code without approval.", False),
        ("The tenant could not open the office before noon.", False),
        ("I could not produce an Excel workbook, so the figures are in CSV.", True),
        ("My environment does not allow running programs.", True),
        ("Prepared by Claude.", True),
    ],
)
def test_tell_detector_is_specific(fragment: str, tell: bool) -> None:
    assert is_tell(fragment) is tell


def test_scrub_keeps_table_shape_and_strips_paths() -> None:
    text = (
        "| 1 | Recalculated with LibreOffice | 1300 |\nSee /home/u/runs/ACC-01.A3.r1/outputs/report.docx for details."
    )
    out = scrub(text, withheld=["ACC-01.A3.r1"])
    assert out.splitlines()[0] == "| 1 |  | 1300 |"
    assert out.splitlines()[1] == "See report.docx for details."


# ---------------------------------------------------------------- real scenarios


def _scenario_ids() -> list[str]:
    try:
        from pilot.scenarios import list_scenarios
    except ImportError:
        return []
    return list_scenarios()


@pytest.mark.parametrize("sid", _scenario_ids())
def test_real_scenarios_gold_packages_with_every_arms_tells(tmp_path: Path, sid: str) -> None:
    from pilot.scenarios import build_gold_workspace, load_scenario

    sc = load_scenario(sid)
    base = build_gold_workspace(sc, tmp_path / "gold")
    clean = prompt_for_run(sc, base / "outputs").text
    for arm, notes in ARM_NOTES.items():
        ws = build_gold_workspace(sc, tmp_path / STUDY / "workspaces" / f"{sid}.{arm}.r1" / "workspace")
        rec_path = ws / "outputs" / "completion_record.json"
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
        rec["notes"] = (" ".join(notes) + " " + rec.get("notes", "")).strip()
        rec_path.write_text(json.dumps(rec), encoding="utf-8")
        prompt = prompt_for_run(sc, ws / "outputs", withheld=[f"{sid}.{arm}.r1", NODE, STUDY]).text
        assert_blind_real(prompt, tmp_path, arm)
        assert prompt == clean, f"{sid} {arm}: the tells changed the prompt"


@pytest.mark.parametrize("sid", _scenario_ids())
def test_scrubbing_removes_nothing_from_a_real_gold_package(tmp_path: Path, sid: str) -> None:
    """No false positives: the reference solver's own work passes the scrubber untouched."""
    from pilot.judges.prompt import requested_names
    from pilot.judges.render import render_package
    from pilot.scenarios import build_gold_workspace, load_scenario

    sc = load_scenario(sid)
    ws = build_gold_workspace(sc, tmp_path / "gold")
    text = render_package(ws / "outputs", requested_names(sc)).text
    assert scrub(text) == text
    assert "### completion_record.json" in text


def assert_blind_real(prompt: str, root: Path, arm: str) -> None:
    # Real workbooks may name cells such as A1 in formulas: check arm ids in prose contexts only.
    lower = prompt.lower()
    for s in forbidden_strings(root, arm):
        if re.fullmatch(r"A\d", s):
            assert not re.search(rf"\b(arm\s+{s}|{s}\s+arm)\b", prompt, re.I), s
        else:
            assert s.lower() not in lower, f"{s!r} reached the prompt of {arm}"


@pytest.mark.usefixtures("soffice")
@pytest.mark.parametrize("arm", list(ARM_NOTES))
def test_runner_outputs_of_every_arm_reach_judges_blind(tmp_path: Path, arm: str) -> None:
    from pilot import runner
    from pilot.scenarios import load_scenario

    sid = _scenario_ids()[0]
    run_id = f"{sid}.{arm}.r1"
    rec = runner.run_attempt(
        sid, arm, backend="simulated", out_dir=tmp_path / STUDY / "workspaces" / run_id / "attempt-1", seed=7
    ).to_dict()
    assert rec["status"] != "infra_error", rec.get("infra_error")
    prompt = prompt_for_run(load_scenario(sid), Path(rec["workspace"]) / "outputs", withheld=[run_id, NODE, STUDY]).text
    assert_blind_real(prompt, tmp_path, arm)
