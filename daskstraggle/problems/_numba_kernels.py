"""Numba bodies of the fused kernels (imported lazily by :mod:`._kernels`, never directly).

Every kernel walks a block four rows at a time (a *group*). Whole groups of float64 rows
without missing entries are read in place; every other group (int8 dosages with missing
calls replaced by the row's ``fill``, packed 2-bit codes, float64 rows with missing
entries, the last partial group) is first converted to float64 into a ``4 x width``
buffer that stays in L1 cache, rows past the block's end set to zero. The four rows then
feed two loops over the features:

- the projections ``p[c, r] = x_r . V_c``, two columns of ``V`` at a time for all four
  rows (eight accumulators, each ``V`` value loaded once for four rows);
- the rank-4 update ``G^T[c] += sum_r q[c, r] x_r``, two columns of ``G^T`` at a time.

Rows read in place are projected one row at a time (each row one sequential stream from
memory), two rows at a time with a rank-2 update when ``k <= PAIRS_MAX_K`` and in the
regression kernel. Helpers are compiled into the kernels (``inline="always"``): a call per
group passing a dozen arrays costs more than the small loops it runs.

Centre ``c`` and scale ``s`` of a row act on the thin products, never on the wide rows:
``X V = s (T' V - c 1^T V)`` and ``X^T Q = T'^T (s Q) - 1 (c^T (s Q))``. So the stored bytes
are read once and no tile-sized float copy exists.

The code is plain numba (``fastmath`` reassociation lets LLVM vectorise the loops for
whatever CPU it compiles for); there is no CPU-specific code. Arrays that a block lacks
(fill, centre, scale) are passed as empty arrays with a ``False`` flag, so each kernel has
one compiled signature per stored dtype.
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: Rows converted and multiplied together.
ROWS = 4
#: Whole groups of float64 rows read in place are multiplied two rows at a time up to
#: this many columns (the rows then stream from memory at nearly the plain read's speed),
#: four rows at a time above it (each ``V`` and ``G`` value then serves four rows).
PAIRS_MAX_K = 4
#: Reassociation lets LLVM vectorise the dot products; results agree with the ordered
#: sums to rounding (the tests hold them to 1e-12).
_FAST = {"reassoc", "contract", "nsz"}
_JIT = {"cache": True, "nogil": True, "fastmath": _FAST, "error_model": "numpy"}


# ---------------------------------------------------------------------------- rows
def _load_group(values, i0, nr, fill, has_fill, buf):
    """Convert rows ``i0 .. i0 + nr`` into ``buf`` and return True, or return False when
    they can be read in place (see overload)."""


@numba.extending.overload(_load_group, jit_options=_JIT, inline="always")
def _load_group_overload(values, i0, nr, fill, has_fill, buf):
    """Dispatch on the stored dtype: uint8 rows are packed codes, int8 rows dosages,
    float64 rows read in place when the group is whole and nothing is missing."""
    if values.dtype == numba.types.float64:
        def floats(values, i0, nr, fill, has_fill, buf):
            if nr == ROWS and not has_fill:
                return False
            _convert_float(values, i0, nr, fill, has_fill, buf)
            return True

        return floats
    if values.dtype == numba.types.uint8:
        def packed(values, i0, nr, fill, has_fill, buf):
            _convert_packed(values, i0, nr, fill, has_fill, buf)
            return True

        return packed

    def dosages(values, i0, nr, fill, has_fill, buf):
        _convert_int(values, i0, nr, fill, has_fill, buf)
        return True

    return dosages


def _in_place(values, buf):
    """The array whole groups are read from: ``values`` for float64 rows, else ``buf``
    (see overload)."""


@numba.extending.overload(_in_place, jit_options=_JIT, inline="always")
def _in_place_overload(values, buf):
    """``values`` when it is float64 (typed like ``buf``), else ``buf`` (never read)."""
    if values.dtype == numba.types.float64:
        return lambda values, buf: values
    return lambda values, buf: buf


@numba.njit(**_JIT)
def _zero_rows(buf, nr):
    """Zero the rows of ``buf`` from ``nr`` on (the rows past a block's end)."""
    for r in range(nr, ROWS):
        for j in range(buf.shape[1]):
            buf[r, j] = 0.0


@numba.njit(**_JIT)
def _convert_float(values, i0, nr, fill, has_fill, buf):
    """Copy float64 rows into ``buf``, negative (missing) entries replaced by the fill."""
    m = values.shape[1]
    for r in range(nr):
        if has_fill:
            f = fill[i0 + r]
            for j in range(m):
                t = values[i0 + r, j]
                buf[r, j] = f if t < 0.0 else t
        else:
            for j in range(m):
                buf[r, j] = values[i0 + r, j]
    _zero_rows(buf, nr)


@numba.njit(**_JIT)
def _convert_int(values, i0, nr, fill, has_fill, buf):
    """Convert int8 dosages to float64 into ``buf``, missing (negative) calls filled."""
    m = values.shape[1]
    for r in range(nr):
        if has_fill:
            f = fill[i0 + r]
            for j in range(m):
                t = values[i0 + r, j]
                buf[r, j] = f if t < 0 else float(t)
        else:
            for j in range(m):
                buf[r, j] = float(values[i0 + r, j])
    _zero_rows(buf, nr)


@numba.njit(**_JIT)
def _convert_packed(values, i0, nr, fill, has_fill, buf):
    """Decode packed 2-bit codes to float64 into ``buf``, code 3 (missing) filled.

    Each row's bytes are first spread into one int8 code per call, then converted in a
    loop LLVM vectorises. Codes past the samples (the last byte's padding bits) land in
    columns of ``buf`` past the features when it is padded (``V`` is zero there).
    """
    nbytes = values.shape[1]
    m = min(buf.shape[1], 4 * nbytes)
    codes = np.empty(4 * nbytes, dtype=np.int8)
    for r in range(nr):
        f = fill[i0 + r] if has_fill else -1.0
        for jb in range(nbytes):
            byte = values[i0 + r, jb]
            codes[4 * jb] = byte & 3
            codes[4 * jb + 1] = (byte >> 2) & 3
            codes[4 * jb + 2] = (byte >> 4) & 3
            codes[4 * jb + 3] = byte >> 6
        for j in range(m):
            code = codes[j]
            buf[r, j] = f if code == 3 else float(code)
        for j in range(m, buf.shape[1]):
            buf[r, j] = 0.0
    _zero_rows(buf, nr)


# ------------------------------------------------------------------------ products
@numba.njit(inline="always", **_JIT)
def _project(X, r0, VT, p):
    """``p[c, r] = X[r0 + r] . VT[c]`` for the four rows from ``r0``, two columns at a time."""
    k, m = VT.shape
    c = 0
    while c + 2 <= k:
        a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = 0.0
        for j in range(m):
            v0 = VT[c, j]
            v1 = VT[c + 1, j]
            x0 = X[r0, j]
            x1 = X[r0 + 1, j]
            x2 = X[r0 + 2, j]
            x3 = X[r0 + 3, j]
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
            a1 += X[r0 + 1, j] * v0
            a2 += X[r0 + 2, j] * v0
            a3 += X[r0 + 3, j] * v0
        p[c, 0], p[c, 1], p[c, 2], p[c, 3] = a0, a1, a2, a3


@numba.njit(inline="always", **_JIT)
def _project_rows(X, r0, count, VT, p):
    """:func:`_project` for ``count`` rows, one row at a time, four columns at a time: for
    rows read in place from memory, each row is then read as one sequential stream."""
    k, m = VT.shape
    for r in range(count):
        row = r0 + r
        c = 0
        while c + 4 <= k:
            a0 = a1 = a2 = a3 = 0.0
            for j in range(m):
                x = X[row, j]
                a0 += x * VT[c, j]
                a1 += x * VT[c + 1, j]
                a2 += x * VT[c + 2, j]
                a3 += x * VT[c + 3, j]
            p[c, r], p[c + 1, r], p[c + 2, r], p[c + 3, r] = a0, a1, a2, a3
            c += 4
        while c < k:
            a0 = 0.0
            for j in range(m):
                a0 += X[row, j] * VT[c, j]
            p[c, r] = a0
            c += 1


@numba.njit(inline="always", **_JIT)
def _update(X, r0, q, GT):
    """``GT[c] += sum_r q[c, r] X[r0 + r]`` (a rank-4 update), two columns at a time."""
    k, m = GT.shape
    c = 0
    while c + 2 <= k:
        q00, q01, q02, q03 = q[c, 0], q[c, 1], q[c, 2], q[c, 3]
        q10, q11, q12, q13 = q[c + 1, 0], q[c + 1, 1], q[c + 1, 2], q[c + 1, 3]
        for j in range(m):
            x0 = X[r0, j]
            x1 = X[r0 + 1, j]
            x2 = X[r0 + 2, j]
            x3 = X[r0 + 3, j]
            GT[c, j] += q00 * x0 + q01 * x1 + q02 * x2 + q03 * x3
            GT[c + 1, j] += q10 * x0 + q11 * x1 + q12 * x2 + q13 * x3
        c += 2
    if c < k:
        q00, q01, q02, q03 = q[c, 0], q[c, 1], q[c, 2], q[c, 3]
        for j in range(m):
            GT[c, j] += (q00 * X[r0, j] + q01 * X[r0 + 1, j] + q02 * X[r0 + 2, j]
                         + q03 * X[r0 + 3, j])


@numba.njit(inline="always", **_JIT)
def _update2(X, r0, q, GT):
    """``GT[c] += q[c, 0] X[r0] + q[c, 1] X[r0 + 1]`` (a rank-2 update), two columns at a
    time."""
    k, m = GT.shape
    c = 0
    while c + 2 <= k:
        q00, q01, q10, q11 = q[c, 0], q[c, 1], q[c + 1, 0], q[c + 1, 1]
        for j in range(m):
            x0 = X[r0, j]
            x1 = X[r0 + 1, j]
            GT[c, j] += q00 * x0 + q01 * x1
            GT[c + 1, j] += q10 * x0 + q11 * x1
        c += 2
    if c < k:
        q00, q01 = q[c, 0], q[c, 1]
        for j in range(m):
            GT[c, j] += q00 * X[r0, j] + q01 * X[r0 + 1, j]


@numba.njit(inline="always", **_JIT)
def _pca_weights(p, i0, nr, center, scale, flags, vsum, shift, colsum, sq, correction):
    """The thin per-row products of a group, in place in ``p``: ``t = (p - c 1^T V) s -
    shift`` summed into ``colsum`` and ``sq``, then ``q = s t`` (zero for rows past the
    block's end), ``c q`` summed into ``correction``."""
    has_center, has_scale = flags[1], flags[2]
    k = p.shape[0]
    for r in range(nr):
        cr = center[i0 + r] if has_center else 0.0
        s = scale[i0 + r] if has_scale else 1.0
        for col in range(k):
            t = (p[col, r] - cr * vsum[col]) * s - shift[col]
            colsum[col] += t
            sq[col] += t * t
            weight = t * s
            p[col, r] = weight
            correction[col] += cr * weight
    for r in range(nr, ROWS):
        for col in range(k):
            p[col, r] = 0.0


@numba.njit(inline="always", **_JIT)
def _glm_weights(p, i0, nr, center, scale, flags, wsum, b, y, logistic, sums):
    """The per-row weights of a regression group, in place in ``p[0]``: ``z = (p - c
    1^T w) s + b``, the weight ``q(z, y)`` times ``s``; ``sums`` gets ``sum q``, the loss
    and ``sum c s q``."""
    has_center, has_scale = flags[1], flags[2]
    for r in range(nr):
        cr = center[i0 + r] if has_center else 0.0
        s = scale[i0 + r] if has_scale else 1.0
        label = y[i0 + r]
        z = (p[0, r] - cr * wsum) * s + b
        if logistic:
            loss, weight = _logistic_terms(label * z, label)
        else:
            weight = z - label
            loss = weight * weight
        sums[0] += weight
        sums[1] += loss
        p[0, r] = weight * s
        sums[2] += cr * p[0, r]
    for r in range(nr, ROWS):
        p[0, r] = 0.0


@numba.njit(inline="always", **_JIT)
def _glm_pair(X, i, center, scale, flags, w, wsum, b, y, logistic, grad, sums):
    """:func:`glm` on rows ``i`` and ``i + 1`` of ``X`` (read in place): two dot products,
    one row after the other, then a rank-2 update of ``grad``."""
    m = w.shape[0]
    z0 = 0.0
    for j in range(m):
        z0 += X[i, j] * w[j]
    z1 = 0.0
    for j in range(m):
        z1 += X[i + 1, j] * w[j]
    q0 = _glm_weight(z0, i, center, scale, flags, wsum, b, y, logistic, sums)
    q1 = _glm_weight(z1, i + 1, center, scale, flags, wsum, b, y, logistic, sums)
    for j in range(m):
        grad[j] += q0 * X[i, j] + q1 * X[i + 1, j]


@numba.njit(inline="always", **_JIT)
def _glm_weight(p, i, center, scale, flags, wsum, b, y, logistic, sums):
    """The weight ``s q(z, y)`` of row ``i`` from its product ``p = T'_i . w``
    (:func:`_glm_weights` for one row)."""
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


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _logistic_terms(margin, label):
    """Return ``log(1 + exp(-margin))`` and ``-label expit(-margin)``, one ``exp``.

    With ``e = exp(-|margin|)``: ``log(1 + exp(-margin)) = max(-margin, 0) + log1p(e)``
    (numpy's ``logaddexp(0, -margin)``) and ``expit(-margin)`` is ``1 / (1 + e)`` for
    ``margin <= 0``, ``e / (1 + e)`` otherwise; neither overflows.
    """
    e = math.exp(-abs(margin))
    if margin > 0.0:
        return math.log1p(e), -label * (e / (1.0 + e))
    return -margin + math.log1p(e), -label * (1.0 / (1.0 + e))


# ------------------------------------------------------------------------- kernels
def _pca_in_place(values, i0, VT, p, GT, center, scale, flags, vsum, shift, colsum, sq,
                  correction):
    """:func:`pca` on the whole group of float64 rows from ``i0``, read in place (see
    overload)."""


@numba.extending.overload(_pca_in_place, jit_options=_JIT, inline="always")
def _pca_in_place_overload(values, i0, VT, p, GT, center, scale, flags, vsum, shift, colsum,
                           sq, correction):
    """Two rows at a time up to :data:`PAIRS_MAX_K` columns, else four; nothing for other
    dtypes (never called: their groups are always converted), so their kernels do not
    compile the in-place loops."""
    if values.dtype != numba.types.float64:
        return lambda values, i0, VT, p, GT, center, scale, flags, vsum, shift, colsum, sq, \
            correction: None

    def in_place(values, i0, VT, p, GT, center, scale, flags, vsum, shift, colsum, sq,
                 correction):
        if VT.shape[0] <= PAIRS_MAX_K:
            for h in range(0, ROWS, 2):
                _project_rows(values, i0 + h, 2, VT, p)
                _pca_weights(p, i0 + h, 2, center, scale, flags, vsum, shift, colsum, sq,
                             correction)
                _update2(values, i0 + h, p, GT)
        else:
            _project_rows(values, i0, ROWS, VT, p)
            _pca_weights(p, i0, ROWS, center, scale, flags, vsum, shift, colsum, sq,
                         correction)
            _update(values, i0, p, GT)

    return in_place


def _glm_in_place(values, i0, center, scale, flags, w, wsum, b, y, logistic, grad, sums):
    """:func:`glm` on the whole group of float64 rows from ``i0``, read in place (see
    overload)."""


@numba.extending.overload(_glm_in_place, jit_options=_JIT, inline="always")
def _glm_in_place_overload(values, i0, center, scale, flags, w, wsum, b, y, logistic, grad,
                           sums):
    """Two :func:`_glm_pair` calls; nothing for other dtypes (as :func:`_pca_in_place`)."""
    if values.dtype != numba.types.float64:
        return lambda values, i0, center, scale, flags, w, wsum, b, y, logistic, grad, sums: \
            None

    def in_place(values, i0, center, scale, flags, w, wsum, b, y, logistic, grad, sums):
        _glm_pair(values, i0, center, scale, flags, w, wsum, b, y, logistic, grad, sums)
        _glm_pair(values, i0 + 2, center, scale, flags, w, wsum, b, y, logistic, grad, sums)

    return in_place


@numba.njit(**_JIT)
def pca(values, fill, center, scale, flags, VT, shift, GT, colsum, sq):
    """Add ``X^T P`` to ``GT^T``, ``1^T P`` to ``colsum``, ``|P_j|^2`` to ``sq``.

    ``P = X V - 1 shift^T`` with ``X = diag(s) (T' - c 1^T)``: the rows ``T'`` (filled)
    are multiplied as stored; centre and scale act on the thin products. ``VT`` and
    ``GT`` may be wider than the rows (zero columns, genotype rows padded).
    """
    n = values.shape[0]
    k, m = VT.shape
    buf = np.zeros((ROWS, m))
    p = np.zeros((k, ROWS))
    vsum = np.zeros(k)
    for col in range(k):
        vsum[col] = VT[col].sum()
    correction = np.zeros(k)
    for i0 in range(0, n, ROWS):
        nr = min(ROWS, n - i0)
        if _load_group(values, i0, nr, fill, flags[0], buf):
            _project(buf, 0, VT, p)
            _pca_weights(p, i0, nr, center, scale, flags, vsum, shift, colsum, sq, correction)
            _update(buf, 0, p, GT)
        else:
            _pca_in_place(values, i0, VT, p, GT, center, scale, flags, vsum, shift, colsum,
                          sq, correction)
    if flags[1]:
        for col in range(k):
            for j in range(m):
                GT[col, j] -= correction[col]


@numba.njit(**_JIT)
def glm(values, fill, center, scale, flags, w, b, y, logistic, grad, out):
    """Add ``X^T q`` to ``grad``, ``sum(q)`` to ``out[0]`` and the loss to ``out[1]``.

    ``z = X w + b`` with centre and scale applied to ``T' w`` as in :func:`pca`.
    """
    n = values.shape[0]
    m = w.shape[0]
    VT = w.reshape(1, m)
    GT = grad.reshape(1, m)
    wsum = w.sum()
    buf = np.zeros((ROWS, m))
    p = np.zeros((1, ROWS))
    sums = np.zeros(3)  # sum q, loss, sum c s q
    for i0 in range(0, n, ROWS):
        nr = min(ROWS, n - i0)
        if _load_group(values, i0, nr, fill, flags[0], buf):
            _project(buf, 0, VT, p)
            _glm_weights(p, i0, nr, center, scale, flags, wsum, b, y, logistic, sums)
            _update(buf, 0, p, GT)
        else:
            _glm_in_place(values, i0, center, scale, flags, w, wsum, b, y, logistic, grad,
                          sums)
    if flags[1]:
        for j in range(m):
            grad[j] -= sums[2]
    out[0] += sums[0]
    out[1] += sums[1]


@numba.njit(**_JIT)
def _transformed_row(X, row, out, c, s, mean):
    """``out[j] = (X[row, j] - c) s - mean[j]``."""
    for j in range(out.shape[0]):
        out[j] = (X[row, j] - c) * s - mean[j]


@numba.njit(**_JIT)
def convert(values, a, b, fill, center, scale, flags, mean, out):
    """Write rows ``[a, b)`` as ``(filled - centre) * scale - mean`` into ``out``."""
    m = out.shape[1]
    has_center, has_scale = flags[1], flags[2]
    buf = np.zeros((ROWS, m))
    rows = _in_place(values, buf)
    for i0 in range(a, b, ROWS):
        nr = min(ROWS, b - i0)
        converted = _load_group(values, i0, nr, fill, flags[0], buf)
        for r in range(nr):
            c = center[i0 + r] if has_center else 0.0
            s = scale[i0 + r] if has_scale else 1.0
            if converted:
                _transformed_row(buf, r, out[i0 - a + r], c, s, mean)
            else:
                _transformed_row(rows, i0 + r, out[i0 - a + r], c, s, mean)


@numba.njit(**_JIT)
def _add_rows(X, r0, nr, i0, center, scale, flags, mean, sums, dev):
    """Add the transformed rows ``X[r0 : r0 + nr]`` (block rows from ``i0``) to ``sums``
    (``mean`` None-like: empty) or their squared deviations from ``mean`` to ``dev``;
    return the rows' squared norm."""
    has_center, has_scale = flags[1], flags[2]
    sq = 0.0
    for r in range(nr):
        c = center[i0 + r] if has_center else 0.0
        s = scale[i0 + r] if has_scale else 1.0
        if mean.shape[0] == 0:
            for j in range(sums.shape[0]):
                sums[j] += (X[r0 + r, j] - c) * s
        else:
            for j in range(dev.shape[0]):
                t = (X[r0 + r, j] - c) * s
                deviation = t - mean[j]
                dev[j] += deviation * deviation
                sq += t * t
    return sq


@numba.njit(**_JIT)
def _tile_pass(values, fill, center, scale, flags, a, b, buf, rows, mean, sums, dev):
    """One pass over rows ``[a, b)``: column sums into ``sums`` when ``mean`` is empty,
    else squared deviations from ``mean`` into ``dev``; return the squared norm."""
    sq = 0.0
    for i0 in range(a, b, ROWS):
        nr = min(ROWS, b - i0)
        if _load_group(values, i0, nr, fill, flags[0], buf):
            sq += _add_rows(buf, 0, nr, i0, center, scale, flags, mean, sums, dev)
        else:
            sq += _add_rows(rows, i0, nr, i0, center, scale, flags, mean, sums, dev)
    return sq


@numba.njit(**_JIT)
def moments(values, fill, center, scale, flags, step, sums, sq_dev):
    """Add the column sums and squared deviations of the transformed rows; return ``|X|^2``.

    Rows are taken ``step`` at a time (the tiles of ``Block.tiles``): a first pass gives a
    tile's column sums, a second its squared deviations from the tile's means, and the
    tiles are merged with Chan, Golub and LeVeque's pairwise update, as ``block_stats``
    does with numpy. The four-row buffer is converted twice instead of keeping a float tile.
    """
    n = values.shape[0]
    m = sums.shape[0]
    buf = np.zeros((ROWS, m))
    rows = _in_place(values, buf)
    tile_sum = np.zeros(m)
    tile_mean = np.zeros(m)
    tile_dev = np.zeros(m)
    no_mean = np.zeros(0)
    count = 0
    sq = 0.0
    for a in range(0, n, step):
        b = min(a + step, n)
        rows_in_tile = b - a
        tile_sum[:] = 0.0
        tile_dev[:] = 0.0
        _tile_pass(values, fill, center, scale, flags, a, b, buf, rows, no_mean, tile_sum,
                   tile_dev)
        for j in range(m):
            tile_mean[j] = tile_sum[j] / rows_in_tile
        sq += _tile_pass(values, fill, center, scale, flags, a, b, buf, rows, tile_mean,
                         tile_sum, tile_dev)
        weight = count * rows_in_tile / (count + rows_in_tile)
        for j in range(m):
            delta = tile_mean[j] - sums[j] / count if count else 0.0
            sq_dev[j] += tile_dev[j] + delta * delta * weight
            sums[j] += tile_sum[j]
        count += rows_in_tile
    return sq


@numba.njit(**_JIT)
def pca_gemm(values, center, scale, flags, V, shift, step, G, colsum, sq):
    """:func:`pca` for float64 rows without missing entries, by BLAS products on row tiles.

    For each tile of ``step`` rows ``T``: ``P = T V`` (``dgemm``), the transforms applied to
    the thin ``P`` as in :func:`pca`, then ``G += T^T Q`` (``dgemm`` again, the tile still in
    cache). numba's ``np.dot`` calls scipy's BLAS without the GIL. ``G`` is ``(d, k)``.
    """
    n = values.shape[0]
    m, k = V.shape
    p = np.empty((step, k))
    product = np.empty((m, k))
    vsum = np.zeros(k)
    for j in range(m):
        for col in range(k):
            vsum[col] += V[j, col]
    correction = np.zeros(k)
    has_center, has_scale = flags[1], flags[2]
    for a in range(0, n, step):
        b = min(a + step, n)
        q = p[: b - a]
        np.dot(values[a:b], V, q)
        for r in range(b - a):
            c = center[a + r] if has_center else 0.0
            s = scale[a + r] if has_scale else 1.0
            for col in range(k):
                t = (q[r, col] - c * vsum[col]) * s - shift[col]
                colsum[col] += t
                sq[col] += t * t
                q[r, col] = t * s
                correction[col] += c * q[r, col]
        np.dot(values[a:b].T, q, product)
        G += product
    if has_center:
        G -= correction
