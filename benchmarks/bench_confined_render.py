"""Confined LibreOffice against the same call unconfined: a batch of workbooks recalculated, and a deck rendered.

Reference runs (named ``unconfined``): the calls the harness made before it
confined LibreOffice, in this process: the batch's workbooks copied into a
folder and recalculated by one ``soffice`` with a private profile kept from
batch to batch (the old ``Recalculator``), and a deck rendered by one
``soffice`` with a fresh profile (the old ``render_deck_pdf``). Measured runs
(``confined``): the harness's own calls now, :class:`pilot.oracles.Recalculator`
(copies through the wall, made inert, one confined ``soffice``, output taken
back) and :func:`pilot.judges.deck_pdf.render_deck_pdf` (the same, after the
deck reader admits the deck, which the reference does too). The two are
interleaved round by round, so the host's load weighs on both alike; the
median of the rounds is reported, after one warm-up round each (the
reference's profile, the confined side's per-process profile template).

    .venv/bin/python benchmarks/bench_confined_render.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from pilot import confined
from pilot.judges.deck_pdf import render_deck_pdf
from pilot.oracle_formats.pptx_reader import read_deck
from pilot.oracles import Recalculator
from pilot.oracles.recalc import soffice_binary
from pilot.oracles.selfcheck_tool import RECALC_PROFILE_XCU
from pilot.scenarios import build_gold_workspace, list_scenarios, load_scenario

#: The ratio the confined calls must stay under (the issue's target).
TARGET = 1.5


def unconfined_soffice(files: list[Path], outdir: Path, target: str, profile: Path, home: Path) -> None:
    """The harness's former call: soffice in its own process group, the harness's environment, no confinement."""
    user = profile / "user"
    if not (user / "registrymodifications.xcu").exists():
        user.mkdir(parents=True, exist_ok=True)
        (user / "registrymodifications.xcu").write_text(RECALC_PROFILE_XCU, encoding="utf-8")
    cmd = [
        soffice_binary(),
        f"-env:UserInstallation={profile.resolve().as_uri()}",
        "--headless",
        "--norestore",
        "--nolockcheck",
        "--nodefault",
        "--nologo",
        "--convert-to",
        target,
        "--outdir",
        str(outdir),
        *[str(f) for f in files],
    ]
    env = dict(os.environ, HOME=str(home), SAL_USE_VCLPLUGIN="svp")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds of each call (after one warm-up)")
    args = parser.parse_args(argv)
    if soffice_binary() is None:
        print("not estimable (LibreOffice is not installed)")
        return 1
    if confined.problems():
        print(f"not estimable (this host cannot confine LibreOffice: {'; '.join(confined.problems())})")
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-confined-") as tmp:
        root = Path(tmp)
        books: list[Path] = []
        deck = None
        for sid in list_scenarios():
            sc = load_scenario(sid)
            if not any(d.kind in ("xlsx", "pptx") for d in sc.deliverables):
                continue
            ws = build_gold_workspace(sc, root / "gold" / sid)
            books += sorted((ws / "outputs").glob("*.xlsx"))
            deck = deck or next(iter(sorted((ws / "outputs").glob("*.pptx"))), None)
        if deck is None or not books:
            print("not estimable (no gold workbook or deck)")
            return 1

        ref_profile = root / "ref-profile"
        timings: dict[str, list[float]] = {k: [] for k in ("ref_batch", "conf_batch", "ref_deck", "conf_deck")}

        def ref_batch(n: int) -> float:
            batch = root / f"ref-batch-{n}"
            (batch / "in").mkdir(parents=True)
            (batch / "out").mkdir()
            t0 = time.perf_counter()
            staged = []
            for i, b in enumerate(books):
                dst = batch / "in" / f"w{i:03d}.xlsx"
                shutil.copyfile(b, dst)
                staged.append(dst)
            unconfined_soffice(staged, batch / "out", "xlsx:Calc Office Open XML", ref_profile, root)
            took = time.perf_counter() - t0
            assert len(list((batch / "out").glob("*.xlsx"))) == len(books)
            return took

        def conf_batch(n: int) -> float:
            with Recalculator(root / f"conf-batch-{n}") as r:
                t0 = time.perf_counter()
                res = r.recalculate(books)
                took = time.perf_counter() - t0
            assert all(x.error is None for x in res.values()), [x.error for x in res.values()]
            return took

        def ref_deck(n: int) -> float:
            t0 = time.perf_counter()
            parsed, reason = read_deck(deck, deck.parent)
            assert parsed is not None, reason
            with tempfile.TemporaryDirectory(prefix="ref-deck-") as t:
                unconfined_soffice([deck], root / f"ref-deck-{n}", "pdf:impress_pdf_Export", Path(t) / "p", Path(t))
            took = time.perf_counter() - t0
            assert (root / f"ref-deck-{n}" / f"{deck.stem}.pdf").is_file()
            return took

        def conf_deck(n: int) -> float:
            t0 = time.perf_counter()
            render_deck_pdf(deck, root / f"conf-deck-{n}")
            return time.perf_counter() - t0

        calls = {"ref_batch": ref_batch, "conf_batch": conf_batch, "ref_deck": ref_deck, "conf_deck": conf_deck}
        for fn in calls.values():
            fn(0)  # warm-up: profiles and the template made, caches filled
        for n in range(1, args.rounds + 1):
            for name, fn in calls.items():
                timings[name].append(fn(n))

    med = {k: statistics.median(v) for k, v in timings.items()}
    batch_ratio = med["conf_batch"] / med["ref_batch"]
    deck_ratio = med["conf_deck"] / med["ref_deck"]
    rows = [
        (f"recalculation of {len(books)} gold workbooks, unconfined (reference), median", f"{med['ref_batch']:.2f} s"),
        (f"recalculation of {len(books)} gold workbooks, confined, median", f"{med['conf_batch']:.2f} s"),
        ("confined / unconfined, recalculation", f"{batch_ratio:.2f}x"),
        (f"render of {deck.name}, unconfined (reference), median", f"{med['ref_deck']:.2f} s"),
        (f"render of {deck.name}, confined, median", f"{med['conf_deck']:.2f} s"),
        ("confined / unconfined, deck render", f"{deck_ratio:.2f}x"),
    ]
    print(f"rounds: {args.rounds} of each call after one warm-up, interleaved; target under {TARGET}x")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v:>8}")
    for name, values in timings.items():
        print(f"  {name}: " + ", ".join(f"{v:.2f}" for v in values))
    within = batch_ratio < TARGET and deck_ratio < TARGET
    print("within target" if within else f"ABOVE TARGET ({TARGET}x)")
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
