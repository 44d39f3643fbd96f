"""Fused kernels (problems/_kernels.py) against float64 references, both implementations.

Every kernel of both implementations (numba and numpy) must agree with the same maths
written on the float64 tiles of :meth:`Block.tiles` to 1e-12, relative to the largest
entry of the reference, on float64, int8 and packed blocks with and without fill, centre
and scale, empty blocks and one-row blocks.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit

from daskstraggle import _numba
from daskstraggle.errors import InvalidDataError
from daskstraggle.problems import PCA, Block, LeastSquares, Logistic, block_stats
from daskstraggle.problems import _kernels as kernels
from daskstraggle.problems._packing import pack_dosages, packed_width, unpack_dosages

TOL = 1e-12
IMPLEMENTATIONS = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(not kernels.numba_available(),
                                                   reason="numba is not installed")),
]


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["fused", "blas"])
def genotype_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Genotype PCA passes through the fused loops, or BLAS on converted tiles for every
    number of components (numba; the numpy kernels ignore it)."""
    monkeypatch.setattr(kernels, "_PCA_GEMM_MIN_K_CONVERTED",
                        1 << 30 if request.param == "fused" else 1)
    return str(request.param)


def close(actual: np.ndarray | float, expected: np.ndarray | float) -> bool:
    """Whether ``actual`` is within 1e-12 of ``expected``, relative to its largest entry."""
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape
    scale = max(float(np.abs(e).max(initial=0.0)), 1e-300)
    return float(np.abs(a - e).max(initial=0.0)) <= TOL * scale


def dosages(n: int, m: int, rng: np.random.Generator, missing: float = 0.03) -> np.ndarray:
    values = rng.integers(0, 3, size=(n, m)).astype(np.int8)
    values[rng.random((n, m)) < missing] = -1
    return values


def make_block(kind: str, n: int, m: int, rng: np.random.Generator) -> Block:
    """A block of one of the kinds in KINDS, with labels in {-1, +1}."""
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    center, scale = rng.uniform(0.1, 1.9, n), rng.uniform(0.5, 3.0, n)
    fill = np.where(rng.random(n) < 0.5, rng.uniform(0.0, 2.0, n), 0.0)  # mean or zero
    if kind == "float64":
        return Block(rng.normal(size=(n, m)) + 3.0, y=y)
    if kind == "float64-transformed":
        return Block(rng.normal(size=(n, m)), y=y, center=center, scale=scale)
    if kind == "float64-strided":
        return Block(rng.normal(size=(n, 2 * m))[:, ::2], y=y, scale=scale)
    if kind == "int8-raw":
        return Block(rng.integers(0, 3, size=(n, m)).astype(np.int8), y=y)
    if kind == "int8-center":
        return Block(dosages(n, m, rng), y=y, fill=fill, center=center)
    if kind == "int8-scale":
        return Block(dosages(n, m, rng), y=y, fill=fill, scale=scale)
    if kind == "int8-patterson":
        return Block(dosages(n, m, rng), y=y, fill=fill, center=center, scale=scale)
    if kind == "packed-patterson":
        packed = pack_dosages(dosages(n, m, rng))
        return Block(packed, y=y, fill=fill, center=center, scale=scale, packed_columns=m)
    if kind == "packed-raw":
        packed = pack_dosages(rng.integers(0, 3, size=(n, m)))
        return Block(packed, y=y, packed_columns=m)
    raise AssertionError(kind)


KINDS = ["float64", "float64-transformed", "float64-strided", "int8-raw", "int8-center",
         "int8-scale", "int8-patterson", "packed-patterson", "packed-raw"]
SHAPES = [(0, 7), (1, 9), (5, 1), (23, 13), (130, 37)]


def dense(block: Block) -> np.ndarray:
    """The float64 matrix the problems see, from the reference tiles."""
    tiles = [tile for *_, tile in block.tiles()]
    return np.vstack(tiles) if tiles else np.zeros((0, block.n_features))


# ------------------------------------------------------------------------------ PCA
def assert_pca_pass(block: Block, X: np.ndarray, V: np.ndarray, shift: np.ndarray | None,
                    implementation: str) -> None:
    """``pca_pass`` of ``block`` against ``P = X V - shift``: ``X^T P``, ``1^T P``, ``|P_j|^2``."""
    G, colsum, sq = kernels.pca_pass(block, V, shift, implementation=implementation)
    P = X @ V - (0.0 if shift is None else shift)
    assert close(G, X.T @ P)
    assert close(colsum, P.sum(axis=0))
    assert close(sq, (P * P).sum(axis=0))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("k", [2, 3])
def test_pca_pass_matches_the_float64_reference(kind, shape, k, implementation, rng):
    block = make_block(kind, *shape, rng)
    X = dense(block)
    V = rng.normal(size=(shape[1], k))
    assert_pca_pass(block, X, V, rng.normal(size=k), implementation)


