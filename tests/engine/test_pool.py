"""The worker pool's split decision: a ready helper makes the pool emit :class:`SplitUnit`
with the share of rows the index's own worker keeps, logged for :meth:`WorkerPool.history`;
the events an :class:`Engine` logged replay through a fresh pool (pure: no runtime)."""

from __future__ import annotations

import _pool as calls
import numpy as np
import pytest

from daskstraggle.engine.engine import Engine
from daskstraggle.engine.events import Tick
from daskstraggle.engine.pool import GiveUp, MoveIndex, SplitUnit, StartHelping, WorkerPool
from daskstraggle.methods.base import WorkUnit


def _unit(index: int, version: int, **kw) -> WorkUnit:
    return WorkUnit(index, (index,), np.full(3, float(version)), version, **kw)


def _logged(pool: WorkerPool) -> Engine:
    """An engine whose part is ``pool``: the tests give it the events, it logs them."""
    engine = Engine(log_size=100)
    engine.pool = pool
    return engine


def _helped_pool(**kw) -> Engine:
    """Index 1 is the slower one; worker ``h`` joins beyond the worker count and helps it."""
    engine = _logged(WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[10, 10],
                                **kw))
    calls.sent(engine, "k0", _unit(0, 1), now=0.0)
    calls.sent(engine, "k1", _unit(1, 1), now=0.0)
    calls.arrived(engine, "k0", ("r", 1.0), now=1.0)
    calls.arrived(engine, "k1", ("r", 3.0), now=3.0)
    out = calls.on_status(engine, {"a": "running", "b": "running", "h": "running"}, now=3.5)
    assert [type(i).__name__ for i in out] == ["StartHelping"] and engine.pool.helpers == {1: "h"}
    return engine


def test_a_ready_helper_makes_the_pool_split_units_and_history_says_so():
    engine = _helped_pool()
    pool = engine.pool
    assert calls.split(engine, _unit(1, 2), now=4.0) is None  # the helper's copy is not loaded yet
    calls.helper_ready(engine, 1)
    assert calls.split(engine, _unit(0, 2), now=4.0) is None  # index 0 has no helper
    unit = _unit(1, 2)
    split = calls.split(engine, unit, now=4.0)
    assert isinstance(split, SplitUnit)
    assert (split.unit, split.index, split.helper, split.fraction) == (unit, 1, "h", 0.5)
    assert (split.own.rows, split.helper_part.rows) == ((0, 5), (5, 10))
    calls.sent_split(engine, unit, ("p0", "p1"), now=4.0)
    pool.validate_state()
    # the own worker's half took 3 times the helper's: it keeps less of the next unit
    assert calls.arrived(engine, "p1", (np.ones(3), 1.0), now=5.0)[1] is None
    task, outcome, _ = calls.arrived(engine, "p0", (np.ones(3), 3.0), now=7.0)
    assert task is not None and outcome[1] == 3.0
    np.testing.assert_array_equal(outcome[0], 2 * np.ones(3))
    later = calls.split(engine, _unit(1, 3), now=7.0)
    assert later is not None and later.fraction == pytest.approx(0.375)
    assert later.own.rows == (0, 4)  # round(10 * 0.375)
    calls.sent_split(engine, later.unit, ("p2", "p3"), now=7.0)
    # history answers when the helper started and each split with its share and round
    history = pool.history(1)
    assert isinstance(history[0].instruction, StartHelping)
    assert [(d.time, d.version, d.instruction.fraction) for d in history[1:]] == [
        (4.0, 2, 0.5), (7.0, 3, pytest.approx(0.375))]
    assert all(isinstance(d.instruction, SplitUnit) for d in history[1:])
    assert history[1].instruction.unit.iterate.size == 0  # the log keeps no iterate
    assert pool.history(0) == [] and pool.joins[0]["split_units"] == 2
    # a fresh pool fed the same calls takes the same decisions, splits included
    assert pool.fresh().replay(engine.log) == []


def test_streamed_units_and_one_row_units_go_whole():
    engine = _helped_pool()
    pool = engine.pool
    calls.helper_ready(engine, 1)
    coded = np.ones((2, 1))
    assert calls.split(engine, _unit(1, 2, coefficients=coded, stream=True), now=4.0) is None
    assert calls.split(engine, _unit(1, 2, rows=(3, 4)), now=4.0) is None
    assert [type(d.instruction).__name__ for d in pool.history(1)] == ["StartHelping"]


