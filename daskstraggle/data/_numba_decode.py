"""Numba body of the genotype decoders (imported lazily by :mod:`._decode`, never directly).

A row of calls is decoded first as if no allele index were negative (one OR tells), and again
with the full rules only when one was.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

_JIT: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}

#: Return codes of :func:`decode`.
OK, MISSING, FRACTIONAL = 0, 1, 2
#: Allele index padding a call of lower ploidy (as ``sources.PADDING``).
_PADDING = -2


@numba.njit(**_JIT)
def _fast_row(calls, i, dosage, ploidy):
    """Decode row ``i`` as if no index were negative; return (dosage sum, OR of indices)."""
    n_samples = calls.shape[1]
    total = 0
    seen = 0
    if ploidy == 2:
        for j in range(n_samples):
            a = calls[i, j, 0]
            b = calls[i, j, 1]
            d = np.int8(a > 0) + np.int8(b > 0)
            dosage[i, j] = d
            total += d
            seen |= a | b
    else:
        for j in range(n_samples):
            d = 0
            for k in range(ploidy):
                a = calls[i, j, k]
                d += a > 0
                seen |= a
            dosage[i, j] = d
            total += d
    return total, seen


@numba.njit(**_JIT)
def _slow_row2(calls, i, dosage):
    """:func:`_slow_row` for diploid arrays, without branches (a haploid call is 0 or 2)."""
    n_samples = calls.shape[1]
    total = 0
    counted = 0
    seen = 0
    for j in range(n_samples):
        # int32 flags, not booleans: LLVM vectorises this form (4x faster measured)
        a = np.int32(calls[i, j, 0])
        b = np.int32(calls[i, j, 1])
        pad_a = np.int32(a == _PADDING)
        pad_b = np.int32(b == _PADDING)
        bad = ((np.int32(a < 0) & (1 - pad_a)) | (np.int32(b < 0) & (1 - pad_b))
               | (pad_a & pad_b))
        keep = 1 - bad
        d = (np.int32(a > 0) + np.int32(b > 0)) << (pad_a ^ pad_b)  # haploid: 0 or 2
        dosage[i, j] = np.int8(d * keep - bad)
        total += d * keep
        counted += keep
        seen |= a | b
    return total, counted, counted < n_samples, False, seen < 0


@numba.njit(**_JIT)
def _slow_row(calls, i, dosage, ploidy):
    """Decode row ``i`` call by call: (sum, counted, any missing, fractional, any negative)."""
    n_samples = calls.shape[1]
    if ploidy == 2:
        return _slow_row2(calls, i, dosage)
    total = 0
    counted = 0
    missing = False
    negative = False
    for j in range(n_samples):
        alt = 0
        real = 0
        bad = False
        for k in range(ploidy):
            a = calls[i, j, k]
            if a < 0:
                negative = True
            if a != _PADDING:
                real += 1
                if a > 0:
                    alt += 1
                elif a < 0:
                    bad = True
        if bad or real == 0:
            dosage[i, j] = -1
            missing = True
            continue
        d = alt
        if real < ploidy:
            scaled = alt * ploidy
            if scaled % real != 0:
                return total, counted, missing, True, negative
            d = scaled // real
        dosage[i, j] = d
        total += d
        counted += 1
    return total, counted, missing, False, negative


@numba.njit(**_JIT)
def decode(calls, dosage, counted, sums):
    """Write ``dosage`` (-1 missing), per-row non-missing ``counted`` and dosage ``sums``.

    Returns ``OK``, ``MISSING`` (a call is missing) or ``FRACTIONAL`` (a call of lower ploidy
    scales to a fraction: the outputs are incomplete, decode in float64).
    """
    n_variants, n_samples, ploidy = calls.shape
    status = OK
    slow = False  # the last row had a negative index: decode the next one fully at once
    for i in range(n_variants):
        if not slow:
            total, seen = _fast_row(calls, i, dosage, ploidy)
            if seen >= 0:
                sums[i] = total
                counted[i] = n_samples
                continue
        total, count, missing, fractional, slow = _slow_row(calls, i, dosage, ploidy)
        if fractional:
            return FRACTIONAL
        sums[i] = total
        counted[i] = count
        if missing:
            status = MISSING
    return status


#: ``.bed`` 2-bit code -> dosage (A1 count; -1 missing), dosage counted in the sum, called,
#: and our packed code (:mod:`daskstraggle._packing`: the dosage, 3 missing).
_BED_DOSAGE = np.array([2, -1, 1, 0], dtype=np.int8)
_BED_SUM = np.array([2, 0, 1, 0], dtype=np.int64)
_BED_CALLED = np.array([1, 0, 1, 1], dtype=np.int64)
_BED_PACKED = np.array([2, 3, 1, 0], dtype=np.uint8)
#: What :func:`bed_decode` writes to ``out``.
COUNTS, DOSAGES, PACKED = 0, 1, 2


@numba.njit(**_JIT)
def _put(out, mode, i, j, code):
    """Write the call ``code`` of row ``i`` as output column ``j``."""
    if mode == DOSAGES:
        out[i, j] = _BED_DOSAGE[code]
    elif mode == PACKED:
        out[i, j >> 2] |= _BED_PACKED[code] << ((j & 3) << 1)


@numba.njit(**_JIT)
def bed_decode(raw, n_samples, columns, mode, out, counted, sums):
    """Decode ``.bed`` rows at ``columns`` (empty: all ``n_samples``) into ``out`` as
    ``mode`` says (``COUNTS``: untouched; ``PACKED``: ``out`` zeros), with per-row non-missing
    ``counted`` and dosage ``sums``; return whether a call is missing."""
    whole = columns.shape[0] == 0
    n = n_samples if whole else columns.shape[0]
    any_missing = False
    for i in range(raw.shape[0]):
        total = 0
        called = 0
        for j in range(n):
            c = j if whole else columns[j]
            code = (raw[i, c >> 2] >> ((c & 3) << 1)) & 3
            total += _BED_SUM[code]
            called += _BED_CALLED[code]
            _put(out, mode, i, j, code)
        counted[i] = called
        sums[i] = total
        if called < n:
            any_missing = True
    return any_missing
