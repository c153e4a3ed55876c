"""H1's assistant through the real metering proxy, the project's scripted model server answering (no key, no network).

The reply is the scripted server's declared answer; its cost is the proxy's
booking, which must equal the pinned price table's price of the tokens the
server reported; the request carries the conversation and nothing else (no
tool, nothing of the workspace); a budget the first request's worst case
would pass refuses it and spends nothing; a site restarted mid-session opens
the session's run again with what is left of its budget.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from pilot import paths, protocol
from pilot.human.assistant import SYSTEM_PROMPT, Assistant, AssistantUnavailable, Settings, booked_usd, record_dir
from pilot.protocol.prices import PriceTable, Usage
from pilot.simulated.scripted_model import ScriptedModelServer, scripted_assistant_reply


@pytest.fixture
def server(tmp_path):
    with ScriptedModelServer(seed=1, record_dir=tmp_path / "scripted") as s:
        yield s


def _assistant(server, usd: str = "4.00") -> Assistant:
    settings = Settings.from_study()
    return Assistant(
        Settings(Decimal(usd), settings.max_tokens, settings.max_message_chars, settings.model),
        upstream_url=server.base_url,
        api_key=server.api_key,
    )


def test_the_settings_are_study_ymls_and_the_model_is_the_worker_arms():
    study = protocol.study()
    s = Settings.from_study(study)
    assert s.model == study["worker"]["model"]
    assert (s.usd_per_session, s.max_tokens) == (Decimal("4.00"), 4096)


def test_an_answer_is_the_scripted_servers_and_costs_what_the_price_table_says(server, tmp_path):
    attempt = tmp_path / "attempt-1"
    assistant = _assistant(server)
    try:
        first = assistant.ask(attempt, [], "What is a reorder point?")
        second = assistant.ask(attempt, [("What is a reorder point?", first.text)], "And safety stock?")
    finally:
        assistant.close()
    assert first.text == scripted_assistant_reply(1, "What is a reorder point?")
    assert second.text == scripted_assistant_reply(2, "And safety stock?")
    price = PriceTable.load(paths.PROTOCOL_DIR / "prices.yml").price(Settings.from_study().model)
    for reply in (first, second):
        assert reply.cost_usd == price.cost(Usage(**reply.usage)) and reply.cost_usd > 0
    assert booked_usd(attempt) == first.cost_usd + second.cost_usd
    # What reached the model: the system text and what was typed, no tool, nothing else (the proxy's own record).
    record = next(record_dir(attempt).glob("*/proxy_exchanges.jsonl"))
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    blocks = [(b["role"], b["type"], b["text"]) for r in rows for b in r["request_blocks"]]
    assert blocks == [
        ("system", "text", SYSTEM_PROMPT),
        ("user", "text", "What is a reorder point?"),
        ("user", "text", "And safety stock?"),
    ]
    assert [r["request_tool_results"] for r in rows] == [[], []]


def test_a_budget_smaller_than_a_requests_worst_case_refuses_it_and_spends_nothing(server, tmp_path):
    attempt = tmp_path / "attempt-1"
    assistant = _assistant(server, usd="0.001")
    try:
        with pytest.raises(AssistantUnavailable, match="budget for this session is spent") as info:
            assistant.ask(attempt, [], "Anything?")
        assert info.value.status == "refused"
        with pytest.raises(AssistantUnavailable, match="budget for this session is spent"):
            assistant.ask(attempt, [], "Anything at all?")
    finally:
        assistant.close()
    assert booked_usd(attempt) == 0
    assert server.requests == 0  # the proxy refused before anything went upstream


def test_a_restarted_site_opens_the_session_again_with_what_is_left(server, tmp_path):
    attempt = tmp_path / "attempt-1"
    before = _assistant(server)
    try:
        spent = before.ask(attempt, [], "First question?").cost_usd
    finally:
        before.close()
    after = _assistant(server)
    try:
        after.ask(attempt, [], "After the restart?")
        meters = [
            json.loads(line)
            for f in record_dir(attempt).glob("*/proxy_usage.jsonl")
            for line in f.read_text().splitlines()
        ]
    finally:
        after.close()
    opened = [Decimal(r["cap_usd"]) for r in meters if r.get("kind") == "opened"]
    assert opened == [Decimal("4.00"), Decimal("4.00") - spent]


def test_an_empty_or_too_long_message_is_refused_before_anything_is_sent(server, tmp_path):
    assistant = _assistant(server)
    try:
        with pytest.raises(AssistantUnavailable, match="Type a message first"):
            assistant.ask(tmp_path / "a", [], "   ")
        with pytest.raises(AssistantUnavailable, match="at most 40,000 can be sent at once"):
            assistant.ask(tmp_path / "a", [], "x" * 40_001)
    finally:
        assistant.close()
    assert server.requests == 0 and not Path(record_dir(tmp_path / "a")).exists()
