r"""Fused block kernels: products of a block with a thin matrix, without a float tile.

A block stores raw values ``T`` (float64, int8 dosages with -1 for a missing call, or
packed 2-bit codes) and per-row transforms: fill ``f`` for missing entries, centre ``c``
and scale ``s``. The problems see ``X = diag(s) (T' - c 1^T)``, ``T'`` being ``T`` with
its missing entries filled; centre and scale act on the thin products:
``X V = s * (T' V - c (1^T V))`` and ``X^T Q = T'^T (s Q) - 1 (c^T (s Q))``.

Two implementations give the same sums to rounding (``docs/kernels.md``): ``"numba"``
(:mod:`._numba_kernels`, compiled lazily, cached on disk) and ``"numpy"`` (tile by tile).
The default is numba when it can be imported, unless ``DASKSTRAGGLE_NUMBA`` is ``0``.
"""
from __future__ import annotations

import functools
import itertools
import math
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from daskstraggle._numba import (
    NUMBA_VARIABLE,
    default_implementation,
    import_numba_module,
    numba_available,
)
from daskstraggle.problems._blas import syrk_update

if TYPE_CHECKING:  # block.py imports this module (block_stats)
    from daskstraggle.problems.block import Block

__all__ = ["IMPLEMENTATIONS", "NUMBA_VARIABLE", "column_moments", "default_implementation",
           "glm_pass", "gram", "gram_sum", "import_numba_module", "numba_available",
           "pack_upper", "packed_product", "pca_pass", "pca_pass_sum", "symmetric_from_upper",
           "unpack_upper"]

#: The implementations, fastest first.
IMPLEMENTATIONS = ("numba", "numpy")
#: Stored dtypes the numba kernels take (others use the numpy kernels).
_NUMBA_DTYPES = (np.dtype(np.int8), np.dtype(np.float64))
#: Bytes of a converted Gram tile (rows of ``d`` float64 values): large enough that
#: ``syrk`` runs near peak, small enough to stay in L2 cache.
_GRAM_TILE_BYTES = 1 << 21
_GRAM_MIN_ROWS = 1024
_GRAM_MAX_TILE_BYTES = 1 << 26
#: PCA uses BLAS products on row tiles (``pca_gemm``) for float64 blocks without missing
#: entries from ``_PCA_GEMM_MIN_K`` components and ``_PCA_GEMM_MIN_FEATURES`` columns on,
#: and for converted rows (genotypes, float64 with missing entries) of at most
#: ``_PCA_GEMM_MAX_CONVERTED`` columns from ``_PCA_GEMM_MIN_K_CONVERTED`` components on;
#: else the fused loops (``docs/kernels.md``).
_PCA_GEMM_MIN_K = 8
_PCA_GEMM_MIN_FEATURES = 400
_PCA_GEMM_MIN_K_CONVERTED = 4
_PCA_GEMM_MAX_CONVERTED = 1024
#: Genotype rows of the fused PCA loops are padded to a multiple of this many columns.
_PCA_ALIGN = 8
#: Bytes of a row tile of the BLAS PCA path (stays in L2 between the two products).
_PCA_GEMM_TILE_BYTES = 1 << 18
#: Genotype (int8, packed) PCA passes whose ``V`` and ``G`` together exceed this many bytes
#: (wide rows: many samples) use the cache-blocked loops (``pca_tiled``): ``_PCA_TILE_ROWS``
#: rows at a time, ``V`` and ``G`` in column tiles of ``_PCA_TILE_BYTES`` each.
_PCA_TILE_MIN_BYTES = 12 << 20
_PCA_TILE_BYTES = 1 << 17
_PCA_TILE_ROWS = 512

_lock = threading.Lock()
_NUMBA_KERNELS = "daskstraggle.problems._numba_kernels"
_compiled: set[tuple[Any, ...]] = set()


def _resolve(implementation: str | None) -> str:
    name = default_implementation() if implementation is None else implementation
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown kernel implementation {name!r}; use one of {IMPLEMENTATIONS}")
    if name == "numba" and not numba_available():
        raise ImportError("the numba kernels need numba (pip install numba)")
    return name


