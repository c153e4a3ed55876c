"""The run's own computer: an allow-listed mount namespace with no network but bridged sockets.

The CLI's deny rules stop ``curl`` typed as a command but not ``bash -c 'curl'``,
``eval``, a Python subprocess or a ``ctypes`` call into a library
(``shared/reference/claude-code.md``). Every real attempt therefore runs
under bubblewrap in namespaces of its own (mount, PID, network, IPC, UTS),
built from nothing, in the manner of Anthropic's ``sandbox-runtime``:

* read-only: the system trees a worker needs (``/usr`` and the ``/bin``,
  ``/lib*`` links or folders), a short list of ``/etc`` files, the CLI's own
  folder and the worker's Python environment with its base interpreter;
* read-write: the run's workspace and the per-run scratch ``HOME``,
  ``TMPDIR`` and CLI config folder, nothing else;
* fresh ``/proc``, a minimal ``/dev``, a private ``/tmp`` and ``/var/tmp``;
* install trees of features the arm lacks (LibreOffice, Chromium) covered by
  an empty read-only tmpfs, so neither a program nor a library of them exists;
* the arm's denied program families covered by a refusing stub bound
  read-only from a folder the agent cannot see, so each attempt still says
  which family it was;
* ``--unshare-net``: the only ways out are Unix sockets bound in at
  :data:`SOCKET_DIR` and bridged to loopback ports inside by ``socat``
  (the model proxy; for the portal arms their own run's portal; a refusing
  HTTP proxy that logs every other destination a program asks for).

Nothing else of the host exists inside: no checkout, no other run or study,
no operator home, no host ``/tmp``. On macOS the same allow-list is a
``sandbox-exec`` profile (:func:`macos_profile`); it is generated and tested
as text on Linux.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

# The pieces every bubblewrap confinement shares live one floor down; their names stay reachable from here.
from pilot.bubblewrap import (  # noqa: F401
    ETC_ENTRIES,
    PRIVILEGE_FLAGS,
    STAGE_DIR,
    SYSTEM_TREES,
    BindStage,
    bwrap_problems,
    map_binds,
    stage_binds,
    system_layout,
)

STUB_MARKER = "denied by the study protocol"

#: Where the bridged Unix sockets appear inside the sandbox.
SOCKET_DIR = "/run/pilot"

#: Install trees of each arm feature: bound (they are under /usr) when the arm has the feature, absent when not.
FEATURE_TREES: dict[str, tuple[str, ...]] = {
    "libreoffice": ("/usr/lib/libreoffice", "/etc/libreoffice", "/usr/share/libreoffice"),
    "chromium": ("/usr/lib/chromium", "/etc/chromium", "/etc/chromium.d", "/usr/share/chromium"),
}

#: /etc entries that only the arms with the feature get.
FEATURE_ETC: dict[str, tuple[str, ...]] = {
    "libreoffice": ("/etc/libreoffice",),
    "chromium": ("/etc/chromium", "/etc/chromium.d"),
}


def stub_text(family: str) -> str:
    """The refusing stub of one denied family; it names the family whatever name it is called by."""
    return f"""#!/bin/sh
