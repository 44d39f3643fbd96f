"""A worker that dies mid-run: its partitions are reloaded on a live worker, the run goes on.

Faults are real: SIGKILL to a worker process of a LocalCluster (whose nanny restarts it at a
new address) and to a `dask worker --no-nanny` process (nothing restarts it). Exact methods
must end with the same iterates as a clean run; nothing may wait on a task pinned to a
worker that is gone.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from dask import config as dask_config

from daskstraggle import open_matrix
from daskstraggle._cli_format import format_result
from daskstraggle.api import run_on
from daskstraggle.engine.coordinator import LOG_SIZE
from daskstraggle.errors import StraggleWarning
from daskstraggle.methods import DSAG, GD, CodedGD, make_method
from daskstraggle.problems import PCA, Logistic
from daskstraggle.runtime import DaskRuntime, LocalRuntime, SimRuntime, StopRule
from daskstraggle.runtime.checkpoint import load_checkpoint
from daskstraggle.runtime.dask import replacement_targets
from daskstraggle.testing import free_port

pytestmark = pytest.mark.cluster

#: Each task sleeps ~0.05 s, so a round lasts ~0.1 s.
SLOW = "gamma(mean=0.05, var=1e-6)"

#: Seconds a started process (a scheduler, a worker, the CLI) may take to reach a state
#: the test waits for: generous, as a busy machine starts Python processes slowly; a hang
#: beyond it fails with a message.
START = 120


def _arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 12)) * np.linspace(3.0, 1.0, 12)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=3000) > 0, 1.0, -1.0)
    return X, y


@pytest.fixture(scope="module")
def data():
    X, y = _arrays()
    return open_matrix(X, labels=y)


def _kill(pid: int) -> Callable[[], None]:
    return lambda: os.kill(pid, signal.SIGKILL)


def _worker_pid(rt: DaskRuntime, index: int) -> int:
    address = rt.worker_names[index]
    return rt.client.run(os.getpid, workers=[address])[address]


def _losses(res) -> list[dict]:
    """The result's worker losses; any other move must be a newcomer's adoption (the
    nanny's restart may join after the lost index went to a survivor)."""
    moves = res.attrs["worker_losses"]
    others = [m for m in moves if m["reason"] != "left the cluster"]
    assert all(m["reason"].endswith("joined") for m in others), moves
    return [m for m in moves if m["reason"] == "left the cluster"]


def test_replacement_targets_prefer_new_workers_then_spread():
    assert replacement_targets(["a", "b"], ["a", "b"]) == {}
    assert replacement_targets(["a", "b", "c"], ["a", "c", "x"]) == {1: "x"}
    assert replacement_targets(["a", "b", "c", "d"], ["a", "d"]) == {1: "a", 2: "d"}
    assert replacement_targets(["a", "a", "b"], ["b"]) == {0: "b", 1: "b"}


@pytest.mark.parametrize(("method", "problem"), [
    (GD(), PCA(n_components=3)),
    # coded GD through the same loss: simulated in test_sim_faults (gd and coded) in every
    # run, on real processes with --runslow
    pytest.param(CodedGD("cyclic-repetition", n_stragglers=1, rng=0), Logistic(alpha=0.01),
                 marks=pytest.mark.slow),
])
def test_exact_methods_finish_with_the_clean_iterates(data, fault_cluster, at_round, method,
                                                       problem):
    stop = StopRule(max_iter=20, tol=None)
    clean = run_on(LocalRuntime(3), method, problem, data, stop=stop, rng=0)
    with DaskRuntime(fault_cluster[1], stragglers=SLOW, rng=0) as rt:
        at_round(rt, 4, _kill(_worker_pid(rt, 1)))
        with pytest.warns(StraggleWarning, match="left the cluster; its partitions") as said:
            res = run_on(rt, method, problem, data, stop=stop, rng=0)
    assert res.n_iter == 20
    np.testing.assert_allclose(res.iterate, clean.iterate, rtol=1e-9, atol=1e-12)
    (loss,) = _losses(res)
    assert loss["worker_index"] == 1 and loss["moved_to"] != loss["lost"]
    # nothing waited on the dead worker's task: the membership check saw it leave (not
    # the frozen-worker bound, a minute by default, which would move it as "frozen")
    assert loss["kind"] == "lost"
    assert not [m for m in res.attrs["worker_losses"] if m["kind"] == "frozen"]
    assert not [w for w in said if "frozen" in str(w.message)]


def test_dsag_goes_on_and_its_final_pass_does_not_hang(data, fault_cluster, at_round):
    with DaskRuntime(fault_cluster[1], stragglers=SLOW, rng=0) as rt:
        at_round(rt, 4, _kill(_worker_pid(rt, 2)))
        with pytest.warns(StraggleWarning, match="left the cluster"):
            res = run_on(rt, DSAG(n_wait=2), Logistic(alpha=0.01), data,
                         stop=StopRule(max_iter=30, tol=None), rng=0)
    assert res.n_iter == 30 and np.isfinite(res.objective)
    # the fitted values come from an exact pass over every partition, after the loss
    assert res.attrs["worker_losses"][0]["worker_index"] == 2


def test_retiring_workers_are_left_before_they_go(data, fault_cluster, at_round):
    stop = StopRule(max_iter=20, tol=None)
    clean = run_on(LocalRuntime(3), GD(), PCA(n_components=3), data, stop=stop, rng=0)
    client = fault_cluster[1]
    # frozen_after: a worker index left on a retiring worker (given no task) would be
    # moved only after a minute, as frozen
    with DaskRuntime(client, stragglers=SLOW, rng=0, frozen_after=60.0) as rt:
        stays, goes = rt.worker_names[0], rt.worker_names[1]
        # a retirement that never ends (the worker stays in the cluster, closing
        # gracefully, and gets no task ever again: only an early move gets its work
        # done), then an adaptive scale-down that closes the worker once Dask has copied
        # its data away
        at_round(rt, 4, lambda: client.retire_workers([stays], close_workers=False,
                                                      remove=False))
        at_round(rt, 8, lambda: client.retire_workers([goes], close_workers=True))
        with pytest.warns(StraggleWarning, match=r"is retiring \(closing gracefully\); its "
                          "partitions"):
            res = run_on(rt, GD(), PCA(n_components=3), data, stop=stop, rng=0)
        assert not {stays, goes} & set(rt.worker_names)
    moves = res.attrs["worker_losses"]
    # both moved as retiring (kind "retired" below), none as found frozen after a minute
    assert (moves[0]["lost"], moves[0]["worker_index"]) == (stays, 0)
    assert {m["lost"] for m in moves} == {stays, goes}  # (goes may have taken index 0)
    assert all(m["kind"] == "retired" for m in moves), moves
    # the targets fetched the partitions from the retiring workers: nothing reloaded
    assert all(m["reloaded"] == [] for m in moves)
    assert f"worker retired {stays} (index 0): partitions [0] moved to" in format_result(res)
    np.testing.assert_allclose(res.iterate, clean.iterate, rtol=1e-9, atol=1e-12)


def test_a_users_handler_on_a_workers_topic_is_left_alone(data, fault_cluster):
    """The runtime subscribes to its workers' event topics (to hear of retirements); a
    client keeps one handler per topic, so a topic the user already handles is skipped
    (the status poll covers it), and the runtime's own are gone once it closes (distributed's
    unsubscribe_topic keeps the handler: a second run would have taken its own for the
    user's)."""
    client = fault_cluster[1]
    heard: list[object] = []
    first, *others = sorted(client.scheduler_info(n_workers=-1)["workers"])
    client.subscribe_topic(first, heard.append)
    try:
        with DaskRuntime(client, rng=0) as rt:
            run_on(rt, GD(), PCA(n_components=2), data, stop=StopRule(max_iter=3, tol=None), rng=0)
            assert client._event_handlers[first] == heard.append
            assert set(others) <= set(client._event_handlers)  # the runtime's own
        assert client._event_handlers[first] == heard.append
        assert not set(others) & set(client._event_handlers)
    finally:
        client.unsubscribe_topic(first)


def test_a_worker_dying_while_the_cluster_starts_is_one_line(monkeypatch):
    import distributed

    from daskstraggle.errors import ClusterConnectionError
    from daskstraggle.runtime._connect import start_local_cluster

    def dies(*args, **kwargs):  # what LocalCluster raises when a worker process is killed
        raise RuntimeError("Nanny failed to start.") from RuntimeError(
            "Nanny failed to start worker process")

    monkeypatch.setattr(distributed, "LocalCluster", dies)
    with pytest.raises(ClusterConnectionError, match=r"Could not start a LocalCluster of 2 "
                       r"worker processes \(RuntimeError: Nanny failed to start worker"):
        start_local_cluster(2, threads_per_worker=1, processes=True, config={})


def test_min_workers_waits_for_workers_that_join_late():
    from distributed import Client, LocalCluster

    from daskstraggle.errors import ClusterConnectionError

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        with pytest.raises(ClusterConnectionError, match=r"Only 1 of the 3 workers asked for "
                           r"\(min_workers, CLI: --min-workers\) joined"):
            DaskRuntime(client, min_workers=3, min_workers_timeout=1.0)
        late = threading.Timer(1.0, cluster.scale, args=(2,))
        late.start()
        with DaskRuntime(client, min_workers=2, min_workers_timeout=float(START)) as rt:
            assert rt.n_workers == 2
        late.join()


def test_min_workers_needs_an_existing_cluster(capsys, tmp_path):
    import zarr

    from daskstraggle import fit_pca
    from daskstraggle.cli import main
    from daskstraggle.errors import InvalidParameterError

    X = np.random.default_rng(0).normal(size=(100, 4))
    with pytest.raises(InvalidParameterError, match="'min_workers' parameter of fit_pca"):
        fit_pca(X, 2, runtime="local", min_workers=2)
    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=X, chunks=(50, 4))
    assert main(["pca", str(path), "--min-workers", "2", "--workers", "2"]) == 2
    assert "(CLI: --min-workers) waits for the workers of an existing cluster" in \
        capsys.readouterr().err


