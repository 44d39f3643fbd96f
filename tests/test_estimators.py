"""scikit-learn estimators: the estimator checks, equivalence with scikit-learn, stores.

Every scikit-learn check runs (``parametrize_with_checks``) with the in-process runtime;
none is expected to fail. scikit-learn itself skips ``check_array_api_input`` (once per
estimator) unless ``SCIPY_ARRAY_API=1`` is set: we do not claim array API support.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import zarr
from sklearn import decomposition, linear_model
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import daskstraggle as ds
from daskstraggle import PCA, LinearRegression, LogisticRegression, Ridge
from daskstraggle.errors import InvalidDataError, InvalidParameterError

#: Checks expected to fail, per estimator class, and why: none today.
EXPECTED_FAILED: dict[str, dict[str, str]] = {}

#: Tight settings for comparisons with scikit-learn's direct solvers.
TIGHT = {"tol": 1e-12, "max_iter": 20000, "runtime": "local", "random_state": 0}


def _expected_failed(estimator):
    return EXPECTED_FAILED.get(type(estimator).__name__, {})


@parametrize_with_checks(
    [PCA(runtime="local"), LinearRegression(runtime="local"),
     LogisticRegression(runtime="local"), Ridge(runtime="local")],
    expected_failed_checks=_expected_failed,
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.fixture
def regression():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 6)) * [1.0, 2.0, 0.5, 1.0, 3.0, 1.0] + [0, 5, -3, 0, 10, 1]
    y = X @ rng.normal(size=6) + 0.5 * rng.normal(size=300) + 2.0
    return X, y


# ------------------------------------------------------------------ equivalence
@pytest.mark.parametrize("alpha", [0.01, 1.0, 30.0])
def test_ridge_matches_sklearn(regression, alpha):
    X, y = regression
    ours = Ridge(alpha=alpha, **TIGHT).fit(X, y)
    ref = linear_model.Ridge(alpha=alpha).fit(X, y)
    assert ours.converged_
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=0, atol=1e-6)
    assert abs(ours.intercept_ - ref.intercept_) < 1e-6
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=0, atol=1e-6)
    assert abs(ours.score(X, y) - ref.score(X, y)) < 1e-9


def test_linear_regression_matches_sklearn(regression):
    X, y = regression
    ours = LinearRegression(**TIGHT).fit(X, y)
    ref = linear_model.LinearRegression().fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=0, atol=1e-6)
    assert abs(ours.intercept_ - ref.intercept_) < 1e-6
    no_b = LinearRegression(fit_intercept=False, **TIGHT).fit(X, y)
    ref = linear_model.LinearRegression(fit_intercept=False).fit(X, y)
    np.testing.assert_allclose(no_b.coef_, ref.coef_, rtol=0, atol=1e-6)
    assert no_b.intercept_ == 0.0


@pytest.mark.parametrize("C", [0.01, 1.0, 100.0])
@pytest.mark.parametrize("labels", [(0, 1), (-1, 1), ("no", "yes")])
def test_logistic_regression_matches_sklearn(regression, C, labels):
    X, y = regression
    y = np.asarray(labels)[(y + np.random.default_rng(2).normal(size=len(y)) * 3
                            > np.median(y)).astype(int)]
    ours = LogisticRegression(C=C, **TIGHT).fit(X, y)
    ref = linear_model.LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(X, y)
    assert list(ours.classes_) == list(ref.classes_)
    assert ours.coef_.shape == ref.coef_.shape == (1, 6)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-7)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=1e-6)
    assert (ours.predict(X) == ref.predict(X)).all()
    assert ours.score(X, y) == ref.score(X, y)


@pytest.mark.parametrize("n_components", [1, 3, None])
def test_pca_matches_sklearn(n_components):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 7)) @ rng.normal(size=(7, 7)) + 4.0
    ours = PCA(n_components, runtime="local").fit(X)
    ref = decomposition.PCA(n_components).fit(X)
    k = ours.n_components_
    assert k == (7 if n_components is None else n_components)  # min(n - 1, d) = 7
    for name in ("components_", "explained_variance_", "explained_variance_ratio_",
                 "singular_values_", "mean_"):
        want = getattr(ref, name)
        want = want[:k] if name != "mean_" else want
        np.testing.assert_allclose(getattr(ours, name), want, rtol=0, atol=1e-8, err_msg=name)
    np.testing.assert_allclose(ours.transform(X), ref.transform(X)[:, :k], atol=1e-8)
    np.testing.assert_allclose(ours.fit_transform(X), ref.transform(X)[:, :k], atol=1e-8)
    Z = ours.transform(X)
    np.testing.assert_allclose(ours.inverse_transform(Z), Z @ ref.components_[:k] + ref.mean_,
                               atol=1e-8)
    if n_components is not None:
        assert ours.noise_variance_ == pytest.approx(ref.noise_variance_, abs=1e-8)
    assert list(ours.get_feature_names_out()) == [f"pca{i}" for i in range(k)]


def test_iterative_pca_matches_sklearn_to_its_tolerance():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 8)) * [8, 5, 3, 1, 1, 1, 1, 1]
    ours = PCA(2, method="gd", tol=1e-10, max_iter=2000, runtime="local",
               random_state=0).fit(X)
    ref = decomposition.PCA(2).fit(X)
    assert ours.converged_ and ours.n_iter_ > 1
    np.testing.assert_allclose(ours.components_, ref.components_, atol=1e-6)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-9)


# ------------------------------------------------------------------ the contract
def test_params_clone_and_fitted_attributes(regression):
    X, y = regression
    est = Ridge(alpha=2.0, method="dsag", method_params={"n_wait": 3}, runtime="local",
                max_iter=50, tol=None)
    assert est.get_params()["method_params"] == {"n_wait": 3}
    assert est.set_params(alpha=3.0) is est and est.alpha == 3.0
    copy = clone(est)
    assert copy.get_params() == est.get_params() and copy is not est
    assert not hasattr(copy, "coef_")
    assert est.fit(X, y) is est
    assert est.n_iter_ == 50 and est.converged_ is False
    assert isinstance(est.result_, ds.Result) and est.result_.method == "dsag"
    assert "objective" in est.trace_ and est.n_features_in_ == 6


def test_init_only_stores_and_bad_parameters_fail_at_fit(regression):
    X, y = regression
    est = Ridge(alpha=-1.0, runtime="local")  # no error here
    with pytest.raises(InvalidParameterError, match="'alpha' parameter of Ridge"):
        est.fit(X, y)
    with pytest.raises(InvalidParameterError, match="'C' parameter of LogisticRegression"):
        LogisticRegression(C=0.0, runtime="local").fit(X, y > np.median(y))
    with pytest.raises(InvalidParameterError, match=r"must not set \['max_iter'\]"):
        Ridge(runtime="local", solve_params={"max_iter": 3}).fit(X, y)
    with pytest.raises(ValueError, match="Only binary classification is supported"):
        LogisticRegression(runtime="local").fit(X, np.arange(300) % 3)


def _binary(y):
    return y > np.median(y)


@pytest.mark.parametrize(("est", "labels", "error", "match"), [
    # issue 42's tour: raw TypeError/ValueError, or a message naming another parameter
    (Ridge(runtime="local", solve_params={"bogus": 1}), None, InvalidParameterError,
     r"'solve_params' parameter of Ridge must hold only keyword arguments of "
     r"fit_least_squares .*\['step_size', .*Got \['bogus'\] instead\.$"),
    (PCA(2, runtime="local", solve_params="step_size=1"), None, InvalidParameterError,
     r"'solve_params' parameter of PCA must be a dict"),
    (PCA(2, runtime="local", solve_params={"oversample": 2}), None, InvalidParameterError,
     r"Got \['oversample'\] instead \(parameters of the estimator: set them on it\)"),
    (LinearRegression(runtime="local", solve_params={"alpha": 1.0}), None,
     InvalidParameterError, r"Got \['alpha'\] instead \(parameters of the estimator"),
    (LogisticRegression(runtime="local", random_state="a"), _binary, InvalidParameterError,
     r"^The 'random_state' parameter of LogisticRegression must be None, an int >= 0 or a "),
    (LogisticRegression(runtime="local"), lambda y: np.arange(len(y)) % 3, InvalidDataError,
     "Only binary classification is supported"),
    (LogisticRegression(runtime="local"), lambda y: np.ones(len(y)), InvalidDataError,
     r"LogisticRegression needs 2 classes in y; got 1 class"),
], ids=["unknown-key", "not-a-dict", "estimator-parameter", "derived-alpha", "random-state",
        "three-classes", "one-class"])
def test_bad_solve_params_seeds_and_classes_are_one_clear_error(regression, est, labels, error,
                                                                 match):
    X, y = regression
    with pytest.raises(error, match=match) as info:
        clone(est).fit(X, y if labels is None else labels(y))
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_solve_params_reach_solve(regression):
    X, y = regression
    est = Ridge(runtime="local", method="gd", tol=None, max_iter=5,
                solve_params={"step_size": 1e-3, "reference": True, "n_partitions": 4})
    est.fit(X, y)
    assert est.result_.gap is not None and est.result_.attrs["step_size"] == 1e-3


def test_pipeline_with_a_standard_scaler(regression):
    X, y = regression
    y = y > np.median(y)
    ours = make_pipeline(StandardScaler(), LogisticRegression(C=0.5, **TIGHT)).fit(X, y)
    ref = make_pipeline(StandardScaler(),
                        linear_model.LogisticRegression(C=0.5, tol=1e-12)).fit(X, y)
    np.testing.assert_allclose(ours[-1].coef_, ref[-1].coef_, atol=1e-6)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-7)
    reduced = make_pipeline(StandardScaler(), PCA(3, runtime="local"), Ridge(**TIGHT))
    assert reduced.fit(X, y).score(X, y) > 0.3


def test_grid_search_over_ridge_alpha(regression):
    X, y = regression
    grid = {"alpha": [0.1, 10.0, 1000.0]}
    ours = GridSearchCV(Ridge(**TIGHT), grid, cv=3).fit(X, y)
    ref = GridSearchCV(linear_model.Ridge(), grid, cv=3).fit(X, y)
    assert ours.best_params_ == ref.best_params_
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"],
                               ref.cv_results_["mean_test_score"], atol=1e-9)


def test_without_scikit_learn_the_estimators_say_what_to_install():
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "import daskstraggle as ds\n"
        "ds.fit_pca\n"
        "try:\n    ds.PCA\nexcept ImportError as err:\n    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert "pip install 'daskstraggle[sklearn]'" in out


def test_the_problem_classes_stay_under_problems():
    from daskstraggle.problems import PCA as PCAProblem

    assert ds.PCA is PCA and ds.PCA is not PCAProblem
    assert "PCA" in ds.__all__ and "PCA" in dir(ds)
    with pytest.raises(AttributeError):
        ds.NoSuchName  # noqa: B018


# ------------------------------------------------------------------ stores
@pytest.fixture
def store(tmp_path, regression):
    X, y = regression
    X = (X - X.mean(axis=0)) / X.std(axis=0)  # stores are fitted as they are (not centred)
    path = tmp_path / "lin.zarr"
    group = zarr.open_group(path, mode="w")
    group.create_array("X", data=X, chunks=(70, 6))
    group.create_array("y", data=y, chunks=(70,))
    return path, X, y


def test_fit_and_predict_on_a_zarr_path(store):
    path, X, y = store
    ours = Ridge(alpha=5.0, **TIGHT).fit(str(path), "y")
    ref = linear_model.Ridge(alpha=5.0).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-6)
    np.testing.assert_allclose(ours.predict(path), ref.predict(X), atol=1e-6)
    assert ours.n_features_in_ == 6 and not hasattr(ours, "feature_names_in_")
    clf = LogisticRegression(**TIGHT).fit(path, y > np.median(y))
    assert clf.score(path, y > np.median(y)) > 0.8
    pca = PCA(2, runtime="local").fit(path)
    np.testing.assert_allclose(pca.transform(path), decomposition.PCA(2).fit_transform(X),
                               atol=1e-8)
    with pytest.raises(ValueError, match="X has 3 features, but Ridge is expecting 6"):
        ours.predict(X[:, :3])


def test_fit_on_dask_and_xarray_arrays(store):
    import dask.array as da
    import xarray as xr

    _, X, y = store
    ref = linear_model.Ridge().fit(X, y)
    lazy = Ridge(**TIGHT).fit(da.from_array(X, chunks=(100, 6)), y)
    np.testing.assert_allclose(lazy.coef_, ref.coef_, atol=1e-6)
    np.testing.assert_allclose(lazy.predict(da.from_array(X)), ref.predict(X), atol=1e-6)
    labelled = PCA(2, runtime="local").fit(xr.DataArray(X, dims=("sample", "feature")))
    np.testing.assert_allclose(labelled.components_, decomposition.PCA(2).fit(X).components_,
                               atol=1e-8)


def _standardized_genotypes(path):
    """The Patterson-scaled matrix (variants x samples) as the workers see it."""
    m = ds.open_matrix(path)
    rows = []
    for p in range(m.n_partitions):
        block = m.loader(p)()
        rows += [tile.copy() for _, _, tile in block.tiles()]
    return np.vstack(rows)


def test_genotype_pca_on_a_vcf_zarr_path(vcz_path, vcz_missing_path):
    pca = PCA(2, runtime="local")
    scores = pca.fit_transform(vcz_path)
    Z = _standardized_genotypes(vcz_path)
    n_variants, n_samples = Z.shape
    assert pca.genotypes_ and pca.components_.shape == (2, n_samples)
    assert pca.n_features_in_ == n_samples and pca.n_samples_ == n_variants
    np.testing.assert_array_equal(pca.mean_, 0.0)
    U, s, Vt = np.linalg.svd(Z, full_matrices=False)
    np.testing.assert_allclose(pca.singular_values_, s[:2], rtol=1e-10)
    np.testing.assert_allclose(np.abs(pca.components_), np.abs(Vt[:2]), atol=1e-8)
    np.testing.assert_allclose(np.abs(pca.variant_loadings_), np.abs(U[:, :2]), atol=1e-8)
    assert pca.variant_mean_.shape == pca.variant_scale_.shape == (n_variants,)
    # the training store's samples project to their scores
    assert scores.shape == (n_samples, 2)
    np.testing.assert_allclose(pca.transform(vcz_path), scores, atol=1e-8)
    # other samples' calls at the same variants (5% missing): close to the same scores
    other = pca.transform(vcz_missing_path)
    for j in range(2):
        assert np.corrcoef(other[:, j], scores[:, j])[0, 1] > 0.95
    with pytest.raises(InvalidDataError, match="projects the samples of a VCF Zarr store"):
        pca.transform(np.ones((3, n_samples)))
    with pytest.raises(InvalidDataError, match="inverse_transform is not defined"):
        pca.inverse_transform(scores)


@pytest.mark.cluster
def test_fit_on_a_local_cluster_of_two_process_workers(vcz_path, store):
    import dask
    from distributed import Client, LocalCluster

    from daskstraggle.runtime._connect import worker_start_config

    path, X, y = store
    # a user's LocalCluster, its workers forked from the package's preloaded server (as
    # the README and notebook tests do): spawning each costs seconds on 2 cores
    with dask.config.set(worker_start_config()[0]), LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True,
            dashboard_address=None) as cluster, Client(cluster) as client:
        pca = PCA(2, client=client, random_state=0)
        scores = pca.fit_transform(vcz_path)  # the variant pass runs on the workers
        assert pca.result_.attrs["runtime"] == "dask"
        assert clone(pca).client is client  # shared, not deep-copied
        local = PCA(2, runtime="local").fit(vcz_path)
        np.testing.assert_allclose(pca.components_, local.components_, atol=1e-8)
        np.testing.assert_allclose(pca.transform(vcz_path), scores, atol=1e-8)
        ridge = Ridge(alpha=5.0, client=client, tol=1e-12, max_iter=5000).fit(path, "y")
        np.testing.assert_allclose(ridge.predict(path),
                                   linear_model.Ridge(alpha=5.0).fit(X, y).predict(X),
                                   atol=1e-6)