SUM_MIXES = [("packed-patterson",) * 3, ("int8-patterson", "int8-raw", "int8-center"),
             ("packed-raw", "int8-patterson"), ("float64", "float64-transformed"),
             ("packed-patterson", "float64", "int8-scale"), ("int8-patterson",)]


@pytest.mark.parametrize("kinds", SUM_MIXES, ids="+".join)
@pytest.mark.parametrize("k", [3, 20])
def test_pca_pass_sum_is_the_sum_of_the_blocks_passes(kinds, k, implementation, genotype_path,
                                                      rng, monkeypatch):
    """Blocks of one width summed in one buffer (the compiled path, the cache-blocked
    loops included), BLAS tiles block by block, mixed kinds one at a time: each equals the
    reference over the stacked rows, and an empty block adds nothing."""
    monkeypatch.setattr(kernels, "_PCA_TILE_MIN_BYTES", 0)  # the tiled loops for genotypes
    m = 37
    blocks = [make_block(kind, n, m, rng) for kind, n in zip(kinds, (41, 9, 130), strict=False)]
    blocks.insert(1, make_block(kinds[0], 0, m, rng))
    X = np.vstack([dense(b) for b in blocks])
    V, shift = rng.normal(size=(m, k)), rng.normal(size=k)
    G, colsum, sq = kernels.pca_pass_sum(blocks, V, shift, implementation=implementation)
    P = X @ V - shift
    assert close(G, X.T @ P)
    assert close(colsum, P.sum(axis=0))
    assert close(sq, (P * P).sum(axis=0))
    each = [kernels.pca_pass(b, V, shift, implementation=implementation) for b in blocks]
    assert close(G, sum(e[0] for e in each))
    empty = kernels.pca_pass_sum(blocks[1:2], V, shift, implementation=implementation)
    assert not any(part.any() for part in empty)


def test_pca_kernel_sum_of_many_partitions_copies_once(rng, monkeypatch):
    """The PCA kernel over a worker's partitions lays out ``V`` and copies ``G`` back
    once for all of them (one compiled call per block into one buffer), and equals the
    sum of the per-block kernels."""
    pytest.importorskip("numba")
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1")
    blocks = [make_block("packed-patterson", 20, 50, rng) for _ in range(6)]
    whole = Block(np.vstack([b.values for b in blocks]),
                  fill=np.concatenate([b.fill for b in blocks]),
                  center=np.concatenate([b.center for b in blocks]),
                  scale=np.concatenate([b.scale for b in blocks]), packed_columns=50)
    pca = PCA(n_components=3).bind(block_stats(whole))
    V = np.linalg.qr(rng.normal(size=(50, 3)))[0]
    buffers = []
    real = kernels._pca_buffers
    monkeypatch.setattr(kernels, "_pca_buffers", lambda *a: buffers.append(a) or real(*a))
    summed = pca.kernel_sum(blocks, V)
    assert len(buffers) == 1
    each = [pca.kernel(b, V) for b in blocks]
    assert close(summed.gradient, sum(e.gradient for e in each))
    assert close(summed.values, sum(e.values for e in each))
    assert summed.n_rows == 120
    assert close(summed.gradient, pca.kernel(whole, V).gradient)


@pytest.mark.parametrize("k", range(1, 26))
def test_pca_pass_every_width(k, implementation, genotype_path, rng):
    block = make_block("int8-patterson", 41, 30, rng)
    X = dense(block)
    V = rng.normal(size=(30, k))
    assert_pca_pass(block, X, V, None, implementation)


@pytest.mark.parametrize("fill", [False, True])
@pytest.mark.parametrize("m", [7, 8, 29, 64])
@pytest.mark.parametrize("k", [2, 3])
def test_int8_rows_outside_the_dosage_range(fill, m, k, implementation, rng):
    """Rows with values outside -1..2 (tetraploid dosages, -2) are converted value by
    value, the others eight values at a time; both next to each other in one block, and
    one value out of range in an otherwise valid four-row group (checked as one span)."""
    n = 23
    values = dosages(n, m, rng, missing=0.1)
    odd = rng.random(n) < 0.4
    values[odd] = rng.integers(-2, 5, size=(int(odd.sum()), m)).astype(np.int8)
    values[:8] = dosages(8, m, rng, missing=0.1)
    values[5, m - 1] = 3  # the last byte of a group's span
    values[0, 0] = -2  # the first
    block = Block(values, fill=rng.uniform(0, 2, n) if fill else None,
                  center=rng.uniform(0, 2, n), scale=rng.uniform(1, 2, n))
    X = dense(block)
    V = rng.normal(size=(m, k))
    assert_pca_pass(block, X, V, None, implementation)
    assert close(kernels.gram(block, None, implementation=implementation), X.T @ X)


