"""The participant site: consent, the bundle, the clock, uploads, H1's assistant, and the experimenter's view.

Flask routes served by waitress on the loopback address, with the grading
site's posture (:mod:`pilot.grading.site`): one ``before_request`` gate
admits nothing but the sign-in links, the signed-out page and the static
files without a session; it refuses a Host header the site was not told to
answer and checks the CSRF token of every POST, and counts POSTs per session
(429 past the limit); failed sign-ins are counted per client address. A
session is a random id in a cookie signed with the wave's own secret, worth
nothing once it leaves the wave's session store (:mod:`pilot.web_sessions`,
the grading site's); both are kept beside the wave (``human/<wave>/site.secret``
and ``sessions.sqlite``, owner-only), so a restart of the site signs no one
out. Every page carries a
strict Content-Security-Policy (scripts and styles of the site's own files
only), no framing, no referrer and no caching.

A participant's pages are addressed by their session's opaque id and looked
up with the signed-in participant's own id, so another participant's session
answers 404 exactly like one that does not exist. Nothing of the task is
shown before the participant has agreed to the consent text, and the bundle
(brief, inputs, policy, portal) only once they start the clock. H0's pages
have no assistant and say so; the assistant's route answers 404 for them.

Slow work never holds the store: an upload's admission and an assistant's
answer run under the session's own lock, outside the store's; a submitted
session is evaluated in a background thread with its own connection
(:mod:`pilot.human.evaluate`), and ``pilot human evaluate`` finishes what a
stopped site left.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import queue
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Flask, abort, g, redirect, render_template, request, send_file, session, url_for
from jinja2 import StrictUndefined
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from pilot import web_sessions, worker_files
from pilot.grading import tokens
from pilot.grading.site import allowed_hosts, host_name
from pilot.human import bundle, evaluate, store, uploads, withdraw
from pilot.human import session as sessions_mod
from pilot.human.assistant import Assistant, AssistantUnavailable, Settings
from pilot.human.consent import Consent, load_consent
from pilot.human.status import clock_text, status_rows, utc_time
from pilot.human.wave import ASSISTED, SECRET_FILE, SESSIONS_FILE, wave_dir
from pilot.oracles import safety
from pilot.portal.app import SignInLimiter, SignInLimits
from pilot.serving import BackgroundServer, set_security_headers, use_site_layout
from pilot.store import Store
from pilot.view.site import REHEARSAL_BANNER, SIMULATED_BANNER
from pilot.web_sessions import SessionLimits

LOOPBACK = "127.0.0.1"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; connect-src 'self'"
)
STATIC_DIR = Path(__file__).parent / "static"
STATIC_FILES = ("human.css", "human.js")
COOKIE_NAME = "pilot_participant"
#: Largest request body: the largest deliverable with room for the form around it.
MAX_BODY_BYTES = uploads.MAX_UPLOAD_BYTES + 1024 * 1024
#: Failed sign-ins per client address: ten a minute, then a minute's wait (429).
SIGN_IN_LIMITS = SignInLimits(max_failures=10, window_s=60.0, lockout_s=60.0)
#: POSTs per session: well above a person's clicking and the page's minute beacon.
POST_LIMITS = SignInLimits(max_failures=60, window_s=60.0, lockout_s=30.0)
#: A session at most a working day, and ended after two hours without a request.
SESSION_LIMITS = SessionLimits(lifetime_s=12 * 3600.0, idle_s=2 * 3600.0)
#: Input files are read through the bounded reader up to this size.
MAX_INPUT_BYTES = 64 * 1024 * 1024

# Endpoints reached without a session; every other one needs the role it is listed under.
_OPEN = {"participant_sign_in", "experimenter_sign_in", "signed_out", "asset", "favicon"}
_EXPERIMENTER = {"experimenter", "intervention_post"}
_NOT_SIGNED_IN = (
    "You are signed out, or your session has ended. To sign in, open your personal link again "
    "(the research team gave it to you). Nothing you saved is lost."
)
NO_ASSISTANT = (
    "In your condition you work without AI assistance: this page has no assistant, by design. "
    "Please use no other AI tool either."
)


@dataclass
class SiteState:
    """What the application keeps between requests: the store (one request at a time on it), locks, services."""

    study: Store
    folder: Path
    wave: str
    lock: threading.Lock
    assistant: Assistant
    consent: Consent
    logins: web_sessions.SessionStore
    session_locks: dict[str, threading.Lock] = field(default_factory=dict)
    portals: dict[str, Any] = field(default_factory=dict)
    evaluations: queue.Queue[str | None] = field(default_factory=queue.Queue)
    evaluator: threading.Thread | None = None
    evaluate_judge: Any = None

    @contextmanager
    def db(self) -> Iterator[Store]:
        with self.lock:
            yield self.study

    @contextmanager
    def own(self, participant_id: str) -> Iterator[None]:
        """The participant's own lock: their uploads, messages, submission and withdrawal one at a time."""
        with self.lock:
            lock = self.session_locks.setdefault(participant_id, threading.Lock())
        with lock:
            yield

    def close(self) -> None:
        self.evaluations.put(None)
        if self.evaluator is not None:
            self.evaluator.join(timeout=600)
        for portal in list(self.portals.values()):
            portal.stop()
        self.portals.clear()
        self.assistant.close()
        self.logins.close_store()
        with self.lock:
            self.study.close()


