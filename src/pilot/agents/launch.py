"""Derive one agent launch (argv, settings, environment, sandbox) from an arm.

Everything that differs between arms comes from ``protocol/arms/arms.yml``
through :class:`pilot.protocol.Arm`: the CLI's tool set (``--tools``, which
makes exactly those tools exist), the deny rules ``Bash(<family>:*)`` for the
denied families, the programs covered by a refusing stub in the run's
sandbox, and the install trees of features the arm does not have
(LibreOffice, Chromium), which are absent from the sandbox as a whole.
Nothing here names an arm.

The agent's environment carries no secret of the operator's: the API
address points at the model proxy's bridge inside the sandbox and the key
is the proxy's per-run token (:mod:`pilot.agents.model_proxy`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pilot.agents import sandbox, shell_scope
from pilot.protocol import Arm, Study

#: The loopback ports inside the sandbox: the model proxy's bridge and the refusing HTTP proxy.
#: (Below the ephemeral range, so a portal's port, bridged at its own number, never meets them.)
MODEL_PORT = 2080
REFUSAL_PORT = 3128

#: Quiet the CLI: no telemetry, no update checks, no error reports, no cross-session messaging (the pinned CLI would
#: otherwise listen on a Unix socket whose address and token it hands to every program it starts, and put what
#: arrives there before the model as a message from another session).
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_HARBOR_KITE": "0",
}

#: The worker's PATH after the worker Python environment; the operator's PATH is not inherited.
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

#: Where the CLI's config folder (its session store) appears inside a bubblewrap sandbox: under /run, which the worker's
#: shell cannot write, and never beneath the worker's private /tmp (a run folder under the host's /tmp would be).
INSIDE_CONFIG = "/run/pilot-config"
#: The variable naming the run's config folder on the host in every process of an attempt (the leftover sweep's mark).
RUN_MARK_VAR = "PILOT_RUN_CONFIG"
#: Where the CLI's own home appears inside a bubblewrap sandbox, read-only to every process in it (the CLI included):
#: the home, configuration folders, fontconfig file and helper programs of the CLI, which the worker never wrote.
INSIDE_CLI = "/run/pilot-cli"

#: The only variables the worker's shell receives (values decided by the harness, :func:`worker_shell_env`); nothing
#: else of the CLI's environment reaches a program the worker runs.
SHELL_ENV = (
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "TERM",
    "SHELL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    RUN_MARK_VAR,
)

#: The programs the pinned CLI starts by name outside its shell, each replaced on the CLI's PATH by a confined helper
#: (:func:`pilot.agents.shell_scope.helper_text`); whether a helper may write the folder its last argument names.
CLI_HELPERS = {"git": False, "pdftoppm": True, "pdfinfo": False}
#: The variable that tells a helper the CLI called it (only the CLI's environment carries it; see :data:`SHELL_ENV`).
HELPER_MARK_VAR = "PILOT_CLI_ROOT"

#: How a launch is isolated: ``required`` (refuse when the host cannot) or ``unisolated`` (development opt-in).
ISOLATION_REQUIRED, ISOLATION_OPT_OUT = "required", "unisolated"
#: The ``enforcement`` of a run launched without isolation (development only; the analysis refuses it by default).
UNISOLATED = "unisolated"


@dataclass(frozen=True)
class AgentDirs:
    """The per-run folders of the agent process, all under ``<run>/agent`` (never inside the workspace).

    ``config`` and ``home`` are bound read-write into the sandbox, whose
    TMPDIR is its private /tmp (``tmp`` serves a development run without the
    sandbox); ``settings`` and :attr:`cli_root` (the CLI's own home and
    helpers) are bound read-only; ``stub_dir`` is never visible (its stubs
    are bound over the denied programs).
    """

    root: Path
    config: Path
    home: Path
    tmp: Path
    settings: Path
    stub_dir: Path

    @classmethod
    def under(cls, run_dir: Path) -> AgentDirs:
        root = Path(run_dir).resolve() / "agent"
        return cls(root, root / "claude-config", root / "home", root / "tmp", root / "settings.json", root / "stubs")

    @property
    def shell_wrapper(self) -> Path:
        """The worker's shell wrapper on the host (bound read-only at :data:`pilot.agents.shell_scope.INSIDE_PATH`)."""
        return self.root / "shell" / "bash"

    @property
    def cli_root(self) -> Path:
        """The CLI's own home, configuration and helpers on the host (bound read-only at :data:`INSIDE_CLI`)."""
        return self.root / "cli"

    @property
    def shell_snapshots(self) -> Path:
        """The one folder of the CLI's config the worker's shell may write (the CLI's shell snapshots)."""
        return self.config / "shell-snapshots"

    def create(self) -> None:
        for d in (self.config, self.home, self.tmp, self.stub_dir, self.shell_snapshots):
            d.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class ModelEndpoint:
    """Where the agent reaches the model: the proxy's socket (bridged) or, unisolated, its loopback URL."""

    token: str
    socket_path: Path | None = None
    base_url: str | None = None


