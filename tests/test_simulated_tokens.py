"""The simulated agent's tokens (SIMULATED): a stand-in of the proxy's usage record, priced to the drawn cost.

Expected values come from outside the code under test: the token model and
the prices as ``analysis/config/simulated_agent.yml`` and
``protocol/prices.yml`` state them (read here with ``yaml``, the prices as
exact decimals), arithmetic done by hand in the comments, and the simulated
agent's draws as they were before the token stream existed (pinned below).
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
import yaml

from pilot import paths, protocol
from pilot.agents.model_proxy import USAGE_FILE_NAME, record_folder_name
from pilot.protocol import ProtocolError
from pilot.protocol.design import Caps
from pilot.protocol.prices import PriceTable
from pilot.runner import run_attempt
from pilot.simulated import tokens
from pilot.simulated.agent import SimulatedBackend, load_model
from pilot.view import usage

SID = "LEGAL-01"  # no workbook: no LibreOffice in these tests
MILLION = Decimal(1_000_000)


def _prices(model: str) -> dict[str, Decimal]:
    """USD per million tokens of ``model``, read from the pinned table as written (text, never a float)."""
    raw = yaml.safe_load((paths.PROTOCOL_DIR / "prices.yml").read_text(encoding="utf-8"))["models"][model]
    return {k: Decimal(str(v)) for k, v in raw.items() if k != "max_input_tokens"}


def _priced(row: dict, p: dict[str, Decimal]) -> Decimal:
    """A usage row's price by hand: each count times its rate, per million."""
    return (
        row["input_tokens"] * p["input"]
        + row["output_tokens"] * p["output"]
        + row["cache_creation_input_tokens"] * p["cache_write"]
        + row["cache_read_input_tokens"] * p["cache_read"]
    ) / MILLION


def _rows(run_dir: Path) -> list[dict]:
    path = run_dir / "record" / "proxy" / record_folder_name(str(run_dir)) / USAGE_FILE_NAME
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _draws(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "agent" / "simulated_draws.jsonl").read_text().splitlines()]


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "transcript.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------- the stated model


def test_the_token_model_is_stated_in_the_model_file_as_the_dry_runs_assumption():
    stated = yaml.safe_load(paths.SIMULATED_AGENT_FILE.read_text(encoding="utf-8"))["tokens"]
    assert load_model()["tokens"] == stated
    assert set(stated) == {"prefix", "output", "uncached_input", "context_growth", "model_time_share"}
    header = paths.SIMULATED_AGENT_FILE.read_text(encoding="utf-8").split("\nbackend:")[0]
    assert "7. Tokens (the dry run's assumption" in header and '"simulated": true' in header
    assert "half a cache-read" in header  # the rounding rule is stated with the model


def test_a_malformed_token_model_is_refused_naming_file_and_field(tmp_path):
    bad = yaml.safe_load(paths.SIMULATED_AGENT_FILE.read_text())
    del bad["tokens"]["prefix"]
    f = tmp_path / "simulated_agent.yml"
    f.write_text(yaml.safe_dump(bad))
    with pytest.raises(ProtocolError) as err:
        load_model(f)
    assert err.value.path == f and err.value.field == "tokens" and "prefix" in err.value.reason
    bad = yaml.safe_load(paths.SIMULATED_AGENT_FILE.read_text())
    bad["tokens"]["model_time_share"] = 1.5
    f.write_text(yaml.safe_dump(bad))
    with pytest.raises(ProtocolError) as err:
        load_model(f)
    assert err.value.field == "tokens.model_time_share"


# ---------------------------------------------------------------------- the rounding rule, by hand


