"""The real backend: the pinned Claude Code CLI, headless, stream-json, one process per session.

The CLI is found from ``--claude-bin``, else the copy bundled in the
``claude-agent-sdk`` wheel (optional dependency group ``agent``), else
``claude`` on PATH; ``claude --version`` is recorded on every run. Each
session runs in the run's sandbox (:mod:`pilot.agents.sandbox`), in its own
process group, with a parent-death signal, so that nothing of it outlives
the attempt or the harness; the outer wall-clock limit kills the whole tree.
Every line the CLI prints on stdout is appended, as it arrives, to the
harness's own copy of the stream (``pilot.workspace.transcript_path``), a
file no sandbox can see; the run's counts and deviations come from it alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from pilot import workspace as run_files
from pilot.agents import launch, network
from pilot.agents.audit import StreamSummary, parse_stream
from pilot.agents.session import SessionOutcome
from pilot.protocol import Arm, Study

KILL_GRACE_S = 5.0


class CliNotFound(RuntimeError):
    pass


def bundled_cli() -> Path | None:
    """The CLI inside an installed ``claude_agent_sdk`` wheel, without importing the package."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        for name in ("claude", "claude.exe"):
            p = Path(loc) / "_bundled" / name
            if p.is_file():
                return p
    return None


def find_cli(claude_bin: Path | str | None = None) -> Path:
    """``claude_bin``, else the bundled CLI, else ``claude`` on PATH."""
    if claude_bin:
        p = Path(claude_bin)
        found = p if p.is_file() else (Path(shutil.which(str(claude_bin))) if shutil.which(str(claude_bin)) else None)
        if found is None or not os.access(found, os.X_OK):
            raise CliNotFound(f"--claude-bin {claude_bin}: not an executable file")
        return found.resolve()
    for candidate in (bundled_cli(), shutil.which("claude")):
        if candidate:
            return Path(candidate).resolve()
    raise CliNotFound("no Claude Code CLI: pass --claude-bin, install the 'agent' extra (claude-agent-sdk), or put claude on PATH")


