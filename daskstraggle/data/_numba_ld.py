"""Numba body of LD pruning (imported lazily by :mod:`.ld`, never directly).

A variant's dosages are bit planes, 64 samples per ``uint64`` word: plane 0 marks the
called samples, plane ``1 + a`` bit ``a`` of the called dosages; a row of ``m`` samples
takes ``ceil(m / 512) * 8`` words per plane (zero padding). Every count over the samples
called at both ``x`` and ``y`` is a popcount of an AND of planes: ``n = |C_x & C_y|``,
``sum x = sum_a 2^a |X_a & C_y|``, ``sum xy = sum_ab 2^(a+b) |X_a & Y_b|`` (``sum x^2``
likewise).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from daskstraggle.data._numba_bits import popcount

_JIT: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}

#: The sign bit of each byte of a word (a negative int8 dosage: missing).
_SIGNS = np.uint64(0x8080808080808080)
#: Gathers bit 0 of each of the 8 bytes of a word into its top byte, byte j to bit j.
_GATHER = np.uint64(0x0102040810204080)


@numba.njit(inline="always", **_JIT)
def _popcount(x):
    """The number of set bits of a uint64, as an int64 (the counts' type here)."""
    return np.int64(popcount(x))


@numba.njit(inline="always", **_JIT)
def _byte_bits(word):
    """Bit 0 of each byte of ``word`` (the others zero) as 8 bits, byte j to bit j."""
    return (word * _GATHER) >> np.uint64(56)


@numba.njit(parallel=True, **_JIT)
def bit_planes(words, out):
    """Write the planes of int8 dosages into ``out`` (uint64, rows x planes x words);
    ``words`` holds the dosages 8 to a uint64 (rows x ceil(samples / 8), padded with -1:
    missing)."""
    n_rows, n_bytes = words.shape
    n_words = -(-n_bytes // 8)
    for i in numba.prange(n_rows):
        for plane in range(out.shape[1]):
            shift = np.uint64(max(plane - 1, 0))
            every = np.uint64(0) - np.uint64(plane == 0)  # plane 0: the called bits alone
            for w in range(n_words):
                bits = np.uint64(0)
                for b in range(8):
                    k = 8 * w + b
                    if k >= n_bytes:
                        break
                    word = words[i, k]
                    called = (~word & _SIGNS) >> np.uint64(7)
                    bits |= _byte_bits(called & ((word >> shift) | every)) << np.uint64(8 * b)
                out[i, plane, w] = bits


@numba.njit(**_JIT)
def plane_counts(planes, n_called, totals, constant):
    """Per row: the called samples, the sum of the called dosages and whether they are all
    equal (or none is called)."""
    n_rows, n_planes, n_words = planes.shape
    for i in range(n_rows):
        n = 0
        for w in range(n_words):
            n += _popcount(planes[i, 0, w])
        total = 0
        same = True
        for a in range(n_planes - 1):
            ones = 0
            for w in range(n_words):
                ones += _popcount(planes[i, 1 + a, w])
            total += ones << a
            same = same and (ones == 0 or ones == n)
        n_called[i] = n
        totals[i] = total
        constant[i] = same


@numba.njit(inline="always", **_JIT)
def _diploid_counts(planes, i, j):
    """The six counts of rows ``i``, ``j`` of dosages 0-2 (one called, two value planes):
    eight population counts per word, in one loop."""
    n = sx1 = sx2 = sy1 = sy2 = d11 = d12 = d22 = 0
    for w in range(planes.shape[2]):
        cx = planes[i, 0, w]
        x1 = planes[i, 1, w]
        x2 = planes[i, 2, w]
        cy = planes[j, 0, w]
        y1 = planes[j, 1, w]
        y2 = planes[j, 2, w]
        n += _popcount(cx & cy)
        sx1 += _popcount(x1 & cy)
        sx2 += _popcount(x2 & cy)
        sy1 += _popcount(cx & y1)
        sy2 += _popcount(cx & y2)
        d11 += _popcount(x1 & y1)
        d12 += _popcount((x1 & y2) | (x2 & y1))  # disjoint: dosages 1, 2 and 2, 1
        d22 += _popcount(x2 & y2)
    return (n, sx1 + 2 * sx2, sy1 + 2 * sy2, sx1 + 4 * sx2, sy1 + 4 * sy2, d11 + 2 * d12 + 4 * d22)


@numba.njit(inline="always", **_JIT)
def _count(planes, i, a, b, j, c):
    """``|P_i,a & P_i,b & P_j,c|`` over the words (``a == b`` for two planes)."""
    total = 0
    for w in range(planes.shape[2]):
        total += _popcount(planes[i, a, w] & planes[i, b, w] & planes[j, c, w])
    return total


@numba.njit(inline="always", **_JIT)
def _sums(planes, i, j):
    """Sum and sum of squares of row ``i``'s dosages over the samples called in ``j``."""
    s = q = 0
    for a in range(1, planes.shape[1]):
        ones = _count(planes, i, a, a, j, 0)
        s += ones << (a - 1)
        q += ones << (2 * a - 2)
        for b in range(a + 1, planes.shape[1]):
            q += _count(planes, i, a, b, j, 0) << (a + b - 1)
    return s, q


@numba.njit(inline="always", **_JIT)
def _counts(planes, i, j):
    """``(n, sum x, sum y, sum x^2, sum y^2, sum xy)`` of rows ``i`` (x) and ``j`` (y)
    over the samples called at both."""
    if planes.shape[1] == 3:
        return _diploid_counts(planes, i, j)
    sx, qx = _sums(planes, i, j)
    sy, qy = _sums(planes, j, i)
    dot = 0
    for a in range(1, planes.shape[1]):
        for b in range(1, planes.shape[1]):
            dot += _count(planes, i, a, a, j, b) << (a + b - 2)
    return _count(planes, i, 0, 0, j, 0), sx, sy, qx, qy, dot


@numba.njit(inline="always", **_JIT)
def _exceeds(counts, threshold):
    """plink2's test ``cov^2 > threshold * var_x * var_y`` on a pair's counts."""
    n, sx, sy, qx, qy, dot = counts
    cov = np.float64(dot * n - sx * sy)
    var_x = np.float64(qx * n - sx * sx)
    var_y = np.float64(qy * n - sy * sy)
    return cov * cov > threshold * var_x * var_y


@numba.njit(parallel=True, **_JIT)
def band(planes, contig, width, threshold, out):
    """Fill ``out`` (bool, rows x width, False) with the test of each pair ``(i, i +
    d)``, ``d <= width``, of one contig (equal ``contig`` codes)."""
    n_rows = planes.shape[0]
    for i in numba.prange(n_rows):
        for j in range(i + 1, min(i + width + 1, n_rows)):
            if contig[j] == contig[i]:
                out[i, j - i - 1] = _exceeds(_counts(planes, i, j), threshold)


# ------------------------------------------------------------------------------ the scan
@numba.njit(inline="always", **_JIT)
def _drop_second(major, first, second, tie):
    """Whether ``second`` (not ``first``) is dropped: the higher major allele frequency,
    ``second`` on a tie (``tie``: 1 + the relative tolerance)."""
    return major[first] <= major[second] * tie


@numba.njit(**_JIT)
def _scan_backwards(band, major, removed, members, count, split, tie):
    """plink2's default order: the window's new variants from the last, each against the
    kept variants before it, nearest first."""
    for pos in range(count - 1, max(split, 1) - 1, -1):
        second = members[pos]
        for earlier in range(pos - 1, -1, -1):
            other = members[earlier]
            if removed[other] or not band[other, second - other - 1]:
                continue
            if _drop_second(major, other, second, tie):
                removed[second] = True
                break
            removed[other] = True


@numba.njit(**_JIT)
def _compare_later(band, major, removed, members, count, pos, unchecked, offset, stop, tie):
    """Variant ``members[pos]`` against the kept variants after it that it has not yet
    been compared with, up to the first pair in LD; whether it removed one of the pair."""
    first = members[pos]
    since = unchecked[first - offset]
    unchecked[first - offset] = stop
    for q in range(pos + 1, count):
        second = members[q]
        if removed[second] or second < since or not band[first, second - first - 1]:
            continue
        if not _drop_second(major, first, second, tie):
            removed[first] = True
            return True
        removed[second] = True
        for r in range(q + 1, count):
            if not removed[members[r]]:
                unchecked[first - offset] = members[r]
                break
        return True
    return False


@numba.njit(**_JIT)
def _scan_forwards(band, major, removed, members, count, unchecked, offset, stop, tie):
    """PLINK 1.x's order: each kept variant from the first against the kept variants
    after it it has not yet been compared with, until a pass drops nothing more."""
    dropped = True
    while dropped:
        dropped = False
        for pos in range(count):
            first = members[pos]
            if not removed[first] and unchecked[first - offset] != stop:
                dropped |= _compare_later(band, major, removed, members, count, pos, unchecked,
                                          offset, stop, tie)


@numba.njit(**_JIT)
def scan_contig(band, major, removed, first, end, window, step, order, tie):
    """plink2's scan (``order`` 2, or 1: PLINK 1.x's) over the variants ``[first, end)``
    of one contig, windows of ``window`` variants moving on by ``step``."""
    members = np.empty(min(window, end - first), dtype=np.int64)
    unchecked = np.empty(end - first, dtype=np.int64)  # per variant, from ``first``
    count = split = 0
    start, stop, loaded = first, min(first + window, end), first
    while True:
        for v in range(loaded, stop):
            members[count] = v
            unchecked[v - first] = v + 1
            count += 1
        loaded = stop
        if order == 2:
            _scan_backwards(band, major, removed, members, count, split, tie)
        else:
            _scan_forwards(band, major, removed, members, count, unchecked, first, stop, tie)
        if stop == end:
            return
        start += step
        stop = min(start + window, end)
        kept = 0
        for pos in range(count):
            v = members[pos]
            if not removed[v] and v >= start:
                members[kept] = v
                kept += 1
        count = split = kept
