"""The harness reads what the worker wrote only through its bounded reader, and no worker buys a fresh draw.

Three levels:

* the reader itself (:mod:`pilot.worker_files`) against each kind of file a
  worker can leave, with ``openat2`` and with the name-by-name walk used
  where ``openat2`` is missing: a link to a host canary, a link to
  ``/proc/self/mem``, a link loop, a FIFO, a device, a sparse 2 GiB file, a
  tree deeper than ``PATH_MAX``; nothing is followed, nothing but a regular
  file is opened, no byte is read past the bound;
* the routes that read worker material (the completion record, the hashes,
  the oracle, the self-check, the judges' renderer, the viewer) and the
  phase rule of :mod:`pilot.attempt` (before the first model request a
  failure is infrastructure, after it the run's own outcome);
* attacks end to end: each hostile kind planted in the workspace of a run of
  ``pilot study run`` (the scheduler, the local executor, each attempt in its
  supervised process) ends as the run's own outcome, once, with the reason
  recorded, and no canary text reaches the record, the run table, the judges'
  prompt or a viewer page; and the same through the real pinned CLI in the
  real sandbox, as root and as an unprivileged harness.

The harness's time is asserted on the bytes it read (each run record keeps
``worker_bytes_read``), never on seconds.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest

from pilot import attempt, paths, worker_files
from pilot.oracles import hashing, safety

GIB2 = 2 * 1024**3
CANARY = "CANARY-7d1e5a9b0c4f"
TESTS = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------- helpers


@contextmanager
def deadline(seconds: int):
    """Fail, never hang, when a read blocks (a FIFO opened for reading blocks until a writer comes)."""

    def expired(signum, frame):
        raise AssertionError(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def canary_file(folder: Path) -> Path:
    """A host file the worker must never get through the harness: a valid completion record with five questions."""
    path = folder / "host-canary.json"
    record = {
        "status": "completed",
        "deliverables": [],
        "substitutions": [],
        "questions": [f"{CANARY} question {i}" for i in range(5)],
        "notes": CANARY,
    }
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def make_device(path: Path) -> str:
    """A device node where root may make one (``/dev/null``'s numbers), else a socket: either is not a regular file."""
    if os.geteuid() == 0:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return "device"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return "socket"


def make_deep_tree(top: Path, levels: int, name_len: int = 200) -> str:
    """``levels`` folders of ``name_len``-character names below ``top`` (built by descriptor: the path outgrows
    ``PATH_MAX``), a file ``leaf.txt`` at the bottom; the relative path of that file."""
    names = [f"{i:03d}" + "d" * (name_len - 3) for i in range(levels)]
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        leaf = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"at the bottom\n")
        os.close(leaf)
    finally:
        os.close(fd)
    return "/".join([*names, "leaf.txt"])


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---------------------------------------------------------------------------------------------- the reader, unit


@pytest.fixture(params=["openat2", "name walk"])
def mode(request, monkeypatch):
    """Every unit test runs with openat2 and with the walk a name at a time (what a host without openat2 gets)."""
    if request.param == "openat2":
        if sys.platform.startswith("linux") and not worker_files.HAVE_OPENAT2:
            pytest.fail("this Linux host does not serve openat2 with its resolve flags (kernel 5.6 or later needed)")
    else:
        monkeypatch.setattr(worker_files, "HAVE_OPENAT2", False)
    return request.param


@pytest.fixture
def tree(tmp_path):
    """A workspace holding one of each kind a worker can leave, and a host canary outside it."""
    ws = tmp_path / "ws"
    (ws / "outputs" / "sub").mkdir(parents=True)
    canary = canary_file(tmp_path)
    (ws / "outputs" / "good.txt").write_bytes(b"hello\n")
    (ws / "outputs" / "sub" / "inner.txt").write_bytes(b"inner\n")
    (ws / "outputs" / "to_canary").symlink_to(canary)
    (ws / "outputs" / "to_mem").symlink_to("/proc/self/mem")
    (ws / "outputs" / "inside_link").symlink_to("good.txt")
    (ws / "outputs" / "loop_a").symlink_to("loop_b")
    (ws / "outputs" / "loop_b").symlink_to("loop_a")
    (ws / "outputs" / "linked_dir").symlink_to(tmp_path)
    os.mkfifo(ws / "outputs" / "fifo")
    device = make_device(ws / "outputs" / "device")
    with open(ws / "outputs" / "giant.bin", "wb") as fh:
        fh.truncate(GIB2)
    return ws, canary, device


def _refusal(folder: worker_files.Folder, rel: str, max_bytes: int = 1024**2) -> worker_files.Refused:
    before = worker_files.bytes_read()
    with deadline(10), pytest.raises(worker_files.Refused) as info:
        folder.read_bytes(rel, max_bytes=max_bytes)
    assert worker_files.bytes_read() == before, "a refused file had bytes read"
    return info.value