@pytest.mark.parametrize("packed", [False, True], ids=["int8", "packed"])
@pytest.mark.parametrize("fill", [False, True])
@pytest.mark.parametrize("m", [16, 17, 23, 24, 31, 33])
@pytest.mark.parametrize("k", [1, 2, 4, 5, 6])
def test_genotype_rows_converted_inside_the_projection(packed, fill, m, k, implementation,
                                                       genotype_path, rng):
    """Genotype rows of widths of whole vectors and of one to seven calls past them, every
    column remainder of the register blocks (1, 2, 4, 5 and 6 columns), with and without
    a fill (without, a missing call is -1), and a partial last group (13 rows)."""
    n = 13
    values = dosages(n, m, rng, missing=0.1)
    transforms = {"fill": rng.uniform(0, 2, n) if fill else None,
                  "center": rng.uniform(0, 2, n), "scale": rng.uniform(1, 2, n)}
    block = (Block(pack_dosages(values), packed_columns=m, **transforms) if packed
             else Block(values, **transforms))
    assert_pca_pass(block, dense(block), rng.normal(size=(m, k)), rng.normal(size=k),
                    implementation)


@pytest.mark.skipif(not kernels.numba_available(), reason="numba is not installed")
@pytest.mark.parametrize("kind", ["int8-raw", "int8-center", "int8-patterson",
                                  "int8-wide-range", "packed-patterson", "packed-raw"])
@pytest.mark.parametrize(("n", "m", "k"), [(13, 45, 3), (70, 101, 6), (9, 64, 1),
                                           (41, 203, 9)])
def test_wide_genotype_rows_take_the_cache_blocked_loops(kind, n, m, k, rng, monkeypatch):
    """Genotype rows whose ``V`` and ``G`` outgrow the cache run in row chunks and column
    tiles (``pca_tiled``): several tiles, the last one partial, chunks of rows with a
    partial last chunk and group, and the same results as the plain loops (also for int8
    values outside the dosage range without a fill, taken as they are). The sizes are made
    small by lowering the thresholds (and BLAS tiles are kept off)."""
    monkeypatch.setattr(kernels, "_PCA_GEMM_MIN_K_CONVERTED", 1 << 30)
    monkeypatch.setattr(kernels, "_PCA_TILE_MIN_BYTES", 0)
    monkeypatch.setattr(kernels, "_PCA_TILE_BYTES", 8 * k * 16)  # 16 columns a tile
    monkeypatch.setattr(kernels, "_PCA_TILE_ROWS", 7)
    block = (Block(rng.integers(-3, 6, size=(n, m)).astype(np.int8)) if kind == "int8-wide-range"
             else make_block(kind, n, m, rng))
    assert kernels._pca_tile(block, k, kernels._pca_width(block)) == 16
    X, V, shift = dense(block), rng.normal(size=(m, k)), rng.normal(size=k)
    assert_pca_pass(block, X, V, shift, "numba")
    tiled = kernels.pca_pass(block, V, shift, implementation="numba")
    monkeypatch.setattr(kernels, "_PCA_TILE_MIN_BYTES", 1 << 62)
    assert kernels._pca_tile(block, k, kernels._pca_width(block)) == 0
    plain = kernels.pca_pass(block, V, shift, implementation="numba")
    for got, want in zip(tiled, plain, strict=True):
        assert close(got, want)


def test_cache_blocking_only_for_wide_genotype_rows(rng):
    """The plain loops keep narrow rows and float64 rows; genotype rows whose ``V`` and
    ``G`` exceed ``_PCA_TILE_MIN_BYTES`` take tiles of whole vectors."""
    k, narrow = 20, kernels._PCA_TILE_MIN_BYTES // (16 * 20)
    for kind in ("int8-patterson", "packed-patterson"):
        assert kernels._pca_tile(make_block(kind, 2, 8, rng), k, narrow) == 0
        tile = kernels._pca_tile(make_block(kind, 2, 8, rng), k, narrow + 8)
        assert tile > 0 and tile % kernels._PCA_ALIGN == 0
        assert 8 * k * tile <= kernels._PCA_TILE_BYTES
    assert kernels._pca_tile(make_block("float64-transformed", 2, 8, rng), k, 10**7) == 0


WIDE = kernels._PCA_GEMM_MIN_FEATURES


@pytest.mark.parametrize("kind", ["float64", "float64-transformed"])
@pytest.mark.parametrize(("d", "k"), [(WIDE - 1, 21), (WIDE, kernels._PCA_GEMM_MIN_K - 1),
                                      (WIDE, kernels._PCA_GEMM_MIN_K), (WIDE, 21)])
def test_float_pca_pass_on_blas_tiles(kind, d, k, implementation, rng):
    """float64 blocks without missing entries of at least ``_PCA_GEMM_MIN_FEATURES``
    columns take BLAS products on row tiles from ``_PCA_GEMM_MIN_K`` components on:
    several tiles, the last one partial."""
    step = kernels._PCA_GEMM_TILE_BYTES // (8 * d)
    block = make_block(kind, 2 * step + 5, d, rng)
    assert kernels._pca_uses_gemm(block, k) == (k >= kernels._PCA_GEMM_MIN_K and d >= WIDE)
    X = dense(block)
    V = rng.normal(size=(d, k))
    assert_pca_pass(block, X, V, rng.normal(size=k), implementation)