def test_fit_to_cost_scales_rounds_and_puts_the_residual_in_the_last_cache_reads():
    opus = PriceTable.load().price("claude-opus-5-5")  # 4, 20, 5 (5-minute writes), 0.20 USD per million
    shape = tokens.Shape(input=[10.0, 5.0], output=[100.0, 200.0], cache_write=[1000.0, 300.0])
    # The shape's price: input 15 x 4 + output 300 x 20 + writes 1300 x 5 + reads (0 + 1000) x 0.2 = 12,760 per million.
    assert shape.cache_read == [0.0, 1000.0]
    assert shape.price(opus) == pytest.approx(0.01276)
    # Cost 0.03: k = 30,000 / 12,760 = 2.351097...; rounded: input 23.51 -> 24, 11.76 -> 12; output 235.11 -> 235,
    # 470.22 -> 470; writes 2351.10 -> 2351, 705.33 -> 705; reads 0 and 2351 (the rounded writes before).
    # Price: 36 x 4 + 705 x 20 + 3056 x 5 + 2351 x 0.2 = 144 + 14,100 + 15,280 + 470.2 = 29,994.2 per million;
    # the 5.8 left is 29 cache-read tokens, so the last request reads 2351 + 29 = 2380.
    fitted = tokens.fit_to_cost(shape, Decimal("0.03"), opus)
    assert [u.as_dict() for u in fitted] == [
        {
            "input_tokens": 24,
            "output_tokens": 235,
            "cache_creation_input_tokens": 2351,
            "cache_read_input_tokens": 0,
            "cache_creation_1h_input_tokens": 0,
        },
        {
            "input_tokens": 12,
            "output_tokens": 470,
            "cache_creation_input_tokens": 705,
            "cache_read_input_tokens": 2380,
            "cache_creation_1h_input_tokens": 0,
        },
    ]
    p = _prices("claude-opus-5-5")
    assert sum(_priced(u.as_dict(), p) for u in fitted) == Decimal("0.03")


def test_with_no_cache_reads_to_give_the_next_cheapest_kind_takes_the_residual():
    opus = PriceTable.load().price("claude-opus-5-5")
    shape = tokens.Shape(input=[10.0], output=[100.0], cache_write=[1000.0])
    # Price 40 + 2,000 + 5,000 = 7,040 per million; cost 0.0071: k = 1.00852; input 10, output 101, writes 1009:
    # 40 + 2,020 + 5,045 = 7,105, 5 too many. Cache reads are 0 (the only request reads nothing): they cannot give
    # 25; the uncached input gives round(5 / 4) = 1 token, leaving 1 per million, under half an input token (2).
    [fitted] = tokens.fit_to_cost(shape, Decimal("0.0071"), opus)
    assert (fitted.input_tokens, fitted.output_tokens, fitted.cache_creation_input_tokens) == (9, 101, 1009)
    assert fitted.cache_read_input_tokens == 0
    assert _priced(fitted.as_dict(), _prices("claude-opus-5-5")) == Decimal("0.007101")


def test_the_shape_follows_the_stated_model():
    model = {
        "prefix": 18000,
        "output": {"median": 250, "sigma": 1.0},
        "uncached_input": {"median": 8, "sigma": 0.5},
        "context_growth": {"median": 900, "sigma": 1.0},
        "model_time_share": 0.6,
    }
    shape = tokens.draw_shape(model, 4, np.random.default_rng(7))
    # The stated order of draws: every output, then every uncached input, then each later request's growth.
    again = np.random.default_rng(7)
    out = again.lognormal(np.log(250), 1.0, size=4)
    unc = again.lognormal(np.log(8), 0.5, size=4)
    growth = again.lognormal(np.log(900), 1.0, size=3)
    assert shape.output == pytest.approx(list(out)) and shape.input == pytest.approx(list(unc))
    assert shape.cache_write == pytest.approx([18000.0] + [out[t - 1] + growth[t - 1] for t in range(1, 4)])
    assert shape.cache_read == pytest.approx([0.0] + list(np.cumsum(shape.cache_write)[:-1]))


# ---------------------------------------------------------------------- a simulated run's record