@dataclass
class LaunchSpec:
    """One launch of the agent CLI, fully derived from the arm and the run."""

    arm_id: str
    argv: list[str]
    settings: dict
    env: dict[str, str]
    masked_programs: dict[str, list[str]]
    plan: sandbox.SandboxPlan | None
    sandbox_prefix: list[str]
    cwd: Path
    prompt: str
    enforcement: str = UNISOLATED
    notes: list[str] = field(default_factory=list)
    sandbox_profile: str | None = None
    #: The worker's shell wrapper to write (host path, text), for arms with a shell in the bubblewrap sandbox.
    shell_wrapper: tuple[Path, str] | None = None
    #: The CLI's own folder to write (host path, text, mode): its fontconfig file and confined helpers.
    cli_files: tuple[tuple[Path, str, int], ...] = ()

    @property
    def command(self) -> list[str]:
        return [*self.sandbox_prefix, *self.argv]

    def to_dict(self) -> dict:
        secret = {k for k in self.env if "KEY" in k or "TOKEN" in k}
        return {
            "arm": self.arm_id,
            "argv": self.argv,
            "command": self.command,
            "settings": self.settings,
            "env": {k: ("<set>" if k in secret else v) for k, v in sorted(self.env.items())},
            "masked_programs": self.masked_programs,
            "sandbox": self.plan.to_dict() if self.plan else None,
            "enforcement": self.enforcement,
            "cwd": str(self.cwd),
            "prompt": self.prompt,
            "notes": self.notes,
        }


def deny_rules(arm: Arm) -> list[str]:
    """The CLI permission rules for the arm's denied families."""
    return [f"Bash({family}:*)" for family in arm.denied_families]


def store_rules(config_dir: str) -> list[str]:
    """The CLI's file tools never write its own config folder (the session store a resume reads), whatever the arm.

    ``config_dir`` is the folder as the CLI sees it; the CLI resolves links
    and ``..`` before it matches a rule, so no other name of it gets through.
    """
    return [f"{tool}(/{config_dir.rstrip('/')}/**)" for tool in ("Edit", "Write", "NotebookEdit")]


def arm_settings(arm: Arm, config_dir: str = INSIDE_CONFIG) -> dict:
    """The ``--settings`` file content: the arm's deny rules, the store's, and no prompts."""
    return {"permissions": {"deny": [*deny_rules(arm), *store_rules(config_dir)], "defaultMode": "bypassPermissions"}}


def worker_path_dirs(arm: Arm, worker_env: Path | None) -> list[str]:
    """The worker's PATH: the worker Python environment first (shell arms), then the system folders."""
    dirs: list[str] = []
    if worker_env is not None and arm.feature("python_env"):
        dirs.append(str(Path(worker_env) / "bin"))
    dirs.extend(d for d in SYSTEM_PATH if Path(d).is_dir())
    return dirs


def masked_programs(arm: Arm, path_dirs: list[str]) -> dict[str, list[str]]:
    """Each denied family with every path it can be run from."""
    return {family: sandbox.program_paths(family, path_dirs) for family in arm.denied_families}


