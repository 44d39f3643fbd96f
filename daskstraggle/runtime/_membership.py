"""Membership on the Dask runtime: workers that leave, retire or join, below the coordinator.

The methods keep their worker indices; what changes is the worker behind an index.

- **Lost** (killed, preempted, walltime): every ``MEMBERSHIP_INTERVAL`` seconds while it
  waits for results (and before every exact pass) the runtime asks the scheduler for its
  workers and their status; a worker index whose worker has gone is re-pointed at a live
  worker (:func:`~daskstraggle.runtime._resilience.replacement_targets`), its partitions
  are reloaded there (or fetched from copies live workers still hold) and its
  undelivered work is sent again.
- **Retiring** (``client.retire_workers``, adaptive scale-down, ``dask worker
  --lifetime``): the scheduler marks the worker ``closing_gracefully`` and gives it no
  new task while it copies its data away. The runtime learns it from a subscription to
  the worker's scheduler events (at once) or from that status in the membership check,
  and moves the index before the worker goes: the target fetches the partitions from the
  retiring worker (or the copies Dask makes of its data; nothing is reloaded) and the
  work pending there is sent again to the target at once.
- **Joining**: a newcomer takes back a worker index from a survivor that computes for two
  (:func:`~daskstraggle.runtime._resilience.adoption_moves`); beyond that it helps the
  index with the highest latency (:class:`~daskstraggle.runtime._helpers.HelperMixin`).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

from daskstraggle.errors import SchedulerLostError, StraggleWarning, WorkerLostError
from daskstraggle.methods.base import WorkUnit
from daskstraggle.runtime._connect import scheduler_timeout, worker_addresses, worker_status
from daskstraggle.runtime._resilience import adoption_moves, replacement_targets

__all__ = ["MEMBERSHIP_INTERVAL", "MembershipMixin", "no_worker_timeout"]

logger = logging.getLogger(__name__)

#: Seconds between checks that every worker holding our partitions is still there, while
#: the runtime waits for results (one scheduler round-trip each).
MEMBERSHIP_INTERVAL = 1.0
#: The status of a retiring worker (no new task; its data is being copied away).
_RETIRING = "closing_gracefully"
#: Statuses of a worker that is going: never a target.
_GOING = (_RETIRING, "closing", "closed")


def no_worker_timeout() -> float:
    """Seconds to wait for a worker to (re)join when every worker has left
    (``daskstraggle.timeouts.no-worker``, :mod:`daskstraggle.config`)."""
    from daskstraggle import config

    return float(config.seconds("timeouts.no-worker"))


class MembershipMixin:
    """Lost, retiring and joining workers for :class:`~daskstraggle.runtime.DaskRuntime`,
    whose state it uses."""

    # the runtime's (declared here, set by DaskRuntime)
    client: Any
    _addresses: list[str]
    _held: list[dict[int, Any]]
    _pending: dict[str, tuple[WorkUnit, float, int | None, bool, Any]]
    _matrix: Any
    _work: Any
    _shunned: set[str]
    _losses: list[dict[str, Any]]
    _last_check: float
    _scheduler_lost: bool
    _twins: dict[str, str]
    _pinned: Callable[..., Any]
    _submit: Callable[..., None]
    # the helpers' (HelperMixin)
    _helpers: dict[int, str]
    _adopt_newcomers: Callable[[list[str]], None]
    _drop_helper: Callable[..., None]
    _take_helper_data: Callable[[int, str], dict[int, Any]]
    _forget_split: Callable[[str], None]
    # membership's own
    _retiring: set[str]
    _retire_news: deque[str]
    _watched: dict[str, Any]

    def _reset_membership(self) -> None:
        """Forget the previous run's retirements and event subscriptions."""
        handlers = getattr(getattr(self, "client", None), "_event_handlers", {})
        for address, handler in getattr(self, "_watched", {}).items():
            try:
                self.client.unsubscribe_topic(address)
            except Exception as err:  # the scheduler may be gone: nothing to undo there
                logger.debug("unsubscribing from %s failed: %s", address, err)
            if handlers.get(address) is handler:  # distributed keeps it: drop ours
                handlers.pop(address, None)
        self._watched = {}
        self._retiring = set()
        self._retire_news = deque(maxlen=1000)

    def _membership_due(self, now: float) -> bool:
        """Whether to check membership now: a retirement was announced, or it is time."""
        return bool(self._retire_news) or now - self._last_check >= MEMBERSHIP_INTERVAL

    def _watch(self, addresses: list[str]) -> None:
        """Subscribe to the scheduler events of ``addresses`` (a retirement is announced
        there the moment it starts). A topic the user's client already handles is left
        alone (a client keeps one handler per topic): the status poll sees that worker's
        retirement instead, within a second."""
        handled = getattr(self.client, "_event_handlers", {})
        for address in addresses:
            if address not in self._watched and address not in handled:
                handler = functools.partial(self._on_worker_event, address)
                self._watched[address] = handler
                self.client.subscribe_topic(address, handler)

    def _on_worker_event(self, address: str, event: Any) -> None:
        # runs in the client's event loop thread: only queue it (deque appends are atomic)
        msg = event[1] if isinstance(event, tuple | list) and len(event) == 2 else None
        if isinstance(msg, dict) and msg.get("action") == "worker-status-change" and \
                msg.get("status") == _RETIRING:
            self._retire_news.append(address)

    def _check_membership(self) -> bool:
        """Move the partitions of workers that left or are retiring to live ones; return
        whether any moved (work pinned to them never runs).

        Each such worker index is re-pointed at a live worker (see
        :func:`replacement_targets`), its partitions are reloaded there from the source (a
        retiring worker's are fetched from it) by new pinned tasks, and its undelivered
        work is sent again. Nothing waits on a task pinned to a worker that is gone. A
        worker that joins takes back a doubled-up index or helps the slowest one.

        Raises
        ------
        WorkerLostError
            If every worker left and none joined within :func:`no_worker_timeout` seconds.
        SchedulerLostError
            If the scheduler does not answer.
        """
        self._last_check = time.perf_counter()
        if not self._held:
            return False
        while self._retire_news:  # announced before the status asked for below
            self._retiring.add(self._retire_news.popleft())
        try:
            status = worker_status(self.client)
        except SchedulerLostError:
            self._scheduler_lost = True  # the clean-up must not wait on it either
            raise
        # (a retirement the scheduler aborted, for want of workers to take the data, is over)
        self._retiring |= {a for a, s in status.items() if s == _RETIRING}
        self._retiring -= {a for a, s in status.items() if s == "running"}
        # a worker found frozen is never given work again in this run, nor is a going one
        live = sorted({a for a, s in status.items() if s not in _GOING} - self._shunned
                      - self._retiring)
        for i, helper in list(self._helpers.items()):
            if helper not in live:
                self._drop_helper(i, why="left the cluster" if helper not in status else
                                  "is retiring" if helper in self._retiring else "is frozen")
        self._watch(sorted({*self._addresses, *self._helpers.values()} & set(status)))
        if not live:  # every worker gone: wait (bounded) for one to join
            live = self._wait_for_any_worker()
        moves = replacement_targets(self._addresses, live)
        if not moves:
            for i, target in adoption_moves(self._addresses, live).items():
                self._move(i, target, why=f"also computed for another index and {target} "
                                          "joined", warn=False, kind="adopted")
            self._adopt_newcomers(live)
            return False
        for lost in {self._addresses[i] for i in moves} - set(status) - self._retiring:
            if self._retired_before_leaving(lost):  # too fast for the event to reach us
                self._retiring.add(lost)
        for i, target in moves.items():
            lost = self._addresses[i]
            if lost in self._retiring:
                self._move(i, target, why="is retiring (closing gracefully)", kind="retired")
            elif lost in self._shunned:
                self._move(i, target, why="was found frozen", kind="frozen")
            else:
                self._move(i, target)
        return True

    def _retired_before_leaving(self, address: str) -> bool:
        """Whether the scheduler's event log says the worker that left at ``address`` was
        retiring (else it was lost: killed, crashed, cut off)."""
        try:
            events = self.client.sync(self.client.scheduler.events, topic=address,
                                      callback_timeout=scheduler_timeout())
        except Exception as err:  # no log: call it lost
            logger.info("reading the events of %s failed (%s)", address, err)
            return False
        return any(isinstance(msg, dict) and msg.get("action") == "worker-status-change"
                   and msg.get("status") == _RETIRING for _, msg in events or ())

    def _wait_for_any_worker(self) -> list[str]:
        """Wait (at most :func:`no_worker_timeout` s) until the cluster has a worker again;
        return the addresses of its workers."""
        try:
            self.client.wait_for_workers(1, timeout=no_worker_timeout())
        except TimeoutError:
            raise WorkerLostError(
                f"Every worker left the cluster and none joined within "
                f"{no_worker_timeout():g} s; the run cannot go on. Start workers (or check why "
                "they died: memory limit, walltime, preemption) and run again."
            ) from None
        return worker_addresses(self.client)

    def _move(self, index: int, target: str, why: str = "left the cluster",
              warn: bool = True, kind: str = "lost") -> None:
        """Put worker index ``index``'s partitions on ``target``; resend its work.

        ``why`` says what happened to its worker, in the warning (``warn``; else a log
        record only); ``kind`` classifies it (lost, retired, frozen, stale, adopted).
        """
        assert self._matrix is not None
        lost, self._addresses[index] = self._addresses[index], target
        parts = sorted(self._held[index])
        given = self._take_helper_data(index, target)  # target helped this index
        # a retiring worker still serves its data (and Dask copies it away before it goes)
        avoid = set(self._shunned) if kind == "retired" else {lost, *self._shunned}
        kept = {**self._copies_elsewhere(
            {p: f for p, f in self._held[index].items() if p not in given}, avoid=avoid),
            **given}
        token = uuid.uuid4().hex[:6]
        self._held[index] = {p: kept[p] if p in kept else self._pinned(
            self._matrix.loader(p), key=f"reload-p{p}-w{index}-{token}", worker_index=index)
            for p in parts}
        reloaded = [p for p in parts if p not in kept]
        self._losses.append({"worker_index": index, "lost": lost, "moved_to": target,
                             "partitions": parts, "reason": why, "kind": kind,
                             "reloaded": reloaded})
        how = (f"are reloaded from the source on {target}" if not kept else
               f"move to {target}, which fetches them from the workers holding them" if
               kind == "retired" and not reloaded else
               f"move to {target} from copies left on other workers" if not reloaded else
               f"move to {target} ({sorted(kept)} from copies left on other workers, the rest "
               "reloaded from the source)")
        message = f"worker {lost} {why}; its partitions {parts} {how}"
        logger.log(logging.WARNING if warn else logging.INFO, message)
        if warn:
            warnings.warn(f"{message[0].upper()}{message[1:]}.", StraggleWarning, stacklevel=2)
        self._resend(index)

    def _resend(self, index: int) -> None:
        """Cancel the work in flight for worker index ``index`` and send it again (to its
        worker now, and its helper if it has one)."""
        stale = [key for key, entry in self._pending.items() if entry[0].worker_index == index]
        units: dict[int, tuple[WorkUnit, list[int | None]]] = {}
        for key in stale:  # (a backup or a split part of the index's unit: same unit)
            self._twins.pop(key, None)
            self._forget_split(key)
            unit, _, message_index, _, future = self._pending.pop(key)
            units.setdefault(id(unit), (unit, []))[1].append(message_index)
            self.client.cancel([future])
        for unit, messages in units.values():
            self._submit(unit, self._work,
                         only=None if None in messages else {int(j) for j in messages
                                                             if j is not None})

    def _copies_elsewhere(self, held: dict[int, Any], avoid: set[str]) -> dict[int, Any]:
        """The partitions whose loaded data a live worker outside ``avoid`` still holds
        (a retiring worker's, which Dask copies away before it closes; an adopted index's),
        by the scheduler's account."""
        if not held:
            return {}
        try:
            holders = self.client.sync(self.client.scheduler.who_has,
                                       keys=[f.key for f in held.values()],
                                       callback_timeout=scheduler_timeout())
        except Exception as err:  # no copies known: reload
            logger.info("who_has failed (%s); reloading from the source", err)
            return {}
        return {p: future for p, future in held.items()
                if set(holders.get(future.key, ())) - avoid}
