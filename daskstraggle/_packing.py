"""2-bit genotype storage: four dosage calls per byte, as PLINK's .bed keeps them.

Codes 0, 1 and 2 are the dosages of a call (diploid or haploid), code 3 is a missing call.
Rows (variants) are packed along the sample axis, the first sample of a byte in its two
lowest bits; a row of ``m`` samples takes ``ceil(m / 4)`` bytes, the unused codes of its
last byte are 0.
"""

from __future__ import annotations

import numpy as np

from daskstraggle.errors import InvalidDataError

__all__ = ["MISSING_CODE", "pack_dosages", "packed_width", "unpack_dosages"]

#: The 2-bit code of a missing call.
MISSING_CODE = 3
#: Bit offsets of the four codes in a byte (first sample lowest).
_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)


def packed_width(n_columns: int) -> int:
    """Return the bytes per packed row of ``n_columns`` calls (``ceil(n_columns / 4)``)."""
    return -(-int(n_columns) // 4)


def pack_dosages(dosages: np.ndarray) -> np.ndarray:
    """Pack integer dosages (negative: missing) into uint8 rows of 2-bit codes, four per
    byte; InvalidDataError for a dosage above 2 or a non-integer dtype."""
    values = np.asarray(dosages)
    if values.dtype.kind not in "iu":
        raise InvalidDataError(
            f"Packed genotype storage holds integer dosages 0-2; got dtype {values.dtype} "
            "(calls of lower ploidy scaled to fractions). Use genotype_storage='int8' "
            "(CLI: drop --packed-genotypes)."
        )
    if values.size and int(values.max()) > 2:
        raise InvalidDataError(
            f"Packed genotype storage holds dosages 0-2 in 2 bits; got a dosage of "
            f"{int(values.max())} (ploidy above 2). Use genotype_storage='int8' "
            "(CLI: drop --packed-genotypes)."
        )
    n_rows, n_columns = values.shape
    codes = np.where(values < 0, MISSING_CODE, values).astype(np.uint8)
    width = packed_width(n_columns)
    padded = np.zeros((n_rows, 4 * width), dtype=np.uint8)
    padded[:, :n_columns] = codes
    quads = padded.reshape(n_rows, width, 4) << _SHIFTS
    return np.bitwise_or.reduce(quads, axis=2).astype(np.uint8)


def unpack_dosages(packed: np.ndarray, n_columns: int) -> np.ndarray:
    """Return the int8 dosages (-1 for missing) of ``n_columns`` calls per packed row."""
    codes = (packed[:, :, None] >> _SHIFTS) & np.uint8(3)
    codes = codes.reshape(packed.shape[0], -1)[:, :n_columns].astype(np.int8)
    codes[codes == MISSING_CODE] = -1
    return codes
