"""The engine on its own: a whole run (load, exact passes, rounds, conclusion) is its
instructions, carried out by a dozen lines of Python with an executor's primitives."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.engine import Engine
from daskstraggle.engine.events import (
    AfterStep,
    Arrived,
    Await,
    Begin,
    Checked,
    CheckExact,
    Compute,
    Computed,
    EndRounds,
    Load,
    Loaded,
    RecordRow,
    StartRounds,
    StatusChanged,
    Stepped,
    Submit,
)
from daskstraggle.methods import GD
from daskstraggle.problems import PCA, LeastSquares
from daskstraggle.runtime import LocalRuntime, StopRule

X = np.random.default_rng(0).normal(size=(60, 5)) * np.linspace(3.0, 1.0, 5)
Y = X @ np.arange(1.0, 6.0)


def _carry_out(engine, rt, matrix, problem, stop):
    """Run ``engine``'s lifecycle of GD on ``rt``'s primitives; return the conclusion and
    the names of the instructions, in order."""
    method = GD()
    placement = method.placement(matrix.n_partitions, rt.n_workers)
    program = engine.lifecycle(
        method, problem, n_workers=rt.n_workers, placement=placement,
        partition_rows=list(matrix.partition_rows()), settings={}, stop=stop,
        step_size=None, reference=False, rng=np.random.default_rng(0), record_iterates=False,
        resume=None, checkpoint=None, unit_load=lambda unit: 1.0, balance_loop=lambda m: None)
    kinds: list[str] = []
    reply, work = None, None
    while True:
        try:
            instruction = program.send(reply)
        except StopIteration as end:
            return end.value, kinds
        kinds.append(type(instruction).__name__)
        reply, sid = None, f"event-{len(kinds)}"
        match instruction:
            case Load():
                reply = Loaded(stats=rt._load(matrix, instruction.placement), time=0.0,
                               stimulus_id=sid)
            case Compute():
                reply = Computed(value=instruction.fn(rt._map_reduce, *instruction.args),
                                 time=0.0, stimulus_id=sid)
            case CheckExact():
                reply = Checked(result=rt._exact_pass(instruction.problem, instruction.iterate),
                                time=0.0, stimulus_id=sid)
            case StartRounds():
                work = instruction.work
                reply = Begin(time=0.0, stimulus_id=sid)
            case Submit():
                rt._submit(instruction.unit, work)
            case Await():
                reply = Arrived(result=rt._next(), time=0.0, stimulus_id=sid)
            case AfterStep():
                reply = Stepped(time=0.0, stimulus_id=sid)
            case RecordRow() | EndRounds():
                pass


@pytest.mark.parametrize("problem", [PCA(n_components=2), LeastSquares(alpha=0.1)],
                         ids=["pca", "least-squares"])
def test_a_whole_run_is_the_engine_s_instructions(problem):
    stop = StopRule(max_iter=4, tol=None)
    labels = None if problem.name == "pca" else Y
    matrix = open_matrix(X, labels=labels).repartition(3)
    with LocalRuntime(3) as rt:
        done, kinds = _carry_out(Engine(), rt, matrix, problem, stop)
        expected = run_on(rt, GD(), problem, open_matrix(X, labels=labels), stop=stop, rng=0)
    # the load, the step size (regression's a power iteration), the exact pass at the start
    assert kinds[:4] == ["Load", "Compute", "CheckExact", "StartRounds"]
    assert kinds.count("RecordRow") == 4 and kinds.count("Submit") == 4 * 3
    assert kinds[-2:] == ["EndRounds", "CheckExact"]  # the final exact pass
    assert done.reason == expected.stop_reason == "max_iter"
    np.testing.assert_allclose(done.iterate, expected.iterate, rtol=1e-12)
    assert done.objective == pytest.approx(expected.objective, rel=1e-12)


def test_an_event_no_part_takes_yet_is_refused():
    with pytest.raises(TypeError, match="no part that takes StatusChanged"):
        Engine().handle_stimulus(StatusChanged(status={}, time=0.0, stimulus_id="status-1"))


def test_a_write_due_by_count_still_updates_the_divergence_rules_last_step():
    """The step the divergence rule adds is one round's, also after a round whose write
    was due by count: measured from that round's point, not from the one before."""
    from daskstraggle.engine.checkpoint import CheckpointSchedule

    schedule = CheckpointSchedule(iterations=2, divergence=0.8)
    schedule.start(0, 0.0, np.zeros(1))
    assert not schedule.due(1, 0.0, np.array([0.3]))  # 0.3 + 0 <= 0.8
    assert schedule.due(2, 0.0, np.array([0.6]))  # by count
    schedule.start(2, 0.0, np.array([0.6]))  # written
    # one round's step (0.3) and 0.3 from the written point: 0.6 <= 0.8, no write
    # (measured from round 1's point the step would be 0.6: 0.9 > 0.8, a needless write)
    assert not schedule.due(3, 0.0, np.array([0.9]))
