"""An attempt's kept files packed on a worker, unpacked and verified on the host; nothing else, nothing unchecked."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import tarfile
from pathlib import Path

import pytest

from pilot.executors import transfer
from pilot.executors.transfer import Package, TransferError, keep_apart, pack_attempt, unpack_attempt

PROXY = "record/proxy/workspaces_BANK-01.A3.r1_attempt-1-544544c13bad"
KEPT_FILES = {
    ".pilot-run": b"one attempt of one run; this folder is reset by the next attempt\n",
    "run_record.json": b'{"status": "completed"}\n',
    "evaluation.json": b'{"D": true}\n',
    "attempt_outcome.json": b'{"infra_error": null}\n',
    "workspace_manifest.json": b'{"outputs/memo.docx": "ab"}\n',
    "selfcheck_first.txt": b"FAIL totals\n",
    "selfcheck_final.txt": b"PASS\n",
    "transcript.jsonl": b'{"type": "assistant"}\n' * 2000,
    "record/launch-0.json": b'{"argv": []}\n',
    "record/stderr-0.log": b"",
    "record/network_refusals.jsonl": b'{"host": "example.com"}\n',
    f"{PROXY}/proxy_usage.jsonl": b'{"input_tokens": 10}\n',
    f"{PROXY}/proxy_exchanges.jsonl": b'{"request": 1}\n' * 50,
    "portal/portal_access.jsonl": b'{"path": "/"}\n',
    "workspace/CHECKPOINT.md": b"# Checkpoint\n",
    "workspace/inputs/bank_statement.csv": b"date,amount\n2026-10-01,12.50\n",
    "workspace/outputs/completion_record.json": b'{"status": "complete"}\n',
    "workspace/outputs/memo.docx": os.urandom(40_000),
    "workspace/outputs/tables/issues_log.csv": b"id,issue\n1,late\n",
    # the whole workspace travels: the record's digest of it must hold on the study's copy (pilot study reevaluate)
    "workspace/BRIEF.md": b"Reconcile the bank statement.\n",
    "workspace/POLICY.md": b"The policy.\n",
    "workspace/selfcheck.py": b"print('check')\n",
    "workspace/portal_credentials.json": b'{"password": "secret"}\n',
}
NOT_KEPT = {
    "agent/settings.json": b"{}\n",
    "agent/claude-config/.claude.json": b"{}\n",
    "agent/claude-config/projects/x/session.jsonl": b"{}\n" * 100,
    "agent/home/.cache/fontconfig/cache-8": os.urandom(5000),
    "agent/stubs/curl": b"#!/bin/sh\nexit 1\n",
    "portal/portal_server.log": b"started\n",
    "notes.txt": b"not a record\n",
}


def _attempt(tmp: Path) -> Path:
    """An attempt folder laid out as the runner leaves one, with a link and a pipe where the worker could leave them."""
    d = tmp / "worker" / "BANK-01.A3.r1" / "attempt-1"
    for rel, data in {**KEPT_FILES, **NOT_KEPT}.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    (d / "workspace" / "outputs" / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(d / "workspace" / "outputs" / "pipe")
    with open(
        os.path.join(os.fsencode(d / "workspace" / "outputs"), b"bad\xff.csv"), "wb"
    ) as fh:  # a name that is not UTF-8
        fh.write(b"x\n")
    (d.parent / "attempt-1.launched").write_text("12345 678\n")
    return d


def _files_under(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file() and not p.is_symlink()}


def _rebuild(pkg: Package, change) -> Package:
    """The package's archive rewritten member by member; ``change(info, data)`` returns the (info, data) to write, or
    None."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(pkg.data), mode="r:gz") as src,
        tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as dst,
    ):
        for m in src:
            got = change(m, src.extractfile(m).read())
            if got is not None:
                info, data = got
                info.size = len(data)
                dst.addfile(info, io.BytesIO(data))
    return Package(out.getvalue(), json.loads(json.dumps(pkg.manifest)))


def _adding(pkg: Package, info: tarfile.TarInfo, data: bytes = b"") -> Package:
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(pkg.data), mode="r:gz") as src,
        tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as dst,
    ):
        for m in src:
            dst.addfile(m, src.extractfile(m))
        info.size = len(data) if info.isreg() else 0
        dst.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return Package(out.getvalue(), json.loads(json.dumps(pkg.manifest)))


def test_kept_names_are_the_ones_the_harness_writes():
    from pilot import attempt, runner, workspace
    from pilot.agents import network
    from pilot.portal import access_log

    kept = set(transfer.KEPT)
    assert {
        runner.EVALUATION_FILE,
        runner.WORKSPACE_MANIFEST,
        runner.RUN_MARKER,
        runner.TRANSCRIPT,
        attempt.OUTCOME_FILE,
        attempt.PHASE_FILE,
        workspace.TRANSCRIPT_NAME,
    } <= kept
    assert f"{workspace.HARNESS_RECORD_DIR}/**" in kept and f"portal/{access_log.ACCESS_LOG_NAME}" in kept
    assert network.REFUSAL_LOG == "network_refusals.jsonl"  # under record/, as the test's folder has it


