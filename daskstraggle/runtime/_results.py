"""Results of our tasks as they finish, each fetched on its own (:class:`ResultStream`)."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


class _Raised:
    """A task's error, raised when its result is taken."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class ResultStream:
    """Futures' results as they finish, as ``distributed.as_completed(with_results=True)``
    gives them, but each fetched in a request of its own.

    The client joins the fetches that start together (in one turn of its event loop) into
    one request, which returns once every result in it arrived: the tasks of a round
    that finish together (gram's, every worker's share in the same time) would all
    arrive with the one whose worker is behind a slow link, and a method that waits for
    the fastest (coded, DSAG) would wait for it after all. Here each result is asked of
    the scheduler alone, as soon as its task finished.

    A task that failed raises its error when its result is taken; a cancelled one gives
    its ``CancelledError`` as the result (as ``as_completed`` does).

    Parameters
    ----------
    client : distributed.Client
        The client whose futures are added.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.thread_condition = threading.Condition()
        self._ready: deque[tuple[Any, Any]] = deque()
        self._generation = 0  # results of futures added before the last clear() are dropped

    def add(self, future: Any) -> None:
        """Fetch ``future``'s result once it finished."""
        generation = self._generation
        future.add_done_callback(
            lambda done: self.client.loop.add_callback(self._fetch, done, generation))

    def has_ready(self) -> bool:
        """Whether a result is ready to take."""
        with self.thread_condition:
            return bool(self._ready)

    def __next__(self) -> tuple[Any, Any]:
        """Take the next ``(future, result)`` (waiting for one)."""
        with self.thread_condition:
            while not self._ready:
                self.thread_condition.wait()
            future, outcome = self._ready.popleft()
        if isinstance(outcome, _Raised):
            raise outcome.error
        return future, outcome

    def clear(self) -> None:
        """Drop the results ready and those still coming."""
        with self.thread_condition:
            self._generation += 1
            self._ready.clear()

    async def _fetch(self, future: Any, generation: int) -> None:
        outcome = await self._outcome(future)
        with self.thread_condition:
            if generation == self._generation:
                self._ready.append((future, outcome))
                self.thread_condition.notify_all()

    async def _outcome(self, future: Any) -> Any:
        """``future``'s result: asked of the scheduler for its key alone; through the
        client (which reschedules a result the scheduler could not get) if that failed
        or the task did not finish."""
        from asyncio import CancelledError

        if future.status == "finished":
            try:
                response = await self.client.scheduler.gather(keys=[future.key])
            except (OSError, CancelledError):
                response = {}
            if response.get("status") == "OK" and future.key in response["data"]:
                return response["data"][future.key]
        try:
            return await self.client.gather(future, asynchronous=True)
        except (CancelledError, Exception) as err:  # cancelled: the result; else raised
            cancelled = isinstance(err, CancelledError) or future.status == "cancelled"
            return err if cancelled else _Raised(err)
