"""The shell the CLI runs every command through: a Landlock domain below the CLI's own.

Inside the sandbox the CLI and the programs its Bash tool starts share one
uid, and the kernel lets a process of the same uid read and write another's
memory and descriptors (ptrace, ``/proc/<pid>/mem``, ``/proc/<pid>/fd``,
``process_vm_writev``, ``pidfd_getfd``) and signal it. Each of those routes
asks the kernel's ptrace access check, which Landlock answers: a process may
reach only processes of its own Landlock domain or of one nested below it.
So the CLI's shell (``CLAUDE_CODE_SHELL``, which the pinned CLI uses for the
snapshot and every command) is this wrapper: it enters a new domain, then
``exec``s bash. Everything the worker runs descends from it and cannot reach
the CLI, the bridges or the harness's ends of the stream, nor signal them
(scoped signals and abstract sockets, Landlock ABI 6 and later).

The same domain allows writes only beneath the worker's own folders
(workspace, scratch home, the private tmpfs folders, ``/dev``, ``/proc``'s
own files and the CLI's shell-snapshot folder); reads are not restricted
here (the sandbox's mounts decide what exists). The CLI's session store is
therefore read-only to the worker, so the history a recovery resumes is the
one the CLI wrote. The wrapper fails closed: without Landlock it refuses to
start a shell, and :func:`landlock_abi` lets the harness refuse such a host
before any run.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

#: Where the wrapper appears inside the sandbox (bound read-only).
INSIDE_PATH = "/run/pilot-shell/bash"

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_VERSION = 1


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is missing or disabled."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        v = libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_VERSION))
    except (OSError, AttributeError):
        return 0
    return int(v) if v > 0 else 0


def wrapper_text(python: str, writable: list[str], shell: str = "/bin/bash") -> str:
    """The wrapper script: enter a nested Landlock domain with writes allowed beneath ``writable``, then exec ``shell``."""
    return f"""#!{python} -IS
# Runs the worker's shell in a Landlock domain below the CLI's: see pilot.agents.shell_scope.
import ctypes, os, sys
WRITABLE = {writable!r}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def fail(what):
    sys.stderr.write("pilot-shell: " + what + ": " + os.strerror(ctypes.get_errno()) + "\\n")
    sys.exit(126)
abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
if abi < 1:
    fail("Landlock is not available, no shell is started")
# Write-side rights only (reads are the mounts' business): write, remove, make, link across folders, truncate.
fs = (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
if abi >= 2:
    fs |= 1 << 13
if abi >= 3:
    fs |= 1 << 14
scoped = 3 if abi >= 6 else 0  # abstract unix sockets and signals
class Attr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
class Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]
attr = Attr(fs, 0, scoped)
size = 24 if abi >= 6 else 16 if abi >= 4 else 8
rs = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
if rs < 0:
    fail("landlock_create_ruleset")
for path in WRITABLE:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
    except OSError:
        continue  # a folder that does not exist yet takes no write
    rule = Beneath(fs, fd)
    if libc.syscall(445, ctypes.c_int(rs), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
        fail("landlock_add_rule " + path)
    os.close(fd)
if libc.prctl(38, 1, 0, 0, 0) != 0:
    fail("no_new_privs")
if libc.syscall(446, ctypes.c_int(rs), ctypes.c_uint32(0)) != 0:
    fail("landlock_restrict_self")
os.close(rs)
os.execv({shell!r}, [{shell!r}] + sys.argv[1:])
"""


def write_wrapper(path: Path, python: str, writable: list[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(wrapper_text(python, writable), encoding="utf-8")
    path.chmod(0o555)
    return path


def wrapper_python(worker_env: Path | None) -> str | None:
    """The interpreter the wrapper runs on: the system's, else the worker environment's base interpreter."""
    for candidate in ("/usr/bin/python3", str(Path(worker_env) / "bin" / "python3") if worker_env else None):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    return None
