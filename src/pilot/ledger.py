"""The study's dollar envelope: reservations before dispatch, settlement after.

Before a run is dispatched it reserves its worst case (its dollar cap plus the
judges' estimate ``judges.reserve_usd_per_run``); when the attempt ends the
reservation is replaced by what it cost: the model proxy's metered agent cost
where the proxy metered the attempt (every real backend; never the client's
own figure, which a side request or a forged result can put below what was
spent), the reported cost where nothing metered it (the simulated backend),
or kept whole as the charge when the cost is unknown (:func:`settlement`).
No reservation is granted that would take spent plus reserved over the
envelope (A-001).

Amounts are kept as integer micro-dollars so that the balance is exact and
``audit`` can demand equality rather than closeness. Every change happens in
the caller's ``BEGIN IMMEDIATE`` transaction: SQLite then holds the database's
write lock from the balance check to the commit, so two schedulers, threads
or processes reserving at once are serialised and the check cannot race.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

MICRO = 1_000_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_balance (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    envelope_micro INTEGER NOT NULL CHECK (envelope_micro > 0),
    spent_micro INTEGER NOT NULL DEFAULT 0,
    reserved_micro INTEGER NOT NULL DEFAULT 0 CHECK (reserved_micro >= 0)
);
CREATE TABLE IF NOT EXISTS ledger (
    entry_id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    run_id TEXT NOT NULL,
    attempt_id INTEGER,
    kind TEXT NOT NULL CHECK (kind IN ('reserve', 'settle')),
    reserved_delta_micro INTEGER NOT NULL,
    spent_delta_micro INTEGER NOT NULL,
    note TEXT
);
CREATE INDEX IF NOT EXISTS ledger_attempt ON ledger (attempt_id);
CREATE TABLE IF NOT EXISTS ledger_envelope (
    change_id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    old_micro INTEGER NOT NULL,
    new_micro INTEGER NOT NULL CHECK (new_micro > 0),
    amendment_id TEXT NOT NULL,
    note TEXT
);
"""


class LedgerError(RuntimeError):
    """The ledger was used outside a write transaction or does not balance."""


def to_micro(usd: float | Decimal | str) -> int:
    """Dollars to integer micro-dollars, exactly: a float goes through its shortest decimal form (0.1 is 100000)."""
    value = usd if isinstance(usd, Decimal) else Decimal(str(usd))
    if not value.is_finite():
        raise LedgerError(f"not a finite amount of dollars: {usd!r}")
    return int((value * MICRO).to_integral_value(rounding=ROUND_HALF_EVEN))


def to_usd(micro: int) -> float:
    return micro / MICRO


@dataclass(frozen=True)
class Balance:
    """The envelope's state at one moment, in dollars."""

    envelope_usd: float
    spent_usd: float
    reserved_usd: float

    @property
    def remaining_usd(self) -> float:
        """What may still be reserved: envelope minus spent minus reserved."""
        return self.envelope_usd - self.spent_usd - self.reserved_usd

    def as_dict(self) -> dict[str, float]:
        return {
            "envelope_usd": self.envelope_usd,
            "spent_usd": self.spent_usd,
            "reserved_usd": self.reserved_usd,
            "remaining_usd": self.remaining_usd,
        }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _require_write_txn(conn: sqlite3.Connection) -> None:
    if not conn.in_transaction:
        raise LedgerError("ledger changes must run inside a BEGIN IMMEDIATE transaction")


def initialise(conn: sqlite3.Connection, envelope_usd: float) -> None:
    """Create the balance row with the envelope (idempotent for the same envelope)."""
    row = conn.execute("SELECT envelope_micro FROM ledger_balance WHERE id = 1").fetchone()
    if row is None:
        conn.execute("INSERT INTO ledger_balance (id, envelope_micro) VALUES (1, ?)", (to_micro(envelope_usd),))
    elif row[0] != to_micro(envelope_usd):
        raise LedgerError(f"the store's envelope is {to_usd(row[0]):.2f} dollars, not {envelope_usd:.2f}")


