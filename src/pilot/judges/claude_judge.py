"""The real judge: the pinned Claude Code CLI, single turn, no tools, JSON output.

Each call is a fresh session: ``claude -p --output-format json --tools ""
--max-turns 1 --model M --setting-sources ""`` with the prompt on stdin (the
variadic ``--tools`` would swallow a positional prompt), run in an empty
working folder with a fresh ``CLAUDE_CONFIG_DIR`` so that no operator
setting, memory or CLAUDE.md reaches the judge. The judge's cost is the
client's reported ``total_cost_usd``. ``environ`` names another upstream
(``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``) than this process's: the
rehearsal points its judges at the scripted model server. A rehearsal's
upstream also carries :data:`LABEL_REQUESTS_KEY`: then every call names its
panel member and attempt in request headers (:data:`JUDGE_HEADER`,
:data:`JUDGE_ATTEMPT_HEADER`, sent through the CLI's
``ANTHROPIC_CUSTOM_HEADERS``), because the scripted server cannot tell two
judges of the same model apart from the prompt, and must not guess from the
order of the calls (a retry would swap them). Only a loopback upstream is
labelled: the real API never sees the label.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from pilot import protocol
from pilot.judges.backend import JudgeReply, JudgeRequest

# Environment passed through to the CLI; nothing else of the operator's is.
PASSTHROUGH_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN",
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "SSL_CERT_FILE",
    "HTTPS_PROXY",
    "NO_PROXY",
)
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


#: The key of an upstream mapping (``environ``) that asks for labelled judge requests: a rehearsal's scripted server
#: sets it (:func:`pilot.simulated.scripted_model.scripted_upstream`); it never reaches the CLI's environment.
LABEL_REQUESTS_KEY = "PILOT_LABEL_JUDGE_REQUESTS"
#: The request headers of a labelled judge call: the panel member's id, and the attempt (0, or 1 for the one retry).
JUDGE_HEADER = "x-pilot-judge"
JUDGE_ATTEMPT_HEADER = "x-pilot-judge-attempt"
#: The hosts a labelled upstream may have: the scripted server listens on loopback only.
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def judge_label_headers(request: JudgeRequest) -> str:
    """The CLI's ``ANTHROPIC_CUSTOM_HEADERS`` value that labels one judge call ("Name: value" lines)."""
    for value in (request.judge_id, str(request.attempt)):
        if not value or any(c in value for c in "\r\n:"):
            raise ValueError(f"a judge label cannot carry {value!r}")
    return f"{JUDGE_HEADER}: {request.judge_id}\n{JUDGE_ATTEMPT_HEADER}: {int(request.attempt)}"


class ClaudeNotFound(RuntimeError):
    """No Claude Code CLI could be located."""


def locate_claude(explicit: Path | str | None = None) -> Path:
    """The CLI to run: an explicit path, ``$PILOT_CLAUDE_BIN``, the one bundled in ``claude-agent-sdk``, or ``claude``
    on PATH."""
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
        "no Claude Code CLI found: pass claude_bin, set PILOT_CLAUDE_BIN, or install the 'agent' extra "
        "(claude-agent-sdk)"
    )


class ClaudeCodeJudge:
    """Judge backend that runs the pinned Claude Code CLI once per call."""

    name = "claude-code"

    def __init__(
        self,
        claude_bin: Path | str | None = None,
        *,
        timeout_s: float = 600.0,
        study: protocol.Study | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.study = study or protocol.study()
        self.upstream = dict(environ) if environ is not None else None
        self.label_requests = bool(self.upstream and self.upstream.get(LABEL_REQUESTS_KEY))
        if self.label_requests:
            url = str(self.upstream.get("ANTHROPIC_BASE_URL") or "")
            if urlsplit(url).scheme != "http" or urlsplit(url).hostname not in _LOOPBACK:
                # The label is for a rehearsal's own server; a mapping that asks for it with another address is a
                # mistake.
                raise ValueError(
                    f"labelled judge requests go to a scripted server on loopback only, not to {url or 'no address'!r}"
                )
        self.claude_bin = locate_claude(claude_bin)
        self.timeout_s = timeout_s
        self.bare = bool(self.study["cli"]["bare"])
        self.pinned_version = str(self.study["cli"]["version"])
        self._version: str | None = None

    def command(self, model: str) -> list[str]:
        """The argument vector of one judge call (the prompt goes on stdin)."""
        cmd = [
            str(self.claude_bin),
            "-p",
            "--output-format",
            "json",
            "--tools",
            "",
            "--max-turns",
            "1",
            "--model",
            model,
            "--setting-sources",
            "",
        ]
        if self.bare:
            cmd.append("--bare")
        return cmd

    def _env(self, config_dir: Path, home: Path, request: JudgeRequest | None = None) -> dict[str, str]:
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        if self.upstream is not None:
            # The given upstream replaces the operator's: none of this process's key or address is kept beside it.
            env = {k: v for k, v in env.items() if not k.startswith("ANTHROPIC_")}
            env.update({k: v for k, v in self.upstream.items() if k in PASSTHROUGH_ENV and k.startswith("ANTHROPIC_")})
        if self.label_requests and request is not None:
            env["ANTHROPIC_CUSTOM_HEADERS"] = judge_label_headers(request)
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
                proc = subprocess.run(
                    [str(self.claude_bin), "--version"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    cwd=t,
                    env=self._env(t / "config", t),
                )
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
                    env=self._env(config, t, request),
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


def new_judge(
    *,
    claude_bin: Path | str | None = None,
    study: protocol.Study | None = None,
    environ: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> ClaudeCodeJudge:
    """The ``judge`` role of the CLI backends (:mod:`pilot.backends`); ``timeout_s`` per call (None: the default)."""
    if timeout_s is None:
        return ClaudeCodeJudge(claude_bin, study=study, environ=environ)
    return ClaudeCodeJudge(claude_bin, study=study, environ=environ, timeout_s=float(timeout_s))
