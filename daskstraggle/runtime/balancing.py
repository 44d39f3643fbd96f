"""Load balancing inside a run: the profiler fed by every result, the optimizer off the loop
(:class:`BalanceLoop`)."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from daskstraggle.balance._planner import PlannerProcess
from daskstraggle.balance.balancer import LoadBalancer
from daskstraggle.balance.optimizer import BalancePlan
from daskstraggle.methods.base import WorkResult
from daskstraggle.methods.sgd import SGD

__all__ = ["BalanceLoop"]

logger = logging.getLogger(__name__)


class BalanceLoop:
    """Profile, optimise in the background, apply plans between iterations.

    Every final result feeds a :class:`~daskstraggle.latency.profiler.LatencyProfiler`;
    the optimizer (:meth:`~daskstraggle.balance.LoadBalancer.plan`) runs in a child process
    on real runtimes (a thread would compete with the Dask client for the GIL), inline on
    the simulated one, whose clock does not move meanwhile; an accepted plan is applied
    with ``method.set_subpartitions``: each worker's next task carries its new row range,
    no data moves. ``method`` is a started SGD, SAG or DSAG with a ``balancer``;
    ``background`` runs the optimizer in a child process (a thread if the process cannot
    start or dies), else inline.
    """

    def __init__(self, method: SGD, n_workers: int, *, background: bool) -> None:
        if method.balancer is None:
            raise ValueError("BalanceLoop needs a method with a balancer")
        balancer: LoadBalancer = method.balancer
        self.method = method
        self.balancer = balancer
        self.profiler = balancer.make_profiler(n_workers)
        self.initial = tuple(method.subpartition_counts)
        self.events: list[dict[str, Any]] = []
        self._fresh_seen = [False] * n_workers
        self._process: PlannerProcess | None = None
        self._executor: ThreadPoolExecutor | None = None
        if background:
            try:
                self._process = PlannerProcess()
            except OSError as err:
                logger.warning("the load balancer's planner process did not start (%s); "
                               "planning in a thread", err)
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="daskstraggle-balance")
        self._job: Future[BalancePlan | None] | None = None
        self._last_start: float | None = None

    def record(self, result: WorkResult, *, now: float, load: float, stale: bool) -> None:
        """Feed one final result's timings to the profiler: the compute time the worker
        measured and the communication time (the round trip minus it), per unit load."""
        if not result.final or result.latency is None:
            return
        i = result.unit.worker_index
        compute = max(float(result.compute_duration), 0.0)
        communication = max(float(result.latency) - compute, 0.0)
        # a stale result's round trip may include time it waited for the coordinator, so
        # the profiler substitutes the worker's recent fresh average; a worker that is
        # never fresh (always slower than the n_wait fastest) has none, and its measured
        # span is the only estimate there is
        self.profiler.record(i, time=now, compute=compute, communication=communication,
                             load=max(load, 1e-12), stale=stale and self._fresh_seen[i])
        if not stale:
            self._fresh_seen[i] = True

    def after_step(self, *, now: float, iteration: int) -> dict[str, Any] | None:
        """Apply a finished plan, then start the optimizer again if it is due.

        The optimizer is due ``balancer.interval`` after its last start and only once
        every worker holding rows has enough samples, so a run whose statistics are not
        ready yet retries at the next step instead of a full interval later. Inline
        (simulated time) the plan is applied at once.

        Returns the balancing event applied now (None if none).
        """
        event = None
        plan = self._take_finished()
        if plan is not None:
            event = self._apply(plan, iteration)
        if self._job is not None or (self._last_start is not None
                                     and now - self._last_start < self.balancer.interval):
            return event
        stats = self.profiler.statistics()
        if not self.balancer.ready(stats, self.method.worker_rows):
            return event
        self._last_start = now
        method = self.method
        args: tuple[Any, ...] = (stats, tuple(method.subpartition_counts),
                                 tuple(method.worker_rows))
        kwargs: dict[str, Any] = {"n_wait": int(method.n_wait_run), "p_initial": self.initial,
                                  "collect_window": float(method.collect_window)}
        if self._process is not None:
            self._job = self._process.submit(self.balancer, *args, **kwargs)
            return event
        if self._executor is not None:
            self._job = self._executor.submit(self.balancer.plan, *args, **kwargs)
            return event
        plan = self.balancer.plan(*args, **kwargs)
        if plan is not None and event is None:
            event = self._apply(plan, iteration)
        return event

    def _take_finished(self) -> BalancePlan | None:
        if self._job is None or not self._job.done():
            return None
        job, self._job = self._job, None
        try:
            return job.result()
        except Exception as err:  # a failed plan must not end the run
            logger.warning("the load balancer's optimizer failed: %s", err)
            if self._process is not None and not self._process.running:
                logger.warning("the load balancer's planner process exited; planning in a "
                               "thread from now on")
                self._process.close()
                self._process = None
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="daskstraggle-balance")
            return None

    def _apply(self, plan: BalancePlan, iteration: int) -> dict[str, Any] | None:
        """Apply ``plan`` if accepted and computed from the current counts; return the
        event recorded in the trace (None: not applied)."""
        current = tuple(self.method.subpartition_counts)
        if not plan.accepted or tuple(plan.previous) != current:
            return None
        changes = self.method.set_subpartitions(plan.subpartitions)
        if not changes:
            return None
        event = {
            "iteration": iteration,
            "previous": list(current),
            "subpartitions": [int(v) for v in plan.subpartitions],
            "improvement": float(plan.improvement),
            "previous_imbalance": float(plan.previous_imbalance),
            "imbalance": float(plan.imbalance),
        }
        self.events.append(event)
        logger.info("load balancer: iteration %d, subpartitions %s -> %s (predicted max/min "
                    "latency %.3g -> %.3g)", iteration, event["previous"],
                    event["subpartitions"], plan.previous_imbalance, plan.imbalance)
        return event  # the profiler's samples are per unit load: they stay usable

    def close(self) -> None:
        """Stop the planner process, or the thread (a running plan there finishes alone)."""
        if self._process is not None:
            self._process.close()
            self._process = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._job = None