def balance(conn: sqlite3.Connection) -> Balance:
    row = conn.execute("SELECT envelope_micro, spent_micro, reserved_micro FROM ledger_balance WHERE id = 1").fetchone()
    if row is None:
        raise LedgerError("the store has no ledger (study not created)")
    return Balance(to_usd(row[0]), to_usd(row[1]), to_usd(row[2]))


def reserve(conn: sqlite3.Connection, run_id: str, attempt_id: int, amount_micro: int) -> bool:
    """Reserve ``amount_micro`` for one attempt if the envelope allows it; False otherwise.

    Must be called inside the caller's BEGIN IMMEDIATE transaction, which
    holds the write lock from this check to the commit.
    """
    _require_write_txn(conn)
    if amount_micro < 0:
        raise LedgerError(f"a reservation cannot be negative ({amount_micro})")
    envelope, spent, reserved = conn.execute(
        "SELECT envelope_micro, spent_micro, reserved_micro FROM ledger_balance WHERE id = 1"
    ).fetchone()
    if spent + reserved + amount_micro > envelope:
        return False
    conn.execute("UPDATE ledger_balance SET reserved_micro = reserved_micro + ? WHERE id = 1", (amount_micro,))
    conn.execute(
        "INSERT INTO ledger (at, run_id, attempt_id, kind, reserved_delta_micro, spent_delta_micro, note) "
        "VALUES (?, ?, ?, 'reserve', ?, 0, NULL)",
        (_now(), run_id, attempt_id, amount_micro),
    )
    return True


def settlement(reserved_micro: int, cost_usd: float | Decimal | None, *, metered: bool = False) -> tuple[int, str]:
    """What an attempt is charged, and how that was reckoned.

    A known cost replaces the reservation: the model proxy's metered cost
    (``metered``: real backends) or the reported cost (the simulated
    backend, which has no proxy). An unknown cost (a session
    killed at the wall limit prints no result; a lost worker reports
    nothing) is charged at the whole reservation, the run's worst case, so
    that the envelope stays a hard limit; the note records that it was.
    """
    if cost_usd is None:
        return reserved_micro, "cost unknown: charged the whole reservation (worst case)"
    return to_micro(cost_usd), "charged the metered cost" if metered else "charged the reported cost"


def settle(
    conn: sqlite3.Connection, run_id: str, attempt_id: int, reserved_micro: int, charged_micro: int, note: str
) -> None:
    """Replace an attempt's reservation by what it cost."""
    _require_write_txn(conn)
    if charged_micro < 0:
        raise LedgerError(f"a charge cannot be negative ({charged_micro})")
    conn.execute(
        "UPDATE ledger_balance SET reserved_micro = reserved_micro - ?, spent_micro = spent_micro + ? WHERE id = 1",
        (reserved_micro, charged_micro),
    )
    conn.execute(
        "INSERT INTO ledger (at, run_id, attempt_id, kind, reserved_delta_micro, spent_delta_micro, note) "
        "VALUES (?, ?, ?, 'settle', ?, ?, ?)",
        (_now(), run_id, attempt_id, -reserved_micro, charged_micro, note),
    )


def set_envelope(conn: sqlite3.Connection, envelope_micro: int, amendment_id: str, note: str = "") -> tuple[int, int]:
    """Change the envelope under an amendment; returns (old, new) in micro-dollars.

    Refused (``LedgerError``) when the new envelope is below what is already
    spent plus reserved: money spent cannot be taken back.
    """
    _require_write_txn(conn)
    old, spent, reserved = conn.execute(
        "SELECT envelope_micro, spent_micro, reserved_micro FROM ledger_balance WHERE id = 1"
    ).fetchone()
    if envelope_micro <= 0:
        raise LedgerError(f"the envelope must be positive, got {to_usd(envelope_micro):.2f} dollars")
    if envelope_micro < spent + reserved:
        raise LedgerError(
            f"an envelope of {to_usd(envelope_micro):.2f} dollars is below what is already spent and reserved "
            f"({to_usd(spent + reserved):.2f}); choose at least that"
        )
    conn.execute("UPDATE ledger_balance SET envelope_micro = ? WHERE id = 1", (envelope_micro,))
    conn.execute(
        "INSERT INTO ledger_envelope (at, old_micro, new_micro, amendment_id, note) VALUES (?, ?, ?, ?, ?)",
        (_now(), old, envelope_micro, amendment_id, note),
    )
    return old, envelope_micro


