"""One run's portal: start it, hand out its credentials, stop it.

``start_instance`` starts the server process on a free loopback port with the
scenario's content and a fresh credential pair, and returns only once the
health check answers with this instance's id. Anything else (content missing
or malformed, the port taken, the process dying, no healthy answer in time)
raises ``PortalStartError``, which the runner files as an infrastructure error.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pilot import paths
from pilot.portal.access_log import ACCESS_LOG_NAME, SERVER_LOG_NAME, summarise_access_log
from pilot.portal.app import SessionLimits, SignInLimits
from pilot.portal.content import MANIFEST_NAME
from pilot.portal.credentials import Credentials, CredentialVerifier
from pilot.portal.wire import EXIT_BIND, EXIT_CONTENT, LOOPBACK, ServerLimits, check_port

DEFAULT_START_TIMEOUT_S = 20.0
#: How long the end-of-run health check keeps asking before it calls the portal dead.
DEFAULT_HEALTH_TIMEOUT_S = 10.0


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (the portal's ``unix_socket`` mode)."""

    def __init__(self, socket_path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _get_health(url: str, unix_socket: str | None, timeout: float) -> dict:
    """The JSON of ``GET /healthz``, straight to the server (never through a proxy named in the environment)."""
    if unix_socket:
        conn: http.client.HTTPConnection = _UnixHTTPConnection(unix_socket, timeout)
    else:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise ValueError(f"status {resp.status}")
        return json.loads(body.decode("utf-8"))
    finally:
        conn.close()


@dataclass(frozen=True)
class PortalHealth:
    """Whether the instance still answers as itself; ``reason`` says why not."""

    ok: bool
    reason: str | None = None


@dataclass(frozen=True)
class PortalRunEnd:
    """What the runner learns of its portal when the run ends: health, then requests served."""

    healthy: bool
    reason: str | None
    requests: int

    @property
    def fault(self) -> bool:
        return not self.healthy

    @property
    def infra_error(self) -> str | None:
        """The run's infrastructure error (a rerun) when the portal died before serving anything."""
        if self.healthy or self.requests > 0:
            return None
        return (
            f"portal_died: the portal was not answering at the end of the run ({self.reason}) and had served no request"
        )

    @property
    def note(self) -> str | None:
        """A note on the run when the portal died after serving the worker (the run stands, flagged)."""
        if self.healthy or self.requests == 0:
            return None
        return (
            f"portal fault: the portal was not answering at the end of the run ({self.reason}) "
            f"after serving {self.requests} request(s); the worker may have lost access part-way"
        )


class PortalStartError(RuntimeError):
    """The portal did not come up; an infrastructure error, not the agent's doing."""

    infra_kind = "portal_start"

    def __init__(self, scenario_id: str, reason: str, *, server_log: str = ""):
        self.scenario_id, self.reason, self.server_log = scenario_id, reason, server_log
        message = f"portal for {scenario_id} did not start: {reason}"
        if server_log.strip():
            message += f"\n--- server log ---\n{server_log.strip()}"
        super().__init__(message)


@dataclass
class PortalInstance:
    scenario_id: str
    url: str
    credentials: Credentials
    instance_id: str
    access_log_path: Path
    server_log_path: Path
    pid: int
    unix_socket: Path | None = None
    _process: subprocess.Popen | None = field(default=None, repr=False)
    _server_log: object = field(default=None, repr=False)
    _exit_code: int | None = field(default=None, repr=False)

    @property
    def credential_fingerprint(self) -> str:
        return self.credentials.fingerprint

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def health(self, timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S) -> PortalHealth:
        """Whether the server is alive and answers ``/healthz`` as this instance, asking until ``timeout_s``.

        A busy server gets several chances: calling a live portal dead turns
        a paid run into a rerun.
        """
        proc = self._process
        if proc is None:
            return PortalHealth(False, "the instance was already stopped")
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while True:
            code = proc.poll()
            if code is not None:
                return PortalHealth(False, f"the server process exited with status {code}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return PortalHealth(False, f"health check timed out after {timeout_s:g} s ({last})")
            try:
                body = _get_health(
                    self.url,
                    str(self.unix_socket) if self.unix_socket else None,
                    timeout=min(2.0, max(remaining, 0.05)),
                )
                if body.get("status") == "ok" and body.get("instance") == self.instance_id:
                    return PortalHealth(True)
                last = "answered by another process"
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last = str(exc) or type(exc).__name__
            time.sleep(0.2)

    def requests_served(self) -> int:
        """Requests the instance answered (health checks excluded), from its access log."""
        return int(summarise_access_log(self.access_log_path)["requests"])

    def secrets(self) -> tuple[str, ...]:
        """The strings to redact from anything the harness keeps (see ``pilot.portal.redaction``)."""
        from pilot.portal.redaction import secret_forms

        return secret_forms(self.credentials)

    def end_of_run(self) -> PortalRunEnd:
        """Check health, stop the server, then count what it served (the log is complete once it is gone)."""
        health = self.health()
        self.stop()
        return PortalRunEnd(healthy=health.ok, reason=health.reason, requests=self.requests_served())

    def write_credentials(self, workspace: Path) -> Path:
        """Write ``portal_credentials.json`` into an A3/A4 workspace (mode 0600)."""
        return self.credentials.write_workspace_file(workspace, self.url)

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """Stop the server (close its stdin, then terminate, then kill); return its exit code."""
        proc = self._process
        if proc is None:
            return None
        if proc.stdin and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if self._server_log is not None:
            self._server_log.close()
            self._server_log = None
        self._process = None
        self._exit_code = proc.returncode
        return proc.returncode

    def describe(self) -> dict:
        """What a run record may keep: no password, only the fingerprint."""
        return {
            "scenario": self.scenario_id,
            "url": self.url,
            "instance_id": self.instance_id,
            "credential_fingerprint": self.credential_fingerprint,
            "access_log": str(self.access_log_path),
            "server_log": str(self.server_log_path),
        } | ({"unix_socket": str(self.unix_socket)} if self.unix_socket else {})

    def __enter__(self) -> PortalInstance:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_for_health(
    url: str, instance_id: str, deadline: float, *, scenario_id: str = "?", unix_socket: str | None = None
) -> None:
    """Poll ``url/healthz`` until it names ``instance_id``; PortalStartError at ``deadline``."""
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PortalStartError(scenario_id, f"health check at {url}/healthz timed out ({last})")
        try:
            body = _get_health(url, unix_socket, timeout=min(1.0, max(remaining, 0.05)))
            if body.get("status") == "ok" and body.get("instance") == instance_id:
                return
            last = "answered by another process"
        except (OSError, ValueError, http.client.HTTPException) as exc:
            last = str(exc) or type(exc).__name__
        time.sleep(0.05)


def _read_port_line(proc: subprocess.Popen, deadline: float) -> dict | None:
    """The server's JSON start line, or None if it exited or the deadline passed first."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            if sel.select(timeout=min(remaining, 0.2)):
                line = proc.stdout.readline()
                if not line:
                    return None
                return json.loads(line)
            if proc.poll() is not None:
                return None
        return None
    finally:
        sel.close()


def start_instance(
    scenario_id: str,
    run_dir: Path,
    *,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    content_dir: Path | None = None,
    port: int = 0,
    limits: SignInLimits = SignInLimits(),
    session_limits: SessionLimits = SessionLimits(),
    server_limits: ServerLimits = ServerLimits(),
    unix_socket: Path | None = None,
    url: str | None = None,
) -> PortalInstance:
    """Start the portal of ``scenario_id`` for one run; logs go to ``run_dir``.

    ``content_dir`` defaults to the scenario's committed ``portal/`` folder;
    ``port`` 0 lets the OS pick a free loopback port. With ``unix_socket``
    the server listens on that socket (mode 0600) instead of a TCP port, for
    a bridge into the worker's sandbox; ``url`` is then the address the
    worker is given (default ``http://127.0.0.1``).
    """
    try:
        check_port(port)
    except ValueError as exc:
        raise PortalStartError(scenario_id, str(exc)) from None
    if unix_socket is not None and port:
        raise PortalStartError(scenario_id, "give a port or a Unix socket, not both")
    run_dir = Path(run_dir)
    content = Path(content_dir) if content_dir is not None else paths.scenario_portal_dir(scenario_id)
    if not (content / MANIFEST_NAME).is_file():
        raise PortalStartError(
            scenario_id, f"content folder {content} has no {MANIFEST_NAME} (run `pilot portal generate {scenario_id}`)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    access_log = run_dir / ACCESS_LOG_NAME
    server_log_path = run_dir / SERVER_LOG_NAME
    credentials = Credentials.generate()
    instance_id = secrets.token_hex(8)
    setup = {
        "verifier": CredentialVerifier.for_credentials(credentials).to_json(),
        "instance_id": instance_id,
        "limits": asdict(limits),
        "session_limits": asdict(session_limits),
        "server_limits": asdict(server_limits),
    }
    deadline = time.monotonic() + timeout_s
    server_log = open(server_log_path, "ab")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        where = ["--unix-socket", str(unix_socket)] if unix_socket is not None else ["--port", str(port)]
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pilot.portal.server",
                "--content",
                str(content),
                "--access-log",
                str(access_log),
                *where,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=server_log,
            env=env,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        server_log.close()
        raise PortalStartError(scenario_id, f"cannot start the server process: {exc}") from exc

    def fail(reason: str) -> PortalStartError:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        server_log.close()
        tail = server_log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
        return PortalStartError(scenario_id, reason, server_log=tail)

    try:
        proc.stdin.write(json.dumps(setup) + "\n")
        proc.stdin.flush()
    except OSError as exc:
        raise fail(f"cannot hand the server its setup: {exc}") from exc
    started = _read_port_line(proc, deadline)
    if started is None:
        try:  # stdout closes a moment before the exit status is there
            code = proc.wait(timeout=max(0.5, min(2.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            code = None
        if code == EXIT_BIND:
            raise fail(f"cannot bind {unix_socket or f'{LOOPBACK}:{port}'}")
        if code == EXIT_CONTENT:
            raise fail(f"content folder {content} is malformed")
        if code is not None:
            raise fail(f"server process exited with status {code}")
        raise fail(f"server process did not report its port within {timeout_s} s")
    if unix_socket is not None:
        url = (url or f"http://{LOOPBACK}").rstrip("/")
    else:
        url = f"http://{LOOPBACK}:{int(started['port'])}"
    try:
        wait_for_health(
            url,
            instance_id,
            deadline,
            scenario_id=scenario_id,
            unix_socket=str(unix_socket) if unix_socket is not None else None,
        )
    except PortalStartError as exc:
        raise fail(exc.reason) from exc
    return PortalInstance(
        scenario_id=scenario_id,
        url=url,
        credentials=credentials,
        instance_id=instance_id,
        access_log_path=access_log,
        server_log_path=server_log_path,
        pid=proc.pid,
        unix_socket=Path(unix_socket) if unix_socket is not None else None,
        _process=proc,
        _server_log=server_log,
    )
