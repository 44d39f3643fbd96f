"""SAG and DSAG: wait for the fastest ``w`` workers, keep what the slow ones computed.

DSAG (Severinson et al., ``papers/dsag.txt`` §V) keeps a cache of the latest result for
every sample range; each iteration the coordinator waits for ``w`` results computed at the
current iterate, also folds in the stale results that arrive meanwhile, and steps along
the cache's sum scaled by the covered fraction of rows. SAG is the same loop with stale
results discarded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskstraggle._validation import check_int
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import RoundSummary, WorkResult, WorkUnit
from daskstraggle.methods.cache import GradientCache, Ranges, normalize_ranges
from daskstraggle.methods.sgd import SGD
from daskstraggle.problems.base import Problem

__all__ = ["DSAG", "SAG", "subpartition_bounds"]


def subpartition_bounds(n_rows: int, n_sub: int) -> np.ndarray:
    """Return the ``n_sub + 1`` boundaries of near-equal subpartitions of ``n_rows`` rows.

    Examples
    --------
    >>> subpartition_bounds(10, 3).tolist()
    [0, 3, 7, 10]
    """
    return np.linspace(0, n_rows, n_sub + 1).round().astype(int)


class DSAG(SGD):
    """Distributed SAG: wait for ``w`` fresh results, fold in stale ones (DSAG paper §V).

    The coordinator loop:

    - an idle worker gets the current iterate and its next subpartition (cyclically),
      unless it already delivered a fresh result this iteration; no work is queued behind
      a busy worker;
    - every result goes into the gradient cache keyed by its rows unless an overlapping
      entry is at least as fresh (then it is discarded); overlapping older entries are
      evicted;
    - a result computed at an older iterate (*stale*) is inserted the same way (SAG:
      discarded), and its worker gets the current iterate at once;
    - once ``n_wait`` fresh results arrived, the runtime keeps collecting for
      ``collect_window`` of the round's elapsed time; then the iterate steps along the
      cache's sum divided by ``xi``, the covered fraction of rows.

    Parameters
    ----------
    n_wait : int or None, default=None
        Fresh results waited for each iteration, ``w`` (None: all workers holding data).
    subpartitions : int or sequence of int, default=1
        Subpartitions ``p_i`` per worker (one value for all, or one per worker). Each
        task covers one subpartition of the worker's rows, in turn; the load balancer
        changes them without moving data.
    collect_window : float, default=0.02
        Fraction of the round's elapsed time to keep collecting after the ``n_wait``-th
        fresh result.

    Notes
    -----
    With ``n_wait`` equal to the number of workers, one subpartition each and no
    stragglers, every iteration's cache holds only fresh results and DSAG is GD.
    The objective of a round is recorded only when every cache entry was computed at the
    current iterate (otherwise it mixes iterates); the final objective is evaluated
    exactly by the runtime.

    References
    ----------
    Severinson, Rosnes, El Rouayheb, Graell i Amat, "DSAG: A mixed synchronous-
    asynchronous iterative method for straggler-resilient learning", IEEE Trans.
    Commun., 2022 (``papers/dsag.txt``), §V.

    Examples
    --------
    >>> DSAG(n_wait=3, subpartitions=2).get_params()
    {'n_wait': 3, 'subpartitions': 2, 'collect_window': 0.02}
    """

    name = "dsag"
    use_stale = True

    def __init__(self, n_wait: int | None = None, *, subpartitions: int | Any = 1,
                 collect_window: float = 0.02) -> None:
        super().__init__(n_wait, collect_window=collect_window)
        caller = type(self).__name__
        if isinstance(subpartitions, (list, tuple, np.ndarray)):
            subpartitions = tuple(check_int(p, name="subpartitions", caller=caller, low=1)
                                  for p in subpartitions)
            if not subpartitions:
                raise InvalidParameterError(
                    f"The 'subpartitions' parameter of {caller} must be an int >= 1 or one "
                    "per worker. Got an empty sequence instead."
                )
        else:
            subpartitions = check_int(subpartitions, name="subpartitions", caller=caller, low=1)
        self.subpartitions = subpartitions

    def get_params(self) -> dict[str, Any]:
        """Return the parameters."""
        return {"n_wait": self.n_wait, "subpartitions": self.subpartitions,
                "collect_window": self.collect_window}

    def check_n_workers(self, n_workers: int) -> None:
        """Refuse ``n_wait`` above ``n_workers`` and per-worker lists of another length."""
        super().check_n_workers(n_workers)
        if isinstance(self.subpartitions, tuple) and len(self.subpartitions) != n_workers:
            raise InvalidParameterError(
                f"The 'subpartitions' parameter of {type(self).__name__} has "
                f"{len(self.subpartitions)} values but there are {n_workers} workers; give "
                "one value or one per worker."
            )

    # ------------------------------------------------------------------ run state

    def start(
        self,
        problem: Problem,
        iterate: np.ndarray,
        placement: list[tuple[int, ...]],
        *,
        step_size: float,
        partition_rows: list[int] | None = None,
    ) -> None:
        """Reset the run state: empty cache, every worker at its first subpartition."""
        self.check_n_workers(len(placement))
        super().start(problem, iterate, placement, step_size=step_size,
                      partition_rows=partition_rows)
        assert partition_rows is not None
        caller = type(self).__name__
        self._partition_starts = np.concatenate([[0], np.cumsum(partition_rows)]).astype(int)
        self._cache = GradientCache(self._total_rows)
        self._n_stale = 0
        self._next_sub = [0] * len(placement)
        self._bounds: list[np.ndarray] = []
        for i, rows in enumerate(self._worker_rows):
            p = self.subpartitions[i] if isinstance(self.subpartitions, tuple) \
                else self.subpartitions
            if placement[i] and p > rows:
                raise InvalidParameterError(
                    f"The 'subpartitions' parameter of {caller} asks for {p} subpartitions of "
                    f"worker {i}, which holds {rows} rows; use at most {rows}."
                )
            self._bounds.append(subpartition_bounds(rows, p))
        self._summary: RoundSummary | None = None

    @property
    def cache(self) -> GradientCache:
        """The gradient cache of the current run."""
        return self._cache

    def subpartition_ranges(self, worker_index: int, k: int) -> Ranges:
        """Global row ranges of subpartition ``k`` of a worker."""
        bounds = self._bounds[worker_index]
        return self._global_ranges(worker_index, int(bounds[k]), int(bounds[k + 1]))

    def _global_ranges(self, worker_index: int, a: int, b: int) -> Ranges:
        """Map rows ``[a, b)`` of a worker's concatenated partitions to global ranges."""
        out, offset = [], 0
        for p in self._placement[worker_index]:
            lo, hi = int(self._partition_starts[p]), int(self._partition_starts[p + 1])
            n = hi - lo
            s, e = max(a - offset, 0), min(b - offset, n)
            if s < e:
                out.append((lo + s, lo + e))
            offset += n
        return normalize_ranges(out)

    # ------------------------------------------------------------------ the loop

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Give an idle worker the current iterate and its next subpartition."""
        if worker_index in self._fresh or not self._placement[worker_index]:
            return None
        bounds = self._bounds[worker_index]
        k = self._next_sub[worker_index]
        self._next_sub[worker_index] = (k + 1) % (len(bounds) - 1)
        rows = None if len(bounds) == 2 else (int(bounds[k]), int(bounds[k + 1]))
        return WorkUnit(worker_index, self._placement[worker_index], self._x, self._version,
                        rows=rows)

    def _ranges_of(self, unit: WorkUnit) -> Ranges:
        if unit.rows is None:
            return self._global_ranges(unit.worker_index, 0, self._worker_rows[unit.worker_index])
        return self._global_ranges(unit.worker_index, *unit.rows)

    def receive(self, result: WorkResult) -> None:
        """Cache fresh results; cache (DSAG) or drop (SAG) stale ones."""
        unit = result.unit
        fresh = unit.version == self._version
        if not fresh and not self.use_stale:
            self._dropped += 1
            return
        if isinstance(result.result, tuple):
            raise InvalidParameterError(f"{type(self).__name__} takes plain (uncoded) results.")
        kept = self._cache.insert(self._ranges_of(unit), unit.version, result.result,
                                  unit.worker_index)
        if fresh:
            self._fresh[unit.worker_index] = result
        elif kept:
            self._n_stale += 1
        if not kept:
            self._dropped += 1
        self._summary = None

    def summary(self) -> RoundSummary:
        """Return the cache's sum scaled by the covered fraction of rows."""
        assert self._problem is not None and self.ready()
        if self._summary is not None:
            return self._summary
        total = self._cache.total()
        assert total is not None
        covered = self._cache.covered
        exact = covered == self._cache.n_rows and all(
            v == self._version for v in self._cache.versions()
        )
        estimate = total if covered == self._cache.n_rows else total.scaled(
            self._cache.n_rows / covered)
        self._summary = RoundSummary(
            iterate=self._x,
            result=estimate,
            objective=self._problem.objective(total.values, self._x) if exact else None,
            workers_used=tuple(sorted({e.worker_index for e in self._cache})),
            n_fresh=len(self._fresh),
            n_stale=self._n_stale,
            coverage=covered / self._cache.n_rows,
            n_dropped=self._dropped,
        )
        return self._summary

    def step(self) -> None:
        """Step along the cached estimate."""
        super().step()
        self._n_stale = 0


class SAG(DSAG):
    """Stochastic average gradient over the workers: DSAG with stale results discarded.

    Same loop, cache and parameters as :class:`DSAG`; results computed at an older
    iterate are dropped (their workers get the current iterate at once), so a worker
    that is always slower than the ``n_wait`` fastest never refreshes its rows, which
    keep the result it delivered last while fresh.

    Examples
    --------
    >>> SAG(n_wait=2).name
    'sag'
    """

    name = "sag"
    use_stale = False
