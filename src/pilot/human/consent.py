"""The consent text the participant site shows first: ``protocol/human/consent.md``, validated on load.

The file is Markdown shown as written. Its ``Version: X.Y`` line (one, near
the top) is the version every consent decision is recorded with, beside the
SHA-256 of the whole text, so that a record says exactly what was agreed to.
A file without a version line, with two, or without a heading is refused,
naming the file, the field and the reason.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from pilot import paths
from pilot.protocol import ProtocolError

_VERSION = re.compile(r"^Version:\s*([0-9]+(?:\.[0-9]+)*)\s*$", re.M)


@dataclass(frozen=True)
class Consent:
    """The consent text, its version and its digest."""

    path: Path
    text: str
    version: str
    sha256: str

    @property
    def title(self) -> str:
        first = self.text.lstrip().splitlines()[0]
        return first.lstrip("#").strip()


def load_consent(path: Path | None = None) -> Consent:
    """Read and check the consent text (default ``protocol/human/consent.md``)."""
    path = Path(path or paths.CONSENT_FILE)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProtocolError(path, "<file>", f"cannot be read ({type(exc).__name__}: {exc})") from exc
    if not text.lstrip().startswith("# "):
        raise ProtocolError(path, "title", "the text must start with a '# ' heading (its title)")
    versions = _VERSION.findall(text)
    if len(versions) != 1:
        raise ProtocolError(
            path,
            "Version",
            f"needs exactly one line 'Version: X.Y' (found {len(versions)}); every consent is recorded with it",
        )
    return Consent(path, text, versions[0], hashlib.sha256(text.encode("utf-8")).hexdigest())