def test_a_killed_scheduler_ends_the_run_in_one_line(tmp_path):
    import zarr

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, 10))
    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=X, chunks=(2000, 10))
    address = f"tcp://127.0.0.1:{free_port()}"
    dask = [sys.executable, "-m", "distributed.cli"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen([*dask[:2], "distributed.cli.dask_scheduler", "--host",
                                  "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                                  "--no-dashboard"], **quiet)
    workers = [subprocess.Popen([*dask[:2], "distributed.cli.dask_worker", address,
                                 "--nthreads", "1", "--no-dashboard"], **quiet)
               for _ in range(2)]
    try:
        cli = subprocess.Popen(
            [sys.executable, "-m", "daskstraggle", "pca", str(path), "--scheduler", address,
             "--min-workers", "2", "--method", "gd", "--tol", "1e-14", "--max-iter", "500",
             "--stragglers", "gamma(mean=0.2, var=1e-6)", "--quiet",
             "--checkpoint", str(tmp_path / "run.ckpt"), "--checkpoint-iterations", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ck = tmp_path / "run.ckpt"
        deadline = time.perf_counter() + START
        while not (ck.exists() and load_checkpoint(ck)["iteration"] >= 2):  # iterating
            if cli.poll() is not None or time.perf_counter() > deadline:
                cli.kill()
                pytest.fail(f"the run did not get going in {START} s: {cli.communicate()}")
            time.sleep(0.1)
        scheduler.kill()
        try:  # the run's waits are bounded (30 s on the scheduler): it ends by itself
            out, err = cli.communicate(timeout=START)
        except subprocess.TimeoutExpired:
            cli.kill()
            pytest.fail(f"the run did not end {START} s after the scheduler died: "
                        f"{cli.communicate()}")
        assert cli.returncode == 1, (out, err)
        assert len(err.strip().splitlines()) == 1, err  # one line, whichever check saw it first
        (line,) = err.strip().splitlines()
        assert line.startswith(f"error: Lost the connection to the Dask scheduler at "
                               f"{address!r} ("), err
        # with the last checkpoint to carry on from
        done = load_checkpoint(tmp_path / "run.ckpt")["iteration"]
        assert line.endswith(f"); no result was written. Restart the scheduler (and workers) "
                             f"and continue from the last checkpoint (after iteration {done}): "
                             f"--resume {str(tmp_path / 'run.ckpt')!r} (API: resume=)."), err
    finally:
        for proc in [scheduler, *workers]:
            proc.kill()
            proc.wait()


def test_a_client_that_gave_up_reconnecting_reads_as_a_lost_scheduler(data):
    # a client closes itself when it cannot reconnect within its timeout; what the run
    # calls after that (a submit, an identity) must end in the one line, not in
    # ClosedClientError or AttributeError (seen on a busy machine, where that timeout
    # passed before one of the run's own bounded waits)
    from distributed.client import ClosedClientError

    from daskstraggle.errors import SchedulerLostError

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                                  "--host", "127.0.0.1", "--port", str(port),
                                  "--no-dashboard"], **quiet)
    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                               "--nthreads", "1", "--no-dashboard"], **quiet)
    try:
        deadline = time.perf_counter() + START
        while scheduler.poll() is None and time.perf_counter() < deadline:
            try:  # listening?
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        with DaskRuntime(address=address, timeout=START) as rt:
            rt.client._timeout = 1.0  # give up reconnecting after 1 s, not START
            scheduler.kill()
            deadline = time.perf_counter() + START
            while rt.client.status != "closed":
                assert time.perf_counter() < deadline, rt.client.status
                time.sleep(0.1)
            with pytest.raises(SchedulerLostError) as err:
                run_on(rt, GD(), PCA(n_components=1), data, stop=StopRule(max_iter=3))
            with pytest.raises(ClosedClientError) as raw:  # what a submit mid-run meets
                rt.client.submit(sum, [1, 2])
            assert str(rt._lost(raw.value)).startswith(
                f"Lost the connection to the Dask scheduler at {address!r} (the client is "
                f"closed: ClosedClientError); no result was written.")
        assert str(err.value).startswith(
            f"Lost the connection to the Dask scheduler at {address!r} (the client is "
            f"closed"), err.value
        assert "\n" not in str(err.value)
    finally:
        for proc in [scheduler, worker]:
            proc.kill()
            proc.wait()


def test_a_scheduler_lost_anywhere_in_the_run_spares_the_clean_up_its_wait(
        dask_client, data, monkeypatch):
    # wherever the run meets the lost scheduler (here: sending the 5th unit), the clean-up
    # knows it before it runs, and does not try to remove the injector from a scheduler
    # that is gone (a 10 s connect timeout, then a second stderr line, seen in CI)
    from daskstraggle.errors import SchedulerLostError
    from daskstraggle.runtime import inject

    removed: list[str] = []
    real_remove = inject.remove_injector
    monkeypatch.setattr(inject, "remove_injector", lambda client, name: removed.append(name))
    rt = DaskRuntime(dask_client, stragglers="gamma(mean=0.001, var=1e-8)", rng=0)
    submit, sent = rt._submit, []

    def lost_on_the_fifth(unit, problem):
        sent.append(unit)
        if len(sent) == 5:
            raise SchedulerLostError("Lost the connection to the Dask scheduler (test)")
        submit(unit, problem)

    monkeypatch.setattr(rt, "_submit", lost_on_the_fifth)
    try:
        with pytest.raises(SchedulerLostError, match="test"):
            run_on(rt, GD(), PCA(n_components=2), data, stop=StopRule(max_iter=5, tol=None),
                   rng=0)
        assert removed == []  # the clean-up did not wait on the (supposedly) lost scheduler
    finally:
        for name in inject_names(dask_client):  # it is not lost: leave the cluster clean
            real_remove(dask_client, name)
        rt.close()


def inject_names(client) -> list[str]:
    """The straggler injectors installed on ``client``'s workers."""
    from daskstraggle.runtime.inject import INJECTOR_PREFIX

    plugins = client.run(lambda dask_worker: list(dask_worker.plugins))
    return sorted({n for names in plugins.values() for n in names
                   if n.startswith(INJECTOR_PREFIX)})


def test_a_killed_client_leaves_no_injector_on_a_shared_cluster(fault_cluster):
    from distributed import Client

    from daskstraggle.runtime.inject import INJECTOR_PREFIX

    script = (
        "import sys, time\n"
        "from distributed import Client\n"
        "from daskstraggle.latency.spec import parse_stragglers\n"
        "from daskstraggle.runtime.dask import worker_addresses\n"
        "from daskstraggle.runtime.inject import install_injector\n"
        "client = Client(sys.argv[1], set_as_default=False)\n"
        "model = parse_stragglers('gamma(mean=1.0, var=0.01)').model\n"
        "install_injector(client, model, worker_addresses(client), seed=0)\n"
        "print('installed', flush=True)\n"
        "time.sleep(600)\n"
    )

    def injectors(client: Client) -> list[str]:
        plugins = client.run(lambda dask_worker: list(dask_worker.plugins))
        return sorted({p for names in plugins.values() for p in names
                       if p.startswith(INJECTOR_PREFIX)})

    cluster, client = fault_cluster  # shared: count only the injector installed here
    before = set(injectors(client))
    user = subprocess.Popen([sys.executable, "-c", script, cluster.scheduler_address],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert user.stdout.readline().strip() == "installed"
        (mine,) = set(injectors(client)) - before
        user.kill()
        user.wait()
        deadline = time.perf_counter() + START
        while mine in injectors(client) and time.perf_counter() < deadline:
            time.sleep(0.2)
        assert mine not in injectors(client), f"still installed after {START} s"
        assert not [n for n in client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.plugins)) if mine in n]  # its janitor
    finally:
        user.kill()
        user.wait()


