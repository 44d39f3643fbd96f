"""Genotype calls to int8 dosages in one compiled pass (numba), when it applies.

:func:`decode_calls` is the fast path of :func:`daskstraggle.data.sources.genotype_rows`:
one pass over ``call_genotype`` gives the dosages and, per variant, the number of
non-missing calls and their dosage sum. It returns None when the numpy path must run
instead: numba missing or disabled (``DASKSTRAGGLE_NUMBA=0``, as for the block kernels),
calls that are not a C-contiguous integer array, or a call of lower ploidy whose scaled
dosage is a fraction (the float64 case of ``genotype_rows``).

The module ``_numba_decode`` is imported, and the decoder compiled or loaded from numba's
on-disk cache, on the first call; numba's warnings are silenced meanwhile and a package
directory without write access moves the cache to the temporary directory (as
:mod:`daskstraggle.problems._kernels` does).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np

from daskstraggle.problems._kernels import default_implementation, import_numba_module

__all__ = ["decode_calls"]

_lock = threading.Lock()
_compiled: set[Any] = set()


def _numba_module() -> Any:
    return import_numba_module("daskstraggle.data._numba_decode")


def decode_calls(
    calls: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
    """Decode calls into int8 dosages with numba, or return None (use the numpy path).

    Parameters
    ----------
    calls : ndarray of shape (n_variants, n_samples, ploidy)
        Integer allele indices as in VCF Zarr ``call_genotype``.

    Returns
    -------
    decoded : tuple or None
        ``(dosage, counted, sums, any_missing)``: int8 dosages (-1 where missing), int64
        non-missing calls and int64 dosage sums per variant, and whether any call is
        missing. None when numba does not apply (see the module docstring).
    """
    if (calls.ndim != 3 or calls.dtype.kind not in "iu" or calls.dtype.itemsize > 4
            or not calls.flags.c_contiguous or default_implementation() != "numba"):
        return None
    module = _numba_module()
    n_variants, n_samples = calls.shape[:2]
    dosage = np.empty((n_variants, n_samples), dtype=np.int8)
    counted = np.empty(n_variants, dtype=np.int64)
    sums = np.empty(n_variants, dtype=np.int64)
    key = calls.dtype
    if key not in _compiled:
        with _lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            status = module.decode(calls, dosage, counted, sums)
            _compiled.add(key)
    else:
        status = module.decode(calls, dosage, counted, sums)
    if status == module.FRACTIONAL:
        return None
    return dosage, counted, sums, status == module.MISSING
