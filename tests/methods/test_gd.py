"""GD and NAG as pure policies (events in, decisions out) and through the local runtime."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import GD, NAG, StopRule, open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import WorkResult, contiguous_placement, list_methods, make_method
from daskstraggle.problems import PCA, KernelResult, LeastSquares, block_stats
from daskstraggle.problems.block import Block
from daskstraggle.runtime import LocalRuntime


def _bound_least_squares(X, y):
    blocks = [Block(X[a:b], start=a, y=y[a:b]) for a, b in ((0, 30), (30, 70), (70, 100))]
    stats = block_stats(blocks[0]) + block_stats(blocks[1]) + block_stats(blocks[2])
    return LeastSquares(alpha=0.0).bind(stats), blocks


def test_contiguous_placement_covers_every_partition_once():
    for n_parts, n_workers in [(4, 4), (10, 3), (7, 7), (100, 6)]:
        placement = contiguous_placement(n_parts, n_workers)
        assert len(placement) == n_workers
        flat = [p for parts in placement for p in parts]
        assert flat == list(range(n_parts))
        sizes = [len(p) for p in placement]
        assert max(sizes) - min(sizes) <= 1


def test_gd_waits_for_every_worker_and_ignores_stale_results():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, 4)), rng.normal(size=100)
    problem, blocks = _bound_least_squares(X, y)
    gd = GD()
    gd.start(problem, np.zeros(5), [(0,), (1,), (2,)], step_size=0.1)
    units = [gd.dispatch(i) for i in range(3)]
    assert [u.partitions for u in units] == [(0,), (1,), (2,)]
    assert gd.dispatch(0) is None  # one unit per worker and round
    results = [WorkResult(u, problem.kernel(blocks[u.worker_index], u.iterate), 0.0) for u in units]
    gd.receive(results[2])
    gd.receive(results[0])
    assert not gd.ready()
    gd.receive(results[1])
    assert gd.ready()
    summary = gd.summary()
    assert summary.workers_used == (0, 1, 2) and summary.n_fresh == 3
    full = problem.kernel(Block(X, y=y), np.zeros(5))
    np.testing.assert_allclose(summary.result.gradient, full.gradient, rtol=1e-12)
    gd.step()
    assert gd.version == 1 and not gd.ready()
    gd.receive(results[0])  # version 0: stale, ignored
    assert not gd.ready()
    np.testing.assert_allclose(gd.dispatch(1).iterate, -0.1 * full.gradient, rtol=1e-12)


def test_gd_iterates_equal_dense_gradient_descent(low_rank_matrix):
    rng = np.random.default_rng(1)
    X = low_rank_matrix[:, :6]
    y = X @ rng.normal(size=6) + rng.normal(size=len(X))
    with LocalRuntime(n_workers=3) as rt:
        res = run_on(rt, GD(), LeastSquares(), open_matrix(X, labels=y), step_size=1e-3,
                     stop=StopRule(max_iter=5, tol=None))
    A = np.hstack([X, np.ones((len(X), 1))])
    w = np.zeros(7)
    for _ in range(4):  # 5 evaluated points = 4 steps
        w = w - 1e-3 * A.T @ (A @ w - y) / len(X)
    np.testing.assert_allclose(res.iterate, w, rtol=1e-10)
    assert res.n_iter == 5 and res.stop_reason == "max_iter"


def test_nag_converges_faster_than_gd_and_reaches_the_optimum():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 8)) * np.geomspace(1, 10, 8)
    y = X @ rng.normal(size=8) + 0.1 * rng.normal(size=400)
    m = open_matrix(X, labels=y)
    out = {}
    with LocalRuntime(n_workers=4) as rt:
        for method in (GD(), NAG()):
            out[method.name] = run_on(rt, method, LeastSquares(), m, reference=True, rng=0,
                                      stop=StopRule(max_iter=3000, tol=None, gap_tol=1e-10))
    assert out["nag"].stop_reason == "gap"
    assert out["nag"].n_iter < out["gd"].n_iter / 2
    assert out["nag"].gap <= 1e-10 * max(1.0, abs(out["nag"].reference_objective))


def test_nag_refuses_pca():
    with pytest.raises(InvalidParameterError, match="for pca: its iterates are subspaces"):
        with LocalRuntime(n_workers=2) as rt:
            run_on(rt, NAG(), PCA(n_components=1), open_matrix(np.eye(4)))


def test_registry():
    assert list_methods() == ["async", "block", "coded", "dsag", "gd", "gram",
                              "ignore-stragglers", "nag", "partial", "sag", "sgd"]
    assert isinstance(make_method("nag"), NAG)
    with pytest.raises(InvalidParameterError,
                       match=r"'method' parameter must be one of \['async', 'block', 'coded'"):
        make_method("sgd-typo")


def test_kernel_result_adds():
    a = KernelResult(np.ones(2), np.array([1.0]), 3)
    b = a + a
    assert b.n_rows == 6 and b.values[0] == 2.0


class _EarlierGD(GD):
    """GD written to the method hooks of earlier releases: ``_reset(placement,
    partition_rows)`` and ``summary()`` overridden (no ``_summarise``)."""

    def _reset(self, placement, partition_rows):  # type: ignore[override]
        self.placement_given = placement
        super()._reset()

    def summary(self):
        return GD._summarise(self)


def test_a_method_written_to_the_earlier_hooks_still_runs_with_a_deprecation_warning():
    X = np.random.default_rng(0).normal(size=(60, 4))
    stop = StopRule(max_iter=5, tol=None)
    with LocalRuntime(2) as rt:
        clean = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=stop, rng=0)
        earlier = _EarlierGD()
        with pytest.warns(DeprecationWarning, match=r"_EarlierGD\._reset\(placement, "
                          r"partition_rows\) is deprecated: take no arguments"):
            res = run_on(rt, earlier, PCA(n_components=2), open_matrix(X), stop=stop, rng=0)
    np.testing.assert_array_equal(res.iterate, clean.iterate)
    assert earlier.placement_given == earlier._placement
    # a method that overrides summary() need not write _summarise()
    from daskstraggle.methods.base import Method

    assert "_summarise" not in Method.__abstractmethods__
