"""``pilot view``'s web application: Flask routes over :mod:`pilot.view.site`, served by waitress on 127.0.0.1.

Only GET and HEAD are answered. Requests whose Host header is not the
loopback address the server bound are refused, so a web page elsewhere
cannot reach the viewer through a rebinding DNS name. Downloads are looked
up by name in the listing of the attempt's ``outputs/`` folder (regular
files only), so no path in a URL ever reaches the file system; they are
read by the bounded reader (:mod:`pilot.worker_files`: beneath the
workspace, no link followed, bounded) and sent from those bytes as
attachments with a neutral type, never rendered in the viewer's origin. A
delivered deck's slides are rendered to PDF by LibreOffice on request from a
private copy of its bytes (:class:`pilot.judges.deck_pdf.SlidesCache`) and
sent as an attachment too.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Any

from flask import Flask, Response, abort, request, send_file
from werkzeug.exceptions import HTTPException

from pilot import worker_files
from pilot.judges.deck_pdf import DeckRenderError, SlidesCache, is_deck, slides_name
from pilot.serving import BackgroundServer, set_security_headers
from pilot.view import files, site
from pilot.view.study import StudyReader, ViewError

LOOPBACK = "127.0.0.1"
#: Loose enough for the viewer's own stylesheet and script, nothing else.
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
STATIC_DIR = Path(__file__).parent / "static"


def create_app(folder: Path) -> Flask:
    """The viewer of the study in ``folder`` (read-only)."""
    reader = StudyReader(folder)
    app = Flask("pilot.view", static_folder=None)
    app.config["STUDY_NAME"] = reader.name
    links = site.Links(static=False)
    # Rendered slides live outside the study (the viewer never writes there), for as long as the application does.
    slides_dir = tempfile.TemporaryDirectory(prefix="pilot-view-slides-")
    app.extensions["pilot.view.slides"] = slides_dir
    slides_cache = SlidesCache(Path(slides_dir.name))

    @app.before_request
    def _guard() -> Any:
        if request.method not in ("GET", "HEAD"):
            abort(405)
        host = (request.host or "").rsplit(":", 1)[0].strip("[]").lower()
        if host not in (LOOPBACK, "localhost"):
            abort(403)
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        return set_security_headers(resp, CSP)

    def page(html: str) -> Response:
        return Response(html, mimetype="text/html")

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        # The viewer's own page, so that a dry run's "not found" still says SIMULATED; a refused host
        # (a page elsewhere reaching the viewer through a rebinding name) learns nothing of the study.
        return Response(
            site.render_error(links, exc.name, exc.description or exc.name, None if exc.code == 403 else reader),
            status=exc.code or 500,
            mimetype="text/html",
        )

    @app.errorhandler(ViewError)
    def _not_found(exc: ViewError) -> Response:
        return Response(site.render_error(links, "Not found", str(exc), reader), status=404, mimetype="text/html")

    @app.get("/")
    def index() -> Response:
        return page(site.render_index(reader, links, live=True))

    @app.get("/runs/<run_id>")
    def run(run_id: str) -> Response:
        return page(site.render_run(reader, links, run_id))

    @app.get("/scenarios")
    def scenarios() -> Response:
        return page(site.render_scenarios(reader, links))

    @app.get("/overview")
    def overview() -> Response:
        return page(site.render_overview(reader, links))

    @app.get("/why")
    def why() -> Response:
        return page(site.render_why(reader, links))

    @app.get("/scenarios/<sid>")
    def scenario(sid: str) -> Response:
        return page(site.render_scenario(reader, links, sid))

    def offered(run_id: str, attempt_no: int, name: str) -> files.OutputFile:
        data_attempts = {
            a["attempt_no"]: a for a in reader.run(run_id)["attempts"]
        }  # raises ViewError for an unknown run
        if attempt_no not in data_attempts:
            abort(404)
        rf = data_attempts[attempt_no]["files"]
        listed = {f.name: f for f in files.output_files(rf.outputs, reader.folder)}
        if name not in listed:
            abort(404)
        return listed[name]

    def refused(name: str, exc: worker_files.Refused) -> Response:
        return Response(
            site.render_error(links, "Not offered", f"{name} {exc.reason}"), status=422, mimetype="text/html"
        )

    @app.get("/files/<run_id>/attempt-<int:attempt_no>/<name>")
    def download(run_id: str, attempt_no: int, name: str) -> Response:
        # The bytes the bounded reader read (beneath the workspace, no link followed), never a path the server opens.
        try:
            data = offered(run_id, attempt_no, name).read_bytes()
        except worker_files.Refused as exc:
            return refused(name, exc)
        return send_file(
            io.BytesIO(data), mimetype="application/octet-stream", as_attachment=True, download_name=name, max_age=0
        )

    @app.get("/slides/<run_id>/attempt-<int:attempt_no>/<name>")
    def slides(run_id: str, attempt_no: int, name: str) -> Response:
        if not is_deck(name):
            abort(404)
        deck = offered(run_id, attempt_no, name)
        try:
            with worker_files.copies_scope():
                pdf = slides_cache.pdf(deck.private_copy())
        except worker_files.Refused as exc:
            return refused(name, exc)
        except DeckRenderError as exc:
            return Response(
                site.render_error(links, "Slides not rendered", f"{name}: not rendered: {exc.reason}", reader),
                status=422,
                mimetype="text/html",
            )
        # An attachment like every delivered file: the agent's slides are never rendered in the viewer's origin.
        return send_file(
            pdf, mimetype="application/pdf", as_attachment=True, download_name=slides_name(name), max_age=0
        )

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status=204)

    @app.get("/static/<name>")
    def asset(name: str) -> Response:
        if name not in site.STATIC_FILES:
            abort(404)
        mime = "text/css" if name.endswith(".css") else "text/javascript"
        return Response((STATIC_DIR / name).read_bytes(), mimetype=mime)

    return app


class ViewServer(BackgroundServer):
    """The viewer served by waitress on 127.0.0.1 (``port`` 0: any free port)."""

    def __init__(self, folder: Path, port: int = 0, threads: int = 4) -> None:
        super().__init__(create_app(folder), host=LOOPBACK, port=port, threads=threads, ident="pilot-view")

    def stop(self) -> None:
        self.close()
