"""The preregistered scale rule, applied to what the pilot cost.

With c-bar the mean total cost per pilot run (agent and judges, every attempt
of the run) and E_r the envelope left after the pilot (envelope minus spent
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

from dataclasses import dataclass

import pandas as pd

from pilot import protocol


class ScaleRuleError(ValueError):
    """The rule cannot be applied (no finished pilot run, a negative cost)."""


@dataclass(frozen=True)
class ScaleInputs:
    """What the rule reads from the ledger."""

    c_bar_usd: float
    n_runs: int
    envelope_usd: float
    spent_usd: float
    reserved_usd: float

    @property
    def remaining_usd(self) -> float:
        return self.envelope_usd - self.spent_usd - self.reserved_usd


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
        return self.third_cost_usd <= self.third_limit_usd

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
        return self.sensitivity_cost_usd <= self.sensitivity_limit_usd

    @property
    def waves(self) -> list[str]:
        """The waves the rule adds, in the order they run."""
        return (["repeat3"] if self.add_third_repeat else []) + (["sensitivity"] if self.run_sensitivities else [])

    @property
    def summary(self) -> pd.DataFrame:
        rows = [
            ("pilot runs finished", self.inputs.n_runs),
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
        ]
        return pd.DataFrame({"quantity": [r[0] for r in rows], "value": [r[1] for r in rows]})

    def amendment_text(self) -> str:
        """The amendment the decision implies, in the style of ``protocol/amendments.csv``."""
        c = self.inputs.c_bar_usd
        k = self.inflation
        third = (
            f"a third repeat was added ({k:g} x {c:.2f} x {self.third_runs} = {self.third_cost_usd:.2f} <= "
            f"remaining envelope {self.inputs.remaining_usd:.2f} - {self.third_reserve_usd:g} = {self.third_limit_usd:.2f})"
            if self.add_third_repeat
            else f"no third repeat was added ({k:g} x {c:.2f} x {self.third_runs} = {self.third_cost_usd:.2f} > "
            f"remaining envelope {self.inputs.remaining_usd:.2f} - {self.third_reserve_usd:g} = {self.third_limit_usd:.2f})"
        )
        models = " and ".join(self.sensitivity_models)
        sens_what = f"the model sensitivities ({models} on {self.sensitivity_arm}, {self.sensitivity_repeats} repeats each)"
        sens = (
            f"{sens_what} were run ({k:g} x {c:.2f} x {self.sensitivity_runs} = {self.sensitivity_cost_usd:.2f} <= "
            f"what remained {self.remaining_after_third_usd:.2f} - {self.sensitivity_reserve_usd:g} = {self.sensitivity_limit_usd:.2f})"
            if self.run_sensitivities
            else f"{sens_what} were not run ({k:g} x {c:.2f} x {self.sensitivity_runs} = {self.sensitivity_cost_usd:.2f} > "
            f"what remained {self.remaining_after_third_usd:.2f} - {self.sensitivity_reserve_usd:g} = {self.sensitivity_limit_usd:.2f})"
        )
        return (
            f"At a pilot mean total cost of {c:.2f} dollars per run (judges included, {self.inputs.n_runs} runs), "
            f"the preregistered scale rule was applied: {third}; {sens}."
        )


def decide(inputs: ScaleInputs, study: protocol.Study | None = None) -> ScaleDecision:
    """Apply the rule with the constants of ``protocol/study.yml``."""
    study = study or protocol.study()
    if inputs.n_runs < 1:
        raise ScaleRuleError("the scale rule needs at least one finished pilot run (c_bar is undefined)")
    if inputs.c_bar_usd < 0:
        raise ScaleRuleError(f"c_bar must not be negative, got {inputs.c_bar_usd}")
    rule = study["scale_rule"]
    sens = study["sensitivity_models"]
    return ScaleDecision(
        inputs=inputs,
        inflation=float(rule["cost_inflation"]),
        third_runs=int(rule["third_repeat"]["runs"]),
        third_reserve_usd=float(rule["third_repeat"]["reserve_usd"]),
        sensitivity_runs=int(rule["sensitivity"]["runs"]),
        sensitivity_reserve_usd=float(rule["sensitivity"]["reserve_usd"]),
        sensitivity_models=tuple(sens["models"]),
        sensitivity_arm=str(sens["arm"]),
        sensitivity_repeats=int(sens["repeats"]),
    )


def inputs_from_store(store: "object", wave: str = "pilot") -> ScaleInputs:
    """c-bar over the finished runs of ``wave`` and the envelope's balance, from a :class:`pilot.store.Store`."""
    costs = store.run_costs(wave)  # type: ignore[attr-defined]
    bal = store.balance()  # type: ignore[attr-defined]
    if not costs:
        raise ScaleRuleError(f"no finished {wave} run in the store {store.path}")  # type: ignore[attr-defined]
    return ScaleInputs(
        c_bar_usd=sum(costs) / len(costs),
        n_runs=len(costs),
        envelope_usd=bal.envelope_usd,
        spent_usd=bal.spent_usd,
        reserved_usd=bal.reserved_usd,
    )
