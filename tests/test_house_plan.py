"""The package's plan holds: data flows one way, stand-ins stay out of real code, private names stay home.

Read from the code's own imports (every ``import`` statement, at module level
or inside a function, ``TYPE_CHECKING`` ones included), as docs/architecture.md
describes the layers. Each rule is checked on the package and, so that a rule
that could never fail is not mistaken for one that holds, on a small planted
package that breaks it.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from pilot import backends, paths

SRC = paths.ROOT / "src"

#: Packages whose modules may import the stand-ins: the stand-ins themselves and the command line (``pilot study
#: rehearsal-report``). Real code reaches a stand-in only through the backend registry's ``"module:attr"`` roles.
MAY_IMPORT_STAND_INS = ("pilot.simulated", "pilot.cli")


@cache
def _parsed(path: str, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), path)


def parse(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once per content the suite sees (every rule reads every module)."""
    st = path.stat()
    return _parsed(str(path), st.st_mtime_ns, st.st_size)


def modules(src: Path, package: str = "pilot") -> dict[str, Path]:
    """Every module of ``package`` under ``src``, by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _owner(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports(src: Path, package: str = "pilot") -> list[tuple[str, str, str | None, int]]:
    """``(importer, imported module, name taken or None, line)`` for every import of a module of ``package``."""
    mods = modules(src, package)
    found = []
    for mod, path in mods.items():
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _owner(alias.name, mods)
                    if target and alias.name.split(".")[0] == package:
                        found.append((mod, target, None, node.lineno))
            elif (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and node.module
                and node.module.split(".")[0] == package
            ):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in mods:
                        found.append((mod, full, None, node.lineno))
                    elif (target := _owner(node.module, mods)) is not None:
                        found.append((mod, target, alias.name, node.lineno))
    return found


def private_attribute_uses(src: Path, package: str = "pilot") -> list[tuple[str, str, str, int]]:
    """``(module, imported module, _name, line)`` where a module reads a private attribute of a module it imported."""
    mods = modules(src, package)
    found = []
    for mod, path in mods.items():
        tree = parse(path)
        bound: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in mods:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in mods:
                        bound[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append((mod, bound[node.value.id], node.attr, node.lineno))
    return found


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected sets of more than one node (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def module_edges(src: Path, package: str = "pilot") -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for importer, target, _name, _line in imports(src, package):
        if importer != target:
            edges.setdefault(importer, set()).add(target)
    return edges


def room(mod: str, src: Path) -> str:
    """A module's room: its sub-package (``pilot.stats``) or, at the top, the module itself."""
    parts = mod.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (src / parts[0] / parts[1]).is_dir() else mod


def room_edges(src: Path, package: str = "pilot") -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for importer, target, _name, _line in imports(src, package):
        a, b = room(importer, src), room(target, src)
        if a != b and b != package:
            edges.setdefault(a, set()).add(b)
    return edges


def stand_in_imports(src: Path, package: str = "pilot") -> list[tuple[str, str, int]]:
    allowed = tuple(f"{p.replace('pilot', package, 1)}" for p in MAY_IMPORT_STAND_INS)
    stand_ins = f"{package}.simulated"
    return [
        (imp, tgt, line)
        for imp, tgt, _n, line in imports(src, package)
        if (tgt == stand_ins or tgt.startswith(stand_ins + "."))
        and not any(imp == a or imp.startswith(a + ".") for a in allowed)
    ]


def private_imports(src: Path, package: str = "pilot") -> set[tuple[str, str, str]]:
    mods = modules(src, package)
    taken = {
        (imp, tgt, name)
        for imp, tgt, name, _line in imports(src, package)
        if name and name.startswith("_") and not name.startswith("__") and imp != tgt and f"{tgt}.{name}" not in mods
    }
    return taken | {(imp, tgt, name) for imp, tgt, name, _line in private_attribute_uses(src, package) if imp != tgt}


# -------------------------------------------------------------------------- the package


def test_no_module_imports_another_that_imports_it_back():
    assert circles(module_edges(SRC)) == []


def test_the_rooms_read_top_down():
    found = circles(room_edges(SRC))
    assert found == [], "rooms that import each other: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_real_code_never_imports_a_stand_in():
    assert stand_in_imports(SRC) == []


