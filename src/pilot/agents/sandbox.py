"""The second layer of an arm's denials: the agent runs in its own mount namespace.

The CLI's deny rules stop ``curl`` typed as a command but not ``bash -c 'curl'``,
``eval`` or a Python subprocess (``shared/reference/claude-code.md``). On
Linux the whole agent process therefore runs under bubblewrap, in a mount and
PID namespace of its own, where

* every path of a denied program (each hit on the worker's ``PATH``, the file
  it resolves to, and a ``<name>.bin`` beside it, as LibreOffice ships) is
  covered read-only by a stub that refuses to run and says why;
* folders the worker must not reach (the repository with its oracles,
  rubrics and solvers, the other runs, the operator's home) are covered by an
  empty tmpfs, and only what the run needs is bound back.

On macOS (the A2 nodes) the same plan is written as a ``sandbox-exec``
profile (:func:`macos_profile`) that denies ``process-exec`` of the masked
paths and ``file-read*`` of the hidden folders; it is generated and recorded
here but was not executed on this Linux build host.
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

STUB_MARKER = "denied by the study protocol"

STUB_TEXT = f"""#!/bin/sh
# Stands in for a program the arm denies; bound over it in the run's mount namespace.
echo "$(basename "$0"): not available in this environment ({STUB_MARKER})" >&2
exit 126
"""


@dataclass(frozen=True)
class SandboxPlan:
    """What the run's mount namespace changes, as data (also recorded on the run)."""

    masked: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    rebind_ro: tuple[str, ...] = ()
    rebind_rw: tuple[str, ...] = ()
    stub: str = ""
    tool: str = "bwrap"

    def to_dict(self) -> dict:
        return {
            "tool": self.tool,
            "masked": list(self.masked),
            "hidden": list(self.hidden),
            "rebind_ro": list(self.rebind_ro),
            "rebind_rw": list(self.rebind_rw),
            "stub": self.stub,
        }


def program_paths(name: str, path_dirs: list[str]) -> list[str]:
    """Every file a program name can be reached at from ``path_dirs``.

    Each directory's hit (when it is not a symlink), the file it resolves to (``/usr/bin/soffice`` ->
    ``/usr/lib/libreoffice/program/soffice``) and a ``.bin`` companion beside
    that file, so that calling the real binary by its full path fails too.
    """
    found: list[str] = []
    for d in path_dirs:
        candidate = Path(d) / name
        if not (candidate.exists() and os.access(candidate, os.X_OK) and candidate.is_file()):
            continue
        real = candidate.resolve()
        # A symlink is covered by masking the file it resolves to (bind mounts follow links).
        for p in (candidate, real, real.with_name(real.name + ".bin")):
            if p.is_file() and not p.is_symlink() and str(p) not in found:
                found.append(str(p))
    return found


def _canonical_unique(paths: list[str]) -> list[str]:
    # /bin is a symlink to /usr/bin on merged-/usr systems: one bind covers both.
    seen: dict[str, str] = {}
    for p in paths:
        key = os.path.realpath(os.path.dirname(p)) + "/" + os.path.basename(p)
        seen.setdefault(key, key)
    return list(seen)


def write_stub(directory: Path) -> Path:
    """Write the refusing stub that is bound over every masked program."""
    directory.mkdir(parents=True, exist_ok=True)
    stub = directory / "denied-program"
    stub.write_text(STUB_TEXT, encoding="utf-8")
    stub.chmod(0o755)
    return stub


def make_plan(
    masked: list[str],
    *,
    hidden: list[Path],
    rebind_ro: list[Path],
    rebind_rw: list[Path],
    stub: Path,
) -> SandboxPlan:
    """Assemble a plan, dropping hidden folders that do not exist and duplicate binds."""

    def norm(ps: list[Path]) -> tuple[str, ...]:
        out: list[str] = []
        for p in ps:
            s = str(Path(p).resolve())
            if Path(s).exists() and s not in out:
                out.append(s)
        return tuple(out)

    return SandboxPlan(
        masked=tuple(_canonical_unique(masked)),
        hidden=norm(hidden),
        rebind_ro=norm(rebind_ro),
        rebind_rw=norm(rebind_rw),
        stub=str(stub),
    )


def bwrap_available() -> str | None:
    """Path of the bubblewrap binary on a Linux host, else None."""
    if platform.system() != "Linux":
        return None
    return shutil.which("bwrap")


def bwrap_prefix(plan: SandboxPlan, bwrap: str = "bwrap", chdir: Path | None = None) -> list[str]:
    """The bubblewrap command line that applies ``plan`` before running the agent.

    Order matters: the whole host is bound first, then the hidden folders are
    covered, then what the run needs is bound back, and the masks go last so
    that no later bind uncovers a denied program.
    """
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--dev-bind", "/", "/", "--proc", "/proc"]
    for h in plan.hidden:
        argv += ["--tmpfs", h]
    for p in plan.rebind_ro:
        argv += ["--ro-bind", p, p]
    for p in plan.rebind_rw:
        argv += ["--bind", p, p]
    for m in plan.masked:
        argv += ["--ro-bind", plan.stub, m]
    if chdir is not None:
        argv += ["--chdir", str(chdir)]
    argv.append("--")
    return argv


def macos_profile(plan: SandboxPlan) -> str:
    """The same plan as a ``sandbox-exec`` (SBPL) profile for macOS nodes."""
    lines = ["(version 1)", "(allow default)"]
    for m in plan.masked:
        lines.append(f'(deny process-exec (literal "{m}"))')
    allowed = [*plan.rebind_ro, *plan.rebind_rw]
    for h in plan.hidden:
        # SBPL has no "unless under": the run's own folders are re-allowed after the deny.
        lines.append(f'(deny file-read* file-write* (subpath "{h}"))')
    for a in allowed:
        lines.append(f'(allow file-read* (subpath "{a}"))')
    for a in plan.rebind_rw:
        lines.append(f'(allow file-write* (subpath "{a}"))')
    return "\n".join(lines) + "\n"


def enforcement_method() -> str:
    """Name of the second enforcement layer this host offers."""
    if bwrap_available():
        return "bubblewrap"
    if platform.system() == "Darwin" and shutil.which("sandbox-exec"):
        return "sandbox-exec"
    return "none"
