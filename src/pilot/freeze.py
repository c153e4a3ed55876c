"""Freeze verification: later waves are pooled with the pilot only if what a run is and how it is judged is unchanged.

When the pilot starts, a manifest records the SHA-256 of every file that
defines what a run is and how it is judged: each scenario folder (brief,
inputs, scenario, oracle and rubric files), the scenarios' generators and
reference solvers (``pilot/scenarios/library``), the oracle code (with the
deck reader, ``pilot/oracle_formats``, when the study has a slide-deck
scenario), and the arm texts (common policy, each arm's documentation,
``arms.yml``). Beside it a lock (:class:`FreezeLock`) records the package's
version, the digest of the oracle code, the commit it ran from, and the
oracle's verdicts (D, E and each criterion's result) on every study
scenario's gold, no-op and mutation packages.

Before a later wave is pooled with the pilot the manifest is taken again and
compared. A protocol file (bundle, rubric, arm text) modified, added or
removed blocks pooling and is reported by name. The oracle code is frozen by
what it decides, not by its bytes: code that changed has its verdicts derived
again, and identical verdicts accept it (the lock records the acceptance);
any difference blocks pooling and names the commit to resume the study with.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilot import paths

if TYPE_CHECKING:  # pandas loads on first use: the study commands start without it
    import pandas as pd

#: Folders and suffixes no manifest counts (caches); the protocol identity walks the same trees (pilot.identity).
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}
SKIP_SUFFIXES = {".pyc", ".pyo"}


class FreezeViolation(RuntimeError):
    """The frozen material changed since the pilot started."""

    def __init__(self, report: FreezeReport) -> None:
        self.report = report
        super().__init__(
            "pooling blocked: the frozen protocol changed since the pilot started:\n" + "\n".join(report.lines())
        )


def frozen_sources(root: Path | None = None, oracle_code: Path | None = None) -> list[tuple[str, Path, Path]]:
    """(category, folder, base) of each frozen folder; manifest keys are paths relative to ``base``.

    Protocol folders are keyed from the repository root (``protocol/...``),
    the oracle code from the package's parent (``pilot/oracles/...``).
    """
    root = Path(root) if root is not None else paths.ROOT
    code = Path(oracle_code) if oracle_code is not None else Path(__file__).resolve().parent / "oracles"
    return [
        ("scenario", root / paths.SCENARIOS_DIR.relative_to(paths.ROOT), root),
        ("arm", root / paths.ARMS_DIR.relative_to(paths.ROOT), root),
        ("oracle", code, code.parent.parent),
        ("scenario", code.parent / "scenarios" / "library", code.parent.parent),
    ]


def _category(rel: str, default: str) -> str:
    name = Path(rel).name.lower()
    if default == "scenario":
        if "oracle" in name:
            return "oracle"
        if "rubric" in name:
            return "rubric"
    return default


def _sha256(path: Path) -> str:
    # The standard library streams the file; pilot.oracles is not imported here
    # because loading it would pull the whole evaluator into the scheduler.
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _generators(scenarios_dir: Path) -> dict[str, str]:
    """Scenario id -> the generator module its ``scenario.yml`` names (``generator:``)."""
    import yaml

    out: dict[str, str] = {}
    if not scenarios_dir.is_dir():
        return out
    for spec in scenarios_dir.glob("*/scenario.yml"):
        try:
            gen = (yaml.safe_load(spec.read_text(encoding="utf-8")) or {}).get("generator")
        except (yaml.YAMLError, UnicodeDecodeError, AttributeError):
            gen = None
        if gen:
            out[spec.parent.name] = str(gen)
    return out


def _deck_scenarios(scenarios_dir: Path) -> set[str]:
    """Scenario ids whose ``scenario.yml`` lists a slide-deck (``pptx``) deliverable."""
    import yaml

    out: set[str] = set()
    if not scenarios_dir.is_dir():
        return out
    for spec in scenarios_dir.glob("*/scenario.yml"):
        try:
            deliverables = (yaml.safe_load(spec.read_text(encoding="utf-8")) or {}).get("deliverables") or []
        except (yaml.YAMLError, UnicodeDecodeError, AttributeError):
            continue
        if any(isinstance(d, dict) and d.get("kind") == "pptx" for d in deliverables):
            out.add(spec.parent.name)
    return out


def _excluded(
    f: Path, folder: Path, category_folder: str, scenarios: set[str] | None, foreign_generators: set[str]
) -> bool:
    """Files belonging to scenarios outside the study (their bundle or their generator)."""
    if scenarios is None:
        return False
    if category_folder == "bundles":
        return f.relative_to(folder).parts[0] not in scenarios
    if category_folder == "library":
        return f.stem in foreign_generators
    return False


def take_manifest(
    root: Path | None = None, oracle_code: Path | None = None, scenarios: list[str] | None = None
) -> dict[str, str]:
    """``{path: sha256}`` of every frozen file, sorted by path.

    With ``scenarios`` (a study's scenario ids), the bundles and generators
    of other scenarios are left out: adding a scenario the study does not
    use changes none of its runs. Shared library files always count. The deck reader
    (``pilot/oracle_formats``) judges only scenarios with a slide deck: it
    counts as oracle code when the study has one, and is absent otherwise,
    so the manifest of a study without decks is what it was before decks.
    """
    wanted = set(scenarios) if scenarios is not None else None
    sources = frozen_sources(root, oracle_code)
    gens = _generators(sources[0][1])
    foreign = {g for sid, g in gens.items() if wanted is not None and sid not in wanted} - {
        g for sid, g in gens.items() if wanted is not None and sid in wanted
    }
    kinds = ["bundles", "arms", "oracle", "library"]
    out: dict[str, str] = {}
    for kind, (_, folder, base) in zip(kinds, sources, strict=True):
        if not folder.is_dir():
            continue
        for f in sorted(folder.rglob("*")):
            if not f.is_file() or f.suffix in SKIP_SUFFIXES or SKIP_PARTS & set(f.parts):
                continue
            if _excluded(f, folder, kind, wanted, foreign):
                continue
            out[f.relative_to(base).as_posix()] = _sha256(f)
    decks = _deck_scenarios(sources[0][1])
    if decks and (wanted is None or decks & wanted):
        code = sources[2][1]
        formats = code.parent / "oracle_formats"
        for f in sorted(formats.rglob("*")) if formats.is_dir() else []:
            if f.is_file() and f.suffix not in SKIP_SUFFIXES and not SKIP_PARTS & set(f.parts):
                out[f.relative_to(code.parent.parent).as_posix()] = _sha256(f)
    return dict(sorted(out.items()))


def manifest_digest(manifest: dict[str, str]) -> str:
    """One sha256 over a manifest (``path<TAB>digest`` lines in path order): the frozen protocol's identifier."""
    h = hashlib.sha256()
    for rel, digest in sorted(manifest.items()):
        h.update(f"{rel}\t{digest}\n".encode())
    return h.hexdigest()


#: Manifest keys of code (keyed from the package's parent); every other key is a protocol file (from the root).
CODE_PREFIX = "pilot/"

#: A package's verdicts: scenario id -> package name -> {"D": 0|1, "E": 0|1, "criteria": {criterion id: passed}}.
Verdicts = dict[str, dict[str, dict[str, Any]]]


def code_digest(manifest: dict[str, str]) -> str:
    """The digest of the code files of a manifest alone (oracle code, deck reader, scenario library)."""
    return manifest_digest({k: v for k, v in manifest.items() if k.startswith(CODE_PREFIX)})


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_commit() -> str | None:
    """The commit the running package was checked out at (``+`` when its files differ from it); None outside git."""
    head = _git("rev-parse", "HEAD")
    if not head:
        return None
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return head + ("+" if dirty else "")


def commit_before(when: str) -> str | None:
    """The last commit made before ``when`` (an ISO time): the code a study frozen without a lock was made with."""
    return _git("log", "-1", f"--before={when}", "--format=%H") or None


@dataclass
class FreezeLock:
    """What a study froze besides the manifest: the code that judged it and the verdicts that code gave."""

    pilot_version: str
    code_digest: str
    commit: str | None
    verdicts: Verdicts | None
    #: Later code accepted because its verdicts were identical: {code_digest, pilot_version, commit, packages, at}.
    accepted: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def take(cls, manifest: dict[str, str], verdicts: Verdicts | None) -> FreezeLock:
        """The lock of ``manifest`` taken by the running code."""
        from pilot import __version__

        return cls(__version__, code_digest(manifest), code_commit(), verdicts)

    @classmethod
    def from_json(cls, data: object) -> FreezeLock:
        """The lock as stored; ValueError naming the field that is missing or of the wrong type."""
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, found {type(data).__name__}")
        for key, kinds in (
            ("pilot_version", str),
            ("code_digest", str),
            ("commit", (str, type(None))),
            ("verdicts", (dict, type(None))),
            ("accepted", list),
        ):
            if not isinstance(data.get(key), kinds):
                raise ValueError(f"field {key!r}: missing or of the wrong type ({type(data.get(key)).__name__})")
        if not all(isinstance(a, dict) for a in data["accepted"]):
            raise ValueError("field 'accepted': an entry is not an object")
        return cls(data["pilot_version"], data["code_digest"], data["commit"], data["verdicts"], data["accepted"])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def accepts(self, digest: str) -> dict[str, Any] | None:
        """The acceptance recorded for code of ``digest``, if any."""
        return next((a for a in self.accepted if a.get("code_digest") == digest), None)

    def resume_with(self) -> str:
        """The commit (and version) to resume the study with: the code that froze it."""
        at = f"commit {self.commit}" if self.commit else "the commit it was created at (none was recorded)"
        return f"{at} (pilot {self.pilot_version})"


def verdict_differences(frozen: Verdicts, now: Verdicts) -> list[str]:
    """Every package or criterion whose verdict differs, as ``scenario package: what`` (empty when identical)."""
    out: list[str] = []
    for sid in sorted(set(frozen) | set(now)):
        a, b = frozen.get(sid, {}), now.get(sid, {})
        for pkg in sorted(set(a) | set(b)):
            if pkg not in b:
                out.append(f"{sid} {pkg}: no longer made")
                continue
            if pkg not in a:
                out.append(f"{sid} {pkg}: made now, not when frozen")
                continue
            for key in ("D", "E"):
                if a[pkg].get(key) != b[pkg].get(key):
                    out.append(f"{sid} {pkg}: {key} {a[pkg].get(key)} -> {b[pkg].get(key)}")
            ca, cb = a[pkg].get("criteria", {}), b[pkg].get("criteria", {})
            for cid in sorted(set(ca) | set(cb)):
                if ca.get(cid) != cb.get(cid):
                    out.append(f"{sid} {pkg}: {cid} {_shown(ca.get(cid))} -> {_shown(cb.get(cid))}")
    return out


def _shown(passed: object) -> str:
    return "absent" if passed is None else "passes" if passed else "fails"


def count_packages(verdicts: Verdicts) -> int:
    return sum(len(pkgs) for pkgs in verdicts.values())


@dataclass(frozen=True)
class FileChange:
    path: str
    category: str
    change: str  # modified | added | removed
    frozen_sha256: str | None
    current_sha256: str | None


@dataclass
class FreezeReport:
    """The comparison of the frozen manifest with the files as they are now, and of the verdicts when code changed."""

    frozen_files: int
    current_files: int
    changes: list[FileChange] = field(default_factory=list)  # what blocks pooling
    #: Oracle-code files that changed but whose verdicts were derived again and found identical (not blocking).
    accepted_code: list[FileChange] = field(default_factory=list)
    #: How the code change was accepted: "re-derived" now (to be recorded), "recorded" earlier, or "" (no change).
    accepted_by: str = ""
    packages_compared: int = 0
    code_digest: str = ""  # the current code's digest
    differences: list[str] = field(default_factory=list)  # verdicts that differ from the frozen ones
    resume_with: str = ""  # set when changed code blocks: the commit to resume the study with

    @property
    def ok(self) -> bool:
        return not self.changes

    @property
    def unchanged_files(self) -> int:
        """Frozen files unchanged (code accepted by its verdicts is said apart)."""
        return self.frozen_files - sum(1 for c in self.accepted_code if c.frozen_sha256 is not None)

    @property
    def summary(self) -> pd.DataFrame:
        import pandas as pd

        cols = ["path", "category", "change", "frozen_sha256", "current_sha256"]
        return pd.DataFrame([c.__dict__ for c in self.changes], columns=cols)

    def _accepted_line(self) -> list[str]:
        if not self.accepted_code:
            return []
        how = (
            f"the verdicts of {self.packages_compared} gold, no-op and mutation packages derived again are "
            "identical: accepted and recorded"
            if self.accepted_by == "re-derived"
            else "accepted earlier, its verdicts identical (recorded in the study's lock)"
        )
        return [
            f"  the oracle code changed in {len(self.accepted_code)} files (code digest now {self.code_digest[:16]}); "
            + how,
            *(f"    {c.change:8s} {c.path}" for c in self.accepted_code),
        ]

    def lines(self) -> list[str]:
        if self.ok:
            return [f"freeze verified: {self.unchanged_files} files unchanged", *self._accepted_line()]
        out = [f"  {c.change:8s} {c.category:8s} {c.path}" for c in self.changes]
        if self.differences:
            shown = self.differences[:10]
            more = f" and {len(self.differences) - 10} more" if len(self.differences) > 10 else ""
            out.append(
                f"  the changed oracle code gives other verdicts on {len(self.differences)} points: "
                + "; ".join(shown)
                + more
            )
        if self.resume_with:
            out.append(f"  resume this study with {self.resume_with}, the code that froze it")
        return out

    def sentence(self, digest: str) -> str:
        """The check's result as a sentence of the manuscript (plain text; ``digest``: the frozen manifest's)."""
        if self.ok:
            code = (
                f" The oracle code changed in {len(self.accepted_code)} files since; its verdicts on the "
                f"{self.packages_compared} gold, no-op and mutation packages of the study's scenarios are "
                "identical to the frozen ones."
                if self.accepted_code and self.packages_compared
                else ""
            )
            return (
                f"The freeze check found the {self.unchanged_files} frozen files of the study's manifest "
                f"(SHA-256 digest beginning {digest[:16]}) unchanged: the waves the scale rule adds are pooled "
                "with the pilot." + code
            )
        kinds = sorted({c.change for c in self.changes})
        return (
            f"The freeze check found {len(self.changes)} of the study's frozen files {' or '.join(kinds)} "
            f"since the pilot started (SHA-256 digest beginning {digest[:16]}): the waves the scale rule adds "
            "are not pooled with the pilot."
        )

    def raise_if_changed(self) -> None:
        if not self.ok:
            raise FreezeViolation(self)


def _categorise(rel: str) -> str:
    if rel.startswith(("pilot/oracles/", "pilot/oracle_formats/")):
        return "oracle"
    if rel.startswith("pilot/scenarios/"):
        return "scenario"
    if rel.startswith(paths.ARMS_DIR.relative_to(paths.ROOT).as_posix() + "/"):
        return "arm"
    return _category(rel, "scenario")


def verify(
    manifest: dict[str, str],
    root: Path | None = None,
    oracle_code: Path | None = None,
    scenarios: list[str] | None = None,
    *,
    lock: FreezeLock | None = None,
    rederive: Callable[[list[str]], Verdicts] | None = None,
    taken_at: str | None = None,
) -> FreezeReport:
    """Compare ``manifest`` with the files now (same ``scenarios`` as when it was taken), file by file.

    A protocol file that changed blocks. Code that changed (``pilot/...``) is accepted when ``lock`` recorded this
    code as accepted, or when ``rederive`` (the verdicts of the given scenarios with the running code) gives the
    lock's verdicts exactly; otherwise it blocks and the report names the commit to resume with (for a study frozen
    without a lock, the last commit before ``taken_at``).
    """
    now = take_manifest(root, oracle_code, scenarios)
    changes: list[FileChange] = []
    for rel in sorted(set(manifest) | set(now)):
        before, after = manifest.get(rel), now.get(rel)
        if before == after:
            continue
        kind = "added" if before is None else "removed" if after is None else "modified"
        changes.append(FileChange(rel, _categorise(rel), kind, before, after))
    report = FreezeReport(frozen_files=len(manifest), current_files=len(now), code_digest=code_digest(now))
    code = [c for c in changes if c.path.startswith(CODE_PREFIX)]
    protocol_changes = [c for c in changes if not c.path.startswith(CODE_PREFIX)]
    report.changes = changes
    if not code:
        return report
    if lock is not None and lock.accepts(report.code_digest) and not protocol_changes:
        accepted = lock.accepts(report.code_digest) or {}
        report.changes, report.accepted_code, report.accepted_by = [], code, "recorded"
        report.packages_compared = int(accepted.get("packages", 0))
        return report
    if lock is not None and lock.verdicts is not None and rederive is not None and not protocol_changes:
        ids = sorted(lock.verdicts)
        current = rederive(ids)
        report.differences = verdict_differences(lock.verdicts, current)
        if not report.differences:
            report.changes, report.accepted_code, report.accepted_by = [], code, "re-derived"
            report.packages_compared = count_packages(current)
            return report
    if lock is not None:
        report.resume_with = lock.resume_with() + ("" if lock.verdicts is not None else " (it recorded no verdicts)")
    else:
        before = commit_before(taken_at) if taken_at else None
        report.resume_with = (
            f"commit {before}, the last before its manifest was taken ({taken_at}; the study was frozen by an "
            "earlier version that recorded no verdicts)"
            if before
            else "the commit it was created at (it was frozen by an earlier version that recorded no verdicts)"
        )
    return report


def accept(lock: FreezeLock, report: FreezeReport) -> bool:
    """Record in ``lock`` the code ``report`` accepted by verdicts derived again; False when there is nothing new."""
    if report.accepted_by != "re-derived" or lock.accepts(report.code_digest):
        return False
    from datetime import UTC, datetime

    from pilot import __version__

    lock.accepted.append(
        {
            "code_digest": report.code_digest,
            "pilot_version": __version__,
            "commit": code_commit(),
            "packages": report.packages_compared,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    return True
