"""The resources one attempt may use, and how each bound is held.

From ``study.yml`` ``sandbox.limits``: memory, processes, CPU share,
workspace disk, ``/tmp`` size, and the size of the CLI's stream.

* memory, processes and CPU: a control group per attempt, cgroup v2 where
  the host has it writable, else the v1 hierarchies (``memory``, ``pids``,
  ``cpu``); created under the harness's own group, so the host's limits on
  the harness still hold. Where no group can be made, the process bound
  falls back to ``RLIMIT_NPROC``, which is exact for a dedicated worker uid
  (:mod:`pilot.agents.worker_user`); memory and CPU are then unbounded and
  the run's launch record says so.
* workspace disk: the kernel. The workspace, the scratch home and the CLI's
  config folder live, while a session runs, on a size-limited tmpfs of the
  bound (:mod:`pilot.agents.bounded_disk`), so a file held open after
  ``unlink``, a path longer than ``PATH_MAX`` and a burst of ``fallocate``
  count as any write does; ``RLIMIT_FSIZE`` bounds any one file. The
  watcher only records the bound when the disk is full. Without a bounded
  disk (the macOS profile) the watcher sums the writable folders twice a
  second and ends the session past the bound;
* ``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm``: ``--size`` on each tmpfs
  (host RAM; bubblewrap's own ``/dev`` is read-only), and the watcher reads
  their use through the sandbox's root to record the bound;
* the stream: a bound on one line and on the whole transcript (``claude_code``).

Reaching a bound ends the attempt as censored with that bound as its reason;
the harness, the proxy and other attempts carry on.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
#: The censor reasons a bound gives a run (beside the design's cost, wall and turns caps).
BOUND_REASONS = ("memory", "processes", "disk", "tmp", "stream")
#: How often the watcher looks (seconds).
WATCH_INTERVAL_S = 0.5
#: The watcher's disk walk stops counting after this many entries (a flood of empty files is itself a breach); the same
#: number as the bounded disk's entries (``pilot.agents.bounded_disk.MAX_ENTRIES``).
MAX_WATCHED_ENTRIES = 200_000
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    processes: int
    cpu_cores: float
    workspace_bytes: int
    tmp_bytes: int
    line_bytes: int
    transcript_bytes: int

    @classmethod
    def from_study(cls, study: Any) -> Limits:
        lim = study["sandbox"]["limits"]
        return cls(
            int(lim["memory_mb"]) * MIB,
            int(lim["processes"]),
            float(lim["cpu_cores"]),
            int(lim["workspace_mb"]) * MIB,
            int(lim["tmp_mb"]) * MIB,
            int(lim["stream_line_kb"]) * 1024,
            int(lim["transcript_mb"]) * MIB,
        )

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------
# Control groups
# --------------------------------------------------------------------------


def _own_cgroups() -> dict[str, str]:
    """controller (or '' for v2) -> this process's group path."""
    out: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _writable_dir(p: Path) -> bool:
    return p.is_dir() and os.access(p, os.W_OK | os.X_OK)


