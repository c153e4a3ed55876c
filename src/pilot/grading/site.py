"""The blind grading site: each grader's queue and grade form, the coordinator's progress and export.

Flask routes served by waitress on the loopback address (a TLS reverse
proxy in front for graders elsewhere: ``trusted_hosts`` and
``secure_cookies``). One ``before_request`` gate admits nothing but the two
sign-in links, the signed-out page and the static files without a session,
so a route added later cannot forget it; it also refuses a Host header the
site was not told to answer (a rebinding DNS name) and checks the CSRF token
of every POST.

A session is a random id in a cookie signed with a key made fresh for the
process, and is worth nothing once it leaves the server's session store
(sign-out, idle time, lifetime, restart). The cookie also carries who signed
in (a grader id or the coordinator) and the session's CSRF token; it is
signed, so neither can be changed by the browser.

What a grader sees is what the judges saw: the bundle's brief, the rubric,
and the deliverables through the judges' renderer with the run's
identifiers withheld (:func:`pilot.view.site.judged_deliverables`). An
assignment is addressed by its opaque id and looked up with the signed-in
grader's id, so another grader's package answers 404 exactly like one that
does not exist. No page shows the arm, the model, the run, the node, the
cost, the oracle, the conversation or any other grade.
"""

from __future__ import annotations

import hmac
import io
import math
import secrets
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from flask import Flask, Response, abort, g, redirect, render_template, request, send_file, session, url_for
from itsdangerous import BadSignature, Signer
from jinja2 import StrictUndefined
from werkzeug.exceptions import HTTPException

from pilot import worker_files
from pilot.grading import store, tokens
from pilot.judges.deck_pdf import DeckRenderError, SlidesCache, is_deck, slides_name
from pilot.judges.prompt import requested_names
from pilot.judges.render import COMPLETION_RECORD, find_delivered
from pilot.judges.rubric import scenario_criteria
from pilot.portal.app import SessionLimits, SessionStore, SignInLimiter, SignInLimits
from pilot.serving import BackgroundServer, set_security_headers
from pilot.view import files
from pilot.view.site import REHEARSAL_BANNER, SIMULATED_BANNER, judged_deliverables
from pilot.view.study import StudyReader

LOOPBACK = "127.0.0.1"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
STATIC_DIR = Path(__file__).parent / "static"
STATIC_FILES = ("grading.css", "grading.js")
COOKIE_NAME = "pilot_grading"
SCORES = (0, 1, 2, 3, 4)
#: A critique longer than this is refused (a page of text is a few thousand characters).
MAX_CRITIQUE_CHARS = 20_000
#: Largest request body read: every critique at its limit, with room to spare.
MAX_BODY_BYTES = 1024 * 1024
#: Active seconds one page view may add at most, however long the page stayed open.
MAX_ACTIVE_S = 4 * 3600.0
#: Failed sign-ins per client address: ten a minute, then a minute's wait (429).
SIGN_IN_LIMITS = SignInLimits(max_failures=10, window_s=60.0, lockout_s=60.0)
#: POSTs per session: a minute's worth of clicking, far above what a person grading does.
POST_LIMITS = SignInLimits(max_failures=30, window_s=60.0, lockout_s=30.0)
#: Grading a package takes 20 to 40 minutes with pauses; a working day bounds a session.
SESSION_LIMITS = SessionLimits(lifetime_s=12 * 3600.0, idle_s=2 * 3600.0)
#: Shown on every grader's page (protocol/human/evaluation.md, "What graders see and do").
INSTRUCTIONS = (
    "Grade this package as a demanding manager in your occupation would. Give every criterion an integer from 0 to 4 "
    "(the anchors describe 0, 2 and 4; use 1 and 3 between them) and write, for each criterion, a short critique that "
    "says what earned or lost the score. Then say whether you would accept the package as it stands or send it back. "
    "Judge substance, correctness and fitness for use, not length. You may save a draft and come back; once you "
    "submit, the grade is final. Do not discuss the packages with other graders."
)

# Endpoints reached without a session; every other one needs the role it is listed under.
_OPEN = {"grader_sign_in", "coordinator_sign_in", "signed_out", "asset", "favicon"}
_GRADER = {"queue", "grade", "grade_post", "grade_file"}
_COORDINATOR = {"coordinator", "export"}
_NOT_SIGNED_IN = (
    "You are signed out, or your session has ended. To sign in, open your personal sign-in link again "
    "(the coordinator sent it to you)."
)


