"""The coordinator on its own, without Dask: a few lines of Python execute its
instructions, and a run's stimuli logged by an :class:`Engine` replay through a fresh
coordinator to the same instructions."""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np
import pytest

from daskstraggle.api import run_on
from daskstraggle.engine import CheckpointSchedule, Phase
from daskstraggle.engine.convergence import ConvergenceMonitor
from daskstraggle.engine.coordinator import LOG_SIZE, Coordinator, RunSession
from daskstraggle.engine.engine import Engine
from daskstraggle.engine.events import (
    Abandon,
    AfterStep,
    Arrived,
    Await,
    Begin,
    Checked,
    CheckExact,
    Finish,
    Freed,
    Quiet,
    RecordRow,
    Saved,
    Stepped,
    Submit,
    WriteCheckpoint,
)
from daskstraggle.errors import StraggleError
from daskstraggle.methods import DSAG, GD, CodedGD
from daskstraggle.methods.base import Method, contiguous_placement
from daskstraggle.problems import PCA, Block, Logistic, block_stats
from daskstraggle.runtime import LocalRuntime, StopRule
from daskstraggle.runtime.base import run_unit
from daskstraggle.trace import TraceRecorder

rng = np.random.default_rng(0)
X = rng.normal(size=(600, 6)) * np.linspace(3.0, 1.0, 6)
Y = np.where(X[:, 0] + 0.5 * rng.normal(size=600) > 0, 1.0, -1.0)
BLOCKS = [Block(X[i:i + 200], y=Y[i:i + 200]) for i in (0, 200, 400)]


def _start(method: Method, problem, stop: StopRule,
           checkpoint: CheckpointSchedule | None = None) -> Coordinator:
    """A started method and a coordinator over three in-memory partitions."""
    bound = problem.bind(block_stats(Block(X, y=Y)))
    x0 = bound.init_iterate(np.random.default_rng(1))
    placement = method.placement(3, 3) if not isinstance(method, GD) else \
        contiguous_placement(3, 3)
    start = sum((bound.kernel(b, x0) for b in BLOCKS[1:]), bound.kernel(BLOCKS[0], x0))
    monitor = ConvergenceMonitor(bound, tol=stop.tol, start_result=start, start=x0,
                                 step_size=0.5, window=method.convergence_window(3))
    session = RunSession(problem=bound, monitor=monitor, recorder=TraceRecorder(3),
                         reference=None, step_size=0.5, placement=placement, settings={},
                         stats=block_stats(Block(X, y=Y)), x0=x0)
    method.start(bound, x0, placement, step_size=0.5, partition_rows=[200, 200, 200])
    return Coordinator(method, session, stop=stop, n_workers=3, unit_load=lambda unit: 1.0,
                       checkpoint=checkpoint)


def _execute(coordinator: Coordinator, *, order=lambda queue: queue.popleft(),
             patient: bool = True, engine: Engine | None = None):
    """Execute every instruction in process; units answer in FIFO order (or ``order``);
    each event comes 10 ms after the last, through ``engine`` when given (its coordinator
    ``coordinator``). Check the coordinator's invariants after every event. Return the
    instructions and the finishing summary."""
    handle = coordinator.handle_stimulus if engine is None else engine.handle_stimulus
    problem = coordinator.session.problem
    queue: deque = deque()
    seen = []
    clock = _ticks()
    event = Begin(time=clock(), stimulus_id="s")
    for _ in range(100_000):
        instructions = handle(event)
        coordinator.validate_state()
        assert not any(i.replies for i in instructions[:-1]), instructions
        for instruction in instructions:
            seen.append(instruction)
            if isinstance(instruction, Finish):
                return seen, instruction
            if isinstance(instruction, Submit):
                queue.append(instruction.unit)
            elif isinstance(instruction, Await):
                # impatient: a bounded wait (the collect window) passes with nothing, so
                # units still in flight answer in a later round (stragglers)
                if not queue or (not patient and instruction.timeout is not None):
                    event = Quiet(time=clock(), stimulus_id="s")
                    continue
                unit = order(queue)
                value, duration = run_unit(problem, unit.iterate,
                                           *(BLOCKS[p] for p in unit.partitions),
                                           coefficients=unit.coefficients, rows=unit.rows)
                event = Arrived(result=_result(unit, value, duration), time=clock(),
                                stimulus_id="s")
            elif isinstance(instruction, CheckExact):
                total = problem.kernel(BLOCKS[0], instruction.iterate)
                for b in BLOCKS[1:]:
                    total = total + problem.kernel(b, instruction.iterate)
                event = Checked(result=total, time=clock(), stimulus_id="s")
            elif isinstance(instruction, AfterStep):
                event = Stepped(time=clock(), stimulus_id="s")
            elif isinstance(instruction, Abandon):
                event = Freed(workers=(), time=clock(), stimulus_id="s")
            elif isinstance(instruction, WriteCheckpoint):
                # the state is the live run's: it must not have moved on yet
                assert instruction.state["iteration"] == coordinator.rows
                assert coordinator.method.version == instruction.iteration - (
                    0 if instruction.state["stepped"] else 1)
                event = Saved(time=clock(), stimulus_id="s")
    raise AssertionError("the run did not finish")


