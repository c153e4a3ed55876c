"""The portal over real HTTP: a started instance, its pages, API, downloads and refusals."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from portal_support import SECRET_MARKER, basic_auth, make_scenario, raw_get

from pilot.portal import (
    CREDENTIALS_FILENAME,
    Credentials,
    PortalClient,
    PortalClientError,
    PortalStartError,
    read_access_log,
    start_instance,
    summarise_access_log,
)
from pilot.portal.app import SignInLimits, create_app
from pilot.portal.content import MANIFEST_NAME, generate_portal, load_portal_content
from pilot.portal.credentials import CredentialVerifier
from pilot.portal.instance import wait_for_health


@pytest.fixture(scope="module")
def content_dir(tmp_path_factory):
    scenario = make_scenario(tmp_path_factory.mktemp("scenarios"))
    return generate_portal(scenario)


@pytest.fixture(scope="module")
def portal(content_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    with start_instance("TEST-01", run_dir, content_dir=content_dir, timeout_s=20) as instance:
        yield instance


@pytest.fixture()
def client(portal):
    c = PortalClient(portal.url, portal.credentials)
    c.sign_in()
    return c


def _every_route_url(content_dir) -> list[str]:
    """A concrete URL for every route the application has (so no route escapes the gate)."""
    content = load_portal_content(content_dir)
    app = create_app(content, CredentialVerifier.for_credentials(Credentials.generate()), instance_id="x")
    urls = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        values = {"name": next(iter(content.documents)), "rid": next(iter(content.records)), "fmt": "csv"}
        url = rule.rule
        for arg in rule.arguments:
            url = re.sub(rf"<(?:[a-z]+:)?{arg}>", quote(values[arg]), url)
        urls.append(url)
    return urls + ["/no-such-page", "/documents/missing.pdf"]


# ------------------------------------------------------------------ use


def test_health_check_answers_without_credentials(portal):
    status, _, body = raw_get(portal.url, "/healthz")
    assert status == 200
    assert json.loads(body) == {"status": "ok", "instance": portal.instance_id, "scenario": "TEST-01"}


def test_api_sign_in_browse_and_download(client, content_dir, tmp_path):
    docs = {d["name"]: d for d in client.list_documents()}
    assert set(docs) == {"contract.pdf", "engagement_letter.docx", "rate_card.xlsx", "travel_policy.txt"}
    records = {r["id"]: r for r in client.list_records()}
    assert records["vendor-invoices"]["n_rows"] == 3
    rows = client.record("vendor-invoices")["rows"]
    assert rows[0] == {
        "invoice_no": "INV-1001",
        "vendor": "Acme Supplies",
        "amount": "1200.50",
        "due_date": "2026-01-31",
        "account": "00420",
    }
    saved = client.download("engagement_letter.docx", tmp_path)
    assert saved.read_bytes() == (content_dir / "documents" / "engagement_letter.docx").read_bytes()
    for fmt in ("csv", "xlsx", "pdf"):
        path = client.download_record("vendor-invoices", fmt, tmp_path)
        assert path.read_bytes() == (content_dir / "records" / f"vendor-invoices.{fmt}").read_bytes()


def test_subfolder_record_set_and_row_filter(portal):
    # A record set from an inputs sub-folder is served; the page filter narrows rows.
    c = PortalClient(portal.url, portal.credentials)
    c.sign_in()
    assert c.record("statements-client-statement-q3")["rows"][1]["description"] == "Fee"
    status, _, body = raw_get(
        portal.url,
        "/records/vendor-invoices?q=globex",
        basic_auth(portal.credentials.username, portal.credentials.password),
    )
    assert status == 200 and b"Globex GmbH" in body and b"Acme Supplies" not in body


def test_html_sign_in_form_then_pages(portal):
    import http.cookiejar
    import urllib.parse
    import urllib.request

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPCookieProcessor(jar))
    opener.addheaders = [("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")]  # as a browser asks
    with opener.open(portal.url + "/library") as resp:  # redirected to the sign-in form
        assert resp.url.startswith(portal.url + "/sign-in") and b'name="password"' in resp.read()
    form = urllib.parse.urlencode(
        {"username": portal.credentials.username, "password": portal.credentials.password, "next": "/records"}
    ).encode()
    with opener.open(portal.url + "/sign-in", data=form) as resp:
        page = resp.read().decode()
        assert resp.url == portal.url + "/records"
    assert "Vendor invoices" in page and "download.xlsx" in page
    with opener.open(portal.url + "/library") as resp:
        assert "engagement_letter.docx" in resp.read().decode()


def test_http_basic_works_for_scripts(portal, content_dir):
    status, headers, body = raw_get(
        portal.url, "/documents/contract.pdf", basic_auth(portal.credentials.username, portal.credentials.password)
    )
    assert status == 200 and body == (content_dir / "documents" / "contract.pdf").read_bytes()
    assert "attachment" in headers["content-disposition"]


def test_credentials_file_for_the_workspace(portal, tmp_path):
    path = portal.write_credentials(tmp_path)
    assert path.name == CREDENTIALS_FILENAME and path.stat().st_mode & 0o777 == 0o600
    c = PortalClient.from_workspace(tmp_path)
    c.sign_in()
    assert c.list_records()


# ------------------------------------------------------------------ refusals


def test_without_credential_every_route_is_refused(portal, content_dir):
    urls = _every_route_url(content_dir)
    assert len(urls) >= 12
    for url in urls:
        status, headers, body = raw_get(portal.url, url)
        if url == "/healthz":
            continue
        if url in ("/sign-in",):
            assert status == 200 and b'name="password"' in body
            continue
        assert status in (303, 401, 405), (url, status)
        if status == 303:
            assert headers["location"].startswith("/sign-in"), url
        for leak in (b"Acme", b"INV-1001", b"engagement_letter", b"%PDF", b"PK\x03\x04"):
            assert leak not in body, (url, leak)


def test_wrong_credentials_are_refused(portal):
    wrong = PortalClient(portal.url, Credentials(portal.credentials.username, "not-the-password"))
    with pytest.raises(PortalClientError) as info:
        wrong.sign_in()
    assert info.value.status == 401
    with pytest.raises(PortalClientError) as info:
        wrong.list_documents()
    assert info.value.status == 401


def test_one_runs_credential_and_cookie_do_not_open_another_instance(content_dir, tmp_path):
    with (
        start_instance("TEST-01", tmp_path / "a", content_dir=content_dir) as a,
        start_instance("TEST-01", tmp_path / "b", content_dir=content_dir) as b,
    ):
        assert a.url != b.url and a.credentials != b.credentials
        PortalClient(a.url, a.credentials).sign_in()
        with pytest.raises(PortalClientError) as info:
            PortalClient(b.url, a.credentials).sign_in()
        assert info.value.status == 401
        status, _, _ = raw_get(b.url, "/api/documents", basic_auth(a.credentials.username, a.credentials.password))
        assert status == 401
        # A's session cookie, presented to B under B's cookie name, does not verify there.
        ca = PortalClient(a.url, a.credentials)
        ca.sign_in()
        cookie = next(iter(ca._cookies))
        b_name = f"portal_{b.instance_id[:12]}"
        assert raw_get(a.url, "/api/documents", {"Cookie": f"{cookie.name}={cookie.value}"})[0] == 200
        assert raw_get(b.url, "/api/documents", {"Cookie": f"{b_name}={cookie.value}"})[0] == 401


def test_failed_sign_ins_are_rate_limited(content_dir, tmp_path):
    limits = SignInLimits(max_failures=3, window_s=60, lockout_s=1.5)
    with start_instance("TEST-01", tmp_path, content_dir=content_dir, limits=limits) as inst:
        wrong = PortalClient(inst.url, Credentials(inst.credentials.username, "guess"))
        for _ in range(3):
            with pytest.raises(PortalClientError) as info:
                wrong.sign_in()
            assert info.value.status == 401
        # Locked: even the right pair, by form, API or HTTP Basic, is turned away for now.
        right = PortalClient(inst.url, inst.credentials)
        with pytest.raises(PortalClientError) as info:
            right.sign_in()
        assert info.value.status == 429
        status, headers, _ = raw_get(
            inst.url, "/api/records", basic_auth(inst.credentials.username, inst.credentials.password)
        )
        assert status == 429 and int(headers["retry-after"]) >= 1
        time.sleep(1.6)
        right.sign_in()
        assert right.list_documents()
        summary = summarise_access_log(inst.access_log_path)
        assert summary["sign_in_failed"] == 3 and summary["sign_in_limited"] == 2 and summary["sign_in"] == 1


def test_basic_auth_failures_count_towards_the_limit(content_dir, tmp_path):
    limits = SignInLimits(max_failures=2, window_s=60, lockout_s=30)
    with start_instance("TEST-01", tmp_path, content_dir=content_dir, limits=limits) as inst:
        for _ in range(2):
            assert raw_get(inst.url, "/api/documents", basic_auth(inst.credentials.username, "admin"))[0] == 401
        with pytest.raises(PortalClientError) as info:
            PortalClient(inst.url, inst.credentials).sign_in()
        assert info.value.status == 429


@pytest.mark.parametrize(
    "path",
    [
        "/documents/../manifest.json",
        "/documents/..%2Fmanifest.json",
        "/documents/%2e%2e/%2e%2e/secret.txt",
        "/documents/..%2F..%2Fsecret.txt",
        "/documents/documents/../../../secret.txt",
        "/documents//etc/passwd",
        "/documents/%2Fetc%2Fpasswd",
        "/records/..%2F..%2Fsecret/download.csv",
        "/records/vendor-invoices/download.json",
        "/static/../../secret.txt",
        "/../secret.txt",
    ],
)
def test_paths_cannot_escape_the_content_folder(portal, path):
    headers = basic_auth(portal.credentials.username, portal.credentials.password)
    status, _, body = raw_get(portal.url, path, headers)
    assert status in (400, 404), (path, status)
    assert SECRET_MARKER.encode() not in body and b"root:" not in body and b"format_version" not in body


def test_binds_loopback_only(portal):
    port = int(portal.url.rsplit(":", 1)[1])
    listeners = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            addr, port_hex = local.rsplit(":", 1)
            if state == "0A" and int(port_hex, 16) == port:
                listeners.append((table, addr))
    assert listeners == [("/proc/net/tcp", "0100007F")]


def test_no_credential_in_clear_in_logs_or_process_table(content_dir, tmp_path):
    run_dir = tmp_path / "run"
    with start_instance("TEST-01", run_dir, content_dir=content_dir) as inst:
        user, password = inst.credentials.username, inst.credentials.password
        # Put the pair where a careless server would log it: a query string, a form, a header.
        raw_get(inst.url, f"/sign-in?username={user}&password={password}")
        raw_get(inst.url, f"/api/documents?password={password}", basic_auth(user, password))
        with pytest.raises(PortalClientError):
            PortalClient(inst.url, Credentials(user, password[::-1])).sign_in()
        PortalClient(inst.url, inst.credentials).sign_in()
        cmdline = Path(f"/proc/{inst.pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{inst.pid}/environ").read_bytes()
        described = json.dumps(inst.describe())
        assert password.encode() not in cmdline and password.encode() not in environ
        assert password not in described and inst.credentials.fingerprint in described
        assert password not in repr(inst)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} == {"portal_access.jsonl", "portal_server.log"}
    for p in files:
        text = p.read_text()
        assert password not in text and password[::-1] not in text and user not in text, p
    entries = read_access_log(inst.access_log_path)
    assert all("?" not in e["path"] for e in entries)
    assert {e["user"] for e in entries if e["action"] == "sign_in"} == {inst.credentials.fingerprint}


def test_access_log_counts_use(client, portal, tmp_path):
    before = summarise_access_log(portal.access_log_path)
    client.list_documents()
    client.download("travel_policy.txt", tmp_path)
    after = summarise_access_log(portal.access_log_path)
    assert after["api"] == before["api"] + 1
    assert after["download"] == before["download"] + 1
    assert after["requests"] == before["requests"] + 2
    last = read_access_log(portal.access_log_path)[-1]
    assert last["path"] == "/documents/travel_policy.txt" and last["status"] == 200 and last["bytes"] > 0


# ------------------------------------------------------------------ start and stop


def test_stop_ends_the_process_and_frees_the_port(content_dir, tmp_path):
    inst = start_instance("TEST-01", tmp_path, content_dir=content_dir)
    port = int(inst.url.rsplit(":", 1)[1])
    assert inst.running
    assert inst.stop() == 0  # closed stdin: a clean exit, not a kill
    assert not inst.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_start_fails_when_content_folder_is_missing(tmp_path):
    with pytest.raises(PortalStartError, match="pilot portal generate NO-SUCH-01"):
        start_instance("NO-SUCH-01", tmp_path, content_dir=tmp_path / "absent")


def test_start_fails_on_malformed_content(content_dir, tmp_path):
    broken = tmp_path / "portal"
    import shutil

    shutil.copytree(content_dir, broken)
    manifest = json.loads((broken / MANIFEST_NAME).read_text())
    manifest["records"][0]["downloads"]["pdf"] = "../../secret.txt"
    (broken / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(PortalStartError) as info:
        start_instance("TEST-01", tmp_path / "run", content_dir=broken)
    assert "malformed" in info.value.reason and "records[0].downloads.pdf" in info.value.server_log


def test_start_fails_when_the_port_is_taken(content_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(PortalStartError) as info:
            start_instance("TEST-01", tmp_path, content_dir=content_dir, port=port)
    assert f"cannot bind 127.0.0.1:{port}" in info.value.reason


def test_health_check_times_out_against_a_silent_listener():
    # Accepts connections (the kernel's backlog) but never answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(PortalStartError, match="health check .* timed out"):
            wait_for_health(url, "abc", time.monotonic() + 0.6, scenario_id="TEST-01")
        assert time.monotonic() - started < 60  # stopped at its deadline, not left waiting on the silent listener


def test_health_check_refuses_another_instances_answer(portal):
    with pytest.raises(PortalStartError, match="another process"):
        wait_for_health(portal.url, "not-this-instance", time.monotonic() + 0.4)


def test_portal_serve_command_prints_url_and_credentials(content_dir, tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pilot",
            "portal",
            "serve",
            "TEST-01",
            "--content",
            str(content_dir),
            "--log-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        url = lines[0].split(": ", 1)[1].strip().rstrip("/")
        user = lines[1].split(":", 1)[1].strip()
        password = lines[2].split(":", 1)[1].strip()
        c = PortalClient(url, Credentials(user, password))
        c.sign_in()
        assert {d["name"] for d in c.list_documents()} >= {"contract.pdf"}
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=1).close()
