"""Straggler modifiers: slow-downs, artificial ramps, schedules (chains: :mod:`.chains`),
and network links.

A modifier multiplies the compute part drawn from its ``base`` model by its factor, or
without a base (``has_distribution`` False) the ``measured`` compute time of a real
kernel, communication then 0. A :class:`Link` changes no draw: it says how long a
message's bytes take on the links, which the runtime that knows the bytes charges.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from daskstraggle._validation import _fail, check_int, check_nonnegative, check_positive
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import (
    Checks,
    Draw,
    LatencyModel,
    LatencySampler,
    Streams,
    _in_bounds,
    _is_index,
    _is_number,
    _worker_indices,
    check_seconds,
    register_model,
)

__all__ = ["Artificial", "Link", "Schedule", "SharedLink", "Slowdown", "parse_bandwidth",
           "share_link"]


def _check_base(value: Any, *, name: str, caller: str, allow_none: bool = True) -> Any:
    if value is None and allow_none:
        return None
    if not isinstance(value, LatencyModel):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a LatencyModel"
            f"{' or None' if allow_none else ''}. Got {type(value).__name__} instead."
        )
    return value


def _check_workers(value: Any, *, name: str = "workers", caller: str,
                   allow_none: bool = True) -> tuple[int, ...] | None:
    """Normalise a worker index or a list of them to a tuple of distinct ints >= 0."""
    if value is None and allow_none:
        return None
    options = " or None (all workers)" if allow_none else ""
    workers = _worker_indices(value, term=caller, options=options)
    if len(set(workers)) != len(workers):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} lists a worker twice. Got {value!r} instead; "
            "list each worker index once."
        )
    return workers


def _check_probability(value: Any, *, name: str, caller: str) -> float:
    if not (_is_number(value) and 0.0 <= float(value) <= 1.0):
        _fail(name, caller, "a probability in [0, 1]", value)
    return float(value)


def _sub_sampler(
    model: LatencyModel | None, n_workers: int, streams: Streams
) -> LatencySampler | None:
    """Return ``model``'s sampler on the same streams (None for None)."""
    return None if model is None else model._make_sampler(n_workers, streams)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Modifier(LatencyModel):
    """Base of the modifiers: the ``base`` model (None: scale ``measured``), checked first."""

    _checks: ClassVar[Checks] = (("base", _check_base),)
    _per_worker = False
    base: LatencyModel | None = None

    @property
    def has_distribution(self) -> bool:
        """Whether a base with a distribution draws the compute time (False: ``measured``)."""
        return self.base is not None and self.base.has_distribution

    @property
    def link(self) -> Link | None:
        """The base's link term (None without a base)."""
        return None if self.base is None else self.base.link


class _FactorSampler(LatencySampler):
    """A base draw (or the measured time) with the compute part times ``factor(...)``."""

    def __init__(self, base: LatencyModel | None, n_workers: int, streams: Streams) -> None:
        super().__init__(n_workers, streams)
        self.base = _sub_sampler(base, n_workers, streams)

    def factor(self, worker_index: int, time: float, iteration: int) -> float:
        """Return the compute-time factor of ``worker_index`` at ``time`` / ``iteration``."""
        raise NotImplementedError

    def _source(
        self, worker_index: int, time: float, iteration: int
    ) -> tuple[LatencySampler | None, float]:
        """Return the sampler drawn from (None: the measured time) and the compute factor."""
        return self.base, self.factor(worker_index, time, iteration)

    def sample(self, worker_index: int, *, time: float = 0.0, iteration: int = 0,
               load: float = 1.0, measured: float | None = None,
               size: int | None = None) -> Draw:
        """Draw from the source (or use ``measured``); multiply the compute part by the
        factor."""
        source, factor = self._source(worker_index, time, iteration)
        if source is None:
            if measured is None:
                raise ValueError(
                    "This latency model has no base distribution: it scales the measured "
                    "compute time, so pass measured=<seconds the kernel took> to sample(), or "
                    "give the model a base such as gamma(...)."
                )
            compute = factor * float(measured)
            return (compute, 0.0) if size is None else (np.full(size, compute), np.zeros(size))
        compute, communication = source.sample(
            worker_index, time=time, iteration=iteration, load=load, measured=measured, size=size
        )
        if size is None:
            return float(compute) * factor, communication
        return np.asarray(compute) * factor, communication


