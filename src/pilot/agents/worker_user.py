"""Who the worker runs as: never host root, never with a capability.

A harness started by root runs each attempt's sandbox as one of the
dedicated unprivileged users of ``study.yml`` ``sandbox`` (``pilot-worker0``
... one uid and gid per concurrent slot, so a per-uid process limit counts
one attempt's processes exactly and two attempts never share an identity).
A slot is held with an advisory lock for the whole attempt; a lock left by a
killed harness is released by the kernel with its process. Before a slot is
used, every process still running under its uid is killed (the leftovers of
an attempt whose harness died).

A harness started by an unprivileged user runs the sandbox as itself: it has
nothing to drop. Either way bubblewrap then builds a user namespace of its
own with every capability dropped and no further namespaces allowed
(:func:`pilot.agents.sandbox.bwrap_prefix`).
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilot import confined
from pilot.executors.proctree import kill_pids

if TYPE_CHECKING:
    from pilot.agents.takeback import TakeBack

#: Where a root harness keeps the slot locks (root-only folder).
LOCK_DIR = Path("/run/pilot-sandbox")


class WorkerUserError(RuntimeError):
    """The dedicated worker users are missing or no slot is free; the message says what to run."""


@dataclass(frozen=True)
class SandboxUsers:
    """The ``sandbox`` block of ``study.yml``: the dedicated users of a root harness."""

    prefix: str
    first_uid: int
    slots: int

    @classmethod
    def from_study(cls, study: Any) -> SandboxUsers:
        s = study["sandbox"]
        return cls(str(s["user_prefix"]), int(s["first_uid"]), int(s["slots"]))

    def name(self, slot: int) -> str:
        return f"{self.prefix}{slot}"

    def uid(self, slot: int) -> int:
        return self.first_uid + slot


@dataclass(frozen=True)
class WorkerIdentity:
    """The uid and gid the sandbox runs as, and whether the harness switches to them (a root harness)."""

    uid: int
    gid: int
    name: str
    slot: int | None = None
    #: True when the harness is root and drops to this dedicated user before bubblewrap starts.
    switch: bool = False

    def to_dict(self) -> dict:
        return {"uid": self.uid, "gid": self.gid, "name": self.name, "slot": self.slot, "dedicated": self.switch}

    def drop_privileges(self) -> None:
        """In the child before exec: become this user with no supplementary group and no capability.

        A change of uid from 0 clears every capability (no keep-caps bit is
        set); the sandbox itself sets no_new_privs, so no set-uid file raises it back.
        """
        if not self.switch:
            return
        os.setgroups([])
        os.setresgid(self.gid, self.gid, self.gid)
        os.setresuid(self.uid, self.uid, self.uid)


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def own_identity() -> WorkerIdentity:
    """The harness's own user (an unprivileged harness runs the sandbox as itself)."""
    own = confined.own_identity()
    return WorkerIdentity(own.uid, own.gid, own.name)


def missing_users(users: SandboxUsers) -> list[str]:
    """The dedicated users (or their groups) that do not exist, or exist with another uid."""
    out = []
    for slot in range(users.slots):
        name, uid = users.name(slot), users.uid(slot)
        try:
            pw = pwd.getpwnam(name)
            grp.getgrgid(pw.pw_gid)
        except KeyError:
            out.append(name)
            continue
        if pw.pw_uid != uid or pw.pw_uid == 0 or pw.pw_gid == 0:
            out.append(f"{name} (uid {pw.pw_uid}, gid {pw.pw_gid}; expected uid {uid} and a group of its own)")
    return out


def create_users(users: SandboxUsers) -> list[str]:
    """Create the missing dedicated users as system users without a home or a login shell (root only)."""
    if not is_root():
        raise WorkerUserError(
            "only root creates the sandbox's worker users (an unprivileged harness runs the sandbox as itself)"
        )
    made = []
    for slot in range(users.slots):
        if confined.create_system_user(users.name(slot), users.uid(slot)):
            made.append(users.name(slot))
    return made


