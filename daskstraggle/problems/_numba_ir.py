"""LLVM IR of the fused kernels: numba intrinsics and the builders behind them.

The register-blocked products (:func:`_project_block`, :func:`_scatter_block`), the
genotype conversion inside the first projection loop (:func:`_project_codes`), the thin
per-row products (:func:`_thin_group`), the table-permute dosage conversion
(:func:`_decode8`, :func:`_lookup8`), prefetching and the small intrinsics the kernel loops
branch on. The kernels themselves are in :mod:`._numba_kernels`, which records a digest of
this file (``IR_DIGEST``): numba's on-disk cache of a kernel is invalidated only by a change
of the kernel's own file, and an intrinsic's code is compiled into the kernel, so an edit
here must change that file too. A test fails until the digest matches (docs/kernels.md).
"""

from __future__ import annotations

import functools

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

#: Rows converted and multiplied together.
ROWS = 4


@intrinsic
def _wide_vectors(typingctx):
    """Let LLVM vectorise the calling function with 512-bit registers where there are any.

    LLVM's tuning for AVX-512 Xeons prefers 256-bit vectors (``prefer-vector-width``),
    which halves the FMA throughput of the register-blocked loops on CPUs with two 512-bit
    FMA units. This sets the LLVM function attributes ``"prefer-vector-width"="512"`` and
    ``"min-legal-vector-width"="512"`` on the calling function only (numba's process-wide
    ``NUMBA_CPU_FEATURES`` would change every user's numba code as well). CPUs without
    AVX-512 ignore them. llvmlite has no API for string attributes, so they are added to its
    attribute set directly; if that ever fails the function compiles as before.
    """
    def codegen(context, builder, signature, args):
        try:
            for attribute in ('"prefer-vector-width"="512"', '"min-legal-vector-width"="512"'):
                set.add(builder.function.attributes, attribute)
        except Exception:  # pragma: no cover - a future llvmlite without the set
            pass
        return context.get_dummy_value()

    return types.none(), codegen


def _host_has_avx512() -> bool:
    """Whether numba compiles for this host (no ``NUMBA_CPU_NAME`` or
    ``NUMBA_CPU_FEATURES``) and it has AVX-512 (F and BW). numba's cache is keyed by the
    CPU name and features, so code compiled here is not loaded on another CPU."""
    try:
        import llvmlite.binding

        features = llvmlite.binding.get_host_cpu_features()
        host = numba.config.CPU_NAME in (None, "host") and not numba.config.CPU_FEATURES
        return bool(host and features.get("avx512f") and features.get("avx512bw"))
    except Exception:  # pragma: no cover - an llvmlite without the query
        return False


#: Convert dosages with a 512-bit table permute (:func:`_decode8`) instead of per-value
#: conversion and select.
PERMUTE = _host_has_avx512()
_VD = ir.VectorType(ir.DoubleType(), 8)
_VI = ir.VectorType(ir.IntType(64), 8)
_I32 = ir.IntType(32)


def _splat(builder, value, lanes):
    """``value`` (a scalar IR value) in each of ``lanes`` lanes."""
    vector = ir.VectorType(value.type, lanes)
    lane = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(lane, ir.Constant(vector, ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes))


def _require_contiguous(name, *arrays):
    """Refuse to type an intrinsic on arrays that are not C-contiguous: the intrinsics
    address rows and elements as ``data + offset``, which only holds for those."""
    for array in arrays:
        if not isinstance(array, types.Array) or array.layout != "C":
            raise numba.core.errors.TypingError(f"{name} needs C-contiguous arrays, got {array}")


#: How eight calls are read (:func:`_decode8`): bits loaded, shift per lane, and the table
#: (None: the row's missing value), for int8 dosages and packed 2-bit codes.
_CODES = {types.int8: (64, 8, (0.0, 1.0, 2.0, None, None, None, None, None)),
          types.uint8: (16, 2, (0.0, 1.0, 2.0, None, 0.0, 1.0, 2.0, None))}


def _code_table(builder, dtype, missing):
    """The lookup table of :data:`_CODES` for ``dtype`` with ``missing`` filled in."""
    table = _CODES[dtype][2]
    lookup = ir.Constant(_VD, [0.0 if v is None else v for v in table])
    for i, v in enumerate(table):
        if v is None:
            lookup = builder.insert_element(lookup, missing, ir.Constant(_I32, i))
    return lookup


