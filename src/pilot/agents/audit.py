"""Read the CLI's stream-json event stream: counts, cost, and protocol deviations.

:func:`parse_stream` turns the lines of one session (or of a run's whole
transcript) into a :class:`StreamSummary`. :func:`audit` looks at every
tool call in it and records each attempt at an arm's denied program family
as a :class:`Deviation`, whether the CLI's rule stopped it, the mask in the
mount namespace stopped it, or it ran, and what answered at the program's
name (``program``: the sandbox's refusing stub, or nothing, for a program the
host lacks; :func:`program_seen`). The shell reader follows the ways
around the CLI's rules the reference lists: ``sh -c``/``bash -c``, ``eval``,
command substitution, ``find -exec``, ``xargs`` and other wrappers, full
paths, heredocs, and Python (or Perl, Ruby, Node) code that names the
program in a string literal (``subprocess.run(['curl', ...])``). Scripts
written with the Write or Edit tool are read the same way, so running a
script that calls a denied program is caught when the script is written.

Network use is recorded too: for arms without the network, every command or
script that opens a socket (``/dev/tcp``, ``socket``, ``urllib``,
``requests``, ``nc``, ``ssh``, ...) is a ``network_use`` deviation; for every
arm, a tool result that shows a refused connection and every destination
the refusing HTTP proxy turned away (:mod:`pilot.agents.network`) is a
``network_refused`` deviation.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tokenize
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath

from pilot.agents.sandbox import STUB_MARKER

SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "busybox"}
#: Programs that run their argument as a command; their options are skipped.
WRAPPERS = {
    "env",
    "command",
    "exec",
    "nohup",
    "timeout",
    "sudo",
    "doas",
    "nice",
    "ionice",
    "time",
    "stdbuf",
    "builtin",
    "xargs",
    "setsid",
    "parallel",
    "watch",
    "strace",
    "ltrace",
    "unbuffer",
    "chronic",
    "flock",
    "chroot",
    "caffeinate",
    "arch",
}
#: Options of wrappers that take a value (the value is skipped too).
_WRAPPER_VALUE_OPTS = {"-I", "-n", "-P", "-L", "-d", "-a", "-E", "-s", "-u", "-g", "-k", "-C", "-o", "-e", "-i"}
_INTERPRETER = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|perl|ruby|node|nodejs|osascript|Rscript)$")
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", "|&", "{", "}", "!"}
_REDIRECT = re.compile(r"^[0-9]*(>>?|<<?<?|>&|<&|&>>?)$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1[^\n]*\n(.*?)\n[ \t]*\2[ \t]*(?=\n|$)", re.S)
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: The dynamic loader run as a program (``/lib64/ld-linux-x86-64.so.2 /usr/bin/curl``) runs its argument.
_LOADER = re.compile(r"^ld(-linux[^/]*)?\.so(\.[0-9]+)?$|^ld-musl")
_LOADER_VALUE_OPTS = {"--library-path", "--preload", "--audit", "--argv0", "--inhibit-rpath"}

#: Programs whose only purpose is the network.
NETWORK_PROGRAMS = (
    "curl",
    "wget",
    "nc",
    "ncat",
    "netcat",
    "telnet",
    "ssh",
    "scp",
    "sftp",
    "ftp",
    "rsync",
    "socat",
    "nslookup",
    "dig",
    "ping",
    "lynx",
    "w3m",
    "aria2c",
    "httpie",
    "http",
)
#: Network use in program code (Python, Perl, Ruby, Node) or in a shell command's text.
_NETWORK_CODE = re.compile(
    r"/dev/(tcp|udp)/|\bimport\s+(socket|urllib[.\w]*|http\.client|requests|httpx|aiohttp|ftplib|smtplib|telnetlib|paramiko|websocket\w*)\b"
    r"|\bfrom\s+(socket|urllib[.\w]*|http(\.client)?|requests|httpx|aiohttp)\s+import\b|\bsocket\.(socket|create_connection)\b"
    r"|\burlopen\(|\brequests\.(get|post|put|head|delete|Session)\b|\bHTTPConnection\b|\bIO::Socket|\bLWP::|\bNet::HTTP|\bTCPSocket\b"
    r"|\brequire\(['\"](net|http|https)['\"]\)|\bfetch\(['\"]https?:"
)
#: What a refused or impossible connection prints (libc, curl, Python, Node, the refusing proxy).
_REFUSED = re.compile(
    r"Network is unreachable|Connection refused|Could not resolve host|Temporary failure in name resolution"
    r"|Name or service not known|No route to host|ENETUNREACH|ECONNREFUSED|EAI_AGAIN|getaddrinfo failed"
    r"|network access refused: this arm has no network|Failed to connect to|Cannot assign requested address"
)


# --------------------------------------------------------------------------
# The event stream
# --------------------------------------------------------------------------


@dataclass
class ToolCall:
    id: str
    name: str
    input: dict
    session: int = 0


@dataclass
class StreamSummary:
    """What one event stream says about a session (or several, concatenated)."""

    session_ids: list[str] = field(default_factory=list)
    cli_versions: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    tools_available: list[list[str]] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    assistant_message_ids: list[str] = field(default_factory=list)
    model_output: bool = False
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: dict[str, tuple[bool, str]] = field(default_factory=dict)
    #: Results whose content holds non-text blocks, flattened as the proxy's exchange record flattens them
    #: (:func:`flatten_content`); ``tool_results`` keeps the audit's own reading, where such a block is empty.
    tool_result_flat: dict[str, str] = field(default_factory=dict)
    permission_denied: list[dict] = field(default_factory=list)
    events: int = 0
    unparsed_lines: int = 0

    @property
    def result(self) -> dict | None:
        return self.results[-1] if self.results else None

    @property
    def turns(self) -> int:
        """Model responses: distinct assistant message ids (one response may span several lines)."""
        return len(dict.fromkeys(self.assistant_message_ids))

    @property
    def tool_calls_by_tool(self) -> dict[str, int]:
        return dict(sorted(Counter(c.name for c in self.tool_calls).items()))

    @property
    def denied_ids(self) -> set[str]:
        ids = {str(d.get("tool_use_id", "")) for d in self.permission_denied if isinstance(d, dict)}
        for r in self.results:
            denials = r.get("permission_denials")
            ids |= (
                {str(d.get("tool_use_id", "")) for d in denials if isinstance(d, dict)}
                if isinstance(denials, list)
                else set()
            )
        return ids - {""}


def _is_model_output(msg: dict, event: dict) -> bool:
    # The CLI reports a failed API call as a synthetic assistant message; that is no inference.
    if msg.get("model") == "<synthetic>" or event.get("isApiErrorMessage") or event.get("error"):
        return False
    return True


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def parse_stream(lines: Iterable[str], summary: StreamSummary | None = None, session: int = 0) -> StreamSummary:
    """Parse stream-json lines (non-JSON lines are counted and skipped).

    The worker can write into the CLI's stdout, so a line may be any JSON at
    all: fields of the wrong shape are read as empty rather than trusted.
    """
    s = summary if summary is not None else StreamSummary()
    for raw in lines:
        raw = raw.strip()
        if not raw:
            continue
        try:
            ev = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            # RecursionError: nesting deeper than the decoder goes, which no CLI event has.
            s.unparsed_lines += 1
            continue
        if not isinstance(ev, dict):
            s.unparsed_lines += 1
            continue
        s.events += 1
        kind, sub = ev.get("type"), ev.get("subtype")
        if kind == "system" and sub == "init":
            if ev.get("session_id"):
                s.session_ids.append(ev["session_id"])
            if ev.get("claude_code_version"):
                s.cli_versions.append(str(ev["claude_code_version"]))
            if ev.get("model"):
                s.models.append(ev["model"])
            s.tools_available.append(list(_list(ev.get("tools"))))
        elif kind == "system" and sub == "permission_denied":
            s.permission_denied.append(ev)
        elif kind == "assistant":
            msg = _dict(ev.get("message"))
            if _is_model_output(msg, ev):
                s.model_output = True
                s.assistant_message_ids.append(str(msg.get("id") or f"anon-{s.events}"))
            for block in _list(msg.get("content")):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    s.tool_calls.append(
                        ToolCall(
                            str(block.get("id", "")),
                            str(block.get("name", "")),
                            dict(_dict(block.get("input"))),
                            session,
                        )
                    )
        elif kind == "user":
            msg = _dict(ev.get("message"))
            for block in _list(msg.get("content")):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    tid, content = str(block.get("tool_use_id", "")), block.get("content")
                    s.tool_results[tid] = (bool(block.get("is_error")), _text(content))
                    if any(isinstance(b, dict) and b.get("type") != "text" for b in _list(content)):
                        s.tool_result_flat[tid] = flatten_content(content)
        elif kind == "result":
            s.results.append(ev)
    return s


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    return "" if content is None else str(content)


def flatten_content(content: object) -> str:
    """A tool result's content as one text, the exchange record's way: text blocks' texts joined by
    newlines, every other block as its type in brackets (``[image]``)."""
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, dict):
                parts.append(str(b.get("text", "")) if b.get("type") == "text" else f"[{b.get('type') or 'block'}]")
            else:
                parts.append(str(b))
        return "\n".join(parts)
    return _text(content)


def read_transcript(path) -> StreamSummary:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return parse_stream(fh)


# --------------------------------------------------------------------------
# Denied-family detection
# --------------------------------------------------------------------------


def _newlines_to_separators(text: str) -> str:
    """Turn unquoted newlines into ';' so that shlex sees one command per line."""
    out: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is None:
            if ch == "\\" and i + 1 < len(text):
                if text[i + 1] == "\n":  # line continuation
                    i += 2
                    continue
                out.append(text[i : i + 2])
                i += 2
                continue
            if ch in "'\"":
                quote = ch
            elif ch == "\n":
                ch = " ; "
            elif ch == "#" and (i == 0 or text[i - 1] in " \t;\n"):
                # a comment runs to the end of the line
                j = text.find("\n", i)
                i = len(text) if j < 0 else j
                continue
        elif quote == '"' and ch == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 2
            continue
        elif ch == quote:
            quote = None
        out.append(ch)
        i += 1
    return "".join(out)


def _tokens(text: str) -> list[str]:
    lex = shlex.shlex(_newlines_to_separators(text), posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        return list(lex)
    except ValueError:
        # Unbalanced quotes: fall back to a plain split so nothing is skipped silently.
        return re.findall(r"[^\s;&|()<>]+|[;&|()<>]+", text)


def _simple_commands(tokens: list[str]) -> list[list[str]]:
    cmds: list[list[str]] = [[]]
    skip_next = False
    for tok in tokens:
        if skip_next:
            skip_next = False
            continue
        if tok in _SEPARATORS or (tok and set(tok) <= set(";&|()")):
            cmds.append([])
            continue
        if _REDIRECT.match(tok):
            skip_next = True
            continue
        cmds[-1].append(tok)
    return [c for c in cmds if c]


def _base(word: str) -> str:
    name = PurePosixPath(word).name if "/" in word else word
    # LibreOffice's real binary is soffice.bin beside the soffice script.
    return name[:-4] if name.endswith(".bin") else name


@dataclass(frozen=True)
class Hit:
    family: str
    via: str


def _strip_wrapper(words: list[str]) -> list[str]:
    name = _base(words[0])
    rest = words[1:]
    if name == "timeout":
        while rest and rest[0].startswith("-"):
            rest = rest[2:] if rest[0] in {"-s", "-k", "--signal", "--kill-after"} else rest[1:]
        return rest[1:]  # the duration
    out = rest
    while out:
        w = out[0]
        if w == "--":
            return out[1:]
        if name == "env" and _ASSIGN.match(w):
            out = out[1:]
            continue
        if w.startswith("-") and len(w) > 1:
            out = out[2:] if w in _WRAPPER_VALUE_OPTS else out[1:]
            continue
        if name in {"nice", "ionice"} and w.lstrip("-").isdigit():
            out = out[1:]
            continue
        if name in {"flock", "chroot"}:
            out = out[1:]  # the lock file or new root
            continue
        break
    return out


def scan_shell(text: str, families: Iterable[str], via: str = "command", depth: int = 0) -> list[Hit]:
    """Every attempt to run a program of ``families`` in a shell command text."""
    fams = set(families)
    if not fams or depth > 6 or not text:
        return []
    hits: list[Hit] = []

    # Heredoc bodies: code for the interpreter on the same line, else data.
    def heredoc(m: re.Match) -> str:
        line_start = text.rfind("\n", 0, m.start()) + 1
        line = text[line_start : m.start()]
        body = m.group(3)
        head = [_base(w) for w in re.findall(r"[^\s;&|()<>]+", line)]
        if any(_INTERPRETER.match(w) for w in head) or re.search(r"\.py\b", line):
            hits.extend(Hit(h.family, f"{via} > heredoc code") for h in scan_code(body, fams, depth + 1))
        elif any(w in SHELLS for w in head) or re.search(r"\.(ba)?sh\b", line):
            hits.extend(Hit(h.family, f"{via} > heredoc shell") for h in scan_shell(body, fams, "heredoc", depth + 1))
        return ""

    text = _HEREDOC.sub(heredoc, text)

    # Command substitutions run as commands of their own.
    for inner in re.findall(r"\$\(([^()]*)\)", text) + re.findall(r"`([^`]*)`", text):
        hits.extend(Hit(h.family, f"{via} > $(...)") for h in scan_shell(inner, fams, "subst", depth + 1))
        # $(echo curl) builds the program name at run time.
        echoed = re.match(r"\s*(?:echo|printf)\s+(?:-[neE]+\s+)?['\"]?([^\s'\";|&]+)", inner)
        if echoed and _base(echoed.group(1)) in fams:
            hits.append(Hit(_base(echoed.group(1)), f"{via} > $(echo ...)"))

    for words in _simple_commands(_tokens(text)):
        hits.extend(_scan_words(words, fams, via, depth))
    return hits


def _scan_words(words: list[str], fams: set[str], via: str, depth: int) -> list[Hit]:
    hits: list[Hit] = []
    while words and _ASSIGN.match(words[0]):
        words = words[1:]
    guard = 0
    while words and guard < 10:
        guard += 1
        name = _base(words[0])
        if name in fams:
            hits.append(Hit(name, via))
            return hits
        if name == "command" and len(words) > 1 and words[1] in {"-v", "-V"}:
            return hits  # a lookup, not a run
        if name in WRAPPERS:
            words = _strip_wrapper(words)
            continue
        if _LOADER.match(name):
            rest = words[1:]
            while rest and rest[0].startswith("--"):
                rest = rest[2:] if rest[0] in _LOADER_VALUE_OPTS else rest[1:]
            words = rest
            continue
        if name in SHELLS:
            for i, w in enumerate(words[1:], start=1):
                if w.startswith("-") and not w.startswith("--") and "c" in w[1:] and i + 1 < len(words):
                    hits.extend(scan_shell(words[i + 1], fams, f"{name} -c", depth + 1))
                    break
            return hits
        if name == "eval":
            return hits + scan_shell(" ".join(words[1:]), fams, "eval", depth + 1)
        if _INTERPRETER.match(name):
            for i, w in enumerate(words[1:], start=1):
                if w in {"-c", "-e", "-E", "--eval"} and i + 1 < len(words):
                    hits.extend(Hit(h.family, f"{name} {w}") for h in scan_code(words[i + 1], fams, depth + 1))
                    break
            return hits
        if name in {"find", "fd"}:
            for i, w in enumerate(words):
                if w in {"-exec", "-execdir", "-ok", "-okdir", "-x", "--exec"} and i + 1 < len(words):
                    hits.extend(Hit(h.family, f"{name} {w}") for h in _scan_words(words[i + 1 :], fams, via, depth + 1))
            return hits
        return hits
    return hits


def _string_literals(code: str) -> list[str]:
    """String literals of a piece of code; Python's tokenizer when it parses, else quotes."""
    out: list[str] = []
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(code).readline))
        for i, tok in enumerate(toks):
            if tok.type != tokenize.STRING:
                continue
            # shutil.which('curl') looks a program up; it does not run it.
            if i >= 2 and toks[i - 1].string == "(" and toks[i - 2].string == "which":
                continue
            try:
                import ast

                value = ast.literal_eval(tok.string)
            except Exception:  # noqa: BLE001 - a token literal_eval cannot read (an f-string, a bad escape) is no literal
                continue
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if isinstance(value, str):
                out.append(value)
        return out
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    for m in re.finditer(r"'([^'\\\n]*(?:\\.[^'\\\n]*)*)'|\"([^\"\\\n]*(?:\\.[^\"\\\n]*)*)\"", code):
        out.append(m.group(1) if m.group(1) is not None else m.group(2))
    return out


