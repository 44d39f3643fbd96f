"""PCA: kernels against dense formulas, power iteration and reference against the SVD."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

from daskstraggle.errors import (
    InvalidDataError,
    InvalidParameterError,
    StraggleError,
    StraggleWarning,
)
from daskstraggle.problems import PCA, KernelResult, MatrixStats, block_stats
from daskstraggle.problems._linalg import orthonormalize, sin_largest_angle


def _centred(X: np.ndarray, center: bool) -> np.ndarray:
    return X - X.mean(axis=0) if center else X


def _svd_basis(X: np.ndarray, k: int, center: bool) -> tuple[np.ndarray, np.ndarray]:
    """Return the top-k right singular vectors (d, k) and all squared singular values."""
    _, s, vt = np.linalg.svd(_centred(X, center), full_matrices=False)
    return vt[:k].T, s**2


def _power_method(pca: PCA, map_reduce, V: np.ndarray, step: float = 1.0, max_iter: int = 500):
    """Iterate ``update`` until the subspace stops moving; return (V, kernel result)."""
    for _ in range(max_iter):
        total = map_reduce(pca.kernel, V)
        V_next = pca.update(V, total.gradient, step)
        if sin_largest_angle(V_next, V) < 1e-13:
            V = V_next
            break
        V = V_next
    return V, map_reduce(pca.kernel, V)


@pytest.mark.parametrize("center", [True, False])
def test_kernel_sum_equals_dense_product(
    rng, center, small_tiles, low_rank_plus_noise, split_blocks, uneven_bounds, total_stats,
    local_map_reduce,
):
    X = low_rank_plus_noise(rng)
    blocks = split_blocks(X, bounds=uneven_bounds(X.shape[0], 5, rng))
    pca = PCA(n_components=3, center=center).bind(total_stats(blocks))
    V = pca.init_iterate(rng)
    total = local_map_reduce(blocks)(pca.kernel, V)
    Xc = _centred(X, center)
    expected = Xc.T @ (Xc @ V)
    np.testing.assert_allclose(total.gradient, expected, atol=1e-10 * np.abs(expected).max())
    np.testing.assert_allclose(total.values, ((Xc @ V) ** 2).sum(axis=0), rtol=1e-10)
    assert total.n_rows == X.shape[0]
    assert total.gradient.shape == (12, 3) and total.values.shape == (3,)
    assert pca.objective(total.values, V) == pytest.approx(
        1 - np.linalg.norm(Xc @ V) ** 2 / np.linalg.norm(Xc) ** 2, rel=1e-10
    )


@pytest.mark.parametrize("center", [True, False])
def test_kernel_on_genotype_and_float32_blocks_equals_dense(
    rng, center, small_tiles, mixed_blocks, total_stats, local_map_reduce
):
    blocks, X, _ = mixed_blocks(rng, n_features=9)
    pca = PCA(n_components=4, center=center).bind(total_stats(blocks))
    np.testing.assert_allclose(pca.mean, X.mean(axis=0) if center else 0.0, atol=1e-12)
    Xc = _centred(X, center)
    assert pca.total == pytest.approx(np.linalg.norm(Xc) ** 2, rel=1e-10)
    V = pca.init_iterate(rng)
    total = local_map_reduce(blocks)(pca.kernel, V)
    expected = Xc.T @ (Xc @ V)
    np.testing.assert_allclose(total.gradient, expected, atol=1e-10 * np.abs(expected).max())
    np.testing.assert_allclose(total.values, ((Xc @ V) ** 2).sum(axis=0), rtol=1e-10)
    assert total.n_rows == X.shape[0]


@pytest.mark.parametrize("center", [True, False])
def test_each_block_kernel_is_centred_by_the_global_mean(
    rng, center, small_tiles, mixed_blocks, total_stats
):
    # over all rows the mean correction cancels; a single block (what stochastic
    # methods use) is only right if it is applied per block
    blocks, X, _ = mixed_blocks(rng, n_features=6)
    pca = PCA(n_components=2, center=center).bind(total_stats(blocks))
    V = pca.init_iterate(rng)
    mu = X.mean(axis=0) if center else 0.0
    start = 0
    for block in blocks:
        rows = X[start : start + block.n_rows] - mu
        start += block.n_rows
        result = pca.kernel(block, V)
        expected = rows.T @ (rows @ V)
        np.testing.assert_allclose(result.gradient, expected,
                                   atol=1e-10 * max(np.abs(expected).max(), 1.0))
        np.testing.assert_allclose(result.values, ((rows @ V) ** 2).sum(axis=0), rtol=1e-10,
                                   atol=1e-12)
        assert result.n_rows == block.n_rows


def test_different_partitions_give_the_same_sums(
    rng, low_rank_plus_noise, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    X = low_rank_plus_noise(rng)
    one = split_blocks(X, bounds=uneven_bounds(X.shape[0], 3, rng))
    other = split_blocks(X, bounds=uneven_bounds(X.shape[0], 7, rng))
    pca = PCA(n_components=2).bind(total_stats(one))
    pca_other = PCA(n_components=2).bind(total_stats(other))
    np.testing.assert_allclose(pca.mean, pca_other.mean, rtol=1e-12)
    V = pca.init_iterate(rng)
    a = local_map_reduce(one)(pca.kernel, V)
    b = local_map_reduce(other)(pca.kernel, V)
    np.testing.assert_allclose(a.gradient, b.gradient, atol=1e-12 * np.abs(a.gradient).max())
    np.testing.assert_allclose(a.values, b.values, rtol=1e-12)


@pytest.mark.parametrize("center", [True, False])
def test_power_method_agrees_with_svd(
    rng, center, low_rank_plus_noise, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    X = low_rank_plus_noise(rng)
    blocks = split_blocks(X, bounds=uneven_bounds(X.shape[0], 4, rng))
    k = 3
    pca = PCA(n_components=k, center=center).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    V, result = _power_method(pca, map_reduce, pca.init_iterate(rng))
    np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-12)
    V_svd, s2 = _svd_basis(X, k, center)
    assert sin_largest_angle(V, V_svd) < 1e-6
    fitted = pca.finalize(V, result)
    np.testing.assert_allclose(fitted["explained_variance_ratio"], s2[:k] / s2.sum(), atol=1e-8)
    np.testing.assert_allclose(fitted["explained_variance"], s2[:k] / (X.shape[0] - 1), rtol=1e-8)
    np.testing.assert_allclose(fitted["singular_values"], np.sqrt(s2[:k]), rtol=1e-8)
    np.testing.assert_allclose(fitted["mean"], X.mean(axis=0) if center else 0.0, atol=1e-12)
    # components are the singular vectors up to sign, largest-magnitude entry positive
    components = fitted["components"]
    assert components.shape == (k, X.shape[1]) and components.dtype == np.float64
    np.testing.assert_allclose(np.abs(components @ V_svd), np.eye(k), atol=1e-6)
    pivots = components[np.arange(k), np.abs(components).argmax(axis=1)]
    assert (pivots > 0).all()
    assert pca.objective(result.values, V) == pytest.approx(1 - s2[:k].sum() / s2.sum(), abs=1e-10)


def test_components_match_scikit_learn(rng, low_rank_plus_noise, split_blocks, local_map_reduce):
    sklearn_decomposition = pytest.importorskip("sklearn.decomposition")
    X = low_rank_plus_noise(rng)
    blocks = split_blocks(X, bounds=[0, 100, 250, 400])
    pca = PCA(n_components=3).bind(block_stats(blocks[0]) + block_stats(blocks[1])
                                   + block_stats(blocks[2]))
    V, result = _power_method(pca, local_map_reduce(blocks), pca.init_iterate(rng))
    fitted = pca.finalize(V, result)
    skl = sklearn_decomposition.PCA(n_components=3, svd_solver="full").fit(X)
    np.testing.assert_allclose(fitted["explained_variance"], skl.explained_variance_, rtol=1e-8)
    np.testing.assert_allclose(
        fitted["explained_variance_ratio"], skl.explained_variance_ratio_, atol=1e-8
    )
    np.testing.assert_allclose(np.abs(fitted["components"]), np.abs(skl.components_), atol=1e-6)


def test_relaxed_step_converges_to_the_same_subspace(
    rng, low_rank_plus_noise, split_blocks, total_stats, local_map_reduce
):
    X = low_rank_plus_noise(rng)
    blocks = split_blocks(X, bounds=[0, 150, 400])
    pca = PCA(n_components=2).bind(total_stats(blocks))
    V, _ = _power_method(pca, local_map_reduce(blocks), pca.init_iterate(rng), step=0.9,
                         max_iter=3000)
    V_svd, _ = _svd_basis(X, 2, center=True)
    assert sin_largest_angle(V, V_svd) < 1e-6


@pytest.mark.parametrize("center", [True, False])
def test_reference_solution_agrees_with_svd(
    rng, center, low_rank_plus_noise, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    X = low_rank_plus_noise(rng, n_features=15)
    blocks = split_blocks(X, bounds=uneven_bounds(X.shape[0], 5, rng))
    k = 4
    pca = PCA(n_components=k, center=center).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    ref = pca.reference_solution(map_reduce)
    assert map_reduce.calls == 1 and ref.info["passes"] == 1
    V_svd, s2 = _svd_basis(X, k, center)
    assert ref.iterate.shape == (15, k)
    np.testing.assert_allclose(ref.iterate.T @ ref.iterate, np.eye(k), atol=1e-12)
    assert sin_largest_angle(ref.iterate, V_svd) < 1e-6
    assert pca.distance(ref.iterate, ref) < 1e-12
    np.testing.assert_allclose(ref.info["eigenvalues"] / s2.sum(), s2[:k] / s2.sum(), atol=1e-8)
    assert ref.objective == pytest.approx(1 - s2[:k].sum() / s2.sum(), abs=1e-10)
    # the power method reaches the reference objective
    V, result = _power_method(pca, map_reduce, pca.init_iterate(rng))
    assert pca.objective(result.values, V) == pytest.approx(ref.objective, abs=1e-10)
    assert pca.distance(V, ref) < 1e-6


def test_distance_is_the_sine_of_the_largest_principal_angle(rng):
    pca = PCA(n_components=2)
    basis = orthonormalize(rng.normal(size=(6, 6)))
    ref_iterate = basis[:, :2]
    from daskstraggle.problems import Reference

    ref = Reference(iterate=ref_iterate, objective=0.0)
    rotation = np.array([[np.cos(0.3), -np.sin(0.3)], [np.sin(0.3), np.cos(0.3)]])
    assert pca.distance(ref_iterate @ rotation, ref) < 1e-14  # same span
    assert pca.distance(basis[:, 2:4], ref) == pytest.approx(1.0)  # orthogonal
    theta = 1e-7  # accurate for tiny angles too
    tilted = np.column_stack(
        [np.cos(theta) * basis[:, 0] + np.sin(theta) * basis[:, 5], basis[:, 1]]
    )
    assert pca.distance(tilted, ref) == pytest.approx(np.sin(theta), rel=1e-6)


def test_update_is_orthonormal_and_deterministic(rng):
    pca = PCA(n_components=3).bind(MatrixStats(n_samples=10, column_sums=np.zeros(5), sq_norm=4.0))
    V = pca.init_iterate(rng)
    G = rng.normal(size=(5, 3))
    for step in (1.0, 0.5):
        new = pca.update(V, G, step)
        np.testing.assert_allclose(new.T @ new, np.eye(3), atol=1e-12)
        np.testing.assert_array_equal(new, pca.update(V, G, step))
        # the span of the update normalised by the top Rayleigh quotient, diag(R) > 0
        M = V.T @ G
        scale = np.linalg.eigvalsh((M + M.T) / 2)[-1] if step < 1 else 4.0
        if scale <= 0:
            scale = 4.0
        Y = (1 - step) * V + step * G / scale
        R = new.T @ Y
        np.testing.assert_allclose(np.tril(R, -1), 0.0, atol=1e-12)
        assert (np.diag(R) > 0).all()


def test_rank_deficient_data_keeps_an_orthonormal_basis(
    rng, split_blocks, total_stats, local_map_reduce
):
    X = rng.normal(size=(80, 2)) @ rng.normal(size=(2, 6))  # rank 2 (centred: rank 2)
    blocks = split_blocks(X, bounds=[0, 30, 80])
    pca = PCA(n_components=4).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    V, result = _power_method(pca, map_reduce, pca.init_iterate(rng), max_iter=100)
    assert np.isfinite(V).all()
    np.testing.assert_allclose(V.T @ V, np.eye(4), atol=1e-12)
    assert abs(pca.objective(result.values, V)) < 1e-12
    # an exactly zero gradient (a zero column) is filled deterministically
    G = np.zeros((6, 4))
    G[:, 0] = 1.0
    filled = pca.update(V, G, 1.0)
    np.testing.assert_allclose(filled.T @ filled, np.eye(4), atol=1e-12)
    np.testing.assert_array_equal(filled, pca.update(V, G, 1.0))
    with pytest.warns(StraggleWarning, match="only 2 of the 4 components have non-zero"):
        fitted = pca.finalize(V, result)
    np.testing.assert_array_equal(fitted["explained_variance_ratio"][2:], 0.0)
    assert (fitted["singular_values"] >= 0).all()


def test_init_iterate_is_a_seeded_orthonormal_basis():
    pca = PCA(n_components=3).bind(MatrixStats(n_samples=4, column_sums=np.ones(7), sq_norm=9.0))
    V = pca.init_iterate(np.random.default_rng(3))
    assert V.shape == (7, 3)
    np.testing.assert_allclose(V.T @ V, np.eye(3), atol=1e-12)
    np.testing.assert_array_equal(V, pca.init_iterate(np.random.default_rng(3)))


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", True, None])
def test_invalid_n_components_is_refused(bad):
    with pytest.raises(InvalidParameterError, match="'n_components' parameter of PCA"):
        PCA(n_components=bad)


def test_more_components_than_columns_is_refused():
    stats = MatrixStats(n_samples=20, column_sums=np.zeros(5), sq_norm=3.0)
    message = re.escape(
        "The 'n_components' parameter of PCA must be an int in [1, 5] (the matrix has 5 "
        "columns). Got 6 instead."
    )
    with pytest.raises(InvalidParameterError, match=message):
        PCA(n_components=6).bind(stats)
    with pytest.raises(InvalidParameterError, match="has 5 columns"):
        PCA(n_components=6).check_shape(20, 5)
    PCA(n_components=5).check_shape(20, 5)


def test_invalid_center_is_refused():
    with pytest.raises(InvalidParameterError, match="'center' parameter of PCA"):
        PCA(center="yes")


def test_constant_matrix_is_refused(split_blocks, total_stats):
    X = np.tile(np.array([1.0, -2.0, 3e3]), (50, 1))
    with pytest.raises(InvalidDataError, match="every column is constant"):
        PCA(n_components=1).bind(total_stats(split_blocks(X, bounds=[0, 20, 50])))
    with pytest.raises(InvalidDataError, match="all zeros"):
        PCA(n_components=1, center=False).bind(total_stats(split_blocks(0 * X)))
    # without centring a constant (non-zero) matrix has rank one and is fine
    PCA(n_components=1, center=False).bind(total_stats(split_blocks(X)))


def test_unbound_problem_says_to_bind(rng, split_blocks):
    pca = PCA(n_components=1)
    assert not pca.is_bound
    with pytest.raises(StraggleError, match=r"bind\(stats\)"):
        pca.kernel(split_blocks(rng.normal(size=(5, 3)))[0], np.zeros((3, 1)))


def test_reference_refuses_very_wide_matrices():
    stats = MatrixStats(n_samples=3, column_sums=np.zeros(20_001), sq_norm=1.0)
    pca = PCA(n_components=2, center=False).bind(stats)

    def never(*args, **kwargs):
        raise AssertionError("no pass over the data expected")

    with pytest.raises(InvalidParameterError, match="reference=False"):
        pca.reference_solution(never)


def test_bound_problem_is_small_and_picklable(
    rng, low_rank_plus_noise, split_blocks, total_stats
):
    X = low_rank_plus_noise(rng)
    blocks = split_blocks(X, bounds=[0, 200, 400])
    pca = PCA(n_components=3).bind(total_stats(blocks))
    payload = pickle.dumps(pca)
    assert len(payload) < 2_000
    clone = pickle.loads(payload)
    assert clone.is_bound and clone == pca
    V = pca.init_iterate(rng)
    a, b = pca.kernel(blocks[0], V), clone.kernel(blocks[0], V)
    np.testing.assert_array_equal(a.gradient, b.gradient)
    assert clone.get_params() == {"n_components": 3, "center": True, "oversample": None,
                                  "min_eigengap": None}


def test_step_size_momentum_flag_and_finalize_types(rng):
    pca = PCA(n_components=2).bind(MatrixStats(n_samples=8, column_sums=np.ones(4), sq_norm=5.0))
    assert pca.default_step_size(lambda *a, **k: None, rng) == 1.0
    assert PCA.supports_momentum is False and PCA.needs_labels is False
    assert PCA.name == "pca"
    # covariance diag(3, 2, 1, 0.5): Rayleigh-Ritz on the first two axes, given reversed
    V = np.eye(4)[:, [1, 0]]
    result = KernelResult(gradient=np.diag([3.0, 2.0, 1.0, 0.5]) @ V, values=np.ones(2), n_rows=8)
    fitted = pca.finalize(V, result)
    assert all(v.dtype == np.float64 for v in fitted.values())
    np.testing.assert_allclose(fitted["explained_variance"], [3 / 7, 2 / 7])
    np.testing.assert_allclose(fitted["explained_variance_ratio"], [3 / pca.total, 2 / pca.total])
    np.testing.assert_allclose(fitted["components"], np.eye(4)[:2], atol=1e-15)


def test_relaxed_step_is_nearly_as_fast_as_the_power_method(rng, split_blocks, total_stats,
                                                              local_map_reduce):
    # top 3 components explain 23 % of the variance: a total-variance normaliser would let
    # the (1 - eta) V term dominate and cost ~3x the power method's iterations at eta 0.9
    lam = np.concatenate([[12.0, 9.0, 6.0], 4.5 * 0.95 ** np.arange(57)])
    X = rng.standard_normal((4000, 60)) * np.sqrt(lam)
    blocks = split_blocks(X, bounds=[0, 1500, 4000])
    pca = PCA(n_components=3).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    _, s2 = _svd_basis(X, 3, True)
    best = 1 - s2[:3].sum() / s2.sum()
    needed = {}
    for eta in (1.0, 0.9):
        V = pca.init_iterate(np.random.default_rng(0))
        needed[eta] = 399  # not reached
        for it in range(1, 400):
            res = map_reduce(pca.kernel, V)
            if pca.objective(res.values, V) - best <= 1e-8:
                needed[eta] = it
                break
            V = pca.update(V, res.gradient, eta)
    assert needed[1.0] < 399
    assert needed[0.9] <= 1.4 * needed[1.0] + 2, needed
