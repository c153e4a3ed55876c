"""The protocol identity a worker proves before it accepts a run.

A study's attempts may run on dask workers that share no disk with the
study's host, each with its own checkout of the repository. A run there is
one of the study's runs only if the worker holds the same protocol: the same
frozen files (:func:`pilot.freeze.take_manifest`: scenario bundles, arm
texts, oracle code, the scenario library), the same protocol files a run
also reads (``study.yml``, ``prices.yml``, ``completion_record.schema.json``)
and, for the backends that run the real CLI, the same pinned CLI and the
same worker environment. The study's host takes its identity once and sends
it with each run; the worker takes its own and refuses the run when
:func:`first_difference` names anything.

Speed: the worker checks the identity at every dispatch, within 100 ms.
Taking the freeze manifest afresh costs 30 ms on an idle two-core machine
and over 100 ms on a loaded one, nearly all of it parsing the scenarios'
YAML (``benchmarks/bench_identity.py``). So each process keeps the last
manifest it took per (root, scenarios) with the signature of every file it
was taken from: path, size, mtime, ctime and inode. A check that finds the
same signature reuses it; any difference takes the manifest again in full.
The blind spot is an edit that keeps all five, which takes setting the
system clock back or writing below the filesystem; an ordinary edit, copy,
``touch`` or ``git checkout`` changes the ctime at least. The three protocol
files and the CLI's version (asking the CLI spawns a process) are cached
by the same signature; the worker environment's record of its versions is
small and read at every check.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilot import backends, freeze, paths

#: The protocol files a run reads that the freeze manifest leaves out (relative to the repository root).
#: ``amendments.csv``, ``interpretations.md`` and ``human/`` are read by the study's commands and the manuscript, never
#: by a run.
RUN_PROTOCOL_FILES: tuple[str, ...] = tuple(
    p.relative_to(paths.ROOT).as_posix()
    for p in (paths.STUDY_FILE, paths.PROTOCOL_DIR / "prices.yml", paths.COMPLETION_SCHEMA_FILE)
)

CLI_VERSION = "cli_version"
WORKER_ENV_LOCK = "worker_env_lock"
#: The value of an extra whose source the machine does not have (no CLI, no worker environment).
ABSENT = "absent"
#: The value of ``cli_version`` when the CLI is there but does not say its version.
NO_ANSWER = "no answer"

_HEX = set("0123456789abcdef")


@dataclass(frozen=True)
class ProtocolIdentity:
    """What a run depends on: file path -> sha256 (sorted), and the named extras (CLI version, worker environment)."""

    files: dict[str, str] = field(default_factory=dict)
    extras: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """One sha256 over every file and extra, in a stable text form (one ``kind<TAB>name<TAB>value`` line each,
        sorted)."""
        lines = [f"file\t{k}\t{v}" for k, v in sorted(self.files.items())]
        lines += [f"extra\t{k}\t{v}" for k, v in sorted(self.extras.items())]
        return hashlib.sha256(("\n".join(lines) + "\n").encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, dict[str, str]]:
        """Plain dicts of strings: the identity travels inside a dask task."""
        return {"files": dict(sorted(self.files.items())), "extras": dict(sorted(self.extras.items()))}

    @classmethod
    def from_dict(cls, data: Any) -> ProtocolIdentity:
        """The identity :meth:`to_dict` gave; anything else is refused naming the field and the reason."""
        if not isinstance(data, dict):
            raise ValueError(
                f"protocol identity: expected a mapping with 'files' and 'extras', got {type(data).__name__}"
            )
        unknown = sorted(set(data) - {"files", "extras"})
        if unknown:
            raise ValueError(f"protocol identity: field {unknown[0]!r}: not a field of a protocol identity")
        out: dict[str, dict[str, str]] = {}
        for name in ("files", "extras"):
            if name not in data:
                raise ValueError(f"protocol identity: field {name!r}: missing")
            part = data[name]
            if not isinstance(part, dict):
                raise ValueError(
                    f"protocol identity: field {name!r}: expected a mapping of names to strings, got "
                    f"{type(part).__name__}"
                )
            for k, v in part.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise ValueError(
                        f"protocol identity: field {name!r}: entry {k!r}: names and values must be "
                        f"strings, got {type(v).__name__}"
                    )
            out[name] = dict(sorted(part.items()))
        return cls(files=out["files"], extras=out["extras"])


def file_signature(path: Path) -> tuple[int, int, int, int] | None:
    """What changes when a file's bytes change (size, mtime, ctime, inode); None when it is not a readable file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) if stat.S_ISREG(st.st_mode) else None


