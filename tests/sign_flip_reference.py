"""The paired sign-flip test written the slow, obvious way: the reference :mod:`pilot.stats.resampling` is held to.

One loop over every sign vector (exact) or over seeded random ones, counting
the vectors whose mean is at least as extreme as the observed one on each side;
the two-sided p-value is twice the smaller tail, the observed vector counted in
the randomised case (as ``scipy.stats.permutation_test`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product

import numpy as np


def sign_flip_pvalue(d: Sequence[float], *, permutations: int = 20_000, seed: int = 0) -> tuple[float, bool]:
    """The two-sided p-value of the mean of ``d`` and whether every sign vector was used."""
    x = [float(v) for v in d]
    J = len(x)
    observed = sum(x) / J
    tol = 1e-12 * max(1.0, max(abs(v) for v in x))
    exact = 2**J <= permutations
    if exact:
        vectors: list[Sequence[float]] = list(product((1.0, -1.0), repeat=J))
    else:
        rng = np.random.default_rng(seed)
        vectors = [list(row) for row in np.where(rng.random((permutations, J)) < 0.5, -1.0, 1.0)]
    greater = less = 0
    for signs in vectors:
        t = sum(s * v for s, v in zip(signs, x, strict=True)) / J
        greater += t >= observed - tol
        less += t <= observed + tol
    adj = 0 if exact else 1
    n = len(vectors)
    return min(1.0, 2 * min((greater + adj) / (n + adj), (less + adj) / (n + adj))), exact
