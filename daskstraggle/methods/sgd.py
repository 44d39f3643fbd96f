"""Distributed SGD that waits only for the fastest ``n_wait`` workers (DSAG paper, §V)."""

from __future__ import annotations

from typing import Any

import numpy as np

from daskstraggle._validation import check_int, check_nonnegative
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import Method, RoundSummary, WorkResult, WorkUnit
from daskstraggle.problems.base import KernelResult, Problem

__all__ = ["SGD"]


class SGD(Method):
    """Wait for the ``n_wait`` fastest fresh results, scale their sum by the rows covered.

    The coordinator loop of the DSAG paper (§V-A) with stale results discarded:

    - an idle worker gets the current iterate unless it already delivered a fresh result
      for it (it then waits for the next iteration);
    - a result computed at an older version is *stale*: it is dropped and the worker is
      given the current iterate at once;
    - once ``n_wait`` fresh results arrived (plus ``collect_window`` of the round's
      elapsed time, collected by the runtime), the gradient estimate is the sum of the
      fresh results divided by ``xi`` = rows covered / all rows, and the iterate steps.

    With ``n_wait`` equal to the number of workers this is :class:`~daskstraggle.methods.GD`.

    Parameters
    ----------
    n_wait : int or None, default=None
        Fresh results waited for each iteration (None: all workers holding data).
    collect_window : float, default=0.02
        Fraction of the round's elapsed time to keep collecting after the ``n_wait``-th
        fresh result.

    References
    ----------
    Severinson, Rosnes, El Rouayheb, Graell i Amat, "DSAG: A mixed synchronous-
    asynchronous iterative method for straggler-resilient learning", IEEE Trans.
    Commun., 2022 (``papers/dsag.txt``), §V-A.

    Examples
    --------
    >>> SGD(n_wait=2).get_params()
    {'n_wait': 2, 'collect_window': 0.02}
    """

    name = "sgd"

    def __init__(self, n_wait: int | None = None, *, collect_window: float = 0.02) -> None:
        if n_wait is not None:
            n_wait = check_int(n_wait, name="n_wait", caller=type(self).__name__, low=1)
        self.n_wait = n_wait
        self.collect_window = check_nonnegative(collect_window, name="collect_window",
                                                caller=type(self).__name__)
        self._problem: Problem | None = None

    def get_params(self) -> dict[str, Any]:
        """Return the parameters."""
        return {"n_wait": self.n_wait, "collect_window": self.collect_window}

    def check_n_workers(self, n_workers: int) -> None:
        """Refuse ``n_wait`` > ``n_workers``."""
        if self.n_wait is not None and self.n_wait > n_workers:
            raise InvalidParameterError(
                f"The 'n_wait' parameter of {type(self).__name__} must be an int in "
                f"[1, {n_workers}] (the number "
                f"of workers). Got {self.n_wait!r} instead."
            )

    def start(
        self,
        problem: Problem,
        iterate: np.ndarray,
        placement: list[tuple[int, ...]],
        *,
        step_size: float,
        partition_rows: list[int] | None = None,
    ) -> None:
        """Reset the run state."""
        holders = [i for i, parts in enumerate(placement) if parts]
        n_wait = len(holders) if self.n_wait is None else self.n_wait
        if n_wait > len(holders):
            raise InvalidParameterError(
                f"The 'n_wait' parameter of {type(self).__name__} must be an int in "
                f"[1, {len(holders)}] (the "
                f"workers holding data). Got {n_wait!r} instead."
            )
        if partition_rows is None:
            raise InvalidParameterError(
                f"{type(self).__name__} needs the partition row counts from the runtime."
            )
        self._problem = problem
        self._placement = placement
        self._worker_rows = [sum(partition_rows[p] for p in parts) for parts in placement]
        self._total_rows = sum(partition_rows)
        self._n_wait_run = n_wait
        self._step_size = float(step_size)
        self._x = np.array(iterate, dtype=np.float64)
        self._version = 0
        self._fresh: dict[int, WorkResult] = {}
        self._dropped = 0
        self._summary: RoundSummary | None = None

    @property
    def version(self) -> int:
        """Number of steps taken."""
        return self._version

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Give the current iterate to an idle worker that has no fresh result yet."""
        if worker_index in self._fresh or not self._placement[worker_index]:
            return None
        return WorkUnit(worker_index, self._placement[worker_index], self._x, self._version)

    def receive(self, result: WorkResult) -> None:
        """Keep fresh results; drop stale ones (the runtime re-tasks their workers)."""
        if result.unit.version == self._version:
            self._fresh[result.unit.worker_index] = result
            self._summary = None
        else:
            self._dropped += 1

    def ready(self) -> bool:
        """True once ``n_wait`` fresh results arrived."""
        return len(self._fresh) >= self._n_wait_run

    def summary(self) -> RoundSummary:
        """Return the scaled sum of the fresh results (exact when every row is covered)."""
        assert self._problem is not None and self.ready()
        if self._summary is not None:
            return self._summary
        order = sorted(self._fresh)
        total: KernelResult = self._fresh[order[0]].result
        for i in order[1:]:
            total = total + self._fresh[i].result
        covered = sum(self._worker_rows[i] for i in order)
        exact = covered == self._total_rows
        estimate = total if exact else total.scaled(self._total_rows / covered)
        self._summary = RoundSummary(
            iterate=self._x,
            result=estimate,
            objective=self._problem.objective(total.values, self._x) if exact else None,
            workers_used=tuple(order),
            n_fresh=len(order),
            n_stale=0,
            coverage=covered / self._total_rows,
            n_dropped=self._dropped,
        )
        return self._summary

    def step(self) -> None:
        """Step along the estimated gradient."""
        assert self._problem is not None
        estimate = self.summary().result
        self._x = self._problem.update(self._x, estimate.gradient, self._step_size)
        self._version += 1
        self._fresh.clear()
        self._dropped = 0
        self._summary = None
