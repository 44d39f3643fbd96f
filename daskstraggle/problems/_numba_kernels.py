"""Numba bodies of the fused kernels (imported lazily by :mod:`._kernels`, never directly).

Rows are read in place (float64 without missing entries) or converted :data:`CHUNK` at a
time (:func:`_rows`); arrays a block lacks (fill, centre, scale) are passed empty with a
``False`` flag, so each kernel compiles once per stored dtype (``docs/kernels.md``).
"""
from __future__ import annotations

import math
import sys

import numba
import numpy as np

#: Rows multiplied together (the register block of the products).
ROWS = 4
#: The packed decoder spreads a byte's codes through a uint32 on little-endian hosts (all
#: the usual ones: x86-64, ARM64); a compile-time constant.
_LITTLE_ENDIAN = sys.byteorder == "little"
#: Rows converted to float64 per call of the products (a multiple of :data:`ROWS`).
CHUNK = 16
#: Reassociation lets LLVM vectorise the dot products; results agree with the ordered
#: sums to rounding (the tests hold them to 1e-12).
_FAST = {"reassoc", "contract", "nsz"}
_JIT = {"cache": True, "nogil": True, "fastmath": _FAST, "error_model": "numpy"}
_INLINE = {**_JIT, "inline": "always"}


# ---------------------------------------------------------------------------- rows
@numba.njit(**_INLINE)
def _spread(values, row, b0, b1, codes, spread):
    """Spread the bytes ``b0 .. b1`` of packed ``row`` into ``codes`` (``codes[4 (jb - b0) +
    i]`` the ``i``-th 2-bit code of byte ``jb``; ``spread`` its uint32 view)."""
    src = values[row, b0:b1]
    if _LITTLE_ENDIAN:
        for i in range(src.shape[0]):
            x = np.uint32(src[i])
            x = (x | (x << np.uint32(12))) & np.uint32(0x000F000F)
            spread[i] = (x | (x << np.uint32(6))) & np.uint32(0x03030303)
    else:
        for i in range(src.shape[0]):
            byte = src[i]
            codes[4 * i] = byte & 3
            codes[4 * i + 1] = (byte >> 2) & 3
            codes[4 * i + 2] = (byte >> 4) & 3
            codes[4 * i + 3] = byte >> 6


def _tile_values(values, i0, nr, fill, has_fill, buf, c0, c1):
    """Columns ``c0 .. c1`` of float64 or int8 rows into ``buf``, negative entries filled,
    columns past the row's end zero (rows sliced from 0, so LLVM vectorises the loop)."""
    end = max(min(c1, values.shape[1]), c0)
    for r in range(nr):
        row = values[i0 + r, c0:end]
        out = buf[r]
        if has_fill:
            f = fill[i0 + r]
            for j in range(end - c0):
                t = row[j]
                out[j] = f if t < 0 else float(t)
        else:
            for j in range(end - c0):
                out[j] = float(row[j])
        for j in range(end - c0, c1 - c0):
            out[j] = 0.0


