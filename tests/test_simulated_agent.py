"""The SIMULATED agent: real files from the solver plus drawn defects, deterministic from the seed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from pilot import paths, protocol
from pilot.protocol import ProtocolError
from pilot.runner import run_attempt
from pilot.simulated import agent as simulated
from pilot.simulated.agent import SessionDraw, SimulatedBackend, apply_caps, load_model

SID = "LEGAL-01"  # no workbook: no LibreOffice in these tests


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _stable(rec) -> dict:
    d = rec.to_dict()
    for k in ("workspace", "transcript", "started_at", "harness_s"):
        d.pop(k)
    return d


def _run(tmp_path: Path, arm: str, seed: int, name: str | None = None):
    return run_attempt(SID, arm, backend="simulated", out_dir=tmp_path / "runs" / (name or f"{arm}-{seed}"), seed=seed)


def test_the_model_file_is_valid_and_covers_every_arm():
    model = load_model()
    assert set(model["arms"]) == set(protocol.arms())
    assert "SIMULATED" in simulated.model_text()


def test_a_malformed_model_is_refused_naming_file_and_field(tmp_path):
    bad = yaml.safe_load(paths.SIMULATED_AGENT_FILE.read_text())
    del bad["arms"]["A1"]["cost_median"]
    f = tmp_path / "simulated_agent.yml"
    f.write_text(yaml.safe_dump(bad))
    with pytest.raises(ProtocolError) as err:
        load_model(f)
    assert err.value.path == f and err.value.field == "arms.A1" and "cost_median" in err.value.reason


def test_same_seed_same_attempt_other_seed_other_draws(tmp_path):
    a = _run(tmp_path, "A1", 11, "a")
    b = _run(tmp_path, "A1", 11, "b")
    c = _run(tmp_path, "A1", 12, "c")
    assert _stable(a) == _stable(b)
    assert _digest(Path(a.workspace)) == _digest(Path(b.workspace))
    assert Path(a.transcript).read_text().replace("/runs/a/", "/runs/b/") == Path(b.transcript).read_text()
    assert (a.cost_usd, a.turns, a.tool_calls) != (c.cost_usd, c.turns, c.tool_calls)


def test_simulated_outputs_say_so(tmp_path):
    rec = _run(tmp_path, "A3", 3)
    assert rec.backend == "simulated" and any("SIMULATED" in n for n in rec.notes)
    events = [json.loads(x) for x in Path(rec.transcript).read_text().splitlines()]
    assert events and all(e.get("simulated") is True for e in events)
    assert (tmp_path / "runs" / "A3-3" / "agent" / "SIMULATED_agent_model.yml").read_text() == simulated.model_text()
    draws = (tmp_path / "runs" / "A3-3" / "agent" / "simulated_draws.jsonl").read_text().splitlines()
    assert all(json.loads(d)["SIMULATED"] is True for d in draws)


def test_a0_delivers_text_substitutes_declared_in_the_record(tmp_path):
    sc = type("S", (), {"id": SID, "designed_depth": 3})()
    backend = SimulatedBackend(
        sc, protocol.arms()["A0"], run_dir=tmp_path / "run", workspace=Path("/nonexistent"), seed=0
    )
    # A seed whose draw has the substitutes and no other defect, so the record is intact.
    seed = next(s for s in range(200) if backend.draw(simulated._rng(s, SID, "A0", 0)).defects == ["text_substitutes"])
    rec = _run(tmp_path, "A0", seed)
    out = Path(rec.workspace) / "outputs"
    assert sorted(p.name for p in out.iterdir()) == ["completion_record.json", "issues_log.csv", "msa_review_memo.md"]
    record = json.loads((out / "completion_record.json").read_text())
    assert record["substitutions"][0]["requested"] == "msa_review_memo.docx"
    assert record["substitutions"][0]["delivered"] == "msa_review_memo.md"
    assert "msa_review_memo.md" in record["deliverables"] and rec.completion_record_valid
    assert rec.D is False  # the requested docx is not there
    assert any(c["file"] == "msa_review_memo.docx" and not c["passed"] for c in rec.criteria)


def _draw(cost: float, wall: float, turns: int) -> SessionDraw:
    return SessionDraw(cost, wall, turns, {"Bash": 10, "Read": 4}, 0, False, [], None)


@pytest.mark.parametrize(
    "draw, cap",
    [
        (_draw(5.0, 100, 50), "cost"),
        (_draw(1.0, 3000, 50), "wall"),
        (_draw(1.0, 100, 400), "turns"),
        (_draw(6.0, 2400, 50), "cost"),  # 6/4 > 2400/1800: the budget ran out first
        (_draw(1.0, 100, 50), None),
    ],
)
def test_the_cap_reached_first_ends_the_session(draw, cap):
    capped, which, cost, wall, turns, calls = apply_caps(draw, 4.0, 1800, 150, np.random.default_rng(0), 0.05)
    assert capped == (cap is not None) and which == cap
    if cap == "cost":
        assert 4.0 <= cost <= 4.0 * 1.05 and wall < draw.wall
    elif cap == "wall":
        assert wall == 1800 and cost < draw.cost
    elif cap == "turns":
        assert turns == 150 and sum(calls.values()) < sum(draw.tool_calls.values())
    else:
        assert (cost, wall, turns) == (draw.cost, draw.wall, draw.turns)


def test_draws_censor_some_runs_under_the_protocol_caps(tmp_path):
    sc = type("S", (), {"id": SID, "designed_depth": 3})()
    arm = protocol.arms()["A4"]
    caps = protocol.study().caps_for(SID)
    backend = SimulatedBackend(sc, arm, run_dir=tmp_path / "run", workspace=Path("/nonexistent"), seed=0)
    reasons = []
    for seed in range(400):
        draw = backend.draw(simulated._rng(seed, SID, "A4", 0))
        capped, which, *_ = apply_caps(draw, caps.usd, caps.wall_s, 150, np.random.default_rng(seed), 0.05)
        reasons.append(which)
    share = sum(r is not None for r in reasons) / len(reasons)
    assert 0.02 < share < 0.5, share
    assert {"cost", "wall"} <= set(reasons)


def test_a4_sometimes_fails_its_first_self_check_and_recovers(tmp_path, soffice):
    # A4 saves its workbooks through LibreOffice with the model's stated probability (soffice).
    seen = {"recovered": 0, "passed_first": 0}
    for seed in range(30):
        rec = _run(tmp_path, "A4", seed)
        assert rec.selfcheck_first is not None
        if rec.selfcheck_first is False and rec.recovery_used:
            assert len(rec.sessions) == 2 and rec.recovery_cost_usd is not None and rec.recovery_cost_usd > 0
            assert rec.cost_usd == pytest.approx(
                sum(
                    json.loads(x)["cost_usd"]
                    for x in (tmp_path / "runs" / f"A4-{seed}" / "agent" / "simulated_draws.jsonl")
                    .read_text()
                    .splitlines()
                ),
                abs=1e-5,
            )
            if rec.selfcheck_final:
                seen["recovered"] += 1
        if rec.selfcheck_first:
            seen["passed_first"] += 1
        if seen["recovered"] and seen["passed_first"]:
            break
    assert seen["recovered"] and seen["passed_first"], seen


def test_a1_denied_attempts_are_recorded_as_deviations(tmp_path):
    sc = type("S", (), {"id": SID, "designed_depth": 3})()
    backend = SimulatedBackend(
        sc, protocol.arms()["A1"], run_dir=tmp_path / "run", workspace=Path("/nonexistent"), seed=0
    )
    seed = next(s for s in range(200) if backend.draw(simulated._rng(s, SID, "A1", 0)).denied is not None)
    rec = _run(tmp_path, "A1", seed)
    family, how = backend.draw(simulated._rng(seed, SID, "A1", 0)).denied
    assert [(d["family"], d["blocked_by"]) for d in rec.deviations] == [
        (family, "cli_rule" if how == "direct" else "mask")
    ]


PORTAL_SID = "ACC-01"  # uses_portal: true


# A3 saves its workbooks through LibreOffice with the model's stated probability (soffice).
def test_a3_uses_the_portal_over_http_and_a1_has_none(tmp_path, soffice):
    from pilot.portal import read_access_log, summarise_access_log

    manifest = json.loads((paths.scenario_portal_dir(PORTAL_SID) / "manifest.json").read_text())
    a3 = run_attempt(PORTAL_SID, "A3", backend="simulated", out_dir=tmp_path / "a3", seed=5, evaluate=False)
    run_dir = tmp_path / "a3"
    creds = json.loads((Path(a3.workspace) / "portal_credentials.json").read_text())
    log_path = Path(a3.portal["access_log"])
    assert log_path.parent == run_dir / "portal"  # kept with the transcript
    entries = [e for e in read_access_log(log_path) if e["action"] != "health"]
    assert [e["action"] for e in entries] == ["sign_in", "api", "download", "api", "download", "sign_out"]
    assert all(e["status"] == 200 and e["remote"] == "127.0.0.1" for e in entries)
    assert a3.portal_requests == summarise_access_log(log_path)["requests"] == 6
    assert a3.portal["use"]["download"] == 2
    # The downloads are the portal's own bytes, kept outside the workspace the oracle reads.
    doc = min(manifest["documents"], key=lambda d: d["name"])
    got = run_dir / "agent" / "portal_downloads" / doc["name"]
    assert hashlib.sha256(got.read_bytes()).hexdigest() == doc["sha256"]
    assert not (Path(a3.workspace) / doc["name"]).exists()
    draws = json.loads((run_dir / "agent" / "simulated_draws.jsonl").read_text().splitlines()[0])
    assert draws["portal"]["error"] is None and doc["name"] in draws["portal"]["fetched"]
    # The instance is stopped after the run, and the password is in no log or record.
    saved = json.loads((run_dir / "run_record.json").read_text())
    assert saved["portal_requests"] == 6
    for text in (json.dumps(saved), log_path.read_text(), Path(a3.transcript).read_text()):
        assert creds["password"] not in text
    with pytest.raises(OSError):
        import urllib.request

        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(a3.portal["url"] + "/healthz", timeout=2)

    a1 = run_attempt(PORTAL_SID, "A1", backend="simulated", out_dir=tmp_path / "a1", seed=5, evaluate=False)
    assert a1.portal is None and a1.portal_requests is None
    assert not (tmp_path / "a1" / "portal").exists() and not (Path(a1.workspace) / "portal_credentials.json").exists()
    assert (
        json.loads((tmp_path / "a1" / "agent" / "simulated_draws.jsonl").read_text().splitlines()[0])["portal"] is None
    )


def test_a_session_killed_at_its_wall_limit_is_metered_as_a_proxy_would(tmp_path):
    from decimal import Decimal

    from pilot.protocol.design import Caps

    out = tmp_path / "killed"
    rec = run_attempt(SID, "A1", backend="simulated", out_dir=out, seed=3, caps=Caps(50.0, 1.0), evaluate=False)
    assert rec.status == "capped" and rec.censor_reason == "wall"
    assert rec.cost_usd is None  # the CLI never printed its result line
    # What the simulated proxy metered is what the sessions drew, read from the run's own draw log.
    draws = [json.loads(line) for line in (out / "agent" / "simulated_draws.jsonl").read_text().splitlines()]
    assert draws and rec.metered_cost_usd == Decimal(str(round(sum(d["cost_usd"] for d in draws), 6))) > 0
