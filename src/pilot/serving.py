"""A WSGI application served by waitress, in a background thread or the calling one (``pilot view``, ``pilot grading
serve``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class BackgroundServer:
    """``app`` on ``host:port`` (``port`` 0: any free port); ``start`` (or ``with``) serves in a thread,
    ``serve_forever`` here.

    Proxy headers are cleared unless ``proxy`` names the proxy waitress may
    trust (waitress's ``trusted_proxy`` options), so a client cannot claim
    another address.
    """

    def __init__(
        self,
        app: Callable[..., Any],
        *,
        host: str,
        port: int,
        threads: int,
        ident: str,
        proxy: dict[str, Any] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        import waitress

        self.app = app
        self._on_close = on_close
        self.server = waitress.create_server(
            app, host=host, port=port, threads=threads, ident=ident, clear_untrusted_proxy_headers=True, **(proxy or {})
        )
        self.port = int(self.server.effective_port)
        self.url = f"http://{host}:{self.port}"
        self._ident = ident
        self._thread: threading.Thread | None = None

    def start(self) -> BackgroundServer:
        self._thread = threading.Thread(target=self.server.run, name=self._ident, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.server.run()

    def close(self) -> None:
        self.server.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._on_close is not None:
            self._on_close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def set_security_headers(resp: Any, csp: str) -> Any:
    """The headers every page of a loopback web application carries: its CSP, no sniffing, no referrer, no framing, no
    caching."""
    resp.headers["Content-Security-Policy"] = csp
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["Cache-Control"] = "no-store"
    return resp


def use_site_layout(app: Any) -> None:
    """Let ``app``'s templates extend the layout the study's sites share (``site_templates/site_page.html``): its own
    templates first, then the shared ones."""
    from jinja2 import ChoiceLoader, PackageLoader

    app.jinja_loader = ChoiceLoader([app.jinja_loader, PackageLoader("pilot", "site_templates")])
