#!/usr/bin/env python3
"""Test double of the Claude Code CLI in the judge's single-turn JSON mode.

It checks the flags the judge must pass, reads the prompt on stdin, and
answers with a ``--output-format json`` result object. Behaviour is chosen by
``FAKE_JUDGE_MODE``; the tests start it through a small wrapper script that
sets ``FAKE_JUDGE_MODE`` and ``FAKE_JUDGE_LOG``, since the judge passes on
none of the caller's environment:

  ok            valid verdict, every criterion 3, accept true
  fenced        the verdict wrapped in a ```json fence with prose around it
  bad_once      first call per judge model breaks the schema, the retry is valid
  bad           every reply breaks the schema (score 7)
  error         is_error result, exit 1 (an API failure)
  garbage       non-JSON output, exit 0
  old_version   reports a CLI version other than the pinned one

Every call (arguments, prompt, config folder, working folder, environment
names) is appended to ``$FAKE_JUDGE_LOG/calls.jsonl`` for the tests to inspect.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

PINNED = "2.1.332"


def main(argv: list[str], mode: str, log_dir: Path) -> int:
    if argv[:1] == ["--version"]:
        print(("2.0.1" if mode == "old_version" else PINNED) + " (Claude Code)")
        return 0
    prompt = sys.stdin.read()
    env_dir = os.environ.get("CLAUDE_CONFIG_DIR", "")
    call = {
        "argv": argv,
        "prompt": prompt,
        "config_dir": env_dir,
        "config_dir_empty": bool(env_dir) and Path(env_dir).is_dir() and not any(Path(env_dir).iterdir()),
        "cwd": os.getcwd(),
        "cwd_empty": not any(Path.cwd().iterdir()),
        "env_keys": sorted(os.environ),
    }
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "calls.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(call) + "\n")

    def flag(name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None

    problems = []
    if "-p" not in argv:
        problems.append("-p missing")
    if flag("--output-format") != "json":
        problems.append("--output-format json missing")
    if flag("--tools") != "":
        problems.append('--tools "" missing')
    if flag("--max-turns") != "1":
        problems.append("--max-turns 1 missing")
    if flag("--setting-sources") != "":
        problems.append('--setting-sources "" missing')
    model = flag("--model")
    if not model:
        problems.append("--model missing")
    if problems:
        print(
            json.dumps(
                {
                    "type": "result",
                    "subtype": "error_during_execution",
                    "is_error": True,
                    "errors": problems,
                    "total_cost_usd": 0.0,
                }
            )
        )
        return 1

    ids = []
    m = re.search(r"^Criterion ids: (.+)$", prompt, re.M)
    if m:
        ids = [s.strip() for s in m.group(1).split(",")]
    cost = 0.0123 if "opus" in model else 0.0045
    verdict = {
        "criterion_scores": {i: 3 for i in ids},
        "accept": True,
        "rationale": "Figures agree with the inputs; sections present.",
    }
    state = log_dir / f"seen_{model}"
    if mode == "error":
        print(
            json.dumps(
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": True,
                    "api_error_status": 529,
                    "total_cost_usd": 0.0,
                }
            )
        )
        return 1
    if mode == "garbage":
        print("this is not json")
        return 0
    if mode == "bad" or (
        mode == "bad_once" and not state.exists() and "previous answer could not be used" not in prompt
    ):
        state.write_text("1")
        verdict["criterion_scores"] = {i: 7 for i in ids}
    text = json.dumps(verdict)
    if mode == "fenced":
        text = "Here is my assessment.\n```json\n" + text + "\n```\nThat is all."
    print(
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "duration_ms": 12,
                "num_turns": 1,
                "result": text,
                "session_id": "fake-session",
                "total_cost_usd": cost,
            }
        )
    )
    return 0


if __name__ == "__main__":
    # The wrapper script exports the mode and log folder; nothing else of the test's environment arrives.
    sys.exit(
        main(sys.argv[1:], os.environ.get("FAKE_JUDGE_MODE") or "ok", Path(os.environ.get("FAKE_JUDGE_LOG") or "."))
    )