class _FixedSampler(_FactorSampler):
    """A base draw (or the measured time) with a fixed compute factor per worker, 1 unless a
    subclass sets ``factors`` (a modifier that changes no compute time: :class:`Link`)."""

    def __init__(self, model: _Modifier, n_workers: int, streams: Streams) -> None:
        super().__init__(model.base, n_workers, streams)
        self.stateless = self.base is None or self.base.stateless
        self.shared_draws = self.base is not None and self.base.shared_draws
        self.factors = np.ones(n_workers)

    def _draw_shared(self, loads, size, generator):
        assert self.base is not None  # shared_draws needs a base
        compute, communication = self.base._draw_shared(loads, size, generator)
        compute *= self.factors[:, None]
        return compute, communication

    def factor(self, worker_index: int, time: float, iteration: int) -> float:
        """Return the persistent factor of ``worker_index``."""
        return float(self.factors[worker_index])


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class Slowdown(_Modifier):
    """Persistent slow-down of some workers: their compute time times a fixed factor.

    Parameters
    ----------
    base : LatencyModel or None, default=None
        Model drawn from before scaling. None scales the real (``measured``) compute time.
    workers : int or tuple of int
        Worker indices to slow down.
    factor : float or tuple of float
        Compute-time factor (> 0): one for all listed workers, or one per listed worker.

    See Also
    --------
    TwoStateMarkov : Workers that switch between slow and fast.

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §VII (artificial slowdowns).

    Examples
    --------
    >>> s = Slowdown(workers=1, factor=4.0).sampler(2)
    >>> s.sample(1, measured=0.5)
    (2.0, 0.0)
    >>> s.sample(0, measured=0.5)
    (0.5, 0.0)
    """

    name: ClassVar[str] = "slowdown"
    _checks = (*_Modifier._checks,
               ("workers", functools.partial(_check_workers, allow_none=False)))
    workers: int | tuple[int, ...]
    factor: float | tuple[float, ...]

    def __post_init__(self) -> None:
        LatencyModel.__post_init__(self)
        caller, workers, factor = "Slowdown", cast(tuple[int, ...], self.workers), self.factor
        if isinstance(factor, tuple | list):
            if len(factor) != len(workers):
                _fail("factor", caller, f"one number or one per listed worker ({len(workers)})",
                      factor)
            factor = tuple(check_positive(f, name="factor", caller=caller) for f in factor)
        else:
            factor = check_positive(factor, name="factor", caller=caller)
        self._set(factor=factor)

    def _make_sampler(self, n_workers: int, streams: Streams) -> LatencySampler:
        sampler = _FixedSampler(self, n_workers, streams)
        sampler.factors[list(cast(tuple[int, ...], self.workers))] = self.factor
        return sampler


