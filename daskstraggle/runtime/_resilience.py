"""What the Dask runtime does when workers leave or freeze (pure helpers, no dask import).

``replacement_targets`` decides where a lost worker index's partitions go; ``quietly``
bounds a clean-up step that a frozen worker could hold up forever.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

from daskstraggle.errors import InvalidParameterError, StraggleWarning

__all__ = ["CLEANUP_TIMEOUT", "check_memory", "quietly", "replacement_targets"]

#: Seconds a clean-up step (removing the injector, stopping the throttle) may take.
CLEANUP_TIMEOUT = 15.0


def replacement_targets(addresses: list[str], live: list[str]) -> dict[int, str]:
    """Return a live worker for every worker index whose worker has left (pure).

    A live worker that no index uses yet (a nanny's restart of the lost worker, or a
    worker that joined) is taken first, in sorted order; then the live worker that the
    fewest indices use, so the lost work is spread over the survivors.

    Parameters
    ----------
    addresses : list of str
        Current worker address of each worker index.
    live : list of str
        Addresses of the workers in the cluster now (not empty).

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
    """
    alive = set(live)
    lost = [i for i, a in enumerate(addresses) if a not in alive]
    load = {a: 0 for a in sorted(alive)}
    for a in addresses:
        if a in load:
            load[a] += 1
    moves: dict[int, str] = {}
    for i in lost:
        target = min(load, key=lambda a: (load[a], a))
        moves[i] = target
        load[target] += 1
    return moves


def quietly(what: str, fn: Callable[..., Any], *args: Any) -> None:
    """Call a clean-up step, waiting at most ``CLEANUP_TIMEOUT`` s (a frozen worker never
    answers the scheduler's broadcast); turn its failure or overrun into a warning."""
    failure: list[BaseException] = []

    def call() -> None:
        try:
            fn(*args)
        except Exception as err:
            failure.append(err)

    thread = threading.Thread(target=call, name=f"daskstraggle-{what}", daemon=True)
    thread.start()
    thread.join(CLEANUP_TIMEOUT)
    if thread.is_alive():
        why = f"no answer within {CLEANUP_TIMEOUT:g} s: a worker may be frozen"
    elif failure:
        why = f"{type(failure[0]).__name__}: {failure[0]}"
    else:
        return
    warnings.warn(f"Could not {what} ({why}); the workers may stay slowed until they "
                  "restart.", StraggleWarning, stacklevel=3)


def check_memory(addresses: list[str], shares: list[int], limits: dict[str, int],
                 pause: float) -> None:
    """Refuse a placement that gives a worker more data than its memory limit allows.

    Dask pauses a worker at ``pause`` (``distributed.worker.memory.pause``, 0.8) of its
    limit and its nanny restarts it near the limit; a share above that would be lost and
    reloaded forever instead of computed.

    Parameters
    ----------
    addresses : list of str
        Worker address by worker index.
    shares : list of int
        Bytes each worker index would hold.
    limits : dict of str to int
        Memory limit of each worker (0 or absent: none).
    pause : float
        Fraction of the limit at which Dask pauses a worker.

    Raises
    ------
    InvalidParameterError
        Naming the worker, its share and its limit.

    Examples
    --------
    >>> check_memory(["a"], [10], {"a": 100}, 0.8)
    """
    held: dict[str, int] = {}
    for address, share in zip(addresses, shares, strict=True):
        held[address] = held.get(address, 0) + share
    for address, share in held.items():
        limit = limits.get(address) or 0
        if limit and share > pause * limit:
            raise InvalidParameterError(
                f"Worker {address} would hold {share / 1e9:.3g} GB of the matrix, more than "
                f"{pause:.0%} of its memory limit of {limit / 1e9:.3g} GB (where Dask pauses "
                "it): use more workers (CLI: --workers), workers with more memory (dask "
                "worker --memory-limit), or a smaller matrix."
            )