@dataclass
class Draft:
    """What the grade form holds: stored values, or what the grader typed (kept when a save is refused)."""

    scores: dict[str, int | None]
    critiques: dict[str, str]
    accept: bool | None
    errors: list[str] = field(default_factory=list)


@dataclass
class SiteState:
    """What the application keeps between requests (``app.extensions["pilot.grading"]``); ``close`` releases the
    store."""

    study: store.Store
    lock: threading.Lock

    @contextmanager
    def db(self) -> Iterator[Any]:
        # One connection for the process, one request at a time on it: a grade's transaction must not interleave.
        with self.lock:
            yield self.study.conn

    def close(self) -> None:
        with self.lock:
            self.study.close()


@lru_cache(maxsize=64)
def _scenario(sid: str) -> Any:
    from pilot.scenarios import load_scenario

    return load_scenario(sid)


def host_name(header: str | None) -> str:
    """The name in a Host header, without the port (``[::1]:8766`` gives ``::1``)."""
    host = (header or "").strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0]


def allowed_hosts(bind_host: str, trusted_hosts: Iterable[str] = ()) -> frozenset[str]:
    """Host names the site answers: the bound address (``localhost`` too on loopback) and the trusted ones."""
    names = {bind_host.lower()} | {h.strip().lower() for h in trusted_hosts if h.strip()}
    if bind_host == LOOPBACK:
        names.add("localhost")
    return frozenset(names)


def read_form(form: Mapping[str, str], criteria: Iterable[Any]) -> Draft:
    """The grade form's fields as a draft, every fault named (values kept as typed)."""
    draft = Draft({}, {}, None)
    for c in criteria:
        raw = (form.get(f"score-{c.id}") or "").strip()
        score = None
        if raw:
            if raw.isdigit() and int(raw) in SCORES:
                score = int(raw)
            else:
                draft.errors.append(f"{c.id}: the score must be a whole number from 0 to 4, not {raw[:20]!r}")
        draft.scores[c.id] = score
        critique = (form.get(f"critique-{c.id}") or "").replace("\r\n", "\n")
        if len(critique) > MAX_CRITIQUE_CHARS:
            draft.errors.append(
                f"{c.id}: the critique has {len(critique):,} characters; at most {MAX_CRITIQUE_CHARS:,} are kept"
            )
        draft.critiques[c.id] = critique
    accept = form.get("accept") or ""
    if accept not in ("", "yes", "no"):
        draft.errors.append("the acceptance answer must be yes or no")
    draft.accept = {"yes": True, "no": False}.get(accept)
    return draft


