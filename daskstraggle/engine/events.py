"""What the runtime tells the engine (events) and what the engine tells the runtime to do
(instructions): frozen values, in the style of distributed's ``worker_state_machine``.

Every event carries the time at which the runtime observed it (``time``, seconds of the
runtime's clock: real for the Dask and in-process runtimes, simulated for the simulated
one) and an optional ``stimulus_id`` naming its cause, so the engine never reads a clock
and a logged run replays through a fresh engine to the same instructions.

Each :meth:`~daskstraggle.engine.coordinator.Coordinator.handle` call returns a list of
instructions of which at most the last expects a reply (the next event): :class:`Await`
(reply :class:`Arrived` or :class:`Quiet`), :class:`CheckExact` (:class:`Checked`),
:class:`AfterStep` (:class:`Stepped`), :class:`Abandon` (:class:`Freed`) and
:class:`WriteCheckpoint` (:class:`Saved`: the state must be written before the engine
dispatches again). The others (:class:`Submit`, :class:`RecordRow`, :class:`RecordEvent`,
:class:`Finish`) are carried out with no reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from daskstraggle.methods.base import RoundSummary, WorkResult, WorkUnit
from daskstraggle.problems.base import KernelResult

__all__ = [
    "Abandon",
    "AfterStep",
    "Arrived",
    "Await",
    "Begin",
    "CheckExact",
    "Checked",
    "Event",
    "Finish",
    "Freed",
    "Instruction",
    "Quiet",
    "RecordEvent",
    "RecordRow",
    "Saved",
    "Stepped",
    "Submit",
    "WriteCheckpoint",
]


# ------------------------------------------------------------------------------ events
@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Something the runtime observed at ``time`` (seconds of its clock)."""

    time: float
    stimulus_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Begin(Event):
    """The run starts (or resumes): dispatch to every worker."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrived(Event):
    """A result arrived (reply to :class:`Await`)."""

    result: WorkResult


@dataclass(frozen=True, slots=True, kw_only=True)
class Quiet(Event):
    """No result arrived within the wait's timeout (reply to :class:`Await`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Checked(Event):
    """The exact kernel sum at the asked point (reply to :class:`CheckExact`)."""

    result: KernelResult


@dataclass(frozen=True, slots=True, kw_only=True)
class Stepped(Event):
    """The runtime's step hook ran (reply to :class:`AfterStep`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Freed(Event):
    """Abandoning stale messages freed these worker indices (reply to :class:`Abandon`)."""

    workers: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Saved(Event):
    """The checkpoint was written (reply to :class:`WriteCheckpoint`)."""


# ------------------------------------------------------------------------ instructions
@dataclass(frozen=True, slots=True)
class Instruction:
    """Something the engine asks the runtime to do."""

    #: Whether the runtime answers with an event (then it is the list's last instruction).
    replies: ClassVar[bool] = False


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
    """Compute the exact kernel sum over every partition at ``iterate``.
    Reply: :class:`Checked`."""

    iterate: np.ndarray
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
class Finish(Instruction):
    """The run is over: ``summary`` is the returned round, ``reason`` why it stopped."""

    summary: RoundSummary
    reason: str
