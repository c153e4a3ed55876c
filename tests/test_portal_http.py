"""The portal speaks HTTP as its clients expect: challenges, JSON errors, redirects, sessions, limits.

Real clients against a real instance: wget and curl as a worker's shell would
run them, Python's urllib Basic handler as a worker's script would.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlencode, urlsplit

import pytest
from portal_support import basic_auth, make_scenario, raw_get, read_json_answer

from pilot.portal import Credentials, PortalClient, PortalClientError, start_instance, summarise_access_log
from pilot.portal.app import CHALLENGE, SessionLimits, SessionStore, SignInLimits
from pilot.portal.content import generate_portal
from pilot.portal.instance import PortalStartError
from pilot.portal.wire import ServerLimits

NO_PROXY_ENV = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


@pytest.fixture(scope="module")
def content_dir(tmp_path_factory):
    return generate_portal(make_scenario(tmp_path_factory.mktemp("scenarios")))


@pytest.fixture(scope="module")
def portal(content_dir, tmp_path_factory):
    with start_instance("TEST-01", tmp_path_factory.mktemp("run"), content_dir=content_dir) as instance:
        yield instance


def request(
    url: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def cookie_of(headers: dict[str, str]) -> str:
    return headers["set-cookie"].split(";", 1)[0]


# ------------------------------------------------------------------ the challenge


@pytest.mark.parametrize(
    "path",
    [
        "/api/documents",
        "/api/records",
        "/api/records/vendor-invoices",
        "/documents/contract.pdf",
        "/records/vendor-invoices/download.csv",
        "/api/no-such-thing",
        "/library",
    ],
)
def test_every_401_carries_a_basic_challenge(portal, path):
    # A wrong pair under a name of its own per path, so this module's instance locks out no credential it uses.
    for headers in ({}, basic_auth(f"guess{path}", "wrong-password"), {"Accept": "*/*"}):
        status, got, _ = raw_get(portal.url, path, headers)
        assert status == 401, (path, headers)
        assert got["www-authenticate"] == CHALLENGE
    assert CHALLENGE.startswith('Basic realm="')


def test_a_browser_asking_for_a_page_is_sent_to_the_sign_in_form(portal):
    status, headers, _ = raw_get(
        portal.url, "/records/vendor-invoices?q=Acme", {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    )
    assert status == 303 and headers["location"] == "/sign-in?next=/records/vendor-invoices?q%3DAcme"


def test_wget_signs_in_with_user_and_password(portal, content_dir, tmp_path):
    wget = shutil.which("wget")
    assert wget, "wget is missing: run tools/ensure-system-packages.sh http"
    user, password = portal.credentials.username, portal.credentials.password
    for path, expected in (
        ("/documents/contract.pdf", (content_dir / "documents" / "contract.pdf").read_bytes()),
        ("/records/vendor-invoices/download.csv", (content_dir / "records" / "vendor-invoices.csv").read_bytes()),
    ):
        out = tmp_path / path.rsplit("/", 1)[-1]
        run = subprocess.run(
            [wget, "-q", "--no-proxy", f"--user={user}", f"--password={password}", "-O", str(out), portal.url + path],
            capture_output=True,
            text=True,
            timeout=60,
            env=NO_PROXY_ENV,
        )
        assert run.returncode == 0, run.stderr
        assert out.read_bytes() == expected
    listing = tmp_path / "documents.json"
    run = subprocess.run(
        [
            wget,
            "-q",
            "--no-proxy",
            f"--user={user}",
            f"--password={password}",
            "-O",
            str(listing),
            portal.url + "/api/documents",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=NO_PROXY_ENV,
    )
    assert run.returncode == 0 and "contract.pdf" in {d["name"] for d in json.loads(listing.read_text())}
    page = tmp_path / "library.html"
    run = subprocess.run(
        [
            wget,
            "-q",
            "--no-proxy",
            f"--user={user}",
            f"--password={password}",
            "-O",
            str(page),
            portal.url + "/library",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=NO_PROXY_ENV,
    )
    assert run.returncode == 0 and "engagement_letter.docx" in page.read_text()
    # The wrong pair is refused after the challenge: wget exits with its authentication failure status (6).
    run = subprocess.run(
        [
            wget,
            "-q",
            "--no-proxy",
            f"--user={user}",
            "--password=wrong-password",
            "-O",
            str(tmp_path / "x"),
            portal.url + "/api/documents",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=NO_PROXY_ENV,
    )
    assert run.returncode == 6


def test_urllib_basic_handler_signs_in(portal, content_dir):
    manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
    manager.add_password(None, portal.url, portal.credentials.username, portal.credentials.password)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPBasicAuthHandler(manager))
    with opener.open(portal.url + "/api/records", timeout=10) as resp:
        assert resp.status == 200 and "vendor-invoices" in {r["id"] for r in json.load(resp)}
    with opener.open(portal.url + "/documents/engagement_letter.docx", timeout=10) as resp:
        assert resp.read() == (content_dir / "documents" / "engagement_letter.docx").read_bytes()
    # The handler with the realm named, as a script copying it from the challenge would do.
    named = urllib.request.HTTPPasswordMgr()
    named.add_password("intranet", portal.url, portal.credentials.username, portal.credentials.password)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPBasicAuthHandler(named))
    with opener.open(portal.url + "/api/documents", timeout=10) as resp:
        assert resp.status == 200


def test_curl_anyauth_signs_in(portal):
    curl = shutil.which("curl")
    assert curl, "curl is missing: run tools/ensure-system-packages.sh http"
    run = subprocess.run(
        [
            curl,
            "-sS",
            "--noproxy",
            "*",
            "--anyauth",
            "-u",
            f"{portal.credentials.username}:{portal.credentials.password}",
            "-w",
            "\n%{http_code}",
            portal.url + "/api/documents",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=NO_PROXY_ENV,
    )
    body, code = run.stdout.rsplit("\n", 1)
    assert run.returncode == 0 and code == "200" and "contract.pdf" in body


# ------------------------------------------------------------------ JSON errors


@pytest.mark.parametrize(
    "body, content_type",
    [
        (b"{not json", "application/json"),
        (b"\xff\xfe", "application/json"),
        (b"", "application/json"),
        (b"[1, 2]", "application/json"),
        (b'{"username": 1, "password": 2}', "application/json"),
        (b'{"username": "u"}', "application/json"),
        (b"username=u&password=p", "application/x-www-form-urlencoded"),
    ],
)
def test_malformed_sign_in_bodies_get_a_json_400(portal, body, content_type):
    status, headers, data = request(portal.url, "POST", "/api/sign-in", body, {"Content-Type": content_type})
    assert status == 400 and headers["content-type"].startswith("application/json")
    assert "username" in json.loads(data)["error"]


def test_json_endpoints_answer_errors_in_json(portal):
    auth = basic_auth(portal.credentials.username, portal.credentials.password)
    for method, path, want in (
        ("POST", "/api/documents", 405),
        ("GET", "/api/sign-in", 405),
        ("GET", "/api/records/no-such-record", 404),
        ("GET", "/api/nothing-here", 404),
    ):
        status, headers, data = request(portal.url, method, path, headers=auth)
        assert status == want, (method, path)
        assert headers["content-type"].startswith("application/json") and json.loads(data)["error"]


def test_an_oversized_body_is_refused_from_its_declared_length_without_being_read(portal):
    """A 1 GB declaration is answered, in JSON, while the body has not been sent at all.

    A server that waited for the body would leave the read below to its timeout (how fast the refusal comes is
    measured by benchmarks/bench_portal.py).
    """
    parts = urlsplit(portal.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(
            b"POST /api/sign-in HTTP/1.1\r\nHost: portal\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000\r\n\r\n"
        )
        data = read_json_answer(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"application/json" in head and "error" in json.loads(body)


def test_a_body_just_over_the_limit_gets_a_json_413_and_a_page_body_a_page(portal):
    big = json.dumps({"username": "u", "password": "x" * 70_000}).encode()
    status, headers, data = request(portal.url, "POST", "/api/sign-in", big, {"Content-Type": "application/json"})
    assert status == 413 and headers["content-type"].startswith("application/json") and json.loads(data)["error"]
    status, headers, _ = request(
        portal.url,
        "POST",
        "/sign-in",
        urlencode({"username": "u", "password": "x" * 70_000}).encode(),
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 413
    # Chunked, with no declared length: refused once the limit is crossed.
    status, headers, data = request(
        portal.url,
        "POST",
        "/api/sign-in",
        iter([b"x" * 40_000, b"x" * 40_000]),
        {"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
    )
    assert status == 413 and json.loads(data)["error"]


def test_a_locked_credential_gets_a_json_429_with_retry_after(content_dir, tmp_path):
    with start_instance("TEST-01", tmp_path, content_dir=content_dir, limits=SignInLimits(2, 60, 30)) as inst:
        for _ in range(2):
            request(
                inst.url,
                "POST",
                "/api/sign-in",
                json.dumps({"username": inst.credentials.username, "password": "no"}).encode(),
            )
        status, headers, data = request(
            inst.url,
            "POST",
            "/api/sign-in",
            json.dumps({"username": inst.credentials.username, "password": inst.credentials.password}).encode(),
        )
        assert status == 429 and int(headers["retry-after"]) >= 1 and json.loads(data)["error"]
        status, headers, data = raw_get(
            inst.url, "/api/documents", basic_auth(inst.credentials.username, inst.credentials.password)
        )
        assert status == 429 and headers["content-type"].startswith("application/json")


# ------------------------------------------------------------------ next


HOSTILE_NEXT = [
    "/\t/evil.example",
    "/\t/evil.example/library",
    "//evil.example",
    "///evil.example",
    "\\\\evil.example",
    "/\\evil.example",
    "\\/evil.example",
    "/library\nSet-Cookie: x=1",
    "/library\r\nLocation: http://evil.example",
    "http://evil.example/",
    "https:evil.example",
    "javascript:alert(1)",
    "evil.example",
    " /library",
    "/%2F/evil.example",
    "/%2f%2fevil.example",
    "/%5Cevil.example",
    "/%5c%5cevil.example",
    "/%09/evil.example",
    "/%0d%0aLocation:%20http://evil.example",
    "/%252F/evil.example",
    "%2F%2Fevil.example",
    "/sign-out",
    "/api/documents",
    "/healthz",
    "/no-such-page",
    "/library" + "a" * 3000,
]


@pytest.mark.parametrize("target", HOSTILE_NEXT)
def test_next_leads_only_to_a_page_of_this_portal(portal, target):
    form = urlencode({"username": portal.credentials.username, "password": portal.credentials.password, "next": target})
    status, headers, _ = request(
        portal.url, "POST", "/sign-in", form.encode(), {"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 303 and headers["location"] == "/library", target


@pytest.mark.parametrize(
    "target",
    [
        "/records",
        "/records/vendor-invoices?q=Acme",
        "/documents/contract.pdf",
        "/records/statements-client-statement-q3/download.csv",
        "/",
    ],
)
def test_next_keeps_a_page_of_this_portal(portal, target):
    form = urlencode({"username": portal.credentials.username, "password": portal.credentials.password, "next": target})
    status, headers, _ = request(
        portal.url, "POST", "/sign-in", form.encode(), {"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 303 and headers["location"] == target


def test_a_newline_in_next_on_the_sign_in_page_is_no_server_error(portal):
    status, _, body = raw_get(portal.url, "/sign-in?next=%2Flibrary%0D%0ALocation:%20http://evil.example")
    assert status == 200 and b'name="password"' in body


# ------------------------------------------------------------------ sessions


def test_a_session_ends_at_sign_out_even_for_a_copied_cookie(portal):
    creds = json.dumps({"username": portal.credentials.username, "password": portal.credentials.password}).encode()
    status, headers, _ = request(portal.url, "POST", "/api/sign-in", creds, {"Content-Type": "application/json"})
    assert status == 200
    set_cookie = headers["set-cookie"].lower()
    assert "expires=" not in set_cookie and "max-age" not in set_cookie  # a browser drops it when closed
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie
    cookie = {"Cookie": cookie_of(headers)}
    assert raw_get(portal.url, "/api/documents", cookie)[0] == 200
    assert request(portal.url, "POST", "/api/sign-out", b"{}", cookie)[0] == 200
    # The cookie a copy was taken of before the sign-out no longer opens anything.
    status, headers, _ = raw_get(portal.url, "/api/documents", cookie)
    assert status == 401 and headers["www-authenticate"] == CHALLENGE
    # The form's sign-out ends a session the same way.
    status, headers, _ = request(portal.url, "POST", "/api/sign-in", creds, {"Content-Type": "application/json"})
    cookie = {"Cookie": cookie_of(headers)}
    assert request(portal.url, "POST", "/sign-out", b"", cookie)[0] == 303
    assert raw_get(portal.url, "/api/records", cookie)[0] == 401


def test_a_session_lives_a_short_while(content_dir, tmp_path):
    with start_instance(
        "TEST-01", tmp_path / "a", content_dir=content_dir, session_limits=SessionLimits(lifetime_s=3.0, idle_s=3.0)
    ) as inst:
        client = PortalClient(inst.url, inst.credentials)
        client.sign_in()
        assert client.list_documents()
        time.sleep(3.5)
        with pytest.raises(PortalClientError) as info:
            client.list_documents()
        assert info.value.status == 401
        client.sign_in()
        assert client.list_records()


def test_session_store_lifetime_and_idle_limits():
    now = [100.0]
    store = SessionStore(SessionLimits(lifetime_s=60.0, idle_s=20.0), clock=lambda: now[0])
    sid = store.open()
    for _ in range(3):
        now[0] += 19.0
        assert store.touch(sid)  # kept alive by use ...
    now[0] += 4.0
    assert not store.touch(sid)  # ... but never past its lifetime
    idle = store.open()
    now[0] += 20.0
    assert not store.touch(idle)
    closed = store.open()
    store.close(closed)
    assert not store.touch(closed) and not store.touch(None) and not store.touch("made-up")


# ------------------------------------------------------------------ lockout


def test_another_clients_failures_never_lock_out_this_runs_credential(content_dir, tmp_path):
    """Every client is 127.0.0.1: failures with another name (a neighbour's guesses) leave this pair usable."""
    with start_instance("TEST-01", tmp_path, content_dir=content_dir, limits=SignInLimits(3, 60, 30)) as inst:
        for name in ("admin", "analyst-000000", "root"):
            for _ in range(5):
                assert raw_get(inst.url, "/api/documents", basic_auth(name, "guess"))[0] in (401, 429)
                with pytest.raises(PortalClientError) as info:
                    PortalClient(inst.url, Credentials(name, "guess")).sign_in()
                assert info.value.status in (401, 429)
        right = PortalClient(inst.url, inst.credentials)
        right.sign_in()
        assert right.list_documents()
        assert (
            raw_get(inst.url, "/api/records", basic_auth(inst.credentials.username, inst.credentials.password))[0]
            == 200
        )
        # The guessed names themselves are locked.
        assert raw_get(inst.url, "/api/documents", basic_auth("admin", "guess"))[0] == 429
        assert summarise_access_log(inst.access_log_path)["sign_in_limited"] > 0


def test_a_lockout_is_kept_within_its_instance(content_dir, tmp_path):
    with (
        start_instance("TEST-01", tmp_path / "a", content_dir=content_dir, limits=SignInLimits(2, 60, 30)) as a,
        start_instance("TEST-01", tmp_path / "b", content_dir=content_dir, limits=SignInLimits(2, 60, 30)) as b,
    ):
        for _ in range(3):
            raw_get(a.url, "/api/documents", basic_auth(a.credentials.username, "guess"))
        assert raw_get(a.url, "/api/documents", basic_auth(a.credentials.username, a.credentials.password))[0] == 429
        assert raw_get(b.url, "/api/documents", basic_auth(b.credentials.username, b.credentials.password))[0] == 200


# ------------------------------------------------------------------ waitress limits


def test_idle_connections_do_not_stop_the_portal(content_dir, tmp_path):
    """More idle connections than the connection limit: they are closed, and the portal answers again.

    With waitress's 120-second idle timeout the request below would wait past its 60-second timeout.
    """
    limits = ServerLimits(connection_limit=16, channel_timeout_s=2, cleanup_interval_s=1)
    with start_instance("TEST-01", tmp_path, content_dir=content_dir, server_limits=limits) as inst:
        parts = urlsplit(inst.url)
        idle = [socket.create_connection((parts.hostname, parts.port), timeout=5) for _ in range(40)]
        try:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
            conn.request("GET", "/healthz")
            assert conn.getresponse().status == 200
            conn.close()
            assert inst.health(timeout_s=5).ok
            # The server closed the idle ones it accepted: they read end-of-file now.
            idle[0].settimeout(10)
            assert idle[0].recv(1) == b""
        finally:
            for s in idle:
                s.close()


def test_a_hundred_idle_connections_do_not_delay_an_answer(portal):
    """waitress's defaults stopped answering at about 100 idle connections; the portal's do not."""
    parts = urlsplit(portal.url)
    idle = [socket.create_connection((parts.hostname, parts.port), timeout=5) for _ in range(120)]
    try:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        for s in idle:
            s.close()


def test_default_server_limits_are_sized_for_one_run():
    limits = ServerLimits()
    assert limits.max_body_bytes == 64 * 1024 and limits.max_header_bytes <= 16 * 1024
    assert limits.connection_limit > 120 and limits.channel_timeout_s <= 15 and limits.cleanup_interval_s <= 5


# ------------------------------------------------------------------ ports and the command line


@pytest.mark.parametrize("port", [99999, 65536, -1])
def test_an_invalid_port_is_refused(content_dir, tmp_path, port):
    with pytest.raises(PortalStartError, match="port"):
        start_instance("TEST-01", tmp_path, content_dir=content_dir, port=port)
    run = subprocess.run(
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
            str(tmp_path / "logs"),
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "--port" in run.stderr and "65535" in run.stderr
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pilot.portal.server",
            "--content",
            str(content_dir),
            "--access-log",
            str(tmp_path / "a.jsonl"),
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        input="",
    )
    assert run.returncode == 2 and "65535" in run.stderr


def test_unix_socket_serving(content_dir, tmp_path):
    sock_path = tmp_path / "portal.sock"
    with start_instance(
        "TEST-01", tmp_path / "run", content_dir=content_dir, unix_socket=sock_path, url="http://127.0.0.1:8080"
    ) as inst:
        assert inst.url == "http://127.0.0.1:8080" and inst.unix_socket == sock_path
        assert sock_path.is_socket() and sock_path.stat().st_mode & 0o777 == 0o600
        assert inst.health(timeout_s=5).ok
        from pilot.portal.instance import _UnixHTTPConnection

        conn = _UnixHTTPConnection(str(sock_path), timeout=5)
        conn.request("GET", "/api/documents", headers=basic_auth(inst.credentials.username, inst.credentials.password))
        resp = conn.getresponse()
        assert resp.status == 200 and "contract.pdf" in resp.read().decode()
        conn.close()
        assert inst.describe()["unix_socket"] == str(sock_path)
    assert not sock_path.exists()


def test_an_unexpected_error_is_a_json_500_on_the_api_and_a_page_elsewhere(content_dir):
    from pilot.portal.app import create_app
    from pilot.portal.content import load_portal_content
    from pilot.portal.credentials import CredentialVerifier

    creds = Credentials.generate()
    app = create_app(load_portal_content(content_dir), CredentialVerifier.for_credentials(creds), instance_id="x" * 16)

    def broken():
        raise RuntimeError("a bug")

    app.add_url_rule("/api/broken", "api_broken", broken)
    app.add_url_rule("/broken", "broken", broken)
    client = app.test_client()
    auth = basic_auth(creds.username, creds.password)
    resp = client.get("/api/broken", headers=auth)
    assert (
        resp.status_code == 500
        and resp.is_json
        and resp.get_json()["error"]
        and "a bug" not in resp.get_data(as_text=True)
    )
    resp = client.get("/broken", headers=auth)
    assert resp.status_code == 500 and resp.mimetype == "text/html" and "a bug" not in resp.get_data(as_text=True)
