"""Which packages are graded, and by whom: a seeded stratified sample and a balanced incomplete design.

Every package goes to ``k`` distinct graders of its scenario's occupation.
Within each grader the arms are balanced (counts differ by at most one
wherever the packages of the grader's occupations allow it), loads across
graders of an occupation are as even as possible, and each grader's queue
is put in its own random order, so position carries no arm. No grader is
given the same run twice (one assignment per package and grader).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pilot.grading.graders import Grader


class AssignmentError(ValueError):
    """No plan with the requested properties exists; the message says which occupation or stratum lacks what."""


@dataclass(frozen=True)
class Package:
    """A finished run offered for grading (``arm`` and ``model`` never reach a grader)."""

    run_id: str
    scenario: str
    arm: str
    model: str
    occupation: str

    @property
    def stratum(self) -> tuple[str, str]:
        return (self.scenario, self.arm)


@dataclass(frozen=True)
class Assignment:
    package: Package
    grader_id: str
    slot: int  # 1..k: the package's first, second, ... grader
    position: int  # 1..n: where it sits in the grader's queue


def draw_sample(packages: Sequence[Package], per_stratum: int | None, seed: int) -> list[Package]:
    """All packages (``per_stratum`` None) or ``per_stratum`` drawn without replacement from each scenario x arm.

    A stratum with fewer packages gives all it has. The draw depends only on
    the seed and the run ids, not on the order the packages are listed in.
    """
    if per_stratum is not None and per_stratum < 1:
        raise AssignmentError(f"--sample {per_stratum}: a stratified sample takes at least one package per stratum")
    by_stratum: dict[tuple[str, str], list[Package]] = defaultdict(list)
    for p in sorted(packages, key=lambda p: p.run_id):
        by_stratum[p.stratum].append(p)
    rng = random.Random(seed)
    chosen: list[Package] = []
    for stratum in sorted(by_stratum):
        members = by_stratum[stratum]
        if per_stratum is None or per_stratum >= len(members):
            chosen.extend(members)
        else:
            chosen.extend(sorted(rng.sample(members, per_stratum), key=lambda p: p.run_id))
    return chosen


def _eligible(graders: Iterable[Grader]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for g in graders:
        for occ in g.occupations:
            out[occ.lower()].append(g.grader_id)
    return out


def arm_spread(assignments: Iterable[Assignment]) -> dict[str, int]:
    """Per grader: the largest minus the smallest count over the arms of the plan (0 is perfect balance)."""
    plan = list(assignments)
    arms = sorted({a.package.arm for a in plan})
    counts: dict[str, Counter] = defaultdict(Counter)
    for a in plan:
        counts[a.grader_id][a.package.arm] += 1
    return {g: max(c[arm] for arm in arms) - min(c[arm] for arm in arms) for g, c in sorted(counts.items())}


def assign(packages: Sequence[Package], graders: Sequence[Grader], k: int, seed: int) -> list[Assignment]:
    """The balanced incomplete design: ``k`` graders per package, arms balanced within grader, queues shuffled.

    Greedy in interleaved arm order (each package goes to the eligible graders
    with the fewest packages of its arm, then the fewest in all, ties broken
    by the seeded draw), then pairwise exchanges between graders of the same
    occupation while one lowers an arm imbalance without raising a load.
    """
    if k < 2:
        raise AssignmentError(f"--per-package {k}: agreement needs at least two graders per package")
    eligible = _eligible(graders)
    for occ in sorted({p.occupation.lower() for p in packages}):
        have = eligible.get(occ, [])
        if len(have) < k:
            raise AssignmentError(
                f"occupation {occ!r} has {len(have)} grader(s) in the graders file ({', '.join(have) or 'none'}); "
                f"--per-package {k} needs at least {k}"
            )
    rng = random.Random(seed)
    # Interleave the arms: a round takes one package of every arm (each arm's packages in a seeded order).
    by_arm: dict[str, list[Package]] = defaultdict(list)
    for p in sorted(packages, key=lambda p: p.run_id):
        by_arm[p.arm].append(p)
    for arm in sorted(by_arm):
        rng.shuffle(by_arm[arm])
    order: list[Package] = []
    for i in range(max((len(v) for v in by_arm.values()), default=0)):
        order.extend(by_arm[arm][i] for arm in sorted(by_arm) if i < len(by_arm[arm]))
    tiebreak = {g.grader_id: rng.random() for g in graders}
    per_arm: dict[str, Counter] = defaultdict(Counter)
    load: Counter = Counter()
    graders_of: dict[str, list[str]] = {}
    for p in order:
        pool = eligible[p.occupation.lower()]
        chosen = sorted(pool, key=lambda g: (per_arm[g][p.arm], load[g], tiebreak[g]))[:k]
        graders_of[p.run_id] = chosen
        for g in chosen:
            per_arm[g][p.arm] += 1
            load[g] += 1
    _exchange(order, graders_of, eligible, per_arm)
    # Each grader's queue in its own random order; slots in the order the graders were chosen.
    queues: dict[str, list[Package]] = defaultdict(list)
    for p in order:
        for g in graders_of[p.run_id]:
            queues[g].append(p)
    position: dict[tuple[str, str], int] = {}
    for g in sorted(queues):
        q = sorted(queues[g], key=lambda p: p.run_id)
        rng.shuffle(q)
        for i, p in enumerate(q, start=1):
            position[(g, p.run_id)] = i
    return [
        Assignment(p, g, slot, position[(g, p.run_id)])
        for p in sorted(order, key=lambda p: p.run_id)
        for slot, g in enumerate(graders_of[p.run_id], start=1)
    ]


def _imbalance(c: Mapping[str, int], arms: Sequence[str]) -> int:
    return max(c.get(a, 0) for a in arms) - min(c.get(a, 0) for a in arms)


def _exchange(
    order: list[Package],
    graders_of: dict[str, list[str]],
    eligible: Mapping[str, list[str]],
    per_arm: dict[str, Counter],
    max_rounds: int = 200,
) -> None:
    """Swap packages of different arms between two graders while that lowers their combined arm imbalance.

    A swap gives grader ``g`` a package ``q`` of ``h`` and ``h`` a package
    ``p`` of ``g``: both keep their loads, neither may already hold the other
    package, and both must be eligible for what they receive.
    """
    arms = sorted({p.arm for p in order})
    occupation_of = {p.run_id: p.occupation.lower() for p in order}
    arm_of = {p.run_id: p.arm for p in order}
    for _ in range(max_rounds):
        improved = False
        worst = sorted(per_arm, key=lambda g: -_imbalance(per_arm[g], arms))
        for g in worst:
            if _imbalance(per_arm[g], arms) <= 1:
                break
            hi = max(arms, key=lambda a: per_arm[g].get(a, 0))
            lo = min(arms, key=lambda a: per_arm[g].get(a, 0))
            mine = [r for r, gs in graders_of.items() if g in gs and arm_of[r] == hi]
            for p in mine:
                for h in eligible[occupation_of[p]]:
                    if h == g or h in graders_of[p]:
                        continue
                    theirs = [
                        q
                        for q, gs in graders_of.items()
                        if h in gs and g not in gs and arm_of[q] == lo and g in eligible[occupation_of[q]]
                    ]
                    for q in theirs:
                        before = _imbalance(per_arm[g], arms) + _imbalance(per_arm[h], arms)
                        per_arm[g][hi] -= 1
                        per_arm[g][lo] += 1
                        per_arm[h][lo] -= 1
                        per_arm[h][hi] += 1
                        after = _imbalance(per_arm[g], arms) + _imbalance(per_arm[h], arms)
                        if after < before:
                            graders_of[p] = [h if x == g else x for x in graders_of[p]]
                            graders_of[q] = [g if x == h else x for x in graders_of[q]]
                            improved = True
                            break
                        per_arm[g][hi] += 1
                        per_arm[g][lo] -= 1
                        per_arm[h][lo] += 1
                        per_arm[h][hi] -= 1
                    if improved:
                        break
                if improved:
                    break
            if improved:
                break
        if not improved:
            return
