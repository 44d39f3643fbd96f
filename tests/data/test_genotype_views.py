"""xarray Datasets in VCF Zarr layout, genotype quality control, allele-count arrays.

The store is a real VCF Zarr written by bio2zarr from an msprime simulation (``datasets
make genotypes``); the oracles select and standardise its calls by hand in numpy.
"""

from __future__ import annotations

import pickle
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import daskstraggle as ds
from daskstraggle.data.datasets import make_genotypes
from daskstraggle.data.sources import GenotypeArraySource, GenotypeSource
from daskstraggle.errors import InvalidDataError, InvalidParameterError, MissingChunksError

N_VARIANTS, N_SAMPLES, CHUNK = 900, 48, 128


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    """A VCF Zarr store with 2% missing calls, and its calls read whole."""
    path = make_genotypes(tmp_path_factory.mktemp("views") / "g.vcz", n_variants=N_VARIANTS,
                          n_samples=N_SAMPLES, chunk_rows=CHUNK, missing_rate=0.02, seed=5)
    calls = zarr.open_group(str(path), mode="r")["call_genotype"][:]
    return path, calls


def open_zarr(path, **kwargs):
    with warnings.catch_warnings():  # bio2zarr's stores may lack consolidated metadata
        warnings.simplefilter("ignore", RuntimeWarning)
        return xr.open_zarr(path, consolidated=False, **kwargs)


def standardized(calls: np.ndarray) -> np.ndarray:
    """Patterson-scaled dosages (variants x samples) by hand: mean over called genotypes,
    missing calls at the mean (0 after centring), monomorphic variants 0."""
    missing = (calls < 0).any(axis=2)
    dosage = np.where(missing, 0, (calls > 0).sum(axis=2)).astype(float)
    called = (~missing).sum(axis=1)
    mean = np.divide(dosage.sum(axis=1), called, out=np.zeros(len(called)), where=called > 0)
    p = mean / calls.shape[2]
    var = p * (1 - p)
    scale = np.divide(1.0, np.sqrt(var), out=np.zeros_like(var), where=var > 1e-12)
    return np.where(missing, 0.0, (dosage - mean[:, None]) * scale[:, None])


def matrix_values(m: ds.Matrix) -> np.ndarray:
    """The standardised matrix as the workers' loaders produce it."""
    rows = []
    for p in range(m.n_partitions):
        rows += [tile.copy() for _, _, tile in m.loader(p)().tiles()]
    return np.vstack(rows)


def top_pcs(Z: np.ndarray, k: int) -> np.ndarray:
    return np.linalg.svd(Z, full_matrices=False)[2][:k]


def assert_same_pcs(a: np.ndarray, b: np.ndarray, tol: float = 1e-10) -> None:
    """Rows of a and b (unit vectors) agree up to sign: |cos| within tol of 1."""
    cos = np.abs(np.einsum("ij,ij->i", a, b))
    assert (cos > 1 - tol).all(), cos


SELECTIONS = {
    "every third variant, some samples": lambda d: d.isel(variants=slice(None, None, 3),
                                                         samples=[40, 3, 7, 11, 30, 2, 19, 25]),
    "slices": lambda d: d.isel(variants=slice(100, 700), samples=slice(5, 45)),
    "boolean variant mask": lambda d: d.sel(
        variants=(d.variant_position > int(d.variant_position[300])).values),
    "reversed variants": lambda d: d.isel(variants=np.arange(N_VARIANTS)[::-1]),
}


