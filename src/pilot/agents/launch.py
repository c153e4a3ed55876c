"""Derive one agent launch (argv, settings, environment, masked programs) from an arm.

Everything that differs between arms comes from ``protocol/arms/arms.yml``
through :class:`pilot.protocol.Arm`: the CLI's tool set (``--tools``, which
makes exactly those tools exist), the deny rules ``Bash(<family>:*)`` for the
denied families, the programs masked in the run's mount namespace, and the
programs of features the arm does not have (LibreOffice, Chromium), which are
masked too but are not denied families (calling them is no deviation).
Nothing here names an arm.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pilot import paths
from pilot.agents import sandbox
from pilot.protocol import Arm, Study

#: Variables the agent process inherits from the operator's environment.
PASSTHROUGH_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
)

#: Quiet the CLI: no telemetry, no update checks, no error reports.
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
}

#: The worker's PATH after the worker Python environment; the operator's PATH is not inherited.
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

#: Programs that belong to an arm feature; masked when the arm lacks the feature.
FEATURE_PROGRAMS: dict[str, tuple[str, ...]] = {
    "libreoffice": ("soffice", "libreoffice", "localc", "lowriter", "loimpress", "lodraw"),
    "chromium": ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"),
}


@dataclass(frozen=True)
class AgentDirs:
    """The per-run folders of the agent process, all under ``<run>/agent``."""

    root: Path
    config: Path
    home: Path
    tmp: Path
    settings: Path
    stub_dir: Path

    @classmethod
    def under(cls, run_dir: Path) -> "AgentDirs":
        root = Path(run_dir).resolve() / "agent"
        return cls(root, root / "claude-config", root / "home", root / "tmp", root / "settings.json", root / "sandbox")

    def create(self) -> None:
        for d in (self.config, self.home, self.tmp, self.stub_dir):
            d.mkdir(parents=True, exist_ok=True)


@dataclass
class LaunchSpec:
    """One launch of the agent CLI, fully derived from the arm and the run."""

    arm_id: str
    argv: list[str]
    settings: dict
    env: dict[str, str]
    masked_programs: dict[str, list[str]]
    absent_programs: dict[str, list[str]]
    plan: sandbox.SandboxPlan | None
    sandbox_prefix: list[str]
    cwd: Path
    prompt: str
    enforcement: str = "none"
    notes: list[str] = field(default_factory=list)
    sandbox_profile: str | None = None

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
            "absent_programs": self.absent_programs,
            "sandbox": self.plan.to_dict() if self.plan else None,
            "enforcement": self.enforcement,
            "cwd": str(self.cwd),
            "prompt": self.prompt,
            "notes": self.notes,
        }


def deny_rules(arm: Arm) -> list[str]:
    """The CLI permission rules for the arm's denied families."""
    return [f"Bash({family}:*)" for family in arm.denied_families]


def arm_settings(arm: Arm) -> dict:
    """The ``--settings`` file content: the deny rules and no prompts."""
    return {"permissions": {"deny": deny_rules(arm), "defaultMode": "bypassPermissions"}}


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


def absent_programs(arm: Arm, path_dirs: list[str]) -> dict[str, list[str]]:
    """Programs of features the arm does not have (shell arms only), with their paths."""
    if not arm.has_shell:
        return {}
    out: dict[str, list[str]] = {}
    for feature, names in FEATURE_PROGRAMS.items():
        if arm.feature(feature):
            continue
        for name in names:
            if name in arm.denied_families:
                continue
            hits = sandbox.program_paths(name, path_dirs)
            if hits:
                out[name] = hits
    return out


def agent_env(
    arm: Arm,
    dirs: AgentDirs,
    *,
    path_dirs: list[str],
    environ: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
    is_root: bool | None = None,
) -> dict[str, str]:
    """The agent process's whole environment: nothing of the operator's beyond the pass-through list."""
    environ = dict(os.environ if environ is None else environ)
    env = {
        "PATH": os.pathsep.join(path_dirs),
        "HOME": str(dirs.home),
        "TMPDIR": str(dirs.tmp),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "SHELL": "/bin/bash",
        "CLAUDE_CONFIG_DIR": str(dirs.config),
        **QUIET_ENV,
    }
    for key in PASSTHROUGH_ENV:
        if environ.get(key):
            env[key] = environ[key]
    if is_root if is_root is not None else (hasattr(os, "geteuid") and os.geteuid() == 0):
        # The CLI refuses bypassPermissions as root outside a declared sandbox.
        env["IS_SANDBOX"] = "1"
    env.update(extra_env or {})
    return env


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
    return argv