def _decode8(builder, pointer, dtype, lookup, drop=None):
    """Eight calls read at ``pointer`` (an ``i8*``) as float64 through ``lookup``; with
    ``drop``, that many low bits of the loaded word are discarded first (a row's last,
    overlapping load; the lanes past the row then read 0)."""
    width, shift, _ = _CODES[dtype]
    word = builder.load(builder.bitcast(pointer, ir.IntType(width).as_pointer()), align=1)
    if width < 64:
        word = builder.zext(word, ir.IntType(64))
    if drop is not None:
        word = builder.lshr(word, drop)
    vector = _splat(builder, word, 8)
    index = builder.lshr(vector, ir.Constant(_VI, [shift * i for i in range(8)]))
    permute = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_VD, [_VD, _VI]), "llvm.x86.avx512.permvar.df.512")
    return builder.call(permute, [lookup, index])


def _lookup8_codegen(dtype):
    """Return the codegen of :func:`_lookup8` for ``dtype`` (see its docstring)."""

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, args[0])
        dst = context.make_array(signature.args[4])(context, builder, args[4])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        to = context.cast(builder, args[3], signature.args[3], types.intp)
        missing = context.cast(builder, args[2], signature.args[2], types.float64)
        pointer = builder.bitcast(builder.gep(src.data, [at]), ir.IntType(8).as_pointer())
        value = _decode8(builder, pointer, dtype, _code_table(builder, dtype, missing))
        out = builder.bitcast(builder.gep(dst.data, [to]), _VD.as_pointer())
        builder.store(value, out, align=8)
        return context.get_dummy_value()

    return codegen


@intrinsic
def _lookup8(typingctx, row, at, missing, to, out):
    """Write eight dosages starting at byte ``at`` of ``row`` to ``out[to : to + 8]``
    (``at`` and ``to`` are flat offsets when the arrays are 2-D and C-contiguous).

    int8 rows (one byte per call, values -1..2): the eight bytes are loaded as one 64-bit
    word, broadcast to the eight 64-bit lanes, lane ``i`` shifted right by ``8 i``, and its
    low three bits index the table ``0, 1, 2, m, m, m, m, m`` with ``vpermpd`` (``m`` =
    ``missing``; -1 is 7). Packed rows (uint8, four 2-bit codes per byte): 16 bits, lane
    ``i`` shifted by ``2 i``, table ``0, 1, 2, m, 0, 1, 2, m`` (the third bit is the next
    code's, ignored). One load, one shift and one permute per eight values, where the
    per-value conversion needs a widening, a conversion and a select (docs/kernels.md).
    AVX-512 only (:data:`PERMUTE`).
    """
    _require_contiguous("_lookup8", row, out)
    return types.void(row, at, missing, to, out), _lookup8_codegen(row.dtype)