def _result(unit, value, duration):
    from daskstraggle.methods.base import WorkResult

    return WorkResult(unit, value, duration, latency=duration)


def _ticks():
    counter = itertools.count()
    return lambda: 0.01 * next(counter)


def test_gd_through_the_coordinator_alone():
    stop = StopRule(max_iter=80, tol=None)
    seen, finish = _execute(_start(GD(), PCA(n_components=2), stop))
    assert finish.reason == "max_iter"
    # every round: one unit per worker, then a wait per result, then the step
    first = [type(i).__name__ for i in seen[:5]]
    assert first == ["Submit", "Submit", "Submit", "Await", "Await"]
    assert sum(isinstance(i, RecordRow) for i in seen) == 80
    assert sum(isinstance(i, AfterStep) for i in seen) == 79  # none after the last round
    # and GD's iterate approaches the top two principal directions (power method)
    centred = X - X.mean(0)
    top = np.linalg.svd(centred, full_matrices=False)[2][:2].T
    cosines = np.linalg.svd(top.T @ np.linalg.qr(finish.summary.iterate)[0])[1]
    assert cosines.min() > 0.9999


def test_a_method_that_neither_dispatches_nor_steps_is_a_stall():
    class Idle(GD):
        def dispatch(self, worker_index):
            return None

    coordinator = _start(Idle(), PCA(n_components=2), StopRule(max_iter=5, tol=None))
    with pytest.raises(StraggleError, match="'gd' stalled: no work in flight and not ready"):
        coordinator.handle_stimulus(Begin(time=0.0, stimulus_id="s"))


@pytest.mark.parametrize(("method", "problem"), [
    (DSAG(n_wait=2, subpartitions=2), Logistic(alpha=0.01)),
    (CodedGD("cyclic-repetition", n_stragglers=1, rng=0), Logistic(alpha=0.01)),
    (GD(), PCA(n_components=2)),
])
def test_a_logged_run_replays_to_the_same_instructions(method, problem):
    import copy

    stop = StopRule(max_iter=15, tol=1e-12)
    fresh = copy.deepcopy(method)
    # units answer out of order (the last sent first): stragglers, stale results
    engine = Engine(log_size=LOG_SIZE)
    engine.coordinator = _start(method, problem, stop)
    seen, finish = _execute(engine.coordinator, order=lambda queue: queue.pop(), engine=engine)
    log = list(engine.log)
    replay = _start(fresh, problem, stop)
    again = []
    for event, given in log:
        out = replay.handle_stimulus(event)
        assert [type(i) for i in out] == [type(i) for i in given]
        again.extend(out)
    assert [type(i) for i in again] == [type(i) for i in seen]
    rows = [i.fields for i in again if isinstance(i, RecordRow)]
    assert [r["wall_time"] for r in rows] == \
        [i.fields["wall_time"] for i in seen if isinstance(i, RecordRow)]
    assert [(i.unit.worker_index, i.unit.version) for i in again if isinstance(i, Submit)] == \
        [(i.unit.worker_index, i.unit.version) for i in seen if isinstance(i, Submit)]
    np.testing.assert_array_equal(again[-1].summary.iterate, finish.summary.iterate)


def test_the_runtimes_leave_their_coordinator_log_for_a_replay():
    from daskstraggle import open_matrix

    rt = LocalRuntime(3)
    rt.stimulus_log = LOG_SIZE  # off by default: the events hold the results' arrays
    res = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=StopRule(max_iter=3, tol=None),
                 rng=0)
    events = [event for event, _ in rt.engine.log]
    assert isinstance(events[0], Begin) and res.n_iter == 3
    rt.stimulus_log = 0
    run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=StopRule(max_iter=3, tol=None),
           rng=0)
    assert not rt.engine.log
    assert sum(isinstance(e, Arrived) for e in events) == 9  # 3 rounds x 3 workers