# Stands in for a program the arm denies; bound read-only over it in the run's mount namespace.
echo "{family}: not available in this environment ({STUB_MARKER})" >&2
exit 126
"""


@dataclass(frozen=True)
class Bridge:
    """A Unix socket of the harness bound into the sandbox and served on a loopback port inside."""

    name: str
    host_socket: str
    port: int
    #: The harness-side loopback port of the same service (macOS, where no namespace holds the socket).
    host_port: int | None = None

    @property
    def inside_socket(self) -> str:
        return f"{SOCKET_DIR}/{self.name}.sock"


@dataclass(frozen=True)
class SandboxPlan:
    """Everything the run's namespace holds, as data (recorded on the run)."""

    ro_binds: tuple[str, ...] = ()
    rw_binds: tuple[str, ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()
    absent: tuple[str, ...] = ()
    #: masked program path -> the stub file bound over it
    stubs: tuple[tuple[str, str], ...] = ()
    bridges: tuple[Bridge, ...] = ()
    tool: str = "bwrap"
    #: Files of the harness shown read-only at another path inside (source, inside path): the worker's shell wrapper.
    ro_mapped: tuple[tuple[str, str], ...] = ()
    #: Folders of the harness shown read-write at another path inside (source, inside path): the CLI's config folder.
    rw_mapped: tuple[tuple[str, str], ...] = ()

    @property
    def masked(self) -> tuple[str, ...]:
        return tuple(dst for dst, _ in self.stubs)

    def to_dict(self) -> dict:
        return {
            "tool": self.tool,
            "read_only": list(self.ro_binds),
            "read_write": list(self.rw_binds),
            "symlinks": {dst: target for dst, target in self.symlinks},
            "absent": list(self.absent),
            "masked": {dst: src for dst, src in self.stubs},
            "read_only_at": {dst: src for src, dst in self.ro_mapped},
            "read_write_at": {dst: src for src, dst in self.rw_mapped},
            "bridges": [{"name": b.name, "socket": b.inside_socket, "port": b.port} for b in self.bridges],
            "network": "none (own network namespace); bridged sockets only",
        }


def program_paths(name: str, path_dirs: list[str]) -> list[str]:
    """Every file a program name can be reached at from ``path_dirs``.

    Each directory's hit (when it is not a symlink), the file it resolves to
    (``/usr/bin/soffice`` -> ``/usr/lib/libreoffice/program/soffice``) and a
    ``.bin`` companion beside that file, so that calling the real binary by
    its full path meets the stub too.
    """
    found: list[str] = []
    for d in path_dirs:
        candidate = Path(d) / name
        if not (candidate.exists() and os.access(candidate, os.X_OK) and candidate.is_file()):
            continue
        real = candidate.resolve()
        for p in (candidate, real, real.with_name(real.name + ".bin")):
            if p.is_file() and not p.is_symlink() and str(p) not in found:
                found.append(str(p))
    return found


def canonical(path: str) -> str:
    """``path`` with its folder resolved (/bin is /usr/bin on merged-/usr systems): one bind covers both."""
    return os.path.realpath(os.path.dirname(path)) + "/" + os.path.basename(path)


def write_stubs(directory: Path, families: list[str]) -> dict[str, Path]:
    """Write one refusing stub per denied family; family -> stub file."""
    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for family in families:
        stub = directory / family
        stub.unlink(missing_ok=True)  # read-only once written: a later launch replaces it rather than writing through
        stub.write_text(stub_text(family), encoding="utf-8")
        stub.chmod(0o555)
        out[family] = stub
    return out


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def make_plan(
    *,
    features: dict[str, bool],
    extra_ro: list[Path],
    rw: list[Path],
    masked: dict[str, list[str]],
    stub_dir: Path,
    bridges: list[Bridge] = (),  # type: ignore[assignment]
) -> SandboxPlan:
    """Assemble the allow-list: system trees, /etc entries, ``extra_ro``, ``rw``, absent trees, stubs and bridges.

    ``features`` says which optional trees (:data:`FEATURE_TREES`) the arm
    has; ``masked`` maps each denied family to the program paths it is
    reached at (:func:`program_paths`).
    """
    binds, links = system_layout()
    ro: list[str] = list(binds)
    for entry in ETC_ENTRIES:
        if os.path.lexists(entry) and entry not in ro:
            ro.append(entry)
    absent: list[str] = []
    for feature, trees in FEATURE_TREES.items():
        if features.get(feature):
            ro.extend(e for e in FEATURE_ETC.get(feature, ()) if os.path.exists(e) and e not in ro)
        else:
            absent.extend(t for t in trees if os.path.isdir(t))
    for p in extra_ro:
        # Kept even when not written yet (the settings file is written just before the launch).
        s = str(Path(p).resolve())
        if not _under(s, ro):
            ro.append(s)
    rw_s: list[str] = []
    for p in rw:
        s = str(Path(p).resolve())
        if s not in rw_s:
            rw_s.append(s)
    stubs: list[tuple[str, str]] = []
    for family, hits in masked.items():
        for h in hits:
            dst = canonical(h)
            if dst not in {d for d, _ in stubs}:
                stubs.append((dst, str(Path(stub_dir) / family)))
    return SandboxPlan(tuple(ro), tuple(rw_s), tuple(links), tuple(absent), tuple(stubs), tuple(bridges))


def bridge_script(bridges: tuple[Bridge, ...], socat: str = "socat") -> str:
    """The shell run first inside the sandbox: one ``socat`` listener per bridge, wait until each listens, exec the
    agent."""
    lines = ["set -e"]
    for b in bridges:
        lines.append(
            f"{socat} TCP-LISTEN:{b.port},bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:{b.inside_socket} </dev/null "
            ">/dev/null 2>&1 &"
        )
    for b in bridges:
        # /proc/net/tcp lists a listening loopback socket as 0100007F:<port hex> with state 0A.
        lines.append(
            f'n=0; until grep -q ":{b.port:04X} 00000000:0000 0A" /proc/net/tcp; do n=$((n+1)); '
            f'[ $n -lt 500 ] || {{ echo "pilot-sandbox: bridge {b.name} did not listen" >&2; exit 125; }}; sleep 0.01; '
            "done"
        )
    lines.append('exec "$@"')
    return "\n".join(lines)


#: The private tmpfs folders of a sandbox; each has a size (host RAM) from study.yml sandbox.limits.tmp_mb. /dev/shm is
#: mounted over the folder bubblewrap's /dev makes (that /dev's own tmpfs has no size and is made read-only).
SCRATCH_TMPFS = ("/tmp", "/var/tmp", "/run", "/dev/shm")
#: The size of each empty tmpfs over an absent install tree (read-only; it holds only the mount points of stubs).
ABSENT_TMPFS_BYTES = 64 * 1024


def bwrap_prefix(
    plan: SandboxPlan, bwrap: str = "bwrap", chdir: Path | None = None, tmp_bytes: int | None = None
) -> list[str]:
    """The bubblewrap command line that builds ``plan`` before running the agent.

    Order matters: the fresh /proc, /dev, /tmp (and the other scratch tmpfs, each of ``tmp_bytes``) first,
    then system trees, /etc entries and the extra read-only binds, then the read-write binds, then the empty
    tmpfs over absent trees, the stubs over masked programs (a stub may sit inside an absent tree) and last
    the remounts that make the absent trees, bubblewrap's unsized /dev and the root read-only.
    bubblewrap covers ``/proc/sys``, ``/proc/sysrq-trigger``, ``/proc/irq``
    and ``/proc/bus`` of the fresh /proc read-only itself; with no capability
    inside, no mount can be undone.
    """
    argv = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        *PRIVILEGE_FLAGS,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "pilot-sandbox",
    ]
    # The private /tmp first: a run folder under the host's /tmp is bound over it afterwards.
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for t in SCRATCH_TMPFS:
        if tmp_bytes is not None:
            argv += ["--size", str(int(tmp_bytes))]
        argv += ["--tmpfs", t]
    for dst, target in plan.symlinks:
        argv += ["--symlink", target, dst]
    for p in plan.ro_binds:
        argv += ["--ro-bind", p, p]
    for p in plan.rw_binds:
        argv += ["--bind", p, p]
    for b in plan.bridges:
        argv += ["--bind", b.host_socket, b.inside_socket]
    for src, dst in plan.rw_mapped:
        argv += ["--bind", src, dst]
    for src, dst in plan.ro_mapped:
        argv += ["--ro-bind", src, dst]
    for t in plan.absent:
        argv += ["--size", str(ABSENT_TMPFS_BYTES), "--tmpfs", t]
    for dst, src in plan.stubs:
        argv += ["--ro-bind", src, dst]
    for t in plan.absent:
        argv += ["--remount-ro", t]
    # bubblewrap's /dev is a tmpfs without a size: read-only; its devices still answer, /dev/shm (above) takes writes.
    argv += ["--remount-ro", "/dev"]
    # The root that holds the mount points is read-only too: nothing but the allowed folders takes a write.
    argv += ["--remount-ro", "/"]
    if chdir is not None:
        argv += ["--chdir", str(chdir)]
    argv.append("--")
    if plan.bridges:
        argv += ["/bin/sh", "-c", bridge_script(plan.bridges), "pilot-sandbox"]
    return argv


