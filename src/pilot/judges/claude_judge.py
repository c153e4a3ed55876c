"""The real judge: the pinned Claude Code CLI, single turn, no tools, JSON output.

Each call is a fresh session: ``claude -p --output-format json --tools ""
--max-turns 1 --model M --setting-sources ""`` with the prompt on stdin (the
variadic ``--tools`` would swallow a positional prompt), run in an empty
working folder with a fresh ``CLAUDE_CONFIG_DIR`` so that no operator
setting, memory or CLAUDE.md reaches the judge. The judge's cost is the
client's reported ``total_cost_usd``. ``environ`` names another upstream
(``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``) than this process's: the
rehearsal points its judges at the scripted model server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pilot import protocol
from pilot.judges.backend import JudgeReply, JudgeRequest

# Environment passed through to the CLI; nothing else of the operator's is.
PASSTHROUGH_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "HTTPS_PROXY", "NO_PROXY")
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


class ClaudeNotFound(RuntimeError):
    """No Claude Code CLI could be located."""


def locate_claude(explicit: Path | str | None = None) -> Path:
    """The CLI to run: an explicit path, ``$PILOT_CLAUDE_BIN``, the one bundled in ``claude-agent-sdk``, or ``claude`` on PATH."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    if os.environ.get("PILOT_CLAUDE_BIN"):
        candidates.append(Path(os.environ["PILOT_CLAUDE_BIN"]))
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "_bundled" / "claude")
    which = shutil.which("claude")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise ClaudeNotFound(
        "no Claude Code CLI found: pass claude_bin, set PILOT_CLAUDE_BIN, or install the 'agent' extra (claude-agent-sdk)"
    )


class ClaudeCodeJudge:
    """Judge backend that runs the pinned Claude Code CLI once per call."""

    name = "claude-code"

    def __init__(self, claude_bin: Path | str | None = None, *, timeout_s: float = 600.0, study: protocol.Study | None = None,
                 environ: dict[str, str] | None = None) -> None:
        self.study = study or protocol.study()
        self.upstream = dict(environ) if environ is not None else None
        self.claude_bin = locate_claude(claude_bin)
        self.timeout_s = timeout_s
        self.bare = bool(self.study["cli"]["bare"])
        self.pinned_version = str(self.study["cli"]["version"])
        self._version: str | None = None

    def command(self, model: str) -> list[str]:
        """The argument vector of one judge call (the prompt goes on stdin)."""
        cmd = [str(self.claude_bin), "-p", "--output-format", "json", "--tools", "", "--max-turns", "1", "--model", model, "--setting-sources", ""]
        if self.bare:
            cmd.append("--bare")
        return cmd

    def _env(self, config_dir: Path, home: Path) -> dict[str, str]:
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        if self.upstream is not None:
            # The given upstream replaces the operator's: none of this process's key or address is kept beside it.
            env = {k: v for k, v in env.items() if not k.startswith("ANTHROPIC_")}
            env.update({k: v for k, v in self.upstream.items() if k in PASSTHROUGH_ENV and k.startswith("ANTHROPIC_")})
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(QUIET_ENV)
        env["CLAUDE_CONFIG_DIR"] = str(config_dir)
        env["HOME"] = str(home)
        return env

    def version(self) -> str:
        """The CLI's version (checked once against ``study.yml`` ``cli.version``)."""
        if self._version is None:
            with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
                t = Path(tmp)
                (t / "config").mkdir()
                proc = subprocess.run([str(self.claude_bin), "--version"], capture_output=True, text=True, timeout=60, cwd=t, env=self._env(t / "config", t))
            self._version = (proc.stdout.strip().split() or [""])[0]
        return self._version

    def complete(self, request: JudgeRequest) -> JudgeReply:
        version = self.version()
        if version != self.pinned_version:
            return JudgeReply(None, 0.0, f"CLI version {version or '?'} is not the pinned {self.pinned_version}")
        with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
            t = Path(tmp)
            config, work = t / "config", t / "work"
            config.mkdir()
            work.mkdir()
            try:
                proc = subprocess.run(
                    self.command(request.model),
                    input=request.prompt,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout_s,
                    cwd=work,
                    env=self._env(config, t),
                )
            except subprocess.TimeoutExpired:
                return JudgeReply(None, 0.0, f"the CLI did not answer within {self.timeout_s:g} s")
        return parse_cli_output(proc.stdout, proc.returncode, proc.stderr)


def parse_cli_output(stdout: str, returncode: int, stderr: str = "") -> JudgeReply:
    """Turn the CLI's ``--output-format json`` result object into a reply."""
    result = None
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "result":
            result = obj
            break
    if result is None:
        try:
            obj = json.loads(stdout)
            result = obj if isinstance(obj, dict) else None
        except ValueError:
            pass
    if result is None:
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        return JudgeReply(None, 0.0, f"the CLI exited {returncode} without a result object ({tail[0][:200]})")
    cost = result.get("total_cost_usd")
    cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else 0.0
    if result.get("is_error") or returncode != 0 or result.get("subtype") != "success":
        detail = result.get("api_error_status") or result.get("subtype") or f"exit {returncode}"
        errors = result.get("errors")
        if errors:
            detail = f"{detail}: {str(errors)[:200]}"
        return JudgeReply(None, cost, f"the CLI reported an error ({detail})")
    text = result.get("result")
    if not isinstance(text, str):
        return JudgeReply(None, cost, "the CLI result carries no text")
    return JudgeReply(text, cost, None)


def new_judge(*, claude_bin: Path | str | None = None, study: protocol.Study | None = None,
              environ: dict[str, str] | None = None) -> ClaudeCodeJudge:
    """The ``judge`` role of the CLI backends (:mod:`pilot.backends`)."""
    return ClaudeCodeJudge(claude_bin, study=study, environ=environ)