class _ArtificialSampler(_FactorSampler):
    stateless = False

    def __init__(self, model: Artificial, n_workers: int, streams: Streams) -> None:
        super().__init__(model.base, n_workers, streams)
        self.factors = 1.0 + model.spread * np.arange(1, n_workers + 1) / n_workers
        self.first_recovered = n_workers - min(model.n_recover, n_workers)
        self.recover_time = model.recover_time

    def factor(self, worker_index: int, time: float, iteration: int) -> float:
        """Return the compute-time factor of ``worker_index`` at ``time``."""
        if worker_index >= self.first_recovered and time >= self.recover_time:
            return 1.0
        return float(self.factors[worker_index])


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class Artificial(_Modifier):
    """DSAG's artificial scenario: a latency ramp over workers, partly removed after a while.

    Worker ``i`` (0-based) of ``N`` has its compute time multiplied by
    ``1 + spread * (i + 1) / N``; the last ``min(n_recover, N)`` workers go back to factor
    1 once ``time >= recover_time``.

    Parameters
    ----------
    base : LatencyModel or None, default=None
        Model drawn from before scaling. None scales the real (``measured``) compute time.
    spread : float, default=0.4
        Extra factor of the last worker (>= 0).
    n_recover : int, default=10
        How many of the last workers lose their extra latency.
    recover_time : float, default=1.0
        Seconds after which they do.

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §VII-B (artificial scenario, N = 49
       workers).

    Examples
    --------
    >>> s = Artificial(spread=0.4, n_recover=1).sampler(4)
    >>> s.sample(1, measured=1.0)
    (1.2, 0.0)
    >>> s.sample(3, time=0.5, measured=1.0), s.sample(3, time=1.0, measured=1.0)
    ((1.4, 0.0), (1.0, 0.0))
    """

    name: ClassVar[str] = "artificial"
    _sampler_class = _ArtificialSampler
    _checks = (*_Modifier._checks, ("spread", check_nonnegative),
               ("n_recover", functools.partial(check_int, low=0)),
               ("recover_time", check_nonnegative))
    spread: float = 0.4
    n_recover: int = 10
    recover_time: float = 1.0


_SCHEDULE_FORM = (
    "Write changes=[[iteration, workers, factor], ...], e.g. [[40, [1, 4, 6], 2.0]]."
)


def _check_changes(value: Any, *, name: str = "changes",
                   caller: str) -> tuple[tuple[int, tuple[int, ...], float], ...]:
    """Normalise ``[[iteration, workers, factor], ...]``, sorted stably by iteration."""
    if not isinstance(value, tuple | list) or not value:
        _fail("changes", caller, "a non-empty list of [iteration, workers, factor] entries",
              value, _SCHEDULE_FORM)
    out = [_check_change(entry, k, caller=caller) for k, entry in enumerate(value)]
    return tuple(sorted(out, key=lambda change: change[0]))  # stable: list order breaks ties


def _check_change(entry: Any, k: int, *, caller: str) -> tuple[int, tuple[int, ...], float]:
    """Normalise the change ``entry`` (number ``k``) to ``(iteration, workers, factor)``."""
    bad = f"The 'changes' parameter of {caller} has a bad entry {entry!r} (entry {k}): "
    if not isinstance(entry, tuple | list) or len(entry) != 3:
        raise InvalidParameterError(
            f"{bad}each entry must be [iteration, workers, factor]. {_SCHEDULE_FORM}"
        )
    iteration, workers, factor = entry
    if not _is_index(iteration):
        raise InvalidParameterError(
            f"{bad}its iteration must be an int >= 0. Got {iteration!r} instead."
        )
    items = workers if isinstance(workers, tuple | list) else (workers,)
    if not items or not all(map(_is_index, items)) or len(set(items)) != len(items):
        raise InvalidParameterError(
            f"{bad}its workers must be a worker index or a list of distinct ones (ints >= 0). "
            f"Got {workers!r} instead."
        )
    if not (_is_number(factor) and math.isfinite(factor) and factor > 0):
        raise InvalidParameterError(
            f"{bad}its factor must be a finite number > 0. Got {factor!r} instead."
        )
    return int(iteration), tuple(int(w) for w in items), float(factor)


