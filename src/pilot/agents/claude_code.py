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
import resource
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pilot import paths
from pilot import workspace as run_files
from pilot.agents import bounded_disk, bounds, launch, network, sandbox, session_store, takeback, worker_user
from pilot.agents.audit import StreamSummary, parse_stream
from pilot.agents.session import SessionOutcome
from pilot.protocol import Arm, Study

KILL_GRACE_S = 5.0
#: How much of the CLI's stderr the harness keeps per session (the rest is read and dropped).
STDERR_KEEP_BYTES = 1024 * 1024


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
    raise CliNotFound(
        "no Claude Code CLI: pass --claude-bin, install the 'agent' extra (claude-agent-sdk), or put claude on PATH"
    )


def cli_version(claude_bin: Path, env: dict[str, str], timeout_s: float = 60.0) -> str | None:
    """``claude --version``, reduced to its version number (None when it does not answer)."""
    try:
        out = subprocess.run(
            [str(claude_bin), "--version"],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\d+\.\d+\.\d+", out.stdout + " " + out.stderr)
    return m.group(0) if m else None


def _kill_tree(proc: subprocess.Popen, grace: float = KILL_GRACE_S) -> None:
    """Terminate the session's process group, then kill it after a grace period."""
    steps = (
        ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_GRACE_S)) if grace > 0 else ((signal.SIGKILL, KILL_GRACE_S),)
    )
    for sig, wait in steps:
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
    """Kill every process whose run mark (``PILOT_RUN_CONFIG``, the run's config folder) lies under ``prefix``
    (leftovers of an attempt).

    An attempt's processes all carry their run's config folder in their
    environment (bubblewrap, the bridges, the CLI and what it starts).
    Linux only (reads /proc); elsewhere nothing is found.
    """
    killed: list[int] = []
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return killed
    needle = b"\0" + launch.RUN_MARK_VAR.encode() + b"=" + str(Path(prefix).resolve()).encode()
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = b"\0" + (entry / "environ").read_bytes()
        except OSError:
            continue
        i = env.find(needle)
        if i >= 0 and env[i + len(needle) : i + len(needle) + 1] in (b"/", b"\0"):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed


@dataclass
class Confinement:
    """Who a session runs as and what bounds it, beyond the sandbox's mounts (:mod:`pilot.agents.worker_user`,
    :mod:`pilot.agents.bounds`)."""

    identity: worker_user.WorkerIdentity
    limits: bounds.Limits
    #: The worker's writable folders in the run folder: workspace, scratch home, CLI config (``bounded_disk.HOLDS``).
    writable: tuple[Path, ...] = ()
    cgroup: bounds.AttemptCgroup | None = None
    #: The session's bounded disk while one runs (bubblewrap): the writable folders live on it, bound at their paths.
    disk: bounded_disk.SessionDisk | None = None

    @property
    def disk_bound(self) -> bool:
        """Whether this host holds the disk bound by a bounded disk per session (a bubblewrap sandbox)."""
        return sandbox.enforcement_method() == "bubblewrap"

    def disk_sources(self) -> dict[str, str]:
        """Each writable folder's host path -> its folder on the session's bounded disk (empty without one)."""
        if self.disk is None:
            return {}
        return {str(host): self.disk.folder(name) for host, name in zip(self.writable, bounded_disk.HOLDS, strict=True)}

    def command(self, spec: launch.LaunchSpec) -> tuple[list[str], sandbox.BindStage | None]:
        """The launch's command line as this confinement runs it: binds from the disk, staged for a worker uid."""
        cmd = list(spec.command)
        if not spec.sandbox_prefix:
            return cmd, None
        sources = self.disk_sources()
        if sources:
            cmd = sandbox.map_binds(cmd, sources)
        if self.identity.switch:
            return sandbox.stage_binds(cmd, frozenset(sources.values()))
        return cmd, None

    def describe(self) -> dict:
        """What holds each bound on this host (recorded in every launch record)."""
        held = set(self.cgroup.bounds) if self.cgroup else set()
        if self.disk_bound:
            plan = (
                self.disk.describe()
                if self.disk is not None
                else bounded_disk.describe_plan(self.limits.workspace_bytes)
            )
            disk = (
                f"the kernel: a size-limited tmpfs of {plan['bytes']} bytes and {plan['entries']} entries in a "
                f"{plan['namespace']} namespace of the harness's own, holding the workspace, scratch home and CLI "
                "config folder (unlinked-open files, deep paths and allocations count); RLIMIT_FSIZE per file; "
                "the watcher records the bound when the tmpfs is full"
            )
        else:
            plan = None
            disk = "RLIMIT_FSIZE per file and the harness's watcher"
        how = {
            "memory": "cgroup" if "memory" in held else "not bounded (no writable cgroup on this host)",
            "processes": "cgroup"
            if "processes" in held
            else (
                "RLIMIT_NPROC (dedicated uid)"
                if self.identity.switch
                else "RLIMIT_NPROC above the harness user's own tasks"
            ),
            "cpu": "cgroup" if "cpu" in held else "not bounded (no writable cgroup on this host)",
            "disk": disk,
            "tmp": "the kernel: --size on each tmpfs (/tmp, /var/tmp, /run, /dev/shm; /dev read-only); the watcher "
            "records the bound when one is full",
            "stream": "the harness's reader (line and transcript bounds)",
        }
        return {
            "identity": self.identity.to_dict(),
            "limits": self.limits.to_dict(),
            "held_by": how,
            "cgroup": self.cgroup.to_dict() if self.cgroup else None,
            "disk": plan,
        }


