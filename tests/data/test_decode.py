"""The compiled genotype decoder agrees exactly with the numpy path and the per-call oracle.

``genotype_rows`` decodes ``call_genotype`` with numba when it can
(:mod:`daskstraggle.data._decode`) and with numpy otherwise (numba missing,
``DASKSTRAGGLE_NUMBA=0``, non-integer or non-contiguous calls, fractional dosages). Both
must give the same dosages (int8, -1 where missing), fill, centre and scale, bit for bit;
the dosages must also match :func:`daskstraggle.testing.reference_dosages`, a per-call
Python loop.
"""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.data import _decode
from daskstraggle.data.sources import genotype_rows
from daskstraggle.problems import _kernels as kernels
from daskstraggle.testing import reference_dosages

needs_numba = pytest.mark.skipif(not kernels.numba_available(), reason="numba is not installed")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(14)


def _rows(calls: np.ndarray, monkeypatch: pytest.MonkeyPatch, implementation: str, **kw):
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1" if implementation == "numba" else "0")
    kw = {"missing": "mean", "scaling": "patterson", **kw}
    return genotype_rows(calls, **kw)


def _assert_same(a, b) -> None:
    assert a.values.dtype == b.values.dtype
    np.testing.assert_array_equal(a.values, b.values)
    for name in ("fill", "center", "scale"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y)


def _check(calls: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """numba == numpy for every missing/scaling option; dosages == the per-call oracle."""
    for missing in ("mean", "zero"):
        for scaling in ("patterson", "none"):
            fast = _rows(calls, monkeypatch, "numba", missing=missing, scaling=scaling)
            slow = _rows(calls, monkeypatch, "numpy", missing=missing, scaling=scaling)
            _assert_same(fast, slow)
    expected = reference_dosages(calls)
    got = fast.values.astype(np.float64)
    got[fast.values == -1] = np.nan
    np.testing.assert_array_equal(got, expected)


def _diploid(rng: np.random.Generator, n: int, s: int, *, p_missing: float,
             n_alleles: int = 2) -> np.ndarray:
    calls = rng.integers(0, n_alleles, size=(n, s, 2)).astype(np.int8)
    missing = rng.random((n, s)) < p_missing
    calls[missing, rng.integers(0, 2)] = -1
    return calls


@needs_numba
def test_the_numba_path_runs_and_numpy_is_used_when_disabled(monkeypatch, rng):
    calls = _diploid(rng, 20, 7, p_missing=0.1)
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1")
    assert _decode.decode_calls(calls) is not None
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "0")
    assert _decode.decode_calls(calls) is None


@needs_numba
@pytest.mark.parametrize("p_missing", [0.0, 0.02, 0.5, 1.0])
def test_diploid_calls_with_missing_alleles(monkeypatch, rng, p_missing):
    calls = _diploid(rng, 40, 33, p_missing=p_missing, n_alleles=3)  # allele 2: alternate
    _check(calls, monkeypatch)


@needs_numba
def test_rows_switch_between_the_fast_and_the_full_decoding(monkeypatch, rng):
    # clean rows, rows with missing calls, rows with only padding: in every order
    calls = _diploid(rng, 60, 17, p_missing=0.0)
    pattern = rng.permutation(np.repeat([0, 1, 2, 3], 15))
    for row, kind in enumerate(pattern):
        if kind == 1:
            calls[row, rng.integers(0, 17), 1] = -1
        elif kind == 2:
            calls[row, :5, 1] = -2  # haploid calls
        elif kind == 3:
            calls[row, 3] = [-2, -2]  # only padding: missing
    _check(calls, monkeypatch)


@needs_numba
def test_haploid_and_padded_calls(monkeypatch, rng):
    calls = _diploid(rng, 30, 11, p_missing=0.05)
    calls[:, :4, 1] = -2
    calls[0, 5] = [-2, -2]
    calls[1, 6] = [-1, -2]
    calls[2, 7] = [2, -2]
    calls[3, 8] = [-2, 1]  # padding first
    calls[4, 9] = [-3, 0]  # any negative index other than -2 is missing
    _check(calls, monkeypatch)
    assert _rows(calls, monkeypatch, "numba").values.dtype == np.int8


@needs_numba
@pytest.mark.parametrize("ploidy", [1, 3, 4, 12])
def test_other_ploidies(monkeypatch, rng, ploidy):
    calls = rng.integers(0, 2, size=(25, 9, ploidy)).astype(np.int8)
    calls[rng.random((25, 9)) < 0.1, 0] = -1
    if ploidy == 12:
        calls[:, :3, 8:] = -2  # 8 of 12 alleles: 12/8 * alt is an integer when alt is even
        calls[:, :3, :8] = 1
    _check(calls, monkeypatch)


@needs_numba
def test_fractional_dosages_fall_back_to_float64(monkeypatch):
    calls = np.array([[[1, 1, -2], [1, 0, -2], [0, 1, 1], [1, -2, -2]],
                      [[0, 0, 0], [1, 1, 1], [0, -2, -2], [-1, 0, -2]]], dtype=np.int8)
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1")
    assert _decode.decode_calls(calls) is None
    rows = _rows(calls, monkeypatch, "numba", scaling="none")
    assert rows.values.dtype == np.float64
    _check(calls, monkeypatch)


@needs_numba
@pytest.mark.parametrize("dtype", [np.int16, np.int32])
def test_wider_allele_indices(monkeypatch, rng, dtype):
    calls = _diploid(rng, 20, 8, p_missing=0.1, n_alleles=300).astype(dtype)
    calls[:, :2, 1] = -2
    _check(calls, monkeypatch)


@needs_numba
def test_non_contiguous_and_empty_calls(monkeypatch, rng):
    calls = _diploid(rng, 20, 8, p_missing=0.1)[::2]
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1")
    assert _decode.decode_calls(calls) is None  # numpy path
    _check(calls, monkeypatch)
    for shape in [(0, 5, 2), (4, 0, 2)]:
        empty = np.zeros(shape, dtype=np.int8)
        _assert_same(_rows(empty, monkeypatch, "numba"), _rows(empty, monkeypatch, "numpy"))


@needs_numba
def test_a_store_reads_the_same_with_and_without_numba(monkeypatch, tmp_path, rng):
    zarr = pytest.importorskip("zarr")
    calls = _diploid(rng, 50, 12, p_missing=0.05)
    calls[:, :3, 1] = -2
    group = zarr.open_group(tmp_path / "g.vcz", mode="w")
    group.create_array("call_genotype", shape=calls.shape, chunks=(16, 12, 2),
                       dtype=np.int8)[:] = calls
    group.create_array("sample_id", shape=(12,), dtype=str)[:] = [f"s{i}" for i in range(12)]
    blocks = {}
    for implementation in ("numba", "numpy"):
        monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1" if implementation == "numba" else "0")
        matrix = open_matrix(tmp_path / "g.vcz")
        blocks[implementation] = [matrix.loader(p)() for p in range(matrix.n_partitions)]
    for a, b in zip(blocks["numba"], blocks["numpy"], strict=True):
        np.testing.assert_array_equal(a.values, b.values)
        for name in ("fill", "center", "scale"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
