"""Numba body of KING-robust kinship (imported lazily by :mod:`.kinship`, never directly).

Per sample and 64 variants, a word ``hom`` (the call is 0 or 2) and a word ``alt`` (1 or 2);
a missing call sets neither, so ``het = alt & ~hom``; ``hethet = |het_i & het_j|``, ``ibs0 =
|hom_i & hom_j & (alt_i ^ alt_j)|``, ``het_hom = |het_i & hom_j|``, ``hom_het = |hom_i & het_j|``.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from daskstraggle.data._numba_bits import popcount as _popcount

_JIT: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}

#: Samples per side of a tile of pairs.
TILE = 32
#: Words (of 64 variants) per plane read at a time for a tile: 2 planes x 512 words x 8
#: bytes = 8 KiB per sample, 256 KiB for a tile's 32 columns.
WORDS = 512

_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@numba.njit(**_JIT)
def sample_bits(values, out):
    """Write the bit planes of ``values`` (int8, variants x samples, negative: missing) into
    ``out`` (uint64, samples x 2 x ceil(variants / 64), plane 0 ``hom``, plane 1 ``alt``)."""
    n_variants, n_samples = values.shape
    hom = np.empty(n_samples, dtype=np.uint64)
    alt = np.empty(n_samples, dtype=np.uint64)
    for w in range(out.shape[2]):
        hom[:] = _ZERO
        alt[:] = _ZERO
        first = 64 * w
        for v in range(first, min(first + 64, n_variants)):
            shift = np.uint64(v - first)
            for i in range(n_samples):  # contiguous: vectorised
                d = values[v, i]
                hom[i] |= np.uint64((d == 0) | (d == 2)) << shift
                alt[i] |= np.uint64((d == 1) | (d == 2)) << shift
        for i in range(n_samples):
            out[i, 0, w] = hom[i]
            out[i, 1, w] = alt[i]


@numba.njit(inline="always", **_JIT)
def _pair2(hom_a, alt_a, hom_b, alt_b, hom_j, alt_j):
    """The four counts of samples ``a`` and ``j`` and of ``b`` and ``j`` from their planes
    (1-D views of equal length), in one sweep that reads the planes of ``j`` once."""
    hethet_a = ibs0_a = het_hom_a = hom_het_a = 0
    hethet_b = ibs0_b = het_hom_b = hom_het_b = 0
    for w in range(hom_j.shape[0]):
        het_j = alt_j[w] & ~hom_j[w]
        het_a = alt_a[w] & ~hom_a[w]
        het_b = alt_b[w] & ~hom_b[w]
        hethet_a += np.int64(_popcount(het_a & het_j))
        ibs0_a += np.int64(_popcount(hom_a[w] & hom_j[w] & (alt_a[w] ^ alt_j[w])))
        het_hom_a += np.int64(_popcount(het_a & hom_j[w]))
        hom_het_a += np.int64(_popcount(hom_a[w] & het_j))
        hethet_b += np.int64(_popcount(het_b & het_j))
        ibs0_b += np.int64(_popcount(hom_b[w] & hom_j[w] & (alt_b[w] ^ alt_j[w])))
        het_hom_b += np.int64(_popcount(het_b & hom_j[w]))
        hom_het_b += np.int64(_popcount(hom_b[w] & het_j))
    return (hethet_a, ibs0_a, het_hom_a, hom_het_a), (hethet_b, ibs0_b, het_hom_b, hom_het_b)


@numba.njit(inline="always", **_JIT)
def _add(acc, r, c, counts):
    """Add one pair's four counts to ``acc[:, r, c]``."""
    for k in range(4):
        acc[k, r, c] += counts[k]


@numba.njit(**_JIT)
def _tile(bits, i0, i1, j0, j1, acc):
    """Add the counts of the pairs ``i0 <= i < i1``, ``max(j0, i) <= j < j1`` to ``acc``
    (4 x TILE x TILE, from ``(i0, j0)``), two rows at a time (an odd last row twice)."""
    n_words = bits.shape[2]
    for w0 in range(0, n_words, WORDS):
        w1 = min(w0 + WORDS, n_words)
        for i in range(i0, i1, 2):
            b = min(i + 1, i1 - 1)
            for j in range(max(j0, i), j1):
                first, second = _pair2(bits[i, 0, w0:w1], bits[i, 1, w0:w1],
                                       bits[b, 0, w0:w1], bits[b, 1, w0:w1],
                                       bits[j, 0, w0:w1], bits[j, 1, w0:w1])
                _add(acc, i - i0, j - j0, first)
                if j > i < b:  # a second row; (i + 1, i) is below the diagonal
                    _add(acc, b - i0, j - j0, second)


@numba.njit(inline="always", **_JIT)
def _kinship(hethet, ibs0, het_hom, hom_het):
    """The KING-robust kinship of one pair's counts (NaN when the denominator is 0)."""
    denominator = 4 * (hethet + min(het_hom, hom_het))
    if denominator == 0:
        return np.nan
    return 0.5 - (4 * ibs0 + het_hom + hom_het) / np.float64(denominator)


@numba.njit(**_JIT)
def _tile_counts(bits, t, n_columns, start, stop):
    """Tile ``t``'s rows ``[i0, i1)``, columns ``[j0, j1)`` (both from ``start``) and counts
    (zero when it has no pair ``j >= i``)."""
    i0 = start + (t // n_columns) * TILE
    j0 = start + (t % n_columns) * TILE
    i1, j1 = min(i0 + TILE, stop), min(j0 + TILE, bits.shape[0])
    acc = np.zeros((4, TILE, TILE), dtype=np.int64)
    if j1 > i0:
        _tile(bits, i0, i1, j0, j1, acc)
    return i0, i1, j0, j1, acc


@numba.njit(parallel=True, **_JIT)
def pair_counts(bits, start, stop, out):
    """Write into ``out`` (4 x (stop - start) x (samples - start), zeros) the counts of the
    pairs ``start <= i < stop``, ``j >= i``; one parallel iteration per tile of ``TILE x
    TILE`` pairs."""
    n_columns = -(-(bits.shape[0] - start) // TILE)
    for t in numba.prange(-(-(stop - start) // TILE) * n_columns):
        i0, i1, j0, j1, acc = _tile_counts(bits, t, n_columns, start, stop)
        for i in range(i0, i1):
            for j in range(max(j0, i), j1):
                for k in range(4):
                    out[k, i - start, j - start] = acc[k, i - i0, j - j0]


@numba.njit(parallel=True, **_JIT)
def pair_kinship(bits, start, stop, out):
    """Write into ``out`` ((stop - start) x (samples - start), NaN) the KING-robust kinship
    of the pairs ``start <= i < stop``, ``j > i``, tiled as :func:`pair_counts`."""
    n_columns = -(-(bits.shape[0] - start) // TILE)
    for t in numba.prange(-(-(stop - start) // TILE) * n_columns):
        i0, i1, j0, j1, acc = _tile_counts(bits, t, n_columns, start, stop)
        for i in range(i0, i1):
            for j in range(max(j0, i + 1), j1):
                r, c = i - i0, j - j0
                out[i - start, j - start] = _kinship(acc[0, r, c], acc[1, r, c], acc[2, r, c],
                                                     acc[3, r, c])
