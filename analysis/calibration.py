"""Calibrate the primary inference on the synthetic generator (appendix table).

Draws SIMULATED studies from ``analysis/config/synthetic_runtable.yml`` with
the design's shape (10 scenarios x 5 arms x 3 repeats), analyses each like
the primary stage (vectorised over studies, :mod:`pilot.simulated.calibration`),
under three conditions (planted, null, and a tail condition with the primary
control arm near 0% acceptance), and writes

- ``<tables-dir>/calibration.csv``: coverage of each contrast's 95% interval,
  rejection rates, bias and the share of zero-width intervals, each with its
  Monte Carlo standard error;
- ``<generated-dir>/calibration_table.tex`` and ``calibration_macros.tex``.

Every study is analysed with the bootstrap resamples and sign vectors the
primary stage draws for its seed (``--resampling-seed``, the Makefile's SEED),
so the table measures the preregistered procedure as it will run.

Usage: ``python analysis/calibration.py [--studies 10000] [--seed N] [--resampling-seed N]``.
"""

from __future__ import annotations

import os

# The resampling is many small matrix products: BLAS threads cost more to start than they gain,
# and on a shared machine they stall, so one thread unless the caller sets it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from pilot import paths, protocol
from pilot.latex import LatexText, latex_escape, macro_name, write_macros, write_table
from pilot.simulated import calibration
from pilot.simulated.calibration import run_calibration
from pilot.stats.primary import InferenceSettings


