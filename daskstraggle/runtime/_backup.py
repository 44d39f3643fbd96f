"""Slow work on the Dask runtime: frozen and stale workers, speculative backups.

A worker index whose unit is unanswered for ``frozen_after`` seconds (default: 20 times
the median latency of the run's recent units, at least 30 s) is moved to another worker,
as for a worker that left: its worker is taken as frozen and gets no more work this run.
So is one whose unit is still in flight ``stale_after`` rounds (iterate versions) after
it was sent (default: 10 times the rounds the run's recent units took, at least 50), and
at least the ``daskstraggle.stale.minimum-wait`` setting (10 s), its data loaded: the rows
it covers are at least that stale in SAG's and DSAG's cache, and are computed again
elsewhere (reloaded from the source there), so the cache becomes exact again.

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

import bisect
import logging
import math
import statistics
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from daskstraggle.methods.base import WorkUnit
from daskstraggle.runtime import _resilience
from daskstraggle.runtime._connect import worker_addresses
from daskstraggle.runtime._resilience import frozen_bound, replacement_targets, stale_bound

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
    _stale_after: int | None
    _retiring: set[str]
    _helpers: dict[int, str]
    _helper_held: dict[int, dict[int, Any]]
    _halves: dict[str, Any]
    _pinned: Callable[..., Any]
    _unit_load: Callable[[WorkUnit], float]
    _move: Callable[..., None]
    _drop_helper: Callable[..., None]
    _worker_of: Callable[[str, WorkUnit], str]
    _note_latency: Callable[[int, float], None]
    # the backups' own
    _backup_after: float | None
    _twins: dict[str, str]
    _spares: dict[tuple[str, int], Any]
    _n_backups: int
    _newest: int  # the newest iterate version sent
    _versions: list[tuple[float, int]]  # (time, version) each time a newer one was sent
    _ages: deque[int]  # rounds each recent unit was in flight

    def _advance(self, version: int) -> None:
        """A unit at iterate ``version`` is sent: keep when each version was first sent."""
        if version > self._newest:
            self._newest = version
            self._versions.append((time.perf_counter(), version))
            if len(self._versions) > 20_000:  # bounded: ages beyond that are beyond any bound
                del self._versions[:10_000]

    def _age(self, sent: float) -> int:
        """Rounds (iterate versions) the run went on since a unit was sent at ``sent``."""
        at = bisect.bisect_right(self._versions, (sent, math.inf))
        return self._newest - (self._versions[at - 1][1] if at else 0)

    def _data_loaded(self, key: str, unit: WorkUnit) -> bool:
        """Whether the partitions the task ``key`` of ``unit`` reads are loaded (a unit
        sent again after a move may wait for a reload: that is not the worker's delay)."""
        held = (self._helper_held.get(unit.worker_index, {}) if self._worker_of(key, unit)
                != self._addresses[unit.worker_index] else self._held[unit.worker_index])
        return all(held[p].status == "finished" for p in unit.partitions if p in held)

    def _note_arrival(self, unit: WorkUnit, sent: float, latency: float) -> None:
        """A result of ``unit``, sent at ``sent``, arrived ``latency`` seconds later."""
        self._recent.append(latency)
        self._ages.append(self._age(sent))
        self._note_latency(unit.worker_index, latency)

    def _check_frozen(self) -> None:
        """Move elsewhere the rows of a worker whose work is overdue: unanswered for
        ``frozen_after`` seconds (frozen), or sent more than ``stale_after`` rounds ago
        (stale: the rows it covers are at least that stale in a cache of results)."""
        now = time.perf_counter()
        seconds = frozen_bound(self._frozen_after, self._recent)
        rounds = stale_bound(self._stale_after, self._ages)
        waited: dict[str, tuple[float, int]] = {}
        for key, (unit, sent, *_rest) in self._pending.items():
            address = self._worker_of(key, unit)
            old = waited.get(address, (0.0, 0))
            age = self._age(sent) if now - sent > _resilience.stale_wait() and \
                self._data_loaded(key, unit) else 0
            waited[address] = (max(old[0], now - sent), max(old[1], age))
        late = {a: (f"has not answered for {s:.0f} s (frozen?)", "frozen") if s > seconds else
                (f"has not answered for {age} rounds (stale)", "stale")
                for a, (s, age) in waited.items() if s > seconds or age > rounds}
        if not late:
            return
        live = sorted(set(worker_addresses(self.client)) - set(late) - self._shunned
                      - self._retiring)
        if not live:
            return  # nowhere to go: keep waiting (Dask's worker-ttl ends a dead one)
        self._shunned |= set(late)
        for i, helper in list(self._helpers.items()):
            if helper in late:
                self._drop_helper(i, why=late[helper][0])
        for i, target in replacement_targets(self._addresses, live).items():
            why, kind = late.get(self._addresses[i], ("was found frozen", "frozen"))
            self._move(i, target, why=why, kind=kind)

    def _reset_backups(self) -> None:
        """Forget the previous run's backups, spare copies and unit ages."""
        self._twins = {}
        self._spares = {}
        self._n_backups = 0
        self._newest = 0
        self._versions = []
        self._ages = deque(maxlen=200)

    def _check_backups(self) -> None:
        """Send a backup of every whole unit overdue against the run's median latency."""
        if self._backup_after is None or len(self._recent) < _MIN_SAMPLES:
            return
        bound = self._backup_after * statistics.median(self._recent)
        now = time.perf_counter()
        for key, (_, sent, message, _, _) in list(self._pending.items()):
            if message is None and key not in self._twins and key not in self._halves and \
                    now - sent > bound:
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
