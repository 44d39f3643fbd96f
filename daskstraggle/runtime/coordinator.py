"""The coordinator: the pure state machine that drives a method on any runtime.

In the style of distributed's ``WorkerState.handle_stimulus``: the runtime feeds it
*events* (the run began, a result arrived, the collect window passed quietly, an exact
check pass came back, the step's runtime hook ran, stale messages were abandoned) and
executes the *instructions* it returns (submit a unit, wait for a result, run an exact
check pass, call the step hook, abandon stale messages, a round is recorded, finish).
Every decision of the driving loop lives here: dispatching to idle workers, the
collect window, stall detection, the convergence verdict and its exact checks, the
stop rule, the balancing cadence, abandoning stale messages and checkpoints. The
runtimes (Dask, local, simulated) only execute instructions; membership changes
(lost, frozen, joining workers) are handled below it by the Dask runtime, which keeps
worker indices stable.

Each ``handle`` call returns instructions of which at most the last expects a reply
(the next event). On request, a bounded log of events and clock readings
(:attr:`Coordinator.log`, ``log_size``) lets a test replay a run through the policy
without any runtime.

Pure module: no Dask imports.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskstraggle.errors import InvalidDataError, InvalidParameterError, StraggleError
from daskstraggle.methods.base import Method, RoundSummary, WorkResult, WorkUnit
from daskstraggle.problems.base import KernelResult, Problem, Reference
from daskstraggle.problems.block import MatrixStats
from daskstraggle.runtime.checkpoint import Checkpointer, same_stats
from daskstraggle.runtime.convergence import ConvergenceMonitor
from daskstraggle.runtime.stop import StopRule
from daskstraggle.trace import TraceRecorder

__all__ = [
    "LOG_SIZE",
    "Coordinator",
    "RunSession",
    "resumed_session",
]

#: Entries (events and clock readings) a logging coordinator keeps by default. The events
#: hold the workers' results (arrays), so the log is off unless asked for.
LOG_SIZE = 10_000


# ------------------------------------------------------------------------------ events
@dataclass(frozen=True, slots=True)
class Begin:
    """The run starts (or resumes): dispatch to every worker."""


@dataclass(frozen=True, slots=True)
class Arrived:
    """A result arrived (reply to :class:`Await`)."""

    result: WorkResult


@dataclass(frozen=True, slots=True)
class Quiet:
    """No result arrived within the wait's timeout (reply to :class:`Await`)."""


@dataclass(frozen=True, slots=True)
class Checked:
    """The exact kernel sum at the asked point (reply to :class:`CheckExact`)."""

    result: KernelResult


@dataclass(frozen=True, slots=True)
class Stepped:
    """The runtime's step hook ran (reply to :class:`AfterStep`)."""


@dataclass(frozen=True, slots=True)
class Freed:
    """Abandoning stale messages freed these worker indices (reply to :class:`Abandon`)."""

    workers: tuple[int, ...]


# ------------------------------------------------------------------------ instructions
@dataclass(frozen=True, slots=True)
class Submit:
    """Send ``unit`` to its worker."""

    unit: WorkUnit


@dataclass(frozen=True, slots=True)
class Await:
    """Wait for the next result, at most ``timeout`` seconds (None: until one comes).
    Reply: :class:`Arrived` or :class:`Quiet`."""

    timeout: float | None


@dataclass(frozen=True, slots=True)
class CheckExact:
    """Compute the exact kernel sum over every partition at ``iterate``.
    Reply: :class:`Checked`."""

    iterate: np.ndarray


@dataclass(frozen=True, slots=True)
class AfterStep:
    """The method stepped: run the runtime's step hook. Reply: :class:`Stepped`."""


@dataclass(frozen=True, slots=True)
class Abandon:
    """Drop undelivered messages of streamed units older than ``version``.
    Reply: :class:`Freed`."""

    version: int


@dataclass(frozen=True, slots=True)
class RoundDone:
    """Trace row ``row`` was recorded (for the runtime's bookkeeping and progress)."""

    row: int
    objective: float | None


@dataclass(frozen=True, slots=True)
class Finish:
    """The run is over: ``summary`` is the returned round, ``reason`` why it stopped."""

    summary: RoundSummary
    reason: str


Event = Begin | Arrived | Quiet | Checked | Stepped | Freed
Instruction = Submit | Await | CheckExact | AfterStep | Abandon | RoundDone | Finish


