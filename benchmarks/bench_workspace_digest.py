"""Cost of the workspace digest each run records: against the oracle's evaluation, and against the path walk it
replaced.

Three measurements, medians over the repeats, in the same process:

1. ``evaluation`` (reference) against ``digest``: ``pilot.oracles.evaluate``
   of each scenario's gold workspace with a warm recalculator (the
   workbooks already recalculated once, so LibreOffice's start is not
   counted) against the manifest of every entry of the same workspace and
   its SHA-256 (:func:`pilot.runner.workspace_manifest`,
   :func:`pilot.runner.manifest_digest`), which the runner takes once per
   run and ``pilot study reevaluate`` twice per re-evaluated run.
2. ``path walk`` (reference) against ``digest`` on the same normal
   workspaces: the walk the digest used before the bounded reader
   (``os.scandir`` on paths, every regular file hashed whole through
   ``open``), kept below as :func:`path_walk_manifest`, against the walk
   by descriptor through :mod:`pilot.worker_files`.
3. The same two on a gold workspace holding ``--sparse`` sparse files of
   2 GiB each (zero blocks: nothing on disk): the path walk reads them
   whole; the bounded walk records them by size. The bytes each read are
   printed beside the times (the path walk's from the files' sizes).

    .venv/bin/python benchmarks/bench_workspace_digest.py [--repeats 5] [--sparse 1]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import stat
import statistics
import tempfile
import time
from pathlib import Path

from pilot import runner, worker_files
from pilot.oracles import Recalculator, evaluate
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario

SPARSE_BYTES = 2 * 1024**3


def path_walk_manifest(root: Path, max_depth: int = 64, max_entries: int = 100_000) -> tuple[dict[str, str], int]:
    """The manifest as the path walk took it before the bounded reader (the reference), and the bytes it read."""
    out: dict[str, str] = {}
    read = 0
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel_dir, depth = stack.pop()
        here = root / rel_dir if rel_dir else root
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            out[rel_dir + "/"] = "unreadable:" + (exc.strerror or type(exc).__name__)
            continue
        if rel_dir and not entries:
            out[rel_dir + "/"] = "<dir>"
        subdirs = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if len(out) >= max_entries:
                out[rel] = "too-many"
                stack.clear()
                break
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "symlink:" + hashlib.sha256(os.fsencode(os.readlink(entry.path))).hexdigest()
            elif stat.S_ISDIR(st.st_mode):
                if depth + 1 >= max_depth:
                    out[rel + "/"] = "too-deep"
                else:
                    subdirs.append(rel)
            elif stat.S_ISREG(st.st_mode):
                with open(entry.path, "rb") as fh:
                    out[rel] = hashlib.file_digest(fh, "sha256").hexdigest()
                read += st.st_size
            else:
                out[rel] = "special:" + stat.filemode(st.st_mode)
        stack.extend((d, depth + 1) for d in reversed(subdirs))
    return out, read


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _digest(ws: Path) -> str:
    return runner.manifest_digest(runner.workspace_manifest(ws))


def _bounded_bytes(ws: Path) -> int:
    start = worker_files.bytes_read()
    _digest(ws)
    return worker_files.bytes_read() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sparse", type=int, default=1, help="sparse 2 GiB files in the hostile workspace")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-digest-") as tmp, Recalculator(Path(tmp) / "recalc") as recalc:
        for sid in list_scenarios():
            sc = load_scenario(sid)
            ws = build_gold_workspace(sc, Path(tmp) / sid)
            evaluate(sc, ws, recalculator=recalc)  # warm: workbooks recalculated and cached by content
            ref = _median(functools.partial(evaluate, sc, ws, recalculator=recalc), args.repeats)
            dig = _median(functools.partial(_digest, ws), args.repeats)
            old = _median(functools.partial(path_walk_manifest, ws), args.repeats)
            # The bounded walk records exactly what the path walk recorded on a normal workspace.
            assert path_walk_manifest(ws)[0] == runner.workspace_manifest(ws), sid
            rows.append((sid, len(runner.workspace_manifest(ws)), ref, dig, old))
        sid0 = rows[0][0]
        hostile = build_gold_workspace(load_scenario(sid0), Path(tmp) / "hostile")
        for i in range(args.sparse):
            with open(hostile / "outputs" / f"giant-{i}.bin", "wb") as fh:
                fh.truncate(SPARSE_BYTES)
        new_s = _median(lambda: _digest(hostile), args.repeats)
        new_read = _bounded_bytes(hostile)
        t0 = time.perf_counter()
        _, old_read = path_walk_manifest(hostile)  # once: it reads every giant whole
        old_s = time.perf_counter() - t0

    print(
        f"{'scenario':<10} {'entries':>7} {'evaluation ms':>14} {'digest ms':>10} {'dig/eval':>9} "
        f"{'path walk ms':>13} {'digest/path walk':>17}"
    )
    for sid, n, ref, dig, old in rows:
        print(
            f"{sid:<10} {n:>7} {ref * 1000:>14.1f} {dig * 1000:>10.2f} {dig / ref:>9.4f} {old * 1000:>13.2f} "
            f"{dig / old:>17.3f}"
        )
    ref_all, dig_all, old_all = (sum(r[k] for r in rows) for k in (2, 3, 4))
    print(
        f"all scenarios: digest / evaluation = {dig_all / ref_all:.4f} ({dig_all * 1000:.1f} ms against "
        f"{ref_all * 1000:.1f} ms)"
    )
    print(
        f"all scenarios: digest (bounded walk) / path walk = {dig_all / old_all:.3f} "
        f"({dig_all * 1000:.1f} ms against {old_all * 1000:.1f} ms)"
    )
    print(
        f"{sid0} gold workspace with {args.sparse} sparse file(s) of {SPARSE_BYTES} bytes: "
        f"digest {new_s * 1000:.1f} ms, {new_read} bytes read; path walk {old_s * 1000:.1f} ms, {old_read} bytes read; "
        f"path walk / digest = {old_s / new_s:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
