"""Data layer: open any supported input as a row-partitioned Matrix; dataset recipes."""

from __future__ import annotations

from daskstraggle.data.matrix import Matrix, open_matrix, partition_bounds

__all__ = ["Matrix", "open_matrix", "partition_bounds"]
