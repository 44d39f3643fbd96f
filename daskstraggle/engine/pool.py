"""The worker pool: which worker computes each worker index, what each has in flight, and
what to do when a worker is slow, lost, retiring or joining (pure).

:meth:`WorkerPool.handle_stimulus` takes the runtime's observations as events
(:mod:`daskstraggle.engine.events`) and returns the instructions defined here; the indices
stay fixed while the worker behind one may change. The rules per case (lost, out of memory,
retiring, frozen, stale, joining, backups) are ``docs/architecture.md`` §6; every decision is
logged with its time, round and cause (:meth:`WorkerPool.history`).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import itertools
import math
import statistics
from collections import defaultdict, deque
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from daskstraggle.engine.events import (
    BackupSent,
    Event,
    FoldDone,
    HelperReady,
    Instruction,
    PassEnded,
    PassStarted,
    Sending,
    SplitSent,
    StatusChanged,
    TaskFinished,
    TasksDropped,
    TaskSent,
    Tick,
    WakeAt,
)
from daskstraggle.engine.resilience import (
    SlowBounds,
    UnitPart,
    adoption_moves,
    frozen_bound,
    helper_targets,
    next_fraction,
    replacement_targets,
    split_unit,
    stale_bound,
)
from daskstraggle.methods.base import WorkUnit

__all__ = [
    "GOING",
    "RETIRING",
    "AwaitWorkers",
    "BackupFold",
    "Cancel",
    "CheckStatus",
    "Decision",
    "Deliver",
    "GiveUp",
    "MoveIndex",
    "Resend",
    "SendBackup",
    "SplitUnit",
    "StartHelping",
    "StopHelping",
    "Task",
    "WorkerPool",
    "fold_backup_bound",
    "summary",
]

#: The status of a retiring worker (no new task; its data is being copied away).
RETIRING = "closing_gracefully"
#: Statuses of a worker that is going: never a target.
GOING = (RETIRING, "closing", "closed")
#: Results needed before the median latency is trusted for a backup decision (all the
#: other workers' on a smaller pool: a one-round job gets no more).
_MIN_SAMPLES = 3
#: An exact pass's fold still running this many times the time half the folds took (and
#: at least FOLD_BACKUP_MIN seconds after the pass started) is computed again elsewhere.
FOLD_BACKUP_FACTOR = 4.0
FOLD_BACKUP_MIN = 2.0
#: The iterate of a logged unit (the log keeps decisions, not iterates).
_NO_ITERATE = np.empty(0)
_NO_ITERATE.flags.writeable = False


def _just_after(t: float) -> float:
    """A time strictly after ``t`` (bounds are exceeded, not met)."""
    return math.nextafter(t + 1e-9 * max(abs(t), 1.0), math.inf)


def fold_backup_bound(half: float) -> float:
    """Seconds after an exact pass (or any one task per worker) started that a fold not
    yet done is computed again elsewhere, once half the folds took ``half`` seconds.

    >>> fold_backup_bound(0.1), fold_backup_bound(1.0)
    (2.0, 4.0)
    """
    return max(FOLD_BACKUP_MIN, FOLD_BACKUP_FACTOR * half)


@dataclass(slots=True)
class Task:
    """One task in flight: a whole unit, one message of a streamed unit, one part of a
    split unit, or a backup.

    Attributes
    ----------
    key : str
        The runtime's name of the task.
    unit : WorkUnit
        The unit it computes (all or part of).
    worker : str
        The worker computing it.
    sent : float
        When the unit was sent (a backup keeps its original's).
    message : int or None
        For a streamed unit, which message.
    final : bool
        Whether its result is the unit's last (its worker index is idle after it).
    part : int or None
        For a split unit, 0 (the index's own worker) or 1 (its helper).
    """

    key: str
    unit: WorkUnit
    worker: str
    sent: float
    message: int | None = None
    final: bool = True
    part: int | None = None


# --------------------------------------------------------------------- instructions
@dataclass(frozen=True, slots=True)
class MoveIndex(Instruction):
    """Worker index ``index`` is now computed by ``to`` (was ``previous``).

    The runtime puts the index's partitions there: from copies live workers hold (with
    ``how="fetch"``, the retiring ``previous`` included; with ``"reload"`` any but
    ``previous``), from the helper's data when ``to`` helped this index
    (``from_helper``), else reloaded from the source. A :class:`Resend` follows.
    ``kind`` is ``lost``, ``retired``, ``frozen``, ``stale`` or ``adopted``; ``why``
    says what happened to ``previous``.
    """

    index: int
    to: str
    previous: str
    kind: str
    why: str
    how: str
    from_helper: bool = False


@dataclass(frozen=True, slots=True)
class Resend(Instruction):
    """Cancel ``cancel`` (the index's tasks in flight) and send each unit of ``units``
    again, each with the messages to send (None: the whole unit)."""

    index: int
    units: tuple[tuple[WorkUnit, frozenset[int] | None], ...]
    cancel: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Cancel(Instruction):
    """Cancel these tasks (a backup's twin that lost the race)."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SendBackup(Instruction):
    """Send task ``key``'s unit again, to worker index ``to_index``'s worker; report it
    with :class:`~daskstraggle.engine.events.BackupSent`."""

    key: str
    unit: WorkUnit
    to_index: int


@dataclass(frozen=True, slots=True)
class StartHelping(Instruction):
    """``worker`` helps worker index ``index``: load the index's partitions there and
    report :class:`~daskstraggle.engine.events.HelperReady` once they are; from then on
    the index's units are split between the two (:class:`SplitUnit`)."""

    worker: str
    index: int


@dataclass(frozen=True, slots=True)
class StopHelping(Instruction):
    """``worker`` stops helping worker index ``index`` (``why``): drop its copy of the
    index's data (unless ``keep``: it takes the index over)."""

    index: int
    worker: str
    why: str
    keep: bool = False


@dataclass(frozen=True, slots=True)
class AwaitWorkers(Instruction):
    """No live worker is left: wait (bounded) for one to join, then report the statuses
    again; an empty cluster after the wait ends the run."""


@dataclass(frozen=True, slots=True)
class GiveUp(Instruction):
    """Worker index ``index`` lost its worker ``allowed_losses`` times in this run (the
    ``workers`` that left, in order): end the run with one line saying why (the runtime
    knows their memory limits and the index's share)."""

    index: int
    workers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SplitUnit(Instruction):
    """Send ``unit`` as two tasks: ``own`` on its index's worker, ``helper_part`` on
    ``helper``; ``fraction`` is the share of its rows ``own`` holds. Report both with
    :class:`~daskstraggle.engine.events.SplitSent`; the pool adds the two results, first part first.

    The logged copy (:attr:`WorkerPool.log`) keeps the unit without its iterate.
    """

    unit: WorkUnit
    own: UnitPart
    helper_part: UnitPart
    helper: str
    fraction: float

    @property
    def index(self) -> int:
        """The worker index whose unit is split."""
        return self.unit.worker_index


@dataclass(frozen=True, slots=True)
class Deliver(Instruction):
    """Give the method the result of ``task``: ``outcome``, a ``(result, seconds)`` pair
    (for a split unit the sum of both parts, its seconds the slower part's)."""

    task: Task
    outcome: Any


@dataclass(frozen=True, slots=True)
class BackupFold(Instruction):
    """Compute fold ``fold`` of the exact pass again on worker index ``to_index``'s
    worker (from its own copies of the partitions, or ones loaded from the source); the
    first of the two to finish counts."""

    fold: int
    to_index: int


@dataclass(frozen=True, slots=True)
class CheckStatus(Instruction):
    """Look at the cluster's workers and their statuses; report them with
    :class:`~daskstraggle.engine.events.StatusChanged`."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One logged decision: at ``time``, in round ``version``, ``instruction``."""

    time: float
    version: int
    instruction: Any


def summary(value: Any) -> Any:
    """A comparable summary of instructions, for replay checks: each by its type and its
    fields but the stimulus id, a work unit by its worker index and version, a task by its
    key, worker and index, an array by its type.

    Examples
    --------
    >>> summary([Cancel(("k1",), stimulus_id="finished-k0")])
    [('Cancel', ('k1',))]
    """
    if isinstance(value, list | tuple):
        return type(value)(summary(v) for v in value)
    if isinstance(value, WorkUnit):
        return ("WorkUnit", value.worker_index, value.version)
    if isinstance(value, Task):
        return ("Task", value.key, value.worker, value.unit.worker_index)
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, *[summary(getattr(value, f.name))
                                        for f in dataclasses.fields(value)
                                        if f.name != "stimulus_id"])
    if value is None or isinstance(value, str | int | float | bool | frozenset):
        return value
    return type(value).__name__


@dataclass
class _Pass:
    """An exact pass in flight: its folds, when it started, the folds done and backed up,
    and how long half of them took."""

    folds: tuple[tuple[int, tuple[int, ...]], ...]
    start: float
    done: set[int]
    backed_up: set[int]
    half: float | None = None

    def bound(self) -> float:
        assert self.half is not None
        return fold_backup_bound(self.half)

    def waiting(self) -> list[int]:
        """The folds neither done nor backed up."""
        return [n for n in range(len(self.folds)) if n not in self.done | self.backed_up]


@dataclass
class _Helping:
    """What a helper did for an index (a ``worker_joins`` entry of the result)."""

    record: dict[str, Any]
    fraction: float = 0.5
    ready: bool = False


class WorkerPool:
    """Which worker computes each worker index, and every decision about slow, lost,
    retiring and joining workers.

    Parameters
    ----------
    workers : sequence of str
        The worker of each worker index at the start.
    placement : sequence of tuple of int
        The partitions of each worker index.
    partition_rows : sequence of int
        Rows of each partition (for split units).
    bounds : SlowBounds, optional
        When unanswered work means a frozen or stale worker.
    backup_after : float or None, default=None
        Send a backup of a whole unit unanswered after this many times the median
        latency (None: no backups).
    log_size : int, default=10_000
        Decisions kept in :attr:`log`: this many moves, backups and helpers' starts and
        stops, and this many units split.
    allowed_losses : int or None, default=None
        End the run (:class:`GiveUp`) when a worker index loses its worker this many
        times (None: never; the Dask runtime reads ``daskstraggle.allowed-losses``).
    watch : bool, default=True
        Look for frozen and stale work (a :class:`~daskstraggle.engine.events.Tick` when
        rounds passed or the oldest task may be overdue); False: backups only.
    membership_interval : float, default=inf
        Ask for the cluster's statuses (:class:`CheckStatus`) this many seconds after the
        last ones came (inf: the runtime reports every change itself).

    Examples
    --------
    >>> pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[5, 5])
    >>> out = pool.handle_stimulus(StatusChanged(status={"a": "running", "c": "running"},
    ...                                          time=1.0, stimulus_id="status-1"))
    >>> [type(i).__name__ for i in out], out[0].index, out[0].to  # (nothing to resend)
    (['MoveIndex'], 1, 'c')
    >>> pool.history(1)[0].instruction.kind
    'lost'
    """

    def __init__(self, workers: Sequence[str], *, placement: Sequence[tuple[int, ...]],
                 partition_rows: Sequence[int], bounds: SlowBounds | None = None,
                 backup_after: float | None = None, log_size: int = 10_000,
                 allowed_losses: int | None = None, watch: bool = True,
                 membership_interval: float = math.inf) -> None:
        self._start = (list(workers), [tuple(p) for p in placement], list(partition_rows))
        self.watch, self.membership_interval = watch, membership_interval
        # (whether any wake-up time but an exact pass's can be finite)
        self._timed = watch or backup_after is not None or membership_interval < math.inf
        self.workers = list(workers)
        self.placement = [tuple(p) for p in placement]
        self.partition_rows = list(partition_rows)
        self.bounds = bounds or SlowBounds()
        self.backup_after = backup_after
        self.allowed_losses = allowed_losses
        #: The workers each worker index lost (left the cluster), in order.
        self.losses: dict[int, list[str]] = {}
        #: Restarts of workers that ran out of memory: used only when no other is live.
        self.tight: set[str] = set()
        self._arrived: dict[int, int] = {}  # when each index moved to its worker
        self.tasks: dict[str, Task] = {}
        self.shunned: set[str] = set()  # found frozen or stale: no more work this run
        self.retiring: set[str] = set()
        self.helpers: dict[int, str] = {}
        self.joins: list[dict[str, Any]] = []
        self.n_backups = 0
        # decisions numbered in order; splits apart (one per unit a helper shares), so a
        # long run's splits do not push its moves out of the bounded log
        self._order = itertools.count()
        self._log: deque[tuple[int, Decision]] = deque(maxlen=log_size)
        self._split_log: deque[tuple[int, Decision]] = deque(maxlen=log_size)
        self._helping: dict[int, _Helping] = {}
        self._twins: dict[str, str] = {}
        self._halves: dict[str, tuple[str, int, int]] = {}  # key: (partner, part, index)
        self._half_done: dict[str, Any] = {}
        self._recent: deque[float] = deque(maxlen=200)  # latencies of recent units
        self._bounds_now: tuple[float, float | None] | None = None  # (_latency_bounds)
        self._ages: deque[int] = deque(maxlen=200)  # rounds recent units were in flight
        self._index_latency: defaultdict[int, deque[float]] = defaultdict(
            functools.partial(deque, maxlen=5))
        self._versions: list[tuple[float, int]] = []  # (time, version) newer ones sent
        self._backup_to: dict[str, int] = {}  # the worker index of each backup asked for
        self._outrun: dict[int, str] = {}  # index -> the worker whose backup outran it
        self._held_back: list[Resend] = []  # resends waiting for a worker to join
        self._newest = 0
        self._now = 0.0
        self._sid = ""  # the event being handled
        self._woken = math.inf  # the last WakeAt's time
        self._checked_version = 0  # the newest version at the last Tick
        self._stuck = False  # overdue work had nowhere to go: wait for the next status
        #: When the statuses are to be looked at next (inf: the runtime reports changes).
        self.next_status = membership_interval
        self._pass: _Pass | None = None  # the exact pass in flight

    # ------------------------------------------------------------------ stimuli
    def handle_stimulus(self, *events: Event) -> list[Instruction]:
        """Take in what the runtime observed of its workers, in order; return what it must
        do: for each event its instructions (each carrying the event's ``stimulus_id``),
        then a :class:`~daskstraggle.engine.events.WakeAt` when the time to be woken at
        changed.

        Raises
        ------
        TypeError
            If an event is not one the pool takes.

        Examples
        --------
        >>> unit = WorkUnit(0, (0,), np.zeros(2), version=1)
        >>> pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[5, 5])
        >>> out = pool.handle_stimulus(
        ...     TaskSent(key="k0", unit=unit, time=0.0, stimulus_id="submit-1"),
        ...     StatusChanged(status={"b": "running"}, time=1.0, stimulus_id="loss-2"))
        >>> [(type(i).__name__, i.stimulus_id) for i in out]  # doctest: +NORMALIZE_WHITESPACE
        [('WakeAt', 'submit-1'), ('MoveIndex', 'loss-2'), ('Resend', 'loss-2'),
         ('WakeAt', 'loss-2')]
        >>> out[0].time, out[-1].time  # a Tick at once: a round began, and no Tick since
        (0.0, 1.0)
        """
        out: list[Instruction] = []
        for event in events:
            self._now, self._sid = event.time, event.stimulus_id
            got = _dispatch(type(event))(self, event)
            wake = self._wake() if self._timed or self._pass is not None else math.inf
            if wake != self._woken:
                self._woken = wake
                got.append(WakeAt(wake, stimulus_id=self._sid))
            out += got
        return out

    @functools.singledispatchmethod
    def _handle(self, event: Event) -> list[Instruction]:
        raise TypeError(f"The worker pool takes no {type(event).__name__} event.")

    @_handle.register
    def _(self, event: Sending) -> list[Instruction]:
        """Split the unit with its index's ready helper (:class:`SplitUnit`, logged with the
        share of rows its own worker keeps), or nothing: send it whole (no ready helper, a
        streamed unit, or too few rows)."""
        unit = event.unit
        helping = self._helping.get(unit.worker_index)
        if helping is None or not helping.ready or unit.stream:
            return []
        rows = [self.partition_rows[p] for p in unit.partitions]
        parts = split_unit(rows, rows=unit.rows, coefficients=unit.coefficients,
                           fraction=helping.fraction)
        if parts is None:
            return []
        split = SplitUnit(unit, parts[0], parts[1], self.helpers[unit.worker_index],
                          helping.fraction, stimulus_id=self._sid)
        # (the log keeps decisions, not iterates: its copy of the unit has an empty one)
        logged = replace(split, unit=replace(unit, iterate=_NO_ITERATE))
        self._split_log.append((next(self._order), Decision(self._now, unit.version, logged)))
        return [split]

    @_handle.register
    def _(self, event: TaskSent) -> list[Instruction]:
        self._advance(event.unit.version)
        self.tasks[event.key] = Task(event.key, event.unit,
                                     self.workers[event.unit.worker_index], event.time,
                                     event.message, event.final)
        return []

    @_handle.register
    def _(self, event: SplitSent) -> list[Instruction]:
        index, keys = event.unit.worker_index, event.keys
        self._advance(event.unit.version)
        for part, (key, worker) in enumerate(zip(keys, (self.workers[index],
                                                        self.helpers[index]), strict=True)):
            self.tasks[key] = Task(key, event.unit, worker, event.time, part=part)
            self._halves[key] = (keys[1 - part], part, index)
        self._helping[index].record["split_units"] += 1
        return []

    @_handle.register
    def _(self, event: BackupSent) -> list[Instruction]:
        original = self.tasks[event.key]
        to = self._backup_to.pop(event.key)
        self.tasks[event.backup_key] = Task(event.backup_key, original.unit, self.workers[to],
                                            original.sent)
        self._twins[event.key], self._twins[event.backup_key] = event.backup_key, event.key
        self.n_backups += 1
        return []

    def _advance(self, version: int) -> None:
        """A unit at iterate ``version`` is sent: keep when each version was first sent."""
        if version > self._newest:
            self._newest = version
            self._versions.append((self._now, version))
            if len(self._versions) > 20_000:  # bounded: ages beyond that are beyond any bound
                del self._versions[:10_000]

    def age(self, sent: float) -> int:
        """Rounds (iterate versions) the run went on since a unit was sent at ``sent``."""
        at = bisect.bisect_right(self._versions, (sent, math.inf))
        return self._newest - (self._versions[at - 1][1] if at else 0)

    # ------------------------------------------------------------------ arrivals
    @_handle.register
    def _(self, event: TaskFinished) -> list[Instruction]:
        """A :class:`Cancel` of a backup's twin that lost the race, then :class:`Deliver`
        unless the task is no longer wanted (abandoned, cancelled, sent again) or is the
        first part of a split unit to come back."""
        task = self.tasks.pop(event.key, None)
        if task is None:
            return []
        out: list[Instruction] = []
        twin = self._twins.pop(event.key, None)
        if twin is not None and twin != event.key:
            self._twins.pop(twin, None)
            if self.tasks.pop(twin, None) is not None:
                out.append(Cancel((twin,), stimulus_id=self._sid))
            if task.worker != self.workers[task.unit.worker_index]:  # the backup won
                self._outrun[task.unit.worker_index] = task.worker
        outcome = self._join_half(event.key, event.outcome)
        if outcome is not None:
            latency = event.time - task.sent
            self._recent.append(latency)
            self._bounds_now = None
            self._ages.append(self.age(task.sent))
            self._index_latency[task.unit.worker_index].append(latency)
            out.append(Deliver(task, outcome, stimulus_id=self._sid))
        return out

    def _join_half(self, key: str, outcome: Any) -> Any:
        if key not in self._halves:
            return outcome
        partner, part, index = self._halves.pop(key)
        if partner not in self._half_done:
            self._half_done[key] = outcome
            return None
        other = self._half_done.pop(partner)
        (first, own), (second, helper) = (outcome, other) if part == 0 else (other, outcome)
        helping = self._helping.get(index)
        if helping is not None:  # (its helper may have stopped meanwhile)
            helping.fraction = next_fraction(helping.fraction, own, helper)
            helping.record["own_share"] = round(helping.fraction, 3)
        if isinstance(first, tuple):  # coded messages
            return tuple(a + b for a, b in zip(first, second, strict=True)), max(own, helper)
        return first + second, max(own, helper)

    @_handle.register
    def _(self, event: TasksDropped) -> list[Instruction]:
        if event.keys is None:  # the run ended
            for table in (self.tasks, self._twins, self._halves, self._half_done):
                table.clear()
        for key in event.keys or ():
            self._drop_task(key)
        return []

    def _drop_task(self, key: str) -> Task | None:
        twin = self._twins.pop(key, None)
        if twin is not None and twin != key:  # the other may be backed up again
            self._twins.pop(twin, None)
        entry = self._halves.pop(key, None)
        self._half_done.pop(key, None)
        if entry is not None:  # the other part may have arrived already
            self._half_done.pop(entry[0], None)
        return self.tasks.pop(key, None)

    # ------------------------------------------------------------------ membership
    def vanished(self, status: Mapping[str, str]) -> list[str]:
        """Workers of indices that are gone from ``status`` and not known to retire (the
        runtime may find in the scheduler's log that they retired first)."""
        return sorted({w for w in self.workers if w not in status} - self.retiring)

    def usable(self, status: Mapping[str, str]) -> bool:
        """Whether ``status`` names a worker that may take work (not going, not found
        frozen, not retiring)."""
        return any(s not in GOING and a not in self.shunned
                   and (s == "running" or a not in self.retiring) for a, s in status.items())

    @_handle.register
    def _(self, event: StatusChanged) -> list[Instruction]:
        """Move the indices of workers that left or retire, stop helpers that went, give
        newcomers work. The work to send again comes last (:meth:`_ordered`); a
        :class:`GiveUp` comes alone."""
        self._stuck = False
        self.next_status = event.time + self.membership_interval
        return self._ordered(self._on_status(event.status, event.retiring, event.tight))

    def _on_status(self, status: Mapping[str, str], retiring: Iterable[str],
                   tight: Iterable[str]) -> list[Instruction]:
        self.tight |= set(tight)
        self.retiring |= set(retiring)
        # (a retirement the scheduler aborted, for want of workers to take the data, is over)
        self.retiring |= {a for a, s in status.items() if s == RETIRING}
        self.retiring -= {a for a, s in status.items() if s == "running"}
        live = sorted({a for a, s in status.items() if s not in GOING} - self.shunned
                      - self.retiring)
        out = self._stop_departed_helpers(status, live)
        if not live:
            out.append(self._decide(AwaitWorkers(stimulus_id=self._sid)))
            return out
        moves = replacement_targets(self.workers, live, avoid=self.tight)
        if not moves:
            for i, target in adoption_moves(self.workers, live, avoid=self.tight,
                                            arrived=self._arrived).items():
                out += self._move(i, target, f"also computed for another index and {target} "
                                  "joined", "adopted")
            out += self._adopt_newcomers(live)
            return out
        give_up = self._count_losses(moves)
        if give_up is not None:
            return [give_up]
        for i, target in moves.items():
            lost = self.workers[i]
            why, kind = (("is retiring (closing gracefully)", "retired")
                         if lost in self.retiring else ("was found frozen", "frozen")
                         if lost in self.shunned else ("left the cluster", "lost"))
            out += self._move(i, target, why, kind)
        return out

    def _stop_departed_helpers(self, status: Mapping[str, str],
                               live: list[str]) -> list[Instruction]:
        """Helpers no longer live stop helping (gone, retiring or frozen)."""
        out: list[Instruction] = []
        for i, helper in list(self.helpers.items()):
            if helper not in live:
                out += self._stop_helping(i, why="left the cluster" if helper not in status
                                          else "is retiring" if helper in self.retiring
                                          else "is frozen")
        return out

    def _count_losses(self, moves: Mapping[int, str]) -> GiveUp | None:
        """Count the indices of ``moves`` whose worker left (not retiring, not found
        frozen); the first to reach ``allowed_losses`` ends the run."""
        for i in moves:
            lost = self.workers[i]
            if lost not in self.retiring and lost not in self.shunned:
                self.losses.setdefault(i, []).append(lost)
        for i in moves:
            if self.allowed_losses is not None and \
                    len(self.losses.get(i, ())) >= self.allowed_losses:
                return self._decide(GiveUp(i, tuple(self.losses[i]), stimulus_id=self._sid))
        return None

    def _move(self, index: int, target: str, why: str, kind: str) -> list[Instruction]:
        previous, self.workers[index] = self.workers[index], target
        self._arrived[index] = next(self._order)
        out: list[Instruction] = []
        helped = next((i for i, a in self.helpers.items() if a == target), None)
        if helped is not None:  # target stops helping; keeps the data of this index
            out += self._stop_helping(helped, why=f"takes over worker index {index}",
                                      resend=helped != index, keep=helped == index)
        out.append(self._decide(MoveIndex(index, target, previous, kind, why,
                                          "fetch" if kind == "retired" else "reload",
                                          from_helper=helped == index,
                                          stimulus_id=self._sid)))
        out.append(self._resend(index))
        return out

    def _resend(self, index: int) -> Resend:
        """Take the index's tasks in flight (backups and split parts included) to send
        their units again."""
        keys = [k for k, t in self.tasks.items() if t.unit.worker_index == index]
        units: dict[int, tuple[WorkUnit, set[int | None]]] = {}
        for key in keys:
            task = self._drop_task(key)
            assert task is not None
            units.setdefault(id(task.unit), (task.unit, set()))[1].add(task.message)
        return Resend(index, tuple(
            (unit, None if None in messages else frozenset(int(j) for j in messages
                                                           if j is not None))
            for unit, messages in units.values()), tuple(keys), stimulus_id=self._sid)

    def _adopt_newcomers(self, live: list[str]) -> list[Instruction]:
        """Make every live worker that neither holds nor helps an index the helper of the
        slowest index without one."""
        newcomers = set(live) - set(self.workers) - set(self.helpers.values()) - self.tight
        if not newcomers:
            return []
        latency = {i: statistics.median(v) for i, v in self._index_latency.items() if v}
        out: list[Instruction] = []
        for worker, index in helper_targets(self.workers, newcomers, self.helpers,
                                            latency).items():
            self.helpers[index] = worker
            record = {"worker": worker, "helps": index,
                      "partitions": sorted(self.placement[index]),
                      "latency_s": latency.get(index), "split_units": 0, "own_share": 0.5}
            self._helping[index] = _Helping(record)
            self.joins.append(record)
            out.append(self._decide(StartHelping(worker, index, stimulus_id=self._sid)))
        return out

    @_handle.register
    def _(self, event: HelperReady) -> list[Instruction]:
        """Split the index's next units with its helper."""
        if event.index in self._helping:
            self._helping[event.index].ready = True
        return []

    def _stop_helping(self, index: int, *, why: str, resend: bool = True,
                      keep: bool = False) -> list[Instruction]:
        worker = self.helpers.pop(index, None)
        if worker is None:
            return []
        self._helping.pop(index).record["ended"] = why
        out: list[Instruction] = [
            self._decide(StopHelping(index, worker, why, keep, stimulus_id=self._sid))]
        if resend:
            out.append(self._resend(index))
        return out

    # ------------------------------------------------------------------ slow work
    @_handle.register
    def _(self, event: Tick) -> list[Instruction]:
        """Give overdue workers no more work and move their indices to the other ``live``
        workers (nothing when none is left: overdue work then waits for the next status);
        send backups of whole units overdue against the run's median latency; ask for the
        statuses when a membership check is due."""
        self._checked_version = self._newest
        out: list[Instruction] = []
        if self.watch:
            late = self._overdue(event.time, event.unloaded)
            out = self._ordered(self._shun(late, event.live)) if late else []
            self._stuck = bool(late) and not out
        out += self._backups(event.time) + self._fold_backups(event.time)
        if event.time >= self.next_status:
            self.next_status = event.time + self.membership_interval  # (asked again then)
            out.append(CheckStatus(stimulus_id=self._sid))
        return out

    def _overdue(self, now: float, unloaded: Collection[str]) -> dict[str, tuple[str, str]]:
        """Workers whose work is overdue, each with why and the kind (frozen, stale).

        Frozen: a task unanswered for :func:`frozen_bound` seconds. Stale: a task sent
        :func:`stale_bound` rounds ago, in flight for ``bounds.stale_wait`` seconds and its
        data loaded (``unloaded``: keys of tasks still waiting for their data).
        """
        b = self.bounds
        seconds = self._latency_bounds()[0]
        rounds = stale_bound(b.stale_after, self._ages, minimum=b.stale_minimum_rounds,
                             factor=b.stale_factor)
        waited: dict[str, tuple[float, int]] = {}
        for key, task in self.tasks.items():
            old = waited.get(task.worker, (0.0, 0))
            age = self.age(task.sent) if now - task.sent > b.stale_wait and \
                key not in unloaded else 0
            waited[task.worker] = (max(old[0], now - task.sent), max(old[1], age))
        return {w: (f"has not answered for {s:.0f} s (frozen?)", "frozen") if s > seconds
                else (f"has not answered for {age} rounds (stale)", "stale")
                for w, (s, age) in waited.items() if s > seconds or age > rounds}

    def _latency_bounds(self) -> tuple[float, float | None]:
        """The frozen bound (seconds) and the units' backup bound (None: no backups, or too
        few latencies to judge), from the recent units' latencies: computed again only when
        one came in (the pool's wake-up time asks for them after every event)."""
        if self._bounds_now is None:
            b = self.bounds
            frozen = frozen_bound(b.frozen_after, self._recent, minimum=b.frozen_minimum,
                                  factor=b.frozen_factor)
            enough = min(_MIN_SAMPLES, max(1, len(self.workers) - 1))
            backup = None if self.backup_after is None or len(self._recent) < enough \
                else max(0.0, self.backup_after * statistics.median(self._recent))
            self._bounds_now = (frozen, backup)
        return self._bounds_now

    def _wake(self) -> float:
        """When the runtime must send the next :class:`Tick` (inf: no need): at once when
        rounds passed since the last (stale work?); when the oldest task becomes overdue
        in seconds (the first sent of those in flight; a backup, which keeps its
        original's send time, may be older: it is then found at this later time); when
        one becomes due for a backup; when the statuses are to be looked at again."""
        wake = min(self._next_backup_time(), self.next_status, self._next_fold_backup_time())
        if not self.watch:
            return wake
        if self._newest > self._checked_version:
            return self._now
        if self._stuck or not self.tasks:
            return wake
        oldest = next(iter(self.tasks.values())).sent
        return min(wake, _just_after(oldest + self._latency_bounds()[0]))

    def _ordered(self, out: list[Instruction]) -> list[Instruction]:
        """Put every :class:`Resend` after the moves, helper starts and stops of the same
        decision, one per index: a unit sent again must go where its index's data now is,
        never to the worker it left (a helper that stops and an index that moves in one
        decision resend the same index). While no worker is left (:class:`AwaitWorkers`)
        the resends wait for the next decision; after a :class:`GiveUp` none is sent."""
        resends = [i for i in out if isinstance(i, Resend)]
        rest: list[Instruction] = [i for i in out if not isinstance(i, Resend)]
        if rest and isinstance(rest[-1], AwaitWorkers | GiveUp):
            self._held_back += resends
            return rest
        merged: dict[int, Resend] = {}
        for r in [*self._held_back, *resends]:
            m = merged.get(r.index)
            merged[r.index] = r if m is None else Resend(
                r.index, m.units + r.units, m.cancel + r.cancel, stimulus_id=self._sid)
        self._held_back = []
        return rest + [r for r in merged.values() if r.units or r.cancel]

    def _shun(self, late: Mapping[str, tuple[str, str]], live: Iterable[str]
              ) -> list[Instruction]:
        """Give the overdue workers ``late`` no more work; move their indices to the other
        ``live`` workers (nothing when none is left)."""
        live = sorted(set(live) - set(late) - self.shunned - self.retiring)
        if not late or not live:
            return []
        self.shunned |= set(late)
        out: list[Instruction] = []
        for i, helper in list(self.helpers.items()):
            if helper in late:
                out += self._stop_helping(i, why=late[helper][0])
        for i, target in replacement_targets(self.workers, live, avoid=self.tight).items():
            why, kind = late.get(self.workers[i], ("was found frozen", "frozen"))
            out += self._move(i, target, why, kind)
        return out

    # ------------------------------------------------------------------ exact passes
    @_handle.register
    def _(self, event: PassStarted) -> list[Instruction]:
        """Back up at once the folds of the indices a backup outran this run (their
        worker is slow: the pass would wait the backup bound for it)."""
        self._pass = _Pass(event.folds, event.time, set(), set())
        return self._backup_folds([n for n, (index, _) in enumerate(event.folds)
                                   if index in self._outrun])

    @_handle.register
    def _(self, event: FoldDone) -> list[Instruction]:
        p = self._pass
        assert p is not None, "no exact pass is in flight"
        p.done.add(event.fold)
        if p.half is None and 2 * len(p.done) >= len(p.folds):
            p.half = event.time - p.start
        return self._fold_backups(event.time)

    @_handle.register
    def _(self, event: PassEnded) -> list[Instruction]:
        self._pass = None
        return []

    def _fold_backups(self, now: float) -> list[Instruction]:
        """Backups of the pass's folds overdue once half of them are done."""
        p = self._pass
        if p is None or p.half is None or now - p.start <= p.bound():
            return []
        return self._backup_folds(p.waiting())

    def _backup_folds(self, folds: list[int]) -> list[Instruction]:
        """A :class:`BackupFold` of each of the pass's ``folds``: to the worker whose
        backup outran its index's unit this run, if it may still take work, else to
        :meth:`_backup_target`'s."""
        p = self._pass
        assert p is not None
        out: list[Instruction] = []
        for n in folds:
            p.backed_up.add(n)
            index, partitions = p.folds[n]
            faster = self._outrun.get(index)
            to = (self.workers.index(faster) if faster in self.workers
                  and faster not in self.shunned and faster != self.workers[index]
                  else self._backup_target(index, partitions))
            if to is not None:
                out.append(self._decide(BackupFold(n, to, stimulus_id=self._sid)))
        return out

    def _next_fold_backup_time(self) -> float:
        p = self._pass
        if p is None or p.half is None or not p.waiting():
            return math.inf
        return _just_after(p.start + p.bound())

    # ------------------------------------------------------------------ backups
    def _backups(self, now: float) -> list[Instruction]:
        """Backups of every whole unit overdue against the run's median latency."""
        bound = self._latency_bounds()[1]
        if bound is None:
            return []
        due = [self._backup(k, t) for k, t in self._unbacked() if now - t.sent > bound]
        return [backup for backup in due if backup is not None]

    def _next_backup_time(self) -> float:
        """The earliest time a task in flight becomes due for a backup (inf: never)."""
        bound = self._latency_bounds()[1]
        if bound is None:
            return math.inf
        due = next(self._unbacked(), None)
        return math.inf if due is None else _just_after(due[1].sent + bound)

    def _unbacked(self) -> Iterator[tuple[str, Task]]:
        """The whole units in flight not backed up (nor refused one), in the order sent."""
        return ((k, t) for k, t in self.tasks.items() if t.message is None
                and k not in self._twins and k not in self._halves)

    def _backup(self, key: str, task: Task) -> SendBackup | None:
        j = self._backup_target(task.unit.worker_index, task.unit.partitions)
        if j is None:
            self._twins[key] = key  # nowhere to send it: never try again
            return None
        self._backup_to[key] = j
        return self._decide(SendBackup(key, task.unit, j, stimulus_id=self._sid))

    def _backup_target(self, index: int, partitions: Sequence[int]) -> int | None:
        """The worker index to compute work of ``index`` again: another worker, not found
        slow, holding the most of ``partitions``, then the least busy (None: none)."""
        own = self.workers[index]
        others = [j for j in range(len(self.workers)) if self.workers[j] != own
                  and self.workers[j] not in self.shunned]
        if not others:
            return None
        busy = {w: 0 for w in self.workers}
        for t in self.tasks.values():
            busy[t.worker] = busy.get(t.worker, 0) + 1
        return min(others, key=lambda o: (-sum(p in self.placement[o] for p in partitions),
                                          busy[self.workers[o]], o))

    # ------------------------------------------------------------------ the log
    def _decide(self, instruction: Any) -> Any:
        self._log.append((next(self._order), Decision(self._now, self._newest, instruction)))
        return instruction

    @property
    def idle(self) -> bool:
        """Whether no work is in flight and none waits to be sent again: a wait for a
        result could then never end."""
        return not self.tasks and not self._held_back

    @property
    def log(self) -> list[Decision]:
        """Every logged decision, in the order taken: the moves, backups and helpers'
        starts and stops (the last ``log_size``), and the units split (the last
        ``log_size`` of those)."""
        return [d for _, d in heapq.merge(self._log, self._split_log, key=lambda e: e[0])]

    def fresh(self) -> WorkerPool:
        """A pool as this one was at its start (same workers, placement and settings)."""
        workers, placement, rows = self._start
        return WorkerPool(workers, placement=placement, partition_rows=rows,
                          bounds=self.bounds, backup_after=self.backup_after,
                          allowed_losses=self.allowed_losses, watch=self.watch,
                          membership_interval=self.membership_interval)

    def replay(self, stimuli: Iterable[tuple[Event, list[Instruction]]]
               ) -> list[tuple[str, Any, Any]]:
        """Feed another pool's recorded events to this (fresh) pool, up to the first whose
        instructions differ (the runs part there; later events no longer fit this pool).

        Returns
        -------
        differ : list of (str, object, object)
            Empty when every event gave the recorded instructions; else the first that
            did not: its stimulus id, the recorded instructions and this pool's, as
            :func:`summary` gives them.
        """
        for event, out in stimuli:
            again = self.handle_stimulus(event)
            if summary(again) != summary(out):
                return [(event.stimulus_id, summary(out), summary(again))]
        return []

    def history(self, index: int) -> list[Decision]:
        """Every logged decision about worker index ``index``: its moves (with the
        worker, the kind and why, the time and round), its helpers' starts and stops and
        its units split with a helper (with the share of rows its own worker kept).

        Examples
        --------
        >>> pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[5, 5])
        >>> _ = pool.handle_stimulus(StatusChanged(status={"b": "running"}, time=3.0,
        ...                                        stimulus_id="loss-1"))
        >>> [(d.time, d.instruction.to, d.instruction.why) for d in pool.history(0)]
        [(3.0, 'b', 'left the cluster')]
        """
        return [d for d in self.log if getattr(d.instruction, "index", None) == index]

    def validate_state(self) -> None:
        """Check the pool's invariants (the tests call it after every step).

        Raises
        ------
        AssertionError
            If an invariant does not hold.
        """
        assert set(self.helpers) == set(self._helping), (self.helpers, self._helping)
        assert not set(self.helpers.values()) & set(self.workers), self.helpers
        for key, (partner, part, index) in self._halves.items():
            assert key in self.tasks or key in self._half_done, key
            task = self.tasks.get(key, self.tasks.get(partner))
            assert task is None or task.unit.worker_index == index
            assert part in (0, 1)
        for key, twin in self._twins.items():
            assert twin == key or self._twins.get(twin) == key, (key, twin)
        assert self._newest >= 0 and len(self.workers) == len(self.placement)


#: The handler of each event type (as the coordinator's: no bound dispatcher per event).
_dispatch = vars(WorkerPool)["_handle"].dispatcher.dispatch
