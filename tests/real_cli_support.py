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


def require_real_sandbox() -> Path:
    """The real CLI, after checking that it and the sandbox are here: a test of them fails, never skips, without them."""
    import pytest

    from pilot.agents import sandbox

    cli = real_cli()
    if cli is None:
        pytest.fail("no real Claude Code CLI: `make test` installs the 'agent' extra (or set PILOT_TEST_CLAUDE_BIN)")
    if sandbox.isolation_problems():
        pytest.fail("; ".join(sandbox.isolation_problems()))
    return cli
