"""A small HTTP client of the portal, as a script in an A3/A4 workspace would use it.

It speaks the JSON API over real HTTP (standard library only), keeps the
session cookie, and never goes through a proxy. The simulated agent uses it,
so its portal use shows in the instance's access log like anyone else's.
"""

from __future__ import annotations

import http.cookiejar
import json
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from pilot.portal.credentials import CREDENTIALS_FILENAME, Credentials


class PortalClientError(RuntimeError):
    def __init__(self, method: str, url: str, status: int | None, message: str):
        self.method, self.url, self.status = method, url, status
        super().__init__(f"{method} {url}: {status if status is not None else 'no answer'}: {message}")


class PortalClient:
    def __init__(self, url: str, credentials: Credentials | dict, *, timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        if isinstance(credentials, dict):
            credentials = Credentials(credentials["username"], credentials["password"])
        self.credentials = credentials
        self.timeout_s = timeout_s
        self._cookies = http.cookiejar.CookieJar()
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPCookieProcessor(self._cookies)
        )

    @classmethod
    def from_workspace(cls, workspace: Path, **kwargs) -> PortalClient:
        """A client for the portal named in ``<workspace>/portal_credentials.json``."""
        url, credentials = Credentials.read_workspace_file(Path(workspace) / CREDENTIALS_FILENAME)
        return cls(url, credentials, **kwargs)

    def _request(self, method: str, path: str, body: dict | None = None) -> bytes:
        url = self.url + path
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:300]
            raise PortalClientError(method, url, exc.code, detail) from None
        except (urllib.error.URLError, OSError) as exc:
            raise PortalClientError(method, url, None, str(getattr(exc, "reason", exc))) from None

    def _json(self, path: str):
        return json.loads(self._request("GET", path))

    def health(self) -> dict:
        return self._json("/healthz")

    def sign_in(self) -> None:
        self._request(
            "POST", "/api/sign-in", {"username": self.credentials.username, "password": self.credentials.password}
        )

    def sign_out(self) -> None:
        self._request("POST", "/api/sign-out", {})

    def list_documents(self) -> list[dict]:
        return self._json("/api/documents")

    def list_records(self) -> list[dict]:
        return self._json("/api/records")

    def record(self, record_id: str) -> dict:
        return self._json(f"/api/records/{quote(record_id, safe='')}")

    def _save(self, path: str, dest: Path, filename: str) -> Path:
        dest = Path(dest)
        target = dest / filename if dest.is_dir() else dest
        data = self._request("GET", path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return target

    def download(self, name: str, dest: Path) -> Path:
        """Save the library document ``name`` to ``dest`` (a file, or a folder to put it in)."""
        return self._save(f"/documents/{quote(name)}", dest, name.rsplit("/", 1)[-1])

    def download_record(self, record_id: str, fmt: str, dest: Path) -> Path:
        """Save a record set as ``fmt`` (csv, xlsx or pdf) to ``dest`` (file or folder)."""
        return self._save(
            f"/records/{quote(record_id, safe='')}/download.{quote(fmt, safe='')}", dest, f"{record_id}.{fmt}"
        )