def default_hidden(run_dir: Path) -> list[Path]:
    """Folders the worker must not see: the repository, the other runs, the operator's home.

    The other runs are the run folder's siblings; in the scheduler's layout
    (``<study>/workspaces/<run id>/attempt-N``) they are the siblings of the
    run id's folder, so that folder's parent is hidden too.
    """
    run_dir = Path(run_dir).resolve()
    hidden = [paths.ROOT, run_dir.parent, Path.home()]
    if run_dir.name.startswith("attempt-") and len(run_dir.parents) > 2:
        hidden.append(run_dir.parent.parent)
    return hidden


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


def build_launch(
    arm: Arm,
    study: Study,
    *,
    claude_bin: Path | str,
    workspace: Path,
    run_dir: Path,
    budget_usd: float,
    max_turns: int | None = None,
    model: str | None = None,
    resume_session_id: str | None = None,
    worker_env: Path | None = None,
    environ: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
    use_sandbox: bool | None = None,
    is_root: bool | None = None,
) -> LaunchSpec:
    """Everything needed to start the agent for one session of one run.

    ``use_sandbox`` None means: use bubblewrap when the host has it. The
    returned spec is data; :func:`materialize` writes its files.
    """
    dirs = AgentDirs.under(run_dir)
    cli = study["cli"]
    path_dirs = worker_path_dirs(arm, worker_env)
    masked = masked_programs(arm, path_dirs)
    absent = absent_programs(arm, path_dirs)
    settings = arm_settings(arm)
    argv = cli_argv(
        arm,
        claude_bin=claude_bin,
        model=model or study["worker"]["model"],
        max_turns=max_turns if max_turns is not None else int(cli["max_turns"]),
        budget_usd=budget_usd,
        settings_path=dirs.settings,
        cli=cli,
        resume_session_id=resume_session_id,
    )
    env = agent_env(arm, dirs, path_dirs=path_dirs, environ=environ, extra_env=extra_env, is_root=is_root)
    method = sandbox.enforcement_method()
    notes: list[str] = []
    if use_sandbox is None:
        use_sandbox = method != "none"
    plan = None
    prefix: list[str] = []
    profile = None
    enforcement = "cli-rules-and-audit" if arm.denied_families else "audit"
    if use_sandbox:
        if method == "none":
            raise RuntimeError("a sandboxed launch was requested but neither bubblewrap (Linux) nor sandbox-exec (macOS) is available")
        claude_real = Path(shutil.which(str(claude_bin)) or claude_bin).resolve()
        rebind_ro = [claude_real.parent]
        if worker_env is not None and arm.feature("python_env"):
            rebind_ro += [Path(worker_env), *_python_home(Path(worker_env))]
        all_masked = [p for hits in masked.values() for p in hits] + [p for hits in absent.values() for p in hits]
        plan = sandbox.make_plan(
            all_masked,
            hidden=default_hidden(run_dir),
            rebind_ro=rebind_ro,
            rebind_rw=[Path(run_dir).resolve()],
            stub=dirs.stub_dir / "denied-program",
        )
        if method == "bubblewrap":
            prefix = sandbox.bwrap_prefix(plan, bwrap=str(sandbox.bwrap_available()), chdir=Path(workspace).resolve())
        else:
            # macOS: the same plan as a sandbox-exec profile (no PID namespace; the process group and sweep end the tree).
            profile = sandbox.macos_profile(plan)
            prefix = ["sandbox-exec", "-f", str(dirs.root / "sandbox.sb")]
        enforcement = f"{method}-mask-and-audit" if arm.denied_families else f"{method}-isolation-and-audit"
    elif arm.denied_families:
        notes.append("no second enforcement layer on this host: denials rest on CLI rules and the audit")
    return LaunchSpec(
        arm_id=arm.id,
        argv=argv,
        settings=settings,
        env=env,
        masked_programs=masked,
        absent_programs=absent,
        plan=plan,
        sandbox_prefix=prefix,
        cwd=Path(workspace).resolve(),
        prompt=study["worker"]["user_prompt"],
        enforcement=enforcement,
        notes=notes,
        sandbox_profile=profile,
    )


def materialize(spec: LaunchSpec, run_dir: Path) -> AgentDirs:
    """Create the per-run folders and write the settings file and the refusing stub."""
    import json

    dirs = AgentDirs.under(run_dir)
    dirs.create()
    dirs.settings.write_text(json.dumps(spec.settings, indent=2) + "\n", encoding="utf-8")
    sandbox.write_stub(dirs.stub_dir)
    if spec.sandbox_profile is not None:
        (dirs.root / "sandbox.sb").write_text(spec.sandbox_profile, encoding="utf-8")
    return dirs