@intrinsic
def _prefetch_rows(typingctx, values, i0, count):
    """Prefetch (``prefetcht0``) every 64-byte line of rows ``i0 .. i0 + count`` of the
    C-contiguous 2-D ``values``, clipped to its last row; nothing past the end is touched
    (prefetches do not fault, but the address is kept inside the array anyway)."""
    _require_contiguous("_prefetch_rows", values)
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, args[0])
        first = context.cast(builder, args[1], signature.args[1], types.intp)
        rows = context.cast(builder, args[2], signature.args[2], types.intp)
        n, width = cgutils.unpack_tuple(builder, src.shape, 2)
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(
            context.get_data_type(signature.args[0].dtype)))
        stop = builder.select(builder.icmp_signed("<", builder.add(first, rows), n),
                              builder.add(first, rows), n)
        start_byte = builder.mul(builder.mul(first, width), itemsize)
        stop_byte = builder.mul(builder.mul(stop, width), itemsize)
        base = builder.bitcast(src.data, i8p)
        prefetch = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        with cgutils.for_range_slice(builder, start_byte, stop_byte,
                                     ir.Constant(width.type, 64), width.type) as (offset, _):
            builder.call(prefetch, [builder.gep(base, [offset]), ir.Constant(i32, 0),
                                    ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(values, i0, count), codegen


def _span_in_range(builder, base, nbytes):
    """Whether the ``nbytes`` (at least 64) int8 at ``base`` hold only -1..2: each 64-byte
    vector plus one is folded into a running unsigned maximum (``vpmaxub``), the last 64
    bytes overlapping the previous vector, one compare and mask test at the end."""
    vector = ir.VectorType(ir.IntType(8), 64)
    last = builder.sub(nbytes, ir.Constant(nbytes.type, 64))
    one = ir.Constant(vector, [1] * 64)
    acc = cgutils.alloca_once_value(builder, ir.Constant(vector, [0] * 64))

    def fold(offset):
        pointer = builder.bitcast(builder.gep(base, [offset]), vector.as_pointer())
        shifted = builder.add(builder.load(pointer, align=1), one)
        current = builder.load(acc)
        larger = builder.icmp_unsigned(">", shifted, current)
        builder.store(builder.select(larger, shifted, current), acc)

    with cgutils.for_range_slice(builder, ir.Constant(nbytes.type, 0), last,
                                 ir.Constant(nbytes.type, 64), nbytes.type) as (offset, _):
        fold(offset)
    fold(last)
    inside = builder.icmp_unsigned("<", builder.load(acc), ir.Constant(vector, [4] * 64))
    mask = builder.bitcast(inside, ir.IntType(64))
    return builder.icmp_unsigned("==", mask, ir.Constant(ir.IntType(64), -1))


@intrinsic
def _dosage_span(typingctx, values, i0, count):
    """Whether rows ``i0 .. i0 + count`` of the C-contiguous int8 ``values`` hold only
    -1..2, checked as one span of ``count * m`` bytes (at least 64,
    :func:`_span_in_range`): ~36 cycles for a group of four 300-call rows."""
    _require_contiguous("_dosage_span", values)

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, args[0])
        first = context.cast(builder, args[1], signature.args[1], types.intp)
        rows = context.cast(builder, args[2], signature.args[2], types.intp)
        width = cgutils.unpack_tuple(builder, src.shape, 2)[1]
        base = builder.gep(src.data, [builder.mul(first, width)])
        return _span_in_range(builder, base, builder.mul(rows, width))

    return types.boolean(values, i0, count), codegen


@intrinsic
def _row_address(typingctx, values, row):
    """The address of row ``row`` of the C-contiguous 2-D ``values``, as an integer: the
    products take the rows they read as an address, so no array crosses a call in the
    group loop (a function returning an array costs two atomic reference-count updates,
    each waiting for the stores before it; docs/kernels.md)."""
    _require_contiguous("_row_address", values)

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, args[0])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        width = cgutils.unpack_tuple(builder, src.shape, 2)[1]
        pointer = builder.gep(src.data, [builder.mul(at, width)])
        return builder.ptrtoint(pointer, context.get_value_type(types.intp))

    return types.intp(values, row), codegen


@intrinsic
def _in_place(typingctx, values, nr, flags, buf):
    """Whether the kernels read the group's rows where they are stored: float64 rows of a
    whole group, as wide as ``buf`` and without a fill (``flags[0]``); constant false for
    other dtypes, so the branch is compiled away."""
    _require_contiguous("_in_place", values, flags, buf)
    floats = values.dtype == types.float64

    def codegen(context, builder, signature, args):
        if not floats:
            return ir.Constant(ir.IntType(1), 0)
        width = cgutils.unpack_tuple(builder, context.make_array(signature.args[0])(
            context, builder, args[0]).shape, 2)[1]
        wide = cgutils.unpack_tuple(builder, context.make_array(signature.args[3])(
            context, builder, args[3]).shape, 2)[1]
        count = context.cast(builder, args[1], signature.args[1], types.intp)
        has = builder.load(context.make_array(signature.args[2])(context, builder, args[2]).data)
        return functools.reduce(builder.and_, [
            builder.icmp_signed("==", count, ir.Constant(count.type, ROWS)),
            builder.icmp_unsigned("==", has, ir.Constant(has.type, 0)),
            builder.icmp_signed("==", width, wide)])

    return types.boolean(values, nr, flags, buf), codegen


_I32X8 = ir.VectorType(ir.IntType(32), 8)
#: Lane ``i`` of :func:`_sum8`'s result is the sum of its input ``_SUM8_ORDER[i]``.
_SUM8_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)


def _ir_function(builder, name, ret, args):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args), name)


def _fmuladd(builder, a, b, c):
    """``a * b + c``, fused where the CPU has FMA (``llvm.fmuladd``)."""
    return builder.call(_ir_function(builder, "llvm.fmuladd.v8f64", _VD, [_VD] * 3), [a, b, c])


