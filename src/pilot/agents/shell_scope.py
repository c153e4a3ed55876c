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


#: The Landlock steps every wrapper takes (Python source, run by the wrapper's interpreter with ``-IS``): enter a
#: domain below the caller's in which writes are allowed beneath the folders given only, no ptrace, ``/proc/<pid>/mem``,
#: ``pidfd_getfd`` or (ABI 6 and later) signal or abstract socket reaches a process outside it; fail closed.
_LANDLOCK = """import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def fail(what):
    sys.stderr.write(NAME + ": " + what + ": " + os.strerror(ctypes.get_errno()) + "\\n")
    sys.exit(126)
def enter_domain(writable):
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        fail("Landlock is not available, nothing is started")
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
    for path in writable:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY | os.O_NOFOLLOW)
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
"""


def wrapper_text(python: str, writable: list[str], env: dict[str, str] | None = None, shell: str = "/bin/bash") -> str:
    """The wrapper script: enter a nested Landlock domain with writes allowed beneath ``writable``, then exec ``shell``.

    ``env`` is the whole environment the shell gets (an allow-list decided by
    the harness, :func:`pilot.agents.launch.worker_shell_env`): nothing of the
    CLI's own environment passes (its messaging socket and token, its API
    token, the pins that keep its helpers off the worker's files). ``None``
    keeps the caller's environment (the wrapper's tests alone).
    """
    return f"""#!{python} -IS
# Runs the worker's shell in a Landlock domain below the CLI's: see pilot.agents.shell_scope.
NAME = "pilot-shell"
{_LANDLOCK}
enter_domain({writable!r})
ENV = {env!r}
os.execve({shell!r}, [{shell!r}] + sys.argv[1:], dict(os.environ) if ENV is None else ENV)
"""


def helper_text(
    python: str,
    program: str,
    env: dict[str, str],
    *,
    marker: str,
    worker_writable: list[str],
    output_beneath: str | None = None,
    name: str = "pilot-helper",
) -> str:
    """A program the CLI runs by name outside its shell (git, the PDF tools), confined as the worker's programs are.

    The CLI puts its own PATH into the shell snapshot, so the worker's
    commands find the helper too. Either way the wrapper enters a Landlock
    domain below its caller's before it execs ``program``. Called by the CLI
    (whose environment alone carries ``marker``, a name the worker's shell
    never receives), the program gets exactly ``env`` (the harness's
    configuration, no repository for git) and may write nothing but the
    sandbox's ``/dev`` and, when ``output_beneath`` is given, the folder its
    last argument names (the pages a PDF tool renders) if that folder lies
    beneath ``output_beneath``.
    Called from the worker's shell, it keeps the caller's environment and the
    worker's own writable folders: a domain the caller already has, so the
    worker's git and PDF tools work as the real ones do, and a caller that
    forges the marker only confines itself further.
    """
    return f"""#!{python} -IS
# A helper of the CLI, confined below its caller: see pilot.agents.shell_scope.helper_text.
NAME = {name!r}
{_LANDLOCK}
BENEATH = {output_beneath!r}
if {marker!r} in os.environ:
    env, writable = {env!r}, ["/dev"]  # /dev/null and the like
    if BENEATH is not None and len(sys.argv) > 1:
        folder = os.path.dirname(os.path.abspath(sys.argv[-1]))
        # Resolved, so no link leads the grant out of the CLI's tool results.
        beneath = folder.startswith(BENEATH.rstrip("/") + "/")
        if os.path.realpath(folder) == folder and beneath and os.path.isdir(folder):
            writable.append(folder)
else:
    env, writable = dict(os.environ), {worker_writable!r}
enter_domain(writable)
os.execve({program!r}, [{program!r}] + sys.argv[1:], env)
"""


def write_wrapper(path: Path, python: str, writable: list[str], env: dict[str, str] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(wrapper_text(python, writable, env), encoding="utf-8")
    path.chmod(0o555)
    return path


def wrapper_python(worker_env: Path | None) -> str | None:
    """The interpreter the wrapper runs on: the system's, else the worker environment's base interpreter."""
    for candidate in ("/usr/bin/python3", str(Path(worker_env) / "bin" / "python3") if worker_env else None):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    return None
