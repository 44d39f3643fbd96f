"""Tests of the dataset recipes (daskstraggle.data.datasets)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import zarr

from daskstraggle.data import datasets
from daskstraggle.data.datasets import (
    DATASETS,
    make_dataset,
    make_genotypes,
    make_linear,
    make_logistic,
)
from daskstraggle.errors import InvalidParameterError, OutputExistsError

TINY = {
    "genotypes": {"n_variants": 30, "n_samples": 6},
    "logistic": {"n_samples": 50, "n_features": 3, "chunk_rows": 20},
    "linear": {"n_samples": 50, "n_features": 3, "chunk_rows": 20},
}


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name)


def _strings(array) -> np.ndarray:
    # zarr reads VCF Zarr strings (vlen-utf8) as StringDType, which astype(str) refuses
    return np.array(array[:].tolist(), dtype=str)


def _read(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(path, mode="r")
    return {name: np.asarray(array[...]) for name, array in group.arrays()}


# ------------------------------------------------------------------------------ logistic
def test_logistic_layout(tmp_path: Path) -> None:
    path = make_logistic(tmp_path / "mix.zarr", n_samples=1000, n_features=7, chunk_rows=300,
                         separation=2.0, seed=3)
    assert path == (tmp_path / "mix.zarr").absolute()
    group = zarr.open_group(path, mode="r")
    assert group.metadata.zarr_format == 3
    X, y, mu, coef = group["X"], group["y"], group["mu"], group["coef"]
    assert (X.shape, X.chunks, X.dtype) == ((1000, 7), (300, 7), np.float64)
    assert (y.shape, y.chunks, y.dtype) == ((1000,), (300,), np.float64)
    assert mu.shape == coef.shape == (7,)
    np.testing.assert_allclose(np.linalg.norm(mu[:]), 2.0)
    np.testing.assert_array_equal(coef[:], 2 * mu[:])
    attrs = group.attrs.asdict()
    assert attrs["daskstraggle_dataset"] == "logistic"
    assert attrs["seed"] == 3
    assert attrs["intercept"] == 0.0
    assert attrs["params"] == {"n_samples": 1000, "n_features": 7, "chunk_rows": 300,
                               "dtype": "float64", "seed": 3, "separation": 2.0}
    assert np.isfinite(X[:]).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logistic_labels_and_class_means(tmp_path: Path, seed: int) -> None:
    data = _read(make_logistic(tmp_path / "mix.zarr", n_samples=20_000, n_features=10,
                               chunk_rows=3000, seed=seed))
    X, y, mu = data["X"], data["y"], data["mu"]
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert abs(y.mean()) < 0.05  # sd of the mean is 0.007
    for label in (-1.0, 1.0):
        # each coordinate of a class mean has sd ~ 1/sqrt(10_000) = 0.01
        np.testing.assert_allclose(X[y == label].mean(axis=0), label * mu, atol=0.06)


def test_logistic_float32_is_the_rounded_float64_store(tmp_path: Path) -> None:
    kw = {"n_samples": 500, "n_features": 4, "chunk_rows": 128, "seed": 7}
    a = _read(make_logistic(tmp_path / "a", **kw))
    b = _read(make_logistic(tmp_path / "b", dtype="float32", **kw))
    assert b["X"].dtype == np.float32
    np.testing.assert_array_equal(b["X"], a["X"].astype(np.float32))
    np.testing.assert_array_equal(b["y"], a["y"])


@pytest.mark.parametrize("recipe", [make_logistic, make_linear])
def test_tables_are_deterministic_for_seed_and_chunking(tmp_path: Path, recipe) -> None:
    kw = {"n_samples": 400, "n_features": 5, "chunk_rows": 150}
    first = _read(recipe(tmp_path / "a", seed=11, **kw))
    again = _read(recipe(tmp_path / "b", seed=11, **kw))
    other = _read(recipe(tmp_path / "c", seed=12, **kw))
    rechunked = _read(recipe(tmp_path / "d", seed=11, **{**kw, "chunk_rows": 100}))
    assert first.keys() == again.keys()
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["X"], other["X"])
    assert not np.array_equal(first["coef"], other["coef"])
    # the data-global quantities depend on the seed only; the rows may change with chunk_rows
    np.testing.assert_array_equal(first["coef"], rechunked["coef"])
    assert zarr.open_group(tmp_path / "d", mode="r")["X"].chunks == (100, 5)


def test_chunk_rows_larger_than_n_samples(tmp_path: Path) -> None:
    group = zarr.open_group(make_linear(tmp_path / "lin", n_samples=10, n_features=2,
                                        chunk_rows=1000), mode="r")
    assert group["X"].shape == (10, 2)
    assert group["X"].chunks == (10, 2)


# -------------------------------------------------------------------------------- linear
def test_linear_layout_and_recovery(tmp_path: Path) -> None:
    path = make_linear(tmp_path / "lin.zarr", n_samples=5000, n_features=10, chunk_rows=1200,
                       noise=0.1, seed=5)
    group = zarr.open_group(path, mode="r")
    X, y = group["X"][:], group["y"][:]
    assert (group["X"].chunks, group["y"].chunks) == ((1200, 10), (1200,))
    assert X.dtype == y.dtype == np.float64
    attrs = group.attrs.asdict()
    assert attrs["daskstraggle_dataset"] == "linear"
    assert attrs["params"]["noise"] == 0.1
    coef, intercept = group["coef"][:], attrs["intercept"]
    A = np.column_stack([X, np.ones(len(X))])
    solution = np.linalg.lstsq(A, y, rcond=None)[0]
    # standard error of each estimate is about noise / sqrt(n_samples) = 0.0014
    np.testing.assert_allclose(solution[:-1], coef, atol=0.015)
    assert abs(solution[-1] - intercept) < 0.015
    residual = y - A @ solution
    assert 0.09 < residual.std() < 0.11


def test_linear_noiseless_float32_fits_exactly(tmp_path: Path) -> None:
    path = make_linear(tmp_path / "lin", n_samples=300, n_features=6, chunk_rows=64,
                       noise=0.0, dtype="float32", seed=1)
    group = zarr.open_group(path, mode="r")
    X = group["X"][:]
    assert X.dtype == np.float32
    expected = X.astype(np.float64) @ group["coef"][:] + group.attrs["intercept"]
    np.testing.assert_allclose(group["y"][:], expected, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- genotypes
@pytest.mark.parametrize(
    ("n_samples", "n_populations", "ploidy", "counts"),
    [(31, 3, 2, [11, 10, 10]), (12, 2, 1, [6, 6]), (7, 1, 3, [7])],
)
def test_genotypes_layout(tmp_path: Path, n_samples, n_populations, ploidy, counts) -> None:
    path = make_genotypes(tmp_path / "g.vcz", n_variants=500, n_samples=n_samples,
                          n_populations=n_populations, ploidy=ploidy, chunk_rows=200, seed=2)
    group = zarr.open_group(path, mode="r")
    calls = group["call_genotype"]
    assert calls.shape == (500, n_samples, ploidy)
    assert calls.chunks == (200, n_samples, ploidy)
    assert calls.dtype == np.int8
    values = calls[:]
    assert set(np.unique(values)) <= {0, 1}  # binary mutation model
    dosage = values.sum(axis=2)
    per_variant = dosage.sum(axis=1)
    assert ((per_variant > 0) & (per_variant < n_samples * ploidy)).all()  # all segregating
    assert not group["call_genotype_mask"][:].any()
    positions = group["variant_position"][:]
    assert positions.shape == (500,)
    assert (np.diff(positions) > 0).all() and positions[0] > 0
    assert group["sample_id"].shape == (n_samples,)
    # the binary model's alleles "0" and "1" (plink reads "0" as missing) as A and T
    assert (_strings(group["variant_allele"]) == np.array(["A", "T"])).all()
    population = group["sample_population"]
    assert population.attrs["_ARRAY_DIMENSIONS"] == ["samples"]
    assert population.chunks == group["sample_id"].chunks
    names = _strings(population)
    expected = np.repeat([f"pop_{i}" for i in range(n_populations)], counts)
    np.testing.assert_array_equal(names, expected)  # bio2zarr keeps msprime's order
    attrs = group.attrs.asdict()
    assert attrs["daskstraggle_dataset"] == "genotypes"
    assert attrs["seed"] == 2
    assert attrs["vcf_zarr_version"]  # bio2zarr's attrs are kept
    assert attrs["params"] == {
        "n_variants": 500, "n_samples": n_samples, "n_populations": n_populations,
        "migration_rate": 1e-4, "ploidy": ploidy, "chunk_rows": 200, "missing_rate": 0.0,
        "seed": 2,
    }
    assert attrs["simulation"]["population_size"] == 10_000


@pytest.mark.parametrize("n_variants", [1, 37, 1500])
def test_genotypes_exact_variant_count(tmp_path: Path, n_variants: int) -> None:
    path = make_genotypes(tmp_path / "g.vcz", n_variants=n_variants, n_samples=9, seed=n_variants)
    group = zarr.open_group(path, mode="r")
    assert group["call_genotype"].shape[0] == n_variants
    assert group["variant_position"].shape == (n_variants,)


def test_genotypes_from_several_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "SEGMENT_LENGTH", 20_000)
    path = make_genotypes(tmp_path / "g.vcz", n_variants=700, n_samples=10, chunk_rows=256)
    group = zarr.open_group(path, mode="r")
    simulation = group.attrs["simulation"]
    assert simulation["n_segments"] >= 5
    assert simulation["segment_length"] <= 20_000
    assert group["call_genotype"].shape == (700, 10, 2)
    positions = group["variant_position"][:]
    assert (np.diff(positions) > 0).all()
    assert positions[-1] > (simulation["n_segments"] - 1) * simulation["segment_length"]
    per_variant = group["call_genotype"][:].sum(axis=(1, 2))
    assert ((per_variant > 0) & (per_variant < 20)).all()


def test_concatenate_matches_tskit() -> None:
    import msprime

    demography = msprime.Demography.island_model([10_000] * 2, migration_rate=1e-4)
    pieces = []
    for i, length in enumerate([30_000, 20_000, 40_000]):
        ts = msprime.sim_ancestry({"pop_0": 3, "pop_1": 2}, demography=demography,
                                  sequence_length=length, recombination_rate=1e-8,
                                  random_seed=i + 1)
        pieces.append(msprime.sim_mutations(ts, rate=1e-7, random_seed=i + 1,
                                            model=msprime.BinaryMutationModel()))
    ours = datasets._concatenate(pieces)
    theirs = pieces[0].concatenate(*pieces[1:], add_populations=False)
    assert ours.sequence_length == theirs.sequence_length == 90_000
    assert ours.num_sites == sum(ts.num_sites for ts in pieces) > 0
    np.testing.assert_array_equal(ours.sites_position, theirs.sites_position)
    np.testing.assert_array_equal(ours.genotype_matrix(), theirs.genotype_matrix())
    np.testing.assert_array_equal(ours.genotype_matrix(),
                                  np.vstack([ts.genotype_matrix() for ts in pieces]))
    assert ours.num_trees == theirs.num_trees
    assert ours.num_populations == 2
    assert ours.num_individuals == 5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_genotypes_show_population_structure(tmp_path: Path, seed: int) -> None:
    # default migration rate (F_ST about 0.08)
    path = make_genotypes(tmp_path / "g.vcz", n_variants=10_000, n_samples=60, seed=seed)
    group = zarr.open_group(path, mode="r")
    dosage = group["call_genotype"][:].sum(axis=2, dtype=np.float64)  # (variants, samples)
    populations = _strings(group["sample_population"])
    assert len(np.unique(populations)) == 3
    p = dosage.mean(axis=1, keepdims=True) / 2
    standardised = (dosage - 2 * p) / np.sqrt(2 * p * (1 - p))
    _, _, vt = np.linalg.svd(standardised, full_matrices=False)

    def between_over_within(scores: np.ndarray, groups: np.ndarray) -> float:
        labels = np.unique(groups)
        means = np.array([scores[groups == label].mean() for label in labels])
        within = np.mean([scores[groups == label].var() for label in labels])
        return float(means.var() / within)

    # PC1 scores: the ratio is 3.0-13 (median 6.8) over seeds 0-99
    assert between_over_within(vt[0], populations) > 2.0
    # the same scores grouped by shuffled labels show no structure (ratio ~ 2/60)
    shuffled = np.random.default_rng(seed).permutation(populations)
    assert between_over_within(vt[0], shuffled) < 0.5


def test_genotypes_deterministic(tmp_path: Path) -> None:
    kw = {"n_variants": 200, "n_samples": 12, "chunk_rows": 64, "missing_rate": 0.1}
    a = _read(make_genotypes(tmp_path / "a", seed=4, **kw))
    b = _read(make_genotypes(tmp_path / "b", seed=4, **kw))
    c = _read(make_genotypes(tmp_path / "c", seed=5, **kw))
    for name in ("call_genotype", "call_genotype_mask", "variant_position", "sample_population"):
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["variant_position"], c["variant_position"])


def test_genotypes_missing_calls(tmp_path: Path) -> None:
    path = make_genotypes(tmp_path / "g.vcz", n_variants=1000, n_samples=50, chunk_rows=300,
                          missing_rate=0.05, seed=1)
    group = zarr.open_group(path, mode="r")
    calls = group["call_genotype"][:]
    missing = calls < 0
    assert (calls[missing] == -1).all()
    np.testing.assert_array_equal(missing.any(axis=2), missing.all(axis=2))  # whole calls
    fraction = missing.any(axis=2).mean()  # 50_000 calls: sd of the fraction is 0.001
    assert abs(fraction - 0.05) < 0.01
    np.testing.assert_array_equal(group["call_genotype_mask"][:], missing)
    assert set(np.unique(calls[~missing])) <= {0, 1}
    assert group.attrs["params"]["missing_rate"] == 0.05


# -------------------------------------------------------------------- output handling
@pytest.mark.parametrize("name", sorted(TINY))
def test_existing_output_is_kept(tmp_path: Path, name: str) -> None:
    out = tmp_path / "store"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match=re.escape("exists; pass overwrite=True")):
        make_dataset(name, out, **TINY[name])
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "mine"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("name", sorted(TINY))
def test_overwrite_replaces(tmp_path: Path, name: str) -> None:
    out = tmp_path / "store"
    make_dataset(name, out, seed=0, **TINY[name])
    (out / "stale.txt").write_text("old")
    path = make_dataset(name, out, seed=1, overwrite=True, **TINY[name])
    assert path == out
    assert not (out / "stale.txt").exists()
    group = zarr.open_group(out, mode="r")
    assert group.attrs["seed"] == 1
    assert group.attrs["daskstraggle_dataset"] == name
    assert _leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_output_file_is_replaced_with_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "store"
    out.write_text("a file")
    with pytest.raises(OutputExistsError):
        make_linear(out, **TINY["linear"])
    assert out.read_text() == "a file"
    make_linear(out, overwrite=True, **TINY["linear"])
    assert zarr.open_group(out, mode="r")["X"].shape == (50, 3)


def test_failure_leaves_no_partial_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bio2zarr.tskit

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(bio2zarr.tskit, "convert", broken)
    out = tmp_path / "g.vcz"
    with pytest.raises(RuntimeError, match="disk full"):
        make_genotypes(out, **TINY["genotypes"])
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    # an existing store survives a failed overwrite
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="disk full"):
        make_genotypes(out, overwrite=True, **TINY["genotypes"])
    assert (out / "keep.txt").read_text() == "mine"
    assert _leftovers(tmp_path) == []


def test_parents_are_created(tmp_path: Path) -> None:
    path = make_logistic(tmp_path / "a" / "b" / "mix.zarr", **TINY["logistic"])
    assert zarr.open_group(path, mode="r")["X"].shape == (50, 3)


def test_progress_bar_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_linear(tmp_path / "lin", progress=True, **TINY["linear"])
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "linear" in captured.err


# -------------------------------------------------------------------------- validation
BAD = [
    ("logistic", {"n_samples": 0}),
    ("logistic", {"n_features": -1}),
    ("logistic", {"chunk_rows": 0}),
    ("logistic", {"chunk_rows": 2.5}),
    ("logistic", {"dtype": "int8"}),
    ("logistic", {"separation": -1.0}),
    ("logistic", {"separation": float("inf")}),
    ("logistic", {"seed": -1}),
    ("logistic", {"overwrite": "yes"}),
    ("linear", {"noise": float("nan")}),
    ("linear", {"n_samples": True}),
    ("linear", {"progress": 1}),
    ("genotypes", {"n_variants": 0}),
    ("genotypes", {"n_samples": 2, "n_populations": 3}),
    ("genotypes", {"n_populations": 0}),
    ("genotypes", {"migration_rate": 0.0}),
    ("genotypes", {"ploidy": 0}),
    ("genotypes", {"ploidy": 17}),
    ("genotypes", {"missing_rate": 1.0}),
    ("genotypes", {"missing_rate": -0.1}),
    ("genotypes", {"chunk_rows": None}),
    ("genotypes", {"seed": "0"}),
]


@pytest.mark.parametrize(("name", "params"), BAD)
def test_bad_parameter_writes_nothing(tmp_path: Path, name: str, params: dict) -> None:
    out = tmp_path / "sub" / "store"
    with pytest.raises(InvalidParameterError):
        DATASETS[name](out, **params)
    assert not (tmp_path / "sub").exists()


def test_bad_parameter_is_reported_before_existing_output(tmp_path: Path) -> None:
    out = tmp_path / "store"
    out.mkdir()
    with pytest.raises(InvalidParameterError):
        make_linear(out, n_features=0)


def test_error_messages(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match=re.escape(
        "The 'n_samples' parameter of make_logistic must be an int >= 1. Got 0 instead."
    )):
        make_logistic(tmp_path / "x", n_samples=0)
    with pytest.raises(InvalidParameterError, match=re.escape(
        "The 'missing_rate' parameter of make_genotypes must be a number in [0, 1). "
        "Got 1.5 instead."
    )):
        make_genotypes(tmp_path / "x", missing_rate=1.5)
    with pytest.raises(InvalidParameterError, match=re.escape(
        "The 'n_samples' parameter of make_genotypes must be an int >= 4 (n_populations)."
    )):
        make_genotypes(tmp_path / "x", n_samples=3, n_populations=4)
    with pytest.raises(InvalidParameterError, match="'out' parameter of make_linear"):
        make_linear(42)  # type: ignore[arg-type]


def test_make_dataset_dispatch(tmp_path: Path) -> None:
    assert sorted(DATASETS) == ["genotypes", "linear", "logistic"]
    a = _read(make_dataset("linear", tmp_path / "a", seed=3, **TINY["linear"]))
    b = _read(make_linear(tmp_path / "b", seed=3, **TINY["linear"]))
    np.testing.assert_array_equal(a["X"], b["X"])
    with pytest.raises(InvalidParameterError,
                       match=re.escape("must be one of ['genotypes', 'linear', 'logistic']")):
        make_dataset("mnist", tmp_path / "c")
    with pytest.raises(InvalidParameterError, match=re.escape("Got unknown ['n_variants']")):
        make_dataset("linear", tmp_path / "c", n_variants=10)
    assert not (tmp_path / "c").exists()
