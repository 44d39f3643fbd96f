"""Genotype PCA in sgkit's terms: output variables, conventions, projection of new samples.

The oracles are numpy: a replica of sgkit's own pipeline (``sgkit.stats.pca`` at 0.10:
``PattersonScaler`` on samples x variants, dask-ml's ``TruncatedSVD``, dask's ``svd_flip``)
and the PCA of the training samples' standardised calls. The stores are real VCF Zarr
written by bio2zarr from msprime simulations.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

import daskstraggle as ds
from daskstraggle.cli import main
from daskstraggle.data.datasets import make_genotypes
from daskstraggle.errors import InvalidDataError, InvalidParameterError, StraggleWarning
from daskstraggle.testing import one_error_line

#: sgkit.pca(..., merge=False)'s variables and their dims (sgkit/stats/pca.py, 0.10).
SGKIT_VARIABLES = {
    "sample_pca_projection": ("samples", "components"),
    "sample_pca_component": ("variants", "components"),
    "sample_pca_explained_variance": ("components",),
    "sample_pca_explained_variance_ratio": ("components",),
    "sample_pca_loading": ("variants", "components"),
}


def open_zarr(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no consolidated metadata
        return xr.open_zarr(path, consolidated=False)


@pytest.fixture(scope="module")
def complete(tmp_path_factory: pytest.TempPathFactory):
    """No missing calls (sgkit refuses them): 700 variants x 45 samples, 3 populations."""
    path = make_genotypes(tmp_path_factory.mktemp("gpca") / "complete.vcz", n_variants=700,
                          n_samples=45, chunk_rows=150, seed=8)
    return path, zarr.open_group(str(path), mode="r")["call_genotype"][:]


@pytest.fixture(scope="module")
def gappy(tmp_path_factory: pytest.TempPathFactory):
    """2% missing calls: 800 variants x 60 samples."""
    path = make_genotypes(tmp_path_factory.mktemp("gpca") / "gappy.vcz", n_variants=800,
                          n_samples=60, chunk_rows=200, missing_rate=0.02, seed=9)
    return path, zarr.open_group(str(path), mode="r")["call_genotype"][:]


def sgkit_replica(calls: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """sgkit.pca by hand: X = Patterson-scaled alternate allele counts, samples x variants."""
    counts = (calls > 0).sum(axis=2).T.astype(float)
    mean = counts.mean(axis=0)
    p = mean / calls.shape[2]
    X = (counts - mean) / np.sqrt(p * (1 - p))
    u, s, vt = np.linalg.svd(X, full_matrices=False)
    u, s, vt = u[:, :k], s[:k], vt[:k]
    signs = np.where(vt.sum(axis=1) >= 0, 1.0, -1.0)  # dask.array.utils.svd_flip
    u, vt = u * signs, vt * signs[:, None]
    projection = u * s
    explained = projection.var(axis=0)
    return {
        "sample_pca_projection": projection,
        "sample_pca_component": vt.T,
        "sample_pca_explained_variance": explained,
        "sample_pca_explained_variance_ratio": explained / X.var(axis=0).sum(),
        "sample_pca_loading": vt.T * np.sqrt(explained),
    }


def polymorphic(calls: np.ndarray) -> np.ndarray:
    dosage = (calls > 0).sum(axis=2)
    return dosage.std(axis=1) > 0


def test_output_names_and_conventions_are_sgkits(complete):
    path, calls = complete
    view = open_zarr(path).isel(samples=slice(0, 40))
    keep = polymorphic(calls[:, :40])  # sgkit fails on monomorphic variants: filter them
    out = ds.genotype_pca(view.isel(variants=keep), 4, merge=False, runtime="local")
    assert {n: out[n].dims for n in out.data_vars} == SGKIT_VARIABLES
    oracle = sgkit_replica(calls[keep][:, :40], 4)
    for name, expected in oracle.items():
        np.testing.assert_allclose(out[name].values, expected, rtol=1e-9, atol=1e-10,
                                   err_msg=name)
    np.testing.assert_array_equal(out["sample_id"], [f"tsk_{i}" for i in range(40)])
    positions = zarr.open_group(str(path), mode="r")["variant_position"][:]
    np.testing.assert_array_equal(out["variant_position"], positions[keep])
    # the same PCs as fit_pca on the store; monomorphic variants (scale 0) change nothing
    res = ds.fit_pca(view, 4, runtime="local")
    cos = np.abs(np.einsum("ij,ji->i", res.fitted["components"],
                           out["sample_pca_projection"].values
                           / res.fitted["singular_values"]))
    assert (cos > 1 - 1e-10).all(), cos
    # a min_maf filter removes the monomorphic variants itself: the same output
    filtered = ds.genotype_pca(view, 4, merge=False, runtime="local", qc={"min_maf": 1e-9})
    np.testing.assert_allclose(filtered["sample_pca_projection"], oracle["sample_pca_projection"],
                               atol=1e-10)


def test_merge_adds_the_variables_to_the_input_as_sgkit(gappy):
    path, calls = gappy
    view = open_zarr(path).isel(variants=slice(0, 600))
    qc = {"min_maf": 0.05}
    alone = ds.genotype_pca(view, 3, merge=False, runtime="local", qc=qc)
    merged = ds.genotype_pca(view, 3, runtime="local", qc=qc)
    assert set(view.data_vars) | set(SGKIT_VARIABLES) == set(merged.data_vars)
    assert merged.sizes["variants"] == 600 and merged.attrs == view.attrs
    kept = ~np.isnan(merged["sample_pca_component"].values[:, 0])
    assert 100 < kept.sum() < 600
    np.testing.assert_array_equal(merged["sample_pca_component"].values[kept],
                                  alone["sample_pca_component"].values)
    np.testing.assert_array_equal(merged["sample_pca_projection"],
                                  alone["sample_pca_projection"])
    np.testing.assert_array_equal(merged["call_genotype"], calls[:600])
    with pytest.warns(StraggleWarning, match="will be replaced in the output: "
                                             "sample_pca_component"):
        ds.genotype_pca(merged, 3, runtime="local", qc=qc)
    from_path = ds.genotype_pca(path, 2, runtime="local")
    assert from_path.sizes["variants"] == 800 and "call_genotype" in from_path
    with pytest.raises(InvalidParameterError, match="must be False for a Matrix"):
        ds.genotype_pca(ds.open_matrix(path), 2, runtime="local")
    with pytest.raises(InvalidDataError, match="genotype_pca needs genotypes"):
        ds.genotype_pca(np.ones((20, 4)), 2, runtime="local", merge=False)


# ---------------------------------------------------------------------------- projection
def standardize(calls: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    missing = (calls < 0).any(axis=2)
    dosage = (calls > 0).sum(axis=2)
    return np.where(missing, 0.0, (dosage - mean[:, None]) * scale[:, None])


def training_statistics(calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean dosage over the called genotypes and Patterson scale, by hand."""
    missing = (calls < 0).any(axis=2)
    dosage = np.where(missing, 0, (calls > 0).sum(axis=2))
    mean = dosage.sum(axis=1) / (~missing).sum(axis=1)
    p = mean / calls.shape[2]
    var = p * (1 - p)
    return mean, np.divide(1.0, np.sqrt(var), out=np.zeros_like(var), where=var > 1e-12)