def scan_code(code: str, families: Iterable[str], depth: int = 0) -> list[Hit]:
    """Attempts in program code: a string literal that is, or starts, a denied program's command."""
    fams = set(families)
    hits: list[Hit] = []
    for lit in _string_literals(code):
        words = lit.strip().split()
        if not words:
            continue
        if _base(words[0]) in fams:
            hits.append(Hit(_base(words[0]), "code"))
        elif len(words) > 1:
            hits.extend(Hit(h.family, "code > shell string") for h in scan_shell(lit, fams, "code", depth + 1))
    return hits


# --------------------------------------------------------------------------
# Deviations
# --------------------------------------------------------------------------


@dataclass
class Deviation:
    """One attempt at something the arm does not allow, recorded on the run."""

    kind: str  # denied_family | tool_not_in_arm | network_use | network_refused
    family: str
    tool: str
    tool_use_id: str
    command: str
    via: str
    # cli_rule | mask | tool_absent | not_blocked | not_run (a script written, not run)
    # | no_network (the sandbox's network namespace) | refusing_proxy | refused
    blocked_by: str
    session: int = 0
    #: What answered at the program's name inside the run's namespace (denied families only; see :func:`program_seen`):
    #: stub | absent | not_reached | unseen; empty for every other kind of deviation.
    program: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


