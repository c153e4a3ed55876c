"""The ``dask`` executor: each node is a ``dask.distributed`` worker.

A worker advertises its node through its name and its resources: ``slots=N``
(how many runs it holds at once) and one resource per capability
(``macos``, ``linux``, ``libreoffice``, ``chromium``, ``portal``), each
advertised with the value N so that a capability never binds before the
slots do. See ``docs/dask-nodes.md`` for starting workers on real machines.

The study's scheduler, not dask's, chooses the node (least-loaded eligible);
the run is then pinned to that worker's address (``workers=[address]``,
``allow_other_workers=False``) and consumes one slot plus its arm's
capabilities as resources, so dask itself refuses to place it anywhere that
cannot serve it. A worker that leaves the cluster while holding runs makes
each of them an infrastructure error, which the study's scheduler reruns
under the same run id; dask never retries a run on its own.

On the worker each attempt runs under its own supervisor process
(:mod:`pilot.executors.isolation`), so its process tree ends with it. The
task watches its own state: when its future is released or cancelled
(the study's scheduler stopped, died or lost the cluster), the attempt's
tree is ended rather than left spending unseen. A resume sweeps every
worker for processes an earlier scheduler's attempts left.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pilot import protocol
from pilot.executors import isolation, proctree
from pilot.attempt import AttemptOutcome, CellSpec
from pilot.nodes import Node
from pilot.executors.base import ScheduleError

SLOTS = "slots"


def nodes_from_workers(workers: dict[str, dict[str, Any]]) -> tuple[list[Node], dict[str, str]]:
    """Nodes from the scheduler's worker table, and node name -> worker address.

    A worker without a ``slots`` resource is not a study node and is skipped;
    two live workers with one name are an error (a node must be one worker).
    """
    nodes: list[Node] = []
    address: dict[str, str] = {}
    for addr, info in sorted(workers.items()):
        res = info.get("resources") or {}
        if SLOTS not in res:
            continue
        name = str(info.get("name", addr))
        if name in address:
            raise ScheduleError(f"two dask workers call themselves node {name!r} ({address[name]} and {addr})")
        caps = frozenset(k for k, v in res.items() if k in protocol.CAPABILITIES and v > 0)
        nodes.append(Node(name=name, capabilities=caps, slots=max(1, int(res[SLOTS]))))
        address[name] = addr
    return nodes, address


_GONE = ("cancelled", "released", "forgotten", "error", "memory")
LOST_AFTER_POLLS = 3


def run_attempt_on_worker(run_function: str | None, cell: CellSpec, attempt_dir: str, node: str, backend: str) -> AttemptOutcome:
    """The dask task: one isolated attempt, ended early if its future is released (its scheduler went away)."""
    should_stop = None
    try:
        from distributed import get_worker
        from distributed.worker import thread_state

        worker, key = get_worker(), thread_state.key

        def should_stop() -> bool:
            ts = worker.state.tasks.get(key)
            return ts is None or ts.state in _GONE

    except (ImportError, ValueError, AttributeError):
        pass  # not inside a dask worker (called directly): nothing to watch
    return isolation.run_isolated(run_function, cell, attempt_dir, node, backend, should_stop=should_stop)


class DaskExecutor:
    """Submit attempts to pinned workers of a ``dask.distributed`` cluster."""

    def __init__(self, scheduler: Any, run_function: str | None, requires: dict[str, tuple[str, ...]]) -> None:
        from distributed import Client

        self.address = str(getattr(getattr(scheduler, "scheduler", None), "address", scheduler))
        try:
            self.client = scheduler if isinstance(scheduler, Client) else Client(scheduler, timeout=15)
        except (OSError, TimeoutError) as exc:
            raise ScheduleError(
                f"cannot reach the dask scheduler at {scheduler} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                "start it (docs/dask-nodes.md) or correct --scheduler"
            ) from None
        self._owns_client = not isinstance(scheduler, Client)
        if self._owns_client:
            # A lost scheduler is reported once, by us, in one line; distributed's own tracebacks would bury it.
            for name in ["distributed", *[n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]]:
                logging.getLogger(name).setLevel(logging.CRITICAL)
        self.run_function = run_function
        self.requires = requires
        self._address: dict[str, str] = {}
        self._futures: dict[Any, tuple[int, str, str]] = {}  # future -> (token, node, address)
        self._gone_at_submit: list[tuple[int, AttemptOutcome]] = []
        self._missing: dict[str, int] = {}
        self.nodes()

    def _lost(self, exc: BaseException) -> ScheduleError:
        return ScheduleError(
            f"lost the dask scheduler at {self.address} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            "its attempts in flight are closed by the next `pilot study run` once the scheduler is back"
        )

    def _workers(self) -> dict[str, dict[str, Any]]:
        if self.client.status not in ("running", "newly-created"):
            # A client that lost its scheduler cancels every future and then retries the connection; a call on it
            # would wait for that, so the loss is reported now.
            raise self._lost(RuntimeError(f"client {self.client.status}"))
        try:
            return self.client.scheduler_info(n_workers=-1).get("workers", {})
        except (OSError, TimeoutError) as exc:
            raise self._lost(exc) from None

    def nodes(self) -> list[Node]:
        """The study nodes among the live workers (refreshed from the scheduler)."""
        nodes, self._address = nodes_from_workers(self._workers())
        return nodes

    def sweep(self, prefix: str) -> list[int]:
        """End, on every worker, processes left by attempts under ``prefix`` (called under the study's lock)."""
        try:
            found = self.client.run(proctree.sweep, prefix)
        except (OSError, TimeoutError) as exc:
            raise self._lost(exc) from None
        return [pid for pids in found.values() for pid in pids]

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None:
        addr = self._address.get(node)
        if addr is None:
            # The node left between the scheduler's choice and the submit: nothing ran.
            self._gone_at_submit.append((token, AttemptOutcome(infra_error=f"dask worker of node {node} was gone at submit", launched=False)))
            return
        resources = {SLOTS: 1, **{cap: 1 for cap in self.requires.get(cell.arm, ())}}
        fut = self.client.submit(
            run_attempt_on_worker,
            self.run_function,
            cell,
            str(attempt_dir),
            node,
            backend,
            key=f"attempt-{cell.run_id}-{Path(attempt_dir).name}",
            workers=[addr],
            allow_other_workers=False,
            resources=resources,
            retries=0,
            pure=False,
        )
        self._futures[fut] = (token, node, addr)

    def wait(self, timeout: float) -> list[tuple[int, AttemptOutcome]]:
        from distributed import wait as dask_wait

        out, self._gone_at_submit = self._gone_at_submit, []
        if not self._futures:
            return out
        try:
            dask_wait(list(self._futures), timeout=timeout, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        except OSError as exc:
            raise self._lost(exc) from None
        except Exception as exc:  # noqa: BLE001 - FuturesCancelledError: tell a lost scheduler from cancelled attempts
            if "connection" in str(exc).lower() or self.client.status != "running":
                raise self._lost(RuntimeError("the client lost its connection to the scheduler")) from None
        if self.client.status != "running":
            # "connecting" too: on losing its scheduler the client has already cancelled every attempt's future.
            raise self._lost(RuntimeError(f"client {self.client.status}"))
        if any(fut.status == "cancelled" for fut in self._futures):
            # Only the client cancels a future this executor still holds (its own cancels leave the table at once), and it
            # does so when it loses its scheduler: those attempts' fate is unknown, so the next run closes them as interrupted.
            raise self._lost(RuntimeError("the client cancelled the attempts in flight"))
        live = set(self._workers())
        # A worker counts as lost only when it is missing from several consecutive answers of the scheduler.
        self._missing = {a: self._missing.get(a, 0) + 1 for _, _, a in self._futures.values() if a not in live}
        for fut, (token, node, addr) in list(self._futures.items()):
            if fut.status == "finished":
                out.append((token, fut.result()))
            elif fut.status == "error":
                exc = fut.exception()
                out.append((token, AttemptOutcome(infra_error=f"dask task failed on node {node} ({addr}): {exc!r}", cost_usd=None)))
            elif self._missing.get(addr, 0) >= LOST_AFTER_POLLS:
                fut.cancel()
                out.append((token, AttemptOutcome(infra_error=f"dask worker of node {node} ({addr}) was lost while the attempt ran", cost_usd=None)))
            else:
                continue
            del self._futures[fut]
        return out

    def close(self) -> None:
        """Cancel the attempts in flight (each ends its process tree on its worker) and let go of the cluster."""
        try:
            if self._futures and self.client.status == "running":
                self.client.cancel(list(self._futures), force=True)
        except Exception:  # noqa: BLE001 - a lost scheduler cannot be told; its workers notice the released keys
            pass
        self._futures.clear()
        if self._owns_client:
            try:
                self.client.close(timeout=10)
            except Exception:  # noqa: BLE001
                pass