def agent_env(
    arm: Arm,
    dirs: AgentDirs,
    *,
    path_dirs: list[str],
    api_base_url: str,
    api_token: str,
    refusal_proxy: str | None = None,
    tmpdir: str | None = None,
    extra_env: dict[str, str] | None = None,
    is_root: bool | None = None,
    max_output_tokens: int | None = None,
    config_dir: str | None = None,
) -> dict[str, str]:
    """The agent process's whole environment: nothing of the operator's (no key, no PATH, no proxy).

    ``max_output_tokens`` (study.yml ``cli.max_output_tokens``, the same for
    every arm) bounds each request's ``max_tokens``, so the proxy's worst
    case per request is small beside the run's dollar cap (A-011).
    ``config_dir`` is the config folder as the CLI sees it (inside the
    sandbox, :data:`INSIDE_CONFIG`); :data:`RUN_MARK_VAR` always names the
    host's folder.
    """
    env = {
        "PATH": os.pathsep.join(path_dirs),
        "HOME": str(dirs.home),
        "TMPDIR": tmpdir or str(dirs.tmp),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "SHELL": "/bin/bash",
        "CLAUDE_CONFIG_DIR": config_dir or str(dirs.config),
        RUN_MARK_VAR: str(dirs.config),
        "ANTHROPIC_BASE_URL": api_base_url,
        # The model proxy's per-run token: worth nothing anywhere but at that proxy, for this run.
        "ANTHROPIC_API_KEY": api_token,
        **QUIET_ENV,
    }
    if refusal_proxy:
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            env[key] = refusal_proxy
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    if is_root if is_root is not None else (hasattr(os, "geteuid") and os.geteuid() == 0):
        # The CLI refuses bypassPermissions as root outside a declared sandbox.
        env["IS_SANDBOX"] = "1"
    env.update(extra_env or {})
    if max_output_tokens is not None:
        # Set after extra_env: the bound is part of the protocol, not a per-run option.
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(int(max_output_tokens))
    return env


def worker_shell_env(env: dict[str, str]) -> dict[str, str]:
    """What the worker's shell gets of an agent environment: the names of :data:`SHELL_ENV` only (an allow-list)."""
    return {k: env[k] for k in SHELL_ENV if k in env}


def cli_pins(root: str) -> dict[str, str]:
    """Where the CLI and its helpers find every configuration they read: beneath ``root``, the harness's own folder.

    The CLI's home, its XDG folders (git's, fontconfig's, the API profile
    store's), git's global, system and attribute files and fontconfig's file
    are the harness's, never the worker's scratch home; so nothing the worker
    writes there (a ``.gitconfig`` filter, a ``fonts.conf``, a ``.bunfig.toml``,
    an API profile) is read by a process with the CLI's reach.
    """
    home = f"{root}/home"
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "ANTHROPIC_CONFIG_DIR": f"{home}/.config/anthropic",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_CEILING_DIRECTORIES": "/",
        "FONTCONFIG_FILE": f"{root}/fonts.conf",
        "FONTCONFIG_PATH": root,
    }


#: The fontconfig file of the CLI's PDF tools: the system's fonts and rules, and no file of any home (the rules'
#: per-user includes resolve beneath the CLI's own read-only home, where nothing is).
FONTS_CONF = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir>/usr/share/fonts</dir>
  <dir>/usr/local/share/fonts</dir>
  <include ignore_missing="yes">/etc/fonts/conf.d</include>
</fontconfig>
"""


def helper_env(root: str, path_dirs: list[str], run_mark: str | None = None) -> dict[str, str]:
    """The whole environment of a CLI helper: the CLI's pins, the system's programs, and for git no repository.

    ``run_mark`` is the run's :data:`RUN_MARK_VAR` (the leftover sweep finds every process of an attempt by it).
    """
    return {
        **({RUN_MARK_VAR: run_mark} if run_mark else {}),
        "PATH": os.pathsep.join(d for d in SYSTEM_PATH if Path(d).is_dir()),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": "/tmp",
        **cli_pins(root),
        # The CLI names the repository it found itself (the workspace's .git): the helper's git never reads one.
        "GIT_DIR": f"{root}/no-repository",
    }


def cli_files(
    dirs: AgentDirs, root: str, path_dirs: list[str], python: str | None, worker_writable: list[str]
) -> list[tuple[Path, str, int]]:
    """The files of the CLI's own folder (host path, text, mode): its fontconfig file and its confined helpers."""
    from pilot.agents import shell_scope

    files: list[tuple[Path, str, int]] = [(dirs.cli_root / "fonts.conf", FONTS_CONF, 0o444)]
    if python is None:
        return files
    env = helper_env(root, path_dirs, str(dirs.config))
    for name, writes_output in CLI_HELPERS.items():
        program = shutil.which(name, path=os.pathsep.join(path_dirs))
        if program is None:
            continue  # the CLI finds no such program either
        text = shell_scope.helper_text(
            python,
            os.path.realpath(program),
            env,
            marker=HELPER_MARK_VAR,
            worker_writable=worker_writable,
            output_beneath=f"{INSIDE_CONFIG}/projects" if writes_output else None,
            name=f"pilot-{name}",
        )
        files.append((dirs.cli_root / "bin" / name, text, 0o555))
    return files


