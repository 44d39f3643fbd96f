"""Data layer: open any supported input as a row-partitioned Matrix (backends:
:mod:`daskstraggle.data.backends`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from daskstraggle._lazy import attach
from daskstraggle.data.backends import (
    OpenRequest,
    SourceBackend,
    get_source,
    list_sources,
    register_source,
)

if TYPE_CHECKING:  # what type checkers see; at run time they load on first use
    from daskstraggle.data.matrix import Matrix, open_matrix, partition_bounds

__all__ = ["Matrix", "OpenRequest", "SourceBackend", "get_source", "list_sources", "open_matrix",
           "partition_bounds", "register_source"]

#: Loaded on first use (PEP 562): the matrix module imports dask, xarray and numpy, which
#: importing a submodule (``data.genotypes``'s option parsers, ``data.backends``) need not.
_LAZY = {"Matrix": "matrix", "open_matrix": "matrix", "partition_bounds": "matrix"}

__getattr__, __dir__ = attach(__name__, _LAZY, __all__)
