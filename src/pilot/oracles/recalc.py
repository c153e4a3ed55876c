"""Recalculate workbooks with LibreOffice headless before any value is read.

A workbook written by openpyxl holds formulas and no cached values; one
written by a spreadsheet program holds cached values that may be stale. The
oracle therefore never trusts what is in the file: every workbook goes
through LibreOffice, which recalculates on load (the private profile sets
recalculation to "always") and writes an xlsx whose cached values are fresh.

Many files go through one ``soffice`` process (start-up dominates the cost).
The conversion runs under a timeout in its own process group; when it
expires the group is killed and every file it did not finish is retried
alone under a shorter timeout, so one hostile file cannot hang a batch.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pilot.oracles.hashing import file_digest
from pilot.oracles.selfcheck_tool import RECALC_PROFILE_XCU

BATCH_BASE_TIMEOUT_S = 60.0
BATCH_PER_FILE_TIMEOUT_S = 8.0
SINGLE_TIMEOUT_S = 45.0

# One profile for the oracle and the A4 self-check: recalculate on load always, never run a macro.
_PROFILE_XCU = RECALC_PROFILE_XCU


class RecalcUnavailable(RuntimeError):
    """LibreOffice (soffice) is not installed."""


@dataclass(frozen=True)
class Recalculated:
    """Outcome for one workbook: ``path`` of the recalculated copy, or ``error``."""

    source: Path
    path: Path | None
    error: str | None
    seconds: float


def soffice_binary() -> str | None:
    return os.environ.get("PILOT_SOFFICE") or shutil.which("soffice") or shutil.which("libreoffice")


class Recalculator:
    """Recalculates workbooks in batches and caches results by content hash.

    One instance owns one private LibreOffice profile and one output folder;
    calls are serialised by a lock because a profile serves one process.
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
        self.profile = self.work_dir / "profile"
        self.soffice = soffice or soffice_binary()
        self._cache: dict[str, Recalculated] = {}
        self._lock = threading.Lock()
        self.batches = 0
        self.processes = 0

    def _ensure_profile(self) -> None:
        user = self.profile / "user"
        if not (user / "registrymodifications.xcu").exists():
            user.mkdir(parents=True, exist_ok=True)
            (user / "registrymodifications.xcu").write_text(_PROFILE_XCU, encoding="utf-8")

    def _run(self, files: list[Path], outdir: Path, timeout: float) -> tuple[bool, str]:
        """One soffice process converting ``files`` into ``outdir``; (finished, message)."""
        if not self.soffice:
            raise RecalcUnavailable("LibreOffice (soffice) is not installed; workbooks cannot be recalculated")
        self._ensure_profile()
        cmd = [
            self.soffice,
            f"-env:UserInstallation={self.profile.resolve().as_uri()}",
            "--headless",
            "--norestore",
            "--nolockcheck",
            "--nodefault",
            "--nologo",
            "--convert-to",
            "xlsx:Calc Office Open XML",
            "--outdir",
            str(outdir),
            *[str(f) for f in files],
        ]
        env = dict(os.environ, HOME=str(self.work_dir), SAL_USE_VCLPLUGIN="svp")
        self.processes += 1
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return False, f"LibreOffice did not finish within {timeout:.0f} s"
        return proc.returncode == 0, out.decode("utf-8", "replace")[-500:]

    def recalculate(self, sources: Iterable[Path]) -> dict[Path, Recalculated]:
        """Recalculate every workbook in ``sources``; results keyed by the source path."""
        sources = [Path(s) for s in sources]
        results: dict[Path, Recalculated] = {}
        with self._lock:
            pending: dict[str, list[Path]] = {}
            for src in sources:
                digest = file_digest(src)
                if digest in self._cache:
                    cached = self._cache[digest]
                    results[src] = Recalculated(src, cached.path, cached.error, 0.0)
                else:
                    pending.setdefault(digest, []).append(src)
            if not pending:
                return results
            self.batches += 1
            batch = self.work_dir / f"batch{self.batches:05d}"
            indir, outdir = batch / "in", batch / "out"
            indir.mkdir(parents=True)
            outdir.mkdir()
            staged: dict[str, Path] = {}
            for digest, srcs in pending.items():
                dst = indir / f"w{digest[:24]}.xlsx"
                shutil.copyfile(srcs[0], dst)
                staged[digest] = dst
            t0 = time.perf_counter()
            timeout = self.batch_timeout_s + self.per_file_timeout_s * len(staged)
            _, message = self._run(list(staged.values()), outdir, timeout)
            per_file = (time.perf_counter() - t0) / len(staged)
            for digest, staged_path in staged.items():
                out = outdir / staged_path.name
                if not out.is_file():
                    # Retry alone: the batch timed out or this file stopped it.
                    single = batch / f"single-{digest[:12]}"
                    single.mkdir()
                    t1 = time.perf_counter()
                    ok, msg = self._run([staged_path], single, self.single_timeout_s)
                    out = single / staged_path.name
                    per = time.perf_counter() - t1
                    if not out.is_file():
                        reason = msg if "did not finish" in msg else "LibreOffice could not open or convert it"
                        rec = Recalculated(staged_path, None, f"recalculation failed: {reason}", per)
                    else:
                        rec = Recalculated(staged_path, out, None, per)
                else:
                    rec = Recalculated(staged_path, out, None, per_file)
                self._cache[digest] = rec
                for src in pending[digest]:
                    results[src] = Recalculated(src, rec.path, rec.error, rec.seconds)
        return results

    def close(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> Recalculator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
