"""Column scale cannot fool the verdict or the reference (exact or flagged).

A column scaled by 1e-8 used to leave the coefficients at zero while the relative
gradient norm, dominated by the intercept's component, said ``converged``; at 1e-150 the
reference solver dropped the tiny columns too. Now optimality is judged in standardised
coordinates, the reference solvers work in them, and data whose squares leave float64's
range is refused with one line. For any column scales, every regression method either
ends converged on the optimum (checked against scikit-learn on data the test standardises
itself), or says it did not converge, or the data was refused for a bound it breaks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LinearRegression, LogisticRegression
from test_convergence import METHODS  # tests/runtime is on sys.path (rootdir-less modules)

from daskstraggle import fit_least_squares, fit_logistic, fit_pca
from daskstraggle.cli import main
from daskstraggle.errors import ConvergenceWarning, InvalidDataError
from daskstraggle.problems import LeastSquares, Logistic, block_stats
from daskstraggle.problems.block import Block
from daskstraggle.testing import one_error_line

N_ROWS, N_COLS = 240, 4
TOL = 1e-8
#: Agreement asked of a converged run, relative to the largest standardised coefficient.
AGREEMENT = 1e-6

#: test_convergence's method settings, less the PCA-only methods.
REGRESSION_METHODS = [(m, p) for m, p in METHODS if m not in ("gram", "block")]

#: Column exponents: anywhere in float64's range, or (half the draws) where data lives.
EXPONENTS = st.one_of(st.integers(-300, 300), st.integers(-60, 60))


def _base(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Well-conditioned columns and their labels (noisy, so logistic has an optimum)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_ROWS, N_COLS)) + rng.normal(size=N_COLS)
    margin = X @ (0.5 * rng.normal(size=N_COLS)) + 0.5
    if kind == "logistic":  # labels drawn from the logistic model: never separable
        return X, (margin + rng.logistic(size=N_ROWS) > 0).astype(float)
    return X, margin + 0.1 * rng.normal(size=N_ROWS)


def _standard(X: np.ndarray, w: np.ndarray, b: float) -> np.ndarray:
    """``[std * w, b + mean @ w]``: the model on ``(X - mean) / std``."""
    return np.append(X.std(axis=0) * w, b + X.mean(axis=0) @ w)


def _oracle(kind: str, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The optimum in standardised coordinates, by scikit-learn on standardised data."""
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    if kind == "logistic":
        # C = 1e12: a penalty 1e-12 / n (no change at 1e-8), without the deprecated
        # penalty=None of newer scikit-learn
        model = LogisticRegression(C=1e12, solver="newton-cholesky", tol=1e-12,
                                   max_iter=1000).fit(Z, y)
        return np.append(model.coef_[0], model.intercept_[0])
    model = LinearRegression().fit(Z, y)
    return np.append(model.coef_, model.intercept_)


def _breaks_a_bound(X: np.ndarray, y: np.ndarray) -> bool:
    """Whether the data breaks a documented bound of ``check_float_range``."""
    with np.errstate(over="ignore", under="ignore"):
        sq = float(np.sum(X * X))
        top = np.abs(X).max(axis=0)
        label = float(np.abs(y).max())
    return bool(not 1.22e-150 <= sq <= 4.2e152 or np.any(top * top < 1.5e-300)
                or len(y) * label * label > 4.2e152)


