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
(``socat``) started and waited for, confined as a real session is: the
session's bounded disk made (a size-limited tmpfs in a namespace of the
harness's own) and the run's folders copied onto it, the attempt's control
group, the binds staged for and the launch dropped to a dedicated worker
uid when run as root, and after it the take-back (the folders copied back
by descriptor, the disk let go). The overhead is the difference of the
medians (target: under 0.5 s per attempt); the disk's own share (made,
copied in, taken back, without the launch) is printed beside it.

Third part: the CLI's confined helpers (git, pdftoppm, pdfinfo on the CLI's
PATH, :func:`pilot.agents.shell_scope.helper_text`), which the CLI runs at
start (git) and on a PDF read. Reference, in the same process: the real
program (``git --version``, ``pdfinfo -v``) started directly; measured: the
same call through the wrapper as the CLI makes it (a Landlock domain below
the caller, the fixed environment), the difference of the medians per call.

    .venv/bin/python benchmarks/bench_runner.py [--part attempt|sandbox|helpers|all] [--repeats 3] [--arms A0 A1 A3]
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


def session_round(spec, lease, limits, folders: list, mount_point: Path, name: str, launch_it: bool) -> float:
    """One session's confinement, timed: the bounded disk made and filled, the launch (or none), the take-back."""
    import subprocess

    from pilot.agents import bounded_disk, bounds, claude_code, takeback

    owner = (lease.identity.uid, lease.identity.gid) if lease.identity.switch else None
    copy_limits = takeback.CopyBounds(limits.workspace_bytes, bounded_disk.MAX_ENTRIES)
    t0 = time.perf_counter()
    cgroup = bounds.AttemptCgroup.create(f"bench-{name}-{os.getpid()}", limits) if launch_it else None
    disk = bounded_disk.SessionDisk.create(mount_point, limits.workspace_bytes)
    try:
        takeback.copy_folders(folders, disk.root_fd, copy_limits, to_disk=True, owner=owner)
        if launch_it:
            conf = claude_code.Confinement(lease.identity, limits, tuple(p for p, _ in folders), cgroup, disk)
            cmd, stage = conf.command(spec)
            out = subprocess.run(
                cmd,
                env=spec.env,
                cwd=spec.cwd,
                capture_output=True,
                text=True,
                timeout=120,
                preexec_fn=claude_code._child_setup(conf, stage, None),
            )
            if out.returncode != 0:
                raise RuntimeError(f"the sandboxed launch exited {out.returncode}: {out.stderr[-500:]}")
        takeback.copy_folders(folders, disk.root_fd, copy_limits, to_disk=False)
    finally:
        disk.close()
        if cgroup is not None:
            cgroup.remove()
    return time.perf_counter() - t0


def bench_sandbox(arms: list[str], repeats: int) -> None:
    """Sandbox start-up per attempt against a bare launch of the pinned CLI, per arm."""
    import sys

    from pilot.agents import bounded_disk, bounds, claude_code, launch, network, worker_user

    cli = claude_code.find_cli()
    study = protocol.study()
    lease = worker_user.acquire(study)
    limits = bounds.Limits.from_study(study)
    who = f"{lease.identity.name} (uid {lease.identity.uid}{', dedicated slot' if lease.identity.switch else ''})"
    print(f"confined as {who}; bounded disk: {bounded_disk.KIND} in a {bounded_disk.namespace_kind()} namespace")
    print(f"sandbox start-up per session: CLI {cli.name} --version, bare vs in the run's sandbox (median of {repeats})")
    print(f"{'arm':4} {'bare s':>8} {'sandboxed s':>12} {'overhead s':>11} {'ratio':>6} {'disk s':>7}  target < 0.5 s")
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        services = [
            network.RefusingProxy(root / "model.sock", root / "m.log"),
            network.RefusingProxy(root / "refusal.sock", root / "r.log"),
        ]
        if lease.identity.switch:
            for sock in (root / "model.sock", root / "refusal.sock"):
                os.chown(sock, lease.identity.uid, lease.identity.gid)
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
                spec.argv = [str(cli), "--version"]
                dirs = launch.materialize(spec, run)
                folders = list(zip((run / "workspace", dirs.home, dirs.config), bounded_disk.HOLDS, strict=True))
                mount_point = root / f"disk-{arm_id}"
                mount_point.mkdir()
                args = (spec, lease, limits, folders, mount_point, arm_id)
                _median_run(spec.argv, spec.env, spec.cwd, 1)  # warm the file cache
                bare = _median_run(spec.argv, spec.env, spec.cwd, repeats)
                session_round(*args, True)  # warm the sandbox's own first launch
                boxed = statistics.median(session_round(*args, True) for _ in range(repeats))
                disk_only = statistics.median(session_round(*args, False) for _ in range(repeats))
                print(
                    f"{arm_id:4} {bare:8.3f} {boxed:12.3f} {boxed - bare:11.3f} {boxed / bare:6.2f} {disk_only:7.3f}  "
                    f"{'ok' if boxed - bare < 0.5 else 'OVER'}"
                )
        finally:
            for svc in services:
                svc.close()
            lease.release()


def bench_helpers(repeats: int) -> None:
    """One call of each confined helper against the same program started directly (median of ``repeats``)."""
    import shutil
    import sys

    from pilot.agents import launch

    study = protocol.study()
    print(f"CLI helpers: one call through the confined wrapper vs the program itself (median of {repeats})")
    print(f"{'helper':9} {'direct s':>9} {'wrapped s':>10} {'overhead s':>11} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="bench-helpers-") as tmp:
        run = Path(tmp) / "A1"
        (run / "workspace").mkdir(parents=True)
        spec = launch.build_launch(
            protocol.arms()["A1"],
            study,
            claude_bin=sys.executable,
            workspace=run / "workspace",
            run_dir=run,
            budget_usd=1.0,
            model_endpoint=launch.ModelEndpoint("bench-token", Path(tmp) / "model.sock", "http://127.0.0.1:9"),
            worker_env=Path(sys.prefix),
        )
        dirs = launch.materialize(spec, run)
        env = {"PATH": "/usr/bin:/bin", launch.HELPER_MARK_VAR: launch.INSIDE_CLI}
        for name, args in (("git", ["--version"]), ("pdfinfo", ["-v"])):
            real = shutil.which(name)
            wrapper = dirs.cli_root / "bin" / name
            if real is None or not wrapper.exists():
                print(f"{name:9} not installed on this host")
                continue
            _median_run([real, *args], env, run, 1)
            direct = _median_run([real, *args], env, run, repeats)
            wrapped = _median_run([str(wrapper), *args], env, run, repeats)
            print(f"{name:9} {direct:9.4f} {wrapped:10.4f} {wrapped - direct:11.4f} {wrapped / direct:6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["attempt", "sandbox", "helpers", "all"], default="all")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--arms", nargs="+", default=["A0", "A1", "A2", "A3", "A4"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenarios", nargs="*", default=None)
    args = ap.parse_args()
    if args.part in ("sandbox", "all"):
        bench_sandbox(args.arms, max(args.repeats, 5))
    if args.part in ("helpers", "all"):
        bench_helpers(max(args.repeats, 20))
    if args.part in ("sandbox", "helpers"):
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
