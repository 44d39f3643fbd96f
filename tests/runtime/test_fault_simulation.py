"""simulate_faults: DSAG waiting for w of N in SimRuntime, faults played by the engine's pool
(the `daskstraggle simulate` command with fault terms)."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency import Gamma, simulate
from daskstraggle.latency.spec import parse_stragglers
from daskstraggle.runtime.fault_simulation import (
    estimate_duration,
    make_least_squares_data,
    simulate_faults,
)

MODEL = Gamma(mean=(0.1, 0.2, 0.3, 0.4, 0.5), var=(0.01, 0.01, 0.02, 0.02, 0.05),
              communication_mean=0.01, communication_var=1e-5)


@pytest.mark.parametrize(("n_wait", "window", "update"), [(2, 0.02, 0.0), (3, 0.0, 0.01),
                                                          (5, 0.1, 0.0)])
def test_without_faults_the_iterations_are_the_latency_simulators(n_wait, window, update):
    """The same coordinator semantics as the fault-free simulator, to rounding: so the
    fault runs are comparable with `simulate` without fault terms."""
    sim = simulate_faults(MODEL, (), 5, n_wait, 30, collect_window=window,
                          update_duration=update, rng=11)
    ref = simulate(MODEL, 5, n_wait, 30, collect_window=window, update_duration=update, rng=11)
    np.testing.assert_allclose(sim.iteration_time, ref.iteration_time, rtol=1e-12)
    np.testing.assert_allclose(sim.iteration_duration, ref.iteration_duration, rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_array_equal(sim.n_fresh, ref.n_fresh)
    np.testing.assert_array_equal(sim.fresh, ref.fresh)  # who was fresh in each iteration
    np.testing.assert_array_equal(sim.stale, ref.stale)
    np.testing.assert_array_equal(sim.participation, ref.participation)
    assert sim.events == () and sim.workers == ("0", "1", "2", "3", "4")


def test_a_lost_workers_rows_move_and_are_computed_again():
    spec = parse_stragglers("gamma(mean=0.05, var=1e-4) + loss(workers=0, at=1)")
    sim = simulate_faults(spec.model, spec.faults, 8, 6, 60, rng=0)
    loss, move = sim.events
    assert loss["event"] == "loss" and move["event"] == "move"
    # the engine's own record of the move (the run's attrs) says the same
    (record,) = sim.outcome.attrs["worker_losses"]
    assert (move["worker_index"], move["from"], move["to"], move["time"]) == \
        (record["worker_index"], record["lost"], record["moved_to"], record["time"])
    assert sim.workers[0] == move["to"] and sim.n_iterations == 60
    # index 0's rows, now computed by a worker that also computes its own, still arrive
    # after the loss: too late to be fresh with w = 6 of 8, they are folded in stale
    after = move["iteration"] + 1
    assert sim.stale[after:, 0].sum() > 20 and sim.fresh[after:, 0].mean() < 0.2
    assert sim.fresh[:after, 0].mean() > 0.5
    np.testing.assert_array_equal(sim.fresh.sum(axis=1), sim.n_fresh)
    assert sim.to_dict()["events"] == [dict(e) for e in sim.events]


def test_faults_after_the_run_are_not_played():
    spec = parse_stragglers("gamma(mean=0.05, var=1e-4) + join(count=1, at=50) + "
                            "loss(workers=1, at=60)")
    sim = simulate_faults(spec.model, spec.faults, 4, 4, 10, rng=0)
    assert sim.events == () and [f.name for f in sim.not_reached] == ["join", "loss"]
    assert sim.total_time < 50


def test_bad_arguments_fail_before_any_work():
    faults = parse_stragglers("loss(workers=5, at=1)").faults
    with pytest.raises(InvalidParameterError, match="loss: worker 5 is out of range for 4"):
        simulate_faults(Gamma(mean=0.1, var=1e-3), faults, 4, 2, 10)
    with pytest.raises(InvalidParameterError, match=r"'n_wait' parameter of simulate_faults "
                                                    r"must be an int in \[1, 4\]"):
        simulate_faults(Gamma(mean=0.1, var=1e-3), (), 4, 5, 10)
    slowdown = parse_stragglers("slowdown(workers=1, factor=2)").model
    with pytest.raises(InvalidParameterError, match="only scales measured compute times"):
        simulate_faults(slowdown, (), 4, 2, 10)
    with pytest.raises(InvalidParameterError, match="'faults' parameter of simulate_faults"):
        simulate_faults(Gamma(mean=0.1, var=1e-3), "loss(workers=1, at=1)", 4, 2, 10)


def test_the_data_and_the_time_estimate():
    X, y = make_least_squares_data(5, rows_per_worker=2, n_features=4, seed=1)
    assert X.shape == (10, 4) and y.shape == (10,)
    np.testing.assert_array_equal(make_least_squares_data(5, rows_per_worker=2,
                                                          n_features=4, seed=1)[0], X)
    # more workers cost more per task (DSAG's cache): the estimate grows faster than N
    assert estimate_duration(1000, 10) > 2 * 10 * estimate_duration(100, 10)
