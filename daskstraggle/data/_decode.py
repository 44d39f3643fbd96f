"""Genotype calls or ``.bed`` bytes to int8 dosages (or 2-bit codes) in one compiled pass.

Each function returns None when the numpy path must run (numba missing or disabled, or calls
it does not take); ``_numba_decode`` is compiled on the first call.
"""

from __future__ import annotations

import threading
import warnings
from functools import partial
from typing import Any

import numpy as np

from daskstraggle._numba import default_implementation, import_numba_module

__all__ = ["decode_bed", "decode_calls"]

_lock = threading.Lock()
_compiled: set[Any] = set()


_numba_module = partial(import_numba_module, "daskstraggle.data._numba_decode")


def _call(name: str, *args: Any) -> Any:
    """Run the compiled ``name`` (its first call per argument types under the lock, with
    numba's warnings silenced)."""
    function = getattr(_numba_module(), name)
    key = (name, *(a.dtype if isinstance(a, np.ndarray) else type(a) for a in args))
    if key in _compiled:
        return function(*args)
    with _lock, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = function(*args)
        _compiled.add(key)
    return out


def decode_bed(raw: np.ndarray, n_samples: int, columns: np.ndarray | None, *,
               storage: str | None = "int8",
               ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, bool] | None:
    """Decode ``.bed`` rows (at the samples ``columns``, None: all) in one compiled pass.

    Returns ``(values, counted, sums, any_missing)`` as :func:`decode_calls`, ``values`` int8
    dosages or our 2-bit codes as ``storage`` says (None: only the counts), or None when numba
    does not apply.
    """
    if default_implementation() != "numba":
        return None
    module = _numba_module()
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    n_variants = raw.shape[0]
    n = n_samples if columns is None else len(columns)
    mode, out = {"int8": (module.DOSAGES, np.empty((n_variants, n), dtype=np.int8)),
                 "packed": (module.PACKED, np.zeros((n_variants, -(-n // 4)), np.uint8)),
                 None: (module.COUNTS, np.empty((0, 0), dtype=np.int8))}[storage]
    picked = np.ascontiguousarray(np.empty(0) if columns is None else columns, dtype=np.int64)
    counted = np.empty(n_variants, dtype=np.int64)
    sums = np.empty(n_variants, dtype=np.int64)
    any_missing = _call("bed_decode", raw, n_samples, picked, mode, out, counted, sums)
    return (None if storage is None else out), counted, sums, bool(any_missing)


def decode_calls(
    calls: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
    """Decode calls (variants, samples, ploidy) into int8 dosages with numba.

    Returns ``(dosage, counted, sums, any_missing)``: dosages (-1 missing), the non-missing
    calls and their dosage sum per variant (int64), whether a call is missing; or None (the
    numpy path) without numba, for calls not a C-contiguous integer array, or when a call of
    lower ploidy scales to a fraction.
    """
    if (calls.ndim != 3 or calls.dtype.kind not in "iu" or calls.dtype.itemsize > 4
            or not calls.flags.c_contiguous or default_implementation() != "numba"):
        return None
    module = _numba_module()
    n_variants, n_samples = calls.shape[:2]
    dosage = np.empty((n_variants, n_samples), dtype=np.int8)
    counted = np.empty(n_variants, dtype=np.int64)
    sums = np.empty(n_variants, dtype=np.int64)
    status = _call("decode", calls, dosage, counted, sums)
    if status == module.FRACTIONAL:
        return None
    return dosage, counted, sums, status == module.MISSING