#: How often the site closes the sessions whose wall limit has passed while their participant was away.
SWEEP_S = 15.0


def _evaluator_loop(state: SiteState) -> None:
    """Evaluate each submitted session in turn with a connection of its own (the site's is never held); between
    sessions, close those whose wall limit passed while nobody asked (their evaluation follows)."""
    while True:
        try:
            pid = state.evaluations.get(timeout=SWEEP_S)
        except queue.Empty:
            pid = ""
        if pid is None:
            return
        try:
            if not pid:
                with store.open_store(state.folder) as st:
                    closed = evaluate.close_expired(st, state.wave)
                    rows = [store.participant(st.conn, state.wave, p) for p in closed]
                    folders = [sessions_mod.attempt_dir(st, r["run_id"]) if r is not None else None for r in rows]
                for p, folder in zip(closed, folders, strict=True):
                    if folder is not None:
                        state.assistant.close_session(folder)
                    portal = state.portals.pop(p, None)
                    if portal is not None:
                        portal.stop()
                    state.evaluations.put(p)
                continue
            evaluate.evaluate_wave(state.folder, state.wave, judge=state.evaluate_judge, only=[pid])
        except Exception as exc:  # noqa: BLE001 - a failed evaluation waits for `pilot human evaluate`; the site goes on
            if not pid:
                continue
            try:
                with store.open_store(state.folder) as st, st.transaction() as c:
                    c.execute(
                        "UPDATE human_participants SET evaluation_note = ? WHERE wave = ? AND participant_id = ?",
                        (f"{type(exc).__name__}: {str(exc)[:300]}", state.wave, pid),
                    )
            except Exception:  # noqa: BLE001 - the note is a courtesy; the session stays submitted either way
                pass


