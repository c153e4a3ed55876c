"""The blind grading site: each grader's queue and grade page, the coordinator's progress, preview and export.

Flask routes served by waitress on the loopback address (a TLS reverse
proxy in front for graders elsewhere: ``trusted_hosts`` and
``secure_cookies``). One ``before_request`` gate admits nothing but the two
sign-in links, the signed-out page and the static files without a session,
so a route added later cannot forget it; it also refuses a Host header the
site was not told to answer (a rebinding DNS name) and checks the CSRF token
of every POST.

Sessions survive a restart of the server (:mod:`pilot.web_sessions`): the
cookie, signed with a secret kept with the wave (``site.secret``, rotated by
``pilot grading secret rotate``), carries a random id; the session itself
(who signed in, its CSRF token, when it opened and was last used) is a row in
the wave's ``sessions.sqlite``, and the cookie lasts the working day, across
browser restarts. A revoked or reissued sign-in link closes its grader's
sessions at once.

What a grader sees is what the judges saw: the bundle's brief, the rubric,
the same grading rules as the judges' prompt
(:data:`pilot.judges.prompt.GRADING_RULES`), and the deliverables through
the judges' renderer with the run's identifiers withheld
(:func:`pilot.view.site.judged_deliverables`), laid out as a document and
tables; the rendering is computed once per package and kept by the digest of
the bytes it was rendered from. Downloads are the delivered files made
neutral (:mod:`pilot.grading.downloads`). An assignment is addressed by its
opaque id and looked up with the signed-in grader's id, so another grader's
package answers 404 exactly like one that does not exist. No page shows the
arm, the model, the run, the node, the cost, the oracle, the conversation or
any other grade.

The grade page saves itself as the grader types (``/autosave``), warns
before leaving with unsaved changes, and saves on the revision it was given,
so a second tab on the same package is refused before it overwrites the
first one's work (:class:`pilot.grading.store.StaleDraft`). Submitting checks
the whole form (every score, every critique of
:data:`pilot.grading.store.MIN_CRITIQUE_CHARS`, the decision) before it asks
for the final confirmation, and the store checks again.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import math
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from flask import Flask, Response, abort, g, jsonify, redirect, render_template, request, send_file, session, url_for
from itsdangerous import BadSignature, Signer
from jinja2 import StrictUndefined
from werkzeug.exceptions import HTTPException

from pilot import web_sessions, worker_files
from pilot.grading import downloads, page, store, tokens
from pilot.grading.plan import SECRET_FILE, SESSIONS_FILE, grading_dir
from pilot.judges.deck_pdf import DeckRenderError, SlidesCache, is_deck, slides_name
from pilot.judges.prompt import GRADING_RULES, requested_names
from pilot.judges.recalculated import Recalculated
from pilot.judges.render import COMPLETION_RECORD, find_delivered
from pilot.judges.rubric import scenario_criteria
from pilot.portal.app import SignInLimiter, SignInLimits
from pilot.serving import BackgroundServer, set_security_headers, use_site_layout
from pilot.view import files
from pilot.view.site import REHEARSAL_BANNER, SIMULATED_BANNER, JudgedPackage, judged_deliverables
from pilot.view.study import StudyReader
from pilot.web_sessions import SessionLimits

LOOPBACK = "127.0.0.1"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; connect-src 'self'; frame-src 'self'"
)
#: A delivered PDF (or a deck's slides) shown inline in the grade page's frame: nothing may run in it.
VIEW_CSP = "default-src 'none'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
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
#: POSTs per session: the page saves itself at most every few seconds while a grader types; far above that is a
#: script, not a person.
POST_LIMITS = SignInLimits(max_failures=120, window_s=60.0, lockout_s=30.0)
#: Grading a package takes 20 to 40 minutes with pauses; a working day bounds a session.
SESSION_LIMITS = SessionLimits(lifetime_s=12 * 3600.0, idle_s=3 * 3600.0)
#: Rendered packages kept in memory (by the digest of what they were rendered from).
RENDER_CACHE_SIZE = 256
#: Shown on every grader's page (protocol/human/evaluation.md, "What graders see and do"); the rules themselves are
#: the judges', word for word (GRADING_RULES).
INSTRUCTIONS = (
    "Grade this package as a demanding manager in your occupation would. Give every criterion an integer from 0 to 4 "
    "(the anchors describe 0, 2 and 4; use 1 and 3 between them) and write, for each criterion, a short critique that "
    "says what earned or lost the score. Then say whether you would accept the package as it stands or send it back. "
    "Judge substance, correctness and fitness for use, not length. You may save a draft and come back; once you "
    "submit, the grade is final. Do not discuss the packages with other graders."
)

# Endpoints reached without a session; every other one needs the role it is listed under.
_OPEN = {"grader_sign_in", "coordinator_sign_in", "signed_out", "asset", "favicon"}
_GRADER = {"queue", "grade", "grade_post", "grade_autosave", "grade_file", "grade_view", "grade_slides", "file_time"}
_COORDINATOR = {"coordinator", "export", "preview", "preview_view"}
_NOT_SIGNED_IN = (
    "You are signed out, or your session has ended. To sign in, open your personal sign-in link again "
    "(the coordinator sent it to you)."
)


def secret_file(study_folder: Path, wave: str) -> Path:
    """The wave's site secret (``pilot grading secret rotate`` replaces it)."""
    return grading_dir(study_folder, wave) / SECRET_FILE


