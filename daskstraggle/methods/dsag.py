"""SAG and DSAG: wait for the fastest ``w`` workers, keep what the slow ones computed.

DSAG (Severinson et al., IEEE Trans. Commun. 2022, §V) keeps a cache of the latest result for
every sample range; each iteration the coordinator waits for ``w`` results computed at the
current iterate, also folds in the stale results that arrive meanwhile, and steps along
the cache's sum scaled by the covered fraction of rows. SAG is the same loop with stale
results discarded.
"""

from __future__ import annotations

import numpy as np

from daskstraggle.balance.partition import subpartition_bounds
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import RoundSummary, WorkResult, WorkUnit, cached_summary
from daskstraggle.methods.cache import GradientCache, Ranges
from daskstraggle.methods.sgd import SGD
from daskstraggle.problems.base import Problem

__all__ = ["DSAG", "SAG", "subpartition_bounds"]  # subpartition_bounds: re-exported


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
    n_wait, subpartitions, collect_window
        As :class:`SGD`; ``n_wait`` is the paper's ``w``.
    balance : bool or LoadBalancer or None, default=None
        Balance the load while running (DSAG-LB, paper §VI); see :class:`SGD`. Resized
        subpartitions start where old ones started (Algorithm 2), so the cache entries
        they evict are re-covered with the fewest rows missing.

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
    Commun., 2022, §V (notes: ``docs/algorithms.md``).

    Examples
    --------
    >>> DSAG(n_wait=3, subpartitions=2).get_params()
    {'n_wait': 3, 'subpartitions': 2, 'collect_window': 0.02, 'balance': None}
    """

    name = "dsag"
    description = "sag that also folds in stale results"
    use_stale = True

    # ------------------------------------------------------------------ run state

    def start(self, problem: Problem, iterate: np.ndarray, placement: list[tuple[int, ...]], *,
              step_size: float, partition_rows: list[int] | None = None) -> None:
        """Reset the run state: empty cache, every worker at its first subpartition."""
        super().start(problem, iterate, placement, step_size=step_size,
                      partition_rows=partition_rows)
        self._cache = GradientCache(self._total_rows)
        self._n_stale = 0
        self._summary: RoundSummary | None = None

    @property
    def cache(self) -> GradientCache:
        """The gradient cache of the current run."""
        return self._cache

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

    @cached_summary
    def summary(self) -> RoundSummary:
        """Return the cache's sum scaled by the covered fraction of rows."""
        assert self._problem is not None and self.ready()
        total = self._cache.total()
        assert total is not None
        covered = self._cache.covered
        exact = covered == self._cache.n_rows and all(
            v == self._version for v in self._cache.versions()
        )
        estimate = total if covered == self._cache.n_rows else total.scaled(
            self._cache.n_rows / covered)
        return RoundSummary(
            iterate=self._x,
            result=estimate,
            objective=self._problem.objective(total.values, self._x) if exact else None,
            workers_used=tuple(sorted({e.worker_index for e in self._cache})),
            n_fresh=len(self._fresh),
            n_stale=self._n_stale,
            coverage=covered / self._cache.n_rows,
            n_dropped=self._dropped,
            # iterations since the oldest cache entry's iterate: a frozen worker's rows
            # keep an old result (the runtime moves them once the worker is overdue)
            extras={"staleness": float(self._version - min(self._cache.versions()))},
        )

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
    description = "sgd with a cache of every worker's last fresh result"
    use_stale = False