def _lane_mask(builder, left, lanes=8):
    """The ``<lanes x i1>`` mask of lanes ``i < left``."""
    vector = ir.VectorType(left.type, lanes)
    return builder.icmp_signed("<", ir.Constant(vector, list(range(lanes))),
                               _splat(builder, left, lanes))


def _vload(builder, pointer, mask=None):
    """Eight float64 from ``pointer``; with ``mask``, the masked lanes only (others 0)."""
    pointer = builder.bitcast(pointer, _VD.as_pointer())
    if mask is None:
        return builder.load(pointer, align=8)
    load = _ir_function(builder, "llvm.masked.load.v8f64.p0v8f64", _VD,
                        [_VD.as_pointer(), _I32, ir.VectorType(ir.IntType(1), 8), _VD])
    return builder.call(load, [pointer, ir.Constant(_I32, 8), mask, ir.Constant(_VD, [0.0] * 8)])


def _vstore(builder, value, pointer, mask=None):
    pointer = builder.bitcast(pointer, _VD.as_pointer())
    if mask is None:
        builder.store(value, pointer, align=8)
        return
    store = _ir_function(builder, "llvm.masked.store.v8f64.p0v8f64", ir.VoidType(),
                         [_VD, _VD.as_pointer(), _I32, ir.VectorType(ir.IntType(1), 8)])
    builder.call(store, [value, pointer, ir.Constant(_I32, 8), mask])


def _sum8(builder, vectors):
    """Eight vectors to one vector of their eight sums (lane order :data:`_SUM8_ORDER`):
    three levels of two shuffles and one add, 21 µops where eight separate horizontal sums
    take 48."""
    def step(a, b, low, high):
        x = builder.shuffle_vector(a, b, ir.Constant(_I32X8, low))
        y = builder.shuffle_vector(a, b, ir.Constant(_I32X8, high))
        return builder.fadd(x, y, flags=("reassoc", "nsz"))

    level = [step(vectors[i], vectors[i + 1], [0, 1, 2, 3, 8, 9, 10, 11],
                  [4, 5, 6, 7, 12, 13, 14, 15]) for i in range(0, 8, 2)]
    level = [step(level[i], level[i + 1], [0, 1, 8, 9, 4, 5, 12, 13],
                  [2, 3, 10, 11, 6, 7, 14, 15]) for i in range(0, 4, 2)]
    return step(level[0], level[1], [0, 8, 2, 10, 4, 12, 6, 14], [1, 9, 3, 11, 5, 13, 7, 15])


def _store_lanes(builder, vector, lanes, pointer):
    """Store the first ``lanes`` (8 or 4) values of ``vector`` at ``pointer``."""
    if lanes == 8:
        _vstore(builder, vector, pointer)
        return
    half = builder.shuffle_vector(vector, ir.Constant(_VD, ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, lanes), list(range(lanes))))
    builder.store(half, builder.bitcast(pointer, half.type.as_pointer()), align=8)


def _row_pointers(context, builder, array_type, array, first, count):
    """Pointers to rows ``first .. first + count`` of a C-contiguous 2-D array, and its
    row length."""
    data = context.make_array(array_type)(context, builder, array)
    width = cgutils.unpack_tuple(builder, data.shape, 2)[1]
    rows = [builder.gep(data.data, [builder.mul(builder.add(first, ir.Constant(first.type, r)),
                                                width)]) for r in range(count)]
    return rows, width


def _block_operands(context, builder, signature, args, columns):
    """Unpack the arguments ``(x, W, c0, small)`` of a block intrinsic: the pointers to the
    four rows at address ``x`` (:func:`_row_address`), ``m`` values long and ``m`` apart,
    ``m`` the row length of ``W`` (``V`` or ``G``); the pointers to rows ``c0 ..`` of ``W``;
    the ``(k, 4)`` array ``small`` (``p`` or ``q``, one row per column, one column per row
    of ``x``), and a function giving the address of ``small[c0 + c, r]``."""
    intp = context.get_value_type(types.intp)
    first = context.cast(builder, args[2], signature.args[2], types.intp)
    wide, m = _row_pointers(context, builder, signature.args[1], args[1], first, columns)
    base = context.cast(builder, args[0], signature.args[0], types.intp)
    pointer = ir.DoubleType().as_pointer()
    rows = [builder.inttoptr(builder.add(base, builder.mul(m, ir.Constant(intp, 8 * r))),
                             pointer) for r in range(ROWS)]
    element = _small_element(context, builder, signature.args[3], args[3], first)
    return rows, m, wide, element


