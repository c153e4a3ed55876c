"""The scripted model server: a local Messages API that plays a worker and a judge, for a rehearsal.

The real Claude Code CLI talks to it (through the run's metering proxy) as
it would talk to the model. It is a threaded HTTP server on loopback that
answers ``POST /v1/messages`` (streamed or whole), ``POST
/v1/messages/count_tokens`` and the base URL's reachability probe, and
requires its own key in ``x-api-key``. Anything it does not recognise gets a
400 naming what was not understood; it never guesses.

A **worker session** (the first user message is the study's prompt) is
played from the message history alone, one step per request:

1. read ``BRIEF.md`` and ``POLICY.md`` (the brief names the scenario, the
   policy the arm; the tools offered must be the arm's);
2. shell arms: the model's drawn attempt at a denied program, if any, and
   attempts at a denied program the host has (directly, through ``bash -c``
   and by absolute path); on an
   arm with the portal, for a scenario that uses it, a sign-in and two
   downloads with the portal's client (shipped as source); then one Bash call that runs the scenario's reference solver
   inside the sandbox with the worker's own Python (the solver's source and
   the helpers it imports are shipped in the command), then one Bash call
   that turns the solver's files into the drawn outcome; A0: Write calls
   with the text the model's A0 worker delivers (text substitutes);
3. A4: ``python3 selfcheck.py``; on the harness's recovery resume, a repair
   when the model draws one, and the self-check again;
4. a closing text.

What the worker delivers is drawn from the simulated agent's generative
model (``analysis/config/simulated_agent.yml``: the same draws and the same
defect functions of :mod:`pilot.defects`), seeded from the
server's seed, the scenario, the arm and the run id. The drawn outcome is
built first on a harness-side replica of the workspace; the defects are then
carried into the sandbox as file edits, because the defect functions need
the oracle's modules, the scenario's specification loader and LibreOffice,
none of which the worker's sandbox has. The oracle never scores the
replica: the verdict the deliverables should get follows from what each
planted defect declares it breaks (:func:`pilot.defects.expected_verdict`),
and on A4 so do the controller's self-check verdict and its decision on the
resume. Every session's intent (defects and their declarations, expected
verdicts, the digests of the files its tool calls write whole) is appended
to ``<record_dir>/truth.jsonl`` when its plan is made, before any
deliverable is written, and what then happened (tool errors, the denied
attempts' results) when it closes; :func:`read_truth` merges both per run.
The run is named by the metering proxy's ``x-pilot-run-id`` header
(``MeteringProxy(label_upstream=True)``).

The first session also plays the worker branch of the attempt's plan
(:mod:`pilot.simulated.rehearsal_branches`): a reported usage that brings
the run to its cap, a closing answer held past the wall limit, a 529 or a
500 not to be retried, or a stream cut after its first event.

A **judge session** (the prompt of :mod:`pilot.judges.prompt`) is answered
with a schema-valid JSON grade from the simulated judges' model, as the panel
member and attempt the request's label names (the CLI judge's
``x-pilot-judge`` and ``x-pilot-judge-attempt`` headers; a judge request
without them is refused), so that J2 and J3, who share a model, are told apart
whatever the order of the calls. A judge branch of the attempt
(:mod:`pilot.simulated.rehearsal_branches`) answers otherwise: text that is
not JSON, JSON that fails the schema, or a grade held past the judges' time
limit. Every judge answer is a line of ``<record_dir>/judges.jsonl``.

Every answer reports usage (input, cache-write, cache-read and output
tokens, from the size of the request and of the answer), so that its cost
flows through the proxy, the caps and the ledger, and the CLI prices the
same tokens.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import hmac
import json
import re
import secrets
import shutil
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pilot import paths, protocol
from pilot.agents import messages_wire as wire
from pilot.agents.model_proxy import RUN_ID_HEADER, run_id_from_header
from pilot.judges.claude_judge import JUDGE_ATTEMPT_HEADER, JUDGE_HEADER

if TYPE_CHECKING:
    from pilot.simulated.rehearsal_branches import RunBranch

TRUTH_FILE = "truth.jsonl"
#: Every answer the scripted judges gave (judge, attempt, branch played, whether it is a valid grade), one JSON line
#: each.
JUDGES_FILE = "judges.jsonl"
#: The reply of a judge playing judge_malformed_once on its first attempt: prose, no JSON object in it.
JUDGE_NOT_JSON = (
    "Scripted judge: this reply is prose, not the JSON object the prompt asks for "
    "(the rehearsal's judge_malformed_once branch); the grade comes with the retry."
)
#: The requests the server could not play (each answered with a 400), one JSON line each.
REFUSALS_FILE = "refusals.jsonl"
#: Bytes of request per input token, for the usage the server reports (about a token per four characters of English).
BYTES_PER_TOKEN = 4
#: The delimiter of the here-documents the worker's Bash commands carry.
HEREDOC = "PILOT_SCRIPTED_EOF"
#: The pilot modules shipped to the sandbox as stubs holding only the constants the solvers import
#: (the real modules load the protocol, with packages the worker's environment does not have).
STUBBED_MODULES = ("pilot.protocol.scenario",)
_LINE_NUMBER = re.compile(r"^\s*\d+[\t→]", re.M)
#: Where the CLI states the session's folder (a system turn of the conversation in 2.1.332, the system prompt before).
_CWD = re.compile(r"(?:Primary working directory|Working directory):\s*(\S+)")


class ScriptError(ValueError):
    """A request the scripted server does not understand; answered with a 400 naming what."""


# --------------------------------------------------------------------------
# Shipping the reference solver
# --------------------------------------------------------------------------


def _module_file(name: str) -> Path | None:
    root = Path(paths.ROOT) / "src"
    parts = name.split(".")
    f = root.joinpath(*parts).with_suffix(".py")
    if f.is_file():
        return f
    pkg = root.joinpath(*parts) / "__init__.py"
    return pkg if pkg.is_file() else None


def _pilot_imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """(module, names) of every ``pilot`` import in a module, at any depth (function-level imports too)."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] == "pilot"
        ):
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names if a.name.split(".")[0] == "pilot")
    return out


