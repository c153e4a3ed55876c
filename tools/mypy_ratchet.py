#!/usr/bin/env python3
"""The type check of ``make check``: mypy over the package, the analysis path clean, the rest held to a baseline.

    tools/mypy_ratchet.py            run mypy (configured in pyproject.toml) and compare with tools/mypy_baseline.json
    tools/mypy_ratchet.py --update   write today's counts as the baseline (refused when they grew)

The modules pyproject.toml holds to mypy's strict flags (the overrides that set
``disallow_untyped_defs``) must report no error at all. Every other file may
keep the errors the baseline counts for it, per error code, and no more: a new
error fails the check, and so does a baseline that counts errors that are gone
(``--update`` then writes the smaller numbers, so the baseline only shrinks).
Counts, not lines, are compared: an edit above an old error does not move it
out of the baseline. Exit status 0 when the check passes, 1 when it fails.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tools" / "mypy_baseline.json"
PYPROJECT = ROOT / "pyproject.toml"

#: (file, error code) -> number of errors
Counts = Mapping[tuple[str, str], int]


@dataclass(frozen=True)
class Error:
    file: str
    line: int
    code: str
    message: str

    def shown(self) -> str:
        return f"{self.file}:{self.line}: [{self.code}] {self.message}"


def strict_patterns(pyproject: Path = PYPROJECT) -> list[str]:
    """The module patterns of the mypy overrides that hold code to the strict flags."""
    overrides = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["mypy"].get("overrides", [])
    out: list[str] = []
    for o in overrides:
        if o.get("disallow_untyped_defs"):
            mods = o["module"]
            out.extend([mods] if isinstance(mods, str) else mods)
    return out


def module_of(file: str) -> str:
    """``src/pilot/stats/power.py`` -> ``pilot.stats.power``; a package's ``__init__.py`` is the package."""
    parts = list(Path(file).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def is_strict(file: str, patterns: Iterable[str]) -> bool:
    # mypy's own reading of an override: "a.b.*" covers a.b and everything below it.
    mod = module_of(file)
    return any(mod == p.removesuffix(".*") or fnmatch.fnmatchcase(mod, p) for p in patterns)


def parse(report: str) -> list[Error]:
    """mypy's ``--output json`` lines (one object per message; notes are not errors)."""
    out = []
    for line in report.splitlines():
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        if m.get("severity") == "error":
            out.append(Error(m["file"], int(m["line"]), m.get("code") or "misc", m["message"]))
    return out


def counts(errors: Iterable[Error]) -> Counter[tuple[str, str]]:
    return Counter((e.file, e.code) for e in errors)


def compare(errors: list[Error], baseline: Counts, patterns: Iterable[str]) -> list[str]:
    """Why the check fails (empty: it passes)."""
    patterns = list(patterns)
    problems = [f"strict module: {e.shown()}" for e in errors if is_strict(e.file, patterns)]
    now = counts(e for e in errors if not is_strict(e.file, patterns))
    for key in sorted(set(now) | set(baseline)):
        have, allowed = now.get(key, 0), baseline.get(key, 0)
        file, code = key
        if have > allowed:
            new = [e.shown() for e in errors if (e.file, e.code) == key]
            problems.append(
                f"{file}: {have} [{code}] error(s), the baseline allows {allowed}:\n    " + "\n    ".join(new)
            )
        elif have < allowed:
            problems.append(
                f"{file}: {have} [{code}] error(s), the baseline still counts {allowed}: "
                "run `make mypy-baseline` to lower it"
            )
    return problems


def load_baseline(path: Path = BASELINE) -> tuple[str, Counter[tuple[str, str]]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["mypy"], Counter(
        {(file, code): n for file, by_code in data["errors"].items() for code, n in by_code.items()}
    )


def write_baseline(version: str, now: Counts, path: Path = BASELINE) -> None:
    by_file: dict[str, dict[str, int]] = {}
    for (file, code), n in sorted(now.items()):
        by_file.setdefault(file, {})[code] = n
    data = {"mypy": version, "total": sum(now.values()), "errors": by_file}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def run_mypy() -> tuple[str, list[Error]]:
    version = subprocess.run(
        [sys.executable, "-m", "mypy", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--output", "json"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode not in (0, 1):  # 2: mypy itself failed (a bad configuration, a crash)
        sys.exit(f"mypy_ratchet: mypy failed (exit {proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return version, parse(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write today's counts to the baseline")
    args = parser.parse_args(argv)
    version, errors = run_mypy()
    patterns = strict_patterns()
    pinned, baseline = load_baseline()
    if version != pinned:
        print(f"mypy_ratchet: the baseline was counted with mypy {pinned}, this is {version} (`make venv`)")
        return 1
    if args.update:
        strict = [e.shown() for e in errors if is_strict(e.file, patterns)]
        now = counts(e for e in errors if not is_strict(e.file, patterns))
        if strict or sum(now.values()) > sum(baseline.values()):
            print("mypy_ratchet: not updated: the baseline only shrinks, and the strict modules must be clean")
            print("\n".join(compare(errors, baseline, patterns)))
            return 1
        write_baseline(version, now)
        print(f"mypy_ratchet: baseline {sum(baseline.values())} -> {sum(now.values())} errors ({BASELINE.name})")
        return 0
    problems = compare(errors, baseline, patterns)
    if problems:
        print("mypy_ratchet: " + "\n".join(problems))
        return 1
    print(f"mypy_ratchet: strict modules clean; {len(errors)} errors elsewhere, as the baseline counts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