def test_which_pca_passes_take_blas_tiles(rng):
    """float64 rows read in place from ``_PCA_GEMM_MIN_K`` components and
    ``_PCA_GEMM_MIN_FEATURES`` columns on; converted rows (genotypes, float64 rows with
    missing entries) from ``_PCA_GEMM_MIN_K_CONVERTED`` components on, up to
    ``_PCA_GEMM_MAX_CONVERTED`` columns."""
    k, low = kernels._PCA_GEMM_MIN_K, kernels._PCA_GEMM_MIN_K_CONVERTED
    widest = kernels._PCA_GEMM_MAX_CONVERTED
    assert kernels._pca_uses_gemm(make_block("float64-transformed", 9, WIDE, rng), k)
    assert not kernels._pca_uses_gemm(make_block("float64-transformed", 9, WIDE, rng), k - 1)
    assert not kernels._pca_uses_gemm(make_block("float64-transformed", 9, WIDE - 1, rng), k)
    filled = Block(rng.normal(size=(9, 30)), fill=np.ones(9))
    assert kernels._pca_uses_gemm(filled, low)
    for kind in ("int8-patterson", "packed-patterson", "int8-raw"):
        assert kernels._pca_uses_gemm(make_block(kind, 3, widest, rng), low)
        assert not kernels._pca_uses_gemm(make_block(kind, 3, widest, rng), low - 1)
        assert not kernels._pca_uses_gemm(make_block(kind, 3, widest + 1, rng), low)


@pytest.mark.parametrize("kind", ["int8-raw", "int8-center", "int8-patterson", "int8-wide-range",
                                  "packed-patterson", "packed-raw", "float64-filled"])
@pytest.mark.parametrize(("n", "m", "k"), [(1, 9, 4), (29, 37, 5), (41, 64, 11), (17, 203, 21)])
def test_converted_pca_pass_on_blas_tiles(kind, n, m, k, rng, monkeypatch):
    """Genotype rows (and float64 rows with missing entries) converted a row tile at a time
    and multiplied by BLAS: several tiles with a partial last one (tiles of 8 rows), one
    row, int8 values outside the dosage range without a fill (taken as they are), packed
    rows whose last byte is partly padding; the reference of the float64 tiles to 1e-12,
    and the fused loops' results."""
    monkeypatch.setattr(kernels, "_PCA_GEMM_TILE_BYTES", 8 * 8 * m)
    if kind == "int8-wide-range":
        block = Block(rng.integers(-3, 6, size=(n, m)).astype(np.int8), center=rng.uniform(0, 2, n))
    elif kind == "float64-filled":
        values = rng.normal(size=(n, m)) + 3.0
        values[rng.random((n, m)) < 0.1] = -1.0
        block = Block(values, fill=rng.uniform(0, 2, n), scale=rng.uniform(1, 2, n))
    else:
        block = make_block(kind, n, m, rng)
    assert kernels._pca_uses_gemm(block, k) and kernels._pca_gemm_rows(block) == 8
    X, V, shift = dense(block), rng.normal(size=(m, k)), rng.normal(size=k)
    assert_pca_pass(block, X, V, shift, "numba")
    blas = kernels.pca_pass(block, V, shift, implementation="numba")
    monkeypatch.setattr(kernels, "_PCA_GEMM_MIN_K_CONVERTED", 1 << 30)
    fused = kernels.pca_pass(block, V, shift, implementation="numba")
    for got, want in zip(blas, fused, strict=True):
        assert close(got, want)


def test_genotype_pca_loops_pad_the_rows_to_whole_vectors(rng):
    """Genotype rows run through the fused PCA loops padded to eight columns; float64 rows
    (read in place) are not padded."""
    assert kernels._PCA_ALIGN == 8
    for m, width in ((1, 8), (8, 8), (13, 16), (300, 304)):
        assert kernels._pca_width(make_block("int8-patterson", 3, m, rng)) == width
        assert kernels._pca_width(make_block("packed-patterson", 3, m, rng)) == width
        assert kernels._pca_width(make_block("float64-transformed", 3, m, rng)) == m


@pytest.mark.parametrize("m", [5, 12, 13, 37, 300, 301])
@pytest.mark.parametrize("bits", [0b01, 0b11])
def test_packed_padding_bits_do_not_reach_the_result(m, bits, implementation, rng):
    """Codes in the unused bits of a packed row's last byte (decoded into the padded
    columns of the numba loops) must meet zero columns of V and dropped columns of G.
    m = 12 and 300 (an odd number of bytes) decode their last four codes with the
    previous four."""
    n = 19
    values = dosages(n, m, rng)
    packed = pack_dosages(values)
    used = m % 4  # codes in the last byte (0: it is full)
    packed[:, -1] |= np.uint8(sum(bits << (2 * i) for i in range(used, 4)) if used else 0)
    center, scale = rng.uniform(0.1, 1.9, n), rng.uniform(0.5, 3.0, n)
    block = Block(packed, fill=rng.uniform(0, 2, n), center=center, scale=scale,
                  packed_columns=m)
    reference = Block(values, fill=block.fill, center=center, scale=scale)
    X = dense(reference)
    V = rng.normal(size=(m, 3))
    assert_pca_pass(block, X, V, None, implementation)