def cli_argv(
    arm: Arm,
    *,
    claude_bin: Path | str,
    model: str,
    max_turns: int,
    budget_usd: float,
    settings_path: Path,
    cli: dict,
    resume_session_id: str | None = None,
    session_id: str | None = None,
) -> list[str]:
    """The CLI command line; the prompt goes on stdin (``--tools`` would swallow it)."""
    argv = [
        str(claude_bin),
        "-p",
        "--output-format",
        cli["output_format"],
        "--verbose",
        "--model",
        model,
        "--max-turns",
        str(int(max_turns)),
        "--max-budget-usd",
        f"{max(budget_usd, 0.0):.4f}",
        "--permission-mode",
        "bypassPermissions",
        "--setting-sources",
        "",
        "--settings",
        str(settings_path),
        "--tools",
        ",".join(arm.tools),
    ]
    if cli.get("bare"):
        argv.append("--bare")
    if cli.get("permission_prompts"):
        argv += ["--permission-prompts", cli["permission_prompts"]]
    if resume_session_id:
        argv += ["--resume", resume_session_id]
    elif session_id:
        # The harness names the session, so what a resume continues never comes from the stream.
        argv += ["--session-id", session_id]
    return argv


def _python_home(worker_env: Path) -> list[Path]:
    # A venv's interpreter lives in its base installation (pyvenv.cfg "home").
    cfg = Path(worker_env) / "pyvenv.cfg"
    out: list[Path] = []
    if cfg.is_file():
        for line in cfg.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                out.append(Path(value.strip()).parent)
    py = Path(worker_env) / "bin" / "python3"
    if py.exists():
        out.append(py.resolve().parent.parent)
    return out


def _port(url: str) -> int | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).port
    except ValueError:
        return None


