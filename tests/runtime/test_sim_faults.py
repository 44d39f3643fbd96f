"""Faults in simulated time: the engine's worker pool decides, the simulated runtime plays
losses, freezes, joins, retirements and backups, and exact methods end on the clean run's
iterates (issue 26, part 2)."""

from __future__ import annotations

import dataclasses

import _pool as calls
import dask
import numpy as np
import pytest

from daskstraggle import fit_pca, open_matrix
from daskstraggle.api import run_on
from daskstraggle.engine.pool import MoveIndex, StartHelping, WorkerPool
from daskstraggle.errors import InvalidParameterError, StraggleError, WorkerLostError
from daskstraggle.latency.faults import Freeze, Join, Loss
from daskstraggle.latency.spec import parse_stragglers
from daskstraggle.methods import DSAG, GD, CodedGD
from daskstraggle.problems import PCA, LeastSquares
from daskstraggle.runtime import SimRuntime, StopRule

rng = np.random.default_rng(0)
X = rng.normal(size=(800, 6)) * np.linspace(3.0, 1.0, 6)
Y = X @ rng.normal(size=6) + 0.1 * rng.normal(size=800)
LATENCY = "gamma(mean=0.1, var=1e-4)"
STOP = StopRule(max_iter=40, tol=None)


class CheckedSim(SimRuntime):
    """A simulated runtime that checks the pool's invariants after every event it gives
    the pool (and counts them: the check must run)."""

    checked = 0

    def _observe(self, kind, stimulus_id=None, **fields):
        answers = super()._observe(kind, stimulus_id, **fields)
        self.worker_pool.validate_state()
        self.checked += 1
        return answers


def _run(method, faults=None, *, problem=None, n_workers=4, **kwargs):
    with CheckedSim(n_workers, latency=LATENCY, faults=faults, rng=1, **kwargs) as rt:
        result = run_on(rt, method, problem or PCA(n_components=2), open_matrix(X, labels=Y),
                        stop=STOP, rng=0)
        return result, rt.worker_pool


def _same_iterates(a, b, rtol=1e-12):
    np.testing.assert_allclose(a.iterate, b.iterate, rtol=rtol, atol=1e-13)
    assert a.n_iter == b.n_iter


def test_a_lost_worker_moves_its_index_and_gd_keeps_the_clean_iterates():
    clean, _ = _run(GD())
    lost, pool = _run(GD(), "loss(workers=1, at=1.5)")
    _same_iterates(lost, clean)
    (loss,) = lost.attrs["worker_losses"]
    assert (loss["worker_index"], loss["lost"], loss["kind"]) == (1, "1", "lost")
    assert loss["moved_to"] in {"0", "2", "3"} and loss["reloaded"] == loss["partitions"]
    # the survivor computes for two from then on: rounds after the loss take longer
    times = lost.trace.iteration_duration.values
    assert times[-5:].mean() > 1.5 * clean.trace.iteration_duration.values[-5:].mean()
    # the pool's log answers why index 1 moved, and when
    (why,) = pool.history(1)
    assert isinstance(why.instruction, MoveIndex) and why.time == pytest.approx(1.5)
    assert why.instruction.why == "left the cluster" and why.version > 0


@pytest.mark.parametrize("method", [GD(), CodedGD("cyclic-repetition", n_stragglers=1, rng=0)],
                         ids=["gd", "coded"])
def test_losses_retirements_and_joins_end_on_the_clean_answer(method):
    import copy

    faults = ("loss(workers=1, at=0.7) + retire(workers=2, at=1.9) + join(count=1, at=2.5)"
              " + join(count=2, at=3.1)")
    clean, _ = _run(copy.deepcopy(method))
    faulty, pool = _run(copy.deepcopy(method), faults)
    _same_iterates(faulty, clean, rtol=1e-9)
    kinds = [loss["kind"] for loss in faulty.attrs["worker_losses"]]
    assert kinds[:2] == ["lost", "retired"] and "adopted" in kinds
    retired = faulty.attrs["worker_losses"][1]
    assert retired["reloaded"] == []  # fetched from the retiring worker
    # after the joins every index has a worker of its own again, and the last newcomer
    # helps the slowest index
    assert len(set(pool.workers)) == 4 and not {"1", "2"} & set(pool.workers)
    assert faulty.attrs["worker_joins"][0]["split_units"] > 0