@pytest.mark.parametrize("kind", ["float64", "int8-patterson", "packed-patterson"])
def test_pca_kernel_equals_the_centred_product(kind, implementation, rng, monkeypatch):
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1" if implementation == "numba" else "0")
    block = make_block(kind, 57, 11, rng)
    X = dense(block)
    pca = PCA(n_components=4).bind(block_stats(block))
    V = pca.init_iterate(rng)
    Xc = X - X.mean(axis=0)
    result = pca.kernel(block, V)
    assert close(result.gradient, Xc.T @ Xc @ V)
    assert close(result.values, ((Xc @ V) ** 2).sum(axis=0))


# ----------------------------------------------------------------------------- Gram
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("centred", [False, True])
def test_gram_matches_the_float64_reference(kind, shape, centred, implementation, rng):
    block = make_block(kind, *shape, rng)
    X = dense(block)
    mean = rng.normal(size=shape[1]) if centred else None
    out = kernels.gram(block, mean, implementation=implementation)
    shifted = X - mean if centred else X
    assert close(out, shifted.T @ shifted)
    np.testing.assert_array_equal(out, out.T)


@pytest.mark.parametrize("kind", ["float64", "int8-patterson", "packed-patterson"])
def test_gram_upper_triangle_is_the_full_matrix_triangle(kind, implementation, rng):
    block = make_block(kind, 130, 37, rng)
    mean = rng.normal(size=37)
    full = kernels.gram(block, mean, implementation=implementation)
    upper = kernels.gram(block, mean, upper=True, implementation=implementation)
    np.testing.assert_array_equal(upper, np.triu(full))
    np.testing.assert_array_equal(kernels.symmetric_from_upper(upper), full)
    # sums and coded combinations of upper triangles stay upper triangles
    combined = kernels.symmetric_from_upper(0.5 * upper + 2.0 * upper)
    assert close(combined, 2.5 * full)


@pytest.mark.parametrize("kinds", SUM_MIXES, ids="+".join)
@pytest.mark.parametrize("upper", [False, True])
def test_gram_sum_is_the_sum_of_the_blocks_grams(kinds, upper, implementation, rng):
    m = 29
    blocks = [make_block(kind, n, m, rng) for kind, n in zip(kinds, (41, 9, 130), strict=False)]
    mean = rng.normal(size=m)
    out = kernels.gram_sum(blocks, mean, upper=upper, implementation=implementation)
    shifted = np.vstack([dense(b) for b in blocks]) - mean
    expected = shifted.T @ shifted
    assert close(out, np.triu(expected) if upper else expected)


def test_syrk_update_adds_the_upper_triangle_with_or_without_ctypes(rng):
    from daskstraggle.problems._blas import syrk_update

    tile, start = rng.normal(size=(50, 8)), np.triu(rng.normal(size=(8, 8)))
    expected = start + np.triu(tile.T @ tile)
    acc = np.asfortranarray(start)
    assert syrk_update(tile, acc) is acc  # in place, through scipy's cython_blas
    assert close(np.triu(acc), expected)
    strided = rng.normal(size=(50, 16))[:, ::2]  # not contiguous: copied first
    assert close(np.triu(syrk_update(strided, np.asfortranarray(start))),
                 start + np.triu(strided.T @ strided))
    c_ordered = syrk_update(tile, np.ascontiguousarray(start))  # f2py fallback
    assert close(np.triu(c_ordered), expected)
    assert syrk_update(tile[:0], acc) is acc


def test_gram_kernel_of_pca_uses_the_global_means(implementation, rng, monkeypatch):
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1" if implementation == "numba" else "0")
    block = make_block("int8-patterson", 300, 17, rng)
    X = dense(block)
    pca = PCA(n_components=2).bind(block_stats(block))
    Xc = X - X.mean(axis=0)
    assert close(pca.gram_kernel(block.slice(10, 200)), Xc[10:200].T @ Xc[10:200])


# -------------------------------------------------------------------------- moments
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [*SHAPES[1:], (1000, 3)], ids=str)
def test_column_moments_match_the_float64_reference(kind, shape, rng):
    block = make_block(kind, *shape, rng)
    X = dense(block)
    moments = kernels.column_moments(block, implementation="numba"
                                     if kernels.numba_available() else "numpy")
    if moments is None:  # the numba kernels do not apply (numba absent, strided rows)
        assert not kernels.numba_available() or kind == "float64-strided"
        return
    sums, sq_dev, sq = moments
    assert close(sums, X.sum(axis=0))
    assert close(sq_dev, ((X - X.mean(axis=0)) ** 2).sum(axis=0))
    assert close(sq, float((X * X).sum()))


