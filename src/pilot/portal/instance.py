"""One run's portal: start it, hand out its credentials, stop it.

``start_instance`` starts the server process on a free loopback port with the
scenario's content and a fresh credential pair, and returns only once the
health check answers with this instance's id. Anything else (content missing
or malformed, the port taken, the process dying, no healthy answer in time)
raises ``PortalStartError``, which the runner files as an infrastructure error.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pilot import paths
from pilot.portal.access_log import ACCESS_LOG_NAME, SERVER_LOG_NAME
from pilot.portal.app import SignInLimits
from pilot.portal.content import MANIFEST_NAME
from pilot.portal.credentials import Credentials, CredentialVerifier
from pilot.portal.wire import EXIT_BIND, EXIT_CONTENT, LOOPBACK

DEFAULT_START_TIMEOUT_S = 20.0
# Loopback traffic must never go through a proxy named in the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


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
    _process: subprocess.Popen | None = field(default=None, repr=False)
    _server_log: object = field(default=None, repr=False)

    @property
    def credential_fingerprint(self) -> str:
        return self.credentials.fingerprint

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

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
        }

    def __enter__(self) -> PortalInstance:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_for_health(url: str, instance_id: str, deadline: float, *, scenario_id: str = "?") -> None:
    """Poll ``url/healthz`` until it names ``instance_id``; PortalStartError at ``deadline``."""
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PortalStartError(scenario_id, f"health check at {url}/healthz timed out ({last})")
        try:
            with _DIRECT.open(f"{url}/healthz", timeout=min(1.0, max(remaining, 0.05))) as resp:
                body = json.loads(resp.read().decode("utf-8"))
            if body.get("status") == "ok" and body.get("instance") == instance_id:
                return
            last = "answered by another process"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = str(getattr(exc, "reason", exc))
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
) -> PortalInstance:
    """Start the portal of ``scenario_id`` for one run; logs go to ``run_dir``.

    ``content_dir`` defaults to the scenario's committed ``portal/`` folder;
    ``port`` 0 lets the OS pick a free loopback port.
    """
    run_dir = Path(run_dir)
    content = Path(content_dir) if content_dir is not None else paths.scenario_portal_dir(scenario_id)
    if not (content / MANIFEST_NAME).is_file():
        raise PortalStartError(scenario_id, f"content folder {content} has no {MANIFEST_NAME} "
                                            f"(run `pilot portal generate {scenario_id}`)")
    run_dir.mkdir(parents=True, exist_ok=True)
    access_log = run_dir / ACCESS_LOG_NAME
    server_log_path = run_dir / SERVER_LOG_NAME
    credentials = Credentials.generate()
    instance_id = secrets.token_hex(8)
    setup = {
        "verifier": CredentialVerifier.for_credentials(credentials).to_json(),
        "instance_id": instance_id,
        "limits": asdict(limits),
    }
    deadline = time.monotonic() + timeout_s
    server_log = open(server_log_path, "ab")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pilot.portal.server", "--content", str(content),
             "--access-log", str(access_log), "--port", str(port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=server_log, env=env,
            text=True, start_new_session=True,
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
            raise fail(f"cannot bind {LOOPBACK}:{port}")
        if code == EXIT_CONTENT:
            raise fail(f"content folder {content} is malformed")
        if code is not None:
            raise fail(f"server process exited with status {code}")
        raise fail(f"server process did not report its port within {timeout_s} s")
    url = f"http://{LOOPBACK}:{int(started['port'])}"
    try:
        wait_for_health(url, instance_id, deadline, scenario_id=scenario_id)
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
        _process=proc,
        _server_log=server_log,
    )