def _fit(kind: str, X: np.ndarray, y: np.ndarray, method: str, params: dict):
    kw = dict(runtime="sim", n_workers=4, rng=0, method=method, method_params=params,
              stragglers="gamma(mean=0.05, var=1e-4)", tol=TOL, max_iter=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if kind == "logistic":
            return fit_logistic(X, y, alpha=0.0, **kw)
        return fit_least_squares(X, y, **kw)


@pytest.mark.parametrize("kind", ["least-squares", "logistic"])
@pytest.mark.parametrize(("method", "params"), REGRESSION_METHODS,
                         ids=[m for m, _ in REGRESSION_METHODS])
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(exponents=st.lists(EXPONENTS, min_size=N_COLS, max_size=N_COLS),
       seed=st.integers(0, 2**16))
def test_converged_means_the_optimum_at_any_column_scale(kind, method, params, exponents,
                                                          seed):
    X, y = _base(kind, seed)
    X = X * np.power(10.0, exponents)
    try:
        res = _fit(kind, X, y, method, params)
    except InvalidDataError:
        assert _breaks_a_bound(X, y), exponents
        return
    assert not _breaks_a_bound(X, y), exponents
    assert res.converged == (res.optimality <= TOL)
    if res.converged:
        got = _standard(X, res.fitted["coef"], float(res.fitted["intercept"]))
        best = _oracle(kind, X, y)
        np.testing.assert_allclose(got, best, rtol=0, atol=AGREEMENT * np.abs(best).max())


@pytest.mark.parametrize("exponents", [(-8, -8, -8, -8), (-150, -150, -150, -150),
                                       (-5, 4, -5, 4), (40, -40, 0, 10), (60, 60, 60, 60)])
def test_gd_at_column_scale_never_says_converged_away_from_the_optimum(exponents):
    """The tour's case: gd on ``X * 1e-8`` said converged with the intercept-only model."""
    X, y = _base("least-squares", 3)
    X = X * np.power(10.0, exponents)
    try:
        res = _fit("least-squares", X, y, "gd", {})
    except InvalidDataError:
        assert _breaks_a_bound(X, y)
        return
    best = _oracle("least-squares", X, y)
    got = _standard(X, res.fitted["coef"], float(res.fitted["intercept"]))
    if res.converged:
        np.testing.assert_allclose(got, best, rtol=0, atol=AGREEMENT * np.abs(best).max())
    else:  # the coefficients are far from the optimum: the verdict says so
        assert res.optimality > TOL
        assert np.abs(got - best).max() > AGREEMENT * np.abs(best).max()


@pytest.mark.parametrize("kind", ["least-squares", "logistic"])
@settings(max_examples=25, deadline=None, derandomize=True)
@given(exponents=st.lists(st.integers(-70, 70), min_size=N_COLS, max_size=N_COLS),
       shift=st.sampled_from([0.0, 1e3, -1e6]), seed=st.integers(0, 2**16))
def test_reference_solvers_are_exact_at_any_column_scale(kind, exponents, shift, seed):
    """The exact reference (TSQR, Newton) is the optimum for scaled and shifted columns."""
    X, y = _base(kind, seed)
    X = (X + shift) * np.power(10.0, exponents)
    block = Block(X, y=np.where(y > 0, 1.0, -1.0) if kind == "logistic" else y)
    problem = (Logistic(alpha=0.0) if kind == "logistic" else LeastSquares())
    problem = problem.bind(block_stats(block))
    ref = problem.reference_solution(lambda fn, *a, combine=None: fn(block, *a))
    got = _standard(X, ref.iterate[:-1], float(ref.iterate[-1]))
    best = _oracle(kind, X, y)
    np.testing.assert_allclose(got, best, rtol=0, atol=1e-8 * np.abs(best).max())


def test_the_old_reference_would_fail_this_test():
    """The reference check above can fail: plain lstsq on ``[X, 1]`` drops tiny columns."""
    X, y = _base("least-squares", 1)
    X = X * 1e-150
    plain = np.linalg.lstsq(np.column_stack([X, np.ones(N_ROWS)]), y, rcond=None)[0]
    got = _standard(X, plain[:-1], float(plain[-1]))
    best = _oracle("least-squares", X, y)
    assert np.abs(got - best).max() > 1e-3 * np.abs(best).max()


def test_standardised_gradient_is_blind_to_column_scale_and_shift():
    """The measure of a point is the same after scaling and shifting the columns."""
    X, y = _base("least-squares", 2)
    measures = []
    for scale, shift in [(1.0, 0.0), (1e-8, 0.0), (1e6, 3.0), (1e-40, -7.0)]:
        Xs = (X + shift) * scale
        block = Block(Xs, y=y)
        problem = LeastSquares().bind(block_stats(block))
        # the same model in every parametrisation: standardised coefficients fixed
        u = np.array([0.3, -0.2, 0.1, 0.5, 1.0])
        x = problem.from_standard_point(u)
        np.testing.assert_allclose(problem.standard_point(x), u, rtol=1e-12, atol=1e-12)
        result = problem.kernel(block, x)
        start = problem.kernel(block, np.zeros(problem.n_params))
        measures.append(problem.optimality(result, x)
                        / problem.optimality_scale(start, np.zeros(problem.n_params)))
    np.testing.assert_allclose(measures, measures[0], rtol=1e-6)


# --------------------------------------------------------------------------------- CLI
def _store(path, X, y):
    group = zarr.open_group(path, mode="w")
    group.create_array("X", data=X, chunks=(60, N_COLS))
    group.create_array("y", data=y, chunks=(60,))
    return str(path)


#: (command, column scale, what the error line says)
FLOAT_LIMITS = [
    ("pca", 1e300, "too large for float64"),
    ("linreg", 1e300, "too large for float64"),
    ("logreg", 1e200, "too large for float64"),
    ("pca", 1e-300, "too small for float64"),
    ("linreg", 1e-300, "too small for float64"),
    ("linreg", 1e-155, "too small for float64"),
]
#: Warning categories Python does not print by default (a process prints the others).
HIDDEN_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                   ResourceWarning)


