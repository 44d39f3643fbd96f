"""open_matrix: every input kind, partitioning, genotype dosages and bad input."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from daskstraggle import open_matrix
from daskstraggle.data.matrix import partition_bounds
from daskstraggle.data.sources import genotype_rows
from daskstraggle.errors import (
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
    NonFiniteDataError,
)


def _dense(matrix) -> np.ndarray:
    """All rows of a matrix as the kernels see them (via tiles), float64."""
    out = []
    for p in range(matrix.n_partitions):
        block = matrix.loader(p)()
        out += [tile.copy() for _, _, tile in block.tiles(tile_rows=7)]
    return np.vstack(out)


@pytest.fixture
def X() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(103, 5))


def test_every_input_kind_gives_identical_rows(X, tmp_path):
    z2 = zarr.create_array(tmp_path / "v2.zarr", shape=X.shape, chunks=(20, 5), dtype="f8",
                           zarr_format=2)
    z2[:] = X
    group = zarr.open_group(tmp_path / "v3.zarr", mode="w", zarr_format=3)
    group.create_array("X", shape=X.shape, chunks=(30, 5), dtype="f8")[:] = X
    group.create_array("other", shape=(4,), dtype="f8")
    inputs = {
        "numpy": open_matrix(X),
        "dask": open_matrix(da.from_array(X, chunks=(25, 5))),
        "xarray-numpy": open_matrix(xr.DataArray(X, dims=("obs", "var"))),
        "xarray-dask": open_matrix(xr.DataArray(da.from_array(X, chunks=(40, 5)))),
        "zarr-v2-array": open_matrix(tmp_path / "v2.zarr"),
        "zarr-v3-group": open_matrix(tmp_path / "v3.zarr", array="X"),
        "zarr-v3-group-default": open_matrix(str(tmp_path / "v3.zarr")),
    }
    for name, matrix in inputs.items():
        assert matrix.shape == X.shape, name
        for n in (1, 3, 6):
            np.testing.assert_array_equal(_dense(matrix.repartition(n)), X, err_msg=name)
    assert inputs["xarray-numpy"].dims == ("obs", "var")


def test_partitions_follow_zarr_chunks(tmp_path):
    z = zarr.create_array(tmp_path / "a.zarr", shape=(100, 2), chunks=(10, 2), dtype="f8")
    m = open_matrix(tmp_path / "a.zarr")
    assert m.n_partitions == 10
    np.testing.assert_array_equal(m.bounds, np.arange(0, 101, 10))
    bounds = m.repartition(3).bounds
    assert set(bounds.tolist()) <= set(range(0, 101, 10)), bounds
    assert z.shape == (100, 2)


@pytest.mark.parametrize("n_parts", [1, 2, 5, 7, 10, 11, 40])
def test_partition_bounds_are_increasing_and_aligned_when_possible(n_parts):
    chunks = np.array([0, 10, 20, 30, 35, 40, 50, 60, 70, 80, 40 + 60])
    chunks = np.unique(chunks)
    b = partition_bounds(chunks, n_parts)
    assert len(b) == n_parts + 1 and b[0] == 0 and b[-1] == chunks[-1]
    assert np.all(np.diff(b) > 0)
    if n_parts <= len(chunks) - 1:
        assert set(b.tolist()) <= set(chunks.tolist())


def test_genotype_dosage_and_missing_policy():
    calls = np.array(
        [[[0, 1], [1, 1], [-1, 0], [0, 0]],   # a missing call
         [[1, 1], [1, 1], [1, 1], [1, 1]],    # monomorphic
         [[0, 2], [-2, -2], [0, 0], [1, 0]]],  # multi-allelic + mixed-ploidy fill
        dtype=np.int8,
    )
    rows = genotype_rows(calls, missing="mean", scaling="none")
    np.testing.assert_array_equal(rows.values, [[1, 2, -1, 0], [2, 2, 2, 2], [1, -1, 0, 1]])
    np.testing.assert_allclose(rows.fill, [1.0, 2.0, 2 / 3])
    assert rows.center is None and rows.scale is None
    zero = genotype_rows(calls, missing="zero", scaling="none")
    np.testing.assert_allclose(zero.fill, 0.0)
    pat = genotype_rows(calls, missing="mean", scaling="patterson")
    np.testing.assert_allclose(pat.center, [1.0, 2.0, 2 / 3])
    assert pat.scale[1] == 0.0  # monomorphic rows contribute nothing
    p = 0.5
    assert pat.scale[0] == pytest.approx(1 / np.sqrt(p * (1 - p)))


def test_vcf_zarr_gives_dosages_with_sample_metadata(vcz_path):
    m = open_matrix(vcz_path, genotype_scaling="none")
    gt = zarr.open_group(str(vcz_path), mode="r")["call_genotype"][:]
    assert m.shape == gt.shape[:2]
    assert m.kind == "vcf-zarr" and m.dims == ("variants", "samples")
    np.testing.assert_array_equal(_dense(m.repartition(4)), (gt > 0).sum(axis=2))
    assert len(m.columns) == gt.shape[1]
    # chunking of variants is followed
    assert set(m.bounds.tolist()) <= set(range(0, gt.shape[0] + 100, 100)) | {gt.shape[0]}


def test_vcf_zarr_missing_calls_are_imputed_with_the_variant_mean(vcz_missing_path):
    m = open_matrix(vcz_missing_path, genotype_scaling="none")
    gt = zarr.open_group(str(vcz_missing_path), mode="r")["call_genotype"][:]
    real = gt != -2  # -2 pads a haploid call (the fixture has one): it counts 0 or 2
    missing = ((gt < 0) & real).any(axis=2) | ~real.any(axis=2)
    assert missing.mean() > 0.03
    dosage = (gt > 0).sum(axis=2) * gt.shape[2] / np.maximum(real.sum(axis=2), 1)
    dosage[missing] = np.nan
    expected = np.where(missing, np.nanmean(dosage, axis=1, keepdims=True), dosage)
    np.testing.assert_allclose(_dense(m.repartition(3)), expected)
    patterson = _dense(open_matrix(vcz_missing_path).repartition(2))
    # after Patterson scaling the imputed entries sit exactly at the row mean (0)
    assert np.allclose(patterson[missing], 0.0)


def test_labels_from_group_and_array(tmp_path):
    g = zarr.open_group(tmp_path / "d.zarr", mode="w")
    g.create_array("X", shape=(10, 2), dtype="f8")[:] = 1.0
    g.create_array("y", shape=(10,), dtype="f8")[:] = np.arange(10)
    m = open_matrix(tmp_path / "d.zarr", labels="y")
    np.testing.assert_array_equal(m.labels, np.arange(10))
    blocks = [m.repartition(3).loader(p)() for p in range(3)]
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), np.arange(10))
    m2 = open_matrix(np.ones((10, 2)), labels=np.arange(10).reshape(-1, 1))
    assert m2.labels.shape == (10,)


# ---------------------------------------------------------------------------- bad input
def test_missing_store(tmp_path):
    with pytest.raises(DataNotFoundError, match="does not exist"):
        open_matrix(tmp_path / "nope.zarr")


def test_unreadable_store(tmp_path):
    (tmp_path / "file.txt").write_text("not zarr")
    with pytest.raises(DataNotFoundError, match="not a readable Zarr"):
        open_matrix(tmp_path / "file.txt")


def test_array_name_not_found(tmp_path):
    g = zarr.open_group(tmp_path / "g.zarr", mode="w")
    g.create_array("X", shape=(4, 2), dtype="f8")
    with pytest.raises(DataNotFoundError, match=r"Array 'Z' not found .* holds \['X'\]"):
        open_matrix(tmp_path / "g.zarr", array="Z")


@pytest.mark.parametrize("shape", [(10,), (2, 3, 4)])
def test_not_2d(shape, tmp_path):
    with pytest.raises(InvalidDataError, match="must be 2-D"):
        open_matrix(np.zeros(shape))
    zarr.create_array(tmp_path / "a.zarr", shape=shape, dtype="f8")
    with pytest.raises(InvalidDataError, match="must be 2-D"):
        open_matrix(tmp_path / "a.zarr")


def test_not_genotypes(tmp_path):
    g = zarr.open_group(tmp_path / "g.vcz", mode="w")
    g.create_array("call_genotype", shape=(4, 3), dtype="f4")
    with pytest.raises(InvalidDataError, match="call_genotype must be an integer array"):
        open_matrix(tmp_path / "g.vcz")


@pytest.mark.parametrize("shape", [(0, 3), (3, 0)])
def test_empty(shape):
    with pytest.raises(InvalidDataError, match="empty"):
        open_matrix(np.zeros(shape))


def test_non_finite_values_are_reported_with_their_partition():
    X = np.ones((40, 3))
    X[25, 1] = np.nan
    m = open_matrix(X, n_partitions=4)
    m.loader(0)()  # clean partition loads
    with pytest.raises(NonFiniteDataError, match=r"Partition 2 \(rows 20-30\).*row 25"):
        m.loader(2)()


@pytest.mark.parametrize(
    ("labels", "match"),
    [(np.ones(9), "one value per row"), (np.array([1.0] * 9 + [np.nan]), "NaN"),
     (np.array(["a"] * 10), "must be numbers")],
)
def test_bad_labels(labels, match):
    with pytest.raises(InvalidDataError, match=match):
        open_matrix(np.ones((10, 2)), labels=labels)


def test_bad_parameters():
    with pytest.raises(InvalidParameterError, match="'missing' parameter of open_matrix"):
        open_matrix(np.ones((4, 2)), missing="drop")
    with pytest.raises(InvalidParameterError, match="'n_partitions' parameter"):
        open_matrix(np.ones((4, 2)), n_partitions=5)


def test_a_relative_path_still_loads_from_another_working_directory(tmp_path, monkeypatch):
    # workers of an existing cluster (--scheduler) need not share the client's directory
    X = np.arange(24.0).reshape(6, 4)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    zarr.create_array(tmp_path / "a" / "x.zarr", data=X, chunks=(3, 4))
    monkeypatch.chdir(tmp_path / "a")
    matrix = open_matrix("x.zarr")
    monkeypatch.chdir(tmp_path / "b")
    block = matrix.loader(1)()
    np.testing.assert_array_equal(block.values, X[3:])


def test_partitions_inside_one_chunk_are_read_once_and_equal_their_own_loads(tmp_path):
    X = np.random.default_rng(1).normal(size=(103, 5))
    y = np.arange(103.0)
    z = zarr.create_array(tmp_path / "x.zarr", shape=X.shape, chunks=(20, 5), dtype="f8")
    z[:] = X
    m = open_matrix(tmp_path / "x.zarr", labels=y).repartition(40)  # 2-3 rows each
    groups = m.read_groups()
    assert [g[0] for g in groups] == [0] + [g[1] for g in groups[:-1]]  # consecutive runs
    assert groups[-1][1] == m.n_partitions
    chunks = m.source.chunk_bounds
    for first, last in groups:  # each run lies in one chunk (or is one spanning partition)
        a, b = m.bounds[first], m.bounds[last]
        assert last - first == 1 or np.searchsorted(chunks, a, "right") == np.searchsorted(
            chunks, b - 1, "right")
    assert len(groups) < m.n_partitions / 3
    for first, last in groups:
        for p, block in zip(range(first, last), m.load_partitions(first, last), strict=True):
            own = m.loader(p)()
            assert block.start == own.start
            np.testing.assert_array_equal(block.values, own.values)
            np.testing.assert_array_equal(block.y, own.y)


def test_a_bad_row_read_with_its_chunk_still_names_its_own_partition():
    X = np.ones((60, 3))
    X[37, 1] = np.nan
    m = open_matrix(X, chunk_rows=30).repartition(20)
    (group,) = [g for g in m.read_groups() if m.bounds[g[0]] <= 37 < m.bounds[g[1]]]
    assert group[1] - group[0] > 1
    bad = int(np.searchsorted(m.bounds, 37, "right")) - 1
    with pytest.raises(NonFiniteDataError, match=rf"Partition {bad} \(rows 36-39\)"):
        m.load_partitions(*group)