def test_private_names_stay_in_their_module():
    assert private_imports(SRC) == set()


def test_nothing_but_the_entry_point_imports_the_command_line():
    outside = [
        (imp, tgt)
        for imp, tgt, _n, _l in imports(SRC)
        if tgt.startswith("pilot.cli") and not imp.startswith("pilot.cli") and imp != "pilot.__main__"
    ]
    assert outside == []
    for folder in ("notebooks", "analysis"):
        for path in sorted((paths.ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            assert "pilot.cli" not in text and "from pilot import cli" not in text, path


def test_every_backend_role_resolves_and_an_unknown_backend_is_refused():
    for name in backends.REGISTRY:
        for role in backends.get(name).roles:
            assert callable(backends.role(name, role)), (name, role)
    for name in backends.AGENT_BACKENDS:
        assert backends.judge_backend(name) in backends.JUDGE_BACKENDS
    with pytest.raises(
        backends.UnknownBackend,
        match=r"unknown backend 'nope'; the backends are simulated, claude-code, rehearsal, synthetic",
    ):
        backends.get("nope")
    with pytest.raises(
        backends.UnknownBackend,
        match=r"backend 'synthetic' has no agent role; the backends with one are simulated, claude-code, rehearsal",
    ):
        backends.role("synthetic", "agent")


def test_the_labels_come_from_the_registry():
    # Declared by the design: the real study's numbers are findings; the dry run's and the rehearsal's are not.
    assert {n: backends.label(n) for n in backends.REGISTRY} == {
        "simulated": "SIMULATED",
        "claude-code": "",
        "rehearsal": "REHEARSAL",
        "synthetic": "SIMULATED",
        # People on the participant site are findings; SIMULATED participants are a dry run's stand-ins.
        "human": "",
        "simulated-human": "SIMULATED",
    }
    assert backends.label("a-backend-nobody-registered") == "SIMULATED"
    assert backends.CLI_BACKENDS == {"claude-code", "rehearsal"}
    assert backends.REAL_BACKENDS == {"claude-code", "human"}
    assert backends.PARTICIPANT_BACKENDS == {"human", "simulated-human"}


# -------------------------------------------------------------------------- the rules can fail


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "toy" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_each_rule_finds_what_a_planted_package_breaks(tmp_path):
    src = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from toy import b\n",
            "b.py": "def f():\n    from toy.a import x\n",  # a circle through a function-level import
            "runner.py": "from toy.simulated.agent import Agent\n",  # real code reaching a stand-in
            "simulated/__init__.py": "",
            "simulated/agent.py": "from toy.stats import helpers\nhelpers._secret()\n",  # a private attribute read
            "cli/__init__.py": "",
            # an allowed stand-in; a private import
            "cli/main.py": "from toy.simulated import agent\nfrom toy.b import _hidden\n",
            "stats/__init__.py": "",
            "stats/helpers.py": "from toy import report\n",
            "report/__init__.py": "from toy.stats import helpers\n",  # two rooms importing each other
        },
    )
    assert circles(module_edges(src, "toy")) == [{"toy.a", "toy.b"}, {"toy.report", "toy.stats.helpers"}]
    assert {frozenset(c) for c in circles(room_edges(src, "toy"))} >= {frozenset({"toy.stats", "toy.report"})}
    assert stand_in_imports(src, "toy") == [("toy.runner", "toy.simulated.agent", 1)]
    assert private_imports(src, "toy") == {
        ("toy.cli.main", "toy.b", "_hidden"),
        ("toy.simulated.agent", "toy.stats.helpers", "_secret"),
    }


def test_a_run_function_stored_before_its_module_moved_still_resolves():
    from pilot.executors.base import check_run_function
    from pilot.simulated import fake_runs

    # The reference a study created before the move keeps in its store.
    assert check_run_function("pilot.executors.fake_runs:noop_run") is fake_runs.noop_run
    assert check_run_function("pilot.pipeline:run_cell").__module__ == "pilot.pipeline"
    with pytest.raises(ValueError, match="cannot import its module"):
        check_run_function("pilot.executors.no_such_module:noop_run")
