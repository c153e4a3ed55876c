"""An attempt's files packed on the worker, returned through dask, unpacked and verified on the study's host.

A dask worker may share no disk with the study's host. When its attempt
ends, :func:`pack_attempt` puts what the study keeps of the attempt's folder
(:data:`KEPT`, an allow-list) into one gzip tar archive with a manifest of
every file's size and sha256; the package travels back as the task's
result; :func:`unpack_attempt` writes it into the host's attempt folder,
refusing any member the manifest does not name as a regular file at a safe
path, and checking every file against the manifest. Everything else of the
attempt (the CLI's own config folder, the scratch home and TMPDIR, the
command stubs, the portal's server log) stays on the worker; the whole
workspace travels, so that the study's copy has the digest the run's record
took of it.

A package never exceeds its limit (``transfer.max_package_mb`` of
``protocol/study.yml``, :attr:`pilot.protocol.Study.transfer_limit_bytes`):
files are taken in :data:`KEPT`'s order, large files last, and a file that
would take the archive over the limit is left on the worker and listed
under ``omitted``; the next files are still tried, so one large deliverable
does not cost the records after it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from pilot import worker_files

#: What the study keeps of an attempt's folder, in the order files go into a package (relative POSIX paths:
#: a file's name, or ``folder/**`` for every regular file below a folder). Names as pilot.runner, pilot.attempt,
#: pilot.workspace and pilot.portal.access_log write them (tests/test_transfer.py holds them to those modules).
KEPT: tuple[str, ...] = (
    # the attempt's own records: its verdict, its outcome, the workspace's manifest, the A4 self-checks
    "run_record.json",
    "evaluation.json",
    "attempt_outcome.json",
    "workspace_manifest.json",
    "selfcheck_first.txt",
    "selfcheck_final.txt",
    ".pilot-run",
    # the runner's phase mark: whether inference began (pilot.attempt)
    "attempt_phase.json",
    # the deliverables and the completion record as the worker left them; A4's checkpoint
    "workspace/outputs/**",
    "workspace/CHECKPOINT.md",
    # the harness's records: launches, stderr, refused connections, the model proxy's usage log and exchanges
    "record/**",
    "portal/portal_access.jsonl",
    # the harness's copy of the event stream
    "transcript.jsonl",
    # the rest of the workspace as left: the inputs (the E check's evidence) and what the harness laid out, so that
    # the study's copy has the digest the record took of the whole workspace (pilot study reevaluate checks it)
    "workspace/**",
)
#: Files larger than this go after every smaller kept file, whatever their place in :data:`KEPT`.
LARGE_FILE_BYTES = 8 * 1024 * 1024
#: The manifest as the host keeps it, in the unpacked folder.
MANIFEST_NAME = "transfer_manifest.json"
#: The reason a transfer's folder was kept apart, inside that folder (:func:`keep_apart`).
REASON_NAME = "transfer_failed.txt"
#: Bounds on the walk of a kept folder, as the input-hash walk has (pilot.oracles.hashing).
MAX_DEPTH = 64
MAX_ENTRIES = 100_000
# zlib's default. On bench_transfer.py's built attempt, level 9 took 2.7 times as long for a package 2% smaller,
# level 1 a third less time for one 13% larger; the package crosses the network, the time is an attempt's least part.
COMPRESS_LEVEL = 6
_BLOCK = tarfile.BLOCKSIZE
_CHUNK = 1024 * 1024


class TransferError(RuntimeError):
    """A package that cannot be taken as the attempt's files; ``path`` names the file (or the folder) at fault."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


@dataclass
class Package:
    """A gzip tar archive of an attempt's kept files and its manifest (plain data: it travels as a dask result).

    ``manifest``: ``{"files": {rel: {"size": n, "sha256": hex}}, "omitted": {rel: reason},
    "skipped": {rel: reason}, "limit_bytes": n, "note": str | None}``; ``files`` in the archive's order.
    """

    data: bytes
    manifest: dict = field(default_factory=dict)


