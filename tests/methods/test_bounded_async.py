"""Bounded-delay asynchronous updates (MLfabric): no applied update is delayed over tau_max."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import BoundedAsync, WorkResult, WorkUnit, make_method
from daskstraggle.problems import LeastSquares
from daskstraggle.problems.base import KernelResult
from daskstraggle.runtime import LocalRuntime, SimRuntime, StopRule


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(480, 6))
    y = X @ rng.normal(size=6) + 0.1 * rng.normal(size=480)
    return open_matrix(X, labels=y)


def _run(rt, method, matrix, n_iter, **kw):
    with rt:
        return run_on(rt, method, LeastSquares(), matrix, stop=StopRule(max_iter=n_iter, tol=None),
                      rng=0, **kw)


@settings(max_examples=25, deadline=None)
@given(n_workers=st.integers(2, 8), max_delay=st.integers(0, 6), seed=st.integers(0, 2**16),
       factor=st.floats(1.0, 20.0), order=st.sampled_from(["arrival", "shortest"]))
def test_no_applied_update_is_delayed_over_the_bound(data, n_workers, max_delay, seed, factor,
                                                     order):
    spec = f"gamma(mean=0.05, var=1e-3) + slowdown(workers=0, factor={factor})"
    method = BoundedAsync(max_delay=max_delay, order=order)
    res = _run(SimRuntime(n_workers, latency=spec, rng=seed), method, data, 60,
               step_size=0.2 / n_workers)
    delays = np.asarray(method.applied_delays)  # the last round stops instead of applying
    assert len(delays) == 59 and delays.max() <= max_delay
    np.testing.assert_array_equal(res.trace.delay.values[:-1], delays)
    assert res.trace.delay.max() <= max_delay
    # every received result was applied, dropped, or is still waiting
    assert (res.trace.n_fresh + res.trace.n_stale == 1).all()


def test_a_slow_worker_is_dropped_and_the_rest_converge(data):
    spec = "constant(compute=(1.0, 1.0, 1.0, 1.0, 8.0))"
    bounded = BoundedAsync(max_delay=4)
    res = _run(SimRuntime(5, latency=spec, rng=0), bounded, data, 400, step_size=0.02,
               reference=True, record_iterates=True)
    assert int(res.trace.n_dropped.sum()) > 0
    unbounded = BoundedAsync()
    free = _run(SimRuntime(5, latency=spec, rng=0), unbounded, data, 400, step_size=0.02)
    assert int(free.trace.n_dropped.sum()) == 0 and max(unbounded.applied_delays) > 4
    # async SGD over shards with a constant step reaches a neighbourhood of the optimum
    gap = res.trace.exact_gap.values
    assert gap[-1] < 1e-2 * gap[0]


def _result(worker, version, value):
    unit = WorkUnit(worker, (worker,), np.zeros(1), version)
    return WorkResult(unit, KernelResult(np.array([float(value)]), np.zeros(1), 1), 0.0)


def test_shortest_first_under_deadlines():
    m = BoundedAsync(max_delay=3, order="shortest")
    m.start(LeastSquares(), np.zeros(1), [(0,), (1,), (2,)], step_size=1.0,
            partition_rows=[1, 1, 1])
    m._version = 5
    for r in (_result(0, 2, 1.0), _result(1, 4, 2.0), _result(2, 5, 3.0)):
        m._pending.append(r)
    # worker 0's update (v=2) is at its deadline 2 + 3 = 5: it goes first, then freshest
    assert m._pick().unit.worker_index == 0
    m._choice = None
    m._pending.pop(0)
    assert m._pick().unit.worker_index == 2
    arrival = BoundedAsync(max_delay=3)
    arrival.start(LeastSquares(), np.zeros(1), [(0,), (1,)], step_size=1.0,
                  partition_rows=[1, 1])
    arrival._pending = [_result(1, 0, 1.0), _result(0, 0, 1.0)]
    assert arrival._pick().unit.worker_index == 1


def test_bad_settings(data):
    with pytest.raises(InvalidParameterError, match="'order' parameter of BoundedAsync"):
        BoundedAsync(order="lifo")
    with pytest.raises(InvalidParameterError, match="'max_delay' parameter of BoundedAsync"):
        BoundedAsync(max_delay=-1)
    assert isinstance(make_method("async", max_delay=2), BoundedAsync)
    res = _run(LocalRuntime(3), BoundedAsync(max_delay=0), data, 10, step_size=0.01)
    assert res.trace.sizes["iteration"] == 10
