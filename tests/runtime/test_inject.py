"""Worker-side straggler injection on a real process-based LocalCluster."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from typing import ClassVar

import cloudpickle
import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import Constant, LatencyModel, LatencySampler
from daskstraggle.runtime.dask import worker_addresses
from daskstraggle.runtime.inject import (
    INJECTOR_PREFIX,
    StragglerInjector,
    inject_delay,
    injected,
    install_injector,
    remove_injector,
)

pytestmark = pytest.mark.cluster


# --------------------------------------------------------------------------- test-only models
# (not registered; shipped to the workers by value, since the test module is not importable
# there)


class _UniformSampler(LatencySampler):
    def __init__(self, model, n_workers, streams):
        super().__init__(n_workers, streams)
        self.high = model.high

    def sample(self, worker_index, *, time=0.0, iteration=0, load=1.0, measured=None,
               size=None):
        rng = self.streams[worker_index]
        return float(rng.uniform(0, self.high)) * load, float(rng.uniform(0, self.high / 10))


@dataclass(frozen=True, kw_only=True, slots=True)
class _Uniform(LatencyModel):
    """Random delays: compute ~ U(0, high) * load, communication ~ U(0, high / 10)."""

    name: ClassVar[str] = "test-uniform"
    high: float = 0.05

    def _make_sampler(self, n_workers, streams):
        return _UniformSampler(self, n_workers, streams)


class _CountingSampler(LatencySampler):
    def __init__(self, model, n_workers, streams):
        super().__init__(n_workers, streams)
        self.calls = [0] * n_workers

    def sample(self, worker_index, *, time=0.0, iteration=0, load=1.0, measured=None,
               size=None):
        self.calls[worker_index] += 1
        return 0.01 * self.calls[worker_index], 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class _Counting(LatencyModel):
    """Stateful: the k-th task of a worker is delayed 0.01 * k seconds."""

    name: ClassVar[str] = "test-counting"

    def _make_sampler(self, n_workers, streams):
        return _CountingSampler(self, n_workers, streams)


class _FactorSampler(LatencySampler):
    def __init__(self, model, n_workers, streams):
        super().__init__(n_workers, streams)
        self.factor = model.factor

    def sample(self, worker_index, *, time=0.0, iteration=0, load=1.0, measured=None,
               size=None):
        return self.factor * measured, 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class _Factor(LatencyModel):
    """Pure slow-down of every worker: compute = factor * measured."""

    name: ClassVar[str] = "test-factor"
    factor: float = 3.0

    @property
    def has_distribution(self) -> bool:
        return False

    def _make_sampler(self, n_workers, streams):
        return _FactorSampler(self, n_workers, streams)


cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- tasks


class _Sleeps:
    """Stands in for the ``time`` module of :mod:`daskstraggle.runtime.inject` while a task
    runs: records every sleep the injector asks for (and sleeps it)."""

    def __init__(self):
        self.calls: list[float] = []

    def sleep(self, seconds):
        self.calls.append(seconds)
        time.sleep(seconds)

    def __getattr__(self, name):
        return getattr(time, name)


def _watching_sleeps(fn):
    """Run ``fn`` with the injector's sleeps recorded; return its result and the sleeps."""
    from daskstraggle.runtime import inject

    sleeps = _Sleeps()
    inject.time = sleeps
    try:
        return fn(), sleeps.calls
    finally:
        inject.time = time


def _task(iteration: int = 0, load: float = 1.0, measured: float | None = 0.0):
    """Return the injected seconds, the task's duration and the sleeps the injector took."""
    def run():
        t0 = time.perf_counter()
        extra = inject_delay(iteration=iteration, load=load, measured=measured)
        return extra, time.perf_counter() - t0

    (extra, duration), slept = _watching_sleeps(run)
    return extra, duration, slept


def _slow_task(work: float):
    """Sleep ``work`` seconds (the real work), then get stretched by the injector."""
    def run():
        t0 = time.perf_counter()
        time.sleep(work)
        measured = time.perf_counter() - t0
        extra = inject_delay(iteration=0, load=1.0, measured=measured)
        return measured, extra, time.perf_counter() - t0

    (measured, extra, total), slept = _watching_sleeps(run)
    return measured, extra, total, slept


