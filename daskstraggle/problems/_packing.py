"""The 2-bit genotype packing, now :mod:`daskstraggle._packing` (below ``data/`` and
``problems/``); its names stay importable from here."""

from daskstraggle._packing import MISSING_CODE, pack_dosages, packed_width, unpack_dosages

__all__ = ["MISSING_CODE", "pack_dosages", "packed_width", "unpack_dosages"]