def cli_version(claude_bin: Path, env: dict[str, str], timeout_s: float = 60.0) -> str | None:
    """``claude --version``, reduced to its version number (None when it does not answer)."""
    try:
        out = subprocess.run([str(claude_bin), "--version"], capture_output=True, text=True, env=env, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\d+\.\d+\.\d+", out.stdout + " " + out.stderr)
    return m.group(0) if m else None


def _kill_tree(proc: subprocess.Popen) -> None:
    """Terminate the session's process group, then kill it after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _pdeathsig() -> None:
    """In the child before exec: die with the harness (Linux ``PR_SET_PDEATHSIG``)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def sweep_run_processes(prefix: Path | str) -> list[int]:
    """Kill every process whose ``CLAUDE_CONFIG_DIR`` lies under ``prefix`` (leftovers of an attempt).

    An attempt's processes all carry their run's config folder in their
    environment (bubblewrap, the bridges, the CLI and what it starts).
    Linux only (reads /proc); elsewhere nothing is found.
    """
    killed: list[int] = []
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return killed
    needle = b"\0CLAUDE_CONFIG_DIR=" + str(Path(prefix).resolve()).encode()
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = b"\0" + (entry / "environ").read_bytes()
        except OSError:
            continue
        i = env.find(needle)
        if i >= 0 and env[i + len(needle): i + len(needle) + 1] in (b"/", b"\0"):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed


def run_process(
    spec: launch.LaunchSpec,
    *,
    index: int,
    wall_s: float,
    transcript: Path,
    stderr_path: Path,
    version: str | None,
    resumed_from: str | None = None,
    redact: tuple[str, ...] = (),
) -> SessionOutcome:
    """Start the CLI per ``spec``, stream its output into ``transcript``, enforce the wall limit.

    Each line is written without the strings in ``redact`` (the run portal's
    password in its forms), so the harness's copy never holds them, even
    while the run is in progress; the end-of-run redaction stays as a safety net.
    """
    from pilot.portal.redaction import redact_bytes

    summary = StreamSummary()
    t0 = time.monotonic()
    with open(stderr_path, "ab") as err:
        try:
            proc = subprocess.Popen(
                spec.command,
                cwd=spec.cwd,
                env=spec.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                preexec_fn=_pdeathsig if _linux() else None,
            )
        except OSError as exc:
            return SessionOutcome(index, summary, time.monotonic() - t0, start_error=f"{type(exc).__name__}: {exc}", cli_version=version, resumed_from=resumed_from)
        lines: list[str] = []

        def pump() -> None:
            assert proc.stdout is not None
            with open(transcript, "ab") as out:
                for raw in proc.stdout:
                    if redact:
                        raw = redact_bytes(raw, redact)
                    out.write(raw if raw.endswith(b"\n") else raw + b"\n")
                    out.flush()
                    lines.append(raw.decode("utf-8", "replace"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            assert proc.stdin is not None
            proc.stdin.write((spec.prompt + "\n").encode("utf-8"))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        timed_out = False
        try:
            proc.wait(timeout=max(wall_s, 0.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(proc)
        else:
            # The CLI is gone; anything it left behind in its group goes too.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        marker = spec.env.get("CLAUDE_CONFIG_DIR")
        if marker:
            sweep_run_processes(marker)
        reader.join(timeout=KILL_GRACE_S)
    wall = time.monotonic() - t0
    parse_stream(lines, summary, session=index)
    tail = stderr_path.read_text(encoding="utf-8", errors="replace")[-4000:] if stderr_path.exists() else ""
    # A sandbox that could not be set up is a start failure, not a session.
    start_error = None
    last = tail.strip().splitlines()[-1] if tail.strip() else ""
    if spec.sandbox_prefix and not lines and proc.returncode not in (0, None) and last.startswith(("bwrap:", "pilot-sandbox:")):
        start_error = last
    ver = summary.cli_versions[-1] if summary.cli_versions else version
    return SessionOutcome(index, summary, wall, exit_code=proc.returncode, start_error=start_error, timed_out=timed_out,
                          cli_version=ver, stderr_tail=tail, resumed_from=resumed_from)


def _linux() -> bool:
    import platform

    return platform.system() == "Linux"


#: The discard port on loopback: nothing answers there, so a launch pointed at it performs no inference.
PREFLIGHT_BASE_URL = "http://127.0.0.1:9"


class ToolSetMismatch(RuntimeError):
    """The CLI, launched as the arm says, offers another tool set than the arm's."""


def offered_tools(spec: launch.LaunchSpec, timeout_s: float = 60.0) -> list[str] | None:
    """The tools the CLI offers under ``spec``, read from its init line with the API unreachable.

    The launch is the real one (sandbox, flags, settings) except that the
    API address points at a port where nothing answers, so no model is
    called; the process is killed as soon as its init line arrives.
    """
    import queue

    env = dict(spec.env, ANTHROPIC_BASE_URL=PREFLIGHT_BASE_URL, ANTHROPIC_API_KEY="preflight-without-a-key")
    try:
        proc = subprocess.Popen(spec.command, cwd=spec.cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=_pdeathsig if _linux() else None)
    except OSError:
        return None
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert proc.stdin is not None
        proc.stdin.write((spec.prompt + "\n").encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    tools = None
    deadline = time.monotonic() + timeout_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                raw = lines.get(timeout=left)
            except queue.Empty:
                break
            if raw is None:
                break
            try:
                ev = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(ev, dict) and ev.get("type") == "system" and ev.get("subtype") == "init":
                tools = [str(t) for t in ev.get("tools") or []]
                break
    finally:
        _kill_tree(proc)
    return tools


class ClaudeCodeBackend:
    """Sessions of the real CLI for one run (first launch and the A4 resume), each in the run's sandbox.

    The backend owns the harness side of the sandbox's ways out for the
    attempt: the portal bridge (arms with the portal) and the refusing HTTP
    proxy; :meth:`close` stops them. The model proxy's socket and per-run
    token come in ``model_endpoint``.
    """

    name = "claude-code"

    def __init__(
        self,
        arm: Arm,
        study: Study,
        *,
        run_dir: Path,
        workspace: Path,
        claude_bin: Path,
        model_endpoint: launch.ModelEndpoint,
        model: str | None = None,
        worker_env: Path | None = None,
        extra_env: dict[str, str] | None = None,
        isolation: str = launch.ISOLATION_REQUIRED,
        portal_url: str | None = None,
        redact: tuple[str, ...] = (),
    ) -> None:
        import tempfile
        from urllib.parse import urlsplit

        self.arm, self.study = arm, study
        self.run_dir, self.workspace = Path(run_dir), Path(workspace)
        self.claude_bin = Path(claude_bin)
        self.model = model
        self.worker_env = worker_env
        self.extra_env = extra_env
        self.isolation = isolation
        self.model_endpoint = model_endpoint
        #: Secrets kept out of the harness's stream copy as it is written (the run portal's password).
        self.redact = tuple(redact)
        self.transcript = run_files.transcript_path(self.run_dir)
        self.record_dir = run_files.harness_record_dir(self.run_dir)
        self.record_dir.mkdir(parents=True, exist_ok=True)
        self.launches: list[dict] = []
        self._services: list = []
        self.portal_socket: tuple[Path, int] | None = None
        self.refusal_socket: Path | None = None
        self.refusal_log = self.record_dir / network.REFUSAL_LOG
        try:
            if isolation == launch.ISOLATION_REQUIRED:
                # Unix socket paths are short-lived and must stay under 108 bytes: a private folder in the system temp.
                self._socket_dir = Path(tempfile.mkdtemp(prefix="pilot-run-"))
                self.refusal_socket = self._socket_dir / "refusal.sock"
                self._services.append(network.RefusingProxy(self.refusal_socket, self.refusal_log))
                if portal_url:
                    u = urlsplit(portal_url)
                    sock = self._socket_dir / "portal.sock"
                    self._services.append(network.UnixBridge(sock, u.hostname or "127.0.0.1", int(u.port or 80)))
                    self.portal_socket = (sock, int(u.port or 80))
            probe_spec = self._spec(budget_usd=0.0, max_turns=1)
            launch.materialize(probe_spec, self.run_dir)
            self.enforcement = probe_spec.enforcement
            self.notes = list(probe_spec.notes)
            self.version = cli_version(self.claude_bin, probe_spec.env)
            # The arm's tool set is the treatment: check what the CLI really offers before any inference.
            self.tools_offered = offered_tools(self._spec(budget_usd=0.01, max_turns=1, preflight=True))
        except BaseException:
            self.close()
            raise
        if self.tools_offered is not None and sorted(self.tools_offered) != sorted(arm.tools):
            self.close()
            raise ToolSetMismatch(
                f"tool set mismatch: CLI {self.version} offers {sorted(self.tools_offered)} for arm {arm.id}, "
                f"whose tools are {sorted(arm.tools)} (bare mode: {bool(study['cli'].get('bare'))})"
            )

    def _spec(self, *, budget_usd: float, max_turns: int | None, resume: str | None = None, preflight: bool = False) -> launch.LaunchSpec:
        # The preflight reaches no model: no bridge to the proxy, the discard port instead.
        endpoint = launch.ModelEndpoint("preflight-without-a-key", None, PREFLIGHT_BASE_URL) if preflight else self.model_endpoint
        return launch.build_launch(
            self.arm, self.study, claude_bin=self.claude_bin, workspace=self.workspace, run_dir=self.run_dir,
            budget_usd=budget_usd, max_turns=max_turns, model=self.model, resume_session_id=resume,
            worker_env=self.worker_env, extra_env=self.extra_env, isolation=self.isolation, model_endpoint=endpoint,
            portal_socket=None if preflight else self.portal_socket, refusal_socket=None if preflight else self.refusal_socket,
        )

    def run_session(self, index: int, *, budget_usd: float, wall_s: float, max_turns: int | None = None,
                    resume_session_id: str | None = None, prompt: str | None = None) -> SessionOutcome:
        spec = self._spec(budget_usd=budget_usd, max_turns=max_turns, resume=resume_session_id)
        if prompt is not None:
            spec.prompt = prompt
        launch.materialize(spec, self.run_dir)
        record = spec.to_dict() | {"index": index, "wall_s": wall_s, "budget_usd": budget_usd}
        self.launches.append(record)
        (self.record_dir / f"launch-{index}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        return run_process(spec, index=index, wall_s=wall_s, transcript=self.transcript,
                           stderr_path=self.record_dir / f"stderr-{index}.log", version=self.version,
                           resumed_from=resume_session_id, redact=self.redact)

    def refusals(self) -> list[dict]:
        """The destinations the refusing proxy turned away during this run."""
        return network.read_refusals(self.refusal_log)

    def close(self) -> None:
        """Stop the harness side of the bridges (the sandbox is gone with its session)."""
        import shutil as _shutil

        for svc in self._services:
            svc.close()
        self._services = []
        d = getattr(self, "_socket_dir", None)
        if d is not None:
            _shutil.rmtree(d, ignore_errors=True)