def _tile_packed(values, i0, nr, fill, has_fill, buf, c0, c1):
    """Columns ``c0 .. c1`` (``c0`` a multiple of 4) of packed rows into ``buf``, code 3
    filled; the last byte's padding codes land past the features (``V`` is zero there)."""
    b0 = c0 // 4
    b1 = min(-(-c1 // 4), values.shape[1])
    width = c1 - c0
    m = min(width, 4 * (b1 - b0))
    codes = np.empty(4 * max(b1 - b0, 0), dtype=np.int8)
    spread = codes.view(np.uint32)
    for r in range(nr):
        f = fill[i0 + r] if has_fill else -1.0
        _spread(values, i0 + r, b0, b1, codes, spread)
        for j in range(m):
            code = codes[j]
            buf[r, j] = f if code == 3 else float(code)
        for j in range(max(m, 0), width):
            buf[r, j] = 0.0


def _convert_tile(values, i0, nr, fill, has_fill, buf, c0, c1):
    """Columns ``c0 .. c1`` of rows ``i0 .. i0 + nr`` into ``buf`` as float64, filled."""


@numba.extending.overload(_convert_tile, jit_options=_JIT)
def _convert_tile_overload(values, i0, nr, fill, has_fill, buf, c0, c1):
    """Dispatch on the stored dtype: uint8 rows are packed codes, others values."""
    if values.dtype == numba.types.uint8:
        return _tile_packed
    return _tile_values


@numba.njit(**_INLINE)
def _convert_rows(values, i0, nr, fill, has_fill, buf):
    """:func:`_convert_tile` of every column."""
    _convert_tile(values, i0, nr, fill, has_fill, buf, 0, buf.shape[1])


def _in_place(values, buf):
    """The array the products read (see overload)."""


@numba.extending.overload(_in_place, jit_options=_JIT, inline="always")
def _in_place_overload(values, buf):
    """``values`` when it is float64 (typed like ``buf``), else ``buf`` (never read in
    place: :func:`_reads_in_place` is False), so the products see float64 rows only."""
    if values.dtype == numba.types.float64:
        return lambda values, buf: values
    return lambda values, buf: buf


def _reads_in_place(values, has_fill):
    """Whether the rows are read in place (see overload)."""


@numba.extending.overload(_reads_in_place, jit_options=_JIT, inline="always")
def _reads_in_place_overload(values, has_fill):
    """False for int8 and packed rows (typed ``bool`` like the float64 answer, so the
    products called with it compile once)."""
    if values.dtype == numba.types.float64:
        return lambda values, has_fill: not has_fill
    return lambda values, has_fill: has_fill and not has_fill


@numba.njit(**_INLINE)
def _rows(values, i0, count, fill, has_fill, buf, in_place):
    """``(array, index of row i0 in it)``: the block's rows, or ``buf`` converted."""
    if in_place:
        return _in_place(values, buf), i0
    _convert_rows(values, i0, count, fill, has_fill, buf)
    return buf, 0


@numba.njit(**_INLINE)
def _chunk(n, in_place):
    """Rows per call of the products: all ``n`` read in place, else :data:`CHUNK`."""
    return max(n, 1) if in_place else CHUNK


# ------------------------------------------------------------------------ products
@numba.njit(**_INLINE)
def _project(X, r0, r1, r2, r3, VT, p):
    """``p[c, s] = X[r_s] . VT[c]`` for the four rows ``r0 .. r3``, four columns of ``VT`` at
    a time (sixteen accumulators), then two, then one."""
    k, m = VT.shape
    c = 0
    while c + 4 <= k:
        a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = 0.0
        a20 = a21 = a22 = a23 = a30 = a31 = a32 = a33 = 0.0
        for j in range(m):
            v0, v1, v2, v3 = VT[c, j], VT[c + 1, j], VT[c + 2, j], VT[c + 3, j]
            x0, x1, x2, x3 = X[r0, j], X[r1, j], X[r2, j], X[r3, j]
            a00 += x0 * v0
            a10 += x1 * v0
            a20 += x2 * v0
            a30 += x3 * v0
            a01 += x0 * v1
            a11 += x1 * v1
            a21 += x2 * v1
            a31 += x3 * v1
            a02 += x0 * v2
            a12 += x1 * v2
            a22 += x2 * v2
            a32 += x3 * v2
            a03 += x0 * v3
            a13 += x1 * v3
            a23 += x2 * v3
            a33 += x3 * v3
        p[c, 0], p[c, 1], p[c, 2], p[c, 3] = a00, a10, a20, a30
        p[c + 1, 0], p[c + 1, 1], p[c + 1, 2], p[c + 1, 3] = a01, a11, a21, a31
        p[c + 2, 0], p[c + 2, 1], p[c + 2, 2], p[c + 2, 3] = a02, a12, a22, a32
        p[c + 3, 0], p[c + 3, 1], p[c + 3, 2], p[c + 3, 3] = a03, a13, a23, a33
        c += 4
    if c + 2 <= k:
        a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = 0.0
        for j in range(m):
            v0, v1 = VT[c, j], VT[c + 1, j]
            x0, x1, x2, x3 = X[r0, j], X[r1, j], X[r2, j], X[r3, j]
            a00 += x0 * v0
            a10 += x1 * v0
            a20 += x2 * v0
            a30 += x3 * v0
            a01 += x0 * v1
            a11 += x1 * v1
            a21 += x2 * v1
            a31 += x3 * v1
        p[c, 0], p[c, 1], p[c, 2], p[c, 3] = a00, a10, a20, a30
        p[c + 1, 0], p[c + 1, 1], p[c + 1, 2], p[c + 1, 3] = a01, a11, a21, a31
        c += 2
    if c < k:
        a0 = a1 = a2 = a3 = 0.0
        for j in range(m):
            v0 = VT[c, j]
            a0 += X[r0, j] * v0
            a1 += X[r1, j] * v0
            a2 += X[r2, j] * v0
            a3 += X[r3, j] * v0
        p[c, 0], p[c, 1], p[c, 2], p[c, 3] = a0, a1, a2, a3


@numba.njit(**_INLINE)
def _project_row(X, row, VT, p):
    """``p[c, 0] = X[row] . VT[c]`` (one row)."""
    k, m = VT.shape
    for c in range(k):
        a = 0.0
        for j in range(m):
            a += X[row, j] * VT[c, j]
        p[c, 0] = a


@numba.njit(**_INLINE)
def _update(X, r0, r1, r2, r3, q, GT):
    """``GT[c] += sum_s q[c, s] X[r_s]`` (a rank-4 update), four columns, two, then one."""
    k, m = GT.shape
    c = 0
    while c + 4 <= k:
        q00, q01, q02, q03 = q[c, 0], q[c, 1], q[c, 2], q[c, 3]
        q10, q11, q12, q13 = q[c + 1, 0], q[c + 1, 1], q[c + 1, 2], q[c + 1, 3]
        q20, q21, q22, q23 = q[c + 2, 0], q[c + 2, 1], q[c + 2, 2], q[c + 2, 3]
        q30, q31, q32, q33 = q[c + 3, 0], q[c + 3, 1], q[c + 3, 2], q[c + 3, 3]
        for j in range(m):
            x0, x1, x2, x3 = X[r0, j], X[r1, j], X[r2, j], X[r3, j]
            GT[c, j] += q00 * x0 + q01 * x1 + q02 * x2 + q03 * x3
            GT[c + 1, j] += q10 * x0 + q11 * x1 + q12 * x2 + q13 * x3
            GT[c + 2, j] += q20 * x0 + q21 * x1 + q22 * x2 + q23 * x3
            GT[c + 3, j] += q30 * x0 + q31 * x1 + q32 * x2 + q33 * x3
        c += 4
    if c + 2 <= k:
        q00, q01, q02, q03 = q[c, 0], q[c, 1], q[c, 2], q[c, 3]
        q10, q11, q12, q13 = q[c + 1, 0], q[c + 1, 1], q[c + 1, 2], q[c + 1, 3]
        for j in range(m):
            x0, x1, x2, x3 = X[r0, j], X[r1, j], X[r2, j], X[r3, j]
            GT[c, j] += q00 * x0 + q01 * x1 + q02 * x2 + q03 * x3
            GT[c + 1, j] += q10 * x0 + q11 * x1 + q12 * x2 + q13 * x3
        c += 2
    if c < k:
        q00, q01, q02, q03 = q[c, 0], q[c, 1], q[c, 2], q[c, 3]
        for j in range(m):
            GT[c, j] += q00 * X[r0, j] + q01 * X[r1, j] + q02 * X[r2, j] + q03 * X[r3, j]


@numba.njit(**_INLINE)
def _update_row(X, row, q, GT):
    """``GT[c] += q[c, 0] X[row]`` (one row)."""
    k, m = GT.shape
    for c in range(k):
        weight = q[c, 0]
        for j in range(m):
            GT[c, j] += weight * X[row, j]


@numba.njit(**_INLINE)
def _pca_weights(p, s, i, center, scale, flags, vsum, shift, acc):
    """Turn column ``s`` of ``p`` (block row ``i``) into ``q = s t``, ``t = (p - c 1^T V) s -
    shift``; ``acc`` gets ``t``, ``t^2`` and ``c q``."""
    c = center[i] if flags[1] else 0.0
    s_i = scale[i] if flags[2] else 1.0
    for col in range(p.shape[0]):
        t = (p[col, s] - c * vsum[col]) * s_i - shift[col]
        acc[0, col] += t
        acc[1, col] += t * t
        weight = t * s_i
        p[col, s] = weight
        acc[2, col] += c * weight


@numba.njit(**_INLINE)
def _row_sums(VT):
    """The sums of the rows of ``VT`` (``1^T V``, shape (k,))."""
    k, m = VT.shape
    vsum = np.zeros(k)
    for col in range(k):
        for j in range(m):
            vsum[col] += VT[col, j]
    return vsum


@numba.njit(**_INLINE)
def _pca_finish(acc, colsum, sq, GT, has_center):
    """Add ``acc`` to ``colsum`` and ``sq``; with a centre take ``c^T Q`` off every row of
    ``G``."""
    k, m = GT.shape
    for col in range(k):
        colsum[col] += acc[0, col]
        sq[col] += acc[1, col]
        if has_center:
            for j in range(m):
                GT[col, j] -= acc[2, col]


@numba.njit(**_JIT)
def _pca_rows(X, first, count, i, VT, GT, p, center, scale, flags, vsum, shift, acc,
              streams):
    """:func:`pca` on the rows ``X[first : first + count]`` (block rows ``i ..``), four at a
    time (from the range's four quarters with ``streams``), the rest one at a time."""
    groups = count // ROWS
    step = groups if streams else 1  # between the rows of a group
    stride = 1 if streams else ROWS  # between the first rows of two groups
    for g in range(groups):
        r0 = first + g * stride
        _project(X, r0, r0 + step, r0 + 2 * step, r0 + 3 * step, VT, p)
        for s in range(ROWS):
            _pca_weights(p, s, i + r0 + s * step - first, center, scale, flags, vsum, shift,
                         acc)
        _update(X, r0, r0 + step, r0 + 2 * step, r0 + 3 * step, p, GT)
    for row in range(first + ROWS * groups, first + count):
        _project_row(X, row, VT, p)
        _pca_weights(p, 0, i + row - first, center, scale, flags, vsum, shift, acc)
        _update_row(X, row, p, GT)


@numba.njit(**_JIT)
def pca(values, fill, center, scale, flags, VT, shift, GT, colsum, sq):
    """Add ``X^T P`` to ``GT^T``, ``1^T P`` to ``colsum``, ``|P_j|^2`` to ``sq``.

    ``P = X V - 1 shift^T`` with ``X = diag(s) (T' - c 1^T)``: the rows ``T'`` (filled)
    are multiplied as stored; centre and scale act on the thin products. ``VT`` and
    ``GT`` may be wider than the rows (zero columns, genotype rows padded).
    """
    n = values.shape[0]
    k, m = VT.shape
    p = np.zeros((k, ROWS))
    vsum = _row_sums(VT)
    acc = np.zeros((3, k))  # 1^T P, |P_j|^2, c^T Q
    buf = np.zeros((CHUNK, m))
    in_place = _reads_in_place(values, flags[0])
    step = _chunk(n, in_place)
    for i0 in range(0, n, step):
        count = min(step, n - i0)
        rows, first = _rows(values, i0, count, fill, flags[0], buf, in_place)
        _pca_rows(rows, first, count, i0, VT, GT, p, center, scale, flags, vsum, shift, acc,
                  in_place)
    _pca_finish(acc, colsum, sq, GT, flags[1])


@numba.njit(**_JIT)
def _project_tiles(values, a, b, fill, has_fill, VT, P, p, buf, tile):
    """``P[:, r] = T'_{a + r} . VT`` for the rows ``a .. b``, column tile by column tile
    (each tile of ``VT`` read once for all the rows)."""
    k, width = VT.shape
    for r in range(b - a):
        for c in range(k):
            P[c, r] = 0.0
    for c0 in range(0, width, tile):
        c1 = min(c0 + tile, width)
        VTt = np.ascontiguousarray(VT[:, c0:c1])
        for i0 in range(a, b, CHUNK):
            count = min(CHUNK, b - i0)
            _convert_tile(values, i0, count, fill, has_fill, buf, c0, c1)
            groups = count // ROWS
            for g in range(groups):
                r0 = ROWS * g
                _project(buf, r0, r0 + 1, r0 + 2, r0 + 3, VTt, p)
                for s in range(ROWS):
                    for c in range(k):
                        P[c, i0 - a + r0 + s] += p[c, s]
            for row in range(ROWS * groups, count):
                _project_row(buf, row, VTt, p)
                for c in range(k):
                    P[c, i0 - a + row] += p[c, 0]


@numba.njit(**_JIT)
def _update_tiles(values, a, b, fill, has_fill, P, GT, p, buf, tile):
    """``GT[:, j] += sum_r P[:, r] T'_{a + r, j}`` for the rows ``a .. b``, tile by tile."""
    k, width = GT.shape
    for c0 in range(0, width, tile):
        c1 = min(c0 + tile, width)
        GTt = np.zeros((k, c1 - c0))
        for i0 in range(a, b, CHUNK):
            count = min(CHUNK, b - i0)
            _convert_tile(values, i0, count, fill, has_fill, buf, c0, c1)
            groups = count // ROWS
            for g in range(groups):
                r0 = ROWS * g
                for s in range(ROWS):
                    for c in range(k):
                        p[c, s] = P[c, i0 - a + r0 + s]
                _update(buf, r0, r0 + 1, r0 + 2, r0 + 3, p, GTt)
            for row in range(ROWS * groups, count):
                for c in range(k):
                    p[c, 0] = P[c, i0 - a + row]
                _update_row(buf, row, p, GTt)
        for c in range(k):
            for j in range(c1 - c0):
                GT[c, c0 + j] += GTt[c, j]


@numba.njit(**_JIT)
def pca_tiled(values, fill, center, scale, flags, VT, shift, GT, colsum, sq, tile, rows):
    """:func:`pca` for wide converted rows (genotypes of many samples), cache-blocked:
    ``rows`` rows at a time, their projections column tile by column tile (``tile``
    columns of ``VT`` kept in cache), the thin products, then ``G^T += Q^T T'`` tile by
    tile; equal to :func:`pca`'s results to rounding."""
    n = values.shape[0]
    k = VT.shape[0]
    vsum = _row_sums(VT)
    acc = np.zeros((3, k))
    P = np.zeros((k, rows))
    p = np.zeros((k, ROWS))
    buf = np.zeros((CHUNK, tile))
    for a in range(0, n, rows):
        b = min(a + rows, n)
        _project_tiles(values, a, b, fill, flags[0], VT, P, p, buf, tile)
        for r in range(b - a):
            _pca_weights(P, r, a + r, center, scale, flags, vsum, shift, acc)
        _update_tiles(values, a, b, fill, flags[0], P, GT, p, buf, tile)
    _pca_finish(acc, colsum, sq, GT, flags[1])


# ----------------------------------------------------------------------- regression
@numba.njit(cache=True, nogil=True, error_model="numpy")
def _logistic_terms(margin, label):
    """Return ``log(1 + exp(-margin))`` and ``-label expit(-margin)``, one ``exp``.

    With ``e = exp(-|margin|)``: ``log(1 + exp(-margin)) = max(-margin, 0) + log1p(e)``
    (numpy's ``logaddexp(0, -margin)``) and ``expit(-margin)`` is ``1 / (1 + e)`` for
    ``margin <= 0``, ``e / (1 + e)`` otherwise; neither overflows.
    """
    e = math.exp(-abs(margin))
    inverse = 1.0 / (1.0 + e)
    expit = e * inverse if margin > 0.0 else inverse
    return max(-margin, 0.0) + math.log1p(e), -label * expit


@numba.njit(**_INLINE)
def _glm_weight(p, i, center, scale, flags, wsum, b, y, logistic, sums):
    """The weight ``s q(z, y)`` of block row ``i``, ``z = (p - c 1^T w) s + b``; ``sums``
    gets ``q``, the loss and ``c s q``."""
    c = center[i] if flags[1] else 0.0
    s = scale[i] if flags[2] else 1.0
    label = y[i]
    z = (p - c * wsum) * s + b
    if logistic:
        loss, weight = _logistic_terms(label * z, label)
    else:
        weight = z - label
        loss = weight * weight
    sums[0] += weight
    sums[1] += loss
    sums[2] += c * weight * s
    return weight * s


@numba.njit(**_JIT)
def _glm_rows(X, first, count, i, W, G, p, center, scale, flags, wsum, b, y, logistic,
              sums, streams):
    """:func:`glm` on the rows ``X[first : first + count]`` (block rows ``i ..``) as
    :func:`_pca_rows` with the one column ``W = w^T``: four dot products, four weights
    (in ``p``), one rank-4 update of ``G = grad^T``."""
    groups = count // ROWS
    step = groups if streams else 1
    stride = 1 if streams else ROWS
    for g in range(groups):
        r0 = first + g * stride
        _project(X, r0, r0 + step, r0 + 2 * step, r0 + 3 * step, W, p)
        for s in range(ROWS):
            p[0, s] = _glm_weight(p[0, s], i + r0 + s * step - first, center, scale, flags,
                                  wsum, b, y, logistic, sums)
        _update(X, r0, r0 + step, r0 + 2 * step, r0 + 3 * step, p, G)
    for row in range(first + ROWS * groups, first + count):
        _project_row(X, row, W, p)
        p[0, 0] = _glm_weight(p[0, 0], i + row - first, center, scale, flags, wsum, b, y,
                              logistic, sums)
        _update_row(X, row, p, G)


@numba.njit(**_JIT)
def glm(values, fill, center, scale, flags, w, b, y, logistic, grad, out):
    """Add ``X^T q`` to ``grad``, ``sum(q)`` to ``out[0]`` and the loss to ``out[1]``.

    ``z = X w + b`` with centre and scale applied to ``T' w`` as in :func:`pca`.
    """
    n = values.shape[0]
    m = w.shape[0]
    wsum = 0.0
    for j in range(m):
        wsum += w[j]
    sums = np.zeros(3)  # sum q, loss, sum c s q
    W, G, p = w.reshape((1, m)), grad.reshape((1, m)), np.zeros((1, ROWS))
    buf = np.zeros((CHUNK, m))
    in_place = _reads_in_place(values, flags[0])
    step = _chunk(n, in_place)
    for i0 in range(0, n, step):
        count = min(step, n - i0)
        rows, first = _rows(values, i0, count, fill, flags[0], buf, in_place)
        _glm_rows(rows, first, count, i0, W, G, p, center, scale, flags, wsum, b, y, logistic,
                  sums, in_place)
    if flags[1]:
        for j in range(m):
            grad[j] -= sums[2]
    out[0] += sums[0]
    out[1] += sums[1]


# ------------------------------------------------------------------- Gram, moments
@numba.njit(**_JIT)
def _transform_rows(X, first, count, i, center, scale, flags, mean, out, o):
    """``out[o + r] = (X[first + r] - c) s - mean`` for ``count`` rows, block rows ``i ..``."""
    m = out.shape[1]
    for r in range(count):
        c = center[i + r] if flags[1] else 0.0
        s = scale[i + r] if flags[2] else 1.0
        for j in range(m):
            out[o + r, j] = (X[first + r, j] - c) * s - mean[j]


@numba.njit(**_JIT)
def convert(values, fill, center, scale, flags, a, b, mean, out):
    """Write rows ``[a, b)`` as ``(filled - centre) * scale - mean`` into ``out``."""
    buf = np.zeros((CHUNK, out.shape[1]))
    in_place = _reads_in_place(values, flags[0])
    step = _chunk(b - a, in_place)
    for i0 in range(a, b, step):
        count = min(step, b - i0)
        rows, first = _rows(values, i0, count, fill, flags[0], buf, in_place)
        _transform_rows(rows, first, count, i0, center, scale, flags, mean, out, i0 - a)


@numba.njit(**_JIT)
def _add_rows(X, first, count, i, center, scale, flags, mean, sums, dev):
    """Add the transformed rows to ``sums`` (``mean`` empty), else their squared deviations
    from ``mean`` to ``dev`` and return their squared norm."""
    has_center, has_scale = flags[1], flags[2]
    sq = 0.0
    for r in range(count):
        c = center[i + r] if has_center else 0.0
        s = scale[i + r] if has_scale else 1.0
        if mean.shape[0] == 0:
            for j in range(sums.shape[0]):
                sums[j] += (X[first + r, j] - c) * s
        else:
            for j in range(dev.shape[0]):
                t = (X[first + r, j] - c) * s
                deviation = t - mean[j]
                dev[j] += deviation * deviation
                sq += t * t
    return sq


@numba.njit(**_JIT)
def _merge_tile(count, rows, tile_sum, tile_mean, tile_dev, sums, sq_dev):
    """Merge a tile of ``rows`` rows into the totals of the ``count`` before it (Chan,
    Golub and LeVeque's pairwise update)."""
    weight = count * rows / (count + rows)
    for j in range(sums.shape[0]):
        delta = tile_mean[j] - sums[j] / count if count else 0.0
        sq_dev[j] += tile_dev[j] + delta * delta * weight
        sums[j] += tile_sum[j]


@numba.njit(**_JIT)
def moments(values, fill, center, scale, flags, step, sums, sq_dev):
    """Add the column sums and squared deviations of the transformed rows; return ``|X|^2``.

    Rows are taken ``step`` at a time (the tiles of ``Block.tiles``): the tile's column
    sums, then its squared deviations, merged pairwise as ``block_stats`` does with numpy.
    """
    n = values.shape[0]
    m = sums.shape[0]
    buf = np.zeros((CHUNK, m))
    tile_sum = np.zeros(m)
    tile_mean = np.zeros(m)
    tile_dev = np.zeros(m)
    no_mean = np.zeros(0)
    in_place = _reads_in_place(values, flags[0])
    sq = 0.0
    for a in range(0, n, step):
        b = min(a + step, n)
        tile_sum[:] = 0.0
        tile_dev[:] = 0.0
        chunk = _chunk(b - a, in_place)
        for phase in range(2):  # the column sums, then the squared deviations
            mean = no_mean if phase == 0 else tile_mean
            for i0 in range(a, b, chunk):
                count = min(chunk, b - i0)
                rows, first = _rows(values, i0, count, fill, flags[0], buf, in_place)
                sq += _add_rows(rows, first, count, i0, center, scale, flags, mean, tile_sum,
                                tile_dev)
            for j in range(m):
                tile_mean[j] = tile_sum[j] / (b - a)
        _merge_tile(a, b - a, tile_sum, tile_mean, tile_dev, sums, sq_dev)
    return sq


@numba.njit(**_JIT)
def pca_gemm(values, fill, center, scale, flags, V, shift, rows, G, colsum, sq):
    """:func:`pca` by BLAS products on tiles of ``rows`` rows (converted into a float64
    tile unless read in place): ``P = T V``, the transforms on the thin ``P``, then
    ``G += T^T Q`` (``G`` is ``(d, k)``; numba's ``np.dot`` releases the GIL)."""
    n = values.shape[0]
    m, k = V.shape
    vsum = _row_sums(V.T)
    acc = np.zeros((3, k))  # 1^T P, |P_j|^2, c^T Q
    p = np.empty((rows, k))
    product = np.empty((m, k))
    in_place = _reads_in_place(values, flags[0])
    flat = np.zeros(0 if in_place else rows * m)
    for a in range(0, n, rows):
        count = min(rows, n - a)
        converted = 0 if in_place else count  # (a tile of whole rows: contiguous)
        buf = flat[: converted * m].reshape((converted, m))
        X, first = _rows(values, a, count, fill, flags[0], buf, in_place)
        T = X[first : first + count]
        q = p[:count]
        np.dot(T, V, q)
        qT = q.T  # rows as the columns _pca_weights reads
        for r in range(count):
            _pca_weights(qT, r, a + r, center, scale, flags, vsum, shift, acc)
        np.dot(T.T, q, product)
        G += product
    _pca_finish(acc, colsum, sq, G.T, flags[1])
