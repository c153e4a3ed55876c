"""The records the viewer reads beside the run table: the model proxy's usage record and a run's sessions.

The usage rows are written here in the proxy's own format (field names as
``pilot.agents.model_proxy`` writes them, plus a field a later proxy might
add); the sessions as ``pilot.agents.session.SessionOutcome.to_dict`` and the
runner's record hold them. The expected counts and sentences are written by hand.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from pilot.agents.model_proxy import USAGE_FILE_NAME, record_folder_name
from pilot.view import sessions, usage


def _write_usage(attempt: Path, rows: list[dict], torn: str = "") -> Path:
    folder = attempt / "record" / "proxy" / record_folder_name(str(attempt))
    folder.mkdir(parents=True)
    path = folder / USAGE_FILE_NAME
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn, encoding="utf-8")
    return path


def test_the_proxy_record_is_read_by_field_name_and_a_torn_line_is_counted(tmp_path):
    assert usage.USAGE_FILE == USAGE_FILE_NAME  # the viewer's copy of the proxy's file name
    rows = [
        {"seq": 1, "at": "2026-10-01T10:00:00.000+00:00", "kind": "opened", "cap_usd": "4.0"},
        {
            "seq": 2,
            "at": "2026-10-01T10:00:03.000+00:00",
            "kind": "messages",
            "model": "claude-opus-5-5",
            "status": 200,
            "message_id": "msg_1",
            "duration_ms": 2500.0,
            "input_tokens": 3,
            "output_tokens": 120,
            "cache_creation_input_tokens": 400,
            "cache_read_input_tokens": 5000,
            "cost_usd": "0.0123",
            "usage_complete": True,
            "a_field_a_later_proxy_adds": {"x": 1},
        },
        {"seq": 3, "kind": "count_tokens", "status": 200, "cost_usd": "0"},
        {
            "seq": 4,
            "at": "2026-10-01T10:00:09.000+00:00",
            "kind": "messages",
            "model": "claude-opus-5-5",
            "status": 529,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": "0",
            "note": "upstream status 529: not billed",
        },
        {"seq": 5, "kind": "closed", "capped": True, "capped_reason": "metered 4.01 USD would exceed the cap"},
    ]
    attempt = tmp_path / "attempt-1"
    _write_usage(attempt, rows, torn='{"seq": 6, "kind": "mess')
    rec = usage.read_usage(attempt)
    assert rec.found and rec.torn_lines == 1 and rec.unreadable_lines == 0
    assert [r.seq for r in rec.requests] == [2, 4]  # the two model requests; opened, count_tokens, closed are not
    first = rec.requests[0]
    assert (first.input_tokens, first.cache_write_tokens, first.cache_read_tokens, first.output_tokens) == (
        3,
        400,
        5000,
        120,
    )
    assert first.duration_s == 2.5 and first.message_id == "msg_1" and first.cost_usd == Decimal("0.0123")
    t = rec.tokens()
    assert (t.requests, t.total, t.cost_usd) == (2, 3 + 400 + 5000 + 120, Decimal("0.0123"))
    assert rec.requests[1].status == 529 and rec.requests[1].note == "upstream status 529: not billed"
    assert rec.capped_reason == "metered 4.01 USD would exceed the cap"


def test_no_proxy_record_means_no_token_count(tmp_path):
    rec = usage.read_usage(tmp_path / "attempt-1")
    assert not rec.found and rec.requests == [] and rec.tokens().total == 0


def _session(index: int, **fields) -> dict:
    base = {
        "index": index,
        "session_id": f"s{index}",
        "resumed_from": "s0" if index else None,
        "bound": None,
        "bound_detail": None,
        "start_error": None,
        "timed_out": False,
        "result_subtype": "success",
        "result_is_error": False,
        "terminal_reason": "completed",
        "api_error_status": None,
        "model_output": True,
    }
    return {**base, **fields}


def test_a_first_session_at_the_turn_cap_then_resumed_counts_as_hitting_a_cap():
    rec = {
        "censored": False,
        "censor_reason": None,
        "selfcheck_first": True,
        "recovery_used": True,
        "selfcheck_final": True,
        "sessions": [_session(0, result_subtype="error_max_turns", terminal_reason="max_turns"), _session(1)],
    }
    [hit] = sessions.cap_hits(rec)
    assert (hit.session, hit.cap, hit.label) == (0, "turns", "turns (session 1)")
    assert hit.words == "session 1 (first session) reached the turn cap"
    d = sessions.resume_decision(rec)
    assert (d.granted, d.headline, d.why) == (True, "resume granted", "the first session reached the turn cap")


def test_a_resume_withheld_says_why_and_what_asked_for_it():
    rec = {
        "censored": True,
        "censor_reason": "cost",
        "selfcheck_first": False,
        "recovery_used": False,
        "recovery_skipped": "the model proxy ended the run at its cost cap",
        "sessions": [_session(0, result_subtype="success", result_is_error=True, api_error_status=402)],
    }
    assert [h.label for h in sessions.cap_hits(rec)] == ["cost (session 1)"]  # the proxy's cap, from the run
    d = sessions.resume_decision(rec)
    assert d.granted is False and d.headline == "resume withheld"
    assert d.why == (
        "the model proxy ended the run at its cost cap (it was called for: the first session's deliverables "
        "failed the self-check; the first session reached the dollar cap)"
    )


def test_no_resume_needed_and_no_self_check():
    done = {"selfcheck_first": True, "recovery_used": False, "sessions": [_session(0)]}
    assert sessions.resume_decision(done).headline == "no resume needed"
    assert sessions.cap_hits(done) == []
    a1 = {"selfcheck_first": None, "sessions": [_session(0, timed_out=True, result_subtype=None)]}
    assert sessions.resume_decision(a1).granted is None
    assert [h.label for h in sessions.cap_hits(a1)] == ["wall (session 1)"]
    bound = {"sessions": [_session(0, bound="memory", bound_detail="4 GiB")]}
    assert [h.words for h in sessions.cap_hits(bound)] == ["session 1 (first session) reached the memory bound (4 GiB)"]