def test_a_clean_up_step_that_never_answers_is_bounded(monkeypatch):
    # removing a plugin waits for every worker's answer; a frozen (SIGSTOPped) worker never
    # gives one, so the run's end must not wait for it
    from daskstraggle.runtime import _resilience

    monkeypatch.setitem(dask_config.config["daskstraggle"]["timeouts"], "cleanup", 0.5)
    release = threading.Event()
    # the bound ends the wait: this warning comes only while the step is still running
    # (left to itself it would return after 60 s, without a warning)
    with pytest.warns(StraggleWarning, match=r"Could not remove the injector \(no answer "
                      r"within 0.5 s: a worker may be frozen\)"):
        _resilience.quietly("remove the injector", release.wait, 60)
    release.set()
    with pytest.warns(StraggleWarning, match=r"Could not stop it \(OSError: gone\)"):
        _resilience.quietly("stop it", _raise, OSError("gone"))


def _raise(err: BaseException) -> None:
    raise err


def test_a_frozen_worker_does_not_hold_up_the_final_exact_pass(data, fault_cluster, at_round,
                                                               caplog):
    # DSAG goes on without the frozen worker; the exact pass after the run needs its
    # partitions, which a backup computes on another worker (from the source)
    with DaskRuntime(fault_cluster[1], rng=0) as rt:
        pid = _worker_pid(rt, 2)
        frozen = rt.worker_names[2]
        try:
            at_round(rt, 5, lambda: os.kill(pid, signal.SIGSTOP))
            with caplog.at_level(logging.WARNING, logger="daskstraggle.runtime.dask"):
                res = run_on(rt, DSAG(n_wait=2), Logistic(alpha=0.01), data,
                             stop=StopRule(max_iter=25, tol=None), rng=0)
        finally:
            os.kill(pid, signal.SIGCONT)
    # the frozen worker kept its index (too short a run to call it frozen): the final
    # pass computed its partitions elsewhere, a backup ending the wait for the frozen one
    assert "worker_losses" not in res.attrs
    backups = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith(f"exact pass: worker {frozen} is slow")]
    assert backups, [r.getMessage() for r in caplog.records]
    # the fitted values are the exact ones at the returned point
    from daskstraggle.problems import Block, block_stats

    block = Block(*_arrays()[:1], y=_arrays()[1])
    bound = Logistic(alpha=0.01).bind(block_stats(block))
    exact = bound.objective(bound.kernel(block, res.iterate).values, res.iterate)
    assert res.objective == pytest.approx(exact, rel=1e-12)


