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

The workers share nothing with the study's host but the network. Each
task carries the study's protocol identity (:mod:`pilot.identity`): the
worker computes its own before it accepts the run and refuses, naming the
first differing file, when they differ (the study then sends that node
nothing more in the wave). An accepted attempt runs in a private folder of
the worker's own (:func:`private_attempt_dir`), laid out from the worker's
clone (whose digests the identity has just matched); when it ends, what the
study keeps of it is packed with a manifest of sizes and SHA-256 digests
(:mod:`pilot.executors.transfer`) and returned as the task's result. The
study's host unpacks it where a local attempt would have written it,
verifies every digest, and only then hands the outcome to the scheduler,
which commits the run. A package that fails (to pack on the worker, or to
unpack and verify here) after the attempt reached its outcome leaves that
outcome standing, evaluated and judged where it ran, with the failure named
as a harness fault on its record and the package kept apart for
inspection: a transfer after inference never gives a run a fresh draw. An
attempt that failed before inference is an infrastructure error, rerun. Evaluation and judging
ran on the worker, beside LibreOffice and the CLI; the verdict stands for
the files the study holds because the digests prove they are the files
evaluated.

On the worker each attempt runs under its own supervisor process
(:mod:`pilot.executors.isolation`), so its process tree ends with it. The
task watches its own state: when its future is released or cancelled
(the study's scheduler stopped, died or lost the cluster), the attempt's
tree is ended rather than left spending unseen. A resume sweeps every
worker for processes an earlier scheduler's attempts left.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot import paths, protocol
from pilot.attempt import AttemptOutcome, CellSpec, with_harness_fault
from pilot.executors import isolation, proctree
from pilot.executors.base import ScheduleError
from pilot.nodes import Node

SLOTS = "slots"
#: Where a worker keeps its attempts' private folders (default: ``analysis/worker-attempts`` of its own clone).
WORKER_DIR_ENV = "PILOT_WORKER_DIR"


def worker_dir() -> Path:
    """This worker's own folder for attempts (never a path the study's host named)."""
    env = os.environ.get(WORKER_DIR_ENV)
    return Path(env) if env else paths.ROOT / "analysis" / "worker-attempts"


def private_attempt_dir(cell: CellSpec, attempt_dir: str, node: str) -> Path:
    """The worker's private folder for one attempt: its node, study, run and attempt number, under :func:`worker_dir`
    (the node's own subfolder, so that two workers of one machine never clean each other's attempts)."""
    return worker_dir() / node / cell.study / cell.run_id / Path(attempt_dir).name


@dataclass
class RemoteAttempt:
    """What a worker returns: the outcome, the packed files (plain data), and the folder the attempt ran in there."""

    outcome: AttemptOutcome
    package: Any  # pilot.executors.transfer.Package, None when nothing was packed
    worker_folder: str
    note: str | None = None
    #: a rehearsal's scripted server's record, kept beside the attempt's folder (``attempt-N.scripted``)
    scripted: Any = None


#: Written into the study's attempt folder after its package arrived: where the attempt really ran.
ORIGIN_FILE = "transfer_origin.json"


_CLEANED: set[str] = set()


def clean_stale_attempts(node: str, keep: set[str]) -> list[str]:
    """Remove node ``node``'s private folders of attempts the study no longer waits for (those a killed worker or
    attempt left), once per worker process; ``keep``: folders of attempts running here now."""
    root = worker_dir() / node
    removed: list[str] = []
    if str(root) in _CLEANED or not root.is_dir():
        return removed
    _CLEANED.add(str(root))
    kept = {Path(k).name for k in keep}
    for entry in sorted(root.glob("*/*/*")):
        # An attempt's folder and what sits beside it (its launch mark, its process record, a rehearsal's record).
        if entry.name.split(".", 1)[0] in kept and str(entry.parent) in {str(Path(k).parent) for k in keep}:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(str(entry))
    return removed


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


def run_attempt_on_worker(
    run_function: str | None,
    cell: CellSpec,
    attempt_dir: str,
    node: str,
    backend: str,
    identity: dict | None = None,
    scenarios: list[str] | None = None,
    limit_bytes: int | None = None,
) -> AttemptOutcome | RemoteAttempt:
    """The dask task: prove the protocol, run one isolated attempt in a private folder, pack its files.

    Without ``identity`` (an older caller) the attempt runs at ``attempt_dir`` itself and returns the outcome alone.
    """
    if identity is None:
        return _run_here(run_function, cell, attempt_dir, node, backend)
    from pilot.executors import transfer
    from pilot.identity import ProtocolIdentity, first_difference, protocol_identity

    study_id = ProtocolIdentity.from_dict(identity)
    try:
        mine = protocol_identity(scenarios, backend=backend)
        differs = first_difference(study_id, mine)
    except Exception as exc:  # noqa: BLE001 - a worker that cannot read its own protocol cannot prove it
        differs = f"the worker could not compute its protocol identity ({type(exc).__name__}: {exc})"
    if differs is not None:
        why = f"node {node} refused the run: its protocol is not the study's ({differs})"
        return AttemptOutcome(infra_error=why, launched=False, cost_usd=None, refused_by_node=why)
    local = private_attempt_dir(cell, attempt_dir, node)
    clean_stale_attempts(node, keep={str(local)})
    local.parent.mkdir(parents=True, exist_ok=True)
    outcome = _run_here(run_function, cell, str(local), node, backend)
    try:
        package = transfer.pack_attempt(local, limit_bytes=int(limit_bytes or protocol.study().transfer_limit_bytes))
    except Exception as exc:  # noqa: BLE001 - whatever fails here, the files did not travel
        why = f"transfer: packing the attempt on node {node} failed ({type(exc).__name__}: {exc})"
        if outcome.infra_error is None:
            # The run reached its outcome here (evaluated and judged on this node): it stands, its files stay here.
            return RemoteAttempt(
                with_harness_fault(outcome, "transfer", f"{why}; its files stay in {local}"), None, str(local)
            )
        return RemoteAttempt(
            AttemptOutcome(infra_error=why, cost_usd=outcome.cost_usd, metered_cost_usd=outcome.metered_cost_usd),
            None,
            str(local),
        )
    # The package is the study's copy now; the folder is removed once the result is taken (a worker killed before
    # that leaves it, and the next worker process on this machine cleans it).
    scripted_dir = local.with_name(local.name + ".scripted")
    scripted = None
    if scripted_dir.is_dir():
        try:
            scripted = transfer.pack_attempt(
                scripted_dir,
                limit_bytes=int(limit_bytes or protocol.study().transfer_limit_bytes),
                kept=transfer.SCRIPTED_KEPT,
            )
        except Exception as exc:  # noqa: BLE001
            why = f"transfer: packing the scripted record on node {node} failed ({exc})"
            if outcome.infra_error is None:
                return RemoteAttempt(with_harness_fault(outcome, "transfer", why), package, str(local))
            return RemoteAttempt(
                AttemptOutcome(infra_error=why, cost_usd=outcome.cost_usd, metered_cost_usd=outcome.metered_cost_usd),
                None,
                str(local),
            )
    result = RemoteAttempt(outcome, package, str(local), package.manifest.get("note"), scripted)
    for entry in [
        local,
        *local.parent.glob(local.name + ".*"),
    ]:  # the folder, its launch mark, process record, scripted record
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return result


def sweep_worker(prefix: str, study: str | None) -> list[int]:
    """On a worker: end processes left by attempts under ``prefix`` and, with ``study``, under this worker's private
    folders of that study (every node's subfolder: a restarted worker may carry another name)."""
    ended = proctree.sweep(prefix)
    if study:
        for own in sorted(worker_dir().glob(f"*/{study}")):
            ended += proctree.sweep(str(own) + os.sep, [p for p in own.glob("*/attempt-*.launched")])
    return ended


def _run_here(run_function: str | None, cell: CellSpec, attempt_dir: str, node: str, backend: str) -> AttemptOutcome:
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


def receive_package(result: RemoteAttempt, folder: Path, node: str) -> AttemptOutcome:
    """Unpack a worker's package into the study's attempt folder and verify it; the outcome to commit.

    The outcome's record names the worker's private folder: those paths are rewritten to the study's. A package
    that fails (a digest that differs, a member it must not hold) is kept apart beside the folder for inspection;
    an attempt that reached its outcome on the node keeps it (the failure named as a harness fault on its record),
    one that failed before inference is an infrastructure error, rerun under the same id.
    """
    from pilot.executors import transfer

    folder = Path(folder)
    if folder.exists() and not any(folder.iterdir()):
        folder.rmdir()  # the store names the folder; the package brings its content
    if result.package is None:
        # Packing failed on the node after the run reached its outcome: the outcome travels alone.
        folder.mkdir(parents=True, exist_ok=True)
        return _rewritten(result, folder, node)
    try:
        transfer.unpack_attempt(result.package, folder)
    except (transfer.TransferError, OSError, ValueError) as exc:
        # Nothing half-unpacked is left at the folder; the package itself is kept beside it, with the reason.
        folder.mkdir(parents=True, exist_ok=True)
        kept = transfer.keep_apart(folder, f"the package from node {node} failed: {exc}", package=result.package)
        out = result.outcome
        why = f"transfer: the files of this attempt from node {node} did not arrive intact ({exc})"
        if out.infra_error is None:
            # The run reached its outcome on the node (evaluated and judged there): it stands, never drawn again.
            folder.mkdir(parents=True, exist_ok=True)
            result.outcome = with_harness_fault(out, "transfer", f"{why}; the package is kept in {kept}")
            return _rewritten(result, folder, node)
        return AttemptOutcome(
            infra_error=why,
            cost_usd=out.cost_usd,
            judge_cost_usd=out.judge_cost_usd,
            metered_cost_usd=out.metered_cost_usd,
        )
    if result.scripted is not None:
        side = folder.with_name(folder.name + ".scripted")
        if side.exists():
            shutil.rmtree(side)  # an earlier try of this attempt folder
        try:
            transfer.unpack_attempt(result.scripted, side)
        except (transfer.TransferError, OSError, ValueError) as exc:
            transfer.keep_apart(folder, f"the scripted record from node {node} failed: {exc}", package=result.scripted)
            out = result.outcome
            why = f"transfer: the scripted record of this attempt from node {node} did not arrive intact ({exc})"
            if out.infra_error is None:
                result.outcome = with_harness_fault(out, "transfer", why)
                return _rewritten(result, folder, node)
            return AttemptOutcome(
                infra_error=why,
                cost_usd=out.cost_usd,
                judge_cost_usd=out.judge_cost_usd,
                metered_cost_usd=out.metered_cost_usd,
            )
    return _rewritten(result, folder, node)


def _rewritten(result: RemoteAttempt, folder: Path, node: str) -> AttemptOutcome:
    """The outcome with the worker's folder named as the study's in its record, and where the attempt really ran."""
    import json

    # The files keep the worker's paths as they were written; this says which folder they name.
    (folder / ORIGIN_FILE).write_text(
        json.dumps({"node": node, "worker_folder": result.worker_folder}) + "\n", encoding="utf-8"
    )
    out = result.outcome
    if out.record:
        text = json.dumps(out.record).replace(json.dumps(result.worker_folder)[1:-1], json.dumps(str(folder))[1:-1])
        out.record = json.loads(text)
        if result.note:
            out.record.setdefault("notes", []).append(f"transfer: {result.note}")
    return out


class DaskExecutor:
    """Submit attempts to pinned workers of a ``dask.distributed`` cluster."""

    def __init__(
        self,
        scheduler: Any,
        run_function: str | None,
        requires: dict[str, tuple[str, ...]],
        *,
        identity: Any = None,
        scenarios: list[str] | None = None,
        limit_bytes: int | None = None,
    ) -> None:
        """``identity`` (a :class:`pilot.identity.ProtocolIdentity`): the study's, which every worker must prove before
        it accepts a run; then attempts run in the workers' private folders and their files come home packed.
        None: the workers write at the paths the study names (a shared filesystem)."""
        from distributed import Client

        self.address = str(getattr(getattr(scheduler, "scheduler", None), "address", scheduler))
        try:
            self.client = scheduler if isinstance(scheduler, Client) else Client(scheduler, timeout=15)
        except (OSError, TimeoutError) as exc:
            raise ScheduleError(
                f"cannot reach the dask scheduler at {scheduler} ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); "
                "start it (docs/dask-nodes.md) or correct --scheduler"
            ) from None
        self._owns_client = not isinstance(scheduler, Client)
        if self._owns_client:
            # A lost scheduler is reported once, by us, in one line; distributed's own tracebacks would bury it.
            for name in ["distributed", *[n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]]:
                logging.getLogger(name).setLevel(logging.CRITICAL)
        self.run_function = run_function
        self.requires = requires
        self.identity = identity.to_dict() if identity is not None else None
        self.scenarios = list(scenarios) if scenarios is not None else None
        self.limit_bytes = limit_bytes
        self._address: dict[str, str] = {}
        self._futures: dict[Any, tuple[int, str, str]] = {}  # future -> (token, node, address)
        self._dirs: dict[int, Path] = {}  # token -> the attempt's folder on the study's host
        self._gone_at_submit: list[tuple[int, AttemptOutcome]] = []
        self._missing: dict[str, int] = {}
        self.nodes()

    def _lost(self, exc: BaseException) -> ScheduleError:
        return ScheduleError(
            f"lost the dask scheduler at {self.address} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); "
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
        """End, on every worker, processes left by attempts under ``prefix`` (called under the study's lock), and, where
        the workers run attempts in private folders, by attempts of this study there (the prefix's study)."""
        study = Path(prefix.rstrip(os.sep)).parent.name if self.identity is not None else None
        try:
            found = self.client.run(sweep_worker, prefix, study)
        except (OSError, TimeoutError) as exc:
            raise self._lost(exc) from None
        return [pid for pids in found.values() for pid in pids]

    def submit(self, token: int, cell: CellSpec, node: str, attempt_dir: Path, backend: str) -> None:
        addr = self._address.get(node)
        if addr is None:
            # The node left between the scheduler's choice and the submit: nothing ran.
            self._gone_at_submit.append(
                (token, AttemptOutcome(infra_error=f"dask worker of node {node} was gone at submit", launched=False))
            )
            return
        resources = {SLOTS: 1, **{cap: 1 for cap in self.requires.get(cell.arm, ())}}
        fut = self.client.submit(
            run_attempt_on_worker,
            self.run_function,
            cell,
            str(attempt_dir),
            node,
            backend,
            self.identity,
            self.scenarios,
            self.limit_bytes,
            key=f"attempt-{cell.run_id}-{Path(attempt_dir).name}",
            workers=[addr],
            allow_other_workers=False,
            resources=resources,
            retries=0,
            pure=False,
        )
        self._futures[fut] = (token, node, addr)
        self._dirs[token] = Path(attempt_dir)

    def _receive(self, token: int, node: str, result: Any) -> AttemptOutcome:
        """The outcome of a finished task, with its files unpacked and verified on this host first."""
        folder = self._dirs.pop(token, None)
        if not isinstance(result, RemoteAttempt):
            return result
        if result.package is None or folder is None:
            return result.outcome
        return receive_package(result, folder, node)

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
            # Only the client cancels a future this executor still holds (its own cancels leave the table at once), and
            # it
            # does so when it loses its scheduler: those attempts' fate is unknown, so the next run closes them as
            # interrupted.
            raise self._lost(RuntimeError("the client cancelled the attempts in flight"))
        live = set(self._workers())
        # A worker counts as lost only when it is missing from several consecutive answers of the scheduler.
        self._missing = {a: self._missing.get(a, 0) + 1 for _, _, a in self._futures.values() if a not in live}
        for fut, (token, node, addr) in list(self._futures.items()):
            if fut.status == "finished":
                out.append((token, self._receive(token, node, fut.result())))
            elif fut.status == "error":
                exc = fut.exception()
                out.append(
                    (
                        token,
                        AttemptOutcome(infra_error=f"dask task failed on node {node} ({addr}): {exc!r}", cost_usd=None),
                    )
                )
            elif self._missing.get(addr, 0) >= LOST_AFTER_POLLS:
                fut.cancel()
                out.append(
                    (
                        token,
                        AttemptOutcome(
                            infra_error=f"dask worker of node {node} ({addr}) was lost while the attempt ran",
                            cost_usd=None,
                        ),
                    )
                )
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