def _small_element(context, builder, small_type, small, first):
    """A function giving the address of ``small[first + c, r]`` of a C-contiguous ``(k, 4)``
    array (``p`` or ``q``)."""
    intp = context.get_value_type(types.intp)
    data = context.make_array(small_type)(context, builder, small).data

    def element(r, c):
        at = builder.add(builder.mul(builder.add(first, ir.Constant(intp, c)),
                                     ir.Constant(intp, ROWS)), ir.Constant(intp, r))
        return builder.gep(data, [at])

    return element


def _require_block(name, x, W, small):
    """Type check of a block intrinsic: ``x`` an address, ``W`` and ``small`` C-contiguous
    float64 arrays."""
    if not isinstance(x, types.Integer):
        raise numba.core.errors.TypingError(f"{name} takes the rows' address, got {x}")
    _require_contiguous(name, W, small)
    if W.dtype != types.float64 or small.dtype != types.float64:
        raise numba.core.errors.TypingError(f"{name} needs float64 arrays")


def _vector_loop(builder, m, body):
    """Call ``body(j, mask)`` for ``j = 0, 8, ...`` over ``m`` values: whole vectors with
    ``mask=None``, then the last ``m % 8`` values once with a lane mask (no scalar tail)."""
    full = builder.sub(m, builder.srem(m, ir.Constant(m.type, 8)))
    with cgutils.for_range_slice(builder, ir.Constant(m.type, 0), full,
                                 ir.Constant(m.type, 8), m.type) as (j, _):
        body(j, None)
    left = builder.sub(m, full)
    with builder.if_then(builder.icmp_signed(">", left, ir.Constant(m.type, 0))):
        body(full, _lane_mask(builder, left))


def _projection(builder, columns, vs, element, run):
    """The body of the projection intrinsics: ``4 * columns`` accumulators; ``run(fma)``
    calls ``fma(j, mask, xv)`` for each vector ``j`` of the four rows' values ``xv``; the
    accumulators are summed eight at a time by :func:`_sum8` into one vector stored whole
    at ``element(0, c)``, ``p`` holding a column's four rows side by side."""
    pairs = [(r, c) for c in range(columns) for r in range(ROWS)]
    acc = {pair: cgutils.alloca_once_value(builder, ir.Constant(_VD, [0.0] * 8))
           for pair in pairs}

    def fma(j, mask, xv):
        for c in range(columns):
            vv = _vload(builder, builder.gep(vs[c], [j]), mask)
            for r in range(ROWS):
                builder.store(_fmuladd(builder, xv[r], vv, builder.load(acc[r, c])), acc[r, c])

    run(fma)
    for start in range(0, len(pairs), 8):  # two columns' four rows per store
        chunk = pairs[start : start + 8]
        inputs = [ir.Constant(_VD, [0.0] * 8)] * 8
        for lane, pair in enumerate(chunk):
            inputs[_SUM8_ORDER[lane]] = builder.load(acc[pair])
        _store_lanes(builder, _sum8(builder, inputs), len(chunk), element(*chunk[0]))


def _project_block(columns):
    """An intrinsic ``(x, VT, c0, p)``: ``p[c0 + c, r] = x[r] . VT[c0 + c]`` for the four
    rows ``x[r]`` at address ``x`` (:func:`_block_operands`) and ``columns`` columns.

    Written in LLVM IR: the ``4 * columns`` accumulators are 512-bit registers, each ``VT``
    vector is loaded once for four rows, a row's last ``m % 8`` values are one masked load
    (numba's loops finish with a scalar loop), and the accumulators are summed eight at a
    time by :func:`_sum8` into one vector stored whole: ``p`` holds a column's four rows
    side by side, so two columns are eight adjacent values (no per-value extract).
    """
    @intrinsic
    def project(typingctx, x, VT, c0, p):
        _require_block("_project_block", x, VT, p)

        def codegen(context, builder, signature, args):
            rows, m, vs, element = _block_operands(context, builder, signature, args, columns)

            def run(fma):
                def body(j, mask):
                    fma(j, mask, [_vload(builder, builder.gep(rows[r], [j]), mask)
                                  for r in range(ROWS)])

                _vector_loop(builder, m, body)

            _projection(builder, columns, vs, element, run)
            return context.get_dummy_value()

        return types.void(x, VT, c0, p), codegen

    return project