_SCRIPT_EXT = re.compile(r"\.(py|sh|bash|zsh|pl|rb|js|mjs|command|scpt|applescript|c|cc|cpp|cxx|go|rs|java)$")
#: Reaching a denied family through its install tree rather than its program (a library loaded with ctypes, pyuno).
FAMILY_TREES: dict[str, re.Pattern] = {
    "soffice": re.compile(
        r"/usr/lib/libreoffice|/Applications/LibreOffice\.app|\blibmergedlo\b|\blibsofficeapp\b|\bimport\s+uno\b"
    ),
}
#: What a route that met the sandbox (an absent tree, a stub that is no ELF file) prints.
_MET_SANDBOX = re.compile(
    r"invalid ELF header|cannot open shared object file|No such file or directory|Read-only file system"
)


def _blocked(call: ToolCall, summary: StreamSummary, family: str | None = None) -> str:
    if call.id in summary.denied_ids:
        return "cli_rule"
    is_err, text = summary.tool_results.get(call.id, (False, ""))
    if STUB_MARKER in text or (is_err and ("Operation not permitted" in text or _MET_SANDBOX.search(text))):
        return "mask"  # the refusing stub or an absent install tree (bubblewrap), or sandbox-exec's refusal
    if is_err and family and re.search(rf"(?<![\w.+-]){re.escape(family)}: (?:command )?not found", text):
        # The family's program is not in the run's namespace at all (a macOS program on a Linux host):
        # the allow-listed sandbox holds nothing to run, which stops the attempt as a mask would.
        return "mask"
    return "not_blocked"


