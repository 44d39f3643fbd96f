"""SimRuntime: any Method in simulated time, with worker latency from a latency model.

The numbers are real (every kernel runs in this process, on the same blocks the Dask
runtime would load); only the clock is simulated. A task a worker starts at simulated
time ``a`` completes at ``a + compute + communication`` drawn from the latency model for
that worker (``time=a``, ``iteration`` = the unit's version, ``load`` = its share of the
rows). Results are delivered in completion order through the same driving loop as the
Dask runtime, so methods make the same decisions they would on a cluster, and the trace
has the same schema (times in simulated seconds). This is the simulator of
:mod:`daskstraggle.latency.simulator` with a real method in the loop: for the DSAG
coordinator semantics (SGD/DSAG with ``n_wait``) the two produce identical iteration
times from the same seed.

A 1000-worker run fits on one machine: memory is one copy of the matrix, time is the
kernels' total compute.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Any

import numpy as np

from daskstraggle._validation import check_int, check_nonnegative
from daskstraggle.latency.base import LatencyModel, LatencySampler
from daskstraggle.latency.spec import parse_latency
from daskstraggle.methods.base import WorkResult, WorkUnit
from daskstraggle.problems.base import Problem
from daskstraggle.runtime.base import run_unit
from daskstraggle.runtime.local import LocalRuntime

__all__ = ["SimRuntime"]


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
        measured time.
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
    rng : int, Generator or None, default=None
        Seed of the latency draws (independent of the run's ``rng``).

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import open_matrix
    >>> from daskstraggle.methods import SGD
    >>> from daskstraggle.problems import PCA
    >>> from daskstraggle.runtime import StopRule
    >>> X = np.random.default_rng(0).normal(size=(400, 6))
    >>> with SimRuntime(8, latency="gamma(mean=0.1, var=1e-3)", rng=1) as rt:
    ...     res = rt.run(SGD(n_wait=4), PCA(n_components=2), open_matrix(X),
    ...                  stop=StopRule(max_iter=10, tol=None), rng=0)
    >>> res.trace.sizes["iteration"], bool(res.trace.wall_time[-1] > 0.5)
    (10, True)
    """

    name = "sim"

    balance_in_background = False  # the simulated clock stands still while planning

    def __init__(
        self,
        n_workers: int | None = None,
        latency: LatencyModel | str | None = None,
        *,
        update_duration: float = 0.0,
        receive_duration: float = 0.0,
        rng: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(None if n_workers is None else check_int(
            n_workers, name="n_workers", caller="SimRuntime", low=1))
        self.latency = None if latency is None else parse_latency(latency)
        if self.latency is not None:
            self.latency.check_n_workers(self._n_workers)
        self.update_duration = check_nonnegative(update_duration, name="update_duration",
                                                 caller="SimRuntime")
        self.receive_duration = check_nonnegative(receive_duration, name="receive_duration",
                                                  caller="SimRuntime")
        self._seed = np.random.SeedSequence(
            int(rng.integers(2**63)) if isinstance(rng, np.random.Generator) else rng
        )
        self._heap: list[tuple[float, int, WorkResult]] = []
        self._order = itertools.count()
        self._now = 0.0
        self._newest = 0  # newest version dispatched
        self._sampler: LatencySampler | None = None
        self._real_start = 0.0

    def _clock(self) -> float:
        return self._now

    def _begin(self, placement: list[tuple[int, ...]], partition_rows: list[int]) -> None:
        self._now = 0.0
        self._newest = 0
        self._heap.clear()
        self._real_start = time.perf_counter()
        self._sampler = None if self.latency is None else self.latency.sampler(
            self._n_workers, self._seed
        )

    def _submit(self, unit: WorkUnit, problem: Problem) -> None:
        held = self._blocks[unit.worker_index]
        if unit.stream:
            self._submit_stream(unit, problem)
            return
        result, measured = run_unit(problem, unit.iterate, *(held[p] for p in unit.partitions),
                                    coefficients=unit.coefficients, rows=unit.rows)
        if self._sampler is None:
            compute, communication = measured, 0.0
        else:
            compute, communication = self._sampler.sample(
                unit.worker_index, time=self._now, iteration=unit.version,
                load=self._unit_load(unit), measured=measured,
            )
        self._newest = max(self._newest, unit.version)
        latency = float(compute) + float(communication)
        done = WorkResult(unit, result, float(compute), latency=latency)
        heapq.heappush(self._heap, (self._now + latency, next(self._order), done))

    def _submit_stream(self, unit: WorkUnit, problem: Problem) -> None:
        """Schedule each message of a streamed unit at its own completion time.

        One latency draw covers the whole unit (load = all its rows); message ``j``
        completes once the rows of messages ``0 .. j`` are computed, at that fraction of
        the compute time, plus the communication time: with the multi-message model and
        equal partitions the ``j``-th partition is done at ``j (alpha + X)``.
        """
        computed = self._compute_stream(unit, problem)
        measured = [seconds for _, _, seconds in computed]
        if self._sampler is None:
            compute, communication = sum(measured), 0.0
        else:
            compute, communication = self._sampler.sample(
                unit.worker_index, time=self._now, iteration=unit.version,
                load=self._unit_load(unit), measured=sum(measured),
            )
        self._newest = max(self._newest, unit.version)
        rows = np.cumsum([sum(self._partition_rows[p] for p in parts)
                          for parts, _, _ in computed], dtype=np.float64)
        done_at = float(compute) * rows / rows[-1]
        previous = 0.0
        for j, (_, message, _) in enumerate(computed):
            latency = float(done_at[j]) + float(communication)
            done = WorkResult(unit, message, float(done_at[j] - previous), latency=latency,
                              message=j, final=j == len(computed) - 1)
            previous = float(done_at[j])
            heapq.heappush(self._heap, (self._now + latency, next(self._order), done))

    def _abandon(self, version: int) -> list[int]:
        keep, freed = [], []
        for entry in self._heap:
            unit = entry[2].unit
            if unit.stream and unit.version < version:
                if entry[2].final:
                    freed.append(unit.worker_index)
            else:
                keep.append(entry)
        if len(keep) != len(self._heap):
            self._heap = keep
            heapq.heapify(self._heap)
        return freed

    def _next(self, timeout: float | None = None) -> WorkResult | None:
        if not self._heap:
            if timeout is not None:
                self._now += timeout
            return None
        finish, _, head = self._heap[0]
        n_messages = len(head.result) if isinstance(head.result, tuple) else 1
        if head.unit.version < self._newest:
            n_messages = 0
        received = max(self._now, finish) + self.receive_duration * n_messages
        if timeout is not None and received > self._now + timeout:
            self._now += timeout
            return None
        heapq.heappop(self._heap)
        self._now = received
        return head

    def _after_step(self) -> None:
        self._now += self.update_duration

    def _run_attrs(self) -> dict[str, Any]:
        return {
            "simulated": True,
            "latency_model": "none" if self.latency is None else self.latency.to_spec(),
            "update_duration_s": self.update_duration,
            "receive_duration_s": self.receive_duration,
            "real_duration_s": time.perf_counter() - self._real_start,
        }

    def _cancel_pending(self) -> None:
        self._heap.clear()

    def _unload(self) -> None:
        super()._unload()
        self._heap.clear()
