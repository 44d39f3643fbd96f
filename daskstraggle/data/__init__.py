"""Data layer: open any supported input as a row-partitioned Matrix; dataset recipes.

``open_matrix`` reads its inputs with the data source backends of
:mod:`daskstraggle.data.backends` (``list_sources()``; others register with
``register_source`` or the ``daskstraggle.sources`` entry-point group).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daskstraggle.data.backends import (
    OpenRequest,
    SourceBackend,
    get_source,
    list_sources,
    register_source,
)

if TYPE_CHECKING:  # what type checkers see; at run time they load on first use
    from daskstraggle.data.matrix import Matrix, open_matrix, partition_bounds

__all__ = [
    "Matrix",
    "OpenRequest",
    "SourceBackend",
    "get_source",
    "list_sources",
    "open_matrix",
    "partition_bounds",
    "register_source",
]

#: Loaded on first use (PEP 562): the matrix module imports dask, xarray and numpy, which
#: importing a submodule (``data.genotypes``'s option parsers, ``data.backends``) need not.
_LAZY = frozenset({"Matrix", "open_matrix", "partition_bounds"})


def __getattr__(name: str) -> object:
    """Load ``Matrix``, ``open_matrix`` or ``partition_bounds`` on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from daskstraggle.data import matrix

    value = getattr(matrix, name)
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    """List the public names, those not loaded yet included."""
    return sorted(set(globals()) | set(__all__))
