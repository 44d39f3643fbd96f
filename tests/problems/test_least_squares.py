"""Least squares: kernels against dense formulas, TSQR reference against lstsq and Ridge."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

from daskstraggle.errors import InvalidDataError, InvalidParameterError
from daskstraggle.problems import LeastSquares, MatrixStats


def _design(X: np.ndarray, fit_intercept: bool) -> np.ndarray:
    return np.column_stack([X, np.ones(X.shape[0])]) if fit_intercept else X


def _dense_objective(X, y, x, alpha, fit_intercept):
    r = _design(X, fit_intercept) @ x - y
    w = x[: X.shape[1]]
    return r @ r / (2 * len(y)) + 0.5 * alpha * w @ w


def _targets(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return X @ rng.normal(size=X.shape[1]) + 1.5 + 0.1 * rng.normal(size=X.shape[0])


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_kernel_on_every_block_kind_equals_dense(
    rng, fit_intercept, small_tiles, mixed_blocks, total_stats, local_map_reduce
):
    blocks, X, y = mixed_blocks(rng, n_features=7, labels=lambda X: _targets(X, rng))
    problem = LeastSquares(alpha=0.2, fit_intercept=fit_intercept).bind(total_stats(blocks))
    x = rng.normal(size=problem.n_params)
    total = local_map_reduce(blocks)(problem.kernel, x)
    A = _design(X, fit_intercept)
    np.testing.assert_allclose(total.gradient, A.T @ (A @ x - y) / len(y), rtol=1e-12, atol=1e-14)
    assert total.n_rows == X.shape[0]
    assert problem.objective(total.values, x) == pytest.approx(
        _dense_objective(X, y, x, 0.2, fit_intercept), rel=1e-12
    )


def test_gradient_matches_finite_differences(rng, mixed_blocks, total_stats, local_map_reduce):
    blocks, _, _ = mixed_blocks(rng, n_features=4, labels=lambda X: _targets(X, rng))
    problem = LeastSquares(alpha=0.5).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    x = rng.normal(size=5)

    def f(z):
        return problem.objective(map_reduce(problem.kernel, z).values, z)

    full = map_reduce(problem.kernel, x).gradient + np.append(0.5 * x[:4], 0.0)
    h = 1e-5
    numeric = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(5)])
    np.testing.assert_allclose(full, numeric, rtol=1e-7, atol=1e-9)


def test_different_partitions_give_the_same_sums_and_reference(
    rng, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    X = rng.normal(size=(250, 6))
    y = _targets(X, rng)
    one = split_blocks(X, y, uneven_bounds(250, 3, rng))
    other = split_blocks(X, y, uneven_bounds(250, 9, rng))
    problem = LeastSquares(alpha=0.01).bind(total_stats(one))
    x = rng.normal(size=7)
    a, b = local_map_reduce(one)(problem.kernel, x), local_map_reduce(other)(problem.kernel, x)
    np.testing.assert_allclose(a.gradient, b.gradient, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.values, b.values, rtol=1e-12)
    ref_a = problem.reference_solution(local_map_reduce(one))
    ref_b = problem.reference_solution(local_map_reduce(other))
    np.testing.assert_allclose(ref_a.iterate, ref_b.iterate, rtol=1e-10)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_reference_equals_lstsq(
    rng, fit_intercept, small_tiles, mixed_blocks, total_stats, local_map_reduce
):
    blocks, X, y = mixed_blocks(rng, n_features=8, labels=lambda X: _targets(X, rng))
    problem = LeastSquares(fit_intercept=fit_intercept).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    ref = problem.reference_solution(map_reduce)
    assert map_reduce.calls == 1 and ref.info == {"passes": 1, "rank": problem.n_params}
    A = _design(X, fit_intercept)
    expected, *_ = np.linalg.lstsq(A, y, rcond=None)
    np.testing.assert_allclose(ref.iterate, expected, rtol=1e-10, atol=1e-12)
    assert ref.objective == pytest.approx(_dense_objective(X, y, expected, 0.0, fit_intercept),
                                          rel=1e-12)
    assert problem.distance(expected, ref) < 1e-10


@pytest.mark.parametrize("alpha", [1e-3, 0.5])
def test_ridge_reference_equals_closed_form_and_scikit_learn(
    rng, alpha, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    linear_model = pytest.importorskip("sklearn.linear_model")
    X = rng.normal(size=(300, 5)) * [1.0, 3.0, 0.2, 1.0, 1.0] + 2.0
    y = _targets(X, rng)
    n = len(y)
    blocks = split_blocks(X, y, uneven_bounds(n, 4, rng))
    problem = LeastSquares(alpha=alpha).bind(total_stats(blocks))
    ref = problem.reference_solution(local_map_reduce(blocks))
    A = _design(X, True)
    penalty = n * alpha * np.diag([1.0] * 5 + [0.0])
    closed = np.linalg.solve(A.T @ A + penalty, A.T @ y)
    np.testing.assert_allclose(ref.iterate, closed, rtol=1e-10)
    assert ref.objective == pytest.approx(_dense_objective(X, y, closed, alpha, True), rel=1e-12)
    # scikit-learn minimises |y - X w - b|^2 + alpha_s |w|^2: ours times 2n, alpha_s = n alpha
    skl = linear_model.Ridge(alpha=n * alpha, solver="cholesky").fit(X, y)
    np.testing.assert_allclose(ref.iterate[:5], skl.coef_, rtol=1e-8)
    assert ref.iterate[5] == pytest.approx(skl.intercept_, rel=1e-8)


def test_collinear_columns_give_the_minimum_norm_solution(
    rng, split_blocks, total_stats, local_map_reduce
):
    base = rng.normal(size=(120, 3))
    X = np.column_stack([base, base[:, 0]])  # duplicated column: rank deficient
    y = _targets(base, rng)
    blocks = split_blocks(X, y, [0, 40, 120])
    problem = LeastSquares().bind(total_stats(blocks))
    ref = problem.reference_solution(local_map_reduce(blocks))
    expected, *_ = np.linalg.lstsq(_design(X, True), y, rcond=None)
    np.testing.assert_allclose(ref.iterate, expected, rtol=1e-8)
    assert ref.info["rank"] == 4
    assert ref.objective == pytest.approx(_dense_objective(X, y, expected, 0.0, True), rel=1e-10)


def test_fewer_rows_than_unknowns(rng, split_blocks, total_stats, local_map_reduce):
    X = rng.normal(size=(5, 8))
    y = rng.normal(size=5)
    blocks = split_blocks(X, y, [0, 2, 3, 5])  # every block is shorter than it is wide
    problem = LeastSquares().bind(total_stats(blocks))
    ref = problem.reference_solution(local_map_reduce(blocks))
    expected, *_ = np.linalg.lstsq(_design(X, True), y, rcond=None)
    np.testing.assert_allclose(ref.iterate, expected, rtol=1e-10)
    assert ref.objective == pytest.approx(0.0, abs=1e-25)


def test_gradient_descent_with_default_step_reaches_the_reference(
    rng, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    X = rng.normal(size=(200, 4))
    y = _targets(X, rng)
    blocks = split_blocks(X, y, uneven_bounds(200, 4, rng))
    problem = LeastSquares(alpha=0.01).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    ref = problem.reference_solution(map_reduce)
    step = problem.default_step_size(map_reduce, rng)
    x = problem.init_iterate(rng)
    for _ in range(300):
        x = problem.update(x, map_reduce(problem.kernel, x).gradient, step)
    final = problem.objective(map_reduce(problem.kernel, x).values, x)
    assert final == pytest.approx(ref.objective, rel=1e-8)
    assert problem.distance(x, ref) < 1e-6


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_default_step_size_bounds_the_smoothness(
    rng, fit_intercept, split_blocks, total_stats, local_map_reduce
):
    X = rng.normal(size=(150, 5)) + 2.0
    y = _targets(X, rng)
    blocks = split_blocks(X, y, [0, 60, 150])
    problem = LeastSquares(alpha=0.3, fit_intercept=fit_intercept).bind(total_stats(blocks))
    step = problem.default_step_size(local_map_reduce(blocks), rng)
    A = _design(X, fit_intercept)
    lam = np.linalg.eigvalsh(A.T @ A / 150)[-1]
    assert 0.999 * lam + 0.3 <= 1 / step <= 1.05 * lam + 0.3 + 1e-12


def test_finalize_returns_coef_intercept_and_gradient_norm(rng, split_blocks, total_stats):
    X, y = rng.normal(size=(10, 2)), rng.normal(size=10)
    blocks = split_blocks(X, y)
    problem = LeastSquares(alpha=0.3).bind(total_stats(blocks))
    x = np.array([1.0, -2.0, 0.5])
    total = sum((problem.kernel(b, x) for b in blocks[1:]), problem.kernel(blocks[0], x))
    fitted = problem.finalize(x, total)
    np.testing.assert_array_equal(fitted["coef"], [1.0, -2.0])
    assert fitted["intercept"].shape == () and float(fitted["intercept"]) == 0.5
    # independent: gradient of mean(0.5 (A x - y)^2) + 0.15 |w|^2, A = [X, 1]
    A = np.column_stack([X, np.ones(10)])
    grad = A.T @ (A @ x - y) / 10 + 0.3 * np.array([1.0, -2.0, 0.0])
    np.testing.assert_allclose(float(fitted["grad_norm"]), np.linalg.norm(grad), rtol=1e-12)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), None, "0.1", False])
def test_invalid_alpha_is_refused(bad):
    message = "The 'alpha' parameter of LeastSquares must be a finite number >= 0."
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        LeastSquares(alpha=bad)


def test_invalid_fit_intercept_is_refused():
    with pytest.raises(InvalidParameterError, match="'fit_intercept' parameter of LeastSquares"):
        LeastSquares(fit_intercept="no")


def test_empty_matrix_and_non_finite_labels_are_refused():
    empty = MatrixStats(n_samples=0, column_sums=np.zeros(3), sq_norm=0.0)
    with pytest.raises(InvalidDataError, match="at least one row"):
        LeastSquares().bind(empty)
    nan_labels = MatrixStats(n_samples=4, column_sums=np.zeros(3), sq_norm=1.0,
                             label_sum=float("nan"))
    with pytest.raises(InvalidDataError, match="must be finite"):
        LeastSquares().bind(nan_labels)


def test_reference_refuses_very_wide_matrices():
    stats = MatrixStats(n_samples=3, column_sums=np.zeros(20_001), sq_norm=1.0)
    problem = LeastSquares().bind(stats)

    def never(*args, **kwargs):
        raise AssertionError("no pass over the data expected")

    with pytest.raises(InvalidParameterError, match="reference=False"):
        problem.reference_solution(never)


def test_bound_problem_is_small_and_picklable(rng, split_blocks, total_stats):
    X = rng.normal(size=(30, 3))
    blocks = split_blocks(X, rng.normal(size=30), [0, 10, 30])
    problem = LeastSquares(alpha=0.1, fit_intercept=False).bind(total_stats(blocks))
    payload = pickle.dumps(problem)
    assert len(payload) < 1_000
    clone = pickle.loads(payload)
    assert clone == problem and clone.is_bound and not LeastSquares().is_bound
    x = rng.normal(size=3)
    np.testing.assert_array_equal(clone.kernel(blocks[0], x).gradient,
                                  problem.kernel(blocks[0], x).gradient)
    assert LeastSquares.supports_momentum and LeastSquares.needs_labels
    assert LeastSquares.name == "least-squares"
    assert problem.get_params() == {"alpha": 0.1, "fit_intercept": False}