def _run_on(client, worker, fn, *args):
    return client.submit(fn, *args, workers=[worker], allow_other_workers=False,
                         pure=False).result()


@pytest.fixture
def workers(dask_client):
    return worker_addresses(dask_client)


# --------------------------------------------------------------------------- tests


def test_constant_delay_only_on_its_worker(dask_client, workers):
    model = Constant(compute=(0.0, 0.3, 0.0), communication=(0.0, 0.05, 0.0))
    with injected(dask_client, model, workers, seed=0) as name:
        assert name.startswith(INJECTOR_PREFIX)
        extra, duration, slept = _run_on(dask_client, workers[1], _task, 0, 1.0)
        assert extra == pytest.approx(0.35) and slept == [extra]
        assert duration >= 0.35
        # worker 0's draw is 0: the injector returns at once, without sleeping
        extra, _, slept = _run_on(dask_client, workers[0], _task, 0, 1.0)
        assert extra == 0.0 and slept == []
        # load scales the compute part
        extra, _, slept = _run_on(dask_client, workers[1], _task, 0, 0.5)
        assert extra == pytest.approx(0.2) and slept == [extra]


def test_worker_draws_match_the_client_side_sampler(dask_client, workers):
    model, seed, n_tasks = _Uniform(high=0.02), 123, 4
    with injected(dask_client, model, workers, seed=seed):
        got = {w: [_run_on(dask_client, w, _task, k)[0] for k in range(n_tasks)]
               for w in workers}
    sampler = model.sampler(len(workers), seed)
    for i, w in enumerate(workers):
        expected = [sum(sampler.sample(i, iteration=k)) for k in range(n_tasks)]
        np.testing.assert_allclose(got[w], expected, rtol=1e-12)
    # a fresh install with the same seed reproduces the same sequence
    with injected(dask_client, model, workers, seed=seed):
        again = [_run_on(dask_client, workers[2], _task, k)[0] for k in range(n_tasks)]
    np.testing.assert_allclose(again, got[workers[2]], rtol=1e-12)


def test_model_state_persists_across_tasks_on_the_worker(dask_client, workers):
    with injected(dask_client, _Counting(), workers, seed=0):
        on_1 = [_run_on(dask_client, workers[1], _task)[0] for _ in range(3)]
        on_0 = [_run_on(dask_client, workers[0], _task)[0] for _ in range(2)]
        on_1.append(_run_on(dask_client, workers[1], _task)[0])
    np.testing.assert_allclose(on_1, [0.01, 0.02, 0.03, 0.04])
    np.testing.assert_allclose(on_0, [0.01, 0.02])


def test_removing_the_injector_stops_delays(dask_client, workers):
    name = install_injector(dask_client, Constant(compute=0.2), workers, seed=0)
    assert _run_on(dask_client, workers[0], _task)[0] == pytest.approx(0.2)
    remove_injector(dask_client, name)
    remove_injector(dask_client, name)  # idempotent
    extra, _, slept = _run_on(dask_client, workers[0], _task)
    assert extra == 0.0 and slept == []  # no draw, no sleep


def test_workers_not_listed_are_inactive(dask_client, workers):
    with injected(dask_client, Constant(compute=0.2), workers[:2], seed=0):
        assert _run_on(dask_client, workers[1], _task)[0] == pytest.approx(0.2)
        assert _run_on(dask_client, workers[2], _task)[0] == 0.0


def test_pure_slowdown_stretches_the_measured_work(dask_client, workers):
    with injected(dask_client, _Factor(factor=3.0), workers, seed=0):
        measured, extra, total, slept = _run_on(dask_client, workers[0], _slow_task, 0.1)
    # the injector sleeps exactly the scaled minus the measured time, once: the task is
    # stretched to factor x the measured work, no more (sleeps only ever add time)
    assert extra == pytest.approx(2 * measured) and slept == [extra]
    assert total >= 3 * measured


def test_error_in_block_still_removes_the_injector(dask_client, workers):
    with pytest.raises(ZeroDivisionError), injected(dask_client, Constant(compute=0.2),
                                                    workers, seed=0):
        1 / 0  # noqa: B018
    assert _run_on(dask_client, workers[0], _task)[0] == 0.0