def test_a_regular_file_is_read_and_counted(tree, mode):
    ws, _, _ = tree
    before = worker_files.bytes_read()
    with worker_files.Folder(ws) as folder:
        assert folder.read_bytes("outputs/good.txt", max_bytes=100) == b"hello\n"
        assert folder.read_bytes("outputs/sub/inner.txt", max_bytes=100) == b"inner\n"
    assert worker_files.bytes_read() - before == 12


@pytest.mark.parametrize(
    "rel, kind, words",
    [
        ("outputs/to_canary", worker_files.LINK, "symbolic link pointing outside"),
        ("outputs/to_mem", worker_files.LINK, "symbolic link pointing outside"),
        ("outputs/inside_link", worker_files.LINK, "symbolic link pointing inside"),
        ("outputs/loop_a", worker_files.LINK, "symbolic link"),
        ("outputs/linked_dir/host-canary.json", worker_files.LINK, "lies below outputs/linked_dir"),
        ("outputs/fifo", worker_files.SPECIAL, "pipe"),
        ("outputs/sub", worker_files.FOLDER, "is a folder"),
        ("outputs/giant.bin", worker_files.TOO_LARGE, f"is {GIB2} bytes"),
        ("outputs/absent", worker_files.MISSING, "not found"),
        ("outputs/good.txt/x", worker_files.NOT_A_FOLDER, "outputs/good.txt is a regular file"),
        ("../host-canary.json", worker_files.OUTSIDE, "climbs out"),
        ("/etc/passwd", worker_files.OUTSIDE, "absolute"),
    ],
)
def test_each_hostile_kind_is_refused_unread_and_named(tree, mode, rel, kind, words):
    ws, _, _ = tree
    with worker_files.Folder(ws) as folder:
        exc = _refusal(folder, rel)
    assert exc.kind == kind and words in str(exc) and str(exc).startswith(rel), str(exc)
    assert CANARY not in str(exc)


def test_a_device_is_refused_without_being_opened(tree, mode):
    ws, _, device = tree
    with worker_files.Folder(ws) as folder:
        exc = _refusal(folder, "outputs/device")
    assert exc.kind == worker_files.SPECIAL and device in exc.reason


def test_the_sparse_giant_is_refused_by_its_length_and_a_bound_is_never_passed(tree, mode):
    ws, _, _ = tree
    with worker_files.Folder(ws) as folder:
        exc = _refusal(folder, "outputs/giant.bin", max_bytes=GIB2 - 1)
        assert exc.size == GIB2 and exc.limit == GIB2 - 1
        # A page that shows the start of a long file reads that start, never more.
        before = worker_files.bytes_read()
        head, size = folder.read_prefix("outputs/giant.bin", max_bytes=4096)
    assert (len(head), size) == (4096, GIB2) and worker_files.bytes_read() - before == 4096


def test_a_root_that_is_a_link_is_refused(tmp_path, mode):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    with pytest.raises(worker_files.Refused) as info:
        worker_files.Folder(tmp_path / "alias")
    assert info.value.kind == worker_files.LINK


def test_listing_never_follows_and_names_every_kind(tree, mode):
    ws, _, device = tree
    with worker_files.Folder(ws) as folder:
        kinds = {e.name: e.kind for e in folder.listdir("outputs")}
    assert kinds["good.txt"] == "file" and kinds["sub"] == "folder" and kinds["giant.bin"] == "file"
    assert {kinds[n] for n in ("to_canary", "to_mem", "inside_link", "loop_a", "linked_dir")} == {"link"}
    assert kinds["fifo"] == "special" and kinds["device"] == "special"


def test_a_tree_deeper_than_path_max_is_walked_by_descriptor(tmp_path, mode):
    ws = tmp_path / "ws"
    rel = make_deep_tree(ws / "deep", levels=40)
    full = ws / "deep" / rel
    assert len(os.fsencode(full)) > 4096
    with pytest.raises(OSError) as info:  # the path itself is beyond what the kernel resolves
        open(full, "rb")
    assert info.value.errno == errno.ENAMETOOLONG
    fds = open_fds()
    with worker_files.Folder(ws) as folder:
        # A long relative path is opened a name at a time.
        assert folder.read_bytes(f"deep/{rel}", max_bytes=100) == b"at the bottom\n"
        leaves = [
            (listing.depth, e)
            for listing in folder.walk(max_depth=64, max_entries=1000)
            for e in listing.entries
            if e.name == "leaf.txt" and e.sha256(max_bytes=100)
        ]
    assert [d for d, _ in leaves] == [41]  # ws, deep, then the forty folders
    assert open_fds() == fds, "the walk left descriptors open"
    # The input-hash walk records the file by its content, not as unreadable.
    hashes = hashing.hash_inputs(ws)
    assert hashes[f"deep/{rel}"] == hashing.hashlib.sha256(b"at the bottom\n").hexdigest()