#: The simulated agent's draws for these runs as they were before the token stream existed (LEGAL-01, the
#: study's caps unless named): cost, wall, turns, cap, defects, denied attempt, agent error per session, the
#: sessions' ids, and a digest of the order of its tool calls (the stream's shuffle).
PINNED = {
    ("A0", 5, None): (
        [(1.357579, 411.661, 17, None, ["text_substitutes", "short_document"], None, False)],
        ["7f270393-d874-7958-6278-8fe24f3ddc74"],
        "1c02ffe645452f10",
    ),
    ("A1", 3, None): (
        [(0.601791, 1703.777, 19, None, [], ["curl", "bash -c"], False)],
        ["51752392-13e6-3ee8-5e4c-7de49b99fda3"],
        "ffa3a441c7024202",
    ),
    ("A2", 6, (0.4, 3600.0)): (
        [(0.407169, 482.357, 12, "cost", [], None, False)],
        ["3a7e0b6d-f704-266d-5ce5-3edd290b7ab9"],
        "343b8e5849464a39",
    ),
    ("A3", 8, None): (
        [(1.042642, 486.425, 27, None, [], None, False)],
        ["42a47519-861b-4e2f-392f-8dc9c6b7954d"],
        "a722f1459574a08d",
    ),
}


@pytest.mark.parametrize("arm, seed, caps", sorted(PINNED, key=str), ids=lambda x: str(x))
def test_the_token_stream_leaves_every_other_draw_as_it_was(tmp_path, arm, seed, caps):
    out = tmp_path / "run"
    run_attempt(
        SID, arm, backend="simulated", out_dir=out, seed=seed, caps=Caps(*caps) if caps else None, evaluate=False
    )
    draws, ids, order = PINNED[(arm, seed, caps)]
    got = [
        (d["cost_usd"], d["wall_s"], d["turns"], d["cap"], d["defects_drawn"], d["denied"], d["agent_error"])
        for d in _draws(out)
    ]
    assert got == draws
    events = _events(out)
    assert [e["session_id"] for e in events if e.get("subtype") == "init"] == ids
    names = [
        b["name"]
        for e in events
        if e["type"] == "assistant"
        for b in e["message"]["content"]
        if b["type"] == "tool_use"
    ]
    assert hashlib.sha256("\n".join(names).encode()).hexdigest()[:16] == order
    assert _rows(out)  # and the run has its tokens


