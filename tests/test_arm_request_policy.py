"""Arms as data: arms.yml's vocabularies and request policy, validated on load, and an arm's own proxy policy held
by the real model proxy against the scripted Messages API.

Expected values come from the protocol files as written (the common policy's
blocks) and from hand calculations of the worst case (written out beside each).
"""

from __future__ import annotations

import http.client
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from fake_messages_api import FakeMessagesAPI

from pilot import paths, protocol
from pilot.agents.model_proxy import CAP_STATUS, MeteringProxy
from pilot.protocol import ProtocolError, load_arms
from pilot.protocol.prices import PRICES_FILE, PriceTable

MODEL = protocol.study()["worker"]["model"]
KEY = "sk-ant-real-key-held-by-the-harness"
WEB_SEARCH = {
    "web_search_20250305": {
        "name": "web_search",
        "usage": "web_search_requests",
        "max_uses": 3,
        "per_use": {"allowance": 20000},
    }
}


def _arms_copy(tmp_path: Path) -> tuple[Path, dict]:
    folder = tmp_path / "arms"
    shutil.copytree(paths.ARMS_DIR, folder)
    return folder / "arms.yml", yaml.safe_load((folder / "arms.yml").read_text(encoding="utf-8"))


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_the_common_policy_is_the_one_arms_yml_declares():
    arms = load_arms()
    # protocol/arms/arms.yml request_policy, as written there.
    expected = {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
    for arm in arms.values():
        policy = arm.request_policy
        assert policy.arm == arm.id and policy.block_kinds == expected and dict(policy.server_tools) == {}
        assert policy.blocks["image"].tokens == 5000 and policy.blocks["document"].kind == "context"
        assert policy.system_blocks == {"text"} and policy.sources["image"] == {"base64"}


def test_an_arm_adds_a_server_tool_and_the_others_do_not(tmp_path):
    path, data = _arms_copy(tmp_path)
    data["arms"]["A3"]["proxy"] = {"server_tools": WEB_SEARCH}
    arms = load_arms(_write(path, data))
    tool = arms["A3"].request_policy.server_tools["web_search_20250305"]
    assert (tool.name, tool.usage, tool.max_uses, tool.per_use.tokens) == (
        "web_search",
        "web_search_requests",
        3,
        20000,
    )
    assert all(not arms[a].request_policy.server_tools for a in ("A0", "A1", "A2", "A4"))
    assert arms["A3"].request_policy.usage_counters() == ["web_search_requests"]


@pytest.mark.parametrize(
    "change, field, reason",
    [
        (lambda d: d["arms"]["A1"]["features"].update(teleport=True), "arms.A1.features", "teleport"),
        (lambda d: d["arms"]["A1"]["features"].pop("chromium"), "arms.A1.features", "chromium"),
        (lambda d: d["arms"]["A1"]["tools"].append("WebFetch"), "arms.A1.tools.6", "WebFetch"),
        (lambda d: d["tools"].append("bash"), "tools.6", "does not match"),
        (lambda d: d["features"].update({"Bad-Name": "x"}), "features", "Bad-Name"),
        (lambda d: d["request_policy"]["system_blocks"].append("image_x"), "request_policy.system_blocks", "image_x"),
        (lambda d: d["request_policy"]["sources"].update(video=["base64"]), "request_policy.sources.video", "video"),
        (lambda d: d["request_policy"]["blocks"].update(text="bytes"), "request_policy.blocks.text", "bytes"),
        (
            lambda d: d["arms"]["A3"].update(proxy={"blocks": {"text": "context"}}),
            "arms.A3.proxy.blocks.text",
            "never redefines",
        ),
        (
            lambda d: d["arms"]["A3"].update(proxy={"server_tools": {"web_search": WEB_SEARCH["web_search_20250305"]}}),
            "arms.A3.proxy.server_tools",
            "web_search",
        ),
        (
            lambda d: d["arms"]["A3"].update(
                proxy={"server_tools": {"web_search_20250305": {**WEB_SEARCH["web_search_20250305"], "max_uses": 0}}}
            ),
            "arms.A3.proxy.server_tools.web_search_20250305.max_uses",
            "minimum",
        ),
    ],
)
def test_a_bad_arms_file_is_refused_with_file_field_and_reason(tmp_path, change, field, reason):
    path, data = _arms_copy(tmp_path)
    change(data)
    with pytest.raises(ProtocolError) as exc:
        load_arms(_write(path, data))
    assert exc.value.path == path and exc.value.field == field and reason in str(exc.value)


def test_a_scenario_feature_outside_the_vocabulary_is_refused(tmp_path):
    from pilot.protocol.scenario import load_scenario_from

    root = tmp_path / "protocol"
    shutil.copytree(paths.PROTOCOL_DIR, root, ignore=shutil.ignore_patterns("scenarios"))
    bundle = root / "scenarios" / "ACC-01"
    shutil.copytree(paths.SCENARIOS_DIR / "ACC-01", bundle)
    spec = yaml.safe_load((bundle / "scenario.yml").read_text(encoding="utf-8"))
    spec["arm_features"] = [*spec["arm_features"], "teleport"]
    _write(bundle / "scenario.yml", spec)
    with pytest.raises(ProtocolError) as exc:
        load_scenario_from(bundle, protocol.load_study(root / "study.yml"))
    assert exc.value.field == f"arm_features.{len(spec['arm_features']) - 1}" and "teleport" in str(exc.value)


def test_prices_refuse_a_server_tool_fee_that_is_not_a_usage_counter(tmp_path):
    text = PRICES_FILE.read_text(encoding="utf-8")
    bad = tmp_path / "prices.yml"
    bad.write_text(text + "server_tools:\n  web_search: 0.01\n", encoding="utf-8")
    with pytest.raises(ProtocolError) as exc:
        PriceTable.load(bad, required_models=[])
    assert exc.value.field == "server_tools.web_search" and "usage counter" in str(exc.value)
    bad.write_text(text + "server_tools:\n  web_search_requests: ten\n", encoding="utf-8")
    with pytest.raises(ProtocolError) as exc:
        PriceTable.load(bad, required_models=[])
    assert exc.value.field == "server_tools.web_search_requests"


def _post(url: str, body: dict, token: str) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": token}
        conn.request("POST", "/v1/messages", body=json.dumps(body).encode(), headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def _search_request(max_uses: int | None, max_tokens: int = 1000) -> dict:
    tool: dict = {"type": "web_search_20250305", "name": "web_search"}
    if max_uses is not None:
        tool["max_uses"] = max_uses
    return {"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}


def test_the_proxy_holds_each_run_to_its_arms_server_tools(tmp_path):
    path, data = _arms_copy(tmp_path)
    data["arms"]["A3"]["proxy"] = {"server_tools": WEB_SEARCH}
    arms = load_arms(_write(path, data))
    base = PRICES_FILE.read_text(encoding="utf-8")
    (tmp_path / "prices.yml").write_text(base + "server_tools:\n  web_search_requests: 0.01\n", encoding="utf-8")
    prices = PriceTable.load(tmp_path / "prices.yml", required_models=[MODEL])
    usage = {"input_tokens": 1000, "output_tokens": 100, "server_tool_use": {"web_search_requests": 2}}
    with (
        FakeMessagesAPI(MODEL, [], usage=usage) as up,
        MeteringProxy(up.url, KEY, prices, tmp_path / "records") as proxy,
    ):
        a3 = proxy.open_run("r-a3", Decimal("4.00"), MODEL, policy=arms["A3"].request_policy)
        a1 = proxy.open_run("r-a1", Decimal("4.00"), MODEL, policy=arms["A1"].request_policy)
        # The arm without the tool: refused before anything goes upstream, naming the field.
        status, answer = _post(a1.base_url, _search_request(2), a1.token)
        assert status == 400 and "web_search_20250305" in answer["error"]["message"] and up.requests == []
        # The arm with it: max_uses must be set, and within the arm's bound.
        for uses in (None, 4):
            status, answer = _post(a3.base_url, _search_request(uses), a3.token)
            assert status == 400 and "max_uses" in answer["error"]["message"]
        assert up.requests == []
        status, _ = _post(a3.base_url, _search_request(2), a3.token)
        assert status == 200 and len(up.requests) == 1
        row = a3.requests[-1]
        # Booked: 1000 input x 4 + 100 output x 20 = 6000 per million = 0.006, plus two searches x 0.01 = 0.026.
        assert Decimal(row["cost_usd"]) == Decimal("0.026") and row["server_tool_usd"] == "0.02"
        assert a3.metered_usd == Decimal("0.026")
        # A run whose arm allows a server tool the table does not price is refused at its opening.
        bare = PriceTable.load(PRICES_FILE, required_models=[MODEL])
    with MeteringProxy("http://127.0.0.1:9", KEY, bare, tmp_path / "r2") as unpriced:
        with pytest.raises(ProtocolError, match="web_search_requests"):
            unpriced.open_run("r-x", Decimal("4.00"), MODEL, policy=arms["A3"].request_policy)


def test_the_worst_case_of_a_search_request_is_reserved_by_hand(tmp_path):
    """A cap just under the hand-computed worst case refuses the request; one at it lets it through."""
    from pilot.agents.model_proxy import FRAMING_ALLOWANCE_TOKENS, serialise_request

    path, data = _arms_copy(tmp_path)
    data["arms"]["A3"]["proxy"] = {"server_tools": WEB_SEARCH}
    policy = load_arms(_write(path, data))["A3"].request_policy
    base = PRICES_FILE.read_text(encoding="utf-8")
    (tmp_path / "prices.yml").write_text(base + "server_tools:\n  web_search_requests: 0.01\n", encoding="utf-8")
    prices = PriceTable.load(tmp_path / "prices.yml", required_models=[MODEL])
    body = _search_request(2, max_tokens=1000)
    first = len(serialise_request(body)[0]) + FRAMING_ALLOWANCE_TOKENS
    # Three passes: the first, then one per use, each reading 20,000 more tokens than the one before.
    passes = first + (first + 20000) + (first + 40000)
    # Input at the dearest rate (no one-hour cache asked: the 5-minute write, 5 per million), 1000 output at 20,
    # two searches at 0.01.
    worst = (Decimal(passes) * 5 + 1000 * 20) / 1_000_000 + Decimal("0.02")
    with (
        # No count_tokens answer: the bound from the body alone is the one reserved.
        FakeMessagesAPI(MODEL, [], usage={"input_tokens": 10, "output_tokens": 1}, count_tokens=None) as up,
        MeteringProxy(up.url, KEY, prices, tmp_path / "records") as proxy,
    ):
        under = proxy.open_run("r-under", worst - Decimal("0.000001"), MODEL, policy=policy)
        assert _post(under.base_url, body, under.token)[0] == CAP_STATUS and up.requests == []
        at = proxy.open_run("r-at", worst, MODEL, policy=policy)
        assert _post(at.base_url, body, at.token)[0] == 200 and len(up.requests) == 1