def _stub_source(module: str, names: set[str]) -> str:
    """The top-level constant assignments of ``names`` in ``module``, as a module of their own."""
    f = _module_file(module)
    assert f is not None
    tree = ast.parse(f.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in names and node.value is not None:
                    try:
                        ast.literal_eval(node.value)
                    except ValueError:
                        raise ScriptError(f"cannot ship {module}.{t.id} to the sandbox: not a constant") from None
                    found[t.id] = ast.unparse(node.value)
    missing = sorted(names - set(found))
    if missing:
        raise ScriptError(f"cannot ship {module} to the sandbox: {missing} are not constants of it")
    lines = [f'"""The constants of {module} the reference solvers import (shipped to the sandbox)."""', ""]
    lines += [f"{k} = {v}" for k, v in sorted(found.items())]
    return "\n".join(lines) + "\n"


def shipped_sources(*entries: str) -> dict[str, str]:
    """relative path -> source of the modules ``entries`` and every ``pilot`` module they import.

    Modules in :data:`STUBBED_MODULES` are reduced to the constants imported
    from them; package ``__init__`` files are empty, so nothing else of the
    harness comes along.
    """
    for start in entries:
        if _module_file(start) is None:
            raise ScriptError(f"no module {start} to ship")
    wanted: dict[str, set[str]] = {}
    seen: set[str] = set()
    queue = list(entries)
    sources: dict[str, str] = {}
    while queue:
        mod = queue.pop()
        if mod in seen:
            continue
        seen.add(mod)
        f = _module_file(mod)
        if f is None:
            raise ScriptError(f"cannot ship {mod}: no such module")
        if f.name == "__init__.py":
            continue  # packages are shipped empty; their submodules are followed by name
        text = f.read_text(encoding="utf-8")
        sources[mod] = text
        for target, names in _pilot_imports(ast.parse(text)):
            if target in STUBBED_MODULES:
                wanted.setdefault(target, set()).update(names)
                continue
            queue.append(target)
            for n in names:
                if _module_file(f"{target}.{n}") is not None:
                    queue.append(f"{target}.{n}")
    files: dict[str, str] = {}
    for mod, text in sources.items():
        files["/".join(mod.split(".")) + ".py"] = text
    for mod, names in wanted.items():
        files["/".join(mod.split(".")) + ".py"] = _stub_source(mod, names)
    for rel in list(files):
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            files.setdefault("/".join(parts[:i]) + "/__init__.py", "")
    return dict(sorted(files.items()))


def solver_sources(generator: str) -> dict[str, str]:
    """The scenario module ``generator`` and what it imports, as :func:`shipped_sources` gives them."""
    return shipped_sources(f"pilot.scenarios.library.{generator}")


def _shipped_script(cwd: str, files: dict[str, str], lines: list[str]) -> str:
    """A Bash command running ``lines`` of Python in ``cwd`` with the sandbox's python3, ``files`` importable."""
    body = "\n".join(
        [
            "import shutil, sys, tempfile",
            "from pathlib import Path",
            f"SOURCES = {files!r}",
            "pkg = Path(tempfile.mkdtemp(prefix='shipped-'))",
            "for rel, text in SOURCES.items():",
            "    (pkg / rel).parent.mkdir(parents=True, exist_ok=True)",
            "    (pkg / rel).write_text(text, encoding='utf-8')",
            "sys.path.insert(0, str(pkg))",
            "import pilot",
            "assert Path(pilot.__file__).parent == pkg / 'pilot', pilot.__file__  # the shipped copy, nothing else",
            "try:",
            *[f"    {ln}" for ln in lines],
            "finally:",
            "    shutil.rmtree(pkg, ignore_errors=True)",
        ]
    )
    return f"cd {_shq(cwd)} && python3 - <<'{HEREDOC}'\n{body}\n{HEREDOC}"


def solver_command(cwd: str, generator: str, *, clear_outputs: bool) -> str:
    """The Bash command that runs the reference solver in ``cwd`` with the sandbox's python3."""
    return _shipped_script(
        cwd,
        solver_sources(generator),
        [
            f"from pilot.scenarios.library.{generator} import solve",
            "out = Path('outputs')",
            *(["shutil.rmtree(out, ignore_errors=True)"] if clear_outputs else []),
            "out.mkdir(exist_ok=True)",
            "for p in solve(Path('inputs'), out):",
            "    print('wrote', Path(p).as_posix())",
        ],
    )


def portal_command(cwd: str) -> str:
    """The Bash command that signs in to the run's portal and fetches its first document and record set, as the
    model's worker does (into a scratch folder outside the workspace)."""
    return _shipped_script(
        cwd,
        shipped_sources("pilot.portal.client"),
        [
            "from pilot.portal.client import PortalClient",
            "dest = Path(tempfile.mkdtemp(prefix='portal-'))",
            "client = PortalClient.from_workspace(Path('.'))",
            "client.sign_in()",
            "for doc in client.list_documents()[:1]:",
            "    print('downloaded', client.download(doc['name'], dest).name)",
            "for rec in client.list_records()[:1]:",
            "    print('downloaded', client.download_record(rec['id'], 'csv', dest).name)",
            "client.sign_out()",
        ],
    )


def _shq(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------
# Workspace snapshots and the edits between them
# --------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes]:
    """relative path -> bytes of every file under ``inputs/`` and ``outputs/``."""
    out: dict[str, bytes] = {}
    for top in ("inputs", "outputs"):
        for p in sorted((Path(root) / top).rglob("*")):
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


@dataclass
class Edits:
    """The file edits that turn one snapshot into another."""

    write: dict[str, bytes] = field(default_factory=dict)
    append: dict[str, bytes] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.write or self.append or self.delete)

    def files(self) -> list[str]:
        return sorted([*self.write, *self.append, *self.delete])


def diff(before: dict[str, bytes], after: dict[str, bytes]) -> Edits:
    e = Edits()
    for rel, data in after.items():
        old = before.get(rel)
        if old == data:
            continue
        if old is not None and data.startswith(old):
            e.append[rel] = data[len(old) :]
        else:
            e.write[rel] = data
    e.delete = sorted(set(before) - set(after))
    return e


def edit_command(cwd: str, edits: Edits) -> str:
    """The Bash command that applies ``edits`` in ``cwd`` (text as text, other bytes as base64)."""

    def enc(data: bytes) -> tuple[str, str]:
        try:
            return "text", data.decode("utf-8")
        except UnicodeDecodeError:
            return "b64", base64.b64encode(data).decode("ascii")

    body = "\n".join(
        [
            "import base64",
            "from pathlib import Path",
            "def data(kind, s):",
            "    return s.encode('utf-8') if kind == 'text' else base64.b64decode(s)",
            f"DELETE = {edits.delete!r}",
            f"WRITE = { ({k: enc(v) for k, v in sorted(edits.write.items())})!r}",
            f"APPEND = { ({k: enc(v) for k, v in sorted(edits.append.items())})!r}",
            "for rel in DELETE:",
            "    Path(rel).unlink(missing_ok=True)",
            "    print('deleted', rel)",
            "for rel, (kind, s) in WRITE.items():",
            "    Path(rel).parent.mkdir(parents=True, exist_ok=True)",
            "    Path(rel).write_bytes(data(kind, s))",
            "    print('wrote', rel)",
            "for rel, (kind, s) in APPEND.items():",
            "    with open(rel, 'ab') as fh:",
            "        fh.write(data(kind, s))",
            "    print('appended to', rel)",
        ]
    )
    return f"cd {_shq(cwd)} && python3 - <<'{HEREDOC}'\n{body}\n{HEREDOC}"


# --------------------------------------------------------------------------
# The worker's plan
# --------------------------------------------------------------------------


@dataclass
class Plan:
    """What a worker session does, step by step, and the truth it records."""

    steps: list[list[dict]]  # tool calls per step (name, input); the closing text follows the last
    closing: str
    truth: dict
    mirror: Path | None = None  # the harness-side replica after the session (kept for the resume)
    expect_error: set[int] = field(default_factory=set)  # indices of steps meant to fail
    selfcheck_step: int | None = (
        None  # the step that runs the worker's own self-check (its verdict is foretold, not an error)
    )


def run_key(run_id: str) -> str:
    """The part of a run id that names the run, not where its folder happens to be: the folder's name
    (with its parent's for an ``attempt-N`` folder), so that a rehearsal draws the same wherever it runs."""
    p = Path(run_id)
    return f"{p.parent.name}/{p.name}" if p.name.startswith("attempt-") else p.name


def _seed_rng(seed: int, scenario_id: str, arm_id: str, run_id: str, session: int) -> np.random.Generator:
    key = [
        int(seed) & 0xFFFFFFFF,
        zlib.crc32(scenario_id.encode()),
        zlib.crc32(arm_id.encode()),
        zlib.crc32(run_key(run_id).encode()),
        int(session),
    ]
    return np.random.default_rng(np.random.SeedSequence(key))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _normal(text: str) -> str:
    return " ".join(_LINE_NUMBER.sub("", text).split())


def identify_scenario(brief_text: str) -> Any:
    """The scenario whose brief ``brief_text`` is (as the Read tool showed it)."""
    from pilot.scenarios import list_scenarios, load_scenario

    seen = _normal(brief_text)
    hits = []
    for sid in list_scenarios():
        sc = load_scenario(sid)
        if _normal(sc.brief)[:400] in seen:
            hits.append(sc)
    if len(hits) != 1:
        raise ScriptError(
            f"the brief read from BRIEF.md matches {len(hits)} scenarios of the protocol (expected exactly one)"
        )
    return hits[0]


def identify_arm(policy_text: str, tools: list[str]) -> Any:
    """The arm whose instructions ``policy_text`` is; its tools must be the ones offered."""
    seen = _normal(policy_text)
    hits = [a for a in protocol.arms().values() if _normal(protocol.arm_instructions(a)) == seen]
    if len(hits) != 1:
        raise ScriptError(f"POLICY.md matches {len(hits)} arms' instructions (expected exactly one)")
    arm = hits[0]
    if sorted(arm.tools) != sorted(tools):
        raise ScriptError(
            f"POLICY.md is arm {arm.id}'s, but the tools offered are {sorted(tools)}, not {sorted(arm.tools)}"
        )
    return arm


#: Denied programs a Linux host commonly has, in the order the scripted worker prefers one to try on every shell arm.
#: The drawn attempt is often at a macOS program (qlmanage, osascript) that a Linux host lacks, and its
#: "command not found" shows that nothing ran, not that a stub answered; an attempt at a program the host has can
#: only be stopped by the stub bound over it (or by the CLI's rule).
HOST_DENIED_PREFERENCE: tuple[str, ...] = ("curl", "wget", "soffice")
#: The routes of those attempts: as typed and by the program's resolved path (both refused by the CLI's rule, which
#: reads the program's name), and through ``bash -c``, past the rule, to the stub.
HOST_DENIED_ROUTES: tuple[str, ...] = ("direct", "bash -c", "absolute path")


def host_program(family: str) -> str | None:
    """The resolved path of ``family``'s program on this host, found along the system PATH the sandbox gives the worker
    (the folders whose programs the mask covers), else None."""
    import os

    from pilot.agents.launch import SYSTEM_PATH

    found = shutil.which(family, path=os.pathsep.join(SYSTEM_PATH))
    return os.path.realpath(found) if found else None


def host_denied_attempts(
    denied_commands: dict[str, str], denied_families: tuple[str, ...] | list[str]
) -> list[dict[str, Any]]:
    """The planted attempts at one program the arm denies and this host has, one per route of :data:`HOST_DENIED_ROUTES`
    (none when the arm denies no such program)."""
    import shlex

    denied = set(denied_families)
    for family in HOST_DENIED_PREFERENCE:
        path = host_program(family) if family in denied and family in denied_commands else None
        if path is None:
            continue
        command = denied_commands[family]
        if command.split(maxsplit=1)[0] != family:
            raise ValueError(f"denied_commands[{family!r}] does not start with the program's name: {command!r}")
        # The path as a worker types it, quoted only when it has to be.
        routes = {
            "direct": command,
            "bash -c": f"bash -c {_shq(command)}",
            "absolute path": shlex.quote(path) + command[len(family) :],
        }
        return [
            {"family": family, "how": how, "command": routes[how], "present_on_host": True, "path": path}
            for how in HOST_DENIED_ROUTES
        ]
    return []


class WorkerPlayer:
    """Builds (and caches) the plan of each worker session."""

    def __init__(
        self, seed: int, work_dir: Path, *, denied_attempts: bool = True, worker_branch: str | None = None
    ) -> None:
        from pilot.simulated import agent as simulated

        self.seed = int(seed)
        #: the worker branch the first session plays (it decides how that session ends, so the controller's expected
        #: decision)
        self.worker_branch = worker_branch
        self.denied_attempts = bool(denied_attempts)
        self.work_dir = Path(work_dir)
        self.cfg = simulated.load_model()
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self._build_lock = threading.RLock()

    def plan(self, scenario: Any, arm: Any, run_id: str, session: int, cwd: str) -> Plan:
        key = (scenario.id, arm.id, run_id, session, cwd)
        with self._lock:
            if key in self._plans:
                return self._plans[key]
        # One plan is built at a time (a resume's plan builds its first session's inside): scoring a replica
        # may start LibreOffice, and concurrent runs should not have the server compete with itself for it.
        with self._build_lock:
            if key not in self._plans:
                plan = self._build(scenario, arm, run_id, session, cwd)
                with self._lock:
                    self._plans[key] = plan
            return self._plans[key]

    def _mirror_dir(self) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="replica-", dir=self.work_dir))

    def _build(self, scenario: Any, arm: Any, run_id: str, session: int, cwd: str) -> Plan:
        from pilot import defects
        from pilot.simulated import agent as simulated
        from pilot.workspace import lay_out

        shell = "Bash" in arm.tools
        rng = _seed_rng(self.seed, scenario.id, arm.id, run_id, session)
        draw = simulated.draw_session(self.cfg, arm, scenario, rng)
        truth: dict[str, Any] = {
            "run_id": run_id,
            "session": session,
            "scenario": scenario.id,
            "arm": arm.id,
            "recovery": session > 0,
            "selfcheck_called": bool(arm.feature("self_check")),
        }
        steps: list[list[dict]] = []
        expect_error: set[int] = set()  # steps whose failure is the point (a denied program)
        written_edits = Edits()  # the files a step writes whole (their bytes carried in the command)
        if session == 0:
            root = self._mirror_dir() / "workspace"
            lay_out(scenario, arm, root)
            start = snapshot(root)
            simulated.write_gold(scenario, root)
            gold = snapshot(root)
            simulated.set_questions(root, draw.questions)
            applied: list[str] = []
            notes: list[str] = []
            declared: list[dict] = []
            for name in draw.defects:
                done = simulated.plant_model_defects(scenario, root, [name], rng)
                if done:
                    applied.append(name)
                    notes.extend(p.description for p in done)
                    declared += [
                        {"defect": name, "description": p.description, "breaks": list(p.breaks), "critical": p.critical}
                        for p in done
                    ]
            truth.update(defects_drawn=list(draw.defects), questions=draw.questions, denied_attempt=None)
            if shell and draw.denied is not None and self.denied_attempts:
                # As the model's worker does now and then: a program the arm denies, run directly or through bash -c.
                family, how = draw.denied
                command = self.cfg["denied_commands"][family]
                command = command if how == "direct" else f"bash -c {_shq(command)}"
                expect_error.add(len(steps))
                steps.append([{"name": "Bash", "input": {"command": command, "description": f"Try {family}"}}])
                truth["denied_attempt"] = {"family": family, "how": how, "command": command}
            if truth["denied_attempt"] is not None:
                # Whether the drawn program is on the host says what must answer in the sandbox: its stub, or nothing.
                drawn_path = host_program(truth["denied_attempt"]["family"])
                truth["denied_attempt"].update(present_on_host=drawn_path is not None, path=drawn_path)
            # Every shell arm also tries a program it denies that the host has, by each route, in steps of their own
            # after the drawn one (so the draws and the drawn step stay as they were): only these show the stub at work.
            truth["host_denied_attempts"] = (
                host_denied_attempts(self.cfg["denied_commands"], arm.denied_families) if shell else []
            )
            for attempt in truth["host_denied_attempts"]:
                expect_error.add(len(steps))
                steps.append(
                    [
                        {
                            "name": "Bash",
                            "input": {
                                "command": attempt["command"],
                                "description": f"Try {attempt['family']} ({attempt['how']})",
                            },
                        }
                    ]
                )
            truth["portal_used"] = bool(shell and arm.feature("portal") and getattr(scenario, "uses_portal", False))
            if truth["portal_used"]:
                steps.append(
                    [
                        {
                            "name": "Bash",
                            "input": {"command": portal_command(cwd), "description": "Fetch from the records portal"},
                        }
                    ]
                )
            if shell:
                steps.append(
                    [
                        {
                            "name": "Bash",
                            "input": {
                                "command": solver_command(cwd, scenario.generator, clear_outputs=False),
                                "description": "Run the analysis script that writes the deliverables",
                            },
                        }
                    ]
                )
                edits = diff(gold, snapshot(root))
                if edits:
                    written_edits = edits
                    steps.append(
                        [
                            {
                                "name": "Bash",
                                "input": {
                                    "command": edit_command(cwd, edits),
                                    "description": "Finish the deliverables and the completion record",
                                },
                            }
                        ]
                    )
                truth["delivered_by"] = (
                    "Bash: the scenario's reference solver run in the sandbox, then file edits for the drawn outcome"
                )
            else:
                steps += self._write_steps(root, start, cwd, notes)
                inputs = {k: v for k, v in snapshot(root).items() if k.startswith("inputs/")}
                if inputs == {k: v for k, v in start.items() if k.startswith("inputs/")}:
                    # Any input edit was undone (the A0 worker has no tool for it): the defect did not happen.
                    applied = [a for a in applied if a != "modify_input"]
                    declared = [d for d in declared if d["defect"] != "modify_input"]
                truth["delivered_by"] = "Write (and Read) calls with the text the A0 worker delivers"
        else:
            prev = self.plan(scenario, arm, run_id, session - 1, cwd)
            assert prev.mirror is not None
            root = self._mirror_dir() / "workspace"
            shutil.copytree(prev.mirror, root)
            rec = self.cfg["arms"][arm.id].get("recovery") or {"repair": 0.0}
            repaired = bool(rng.random() < float(rec["repair"]))
            applied = list(prev.truth["defects"]) if not repaired else []
            declared = list(prev.truth["declared"]) if not repaired else []
            notes = []
            truth.update(repaired=repaired, questions=prev.truth["questions"])
            if repaired:
                simulated.write_gold(scenario, root)
                gold = snapshot(root)
                simulated.set_questions(root, prev.truth["questions"])
                steps.append(
                    [
                        {
                            "name": "Bash",
                            "input": {
                                "command": solver_command(cwd, scenario.generator, clear_outputs=True),
                                "description": "Rebuild the deliverables from the inputs",
                            },
                        }
                    ]
                )
                edits = diff(gold, snapshot(root))
                if edits:
                    written_edits = edits
                    steps.append(
                        [
                            {
                                "name": "Bash",
                                "input": {
                                    "command": edit_command(cwd, edits),
                                    "description": "Finish the completion record",
                                },
                            }
                        ]
                    )
        final = sorted(p for p in snapshot(root) if p.startswith("outputs/"))
        if shell and final and (session == 0 or truth.get("repaired")):
            # What the session's tool calls left, as the sandbox sees it (the solver's files are not carried whole);
            # the rehearsal report reads the result from the harness's transcript.
            steps.append(
                [
                    {
                        "name": "Bash",
                        "input": {
                            "command": f"cd {_shq(cwd)} && sha256sum -- " + " ".join(_shq(p) for p in final),
                            "description": "Record the deliverables' digests",
                        },
                    }
                ]
            )
        selfcheck_step = None
        if arm.feature("self_check"):
            selfcheck_step = len(steps)
            steps.append(
                [
                    {
                        "name": "Bash",
                        "input": {
                            "command": f"cd {_shq(cwd)} && python3 selfcheck.py",
                            "description": "Run the self-check",
                        },
                    }
                ]
            )
        # The truth follows from what each planted defect declares it breaks, never from the oracle under test.
        expected_pass, expected_E = defects.expected_verdict(
            scenario, [defects.Planted(d["description"], tuple(d["breaks"]), d["critical"]) for d in declared]
        )
        truth.update(
            defects=applied,
            defect_notes=notes,
            declared=declared,
            expected_pass=expected_pass,
            expected_E=expected_E,
            deliverables=sorted(p for p in snapshot(root) if p.startswith("outputs/")),
        )
        if arm.feature("self_check"):
            truth.update(self._controller_expectations(scenario, arm, session, declared))
        truth["written"] = _written_digests(steps, cwd, written_edits)
        closing = "I have finished the assignment; the deliverables and the completion record are in outputs/."
        return Plan(steps, closing, truth, root, expect_error, selfcheck_step)

    def _controller_expectations(self, scenario: Any, arm: Any, session: int, declared: list[dict]) -> dict[str, Any]:
        """What the A4 controller must find and decide after this session, from the declarations alone.

        The controller's self-check passes exactly when no planted defect declares a broken form criterion (the
        self-check knows the deliverables' form, never the answers: :data:`pilot.oracles.evaluate.FORM_KINDS`). After
        the first session the one resume is due when that self-check fails or the session ends by an error; it is
        withheld when the self-check passes, and when the cost cap or the wall limit left nothing to resume with.
        """
        from pilot.oracles.evaluate import FORM_KINDS

        kinds = {c.id: c.kind for c in scenario.oracle.criteria}
        form_broken = sorted({b for d in declared for b in d["breaks"] if kinds.get(b) in FORM_KINDS})
        passes = not form_broken
        out: dict[str, Any] = {"selfcheck_expected": passes, "selfcheck_breaks": form_broken}
        if session == 0:
            ends = {
                "cap_mid_run": "capped (cost)",
                "wall_limit": "capped (wall)",
                "api_500_mid_run": "agent error",
            }.get(self.worker_branch or "", "completed")
            if ends in ("capped (cost)", "capped (wall)"):
                resume, why = False, f"withheld: the session ends {ends}, nothing is left to resume with"
            elif not passes:
                resume, why = True, f"granted: the self-check fails ({', '.join(form_broken)})"
            elif ends == "agent error":
                resume, why = True, "granted: the session ends by an agent error"
            else:
                resume, why = False, "withheld: the self-check passes and the session completes"
            if int(arm.recovery_resumes) < 1:
                resume, why = False, "withheld: the arm grants no resume"
            out.update(resume_expected=resume, resume_reason=why, first_session_ends=ends)
        return out

    def _write_steps(self, root: Path, start: dict[str, bytes], cwd: str, notes: list[str]) -> list[list[dict]]:
        """A0: files it cannot write as text are not delivered; changed inputs are read before they are written."""
        final = snapshot(root)
        for rel, data in final.items():
            if start.get(rel) == data:
                continue
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                notes.append(f"{rel}: not text, so the A0 worker cannot write it")
                if rel in start:
                    (root / rel).write_bytes(start[rel])  # a file it cannot write stays as it was
                else:
                    (root / rel).unlink()
        for rel in sorted(set(start) - set(final)):
            if rel.startswith("inputs/"):
                (root / rel).write_bytes(start[rel])
                notes.append(f"{rel}: A0 has no tool to delete a file")
        final = snapshot(root)
        changed = sorted(rel for rel, data in final.items() if start.get(rel) != data)
        reads = [{"name": "Read", "input": {"file_path": f"{cwd}/{rel}"}} for rel in changed if rel in start]
        writes = [
            {"name": "Write", "input": {"file_path": f"{cwd}/{rel}", "content": final[rel].decode("utf-8")}}
            for rel in changed
        ]
        return ([reads] if reads else []) + ([writes] if writes else [])


