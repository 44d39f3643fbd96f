"""Every worker gone: a bounded wait for one to join, then one line naming the checkpoint.

Real faults: `dask worker --no-nanny` processes (nothing restarts them) SIGKILLed together
mid-run. The run used to end at once in ``ValueError: min() arg is an empty sequence``
(``replacement_targets`` with no live worker); it must wait ``timeouts.no-worker`` for a
worker, go on if one joins (exact methods on the clean iterates), or raise one
``WorkerLostError`` that names the last checkpoint.
"""

from __future__ import annotations

import warnings

import _pool as calls
import numpy as np
import pytest
from dask import config as dask_config

from daskstraggle import config, fit_pca, open_matrix
from daskstraggle.api import run_on
from daskstraggle.engine.pool import WorkerPool
from daskstraggle.errors import StraggleWarning, WorkerLostError
from daskstraggle.methods import GD
from daskstraggle.problems import PCA
from daskstraggle.runtime import DaskRuntime, LocalRuntime, StopRule

pytestmark = pytest.mark.cluster

#: Each task sleeps ~0.05 s, so a round lasts ~0.1 s.
SLOW = "gamma(mean=0.05, var=1e-6)"
#: Seconds the started processes may take to join (a busy machine starts them slowly).
START = 120


@pytest.fixture(scope="module")
def data():
    X = np.random.default_rng(0).normal(size=(1200, 8)) * np.linspace(3.0, 1.0, 8)
    return open_matrix(X)


@pytest.fixture
def scheduler():
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=0, processes=True, dashboard_address=None)
    try:
        yield cluster
    finally:
        cluster.close()


def _kill_all(workers):
    def kill() -> None:
        for worker in workers:
            worker.kill()
    return kill


def test_every_worker_lost_ends_in_one_line_naming_the_checkpoint(
        data, scheduler, dask_worker, at_round, tmp_path):
    from distributed import Client

    workers = [dask_worker(scheduler.scheduler_address) for _ in range(2)]
    checkpoint = tmp_path / "run.ckpt"
    with Client(scheduler, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=START)
        # (daskstraggle.config, imported above, has loaded the defaults this overrides:
        # dask.config.set on a missing parent key would drop them all on exit)
        with dask_config.set({"daskstraggle.timeouts.no-worker": "2s"}), \
                DaskRuntime(client, stragglers=SLOW, rng=0) as rt:
            assert config.seconds("timeouts.no-worker") == 2
            at_round(rt, 4, _kill_all(workers))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", StraggleWarning)
                with pytest.raises(WorkerLostError) as raised:
                    fit_pca(data, 3, method="gd", runtime=rt, max_iter=10_000, tol=None,
                            rng=0, checkpoint=checkpoint, checkpoint_iterations=1)
    message = str(raised.value)
    assert "\n" not in message
    assert "Every worker left the cluster and none joined within 2 s" in message
    assert f"--resume {str(checkpoint)!r}" in message and "after iteration" in message
    assert checkpoint.exists()


def test_every_worker_lost_then_one_joining_ends_on_the_clean_iterates(
        data, scheduler, dask_worker, at_round):
    from distributed import Client

    stop = StopRule(max_iter=12, tol=None)
    clean = run_on(LocalRuntime(2), GD(), PCA(n_components=3), data, stop=stop, rng=0)
    workers = [dask_worker(scheduler.scheduler_address) for _ in range(2)]
    late = dask_worker(scheduler.scheduler_address, joins_later=True)

    def kill_all_then_join() -> None:
        _kill_all(workers)()
        late.join()

    with Client(scheduler, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=START)
        with dask_config.set({"daskstraggle.timeouts.no-worker": f"{START}s"}), \
                DaskRuntime(client, stragglers=SLOW, rng=0) as rt:
            at_round(rt, 4, kill_all_then_join)
            with pytest.warns(StraggleWarning, match="left the cluster"):
                res = run_on(rt, GD(), PCA(n_components=3), data, stop=stop, rng=0)
    assert res.n_iter == 12
    lost = [m for m in res.attrs["worker_losses"] if m["kind"] == "lost"]
    # both indices moved, and in the end to the one worker there is: the newcomer (the
    # scheduler may see the two kills apart: the first index then moves to the other
    # killed worker before both move on, so an index can be lost twice)
    assert {m["worker_index"] for m in lost} == {0, 1}
    last_move = {m["worker_index"]: m["moved_to"] for m in lost}
    assert len(set(last_move.values())) == 1 and len(set(rt.worker_names)) == 1
    np.testing.assert_allclose(res.iterate, clean.iterate, rtol=1e-9, atol=1e-12)


def test_a_cancelled_or_failed_fold_raises_and_is_never_folded_in(dask_client):
    """``as_completed(with_results=True)`` hands a cancelled or failed future's error over
    as its value: a pass must raise it (then the scheduler check turns a lost scheduler
    into one line), never fold the exception object in as a partition's result."""
    from concurrent.futures import CancelledError

    from distributed import Event

    def fail() -> None:
        raise ArithmeticError("boom")

    def wait_for(name: str) -> None:
        # holds its worker's only thread until the test sets the event (bounded: 60 s);
        # a cancelled task's thread runs on, so a later task may queue behind it there
        Event(name).wait(60)

    release = Event("daskstraggle-test-release-cancelled", client=dask_client)
    rt = DaskRuntime(dask_client)
    # (the pool a run's load makes: it takes the pass's events)
    rt.engine.pool = WorkerPool(rt.worker_names[:1] * 2, placement=[(0,), (1,)],
                                partition_rows=[1, 1])
    try:
        done = dask_client.submit(int, 3, pure=False)
        slow = dask_client.submit(wait_for, release.name, pure=False)
        dask_client.cancel([slow])
        release.set()
        with pytest.raises(CancelledError):
            rt._wait_folds([[0, [0], done], [1, [1], slow]], int, (), None)
        failed = dask_client.submit(fail, pure=False)
        with pytest.raises(ArithmeticError, match="boom"):
            rt._wait_folds([[0, [0], failed]], int, (), None)
    finally:
        rt.close()


def test_a_cluster_left_with_only_a_frozen_worker_ends_in_the_bounded_line(monkeypatch):
    """The wait for a worker accepts only a worker that may take work: a cluster whose
    only worker was found frozen ends in the WorkerLostError line after the bound, never
    in a loop of moves onto that worker."""
    import dask

    from daskstraggle.engine.pool import WorkerPool
    from daskstraggle.errors import WorkerLostError
    from daskstraggle.runtime import _membership

    class Client:
        def wait_for_workers(self, n, timeout):  # a worker is there at once
            return None

    pool = WorkerPool(["a", "b"], placement=[(0,), (1,)], partition_rows=[5, 5])
    pool.shunned.add("b")
    monkeypatch.setattr(_membership, "worker_status", lambda client: {"b": "running"})
    assert calls.on_status(pool, {"b": "running"}, now=1.0)[-1].__class__.__name__ == "AwaitWorkers"
    assert not pool.usable({"b": "running"}) and pool.usable({"b": "running", "c": "running"})
    assert not pool.usable({"c": "closing_gracefully"})
    with dask.config.set({"daskstraggle.timeouts.no-worker": "0.5s"}):
        with pytest.raises(WorkerLostError, match=r"^Every worker left the cluster and none "
                           r"joined within 0\.5 s"):
            _membership.wait_for_any_worker(Client(), pool.usable)
        status = {"b": "running", "c": "running"}
        monkeypatch.setattr(_membership, "worker_status", lambda client: status)
        assert _membership.wait_for_any_worker(Client(), pool.usable) == status