def _codes_fused(values):
    """Whether rows of ``values``' type (a numba array type) are converted inside the
    projection loop (:func:`_project_codes`): int8 and packed rows on AVX-512 CPUs."""
    return PERMUTE and values.dtype in _CODES


def _project_codes(columns):
    """An intrinsic ``(values, i0, fill, flags, VT, p, buf)``: the first ``columns``
    columns of :func:`_project_block` for rows ``i0 .. i0 + 4`` of int8 dosages (only
    -1..2) or packed codes, converted in the same loop (:func:`_decode8`; missing calls
    read ``fill[i0 + r]`` when ``flags[0]``, else -1) and stored into ``buf`` for the
    update. The conversion's permutes then interleave with the FMAs instead of running as
    a loop of their own, and the converted rows are not read back for the projections. A
    row's last calls are read by one load ending at the row's last byte; ``buf``'s columns
    past the calls get 0. Only for groups :func:`_codes_usable` accepts; for other rows
    (:func:`_codes_fused` false) the intrinsic is empty, so that one loop serves every
    dtype.
    """
    @intrinsic
    def project(typingctx, values, i0, fill, flags, VT, p, buf):
        _require_contiguous("_project_codes", values, fill, flags, VT, p, buf)
        dtype = values.dtype
        signature = types.void(values, i0, fill, flags, VT, p, buf)
        if not _codes_fused(values):
            return signature, lambda context, builder, sig, args: context.get_dummy_value()

        def codegen(context, builder, signature, args):
            intp = context.get_value_type(types.intp)
            zero = ir.Constant(intp, 0)
            src = context.make_array(signature.args[0])(context, builder, args[0])
            nbytes = cgutils.unpack_tuple(builder, src.shape, 2)[1]
            first = context.cast(builder, args[1], signature.args[1], types.intp)
            vs, m = _row_pointers(context, builder, signature.args[4], args[4], zero, columns)
            out, _ = _row_pointers(context, builder, signature.args[6], args[6], zero, ROWS)
            rows, _ = _row_pointers(context, builder, signature.args[0], args[0], first, ROWS)
            fills = context.make_array(signature.args[2])(context, builder, args[2]).data
            has = context.make_array(signature.args[3])(context, builder, args[3]).data
            has_fill = builder.icmp_unsigned("!=", builder.load(has), ir.Constant(
                has.type.pointee, 0))
            every = ir.Constant(ir.VectorType(ir.IntType(1), ROWS), [1] * ROWS)
            missing = _row_vector(builder, fills, first, has_fill, every, -1.0)
            tables = [_code_table(builder, dtype, builder.extract_element(
                missing, ir.Constant(_I32, r))) for r in range(ROWS)]
            per_byte = 4 if dtype == types.uint8 else 1
            load_bytes = _CODES[dtype][0] // 8
            calls = builder.mul(nbytes, ir.Constant(intp, per_byte))
            whole = builder.sub(calls, builder.srem(calls, ir.Constant(intp, 8)))
            whole = builder.select(builder.icmp_signed("<", whole, m), whole, m)
            element = _small_element(context, builder, signature.args[5], args[5], zero)

            def run(fma):
                def body(j, at, drop):
                    xv = []
                    for r in range(ROWS):
                        value = _decode8(builder, builder.gep(rows[r], [at]), dtype, tables[r],
                                         drop)
                        _vstore(builder, value, builder.gep(out[r], [j]))
                        xv.append(value)
                    fma(j, None, xv)

                step = ir.Constant(intp, 8)
                with cgutils.for_range_slice(builder, zero, whole, step, intp) as (j, _):
                    body(j, builder.udiv(j, ir.Constant(intp, per_byte)), None)
                with builder.if_then(builder.icmp_signed("<", whole, m)):
                    last = builder.sub(nbytes, ir.Constant(intp, load_bytes))
                    skip = builder.sub(builder.udiv(whole, ir.Constant(intp, per_byte)), last)
                    body(whole, last, builder.mul(skip, ir.Constant(intp, 8)))

            _projection(builder, columns, vs, element, run)
            return context.get_dummy_value()

        return signature, codegen

    return project


