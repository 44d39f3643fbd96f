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
#: Once every worker's message but one arrived, how many times the time so far the
#: measurement waits for the last (a slower one is censored: its link is known to be at
#: least that slow, and it is not waited for).
WINDOW = 3.0


def payload(nbytes: int, seed: int) -> np.ndarray:
    """Worker task: ``nbytes`` random bytes (they do not compress on the way)."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def measure_links(client: Any, submit_to: Callable[..., Any], addresses: list[str],
                  nbytes: int, timeout: float) -> Links | None:
    """Fit the links from ``addresses`` (by worker index) to ``client``
    (:func:`~daskstraggle.latency.fit.fit_link`) from messages made on the workers and
    fetched, by the client's clock, only once every worker holds its own: one of
    :data:`SMALL_BYTES` from every worker (the fixed part); one of ``nbytes`` from every
    worker at once, waiting for the last only :data:`WINDOW` times as long as for the
    others; then one of ``nbytes`` from each worker that arrived, one at a time; then each
    worker's message moved to the next worker in a ring (all moves at once), less the same
    with the small message (:func:`~daskstraggle.latency.fit.fit_peers`: the links between
    workers). A worker not waited for counts as having taken the time waited,
    alone and at once (its link at least that slow), and is left out of the ring.
    ``submit_to(address, fn, *args, key=)`` pins a task. Every wait is bounded by
    ``timeout`` seconds; None when one was not met or a worker left (the links could not
    be measured)."""
    from distributed import wait

    token = uuid.uuid4().hex[:6]
    batches = {tag: [submit_to(address, payload, size, index,
                               key=f"link-{tag}-{index}-{token}")
                     for index, address in enumerate(addresses)]
               for tag, size in (("small", SMALL_BYTES), ("alone", nbytes),
                                 ("together", nbytes))}
    held = [future for futures in batches.values() for future in futures]
    try:
        wait(held, timeout=timeout)
        latency = _arrivals(batches["small"], timeout, window=False)[0]
        arrivals, missing = _arrivals(batches["together"], timeout)
        alone = [arrivals[i] if i in missing else _fetched(future, timeout)
                 for i, future in enumerate(batches["alone"])]
        ring = [(i, (i + 1) % len(addresses)) for i in range(len(addresses))
                if len(addresses) > 1 and not {i, (i + 1) % len(addresses)} & missing]
        # all at once (each worker sends one and receives one), the small ones first:
        # they open the connections
        moved = {tag: _arrivals([submit_to(addresses[j], _size, batches[tag][i],
                                           key=f"link-peer-{tag}-{i}-{token}")
                                 for i, j in ring], timeout, window=False)[0]
                 for tag in ("small", "alone")} if ring else {"small": [], "alone": []}
        edges = [(i, j, big - small) for (i, j), small, big
                 in zip(ring, moved["small"], moved["alone"], strict=True)]
    except Exception:  # a bound not met, a worker gone: no measurement
        return None
    finally:
        client.cancel(held)
    link = fit_link(nbytes, alone, arrivals, latency=latency)
    peers = fit_peers(nbytes, edges, fallback=cast(tuple[float, ...], link.bandwidth))
    return Links(link, replace(link, bandwidth=peers))


def _size(data: np.ndarray) -> int:
    """Worker task: the bytes it was given (from another worker)."""
    return int(data.nbytes)


def _fetched(future: Any, timeout: float) -> float:
    """Seconds the client takes to fetch ``future``'s result."""
    start = time.perf_counter()
    future.result(timeout=timeout)
    return time.perf_counter() - start


def _arrivals(futures: list[Any], timeout: float, *, window: bool = True
              ) -> tuple[list[float], set[int]]:
    """Seconds after asking for all of ``futures``' results at once when each arrived,
    and the one not waited for: with ``window``, once all but one did, the last is waited
    for :data:`WINDOW` times as long, and if still missing counts as arriving at the end
    of the wait. TimeoutError if more are missing after ``timeout`` seconds."""
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
        if window and len(arrived) == len(futures) - 1 and len(futures) > 1:
            deadline = min(deadline, start + WINDOW * max(arrived.values()))
    if len(arrived) < len(futures) - window:
        raise TimeoutError("the links' messages did not arrive in time")
    stream.clear()
    end = time.perf_counter() - start
    return ([arrived.get(i, end) for i in range(len(futures))],
            set(range(len(futures))) - set(arrived))
