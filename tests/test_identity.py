"""The protocol identity a worker proves before a run: every frozen and run file, the CLI and the worker environment."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from pilot import backends, identity, paths
from pilot.agents import identity_extras
from pilot.identity import ProtocolIdentity, first_difference, protocol_identity

ORACLE = "protocol/scenarios/BANK-01/oracle.yml"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repository root holding a copy of the protocol folder (the oracle code stays the imported package's)."""
    shutil.copytree(paths.PROTOCOL_DIR, tmp_path / "protocol")
    return tmp_path


def _flip_one_byte(path: Path) -> None:
    """Change one byte in place, keeping the size and the mtime (only the ctime tells)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_equal_identities_have_no_difference(root):
    first = protocol_identity(None, backend="simulated", root=root)
    again = protocol_identity(None, backend="simulated", root=root)
    assert first_difference(first, again) is None
    # the copy is the repository's protocol: the same identity
    assert first_difference(protocol_identity(None, backend="simulated"), first) is None
    assert first.extras == {}
    assert ORACLE in first.files and "pilot/oracles/__init__.py" in first.files
    for rel in ("protocol/study.yml", "protocol/prices.yml", "protocol/completion_record.schema.json"):
        assert rel in first.files
    assert list(first.files) == sorted(first.files)


def test_one_byte_of_an_oracle_is_named_even_with_size_and_mtime_kept(root):
    study = protocol_identity(None, backend="simulated", root=root)
    _flip_one_byte(root / ORACLE)
    worker = protocol_identity(None, backend="simulated", root=root)
    line = first_difference(study, worker)
    assert line == f"{ORACLE} differs (study {study.files[ORACLE][:8]}…, worker {worker.files[ORACLE][:8]}…)"
    assert study.digest != worker.digest


def test_a_run_protocol_file_outside_the_manifest_counts(root):
    study = protocol_identity(None, backend="simulated", root=root)
    with (root / "protocol" / "prices.yml").open("a") as fh:
        fh.write("\n")
    assert first_difference(study, protocol_identity(None, backend="simulated", root=root)).startswith(
        "protocol/prices.yml differs (study "
    )


def test_a_file_added_or_removed_is_named(root):
    study = protocol_identity(None, backend="simulated", root=root)
    added = root / "protocol" / "scenarios" / "BANK-01" / "inputs" / "extra.csv"
    added.write_text("a,b\n")
    assert (
        first_difference(study, protocol_identity(None, backend="simulated", root=root))
        == "protocol/scenarios/BANK-01/inputs/extra.csv is on the worker only"
    )
    added.unlink()
    (root / ORACLE).unlink()
    assert (
        first_difference(study, protocol_identity(None, backend="simulated", root=root))
        == f"{ORACLE} is missing on the worker"
    )
    (root / "protocol" / "completion_record.schema.json").unlink()
    worker = protocol_identity(None, backend="simulated", root=root)
    # sorted order: the schema comes before the scenarios
    assert first_difference(study, worker) == "protocol/completion_record.schema.json is missing on the worker"


def test_the_scenarios_of_the_study_only(root):
    one = protocol_identity(["BANK-01"], backend="simulated", root=root)
    assert ORACLE in one.files and not any(k.startswith("protocol/scenarios/ACC-01/") for k in one.files)
    # a scenario the study does not use changes none of its runs
    (root / "protocol" / "scenarios" / "ACC-01" / "oracle.yml").write_text("changed\n")
    assert first_difference(one, protocol_identity(["BANK-01"], backend="simulated", root=root)) is None


def test_extras_differ():
    files = {"protocol/study.yml": "a" * 64}
    study = ProtocolIdentity(files, {"cli_version": "2.1.332", "worker_env_lock": "1a2b3c4d" + "0" * 56})
    assert (
        first_difference(study, replace(study, extras={**study.extras, "cli_version": "2.1.300"}))
        == "cli_version differs (study 2.1.332, worker 2.1.300)"
    )
    assert (
        first_difference(study, replace(study, extras={**study.extras, "worker_env_lock": "5e6f7a8b" + "0" * 56}))
        == "worker_env_lock differs (study 1a2b3c4d…, worker 5e6f7a8b…)"
    )
    assert (
        first_difference(study, replace(study, extras={"cli_version": "2.1.332"}))
        == "worker_env_lock is missing on the worker"
    )
    # the files are compared before the extras
    worse = ProtocolIdentity({"protocol/study.yml": "b" * 64}, {"cli_version": "2.1.300"})
    assert first_difference(study, worse).startswith("protocol/study.yml differs")


@pytest.mark.usefixtures("real_cli")
def test_cli_backends_carry_the_cli_and_the_worker_environment():
    for name in sorted(backends.CLI_BACKENDS):
        extras = protocol_identity(None, backend=name).extras
        assert set(extras) == {identity.CLI_VERSION, identity.WORKER_ENV_LOCK}
        assert (
            extras[identity.CLI_VERSION] in (identity.ABSENT, identity.NO_ANSWER)
            or extras[identity.CLI_VERSION].count(".") == 2
        )
    assert protocol_identity(None, backend="synthetic").extras == {}
    with pytest.raises(backends.UnknownBackend, match="unknown backend 'nope'"):
        protocol_identity(None, backend="nope")


def test_worker_env_lock_is_the_recorded_versions_canonical(tmp_path, monkeypatch):
    env = tmp_path / "env"
    env.mkdir()
    monkeypatch.setenv("PILOT_WORKER_ENV", str(env))
    assert identity_extras.worker_env_lock() == identity.ABSENT  # neither a version record nor a python3
    (env / "versions.json").write_text(json.dumps({"python": "3.11.7", "pandas": "2.3.3"}, indent=2))
    first = identity_extras.worker_env_lock()
    (env / "versions.json").write_text(json.dumps({"pandas": "2.3.3", "python": "3.11.7"}))
    assert identity_extras.worker_env_lock() == first and len(first) == 64
    (env / "versions.json").write_text(json.dumps({"pandas": "2.3.4", "python": "3.11.7"}))
    assert identity_extras.worker_env_lock() != first
    (env / "versions.json").write_text("[1, 2]")
    with pytest.raises(RuntimeError, match=r"versions.json: the worker environment's version record is not a mapping"):
        identity_extras.worker_env_lock()


def test_to_dict_round_trip_and_digest(root):
    ident = protocol_identity(None, backend="simulated", root=root)
    plain = json.loads(json.dumps(ident.to_dict()))
    back = ProtocolIdentity.from_dict(plain)
    assert back == ident and back.digest == ident.digest and first_difference(ident, back) is None
    with_extras = ProtocolIdentity({"a": "1"}, {"cli_version": "2.1.332"})
    assert ProtocolIdentity.from_dict(with_extras.to_dict()) == with_extras
    before = ident.digest
    _flip_one_byte(root / ORACLE)
    assert protocol_identity(None, backend="simulated", root=root).digest != before
    # the digest separates files from extras and names from values
    assert ProtocolIdentity({"x": "1"}, {}).digest != ProtocolIdentity({}, {"x": "1"}).digest
    assert ProtocolIdentity({"x": "1"}, {}).digest != ProtocolIdentity({"x": "2"}, {}).digest


@pytest.mark.parametrize(
    "data, message",
    [
        ([], "expected a mapping with 'files' and 'extras', got list"),
        ({"files": {}}, "field 'extras': missing"),
        ({"files": [], "extras": {}}, "field 'files': expected a mapping of names to strings, got list"),
        ({"files": {"a": 1}, "extras": {}}, "field 'files': entry 'a': names and values must be strings, got int"),
        ({"files": {}, "extras": {}, "more": 1}, "field 'more': not a field of a protocol identity"),
    ],
)
def test_from_dict_refuses_what_is_not_an_identity(data, message):
    with pytest.raises(ValueError, match=message):
        ProtocolIdentity.from_dict(data)