def test_a_resumed_run_has_one_simulated_row_per_turn_priced_to_each_sessions_drawn_cost(tmp_path, bwrap):
    out = tmp_path / "run"
    # A4 at seed 11: the first session's self-check (run in the sandbox) fails, the resume runs (34 and 62 turns).
    rec = run_attempt(SID, "A4", backend="simulated", out_dir=out, seed=11, evaluate=False)
    draws = _draws(out)
    assert [(d["session"], d["cost_usd"], d["turns"]) for d in draws] == [(0, 0.790732, 34), (1, 1.461118, 62)]
    rows = _rows(out)
    # Where the proxy keeps its record, in its row schema, every row marked as what it is.
    assert len(rows) == 34 + 62 == rec.metered_requests
    assert [r["seq"] for r in rows] == list(range(1, 97))
    assert all(r["kind"] == "messages" and r["status"] == 200 and r["model"] == "claude-opus-5-5" for r in rows)
    assert all(r["simulated"] is True and r["note"].startswith("SIMULATED") for r in rows)
    assert all(r["run_id"] == str(out) for r in rows)
    # Each row names the answer it stands for in the stream.
    answers = [e["message"]["id"] for e in _events(out) if e["type"] == "assistant"]
    assert [r["message_id"] for r in rows] == answers
    # The session's cost as the meter counts it: the client's reported cost (the pinned CLI reports a resume's
    # cumulatively), 0.790732 after the first session and 2.251849 after the resume (the draws' float sum to 6
    # decimals; the draw log rounds each session apart: 0.790732 + 1.461118 = 2.251850).
    reported = [Decimal(str(e["total_cost_usd"])) for e in _events(out) if e["type"] == "result"]
    assert reported == [Decimal("0.790732"), Decimal("2.251849")] and rec.metered_cost_usd == Decimal("2.251849")
    session_cost = [reported[0], reported[1] - reported[0]]
    # By hand, one session at a time: the counts priced at the table's rates are the session's cost. The rule allows
    # half a cache-read token (0.1 per million at 0.20); at these prices a cost in whole millionths is met exactly.
    p = _prices("claude-opus-5-5")
    for d in draws:
        mine = [r for r in rows if r["session"] == d["session"]]
        assert len(mine) == d["turns"]
        total = sum((_priced(r, p) for r in mine), Decimal(0))
        assert abs(total - session_cost[d["session"]]) <= p["cache_read"] / 2 / MILLION
        assert total == session_cost[d["session"]]
        assert abs(total - Decimal(str(d["cost_usd"]))) <= Decimal("0.000001")  # the draw log's rounding
        assert all(Decimal(r["cost_usd"]) == _priced(r, p) for r in mine)
        # Each request reads what the session's requests before it wrote (the last one also takes the residual,
        # by at most what rounding the other counts can leave: half a token of each, in cache-read tokens).
        written = 0
        for r in mine[:-1]:
            assert r["cache_read_input_tokens"] == written
            written += r["cache_creation_input_tokens"]
        most = len(mine) * (p["input"] + p["output"] + p["cache_write"]) / 2 / p["cache_read"] + 1
        assert abs(mine[-1]["cache_read_input_tokens"] - written) <= most
        assert mine[0]["cache_creation_input_tokens"] > 0 and mine[0]["cache_read_input_tokens"] == 0
        # The session's drawn wall time holds its requests; each answer takes 0.6 of its slot.
        took = sum(r["duration_ms"] for r in mine) / 1000
        assert took == pytest.approx(0.6 * d["wall_s"], rel=1e-3)
    # The record sums to the run's metered cost.
    assert Decimal(rows[-1]["metered_usd"]) == rec.metered_cost_usd
    times = [usage.parse_time(r["at"]) for r in rows]
    assert times == sorted(times)
    # The viewer's reader takes them as SIMULATED.
    record = usage.read_usage(out)
    assert record.found and record.simulated and all(r.simulated for r in record.requests)
    t = record.tokens()
    assert t.simulated and t.requests == 96 and t.cost_usd == Decimal("2.251849")
    assert usage.source_of(record) == usage.SIMULATED_TOKENS


def test_a_dearer_model_reads_the_same_cost_as_fewer_tokens(tmp_path):
    seen = {}
    for model in ("claude-sonnet-5-5", "claude-fable-5-1"):
        out = tmp_path / model
        run_attempt(SID, "A3", backend="simulated", out_dir=out, seed=8, model=model, evaluate=False)
        rows, [d] = _rows(out), _draws(out)
        p = _prices(model)
        assert {r["model"] for r in rows} == {model}
        assert sum((_priced(r, p) for r in rows), Decimal(0)) == Decimal(str(d["cost_usd"])) == Decimal("1.042642")
        seen[model] = sum(r["output_tokens"] for r in rows)
    # Same seed, same draws and cost; fable's rates are five times sonnet's (50 against 10 per million output).
    assert seen["claude-fable-5-1"] < seen["claude-sonnet-5-5"]


def test_a_model_without_a_price_gets_no_tokens_and_a_note_saying_why(tmp_path):
    sc = type("S", (), {"id": SID, "designed_depth": 3})()
    backend = SimulatedBackend(
        sc, protocol.arms()["A1"], run_dir=tmp_path / "run", workspace=Path("/nonexistent"), seed=0, model="nope"
    )
    assert backend.usage_record is None and backend.meter.requests is None
    assert any("SIMULATED tokens not written" in n and "'nope'" in n for n in backend.notes)