def test_splits_do_not_push_the_moves_out_of_the_bounded_log():
    engine = _helped_pool(log_size=3)
    pool = engine.pool
    calls.helper_ready(engine, 1)
    for version in range(2, 12):
        unit = _unit(1, version)
        assert calls.split(engine, unit, now=float(version)) is not None
        calls.sent_split(engine, unit, (f"p{version}", f"q{version}"), now=float(version))
        calls.arrived(engine, f"p{version}", (np.ones(3), 1.0), now=version + 0.5)
        calls.arrived(engine, f"q{version}", (np.ones(3), 1.0), now=version + 0.5)
    # a left: its index moves to the helper, which stops helping index 1
    calls.on_status(engine, {"b": "running", "h": "running"}, now=20.0)
    kinds = [type(d.instruction).__name__ for d in pool.log]
    assert kinds == ["StartHelping", "SplitUnit", "SplitUnit", "SplitUnit", "StopHelping",
                     "MoveIndex"]
    assert [d.version for d in pool.log][1:4] == [9, 10, 11]  # the last 3 splits
    assert pool.fresh().replay(engine.log) == []


# ------------------------------------------------------------------ losses and memory
def _kinds(out) -> list[str]:
    return [type(i).__name__ for i in out]


def test_an_index_that_keeps_losing_its_worker_ends_the_run():
    """Dask's allowed-failures for a worker index: its third loss in a run is a GiveUp
    naming the workers it lost, alone (no move, nothing sent again), logged and replayed."""
    pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[10, 10],
                      allowed_losses=3)
    engine = _logged(pool)
    calls.sent(engine, "k1", _unit(1, 1), now=0.0)
    # b runs out of memory; its nanny's restart b2 is tight: index 1 goes to a
    out = calls.on_status(engine, {"a": "running", "b2": "running"}, now=1.0, tight=["b2"])
    assert _kinds(out) == ["MoveIndex", "Resend"] and out[0].to == "a"
    # a dies holding both indices: only tight workers are left, so they are taken
    out = calls.on_status(engine, {"a2": "running", "b2": "running"}, now=2.0, tight=["a2"])
    assert sorted((i.index, i.to) for i in out if isinstance(i, MoveIndex)) == [
        (0, "a2"), (1, "b2")]
    assert pool.losses == {0: ["a"], 1: ["b", "a"]}
    pool.validate_state()
    holder = pool.workers[1]
    out = calls.on_status(engine, {a: "running" for a in {"a2", "b2"} - {holder}}, now=3.0)
    assert _kinds(out) == ["GiveUp"]
    assert (out[0].index, out[0].workers) == (1, ("b", "a", holder))
    assert pool.history(1)[-1].instruction == out[0]
    assert pool.fresh().replay(engine.log) == []


def test_retired_and_frozen_workers_are_not_losses_and_no_limit_means_none():
    pool = WorkerPool(["a", "b", "c"], placement=[(0,), (1,), (2,)],
                      partition_rows=[10, 10, 10], allowed_losses=1)
    out = calls.on_status(pool, {"a": "running", "b": "closing_gracefully", "c": "running"},
                         now=1.0)
    assert _kinds(out) == ["MoveIndex"] and out[0].kind == "retired"
    calls.sent(pool, "k", _unit(2, 1), now=1.0)
    # c's task unanswered for 39 s (over the 30 s floor): frozen, its index moves to a
    out = calls.tell(pool, Tick, 40.0, live=("a", "c"))
    assert out[0].kind == "frozen" and out[0].to == "a" and pool.losses == {}
    unlimited = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[10, 10])
    for n in range(10):  # the worker of index 1 dies over and over: no limit, no GiveUp
        out = calls.on_status(unlimited, {"a": "running", f"b{n}": "running"}, now=float(n))
        assert _kinds(out) == ["MoveIndex"]  # (b's loss, then the newcomer adopts it)
        assert _kinds(calls.on_status(unlimited, {"a": "running"}, now=n + 0.5)) == ["MoveIndex"]
    assert unlimited.losses == {1: ["b", *(f"b{n}" for n in range(10))]}


def test_a_restart_that_ran_out_of_memory_is_taken_last_and_neither_adopts_nor_helps():
    pool = WorkerPool(["a", "b", "c"], placement=[(0,), (1,), (2,)],
                      partition_rows=[10, 10, 10])
    # without the news, the nanny's restart c2 is the first choice (unused)
    assert calls.on_status(pool.fresh(), {"a": "running", "b": "running", "c2": "running"},
                                  now=1.0)[0].to == "c2"
    out = calls.on_status(pool, {"a": "running", "b": "running", "c2": "running"}, now=1.0,
                         tight=["c2"])
    assert _kinds(out) == ["MoveIndex"] and out[0].to == "a"
    # later statuses: c2 (tight for the run) takes no index back and helps none
    assert calls.on_status(pool, {"a": "running", "b": "running", "c2": "running"}, now=2.0) == []
    assert pool.helpers == {} and pool.workers == ["a", "b", "a"]
    # a newcomer that did not run out of memory takes the doubled-up index
    out = calls.on_status(pool, {"a": "running", "b": "running", "c2": "running", "d": "running"},
                         now=3.0)
    assert [(i.index, i.to, i.kind) for i in out] == [(2, "d", "adopted")]


