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

import os
import resource
import subprocess
import sys

import pandas as pd

EVERYTHING = ("import pandas, pilot.study, pilot.oracles.evaluate, pilot.judges.panel, pilot.portal.instance, "
              "pilot.cli.scenarios, pilot.cli.view, pilot.cli.run_one, pilot.stages, pilot.cli.protocol")
CASES = {
    "python -c pass (reference)": ["-c", "pass"],
    "pilot --help": ["-m", "pilot", "--help"],
    "pilot study --help": ["-m", "pilot", "study", "--help"],
    "import every command's stack": ["-c", EVERYTHING],
}


def cpu_s(args: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(n):
        for name, args in CASES.items():
            samples[name].append(cpu_s(args))
    ref = min(samples["python -c pass (reference)"])
    df = pd.DataFrame({
        "command": list(CASES),
        "cpu_s_min": [min(v) for v in samples.values()],
        "ratio_vs_bare_python": [min(v) / ref for v in samples.values()],
    })
    print(f"{n} starts each (minimum CPU time); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
