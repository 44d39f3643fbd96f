"""The population count the compiled KING and LD passes share (a SWAR sum that LLVM compiles
to the CPU's popcount instruction; numba has no ``np.bitwise_count``)."""

from __future__ import annotations

import numba
import numpy as np

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@numba.njit(inline="always", cache=True, nogil=True, error_model="numpy", boundscheck=False)
def popcount(x):
    """The number of set bits of a uint64, as a uint64."""
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return (x * _H01) >> np.uint64(56)