#: The program is on the host and the sandbox's refusing stub, bound over it, answered (it names its family).
PROGRAM_STUB = "stub"
#: The program is not in the run's namespace at all: the shell found nothing at its name or path.
PROGRAM_ABSENT = "absent"
#: The attempt never reached the namespace (the CLI's rule refused it, or a script was written and not run).
PROGRAM_NOT_REACHED = "not_reached"
#: It ran, and its result shows neither the stub's refusal nor an absence.
PROGRAM_UNSEEN = "unseen"


def program_seen(call: ToolCall, summary: StreamSummary, family: str) -> str:
    """What answered at ``family``'s name in the namespace, from the attempt's own result.

    ``blocked_by == "mask"`` says the sandbox stopped the attempt, but not
    whether the program's stub answered or the program was never there (a
    macOS program on a Linux host), and only the first shows that the mask
    works; this field keeps the two apart, from what the shell printed.
    """
    if call.name != "Bash" or call.id in summary.denied_ids:
        return PROGRAM_NOT_REACHED
    _, text = summary.tool_results.get(call.id, (False, ""))
    fam = re.escape(family)
    # The stub prints "<family>: not available in this environment (<marker>)" whatever name it is called by.
    if re.search(rf"(?<![\w.+-]){fam}: not available in this environment \({re.escape(STUB_MARKER)}\)", text):
        return PROGRAM_STUB
    # bash/dash: "curl: command not found", "sh: 1: curl: not found", "/usr/bin/qlmanage: No such file or directory".
    if re.search(
        rf"(?<![\w.+/-])(?:/[^\s:'\"]*/)?{fam}(?:\.bin)?: (?:(?:command )?not found|No such file or directory)", text
    ):
        return PROGRAM_ABSENT
    return PROGRAM_UNSEEN


