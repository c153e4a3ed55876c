"""Sign-in sessions of a small web site that survive a restart of its server.

A site built on this (the expert grading site; a participant site can use it
the same way) keeps two things on disk, beside the data they guard:

- a **secret** (:func:`load_secret`), 32 random bytes in an owner-only file,
  made on first use and replaced by :func:`rotate_secret`. The site signs its
  cookies with it, so a cookie issued before a restart still verifies after
  it, and one issued before a rotation never does;
- the **open sessions** (:class:`SessionStore`), one row each in a SQLite file
  of their own: a random id (stored as its SHA-256 only, so a copy of the file
  opens no session), who signed in (a role and a subject, e.g. ``grader`` and
  ``G03``), the session's CSRF token, when it opened and when it was last used.

A session is worth nothing once it leaves the store: signed out, idle past
:attr:`SessionLimits.idle_s`, older than :attr:`SessionLimits.lifetime_s`,
closed with everyone of its subject (a revoked sign-in link), or all closed
(a rotated secret). Each request asks the store, so a session closed by a
command while the server runs ends at that server's next request.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pilot.store import atomic_write_private

SECRET_BYTES = 32
#: How often a session's last use is written at most (a request per second would otherwise write per request).
TOUCH_EVERY_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS web_sessions (
    sid_hash TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    subject TEXT,
    csrf TEXT NOT NULL,
    opened_at REAL NOT NULL,
    seen_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS web_sessions_by_subject ON web_sessions (subject);
"""


class SecretError(RuntimeError):
    """The secret file cannot be used; the message names the file and why."""


@dataclass(frozen=True)
class SessionLimits:
    """How long a session lives: at most ``lifetime_s`` after sign-in, and ``idle_s`` after its last use."""

    lifetime_s: float
    idle_s: float


@dataclass(frozen=True)
class Session:
    """One open session as a request sees it."""

    role: str
    subject: str | None
    csrf: str
    opened_at: float
    seen_at: float


def load_secret(path: Path) -> bytes:
    """The site's secret, made (owner-only) on first use; refused when anyone but the owner may read the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        atomic_write_private(path, secrets.token_hex(SECRET_BYTES) + "\n")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise SecretError(f"{path}: the site's secret cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if st.st_mode & 0o077:
            raise SecretError(
                f"{path}: the site's secret may be read by others (mode {st.st_mode & 0o777:o}); "
                "chmod 600 it, or rotate it"
            )
        raw = fh.read(4 * SECRET_BYTES).strip()
    try:
        secret = bytes.fromhex(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise SecretError(f"{path}: not a secret this site wrote (expected hex digits); rotate it") from None
    if len(secret) < SECRET_BYTES:
        raise SecretError(f"{path}: the secret is {len(secret)} bytes, fewer than {SECRET_BYTES}; rotate it")
    return secret


def rotate_secret(path: Path) -> None:
    """Replace the secret: every cookie signed with the old one stops verifying (close the sessions too)."""
    atomic_write_private(Path(path), secrets.token_hex(SECRET_BYTES) + "\n")


def _hash(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8")).hexdigest()


class SessionStore:
    """Open sessions in the SQLite file ``path`` (owner-only), shared by every thread and process of the site."""

    def __init__(self, path: Path, limits: SessionLimits, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            atomic_write_private(self.path, "")
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(SCHEMA)

    def _alive(self, opened: float, seen: float, now: float) -> bool:
        return now - opened < self.limits.lifetime_s and now - seen < self.limits.idle_s

    def open(self, role: str, subject: str | None) -> tuple[str, Session]:
        """A new session: its id (for the cookie, never stored as such) and the session."""
        sid = secrets.token_urlsafe(32)
        now = self._clock()
        session = Session(role, subject, secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._conn.execute(
                "DELETE FROM web_sessions WHERE opened_at <= ? OR seen_at <= ?",
                (now - self.limits.lifetime_s, now - self.limits.idle_s),
            )
            self._conn.execute(
                "INSERT INTO web_sessions VALUES (?, ?, ?, ?, ?, ?)",
                (_hash(sid), role, subject, session.csrf, now, now),
            )
        return sid, session

    def get(self, sid: object) -> Session | None:
        """The open session ``sid`` names (marked used), or None: unknown, closed, idle too long or too old."""
        if not isinstance(sid, str) or not sid:
            return None
        key = _hash(sid)
        now = self._clock()
        with self._lock:
            row = self._conn.execute(
                "SELECT role, subject, csrf, opened_at, seen_at FROM web_sessions WHERE sid_hash = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            role, subject, csrf, opened, seen = row
            if not self._alive(opened, seen, now):
                self._conn.execute("DELETE FROM web_sessions WHERE sid_hash = ?", (key,))
                return None
            if now - seen >= TOUCH_EVERY_S:
                self._conn.execute("UPDATE web_sessions SET seen_at = ? WHERE sid_hash = ?", (now, key))
                seen = now
        return Session(role, subject, csrf, opened, seen)

    def close(self, sid: object) -> None:
        if isinstance(sid, str) and sid:
            with self._lock:
                self._conn.execute("DELETE FROM web_sessions WHERE sid_hash = ?", (_hash(sid),))

    def close_subject(self, subject: str) -> int:
        """Close every session of ``subject`` (a revoked or reissued link); how many were open."""
        with self._lock:
            return self._conn.execute("DELETE FROM web_sessions WHERE subject = ?", (subject,)).rowcount

    def close_all(self) -> int:
        """Close every session (the secret was rotated); how many were open."""
        with self._lock:
            return self._conn.execute("DELETE FROM web_sessions").rowcount

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM web_sessions").fetchone()[0])

    def close_store(self) -> None:
        with self._lock:
            self._conn.close()
