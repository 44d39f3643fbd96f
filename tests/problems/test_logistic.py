"""Logistic regression: kernels against dense formulas, Newton against scikit-learn/scipy."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
import scipy.optimize
from scipy.special import expit

from daskstraggle.errors import InvalidDataError, InvalidParameterError
from daskstraggle.problems import Logistic, MatrixStats


def _labels_from(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Noisy linear labels in {-1, +1} (not separable)."""
    w = np.linspace(-1.0, 1.0, X.shape[1])
    score = (X - X.mean(axis=0)) @ w + 0.3 + rng.logistic(size=X.shape[0])
    return np.where(score > 0, 1.0, -1.0)


def _dense_objective(X, y, x, alpha, fit_intercept):
    w, b = (x[:-1], x[-1]) if fit_intercept else (x, 0.0)
    return np.logaddexp(0, -y * (X @ w + b)).mean() + 0.5 * alpha * w @ w


def _dense_gradient(X, y, x, alpha, fit_intercept):
    """Gradient of the mean loss only (no penalty), intercept last."""
    w, b = (x[:-1], x[-1]) if fit_intercept else (x, 0.0)
    s = -y * expit(-y * (X @ w + b))
    A = np.column_stack([X, np.ones(len(y))]) if fit_intercept else X
    return A.T @ s / len(y)


def _problem(rng, mixed_blocks, total_stats, **params):
    blocks, X, y = mixed_blocks(rng, n_features=6, labels=lambda X: _labels_from(X, rng))
    return Logistic(**params).bind(total_stats(blocks)), blocks, X, y


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_kernel_on_every_block_kind_equals_dense(
    rng, fit_intercept, small_tiles, mixed_blocks, total_stats, local_map_reduce
):
    problem, blocks, X, y = _problem(rng, mixed_blocks, total_stats, fit_intercept=fit_intercept)
    assert problem.penalty == pytest.approx(1.0 / X.shape[0])
    x = rng.normal(size=problem.n_params)
    total = local_map_reduce(blocks)(problem.kernel, x)
    np.testing.assert_allclose(
        total.gradient, _dense_gradient(X, y, x, 0.0, fit_intercept), rtol=1e-12, atol=1e-14
    )
    assert total.values.shape == (1,) and total.n_rows == X.shape[0]
    assert problem.objective(total.values, x) == pytest.approx(
        _dense_objective(X, y, x, problem.penalty, fit_intercept), rel=1e-12
    )


def test_gradient_matches_finite_differences(rng, mixed_blocks, total_stats, local_map_reduce):
    problem, blocks, *_ = _problem(rng, mixed_blocks, total_stats, alpha=0.3)
    map_reduce = local_map_reduce(blocks)
    x = 0.3 * rng.normal(size=problem.n_params)

    def f(z):
        return problem.objective(map_reduce(problem.kernel, z).values, z)

    total = map_reduce(problem.kernel, x)
    full = total.gradient + np.append(0.3 * x[:-1], 0.0)  # the intercept is not penalised
    h = 1e-6
    numeric = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])
    np.testing.assert_allclose(full, numeric, rtol=1e-6, atol=1e-8)