class Coordinator:
    """Drive ``method`` through a run: events in, instructions out.

    Parameters
    ----------
    method : Method
        Started (or restored from a checkpoint) by the runtime.
    session : RunSession
        The bound problem, monitor, trace, reference and checkpointing of the run.
    stop : StopRule
        When to stop.
    n_workers : int
        Worker indices of the runtime.
    clock : callable
        The runtime's clock (seconds; simulated for the simulated runtime).
    unit_load : callable
        Work of a unit relative to an equal share (for the load balancer's profile).
    balancing : object or None, default=None
        A :class:`~daskstraggle.runtime.balancing.BalanceLoop` (``record`` each result,
        ``after_step`` each step), or None.
    log_size : int, default=0
        Keep the last this many events and clock readings in :attr:`log`, for a replay
        (0: no log; the events hold the results' arrays).
    """

    def __init__(self, method: Method, session: RunSession, *, stop: StopRule, n_workers: int,
                 clock: Callable[[], float], unit_load: Callable[[WorkUnit], float],
                 balancing: Any = None, log_size: int = 0) -> None:
        self.method, self.session, self.stop = method, session, stop
        self.balancing = balancing
        self._clock, self._unit_load = clock, unit_load
        self.log: deque[tuple[str, Any]] = deque(maxlen=log_size)
        self.idle = set(range(n_workers))
        self.in_flight = 0
        self.durations: dict[int, float] = {}
        self.latencies: dict[int, float] = {}
        self.window = float(method.collect_window or 0.0)
        self.phase = "new"
        self.t0 = self.t_round = self.deadline = 0.0
        self._round: tuple[RoundSummary, float, float | None] | None = None

    def now(self) -> float:
        """Read the clock (logged, so a replay can give the same readings)."""
        t = self._clock()
        self.log.append(("clock", t))
        return t

    # ------------------------------------------------------------------ stimuli
    def handle(self, event: Event) -> list[Instruction]:
        """Take in one event; return what the runtime must do next.

        Raises
        ------
        StraggleError
            If the method stalls: no work in flight and not ready to step.
        """
        self.log.append(("event", event))
        out: list[Instruction] = []
        if isinstance(event, Begin):
            self.t0 = self.t_round = self.now() - self.session.elapsed
            self._feed(out)
            self._top(out)
        elif isinstance(event, Arrived):
            self._take(event.result)
            if self.phase == "collect":
                self._collect(out)
            elif self.method.ready():
                self._start_collect(out)
            else:
                self._feed(out)
                self._top(out)
        elif isinstance(event, Quiet):
            if self.phase != "collect":  # an Await(None) must end with a result
                raise StraggleError(
                    f"The runtime returned no result for {self.method.name!r} while "
                    f"{self.in_flight} unit(s) were in flight and it was asked to wait "
                    "without a timeout."
                )
            self._end_round(out)
        elif isinstance(event, Checked):
            summary = self._pending_round()[0]
            verdict = self.session.monitor.verify(len(self.session.recorder), summary.iterate,
                                                  event.result)
            self._exact_objective(self.session.monitor.checked_objective)
            self._record(out, verdict, checked=True)
        elif isinstance(event, Stepped):
            self._after_step(out)
        elif isinstance(event, Freed):
            for i in event.workers:
                self.in_flight -= 1
                self.idle.add(i)
            self._next_round(out)
        return out

    # ------------------------------------------------------------------ the loop
    def _feed(self, out: list[Instruction]) -> None:
        """Give every idle worker the method's work for it."""
        for i in sorted(self.idle):
            unit = self.method.dispatch(i)
            if unit is not None:
                self.idle.discard(i)
                out.append(Submit(unit))
                self.in_flight += 1

    def _take(self, result: WorkResult) -> None:
        i = result.unit.worker_index
        if result.final:
            self.in_flight -= 1
            self.idle.add(i)
        self.durations[i] = result.compute_duration
        if result.latency is not None:
            self.latencies[i] = result.latency
        if self.balancing is not None:
            self.balancing.record(result, now=self.now(), load=self._unit_load(result.unit),
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
        self.phase = "wait"
        out.append(Await(None))

    def _start_collect(self, out: list[Instruction]) -> None:
        # keep collecting for a fraction of the round's time (DSAG's window); with no
        # window, still take results that arrived at the same time
        t_ready = self.now()
        self.deadline = t_ready + self.window * (t_ready - self.t_round)
        self._collect(out)

    def _collect(self, out: list[Instruction]) -> None:
        if not self.in_flight:
            self._end_round(out)
            return
        self._feed(out)
        self.phase = "collect"
        out.append(Await(max(self.deadline - self.now(), 0.0)))

    def _end_round(self, out: list[Instruction]) -> None:
        """Judge the round: a verdict now, or after an exact check pass."""
        summary = self.method.summary()
        now = self.now()
        self._round = (summary, now, self._gap(summary.objective))
        verdict = self.session.monitor.observe(len(self.session.recorder), summary.iterate,
                                               summary.result, summary.objective)
        if verdict == "check":
            self.phase = "check"
            out.append(CheckExact(summary.iterate))
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

    def _record(self, out: list[Instruction], verdict: str | None, *, checked: bool) -> None:
        """Add the round's trace row; stop, or step."""
        summary, now, gap = self._pending_round()
        session, recorder = self.session, self.session.recorder
        row = recorder.add(
            wall_time=now - self.t0,
            iteration_duration=now - self.t_round,
            objective=summary.objective,
            gap=gap,
            n_fresh=summary.n_fresh,
            n_stale=summary.n_stale,
            workers_used=summary.workers_used,
            compute_durations=dict(self.durations),
            latencies=dict(self.latencies),
            coverage=summary.coverage,
            n_dropped=summary.n_dropped,
            ages=summary.ages,
            extras={**summary.extras, "optimality": session.monitor.optimality,
                    "exact_check": float(checked)},
            subpartitions=None if self.balancing is None
            else self.balancing.method.subpartition_counts,
        )
        out.append(RoundDone(row, summary.objective))
        if session.iterates is not None:
            session.iterates.append(np.array(summary.iterate, dtype=np.float64, copy=True))
        reason = verdict or self.stop.check(iteration=len(recorder) - 1, gap=gap,
                                            elapsed=now - self.t0)
        if reason is not None:
            self._save_checkpoint(now - self.t0, stepped=False)
            self.phase = "done"
            out.append(Finish(summary, reason))
            return
        self.method.step()
        self.phase = "step"
        out.append(AfterStep())

    def _after_step(self, out: list[Instruction]) -> None:
        if self.balancing is not None:
            event = self.balancing.after_step(now=self.now(),
                                              iteration=len(self.session.recorder))
            if event is not None:
                self.session.recorder.add_event(event)
        if self.method.abandon_stale:
            self.phase = "abandon"
            out.append(Abandon(self.method.version))
            return
        self._next_round(out)

    def _next_round(self, out: list[Instruction]) -> None:
        self.durations.clear()
        self.latencies.clear()
        self._save_checkpoint(self.now() - self.t0, stepped=True, due_only=True)
        self.t_round = self.now()
        self._feed(out)
        self._top(out)

    def _save_checkpoint(self, elapsed: float, *, stepped: bool, due_only: bool = False) -> None:
        """Write the checkpoint (when one is asked for, and with ``due_only`` when due)."""
        checkpoint = self.session.checkpoint
        if checkpoint is None:
            return
        iteration, now = len(self.session.recorder), time.monotonic()  # real seconds
        if due_only and not checkpoint.due(iteration, now):
            return
        checkpoint.write(self.session.state(self.method, elapsed=elapsed, stepped=stepped),
                         iteration=iteration, now=now)


@dataclass(eq=False)
class RunSession:
    """A run's state besides the method's: what a checkpoint keeps with the method."""

    problem: Problem
    monitor: ConvergenceMonitor
    recorder: TraceRecorder
    reference: Reference | None
    step_size: float
    placement: list[tuple[int, ...]]
    settings: dict[str, Any]
    stats: MatrixStats
    x0: np.ndarray
    iterates: list[np.ndarray] | None = None
    checkpoint: Checkpointer | None = None
    elapsed: float = 0.0  # loop seconds before this (resumed) run
    stepped: bool = True  # a resumed run: whether the checkpoint was taken after a step
    resumed_at: int | None = None

    def state(self, method: Method, *, elapsed: float, stepped: bool) -> dict[str, Any]:
        """Everything a resumed run needs, for :class:`Checkpointer.write`."""
        return {
            "settings": self.settings,
            "placement": [list(p) for p in self.placement],
            "elapsed": elapsed,
            "stepped": stepped,
            "iteration": len(self.recorder),
            # one pickle: the method, monitor and trace share the bound problem
            "run": {"method": method, "problem": self.problem, "monitor": self.monitor,
                    "recorder": self.recorder, "reference": self.reference,
                    "step_size": self.step_size, "stats": self.stats, "x0": self.x0,
                    "iterates": self.iterates},
        }


def resumed_session(state: dict[str, Any], stats: MatrixStats,
                     record_iterates: bool) -> tuple[Method, RunSession]:
    """The method and session of a checkpoint, once the reloaded data is checked."""
    run = state["run"]
    if not same_stats(run["stats"], stats):
        raise InvalidDataError(
            "The data differ from those of the run that wrote the checkpoint (their column "
            "sums or norms changed); resume with the same data, or start afresh without "
            "--resume."
        )
    iterates = run["iterates"]
    if record_iterates and iterates is None:
        raise InvalidParameterError(
            "record_iterates=True needs a checkpoint of a run that recorded its iterates; "
            "resume without it, or start afresh."
        )
    session = RunSession(
        problem=run["problem"], monitor=run["monitor"], recorder=run["recorder"],
        reference=run["reference"], step_size=run["step_size"],
        placement=[tuple(p) for p in state["placement"]], settings=state["settings"],
        stats=run["stats"], x0=run["x0"], iterates=iterates if record_iterates else None,
        elapsed=float(state["elapsed"]), stepped=bool(state["stepped"]),
        resumed_at=int(state["iteration"]),
    )
    return run["method"], session
