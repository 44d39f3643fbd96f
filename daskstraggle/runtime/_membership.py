"""What the Dask runtime observes about its workers, for the engine's worker pool.

The decisions (where a lost, retiring or frozen worker's indices go, what a newcomer does)
are the pool's (:class:`~daskstraggle.engine.pool.WorkerPool`); this module reads the
cluster for it: retirements announced in the workers' scheduler events, the event log of a
worker that left, a bounded wait when every worker is gone, and which partitions live
workers still hold.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from daskstraggle.engine.pool import RETIRING
from daskstraggle.errors import WorkerLostError
from daskstraggle.runtime._connect import ask_scheduler, worker_status

__all__ = [
    "MEMBERSHIP_INTERVAL",
    "RetirementNews",
    "copies_elsewhere",
    "no_worker_timeout",
    "retired_before_leaving",
    "wait_for_any_worker",
]

logger = logging.getLogger(__name__)

#: Seconds between checks that every worker holding our partitions is still there, while
#: the runtime waits for results (one scheduler round-trip each).
MEMBERSHIP_INTERVAL = 1.0
#: Seconds between looks at the cluster while its only workers cannot take work.
_POLL = 0.25


def no_worker_timeout() -> float:
    """Seconds to wait for a worker to (re)join when every worker has left
    (``daskstraggle.timeouts.no-worker``, :mod:`daskstraggle.config`)."""
    from daskstraggle import config

    return float(config.seconds("timeouts.no-worker"))


class RetirementNews:
    """Subscriptions to the workers' scheduler events, queueing announced retirements.

    Parameters
    ----------
    client : distributed.Client
        The runtime's client.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.news: deque[str] = deque(maxlen=1000)
        self._watched: dict[str, Any] = {}

    def watch(self, addresses: list[str]) -> None:
        """Subscribe to the scheduler events of ``addresses``. A topic the user's client
        already handles is left alone (a client keeps one handler per topic): the status
        poll sees that worker's retirement instead, within a second."""
        handled = getattr(self.client, "_event_handlers", {})
        for address in addresses:
            if address not in self._watched and address not in handled:
                handler = functools.partial(self._on_event, address)
                self._watched[address] = handler
                self.client.subscribe_topic(address, handler)

    def _on_event(self, address: str, event: Any) -> None:
        # runs in the client's event loop thread: only queue it (deque appends are atomic)
        if isinstance(event, tuple | list) and len(event) == 2 and _retiring(event[1]):
            self.news.append(address)

    def take(self) -> set[str]:
        """The workers announced as retiring since the last call."""
        out = set()
        while self.news:
            out.add(self.news.popleft())
        return out

    def close(self) -> None:
        """Unsubscribe (a scheduler that is gone has nothing to undo)."""
        handlers = getattr(self.client, "_event_handlers", {})
        for address, handler in self._watched.items():
            try:
                self.client.unsubscribe_topic(address)
            except Exception as err:  # the scheduler may be gone: nothing to undo there
                logger.debug("unsubscribing from %s failed: %s", address, err)
            if handlers.get(address) is handler:  # distributed keeps it: drop ours
                handlers.pop(address, None)
        self._watched = {}
        self.news.clear()


def retired_before_leaving(client: Any, address: str) -> bool:
    """Whether the scheduler's event log says the worker that left at ``address`` was
    retiring (else it was lost: killed, crashed, cut off)."""
    try:
        events = ask_scheduler(client, "events", topic=address)
    except Exception as err:  # no log: call it lost
        logger.info("reading the events of %s failed (%s)", address, err)
        return False
    return any(_retiring(msg) for _, msg in events or ())


def _retiring(msg: Any) -> bool:
    """Whether a worker's scheduler event says it started retiring."""
    return isinstance(msg, dict) and msg.get("action") == "worker-status-change" and \
        msg.get("status") == RETIRING


def wait_for_any_worker(client: Any, usable: Callable[[dict[str, str]], bool] | None = None,
                        ) -> dict[str, str]:
    """Wait (at most :func:`no_worker_timeout` s) until the cluster has a worker again
    (one that ``usable`` accepts, given the statuses: not one found frozen, say); return
    the workers' statuses.

    Raises
    ------
    WorkerLostError
        If none joined in time.
    """
    limit = no_worker_timeout()
    deadline = time.monotonic() + limit
    while True:
        remaining = deadline - time.monotonic()
        try:
            client.wait_for_workers(1, timeout=max(remaining, 0.001))
        except TimeoutError:
            break
        status = worker_status(client)
        if usable is None or usable(status):
            return status
        if remaining <= 0:
            break
        time.sleep(min(_POLL, max(remaining, 0.0)))  # a worker is there but not usable
    raise WorkerLostError(
        f"Every worker left the cluster and none joined within {limit:g} s; the run cannot "
        "go on. Start workers (or check why they died: memory limit, walltime, preemption) "
        "and run again."
    )


def copies_elsewhere(client: Any, held: dict[int, Any], avoid: set[str]) -> dict[int, Any]:
    """The partitions whose loaded data a live worker outside ``avoid`` still holds (a
    retiring worker's, which Dask copies away before it closes; an adopted index's), by
    the scheduler's account."""
    if not held:
        return {}
    try:
        holders = ask_scheduler(client, "who_has", keys=[f.key for f in held.values()])
    except Exception as err:  # no copies known: reload
        logger.info("who_has failed (%s); reloading from the source", err)
        return {}
    return {p: future for p, future in held.items()
            if set(holders.get(future.key, ())) - avoid}
