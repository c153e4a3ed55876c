"""Where the tests find the real pinned Claude Code CLI."""

from __future__ import annotations

import os
from pathlib import Path

from pilot.agents import claude_code


def real_cli() -> Path | None:
    """``PILOT_TEST_CLAUDE_BIN`` when it names a file, else the CLI bundled in ``claude-agent-sdk`` (the ``agent`` extra)."""
    env = os.environ.get("PILOT_TEST_CLAUDE_BIN")
    if env and Path(env).is_file():
        return Path(env)
    return claude_code.bundled_cli()
