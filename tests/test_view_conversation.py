"""The event stream as a conversation: pairing, shortening, and deviations placed at their event."""

from __future__ import annotations

import json

from pilot.agents import audit
from pilot.view import conversation


def _stream() -> list[str]:
    ev = [
        {
            "type": "system",
            "subtype": "init",
            "session_id": "s1",
            "model": "m",
            "tools": ["Bash", "Edit"],
            "claude_code_version": "2.1.332",
        },
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "Reading the inputs."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Bash",
                        "input": {"command": "curl -sS https://example.com -o x"},
                    },
                ]
            },
        },
        {
            "type": "system",
            "subtype": "permission_denied",
            "tool_name": "Bash",
            "tool_use_id": "t1",
            "message": "Permission to use Bash has been denied.",
        },
        {
            "type": "user",
            "message": {
                "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "denied"}]
            },
        },
        {
            "type": "assistant",
            "message": {
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "Edit",
                        "input": {"file_path": "inputs/ledger.csv", "old_string": "1", "new_string": "2"},
                    }
                ]
            },
        },
        {
            "type": "user",
            "message": {
                "content": [
                    {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "x" * 1000}]}
                ]
            },
        },
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {"type": "tool_use", "id": "t3", "name": "Bash", "input": {"command": "ls"}},
                ]
            },
        },
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t3", "content": "a\nb"}]}},
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "total_cost_usd": 0.12,
            "num_turns": 3,
            "result": "Done.",
        },
    ]
    lines = [json.dumps(e) for e in ev]
    lines.insert(3, "{not json")
    return lines


def test_tool_calls_pair_with_results_and_deviations_land_on_their_call():
    lines = _stream()
    devs = [d.to_dict() for d in audit.audit(audit.parse_stream(lines), ["curl"], ["Bash", "Edit"])]
    assert [d["tool_use_id"] for d in devs] == ["t1"]
    conv = conversation.parse(lines, devs, ["input modified: inputs/ledger.csv", "input added: inputs/extra.csv"])
    kinds = [i.kind for i in conv.items]
    assert kinds == ["session", "text", "tool", "tool", "thinking", "tool", "result"]
    t1, t2, t3 = (i for i in conv.items if i.kind == "tool")
    assert t1.deviations == devs and t1.meta["denied"].startswith("Permission") and t1.result_error
    assert t1.deviations[0]["blocked_by"] == "cli_rule"
    assert t2.violations == ["input modified: inputs/ledger.csv"] and not t2.deviations
    assert t2.result_short is not None and len(t2.result_short) == conversation.SHORT_CHARS and len(t2.result) == 1000
    assert not t3.flagged and t3.result == "a\nb" and t3.result_short is None
    assert conv.unplaced_violations == ["input added: inputs/extra.csv"]  # no call names that file
    assert conv.unreadable_lines == 1
    assert [i.anchor for i in conv.flagged] == [t1.anchor, t2.anchor]
    end = conv.items[-1]
    assert end.meta["cost_usd"] == 0.12 and end.text == "Done."


def test_a_deviation_without_its_event_is_kept_and_huge_text_is_cut():
    huge = "y" * (conversation.FULL_CHARS + 500)
    lines = [
        json.dumps(
            {
                "type": "assistant",
                "message": {"content": [{"type": "tool_use", "id": "a", "name": "Bash", "input": {"command": huge}}]},
            }
        )
    ]
    conv = conversation.parse(
        lines, [{"tool_use_id": "missing", "kind": "denied_family", "family": "wget"}], ["input changed oddly"]
    )
    assert conv.unplaced_deviations[0]["family"] == "wget"
    assert conv.unplaced_violations == ["input changed oddly"]
    tool = conv.items[0]
    assert tool.session == 0 and "500 more characters not shown" in tool.input
    assert conversation.read(None) is None


def _call(msg_id: str, tid: str, command: str, ts: str | None = None) -> list[str]:
    ev = {
        "type": "assistant",
        "message": {
            "id": msg_id,
            "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": command}}],
        },
    }
    res = {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "tool_use_id": tid, "content": "same output"}]},
    }
    if ts:
        ev["timestamp"] = ts
    return [json.dumps(ev), json.dumps(res)]


def test_turns_timestamps_and_identical_steps_collapse_per_session():
    init = json.dumps({"type": "system", "subtype": "init", "session_id": "s"})
    lines = [init]
    # Turn 1 spans two stream lines of one message (same id); turns 2-13 repeat one call twelve times.
    lines += [
        json.dumps(
            {
                "type": "assistant",
                "timestamp": "2026-12-04T01:00:00Z",
                "message": {"id": "m1", "content": [{"type": "text", "text": "Start."}]},
            }
        )
    ]
    lines += _call("m1", "t0", "ls inputs")
    for k in range(12):
        lines += _call(f"m{k + 2}", f"t{k + 1}", "sleep 1", ts=f"2026-12-04T01:00:{k + 1:02d}Z")
    lines += _call("m14", "t13", "cat report.md")
    lines.append(json.dumps({"type": "result", "subtype": "success", "total_cost_usd": 0.5}))
    # A resume: turns count from 1 again, and an identical call there is not merged with the first session's.
    lines.append(init)
    lines += _call("r1", "u1", "cat report.md")
    conv = conversation.parse(lines)
    tools = [i for i in conv.items if i.kind == "tool"]
    assert [t.turn for t in tools] == [1] + list(range(2, 14)) + [14, 1]
    assert (
        conv.items[1].kind == "text" and conv.items[1].turn == 1 and conv.items[1].timestamp == "2026-12-04T01:00:00Z"
    )
    assert tools[1].timestamp == "2026-12-04T01:00:01Z" and tools[0].timestamp == ""  # only where the stream has one
    steps = conv.steps
    sleeps = [s for s in steps if s.item.kind == "tool" and s.item.input == "sleep 1"]
    assert len(sleeps) == 1 and sleeps[0].count == 12
    assert [r.turn for r in sleeps[0].repeats] == list(range(3, 14))
    cats = [s for s in steps if s.item.kind == "tool" and s.item.input == "cat report.md"]
    assert [c.count for c in cats] == [1, 1]  # the same call in two sessions stays two steps
    assert len(steps) == len(conv.items) - 11


def test_a_flagged_call_is_never_folded_into_its_repeats():
    lines = []
    for k in range(3):
        lines += _call(f"m{k}", f"t{k}", "curl https://example.com")
    devs = [{"tool_use_id": "t1", "kind": "denied_family", "family": "curl", "via": "direct", "blocked_by": "cli_rule"}]
    steps = conversation.parse(lines, devs).steps
    assert [(s.item.meta["id"], s.count) for s in steps] == [("t0", 1), ("t1", 1), ("t2", 1)]
