"""Load-balanced SGD, SAG and DSAG: live resizing of subpartitions and its settings."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle.api import run_on
from daskstraggle.balance.balancer import LoadBalancer
from daskstraggle.data import open_matrix
from daskstraggle.engine.stop import StopRule
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import DSAG, GD, SAG, SGD
from daskstraggle.methods.base import WorkResult
from daskstraggle.problems import PCA, Block, LeastSquares, Logistic, block_stats
from daskstraggle.runtime import LocalRuntime, SimRuntime

SLOW = ("gamma(mean=0.2, var=1e-4, communication_mean=0.002, communication_var=1e-7)"
        " + slowdown(workers=0, factor=2)")


def _started(method, n_rows=20, n_workers=2):
    problem = LeastSquares(fit_intercept=False).bind(
        block_stats(Block(np.zeros((n_rows, 3)), y=np.zeros(n_rows))))
    rows = [n_rows // n_workers] * n_workers
    method.start(problem, np.zeros(3), [(i,) for i in range(n_workers)], step_size=0.1,
                 partition_rows=rows)
    return method


def _deliver(method, unit, value=1.0):
    from daskstraggle.problems.base import KernelResult

    result = KernelResult(np.full(3, value), np.array([0.0]), unit.rows[1] - unit.rows[0])
    method.receive(WorkResult(unit, result, 0.0))


def test_resizing_follows_the_papers_examples_2_and_3():
    # worker 0 holds rows 1-10 (1-based), p = 2: after X_1:5, p <- 3 starts at X_1:3
    dsag = _started(DSAG(n_wait=2, subpartitions=2))
    for expected in [(0, 5), (5, 10), (0, 5)]:  # the last one processed is X_1:5 (k = 1)
        unit = dsag.dispatch(0)
        assert unit.rows == expected
        _deliver(dsag, unit)
        _deliver(dsag, dsag.dispatch(1))
        dsag.step()
    assert dsag.set_subpartitions([3, 2]) == [(0, 2, 3)]
    assert dsag.subpartition_counts == (3, 2)
    # the cache holds X_1:5 and X_6:10 from worker 0 (and worker 1's two halves)
    assert dsag.cache.covered == 20
    missing = []
    for expected in [(0, 3), (3, 6), (6, 10)]:
        unit = dsag.dispatch(0)
        assert unit.rows == expected
        _deliver(dsag, unit)
        _deliver(dsag, dsag.dispatch(1))
        missing.append(10 - sum(e.n_rows for e in dsag.cache if e.ranges[0][0] < 10))
        dsag.step()
    # Example 2: X_4:5 missing for one iteration, X_7:10 for one, then none
    assert missing == [2, 4, 0]


def test_unchanged_counts_change_nothing():
    sgd = _started(SGD(n_wait=2, subpartitions=[2, 5]))
    assert sgd.set_subpartitions([2, 5]) == []
    assert sgd.subpartition_counts == (2, 5) and sgd.worker_rows == (10, 10)


@pytest.mark.parametrize(
    ("counts", "match"),
    [([0, 2], "'counts' parameter"), ([11, 2], "'counts' parameter"),
     ([2], "one value per worker")],
)
def test_bad_counts(counts, match):
    dsag = _started(DSAG(n_wait=2, subpartitions=2))
    with pytest.raises(InvalidParameterError, match=match):
        dsag.set_subpartitions(counts)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: LoadBalancer(window=0), "'window' parameter of LoadBalancer"),
        (lambda: LoadBalancer(window=-1.0), "'window' parameter of LoadBalancer"),
        (lambda: LoadBalancer(margin=0.0), "'margin' parameter of LoadBalancer"),
        (lambda: LoadBalancer(margin=1.0), "'margin' parameter of LoadBalancer"),
        (lambda: LoadBalancer(interval=0), "'interval' parameter of LoadBalancer"),
        (lambda: DSAG(2, subpartitions=0, balance=True), "'subpartitions' parameter of DSAG"),
        (lambda: SGD(2, subpartitions=[1, 0]), "'subpartitions' parameter of SGD"),
        (lambda: SAG(2, balance="yes"), "'balance' parameter of SAG"),
    ],
)
def test_bad_settings_give_one_clear_error(make, match):
    with pytest.raises(InvalidParameterError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def logistic_data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2400, 8))
    y = np.where(X @ rng.normal(size=8) + 0.5 * rng.normal(size=2400) > 0, 1.0, -1.0)
    return X, y


def test_dsag_lb_balances_and_still_reaches_the_optimum(logistic_data):
    X, y = logistic_data
    matrix = open_matrix(X, labels=y)
    problem = Logistic(alpha=0.05)
    with LocalRuntime(4) as rt:
        ref = run_on(rt, GD(), problem, matrix, stop=StopRule(max_iter=1, tol=None), rng=0,
                     reference=True).reference_objective
    runs = {}
    for balance in (None, LoadBalancer(min_samples=5)):
        with SimRuntime(4, latency=SLOW, rng=1) as rt:
            runs[balance is not None] = run_on(rt,
                DSAG(n_wait=3, subpartitions=12, balance=balance), problem, matrix,
                stop=StopRule(max_iter=800, tol=None), rng=0)
    balanced, plain = runs[True], runs[False]
    trace = balanced.trace
    assert trace.sizes["balance_event"] >= 1
    first = trace.balance_subpartitions.values[0]
    # the slow worker 0 gets more, smaller subpartitions than the fast ones
    assert first[0] > first[1:].max()
    assert (trace.subpartitions.values[-1] == trace.balance_subpartitions.values[-1]).all()
    assert (trace.balance_improvement.values >= 0.1).all()
    # evictions are re-covered: DSAG-LB reaches the exact optimum
    assert abs(balanced.objective - ref) / abs(ref) < 1e-8
    # with w < N the gain is participation, not shorter rounds (paper §VII-C): the
    # workers' task latencies even out, so the slow worker's results are fresh again
    def spread(t):
        means = np.nanmean(t.latency.values[100:], axis=0)
        return means.max() / means.min()

    assert spread(trace) < 1.2 < 1.5 < spread(plain.trace)
    assert "balance_event" not in plain.trace.dims


@pytest.mark.parametrize("method_class", [SGD, SAG])
def test_sgd_and_sag_balance_too(logistic_data, method_class):
    X, y = logistic_data
    with SimRuntime(4, latency=SLOW, rng=2) as rt:
        res = run_on(rt, method_class(n_wait=4, subpartitions=12,
                                  balance=LoadBalancer(min_samples=5)),
                     Logistic(alpha=0.05), open_matrix(X, labels=y),
                     stop=StopRule(max_iter=80, tol=None), rng=0)
    trace = res.trace
    assert trace.sizes["balance_event"] >= 1
    assert trace.balance_subpartitions.values[0][0] > trace.balance_subpartitions.values[0][1]
    lat = trace.latency.values[-20:]
    means = np.nanmean(lat, axis=0)
    assert means.max() / means.min() < 1.2


def test_pca_dsag_lb_reaches_the_optimum():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1200, 12)) * np.r_[5.0, 4.0, np.linspace(2, 1, 10)]
    with SimRuntime(4, latency=SLOW, rng=3) as rt:
        res = run_on(rt, DSAG(n_wait=4, subpartitions=10, balance=LoadBalancer(min_samples=5)),
                     PCA(n_components=2), open_matrix(X), step_size=0.9,
                     stop=StopRule(max_iter=300, tol=None), rng=0, reference=True)
    assert res.trace.sizes["balance_event"] >= 1
    assert abs(res.objective - res.reference_objective) < 1e-8


def test_first_plan_comes_as_soon_as_statistics_are_ready(logistic_data):
    # every worker answers once per iteration (w = N), so min_samples=5 is reached after
    # 5 rows; a not-ready attempt must not start the interval (100 simulated seconds,
    # longer than the run), and on the simulated runtime the plan applies at once
    X, y = logistic_data
    with SimRuntime(4, latency=SLOW, rng=2) as rt:
        res = run_on(rt, SGD(n_wait=4, subpartitions=12,
                         balance=LoadBalancer(min_samples=5, interval=100.0)),
                     Logistic(alpha=0.05), open_matrix(X, labels=y),
                     stop=StopRule(max_iter=30, tol=None), rng=0)
    trace = res.trace
    assert trace.balance_iteration.values.tolist() == [5]
    assert (trace.subpartitions.values[:5] == 12).all()
    assert (trace.subpartitions.values[5] == trace.balance_subpartitions.values[0]).all()
