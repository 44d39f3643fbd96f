"""A BLAS ``syrk`` that releases the GIL, for Gram tiles folded in several threads.

``scipy.linalg.blas.dsyrk`` (f2py) holds the GIL for the whole call; scipy's own routine
(``scipy.linalg.cython_blas``) called through ``ctypes`` does not. If it cannot be reached
the f2py wrapper is used.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import numpy as np

__all__ = ["syrk_update"]


@functools.cache
def _dsyrk() -> Callable[..., None] | None:
    """Return scipy's ``dsyrk`` as a ctypes function (which releases the GIL), or None."""
    try:
        from scipy.linalg import cython_blas

        capsule = cython_blas.__pyx_capi__["dsyrk"]
        name = ctypes.pythonapi.PyCapsule_GetName
        name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        pointer = ctypes.pythonapi.PyCapsule_GetPointer
        pointer.restype, pointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                              ctypes.c_char_p]
        address = pointer(capsule, name(capsule))
    except Exception:  # pragma: no cover - a scipy without cython_blas
        return None
    integer, double = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_double)
    # dsyrk(uplo, trans, n, k, alpha, a, lda, beta, c, ldc), every argument by reference
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, integer, integer,
                                 double, ctypes.c_void_p, integer, double, ctypes.c_void_p,
                                 integer)
    return prototype(address)


def syrk_update(tile: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Add ``tile^T tile`` to the upper triangle of ``acc`` in place; return ``acc``.

    Parameters
    ----------
    tile : ndarray of shape (rows, d)
        float64 rows (made C-contiguous if they are not).
    acc : ndarray of shape (d, d)
        float64, Fortran-ordered; only its upper triangle is read and written.

    Returns
    -------
    acc : ndarray of shape (d, d)
        The same array (a new one only on the f2py fallback if ``acc`` is not writable
        in place).
    """
    if tile.shape[0] == 0:
        return acc
    tile = np.ascontiguousarray(tile, dtype=np.float64)
    routine = _dsyrk()
    if routine is None or not acc.flags.f_contiguous or acc.dtype != np.float64:
        import scipy.linalg.blas  # loaded when first needed

        # tile.T is Fortran-ordered (d, rows): syrk(trans=0) forms tile.T @ tile
        return scipy.linalg.blas.dsyrk(1.0, tile.T, beta=1.0, c=acc, trans=0, lower=0,
                                       overwrite_c=1)
    rows, d = tile.shape
    n, k, one = ctypes.c_int(d), ctypes.c_int(rows), ctypes.c_double(1.0)
    # in Fortran order the C-ordered tile is the (d, rows) matrix tile^T, leading dim d
    routine(b"U", b"N", ctypes.byref(n), ctypes.byref(k), ctypes.byref(one),
            tile.ctypes.data, ctypes.byref(n), ctypes.byref(one), acc.ctypes.data,
            ctypes.byref(n))
    return acc