def envelope_changes(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return [
        {"at": r[0], "old_usd": to_usd(r[1]), "new_usd": to_usd(r[2]), "amendment_id": r[3], "note": r[4]}
        for r in conn.execute(
            "SELECT at, old_micro, new_micro, amendment_id, note FROM ledger_envelope ORDER BY change_id"
        )
    ]


def audit(conn: sqlite3.Connection) -> list[str]:
    """Every way the ledger fails to balance; empty when it balances.

    Checks that the balance row equals the sum of the journal, that what is
    reserved equals the reservations of attempts still running, that what is
    spent equals what settled attempts were charged, and that spent plus
    reserved is within the envelope (a client that overshoots its own cap is
    the one way past it, and is reported here).
    """
    problems: list[str] = []
    envelope, spent, reserved = conn.execute(
        "SELECT envelope_micro, spent_micro, reserved_micro FROM ledger_balance WHERE id = 1"
    ).fetchone()
    j_res, j_spent = conn.execute(
        "SELECT COALESCE(SUM(reserved_delta_micro), 0), COALESCE(SUM(spent_delta_micro), 0) FROM ledger"
    ).fetchone()
    if (j_res, j_spent) != (reserved, spent):
        problems.append(
            f"balance row (reserved {reserved}, spent {spent}) differs from the journal ({j_res}, {j_spent}) "
            "[micro-dollars]"
        )
    running = conn.execute(
        "SELECT COALESCE(SUM(reserved_micro), 0) FROM attempts WHERE outcome = 'running'"
    ).fetchone()[0]
    if running != reserved:
        problems.append(
            f"reserved {reserved} differs from the reservations of running attempts {running} [micro-dollars]"
        )
    charged = conn.execute(
        "SELECT COALESCE(SUM(charged_micro), 0) FROM attempts WHERE outcome != 'running'"
    ).fetchone()[0]
    if charged != spent:
        problems.append(f"spent {spent} differs from the charges of finished attempts {charged} [micro-dollars]")
    unsettled = conn.execute(
        "SELECT COUNT(*) FROM attempts a WHERE outcome != 'running' AND NOT EXISTS "
        "(SELECT 1 FROM ledger l WHERE l.attempt_id = a.attempt_id AND l.kind = 'settle')"
    ).fetchone()[0]
    if unsettled:
        problems.append(f"{unsettled} finished attempt(s) have no settlement entry")
    last = conn.execute("SELECT new_micro FROM ledger_envelope ORDER BY change_id DESC LIMIT 1").fetchone()
    if last is not None and last[0] != envelope:
        problems.append(
            f"the envelope {to_usd(envelope):.2f} differs from its last recorded change ({to_usd(last[0]):.2f}) "
            "[unrecorded edit]"
        )
    if spent + reserved > envelope:
        problems.append(
            f"spent + reserved = {to_usd(spent + reserved):.6f} exceeds the envelope {to_usd(envelope):.2f} dollars"
        )
    return problems


class Ledger:
    """The envelope of one study's store, for callers outside the scheduler.

    The scheduler reserves and settles inside its own attempt transactions
    (``Store.begin_attempt`` / ``Store.finish_attempt``); this wrapper gives
    read access and the audit.
    """

    def __init__(self, store: Any) -> None:
        self.store = store

    def balance(self) -> Balance:
        return balance(self.store.conn)

    def audit(self) -> list[str]:
        return audit(self.store.conn)
