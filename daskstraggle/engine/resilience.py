"""Pure decisions about slow, lost, retiring and joining workers (the worker pool's rules).

The settings come as arguments: the runtimes read them from :mod:`daskstraggle.config` once.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskstraggle._validation import check_int, check_positive
from daskstraggle.errors import InvalidParameterError

__all__ = [
    "SlowBounds",
    "UnitPart",
    "adoption_moves",
    "check_memory",
    "check_slow_settings",
    "frozen_bound",
    "helper_targets",
    "next_fraction",
    "overdue_workers",
    "replacement_targets",
    "split_unit",
    "stale_bound",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class SlowBounds:
    """When unanswered work means a frozen worker, or rows too stale.

    Parameters
    ----------
    frozen_after : float or None, default=None
        Seconds (None: ``max(frozen_minimum, frozen_factor * median latency)``).
    stale_after : int or None, default=None
        Rounds (None: ``max(stale_minimum_rounds, stale_factor * median age)``).
    frozen_minimum, frozen_factor : float, default=30.0, 20.0
        The ``daskstraggle.frozen`` settings.
    stale_minimum_rounds, stale_factor : float, default=50, 10.0
        The ``daskstraggle.stale`` settings.
    stale_wait : float, default=10.0
        Seconds a unit must have been in flight (its data loaded) before its age in
        rounds counts (``daskstraggle.stale.minimum-wait``).
    """

    frozen_after: float | None = None
    stale_after: int | None = None
    frozen_minimum: float = 30.0
    frozen_factor: float = 20.0
    stale_minimum_rounds: float = 50
    stale_factor: float = 10.0
    stale_wait: float = 10.0


def check_slow_settings(frozen_after: Any, stale_after: Any, backup_after: Any, *,
                        caller: str) -> tuple[float | None, int | None, float | None]:
    """Check a runtime's ``frozen_after`` (seconds > 0), ``stale_after`` (rounds >= 1)
    and ``backup_after`` (a factor > 0), each None or a value; return them.

    Raises
    ------
    InvalidParameterError
        Naming the parameter, ``caller`` and the constraint.

    Examples
    --------
    >>> check_slow_settings(2, None, 1.5, caller="SimRuntime")
    (2.0, None, 1.5)
    """
    return (
        None if frozen_after is None else check_positive(frozen_after, name="frozen_after",
                                                         caller=caller),
        None if stale_after is None else check_int(stale_after, name="stale_after",
                                                   caller=caller, low=1),
        None if backup_after is None else check_positive(backup_after, name="backup_after",
                                                         caller=caller),
    )


def frozen_bound(frozen_after: float | None, recent: Iterable[float], *,
                 minimum: float = 30.0, factor: float = 20.0) -> float:
    """Seconds after which an unanswered unit means a frozen worker.

    Parameters
    ----------
    frozen_after : float or None
        The user's bound; None: ``max(minimum, factor * median(recent))``.
    recent : iterable of float
        Latencies (send to result, seconds) of the run's recent units.
    minimum, factor : float, default=30.0, 20.0
        The ``daskstraggle.frozen`` settings.

    Returns
    -------
    bound : float

    Examples
    --------
    >>> frozen_bound(None, [0.1, 0.2, 0.3]), frozen_bound(None, [2.0, 3.0]), frozen_bound(5.0, [])
    (30.0, 50.0, 5.0)
    """
    if frozen_after is not None:
        return float(frozen_after)
    values = list(recent)
    typical = statistics.median(values) if values else 0.0
    return float(max(minimum, factor * typical))


def stale_bound(stale_after: int | None, ages: Iterable[int], *, minimum: float = 50,
                factor: float = 10.0) -> float:
    """Rounds a unit may stay in flight before its worker index's rows move elsewhere.

    The age of a unit is the number of rounds (iterate versions) the run went on since it
    was sent; the rows it covers are at least that stale in a cache of results (SAG,
    DSAG). Methods that wait for every worker (GD) never age a unit; asynchronous ones
    age every unit by about the number of workers.

    :func:`frozen_bound`'s rule in rounds: the user's ``stale_after``, else ``max(minimum,
    factor * median(ages))`` over the ``ages`` of the run's recent units when their
    results arrived; ``minimum`` and ``factor`` are the ``daskstraggle.stale`` settings.

    Examples
    --------
    >>> stale_bound(None, []), stale_bound(None, [0, 1, 1]), stale_bound(None, [8, 9, 9])
    (50.0, 50.0, 90.0)
    >>> stale_bound(10, [100])
    10.0
    """
    return frozen_bound(stale_after, ages, minimum=minimum, factor=factor)


def overdue_workers(sent: Iterable[tuple[int, float]], now: float, bound: float
                    ) -> dict[int, float]:
    """Worker indices with a unit unanswered for more than ``bound`` seconds.

    Parameters
    ----------
    sent : iterable of (int, float)
        ``(worker_index, send time)`` of every unit in flight.
    now : float
        The current time (same clock as the send times).
    bound : float
        See :func:`frozen_bound`.

    Returns
    -------
    overdue : dict of int to float
        Seconds the oldest unanswered unit of each overdue index has waited.

    Examples
    --------
    >>> overdue_workers([(0, 1.0), (1, 9.0), (0, 5.0)], now=10.0, bound=4.0)
    {0: 9.0}
    """
    overdue: dict[int, float] = {}
    for index, t in sent:
        if now - t > bound:
            overdue[index] = max(overdue.get(index, 0.0), now - t)
    return overdue


def replacement_targets(addresses: list[str], live: list[str], *,
                        avoid: Collection[str] = ()) -> dict[int, str]:
    """Return a live worker for every worker index whose worker has left (pure).

    A live worker that no index uses yet (a nanny's restart of the lost worker, or a
    worker that joined) is taken first, in sorted order; then the live worker that the
    fewest indices use, so the lost work is spread over the survivors. Workers in
    ``avoid`` (the restart of a worker that ran out of memory in this run) are taken only
    when no other worker is live.

    Parameters
    ----------
    addresses : list of str
        Current worker address of each worker index.
    live : list of str
        Addresses of the workers in the cluster now (not empty).
    avoid : collection of str, default=()
        Workers taken last: only if every live worker is one of them.

    Returns
    -------
    moves : dict of int to str
        New address of each index whose address is not live.

    Examples
    --------
    >>> replacement_targets(["a", "b", "c"], ["a", "c", "d"])
    {1: 'd'}
    >>> replacement_targets(["a", "b", "c"], ["a"])
    {1: 'a', 2: 'a'}
    >>> replacement_targets(["a", "b", "c"], ["a", "c", "d"], avoid=["d"])
    {1: 'a'}
    """
    alive = set(live)
    lost = [i for i, a in enumerate(addresses) if a not in alive]
    load = {a: 0 for a in sorted(alive - set(avoid) or alive)}
    for a in addresses:
        if a in load:
            load[a] += 1
    moves: dict[int, str] = {}
    for i in lost:
        target = min(load, key=lambda a: (load[a], a))
        moves[i] = target
        load[target] += 1
    return moves


def adoption_moves(addresses: list[str], live: list[str], *, avoid: Collection[str] = (),
                   arrived: Mapping[int, int] | None = None) -> dict[int, str]:
    """Give workers that no index uses (that joined) an index from a doubled-up worker.

    After a loss moved a worker index onto a survivor, that survivor computes for two;
    a worker that joins later takes one of them back (pure): the one that arrived there
    last (the lost index, whose data may still be loading), so the survivor keeps the
    data of its own. A newcomer in ``avoid`` (the restart of a worker that ran out of
    memory in this run) takes none.

    Parameters
    ----------
    addresses : list of str
        Current worker address of each worker index (all live).
    live : list of str
        Addresses of the workers in the cluster now.
    avoid : collection of str, default=()
        Newcomers given no index.
    arrived : mapping of int to int or None, default=None
        When each index moved to its worker (larger: later; absent: at the start).

    Returns
    -------
    moves : dict of int to str
        New address of each index handed to a newcomer: of the worker holding the most,
        the index that arrived last (the highest of those that did not move), while some
        worker holds more than one.

    Examples
    --------
    >>> adoption_moves(["a", "a", "b"], ["a", "b", "c"])
    {1: 'c'}
    >>> adoption_moves(["a", "a", "b"], ["a", "b", "c"], arrived={0: 5})
    {0: 'c'}
    >>> adoption_moves(["a", "b"], ["a", "b", "c"])
    {}
    >>> adoption_moves(["a", "a", "b"], ["a", "b", "c"], avoid=["c"])
    {}
    """
    arrived = arrived or {}
    held: dict[str, list[int]] = {}
    for i, a in enumerate(addresses):
        held.setdefault(a, []).append(i)
    moves: dict[int, str] = {}
    for newcomer in sorted(set(live) - set(addresses) - set(avoid)):
        busiest = max(held, key=lambda a: (len(held[a]), a), default=None)
        if busiest is None or len(held[busiest]) < 2:
            break
        last = max(held[busiest], key=lambda i: (arrived.get(i, -1), i))
        held[busiest].remove(last)
        moves[last] = newcomer
    return moves


def check_memory(addresses: list[str], shares: Sequence[float], limits: Mapping[str, float],
                 pause: float, *, own: Mapping[str, float] | None = None,
                 transient: Sequence[float] | None = None) -> None:
    """Refuse a placement that gives a worker more data than its memory limit allows.

    A worker holds its share of the data beside its own memory (the process with its
    libraries and kernels) and, while it loads, the transient copies of what it reads.
    Dask pauses a worker at ``pause`` (``distributed.worker.memory.pause``, 0.8) of its
    limit and its nanny restarts it near the limit; a share above that would be lost and
    reloaded instead of computed.

    Parameters
    ----------
    addresses : list of str
        Worker address by worker index.
    shares : sequence of float
        Bytes each worker index would hold.
    limits : mapping of str to float
        Memory limit of each worker in bytes (0 or absent: none).
    pause : float
        Fraction of the limit at which Dask pauses a worker.
    own : mapping of str to float or None, default=None
        Bytes each worker's process uses before the load (absent: 0).
    transient : sequence of float or None, default=None
        Bytes each worker index reads at once while it loads, beyond what it keeps
        (None: 0); a worker holding several indices loads one after the other.

    Raises
    ------
    InvalidParameterError
        Naming the worker, its share, its own memory, the transient bytes and its limit.

    Examples
    --------
    >>> check_memory(["a"], [80e6], {"a": 450e6}, 0.8, own={"a": 210e6}, transient=[32e6])
    >>> check_memory(["a"], [240e6], {"a": 450e6}, 0.8, own={"a": 210e6}, transient=[32e6])
    Traceback (most recent call last):
    ...
    daskstraggle.errors.InvalidParameterError: Worker a would hold 0.24 GB of the matrix \
