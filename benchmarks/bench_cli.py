"""Start-up cost of the ``pilot`` command, against a bare interpreter and the full import of its modules.

Each command is started N times in fresh interpreters, alternating so that a
change of machine load hits all alike; the CPU time (user + system) of the
child is measured, which a shared machine's load disturbs far less than wall
time. References: ``python -c pass`` (the floor) and importing every command
module together with the stacks they use when they run (pandas, the oracle,
the judges, the portal), which is what every ``pilot`` start cost before the
command table let a command load its own module alone.

    .venv/bin/python benchmarks/bench_cli.py [N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
STUDY = "bench-cli-status"

EVERYTHING = (
    "import pandas, pilot.study, pilot.oracles.evaluate, pilot.judges.panel, pilot.portal.instance, "
    "pilot.cli.scenarios, pilot.cli.view, pilot.cli.run_one, pilot.stages, pilot.cli.protocol"
)
CASES = {
    "python -c pass (reference)": ["-c", "pass"],
    "pilot --help": ["-m", "pilot", "--help"],
    "pilot study --help": ["-m", "pilot", "study", "--help"],
    "pilot study status": ["-m", "pilot", "study", "status", STUDY],
    "import every command's stack": ["-c", EVERYTHING],
}


def cpu_s(args: list[str], env: dict[str, str] | None = None) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=5, help="starts of each command")
    parser.add_argument("--against", type=Path, help="another checkout whose package is timed on the same commands")
    opts = parser.parse_args()
    folder = ROOT / "analysis" / "data" / STUDY
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pilot", "study", "create", STUDY, "--scenarios", "ACC-01"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    other = None
    if opts.against is not None:
        other = {**os.environ, "PYTHONPATH": str(opts.against.resolve() / "src"), "PILOT_ROOT": str(ROOT)}
    try:
        samples: dict[str, list[float]] = {name: [] for name in CASES}
        against: dict[str, list[float]] = {name: [] for name, args in CASES.items() if args[:2] == ["-m", "pilot"]}
        for _ in range(opts.n):
            for name, args in CASES.items():
                samples[name].append(cpu_s(args))
                if other is not None and name in against:
                    against[name].append(cpu_s(args, other))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ref = min(samples["python -c pass (reference)"])
    df = pd.DataFrame(
        {
            "command": list(CASES),
            "cpu_s_min": [min(v) for v in samples.values()],
            "ratio_vs_bare_python": [min(v) / ref for v in samples.values()],
        }
    )
    if other is not None:
        df[f"cpu_s_min_{opts.against.name}"] = [min(against[c]) if c in against else float("nan") for c in CASES]
        df[f"ratio_vs_{opts.against.name}"] = df["cpu_s_min"] / df[f"cpu_s_min_{opts.against.name}"]
    print(f"{opts.n} starts each (minimum CPU time); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))


if __name__ == "__main__":
    main()