def test_a_frozen_worker_is_found_overdue_and_its_index_moves():
    clean, _ = _run(GD())
    frozen, pool = _run(GD(), "freeze(workers=3, at=1, for=1000)", frozen_after=1.0)
    _same_iterates(frozen, clean)
    (loss,) = frozen.attrs["worker_losses"]
    assert loss["kind"] == "frozen" and "has not answered for" in loss["reason"]
    assert "3" in pool.shunned
    # the round that waited for the frozen worker took about frozen_after longer
    assert frozen.trace.iteration_duration.max() > 1.0


def test_a_short_freeze_only_delays_the_rounds():
    clean, _ = _run(GD())
    paused, _ = _run(GD(), "freeze(workers=0, at=1, for=0.5)")
    _same_iterates(paused, clean)
    assert "worker_losses" not in paused.attrs
    delay = paused.trace.wall_time.values[-1] - clean.trace.wall_time.values[-1]
    assert delay == pytest.approx(0.5, abs=0.15)


def test_a_joining_worker_helps_the_slowest_index_and_the_iterates_stay():
    slow = "gamma(mean=0.1, var=1e-4) + slowdown(workers=2, factor=4)"
    with CheckedSim(4, latency=slow, rng=1) as rt:
        clean = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
    with CheckedSim(4, latency=slow, faults="join(count=1, at=1)", rng=1) as rt:
        helped = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
        pool = rt.worker_pool
    _same_iterates(helped, clean, rtol=1e-9)
    (join,) = helped.attrs["worker_joins"]
    assert join["worker"] == "4" and join["helps"] == 2 and join["split_units"] > 10
    assert isinstance(pool.history(2)[0].instruction, StartHelping)
    # the newcomer takes rows of the slow index: rounds get faster
    assert helped.trace.wall_time[-1] < 0.8 * clean.trace.wall_time[-1]


def test_backups_of_a_slow_workers_units_end_on_the_clean_iterates():
    slow = "gamma(mean=0.1, var=1e-4) + slowdown(workers=1, factor=5)"
    with CheckedSim(4, latency=slow, rng=1) as rt:
        clean = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
    with CheckedSim(4, latency=slow, rng=1, backup_after=2.0) as rt:
        backed = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
    _same_iterates(backed, clean)
    assert backed.attrs["backups"] >= STOP.max_iter - 3
    # a round: the backup goes after 2 x 0.1 s and answers 0.1 s later, not after 0.5 s
    ratio = float(backed.trace.wall_time[-1] / clean.trace.wall_time[-1])
    assert 0.5 < ratio < 0.7


def test_every_worker_lost_ends_in_one_line_or_waits_for_a_join():
    with pytest.raises(WorkerLostError, match=r"^Every worker left the cluster and none "
                       r"joined within 60 s; the run cannot go on\."):
        _run(GD(), "loss(workers=[0, 1, 2, 3], at=1)")
    with dask.config.set({"daskstraggle.timeouts.no-worker": "5s"}):
        with pytest.raises(WorkerLostError, match="within 5 s"):
            _run(GD(), "loss(workers=[0, 1, 2, 3], at=1) + join(count=1, at=7)")
        clean, _ = _run(GD())
        rescued, pool = _run(GD(), "loss(workers=[0, 1, 2, 3], at=1) + join(count=2, at=4)")
    _same_iterates(rescued, clean)
    assert set(pool.workers) == {"4", "5"}


def test_dsag_goes_on_past_a_loss_and_a_freeze():
    faults = "loss(workers=0, at=1) + freeze(workers=2, at=0.5, for=50)"
    result, pool = _run(DSAG(n_wait=2, subpartitions=2), faults,
                        problem=LeastSquares(), frozen_after=1.0)
    assert result.n_iter == STOP.max_iter and np.isfinite(result.objective)
    kinds = {loss["kind"] for loss in result.attrs["worker_losses"]}
    assert kinds == {"lost", "frozen"}
    assert "0" not in pool.workers and "2" not in pool.workers


