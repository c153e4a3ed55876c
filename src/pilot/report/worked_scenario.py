"""An appendix that walks through one scenario of the study, from its brief to one accepted and one rejected package.

Everything is read from the scenario's bundle (``protocol/scenarios/<ID>/``:
brief, inputs, oracle, rubric) and from the study's own records: the two
packages are runs of the worker model, the first accepted and the first
rejected in run-id order, described by their evaluation (the oracle's
verdict on every criterion, the judges' grades on every rubric criterion,
Q, D, E and S). No file the worker wrote is opened here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from pilot import protocol
from pilot.judges.rubric import scenario_criteria
from pilot.latex import latex_escape
from pilot.protocol.scenario import load_scenario

#: The scenario the appendix walks through when the study runs it: one deliverable, four inputs, a short brief.
PREFERRED = "OPS-01"


def pick_scenario(scenario_ids: Iterable[str]) -> str:
    ids = sorted(scenario_ids)
    return PREFERRED if PREFERRED in ids else (ids[0] if ids else "")


def _brief(text: str) -> str:
    """The brief's Markdown as LaTeX: paragraphs, bullet and numbered lists, headings in bold; everything escaped."""
    out: list[str] = []
    for block in text.strip().split("\n\n"):
        lines = [ln.rstrip() for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        if lines[0].startswith("#"):
            out.append(f"\\textbf{{{latex_escape(lines[0].lstrip('#').strip())}}}")
            lines = lines[1:]
            if not lines:
                continue
        bullet = re.compile(r"^\s*(?:[-*]|\d+\.)\s+")
        if bullet.match(lines[0]):
            items: list[str] = []
            for ln in lines:
                if bullet.match(ln):
                    items.append(bullet.sub("", ln))
                elif items:
                    items[-1] += " " + ln.strip()
            env = "enumerate" if re.match(r"^\s*\d+\.", lines[0]) else "itemize"
            out.append(
                f"\\begin{{{env}}}[nosep,leftmargin=1.6em]\n"
                + "\n".join(f"\\item {latex_escape(_plain(i))}" for i in items)
                + f"\n\\end{{{env}}}"
            )
            continue
        out.append(latex_escape(_plain(" ".join(ln.strip() for ln in lines))))
    return "\n\n".join(out)


def _plain(text: str) -> str:
    """Markdown emphasis and code marks dropped (the words stay)."""
    return text.replace("**", "").replace("`", "")


def _criteria_table(scenario: Any) -> str:
    from pilot.view.oracle_text import criterion_intent

    rows = [
        f"\\texttt{{{_breakable_id(c.id)}}} & {latex_escape(c.kind.replace('_', ' '))} & "
        f"{'required' if c.required else 'optional'} & {latex_escape(criterion_intent(c))} \\\\"
        for c in scenario.oracle.criteria
    ]
    return (
        "\\begin{table}[htbp]\n\\centering\n\\footnotesize\n"
        f"\\caption{{The deterministic criteria of {latex_escape(scenario.id)} (\\texttt{{oracle.yml}}): "
        "$D=1$ needs every "
        "required criterion and no critical violation; an optional criterion is reported, never decisive.}\n"
        f"\\label{{tab:worked-criteria}}\n"
        "\\begin{tabular}{>{\\raggedright\\arraybackslash}p{3.6cm}>{\\raggedright\\arraybackslash}p{2.3cm}l"
        ">{\\raggedright\\arraybackslash}p{7.4cm}}\n\\toprule\n"
        "Criterion & Kind & Status & What it checks \\\\\n\\midrule\n"
        + "\n".join(rows)
        + "\n\\bottomrule\n\\end{tabular}\n\\end{table}"
    )


def _breakable_id(text: str) -> str:
    """An identifier escaped for LaTeX that may break after each underscore: the longest criterion ids would otherwise
    push the criteria table past the text width."""
    return latex_escape(text).replace("\\_", "\\_\\allowbreak ")


def _rubric_table(scenario_id: str) -> str:
    rows = [
        f"{latex_escape(c.id)} & {c.weight:g} & {latex_escape(c.anchors[0])} & {latex_escape(c.anchors[2])} & "
        f"{latex_escape(c.anchors[4])} \\\\"
        for c in scenario_criteria(scenario_id)
    ]
    col = ">{\\raggedright\\arraybackslash}p{3.6cm}"
    return (
        "\\begin{table}[htbp]\n\\centering\n\\footnotesize\n"
        f"\\caption{{The rubric of {latex_escape(scenario_id)} (\\texttt{{rubric.yml}}): each judge grades "
        "every criterion from 0 to 4 against these anchors (1 and 3 lie between them); a judge's score is the "
        "weighted mean, on 0--100.}\n"
        "\\label{tab:worked-rubric}\n"
        f"\\begin{{tabular}}{{lr{col}{col}{col}}}\n\\toprule\n"
        "Criterion & Weight & 0 & 2 & 4 \\\\\n\\midrule\n"
        + "\n".join(rows)
        + "\n\\bottomrule\n\\end{tabular}\n\\end{table}"
    )


def _package(rec: Mapping[str, Any], row: Mapping[str, Any], what: str, label: str) -> str:
    """One package as the evaluation saw it: the oracle's verdict per criterion and the judges' grades."""
    crit = [c for c in rec.get("criteria") or [] if isinstance(c, Mapping)]
    failed = [c for c in crit if not c.get("passed")]
    judges = [j for j in rec.get("judges") or [] if isinstance(j, Mapping) and j.get("score_0_100") is not None]
    rubric = [c.id for c in scenario_criteria(str(row["scenario"]))]
    grades = "; ".join(
        f"{latex_escape(str(j.get('judge_id')))}: "
        + (
            ", ".join(f"{latex_escape(k)} {(j.get('criterion_scores') or {}).get(k, '--')}" for k in rubric)
            if j.get("criterion_scores")
            else "no criterion scores recorded"
        )
        + f" (score {float(j['score_0_100']):.1f}, {'accept' if j.get('accept') else 'send back'})"
        for j in judges
    )
    # A record without criterion results (a run table's synthetic record) says so, never "every criterion passed".
    oracle = (
        "no criterion result recorded"
        if not crit
        else "every criterion passed"
        if not failed
        else "failed: "
        + ", ".join(
            f"\\texttt{{{latex_escape(str(c.get('id')))}}} ({'required' if c.get('required', True) else 'optional'})"
            for c in failed
        )
    )
    violations = "; ".join(latex_escape(str(r)) for r in rec.get("E_reasons") or []) or "none"
    q = row.get("Q")
    q_text = f"{float(q):.1f}" if q is not None and pd.notna(q) else "missing (no judge)"
    return (
        f"\\paragraph{{{what}.}} Run \\texttt{{{latex_escape(str(row['run_id']))}}} ({latex_escape(str(row['arm']))}, "
        f"repeat {int(row['repeat'])}{', ' + label if label else ''}). Oracle: {oracle}, so $D={int(bool(row['D']))}$; "
        f"critical violations: {violations}, so $E={int(bool(row['E']))}$. Judges: {grades or 'none scored it'}. "
        f"$Q={q_text}$ against $q={protocol.study().q:g}$, so $S={int(float(row['S']))}$."
    )


def worked_scenario(
    records: Iterable[Mapping[str, Any]], runs: pd.DataFrame, worker_model: str, label: str = ""
) -> str:
    """The appendix's LaTeX (label ``app:worked``), or "" when the study has no scored run of any scenario."""
    needed = {"run_id", "scenario", "arm", "repeat", "model", "D", "E", "Q", "S"}
    if runs is None or runs.empty or not needed <= set(runs.columns):
        return ""
    mine = runs[(runs["model"] == worker_model) & runs["S"].notna()]
    sid = pick_scenario(set(mine["scenario"].astype(str)))
    if not sid:
        return ""
    sc = load_scenario(sid)
    part = mine[mine["scenario"] == sid].sort_values("run_id")
    by_id = {str(r.get("run_id")): r for r in records}
    accepted = part[part["S"].astype(float) == 1]
    rejected = part[part["S"].astype(float) == 0]
    inputs = sorted(p for p in sc.inputs_dir.rglob("*") if p.is_file())
    deliverables = ", ".join(f"\\texttt{{{latex_escape(d.name)}}}" for d in sc.file_deliverables)
    tag = f"\\textbf{{{label}.}} " if label else ""
    parts = [
        "% Generated by the run report (pilot.report.worked_scenario); do not edit.",
        f"\\section{{A worked scenario: {latex_escape(sid)}}}\\label{{app:worked}}",
        f"{tag}This appendix follows one scenario of the study from its brief to two of its packages. "
        f"{latex_escape(sid)} ({latex_escape(sc.title)}) belongs to {latex_escape(sc.occupation)}, has designed "
        f"depth {sc.designed_depth} and "
        f"{sc.professional_minutes:g} professional minutes, runs under caps of \\${sc.caps.usd:.2f} and "
        f"{int(sc.caps.wall_s):,} s".replace(",", "{,}")
        + f", and asks for {deliverables} and the completion record.",
        "\\subsection*{The brief}",
        "\\begin{quote}\\small\n" + _brief(sc.brief) + "\n\\end{quote}",
        "\\subsection*{The inputs}",
        "The workspace holds "
        + ", ".join(
            f"\\texttt{{{latex_escape(p.relative_to(sc.inputs_dir).as_posix())}}} ({p.stat().st_size:,} bytes)".replace(
                ",", "{,}"
            )
            for p in inputs
        )
        + "; every arm receives the same files, and the input-hash check fails a run that changes any of them.",
        "\\subsection*{What is checked and how it is graded}",
        "Table~\\ref{tab:worked-criteria} lists the deterministic criteria and "
        "Table~\\ref{tab:worked-rubric} the rubric.",
        _criteria_table(sc),
        _rubric_table(sid),
        "\\subsection*{Two packages}",
    ]
    for frame, what in ((accepted, "An accepted package"), (rejected, "A rejected package")):
        if frame.empty:
            parts.append(f"\\paragraph{{{what}.}} No run of {latex_escape(sid)} in this study was {what.split()[-2]}.")
            continue
        row = frame.iloc[0]
        parts.append(_package(by_id.get(str(row["run_id"]), {}), row.to_dict(), what, label))
    return "\n\n".join(parts) + "\n"