def test_the_walk_is_bounded_in_depth_and_entries(tmp_path, mode):
    ws = tmp_path / "ws"
    make_deep_tree(ws, levels=70, name_len=8)
    with worker_files.Folder(ws) as folder:
        depths = [listing.depth for listing in folder.walk(max_depth=64, max_entries=10_000)]
    assert max(depths) == 63
    wide = tmp_path / "wide"
    wide.mkdir()
    for i in range(50):
        (wide / f"f{i:02d}").write_text("x")
    with worker_files.Folder(wide) as folder:
        listings = list(folder.walk(max_depth=64, max_entries=20))
    assert listings[-1].truncated and sum(len(x.entries) for x in listings) == 20


def test_a_private_copy_is_the_harness_s_and_goes_with_its_scope(tree, mode):
    ws, _, _ = tree
    with worker_files.copies_scope(), worker_files.Folder(ws) as folder:
        copy, size = worker_files.private_copy(folder, "outputs/good.txt", max_bytes=100)
        assert copy.read_bytes() == b"hello\n" and size == 6 and copy.name == "good.txt"
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600 and worker_files.is_private_copy(copy)
        assert not worker_files.is_private_copy(ws / "outputs" / "good.txt")
    assert not copy.exists() and not copy.parent.exists()


# ---------------------------------------------------------------------------------------------- the hashes


def test_hashes_record_special_and_oversize_files_without_reading_them(tree, mode):
    ws, _, _ = tree
    before = worker_files.bytes_read()
    hashes = hashing.hash_inputs(ws / "outputs")
    assert worker_files.bytes_read() - before == len(b"hello\n") + len(b"inner\n")
    assert hashes["giant.bin"] == f"{hashing.OVERSIZE}{GIB2}"
    assert hashes["fifo"].startswith("special:p") and hashes["device"].startswith("special:")
    assert hashes["to_mem"] == "symlink:" + hashing.hashlib.sha256(b"/proc/self/mem").hexdigest()
    assert hashes["linked_dir"].startswith("symlink:") and not any(k.startswith("linked_dir/") for k in hashes)


def test_an_input_replaced_by_a_sparse_giant_is_a_change_named_as_such(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "data.csv").write_text("a,b\n1,2\n")
    before = hashing.hash_inputs(inputs)
    (inputs / "data.csv").unlink()
    with open(inputs / "data.csv", "wb") as fh:
        fh.truncate(GIB2)
    reasons = hashing.compare_hashes(before, hashing.hash_inputs(inputs))
    assert reasons == [
        f"input modified: inputs/data.csv (a file of {GIB2} bytes, above the {hashing.MAX_FILE_BYTES} bytes any "
        "reader admits; not read)"
    ]


def test_the_walk_reads_no_more_than_its_budget(tmp_path, monkeypatch):
    for i in range(4):
        (tmp_path / f"f{i}").write_bytes(b"x" * 1000)
    monkeypatch.setattr(hashing, "MAX_TOTAL_BYTES", 2500)
    before = worker_files.bytes_read()
    hashes = hashing.hash_inputs(tmp_path)
    assert worker_files.bytes_read() - before == 2000
    assert [hashes[f"f{i}"] for i in (2, 3)] == [f"{hashing.UNREAD}1000"] * 2


def test_inputs_replaced_by_a_link_is_recorded_not_followed(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "data.csv").write_text("a\n")
    (tmp_path / "inputs").symlink_to(tmp_path / "elsewhere")
    assert list(hashing.hash_inputs(tmp_path / "inputs")) == [""]
    assert hashing.compare_hashes({"data.csv": "x"}, hashing.hash_inputs(tmp_path / "inputs")) == [
        "input added: inputs/ (a symbolic link)",
        "input deleted: inputs/data.csv",
    ]


# ---------------------------------------------------------------------------------------------- routes, in process


def test_the_oracle_screen_reads_a_private_copy_and_names_each_refusal(tree):
    ws, _, _ = tree
    ok = safety.screen_path(ws / "outputs" / "good.txt", ws)
    assert ok.ok and worker_files.is_private_copy(ok.path) and ok.path.read_bytes() == b"hello\n"
    words = {
        "to_canary": "symlink pointing outside the workspace",
        "to_mem": "symlink pointing outside the workspace",
        "inside_link": "links are not followed, even inside the workspace",
        "fifo": "not a regular file",
        "device": "not a regular file",
        "giant.bin": "2.0 GB, above the 50.0 MB limit",
        "loop_a": "symlink",
    }
    for name, want in words.items():
        got = safety.screen_path(ws / "outputs" / name, ws)
        assert not got.ok and want in got.reason and CANARY not in got.reason, (name, got.reason)


