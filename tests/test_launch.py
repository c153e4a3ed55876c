"""Every arm's launch (argv, settings, environment, masked programs) follows from protocol/arms."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pilot import paths, protocol
from pilot.agents import launch, sandbox
from worker_env_support import make_worker_env

ARMS = protocol.arms()
STUDY = protocol.study()
FAKE_CLI = paths.ROOT / "tests" / "fake_claude" / "claude"
needs_bwrap = pytest.mark.skipif(sandbox.bwrap_available() is None, reason="bubblewrap not installed")


def _spec(arm_id: str, tmp: Path, **kw) -> launch.LaunchSpec:
    run = tmp / "runs" / "r1"
    (run / "workspace").mkdir(parents=True, exist_ok=True)
    kw.setdefault("worker_env", make_worker_env(tmp) if not (tmp / "worker-env").exists() else tmp / "worker-env")
    return launch.build_launch(ARMS[arm_id], STUDY, claude_bin=FAKE_CLI, workspace=run / "workspace", run_dir=run,
                               budget_usd=4.0, **kw)


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("arm_id", list(ARMS))
def test_argv_is_derived_from_the_arm_and_the_study(arm_id, tmp_path):
    arm = ARMS[arm_id]
    spec = _spec(arm_id, tmp_path, use_sandbox=False, environ={})
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
    spec = _spec(arm_id, tmp_path, use_sandbox=False, environ={})
    assert spec.settings["permissions"]["deny"] == [f"Bash({f}:*)" for f in arm.denied_families]
    dirs = launch.materialize(spec, tmp_path / "runs" / "r1")
    assert json.loads(dirs.settings.read_text()) == spec.settings
    assert _value(spec.argv, "--settings") == str(dirs.settings)


@pytest.mark.parametrize("arm_id", list(ARMS))
def test_environment_is_fresh_and_passes_only_the_api_variables(arm_id, tmp_path):
    arm = ARMS[arm_id]
    operator = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "AWS_SECRET_ACCESS_KEY": "x",
                "PATH": "/root/.pyenv/shims:/usr/bin", "HOME": "/root"}
    spec = _spec(arm_id, tmp_path, use_sandbox=False, environ=operator, is_root=True)
    env = spec.env
    run = (tmp_path / "runs" / "r1").resolve()
    assert env["ANTHROPIC_API_KEY"] == "sk-test" and env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert Path(env["CLAUDE_CONFIG_DIR"]).is_relative_to(run) and Path(env["HOME"]).is_relative_to(run)
    assert env["IS_SANDBOX"] == "1"
    assert env["DISABLE_TELEMETRY"] == "1" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    path = env["PATH"].split(":")
    assert "/root/.pyenv/shims" not in path
    if arm.feature("python_env"):
        assert path[0] == str(tmp_path / "worker-env" / "bin")
    else:
        assert not any("worker-env" in p for p in path)
    assert "IS_SANDBOX" not in _spec(arm_id, tmp_path, use_sandbox=False, environ=operator, is_root=False).env
    # The key never reaches the recorded launch.
    assert spec.to_dict()["env"]["ANTHROPIC_API_KEY"] == "<set>"


@pytest.mark.parametrize("arm_id", list(ARMS))
def test_masked_programs_follow_the_denied_families_and_absent_features(arm_id, tmp_path):
    arm = ARMS[arm_id]
    spec = _spec(arm_id, tmp_path, use_sandbox=False, environ={})
    assert set(spec.masked_programs) == set(arm.denied_families)
    path_dirs = spec.env["PATH"].split(":")
    for family, hits in spec.masked_programs.items():
        assert hits == sandbox.program_paths(family, path_dirs)
        if shutil.which(family, path=spec.env["PATH"]):
            assert hits, f"{family} is on PATH but not masked"
    if arm.has_shell and not arm.feature("chromium") and shutil.which("chromium"):
        assert "chromium" in spec.absent_programs
    if arm.feature("libreoffice") or not arm.has_shell:
        assert "soffice" not in spec.absent_programs
    if arm.feature("chromium"):
        assert "chromium" not in spec.absent_programs


@needs_bwrap
@pytest.mark.parametrize("arm_id", list(ARMS))
def test_sandbox_plan_binds_the_stub_over_every_masked_path(arm_id, tmp_path):
    spec = _spec(arm_id, tmp_path, environ={})
    assert spec.sandbox_prefix[0].endswith("bwrap")
    pairs = {(spec.sandbox_prefix[i + 1], spec.sandbox_prefix[i + 2]) for i, a in enumerate(spec.sandbox_prefix) if a == "--ro-bind"}
    stub = spec.plan.stub
    expected = {p for hits in spec.masked_programs.values() for p in hits} | {p for hits in spec.absent_programs.values() for p in hits}
    masked = {dst for src, dst in pairs if src == stub}
    assert {str(Path(p).parent.resolve() / Path(p).name) for p in expected} == masked
    assert str(paths.ROOT) in spec.plan.hidden
    assert spec.command[len(spec.sandbox_prefix):] == spec.argv


def test_resume_launch_names_the_session_and_the_remaining_budget(tmp_path):
    spec = _spec("A4", tmp_path, use_sandbox=False, environ={}, resume_session_id="abc-123")
    spec2 = launch.build_launch(ARMS["A4"], STUDY, claude_bin=FAKE_CLI, workspace=tmp_path / "runs" / "r1" / "workspace",
                                run_dir=tmp_path / "runs" / "r1", budget_usd=1.2345, use_sandbox=False, environ={},
                                resume_session_id="abc-123", worker_env=tmp_path / "worker-env")
    assert _value(spec.argv, "--resume") == "abc-123"
    assert _value(spec2.argv, "--max-budget-usd") == "1.2345"
    # The same config folder as the first session: the resume finds the session there.
    assert spec.env["CLAUDE_CONFIG_DIR"] == _spec("A4", tmp_path, use_sandbox=False, environ={}).env["CLAUDE_CONFIG_DIR"]


def _in_sandbox(spec: launch.LaunchSpec, run_dir: Path, script: str) -> subprocess.CompletedProcess:
    launch.materialize(spec, run_dir)
    return subprocess.run([*spec.sandbox_prefix, "/bin/bash", "-c", script], env=spec.env, cwd=spec.cwd,
                          capture_output=True, text=True, timeout=60)


@needs_bwrap
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_masking_stops_denied_programs_however_they_are_called(tmp_path):
    run = tmp_path / "runs" / "r1"
    spec = _spec("A1", tmp_path, environ={})
    script = (
        "curl --version; echo rc=$?; "
        "bash -c 'curl --version'; echo rc=$?; "
        "eval \"$(echo curl) --version\"; echo rc=$?; "
        "python3 -c \"import subprocess,sys; sys.exit(subprocess.run(['/usr/bin/curl','--version']).returncode)\"; echo rc=$?; "
        f"ls {paths.PROTOCOL_DIR} | wc -l"
    )
    out = _in_sandbox(spec, run, script)
    lines = out.stdout.split()
    assert [x for x in lines if x.startswith("rc=")] == ["rc=126"] * 4, out.stdout + out.stderr
    assert out.stderr.count(sandbox.STUB_MARKER) == 4
    # The repository (oracles, rubrics, solvers) is not visible from inside.
    assert lines[-1] == "0"


@needs_bwrap
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_an_arm_that_denies_nothing_runs_the_same_program(tmp_path):
    spec = _spec("A3", tmp_path, environ={})
    out = _in_sandbox(spec, tmp_path / "runs" / "r1", "curl --version >/dev/null; echo rc=$?; touch /tmp/x 2>/dev/null; pwd")
    assert "rc=0" in out.stdout
    assert out.stdout.split()[-1] == str(spec.cwd)


def test_macos_profile_denies_the_same_paths(tmp_path):
    spec = _spec("A1", tmp_path, use_sandbox=False, environ={})
    plan = sandbox.make_plan([p for h in spec.masked_programs.values() for p in h], hidden=[paths.ROOT], rebind_ro=[],
                             rebind_rw=[tmp_path], stub=tmp_path / "stub")
    profile = sandbox.macos_profile(plan)
    for p in plan.masked:
        assert f'(deny process-exec (literal "{p}"))' in profile
    assert f'(deny file-read* file-write* (subpath "{paths.ROOT}"))' in profile


def test_other_runs_are_hidden_in_the_scheduler_layout(tmp_path):
    run = tmp_path / "study" / "workspaces" / "run-0007" / "attempt-2"
    hidden = launch.default_hidden(run)
    assert run.parent.resolve() in hidden and (tmp_path / "study" / "workspaces").resolve() in hidden
    assert paths.ROOT in hidden and Path.home() in hidden
    assert (tmp_path / "study").resolve() not in hidden