def create_app(
    study_folder: Path,
    wave: str,
    *,
    trusted_hosts: Iterable[str] = (),
    secure_cookies: bool = False,
    bind_host: str = LOOPBACK,
    assistant: Assistant | None = None,
    evaluate_in_background: bool = True,
    judge: Any = None,
    sign_in_limits: SignInLimits = SIGN_IN_LIMITS,
    post_limits: SignInLimits = POST_LIMITS,
    session_limits: SessionLimits = SESSION_LIMITS,
) -> Flask:
    """The participant site of human wave ``wave`` of the study in ``study_folder`` (refused without the wave).

    ``assistant`` replaces the one made from the wave's settings and this
    process's ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` (a test gives
    one whose upstream is the scripted model server); ``judge`` the study's
    judges (tests); ``evaluate_in_background`` False leaves every submitted
    session for ``pilot human evaluate``.
    """
    folder = Path(study_folder)
    st = store.connect(folder)
    try:
        info = store.wave(st.conn, wave)
        consent = load_consent()
        secret = web_sessions.load_secret(wave_dir(folder, wave) / SECRET_FILE)
        logins = web_sessions.SessionStore(wave_dir(folder, wave) / SESSIONS_FILE, session_limits)
    except BaseException:
        st.close()
        raise
    settings = Settings.from_mapping(info.assistant)
    # The oracle's guarded parse child starts now, its office libraries imported while nobody waits: the first
    # upload is admitted as fast as the others.
    from pilot.oracles import guard

    guard.prestart()
    state = SiteState(st, folder, wave, threading.Lock(), assistant or Assistant(settings), consent, logins)
    state.evaluate_judge = judge
    if evaluate_in_background:
        state.evaluator = threading.Thread(
            target=_evaluator_loop, args=(state,), name="pilot-human-evaluate", daemon=True
        )
        state.evaluator.start()
    app = Flask(__name__, static_folder=None)
    app.extensions["pilot.human"] = state
    use_site_layout(app)
    app.jinja_env.undefined = StrictUndefined
    app.jinja_env.filters["utc_time"] = utc_time
    app.config.update(
        # The wave's own key: a cookie from before a restart of the site still verifies.
        SECRET_KEY=secret,
        SESSION_COOKIE_NAME=COOKIE_NAME,
        PERMANENT_SESSION_LIFETIME=int(session_limits.lifetime_s),
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=bool(secure_cookies),
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        MAX_FORM_MEMORY_SIZE=2 * 1024 * 1024,
    )
    hosts = allowed_hosts(bind_host, trusted_hosts)
    sign_ins = SignInLimiter(sign_in_limits)
    posts = SignInLimiter(post_limits)
    banner = ""
    if info.simulated:
        banner = SIMULATED_BANNER + " No person took part."
    else:
        from pilot import backends

        with state.db() as s:
            labels = backends.label_of(s.backends_used())
        banner = {"SIMULATED": SIMULATED_BANNER, "REHEARSAL": REHEARSAL_BANNER}.get(labels, "")

    # ------------------------------------------------------------------ helpers
    def page(template: str, code: int = 200, **context: Any) -> Response:
        return app.make_response((render_template(template, **context), code))

    def refuse(status: int, title: str, message: str, **headers: str) -> Response:
        resp = page("message.html", status, title=title, message=message)
        resp.headers.update(headers)
        return resp

    def open_login(role: str, participant_id: str | None) -> None:
        logins.close(session.get("sid"))  # a sign-in always starts a new session
        session.clear()
        sid, _ = logins.open(role, participant_id)
        session.permanent = True
        session["sid"] = sid

    def signed_in_to(target: str) -> Response:
        # A SameSite=Strict cookie is not sent on a navigation another site started: move on by the page's own refresh.
        if request.headers.get("Sec-Fetch-Site") == "cross-site":
            return page("message.html", title="Signed in", message="You are signed in.", refresh=target)
        return redirect(target, code=303)

    def me() -> Any:
        with state.db() as s:
            row = store.participant(s.conn, wave, g.participant)
        if row is None:
            abort(404, description="There is no such session.")
        return row

    def mine(session_id: str) -> Any:
        """The signed-in participant's session when ``session_id`` is theirs; 404 for anyone else's."""
        with state.db() as s:
            row = store.own_session(s.conn, wave, g.participant, session_id)
        if row is None:
            abort(404, description="There is no such session.")
        return row

    def where(row: Any) -> str:
        status = row["status"]
        sid = row["session_id"]
        if status in ("assigned", "declined"):
            return url_for("consent_page", session_id=sid)
        if status == "consented":
            return url_for("ready", session_id=sid)
        if status == "started":
            return url_for("task", session_id=sid)
        return url_for("done", session_id=sid)

    def scenario_of(row: Any) -> Any:
        from pilot.scenarios import load_scenario

        return load_scenario(row["scenario"])

    def portal_for(row: Any) -> Any:
        """The session's own portal (started on first need; again after a restart, with fresh credentials)."""
        scenario = scenario_of(row)
        if not getattr(scenario, "uses_portal", False):
            return None
        pid = row["participant_id"]
        portal = state.portals.get(pid)
        if portal is not None and portal.running:
            return portal
        from pilot.portal import start_instance

        with state.db() as s:
            base = sessions_mod.attempt_dir(s, row["run_id"])
        assert base is not None
        target = base / "record" / f"portal-{int(time.time())}"
        try:
            portal = start_instance(scenario.id, target)
        except Exception as exc:  # noqa: BLE001 - the page says the portal is down; the session goes on
            app.logger.warning("portal for %s did not start: %s", row["run_id"], exc)
            return None
        state.portals[pid] = portal
        with state.db() as s, s.transaction() as c:
            store.log_event(c, wave, "portal_started", participant_id=pid, detail={"url": portal.url})
        return portal

    def stop_portal(pid: str) -> None:
        portal = state.portals.pop(pid, None)
        if portal is not None:
            portal.stop()

    def close_session_services(row: Any) -> None:
        with state.db() as s:
            folder = sessions_mod.attempt_dir(s, row["run_id"])
        if folder is not None:
            state.assistant.close_session(folder)
        stop_portal(row["participant_id"])

    def after_submit(row: Any) -> None:
        close_session_services(row)
        if state.evaluator is not None:
            state.evaluations.put(row["participant_id"])

    def expired_notice(row: Any) -> Response:
        after_submit(row)
        return redirect(url_for("done", session_id=row["session_id"], why="deadline"), code=303)

    def open_or_closed(row: Any) -> Any:
        """The session's fresh row if still open; the participant's own page otherwise (closed at the wall limit)."""
        with state.db() as s:
            try:
                return sessions_mod.open_session(s, wave, row["participant_id"])
            except sessions_mod.SessionError:
                fresh = store.participant(s.conn, wave, row["participant_id"])
        if fresh is not None and fresh["ended_by"] == "deadline":
            return expired_notice(fresh)
        return redirect(where(fresh if fresh is not None else row), code=303)

    @app.context_processor
    def _common() -> dict[str, Any]:
        role = g.get("role")
        return {
            "wave": wave,
            "banner": banner,
            "role": role,
            "csrf": g.session.csrf if g.get("session") is not None else "",
            "session_id": g.get("session_id", ""),
        }

    # ------------------------------------------------------------------ the gate
    @app.before_request
    def gate() -> Response | None:
        g.role = None
        g.session = None
        if request.method not in ("GET", "HEAD", "POST"):
            abort(405)
        if host_name(request.host) not in hosts:
            abort(403, description="This site does not answer that host name.")
        if request.endpoint in _OPEN or request.endpoint is None:
            return None
        current = logins.get(session.get("sid"))
        if current is None:
            if session:
                session.clear()  # drop the stale cookie (never one the browser did not send)
            return refuse(403, "Not signed in", _NOT_SIGNED_IN)
        role = current.role
        if request.endpoint in _EXPERIMENTER and role != "experimenter":
            abort(403, description="This page is the experimenter's.")
        if request.endpoint not in _EXPERIMENTER and role != "participant":
            abort(403, description="The experimenter has no task; this page is a participant's.")
        g.role, g.participant, g.session = role, current.subject, current
        if request.method == "POST":
            sent = request.form.get("csrf", "") or request.headers.get("X-CSRF-Token", "")
            expected = current.csrf
            if not expected or not hmac.compare_digest(sent.encode("utf-8", "replace"), expected.encode("utf-8")):
                abort(403, description="The form's security token is missing or wrong. Reload the page and try again.")
            sid = hashlib.sha256(str(session.get("sid")).encode()).hexdigest()
            wait = posts.retry_after(sid)
            if wait is not None:
                return refuse(
                    429,
                    "Too many requests",
                    f"Too many requests in a short time; wait {int(wait) + 1} seconds and try again.",
                    **{"Retry-After": str(int(wait) + 1)},
                )
            posts.failed(sid)
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        secured: Response = set_security_headers(resp, CSP)
        return secured

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        if status == 413:
            return refuse(
                413,
                "File too large",
                f"The file is larger than {safety.human_size(uploads.MAX_UPLOAD_BYTES)}, the most any "
                "deliverable may weigh. Use your browser's Back button and choose a smaller file.",
            )
        return refuse(status, exc.name, exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        app.logger.exception("unhandled error on %s %s", request.method, request.path)
        return refuse(
            500,
            "Something went wrong",
            "This page cannot be shown. Tell the experimenter what you did; nothing you saved before is lost.",
        )

    # ------------------------------------------------------------------ sign-in and out
    def too_many_sign_ins(key: str) -> Response | None:
        wait = sign_ins.retry_after(key)
        if wait is None:
            return None
        return refuse(
            429,
            "Too many sign-in attempts",
            f"Too many sign-in attempts; wait {int(wait) + 1} seconds.",
            **{"Retry-After": str(int(wait) + 1)},
        )

    @app.get("/signin/<token>")
    def participant_sign_in(token: str) -> Response:
        key = request.remote_addr or "unknown"
        if (throttled := too_many_sign_ins(key)) is not None:
            return throttled
        row = None
        if tokens.well_formed(token):
            with state.db() as s:
                row = store.participant_by_token_hash(s.conn, wave, tokens.token_hash(token))
        with state.db() as s, s.transaction() as c:
            store.log_event(
                c, wave, "signin" if row else "signin_refused", participant_id=row["participant_id"] if row else None
            )
        if row is None or row["status"] == "withdrawn":
            sign_ins.failed(key)
            return refuse(
                403,
                "Sign-in refused",
                "This sign-in link is not valid. Check that you opened the whole link as the research team sent it.",
            )
        sign_ins.succeeded(key)
        open_login("participant", row["participant_id"])
        return signed_in_to(where(row))

    @app.get("/experimenter/signin/<token>")
    def experimenter_sign_in(token: str) -> Response:
        key = request.remote_addr or "unknown"
        if (throttled := too_many_sign_ins(key)) is not None:
            return throttled
        with state.db() as s:
            ok = tokens.well_formed(token) and tokens.same_hash(
                tokens.token_hash(token), store.experimenter_hash(s.conn, wave)
            )
            with s.transaction() as c:
                store.log_event(c, wave, "signin" if ok else "signin_refused", detail={"role": "experimenter"})
        if not ok:
            sign_ins.failed(key)
            return refuse(403, "Sign-in refused", "This sign-in link is not valid.")
        sign_ins.succeeded(key)
        open_login("experimenter", None)
        return signed_in_to(url_for("experimenter"))

    @app.post("/signout")
    def sign_out() -> Response:
        logins.close(session.get("sid"))
        session.clear()
        return redirect(url_for("signed_out"), code=303)

    @app.get("/signed-out")
    def signed_out() -> Response:
        return page(
            "message.html", title="Signed out", message="You are signed out. To come back, open your personal link."
        )

    # ------------------------------------------------------------------ the participant's pages
    @app.get("/")
    def home() -> Response:
        if g.role == "experimenter":
            return redirect(url_for("experimenter"), code=303)
        return redirect(where(me()), code=303)

    @app.get("/s/<session_id>/consent")
    def consent_page(session_id: str) -> Response:
        row = mine(session_id)
        g.session_id = session_id
        if row["status"] not in ("assigned", "declined"):
            return redirect(where(row), code=303)
        return page(
            "consent.html",
            title="Information and consent",
            consent=state.consent,
            declined=row["status"] == "declined",
        )

    @app.post("/s/<session_id>/consent")
    def consent_post(session_id: str) -> Response:
        row = mine(session_id)
        decision = request.form.get("decision", "")
        if decision not in ("agree", "decline"):
            abort(400, description="Choose I agree or I do not agree.")
        with state.db() as s:
            try:
                sessions_mod.decide_consent(s, wave, row["participant_id"], decision == "agree", state.consent)
            except sessions_mod.SessionError as exc:
                return refuse(409, "Consent", str(exc))
        if decision == "decline":
            g.session_id = session_id
            return page(
                "message.html",
                title="Thank you",
                message="You chose not to take part. Nothing of the assignment is shown and nothing more about you is "
                "recorded. You may close this page. If you change your mind, open your link again.",
            )
        return redirect(url_for("ready", session_id=session_id), code=303)

    @app.get("/s/<session_id>/ready")
    def ready(session_id: str) -> Response:
        row = mine(session_id)
        g.session_id = session_id
        if row["status"] != "consented":
            return redirect(where(row), code=303)
        wall = bundle.study_caps(row["scenario"]).wall_s
        return page(
            "ready.html",
            title="Before you start",
            wall=clock_text(wall),
            wall_minutes=int(round(wall / 60)),
            assisted=row["condition"] == ASSISTED,
            no_assistant=NO_ASSISTANT,
            uses_portal=bool(getattr(scenario_of(row), "uses_portal", False)),
        )

    @app.post("/s/<session_id>/start")
    def start_post(session_id: str) -> Response:
        row = mine(session_id)
        with state.own(row["participant_id"]), state.db() as s:
            try:
                sessions_mod.start(s, wave, row["participant_id"])
            except sessions_mod.SessionError as exc:
                fresh = store.participant(s.conn, wave, row["participant_id"])
                if fresh is not None and fresh["status"] == "started":
                    return redirect(url_for("task", session_id=session_id), code=303)
                return refuse(409, "The task did not start", str(exc))
        return redirect(url_for("task", session_id=session_id), code=303)

    @app.get("/s/<session_id>/task")
    def task(session_id: str) -> Response:
        row = mine(session_id)
        g.session_id = session_id
        if row["status"] != "started":
            return redirect(where(row), code=303)
        fresh = open_or_closed(row)
        if isinstance(fresh, Response):
            return fresh
        return task_page(fresh)

    def task_page(
        row: Any,
        *,
        code: int = 200,
        notice: str = "",
        errors: list[str] | None = None,
        draft: dict[str, Any] | None = None,
    ) -> Response:
        pid = row["participant_id"]
        scenario = scenario_of(row)
        with state.db() as s:
            ws = sessions_mod.workspace_of(s, row["run_id"])
            files = sessions_mod.delivered(s, row)
            history = store.exchanges(s.conn, wave, pid)
            refused = [u for u in store.uploads(s.conn, wave, pid) if not u["admitted"]][-3:]
            saved = store.completion_draft(row)
        assert ws is not None
        view_id = secrets.token_hex(12)
        with state.db() as s:
            sessions_mod.page_view(s, wave, pid, view_id)
        clock = sessions_mod.clock_of(row)
        assert clock is not None
        left = clock.left(time.time())
        inputs = sorted(
            (p.relative_to(ws / "inputs").as_posix(), p.stat().st_size)
            for p in (ws / "inputs").rglob("*")
            if p.is_file() and not p.is_symlink()
        )
        spent = sum(float(h["cost_usd"] or 0) for h in history)
        return page(
            "task.html",
            code,
            title="Your assignment",
            row=row,
            scenario_title=scenario.title,
            brief=(ws / "BRIEF.md").read_text(encoding="utf-8"),
            policy=(ws / "POLICY.md").read_text(encoding="utf-8"),
            policy_preface=bundle.POLICY_PREFACE,
            inputs=inputs,
            deliverables=bundle.requested_files(scenario),
            files=files,
            refused=refused,
            draft=draft if draft is not None else saved,
            statuses=sessions_mod.RECORD_STATUSES,
            notice=notice,
            errors=errors or [],
            left=clock_text(left),
            deadline_ms=int(clock.deadline * 1000),
            deadline_utc=datetime.fromtimestamp(clock.deadline, UTC).strftime("%H:%M:%S UTC"),
            wall=clock_text(clock.wall_limit_s),
            view_id=view_id,
            assisted=row["condition"] == ASSISTED,
            no_assistant=NO_ASSISTANT,
            history=history,
            spent=f"{spent:.4f}",
            budget=f"{settings.usd_per_session:.2f}",
            max_message_chars=settings.max_message_chars,
            portal=portal_for(row),
            stand_ins=", ".join(uploads.TEXT_STAND_INS),
        )

    @app.get("/s/<session_id>/inputs/<path:name>")
    def task_input(session_id: str, name: str) -> Response:
        row = mine(session_id)
        fresh = open_or_closed(row)
        if isinstance(fresh, Response):
            return fresh
        with state.db() as s:
            ws = sessions_mod.workspace_of(s, row["run_id"])
        assert ws is not None
        try:
            data = worker_files.read_bytes(ws / "inputs", name, max_bytes=MAX_INPUT_BYTES)
        except (worker_files.Refused, OSError):
            abort(404, description="There is no such input file.")
        with state.db() as s, s.transaction() as c:
            store.log_event(c, wave, "download_input", participant_id=row["participant_id"], detail={"file": name})
        return send_file(
            io.BytesIO(data),
            mimetype="application/octet-stream",
            as_attachment=True,
            download_name=Path(name).name,
            max_age=0,
        )

    @app.post("/s/<session_id>/upload/<name>")
    def upload_post(session_id: str, name: str) -> Response:
        row = mine(session_id)
        g.session_id = session_id
        pid = row["participant_id"]
        incoming = request.files.get("file")
        with state.own(pid):
            fresh = open_or_closed(row)
            if isinstance(fresh, Response):
                return fresh
            with state.db() as s:
                try:
                    deliverable, folder = sessions_mod.upload_target(s, wave, pid, name)
                except sessions_mod.SessionError:
                    abort(404, description="The brief asks for no such file.")
            if incoming is None or not incoming.filename:
                with state.db() as s:
                    fresh = store.participant(s.conn, wave, pid)
                return task_page(fresh, code=400, errors=[f"Choose the file to upload for {name} first."])
            try:
                accepted = uploads.receive(
                    deliverable, incoming.filename, incoming.stream, folder, folder / "workspace" / "outputs"
                )
            except uploads.UploadRefused as exc:
                with state.db() as s:
                    sessions_mod.record_upload(s, wave, pid, name, None, str(exc))
                    fresh = store.participant(s.conn, wave, pid)
                return task_page(fresh, code=422, errors=[f"{name}: not accepted. {exc}"])
            with state.db() as s:
                sessions_mod.record_upload(s, wave, pid, name, accepted, None)
                fresh = store.participant(s.conn, wave, pid)
        note = f"{accepted.saved_as} received ({accepted.size:,} bytes)" + (
            " as a substitute; say why in the completion record below." if accepted.substitute else "."
        )
        return task_page(fresh, notice=note)

    @app.post("/s/<session_id>/record")
    def record_post(session_id: str) -> Response:
        row = mine(session_id)
        g.session_id = session_id
        pid = row["participant_id"]
        action = request.form.get("action", "")
        names = [d.name for d in bundle.requested_files(scenario_of(row))]
        draft, errors = sessions_mod.read_form(request.form, names)
        if action not in ("save", "submit"):
            errors.append("choose Save or Submit")
        with state.own(pid):
            fresh = open_or_closed(row)
            if isinstance(fresh, Response):
                return fresh
            if errors:
                return task_page(fresh, code=400, errors=errors, draft=draft)
            refused = ""
            with state.db() as s:
                sessions_mod.save_draft(s, wave, pid, draft)
                if action == "submit":
                    try:
                        sessions_mod.submit(s, wave, pid, ended_by="participant")
                    except sessions_mod.SessionError as exc:
                        refused = str(exc)
                fresh = store.participant(s.conn, wave, pid)
            if refused:
                return task_page(fresh, code=400, errors=[refused], draft=draft)
            if action == "submit":
                after_submit(fresh)
                return redirect(url_for("done", session_id=session_id), code=303)
        return task_page(fresh, notice="Completion record saved. You can change it until you submit.")

    @app.post("/s/<session_id>/assistant")
    def assistant_post(session_id: str) -> Response:
        row = mine(session_id)
        g.session_id = session_id
        if row["condition"] != ASSISTED:
            abort(404, description="There is no assistant in your condition.")
        pid = row["participant_id"]
        text = (request.form.get("message") or "").replace("\r\n", "\n")
        with state.own(pid):
            fresh = open_or_closed(row)
            if isinstance(fresh, Response):
                return fresh
            with state.db() as s:
                history = [
                    (h["prompt"], h["reply"]) for h in store.exchanges(s.conn, wave, pid) if h["status"] == "answered"
                ]
                folder = sessions_mod.attempt_dir(s, row["run_id"])
            assert folder is not None
            try:
                reply = state.assistant.ask(folder, history, text)
            except AssistantUnavailable as exc:
                if text.strip():
                    with state.db() as s:
                        sessions_mod.record_exchange(
                            s, wave, pid, text[: settings.max_message_chars], None, status=exc.status, error=str(exc)
                        )
                with state.db() as s:
                    fresh = store.participant(s.conn, wave, pid)
                return task_page(fresh, code=409 if exc.status == "refused" else 502, errors=[f"Assistant: {exc}"])
            with state.db() as s:
                sessions_mod.record_exchange(s, wave, pid, text.strip(), reply)
                fresh = store.participant(s.conn, wave, pid)
        return task_page(fresh)

    @app.post("/s/<session_id>/active")
    def active_post(session_id: str) -> Response:
        row = mine(session_id)
        with state.db() as s:
            kept = sessions_mod.report_active(
                s, wave, row["participant_id"], request.form.get("view", ""), request.form.get("seconds")
            )
            fresh = store.participant(s.conn, wave, row["participant_id"])
        clock = sessions_mod.clock_of(fresh) if fresh is not None else None
        left = (
            clock.left(time.time()) if clock is not None and fresh is not None and fresh["status"] == "started" else 0.0
        )
        return app.response_class(f'{{"kept": {kept:.1f}, "left": {left:.1f}}}', mimetype="application/json")

    @app.get("/s/<session_id>/done")
    def done(session_id: str) -> Response:
        row = mine(session_id)
        g.session_id = session_id
        if row["status"] not in ("submitted", "evaluated"):
            return redirect(where(row), code=303)
        return page(
            "done.html",
            title="Submitted",
            row=row,
            time_on_task=clock_text(float(row["time_on_task_s"] or 0)),
            deadline=row["ended_by"] == "deadline" or request.args.get("why") == "deadline",
        )

    @app.get("/s/<session_id>/withdraw")
    def withdraw_page(session_id: str) -> Response:
        mine(session_id)
        g.session_id = session_id
        return page("withdraw.html", title="Withdraw from the study")

    @app.post("/s/<session_id>/withdraw")
    def withdraw_post(session_id: str) -> Response:
        row = mine(session_id)
        if request.form.get("confirm") != "withdraw":
            abort(400, description="Tick the box to confirm that you withdraw.")
        pid = row["participant_id"]
        with state.own(pid):
            close_session_services(row)
            with state.db() as s:
                made = withdraw.withdraw(s, wave, pid, via="site")
        logins.close_subject(pid)  # every session of theirs, in every browser
        session.clear()
        text = (
            "You have withdrawn from the study. Everything you produced in this session has been deleted; "
            "only a note that a participant withdrew is kept. Thank you for your time."
            if made.action == "deleted"
            else "You have withdrawn from the study. The analysis had already started, so your work is excluded "
            "from every later analysis, and your contact details have been deleted. Thank you for your time."
        )
        return page("message.html", title="Withdrawn", message=text)

    # ------------------------------------------------------------------ the experimenter's view
    @app.get("/experimenter")
    def experimenter() -> Response:
        with state.db() as s:
            rows = status_rows(s, wave)
            gone = [dict(r) for r in store.withdrawals(s.conn, wave)]
        return page("experimenter.html", title="Experimenter", rows=rows, withdrawals=gone, source=info.source)

    @app.post("/experimenter/intervention/<participant_id>")
    def intervention_post(participant_id: str) -> Response:
        with state.db() as s:
            if store.participant(s.conn, wave, participant_id) is None:
                abort(404, description="There is no such participant in this wave.")
            try:
                sessions_mod.add_intervention(
                    s, wave, participant_id, request.form.get("minutes"), request.form.get("reason", "")
                )
                evaluate.refresh_intervention(s, wave, participant_id)
            except sessions_mod.SessionError as exc:
                return refuse(400, "Not recorded", f"{participant_id}: {exc}")
        return redirect(url_for("experimenter"), code=303)

    # ------------------------------------------------------------------ static
    @app.get("/static/<name>")
    def asset(name: str) -> Response:
        if name not in STATIC_FILES:
            abort(404)
        mime = "text/css" if name.endswith(".css") else "text/javascript"
        return Response((STATIC_DIR / name).read_bytes(), mimetype=mime)

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status=204)

    return app


class ParticipantServer(BackgroundServer):
    """The participant site served by waitress (``port`` 0: any free port); ``start`` (or ``with``) serves it."""

    def __init__(
        self,
        study_folder: Path,
        wave: str,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        threads: int = 8,
        trusted_hosts: Iterable[str] = (),
        secure_cookies: bool = False,
        **options: Any,
    ) -> None:
        trusted = [h for h in trusted_hosts if h.strip()]
        self.app = create_app(
            study_folder, wave, trusted_hosts=trusted, secure_cookies=secure_cookies, bind_host=host, **options
        )
        proxy: dict[str, Any] = {}
        if trusted:
            proxy = {"trusted_proxy": LOOPBACK, "trusted_proxy_count": 1, "trusted_proxy_headers": {"x-forwarded-for"}}
        state = self.app.extensions["pilot.human"]
        try:
            super().__init__(
                self.app, host=host, port=port, threads=threads, ident="pilot-human", proxy=proxy, on_close=state.close
            )
        except BaseException:
            state.close()
            raise