def _limit_args(tmp_path, command, scale):
    """The command line of one FLOAT_LIMITS case (its data written under ``tmp_path``)."""
    X, y = _base("logistic" if command == "logreg" else "least-squares", 4)
    source = _store(tmp_path / "x.zarr", X * scale, y)
    args = [command, source, "--runtime", "local", "--quiet"]
    if command == "pca":
        args += ["-k", "2"]
    return args


@pytest.mark.parametrize(("command", "scale", "words"), FLOAT_LIMITS)
def test_cli_refuses_values_at_the_float_limits_with_one_line(tmp_path, capsys, command,
                                                              scale, words):
    """One true line, exit 2, nothing else on stderr and no warning (a numpy RuntimeWarning
    would be printed on stderr by a process; here every warning is recorded)."""
    args = _limit_args(tmp_path, command, scale)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(args)
    line = one_error_line(capsys.readouterr().err)
    assert code == 2, line
    assert words in line and "1e" in line, line
    shown = [f"{w.category.__name__}: {w.message}" for w in caught
             if not issubclass(w.category, HIDDEN_WARNINGS)]
    assert not shown, shown


def test_a_process_at_the_float_limits_prints_only_the_one_line(tmp_path):
    """The same refusal by ``python -m daskstraggle`` in its own process: exit 2, and its
    whole stderr is the one line (no traceback, no RuntimeWarning)."""
    command, scale, words = FLOAT_LIMITS[2]
    proc = subprocess.run([sys.executable, "-m", "daskstraggle",
                           *_limit_args(tmp_path, command, scale)],
                          capture_output=True, text=True, timeout=240, check=False)
    line = one_error_line(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert words in line and "1e" in line, line


def test_cli_linreg_at_column_scale_1e_minus_8_is_not_converged_on_the_intercept(
        tmp_path, capsys):
    """The tour's reproduction: it said ``converged yes`` at the intercept-only model."""
    X, y = _base("least-squares", 5)
    source = _store(tmp_path / "x.zarr", X * 1e-8, y)
    code = main(["linreg", source, "--runtime", "local", "--reference", "--json"])
    out = json.loads(capsys.readouterr().out)
    best = _oracle("least-squares", X * 1e-8, y)
    got = _standard(X * 1e-8, np.asarray(out["coef"]), out["intercept"])
    assert code == 0
    if out["converged"]:
        np.testing.assert_allclose(got, best, rtol=0, atol=AGREEMENT * np.abs(best).max())
    else:
        assert out["optimality"] > 1e-6 and out["stop_reason"] == "max_iter"
    # the exact reference is the optimum at this scale (it was the intercept-only model)
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    optimum = 0.5 * np.mean((Z @ best[:-1] + best[-1] - y) ** 2)
    assert out["reference_objective"] == pytest.approx(optimum, rel=1e-9)


# ---------------------------------------------------------------- PCA (issue 42, item 1)
#: Every method that fits a PCA (momentum methods are refused: iterates are subspaces).
PCA_METHODS = [(m, p) for m, p in METHODS if m != "nag"]
PCA_ROWS, PCA_COLS, PCA_K = 200, 4, 3


def _fit_pca(X: np.ndarray, method: str, params: dict, k: int = PCA_K):
    """Fit in simulation; return the result and the warnings' texts."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = fit_pca(X, n_components=k, runtime="sim", n_workers=4, rng=0, method=method,
                      method_params=params, stragglers="gamma(mean=0.05, var=1e-4)",
                      tol=1e-6, max_iter=300)
    return res, [str(w.message) for w in caught]


def _svd_variances(X: np.ndarray) -> np.ndarray:
    """numpy's SVD of the centred matrix: the variances the components must report."""
    s = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    return s * s / (len(X) - 1)


def _check_exact_or_flagged(res, texts: list[str], truth: np.ndarray, *,
                            full_rank: bool) -> int:
    """Each component is exact (against numpy's SVD), or flagged ``unresolved`` with NaN
    and a run that does not say converged; return how many were exact."""
    variance = res.fitted["explained_variance"]
    labels = res.determined or ["vector"] * len(variance)
    if full_rank:
        assert not any("rank is lower" in t for t in texts), texts
    unresolved = [j for j, name in enumerate(labels) if name == "unresolved"]
    if unresolved:
        assert not res.converged
        assert np.isnan(variance[unresolved]).all()
        assert any("cannot be resolved" in t and "Standardise the columns" in t
                   for t in texts), texts
    exact = 0
    if res.converged:
        for j in range(len(variance)):
            # a residual r bounds the eigenvalue's relative error by about r (and r^2 / gap)
            np.testing.assert_allclose(variance[j], truth[j], rtol=1e-5)
            exact += 1
    return exact


@pytest.mark.parametrize(("method", "params"), PCA_METHODS, ids=[m for m, _ in PCA_METHODS])
@settings(max_examples=5, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(exponents=st.lists(st.integers(-8, 8), min_size=PCA_COLS, max_size=PCA_COLS),
       seed=st.integers(0, 2**16))
def test_pca_components_are_exact_or_flagged_at_any_column_scale(method, params, exponents,
                                                                  seed):
    """Per-column scales 1e-8 .. 1e8: a component whose variance is reported is numpy's
    SVD's; one float64 cannot resolve next to the top one is NaN, 'unresolved', not
    converged; the rank warning never appears (the data have full rank)."""
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(PCA_ROWS, PCA_COLS)) + rng.normal(size=PCA_COLS)) \
        * np.power(10.0, exponents) * np.linspace(1.0, 0.5, PCA_COLS)
    res, texts = _fit_pca(X, method, params)
    _check_exact_or_flagged(res, texts, _svd_variances(X), full_rank=True)


