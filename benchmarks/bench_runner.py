"""Time of one SIMULATED attempt (workspace, agent, audit, evaluation), recalculation excluded.

Reference, in the same process on the same scenario: the scenario's reference
solver writing the gold deliverables once into a fresh folder
(``pilot.scenarios.solve``), the least work any attempt must do. The
measured run is a whole ``run_attempt`` on the simulated backend: reset and
lay out the workspace, the simulated session (solver, drawn defects,
synthetic event stream), the audit, the completion record, the oracle and the
input-hash check. LibreOffice recalculation is excluded by a warm-up attempt
with the same seed first: the oracle's recalculator caches workbooks by
content, so the timed repeats, which write the same bytes, reuse it. A4's
public self-check runs its own LibreOffice process when a workbook has no
cached values; A4 is therefore shown apart and not excluded.

Second part: the sandbox's start-up cost per attempt. Reference, in the same
process: a bare launch of the pinned CLI (``claude --version``, the
harness's own call). Measured: the same launch inside the run's sandbox as
``pilot.agents.launch`` builds it for each arm, with its socket bridges
(``socat``) started and waited for, confined as a real attempt is (the
attempt's control group, the binds staged for and the launch dropped to a
dedicated worker uid when run as root); the overhead is the difference of
the medians (target: under 0.5 s per attempt).

    .venv/bin/python benchmarks/bench_runner.py [--part attempt|sandbox|all] [--repeats 3] [--arms A0 A1 A3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from pilot import protocol
from pilot.runner import run_attempt
from pilot.scenarios import list_scenarios, load_scenario, solve


def time_solver(sid: str, root: Path, repeats: int) -> float:
    sc = load_scenario(sid)
    times = []
    for i in range(repeats + 1):
        out = root / f"gold-{sid}-{i}"
        t0 = time.perf_counter()
        solve(sid, sc.inputs_dir, out)
        if i:  # the first call imports the solver module
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_attempt(sid: str, arm: str, root: Path, repeats: int, seed: int) -> tuple[float, str]:
    run_attempt(sid, arm, backend="simulated", out_dir=root / f"warm-{sid}-{arm}", seed=seed)
    times = []
    status = ""
    for i in range(repeats):
        t0 = time.perf_counter()
        rec = run_attempt(sid, arm, backend="simulated", out_dir=root / f"run-{sid}-{arm}-{i}", seed=seed)
        times.append(time.perf_counter() - t0)
        status = f"{rec.status}, D={rec.D}"
    return statistics.median(times), status


def _median_run(argv: list[str], env: dict, cwd: Path, repeats: int, setup=None) -> float:
    import subprocess

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, preexec_fn=setup)
        times.append(time.perf_counter() - t0)
        if out.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {out.returncode}: {out.stderr[-500:]}")
    return statistics.median(times)


def bench_sandbox(arms: list[str], repeats: int) -> None:
    """Sandbox start-up per attempt against a bare launch of the pinned CLI, per arm."""
    import sys

    from pilot.agents import bounds, claude_code, launch, network, sandbox, worker_user

    cli = claude_code.find_cli()
    study = protocol.study()
    lease = worker_user.acquire(study)
    limits = bounds.Limits.from_study(study)
    print(
        f"confined as {lease.identity.name} (uid "
        f"{lease.identity.uid}{', dedicated slot' if lease.identity.switch else ''})"
    )
    print(
        f"sandbox start-up per attempt: CLI {cli.name} --version, bare vs inside the run's sandbox (median "
        f"of {repeats})"
    )
    print(f"{'arm':4} {'bare s':>8} {'sandboxed s':>12} {'overhead s':>11} {'ratio':>6}  target < 0.5 s")
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        services = [
            network.RefusingProxy(root / "model.sock", root / "m.log"),
            network.RefusingProxy(root / "refusal.sock", root / "r.log"),
        ]
        try:
            for arm_id in arms:
                arm = protocol.arms()[arm_id]
                run = root / arm_id
                (run / "workspace").mkdir(parents=True)
                spec = launch.build_launch(
                    arm,
                    study,
                    claude_bin=cli,
                    workspace=run / "workspace",
                    run_dir=run,
                    budget_usd=1.0,
                    model_endpoint=launch.ModelEndpoint("bench-token", root / "model.sock", "http://127.0.0.1:9"),
                    refusal_socket=root / "refusal.sock",
                    worker_env=Path(sys.prefix),
                )
                launch.materialize(spec, run)
                argv = [str(cli), "--version"]
                # The whole per-attempt confinement: the attempt's group, the staged binds, the limits, the worker's
                # uid.
                cgroup = bounds.AttemptCgroup.create(f"bench-{arm_id}", limits)
                conf = claude_code.Confinement(lease.identity, limits, (run / "workspace",), cgroup)
                cmd, stage = list(spec.command[: len(spec.sandbox_prefix)]) + argv, None
                if lease.identity.switch:
                    cmd, stage = sandbox.stage_binds(cmd)
                    for d in (run / "workspace", run / "agent" / "home", run / "agent" / "claude-config"):
                        worker_user.give_tree(d, lease.identity.uid, lease.identity.gid)
                    for sock in (root / "model.sock", root / "refusal.sock"):
                        os.chown(sock, lease.identity.uid, lease.identity.gid)
                setup = claude_code._child_setup(conf, stage, None)
                _median_run(argv, spec.env, spec.cwd, 1)  # warm the file cache
                bare = _median_run(argv, spec.env, spec.cwd, repeats)
                try:
                    boxed = _median_run(cmd, spec.env, spec.cwd, repeats, setup)
                finally:
                    if cgroup is not None:
                        cgroup.remove()
                print(
                    f"{arm_id:4} {bare:8.3f} {boxed:12.3f} {boxed - bare:11.3f} {boxed / bare:6.2f}  "
                    f"{'ok' if boxed - bare < 0.5 else 'OVER'}"
                )
        finally:
            for svc in services:
                svc.close()
            lease.release()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["attempt", "sandbox", "all"], default="all")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--arms", nargs="+", default=["A0", "A1", "A2", "A3", "A4"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenarios", nargs="*", default=None)
    args = ap.parse_args()
    if args.part in ("sandbox", "all"):
        bench_sandbox(args.arms, max(args.repeats, 5))
    if args.part == "sandbox":
        return
    print("SIMULATED agent: one attempt, evaluation included, LibreOffice recalculation excluded (cached)")
    print(f"{'scenario':10} {'arm':4} {'attempt s':>10} {'solver s':>9} {'ratio':>7}  outcome")
    with tempfile.TemporaryDirectory(prefix="bench-runner-") as tmp:
        root = Path(tmp)
        for sid in args.scenarios or list_scenarios():
            ref = time_solver(sid, root, args.repeats)
            for arm in args.arms:
                t, status = time_attempt(sid, arm, root, args.repeats, args.seed)
                note = "  (includes the self-check's own LibreOffice)" if arm == "A4" else ""
                print(f"{sid:10} {arm:4} {t:10.3f} {ref:9.3f} {t / ref:7.1f}  {status}{note}")


if __name__ == "__main__":
    main()
