"""Sign-in links after a wave is created: reissue one that was lost, revoke one that leaked, rotate the site's secret.

A link is a random token; the store keeps its hash only (:mod:`pilot.grading.tokens`). Reissuing stores the hash
of a new token and writes the new link to the wave's ``links.csv`` (owner-only), where the coordinator finds it to
send; revoking stores the hash of a token nobody holds. Either way the old link stops working at once, and every
open session of that grader (or of the coordinator) is closed, in a running site too: each request asks the
wave's session store (:mod:`pilot.web_sessions`). Rotating the secret signs everyone out.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from pilot import web_sessions
from pilot.grading import store, tokens
from pilot.grading.plan import LINKS_FILE, SECRET_FILE, SESSIONS_FILE, grading_dir
from pilot.store import atomic_write_private

REVOKED = "(revoked)"


@dataclass(frozen=True)
class LinkChange:
    """What a reissue or revocation did: whose link, the new path (None when revoked), the sessions it closed."""

    who: str
    path: str | None
    sessions_closed: int
    links_file: Path


def _sign_in_path(who: str, token: str) -> str:
    return f"/coordinator/signin/{token}" if who == store.COORDINATOR else f"/signin/{token}"


def _rewrite_links(study_folder: Path, wave: str, who: str, path: str) -> Path:
    """``links.csv`` with ``who``'s path replaced (owner-only, written whole)."""
    file = grading_dir(study_folder, wave) / LINKS_FILE
    rows: list[list[str]] = []
    if file.is_file():
        rows = list(csv.reader(io.StringIO(file.read_text(encoding="utf-8"))))
    if not rows:
        rows = [["role", "grader_id", "name", "contact", "path"]]
    found = False
    for row in rows[1:]:
        if len(row) >= 5 and ((who == store.COORDINATOR and row[0] == "coordinator") or row[1] == who):
            row[4] = path
            found = True
    if not found:
        role = "coordinator" if who == store.COORDINATOR else "grader"
        rows.append([role, "" if role == "coordinator" else who, "", "", path])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return atomic_write_private(file, buf.getvalue())


def change_link(study_folder: Path, wave: str, who: str, *, revoke: bool) -> LinkChange:
    """Reissue (``revoke`` false) or revoke the sign-in link of grader ``who`` (or ``coordinator``)."""
    folder = Path(study_folder)
    token = tokens.new_token()
    with store.open_store(folder) as st:
        store.wave(st.conn, wave)
        store.set_link(st.conn, wave, who, tokens.token_hash(token), kind="revoke" if revoke else "reissue")
    sessions = web_sessions.SessionStore(
        grading_dir(folder, wave) / SESSIONS_FILE, web_sessions.SessionLimits(1.0, 1.0)
    )
    try:
        closed = sessions.close_subject(who)
    finally:
        sessions.close_store()
    path = None if revoke else _sign_in_path(who, token)
    links_file = _rewrite_links(folder, wave, who, REVOKED if path is None else path)
    return LinkChange(who, path, closed, links_file)


def rotate_secret(study_folder: Path, wave: str) -> int:
    """A new site secret for the wave; every session is closed (how many were open)."""
    folder = Path(study_folder)
    with store.open_store(folder) as st:
        store.wave(st.conn, wave)
        store.log_event(st.conn, wave, "secret_rotated")
    web_sessions.rotate_secret(grading_dir(folder, wave) / SECRET_FILE)
    sessions = web_sessions.SessionStore(
        grading_dir(folder, wave) / SESSIONS_FILE, web_sessions.SessionLimits(1.0, 1.0)
    )
    try:
        return sessions.close_all()
    finally:
        sessions.close_store()
