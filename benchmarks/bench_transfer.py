"""Cost of returning an attempt's files from a dask worker, against copying its folder on a shared disk.

Reference run (named ``copytree``): ``shutil.copytree`` of the whole attempt
folder, what a study whose workers share its disk would spend at most.
Measured run (``transfer``): :func:`pilot.executors.transfer.pack_attempt`
on the worker's side, then :func:`~pilot.executors.transfer.unpack_attempt`
on the host's (every kept file written and checked against the manifest),
with the study's package limit. Second, the transfer's share of one
simulated attempt's wall time: the attempt as the local executor runs it
(named reference), then its folder packed, unpacked and verified. The attempt is a copy of the largest
rehearsal attempt under ``analysis/data/rehearsal/workspaces/`` when there
is one, else a typical one built here (office files, CSVs, a transcript of
about 1 MB, proxy records). Medians over the repeats, in the same process.

    .venv/bin/python benchmarks/bench_transfer.py [--repeats 5] [--built]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pilot import paths, protocol
from pilot.executors.transfer import pack_attempt, unpack_attempt

REHEARSAL = paths.DATA_DIR / "rehearsal" / "workspaces"


def _largest_rehearsal_attempt() -> Path | None:
    found = [d for d in REHEARSAL.glob("*/attempt-*") if d.is_dir() and (d / "transcript.jsonl").is_file()]
    return max(
        found,
        key=lambda d: sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and not f.is_symlink()),
        default=None,
    )


def _built_attempt(d: Path) -> None:
    rnd = random.Random(20260415)
    files = {
        "run_record.json": 9_000,
        "evaluation.json": 5_000,
        "attempt_outcome.json": 9_000,
        "workspace_manifest.json": 1_000,
        "record/launch-0.json": 11_000,
        "record/proxy/p/proxy_usage.jsonl": 6_000,
        "record/proxy/p/proxy_exchanges.jsonl": 300_000,
        "portal/portal_access.jsonl": 2_000,
        "workspace/inputs/ledger.xlsx": 40_000,
        "workspace/inputs/statement.csv": 30_000,
        "workspace/outputs/memo.docx": 40_000,
        "workspace/outputs/reconciliation.xlsx": 60_000,
        "workspace/outputs/issues.csv": 20_000,
        "workspace/outputs/completion_record.json": 300,
        "agent/claude-config/projects/p/session.jsonl": 150_000,
        "agent/home/.cache/fontconfig/cache-8": 140_000,
    }
    for rel, size in files.items():
        f = d / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        # Office files are zip archives (incompressible); the rest is text.
        f.write_bytes(
            os.urandom(size)
            if rel.endswith((".docx", ".xlsx", "cache-8"))
            else "".join(rnd.choice('abcdefghij ,.:{}"0123456789\n') for _ in range(size)).encode()
        )
    line = '{"type":"assistant","message":{"content":[{"type":"text","text":"%s"}]}}\n'
    with (d / "transcript.jsonl").open("w") as fh:
        while fh.tell() < 1_000_000:
            fh.write(
                line
                % " ".join(rnd.choice(["the", "ledger", "total", "row", "check", "12.50", "memo"]) for _ in range(40))
            )


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--built", action="store_true", help="the built attempt even when a rehearsal attempt is present"
    )
    args = parser.parse_args(argv)
    limit = protocol.study().transfer_limit_bytes
    with tempfile.TemporaryDirectory(prefix="bench-transfer-") as tmp:
        src = Path(tmp) / "worker" / "attempt-1"
        real = None if args.built else _largest_rehearsal_attempt()
        if real is not None:
            shutil.copytree(real, src, symlinks=True)
            where = f"a copy of {paths.shown(real)}"
        else:
            _built_attempt(src)
            where = "a built attempt"
        runs = iter(range(10**6))

        def copy() -> None:
            shutil.copytree(src, Path(tmp) / "copies" / str(next(runs)), symlinks=True)

        sizes: dict[str, int] = {}

        def move() -> None:
            pkg = pack_attempt(src, limit_bytes=limit)
            m = unpack_attempt(pkg, Path(tmp) / "host" / str(next(runs)))
            sizes.update(package=len(pkg.data), files=sum(e["size"] for e in m["files"].values()), n=len(m["files"]))

        ref = _median(copy, args.repeats)
        moved = _median(move, args.repeats)
        total = sum(f.stat().st_size for f in src.rglob("*") if f.is_file() and not f.is_symlink())
    print(
        f"{where}: {total / 1e6:.2f} MB in the folder, {sizes['n']} kept files of {sizes['files'] / 1e6:.2f} MB, "
        f"package {sizes['package'] / 1e6:.2f} MB; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"{'run':<30} {'s':>9} {'ratio':>7}")
    print(f"{'copytree (reference)':<30} {ref:>9.4f} {1.0:>7.2f}")
    print(f"{'pack + unpack + verify':<30} {moved:>9.4f} {moved / ref:>7.2f}")
    attempt_s, transfer_s = _simulated_attempt(limit)
    print()
    print("one simulated attempt (LEGAL-01, A1) as the local executor runs it, then its files sent home:")
    print(f"{'attempt, local executor (reference)':<40} {attempt_s:>9.4f} {1.0:>7.2f}")
    print(
        f"{'attempt + pack + unpack + verify':<40} {attempt_s + transfer_s:>9.4f} "
        f"{(attempt_s + transfer_s) / attempt_s:>7.3f}"
    )
    return 0


def _simulated_attempt(limit: int) -> tuple[float, float]:
    """Seconds of one simulated attempt (pilot.executors.base.execute_attempt, as the local executor calls it) and of
    sending its folder home, measured on the same attempt in this process."""
    from pilot.attempt import CellSpec
    from pilot.executors.base import execute_attempt

    study = protocol.study()
    caps = study.caps_for("LEGAL-01")
    cell = CellSpec(
        "LEGAL-01.A1.r1",
        "bench",
        "pilot",
        "LEGAL-01",
        "A1",
        1,
        str(study["worker"]["model"]),
        0,
        7,
        caps.usd,
        caps.wall_s,
        caps.usd,
    )
    with tempfile.TemporaryDirectory(prefix="bench-attempt-") as tmp:
        folder = Path(tmp) / "LEGAL-01.A1.r1" / "attempt-1"
        t0 = time.perf_counter()
        execute_attempt(None, cell, str(folder), "bench-node", "simulated")
        attempt_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        unpack_attempt(pack_attempt(folder, limit_bytes=limit), Path(tmp) / "host" / "attempt-1")
        return attempt_s, time.perf_counter() - t0


if __name__ == "__main__":
    raise SystemExit(main())