@pytest.mark.parametrize("kind", ["canary", "proc_mem", "fifo", "device", "loop", "giant"])
def test_a_hostile_completion_record_is_refused_and_its_questions_are_missing(tmp_path, kind):
    from pilot import runner

    ws = tmp_path / "ws"
    (ws / "outputs").mkdir(parents=True)
    rec = ws / "outputs" / "completion_record.json"
    canary = canary_file(tmp_path)
    if kind == "canary":
        rec.symlink_to(canary)
    elif kind == "proc_mem":
        rec.symlink_to("/proc/self/mem")
    elif kind == "fifo":
        os.mkfifo(rec)
    elif kind == "device":
        make_device(rec)
    elif kind == "loop":
        rec.symlink_to("other")
        (ws / "outputs" / "other").symlink_to("completion_record.json")
    else:
        with open(rec, "wb") as fh:
            fh.truncate(GIB2)
    before = worker_files.bytes_read()
    with deadline(10):
        data, valid, refused = runner.load_completion_record(ws)
    assert (data, valid) == (None, False) and runner.count_questions(data) is None
    assert refused.startswith("outputs/completion_record.json ") and CANARY not in refused
    assert worker_files.bytes_read() == before
    # The old entry point answers the same without following anything.
    assert runner.read_completion_record(rec) == (None, False)


def _selfcheck_spec():
    return {
        "scenario": "TEST",
        "deliverables": [
            {"name": "notes.md", "kind": "completion_record"},
            {"name": "completion_record.json", "kind": "completion_record"},
        ],
    }


@pytest.mark.usefixtures("bwrap")  # the tool runs confined
def test_the_self_check_tool_reads_a_private_snapshot_never_the_worker_s_files(tree):
    from pilot.oracles import selfcheck

    ws, canary, _ = tree
    (ws / "outputs" / "completion_record.json").symlink_to(canary)
    (ws / "outputs" / "notes.md").unlink(missing_ok=True)
    os.mkfifo(ws / "outputs" / "notes.md")
    with deadline(60):
        report = selfcheck.run_tool(ws, _selfcheck_spec(), timeout=50)
    assert not report.passed
    assert "FAIL  completion_record.json is a symlink pointing outside the workspace" in report.text, report.text
    assert "FAIL  notes.md is not a regular file" in report.text, report.text
    assert CANARY not in report.text


def test_the_judges_rendering_and_the_viewer_listing_follow_no_link(tree):
    from pilot.judges.render import render_deliverable
    from pilot.view import files

    ws, canary, _ = tree
    (ws / "outputs" / "completion_record.json").symlink_to(canary)
    (ws / "outputs" / "memo.md").symlink_to("/proc/self/mem")
    with deadline(60):
        shown = [render_deliverable(n, ws / "outputs") for n in ("completion_record.json", "memo.md", "fifo")]
    for d in shown:
        assert "refused" in d.text and CANARY not in d.text, d.text
    offered = {f.name for f in files.output_files(ws / "outputs", ws.parent)}
    assert offered == {"good.txt", "giant.bin"}
    giant = next(f for f in files.output_files(ws / "outputs", ws.parent) if f.name == "giant.bin")
    with pytest.raises(worker_files.Refused):
        giant.read_bytes()
    assert files.read_text(ws / "outputs" / "to_canary", ws.parent) is None
    assert files.read_text(ws / "outputs" / "fifo", ws.parent) is None


# ---------------------------------------------------------------------------------------------- the phase rule


def raise_in_setup(cell, attempt_dir, node, backend, seed):
    attempt.mark_phase(attempt_dir, "setup")
    raise RuntimeError("the sandbox would not start")


def raise_before_the_first_request(cell, attempt_dir, node, backend, seed):
    record = Path(attempt_dir) / "record" / "proxy_usage.jsonl"
    record.parent.mkdir(parents=True)
    record.write_text('{"seq": 1, "kind": "opened"}\n')  # the proxy is up, and has metered nothing yet
    attempt.mark_phase(attempt_dir, "agent", requests_record=record)
    raise RuntimeError("bubblewrap failed to exec")


def raise_after_the_first_request(cell, attempt_dir, node, backend, seed):
    record = Path(attempt_dir) / "record" / "proxy_usage.jsonl"
    record.parent.mkdir(parents=True)
    attempt.mark_phase(attempt_dir, "agent", requests_record=record)
    record.write_text('{"seq": 1, "kind": "opened"}\n{"seq": 2, "kind": "messages"}\n')  # a request reached it
    raise RuntimeError("the harness tripped over the worker's file")


def _cell():
    from pilot.attempt import CellSpec

    return CellSpec("LEGAL-01.A1.r1", "s", "pilot", "LEGAL-01", "A1", 1, "m", 0, 1, 4.0, 1800.0, 4.5)