def test_a_share_above_the_memory_limit_is_refused_before_loading():
    import dask.array as da
    from distributed import Client, LocalCluster

    from daskstraggle.errors import InvalidParameterError

    X = da.zeros((120_000, 1000), chunks=(10_000, 1000))  # 960 MB, never computed
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit="1GB",
                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        address = next(iter(client.scheduler_info()["workers"]))
        # beside the worker's own memory (measured once its kernels are loaded) and the
        # 0.16 GB of one partition of 10000 rows, read and decoded
        with DaskRuntime(client) as rt, pytest.raises(
                InvalidParameterError, match=rf"Worker {address} would hold 0.96 GB of the "
                r"matrix beside its own 0\.[1-4]\d* GB and 0.16 GB read while loading "
                r"\(1\.[1-5]\d* GB\), more than 80% of its memory limit of 1 GB"):
            run_on(rt, GD(), PCA(n_components=2), open_matrix(X), rng=0)
        # a share that fits runs
        small = np.random.default_rng(0).normal(size=(1000, 1000))
        with DaskRuntime(client) as rt:
            res = run_on(rt, GD(), PCA(n_components=1), open_matrix(small),
                         stop=StopRule(max_iter=2, tol=None), rng=0)
        assert res.n_iter == 2


def test_a_worker_without_a_nanny_is_replaced_then_a_newcomer_takes_its_index_back(
        data, at_round, dask_worker):
    from distributed import Client, LocalCluster

    stop = StopRule(max_iter=40, tol=None)
    clean = run_on(LocalRuntime(3), GD(), PCA(n_components=3), data, stop=stop, rng=0)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    try:
        first = dask_worker(cluster.scheduler_address)  # nothing restarts it
        late = dask_worker(cluster.scheduler_address, joins_later=True)
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(3, timeout=START)
            with DaskRuntime(client, stragglers=SLOW, rng=0) as rt:
                index = next(i for i in range(3) if _worker_pid(rt, i) == first.pid)
                before = rt.worker_names
                at_round(rt, 3, _kill(first.pid))
                # GD needs every index each round: by round 6 the lost one has moved
                at_round(rt, 6, late.join)
                rt.stimulus_log = LOG_SIZE  # record the engine's inputs, for a replay
                with pytest.warns(StraggleWarning, match="left the cluster"):
                    res = run_on(rt, GD(), PCA(n_components=3), data, stop=stop, rng=0)
                assert len(set(rt.worker_names)) == 3  # one worker per index again
                pool, stimuli = rt.worker_pool, rt.engine.pool_log()
        lost, adopted = res.attrs["worker_losses"]
        # no nanny, no restart: a survivor took the lost index
        assert lost["worker_index"] == index and lost["moved_to"] in before
        assert lost["moved_to"] != lost["lost"]
        # the survivor that took the lost index hands one of its two to the newcomer
        assert adopted["worker_index"] in (index, before.index(lost["moved_to"]))
        assert adopted["lost"] == lost["moved_to"] and adopted["reason"].endswith("joined")
        assert adopted["moved_to"] not in (lost["lost"], lost["moved_to"])
        assert "worker moved " in format_result(res)
        np.testing.assert_allclose(res.iterate, clean.iterate, rtol=1e-9, atol=1e-12)
        # the real run's decisions replay through a fresh engine: the pool's (the loss,
        # the adoption) and the coordinator's rounds, to the same instructions
        assert stimuli and pool.fresh().replay(stimuli) == []
        assert [type(d.instruction).__name__ for d in pool.log] == [
            "MoveIndex", "MoveIndex"]
        # and the same scenario as a fault spec in simulated time ends on the same answer
        with SimRuntime(3, latency=SLOW, rng=0,
                        faults=f"loss(workers={index}, at=0.2) + join(count=1, at=0.5)") as sim:
            simulated = run_on(sim, GD(), PCA(n_components=3), data, stop=stop, rng=0)
        kinds = [m["kind"] for m in simulated.attrs["worker_losses"]]
        assert kinds == ["lost", "adopted"]
        np.testing.assert_allclose(simulated.iterate, res.iterate, rtol=1e-9, atol=1e-12)
    finally:
        cluster.close()


