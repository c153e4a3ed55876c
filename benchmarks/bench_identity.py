"""Cost of the protocol identity a worker checks at every dispatch, against reading the same files.

Reference run (named ``read``): opening and reading the bytes of every file
the identity names, the least any check of their content spends. Measured
runs, in the same process: ``cold`` (:func:`pilot.identity.protocol_identity`
with the process's caches emptied: the freeze manifest taken in full, the
CLI asked its version), ``warm`` (the same call again: every file's
signature checked, nothing re-read) and ``compare``
(:func:`pilot.identity.first_difference` of two equal identities, which
walks every item). Also shown: ``manifest`` (:func:`pilot.freeze.take_manifest`
alone, what an uncached check would pay for the files). A dispatch pays
warm + compare. Medians over the repeats.

    .venv/bin/python benchmarks/bench_identity.py [--repeats 20] [--backend claude-code]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from pilot import freeze, identity, paths
from pilot.agents import identity_extras


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _cold(backend: str) -> None:
    identity._MANIFESTS.clear()
    identity._FILE_DIGESTS.clear()
    identity_extras._CLI_VERSIONS.clear()
    identity.protocol_identity(None, backend=backend)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--backend", default="claude-code")
    args = parser.parse_args(argv)
    ident = identity.protocol_identity(None, backend=args.backend)  # imports and YAML loader out of the timings
    code_base = freeze.frozen_sources()[2][2]
    files = [(paths.ROOT if rel.startswith("protocol/") else code_base) / rel for rel in ident.files]

    def read() -> None:
        for f in files:
            with open(f, "rb") as fh:
                fh.read()

    other = identity.ProtocolIdentity.from_dict(ident.to_dict())
    ref = _median(read, args.repeats)
    cold = _median(lambda: _cold(args.backend), max(3, args.repeats // 5))
    manifest = _median(lambda: freeze.take_manifest(), args.repeats)
    identity.protocol_identity(None, backend=args.backend)
    warm = _median(lambda: identity.protocol_identity(None, backend=args.backend), args.repeats)
    compare = _median(lambda: identity.first_difference(ident, other), args.repeats)
    size = sum(f.stat().st_size for f in files)
    print(
        f"{len(files)} files ({size / 1e6:.2f} MB), {len(ident.extras)} extras, backend {args.backend}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"{'run':<28} {'ms':>9} {'ratio':>9}")
    for name, t in (
        ("read (reference)", ref),
        ("cold identity", cold),
        ("manifest alone (uncached)", manifest),
        ("warm identity", warm),
        ("compare", compare),
    ):
        print(f"{name:<28} {t * 1000:>9.2f} {t / ref:>9.2f}")
    print(
        f"per dispatch (warm identity + compare): {(warm + compare) * 1000:.2f} ms; first check of a "
        f"process: {(cold + compare) * 1000:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
