"""DaskRuntime: partitions on pinned workers, futures and one long-lived stream of results.

Every partition is loaded by its own keyed task strictly pinned to its worker, and so are the
work units (``docs/architecture.md`` §6): nothing is stolen, and the data can be reloaded
from the source when a worker dies.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any, cast

from daskstraggle._validation import check_bool, check_choice, check_int, check_positive
from daskstraggle.data.matrix import Matrix
from daskstraggle.engine import events
from daskstraggle.engine.events import Instruction
from daskstraggle.engine.pool import (
    AwaitWorkers,
    BackupFold,
    CheckStatus,
    Deliver,
    GiveUp,
    MoveIndex,
    SendBackup,
    SplitUnit,
    StartHelping,
    StopHelping,
    WorkerPool,
    fold_backup_bound,
)
from daskstraggle.engine.recorder import TraceRecorder
from daskstraggle.engine.resilience import check_slow_settings
from daskstraggle.errors import (
    ClusterConnectionError,
    InvalidParameterError,
    SchedulerLostError,
    StraggleError,
    StraggleWarning,
    WorkerLostError,
)
from daskstraggle.latency.fit import Links
from daskstraggle.methods.base import WorkResult, WorkUnit
from daskstraggle.problems.base import Problem
from daskstraggle.problems.block import Block, MatrixStats, block_stats
from daskstraggle.problems.held import HeldResult, Leaf
from daskstraggle.runtime._connect import (
    MAX_LOCAL_WORKERS,
    OWN_CLUSTER_CONFIG,
    ask_scheduler,
    connect,
    scheduler_lost,
    worker_addresses,
    worker_identity,
)
from daskstraggle.runtime._links import measure_links
from daskstraggle.runtime._membership import (
    MEMBERSHIP_INTERVAL,
    RetirementNews,
    retired_before_leaving,
    wait_for_any_worker,
    wait_for_workers_or_jobs,
)
from daskstraggle.runtime._partitions import PartitionStore
from daskstraggle.runtime._resilience import (
    bounded,
    check_memory,
    quietly,
    replacement_targets,
    setup_timeout,
    slow_bounds,
    wait_ready,
)
from daskstraggle.runtime._results import ResultStream
from daskstraggle.runtime.aggregate import AGGREGATIONS, Handle, TreeReducer, unit_meta
from daskstraggle.runtime.base import (
    Runtime,
    RuntimeOptions,
    fold,
    fold_map,
    register_runtime,
    run_unit,
    stream_messages,
)

__all__ = ["MAX_LOCAL_WORKERS", "MEMBERSHIP_INTERVAL", "OWN_CLUSTER_CONFIG", "DaskRuntime",
           "connect", "killed_for_memory",
           "replacement_targets", "run_unit_task", "worker_addresses", "worker_memory"]

logger = logging.getLogger(__name__)

#: Seconds an exact pass sleeps at most between its looks at the statuses while no fold
#: result is queued (an arriving result and the pool's wake-up time end it sooner).
FOLD_POLL = 0.05
#: Seconds a wait for results sleeps at most between its looks for an announced
#: retirement (the pool's wake-up time and an arriving result end it sooner).
NEWS_POLL = 0.1

def _collect(ac: Any, fold_of: dict[Any, int], results: dict[int, Any]) -> list[int]:
    """Take the folds ``ac`` has ready into ``results`` (a fold's first result counts);
    return those done now. A failed or cancelled fold raises (never folded in as a value)."""
    done = []
    while ac.has_ready():
        future, value = next(ac)
        if future.status != "finished":
            future.result()  # raises it: a task's error, or the cancellation
        n = fold_of[future.key]
        if n not in results:
            results[n] = value
            done.append(n)
    return done


#: Bytes a worker's process may grow by when it first loads the kernels (145 MB measured
#: on a fresh process worker: heartbeat 65 MB, then 209 MB). A share that fits beside the
#: last heartbeat's memory and this much is loaded without measuring the worker first.
KERNELS_ALLOWANCE = 256 * 2**20


def worker_memory() -> tuple[int, int]:
    """Worker task: load the kernels a load pass runs (a tiny block's statistics), then
    return the worker's process and the bytes it holds.

    Returns
    -------
    pid : int
        The process id.
    nbytes : int
        The process's resident set: what Dask's nanny compares with the memory limit.
    """
    import numpy as np
    import psutil

    block_stats(Block(values=np.zeros((2, 2))))
    return os.getpid(), int(psutil.Process().memory_info().rss)


def _own(measured: tuple[int, int]) -> int:
    """The bytes a worker's process holds, ``worker_memory``'s answer (0 for a thread
    worker of this process: the client's own memory is not the worker's)."""
    pid, nbytes = measured
    return 0 if pid == os.getpid() else nbytes


def killed_for_memory(client: Any, addresses: set[str]) -> set[str]:
    """Return those of ``addresses`` that their nanny restarted for passing their memory
    limit, by the scheduler's event log (topic ``worker-restart-memory``).

    Parameters
    ----------
    client : distributed.Client
        Connected to the scheduler.
    addresses : set of str
        Workers that left the cluster.

    Returns
    -------
    killed : set of str
        Empty when the log cannot be read.
    """
    if not addresses:
        return set()
    try:
        events = ask_scheduler(client, "events", topic="worker-restart-memory")
    except Exception as err:  # no log: not known to have run out of memory
        logger.info("reading the memory restarts failed (%s)", err)
        return set()
    return {str(msg.get("worker")) for _, msg in events or () if isinstance(msg, dict)} & addresses


def run_unit_task(
    problem: Problem, iterate: Any, version: int, load: float, injector: str | None,
    *blocks: Block, coefficients: Any = None, rows: tuple[int, int] | None = None,
    after: Any = None,
) -> tuple[Any, float]:
    """Worker task: the kernel over ``blocks``, then the run's injected straggler delay.

    ``injector`` names the run's straggler injector (None: no injection). ``after`` is
    ignored: passing the previous message's future orders a streamed unit's tasks on
    the worker. Returns the kernel sum and the seconds the whole task took on the worker.
    """
    t0 = time.perf_counter()
    result, measured = run_unit(problem, iterate, *blocks, coefficients=coefficients,
                                rows=rows)
    if injector is not None:
        from daskstraggle.runtime.inject import inject_delay

        inject_delay(iteration=version, load=load, measured=measured, name=injector)
    return result, time.perf_counter() - t0


@register_runtime
class DaskRuntime(Runtime):
    """Run methods on a Dask cluster with partitions pinned to workers.

    Parameters
    ----------
    client : distributed.Client or None, default=None
        Cluster to use; it is left running at :meth:`close`.
    address : str or None, default=None
        Scheduler address to connect to instead.
    scheduler_file : path or None, default=None
        Or the scheduler whose address this file holds (``dask scheduler --scheduler-file
        PATH``, the batch jobs' convention), waited for up to the
        ``daskstraggle.timeouts.scheduler-file`` setting (120 s).
    n_workers : int or None, default=None
        Otherwise start a LocalCluster with this many single-threaded process workers
        (default 4), closed at :meth:`close`.
    processes : bool, default=True
        For a started LocalCluster: process (True) or thread workers.
    timeout : float, default=10.0
        Seconds to wait for the scheduler and for at least one worker.
    stragglers : str, LatencyModel, Stragglers or None, default=None
        Slow workers down on purpose during each run (grammar in
        :mod:`daskstraggle.latency.spec`): a latency model is injected on the workers by a
        WorkerPlugin (each of our tasks sleeps for the model's draw for that worker after
        computing; model state such as Markov chains lives on the worker), a throttle term
        stops and resumes whole worker processes (slowing any Dask workload). Both are
        removed when the run ends, also on errors and interrupts.
    rng : int or None, default=None
        Seed of the injected latency draws.
    record_latency : bool, default=True
        Register the latency-recording scheduler plugin, so the trace's per-worker
        compute durations are the scheduler's own measurements.
    min_workers : int or None, default=None
        Wait until the cluster has at least this many workers (e.g. jobs of
        dask-jobqueue still starting) instead of starting with whoever is up.
    min_workers_timeout : float or None, default=None
        Seconds to wait for ``min_workers``, then one ClusterConnectionError line; None:
        the ``daskstraggle.timeouts.min-workers`` setting (300 s).
    frozen_after : float or None, default=None
        A work unit unanswered for this many seconds means its worker is frozen (a
        stopped process, a suspended VM): that worker index's partitions are reloaded
        on another worker and its work sent there, as for a worker that left. None:
        20 times the median latency of the run's recent units, at least 30 s.
    stale_after : int or None, default=None
        A work unit still unanswered this many rounds (iterate versions) after it was
        sent means the same for its worker index (the rows it covers are at least that
        stale in SAG's and DSAG's cache): asynchronous methods go on without a frozen
        worker, so rounds pass faster than seconds. None: 10 times the rounds the run's
        recent units took, at least 50. Never before the unit's data is loaded and it has
        waited 10 s (a worker's first unit compiles the kernels).
    backup_after : float or None, default=None
        Speculative backups: a work unit unanswered after this many times the median
        latency of the run's recent units is sent again to another worker (which loads
        a spare copy of the partitions from the source once, unless it holds them); the
        first answer counts. None: no backups. See :mod:`daskstraggle.engine.pool`.
    aggregation : {"flat", "tree"}, default="flat"
        ``"tree"``: the work units' results stay on the workers and are summed there in
        a tree when the method reads their sum, so one message of the sum's size reaches
        the client instead of one per worker (see :mod:`daskstraggle.runtime.aggregate`);
        the trace's ``bytes_to_coordinator`` counts what arrives either way.

    Notes
    -----
    The methods keep the worker indices of the run's start; the worker behind an index
    may change (lost, retiring, frozen, stale, joining: ``docs/architecture.md`` §6), as
    the engine's :attr:`worker_pool` decides (its ``history(index)`` says why);
    ``result.attrs["worker_losses"]`` and ``["worker_joins"]`` record what happened.

    Examples
    --------
    >>> from daskstraggle.api import run_on
    >>> from daskstraggle.runtime import DaskRuntime
    >>> with DaskRuntime(n_workers=2) as rt:  # doctest: +SKIP
    ...     result = run_on(rt, GD(), PCA(n_components=2), open_matrix("data.zarr"))
    """

    name = "dask"
    latency_kind = "injected"
    measures_workers = True
    backups = True
    aggregates = True

    @classmethod
    def from_options(cls, options: RuntimeOptions) -> DaskRuntime:
        """``DaskRuntime`` on the client or scheduler given, else on a LocalCluster."""
        return cls(options.client, address=options.scheduler,
                   scheduler_file=options.scheduler_file, n_workers=options.n_workers,
                   stragglers=options.stragglers, rng=options.seed,
                   min_workers=options.min_workers, backup_after=options.backup_after,
                   aggregation=options.aggregation)

    def __init__(
        self,
        client: Any = None,
        *,
        address: str | None = None,
        scheduler_file: str | os.PathLike[str] | None = None,
        n_workers: int | None = None,
        processes: bool = True,
        timeout: float = 10.0,
        stragglers: Any = None,
        rng: int | None = None,
        record_latency: bool = True,
        min_workers: int | None = None,
        min_workers_timeout: float | None = None,
        frozen_after: float | None = None,
        stale_after: int | None = None,
        backup_after: float | None = None,
        aggregation: str = "flat",
    ) -> None:
        from daskstraggle import config
        from daskstraggle.latency.faults import term_names
        from daskstraggle.latency.spec import parse_stragglers

        self.stragglers = parse_stragglers(stragglers)
        if self.stragglers.faults:
            raise InvalidParameterError(
                f"The {term_names(self.stragglers.faults)} terms of stragglers are simulated "
                "faults: use SimRuntime(faults=...) (CLI: --runtime sim); on a cluster, stop, "
                "kill or retire real workers instead."
            )
        self._min_workers = None if min_workers is None else check_int(
            min_workers, name="min_workers", caller="DaskRuntime", low=1)
        if min_workers_timeout is None:
            min_workers_timeout = config.seconds("timeouts.min-workers")
        self._min_workers_timeout = check_positive(
            min_workers_timeout, name="min_workers_timeout", caller="DaskRuntime")
        self._frozen_after, self._stale_after, self.backup_after = check_slow_settings(
            frozen_after, stale_after, backup_after, caller="DaskRuntime")
        self.aggregation = check_choice(aggregation, name="aggregation",
                                        caller="DaskRuntime", choices=AGGREGATIONS)
        self._reducer: TreeReducer | None = None
        self._metas: dict[str, Any] = {}  # a held unit's key -> its meta task
        self._meta_units: dict[str, tuple[str, Handle]] = {}  # meta key -> unit key, handle
        self._seed = rng
        self._record_latency = check_bool(record_latency, name="record_latency",
                                          caller="DaskRuntime")
        self._injector: str | None = None
        self._throttle: Any = None
        self._recorder: Any = None
        self._round_keys: dict[int, str] = {}
        self._key_rows: dict[str, tuple[int, int]] = {}
        self._unmatched: dict[str, float] = {}
        self._transfers: list[tuple[str, float]] = []
        # everything close() uses exists before connecting: a failure below must end in
        # its own error, not in an AttributeError of the clean-up
        self._owned: list[Any] = []
        self._started: list[str] = []  # the workers when the runtime started
        self._data: PartitionStore | None = None  # where each index's partitions are loaded
        self._stats: tuple[Matrix, MatrixStats] | None = None  # of the data loaded last
        self._futures: dict[str, Any] = {}  # the tasks in flight, by key
        self._ac: Any = None
        self._matrix: Matrix | None = None
        self._losses: list[dict[str, Any]] = []
        self._allowed_losses = config.count("allowed-losses")
        # this run's workers, seen by the scheduler: (nanny, memory limit); those that
        # left and were asked whether their nanny restarted them for memory; those it did
        self._seen: dict[str, tuple[str | None, int]] = {}
        self._asked: set[str] = set()
        self._out_of_memory: set[str] = set()
        self._news: RetirementNews | None = None
        # the exact pass in flight: its folds, their as_completed, fold of each key, and
        # the function, arguments and combine (what a BackupFold computes again)
        self._pass: tuple[list[list[Any]], Any, dict[Any, int], tuple[Any, ...]] | None = None
        self._scheduler_lost = False
        self._token = uuid.uuid4().hex[:8]
        self.client, self._owned = connect(
            client, address=address, scheduler_file=scheduler_file, n_workers=n_workers,
            processes=processes, timeout=timeout)
        self._data = PartitionStore(self.client, self._submit_to)
        try:
            self._started = self._wait_for_workers(timeout)
        except BaseException:
            self.close()
            raise
        self._ac = ResultStream(self.client)

    def _wait_for_workers(self, timeout: float) -> list[str]:
        """The workers' addresses, after waiting up to ``timeout`` s for the first one (or
        ``min_workers_timeout`` s for ``min_workers``)."""
        workers = worker_addresses(self.client)
        wanted = self._min_workers or 1
        if len(workers) >= wanted:
            return workers
        if self._min_workers is not None:
            logger.warning("waiting for %d workers (%d up)", wanted, len(workers))
            timeout = self._min_workers_timeout
        try:
            wait_for_workers_or_jobs(self.client, wanted, timeout)
        except TimeoutError:
            address = self.client.scheduler.address
            raise ClusterConnectionError(
                f"Only {len(worker_addresses(self.client))} of the {wanted} workers asked "
                f"for (min_workers, CLI: --min-workers) joined the scheduler at {address!r} "
                f"within {timeout:g} s. Check that the workers' jobs started, or ask for fewer."
                if self._min_workers is not None else
                f"The Dask scheduler at {address!r} has no workers (waited {timeout:g} s). "
                f"Start some (dask worker {address}), or omit the scheduler to start a local "
                "cluster."
            ) from None
        return worker_addresses(self.client)

    @property
    def _addresses(self) -> list[str]:
        """The worker of each worker index (the pool's, during and after a run)."""
        return self.worker_pool.workers if self.worker_pool is not None else self._started

    @property
    def _held(self) -> list[dict[int, Any]]:
        """Each worker index's loaded partitions (futures)."""
        return [] if self._data is None else self._data.held

    @property
    def dashboard_link(self) -> str | None:
        """The address of the scheduler's dashboard (``Client.dashboard_link``), None when
        it has none or does not say."""
        try:
            return str(self.client.dashboard_link) or None
        except Exception:  # no dashboard service (--no-dashboard), or no answer
            return None

    @property
    def n_workers(self) -> int:
        """Number of workers seen when the runtime started."""
        return len(self._addresses)

    def _worker_count_note(self) -> str:
        """On a cluster we did not start and were not told to wait for: say that its
        worker count was read when the run started, and how to wait for more."""
        if self._owned or self._min_workers is not None:
            return ""
        n = self.n_workers
        return (f" The cluster had {n} worker{'s' if n != 1 else ''} when the run started "
                "(workers still starting or restarting are not counted): pass min_workers "
                "(CLI: --min-workers) to wait for as many as the method needs.")

    @property
    def worker_names(self) -> list[str]:
        """Worker addresses, by worker index."""
        return list(self._addresses)

    def measure_links(self, nbytes: int) -> Links | None:
        """Measure each worker's link to this client with messages of ``nbytes`` bytes,
        all at once and one worker at a time, and between workers in a ring (a worker 3x
        later than half of the others, busy or behind a slow link, is not waited for),
        each wait bounded by ``timeouts.setup``; None when a bound was not met or a worker
        left. See :meth:`Runtime.measure_links`."""
        return measure_links(self.client, self._submit_to, list(self._addresses), nbytes,
                             setup_timeout())

    def _pinned(
        self, fn: Callable[..., Any], *args: Any, key: str, worker_index: int, **kwargs: Any
    ) -> Any:
        return self._submit_to(self._addresses[worker_index], fn, *args, key=key, **kwargs)

    def _submit_to(self, address: str, fn: Callable[..., Any], *args: Any, key: str,
                   **kwargs: Any) -> Any:
        """Submit ``fn`` strictly pinned to the worker at ``address``."""
        return self.client.submit(
            fn, *args, **kwargs, key=f"daskstraggle-{key}-{self._token}",
            workers=[address], allow_other_workers=False, pure=False,
        )

    def _load(self, matrix: Matrix, placement: list[tuple[int, ...]]) -> MatrixStats:
        assert self._data is not None
        kept = self._data.reusable(matrix)  # the last run's, on the same data
        stats, self._stats = self._stats, None
        self._unload()
        self._token = uuid.uuid4().hex[:8]
        self._matrix = matrix
        self._losses = []
        self._seen, self._asked, self._out_of_memory = {}, set(), set()
        self.engine.pool = WorkerPool(
            list(self._addresses), placement=placement,
            partition_rows=[int(r) for r in matrix.partition_rows()],
            bounds=slow_bounds(self._frozen_after, self._stale_after),
            backup_after=self.backup_after, allowed_losses=self._allowed_losses,
            membership_interval=MEMBERSHIP_INTERVAL)
        self._wake = math.inf
        self._news = RetirementNews(self.client)
        every = {(p, a) for parts, a in zip(placement, self._addresses, strict=True)
                 for p in parts}
        if not every <= kept.keys():
            self._check_memory(matrix, placement, kept)
        self._data.load(matrix, placement, self._addresses, kept=kept)
        if stats is not None and stats[0] is matrix:
            self._stats = stats
            return stats[1]  # the same data: checked and counted already
        try:
            self._stats = (matrix, self._map_reduce(block_stats))
        except BaseException:
            self._unload()
            raise
        return self._stats[1]

    def _map_reduce(
        self, fn: Callable[..., Any], *args: Any, combine: Callable[[Any, Any], Any] | None = None
    ) -> Any:
        """Fold ``fn`` over every partition (once each) on the workers holding them; the
        pass starts again when a holder leaves (its partitions reloaded elsewhere)."""
        self._check_membership()
        while True:
            folds = self._fold_tasks(fn, args, combine)
            try:
                parts = self._wait_folds(folds, fn, args, combine)
            except Exception as err:  # a lost connection, a cancelled future; task errors
                # propagate as they are
                lost = self._lost(err)
                if lost is None:
                    raise
                raise lost from None
            if parts is not None:
                break
        return fold(parts, combine)

    def _fold_tasks(self, fn: Callable[..., Any], args: tuple[Any, ...],
                    combine: Callable[[Any, Any], Any] | None) -> list[list[Any]]:
        """One fold per worker index over the partitions it is first to hold:
        ``[index, partitions, future]`` (a backup appends its future)."""
        owner: dict[int, int] = {}
        for i, held in enumerate(self._held):
            for p in held:
                owner.setdefault(p, i)
        folds = []
        for i, held in enumerate(self._held):
            mine = [p for p in held if owner[p] == i]
            if mine:
                key = f"map-{uuid.uuid4().hex[:6]}-w{i}"
                folds.append([i, mine, self._pinned(fold_map, fn, args, combine,
                                                    *(held[p] for p in mine), key=key,
                                                    worker_index=i)])
        return folds

    def _wait_folds(self, folds: list[list[Any]], fn: Callable[..., Any],
                    args: tuple[Any, ...], combine: Callable[[Any, Any], Any] | None
                    ) -> list[Any] | None:
        """Every fold's result (a backup's if it came first), counted once it reached the
        client (each fetched alone: a fold behind a slow link holds up no other);
        None: a holder left (the folds are cancelled, the pass starts again)."""
        ac = ResultStream(self.client)
        for task in folds:
            ac.add(task[2])
        fold_of = {fold[2].key: n for n, fold in enumerate(folds)}
        results: dict[int, Any] = {}
        self._pass = (folds, ac, fold_of, (fn, args, combine))
        self._observe(events.PassStarted, self._new_stimulus_id("pass"),
                      folds=tuple((fold[0], tuple(fold[1])) for fold in folds))
        try:
            while len(results) < len(folds):
                for n in _collect(ac, fold_of, results):
                    self._observe(events.FoldDone, self._new_stimulus_id("fold"), fold=n)
                if len(results) == len(folds):
                    break
                now = time.perf_counter()
                if self._membership_due(now) and self._check_membership():
                    return None  # (a holder left)
                if now >= self._wake:
                    self._tick(now)
                wait_ready(ac, max(min(FOLD_POLL, self._wake - now), 0.0))
            return [results[n] for n in range(len(folds))]
        finally:
            self._pass = None
            self._observe(events.PassEnded, self._new_stimulus_id("pass-ended"))
            ac.clear()
            self.client.cancel([f for fold in folds for f in fold[2:]])

    def _check_memory(self, matrix: Matrix, placement: list[tuple[int, ...]],
                      kept: dict[tuple[int, str], Any]) -> None:
        """Refuse, before loading, a share that does not fit in a worker's memory limit
        beside its own memory (which holds the ``kept`` partitions already) and what its
        threads read (a partition each, read and decoded). Its own memory is measured
        (:meth:`_own_memory`) only when the share would not fit beside its last
        heartbeat's and :data:`KERNELS_ALLOWANCE`."""
        import dask

        info = self._identity()
        limits = {a: int(w.get("memory_limit") or 0) for a, w in info.items()}
        limited = sorted({a for a in self._addresses if limits.get(a)})
        if not limited:
            return
        rows = matrix.partition_rows()
        shares = [int(sum(rows[p] for p in parts if (p, a) not in kept)) * matrix.row_nbytes
                  for parts, a in zip(placement, self._addresses, strict=True)]
        read = 2 * max(matrix.row_nbytes, matrix.n_columns * matrix.dtype.itemsize)
        transient = [read * sum(sorted((int(rows[p]) for p in parts), reverse=True)[
            :int(info.get(a, {}).get("nthreads") or 1)])
            for a, parts in zip(self._addresses, placement, strict=True)]
        pause = float(dask.config.get("distributed.worker.memory.pause", 0.8) or 1.0)
        beat = {a: int(info[a].get("metrics", {}).get("memory") or 0) + KERNELS_ALLOWANCE
                for a in limited}
        try:  # it fits beside the last heartbeat's memory and room for the kernels: no wait
            return check_memory(self._addresses, shares, limits, pause, own=beat,
                                transient=transient)
        except InvalidParameterError:
            pass  # too close to say without measuring
        check_memory(self._addresses, shares, limits, pause,
                     own=self._own_memory(limited, info), transient=transient)

    def _own_memory(self, addresses: list[str], info: dict[str, Any]) -> dict[str, int]:
        """Bytes each worker's process holds once it loaded the kernels (a task on each,
        bounded by ``timeouts.setup``, and once half of them answered by the backup rule
        of exact passes: a worker still busy, e.g. with an earlier run's task, is not
        waited for; else its last heartbeat's; 0 for a thread worker);
        InvalidParameterError if a nanny restarted one for its memory limit meanwhile."""
        from distributed import as_completed

        token = uuid.uuid4().hex[:6]
        futures = {a: self._submit_to(a, worker_memory, key=f"memory-{n}-{token}")
                   for n, a in enumerate(addresses)}
        address_of = {f.key: a for a, f in futures.items()}
        ac = as_completed(list(futures.values()), loop=self.client.loop)
        start = time.perf_counter()
        deadline, pending = start + setup_timeout(), set(futures)
        gone: set[str] = set()
        bounded = False
        while pending - gone and time.perf_counter() < deadline:
            wait_ready(ac, min(MEMBERSHIP_INTERVAL, deadline - time.perf_counter()))
            while ac.has_ready():
                pending.discard(address_of[next(ac).key])
            if not bounded and 2 * len(pending) <= len(futures):
                bounded = True  # half answered: the rest get the exact passes' bound
                deadline = min(deadline, start + fold_backup_bound(time.perf_counter() - start))
            gone = pending - set(self._status())
        ac.clear()
        own = {a: _own(f.result()) if f.status == "finished" else
               int(info[a].get("metrics", {}).get("memory") or 0) for a, f in futures.items()}
        self.client.cancel(list(futures.values()))  # (the result is read: a finished
        # future would read as cancelled after this)
        killed = sorted(killed_for_memory(self.client, gone))
        if killed:
            needs = max((own[a] for a in addresses if a not in gone), default=0)
            raise InvalidParameterError(
                f"Worker {killed[0]} was restarted by its nanny for its memory limit of "
                f"{int(info[killed[0]].get('memory_limit') or 0) / 1e9:.3g} GB while it "
                "loaded the kernels, before any data"
                + (f" (the others hold {needs / 1e9:.3g} GB once they did)" if needs else "")
                + ": give the workers more memory (dask worker --memory-limit).")
        return own

    def _lost(self, err: BaseException) -> SchedulerLostError | None:
        """As :meth:`Runtime._lost`: ``err`` is a cancellation for a lost connection, a
        failed call while the scheduler does not answer, or any error of a closed client."""
        if isinstance(err, SchedulerLostError):
            self._scheduler_lost = True  # (the clean-up must not wait on it)
            return None  # already said
        if self.client.status in ("closing", "closed"):
            self._scheduler_lost = True
            return scheduler_lost(self.client, f"the client is {self.client.status}: "
                                               f"{type(err).__name__}")
        text = str(err)
        if not (isinstance(err, OSError | TimeoutError) or "scheduler-connection-lost" in text
                or type(err).__name__ in ("FutureCancelledError", "CancelledError")):
            return None
        if "scheduler-connection-lost" not in text:
            try:  # cancelled for another reason: is the scheduler still there?
                worker_addresses(self.client)
                return None
            except SchedulerLostError as lost:
                self._scheduler_lost = True
                return lost
        self._scheduler_lost = True
        return scheduler_lost(self.client, "our work was cancelled: scheduler-connection-lost")

    def _distinct(self) -> list[str]:
        """Worker addresses by index, a repeated one (an index moved to a survivor after
        a loss) replaced by a placeholder: the worker injects the delays of its first
        index."""
        addresses = self._addresses
        return [a if a not in addresses[:i] else f"{a} (also index {i})"
                for i, a in enumerate(addresses)]

    def _validate(self) -> None:
        self.stragglers.check_n_workers(self.n_workers)

    def _begin(self, placement: list[tuple[int, ...]], partition_rows: list[int]) -> None:
        self._cancel_pending()
        self._round_keys.clear()
        self._key_rows.clear()
        self._unmatched.clear()
        self._transfers = []
        if self._record_latency and self._recorder is None:
            from daskstraggle.runtime.plugin import LatencyRecorder

            try:
                self._recorder = LatencyRecorder(self.client)
            except StraggleError as err:  # the run still works with worker-side timings
                warnings.warn(f"{err} Recording compute time on the workers instead.",
                              StraggleWarning, stacklevel=4)
                self._record_latency = False
        model, throttle = self.stragglers.model, self.stragglers.throttle
        try:
            if model is not None:
                from daskstraggle.runtime.inject import install_injector

                self._injector = bounded("install the straggler injector", lambda: (
                    install_injector(self.client, model, self._distinct(), seed=self._seed)))
            if throttle is not None:
                from daskstraggle.runtime.throttle import ProcessThrottle

                self._throttle = ProcessThrottle(
                    self.client, sorted({self._addresses[i] for i in throttle.workers}),
                    throttle.factor, period=throttle.period,
                )
                bounded("start the straggler throttle", self._throttle.start)
        except BaseException:
            self._end()
            raise

    def _end(self) -> None:
        """Stop the throttle and remove the injector; a failure here (e.g. the scheduler
        is gone) is a warning, never an error that would hide the run's own outcome."""
        throttle, self._throttle = self._throttle, None
        name, self._injector = self._injector, None
        if self._scheduler_lost:  # nothing to talk to (the workers lost it too)
            return
        if throttle is not None:
            quietly("stop the straggler throttle", throttle.stop)
        if name is not None:
            from daskstraggle.runtime.inject import remove_injector

            quietly("remove the straggler injector", remove_injector, self.client, name)

    def _on_row(self, row: int, recorder: TraceRecorder, final: bool = False) -> None:
        if not final:
            for worker_index, key in self._round_keys.items():
                self._key_rows[key] = (row, worker_index)
            self._round_keys.clear()
        if self._recorder is None:
            return
        for record in self._recorder.poll():
            # a task may finish on the scheduler before the coordinator takes its result:
            # keep its record until the key is placed in a row (bounded)
            self._unmatched[record.key] = record.compute_duration
            if record.transfer_duration > 0 and "-unit-" in record.key:
                self._transfers.append((record.key, record.transfer_duration))
        while len(self._unmatched) > 10_000:
            self._unmatched.pop(next(iter(self._unmatched)))
        for key in [k for k in self._key_rows if k in self._unmatched]:
            row_index, worker_index = self._key_rows.pop(key)
            recorder.set_compute(row_index, worker_index, self._unmatched.pop(key))

    def _run_attrs(self) -> dict[str, Any]:
        # work units whose inputs had to be fetched from another worker, as the scheduler
        # plugin recorded them (0 when partitions stay where they were loaded, also after
        # the load balancer resizes subpartitions)
        losses = self._pool_attrs(self._losses, self.backup_after)
        if self._recorder is None:
            return losses
        return {**losses, "unit_transfers": len(self._transfers),
                "unit_transfer_s": float(sum(d for _, d in self._transfers))}

    # ------------------------------------------------------------------ sending
    def _submit(self, unit: WorkUnit, problem: Problem,
                only: frozenset[int] | None = None) -> None:
        """Send ``unit`` to its worker (``only``: just those messages of a streamed unit,
        when it is sent again after its worker left); split it with the index's helper
        when it has one whose data is loaded."""
        assert self.worker_pool is not None
        self._work = problem
        if only is None and self._submit_split(unit):
            return
        index, held = unit.worker_index, self._held[unit.worker_index]
        address, token = self._addresses[index], uuid.uuid4().hex[:6]
        if not unit.stream:
            future = self._send(unit, address, [held[p] for p in unit.partitions],
                                unit.partitions, self._unit_load(unit),
                                f"unit-v{unit.version}-w{index}-{token}",
                                coefficients=unit.coefficients, rows=unit.rows)
            self._observe(events.TaskSent, key=future.key, unit=unit)
            return
        # one task per message, each depending on the one before (same worker, so nothing
        # moves): the worker computes them in order and each result reaches the
        # coordinator as soon as it is done
        previous = None
        messages = stream_messages(unit)
        for j, (parts, coef) in enumerate(messages):
            if only is None or j in only:
                previous = self._send(unit, address, [held[p] for p in parts], parts,
                                      self._rows_load(parts),
                                      f"unit-v{unit.version}-w{index}-m{j}-{token}",
                                      after=previous, coefficients=coef)
                self._observe(events.TaskSent, key=previous.key, unit=unit, message=j,
                              final=j == len(messages) - 1)

    def _send(self, unit: WorkUnit, address: str, blocks: list[Any],
              partitions: tuple[int, ...], load: float, key: str, *, after: Any = None,
              **kwargs: Any) -> Any:
        """Submit :func:`run_unit_task` of ``unit`` over ``blocks`` (of ``partitions``)
        pinned to ``address`` and wait for it among the run's results; return its future.
        With tree aggregation wait for a small task reporting its rows and timing instead,
        and keep how to compute it again should its worker leave before the sum."""
        args = (self._work, unit.iterate, unit.version, load, self._injector)
        future = self._submit_to(address, run_unit_task, *args, *blocks, after=after,
                                 **kwargs, key=key)
        self._futures[future.key] = future
        if self.aggregation != "tree":
            self._ac.add(future)
            return future
        handle = Handle(future, address, unit.worker_index, tuple(partitions), args, kwargs)
        meta = self.client.submit(unit_meta, future, key=f"daskstraggle-meta-{future.key}",
                                  workers=[address], allow_other_workers=False, pure=False)
        self._metas[future.key] = meta
        self._meta_units[meta.key] = (future.key, handle)
        self._ac.add(meta)
        return future

    def _submit_split(self, unit: WorkUnit) -> bool:
        """Send ``unit`` as two tasks, on its worker and on its helper, when the pool splits
        it (a helper whose copy of the data is loaded); return whether it did."""
        pool = self.worker_pool
        assert pool is not None and self._data is not None
        index = unit.worker_index
        if pool.helpers.get(index) is None or unit.stream:
            return False
        if self._data.helper_loaded(index):
            self._observe(events.HelperReady, index=index)
        answer = self._observe(events.Sending, unit=unit)
        if not answer:
            return False
        split = cast(SplitUnit, answer[0])
        token, keys = uuid.uuid4().hex[:6], []
        for position, (part, address, held) in enumerate(zip(
                (split.own, split.helper_part), (self._addresses[index], split.helper),
                (self._data.held[index], self._data.helper[index]), strict=True)):
            partitions = tuple(unit.partitions[k] for k in part.positions)
            keys.append(self._send(
                unit, address, [held[p] for p in partitions], partitions,
                self._load_of(part.rows[1] - part.rows[0]),
                f"unit-v{unit.version}-w{index}-part{position}-{token}",
                coefficients=part.coefficients, rows=part.rows).key)
        self._observe(events.SplitSent, unit=unit, keys=(keys[0], keys[1]))
        return True

    # ------------------------------------------------------------------ receiving
    def _next(self, timeout: float | None = None) -> WorkResult | None:
        # results are fetched in the background as tasks finish (with_results=True); while
        # waiting, tick when the pool asked to be woken (it judges overdue work and asks
        # for the statuses when due), and look at the statuses when a retirement is
        # announced
        pool = self.worker_pool
        assert pool is not None
        deadline = math.inf if timeout is None else time.perf_counter() + timeout
        while True:
            while not self._ac.has_ready():
                now = time.perf_counter()
                if now >= deadline:
                    return None
                if self._news is not None and self._news.news:
                    self._check_membership()
                elif now >= self._wake:
                    self._tick(now)
                wait_ready(self._ac, max(min(deadline, self._wake, now + NEWS_POLL) - now,
                                          0.0))
            future, outcome = next(self._ac)
            key, handle = self._meta_units.pop(future.key, (future.key, None))
            self._metas.pop(key, None)
            self._futures.pop(key, None)
            if key not in pool.tasks:  # abandoned, cancelled or sent again
                continue
            if isinstance(outcome, BaseException):  # only cancellations come back as values
                self._observe(events.TasksDropped, f"failed-{key}", keys=(key,))
                raise self._lost(outcome) or outcome
            if handle is not None:
                outcome = self._held_outcome(handle, outcome)
            answer = self._observe(events.TaskFinished, f"finished-{key}", key=key, outcome=outcome)
            if not answer:  # one part of a split unit: wait for the other
                continue
            deliver = cast(Deliver, answer[0])
            task, (result, duration) = deliver.task, deliver.outcome
            if task.message is not None:
                (result,) = result
            self._round_keys[task.unit.worker_index] = key
            return WorkResult(task.unit, result, duration,
                              latency=time.perf_counter() - task.sent, message=task.message,
                              final=task.final)

    def _held_outcome(self, handle: Handle, meta: tuple[Any, float]) -> tuple[Any, float]:
        """A held unit's ``(result, seconds)``: held results in place of its data."""
        rows, seconds = meta
        if self._reducer is None:
            from daskstraggle import config

            self._reducer = TreeReducer(
                self.client, live=lambda: set(worker_addresses(self.client)),
                recompute=self._recompute, timeout=config.seconds("timeouts.stall"))
        if isinstance(rows, tuple):  # a coded unit: one leaf per message
            return tuple(HeldResult.of(Leaf(handle, r, self._reducer, message=j))
                         for j, r in enumerate(rows)), seconds
        return HeldResult.of(Leaf(handle, rows, self._reducer)), seconds

    def _recompute(self, handle: Handle) -> tuple[Any, str]:
        """Run a held result's task again where its worker index's partitions are now
        (after the pool moved the index off a worker that left); return the future and
        the address."""
        self._check_membership()
        index = handle.worker_index
        held = self._held[index]
        future = self._pinned(run_unit_task, *handle.args, *(held[p] for p in handle.partitions),
                              **handle.kwargs, key=f"unit-again-w{index}-{uuid.uuid4().hex[:6]}",
                              worker_index=index)
        return future, self._addresses[index]

    def _fetched_bytes(self) -> int:
        return 0 if self._reducer is None else self._reducer.take_bytes()

    def _abandon(self, version: int) -> list[int]:
        pool = self.worker_pool
        assert pool is not None
        stale = [key for key, task in pool.tasks.items()
                 if task.unit.stream and task.unit.version < version]
        if not stale:
            return []
        freed = [pool.tasks[key].unit.worker_index for key in stale if pool.tasks[key].final]
        self._observe(events.TasksDropped, keys=tuple(stale))
        self._cancel(stale)
        return freed

    def _cancel(self, keys: tuple[str, ...] | list[str]) -> None:
        futures = [f for f in (self._futures.pop(k, None) for k in keys) if f is not None]
        for meta in (self._metas.pop(k, None) for k in keys):
            if meta is not None:
                self._meta_units.pop(meta.key, None)
                futures.append(meta)
        if futures:
            self.client.cancel(futures)

    def _cancel_pending(self) -> None:
        if self._ac is not None:
            self._ac.clear()
        self._futures.clear()
        self._metas.clear()
        self._meta_units.clear()
        if self.worker_pool is not None:
            self._observe(events.TasksDropped, self._new_stimulus_id("ended"), keys=None)

    # ------------------------------------------------------------------ the pool's view
    def _membership_due(self, now: float) -> bool:
        """Whether to look at the statuses now: a retirement was announced, or the pool
        asks for them."""
        news = self._news is not None and bool(self._news.news)
        return news or (self.worker_pool is not None and now >= self.worker_pool.next_status)

    def _check_membership(self) -> bool:
        """Give the pool the cluster's workers and statuses; carry out its moves. Return
        whether an index moved off a worker that left, retires or froze (work pinned to
        it never runs)."""
        pool = self.worker_pool
        if pool is None or not self._held:
            return False
        assert self._news is not None
        announced = self._news.take()  # announced before the status asked for below
        status = self._status()
        announced |= {a for a in pool.vanished(status)
                      if a not in announced and retired_before_leaving(self.client, a)}
        self._news.watch(sorted({*pool.workers, *pool.helpers.values()} & set(status)))
        moves = len(self._losses)
        self._observe(events.StatusChanged, self._new_stimulus_id("status"), status=status,
                      retiring=frozenset(announced), tight=frozenset(self._tight(status)))
        return any(loss["kind"] != "adopted" for loss in self._losses[moves:])

    def _status(self) -> dict[str, str]:
        return {a: str(w.get("status", "running")) for a, w in self._identity().items()}

    def _identity(self) -> dict[str, dict[str, Any]]:
        """What the scheduler knows of each worker; remember each one's nanny and memory
        limit for the run."""
        try:
            info = worker_identity(self.client)
        except SchedulerLostError:
            self._scheduler_lost = True  # the clean-up must not wait on it either
            raise
        for address, worker in info.items():
            self._seen.setdefault(address, (worker.get("nanny"),
                                            int(worker.get("memory_limit") or 0)))
        return info

    def _tight(self, status: dict[str, str]) -> set[str]:
        """The live workers whose nanny restarted one of this run's workers for passing
        its memory limit: the share that killed it would kill them too."""
        gone = set(self._seen) - set(status) - self._asked
        self._asked |= gone
        self._out_of_memory |= killed_for_memory(self.client, gone)
        nannies = {self._seen[a][0] for a in self._out_of_memory} - {None}
        return {a for a in status if a in self._seen and self._seen[a][0] in nannies}

    def _gave_up(self, give_up: GiveUp) -> WorkerLostError:
        """The one line that ends a run whose worker index kept losing its worker."""
        import dask

        assert self._matrix is not None and self.worker_pool is not None
        lost = set(give_up.workers)
        self._out_of_memory |= killed_for_memory(self.client, lost - self._out_of_memory)
        killed = len(lost & self._out_of_memory)
        rows = self._matrix.partition_rows()
        share = int(sum(rows[p] for p in self.worker_pool.placement[give_up.index])) * \
            self._matrix.row_nbytes
        limits = sorted({self._seen[a][1] for a in lost if a in self._seen} - {0})
        limit = " or ".join(f"{x / 1e9:.3g} GB" for x in limits) or "none"
        terminate = dask.config.get("distributed.worker.memory.terminate", 0.95) or 1.0
        why = (f"{killed} of them restarted by their nanny for passing {terminate:.0%} of "
               f"their memory limit of {limit}" if killed else
               f"their memory limit: {limit}; see the workers' logs for why they died")
        return WorkerLostError(
            f"Worker index {give_up.index} lost its worker {len(give_up.workers)} times in "
            f"this run ({why}) with the index's {share / 1e9:.3g} GB share of the matrix "
            "and what the method computes from it: use more workers (CLI: --workers), "
            "workers with more memory (dask worker --memory-limit), or a smaller matrix; "
            f"the daskstraggle.allowed-losses setting ({self._allowed_losses}) bounds the "
            "losses of one index."
        )

    def _tick(self, now: float) -> None:
        """The time the pool asked to be woken at came: tell it which workers are live
        and which tasks still wait for their data."""
        pool = self.worker_pool
        assert pool is not None and self._data is not None
        wait = pool.bounds.stale_wait
        unloaded = frozenset(key for key, task in pool.tasks.items()
                             if now - task.sent > wait and not self._data.loaded(task))
        self._observe(events.Tick, self._new_stimulus_id("tick"),
                      live=tuple(worker_addresses(self.client)), unloaded=unloaded)

    # ------------------------------------------------------------------ the pool's orders
    @functools.singledispatchmethod
    def _carry(self, instruction: Instruction) -> None:
        """As :meth:`Runtime._carry`."""
        super()._carry(instruction)

    @_carry.register(MoveIndex)
    def _(self, instruction: MoveIndex) -> None:
        assert self._data is not None and self.worker_pool is not None
        self._losses.append(self._data.move(self._matrix, instruction, self.worker_pool.shunned))

    @_carry.register(StartHelping)
    def _(self, instruction: StartHelping) -> None:
        assert self._data is not None
        self._data.start_helping(self._matrix, instruction)

    @_carry.register(StopHelping)
    def _(self, instruction: StopHelping) -> None:
        assert self._data is not None
        self._data.stop_helping(instruction)

    @_carry.register(GiveUp)
    def _(self, instruction: GiveUp) -> None:
        raise self._gave_up(instruction)

    @_carry.register(CheckStatus)
    def _(self, instruction: CheckStatus) -> None:
        self._check_membership()

    @_carry.register(AwaitWorkers)
    def _(self, instruction: AwaitWorkers) -> None:
        self._await_workers()

    @_carry.register(BackupFold)
    def _backup_fold(self, instruction: BackupFold) -> None:
        """Compute a slow fold of the exact pass again on the worker the pool chose (from
        the partitions it holds, the others loaded from the source), and wait for both."""
        assert self._pass is not None and self._matrix is not None
        folds, ac, fold_of, (fn, args, combine) = self._pass
        fold, j = folds[instruction.fold], instruction.to_index
        token = uuid.uuid4().hex[:6]
        assert self._data is not None
        copies = self._data.copies(j, self._addresses[j])  # (a unit backup's spares too)
        blocks = [copies[p] if p in copies else self._pinned(
            self._matrix.loader(p), key=f"backup-load-p{p}-w{j}-{token}", worker_index=j)
            for p in fold[1]]
        logger.warning("exact pass: worker %s is slow; its partitions %s are computed again "
                       "on %s", self._addresses[fold[0]], fold[1], self._addresses[j])
        fold.append(self._pinned(fold_map, fn, args, combine, *blocks,
                                 key=f"map-backup-{token}-w{j}", worker_index=j))
        fold_of[fold[-1].key] = instruction.fold
        ac.add(fold[-1])

    def _await_workers(self) -> None:
        """Every worker is gone: wait (bounded) for one that may take work (not found
        frozen, not retiring), then report the statuses again."""
        pool = self.worker_pool
        assert pool is not None
        status = wait_for_any_worker(self.client, pool.usable)
        self._status()  # (what the scheduler knows of the newcomers)
        self._observe(events.StatusChanged, self._new_stimulus_id("joined"), status=status,
                      tight=frozenset(self._tight(status)))

    @_carry.register(SendBackup)
    def _send_backup(self, backup: SendBackup) -> None:
        """Send a copy of an overdue unit to another worker index's worker (from its own
        copies of the partitions, or a spare copy loaded there from the source once)."""
        assert self._data is not None
        unit, j = backup.unit, backup.to_index
        blocks = self._data.blocks(self._matrix, j, self._addresses[j], unit.partitions)
        # (computed again, it is the unit's own index that holds the partitions)
        future = self._send(unit, self._addresses[j], blocks, unit.partitions,
                            self._unit_load(unit),
                            f"unit-backup-v{unit.version}-w{j}-{uuid.uuid4().hex[:6]}",
                            coefficients=unit.coefficients, rows=unit.rows)
        self._observe(events.BackupSent, key=backup.key, backup_key=future.key)
        logger.info("unit of worker %s overdue: backup sent to %s",
                    self._addresses[unit.worker_index], self._addresses[j])

    def _unload(self) -> None:
        self._stats = None
        self._cancel_pending()
        if self._news is not None:
            self._news.close()
            self._news = None
        if self._data is not None:
            self._data.clear()

    def close(self) -> None:
        """Release data; close the client and cluster if this runtime started them."""
        self._unload()
        closing = ([] if self._recorder is None else [self._recorder]) + self._owned
        self._recorder, self._owned = None, []
        for obj in closing:  # the latency recorder first, then the client and cluster
            try:
                obj.close()
            except Exception as err:  # closing must not mask the run's own error
                logger.warning("closing %r failed: %s", obj, err)