def _sb_quote(p: str) -> str:
    return p.replace("\\", "\\\\").replace('"', '\\"')


def macos_profile(plan: SandboxPlan) -> str:
    """The same allow-list as a ``sandbox-exec`` (SBPL) profile for macOS nodes.

    Deny by default; reads only in the allowed trees, writes only in the
    read-write ones; no network but the bridged Unix sockets (on macOS the
    harness's sockets themselves, there being no namespace to bind them
    into); the masked programs may not be executed.
    """
    lines = [
        "(version 1)",
        "(deny default)",
        '(import "system.sb")',
        "(allow process-fork)",
        "(allow signal (target same-sandbox))",
        "(allow sysctl-read)",
        "(allow mach-lookup)",
        "(allow ipc-posix-shm)",
        '(allow file-read-metadata (literal "/"))',
        '(allow file-read* file-write* (literal "/dev/null") (literal "/dev/tty") (literal "/dev/zero"))',
        '(allow file-read* (literal "/dev/urandom") (literal "/dev/random"))',
        '(allow process-exec (subpath "/usr") (subpath "/bin") (subpath "/sbin"))',
    ]
    for p in plan.ro_binds:
        lines.append(f'(allow file-read* (subpath "{_sb_quote(p)}"))')
        lines.append(f'(allow process-exec (subpath "{_sb_quote(p)}"))')
    for p in plan.rw_binds:
        lines.append(f'(allow file-read* file-write* (subpath "{_sb_quote(p)}"))')
        lines.append(f'(allow process-exec (subpath "{_sb_quote(p)}"))')
    for b in plan.bridges:
        lines.append(f'(allow network-outbound (remote unix-socket (path-literal "{_sb_quote(b.host_socket)}")))')
        if b.host_port:
            lines.append(f'(allow network-outbound (remote ip "localhost:{b.host_port}"))')
    # Denials come last: in SBPL the last matching rule wins.
    for t in plan.absent:
        lines.append(f'(deny file-read* process-exec (subpath "{_sb_quote(t)}"))')
    for dst in plan.masked:
        lines.append(f'(deny process-exec (literal "{_sb_quote(dst)}"))')
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Can this host isolate a run?
# --------------------------------------------------------------------------