# --------------------------------------------------------------------------
# Packing, on the worker
# --------------------------------------------------------------------------


#: What a rehearsal's scripted model server keeps beside the attempt's folder (``attempt-N.scripted``): its truth,
#: the judges' grades, the branches it played and the requests it refused; the rehearsal report reads them.
SCRIPTED_KEPT: tuple[str, ...] = ("branch.json", "truth.jsonl", "judges.jsonl", "refusals.jsonl")


def _kept_files(attempt_dir: Path, skipped: dict[str, str], kept: tuple[str, ...] = KEPT) -> list[tuple[str, int, int]]:
    """(rel, size, place in KEPT) of every regular file KEPT names; what it names that is not one goes to ``skipped``.

    Read beneath the attempt's folder by the bounded reader (:mod:`pilot.worker_files`): every entry is looked at
    without following a link, and a tree is walked by descriptor (bounded in depth and entries, not by ``PATH_MAX``).
    """
    out: list[tuple[str, int, int]] = []
    seen: set[str] = set()

    def consider(rel: str, place: int, st: os.stat_result) -> bool:
        """Record one entry; True when it is a folder to walk."""
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:  # the manifest is JSON and the archive's names are UTF-8
            skipped[os.fsencode(rel).decode("utf-8", "backslashreplace")] = "a name that is not UTF-8 (not packed)"
            return False
        if stat.S_ISLNK(st.st_mode):
            skipped[rel] = "a symbolic link (not followed, not packed)"
        elif stat.S_ISDIR(st.st_mode):
            return True
        elif stat.S_ISREG(st.st_mode):
            if rel not in seen:
                seen.add(rel)
                out.append((rel, st.st_size, place))
        else:
            skipped[rel] = "a pipe, socket or device, not a regular file"
        return False

    def lstat(folder: worker_files.Folder, rel: str) -> os.stat_result | None:
        try:
            return folder.lstat(rel)
        except worker_files.Refused as exc:
            if exc.kind not in (worker_files.MISSING, worker_files.NOT_A_FOLDER):
                skipped[rel] = f"cannot be read ({exc.reason})"
            return None

    with worker_files.Folder(attempt_dir) as folder:
        for place, pattern in enumerate(kept):
            tree = pattern.endswith("/**")
            rel = pattern[:-3] if tree else pattern
            # Every folder on the way must be a real folder: a link among them would lead outside the attempt.
            parts = PurePosixPath(rel).parts
            reachable = True
            for i in range(1, len(parts)):
                st = lstat(folder, "/".join(parts[:i]))
                if st is None or stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
                    if st is not None and stat.S_ISLNK(st.st_mode):
                        skipped["/".join(parts[:i])] = "a symbolic link (not followed, not packed)"
                    reachable = False
                    break
            st = lstat(folder, rel) if reachable else None
            if st is None:
                continue
            if not tree:
                if consider(rel, place, st):
                    skipped[rel] = "a folder, not a regular file"
                continue
            if not stat.S_ISDIR(st.st_mode):
                skipped[rel] = (
                    "a symbolic link (not followed, not packed)" if stat.S_ISLNK(st.st_mode) else "not a folder"
                )
                continue
            for listing in folder.walk(rel, max_depth=MAX_DEPTH, max_entries=MAX_ENTRIES):
                here = f"{rel}/{listing.rel}" if listing.rel else rel
                if listing.error is not None:
                    skipped[here + "/"] = f"cannot be read ({listing.error})"
                    continue
                for entry in listing.entries:
                    child = f"{rel}/{entry.rel}"
                    if entry.st is None:
                        skipped[child] = f"cannot be read ({entry.error})"
                        continue
                    if consider(child, place, entry.st) and entry.too_deep:
                        skipped[child + "/"] = f"a folder tree deeper than {MAX_DEPTH} levels (not read further)"
                if listing.truncated:
                    skipped[here + "/"] = f"more than {MAX_ENTRIES} entries under {rel}/ (not read further)"
    return out


