"""The optimizer's child process: same plans as inline, errors come back, closes cleanly."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from daskstraggle.balance import LoadBalancer
from daskstraggle.balance._planner import PlannerProcess
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.profiler import ProfileStatistics


def _stats(n_workers=10, slow=(0, 1, 2)):
    compute = np.full(n_workers, 0.1)
    compute[list(slow)] = 0.2
    return ProfileStatistics(
        compute_mean=compute, compute_var=(0.01 * compute) ** 2,
        communication_mean=np.full(n_workers, 0.001),
        communication_var=np.full(n_workers, 1e-8),
        n_samples=np.full(n_workers, 20),
    )


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def planner():
    process = PlannerProcess()
    yield process
    process.close()


@pytest.mark.parametrize("n_wait", [10, 6])
def test_plans_match_the_inline_optimizer(planner, n_wait):
    balancer = LoadBalancer()
    args = (_stats(), (10,) * 10, (1000,) * 10)
    kwargs = {"n_wait": n_wait, "p_initial": (10,) * 10}
    remote = planner.submit(balancer, *args, **kwargs).result(timeout=120)
    local = balancer.plan(*args, **kwargs)
    assert remote.accepted and local.accepted
    assert remote.subpartitions == local.subpartitions
    assert remote.subpartitions[0] > remote.subpartitions[-1]  # slow workers: more parts
    np.testing.assert_array_equal(remote.expected_latency, local.expected_latency)


def test_an_error_in_the_child_is_raised_by_the_future(planner):
    # optimize refuses n_wait = 0 with its usual error, raised here
    future = planner.submit(LoadBalancer(), _stats(), (10,) * 10, (1000,) * 10, n_wait=0,
                            p_initial=(10,) * 10)
    with pytest.raises(InvalidParameterError, match="n_wait"):
        future.result(timeout=60)
    # and the child keeps serving
    again = planner.submit(LoadBalancer(), _stats(), (10,) * 10, (1000,) * 10, n_wait=10,
                           p_initial=(10,) * 10)
    assert again.result(timeout=60).accepted


def test_close_stops_the_child_and_fails_later_requests():
    process = PlannerProcess()
    pid = process.pid
    assert process.running
    process.close()
    assert not process.running
    deadline = time.monotonic() + 120  # generous: a busy machine reaps slowly
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), f"the planner's child {pid} still runs 120 s after close()"
    with pytest.raises(RuntimeError, match="not running"):
        process.submit(LoadBalancer(), _stats(), (10,) * 10, (1000,) * 10, n_wait=10,
                       p_initial=(10,) * 10).result(timeout=5)
    process.close()  # twice is fine


def test_a_dead_child_fails_the_pending_request():
    process = PlannerProcess()
    try:
        # a long plan (49 workers, w < N: seconds of simulation), then the child dies
        future = process.submit(LoadBalancer(), _stats(49, slow=range(10)), (10,) * 49,
                                (1000,) * 49, n_wait=10, p_initial=(10,) * 49)
        process._proc.kill()
        with pytest.raises(RuntimeError, match="exited"):
            future.result(timeout=30)
        assert not process.running
    finally:
        process.close()
