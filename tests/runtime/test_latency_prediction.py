"""Latency predicted from a real run's recorded latency agrees with what the run measured.

The issue's acceptance check: a LocalCluster with 4 process workers and injected gamma
delays of different means. From the latency the scheduler plugin and the coordinator
recorded during a GD run (w = N) we fit one gamma per worker to its latency, then

- the Monte Carlo expected latency of the w-th fastest worker matches the measured mean of
  the w-th smallest per-iteration latency within 10 % for every w, and
- the event-driven simulator's total time for 50 iterations waiting for w = 2 < N = 4
  (DSAG semantics: stale workers re-tasked at once, 2 % collect window, the measured
  coordinator update time), with per-worker gamma latency fitted to that run's recorded
  latency, matches the real SGD run within 10 %.

Why the simulator is fed the SGD run's own latency: the communication part of a task's
latency depends on the dispatch pattern. On this 2-core machine a task submitted alone in
the middle of an iteration (SGD re-tasking a worker) sees ~5-8 ms more round trip than the
four tasks GD submits together, so a model fitted to GD underpredicts SGD's total time by
~8-12 % (reported by ``pipelines/bench_latency.py``).

Why automatic garbage collection is off in the coordinator during the runs: a full
collection in the coordinator process (which also hosts the LocalCluster scheduler) costs
60-130 ms of CPU on this machine and happens about once per 60 rounds. It delays every
worker's result of that round by the same amount, a common-mode delay that per-worker
models do not describe; one such round inflated the fitted variances enough to move the
predicted fastest latency by 14 % in a CI run.
"""

from __future__ import annotations

import contextlib
import gc

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.latency.fit import fit_trace
from daskstraggle.latency.models import Gamma
from daskstraggle.latency.order import order_statistics
from daskstraggle.latency.simulator import simulate
from daskstraggle.methods import GD, SGD
from daskstraggle.problems import LeastSquares
from daskstraggle.runtime import DaskRuntime, LocalRuntime, StopRule

MEANS = (0.03, 0.05, 0.07, 0.09)
WARMUP = 3  # first rounds pay for deserialising the problem and warming caches


@contextlib.contextmanager
def _no_automatic_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.cluster
def test_predicted_latency_matches_a_real_run():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 10))
    y = X @ rng.normal(size=10)
    model = Gamma(mean=MEANS, var=tuple((0.2 * m) ** 2 for m in MEANS))
    matrix = open_matrix(X, labels=y, n_partitions=4)
    # the default step sizes, estimated in process: on the cluster each estimate takes 20
    # passes over the data before the timed rounds
    with LocalRuntime(4) as local:
        step = {name: local.run(method, LeastSquares(), matrix, rng=0,
                                stop=StopRule(max_iter=1, tol=None)).attrs["step_size"]
                for name, method in (("gd", GD()), ("sgd", SGD(n_wait=2)))}
    with DaskRuntime(n_workers=4, stragglers=model, rng=1) as rt, _no_automatic_gc():
        gd = rt.run(GD(), LeastSquares(), matrix, stop=StopRule(max_iter=60 + WARMUP, tol=None),
                    rng=0, step_size=step["gd"])
        sgd = rt.run(SGD(n_wait=2), LeastSquares(), matrix,
                     stop=StopRule(max_iter=50, tol=None), rng=0, step_size=step["sgd"])

    trace = gd.trace.isel(iteration=slice(WARMUP, None))
    assert np.isfinite(trace.compute_duration).all() and np.isfinite(trace.latency).all()
    # the scheduler's compute spans include the injected delay: each worker's mean is its
    # model mean plus a few ms of kernel and task overhead
    np.testing.assert_allclose(trace.compute_duration.mean("iteration"), MEANS, rtol=0.15,
                               atol=0.005)
    measured = np.sort(trace.latency.values, axis=1).mean(axis=0)
    # one gamma per worker for its whole latency: on 2 shared cores the scheduler-measured
    # compute and the rest of the round trip are correlated (about -0.2 for the fastest
    # worker), which the independent compute + communication split does not model
    fitted = fit_trace(trace, split=False)
    predicted = order_statistics(fitted, 4, n_samples=50_000, rng=0).mean
    np.testing.assert_allclose(predicted, measured, rtol=0.10)

    # coordinator time between rounds (update, trace, dispatch bookkeeping)
    wall = sgd.trace.wall_time.values
    update = float(np.median(np.diff(wall) - sgd.trace.iteration_duration.values[1:]))
    fitted = fit_trace(sgd.trace, split=False)
    totals = [
        simulate(fitted, 4, 2, 50, collect_window=0.02, update_duration=update, rng=seed)
        .total_time
        for seed in range(20)
    ]
    assert float(np.mean(totals)) == pytest.approx(float(wall[-1]), rel=0.10)
    # and the naive prediction that ignores workers staying busy across iterations (§IV-A:
    # every iteration costs the 2nd order statistic) is clearly worse
    naive = 50 * order_statistics(fitted, 4, n_samples=50_000, rng=0).mean[1]
    assert abs(naive / wall[-1] - 1) > abs(np.mean(totals) / wall[-1] - 1)