_SHA256SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def parse_sha256sum(text: str) -> dict[str, str]:
    """path -> digest from ``sha256sum``'s output (the lines it could not read are left out)."""
    out = {}
    for line in text.splitlines():
        m = _SHA256SUM_LINE.match(line.strip())
        if m:
            out[m.group(2)] = m.group(1)
    return out


def _written_digests(steps: list[list[dict]], cwd: str, edits: Edits) -> dict[str, str]:
    """SHA-256 of every file a step writes whole: a Write call's content, an edit step's written files (appends and
    files the solver makes are not carried whole, so their bytes are not foretold)."""
    out: dict[str, str] = {}
    prefix = cwd.rstrip("/") + "/"
    for step in steps:
        for call in step:
            if call["name"] == "Write" and str(call["input"].get("file_path", "")).startswith(prefix):
                rel = call["input"]["file_path"][len(prefix) :]
                out[rel] = hashlib.sha256(str(call["input"]["content"]).encode("utf-8")).hexdigest()
    for rel, data in edits.write.items():
        out[rel] = hashlib.sha256(data).hexdigest()
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------
# Reading requests
# --------------------------------------------------------------------------


def _user_texts(messages: list[dict]) -> list[tuple[int, str]]:
    return [
        (i, _text_of(m.get("content")))
        for i, m in enumerate(messages)
        if isinstance(m, dict) and m.get("role") == "user"
    ]


