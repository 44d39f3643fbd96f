"""Measure a Dask cluster's links to the client: messages of a given size from each worker,
all at once and one at a time (:meth:`DaskRuntime.measure_links
<daskstraggle.runtime.DaskRuntime.measure_links>`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import numpy as np

from daskstraggle.latency.fit import Links, fit_link, fit_peers
from daskstraggle.runtime._resilience import wait_ready
from daskstraggle.runtime._results import ResultStream

#: Bytes of the message that measures each link's fixed time per message.
SMALL_BYTES = 64
#: Once half of the workers' messages arrived, how many times the time so far the
#: measurement waits for the others (a later one is not waited for: the worker is busy, or
#: its link is known to be at least that slow).
WINDOW = 3.0
#: Seconds between two looks at whether the messages are made.
POLL = 0.005


def payload(nbytes: int, seed: int) -> np.ndarray:
    """Worker task: ``nbytes`` random bytes (they do not compress on the way)."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def measure_links(client: Any, submit_to: Callable[..., Any], addresses: list[str],
                  nbytes: int, timeout: float) -> Links | None:
    """Fit the links from ``addresses`` (by worker index) to ``client``
    (:func:`~daskstraggle.latency.fit.fit_link`) from messages made on the workers and
    fetched, by the client's clock, once made: one of :data:`SMALL_BYTES` from every
    worker (the fixed part; a worker that has not made it :data:`WINDOW` times as late as
    half of the others, still busy with an earlier run's task, is left out: its links are
    taken as the others' median); one of ``nbytes`` from every worker at once (one
    :data:`WINDOW` times as late as half of the others is not waited for: it counts as
    having taken the time waited, alone and at once, its link at least that slow); one of
    ``nbytes`` from each other worker, one at a time; then each of those workers' message
    moved to the next one in a ring (:func:`~daskstraggle.latency.fit.fit_peers`: the links
    between workers). ``submit_to(address, fn, *args, key=)`` pins a task. Every wait is
    bounded by ``timeout`` seconds; None when one was not met or a worker left (the links
    could not be measured)."""
    token = uuid.uuid4().hex[:6]
    batches = {tag: [submit_to(address, payload, size, index,
                               key=f"link-{tag}-{index}-{token}")
                     for index, address in enumerate(addresses)]
               for tag, size in (("small", SMALL_BYTES), ("alone", nbytes),
                                 ("together", nbytes))}
    held = [future for futures in batches.values() for future in futures]
    try:
        latency, alone, arrivals, edges = _measured(submit_to, addresses, batches, token,
                                                    timeout)
    except Exception:  # a bound not met, a worker gone: no measurement
        return None
    finally:
        client.cancel(held)
    n = len(addresses)
    link = fit_link(nbytes, _each(alone, n), _each(arrivals, n), latency=_each(latency, n))
    peers = fit_peers(nbytes, edges, fallback=cast(tuple[float, ...], link.bandwidth))
    return Links(link, replace(link, bandwidth=peers))


def _measured(submit_to: Callable[..., Any], addresses: list[str],
              batches: dict[str, list[Any]], token: str, timeout: float
              ) -> tuple[dict[int, float], dict[int, float], dict[int, float],
                         list[tuple[int, int, float]]]:
    """The times of :func:`measure_links`'s messages, by the index of each worker not
    left out: the small one's, alone, at once; and the ring's edges."""
    small, busy = _arrivals(batches["small"], timeout)  # busy: an earlier run's task
    live = [i for i in range(len(addresses)) if i not in busy]
    _made([batches[tag][i] for tag in ("alone", "together") for i in live], timeout)
    times, late = _arrivals([batches["together"][i] for i in live], timeout)
    arrivals = dict(zip(live, times, strict=True))
    slow = {live[k] for k in late}
    alone = {i: arrivals[i] if i in slow else _fetched(batches["alone"][i], timeout)
             for i in live}
    edges = _ring(submit_to, addresses, batches, [i for i in live if i not in slow], token,
                  timeout)
    return {i: small[i] for i in live}, alone, arrivals, edges


def _each(values: dict[int, float], n: int) -> list[float]:
    """``values`` by worker index, the others' median for a worker left out (busy)."""
    typical = float(np.median(list(values.values())))
    return [values.get(i, typical) for i in range(n)]


def _ring(submit_to: Callable[..., Any], addresses: list[str], batches: dict[str, list[Any]],
          ring: list[int], token: str, timeout: float) -> list[tuple[int, int, float]]:
    """``(sender, receiver, seconds)`` of each ``ring`` worker's ``"alone"`` message moved
    to the next one in the ring, less the same with its ``"small"`` one: all moves at once
    (each worker sends one and receives one), the small ones first (they open the
    connections)."""
    if len(ring) < 2:
        return []
    pairs = [(i, ring[(k + 1) % len(ring)]) for k, i in enumerate(ring)]
    moved = {tag: _arrivals([submit_to(addresses[j], _size, batches[tag][i],
                                       key=f"link-peer-{tag}-{i}-{token}")
                             for i, j in pairs], timeout, window=False)[0]
             for tag in ("small", "alone")}
    return [(i, j, big - small)
            for (i, j), small, big in zip(pairs, moved["small"], moved["alone"], strict=True)]


def _size(data: np.ndarray) -> int:
    """Worker task: the bytes it was given (from another worker)."""
    return int(data.nbytes)


def _made(futures: list[Any], timeout: float) -> None:
    """Wait until every one of ``futures`` finished (TimeoutError after ``timeout`` s),
    without fetching them, on their own client (which need not be the default one)."""
    deadline = time.perf_counter() + timeout
    while not all(future.done() for future in futures):
        if time.perf_counter() > deadline:
            raise TimeoutError("the links' messages were not made in time")
        time.sleep(POLL)


def _fetched(future: Any, timeout: float) -> float:
    """Seconds the client takes to fetch ``future``'s result."""
    start = time.perf_counter()
    future.result(timeout=timeout)
    return time.perf_counter() - start


def _arrivals(futures: list[Any], timeout: float, *, window: bool = True
              ) -> tuple[list[float], set[int]]:
    """Seconds after asking for all of ``futures``' results at once when each arrived,
    and those not waited for: with ``window``, once half of them did, the others are
    waited for :data:`WINDOW` times as long, and one still missing counts as arriving at
    the end of the wait. TimeoutError if fewer than that arrived (without ``window``: any
    missing) after ``timeout`` seconds."""
    index = {future.key: i for i, future in enumerate(futures)}
    arrived: dict[int, float] = {}
    start = time.perf_counter()
    deadline = start + timeout
    stream = ResultStream(futures[0].client)  # each fetched alone: none waits for another
    for future in futures:
        stream.add(future)
    while len(arrived) < len(futures) and time.perf_counter() < deadline:
        wait_ready(stream, deadline - time.perf_counter())
        while stream.has_ready():
            future, _ = next(stream)
            arrived[index[future.key]] = time.perf_counter() - start
        if window and arrived and 2 * len(arrived) >= len(futures):
            deadline = min(deadline, start + WINDOW * max(arrived.values()))
    if 2 * len(arrived) < len(futures) or (not window and len(arrived) < len(futures)):
        raise TimeoutError("the links' messages did not arrive in time")
    stream.clear()
    end = time.perf_counter() - start
    return ([arrived.get(i, end) for i in range(len(futures))],
            set(range(len(futures))) - set(arrived))