beside its own 0.21 GB and 0.032 GB read while loading (0.482 GB), more than 80% of its ...
    """
    own = own or {}
    held: dict[str, float] = {}
    reads: dict[str, float] = {}
    for i, (address, share) in enumerate(zip(addresses, shares, strict=True)):
        held[address] = held.get(address, 0) + share
        extra = 0 if transient is None else transient[i]
        reads[address] = max(reads.get(address, 0), extra)
    for address, share in held.items():
        limit = limits.get(address) or 0
        total = share + own.get(address, 0) + reads[address]
        if limit and total > pause * limit:
            raise InvalidParameterError(
                f"Worker {address} would hold {share / 1e9:.3g} GB of the matrix beside "
                f"its own {own.get(address, 0) / 1e9:.3g} GB and {reads[address] / 1e9:.3g} "
                f"GB read while loading ({total / 1e9:.3g} GB), more than {pause:.0%} of its "
                f"memory limit of {limit / 1e9:.3g} GB (where Dask pauses it): use more "
                "workers (CLI: --workers), workers with more memory (dask worker "
                "--memory-limit), or a smaller matrix."
            )


def helper_targets(addresses: Sequence[str], newcomers: Iterable[str], helped: Iterable[int],
                   latency: Mapping[int, float]) -> dict[str, int]:
    """Pick the worker index each newcomer helps: the slowest first (pure).

    A worker that joins when every worker index has its own worker takes over part of
    the rows of the index with the highest measured latency that has no helper yet (and
    a worker of its own: a doubled-up index goes to a newcomer whole, see
    :func:`adoption_moves`).

    Parameters
    ----------
    addresses : sequence of str
        Current worker address of each worker index.
    newcomers : iterable of str
        Live workers that neither hold an index nor help one.
    helped : iterable of int
        Worker indices that have a helper already.
    latency : mapping of int to float
        Recent latency (seconds from send to result) by worker index; absent: 0.

    Returns
    -------
    targets : dict of str to int
        The index each newcomer (in sorted order) helps, while indices are left.

    Examples
    --------
    >>> helper_targets(["a", "b", "c"], ["x", "y"], [], {0: 0.1, 1: 0.4, 2: 0.2})
    {'x': 1, 'y': 2}
    >>> helper_targets(["a", "a", "c"], ["x"], [2], {2: 1.0})
    {}
    """
    shared = {a for a in addresses if list(addresses).count(a) > 1}
    taken = set(helped)
    free = [i for i, a in enumerate(addresses) if a not in shared and i not in taken]
    free.sort(key=lambda i: (-latency.get(i, 0.0), i))
    return dict(zip(sorted(newcomers), free, strict=False))


@dataclass(frozen=True, slots=True)
class UnitPart:
    """One of the two tasks a split work unit becomes.

    Attributes
    ----------
    positions : tuple of int
        Which of the unit's partitions (positions in ``unit.partitions``) it reads.
    rows : tuple of (int, int)
        Its rows ``[a, b)`` along the concatenation of those partitions.
    coefficients : ndarray of shape (n_messages, len(positions)) or None
        The unit's coding coefficients of those partitions (None: a plain sum).
    """

    positions: tuple[int, ...]
    rows: tuple[int, int]
    coefficients: np.ndarray | None


def split_unit(partition_rows: Sequence[int], *, rows: tuple[int, int] | None,
               coefficients: Any, fraction: float) -> tuple[UnitPart, UnitPart] | None:
    """Split a work unit's rows into two contiguous parts whose results add up to its own.

    A kernel sum is a sum over rows, and a coded message ``sum_p c_p kernel(p)`` is linear
    in each partition's rows, so computing rows ``[lo, cut)`` and ``[cut, hi)`` apart
    (each partition's coefficient on its share of the rows) and adding the two results
    gives the unit's result, up to rounding.

    Parameters
    ----------
    partition_rows : sequence of int
        Rows of each of the unit's partitions, in order.
    rows : tuple of (int, int) or None
        The unit's own row range along their concatenation (None: all rows).
    coefficients : array of shape (n_messages, n_partitions) or None
        The unit's coding coefficients.
    fraction : float
        Share of the rows in the first part, in (0, 1).

    Returns
    -------
    parts : tuple of two UnitPart, or None
        None when the unit has fewer than two rows (or both a row range and
        coefficients, which no method sends).

    Examples
    --------
    >>> first, second = split_unit([4, 6], rows=None, coefficients=None, fraction=0.5)
    >>> first.positions, first.rows, second.positions, second.rows
    ((0, 1), (0, 5), (1,), (1, 6))
    >>> first, second = split_unit([4, 6], rows=None, coefficients=[[1.0, 2.0]],
    ...                            fraction=0.5)
    >>> second.positions, second.rows, second.coefficients
    ((1,), (1, 6), array([[2.]]))
    """
    if rows is not None and coefficients is not None:
        return None
    starts = np.concatenate([[0], np.cumsum(partition_rows)]).astype(int)
    lo, hi = rows if rows is not None else (0, int(starts[-1]))
    if hi - lo < 2:
        return None
    cut = lo + min(max(round((hi - lo) * fraction), 1), hi - lo - 1)
    coef = None if coefficients is None else np.asarray(coefficients, dtype=np.float64)

    def part(a: int, b: int) -> UnitPart:
        positions = tuple(k for k in range(len(partition_rows))
                          if starts[k] < b and starts[k + 1] > a)
        offset = int(starts[positions[0]])
        return UnitPart(positions, (a - offset, b - offset),
                        None if coef is None else coef[:, list(positions)])

    return part(lo, cut), part(cut, hi)


def next_fraction(fraction: float, own: float, helper: float) -> float:
    """The share of a split unit's rows its own worker keeps next time (pure).

    From the seconds each part took (``own`` for the ``fraction`` of the rows, ``helper``
    for the rest), the share at which both would finish together, halfway averaged with
    the current one and kept in [0.05, 0.95].

    Examples
    --------
    >>> next_fraction(0.5, own=3.0, helper=1.0)  # its own worker is 3 times slower
    0.375
    >>> next_fraction(0.5, own=1.0, helper=1.0)
    0.5
    """
    own_speed = fraction / max(own, 1e-9)
    helper_speed = (1.0 - fraction) / max(helper, 1e-9)
    balanced = own_speed / (own_speed + helper_speed)
    return float(min(max(0.5 * (fraction + balanced), 0.05), 0.95))
