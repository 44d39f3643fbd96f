"""Latency models with a distribution: shifted exponential, multi-message, gamma, replay.

Importing this module registers every model of the package, the modifiers of
:mod:`daskstraggle.latency.modifiers` included (they are re-exported here).
"""

from __future__ import annotations

import csv
import functools
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from daskstraggle._validation import _fail, check_int
from daskstraggle.errors import (
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
    NonFiniteDataError,
)
from daskstraggle.latency.base import (
    MAX_SECONDS,
    LatencyModel,
    LatencySampler,
    Streams,
    _GammaSampler,
    _UnitSampler,
    check_per_worker,
    check_seconds,
    register_model,
)
from daskstraggle.latency.chains import Bursts, TwoStateMarkov
from daskstraggle.latency.modifiers import Artificial, Schedule, Slowdown

__all__ = [
    "Artificial", "Bursts", "Gamma", "MultiMessage", "Replay", "Schedule", "ShiftedExponential",
    "Slowdown", "TwoStateMarkov"
]


def _per_worker(value: float | tuple[float, ...], n_workers: int) -> NDArray[np.float64]:
    return np.broadcast_to(np.asarray(value, dtype=float), (n_workers,)).copy()


_check_rate = functools.partial(check_per_worker, low=1 / MAX_SECONDS)
_check_variance = functools.partial(check_per_worker, high=MAX_SECONDS**2)


class _ShiftedExponentialSampler(_UnitSampler):
    stateless = True
    shared_draws = True

    def __init__(self, model: _ShiftRate, n_workers: int, streams: Streams) -> None:
        super().__init__(n_workers, streams)
        self.shift = _per_worker(getattr(model, model._shift), n_workers)
        self.scale = 1.0 / _per_worker(model.rate, n_workers)

    def _unit(self, worker_index: int, n: int) -> NDArray[np.float64]:
        """Return ``n`` draws of ``shift + X``, ``X ~ Exp(rate)``: seconds per unit of load."""
        draws = self.streams[worker_index].exponential(self.scale[worker_index], size=n)
        return self.shift[worker_index] + draws

    def _units(self, worker_index, n):
        return self._unit(worker_index, n), 0.0

    def _draw_shared(self, loads, size, generator):
        draws = generator.exponential(size=(self.n_workers, size))
        draws *= self.scale[:, None]
        draws += self.shift[:, None]
        draws *= loads[:, None]
        return draws, np.zeros_like(draws)


class _ShiftRate(LatencyModel):
    """Base of the shifted-exponential laws: a shift (field ``_shift``) and a ``rate``."""

    __slots__ = ()
    _shift: ClassVar[str] = "shift"
    _sampler_class = _ShiftedExponentialSampler
    _checks = (("shift", check_seconds), ("rate", _check_rate))
    rate: float | tuple[float, ...]


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class ShiftedExponential(_ShiftRate):
    """Shifted-exponential compute time that scales with the load (BCC eq. 15).

    A task of load ``r`` takes ``r * (shift + E)`` seconds with ``E ~ Exp(rate)``, i.e.

    .. math:: P(T \\le t) = 1 - e^{-(\\mu / r)(t - a r)}, \\quad t \\ge a r,

    with ``a = shift`` and ``mu = rate``. Communication takes no time.

    Parameters
    ----------
    shift : float or tuple of float, default=0.0
        Minimum seconds per unit of load, in [0, MAX_SECONDS] (one value, or per worker).
    rate : float or tuple of float, default=1.0
        Rate of the exponential part per unit of load, >= 1 / MAX_SECONDS.

    See Also
    --------
    MultiMessage : The same law seen message by message.
    fit_shifted_exponential : Fit it to recorded latencies.

    References
    ----------
    .. [1] S. Li, S. M. M. Kalan, A. S. Avestimehr and M. Soltanolkotabi, "Near-Optimal
       Straggler Mitigation for Distributed Gradient Methods", IEEE IPDPSW, 2018, eq. (15).

    Examples
    --------
    >>> s = ShiftedExponential(shift=(0.1, 0.2), rate=10.0).sampler(2, rng=0)
    >>> compute, communication = s.sample(1, load=2.0)
    >>> bool(compute >= 0.4), communication
    (True, 0.0)
    """

    name: ClassVar[str] = "shifted-exponential"
    shift: float | tuple[float, ...] = 0.0
    rate: float | tuple[float, ...] = 1.0


