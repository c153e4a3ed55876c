"""The intranet portal as a Flask application: HTML pages and a small JSON API.

Every route but the health check and sign-in sits behind one gate
(``before_request``), so a route added later cannot forget it. A client is
signed in by a server-side session (its id in a cookie signed with a key made
fresh for the instance) or by HTTP Basic with the instance's pair.

HTTP as clients expect it (RFC 9110): a request without a valid credential is
answered ``401`` with a ``WWW-Authenticate: Basic`` challenge, so ``wget
--user/--password``, ``curl --anyauth`` and ``urllib``'s Basic handler send
the pair when asked; only a browser asking for a page (its ``Accept`` prefers
HTML) is sent to the sign-in form instead. The JSON API answers every error in
JSON. Failed sign-ins are counted per credential (the username tried) within
this instance, never per address: every client of a run is 127.0.0.1, so an
address key would let one run's worker lock out another's.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote, unquote, urlsplit

from flask import Flask, Response, abort, g, jsonify, redirect, render_template, request, send_file, session, url_for
from werkzeug.exceptions import HTTPException, InternalServerError

from pilot.portal.access_log import AccessLog
from pilot.portal.content import PortalContent, PortalContentError
from pilot.portal.credentials import CredentialVerifier

REALM = "intranet"
#: The challenge of every 401 (RFC 9110 section 11.6.1; charset per RFC 7617).
CHALLENGE = f'Basic realm="{REALM}", charset="UTF-8"'
#: Largest request body the portal reads (a sign-in form or JSON object is far smaller).
MAX_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class SignInLimits:
    """``max_failures`` failed sign-ins within ``window_s`` lock that credential for ``lockout_s``."""

    max_failures: int = 5
    window_s: float = 60.0
    lockout_s: float = 30.0


@dataclass(frozen=True)
class SessionLimits:
    """A signed-in session ends after ``idle_s`` without a request or ``lifetime_s`` in all.

    One run lasts at most an hour (the largest scenario wall cap), and the
    session store lives in the server process, so every session also ends
    when the run's instance stops.
    """

    lifetime_s: float = 3600.0
    idle_s: float = 900.0


class SignInLimiter:
    """Failed sign-ins per credential key; a key with too many is locked for a while."""

    #: Keys kept at most; past it the idle ones are dropped (a flood of made-up usernames costs no memory).
    MAX_KEYS = 1024

    def __init__(self, limits: SignInLimits, clock=time.monotonic):
        self.limits = limits
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._locked_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def retry_after(self, key: str) -> float | None:
        """Seconds the credential must still wait, or None if it may try."""
        with self._lock:
            remaining = self._locked_until.get(key, 0.0) - self._clock()
            return remaining if remaining > 0 else None

    def failed(self, key: str) -> None:
        now = self._clock()
        with self._lock:
            window = self._failures.setdefault(key, deque())
            window.append(now)
            while window and window[0] < now - self.limits.window_s:
                window.popleft()
            if len(window) >= self.limits.max_failures:
                self._locked_until[key] = now + self.limits.lockout_s
                window.clear()
            if len(self._failures) > self.MAX_KEYS:
                self._prune(now)

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def _prune(self, now: float) -> None:
        for k in [k for k, w in self._failures.items() if not w or w[-1] < now - self.limits.window_s]:
            del self._failures[k]
        for k in [k for k, until in self._locked_until.items() if until <= now]:
            del self._locked_until[k]
        while len(self._failures) > self.MAX_KEYS:  # all recent: drop the oldest
            del self._failures[min(self._failures, key=lambda k: self._failures[k][-1] if self._failures[k] else 0.0)]


class SessionStore:
    """The instance's open sessions: an id in the cookie is worth nothing once it leaves this store."""

    def __init__(self, limits: SessionLimits, clock=time.monotonic):
        self.limits = limits
        self._clock = clock
        self._open: dict[str, tuple[float, float]] = {}  # id -> (opened, last seen)
        self._lock = threading.Lock()

    def open(self) -> str:
        sid = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._open = {k: v for k, v in self._open.items() if self._alive(v, now)}
            self._open[sid] = (now, now)
        return sid

    def _alive(self, times: tuple[float, float], now: float) -> bool:
        opened, seen = times
        return now - opened < self.limits.lifetime_s and now - seen < self.limits.idle_s

    def touch(self, sid: object) -> bool:
        """Whether ``sid`` is an open session (and mark it used)."""
        if not isinstance(sid, str):
            return False
        now = self._clock()
        with self._lock:
            times = self._open.get(sid)
            if times is None:
                return False
            if not self._alive(times, now):
                del self._open[sid]
                return False
            self._open[sid] = (times[0], now)
            return True

    def close(self, sid: object) -> None:
        with self._lock:
            self._open.pop(sid, None)

    def __len__(self) -> int:
        return len(self._open)