def write(view: xr.Dataset, path) -> None:
    """A new VCF Zarr store holding a Dataset's view (Zarr format 2, as bio2zarr)."""
    view.compute().drop_encoding().to_zarr(path, zarr_format=2)


def test_held_out_samples_project_onto_the_training_pcs(gappy, tmp_path):
    path, calls = gappy
    order = np.random.default_rng(1).permutation(60)
    train, test = np.sort(order[:40]), np.sort(order[40:])
    store = open_zarr(path)
    pca = ds.PCA(4, runtime="local", qc={"min_maf": 0.02}).fit(store.isel(samples=train))
    keep = pca.variant_mask_
    # numpy: the training samples' PCs, the held-out samples standardised with the
    # training allele frequencies (missing calls count 0)
    mean_all, _ = training_statistics(calls[:, train])
    np.testing.assert_array_equal(keep, np.minimum(mean_all / 2, 1 - mean_all / 2) >= 0.02)
    mean, scale = training_statistics(calls[keep][:, train])
    np.testing.assert_allclose(pca.variant_mean_, mean, rtol=1e-12)
    U, _, Vt = np.linalg.svd(standardize(calls[keep][:, train], mean, scale),
                             full_matrices=False)
    signs = np.sign(np.einsum("ij,ij->i", pca.components_, Vt[:4]))
    expected = standardize(calls[keep][:, test], mean, scale).T @ (U[:, :4] * signs)
    held_out = pca.transform(store.isel(samples=test))
    np.testing.assert_allclose(held_out, expected, rtol=0, atol=1e-8)
    # the training samples project to the fit's own scores
    np.testing.assert_allclose(pca.transform(store.isel(samples=train)),
                               pca.components_.T * pca.singular_values_, atol=1e-8)
    # a second store with those samples, its variants in another order (and extra ones)
    second = tmp_path / "held_out.vcz"
    shuffled = np.random.default_rng(2).permutation(800)
    write(store.isel(samples=test, variants=shuffled), second)
    np.testing.assert_allclose(pca.transform(second), expected, rtol=0, atol=1e-8)
    lacking = tmp_path / "lacking.vcz"
    dropped = np.flatnonzero(keep)[5]
    rows = np.delete(np.arange(800), dropped)
    write(store.isel(samples=test, variants=rows), lacking)
    key = pca.variant_keys_[5]
    with pytest.raises(InvalidDataError, match=re.escape(
            f"Cannot project these samples: 1 of the fit's {keep.sum()} variants are not in "
            f"it (first: {key})")):
        pca.transform(lacking)
    twice = np.r_[np.arange(800), np.flatnonzero(keep)[7]]
    with pytest.raises(InvalidDataError, match=re.escape(
            "1 of the fit's variants repeat in it (first: "
            f"{pca.variant_keys_[7]})")):
        pca.transform(store.isel(samples=test, variants=twice))


