"""SimRuntime: real numbers, simulated clock, DSAG coordinator semantics by hand."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import Constant
from daskstraggle.methods import GD, SGD
from daskstraggle.problems import PCA, LeastSquares
from daskstraggle.runtime import LocalRuntime, SimRuntime, StopRule


@pytest.fixture
def X() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(400, 6)) @ np.diag([5, 3, 2, 1, 1, 1.0])


def _run(rt, method, X, n_iter=4, **kw):
    with rt:
        return run_on(rt, method, PCA(n_components=2), open_matrix(X, n_partitions=4),
                      stop=StopRule(max_iter=n_iter, tol=None), rng=0, **kw)


def test_gd_waits_for_the_slowest_and_computes_the_same_numbers(X):
    sim = _run(SimRuntime(4, latency=Constant(compute=(1.0, 2.0, 3.0, 4.0),
                                              communication=0.5)), GD(), X)
    local = _run(LocalRuntime(4), GD(), X)
    # every iteration waits for worker 3: 4 s compute + 0.5 s communication
    np.testing.assert_allclose(sim.trace.wall_time, [4.5, 9.0, 13.5, 18.0])
    np.testing.assert_allclose(sim.trace.iteration_duration, 4.5)
    np.testing.assert_allclose(sim.trace.compute_duration[0], [1, 2, 3, 4])
    np.testing.assert_allclose(sim.trace.communication_duration[0], 0.5)
    np.testing.assert_allclose(sim.trace.latency[0], [1.5, 2.5, 3.5, 4.5])
    np.testing.assert_allclose(sim.iterate, local.iterate)
    assert sim.attrs["simulated"] is True and sim.attrs["runtime"] == "sim"


def test_sgd_wait_for_two_of_four_hand_worked(X):
    """Compute times 1, 2, 3, 4 s; wait for 2 fresh results; no collect window.

    it 0: all start at 0; w0 fresh at 1, w1 fresh at 2 -> step at t=2 (w2, w3 still busy
          on version 0).
    it 1: w0, w1 start at 2 (finish 3, 4). At 3: w2's stale v0 result arrives, w2 is
          re-tasked at once (finishes 6); w0 fresh. At 4: w3 stale (re-tasked, finishes 8),
          w1 fresh -> step at t=4.
    it 2: w0, w1 start at 4 (finish 5, 6); w2 busy until 6 on v1 (stale at 6, re-tasked
          until 9); w3 busy until 8. w0 fresh at 5, w1 fresh at 6 -> step at t=6.
    """
    res = _run(SimRuntime(4, latency=Constant(compute=(1.0, 2.0, 3.0, 4.0))),
               SGD(n_wait=2, collect_window=0.0), X, n_iter=3)
    np.testing.assert_allclose(res.trace.wall_time, [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(res.trace.n_fresh, [2, 2, 2])
    np.testing.assert_array_equal(res.trace.n_workers_used, [2, 2, 2])
    # who delivered what in each round (last result per worker; NaN: nothing arrived)
    c = res.trace.compute_duration.values
    np.testing.assert_allclose(c[0], [1, 2, np.nan, np.nan])
    np.testing.assert_allclose(c[1], [1, 2, 3, 4])  # w2, w3: stale results of version 0
    np.testing.assert_allclose(c[2], [1, 2, 3, np.nan])  # w2: stale v1 result at t=6


def test_collect_window_keeps_results_arriving_just_after(X):
    # ready at t=2 after 2 s: a 0.5 window collects until t=3, so w2's result counts
    res = _run(SimRuntime(4, latency=Constant(compute=(1.0, 2.0, 3.0, 4.0))),
               SGD(n_wait=2, collect_window=0.5), X, n_iter=1)
    assert res.trace.wall_time.values[0] == pytest.approx(3.0)
    assert int(res.trace.n_fresh[0]) == 3


def test_update_duration_and_time_budget_are_simulated(X):
    res = _run(SimRuntime(4, latency=Constant(compute=1.0), update_duration=0.25), GD(), X)
    np.testing.assert_allclose(res.trace.wall_time, [1.0, 2.25, 3.5, 4.75])
    with SimRuntime(4, latency=Constant(compute=10.0)) as rt:
        res = run_on(rt, GD(), PCA(n_components=2), open_matrix(X),
                     stop=StopRule(max_iter=100, tol=None, time_budget=35.0), rng=0)
    assert res.stop_reason == "time_budget" and len(res.trace.iteration) == 4


def test_without_a_model_tasks_take_their_measured_time(X):
    res = _run(SimRuntime(4), GD(), X, n_iter=2)
    assert (res.trace.compute_duration > 0).all()
    assert float(res.trace.wall_time[-1]) < 1.0


def test_a_thousand_workers_fit_on_one_machine():
    X = np.random.default_rng(0).normal(size=(20_000, 8))
    with SimRuntime(1000, latency=Constant(compute=0.01)) as rt:
        res = run_on(rt, SGD(n_wait=500, collect_window=0.0), LeastSquares(),
                     open_matrix(X, labels=X[:, 0] + 1.0), stop=StopRule(max_iter=3, tol=None),
                     rng=0)
    assert res.trace.sizes["worker"] == 1000
    np.testing.assert_array_equal(res.trace.n_fresh, [1000, 1000, 1000])  # all equal times


def test_receive_duration_serialises_messages_at_the_coordinator(X):
    """Compute 1, 1, 1, 3 s; each message takes 0.25 s to receive, one at a time.

    GD: three results arrive at 1 and are received at 1.25, 1.5, 1.75; the fourth arrives
    at 3 and is received at 3.25, the round ends there. SGD waiting for 2: step at 1.5;
    w0, w1 re-tasked finish at 2.5 and are received at 2.75 and 3.0. The third result of
    round 0 (arrived at 1, stale after the step) is dropped at no cost (w2 re-tasked at
    1.5 finishes at 2.5 too, but after w0 and w1 in arrival order).
    """
    latency = Constant(compute=(1.0, 1.0, 1.0, 3.0))
    res = _run(SimRuntime(4, latency=latency, receive_duration=0.25), GD(), X, n_iter=2)
    np.testing.assert_allclose(res.trace.wall_time, [3.25, 6.5])
    res = _run(SimRuntime(4, latency=latency, receive_duration=0.25),
               SGD(n_wait=2, collect_window=0.0), X, n_iter=2)
    np.testing.assert_allclose(res.trace.wall_time, [1.5, 3.0])
    assert res.attrs["receive_duration_s"] == 0.25
    with pytest.raises(InvalidParameterError, match="'receive_duration' parameter"):
        SimRuntime(4, receive_duration=-1.0)


def test_bad_settings_fail_before_work(X):
    with pytest.raises(InvalidParameterError, match="'n_workers' parameter of SimRuntime"):
        SimRuntime(0)
    with pytest.raises(InvalidParameterError, match="3 values but there are 4 workers"):
        SimRuntime(4, latency=Constant(compute=(1.0, 2.0, 3.0)))
    with pytest.raises(InvalidParameterError, match=r"'n_wait' parameter of SGD must be an int "
                                                    r"in \[1, 4\]"):
        _run(SimRuntime(4), SGD(n_wait=5), X)


@pytest.mark.parametrize("n_wait,window,update", [(2, 0.02, 0.0), (3, 0.0, 0.01), (5, 0.1, 0.0)])
def test_matches_the_latency_simulator_exactly(X, n_wait, window, update):
    """A real method in the loop makes the same timing decisions as the pure simulator."""
    from daskstraggle.latency import Gamma, simulate

    model = Gamma(mean=(0.1, 0.2, 0.3, 0.4, 0.5), var=(0.01, 0.01, 0.02, 0.02, 0.05),
                  communication_mean=0.01, communication_var=1e-5)
    with SimRuntime(5, latency=model, update_duration=update, rng=11) as rt:
        res = run_on(rt, SGD(n_wait=n_wait, collect_window=window), PCA(n_components=2),
                     open_matrix(X, n_partitions=5), stop=StopRule(max_iter=30, tol=None),
                     rng=0)
    sim = simulate(model, 5, n_wait, 30, collect_window=window, update_duration=update, rng=11)
    np.testing.assert_allclose(res.trace.wall_time, sim.iteration_time, rtol=1e-12)
    np.testing.assert_array_equal(res.trace.n_fresh, sim.n_fresh)