@dataclass
class AttemptCgroup:
    """The control groups of one attempt (v2: one folder; v1: one per controller)."""

    version: int
    dirs: dict[str, Path]

    @classmethod
    def create(cls, name: str, limits: Limits) -> AttemptCgroup | None:
        """Make the attempt's groups with its limits, or None when this host gives the harness no writable group."""
        own = _own_cgroups()
        v2_root = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else None
        if v2_root is not None and "" in own:
            parent = v2_root / own[""].lstrip("/")
            wanted = {"memory", "pids", "cpu"}
            try:
                available = set((parent / "cgroup.controllers").read_text().split())
            except OSError:
                available = set()
            if wanted <= available and _writable_dir(parent):
                # A v2 group with processes cannot hand controllers down: the attempt's group sits in a leaf of its own.
                d = parent / f"pilot-{name}"
                try:
                    d.mkdir(exist_ok=True)
                    (d / "memory.max").write_text(str(limits.memory_bytes))
                    if (d / "memory.swap.max").exists():
                        (d / "memory.swap.max").write_text("0")
                    (d / "pids.max").write_text(str(limits.processes))
                    (d / "cpu.max").write_text(f"{int(limits.cpu_cores * 100_000)} 100000")
                    return cls(2, {"": d})
                except OSError:
                    _rmdir(d)
        dirs: dict[str, Path] = {}
        for ctrl in ("memory", "pids", "cpu"):
            base = CGROUP_ROOT / ctrl
            if ctrl not in own or not (base / "cgroup.procs").exists():
                continue
            parent = base / own[ctrl].lstrip("/")
            if not _writable_dir(parent):
                continue
            d = parent / f"pilot-{name}"
            try:
                d.mkdir(exist_ok=True)
                if ctrl == "memory":
                    (d / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
                    if (d / "memory.memsw.limit_in_bytes").exists():
                        (d / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
                elif ctrl == "pids":
                    (d / "pids.max").write_text(str(limits.processes))
                else:
                    (d / "cpu.cfs_period_us").write_text("100000")
                    (d / "cpu.cfs_quota_us").write_text(str(int(limits.cpu_cores * 100_000)))
                dirs[ctrl] = d
            except OSError:
                _rmdir(d)
        return cls(1, dirs) if dirs else None

    @property
    def bounds(self) -> list[str]:
        """What this group bounds: memory, processes, cpu."""
        if self.version == 2:
            return ["memory", "processes", "cpu"]
        names = {"memory": "memory", "pids": "processes", "cpu": "cpu"}
        return [names[c] for c in self.dirs]

    def attach_self(self) -> None:
        """In the child before exec (and before it drops root): join every group of the attempt."""
        for d in self.dirs.values():
            with open(d / "cgroup.procs", "w") as fh:
                fh.write("0")

    def breach(self) -> str | None:
        """The bound reached so far: ``memory`` (a process was killed for memory) or ``processes``
        (a fork was refused)."""
        if self.version == 2:
            d = self.dirs[""]
            if _event(d / "memory.events", "oom_kill") > 0:
                return "memory"
            if _event(d / "pids.events", "max") > 0:
                return "processes"
            return None
        if "memory" in self.dirs and _event(self.dirs["memory"] / "memory.oom_control", "oom_kill") > 0:
            return "memory"
        if "pids" in self.dirs and _event(self.dirs["pids"] / "pids.events", "max") > 0:
            return "processes"
        return None

    def peak_memory_bytes(self) -> int | None:
        f = self.dirs.get("") or self.dirs.get("memory")
        if f is None:
            return None
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            try:
                return int((f / name).read_text().strip())
            except (OSError, ValueError):
                continue
        return None

    def kill_all(self) -> None:
        for d in self.dirs.values():
            if (d / "cgroup.kill").exists():
                try:
                    (d / "cgroup.kill").write_text("1")
                    continue
                except OSError:
                    pass
            for _ in range(50):
                pids = _procs(d)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs.values():
            for _ in range(50):
                if _rmdir(d):
                    break
                time.sleep(0.05)

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "groups": {k or "unified": str(v) for k, v in self.dirs.items()},
            "bounds": self.bounds,
        }


def _event(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0


def _procs(d: Path) -> list[int]:
    try:
        return [int(x) for x in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------
# Limits set in the child, and the harness's watcher
# --------------------------------------------------------------------------


def child_rlimits(limits: Limits, *, nproc: bool) -> None:
    """In the child before exec: one file no larger than the workspace bound; the process bound per uid when exact."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.workspace_bytes, limits.workspace_bytes))
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def tree_bytes(roots: list[Path], cap_entries: int = MAX_WATCHED_ENTRIES) -> tuple[int, bool]:
    """Allocated bytes under ``roots`` (links not followed), and whether the walk hit its entry bound."""
    total, seen = 0, 0
    stack = [str(r) for r in roots]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                seen += 1
                if seen > cap_entries:
                    return total, True
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return total, False


def sandbox_pid(outer_pid: int) -> int | None:
    """A process inside the sandbox's mount namespace: the first descendant of ``outer_pid`` whose root differs from
    ours."""
    try:
        own = os.stat("/proc/self/root/")
    except OSError:
        return None
    stack = [outer_pid]
    seen = 0
    while stack and seen < 64:
        pid = stack.pop(0)
        seen += 1
        try:
            st = os.stat(f"/proc/{pid}/root/")
            if (st.st_dev, st.st_ino) != (own.st_dev, own.st_ino):
                return pid
            for task in os.listdir(f"/proc/{pid}/task"):
                stack.extend(int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except (OSError, ValueError):
            continue
    return None


#: A tmpfs with less than this left is full (a writer stops at its last whole page).
TMPFS_FULL_SLACK_BYTES = 256 * 1024


def tmpfs_usage(pid: int, mount: str) -> tuple[int, int] | None:
    """Bytes used and bytes left on a tmpfs of the sandbox, read through a sandboxed process's root."""
    try:
        st = os.statvfs(f"/proc/{pid}/root{mount}")
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_bavail * st.f_frsize


@dataclass
class Breach:
    reason: str
    detail: str
