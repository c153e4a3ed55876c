"""Keep the portal password out of what the harness keeps: transcripts, logs, run records.

The worker reads the pair from ``portal_credentials.json`` and may echo it:
in a tool call (``curl -u user:pass``), in a tool result (``curl -v`` prints
the ``Authorization: Basic`` token), in the CLI's own session files. Every
form in :func:`secret_forms` is replaced by :data:`REDACTED`. The password is
URL-safe base64 text, so JSON, URL and shell quoting leave it unchanged and a
plain substring replacement finds it in each of them.
"""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pilot.portal.credentials import REDACTED, Credentials

#: Secrets shorter than this are not redacted: replacing a two-letter string would shred a transcript.
MIN_SECRET_LEN = 8
#: Bounds on the walk of a run folder: a larger file (a worker's scratch file; every record is far smaller) is not
#: read, a deeper or larger tree not walked further.
MAX_REDACT_BYTES = 256 * 1024 * 1024
MAX_REDACT_DEPTH = 64
MAX_REDACT_ENTRIES = 100_000


def secret_forms(credentials: Credentials) -> tuple[str, ...]:
    """The password and the HTTP Basic token of the pair (``base64(user:password)``)."""
    pair = f"{credentials.username}:{credentials.password}".encode()
    forms = (credentials.password, base64.b64encode(pair).decode("ascii"))
    return tuple(f for f in forms if len(f) >= MIN_SECRET_LEN)


def _usable(secrets: Iterable[str]) -> list[str]:
    # Longest first, so a secret that contains another is replaced whole.
    return sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)


def redact_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by :data:`REDACTED`."""
    for secret in _usable(secrets):
        text = text.replace(secret, REDACTED)
    return text


def redact_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """:func:`redact_secrets` on raw bytes (a stream line, a file), whatever their encoding around the secret."""
    for secret in _usable(secrets):
        data = data.replace(secret.encode("utf-8"), REDACTED.encode("utf-8"))
    return data


def redact_file(path: Path, secrets: Iterable[str]) -> bool:
    """Rewrite ``path`` without the secrets (beside it, then renamed over it); whether it held any."""
    path = Path(path)
    data = path.read_bytes()
    clean = redact_bytes(data, secrets)
    if clean == data:
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(clean)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def redact_tree(root: Path, secrets: Iterable[str], *, skip: Iterable[str] = ()) -> list[Path]:
    """Redact every regular file under ``root`` except the top-level entries named in ``skip``.

    Returns the files that held a secret. The run folder holds the worker's scratch files too, so the tree is
    walked by the harness's bounded reader (:mod:`pilot.worker_files`): by descriptor, no link followed, nothing
    but a regular file opened, and no file larger than :data:`MAX_REDACT_BYTES` read (such a file, which no
    record of the run is, is left as it is); a file is rewritten in its folder by descriptor.
    """
    from pilot import worker_files

    root = Path(root)
    secrets = _usable(secrets)
    skipped = set(skip)
    changed: list[Path] = []
    if not secrets:
        return changed
    try:
        folder = worker_files.Folder(root)
    except worker_files.Refused:
        return changed
    with folder:
        for listing in folder.walk(max_depth=MAX_REDACT_DEPTH, max_entries=MAX_REDACT_ENTRIES):
            for entry in listing.entries:
                if not listing.rel and entry.name in skipped:
                    entry.descend = False
                    continue
                if entry.kind != "file" or entry.st is None or entry.st.st_size > MAX_REDACT_BYTES:
                    continue
                try:
                    data = entry.read_bytes(max_bytes=MAX_REDACT_BYTES)
                except (worker_files.Refused, OSError):
                    continue
                clean = redact_bytes(data, secrets)
                if clean != data:
                    entry.rewrite(clean)
                    changed.append(root / entry.rel)
    return changed


def redact_abandoned_attempts(out_dir: Path) -> list[Path]:
    """Redact the earlier attempts of this run that ended before their own redaction (a killed harness).

    In the scheduler's layout (``<run id>/attempt-N``) each attempt keeps its
    folder. An attempt killed mid-run never reached its end-of-run redaction,
    but its workspace still holds the pair it was given, so the password is
    known here and is taken out of the rest of that folder.
    """
    from pilot.portal.credentials import CREDENTIALS_FILENAME

    out_dir = Path(out_dir).resolve()
    if not out_dir.name.startswith("attempt-") or not out_dir.parent.is_dir():
        return []
    changed: list[Path] = []
    for sibling in sorted(out_dir.parent.glob("attempt-*")):
        creds_file = sibling / "workspace" / CREDENTIALS_FILENAME
        if sibling == out_dir or not sibling.is_dir() or sibling.is_symlink() or not creds_file.is_file():
            continue
        try:
            _, credentials = Credentials.read_workspace_file(creds_file)
        except ValueError:
            continue  # a file the worker broke: nothing to learn the secret from
        changed += redact_tree(sibling, secret_forms(credentials), skip=("workspace",))
    return changed
