"""Contig names as plink2 writes them (``chr22`` is ``22``, ``chrM`` is ``MT``).

Follows plink-ng's ``GetChrCodeRaw`` (human set) and ``--output-chr MT``, as measured with
PLINK v2.00a3.5.
"""

from __future__ import annotations

import re

__all__ = ["chrom_code"]

#: Letter codes (after an optional ``chr``), case-folded, and Oxford's ``0X``/``0Y``/``0M``.
_LETTERS = {"X": "X", "Y": "Y", "XY": "XY", "M": "MT", "MT": "MT",
            "0X": "X", "0Y": "Y", "0M": "MT"}
#: Numbers past the 22 autosomes.
_NUMBERS = {23: "X", 24: "Y", 25: "XY", 26: "MT", 27: "PAR1", 28: "PAR2"}
_DIGITS = re.compile("[0-9]{1,2}")


def chrom_code(name: str) -> str:
    """Return contig ``name`` as plink2 writes it (``--output-chr MT``, its default).

    Two names are the same chromosome for plink2 when their codes are equal; this is
    how variant ids (``CHROM:POS:REF:ALT``) and a fit's variant keys are spelled.

    Parameters
    ----------
    name : str
        A contig name as a VCF, ``.bim`` or ``.pvar`` gives it.

    Returns
    -------
    code : str
        ``1`` ... ``22``, ``X``, ``Y``, ``XY``, ``MT``, ``PAR1``, ``PAR2`` or ``0`` for a
        name plink2 reads as a chromosome code; else ``name`` unchanged (plink2 keeps
        such contigs, ``--allow-extra-chr``, verbatim).

    Examples
    --------
    >>> [chrom_code(c) for c in ["chr22", "01", "chrX", "23", "chrM", "26", "chr1_random"]]
    ['22', '1', 'X', 'X', 'MT', 'MT', 'chr1_random']
    """
    upper = name.upper()
    if upper in ("PAR1", "PAR2"):  # without a chr prefix only
        return upper
    body = upper[3:] if upper.startswith("CHR") else upper
    if _DIGITS.fullmatch(body):
        number = int(body)
        return str(number) if number <= 22 else _NUMBERS.get(number, name)
    return _LETTERS.get(body, name)