def sessions_file(study_folder: Path, wave: str) -> Path:
    return grading_dir(study_folder, wave) / SESSIONS_FILE


def wave_sessions(study_folder: Path, wave: str, limits: SessionLimits = SESSION_LIMITS) -> web_sessions.SessionStore:
    """The wave's open sessions (the site's, and the commands' that end them)."""
    return web_sessions.SessionStore(sessions_file(study_folder, wave), limits)


@dataclass
class Draft:
    """What the grade form holds: stored values, or what the grader typed (kept when a save is refused)."""

    scores: dict[str, int | None]
    critiques: dict[str, str]
    accept: bool | None
    errors: list[str] = field(default_factory=list)


@dataclass
class SiteState:
    """What the application keeps between requests (``app.extensions["pilot.grading"]``); ``close`` releases it."""

    study: store.Store
    lock: threading.Lock
    sessions: web_sessions.SessionStore

    @contextmanager
    def db(self) -> Iterator[Any]:
        # One connection for the process, one request at a time on it: a grade's transaction must not interleave.
        with self.lock:
            yield self.study.conn

    def close(self) -> None:
        with self.lock:
            self.study.close()
        self.sessions.close_store()


class RenderCache:
    """Rendered packages by the digest of every byte they were rendered from (delivered files, kept copies)."""

    def __init__(self, size: int = RENDER_CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[str, JudgedPackage] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: str, make: Callable[[], JudgedPackage]) -> JudgedPackage:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
        value = make()
        with self._lock:
            self.misses += 1
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value


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
        secret = web_sessions.load_secret(secret_file(folder, wave))
        sessions = wave_sessions(folder, wave, session_limits)
    except BaseException:
        study.close()
        raise
    state = SiteState(study, threading.Lock(), sessions)
    app = Flask(__name__, static_folder=None)
    app.extensions["pilot.grading"] = state
    use_site_layout(app)
    # A delivered deck's slides, rendered on request outside the study folder for as long as the site runs.
    slides_dir = tempfile.TemporaryDirectory(prefix="pilot-grading-slides-")
    app.extensions["pilot.grading.slides"] = slides_dir
    slides_cache = SlidesCache(Path(slides_dir.name))
    renders = RenderCache()
    app.extensions["pilot.grading.renders"] = renders
    app.jinja_env.undefined = StrictUndefined
    app.jinja_env.tests["deck"] = is_deck
    app.jinja_env.tests["pdf"] = lambda name: str(name).lower().endswith(".pdf")
    app.config.update(
        # The wave's own key: a cookie from before a restart still verifies; one from before a rotation does not.
        SECRET_KEY=secret,
        SESSION_COOKIE_NAME=COOKIE_NAME,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=bool(secure_cookies),
        # The cookie outlives the browser window for the session's lifetime (a working day), as the session does.
        PERMANENT_SESSION_LIFETIME=int(session_limits.lifetime_s),
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        MAX_FORM_MEMORY_SIZE=MAX_BODY_BYTES,
    )
    hosts = allowed_hosts(bind_host, trusted_hosts)
    sign_ins = SignInLimiter(sign_in_limits)
    # The portal's limiter counts events per key and locks a key that has too many; here every POST is an event.
    posts = SignInLimiter(post_limits)
    signers = {"page": Signer(secret, salt="pilot-grading-page")}
    secret_path = secret_file(folder, wave)
    secret_stamp = {"mtime": secret_path.stat().st_mtime_ns}

    def follow_rotation() -> None:
        """A secret rotated by ``pilot grading secret rotate`` while the site runs is taken up at the next request."""
        try:
            mtime = secret_path.stat().st_mtime_ns
        except OSError:
            return
        if mtime != secret_stamp["mtime"]:
            fresh = web_sessions.load_secret(secret_path)
            app.secret_key = fresh
            signers["page"] = Signer(fresh, salt="pilot-grading-page")
            secret_stamp["mtime"] = mtime

    label = reader.label()
    banner = {"SIMULATED": SIMULATED_BANNER, "REHEARSAL": REHEARSAL_BANNER}.get(label, "")

    # ------------------------------------------------------------------ helpers
    def view(template: str, code: int = 200, **context: Any) -> Response:
        return app.make_response((render_template(template, **context), code))

    def refuse(status: int, title: str, message: str, **headers: str) -> Response:
        resp = view("message.html", status, title=title, message=message)
        resp.headers.update(headers)
        return resp

    def wants_json() -> bool:
        return request.endpoint in ("grade_autosave", "file_time")

    def client_key() -> str:
        return request.remote_addr or "unknown"

    def open_session(role: str, grader_id: str | None) -> None:
        sessions.close(session.get("sid"))  # a sign-in always starts a new session
        session.clear()
        sid, _ = sessions.open(role, grader_id)
        session.permanent = True
        session["sid"] = sid

    def signed_in_to(target: str) -> Response:
        """After a sign-in: a redirect, or a page that moves on by itself when the link was followed from another site.

        A browser does not send a SameSite=Strict cookie on a navigation another
        site started (a link in webmail), redirects included; the page's own
        refresh is a navigation of this site, so the cookie goes with it.
        """
        if request.headers.get("Sec-Fetch-Site") == "cross-site":
            return view("message.html", title="Signed in", message="You are signed in.", refresh=target)
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

    def page_token(assignment_id: str, served: float, recorded: float = 0.0) -> str:
        """When the page was served and how many of its active seconds are recorded, signed."""
        return signers["page"].sign(f"{assignment_id}:{int(served)}:{recorded:.0f}").decode("ascii")

    def read_page_token(token: str, assignment_id: str) -> tuple[float, float] | None:
        """(served, recorded) of a genuine token of this assignment's page, else None."""
        try:
            value = signers["page"].unsign(token.encode("ascii", "replace")).decode("ascii")
        except (BadSignature, UnicodeError):
            return None
        parts = value.split(":")
        if len(parts) != 3 or parts[0] != assignment_id or not parts[1].isdigit() or not parts[2].isdigit():
            return None
        return float(parts[1]), float(parts[2])

    def active_delta(raw: str | None, token: tuple[float, float] | None) -> tuple[float, float]:
        """(seconds to add, the page's new recorded total) from the page's own count since it was served.

        The count is capped at the time since the page was served (and at :data:`MAX_ACTIVE_S`); what the page's
        token says is already recorded is not added again.
        """
        if token is None:
            return 0.0, 0.0
        served, recorded = token
        try:
            value = float(raw or 0)
        except ValueError:
            return 0.0, recorded
        if not math.isfinite(value) or value < 0:
            return 0.0, recorded
        total = min(value, max(0.0, time.time() - served), MAX_ACTIVE_S)
        return max(0.0, total - recorded), max(total, recorded)

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

    def withheld_of(data: dict[str, Any]) -> list[str]:
        final = data["final"] or {}
        return [w for w in (data["run_id"], final.get("node") or "", reader.name) if w]

    def rendered(data: dict[str, Any]) -> JudgedPackage:
        """The package as the judges received it, rendered once per set of bytes it is rendered from."""
        final = data["final"]
        if final is None or data["run"] is None:
            return judged_deliverables(reader, data)
        rf = final["files"]
        digest = hashlib.sha256(data["run_id"].encode())
        try:
            with worker_files.Folder(rf.outputs) as outputs:
                for entry in sorted(outputs.listdir(""), key=lambda e: e.name):
                    digest.update(entry.name.encode("utf-8", "surrogateescape") + b"\0")
                    if entry.kind == "file":
                        digest.update(outputs.sha256(entry.name, max_bytes=files.MAX_DOWNLOAD_BYTES).encode())
        except worker_files.Refused as exc:
            digest.update(f"refused:{exc.kind}".encode())
        kept = Recalculated.load(rf.folder)
        digest.update((kept.digest() if kept is not None else "none").encode())
        return renders.get(digest.hexdigest(), lambda: judged_deliverables(reader, data))

    def package_blocks(judged: JudgedPackage) -> list[tuple[Any, list[page.Block]]]:
        return [(d, page.blocks(text, flowing=d.format == "pdf")) for d, text in judged.deliverables]

    def offered_download(data: dict[str, Any], name: str) -> downloads.Offered:
        """The neutral download of the delivered file ``name`` (a workbook: its recalculated copy)."""
        offered = offered_files(data)
        if name not in offered:
            abort(404, description="This package has no such file.")
        from pilot.oracles import admission

        with worker_files.copies_scope():
            try:
                copy = offered[name].private_copy()
            except worker_files.Refused as exc:
                raise downloads.NotOffered(exc.reason) from None
            adm = admission.admit(copy, copy.parent.parent)
            if not adm.ok:
                raise downloads.NotOffered(adm.reason or "refused")
            raw = copy.read_bytes()
            recalc: bytes | None = None
            kept = Recalculated.load(data["final"]["files"].folder)
            if kept is not None:
                found = kept.find(name, hashlib.sha256(raw).hexdigest())
                path = kept.path(found) if found is not None else None
                if path is not None:
                    rc = admission.admit(path, path.parent.parent, "xlsx")
                    recalc = rc.path.read_bytes() if rc.ok and rc.path is not None else None
            return downloads.offered(name, raw, recalculated_copy=recalc, withheld=withheld_of(data))

    def grade_page(
        row: Any,
        draft: Draft,
        *,
        code: int = 200,
        notice: str = "",
        served: float | None = None,
        recorded: float = 0.0,
        active: float = 0.0,
        preview: bool = False,
    ) -> Response:
        data = reader.run(row["run_id"])
        scenario = data["scenario"]
        judged = rendered(data)
        downloads_offered = list(offered_files(data).values())
        with state.db() as conn:
            rev = store.revision(conn, wave, row["assignment_id"])[0] if not preview else 0
        position = row["position"] if not preview else None
        title = f"Preview of package {row['package_id']}" if preview else f"Package {position} of {len(my_queue())}"
        return view(
            "grade.html",
            code,
            title=title,
            preview=preview,
            assignment_id=row["assignment_id"],
            package_id=row.get("package_id", "") if isinstance(row, dict) else "",
            scenario_title=scenario.title,
            brief=page.brief_html(scenario.brief_path.read_text(encoding="utf-8")),
            criteria=scenario_criteria(scenario.id),
            judged=judged,
            blocks=package_blocks(judged),
            downloads=downloads_offered,
            draft=draft,
            scores=SCORES,
            status=row["status"],
            readonly=preview or row["status"] == "submitted",
            submitted_at=row["submitted_at"],
            saved_at=row["saved_at"],
            notice=notice,
            instructions=INSTRUCTIONS,
            rules=GRADING_RULES,
            max_critique=MAX_CRITIQUE_CHARS,
            min_critique=store.MIN_CRITIQUE_CHARS,
            page_token=page_token(row["assignment_id"], time.time() if served is None else served, recorded),
            active=f"{active:.0f}",
            revision=rev,
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
        current = g.get("session")
        return {
            "wave": wave,
            "banner": banner,
            "role": role,
            "progress": progress,
            "csrf": current.csrf if current is not None else "",
        }

    # ------------------------------------------------------------------ the gate
    @app.before_request
    def gate() -> Response | None:
        g.role = None
        g.session = None
        follow_rotation()
        if request.method not in ("GET", "HEAD", "POST"):
            abort(405)
        if host_name(request.host) not in hosts:
            abort(403, description="This site does not answer that host name.")
        if request.endpoint in _OPEN or request.endpoint is None:
            return None  # sign-in pages, static files, and 404 for unknown paths
        current = sessions.get(session.get("sid"))
        if current is None:
            if session:
                session.clear()  # drop the stale cookie (never one the browser did not send)
            if wants_json():
                return app.make_response((jsonify(error=_NOT_SIGNED_IN, kind="signed_out"), 403))
            return refuse(403, "Not signed in", _NOT_SIGNED_IN)
        role = current.role
        if request.endpoint in _GRADER and role != "grader":
            abort(403, description="The coordinator has no grading queue; this page is for graders.")
        if request.endpoint in _COORDINATOR and role != "coordinator":
            abort(403, description="This page is the coordinator's.")
        g.role, g.grader, g.session = role, current.subject, current
        if request.method == "POST":
            sent, expected = request.form.get("csrf", ""), current.csrf
            if not expected or not hmac.compare_digest(sent.encode("utf-8", "replace"), expected.encode("utf-8")):
                abort(403, description="The form's security token is missing or wrong. Reload the page and try again.")
            key = hashlib.sha256(str(session.get("sid")).encode()).hexdigest()
            wait = posts.retry_after(key)
            if wait is not None:
                message = (
                    f"Too many requests in a short time; wait {int(wait) + 1} seconds "
                    "and try again (use your browser's Back button: nothing you typed is lost there)."
                )
                if wants_json():
                    resp = app.make_response((jsonify(error=message, kind="busy"), 429))
                    resp.headers["Retry-After"] = str(int(wait) + 1)
                    return resp
                return refuse(429, "Too many requests", message, **{"Retry-After": str(int(wait) + 1)})
            posts.failed(key)
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        if request.endpoint in ("grade_view", "preview_view"):
            resp = set_security_headers(resp, VIEW_CSP)
            resp.headers["X-Frame-Options"] = "SAMEORIGIN"
            return resp
        return set_security_headers(resp, CSP)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        if wants_json():
            return app.make_response((jsonify(error=exc.description or exc.name, kind="refused"), status))
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
        open_session("coordinator", store.COORDINATOR)
        return signed_in_to(url_for("coordinator"))

    @app.post("/signout")
    def sign_out() -> Response:
        grader = g.grader if g.role == "grader" else None
        with state.db() as conn:
            store.log_event(conn, wave, "signout", grader_id=grader, detail=None if grader else {"role": "coordinator"})
        sessions.close(session.get("sid"))
        session.clear()
        return redirect(url_for("signed_out"), code=303)

    @app.get("/signed-out")
    def signed_out() -> Response:
        return view(
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
        return view(
            "queue.html",
            title="Your packages",
            rows=rows,
            total=len(rows),
            instructions=INSTRUCTIONS,
            rules=GRADING_RULES,
        )

    @app.get("/grade/<assignment_id>")
    def grade(assignment_id: str) -> Response:
        row = my_assignment(assignment_id)
        with state.db() as conn:
            store.log_event(conn, wave, "open_package", grader_id=g.grader, assignment_id=assignment_id)
        notice = {
            "saved": "Draft saved. You can come back to it at any time.",
            "submitted": "Submitted. Thank you: this grade is final.",
        }.get(request.args.get("done", ""), "")
        return grade_page(row, stored_draft(row), notice=notice)

    def save_from_form(assignment_id: str, action: str) -> tuple[Any, Draft, int | None, str, str, float]:
        """Save what the form sent; (row, draft, new revision or None when refused, saved_at, new page token, total)."""
        row = my_assignment(assignment_id)
        criteria = scenario_criteria(row["scenario"])
        token = read_page_token(request.form.get("page", ""), assignment_id)
        add, total = active_delta(request.form.get("active_s"), token)
        draft = read_form(request.form, criteria)
        if action not in ("save", "submit"):
            draft.errors.append("choose Save draft or Submit")
        base = request.form.get("revision", "")
        new_revision: int | None = None
        saved_at = ""
        if not draft.errors:
            try:
                with state.db() as conn:
                    _, new_revision = store.save_grade(
                        conn,
                        wave,
                        g.grader,
                        assignment_id,
                        scores_by_criterion={c.id: (draft.scores[c.id], draft.critiques[c.id]) for c in criteria},
                        accept=draft.accept,
                        active_s=add,
                        submit=action == "submit",
                        base_revision=int(base) if base.isdigit() else None,
                        tab=(request.form.get("tab") or "")[:64],
                    )
                    saved_at = store.revision(conn, wave, assignment_id)[2] or ""
            except store.StaleDraft as exc:
                draft.errors.append(str(exc))
                g.stale = True
            except store.GradingError as exc:
                draft.errors.append(str(exc))
        served = token[0] if token is not None else time.time()
        return row, draft, new_revision, saved_at, page_token(assignment_id, served, total), total

    @app.post("/grade/<assignment_id>")
    def grade_post(assignment_id: str) -> Response:
        action = request.form.get("action", "")
        row, draft, new_revision, _, token, total = save_from_form(assignment_id, action)
        if new_revision is not None:
            return redirect(
                url_for("grade", assignment_id=assignment_id, done="submitted" if action == "submit" else "saved"),
                code=303,
            )
        row = my_assignment(assignment_id)  # the status may have changed meanwhile (another tab submitted)
        if row["status"] == "submitted":
            stored = stored_draft(row)
            stored.errors = draft.errors
            return grade_page(row, stored, code=409)
        served = read_page_token(token, assignment_id)
        # Refused: the page again with what was typed, and the active time carried to the next try.
        return grade_page(
            row,
            draft,
            code=409 if g.get("stale") else 400,
            served=served[0] if served else None,
            recorded=total,
            active=total,
        )

    @app.post("/grade/<assignment_id>/autosave")
    def grade_autosave(assignment_id: str) -> Response:
        """The page's own saves while the grader types (and its Save and Submit buttons): JSON in, JSON out."""
        action = request.form.get("action", "save")
        row, draft, new_revision, saved_at, token, _ = save_from_form(assignment_id, action)
        if new_revision is not None:
            return jsonify(
                ok=True,
                revision=new_revision,
                saved_at=saved_at,
                page=token,
                status="submitted" if action == "submit" else "saved",
            )
        if g.get("stale"):
            return app.make_response((jsonify(ok=False, kind="stale", error=draft.errors[-1], page=token), 409))
        status = my_assignment(assignment_id)["status"]
        code = 409 if status == "submitted" else 400
        return app.make_response((jsonify(ok=False, kind="refused", errors=draft.errors, page=token), code))

    @app.post("/grade/<assignment_id>/file-time")
    def file_time(assignment_id: str) -> Response:
        """Minutes the grader says they spent with a downloaded file of this package (asked when they come back)."""
        my_assignment(assignment_id)
        name = (request.form.get("file") or "")[:200]
        try:
            minutes = float(request.form.get("minutes") or "nan")
        except ValueError:
            minutes = math.nan
        if not math.isfinite(minutes) or minutes < 0:
            return app.make_response((jsonify(ok=False, error="the minutes must be a number of 0 or more"), 400))
        with state.db() as conn:
            kept = store.add_file_time(conn, wave, g.grader, assignment_id, name, minutes * 60.0)
        return jsonify(ok=True, seconds=kept)

    def log_open(assignment_id: str | None, name: str, how: str | None) -> None:
        """A grader opened a file of their package (never logged for the coordinator's preview)."""
        if assignment_id is None:
            return
        detail = {"file": name} if how is None else {"file": name, "as": how}
        with state.db() as conn:
            store.log_event(conn, wave, "open_file", grader_id=g.grader, assignment_id=assignment_id, detail=detail)

    def download_response(assignment_id: str | None, data: dict[str, Any], name: str, *, inline: bool) -> Response:
        try:
            made = offered_download(data, name)
        except downloads.NotOffered as exc:
            return refuse(422, "File not offered", f"{name} {exc}. Tell the coordinator.")
        log_open(assignment_id, name, "inline" if inline else None)
        if inline:
            resp = send_file(io.BytesIO(made.data), mimetype="application/pdf", download_name=name, max_age=0)
            resp.headers["Content-Disposition"] = f'inline; filename="{name}"'
            return resp
        # Always a download, never shown by the browser (whatever the file says it is).
        return send_file(
            io.BytesIO(made.data),
            mimetype="application/octet-stream",
            as_attachment=True,
            download_name=name,
            max_age=0,
        )

    @app.get("/grade/<assignment_id>/file/<name>")
    def grade_file(assignment_id: str, name: str) -> Response:
        row = my_assignment(assignment_id)
        return download_response(assignment_id, reader.run(row["run_id"]), name, inline=False)

    @app.get("/grade/<assignment_id>/view/<name>")
    def grade_view(assignment_id: str, name: str) -> Response:
        """A delivered PDF shown in the page (its neutral copy), or a deck's slides."""
        row = my_assignment(assignment_id)
        data = reader.run(row["run_id"])
        if is_deck(name):
            return slides_response(assignment_id, data, name, inline=True)
        if not name.lower().endswith(".pdf"):
            abort(404, description="Only a PDF is shown in the page; download the other files.")
        return download_response(assignment_id, data, name, inline=True)

    def slides_response(assignment_id: str | None, data: dict[str, Any], name: str, *, inline: bool) -> Response:
        offered = offered_files(data)
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
                    grader_id=g.grader if assignment_id else None,
                    assignment_id=assignment_id,
                    detail={"file": name, "reason": str(exc)},
                )
            return refuse(
                422,
                "Slides not rendered",
                f"The slides of {name} could not be rendered. Download the deck itself, and tell the coordinator.",
            )
        log_open(assignment_id, name, "slides")
        neutral = downloads.neutral_pdf(pdf.read_bytes())
        resp = send_file(
            io.BytesIO(neutral),
            mimetype="application/pdf",
            as_attachment=not inline,
            download_name=slides_name(name),
            max_age=0,
        )
        if inline:
            resp.headers["Content-Disposition"] = f'inline; filename="{slides_name(name)}"'
        return resp

    @app.get("/grade/<assignment_id>/slides/<name>")
    def grade_slides(assignment_id: str, name: str) -> Response:
        row = my_assignment(assignment_id)
        return slides_response(assignment_id, reader.run(row["run_id"]), name, inline=False)

    # ------------------------------------------------------------------ the coordinator's pages
    def package_row(package_id: str) -> dict[str, Any]:
        with state.db() as conn:
            row = conn.execute(
                "SELECT package_id, run_id, scenario FROM grading_packages WHERE wave = ? AND package_id = ?",
                (wave, package_id),
            ).fetchone()
        if row is None:
            abort(404, description="There is no such package in this wave.")
        return dict(row)

    @app.get("/coordinator")
    def coordinator() -> Response:
        with state.db() as conn:
            tables = store.progress(conn, wave)
            packages = store.packages(conn, wave)
        return view(
            "coordinator.html",
            title="Progress",
            source=info.source,
            per_package=info.per_package,
            graders=tables["grader"].to_dict("records"),
            strata=tables["stratum"].to_dict("records"),
            packages=packages,
            min_critique=store.MIN_CRITIQUE_CHARS,
        )

    @app.get("/coordinator/preview/<package_id>")
    def preview(package_id: str) -> Response:
        """A package exactly as its graders see it: read-only, no grade, nothing a grader would not see."""
        pkg = package_row(package_id)
        row = {
            "assignment_id": package_id,
            "package_id": package_id,
            "run_id": pkg["run_id"],
            "scenario": pkg["scenario"],
            "status": "preview",
            "submitted_at": None,
            "saved_at": None,
            "accept": None,
        }
        criteria = [c.id for c in scenario_criteria(pkg["scenario"])]
        empty = Draft(dict.fromkeys(criteria), dict.fromkeys(criteria, ""), None)
        return grade_page(row, empty, preview=True)

    @app.get("/coordinator/preview/<package_id>/view/<name>")
    def preview_view(package_id: str, name: str) -> Response:
        data = reader.run(package_row(package_id)["run_id"])
        if is_deck(name):
            return slides_response(None, data, name, inline=True)
        if not name.lower().endswith(".pdf"):
            abort(404, description="Only a PDF is shown in the page.")
        return download_response(None, data, name, inline=True)

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
