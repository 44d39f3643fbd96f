"""Which PCA components the data separate, and the variance rule for a bulk past k."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import daskstraggle as ds
from daskstraggle.errors import InvalidParameterError
from daskstraggle.problems import PCA
from daskstraggle.problems.separation import (
    boundary_start,
    clusters,
    labels,
    north_gap,
    variance_errors,
)

# ------------------------------------------------------------------------------ pure parts


def test_north_gap_is_the_relative_sampling_error_of_an_eigenvalue():
    assert north_gap(2) == 1.0
    assert north_gap(20_000) == pytest.approx(0.01)
    assert north_gap(0) == pytest.approx(np.sqrt(2))  # no rows: no division by zero


@pytest.mark.parametrize(("values", "next_value", "gap", "start"), [
    ([10.0, 5.0, 2.0], 1.0, 0.1, 3),            # every gap large: no boundary cluster
    ([10.0, 5.0, 1.01, 1.0], 0.995, 0.1, 2),    # the last two run on into the next
    ([1.03, 1.02, 1.01], 1.0, 0.05, 0),         # the whole request is bulk
    ([10.0, 1.01], 1.0, 0.0, 2),                # gap 0: every component separated
    ([10.0, 1.01], None, 0.1, 2),               # next value unknown: no boundary
    ([10.0, 1.0], 0.95, 0.05, 2),               # a gap of exactly g separates
    ([10.0, 1.0], 0.96, 0.05, 1),               # one just below it does not
])
def test_boundary_start(values, next_value, gap, start):
    assert boundary_start(np.array(values), next_value, gap) == start


def test_clusters_are_runs_without_a_gap():
    values = np.array([10.0, 5.0, 4.99, 4.98, 2.0, 1.0, 0.999])
    assert clusters(values, 0.01) == [(1, 4), (5, 7)]
    assert clusters(values, 0.0) == []


def test_labels_name_vectors_clusters_and_the_boundary():
    values = np.array([10.0, 5.0, 4.99, 2.0, 1.0, 0.999])
    residuals = np.array([0.0, 0.0, 0.0, 0.0, 1e-3, 1e-9])
    assert labels(values, residuals, 4, 0.01, 1e-6) == [
        "vector", "subspace 2-3", "subspace 2-3", "vector", "variance", "vector"]
    assert labels(values, residuals, 4, 0.01, None)[4:] == ["variance", "variance"]


def test_variance_errors_estimate_a_geometric_tail():
    # theta_t = 2 - 0.5 ** t: after t = 4 the rest is 0.0625
    history = [2 - 0.5 ** t * np.ones(2) for t in (1, 2, 3, 4)]
    errors = variance_errors(history)
    # the larger of d2 / (1 - rho) ending at t = 3 (0.25 / 1.875) and at t = 4
    np.testing.assert_allclose(errors, 0.25 / 1.875)
    assert np.all(errors * history[-1] >= 2 - history[-1])  # never below the true rest


def test_variance_errors_take_the_larger_of_two_estimates():
    """A rise that shrank fast once (the second estimate alone: tiny) but slowly before
    is not settled: the earlier, larger estimate counts."""
    history = [np.array([v]) for v in (1.0, 1.5, 1.9, 1.9001)]
    alone = 0.0001 / (1 - 0.0001 / 0.4) / 1.9001
    assert variance_errors(history)[0] == pytest.approx(0.4 / (1 - 0.4 / 0.5) / 1.9)
    assert variance_errors(history)[0] > 1000 * alone


@pytest.mark.parametrize(("history", "expected"), [
    ([[1.0], [1.0], [1.0]], np.inf),                              # too few rounds
    ([[0.5], [1.0], [1.5], [1.4]], np.inf),                       # fell: not settling
    ([[0.9], [1.0], [1.1], [1.3]], np.inf),                       # rise grew (rho >= 1)
    ([[1.0], [1.0], [1.0], [1.2]], np.inf),                       # rose after standing still
    ([[1.0], [1.0], [1.0 + 1e-15], [1.0 + 2e-15]], 1e-15),        # rounding only: settled
])
def test_variance_errors_refuse_what_is_not_a_settling_tail(history, expected):
    errors = variance_errors([np.array(h) for h in history])
    if np.isinf(expected):
        assert np.isinf(errors).all()
    else:
        assert errors[0] <= 1e-14


# ------------------------------------------------------------------------------ PCA

def planted(n=2000, d=300, spacing=1e-3, seed=0):
    """A matrix whose covariance has three separated eigenvalues over a flat bulk."""
    rng = np.random.default_rng(seed)
    lam = np.r_[100.0, 50.0, 25.0, 1.0 - spacing * np.arange(d - 3)]
    U = np.linalg.qr(rng.standard_normal((n, d)))[0]
    W = np.linalg.qr(rng.standard_normal((d, d)))[0]
    X = (U * np.sqrt(lam)) @ W.T
    Xc = X - X.mean(0)
    eigvals, vectors = np.linalg.eigh(Xc.T @ Xc)
    return X, eigvals[::-1], vectors[:, ::-1]


def test_pca_refuses_a_gap_outside_zero_one():
    for bad in (-0.1, 1.0, "x"):
        with pytest.raises(InvalidParameterError, match="min_eigengap"):
            PCA(n_components=2, min_eigengap=bad)


def test_pca_eigengap_defaults_to_north():
    assert PCA(n_components=2).eigengap == 0.0  # unbound: no rows yet
    assert PCA(n_components=2, min_eigengap=0.05).eigengap == 0.05
    assert PCA(n_components=2, min_eigengap=0.05).get_params()["min_eigengap"] == 0.05


def fit(X, k, **kwargs):
    kwargs.setdefault("max_iter", 300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ds.fit_pca(X, k, method="block", runtime="local", rng=0, **kwargs)


def test_block_converges_a_bulk_past_k_in_variance():
    """Components 4..8 lie in a bulk (relative spacing 1e-3, North's gap 0.03) that runs
    past k = 8: the default run stops once their Ritz values settle, names them
    ``variance``, and their variances equal the exact eigenvalues to about tol; the
    separated three are exact eigenvectors. With ``min_eigengap=0`` the same run resolves
    every eigenvector, in more rounds."""
    X, eigvals, vectors = planted()
    k = 8
    result = fit(X, k)
    strict = fit(X, k, min_eigengap=0.0)
    assert result.converged and strict.converged
    assert result.determined == ["vector"] * 3 + ["variance"] * 5
    assert strict.determined == ["vector"] * k
    assert result.n_iter < strict.n_iter
    n = X.shape[0]
    values = result.fitted["explained_variance"] * (n - 1)
    np.testing.assert_allclose(values, eigvals[:k], rtol=2e-6)
    cosines = np.abs(np.sum(result.fitted["components"] * vectors[:, :k].T, axis=1))
    np.testing.assert_allclose(cosines[:3], 1.0, atol=1e-10)
    # the variance components' residuals are above tol: only their variance converged
    assert np.all(result.fitted["residuals"][3:] > 1e-6)
    assert result.optimality <= 1e-6
    assert result.attrs["convergence"]["components"] == result.determined
    assert "variance error" in result.convergence_message()


def test_variance_rule_does_not_stop_while_values_still_rise():
    """Capped at a few rounds, the bulk's Ritz values are still rising: the run is not
    converged, whatever the labels."""
    X, _, _ = planted()
    result = fit(X, 8, max_iter=3)
    assert not result.converged
    assert result.optimality > 1e-6


def test_no_boundary_without_a_next_value():
    """gd without oversampling reports no Ritz value past k: no boundary cluster, every
    component judged by its residual (as before)."""
    X, _, _ = planted(n=500, d=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = ds.fit_pca(X, 3, method="gd", runtime="local", rng=0, max_iter=200)
    assert result.determined == ["vector"] * 3
    assert result.optimality == pytest.approx(float(result.fitted["residuals"].max()),
                                              rel=1e-6)


def test_gram_names_clusters_but_no_variance_components():
    """gram's one round is exact and reports no Ritz value past k: its components are
    vectors, or subspaces where neighbours are closer than the gap."""
    X, _, _ = planted(n=500, d=40)
    result = ds.fit_pca(X, 5, method="gram", runtime="local", rng=0)
    assert result.determined == ["vector"] * 3 + ["subspace 4-5"] * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        regression = ds.fit_least_squares(X, X[:, 0] + 1.0, runtime="local", rng=0,
                                          max_iter=2)
    assert regression.determined is None


def test_cli_table_and_json_name_the_components(tmp_path, capsys):
    import zarr

    from daskstraggle.cli import main

    X, _, _ = planted(n=1000, d=120)
    path = tmp_path / "x.zarr"
    zarr.create_array(path, shape=X.shape, chunks=(250, 120), dtype="f8")[:] = X
    common = ["pca", str(path), "-k", "6", "--method", "block", "--runtime", "local",
              "--max-iter", "300", "--quiet"]
    assert main(common) == 0
    table = capsys.readouterr().out
    assert "determined" in table.splitlines()[2]
    assert sum(line.endswith("variance") for line in table.splitlines()) >= 3
    assert "largest eigen-residual or variance error" in table
    assert main([*common, "--min-eigengap", "0", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["determined"] == ["vector"] * 6
    assert main(["pca", str(path), "--min-eigengap", "2"]) == 2
    err = capsys.readouterr().err
    assert "min_eigengap" in err and "Traceback" not in err


def test_estimator_keeps_the_labels():
    X, _, _ = planted(n=1000, d=120)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pca = ds.PCA(6, method="block", runtime="local", random_state=0, max_iter=300).fit(X)
    assert pca.determined_[:3] == ["vector"] * 3
    assert "variance" in pca.determined_
