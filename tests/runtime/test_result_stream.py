"""``ResultStream``: results of tasks that finish together arrive each as soon as it can.

A result slow to send (its worker behind a slow link; here an object that takes 3 s to
serialise on its worker) must not hold up the results that finished with it: the client's
``as_completed(with_results=True)`` fetched them in one request, and a coded round's fast
replies arrived with the slow link's (``docs/measurements/network.md``).
"""

from __future__ import annotations

import time

import pytest

from daskstraggle.runtime._results import ResultStream

pytestmark = pytest.mark.cluster

#: Seconds the slow result takes to leave its worker.
SLOW = 3.0  # the fast results must arrive within half of it, even on a busy machine


class SlowToSend:
    """A result whose serialisation takes :data:`SLOW` seconds (on its worker)."""

    def __reduce__(self):
        time.sleep(SLOW)
        return (SlowToSend, ())


def make(slow: bool, at: float = 0.0) -> object:
    """At wall time ``at`` (the tasks of a round finish together), a result."""
    time.sleep(max(0.0, at - time.time()))
    return SlowToSend() if slow else "fast"


def fail() -> None:
    raise ValueError("the task's own error")


def test_a_result_slow_to_send_does_not_hold_up_those_that_finished_with_it(dask_client):
    """Three rounds of a task per worker finishing at the same moment, one of them slow
    to send: the client's own ``as_completed`` joined the fetches of one round in about
    one of three (measured), here the fast results arrive at once every time."""
    slow_worker, *fast_workers = sorted(dask_client.scheduler_info()["workers"])
    for _ in range(3):
        stream = ResultStream(dask_client)
        at = time.time() + 0.3
        for slow, where in ((True, slow_worker), *((False, w) for w in fast_workers)):
            stream.add(dask_client.submit(make, slow, at, workers=[where], pure=False))
        time.sleep(max(0.0, at - time.time()))
        start = time.perf_counter()
        arrived = []
        for _ in range(1 + len(fast_workers)):
            _, result = next(stream)
            arrived.append((type(result).__name__, time.perf_counter() - start))
        assert [name for name, _ in arrived] == ["str"] * len(fast_workers) + ["SlowToSend"]
        assert max(t for name, t in arrived if name == "str") < SLOW / 2 < SLOW <= arrived[-1][1]


def test_a_failed_task_raises_when_taken_and_a_cleared_stream_drops_what_was_coming(
        dask_client):
    stream = ResultStream(dask_client)
    stream.add(dask_client.submit(fail, pure=False))
    with pytest.raises(ValueError, match="the task's own error"):
        next(stream)
    stream.add(dask_client.submit(make, False, pure=False))
    stream.clear()
    time.sleep(0.5)
    assert not stream.has_ready()
    cancelled = dask_client.submit(time.sleep, 5, pure=False)
    stream.add(cancelled)
    cancelled.cancel()
    future, outcome = next(stream)
    assert future is cancelled and isinstance(outcome, BaseException)
