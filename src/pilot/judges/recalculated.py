"""The oracle's recalculated copy of each delivered workbook, kept beside the run for every rendering of it.

A workbook is shown to the judges, the graders and the viewer as a
spreadsheet program shows it on opening: each formula with the value it
computes. The oracle already has LibreOffice compute every delivered workbook
before it reads a value (:mod:`pilot.oracles.recalc`); this module keeps what
that pass wrote, so nothing renders a workbook from a second LibreOffice pass
and every arm's workbook is shown from the same program's output, whatever
tool saved it.

:func:`keep` runs before the oracle in the same process: it hands every
delivered workbook of the run to the oracle's recalculator in one batch (one
``soffice`` for the run; the oracle's own requests are then answered from the
recalculator's cache, by content), and copies each result into
``<run folder>/recalculated/`` with a manifest, ``recalculated.json``, that
names each copy by the SHA-256 of the delivered bytes it was computed from.
:meth:`Recalculated.find` gives a copy only for those exact bytes, so a file
changed since (or a copy made for another file) is never shown in its place.

The copies are the harness's, never the worker's: the run folder is outside
the sandbox, and whoever reads a copy admits it first, as any file a worker
caused (:mod:`pilot.oracles.admission`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pilot import worker_files
from pilot.oracles import safety

#: The folder of a run (beside ``workspace/``) that holds the copies, and the manifest inside it.
FOLDER = "recalculated"
MANIFEST = "recalculated.json"
MAX_MANIFEST_BYTES = 1024 * 1024
WORKBOOK_SUFFIXES = (".xlsx", ".xlsm")


@dataclass(frozen=True)
class KeptCopy:
    """One delivered workbook and what the oracle's recalculation made of it."""

    #: The delivered file's name in ``outputs/``.
    name: str
    #: SHA-256 of the delivered bytes the copy was computed from.
    source_sha256: str
    #: The copy's file name in the folder, None when the recalculation failed.
    file: str | None
    sha256: str | None
    #: Why there is no copy (LibreOffice refused, failed or timed out), else None.
    error: str | None
    #: Links made inert in the copy LibreOffice saw, and how LibreOffice was held.
    neutralised: tuple[str, ...] = ()
    confinement: str = ""


@dataclass
class Recalculated:
    """The kept copies of one run (``folder`` is ``<run folder>/recalculated``)."""

    folder: Path
    copies: dict[str, KeptCopy] = field(default_factory=dict)

    def find(self, name: str, source_sha256: str) -> KeptCopy | None:
        """The kept copy of the delivered file ``name`` with exactly these bytes, or None."""
        kept = self.copies.get(name.lower())
        return kept if kept is not None and kept.source_sha256 == source_sha256 else None

    def path(self, kept: KeptCopy) -> Path | None:
        return None if kept.file is None else self.folder / kept.file

    def digest(self) -> str:
        """One digest of every kept copy (a cache key for whatever is rendered from them)."""
        return hashlib.sha256(
            json.dumps(sorted((k.name, k.source_sha256, k.sha256, k.error) for k in self.copies.values())).encode()
        ).hexdigest()

    @classmethod
    def load(cls, run_folder: Path) -> Recalculated | None:
        """The kept copies of the run in ``run_folder``, or None when it has none (a run judged before they were kept).

        The manifest is the harness's own file, read bounded and without
        following a link; a manifest that is not what :func:`keep` writes is
        taken as absent.
        """
        folder = Path(run_folder) / FOLDER
        try:
            with worker_files.Folder(folder) as f:
                raw, size = f.read_prefix(MANIFEST, max_bytes=MAX_MANIFEST_BYTES)
        except worker_files.Refused:
            return None
        if size > MAX_MANIFEST_BYTES:
            return None
        try:
            data = json.loads(raw.decode("utf-8"))
            copies = {
                str(c["name"]).lower(): KeptCopy(
                    str(c["name"]),
                    str(c["source_sha256"]),
                    None if c.get("file") is None else Path(str(c["file"])).name,
                    None if c.get("sha256") is None else str(c["sha256"]),
                    None if c.get("error") is None else str(c["error"]),
                    tuple(str(n) for n in c.get("neutralised") or ()),
                    str(c.get("confinement") or ""),
                )
                for c in data["copies"]
            }
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None
        return cls(folder, copies)


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def keep(run_folder: Path, outputs: Path, workbooks: Iterable[Path], recalculator: Any = None) -> Recalculated:
    """Recalculate the run's delivered ``workbooks`` in one batch and keep the copies in ``<run_folder>/recalculated``.

    ``workbooks`` are files of ``outputs/`` (:func:`pilot.judges.render.delivered_workbooks`).

    ``recalculator`` is the oracle's (:func:`pilot.oracles.evaluate.default_recalculator` by default): call this
    before the oracle in the same process and the oracle's requests are answered from its cache. Never raises on
    what the worker delivered: a workbook refused or not recalculated is kept as its reason.
    """
    from pilot.oracles.evaluate import default_recalculator

    recalculator = recalculator if recalculator is not None else default_recalculator()
    outputs = Path(outputs)
    folder = Path(run_folder) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    kept: dict[str, KeptCopy] = {}
    staged: dict[Path, tuple[str, str]] = {}
    with worker_files.copies_scope():
        for delivered in workbooks:
            screened = safety.screen_path(delivered, outputs.parent)
            if not screened.ok:
                continue  # the renderer shows it refused; there is nothing to compute
            reason = safety.screen_ooxml(screened.path, delivered.suffix.lower())
            digest = _sha256(screened.path)
            if reason:
                kept[delivered.name.lower()] = KeptCopy(delivered.name, digest, None, None, reason)
                continue
            staged[screened.path] = (delivered.name, digest)
        results: dict[Path, Any] = {}
        if staged:
            try:
                results = recalculator.recalculate(list(staged))
            except Exception as exc:  # noqa: BLE001 - LibreOffice missing or not confinable: kept as the reason
                results = {}
                for name, digest in staged.values():
                    kept[name.lower()] = KeptCopy(name, digest, None, None, f"not recalculated ({exc})")
        for n, (private, (name, digest)) in enumerate(staged.items()):
            res = results.get(private)
            if res is None:
                continue
            neutralised = tuple(str(x) for x in getattr(res, "neutralised", ()))
            how = str(getattr(res, "confinement", "") or "")
            if res.error or res.path is None:
                kept[name.lower()] = KeptCopy(name, digest, None, None, str(res.error), neutralised, how)
                continue
            target = f"w{n:03d}{Path(name).suffix.lower()}"
            tmp = folder / f".{target}.tmp"
            with open(res.path, "rb") as src, open(tmp, "wb") as dst:
                dst.write(src.read(safety.MAX_FILE_BYTES * 4 + 1))
            os.replace(tmp, folder / target)
            kept[name.lower()] = KeptCopy(name, digest, target, _sha256(folder / target), None, neutralised, how)
    manifest = {"copies": [asdict(k) for k in sorted(kept.values(), key=lambda k: k.name)]}
    fd, tmp_name = tempfile.mkstemp(prefix=".manifest-", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    os.replace(tmp_name, folder / MANIFEST)
    return Recalculated(folder, kept)


def current(have: Recalculated, outputs: Path, workbooks: Iterable[Path]) -> bool:
    """Whether every one of the delivered ``workbooks`` has a kept copy for its present bytes."""
    with worker_files.copies_scope():
        for delivered in workbooks:
            screened = safety.screen_path(delivered, Path(outputs).parent)
            if screened.ok and have.find(delivered.name, _sha256(screened.path)) is None:
                return False
    return True
