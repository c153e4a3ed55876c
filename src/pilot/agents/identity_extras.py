"""What a worker's runs depend on besides the protocol's files: the pinned CLI as the worker's CLI reports it, and
the worker environment's lock (the ``identity`` role of the CLI backends, :mod:`pilot.backends`; read by
:func:`pilot.identity.protocol_identity`)."""

from __future__ import annotations

import hashlib
import json
import os

from pilot.identity import ABSENT, CLI_VERSION, NO_ANSWER, WORKER_ENV_LOCK, file_signature


def cli_identity() -> dict[str, str]:
    """The extras of a real-CLI backend's identity: the CLI's version and the worker environment's lock."""
    return {CLI_VERSION: worker_cli_version(), WORKER_ENV_LOCK: worker_env_lock()}


# The CLI's answer to --version, per (path, signature): asking spawns a process of a few hundred milliseconds.
_CLI_VERSIONS: dict[tuple[str, tuple[int, int, int, int]], str] = {}


def worker_cli_version() -> str:
    """The version the CLI this machine would run (:func:`pilot.agents.claude_code.find_cli`) reports, cached per
    process.

    ``absent`` when there is no CLI, ``no answer`` when it does not say its version.
    """
    from pilot.agents.claude_code import CliNotFound, cli_version, find_cli

    try:
        cli = find_cli()
    except CliNotFound:
        return ABSENT
    sig = file_signature(cli)
    if sig is None:
        return ABSENT
    key = (str(cli), sig)
    if key not in _CLI_VERSIONS:
        _CLI_VERSIONS[key] = cli_version(cli, dict(os.environ)) or NO_ANSWER
    return _CLI_VERSIONS[key]


# Probed versions of worker environments without a versions.json, per (python3 path, size, mtime_ns): the probe spawns a
# process.
_PROBED_ENVS: dict[tuple[str, int, int], dict] = {}


def worker_env_lock() -> str:
    """The digest of the worker environment's lock, ``absent`` when this machine has no worker environment.

    The worker environment (:func:`pilot.agents.worker_env.default_env`) has
    no lock file; what pins it is the record of the versions it holds
    (``versions.json``, written by ``pilot worker-env build`` after checking
    them against ``worker_requirements.txt``: Python, SQLite and every pinned
    package). The lock digest is the sha256 of that record as canonical JSON
    (sorted keys, no spaces), so two environments holding the same versions
    agree however their files are laid out. An environment built without a
    ``versions.json`` is asked for its versions instead (once per process).
    """
    from pilot.agents import worker_env

    env = worker_env.default_env()
    if env is None:
        return ABSENT
    record = env / worker_env.VERSIONS_FILE
    try:
        versions = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        py = worker_env.python_of(env)
        try:
            st = py.stat()
        except OSError:
            return ABSENT
        key = (str(py), st.st_size, st.st_mtime_ns)
        if key not in _PROBED_ENVS:
            try:
                _PROBED_ENVS[key] = worker_env.probe_versions(env)
            except (OSError, RuntimeError, ValueError) as exc:
                raise RuntimeError(
                    f"{env}: the worker environment has no {worker_env.VERSIONS_FILE} and cannot say its versions "
                    f"({exc})"
                ) from exc
        versions = _PROBED_ENVS[key]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RuntimeError(f"{record}: the worker environment's version record cannot be read ({exc})") from exc
    if not isinstance(versions, dict):
        raise RuntimeError(f"{record}: the worker environment's version record is not a mapping of package to version")
    return hashlib.sha256(json.dumps(versions, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()