def test_column_moments_use_the_numpy_tiles_without_numba(rng):
    block = make_block("int8-patterson", 50, 6, rng)
    assert kernels.column_moments(block, implementation="numpy") is None
    assert kernels.column_moments(block.slice(0, 0)) is None


def test_block_stats_agree_between_implementations_with_many_tiles(rng, monkeypatch):
    """Means that dwarf the spread, over many tiles: the pairwise merge keeps the
    squared deviations accurate in both implementations."""
    n, m = 5000, 40
    block = Block(rng.normal(size=(n, m)) * 1e-3 + 1e4)
    stats = {}
    for implementation in ("numba", "numpy") if kernels.numba_available() else ("numpy",):
        monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1" if implementation == "numba" else "0")
        stats[implementation] = block_stats(block)
    X = block.values
    exact = ((X - X.mean(axis=0)) ** 2).sum(axis=0)
    for got in stats.values():
        np.testing.assert_allclose(got.column_sq_dev, exact, rtol=1e-9)
        np.testing.assert_allclose(got.column_sums, X.sum(axis=0), rtol=1e-14)


# ------------------------------------------------------------------------ regressions
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("logistic", [False, True], ids=["least-squares", "logistic"])
def test_glm_pass_matches_the_float64_reference(kind, shape, logistic, implementation, rng):
    block = make_block(kind, *shape, rng)
    X = dense(block)
    y = block.y
    w, b = 0.3 * rng.normal(size=shape[1]), 0.7
    grad, total, loss = kernels.glm_pass(block, w, b, logistic=logistic,
                                         implementation=implementation)
    z = X @ w + b
    if logistic:
        q = -y * expit(-y * z)
        expected_loss = np.logaddexp(0.0, -y * z).sum()
    else:
        q = z - y
        expected_loss = q @ q
    assert close(grad, X.T @ q)
    assert close(total, q.sum())
    assert close(loss, expected_loss)


@pytest.mark.parametrize("problem", [LeastSquares(), Logistic(alpha=0.1)], ids=["ls", "logistic"])
def test_regression_kernels_use_the_fused_pass(problem, implementation, rng, monkeypatch):
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1" if implementation == "numba" else "0")
    block = make_block("int8-patterson", 60, 8, rng)
    bound = problem.bind(block_stats(block))
    x = 0.2 * rng.normal(size=bound.n_params)
    X1 = np.hstack([dense(block), np.ones((60, 1))])
    z = X1 @ x
    y = block.y
    if isinstance(problem, Logistic):
        q = -y * expit(-y * z)
        loss = np.logaddexp(0.0, -y * z).sum() / 60
    else:
        q = z - y
        loss = (q @ q) / 120
    result = bound.kernel(block, x)
    assert close(result.gradient, X1.T @ q / 60)
    assert close(result.values[0], loss)


# --------------------------------------------------------------------- packed storage
def test_packing_round_trips_and_is_four_times_smaller(rng):
    values = dosages(33, 21, rng)
    packed = pack_dosages(values)
    assert packed.dtype == np.uint8 and packed.shape == (33, packed_width(21)) == (33, 6)
    np.testing.assert_array_equal(unpack_dosages(packed, 21), values)
    big = dosages(16, 4000, rng)
    assert pack_dosages(big).nbytes * 4 == big.nbytes


def test_packed_block_tiles_equal_the_int8_tiles(rng):
    values = dosages(29, 10, rng)
    fill, center, scale = rng.uniform(0, 2, 29), rng.uniform(0, 2, 29), rng.uniform(1, 2, 29)
    int8 = Block(values, fill=fill, center=center, scale=scale)
    packed = Block(pack_dosages(values), fill=fill, center=center, scale=scale,
                   packed_columns=10)
    assert (packed.n_rows, packed.n_features, packed.nbytes) == (29, 10, 29 * 3)
    np.testing.assert_array_equal(dense(packed), dense(int8))
    np.testing.assert_array_equal(dense(packed.slice(3, 17)), dense(int8)[3:17])


@pytest.mark.parametrize("k", [1, 2, 5, 10, 20])
def test_packed_kernels_agree_with_int8(k, implementation, rng):
    values = dosages(97, 43, rng)
    transforms = {"fill": rng.uniform(0, 2, 97), "center": rng.uniform(0, 2, 97),
                  "scale": rng.uniform(1, 2, 97), "y": np.sign(rng.normal(size=97))}
    int8 = Block(values, **transforms)
    packed = Block(pack_dosages(values), packed_columns=43, **transforms)
    V = rng.normal(size=(43, k))
    for a, b in zip(kernels.pca_pass(packed, V, None, implementation=implementation),
                    kernels.pca_pass(int8, V, None, implementation=implementation),
                    strict=True):
        assert close(a, b)
    assert close(kernels.gram(packed, V[:, 0], implementation=implementation),
                 kernels.gram(int8, V[:, 0], implementation=implementation))
    for a, b in zip(kernels.glm_pass(packed, V[:, 0], 0.5, logistic=True,
                                     implementation=implementation),
                    kernels.glm_pass(int8, V[:, 0], 0.5, logistic=True,
                                     implementation=implementation), strict=True):
        assert close(a, b)


