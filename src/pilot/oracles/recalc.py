"""Recalculate workbooks with LibreOffice headless before any value is read.

A workbook written by openpyxl holds formulas and no cached values; one
written by a spreadsheet program holds cached values that may be stale. The
oracle therefore never trusts what is in the file: every workbook goes
through LibreOffice, which recalculates on load (the private profile sets
recalculation to "always") and writes an xlsx whose cached values are fresh.

LibreOffice never meets the worker's file: each workbook is copied through
the wall (a regular file, no link followed, bounded) into the batch's own
folder and made inert there (:mod:`pilot.office_links`: links to other
files, web functions and DDE lose their targets; what was changed is kept
on the result for the oracle to report), and ``soffice`` runs confined
(:mod:`pilot.confined`: no network, a read-only view of exactly the batch's
copies, its own output folder, a private profile, bounded time and memory,
never the harness's uid). Its output comes back by a bounded copy.

Many files go through one ``soffice`` process (start-up dominates the cost).
The conversion runs under a timeout; when it expires its whole process tree
is killed and every file it did not finish is retried alone under a shorter
timeout, so one hostile file cannot hang a batch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pilot import confined, office_convert
from pilot.office_links import Neutralised, Refused
from pilot.oracles.hashing import file_digest
from pilot.oracles.safety import MAX_FILE_BYTES
from pilot.oracles.selfcheck_tool import RECALC_PROFILE_XCU

BATCH_BASE_TIMEOUT_S = 60.0
BATCH_PER_FILE_TIMEOUT_S = 8.0
SINGLE_TIMEOUT_S = 45.0

# One profile for the oracle and the A4 self-check: recalculate on load always, never run a macro, never update a link.
_PROFILE_XCU = RECALC_PROFILE_XCU
#: The largest recalculated copy taken back from LibreOffice.
MAX_OUTPUT_BYTES = 4 * MAX_FILE_BYTES


class RecalcUnavailable(RuntimeError):
    """LibreOffice (soffice) is not installed."""


@dataclass(frozen=True)
class Recalculated:
    """Outcome for one workbook: ``path`` of the recalculated copy, or ``error``."""

    source: Path
    path: Path | None
    error: str | None
    seconds: float
    #: Links made inert in the copy LibreOffice recalculated (which part, what, which target).
    neutralised: tuple[Neutralised, ...] = ()
    #: How LibreOffice was held: ``bubblewrap``, or ``unisolated`` under the development opt-out.
    confinement: str = ""


def soffice_binary() -> str | None:
    return os.environ.get("PILOT_SOFFICE") or shutil.which("soffice") or shutil.which("libreoffice")


class Recalculator:
    """Recalculates workbooks in batches and caches results by content hash.

    One instance owns one work folder (a batch's copies, LibreOffice's output
    and the copies taken back); calls are serialised by a lock. Each
    ``soffice`` starts from a pristine private profile (:mod:`pilot.office_convert`).
    """

    def __init__(
        self,
        work_dir: Path | None = None,
        *,
        soffice: str | None = None,
        batch_timeout_s: float = BATCH_BASE_TIMEOUT_S,
        per_file_timeout_s: float = BATCH_PER_FILE_TIMEOUT_S,
        single_timeout_s: float = SINGLE_TIMEOUT_S,
    ) -> None:
        self.batch_timeout_s = batch_timeout_s
        self.per_file_timeout_s = per_file_timeout_s
        self.single_timeout_s = single_timeout_s
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="pilot-recalc-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.soffice = soffice or soffice_binary()
        self._cache: dict[str, Recalculated] = {}
        self._lock = threading.Lock()
        self.batches = 0
        self.processes = 0

    def _run(self, files: list[Path], outdir: Path, timeout: float) -> tuple[bool, str, str]:
        """One confined soffice process converting ``files`` into ``outdir``; (finished, message, confinement)."""
        if not self.soffice:
            raise RecalcUnavailable("LibreOffice (soffice) is not installed; workbooks cannot be recalculated")
        if not os.path.exists(self.soffice):
            raise RecalcUnavailable(f"no LibreOffice program at {self.soffice}; workbooks cannot be recalculated")
        self.processes += 1
        done = office_convert.convert(
            files,
            outdir,
            target="xlsx:Calc Office Open XML",
            soffice=self.soffice,
            settings_xcu=_PROFILE_XCU,
            scratch=outdir.parent / f"scratch-{self.processes:05d}",
            limits=confined.Limits(wall_s=timeout),
        )
        if done.timed_out:
            return False, f"LibreOffice did not finish within {timeout:.0f} s", done.confinement
        return done.returncode == 0, done.output[-500:], done.confinement

    def _take_back(self, produced: Path, folder: Path) -> Path | None:
        """LibreOffice's output, copied into the harness's ``folder``; None when it wrote nothing usable there."""
        folder.mkdir(exist_ok=True)
        try:
            return office_convert.adopt(produced, folder / produced.name, MAX_OUTPUT_BYTES)
        except OSError:
            return None

    def recalculate(self, sources: Iterable[Path]) -> dict[Path, Recalculated]:
        """Recalculate every workbook in ``sources``; results keyed by the source path.

        Raises :class:`pilot.confined.ConfinementUnavailable` when LibreOffice cannot be confined on this host
        (and nobody opted out), :class:`RecalcUnavailable` when it is not installed.
        """
        sources = [Path(s) for s in sources]
        results: dict[Path, Recalculated] = {}
        with self._lock:
            incoming = self.work_dir / "incoming"
            incoming.mkdir(exist_ok=True)
            pending: dict[str, list[Path]] = {}
            copies: dict[str, tuple[Path, tuple[Neutralised, ...]]] = {}
            for n, src in enumerate(sources):
                # The worker's file crosses the wall once: a bounded copy that follows no link, made inert.
                copy = incoming / f"c{n:05d}.xlsx"
                copy.unlink(missing_ok=True)
                try:
                    neutralised = tuple(office_convert.stage(src, copy, MAX_FILE_BYTES))
                except (OSError, Refused) as exc:
                    results[src] = Recalculated(src, None, f"recalculation refused: {exc}", 0.0)
                    continue
                digest = file_digest(copy)
                if digest in self._cache:
                    cached = self._cache[digest]
                    results[src] = Recalculated(
                        src, cached.path, cached.error, 0.0, cached.neutralised, cached.confinement
                    )
                    copy.unlink()
                elif digest in pending:
                    pending[digest].append(src)
                    copy.unlink()
                else:
                    pending[digest] = [src]
                    copies[digest] = (copy, neutralised)
            if not pending:
                return results
            self.batches += 1
            batch = self.work_dir / f"batch{self.batches:05d}"
            indir, outdir = batch / "in", batch / "out"
            indir.mkdir(parents=True)
            outdir.mkdir()
            os.chmod(indir, 0o755)
            staged: dict[str, Path] = {}
            for digest, (copy, _) in copies.items():
                dst = indir / f"w{digest[:24]}.xlsx"
                os.replace(copy, dst)
                staged[digest] = dst
            t0 = time.perf_counter()
            timeout = self.batch_timeout_s + self.per_file_timeout_s * len(staged)
            _, message, how = self._run(list(staged.values()), outdir, timeout)
            per_file = (time.perf_counter() - t0) / len(staged)
            for digest, staged_path in staged.items():
                neutralised = copies[digest][1]
                out = self._take_back(outdir / staged_path.name, batch / "done")
                if out is None:
                    # Retry alone: the batch timed out or this file stopped it.
                    single = batch / f"single-{digest[:12]}"
                    single.mkdir()
                    t1 = time.perf_counter()
                    ok, msg, how = self._run([staged_path], single, self.single_timeout_s)
                    out = self._take_back(single / staged_path.name, batch / "done")
                    per = time.perf_counter() - t1
                    if out is None:
                        reason = msg if "did not finish" in msg else "LibreOffice could not open or convert it"
                        rec = Recalculated(staged_path, None, f"recalculation failed: {reason}", per, neutralised, how)
                    else:
                        rec = Recalculated(staged_path, out, None, per, neutralised, how)
                else:
                    rec = Recalculated(staged_path, out, None, per_file, neutralised, how)
                self._cache[digest] = rec
                for src in pending[digest]:
                    results[src] = Recalculated(src, rec.path, rec.error, rec.seconds, neutralised, how)
        return results

    def close(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> Recalculator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