class _MultiMessageSampler(_ShiftedExponentialSampler):
    """The shifted exponential law (shift = alpha) seen message by message."""

    def message_times(
        self, worker_index: int, n_messages: int, *, time: float = 0.0, iteration: int = 0
    ) -> NDArray[np.float64]:
        """Return the finishing times ``[1, 2, ..., n_messages] * (alpha + X)`` (seconds after
        the task starts, one draw) of a task's ``n_messages`` computations; ``time`` and
        ``iteration`` are unused (the model is stateless)."""
        n = check_int(n_messages, name="n_messages", caller="MultiMessage.message_times", low=1)
        unit = self._unit(worker_index, 1)[0]
        return np.arange(1, n + 1) * unit


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class MultiMessage(_ShiftRate):
    """Multi-message latency: the j-th computation of a task finishes at ``j (alpha + X)``.

    For each task one ``X ~ Exp(rate)`` is drawn; a task of ``load`` computations sends
    its ``j``-th result at ``j * (alpha + X)``, so ``s`` computations are done by ``t`` with

    .. math:: P = 1 - e^{-\\mu (t / s - \\alpha)}, \\quad t \\ge s \\alpha.

    ``sample`` returns the last message's time ``load * (alpha + X)`` as compute
    (communication 0); the sampler's ``message_times(worker_index, n_messages)`` returns
    every message's time from one draw.

    Parameters
    ----------
    alpha : float or tuple of float, default=0.0
        Fixed seconds per computation, in [0, MAX_SECONDS] (one value, or per worker).
    rate : float or tuple of float, default=1.0
        Rate ``mu`` of the exponential part, >= 1 / MAX_SECONDS.

    See Also
    --------
    ShiftedExponential : The same law for the whole task.
    TwoStateMarkov : Switch between a fast and a slow rate.

    References
    ----------
    .. [1] E. Ozfatura, B. Buyukates, D. Gündüz and S. Ulukus, "Age-Based Coded Computation
       for Bias Reduction in Distributed Learning", IEEE GLOBECOM, 2020, eq. (18).

    Examples
    --------
    >>> s = MultiMessage(alpha=0.01, rate=10.0).sampler(1, rng=0)
    >>> times = s.message_times(0, 3)
    >>> times.shape, bool(np.allclose(times, times[0] * np.arange(1, 4)))
    ((3,), True)
    """

    name: ClassVar[str] = "multi-message"
    _shift: ClassVar[str] = "alpha"
    _sampler_class = _MultiMessageSampler
    _checks = (("alpha", check_seconds), ("rate", _check_rate))
    alpha: float | tuple[float, ...] = 0.0
    rate: float | tuple[float, ...] = 1.0


def _check_gamma_law(mean: float | tuple[float, ...], var: float | tuple[float, ...], *,
                     names: tuple[str, str], caller: str) -> None:
    """Raise unless every random worker's shape ``m^2/v`` and scale ``v/m`` are finite > 0."""
    means, variances = np.atleast_1d(mean), np.atleast_1d(var)
    if means.size != variances.size and min(means.size, variances.size) > 1:
        return  # check_n_workers reports the length mismatch
    means, variances = np.broadcast_arrays(means, variances)
    mean_name, var_name = names
    bad = (variances > 0) & (means == 0)
    if bad.any():
        raise InvalidParameterError(
            f"The {var_name!r} parameter of {caller} must be 0 where {mean_name!r} is "
            f"0 (a gamma law needs a positive mean). Got {mean_name}={mean!r}, "
            f"{var_name}={var!r} instead."
        )
    random = variances > 0
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        shape = np.where(random, means**2 / np.where(random, variances, 1.0), 1.0)
        scale = np.where(random, variances / np.where(random, means, 1.0), 1.0)
    for what, values in (("shape m^2/v", shape), ("scale v/m", scale)):
        wrong = ~np.isfinite(values) | (values <= 0)
        if wrong.any():
            k = int(np.argmax(wrong))
            m, v = float(means[k]), float(variances[k])
            raise InvalidParameterError(
                f"The {mean_name!r} and {var_name!r} parameters of {caller} give a gamma law "
                f"whose {what} is {float(values[k])!r} ({mean_name}={m!r}, {var_name}={v!r}"
                f"{'' if means.size == 1 else f' for worker {k}'}), not a finite number > 0 "
                "in float64, so it cannot be drawn; give a mean and a variance of ordinary "
                f"sizes relative to each other, e.g. {mean_name}=0.05, {var_name}=1e-4."
            )


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class Gamma(LatencyModel):
    """Independent gamma compute and communication times per worker (DSAG §III).

    Worker ``i``'s compute time at load 1 is gamma distributed with mean ``mean[i]`` and
    variance ``var[i]`` (shape ``m^2/v``, scale ``v/m``) and scales linearly with the
    load; its communication time is an independent gamma with ``communication_mean`` and
    ``communication_var`` and does not depend on the load. A variance of 0 means a
    deterministic time. With scalar parameters every worker has the same law: that is
    the i.i.d. baseline the paper compares against.

    Parameters
    ----------
    mean : float or tuple of float
        Mean compute seconds at load 1, in [0, MAX_SECONDS] (one value, or per worker).
    var : float or tuple of float
        Its variance, in [0, MAX_SECONDS**2]; > 0 needs ``mean > 0``.
    communication_mean, communication_var : float or tuple of float, default=0.0
        The same for the communication time.

    Raises
    ------
    InvalidParameterError
        If a value is out of its range, or a worker's shape ``m^2/v`` or scale ``v/m``
        is not a finite number > 0 in float64 (e.g. ``mean=1e-200, var=1``, whose shape
        underflows to 0).

    See Also
    --------
    fit_gamma : Fit per-worker parameters to recorded latencies.
    fit_trace : Fit them to the trace of a run.

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §III (latency model).

    Examples
    --------
    >>> m = Gamma(mean=(0.02, 0.04), var=1e-5, communication_mean=0.01)
    >>> compute, communication = m.sampler(2, rng=0).sample(1, size=1000)
    >>> bool(abs(compute.mean() - 0.04) < 0.002), float(communication[0])
    (True, 0.01)
    """

    name: ClassVar[str] = "gamma"
    _checks = (("mean", check_seconds), ("var", _check_variance),
               ("communication_mean", check_seconds), ("communication_var", _check_variance))
    mean: float | tuple[float, ...]
    var: float | tuple[float, ...]
    communication_mean: float | tuple[float, ...] = 0.0
    communication_var: float | tuple[float, ...] = 0.0

    def __post_init__(self) -> None:
        LatencyModel.__post_init__(self)
        for names in (("mean", "var"), ("communication_mean", "communication_var")):
            _check_gamma_law(getattr(self, names[0]), getattr(self, names[1]), names=names,
                             caller="Gamma")

    def _make_sampler(self, n_workers: int, streams: Streams) -> LatencySampler:
        return _GammaSampler(n_workers, streams, (self.mean, self.var),
                             (self.communication_mean, self.communication_var))


