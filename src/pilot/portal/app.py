"""The intranet portal as a Flask application: HTML pages and a small JSON API.

Every route but the health check and sign-in sits behind one gate
(``before_request``), so a route added later cannot forget it. A client is
signed in by this instance's session cookie (signed with a key made fresh for
the instance) or by HTTP Basic with the instance's pair. Failed sign-ins are
counted per client address and lock that address out for a while.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from urllib.parse import quote

from flask import Flask, abort, g, jsonify, redirect, render_template, request, send_file, session, url_for

from pilot.portal.access_log import AccessLog
from pilot.portal.content import PortalContent, PortalContentError
from pilot.portal.credentials import CredentialVerifier


@dataclass(frozen=True)
class SignInLimits:
    """``max_failures`` failed sign-ins within ``window_s`` lock the address for ``lockout_s``."""

    max_failures: int = 5
    window_s: float = 60.0
    lockout_s: float = 30.0


class SignInLimiter:
    def __init__(self, limits: SignInLimits):
        self.limits = limits
        self._failures: dict[str, deque[float]] = defaultdict(deque)
        self._locked_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def retry_after(self, addr: str) -> float | None:
        """Seconds the address must still wait, or None if it may try."""
        with self._lock:
            until = self._locked_until.get(addr, 0.0)
            remaining = until - time.monotonic()
            return remaining if remaining > 0 else None

    def failed(self, addr: str) -> None:
        now = time.monotonic()
        with self._lock:
            window = self._failures[addr]
            window.append(now)
            while window and window[0] < now - self.limits.window_s:
                window.popleft()
            if len(window) >= self.limits.max_failures:
                self._locked_until[addr] = now + self.limits.lockout_s
                window.clear()

    def succeeded(self, addr: str) -> None:
        with self._lock:
            self._failures.pop(addr, None)


# Paths a client without the credential may reach.
_OPEN_ENDPOINTS = {"health", "sign_in", "api_sign_in"}


def create_app(
    content: PortalContent,
    verifier: CredentialVerifier,
    *,
    instance_id: str,
    access_log: AccessLog | None = None,
    limits: SignInLimits = SignInLimits(),
) -> Flask:
    app = Flask(__name__, static_folder=None)  # no static route: nothing is served from disk but content
    app.config.update(
        # A key per instance: a cookie from another run's portal does not verify here.
        SECRET_KEY=secrets.token_bytes(32),
        SESSION_COOKIE_NAME=f"portal_{instance_id[:12]}",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        MAX_CONTENT_LENGTH=64 * 1024,
    )
    # "/documents//etc/passwd" is a name to look up (and not find), not a redirect.
    app.url_map.merge_slashes = False
    limiter = SignInLimiter(limits)

    def client_addr() -> str:
        return request.remote_addr or "unknown"

    def signed_in() -> bool:
        if session.get("instance") == instance_id and session.get("user") == verifier.fingerprint:
            return True
        auth = request.authorization
        if auth is not None and auth.type == "basic":
            g.basic_attempt = True
            if limiter.retry_after(client_addr()) is not None:
                g.action = "sign_in_limited"
                return False
            if verifier.check(auth.username or "", auth.password or ""):
                limiter.succeeded(client_addr())
                return True
            limiter.failed(client_addr())
            g.action = "sign_in_failed"
        return False

    def wants_json() -> bool:
        return request.path.startswith("/api/")

    def is_download() -> bool:
        return request.endpoint in ("document", "record_download")

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
            resp = jsonify(error="too many failed sign-ins; wait and try again")
            resp.status_code = 429
            resp.headers["Retry-After"] = str(int(limits.lockout_s) + 1)
            return resp
        if wants_json() or is_download() or getattr(g, "basic_attempt", False):
            resp = jsonify(error="sign-in required")
            resp.status_code = 401
            return resp
        return redirect(url_for("sign_in", next=request.path), code=303)

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

    def try_sign_in(username: str, password: str) -> tuple[bool, float | None]:
        wait = limiter.retry_after(client_addr())
        if wait is not None:
            g.action = "sign_in_limited"
            return False, wait
        if verifier.check(username, password):
            limiter.succeeded(client_addr())
            session.clear()
            session["instance"] = instance_id
            session["user"] = verifier.fingerprint
            g.user = verifier.fingerprint
            g.action = "sign_in"
            return True, None
        limiter.failed(client_addr())
        g.action = "sign_in_failed"
        return False, None

    def safe_next(target: str | None) -> str:
        # Only a path on this portal, never another host.
        if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
            return target
        return url_for("library")

    # ------------------------------------------------------------ pages
    @app.get("/healthz")
    def health():
        return jsonify(status="ok", instance=instance_id, scenario=content.scenario)

    @app.route("/sign-in", methods=["GET", "POST"])
    def sign_in():
        if request.method == "GET":
            g.action = "sign_in_page"
            return render_template("sign_in.html", company=content.company, next=request.args.get("next", ""), error=None)
        ok, wait = try_sign_in(request.form.get("username", ""), request.form.get("password", ""))
        if ok:
            return redirect(safe_next(request.form.get("next")), code=303)
        status = 429 if wait is not None else 401
        error = (f"Too many failed sign-ins. Try again in {int(wait) + 1} seconds."
                 if wait is not None else "Unknown username or wrong password.")
        resp = app.make_response((render_template("sign_in.html", company=content.company,
                                                  next=request.form.get("next", ""), error=error), status))
        if wait is not None:
            resp.headers["Retry-After"] = str(int(wait) + 1)
        return resp

    @app.post("/sign-out")
    def sign_out():
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
        data = request.get_json(silent=True) or {}
        ok, wait = try_sign_in(str(data.get("username", "")), str(data.get("password", "")))
        if ok:
            return jsonify(ok=True)
        if wait is not None:
            resp = jsonify(ok=False, error="too many failed sign-ins; wait and try again")
            resp.status_code = 429
            resp.headers["Retry-After"] = str(int(wait) + 1)
            return resp
        resp = jsonify(ok=False, error="unknown username or wrong password")
        resp.status_code = 401
        return resp

    @app.post("/api/sign-out")
    def api_sign_out():
        session.clear()
        g.action = "sign_out"
        return jsonify(ok=True)

    @app.get("/api/documents")
    def api_documents():
        return jsonify([
            {"name": d.name, "title": d.title, "kind": d.kind, "size": d.size, "sha256": d.sha256,
             "url": url_for("document", name=d.name)}
            for d in sorted(content.documents.values(), key=lambda d: d.name)
        ])

    @app.get("/api/records")
    def api_records():
        return jsonify([
            {"id": r.id, "title": r.title, "kind": r.kind, "columns": r.columns, "n_rows": r.n_rows,
             "downloads": {fmt: url_for("record_download", rid=r.id, fmt=fmt) for fmt in r.downloads}}
            for r in sorted(content.records.values(), key=lambda r: r.title)
        ])

    @app.get("/api/records/<rid>")
    def api_record(rid: str):
        rec = content.records.get(rid)
        if rec is None:
            abort(404)
        return jsonify(id=rec.id, title=rec.title, kind=rec.kind, columns=rec.columns,
                       rows=[dict(zip(rec.columns, r)) for r in content.rows(rid)])

    @app.errorhandler(404)
    def not_found(_exc):
        if wants_json() or is_download():
            return jsonify(error="not found"), 404
        return render_template("not_found.html", company=content.company), 404

    return app