def hand_indices(name: str, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The store rows and columns each selection shows, computed without xarray."""
    variants, samples = np.arange(N_VARIANTS), np.arange(N_SAMPLES)
    if name == "every third variant, some samples":
        return variants[::3], np.array([40, 3, 7, 11, 30, 2, 19, 25])
    if name == "slices":
        return variants[100:700], samples[5:45]
    if name == "boolean variant mask":
        return variants[positions > positions[300]], samples
    return variants[::-1], samples


def store_positions(path) -> np.ndarray:
    return zarr.open_group(str(path), mode="r")["variant_position"][:]


@pytest.mark.parametrize("chunked", [True, False], ids=["dask", "lazy"])
@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_a_filtered_dataset_is_read_from_its_store_with_the_selection(store, name, chunked):
    path, calls = store
    opened = open_zarr(path) if chunked else xr.open_dataset(path, engine="zarr", chunks=None,
                                                             consolidated=False)
    view = SELECTIONS[name](opened)
    m = ds.open_matrix(view)
    rows, cols = hand_indices(name, store_positions(path))
    assert isinstance(m.source, GenotypeSource) and m.source.path == str(path)
    np.testing.assert_array_equal(m.source.store_rows(), rows)
    assert m.shape == (len(rows), len(cols)) and m.dims == ("variants", "samples")
    np.testing.assert_array_equal(m.columns, [f"tsk_{c}" for c in cols])
    hand = standardized(calls[rows][:, cols])
    np.testing.assert_allclose(matrix_values(m), hand, rtol=0, atol=1e-12)
    # a loader carries the indices of its rows, not the calls: nothing is copied
    assert max(len(pickle.dumps(m.loader(p))) for p in range(m.n_partitions)) < 8_000


def test_same_pcs_as_the_path_and_as_numpy_on_the_same_selection(store):
    path, calls = store
    full = ds.fit_pca(path, 3, runtime="local")
    whole = ds.fit_pca(open_zarr(path), 3, runtime="local")
    assert_same_pcs(whole.fitted["components"], full.fitted["components"])
    np.testing.assert_allclose(whole.fitted["singular_values"], full.fitted["singular_values"],
                               rtol=1e-12)
    view = SELECTIONS["every third variant, some samples"](open_zarr(path))
    rows, cols = hand_indices("every third variant, some samples", store_positions(path))
    res = ds.fit_pca(view, 3, runtime="local")
    assert_same_pcs(res.fitted["components"], top_pcs(standardized(calls[rows][:, cols]), 3))


def test_a_dataset_not_backed_by_its_store_is_read_from_its_own_arrays(store):
    path, calls = store
    lazy = open_zarr(path).isel(variants=slice(0, 500))
    hand = standardized(calls[:500])
    for other in (lazy.compute(),  # in memory
                  lazy.assign(call_genotype=lazy.call_genotype.astype("int16"))):  # computed
        m = ds.open_matrix(other)
        assert isinstance(m.source, GenotypeArraySource) and "path" not in m.attrs
        np.testing.assert_allclose(matrix_values(m), hand, rtol=0, atol=1e-12)
        assert m.variants.get("variant_position").shape == (500,)


def test_workers_read_only_the_chunks_of_the_selection(store, tmp_path):
    path, calls = store
    damaged = tmp_path / "damaged.vcz"
    shutil.copytree(path, damaged)
    chunk = damaged / "call_genotype" / "6.0.0"  # variants 768-895
    assert chunk.exists()
    chunk.unlink()
    view = open_zarr(damaged).isel(variants=slice(0, 700))
    m = ds.open_matrix(view)
    assert isinstance(m.source, GenotypeSource)
    np.testing.assert_allclose(matrix_values(m), standardized(calls[:700]), atol=1e-12)
    m = ds.open_matrix(open_zarr(damaged).isel(variants=[1, 800]))
    assert m.n_partitions == 2  # one per store chunk touched
    m.loader(0)()
    with pytest.raises(MissingChunksError, match="1 of 1 chunks of array 'call_genotype'"):
        m.loader(1)()


def test_a_dataset_not_in_vcf_zarr_layout_is_refused_in_one_line(store):
    with pytest.raises(InvalidDataError, match=r"this one has no call_genotype .* ds\['X'\]"):
        ds.open_matrix(xr.Dataset({"X": (("a", "b"), np.ones((3, 2)))}))
    bad = open_zarr(store[0]).transpose("samples", "variants", ...)
    with pytest.raises(InvalidDataError, match="dims \\('variants', 'samples', 'ploidy'\\)"):
        ds.open_matrix(bad)


# ---------------------------------------------------------------------------- QC
def hand_qc(calls, positions, *, min_maf=None, max_missing=None, start=1, end=None):
    missing = (calls < 0).any(axis=2)
    dosage = np.where(missing, 0, (calls > 0).sum(axis=2))
    called = (~missing).sum(axis=1)
    p = dosage.sum(axis=1) / np.maximum(called, 1) / calls.shape[2]
    keep = (positions >= start) & (positions <= (end or positions.max()))
    if max_missing is not None:
        keep &= 1 - called / calls.shape[1] <= max_missing
    if min_maf is not None:
        keep &= (np.minimum(p, 1 - p) >= min_maf) & (called > 0)
    return keep


def test_quality_control_keeps_what_numpy_keeps(store):
    path, calls = store
    positions = store_positions(path)
    start, end = int(positions[100]), int(positions[800])
    qc = ds.GenotypeQC(min_maf=0.05, max_missing=0.03, region=f"1:{start:,}-{end}")
    m = ds.open_matrix(path, qc=qc)
    keep = hand_qc(calls, positions, min_maf=0.05, max_missing=0.03, start=start, end=end)
    assert 100 < keep.sum() < 700  # every step removes some
    report = m.attrs["qc"]
    np.testing.assert_array_equal(report.kept, keep)
    assert set(report.removed) == {"region", "missing", "maf"} and all(report.removed.values())
    assert sum(report.removed.values()) == N_VARIANTS - keep.sum()
    np.testing.assert_allclose(matrix_values(m), standardized(calls[keep]), atol=1e-12)
    assert m.describe()["qc"]["n_kept"] == int(keep.sum())
    np.testing.assert_array_equal(m.variants.get("variant_position"), positions[keep])
    # on a view: the frequencies are the selected samples'
    view = open_zarr(path).isel(samples=slice(0, 30))
    m = ds.open_matrix(view, qc={"min_maf": 0.1})
    np.testing.assert_array_equal(m.attrs["qc"].kept,
                                  hand_qc(calls[:, :30], positions, min_maf=0.1))
    report_view = m
    assert report_view.shape[1] == 30
    # in two stages (region first, then counts) the report covers the input
    staged = ds.open_matrix(ds.open_matrix(path, qc=qc.site_steps()), qc=qc.count_steps())
    np.testing.assert_array_equal(staged.attrs["qc"].kept, keep)
    assert staged.attrs["qc"].qc == qc
    assert staged.attrs["qc"].removed == report.removed


def test_pass_only_uses_variant_filter(store, tmp_path):
    path, calls = store
    filtered = tmp_path / "filtered.vcz"
    shutil.copytree(path, filtered)
    group = zarr.open_group(str(filtered), mode="r+")
    del group["filter_id"], group["filter_description"], group["variant_filter"]
    for name in ("filter_id", "filter_description"):
        ids = group.create_array(name, data=np.array(["PASS", "LowQual"],
                                                     dtype=np.dtypes.StringDType()))
        ids.attrs["_ARRAY_DIMENSIONS"] = ["filters"]
    flags = np.zeros((N_VARIANTS, 2), dtype=bool)
    passing = np.random.default_rng(0).random(N_VARIANTS) < 0.7
    flags[passing, 0], flags[~passing, 1] = True, True
    member = group.create_array("variant_filter", data=flags, chunks=(CHUNK, 2))
    member.attrs["_ARRAY_DIMENSIONS"] = ["variants", "filters"]
    m = ds.open_matrix(filtered, qc={"pass_only": True})
    np.testing.assert_array_equal(m.attrs["qc"].kept, passing)
    np.testing.assert_allclose(matrix_values(m), standardized(calls[passing]), atol=1e-12)
    on_view = ds.open_matrix(open_zarr(filtered).isel(variants=slice(0, 400)),
                             qc={"pass_only": True})
    np.testing.assert_array_equal(on_view.attrs["qc"].kept, passing[:400])


@pytest.mark.parametrize(("qc", "message"), [
    ({"min_maf": 0.7}, "The 'min_maf' parameter of GenotypeQC (CLI: --min-maf) must be a "
                       "number in [0, 0.5] or None. Got 0.7 instead."),
    ({"max_missing": -0.1}, "The 'max_missing' parameter of GenotypeQC (CLI: --max-missing) "
                            "must be a number in [0, 1] or None. Got -0.1 instead."),
    ({"min_maf": float("nan")}, "The 'min_maf' parameter of GenotypeQC (CLI: --min-maf)"),
    ({"pass_only": "yes"}, "The 'pass_only' parameter of GenotypeQC (CLI: --pass-only) must "
                           "be True or False."),
    ({"region": "1:500-20"}, "The 'region' parameter of GenotypeQC (CLI: --region) must be "
                             "'CONTIG' or 'CONTIG:START-END'"),
    ({"maf": 0.1}, "The 'qc' parameter of open_matrix must hold only ['min_maf', "
                   "'max_missing', 'pass_only', 'region', 'max_alleles', 'snps_only', 'hwe', "
                   "'max_sample_missing', 'king_cutoff', 'ld_prune']. Got unknown ['maf'] "
                   "instead."),
    ({"max_sample_missing": 1.5}, "The 'max_sample_missing' parameter of GenotypeQC (CLI: "
                                  "--mind) must be a number in [0, 1] or None."),
    ({"max_alleles": 0}, "The 'max_alleles' parameter of GenotypeQC (CLI: --max-alleles)"),
    ({"snps_only": 1}, "The 'snps_only' parameter of GenotypeQC (CLI: --snps-only) must "),
    (0.05, "The 'qc' parameter of open_matrix must be a GenotypeQC"),
])
def test_bad_quality_control_is_one_line_naming_the_parameter(store, qc, message):
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        ds.open_matrix(store[0], qc=qc)


def test_quality_control_that_cannot_apply_says_why(store, tmp_path):
    path, calls = store
    with pytest.raises(InvalidParameterError, match="names contig 'chr2', which the data "
                                                    "does not have; its contigs: '1'"):
        ds.open_matrix(path, qc={"region": "chr2:1-100"})
    beyond = int(store_positions(path).max()) + 1
    with pytest.raises(InvalidDataError, match=re.escape(
            f"No variant passes the quality control ({N_VARIANTS} variants: region removed "
            f"{N_VARIANTS}); loosen it")):  # and no counting pass is run for none
        ds.open_matrix(path, qc={"region": f"1:{beyond}-{beyond + 10}", "min_maf": 0.01})
    with pytest.raises(InvalidParameterError, match=r"applies to genotypes .* the matrix is "
                                                    r"numpy"):
        ds.open_matrix(np.ones((5, 3)), qc={"min_maf": 0.1})
    counts = (calls.clip(0).sum(axis=2)).astype(np.int8)
    with pytest.raises(InvalidParameterError, match=r"The 'region' step .* needs the variants'"):
        ds.open_matrix(counts, genotype_dims=("variants", "samples"), qc={"region": "1"})
    bare = tmp_path / "bare.vcz"
    shutil.copytree(path, bare)
    del zarr.open_group(str(bare), mode="r+")["variant_filter"]
    with pytest.raises(InvalidParameterError, match="needs variant_filter and filter_id"):
        ds.open_matrix(bare, qc={"pass_only": True})


# ---------------------------------------------------------------------------- allele counts
def test_allele_counts_need_their_orientation(store):
    path, _ = store
    ac = open_zarr(path).call_genotype.clip(0).sum("ploidy").astype("int16")
    ac = ac.rename("call_alternate_allele_count")
    for X in (ac, ac.values, ac.data, ac.values.T.copy()):
        with pytest.raises(InvalidDataError, match=re.escape(
                "looks like allele counts") + ".*pass genotype_dims=\\('variants', 'samples'\\)"):
            ds.fit_pca(X, 2, runtime="local")
    with pytest.raises(InvalidDataError, match="looks like allele counts"):
        ds.PCA(2, runtime="local").fit(ac)
    # binary features and floats are plain matrices
    ds.fit_pca((np.arange(60).reshape(20, 3) % 2).astype(int), 1, runtime="local")
    ds.fit_pca(ac.values.astype(float), 1, runtime="local")


def test_allele_counts_with_their_orientation_are_genotypes(store):
    path, calls = store
    missing = (calls < 0).any(axis=2)
    counts = np.where(missing, -1, (calls > 0).sum(axis=2)).astype(np.int16)
    reference = ds.fit_pca(path, 3, runtime="local").fitted["components"]
    da = xr.DataArray(counts, dims=("variants", "samples"))
    for X, dims in ((counts, ("variants", "samples")), (counts.T.copy(), ("samples", "variants")),
                    (da, ("variants", "samples")), (da.chunk({"variants": 200}).T,
                                                    ("samples", "variants"))):
        m = ds.open_matrix(X, genotype_dims=dims)
        assert m.rows_standardized and m.shape == (N_VARIANTS, N_SAMPLES)
        np.testing.assert_allclose(matrix_values(m), standardized(calls), atol=1e-12)
        res = ds.fit_pca(X, 3, runtime="local", genotype_dims=dims)
        assert_same_pcs(res.fitted["components"], reference)
    pca = ds.PCA(3, runtime="local", solve_params={"genotype_dims": ("variants", "samples")})
    assert_same_pcs(pca.fit(counts).components_, reference)
    with pytest.raises(InvalidParameterError, match="contradicts the DataArray's dims"):
        ds.open_matrix(da, genotype_dims=("samples", "variants"))
    with pytest.raises(InvalidParameterError, match="The 'genotype_dims' parameter of "
                                                    "open_matrix must be"):
        ds.open_matrix(counts, genotype_dims=("rows", "cols"))
    with pytest.raises(InvalidDataError, match="The allele counts go up to 3"):
        ds.open_matrix(counts + 1, genotype_dims=("variants", "samples")).loader(0)()


def test_read_selection_reads_only_the_chunks_of_the_rows(store, tmp_path):
    from daskstraggle.data._zarr import read_selection

    path, calls = store
    damaged = tmp_path / "gap.vcz"
    shutil.copytree(path, damaged)
    (damaged / "call_genotype" / "3.0.0").unlink()  # variants 384-511: not selected
    rows = np.array([700, 5, 5, 130, 899, 131])  # unsorted, repeated, over chunks 0, 1, 5, 7
    cols = np.array([9, 0, 47, 9])
    got = read_selection(str(damaged), "call_genotype", rows, cols, missing_chunks="error")
    np.testing.assert_array_equal(got, calls[rows][:, cols])
    with pytest.raises(MissingChunksError, match="1 of 3 chunks"):
        read_selection(str(damaged), "call_genotype", np.array([0, 400, 899]), None,
                       missing_chunks="error")


def test_genotypes_indexed_apart_from_the_dataset_are_read_from_the_dataset(store, tmp_path):
    path, calls = store
    lazy = open_zarr(path)
    lazy["call_genotype"] = lazy.call_genotype.isel(variants=np.arange(N_VARIANTS)[::-1])
    m = ds.open_matrix(lazy)  # its positions say "not selected": its genotypes are not the store's
    assert isinstance(m.source, GenotypeArraySource)
    np.testing.assert_allclose(matrix_values(m), standardized(calls[::-1]), atol=1e-12)
    with pytest.raises(InvalidParameterError, match="lies inside the input store"):
        ds.fit_pca(open_zarr(path), 2, runtime="local", out=path / "pca.zarr")


def _with_alleles(path: Path, tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A copy of the store whose variants have REF/ALT plus, for some, a second ALT, an
    indel or a symbolic allele; returns it and the alleles written."""
    out = tmp_path / "alleles.vcz"
    shutil.copytree(path, out)
    group = zarr.open_group(str(out), mode="r+")
    alleles = np.full((N_VARIANTS, 3), "", dtype=object)
    alleles[:, 0], alleles[:, 1] = "A", "T"
    alleles[1::7, 2] = "G"          # multi-allelic SNPs
    alleles[2::11, 1] = "AT"        # an insertion
    alleles[3::13, 1] = "<DEL>"     # a symbolic allele
    alleles[4::17, 0] = "CG"        # a deletion's REF
    del group["variant_allele"]
    member = group.create_array("variant_allele", data=alleles.astype(str).astype(
        np.dtypes.StringDType()), chunks=(CHUNK, 3))
    member.attrs["_ARRAY_DIMENSIONS"] = ["variants", "alleles"]
    return out, alleles


def test_max_alleles_and_snps_only_read_the_alleles(store, tmp_path):
    path, calls = store
    edited, alleles = _with_alleles(path, tmp_path)
    n_alleles = (alleles != "").sum(axis=1)
    one_base = np.array([all(len(a) == 1 for a in row if a) for row in alleles])
    m = ds.open_matrix(edited, qc={"max_alleles": 2})
    np.testing.assert_array_equal(m.attrs["qc"].kept, n_alleles <= 2)
    assert m.attrs["qc"].removed == {"alleles": int((n_alleles > 2).sum())}
    np.testing.assert_allclose(matrix_values(m), standardized(calls[n_alleles <= 2]),
                               atol=1e-12)
    m = ds.open_matrix(edited, qc={"snps_only": True})
    np.testing.assert_array_equal(m.attrs["qc"].kept, one_base)  # multi-allelic SNPs stay
    both = ds.open_matrix(edited, qc=ds.GenotypeQC(max_alleles=2, snps_only=True))
    np.testing.assert_array_equal(both.attrs["qc"].kept, (n_alleles <= 2) & one_base)
    removed = both.attrs["qc"].removed
    assert list(removed) == ["alleles", "snps"] and removed["alleles"] == (n_alleles > 2).sum()
    assert removed["snps"] == ((n_alleles <= 2) & ~one_base).sum() > 0


def test_allele_steps_on_the_command_line(store, tmp_path, capsys):
    from daskstraggle.cli import main

    path, _ = store
    edited, alleles = _with_alleles(path, tmp_path)
    kept = int(((alleles != "").sum(axis=1) <= 2).sum())
    code = main(["pca", str(edited), "-k", "2", "--runtime", "local", "--max-alleles", "2",
                 "--snps-only", "--max-iter", "5", "--tol", "1e-3"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"of {N_VARIANTS} kept by quality control (alleles removed {N_VARIANTS - kept}" in out
    assert main(["pca", str(edited), "--runtime", "local", "--max-alleles", "0"]) == 2
    assert "'max_alleles' parameter of GenotypeQC (CLI: --max-alleles)" in \
        capsys.readouterr().err


def _with_missing_samples(path: Path, tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A copy of the store where samples 0-2 miss half their calls and sample 3 all."""
    out = tmp_path / "mind.vcz"
    shutil.copytree(path, out)
    gt = zarr.open_group(str(out), mode="r+")["call_genotype"]
    calls = gt[:]
    rng = np.random.default_rng(1)
    for sample in range(3):
        calls[rng.random(N_VARIANTS) < 0.5, sample] = -1
    calls[:, 3] = -1
    gt[:] = calls
    return out, calls


def test_max_sample_missing_keeps_the_samples_plink_mind_keeps(store, tmp_path):
    path, _ = store
    edited, calls = _with_missing_samples(path, tmp_path)
    missing = (calls < 0).any(axis=2).mean(axis=0)
    kept = missing <= 0.2
    assert not kept[:4].any() and kept[4:].all()
    # the sample with no call fails --mind too: it is not named (warnings are errors here)
    m = ds.open_matrix(edited, qc={"max_sample_missing": 0.2})
    np.testing.assert_array_equal(m.attrs["qc"].samples_kept, kept)
    assert m.shape == (N_VARIANTS, int(kept.sum()))
    # each variant standardised over the kept samples
    np.testing.assert_allclose(matrix_values(m), standardized(calls[:, kept]), atol=1e-12)
    # at 1 the sample with no call still goes, with the warning
    with pytest.warns(ds.errors.StraggleWarning, match="removed, rather than scored 0"):
        m1 = ds.open_matrix(edited, qc={"max_sample_missing": 1.0})
    assert m1.n_columns == N_SAMPLES - 1
    # the variant filters count the kept samples only
    both = ds.open_matrix(edited, qc=ds.GenotypeQC(max_sample_missing=0.2, max_missing=0.0))
    np.testing.assert_array_equal(both.attrs["qc"].kept,
                                  ~(calls[:, kept] < 0).any(axis=(1, 2)))


def test_genotype_pca_merges_nan_for_the_samples_mind_removed(store, tmp_path):
    path, _ = store
    edited, _ = _with_missing_samples(path, tmp_path)
    out = ds.genotype_pca(open_zarr(edited), 2, qc={"max_sample_missing": 0.2},
                          runtime="local", rng=0)
    projection = out["sample_pca_projection"].values
    assert projection.shape == (N_SAMPLES, 2)
    assert np.isnan(projection[:4]).all() and np.isfinite(projection[4:]).all()


def test_mind_on_the_command_line(store, tmp_path, capsys):
    from daskstraggle.cli import main

    path, _ = store
    edited, _ = _with_missing_samples(path, tmp_path)
    code = main(["pca", str(edited), "-k", "2", "--runtime", "local", "--mind", "0.2",
                 "--max-iter", "5", "--tol", "1e-3"])
    captured = capsys.readouterr()
    assert code == 0 and f"samples     {N_SAMPLES - 4} of {N_SAMPLES} kept" in captured.out
    assert "no called genotype" not in captured.err  # --mind removed it: not named


def test_mind_on_in_memory_allele_counts():
    counts = np.random.default_rng(3).integers(0, 3, size=(50, 10)).astype(np.int8)
    counts[:, 2] = -1  # a sample with no call
    counts[:30, 5] = -1  # and one missing 60 %
    m = ds.open_matrix(counts, genotype_dims=("variants", "samples"),  # no warning:
                       qc={"max_sample_missing": 0.5})  # --mind removes the sample with no call
    keep = np.ones(10, dtype=bool)
    keep[[2, 5]] = False
    np.testing.assert_array_equal(m.attrs["qc"].samples_kept, keep)
    values = matrix_values(m)
    assert values.shape == (50, 8) and np.isfinite(values).all()


def test_the_qc_stages_keep_every_step_as_given():
    """The two stages of quality control (site steps, then the steps counted over the
    genotypes) carry each parameter as given: ``r2`` keeps every digit (its text would
    round it to six)."""
    from daskstraggle.data.genotypes import GenotypeQC

    qc = GenotypeQC(region="1:1-100", min_maf=0.0, ld_prune=(50, 5, 0.123456789123))
    counted = qc.count_steps()
    assert counted.ld_prune == qc.ld_prune and counted.ld_prune.r2 == 0.123456789123
    assert counted.min_maf == 0.0 and counted.region is None
    assert qc.site_steps() == GenotypeQC(region="1:1-100")
