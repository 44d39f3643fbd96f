"""Numba bodies of the fused kernels (imported lazily by :mod:`._kernels`, never directly).

Every kernel walks a block four rows at a time. The four rows are converted into a small
float64 buffer that stays in L1 cache: int8 dosages are filled (missing -> ``fill``),
centred and scaled on the way, packed 2-bit codes go through a four-entry per-row table,
float64 rows are copied. The buffer then feeds two register-blocked loops: the
projections ``p = x V`` of the four rows (one read of each ``V`` column for four rows), and
the rank-4 update ``G^T += q^T x``. So the wide data is read once from memory, no
tile-sized float copy exists, and the transform costs a few operations per entry of an
L1-resident row instead of several passes over a wide tile.

Arrays that a block lacks (fill, centre, scale) are passed as empty arrays with a
``False`` flag, so each kernel has one compiled signature per stored dtype.
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: Rows converted and multiplied together.
ROWS = 4
#: Reassociation lets LLVM vectorise the dot products; results agree with the ordered
#: sums to rounding (the tests hold them to 1e-12).
_FAST = {"reassoc", "contract", "nsz"}
_JIT = {"cache": True, "nogil": True, "fastmath": _FAST, "error_model": "numpy"}


def _load(values, i0, nr, fill, center, scale, flags, buf):
    """Convert rows ``i0 .. i0 + nr`` into ``buf`` (dispatched on the stored dtype)."""


@numba.extending.overload(_load, jit_options=_JIT)
def _load_overload(values, i0, nr, fill, center, scale, flags, buf):
    """uint8 values are packed 2-bit codes; int8 and float64 values are dense."""
    if values.dtype == numba.types.uint8:
        return _load_packed
    return _load_dense


def _load_dense(values, i0, nr, fill, center, scale, flags, buf):
    """Convert rows ``i0 .. i0 + nr`` into ``buf`` as ``(filled - centre) * scale``."""
    m = values.shape[1]
    has_fill, has_center, has_scale = flags[0], flags[1], flags[2]
    for r in range(nr):
        i = i0 + r
        row = values[i]
        out = buf[r]
        c = center[i] if has_center else 0.0
        s = scale[i] if has_scale else 1.0
        if has_fill:
            f = fill[i]
            for j in range(m):
                t = row[j]
                v = f if t < 0 else float(t)
                out[j] = (v - c) * s
        else:
            for j in range(m):
                out[j] = (float(row[j]) - c) * s
    for r in range(nr, ROWS):
        buf[r, :] = 0.0


def _load_packed(values, i0, nr, fill, center, scale, flags, buf):
    """Decode packed rows ``i0 .. i0 + nr`` into ``buf`` through a per-row table."""
    m = buf.shape[1]
    full = m // 4
    has_fill, has_center, has_scale = flags[0], flags[1], flags[2]
    table = np.empty(4)
    for r in range(nr):
        i = i0 + r
        row = values[i]
        out = buf[r]
        c = center[i] if has_center else 0.0
        s = scale[i] if has_scale else 1.0
        for code in range(3):
            table[code] = (float(code) - c) * s
        table[3] = ((fill[i] if has_fill else -1.0) - c) * s
        for jb in range(full):
            byte = row[jb]
            out[4 * jb] = table[byte & 3]
            out[4 * jb + 1] = table[(byte >> 2) & 3]
            out[4 * jb + 2] = table[(byte >> 4) & 3]
            out[4 * jb + 3] = table[(byte >> 6) & 3]
        for j in range(4 * full, m):
            out[j] = table[(row[full] >> (2 * (j - 4 * full))) & 3]
    for r in range(nr, ROWS):
        buf[r, :] = 0.0


@numba.njit(**_JIT)
def _project(buf, VT, p):
    """``p[r, c] = buf[r] . VT[c]`` for the four buffered rows, four columns at a time."""
    k, m = VT.shape
    x0, x1, x2, x3 = buf[0], buf[1], buf[2], buf[3]
    c = 0
    while c + 4 <= k:
        v0, v1, v2, v3 = VT[c], VT[c + 1], VT[c + 2], VT[c + 3]
        a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = a20 = a21 = a22 = a23 = a30 = a31 = a32 = (
            a33
        ) = 0.0
        for j in range(m):
            y0 = x0[j]
            y1 = x1[j]
            y2 = x2[j]
            y3 = x3[j]
            w = v0[j]
            a00 += y0 * w
            a10 += y1 * w
            a20 += y2 * w
            a30 += y3 * w
            w = v1[j]
            a01 += y0 * w
            a11 += y1 * w
            a21 += y2 * w
            a31 += y3 * w
            w = v2[j]
            a02 += y0 * w
            a12 += y1 * w
            a22 += y2 * w
            a32 += y3 * w
            w = v3[j]
            a03 += y0 * w
            a13 += y1 * w
            a23 += y2 * w
            a33 += y3 * w
        p[0, c] = a00
        p[0, c + 1] = a01
        p[0, c + 2] = a02
        p[0, c + 3] = a03
        p[1, c] = a10
        p[1, c + 1] = a11
        p[1, c + 2] = a12
        p[1, c + 3] = a13
        p[2, c] = a20
        p[2, c + 1] = a21
        p[2, c + 2] = a22
        p[2, c + 3] = a23
        p[3, c] = a30
        p[3, c + 1] = a31
        p[3, c + 2] = a32
        p[3, c + 3] = a33
        c += 4
    while c + 2 <= k:
        v0, v1 = VT[c], VT[c + 1]
        a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = 0.0
        for j in range(m):
            y0 = x0[j]
            y1 = x1[j]
            y2 = x2[j]
            y3 = x3[j]
            w = v0[j]
            a00 += y0 * w
            a10 += y1 * w
            a20 += y2 * w
            a30 += y3 * w
            w = v1[j]
            a01 += y0 * w
            a11 += y1 * w
            a21 += y2 * w
            a31 += y3 * w
        p[0, c] = a00
        p[0, c + 1] = a01
        p[1, c] = a10
        p[1, c + 1] = a11
        p[2, c] = a20
        p[2, c + 1] = a21
        p[3, c] = a30
        p[3, c + 1] = a31
        c += 2
    while c < k:
        v = VT[c]
        a0 = a1 = a2 = a3 = 0.0
        for j in range(m):
            w = v[j]
            a0 += x0[j] * w
            a1 += x1[j] * w
            a2 += x2[j] * w
            a3 += x3[j] * w
        p[0, c] = a0
        p[1, c] = a1
        p[2, c] = a2
        p[3, c] = a3
        c += 1


@numba.njit(**_JIT)
def _scatter(buf, q, GT):
    """``GT[c] += sum_r q[r, c] buf[r]`` (a rank-4 update of ``G^T``), two columns at a time."""
    k, m = GT.shape
    x0, x1, x2, x3 = buf[0], buf[1], buf[2], buf[3]
    c = 0
    while c + 2 <= k:
        g0, g1 = GT[c], GT[c + 1]
        q00, q10, q20, q30 = q[0, c], q[1, c], q[2, c], q[3, c]
        q01, q11, q21, q31 = q[0, c + 1], q[1, c + 1], q[2, c + 1], q[3, c + 1]
        for j in range(m):
            y0 = x0[j]
            y1 = x1[j]
            y2 = x2[j]
            y3 = x3[j]
            g0[j] += q00 * y0 + q10 * y1 + q20 * y2 + q30 * y3
            g1[j] += q01 * y0 + q11 * y1 + q21 * y2 + q31 * y3
        c += 2
    while c < k:
        g = GT[c]
        q0, q1, q2, q3 = q[0, c], q[1, c], q[2, c], q[3, c]
        for j in range(m):
            g[j] += q0 * x0[j] + q1 * x1[j] + q2 * x2[j] + q3 * x3[j]
        c += 1


@numba.njit(**_JIT)
def pca(values, fill, center, scale, flags, VT, shift, GT, colsum, sq):
    """Add ``P^T X`` to ``GT``, ``1^T P`` to ``colsum``, ``|P_j|^2`` to ``sq``.

    ``P = X V - 1 shift^T`` with ``X`` the transformed rows and ``V = VT^T``.
    """
    n = values.shape[0]
    k, m = VT.shape
    buf = np.zeros((ROWS, m))
    p = np.zeros((ROWS, k))
    q = np.zeros((ROWS, k))
    for i0 in range(0, n, ROWS):
        nr = min(ROWS, n - i0)
        _load(values, i0, nr, fill, center, scale, flags, buf)
        _project(buf, VT, p)
        for r in range(nr):
            for col in range(k):
                value = p[r, col] - shift[col]
                colsum[col] += value
                sq[col] += value * value
                q[r, col] = value
        for r in range(nr, ROWS):
            q[r, :] = 0.0
        _scatter(buf, q, GT)


@numba.njit(**_JIT)
def glm(values, fill, center, scale, flags, w, b, y, logistic, grad, out):
    """Add ``X^T q`` to ``grad``, ``sum(q)`` to ``out[0]`` and the loss to ``out[1]``."""
    n = values.shape[0]
    m = w.shape[0]
    VT = w.reshape(1, m)
    GT = grad.reshape(1, m)
    buf = np.zeros((ROWS, m))
    p = np.zeros((ROWS, 1))
    q = np.zeros((ROWS, 1))
    total = 0.0
    loss = 0.0
    for i0 in range(0, n, ROWS):
        nr = min(ROWS, n - i0)
        _load(values, i0, nr, fill, center, scale, flags, buf)
        _project(buf, VT, p)
        for r in range(nr):
            label = y[i0 + r]
            z = p[r, 0] + b
            if logistic:
                margin = label * z
                loss, weight = _logistic_terms(margin, label, loss)
            else:
                weight = z - label
                loss += weight * weight
            total += weight
            q[r, 0] = weight
        for r in range(nr, ROWS):
            q[r, 0] = 0.0
        _scatter(buf, q, GT)
    out[0] += total
    out[1] += loss


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _logistic_terms(margin, label, loss):
    """Return ``loss + log(1 + exp(-margin))`` and ``-label expit(-margin)``, one ``exp``.

    With ``e = exp(-|margin|)``: ``log(1 + exp(-margin)) = max(-margin, 0) + log1p(e)``
    (numpy's ``logaddexp(0, -margin)``) and ``expit(-margin)`` is ``1 / (1 + e)`` for
    ``margin <= 0``, ``e / (1 + e)`` otherwise; neither overflows.
    """
    e = math.exp(-abs(margin))
    if margin > 0.0:
        return loss + math.log1p(e), -label * (e / (1.0 + e))
    return loss + (-margin + math.log1p(e)), -label * (1.0 / (1.0 + e))


@numba.njit(**_JIT)
def convert(values, a, b, fill, center, scale, flags, mean, out):
    """Write rows ``[a, b)`` as ``(filled - centre) * scale - mean`` into ``out``."""
    m = out.shape[1]
    buf = np.zeros((ROWS, m))
    for i0 in range(a, b, ROWS):
        nr = min(ROWS, b - i0)
        _load(values, i0, nr, fill, center, scale, flags, buf)
        for r in range(nr):
            row = out[i0 - a + r]
            for j in range(m):
                row[j] = buf[r, j] - mean[j]