class _ScheduleSampler(_FactorSampler):
    """A base draw (or the measured time) times a factor looked up by iteration."""

    stateless = False  # the factor depends on ``iteration``

    def __init__(self, model: Schedule, n_workers: int, streams: Streams) -> None:
        super().__init__(model.base, n_workers, streams)
        # per worker: the iterations its factor changes at, and the factor from there
        self._at: list[list[int]] = [[] for _ in range(n_workers)]
        self._factor: list[list[float]] = [[] for _ in range(n_workers)]
        for iteration, workers, factor in model.changes:
            for w in workers:
                self._at[w].append(iteration)
                self._factor[w].append(factor)

    def factor(self, worker_index: int, time: float, iteration: int) -> float:
        """Return the compute-time factor of ``worker_index`` at ``iteration``."""
        k = bisect.bisect_right(self._at[worker_index], int(iteration))
        return 1.0 if k == 0 else self._factor[worker_index][k - 1]


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule(_Modifier):
    """Scheduled slow-downs and speed-ups: compute factors that change at given iterations.

    Each change ``[iteration, workers, factor]`` sets the compute-time factor of the
    listed workers to ``factor`` for every task computing iterate version ``iteration``
    or later. A later change overrides an earlier one for the workers they share (at the
    same iteration, the one listed last wins); workers never listed keep factor 1.

    Parameters
    ----------
    base : LatencyModel or None, default=None
        Model drawn from before scaling. None scales the real (``measured``) compute time.
    changes : list of [int, int or list of int, float]
        ``[iteration, workers, factor]`` entries: from iterate version ``iteration``
        (>= 0) the listed workers (distinct indices >= 0) have compute factor ``factor``
        (> 0, may be below 1).

    See Also
    --------
    Slowdown : A fixed factor for the whole run.
    Artificial : DSAG's ramp over workers, partly removed after some seconds.

    Notes
    -----
    The sampler is not stateless (the factor depends on the iteration). On a real cluster
    without a base, the injector can only add time: a factor below 1 cannot make a task
    finish before its real compute did; give a base model (``gamma(...) + schedule(...)``)
    to model speed-ups there.

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §VI, Fig. 7 (3 workers slowed down
       after 40 iterations, 3 others sped up after 90).

    Examples
    --------
    >>> m = Schedule(changes=[[2, [0, 1], 3.0], [4, 0, 0.5]])
    >>> s = m.sampler(2)
    >>> [s.sample(0, iteration=k, measured=1.0)[0] for k in range(6)]
    [1.0, 1.0, 3.0, 3.0, 0.5, 0.5]
    >>> [s.sample(1, iteration=k, measured=1.0)[0] for k in range(6)]
    [1.0, 1.0, 3.0, 3.0, 3.0, 3.0]

    As a spec (``--stragglers``), on top of a gamma law:

    >>> from daskstraggle.latency.spec import parse_latency
    >>> m = parse_latency("gamma(mean=0.1, var=1e-4) + schedule(changes=[[40, [1, 4], 2.0]])")
    >>> m.changes
    ((40, (1, 4), 2.0),)
    """

    name: ClassVar[str] = "schedule"
    _sampler_class = _ScheduleSampler
    _checks = (*_Modifier._checks, ("changes", _check_changes))
    changes: Any

    def check_n_workers(self, n_workers: int) -> None:
        """Raise InvalidParameterError if a listed worker is out of range."""
        LatencyModel.check_n_workers(self, n_workers)
        for iteration, workers, _ in self.changes:
            for w in workers:
                if w >= n_workers:
                    raise InvalidParameterError(
                        f"The 'changes' parameter of Schedule is invalid: worker {w} (change "
                        f"at iteration {iteration}) is out of range for {n_workers} workers "
                        f"(indices 0..{n_workers - 1}); list indices below {n_workers}."
                    )



#: tc's rate prefixes (``kbit``: 1000 bits/s, ``kibit``: 1024), case-insensitive.
_PREFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
             "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}
_RATE = re.compile(r"\s*(\d*\.?\d+(?:e[+-]?\d+)?)\s*(k|m|g|t|ki|mi|gi|ti)?(bit|bps)\s*",
                   re.IGNORECASE)
_BANDWIDTH = ("bytes per second (a finite number >= 1) or a tc rate such as '100mbit' "
              "(bit, kbit, mbit, gbit: bits/s; bps, kbps, mbps, gbps: bytes/s)")


