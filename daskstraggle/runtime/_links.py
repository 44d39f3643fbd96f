"""Measure a Dask cluster's links to the client: messages of a given size from each worker,
one at a time and all at once (:meth:`DaskRuntime.measure_links
<daskstraggle.runtime.DaskRuntime.measure_links>`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from daskstraggle.latency.fit import fit_link
from daskstraggle.latency.modifiers import Link

#: Bytes of the message that measures each link's fixed time per message.
SMALL_BYTES = 64


def payload(nbytes: int, seed: int) -> np.ndarray:
    """Worker task: ``nbytes`` random bytes (they do not compress on the way)."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def measure_links(client: Any, submit_to: Callable[..., Any], addresses: list[str],
                  nbytes: int, timeout: float) -> Link | None:
    """Fit the links from ``addresses`` (by worker index) to ``client``
    (:func:`~daskstraggle.latency.fit.fit_link`): a message of :data:`SMALL_BYTES` from
    each worker, one at a time (the fixed part), one of ``nbytes`` from each, one at a
    time, then one from every worker at once, each fetched only once every worker holds
    it (so only the transfer is timed, by the client's clock). ``submit_to(address, fn,
    *args, key=)`` pins a task. Every wait is bounded by ``timeout`` seconds; None when
    one was not met or a worker left (the links could not be measured)."""
    from distributed import as_completed, wait

    token = uuid.uuid4().hex[:6]
    held: list[Any] = []

    def ready(size: int, tag: str) -> list[Any]:
        futures = [submit_to(address, payload, size, index, key=f"link-{tag}-{index}-{token}")
                   for index, address in enumerate(addresses)]
        held.extend(futures)
        wait(futures, timeout=timeout)
        return futures

    def one_at_a_time(futures: list[Any]) -> list[float]:
        seconds = []
        for future in futures:
            start = time.perf_counter()
            future.result(timeout=timeout)
            seconds.append(time.perf_counter() - start)
        return seconds

    try:
        latency = one_at_a_time(ready(SMALL_BYTES, "small"))
        alone = one_at_a_time(ready(nbytes, "alone"))
        together = ready(nbytes, "together")
        start = time.perf_counter()
        arrivals = [time.perf_counter() - start
                    for _ in as_completed(together, with_results=True, timeout=timeout)]
    except Exception:  # a bound not met, a worker gone: no measurement
        return None
    finally:
        client.cancel(held)
    return fit_link(nbytes, alone, arrivals, latency=latency)
