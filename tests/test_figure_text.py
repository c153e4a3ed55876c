"""The printed size of a figure's text, against figures drawn here at known sizes."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from pilot.report import figure_text


def _figure(path, width_in: float, tick_pt: float):
    fig, ax = plt.subplots(figsize=(width_in, 2.0))
    ax.plot([0, 1], [0, 1])
    ax.tick_params(labelsize=tick_pt)
    ax.set_ylabel("rotated label", fontsize=9)
    fig.savefig(path)
    plt.close(fig)


def test_smallest_text_scales_with_the_inclusion_width(tmp_path):
    _figure(tmp_path / "wide.pdf", 8.0, 7.0)
    _figure(tmp_path / "fit.pdf", 6.0, 7.5)
    (tmp_path / "env_figure.tex").write_text(
        "\\includegraphics[width=0.8\\linewidth]{wide.pdf}\n\\includegraphics[width=\\linewidth]{fit.pdf}\n\\includegraphics[width=0.5\\linewidth]{absent.pdf}\n"
    )
    figs = {f.pdf.name: f for f in figure_text.included_figures([tmp_path / "env_figure.tex"], [tmp_path])}
    assert set(figs) == {"wide.pdf", "fit.pdf"}  # a figure the build lacks is left out
    wide, fit = figs["wide.pdf"], figs["fit.pdf"]
    assert wide.figure_width_pt == 8.0 * 72 and wide.smallest_pt == 7.0
    # Hand calculation: 7 pt x 0.8 x 487.28 pt / 576 pt = 4.74 pt; 7.5 pt x 487.28 / 432 = 8.46 pt.
    assert (
        abs(wide.printed_pt - 7.0 * 0.8 * (612 - 2 * 2.2 / 2.54 * 72) / 576) < 1e-9
        and round(wide.printed_pt, 2) == 4.74
    )
    assert round(fit.printed_pt, 2) == 8.46
    problems = figure_text.too_small(list(figs.values()))
    assert len(problems) == 1 and problems[0].startswith("wide.pdf") and "prints at 4.7 pt" in problems[0]


def test_the_forest_plot_reads_a_tiny_p_as_below_a_thousandth(tmp_path):
    import numpy as np
    import pandas as pd
    from pypdf import PdfReader

    from pilot.stats.figures import forest_plot

    contrasts = pd.DataFrame(
        {
            "contrast": ["A3-A1", "A1-A0"],
            "role": ["primary", "secondary"],
            "estimate": [0.1, 0.6],
            "ci_low": [-0.1, 0.4],
            "ci_high": [0.3, 0.8],
            "p_value": [0.5, 0.0001],
            "p_holm": [np.nan, 0.0002],
        }
    )
    text = PdfReader(str(forest_plot(contrasts, tmp_path / "f.pdf", simulated=True))).pages[0].extract_text()
    assert "p = 0.500" in text and "p (Holm) < 0.001" in text and "0.000" not in text.replace("0.0 ", "")
