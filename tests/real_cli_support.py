"""Where the tests find the real pinned Claude Code CLI."""

from __future__ import annotations

import os
from pathlib import Path

from pilot.agents import claude_code


def real_cli() -> Path | None:
    """``PILOT_TEST_CLAUDE_BIN`` when it names a file, else the CLI bundled in ``claude-agent-sdk`` (the ``agent``
    extra)."""
    env = os.environ.get("PILOT_TEST_CLAUDE_BIN")
    if env and Path(env).is_file():
        return Path(env)
    return claude_code.bundled_cli()


def require_real_sandbox() -> Path:
    """The real CLI, after checking that it and the sandbox are here: a test of them fails, never skips, without
    them."""
    import pytest

    from pilot.agents import sandbox

    cli = real_cli()
    if cli is None:
        pytest.fail("no real Claude Code CLI: `make test` installs the 'agent' extra (or set PILOT_TEST_CLAUDE_BIN)")
    if sandbox.isolation_problems():
        pytest.fail("; ".join(sandbox.isolation_problems()))
    return cli


def rehearsal_environment(mp, data_dir: Path, *, pythonpath: str | None = None) -> None:
    """What every rehearsal test sets before its study runs (``mp``: a pytest MonkeyPatch).

    The study's data in ``data_dir``; the harness's own environment standing in for build/worker-env (it has the
    solvers' packages); no API key and an unreachable upstream, so nothing can reach a real API; no branch plan
    unless the test names one. Child processes (the local executor's supervisors, dask workers started after
    this) inherit it; ``pythonpath`` is put before theirs, for a run function that lives among the tests.
    """
    import sys

    from pilot import paths
    from pilot.agents import worker_env

    mp.setattr(paths, "DATA_DIR", data_dir)
    mp.setenv(worker_env.ENV_VAR, sys.prefix)
    mp.delenv("ANTHROPIC_API_KEY", raising=False)  # a rehearsal needs none
    mp.setenv("ANTHROPIC_BASE_URL", "http://192.0.2.1:9")  # nor the operator's upstream: nothing may go there
    mp.delenv("PILOT_REHEARSAL_BRANCHES", raising=False)
    if pythonpath:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [pythonpath, os.environ.get("PYTHONPATH")])))