def parse_bandwidth(value: Any, *, name: str = "bandwidth", caller: str = "link",
                    options: str = "") -> float:
    """Return a link's bandwidth in bytes per second.

    Parameters
    ----------
    value : float or str
        Bytes per second (at least 1), or a rate as ``tc`` writes it: a number and a unit,
        ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` (bits per second; ``kibit``...
        in powers of 1024) or ``bps``, ``kbps``, ``mbps``, ``gbps``, ``tbps`` (bytes per
        second), case-insensitive.
    name, caller : str, default="bandwidth", "link"
        For the error message.
    options : str, default=""
        The other values the parameter takes, for the error message.

    Returns
    -------
    bandwidth : float
        Bytes per second.

    Raises
    ------
    InvalidParameterError
        If ``value`` is not a number of bytes per second >= 1 or a rate with a unit.

    Examples
    --------
    >>> parse_bandwidth("100mbit"), parse_bandwidth("1Gbit"), parse_bandwidth("2kbps")
    (12500000.0, 125000000.0, 2000.0)
    """
    rate = value
    if isinstance(value, str):
        match = _RATE.fullmatch(value)
        if match is not None:
            number, prefix, unit = match.groups()
            rate = float(number) * _PREFIXES[(prefix or "").lower()] / \
                (8.0 if unit.lower() == "bit" else 1.0)
    if isinstance(rate, str) or not _in_bounds(rate, 1.0, False, None):
        _fail(name, caller, _BANDWIDTH + options, value)
    return float(rate)


def _check_bandwidths(value: Any, *, name: str, caller: str, per_worker: bool = True) -> Any:
    """Normalise None (unlimited), a bandwidth or (``per_worker``) one per worker
    (:func:`parse_bandwidth`)."""
    if value is None:
        return None
    options = (", a list of them (one per worker)" if per_worker else "") + " or None (unlimited)"
    if per_worker and isinstance(value, tuple | list) and value:
        return tuple(parse_bandwidth(v, name=name, caller=caller, options=options)
                     for v in value)
    return parse_bandwidth(value, name=name, caller=caller, options=options)


