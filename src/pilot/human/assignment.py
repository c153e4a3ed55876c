"""Randomisation of a human wave: conditions within occupation by a seeded permutation, scenarios to their quota.

Within each occupation (``protocol/human/protocol.md``, "Randomisation"):

1. the occupation's places are laid out in blocks: for each level
   ``k = 1 .. per_condition``, every scenario of the occupation (in an order
   drawn once), and within each scenario the conditions in an order drawn
   for that block. Filled in order, the places keep each scenario's two
   conditions within one participant of each other, and each scenario within
   one block of every other, whatever the number of participants;
2. the occupation's participants, in file order, are put in a seeded random
   permutation, and the i-th of the permutation takes the i-th place.

So the condition a participant gets is decided by the permutation alone,
before anyone is seen; each scenario reaches ``per_condition`` participants
per condition once the occupation has recruited ``scenarios x conditions x
per_condition`` people. More participants than places are refused (they
would have no place), naming the occupation.

Every draw comes from one :class:`random.Random` per occupation seeded with
the study, the wave, the seed and the occupation, so a wave's plan is a
function of its inputs and can be recomputed by anyone.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pilot.human.participants import Participant


class AssignmentError(ValueError):
    """No plan can be made (an occupation has more participants than places, or no scenario)."""


@dataclass(frozen=True)
class Placement:
    """One participant's place: the scenario, the condition and the repeat number of that (scenario, condition)."""

    participant: Participant
    scenario: str
    condition: str
    repeat: int
    #: The participant's position in the wave's plan (occupations in turn, each in its place order).
    position: int


def occupation_stream(study: str, wave: str, seed: int, occupation: str) -> random.Random:
    """The seeded stream of one occupation's draws (the place order, then the permutation)."""
    return random.Random(f"human-wave:{study}:{wave}:{int(seed)}:{occupation}")


def places(
    scenarios: Sequence[str], conditions: Sequence[str], per_condition: int, rng: random.Random
) -> list[tuple[str, str]]:
    """The occupation's places in filling order: blocks of every scenario, each with its conditions in a drawn order."""
    order = list(scenarios)
    rng.shuffle(order)
    out: list[tuple[str, str]] = []
    for _ in range(per_condition):
        for scenario in order:
            conds = list(conditions)
            rng.shuffle(conds)
            out.extend((scenario, c) for c in conds)
    return out


def assign(
    participants: Sequence[Participant],
    scenarios_by_occupation: Mapping[str, Sequence[str]],
    conditions: Sequence[str],
    per_condition: int,
    *,
    study: str,
    wave: str,
    seed: int,
    repeats_taken: Mapping[tuple[str, str], int] | None = None,
) -> list[Placement]:
    """Every participant's place (see the module's description).

    ``repeats_taken`` counts the repeats each (scenario, condition) already
    has in earlier waves of the study, so that the numbers continue and a
    (scenario, condition, repeat) is never given twice.
    """
    if per_condition < 1:
        raise AssignmentError(f"per_condition must be at least 1, got {per_condition}")
    taken = dict(repeats_taken or {})
    by_occupation: dict[str, list[Participant]] = {}
    for p in participants:
        by_occupation.setdefault(p.occupation, []).append(p)
    out: list[Placement] = []
    for occupation in sorted(by_occupation):
        people = by_occupation[occupation]
        scen = sorted(scenarios_by_occupation.get(occupation, ()))
        if not scen:
            raise AssignmentError(f"occupation {occupation!r} has no scenario in this study")
        rng = occupation_stream(study, wave, seed, occupation)
        slots = places(scen, conditions, per_condition, rng)
        if len(people) > len(slots):
            raise AssignmentError(
                f"occupation {occupation!r} has {len(people)} eligible participants for {len(slots)} places "
                f"({len(scen)} scenario(s) x {len(conditions)} conditions x {per_condition}); "
                "recruit the rest for another wave, or give a larger per-condition number"
            )
        permuted = list(people)
        rng.shuffle(permuted)
        for person, (scenario, condition) in zip(permuted, slots[: len(permuted)], strict=True):
            taken[(scenario, condition)] = taken.get((scenario, condition), 0) + 1
            out.append(Placement(person, scenario, condition, taken[(scenario, condition)], len(out)))
    return out


def run_id(scenario: str, condition: str, wave: str, repeat: int) -> str:
    """The run id of a human session: scenario, condition, wave and repeat (nothing of the person)."""
    return f"{scenario}.{condition}.{wave}.r{repeat}"
