"""Bounds the kernel holds, and a take-back that leaves nothing of the worker's, against the real pinned CLI.

Each attempt runs the pinned CLI in the real sandbox against a scripted
Messages API (the pattern of ``test_sandbox_privilege``), as root (the
worker is then a dedicated uid) and as an unprivileged harness user, with
small bounds. Its run folder lives on a filesystem of the test's own, so
the bytes the attempt puts on the host's disk are measured exactly, before,
during (sampled) and after the attempt.

* The disk attempt: a file held open after ``unlink``, a file below a path
  longer than ``PATH_MAX`` and an ``fallocate`` burst each count on the
  workspace's filesystem while the disk still has room (the probe records
  the kernel's own count); then all three at once try to write four times
  the bound: the session ends censored at ``disk``, and the run folder's
  filesystem never holds more than the bound.
* The tmp and take-back attempt: the worker leaves a hard-linked pair (and
  tries one to a host file and one into its scratch home), a tree deeper than
  ``PATH_MAX``, world-writable set-gid and sticky folders, set-uid and
  set-gid files, a file and a folder of mode 000, a FIFO, a socket, a link
  to a host file and a sparse file of the bound's size, then fills ``/dev/shm``: the session
  ends censored at ``tmp``; afterwards nothing under the run folder is the
  worker's, set-id, world-writable or anything but a file, folder or link,
  and the run's record names what was removed and why.

The expected values come from the rules (``docs/agent-sandbox.md``, "Bounds
per attempt" and "Taking back"), not from the code: the bound's bytes, the
names the probe made and the reasons the rules give.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
import test_sandbox_privilege as privilege
from fake_messages_api import text_turn, tool_turn
from privilege_support import harness_user, passable, run_python_as
from real_cli_support import require_real_sandbox

from pilot import paths
from pilot.agents import bounded_disk, bounds, sandbox, takeback

MIB = bounds.MIB
LIMITS = bounds.Limits(
    memory_bytes=1024 * MIB,
    processes=256,
    cpu_cores=1.0,
    workspace_bytes=64 * MIB,
    tmp_bytes=32 * MIB,
    line_bytes=256 * 1024,
    transcript_bytes=64 * MIB,
)
#: What the run folder holds beside the worker's folders (stream copy, launch records, settings, stubs, the proxy's
#: exchanges): the host may hold the bound plus this much.
RECORD_SLACK = 4 * MIB
#: The filesystem the test gives each run folder (exact measurement; much larger than the bound).
RUN_FS_BYTES = 1024 * MIB


# -- the probes -------------------------------------------------------------------------------------------------------

DISK_PROBE = textwrap.dedent(r"""
    import errno, json, os, signal, sys, threading, time
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # one file past RLIMIT_FSIZE fails with EFBIG, not a signal
    BOUND = int(sys.argv[1])
    MB = 1 << 20
    ws = os.open(".", os.O_RDONLY)
    def used():
        st = os.fstatvfs(ws)
        return (st.f_blocks - st.f_bfree) * st.f_frsize
    out = {"size": os.fstatvfs(ws).f_blocks * os.fstatvfs(ws).f_frsize}
    # The results go into space taken before any route runs: writing them never needs a free block.
    os.makedirs("outputs", exist_ok=True)
    res = os.open("outputs/probe.json", os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(res, 0, 65536)

    def write(fd, total, chunk=MB):
        n, err = 0, None
        buf = b"x" * chunk
        try:
            while n < total:
                n += os.write(fd, buf)
        except OSError as e:
            err = e.errno
        return n, err

    # 1. A file held open after unlink: no name left, its blocks still counted.
    before = used()
    fd = os.open("held", os.O_WRONLY | os.O_CREAT, 0o600)
    os.unlink("held")
    n, _ = write(fd, BOUND // 4)
    out["unlinked"] = {"written": n, "counted": used() - before, "named": os.path.exists("held")}
    os.close(fd)
    # 2. A file below a path longer than PATH_MAX (reached by relative steps; no path names it whole).
    before = used()
    os.mkdir("deep"); os.chdir("deep")
    depth = len("deep")
    while depth <= 4096 + 256:
        os.mkdir("d" * 200); os.chdir("d" * 200)
        depth += 201
    fd = os.open("below", os.O_WRONLY | os.O_CREAT, 0o600)
    n, _ = write(fd, BOUND // 4)
    os.close(fd)
    out["deep"] = {"written": n, "counted": used() - before, "path_bytes": depth}
    os.unlink("below")
    os.fchdir(ws)
    # 3. A burst of fallocate calls: allocated blocks count before a byte is written.
    before = used()
    fds = []
    for i in range(4):
        fd = os.open(f"alloc-{i}", os.O_WRONLY | os.O_CREAT, 0o600)
        os.posix_fallocate(fd, 0, BOUND // 16)
        fds.append(fd)
    out["fallocate"] = {"allocated": 4 * (BOUND // 16), "counted": used() - before}
    for i, fd in enumerate(fds):
        os.close(fd)
        os.unlink(f"alloc-{i}")
    text = json.dumps(out).encode()
    os.pwrite(res, text + b" " * (65536 - len(text)), 0)
    os.fsync(res)

    # All three at once, each trying four times the bound: the kernel stops them all at the bound.
    held = []
    def unlinked():
        while len(held) * 8 * MB < 4 * BOUND:
            fd = os.open(f"h-{len(held)}", os.O_WRONLY | os.O_CREAT, 0o600)
            os.unlink(f"h-{len(held)}")
            held.append(fd)
            if write(fd, 8 * MB)[1] is not None:
                break
    def deep():
        d = os.open("deep", os.O_RDONLY)
        for _ in range(21):
            d2 = os.open("d" * 200, os.O_RDONLY, dir_fd=d); os.close(d); d = d2
        for i in range(4 * BOUND // (8 * MB)):
            fd = os.open(f"f-{i}", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=d)
            err = write(fd, 8 * MB)[1]
            os.close(fd)
            if err is not None:
                break
    def burst():
        for i in range(4 * BOUND // (16 * MB)):
            fd = os.open(f"burst-{i}", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, 16 * MB)
            except OSError:
                break
            finally:
                os.close(fd)
    threads = [threading.Thread(target=f) for f in (unlinked, deep, burst)]
    for t in threads: t.start()
    for t in threads: t.join()
    # A failed fallocate gives its blocks back: what is left is taken page by page, so the disk ends full.
    fd = os.open("top-up", os.O_WRONLY | os.O_CREAT, 0o600)
    os.unlink("top-up")
    write(fd, 4 * BOUND, chunk=4096)
    time.sleep(60)
""")

TAKEBACK_PROBE = textwrap.dedent(r"""
    import errno, json, os, socket, sys, time
    BOUND, TMP = int(sys.argv[1]), int(sys.argv[2])
    home = os.environ["HOME"]
    out = {}
    os.makedirs("outputs", exist_ok=True)
    open("pair-a.txt", "w").write("one inode, two names")
    os.link("pair-a.txt", "pair-b.txt")
    # A hard link to a host file, or to another of the worker's own folders (another mount of the same disk).
    for name, src, dst in (("host_link", "/etc/passwd", "host-passwd"), ("home_link", "pair-a.txt", home + "/pair")):
        try:
            os.link(src, dst)
            out[name] = 0
        except OSError as e:
            out[name] = e.errno
    # A tree deeper than PATH_MAX, by relative steps.
    top = os.open(".", os.O_RDONLY)
    os.mkdir("deep"); os.chdir("deep")
    for _ in range(21):
        os.mkdir("d" * 200); os.chdir("d" * 200)
    open("bottom.txt", "w").write("below PATH_MAX")
    os.fchdir(top)
    os.mkdir("wwsg"); os.chmod("wwsg", 0o2777)
    open("wwsg/inside.txt", "w").write("in a world-writable set-gid folder")
    os.chmod("wwsg/inside.txt", 0o666)
    os.mkdir("sticky"); os.chmod("sticky", 0o1777)
    open("suid.sh", "w").write("#!/bin/sh\nid\n"); os.chmod("suid.sh", 0o4755)
    open("sgid.sh", "w").write("#!/bin/sh\nid\n"); os.chmod("sgid.sh", 0o2755)
    open("closed.txt", "w").write("mode 000"); os.chmod("closed.txt", 0)
    os.mkdir("locked"); open("locked/inner.txt", "w").write("in a folder of mode 000"); os.chmod("locked", 0)
    os.mkfifo("pipe")
    s = socket.socket(socket.AF_UNIX); s.bind("sock"); s.close()
    os.symlink("/etc/shadow", "shadow-link")
    with open("sparse-giant", "wb") as f:  # as large as one file may be (RLIMIT_FSIZE), and all hole
        f.truncate(BOUND)
    # /dev/shm: its own tmpfs of the tmp bound; half of it first, recorded while there is room.
    shm = os.statvfs("/dev/shm")
    out["shm_size"] = shm.f_blocks * shm.f_frsize
    with open("/dev/shm/half", "wb") as f:
        f.write(b"x" * (TMP // 2))
    shm = os.statvfs("/dev/shm")
    out["shm_used_half"] = (shm.f_blocks - shm.f_bfree) * shm.f_frsize
    json.dump(out, open("outputs/probe.json", "w"))
    # Then four times the bound: the kernel stops it, and the harness ends the session at tmp.
    try:
        with open("/dev/shm/fill", "wb") as f:
            for _ in range(4 * TMP // (1 << 20)):
                f.write(b"x" * (1 << 20))
    except OSError:
        pass
    time.sleep(60)
""")


def _turns(ws: Path, probe: str, args: str) -> list[dict]:
    return [
        tool_turn("Write", {"file_path": str(ws / "probe.py"), "content": probe}, "w"),
        tool_turn(
            "Bash",
            {"command": f"python3 probe.py {args}", "description": "probe", "timeout": 120000},
            "p",
        ),
        text_turn("Done."),
    ]


def attempt(out: Path, which: str) -> dict:
    """One attempt (``disk`` or ``takeback``) under the test's small bounds; the parts of its record the test reads."""
    ws = out / "workspace"
    if which == "disk":
        turns = _turns(ws, DISK_PROBE, str(LIMITS.workspace_bytes))
    else:
        turns = _turns(ws, TAKEBACK_PROBE, f"{LIMITS.workspace_bytes} {LIMITS.tmp_bytes}")
    rec, _ = privilege._run(out, "A1", turns, limits=LIMITS)  # the real CLI against the scripted Messages API
    d = rec.to_dict()
    return {k: d[k] for k in ("status", "censored", "censor_reason", "enforcement", "sessions", "notes")}


# -- the run folder's own filesystem, measured -----------------------------------------------------------------------


class RunDisk:
    """A tmpfs of the test's own for the run folders: the bytes an attempt puts on it are measured exactly."""

    def __init__(self, root: Path, owner: tuple[int, int] | None) -> None:
        self.root = root
        root.mkdir(parents=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={RUN_FS_BYTES},mode=0755", "pilot-test-run", str(root)], check=True
        )
        if owner is not None:
            os.chown(root, *owner)
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def used(self) -> int:
        st = os.statvfs(self.root)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self.used())

    def __enter__(self) -> RunDisk:
        self.before = self.used()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.after = self.used()

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.root)], check=False)

    @property
    def most(self) -> int:
        """The most the attempt held on the run folder's filesystem at any sample, beyond what was there before."""
        return max([self.after, *self.samples]) - self.before


@pytest.fixture
def run_disk():
    disks: list[RunDisk] = []

    def make(owner: tuple[int, int] | None = None) -> RunDisk:
        if os.geteuid() != 0:
            pytest.skip("the run folder's own measured filesystem is a tmpfs the test mounts: run as root (as CI does)")
        # Under the checkout's build/ (passable by an unprivileged harness user), never under pytest's private /tmp.
        d = RunDisk(paths.BUILD_DIR / "test-bounds" / uuid.uuid4().hex[:10], owner)
        disks.append(d)
        return d

    yield make
    for d in disks:
        d.close()
        d.root.rmdir()


UNPRIVILEGED = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    import test_harness_hands_bounds as t
    print(json.dumps(t.attempt(Path({out!r}), {which!r})))
""")


def _as_harness_user(out: Path, which: str, uid: int, gid: int) -> dict:
    """The attempt run by a harness without privilege (the test's own unprivileged user)."""
    code = UNPRIVILEGED.format(tests=str(Path(__file__).parent), out=str(out), which=which)
    proc = run_python_as(uid, gid, code, home=out.parent, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run(mode: str, which: str, run_disk) -> tuple[dict, Path, RunDisk, int]:
    """One attempt as ``root`` or as an ``unprivileged`` harness; its summary, run folder, measured disk, worker uid."""
    require_real_sandbox()  # a test of the real CLI and sandbox fails without them, never skips
    if mode == "root":
        privilege._needs_root()
        disk = run_disk()
        out = disk.root / which
        with disk:
            summary = attempt(out, which)
        launch = json.loads((out / "record" / "launch-0.json").read_text())
        return summary, out, disk, launch["confinement"]["identity"]["uid"]
    # The test's own unprivileged user runs the harness; the test (root) mounts and measures its run folder's disk.
    uid, gid = harness_user() if os.geteuid() == 0 else (os.getuid(), os.getgid())
    disk = run_disk((uid, gid))
    passable(disk.root)
    out = disk.root / which
    with disk:
        summary = _as_harness_user(out, which, uid, gid)
    return summary, out, disk, uid


# -- the disk bound --------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("real_cli", "bwrap")
@pytest.mark.parametrize("mode", ["root", "unprivileged"])
def test_unlinked_deep_and_fallocated_bytes_count_and_stop_at_the_workspace_bound(mode, run_disk):
    summary, out, disk, _ = _run(mode, "disk", run_disk)
    bound = LIMITS.workspace_bytes
    assert summary["enforcement"] == "bubblewrap"
    assert summary["status"] == "capped" and summary["censored"] and summary["censor_reason"] == "disk", summary
    session = summary["sessions"][0]
    assert session["bound"] == "disk" and "full" in session["bound_detail"], session
    # The workspace's filesystem is the bound, and the kernel counted each route as it went.
    probe = json.loads((out / "workspace" / "outputs" / "probe.json").read_text())
    assert probe["size"] == bound
    assert probe["unlinked"]["written"] == bound // 4 and not probe["unlinked"]["named"]
    assert probe["unlinked"]["counted"] >= bound // 4
    assert probe["deep"]["path_bytes"] > 4096 and probe["deep"]["written"] == bound // 4
    assert probe["deep"]["counted"] >= bound // 4
    assert probe["fallocate"]["counted"] >= probe["fallocate"]["allocated"] == bound // 4
    # Three writers tried twelve times the bound between two looks of the watcher: the host never held the bound.
    assert disk.most <= bound + RECORD_SLACK, (disk.before, disk.most, disk.after)
    assert disk.after - disk.before <= bound + RECORD_SLACK
    # What the record says holds the bound on this host.
    conf = json.loads((out / "record" / "launch-0.json").read_text())["confinement"]
    assert conf["disk"]["kind"] == "tmpfs" and conf["disk"]["bytes"] == bound
    assert conf["disk"]["namespace"] == ("mount" if mode == "root" else "user+mount")
    assert conf["disk"]["holds"] == ["workspace", "home", "claude-config"]
    assert conf["held_by"]["disk"].startswith("the kernel: a size-limited tmpfs")
    # The take-back kept what had a name and fitted: the deep files beyond the path bound went with the disk.
    taken = session["taken_back"]
    assert taken["bytes"] <= bound and taken["removed_by_reason"].get("a path longer than 2048 bytes") == 1
    assert json.loads((out / "record" / "takeback-0.json").read_text()) == taken


# -- /dev/shm and the take-back --------------------------------------------------------------------------------------


def _entries(root: Path):
    """Every entry under ``root`` (links not followed) with its lstat."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            yield p, os.lstat(p)


@pytest.mark.usefixtures("real_cli", "bwrap")
@pytest.mark.parametrize("mode", ["root", "unprivileged"])
def test_shm_stops_at_the_tmp_bound_and_the_take_back_leaves_nothing_of_the_workers(mode, run_disk):
    shadow = os.lstat("/etc/shadow")
    summary, out, disk, worker_uid = _run(mode, "takeback", run_disk)
    assert summary["status"] == "capped" and summary["censor_reason"] == "tmp", summary
    session = summary["sessions"][0]
    assert session["bound"] == "tmp" and session["bound_detail"].startswith("/dev/shm is full"), session
    ws, home = out / "workspace", out / "agent" / "home"
    probe = json.loads((ws / "outputs" / "probe.json").read_text())
    assert probe["shm_size"] == LIMITS.tmp_bytes and probe["shm_used_half"] >= LIMITS.tmp_bytes // 2
    # The disk is not the host's, and each folder is a mount of its own: no hard link leaves a folder of the worker's.
    assert probe["host_link"] == probe["home_link"] == 18  # EXDEV
    assert disk.most <= LIMITS.workspace_bytes + RECORD_SLACK
    harness_uid = 0 if mode == "root" else worker_uid
    if mode == "root":
        assert worker_uid != 0
    # Nothing under the run folder is the worker's, set-id, sticky, world-writable or anything but a file, folder, link.
    kinds = set()
    for p, st in _entries(out):
        kinds.add(stat.S_IFMT(st.st_mode))
        assert st.st_uid == harness_uid and (mode != "root" or st.st_uid != worker_uid), p
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), (p, oct(st.st_mode))
        if not stat.S_ISLNK(st.st_mode):
            assert not st.st_mode & stat.S_IWOTH, (p, oct(st.st_mode))
        if stat.S_ISREG(st.st_mode) and (ws in p.parents or home in p.parents):
            assert st.st_nlink == 1, p
    assert kinds <= {stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK}
    # Each name of a hard-linked pair is a file of its own; the modes keep their owner's and group's bits.
    assert (ws / "pair-a.txt").read_text() == (ws / "pair-b.txt").read_text() == "one inode, two names"
    assert stat.S_IMODE((ws / "wwsg").stat().st_mode) == 0o775
    assert stat.S_IMODE((ws / "wwsg" / "inside.txt").stat().st_mode) == 0o664
    assert stat.S_IMODE((ws / "sticky").stat().st_mode) == 0o775
    assert stat.S_IMODE((ws / "suid.sh").stat().st_mode) == stat.S_IMODE((ws / "sgid.sh").stat().st_mode) == 0o755
    assert (ws / "closed.txt").read_text() == "mode 000" and stat.S_IMODE((ws / "closed.txt").stat().st_mode) == 0o600
    assert (ws / "locked" / "inner.txt").read_text() == "in a folder of mode 000"
    # A link stays a link, its target never read or changed.
    assert os.readlink(ws / "shadow-link") == "/etc/shadow"
    after = os.lstat("/etc/shadow")
    assert (after.st_uid, after.st_mode, after.st_mtime_ns) == (shadow.st_uid, shadow.st_mode, shadow.st_mtime_ns)
    # What could not be taken back is gone, and the record names it with why.
    for gone in ("pipe", "sock", "host-passwd"):
        assert not os.path.lexists(ws / gone), gone
    # A sparse giant stays a hole: its size, and next to no blocks on the host.
    giant = os.stat(ws / "sparse-giant")
    assert giant.st_size == LIMITS.workspace_bytes and giant.st_blocks * 512 <= 64 * 1024
    deep_kept = ws / "deep"
    levels = 0
    while (deep_kept / ("d" * 200)).is_dir():
        deep_kept, levels = deep_kept / ("d" * 200), levels + 1
    # "workspace/deep" (14 bytes) and k levels of 201 bytes: the deepest kept folder is the last within 2048 bytes.
    assert levels == (2048 - len("workspace/deep")) // 201
    taken = session["taken_back"]
    reasons = taken["removed_by_reason"]
    assert reasons == {"a FIFO": 1, "a socket": 1, "a path longer than 2048 bytes": 1}
    assert taken["removed"] == 3 and len(taken["removed_names"]) == 3
    assert {n.split(" (")[0] for n in taken["removed_names"] if not n.startswith("workspace/deep/")} == {
        "workspace/pipe",
        "workspace/sock",
    }
    assert taken["hard_links"] == 2
    assert json.loads((out / "record" / "takeback-0.json").read_text()) == taken


# -- the parts, without the CLI --------------------------------------------------------------------------------------


def test_every_tmpfs_the_sandbox_mounts_has_a_size_and_its_unsized_dev_is_read_only(tmp_path):
    plan = sandbox.make_plan(
        features={"libreoffice": False, "chromium": False},
        extra_ro=[],
        rw=[tmp_path],
        masked={},
        stub_dir=tmp_path / "stubs",
    )
    argv = sandbox.bwrap_prefix(plan, tmp_bytes=LIMITS.tmp_bytes)
    argv = argv[: argv.index("--")]
    tmpfs = [i for i, a in enumerate(argv) if a == "--tmpfs"]
    assert {argv[i + 1] for i in tmpfs} >= {"/tmp", "/var/tmp", "/run", "/dev/shm"}
    for i in tmpfs:
        assert argv[i - 2] == "--size", argv[i + 1]
        size = int(argv[i - 1])
        assert size == LIMITS.tmp_bytes if argv[i + 1] in sandbox.SCRATCH_TMPFS else size <= 64 * 1024
    # bubblewrap's own /dev is a tmpfs without a size: read-only once everything is mounted on it.
    remounts = [i for i in range(len(argv) - 1) if argv[i : i + 2] == ["--remount-ro", "/dev"]]
    assert len(remounts) == 1 and remounts[0] > argv.index("/dev/shm")


def test_the_session_disk_is_held_by_the_kernel_and_never_mounted_on_the_host(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    size = 4 * MIB
    with bounded_disk.SessionDisk.create(mount_point, size, entries=64) as disk:
        # Nothing appears at the mount point in the harness's own namespace.
        assert os.listdir(mount_point) == [] and "pilot-disk" not in Path("/proc/self/mountinfo").read_text()
        assert os.fstatvfs(disk.root_fd).f_blocks * os.fstatvfs(disk.root_fd).f_frsize == size
        fd = os.open("held", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=disk.root_fd)
        os.unlink("held", dir_fd=disk.root_fd)
        written, refused = 0, None
        try:
            while written < 4 * size:
                written += os.write(fd, b"x" * 65536)
        except OSError as exc:
            refused = exc.errno
        assert refused == 28 and written <= size  # ENOSPC at the size, a name or not
        assert disk.full() is not None and "full" in disk.full()
        os.close(fd)
        assert disk.full() is None  # the blocks of a closed unlinked file are free again
        for i in range(70):
            try:
                os.close(os.open(f"e{i}", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=disk.root_fd))
            except OSError as exc:
                assert exc.errno == 28 and i < 64
                break
        else:
            raise AssertionError("the disk took more entries than its bound")
        assert "entries" in disk.full()
    assert disk.closed


def _hand_made_tree(root: Path, bound: int) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("a")
    os.link(root / "sub" / "a.txt", root / "b.txt")
    d = root / "deep"
    d.mkdir()
    fd = os.open(d, os.O_RDONLY)
    for _ in range(25):
        os.mkdir("d" * 100, dir_fd=fd)
        nxt = os.open("d" * 100, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)
    (root / "setid").mkdir()
    os.chmod(root / "setid", 0o3777)
    (root / "suid").write_text("x")
    os.chmod(root / "suid", 0o4777)
    os.mkfifo(root / "fifo")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(root / "sock"))
    s.close()
    os.symlink("/etc/passwd", root / "link")
    with open(root / "sparse", "wb") as f:
        f.truncate(bound + 1)
    with open(root / "holes", "wb") as f:
        f.seek(bound // 2)
        f.write(b"end")
    (root / "big1").write_bytes(b"1" * (bound // 2))
    (root / "big2").write_bytes(b"2" * (bound // 2))


def test_a_copy_by_descriptor_keeps_files_folders_and_links_within_its_bounds(tmp_path):
    bound = 1 * MIB
    src, dst = tmp_path / "src", tmp_path / "dst"
    _hand_made_tree(src, bound)
    dst.mkdir()
    sfd, dfd = takeback.open_folder(src), takeback.open_folder(dst)
    try:
        report = takeback.copy_tree(sfd, dfd, takeback.CopyBounds(bound, 1000, max_depth=64, max_path=1024))
    finally:
        os.close(sfd)
        os.close(dfd)
    # Kept: the hard-linked pair as two files, the link as a link, holes as holes, modes made safe.
    assert (dst / "b.txt").read_text() == (dst / "sub" / "a.txt").read_text() == "a"
    assert os.stat(dst / "b.txt").st_nlink == 1 and report.hard_links == 2
    assert os.readlink(dst / "link") == "/etc/passwd"
    assert stat.S_IMODE(os.stat(dst / "setid").st_mode) == 0o775
    assert stat.S_IMODE(os.stat(dst / "suid").st_mode) == 0o775
    holes = os.stat(dst / "holes")
    assert holes.st_size == bound // 2 + 3 and holes.st_blocks * 512 < 64 * 1024
    # Removed: the FIFO, the socket, the sparse file past the bound, what passes 1024 bytes of path ("deep" and
    # 101 bytes a level: the tenth level's folder is 1014 bytes, the eleventh's 1115), and the second large file
    # (the bytes taken back would pass the bound: the files are copied in name order, big1 first).
    reasons = report.reasons
    assert reasons["a FIFO"] == reasons["a socket"] == reasons["a file larger than the bound"] == 1
    assert reasons["a path longer than 1024 bytes"] == 1
    assert reasons[f"past the bound of {bound} bytes taken back"] == 1
    assert (dst / "big1").stat().st_size == bound // 2 and not (dst / "big2").exists()
    assert report.removed == 5 and report.bytes <= bound
    kept = dst / "deep"
    levels = 0
    while (kept / ("d" * 100)).is_dir():
        kept, levels = kept / ("d" * 100), levels + 1
    assert levels == 10