def _system_text(body: dict) -> str:
    s = body.get("system")
    return s if isinstance(s, str) else _text_of(s)


def _tool_names(body: dict) -> list[str]:
    # A tool marked defer_loading is the CLI's placeholder for tools loaded on demand, not one it offers.
    return [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict) and not t.get("defer_loading")]


def _our_ids(messages: list[dict], start: int) -> list[str]:
    out = []
    for m in messages[start:]:
        if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), list):
            out += [str(b.get("id")) for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
    return out


def _step_of(tool_id: str, session: int) -> int | None:
    m = re.fullmatch(rf"toolu_scripted_s{session}_(\d+)_\d+", tool_id)
    return int(m.group(1)) if m else None


@dataclass
class Answer:
    content: list[dict]
    truth: dict | None = None
    #: a worker branch played on this request instead of a normal answer (see :mod:`pilot.simulated.rehearsal_branches`)
    fault: str | None = None
    #: seconds the answer is held before it is sent (the wall-limit branch)
    hold_s: float = 0.0
    #: report the request's whole max_tokens as output (the cap branch)
    inflate: bool = False


class ScriptedModelServer:
    """Local Messages API that plays the worker and the judges of a rehearsal (see the module's description)."""

    def __init__(
        self,
        *,
        seed: int,
        record_dir: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        denied_attempts: bool = True,
        branch: RunBranch | None = None,
    ) -> None:
        from pilot.simulated.rehearsal_branches import RunBranch

        self.seed = int(seed)
        #: the runner and judge branches this attempt plays (empty: the normal path)
        self.branch = branch if branch is not None else RunBranch()
        # False leaves out the model's drawn attempts at denied programs (the other draws are unchanged).
        self.denied_attempts = bool(denied_attempts)
        self.record_dir = Path(record_dir)
        self.api_key = f"pilot-scripted-{secrets.token_urlsafe(24)}"
        self._host, self._port = host, int(port)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._truth_lock = threading.Lock()
        self._recorded: set[tuple[str, int, str | None]] = set()
        self._judge_seen: dict[tuple[str, str], int] = {}
        self.worker: WorkerPlayer | None = None
        self.base_url = ""
        self.requests = 0
        self.refusals: list[dict] = []

    # -- lifetime -------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        if self._server is not None:
            return self
        self.record_dir.mkdir(parents=True, exist_ok=True)
        self.worker = WorkerPlayer(
            self.seed,
            Path(tempfile.mkdtemp(prefix="pilot-scripted-")),
            denied_attempts=self.denied_attempts,
            worker_branch=self.branch.worker,
        )
        server = self

        class Handler(wire.WireHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self) -> None:
                server._route(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD

        self._server = ThreadingHTTPServer((self._host, self._port), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://{self._host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-model-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.worker is not None:
            shutil.rmtree(self.worker.work_dir, ignore_errors=True)
            self.worker = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- requests -------------------------------------------------------------

    def _route(self, h: wire.WireHandler) -> None:
        route = h.path.split("?", 1)[0].rstrip("/")
        raw = h.rfile.read(int(h.headers.get("content-length") or 0)) if h.command in ("POST", "PUT", "PATCH") else b""
        if h.command in ("HEAD", "GET") and route == "":
            h.send_response(200)
            h.send_header("content-length", "0")
            h.end_headers()
            return
        if not hmac.compare_digest((h.headers.get("x-api-key") or "").encode(), self.api_key.encode()):
            return h.send_error_json(
                401, "authentication_error", "invalid x-api-key: the scripted model server requires its own key"
            )
        if h.command != "POST" or route not in ("/v1/messages", "/v1/messages/count_tokens"):
            return h.send_error_json(
                400,
                "invalid_request_error",
                f"{h.command} {route or '/'} is not understood by the scripted model server "
                "(it answers POST /v1/messages and POST /v1/messages/count_tokens)",
            )
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            return h.send_error_json(400, "invalid_request_error", f"request body is not a JSON object ({exc})")
        if route == "/v1/messages/count_tokens":
            return h.send_json({"input_tokens": self._tokens(body)})
        with self._truth_lock:
            self.requests += 1
        run_id = run_id_from_header(h.headers.get(RUN_ID_HEADER))
        judge_label = (h.headers.get(JUDGE_HEADER), h.headers.get(JUDGE_ATTEMPT_HEADER))
        try:
            answer = self.answer(body, run_id, judge_label)
        except ScriptError as exc:
            self._note_refusal(run_id, str(exc), body)
            return h.send_error_json(400, "invalid_request_error", f"scripted model server: {exc}")
        model = str(body.get("model"))
        if answer.truth is not None:
            self._record(answer.truth)
        if answer.fault == "overloaded_at_start":
            return h.send_error_json(
                529,
                "overloaded_error",
                "scripted model server: overloaded (the rehearsal's overloaded_at_start branch)",
            )
        if answer.fault == "api_500_mid_run":
            return h.send_error_json(
                500, "api_error", "scripted model server: internal error (the rehearsal's api_500_mid_run branch)"
            )
        usage = self._usage(body, answer.content)
        if answer.inflate:
            # As a long answer would: the request's whole output allowance, so the metered cost nears the run's cap.
            usage["output_tokens"] = max(usage["output_tokens"], int(body.get("max_tokens") or 0))
        msg = wire.message(answer.content, model=model, msg_id=f"msg_scripted_{secrets.token_hex(8)}", usage=usage)
        if answer.fault == "stream_cut_at_start":
            # Cut after the first event whether or not a stream was asked for: the client's retry meets the same cut.
            return h.send_stream(msg, cut_after_first=True)
        if answer.hold_s:
            time.sleep(answer.hold_s)
            try:
                return h.send_stream(msg) if body.get("stream") else h.send_json(msg)
            except (BrokenPipeError, ConnectionResetError):
                return None  # the client gave up waiting, as the branch means it to
        if body.get("stream"):
            return h.send_stream(msg)
        return h.send_json(msg)

    @staticmethod
    def _tokens(body: dict) -> int:
        return max(1, len(json.dumps({k: body.get(k) for k in ("system", "tools", "messages")})) // BYTES_PER_TOKEN)

    def _usage(self, body: dict, content: list[dict]) -> dict:
        """Usage as a cached conversation has it: the history read from the cache, the newest turn written to it."""
        total = self._tokens(body)
        messages = body.get("messages") or []
        newest = max(1, len(json.dumps(messages[-1:])) // BYTES_PER_TOKEN) if messages else total
        prefix = max(0, total - newest) if len(messages) > 1 else 0
        output = max(1, len(json.dumps(content)) // BYTES_PER_TOKEN) + 12
        return wire.usage_object(
            input_tokens=min(total, 3),
            cache_creation_input_tokens=max(0, total - prefix - 3),
            cache_read_input_tokens=prefix,
            output_tokens=output,
        )

    def answer(
        self, body: dict, run_id: str | None, judge_label: tuple[str | None, str | None] = (None, None)
    ) -> Answer:
        """The next turn for this request (raises :class:`ScriptError` when it is not understood); ``judge_label`` is
        the request's (judge id, attempt) headers, which a judge session must carry."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ScriptError("the request has no messages")
        users = _user_texts(messages)
        first = users[0][1] if users else ""
        from pilot.judges.prompt import INSTRUCTIONS

        if INSTRUCTIONS.split("\n", 1)[0][:60] in first:
            return self._judge(body, first, judge_label)
        if str(protocol.study()["worker"]["user_prompt"]) in first:
            return self._worker(body, messages, users, run_id)
        raise ScriptError(
            "neither a worker session (the study's prompt) nor a judge session (the judges' prompt): "
            f"first user message begins {first[:80]!r}"
        )

    # -- the worker -------------------------------------------------------------

    def _worker(self, body: dict, messages: list[dict], users: list[tuple[int, str]], run_id: str | None) -> Answer:
        from pilot.agents.session import RESUME_PROMPT

        tools = _tool_names(body)
        if "Read" not in tools:
            raise ScriptError(f"a worker session without the Read tool (tools offered: {tools})")
        m = _CWD.search(_system_text(body)) or next(
            (
                hit
                for msg in messages
                if isinstance(msg, dict) and msg.get("role") == "system"
                for hit in [_CWD.search(_text_of(msg.get("content")))]
                if hit
            ),
            None,
        )
        if not m:
            raise ScriptError(
                "neither the system prompt nor a system turn names the working directory ('Primary "
                "working directory: ...')"
            )
        cwd = m.group(1)
        resumes = [i for i, t in users if RESUME_PROMPT in t]
        session = len(resumes)
        start = resumes[-1] if resumes else 0
        ids = _our_ids(messages, start)
        steps_done = [s for s in (_step_of(t, session) for t in ids) if s is not None]
        results = wire.tool_results(messages)
        worker_branch = self.branch.worker if session == 0 else None  # a resume meets a healthy API
        if session == 0 and not steps_done:
            if worker_branch in ("overloaded_at_start", "stream_cut_at_start"):
                return Answer([wire.text_block(".")], fault=worker_branch)
            return Answer(
                [
                    wire.tool_use_block("Read", {"file_path": f"{cwd}/{name}"}, f"toolu_scripted_s0_0_{k}")
                    for k, name in enumerate(("BRIEF.md", "POLICY.md"))
                ]
            )
        # The first session's reading tells the scenario and the arm; every later step recomputes them.
        brief = results.get("toolu_scripted_s0_0_0")
        policy = results.get("toolu_scripted_s0_0_1")
        if brief is None or policy is None:
            raise ScriptError("the results of reading BRIEF.md and POLICY.md are not in the conversation")
        if brief[1] or policy[1]:
            raise ScriptError(f"reading BRIEF.md or POLICY.md failed: {(brief[0] if brief[1] else policy[0])[:200]}")
        scenario = identify_scenario(brief[0])
        arm = identify_arm(policy[0], tools)
        assert self.worker is not None
        # Without the proxy's label the session's folder names the run (truth is then keyed "unlabelled:<folder>").
        plan = self.worker.plan(scenario, arm, run_id or f"unlabelled:{cwd}", session, cwd)
        # The session's intent is on record before any of its deliverables is written (the closing adds what happened).
        self._record(dict(plan.truth, branch=worker_branch, phase="plan", labelled=run_id is not None))
        # Step 0 of the first session is the reading; the plan's steps follow it.
        offset = 1 if session == 0 else 0
        nxt = (max(steps_done) + 1) if steps_done else 0
        k = nxt - offset
        if k < len(plan.steps):
            last = k == len(plan.steps) - 1
            return Answer(
                [
                    wire.tool_use_block(c["name"], c["input"], f"toolu_scripted_s{session}_{nxt}_{j}")
                    for j, c in enumerate(plan.steps[k])
                ],
                inflate=last and worker_branch == "cap_mid_run",
            )
        errors, refused, own_check = {}, {}, None
        for tid, (text, is_error) in results.items():
            step = _step_of(tid, session)
            if tid in ids and step is not None and step - offset in plan.expect_error:
                refused[tid] = text[:500]
            elif tid in ids and step is not None and step - offset == plan.selfcheck_step:
                # The worker's own self-check: failing is its verdict, held to the plan's prediction by the report.
                own_check = {"passed": not is_error, "tail": text[-300:]}
            elif tid in ids and step is not None and is_error:
                errors[tid] = text[:500]
        truth = dict(
            plan.truth,
            tool_errors=errors,
            denied_result=refused or None,
            answered_at=datetime.now(UTC).isoformat(timespec="seconds"),
            labelled=run_id is not None,
            branch=worker_branch,
            phase="closing",
            worker_selfcheck=own_check,
        )
        if worker_branch == "api_500_mid_run":
            return Answer([], truth, fault=worker_branch)
        if worker_branch == "wall_limit":
            # Held past the run's wall limit (and a margin), so that the harness stops the session first.
            return Answer([wire.text_block(plan.closing)], truth, hold_s=float(self.branch.wall_s or 0) + 30.0)
        return Answer([wire.text_block(plan.closing)], truth)

    def _note_refusal(self, run_id: str | None, reason: str, body: dict) -> None:
        """Every request it could not play, with what it was asked, kept for the rehearsal's report."""
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        row = {
            "run_id": run_id,
            "reason": reason,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "model": body.get("model"),
            "tools": _tool_names(body),
            "messages": len(messages),
        }
        with self._truth_lock:
            self.refusals.append(row)
            with open(self.record_dir / REFUSALS_FILE, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    def _record(self, truth: dict) -> None:
        key = (truth["run_id"], truth["session"], truth.get("phase"))
        with self._truth_lock:
            if key in self._recorded:
                return
            self._recorded.add(key)
            with open(self.record_dir / TRUTH_FILE, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(truth, sort_keys=True) + "\n")
                fh.flush()

    # -- the judges -------------------------------------------------------------

    def _judge(self, body: dict, prompt: str, label: tuple[str | None, str | None] = (None, None)) -> Answer:
        """The answer of the panel member and attempt the request's label names, as the attempt's branch for that
        judge has it (none: a schema-valid grade from the SIMULATED judges' model, of the package as the prompt shows
        it).

        The member is told by its label alone, never by the order of the calls: two members share a model (J2 and
        J3), and the retry of one would otherwise be taken for the other. The grade is drawn from the prompt without
        the panel's retry note, the member and the attempt, so the same call always gets the same grade.
        """
        from pilot.judges.backend import JudgeRequest
        from pilot.judges.panel import RETRY_NOTE
        from pilot.judges.prompt_readback import PromptNotUnderstood, read_back
        from pilot.judges.schema import RATIONALE_MAX_CHARS, VerdictError, parse_verdict
        from pilot.simulated.judge import SimulatedJudge

        try:
            scenario, criteria, package = read_back(prompt)
        except PromptNotUnderstood as exc:
            raise ScriptError(f"judge prompt: {exc}") from None
        model = str(body.get("model"))
        members = [j for j in protocol.study().judge_panel if j["model"] == model]
        if not members:
            raise ScriptError(f"a judge session for model {model!r}, which no member of the study's panel uses")
        judge_id, attempt_text = label
        if not judge_id:
            raise ScriptError(
                f"a judge session without the {JUDGE_HEADER} header: the harness labels every judge request "
                "with its panel member, and the scripted judges will not guess it from the order of the calls"
            )
        member = next((m for m in members if str(m["id"]) == judge_id.strip()), None)
        if member is None:
            raise ScriptError(
                f"{JUDGE_HEADER}: {judge_id!r} names no panel member of model {model!r} "
                f"(those are {', '.join(str(m['id']) for m in members)})"
            )
        if (attempt_text or "").strip() not in ("0", "1"):
            raise ScriptError(
                f"{JUDGE_ATTEMPT_HEADER}: {attempt_text!r} is not a judge attempt (0, or 1 for the one retry)"
            )
        jid, attempt = str(member["id"]), int(str(attempt_text).strip())
        base = prompt.split(RETRY_NOTE.split("{reason}", 1)[0], 1)[0]
        key = (hashlib.sha256(base.encode("utf-8")).hexdigest(), jid)
        with self._truth_lock:
            n = self._judge_seen.get(key, 0)
            self._judge_seen[key] = n + 1
        request = JudgeRequest(
            judge_id=jid,
            model=model,
            draw=int(member["draw"]),
            attempt=attempt,
            prompt=base,
            criteria=criteria,
            package=package,
            seed=_digest(base + "\0" + jid) % 2**63,
        )
        judge = SimulatedJudge()
        verdict = judge.verdict(request, judge._rng(request))
        verdict["rationale"] = (
            "Scripted judge (the simulated judges' model): " + verdict["rationale"].removeprefix("SIMULATED judge: ")
        )[:RATIONALE_MAX_CHARS]
        text = json.dumps(verdict)
        try:
            parse_verdict(text, criteria)
        except VerdictError as exc:  # never answer what the panel would refuse, unless a branch means it to
            raise ScriptError(f"the drawn grade fails the judges' schema: {exc}") from None
        branch = self.branch.judges.get(jid)
        kind, sent, hold_s = "grade", verdict, 0.0
        if branch == "judge_malformed_once" and attempt == 0:
            kind, sent, text = "not_json", None, JUDGE_NOT_JSON
        elif branch == "judge_schema_invalid":
            # The drawn grade with its first criterion left out: well-formed JSON the output schema refuses.
            sent = dict(
                verdict, criterion_scores={k: v for k, v in verdict["criterion_scores"].items() if k != criteria[0].id}
            )
            kind, text = "schema_invalid", json.dumps(sent)
        elif branch == "judge_timeout":
            kind, hold_s = "held", judge_hold_s(self.branch.judge_timeout_s)
        try:
            parse_verdict(text, criteria)
            valid = True
        except VerdictError:
            valid = False
        if valid != (kind in ("grade", "held")):
            raise ScriptError(
                f"the scripted answer of {jid} for branch {branch} is {'' if valid else 'not '}a valid grade"
            )
        # On record before any hold: the attempt may be over by the time a held answer would be sent.
        self._note_judge(
            {
                "scenario": scenario.id,
                "judge": jid,
                "model": model,
                "attempt": attempt,
                "call": n,
                "branch": branch,
                "answer": kind,
                "valid": valid,
                "held_s": hold_s or None,
                "accept": sent["accept"] if sent else None,
                "scores": sent["criterion_scores"] if sent else None,
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        )
        return Answer([wire.text_block(text)], hold_s=hold_s)

    def _note_judge(self, row: dict) -> None:
        with self._truth_lock:
            with open(self.record_dir / JUDGES_FILE, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, sort_keys=True) + "\n")


def judge_hold_s(judge_timeout_s: float | None) -> float:
    """How long a judge playing judge_timeout holds its answer: past the judges' time limit by half of it and a second
    more, so the harness gives up first; bounded, so the server's thread ends soon after."""
    if judge_timeout_s is None or judge_timeout_s <= 0:
        raise ScriptError("the judge_timeout branch needs the plan's judge_timeout_s")
    return 1.5 * float(judge_timeout_s) + 1.0


def read_truth(record_dir: Path) -> dict[str, dict]:
    """run_id -> what the scripted worker intended for that run, its sessions merged (the last one decides the
    outcome)."""
    path = Path(record_dir) / TRUTH_FILE
    runs: dict[str, dict[int, dict]] = {}
    if not path.is_file():
        return {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            # A session's plan row, then its closing row (what happened) over it.
            sessions = runs.setdefault(str(row["run_id"]), {})
            merged = {**sessions.get(int(row["session"]), {}), **row}
            merged["closed"] = bool(sessions.get(int(row["session"]), {}).get("closed")) or row.get("phase") in (
                None,
                "closing",
            )
            sessions[int(row["session"])] = merged
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: line {n}: not a truth record ({exc})") from None
    out: dict[str, dict] = {}
    for run_id, sessions in runs.items():
        rows = [sessions[k] for k in sorted(sessions)]
        last = rows[-1]
        out[run_id] = {
            "scenario": last["scenario"],
            "arm": last["arm"],
            "sessions": rows,
            "defects": last["defects"],
            "declared": list(last.get("declared") or []),
            # None: the declarations cannot foretell acceptance (a defect that declares required and optional criteria).
            "expected_pass": None if last["expected_pass"] is None else bool(last["expected_pass"]),
            "deliverables": list(last["deliverables"]),
            "selfcheck_called": any(r.get("selfcheck_called") for r in rows),
            "recovery": any(r.get("recovery") for r in rows),
            "branch": rows[0].get("branch"),
            # the files written whole, as the last session that wrote each left it
            "written": _written_after(rows),
            "labelled": all(r.get("labelled", True) for r in rows),
        }
    return out


def _written_after(rows: list[dict]) -> dict[str, str]:
    """The digests of the files written whole, as the run's sessions left them.

    A repairing session reruns the solver with its outputs cleared, so every deliverable an earlier session wrote whole
    is replaced by the solver's (whose bytes are not foretold); only what the repair itself writes whole is kept.
    """
    out: dict[str, str] = {}
    for r in rows:
        if r.get("repaired"):
            out = {k: v for k, v in out.items() if not k.startswith("outputs/")}
        out.update(r.get("written") or {})
    return out


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def scripted_record_dir(attempt_dir: Path) -> Path:
    """Where a rehearsal attempt's scripted model server keeps its record: beside the attempt's folder,
    which the runner resets and wants empty, as the launch mark is (``attempt-N.scripted``)."""
    attempt_dir = Path(attempt_dir)
    return attempt_dir.with_name(attempt_dir.name + ".scripted")


@contextmanager
def scripted_upstream(attempt_dir: Path, seed: int) -> Iterator[dict[str, str]]:
    """The ``upstream`` role of the rehearsal backend (:mod:`pilot.backends`): a scripted model server of the attempt's
    own, its record beside the attempt's folder, playing the attempt's branches of the plan
    :data:`~pilot.simulated.rehearsal_branches.PLAN_ENV` names (recorded beside its truth); yields the address and
    key the proxy and the judges use, the request that the judges label their calls, and the branches' own limits
    (which :func:`pilot.pipeline.upstream_limits` takes out)."""
    from pilot.judges.claude_judge import LABEL_REQUESTS_KEY
    from pilot.simulated import rehearsal_branches

    record = scripted_record_dir(attempt_dir)
    if record.exists():
        shutil.rmtree(record)  # an earlier try of this attempt folder: its truth is not this one's
    branch = rehearsal_branches.load_plan().for_attempt(Path(attempt_dir))
    rehearsal_branches.write_record(record, branch)
    with ScriptedModelServer(seed=seed, record_dir=record, branch=branch) as server:
        yield {
            "ANTHROPIC_BASE_URL": server.base_url,
            "ANTHROPIC_API_KEY": server.api_key,
            LABEL_REQUESTS_KEY: "1",
            **branch.limits(),
        }
