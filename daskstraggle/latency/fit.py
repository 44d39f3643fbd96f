"""Fit latency models to recorded latencies (moment and maximum-likelihood fits)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from daskstraggle._validation import check_bool, check_choice, check_int
from daskstraggle.errors import InvalidDataError, InvalidParameterError
from daskstraggle.latency.models import Gamma, ShiftedExponential
from daskstraggle.latency.modifiers import Link

__all__ = ["Links", "fit_gamma", "fit_link", "fit_peers", "fit_shifted_exponential",
           "fit_trace"]

#: The bandwidth (bytes/s) a fitted link gets where the measurements leave no time to its
#: bytes: the coordinator's link carried them as fast as they were sent.
UNLIMITED = 1e15
#: How much later than alone a message sent with the others must arrive to count as held
#: by the coordinator's link (:func:`fit_link`); also the slack within which a worker's
#: link counts as no slower than the coordinator's.
HELD = 0.05


def _as_samples(values: ArrayLike, *, name: str, caller: str) -> NDArray[np.float64]:
    """Return ``values`` as a float array of shape (n_samples, n_workers)."""
    try:
        data = np.array(values, dtype=float)
    except (TypeError, ValueError) as err:
        raise InvalidDataError(
            f"The {name!r} parameter of {caller} must be an array of seconds of shape "
            f"(n_samples, n_workers) with NaN for missing samples. Got {values!r} instead."
        ) from err
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2 or data.shape[1] == 0:
        raise InvalidDataError(
            f"The {name!r} parameter of {caller} must be an array of shape "
            f"(n_samples, n_workers) with NaN for missing samples. Got shape {data.shape} "
            "instead."
        )
    if np.isinf(data).any() or (data < 0).any():
        raise InvalidDataError(
            f"The {name!r} parameter of {caller} has infinite or negative latencies; "
            "durations must be finite seconds >= 0 (NaN marks a missing sample)."
        )
    return data


def _columns(
    data: NDArray[np.float64], *, iid: bool, min_samples: int, name: str, caller: str
) -> list[NDArray[np.float64]]:
    """Return the finite samples of each worker (or one pooled column when ``iid``)."""
    columns = [data[np.isfinite(data)]] if iid else [c[np.isfinite(c)] for c in data.T]
    for i, column in enumerate(columns):
        if column.size < min_samples:
            where, extra = ("in all", "") if iid else (
                f"for worker {i}", ", drop that worker's column, or pool the workers with iid=True")
            raise InvalidParameterError(
                f"The {name!r} parameter of {caller} has {column.size} finite samples {where}; "
                f"at least {min_samples} are needed (min_samples). Record more iterations{extra}."
            )
    return columns


def _pack(values: list[float], iid: bool) -> float | tuple[float, ...]:
    return float(values[0]) if iid else tuple(float(v) for v in values)


def fit_gamma(compute: ArrayLike, communication: ArrayLike | None = None, *, iid: bool = False,
              min_samples: int = 2) -> Gamma:
    """Fit the per-worker gamma latency model by moments.

    Parameters
    ----------
    compute : array-like of shape (n_samples, n_workers)
        Compute seconds at load 1, NaN where a worker has no sample. A 1-D array is one
        worker.
    communication : array-like of shape (n_samples, n_workers) or None, default=None
        Communication seconds, NaN where missing (None: communication takes no time).
    iid : bool, default=False
        Pool every worker's samples into one law (scalar parameters): the i.i.d.
        baseline.
    min_samples : int, default=2
        Fewest finite samples a worker (or the pool) needs.

    Returns
    -------
    model : Gamma
        Mean and sample variance (``ddof=1``) per worker, tuples with one value per
        worker (floats when ``iid``).

    Raises
    ------
    InvalidParameterError
        If a worker has fewer than ``min_samples`` finite samples, or an option is invalid.
    InvalidDataError
        If the data is not 2-D or holds negative or infinite durations.

    See Also
    --------
    fit_trace : The same from the trace of a run.

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §III.

    Examples
    --------
    >>> fit_gamma([[1.0, 2.0], [3.0, np.nan], [2.0, 4.0]])
    Gamma(mean=(2.0, 3.0), var=(1.0, 2.0), communication_mean=0.0, communication_var=0.0)
    >>> fit_gamma([[1.0, 2.0], [3.0, 4.0]], iid=True).mean
    2.5
    """
    caller = "fit_gamma"
    iid = check_bool(iid, name="iid", caller=caller)
    min_samples = check_int(min_samples, name="min_samples", caller=caller, low=2)
    params: dict[str, Any] = {}
    sources = (("compute", compute, "mean", "var"),
               ("communication", communication, "communication_mean", "communication_var"))
    for name, values, mean_name, var_name in sources:
        if values is None:
            continue
        data = _as_samples(values, name=name, caller=caller)
        columns = _columns(data, iid=iid, min_samples=min_samples, name=name, caller=caller)
        params[mean_name] = _pack([c.mean() for c in columns], iid)
        params[var_name] = _pack([c.var(ddof=1) for c in columns], iid)
    return Gamma(**params)


def fit_shifted_exponential(
    samples: ArrayLike, *, method: str = "moments", min_samples: int = 2
) -> ShiftedExponential:
    """Fit a shifted-exponential law per worker.

    Parameters
    ----------
    samples : array-like of shape (n_samples, n_workers)
        Latencies at load 1 in seconds, NaN where missing. A 1-D array is one worker.
    method : {"moments", "mle"}, default="moments"
        ``"moments"``: ``rate = 1 / std``, ``shift = max(mean - std, 0)``; ``"mle"``:
        ``shift = min``, ``rate = 1 / (mean - min)``.
    min_samples : int, default=2
        Fewest finite samples a worker needs.

    Returns
    -------
    model : ShiftedExponential
        Tuples with one value per worker.

    Raises
    ------
    InvalidParameterError
        If a worker has fewer than ``min_samples`` finite samples, or an option is invalid.
    InvalidDataError
        If a worker's samples are all equal (no spread to fit a rate to), or the data is
        not 2-D or holds negative or infinite durations.

    See Also
    --------
    ShiftedExponential : The law fitted (Li et al., IPDPSW 2018, eq. (15)).

    Examples
    --------
    >>> fit_shifted_exponential([[1.0], [2.0], [3.0]], method="mle")
    ShiftedExponential(shift=(1.0,), rate=(1.0,))
    """
    caller = "fit_shifted_exponential"
    method = check_choice(method, name="method", caller=caller, choices=["moments", "mle"])
    min_samples = check_int(min_samples, name="min_samples", caller=caller, low=2)
    data = _as_samples(samples, name="samples", caller=caller)
    columns = _columns(data, iid=False, min_samples=min_samples, name="samples", caller=caller)
    shifts, rates = [], []
    for i, column in enumerate(columns):
        mean = column.mean()
        if method == "moments":
            spread = column.std(ddof=1)
            shift = max(mean - spread, 0.0)
        else:
            shift = column.min()
            spread = mean - shift
        if not spread > 0:
            raise InvalidDataError(
                f"The samples of worker {i} passed to {caller} are all equal ({column[0]!r}); "
                "a shifted exponential needs some spread. Use Constant for a fixed latency."
            )
        shifts.append(float(shift))
        rates.append(float(1.0 / spread))
    return ShiftedExponential(shift=tuple(shifts), rate=tuple(rates))


def fit_link(nbytes: float, alone: ArrayLike, arrivals: ArrayLike, *,
             latency: ArrayLike | None = None) -> Link:
    """Fit the network links (:class:`~daskstraggle.latency.modifiers.Link`) to the times
    messages of ``nbytes`` bytes took from each worker to the coordinator.

    In the link model (:class:`~daskstraggle.latency.modifiers.Link`) a message streams
    through its worker's link and the coordinator's: alone it takes ``alone_i = latency_i
    + max(nbytes / bandwidth_i, nbytes / coordinator)``; messages sent at once share the
    coordinator's link (:class:`~daskstraggle.latency.modifiers.SharedLink`). The
    messages that arrived later at once than alone (by over :data:`HELD`) were held by
    the coordinator's link; when the last of them arrived, their bytes had crossed it,
    and those of the others as far as their own links carried them by then: the
    coordinator's rate is those bytes over that time (:data:`UNLIMITED` when no message
    was held: its rate is not in the times). Each worker's link is ``nbytes`` over its
    time alone, where that is longer than the coordinator's time, else :data:`UNLIMITED`
    (the coordinator's link was the slower: the worker's is not in the times). A link
    measured this way gives the same times.

    Parameters
    ----------
    nbytes : float
        The messages' size in bytes (> 0).
    alone : array-like of shape (n_workers,)
        Seconds each worker's message took when it was the only one in flight.
    arrivals : array-like of shape (n_workers,)
        Seconds after they were all asked for at once when each worker's message arrived
        (by worker, as ``alone``).
    latency : array-like of shape (n_workers,) or None, default=None
        Seconds a message of a few bytes took from each worker: the fixed part of every
        message (None: none).

    Returns
    -------
    link : Link
        ``bandwidth`` one per worker, ``coordinator``, ``latency`` per worker.

    Raises
    ------
    InvalidDataError
        If the times are not finite seconds >= 0, one per worker.
    InvalidParameterError
        If ``nbytes`` is not a positive number.

    Examples
    --------
    Three workers send 1 MB each: alone in 0.1 s, the third in 1 s; sent at once the
    first two arrive after 2/9 s, when 2 + 2/9 MB had crossed: the coordinator takes
    10 MB/s, the first two workers' links are at least as fast, the third's 1 MB/s.

    >>> link = fit_link(1e6, [0.1, 0.1, 1.0], [2 / 9, 2 / 9, 1.0])
    >>> round(link.coordinator), [round(b) for b in link.bandwidth]
    (10000000, [1000000000000000, 1000000000000000, 1000000])
    """
    from daskstraggle._validation import check_positive

    caller = "fit_link"
    nbytes = check_positive(nbytes, name="nbytes", caller=caller)
    alone_s = _as_samples(alone, name="alone", caller=caller).ravel()
    arrival_s = _as_samples(arrivals, name="arrivals", caller=caller).ravel()
    fixed = (np.zeros_like(alone_s) if latency is None
             else _as_samples(latency, name="latency", caller=caller).ravel())
    if not alone_s.size == arrival_s.size == fixed.size or np.isnan(
            np.concatenate([alone_s, arrival_s, fixed])).any():
        raise InvalidDataError(
            f"The 'alone', 'arrivals' and 'latency' parameters of {caller} must hold one "
            f"finite time per worker each. Got {alone_s.size}, {arrival_s.size} and "
            f"{fixed.size} values instead."
        )
    fixed = np.minimum(fixed, alone_s)
    own = alone_s - fixed
    held = arrival_s > alone_s * (1 + HELD)
    coordinator = UNLIMITED
    if held.any():
        until = float(arrival_s[held].max())
        carried = np.where(held, 1.0, np.minimum(1.0, np.maximum(until - fixed, 0.0)
                                                  / np.maximum(own, 1e-300)))
        coordinator = min(UNLIMITED, nbytes * float(carried.sum())
                          / max(until - float(fixed.min()), 1e-300))
    bandwidth = [UNLIMITED if t * coordinator <= nbytes * (1 + HELD) or t * UNLIMITED <= nbytes
                 else nbytes / t for t in own]
    return Link(bandwidth=tuple(bandwidth), coordinator=coordinator,
                latency=tuple(float(v) for v in fixed))


class Links(NamedTuple):
    """A cluster's links as measured: ``to_coordinator``, the path of every reply (each
    worker's link and the coordinator's, :func:`fit_link`), and ``between_workers``,
    the same with each worker's bandwidth as its messages to other workers found it
    (:func:`fit_peers`: the path of tree aggregation's sums)."""

    to_coordinator: Link
    between_workers: Link


def fit_peers(nbytes: float, edges: Sequence[tuple[int, int, float]],
              fallback: Sequence[float]) -> tuple[float, ...]:
    """Fit each worker's bandwidth to the seconds messages of ``nbytes`` bytes took from
    one worker to another.

    In the link model such a message streams through the sender's link and the
    receiver's: ``seconds = nbytes / min(bandwidth_i, bandwidth_j)``. Each worker in
    ``edges`` is given its fastest message's rate (its link is at least that fast, and
    the slower of the two links of each message gives that message's time when the
    edges are so measured: a ring with one slow link gives the slow worker both of its
    messages' rate, its neighbours their other message's); a worker in no edge keeps its
    ``fallback`` bandwidth.

    Parameters
    ----------
    nbytes : float
        The messages' size in bytes (> 0).
    edges : sequence of (int, int, float)
        ``(sender, receiver, seconds)`` of each message (its fixed cost taken out).
    fallback : sequence of float
        Each worker's bandwidth where no edge says (bytes/s); its length is the number
        of workers.

    Returns
    -------
    bandwidth : tuple of float
        Bytes per second per worker (:data:`UNLIMITED` where the times leave none).

    Examples
    --------
    A ring of three: 1 MB took 0.1 s from worker 0 to 1, 1 s from 1 to 2 and from 2 to
    0: worker 2's link is the slow one (1 MB/s), the others 10 MB/s.

    >>> [round(b) for b in fit_peers(1e6, [(0, 1, 0.1), (1, 2, 1.0), (2, 0, 1.0)],
    ...                              [1e9] * 3)]
    [10000000, 10000000, 1000000]
    """
    out = np.asarray(fallback, dtype=float).copy()
    fastest: dict[int, float] = {}
    for i, j, seconds in edges:
        for w in (i, j):
            fastest[w] = min(fastest.get(w, math.inf), max(float(seconds), 0.0))
    for w, seconds in fastest.items():
        out[w] = UNLIMITED if seconds * UNLIMITED <= nbytes else nbytes / seconds
    return tuple(float(b) for b in out)


def fit_trace(trace: Mapping[Any, Any], *, iid: bool = False, split: bool = True,
              n_workers: int | None = None) -> Gamma:
    """Fit the gamma latency model to the trace of a run (``Result.trace``, or any mapping
    with the same arrays), to simulate or inject it.

    Parameters
    ----------
    trace : mapping
        Holds ``"compute_duration"`` and optionally ``"communication_duration"``, each of
        shape (n_iterations, n_workers) with NaN where a worker delivered nothing.
    iid : bool, default=False
        Pool the workers into one law (the i.i.d. baseline).
    split : bool, default=True
        Fit compute and communication as independent gammas (the DSAG model). False fits
        one gamma per worker to their sum (the ``"latency"`` array when present), the
        better predictor when the two are correlated (coordinator and workers sharing
        cores).
    n_workers : int or None, default=None
        Plan for this many workers sharing the same rows: worker ``j`` follows the law
        fitted to worker ``j mod N`` of the trace (``N`` its workers; the pooled law when
        ``iid``), compute scaled by ``N / n_workers`` (mean) and ``(N / n_workers)²``
        (variance), communication kept (with ``split=False`` the whole latency is
        scaled). The trace must come from tasks carrying equal shares (e.g. gd, sgd,
        dsag; not coded). None: the trace's ``N`` workers.

    Returns
    -------
    model : Gamma
        Per-worker tuples of ``N`` values (``n_workers`` values when given), or floats
        when ``iid``.

    Raises
    ------
    InvalidParameterError
        If ``"compute_duration"`` is missing or a worker has fewer than 2 samples.
    InvalidDataError
        If the arrays are not 2-D or hold negative or infinite durations.

    See Also
    --------
    fit_gamma : The moment fit used here.

    Examples
    --------
    >>> trace = {"compute_duration": [[0.1, 0.2], [0.3, 0.2], [0.2, np.nan]]}
    >>> fit_trace(trace, iid=True).mean
    0.2

    Two calibrated workers, planned as a cluster of four sharing the same rows: each task
    carries half the rows, so half the compute time; communication is kept.

    >>> calibration = {"compute_duration": [[0.25, 1.0], [0.75, 1.0]],
    ...                "communication_duration": [[0.125, 0.25], [0.125, 0.25]]}
    >>> model = fit_trace(calibration, n_workers=4)
    >>> model.mean, model.communication_mean
    ((0.25, 0.5, 0.25, 0.5), (0.125, 0.25, 0.125, 0.25))
    """
    if "compute_duration" not in trace:
        raise InvalidParameterError(
            "The 'trace' parameter of fit_trace must hold a 'compute_duration' array "
            f"(iteration x worker). Got the keys {sorted(map(str, trace))} instead."
        )
    if n_workers is not None:
        n_workers = check_int(n_workers, name="n_workers", caller="fit_trace", low=1)
    compute = np.asarray(trace["compute_duration"], dtype=float)
    communication = np.asarray(trace["communication_duration"], dtype=float) \
        if "communication_duration" in trace else None
    if split:
        model = fit_gamma(compute, communication, iid=iid)
    elif "latency" in trace:
        model = fit_gamma(np.asarray(trace["latency"], dtype=float), None, iid=iid)
    else:
        model = fit_gamma(compute if communication is None else compute + communication, None,
                          iid=iid)
    if n_workers is None:
        return model
    return _resized(model, n_traced=compute.shape[1] if compute.ndim == 2 else 1,
                    n_workers=n_workers)


def _resized(model: Gamma, *, n_traced: int, n_workers: int) -> Gamma:
    """``model`` fitted to ``n_traced`` workers, for ``n_workers`` sharing the same rows."""
    share = n_traced / n_workers
    index = np.arange(n_workers) % n_traced

    def spread(value: float | tuple[float, ...], scale: float) -> float | tuple[float, ...]:
        if isinstance(value, tuple):
            return tuple(float(value[i]) * scale for i in index)
        return float(value) * scale

    return Gamma(mean=spread(model.mean, share), var=spread(model.var, share**2),
                 communication_mean=spread(model.communication_mean, 1.0),
                 communication_var=spread(model.communication_var, 1.0))
