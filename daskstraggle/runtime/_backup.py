"""Slow work on the Dask runtime: frozen workers, speculative backups, and where a moved
worker index's data comes from (copies left on live workers, e.g. by a retiring worker,
else the source).

A worker index whose unit is unanswered for ``frozen_after`` seconds (default: 20 times
the median latency of the run's recent units, at least 30 s) is moved to another worker,
as for a worker that left: its worker is taken as frozen and gets no more work this run.

Speculative backups (``backup_after``):
A unit still unanswered after ``backup_after`` times the median latency of the run's
recent units is sent again to another worker, as Spark's speculative execution and
Cubed's backup tasks do; the first of the two answers counts and the other is cancelled.
The backup reads the unit's partitions from that worker's own copies when it holds them
(coded placements replicate), else from a spare copy loaded there from the source once
and kept for the rest of the run. Only whole units are backed up (not the messages of a
streamed unit, whose partial recovery already does without the slow ones).
"""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from daskstraggle.methods.base import WorkUnit
from daskstraggle.runtime._connect import SCHEDULER_TIMEOUT, worker_addresses
from daskstraggle.runtime._resilience import frozen_bound, overdue_workers, replacement_targets

__all__ = ["SlowWorkMixin"]

logger = logging.getLogger(__name__)

#: Results needed before the median latency is trusted for a backup decision.
_MIN_SAMPLES = 3


class SlowWorkMixin:
    """Frozen workers and backups for :class:`~daskstraggle.runtime.DaskRuntime`, whose
    state it uses."""

    # the runtime's (declared here, set by DaskRuntime)
    client: Any
    _pending: dict[str, tuple[WorkUnit, float, int | None, bool, Any]]
    _held: list[dict[int, Any]]
    _addresses: list[str]
    _matrix: Any
    _recent: deque[float]
    _work: Any
    _injector: str | None
    _ac: Any
    _shunned: set[str]
    _frozen_after: float | None
    _pinned: Callable[..., Any]
    _unit_load: Callable[[WorkUnit], float]
    _move: Callable[..., None]
    # the backups' own
    _backup_after: float | None
    _twins: dict[str, str]
    _spares: dict[tuple[str, int], Any]
    _n_backups: int

    def _check_frozen(self) -> None:
        """Move the partitions of a worker whose work is overdue (frozen) elsewhere."""
        bound = frozen_bound(self._frozen_after, self._recent)
        overdue = overdue_workers(((e[0].worker_index, e[1]) for e in self._pending.values()),
                                  time.perf_counter(), bound)
        if not overdue:
            return
        frozen: dict[str, float] = {}
        for i, waited in overdue.items():
            frozen[self._addresses[i]] = max(frozen.get(self._addresses[i], 0.0), waited)
        # the membership check just ran: every address of ours is live
        live = sorted((set(self._addresses) | set(worker_addresses(self.client)))
                      - set(frozen) - self._shunned)
        if not live:
            return  # nowhere to go: keep waiting (Dask's worker-ttl ends a dead one)
        self._shunned |= set(frozen)
        for i, target in replacement_targets(self._addresses, live).items():
            waited = frozen[self._addresses[i]]
            self._move(i, target, why=f"has not answered for {waited:.0f} s (frozen?)")

    def _copies_elsewhere(self, held: dict[int, Any], avoid: set[str]) -> dict[int, Any]:
        """The partitions whose loaded data a live worker outside ``avoid`` still holds
        (a retiring worker's, which Dask copies away before it closes; an adopted index's),
        by the scheduler's account."""
        try:
            holders = self.client.sync(self.client.scheduler.who_has,
                                       keys=[f.key for f in held.values()],
                                       callback_timeout=SCHEDULER_TIMEOUT)
        except Exception as err:  # no copies known: reload
            logger.info("who_has failed (%s); reloading from the source", err)
            return {}
        return {p: future for p, future in held.items()
                if set(holders.get(future.key, ())) - avoid}

    def _reset_backups(self) -> None:
        self._twins = {}
        self._spares = {}
        self._n_backups = 0

    def _check_backups(self) -> None:
        """Send a backup of every whole unit overdue against the run's median latency."""
        if self._backup_after is None or len(self._recent) < _MIN_SAMPLES:
            return
        bound = self._backup_after * statistics.median(self._recent)
        now = time.perf_counter()
        for key, (_, sent, message, _, _) in list(self._pending.items()):
            if message is None and key not in self._twins and now - sent > bound:
                self._send_backup(key)

    def _send_backup(self, key: str) -> None:
        unit, sent, message, final, _ = self._pending[key]
        addresses, held = self._addresses, self._held
        own = addresses[unit.worker_index]
        others = [j for j in range(len(addresses)) if addresses[j] != own]
        if not others:
            self._twins[key] = key  # nowhere to send it: never try again
            return
        # a worker holding the most of the unit's partitions, then the least busy
        busy = {a: 0 for a in addresses}
        for u, *_ in self._pending.values():
            busy[addresses[u.worker_index]] += 1
        j = min(others, key=lambda o: (-sum(p in held[o] for p in unit.partitions),
                                       busy[addresses[o]], o))
        blocks = [held[j][p] if p in held[j] else self._spare(j, p) for p in unit.partitions]
        from daskstraggle.runtime.dask import run_unit_task

        future = self._pinned(
            run_unit_task, self._work, unit.iterate, unit.version,
            self._unit_load(unit), self._injector, *blocks,
            coefficients=unit.coefficients, rows=unit.rows,
            key=f"unit-backup-v{unit.version}-w{j}-{uuid.uuid4().hex[:6]}", worker_index=j,
        )
        self._pending[future.key] = (unit, sent, message, final, future)
        self._ac.add(future)
        self._twins[key], self._twins[future.key] = future.key, key
        self._n_backups += 1
        logger.info("unit of worker %s overdue: backup sent to %s", own, addresses[j])

    def _spare(self, j: int, p: int) -> Any:
        """Partition ``p`` loaded from the source on worker index ``j``'s worker (once)."""
        address = self._addresses[j]
        if (address, p) not in self._spares:
            loader = self._matrix.loader(p)
            self._spares[(address, p)] = self._pinned(
                loader, key=f"spare-p{p}-w{j}-{uuid.uuid4().hex[:6]}", worker_index=j)
        return self._spares[(address, p)]

    def _settle_twin(self, key: str) -> None:
        """The answer of ``key`` counts: cancel its twin (the original or the backup)."""
        twin = self._twins.pop(key, None)
        if twin is None or twin == key:
            return
        self._twins.pop(twin, None)
        entry = self._pending.pop(twin, None)
        if entry is not None:
            self.client.cancel([entry[4]])