@pytest.mark.parametrize(("method", "problem"), [
    (GD(), PCA(n_components=3)),
    # with --runslow (simulated in every run: test_sim_faults' joins with gd and coded,
    # and block Krylov with a helper):
    # coded messages: each partition's coefficient applies to its share of the rows
    pytest.param(CodedGD("cyclic-repetition", n_stragglers=1, rng=0), Logistic(alpha=0.01),
                 marks=pytest.mark.slow),
    # block Krylov: a helped round's sums are the clean round's, so the same rounds follow
    pytest.param(make_method("block"), PCA(n_components=3), marks=pytest.mark.slow),
])
def test_a_worker_joining_beyond_the_worker_count_helps_the_slowest_index(
        data, fault_cluster, at_round, dask_worker, method, problem):
    from daskstraggle.runtime.dask import worker_addresses

    cluster, client = fault_cluster
    slow = f"{SLOW} + slowdown(workers=1, factor=4)"  # worker index 1 is the slowest
    newcomer = dask_worker(cluster.scheduler_address, joins_later=True)
    split = 6  # units of index 1 the helper shares before the run may end

    class UntilHelped(StopRule):
        """Ends the run once the newcomer has shared ``split`` units, however many rounds
        its joining and loading took (a busy machine slows them; the rounds go on)."""

        __slots__ = ()

        def check(self, *, iteration: int, gap: float | None, elapsed: float) -> str | None:
            joins = [] if rt.worker_pool is None else rt.worker_pool.joins
            if iteration >= 30 and joins and joins[0]["split_units"] >= split:
                return "max_iter"
            return StopRule.check(self, iteration=iteration, gap=gap, elapsed=elapsed)

    with DaskRuntime(client, stragglers=slow, rng=0) as rt:
        before = rt.worker_names
        at_round(rt, 3, newcomer.join)
        res = run_on(rt, method, problem, data, stop=UntilHelped(max_iter=1000, tol=None), rng=0)
        (joined,) = set(worker_addresses(client)) - set(before)
        assert rt.worker_names == before  # the methods keep their 3 worker indices
    assert res.n_iter < 1000, "the newcomer did not help within 1000 rounds"
    clean = run_on(LocalRuntime(3), method, problem, data,
                                stop=StopRule(max_iter=res.n_iter, tol=None), rng=0)
    (join,) = res.attrs["worker_joins"]
    assert (join["worker"], join["helps"]) == (joined, 1)
    assert join["partitions"] == res.attrs["placement"][1]
    # it computed part of index 1's rows in the later rounds, the larger part (no
    # injected delay there), and the sums of the two parts are the clean run's
    assert join["split_units"] >= split and join["own_share"] < 0.5
    assert "worker_losses" not in res.attrs
    np.testing.assert_allclose(res.iterate, clean.iterate, rtol=1e-9, atol=1e-12)
    assert f"worker joined {joined}: helped index 1 (" in format_result(res)
