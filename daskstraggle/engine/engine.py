"""The engine: one entry point for every event of a run.

A run's state machine has two parts: the :class:`~daskstraggle.engine.coordinator.Coordinator`
(rounds: what to submit, when a round ends, the convergence verdict, the stop rule,
checkpoints) and the :class:`~daskstraggle.engine.pool.WorkerPool` (tasks and workers: which
worker computes each index, moves after a loss, backups, helpers, when to wake the runtime).
A runtime gives every event it observes to :meth:`Engine.handle_stimulus`, which hands it to
the part that owns its type, and carries out the instructions it returns; the log keeps the
events of both parts in the order they came, each with its instructions.

Pure module: no Dask, no I/O, no clock.
"""

from __future__ import annotations

from collections import deque

from daskstraggle.engine.coordinator import Coordinator, coordinator_events
from daskstraggle.engine.events import Event, Instruction
from daskstraggle.engine.pool import WorkerPool

__all__ = ["Engine"]


class Engine:
    """Take a run's events through one entry point; return what the runtime must do.

    Parameters
    ----------
    log_size : int, default=0
        Keep the last this many events, each with the instructions it gave, in
        :attr:`log` (0: none; the events hold the workers' results).

    Attributes
    ----------
    coordinator : Coordinator or None
        The rounds' part, set by the run's driver for each run.
    pool : WorkerPool or None
        The tasks' and workers' part, set when a runtime whose workers may come and go
        loads the data (None in process: there nothing leaves).
    log : deque of (Event, list of Instruction)
        The last ``log_size`` events of both parts, in order.

    Examples
    --------
    >>> from daskstraggle.engine.events import StatusChanged
    >>> engine = Engine(log_size=10)
    >>> engine.pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[5, 5])
    >>> out = engine.handle_stimulus(
    ...     StatusChanged(status={"b": "running"}, time=1.0, stimulus_id="loss-1"))
    >>> [type(i).__name__ for i in out], [e.stimulus_id for e, _ in engine.log]
    (['MoveIndex'], ['loss-1'])
    """

    def __init__(self, *, log_size: int = 0) -> None:
        self.coordinator: Coordinator | None = None
        self.pool: WorkerPool | None = None
        self.log: deque[tuple[Event, list[Instruction]]] = deque(maxlen=log_size)

    def handle_stimulus(self, *events: Event) -> list[Instruction]:
        """Give each event, in order, to the part that takes its type; return their
        instructions, in order (each carrying its event's ``stimulus_id``).

        Raises
        ------
        TypeError
            If the part that takes an event's type is not set (a pool event in process).
        StraggleError
            As the parts raise (e.g. the coordinator's stall or out-of-phase event).
        """
        out: list[Instruction] = []
        for event in events:
            part = self.coordinator if type(event) in coordinator_events else self.pool
            if part is None:
                raise TypeError(f"This run's engine has no part that takes "
                                f"{type(event).__name__}.")
            got = part.handle_stimulus(event)
            if self.log.maxlen:
                self.log.append((event, got))
            out += got
        return out

    def pool_log(self) -> list[tuple[Event, list[Instruction]]]:
        """The pool's events in :attr:`log`, with their instructions (what
        :meth:`WorkerPool.replay <daskstraggle.engine.pool.WorkerPool.replay>` takes)."""
        return [(e, out) for e, out in self.log if type(e) not in coordinator_events]