def test_a_newcomer_adopts_the_index_that_arrived_last_not_the_survivors_own():
    """After a loss during the load pass the survivor keeps its own (loaded) index; the
    newcomer takes the lost one, so only the lost index is reloaded."""
    pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[10, 10])
    out = calls.on_status(pool, {"b": "running"}, now=1.0)  # a left: index 0 goes to b
    assert [(i.index, i.to) for i in out] == [(0, "b")]
    out = calls.on_status(pool, {"b": "running", "c": "running"}, now=2.0)
    assert [(i.index, i.previous, i.to, i.kind) for i in out] == [(0, "b", "c", "adopted")]
    assert pool.workers == ["c", "b"]


def _oom_run(nannies: dict[str, bool], rounds: int, *, told: bool,
             allowed_losses: int | None = None) -> tuple[WorkerPool, list]:
    """Play ``rounds`` membership checks of a cluster whose nannies' workers either fit
    their share (True) or die whenever they hold an index (False); the nanny restarts a
    dead worker at a new address, and the runtime tells the pool (``told``) that such a
    restart ran out of memory. Return the pool and every instruction."""
    generation = dict.fromkeys(nannies, 0)

    def address(nanny: str) -> str:
        return f"{nanny}{generation[nanny]}"

    pool = WorkerPool([address(n) for n in nannies],
                      placement=[(i,) for i in range(len(nannies))],
                      partition_rows=[10] * len(nannies), allowed_losses=allowed_losses)
    out: list = []
    for r in range(rounds):
        for nanny, fits in nannies.items():  # a tight worker dies at its first unit
            if not fits and address(nanny) in {*pool.workers, *pool.helpers.values()}:
                generation[nanny] += 1
        oom = [address(n) for n, fits in nannies.items() if not fits and generation[n]]
        step = calls.on_status(pool, dict.fromkeys(map(address, nannies), "running"),
                              now=float(r), tight=oom if told else ())
        pool.validate_state()
        out += step
        if step and isinstance(step[-1], GiveUp):
            break
    return pool, out


def test_one_tight_worker_among_healthy_ones_moves_its_index_once():
    pool, out = _oom_run({"h": True, "i": True, "t": False}, 30, told=True)
    moves = [i for i in out if isinstance(i, MoveIndex)]
    assert [(m.index, m.to) for m in moves] == [(2, "h0")]
    assert pool.workers == ["h0", "i0", "h0"] and pool.tight == {"t1"}
    assert not [i for i in out if isinstance(i, StartHelping | GiveUp)]
    # not told, the restart takes the index back every round: the livelock of issue 42
    _, blind = _oom_run({"h": True, "i": True, "t": False}, 30, told=False)
    assert len([i for i in blind if isinstance(i, MoveIndex)]) >= 20


def test_workers_that_all_run_out_of_memory_end_the_run_after_the_allowed_losses():
    pool, out = _oom_run({"a": False, "b": False}, 30, told=True, allowed_losses=3)
    assert isinstance(out[-1], GiveUp) and len(out[-1].workers) == 3
    assert out[-1].workers == tuple(pool.losses[out[-1].index])
    assert len([i for i in out if isinstance(i, MoveIndex)]) <= 4


