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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pilot import protocol
from pilot.executors.base import AttemptOutcome, CellSpec, execute_attempt
from pilot.schedule import Node, ScheduleError

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


class DaskExecutor:
    """Submit attempts to pinned workers of a ``dask.distributed`` cluster."""

    def __init__(self, scheduler: Any, run_function: str | None, requires: dict[str, tuple[str, ...]]) -> None:
        from distributed import Client

        self.client = scheduler if isinstance(scheduler, Client) else Client(scheduler)
        self._owns_client = not isinstance(scheduler, Client)
        self.run_function = run_function
        self.requires = requires
        self._address: dict[str, str] = {}
        self._futures: dict[Any, tuple[int, str, str]] = {}  # future -> (token, node, address)
        self._gone_at_submit: list[tuple[int, AttemptOutcome]] = []
        self.nodes()

    def nodes(self) -> list[Node]:
        """The study nodes among the live workers (refreshed from the scheduler)."""
        info = self.client.scheduler_info(n_workers=-1)
        nodes, self._address = nodes_from_workers(info.get("workers", {}))
        return nodes

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None:
        addr = self._address.get(node)
        if addr is None:
            # The node left between the scheduler's choice and the submit: nothing ran.
            self._gone_at_submit.append((token, AttemptOutcome(infra_error=f"dask worker of node {node} was gone at submit")))
            return
        resources = {SLOTS: 1, **{cap: 1 for cap in self.requires.get(cell.arm, ())}}
        fut = self.client.submit(
            execute_attempt,
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
        live = set(self.client.scheduler_info(n_workers=-1).get("workers", {}))
        for fut, (token, node, addr) in list(self._futures.items()):
            if fut.status == "finished":
                out.append((token, fut.result()))
            elif fut.status in ("error", "cancelled"):
                exc = fut.exception() if fut.status == "error" else "cancelled"
                out.append((token, AttemptOutcome(infra_error=f"dask task failed on node {node} ({addr}): {exc!r}", cost_usd=None)))
            elif addr not in live:
                fut.cancel()
                out.append((token, AttemptOutcome(infra_error=f"dask worker of node {node} ({addr}) was lost while the attempt ran", cost_usd=None)))
            else:
                continue
            del self._futures[fut]
        return out

    def close(self) -> None:
        for fut in list(self._futures):
            fut.cancel()
        self._futures.clear()
        if self._owns_client:
            self.client.close()