def test_newton_kernel_hessian_equals_dense(rng, small_tiles, mixed_blocks, total_stats,
                                           local_map_reduce):
    problem, blocks, X, y = _problem(rng, mixed_blocks, total_stats)
    x = rng.normal(size=problem.n_params)
    terms = local_map_reduce(blocks)(problem.newton_kernel, x)
    A = np.column_stack([X, np.ones(len(y))])
    p = expit(A @ x)
    expected = A.T @ (A * (p * (1 - p))[:, None]) / len(y)
    np.testing.assert_allclose(terms.hessian, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(terms.gradient, _dense_gradient(X, y, x, 0.0, True), rtol=1e-12)
    assert terms.loss == pytest.approx(_dense_objective(X, y, x, 0.0, True), rel=1e-12)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_standard_newton_kernel_equals_dense_on_standardised_rows(
    rng, fit_intercept, small_tiles, mixed_blocks, total_stats, local_map_reduce
):
    problem, blocks, X, y = _problem(rng, mixed_blocks, total_stats, fit_intercept=fit_intercept)
    mean = X.mean(axis=0) if fit_intercept else np.zeros(X.shape[1])
    scale = X.std(axis=0) if fit_intercept else np.sqrt((X * X).mean(axis=0))
    Z = (X - mean) / scale
    point = rng.normal(size=problem.n_params)
    terms = local_map_reduce(blocks)(problem.standard_newton_kernel, point)
    A = np.column_stack([Z, np.ones(len(y))]) if fit_intercept else Z
    p = expit(-y * (A @ point))
    np.testing.assert_allclose(terms.hessian, A.T @ (A * (p * (1 - p))[:, None]) / len(y),
                               rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(terms.gradient, _dense_gradient(Z, y, point, 0.0, fit_intercept),
                               rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("shift", [-1e6, 1e8])
def test_reference_is_exact_for_columns_far_from_zero(rng, split_blocks, total_stats,
                                                     local_map_reduce, shift):
    """Columns of unit spread around 1e6-1e8: the reference used to stop after 50 Newton
    iterations 5e-8 off (the raw-coordinate Hessian cancelled to 4 digits); standardised
    tiles give the optimum in a few iterations, as Newton in extended precision does."""
    X = rng.normal(size=(240, 4)) + rng.normal(size=4)
    y = _labels_from(X, rng)
    X = X + shift
    blocks = split_blocks(X, y, [0, 100, 240])
    problem = Logistic(alpha=0.0).bind(total_stats(blocks))
    ref = problem.reference_solution(local_map_reduce(blocks))
    assert ref.info["converged"] and ref.info["newton_iterations"] <= 12
    ld = np.longdouble  # Newton on exactly standardised data, in extended precision
    Z = (X.astype(ld) - X.astype(ld).mean(axis=0)) / X.astype(ld).std(axis=0)
    A = np.column_stack([Z, np.ones(len(y), dtype=ld)])
    best = np.zeros(5, dtype=ld)
    for _ in range(30):
        p = 1 / (1 + np.exp(y * (A @ best)))
        hessian = (A * (p * (1 - p))[:, None]).T @ A
        best -= np.linalg.solve(hessian.astype(float), (A.T @ (-y * p)).astype(float))
    got = ref.iterate[:4] * X.astype(ld).std(axis=0)  # the same standardisation as above
    # the stop rule: standardised gradient below 1e-12, so the point is within ~1e-11
    np.testing.assert_allclose(got.astype(float), best[:4].astype(float), rtol=0, atol=1e-10)


def test_different_partitions_give_the_same_sums(
    rng, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    X = rng.normal(size=(300, 5))
    y = _labels_from(X, rng)
    one = split_blocks(X, y, uneven_bounds(300, 3, rng))
    other = split_blocks(X, y, uneven_bounds(300, 8, rng))
    problem = Logistic().bind(total_stats(one))
    assert problem == Logistic().bind(total_stats(other))
    x = rng.normal(size=6)
    a, b = local_map_reduce(one)(problem.kernel, x), local_map_reduce(other)(problem.kernel, x)
    np.testing.assert_allclose(a.gradient, b.gradient, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(a.values, b.values, rtol=1e-12)


@pytest.mark.parametrize(("alpha", "fit_intercept"), [(None, True), (0.05, True), (0.01, False)])
def test_reference_matches_scikit_learn_and_lbfgs(
    rng, alpha, fit_intercept, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    linear_model = pytest.importorskip("sklearn.linear_model")
    X = rng.normal(size=(400, 5)) * [1.0, 2.0, 0.5, 1.0, 3.0] + 0.5
    y = _labels_from(X, rng)
    blocks = split_blocks(X, y, uneven_bounds(400, 4, rng))
    problem = Logistic(alpha=alpha, fit_intercept=fit_intercept).bind(total_stats(blocks))
    lam = problem.penalty
    map_reduce = local_map_reduce(blocks)
    ref = problem.reference_solution(map_reduce)
    assert ref.info["converged"] and ref.info["grad_norm"] < 1e-12
    assert ref.info["passes"] == map_reduce.calls
    assert ref.objective == pytest.approx(_dense_objective(X, y, ref.iterate, lam, fit_intercept),
                                          rel=1e-13)
    # scikit-learn minimises C sum(loss) + |w|^2 / 2, i.e. n C times ours with C = 1/(n lam)
    skl = linear_model.LogisticRegression(
        C=1.0 / (len(y) * lam), fit_intercept=fit_intercept, tol=1e-12, max_iter=10_000,
        solver="newton-cholesky",
    ).fit(X, y)
    x_skl = np.append(skl.coef_.ravel(), skl.intercept_) if fit_intercept else skl.coef_.ravel()
    f_skl = _dense_objective(X, y, x_skl, lam, fit_intercept)
    assert ref.objective <= f_skl * (1 + 1e-14)
    assert ref.objective == pytest.approx(f_skl, rel=1e-10)
    np.testing.assert_allclose(ref.iterate, x_skl, rtol=1e-5, atol=1e-7)
    # an independent quasi-Newton solve on the dense matrix
    def fun(x):
        return _dense_objective(X, y, x, lam, fit_intercept)

    def jac(x):
        penalty = np.append(lam * (x[:-1] if fit_intercept else x), [0.0] * fit_intercept)
        return _dense_gradient(X, y, x, 0.0, fit_intercept) + penalty

    res = scipy.optimize.minimize(
        fun, np.zeros(problem.n_params), jac=jac, method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000},
    )
    assert ref.objective <= res.fun * (1 + 1e-14)
    assert ref.objective == pytest.approx(res.fun, rel=1e-10)


def test_gradient_descent_with_default_step_reaches_the_reference(
    rng, split_blocks, uneven_bounds, total_stats, local_map_reduce
):
    X = rng.normal(size=(300, 4))
    y = _labels_from(X, rng)
    blocks = split_blocks(X, y, uneven_bounds(300, 5, rng))
    problem = Logistic(alpha=0.05).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    ref = problem.reference_solution(map_reduce)
    step = problem.default_step_size(map_reduce, rng)
    x = problem.init_iterate(rng)
    np.testing.assert_array_equal(x, np.zeros(5))
    previous = np.inf
    for _ in range(300):
        total = map_reduce(problem.kernel, x)
        objective = problem.objective(total.values, x)
        assert objective <= previous + 1e-15  # monotone with a safe step
        previous = objective
        x = problem.update(x, total.gradient, step)
    final = problem.objective(map_reduce(problem.kernel, x).values, x)
    assert final == pytest.approx(ref.objective, rel=1e-8)
    assert problem.distance(x, ref) < 1e-4
    fitted = problem.finalize(x, total)
    np.testing.assert_allclose(fitted["coef"], x[:4])
    assert fitted["intercept"].shape == () and float(fitted["intercept"]) == x[4]


def test_default_step_size_bounds_the_smoothness(rng, split_blocks, total_stats, local_map_reduce):
    X = rng.normal(size=(200, 6)) + 1.0  # non-zero means: a well separated top eigenvalue
    y = _labels_from(X, rng)
    blocks = split_blocks(X, y, [0, 50, 200])
    problem = Logistic(alpha=0.1).bind(total_stats(blocks))
    map_reduce = local_map_reduce(blocks)
    step = problem.default_step_size(map_reduce, rng)
    assert map_reduce.calls == 20
    A = np.column_stack([X, np.ones(200)])
    lam = np.linalg.eigvalsh(A.T @ A / 200)[-1]
    assert 0.25 * 0.999 * lam + 0.1 <= 1 / step <= 0.25 * 1.05 * lam + 0.1 + 1e-12


def test_stable_for_huge_margins(split_blocks, total_stats):
    X = np.array([[1e3, 0.0], [-1e3, 1.0], [2.0, -1e3]])
    y = np.array([1.0, -1.0, -1.0])
    blocks = split_blocks(X, y)
    problem = Logistic(alpha=0.0).bind(total_stats(blocks))
    for x in (np.array([10.0, -10.0, 0.0]), np.array([-10.0, 10.0, 5.0])):
        total = problem.kernel(blocks[0], x)  # filterwarnings=error: no overflow warning
        assert np.isfinite(total.gradient).all() and np.isfinite(total.values).all()
        assert total.values[0] == pytest.approx(_dense_objective(X, y, x, 0.0, True), rel=1e-12)


def test_finalize_without_intercept(rng, split_blocks, total_stats):
    X = rng.normal(size=(20, 3))
    problem = Logistic(fit_intercept=False).bind(total_stats(split_blocks(X, _labels_from(X, rng))))
    assert problem.n_params == 3
    fitted = problem.finalize(np.array([1.0, 2.0, 3.0]),
                              problem.kernel(split_blocks(X, _labels_from(X, rng))[0],
                                             np.array([1.0, 2.0, 3.0])))
    np.testing.assert_array_equal(fitted["coef"], [1.0, 2.0, 3.0])
    assert float(fitted["intercept"]) == 0.0
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(problem.update(x, np.zeros(3), 1.0), x * (1 - problem.penalty))


@pytest.mark.parametrize(
    "counts",
    [None, {0.0: 5, 1.0: 5}, {1.0: 10}, {-1.0: 3, 0.0: 2, 1.0: 5}, {-1.0: 4, 2.0: 6}],
    ids=["no-labels", "zero-one", "one-class", "three-classes", "wrong-values"],
)
def test_wrong_labels_are_refused(counts):
    stats = MatrixStats(n_samples=10, column_sums=np.zeros(3), sq_norm=1.0, label_counts=counts)
    with pytest.raises(InvalidDataError, match=re.escape("must take exactly two values, {-1, +1}")):
        Logistic().bind(stats)


def test_block_without_labels_is_refused(rng, split_blocks, total_stats):
    X = rng.normal(size=(10, 2))
    problem = Logistic().bind(total_stats(split_blocks(X, _labels_from(X, rng))))
    with pytest.raises(InvalidDataError, match="needs labels"):
        problem.kernel(split_blocks(X)[0], np.zeros(3))


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "1", True])
def test_invalid_alpha_is_refused(bad):
    message = "The 'alpha' parameter of Logistic must be a finite number >= 0 or None."
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        Logistic(alpha=bad)


def test_invalid_fit_intercept_is_refused():
    with pytest.raises(InvalidParameterError, match="'fit_intercept' parameter of Logistic"):
        Logistic(fit_intercept=1)


def test_bound_problem_is_small_and_picklable(rng, split_blocks, total_stats):
    X = rng.normal(size=(50, 4))
    blocks = split_blocks(X, _labels_from(X, rng), [0, 20, 50])
    problem = Logistic().bind(total_stats(blocks))
    payload = pickle.dumps(problem)
    assert len(payload) < 1_000
    clone = pickle.loads(payload)
    assert clone == problem and clone.penalty == 1 / 50
    x = rng.normal(size=5)
    np.testing.assert_array_equal(clone.kernel(blocks[1], x).gradient,
                                  problem.kernel(blocks[1], x).gradient)
    assert Logistic.supports_momentum and Logistic.needs_labels and Logistic.name == "logistic"
    assert problem.get_params() == {"alpha": None, "fit_intercept": True}
