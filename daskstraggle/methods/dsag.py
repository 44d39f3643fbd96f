"""SAG and DSAG: wait for the fastest ``w`` workers, keep what the slow ones computed."""

from __future__ import annotations

from daskstraggle.balance.partition import subpartition_bounds
from daskstraggle.methods.base import RoundSummary, WorkResult, WorkUnit
from daskstraggle.methods.cache import GradientCache, Ranges
from daskstraggle.methods.sgd import SGD

__all__ = ["DSAG", "SAG", "subpartition_bounds"]  # subpartition_bounds: re-exported


class DSAG(SGD):
    """Distributed SAG: wait for ``w`` fresh results, fold in stale ones (DSAG paper §V).

    :class:`SGD`'s loop with a gradient cache (:class:`~daskstraggle.methods.cache.
    GradientCache`): every result, fresh or *stale* (computed at an older iterate; SAG
    discards those), goes into the cache keyed by its rows unless an overlapping entry is
    at least as fresh; overlapping older entries are evicted. The iterate steps along the
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
    stragglers, DSAG is GD. A round's objective is recorded only when every cache entry
    was computed at the current iterate.

    References
    ----------
    The DSAG paper, §V, as :class:`SGD`.

    Examples
    --------
    >>> DSAG(n_wait=3, subpartitions=2).get_params()
    {'n_wait': 3, 'subpartitions': 2, 'collect_window': 0.02, 'balance': None}
    """

    name = "dsag"
    description = "sag that also folds in stale results"
    use_stale = True

    def _reset(self) -> None:
        """An empty cache, every worker at its first subpartition."""
        super()._reset()
        self._cache = GradientCache(self._total_rows)
        self._n_stale = 0

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
        kept = self._cache.insert(self._ranges_of(unit), unit.version,
                                  self._plain(result), unit.worker_index)
        if fresh:
            self._fresh[unit.worker_index] = result
        elif kept:
            self._n_stale += 1
        if not kept:
            self._dropped += 1
        self._summary = None

    def _summarise(self) -> RoundSummary:
        """The cache's sum scaled by the covered fraction of rows."""
        assert self.ready()
        cache, total = self._cache, self._cache.total()
        assert total is not None
        versions = cache.versions()
        return self._summary_of(
            total, covered=cache.covered, n_rows=cache.n_rows,
            exact=cache.covered == cache.n_rows and all(v == self._version for v in versions),
            workers_used=tuple(sorted({e.worker_index for e in cache})),
            n_fresh=len(self._fresh),
            n_stale=self._n_stale,
            # iterations since the oldest cache entry's iterate: a frozen worker's rows
            # keep an old result (the runtime moves them once the worker is overdue)
            extras={"staleness": float(self._version - min(versions))},
        )

    def step(self) -> None:
        """Step along the cached estimate."""
        super().step()
        self._n_stale = 0


class SAG(DSAG):
    """Stochastic average gradient over the workers: :class:`DSAG` with stale results
    discarded (a worker always slower than the ``n_wait`` fastest keeps its last fresh
    result in the cache).

    Examples
    --------
    >>> SAG(n_wait=2).name
    'sag'
    """

    name = "sag"
    description = "sgd with a cache of every worker's last fresh result"
    use_stale = False