def _of(value: Any, worker_index: int) -> float:
    """Worker ``worker_index``'s value of a scalar-or-per-worker parameter."""
    return float(value[worker_index] if isinstance(value, tuple) else value)


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class Link(_Modifier):
    """Network links: the time a reply's bytes take to reach the coordinator.

    A message of ``B`` bytes from worker ``i`` takes ``latency + B / bandwidth[i]`` on
    its worker's own link (added to the communication time drawn from ``base``) and
    streams on through the coordinator's link as it goes (as TCP through a switch),
    sharing that link's ``coordinator`` bytes per second equally with the other replies
    in flight (:class:`SharedLink`): alone it takes ``latency + B / min(bandwidth[i],
    coordinator)`` (:meth:`message_duration`). The draws of ``base`` are unchanged: the
    bytes are known only to the runtime that carries the message (the simulated runtime
    charges each result's bytes; on a Dask cluster the real network does).

    Parameters
    ----------
    base : LatencyModel or None, default=None
        Model drawn from (compute and communication). None: the real (``measured``)
        compute time.
    bandwidth : float, str, tuple of float or str, or None, default=None
        Each worker's link in bytes per second, or a ``tc`` rate such as ``"100mbit"``
        (:func:`parse_bandwidth`): one for every worker, or one per worker. None:
        unlimited.
    coordinator : float, str or None, default=None
        The coordinator's link (shared by all replies), likewise. None: unlimited.
    latency : float or tuple of float, default=0.0
        Fixed seconds per message on a worker's link (one value, or one per worker).

    See Also
    --------
    SharedLink : The coordinator's link during one run.
    daskstraggle.runtime.SimRuntime : Charges each result's bytes through the link.

    Examples
    --------
    >>> link = Link(bandwidth=("1gbit", 1e6), coordinator=1e8, latency=1e-3)
    >>> link.bandwidth
    (125000000.0, 1000000.0)
    >>> link.transfer_duration(1, 2e6)  # 1 ms + 2 MB at 1 MB/s
    2.001

    As a spec (``--stragglers``), on top of any distribution:

    >>> from daskstraggle.latency.spec import parse_latency
    >>> model = parse_latency("gamma(mean=0.1, var=1e-4) + link(bandwidth=1e9, coordinator=1e8)")
    >>> model.link.coordinator_duration(1e6)
    0.01
    """

    name: ClassVar[str] = "link"
    _sampler_class = _FixedSampler  # the base's draws, unchanged
    _per_worker = True  # tuples hold one value per worker
    _checks = (*_Modifier._checks, ("bandwidth", _check_bandwidths),
               ("coordinator", functools.partial(_check_bandwidths, per_worker=False)),
               ("latency", check_seconds))
    bandwidth: float | str | tuple[float | str, ...] | None = None
    coordinator: float | str | None = None
    latency: float | tuple[float, ...] = 0.0

    def __post_init__(self) -> None:
        LatencyModel.__post_init__(self)
        if self.base is not None and self.base.link is not None:
            raise InvalidParameterError(
                "The 'base' parameter of Link already has a link term; give one link(...) "
                "term per model, with every link's bandwidth in it."
            )

    @property
    def link(self) -> Link:
        """This link."""
        return self

    def transfer_duration(self, worker_index: int, nbytes: float) -> float:
        """Return the seconds a message takes on its worker's own link.

        Parameters
        ----------
        worker_index : int
            The worker sending it.
        nbytes : float
            Its size in bytes.

        Returns
        -------
        duration : float
            ``latency + nbytes / bandwidth`` of that worker (no division when unlimited).
        """
        return _of(self.latency, worker_index) + self.receive_duration(worker_index, nbytes)

    def receive_duration(self, worker_index: int, nbytes: float) -> float:
        """Return the seconds ``nbytes`` bytes take on worker ``worker_index``'s link
        without its fixed latency: on their way *into* it (another worker's result summed
        there, with tree aggregation), or the bytes' part of :meth:`transfer_duration`:
        ``nbytes / bandwidth``, 0 when unlimited.

        Examples
        --------
        >>> Link(bandwidth=(1e6, 2e6)).receive_duration(1, 1e6)
        0.5
        """
        return nbytes / self.rate(worker_index) if nbytes else 0.0

    def rate(self, worker_index: int) -> float:
        """Return worker ``worker_index``'s link in bytes per second (``math.inf`` when
        unlimited)."""
        return math.inf if self.bandwidth is None else _of(self.bandwidth, worker_index)

    def coordinator_duration(self, nbytes: float) -> float:
        """Return the seconds a message of ``nbytes`` bytes holds the coordinator's link
        (0 when it is unlimited)."""
        return 0.0 if self.coordinator is None else nbytes / float(self.coordinator)

    def message_duration(self, worker_index: int, nbytes: float) -> float:
        """Return the seconds a message of ``nbytes`` bytes from worker ``worker_index``
        takes to the coordinator when it is the only one in flight: its latency, and its
        bytes at the slower of the two links they stream through.

        Examples
        --------
        >>> Link(bandwidth=(1e6, 1e8), coordinator=1e7).message_duration(0, 1e6)
        1.0
        >>> Link(bandwidth=(1e6, 1e8), coordinator=1e7).message_duration(1, 1e6)
        0.1
        """
        return _of(self.latency, worker_index) + max(self.receive_duration(worker_index, nbytes),
                                                     self.coordinator_duration(nbytes))


