"""Order statistics of per-worker latency by Monte Carlo integration (DSAG paper §IV-A).

Workers need not be identically distributed (an i.i.d. model fitted to pooled statistics
mispredicts the order statistics of heterogeneous workers).
"""

from __future__ import annotations

import contextlib
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from daskstraggle._validation import _fail, check_int, check_nonnegative
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import LatencyModel, Seed
from daskstraggle.latency.modifiers import _check_base

__all__ = ["OrderStatistics", "order_statistics"]


@dataclass(frozen=True, kw_only=True, slots=True)
class OrderStatistics:
    """Monte Carlo estimates of the latency of the ``w``-th fastest worker, w = 1..N.

    Parameters
    ----------
    mean : ndarray of shape (n_workers,)
        ``mean[w - 1]`` estimates the expected latency (compute + communication) of the
        ``w``-th fastest worker.
    std : ndarray of shape (n_workers,)
        Standard deviation of that latency (:attr:`stderr` is its mean's).
    n_samples : int
        Number of Monte Carlo draws.
    samples : ndarray of shape (n_samples, n_workers)
        The draws, each row sorted ascending: ``samples[k, w - 1]`` is the ``w``-th
        fastest latency of draw ``k``.

    See Also
    --------
    order_statistics : Build this object from a latency model.
    """

    mean: NDArray[np.float64]
    std: NDArray[np.float64]
    n_samples: int
    samples: NDArray[np.float64] = field(repr=False, compare=False)

    @property
    def n_workers(self) -> int:
        """Number of workers ``N``."""
        return int(self.mean.shape[0])

    @property
    def stderr(self) -> NDArray[np.float64]:
        """Standard error of :attr:`mean`, ndarray of shape (n_workers,)."""
        return self.std / np.sqrt(self.n_samples)

    def quantiles(self, q: ArrayLike) -> NDArray[np.float64]:
        """Return quantiles of the ``w``-th fastest latency for every ``w``.

        Parameters
        ----------
        q : float or array-like of float in [0, 1]
            Quantile levels.

        Returns
        -------
        values : ndarray of shape (n_workers,) or (len(q), n_workers)
            ``values[..., w - 1]`` is the quantile of the ``w``-th fastest latency.

        Raises
        ------
        InvalidParameterError
            If a level is outside [0, 1].
        """
        levels = np.asarray(q, dtype=float)
        if not np.all(np.isfinite(levels)) or np.any((levels < 0) | (levels > 1)):
            _fail("q", "OrderStatistics.quantiles", "a number in [0, 1] or an array of them", q)
        return np.quantile(self.samples, levels, axis=0)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready summary: mean, std and the 5/50/95 % quantiles per ``w``."""
        q05, q50, q95 = self.quantiles([0.05, 0.5, 0.95]).tolist()
        return {"n_workers": self.n_workers, "n_samples": self.n_samples,
                "mean": self.mean.tolist(), "std": self.std.tolist(),
                "q05": q05, "q50": q50, "q95": q95}


def _check_load(load: Any, n_workers: int, caller: str) -> NDArray[np.float64]:
    """Return ``load`` as an array of shape (n_workers,) of finite values > 0."""
    arr = np.empty(0)
    if isinstance(load, numbers.Real | list | tuple | np.ndarray) and not isinstance(load, bool):
        with contextlib.suppress(TypeError, ValueError):
            arr = np.asarray(load, dtype=float)
    if arr.ndim == 0:
        arr = np.full(n_workers, float(arr))
    if arr.shape != (n_workers,) or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        _fail("load", caller, f"a finite number > 0 or an array of {n_workers} of them (one per "
              "worker)", load)
    return arr


def check_model(model: Any, n_workers: int, caller: str) -> LatencyModel:
    """Return ``model`` if it is a LatencyModel with a distribution fitting ``n_workers``,
    else raise InvalidParameterError naming ``caller``."""
    _check_base(model, name="model", caller=caller, allow_none=False)
    if not model.has_distribution:
        raise InvalidParameterError(
            f"The 'model' parameter of {caller} must draw latencies itself, but the "
            f"{model.name!r} latency model only scales measured compute times. Give it a "
            "base distribution such as 'gamma(mean=0.05, var=1e-4) + ...'."
        )
    model.check_n_workers(n_workers)
    return model


def _check_finite(values: NDArray[np.float64], *, caller: str, model: LatencyModel,
                  what: str = "a latency times load",
                  remedy: str = "use smaller times in the model or a smaller load.") -> None:
    """Raise InvalidParameterError naming ``what`` if ``values`` has an inf or a NaN."""
    bad = ~np.isfinite(values)
    if bad.any():
        first = np.unravel_index(int(np.argmax(bad)), values.shape)
        raise InvalidParameterError(
            f"{caller} with the {model.name!r} latency model gives {what} that is not finite "
            f"in float64 ({float(values[first])!r}); {remedy}"
        )


def order_statistics(model: LatencyModel, n_workers: int, *, n_samples: int = 10_000,
                     load: float | ArrayLike = 1.0, time: float = 0.0, iteration: int = 0,
                     rng: Seed = None) -> OrderStatistics:
    """Estimate the latency of the ``w``-th fastest worker for every ``w`` by Monte Carlo.

    Every worker starts one task at ``time``; sorting each of the ``n_samples`` draws
    across workers gives samples of the order statistics ``X_(1:N) <= ... <= X_(N:N)``.

    Parameters
    ----------
    model : LatencyModel
        Per-worker latency of one task: with a distribution (``model.has_distribution``)
        and stateless (no Markov chains, bursts, schedules or replays).
    n_workers : int
        Number of workers ``N``.
    n_samples : int, default=10_000
        Number of Monte Carlo draws.
    load : float or array-like of shape (n_workers,), default=1.0
        Work per task relative to an equal share of the rows (one value, or per worker).
    time : float, default=0.0
        Seconds since the run started.
    iteration : int, default=0
        Iterate version.
    rng : int, SeedSequence, Generator or None, default=None
        Seed of the per-worker streams.

    Returns
    -------
    stats : OrderStatistics
        ``stats.mean[w - 1]`` is the expected latency of the ``w``-th fastest worker.

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range, ``model`` has no distribution or does not fit
        ``n_workers``, or a latency (times ``load``) or a mean or standard deviation
        overflows float64.

    See Also
    --------
    daskstraggle.latency.simulator.simulate : Iterative latency, where workers may stay
        busy over several iterations.

    Notes
    -----
    Draws come from :meth:`~daskstraggle.latency.base.LatencySampler.draw`: one stream per
    worker up to :data:`~daskstraggle.latency.base.PER_WORKER_STREAMS_MAX` workers, else
    one shared stream.

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §IV-A.

    Examples
    --------
    >>> from daskstraggle.latency import Constant
    >>> stats = order_statistics(Constant(compute=(3.0, 1.0, 2.0)), 3, n_samples=10)
    >>> stats.mean
    array([1., 2., 3.])
    """
    caller = "order_statistics"
    n_workers = check_int(n_workers, name="n_workers", caller=caller, low=1)
    n_samples = check_int(n_samples, name="n_samples", caller=caller, low=1)
    time = check_nonnegative(time, name="time", caller=caller)
    iteration = check_int(iteration, name="iteration", caller=caller, low=0)
    loads = _check_load(load, n_workers, caller)
    sampler = check_model(model, n_workers, caller).sampler(n_workers, rng=rng)
    if not sampler.stateless:
        raise InvalidParameterError(
            f"order_statistics needs a model whose draws do not depend on time or history; "
            f"{model.to_spec()!r} has state (Markov chains, bursts, schedules or replays), so "
            "one round's order statistics are not defined by it. Use simulate() for its "
            "per-iteration latency."
        )
    with np.errstate(over="ignore", invalid="ignore"):
        drawn = sampler.draw(loads, n_samples)  # (n_workers, n_samples); time is unused
        _check_finite(drawn, caller=caller, model=model)
        samples = np.ascontiguousarray(drawn.T)
        del drawn
        samples.sort(axis=1)
        mean = samples.mean(axis=0)
        std = samples.std(axis=0, ddof=1) if n_samples > 1 else np.zeros(n_workers)
    for what, values in (("a mean", mean), ("a standard deviation", std)):
        _check_finite(values, caller=caller, model=model, what=what)
    return OrderStatistics(mean=mean, std=std, n_samples=n_samples, samples=samples)