# Endpoints a client without the credential may reach.
_OPEN_ENDPOINTS = {"health", "sign_in", "api_sign_in"}
# Endpoints a sign-in may continue to (``next``): pages and downloads, never sign-in, sign-out or the API.
_NEXT_ENDPOINTS = {"home", "library", "records", "record", "document", "record_download"}
# RFC 3986 path and query characters; anything else (whitespace, control characters, backslash) is refused.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*")
_MAX_NEXT = 2048


def _bad_after_decoding(target: str) -> bool:
    """Whether any percent-decoding of ``target`` reads as another host, a backslash or a control character."""
    decoded = target
    for _ in range(4):  # double and triple encodings too
        if decoded.startswith("//") or "\\" in decoded or any(ord(c) < 0x20 or ord(c) == 0x7F for c in decoded):
            return True
        nxt = unquote(decoded)
        if nxt == decoded:
            return False
        decoded = nxt
    return True  # still changing after four rounds: nobody needs that


def create_app(
    content: PortalContent,
    verifier: CredentialVerifier,
    *,
    instance_id: str,
    access_log: AccessLog | None = None,
    limits: SignInLimits = SignInLimits(),
    session_limits: SessionLimits = SessionLimits(),
) -> Flask:
    app = Flask(__name__, static_folder=None)  # no static route: nothing is served from disk but content
    app.config.update(
        # A key per instance: a cookie from another run's portal does not verify here.
        SECRET_KEY=secrets.token_bytes(32),
        SESSION_COOKIE_NAME=f"portal_{instance_id[:12]}",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        # The cookie's signature expires with the session (Flask's default would be 31 days).
        PERMANENT_SESSION_LIFETIME=timedelta(seconds=session_limits.lifetime_s),
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        MAX_FORM_MEMORY_SIZE=MAX_BODY_BYTES,
    )
    # "/documents//etc/passwd" is a name to look up (and not find), not a redirect.
    app.url_map.merge_slashes = False
    limiter = SignInLimiter(limits)
    sessions = SessionStore(session_limits)

    def signed_in() -> bool:
        if sessions.touch(session.get("sid")):
            return True
        auth = request.authorization
        if auth is not None and auth.type == "basic":
            g.basic_attempt = True
            return check_pair(auth.username or "", auth.password or "") is True
        return False

    def check_pair(username: str, password: str) -> bool | float:
        """True if the pair is right; False if wrong; seconds to wait if the credential is locked."""
        key = username[:256]
        wait = limiter.retry_after(key)
        if wait is not None:
            g.action, g.retry_after = "sign_in_limited", wait
            return wait
        if verifier.check(username, password):
            limiter.succeeded(key)
            return True
        limiter.failed(key)
        g.action = "sign_in_failed"
        return False

    def wants_json() -> bool:
        return request.path.startswith("/api/")

    def is_download() -> bool:
        return request.endpoint in ("document", "record_download")

    def browser_wants_page() -> bool:
        # A browser lists text/html above */*; wget, curl and urllib do not, and get the challenge.
        accept = request.accept_mimetypes
        return bool(request.headers.get("Accept")) and accept["text/html"] > accept["application/json"]

    def json_error(status: int, message: str, **headers: str) -> Response:
        resp = jsonify(error=message)
        resp.status_code = status
        resp.headers.update(headers)
        if status == 401:
            resp.headers["WWW-Authenticate"] = CHALLENGE
        return resp

    def page_error(status: int, title: str, message: str) -> Response:
        template = "not_found.html" if status == 404 else "error.html"
        resp = app.make_response(
            (render_template(template, company=content.company, title=title, message=message), status)
        )
        if status == 401:
            resp.headers["WWW-Authenticate"] = CHALLENGE
        return resp

    def limited(wait: float) -> Response:
        return json_error(429, "too many failed sign-ins; wait and try again", **{"Retry-After": str(int(wait) + 1)})

    @app.before_request
    def gate():
        g.started = time.perf_counter()
        g.user = None
        if request.endpoint in _OPEN_ENDPOINTS:
            return None
        if signed_in():
            g.user = verifier.fingerprint
            return None
        g.setdefault("action", "refused")
        if g.action == "sign_in_limited":
            return limited(g.get("retry_after", limits.lockout_s))
        if wants_json() or is_download():
            return json_error(401, "sign-in required")
        if browser_wants_page() and not g.get("basic_attempt"):
            return redirect(url_for("sign_in", next=request.full_path.rstrip("?")), code=303)
        return page_error(401, "Sign-in required", "Sign in with the portal's username and password.")

    @app.after_request
    def finish(resp):
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["X-Frame-Options"] = "DENY"
        if access_log is not None:
            action = g.get("action")
            if action is None:
                if request.endpoint == "health":
                    action = "health"
                elif resp.status_code == 404:
                    action = "not_found"
                elif is_download():
                    action = "download"
                elif wants_json():
                    action = "api"
                else:
                    action = "page"
            access_log.write(
                method=request.method,
                path=request.path,  # never the query string
                status=resp.status_code,
                action=action,
                size=resp.content_length if resp.content_length is not None else resp.calculate_content_length(),
                duration_ms=(time.perf_counter() - g.get("started", time.perf_counter())) * 1000,
                remote=request.remote_addr,
                user=g.get("user"),
            )
        return resp

    def try_sign_in(username: str, password: str) -> bool | float:
        outcome = check_pair(username, password)
        if outcome is True:
            sessions.close(session.get("sid"))
            session.clear()
            session["sid"] = sessions.open()
            g.user = verifier.fingerprint
            g.action = "sign_in"
        return outcome

    def safe_next(target: str | None) -> str:
        """``target`` if it is a page of this portal given as a relative path; the library otherwise."""
        fallback = url_for("library")
        if not target or len(target) > _MAX_NEXT or not _URL_CHARS.fullmatch(target):
            return fallback
        if not target.startswith("/") or _bad_after_decoding(target):
            return fallback
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            return fallback
        try:
            endpoint, _ = app.url_map.bind("portal").match(unquote(parts.path), method="GET")
        except HTTPException:
            return fallback
        return target if endpoint in _NEXT_ENDPOINTS else fallback

    # ------------------------------------------------------------ errors
    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        status = exc.code or 500
        if wants_json() or is_download():
            return json_error(status, (exc.description or exc.name).strip() if status != 404 else "not found")
        return page_error(status, exc.name, exc.description or exc.name)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        app.logger.exception("unhandled error on %s %s", request.method, request.path)
        return http_error(InternalServerError())

    # ------------------------------------------------------------ pages
    @app.get("/healthz")
    def health():
        return jsonify(status="ok", instance=instance_id, scenario=content.scenario)

    @app.route("/sign-in", methods=["GET", "POST"])
    def sign_in():
        if request.method == "GET":
            g.action = "sign_in_page"
            return render_template(
                "sign_in.html", company=content.company, next=request.args.get("next", ""), error=None
            )
        outcome = try_sign_in(request.form.get("username", ""), request.form.get("password", ""))
        if outcome is True:
            return redirect(safe_next(request.form.get("next")), code=303)
        locked = outcome is not False
        error = (
            f"Too many failed sign-ins. Try again in {int(outcome) + 1} seconds."
            if locked
            else "Unknown username or wrong password."
        )
        # A wrong pair in the form shows the form again (200): a 401 must carry a Basic challenge
        # (RFC 9110), and a browser would answer that with its own password dialog over the form.
        resp = app.make_response(
            (
                render_template(
                    "sign_in.html", company=content.company, next=request.form.get("next", ""), error=error
                ),
                429 if locked else 200,
            )
        )
        if locked:
            resp.headers["Retry-After"] = str(int(outcome) + 1)
        return resp

    @app.post("/sign-out")
    def sign_out():
        sessions.close(session.get("sid"))
        session.clear()
        g.action = "sign_out"
        return redirect(url_for("sign_in"), code=303)

    @app.get("/")
    def home():
        return redirect(url_for("library"), code=303)

    @app.get("/library")
    def library():
        docs = sorted(content.documents.values(), key=lambda d: d.name)
        return render_template("library.html", company=content.company, documents=docs, quote=quote)

    @app.get("/documents/<path:name>")
    def document(name: str):
        doc = content.documents.get(name)
        if doc is None:
            abort(404)
        try:
            path = content.file(doc.path)
        except PortalContentError:
            abort(404)
        return send_file(path, as_attachment=True, download_name=doc.name.rsplit("/", 1)[-1])

    @app.get("/records")
    def records():
        recs = sorted(content.records.values(), key=lambda r: r.title)
        return render_template("records.html", company=content.company, records=recs)

    @app.get("/records/<rid>")
    def record(rid: str):
        rec = content.records.get(rid)
        if rec is None:
            abort(404)
        query = request.args.get("q", "").strip()
        rows = content.rows(rid)
        if query:
            needle = query.lower()
            rows = [r for r in rows if any(needle in cell.lower() for cell in r)]
        return render_template("record.html", company=content.company, record=rec, rows=rows, query=query)

    @app.get("/records/<rid>/download.<fmt>")
    def record_download(rid: str, fmt: str):
        rec = content.records.get(rid)
        if rec is None or fmt not in rec.downloads:
            abort(404)
        try:
            path = content.file(rec.downloads[fmt])
        except PortalContentError:
            abort(404)
        return send_file(path, as_attachment=True, download_name=f"{rid}.{fmt}")

    # ------------------------------------------------------------ JSON API
    @app.post("/api/sign-in")
    def api_sign_in():
        try:
            data = json.loads(request.get_data(cache=False) or b"")
        except (ValueError, UnicodeDecodeError):
            g.action = "bad_request"
            return json_error(400, 'the body must be a JSON object {"username": "...", "password": "..."}')
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("username", "password")):
            g.action = "bad_request"
            return json_error(400, 'fields "username" and "password" must be strings')
        outcome = try_sign_in(data["username"], data["password"])
        if outcome is True:
            return jsonify(ok=True)
        if outcome is not False:
            return limited(outcome)
        return json_error(401, "unknown username or wrong password")

    @app.post("/api/sign-out")
    def api_sign_out():
        sessions.close(session.get("sid"))
        session.clear()
        g.action = "sign_out"
        return jsonify(ok=True)

    @app.get("/api/documents")
    def api_documents():
        return jsonify(
            [
                {
                    "name": d.name,
                    "title": d.title,
                    "kind": d.kind,
                    "size": d.size,
                    "sha256": d.sha256,
                    "url": url_for("document", name=d.name),
                }
                for d in sorted(content.documents.values(), key=lambda d: d.name)
            ]
        )

    @app.get("/api/records")
    def api_records():
        return jsonify(
            [
                {
                    "id": r.id,
                    "title": r.title,
                    "kind": r.kind,
                    "columns": r.columns,
                    "n_rows": r.n_rows,
                    "downloads": {fmt: url_for("record_download", rid=r.id, fmt=fmt) for fmt in r.downloads},
                }
                for r in sorted(content.records.values(), key=lambda r: r.title)
            ]
        )

    @app.get("/api/records/<rid>")
    def api_record(rid: str):
        rec = content.records.get(rid)
        if rec is None:
            abort(404)
        return jsonify(
            id=rec.id,
            title=rec.title,
            kind=rec.kind,
            columns=rec.columns,
            rows=[dict(zip(rec.columns, r, strict=True)) for r in content.rows(rid)],
        )

    return app