# ---------------------------------------------------------------------------- cluster, CLI
@pytest.mark.cluster
def test_on_a_cluster_of_process_workers(gappy, dask_client):
    from distributed import get_task_stream

    path, _ = gappy
    view = open_zarr(path).isel(samples=slice(0, 50))
    qc = {"min_maf": 0.05, "max_missing": 0.05}
    local = ds.genotype_pca(view, 3, merge=False, runtime="local", qc=qc)
    with get_task_stream(dask_client) as stream:
        remote = ds.genotype_pca(view, 3, merge=False, client=dask_client, qc=qc)
    workers = {t["worker"] for t in stream.data}
    assert len(workers) >= 2  # the counting, loading and variant passes ran on the workers
    for name in SGKIT_VARIABLES:
        np.testing.assert_allclose(remote[name], local[name], rtol=1e-9, atol=1e-10)
    # fit_pca runs the counting pass on the run's workers, after region and FILTER
    res = ds.fit_pca(view, 3, client=dask_client, qc={**qc, "region": "1", "pass_only": True})
    assert res.attrs["matrix"]["qc"]["n_kept"] == local.sizes["variants"]
    np.testing.assert_allclose(res.fitted["singular_values"],
                               np.sqrt(local["sample_pca_explained_variance"] * 50), rtol=1e-9)


def test_cli_quality_control_flags(gappy, capsys):
    path, _ = gappy
    code = main(["pca", str(path), "-k", "2", "--runtime", "local", "--min-maf", "0.05",
                 "--max-missing", "0.05", "--pass-only", "--region", "1:1-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    kept = ds.open_matrix(path, qc={"min_maf": 0.05, "max_missing": 0.05}).n_rows
    assert re.search(rf"variants +{kept} of 800 kept by quality control \(region removed 0, "
                     r"pass removed 0, missing removed \d+, maf removed \d+\)", out.out), out.out
    for flags, message in (
        (["--min-maf", "0.6"], "The 'min_maf' parameter of GenotypeQC (CLI: --min-maf)"),
        (["--max-missing", "2"], "The 'max_missing' parameter of GenotypeQC (CLI: "
                                 "--max-missing)"),
        (["--region", "1:9-2"], "The 'region' parameter of GenotypeQC (CLI: --region)"),
        (["--region", "X"], "names contig 'X', which the data does not have"),
    ):
        assert main(["pca", str(path), "--runtime", "local", *flags]) == 2
        assert message in one_error_line(capsys.readouterr().err)