def _check_table(data: NDArray[np.float64], *, what: str, names: list[str] | None = None,
                 row_labels: list[str] | None = None,
                 error: type[Exception] = InvalidParameterError) -> None:
    """Raise if a cell is non-finite or negative, naming its row and column."""
    bad = ~np.isfinite(data) | (data < 0)
    if not bad.any():
        return
    row, col = (int(k) for k in np.argwhere(bad)[0])
    value = float(data[row, col])
    kind = "negative" if np.isfinite(value) else "non-finite"
    if error is InvalidDataError and kind == "non-finite":
        error = NonFiniteDataError
    where = row_labels[row] if row_labels else f"row {row}"
    column = f"column {col}" + (f" ({names[col]!r})" if names else "")
    raise error(
        f"{what} has a {kind} latency {value!r} at {where}, {column}; every cell must be a "
        "finite number of seconds >= 0."
    )


def _read_csv(path: str) -> NDArray[np.float64]:
    """Read a replay CSV: one column per worker, optional header, '#' comment lines."""
    try:
        with open(path, newline="") as fh:
            lines = [(number, line) for number, line in enumerate(fh, start=1)
                     if line.strip() and not line.lstrip().startswith("#")]
    except OSError as err:
        raise DataNotFoundError(f"Could not read the replay file {path!r}: {err}.") from err
    rows = list(zip((n for n, _ in lines), csv.reader(line for _, line in lines), strict=True))
    names = None
    if rows and _floats(rows[0][1]) is None:
        names = [cell.strip() for cell in rows.pop(0)[1]]
    if not rows:
        raise InvalidDataError(
            f"The replay file {path!r} has no rows of latencies; write one row per task and "
            "one column per worker."
        )
    width = len(names) if names is not None else len(rows[0][1])
    data = np.array([_csv_row(row, number, width, path) for number, row in rows])
    _check_table(
        data, what=f"The replay file {path!r}", names=names,
        row_labels=[f"row {k} (line {n})" for k, (n, _) in enumerate(rows)], error=InvalidDataError,
    )
    return data


def _floats(row: list[str]) -> list[float] | None:
    """The cells of a CSV row as floats, or None if one is not a number (a header)."""
    try:
        return [float(cell) for cell in row]
    except ValueError:
        return None