def build_launch(
    arm: Arm,
    study: Study,
    *,
    claude_bin: Path | str,
    workspace: Path,
    run_dir: Path,
    budget_usd: float,
    model_endpoint: ModelEndpoint,
    max_turns: int | None = None,
    model: str | None = None,
    resume_session_id: str | None = None,
    worker_env: Path | None = None,
    extra_env: dict[str, str] | None = None,
    isolation: str = ISOLATION_REQUIRED,
    portal_socket: tuple[Path, int] | None = None,
    refusal_socket: Path | None = None,
    is_root: bool | None = None,
    session_id: str | None = None,
    tmp_bytes: int | None = None,
) -> LaunchSpec:
    """Everything needed to start the agent for one session of one run.

    ``isolation`` ``required`` builds the sandbox or raises
    :class:`pilot.agents.sandbox.IsolationUnavailable` naming what the host
    lacks; ``unisolated`` (development only) runs the CLI without it and
    says so in ``enforcement``. ``portal_socket`` is the harness-side socket
    of the run's portal bridge and the port it answers on inside (the port
    of the URL in ``portal_credentials.json``); ``refusal_socket`` the
    refusing HTTP proxy's. The returned spec is data; :func:`materialize`
    writes its files.
    """
    if isolation not in (ISOLATION_REQUIRED, ISOLATION_OPT_OUT):
        raise ValueError(f"isolation {isolation!r}: expected {ISOLATION_REQUIRED!r} or {ISOLATION_OPT_OUT!r}")
    dirs = AgentDirs.under(run_dir)
    cli = study["cli"]
    path_dirs = worker_path_dirs(arm, worker_env)
    masked = masked_programs(arm, path_dirs)
    argv = cli_argv(
        arm,
        claude_bin=claude_bin,
        model=model or study["worker"]["model"],
        max_turns=max_turns if max_turns is not None else int(cli["max_turns"]),
        budget_usd=budget_usd,
        settings_path=dirs.settings,
        cli=cli,
        resume_session_id=resume_session_id,
        session_id=session_id,
    )
    notes: list[str] = []
    plan = None
    wrapper = None
    prefix: list[str] = []
    profile = None
    files: list[tuple[Path, str, int]] = []
    if isolation == ISOLATION_OPT_OUT:
        base_url = model_endpoint.base_url or ""
        env = agent_env(
            arm,
            dirs,
            path_dirs=path_dirs,
            api_base_url=base_url,
            api_token=model_endpoint.token,
            extra_env=extra_env,
            is_root=is_root,
            max_output_tokens=cli.get("max_output_tokens"),
        )
        enforcement = UNISOLATED
        notes.append(
            "UNISOLATED (development opt-in): the agent ran without the sandbox; its denials rest on CLI rules "
            "and the audit, and it could reach the host's files and network"
        )
    else:
        sandbox.require_isolation()
        method = sandbox.enforcement_method()
        bridges: list[sandbox.Bridge] = []
        if model_endpoint.socket_path is not None:
            bridges.append(
                sandbox.Bridge(
                    "model", str(model_endpoint.socket_path), MODEL_PORT, _port(model_endpoint.base_url or "")
                )
            )
        if portal_socket is not None:
            bridges.append(
                sandbox.Bridge("portal", str(portal_socket[0]), int(portal_socket[1]), int(portal_socket[1]))
            )
        if refusal_socket is not None:
            bridges.append(sandbox.Bridge("refusal", str(refusal_socket), REFUSAL_PORT, None))
        claude_real = Path(shutil.which(str(claude_bin)) or claude_bin).resolve()
        bwrap = method == "bubblewrap"
        extra_ro = [claude_real.parent, dirs.settings] + ([] if bwrap else [dirs.cli_root])
        if worker_env is not None and arm.feature("python_env"):
            extra_ro += [Path(worker_env), *_python_home(Path(worker_env))]
        plan = sandbox.make_plan(
            features={f: bool(arm.feature(f)) for f in sandbox.FEATURE_TREES},
            extra_ro=extra_ro,
            # bubblewrap shows the config folder at INSIDE_CONFIG (below); sandbox-exec at its own path.
            rw=[Path(workspace), dirs.home] + ([] if bwrap else [dirs.config]),
            masked=masked,
            stub_dir=dirs.stub_dir,
            bridges=bridges,
        )
        python = None
        if bwrap:
            # The worker's shell and the CLI's helpers each run in a Landlock domain below the CLI's (Linux only).
            python = shell_scope.wrapper_python(worker_env)
            if python is None:
                raise sandbox.IsolationUnavailable(
                    "no Python interpreter for the worker's shell wrapper and the CLI's helpers "
                    "(/usr/bin/python3 or the worker environment's)"
                )
            plan = dataclasses.replace(
                plan,
                rw_mapped=((str(dirs.config), INSIDE_CONFIG),),
                ro_mapped=((str(dirs.cli_root), INSIDE_CLI),),
            )
        cli_root = INSIDE_CLI if bwrap else str(dirs.cli_root)
        if method == "bubblewrap":
            base_url = (
                f"http://127.0.0.1:{MODEL_PORT}"
                if model_endpoint.socket_path is not None
                else (model_endpoint.base_url or "")
            )
            refusal = f"http://127.0.0.1:{REFUSAL_PORT}" if refusal_socket is not None else None
        else:
            # macOS: no namespace to bind sockets into; the profile allows only the proxy's and the portal's ports.
            base_url, refusal = model_endpoint.base_url or "", None
        # TMPDIR is the sandbox's private /tmp (a fresh tmpfs per session): short enough for the Unix sockets programs
        # create there (Chromium's), which a path under the run folder is not.
        env = agent_env(
            arm,
            dirs,
            path_dirs=path_dirs,
            api_base_url=base_url,
            api_token=model_endpoint.token,
            refusal_proxy=refusal,
            tmpdir="/tmp" if bwrap else None,
            extra_env=extra_env,
            is_root=is_root,
            max_output_tokens=cli.get("max_output_tokens"),
            config_dir=INSIDE_CONFIG if bwrap else None,
        )
        shell_env = worker_shell_env(env)
        # /run holds only the harness's sockets, the CLI's read-only folder, the shell wrapper and the CLI's config:
        # the worker writes nothing there but the CLI's shell snapshots.
        writable = [
            str(Path(workspace).resolve()),
            str(dirs.home),
            f"{INSIDE_CONFIG}/{dirs.shell_snapshots.name}",
            "/tmp",
            "/var/tmp",
            "/dev",
            "/proc",
        ]
        # The CLI reads its configuration (and runs its helpers) from the harness's read-only folder, never the
        # worker's home; its confined helpers come first on its PATH.
        env.update(cli_pins(cli_root))
        env[HELPER_MARK_VAR] = cli_root
        files = cli_files(dirs, cli_root, path_dirs, python, writable)
        if any(path.parent.name == "bin" for path, _, _ in files):
            env["PATH"] = os.pathsep.join([f"{cli_root}/bin", *path_dirs])
        if bwrap and "Bash" in arm.tools:
            assert python is not None
            wrapper = (dirs.shell_wrapper, shell_scope.wrapper_text(python, writable, shell_env))
            plan = dataclasses.replace(
                plan, ro_mapped=(*plan.ro_mapped, (str(dirs.shell_wrapper), shell_scope.INSIDE_PATH))
            )
            # Every command of the CLI's Bash tool (and its shell snapshot) starts in the nested Landlock domain.
            env["CLAUDE_CODE_SHELL"] = shell_scope.INSIDE_PATH
        if method == "bubblewrap":
            prefix = sandbox.bwrap_prefix(
                plan,
                bwrap=str(sandbox.bwrap_available() or "bwrap"),
                chdir=Path(workspace).resolve(),
                tmp_bytes=tmp_bytes,
            )
        else:
            profile = sandbox.macos_profile(plan)
            prefix = ["sandbox-exec", "-f", str(dirs.root / "sandbox.sb")]
        enforcement = method
    bwrap_config = isolation != ISOLATION_OPT_OUT and sandbox.enforcement_method() == "bubblewrap"
    return LaunchSpec(
        arm_id=arm.id,
        argv=argv,
        settings=arm_settings(arm, INSIDE_CONFIG if bwrap_config else str(dirs.config)),
        env=env,
        masked_programs=masked,
        plan=plan,
        sandbox_prefix=prefix,
        cwd=Path(workspace).resolve(),
        prompt=study["worker"]["user_prompt"],
        enforcement=enforcement,
        notes=notes,
        sandbox_profile=profile,
        shell_wrapper=wrapper,
        cli_files=tuple(files) if isolation != ISOLATION_OPT_OUT else (),
    )


def materialize(spec: LaunchSpec, run_dir: Path) -> AgentDirs:
    """Create the per-run folders and write the settings file and the refusing stubs."""
    import json

    dirs = AgentDirs.under(run_dir)
    dirs.create()
    dirs.settings.write_text(json.dumps(spec.settings, indent=2) + "\n", encoding="utf-8")
    sandbox.write_stubs(dirs.stub_dir, list(spec.masked_programs))
    if spec.sandbox_profile is not None:
        (dirs.root / "sandbox.sb").write_text(spec.sandbox_profile, encoding="utf-8")
    if spec.shell_wrapper is not None:
        _write_readonly(*spec.shell_wrapper, 0o555)
    if spec.cli_files:
        (dirs.cli_root / "home").mkdir(parents=True, exist_ok=True)
        for path, text, mode in spec.cli_files:
            _write_readonly(path, text, mode)
    return dirs


def _write_readonly(path: Path, text: str, mode: int) -> None:
    # Replaced, never written through: a file left by an earlier launch may be read-only.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
