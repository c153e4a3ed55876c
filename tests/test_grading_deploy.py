"""The deployment recipe for remote graders, tried end to end on loopback.

The nginx server block of ``protocol/human/evaluation.md`` ("Deployment"),
filled in with a self-signed certificate made here by openssl, terminates
TLS in front of ``pilot grading serve --trusted-host --secure-cookies`` (the
real command line, its own process). Chromium reaches the site by its public
name (mapped to 127.0.0.1) over HTTPS: a grader signs in, the cookie is
Secure, a draft saves itself; the site refuses another host name; failed
sign-ins are counted per client address from the proxy's X-Forwarded-For;
``pilot grading backup`` copies the store while the site runs.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_grading_site import GRADERS
from view_support import simulated_study

from pilot import paths
from pilot.grading import store
from pilot.grading.plan import create_wave

WAVE = "remote-1"
NAME = "grading.example.test"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recipe_server_block() -> str:
    """The nginx server block as the procedure gives it (the one fenced ``nginx`` block of its Deployment section)."""
    text = (paths.ROOT / "protocol" / "human" / "evaluation.md").read_text(encoding="utf-8")
    deployment = text[text.index("## Deployment") :]
    (block,) = re.findall(r"```nginx\n(.*?)```", deployment, re.S)
    return "\n".join(line[3:] if line.startswith("   ") else line for line in block.splitlines())


def wait_for(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    base = tmp_path_factory.mktemp("deploy")
    folder = shutil.copytree(simulated_study(), base / "viewsim", symlinks=True)
    (base / "graders.csv").write_text(GRADERS, encoding="utf-8")
    made = create_wave(folder, WAVE, base / "graders.csv", per_package=2)
    cert, key = base / "site.crt", base / "site.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={NAME}",
         "-addext", f"subjectAltName=DNS:{NAME}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    site_port, tls_port = free_port(), free_port()
    block = (
        recipe_server_block()
        .replace("PUBLIC_ADDRESS:443", f"127.0.0.1:{tls_port}")
        .replace("PUBLIC_NAME", NAME)
        .replace("CERTIFICATE_FILE", str(cert))
        .replace("KEY_FILE", str(key))
        .replace("SITE_PORT", str(site_port))
    )
    prefix = base / "nginx"
    for sub in ("logs", "tmp"):
        (prefix / sub).mkdir(parents=True)
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"worker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/logs/error.log;\n"
        "events { worker_connections 64; }\n"
        f"http {{\n access_log {prefix}/logs/access.log;\n client_body_temp_path {prefix}/tmp;\n"
        f" proxy_temp_path {prefix}/tmp;\n fastcgi_temp_path {prefix}/tmp;\n uwsgi_temp_path {prefix}/tmp;\n"
        f" scgi_temp_path {prefix}/tmp;\n{block}\n}}\n",
        encoding="utf-8",
    )
    env = dict(os.environ)
    site = subprocess.Popen(
        [sys.executable, "-m", "pilot", "grading", "serve", str(folder), WAVE, "--port", str(site_port),
         "--trusted-host", NAME, "--secure-cookies"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    proxy = subprocess.Popen(
        [NGINX, "-p", str(prefix), "-c", str(conf), "-g", "daemon off; user root;"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(site_port)
        wait_for(tls_port)
        yield {"folder": folder, "made": made, "url": f"https://{NAME}:{tls_port}", "site_port": site_port}
    finally:
        for proc in (proxy, site):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            if proc.stdout:
                proc.stdout.close()


@pytest.fixture(scope="module")
def remote_browser(deployed, browser):
    """A Chromium of its own that resolves the public name to loopback, launched by the tier's Playwright."""
    from component_tiers import CHROMIUM_ARGS

    b = browser.browser_type.launch(
        executable_path=str(paths.CHROMIUM_BIN),
        args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {NAME} 127.0.0.1"],
        headless=True,
    )
    yield b
    b.close()


def test_a_grader_works_over_https_by_the_public_name(deployed, remote_browser):
    url, made, folder = deployed["url"], deployed["made"], deployed["folder"]
    context = remote_browser.new_context(ignore_https_errors=True)  # the trial's certificate is self-signed
    page = context.new_page()
    page.goto(f"{url}/signin/{made.grader_tokens['G01']}")
    assert page.url == f"{url}/queue" and page.inner_text("h1") == "Your packages"
    (cookie,) = [c for c in context.cookies() if c["name"] == "pilot_grading"]
    assert cookie["secure"] and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    page.click("#queue tbody tr:first-child a.open-package")
    page.fill("#critique-correctness", "Reached through the proxy, saved by the page itself.")
    page.wait_for_function("() => document.getElementById('save-state').dataset.state === 'saved'", timeout=15000)
    with store.open_store(folder) as st:
        aid = store.queue(st.conn, WAVE, "G01")[0]["assignment_id"]
        assert store.scores(st.conn, WAVE, aid)["correctness"][1].startswith("Reached through the proxy")
    context.close()


def test_the_site_answers_its_public_name_only_and_counts_failures_per_client(deployed):
    import http.client
    import ssl

    url = deployed["url"]
    port = int(url.rsplit(":", 1)[1])
    tls = ssl.create_default_context()
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE

    def get(path: str, host: str = NAME, source: str = "127.0.0.1") -> int:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=30, source_address=(source, 0))
        conn.request("GET", path, headers={"Host": f"{host}:{port}"})
        status = conn.getresponse().status
        conn.close()
        return status

    assert get("/signed-out") == 200
    assert get("/signed-out", host="evil.example") == 403
    # Ten failed sign-ins from one client lock that client out (429) ...
    bad = "A" * 43
    statuses = [get(f"/signin/{bad}", source="127.0.0.3") for _ in range(11)]
    assert statuses[:10] == [403] * 10 and statuses[10] == 429
    # ... and not the others, though every request reaches the site from the proxy: the key is the client's
    # address, which the proxy forwards.
    assert get(f"/signin/{bad}", source="127.0.0.4") == 403
    assert get(f"/signin/{deployed['made'].grader_tokens['G02']}", source="127.0.0.5") == 303


def test_the_store_is_backed_up_while_the_site_runs(deployed, tmp_path):
    folder = deployed["folder"]
    out = tmp_path / "backups" / "study.sqlite"
    proc = subprocess.run(
        [sys.executable, "-m", "pilot", "grading", "backup", str(folder), WAVE, "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert str(out) in proc.stdout and (out.stat().st_mode & 0o777) == 0o600
    with sqlite3.connect(out) as conn:
        assert conn.execute("SELECT COUNT(*) FROM grading_assignments WHERE wave = ?", (WAVE,)).fetchone()[0] > 0
    assert Path(out).stat().st_size > 0