@pytest.mark.parametrize("bad", [np.array([[0, 3]]), np.array([[0.5, 1.0]])], ids=["3", "float"])
def test_packing_refuses_what_two_bits_cannot_hold(bad):
    with pytest.raises(InvalidDataError, match=re.escape("genotype_storage='int8'")):
        pack_dosages(bad)


def test_packed_block_checks_its_width():
    with pytest.raises(ValueError, match="width 2"):
        Block(np.zeros((3, 3), dtype=np.uint8), packed_columns=5)


# ------------------------------------------------------------------ implementation choice
def test_environment_variable_selects_numpy(monkeypatch):
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "0")
    assert kernels.default_implementation() == "numpy"
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "1")
    expected = "numba" if kernels.numba_available() else "numpy"
    assert kernels.default_implementation() == expected


def test_unknown_implementation_is_refused(rng):
    with pytest.raises(ValueError, match="unknown kernel implementation"):
        kernels.pca_pass(Block(np.ones((2, 2))), np.ones((2, 1)), None, implementation="c")


@pytest.mark.parametrize("kind", ["float64", "int8-patterson", "packed-patterson"])
def test_logistic_pass_does_not_overflow_on_huge_margins(kind, implementation, rng):
    block = make_block(kind, 40, 6, rng)
    X, y = dense(block), block.y
    w = 1e4 * rng.normal(size=6)
    grad, total, loss = kernels.glm_pass(block, w, 0.0, logistic=True,
                                         implementation=implementation)
    q = -y * expit(-y * (X @ w))
    assert np.isfinite(loss) and close(loss, np.logaddexp(0.0, -y * (X @ w)).sum())
    assert close(grad, X.T @ q) and close(total, q.sum())


def test_numpy_is_the_default_without_numba(monkeypatch, rng):
    monkeypatch.setattr(_numba, "_numba_missing", True)
    monkeypatch.delenv(kernels.NUMBA_VARIABLE, raising=False)
    assert kernels.default_implementation() == "numpy"
    with pytest.raises(ImportError, match="pip install numba"):
        kernels.pca_pass(Block(np.ones((2, 2))), np.ones((2, 1)), None, implementation="numba")
    block = make_block("int8-patterson", 9, 5, rng)
    pca = PCA(n_components=2).bind(block_stats(block))
    assert pca.kernel(block, pca.init_iterate(rng)).gradient.shape == (5, 2)


@pytest.mark.skipif(not kernels.numba_available(), reason="numba is not installed")
def test_unwritable_package_moves_the_numba_cache_to_tmp(monkeypatch, tmp_path):
    import importlib
    import sys
    import tempfile

    import numba

    real = importlib.import_module
    calls = []

    def import_module(name, *args, **kwargs):
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("cannot cache function 'pca': no locator available")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(numba.config, "CACHE_DIR", numba.config.CACHE_DIR)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(importlib, "import_module", import_module)
    # the module imported here (its cache in tmp_path) must not outlive the test
    monkeypatch.delitem(sys.modules, "daskstraggle.problems._numba_kernels", raising=False)
    module = _numba._import_numba("daskstraggle.problems._numba_kernels")
    assert calls == [module.__name__] * 2
    assert numba.config.CACHE_DIR.startswith(str(tmp_path))


def test_read_only_float_blocks_fall_back_to_numpy(rng):
    X = rng.normal(size=(10, 3))
    X.setflags(write=False)
    block = Block(X)
    G, *_ = kernels.pca_pass(block, np.eye(3), None)
    assert close(G, X.T @ X)


_GENERIC_CHECK = """
import numpy as np
from daskstraggle.problems import Block
from daskstraggle.problems import _kernels as kernels
from daskstraggle.problems._packing import pack_dosages

rng = np.random.default_rng(3)
values = rng.integers(-1, 3, size=(45, 37)).astype(np.int8)
transforms = {"fill": rng.uniform(0, 2, 45), "center": rng.uniform(0, 2, 45),
              "scale": rng.uniform(1, 2, 45)}
V = rng.normal(size=(37, 3))
for block in (Block(values, **transforms),
              Block(pack_dosages(values), packed_columns=37, **transforms)):
    X = np.vstack([tile for *_, tile in block.tiles()])
    G, colsum, sq = kernels.pca_pass(block, V, None, implementation="numba")
    for got, want in ((G, X.T @ (X @ V)), (sq, ((X @ V) ** 2).sum(axis=0)),
                      (kernels.gram(block, None, implementation="numba"), X.T @ X)):
        assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()
print("ok")
"""


_ROOT = Path(kernels.__file__).resolve().parents[2]


