"""LibreOffice headless on worker files: from neutralised private copies, confined, its output taken back by copy.

One conversion (:func:`convert`) is one ``soffice --convert-to`` process for
any number of files, run by :func:`pilot.confined.run`: it sees the system
trees, LibreOffice's own, the files it is given and a private profile, and
writes only its output folder. The files are the harness's copies
(:func:`stage`: copied through the wall, then made inert by
:func:`pilot.office_links.neutralise`), never the worker's folder; what it
produces comes back through :func:`adopt`, a bounded copy that follows no link.

The profile is private to each process: a pristine template, made once per
harness process by a LibreOffice that opened nothing (:func:`profile_seed`),
is copied into the run's private tmpfs before ``soffice`` starts, so no
document ever leaves anything in a profile another document meets. Its
settings (``registrymodifications.xcu``) are the caller's: the oracle's and
the renderer's forbid macros and link updates (see
:data:`pilot.oracles.selfcheck_tool.RECALC_PROFILE_XCU`).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from pilot import confined
from pilot.office_links import Neutralised, neutralise

#: LibreOffice's own configuration outside its install tree (Debian keeps ``sofficerc`` links there).
LIBREOFFICE_ETC = ("/etc/libreoffice",)
#: The longest a template profile may take to make (it opens no document).
SEED_TIMEOUT_S = 60.0
#: LibreOffice's environment: the headless "svp" plugin, no desktop integration.
SOFFICE_ENV = {"SAL_USE_VCLPLUGIN": "svp"}

_seed_lock = threading.Lock()
_seeds: dict[tuple[str, str], Path] = {}
_seed_root: list[Path] = []


def stage(src: Path, dst: Path, max_bytes: int) -> list[Neutralised]:
    """Copy the worker's file ``src`` to the harness's ``dst`` through the wall, and make the copy inert.

    Raises :class:`pilot.confined.UnsafeFile` (a link, not a regular file, too large) or
    :class:`pilot.office_links.Refused` (cannot be made inert); ``dst`` is then removed.
    """
    confined.copy_regular(src, dst, max_bytes)
    try:
        return neutralise(dst)
    except BaseException:
        Path(dst).unlink(missing_ok=True)
        raise


def adopt(produced: Path, dst: Path, max_bytes: int) -> Path:
    """What the helper wrote at ``produced``, copied into a new file of the harness at ``dst`` (replacing it)."""
    dst = Path(dst)
    part = dst.with_name(f".{dst.name}.adopting")
    part.unlink(missing_ok=True)
    confined.copy_regular(produced, part, max_bytes)
    os.replace(part, dst)
    return dst


def libreoffice_binds(soffice: str) -> list[Path]:
    """What LibreOffice needs beyond the system trees, to bind read-only: its ``/etc`` folder, and the ``soffice``
    program's install folder (or the file itself) when it lies outside them."""
    out = [Path(p) for p in LIBREOFFICE_ETC if os.path.isdir(p)]
    for p in sorted({Path(soffice), Path(os.path.realpath(soffice))}):
        if not str(p).startswith(("/usr/", "/bin/", "/sbin/", "/lib")):
            out.append(p.parent.parent if p.parent.name == "program" else p)
    return out


def _seeds_folder() -> Path:
    if not _seed_root:
        root = Path(tempfile.mkdtemp(prefix="pilot-office-profiles-"))
        os.chmod(root, 0o711)  # the renderer user walks to the template it reads
        _seed_root.append(root)
        maker = os.getpid()

        # Removed when the process that made it exits (a forked child that exits normally leaves it to its parent).
        def remove() -> None:
            if os.getpid() == maker:
                shutil.rmtree(root, ignore_errors=True)

        atexit.register(remove)
    return _seed_root[0]


def _sound_template(folder: Path) -> bool:
    """Whether LibreOffice left a template with its settings file as a plain file (nothing else is trusted)."""
    try:
        st = os.lstat(folder / "user" / "registrymodifications.xcu")
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode)