def network_hits(call: ToolCall, already_denied: Iterable[str] = ()) -> list[Hit]:
    """Network use in one tool call: a network program run, or sockets in a command's or a script's code.

    Programs in ``already_denied`` are left out (their attempt is a denied-family deviation already).
    """
    hits: list[Hit] = []
    if call.name == "Bash":
        text = str(call.input.get("command", ""))
        programs = set(NETWORK_PROGRAMS) - set(already_denied)
        hits += [Hit("network", f"{h.via}: {h.family}") for h in scan_shell(text, programs)]
    elif call.name in {"Write", "Edit", "MultiEdit", "NotebookEdit"}:
        text = "\n".join(str(call.input.get(k, "")) for k in ("content", "new_string", "new_source"))
        text += "\n".join(str(e.get("new_string", "")) for e in _list(call.input.get("edits")) if isinstance(e, dict))
    else:
        return hits
    m = _NETWORK_CODE.search(text)
    if m:
        hits.append(Hit("network", f"code: {m.group(0).strip()}"))
    return hits


def network_deviations(
    summary: StreamSummary,
    *,
    network_allowed: bool,
    isolated: bool,
    refusals: Iterable[dict] = (),
    denied_families: Iterable[str] = (),
) -> list[Deviation]:
    """Network deviations: use by an arm without the network, and every refused connection (any arm)."""
    out: list[Deviation] = []
    fams = set(denied_families)
    for call in summary.tool_calls:
        if not network_allowed:
            hits = network_hits(call, fams)
            if hits:
                ran = call.name == "Bash"
                blocked = ("no_network" if isolated else "not_blocked") if ran else "not_run"
                command = (
                    str(call.input.get("command", "")) if ran else f"{call.name} {call.input.get('file_path', '')}"
                )
                out.append(
                    Deviation(
                        "network_use", "network", call.name, call.id, command[:2000], hits[0].via, blocked, call.session
                    )
                )
        _, text = summary.tool_results.get(call.id, (False, ""))
        m = _REFUSED.search(text)
        if m and call.name == "Bash":
            out.append(
                Deviation(
                    "network_refused",
                    "network",
                    call.name,
                    call.id,
                    str(call.input.get("command", ""))[:2000],
                    f"tool result: {m.group(0)}",
                    "no_network" if isolated else "refused",
                    call.session,
                )
            )
    for r in refusals:
        # One deviation per refused destination; how often it was asked for is said with it.
        n = int(r.get("count", 1) or 1)
        what = f"{r.get('method', '')} {r.get('target', '')}".strip()[:2000] + (f" ({n} requests)" if n > 1 else "")
        out.append(Deviation("network_refused", "network", "", "", what, "http proxy", "refusing_proxy"))
    return out