@pytest.mark.skipif(not kernels.numba_available(), reason="numba is not installed")
@pytest.mark.background(
    argv=[sys.executable, "-c", _GENERIC_CHECK], timeout=600,
    env={"NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": "{tmp}", kernels.NUMBA_VARIABLE: None,
         "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])})
def test_kernels_compiled_for_a_generic_cpu_agree(background_result):
    """The kernels hold no CPU-specific code: compiled by numba for a generic CPU (no SIMD
    extensions assumed) they give the same int8 and packed results (a subprocess with its
    own empty numba cache, run beside the other tests: tests/_background.py)."""
    proc = background_result
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"


def test_modules_of_numba_functions_are_imported_only_through_import_numba_module():
    """Every ``_numba_*`` module is imported through ``import_numba_module`` (which moves
    numba's cache to the temporary directory when the package's cannot be written), never
    by an import statement outside the ``_numba_*`` modules themselves."""
    from pathlib import Path

    package = Path(kernels.__file__).resolve().parents[1]
    pattern = re.compile(r"^\s*(from|import)\s+daskstraggle\.[\w.]*\b_numba_\w+", re.M)
    offenders = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
                 if not path.name.startswith("_numba_")
                 and pattern.search(path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_package_holds_no_hand_written_llvm_ir():
    """The kernels are plain numba: no module of the package imports ``llvmlite.ir`` (or
    builds LLVM IR through ``llvmlite`` at all)."""
    from pathlib import Path

    package = Path(kernels.__file__).resolve().parents[1]
    offenders = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
                 if re.search(r"\bllvmlite\b", path.read_text(encoding="utf-8"))]
    assert offenders == []
    assert not (package / "problems" / "_numba_ir.py").exists()


def test_the_compile_cache_key_tells_apart_what_numba_types_tell_apart():
    """Two arguments with one ``_argument_key`` have one numba type (it may split more)."""
    numba = pytest.importorskip("numba")
    from daskstraggle.problems._kernels import _argument_key

    base = np.zeros((6, 4))
    readonly = base.copy()
    readonly.flags.writeable = False
    raw = np.zeros(6 * 4 * 8 + 1, dtype=np.uint8)[1:].view(np.float64).reshape(6, 4)
    args = [base, base.T, base[:, ::2], readonly, raw, base.astype(np.float32),
            base.astype(np.int8), base[0], np.zeros((2, 2, 2)), 3, 3.0, True,
            np.float64(3.0), np.int64(3)]
    assert not raw.flags.aligned
    for a in args:
        for b in args:
            if _argument_key(a) == _argument_key(b):
                assert numba.typeof(a) == numba.typeof(b), (a, b)
    assert len({_argument_key(a) for a in args}) == len(args)  # no two alike here
    # and one key for arguments of one type: a kernel compiles once per signature
    assert _argument_key(np.ones((9, 2))) == _argument_key(base)
    assert _argument_key(7) == _argument_key(3)


@pytest.mark.parametrize("d", [1, 2, 3, 4, 7, 10])
@pytest.mark.parametrize("order", ["C", "F"])
def test_symmetric_from_upper_mirrors_in_row_slices(d, order, monkeypatch):
    """The lower triangle is filled a few rows at a time (slices of 3 rows here, so slice
    edges fall inside and at the end of the matrix); the input is left as it was."""
    monkeypatch.setattr(kernels, "_MIRROR_ROWS", 3)
    a = np.asarray(np.random.default_rng(d).normal(size=(d, d)), order=order)
    before = a.copy()
    full = np.triu(a) + np.triu(a, 1).T
    out = kernels.symmetric_from_upper(a)
    np.testing.assert_array_equal(out, full)
    assert out.flags.c_contiguous and not np.shares_memory(out, a)
    np.testing.assert_array_equal(a, before)
    np.testing.assert_array_equal(kernels.unpack_upper(kernels.pack_upper(a), d), full)


@pytest.mark.parametrize(("d", "k"), [(1, 1), (7, 3), (40, 5)])
def test_packed_product_is_the_symmetric_matrix_times_v(d, k):
    rng = np.random.default_rng(d)
    a = rng.normal(size=(d, d))
    full = np.triu(a) + np.triu(a, 1).T
    V = rng.normal(size=(d, k))
    assert close(kernels.packed_product(kernels.pack_upper(a), V), full @ V)
    with pytest.raises(ValueError, match="numbers"):
        kernels.packed_product(kernels.pack_upper(a)[:-1], V)


def test_a_packed_upper_triangle_unpacks_to_the_symmetric_matrix():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(7, 7))
    full = np.triu(a) + np.triu(a, 1).T
    packed = kernels.pack_upper(a)
    assert packed.shape == (7 * 8 // 2,)
    np.testing.assert_array_equal(kernels.unpack_upper(packed, 7), full)
    # sums of packed triangles are the packed triangles of the sums
    np.testing.assert_array_equal(kernels.unpack_upper(2.0 * packed + packed, 7), 3.0 * full)
    with pytest.raises(ValueError, match="28 numbers"):
        kernels.unpack_upper(packed[:-1], 7)
    assert kernels.pack_upper(np.zeros((0, 0))).shape == (0,)
