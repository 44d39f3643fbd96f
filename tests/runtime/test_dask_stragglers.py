"""DaskRuntime with --stragglers: injected per run, recorded in the trace, always removed."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.methods import GD
from daskstraggle.problems import PCA
from daskstraggle.runtime import DaskRuntime, StopRule
from daskstraggle.runtime.dask import worker_addresses
from daskstraggle.runtime.inject import INJECTOR_PREFIX

pytestmark = pytest.mark.cluster


def _plugins(client):
    names = client.run(lambda dask_worker: sorted(dask_worker.plugins))
    return {n for names in names.values() for n in names if n.startswith(INJECTOR_PREFIX)}


@pytest.fixture
def matrix():
    return open_matrix(np.random.default_rng(0).normal(size=(300, 5)), n_partitions=3)


def test_injected_delay_shows_in_the_scheduler_measured_compute(dask_client, matrix):
    delay = 1.0
    with DaskRuntime(dask_client, stragglers=f"constant(compute=[0.0, {delay}, 0.0])") as rt:
        res = run_on(rt, GD(), PCA(n_components=2), matrix, stop=StopRule(max_iter=4, tol=None),
                     rng=0)
    c = res.trace.compute_duration.values
    # worker 1's column holds its injected sleep (a lower bound: load only adds to it) ...
    assert (c[:, 1] >= delay).all()
    # ... and within its unit's send-to-receive time (no waiting counted as compute) ...
    assert (res.trace.latency.values >= c).all()
    # ... and no other column does (their tasks are a few milliseconds of kernel: only a
    # stall of a whole second could take one to the sleep's length)
    assert (c[:, [0, 2]] < delay).all(), c
    assert (res.trace.iteration_duration >= delay).all()
    assert not _plugins(dask_client)  # removed after the run


class _Boom(GD):
    name = "boom"

    def step(self) -> None:
        raise RuntimeError("boom")


def test_a_failed_run_removes_its_injector_and_throttle(dask_client, matrix):
    stragglers = "constant(compute=0.01) + throttle(workers=2, factor=2)"
    with DaskRuntime(dask_client, stragglers=stragglers) as rt:
        with pytest.raises(RuntimeError, match="boom"):
            run_on(rt, _Boom(), PCA(n_components=2), matrix, stop=StopRule(max_iter=5, tol=None))
        assert rt._throttle is None
    assert not _plugins(dask_client)
    states = dask_client.run(_state)
    assert all(s not in ("T", "t") for s in states.values()), states


def _state() -> str:
    import os

    with open(f"/proc/{os.getpid()}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_stragglers_that_do_not_fit_the_cluster_fail_before_loading(dask_client, matrix):
    from daskstraggle.errors import InvalidParameterError

    with DaskRuntime(dask_client, stragglers="slowdown(workers=5, factor=2)") as rt:
        with pytest.raises(InvalidParameterError, match="worker 5 is out of range for 3"):
            run_on(rt, GD(), PCA(n_components=2), matrix)


def _delay(name):
    from daskstraggle.runtime.inject import inject_delay

    return inject_delay(measured=0.0, name=name, sleep=False)


def test_a_task_draws_only_from_its_own_runs_injector(dask_client):
    from daskstraggle.latency.base import Constant
    from daskstraggle.runtime.inject import install_injector, remove_injector

    addresses = worker_addresses(dask_client)
    a = install_injector(dask_client, Constant(compute=0.05), addresses, seed=0)
    b = install_injector(dask_client, Constant(compute=0.2), addresses, seed=0)
    try:
        assert dask_client.submit(_delay, a, pure=False).result() == pytest.approx(0.05)
        assert dask_client.submit(_delay, b, pure=False).result() == pytest.approx(0.2)
        assert dask_client.submit(_delay, None, pure=False).result() == pytest.approx(0.25)
    finally:
        remove_injector(dask_client, a)
        remove_injector(dask_client, b)


def test_worker_addresses_always_lists_every_worker(dask_client):
    # Client.scheduler_info() can return a cache without workers (distributed 2026.8)
    assert all(len(worker_addresses(dask_client)) == 3 for _ in range(50))