def _argument_key(value: Any) -> Any:
    """What numba's type of an argument depends on, read without typing it: an array's
    dtype, dimensions, layout, writeable and aligned flags; else its Python type."""
    if isinstance(value, np.ndarray):
        flags = value.flags
        layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
        return (value.dtype.str, value.ndim, layout, flags.writeable, flags.aligned)
    return type(value)


@functools.cache
def _numba_fingerprint() -> Callable[[Any], bytes] | None:
    """numba's dispatch fingerprint function (C), or None in a numba without it."""
    try:
        from numba._dispatcher import compute_fingerprint
    except ImportError:  # a private function: fall back to _argument_key
        return None
    return compute_fingerprint  # type: ignore[no-any-return]


def _compile_key(name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a compiled version of kernel ``name`` for ``args`` depends on: numba's own
    dispatch fingerprint for arrays of native byte order, else :func:`_argument_key`."""
    fingerprint = _numba_fingerprint()
    if fingerprint is not None:
        try:
            return (name, *[fingerprint(a) if type(a) is np.ndarray and a.dtype.isnative
                            else _argument_key(a) for a in args])
        except (TypeError, ValueError, NotImplementedError):  # a dtype numba cannot take
            pass
    return (name, *map(_argument_key, args))


def _call_numba(name: str, *args: Any) -> Any:
    """Call a numba kernel and return what it returns; the first call per signature
    compiles it (or loads it from numba's disk cache), warnings silenced."""
    kernel = getattr(import_numba_module(_NUMBA_KERNELS), name)
    key = _compile_key(name, args)
    if key not in _compiled:
        import numba

        with _lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kernel.compile(tuple(numba.typeof(a) for a in args))
            _compiled.add(key)
    return kernel(*args)


def _call_block(name: str, block: Block, *args: Any) -> Any:
    """:func:`_call_numba` on ``block``'s values, transforms and flags, then ``args``."""
    return _call_numba(name, block.values, *_transforms(block), *args)


def _use_numba(block: Block, implementation: str | None) -> bool:
    values = block.values
    if _resolve(implementation) != "numba" or not values.flags.c_contiguous:
        return False
    if block.packed_columns is not None:
        return True
    # float64 rows are used in place, typed like the (writeable) conversion buffer
    dtype = values.dtype
    return dtype in _NUMBA_DTYPES and (dtype != np.float64 or bool(values.flags.writeable))


def _pca_uses_gemm(block: Block, k: int) -> bool:
    """Whether the numba PCA pass of ``block`` with ``k`` components uses BLAS on row
    tiles (see the ``_PCA_GEMM_*`` thresholds)."""
    if block.values.dtype == np.float64 and block.fill is None:
        return k >= _PCA_GEMM_MIN_K and block.n_features >= _PCA_GEMM_MIN_FEATURES
    return k >= _PCA_GEMM_MIN_K_CONVERTED and block.n_features <= _PCA_GEMM_MAX_CONVERTED


def _pca_gemm_rows(block: Block) -> int:
    """Rows per tile of the BLAS PCA pass: about ``_PCA_GEMM_TILE_BYTES`` of float64 rows,
    at least 8."""
    return max(8, _PCA_GEMM_TILE_BYTES // (8 * max(block.n_features, 1)))


def _pca_tile(block: Block, k: int, width: int) -> int:
    """Columns per tile of the cache-blocked PCA loops for genotype rows whose ``V`` and
    ``G`` exceed :data:`_PCA_TILE_MIN_BYTES` together, else 0 (the plain loops)."""
    if block.values.dtype == np.float64 or 16 * k * width <= _PCA_TILE_MIN_BYTES:
        return 0
    columns = _PCA_TILE_BYTES // (8 * k)
    return max(_PCA_ALIGN, columns - columns % _PCA_ALIGN)


def _pca_width(block: Block) -> int:
    """Columns of the fused PCA loops: genotype rows padded to a multiple of
    :data:`_PCA_ALIGN`; float64 rows unpadded."""
    m = block.n_features
    return m if block.values.dtype == np.float64 else -(-m // _PCA_ALIGN) * _PCA_ALIGN


def _aligned_zeros(shape: tuple[int, ...], count: int = 1) -> list[np.ndarray]:
    """``count`` zeroed float64 arrays of ``shape``, each starting on a 64-byte boundary
    (no vector load straddles two cache lines), cut from one allocation."""
    size = math.prod(shape)
    span = -(-size // _PCA_ALIGN) * _PCA_ALIGN  # a multiple of 64 bytes
    raw = np.zeros(span * count + _PCA_ALIGN)
    start = (-raw.__array_interface__["data"][0] % 64) // raw.itemsize
    return [raw[start + j * span : start + j * span + size].reshape(shape)
            for j in range(count)]


#: Values up to which each thread keeps the PCA kernel's ``V`` and ``G`` buffers for
#: the next call (256 KB each; larger ones are allocated per call).
_SCRATCH_VALUES = 1 << 15
_scratch = threading.local()


def _pca_buffers(k: int, width: int) -> list[np.ndarray]:
    """Zeroed, aligned ``VT`` and ``GT`` of shape (k, width) for one PCA kernel call: this
    thread's from its last call with this shape when small, else new."""
    if k * width > _SCRATCH_VALUES:
        return _aligned_zeros((k, width), 2)
    kept = _scratch.__dict__.setdefault("pca", {})
    pair = kept.get((k, width))
    if pair is None:
        if len(kept) >= 8:  # a few shapes per thread
            kept.clear()
        pair = kept[k, width] = _aligned_zeros((k, width), 2)
    else:
        pair[0].fill(0.0)  # (the columns past the features are read: they must be 0)
        pair[1].fill(0.0)
    return pair


#: Absent transforms, and the flags saying which exist (read only by the kernels; shared).
_NO_TRANSFORM = np.zeros(0)
_TRANSFORM_FLAGS = {key: np.array(key) for key in itertools.product((False, True), repeat=3)}


def _transforms(block: Block) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``fill, center, scale`` (empty when absent) and the flags saying which exist."""
    fill, center, scale = block.fill, block.center, block.scale

    def vector(values: np.ndarray | None) -> np.ndarray:
        return _NO_TRANSFORM if values is None else \
            np.ascontiguousarray(values, dtype=np.float64)

    flags = _TRANSFORM_FLAGS[fill is not None, center is not None, scale is not None]
    return vector(fill), vector(center), vector(scale), flags


# ----------------------------------------------------------------------------- PCA
def pca_pass(block: Block, V: np.ndarray, shift: np.ndarray | None, *,
             implementation: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return :func:`pca_pass_sum` of one block."""
    return pca_pass_sum((block,), V, shift, implementation=implementation)


def pca_pass_sum(blocks: Sequence[Block], V: np.ndarray, shift: np.ndarray | None, *,
                 implementation: str | None = None,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``G = X^T P`` (n_features, k), ``1^T P`` and the squared column norms of
    ``P`` (k,), ``P = X V - 1 shift^T`` (``shift`` None: 0), summed over ``blocks`` (row
    sets ``X`` of one matrix, all of ``V``'s columns).

    The compiled kernels add every block's products into one buffer of ``G^T``, laid out
    once for all the blocks; the sums equal the blocks' :func:`pca_pass` to rounding.
    ``implementation`` None: :func:`default_implementation`.
    """
    V = np.asarray(V, dtype=np.float64)
    m, k = V.shape
    offset = np.ascontiguousarray(np.zeros(k) if shift is None else shift, dtype=np.float64)
    blocks = [block for block in blocks if block.n_rows]
    if not blocks:
        return np.zeros((m, k)), np.zeros(k), np.zeros(k)
    fused = [b for b in blocks if _use_numba(b, implementation) and not _pca_uses_gemm(b, k)]
    widths = {_pca_width(b) for b in fused}
    if len(fused) == len(blocks) and len(widths) == 1:
        return _pca_fused(fused, V, offset, widths.pop())
    totals = _pca_pass_one(blocks[0], V, offset, implementation)
    for block in blocks[1:]:  # BLAS tiles, numpy, or mixed widths: one block at a time
        for total, part in zip(totals, _pca_pass_one(block, V, offset, implementation),
                               strict=True):
            total += part
    return totals


def _pca_fused(blocks: Sequence[Block], V: np.ndarray, offset: np.ndarray,
               width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`pca_pass_sum` of blocks the compiled loops take, all ``width`` wide once
    converted: every block's products added into one buffer of ``G^T``."""
    m, k = V.shape
    colsum, sq = np.zeros(k), np.zeros(k)
    VT, GT = _pca_buffers(k, width)
    VT[:, :m] = V.T
    for block in blocks:
        tile = _pca_tile(block, k, width)
        if tile:
            _call_block("pca_tiled", block, VT, offset, GT, colsum, sq, tile, _PCA_TILE_ROWS)
        else:
            _call_block("pca", block, VT, offset, GT, colsum, sq)
    return GT[:, :m].T.copy(), colsum, sq  # (a copy: GT may be kept for the next call)


def _pca_pass_one(block: Block, V: np.ndarray, offset: np.ndarray,
                  implementation: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`pca_pass` of one non-empty block, ``offset`` the shift (zeros for none)."""
    m, k = V.shape
    if _use_numba(block, implementation) and not _pca_uses_gemm(block, k):
        return _pca_fused((block,), V, offset, _pca_width(block))
    colsum, sq = np.zeros(k), np.zeros(k)
    if _use_numba(block, implementation):  # BLAS on tiles
        G = np.zeros((m, k))
        _call_block("pca_gemm", block, np.ascontiguousarray(V), offset, _pca_gemm_rows(block),
                    G, colsum, sq)
        return G, colsum, sq

    def weights(a: int, b: int, P: np.ndarray) -> np.ndarray:
        P -= offset
        colsum[:] += P.sum(axis=0)
        sq[:] += np.einsum("ij,ij->j", P, P)
        return P

    return _numpy_pass(block, V, weights), colsum, sq


# ----------------------------------------------------------------------------- GLM
def glm_pass(block: Block, w: np.ndarray, b: float, *, logistic: bool,
             implementation: str | None = None) -> tuple[np.ndarray, float, float]:
    """Return ``X^T q``, ``sum(q)`` and the summed loss of a regression over a block.

    With ``z = X w + b`` and labels ``y``: least squares has ``q = z - y`` and loss
    ``sum(q^2)``; logistic regression has ``q = -y expit(-y z)`` and loss
    ``sum(log(1 + exp(-y z)))``, with ``logistic``. Nothing is divided by the number of
    rows. ``implementation`` as :func:`pca_pass_sum`.
    """
    w = np.ascontiguousarray(w, dtype=np.float64)
    assert block.y is not None  # the problems check labels first
    y = np.ascontiguousarray(block.y, dtype=np.float64)
    if block.n_rows == 0:
        return np.zeros(w.shape[0]), 0.0, 0.0
    if _use_numba(block, implementation):
        grad, aligned_w = _aligned_zeros((w.shape[0],), 2)
        aligned_w[:] = w
        out = np.zeros(2)
        _call_block("glm", block, aligned_w, float(b), y, bool(logistic), grad, out)
        return grad, float(out[0]), float(out[1])
    sums = np.zeros(2)

    def weights(lo: int, hi: int, Z: np.ndarray) -> np.ndarray:
        z = Z[:, 0] + b
        label = y[lo:hi]
        if logistic:
            from scipy.special import expit

            margin = label * z
            sums[1] += float(np.logaddexp(0.0, -margin).sum())
            q = -label * expit(-margin)
        else:
            q = z - label
            sums[1] += float(q @ q)
        sums[0] += float(q.sum())
        return q[:, None]

    grad = _numpy_pass(block, w[:, None], weights)[:, 0]
    return grad, float(sums[0]), float(sums[1])


# ------------------------------------------------------------------------ numpy pass
def _numpy_pass(block: Block, W: np.ndarray,
                weights: Callable[[int, int, np.ndarray], np.ndarray]) -> np.ndarray:
    """Return ``X^T weights(X W)`` tile by tile, transforms applied to the thin products.

    ``weights(a, b, Z)`` gets ``Z = X[a:b] W`` (it may modify ``Z``) and returns the
    per-row weights ``Q`` of shape (b - a, k).
    """
    center = block.center
    scale = block.scale
    G = np.zeros((block.n_features, W.shape[1]))
    correction = np.zeros(W.shape[1])
    column_sums = W.sum(axis=0)
    for a, b, tile in _filled_tiles(block):
        Z = tile @ W
        if center is not None:
            Z -= np.outer(center[a:b], column_sums)
        if scale is not None:
            Z *= scale[a:b, None]
        Q = weights(a, b, Z)
        if scale is not None:
            Q = Q * scale[a:b, None]
        G += tile.T @ Q
        if center is not None:
            correction += center[a:b] @ Q
    if center is not None:
        G -= correction
    return G


def _filled_tiles(block: Block) -> Any:
    """Yield ``(a, b, T')``: float64 raw rows with missing entries filled, not transformed."""
    step = block.tile_rows()
    buffer = None
    for a in range(0, block.n_rows, step):
        b = min(a + step, block.n_rows)
        raw = block.raw_tile(a, b)
        if raw.dtype == np.float64 and block.fill is None:
            yield a, b, raw
            continue
        if buffer is None:
            buffer = np.empty((min(step, block.n_rows), block.n_features))
        tile = buffer[: b - a]
        np.copyto(tile, raw, casting="unsafe")
        if block.fill is not None:
            # flat indices of the few missing entries (a 1-D nonzero is ~10x faster than 2-D)
            where = np.flatnonzero(raw < 0)
            if where.size:
                tile.reshape(-1)[where] = block.fill[a + where // tile.shape[1]]
        yield a, b, tile


# ------------------------------------------------------------------------ moments
def column_moments(block: Block, *, implementation: str | None = None
                   ) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Return ``(column_sums, column_sq_dev, sq_norm)`` of the block's rows ``X``, or None.

    One compiled pass per tile of :meth:`Block.tiles` (tiles merged pairwise). None when
    the numba kernels do not apply (``implementation="numpy"``, numba absent or disabled,
    another dtype): :func:`~daskstraggle.problems.block.block_stats` then uses numpy tiles.
    """
    if block.n_rows == 0 or not _use_numba(block, implementation):
        return None
    sums, sq_dev = np.zeros(block.n_features), np.zeros(block.n_features)
    sq = _call_block("moments", block, block.tile_rows(), sums, sq_dev)
    return sums, sq_dev, float(sq)


# ---------------------------------------------------------------------------- Gram
def gram(block: Block, mean: np.ndarray | None, *, upper: bool = False,
         implementation: str | None = None) -> np.ndarray:
    """Return :func:`gram_sum` of one block."""
    return gram_sum((block,), mean, upper=upper, implementation=implementation)


def gram_sum(blocks: Sequence[Block], mean: np.ndarray | None, *, upper: bool = False,
             implementation: str | None = None) -> np.ndarray:
    """Return ``(X - 1 mean^T)^T (X - 1 mean^T)`` summed over the rows ``X`` of ``blocks``,
    accumulated in one ``d x d`` matrix (one worker's partitions cost one Gram matrix of
    memory, not one per partition).

    Each tile is converted exactly as :meth:`Block.tiles` does and shifted by ``mean``
    (in one fused pass with numba), then folded in with one BLAS ``syrk``. ``blocks``: at
    least one, all with the same columns; ``mean`` None: nothing subtracted. With ``upper``
    only the upper triangle, zeros below the diagonal (what ``syrk`` accumulates): a sum of
    many blocks' matrices is then symmetrised once (:func:`symmetric_from_upper`).
    """
    d = blocks[0].n_features
    acc = np.zeros((d, d), order="F")
    step = _gram_tile_rows(d)
    for block in blocks:
        acc = _gram_add(block, mean, acc, step, implementation)
    return acc if upper else symmetric_from_upper(acc)


def _gram_add(block: Block, mean: np.ndarray | None, acc: np.ndarray, step: int,
              implementation: str | None) -> np.ndarray:
    """Fold one block's shifted tiles into ``acc`` (upper triangle), ``step`` rows a tile."""
    d = block.n_features
    if _use_numba(block, implementation):
        shift = np.zeros(d) if mean is None else np.ascontiguousarray(mean, dtype=np.float64)
        buffer = np.empty((min(step, block.n_rows), d))
        for a in range(0, block.n_rows, step):
            b = min(a + step, block.n_rows)
            tile = buffer[: b - a]
            _call_block("convert", block, a, b, shift, tile)
            acc = syrk_update(tile, acc)
    else:
        for _, _, tile in block.tiles(step):
            acc = syrk_update(tile if mean is None else tile - mean, acc)
    return acc


def symmetric_from_upper(upper: np.ndarray) -> np.ndarray:
    """Return the C-contiguous symmetric matrix whose upper triangle (diagonal included) is
    ``upper``'s (only that triangle is read)."""
    full = np.array(upper, dtype=np.float64, order="C")
    _mirror_upper(full)
    return full


#: Rows of the symmetric matrix mirrored at a time (:func:`_mirror_upper`).
_MIRROR_ROWS = 512


def _mirror_upper(full: np.ndarray) -> None:
    """Overwrite the strict lower triangle of the square ``full`` with its upper one, in
    place, ``_MIRROR_ROWS`` rows at a time (no ``d x d`` temporary)."""
    d = full.shape[0]
    for a in range(0, d, _MIRROR_ROWS):
        b = min(a + _MIRROR_ROWS, d)
        full[a:b, :a] = full[:a, a:b].T
        diagonal = full[a:b, a:b]
        lower = np.tril_indices(b - a, -1)
        diagonal[lower] = diagonal.T[lower]


def _gram_tile_rows(d: int) -> int:
    """Rows per Gram tile: about ``_GRAM_TILE_BYTES``, at least ``_GRAM_MIN_ROWS`` (within
    ``_GRAM_MAX_TILE_BYTES``)."""
    d = max(d, 1)
    rows = max(_GRAM_TILE_BYTES // (8 * d), min(_GRAM_MIN_ROWS, _GRAM_MAX_TILE_BYTES // (8 * d)))
    return max(1, rows)


def pack_upper(upper: np.ndarray) -> np.ndarray:
    """Return the upper triangle of a square matrix (diagonal included), row by row.

    ``d (d + 1) / 2`` numbers: a Gram message is half the bytes; sums and linear
    combinations of packed triangles are the packed triangles of the sums.
    """
    d = upper.shape[0]
    return np.concatenate([upper[i, i:] for i in range(d)]) if d else np.zeros(0, upper.dtype)


def packed_product(packed: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Return ``A V`` for the symmetric ``A`` whose upper triangle :func:`pack_upper` packed
    (one BLAS ``dspmv`` per column of ``V``, (d, k); no ``d x d`` matrix is formed). The
    packed upper triangle, row by row, is the lower one column by column: BLAS's packed
    storage with ``uplo="L"``.
    """
    from scipy.linalg import blas

    d, k = V.shape
    _check_packed(packed, d)
    ap = np.ascontiguousarray(packed, dtype=np.float64)
    out = np.empty((d, k))
    for j in range(k):
        out[:, j] = blas.dspmv(d, 1.0, ap, np.ascontiguousarray(V[:, j]), lower=1)
    return out


def unpack_upper(packed: np.ndarray, d: int) -> np.ndarray:
    """Return the symmetric ``d x d`` matrix whose upper triangle :func:`pack_upper` packed
    (ValueError unless ``packed`` holds ``d (d + 1) / 2`` numbers)."""
    _check_packed(packed, d)
    full = np.zeros((d, d), dtype=packed.dtype)
    start = 0
    for i in range(d):
        full[i, i:] = packed[start:start + d - i]
        start += d - i
    _mirror_upper(full)
    return full


def _check_packed(packed: np.ndarray, d: int) -> None:
    """Raise ValueError unless ``packed`` holds the ``d (d + 1) / 2`` numbers of a triangle."""
    if packed.shape != (d * (d + 1) // 2,):
        raise ValueError(f"a packed {d} x {d} triangle has {d * (d + 1) // 2} numbers, "
                         f"got an array of shape {packed.shape}")