@intrinsic
def _codes_usable(typingctx, values, i0, nr, VT, buf):
    """Whether :func:`_project_codes` takes the group of rows ``i0 .. i0 + nr``: a whole
    group of int8 or packed rows (:func:`_codes_fused`; constant false for others) whose
    ``VT`` and ``buf`` rows are the calls padded to whole vectors, with at least 16 int8
    bytes (the range check's 64 per group) or 2 packed bytes (the last load) per row, and,
    for int8, only -1..2 in the group (:func:`_span_in_range`; other dosages take
    :func:`_load_rows`)."""
    _require_contiguous("_codes_usable", values, VT, buf)
    fused = _codes_fused(values)
    dtype = values.dtype

    def codegen(context, builder, signature, args):
        if not fused:
            return ir.Constant(ir.IntType(1), 0)
        intp = context.get_value_type(types.intp)
        src = context.make_array(signature.args[0])(context, builder, args[0])
        nbytes = cgutils.unpack_tuple(builder, src.shape, 2)[1]
        m = cgutils.unpack_tuple(builder, context.make_array(signature.args[3])(
            context, builder, args[3]).shape, 2)[1]
        width = cgutils.unpack_tuple(builder, context.make_array(signature.args[4])(
            context, builder, args[4]).shape, 2)[1]
        first = context.cast(builder, args[1], signature.args[1], types.intp)
        count = context.cast(builder, args[2], signature.args[2], types.intp)
        calls = builder.mul(nbytes, ir.Constant(intp, 4 if dtype == types.uint8 else 1))

        def constant(value):
            return ir.Constant(intp, value)

        checks = [builder.icmp_signed("==", count, constant(ROWS)),
                  builder.icmp_signed("==", builder.srem(m, constant(8)), constant(0)),
                  builder.icmp_signed("<=", calls, m),
                  builder.icmp_signed("<", m, builder.add(calls, constant(8))),
                  builder.icmp_signed("==", width, m),
                  builder.icmp_signed(">=", nbytes, constant(16 if dtype == types.int8 else 2))]
        usable = functools.reduce(builder.and_, checks)
        if dtype != types.int8:
            return usable
        result = cgutils.alloca_once_value(builder, usable)
        with builder.if_then(usable):
            base = builder.gep(src.data, [builder.mul(first, nbytes)])
            builder.store(_span_in_range(builder, base, builder.mul(count, nbytes)), result)
        return builder.load(result)

    return types.boolean(values, i0, nr, VT, buf), codegen


def _scatter_block(columns):
    """An intrinsic ``(x, GT, c0, q)``: ``GT[c0 + c] += sum_r q[c0 + c, r] x[r]`` for the
    four rows at address ``x`` and ``columns`` columns (a rank-4 update), in LLVM IR as
    :func:`_project_block`: each ``GT`` vector loaded and stored once for four rows, the
    last ``m % 8`` values by one masked load and store."""
    @intrinsic
    def scatter(typingctx, x, GT, c0, q):
        _require_block("_scatter_block", x, GT, q)

        def codegen(context, builder, signature, args):
            rows, m, gs, element = _block_operands(context, builder, signature, args, columns)
            qs = {(r, c): _splat(builder, builder.load(element(r, c)), 8)
                  for r in range(ROWS) for c in range(columns)}

            def body(j, mask):
                xv = [_vload(builder, builder.gep(rows[r], [j]), mask) for r in range(ROWS)]
                for c in range(columns):
                    pointer = builder.gep(gs[c], [j])
                    g = _vload(builder, pointer, mask)
                    for r in range(ROWS):
                        g = _fmuladd(builder, xv[r], qs[r, c], g)
                    _vstore(builder, g, pointer, mask)

            _vector_loop(builder, m, body)
            return context.get_dummy_value()

        return types.void(x, GT, c0, q), codegen

    return scatter


_project1, _project2, _project4, _project5 = (_project_block(c) for c in (1, 2, 4, 5))
_scatter1, _scatter2, _scatter4, _scatter5 = (_scatter_block(c) for c in (1, 2, 4, 5))
_codes1, _codes2, _codes4, _codes5 = (_project_codes(c) for c in (1, 2, 4, 5))


def _row_vector(builder, array, at, has, live, otherwise):
    """Four float64 of ``array`` from ``at`` when ``has`` (an ``i1``), the lanes of ``live``
    only, the others ``otherwise``. Without ``has`` nothing is read: a masked load from an
    empty array's pointer plus ``at`` (a masked-off address outside the process's pages)
    costs a microcode assist on every call (float64 PCA ran 6-10 % slower with it)."""
    v4 = ir.VectorType(ir.DoubleType(), ROWS)
    default = ir.Constant(v4, [otherwise] * ROWS)
    result = cgutils.alloca_once_value(builder, default)
    with builder.if_then(has, likely=True):
        load = _ir_function(builder, "llvm.masked.load.v4f64.p0v4f64", v4,
                            [v4.as_pointer(), _I32, ir.VectorType(ir.IntType(1), ROWS), v4])
        pointer = builder.bitcast(builder.gep(array, [at]), v4.as_pointer())
        builder.store(builder.call(load, [pointer, ir.Constant(_I32, 8), live, default]),
                      result)
    return builder.load(result)