class SharedLink:
    """The coordinator's link during one run, shared by the replies in flight.

    A reply's bytes enter the link when its first byte leaves its worker (:meth:`add`)
    and share its bandwidth equally with the others in flight, as TCP streams do through
    a switch port, none faster than its own worker's link (max-min fair shares: a reply
    held back by its own link leaves the rest to the others). The caller takes the
    replies out in the order they finish (:meth:`next_done`, :meth:`finish`): every
    time given is at or after the last one, and before the next reply finishes.

    Parameters
    ----------
    link : Link
        The link model (its ``coordinator`` bandwidth; None: every reply at its own
        link's rate).

    Examples
    --------
    Three replies of 1 MB reach a 10 MB/s link at once: they share it, and all arrive
    after 0.3 s; one of them behind a 1 MB/s link arrives at 1 s, the other two after
    2 MB at 9 MB/s:

    >>> from daskstraggle.latency.modifiers import share_link
    >>> share_link(Link(coordinator=1e7), [0.0] * 3, 1e6)
    [0.3, 0.3, 0.3]
    >>> [round(t, 3) for t in share_link(Link(coordinator=1e7), [0.0] * 3, 1e6,
    ...                                   rates=[1e6, math.inf, math.inf])]
    [1.0, 0.222, 0.222]
    """

    def __init__(self, link: Link) -> None:
        self.link = link
        self.time = 0.0
        self._flows: dict[Any, list[float]] = {}  # key -> [bytes left, its own rate]

    def add(self, key: Any, time: float, nbytes: float, rate: float = math.inf) -> None:
        """A reply ``key`` of ``nbytes`` bytes enters the link at ``time``, fed by its
        worker's link at ``rate`` bytes per second."""
        self._advance(time)
        self._flows[key] = [float(nbytes), float(rate)]

    def next_done(self) -> tuple[float, Any] | None:
        """When the next reply finishes if no other enters before, and its key (None:
        none in flight)."""
        if not self._flows:
            return None
        rates = self._rates()
        key = min(self._flows, key=lambda k: _seconds(self._flows[k][0], rates[k]))
        return self.time + _seconds(self._flows[key][0], rates[key]), key

    def finish(self, key: Any, time: float) -> None:
        """Take out reply ``key``, finished at ``time`` (:meth:`next_done`)."""
        self._advance(time)
        del self._flows[key]

    def cross(self, time: float, nbytes: float, rate: float = math.inf
              ) -> tuple[float, list[tuple[float, Any]]]:
        """Carry a message of ``nbytes`` from ``time`` on (a checkpoint, a tree's sum)
        and return when it has crossed, with the ``(time, key)`` of the replies that
        finished before it (taken out)."""
        token = object()
        self.add(token, time, nbytes, rate)
        before: list[tuple[float, Any]] = []
        while True:
            done, key = cast(tuple[float, Any], self.next_done())
            self.finish(key, done)
            if key is token:
                return done, before
            before.append((done, key))

    def _advance(self, time: float) -> None:
        """Move every reply on to ``time`` at its share."""
        if time > self.time and self._flows:
            rates = self._rates()
            for key, flow in self._flows.items():
                flow[0] = max(0.0, flow[0] - rates[key] * (time - self.time))
        self.time = max(self.time, time)

    def _rates(self) -> dict[Any, float]:
        """Each reply's bytes per second: max-min fair shares of the coordinator's link
        under each reply's own rate."""
        if self.link.coordinator is None:  # each at its own rate
            return {key: flow[1] for key, flow in self._flows.items()}
        left = float(self.link.coordinator)
        rates = {}
        order = sorted(self._flows, key=lambda k: self._flows[k][1])
        for k, key in enumerate(order):
            share = left / (len(order) - k)
            rates[key] = min(self._flows[key][1], share)
            left -= rates[key]
        return rates


def _seconds(nbytes: float, rate: float) -> float:
    """Seconds ``nbytes`` take at ``rate`` bytes per second (none when nothing is left,
    or at an unlimited rate)."""
    return 0.0 if nbytes <= 0 or rate == math.inf else nbytes / rate


def share_link(link: Link, starts: list[float], nbytes: float,
               rates: list[float] | None = None) -> list[float]:
    """Return when each of messages of ``nbytes`` bytes, entering the coordinator's link
    of ``link`` at ``starts`` (fed at ``rates``: None, unlimited), has crossed it, all
    sharing it (:class:`SharedLink`).

    Examples
    --------
    >>> share_link(Link(coordinator=1e6), [0.0, 1.0], 1e6)  # one after the other
    [1.0, 2.0]
    """
    shared = SharedLink(link)
    feeds = [math.inf] * len(starts) if rates is None else rates
    done = [0.0] * len(starts)
    pending = sorted(range(len(starts)), key=starts.__getitem__)
    while pending or shared.next_done() is not None:
        upcoming = shared.next_done()
        if pending and (upcoming is None or starts[pending[0]] <= upcoming[0]):
            i = pending.pop(0)
            shared.add(i, starts[i], nbytes, feeds[i])
        else:
            at, key = cast(tuple[float, Any], upcoming)
            shared.finish(key, at)
            done[key] = at
    return done
