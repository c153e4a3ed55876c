"""Seeded assignment of cells and their dispatch to the least-loaded eligible node.

A cell is one assigned run: (scenario, arm, repeat) in the pilot and
third-repeat waves, (scenario, A3, repeat, model) in the model-sensitivity
wave. A wave's cells are put in a canonical order, then permuted with a
generator seeded by the study seed and the wave, so the same seed and
protocol give the same order byte for byte (:func:`assignment_csv`).

The scheduler takes the cells in that order. Each goes to the eligible node
(its capabilities cover the arm's ``requires``) with the lowest load, runs in
flight over slots, ties broken by node name. When every eligible node is full
it waits, rather than letting a later cell overtake, so that arms stay
interleaved over time as the design asks. A cell that no node can serve stops
the study before anything is reserved. Each dispatch first reserves the run's
worst case in the ledger; when the envelope refuses, the scheduler waits for
runs in flight to settle and stops once none are left.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import heapq
import io
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilot import paths, protocol
from pilot.attempt import AttemptOutcome, CellSpec, launch_mark
from pilot.executors import proctree
from pilot.executors.base import Executor, RunFunction, ScheduleError  # re-exported
from pilot.nodes import Node, choose_node
from pilot.store import WAVES, Store

if TYPE_CHECKING:  # numpy and pandas load on first use: `pilot study run` starts without them
    import numpy as np
    import pandas as pd

__all__ = [
    "AttemptOutcome",
    "CellSpec",
    "RunFunction",
    "Scheduler",
    "ScheduleError",
    "UnservableCellError",
    "assign_order",
    "assignment_csv",
    "build_cells",
    "list_scenario_ids",
]

WAVE_CODES = {"pilot": 1, "repeat3": 3, "sensitivity": 7}
LOCK_FILE = "scheduler.lock"


class UnservableCellError(ScheduleError):
    """Some cells need capabilities that no node offers."""


def check_servable(cells: Iterable[CellSpec], nodes: Sequence[Node], requires: Mapping[str, Sequence[str]]) -> None:
    """Raise :class:`UnservableCellError` naming every arm whose cells no node can serve."""
    missing: dict[str, int] = {}
    for cell in cells:
        if cell.arm not in requires:
            raise ScheduleError(f"run {cell.run_id}: arm {cell.arm} is not defined in protocol/arms/arms.yml")
        if not any(n.serves(requires[cell.arm]) for n in nodes):
            missing[cell.arm] = missing.get(cell.arm, 0) + 1
    if missing:
        offered = "; ".join(f"{n.name}: {sorted(n.capabilities) or 'nothing'}" for n in nodes) or "no nodes"
        parts = [f"{count} run(s) of arm {arm} need {sorted(requires[arm])}" for arm, count in sorted(missing.items())]
        raise UnservableCellError(
            "no node can serve " + ", ".join(parts) + f" (nodes offer {offered}); nothing was dispatched or reserved"
        )


# --------------------------------------------------------------------------
# Cells and their seeded order
# --------------------------------------------------------------------------


def list_scenario_ids(explicit: Sequence[str] | None = None) -> list[str]:
    """Scenario ids: an explicit list, else ``pilot.scenarios.list_scenarios()``, else the folders under
    protocol/scenarios."""
    if explicit:
        return list(explicit)
    try:
        from pilot.scenarios import list_scenarios
    except ImportError:
        list_scenarios = None
    if list_scenarios is not None:
        return list(list_scenarios())
    if not paths.SCENARIOS_DIR.is_dir():
        return []
    return sorted(p.name for p in paths.SCENARIOS_DIR.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def run_seed(study_seed: int, run_id: str) -> int:
    """The seed a run's own random draws use: a hash of the study seed and the run id (not a draw)."""
    digest = hashlib.sha256(f"{int(study_seed)}:{run_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def run_id_for(scenario: str, arm: str, repeat: int, model: str | None = None) -> str:
    base = f"{scenario}.{arm}.r{repeat}"
    return f"{base}.{model}" if model else base


@dataclass(frozen=True)
class _Key:
    scenario: str
    arm: str
    repeat: int
    model: str
    sensitivity: bool


def _wave_keys(
    wave: str,
    scenarios: Sequence[str],
    study: protocol.Study,
    arms: Sequence[str] | None,
    repeats: Sequence[int] | None,
) -> list[_Key]:
    worker = study["worker"]["model"]
    if wave == "pilot":
        reps = list(repeats) if repeats is not None else list(range(1, study.pilot_repeats + 1))
        return [_Key(s, a, r, worker, False) for s in scenarios for a in (arms or study.arms) for r in reps]
    if wave == "repeat3":
        reps = list(repeats) if repeats is not None else [study.pilot_repeats + 1]
        return [_Key(s, a, r, worker, False) for s in scenarios for a in (arms or study.arms) for r in reps]
    if wave == "sensitivity":
        sens = study["sensitivity_models"]
        reps = list(repeats) if repeats is not None else list(range(1, int(sens["repeats"]) + 1))
        return [_Key(s, sens["arm"], r, m, True) for s in scenarios for m in sens["models"] for r in reps]
    raise ScheduleError(f"unknown wave {wave!r}; the waves are {', '.join(WAVES)}")


def assign_order(n: int, seed: int, wave: str) -> np.ndarray:
    """The seeded permutation of a wave's n cells (position k holds the canonical index run k-th)."""
    import numpy as np

    rng = np.random.default_rng(np.random.SeedSequence([int(seed), WAVE_CODES[wave]]))
    return rng.permutation(n)


def build_cells(
    study_name: str,
    wave: str,
    scenarios: Sequence[str],
    seed: int,
    *,
    study: protocol.Study | None = None,
    arms: Sequence[str] | None = None,
    repeats: Sequence[int] | None = None,
) -> list[CellSpec]:
    """A wave's cells in their seeded order, with caps, reservations and per-run seeds.

    ``arms`` and ``repeats`` override the protocol's (used for benchmarks and
    tests of scale); the run's worst case is its dollar cap plus the judges'
    reserve (``judges.reserve_usd_per_run``).
    """
    study = study or protocol.study()
    if not scenarios:
        raise ScheduleError("no scenarios: pass them explicitly or add scenario folders under protocol/scenarios/")
    if len(set(scenarios)) != len(scenarios):
        raise ScheduleError(f"duplicate scenario ids in {list(scenarios)}")
    keys = sorted(
        _wave_keys(wave, sorted(scenarios), study, arms, repeats), key=lambda k: (k.scenario, k.arm, k.repeat, k.model)
    )
    judge_reserve = float(study["judges"]["reserve_usd_per_run"])
    perm = assign_order(len(keys), seed, wave)
    caps_cache: dict[str, protocol.Caps] = {}
    cells = []
    for order_index, canonical in enumerate(perm.tolist()):
        k = keys[canonical]
        caps = caps_cache.get(k.scenario) or caps_cache.setdefault(k.scenario, study.caps_for(k.scenario))
        rid = run_id_for(k.scenario, k.arm, k.repeat, k.model if k.sensitivity else None)
        cells.append(
            CellSpec(
                run_id=rid,
                study=study_name,
                wave=wave,
                scenario=k.scenario,
                arm=k.arm,
                repeat=k.repeat,
                model=k.model,
                order_index=order_index,
                seed=run_seed(seed, rid),
                cap_usd=caps.usd,
                wall_s=caps.wall_s,
                reserve_usd=round(caps.usd + judge_reserve, 6),
            )
        )
    return cells


ASSIGNMENT_COLUMNS = [
    "wave",
    "order_index",
    "run_id",
    "scenario",
    "arm",
    "repeat",
    "model",
    "seed",
    "cap_usd",
    "wall_s",
    "reserve_usd",
]


def assignment_csv(cells: Iterable[CellSpec]) -> str:
    """The assignment as CSV text (the byte-for-byte reproducibility check compares these)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(ASSIGNMENT_COLUMNS)
    for c in cells:
        w.writerow([getattr(c, col) for col in ASSIGNMENT_COLUMNS])
    return buf.getvalue()


# --------------------------------------------------------------------------
# The dispatch loop
# --------------------------------------------------------------------------


@contextmanager
def study_lock(folder: Path) -> Iterator[None]:
    """Hold the study's scheduler lock (released by the kernel if the process dies)."""
    folder.mkdir(parents=True, exist_ok=True)
    fh = open(folder / LOCK_FILE, "a+")
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise ScheduleError(
                f"{folder / LOCK_FILE}: another scheduler (pid {holder}) is running this study; wait for "
                "it to finish or stop it, then run again"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fh.close()


@dataclass
class WaveResult:
    """What one call of :meth:`Scheduler.run` did."""

    wave: str
    dispatched: int = 0
    finished: int = 0
    infra_errors: int = 0
    recovered_interrupted: int = 0
    swept_processes: int = 0
    elapsed_s: float = 0.0
    stop_reason: str = "complete"
    counts: dict[str, int] = field(default_factory=dict)
    balance: dict[str, float] = field(default_factory=dict)
    #: Finished runs of the wave without a verdict (their evaluation could not run), in seeded order.
    unevaluated: list[str] = field(default_factory=list)
    #: The wave's failed runs grouped by cause, one line per cause (filled by :func:`pilot.study.run_study_wave`).
    failure_lines: list[str] = field(default_factory=list)
    #: Nodes that refused a run because their protocol is not the study's: node -> why (the first differing file);
    #: the wave dispatched nothing more to them.
    refused_nodes: dict[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> pd.DataFrame:
        rows = {
            "wave": self.wave,
            "dispatched attempts": self.dispatched,
            "runs finished": self.finished,
            "infrastructure errors": self.infra_errors,
            "interrupted attempts recovered": self.recovered_interrupted,
            "leftover processes ended": self.swept_processes,
            **{f"cells {k}": v for k, v in self.counts.items()},
            **{k: round(v, 6) for k, v in self.balance.items()},
            "elapsed seconds": round(self.elapsed_s, 3),
            "stop reason": self.stop_reason,
        }
        import pandas as pd

        return pd.DataFrame({"value": list(rows.values())}, index=pd.Index(list(rows), name="quantity"))


NodesProvider = Callable[[], list[Node]]


class Scheduler:
    """Dispatch one wave of a study's cells to nodes through an executor.

    ``nodes`` is a list (static virtual nodes) or a callable returning the
    live nodes (dask workers, which come and go). ``requires`` maps each
    arm to the capabilities it needs (defaults to ``protocol.arms()``).
    """

    def __init__(
        self,
        store: Store,
        executor: Executor,
        nodes: Sequence[Node] | NodesProvider,
        *,
        backend: str,
        requires: Mapping[str, Sequence[str]] | None = None,
        max_infra_attempts: int = 3,
        progress: bool = True,
        poll_s: float = 0.25,
        node_wait_s: float = 300.0,
    ) -> None:
        self.store = store
        self.executor = executor
        self._nodes_provider: NodesProvider = nodes if callable(nodes) else (lambda fixed=list(nodes): fixed)
        self.backend = backend
        self.requires = {
            k: tuple(v) for k, v in (requires or {a: arm.requires for a, arm in protocol.arms().items()}).items()
        }
        self.max_infra_attempts = int(max_infra_attempts)
        self.progress = progress
        self.poll_s = poll_s
        self.node_wait_s = node_wait_s
        self.workspace_root = store.folder / "workspaces"

    def run(
        self,
        wave: str,
        *,
        prepare: Callable[[Store], None] | None = None,
        on_start: Callable[[Store], None] | None = None,
    ) -> WaveResult:
        """Run every waiting cell of ``wave`` (resuming after any crash) until done, failed or out of envelope.

        Under the study's lock, before anything else: processes left by
        attempts of an earlier scheduler are ended, their attempts closed,
        then ``prepare(store)`` runs (e.g. adding a later wave's cells).
        ``on_start(store)`` runs once, when the first attempt of this call
        has its reservation and before it is launched (the freeze manifest
        is taken there, when a wave really starts).
        """
        with study_lock(self.store.folder):
            return self._run_locked(wave, prepare, on_start)

    def sweep(self) -> list[int]:
        """End processes that attempts of this study left behind (call under the lock)."""
        marks = [launch_mark(Path(a["workspace"])) for a in self.store.attempts() if a["outcome"] == "running"]
        prefix = str(self.workspace_root) + os.sep
        ended = proctree.sweep(prefix, marks)
        remote = getattr(self.executor, "sweep", None)
        if remote is not None:
            ended += remote(prefix)
        return ended

    def _run_locked(
        self, wave: str, prepare: Callable[[Store], None] | None, on_start: Callable[[Store], None] | None
    ) -> WaveResult:
        t0 = time.perf_counter()
        result = WaveResult(wave=wave)
        result.swept_processes = len(self.sweep())
        result.recovered_interrupted = len(self.store.recover_interrupted())
        if prepare is not None:
            prepare(self.store)
        waiting = self.store.cells(wave, "waiting")

        def live_nodes() -> list[Node]:
            # A node that refused a run for its protocol stays out of this wave, whatever the cluster says.
            return [n for n in self._nodes_provider() if n.name not in result.refused_nodes]

        nodes = live_nodes()
        check_servable(waiting, nodes, self.requires)

        heap: list[tuple[int, CellSpec]] = [(c.order_index, c) for c in waiting]
        heapq.heapify(heap)
        in_flight: dict[int, tuple[CellSpec, int, str]] = {}
        load: dict[str, int] = {}
        token = 0
        counts = self.store.counts(wave)
        bar = self._bar(wave, sum(counts.values()), counts["done"] + counts["failed"])
        no_node_since: float | None = None
        try:
            while True:
                blocked = None
                while heap:
                    cell = heap[0][1]
                    node = choose_node(self.requires[cell.arm], nodes, load)
                    if node is None:
                        blocked = "nodes" if any(n.serves(self.requires[cell.arm]) for n in nodes) else "no-node"
                        break
                    started = self.store.begin_attempt(cell, node, self.backend, self.workspace_root)
                    if started is None:
                        blocked = "envelope"
                        break
                    if on_start is not None:
                        # Runs while this first attempt is reserved but not launched: if it fails, a resume releases it.
                        on_start(self.store)
                        on_start = None
                    heapq.heappop(heap)
                    token += 1
                    in_flight[token] = (cell, started.attempt_id, node)
                    load[node] = load.get(node, 0) + 1
                    self.executor.submit(token, cell, node, started.workspace, self.backend)
                    result.dispatched += 1
                if not heap and not in_flight:
                    break
                if not in_flight:
                    if blocked == "envelope":
                        result.stop_reason = (
                            f"envelope exhausted: {len(heap)} run(s) left waiting; the next needs "
                            f"{heap[0][1].reserve_usd:.2f} dollars, "
                            f"{self.store.balance().remaining_usd:.2f} remain"
                        )
                        break
                    if blocked == "no-node":
                        no_node_since = no_node_since or time.monotonic()
                        if time.monotonic() - no_node_since > self.node_wait_s:
                            cell = heap[0][1]
                            result.stop_reason = (
                                f"no live node can serve run {cell.run_id} (arm {cell.arm} needs "
                                f"{list(self.requires[cell.arm])}"
                                + (
                                    f"; refused for their protocol: {', '.join(sorted(result.refused_nodes))}"
                                    if result.refused_nodes
                                    else ""
                                )
                                + ") "
                                f"after waiting {self.node_wait_s:.0f} s; {len(heap)} run(s) left waiting"
                            )
                            break
                        time.sleep(self.poll_s)
                        nodes = live_nodes()
                        continue
                no_node_since = None
                for tok, outcome in self.executor.wait(self.poll_s):
                    cell, attempt_id, node = in_flight.pop(tok)
                    load[node] -= 1
                    status = self.store.finish_attempt(attempt_id, outcome, max_infra_attempts=self.max_infra_attempts)
                    if outcome.infra_error is not None:
                        result.infra_errors += 1
                    if getattr(outcome, "refused_by_node", None):
                        result.refused_nodes.setdefault(node, str(outcome.refused_by_node))
                    if status == "waiting":
                        heapq.heappush(heap, (cell.order_index, cell))
                    else:
                        result.finished += status == "done"
                        if bar is not None:
                            bar.update(1)
                    if bar is not None:
                        bal = self.store.balance()
                        bar.set_postfix_str(
                            f"spent ${bal.spent_usd:.2f} reserved ${bal.reserved_usd:.2f}", refresh=False
                        )
                nodes = live_nodes()  # live nodes may have come or gone (dask)
        finally:
            if bar is not None:
                bar.close()
        result.elapsed_s = time.perf_counter() - t0
        result.counts = self.store.counts(wave)
        result.balance = self.store.balance().as_dict()
        return result

    def _bar(self, wave: str, total: int, initial: int) -> Any:
        if not self.progress:
            return None
        from tqdm import tqdm

        return tqdm(
            total=total, initial=initial, desc=f"{self.store.study().name} {wave}", unit="run", dynamic_ncols=True
        )
