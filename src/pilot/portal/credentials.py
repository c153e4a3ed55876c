"""Per-run portal credentials and the salted digests the server checks them by.

The clear pair exists in two places only: the parent process that started the
instance and the A3/A4 workspace's ``portal_credentials.json``. The server
process receives digests (never the password), and logs name a credential by
its fingerprint.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

CREDENTIALS_FILENAME = "portal_credentials.json"
#: What a redacted secret reads as (``pilot.portal.redaction``).
REDACTED = "[portal-password]"

#: The most of a ``portal_credentials.json`` read (the harness writes a few hundred bytes).
MAX_CREDENTIALS_BYTES = 64 * 1024


@dataclass(frozen=True)
class Credentials:
    """A username and password pair; the password never shows in ``repr``."""

    username: str
    password: str = field(repr=False)

    @classmethod
    def generate(cls) -> Credentials:
        # A credential is a secret, not an experimental draw: it comes from the
        # OS's CSPRNG, because a seeded generator would make it guessable.
        return cls(username=f"analyst-{secrets.token_hex(3)}", password=secrets.token_urlsafe(18))

    @property
    def fingerprint(self) -> str:
        """A short, one-way name of this pair, safe to record in logs and run records."""
        return hashlib.sha256(f"{self.username}\0{self.password}".encode()).hexdigest()[:16]

    def to_workspace_json(self, url: str) -> dict[str, str]:
        return {
            "url": url,
            "username": self.username,
            "password": self.password,
            "note": "Company intranet portal. Sign in at the address above; "
            "the JSON API accepts the same pair (POST /api/sign-in or HTTP Basic).",
        }

    def write_workspace_file(self, workspace: Path, url: str) -> Path:
        """Write ``<workspace>/portal_credentials.json`` readable by its owner only."""
        path = Path(workspace) / CREDENTIALS_FILENAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(self.to_workspace_json(url), fh, indent=2)
            fh.write("\n")
        return path

    @classmethod
    def read_workspace_file(cls, path: Path) -> tuple[str, Credentials]:
        """(url, credentials) from a ``portal_credentials.json``."""
        from pilot import worker_files

        path = Path(path)
        try:
            # A file in the worker's workspace: read beneath its folder, no link followed, bounded.
            raw = worker_files.read_bytes(path.parent, path.name, max_bytes=MAX_CREDENTIALS_BYTES)
            data = json.loads(raw.decode("utf-8"))
        except (worker_files.Refused, OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read portal credentials: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path}: cannot read portal credentials: not a JSON object")
        for key in ("url", "username", "password"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise ValueError(f"{path}: field '{key}': missing or not a non-empty string")
        return data["url"], cls(data["username"], data["password"])


def _digest(salt: bytes, value: str) -> bytes:
    # The password is 144 random bits, so a keyed fast hash resists guessing;
    # a slow KDF would only slow down every HTTP Basic request.
    return hmac.new(salt, value.encode("utf-8"), hashlib.sha256).digest()


@dataclass(frozen=True)
class CredentialVerifier:
    """What the server holds: a salt and the digests of the pair, never the pair."""

    salt: bytes
    username_digest: bytes
    password_digest: bytes
    fingerprint: str

    @classmethod
    def for_credentials(cls, credentials: Credentials) -> CredentialVerifier:
        salt = secrets.token_bytes(16)
        return cls(
            salt=salt,
            username_digest=_digest(salt, credentials.username),
            password_digest=_digest(salt, credentials.password),
            fingerprint=credentials.fingerprint,
        )

    def check(self, username: str, password: str) -> bool:
        # Both comparisons always run, in constant time, so timing says nothing.
        user_ok = hmac.compare_digest(_digest(self.salt, username or ""), self.username_digest)
        pass_ok = hmac.compare_digest(_digest(self.salt, password or ""), self.password_digest)
        return user_ok and pass_ok

    def to_json(self) -> dict[str, str]:
        return {
            "salt": self.salt.hex(),
            "username_digest": self.username_digest.hex(),
            "password_digest": self.password_digest.hex(),
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, data: dict[str, str]) -> CredentialVerifier:
        return cls(
            salt=bytes.fromhex(data["salt"]),
            username_digest=bytes.fromhex(data["username_digest"]),
            password_digest=bytes.fromhex(data["password_digest"]),
            fingerprint=data["fingerprint"],
        )