def _n(x: int) -> str:
    """A thousands-separated integer for LaTeX."""
    return f"{x:,}".replace(",", "{,}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=10_000, help="simulated studies per condition (default 10000)")
    ap.add_argument("--seed", type=int, default=20260417, help="seed of the simulated studies and the resampling")
    ap.add_argument(
        "--resampling-seed",
        type=int,
        default=20260415,
        help=(
            "the primary stage's seed, whose bootstrap resamples and sign vectors every study uses (default "
            "20260415, the Makefile's SEED)"
        ),
    )
    ap.add_argument(
        "--scenarios",
        default="10,40",
        help="comma-separated scenarios per study (default 10,40: the design and a larger study)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="repeats per scenario and arm (default 3)")
    ap.add_argument("--bootstrap", type=int, default=0, help="bootstrap resamples (0: study.yml)")
    ap.add_argument("--permutations", type=int, default=0, help="sign-flip permutations (0: study.yml)")
    ap.add_argument(
        "--truth-draws",
        type=int,
        default=1_000_000,
        help="Monte Carlo draws (over all scenarios) for the planted truth",
    )
    ap.add_argument("--tables-dir", type=Path, default=paths.TABLES_DIR)
    ap.add_argument("--generated-dir", type=Path, default=paths.GENERATED_DIR)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    parts = [
        run_calibration(
            args.studies,
            seed=args.seed,
            n_scenarios=int(J),
            repeats=args.repeats,
            B=args.bootstrap or None,
            n_permutations=args.permutations or None,
            truth_draws=args.truth_draws,
            progress=not args.quiet,
            resampling_seed=args.resampling_seed,
        ).summary
        for J in args.scenarios.split(",")
    ]
    elapsed = time.perf_counter() - started
    s = pd.concat(parts, ignore_index=True)
    args.tables_dir.mkdir(parents=True, exist_ok=True)
    s.assign(seed=args.seed, resampling_seed=args.resampling_seed, study="SIMULATED-calibration").to_csv(
        args.tables_dir / "calibration.csv", index=False
    )

    show = s[
        [
            "J",
            "condition",
            "contrast",
            "planted",
            "mean_estimate",
            "coverage",
            "coverage_mc_se",
            "rejection",
            "rejection_mc_se",
            "mean_ci_width",
            "zero_width_share",
        ]
    ]
    show = show.rename(
        columns={
            "condition": "Condition",
            "contrast": "Contrast",
            "planted": "Planted",
            "mean_estimate": "Mean est.",
            "coverage": "Coverage",
            "coverage_mc_se": "MC s.e.",
            "rejection": "Rejection",
            "rejection_mc_se": "MC s.e. ",
            "mean_ci_width": "CI width",
            "zero_width_share": "Zero width",
        }
    )
    Js = sorted(set(int(j) for j in s.J))
    J, R, n = Js[0], int(s.R.iloc[0]), int(s.studies.iloc[0])
    write_table(
        show,
        args.generated_dir / "calibration_table.tex",
        caption=(
            f"Calibration of the primary inference on {_n(n)} simulated studies per condition and study "
            f"size ($J$ scenarios: {' and '.join(map(str, Js))}; $R={R}$ repeats; "
            f"$B={_n(int(s.B.iloc[0]))}$ bootstrap resamples; sign-flip test exact over all $2^J$ sign "
            f"vectors when that is at most {_n(int(s.permutations.iloc[0]))}, else that many random ones; "
            "every study uses the resamples and sign vectors the primary stage draws with seed "
            f"{args.resampling_seed}). Planted: the generative model as stated; null: A3's parameters set "
            "to A1's; tail: A1's completion pushed down until its acceptance is near 0\\%. Coverage: "
            "share of nominal 95\\% percentile intervals containing the planted contrast. Rejection: share of "
            "studies with $p<0.05$ (Holm-adjusted over the three secondary contrasts). Zero width: share "
            "of intervals of zero width. MC s.e.: Monte Carlo standard error. The conditions share the "
            "runs of the arms they leave unchanged, so a contrast between two such arms repeats the "
            "planted row exactly."
        ),
        label="tab:calibration",
        simulated=True,
        escape=False,
        # Eleven columns: 9 pt with narrower gaps fits the text width without shrinking the table below 8 pt.
        font="\\footnotesize\\setlength{\\tabcolsep}{4pt}",
    )
    m = {
        "CalStudies": n,
        "CalJ": J,
        "CalR": R,
        "CalSeed": str(args.seed),
        "CalResamplingSeed": str(args.resampling_seed),
        "CalSeconds": round(elapsed),
        "CalJLarge": Js[-1],
    }
    for j in Js:
        # What a percentile interval of a mean of j scenario values covers when the values are
        # roughly normal: its half-width is 1.96 bootstrap SDs, sqrt((j-1)/j) of the usual standard
        # error, where a t interval with j-1 degrees of freedom would need the t quantile.
        m[macro_name("Cal", "Theory", "J", j)] = float(2 * stats.t.cdf(1.96 * np.sqrt((j - 1) / j), j - 1) - 1)
    for _, r in s.iterrows():
        base = ("Cal", "J", int(r.J), r.condition, r.contrast.replace("-", "Minus"))
        m[macro_name(*base, "Coverage")] = float(r.coverage)
        m[macro_name(*base, "CoverageSE")] = float(r.coverage_mc_se)
        m[macro_name(*base, "Rejection")] = float(r.rejection)
        m[macro_name(*base, "Planted")] = float(r.planted)
        m[macro_name(*base, "RejectionSE")] = float(r.rejection_mc_se)
        m[macro_name(*base, "ZeroWidth")] = float(r.zero_width_share)
        if r.condition == "tail":
            m[macro_name(*base, "PlantedControl")] = float(r.planted_control)
    # The appendix's and the discussion's readings of these numbers, written from them.
    primary_name = "-".join(protocol.study().primary_contrast.arms)

    def pick(cond: str, col: str, se: str) -> list[tuple[int, float, float]]:
        rows = s[(s.condition == cond) & (s.contrast == primary_name)].sort_values("J")
        return [(int(r.J), float(r[col]), float(r[se])) for _, r in rows.iterrows()]

    settings = InferenceSettings.from_study(0, protocol.study())
    m["CalLevelSentence"] = LatexText(
        latex_escape(calibration.level_sentence(pick("null", "rejection", "rejection_mc_se"), 1 - settings.level))
    )
    # What every scenario-cluster interval of the paper is, printed wherever one is: its nominal level and the coverage
    # measured here for the primary contrast at the design's number of scenarios, as the generative model is stated.
    cov = [c for j, c, _ in pick("planted", "coverage", "coverage_mc_se") if j == J]
    m["IntervalNote"] = LatexText(
        f"nominal {100 * settings.level:g}\\,\\%; calibrated coverage {cov[0]:.2f} at $J={J}$, "
        "Appendix~\\ref{app:calibration}"
        if cov
        else f"nominal {100 * settings.level:g}\\,\\%; not calibrated at $J={J}$"
    )
    m["CalCoverageSentence"] = LatexText(
        latex_escape(calibration.coverage_sentence(pick("planted", "coverage", "coverage_mc_se"), settings.level))
    )
    write_macros(
        m,
        args.generated_dir / "calibration_macros.tex",
        comment=f"analysis/calibration.py --studies {n} --seed {args.seed} --resampling-seed {args.resampling_seed}",
    )
    print(s.to_string(index=False))
    print(f"{n} studies per condition in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