def _child_setup(conf: Confinement | None, stage: sandbox.BindStage | None, nproc: int | None) -> Callable[[], None]:
    """What the child does before exec: join the attempt's groups and its disk's namespace, stage the binds, set limits,
    drop to the worker, die with the harness."""

    def setup() -> None:
        if conf is not None and conf.cgroup is not None:
            conf.cgroup.attach_self()
        if conf is not None and conf.disk is not None:
            conf.disk.enter()
        if stage is not None:
            stage.mount()
        if conf is not None:
            bounds.child_rlimits(conf.limits, nproc=False)
            if nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            conf.identity.drop_privileges()
        # After the change of uid: the kernel clears the parent-death signal when credentials change.
        _pdeathsig()

    return setup


class _StreamBound(Exception):
    pass


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
    confinement: Confinement | None = None,
    assigned_session_id: str | None = None,
) -> SessionOutcome:
    """Start the CLI per ``spec``, stream its output into ``transcript``, enforce the wall limit and the bounds.

    The CLI's stdin, stdout and stderr are sockets the harness holds the
    other ends of: a socket cannot be reopened through ``/proc/<pid>/fd``, so
    nothing in the sandbox can write into the harness's copy of the stream or
    its stderr log by naming them. Each line is written without the strings
    in ``redact`` (the run portal's password in its forms), so the harness's
    copy never holds them, even while the run is in progress; the end-of-run
    redaction stays as a safety net. A line longer than the stream bound, or
    a transcript past its bound, ends the session at that bound
    (``bound="stream"``); so does any other resource bound the watcher sees.
    """
    from pilot.portal.redaction import redact_bytes

    summary = StreamSummary()
    t0 = time.monotonic()
    limits = confinement.limits if confinement is not None else None
    cmd, stage = confinement.command(spec) if confinement is not None else (list(spec.command), None)
    nproc = None
    if (
        confinement is not None
        and spec.sandbox_prefix
        and not (confinement.cgroup and "processes" in confinement.cgroup.bounds)
    ):
        # Without a pids group the per-uid limit holds the bound: exact for a dedicated uid, else above the user's own
        # tasks.
        own = 0 if confinement.identity.switch else len(worker_user.user_pids(confinement.identity.uid))
        nproc = own + confinement.limits.processes
    socks = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
    mine = [a for a, _ in socks]
    theirs = [b for _, b in socks]
    bound: dict[str, str] = {}
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=spec.cwd,
            env=spec.env,
            stdin=theirs[0].fileno(),
            stdout=theirs[1].fileno(),
            stderr=theirs[2].fileno(),
            start_new_session=True,
            preexec_fn=_child_setup(confinement, stage, nproc) if _linux() else None,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        for sk in mine + theirs:
            sk.close()
        return SessionOutcome(
            index,
            summary,
            time.monotonic() - t0,
            start_error=f"{type(exc).__name__}: {exc}",
            cli_version=version,
            resumed_from=resumed_from,
            assigned_session_id=assigned_session_id,
        )
    for sk in theirs:
        sk.close()
    lines: list[str] = []
    stop = threading.Event()

    def end_at(reason: str, detail: str) -> None:
        # The first bound reached is the run's (the reader and the watcher may both see one).
        bound.setdefault("reason", reason)
        bound.setdefault("detail", detail)
        stop.set()

    def pump() -> None:
        max_line = limits.line_bytes if limits else None
        max_total = limits.transcript_bytes if limits else None
        total = 0
        with mine[1].makefile("rb") as src, open(transcript, "ab") as out:
            while True:
                raw = src.readline(max_line + 1) if max_line else src.readline()
                if not raw:
                    return
                if max_line and len(raw) > max_line and not raw.endswith(b"\n"):
                    end_at("stream", f"a stream line longer than {max_line} bytes")
                    return
                if max_total and total + len(raw) > max_total:
                    end_at("stream", f"the stream passed {max_total} bytes")
                    return
                total += len(raw)
                if redact:
                    raw = redact_bytes(raw, redact)
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
                out.flush()
                lines.append(raw.decode("utf-8", "replace"))

    def drain_stderr() -> None:
        # Kept in full up to a bound; past it the rest is read and dropped, so the CLI never blocks on it.
        kept = 0
        with mine[2].makefile("rb") as src, open(stderr_path, "ab") as err:
            for chunk in iter(lambda: src.read1(65536), b""):
                if kept < STDERR_KEEP_BYTES:
                    piece = chunk[: STDERR_KEEP_BYTES - kept]
                    err.write(piece)
                    err.flush()
                    kept += len(piece)

    def watch() -> None:
        if confinement is None or not spec.sandbox_prefix:
            return
        inside = None
        while not stop.wait(bounds.WATCH_INTERVAL_S):
            cg = confinement.cgroup
            hit = cg.breach() if cg is not None else None
            if hit:
                end_at(hit, f"the sandbox reached its {hit} bound ({confinement.describe()['held_by'][hit]})")
                return
            ident = confinement.identity
            if (
                ident.switch
                and nproc is not None
                and len(worker_user.user_pids(ident.uid)) >= confinement.limits.processes
            ):
                end_at("processes", f"the worker ran {confinement.limits.processes} tasks")
                return
            if confinement.disk is not None:
                full = confinement.disk.full()
                if full:
                    end_at("disk", full)
                    return
                used, overflow = 0, False
            else:
                used, overflow = bounds.tree_bytes(list(confinement.writable))
            if used > confinement.limits.workspace_bytes or overflow:
                end_at(
                    "disk",
                    f"the workspace and scratch folders hold {used} bytes"
                    + (
                        " in more entries than the watcher counts"
                        if overflow
                        else f" (bound {confinement.limits.workspace_bytes})"
                    ),
                )
                return
            inside = inside or bounds.sandbox_pid(proc.pid)
            if inside is not None:
                for mount in sandbox.SCRATCH_TMPFS:
                    usage = bounds.tmpfs_usage(inside, mount)
                    if usage is not None and usage[1] < bounds.TMPFS_FULL_SLACK_BYTES:
                        end_at("tmp", f"{mount} is full ({usage[0]} bytes of {confinement.limits.tmp_bytes})")
                        return

    reader = threading.Thread(target=pump, daemon=True)
    err_reader = threading.Thread(target=drain_stderr, daemon=True)
    watcher = threading.Thread(target=watch, daemon=True)
    reader.start()
    err_reader.start()
    watcher.start()
    try:
        mine[0].sendall((spec.prompt + "\n").encode("utf-8"))
    except OSError:
        pass
    mine[0].close()
    timed_out = False
    deadline = t0 + max(wall_s, 0.0)
    while True:
        try:
            proc.wait(timeout=min(0.2, max(deadline - time.monotonic(), 0.0)))
            break
        except subprocess.TimeoutExpired:
            pass
        if bound:
            _kill_tree(proc, grace=0.0)
            break
        if time.monotonic() >= deadline:
            timed_out = True
            _kill_tree(proc)
            break
    stop.set()
    if not bound and confinement is not None and confinement.cgroup is not None:
        # A bound can end the CLI itself before the watcher's next look (a fork refused to the client): look once more.
        hit = confinement.cgroup.breach()
        if hit:
            bound.update(
                reason=hit, detail=f"the sandbox reached its {hit} bound ({confinement.describe()['held_by'][hit]})"
            )
    if not bound and confinement is not None and confinement.disk is not None:
        # So can a full disk (the CLI failing to write its store): it is the bound the session reached.
        full = confinement.disk.full()
        if full:
            bound.update(reason="disk", detail=full)
    # The CLI is gone; anything it left behind in its group, its cgroup or its run goes too.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if confinement is not None and confinement.cgroup is not None:
        confinement.cgroup.kill_all()
    marker = spec.env.get(launch.RUN_MARK_VAR)
    if marker:
        sweep_run_processes(marker)
    reader.join(timeout=KILL_GRACE_S)
    err_reader.join(timeout=KILL_GRACE_S)
    watcher.join(timeout=KILL_GRACE_S)
    for sk in mine:
        sk.close()
    wall = time.monotonic() - t0
    parse_stream(lines, summary, session=index)
    tail = stderr_path.read_text(encoding="utf-8", errors="replace")[-4000:] if stderr_path.exists() else ""
    # A sandbox that could not be set up is a start failure, not a session.
    start_error = None
    last = tail.strip().splitlines()[-1] if tail.strip() else ""
    if (
        spec.sandbox_prefix
        and not lines
        and proc.returncode not in (0, None)
        and last.startswith(("bwrap:", "pilot-sandbox:"))
    ):
        start_error = last
    ver = summary.cli_versions[-1] if summary.cli_versions else version
    return SessionOutcome(
        index,
        summary,
        wall,
        exit_code=proc.returncode,
        start_error=start_error,
        timed_out=timed_out and not bound,
        cli_version=ver,
        stderr_tail=tail,
        resumed_from=resumed_from,
        assigned_session_id=assigned_session_id,
        bound=bound.get("reason"),
        bound_detail=bound.get("detail"),
    )


