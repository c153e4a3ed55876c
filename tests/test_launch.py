"""Every arm's launch (argv, settings, environment, masked programs) follows from protocol/arms."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from worker_env_support import make_worker_env

from pilot import paths, protocol
from pilot.agents import launch, sandbox

ARMS = protocol.arms()
STUDY = protocol.study()
FAKE_CLI = paths.ROOT / "tests" / "fake_claude" / "claude"


TOKEN = "run-token-1"
ENDPOINT = launch.ModelEndpoint(TOKEN, None, "http://127.0.0.1:9")
UNISOLATED = {"isolation": launch.ISOLATION_OPT_OUT}


def _spec(arm_id: str, tmp: Path, **kw) -> launch.LaunchSpec:
    run = tmp / "runs" / "r1"
    (run / "workspace").mkdir(parents=True, exist_ok=True)
    kw.setdefault("worker_env", make_worker_env(tmp) if not (tmp / "worker-env").exists() else tmp / "worker-env")
    kw.setdefault("model_endpoint", ENDPOINT)
    return launch.build_launch(
        ARMS[arm_id], STUDY, claude_bin=FAKE_CLI, workspace=run / "workspace", run_dir=run, budget_usd=4.0, **kw
    )


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("arm_id", list(ARMS))
def test_argv_is_derived_from_the_arm_and_the_study(arm_id, tmp_path):
    arm = ARMS[arm_id]
    spec = _spec(arm_id, tmp_path, **UNISOLATED)
    argv = spec.argv
    assert argv[0] == str(FAKE_CLI)
    assert "-p" in argv and "--verbose" in argv
    assert _value(argv, "--output-format") == "stream-json"
    # The tool set itself (not a pre-approval): exactly the arm's tools.
    assert _value(argv, "--tools").split(",") == list(arm.tools)
    assert "--allowedTools" not in argv
    assert _value(argv, "--max-turns") == str(STUDY["cli"]["max_turns"]) == "150"
    assert float(_value(argv, "--max-budget-usd")) == 4.0
    assert _value(argv, "--model") == STUDY["worker"]["model"]
    assert _value(argv, "--permission-mode") == "bypassPermissions"
    assert _value(argv, "--permission-prompts") == STUDY["cli"]["permission_prompts"] == "none"
    assert _value(argv, "--setting-sources") == ""
    assert ("--bare" in argv) == bool(STUDY["cli"]["bare"])
    assert "--resume" not in argv
    # The prompt goes on stdin: no word of it on the command line.
    assert spec.prompt == STUDY["worker"]["user_prompt"]
    assert not any("BRIEF.md" in a for a in argv)


@pytest.mark.parametrize("arm_id", list(ARMS))
def test_settings_deny_exactly_the_denied_families(arm_id, tmp_path):
    arm = ARMS[arm_id]
    spec = _spec(arm_id, tmp_path, **UNISOLATED)
    # The denied families, and the CLI's own config folder (the session store) for its file tools, whatever the arm.
    store = f"/{tmp_path.resolve()}/runs/r1/agent/claude-config/**"
    assert spec.settings["permissions"]["deny"] == [f"Bash({f}:*)" for f in arm.denied_families] + [
        f"{tool}({store})" for tool in ("Edit", "Write", "NotebookEdit")
    ]
    dirs = launch.materialize(spec, tmp_path / "runs" / "r1")
    assert json.loads(dirs.settings.read_text()) == spec.settings
    assert _value(spec.argv, "--settings") == str(dirs.settings)


@pytest.mark.parametrize("arm_id", list(ARMS))
def test_environment_is_fresh_and_carries_no_secret_of_the_operator(arm_id, tmp_path, monkeypatch):
    arm = ARMS[arm_id]
    for k, v in {
        "ANTHROPIC_API_KEY": "sk-ant-operator",
        "AWS_SECRET_ACCESS_KEY": "x",
        "HTTPS_PROXY": "http://corp:3128",
    }.items():
        monkeypatch.setenv(k, v)
    spec = _spec(arm_id, tmp_path, **UNISOLATED, is_root=True)
    env = spec.env
    run = (tmp_path / "runs" / "r1").resolve()
    # The key is the model proxy's per-run token; nothing of the operator's environment passes.
    assert env["ANTHROPIC_API_KEY"] == TOKEN and env["ANTHROPIC_BASE_URL"] == ENDPOINT.base_url
    assert (
        "sk-ant-operator" not in json.dumps(env)
        and "AWS_SECRET_ACCESS_KEY" not in env
        and "corp" not in json.dumps(env)
    )
    assert Path(env["CLAUDE_CONFIG_DIR"]).is_relative_to(run) and Path(env["HOME"]).is_relative_to(run)
    # The CLI's config folder and scratch home lie outside the workspace.
    assert not Path(env["CLAUDE_CONFIG_DIR"]).is_relative_to(spec.cwd) and not Path(env["HOME"]).is_relative_to(
        spec.cwd
    )
    assert env["IS_SANDBOX"] == "1"
    # the output bound is the protocol's, the same for every arm, whatever the extra environment says.
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == str(protocol.study()["cli"]["max_output_tokens"]) == "32000"
    assert env["DISABLE_TELEMETRY"] == "1" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    path = env["PATH"].split(":")
    assert "/root/.pyenv/shims" not in path
    if arm.feature("python_env"):
        assert path[0] == str(tmp_path / "worker-env" / "bin")
    else:
        assert not any("worker-env" in p for p in path)
    assert "IS_SANDBOX" not in _spec(arm_id, tmp_path, **UNISOLATED, is_root=False).env
    assert spec.to_dict()["env"]["ANTHROPIC_API_KEY"] == "<set>"
    assert spec.enforcement == launch.UNISOLATED and any("UNISOLATED" in n for n in spec.notes)


@pytest.mark.parametrize("arm_id", list(ARMS))
def test_masked_programs_follow_the_denied_families(arm_id, tmp_path):
    arm = ARMS[arm_id]
    spec = _spec(arm_id, tmp_path, **UNISOLATED)
    assert set(spec.masked_programs) == set(arm.denied_families)
    path_dirs = spec.env["PATH"].split(":")
    for family, hits in spec.masked_programs.items():
        assert hits == sandbox.program_paths(family, path_dirs)
        if shutil.which(family, path=spec.env["PATH"]):
            assert hits, f"{family} is on PATH but not masked"


@pytest.mark.usefixtures("bwrap")
@pytest.mark.parametrize("arm_id", list(ARMS))
def test_the_sandbox_is_an_allow_list(arm_id, tmp_path):
    arm = ARMS[arm_id]
    spec = _spec(arm_id, tmp_path)
    plan = spec.plan
    prefix = spec.sandbox_prefix
    assert prefix[0].endswith("bwrap") and "--unshare-net" in prefix and "--die-with-parent" in prefix
    assert "--dev-bind" not in prefix and ["--ro-bind", "/", "/"] != prefix[1:4]
    run = (tmp_path / "runs" / "r1").resolve()
    # Read-write: the workspace and the agent's scratch folders, nothing else; the CLI's config at the sandbox's own
    # place.
    assert set(plan.rw_binds) == {str(run / "workspace"), str(run / "agent" / "home")}
    assert plan.rw_mapped == ((str(run / "agent" / "claude-config"), launch.INSIDE_CONFIG),)
    assert spec.env["CLAUDE_CONFIG_DIR"] == launch.INSIDE_CONFIG and spec.env[launch.RUN_MARK_VAR] == str(
        run / "agent" / "claude-config"
    )
    assert spec.env["TMPDIR"] == "/tmp" and prefix[prefix.index("/tmp") - 1] == "--tmpfs"  # a private /tmp per session
    # Nothing of the checkout but the CLI's own folder (here the test double's) and the settings file.
    inside_repo = [p for p in plan.ro_binds if Path(p).is_relative_to(paths.ROOT)]
    assert inside_repo == [str(FAKE_CLI.parent.resolve())]
    assert not any(Path(p).is_relative_to(Path.home()) and p != str(Path.home()) for p in plan.rw_binds)
    # Absent install trees for features the arm lacks; present ones for those it has.
    for feature, trees in sandbox.FEATURE_TREES.items():
        for t in trees:
            if Path(t).is_dir():
                assert (t in plan.absent) == (not arm.feature(feature)), (feature, t)
    # Each denied program's paths get its own family's stub, from a folder the sandbox never mounts.
    expected = {sandbox.canonical(p) for hits in spec.masked_programs.values() for p in hits}
    assert set(plan.masked) == expected
    for _dst, src in plan.stubs:
        assert Path(src).parent == run / "agent" / "stubs"
    assert not any(Path(p).is_relative_to(run / "agent" / "stubs") for p in [*plan.ro_binds, *plan.rw_binds])
    assert spec.command[len(prefix) :] == spec.argv and spec.enforcement == "bubblewrap"


def test_resume_launch_names_the_session_and_the_remaining_budget(tmp_path):
    spec = _spec("A4", tmp_path, **UNISOLATED, resume_session_id="abc-123")
    spec2 = launch.build_launch(
        ARMS["A4"],
        STUDY,
        claude_bin=FAKE_CLI,
        workspace=tmp_path / "runs" / "r1" / "workspace",
        run_dir=tmp_path / "runs" / "r1",
        budget_usd=1.2345,
        model_endpoint=ENDPOINT,
        **UNISOLATED,
        resume_session_id="abc-123",
        worker_env=tmp_path / "worker-env",
    )
    assert _value(spec.argv, "--resume") == "abc-123"
    assert _value(spec2.argv, "--max-budget-usd") == "1.2345"
    # The same config folder as the first session: the resume finds the session there.
    assert spec.env["CLAUDE_CONFIG_DIR"] == _spec("A4", tmp_path, **UNISOLATED).env["CLAUDE_CONFIG_DIR"]


def _in_sandbox(spec: launch.LaunchSpec, run_dir: Path, script: str) -> subprocess.CompletedProcess:
    launch.materialize(spec, run_dir)
    return subprocess.run(
        [*spec.sandbox_prefix, "/bin/bash", "-c", script],
        env=spec.env,
        cwd=spec.cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.usefixtures("bwrap")
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_denied_programs_meet_their_stub_however_they_are_called(tmp_path):
    run = tmp_path / "runs" / "r1"
    spec = _spec("A1", tmp_path)
    script = (
        "curl --version; echo rc=$?; "
        "bash -c 'curl --version'; echo rc=$?; "
        'eval "$(echo curl) --version"; echo rc=$?; '
        'python3 -c "import subprocess,sys; '
        "sys.exit(subprocess.run(['/usr/bin/curl','--version']).returncode)\"; echo rc=$?; "
        "cp /usr/bin/curl ./c && ./c --version; echo rc=$?; rm -f ./c; "
        f"ls {paths.PROTOCOL_DIR} 2>/dev/null | wc -l"
    )
    out = _in_sandbox(spec, run, script)
    lines = out.stdout.split()
    assert [x for x in lines if x.startswith("rc=")] == ["rc=126"] * 5, out.stdout + out.stderr
    # The stub names its family whatever it is called by (a copy named ./c included).
    assert out.stderr.count(f"curl: not available in this environment ({sandbox.STUB_MARKER})") == 5
    # The repository (oracles, rubrics, solvers) does not exist inside.
    assert lines[-1] == "0"


@pytest.mark.usefixtures("bwrap")
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_an_arm_that_denies_nothing_runs_the_same_program(tmp_path):
    spec = _spec("A3", tmp_path)
    out = _in_sandbox(spec, tmp_path / "runs" / "r1", "curl --version >/dev/null; echo rc=$?; pwd")
    assert "rc=0" in out.stdout
    assert out.stdout.split()[-1] == str(spec.cwd)


def test_macos_profile_carries_the_same_allow_list(tmp_path):
    bridges = [sandbox.Bridge("model", "/private/tmp/pilot-run-x/model.sock", 2080, 51234)]
    plan = sandbox.make_plan(
        features={"libreoffice": False, "chromium": False},
        extra_ro=[tmp_path / "cli"],
        rw=[tmp_path / "ws"],
        masked={"curl": ["/usr/bin/curl"]},
        stub_dir=tmp_path / "stubs",
        bridges=bridges,
    )
    profile = sandbox.macos_profile(plan)
    lines = profile.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"] and "(allow default)" not in profile
    # Reads only in allowed trees, writes only in the read-write ones.
    assert f'(allow file-read* (subpath "{(tmp_path / "cli").resolve()}"))' in lines
    assert f'(allow file-read* file-write* (subpath "{(tmp_path / "ws").resolve()}"))' in lines
    assert not any("file-write*" in ln and "/usr" in ln for ln in lines)
    assert not any(str(paths.ROOT) in ln for ln in lines)
    # Network: the bridged socket and the proxy's loopback port only; no other remote.
    net = [ln for ln in lines if "network" in ln]
    assert net == [
        '(allow network-outbound (remote unix-socket (path-literal "/private/tmp/pilot-run-x/model.sock")))',
        '(allow network-outbound (remote ip "localhost:51234"))',
    ]
    # Denials come last (SBPL: the last match wins): absent trees and masked programs.
    assert lines[-1] == '(deny process-exec (literal "/usr/bin/curl"))'
    for t in plan.absent:
        assert f'(deny file-read* process-exec (subpath "{t}"))' in lines


def test_a_host_that_cannot_isolate_is_refused_with_what_to_install(monkeypatch):
    monkeypatch.setattr(
        sandbox,
        "isolation_problems",
        lambda: ("bubblewrap (bwrap) is not installed: run `tools/ensure-system-packages.sh sandbox`",),
    )
    with pytest.raises(
        sandbox.IsolationUnavailable, match="bwrap.*ensure-system-packages.sh sandbox.*--allow-unisolated"
    ):
        sandbox.require_isolation()
