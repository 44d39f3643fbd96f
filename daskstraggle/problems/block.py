"""The statistics of a row block (:func:`block_stats`), and the partition format's names
(:class:`Block`, :class:`MatrixStats`, :func:`check_float_range`, defined in
:mod:`daskstraggle._block` and importable from here)."""

from __future__ import annotations

import numpy as np

from daskstraggle._block import (
    _MAX_CLASSES,
    TILE_BYTES,
    Block,
    MatrixStats,
    _combine_sq_dev,
    check_float_range,
)

__all__ = ["TILE_BYTES", "Block", "MatrixStats", "block_stats", "check_float_range"]


def block_stats(block: Block) -> MatrixStats:
    """Return the :class:`MatrixStats` of one block (one pass over its tiles; the column
    moments from :func:`~daskstraggle.problems._kernels.column_moments` when it applies,
    else from numpy tiles, equal to rounding)."""
    from daskstraggle.problems._kernels import column_moments  # numba and BLAS when used

    # values near the float64 limits overflow or underflow here; check_float_range
    # refuses such matrices with one line when a problem is bound, so no warning
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        moments = column_moments(block)
        sums, sq_dev, sq = _tile_moments(block) if moments is None else moments
    counts = None
    label_sum = label_max_abs = 0.0
    if block.y is not None:
        label_sum = float(block.y.sum())
        label_max_abs = float(np.max(np.abs(block.y), initial=0.0))
        values, number = np.unique(block.y, return_counts=True)
        if len(values) <= _MAX_CLASSES:
            counts = {float(v): int(c) for v, c in zip(values, number, strict=True)}
    called, dead_rows = _call_counts(block)
    return MatrixStats(
        n_samples=block.n_rows,
        column_sums=sums,
        sq_norm=sq,
        label_counts=counts,
        label_sum=label_sum,
        column_sq_dev=sq_dev,
        column_max_abs=_column_max_abs(block),
        label_max_abs=label_max_abs,
        column_called=called,
        rows_without_call=dead_rows,
    )


def _call_counts(block: Block) -> tuple[np.ndarray | None, tuple[int, ...]]:
    """A genotype block's non-missing calls per column and its rows without a call
    (global indices); ``(None, ())`` for other blocks. Packed rows are read as they are
    stored (a missing call is code 3: both bits of its pair set), a tile of rows at a time."""
    if not block.is_packed and block.values.dtype != np.int8:
        return None, ()
    n_columns = block.n_features
    if block.fill is None:  # no missing call in the block
        return np.full(n_columns, block.n_rows, dtype=np.int64), ()
    missing = np.zeros(n_columns, dtype=np.int64)
    dead: list[int] = []
    for a in range(0, block.n_rows, _CALL_TILE):
        tile = block.values[a:a + _CALL_TILE]
        if block.is_packed:
            pairs = tile & (tile >> 1) & np.uint8(0x55)  # bit 2t set: code t is missing
            counts = np.empty((tile.shape[1], 4), dtype=np.int64)
            for t in range(4):
                counts[:, t] = ((pairs >> np.uint8(2 * t)) & np.uint8(1)).sum(axis=0,
                                                                              dtype=np.int64)
            missing += counts.reshape(-1)[:n_columns]
            per_row = _POPCOUNT[pairs].sum(axis=1, dtype=np.int64)
        else:
            absent = tile < 0
            missing += np.count_nonzero(absent, axis=0)
            per_row = np.count_nonzero(absent, axis=1)
        dead.extend(block.start + a + int(i) for i in np.flatnonzero(per_row == n_columns))
    return block.n_rows - missing, tuple(dead)


#: Set bits of each byte value.
_POPCOUNT = np.array([bin(v).count("1") for v in range(256)], dtype=np.uint8)
#: Rows per tile when counting a genotype block's calls.
_CALL_TILE = 1024


def _column_max_abs(block: Block) -> np.ndarray | None:
    """Largest ``|x|`` per column of a floating-point block without transforms, else None
    (other blocks hold bounded values)."""
    values = block.values
    plain = block.fill is None and block.center is None and block.scale is None
    if not plain or not np.issubdtype(values.dtype, np.floating):
        return None
    if block.n_rows == 0:
        return np.zeros(block.n_features)
    return np.maximum(values.max(axis=0), -values.min(axis=0)).astype(np.float64)


def _tile_moments(block: Block) -> tuple[np.ndarray, np.ndarray, float]:
    """Column sums, squared deviations (tiles merged pairwise) and ``|X|^2``, in numpy."""
    sums = np.zeros(block.n_features)
    sq_dev = np.zeros(block.n_features)
    sq = 0.0
    count = 0
    for a, b, tile in block.tiles():
        tile_sums = tile.sum(axis=0)
        deviation = tile - tile_sums / (b - a)
        sq_dev = _combine_sq_dev(count, sums, sq_dev, b - a, tile_sums,
                                 np.einsum("ij,ij->j", deviation, deviation))
        sums += tile_sums
        count += b - a
        sq += float(np.einsum("ij,ij->", tile, tile))
    return sums, sq_dev, sq
