"""DaskRuntime: partitions on pinned workers, futures and one long-lived as_completed.

Placement and data movement follow ARCHITECTURE.md §6:

- every partition (and later every replica of it) is loaded from its source by its own
  keyed task, strictly pinned (``workers=[w], allow_other_workers=False``), so the data is
  recomputable from the source if a worker dies and the Active Memory Manager never sees
  "extra" replicas to drop (each key has exactly one holder);
- strictly pinned tasks are never stolen (the stealing extension only moves a restricted
  task to a valid worker, and the pinned worker is the only one); on a cluster we start,
  work stealing and the Active Memory Manager are disabled anyway;
- work units are submitted pinned to the worker holding their blocks, with the small
  iterate inline, and their results come back through one ``as_completed`` for the
  runtime's life.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from daskstraggle._validation import check_int
from daskstraggle.data.matrix import Matrix
from daskstraggle.errors import ClusterConnectionError, InvalidParameterError
from daskstraggle.methods.base import WorkResult, WorkUnit
from daskstraggle.problems.base import Problem
from daskstraggle.problems.block import MatrixStats, block_stats
from daskstraggle.runtime.base import Runtime, fold_map, run_unit

__all__ = ["DaskRuntime", "connect"]

logger = logging.getLogger(__name__)

#: Config for clusters this package starts itself.
OWN_CLUSTER_CONFIG = {
    "distributed.scheduler.work-stealing": False,
    "distributed.scheduler.active-memory-manager.start": False,
}


def connect(
    client: Any = None,
    *,
    address: str | None = None,
    n_workers: int | None = None,
    processes: bool = True,
    threads_per_worker: int = 1,
    timeout: float = 10.0,
) -> tuple[Any, list[Any]]:
    """Return a Client and the objects to close when done (what this call started).

    Parameters
    ----------
    client : distributed.Client or None, default=None
        Use this client (nothing to close).
    address : str or None, default=None
        Connect to the scheduler at this address (``tcp://host:port``).
    n_workers : int or None, default=None
        Start a LocalCluster with this many workers (default 4) when neither ``client``
        nor ``address`` is given.
    processes : bool, default=True
        LocalCluster workers are processes (True) or threads.
    threads_per_worker : int, default=1
        Threads of each LocalCluster worker.
    timeout : float, default=10.0
        Seconds to wait for the scheduler at ``address`` and for workers.

    Raises
    ------
    ClusterConnectionError
        If the scheduler at ``address`` cannot be reached in time.
    InvalidParameterError
        If more than one of ``client``, ``address`` and ``n_workers`` is given.
    """
    import dask
    from distributed import Client, LocalCluster

    given = [name for name, v in (("client", client), ("address", address), ("n_workers", n_workers))
             if v is not None]
    if len(given) > 1:
        raise InvalidParameterError(
            f"Pass only one of client, address (CLI: --scheduler) and n_workers (CLI: "
            f"--workers); got {', '.join(given)}."
        )
    if client is not None:
        return client, []
    if address is not None:
        from distributed.comm.addressing import get_address_host_port

        try:  # check before building a Client: a half-built one hangs in __del__
            valid = isinstance(address, str) and bool(get_address_host_port(address.strip()))
        except ValueError:
            valid = False
        if not valid:
            raise InvalidParameterError(
                f"The scheduler address (CLI: --scheduler) must look like "
                f"'tcp://127.0.0.1:8786'. Got {address!r} instead."
            )
        try:
            client = Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as err:
            raise ClusterConnectionError(
                f"Could not reach the Dask scheduler at {address!r} within {timeout:g} s "
                f"({type(err).__name__}). Check the address and that the scheduler runs, or "
                "omit it to start a local cluster."
            ) from err
        return client, [client]
    n = check_int(4 if n_workers is None else n_workers, name="n_workers", caller="connect",
                  low=1, high=256)
    with dask.config.set(OWN_CLUSTER_CONFIG):
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=threads_per_worker,
            processes=processes,
            dashboard_address=":0",  # any free port: never collide with another cluster
            # worker logs would print tracebacks of errors the caller already reports
            # (e.g. NaN found while loading); the exception itself still propagates
            silence_logs=logging.CRITICAL,
        )
    client = Client(cluster, set_as_default=False)
    return client, [client, cluster]


class DaskRuntime(Runtime):
    """Run methods on a Dask cluster with partitions pinned to workers.

    Parameters
    ----------
    client : distributed.Client or None, default=None
        Cluster to use; it is left running at :meth:`close`.
    address : str or None, default=None
        Scheduler address to connect to instead.
    n_workers : int or None, default=None
        Otherwise start a LocalCluster with this many single-threaded process workers
        (default 4), closed at :meth:`close`.
    processes : bool, default=True
        For a started LocalCluster: process (True) or thread workers.
    timeout : float, default=10.0
        Seconds to wait for the scheduler and for at least one worker.

    Examples
    --------
    >>> from daskstraggle.runtime import DaskRuntime
    >>> with DaskRuntime(n_workers=2) as rt:  # doctest: +SKIP
    ...     result = rt.run(GD(), PCA(n_components=2), open_matrix("data.zarr"))
    """

    name = "dask"

    def __init__(
        self,
        client: Any = None,
        *,
        address: str | None = None,
        n_workers: int | None = None,
        processes: bool = True,
        timeout: float = 10.0,
    ) -> None:
        from distributed import as_completed

        self._owned: list[Any] = []
        self.client, self._owned = connect(
            client, address=address, n_workers=n_workers, processes=processes, timeout=timeout
        )
        try:
            workers = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
            if not workers:
                self.client.wait_for_workers(1, timeout=timeout)
                workers = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        except BaseException:
            self.close()
            raise
        self._addresses: list[str] = workers
        self._held: list[dict[int, Any]] = []
        self._pending: dict[str, tuple[WorkUnit, float]] = {}
        self._ac = as_completed(loop=self.client.loop, with_results=True)
        self._token = uuid.uuid4().hex[:8]

    @property
    def n_workers(self) -> int:
        """Number of workers seen when the runtime started."""
        return len(self._addresses)

    @property
    def worker_names(self) -> list[str]:
        """Worker addresses, by worker index."""
        return list(self._addresses)

    def _pinned(self, fn: Callable[..., Any], *args: Any, key: str, worker_index: int) -> Any:
        return self.client.submit(
            fn, *args, key=f"daskstraggle-{key}-{self._token}",
            workers=[self._addresses[worker_index]], allow_other_workers=False, pure=False,
        )

    def _load(self, matrix: Matrix, placement: list[tuple[int, ...]]) -> MatrixStats:
        self._unload()
        self._token = uuid.uuid4().hex[:8]
        self._held = [
            {p: self._pinned(matrix.loader(p), key=f"load-p{p}-w{i}", worker_index=i) for p in parts}
            for i, parts in enumerate(placement)
        ]
        try:
            return self._map_reduce(block_stats)
        except BaseException:
            self._unload()
            raise

    def _map_reduce(
        self, fn: Callable[..., Any], *args: Any, combine: Callable[[Any, Any], Any] | None = None
    ) -> Any:
        owner: dict[int, int] = {}
        for i, held in enumerate(self._held):
            for p in held:
                owner.setdefault(p, i)
        futures = []
        for i, held in enumerate(self._held):
            mine = [held[p] for p in held if owner[p] == i]
            if mine:
                key = f"map-{uuid.uuid4().hex[:6]}-w{i}"
                futures.append(self._pinned(fold_map, fn, args, combine, *mine, key=key,
                                            worker_index=i))
        parts = self.client.gather(futures)
        join = combine or (lambda a, b: a + b)
        total = parts[0]
        for part in parts[1:]:
            total = join(total, part)
        return total

    def _submit(self, unit: WorkUnit, problem: Problem) -> None:
        held = self._held[unit.worker_index]
        future = self._pinned(
            run_unit, problem, unit.iterate, *(held[p] for p in unit.partitions),
            key=f"unit-v{unit.version}-w{unit.worker_index}-{uuid.uuid4().hex[:6]}",
            worker_index=unit.worker_index,
        )
        self._pending[future.key] = (unit, time.perf_counter())
        self._ac.add(future)

    def _next(self, timeout: float | None = None) -> WorkResult | None:
        # results are fetched in the background as tasks finish (with_results=True)
        if timeout is not None and not self._ac.has_ready():
            deadline = time.perf_counter() + timeout
            while not self._ac.has_ready():
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    return None
                with self._ac.thread_condition:  # notified when a result is queued
                    self._ac.thread_condition.wait(timeout=min(remaining, 0.1))
        future, (result, duration) = next(self._ac)
        unit, sent = self._pending.pop(future.key)
        return WorkResult(unit, result, duration, latency=time.perf_counter() - sent)

    def _cancel_pending(self) -> None:
        self._ac.clear()
        self._pending.clear()

    def _unload(self) -> None:
        self._cancel_pending()
        self._held = []

    def close(self) -> None:
        """Release data; close the client and cluster if this runtime started them."""
        self._unload()
        for obj in self._owned:
            try:
                obj.close()
            except Exception as err:  # closing must not mask the run's own error
                logger.warning("closing %r failed: %s", obj, err)
        self._owned = []