@pytest.mark.parametrize(
    "fn, infra",
    [("raise_in_setup", True), ("raise_before_the_first_request", True), ("raise_after_the_first_request", False)],
)
def test_only_a_failure_before_the_first_model_request_is_infrastructure(tmp_path, fn, infra):
    from pilot.executors.base import execute_attempt

    folder = tmp_path / "LEGAL-01.A1.r1" / "attempt-1"
    out = execute_attempt(f"{Path(__file__).stem}:{fn}", _cell(), str(folder), "n", "simulated")
    assert (out.infra_error is not None) == infra, out
    if not infra:
        assert out.status == "agent_error" and out.cost_usd is None  # unknown: the ledger charges the reservation
        fault = out.record["harness_fault"]
        assert fault.startswith(f"{attempt.HARNESS_FAULT_PREFIX} (phase agent): RuntimeError: the harness tripped")
        assert out.record["eval_error"] and out.record["D"] is False  # no verdict: counted, never a D = 0
    assert json.loads((folder / attempt.OUTCOME_FILE).read_text())["status"] == out.status


# ------------------------------------------------------------------------------------- end to end, the scheduler

KINDS = [
    "canary",
    "proc_mem",
    "fifo",
    "device",
    "loop",
    "giant",
    "deep",
    "harness_bug",
    "worker_dies",
]


def _plant(kind: str, ws: Path, canary: Path, deliverable_name: str) -> None:
    """Leave the hostile ``kind`` in a finished session's workspace, as a worker could."""
    out = ws / "outputs"
    rec = out / "completion_record.json"
    deliverable = out / deliverable_name
    if kind in ("canary", "proc_mem", "fifo", "device", "loop", "giant"):
        for p in (rec, deliverable):
            p.unlink(missing_ok=True)
    if kind == "canary":
        rec.symlink_to(canary)
        deliverable.symlink_to(canary)
    elif kind == "proc_mem":
        rec.symlink_to("/proc/self/mem")
        deliverable.symlink_to("/proc/self/mem")
    elif kind == "fifo":
        os.mkfifo(rec)
        os.mkfifo(deliverable)
    elif kind == "device":
        make_device(rec)
        make_device(deliverable)
    elif kind == "loop":
        rec.symlink_to("loop")
        (out / "loop").symlink_to("completion_record.json")
        deliverable.symlink_to(deliverable.name)
        (ws / "dirloop").symlink_to(".")
    elif kind == "giant":
        for p in (rec, deliverable, ws / "giant.bin"):
            with open(p, "wb") as fh:
                fh.truncate(GIB2)
    elif kind == "deep":
        make_deep_tree(ws / "deep", levels=80)


def _unplant(ws: Path) -> None:
    """Take what was planted away again before the stand-in agent (which writes as the harness) works once more."""
    import shutil

    for p in [*(ws / "outputs").iterdir(), ws / "giant.bin", ws / "dirloop"]:
        if p.is_symlink() or not (p.is_file() or p.is_dir()) or p.stat().st_size > 50 * 1024**2:
            p.unlink(missing_ok=True)
    shutil.rmtree(ws / "deep", ignore_errors=True)


def planting_run_cell(cell, attempt_dir, node, backend, seed):
    """The study's run function in the attack test: the pipeline's own, with the planted kind left after each
    session of the simulated agent (``HOSTILE_PLANTS``: one kind per order index)."""
    from pilot import pipeline, runner
    from pilot.simulated import agent as sim

    kinds = json.loads(os.environ["HOSTILE_PLANTS"])
    kind = kinds[cell.order_index] if cell.order_index < len(kinds) else None
    canary = Path(os.environ["HOSTILE_CANARY"])
    if kind is not None:
        real = sim.SimulatedBackend.run_session

        def run_session(self, index, **kw):
            if index > 0:
                _unplant(self.workspace)
            out = real(self, index, **kw)
            if kind == "worker_dies":
                os._exit(9)  # the attempt's process dies after inference (a crash while handling the worker's files)
            _plant(kind, self.workspace, canary, self.scenario.file_deliverables[0].name)
            return out

        sim.SimulatedBackend.run_session = run_session
        if kind == "harness_bug":

            def broken(workspace):
                raise RuntimeError("planted harness bug while reading the completion record")

            runner.load_completion_record = broken
    return pipeline.run_cell(cell, attempt_dir, node, backend, seed)


