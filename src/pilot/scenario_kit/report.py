"""What ``pilot scenarios check`` finds: one row per check of one scenario, and the report over several."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

PASS = "pass"
FAIL = "FAIL"


@dataclass(frozen=True)
class CheckRow:
    """One check of one scenario: its verdict and, when it fails (or says something worth reading), why."""

    scenario: str
    check: str
    ok: bool
    reason: str = ""
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        return PASS if self.ok else FAIL


@dataclass
class CheckReport:
    """Every row of a ``pilot scenarios check`` run; ``ok`` when no row failed."""

    rows: list[CheckRow] = field(default_factory=list)

    def extend(self, rows: Iterable[CheckRow]) -> None:
        self.rows.extend(rows)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def failures(self) -> list[CheckRow]:
        return [r for r in self.rows if not r.ok]

    @property
    def summary(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "scenario": r.scenario,
                    "check": r.check,
                    "verdict": r.verdict,
                    "reason": r.reason,
                    "seconds": round(r.seconds, 2),
                }
                for r in self.rows
            ],
            columns=["scenario", "check", "verdict", "reason", "seconds"],
        )
