"""The sandbox's worker identities: slots, the users make creates, and what the harness takes back after a session."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pilot import protocol
from pilot.agents import worker_user

STUDY = protocol.study()
USERS = worker_user.SandboxUsers.from_study(STUDY)


def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("slots and ownership are a root harness's (make test runs as root in CI)")


@pytest.fixture
def own_slots(tmp_path):
    """Two slots of users of this test's own (so the suite's real attempts, which hold study.yml's slots, are never
    touched)."""
    _root()
    users = worker_user.SandboxUsers("pilot-tslot", 61980, 2)
    worker_user.create_users(users)
    assert worker_user.missing_users(users) == []
    study = {"sandbox": {"user_prefix": users.prefix, "first_uid": users.first_uid, "slots": users.slots}}
    return study, tmp_path / "locks", users


def test_the_users_follow_study_yml():
    raw = STUDY["sandbox"]
    assert USERS.name(0) == f"{raw['user_prefix']}0" and USERS.uid(3) == raw["first_uid"] + 3
    assert worker_user.missing_users(worker_user.SandboxUsers("pilot-absent", 62900, 2)) == [
        "pilot-absent0",
        "pilot-absent1",
    ]


def test_the_studys_users_exist_for_a_root_harness():
    _root()
    assert worker_user.missing_users(USERS) == []  # make created them (pilot sandbox users --create)


def test_concurrent_attempts_hold_different_slots_and_a_freed_slot_is_reused(own_slots):
    study, locks, users = own_slots
    a, b = worker_user.acquire(study, locks), worker_user.acquire(study, locks)
    try:
        assert (
            a.identity.switch and b.identity.switch and {a.identity.uid, b.identity.uid} == {users.uid(0), users.uid(1)}
        )
        with pytest.raises(worker_user.WorkerUserError, match="all 2 sandbox slots are in use"):
            worker_user.acquire(study, locks)
    finally:
        slot = a.identity.slot
        a.release()
    c = worker_user.acquire(study, locks)
    try:
        assert c.identity.slot == slot
    finally:
        b.release()
        c.release()


def test_a_slot_is_taken_with_what_its_uid_left_running_killed(own_slots):
    study, locks, users = own_slots
    uid = users.uid(0)
    left = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"])
    try:
        for _ in range(200):  # until setpriv has become the slot's uid
            if left.pid in worker_user.user_pids(uid):
                break
            time.sleep(0.01)
        assert left.pid in worker_user.user_pids(uid)
        lease = worker_user.acquire(study, locks)
        try:
            assert lease.identity.uid == uid
            assert left.wait(timeout=10) == -9
        finally:
            lease.release()
    finally:
        if left.poll() is None:
            left.kill()


def test_taking_back_re_owns_the_workers_files_but_never_a_hard_link_or_a_links_target(tmp_path):
    _root()
    uid = USERS.uid(0)
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("a host file")
    (ws / "sub" / "made.txt").write_text("the worker's")
    os.link(outside, ws / "linked.txt")  # two links: one of them outside the tree
    os.symlink(outside, ws / "pointer")
    worker_user.give_tree(ws, uid, uid)
    assert (ws / "sub" / "made.txt").stat().st_uid == uid and os.lstat(ws / "pointer").st_uid == uid
    assert outside.stat().st_uid == 0  # a file with a second name (outside) is never handed over, nor a link's target
    report = worker_user.take_back_tree(ws)
    assert (ws / "sub" / "made.txt").stat().st_uid == 0 and (ws / "sub").stat().st_uid == 0
    assert os.lstat(ws / "pointer").st_uid == 0 and outside.stat().st_uid == 0
    # The hard link's name in the tree is removed (never re-owned through it); the file outside keeps its name.
    assert not os.path.lexists(ws / "linked.txt") and outside.read_text() == "a host file"
    assert report.removed == 1 and report.removed_names == ["linked.txt (a hard link (a file with another name))"]
    os.chown(outside, uid, uid)  # now a worker-owned inode with a link outside the tree
    os.link(outside, ws / "linked.txt")
    report = worker_user.take_back_tree(ws)
    assert outside.stat().st_uid == uid  # never re-owned through the tree
    assert not os.path.lexists(ws / "linked.txt") and report.removed == 1


def test_an_unprivileged_harness_runs_the_sandbox_as_itself():
    code = (
        "import os; from pilot import protocol; from pilot.agents import worker_user as w; "
        "l = w.acquire(protocol.study()); i = l.identity; print(i.uid == os.getuid(), i.switch, i.slot)"
    )
    if os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code]
        probe = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", "pass"],
            capture_output=True,
        )
        if probe.returncode != 0:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", code]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split() == ["True", "False", "None"]
    else:
        lease = worker_user.acquire(STUDY)
        assert lease.identity.uid == os.getuid() and not lease.identity.switch
