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
2. shell arms: the model's drawn attempt at a denied program, if any; on an
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
built first on a harness-side replica of the workspace, where the oracle
scores it; the defects are then carried into the sandbox as file edits,
because the defect functions need the oracle's modules, the scenario's
specification loader and LibreOffice, none of which the worker's sandbox
has. The intended outcome of every session (defects, the oracle verdict the
deliverables should get, the files written) is appended to
``<record_dir>/truth.jsonl``; :func:`read_truth` merges it per run. The run
is named by the metering proxy's ``x-pilot-run-id`` header
(``MeteringProxy(label_upstream=True)``).

A **judge session** (the prompt of :mod:`pilot.judges.prompt`) is answered
with a schema-valid JSON grade from the simulated judges' model.

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
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from pilot import paths, protocol
from pilot.agents import messages_wire as wire
from pilot.agents.model_proxy import RUN_ID_HEADER, run_id_from_header

TRUTH_FILE = "truth.jsonl"
#: The grades the scripted judge gave, one JSON line each.
JUDGES_FILE = "judges.jsonl"
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
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "pilot":
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
    body = "\n".join([
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
    ])
    return f"cd {_shq(cwd)} && python3 - <<'{HEREDOC}'\n{body}\n{HEREDOC}"


def solver_command(cwd: str, generator: str, *, clear_outputs: bool) -> str:
    """The Bash command that runs the reference solver in ``cwd`` with the sandbox's python3."""
    return _shipped_script(cwd, solver_sources(generator), [
        f"from pilot.scenarios.library.{generator} import solve",
        "out = Path('outputs')",
        *(["shutil.rmtree(out, ignore_errors=True)"] if clear_outputs else []),
        "out.mkdir(exist_ok=True)",
        "for p in solve(Path('inputs'), out):",
        "    print('wrote', Path(p).as_posix())",
    ])


def portal_command(cwd: str) -> str:
    """The Bash command that signs in to the run's portal and fetches its first document and record set, as the
    model's worker does (into a scratch folder outside the workspace)."""
    return _shipped_script(cwd, shipped_sources("pilot.portal.client"), [
        "from pilot.portal.client import PortalClient",
        "dest = Path(tempfile.mkdtemp(prefix='portal-'))",
        "client = PortalClient.from_workspace(Path('.'))",
        "client.sign_in()",
        "for doc in client.list_documents()[:1]:",
        "    print('downloaded', client.download(doc['name'], dest).name)",
        "for rec in client.list_records()[:1]:",
        "    print('downloaded', client.download_record(rec['id'], 'csv', dest).name)",
        "client.sign_out()",
    ])


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
            e.append[rel] = data[len(old):]
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

    body = "\n".join([
        "import base64",
        "from pathlib import Path",
        "def data(kind, s):",
        "    return s.encode('utf-8') if kind == 'text' else base64.b64decode(s)",
        f"DELETE = {edits.delete!r}",
        f"WRITE = {({k: enc(v) for k, v in sorted(edits.write.items())})!r}",
        f"APPEND = {({k: enc(v) for k, v in sorted(edits.append.items())})!r}",
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
    ])
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


def run_key(run_id: str) -> str:
    """The part of a run id that names the run, not where its folder happens to be: the folder's name
    (with its parent's for an ``attempt-N`` folder), so that a rehearsal draws the same wherever it runs."""
    p = Path(run_id)
    return f"{p.parent.name}/{p.name}" if p.name.startswith("attempt-") else p.name


def _seed_rng(seed: int, scenario_id: str, arm_id: str, run_id: str, session: int) -> np.random.Generator:
    key = [int(seed) & 0xFFFFFFFF, zlib.crc32(scenario_id.encode()), zlib.crc32(arm_id.encode()),
           zlib.crc32(run_key(run_id).encode()), int(session)]
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
        raise ScriptError(f"the brief read from BRIEF.md matches {len(hits)} scenarios of the protocol (expected exactly one)")
    return hits[0]


def identify_arm(policy_text: str, tools: list[str]) -> Any:
    """The arm whose instructions ``policy_text`` is; its tools must be the ones offered."""
    seen = _normal(policy_text)
    hits = [a for a in protocol.arms().values() if _normal(protocol.arm_instructions(a)) == seen]
    if len(hits) != 1:
        raise ScriptError(f"POLICY.md matches {len(hits)} arms' instructions (expected exactly one)")
    arm = hits[0]
    if sorted(arm.tools) != sorted(tools):
        raise ScriptError(f"POLICY.md is arm {arm.id}'s, but the tools offered are {sorted(tools)}, not {sorted(arm.tools)}")
    return arm


