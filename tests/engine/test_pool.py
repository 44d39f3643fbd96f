"""The worker pool's split decision: a ready helper makes the pool emit :class:`SplitUnit`
with the share of rows the index's own worker keeps, logged for :meth:`WorkerPool.history`
and replayed by a fresh pool (pure: no runtime)."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle.engine.pool import SplitUnit, StartHelping, WorkerPool
from daskstraggle.methods.base import WorkUnit


def _unit(index: int, version: int, **kw) -> WorkUnit:
    return WorkUnit(index, (index,), np.full(3, float(version)), version, **kw)


def _helped_pool(**kw) -> WorkerPool:
    """Index 1 is the slower one; worker ``h`` joins beyond the worker count and helps it."""
    pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[10, 10],
                      stimuli=100, **kw)
    pool.sent("k0", _unit(0, 1), now=0.0)
    pool.sent("k1", _unit(1, 1), now=0.0)
    pool.arrived("k0", ("r", 1.0), now=1.0)
    pool.arrived("k1", ("r", 3.0), now=3.0)
    out = pool.on_status({"a": "running", "b": "running", "h": "running"}, now=3.5)
    assert [type(i).__name__ for i in out] == ["StartHelping"] and pool.helpers == {1: "h"}
    return pool


def test_a_ready_helper_makes_the_pool_split_units_and_history_says_so():
    pool = _helped_pool()
    assert pool.split(_unit(1, 2), now=4.0) is None  # the helper's copy is not loaded yet
    pool.helper_ready(1)
    assert pool.split(_unit(0, 2), now=4.0) is None  # index 0 has no helper
    unit = _unit(1, 2)
    split = pool.split(unit, now=4.0)
    assert isinstance(split, SplitUnit)
    assert (split.unit, split.index, split.helper, split.fraction) == (unit, 1, "h", 0.5)
    assert (split.own.rows, split.helper_part.rows) == ((0, 5), (5, 10))
    pool.sent_split(unit, ("p0", "p1"), now=4.0)
    pool.validate_state()
    # the own worker's half took 3 times the helper's: it keeps less of the next unit
    assert pool.arrived("p1", (np.ones(3), 1.0), now=5.0)[1] is None
    task, outcome, _ = pool.arrived("p0", (np.ones(3), 3.0), now=7.0)
    assert task is not None and outcome[1] == 3.0
    np.testing.assert_array_equal(outcome[0], 2 * np.ones(3))
    later = pool.split(_unit(1, 3), now=7.0)
    assert later is not None and later.fraction == pytest.approx(0.375)
    assert later.own.rows == (0, 4)  # round(10 * 0.375)
    pool.sent_split(later.unit, ("p2", "p3"), now=7.0)
    # history answers when the helper started and each split with its share and round
    history = pool.history(1)
    assert isinstance(history[0].instruction, StartHelping)
    assert [(d.time, d.version, d.instruction.fraction) for d in history[1:]] == [
        (4.0, 2, 0.5), (7.0, 3, pytest.approx(0.375))]
    assert all(isinstance(d.instruction, SplitUnit) for d in history[1:])
    assert history[1].instruction.unit.iterate.size == 0  # the log keeps no iterate
    assert pool.history(0) == [] and pool.joins[0]["split_units"] == 2
    # a fresh pool fed the same calls takes the same decisions, splits included
    assert pool.fresh().replay(pool.stimuli) == []


def test_streamed_units_and_one_row_units_go_whole():
    pool = _helped_pool()
    pool.helper_ready(1)
    coded = np.ones((2, 1))
    assert pool.split(_unit(1, 2, coefficients=coded, stream=True), now=4.0) is None
    assert pool.split(_unit(1, 2, rows=(3, 4)), now=4.0) is None
    assert [type(d.instruction).__name__ for d in pool.history(1)] == ["StartHelping"]


def test_splits_do_not_push_the_moves_out_of_the_bounded_log():
    pool = _helped_pool(log_size=3)
    pool.helper_ready(1)
    for version in range(2, 12):
        unit = _unit(1, version)
        assert pool.split(unit, now=float(version)) is not None
        pool.sent_split(unit, (f"p{version}", f"q{version}"), now=float(version))
        pool.arrived(f"p{version}", (np.ones(3), 1.0), now=version + 0.5)
        pool.arrived(f"q{version}", (np.ones(3), 1.0), now=version + 0.5)
    # a left: its index moves to the helper, which stops helping index 1
    pool.on_status({"b": "running", "h": "running"}, now=20.0)
    kinds = [type(d.instruction).__name__ for d in pool.log]
    assert kinds == ["StartHelping", "SplitUnit", "SplitUnit", "SplitUnit", "StopHelping",
                     "MoveIndex"]
    assert [d.version for d in pool.log][1:4] == [9, 10, 11]  # the last 3 splits
    assert pool.fresh().replay(pool.stimuli) == []