@pytest.mark.parametrize("method", ["block", "gram"])
def test_pca_small_component_is_computed_not_zero(method):
    """The tour's case: X[:, 0] *= 1e6 made PC2's variance 0, 'converged', with a false
    rank warning; it is scikit-learn's 1.1448 now."""
    from sklearn.decomposition import PCA as SkPCA

    X = np.random.default_rng(0).normal(size=(400, 6))
    X[:, 0] *= 1e6
    res, texts = _fit_pca(X, method, {}, k=2)
    want = SkPCA(2, svd_solver="full").fit(X).explained_variance_
    assert res.converged and not texts
    assert _check_exact_or_flagged(res, texts, want, full_rank=True) == 2
    assert abs(res.fitted["explained_variance"][1] - 1.1448) < 1e-4


@pytest.mark.parametrize(("method", "params"), [("gd", {}), ("block", {}), ("gram", {})])
def test_pca_rank_warning_only_when_the_rank_is_lower(method, params):
    """Rank 2 data asked for 3 components: the rank warning, variance 0, 'zero',
    converged; the same columns at a 1e9 dynamic range: 'unresolved', no rank warning."""
    rng = np.random.default_rng(3)
    low = rng.normal(size=(200, 2)) @ rng.normal(size=(2, 5))
    res, texts = _fit_pca(low, method, params)
    assert any("rank is lower" in t for t in texts), texts
    assert res.converged and res.determined[2] == "zero"
    assert res.fitted["explained_variance"][2] == 0.0
    wide = rng.normal(size=(200, 5)) * np.array([1e9, 1.0, 1.0, 1.0, 1.0])
    res, texts = _fit_pca(wide, method, params)
    assert not any("rank is lower" in t for t in texts), texts
    assert not res.converged and res.determined[1:] == ["unresolved"] * 2


def test_pca_column_whose_mean_dwarfs_its_spread_is_not_constant():
    """A column whose mean is 1e7 times its spread was called 'constant' (its centred norm
    is 1e-14 of the uncentred one); the fit matches scikit-learn."""
    from sklearn.decomposition import PCA as SkPCA

    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 3)) * [1.0, 0.5, 0.2] + 1e7
    res, texts = _fit_pca(X, "block", {}, k=2)
    assert res.converged, texts
    want = SkPCA(2, svd_solver="full").fit(X).explained_variance_
    np.testing.assert_allclose(res.fitted["explained_variance"], want, rtol=1e-6)
    with pytest.raises(InvalidDataError, match="every column is constant"):
        _fit_pca(np.full((50, 3), 0.1), "block", {}, k=2)


def test_pca_unresolved_run_says_why_not_raise_max_iter():
    """An unresolved component stops the run on the others; the message does not tell the
    user to raise max_iter or tol, which cannot help."""
    X = np.random.default_rng(0).normal(size=(400, 6)) * [1e9, 1, 1, 1, 1, 1]
    res, texts = _fit_pca(X, "block", {}, k=3)
    assert res.n_iter < 10 and not res.converged
    message = res.convergence_message()
    assert "PC2-PC3 lie below float64's working precision" in message
    assert "max_iter" not in message and any("did not converge: PC2-PC3" in t for t in texts)
