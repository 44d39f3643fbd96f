"""Bounded-divergence replication of the run's state on the scheduler (MLfabric).

The divergence rule is the engine's (``CheckpointSchedule(divergence=D)``); the replica
is a checkpoint published to the scheduler. Tested in process with a stand-in for the
client's dataset calls, and once with real processes: a CLI run on a separate cluster is
SIGKILLed and the same command with ``--resume replica`` ends on the clean iterates.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

from daskstraggle import Result, fit_least_squares
from daskstraggle.api import run_on
from daskstraggle.cli import main
from daskstraggle.engine.checkpoint import CheckpointSchedule
from daskstraggle.errors import DataNotFoundError, InvalidDataError, InvalidParameterError
from daskstraggle.methods import make_method
from daskstraggle.problems import LeastSquares
from daskstraggle.runtime import LocalRuntime, StopRule
from daskstraggle.runtime.checkpoint import load_state
from daskstraggle.runtime.replica import Replica, load_replica, replica_name


class Datasets:
    """The scheduler's published datasets, as ``distributed.Client`` reaches them."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.published: list[int] = []

    def publish_dataset(self, override: bool = False, **named: Any) -> None:
        assert override
        self.data.update(named)
        self.published.append(load_state(next(iter(named.values())), where="x",
                                         writer="y")["iteration"])

    def list_datasets(self) -> list[str]:
        return list(self.data)

    def get_dataset(self, name: str) -> Any:
        return self.data[name]

    def unpublish_dataset(self, name: str) -> None:
        del self.data[name]


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, 6)) * np.linspace(3.0, 0.3, 6)
    return X, X @ rng.normal(size=6) + 0.1 * rng.normal(size=300)


def _run(writer: Any, max_iter: int, resume: dict[str, Any] | None = None) -> Result:
    from daskstraggle.data import open_matrix

    X, y = _data()
    with LocalRuntime(n_workers=3) as rt:
        return run_on(rt, make_method("gd"), LeastSquares(), open_matrix(X, labels=y),
                      stop=StopRule(max_iter=max_iter, tol=None), rng=0,
                      record_iterates=True, checkpoint=writer, resume=resume)


def test_the_rule_writes_before_the_iterate_would_drift_past_the_bound():
    schedule = CheckpointSchedule(divergence=1.0)
    assert schedule.interval is None and schedule.iterations is None
    schedule.start(0, now=0.0)
    assert schedule.due(1, 0.0, np.zeros(3))  # nothing written yet
    schedule.start(1, 0.0, np.zeros(3))
    points = [np.full(3, 0.1 * k) for k in range(1, 8)]  # steps of 0.173
    due = [schedule.due(k + 2, 0.0, p) for k, p in enumerate(points)]
    # |p_k - 0| + 0.173 > 1 from |p_k| = 0.866 (k = 5) on
    assert due == [False, False, False, False, True, True, True]
    with pytest.raises(InvalidParameterError, match="'replica_divergence'"):
        CheckpointSchedule(divergence=0.0)


@pytest.mark.parametrize("bound", [0.05, 0.5])
def test_every_round_stays_within_the_bound_of_the_published_state(bound):
    client = Datasets()
    res = _run(Replica(client, "r", bound), max_iter=40)
    written = client.published  # rows recorded when each state was published
    assert written[0] == 1 and 2 < len(written) < 40
    assert res.attrs["checkpoint"]["n_written"] == len(written)
    assert res.attrs["checkpoint"]["divergence"] == bound
    # the last state holds every round's point up to it (record_iterates)
    points = load_replica(client, "r")["run"]["iterates"]
    assert len(points) == written[-1]
    for t in range(len(points)):
        last = max(r for r in written if r <= t + 1)  # published after row last - 1
        assert np.linalg.norm(points[t] - points[last - 1]) <= bound
    assert written[-1] == 40  # and the state at the stop
    for before, after in itertools.pairwise(written[:-1]):  # only when due:
        drift = np.linalg.norm(points[after - 1] - points[before - 1])
        step = np.linalg.norm(points[after - 1] - points[after - 2])
        assert drift + step > bound  # another step as long would have passed the bound


def test_a_run_resumed_from_the_replica_ends_on_the_clean_iterates():
    client = Datasets()
    full = _run(None, max_iter=30)
    _run(Replica(client, "r", 0.2), max_iter=12)  # a run that stopped at 12 rounds
    state = load_replica(client, "r")
    resumed = _run(None, max_iter=30, resume=state)
    assert resumed.attrs["resumed_at_iteration"] == state["iteration"] <= 12
    np.testing.assert_array_equal(resumed.iterate, full.iterate)


def test_a_missing_or_foreign_replica_is_one_clear_error():
    client = Datasets()
    with pytest.raises(DataNotFoundError, match="holds no replica of this run"):
        load_replica(client, "r")
    client.data["r"] = b"not a pickle"
    with pytest.raises(InvalidDataError, match="replica 'r' is not a daskstraggle checkpoint"):
        load_replica(client, "r")
    Replica(client, "r", 1.0).remove()
    assert client.list_datasets() == []