def test_round_trip_brings_the_kept_files_only(tmp_path):
    src = _attempt(tmp_path)
    pkg = pickle.loads(pickle.dumps(pack_attempt(src, limit_bytes=64 * 1024 * 1024)))  # it travels as a dask result
    m = pkg.manifest
    assert set(m["files"]) == set(KEPT_FILES)
    assert m["omitted"] == {} and m["note"] is None and m["limit_bytes"] == 64 * 1024 * 1024
    assert m["skipped"] == {
        "workspace/outputs/passwd": "a symbolic link (not followed, not packed)",
        "workspace/outputs/pipe": "a pipe, socket or device, not a regular file",
        "workspace/outputs/bad\\xff.csv": "a name that is not UTF-8 (not packed)",
    }
    # records first, outputs next, inputs last
    order = list(m["files"])
    assert (
        order.index("run_record.json")
        < order.index("workspace/outputs/memo.docx")
        < order.index("record/launch-0.json")
        < order.index("workspace/inputs/bank_statement.csv")
    )
    dest = tmp_path / "host" / "BANK-01.A3.r1" / "attempt-1"
    got = unpack_attempt(pkg, dest)
    assert got == m
    arrived = _files_under(dest)
    assert json.loads(arrived.pop(transfer.MANIFEST_NAME)) == m
    assert arrived == KEPT_FILES
    for rel, entry in m["files"].items():
        assert entry == {"size": len(KEPT_FILES[rel]), "sha256": hashlib.sha256(KEPT_FILES[rel]).hexdigest()}
    assert (dest / "run_record.json").stat().st_mtime == int((src / "run_record.json").stat().st_mtime)
    assert not list(dest.parent.glob(".attempt-1.unpacking-*"))


def test_an_empty_destination_folder_is_filled_and_a_full_one_refused(tmp_path):
    pkg = pack_attempt(_attempt(tmp_path), limit_bytes=64 * 1024 * 1024)
    dest = tmp_path / "host" / "attempt-1"
    dest.mkdir(parents=True)
    unpack_attempt(pkg, dest)
    assert (dest / "run_record.json").is_file()
    with pytest.raises(TransferError, match="the destination exists and is not an empty folder") as exc:
        unpack_attempt(pkg, dest)
    assert exc.value.path == dest


def test_the_limit_holds_and_what_is_left_out_is_listed(tmp_path, monkeypatch):
    src = _attempt(tmp_path)
    for k in range(4):
        (src / "workspace" / "outputs" / f"scan-{k}.pdf").write_bytes(os.urandom(150_000))
    limit = 400_000
    pkg = pack_attempt(src, limit_bytes=limit)
    m = pkg.manifest
    assert len(pkg.data) <= limit
    assert m["omitted"] and all(r == f"over the package limit of {limit} bytes" for r in m["omitted"].values())
    assert set(m["files"]) | set(m["omitted"]) == set(KEPT_FILES) | {
        f"workspace/outputs/scan-{k}.pdf" for k in range(4)
    }
    assert not set(m["files"]) & set(m["omitted"])
    assert (
        f"{len(m['omitted'])} of {len(KEPT_FILES) + 4} kept files" in m["note"]
        and "transfer.max_package_mb in protocol/study.yml" in m["note"]
    )
    # the records come first: they are always in; a file that did not fit leaves room for the smaller ones after it
    assert {"run_record.json", "evaluation.json", "attempt_outcome.json", "workspace/inputs/bank_statement.csv"} <= set(
        m["files"]
    )
    dest = tmp_path / "host" / "attempt-1"
    unpack_attempt(pkg, dest)
    assert not any((dest / rel).exists() for rel in m["omitted"])
    # large files go last, whatever their place in KEPT
    monkeypatch.setattr(transfer, "LARGE_FILE_BYTES", 100_000)
    order = list(pack_attempt(src, limit_bytes=64 * 1024 * 1024).manifest["files"])
    assert order.index("workspace/inputs/bank_statement.csv") < order.index("workspace/outputs/scan-0.pdf")


def test_a_limit_below_an_empty_package_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"limit_bytes: 10 bytes is below the size of an empty package"):
        pack_attempt(_attempt(tmp_path), limit_bytes=10)
    with pytest.raises(ValueError, match="limit_bytes: must be a positive number of bytes"):
        pack_attempt(tmp_path, limit_bytes=0)
    with pytest.raises(TransferError, match="the attempt's folder is missing"):
        pack_attempt(tmp_path / "nope", limit_bytes=1000)


