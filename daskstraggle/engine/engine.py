"""The engine: one entry point for every event of a run (pure: no Dask, no I/O, no clock).

:meth:`Engine.handle_stimulus` hands each event to the part that owns its type (the
:class:`~daskstraggle.engine.coordinator.Coordinator`: rounds; the
:class:`~daskstraggle.engine.pool.WorkerPool`: tasks and workers) and keeps the one log of
both; :meth:`Engine.lifecycle` is a whole run as instructions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskstraggle.engine.convergence import ConvergenceMonitor
from daskstraggle.engine.coordinator import Coordinator, coordinator_events
from daskstraggle.engine.events import (
    CheckExact,
    Compute,
    EndRounds,
    Event,
    Finish,
    Instruction,
    Load,
    Loaded,
    StartRounds,
)
from daskstraggle.engine.pool import WorkerPool
from daskstraggle.engine.recorder import TraceRecorder
from daskstraggle.engine.session import RunSession, resumed_session
from daskstraggle.engine.stop import StopRule
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import Method
from daskstraggle.problems.base import Problem, Reference
from daskstraggle.problems.block import MatrixStats

__all__ = ["Concluded", "Engine"]


@dataclass(frozen=True, kw_only=True)
class Concluded:
    """What :meth:`Engine.lifecycle` ends with: the run's values, in the engine's terms.

    Attributes
    ----------
    method : Method
        The method as it ended (a resumed run's is the checkpoint's).
    session : RunSession
        The bound problem, monitor, reference and the trace's rows.
    reason : str
        Why the run stopped.
    iterate : ndarray
        The returned point, after the problem's conclusion (e.g. PCA's rotation).
    objective, optimality : float
        At ``iterate``, from the final exact pass.
    converged : bool
        The monitor's verdict.
    fitted : dict
        The problem's fitted values at ``iterate``.
    exact_objectives : ndarray or None
        With ``record_iterates``: the exact objective at every round's point.
    attrs : dict
        The run's attributes (method parameters, stop rule, convergence, reference,
        checkpoint; the step size is the session's).
    """

    method: Method
    session: RunSession
    reason: str
    iterate: np.ndarray
    objective: float
    optimality: float
    converged: bool
    fitted: dict[str, Any]
    exact_objectives: np.ndarray | None
    attrs: dict[str, Any] = field(default_factory=dict)


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

    def lifecycle(
        self, method: Method, problem: Problem, *, n_workers: int,
        placement: list[tuple[int, ...]], partition_rows: list[int],
        settings: dict[str, Any], stop: StopRule, step_size: float | None, reference: bool,
        rng: np.random.Generator, record_iterates: bool, resume: dict[str, Any] | None,
        checkpoint: Any, unit_load: Callable[[Any], float],
        balance_loop: Callable[[Method], Any],
    ) -> Generator[Instruction, Event | None, Concluded]:
        """A run, as instructions: :class:`Load`; a fresh run's :class:`Compute` of the step
        size and the reference and its exact pass at the start (:class:`CheckExact`), or a
        checkpoint's state; :class:`StartRounds`, the coordinator's rounds, :class:`EndRounds`;
        the final exact pass(es). Send each instruction's reply (None when it has none).

        ``checkpoint`` is the run's checkpoint writer (its ``schedule`` and ``describe()``
        are read) or None; ``balance_loop(method)`` the run's load-balancing loop for
        ``method`` or None (closed when the rounds end, also on an error). The other
        parameters are those of :func:`daskstraggle.runtime.lifecycle.run`.

        Raises
        ------
        InvalidParameterError
            If a resumed run is given another step size than its checkpoint's.
        StraggleError
            As the coordinator raises (a stalled method).
        """
        loaded = yield Load(placement, stimulus_id="start")
        assert isinstance(loaded, Loaded), loaded
        stats = loaded.stats
        if resume is None:
            session = yield from self._new_session(
                method, problem, stats, n_workers=n_workers, placement=placement,
                settings=settings, stop=stop, step_size=step_size, reference=reference,
                rng=rng, record_iterates=record_iterates, cause=loaded)
            method.start(session.problem, session.x0, placement, step_size=session.step_size,
                         partition_rows=list(partition_rows))
        else:
            method, session = resumed_session(resume, stats, record_iterates)
            if step_size is not None and step_size != session.step_size:
                raise InvalidParameterError(
                    f"The checkpoint's run used step_size={session.step_size:g}; resume "
                    f"without one (CLI: --step-size) or with the same, not {step_size:g}."
                )
            if not session.stepped:
                method.step()  # the checkpoint was taken at a stop, before this round's step
        session.checkpoint = checkpoint
        balancing = balance_loop(method)
        try:
            self.coordinator = Coordinator(
                method, session, stop=stop, n_workers=n_workers, unit_load=unit_load,
                balancing=balancing, checkpoint=None if checkpoint is None else checkpoint.schedule)
            finish = yield from self._rounds(method, session)
        finally:
            if balancing is not None:
                balancing.close()
        yield EndRounds(stimulus_id=finish.stimulus_id)
        return (yield from self._conclude(method, session, finish, stop))

    def _new_session(self, method: Method, problem: Problem, stats: MatrixStats, *,
                     n_workers: int, placement: list[tuple[int, ...]],
                     settings: dict[str, Any], stop: StopRule, step_size: float | None,
                     reference: bool, rng: np.random.Generator, record_iterates: bool,
                     cause: Any) -> Generator[Instruction, Any, RunSession]:
        """Bind the problem, pick the step size, start the monitor: a fresh run's state."""
        bound = problem.bind(stats)
        if step_size is None:
            got = yield Compute(bound.default_step_size, (rng,), stimulus_id=cause.stimulus_id)
            step_size, cause = got.value * method.step_factor(bound, n_workers), got
        ref: Reference | None = None
        if reference:
            cause = yield Compute(bound.reference_solution, stimulus_id=cause.stimulus_id)
            ref = cause.value
        x0 = bound.init_iterate(rng)
        start = None
        if method.start_pass:
            start = (yield CheckExact(x0, bound, stimulus_id=cause.stimulus_id)).result
        monitor = ConvergenceMonitor(
            bound, tol=stop.tol, start_result=start, start=x0, step_size=step_size,
            window=method.convergence_window(n_workers), max_iter=stop.max_iter)
        return RunSession(problem=bound, monitor=monitor, recorder=TraceRecorder(n_workers),
                          reference=ref, step_size=step_size, placement=placement,
                          settings=settings, stats=stats, x0=x0,
                          iterates=[] if record_iterates else None)

    def _rounds(self, method: Method, session: RunSession
                ) -> Generator[Instruction, Any, Finish]:
        """The coordinator's rounds: its instructions, each reply the next event."""
        event = yield StartRounds(session, method, method.work_problem(session.problem),
                                  stimulus_id="rounds")
        while True:
            assert event is not None, "the coordinator expected no reply"
            for instruction in self.handle_stimulus(event):
                if isinstance(instruction, Finish):
                    return instruction
                event = yield instruction

    def _conclude(self, method: Method, session: RunSession, finish: Finish, stop: StopRule
                  ) -> Generator[Instruction, Any, Concluded]:
        """The fitted quantities, from one exact pass at the returned point (outside the
        timed loop, whatever the method estimated during the run)."""
        bound, monitor, ref = session.problem, session.monitor, session.reference
        sid = finish.stimulus_id
        exact = None
        if session.iterates is not None:
            objectives = []
            for x in session.iterates:
                checked = yield CheckExact(x, bound, stimulus_id=sid)
                objectives.append(bound.objective(checked.result.values, x))
            exact = np.array(objectives)
        x = finish.summary.iterate
        total = monitor.checked_result(x)  # a run that stopped on an exact check: reuse it
        if total is None and method.final_pass:
            total = (yield CheckExact(x, bound, stimulus_id=sid)).result
        elif total is None:  # a run that only measures: the last round's estimate
            total = finish.summary.result
        x, total = bound.conclude(x, total)
        objective = bound.objective(total.values, x)
        optimality = monitor.final(x, total, objective)
        attrs: dict[str, Any] = {
            "method_params": method.get_params(),
            "stop": {"max_iter": stop.max_iter, "tol": stop.tol, "gap_tol": stop.gap_tol,
                     "time_budget": stop.time_budget},
            "convergence": monitor.describe(),
            "reference_info": {} if ref is None else ref.info,
        }
        if session.checkpoint is not None:
            attrs["checkpoint"] = session.checkpoint.describe()
        if session.resumed_at is not None:
            attrs["resumed_at_iteration"] = session.resumed_at
        return Concluded(
            method=method, session=session, reason=finish.reason, iterate=x,
            objective=float(objective), optimality=float(optimality),
            converged=monitor.converged(optimality, finish.reason),
            fitted=bound.finalize(x, total), exact_objectives=exact, attrs=attrs)