def test_the_fit_functions_take_faults_in_the_stragglers_spec():
    X_small = X[:400]
    res = fit_pca(X_small, 2, method="gd", runtime="sim", n_workers=3, rng=0, max_iter=20,
                  tol=None, stragglers="gamma(mean=0.1, var=1e-4) + loss(workers=1, at=0.5)")
    assert res.attrs["faults"] == "loss(workers=[1], at=0.5)"
    assert res.attrs["worker_losses"][0]["worker_index"] == 1
    with pytest.raises(InvalidParameterError, match=r"^The loss terms of stragglers are "
                                                    r"simulated faults: use runtime='sim'"):
        fit_pca(X_small, 2, n_workers=2, stragglers="loss(workers=1, at=0.5)")
    with pytest.raises(InvalidParameterError, match=r"^The join and freeze terms of"):
        fit_pca(X_small, 2, n_workers=2,
                stragglers="join(at=1) + freeze(workers=0, at=1, for=1) + join(at=2)")
    with pytest.raises(InvalidParameterError, match="worker 5 is out of range for 3"):
        fit_pca(X_small, 2, runtime="sim", n_workers=3, stragglers="retire(workers=5, at=1)")


@pytest.mark.parametrize(("spec", "match"), [
    ("loss(workers=1)", "loss takes at, workers; got workers."),
    ("loss(workers=-1, at=1)", "'workers' parameter of loss must be a worker index"),
    ("freeze(workers=1, at=1, for=0)", "'for' parameter of freeze must be a number of seconds > 0"),
    ("join(count=0, at=1)", "'count' parameter of join must be an int in"),
    ("retire(workers=1, at=-2)", "'at' parameter of retire must be a number of seconds >= 0"),
    ("loss(workers=1, at=1e16)", "at most 1e\\+15"),
])
def test_bad_fault_terms_are_refused_in_one_line(spec, match):
    with pytest.raises(InvalidParameterError, match=match):
        parse_stragglers(spec)


def test_fault_terms_round_trip_and_for_is_spelled_as_in_the_spec():
    text = "loss(workers=[1, 2], at=3) + freeze(workers=[0], at=1, for=2.5) + join(count=2, at=4)"
    spec = parse_stragglers(text)
    assert spec.to_spec() == text
    assert isinstance(spec.faults[1], Freeze) and spec.faults[1].until == 3.5
    assert parse_stragglers(spec.to_spec()) == spec
    assert [type(f) for f in SimRuntime(3, faults=text).faults] == [Loss, Freeze, Join]
    with pytest.raises(InvalidParameterError, match="takes only loss, freeze, join and retire"):
        SimRuntime(3, faults="gamma(mean=1, var=1)")


def test_the_pool_alone_decides_moves_helpers_and_backups():
    """The pool without any runtime: statuses and times in, instructions out."""
    pool = WorkerPool(["a", "b", "c"], placement=[(0, 1), (1, 2), (2, 0)],
                      partition_rows=[10, 10, 10], backup_after=2.0)
    from daskstraggle.methods.base import WorkUnit

    units = [WorkUnit(i, pool.placement[i], np.zeros(2), 1) for i in range(3)]
    for i, unit in enumerate(units):
        calls.sent(pool, f"k{i}", unit, now=0.0)
    for i in range(2):  # a and b answer in 1 s; c does not
        task, outcome, out = calls.arrived(pool, f"k{i}", ("r", 1.0), now=1.0)
        assert task.worker == "abc"[i] and outcome == ("r", 1.0) and out == []
        calls.sent(pool, f"k{i}b", units[i], now=1.0)
    assert calls.backups(pool, now=1.9) == []  # two latencies: too few to judge
    calls.arrived(pool, "k0b", ("r", 1.0), now=2.0)
    assert calls.backups(pool, now=2.0) == []  # k2 waited 2 s: not more than 2 x median 1 s
    (backup,) = calls.backups(pool, now=2.5)
    assert backup.key == "k2" and pool.workers[backup.to_index] == "a"  # holds partition 0
    calls.backup_sent(pool, "k2", "k2-backup")
    pool.validate_state()
    task, outcome, out = calls.arrived(pool, "k2-backup", ("r", 0.5), now=3.5)
    assert task.worker == "a" and [o.keys for o in out] == [("k2",)]
    # a worker that retires, one that joins: the index moves, the newcomer takes it
    out = calls.on_status(pool, {"a": "running", "b": "closing_gracefully", "c": "running",
                          "d": "running"}, now=4.0)
    move = next(o for o in out if isinstance(o, MoveIndex))
    assert (move.index, move.to, move.kind, move.how) == (1, "d", "retired", "fetch")
    pool.validate_state()