def _linux() -> bool:
    import platform

    return platform.system() == "Linux"


#: The discard port on loopback: nothing answers there, so a launch pointed at it performs no inference.
PREFLIGHT_BASE_URL = "http://127.0.0.1:9"


class ToolSetMismatch(RuntimeError):
    """The CLI, launched as the arm says, offers another tool set than the arm's."""


def offered_tools(
    spec: launch.LaunchSpec, timeout_s: float = 60.0, confinement: Confinement | None = None
) -> list[str] | None:
    """The tools the CLI offers under ``spec``, read from its init line with the API unreachable.

    The launch is the real one (sandbox, flags, settings) except that the
    API address points at a port where nothing answers, so no model is
    called; the process is killed as soon as its init line arrives.
    """
    import queue

    env = dict(spec.env, ANTHROPIC_BASE_URL=PREFLIGHT_BASE_URL, ANTHROPIC_API_KEY="preflight-without-a-key")
    cmd, stage = confinement.command(spec) if confinement is not None else (list(spec.command), None)
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=spec.cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_child_setup(confinement, stage, None) if _linux() else None,
        )
    except (OSError, subprocess.SubprocessError):
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
        limits: bounds.Limits | None = None,
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
        self.lease: worker_user.SlotLease | None = None
        self.confinement: Confinement | None = None
        #: The session id the harness gives the first session and resumes; never one read from the stream.
        self.session_id = str(uuid.uuid4())
        #: The session store as the first session left it (:mod:`pilot.agents.session_store`), or why no resume.
        self.store_seal: session_store.Seal | None = None
        self.store_refusal: str | None = None
        self._store_started_ns = time.time_ns()
        #: The store was lent to the worker's group for the session now running (a resume under a dedicated uid).
        self._store_lent = False
        try:
            if isolation == launch.ISOLATION_REQUIRED:
                self.lease = worker_user.acquire(study)
                limits = limits or bounds.Limits.from_study(study)
                dirs = launch.AgentDirs.under(self.run_dir)
                cgroup = bounds.AttemptCgroup.create(
                    f"{self.lease.identity.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}", limits
                )
                self.confinement = Confinement(
                    self.lease.identity, limits, (self.workspace.resolve(), dirs.home, dirs.config), cgroup
                )
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
            self._hand_over()
            try:
                self.tools_offered = offered_tools(
                    self._spec(budget_usd=0.01, max_turns=1, preflight=True), confinement=self.confinement
                )
            finally:
                self._take_back("preflight")
        except BaseException:
            self.close()
            raise
        if self.tools_offered is not None and sorted(self.tools_offered) != sorted(arm.tools):
            self.close()
            raise ToolSetMismatch(
                f"tool set mismatch: CLI {self.version} offers {sorted(self.tools_offered)} for arm {arm.id}, "
                f"whose tools are {sorted(arm.tools)} (bare mode: {bool(study['cli'].get('bare'))})"
            )

    def _hand_over(self, resume: bool = False) -> None:
        """Give the worker its writable folders and the sockets of its bridges for a session.

        With bubblewrap the folders are copied, by descriptor, onto a fresh
        bounded disk (:mod:`pilot.agents.bounded_disk`), owned there by the
        worker's uid; the run folder's copies stay the harness's. Otherwise
        (the macOS profile) a dedicated uid is given the folders themselves.
        For the resume the CLI's store is lent, not given
        (:func:`pilot.agents.session_store.lend`): its entries stay the
        harness's, open to the worker's group, so the worker's shell can change
        none of their metadata. Raises
        :class:`pilot.agents.bounded_disk.BoundedDiskError` when the disk
        cannot be made or the folders do not fit it.
        """
        conf = self.confinement
        if conf is None:
            return
        uid, gid = conf.identity.uid, conf.identity.gid
        lend = resume and conf.identity.switch
        self._store_lent = lend
        if conf.disk_bound:
            mount_point = self._socket_dir / "disk"
            mount_point.mkdir(mode=0o700, exist_ok=True)
            conf.disk = bounded_disk.SessionDisk.create(mount_point, conf.limits.workspace_bytes)
            try:
                report = self._copy(to_disk=True, owner=(uid, gid) if conf.identity.switch else None)
            except OSError as exc:
                raise bounded_disk.BoundedDiskError(
                    f"the run's folders could not be copied onto its disk: {exc}"
                ) from exc
            if report.removed:
                raise bounded_disk.BoundedDiskError(
                    f"the run's folders do not fit the session's disk ({conf.limits.workspace_bytes} bytes): "
                    + "; ".join(report.removed_names[:5])
                )
            if lend:
                session_store.lend(self._disk_store(), worker_uid=uid, worker_gid=gid, owner_uid=os.getuid())
        elif conf.identity.switch:
            config = launch.AgentDirs.under(self.run_dir).config
            for d in conf.writable:
                if lend and Path(d) == config:
                    session_store.lend(d, worker_uid=uid, worker_gid=gid, owner_uid=os.getuid())
                else:
                    worker_user.give_tree(d, uid, gid)
        if not conf.identity.switch:
            return
        for sock in (
            self.model_endpoint.socket_path,
            self.refusal_socket,
            self.portal_socket[0] if self.portal_socket else None,
        ):
            if sock is not None and Path(sock).exists():
                os.chown(sock, uid, gid)

    def _copy(self, *, to_disk: bool, owner: tuple[int, int] | None = None) -> takeback.TakeBack:
        """Copy the writable folders onto the session's disk or back into the run folder, within the bound."""
        conf = self.confinement
        assert conf is not None and conf.disk is not None
        return takeback.copy_folders(
            zip(conf.writable, bounded_disk.HOLDS, strict=True),
            conf.disk.root_fd,
            takeback.CopyBounds(conf.limits.workspace_bytes, conf.disk.entries),
            to_disk=to_disk,
            owner=owner,
        )

    def _take_back(self, label: str) -> dict | None:
        """After a session: what the worker wrote becomes the harness's own files in the run folder, nothing else.

        With a bounded disk, the take-back is the copy out of it into fresh
        folders of the run (then the disk is let go, and with it whatever
        was not taken); otherwise the folders are re-owned in place by
        descriptor. What was removed is recorded (``record/takeback-<label>.json``)
        and returned for the session's record.
        """
        conf = self.confinement
        if conf is None:
            return None
        if conf.disk is not None:
            try:
                if self._store_lent:
                    # What the resume lent to the worker's group is the harness's alone again before it is copied.
                    self._reclaim_store(self._disk_store())
                report = self._copy(to_disk=False)
            finally:
                conf.disk.close()
                conf.disk = None
        elif conf.identity.switch:
            report = takeback.TakeBack()
            for d in conf.writable:
                report.add(worker_user.take_back_tree(d))
            if self._store_lent:
                self._reclaim_store(str(launch.AgentDirs.under(self.run_dir).config))
        else:
            return None
        taken = report.to_dict()
        (self.record_dir / f"takeback-{label}.json").write_text(json.dumps(taken, indent=2) + "\n", encoding="utf-8")
        return taken

    def _reclaim_store(self, store: str) -> None:
        conf = self.confinement
        assert conf is not None
        self._store_lent = False
        try:
            session_store.reclaim(store, worker_gid=conf.identity.gid, owner_uid=os.getuid(), owner_gid=os.getgid())
        except (OSError, session_store.StoreRefused) as exc:  # gone, unreadable: the take-back copies what is left
            self.notes.append(f"session store: what the resume lent could not be reclaimed in place ({exc})")

    def _disk_store(self) -> str:
        """The CLI's store on the session's bounded disk,
        as a path the harness can reach (through the disk's folder)."""
        conf = self.confinement
        assert conf is not None and conf.disk is not None
        return f"/proc/self/fd/{conf.disk.root_fd}/{bounded_disk.HOLDS[2]}"

    def _spec(
        self, *, budget_usd: float, max_turns: int | None, resume: str | None = None, preflight: bool = False
    ) -> launch.LaunchSpec:
        # The preflight reaches no model: no bridge to the proxy, the discard port instead.
        endpoint = (
            launch.ModelEndpoint("preflight-without-a-key", None, PREFLIGHT_BASE_URL)
            if preflight
            else self.model_endpoint
        )
        return launch.build_launch(
            self.arm,
            self.study,
            claude_bin=self.claude_bin,
            workspace=self.workspace,
            run_dir=self.run_dir,
            budget_usd=budget_usd,
            max_turns=max_turns,
            model=self.model,
            resume_session_id=resume,
            session_id=None if (resume or preflight) else self.session_id,
            tmp_bytes=self.confinement.limits.tmp_bytes if self.confinement else None,
            worker_env=self.worker_env,
            extra_env=self.extra_env,
            isolation=self.isolation,
            model_endpoint=endpoint,
            portal_socket=None if preflight else self.portal_socket,
            refusal_socket=None if preflight else self.refusal_socket,
        )

    def run_session(
        self,
        index: int,
        *,
        budget_usd: float,
        wall_s: float,
        max_turns: int | None = None,
        resume_session_id: str | None = None,
        prompt: str | None = None,
    ) -> SessionOutcome:
        """One session; a resume always continues the harness's own session id (``resume_session_id`` must be it)."""
        if resume_session_id is not None and resume_session_id != self.session_id:
            raise ValueError(
                f"resume of {resume_session_id!r}: only the harness's session {self.session_id} is ever resumed"
            )
        spec = self._spec(budget_usd=budget_usd, max_turns=max_turns, resume=resume_session_id)
        if prompt is not None:
            spec.prompt = prompt
        launch.materialize(spec, self.run_dir)
        record = spec.to_dict() | {
            "index": index,
            "wall_s": wall_s,
            "budget_usd": budget_usd,
            "session_id": self.session_id,
        }
        try:
            self._hand_over(resume=resume_session_id is not None)
        except (OSError, bounded_disk.BoundedDiskError) as exc:
            self._drop_disk()
            return SessionOutcome(
                index,
                StreamSummary(),
                0.0,
                start_error=f"the session's folders could not be handed over: {exc}",
                cli_version=self.version,
                resumed_from=resume_session_id,
                assigned_session_id=self.session_id,
            )
        # Written after the hand-over: the record says which bounded disk the session has.
        record["confinement"] = self.confinement.describe() if self.confinement else None
        self.launches.append(record)
        (self.record_dir / f"launch-{index}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        try:
            outcome = run_process(
                spec,
                index=index,
                wall_s=wall_s,
                transcript=self.transcript,
                stderr_path=self.record_dir / f"stderr-{index}.log",
                version=self.version,
                resumed_from=resume_session_id,
                redact=self.redact,
                confinement=self.confinement,
                assigned_session_id=self.session_id,
            )
        finally:
            taken = self._take_back(str(index))
        outcome.taken_back = taken
        if resume_session_id is None and self.arm.recovery_resumes > 0:
            self._seal_store()
        return outcome

    def _drop_disk(self) -> None:
        conf = self.confinement
        if conf is not None and conf.disk is not None:
            conf.disk.close()
            conf.disk = None

    def _store_record(self, key: str, value: dict) -> None:
        path = self.record_dir / "session_store.json"
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        data[key] = value
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")

    def _seal_store(self) -> None:
        """After the first session of an arm that may resume: undo what the kernel could not stop, record the store."""
        config = launch.AgentDirs.under(self.run_dir).config
        try:
            self.store_seal = session_store.seal(config, started_ns=self._store_started_ns)
        except (session_store.StoreRefused, OSError) as exc:
            self.store_seal, self.store_refusal = None, f"the session store cannot be sealed: {exc}"
            self._store_record("seal", {"refusal": self.store_refusal})
            return
        self._store_record("seal", self.store_seal.to_dict())
        if self.store_seal.restored:
            self.notes.append(
                f"session store: {len(self.store_seal.restored)} change(s) the worker's shell could make were undone "
                f"after the first session ({'; '.join(self.store_seal.restored[:3])})"
            )

    def resume_refusal(self) -> str | None:
        """Why the harness's session cannot be resumed from its store (None: it may), checked just before the resume.

        The store must be what :meth:`_seal_store` recorded: metadata changed since is restored and noted; anything
        else refuses the resume (:func:`pilot.agents.session_store.check`).
        """
        if self.store_refusal is not None:
            return self.store_refusal
        if self.store_seal is None:
            return "the session store was not sealed after the first session"
        config = launch.AgentDirs.under(self.run_dir).config
        try:
            result = session_store.check(config, self.store_seal)
        except (session_store.StoreRefused, OSError) as exc:
            result = session_store.Check(refusal=f"the session store cannot be read: {exc}")
        self._store_record("check", result.to_dict())
        if result.restored:
            self.notes.append(
                f"session store: {len(result.restored)} change(s) of metadata since the first session were restored "
                f"before the resume ({'; '.join(result.restored[:3])})"
            )
        return result.refusal

    def refusals(self) -> list[dict]:
        """The destinations the refusing proxy turned away during this run."""
        # The live proxy counts every request; its log holds the counts only once it is closed.
        live = [svc for svc in self._services if isinstance(svc, network.RefusingProxy)]
        return live[0].refusals() if live else network.read_refusals(self.refusal_log)

    def close(self) -> None:
        """Stop the harness side of the bridges (the sandbox is gone with its session)."""
        import shutil as _shutil

        for svc in self._services:
            svc.close()
        self._services = []
        conf = getattr(self, "confinement", None)
        if conf is not None:
            self._drop_disk()
        if conf is not None and conf.cgroup is not None:
            conf.cgroup.remove()
        lease = getattr(self, "lease", None)
        if lease is not None:
            lease.release()
        d = getattr(self, "_socket_dir", None)
        if d is not None:
            _shutil.rmtree(d, ignore_errors=True)


def start_agent(
    *,
    arm: Arm,
    study: Study,
    scenario: object,
    out_dir: Path,
    ws_root: Path,
    seed: int,
    model: str | None,
    claude_bin: Path | str | None,
    worker_env: Path | None,
    extra_env: dict[str, str] | None,
    isolation: str | None,
    endpoint: object,
    portal_url: str | None,
    redact: tuple[str, ...] = (),
    limits: bounds.Limits | None = None,
) -> tuple[ClaudeCodeBackend | None, dict | None, str | None]:
    """The ``agent`` role of the CLI backends (:mod:`pilot.backends`): the pinned CLI found, the worker's Python
    environment checked, the backend built; or ``(None, worker_env_record, "start_failed: ...")``."""
    from pilot.agents import worker_env as wenv

    try:
        cli = find_cli(claude_bin)
    except CliNotFound as exc:
        return None, None, f"start_failed: {exc}"
    env_dir = None
    worker_info = None
    if arm.feature("python_env"):
        env_dir = Path(worker_env) if worker_env is not None else wenv.default_env()
        if env_dir is None or not wenv.python_of(env_dir).exists():
            return (
                None,
                None,
                f"start_failed: the worker Python environment is missing at {env_dir or paths.WORKER_ENV_DIR} (run "
                "`pilot worker-env build`)",
            )
        try:
            worker_info = {"path": str(env_dir), "versions": wenv.recorded_versions(env_dir)}
        except (OSError, RuntimeError, ValueError) as exc:
            return None, None, f"start_failed: the worker Python environment at {env_dir} does not answer: {exc}"
    try:
        agent = ClaudeCodeBackend(
            arm,
            study,
            run_dir=out_dir,
            workspace=ws_root,
            claude_bin=cli,
            model=model,
            worker_env=env_dir,
            extra_env=extra_env,
            isolation=isolation,
            model_endpoint=endpoint,
            portal_url=portal_url,
            redact=redact,
            limits=limits,
        )
    except RuntimeError as exc:
        return None, worker_info, f"start_failed: {exc}"
    return agent, worker_info, None