def _csv_row(row: list[str], number: int, width: int, path: str) -> list[float]:
    """Return the cells of line ``number`` of the replay file as floats, checked."""
    values = _floats(row)
    if len(row) != width:
        raise InvalidDataError(
            f"Line {number} of the replay file {path!r} has {len(row)} cells but the "
            f"file has {width} columns (one per worker); make every row the same length."
        )
    if values is None:
        raise InvalidDataError(
            f"Line {number} of the replay file {path!r} has a cell that is not a number: "
            f"{row!r}."
        )
    return values


class _ReplaySampler(_UnitSampler):
    stateless = False

    def __init__(self, model: Replay, n_workers: int, streams: Streams) -> None:
        super().__init__(n_workers, streams)
        self.data = model._data()
        self.count = [0] * n_workers

    def _units(self, worker_index, n):
        start = self.count[worker_index]
        rows = np.arange(start, start + n) % self.data.shape[0]
        self.count[worker_index] = start + n
        return self.data[rows, worker_index], 0.0


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class Replay(LatencyModel):
    """Replay recorded latencies: worker ``i``'s ``k``-th task takes row ``k`` of column ``i``.

    Each worker keeps its own counter and wraps around cyclically at the end of the
    recording. The recorded (total) latency times ``load`` is returned as compute time;
    communication is 0.

    Parameters
    ----------
    path : str or None, default=None
        CSV file with one column per worker and one row per task (seconds). An optional
        first row holds column names; lines starting with ``#`` are comments. The file is
        read when a sampler is built.
    table : tuple of tuple of float or None, default=None
        The same in memory, rows of a table (see :meth:`from_array`).

    Raises
    ------
    InvalidParameterError
        If not exactly one of ``path`` and ``table`` is given, or a cell of ``table`` is
        not a finite number >= 0.
    DataNotFoundError
        If ``path`` does not exist.

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §III (latency traces recorded on
       AWS and Azure).

    Examples
    --------
    >>> s = Replay.from_array([[1.0, 2.0], [3.0, 4.0]]).sampler(2)
    >>> [s.sample(1)[0] for _ in range(3)]
    [2.0, 4.0, 2.0]
    """

    name: ClassVar[str] = "replay"
    _sampler_class = _ReplaySampler
    path: str | None = None
    table: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:
        caller = "Replay"
        if (self.path is None) == (self.table is None):
            raise InvalidParameterError(
                f"The 'path' and 'table' parameters of {caller}: give exactly one of them (a "
                f"CSV file or rows of latencies). Got path={self.path!r} and "
                f"{'a table' if self.table is not None else 'table=None'} instead."
            )
        if self.path is not None:
            if not isinstance(self.path, str | os.PathLike):
                raise InvalidParameterError(
                    f"The 'path' parameter of {caller} must be a path to a CSV file. "
                    f"Got {type(self.path).__name__} instead."
                )
            path = os.fspath(self.path)
            if not os.path.isfile(path):
                raise DataNotFoundError(
                    f"The replay file {path!r} does not exist; give the path of a CSV file "
                    "with one column of latencies per worker."
                )
            self._set(path=path)
            return
        try:
            data = np.array(self.table, dtype=float)
        except (TypeError, ValueError):
            data = np.empty(0)
        if data.ndim != 2 or data.size == 0:
            _fail("table", caller, "a non-empty list of equally long rows of numbers (one column "
                  "per worker)", self.table)
        _check_table(data, what=f"The 'table' parameter of {caller}")
        self._set(table=tuple(tuple(float(x) for x in row) for row in data))

    @classmethod
    def from_array(cls, array: ArrayLike) -> Replay:
        """Return a Replay of an in-memory table.

        Parameters
        ----------
        array : array-like of shape (n_tasks, n_workers)
            Recorded latencies in seconds, one column per worker.

        Returns
        -------
        model : Replay
        """
        data = np.asarray(array, dtype=float)
        if data.ndim != 2:
            raise InvalidParameterError(
                f"The 'array' parameter of Replay.from_array must be 2-D (n_tasks, n_workers). "
                f"Got an array of shape {data.shape} instead."
            )
        return cls(table=tuple(map(tuple, data.tolist())))

    def _data(self) -> NDArray[np.float64]:
        if self.path is not None:
            return _read_csv(self.path)
        return np.array(self.table, dtype=float)

    def check_n_workers(self, n_workers: int) -> None:
        """Raise InvalidParameterError unless there is one column per worker."""
        n_columns = self._data().shape[1]
        if n_columns != n_workers:
            source = f"the replay file {self.path!r}" if self.path is not None \
                else "the 'table' parameter"
            raise InvalidParameterError(
                f"The 'replay' latency model has {n_columns} columns in {source} but there "
                f"are {n_workers} workers; record one column per worker or use {n_columns} "
                "workers."
            )