# path -> (signature, sha256) of the protocol files outside the freeze manifest.
_FILE_DIGESTS: dict[str, tuple[tuple[int, int, int, int], str]] = {}


def _file_digest(path: Path) -> str | None:
    sig = file_signature(path)
    if sig is None:
        return None
    cached = _FILE_DIGESTS.get(str(path))
    if cached is not None and cached[0] == sig:
        return cached[1]
    with path.open("rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    _FILE_DIGESTS[str(path)] = (sig, digest)
    return digest


def _tree_signature(root: Path) -> tuple:
    """The signature of every file :func:`pilot.freeze.take_manifest` may read under ``root``: a superset of the
    manifest's files (the scenarios' ``scenario.yml`` choose which of them count), walked without reading a byte."""
    out = []
    for _, folder, _ in freeze.frozen_sources(root):
        if not folder.is_dir():
            out.append((str(folder), None))
            continue
        for here, dirs, names in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d not in freeze.SKIP_PARTS)
            for name in sorted(names):
                if os.path.splitext(name)[1] not in freeze.SKIP_SUFFIXES:
                    f = os.path.join(here, name)
                    out.append((f, file_signature(Path(f))))
    return tuple(out)


# (root, scenarios) -> (tree signature, manifest): the last manifest this process took of that scope.
_MANIFESTS: dict[tuple[str, tuple[str, ...] | None], tuple[tuple, dict[str, str]]] = {}


def _manifest(root: Path, scenarios: list[str] | None) -> dict[str, str]:
    key = (str(root), tuple(sorted(scenarios)) if scenarios is not None else None)
    sig = _tree_signature(root)
    cached = _MANIFESTS.get(key)
    if cached is not None and cached[0] == sig:
        return dict(cached[1])
    manifest = freeze.take_manifest(root, scenarios=scenarios)
    # A file that changed while the manifest was taken leaves a signature that the next check does not match.
    _MANIFESTS[key] = (sig, manifest)
    return dict(manifest)


def protocol_identity(scenarios: list[str] | None, *, backend: str, root: Path | None = None) -> ProtocolIdentity:
    """The identity of the protocol under ``root`` (the repository's by default) for runs of ``scenarios`` on
    ``backend``.

    ``files``: the freeze manifest of ``scenarios`` (all scenarios when None)
    and :data:`RUN_PROTOCOL_FILES`, keyed like the manifest (``protocol/...``,
    ``pilot/oracles/...``); a missing protocol file is left out, so a
    comparison names it as missing. The oracle code is the imported package's.
    ``extras``: for a backend that runs the real CLI
    (:data:`pilot.backends.CLI_BACKENDS`), the CLI's version as it reports it
    (:func:`worker_cli_version`) and the worker environment's lock
    (:func:`worker_env_lock`); none for the others.
    """
    backends.get(backend)  # an unknown backend is refused by name
    base = Path(root) if root is not None else paths.ROOT
    files = _manifest(base, scenarios)
    for rel in RUN_PROTOCOL_FILES:
        digest = _file_digest(base / rel)
        if digest is not None:
            files[rel] = digest
    extras: dict[str, str] = {}
    if backends.has_role(backend, "identity"):
        # The backend says what more than the files its runs depend on (the real CLI's version, the worker
        # environment's lock): the identity need not know the agent's parts.
        extras = dict(backends.role(backend, "identity")())
    return ProtocolIdentity(files=dict(sorted(files.items())), extras=dict(sorted(extras.items())))


def _shown(value: str) -> str:
    # Digests are cut to their first eight digits; versions and words are shown whole.
    return value[:8] + "…" if len(value) > 16 and set(value) <= _HEX else value


def first_difference(expected: ProtocolIdentity, actual: ProtocolIdentity) -> str | None:
    """None when the identities are equal; else one line naming the first item that differs.

    Files come first, then extras, each in sorted order. ``expected`` is the
    study's, ``actual`` the worker's: ``protocol/scenarios/BANK-01/oracle.yml
    differs (study 1a2b3c4d…, worker 5e6f7a8b…)``, ``... is missing on the
    worker``, ``... is on the worker only``, ``cli_version differs (study
    2.1.332, worker 2.1.300)``.
    """
    for study_side, worker_side in ((expected.files, actual.files), (expected.extras, actual.extras)):
        for name in sorted(set(study_side) | set(worker_side)):
            want, have = study_side.get(name), worker_side.get(name)
            if want == have:
                continue
            if have is None:
                return f"{name} is missing on the worker"
            if want is None:
                return f"{name} is on the worker only"
            return f"{name} differs (study {_shown(want)}, worker {_shown(have)})"
    return None
