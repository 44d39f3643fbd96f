"""Data layer: open any supported input as a row-partitioned Matrix; dataset recipes.

``open_matrix`` reads its inputs with the data source backends of
:mod:`daskstraggle.data.backends` (``list_sources()``; others register with
``register_source`` or the ``daskstraggle.sources`` entry-point group).
"""

from __future__ import annotations

from daskstraggle.data.backends import (
    OpenRequest,
    SourceBackend,
    get_source,
    list_sources,
    register_source,
)
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
