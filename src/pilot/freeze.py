"""Freeze verification: later waves are pooled with the pilot only if nothing was changed.

When the pilot starts, a manifest records the SHA-256 of every file that
defines what a run is and how it is judged: each scenario folder (brief,
inputs, scenario, oracle and rubric files), the scenarios' generators and
reference solvers (``pilot/scenarios/library``), the oracle code (with the
deck reader, ``pilot/oracle_formats``, when the study has a slide-deck
scenario), and the arm texts (common policy, each arm's documentation,
``arms.yml``).
Before a later wave is pooled with the pilot the manifest is taken again and
compared; any file modified, added or removed is reported by name and blocks
pooling.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pilot import paths

if TYPE_CHECKING:  # pandas loads on first use: the study commands start without it
    import pandas as pd

#: Folders and suffixes no manifest counts (caches); the protocol identity walks the same trees (pilot.identity).
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}
SKIP_SUFFIXES = {".pyc", ".pyo"}

#: Files that left the frozen scope, where they went, and every digest the repository ever gave them. They parse
#: command-line options and no run depends on them (``pilot check`` moved to ``pilot/cli/``): a manifest taken
#: before the move that holds one of these digests is unchanged by their absence, and the report says so. Any
#: other digest (a file edited before it left) still blocks pooling.
LEFT_SCOPE: dict[str, tuple[str, frozenset[str]]] = {
    "pilot/oracles/cli.py": (
        "pilot/cli/check.py",
        frozenset(
            {
                "28baa03554e74835aec21a3177d3d684a6a531220228de329c9cc455c664ae2a",
                "61aaab2e7fec73c3a805227d007b7810e32c888043d0a9c8913a046f3fc6105d",
                "a1d373618feb33520c5b9e555a2b11e9052a3215e70fa7ad3a59bf7ce010723a",
            }
        ),
    ),
}


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


@dataclass(frozen=True)
class FileChange:
    path: str
    category: str
    change: str  # modified | added | removed
    frozen_sha256: str | None
    current_sha256: str | None


@dataclass
class FreezeReport:
    """The comparison of the frozen manifest with the files as they are now."""

    frozen_files: int
    current_files: int
    changes: list[FileChange] = field(default_factory=list)
    left_scope: list[str] = field(default_factory=list)  # frozen files that left the scope unchanged (LEFT_SCOPE)

    @property
    def ok(self) -> bool:
        return not self.changes

    @property
    def unchanged_files(self) -> int:
        """Frozen files still in scope and unchanged (those that left the scope unchanged are said apart)."""
        return self.frozen_files - len(self.left_scope)

    @property
    def summary(self) -> pd.DataFrame:
        import pandas as pd

        cols = ["path", "category", "change", "frozen_sha256", "current_sha256"]
        return pd.DataFrame([c.__dict__ for c in self.changes], columns=cols)

    def lines(self) -> list[str]:
        moved = [
            f"  {rel} left the frozen scope unchanged (now {LEFT_SCOPE[rel][0]}, not oracle code)"
            for rel in self.left_scope
        ]
        if self.ok:
            return [f"freeze verified: {self.unchanged_files} files unchanged", *moved]
        return [f"  {c.change:8s} {c.category:8s} {c.path}" for c in self.changes] + moved

    def sentence(self, digest: str) -> str:
        """The check's result as a sentence of the manuscript (plain text; ``digest``: the frozen manifest's)."""
        if self.ok:
            return (
                f"The freeze check found the {self.unchanged_files} frozen files of the study's manifest "
                f"(SHA-256 digest beginning {digest[:16]}) unchanged: the waves the scale rule adds are pooled "
                "with the pilot."
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
) -> FreezeReport:
    """Compare ``manifest`` with the files now (same ``scenarios`` as when it was taken), file by file."""
    now = take_manifest(root, oracle_code, scenarios)
    changes, left = [], []
    for rel in sorted(set(manifest) | set(now)):
        before, after = manifest.get(rel), now.get(rel)
        if before == after:
            continue
        if after is None and rel in LEFT_SCOPE and before in LEFT_SCOPE[rel][1]:
            left.append(rel)
            continue
        kind = "added" if before is None else "removed" if after is None else "modified"
        changes.append(FileChange(rel, _categorise(rel), kind, before, after))
    return FreezeReport(frozen_files=len(manifest), current_files=len(now), changes=changes, left_scope=left)
