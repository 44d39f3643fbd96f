"""Numba bodies of the fused kernels (imported lazily by :mod:`._kernels`, never directly).

Every kernel walks a block four rows at a time. float64 rows are read in place; int8
dosages (missing -> ``fill``) and packed 2-bit codes are converted to float64 into a small
buffer that stays in L1 cache, on AVX-512 CPUs inside the first projection loop
(:func:`_project_codes`). The four rows then feed two register-blocked loops, written in
LLVM IR: the projections ``p = x V`` (each ``V`` column read once for four rows) and the
rank-4 update ``G^T += q^T x``. Centre and scale are applied to the thin products (``k``
values per row, :func:`_thin_group`), not to the wide rows. So the stored bytes are read
once from memory and no tile-sized float copy exists. :func:`pca` takes ``VT`` and ``GT``
as wide as its buffer: the caller pads genotype rows to whole 512-bit vectors and
allocates both on 64-byte boundaries. Rows are prefetched one row at a time, at four
points of each group, a group (float64) or two (genotypes) ahead. No array crosses a call
in the group loop: the products take the rows as an address (:func:`_row_address`), since
numba's reference counting of arrays passed back and forth costs atomic instructions.

The LLVM IR (the products, the conversion, the intrinsics the loops branch on) is in
:mod:`._numba_ir`. numba's on-disk cache of a function is invalidated only by changes to
the file that defines it, and an intrinsic's code is compiled into the kernels that call
it, so this module records the digest of that file (:data:`IR_DIGEST`): an edit there must
be followed by updating the digest here, which makes numba recompile the kernels. A test
fails, naming the new digest, until that is done.

Arrays that a block lacks (fill, centre, scale) are passed as empty arrays with a
``False`` flag, so each kernel has one compiled signature per stored dtype.

Each kernel function calls :func:`_wide_vectors` so that LLVM vectorises it with 512-bit
registers on AVX-512 CPUs (its default tuning there prefers 256 bits): the int8
conversion and the FMAs then run twice as wide (docs/kernels.md). On those CPUs int8 and
packed dosages are converted eight at a time by a table permute (:func:`._numba_ir._decode8`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from daskstraggle.problems._numba_ir import (
    PERMUTE,
    ROWS,
    _codes1,
    _codes2,
    _codes4,
    _codes5,
    _codes_usable,
    _dosage_span,
    _in_place,
    _lookup8,
    _prefetch_rows,
    _project1,
    _project2,
    _project4,
    _project5,
    _row_address,
    _scatter1,
    _scatter2,
    _scatter4,
    _scatter5,
    _thin_group,
    _wide_vectors,
)

#: sha256 of ``_numba_ir.py``: changing it is what makes numba recompile the kernels after
#: an edit of the IR (module docstring; a test checks that it matches).
IR_DIGEST = "4dedf1055a18c8231ff5c5a0c0f2bcea976f09226c75ef424b19bf2b07604a3c"
#: Rows are prefetched this far ahead, one row at each of four points of a group
#: (:func:`_ahead`): one group for float64 rows, two for genotype rows (docs/kernels.md).
AHEAD_FLOAT = ROWS
AHEAD_GENOTYPES = 2 * ROWS
#: Reassociation lets LLVM vectorise the dot products; results agree with the ordered
#: sums to rounding (the tests hold them to 1e-12).
_FAST = {"reassoc", "contract", "nsz"}
_JIT = {"cache": True, "nogil": True, "fastmath": _FAST, "error_model": "numpy"}


def _ahead(values):
    """Rows between a row's prefetch and its use: :data:`AHEAD_FLOAT` for float64 rows,
    :data:`AHEAD_GENOTYPES` for int8 and packed rows (see overload)."""


@numba.extending.overload(_ahead, jit_options=_JIT)
def _ahead_overload(values):
    """The kernels prefetch the rows of a later group one row at a time, at four points of
    each group, so the misses spread over the group's work instead of queueing at its start
    (prefetching a whole group at once was slower than none: the fill buffers ran out)."""
    rows = AHEAD_FLOAT if values.dtype == numba.types.float64 else AHEAD_GENOTYPES
    return lambda values: rows


def _load_rows(values, i0, nr, fill, has_fill, buf):
    """Convert rows ``i0 .. i0 + nr`` to float64 with missing entries filled into ``buf``
    (zero rows past ``nr``) and return its address (see overload)."""


@numba.extending.overload(_load_rows, jit_options=_JIT)
def _load_rows_overload(values, i0, nr, fill, has_fill, buf):
    """Dispatch on the stored dtype: uint8 rows are packed codes, int8 rows dosages, float64
    rows copied. One call, returning an integer: a call returning an array costs two
    atomic reference-count updates, and numba-level inlining of this one added six."""
    if values.dtype == numba.types.uint8:
        return _decode_packed_permute if PERMUTE else _decode_packed
    return _int_rows_permute if PERMUTE and values.dtype == numba.types.int8 else _int_rows


def _rows(values, i0, nr, fill, has_fill, buf):
    """Return rows ``i0 .. i0 + nr`` as a float64 array with missing entries filled: the
    rows of ``values`` in place or ``buf`` (:func:`convert`, :func:`moments`; see overload)."""


@numba.extending.overload(_rows, jit_options=_JIT)
def _rows_overload(values, i0, nr, fill, has_fill, buf):
    """float64 rows are used in place when the group is whole and nothing is missing."""
    if values.dtype == numba.types.float64:
        def in_place(values, i0, nr, fill, has_fill, buf):
            if nr == ROWS and not has_fill:
                return values[i0 : i0 + ROWS]
            _load_rows(values, i0, nr, fill, has_fill, buf)
            return buf

        return in_place

    def converted(values, i0, nr, fill, has_fill, buf):
        _load_rows(values, i0, nr, fill, has_fill, buf)
        return buf

    return converted


def _int_rows_permute(values, i0, nr, fill, has_fill, buf):
    """int8 rows through :func:`_lookup8` (:func:`_permute_row`) when they hold only -1..2,
    checked together as one span (:func:`_dosage_span`); rows of a group with any other
    value (a tetraploid dosage, -2), and groups of fewer than 64 calls, are converted value
    by value (:func:`_convert_dense`). The fallback is one call for the whole group: with a
    second inlined copy of the row loop per row the kernels ran ~15 % slower
    (docs/kernels.md)."""
    _wide_vectors()
    m = values.shape[1]
    if m < 8 or nr * m < 64 or not _dosage_span(values, i0, nr):
        _convert_dense(values, i0, nr, fill, has_fill, buf)
        return _row_address(buf, 0)
    width = buf.shape[1]
    for r in range(nr):
        _permute_row(values, (i0 + r) * m, m, buf, r * width, fill[i0 + r] if has_fill else -1.0)
    for r in range(nr, ROWS):
        buf[r, :] = 0.0
    return _row_address(buf, 0)


@numba.njit(**_JIT)
def _permute_row(values, src, m, buf, dst, missing):
    """Convert the ``m`` int8 calls (only -1..2, at least eight) from flat offset ``src`` of
    ``values`` into ``buf`` from flat offset ``dst``, eight calls at a time, the last eight
    overlapping the previous ones when ``m`` is not a multiple of 8. Offsets into the 2-D
    arrays instead of row views: a view per row costs two reference-count updates."""
    _wide_vectors()
    full = m - m % 8
    j = 0
    while j + 32 <= full:
        _lookup8(values, src + j, missing, dst + j, buf)
        _lookup8(values, src + j + 8, missing, dst + j + 8, buf)
        _lookup8(values, src + j + 16, missing, dst + j + 16, buf)
        _lookup8(values, src + j + 24, missing, dst + j + 24, buf)
        j += 32
    while j < full:
        _lookup8(values, src + j, missing, dst + j, buf)
        j += 8
    if full < m:
        _lookup8(values, src + m - 8, missing, dst + m - 8, buf)


def _decode_packed_permute(values, i0, nr, fill, has_fill, buf):
    """Packed rows through :func:`_lookup8`, eight calls (two bytes) at a time; four
    calls left over are decoded with the previous four (an overlapping pair of bytes)."""
    _wide_vectors()
    m = _packed_width(values, buf)
    pairs = m // 8
    overlap = m - 8 * pairs == 4 and pairs > 0
    tail = m if overlap else 8 * pairs
    nbytes, width = values.shape[1], buf.shape[1]
    for r in range(nr):
        src, dst = (i0 + r) * nbytes, r * width  # flat offsets, no row views
        missing = fill[i0 + r] if has_fill else -1.0
        for jb in range(pairs):
            _lookup8(values, src + 2 * jb, missing, dst + 8 * jb, buf)
        if overlap:
            _lookup8(values, src + 2 * pairs - 1, missing, dst + 8 * pairs - 4, buf)
        for j in range(tail, m):  # rows of fewer than eight calls (no heap table per group)
            code = (values[i0 + r, j // 4] >> (2 * (j % 4))) & 3
            buf[r, j] = missing if code == 3 else float(code)
    for r in range(nr, ROWS):
        buf[r, :] = 0.0
    return _row_address(buf, 0)


@numba.njit(**_JIT)
def _packed_width(values, buf):
    """Codes to decode per packed row: the buffer's width, or the row's whole bytes when the
    buffer is padded wider (:func:`pca`); codes past the samples (the last byte's padding
    bits) then meet zero columns of ``V`` and land in dropped columns of ``G``."""
    return min(buf.shape[1], 4 * values.shape[1])


def _int_rows(values, i0, nr, fill, has_fill, buf):
    _wide_vectors()
    _convert_dense(values, i0, nr, fill, has_fill, buf)
    return _row_address(buf, 0)


@numba.njit(**_JIT)
def _convert_dense(values, i0, nr, fill, has_fill, buf):
    """Write rows ``i0 .. i0 + nr`` to ``buf`` as float64, missing entries filled."""
    _wide_vectors()
    m = values.shape[1]
    for r in range(nr):
        row = values[i0 + r]
        out = buf[r]
        if has_fill:
            f = fill[i0 + r]
            for j in range(m):
                t = row[j]
                out[j] = f if t < 0 else float(t)
        else:
            for j in range(m):
                out[j] = float(row[j])
    for r in range(nr, ROWS):
        buf[r, :] = 0.0


def _decode_packed(values, i0, nr, fill, has_fill, buf):
    _wide_vectors()
    m = _packed_width(values, buf)
    full = m // 4
    table = np.array([0.0, 1.0, 2.0, -1.0])
    for r in range(nr):
        row = values[i0 + r]
        out = buf[r]
        table[3] = fill[i0 + r] if has_fill else -1.0
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
    return _row_address(buf, 0)


@numba.njit(inline="always", **_JIT)
def _project_first_codes(values, i0, fill, flags, VT, p, buf):
    """:func:`_project_codes` for the first block of :func:`_project`; return its columns."""
    k = VT.shape[0]
    if k == 5:
        _codes5(values, i0, fill, flags, VT, p, buf)
        return 5
    if k >= 4:
        _codes4(values, i0, fill, flags, VT, p, buf)
        return 4
    if k >= 2:
        _codes2(values, i0, fill, flags, VT, p, buf)
        return 2
    _codes1(values, i0, fill, flags, VT, p, buf)
    return 1


@numba.njit(inline="always", **_JIT)
def _project(x, VT, p, start):
    """``p[c, r] = x[r] . VT[c]`` for the four rows at address ``x`` (:func:`_load_rows`)
    and the columns from ``start`` on (:func:`_project_first_codes` may have projected
    the first block), over ``VT.shape[1]`` values, four columns at a time (the last five together
    when ``k`` is 5, 9, 13, ...)."""
    k = VT.shape[0]
    c = start
    while c + 4 <= k and c + 5 != k:
        _project4(x, VT, c, p)
        c += 4
    if c + 5 == k:
        _project5(x, VT, c, p)
        c += 5
    while c + 2 <= k:
        _project2(x, VT, c, p)
        c += 2
    if c < k:
        _project1(x, VT, c, p)


@numba.njit(inline="always", **_JIT)
def _scatter(x, q, GT):
    """``GT[c] += sum_r q[c, r] x[r]`` (a rank-4 update of ``G^T``) for the four rows at
    address ``x``, over ``GT.shape[1]`` values, four columns at a time (the last five
    together when ``k`` is 5, 9, 13, ...)."""
    k = GT.shape[0]
    c = 0
    while c + 4 <= k and c + 5 != k:
        _scatter4(x, GT, c, q)
        c += 4
    if c + 5 == k:
        _scatter5(x, GT, c, q)
        c += 5
    while c + 2 <= k:
        _scatter2(x, GT, c, q)
        c += 2
    if c < k:
        _scatter1(x, GT, c, q)


@numba.njit(**_JIT)
def _aligned_zeros(rows, m):
    """A zeroed ``(rows, m)`` float64 array whose data starts on a 64-byte boundary, so a
    row of a multiple of eight values never has a 512-bit load or store straddling two
    cache lines (numba's own arrays are only promised 32-byte alignment)."""
    raw = np.zeros(rows * m + 8)
    skip = ((64 - raw.ctypes.data % 64) % 64) // 8
    return raw[skip : skip + rows * m].reshape(rows, m)


@numba.njit(inline="always", **_JIT)
def _thin_rows(p, q, first, count, center, scale, flags, vsum, shift, colsum, sq, correction):
    """The thin per-row products of rows ``first .. first + count`` (:func:`pca_gemm`):
    ``t = (p - c 1^T V) s - shift`` summed into ``colsum`` and ``sq``, ``q = s t``, ``c q``
    summed into ``correction``; ``p`` and ``q`` may be one array."""
    has_center, has_scale = flags[1], flags[2]
    for r in range(count):
        c = center[first + r] if has_center else 0.0
        s = scale[first + r] if has_scale else 1.0
        for col in range(vsum.shape[0]):
            value = (p[r, col] - c * vsum[col]) * s - shift[col]
            colsum[col] += value
            sq[col] += value * value
            q[r, col] = value * s
            correction[col] += c * q[r, col]


@numba.njit(**_JIT)
def pca(values, fill, center, scale, flags, VT, shift, GT, colsum, sq):
    """Add ``X^T P`` to ``GT^T``, ``1^T P`` to ``colsum``, ``|P_j|^2`` to ``sq``.

    ``P = X V - 1 shift^T`` with ``X = diag(s) (T' - c 1^T)``: the rows ``T'`` (filled)
    are multiplied as stored; centre and scale act on the thin products,
    ``X V = s (T' V - c (1^T V))`` and ``X^T Q = T'^T (s Q) - 1 (c^T (s Q))``.
    """
    _wide_vectors()
    n = values.shape[0]
    k, m = VT.shape
    ahead = _ahead(values)
    buf = _aligned_zeros(ROWS, m)
    p = np.zeros((k, ROWS))
    q = np.zeros((k, ROWS))
    vsum = np.zeros(k)
    for col in range(k):
        vsum[col] = VT[col].sum()
    acc = np.zeros((3, k, ROWS))
    for i0 in range(0, n, ROWS):
        nr = min(ROWS, n - i0)
        _prefetch_rows(values, i0 + ahead, 1)
        # written out in pca and glm: as a numba-inlined function the branch made numba
        # add an atomic incref and decref per array argument (docs/kernels.md)
        done = 0  # columns projected with the conversion (_project_codes)
        if _in_place(values, nr, flags, buf):
            rows = _row_address(values, i0)
        elif _codes_usable(values, i0, nr, VT, buf):
            done = _project_first_codes(values, i0, fill, flags, VT, p, buf)
            rows = _row_address(buf, 0)
        else:
            rows = _load_rows(values, i0, nr, fill, flags[0], buf)
        _prefetch_rows(values, i0 + ahead + 1, 1)
        _project(rows, VT, p, done)
        _prefetch_rows(values, i0 + ahead + 2, 1)
        _thin_group(p, q, center, scale, flags, i0, nr, vsum, shift, acc)
        _prefetch_rows(values, i0 + ahead + 3, 1)
        _scatter(rows, q, GT)
    for col in range(k):
        colsum[col] += acc[0, col].sum()
        sq[col] += acc[1, col].sum()
        if flags[1]:
            GT[col] -= acc[2, col].sum()


@numba.njit(**_JIT)
def glm(values, fill, center, scale, flags, w, b, y, logistic, grad, out):
    """Add ``X^T q`` to ``grad``, ``sum(q)`` to ``out[0]`` and the loss to ``out[1]``.

    ``z = X w + b`` with centre and scale applied to ``T' w`` as in :func:`pca`.
    """
    _wide_vectors()
    n = values.shape[0]
    m = w.shape[0]
    ahead = _ahead(values)
    has_center, has_scale = flags[1], flags[2]
    VT = w.reshape(1, m)
    GT = grad.reshape(1, m)
    wsum = w.sum()
    buf = _aligned_zeros(ROWS, m)
    p = np.zeros((1, ROWS))
    q = np.zeros((1, ROWS))
    total = 0.0
    loss = 0.0
    correction = 0.0
    for i0 in range(0, n, ROWS):
        nr = min(ROWS, n - i0)
        _prefetch_rows(values, i0 + ahead, 1)
        # written out in pca and glm: as a numba-inlined function the branch made numba
        # add an atomic incref and decref per array argument (docs/kernels.md)
        done = 0  # columns projected with the conversion (_project_codes)
        if _in_place(values, nr, flags, buf):
            rows = _row_address(values, i0)
        elif _codes_usable(values, i0, nr, VT, buf):
            done = _project_first_codes(values, i0, fill, flags, VT, p, buf)
            rows = _row_address(buf, 0)
        else:
            rows = _load_rows(values, i0, nr, fill, flags[0], buf)
        _prefetch_rows(values, i0 + ahead + 1, 1)
        _project(rows, VT, p, done)
        _prefetch_rows(values, i0 + ahead + 2, 1)
        for r in range(nr):
            c = center[i0 + r] if has_center else 0.0
            s = scale[i0 + r] if has_scale else 1.0
            label = y[i0 + r]
            z = (p[0, r] - c * wsum) * s + b
            if logistic:
                loss, weight = _logistic_terms(label * z, label, loss)
            else:
                weight = z - label
                loss += weight * weight
            total += weight
            q[0, r] = weight * s
            correction += c * q[0, r]
        for r in range(nr, ROWS):
            q[0, r] = 0.0
        _prefetch_rows(values, i0 + ahead + 3, 1)
        _scatter(rows, q, GT)
    if has_center:
        grad -= correction
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
    _wide_vectors()
    m = out.shape[1]
    has_fill, has_center, has_scale = flags[0], flags[1], flags[2]
    buf = _aligned_zeros(ROWS, m)
    for i0 in range(a, b, ROWS):
        nr = min(ROWS, b - i0)
        rows = _rows(values, i0, nr, fill, has_fill, buf)
        for r in range(nr):
            c = center[i0 + r] if has_center else 0.0
            s = scale[i0 + r] if has_scale else 1.0
            row = out[i0 - a + r]
            for j in range(m):
                row[j] = (rows[r, j] - c) * s - mean[j]


@numba.njit(**_JIT)
def moments(values, fill, center, scale, flags, step, sums, sq_dev):
    """Add the column sums and squared deviations of the transformed rows; return ``|X|^2``.

    Rows are taken ``step`` at a time (the tiles of ``Block.tiles``): a first pass gives a
    tile's column sums, a second its squared deviations from the tile's means, and the
    tiles are merged with Chan, Golub and LeVeque's pairwise update, as ``block_stats``
    does with numpy. The four-row buffer is converted twice instead of keeping a float tile.
    """
    _wide_vectors()
    n = values.shape[0]
    m = sums.shape[0]
    has_fill, has_center, has_scale = flags[0], flags[1], flags[2]
    buf = _aligned_zeros(ROWS, m)
    tile_sum = np.zeros(m)
    tile_mean = np.zeros(m)
    tile_dev = np.zeros(m)
    count = 0
    sq = 0.0
    for a in range(0, n, step):
        b = min(a + step, n)
        rows_in_tile = b - a
        tile_sum[:] = 0.0
        tile_dev[:] = 0.0
        for i0 in range(a, b, ROWS):
            nr = min(ROWS, b - i0)
            rows = _rows(values, i0, nr, fill, has_fill, buf)
            for r in range(nr):
                c = center[i0 + r] if has_center else 0.0
                s = scale[i0 + r] if has_scale else 1.0
                row = rows[r]
                for j in range(m):
                    tile_sum[j] += (row[j] - c) * s
        for j in range(m):
            tile_mean[j] = tile_sum[j] / rows_in_tile
        for i0 in range(a, b, ROWS):
            nr = min(ROWS, b - i0)
            rows = _rows(values, i0, nr, fill, has_fill, buf)
            for r in range(nr):
                c = center[i0 + r] if has_center else 0.0
                s = scale[i0 + r] if has_scale else 1.0
                row = rows[r]
                for j in range(m):
                    t = (row[j] - c) * s
                    dev = t - tile_mean[j]
                    tile_dev[j] += dev * dev
                    sq += t * t
        if count == 0:
            for j in range(m):
                sq_dev[j] += tile_dev[j]
        else:
            weight = count * rows_in_tile / (count + rows_in_tile)
            for j in range(m):
                delta = tile_mean[j] - sums[j] / count
                sq_dev[j] += tile_dev[j] + delta * delta * weight
        for j in range(m):
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
    has_center = flags[1]
    p = np.empty((step, k))
    product = np.empty((m, k))
    vsum = np.zeros(k)
    for j in range(m):
        for col in range(k):
            vsum[col] += V[j, col]
    correction = np.zeros(k)
    for a in range(0, n, step):
        b = min(a + step, n)
        tile = values[a:b]
        q = p[: b - a]
        np.dot(tile, V, q)
        _thin_rows(q, q, a, b - a, center, scale, flags, vsum, shift, colsum, sq, correction)
        np.dot(tile.T, q, product)
        for j in range(m):
            for col in range(k):
                G[j, col] += product[j, col]
    if has_center:
        for j in range(m):
            for col in range(k):
                G[j, col] -= correction[col]