def test_every_event_and_instruction_of_a_faulted_run_has_a_stimulus_id_the_trace_records():
    slow = "gamma(mean=0.1, var=1e-4) + slowdown(workers=1, factor=4)"
    faults = "loss(workers=0, at=0.5) + join(count=2, at=1.2) + freeze(workers=2, at=2, for=30)"
    with CheckedSim(4, latency=slow, faults=faults, rng=1, frozen_after=1.0) as rt:
        rt.stimulus_log = 100_000
        result = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
        log = list(rt.engine.log)
    assert rt.checked > 100
    seen: set[str] = set()
    for event, out in log:
        assert event.stimulus_id and all(i.stimulus_id for i in out), (event, out)
        seen.add(event.stimulus_id)
    # the coordinator's instructions carry the event that caused them; the pool's too,
    # but resends held back while no worker was left, which carry the event that held them
    pool_log = rt.engine.pool_log()
    assert 0 < len(pool_log) < len(log)
    for event, out in log:
        if (event, out) not in pool_log:
            assert {i.stimulus_id for i in out} <= {event.stimulus_id}
    for _, out in pool_log:
        assert {i.stimulus_id for i in out} <= seen
    # each move in the trace names the event that caused it: the loss, the freeze found
    # on a Tick, the join
    moves = [i for _, out in pool_log for i in out if isinstance(i, MoveIndex)]
    losses = result.attrs["worker_losses"]
    assert [m["stimulus_id"] for m in losses] == [m.stimulus_id for m in moves]
    causes = {m["kind"]: m["stimulus_id"].rsplit("-", 1)[0] for m in losses}
    assert causes == {"lost": "loss", "frozen": "tick", "adopted": "join"}, causes
    # numbered per run: the same seeded run names its events the same
    with SimRuntime(4, latency=slow, faults=faults, rng=1, frozen_after=1.0) as again:
        same = run_on(again, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
    assert same.attrs["worker_losses"] == losses


def test_a_simulated_fault_run_replays_through_a_fresh_pool():
    slow = "gamma(mean=0.1, var=1e-4) + slowdown(workers=1, factor=4)"
    faults = "loss(workers=0, at=0.5) + join(count=2, at=1.2) + freeze(workers=2, at=2, for=30)"
    with CheckedSim(4, latency=slow, faults=faults, rng=1, frozen_after=1.0) as rt:
        rt.stimulus_log = 100_000
        run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
        pool, stimuli = rt.worker_pool, rt.engine.pool_log()
    names = {type(event).__name__ for event, _ in stimuli}
    assert {"TaskSent", "TaskFinished", "StatusChanged", "Tick", "Sending"} <= names
    # the freeze was found on a Tick, which moved an index
    assert any(type(event).__name__ == "Tick" and any(isinstance(i, MoveIndex) for i in out)
               for event, out in stimuli)
    assert pool.fresh().replay(stimuli) == []
    # a replay of a changed run differs, and says where
    changed = list(stimuli)
    k = next(i for i, (event, _) in enumerate(changed) if type(event).__name__ == "StatusChanged")
    event, out = changed[k]
    changed[k] = (dataclasses.replace(event, status={**event.status, "9": "running"}), out)
    assert pool.fresh().replay(changed)[0][0] == event.stimulus_id


@pytest.mark.parametrize(("tol", "atol"), [(1e-8, 1e-10), (1e-6, 1e-6)])
def test_block_krylov_with_a_helper_keeps_the_clean_rounds_and_subspace(tol, atol):
    """The README's promise for a worker that joins and helps: the same rounds, and
    components within ``tol`` of the clean run's (block Krylov on a slowly decaying
    spectrum, stopped by its tolerance): the helper's partial sums change the order of
    addition, and the least-converged component carries that (7e-8..9e-8 at tol 1e-6)."""
    from daskstraggle.methods import make_method

    flat = rng.normal(size=(3000, 120)) * (1.0 / (1.0 + 0.02 * np.arange(120)))
    slow = "gamma(mean=0.1, var=1e-4) + slowdown(workers=1, factor=4)"
    runs = []
    for faults in (None, "join(count=1, at=0.5)"):
        with CheckedSim(3, latency=slow, faults=faults, rng=1) as rt:
            runs.append(run_on(rt, make_method("block"), PCA(n_components=5), open_matrix(flat),
                               stop=StopRule(max_iter=300, tol=tol), rng=0))
    clean, helped = runs
    assert helped.attrs["worker_joins"][0]["split_units"] >= clean.n_iter - 3
    assert helped.n_iter == clean.n_iter and helped.converged and clean.converged
    np.testing.assert_allclose(np.abs(helped.fitted["components"]),
                               np.abs(clean.fitted["components"]), atol=atol)


def test_overlapping_freezes_count_once():
    from daskstraggle.runtime.sim import _freeze_windows

    faults = parse_stragglers("freeze(workers=0, at=1, for=4) + freeze(workers=0, at=2, for=1)"
                              " + freeze(workers=[0, 1], at=6, for=1)").faults
    assert _freeze_windows(faults) == {"0": [(1.0, 5.0), (6.0, 7.0)], "1": [(6.0, 7.0)]}
    rt = SimRuntime(2, faults=faults)
    rt._freezes = _freeze_windows(faults)
    assert rt._frozen_end("0", 0.0, 2.0) == 6.0  # 1 s, frozen 1..5, then 1 s more
    assert rt._frozen_end("0", 2.0, 0.5) == 5.5  # started while frozen
    assert rt._frozen_end("1", 0.0, 2.0) == 2.0


def test_work_is_sent_again_only_after_its_index_moved():
    """A helper and the worker it helps lost together: the pool stops the helper, moves
    the index, and sends the index's unit again once, after the move (to where the data
    now is); with every worker gone the resend waits for the next decision."""
    from daskstraggle.engine.pool import Resend, StopHelping
    from daskstraggle.methods.base import WorkUnit

    pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[10, 10])
    unit = WorkUnit(0, (0,), np.zeros(2), 1)
    calls.sent(pool, "k0", unit, now=0.0)
    calls.sent(pool, "k1", WorkUnit(1, (1,), np.zeros(2), 1), now=0.0)
    calls.arrived(pool, "k0", ("r", 1.0), now=1.0)
    calls.arrived(pool, "k1", ("r", 3.0), now=3.0)  # index 1 is the slow one
    out = calls.on_status(pool, {"a": "running", "b": "running", "h": "running"}, now=3.5)
    assert [type(i).__name__ for i in out] == ["StartHelping"] and pool.helpers == {1: "h"}
    calls.helper_ready(pool, 1)
    parts = calls.split(pool, WorkUnit(1, (1,), np.zeros(2), 2))
    calls.sent_split(pool, WorkUnit(1, (1,), np.zeros(2), 2), ("p0", "p1"), now=4.0)
    assert parts is not None
    out = calls.on_status(pool, {"a": "running", "c": "running"}, now=5.0)  # b and h gone
    kinds = [type(i).__name__ for i in out]
    assert kinds == ["StopHelping", "MoveIndex", "Resend"], kinds
    (resend,) = [i for i in out if isinstance(i, Resend)]
    assert resend.index == 1 and sorted(resend.cancel) == ["p0", "p1"]
    assert [u.version for u, _ in resend.units] == [2]
    assert isinstance(out[0], StopHelping) and out[1].to == "c"
    pool.validate_state()
    # every worker gone: the stops wait, the resend comes with the move after a join
    calls.sent(pool, "k2", WorkUnit(0, (0,), np.zeros(2), 3), now=6.0)
    out = calls.on_status(pool, {}, now=7.0)
    assert [type(i).__name__ for i in out] == ["AwaitWorkers"]
    out = calls.on_status(pool, {"d": "running"}, now=8.0)
    assert [type(i).__name__ for i in out] == ["MoveIndex", "MoveIndex", "Resend"]
    assert out[-1].index == 0 and out[-1].cancel == ("k2",)


def test_a_wait_for_a_result_no_worker_computes_ends_in_one_line(monkeypatch):
    """Never hang: were a loss's work dropped instead of sent again (a bug), the run's next
    wait for a result could never end; it ends in one line at once instead."""
    def drop_the_units(self, index):
        resend = resend_of(self, index)
        return dataclasses.replace(resend, units=())

    resend_of = WorkerPool._resend
    monkeypatch.setattr(WorkerPool, "_resend", drop_the_units)
    with pytest.raises(StraggleError) as raised:
        _run(GD(), "loss(workers=1, at=0.7)")
    line = str(raised.value)
    assert "\n" not in line and line.startswith(
        "The run waits for a result that no worker computes (no task in flight after the "
        "worker pool's last decision, "), line
    assert "MoveIndex" in line and line.endswith("please report it with the run's log."), line