def test_the_replica_name_is_the_runs_inputs():
    assert replica_name("pca", ["a", "b"]) == replica_name("pca", ["b", "a"])
    assert replica_name("pca", ["a"]) != replica_name("logistic", ["a"])
    assert replica_name("pca", ["a"]) != replica_name("pca", ["c"])


@pytest.mark.parametrize(("kw", "match"), [
    ({"replica_divergence": 0.1}, "keeps the run's state on a Dask scheduler that outlives"),
    ({"replica_divergence": 0.1, "runtime": "local"}, "pass scheduler=ADDRESS"),
    ({"resume": "replica"}, r"resume='replica' \(CLI: --resume replica\)"),
    ({"replica_divergence": -1.0, "scheduler": "tcp://127.0.0.1:1"}, "'replica_divergence'"),
    ({"replica_divergence": 1.0, "scheduler": "tcp://127.0.0.1:1", "checkpoint": "c.ckpt"},
     "either checkpoint"),
])
def test_replica_settings_that_cannot_work_are_refused_before_any_work(kw, match, tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    X, y = _data()
    with pytest.raises(InvalidParameterError, match=match):
        fit_least_squares(X, y, **kw)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.cluster
def test_a_killed_cli_run_resumes_from_the_replica_to_the_clean_answer(tmp_path, capsys,
                                                                      fault_cluster):
    """The client is SIGKILLed mid-run; its cluster lives on with the replica, and the same
    command with --resume replica carries on to the iterates of a run never interrupted,
    then removes the replica."""
    import zarr

    cluster, client = fault_cluster
    rng = np.random.default_rng(0)
    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=rng.normal(size=(6000, 10)) * np.linspace(3.0, 1.0, 10),
                      chunks=(1000, 10))
    args = ["pca", str(path), "-k", "3", "--method", "gd", "--tol", "1e-300", "--quiet",
            "--json", "--scheduler", cluster.scheduler_address]
    name = replica_name("pca", [str(path)])
    run = subprocess.Popen(
        [sys.executable, "-m", "daskstraggle", *args, "--max-iter", "400",
         "--replica-divergence", "1e-3", "--stragglers", "gamma(mean=0.05, var=1e-6)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.perf_counter() + 240  # a busy machine starts processes slowly
        while not (name in client.list_datasets()
                   and load_state(client.get_dataset(name), where="r",
                                  writer="w")["iteration"] >= 6):
            if run.poll() is not None or time.perf_counter() > deadline:
                run.kill()
                pytest.fail(f"no replica at iteration 6 in 240 s: {run.communicate()}")
            time.sleep(0.1)
        run.send_signal(signal.SIGKILL)  # the client dies mid-run; the cluster lives on
    finally:
        run.kill()
        run.communicate()
    done = load_state(client.get_dataset(name), where="r", writer="w")["iteration"]
    assert 6 <= done < 400
    total = str(done + 12)
    out_resumed, out_full = tmp_path / "resumed.zarr", tmp_path / "full.zarr"
    assert main([*args, "--max-iter", total, "--resume", "replica", "--out",
                 str(out_resumed)]) == 0
    assert name not in client.list_datasets()  # a run that ended normally removes it
    assert main([*args, "--max-iter", total, "--out", str(out_full)]) == 0
    resumed, full = Result.load(out_resumed), Result.load(out_full)
    assert resumed.attrs["resumed_at_iteration"] == done and resumed.n_iter == done + 12
    np.testing.assert_allclose(resumed.iterate, full.iterate, rtol=1e-12, atol=1e-14)
    capsys.readouterr()


def test_a_lost_scheduler_does_not_point_to_the_replica_it_held():
    from daskstraggle._recovery import Recovery
    from daskstraggle.errors import SchedulerLostError, WorkerLostError
    from daskstraggle.runtime.checkpoint import Checkpointer

    replica = Replica(Datasets(), "r", 0.1)
    rec = Recovery(writer=replica, divergence=0.1)
    assert rec.resume_hint(WorkerLostError("x")) is None  # nothing published yet
    replica.write({"iteration": 3}, iteration=3)
    assert rec.resume_hint(WorkerLostError("x")) == "replica"
    assert rec.resume_hint(SchedulerLostError("x")) is None  # gone with the scheduler
    ck = Checkpointer("run.ckpt")
    ck.written = 3
    assert Recovery(writer=ck).resume_hint(SchedulerLostError("x")) == "run.ckpt"


def test_a_scheduler_lost_while_publishing_is_one_line():
    from daskstraggle.errors import SchedulerLostError

    class Gone(Datasets):
        def publish_dataset(self, override: bool = False, **named: Any) -> None:
            raise OSError("Stream is closed")

    with pytest.raises(SchedulerLostError, match="while the replica 'r' was published"):
        Replica(Gone(), "r", 0.1).write({"iteration": 1}, iteration=1)