@pytest.fixture(scope="module")
def attacked(tmp_path_factory, bwrap):  # the A4 runs' self-check runs confined
    """One study whose runs each met one hostile kind, run by `pilot study run` and exported."""
    from schedule_support import make_root

    base = tmp_path_factory.mktemp("hands")
    root = make_root(base)
    canary = canary_file(base)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        PILOT_ROOT=str(root),
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")])),
        HOSTILE_PLANTS=json.dumps(KINDS),
        HOSTILE_CANARY=str(canary),
    )

    def pilot(*args):
        return subprocess.run(
            [sys.executable, "-m", "pilot", "study", *args], env=env, capture_output=True, text=True, timeout=900
        )

    made = pilot(
        "create",
        "hands",
        "--scenarios",
        "LEGAL-01",
        "OPS-01",
        "--arms",
        "A1,A3,A4",
        "--pilot-repeats",
        "2",
        "--runner",
        f"{Path(__file__).stem}:planting_run_cell",
    )
    assert made.returncode == 0, made.stderr
    ran = pilot("run", "hands", "--no-progress")
    assert ran.returncode == 0, ran.stderr[-4000:]
    exported = pilot("export", "hands")
    assert exported.returncode == 0, exported.stderr[-2000:]
    folder = root / "analysis" / "data" / "hands"
    with sqlite3.connect(folder / "study.sqlite") as conn:
        conn.row_factory = sqlite3.Row
        cells = {r["run_id"]: dict(r) for r in conn.execute("SELECT * FROM cells")}
        attempts = [dict(r) for r in conn.execute("SELECT * FROM attempts")]
        records = {r["run_id"]: json.loads(r["record_json"]) for r in conn.execute("SELECT * FROM runs")}
    kind_of = {rid: KINDS[c["order_index"]] for rid, c in cells.items() if c["order_index"] < len(KINDS)}
    yield {
        "root": root,
        "env": env,
        "folder": folder,
        "cells": cells,
        "attempts": attempts,
        "records": records,
        "kind_of": kind_of,
        "runs_csv": (folder / "runs.csv").read_text(encoding="utf-8"),
        "stderr": ran.stderr,
    }
    import shutil

    for d in folder.glob("workspaces/*/attempt-*/workspace/deep"):
        shutil.rmtree(d, ignore_errors=True)


def test_every_planted_run_ends_as_its_own_outcome_once(attacked):
    assert set(attacked["kind_of"].values()) == set(KINDS) and len(attacked["cells"]) == 12
    by_run: dict[str, list[dict]] = {}
    for a in attacked["attempts"]:
        by_run.setdefault(a["run_id"], []).append(a)
    for rid, atts in by_run.items():
        kind = attacked["kind_of"].get(rid)
        assert [a["outcome"] for a in atts] != ["infra_error"] and len(atts) == 1, (kind, atts)
        assert atts[0]["outcome"] in ("completed", "capped", "agent_error"), (kind, atts[0])
        assert attacked["cells"][rid]["status"] == "done"
    assert set(attacked["records"]) == set(attacked["cells"])


def _record_of(attacked, kind: str) -> dict:
    rid = next(r for r, k in attacked["kind_of"].items() if k == kind)
    return attacked["records"][rid]


@pytest.mark.parametrize(
    "kind, words",
    [
        ("canary", "is a symbolic link pointing outside its folder"),
        ("proc_mem", "is a symbolic link pointing outside its folder"),
        ("fifo", "is a pipe (FIFO), not a regular file"),
        ("device", "not a regular file"),
        ("loop", "is a symbolic link"),
        ("giant", f"is {GIB2} bytes, above the limit"),
    ],
)
def test_a_hostile_completion_record_is_named_on_its_run_and_adds_no_question(attacked, kind, words):
    rec = _record_of(attacked, kind)
    notes = [n for n in rec["notes"] if n.startswith("the completion record was not read: ")]
    assert notes and words in notes[0], rec["notes"]
    assert rec["questions"] is None and rec["completion_record_valid"] is False
    assert rec["harness_fault"] is None and rec["eval_error"] is None  # evaluated as delivered
    failed = " ".join(c["reason"] for c in rec["criteria"] if not c["passed"])
    assert "completion_record.json" in failed and not rec["D"]


def test_a_deep_tree_is_recorded_as_too_deep_in_the_workspace_manifest(attacked):
    rid = next(r for r, k in attacked["kind_of"].items() if k == "deep")
    manifest = json.loads(
        (attacked["folder"] / "workspaces" / rid / "attempt-1" / "workspace_manifest.json").read_text()
    )
    assert any(k.startswith("deep/") and v == hashing.TOO_DEEP for k, v in manifest.items())
    rec = attacked["records"][rid]
    assert rec["harness_fault"] is None and rec["eval_error"] is None


