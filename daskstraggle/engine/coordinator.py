"""The coordinator: the pure state machine that drives a method through its rounds.

The runtime feeds it events (:mod:`daskstraggle.engine.events`), each with the time it
observed them, and carries out the instructions it returns: dispatching to idle workers,
the collect window, stall detection, the convergence verdict and its exact checks, the
stop rule, the balancing cadence, abandoning stale messages and checkpoints are decided
here. :class:`Phase` says which events it expects next. Pure: no Dask, no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from daskstraggle.engine.checkpoint import CheckpointSchedule
from daskstraggle.engine.events import (
    Abandon,
    AfterStep,
    Arrived,
    Await,
    Begin,
    Checked,
    CheckExact,
    Event,
    Finish,
    Freed,
    Instruction,
    Quiet,
    RecordEvent,
    RecordRow,
    Saved,
    Stepped,
    Submit,
    Summarise,
    Summarised,
    WriteCheckpoint,
)
from daskstraggle.engine.session import RunSession, resumed_session
from daskstraggle.engine.stop import StopRule
from daskstraggle.errors import StraggleError
from daskstraggle.methods.base import Method, RoundSummary, WorkResult, WorkUnit
from daskstraggle.problems.held import HeldResult

__all__ = [
    "LOG_SIZE",
    "Coordinator",
    "Phase",
    "RunSession",
    "resumed_session",
]

#: A log size (events, each with its instructions) that records a whole test run
#: (:attr:`Runtime.stimulus_log <daskstraggle.runtime.base.Runtime.stimulus_log>`).
LOG_SIZE = 10_000


class Phase(enum.Enum):
    """Where the coordinator stands in a round, and so which events it accepts."""

    NEW = "new"  # before Begin
    WAIT = "wait"  # waiting for results until the method is ready (Arrived)
    COLLECT = "collect"  # ready: taking results until the collect window ends (Arrived, Quiet)
    CHECK = "check"  # an exact check pass is out (Checked)
    SUMMARISE = "summarise"  # the runtime reads a summary of held sums (Summarised)
    STEP = "step"  # the method stepped; the runtime's hook runs (Stepped)
    ABANDON = "abandon"  # stale streamed messages are dropped (Freed)
    SAVE = "save"  # a checkpoint is being written (Saved)
    DONE = "done"  # finished: no more events


#: The phases in which each event may come.
_PHASES: dict[type[Event], frozenset[Phase]] = {
    Begin: frozenset({Phase.NEW}),
    Arrived: frozenset({Phase.WAIT, Phase.COLLECT}),
    Quiet: frozenset({Phase.WAIT, Phase.COLLECT}),
    Checked: frozenset({Phase.CHECK}),
    Summarised: frozenset({Phase.SUMMARISE}),
    Stepped: frozenset({Phase.STEP}),
    Freed: frozenset({Phase.ABANDON}),
    Saved: frozenset({Phase.SAVE}),
}

#: The event types the coordinator takes (the engine gives it these, the pool the rest).
coordinator_events = frozenset(_PHASES)


class Coordinator:
    """Drive ``method`` through a run: events in, instructions out.

    Parameters
    ----------
    method : Method
        Started (or restored from a checkpoint) by the runtime.
    session : RunSession
        The bound problem, monitor, trace, reference and iterates of the run.
    stop : StopRule
        When to stop.
    n_workers : int
        Worker indices of the runtime.
    unit_load : callable
        Work of a unit relative to an equal share (for the load balancer's profile).
    balancing : object or None, default=None
        A :class:`~daskstraggle.runtime.balancing.BalanceLoop` (``record`` each result,
        ``after_step`` each step), or None.
    checkpoint : CheckpointSchedule or None, default=None
        When to ask for a checkpoint (None: never).

    Attributes
    ----------
    phase : Phase
        Which events the coordinator expects next.
    rows : int
        Trace rows (rounds) recorded so far, those of a resumed run's checkpoint included.
    """

    def __init__(self, method: Method, session: RunSession, *, stop: StopRule, n_workers: int,
                 unit_load: Callable[[WorkUnit], float], balancing: Any = None,
                 checkpoint: CheckpointSchedule | None = None) -> None:
        self.method, self.session, self.stop = method, session, stop
        self.balancing, self.checkpoint = balancing, checkpoint
        self.n_workers = n_workers
        self._unit_load = unit_load
        self.idle = set(range(n_workers))
        self.in_flight = 0
        self.durations: dict[int, float] = {}
        self.latencies: dict[int, float] = {}
        self.window = float(method.collect_window or 0.0)
        self.phase = Phase.NEW
        self.rows = session.resumed_at or 0
        self.time = self.t0 = self.t_round = self.deadline = 0.0
        self._held = False  # results held on the workers came: a summary fetches them
        self._sid = ""  # the event being handled
        self._round: tuple[RoundSummary, float, float | None] | None = None
        self._finish: Finish | None = None  # the Finish that waits for the last checkpoint
        self._point: np.ndarray | None = None  # the last round's iterate
        # a method that dispatches once per version: the version whose offers are under
        # way, the indices offered work at it, and those idle since but not offered yet
        self._offered_version: int | None = None
        self._offered: set[int] = set()
        self._to_offer: set[int] = set()

    # ------------------------------------------------------------------ stimuli
    def handle_stimulus(self, *events: Event) -> list[Instruction]:
        """Take in events, in order; return what the runtime must do next (each
        instruction carrying the ``stimulus_id`` of the event that caused it).

        Raises
        ------
        StraggleError
            If the method stalls (no work in flight and not ready to step), or an event
            is not one the coordinator expects in its phase.
        """
        out: list[Instruction] = []
        for event in events:
            if self.phase not in _PHASES.get(type(event), ()):
                raise StraggleError(
                    f"The coordinator got {type(event).__name__} in phase "
                    f"{self.phase.value!r}; the runtime must reply to its last instruction."
                )
            self.time, self._sid = event.time, event.stimulus_id
            _dispatch(type(event))(self, event, out)
        return out

    @functools.singledispatchmethod
    def _handle(self, event: Event, out: list[Instruction]) -> None:
        raise TypeError(f"The coordinator takes no {type(event).__name__} event.")

    def validate_state(self) -> None:
        """Check the coordinator's invariants (the tests call it after every event).

        Raises
        ------
        AssertionError
            If an invariant does not hold.
        """
        assert self.idle <= set(range(self.n_workers)), self.idle
        # a worker index is idle or has exactly one unit in flight
        assert self.in_flight == self.n_workers - len(self.idle), (self.in_flight, self.idle)
        assert self.rows >= (self.session.resumed_at or 0)
        # a round is being judged exactly while its exact check pass is out
        assert (self._round is not None) == (self.phase is Phase.CHECK), self.phase
        assert self.phase is not Phase.NEW or not self.rows or self.session.resumed_at

    @_handle.register
    def _(self, event: Begin, out: list[Instruction]) -> None:
        self.t0 = self.t_round = event.time - self.session.elapsed
        if self.checkpoint is not None:
            self.checkpoint.start(self.rows, event.time)
        self._feed(out)
        self._top(out)

    @_handle.register
    def _(self, event: Arrived, out: list[Instruction]) -> None:
        self._take(event.result)
        if self.phase is Phase.COLLECT:
            self._collect(out)
        elif self.method.ready():
            self._start_collect(out)
        else:
            self._feed(out)
            self._top(out)

    @_handle.register
    def _(self, event: Quiet, out: list[Instruction]) -> None:
        if self.phase is not Phase.COLLECT:  # an Await(None) must end with a result
            raise StraggleError(
                f"The runtime returned no result for {self.method.name!r} while "
                f"{self.in_flight} unit(s) were in flight and it was asked to wait "
                "without a timeout."
            )
        self._end_round(out)

    @_handle.register
    def _(self, event: Checked, out: list[Instruction]) -> None:
        summary = self._pending_round()[0]
        monitor = self.session.monitor
        verdict = monitor.verify(self.rows, summary.iterate, event.result)
        self._exact_objective(monitor.checked_objective)
        self._record(out, verdict, checked=True)

    @_handle.register
    def _(self, event: Stepped, out: list[Instruction]) -> None:
        if self.balancing is not None:
            moved = self.balancing.after_step(now=self.time, iteration=self.rows)
            if moved is not None:
                out.append(RecordEvent(moved, stimulus_id=self._sid))
        if self.method.abandon_stale:
            self.phase = Phase.ABANDON
            out.append(Abandon(self.method.version, stimulus_id=self._sid))
            return
        self._next_round(out)

    @_handle.register
    def _(self, event: Freed, out: list[Instruction]) -> None:
        for i in event.workers:
            self._idle(i)
        self._next_round(out)

    @_handle.register
    def _(self, event: Saved, out: list[Instruction]) -> None:
        if self._finish is not None:
            out.append(self._finish)
            self.phase = Phase.DONE
            return
        self._continue(out)

    # ------------------------------------------------------------------ the loop
    def _feed(self, out: list[Instruction]) -> None:
        """Give every idle worker the method's work for it.

        A method that dispatches at most once per version is offered each index once per
        version: every idle index when the version changes, then each index that becomes
        idle later in that version (a straggler of an older round, for a coded method),
        not every idle index after every result (N calls per result on N workers).
        """
        candidates = self.idle
        if self.method.dispatch_once_per_version:
            if self._offered_version != self.method.version:
                self._offered_version = self.method.version
                self._offered = set()
                self._to_offer = set(self.idle)
            if not self._to_offer:  # (the common case: nothing to offer, nothing to do)
                return
            candidates, self._to_offer = self._to_offer, set()
            self._offered |= candidates
        for i in sorted(candidates):
            unit = self.method.dispatch(i)
            if unit is not None:
                self.idle.discard(i)
                out.append(Submit(unit, stimulus_id=self._sid))
                self.in_flight += 1

    def _idle(self, i: int) -> None:
        """Worker index ``i`` has nothing in flight any more."""
        self.in_flight -= 1
        self.idle.add(i)
        if i not in self._offered:
            self._to_offer.add(i)

    def _take(self, result: WorkResult) -> None:
        i = result.unit.worker_index
        self._held = self._held or _is_held(result.result)
        if result.final:
            self._idle(i)
        self.durations[i] = result.compute_duration
        if result.latency is not None:
            self.latencies[i] = result.latency
        if self.balancing is not None:
            self.balancing.record(result, now=self.time, load=self._unit_load(result.unit),
                                  stale=result.unit.version != self.method.version)
        self.method.receive(result)

    def _top(self, out: list[Instruction]) -> None:
        """The top of the loop: wait for a result, or start collecting if ready."""
        if self.method.ready():
            self._start_collect(out)
            return
        if self.in_flight == 0:
            raise StraggleError(
                f"Method {self.method.name!r} stalled: no work in flight and not ready to step."
            )
        self.phase = Phase.WAIT
        out.append(Await(None, stimulus_id=self._sid))

    def _start_collect(self, out: list[Instruction]) -> None:
        # keep collecting for a fraction of the round's time (DSAG's window); with no
        # window, still take results that arrived at the same time
        self.deadline = self.time + self.window * (self.time - self.t_round)
        self._collect(out)

    def _collect(self, out: list[Instruction]) -> None:
        if not self.in_flight:
            self._end_round(out)
            return
        self._feed(out)
        self.phase = Phase.COLLECT
        out.append(Await(max(self.deadline - self.time, 0.0), stimulus_id=self._sid))

    def _end_round(self, out: list[Instruction]) -> None:
        """Judge the round: a verdict now, or after an exact check pass. A summary of sums
        held on the workers is read by the runtime first (reading fetches them: the round
        ends when that is done)."""
        if self._held:
            self.phase = Phase.SUMMARISE
            out.append(Summarise(self.method, stimulus_id=self._sid))
            return
        self._judge(self.method.summary(), out)

    @_handle.register
    def _(self, event: Summarised, out: list[Instruction]) -> None:
        self._judge(event.summary, out)

    def _judge(self, summary: RoundSummary, out: list[Instruction]) -> None:
        self._round = (summary, self.time, self._gap(summary.objective))
        verdict = self.session.monitor.observe(self.rows, summary.iterate, summary.result,
                                               summary.objective,
                                               next_value=summary.extras.get("next_ritz_value"))
        if verdict == "check":
            self.phase = Phase.CHECK
            out.append(CheckExact(summary.iterate, self.session.problem, stimulus_id=self._sid))
            return
        self._record(out, verdict, checked=False)

    def _exact_objective(self, objective: float | None) -> None:
        """Give the judged round the objective its exact check found, when the round's
        own estimate had none (a round that did not see every row fresh), and the gap to
        the reference with it."""
        summary, now, _ = self._pending_round()
        if summary.objective is not None or objective is None:
            return
        self._round = (dataclasses.replace(summary, objective=objective), now,
                       self._gap(objective))

    def _gap(self, objective: float | None) -> float | None:
        """``objective`` minus the reference's, when both exist."""
        reference = self.session.reference
        return None if reference is None or objective is None else objective - reference.objective

    def _pending_round(self) -> tuple[RoundSummary, float, float | None]:
        assert self._round is not None, "no round is being judged"
        return self._round

    def _row(self, summary: RoundSummary, now: float, gap: float | None,
             checked: bool) -> dict[str, Any]:
        """The trace row of a judged round (the fields of ``TraceRecorder.add``)."""
        return {
            "wall_time": now - self.t0,
            "iteration_duration": now - self.t_round,
            "objective": summary.objective,
            "gap": gap,
            "n_fresh": summary.n_fresh,
            "n_stale": summary.n_stale,
            "workers_used": summary.workers_used,
            "compute_durations": dict(self.durations),
            "latencies": dict(self.latencies),
            "coverage": summary.coverage,
            "n_dropped": summary.n_dropped,
            "ages": summary.ages,
            "extras": {**summary.extras, "optimality": self.session.monitor.optimality,
                       "exact_check": float(checked)},
            "subpartitions": None if self.balancing is None
            else self.balancing.method.subpartition_counts,
        }

    def _record(self, out: list[Instruction], verdict: str | None, *, checked: bool) -> None:
        """Add the round's trace row; stop, or step."""
        summary, now, gap = self._pending_round()
        self._round = None
        out.append(RecordRow(self.rows, self._row(summary, now, gap, checked),
                             stimulus_id=self._sid))
        self.rows += 1
        self._point = summary.iterate  # the divergence rule's point (not copied: read-only)
        if self.session.iterates is not None:
            self.session.iterates.append(np.array(summary.iterate, dtype=np.float64, copy=True))
        reason = verdict or self.stop.check(iteration=self.rows - 1, gap=gap,
                                            elapsed=now - self.t0)
        if reason is not None:
            finish = Finish(summary, reason, stimulus_id=self._sid)
            if self._save_checkpoint(out, now - self.t0, stepped=False):
                self._finish = finish  # once it is written
                return
            self.phase = Phase.DONE
            out.append(finish)
            return
        self.method.step()
        self.phase = Phase.STEP
        out.append(AfterStep(stimulus_id=self._sid))

    def _next_round(self, out: list[Instruction]) -> None:
        self.durations.clear()
        self.latencies.clear()
        if not self._save_checkpoint(out, self.time - self.t0, stepped=True, due_only=True):
            self._continue(out)

    def _continue(self, out: list[Instruction]) -> None:
        """Start the next round (after its checkpoint, if one was due)."""
        self.t_round = self.time
        self._feed(out)
        self._top(out)

    def _save_checkpoint(self, out: list[Instruction], elapsed: float, *, stepped: bool,
                         due_only: bool = False) -> bool:
        """Ask for a checkpoint (when one is asked for, and with ``due_only`` when due);
        return whether one was (then the reply :class:`Saved` carries on)."""
        schedule = self.checkpoint
        if schedule is None or (due_only and not schedule.due(self.rows, self.time,
                                                              self._point)):
            return False
        state = self.session.state(self.method, elapsed=elapsed, stepped=stepped,
                                   iteration=self.rows)
        out.append(WriteCheckpoint(state, self.rows, stimulus_id=self._sid))
        schedule.start(self.rows, self.time, self._point)
        self.phase = Phase.SAVE
        return True


#: The handler of each event type, looked up in singledispatch's cache: going through the
#: descriptor would build a bound dispatcher for every event (~4 us each).
_dispatch = vars(Coordinator)["_handle"].dispatcher.dispatch


def _is_held(result: Any) -> bool:
    """Whether a unit's result (or a coded unit's messages) is held on its worker."""
    parts = result if isinstance(result, tuple) else (result,)
    return any(isinstance(part, HeldResult) for part in parts)