def profile_seed(soffice: str, settings_xcu: str, *, timeout_s: float = SEED_TIMEOUT_S) -> Path:
    """The profile every conversion with ``soffice`` and these settings starts from (made once per process).

    A LibreOffice that opens no document (``--terminate_after_init``) makes
    it, confined as every conversion is. When it cannot (a broken or missing
    program), the seed is the settings file alone, and each conversion then
    makes its own profile from it.
    """
    key = (soffice, hashlib.sha256(settings_xcu.encode()).hexdigest())
    with _seed_lock:
        if key in _seeds:
            return _seeds[key]
        root = _seeds_folder()
        # A name of its own: a forked child shares the folder but not the parent's later seeds, so a count of this
        # process's seeds could name a folder the parent made after the fork.
        bare = Path(tempfile.mkdtemp(prefix="settings-", dir=root))
        n = bare.name.removeprefix("settings-")
        (bare / "user").mkdir()
        (bare / "user" / "registrymodifications.xcu").write_text(settings_xcu, encoding="utf-8")
        for p in (bare, bare / "user"):
            os.chmod(p, 0o755)
        template = root / f"template-{n}"
        template.mkdir()
        seed = bare
        try:
            done = _run_soffice(
                soffice,
                bare,
                template / "profile",
                ["--terminate_after_init"],
                read_only=[],
                writable=template,
                scratch=root / f"scratch-{n}",
                limits=confined.Limits(wall_s=timeout_s),
            )
            if done.ok and _sound_template(template / "profile"):
                seed = template / "profile"
        except OSError:
            pass  # the program could not start: conversions make their own profile, and say why they fail
        _seeds[key] = seed
        return seed


def _run_soffice(
    soffice: str,
    seed: Path,
    profile: Path,
    args: Sequence[str],
    *,
    read_only: Sequence[Path],
    writable: Path | None,
    scratch: Path,
    limits: confined.Limits,
) -> confined.Completed:
    """``soffice args``, its profile first copied from ``seed`` to ``profile`` (paths as the helper sees them)."""
    argv = [
        "/bin/sh",
        "-c",
        'cp -R "$1" "$2" || exit 121; shift 2; exec "$@"',
        "pilot-office",
        str(seed),
        str(profile),
        soffice,
        f"-env:UserInstallation={profile.as_uri()}",
        "--headless",
        "--norestore",
        "--nolockcheck",
        "--nodefault",
        "--nologo",
        *args,
    ]
    return confined.run(
        argv,
        read_only=[*read_only, seed, *libreoffice_binds(soffice)],
        writable=writable,
        scratch=scratch,
        limits=limits,
        env=SOFFICE_ENV,
    )


def convert(
    files: Sequence[Path],
    outdir: Path,
    *,
    target: str,
    soffice: str,
    settings_xcu: str,
    scratch: Path,
    limits: confined.Limits,
) -> confined.Completed:
    """Convert ``files`` (the harness's staged copies) to ``target`` into ``outdir``, in one confined LibreOffice.

    ``outdir`` is a fresh, empty folder of the harness; ``scratch`` a path
    that does not exist yet (the run's private HOME and profile). Raises
    :class:`pilot.confined.ConfinementUnavailable` when the host cannot
    confine it and nobody opted out.
    """
    seed = profile_seed(soffice, settings_xcu, timeout_s=min(SEED_TIMEOUT_S, limits.wall_s))
    scratch = Path(scratch).absolute()
    return _run_soffice(
        soffice,
        seed,
        scratch / "profile",
        ["--convert-to", target, "--outdir", str(Path(outdir).absolute()), *[str(Path(f).absolute()) for f in files]],
        read_only=[Path(f).absolute() for f in files],
        writable=Path(outdir),
        scratch=scratch,
        limits=limits,
    )