def audit(
    summary: StreamSummary,
    denied_families: Iterable[str],
    allowed_tools: Iterable[str],
    *,
    network_allowed: bool = True,
    isolated: bool = False,
    refusals: Iterable[dict] = (),
) -> list[Deviation]:
    """Every protocol deviation in the stream: denied-family attempts, calls of tools the arm lacks, network use."""
    fams = set(denied_families)
    allowed = set(allowed_tools)
    out: list[Deviation] = []
    for call in summary.tool_calls:
        if allowed and call.name not in allowed:
            out.append(
                Deviation(
                    "tool_not_in_arm",
                    "",
                    call.name,
                    call.id,
                    json.dumps(call.input)[:2000],
                    "tool call",
                    "tool_absent",
                    call.session,
                )
            )
            continue
        if not fams:
            continue
        hits: list[Hit] = []
        command = ""
        if call.name == "Bash":
            command = str(call.input.get("command", ""))
            hits = scan_shell(command, fams)
        elif call.name in {"Write", "Edit", "MultiEdit", "NotebookEdit"}:
            target = str(call.input.get("file_path", call.input.get("notebook_path", "")))
            body = (
                str(call.input.get("content", ""))
                + "\n"
                + str(call.input.get("new_string", ""))
                + "\n"
                + str(call.input.get("new_source", ""))
            )
            for e in _list(call.input.get("edits")):
                if isinstance(e, dict):
                    body += "\n" + str(e.get("new_string", ""))
            first = body.lstrip().splitlines()[0] if body.strip() else ""
            if target.endswith((".sh", ".bash", ".zsh", ".command")) or (
                first.startswith("#!") and re.search(r"\b(ba|z|da)?sh\b", first)
            ):
                hits = [Hit(h.family, "script (shell)") for h in scan_shell(body, fams, "script")]
            elif _SCRIPT_EXT.search(target) or first.startswith("#!"):
                hits = [Hit(h.family, "script (code)") for h in scan_code(body, fams)]
            command = f"{call.name} {target}"
        tree_text = (
            command
            if call.name == "Bash"
            else (body if call.name in {"Write", "Edit", "MultiEdit", "NotebookEdit"} else "")
        )
        for family, pattern in FAMILY_TREES.items():
            if family in fams and tree_text and pattern.search(tree_text):
                hits.append(Hit(family, "install tree"))
        if call.name == "Bash":
            # The mask's refusal names the program even when the command hid it (X=curl; $X).
            _, result_text = summary.tool_results.get(call.id, (False, ""))
            for m in re.finditer(
                rf"([A-Za-z0-9_.+-]+): not available in this environment \({re.escape(STUB_MARKER)}\)", result_text
            ):
                if _base(m.group(1)) in fams:
                    hits.append(Hit(_base(m.group(1)), "seen by the mask"))
        seen: set[str] = set()
        for h in hits:
            if h.family in seen:
                continue
            seen.add(h.family)
            blocked = _blocked(call, summary, h.family) if call.name == "Bash" else "not_run"
            out.append(
                Deviation(
                    "denied_family",
                    h.family,
                    call.name,
                    call.id,
                    command[:2000],
                    h.via,
                    blocked,
                    call.session,
                    program_seen(call, summary, h.family),
                )
            )
    # A denial the CLI reported without a tool call we could read still counts.
    known = {d.tool_use_id for d in out}
    for d in summary.permission_denied:
        tid = str(d.get("tool_use_id", ""))
        if tid and tid not in known:
            out.append(
                Deviation(
                    "denied_family",
                    "",
                    str(d.get("tool_name", "")),
                    tid,
                    str(d.get("message", ""))[:2000],
                    "cli report",
                    "cli_rule",
                    program=PROGRAM_NOT_REACHED,
                )
            )
    return out + network_deviations(
        summary, network_allowed=network_allowed, isolated=isolated, refusals=refusals, denied_families=fams
    )
