"""What the runtime tells the engine (events) and what the engine tells the runtime to do
(instructions), in the style of distributed's ``worker_state_machine``.

Instructions are frozen; events are slotted records nothing changes once made (not frozen:
a frozen dataclass takes three times as long to make, and the runtimes make two per task).
Every event carries the time the runtime observed it, in its clock, and a ``stimulus_id``
naming it (``"arrived-17"``); every instruction carries the ``stimulus_id`` of the event
that caused it. Of a list of instructions at most the last expects a reply (``replies``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from daskstraggle.methods.base import Method, RoundSummary, WorkResult, WorkUnit
from daskstraggle.problems.base import KernelResult, Problem
from daskstraggle.problems.block import MatrixStats

__all__ = [
    "Abandon",
    "AfterStep",
    "Arrived",
    "Await",
    "BackupSent",
    "Begin",
    "CheckExact",
    "Checked",
    "Compute",
    "Computed",
    "EndRounds",
    "Event",
    "Finish",
    "FoldDone",
    "Freed",
    "HelperReady",
    "Instruction",
    "Load",
    "Loaded",
    "PassEnded",
    "PassStarted",
    "Quiet",
    "RecordEvent",
    "RecordRow",
    "Saved",
    "Sending",
    "SplitSent",
    "StartRounds",
    "StatusChanged",
    "Stepped",
    "Submit",
    "Summarise",
    "Summarised",
    "TaskFinished",
    "TaskSent",
    "TasksDropped",
    "Tick",
    "WakeAt",
    "WriteCheckpoint",
]


# ------------------------------------------------------------------------------ events
@dataclass(slots=True, kw_only=True)
class Event:
    """Something the runtime observed at ``time`` (seconds of its clock), named by
    ``stimulus_id``."""

    time: float
    stimulus_id: str


@dataclass(slots=True, kw_only=True)
class Loaded(Event):
    """The partitions are loaded; ``stats`` their totals (reply to :class:`Load`)."""

    stats: MatrixStats


@dataclass(slots=True, kw_only=True)
class Computed(Event):
    """What a :class:`Compute` returned."""

    value: Any


@dataclass(slots=True, kw_only=True)
class Begin(Event):
    """The rounds start (or resume): dispatch to every worker (reply to
    :class:`StartRounds`)."""


@dataclass(slots=True, kw_only=True)
class Arrived(Event):
    """A result arrived (reply to :class:`Await`)."""

    result: WorkResult


@dataclass(slots=True, kw_only=True)
class Quiet(Event):
    """No result arrived within the wait's timeout (reply to :class:`Await`)."""


@dataclass(slots=True, kw_only=True)
class Checked(Event):
    """The exact kernel sum at the asked point (reply to :class:`CheckExact`)."""

    result: KernelResult


@dataclass(slots=True, kw_only=True)
class Summarised(Event):
    """The round's summary, read by the runtime (reply to :class:`Summarise`)."""

    summary: RoundSummary


@dataclass(slots=True, kw_only=True)
class Stepped(Event):
    """The runtime's step hook ran (reply to :class:`AfterStep`)."""


@dataclass(slots=True, kw_only=True)
class Freed(Event):
    """Abandoning stale messages freed these worker indices (reply to :class:`Abandon`)."""

    workers: tuple[int, ...]


@dataclass(slots=True, kw_only=True)
class Saved(Event):
    """The checkpoint was written (reply to :class:`WriteCheckpoint`)."""


# ----------------------------------------------------------------- the workers' events
@dataclass(slots=True, kw_only=True)
class Sending(Event):
    """``unit`` is about to be sent: the pool answers how (a ``SplitUnit`` with a ready
    helper, or nothing: whole)."""

    unit: WorkUnit


@dataclass(slots=True, kw_only=True)
class TaskSent(Event):
    """Task ``key`` of ``unit`` (whole, or message ``message`` of a streamed one; ``final``:
    its worker index is idle after it) went to the index's worker."""

    key: str
    unit: WorkUnit
    message: int | None = None
    final: bool = True


@dataclass(slots=True, kw_only=True)
class SplitSent(Event):
    """``unit`` went out as two parts: ``keys[0]`` to its worker, ``keys[1]`` to its
    helper."""

    unit: WorkUnit
    keys: tuple[str, str]


@dataclass(slots=True, kw_only=True)
class BackupSent(Event):
    """The backup the pool asked for of task ``key`` went out as ``backup_key``."""

    key: str
    backup_key: str


@dataclass(slots=True, kw_only=True)
class TaskFinished(Event):
    """Task ``key`` finished with ``outcome`` (a ``(result, seconds)`` pair)."""

    key: str
    outcome: Any


@dataclass(slots=True, kw_only=True)
class TasksDropped(Event):
    """The runtime cancelled tasks ``keys`` (abandoned stale messages, tasks whose worker
    is gone), or every task in flight (``keys`` None: the run ended)."""

    keys: tuple[str, ...] | None