def test_a_harness_fault_after_inference_is_the_run_s_outcome_and_named(attacked):
    bug = _record_of(attacked, "harness_bug")
    assert bug["status"] == "agent_error" and "planted harness bug" in bug["harness_fault"]
    assert bug["harness_fault"].startswith(f"{attempt.HARNESS_FAULT_PREFIX} (phase collect)")
    assert bug["eval_error"] is None and bug["criteria"], "evaluated as delivered"
    died = _record_of(attacked, "worker_dies")
    assert died["status"] == "agent_error" and "worker process died (exit status 9)" in died["harness_fault"]
    assert died["eval_error"]  # the process was gone before any evaluation: no verdict, counted
    # The run table names both, and nothing else.
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(attacked["runs_csv"])))
    faults = {r["run_id"] for r in rows if r.get("harness_fault")}
    assert faults == {r for r, k in attacked["kind_of"].items() if k in ("harness_bug", "worker_dies")}
    # ... and This run's fidelity table counts them.
    import pandas as pd

    from pilot.report import run_fidelity

    table = run_fidelity.fidelity(pd.read_csv(io.StringIO(attacked["runs_csv"])), [], ["A1", "A3", "A4"])
    assert table.set_index("measure").loc["harness faults after inference", "all"] == 2


def test_the_sparse_giants_cost_the_harness_no_reads(attacked):
    giant = _record_of(attacked, "giant")
    others = [r["worker_bytes_read"] for rid, r in attacked["records"].items() if rid not in attacked["kind_of"]]
    assert others and all(isinstance(n, int) and n > 0 for n in others)
    # Three sparse files of 2 GiB each in the workspace; the harness read what a normal run reads, no more.
    assert giant["worker_bytes_read"] <= max(others) + 1024**2, (giant["worker_bytes_read"], others)


def test_no_canary_reaches_the_store_the_run_table_the_judges_or_the_viewer(attacked):
    from pilot.judges import prompt_for_run
    from pilot.scenarios import load_scenario
    from pilot.view.app import create_app

    store_text = json.dumps(attacked["records"]) + json.dumps(attacked["attempts"])
    assert CANARY not in store_text and CANARY not in attacked["runs_csv"]
    client = create_app(attacked["folder"]).test_client()
    for rid, kind in attacked["kind_of"].items():
        page = client.get(f"/runs/{rid}")
        assert page.status_code == 200, (kind, page.status_code)
        assert CANARY not in page.get_data(as_text=True), kind
        outputs = attacked["folder"] / "workspaces" / rid / "attempt-1" / "workspace" / "outputs"
        if outputs.is_dir():
            with deadline(120):
                prompt = prompt_for_run(load_scenario(attacked["cells"][rid]["scenario"]), outputs)
            assert CANARY not in prompt.text, kind
        for f in outputs.iterdir() if outputs.is_dir() else []:
            if f.is_symlink() or not f.is_file():  # neither offered nor served
                assert client.get(f"/files/{rid}/attempt-1/{f.name}").status_code == 404, (kind, f.name)


# ---------------------------------------------------------------------------------------------- the real CLI


REAL_SID = "LEGAL-01"


def _hostile_bash(ws: Path, canary: Path) -> str:
    """What a worker's shell leaves in its workspace: each hostile kind the harness reads past."""
    import shlex

    deep = (
        "import os\nfd = os.open('deep', os.O_RDONLY)\nfor i in range(80):\n"
        "    n = f'{i:03d}' + 'd' * 197\n    os.mkdir(n, dir_fd=fd)\n"
        "    m = os.open(n, os.O_RDONLY, dir_fd=fd)\n    os.close(fd)\n    fd = m\n"
    )
    return (
        f"cd {shlex.quote(str(ws))} && mkdir -p outputs && ln -sfn /proc/self/mem outputs/completion_record.json"
        f" && ln -sfn {shlex.quote(str(canary))} outputs/msa_review_memo.docx && mkfifo outputs/issues_log.csv"
        f" && truncate -s 2G giant.bin && ln -s . dirloop && mkdir deep && python3 -c {shlex.quote(deep)}"
        " && ls -la outputs"
    )


def _real_turns(ws: Path, canary: Path):
    from fake_messages_api import text_turn, tool_turn

    return [
        tool_turn("Bash", {"command": _hostile_bash(ws, canary), "description": "leave the files"}, "toolu_h1"),
        text_turn("Done."),
    ]


def _check_hostile_real_run(rec: dict, out: Path) -> None:
    assert rec["status"] in ("completed", "capped") and rec["infra_error"] is None, (rec["status"], rec["notes"])
    assert (out / "workspace" / "giant.bin").stat().st_size == GIB2  # the worker did leave the giant
    notes = [n for n in rec["notes"] if n.startswith("the completion record was not read: ")]
    assert notes and "symbolic link pointing outside its folder" in notes[0], rec["notes"]
    assert rec["questions"] is None
    memo = next(c for c in rec["criteria"] if c["file"] == "msa_review_memo.docx" and c["kind"] == "present")
    assert "symlink pointing outside the workspace" in memo["reason"]
    text = (out / "run_record.json").read_text() + (out / "evaluation.json").read_text()
    assert CANARY not in text
    assert rec["worker_bytes_read"] < 16 * 1024**2, rec["worker_bytes_read"]


