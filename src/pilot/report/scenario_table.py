"""Table ``tab:scenarios``: the bundles of a study's scenario set, generated from ``protocol/scenarios``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pilot import paths
from pilot.latex import latex_escape, number_word, write_table
from pilot.protocol.design import load_study
from pilot.protocol.scenario import Scenario, load_scenario

_KIND = {
    "xlsx": "workbook",
    "docx": "Word",
    "pdf": "PDF",
    "csv": "CSV",
    "pptx": "slide deck",
    "md": "Markdown",
    "txt": "text",
}


def _deliverables_text(sc: Scenario) -> str:
    parts = []
    for d in sc.file_deliverables:
        extra = " with formulas" if d.requires_formulas else (f", $\\geq${d.min_words} words" if d.min_words else "")
        # A file name may break at its underscores and dots (url's \nolinkurl): no name sticks out of its column.
        parts.append(f"\\nolinkurl{{{d.name}}} ({_KIND[d.kind]}{extra})")
    return "; ".join(parts) + "; completion record"


def scenarios_frame(scenarios: list[Scenario] | None = None) -> pd.DataFrame:
    """One row per bundle: ID, occupation, deliverables, caps, designed depth, professional minutes."""
    scs = scenarios if scenarios is not None else [load_scenario(s) for s in load_study().scenario_set()]
    rows = [
        {
            "ID": sc.id,
            # \hspace{0pt} lets TeX hyphenate the cell's first word ("administration") in its narrow column.
            "Occupation": "\\hspace{0pt}" + latex_escape(sc.occupation),
            "Deliverables": _deliverables_text(sc),
            "Cap (\\$)": f"{sc.caps.usd:.2f}",
            "Wall (s)": f"{int(sc.caps.wall_s):,}".replace(",", "{,}"),
            "Depth": sc.designed_depth,
            "Prof.\\ min": f"{sc.professional_minutes:g}",
            "Portal": "yes" if sc.uses_portal else "no",
        }
        for sc in scs
    ]
    return pd.DataFrame(
        rows,
        columns=["ID", "Occupation", "Deliverables", "Cap (\\$)", "Wall (s)", "Depth", "Prof.\\ min", "Portal"],
    )


def write_scenarios_table(out_dir: Path | None = None, scenario_ids: list[str] | None = None) -> Path:
    """Write ``scenarios_table.tex`` (label ``tab:scenarios``) for ``scenario_ids`` (default: the design's set)."""
    out = Path(out_dir or paths.GENERATED_DIR)
    study = load_study()
    ids = sorted(scenario_ids) if scenario_ids is not None else study.scenario_set()
    name = study.set_of(ids)
    which = f"set \\texttt{{{name}}}" if name else "a list of scenarios named at creation"
    return write_table(
        scenarios_frame([load_scenario(s) for s in ids]),
        out / "scenarios_table.tex",
        caption=(
            f"The {number_word(len(ids))} scenarios of this study ({which} of "
            "\\texttt{protocol/study.yml}), generated from \\texttt{protocol/scenarios}: deliverables "
            "requested by each brief (every scenario also requires the completion record), caps (the "
            "larger of the global caps and the author's own, A-006), designed depth (ordinal, 1--5, used "
            "by H4), professional minutes (the weights of the sensitivity analysis) and whether the "
            "scenario comes with the company portal, which A3 and A4 reach: its content is generated from "
            "the scenario's own inputs and only mirrors them, so the arms without it lose no information, "
            "and what the portal adds is a way in, not a source."
        ),
        label="tab:scenarios",
        escape=False,
        column_format="l>{\\raggedright\\arraybackslash}p{1.9cm}>{\\raggedright\\arraybackslash}p{4.6cm}rrrrl",
        font="\\footnotesize",
    )