def test_a_wait_without_timeout_that_ends_empty_is_an_error_not_a_loop():
    coordinator = _start(GD(), PCA(n_components=2), StopRule(max_iter=5, tol=None))
    assert isinstance(coordinator.handle_stimulus(Begin(time=0.0, stimulus_id="s"))[-1], Await)
    with pytest.raises(StraggleError, match="returned no result for 'gd' while 3 unit"):
        coordinator.handle_stimulus(Quiet(time=1.0, stimulus_id="s"))


def test_an_event_out_of_phase_is_refused():
    coordinator = _start(GD(), PCA(n_components=2), StopRule(max_iter=5, tol=None))
    with pytest.raises(StraggleError, match="got Stepped in phase 'new'"):
        coordinator.handle_stimulus(Stepped(time=0.0, stimulus_id="s"))
    coordinator.handle_stimulus(Begin(time=0.0, stimulus_id="s"))
    assert coordinator.phase is Phase.WAIT
    with pytest.raises(StraggleError, match="got Begin in phase 'wait'"):
        coordinator.handle_stimulus(Begin(time=1.0, stimulus_id="s"))


def test_the_engine_reads_time_only_from_its_events():
    """Rows' times are the events' times: a run fed with a fixed 10 ms per event has
    wall times on that grid, whatever the real clock did."""
    stop = StopRule(max_iter=4, tol=None)
    seen, _ = _execute(_start(GD(), PCA(n_components=2), stop))
    walls = [i.fields["wall_time"] for i in seen if isinstance(i, RecordRow)]
    # per round: three results and a step hook, each 10 ms apart, after Begin
    assert walls == pytest.approx([0.03, 0.07, 0.11, 0.15])


@pytest.mark.parametrize(("every", "rounds"), [(3, 10), (1, 4)])
def test_checkpoints_are_asked_for_on_schedule_and_at_the_stop(every, rounds):
    stop = StopRule(max_iter=rounds, tol=None)
    schedule = CheckpointSchedule(iterations=every)
    seen, _ = _execute(_start(GD(), PCA(n_components=2), stop, checkpoint=schedule))
    writes = [i for i in seen if isinstance(i, WriteCheckpoint)]
    due = list(range(every, rounds, every))  # after a step, every ``every`` rounds
    assert [w.iteration for w in writes] == [*due, rounds]
    assert [w.state["stepped"] for w in writes] == [True] * len(due) + [False]
    assert all(w.state["iteration"] == w.iteration for w in writes)
    # the final one comes right before Finish, after the last row
    assert isinstance(seen[-2], WriteCheckpoint) and isinstance(seen[-3], RecordRow)


def test_a_checkpoint_is_written_before_the_next_round_is_dispatched():
    """The state holds the live method: nothing may be dispatched (which changes the
    method) until the runtime says the checkpoint is written."""
    stop = StopRule(max_iter=5, tol=None)
    coordinator = _start(GD(), PCA(n_components=2), stop,
                         checkpoint=CheckpointSchedule(iterations=1))
    seen, _ = _execute(coordinator)
    for k, instruction in enumerate(seen):
        if isinstance(instruction, WriteCheckpoint):
            assert not isinstance(seen[k - 1], Submit)
            assert k + 1 == len(seen) - 1 or isinstance(seen[k + 1], Submit)


@pytest.mark.parametrize("make", [
    lambda: GD(),
    lambda: CodedGD("cyclic-repetition", n_stragglers=1, rng=0),
], ids=["gd", "coded"])
def test_offering_work_once_per_version_gives_the_same_instructions(make):
    """The shortcut for methods that dispatch once per version must not change a single
    decision: the same run with the shortcut off (every idle index offered after every
    result) gives the same instructions, also when units answer out of order so that
    a coded round steps before a straggler answers and the straggler is idle later."""
    stop = StopRule(max_iter=30, tol=None)
    runs = []
    for shortcut in (True, False):
        method = make()
        method.dispatch_once_per_version = shortcut
        draw = np.random.default_rng(5)  # units answer in a random (seeded) order

        def anyone(queue, draw=draw):
            unit = queue[int(draw.integers(len(queue)))]
            queue.remove(unit)
            return unit

        seen, finish = _execute(_start(method, Logistic(alpha=0.01), stop), order=anyone,
                                patient=False)
        runs.append(([(type(i).__name__, getattr(getattr(i, "unit", None), "worker_index", None),
                       getattr(getattr(i, "unit", None), "version", None)) for i in seen],
                     finish.summary.iterate))
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    # some index became idle in the middle of a round (its older unit answered late) and
    # was given that round's work: a Submit after an Await within one round
    mid_round, waited = 0, False
    for kind, _, _ in runs[0][0]:
        if kind == "AfterStep":
            waited = False
        waited |= kind == "Await"
        mid_round += kind == "Submit" and waited
    assert mid_round > 0 or make().name == "gd"
