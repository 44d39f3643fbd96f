"""The fit_* functions: every input kind gives identical results for identical data.

In process (``runtime="local"``) except the last test, which runs NAG on the session
cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from daskstraggle import Result, fit_least_squares, fit_logistic, fit_pca, open_matrix
from daskstraggle.runtime.dask import worker_addresses

N_ROWS, N_COLS = 300, 6


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    """A matrix with a spectral gap, binary labels and regression targets."""
    rng = np.random.default_rng(5)
    left = rng.normal(size=(N_ROWS, 3)) * np.array([8.0, 4.0, 2.0])
    X = left @ rng.normal(size=(3, N_COLS)) + 0.5 * rng.normal(size=(N_ROWS, N_COLS)) + 1.0
    X /= X.std(axis=0)
    coef = rng.normal(size=N_COLS)
    logits = (X - X.mean(axis=0)) @ coef
    y01 = (rng.random(N_ROWS) < 1 / (1 + np.exp(-logits))).astype(np.float64)
    target = X @ coef + 0.5 + 0.1 * rng.normal(size=N_ROWS)
    return {"X": X, "y01": y01, "target": target}


@pytest.fixture(scope="module")
def stores(data, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same data as a Zarr v2 array and as a Zarr v3 group with X, y01 and target."""
    root = tmp_path_factory.mktemp("api")
    X = data["X"]
    v2 = zarr.create_array(root / "v2.zarr", shape=X.shape, chunks=(64, N_COLS), dtype="f8",
                           zarr_format=2)
    v2[:] = X
    group = zarr.open_group(root / "v3.zarr", mode="w", zarr_format=3)
    group.create_array("X", shape=X.shape, chunks=(50, N_COLS), dtype="f8")[:] = X
    for name in ("y01", "target"):
        group.create_array(name, shape=(N_ROWS,), chunks=(50,), dtype="f8")[:] = data[name]
    return {"v2": root / "v2.zarr", "v3": root / "v3.zarr"}