def kill_user_processes(uid: int, settle_s: float = 0.0) -> list[int]:
    """SIGKILL every live process whose real uid is ``uid`` (a slot's leftovers); Linux only.

    With ``settle_s`` it goes on killing until none is left or the time is up
    (a process may fork while it is being killed); zombies are already dead.
    """
    import time

    deadline = time.monotonic() + settle_s
    killed = kill_pids(user_pids(uid))
    while settle_s and time.monotonic() < deadline:
        more = kill_pids(user_pids(uid))
        if not more:
            break
        killed += [p for p in more if p not in killed]
        time.sleep(0.05)
    return killed


def user_pids(uid: int) -> list[int]:
    """The live processes whose real uid is ``uid`` (zombies are already dead); Linux only."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "\nState:\tZ" in status or "\nState:\tX" in status:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:"):
                if int(line.split()[1]) == uid:
                    pids.append(int(entry.name))
                break
    return pids


class SlotLease:
    """One held slot: the identity to run as; :meth:`release` (or the harness's death) frees it."""

    def __init__(self, identity: WorkerIdentity, lock_fd: int | None = None) -> None:
        self.identity = identity
        self._fd = lock_fd

    def release(self) -> None:
        if self._fd is not None:
            if self.identity.switch:
                kill_user_processes(self.identity.uid, settle_s=5.0)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SlotLease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def acquire(study: Any, lock_dir: Path = LOCK_DIR) -> SlotLease:
    """The identity for one attempt: a free dedicated slot for a root harness, the harness's own user otherwise.

    Raises :class:`WorkerUserError` when the dedicated users are missing
    (naming them and the command that creates them) or every slot is held.
    """
    if not is_root():
        return SlotLease(own_identity())
    users = SandboxUsers.from_study(study)
    missing = missing_users(users)
    if missing:
        raise WorkerUserError(
            f"the sandbox's unprivileged worker users are missing or wrong: {', '.join(missing)} "
            "(study.yml sandbox); a root harness never runs the worker as root: create them with `pilot sandbox users "
            "--create` "
            "(make does this on first use)"
        )
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for slot in range(users.slots):
        fd = os.open(lock_dir / f"{users.name(slot)}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        pw = pwd.getpwnam(users.name(slot))
        identity = WorkerIdentity(pw.pw_uid, pw.pw_gid, pw.pw_name, slot, switch=True)
        kill_user_processes(identity.uid)  # whatever an attempt killed with its harness left running
        return SlotLease(identity, fd)
    raise WorkerUserError(
        f"all {users.slots} sandbox slots are in use (study.yml sandbox.slots): run fewer attempts at once on this node"
    )


def give_tree(root: Path, uid: int, gid: int) -> None:
    """Hand a folder the harness made (workspace, scratch home, CLI config) to the worker for a session.

    A file with more than one link is not handed over: its other name may lie outside the tree.
    """
    for path, _st in _owned_entries(Path(root)):
        os.lchown(path, uid, gid)


def take_back_tree(root: Path, uid: int | None = None, gid: int | None = None) -> TakeBack:
    """After a session without a bounded disk: every entry under ``root`` goes back to the harness's user, in place.

    A walk by file descriptor (:func:`pilot.agents.takeback.take_back_in_place`):
    every entry is re-owned with no set-id bit and no world-writable mode; a
    file with another name (a hard link, whose other name may lie outside
    the tree) is never re-owned: its name in the tree is removed, as is
    anything that is not a file, folder or link and whatever lies deeper
    than the take-back's bounds. The report says what was removed.
    """
    from pilot.agents.bounded_disk import MAX_ENTRIES
    from pilot.agents.takeback import CopyBounds, take_back_in_place

    return take_back_in_place(root, CopyBounds(0, MAX_ENTRIES), uid, gid)


def _owned_entries(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (links not followed) that can change owner: folders, links and single-link files."""
    if not root.exists():
        return
    for path in _walk(root):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if os.path.isdir(path) or os.path.islink(path) or st.st_nlink == 1:
            yield path, st


def _walk(root: Path) -> Iterator[str]:
    yield str(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            yield os.path.join(dirpath, name)