def create_app(
    study_folder: Path,
    wave: str,
    *,
    trusted_hosts: Iterable[str] = (),
    secure_cookies: bool = False,
    bind_host: str = LOOPBACK,
    sign_in_limits: SignInLimits = SIGN_IN_LIMITS,
    post_limits: SignInLimits = POST_LIMITS,
    session_limits: SessionLimits = SESSION_LIMITS,
) -> Flask:
    """The grading site of wave ``wave`` of the study in ``study_folder`` (refused if the wave does not exist).

    ``trusted_hosts``: Host names answered besides ``bind_host`` (a reverse
    proxy's public name); ``secure_cookies``: mark the cookie ``Secure``
    (the proxy terminates TLS).
    """
    folder = Path(study_folder)
    reader = StudyReader(folder)
    study = store.connect(folder)
    try:
        info = store.wave(study.conn, wave)
    except BaseException:
        study.close()
        raise
    state = SiteState(study, threading.Lock())
    app = Flask(__name__, static_folder=None)
    app.extensions["pilot.grading"] = state
    # A delivered deck's slides, rendered on request outside the study folder for as long as the site runs.
    slides_dir = tempfile.TemporaryDirectory(prefix="pilot-grading-slides-")
    app.extensions["pilot.grading.slides"] = slides_dir
    slides_cache = SlidesCache(Path(slides_dir.name))
    app.jinja_env.undefined = StrictUndefined
    app.jinja_env.tests["deck"] = is_deck
    app.config.update(
        # A key per process: a cookie from an earlier run of the site does not verify.
        SECRET_KEY=secrets.token_bytes(32),
        SESSION_COOKIE_NAME=COOKIE_NAME,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=bool(secure_cookies),
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        MAX_FORM_MEMORY_SIZE=MAX_BODY_BYTES,
    )
    hosts = allowed_hosts(bind_host, trusted_hosts)
    sessions = SessionStore(session_limits)
    sign_ins = SignInLimiter(sign_in_limits)
    # The portal's limiter counts events per key and locks a key that has too many; here every POST is an event.
    posts = SignInLimiter(post_limits)
    page_signer = Signer(app.config["SECRET_KEY"], salt="pilot-grading-page")
    label = reader.label()
    banner = {"SIMULATED": SIMULATED_BANNER, "REHEARSAL": REHEARSAL_BANNER}.get(label, "")

    # ------------------------------------------------------------------ helpers
    def page(template: str, code: int = 200, **context: Any) -> Response:
        return app.make_response((render_template(template, **context), code))

    def refuse(status: int, title: str, message: str, **headers: str) -> Response:
        resp = page("message.html", status, title=title, message=message)
        resp.headers.update(headers)
        return resp

    def client_key() -> str:
        return request.remote_addr or "unknown"

    def open_session(role: str, grader_id: str | None) -> None:
        sessions.close(session.get("sid"))  # a sign-in always starts a new session
        session.clear()
        session.update(sid=sessions.open(), role=role, grader=grader_id, csrf=secrets.token_urlsafe(32))

    def signed_in_to(target: str) -> Response:
        """After a sign-in: a redirect, or a page that moves on by itself when the link was followed from another site.

        A browser does not send a SameSite=Strict cookie on a navigation another
        site started (a link in webmail), redirects included; the page's own
        refresh is a navigation of this site, so the cookie goes with it.
        """
        if request.headers.get("Sec-Fetch-Site") == "cross-site":
            return page("message.html", title="Signed in", message="You are signed in.", refresh=target)
        return redirect(target, code=303)

    def my_queue() -> list[Any]:
        if "queue" not in g:
            with state.db() as conn:
                g.queue = store.queue(conn, wave, g.grader)
        return g.queue

    def my_assignment(assignment_id: str) -> Any:
        with state.db() as conn:
            row = store.assignment(conn, wave, g.grader, assignment_id)
        if row is None:
            abort(404, description="There is no such package in your queue.")
        return row

    def page_token(assignment_id: str, served: float) -> str:
        return page_signer.sign(f"{assignment_id}:{int(served)}").decode("ascii")

    def served_at(token: str, assignment_id: str) -> float | None:
        """When the page that posted was served, if its token is this assignment's and genuine."""
        try:
            value = page_signer.unsign(token.encode("ascii", "replace")).decode("ascii")
        except (BadSignature, UnicodeError):
            return None
        aid, _, stamp = value.rpartition(":")
        return float(stamp) if aid == assignment_id and stamp.isdigit() else None

    def active_seconds(raw: str | None, served: float | None) -> float:
        """The page's own count of active seconds, never more than the page has been open (nor than a cap)."""
        try:
            value = float(raw or 0)
        except ValueError:
            return 0.0
        if not math.isfinite(value) or value < 0 or served is None:
            return 0.0
        return min(value, max(0.0, time.time() - served), MAX_ACTIVE_S)

    def stored_draft(row: Any) -> Draft:
        with state.db() as conn:
            saved = store.scores(conn, wave, row["assignment_id"])
        criteria = [c.id for c in scenario_criteria(row["scenario"])]
        return Draft(
            {c: saved.get(c, (None, ""))[0] for c in criteria},
            {c: saved.get(c, (None, ""))[1] for c in criteria},
            None if row["accept"] is None else bool(row["accept"]),
        )

    def offered_files(data: dict[str, Any]) -> dict[str, files.OutputFile]:
        """The files a grader may download: those that answer a requested deliverable, as the judges' renderer finds
        them.

        Never the completion record (the page shows it as the judges saw it,
        without the substitutions' reasons, which describe the worker's
        environment) and never a file the brief did not ask for.
        """
        final = data["final"]
        if final is None or not data["run"]:
            return {}
        outputs = final["files"].outputs
        answering = {
            p.name
            for name in requested_names(data["scenario"])
            if name != COMPLETION_RECORD
            for p in find_delivered(name, outputs)[1]
        }
        return {f.name: f for f in files.output_files(outputs, reader.folder) if f.name in answering}

    def grade_page(
        row: Any, draft: Draft, *, code: int = 200, notice: str = "", served: float | None = None, active: float = 0.0
    ) -> Response:
        data = reader.run(row["run_id"])
        scenario = data["scenario"]
        judged = judged_deliverables(reader, data)
        downloads = list(offered_files(data).values())
        queue = my_queue()
        return page(
            "grade.html",
            code,
            title=f"Package {row['position']} of {len(queue)}",
            assignment_id=row["assignment_id"],
            scenario_title=scenario.title,
            brief=scenario.brief_path.read_text(encoding="utf-8"),
            criteria=scenario_criteria(scenario.id),
            judged=judged,
            downloads=downloads,
            draft=draft,
            scores=SCORES,
            status=row["status"],
            readonly=row["status"] == "submitted",
            submitted_at=row["submitted_at"],
            saved_at=row["saved_at"],
            notice=notice,
            instructions=INSTRUCTIONS,
            max_critique=MAX_CRITIQUE_CHARS,
            page_token=page_token(row["assignment_id"], time.time() if served is None else served),
            active=f"{active:.0f}",
        )

    def grader_progress() -> str:
        queue = my_queue()
        done = sum(1 for r in queue if r["status"] == "submitted")
        return f"{done} of {len(queue)} packages submitted"

    def wave_progress() -> str:
        with state.db() as conn:
            done, total = conn.execute(
                "SELECT COALESCE(SUM(status = 'submitted'), 0), COUNT(*) FROM grading_assignments WHERE wave = ?",
                (wave,),
            ).fetchone()
        return f"{done} of {total} assignments submitted"

    @app.context_processor
    def _common() -> dict[str, Any]:
        role = g.get("role")
        progress = grader_progress() if role == "grader" else wave_progress() if role == "coordinator" else ""
        return {
            "wave": wave,
            "banner": banner,
            "role": role,
            "progress": progress,
            "csrf": session.get("csrf", "") if role else "",
        }

    # ------------------------------------------------------------------ the gate
    @app.before_request
    def gate() -> Response | None:
        g.role = None
        if request.method not in ("GET", "HEAD", "POST"):
            abort(405)
        if host_name(request.host) not in hosts:
            abort(403, description="This site does not answer that host name.")
        if request.endpoint in _OPEN or request.endpoint is None:
            return None  # sign-in pages, static files, and 404 for unknown paths
        if not sessions.touch(session.get("sid")):
            if session:
                session.clear()  # drop the stale cookie (never one the browser did not send)
            return refuse(403, "Not signed in", _NOT_SIGNED_IN)
        role = session.get("role")
        if request.endpoint in _GRADER and role != "grader":
            abort(403, description="The coordinator has no grading queue; this page is for graders.")
        if request.endpoint in _COORDINATOR and role != "coordinator":
            abort(403, description="This page is the coordinator's.")
        g.role, g.grader = role, session.get("grader")
        if request.method == "POST":
            sent, expected = request.form.get("csrf", ""), session.get("csrf", "")
            if not expected or not hmac.compare_digest(sent.encode("utf-8", "replace"), expected.encode("utf-8")):
                abort(403, description="The form's security token is missing or wrong. Reload the page and try again.")
            sid = session["sid"]
            wait = posts.retry_after(sid)
            if wait is not None:
                return refuse(
                    429,
                    "Too many requests",
                    f"Too many requests in a short time; wait {int(wait) + 1} seconds "
                    "and try again (use your browser's Back button: nothing you typed is lost there).",
                    **{"Retry-After": str(int(wait) + 1)},
                )
            posts.failed(sid)
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        return set_security_headers(resp, CSP)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        return refuse(status, exc.name, exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        # Never the exception's text: a message about a run would name it (and with it the arm).
        app.logger.exception("unhandled error on %s %s", request.method, request.path)
        return refuse(
            500,
            "Something went wrong",
            "This page cannot be shown. Tell the coordinator which package and "
            "what you did; nothing you submitted before is lost.",
        )

    # ------------------------------------------------------------------ sign-in and out
    def too_many_sign_ins(key: str) -> Response | None:
        """429 while this client's failed sign-ins are over the limit."""
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
    def grader_sign_in(token: str) -> Response:
        key = client_key()
        if (throttled := too_many_sign_ins(key)) is not None:
            return throttled
        grader = None
        if tokens.well_formed(token):
            with state.db() as conn:
                grader = store.grader_by_token_hash(conn, wave, tokens.token_hash(token))
        with state.db() as conn:
            store.log_event(
                conn, wave, "signin" if grader else "signin_refused", grader_id=grader["grader_id"] if grader else None
            )
        if grader is None:
            sign_ins.failed(key)
            return refuse(
                403,
                "Sign-in refused",
                "This sign-in link is not valid. Check that you opened the whole link "
                "as the coordinator sent it, or ask the coordinator for yours.",
            )
        sign_ins.succeeded(key)
        open_session("grader", grader["grader_id"])
        return signed_in_to(url_for("queue"))

    @app.get("/coordinator/signin/<token>")
    def coordinator_sign_in(token: str) -> Response:
        key = client_key()
        if (throttled := too_many_sign_ins(key)) is not None:
            return throttled
        with state.db() as conn:
            ok = tokens.well_formed(token) and tokens.same_hash(
                tokens.token_hash(token), store.coordinator_hash(conn, wave)
            )
            store.log_event(conn, wave, "signin" if ok else "signin_refused", detail={"role": "coordinator"})
        if not ok:
            sign_ins.failed(key)
            return refuse(403, "Sign-in refused", "This sign-in link is not valid.")
        sign_ins.succeeded(key)
        open_session("coordinator", None)
        return signed_in_to(url_for("coordinator"))

    @app.post("/signout")
    def sign_out() -> Response:
        with state.db() as conn:
            store.log_event(
                conn, wave, "signout", grader_id=g.grader, detail=None if g.grader else {"role": "coordinator"}
            )
        sessions.close(session.get("sid"))
        session.clear()
        return redirect(url_for("signed_out"), code=303)

    @app.get("/signed-out")
    def signed_out() -> Response:
        return page(
            "message.html",
            title="Signed out",
            message="You are signed out. To sign in again, open your personal sign-in link.",
        )

    # ------------------------------------------------------------------ the grader's pages
    @app.get("/")
    def home() -> Response:
        return redirect(url_for("coordinator" if g.role == "coordinator" else "queue"), code=303)

    @app.get("/queue")
    def queue() -> Response:
        rows = [
            {
                "assignment_id": r["assignment_id"],
                "position": r["position"],
                "status": r["status"],
                "title": _scenario(r["scenario"]).title,
            }
            for r in my_queue()
        ]
        return page("queue.html", title="Your packages", rows=rows, total=len(rows), instructions=INSTRUCTIONS)

    @app.get("/grade/<assignment_id>")
    def grade(assignment_id: str) -> Response:
        row = my_assignment(assignment_id)
        if request.method == "GET":
            with state.db() as conn:
                store.log_event(conn, wave, "open_package", grader_id=g.grader, assignment_id=assignment_id)
        notice = {
            "saved": "Draft saved. You can come back to it at any time.",
            "submitted": "Submitted. Thank you: this grade is final.",
        }.get(request.args.get("done", ""), "")
        return grade_page(row, stored_draft(row), notice=notice)

    @app.post("/grade/<assignment_id>")
    def grade_post(assignment_id: str) -> Response:
        row = my_assignment(assignment_id)
        criteria = scenario_criteria(row["scenario"])
        action = request.form.get("action", "")
        served = served_at(request.form.get("page", ""), assignment_id)
        active = active_seconds(request.form.get("active_s"), served)
        draft = read_form(request.form, criteria)
        if action not in ("save", "submit"):
            draft.errors.append("choose Save draft or Submit")
        if not draft.errors:
            try:
                with state.db() as conn:
                    store.save_grade(
                        conn,
                        wave,
                        g.grader,
                        assignment_id,
                        scores_by_criterion={c.id: (draft.scores[c.id], draft.critiques[c.id]) for c in criteria},
                        accept=draft.accept,
                        active_s=active,
                        submit=action == "submit",
                    )
            except store.GradingError as exc:
                draft.errors.append(str(exc))
            else:
                return redirect(
                    url_for("grade", assignment_id=assignment_id, done="submitted" if action == "submit" else "saved"),
                    code=303,
                )
        row = my_assignment(assignment_id)  # the status may have changed meanwhile (another tab submitted)
        if row["status"] == "submitted":
            stored = stored_draft(row)
            stored.errors = draft.errors
            return grade_page(row, stored, code=409)
        # Refused: the page again with what was typed, and the active time carried to the next try.
        return grade_page(row, draft, code=400, served=served, active=active)

    @app.get("/grade/<assignment_id>/file/<name>")
    def grade_file(assignment_id: str, name: str) -> Response:
        row = my_assignment(assignment_id)
        offered = offered_files(reader.run(row["run_id"]))
        if name not in offered:
            abort(404, description="This package has no such file.")
        # The bytes the bounded reader read (beneath the workspace, no link followed), never a path the server opens.
        try:
            data = offered[name].read_bytes()
        except worker_files.Refused as exc:
            return refuse(422, "File not offered", f"{name} {exc.reason}. Tell the coordinator.")
        with state.db() as conn:
            store.log_event(
                conn, wave, "open_file", grader_id=g.grader, assignment_id=assignment_id, detail={"file": name}
            )
        return send_file(
            io.BytesIO(data), mimetype="application/octet-stream", as_attachment=True, download_name=name, max_age=0
        )

    @app.get("/grade/<assignment_id>/slides/<name>")
    def grade_slides(assignment_id: str, name: str) -> Response:
        row = my_assignment(assignment_id)
        offered = offered_files(reader.run(row["run_id"]))
        if name not in offered or not is_deck(name):
            abort(404, description="This package has no such deck.")
        try:
            with worker_files.copies_scope():
                pdf = slides_cache.pdf(offered[name].private_copy())
        except worker_files.Refused as exc:
            return refuse(
                422, "Slides not rendered", f"{name} {exc.reason}. Download the deck itself, or tell the coordinator."
            )
        except DeckRenderError as exc:
            # The reason names the run's folder: it goes to the log, the grader reads only that the slides failed.
            with state.db() as conn:
                store.log_event(
                    conn,
                    wave,
                    "slides_failed",
                    grader_id=g.grader,
                    assignment_id=assignment_id,
                    detail={"file": name, "reason": str(exc)},
                )
            return refuse(
                422,
                "Slides not rendered",
                f"The slides of {name} could not be rendered. Download the deck itself, and tell the coordinator.",
            )
        with state.db() as conn:
            store.log_event(
                conn,
                wave,
                "open_file",
                grader_id=g.grader,
                assignment_id=assignment_id,
                detail={"file": name, "as": "slides"},
            )
        return send_file(
            pdf, mimetype="application/pdf", as_attachment=True, download_name=slides_name(name), max_age=0
        )

    # ------------------------------------------------------------------ the coordinator's pages
    @app.get("/coordinator")
    def coordinator() -> Response:
        with state.db() as conn:
            tables = store.progress(conn, wave)
        return page(
            "coordinator.html",
            title="Progress",
            source=info.source,
            per_package=info.per_package,
            graders=tables["grader"].to_dict("records"),
            strata=tables["stratum"].to_dict("records"),
        )

    @app.get("/coordinator/export.csv")
    def export() -> Response:
        with state.db() as conn:
            frame = store.grades_frame(conn, wave)
            store.log_event(conn, wave, "export", detail={"rows": len(frame)})
        return Response(
            store.export_csv(frame),
            mimetype="text/csv",
            headers={"Content-Disposition": f'attachment; filename="grades-{wave}.csv"'},
        )

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


class GradingServer(BackgroundServer):
    """The grading site served by waitress (``port`` 0: any free port); ``start`` (or ``with``) serves in a thread."""

    def __init__(
        self,
        study_folder: Path,
        wave: str,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        threads: int = 4,
        trusted_hosts: Iterable[str] = (),
        secure_cookies: bool = False,
        **limits: Any,
    ) -> None:
        trusted = [h for h in trusted_hosts if h.strip()]
        self.app = create_app(
            study_folder, wave, trusted_hosts=trusted, secure_cookies=secure_cookies, bind_host=host, **limits
        )
        # Behind the reverse proxy every request comes from it: the client's address (which sign-in limits count)
        # is the last one the proxy adds to X-Forwarded-For.
        proxy: dict[str, Any] = {}
        if trusted:
            proxy = {"trusted_proxy": LOOPBACK, "trusted_proxy_count": 1, "trusted_proxy_headers": {"x-forwarded-for"}}
        state = self.app.extensions["pilot.grading"]
        try:
            super().__init__(
                self.app,
                host=host,
                port=port,
                threads=threads,
                ident="pilot-grading",
                proxy=proxy,
                on_close=state.close,
            )
        except BaseException:
            state.close()
            raise