def input_kinds(
    data: dict[str, np.ndarray], stores: dict[str, Path]
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Input kind -> (X, extra keyword arguments), all holding ``data["X"]``."""
    X = data["X"]
    return {
        "numpy": (X, {}),
        "dask": (da.from_array(X, chunks=(70, N_COLS)), {}),
        "xarray-numpy": (xr.DataArray(X, dims=("obs", "var")), {}),
        "xarray-dask": (xr.DataArray(da.from_array(X, chunks=(100, 3)), dims=("obs", "var")), {}),
        "matrix": (open_matrix(X, chunk_rows=40), {}),
        "zarr-v2-array": (stores["v2"], {}),
        "zarr-v3-group": (stores["v3"], {"array": "X"}),
        "zarr-v3-group-str": (str(stores["v3"]), {}),  # "X" is the default member
    }


def assert_same(results: dict[str, Result], keys: tuple[str, ...]) -> None:
    """Every result equals the first one: fitted values, final iterate, every iteration."""
    (name0, first), *others = results.items()
    for name, res in others:
        msg = f"{name} differs from {name0}"
        assert res.n_iter == first.n_iter, msg
        for key in keys:
            np.testing.assert_allclose(res.fitted[key], first.fitted[key], rtol=0, atol=1e-12,
                                       err_msg=msg)
        np.testing.assert_allclose(res.iterate, first.iterate, rtol=0, atol=1e-12, err_msg=msg)
        np.testing.assert_allclose(res.trace["objective"], first.trace["objective"], rtol=0,
                                   atol=1e-12, err_msg=msg)
        np.testing.assert_allclose(res.objective, first.objective, rtol=0, atol=1e-12, err_msg=msg)


# ------------------------------------------------------------------------ input kinds
def test_pca_is_identical_for_every_input_kind(data, stores):
    kinds = input_kinds(data, stores)
    results = {
        name: fit_pca(X, 2, runtime="local", rng=0, max_iter=25, tol=None, **kw)
        for name, (X, kw) in kinds.items()
    }
    assert_same(results, ("components", "explained_variance", "explained_variance_ratio", "mean"))
    first = next(iter(results.values()))
    assert first.n_iter == 25
    # and it is the PCA: the top-2 subspace of the centred data
    Xc = data["X"] - data["X"].mean(axis=0)
    _, s, vt = np.linalg.svd(Xc, full_matrices=False)
    np.testing.assert_allclose(np.abs(first.fitted["components"] @ vt[:2].T), np.eye(2), atol=1e-6)
    np.testing.assert_allclose(first.fitted["explained_variance_ratio"], s[:2] ** 2 / np.sum(s**2),
                               atol=1e-9)


@pytest.mark.parametrize("fit", [fit_logistic, fit_least_squares],
                         ids=["fit_logistic", "fit_least_squares"])
def test_regression_is_identical_for_every_input_kind_and_label_form(fit, data, stores):
    y_name = "y01" if fit is fit_logistic else "target"
    y = data[y_name]
    kinds = input_kinds(data, stores)
    labels_for = {
        "dask": da.from_array(y, chunks=70),
        "xarray-numpy": xr.DataArray(y, dims=("obs",)),
        "xarray-dask": xr.DataArray(da.from_array(y, chunks=100), dims=("obs",)),
        "zarr-v3-group": y_name,  # the name of the labels array in the group
        "zarr-v3-group-str": y.reshape(-1, 1),  # a column vector is accepted too
    }
    results = {
        name: fit(X, labels_for.get(name, y), runtime="local", rng=0, max_iter=30, tol=None, **kw)
        for name, (X, kw) in kinds.items()
    }
    if fit is fit_logistic:  # labels in {-1, +1} are the same labels as {0, 1}
        results["numpy-plus-minus-one"] = fit(data["X"], 2 * y - 1, runtime="local", rng=0,
                                              max_iter=30, tol=None)
    assert_same(results, ("coef", "intercept"))


@pytest.mark.parametrize("store", ["vcz_path", "vcz_missing_path"])
def test_genotype_pca_equals_pca_of_the_dense_dosage_matrix(store, request):
    """VCF Zarr -> dosages -> mean imputation -> Patterson scaling, done here with numpy."""
    path = request.getfixturevalue(store)
    calls = zarr.open_group(str(path), mode="r")["call_genotype"][:]
    ploidy = calls.shape[2]
    real = calls != -2  # -2 pads a call of lower ploidy: scale its alt count to the ploidy
    missing = ((calls < 0) & real).any(axis=2) | ~real.any(axis=2)
    dosage = (calls > 0).sum(axis=2) * ploidy / np.maximum(real.sum(axis=2), 1)
    dosage[missing] = np.nan
    mean = np.nan_to_num(np.nanmean(dosage, axis=1))[:, None]  # all-missing rows: mean 0
    dosage = np.where(missing, mean, dosage)
    p = mean / ploidy
    var = p * (1 - p)
    scale = np.divide(1.0, np.sqrt(var), out=np.zeros_like(var), where=var > 1e-12)
    dense = (dosage - mean) * scale
    assert missing.any() == (store == "vcz_missing_path")

    kw = {"runtime": "local", "n_workers": 3, "rng": 0, "max_iter": 40, "tol": None}
    geno = fit_pca(path, 2, **kw)  # center=None: genotype rows are already centred
    dense_res = fit_pca(dense, 2, center=False, **kw)
    assert geno.attrs["matrix"]["kind"] == "vcf-zarr"
    for key in ("components", "explained_variance", "explained_variance_ratio"):
        np.testing.assert_allclose(geno.fitted[key], dense_res.fitted[key], rtol=0, atol=1e-10,
                                   err_msg=key)
    np.testing.assert_allclose(geno.trace["objective"], dense_res.trace["objective"], atol=1e-12)
    # sample ids label the components' feature dimension
    ds = geno.to_dataset()
    assert "samples" in ds["components"].dims
    sample_id = zarr.open_group(str(path), mode="r")["sample_id"][:]
    assert [str(v) for v in ds["samples"].values] == [str(v) for v in sample_id]


# ------------------------------------------------------------------- xarray metadata
def test_xarray_feature_dimension_and_coords_are_kept(data, tmp_path):
    genes = [f"gene{j}" for j in range(N_COLS)]
    X = xr.DataArray(data["X"], dims=("cell", "gene"), coords={"gene": genes})
    pca = fit_pca(X, 2, runtime="local", rng=0, max_iter=5, tol=None)
    ds = pca.to_dataset()
    assert ds["components"].dims == ("component", "gene")
    assert ds["mean"].dims == ("gene",)
    assert [str(g) for g in ds["gene"].values] == genes
    back = Result.load(pca.save(tmp_path / "pca.zarr")).to_dataset()
    assert back["components"].dims == ("component", "gene")
    assert [str(g) for g in back["gene"].values] == genes

    y = xr.DataArray(data["target"], dims=("cell",))
    reg = fit_least_squares(X, y, runtime="local", rng=0, max_iter=5, tol=None).to_dataset()
    assert reg["coef"].dims == ("gene",)
    assert [str(g) for g in reg["gene"].values] == genes


def test_default_dimension_names_without_xarray(data):
    ds = fit_pca(data["X"], 1, runtime="local", rng=0, max_iter=3, tol=None).to_dataset()
    assert ds["components"].dims == ("component", "feature")


# --------------------------------------------------------------------- real cluster
def test_nag_logistic_on_the_cluster_reaches_the_reference(dask_client):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(800, 4))
    coef = np.array([1.0, -0.5, 0.25, 0.0])
    y = (rng.random(800) < 1 / (1 + np.exp(-(X @ coef + 0.3)))).astype(float)
    res = fit_logistic(open_matrix(X, chunk_rows=100), y, method="nag", client=dask_client,
                       reference=True, gap_tol=1e-10, tol=None, max_iter=1000, rng=0)
    assert res.attrs["runtime"] == "dask"
    assert res.attrs["workers"] == worker_addresses(dask_client)
    assert res.stop_reason == "gap", (res.stop_reason, res.gap)
    assert res.reference_objective is not None and res.reference_objective > 0
    assert abs(res.objective - res.reference_objective) <= 1e-8 * res.reference_objective
    assert res.distance < 1e-3


def test_local_runtime_refuses_a_cluster_argument():
    import numpy as np
    import pytest

    from daskstraggle import fit_pca
    from daskstraggle.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="runtime='local' runs in this process"):
        fit_pca(np.eye(4), 1, runtime="local", scheduler="tcp://127.0.0.1:8786")


@pytest.mark.parametrize(("method", "params"), [
    ("coded", {"scheme": "cyclic-repetition", "n_stragglers": 1}),
    ("partial", {}),
])
def test_a_seeded_run_seeds_the_methods_own_draws(method, params):
    """Cyclic repetition draws a random encoding matrix: with the run's seed passed on,
    two seeded runs agree bit for bit (unseeded draws differed by ~1e-14)."""
    X = np.random.default_rng(5).normal(size=(700, 9))
    fits = [fit_pca(X, 3, method=method, method_params=params, runtime="local",
                    n_workers=4, max_iter=20, tol=None, rng=7) for _ in range(2)]
    np.testing.assert_array_equal(fits[0].fitted["components"], fits[1].fitted["components"])
    assert fits[0].attrs["method_params"]["rng"] == 7
    explicit = fit_pca(X, 3, method=method, method_params={**params, "rng": 3},
                       runtime="local", n_workers=4, max_iter=2, tol=None, rng=7)
    assert explicit.attrs["method_params"]["rng"] == 3