def test_a_tampered_file_is_named_and_no_destination_is_left(tmp_path):
    pkg = pack_attempt(_attempt(tmp_path), limit_bytes=64 * 1024 * 1024)
    target = "workspace/outputs/memo.docx"

    def flip(info, data):
        if info.name == target:
            data = bytearray(data)
            data[1000] ^= 0xFF
            data = bytes(data)
        return info, data

    bad = _rebuild(pkg, flip)
    dest = tmp_path / "host" / "attempt-1"
    with pytest.raises(TransferError, match=f"^{target}: sha256 differs from the manifest's") as exc:
        unpack_attempt(bad, dest)
    assert exc.value.path == Path(target)
    assert not dest.exists() and list(dest.parent.iterdir()) == []
    # a file the manifest names that the archive lacks
    short = _rebuild(pkg, lambda info, data: None if info.name == "evaluation.json" else (info, data))
    with pytest.raises(TransferError, match="^evaluation.json: in the manifest but not in the archive"):
        unpack_attempt(short, dest)
    assert not dest.exists()
    # a size that differs from the manifest's
    longer = _rebuild(pkg, lambda info, data: (info, data + b"x") if info.name == "run_record.json" else (info, data))
    with pytest.raises(TransferError, match="^run_record.json: size differs from the manifest's"):
        unpack_attempt(longer, dest)
    # bytes that are no gzip tar at all
    with pytest.raises(TransferError, match="not a readable gzip tar archive"):
        unpack_attempt(Package(b"not an archive", pkg.manifest), dest)
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


@pytest.mark.parametrize(
    "member, reason",
    [
        (_member("../evil"), "refused: a name holding '..'"),
        (_member("workspace/outputs/../../evil"), "refused: a name holding '..'"),
        (_member("/tmp/evil"), "refused: an absolute name"),
        (_member("workspace/outputs/link", tarfile.SYMTYPE, "/etc/passwd"), "refused: a link"),
        (_member("workspace/outputs/hard", tarfile.LNKTYPE, "run_record.json"), "refused: a link"),
        (_member("workspace/outputs/dev", tarfile.CHRTYPE), "refused: a device or pipe"),
        (_member("workspace/outputs/sub", tarfile.DIRTYPE), "refused: a folder entry"),
        (_member("workspace/outputs/extra.csv"), "refused: not in the package's manifest"),
        (_member("transfer_manifest.json"), "refused: the name of the host's own transfer_manifest.json"),
    ],
)
def test_members_that_are_not_the_manifests_regular_files_are_refused(tmp_path, member, reason):
    pkg = pack_attempt(_attempt(tmp_path), limit_bytes=64 * 1024 * 1024)
    bad = _adding(pkg, member, b"evil\n")
    if member.issym() or member.ischr():
        # even a member the manifest names as a file is refused when it is not one
        bad.manifest["files"][member.name] = {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    dest = tmp_path / "host" / "attempt-1"
    with pytest.raises(TransferError, match=f"^{member.name}: {reason}") as exc:
        unpack_attempt(bad, dest)
    assert exc.value.path == Path(member.name)
    assert not dest.exists() and list(dest.parent.iterdir()) == []
    assert not (tmp_path / "evil").exists() and not (tmp_path / "host" / "evil").exists()


def test_a_manifest_naming_an_unsafe_path_is_refused(tmp_path):
    pkg = pack_attempt(_attempt(tmp_path), limit_bytes=64 * 1024 * 1024)
    pkg.manifest["files"]["../evil"] = {"size": 1, "sha256": "0" * 64}
    with pytest.raises(TransferError, match=r"^\.\./evil: refused: the manifest names a name holding '\.\.'"):
        unpack_attempt(pkg, tmp_path / "host" / "attempt-1")
    over = pack_attempt(_attempt(tmp_path / "b"), limit_bytes=64 * 1024 * 1024)
    over.manifest["limit_bytes"] = 10
    with pytest.raises(TransferError, match="over its manifest's limit of 10 bytes"):
        unpack_attempt(over, tmp_path / "host" / "attempt-1")


def test_a_linked_folder_of_the_attempt_is_not_followed(tmp_path):
    src = _attempt(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host file\n")
    (src / "record").rename(tmp_path / "record-moved")
    (src / "record").symlink_to(outside)
    m = pack_attempt(src, limit_bytes=64 * 1024 * 1024).manifest
    assert not any(rel.startswith("record/") for rel in m["files"])
    assert m["skipped"]["record"] == "a symbolic link (not followed, not packed)"


def test_keep_apart(tmp_path):
    dest = tmp_path / "host" / "attempt-1"
    dest.mkdir(parents=True)
    (dest / "run_record.json").write_text("{}\n")
    first = keep_apart(dest, "run_record.json: sha256 differs from the manifest's")
    assert first == tmp_path / "host" / "attempt-1.transfer-failed-1"
    assert not dest.exists() and (first / "run_record.json").read_text() == "{}\n"
    assert (first / transfer.REASON_NAME).read_text() == "run_record.json: sha256 differs from the manifest's\n"
    # an unpack that failed leaves no folder: the reason and the package are kept
    pkg = Package(b"\x1f\x8b broken", {"files": {}, "omitted": {}, "skipped": {}, "limit_bytes": 100, "note": None})
    second = keep_apart(dest, "not a readable gzip tar archive", package=pkg)
    assert second.name == "attempt-1.transfer-failed-2"
    assert (second / "package.tar.gz").read_bytes() == pkg.data
    assert json.loads((second / "package_manifest.json").read_text()) == pkg.manifest
    assert (second / transfer.REASON_NAME).read_text() == "not a readable gzip tar archive\n"
