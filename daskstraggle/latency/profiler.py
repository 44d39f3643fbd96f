"""Moving-window latency statistics per worker, the input of the load balancer (DSAG §VI-A)."""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from daskstraggle._validation import (
    _fail,
    _real,
    check_bool,
    check_int,
    check_nonnegative,
    check_positive,
)

__all__ = ["LatencyProfiler", "ProfileStatistics"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileStatistics:
    """Per-worker latency statistics over each worker's recent window.

    Parameters
    ----------
    compute_mean, compute_var : ndarray of shape (n_workers,)
        Mean and variance of the compute time *per unit load* (seconds a task of load
        1.0 takes) over the trimmed window; NaN for a worker with too few samples.
    communication_mean, communication_var : ndarray of shape (n_workers,)
        The same for the communication time.
    n_samples : ndarray of int of shape (n_workers,)
        Compute samples in each worker's window (before trimming).

    See Also
    --------
    LatencyProfiler.statistics : Build this object.
    """

    compute_mean: NDArray[np.float64]
    compute_var: NDArray[np.float64]
    communication_mean: NDArray[np.float64]
    communication_var: NDArray[np.float64]
    n_samples: NDArray[np.int64]

    @property
    def ready(self) -> NDArray[np.bool_]:
        """Which workers have statistics (no NaN), ndarray of bool of shape (n_workers,)."""
        stats = np.array([getattr(self, name) for name in _STATISTICS])
        return ~np.isnan(stats).any(axis=0)

    def to_dict(self) -> dict[str, Any]:
        """Return the statistics as lists (NaN becomes None, so the dict is JSON-ready)."""

        def clean(a: NDArray[Any]) -> list[Any]:
            return [None if isinstance(v, float) and math.isnan(v) else v for v in a.tolist()]

        return {**{name: clean(getattr(self, name)) for name in _STATISTICS},
                "n_samples": self.n_samples.tolist()}


_STATISTICS = ("compute_mean", "compute_var", "communication_mean", "communication_var")


def _trimmed_stats(values: NDArray[np.float64], q_lo: float, q_hi: float) -> tuple[float, float]:
    """Return mean and variance (ddof=1; 0 for one value) of the values in [q_lo, q_hi]."""
    lo, hi = np.quantile(values, [q_lo, q_hi])
    kept = values[(values >= lo) & (values <= hi)]
    if kept.size == 0:  # e.g. two values: both outside the interpolated quantiles
        kept = values
    var = float(kept.var(ddof=1)) if kept.size > 1 else 0.0
    return float(kept.mean()), var


class LatencyProfiler:
    """Keep each worker's recent latency samples and summarise them.

    Parameters
    ----------
    n_workers : int
        Number of workers (indices ``0 .. n_workers - 1``).
    window : float, default=10.0
        Seconds of samples kept per worker, counted back from its newest sample.
    quantiles : tuple of (float, float), default=(0.1, 0.9)
        Statistics use only the samples between these quantiles of the window (compute
        and communication trimmed separately).
    min_samples : int, default=10
        Workers with fewer samples in their window get NaN statistics.
    max_samples : int, default=1000
        At most this many samples are kept per worker (the oldest go first).

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §VI-A.

    Notes
    -----
    Differences from the paper (plain means and variances): the window is trimmed, as in
    the authors' code; compute times are divided by the task's load, so windows mixing
    loads stay comparable; a stale result's communication sample (its round trip includes
    waiting) is replaced by the worker's recent average.

    Examples
    --------
    >>> prof = LatencyProfiler(2, min_samples=3)
    >>> for k in range(5):
    ...     prof.record(0, time=float(k), compute=0.2 * (1 + k % 2), communication=0.01,
    ...                 load=float(1 + k % 2))
    >>> stats = prof.statistics()
    >>> stats.compute_mean
    array([0.2, nan])
    >>> stats.n_samples
    array([5, 0])
    """

    def __init__(self, n_workers: int, *, window: float = 10.0,
                 quantiles: tuple[float, float] = (0.1, 0.9), min_samples: int = 10,
                 max_samples: int = 1000) -> None:
        caller = "LatencyProfiler"
        self.n_workers = check_int(n_workers, name="n_workers", caller=caller, low=1)
        self.window = check_positive(window, name="window", caller=caller)
        self.quantiles = _check_quantiles(quantiles, caller)
        self.min_samples = check_int(min_samples, name="min_samples", caller=caller, low=1)
        self.max_samples = check_int(
            max_samples, name="max_samples", caller=caller, low=self.min_samples,
            remedy="It must be at least min_samples.",
        )
        # per worker: (time, compute per unit load, communication or NaN)
        self._samples: list[deque[tuple[float, float, float]]] = [
            deque(maxlen=self.max_samples) for _ in range(self.n_workers)
        ]
        self._newest = [-math.inf] * self.n_workers

    def __repr__(self) -> str:
        return (f"LatencyProfiler(n_workers={self.n_workers}, window={self.window}, "
                f"quantiles={self.quantiles}, min_samples={self.min_samples}, "
                f"samples={sum(len(s) for s in self._samples)})")

    def record(self, worker_index: int, *, time: float, compute: float, communication: float,
               load: float = 1.0, stale: bool = False) -> None:
        """Add one task's latency sample for a worker.

        Parameters
        ----------
        worker_index : int
            Which worker.
        time : float
            When the result arrived (seconds, any fixed origin); a sample older than the
            worker's window is ignored.
        compute : float
            Compute seconds the worker measured (>= 0).
        communication : float
            Round trip minus compute, in seconds (>= 0).
        load : float, default=1.0
            Work the task carried relative to an equal share of the rows; the compute
            sample is stored as ``compute / load``.
        stale : bool, default=False
            Whether the result was stale: its communication sample is then the mean of
            the worker's in the window, or dropped if there is none yet.

        Raises
        ------
        InvalidParameterError
            If an argument is out of range.
        """
        caller = "LatencyProfiler.record"
        i = self._index(worker_index, caller)
        time = _real(time, math.isfinite, "time", caller, "a finite number")
        compute = check_nonnegative(compute, name="compute", caller=caller)
        communication = check_nonnegative(communication, name="communication", caller=caller)
        load = check_positive(load, name="load", caller=caller)
        stale = check_bool(stale, name="stale", caller=caller)

        newest = max(self._newest[i], time)
        cutoff = newest - self.window
        if time < cutoff:
            return
        self._newest[i] = newest
        samples = self._samples[i]
        while samples and samples[0][0] < cutoff:
            samples.popleft()
        if stale:
            known = [c for _, _, c in samples if not math.isnan(c)]
            communication = sum(known) / len(known) if known else math.nan
        samples.append((time, compute / load, communication))  # the oldest goes at max_samples

    def reset(self, worker_index: int | None = None) -> None:
        """Forget the samples of one worker (or of all workers with None).

        Parameters
        ----------
        worker_index : int or None, default=None
            Which worker (e.g. after it was restarted or repartitioned).

        Raises
        ------
        InvalidParameterError
            If ``worker_index`` is out of range.
        """
        indices: Sequence[int] = range(self.n_workers) if worker_index is None \
            else [self._index(worker_index, "LatencyProfiler.reset")]
        for i in indices:
            self._samples[i].clear()
            self._newest[i] = -math.inf

    def n_samples(self, worker_index: int) -> int:
        """Return the number of samples held for ``worker_index``."""
        return len(self._samples[self._index(worker_index, "LatencyProfiler.n_samples")])

    def _index(self, worker_index: int, caller: str) -> int:
        return check_int(worker_index, name="worker_index", caller=caller, low=0,
                         high=self.n_workers - 1)

    def statistics(self) -> ProfileStatistics:
        """Return each worker's trimmed mean and variance of compute and communication.

        Returns
        -------
        stats : ProfileStatistics
            Arrays of shape (n_workers,); NaN where a worker has fewer than
            ``min_samples`` samples (compute and communication counted separately).
        """
        n = self.n_workers
        out = np.full((4, n), np.nan)
        counts = np.zeros(n, dtype=np.int64)
        q_lo, q_hi = self.quantiles
        for i, samples in enumerate(self._samples):
            if not samples:
                continue
            data = np.array(samples)
            data = data[data[:, 0] >= self._newest[i] - self.window]
            counts[i] = data.shape[0]
            if data.shape[0] >= self.min_samples:
                out[0, i], out[1, i] = _trimmed_stats(data[:, 1], q_lo, q_hi)
            comm = data[:, 2]
            comm = comm[~np.isnan(comm)]
            if comm.size >= self.min_samples:
                out[2, i], out[3, i] = _trimmed_stats(comm, q_lo, q_hi)
        return ProfileStatistics(**dict(zip(_STATISTICS, out, strict=True)), n_samples=counts)


def _check_quantiles(value: Any, caller: str) -> tuple[float, float]:
    """Return ``value`` as ``(lo, hi)`` with ``0 <= lo < hi <= 1``."""
    pair = isinstance(value, Sequence | np.ndarray) and not isinstance(value, str) \
        and len(value) == 2 and all(isinstance(v, numbers.Real) and not isinstance(v, bool)
                                    for v in value)
    if not (pair and 0.0 <= value[0] < value[1] <= 1.0):
        _fail("quantiles", caller, "a pair (lo, hi) with 0 <= lo < hi <= 1", value)
    return float(value[0]), float(value[1])
