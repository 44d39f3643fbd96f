"""SimRuntime: any Method in simulated time, with worker latency from a latency model.

The kernels run in this process on the blocks the Dask runtime would load; only the clock is
simulated (a task started at ``a`` completes at ``a + compute + communication``, drawn for
its worker index; links and tree aggregation: :class:`SimRuntime`'s ``latency`` and
``aggregation``). The fault terms are played at their simulated times through the engine's
:class:`~daskstraggle.engine.pool.WorkerPool`, as the Dask runtime's decisions on a cluster;
faults act on workers, the latency model on worker indices, and data moves take no time.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import time
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from daskstraggle._validation import check_choice, check_int, check_nonnegative
from daskstraggle.engine import events
from daskstraggle.engine.events import Instruction
from daskstraggle.engine.pool import (
    AwaitWorkers,
    Deliver,
    MoveIndex,
    SendBackup,
    SplitUnit,
    StartHelping,
    StopHelping,
    WorkerPool,
)
from daskstraggle.engine.resilience import check_slow_settings
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import LatencyModel, LatencySampler
from daskstraggle.latency.faults import FAULTS, ClusterState, Fault
from daskstraggle.latency.fit import Links, fit_link, fit_peers
from daskstraggle.latency.modifiers import SharedLink, share_link
from daskstraggle.latency.spec import parse_latency, parse_stragglers
from daskstraggle.methods.base import WorkResult, WorkUnit
from daskstraggle.problems.base import Problem
from daskstraggle.problems.block import Block
from daskstraggle.problems.held import HeldResult, Leaf, payload_bytes
from daskstraggle.runtime._resilience import slow_bounds
from daskstraggle.runtime.aggregate import AGGREGATIONS, build_tree, tree_sum
from daskstraggle.runtime.base import (
    RuntimeOptions,
    register_runtime,
    run_unit,
)
from daskstraggle.runtime.local import LocalRuntime

__all__ = ["SimRuntime"]


@register_runtime
class SimRuntime(LocalRuntime):
    """Run methods in process, in simulated time, with a latency model per worker.

    Partitions are loaded in process as by :class:`LocalRuntime`; only the delivery of
    results differs.

    Parameters
    ----------
    n_workers : int or None, default=None
        Number of simulated workers; None: the ``daskstraggle.workers`` setting (4,
        :mod:`daskstraggle.config`).
    latency : LatencyModel, str or None, default=None
        Worker latency (a model or a spec such as ``"gamma(mean=0.05, var=1e-4)"``).
        None: each task takes the compute time its kernel really took here. A model
        without a distribution (e.g. ``"slowdown(workers=1, factor=4)"``) scales that
        measured time. A ``link(...)`` term charges each result's bytes
        (:func:`~daskstraggle.problems.held.payload_bytes`) on its worker index's link,
        through which they stream on to the coordinator's link, shared by the replies in
        flight (:class:`~daskstraggle.latency.modifiers.SharedLink`); that time is part
        of the trace's ``latency`` and ``communication_duration``.
    update_duration : float, default=0.0
        Simulated seconds the coordinator spends on each update (``method.step``).
    receive_duration : float, default=0.0
        Simulated seconds the coordinator spends receiving each message (a result, or
        each part of a multi-message result). Messages are received one at a time in
        arrival order, so those that arrive while the coordinator is busy queue: the
        coordinator's link as the bottleneck, where total time grows with the number of
        results waited for (the BCC paper's EC2 setting, §III-C). Only results computed
        for the newest dispatched version cost time: as in the paper's master, which
        stops receiving once it can step, results of older versions are dropped at no
        cost (with ``receive_duration=0`` nothing changes).
    sum_duration : float, default=0.0
        Simulated seconds each of tree aggregation's sums costs as a task of its own
        (scheduled, its terms fetched, the sum made), beyond its terms' bytes on the
        links (``aggregation="tree"`` only).
    rng : int, Generator or None, default=None
        Seed of the latency draws (independent of the run's ``rng``).
    faults : str, sequence of Fault or None, default=None
        Workers lost, frozen, joining or retiring at simulated times: the ``loss``,
        ``freeze``, ``join`` and ``retire`` terms of the stragglers spec, e.g.
        ``"loss(workers=1, at=2) + join(count=1, at=5)"``
        (:mod:`daskstraggle.latency.faults`).
    frozen_after : float or None, default=None
        A unit unanswered for this many simulated seconds means a frozen worker (as
        ``DaskRuntime(frozen_after=)``). None: the ``daskstraggle.frozen`` settings; the
        check runs only when ``faults`` are given or a bound is.
    stale_after : int or None, default=None
        A unit in flight this many rounds means the same (as ``DaskRuntime``).
    backup_after : float or None, default=None
        Send a backup of a unit unanswered after this many times the median latency.
    aggregation : {"flat", "tree"}, default="flat"
        ``"tree"``: as ``DaskRuntime(aggregation="tree")``, a result stays on its worker
        (only its size and timing reach the coordinator) and the method's read of a
        round's sum sums the results on the workers, :data:`~daskstraggle.runtime.
        aggregate.FAN_IN` at a time, then sends the one sum to the coordinator. The read
        takes simulated time: each inner sum is on the worker of its first term, once
        every term reached it (a term from another worker streams through the sender's
        link and the receiver's, which carries the terms it receives in turn), and the
        root's sum through its worker's link and the coordinator's. Without a ``link``
        term moving results takes no time.

    Examples
    --------
    >>> import numpy as np
    >>> import daskstraggle as ds
    >>> X = np.random.default_rng(0).normal(size=(400, 6))
    >>> with SimRuntime(8, latency="gamma(mean=0.1, var=1e-3)", rng=1) as rt:
    ...     res = ds.solve("pca", X, method=ds.methods.SGD(n_wait=4), runtime=rt,
    ...                    stop=ds.StopRule(max_iter=10, tol=None), rng=0)
    >>> res.trace.sizes["iteration"], bool(res.trace.wall_time[-1] > 0.5)
    (10, True)
    """

    name = "sim"
    in_process = True
    latency_kind = "simulated"
    backups = True
    aggregates = True

    @classmethod
    def from_options(cls, options: RuntimeOptions) -> SimRuntime:
        """``SimRuntime`` with the stragglers spec's latency model and faults."""
        spec = options.stragglers
        return cls(options.n_workers, latency=None if spec is None else spec.model,
                   faults=None if spec is None else spec.faults, rng=options.seed,
                   backup_after=options.backup_after, aggregation=options.aggregation)

    balance_in_background = False  # the simulated clock stands still while planning

    def __init__(
        self,
        n_workers: int | None = None,
        latency: LatencyModel | str | None = None,
        *,
        update_duration: float = 0.0,
        receive_duration: float = 0.0,
        sum_duration: float = 0.0,
        rng: int | np.random.Generator | None = None,
        faults: str | tuple[Fault, ...] | list[Fault] | None = None,
        frozen_after: float | None = None,
        stale_after: int | None = None,
        backup_after: float | None = None,
        aggregation: str = "flat",
    ) -> None:
        super().__init__(None if n_workers is None else check_int(
            n_workers, name="n_workers", caller="SimRuntime", low=1))
        self.latency = None if latency is None else parse_latency(latency)
        if self.latency is not None:
            self.latency.check_n_workers(self._n_workers)
        self.faults = _parse_faults(faults)
        for fault in self.faults:
            fault.check_n_workers(self._n_workers)
        self.update_duration = check_nonnegative(update_duration, name="update_duration",
                                                 caller="SimRuntime")
        self.receive_duration = check_nonnegative(receive_duration, name="receive_duration",
                                                  caller="SimRuntime")
        self.sum_duration = check_nonnegative(sum_duration, name="sum_duration",
                                              caller="SimRuntime")
        self.frozen_after, self.stale_after, self.backup_after = check_slow_settings(
            frozen_after, stale_after, backup_after, caller="SimRuntime")
        self.aggregation = check_choice(aggregation, name="aggregation", caller="SimRuntime",
                                        choices=AGGREGATIONS)
        self._fetched = 0  # bytes of held sums read since the last row
        self._seed = np.random.SeedSequence(
            int(rng.integers(2**63)) if isinstance(rng, np.random.Generator) else rng
        )
        self._order = itertools.count()
        self._reset()

    def _reset(self) -> None:
        """Set the state of a run as it starts (the latency draws: :meth:`_begin`)."""
        self._now = 0.0
        self._newest = 0  # newest version dispatched
        self._heap: list[tuple[float, int, str]] = []
        self._tasks: dict[str, _SimTask] = {}
        self._sampler: LatencySampler | None = None
        self._links: SharedLink | None = None  # the coordinator's link, state of a run
        self._real_start = time.perf_counter()
        self._events: list[tuple[float, int, Fault]] = sorted(
            (f.at, k, f) for k, f in enumerate(self.faults))
        self._freezes = _freeze_windows(self.faults)
        self._busy: dict[str, float] = {}
        self._cluster = ClusterState(n_workers=self._n_workers)  # as the faults leave it
        self._losses: list[dict[str, Any]] = []

    def measure_links(self, nbytes: int) -> Links | None:
        """The links of the latency model's ``link`` term, as a measurement finds them
        (:func:`~daskstraggle.latency.fit.fit_link` of its messages' times alone and at
        once; :func:`~daskstraggle.latency.fit.fit_peers` of messages moved in a ring
        between workers); None without one."""
        link = None if self.latency is None else self.latency.link
        if link is None:
            return None
        workers = range(self._n_workers)
        fixed = [link.transfer_duration(i, 0) for i in workers]
        at_once = share_link(link, fixed, nbytes, [link.rate(i) for i in workers])
        fitted = fit_link(nbytes, [link.message_duration(i, nbytes) for i in workers], at_once,
                          latency=fixed)
        moved = [link.receive_duration(i, nbytes) for i in workers]  # worker to worker
        ring = [(i, j, max(moved[i], moved[j]))
                for i, j in zip(workers, [*workers[1:], 0], strict=True) if i != j]
        peers = fit_peers(nbytes, ring, fallback=cast(tuple[float, ...], fitted.bandwidth))
        return Links(fitted, replace(fitted, bandwidth=peers))

    def _clock(self) -> float:
        return self._now

    def _begin(self, placement: list[tuple[int, ...]], partition_rows: list[int]) -> None:
        self._reset()
        if self.latency is not None:
            self._sampler = self.latency.sampler(self._n_workers, self._seed)
            self._links = None if self.latency.link is None else SharedLink(self.latency.link)
        self.engine.pool = WorkerPool(
            [str(i) for i in range(self._n_workers)], placement=placement,
            partition_rows=partition_rows, backup_after=self.backup_after,
            bounds=slow_bounds(self.frozen_after, self.stale_after),
            watch=bool(self.faults) or self.frozen_after is not None
            or self.stale_after is not None)
        self._wake = math.inf

    # ------------------------------------------------------------------ sending
    def _submit(self, unit: WorkUnit, problem: Problem, only: frozenset[int] | None = None
                ) -> None:
        assert self.worker_pool is not None
        self._work = problem
        self._newest = max(self._newest, unit.version)
        if unit.stream:
            self._submit_stream(unit, problem, only)
            return
        # (the pool splits only for an index with a helper: as DaskRuntime, ask it then)
        split = self._observe(events.Sending, unit=unit) if self.worker_pool.helpers else None
        if split:
            self._submit_split(cast(SplitUnit, split[0]), problem)
            return
        held = self._blocks[unit.worker_index]
        result, measured = run_unit(problem, unit.iterate, *(held[p] for p in unit.partitions),
                                    coefficients=unit.coefficients, rows=unit.rows)
        compute, communication = self._draw(unit.worker_index, unit, self._unit_load(unit),
                                            measured, result)
        key = self._push(self.worker_pool.workers[unit.worker_index], unit, result, compute,
                         communication)
        self._observe(events.TaskSent, key=key, unit=unit)

    def _draw(self, index: int, unit: WorkUnit, load: float, measured: float,
              result: Any = None) -> tuple[float, float]:
        """Compute and communication seconds of work on worker index ``index``; the
        communication includes ``result``'s time on the index's link (if any)."""
        if self._sampler is None:
            return float(measured), 0.0
        compute, communication = self._sampler.sample(
            index, time=self._now, iteration=unit.version, load=load, measured=measured)
        return float(compute), self._sent(index, result, float(communication))

    def _sent(self, index: int, result: Any, communication: float) -> float:
        """``communication`` plus the seconds ``result`` takes on worker index ``index``'s
        own link (unchanged without a link term)."""
        if self._links is None or result is None:
            return communication
        return communication + self._links.link.transfer_duration(index, self._payload(result))

    def _payload(self, result: Any) -> int:
        """Bytes ``result`` sends to the coordinator: none when it stays on its worker."""
        return 0 if self.aggregation == "tree" else payload_bytes(result)

    def _push(self, worker: str, unit: WorkUnit, result: Any, compute: float,
              communication: float, *, message: int | None = None, final: bool = True,
              start: float | None = None, done: float | None = None) -> str:
        """Schedule a task on ``worker``: it starts when the worker is free (or at
        ``start``), makes no progress while the worker is frozen, is computed after
        ``compute`` seconds of work (``done`` for a message of a streamed unit, counted
        from the unit's start) and answers ``communication`` later. Return its key."""
        order = next(self._order)
        key = f"t{order}"
        if start is None:
            start = max(self._now, self._busy.get(worker, -math.inf))
            self._busy[worker] = self._frozen_end(worker, start, compute)
        work = compute if done is None else done
        end = self._frozen_end(worker, start, work)
        # (without a freeze: start + latency, the sum the latency model's own simulator takes)
        finish = start + (work + communication) if end == start + work else end + communication
        task = _SimTask(unit, result, compute, work + communication, message, final, worker,
                        end, queued=self._links is not None, left=finish)
        self._tasks[key] = task
        if task.queued:  # its first byte reaches the coordinator's link
            finish -= self._links.link.receive_duration(self._index(worker),  # type: ignore
                                                        self._payload(result))
        heapq.heappush(self._heap, (finish, order, key))
        return key

    def _index(self, worker: str) -> int:
        """The worker index of ``worker``."""
        assert self.worker_pool is not None
        return self.worker_pool.workers.index(worker)

    def _frozen_end(self, worker: str, start: float, work: float) -> float:
        """When ``work`` seconds of computing started at ``start`` end on ``worker``."""
        end = start + work
        for at, until in self._freezes.get(worker, ()):  # disjoint, in time order
            if at <= start < until:
                end += until - start
                start = until
            elif start < at < end:
                end += until - at
        return end

    def _submit_split(self, split: SplitUnit, problem: Problem) -> None:
        """Carry out ``split``: its unit as two parts, its index's worker's rows and its
        helper's."""
        assert self.worker_pool is not None
        unit, index = split.unit, split.index
        held = self._blocks[index]
        keys = []
        pool = self.worker_pool
        for part, worker in zip((split.own, split.helper_part),
                                (pool.workers[index], split.helper), strict=True):
            blocks = [held[unit.partitions[k]] for k in part.positions]
            result, measured = run_unit(problem, unit.iterate, *blocks,
                                        coefficients=part.coefficients, rows=part.rows)
            compute, communication = self._draw(index, unit,
                                                self._load_of(part.rows[1] - part.rows[0]),
                                                measured, result)
            keys.append(self._push(worker, unit, result, compute, communication))
        self._observe(events.SplitSent, unit=unit, keys=(keys[0], keys[1]))

    def _submit_stream(self, unit: WorkUnit, problem: Problem,
                       only: frozenset[int] | None = None) -> None:
        """Schedule each message of a streamed unit at its own completion time (``only``:
        just those messages, when the unit is sent again after its worker left).

        One latency draw covers the whole unit (load = all its rows); message ``j``
        completes once the rows of messages ``0 .. j`` are computed, at that fraction of
        the compute time, plus the communication time: with the multi-message model and
        equal partitions the ``j``-th partition is done at ``j (alpha + X)``.
        """
        assert self.worker_pool is not None
        computed = self._compute_stream(unit, problem)
        measured = [seconds for _, _, seconds in computed]
        compute, communication = self._draw(unit.worker_index, unit, self._unit_load(unit),
                                            sum(measured))
        rows = np.cumsum([sum(self._partition_rows[p] for p in parts)
                          for parts, _, _ in computed], dtype=np.float64)
        done_at = compute * rows / rows[-1]
        worker = self.worker_pool.workers[unit.worker_index]
        start = max(self._now, self._busy.get(worker, -math.inf))
        self._busy[worker] = self._frozen_end(worker, start, compute)
        previous = 0.0
        for j, (_, message, _) in enumerate(computed):
            final = j == len(computed) - 1
            if only is None or j in only:
                key = self._push(worker, unit, message, float(done_at[j] - previous),
                                 self._sent(unit.worker_index, message, communication),
                                 message=j, final=final, start=start, done=float(done_at[j]))
                self._observe(events.TaskSent, key=key, unit=unit, message=j, final=final)
            previous = float(done_at[j])

    def _abandon(self, version: int) -> list[int]:
        assert self.worker_pool is not None
        stale = [k for k, t in self._tasks.items() if t.unit.stream and t.unit.version < version]
        freed = [self._tasks[k].unit.worker_index for k in stale if self._tasks[k].final]
        workers = {self._tasks.pop(key).worker for key in stale}
        for worker in workers:  # it drops the rest of those units' messages at once
            self._busy[worker] = max((t.end for t in self._tasks.values() if t.worker == worker),
                                     default=self._now)
        self._observe(events.TasksDropped, keys=tuple(stale))
        return freed

    # ------------------------------------------------------------------ receiving
    def _next(self, timeout: float | None = None) -> WorkResult | None:
        deadline = math.inf if timeout is None else self._now + timeout
        while True:
            self._drop_cancelled()
            fault_at = self._events[0][0] if self._events else math.inf
            check_at = self._wake
            received, crossing = self._upcoming()
            if received == math.inf:  # nothing in flight
                if fault_at <= deadline and fault_at < math.inf:
                    self._now = max(self._now, fault_at)
                    self._play_fault()
                    continue
                if timeout is not None:
                    self._now = deadline
                return None
            first = min(fault_at, check_at)
            if first < received and first <= deadline:
                self._now = max(self._now, first)
                if fault_at <= check_at:
                    self._play_fault()
                else:
                    self._observe(events.Tick, self._new_stimulus_id("tick"),
                                  live=tuple(self._cluster.live()))
                continue
            if received > deadline:
                self._now = deadline
                return None
            if crossing is not None:  # a reply has crossed the coordinator's link
                cast(SharedLink, self._links).finish(crossing, received)
                self._crossed(received, crossing)
                continue
            _, _, key = heapq.heappop(self._heap)
            task = self._tasks[key]
            self._now = received
            if task.queued:  # it reaches the coordinator's link: it shares it from now on
                self._cross_link(received, key, task)
                continue
            done = self._receive(key, task)
            if done is not None:
                return done

    def _upcoming(self) -> tuple[float, str | None]:
        """When the next task in flight is due (received, or reaching the coordinator's
        link), or the next reply crosses that link first (then its key), ``math.inf``
        when nothing is in flight."""
        due = math.inf
        if self._heap:
            finish, _, key = self._heap[0]
            due = self._due(finish, self._tasks[key])
        crossing = None if self._links is None else self._links.next_done()
        if crossing is not None and crossing[0] <= due:
            return crossing[0], crossing[1]
        return due, None

    def _due(self, finish: float, task: _SimTask) -> float:
        """When the coordinator next handles ``task`` (heap time ``finish``): the time it
        reaches the coordinator's link (to queue there), or when it is received."""
        if task.queued:
            return max(self._now, finish)
        n_messages = len(task.result) if isinstance(task.result, tuple) else 1
        if task.unit.version < self._newest:
            n_messages = 0
        return max(self._now, finish) + self.receive_duration * n_messages

    def _cross_link(self, arrival: float, key: str, task: _SimTask) -> None:
        """``task``'s reply reaches the coordinator's link at ``arrival``: it shares the
        link from then on (:meth:`_next` receives it once across)."""
        assert self._links is not None
        self._links.add(key, arrival, self._payload(task.result),
                        self._links.link.rate(self._index(task.worker)))

    def _crossed(self, at: float, key: str) -> None:
        """Reply ``key`` has crossed the coordinator's link at ``at``: it is received
        then (nothing, if nobody waits for it any more: its bytes crossed all the same)."""
        task = self._tasks.get(key)
        if task is not None:
            task.queued = False
            task.latency += at - task.left
            heapq.heappush(self._heap, (at, next(self._order), key))

    def _receive(self, key: str, task: _SimTask) -> WorkResult | None:
        """The pool's view of an arrived task: the method's result, or None (the first
        part of a split unit, or a backup's twin that lost the race)."""
        assert self.worker_pool is not None
        del self._tasks[key]
        answer = self._observe(events.TaskFinished, f"finished-{key}", key=key,
                               outcome=(task.result, task.compute))
        if not answer:
            return None
        result, compute = cast(Deliver, answer[0]).outcome
        if self.aggregation == "tree":
            result = self._hold(result, compute, task)
        return WorkResult(task.unit, result, float(compute), latency=task.latency,
                          message=task.message, final=task.final)

    # ------------------------------------------------------------------ tree aggregation
    def _hold(self, result: Any, compute: float, task: _SimTask) -> Any:
        """``result`` held on its worker index (one leaf per message of a coded result)."""
        held = _Held((result, compute), task.unit.worker_index, task.end)
        if isinstance(result, tuple):
            return tuple(HeldResult.of(Leaf(held, r.n_rows, self, message=j))
                         for j, r in enumerate(result))
        return HeldResult.of(Leaf(held, result.n_rows, self))

    def reduce(self, terms: list[tuple[float, Leaf]]) -> tuple[np.ndarray, np.ndarray]:
        """Return ``sum weight * leaf`` as ``(gradient, values)``, summed as a tree on
        the simulated workers (:class:`SimRuntime`'s ``aggregation``); the clock moves
        to when the sum reached the coordinator."""
        link = None if self._links is None else self._links.link
        incoming: dict[int, float] = {}  # when each worker's link carried what it got

        def submit(weights: list[float], messages: list[int | None], items: list[_Held]
                   ) -> _Held:
            host = items[0]
            value = tree_sum(weights, messages, *(item.data for item in items))
            ready = host.ready
            for item in items[1:]:
                if item.index != host.index and link is not None:
                    nbytes = _nbytes(item.data)
                    # its bytes stream from the sender's link through the receiver's
                    sent = item.ready + link.transfer_duration(item.index, nbytes)
                    incoming[host.index] = (
                        max(sent - link.receive_duration(item.index, nbytes),
                            incoming.get(host.index, 0.0))
                        + link.receive_duration(host.index, nbytes))
                    ready = max(ready, sent, incoming[host.index])
                ready = max(ready, item.ready)
            return _Held(value, host.index, ready + self.sum_duration)

        root = build_tree([(weight, leaf.message, leaf.handle) for weight, leaf in terms],
                          submit)
        gradient, values = root.data
        nbytes = _nbytes(root.data)
        self._fetched += nbytes
        done = root.ready
        if self._links is not None:
            link = self._links.link
            done = self._cross(max(done, self._now) + link.transfer_duration(root.index, 0),
                               nbytes, link.rate(root.index))
        self._now = max(self._now, done)
        return gradient, values

    def _fetched_bytes(self) -> int:
        fetched, self._fetched = self._fetched, 0
        return fetched

    def _drop_cancelled(self) -> None:
        """Pop the tasks nobody waits for (cancelled), or that never answer (their
        worker is gone)."""
        assert self.worker_pool is not None
        while self._heap:
            key = self._heap[0][2]
            task = self._tasks.get(key)
            if task is not None and task.worker not in self._cluster.gone:
                return
            heapq.heappop(self._heap)
            if task is not None:
                del self._tasks[key]
                self._observe(events.TasksDropped, f"dropped-{key}", keys=(key,))

    # ------------------------------------------------------------------ faults
    def _play_fault(self) -> None:
        """Apply the next fault (:meth:`Fault.apply`) and hand the pool the statuses it
        leaves."""
        assert self.worker_pool is not None
        _, _, fault = heapq.heappop(self._events)
        self._cluster = fault.apply(self._cluster)
        self._observe(events.StatusChanged, self._new_stimulus_id(type(fault).__name__.lower()),
                      status=self._cluster.statuses())

    @functools.singledispatchmethod
    def _carry(self, instruction: Instruction) -> None:
        """As :meth:`Runtime._carry`; data moves take no time, and a helper stopping
        needs nothing here."""
        if not isinstance(instruction, StopHelping):
            super()._carry(instruction)

    @_carry.register(MoveIndex)
    def _(self, instruction: MoveIndex) -> None:
        held = sorted(self._blocks[instruction.index])
        self._losses.append({
            "worker_index": instruction.index, "lost": instruction.previous,
            "moved_to": instruction.to, "reason": instruction.why, "kind": instruction.kind,
            "time": self._now, "stimulus_id": instruction.stimulus_id, "partitions": held,
            "reloaded": [] if instruction.how == "fetch" or instruction.from_helper
            else list(held)})

    @_carry.register(StartHelping)
    def _(self, instruction: StartHelping) -> None:
        self._observe(events.HelperReady, index=instruction.index)

    @_carry.register(AwaitWorkers)
    def _(self, instruction: AwaitWorkers) -> None:
        self._await_workers()

    def _cancel(self, keys: tuple[str, ...] | list[str]) -> None:
        for key in keys:
            self._tasks.pop(key, None)

    @_carry.register(SendBackup)
    def _send_backup(self, instruction: SendBackup) -> None:
        assert self.worker_pool is not None
        unit, j = instruction.unit, instruction.to_index
        blocks: list[Block] = [self._partitions[p] for p in unit.partitions]
        result, measured = run_unit(self._work, unit.iterate, *blocks,
                                    coefficients=unit.coefficients, rows=unit.rows)
        compute, communication = self._draw(j, unit, self._unit_load(unit), measured, result)
        key = self._push(self.worker_pool.workers[j], unit, result, compute, communication)
        self._observe(events.BackupSent, key=instruction.key, backup_key=key)

    def _await_workers(self) -> None:
        """Every worker is gone: play the faults of the next ``timeouts.no-worker``
        seconds; one among them that adds workers (a join) carries on, else the run
        ends."""
        from daskstraggle.runtime._membership import no_worker_error, no_worker_timeout

        limit = no_worker_timeout()
        cluster = self._cluster
        joins = sorted(at for at, _, f in self._events
                       if f.apply(cluster).joined > cluster.joined)
        if not joins or joins[0] > self._now + limit:
            raise no_worker_error(limit)
        self._now = joins[0]
        while self._events and self._events[0][0] <= joins[0]:
            self._play_fault()

    def _after_step(self) -> None:
        self._now += self.update_duration

    def _wrote(self, nbytes: int) -> None:
        """The state crosses the coordinator's link (the link term's ``coordinator``; the
        replies' too: a checkpoint on a network filesystem, a replica on the scheduler),
        and the coordinator waits for it."""
        if self._links is not None:
            self._now = self._cross(self._now, nbytes)

    def _cross(self, time: float, nbytes: int, rate: float = math.inf) -> float:
        """When a message the coordinator waits for, entering its link at ``time`` (fed at
        ``rate``), has crossed it; the replies that crossed first are received."""
        done, before = cast(SharedLink, self._links).cross(time, nbytes, rate)
        for at, key in before:
            self._crossed(at, key)
        return done

    def _run_attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "simulated": True,
            "latency_model": "none" if self.latency is None else self.latency.to_spec(),
            "update_duration_s": self.update_duration,
            "receive_duration_s": self.receive_duration,
            "sum_duration_s": self.sum_duration,
            "real_duration_s": time.perf_counter() - self._real_start,
        }
        if self.faults:
            attrs["faults"] = " + ".join(f.to_spec() for f in self.faults)
        return {**attrs, **self._pool_attrs(self._losses, self.backup_after)}

    def _cancel_pending(self) -> None:
        self._heap.clear()
        self._tasks.clear()
        if self.worker_pool is not None:
            self._observe(events.TasksDropped, self._new_stimulus_id("ended"), keys=None)


@dataclass(slots=True)
class _SimTask:
    """A task in simulated flight: its unit, result and timings."""

    unit: WorkUnit
    result: Any
    compute: float
    latency: float
    message: int | None
    final: bool
    worker: str
    end: float  # when its computing ends (then the worker is free)
    queued: bool = False  # it has yet to cross the coordinator's link
    left: float = 0.0  # when its last byte left its worker's link


@dataclass(slots=True)
class _Held:
    """A result on a simulated worker: its data (a unit task's ``(result, seconds)``, or
    an inner sum's ``(gradient, values)``), the worker index and when it is there."""

    data: Any
    index: int
    ready: float


def _nbytes(data: Any) -> int:
    """Bytes a held item moves to another worker: a unit's result (all its messages) or
    an inner sum's ``(gradient, values)``."""
    if isinstance(data[0], np.ndarray):
        return int(data[0].nbytes + data[1].nbytes)
    return payload_bytes(data[0])


def _freeze_windows(faults: tuple[Fault, ...]) -> dict[str, list[tuple[float, float]]]:
    """Each worker's frozen intervals ``[at, until)``, overlapping ones merged, in order."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for fault in faults:
        for worker, at, until in fault.freeze_windows():
            spans.setdefault(worker, []).append((at, until))
    merged: dict[str, list[tuple[float, float]]] = {}
    for worker, windows in spans.items():
        out: list[tuple[float, float]] = []
        for at, until in sorted(windows):
            if out and at <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], until))
            else:
                out.append((at, until))
        merged[worker] = out
    return merged


def _parse_faults(faults: Any) -> tuple[Fault, ...]:
    """The fault terms of ``faults`` (a spec string, or Fault objects)."""
    if faults is None:
        return ()
    if isinstance(faults, str):
        spec = parse_stragglers(faults)
        if spec.model is not None or spec.throttle is not None:
            raise InvalidParameterError(
                f"The 'faults' parameter of SimRuntime takes only loss, freeze, join and "
                f"retire terms (the fault kinds: {', '.join(FAULTS.names())}); pass the "
                f"latency model as latency=. Got {faults!r}."
            )
        return spec.faults
    if isinstance(faults, Fault):
        return (faults,)
    if isinstance(faults, tuple | list) and all(isinstance(f, Fault) for f in faults):
        return tuple(faults)
    raise InvalidParameterError(
        f"The 'faults' parameter of SimRuntime must be a spec string such as "
        f"'loss(workers=1, at=2)' or a list of faults. Got {faults!r} instead."
    )