class WorkerPlayer:
    """Builds (and caches) the plan of each worker session."""

    def __init__(self, seed: int, work_dir: Path, *, denied_attempts: bool = True) -> None:
        from pilot.simulated import agent as simulated

        self.seed = int(seed)
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
        truth: dict[str, Any] = {"run_id": run_id, "session": session, "scenario": scenario.id, "arm": arm.id,
                                 "recovery": session > 0, "selfcheck_called": bool(arm.feature("self_check"))}
        steps: list[list[dict]] = []
        expect_error: set[int] = set()  # steps whose failure is the point (a denied program)
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
                    declared += [{"defect": name, "description": p.description, "breaks": list(p.breaks), "critical": p.critical}
                                 for p in done]
            truth.update(defects_drawn=list(draw.defects), questions=draw.questions, denied_attempt=None)
            if shell and draw.denied is not None and self.denied_attempts:
                # As the model's worker does now and then: a program the arm denies, run directly or through bash -c.
                family, how = draw.denied
                command = self.cfg["denied_commands"][family]
                command = command if how == "direct" else f"bash -c {_shq(command)}"
                expect_error.add(len(steps))
                steps.append([{"name": "Bash", "input": {"command": command, "description": f"Try {family}"}}])
                truth["denied_attempt"] = {"family": family, "how": how, "command": command}
            truth["portal_used"] = bool(shell and arm.feature("portal") and getattr(scenario, "uses_portal", False))
            if truth["portal_used"]:
                steps.append([{"name": "Bash", "input": {"command": portal_command(cwd), "description": "Fetch from the records portal"}}])
            if shell:
                steps.append([{"name": "Bash", "input": {"command": solver_command(cwd, scenario.generator, clear_outputs=False),
                                                         "description": "Run the analysis script that writes the deliverables"}}])
                edits = diff(gold, snapshot(root))
                if edits:
                    steps.append([{"name": "Bash", "input": {"command": edit_command(cwd, edits),
                                                             "description": "Finish the deliverables and the completion record"}}])
                truth["delivered_by"] = "Bash: the scenario's reference solver run in the sandbox, then file edits for the drawn outcome"
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
                steps.append([{"name": "Bash", "input": {"command": solver_command(cwd, scenario.generator, clear_outputs=True),
                                                         "description": "Rebuild the deliverables from the inputs"}}])
                edits = diff(gold, snapshot(root))
                if edits:
                    steps.append([{"name": "Bash", "input": {"command": edit_command(cwd, edits), "description": "Finish the completion record"}}])
        if arm.feature("self_check"):
            steps.append([{"name": "Bash", "input": {"command": f"cd {_shq(cwd)} && python3 selfcheck.py",
                                                     "description": "Run the self-check"}}])
        # The truth follows from what each planted defect declares it breaks, never from the oracle under test.
        expected_pass, expected_E = defects.expected_verdict(
            scenario, [defects.Planted(d["description"], tuple(d["breaks"]), d["critical"]) for d in declared])
        truth.update(defects=applied, defect_notes=notes, declared=declared, expected_pass=expected_pass, expected_E=expected_E,
                     deliverables=sorted(p for p in snapshot(root) if p.startswith("outputs/")))
        closing = "I have finished the assignment; the deliverables and the completion record are in outputs/."
        return Plan(steps, closing, truth, root, expect_error)

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
        writes = [{"name": "Write", "input": {"file_path": f"{cwd}/{rel}", "content": final[rel].decode("utf-8")}} for rel in changed]
        return ([reads] if reads else []) + ([writes] if writes else [])


# --------------------------------------------------------------------------
# Reading requests
# --------------------------------------------------------------------------


