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
from daskstraggle.coding.repetition import (
    CyclicRepetition,
    FractionalRepetition,
    PartialStraggler,
    Uncoded,
)

__all__ = [
    "BCC",
    "CodeAssignment",
    "CodingScheme",
    "CyclicRepetition",
    "FractionalRepetition",
    "HeterogeneousBCC",
    "IdealMDS",
    "PartialStraggler",
    "Uncoded",
    "coverage_time",
    "get_scheme_class",
    "list_schemes",
    "make_scheme",
    "register_scheme",
]
