"""Packed 2-bit genotype storage: open_matrix(..., genotype_storage="packed")."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import zarr

from daskstraggle import fit_pca, open_matrix
from daskstraggle.errors import InvalidParameterError


def _store(path, calls: np.ndarray, chunk_rows: int = 25):
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("call_genotype", shape=calls.shape,
                       chunks=(chunk_rows, *calls.shape[1:]), dtype="i1")[:] = calls
    return path


@pytest.fixture(scope="module")
def diploid(tmp_path_factory):
    """120 diploid variants x 37 samples (not a multiple of 4), 3% missing, 2 populations."""
    rng = np.random.default_rng(5)
    freq = rng.uniform(0.05, 0.6, size=(120, 1, 1)) * np.where(np.arange(37) < 15, 1.0, 1.6
                                                                  )[None, :, None]
    calls = (rng.random((120, 37, 2)) < np.minimum(freq, 0.95)).astype(np.int8)
    calls[rng.random((120, 37)) < 0.03] = -1
    calls[:, 30:, 1] = np.where(rng.random((120, 7)) < 0.2, -2, calls[:, 30:, 1])  # haploid
    return _store(tmp_path_factory.mktemp("packed") / "geno.vcz", calls)


def _blocks(matrix):
    return [matrix.loader(p)() for p in range(matrix.n_partitions)]


def test_packed_blocks_hold_a_quarter_of_the_bytes_and_the_same_rows(diploid):
    int8 = open_matrix(diploid, n_partitions=3)
    packed = open_matrix(diploid, n_partitions=3, genotype_storage="packed")
    assert packed.describe()["storage"] == "packed" and packed.shape == int8.shape
    for a, b in zip(_blocks(int8), _blocks(packed), strict=True):
        assert b.is_packed and b.n_features == a.n_features == 37
        assert b.nbytes == a.n_rows * 10 and a.nbytes == a.n_rows * 37  # ceil(37 / 4) = 10
        np.testing.assert_array_equal(np.vstack([t for *_, t in b.tiles()]),
                                      np.vstack([t for *_, t in a.tiles()]))


def test_packed_pca_on_a_local_runtime_equals_int8(diploid):
    kw = {"runtime": "local", "n_workers": 3, "rng": 0, "max_iter": 500, "tol": 1e-10}
    int8 = fit_pca(open_matrix(diploid), 3, **kw)
    packed = fit_pca(open_matrix(diploid, genotype_storage="packed"), 3, **kw)
    np.testing.assert_allclose(packed.fitted["components"], int8.fitted["components"],
                               atol=1e-10)
    np.testing.assert_allclose(packed.fitted["explained_variance"],
                               int8.fitted["explained_variance"], rtol=1e-12)


def test_packed_storage_refuses_ploidy_above_two(tmp_path):
    calls = np.zeros((8, 5, 3), dtype=np.int8)
    path = _store(tmp_path / "triploid.vcz", calls)
    with pytest.raises(InvalidParameterError, match=re.escape(
            "The 'genotype_storage' parameter of open_matrix must be 'int8' for genotypes of "
            "ploidy 3")):
        open_matrix(path, genotype_storage="packed")


def test_unknown_storage_is_refused(diploid):
    with pytest.raises(InvalidParameterError, match="genotype_storage"):
        open_matrix(diploid, genotype_storage="bits")


def test_cli_packed_genotypes_flag(diploid, tmp_path, capsys):
    from daskstraggle.cli import main

    base = ["pca", str(diploid), "-k", "2", "--runtime", "local", "--json", "--method", "gram"]
    assert main(base) == 0
    int8 = json.loads(capsys.readouterr().out)
    assert main([*base, "--packed-genotypes"]) == 0
    packed = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(packed["explained_variance"], int8["explained_variance"],
                               rtol=1e-12)
    triploid = _store(tmp_path / "triploid.vcz", np.zeros((8, 5, 3), dtype=np.int8))
    assert main(["pca", str(triploid), "--runtime", "local", "--packed-genotypes"]) == 2
    assert "drop --packed-genotypes" in capsys.readouterr().err


def test_row_nbytes_counts_what_a_worker_holds(tmp_path):
    import zarr

    from daskstraggle import open_matrix

    calls = np.zeros((40, 10, 2), dtype=np.int8)
    path = tmp_path / "g.vcz"
    zarr.open_group(path, mode="w").create_array("call_genotype", data=calls, chunks=(20, 10, 2))
    assert open_matrix(path).row_nbytes == 10 + 24  # int8 dosages + fill, centre, scale
    assert open_matrix(path, genotype_storage="packed").row_nbytes == 3 + 24
    assert open_matrix(np.zeros((5, 7))).row_nbytes == 56
