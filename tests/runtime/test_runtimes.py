"""Runtimes: the Dask runtime on process workers matches the in-process runtime exactly."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import GD, StopRule, open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import ClusterConnectionError, InvalidParameterError, NonFiniteDataError
from daskstraggle.problems import PCA, Logistic
from daskstraggle.runtime import DaskRuntime, LocalRuntime, connect
from daskstraggle.runtime import dask as dask_runtime
from daskstraggle.runtime.dask import worker_addresses


def test_dask_and_local_runtimes_agree(dask_client, zarr_matrix):
    stop = StopRule(max_iter=30, tol=None)
    with LocalRuntime(n_workers=3) as rt:
        local = run_on(rt, GD(), PCA(n_components=3), zarr_matrix, stop=stop, rng=0)
    with DaskRuntime(dask_client) as rt:
        remote = run_on(rt, GD(), PCA(n_components=3), zarr_matrix, stop=stop, rng=0,
                        reference=True)
    np.testing.assert_allclose(remote.iterate, local.iterate, atol=1e-12)
    assert remote.n_iter == local.n_iter == 30
    assert remote.attrs["workers"] == worker_addresses(dask_client)
    assert remote.distance < 1e-6
    trace = remote.trace
    assert (trace["n_workers_used"] == 3).all()
    assert np.isfinite(trace["compute_duration"]).all()
    assert (np.diff(trace["wall_time"]) > 0).all()


def test_partitions_are_pinned_to_their_workers(dask_client, zarr_matrix):
    with DaskRuntime(dask_client) as rt:
        m = zarr_matrix.repartition(6)
        placement = GD().placement(m.n_partitions, rt.n_workers)
        rt._load(m, placement)
        who = dask_client.who_has([f for held in rt._held for f in held.values()])
        for i, held in enumerate(rt._held):
            for fut in held.values():
                assert list(who[fut.key]) == [rt.worker_names[i]]
        # each partition is loaded from the source by a task of its own key
        keys = [f.key for held in rt._held for f in held.values()]
        assert len(set(keys)) == 6 and all("load-p" in k for k in keys)


def test_a_run_after_another_on_the_same_data_keeps_its_loaded_partitions(
        dask_client, zarr_matrix):
    """auto's probe, then its run: the second load of the same matrix on the same
    runtime keeps the partitions the first left where the placement puts them again
    (their load tasks' keys are the first load's) and its statistics; other data, or
    another placement, loads afresh."""
    stop = StopRule(max_iter=3, tol=None)
    m = zarr_matrix.repartition(6)
    with DaskRuntime(dask_client) as rt:
        first = run_on(rt, GD(), PCA(n_components=2), m, stop=stop, rng=0)
        keys = [{p: f.key for p, f in held.items()} for held in rt._held]
        again = run_on(rt, GD(), PCA(n_components=2), m, stop=stop, rng=0)
        assert [{p: f.key for p, f in held.items()} for held in rt._held] == keys
        other = run_on(rt, GD(), PCA(n_components=2), zarr_matrix.repartition(6), stop=stop,
                       rng=0)
        fresh = [{p: f.key for p, f in held.items()} for held in rt._held]
    assert all(fresh[i][p] != keys[i][p] for i in range(len(keys)) for p in keys[i])
    np.testing.assert_array_equal(again.iterate, first.iterate)
    np.testing.assert_array_equal(other.iterate, first.iterate)


@pytest.mark.timeout(120)
def test_the_memory_check_does_not_wait_for_a_worker_busy_with_other_work():
    """A worker still running a task (an earlier run's, which a cancel cannot stop) has
    its memory read from its heartbeat once half the workers answered and the exact
    passes' backup bound passed: the check returns while that task still runs (it used
    to wait for it, up to ``timeouts.setup``)."""
    import time

    import dask
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client, \
            DaskRuntime(client) as rt, dask.config.set({"daskstraggle.timeouts.setup": 600}):
        busy = rt.worker_names[0]
        sleeper = client.submit(time.sleep, 40, workers=[busy], pure=False)
        while sleeper.status == "pending" and not client.processing().get(busy):
            time.sleep(0.05)
        info = rt._identity()
        own = rt._own_memory(rt.worker_names, info)
        assert sleeper.status == "pending"  # still sleeping: not waited for
        assert own[busy] == int(info[busy]["metrics"]["memory"])  # the heartbeat's
        assert own[rt.worker_names[1]] > 0


@pytest.mark.cluster
def test_a_share_far_below_the_limits_loads_without_measuring_the_workers(
        dask_client, zarr_matrix, monkeypatch):
    """Each worker's own memory is measured (a task on each, which waits for a busy one)
    only when the share would not fit beside its last heartbeat's and room for the
    kernels; a small share is loaded at once."""
    measured: list[list[str]] = []
    monkeypatch.setattr(DaskRuntime, "_own_memory",
                        lambda self, addresses, info: measured.append(addresses) or {})
    with DaskRuntime(dask_client) as rt:
        for allowance in (dask_runtime.KERNELS_ALLOWANCE, 2**60):  # 2**60: nothing fits
            monkeypatch.setattr(dask_runtime, "KERNELS_ALLOWANCE", allowance)
            run_on(rt, GD(), PCA(n_components=2), zarr_matrix, rng=0,
                   stop=StopRule(max_iter=1, tol=None))
            rt._unload()  # (the next run loads again)
    assert measured == [sorted(rt.worker_names)]  # the second run's only


def test_an_exact_pass_returns_as_its_last_fold_arrives(dask_client, zarr_matrix,
                                                        monkeypatch):
    # every pass (the load's statistics, the step-size iteration, the start and final
    # checks) waits for its folds; the last one to arrive must end the wait at once, not
    # after the poll interval (it did: 50 ms more per pass, 70 ms passes of a tiny problem).
    # With a poll interval and a membership interval (the pool's wake-up time) longer than
    # the test may run, only an arriving fold can end a wait: a missed one hangs the run
    # (pytest-timeout fails it)
    poll = 3600.0
    monkeypatch.setattr(dask_runtime, "FOLD_POLL", poll)
    monkeypatch.setattr(dask_runtime, "MEMBERSHIP_INTERVAL", poll)
    waits: list[bool] = []  # per wait of an exact pass: did it end with a fold queued?
    wait_ready = dask_runtime.wait_ready

    def watched(ac, timeout):
        wait_ready(ac, timeout)
        if timeout > poll / 2:
            waits.append(ac.has_ready())

    monkeypatch.setattr(dask_runtime, "wait_ready", watched)
    with DaskRuntime(dask_client) as rt:
        result = run_on(rt, GD(), PCA(n_components=2), zarr_matrix,
                        stop=StopRule(max_iter=2, tol=None), rng=0)
    assert result.n_iter == 2
    assert waits and all(waits), waits


def test_nan_is_detected_on_the_worker_with_its_partition(dask_client):
    X = np.random.default_rng(0).normal(size=(90, 3))
    X[70, 2] = np.inf
    y = np.sign(X[:, 0])
    with DaskRuntime(dask_client) as rt:
        with pytest.raises(NonFiniteDataError, match=r"Partition 2 \(rows 60-90\).*row 70"):
            run_on(rt, GD(), Logistic(), open_matrix(X, labels=y, n_partitions=3))


def test_runtime_starts_and_closes_its_own_cluster():
    with DaskRuntime(n_workers=2, processes=False) as rt:
        assert rt.n_workers == 2
        client = rt.client
    assert client.status == "closed"


def test_unreachable_scheduler_fails_fast():
    with pytest.raises(ClusterConnectionError, match="Could not reach the Dask scheduler"):
        connect(address="tcp://127.0.0.1:1", timeout=1.0)


def test_only_one_cluster_source():
    with pytest.raises(InvalidParameterError, match="Pass only one of"):
        connect(address="tcp://127.0.0.1:1", n_workers=2)


def test_fewer_rows_than_workers():
    with LocalRuntime(n_workers=5) as rt:
        with pytest.raises(InvalidParameterError, match="fewer than the 5 workers"):
            run_on(rt, GD(), PCA(n_components=1), open_matrix(np.eye(3)))


def test_time_budget_stops_the_run(low_rank_matrix):
    with LocalRuntime(n_workers=2) as rt:
        res = run_on(rt, GD(), PCA(n_components=2), open_matrix(low_rank_matrix),
                     stop=StopRule(max_iter=10**6, tol=None, time_budget=0.05))
    assert res.stop_reason == "time_budget"
    assert res.wall_time >= 0.05