@dataclass(slots=True, kw_only=True)
class StatusChanged(Event):
    """The cluster's workers and their statuses; ``retiring``: workers known to retire
    from elsewhere, ``tight``: restarts of workers that ran out of memory in this run."""

    status: Mapping[str, str]
    retiring: frozenset[str] = frozenset()
    tight: frozenset[str] = frozenset()


@dataclass(slots=True, kw_only=True)
class HelperReady(Event):
    """The helper of worker index ``index`` holds the index's partitions."""

    index: int


@dataclass(slots=True, kw_only=True)
class PassStarted(Event):
    """An exact pass went out: one fold per worker index in ``folds``, each ``(worker
    index, partitions)``, every partition in one fold."""

    folds: tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(slots=True, kw_only=True)
class FoldDone(Event):
    """Fold ``fold`` (its position in :class:`PassStarted`) of the exact pass reached the
    runtime (its own result or its backup's)."""

    fold: int


@dataclass(slots=True, kw_only=True)
class PassEnded(Event):
    """The exact pass is over (done, or started again after a holder left)."""


@dataclass(slots=True, kw_only=True)
class Tick(Event):
    """The time the pool asked to be woken at (:class:`WakeAt`) came: ``live`` are the
    workers that may take work, ``unloaded`` the tasks still waiting for their data."""

    live: tuple[str, ...]
    unloaded: frozenset[str] = frozenset()


# ------------------------------------------------------------------------ instructions
@dataclass(frozen=True, slots=True)
class Instruction:
    """Something the engine asks the runtime to do, because of the event
    ``stimulus_id``."""

    stimulus_id: str = field(kw_only=True)
    #: Whether the runtime answers with an event (then it is the list's last instruction).
    replies: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class WakeAt(Instruction):
    """Send a :class:`Tick` at ``time`` (inf: no need): when work in flight becomes
    overdue or due for a backup (a unit, or a fold of an exact pass), at once when rounds
    passed, or, with a membership interval, when the cluster's statuses are to be looked at
    again. The latest :class:`WakeAt` replaces the earlier ones; the pool sends one
    whenever the time changes."""

    time: float


@dataclass(frozen=True, slots=True)
class Submit(Instruction):
    """Send ``unit`` to its worker."""

    unit: WorkUnit


@dataclass(frozen=True, slots=True)
class Await(Instruction):
    """Wait for the next result, at most ``timeout`` seconds (None: until one comes).
    Reply: :class:`Arrived` or :class:`Quiet`."""

    timeout: float | None
    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class CheckExact(Instruction):
    """Compute ``problem``'s exact kernel sum over every partition at ``iterate`` (an
    exact pass: at the start, to check a round, at the end). Reply: :class:`Checked`."""

    iterate: np.ndarray
    problem: Problem
    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Summarise(Instruction):
    """Take ``method``'s round summary: its results are sums held on the workers, which
    reading fetches, so the runtime reads it and the round ends when the reply comes.
    Reply: :class:`Summarised`."""

    method: Method
    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class AfterStep(Instruction):
    """The method stepped: run the runtime's step hook. Reply: :class:`Stepped`."""

    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Abandon(Instruction):
    """Drop undelivered messages of streamed units older than ``version``.
    Reply: :class:`Freed`."""

    version: int
    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class RecordRow(Instruction):
    """Add trace row number ``row`` with these ``fields`` (the keyword arguments of
    :meth:`daskstraggle.trace.TraceRecorder.add`)."""

    row: int
    fields: dict[str, Any]

    @property
    def objective(self) -> float | None:
        """The round's objective (None when the round could not evaluate it)."""
        value = self.fields.get("objective")
        return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class RecordEvent(Instruction):
    """Add a run event (e.g. a load-balancing move) to the trace."""

    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class WriteCheckpoint(Instruction):
    """Write ``state`` (see :meth:`~daskstraggle.engine.session.RunSession.state`) as the
    checkpoint taken after ``iteration`` rounds, now: it holds the live method.
    Reply: :class:`Saved`."""

    state: dict[str, Any]
    iteration: int
    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Load(Instruction):
    """Load every partition on the workers of ``placement``. Reply: :class:`Loaded`."""

    placement: list[tuple[int, ...]]
    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Compute(Instruction):
    """Return ``fn(map_reduce, *args)``, ``map_reduce(f, *a, combine=None)`` folding
    ``f(block, *a)`` over every partition once (an exact pass, the step size's power
    iteration, the reference solution). Reply: :class:`Computed`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class StartRounds(Instruction):
    """Prepare the runtime's loop for the rounds of ``session`` (a
    :class:`~daskstraggle.engine.session.RunSession`), whose units compute on ``work``
    with ``method``. Reply: :class:`Begin`."""

    session: Any
    method: Method
    work: Problem
    replies: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class EndRounds(Instruction):
    """The rounds are over: forget the work in flight and undo :class:`StartRounds`."""


@dataclass(frozen=True, slots=True)
class Finish(Instruction):
    """The run is over: ``summary`` is the returned round, ``reason`` why it stopped."""

    summary: RoundSummary
    reason: str
