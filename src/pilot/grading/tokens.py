"""Sign-in tokens: random, shown once, stored only as a hash."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

#: 32 random bytes, URL-safe base64 (43 characters).
TOKEN_BYTES = 32
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")


def new_token() -> str:
    """A fresh sign-in token (never stored as such)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """The stored form of a token: its SHA-256 in hex.

    The tokens carry 256 bits of randomness, so a plain hash (no salt, no
    stretching) cannot be searched; a stolen store does not give a sign-in.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def well_formed(token: str) -> bool:
    """Whether ``token`` has the shape :func:`new_token` gives (checked before any lookup)."""
    return bool(_TOKEN.match(token or ""))


def same_hash(a: str, b: str) -> bool:
    """Constant-time comparison of two stored hashes."""
    return hmac.compare_digest(a.encode("ascii"), b.encode("ascii"))