class IsolationUnavailable(RuntimeError):
    """The host cannot build an arm's isolation; the message names what is missing and how to install it."""


def bwrap_available() -> str | None:
    """Path of the bubblewrap binary on a Linux host, else None."""
    if platform.system() != "Linux":
        return None
    return shutil.which("bwrap")


def enforcement_method() -> str:
    """Name of the isolation this host offers."""
    if platform.system() == "Linux":
        return "bubblewrap"
    if platform.system() == "Darwin":
        return "sandbox-exec"
    return "none"


@functools.lru_cache(maxsize=1)
def isolation_problems() -> tuple[str, ...]:
    """What this host lacks to isolate a run, each with how to install it (empty when nothing)."""
    system = platform.system()
    if system == "Darwin":
        return () if shutil.which("sandbox-exec") else ("sandbox-exec is missing (it ships with macOS in /usr/bin)",)
    if system != "Linux":
        return (f"no supported isolation on {system}: real runs need Linux (bubblewrap) or macOS (sandbox-exec)",)
    # bubblewrap itself and its unprivileged user namespace (what every confinement needs), then the bridges and
    # Landlock, which the agent's sandbox alone needs.
    problems = list(bwrap_problems())
    if shutil.which("socat") is None:
        problems.append(
            "socat is not installed (it bridges the model proxy and the portal into the sandbox): "
            "run `tools/ensure-system-packages.sh sandbox` (or `apt-get install socat`)"
        )
    from pilot.agents.shell_scope import landlock_abi

    disk = _bounded_disk_problem()
    if disk:
        problems.append(disk)
    if landlock_abi() < 1:
        problems.append(
            "the kernel offers no Landlock (Linux 5.13 or later with landlock in its lsm= list): without it the "
            "worker's programs could reach the CLI's memory and descriptors"
        )
    # What the worker delivers is recalculated and rendered by a confined LibreOffice (pilot.confined): a root
    # harness needs its renderer user too.
    from pilot import confined

    problems.extend(p for p in confined.problems() if p not in problems)
    return tuple(problems)


def _bounded_disk_problem() -> str | None:
    """Why this harness cannot hold a session's disk bound by a size-limited tmpfs of its own, or None."""
    import tempfile

    from pilot.agents.bounded_disk import BoundedDiskError, SessionDisk

    with tempfile.TemporaryDirectory(prefix="pilot-disk-probe-") as tmp:
        try:
            SessionDisk.create(Path(tmp), 64 * 1024, entries=16).close()
        except BoundedDiskError as exc:
            return (
                f"{exc}: the workspace disk bound is held by a size-limited tmpfs in a mount namespace of the "
                "harness's own (a root harness needs CAP_SYS_ADMIN; an unprivileged one, user namespaces)"
            )
    return None


def require_isolation() -> None:
    """Raise :class:`IsolationUnavailable` naming what is missing, when the host cannot isolate a run."""
    problems = isolation_problems()
    if problems:
        raise IsolationUnavailable(
            "this host cannot isolate an agent run: "
            + "; ".join(problems)
            + ". Install what is missing, or pass --allow-unisolated for development only (recorded on the run; "
            "the analysis refuses such runs unless told otherwise)."
        )
