"""Coding schemes for exact (or covered) gradients from a subset of workers (pure numpy)."""

from __future__ import annotations

from daskstraggle.coding.base import (
    CodeAssignment,
    CodingScheme,
    get_scheme_class,
    list_schemes,
    make_scheme,
    register_scheme,
)
from daskstraggle.coding.bcc import BCC, HeterogeneousBCC, IdealMDS, coverage_time
from daskstraggle.coding.rcs import RCS, IncrementalDecoder, rcs_codewords
from daskstraggle.coding.repetition import (
    CyclicRepetition,
    FractionalRepetition,
    PartialStraggler,
    Uncoded,
)

__all__ = [
    "BCC",
    "RCS",
    "CodeAssignment",
    "CodingScheme",
    "CyclicRepetition",
    "FractionalRepetition",
    "HeterogeneousBCC",
    "IdealMDS",
    "IncrementalDecoder",
    "PartialStraggler",
    "Uncoded",
    "coverage_time",
    "get_scheme_class",
    "list_schemes",
    "make_scheme",
    "rcs_codewords",
    "register_scheme",
]
