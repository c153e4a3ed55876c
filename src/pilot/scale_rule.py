"""The preregistered scale rule, applied to what the pilot cost.

With c-bar the mean total cost per finished pilot run (agent and judges: the
proxy's metered agent cost for real backends, the reported one for the
simulated backend, and for a run whose finishing attempt has neither, such as
a session killed at its wall limit, that attempt's reservation; see
:meth:`pilot.store.Store.run_charges` and protocol/interpretations.md, Cost
of a run) and E_r the envelope left after the pilot (envelope minus spent
minus reserved, from the ledger):

1. add a third repeat if ``k * c_bar * n3 <= E_r - r3``;
2. then run the model sensitivities if ``k * c_bar * ns`` fits in what
   remains minus ``rs``, where what remains is E_r less the third repeat's
   projected cost ``k * c_bar * n3`` when the third repeat was added.

``k`` (1.15), ``n3`` (50), ``r3`` (100), ``ns`` (40) and ``rs`` (50) are read
from ``protocol/study.yml`` (``scale_rule``). The decision carries its inputs
and the amendment text it implies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Protocol

import pandas as pd

from pilot import protocol
from pilot.ledger import Balance, to_micro


def _fits(cost: float, limit: float) -> bool:
    """cost <= limit, both rounded to the micro-dollar (the ledger's unit) and compared as integers.

    A cost landing exactly on a limit is therefore not lost to binary rounding.
    """
    return to_micro(cost) <= to_micro(limit)


class ScaleRuleError(ValueError):
    """The rule cannot be applied (no finished pilot run, a negative cost)."""


@dataclass(frozen=True)
class ScaleInputs(Balance):
    """What the rule reads from the ledger: the envelope's balance (and its ``remaining_usd``), c-bar and the runs
    behind it.

    ``n_runs`` counts every finished run, all of them in c-bar;
    ``n_unknown_cost`` those charged their reservation because their finishing
    attempt has no reported or metered cost. ``c_bar_reported_usd`` is the
    sensitivity reading that leaves those runs out (None when none is left).
    """

    c_bar_usd: float
    n_runs: int
    n_unknown_cost: int = 0
    c_bar_reported_usd: float | None = None


@dataclass(frozen=True)
class ScaleDecision:
    """The rule's two conditions, their left and right sides, and what they imply."""

    inputs: ScaleInputs
    inflation: float
    third_runs: int
    third_reserve_usd: float
    sensitivity_runs: int
    sensitivity_reserve_usd: float
    sensitivity_models: tuple[str, ...]
    sensitivity_arm: str
    sensitivity_repeats: int

    @property
    def third_cost_usd(self) -> float:
        return self.inflation * self.inputs.c_bar_usd * self.third_runs

    @property
    def third_limit_usd(self) -> float:
        return self.inputs.remaining_usd - self.third_reserve_usd

    @property
    def add_third_repeat(self) -> bool:
        return _fits(self.third_cost_usd, self.third_limit_usd)

    @property
    def remaining_after_third_usd(self) -> float:
        return self.inputs.remaining_usd - (self.third_cost_usd if self.add_third_repeat else 0.0)

    @property
    def sensitivity_cost_usd(self) -> float:
        return self.inflation * self.inputs.c_bar_usd * self.sensitivity_runs

    @property
    def sensitivity_limit_usd(self) -> float:
        return self.remaining_after_third_usd - self.sensitivity_reserve_usd

    @property
    def run_sensitivities(self) -> bool:
        return _fits(self.sensitivity_cost_usd, self.sensitivity_limit_usd)

    @property
    def waves(self) -> list[str]:
        """The waves the rule adds, in the order they run."""
        return (["repeat3"] if self.add_third_repeat else []) + (["sensitivity"] if self.run_sensitivities else [])

    @property
    def summary(self) -> pd.DataFrame:
        rows = [
            ("finished pilot runs in c_bar", self.inputs.n_runs),
            ("of which charged their reservation (no reported or metered cost)", self.inputs.n_unknown_cost),
            ("mean total cost per run c_bar (USD)", self.inputs.c_bar_usd),
            ("envelope (USD)", self.inputs.envelope_usd),
            ("spent (USD)", self.inputs.spent_usd),
            ("reserved (USD)", self.inputs.reserved_usd),
            ("remaining envelope E_r (USD)", self.inputs.remaining_usd),
            (f"third repeat: {self.inflation:g} x c_bar x {self.third_runs} (USD)", self.third_cost_usd),
            (f"third repeat: E_r - {self.third_reserve_usd:g} (USD)", self.third_limit_usd),
            ("add third repeat", self.add_third_repeat),
            ("remaining after third repeat (USD)", self.remaining_after_third_usd),
            (f"sensitivities: {self.inflation:g} x c_bar x {self.sensitivity_runs} (USD)", self.sensitivity_cost_usd),
            (f"sensitivities: remaining - {self.sensitivity_reserve_usd:g} (USD)", self.sensitivity_limit_usd),
            ("run model sensitivities", self.run_sensitivities),
            *self._sensitivity_rows(),
        ]
        return pd.DataFrame({"quantity": [r[0] for r in rows], "value": [r[1] for r in rows]})

    @property
    def reported_only(self) -> ScaleDecision | None:
        """The same rule on the sensitivity reading of c-bar (runs without a reported or metered cost left out), if it
        differs."""
        inp = self.inputs
        if inp.c_bar_reported_usd is None or inp.n_unknown_cost == 0:
            return None
        return replace(
            self,
            inputs=replace(
                inp, c_bar_usd=inp.c_bar_reported_usd, n_runs=inp.n_runs - inp.n_unknown_cost, n_unknown_cost=0
            ),
        )

    def _sensitivity_rows(self) -> list[tuple[str, object]]:
        alt = self.reported_only
        if alt is None:
            return [
                (
                    "sensitivity: c_bar over reported or metered costs only",
                    "same as c_bar (no run charged its reservation)",
                )
            ]
        return [
            ("sensitivity: c_bar over reported or metered costs only (USD)", alt.inputs.c_bar_usd),
            ("sensitivity: runs in that c_bar", alt.inputs.n_runs),
            ("sensitivity: add third repeat", alt.add_third_repeat),
            ("sensitivity: run model sensitivities", alt.run_sensitivities),
        ]

    def amendment_text(self) -> str:
        """The amendment the decision implies, in the style of ``protocol/amendments.csv``."""
        c = self.inputs.c_bar_usd
        k = self.inflation
        third = (
            f"a third repeat was added ({k:g} x {c:.2f} x {self.third_runs} = {self.third_cost_usd:.2f} <= "
            f"remaining envelope {self.inputs.remaining_usd:.2f} - {self.third_reserve_usd:g} = "
            f"{self.third_limit_usd:.2f})"
            if self.add_third_repeat
            else f"no third repeat was added ({k:g} x {c:.2f} x {self.third_runs} = {self.third_cost_usd:.2f} > "
            f"remaining envelope {self.inputs.remaining_usd:.2f} - {self.third_reserve_usd:g} = "
            f"{self.third_limit_usd:.2f})"
        )
        models = " and ".join(self.sensitivity_models)
        sens_what = (
            f"the model sensitivities ({models} on {self.sensitivity_arm}, {self.sensitivity_repeats} repeats each)"
        )
        sens = (
            f"{sens_what} were run ({k:g} x {c:.2f} x {self.sensitivity_runs} = "
            f"{self.sensitivity_cost_usd:.2f} <= what remained {self.remaining_after_third_usd:.2f} - "
            f"{self.sensitivity_reserve_usd:g} = {self.sensitivity_limit_usd:.2f})"
            if self.run_sensitivities
            else f"{sens_what} were not run ({k:g} x {c:.2f} x {self.sensitivity_runs} = "
            f"{self.sensitivity_cost_usd:.2f} > what remained {self.remaining_after_third_usd:.2f} - "
            f"{self.sensitivity_reserve_usd:g} = {self.sensitivity_limit_usd:.2f})"
        )
        return (
            f"At a pilot mean total cost of {c:.2f} dollars per run (judges included, {self.inputs.n_runs} runs"
            + (
                f", {self.inputs.n_unknown_cost} of them charged their reservation for want of a reported "
                "or metered cost"
                if self.inputs.n_unknown_cost
                else ""
            )
            + "), "
            f"the preregistered scale rule was applied: {third}; {sens}."
        )


def decide(inputs: ScaleInputs, study: protocol.Study | None = None, n_scenarios: int | None = None) -> ScaleDecision:
    """Apply the rule with the constants of ``protocol/study.yml``.

    The rule's run counts (a third repeat, the model sensitivities) are stated for the
    design's ``n_scenarios``; a study of another scenario set (``n_scenarios``) has one
    run per scenario where the design has one, so both counts scale with its size.
    """
    study = study or protocol.study()
    third_runs, sensitivity_runs = rule_run_counts(study, n_scenarios)
    if inputs.n_runs < 1:
        raise ScaleRuleError("the scale rule needs at least one finished pilot run (c_bar is undefined)")
    if inputs.c_bar_usd < 0:
        raise ScaleRuleError(f"c_bar must not be negative, got {inputs.c_bar_usd}")
    rule = study["scale_rule"]
    sens = study["sensitivity_models"]
    return ScaleDecision(
        inputs=inputs,
        inflation=float(rule["cost_inflation"]),
        third_runs=third_runs,
        third_reserve_usd=float(rule["third_repeat"]["reserve_usd"]),
        sensitivity_runs=sensitivity_runs,
        sensitivity_reserve_usd=float(rule["sensitivity"]["reserve_usd"]),
        sensitivity_models=tuple(sens["models"]),
        sensitivity_arm=str(sens["arm"]),
        sensitivity_repeats=int(sens["repeats"]),
    )


def rule_run_counts(study: protocol.Study, n_scenarios: int | None = None) -> tuple[int, int]:
    """The runs of a third repeat and of the model sensitivities for a study of ``n_scenarios`` (default: the design's).

    ``study.yml`` states both for the design's ``n_scenarios``; a study of another scenario set has one
    run per scenario where the design has one, so both scale with its size, exactly or not at all.
    """
    design_n = int(study["design"]["n_scenarios"])
    n = design_n if n_scenarios is None else int(n_scenarios)
    if n < 1:
        raise ScaleRuleError(f"a study needs at least one scenario, got n_scenarios={n}")
    rule = study["scale_rule"]
    out = []
    for field, runs in (
        ("third_repeat", int(rule["third_repeat"]["runs"])),
        ("sensitivity", int(rule["sensitivity"]["runs"])),
    ):
        if (runs * n) % design_n:
            raise ScaleRuleError(
                f"study.yml scale_rule.{field}.runs = {runs} is not a whole number of runs per scenario "
                f"of the design's {design_n}"
            )
        out.append(runs * n // design_n)
    return out[0], out[1]


class ChargeReader(Protocol):
    """What the scale rule reads from a study's store (a :class:`pilot.store.Store`)."""

    path: Path

    def run_charges(self, wave: str | None = None) -> list[tuple[int, bool]]: ...
    def balance(self) -> Balance: ...


def inputs_from_store(store: ChargeReader, wave: str = "pilot") -> ScaleInputs:
    """c-bar over every finished run of ``wave``, and the envelope's balance, from a :class:`pilot.store.Store`.

    Restarts are left out: an attempt that did not finish its run and was
    charged its reservation (an interrupted scheduler, a lost worker) would
    otherwise inflate c-bar with worst cases, and an attempt that never
    launched cost nothing. A run whose finishing attempt has no reported or
    metered cost counts at that attempt's reservation, and is counted apart
    (``n_unknown_cost``), with c-bar over the other runs as the sensitivity.
    """
    charges = store.run_charges(wave)
    bal = store.balance()
    if not charges:
        raise ScaleRuleError(f"no finished {wave} run in the store {store.path}")
    observed = [m for m, reserved in charges if not reserved]
    return ScaleInputs(
        c_bar_usd=float(Decimal(sum(m for m, _ in charges)) / len(charges) / 1_000_000),
        n_runs=len(charges),
        n_unknown_cost=len(charges) - len(observed),
        c_bar_reported_usd=float(Decimal(sum(observed)) / len(observed) / 1_000_000) if observed else None,
        envelope_usd=bal.envelope_usd,
        spent_usd=bal.spent_usd,
        reserved_usd=bal.reserved_usd,
    )


def write_decision(
    decision: ScaleDecision,
    study_name: str,
    *,
    simulated: bool | str,
    tables_dir: Path,
    generated_dir: Path,
    figures_dir: Path | None = None,
) -> dict[str, Path]:
    """Write the decision, its inputs and the amendment text; returns the files written.

    ``tables_dir``: ``scale_rule_<study>.csv`` (inputs and both sides of each
    condition), ``scale_rule_<study>.json`` (the decision) and
    ``scale_rule_<study>_amendment.txt``; ``generated_dir``:
    ``scale_rule_macros.tex`` (one macro per number, the name the manuscript
    inputs); ``figures_dir``:
    ``scale_rule.pdf`` (the envelope and the two conditions). A
    decision taken on a study that is no finding says its label (``simulated``:
    SIMULATED, REHEARSAL, or True for SIMULATED) in each.
    """
    from pilot.latex import data_label, macro_name, write_macros

    tag = data_label(simulated)
    simulated = bool(tag)
    stem = f"scale_rule_{study_name}"
    tables_dir, generated_dir = Path(tables_dir), Path(generated_dir)
    tables_dir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    table = decision.summary.assign(study=study_name, backend="simulated" if simulated else "real")
    out["inputs"] = tables_dir / f"{stem}.csv"
    table.to_csv(out["inputs"], index=False)
    inp = decision.inputs
    payload = {
        "study": study_name,
        "simulated": simulated,
        "label": tag,
        "c_bar_usd": inp.c_bar_usd,
        "n_runs": inp.n_runs,
        "n_unknown_cost": inp.n_unknown_cost,
        "envelope_usd": inp.envelope_usd,
        "spent_usd": inp.spent_usd,
        "reserved_usd": inp.reserved_usd,
        "remaining_usd": inp.remaining_usd,
        "add_third_repeat": decision.add_third_repeat,
        "run_sensitivities": decision.run_sensitivities,
        "waves": decision.waves,
        "amendment": decision.amendment_text(),
    }
    out["decision"] = tables_dir / f"{stem}.json"
    out["decision"].write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    out["amendment"] = tables_dir / f"{stem}_amendment.txt"
    out["amendment"].write_text((f"[{tag}] " if tag else "") + decision.amendment_text() + "\n", encoding="utf-8")
    macros = {
        macro_name("scale", "cbar"): round(inp.c_bar_usd, 2),
        macro_name("scale", "n", "runs"): int(inp.n_runs),
        macro_name("scale", "n", "reservation"): int(inp.n_unknown_cost),
        macro_name("scale", "remaining"): round(inp.remaining_usd, 2),
        macro_name("scale", "third", "cost"): round(decision.third_cost_usd, 2),
        macro_name("scale", "third", "limit"): round(decision.third_limit_usd, 2),
        macro_name("scale", "sens", "cost"): round(decision.sensitivity_cost_usd, 2),
        macro_name("scale", "sens", "limit"): round(decision.sensitivity_limit_usd, 2),
        macro_name("scale", "third", "added"): "yes" if decision.add_third_repeat else "no",
        macro_name("scale", "sens", "run"): "yes" if decision.run_sensitivities else "no",
    }
    out["macros"] = write_macros(
        macros,
        Path(generated_dir) / "scale_rule_macros.tex",
        digits=2,
        comment=f"{tag} scale rule of study {study_name}".strip(),
    )
    if figures_dir is not None:
        out["figure"] = _figure(decision, Path(figures_dir) / "scale_rule.pdf", tag)
    return out


def _figure(decision: ScaleDecision, path: Path, tag: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.0, 2.1))  # included at 0.75 of the text width: drawn at about its printed size
    labels = ["third repeat", "sensitivities"]
    cost = [decision.third_cost_usd, decision.sensitivity_cost_usd]
    limit = [decision.third_limit_usd, decision.sensitivity_limit_usd]
    ax.barh(labels, limit, color="#d9d9d9", label="limit")
    ax.barh(labels, cost, height=0.4, color="#4477aa", label="projected cost")
    ax.set_xlabel("dollars")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    ax.set_title(
        (f"{tag}: " if tag else "") + f"scale rule at a mean run cost of \\${decision.inputs.c_bar_usd:.2f}", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path)
    fig.savefig(path.with_suffix(".png"), dpi=110)  # shown inline by the stage notebook
    plt.close(fig)
    return path