@intrinsic
def _thin_group(typingctx, p, q, center, scale, flags, i0, nr, vsum, shift, acc):
    """The thin per-row products of the group of rows ``i0 .. i0 + nr`` (:func:`pca`).

    For column ``c`` and row ``r`` with centre ``c_r`` and scale ``s_r`` (0 and 1 when the
    block has none; ``flags[1]``, ``flags[2]``): ``t = (p[c, r] - c_r vsum[c]) s_r -
    shift[c]`` is added to ``acc[0, c, r]`` and its square to ``acc[1, c, r]``, ``q[c, r]
    = s_r t``, and ``c_r q[c, r]`` is added to ``acc[2, c, r]``; rows ``r >= nr`` (past the
    block's end) get ``t = q = 0``.

    ``p``, ``q`` and ``acc`` hold a column's four rows side by side, so each step is one
    four-wide vector operation per column, in LLVM IR: numba's loop stayed scalar (LLVM
    cannot prove that the small arrays do not overlap), four times the operations. The four
    centres and scales are read by masked loads (nothing read past the block's end or from
    an empty array).
    """
    _require_contiguous("_thin_group", p, q, center, scale, flags, vsum, shift, acc)

    def codegen(context, builder, signature, args):
        arrays = {name: context.make_array(signature.args[i])(context, builder, args[i])
                  for i, name in ((0, "p"), (1, "q"), (2, "center"), (3, "scale"),
                                  (4, "flags"), (7, "vsum"), (8, "shift"), (9, "acc"))}
        data = {name: array.data for name, array in arrays.items()}
        k = cgutils.unpack_tuple(builder, arrays["p"].shape, 2)[0]
        first = context.cast(builder, args[5], signature.args[5], types.intp)
        count = context.cast(builder, args[6], signature.args[6], types.intp)
        intp = k.type
        live = _lane_mask(builder, count, ROWS)

        def flag(index):
            value = builder.load(builder.gep(data["flags"], [ir.Constant(intp, index)]))
            return builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))

        zero4 = ir.Constant(ir.VectorType(ir.DoubleType(), ROWS), [0.0] * ROWS)
        centre4 = _row_vector(builder, data["center"], first, flag(1), live, 0.0)
        scale4 = builder.select(live, _row_vector(builder, data["scale"], first, flag(2), live,
                                                  1.0),
                                zero4)
        alive4 = builder.select(live, ir.Constant(zero4.type, [1.0] * ROWS), zero4)
        fl = ("reassoc", "contract", "nsz")
        v4 = zero4.type.as_pointer()

        with cgutils.for_range(builder, k) as loop:  # column c
            c = loop.index
            v = _splat(builder, builder.load(builder.gep(data["vsum"], [c])), ROWS)
            offset = _splat(builder, builder.load(builder.gep(data["shift"], [c])), ROWS)
            at = builder.mul(c, ir.Constant(intp, ROWS))

            def pointer(name, plane=None):
                row = at if plane is None else builder.add(
                    at, builder.mul(k, ir.Constant(intp, plane * ROWS)))
                return builder.bitcast(builder.gep(data[name], [row]), v4)

            t = builder.fsub(builder.load(pointer("p"), align=8),
                             builder.fmul(centre4, v, flags=fl), flags=fl)
            t = builder.fsub(builder.fmul(t, scale4, flags=fl),
                             builder.fmul(offset, alive4, flags=fl), flags=fl)
            w = builder.fmul(t, scale4, flags=fl)
            builder.store(w, pointer("q"), align=8)
            for plane, term in enumerate((t, builder.fmul(t, t, flags=fl),
                                          builder.fmul(centre4, w, flags=fl))):
                target = pointer("acc", plane)
                builder.store(builder.fadd(builder.load(target, align=8), term, flags=fl),
                              target, align=8)
        return context.get_dummy_value()

    return types.void(p, q, center, scale, flags, i0, nr, vsum, shift, acc), codegen