def test_an_exact_pass_backs_up_its_slow_folds_by_the_units_rule():
    """A fold still out FOLD_BACKUP_FACTOR times the time half the folds took (at least
    FOLD_BACKUP_MIN s) is computed again once, on the worker holding most of its
    partitions; the pool says when to look (WakeAt), and nothing after the pass ends."""
    from daskstraggle.engine import pool as pool_module
    from daskstraggle.engine.events import FoldDone, PassEnded, PassStarted, WakeAt

    pool = WorkerPool(["a", "b", "c", "d"], placement=[(0, 1), (1, 2), (2, 3), (3, 0)],
                      partition_rows=[5] * 4)
    folds = ((0, (0, 1)), (1, (2,)), (2, (3,)))  # (worker index, partitions)
    assert calls.tell(pool, PassStarted, 10.0, folds=folds) == []
    assert calls.tell(pool, FoldDone, 11.0, fold=1) == []  # 1 of 3: no typical time yet
    events = pool.handle_stimulus(FoldDone(fold=2, time=13.0, stimulus_id="fold-2"))
    bound = max(pool_module.FOLD_BACKUP_MIN, pool_module.FOLD_BACKUP_FACTOR * 3.0)  # 12 s
    assert [type(i).__name__ for i in events] == ["WakeAt"]
    assert 10.0 + bound < events[0].time < 10.0 + bound + 1e-6
    assert calls.tell(pool, Tick, 10.0 + bound, live=tuple(pool.workers)) == []  # not beyond
    (backup,) = calls.tell(pool, Tick, 22.5, live=tuple(pool.workers))
    # fold 0 (index 0, partitions 0 and 1) goes to index 3 or 1 (each holds one of them):
    # the lower index of those equally placed, as for a unit's backup
    assert (backup.fold, backup.to_index) == (0, 1)
    assert calls.tell(pool, Tick, 30.0, live=tuple(pool.workers)) == []  # once only
    assert calls.tell(pool, PassEnded, 31.0) == []
    assert not [i for i in pool.handle_stimulus(
        Tick(live=tuple(pool.workers), time=40.0, stimulus_id="t")) if not isinstance(i, WakeAt)]


def test_a_worker_outrun_by_its_backup_has_its_folds_backed_up_as_the_pass_starts():
    """Gram's round with backups on, three workers: once a and c answered (two latencies
    are enough on three workers), b's unit is backed up on a, whose copy comes first. The
    exact pass after it backs b's fold up on a at once (it would have waited
    the backup bound, >= FOLD_BACKUP_MIN s, for b); a's fold, whose unit was not
    outrun, waits as before, and so does every fold of a pool whose backups lost."""
    from daskstraggle.engine.events import PassStarted

    def pool_after_round(backup_first: bool) -> WorkerPool:
        pool = WorkerPool(["a", "b", "c"], placement=[(0,), (1,), (2,)],
                          partition_rows=[5] * 3, backup_after=1.5)
        for i, key in enumerate(("ka", "kb", "kc")):
            calls.sent(pool, key, _unit(i, 1), now=0.0)
        calls.arrived(pool, "ka", ("r", 1.0), now=1.0)
        calls.arrived(pool, "kc", ("r", 1.0), now=1.0)
        (backup,) = calls.backups(pool, now=1.6)  # 1.5 x the median latency (1 s)
        assert (backup.key, backup.to_index) == ("kb", 0)
        calls.backup_sent(pool, "kb", "kb-backup", now=1.6)
        first, second = ("kb-backup", "kb") if backup_first else ("kb", "kb-backup")
        _, outcome, cancels = calls.arrived(pool, first, ("r", 1.0), now=2.6)
        assert outcome is not None and [c.keys for c in cancels] == [(second,)]
        return pool

    folds = ((0, (0,)), (1, (1,)), (2, (2,)))
    pool = pool_after_round(backup_first=True)
    (early,) = calls.tell(pool, PassStarted, 10.0, folds=folds)
    assert (early.fold, early.to_index) == (1, 0)  # to a, whose copy outran b's
    assert calls.tell(pool, Tick, 10.5, live=tuple(pool.workers)) == []  # once only
    pool = pool_after_round(backup_first=False)  # b was slow to start, not slow
    assert calls.tell(pool, PassStarted, 10.0, folds=folds) == []


def test_the_pool_asks_for_the_statuses_at_its_membership_interval():
    """With a membership interval the pool wakes the runtime to look at the statuses
    (CheckStatus) that long after the last ones came, and again an interval later if they
    do not come; without one (the simulated runtime reports every change) it never asks."""
    from daskstraggle.engine.events import StatusChanged, WakeAt
    from daskstraggle.engine.pool import CheckStatus

    pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[5, 5],
                      membership_interval=1.0)
    out = pool.handle_stimulus(StatusChanged(status={"a": "running", "b": "running"},
                                             time=10.0, stimulus_id="status-1"))
    assert [(type(i).__name__, i.time) for i in out] == [("WakeAt", 11.0)]
    out = pool.handle_stimulus(Tick(live=("a", "b"), time=11.0, stimulus_id="tick-2"))
    assert isinstance(out[0], CheckStatus) and out[0].stimulus_id == "tick-2"
    assert isinstance(out[-1], WakeAt) and out[-1].time == 12.0  # asked again if none came
    never = WorkerPool(["a"], placement=[(0,)], partition_rows=[5])
    assert calls.tell(never, Tick, 1e9, live=("a",)) == []
