"""One interpreting sentence per stage table, written from the table's own numbers.

The stage notebooks print these under each table so a reader sees what the
numbers say without reading six-decimal columns. A sentence never adds a
number of its own: every figure in it is read from the table it interprets,
and a value that is missing or not a number reads "not estimable". Minus
signs are true minus signs; p-values have three decimals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

MINUS = "\u2212"
#: What H6's intervals are: bootstrap intervals of a cost ratio, whose coverage the calibration (of the contrasts of
#: acceptance) did not measure; printed with them wherever they are, never the contrasts' calibrated coverage.
COST_INTERVAL_NOTE = "nominal 95%, coverage not measured for cost"


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def num(value: Any, digits: int = 3) -> str:
    """A number with a true minus sign; never "-0.000"; "not estimable" when missing or not a number."""
    if not _finite(value):
        if isinstance(value, str) and value.strip():
            return value  # a result object's own "not estimable (reason)"
        return "not estimable"
    v = float(value)
    text = f"{abs(v):.{digits}f}"
    negative = v < 0 and float(text) != 0.0
    return (MINUS if negative else "") + text


def usd(value: Any) -> str:
    """Dollars with two decimals."""
    return f"${num(value, 2)}" if _finite(value) else num(value)


def pval(value: Any) -> str:
    """``p = 0.039`` or ``p < 0.001``."""
    if not _finite(value):
        return "p not estimable"
    v = float(value)
    return "p < 0.001" if v < 0.001 else f"p = {v:.3f}"


def contrast_label(name: str) -> str:
    """``A3-A1`` as ``A3 − A1``."""
    return f" {MINUS} ".join(str(name).split("-"))


def data_prefix(simulated: bool | str, synthetic: bool = False) -> str:
    """The label every sentence about numbers that are no finding starts with.

    ``simulated`` is the data's label (``StageData.label``: SIMULATED, REHEARSAL, or ``""``), or True for SIMULATED.
    """
    from pilot import backends
    from pilot.latex import data_label

    if synthetic:
        return f"{backends.SIMULATED_LABEL} (synthetic run table): "
    tag = data_label(simulated)
    return f"{tag} ({backends.qualifier(tag)}): " if tag else ""


def interval(low: Any, high: Any, level: float = 0.95, digits: int = 3) -> str:
    if not (_finite(low) and _finite(high)):
        return f"nominal {level:.0%} CI not estimable"
    return f"nominal {level:.0%} CI {num(low, digits)} to {num(high, digits)}"


def contrast_sentence(
    row: Mapping[str, Any], *, alpha: float = 0.05, level: float = 0.95, holm: bool = False, prefix: str = ""
) -> str:
    """ "A3 − A1 is 0.067 (nominal 95% CI −0.200 to 0.367), p = 0.875: no evidence of a premium in this run"."""
    name = contrast_label(row["contrast"])
    p: Any = row.get("p_holm") if holm else row.get("p_value")
    est: Any = row.get("estimate")
    if not _finite(est):
        return f"{prefix}{name} is {num(est)} in this run."
    p_text = pval(p) + (" (Holm)" if holm else "")
    if not _finite(p):
        reading = "no test was possible"
    elif float(p) < alpha:
        reading = (
            "evidence of a premium in this run" if float(est) > 0 else "evidence of a negative premium in this run"
        )
    else:
        reading = "no evidence of a premium in this run"
    return (
        f"{prefix}{name} is {num(est)} ({interval(row.get('ci_low'), row.get('ci_high'), level)}), {p_text}: {reading}."
    )


def contrasts_sentences(contrasts: pd.DataFrame, *, alpha: float = 0.05, level: float = 0.95, prefix: str = "") -> str:
    """One sentence per preregistered contrast; secondary contrasts are read with their Holm-adjusted p."""
    out: list[str] = []
    for _, r in contrasts.iterrows():
        holm = r.get("role") == "secondary" and "p_holm" in r
        out.append(contrast_sentence(r, alpha=alpha, level=level, holm=holm, prefix=prefix if not out else ""))
    return " ".join(out)


def acceptance_sentence(acceptance: pd.DataFrame, *, prefix: str = "") -> str:
    """Which arm accepted most and least, and how many runs were scored."""
    acc = acceptance[acceptance["p_hat"].map(_finite)]
    if acc.empty:
        return f"{prefix}No arm's acceptance is estimable in this run table."
    hi, lo = acc.loc[acc["p_hat"].astype(float).idxmax()], acc.loc[acc["p_hat"].astype(float).idxmin()]
    widest = (acc["ci_high"].astype(float) - acc["ci_low"].astype(float)).max()
    scored = ""
    if {"n_runs", "n_scored"} <= set(acceptance.columns):
        scored = (
            f" {int(acceptance['n_scored'].sum())} of {int(acceptance['n_runs'].sum())} runs had a judge score "
            "and enter the means."
        )
    return (
        f"{prefix}Acceptance is highest in {hi['arm']} ({num(hi['p_hat'])}) and lowest in {lo['arm']} "
        f"({num(lo['p_hat'])}); the widest nominal 95% interval spans {num(widest)}.{scored}"
    )


def hypothesis_sentence(h: Any, *, prefix: str = "") -> str:
    """ "H1 reads not consistent: estimate > 0 and sign-flip p < 0.05 (two-sided) does not hold in this run"."""
    verdict = str(h.verdict)
    if verdict == "consistent":
        tail = "its criterion holds in this run"
    elif verdict == "not consistent":
        tail = "its criterion does not hold in this run"
    elif verdict == "exploratory":
        tail = "it is described, not tested"
    else:
        tail = "the criterion could not be applied"
    return f"{prefix}{h.id} ({h.statement}) reads {verdict}: {tail} (criterion: {h.criterion})."


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value).strip()


def hypothesis_paragraph(row: Mapping[str, Any]) -> str:
    """The discussion's paragraph on one hypothesis, from its result's row (:meth:`HypothesisResult.row`): numbers,
    criterion, verdict, what fails, what the numbers say.

    The row may come from the result object or from the CSV table a stage
    wrote from it; every number in the paragraph is one of the row's.
    """
    verdict = _text(row.get("verdict"))
    failing = _text(row.get("failing"))
    interval, test = _text(row.get("interval")), _text(row.get("test"))
    # Every interval says what it is: nominal 95 per cent (the stage's paragraph adds the calibrated coverage of the
    # bootstrap intervals of the contrasts); H4's are cluster-robust Wald intervals and H6's bootstrap intervals of a
    # cost ratio, neither of which the calibration measured.
    kind = {
        "H4": "Wald interval (nominal 95%, not calibrated)",
        "H6": f"interval ({COST_INTERVAL_NOTE})",
    }.get(_text(row.get("hypothesis")), "interval (nominal 95%)")
    parts = [x for x in (f"{kind} {interval}" if interval and interval != "n/a" else "", test) if x]
    statement = _text(row.get("statement"))
    out = [
        f"{statement[:1].upper()}{statement[1:]}. Estimate: {_text(row.get('estimate'))}"
        + (f"; {'; '.join(parts)}." if parts else ".")
    ]
    out.append(f"The criterion is: {_text(row.get('criterion'))}.")
    if verdict == "not consistent" and failing:
        out.append(f"The verdict is {verdict}: {failing}.")
    elif verdict == "exploratory":
        out.append("It is exploratory: described, not judged.")
    else:
        out.append(f"The verdict is {verdict}.")
    remark = _text(row.get("remark"))
    if remark:
        out.append(remark)
    return " ".join(out)


def q_grid_sentence(summary: pd.DataFrame, primary: str, *, prefix: str = "") -> str:
    part = summary[summary["contrast"] == primary]
    est = part["estimate"].astype(float)
    if part.empty or not est.map(_finite).any():
        return f"{prefix}The primary contrast is not estimable at any threshold."
    signs = {math.copysign(1, v) for v in est if _finite(v) and v != 0}
    keeps = "keeps its sign" if len(signs) <= 1 else "changes sign"
    return (
        f"{prefix}As q moves from {part['q'].min():g} to {part['q'].max():g}, {contrast_label(primary)} ranges from "
        f"{num(est.min())} to {num(est.max())} and {keeps}."
    )


def logistic_sentence(summary: pd.DataFrame, term: str, *, note: str = "", prefix: str = "") -> str:
    rows = summary[summary["term"] == term]
    if rows.empty:
        return f"{prefix}The regression has no term {term}."
    r = rows.iloc[0]
    row_note = str(r.get("note") or "") if "note" in r else ""
    if not _finite(r.get("odds_ratio")) or "separation" in (note + row_note).lower():
        reason = row_note or note or "the fit is degenerate"
        return f"{prefix}The odds ratio {term} is not estimable ({reason}), so no reading is given."
    return (
        f"{prefix}The odds ratio {term} is {num(r['odds_ratio'], 2)} "
        f"({interval(r.get('or_ci_low'), r.get('or_ci_high'), digits=2)}), {pval(r.get('p_value'))}."
    )


def km_sentence(summary: pd.DataFrame, tests: pd.DataFrame | None = None, *, prefix: str = "") -> str:
    med = summary[summary["median_min"].map(_finite)]
    text = f"{prefix}"
    if med.empty:
        text += "No arm reached a median time to completion (fewer than half its runs completed)."
    else:
        hi, lo = med.loc[med["median_min"].idxmax()], med.loc[med["median_min"].idxmin()]
        text += (
            f"Median time to completion ranges from {num(lo['median_min'], 1)} minutes in {lo['arm']} to "
            f"{num(hi['median_min'], 1)} in {hi['arm']}; {int(summary['censored'].sum())} runs are censored."
        )
    if tests is not None and not tests.empty:
        text += " " + "; ".join(f"{t['test']}: {pval(t['p_value'])}" for _, t in tests.iterrows()) + "."
    return text


def cost_sentence(summary: pd.DataFrame, *, prefix: str = "") -> str:
    fin = summary[summary["cost_per_accepted"].map(_finite)]
    none = [a for a in summary["arm"] if a not in set(fin["arm"])]
    if fin.empty:
        return f"{prefix}No arm has an accepted deliverable, so no cost per accepted deliverable is finite."
    lo = fin.loc[fin["cost_per_accepted"].astype(float).idxmin()]
    text = f"{prefix}Cost per accepted deliverable is lowest in {lo['arm']} ({usd(lo['cost_per_accepted'])})"
    if "share_lowest" in lo:
        text += f", cheapest in {num(lo['share_lowest'] * 100, 0)}% of resamples"
    text += "."
    if none:
        text += f" {', '.join(none)} had no accepted run (infinite cost per accepted deliverable)."
    return text


def secondary_sentence(summary: pd.DataFrame, *, prefix: str = "") -> str:
    parts = []
    if "E" in summary:
        worst = summary.loc[summary["E"].astype(float).idxmax()]
        parts.append(f"critical violations are most frequent in {worst['arm']} ({num(worst['E'])})")
    if "cost_usd" in summary:
        dear = summary.loc[summary["cost_usd"].astype(float).idxmax()]
        parts.append(f"the costliest arm per run is {dear['arm']} ({usd(dear['cost_usd'])})")
    if "wall_min" in summary:
        slow = summary.loc[summary["wall_min"].astype(float).idxmax()]
        parts.append(f"the slowest is {slow['arm']} ({num(slow['wall_min'], 1)} minutes)")
    text = "; ".join(parts) + "." if parts else "No secondary endpoint is tabulated."
    return prefix + text[:1].upper() + text[1:]


def recovery_sentence(summary: pd.DataFrame, *, prefix: str = "") -> str:
    rows = summary[summary["index"] == "ARI"]
    if rows.empty:
        return f"{prefix}No recovery index was computed."
    r = rows.iloc[0]
    if int(r["eligible"]) == 0:
        return f"{prefix}No run of {r['arm']} was eligible for recovery, so the recovery index is not estimable."
    return (
        f"{prefix}In {r['arm']}, {int(r['recovered'])} of {int(r['eligible'])} eligible runs recovered: "
        f"ARI {num(r['estimate'])} ({interval(r['ci_low'], r['ci_high'])})."
    )


def agreement_sentence(summary: pd.DataFrame, *, prefix: str = "") -> str:
    g = summary.set_index("measure")
    if "Krippendorff alpha (ordinal)" not in g.index:
        return f"{prefix}Judge agreement was not computed."
    a = g.loc["Krippendorff alpha (ordinal)"]
    value = a["value"] if not isinstance(a, pd.DataFrame) else a["value"].iloc[0]
    return (
        f"{prefix}The judges agree with an ordinal Krippendorff's alpha of {num(value)} over {int(a['n_runs'])} runs."
    )


def status_sentence(status: pd.DataFrame, envelope_usd: float, *, prefix: str = "") -> str:
    """The pilot's status table in one sentence: runs done and failed, reruns, dollars against the envelope."""
    if status.empty:
        return f"{prefix}No run has been assigned yet."
    total = status[status["arm"] == "all"].iloc[0] if (status["arm"] == "all").any() else status.sum(numeric_only=True)
    assigned = int(total["done"] + total["in_flight"] + total["waiting"] + total["failed"])
    no_verdict = int(total.get("no_verdict", 0) or 0)
    unjudged = f" ({no_verdict} of them without a verdict: their evaluation could not run)" if no_verdict else ""
    return (
        f"{prefix}{int(total['done'])} of {assigned} assigned runs are done{unjudged} and "
        f"{int(total['failed'])} failed; {int(total['failed_attempts'])} infrastructure attempts were "
        f"rerun; {usd(total['spent_usd'])} spent of the {usd(envelope_usd)} envelope "
        f"({usd(total['reserved_usd'])} still reserved)."
    )


def join(sentences: Iterable[str]) -> str:
    return " ".join(s for s in sentences if s)
