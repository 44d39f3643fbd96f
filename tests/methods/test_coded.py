"""Coded GD: exact GD iterates from a subset of workers, on simulated and real clusters."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import Constant
from daskstraggle.methods import GD, NAG, CodedGD, IgnoreStragglers, make_method
from daskstraggle.problems import PCA, LeastSquares, Logistic
from daskstraggle.runtime import DaskRuntime, LocalRuntime, SimRuntime, StopRule

STOP = StopRule(max_iter=8, tol=None)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(720, 6)) @ np.diag([4.0, 3, 2, 1, 1, 0.5])
    return X, X @ rng.normal(size=6) + 0.1 * rng.normal(size=720)


def _gd(X, y, n_workers):
    with LocalRuntime(n_workers) as rt:
        return run_on(rt, GD(), LeastSquares(), open_matrix(X, labels=y), stop=STOP,
                      step_size=1e-3, rng=0)


@pytest.mark.parametrize(
    ("scheme", "params", "n"),
    [
        ("uncoded", {}, 4),
        ("fractional-repetition", {"n_stragglers": 1}, 6),
        ("cyclic-repetition", {"n_stragglers": 2}, 7),
        ("partial-straggler", {"n_stragglers": 1, "alpha": 2}, 3),
        ("bcc", {"batch_size": 3}, 12),
        ("bcc-heterogeneous", {"shift": 0.1, "rate": 5.0, "n_partitions": 6}, 12),
    ],
)
def test_iterates_equal_gd_despite_a_straggler(data, scheme, params, n):
    X, y = data
    slow = tuple(1.0 if i else 20.0 for i in range(n))  # worker 0 is 20x slower
    with SimRuntime(n, latency=Constant(compute=slow), rng=0) as rt:
        coded = run_on(rt, CodedGD(scheme, rng=1, **params), LeastSquares(),
                       open_matrix(X, labels=y), stop=STOP, step_size=1e-3, rng=0)
    ref = _gd(X, y, n)
    np.testing.assert_allclose(coded.iterate, ref.iterate, rtol=1e-10, atol=1e-12)
    assert coded.trace.sizes["iteration"] == 8
    # a code that tolerates full stragglers never waits for worker 0 (the partial-straggler
    # scheme needs every worker's naive part: it tolerates slow workers, not absent ones)
    if scheme not in ("uncoded", "partial-straggler"):
        used = np.asarray(coded.trace.n_workers_used)
        assert float(coded.trace.wall_time[-1]) < 8 * 20.0
        assert (used <= n).all()


def test_a_round_decodes_once_every_partition_is_covered_not_at_every_message(
        data, monkeypatch):
    """60 workers: one decode a round (it was one per message, O(N^2) a round)."""
    from daskstraggle.coding import repetition

    calls = []
    decoder = repetition._decode_fractional

    def counted(assignment, received, **kwargs):
        calls.append(len(received))
        return decoder(assignment, received, **kwargs)

    monkeypatch.setattr(repetition, "_decode_fractional", counted)
    X, y = data
    with SimRuntime(60, latency=Constant(compute=1.0), rng=0) as rt:
        coded = run_on(rt, CodedGD("fractional-repetition", n_stragglers=2, rng=1),
                       LeastSquares(), open_matrix(X, labels=y), stop=STOP, step_size=1e-3,
                       rng=0)
    assert coded.trace.sizes["iteration"] == 8
    assert len(calls) == 8, calls
    np.testing.assert_allclose(coded.iterate, _gd(X, y, 60).iterate, rtol=1e-10, atol=1e-12)


def test_uncoded_waits_for_the_straggler(data):
    X, y = data
    with SimRuntime(4, latency=Constant(compute=(5.0, 1.0, 1.0, 1.0)), rng=0) as rt:
        res = run_on(rt, CodedGD("uncoded"), LeastSquares(), open_matrix(X, labels=y),
                     stop=STOP, step_size=1e-3, rng=0)
    np.testing.assert_allclose(res.trace.iteration_duration, 5.0)


def test_cyclic_repetition_step_time_ignores_one_straggler(data):
    X, y = data
    times = []
    for delay in (10.0, 100.0):
        latency = Constant(compute=(delay, 1.0, 1.0, 1.0, 1.0))
        with SimRuntime(5, latency=latency, rng=0) as rt:
            res = run_on(rt, CodedGD("cyclic-repetition", n_stragglers=1, rng=0), LeastSquares(),
                         open_matrix(X, labels=y), stop=STOP, step_size=1e-3, rng=0)
        times.append(np.asarray(res.trace.iteration_duration))
    # each worker stores s + 1 = 2 partitions: twice the work of an uncoded worker
    np.testing.assert_allclose(times[0], 2.0)
    np.testing.assert_allclose(times[1], 2.0)


def test_pca_iterates_equal_the_power_method(data):
    X, _ = data
    with SimRuntime(5, latency=Constant(compute=(9.0, 1, 1, 1, 1)), rng=0) as rt:
        coded = run_on(rt, CodedGD("cyclic-repetition", n_stragglers=1, rng=2), PCA(n_components=2),
                       open_matrix(X), stop=STOP, rng=0)
    with LocalRuntime(5) as rt:
        ref = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
    np.testing.assert_allclose(coded.iterate, ref.iterate, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("scheme", ["cyclic-repetition", "bcc"])
def test_nesterov_iterates_equal_nag(data, scheme):
    X, y = data
    labels = np.where(y > 0, 1.0, -1.0)
    params = {"n_stragglers": 2} if scheme == "cyclic-repetition" else {"batch_size": 3}
    slow = (20.0,) + (1.0,) * 11
    stop = StopRule(max_iter=30, tol=None)
    with SimRuntime(12, latency=Constant(compute=slow), rng=0) as rt:
        coded = run_on(rt, CodedGD(scheme, rng=1, nesterov=True, **params), Logistic(),
                       open_matrix(X, labels=labels), stop=stop, rng=0)
    with LocalRuntime(12) as rt:
        ref = run_on(rt, NAG(), Logistic(), open_matrix(X, labels=labels), stop=stop,
                     rng=0)
        plain = run_on(rt, GD(), Logistic(), open_matrix(X, labels=labels), stop=stop,
                       rng=0)
    np.testing.assert_allclose(coded.iterate, ref.iterate, rtol=1e-10, atol=1e-12)
    # the momentum is really applied: after 30 steps NAG is not where plain GD is
    assert np.abs(ref.iterate - plain.iterate).max() > 1e-3
    assert float(coded.trace.wall_time[-1]) < 30 * 20.0  # worker 0 was never waited for


def test_bad_schemes_and_settings(data):
    X, y = data
    with pytest.raises(InvalidParameterError, match="'scheme' parameter must be one of"):
        CodedGD("lt-code")
    with pytest.raises(InvalidParameterError, match="latency-only bound"):
        with SimRuntime(4) as rt:
            run_on(rt, CodedGD("mds-ideal", rate=0.5), LeastSquares(), open_matrix(X, labels=y),
                   stop=STOP)
    with pytest.raises(InvalidParameterError, match="n_stragglers"):
        with SimRuntime(4) as rt:
            run_on(rt, CodedGD("cyclic-repetition", n_stragglers=4), LeastSquares(),
                   open_matrix(X, labels=y), stop=STOP)
    with pytest.raises(InvalidParameterError, match="never decode"):
        with SimRuntime(2) as rt:  # 2 workers pick among 6 batches of 1: never covers
            run_on(rt, CodedGD("bcc", batch_size=1, n_partitions=6, rng=0), LeastSquares(),
                   open_matrix(X, labels=y), stop=STOP)
    assert isinstance(make_method("coded", scheme="bcc", batch_size=2), CodedGD)
    with pytest.raises(InvalidParameterError,
                       match="'nesterov' parameter of CodedGD must be False"):
        with SimRuntime(5) as rt:
            run_on(rt, CodedGD("cyclic-repetition", n_stragglers=1, nesterov=True),
                   PCA(n_components=2), open_matrix(X), stop=STOP)
    with pytest.raises(InvalidParameterError, match="'nesterov' parameter of CodedGD"):
        CodedGD(nesterov="yes")


def test_ignore_stragglers_waits_for_n_minus_s(data):
    X, y = data
    with SimRuntime(5, latency=Constant(compute=(1.0, 2.0, 3.0, 4.0, 50.0)), rng=0) as rt:
        res = run_on(rt, IgnoreStragglers(n_stragglers=1), LeastSquares(), open_matrix(X, labels=y),
                     stop=StopRule(max_iter=2, tol=None), step_size=1e-3, rng=0)
    np.testing.assert_allclose(res.trace.wall_time, [4.0, 8.0])
    np.testing.assert_array_equal(res.trace.n_fresh, [4, 4])
    with pytest.raises(InvalidParameterError, match="'n_stragglers' parameter of IgnoreStr"):
        with SimRuntime(3) as rt:
            run_on(rt, IgnoreStragglers(n_stragglers=3), LeastSquares(), open_matrix(X, labels=y))


@pytest.mark.cluster
def test_on_six_process_workers_a_1s_straggler_does_not_slow_coded_gd(data):
    X, y = data
    with DaskRuntime(n_workers=6, stragglers="constant(compute=[1.0, 0, 0, 0, 0, 0])") as rt:
        coded = run_on(rt, CodedGD("cyclic-repetition", n_stragglers=1, rng=0), LeastSquares(),
                       open_matrix(X, labels=y), stop=STOP, step_size=1e-3, rng=0)
    ref = _gd(X, y, 6)
    np.testing.assert_allclose(coded.iterate, ref.iterate, rtol=1e-10, atol=1e-12)
    # rounds decode without the 1 s worker: below its delay, whatever the machine's load
    # (a round that waited for it would last at least 1 s; 0.5 s failed at load 11)
    assert float(np.median(coded.trace.iteration_duration)) < 1.0
    # worker 0 (1 s per task) delivers in at most one round in three
    assert np.isnan(coded.trace.compute_duration.values[:, 0]).mean() > 0.6


def test_a_scheme_that_replicates_everything_says_so():
    import numpy as np

    from daskstraggle import fit_least_squares
    from daskstraggle.errors import StraggleWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = X @ rng.normal(size=4)
    with pytest.warns(StraggleWarning, match="stores the whole matrix on every one of the 3 "
                      "workers"):
        fit_least_squares(X, y, runtime="local", n_workers=3, method="coded",
                          method_params={"scheme": "cyclic-repetition", "n_stragglers": 2})
