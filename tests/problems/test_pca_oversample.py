"""PCA with oversampling: subspace iteration with Rayleigh-Ritz for every iterative method.

The iterate carries ``k + p`` columns; the update orders them by Ritz value, only the
top ``k`` Ritz pairs are judged, and the reported point is the top ``k`` Ritz vectors
from the final exact pass. Oracle: numpy's SVD.
"""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import fit_pca, open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import GD, make_method
from daskstraggle.problems import PCA, Block, block_stats
from daskstraggle.runtime import LocalRuntime, StopRule

TOL = 1e-8


@pytest.fixture(scope="module")
def flat() -> np.ndarray:
    """Three strong components, then a sampling-noise bulk (gaps of about 1 %)."""
    rng = np.random.default_rng(1)
    scales = np.concatenate([[6.0, 5.0, 4.0], np.ones(77)])
    rotation = np.linalg.qr(rng.normal(size=(80, 80)))[0]
    return (rng.normal(size=(2000, 80)) * scales) @ rotation.T + 1.5


def _top(dense: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    _, s, vt = np.linalg.svd(dense - dense.mean(axis=0), full_matrices=False)
    return s[:k] ** 2, vt[:k]


def _check(res, dense: np.ndarray, k: int) -> None:
    eigvals, vt = _top(dense, k)
    assert res.converged and res.stop_reason == "tol", (res.stop_reason, res.optimality)
    assert res.iterate.shape == (dense.shape[1], k)  # the top k Ritz vectors, not the block
    cos = np.abs(np.sum(res.fitted["components"] * vt, axis=1))
    assert cos.min() >= 1 - 1e-6, cos
    np.testing.assert_allclose(res.fitted["singular_values"] ** 2, eigvals, rtol=1e-8)
    assert res.objective == pytest.approx(1 - res.fitted["explained_variance_ratio"].sum(),
                                          abs=1e-12)


def test_oversampling_speeds_up_the_power_method(flat):
    plain = fit_pca(flat, 5, runtime="local", n_workers=2, method="gd", rng=0, tol=TOL,
                    max_iter=3000)
    over = fit_pca(flat, 5, runtime="local", n_workers=2, method="gd", rng=0, tol=TOL,
                   oversample=10, max_iter=3000)
    _check(plain, flat, 5)
    _check(over, flat, 5)
    assert over.n_iter < plain.n_iter / 3, (over.n_iter, plain.n_iter)


@pytest.mark.parametrize(("method", "params"), [
    ("coded", {"scheme": "cyclic-repetition", "n_stragglers": 1}),
    ("coded", {"scheme": "fractional-repetition", "n_stragglers": 1}),
    ("block", {}),
])
def test_every_exact_round_method_takes_it(flat, method, params):
    res = fit_pca(flat, 4, runtime="local", n_workers=4, method=method, rng=0, tol=TOL,
                  oversample=6, max_iter=3000, method_params=params)
    _check(res, flat, 4)


@pytest.mark.parametrize("method", ["sgd", "sag", "dsag", "partial", "async",
                                    "ignore-stragglers"])
def test_estimating_methods_refuse_it_before_any_work(flat, method):
    # their caches or partial sums only become exact at a fixed point, and the extra
    # columns (bulk directions) never settle: measured, dsag with 2 subpartitions ends at
    # a residual of 3.7e-3 with p = 6 against 3.1e-6 without
    with pytest.raises(InvalidParameterError, match=rf"'oversample' .* exact .*{method!r}"):
        fit_pca(flat, 4, runtime="local", n_workers=3, method=method, oversample=6)
    with pytest.raises(InvalidParameterError, match="'oversample'"):
        run_on(LocalRuntime(3), make_method(method), PCA(n_components=2, oversample=1),
                            open_matrix(flat))


def test_update_orders_the_block_by_ritz_value(flat):
    block = Block(flat)
    pca = PCA(n_components=2, oversample=3).bind(block_stats(block))
    V = pca.init_iterate(np.random.default_rng(0))
    assert V.shape == (80, 5)
    for _ in range(5):
        V = pca.update(V, pca.kernel(block, V).gradient, 1.0)
    values = pca.kernel(block, V).values
    assert np.all(np.diff(values[:3]) < 0)  # leading columns hold the leading directions
    # the objective counts the first k columns only
    assert pca.objective(values, V) == pytest.approx(1 - values[:2].sum() / pca.total)


def test_conclude_reports_the_top_ritz_pairs_from_the_same_pass(flat):
    block = Block(flat)
    pca = PCA(n_components=2, oversample=4).bind(block_stats(block))
    V = pca.init_iterate(np.random.default_rng(0))
    result = pca.kernel(block, V)
    Y, concluded = pca.conclude(V, result)
    assert Y.shape == (80, 2)
    exact = pca.kernel(block, Y)  # what a pass at Y would give
    np.testing.assert_allclose(concluded.gradient, exact.gradient, rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(concluded.values, exact.values, rtol=1e-10)
    # the top Ritz value is the largest Rayleigh quotient in the block's span
    assert concluded.values[0] >= concluded.values[1]
    assert concluded.values[0] >= result.values.max() * (1 - 1e-12)
    # without oversampling nothing changes
    plain = PCA(n_components=2).bind(block_stats(block))
    W = plain.init_iterate(np.random.default_rng(0))
    same = plain.kernel(block, W)
    assert plain.conclude(W, same) == (W, same)


def test_oversample_is_clamped_to_the_columns(flat):
    narrow = flat[:, :6]
    res = fit_pca(narrow, 4, runtime="local", n_workers=2, method="gd", rng=0, tol=TOL,
                  oversample=50, max_iter=500)
    assert res.converged and res.iterate.shape == (6, 4)


def test_without_oversampling_the_power_method_is_unchanged(flat):
    # the paper's power method (the reproductions' gd) takes the same steps as before:
    # orth(G) with no Ritz rotation, so its iterates match a hand-written loop
    block = Block(flat)
    pca = PCA(n_components=3).bind(block_stats(block))
    V = pca.init_iterate(np.random.default_rng(0))
    with LocalRuntime(2) as rt:
        res = run_on(rt, GD(), PCA(n_components=3), open_matrix(flat),
                     stop=StopRule(max_iter=4, tol=None), rng=0)
    from daskstraggle.problems._linalg import orthonormalize

    for _ in range(3):
        V = orthonormalize(pca.kernel(block, V).gradient / pca.total)
    np.testing.assert_allclose(res.trace.objective.values[-1],
                               pca.objective(pca.kernel(block, V).values, V), rtol=1e-12)