def test_not_on_a_worker_injects_nothing():
    (extra, slept) = _watching_sleeps(
        lambda: inject_delay(iteration=0, load=1.0, measured=0.5))
    assert extra == 0.0 and slept == []


def test_injector_alone_draws_the_worker_sequence():
    # no cluster: the plugin's own logic, activated as worker "b"
    model = _Uniform(high=0.01)
    plugin = StragglerInjector(model, ["a", "b"], seed=5)
    plugin.activate("b")
    assert plugin.worker_index == 1
    got = [plugin.delay(iteration=k, sleep=False) for k in range(3)]
    ref = model.sampler(2, 5)
    np.testing.assert_allclose(got, [sum(ref.sample(1, iteration=k)) for k in range(3)])
    plugin.activate("c")
    assert plugin.worker_index is None and plugin.delay() == 0.0


def test_sleeping_in_an_event_loop_is_refused():
    import asyncio

    plugin = StragglerInjector(Constant(compute=0.5), ["a"], seed=0)
    plugin.activate("a")

    async def main():
        return plugin.delay(sleep=False), plugin.delay()

    with pytest.raises(RuntimeError, match="event loop"):
        asyncio.run(main())


def test_bad_input_fails_before_cluster_work():
    class NoClient:
        def register_plugin(self, *args, **kwargs):  # pragma: no cover - must not run
            raise AssertionError("touched the cluster")

    client = NoClient()
    with pytest.raises(InvalidParameterError, match=re.escape(
            "has 2 values but there are 3 workers")):
        install_injector(client, Constant(compute=(0.1, 0.2)), ["a", "b", "c"], seed=0)
    with pytest.raises(InvalidParameterError, match="'model' parameter of install_injector"):
        install_injector(client, "gamma", ["a"], seed=0)
    with pytest.raises(InvalidParameterError, match="'addresses' parameter"):
        install_injector(client, Constant(), [], seed=0)
    with pytest.raises(InvalidParameterError, match="lists a worker twice"):
        install_injector(client, Constant(), ["a", "a"], seed=0)
    with pytest.raises(InvalidParameterError, match="'seed' parameter"):
        install_injector(client, Constant(), ["a"], seed=-1)


def test_removing_the_injector_survives_a_worker_leaving_during_the_broadcast(
        dask_client, workers, monkeypatch):
    """The scheduler forgets the plugin, then its broadcast to the workers meets a worker
    that just left (CommClosedError, as when every SLURM job was cancelled): the live
    workers the broadcast missed lose the injector all the same."""
    from distributed.comm.core import CommClosedError

    name = install_injector(dask_client, Constant(compute=0.2), workers, seed=0)
    scheduler = dask_client.cluster.scheduler  # (in this process)

    async def broadcast_fails(comm, plugin):
        scheduler.worker_plugins.pop(plugin)
        raise CommClosedError("in <TCP (closed) Scheduler Broadcast>: Stream is closed")

    monkeypatch.setattr(scheduler, "unregister_worker_plugin", broadcast_fails)
    remove_injector(dask_client, name)
    monkeypatch.undo()
    assert name not in scheduler.worker_plugins
    extra, _, slept = _run_on(dask_client, workers[0], _task)
    assert extra == 0.0 and slept == []


def test_the_janitor_survives_a_worker_leaving_during_the_broadcast():
    """The scheduler-side twin: the janitor that unregisters a departed client's injector
    meets the same CommClosedError, then tells the remaining workers itself."""
    import asyncio

    from distributed.comm.core import CommClosedError

    from daskstraggle.runtime.plugin import _unregister

    class Scheduler:
        def __init__(self) -> None:
            self.broadcasts: list = []

        async def unregister_worker_plugin(self, comm, name):
            raise CommClosedError("in <TCP (closed) Scheduler Broadcast>: Stream is closed")

        async def broadcast(self, *, msg, on_error):
            self.broadcasts.append((msg, on_error))

    scheduler = Scheduler()
    asyncio.run(_unregister("daskstraggle-injector-x", dask_scheduler=scheduler))
    assert scheduler.broadcasts == [({"op": "plugin-remove", "name": "daskstraggle-injector-x"},
                                     "ignore")]