@pytest.fixture
def real_cli_or_fail(real_cli, bwrap):
    from real_cli_support import require_real_sandbox

    return require_real_sandbox()


def _real_attempt(tmp_path: Path, cli: Path, url: str, out: Path, *, worker_env: Path | None = None):
    """One attempt of the pinned CLI in the real sandbox, A1 on LEGAL-01, its model the fake at ``url``."""
    from worker_env_support import make_worker_env

    from pilot.protocol import Caps
    from pilot.runner import run_attempt

    return run_attempt(
        REAL_SID,
        "A1",
        backend="claude-code",
        out_dir=out,
        seed=1,
        claude_bin=cli,
        caps=Caps(20.0, 300),
        worker_env=worker_env or make_worker_env(tmp_path),
        environ={"ANTHROPIC_API_KEY": "sk-ant-test-only", "ANTHROPIC_BASE_URL": url},
    )


def test_the_real_cli_s_hostile_workspace_is_read_past_as_root(tmp_path, real_cli_or_fail):
    """The pinned CLI in the real sandbox: its shell leaves every hostile kind; the harness reads none of it."""
    from fake_messages_api import FakeMessagesAPI

    from pilot import protocol

    out = tmp_path.resolve() / "run"
    canary = canary_file(tmp_path)
    with FakeMessagesAPI(protocol.study()["worker"]["model"], _real_turns(out / "workspace", canary)) as api:
        rec = _real_attempt(tmp_path, real_cli_or_fail, api.url, out)
    _check_hostile_real_run(rec.to_dict(), out)


def test_a_harness_fault_after_the_first_request_is_not_rerun(tmp_path, real_cli_or_fail, monkeypatch):
    from fake_messages_api import FakeMessagesAPI, text_turn

    from pilot import protocol, runner

    def broken(workspace):
        raise RuntimeError("planted harness bug")

    monkeypatch.setattr(runner, "load_completion_record", broken)
    out = tmp_path.resolve() / "run"
    with FakeMessagesAPI(protocol.study()["worker"]["model"], [text_turn("Done.")]) as api:
        rec = _real_attempt(tmp_path, real_cli_or_fail, api.url, out)
        requests = len(api.requests)
    assert requests >= 1 and attempt.inference_began(out)
    assert rec.status == "agent_error" and rec.infra_error is None
    assert rec.harness_fault.startswith(f"{attempt.HARNESS_FAULT_PREFIX} (phase collect): RuntimeError: planted")
    assert rec.metered_cost_usd is not None and rec.metered_cost_usd > 0 and rec.criteria  # charged, evaluated


def test_a_harness_fault_before_the_first_request_is_infrastructure(tmp_path, real_cli_or_fail, monkeypatch):
    from pilot.agents import claude_code

    def broken(self, index, **kw):
        raise RuntimeError("the sandbox could not be made")

    monkeypatch.setattr(claude_code.ClaudeCodeBackend, "run_session", broken)
    out = tmp_path.resolve() / "run"
    with pytest.raises(RuntimeError, match="the sandbox could not be made"):
        _real_attempt(tmp_path, real_cli_or_fail, "http://192.0.2.1:9", out)
    assert attempt.read_phase(out)["phase"] == "agent" and not attempt.inference_began(out)


UNPRIVILEGED = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from fake_messages_api import FakeMessagesAPI
    from worker_env_support import make_worker_env
    import test_harness_hands_readers as t
    from pilot import protocol
    base = Path({base!r})
    out, canary = base / "run", Path({canary!r})
    with FakeMessagesAPI(protocol.study()["worker"]["model"], t._real_turns(out / "workspace", canary)) as api:
        rec = t._real_attempt(base, Path({cli!r}), api.url, out, worker_env=make_worker_env(base / "env"))
    print(json.dumps(rec.to_dict(), default=str))
""")


def test_the_real_cli_s_hostile_workspace_is_read_past_by_an_unprivileged_harness(real_cli_or_fail):
    """The same attack with the harness itself running as a user without privilege (root drops to one)."""
    import shutil
    import uuid

    from privilege_support import run_as_harness_user

    base = paths.BUILD_DIR / "test-harness-hands" / uuid.uuid4().hex[:10]
    base.mkdir(parents=True)
    try:
        canary = canary_file(base)
        script = UNPRIVILEGED.format(tests=str(TESTS), base=str(base), canary=str(canary), cli=str(real_cli_or_fail))
        proc, _ = run_as_harness_user(base, script, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
        assert rec["enforcement"] == "bubblewrap"
        launch = json.loads((base / "run" / "record" / "launch-0.json").read_text())
        assert launch["confinement"]["identity"]["dedicated"] is False  # the harness's own uid, no worker user
        _check_hostile_real_run(rec, base / "run")
    finally:
        shutil.rmtree(base, ignore_errors=True)