def _member_bytes(rel: str, size: int) -> int:
    """The most a file takes in the uncompressed archive:
    its header, a PAX header when it needs one, its padded data."""
    name = rel.encode("utf-8")
    pax = 0
    if len(name) > 100 or not rel.isascii() or size >= 8**11:
        pax = _BLOCK + -(-(len(name) + 64) // _BLOCK) * _BLOCK
    return _BLOCK + pax + -(-size // _BLOCK) * _BLOCK


def _bound(tar_bytes: int) -> int:
    """The most gzip makes of ``tar_bytes`` (zlib's deflateBound, the end of the archive,
    the gzip header and trailer)."""
    t = tar_bytes + 2 * _BLOCK + tarfile.RECORDSIZE
    return t + (t >> 12) + (t >> 14) + (t >> 25) + 64


class _Changed(Exception):
    def __init__(self, rel: str, reason: str) -> None:
        self.rel, self.reason = rel, reason


class _Hashing:
    """A reader that hashes what it hands on, so the manifest holds the bytes the archive holds."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.sha, self.n = fh, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        b = self.fh.read(n)
        self.sha.update(b)
        self.n += len(b)
        return b


def _archive(attempt_dir: Path, chosen: list[str]) -> tuple[bytes, dict[str, dict[str, Any]]]:
    buf = io.BytesIO()
    files: dict[str, dict[str, Any]] = {}
    with (
        worker_files.Folder(attempt_dir) as folder,
        tarfile.open(fileobj=buf, mode="w:gz", compresslevel=COMPRESS_LEVEL, format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in chosen:
            # Beneath the attempt's folder, no link followed, a regular file only (never waited on: O_NONBLOCK).
            try:
                fd, st = folder.open_file(rel, max_bytes=None)
            except worker_files.Refused as exc:
                raise _Changed(rel, f"changed while it was packed ({exc.reason})") from None
            with os.fdopen(fd, "rb") as fh:
                info = tarfile.TarInfo(rel)
                # Owner and mode are the worker's and mean nothing on the host; the mtime is kept.
                info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), 0o644
                reader = _Hashing(fh)
                try:
                    tar.addfile(info, reader)
                except OSError as exc:  # the file shrank under the archive
                    raise _Changed(rel, f"changed while it was packed ({exc})") from None
            files[rel] = {"size": reader.n, "sha256": reader.sha.hexdigest()}
    return buf.getvalue(), files


def pack_attempt(attempt_dir: Path, *, limit_bytes: int, kept: tuple[str, ...] = KEPT) -> Package:
    """The package of what the study keeps of ``attempt_dir`` (:data:`KEPT`), never more than ``limit_bytes``.

    Regular files only: a link or a special file that KEPT names is listed
    under ``skipped`` with the reason; a file past the limit under
    ``omitted`` with ``over the package limit of N bytes``, and ``note``
    says how much was left on the worker.
    """
    attempt_dir = Path(attempt_dir)
    if not isinstance(limit_bytes, int) or isinstance(limit_bytes, bool) or limit_bytes < 1:
        raise ValueError(f"limit_bytes: must be a positive number of bytes, got {limit_bytes!r}")
    if not attempt_dir.is_dir():
        raise TransferError(attempt_dir, "the attempt's folder is missing")
    skipped: dict[str, str] = {}
    found = _kept_files(attempt_dir, skipped, kept)
    found.sort(key=lambda f: (f[1] > LARGE_FILE_BYTES, f[2], f[0]))
    over = f"over the package limit of {limit_bytes} bytes"
    omitted: dict[str, str] = {}
    sizes = {rel: size for rel, size, _ in found}
    while True:
        chosen, tar_bytes = [], 0
        for rel, size, _ in found:
            if rel in skipped or rel in omitted:
                continue
            cost = _member_bytes(rel, size)
            if _bound(tar_bytes + cost) <= limit_bytes:
                chosen.append(rel)
                tar_bytes += cost
            else:
                omitted[rel] = over
        try:
            data, files = _archive(attempt_dir, chosen)
        except _Changed as exc:
            skipped[exc.rel] = exc.reason
            omitted.clear()
            continue
        if len(data) <= limit_bytes:
            break
        # The bound holds for any bytes; this is the guarantee should a tar or zlib version ever write more.
        if not chosen:
            raise ValueError(
                f"limit_bytes: {limit_bytes} bytes is below the size of an empty package ({len(data)} bytes)"
            )
        omitted[chosen[-1]] = over
    note = None
    if omitted:
        left = sum(sizes[r] for r in omitted)
        note = (
            f"{len(omitted)} of {len(found)} kept files ({left} bytes) left on the worker in {attempt_dir}: "
            f"{over} (transfer.max_package_mb in protocol/study.yml); they are listed under omitted"
        )
    manifest = {
        "files": files,
        "omitted": dict(sorted(omitted.items())),
        "skipped": dict(sorted(skipped.items())),
        "limit_bytes": limit_bytes,
        "note": note,
    }
    return Package(data=data, manifest=manifest)


# --------------------------------------------------------------------------
# Unpacking, on the study's host
# --------------------------------------------------------------------------


def _unsafe(name: str) -> str | None:
    """Why a member name cannot be written under the destination; None when it can."""
    if not name or "\0" in name:
        return "an empty name or one holding a NUL"
    if name.startswith("/") or PurePosixPath(name).is_absolute():
        return "an absolute name"
    parts = name.split("/")
    if ".." in parts:
        return "a name holding '..'"
    if any(p in ("", ".") for p in parts):
        return "a name with an empty or '.' part"
    if name == MANIFEST_NAME:
        return f"the name of the host's own {MANIFEST_NAME}"
    return None


def _checked_manifest(pkg: Package, dest: Path) -> dict[str, dict[str, Any]]:
    m = pkg.manifest
    if not isinstance(m, dict) or not isinstance(m.get("files"), dict):
        raise TransferError(dest, "the package's manifest has no 'files' mapping")
    for key in ("omitted", "skipped"):
        if not isinstance(m.get(key, {}), dict):
            raise TransferError(dest, f"the package's manifest field '{key}' is not a mapping")
    limit = m.get("limit_bytes")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise TransferError(
            dest, f"the package's manifest field 'limit_bytes' is not a positive number of bytes ({limit!r})"
        )
    if len(pkg.data) > limit:
        raise TransferError(dest, f"the package is {len(pkg.data)} bytes, over its manifest's limit of {limit} bytes")
    files = m["files"]
    for rel, entry in files.items():
        why = _unsafe(rel) if isinstance(rel, str) else "not a text name"
        if why:
            raise TransferError(str(rel), f"refused: the manifest names {why}")
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("size"), int)
            or entry["size"] < 0
            or not isinstance(entry.get("sha256"), str)
            or len(entry["sha256"]) != 64
            or set(entry["sha256"]) - set("0123456789abcdef")
        ):
            raise TransferError(rel, "the manifest's entry is not {size: bytes, sha256: 64 hex digits}")
    if sum(e["size"] for e in files.values()) > limit:
        raise TransferError(dest, f"the manifest's files come to more than its limit of {limit} bytes")
    return files


def _refusal(member: tarfile.TarInfo) -> str | None:
    if member.issym() or member.islnk():
        return "refused: a link"
    if member.ischr() or member.isblk() or member.isfifo():
        return "refused: a device or pipe"
    if member.isdir():
        return "refused: a folder entry (a package holds regular files only)"
    if not member.isreg():
        return "refused: not a regular file"
    return None


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> tuple[int, str]:
    target.parent.mkdir(parents=True, exist_ok=True)
    src = tar.extractfile(member)
    assert src is not None  # a regular member always has a file object
    sha = hashlib.sha256()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        while chunk := src.read(_CHUNK):
            out.write(chunk)
            sha.update(chunk)
        out.flush()
        # The size the file has on disk, which must be the bytes hashed on their way there.
        n = os.fstat(out.fileno()).st_size
    os.utime(target, (member.mtime, member.mtime))
    return n, sha.hexdigest()


def unpack_attempt(pkg: Package, dest: Path) -> dict:
    """Write the package's files into ``dest`` (absent or empty) and return its manifest, or raise
    :class:`TransferError`.

    Only the regular files the manifest names are written; any member with an
    absolute name, a ``..``, a link, a device or a name the manifest does not
    hold is refused, naming it. Every file's size and sha256 are checked as it
    is written (the first that differs is named), and every file the manifest
    names must be in the archive. The files are written into a temporary
    folder beside ``dest``, which becomes ``dest`` (with the manifest as
    ``transfer_manifest.json``) only when all of them are in and verified; on
    any failure it is removed, so ``dest`` is never left half unpacked.
    """
    dest = Path(dest)
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise TransferError(dest, "the destination exists and is not an empty folder")
    files = _checked_manifest(pkg, dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.unpacking-", dir=dest.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp's private mode would become the attempt folder's
        seen: set[str] = set()
        try:
            with tarfile.open(fileobj=io.BytesIO(pkg.data), mode="r:gz") as tar:
                for member in tar:
                    name = member.name
                    why = _unsafe(name)
                    if why:
                        raise TransferError(name, f"refused: {why}")
                    why = _refusal(member)
                    if why:
                        raise TransferError(name, why)
                    if name not in files:
                        raise TransferError(name, "refused: not in the package's manifest")
                    if name in seen:
                        raise TransferError(name, "refused: it appears twice in the archive")
                    seen.add(name)
                    want = files[name]
                    if member.size != want["size"]:
                        raise TransferError(
                            name, f"size differs from the manifest's ({want['size']} bytes, archive {member.size})"
                        )
                    try:
                        n, digest = _write_member(tar, member, tmp / name)
                    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
                        raise TransferError(
                            name, f"cannot be read from the package or written ({type(exc).__name__}: {exc})"
                        ) from None
                    if n != want["size"]:
                        raise TransferError(
                            name, f"size differs from the manifest's ({want['size']} bytes, written {n})"
                        )
                    if digest != want["sha256"]:
                        raise TransferError(
                            name,
                            f"sha256 differs from the manifest's (manifest {want['sha256'][:12]}…, received "
                            f"{digest[:12]}…)",
                        )
        except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
            raise TransferError(
                dest, f"the package is not a readable gzip tar archive ({type(exc).__name__}: {exc})"
            ) from None
        missing = sorted(set(files) - seen)
        if missing:
            raise TransferError(missing[0], f"in the manifest but not in the archive ({len(missing)} file(s) missing)")
        manifest = json.loads(json.dumps(pkg.manifest))
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        try:
            os.rename(tmp, dest)  # replaces an empty folder; refuses one that filled meanwhile
        except OSError as exc:
            raise TransferError(dest, f"cannot move the unpacked files into place ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def keep_apart(dest: Path, reason: str, *, package: Package | None = None) -> Path:
    """Move a failed transfer's folder to ``<name>.transfer-failed-<n>`` beside it, with ``reason`` in
    ``transfer_failed.txt``.

    ``n`` is the first number not yet used. A ``dest`` that does not exist
    (an unpack that failed leaves none) gives a folder with the reason
    alone; with ``package`` the archive and its manifest are kept there too
    (``package.tar.gz``, ``package_manifest.json``), for inspection.
    """
    dest = Path(dest)
    n = 1
    while (target := dest.with_name(f"{dest.name}.transfer-failed-{n}")).exists() or target.is_symlink():
        n += 1
    if dest.is_dir() and not dest.is_symlink():
        os.rename(dest, target)
    else:
        target.mkdir(parents=True)
        if dest.exists() or dest.is_symlink():
            os.rename(dest, target / dest.name)
    (target / REASON_NAME).write_text(reason.rstrip("\n") + "\n", encoding="utf-8")
    if package is not None:
        (target / "package.tar.gz").write_bytes(package.data)
        (target / "package_manifest.json").write_text(
            json.dumps(package.manifest, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8"
        )
    return target