def _user_texts(messages: list[dict]) -> list[tuple[int, str]]:
    return [(i, _text_of(m.get("content"))) for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"]


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


class ScriptedModelServer:
    """Local Messages API that plays the worker and the judges of a rehearsal (see the module's description)."""

    def __init__(self, *, seed: int, record_dir: Path, host: str = "127.0.0.1", port: int = 0, denied_attempts: bool = True) -> None:
        self.seed = int(seed)
        # False leaves out the model's drawn attempts at denied programs (the other draws are unchanged).
        self.denied_attempts = bool(denied_attempts)
        self.record_dir = Path(record_dir)
        self.api_key = f"pilot-scripted-{secrets.token_urlsafe(24)}"
        self._host, self._port = host, int(port)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._truth_lock = threading.Lock()
        self._recorded: set[tuple[str, int]] = set()
        self._judge_seen: dict[tuple[str, str], int] = {}
        self.worker: WorkerPlayer | None = None
        self.base_url = ""
        self.requests = 0
        self.refusals: list[dict] = []

    # -- lifetime -------------------------------------------------------------

    def start(self) -> "ScriptedModelServer":
        if self._server is not None:
            return self
        self.record_dir.mkdir(parents=True, exist_ok=True)
        self.worker = WorkerPlayer(self.seed, Path(tempfile.mkdtemp(prefix="pilot-scripted-")), denied_attempts=self.denied_attempts)
        server = self

        class Handler(wire.WireHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self) -> None:
                server._route(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD

        self._server = ThreadingHTTPServer((self._host, self._port), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://{self._host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="scripted-model-server", daemon=True)
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

    def __enter__(self) -> "ScriptedModelServer":
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
            return h.send_error_json(401, "authentication_error", "invalid x-api-key: the scripted model server requires its own key")
        if h.command != "POST" or route not in ("/v1/messages", "/v1/messages/count_tokens"):
            return h.send_error_json(400, "invalid_request_error",
                                     f"{h.command} {route or '/'} is not understood by the scripted model server "
                                     "(it answers POST /v1/messages and POST /v1/messages/count_tokens)")
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
        try:
            answer = self.answer(body, run_id)
        except ScriptError as exc:
            self._note_refusal(run_id, str(exc), body)
            return h.send_error_json(400, "invalid_request_error", f"scripted model server: {exc}")
        model = str(body.get("model"))
        msg = wire.message(answer.content, model=model, msg_id=f"msg_scripted_{secrets.token_hex(8)}",
                           usage=self._usage(body, answer.content))
        if answer.truth is not None:
            self._record(answer.truth)
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
        return wire.usage_object(input_tokens=min(total, 3), cache_creation_input_tokens=max(0, total - prefix - 3),
                                 cache_read_input_tokens=prefix, output_tokens=output)

    def answer(self, body: dict, run_id: str | None) -> Answer:
        """The next turn for this request (raises :class:`ScriptError` when it is not understood)."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ScriptError("the request has no messages")
        users = _user_texts(messages)
        first = users[0][1] if users else ""
        from pilot.judges.prompt import INSTRUCTIONS

        if INSTRUCTIONS.split("\n", 1)[0][:60] in first:
            return self._judge(body, first)
        if str(protocol.study()["worker"]["user_prompt"]) in first:
            return self._worker(body, messages, users, run_id)
        raise ScriptError("neither a worker session (the study's prompt) nor a judge session (the judges' prompt): "
                          f"first user message begins {first[:80]!r}")

    # -- the worker -------------------------------------------------------------

    def _worker(self, body: dict, messages: list[dict], users: list[tuple[int, str]], run_id: str | None) -> Answer:
        from pilot.agents.session import RESUME_PROMPT

        tools = _tool_names(body)
        if "Read" not in tools:
            raise ScriptError(f"a worker session without the Read tool (tools offered: {tools})")
        m = _CWD.search(_system_text(body)) or next(
            (hit for msg in messages if isinstance(msg, dict) and msg.get("role") == "system"
             for hit in [_CWD.search(_text_of(msg.get("content")))] if hit), None)
        if not m:
            raise ScriptError("neither the system prompt nor a system turn names the working directory ('Primary working directory: ...')")
        cwd = m.group(1)
        resumes = [i for i, t in users if RESUME_PROMPT in t]
        session = len(resumes)
        start = resumes[-1] if resumes else 0
        ids = _our_ids(messages, start)
        steps_done = [s for s in (_step_of(t, session) for t in ids) if s is not None]
        results = wire.tool_results(messages)
        if session == 0 and not steps_done:
            return Answer([wire.tool_use_block("Read", {"file_path": f"{cwd}/{name}"}, f"toolu_scripted_s0_0_{k}")
                           for k, name in enumerate(("BRIEF.md", "POLICY.md"))])
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
        # Step 0 of the first session is the reading; the plan's steps follow it.
        offset = 1 if session == 0 else 0
        nxt = (max(steps_done) + 1) if steps_done else 0
        k = nxt - offset
        if k < len(plan.steps):
            return Answer([wire.tool_use_block(c["name"], c["input"], f"toolu_scripted_s{session}_{nxt}_{j}")
                           for j, c in enumerate(plan.steps[k])])
        errors, refused = {}, {}
        for tid, (text, is_error) in results.items():
            step = _step_of(tid, session)
            if tid in ids and step is not None and step - offset in plan.expect_error:
                refused[tid] = text[:500]
            elif tid in ids and step is not None and is_error:
                errors[tid] = text[:500]
        truth = dict(plan.truth, tool_errors=errors, denied_result=refused or None, answered_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     labelled=run_id is not None)
        return Answer([wire.text_block(plan.closing)], truth)

    def _note_refusal(self, run_id: str | None, reason: str, body: dict) -> None:
        """Every request it could not play, with what it was asked, kept for the rehearsal's report."""
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        row = {"run_id": run_id, "reason": reason, "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "model": body.get("model"), "tools": _tool_names(body), "messages": len(messages)}
        with self._truth_lock:
            self.refusals.append(row)
            with open(self.record_dir / REFUSALS_FILE, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    def _record(self, truth: dict) -> None:
        key = (truth["run_id"], truth["session"])
        with self._truth_lock:
            if key in self._recorded:
                return
            self._recorded.add(key)
            with open(self.record_dir / TRUTH_FILE, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(truth, sort_keys=True) + "\n")
                fh.flush()

    # -- the judges -------------------------------------------------------------

    def _judge(self, body: dict, prompt: str) -> Answer:
        """A grade from the SIMULATED judges' model, of the package as the prompt shows it.

        The panel member is told by the model asked for; where two members
        share a model (J2 and J3), the first call with a prompt is the first
        of them, the next call with the same prompt the next one.
        """
        from pilot.judges.backend import JudgeRequest
        from pilot.judges.prompt_readback import PromptNotUnderstood, read_back
        from pilot.judges.schema import RATIONALE_MAX_CHARS, VerdictError, parse_verdict
        from pilot.simulated.judge import SimulatedJudge

        try:
            scenario, criteria, package = read_back(prompt)
        except PromptNotUnderstood as exc:
            raise ScriptError(f"judge prompt: {exc}") from None
        model = str(body.get("model"))
        members = [j for j in protocol.study()["judges"]["panel"] if j["model"] == model]
        if not members:
            raise ScriptError(f"a judge session for model {model!r}, which no member of the study's panel uses")
        key = (hashlib.sha256(prompt.encode("utf-8")).hexdigest(), model)
        with self._truth_lock:
            n = self._judge_seen.get(key, 0)
            self._judge_seen[key] = n + 1
        member = members[n % len(members)]
        request = JudgeRequest(judge_id=str(member["id"]), model=model, draw=int(member["draw"]), attempt=n // len(members),
                               prompt=prompt, criteria=criteria, package=package, seed=_digest(prompt + "\0" + str(member["id"])) % 2**63)
        judge = SimulatedJudge()
        verdict = judge.verdict(request, judge._rng(request))
        verdict["rationale"] = ("Scripted judge (the simulated judges' model): " + verdict["rationale"].removeprefix("SIMULATED judge: "))[:RATIONALE_MAX_CHARS]
        text = json.dumps(verdict)
        try:
            parse_verdict(text, criteria)
        except VerdictError as exc:  # never answer what the panel would refuse
            raise ScriptError(f"the drawn grade fails the judges' schema: {exc}") from None
        self._note_judge({"scenario": scenario.id, "judge": member["id"], "model": model, "call": n, "accept": verdict["accept"],
                          "scores": verdict["criterion_scores"], "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        return Answer([wire.text_block(text)])

    def _note_judge(self, row: dict) -> None:
        with self._truth_lock:
            with open(self.record_dir / JUDGES_FILE, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, sort_keys=True) + "\n")


def read_truth(record_dir: Path) -> dict[str, dict]:
    """run_id -> what the scripted worker intended for that run, its sessions merged (the last one decides the outcome)."""
    path = Path(record_dir) / TRUTH_FILE
    runs: dict[str, dict[int, dict]] = {}
    if not path.is_file():
        return {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            runs.setdefault(str(row["run_id"]), {})[int(row["session"])] = row
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
        }
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
    own, its record beside the attempt's folder; yields the address and key the proxy and the judges use."""
    record = scripted_record_dir(attempt_dir)
    if record.exists():
        shutil.rmtree(record)  # an earlier try of this attempt folder: its truth is not this one's
    with ScriptedModelServer(seed=seed, record_dir=record) as server:
        yield {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": server.api_key}
